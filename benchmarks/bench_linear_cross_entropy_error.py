"""Benchmark: the proved bound on the chunked linear cross-entropy's lse and loss beside the observed errors.

    python benchmarks/bench_linear_cross_entropy_error.py [--out FILE]   # CUDA: V = 128256, D = 4096
    python benchmarks/bench_linear_cross_entropy_error.py --quick        # tiny sizes, CPU interpreter

For each dtype (bfloat16, float32) the 3-product forward of kernels/ojas_kernels/linear_cross_entropy_three_products.py
(``_three_products``: the chunk's logits by cuBLAS / the CPU matmul with float32
accumulation, rounded to the input dtype, then ``_rows_kernel`` STREAM over vocabulary tiles)
runs on random normal hidden states and weights (std 0.02, and a "peaked" variant whose
target logits are large) and its per-token loss is compared with a float64 reference from
the upcast inputs. Columns: ``loss_bound`` = ``linear_cross_entropy_loss_error_bound`` of
``linear_cross_entropy_lse_error_bound`` (the value of
``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error`` / ``ce_loss_error``) with
``dot_abs_sum`` the measured max_v sum_i |h_i w_vi| (a premise computed from the data),
``loss_observed`` the largest per-token error, ``ratio``; ``loss_post_bound`` /
``loss_post_ratio`` / ``loss_post_holds`` (no softcap): the largest per-token
``linear_cross_entropy_loss_posteriori_bound``
(``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_loss_posteriori``: the logits' errors weighted
by the float64 softmax, the stream's own bound at delta = 0), whether every token is within its own;
``loss_best_bound`` / ``loss_best_ratio``: per token the smaller of the two proved bounds (both
theorems, so their minimum is one), its largest value and its ratio; ``online_bound`` / ``online_observed``:
the row loop alone (``kernel_stream_lse`` on the very logits the kernel reads, against their
float64 logsumexp: delta = 0). ``covered``: float32 logits need torch's "highest" float32
matmul precision (IEEE; TF32 is not covered), and the BLAS's order of summation is covered
only by the classical any-order bound gamma_D, not by a Coq theorem. The run first measures
``tl.exp`` (relative, on [-104, 0]) and ``tl.log`` (absolute, on [1, 2^24]) on the device:
the theorem's premises, assumed at most ``LINEAR_CROSS_ENTROPY_EXP_ERROR`` /
``LINEAR_CROSS_ENTROPY_LOG_ERROR``.

Gradient columns (reduction "mean", every eighth target ignored): ``dh_*`` for grad_input and
``dw_*`` for grad_weight of the whole kernel (forward and backward) against float64 autograd
of ``F.cross_entropy(H @ W^T)`` on the same inputs; ``*_bound`` / ``*_observed`` the largest
per-entry bound (``linear_cross_entropy_grad_error_bound``, the value of
``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error`` / ``ce_dw_error`` from the exact
probabilities' sums: ``linear_cross_entropy_error.gradient_bounds``) and error, ``*_ratio`` the
smallest per-entry bound / error, ``*_max_ratio`` the largest bound over the largest error;
``*_post_bound`` / ``*_post_max_ratio`` / ``*_post_holds`` (no softcap) the same for
``linear_cross_entropy_error.gradient_posteriori_bounds``
(``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error``: each entry of G with
its own exponent error, tight for confident tokens),
``*_best_bound`` / ``*_best_max_ratio`` entry by entry the smaller of the two (both theorems);
``*_meas_*`` and ``loss_meas_*`` (no softcap) the same a-posteriori theorems (``ce_gp_*``,
``ce_loss_posteriori``) with each logit's error measured on the stored logits
(``linear_cross_entropy_error.stored_logits``: the kernel's product recomputed, bitwise twice) against
float64, instead of the a-priori ``delta`` (which rests on cuBLAS's any-order premise), and ``B`` at their
``max |z|`` with, on CUDA, the tile sum's depth identified on the device
(``linear_cross_entropy_error.checked_tile_sum_depth``: 23 for 4096 logits over 8 warps; on the CPU any
order).
``*_trivial``: the largest trivial bound ``|computed| + |exact|`` (gradients: ``|exact| <= sum |G|
|h| / K``), ``*_vs_trivial`` each bound's largest value over it: at 1 or above the bound says no
more than the magnitudes do (vacuous).
On the CPU bfloat16 G is truncated by the interpreter (``storage_rounding="truncate"``: not a
proved bound).

Softcap rows (``variant`` "softcap 30" / "softcap 5", normal weights, Gemma 2/3's
``final_logit_softcapping`` and a cap that bites): the same loss and row-loop columns against
the float64 capped reference ``c tanh(y / c)``, the bounds with ``softcap`` (the value of
``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_softcap`` / ``ce_loss_error_softcap``);
the premise ``tanh_abs_error`` (the kernel's ``_cap_tanh`` measured on the device, assumed at most
``LINEAR_CROSS_ENTROPY_TANH_ERROR``); the gradient columns against autograd of the capped loss, the
bounds with ``softcap`` (``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dh_error`` / ``sc_dw_error``;
premises also the division in ``_cap_chain``, ``LINEAR_CROSS_ENTROPY_DIV_ERROR``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

F64 = torch.float64
SIZES = dict(N=64, D=4096, V=128256)
QUICK_SIZES = dict(N=8, D=64, V=1000)


def grad_columns(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None = None) -> dict:
    """The gradient columns of one row: the kernel's dH and dW against float64 and the bounds."""
    from ojas_kernels import linear_cross_entropy as kernels
    from ojas_ref.verification.linear_cross_entropy_error import (
        exact_gradients,
        gradient_bounds,
        gradient_posteriori_bounds,
        gradient_sums,
        measured_premise_depth,
        stored_logits,
    )

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    kernels.linear_cross_entropy(xr, wr, target, reduction="mean", softcap=cap).backward()
    exact = exact_gradients(x, w, target, "mean", softcap=cap)
    rounding = "truncate" if x.device.type == "cpu" and x.dtype != torch.float32 else "nearest"
    bounds = gradient_bounds(x, w, target, reduction="mean", storage_rounding=rounding, softcap=cap)
    post = meas = (None, None)  # ce_gp_dh_error / ce_gp_dw_error: no softcap
    if cap is None:
        post = gradient_posteriori_bounds(x, w, target, reduction="mean", storage_rounding=rounding)
        meas = gradient_posteriori_bounds(
            x,
            w,
            target,
            reduction="mean",
            storage_rounding=rounding,
            logits=stored_logits(x, w),
            tile_sum_depth=measured_premise_depth(x),
        )
    cols = {}
    K = int((target != -100).sum())
    (_, th, _), (_, tw, _) = gradient_sums(x, w, target)
    for name, got, ref, bound, pb, mb, t in zip(("dh", "dw"), (xr.grad, wr.grad), exact, bounds, post, meas, (th, tw)):
        err = (got.to(F64) - ref).abs()
        emax = max(err.max().item(), 1e-300)
        # the trivial bound |computed| + |exact| <= |computed| + sum |G| |h| / K: a bound above it says nothing
        trivial = (got.to(F64).abs() + t / K).max().item()
        cols[f"{name}_trivial"] = trivial
        for key, b in (("", bound), ("_post", pb), ("_meas", mb)):
            if b is not None:
                cols[f"{name}{key}_vs_trivial"] = b.max().item() / trivial
        cols.update(
            {
                f"{name}_bound": bound.max().item(),
                f"{name}_observed": err.max().item(),
                f"{name}_ratio": (bound / err.clamp_min(1e-300)).min().item(),
                f"{name}_max_ratio": bound.max().item() / emax,
                f"{name}_holds": bool((err <= bound).all()),
            }
        )
        if pb is not None:
            best = torch.minimum(bound, pb)  # both are theorems: entry by entry, the smaller one is a bound
            cols.update(
                {
                    f"{name}_post_bound": pb.max().item(),
                    f"{name}_post_max_ratio": pb.max().item() / emax,
                    f"{name}_post_holds": bool((err <= pb).all()),
                    f"{name}_best_bound": best.max().item(),
                    f"{name}_best_max_ratio": best.max().item() / emax,
                    f"{name}_meas_bound": mb.max().item(),
                    f"{name}_meas_max_ratio": mb.max().item() / emax,
                    f"{name}_meas_holds": bool((err <= mb).all()),
                }
            )
    return cols


def forward_columns(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None) -> dict:
    """The loss and row-loop columns of one row: the 3-product forward's per-token loss and the
    row loop alone against float64 (capped at ``cap`` when given), and their bounds."""
    from ojas_kernels import linear_cross_entropy as kernels
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        linear_cross_entropy_logit_error_bound,
        linear_cross_entropy_loss_error_bound,
        linear_cross_entropy_loss_posteriori_bound,
        linear_cross_entropy_lse_error_bound,
    )
    from ojas_ref.verification.linear_cross_entropy_error import (
        exact_capped,
        exact_lse,
        kernel_stream_lse,
        measured_premise_depth,
        stored_logits,
        stream_block_v,
    )

    (N, D), V, dtype, device = x.shape, w.shape[0], x.dtype, x.device.type
    opts = kernels._Options(0.0, 0.0, cap)
    cfg = kernels.default_config(dtype, x.device)
    loss = kernels._three_products(x, w, None, target, -100, "sum", opts, (True, False, False), cfg).loss
    y = exact_capped(x.to(F64) @ w.to(F64).t(), cap)
    ref = torch.logsumexp(y, dim=1) - y[torch.arange(N, device=device), target]
    P = (x.to(F64).abs() @ w.to(F64).abs().t()).max().item()
    bv = stream_block_v(dtype, device)
    kw = dict(dtype=dtype, dot_abs_sum=P, softcap=cap)
    lse_b = linear_cross_entropy_lse_error_bound(V, D, block_v=bv, **kw)
    delta, zmax = linear_cross_entropy_logit_error_bound(V, D, **kw)
    loss_b = linear_cross_entropy_loss_error_bound(lse_b, delta, ref.abs().max().item())
    err_tok = (loss.to(F64) - ref).abs()
    err = err_tok.max().item()
    trivial = (loss.to(F64).abs() + ref.abs()).max().item()  # |computed - exact| <= |computed| + |exact|
    post = dict(
        loss_best_bound=loss_b,
        loss_best_ratio=loss_b / max(err, 1e-300),
        loss_trivial=trivial,
        loss_vs_trivial=loss_b / trivial,
    )
    if cap is None:  # ce_loss_posteriori: no softcap
        B = linear_cross_entropy_lse_error_bound(V, 1, dtype=dtype, block_v=bv, exact_logits=True, max_abs_logit=zmax)
        pb = linear_cross_entropy_loss_posteriori_bound(torch.softmax(y, dim=1), target, delta, B)
        best = pb.clamp_max(loss_b)  # both are theorems: per token, the smaller one is a bound
        post.update(
            loss_post_bound=pb.max().item(),
            loss_post_ratio=pb.max().item() / max(err, 1e-300),
            loss_post_holds=bool((err_tok <= pb).all()),
            loss_best_bound=best.max().item(),
            loss_best_ratio=best.max().item() / max(err, 1e-300),
        )
    # the row loop alone, on the logits the kernel reads (rounded to dtype as it stores them)
    z = stored_logits(x, w)
    lse, _ = kernel_stream_lse(z, target, softcap=cap)
    on_err = (lse.to(F64) - exact_lse(z, cap)).abs().max().item()
    on_b = linear_cross_entropy_lse_error_bound(
        V, 1, dtype=dtype, block_v=bv, exact_logits=True, max_abs_logit=z.abs().max().item(), softcap=cap
    )
    if cap is None:  # ce_loss_posteriori on the stored logits' measured errors, B at their max |z|
        mB = linear_cross_entropy_lse_error_bound(
            V,
            1,
            dtype=dtype,
            block_v=bv,
            exact_logits=True,
            max_abs_logit=z.abs().max().item(),
            tile_sum_depth=measured_premise_depth(x),
        )
        mb = linear_cross_entropy_loss_posteriori_bound(torch.softmax(y, dim=1), target, (z.to(F64) - y).abs(), mB)
        post.update(
            loss_meas_bound=mb.max().item(),
            loss_meas_ratio=mb.max().item() / max(err, 1e-300),
            loss_meas_holds=bool((err_tok <= mb).all()),
            loss_meas_vs_trivial=mb.max().item() / trivial,
            loss_post_vs_trivial=pb.max().item() / trivial,
        )
    covered = dtype != torch.float32 or torch.get_float32_matmul_precision() == "highest"
    return dict(
        dtype=str(dtype).replace("torch.", ""),
        N=N,
        D=D,
        V=V,
        block_v=bv,
        softcap=cap,
        dot_abs_sum=P,
        logit_delta=delta,
        loss_bound=loss_b,
        loss_observed=err,
        ratio=loss_b / max(err, 1e-300),
        **post,
        online_bound=on_b,
        online_observed=on_err,
        online_ratio=on_b / max(on_err, 1e-300),
        holds=err <= loss_b and on_err <= on_b,
        covered=covered,
    )


def run(sizes: dict, device: str) -> dict:
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        LINEAR_CROSS_ENTROPY_EXP_ERROR,
        LINEAR_CROSS_ENTROPY_LOG_ERROR,
        LINEAR_CROSS_ENTROPY_TANH_ERROR,
    )
    from ojas_ref.verification.linear_cross_entropy_error import (
        measured_exp_error,
        measured_log_error,
        measured_tanh_error,
    )

    rel, ab = measured_exp_error(device)
    lg = measured_log_error(device)
    caps = (30.0, 5.0)
    th = {str(c): measured_tanh_error(device, c) for c in caps}
    N, D, V = sizes["N"], sizes["D"], sizes["V"]
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for variant in ("normal", "peaked") + tuple(f"softcap {c:g}" for c in caps):
            cap = float(variant.split()[1]) if variant.startswith("softcap") else None
            gen = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(N, D, device=device, generator=gen).to(dtype)
            w = torch.randn(V, D, device=device, generator=gen) * 0.02
            target = torch.randint(0, V, (N,), device=device, generator=gen)
            if variant == "peaked":  # the target rows aligned with the hidden states: a confident softmax
                w[target] += 0.05 * x.float() / x.float().norm(dim=1, keepdim=True) * D**0.5 / 8
            w = w.to(dtype)
            rows.append(dict(variant=variant, **forward_columns(x, w, target, cap)))
            r = rows[-1]
            print(
                f"{r['dtype']:8} {variant:10} loss: bound {r['loss_bound']:.3e} observed {r['loss_observed']:.3e} "
                f"ratio {r['ratio']:8.1f} | a posteriori {r.get('loss_post_bound', float('nan')):.3e} "
                f"ratio {r.get('loss_post_ratio', float('nan')):8.1f} | best {r.get('loss_best_ratio', float('nan')):8.1f} "
                f"| measured logits {r.get('loss_meas_ratio', float('nan')):8.1f} "
                f"| / trivial {r['loss_vs_trivial']:.2g} {r.get('loss_post_vs_trivial', float('nan')):.2g} "
                f"{r.get('loss_meas_vs_trivial', float('nan')):.2g} "
                f"| row loop: bound {r['online_bound']:.3e} observed "
                f"{r['online_observed']:.3e} ratio {r['online_ratio']:8.1f} | holds={r['holds']} "
                f"covered={r['covered']}",
                flush=True,
            )
            target[::8] = -100
            r.update(grad_columns(x, w, target, cap))
            r["holds"] = (
                r["holds"]
                and r.get("loss_meas_holds", True)
                and all(r.get(f"{g}{k}_holds", True) for g in ("dh", "dw") for k in ("", "_post", "_meas"))
            )
            for g in ("dh", "dw"):
                print(
                    f"{'':15} {g}: bound {r[g + '_bound']:.3e} observed {r[g + '_observed']:.3e} "
                    f"ratio {r[g + '_ratio']:8.1f} (max/max {r[g + '_max_ratio']:8.1f}) | a posteriori "
                    f"{r.get(g + '_post_bound', float('nan')):.3e} max/max {r.get(g + '_post_max_ratio', float('nan')):8.1f}"
                    f" | best max/max {r.get(g + '_best_max_ratio', r[g + '_max_ratio']):8.1f}"
                    f" | measured logits max/max {r.get(g + '_meas_max_ratio', float('nan')):8.1f}"
                    f" | / trivial {r[g + '_vs_trivial']:.2g} {r.get(g + '_post_vs_trivial', float('nan')):.2g}"
                    f" {r.get(g + '_meas_vs_trivial', float('nan')):.2g} holds={r[g + '_holds']}"
                    f" {r.get(g + '_post_holds', '')}",
                    flush=True,
                )
    return dict(
        benchmark="linear_cross_entropy_error",
        device=device,
        device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        torch=torch.__version__,
        exp_rel_error=rel,
        exp_abs_error_subnormal=ab,
        exp_error_assumed=LINEAR_CROSS_ENTROPY_EXP_ERROR,
        log_abs_error=lg,
        log_error_assumed=LINEAR_CROSS_ENTROPY_LOG_ERROR,
        tanh_abs_error=th,
        tanh_error_assumed=LINEAR_CROSS_ENTROPY_TANH_ERROR,
        premises_hold=(
            rel <= LINEAR_CROSS_ENTROPY_EXP_ERROR
            and ab <= 2.0**-126
            and lg <= LINEAR_CROSS_ENTROPY_LOG_ERROR
            and max(th.values()) <= LINEAR_CROSS_ENTROPY_TANH_ERROR
        ),
        rows=rows,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the table as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the CPU (Triton's interpreter)")
    args = ap.parse_args(argv)
    if args.quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        result = run(QUICK_SIZES, "cpu")
    else:
        if not torch.cuda.is_available():
            raise SystemExit("needs CUDA (or --quick for the CPU interpreter)")
        result = run(SIZES, "cuda")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    if not result["premises_hold"]:
        raise SystemExit("a premise (tl.exp / tl.log / softcap tanh error) exceeds its assumed value")
    if not all(r["holds"] for r in result["rows"]):
        raise SystemExit("a proved bound was exceeded")


if __name__ == "__main__":
    main()
