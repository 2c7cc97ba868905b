"""Benchmark: the proved attention error bounds (out, lse, dV, dQ, dK) beside the largest observed errors.

    python benchmarks/bench_attention_error.py [--out FILE]   # CUDA: S = 4096, 16384, E = 128
    python benchmarks/bench_attention_error.py --quick        # tiny sizes, CPU interpreter, proves it runs

For each (dtype, S, causal/GQA) the Triton flash-attention forward (kernels/ojas_kernels/attention.py)
runs on random normal q, k, v (batch 1, 4 query heads; GQA: 8 query heads on 2 key/value
heads; E = 128) and is compared with a float64 softmax of the same inputs
(``ojas_ref.verification.attention_error``). A row of the table: ``bound`` =
``attention_forward_error_bound`` for these inputs (the value of
``Ojas.Attention.Float.ForwardError.attention_forward_error``, computed by the
oracle's ``attn_fwd_q``: a bound on ``max |out - exact| / max|v|``), ``observed`` = that
maximum over every output coordinate, ``ratio`` = bound / observed; ``lse_bound``,
``lse_observed``, ``lse_ratio`` the same for the saved log-sum-exp (absolute, nats;
``dv_bound_max``, ``dv_observed_max``, ``dv_min_ratio``: dV (autograd through the
kernel, random dO) against float64, with the a-posteriori bound entry by entry
(``attention_dv_error_bound``, ``Ojas.Attention.Float.DvError.dv_error``), the
smallest ratio over entries; ``dq_*``, ``dk_*``: the same for dQ and dK (autograd through the
kernel) against the float64 exact gradient with the a-posteriori bounds
(``attention_dq_error_bound``, ``attention_dk_error_bound``:
``Ojas.Attention.Float.DkDqError.dq_error``, ``dk_error``), twice: ``*_proved`` with the
errors of the forward's saved out and lse from the forward theorems, ``*_measured`` with those
errors measured on the saved tensors; ``*_max_ratio`` = largest bound / largest observed error,
``*_min_ratio`` = the smallest ratio over entries, ``*_vacuous`` = whether the largest bound
reaches the largest exact entry; ``storage_rounding``: how the device's Triton casts float32
to the dtype (CUDA: to nearest, the proved instance; the CPU interpreter truncates
bfloat16, for which there is no Coq instance);
``attention_lse_error_bound``, ``Ojas.Attention.Float.SavedLseError.attention_lse_error_masked``,
which assumes ``tl.log2`` within ``LOG2_ERROR``, measured first); ``covered`` = whether
the theorem (``attention_forward_error_masked``: causal diagonal tiles included) covers
the run: not for float32 on CUDA (3xTF32 dots; the interpreter's float32 dots are IEEE
and covered), always modulo what the theorem's file lists (the tensor cores' order of
additions, FMA contraction). The run first measures ``tl.exp2``'s relative error on the
device (``exp2_rel_error``), which the bound assumes to be at most ``EXP2_ERROR``, and
that ``exp2(0) == 1``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
SIZES = [4096, 16384]
QUICK_SIZES = [64, 96]
# (label, causal, query heads, key/value heads)
MASKS = [("full", False, 4, 4), ("causal", True, 4, 4), ("causal+gqa4", True, 8, 2)]


def run(sizes: list[int], head_dim: int, device: str) -> dict:
    from benchmarks.bench_optimize_model import environment
    from ojas_kernels.attention import flash_attention, flash_attention_forward
    from ojas_ref.verification.attention_error import (
        dv_error_bound,
        exact_attention,
        exact_dv,
        exact_lse,
        forward_error_bound,
        forward_posteriori_bound,
        grad_error_bounds,
        lse_error_bound,
        measured_exp2_error,
        measured_log2_error,
        observed_error,
        storage_rounding,
    )
    from ojas_ref.verification.bounds.attention import EXP2_ERROR, LOG2_ERROR
    from ojas_ref.verification.bounds.common import oracle_bounds_available

    rel, ab, one = measured_exp2_error(device)
    if not (rel <= EXP2_ERROR and ab <= 2.0**-126 and one):
        raise SystemExit(
            f"tl.exp2's measured error ({rel:.3e} relative, {ab:.3e} absolute, exp2(0) == 1: {one}) "
            f"is beyond the assumption of the bound (EXP2_ERROR = {EXP2_ERROR:.3e}, 2^-126, exact 1)"
        )
    lg = measured_log2_error(device)
    if not lg <= LOG2_ERROR:
        raise SystemExit(f"tl.log2's measured error {lg:.3e} is beyond the lse bound's LOG2_ERROR = {LOG2_ERROR:.3e}")
    rows = []
    scale = 1.0 / math.sqrt(head_dim)
    for dname, dtype in DTYPES.items():
        for s in sizes:
            for label, causal, hq, hkv in MASKS:
                gen = torch.Generator(device="cpu").manual_seed(7)
                q, k, v = (
                    torch.randn(1, h, s, head_dim, generator=gen).to(device=device, dtype=dtype) for h in (hq, hkv, hkv)
                )
                t0 = time.perf_counter()
                out, lse = flash_attention_forward(q, k, v, causal, scale, None)
                ref = exact_attention(q, k, v, causal, scale)
                err = observed_error(out, ref, v)
                bound = forward_error_bound(q, k, v, causal, scale)
                ent, post = (out.double() - ref).abs(), forward_posteriori_bound(q, k, v, causal, scale)
                fwd_post = dict(
                    out_post_bound_max=post.max().item(),
                    out_observed_max=ent.max().item(),
                    out_post_max_ratio=post.max().item() / ent.max().item(),
                    out_post_min_ratio=(post / ent.clamp_min(1e-300)).min().item(),
                )
                post_holds = bool((ent <= post).all())
                del ref, ent, post
                lse_err = (lse.double() - exact_lse(q, k, causal, scale)).abs().max().item()
                lse_bound = lse_error_bound(q, k, causal, scale)
                do = torch.randn(q.shape, generator=gen).to(device=device, dtype=dtype)
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                flash_attention(qq, kk, vv, causal, scale).backward(do)
                dv_ex, prob_abs_do = exact_dv(q, k, do, causal, scale)
                dv_b = dv_error_bound(q, k, do, prob_abs_do, causal, scale)
                dv_err = (vv.grad.double() - dv_ex).abs()
                dv_ratio = (dv_b / dv_err.clamp_min(1e-300)).min().item()
                grads, grad_holds = {}, True
                for inputs in ("proved", "measured"):
                    gb = grad_error_bounds(q, k, v, do, out, lse, causal, scale, inputs)
                    for name, got in (("dq", qq.grad), ("dk", kk.grad)):
                        g_err, g_b = (got.double() - gb[name]).abs(), gb[f"{name}_bound"]
                        grad_holds &= bool((g_err <= g_b).all())
                        grads.update(
                            {
                                f"{name}_{inputs}_bound_max": g_b.max().item(),
                                f"{name}_{inputs}_observed_max": g_err.max().item(),
                                f"{name}_{inputs}_max_ratio": g_b.max().item() / g_err.max().item(),
                                f"{name}_{inputs}_min_ratio": (g_b / g_err.clamp_min(1e-300)).min().item(),
                                f"{name}_{inputs}_vacuous": g_b.max().item() >= gb[name].abs().max().item(),
                            }
                        )
                    del gb
                rounding = storage_rounding(device, dtype)
                # 3xTF32 dots on CUDA float32; no Coq instance for the interpreter's bf16 truncation
                covered = rounding == "nearest" and not (dtype == torch.float32 and device == "cuda")
                rows.append(
                    dict(
                        dtype=dname,
                        S=s,
                        E=head_dim,
                        mask=label,
                        heads=hq,
                        kv_heads=hkv,
                        bound=bound,
                        observed=err,
                        ratio=bound / err if err > 0 else math.inf,
                        **fwd_post,
                        lse_bound=lse_bound,
                        lse_observed=lse_err,
                        lse_ratio=lse_bound / lse_err if lse_err > 0 else math.inf,
                        dv_bound_max=dv_b.max().item(),
                        dv_observed_max=dv_err.max().item(),
                        dv_min_ratio=dv_ratio,
                        **grads,
                        holds=(
                            err <= bound
                            and post_holds
                            and lse_err <= lse_bound
                            and bool((dv_err <= dv_b).all())
                            and grad_holds
                        ),
                        storage_rounding=rounding,
                        covered=covered,
                        seconds=round(time.perf_counter() - t0, 2),
                    )
                )
                del q, k, v, out, lse, do, qq, kk, vv, dv_ex, prob_abs_do, dv_b, dv_err
                grad_cols = " ".join(
                    f"{n}: {grads[f'{n}_proved_max_ratio']:.0f}/{grads[f'{n}_measured_max_ratio']:.1f}"
                    for n in ("dq", "dk")
                )
                print(
                    f"{dname:5} S={s:6} {label:12} out: bound {bound:.3e} observed {err:.3e} "
                    f"ratio {rows[-1]['ratio']:7.1f} a-posteriori max ratio {fwd_post['out_post_max_ratio']:6.1f} | lse: bound {lse_bound:.3e} observed {lse_err:.3e} "
                    f"ratio {rows[-1]['lse_ratio']:7.1f} | dV: min ratio {dv_ratio:7.2f} | "
                    f"max ratios proved/measured {grad_cols} | holds={rows[-1]['holds']} covered={covered}",
                    flush=True,
                )
    return dict(
        benchmark="attention_error",
        environment=environment(torch.device(device)),
        oracle=oracle_bounds_available(),
        exp2_rel_error=rel,
        exp2_abs_error_subnormal=ab,
        exp2_error_assumed=EXP2_ERROR,
        log2_abs_error=lg,
        log2_error_assumed=LOG2_ERROR,
        rows=rows,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the table as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the CPU (Triton's interpreter)")
    args = ap.parse_args(argv)
    if args.quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        result = run(QUICK_SIZES, 32, "cpu")
    else:
        if not torch.cuda.is_available():
            raise SystemExit("needs CUDA (or --quick for the CPU interpreter)")
        result = run(SIZES, 128, "cuda")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    if not all(r["holds"] for r in result["rows"]):
        raise SystemExit("a proved bound was exceeded")


if __name__ == "__main__":
    main()
