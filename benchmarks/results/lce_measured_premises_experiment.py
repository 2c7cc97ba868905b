"""The script of an experiment recorded in benchmarks/RESULTS.md (2026-12-02; after the run only its
imports, this header and a dead expression were tidied), kept beside its results; not a benchmark. Experiment (not a Done-when figure): the a-posteriori CE bounds with premises measured on this
run: each logit's actual error |z - y| (the kernel's own stored logits, recomputed bitwise), the
device's tl.exp error (measured, x 1.05) and, separately, tl.sum's depth read from the compiled
layout (an assumption about Triton's lowering). N = 64, D = 4096, V = 128256, as the bench."""
import json, math, sys, torch
from ojas_kernels import linear_cross_entropy as lce
from ojas_ref.verification import error_bounds as eb
from ojas_ref.verification.lce_error import exact_gradients, gradient_sums, measured_exp_error
F64 = torch.float64
DEV = "cuda" if torch.cuda.is_available() else "cpu"
N, D, V = (64, 4096, 128256) if DEV == "cuda" else (16, 64, 700)
out = dict(rows=[])
rel, ab = measured_exp_error(DEV)
out["exp_rel_measured"] = rel
def factors(logp, keep, e, B, dtype, ue):
    p = logp.exp()
    em = torch.expm1(e)
    s1 = (p * em).sum(1, keepdim=True)
    inner = (s1 - p * em).clamp_min(0) + s1 * 1e-12
    E = (torch.exp(e) * inner + em * (1 - p + 4 * (V + 8) * 2.0**-53)) * eb._ROUND_UP
    E = torch.where(keep[:, None], E, torch.zeros_like(E))
    assert bool((E < 1).all())
    A = B - torch.log1p(-E)
    Am = -logp + A
    us, _ = eb._storage(dtype, "nearest")
    lk = math.log1p(eb._FP32_U) + math.log1p(ue)
    f = (1 + us) * torch.expm1((lk + A + eb._FP32_U * Am + eb._FP32_ETA) * eb._ROUND_UP) * eb._ROUND_UP * p
    return torch.where(keep[:, None], f, torch.zeros_like(f))
for dtype in (torch.float32, torch.bfloat16):
    for variant in ("normal", "peaked"):
        gen = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(N, D, device=DEV, generator=gen).to(dtype)
        w = torch.randn(V, D, device=DEV, generator=gen) * 0.02
        target = torch.randint(0, V, (N,), device=DEV, generator=gen)
        if variant == "peaked":
            w[target] += 0.05 * x.float() / x.float().norm(dim=1, keepdim=True) * D ** 0.5 / 8
        w = w.to(dtype)
        target[::8] = -100
        keep = target != -100
        cfg = lce.default_config(dtype, x.device)
        bv = cfg.rows.block_v
        # the kernel: loss per token and gradients
        opts = lce._Options(0.0, 0.0, None)
        loss = lce._three_products(x, w, None, target, -100, "sum", opts, (True, False, False), cfg).loss
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        lce.linear_cross_entropy(xr, wr, target, reduction="mean").backward()
        dh, dw = exact_gradients(x, w, target, "mean")
        eh, ew = (xr.grad.to(F64) - dh).abs(), (wr.grad.to(F64) - dw).abs()
        y = x.to(F64) @ w.to(F64).t()
        t0 = torch.where(keep, target, 0)
        ref = torch.logsumexp(y, 1) - y.gather(1, t0[:, None]).squeeze(1)
        etok = torch.where(keep, (loss.to(F64) - ref).abs(), torch.zeros_like(ref))
        el = etok.max().item()
        # the kernel's stored logits, twice: bitwise equal
        z1 = torch.empty(N, V, device=DEV, dtype=dtype); lce._mm_into(z1, x, w.t())
        z2 = torch.empty(N, V, device=DEV, dtype=dtype); lce._mm_into(z2, x, w.t())
        same = bool(torch.equal(z1, z2))
        e = (z1.to(F64) - y).abs()
        zmax = z1.abs().max().item()
        logp = torch.log_softmax(y, 1)
        (_, th, hh), (_, tw, hw) = gradient_sums(x, w, target)
        K = int(keep.sum())
        plan = lce._three_products_plan(N, D, V, x.element_size(), (True, True, False), cfg)
        row = dict(dtype=str(dtype), variant=variant, same_logits=same, max_logit_error=e.max().item(),
                   loss_observed=el, dh_observed=eh.max().item(), dw_observed=ew.max().item())
        for name, depth, ue in (("assumed", None, eb.LCE_EXP_ERROR), ("exp_measured", None, rel * 1.05),
                                ("exp_measured_depth31", min(31, bv - 1), rel * 1.05)):
            kw = {} if depth is None else dict(tile_sum_depth=depth)
            B = eb.linear_cross_entropy_lse_error_bound(V, 1, dtype=dtype, block_v=bv, exact_logits=True,
                                                        max_abs_logit=zmax, exp_error=ue, **kw)
            lb = eb.linear_cross_entropy_loss_posteriori_bound(logp.exp(), target, e, B)
            f = factors(logp, keep, e, B, dtype, ue)
            h, ww = x.to(F64), w.to(F64)
            common = dict(dtype=dtype, scale=1.0 / K)
            bh = eb.linear_cross_entropy_grad_posteriori_bound(f @ ww.abs(), th, hh, n_terms=V, **common)
            bw = eb.linear_cross_entropy_grad_posteriori_bound(f.t() @ (h.abs() * keep[:, None]), tw, hw,
                                                               n_terms=max(n for _, n, _ in plan), n_chunks=len(plan), **common)
            row[name] = dict(B=B, loss_ratio=lb.max().item() / el, loss_holds=bool((etok <= lb).all()),
                             dh_ratio=bh.max().item() / eh.max().item(), dh_holds=bool((eh <= bh).all()),
                             dw_ratio=bw.max().item() / ew.max().item(), dw_holds=bool((ew <= bw).all()))
        print(json.dumps(row), flush=True)
        out["rows"].append(row)
# tl.sum's layout in the compiled rows kernel
try:
    from ojas_kernels.launch import fast
    caches = {"fast": {k: v[0] for k, v in fast(lce._rows_kernel)._cache.items()}}
    for dev, c in caches.items():
        for key, ck in list(c.items())[:4]:
            ttgir = ck.asm.get("ttgir", "") if hasattr(ck, "asm") else ""
            lay = [l.strip()[:300] for l in ttgir.splitlines() if l.startswith("#") and "blocked" in l]
            red = [l.strip()[:300] for l in ttgir.splitlines() if "tt.reduce" in l]
            print("LAYOUT", getattr(ck, "name", "?"), getattr(getattr(ck, "metadata", None), "num_warps", "?"), *lay, *red, sep="\n  ")
            out.setdefault("layouts", []).append(dict(layouts=lay, reduces=red))
    if not caches:
        print("layout: no device_caches on", type(k), [a for a in dir(k) if "cache" in a])
except Exception as exc:
    print("layout: failed", repr(exc))
json.dump(out, open(sys.argv[1], "w"), indent=1)
