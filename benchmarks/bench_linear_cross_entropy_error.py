"""Benchmark: the proved bound on the chunked linear cross-entropy's lse and loss beside the observed errors.

    python benchmarks/bench_linear_cross_entropy_error.py [--out FILE] [--records FILE]   # CUDA: N = 16384, V = 128256, D = 4096
    python benchmarks/bench_linear_cross_entropy_error.py --quick        # tiny sizes, CPU interpreter

Issue 17's shapes: N = 16384 tokens (``--tokens`` to change it), D = 4096, V = 128256; the float64
references, sums and bounds go over the tokens in blocks of
``linear_cross_entropy_error.ROW_CHUNK``, the [V, D] ones' inflation and bounds over the vocabulary in
blocks of ``VOCAB_CHUNK`` (the same values; the gradient columns' float64 peak about 45 GiB at this
shape, issue 28: it ran out of memory on an 80 GB H100 before). For each dtype (bfloat16, float32) the 3-product forward of kernels/ojas_kernels/linear_cross_entropy_three_products.py
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
``LINEAR_CROSS_ENTROPY_LOG_ERROR``. ``exp_error_used``, ``log_error_used``, ``tanh_error_used``,
``div_error_used`` (every row): the premises' constants the row's bounds were computed with
(``linear_cross_entropy_error.unary_errors``): on CUDA those ``ojas verify-device`` measured on every
float32 input of the premise's domain (this device's record, rounded up) where it passed (tanh and
division: for the caps the record checks), else the assumed ones (``*_error_assumed``); an lse
bound above 1 takes the assumed ``tl.log`` constant (``linear_cross_entropy_error.lse_bound``).

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
``*_meas_*`` and ``loss_meas_*`` (no softcap; the softcap rows' ``loss_meas_*``: below) the same a-posteriori theorems (``ce_gp_*``,
``ce_loss_posteriori``) with each logit's error measured (``linear_cross_entropy_error.measured_logit_errors``:
certified against the exact logits) on the logits the kernel's token chunks computed in the very run
whose outputs are bounded (``linear_cross_entropy_error.kernel_logits``: each chunk's own ``_mm_into`` call
recorded before the rows kernel overwrites it with G; the forward's run for the loss, the forward +
backward's, every eighth token ignored, for dH and dW), instead of the a-priori ``delta`` (which rests
on cuBLAS's any-order premise), and ``B`` at their ``max |z|`` with, on CUDA, the tile sum's depth
identified on the device (``linear_cross_entropy_error.checked_tile_sum_depth``: 23 for 4096 logits
over 8 warps; on the CPU any order). ``logits_match`` / ``grad_logits_match``: whether
``linear_cross_entropy_error.stored_logits`` (one product over all N rows, recomputed: the route of
records before this one) equals those logits at every kept token, bit for bit. It need not: the kernel
makes one cuBLAS call per token chunk (its rows gathered when tokens are ignored, the sizes of
``_three_products_plan``), and cuBLAS picks its algorithm, hence each dot's order of summation, by the
shapes; the measured premise is therefore checked on the recorded logits, never on the recomputed ones.
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
premises also the division in ``_cap_chain``, ``LINEAR_CROSS_ENTROPY_DIV_ERROR``); ``loss_meas_*`` of a
softcap row: ``Ojas.LinearCrossEntropy.Float.SoftcapPosteriori.ce_loss_posteriori_softcap``
(``linear_cross_entropy_error.measured_softcap_loss_bounds``: each raw logit's error measured on the run's
own logits, capped by ``sc_logit_error`` at the row's tanh premise, weighted by the float64 capped softmax).

``lse_bound`` / ``lse_observed``: the kernel's lse (its rows kernel on its stored logits,
``kernel_forward``) against the float64 logsumexp, within ``ce_lse_error``'s bound;
``lse_meas_bound`` / ``lse_meas_ratio`` / ``lse_meas_holds`` (no softcap): the largest per-token
``linear_cross_entropy_error.measured_lse_bounds``
(``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_lse_posteriori``: the stream's own bound at
delta = 0 plus ``-ln(1 - E)``, ``E = sum_v p_v (e^|z_v - y_v| - 1)``, each logit's error measured on
the run's logits as for ``loss_meas_*``), its ratio, whether every token is within its own.
The float32 bar (issue 28, item 4; the result's ``float32_bar``, one record per row and quantity:
lse, loss, dh, dw; ``bench_attention_error.float32_bar``): the tolerance is, per token / entry, the
smallest of the proved bounds that the cross-entropy tests assert
(tests/verification/test_linear_cross_entropy_error_bound.py, test_tf32_mutant.py's ``_ce_mutant``):
lse: the a-priori ``ce_lse_error`` and ``ce_lse_posteriori`` at the measured logit errors; loss: the a-priori ``ce_loss_error``, ``ce_loss_posteriori`` at the
a-priori ``delta`` and ``ce_loss_posteriori`` at the measured logit errors; dH, dW: ``ce_dh_error`` /
``ce_dw_error``, ``ce_gp_*`` at ``delta`` and ``ce_gp_*`` at the measured logit errors; softcap rows
the a-priori bounds, and for the loss ``ce_loss_posteriori_softcap`` at the measured raw-logit errors (no
a-posteriori softcap theorem for the lse, dH, dW: left to do). ``tolerance_from_measured``:
the share of tokens / entries where the measured-logit bound is strictly the smallest (the ignored
tokens' rows of dH, all bounds 0, count as not). Tightness bars 100x
(lse, loss), 300x (dW), dH 1000x and 10 sqrt(V); float32 rows also run the kernel with TF32 dots
(``attention_error.tf32_dots``: cuBLAS's logits and gradient products and the Triton dots) against the
same exact values: ``tf32_observed``; ``tf32_tolerance`` the largest tolerance the tests compute on
the mutant's run (its measured-logit bounds on the mutant's own logits, which the theorems cover
whatever their errors: a measured-logit bound of the loss never catches TF32 logits, only the bounds
whose premise the mutant breaks, float32 products, can); ``discrimination`` = tolerance /
tf32_observed (bar 1/8: the float32 run's tolerance against the mutant's error, as for attention) and
``tf32_own_discrimination`` = tf32_tolerance / tf32_observed; ``tf32_caught``: whether an entry of
the mutant's error exceeds the tolerance of the mutant's own run (the float32 tests fail on it); ``tf32_to_float32`` and ``discrimination_floor`` (the least
discrimination of any tolerance at the tightness floor: above 1/8 the row cannot meet both bars) as
``float32_bar`` defines them.
``--records FILE`` appends the rows and the bar records (benchmarks/records.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

F64 = torch.float64
SIZES = dict(N=16384, D=4096, V=128256)
QUICK_SIZES = dict(N=8, D=64, V=1000)
#: a row's configuration (its record's case)
CASE_KEYS = ("variant", "dtype", "N", "D", "V", "block_v", "softcap")


def _kernel_grads(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None):
    """The kernel's (dH, dW) for reduction "mean" and the logits its token chunks computed in that
    run (``linear_cross_entropy_error.kernel_logits``)."""
    from ojas_kernels import linear_cross_entropy as kernels
    from ojas_ref.verification.linear_cross_entropy_error import kernel_logits

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()

    def run() -> None:
        kernels.linear_cross_entropy(xr, wr, target, reduction="mean", softcap=cap).backward()

    _, z = kernel_logits(run, x, w, target)
    return xr.grad, wr.grad, z


def _logits_match(z: torch.Tensor, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``stored_logits`` (one product over all rows, recomputed) equals the logits the
    kernel's token chunks computed (``z``, ``kernel_logits``) at every kept token, bit for bit."""
    from ojas_ref.verification.linear_cross_entropy_error import stored_logits

    kept = target != -100
    return bool(torch.equal(stored_logits(x, w)[kept], z[kept]))


def measured_grad_bounds(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, z: torch.Tensor) -> tuple:
    """(dH, dW) bounds of ``ce_gp_dh_error`` / ``ce_gp_dw_error`` (no softcap) with each logit's error
    measured on ``z`` (the run's own logits, ``kernel_logits``) and, on CUDA, the tile sum's
    identified depth."""
    from ojas_ref.verification.linear_cross_entropy_error import gradient_posteriori_bounds, measured_premise_depth

    rounding = "truncate" if x.device.type == "cpu" and x.dtype != torch.float32 else "nearest"
    return gradient_posteriori_bounds(
        x,
        w,
        target,
        reduction="mean",
        storage_rounding=rounding,
        logits=z,
        tile_sum_depth=measured_premise_depth(x),
    )


def softcap_measured_loss_bounds(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, z: torch.Tensor, cap: float):
    """Per-token loss bounds of ``ce_loss_posteriori_softcap`` (``measured_softcap_loss_bounds``) with
    each raw logit's error measured on ``z`` (the run's own raw logits, ``kernel_logits``), the tanh
    premise of ``unary_errors`` for this device and cap and, on CUDA, the tile sum's identified depth."""
    from ojas_ref.verification.linear_cross_entropy_error import measured_premise_depth, measured_softcap_loss_bounds

    return measured_softcap_loss_bounds(x, w, target, z, cap, tile_sum_depth=measured_premise_depth(x))


def grad_columns(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None = None) -> tuple:
    """The gradient columns of one row (the kernel's dH and dW against float64 and the bounds) and,
    for the float32 bar, ``{name: dict(exact, fixed, meas, err)}``: the exact gradient, entry by
    entry the smaller of the bounds that do not depend on the run's logits (a priori and a
    posteriori at the a-priori ``delta``; softcap: a priori), the measured-logit bound (None with a
    softcap) and the kernel's error. Each bound is reduced to its columns as soon as it is computed
    (at N = 16384, V = 128256, D = 4096 a float64 [V, D] tensor is 3.9 GiB)."""
    from ojas_ref.verification.linear_cross_entropy_error import (
        exact_gradients,
        gradient_bounds,
        gradient_posteriori_bounds,
        gradient_sums,
    )

    names = ("dh", "dw")
    gx, gw, z = _kernel_grads(x, w, target, cap)
    cols = {"grad_logits_match": _logits_match(z, x, w, target)}
    exact = exact_gradients(x, w, target, "mean", softcap=cap)
    K = int((target != -100).sum())
    errs = []
    (_, th, _), (_, tw, _) = gradient_sums(x, w, target)
    for name, got, ref, t in zip(names, (gx, gw), exact, (th, tw)):
        errs.append(got.to(F64, copy=True).sub_(ref).abs_())
        # the trivial bound |computed| + |exact| <= |computed| + sum |G| |h| / K: a bound above it says nothing
        cols[f"{name}_trivial"] = (t / K).add_(got.to(F64, copy=True).abs_()).max().item()
    del gx, gw, th, tw, got, ref, t
    rounding = "truncate" if x.device.type == "cpu" and x.dtype != torch.float32 else "nearest"
    best = list(gradient_bounds(x, w, target, reduction="mean", storage_rounding=rounding, softcap=cap))
    for name, b, err in zip(names, best, errs):
        cols.update(_bound_columns(name, "", b, err, cols[f"{name}_trivial"]))
        cols[f"{name}_ratio"] = (b / err.clamp_min(1e-300)).min().item()
    meas = (None, None)
    if cap is None:  # ce_gp_dh_error / ce_gp_dw_error: no softcap
        post = gradient_posteriori_bounds(x, w, target, reduction="mean", storage_rounding=rounding)
        for name, pb, err, b in zip(names, post, errs, best):
            cols.update(_bound_columns(name, "_post", pb, err, cols[f"{name}_trivial"]))
            torch.minimum(b, pb, out=b)  # both are theorems: entry by entry, the smaller one is a bound
            cols.update(_bound_columns(name, "_best", b, err))
        del post, pb
        meas = measured_grad_bounds(x, w, target, z)
        for name, mb, err in zip(names, meas, errs):
            cols.update(_bound_columns(name, "_meas", mb, err, cols[f"{name}_trivial"]))
        del mb
    del z
    bar = {
        name: dict(exact=ref, fixed=b, meas=mb, err=err)
        for name, ref, b, mb, err in zip(names, exact, best, meas, errs)
    }
    return cols, bar


def _bound_columns(name: str, key: str, bound: torch.Tensor, err: torch.Tensor, trivial: float | None = None) -> dict:
    """``{name}{key}_bound``, ``_max_ratio`` (its largest value over the largest error) and, with
    ``trivial``, ``_holds`` and ``_vs_trivial``; ``{name}_observed`` with ``key`` ""."""
    top, emax = bound.max().item(), err.max().item()
    cols = {f"{name}{key}_bound": top, f"{name}{key}_max_ratio": top / max(emax, 1e-300)}
    if trivial is not None:
        cols.update({f"{name}{key}_holds": bool((err <= bound).all()), f"{name}{key}_vs_trivial": top / trivial})
    if key == "":
        cols[f"{name}_observed"] = emax
    return cols


def _per_token(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None, delta: float, B: float):
    """float64 per token, a block of tokens at a time: the exact loss, the exact lse and (no cap)
    ``ce_loss_posteriori``'s bound at the a-priori ``delta`` and the stream's ``B``."""
    from ojas_ref.verification.bounds.linear_cross_entropy import linear_cross_entropy_loss_posteriori_bound
    from ojas_ref.verification.linear_cross_entropy_error import _row_chunks, exact_capped

    wt, out = w.to(F64).t(), ([], [], [])
    for r in _row_chunks(x.shape[0]):
        y = exact_capped(x[r].to(F64) @ wt, cap)
        lse = torch.logsumexp(y, dim=1)
        out[0].append(lse - y.gather(1, target[r, None]).squeeze(1))
        out[1].append(lse)
        if cap is None:
            out[2].append(linear_cross_entropy_loss_posteriori_bound(torch.softmax(y, dim=1), target[r], delta, B))
        del y
    return tuple(torch.cat(o) if o else None for o in out)


def _exact_lse_rows(z: torch.Tensor, cap: float | None) -> torch.Tensor:
    """float64 logsumexp of each row of ``z`` (capped), a block of rows at a time."""
    from ojas_ref.verification.linear_cross_entropy_error import _row_chunks, exact_lse

    return torch.cat([exact_lse(z[r], cap) for r in _row_chunks(z.shape[0])])


def kernel_forward(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None):
    """The kernel's per-token loss (the 3-product forward), the logits its token chunks computed in
    that run (``kernel_logits``) and its lse (the rows kernel on those logits: the forward's own
    launch, ``kernel_stream_lse``)."""
    from ojas_kernels import linear_cross_entropy as kernels
    from ojas_ref.verification.linear_cross_entropy_error import kernel_logits, kernel_stream_lse

    opts = kernels._Options(0.0, 0.0, cap)
    cfg = kernels.default_config(x.dtype, x.device)

    def run() -> torch.Tensor:
        return kernels._three_products(x, w, None, target, -100, "sum", opts, (True, False, False), cfg).loss

    loss, z = kernel_logits(run, x, w, target)
    lse, _ = kernel_stream_lse(z, target, softcap=cap)
    return loss, z, lse


def forward_columns(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, cap: float | None) -> tuple:
    """The loss and row-loop columns of one row: the 3-product forward's per-token loss and the
    row loop alone against float64 (capped at ``cap`` when given), and their bounds; and, for the
    float32 bar, ``{name: dict(exact, fixed, meas, err)}`` of the lse (the a-priori bound, and
    ``ce_lse_posteriori`` at the measured logit errors; softcap: a priori only) and the loss (per token the smaller of the a-priori and the
    a-posteriori bounds at the a-priori ``delta``, and the measured-logit bound; softcap: a priori
    only, and ``ce_loss_posteriori_softcap``'s measured-raw-logit bound for the loss)."""
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        linear_cross_entropy_logit_error_bound,
        linear_cross_entropy_loss_error_bound,
    )
    from ojas_ref.verification.linear_cross_entropy_error import (
        dot_abs_sum,
        lse_bound,
        measured_loss_bounds,
        measured_lse_bounds,
        measured_premise_depth,
        stream_block_v,
        unary_errors,
    )

    (N, D), V, dtype, device = x.shape, w.shape[0], x.dtype, x.device.type
    loss, z, lse = kernel_forward(x, w, target, cap)
    match = _logits_match(z, x, w, target)
    P = dot_abs_sum(x, w)
    bv = stream_block_v(dtype, device)
    used = unary_errors(device, V, cap)  # the premises' constants of every bound below
    kw = dict(dtype=dtype, dot_abs_sum=P, softcap=cap)
    lse_b = lse_bound(device, V, D, block_v=bv, **kw)
    delta, zmax = linear_cross_entropy_logit_error_bound(V, D, tanh_error=used["tanh_error"], **kw)
    B = lse_bound(device, V, 1, dtype=dtype, block_v=bv, exact_logits=True, max_abs_logit=zmax)
    ref, lse_ex, pb = _per_token(x, w, target, cap, delta, B)
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
    best = torch.full_like(ref, loss_b)
    if cap is None:  # ce_loss_posteriori: no softcap
        best = pb.clamp_max(loss_b)  # both are theorems: per token, the smaller one is a bound
        post.update(
            loss_post_bound=pb.max().item(),
            loss_post_ratio=pb.max().item() / max(err, 1e-300),
            loss_post_holds=bool((err_tok <= pb).all()),
            loss_best_bound=best.max().item(),
            loss_best_ratio=best.max().item() / max(err, 1e-300),
        )
    smb = None
    if cap is not None:  # ce_loss_posteriori_softcap on the run's raw logits' measured errors
        smb = softcap_measured_loss_bounds(x, w, target, z, cap)
        post.update(
            loss_meas_bound=smb.max().item(),
            loss_meas_ratio=smb.max().item() / max(err, 1e-300),
            loss_meas_holds=bool((err_tok <= smb).all()),
            loss_meas_vs_trivial=smb.max().item() / trivial,
        )
    # the row loop alone, on the logits the kernel reads (rounded to dtype as it stores them)
    on_err = (lse.to(F64) - _exact_lse_rows(z, cap)).abs().max().item()
    on_b = lse_bound(
        device, V, 1, dtype=dtype, block_v=bv, exact_logits=True, max_abs_logit=z.abs().max().item(), softcap=cap
    )
    mb = mlb = None
    lse_err = (lse.to(F64) - lse_ex).abs()
    if cap is None:  # ce_loss_posteriori / ce_lse_posteriori on the run's logits' measured errors, B at their max |z|
        depth = measured_premise_depth(x)
        mb = measured_loss_bounds(x, w, target, z, tile_sum_depth=depth)
        mlb = measured_lse_bounds(x, w, z, tile_sum_depth=depth)
        post.update(
            lse_meas_bound=mlb.max().item(),
            lse_meas_ratio=mlb.max().item() / max(lse_err.max().item(), 1e-300),
            lse_meas_holds=bool((lse_err <= mlb).all()),
        )
        post.update(
            loss_meas_bound=mb.max().item(),
            loss_meas_ratio=mb.max().item() / max(err, 1e-300),
            loss_meas_holds=bool((err_tok <= mb).all()),
            loss_meas_vs_trivial=mb.max().item() / trivial,
            loss_post_vs_trivial=pb.max().item() / trivial,
        )
    del z
    covered = dtype != torch.float32 or torch.get_float32_matmul_precision() == "highest"
    cols = dict(
        dtype=str(dtype).replace("torch.", ""),
        N=N,
        D=D,
        V=V,
        block_v=bv,
        softcap=cap,
        dot_abs_sum=P,
        logit_delta=delta,
        lse_bound=lse_b,
        lse_observed=lse_err.max().item(),
        loss_bound=loss_b,
        loss_observed=err,
        ratio=loss_b / max(err, 1e-300),
        **post,
        online_bound=on_b,
        online_observed=on_err,
        online_ratio=on_b / max(on_err, 1e-300),
        holds=err <= loss_b and on_err <= on_b and lse_err.max().item() <= lse_b,
        covered=covered,
        logits_match=match,
        **{f"{name}_used": value for name, value in used.items()},
    )
    bar = dict(
        lse=dict(exact=lse_ex, fixed=torch.tensor(lse_b, dtype=F64), meas=mlb, err=lse_err),
        loss=dict(exact=ref, fixed=best, meas=mb, err=err_tok),
    )
    if smb is not None:  # the softcap rows' loss tolerance: per token the smaller of it and the a-priori bound
        bar["loss"]["meas"] = smb
    return cols, bar


def inputs(sizes: dict, dtype: torch.dtype, variant: str, device: str):
    """(x, w, target) of a row: normal hidden states, weights of std 0.02; "peaked": distinct
    targets whose weight rows are aligned with their hidden states (a confident softmax)."""
    N, D, V = sizes["N"], sizes["D"], sizes["V"]
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(N, D, device=device, generator=gen).to(dtype)
    w = torch.randn(V, D, device=device, generator=gen) * 0.02
    if variant == "peaked":  # distinct targets: a shared weight row would be aligned with one of its tokens only
        target = torch.randperm(V, device=device, generator=gen)[:N]
        w[target] += 0.05 * x.float() / x.float().norm(dim=1, keepdim=True) * D**0.5 / 8
    else:
        target = torch.randint(0, V, (N,), device=device, generator=gen)
    return x, w.to(dtype), target


def run(sizes: dict, device: str) -> dict:
    from benchmarks.bench_attention_error import bar_line, float32_bar
    from ojas_ref.verification.attention_error import tf32_dots
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        LINEAR_CROSS_ENTROPY_DIV_ERROR,
        LINEAR_CROSS_ENTROPY_EXP_ERROR,
        LINEAR_CROSS_ENTROPY_LOG_ERROR,
        LINEAR_CROSS_ENTROPY_TANH_ERROR,
    )
    from ojas_ref.verification.linear_cross_entropy_error import (
        measured_exp_error,
        measured_log_error,
        measured_loss_bounds,
        measured_lse_bounds,
        measured_premise_depth,
        measured_tanh_error,
        unary_errors,
    )

    rel, ab = measured_exp_error(device)
    lg = measured_log_error(device)
    caps = (30.0, 5.0)
    th = {str(c): measured_tanh_error(device, c) for c in caps}
    for cap in (None,) + caps:
        used = unary_errors(device, sizes["V"], cap)
        print(
            f"premise constants of the bounds (softcap {cap}): tl.exp {used['exp_error']:.3e} relative "
            f"(assumed {LINEAR_CROSS_ENTROPY_EXP_ERROR:.3e}), tl.log {used['log_error']:.3e} "
            f"(assumed {LINEAR_CROSS_ENTROPY_LOG_ERROR:.3e}), tanh {used['tanh_error']:.3e} "
            f"(assumed {LINEAR_CROSS_ENTROPY_TANH_ERROR:.3e}), z / c {used['div_error']:.3e} relative "
            f"(assumed {LINEAR_CROSS_ENTROPY_DIV_ERROR:.3e})",
            flush=True,
        )
    rows, bar = [], []
    for dtype in (torch.bfloat16, torch.float32):
        for variant in ("normal", "peaked") + tuple(f"softcap {c:g}" for c in caps):
            cap = float(variant.split()[1]) if variant.startswith("softcap") else None
            x, w, target = inputs(sizes, dtype, variant, device)
            t0 = time.perf_counter()
            cols, fwd_bar = forward_columns(x, w, target, cap)
            rows.append(dict(variant=variant, **cols))
            r = rows[-1]
            print(
                f"{r['dtype']:8} {variant:10} loss: bound {r['loss_bound']:.3e} observed {r['loss_observed']:.3e} "
                f"ratio {r['ratio']:8.1f} | a posteriori {r.get('loss_post_bound', float('nan')):.3e} "
                f"ratio {r.get('loss_post_ratio', float('nan')):8.1f} | best {r.get('loss_best_ratio', float('nan')):8.1f} "
                f"| measured logits {r.get('loss_meas_ratio', float('nan')):8.1f} "
                f"| / trivial {r['loss_vs_trivial']:.2g} {r.get('loss_post_vs_trivial', float('nan')):.2g} "
                f"{r.get('loss_meas_vs_trivial', float('nan')):.2g} "
                f"| lse: bound {r['lse_bound']:.3e} measured logits {r.get('lse_meas_bound', float('nan')):.3e} "
                f"observed {r['lse_observed']:.3e} "
                f"| row loop: bound {r['online_bound']:.3e} observed "
                f"{r['online_observed']:.3e} ratio {r['online_ratio']:8.1f} | holds={r['holds']} "
                f"covered={r['covered']}",
                flush=True,
            )
            fwd_target = target.clone()
            target[::8] = -100
            cols, grad_bar = grad_columns(x, w, target, cap)
            r.update(cols)
            r["holds"] = (
                r["holds"]
                and r.get("loss_meas_holds", True)
                and r.get("lse_meas_holds", True)
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
            case = {k: r[k] for k in CASE_KEYS}
            for name, e in (fwd_bar | grad_bar).items():  # the float32 run's tolerance: what the tests assert
                tol = e["fixed"] if e["meas"] is None else torch.minimum(e["fixed"], e["meas"])
                e["metrics"] = dict(observed=e["err"].max().item(), tolerance=tol.max().item())
                if e["meas"] is not None:  # the share of entries where the measured-logit bound is the smaller
                    e["metrics"]["tolerance_from_measured"] = (e["meas"] < e["fixed"]).double().mean().item()
                del tol, e["err"], e["meas"]
            if dtype == torch.float32:  # the same kernel with TF32 dots: what the float32 tolerances must catch
                with tf32_dots():
                    loss_t, z_t, lse_t = kernel_forward(x, w, fwd_target, cap)
                    gx_t, gw_t, zg_t = _kernel_grads(x, w, target, cap)
                # the tolerances the tests compute on the mutant's run: a measured-logit bound on its own logits
                meas_t = dict(lse=None, loss=None, dh=None, dw=None)
                if cap is not None:  # ce_loss_posteriori_softcap on the mutant's own raw logits
                    meas_t["loss"] = softcap_measured_loss_bounds(x, w, fwd_target, z_t, cap)
                if cap is None:
                    depth = measured_premise_depth(x)
                    meas_t["loss"] = measured_loss_bounds(x, w, fwd_target, z_t, tile_sum_depth=depth)
                    meas_t["lse"] = measured_lse_bounds(x, w, z_t, tile_sum_depth=depth)
                    del z_t  # before the gradient bounds' float64 peak
                    meas_t["dh"], meas_t["dw"] = measured_grad_bounds(x, w, target, zg_t)
                z_t = zg_t = None
                for name, got in (("lse", lse_t), ("loss", loss_t), ("dh", gx_t), ("dw", gw_t)):
                    e = (fwd_bar | grad_bar)[name]
                    err_t = (got.to(F64) - e["exact"]).abs()
                    tol_t = e["fixed"] if meas_t[name] is None else torch.minimum(e["fixed"], meas_t[name])
                    e["tf32"] = dict(
                        observed=err_t.max().item(),
                        tolerance=tol_t.max().item(),
                        caught=int(bool((err_t > tol_t).any())),  # the float32 tests fail on the mutant
                    )
                    meas_t[name] = None
                    del err_t, tol_t
                del loss_t, lse_t, gx_t, gw_t, got
            for name, e in (fwd_bar | grad_bar).items():
                t = e.get("tf32")
                m = float32_bar(
                    name,
                    dtype,
                    e["metrics"]["observed"],
                    e["metrics"]["tolerance"],
                    t["observed"] if t else None,
                    sizes["V"] if name == "dh" else None,
                    t["tolerance"] if t else None,
                )
                m.update({k: v for k, v in e["metrics"].items() if k not in m})
                if t:
                    m["tf32_caught"] = t["caught"]
                bar.append(dict(case=dict(case, quantity=name), metrics=m))
                print(bar_line(bar[-1]), flush=True)
            r["seconds"] = round(time.perf_counter() - t0, 2)
            del x, w, target, fwd_target, fwd_bar, grad_bar
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
        div_error_assumed=LINEAR_CROSS_ENTROPY_DIV_ERROR,
        premises_hold=(
            rel <= LINEAR_CROSS_ENTROPY_EXP_ERROR
            and ab <= 2.0**-126
            and lg <= LINEAR_CROSS_ENTROPY_LOG_ERROR
            and max(th.values()) <= LINEAR_CROSS_ENTROPY_TANH_ERROR
        ),
        rows=rows,
        float32_bar=bar,
    )


def main(argv: list[str] | None = None) -> None:
    from benchmarks.bench_attention_error import append_records

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the table as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the CPU (Triton's interpreter)")
    ap.add_argument("--records", type=Path, help="append the rows and the float32-bar records to this records file")
    ap.add_argument("--tokens", type=int, help=f"tokens N (default {SIZES['N']}; --quick {QUICK_SIZES['N']})")
    args = ap.parse_args(argv)
    device = "cpu" if args.quick else "cuda"
    sizes = dict(QUICK_SIZES if args.quick else SIZES)
    if args.tokens is not None:
        if args.tokens < 8:
            raise SystemExit(f"--tokens must be at least 8 (every eighth token is ignored), got {args.tokens}")
        sizes["N"] = args.tokens
    if args.quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    elif not torch.cuda.is_available():
        raise SystemExit("needs CUDA (or --quick for the CPU interpreter)")
    result = run(sizes, device)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    if args.records:
        n = append_records(result, CASE_KEYS, args.records, device)
        print(f"appended {n} records to {args.records}")
    if not result["premises_hold"]:
        raise SystemExit("a premise (tl.exp / tl.log / softcap tanh error) exceeds its assumed value")
    if not all(r["holds"] for r in result["rows"]):
        raise SystemExit("a proved bound was exceeded")


if __name__ == "__main__":
    main()
