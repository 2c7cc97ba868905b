"""The script of an experiment recorded in benchmarks/RESULTS.md (2026-12-02, call 9): the peaked rows'
largest exact values, errors, a-posteriori bounds and trivial bounds; kept beside its result, not a benchmark."""
import torch, json, sys
from ojas_kernels import linear_cross_entropy as lce
from ojas_ref.verification.lce_error import exact_gradients, gradient_posteriori_bounds, gradient_sums
F64 = torch.float64
N, D, V = 64, 4096, 128256
out = {}
for dtype in (torch.bfloat16, torch.float32):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, D, device="cuda", generator=gen).to(dtype)
    w = torch.randn(V, D, device="cuda", generator=gen) * 0.02
    target = torch.randint(0, V, (N,), device="cuda", generator=gen)
    w[target] += 0.05 * x.float() / x.float().norm(dim=1, keepdim=True) * D ** 0.5 / 8
    w = w.to(dtype)
    target[::8] = -100
    keep = target != -100
    loss = lce._three_products(x, w, None, target, -100, "sum", lce._Options(0.0, 0.0, None), (True, False, False),
                               lce.default_config(dtype, x.device)).loss.to(F64)
    y = x.to(F64) @ w.to(F64).t()
    t0 = torch.where(keep, target, 0)
    ref = torch.logsumexp(y, 1) - y.gather(1, t0[:, None]).squeeze(1)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    lce.linear_cross_entropy(xr, wr, target, reduction="mean").backward()
    dh, dw = exact_gradients(x, w, target, "mean")
    ph, pw = gradient_posteriori_bounds(x, w, target, reduction="mean")
    K = int(keep.sum())
    (_, th, _), (_, tw, _) = gradient_sums(x, w, target)
    r = dict(loss_exact_max=ref[keep].abs().max().item(), loss_err_max=(loss - ref)[keep].abs().max().item(),
             dh_exact_max=dh.abs().max().item(), dh_err_max=(xr.grad.to(F64) - dh).abs().max().item(),
             dh_bound_max=ph.max().item(), dh_trivial_max=(th / K).max().item(),
             dw_exact_max=dw.abs().max().item(), dw_err_max=(wr.grad.to(F64) - dw).abs().max().item(),
             dw_bound_max=pw.max().item(), dw_trivial_max=(tw / K).max().item())
    out[str(dtype)] = r
    print(dtype, json.dumps(r), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
