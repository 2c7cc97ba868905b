"""Benchmark: the proved attention error bounds (out, lse, dV, dQ, dK) beside the largest observed errors.

    python benchmarks/bench_attention_error.py [--out FILE] [--records FILE]   # CUDA: S = 4096, 16384, E = 128
    python benchmarks/bench_attention_error.py --quick        # tiny sizes, CPU interpreter, proves it runs
    python benchmarks/bench_attention_error.py --sizes 16384 --masks causal+gqa4 --dtypes fp32   # one case

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
(``attention_error.dv_error_bound``: the smaller of ``attention_dv_error_bound``,
``Ojas.Attention.Float.DvError.dv_error`` / ``dv_error_acc``, and the running bound
``Ojas.Attention.Float.RunningAccError.dv_error_acc_running``), the
smallest ratio over entries; ``dq_*``, ``dk_*``: the same for dQ and dK (autograd through the
kernel) against the float64 exact gradient with the a-posteriori bounds
(``attention_dq_error_bound``, ``attention_dk_error_bound``:
``Ojas.Attention.Float.DkDqError.dq_error``, ``dk_error``, and on CUDA the running
``dq_error_acc_running``, ``dk_error_acc_running``; the smaller), twice: ``*_proved`` with the
errors of the forward's saved out and lse from the forward theorems, ``*_measured`` with those
errors measured on the saved tensors; ``*_max_ratio`` = largest bound / largest observed error,
``*_min_ratio`` = the smallest ratio over entries, ``*_vacuous`` = whether the largest bound
reaches the largest exact entry; ``storage_rounding``: how the device's Triton casts float32
to the dtype (CUDA: to nearest, the proved instance; the CPU interpreter truncates
bfloat16, for which there is no Coq instance);
``attention_lse_error_bound``, ``Ojas.Attention.Float.SavedLseError.attention_lse_error_masked``,
which assumes ``tl.log2`` within ``LOG2_ERROR``, measured first); ``covered`` = whether
the theorems cover the run (``attention_forward_error_masked`` with the interpreter's IEEE
float32 dots; on CUDA ``ForwardAccError.attention_forward_acc_posteriori_tf32x3_op`` / ``_tc_op``
and the running ``ForwardAccRunning`` ones, the 3xTF32 or bf16 tensor-core dots and the P.V
accumulated into the running output as identified on the device): not with the interpreter's
bfloat16 truncation, always modulo what the theorems' files list (``tl.sum(p)`` left to right,
no underflow in the tensor-core models). The bounds of one case share one ``cache`` (``attention_error._cached``:
the dot model's scores and ``dp`` dots of every pair, the forward's bounds, the constants computed once; dQ and dK of
both inputs in one pass, ``grad_error_bounds_modes``): the values of the bounds computed alone. The run first measures ``tl.exp2``'s relative error on the
device (``exp2_rel_error``), which the bound assumes to be at most ``EXP2_ERROR``, and
that ``exp2(0) == 1``. ``exp2_error_used``, ``log2_error_used`` (every row, and the result's for
the largest S): the premises' constants the bounds were computed with
(``attention_error.unary_errors``): on CUDA those ``ojas verify-device`` measured on every float32
input of the premise's domain (this device's record, rounded up) where it passed, else the assumed
``exp2_error_assumed`` = ``EXP2_ERROR``, ``log2_error_assumed`` = ``LOG2_ERROR``.

The float32 bar (issue 28, item 4; ``float32_bar``, the result's ``float32_bar``, one record per
shape and quantity: out, lse, dv, dq, dk): ``observed`` the largest error, ``tolerance`` the largest
value of the proved bound the float32 tests use (out: the a-posteriori forward bound, entry by
entry; lse: the lse bound; dV; dQ, dK: entry by entry the smaller of the two bounds the float32 tests
assert, tests/verification/test_attention_error_bound.py's ``check_dq_dk``: the "proved" inputs' (the forward
theorems' errors of the saved out and lse) and the "measured" inputs' (the same dQ / dK theorems at those errors
checked on the saved tensors in this run; ``dq_tolerance_from``, ``dk_tolerance_from``: the share of entries where
"measured" is the smaller)), ``tightness``
= tolerance / observed against ``tightness_bar`` (300x out, 100x lse; dV, dQ, dK: 1000x and
10 sqrt(n), n the terms of the sum: g S for dV and dK, S for dQ; bfloat16 100x); float32 rows also
run the same kernel with TF32 dots (``attention_error.tf32_dots``, the setting restored after it):
``tf32_observed`` its largest error against the same exact values, ``discrimination`` =
tolerance / tf32_observed against 1/8 (``tf32_to_float32`` = tf32_observed / observed and
``discrimination_floor``, the least discrimination a tolerance at the tightness floor could have:
``float32_bar``), and ``tf32_caught``: whether an entry of the mutant's error
exceeds its tolerance (out: or the a-priori bound), i.e. whether the float32 tests fail on it (dQ, dK:
against the bounds of the float32 run, whose inputs are the float32 forward's saved out and lse;
tests/verification/test_tf32_mutant.py feeds the mutant's own, with proved and measured inputs).
``--records FILE`` appends the rows (case: ``CASE_KEYS``) and the bar records (case: the row's
and ``quantity``) in the one record format (benchmarks/records.py), which report.py tables.
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
#: issue 28's float32 bar, tightness: proved bound / largest observed error at most this (attention
#: out, lse; cross-entropy lse, loss, dW); the sums' gradients (:data:`SUM_QUANTITIES`) at most 1000x
#: and within 10x of the sqrt(n) floor of a sound deterministic bound on a signed sum of n terms
TIGHTNESS_BAR = {"out": 300.0, "lse": 100.0, "loss": 100.0, "dw": 300.0}
SUM_QUANTITIES = ("dv", "dq", "dk", "dh")
#: discrimination: every float32 tolerance at most 1/8 of the error of the same kernel with TF32 dots
DISCRIMINATION_BAR = 1.0 / 8
#: bfloat16: bound / observed at most 100x everywhere
BF16_TIGHTNESS_BAR = 100.0
SIZES = [4096, 16384]
QUICK_SIZES = [64, 96]
# (label, causal, query heads, key/value heads)
MASKS = [("full", False, 4, 4), ("causal", True, 4, 4), ("causal+gqa4", True, 8, 2)]
#: a row's configuration (its record's case)
CASE_KEYS = ("dtype", "S", "E", "mask", "heads", "kv_heads", "storage_rounding")


def float32_bar(
    quantity: str,
    dtype: torch.dtype,
    observed: float,
    tolerance: float,
    tf32_observed: float | None = None,
    n_terms: int | None = None,
    tf32_tolerance: float | None = None,
) -> dict[str, float]:
    """One record's metrics of issue 28's float32 bar for ``quantity`` (out, lse, dv, dq, dk, loss,
    dh, dw): ``observed`` the largest error of the kernel, ``tolerance`` the largest value of the
    proved bound the tests use, ``tightness`` = tolerance / observed against ``tightness_bar``
    (:data:`TIGHTNESS_BAR`; the sums' gradients ``min(1000, 10 sqrt(n_terms))``, ``sqrt_n`` given;
    bfloat16 :data:`BF16_TIGHTNESS_BAR`); float32 also ``tf32_observed`` (the largest error of the
    same kernel with TF32 dots) and ``discrimination`` = tolerance / tf32_observed against
    :data:`DISCRIMINATION_BAR` (issue 28's words: the float32 tolerance against the mutant's error);
    with ``tf32_tolerance`` (the largest tolerance the tests compute on the mutant's run, where a
    premise measured on the run's data makes it differ from the float32 run's) also
    ``tf32_own_discrimination`` = tf32_tolerance / tf32_observed (whether the tests, run on the
    mutant, could still fail on this quantity). ``*_ok``: 1 when at or under the bar, else 0.

    ``tf32_to_float32`` = tf32_observed / observed (how much the TF32 dots change the error) and
    ``discrimination_floor`` = ``floor / tf32_to_float32``, ``floor`` = ``sqrt_n`` for the sums'
    gradients (the tightness of a sound deterministic bound on a signed sum of n terms: the bar's
    floor) and 1 otherwise (a sound tolerance is at least the observed error): the least
    discrimination of any tolerance of tightness at least ``floor`` fixed across the two runs
    (tolerance / tf32_observed = tightness / tf32_to_float32). Above :data:`DISCRIMINATION_BAR`
    no such tolerance meets both bars (tightness at most ``tf32_to_float32 / 8`` would be below
    the floor): the reason a row cannot meet discrimination, and the floor it hits. (In units of
    the bar, ``discrimination_floor / DISCRIMINATION_BAR`` = ``8 floor / tf32_to_float32``.)"""
    if quantity not in (*TIGHTNESS_BAR, *SUM_QUANTITIES):
        raise ValueError(f"quantity must be one of {(*TIGHTNESS_BAR, *SUM_QUANTITIES)}, got {quantity!r}")
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype}")
    if not (observed >= 0 and tolerance >= 0):
        raise ValueError(f"observed and tolerance must be nonnegative numbers, got {observed!r}, {tolerance!r}")
    out = dict(observed=observed, tolerance=tolerance, tightness=tolerance / max(observed, 1e-300))
    if dtype == torch.bfloat16:
        out["tightness_bar"] = BF16_TIGHTNESS_BAR
    elif quantity in SUM_QUANTITIES:
        if n_terms is None or n_terms < 1:
            raise ValueError(f"n_terms (the terms of the sum) must be a positive int for {quantity}, got {n_terms!r}")
        out.update(n_terms=n_terms, sqrt_n=math.sqrt(n_terms), tightness_bar=min(1000.0, 10 * math.sqrt(n_terms)))
    else:
        out["tightness_bar"] = TIGHTNESS_BAR[quantity]
    out["tightness_ok"] = int(out["tightness"] <= out["tightness_bar"])
    if dtype == torch.float32:
        if tf32_observed is None or not tf32_observed >= 0:
            raise ValueError(
                f"tf32_observed (the TF32 mutant's largest error) is needed for float32, got {tf32_observed!r}"
            )
        if tf32_tolerance is not None and not tf32_tolerance >= 0:
            raise ValueError(f"tf32_tolerance must be a nonnegative number, got {tf32_tolerance!r}")
        if tf32_tolerance is not None:
            out["tf32_tolerance"] = tf32_tolerance
            out["tf32_own_discrimination"] = tf32_tolerance / max(tf32_observed, 1e-300)
        disc = tolerance / max(tf32_observed, 1e-300)
        ratio = tf32_observed / max(observed, 1e-300)
        out.update(
            tf32_observed=tf32_observed,
            discrimination=disc,
            discrimination_bar=DISCRIMINATION_BAR,
            discrimination_ok=int(disc <= DISCRIMINATION_BAR),
            tf32_to_float32=ratio,
            discrimination_floor=out.get("sqrt_n", 1.0) / max(ratio, 1e-300),
        )
    return out


def bar_line(record: dict) -> str:
    """One float32-bar record as a printed line."""
    c, m = record["case"], record["metrics"]
    shape = " ".join(f"{k}={v}" for k, v in c.items() if k != "quantity")
    line = (
        f"bar {shape} {c['quantity']:4}: observed {m['observed']:.3e} tolerance {m['tolerance']:.3e} "
        f"tightness {m['tightness']:9.1f} (bar {m['tightness_bar']:.0f}: {'ok' if m['tightness_ok'] else 'OVER'})"
    )
    if "discrimination" in m:
        line += (
            f" | TF32 {m['tf32_observed']:.3e} tolerance/TF32 {m['discrimination']:.3g} (bar 1/8: "
            f"{'ok' if m['discrimination_ok'] else 'OVER'}; floor {m['discrimination_floor']:.3g}, "
            f"TF32/float32 {m['tf32_to_float32']:.3g}) caught {bool(m['tf32_caught'])}"
        )
    return line


def record_metrics(row: dict, case_keys: tuple[str, ...]) -> dict[str, float]:
    """A result row's finite numbers, booleans as 0 / 1, without its case's keys (the metrics of a record)."""
    out = {}
    for key, value in row.items():
        if key in case_keys or isinstance(value, str) or value is None:
            continue
        value = int(value) if isinstance(value, bool) else value
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = value
    return out


def append_records(result: dict, case_keys: tuple[str, ...], path: Path, device: str) -> int:
    """Append ``result``'s rows (case: ``case_keys``) and its float32-bar records (case: the row's
    and ``quantity``) to the records file ``path`` as benchmark ``bench_<result['benchmark']>``;
    return how many."""
    from benchmarks import records

    env = records.environment(device)
    given = dict(date=env["date"], commit=env["commit"], device_name=env["device"], versions=env["versions"])
    name = f"bench_{result['benchmark']}"
    n = 0
    for row in result["rows"]:
        case = {k: row[k] for k in case_keys if k in row}
        records.append(name, case, record_metrics(row, case_keys), "ojas", path=path, **given)
        n += 1
    for rec in result["float32_bar"]:
        records.append(name, rec["case"], rec["metrics"], "ojas", path=path, **given)
        n += 1
    return n


def _chosen(items, names: list[str] | None, unpack: bool = False) -> list:
    """The ``(name, value)`` items whose name is in ``names`` (all with None); their values with
    ``unpack``. ``SystemExit`` naming the known names for an unknown one."""
    items = list(items)
    known = [n for n, _ in items]
    if names is not None and not set(names) <= set(known):
        raise SystemExit(f"unknown {sorted(set(names) - set(known))}: expected some of {known}")
    kept = [(n, v) for n, v in items if names is None or n in names]
    return [v for _, v in kept] if unpack else kept


def run(
    sizes: list[int], head_dim: int, device: str, masks: list[str] | None = None, dtypes: list[str] | None = None
) -> dict:
    """The table's rows and float32-bar records at ``sizes``, for the ``masks`` labels of :data:`MASKS` and
    the ``dtypes`` of :data:`DTYPES` given (default all): one S = 16384 case takes minutes on an H100."""
    from benchmarks.bench_optimize_model import environment
    from ojas_kernels.attention import flash_attention, flash_attention_forward
    from ojas_ref.verification.attention_error import (
        dv_error_bound,
        exact_attention,
        exact_dv,
        exact_lse,
        forward_error_bound,
        forward_posteriori_bound,
        grad_error_bounds_modes,
        lse_error_bound,
        measured_exp2_error,
        measured_log2_error,
        observed_error,
        storage_rounding,
        tf32_dots,
        unary_errors,
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
    used = unary_errors(device, max(sizes))
    print(
        f"premise constants of the bounds: tl.exp2 {used['exp2_error']:.3e} relative (assumed {EXP2_ERROR:.3e}), "
        f"tl.log2 {used['log2_error']:.3e} absolute (assumed {LOG2_ERROR:.3e})",
        flush=True,
    )
    rows, bar = [], []
    scale = 1.0 / math.sqrt(head_dim)
    for dname, dtype in _chosen(DTYPES.items(), dtypes):
        for s in sizes:
            for label, causal, hq, hkv in _chosen(((m[0], m) for m in MASKS), masks, unpack=True):
                gen = torch.Generator(device="cpu").manual_seed(7)
                q, k, v = (
                    torch.randn(1, h, s, head_dim, generator=gen).to(device=device, dtype=dtype) for h in (hq, hkv, hkv)
                )
                t0 = time.perf_counter()
                cache: dict = {}  # what the bounds of this case share, computed once (attention_error._cached)
                out, lse = flash_attention_forward(q, k, v, causal, scale, None)
                ref = exact_attention(q, k, v, causal, scale)
                err = observed_error(out, ref, v)
                bound = forward_error_bound(q, k, v, causal, scale)
                ent, post = (out.double() - ref).abs(), forward_posteriori_bound(q, k, v, causal, scale, cache=cache)
                fwd_post = dict(
                    out_post_bound_max=post.max().item(),
                    out_observed_max=ent.max().item(),
                    out_post_max_ratio=post.max().item() / ent.max().item(),
                    out_post_min_ratio=(post / ent.clamp_min(1e-300)).min().item(),
                )
                post_holds = bool((ent <= post).all())
                lse_ex = exact_lse(q, k, causal, scale)
                lse_err = (lse.double() - lse_ex).abs().max().item()
                lse_bound = lse_error_bound(q, k, causal, scale, cache=cache)
                do = torch.randn(q.shape, generator=gen).to(device=device, dtype=dtype)
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                flash_attention(qq, kk, vv, causal, scale).backward(do)
                dv_ex, prob_abs_do = exact_dv(q, k, do, causal, scale)
                dv_b = dv_error_bound(q, k, do, prob_abs_do, causal, scale, cache=cache)
                dv_err = (vv.grad.double() - dv_ex).abs()
                dv_ratio = (dv_b / dv_err.clamp_min(1e-300)).min().item()
                grads, grad_holds, tested = {}, True, {}
                both = grad_error_bounds_modes(
                    q, k, v, do, out, lse, causal, scale, ("proved", "measured"), cache=cache
                )
                for inputs, gb in both.items():
                    for name, got in (("dq", qq.grad), ("dk", kk.grad)):
                        g_err, g_b = (got.double() - gb[name]).abs(), gb[f"{name}_bound"]
                        grad_holds &= bool((g_err <= g_b).all())
                        if inputs == "proved":
                            tested[name] = (gb[name], g_b, g_err)
                        else:  # the tests assert both bounds: an entry's tolerance is the smaller
                            grads[f"{name}_tolerance_from"] = (g_b < tested[name][1]).double().mean().item()
                            tested[name] = (gb[name], torch.minimum(tested[name][1], g_b), g_err)
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
                del cache, both
                # the bar's quantities: (largest error, tolerance entry by entry or scalar, terms of the sum)
                g = hq // hkv
                tolerances = dict(
                    out=(ent, post, None),
                    lse=(torch.tensor(lse_err), torch.tensor(lse_bound), None),
                    dv=(dv_err, dv_b, g * s),
                    dq=(tested["dq"][2], tested["dq"][1], s),
                    dk=(tested["dk"][2], tested["dk"][1], g * s),
                )
                mutant = {}
                if dtype == torch.float32:  # the same kernel with TF32 dots: what the float32 tolerances must catch
                    with tf32_dots():
                        out_t, lse_t = flash_attention_forward(q, k, v, causal, scale, None)
                        qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
                        flash_attention(qt, kt, vt, causal, scale).backward(do)
                    mutant = dict(
                        out=(out_t.double() - ref).abs(),
                        lse=(lse_t.double() - lse_ex).abs().max(),
                        dv=(vt.grad.double() - dv_ex).abs(),
                        dq=(qt.grad.double() - tested["dq"][0]).abs(),
                        dk=(kt.grad.double() - tested["dk"][0]).abs(),
                    )
                    mutant_out_err = observed_error(out_t, ref, v)
                    del out_t, lse_t, qt, kt, vt
                case = dict(dtype=dname, S=s, E=head_dim, mask=label, heads=hq, kv_heads=hkv)
                for quantity, (e, tol, n) in tolerances.items():
                    m = float32_bar(
                        quantity,
                        dtype,
                        e.max().item(),
                        tol.max().item(),
                        mutant[quantity].max().item() if mutant else None,
                        n,
                    )
                    if mutant:  # the float32 tests fail: an entry of the mutant's error over its tolerance
                        caught = bool((mutant[quantity] > tol).any())
                        m["tf32_caught"] = int(caught or (quantity == "out" and mutant_out_err > bound))
                    bar.append(dict(case=dict(case, quantity=quantity), metrics=m))
                    print(bar_line(bar[-1]), flush=True)
                used = unary_errors(device, s)  # the constants the bounds above took
                rounding = storage_rounding(device, dtype)
                # no Coq instance for the interpreter's bf16 truncation
                covered = rounding == "nearest"
                rows.append(
                    dict(
                        **case,
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
                        exp2_error_used=used["exp2_error"],
                        log2_error_used=used["log2_error"],
                        covered=covered,
                        seconds=round(time.perf_counter() - t0, 2),
                    )
                )
                del q, k, v, out, lse, do, qq, kk, vv, dv_ex, prob_abs_do, dv_b, dv_err, ref, ent, post, lse_ex
                del tolerances, mutant, tested
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
        exp2_error_used=rows[-1]["exp2_error_used"],
        log2_abs_error=lg,
        log2_error_assumed=LOG2_ERROR,
        log2_error_used=rows[-1]["log2_error_used"],
        rows=rows,
        float32_bar=bar,
    )


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the table as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the CPU (Triton's interpreter)")
    ap.add_argument("--records", type=Path, help="append the rows and the float32-bar records to this records file")
    ap.add_argument("--sizes", help=f"comma-separated sequence lengths (default {','.join(map(str, SIZES))})")
    ap.add_argument("--masks", help=f"comma-separated of {','.join(m[0] for m in MASKS)} (default all)")
    ap.add_argument("--dtypes", help=f"comma-separated of {','.join(DTYPES)} (default all)")
    args = ap.parse_args(argv)
    pick = dict(masks=_split(args.masks), dtypes=_split(args.dtypes))
    device = "cpu" if args.quick else "cuda"
    if args.quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        result = run([int(x) for x in _split(args.sizes) or QUICK_SIZES], 32, device, **pick)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("needs CUDA (or --quick for the CPU interpreter)")
        result = run([int(x) for x in _split(args.sizes) or SIZES], 128, device, **pick)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    if args.records:
        n = append_records(result, CASE_KEYS, args.records, device)
        print(f"appended {n} records to {args.records}")
    if not all(r["holds"] for r in result["rows"]):
        raise SystemExit("a proved bound was exceeded")


if __name__ == "__main__":
    main()
