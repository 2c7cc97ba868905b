"""The script of an experiment recorded in benchmarks/RESULTS.md (2026-12-02), kept beside its
results; not a benchmark. Identify tl.sum's order over a [1, 4096] float32 tile with 8 warps (the rows kernel's tile sum)
by bitwise comparison against emulated trees; prints the layout Triton chose."""
import sys, json, torch, triton, triton.language as tl

@triton.jit
def ksum(X, Y, V: tl.constexpr, BLOCK_R: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, V)
    x = tl.load(X + r[:, None] * V + c[None, :])
    tl.store(Y + r, tl.sum(x, axis=1))

def emulate(x, spt, in_order):
    """x [n, 4096]; per thread spt contiguous elements x reps; lanes 32, warps 8; butterfly."""
    n, V = x.shape
    per = spt * 32 * 8
    reps = V // per
    # element (r, w, l, k) at column r*per + (w*32 + l)*spt + k
    e = x.reshape(n, reps, 8, 32, spt)
    regs = e.permute(0, 2, 3, 1, 4).reshape(n, 8, 32, reps * spt)  # register index r*spt + k
    if in_order == "k_slow":
        regs = e.permute(0, 2, 3, 4, 1).reshape(n, 8, 32, reps * spt)
    acc = regs[..., 0].clone()
    for i in range(1, regs.shape[-1]):
        acc = acc + regs[..., i]
    for off in (16, 8, 4, 2, 1):
        idx = torch.arange(32, device=x.device) ^ off
        acc = acc + acc[..., idx]
    lane0 = acc[..., 0]
    for off in (4, 2, 1):
        idx = torch.arange(8, device=x.device) ^ off
        lane0 = lane0 + lane0[..., idx]
    return lane0[..., 0]

torch.manual_seed(0)
n, V = 4096, 4096
res = {}
for name, x in (("exp_randn3", torch.exp(torch.randn(n, V, device="cuda") * 3)),
                ("randn", torch.randn(n, V, device="cuda")),
                ("peaked", torch.where(torch.rand(n, V, device="cuda") < 1e-3, 1.0, 1e-9 * torch.rand(n, V, device="cuda")))):
    y = torch.empty(n, device="cuda")
    ksum[(n,)](x, y, V=V, BLOCK_R=1, num_warps=8)
    row = {}
    for spt in (4, 8):
        for order in ("k_fast", "k_slow"):
            em = emulate(x, spt, order)
            row[f"spt{spt}_{order}"] = int((em != y).sum().item())
    seq = x.cumsum(1)[:, -1]
    row["sequential_mismatch"] = int((seq != y).sum().item())
    row["torch_sum_mismatch"] = int((x.sum(1) != y).sum().item())
    res[name] = row
    print(name, row, flush=True)
ck = list(ksum.device_caches.values())[0][0] if hasattr(ksum, "device_caches") else None
lay = []
if ck:
    for k, v in ck.items():
        lay = [l for l in v.asm["ttgir"].splitlines() if l.startswith("#") and "blocked" in l]
print("layout", lay)
res["layout"] = lay
json.dump(res, open(sys.argv[1], "w"), indent=1)
