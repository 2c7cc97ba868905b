"""Differential tests of the PyTorch reference ``ojas_ref.attention``.

* against ``torch.nn.functional.scaled_dot_product_attention`` (math backend), forward
  and backward, in float64 and float32;
* against the oracle extracted from the Coq spec (``ojas_ref.verification.oracle``), forward with
  the error bound of ``ojas_ref.verification.error_bounds`` and backward with a norm-relative
  tolerance, in float32 and bfloat16;
* the result does not depend on the tiling (Ojas.Attention.StreamCorrect);
* bad arguments raise errors that name the argument; ``impl`` dispatch;
* autocast: the output and gradients of SDPA under ``torch.autocast``.

``oracle_mismatches`` is also the detector of tests/verification/test_attention_mutations.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import types
import warnings
from dataclasses import replace
from typing import Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ojas_ref.functional import _attention_reference as attention_reference
from ojas_ref.functional import dispatch
from ojas_ref.functional.attention import attention, attention_forward
from ojas_ref.functional.dispatch import use_impl
from ojas_ref.verification.attention_check import (
    MASK_SHAPES,
    Case,
    assert_normwise_close,
    dead_rows_of,
    make_case,
    oracle_mismatches,
    structural_visibility,
)

F64 = torch.float64


# --------------------------------------------------------------------------
# Test cases
# --------------------------------------------------------------------------


@st.composite
def cases(
    draw,
    dtype: torch.dtype,
    *,
    max_s: int = 70,
    head_dims=(16, 32, 64, 128),
    float_masks: bool = True,
    regimes=("normal",),
) -> Case:
    """Shapes: S = 1, S not a multiple of the tiles, Sq != Sk; GQA; causal; window; masks."""
    sq = draw(st.integers(1, max_s))
    sk = draw(st.integers(1, max_s))
    mask = draw(st.sampled_from([None, "bool", "float"] if float_masks else [None, "bool"]))
    mask_shape = draw(st.sampled_from(sorted(MASK_SHAPES)))
    dead_rows: tuple[int, ...] = ()
    if mask is not None and mask_shape != "keys":
        dead_rows = tuple(draw(st.sets(st.integers(0, sq - 1), max_size=2)))
    return make_case(
        draw(st.integers(0, 2**31 - 1)),
        batch=draw(st.integers(1, 2)),
        kv_heads=draw(st.integers(1, 2)),
        group=draw(st.sampled_from([1, 1, 2, 3])),
        sq=sq,
        sk=sk,
        e=draw(st.sampled_from(head_dims)),
        ev=draw(st.sampled_from([8, 16, 24])),
        dtype=dtype,
        is_causal=draw(st.booleans()),
        window=draw(st.one_of(st.none(), st.integers(1, max_s))),
        mask=mask,
        mask_shape=mask_shape,
        dead_rows=dead_rows,
        regime=draw(st.sampled_from(regimes)),
        scale=draw(st.one_of(st.none(), st.floats(0.05, 1.0))),
    )


def leaves(case: Case) -> list[Tensor]:
    """Fresh leaves requiring grad: q, k, v and a float mask."""
    ts = [case.query, case.key, case.value]
    if case.attn_mask is not None and case.attn_mask.is_floating_point():
        ts.append(case.attn_mask)
    return [t.detach().clone().requires_grad_() for t in ts]


# --------------------------------------------------------------------------
# Against torch SDPA (math backend)
# --------------------------------------------------------------------------


def sdpa_run(case: Case) -> tuple[Tensor, list[Tensor]]:
    """SDPA on the case, its causal/window masks folded into an explicit mask. Fully masked
    rows (NaN or zeros depending on the torch version) are made visible and given a zero
    upstream gradient, so that they add nothing to dK, dV, d(mask); callers skip them."""
    xs = leaves(case)
    q, k, v = xs[:3]
    dead = dead_rows_of(case).unsqueeze(-1)
    structural = structural_visibility(case)
    b, hq, sq, sk = case.query.shape[0], case.query.shape[1], case.query.shape[2], case.key.shape[2]
    if case.attn_mask is None:
        mask = structural.expand(b, hq, sq, sk) | dead
    elif case.attn_mask.dtype == torch.bool:
        mask = (case.attn_mask & structural) | dead
    else:
        mask = xs[3].expand(b, hq, sq, sk).masked_fill(~structural, -math.inf).masked_fill(dead, 0.0)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=case.scale, enable_gqa=case.enable_gqa)
    grads = torch.autograd.grad(out, xs, case.grad_out.masked_fill(dead, 0.0))
    return out.detach(), list(grads)


def ours_run(case: Case, **kw) -> tuple[Tensor, list[Tensor]]:
    xs = leaves(case)
    kwargs = case.kwargs()
    if len(xs) == 4:
        kwargs["attn_mask"] = xs[3]
    out = attention(*xs[:3], impl="reference", **kwargs, **kw)
    grads = torch.autograd.grad(out, xs, case.grad_out)
    return out.detach(), list(grads)


SDPA_RTOL = {F64: 1e-10, torch.float32: 2e-5}


def check_against_sdpa(case: Case) -> None:
    out, grads = ours_run(case)
    ref_out, ref_grads = sdpa_run(case)
    dead = dead_rows_of(case)
    rtol = SDPA_RTOL[case.query.dtype]
    assert torch.all(out[dead] == 0), "fully masked rows must give zeros"
    assert torch.all(grads[0][dead] == 0), "fully masked rows must give zero dQ"
    assert_normwise_close(out[~dead], ref_out[~dead], rtol, "out")
    for name, g, rg in zip(("grad_query", "grad_key", "grad_value", "grad_attn_mask"), grads, ref_grads):
        assert g.shape == rg.shape and g.dtype == rg.dtype, name
        assert_normwise_close(g, rg, rtol, name)


EDGE_SHAPES = [  # (sq, sk, e): S = 1, S not a multiple of the tiles, Sq != Sk, every E
    (1, 1, 16),
    (1, 37, 32),
    (37, 1, 64),
    (17, 17, 128),
    (33, 70, 16),
    (70, 33, 32),
    (16, 48, 64),
]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("sq,sk,e", EDGE_SHAPES)
def test_edge_shapes_match_sdpa(sq, sk, e, dtype):
    check_against_sdpa(
        make_case(
            sq * 1000 + sk, batch=2, kv_heads=2, group=2, sq=sq, sk=sk, e=e, ev=24, dtype=dtype, is_causal=sq > 16
        )
    )


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@given(data=st.data())
def test_matches_sdpa(dtype, data):
    check_against_sdpa(data.draw(cases(dtype)))


# --------------------------------------------------------------------------
# Tiling does not matter (Ojas.Attention.StreamCorrect)
# --------------------------------------------------------------------------


@given(case=cases(F64, max_s=40, head_dims=(16,)), block_q=st.integers(1, 40), block_k=st.integers(1, 40))
def test_any_tiling_gives_the_same_result(case, block_q, block_k):
    scale = 1.0 / math.sqrt(case.query.shape[-1]) if case.scale is None else case.scale
    args = (case.query, case.key, case.value, case.attn_mask, case.is_causal, scale, case.window)
    out, lse = attention_reference._reference_forward(*args, block_q=block_q, block_k=block_k)
    ref_out, ref_lse = attention_reference._reference_forward(*args)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    assert_normwise_close(out, ref_out, 1e-12, "out")
    assert_normwise_close(lse.nan_to_num(neginf=0.0), ref_lse.nan_to_num(neginf=0.0), 1e-12, "lse")
    grads = attention_reference._reference_backward(
        *args[:4], out, lse, case.grad_out, *args[4:], False, block_q=block_q, block_k=block_k
    )
    ref_grads = attention_reference._reference_backward(*args[:4], ref_out, ref_lse, case.grad_out, *args[4:], False)
    for name, g, rg in zip(("grad_query", "grad_key", "grad_value"), grads, ref_grads):
        assert_normwise_close(g, rg, 1e-12, name)


# --------------------------------------------------------------------------
# Against the oracle extracted from Coq
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@given(data=st.data())
def test_matches_oracle(dtype, data):
    case = data.draw(
        cases(dtype, max_s=40, head_dims=(16, 32), float_masks=False, regimes=("normal", "peaked", "large"))
    )
    assert oracle_mismatches(case) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("regime", ["normal", "large"])
def test_matches_oracle_fully_masked_rows(dtype, regime):
    case = make_case(
        3,
        batch=2,
        kv_heads=2,
        group=2,
        sq=21,
        sk=35,
        e=16,
        ev=8,
        dtype=dtype,
        mask="bool",
        mask_shape="batch",
        dead_rows=(0, 7, 20),
        regime=regime,
        is_causal=True,
    )
    assert dead_rows_of(case).sum() == 2 * 4 * 3
    assert oracle_mismatches(case) == []


def test_every_row_masked_gives_zeros_and_zero_grads():
    case = make_case(
        5,
        kv_heads=2,
        group=2,
        sq=9,
        sk=20,
        e=16,
        ev=8,
        dtype=torch.float32,
        window=3,
        mask="bool",
        mask_shape="rows",
        dead_rows=tuple(range(9)),
    )
    out, lse = attention_forward(case.query, case.key, case.value, **case.kwargs())
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse))
    _, grads = ours_run(case)
    assert all(torch.all(g == 0) for g in grads)
    assert oracle_mismatches(case) == []


# --------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------


def _args(**over):
    q = torch.randn(2, 4, 5, 8)
    args = dict(query=q, key=torch.randn(2, 2, 6, 8), value=torch.randn(2, 2, 6, 3), enable_gqa=True)
    args.update(over)
    return args


def _nested_query() -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor([torch.randn(4, 5, 8)] * 2)


BAD_ARGUMENTS = [
    (dict(query=torch.randn(8)), ValueError, "query must have at least 2 dimensions"),
    (dict(query=torch.randn(4, 5, 8)), ValueError, r"key must have as many dimensions as query \(3\)"),
    (dict(key=torch.randn(2, 2, 6)), ValueError, "key must have as many dimensions as query"),
    (dict(value=torch.randn(1, 2, 2, 6, 3)), ValueError, "value must have as many dimensions as query"),
    (dict(query=[[1.0]]), TypeError, "query must be a torch.Tensor"),
    (dict(key=torch.randn(3, 2, 6, 8)), ValueError, "batch size"),
    (
        dict(query=torch.randn(2, 3, 4, 5, 8), key=torch.randn(2, 1, 2, 6, 8), value=torch.randn(2, 1, 2, 6, 3)),
        ValueError,
        r"batch size mismatch: .* \[2, 3\] in query, \[2, 1\] in key .* not broadcast",
    ),
    (dict(key=torch.randn(2, 2, 6, 7)), ValueError, "key must have the query's head dim"),
    (dict(value=torch.randn(2, 2, 7, 3)), ValueError, "value must have as many rows Sk"),
    (dict(value=torch.randn(2, 1, 6, 3)), ValueError, "value must have as many heads as key"),
    (dict(key=torch.randn(2, 3, 6, 8), value=torch.randn(2, 3, 6, 3)), ValueError, "enable_gqa=True needs"),
    (dict(enable_gqa=False), ValueError, "pass enable_gqa=True"),
    (dict(dropout_p=1.5), ValueError, r"dropout_p must be in \[0, 1\] .*, got 1.5"),
    (dict(dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\]"),
    (dict(dropout_p=math.nan), ValueError, r"dropout_p must be in \[0, 1\] .*, got nan"),
    (dict(dropout_p=np.float32(1.5)), ValueError, r"dropout_p must be in \[0, 1\]"),
    (dict(dropout_p=True), TypeError, "dropout_p must be a float, got bool"),
    (dict(dropout_p="0"), TypeError, "dropout_p must be a float, got str"),
    (dict(dropout_p=np.bool_(False)), TypeError, "dropout_p must be a float, got numpy.bool"),
    (dict(query=_nested_query()), NotImplementedError, "query: nested"),
    (dict(attn_mask=torch.ones(5, 6, dtype=torch.int32)), TypeError, "attn_mask must have dtype"),
    (dict(attn_mask=torch.ones(5, 6, dtype=F64)), TypeError, "attn_mask must have dtype"),
    (dict(attn_mask=torch.ones(5, 7, dtype=torch.bool)), ValueError, "attn_mask must be broadcastable"),
    (dict(attn_mask=torch.ones(1, 2, 4, 5, 6, dtype=torch.bool)), ValueError, "attn_mask must be broadcastable"),
    (
        dict(
            query=torch.randn(5, 8), key=torch.randn(6, 8), value=torch.randn(6, 3), attn_mask=torch.ones(1, 5, 6) > 0
        ),
        ValueError,
        r"attn_mask must be broadcastable to \[\.\.\., Hq, Sq, Sk\] = \[5, 6\]",
    ),
    (dict(attn_mask=[[True]]), TypeError, "attn_mask must be a torch.Tensor"),
    (dict(window=0), ValueError, "window must be >= 1"),
    (dict(window=2.5), TypeError, "window must be an int"),
    (dict(window=np.float32(2)), TypeError, "window must be an int >= 1 or None, got numpy.float32"),
    (dict(window=True), TypeError, "window must be an int >= 1 or None, got bool"),
    (dict(window=np.int64(0)), ValueError, "window must be >= 1"),
    (dict(key=torch.randn(2, 2, 6, 8, dtype=F64)), TypeError, "key has dtype torch.float64 but query"),
    (dict(value=torch.randn(2, 2, 6, 3, dtype=torch.float16)), TypeError, "value has dtype"),
    (dict(query=torch.ones(2, 4, 5, 8, dtype=torch.int64)), TypeError, "query has dtype torch.int64"),
    (dict(scale=math.inf), ValueError, "scale must be finite"),
    (dict(scale=math.nan), ValueError, "scale must be finite"),
    (dict(scale="1"), TypeError, "scale must be a float"),
    (dict(scale=torch.tensor(0.5)), TypeError, "scale must be a float or None, got torch.Tensor"),
    (dict(scale=np.float32(np.inf)), ValueError, "scale must be finite"),
    (dict(is_causal=1), TypeError, "is_causal must be a bool, got int"),
    (dict(is_causal=torch.tensor(True)), TypeError, "is_causal must be a bool, got torch.Tensor"),
    (dict(enable_gqa=1), TypeError, "enable_gqa must be a bool, got int"),
    (dict(impl="cuda"), ValueError, "impl must be one of"),
]


@pytest.mark.parametrize("over,exc,message", BAD_ARGUMENTS, ids=[m for _, _, m in BAD_ARGUMENTS])
def test_bad_arguments_raise(over, exc, message):
    with pytest.raises(exc, match=message):
        attention(**_args(**over))
    if "impl" not in over:
        with pytest.raises(exc, match=message):
            attention_forward(**_args(**over))


# --------------------------------------------------------------------------
# impl dispatch
# --------------------------------------------------------------------------


@pytest.fixture
def fake_kernel(monkeypatch):
    """Replace ojas_kernels.attention by a recorder of flash_attention calls."""
    calls = []

    def flash_attention(query, key, value, is_causal, scale, window, attn_mask, dropout_p=0.0, dropout_seed=None):
        calls.append(dict(is_causal=is_causal, scale=scale, window=window, attn_mask=attn_mask))
        if dropout_p:
            calls[-1].update(dropout_p=dropout_p, dropout_seed=dropout_seed)
        return torch.zeros(query.shape[:3] + value.shape[3:], dtype=query.dtype)

    package, module = types.ModuleType("ojas_kernels"), types.ModuleType("ojas_kernels.attention")
    module.flash_attention = flash_attention
    package.attention = module
    monkeypatch.setitem(sys.modules, "ojas_kernels", package)
    monkeypatch.setitem(sys.modules, "ojas_kernels.attention", module)
    return calls


def test_impl_triton_dispatches_to_the_kernel(fake_kernel, monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", True)
    attention(**_args(is_causal=True, window=3, impl="triton"))
    assert fake_kernel == [dict(is_causal=True, scale=1 / math.sqrt(8), window=3, attn_mask=None)]
    bool_mask, float_mask = torch.rand(2, 1, 1, 6) < 0.5, torch.randn(5, 6)
    attention(**_args(attn_mask=bool_mask, impl="triton"))
    attention(**_args(attn_mask=float_mask, impl="triton"))
    with torch.no_grad():  # no mask gradient wanted
        attention(**_args(attn_mask=float_mask.requires_grad_(), impl="triton"))
    assert [c["attn_mask"] for c in fake_kernel[1:]] == [bool_mask, float_mask, float_mask]
    # dropout: the probability and the key drawn from torch's generator (the reference's draw)
    args = _args(dropout_p=0.25, impl="triton")
    torch.manual_seed(0)
    attention(**args)
    torch.manual_seed(0)
    assert fake_kernel[-1]["dropout_p"] == 0.25
    assert torch.equal(fake_kernel[-1]["dropout_seed"], torch.randint(0, 2**32, (2,), dtype=torch.int64))


def test_impl_from_the_setting(fake_kernel, monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", True)
    with use_impl(attention="triton"):
        attention(**_args())
    assert len(fake_kernel) == 1
    with use_impl(attention="reference"):
        attention(**_args())
    assert len(fake_kernel) == 1
    with pytest.raises(ValueError, match="OJAS_ATTENTION_IMPL"):  # the environment, read at import
        dispatch._settings_from({"OJAS_ATTENTION_IMPL": "fast"})


def test_impl_auto_on_cpu_is_the_reference(fake_kernel, monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", True)
    args = _args(is_causal=True)
    out = attention(**args, impl="auto")
    assert fake_kernel == []
    torch.testing.assert_close(out, attention(**args, impl="reference"), rtol=0, atol=0)


def test_impl_triton_refusals(fake_kernel, monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", False)
    with pytest.raises(RuntimeError, match="impl='triton' needs CUDA tensors, or TRITON_INTERPRET=1"):
        attention(**_args(impl="triton"))
    monkeypatch.setattr(dispatch, "_interpret", True)
    with pytest.raises(ValueError, match="impl='triton' computes no gradient for attn_mask"):
        attention(**_args(attn_mask=torch.zeros(5, 6, requires_grad=True), impl="triton"))
    assert fake_kernel == []


_INTERPRETED_KERNEL_CHECK = """
import torch
from ojas_ref.functional.attention import attention
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(*s, generator=g, requires_grad=True) for s in ((1, 4, 20, 16), (1, 2, 27, 16), (1, 2, 27, 8)))
pad = torch.ones(1, 1, 1, 27, dtype=torch.bool); pad[..., :4] = False  # left padding, with causal: rows 0-3 see nothing
kw = dict(is_causal=True, enable_gqa=True, window=5, attn_mask=pad)
outs = [attention(q, k, v, impl=impl, **kw) for impl in ("triton", "reference")]
grads = [torch.autograd.grad(o, (q, k, v), torch.ones_like(o)) for o in outs]
for a, b in zip((outs[0], *grads[0]), (outs[1], *grads[1])):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
"""


def test_impl_triton_runs_the_kernel_interpreted():
    """impl="triton" on CPU under TRITON_INTERPRET=1 (which must be set before triton is
    imported, hence a subprocess) runs ojas_kernels.attention and agrees with the reference."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run(
        [sys.executable, "-c", _INTERPRETED_KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_lse_and_out_dtypes():
    for dtype, lse_dtype in ((torch.bfloat16, torch.float32), (torch.float16, torch.float32), (F64, F64)):
        case = make_case(1, sq=5, sk=7, e=16, ev=8, dtype=dtype)
        out, lse = attention_forward(case.query, case.key, case.value)
        assert out.dtype == dtype and lse.dtype == lse_dtype and out.shape == (1, 1, 5, 8)
        _, grads = ours_run(case)
        assert all(g.dtype == dtype for g in grads)


def test_empty_key_sequence_gives_zeros():
    case = make_case(2, sq=4, sk=0, e=16, ev=8, dtype=torch.float32)
    out, lse = attention_forward(case.query, case.key, case.value)
    assert out.shape == (1, 1, 4, 8) and torch.all(out == 0) and torch.all(torch.isneginf(lse))


def test_attn_mask_with_is_causal_is_their_conjunction():
    case = make_case(4, sq=20, sk=20, e=16, ev=8, dtype=F64, mask="bool", mask_shape="rows")
    causal = replace(case, is_causal=True)
    combined = replace(case, attn_mask=case.attn_mask & structural_visibility(causal))
    torch.testing.assert_close(ours_run(causal)[0], ours_run(combined)[0], rtol=0, atol=0)


# --------------------------------------------------------------------------
# Autocast: as scaled_dot_product_attention
# --------------------------------------------------------------------------


def _autocast_inputs(mask: Optional[str], dtype: torch.dtype = torch.float32) -> tuple[list[Tensor], dict]:
    """Leaves q, k, v (and a float mask) of dtype, GQA, 37 keys (not a multiple of the tiles)."""
    g = torch.Generator().manual_seed(17)
    q, k, v = (torch.randn(*s, generator=g, dtype=dtype) for s in ((2, 4, 29, 16), (2, 2, 37, 16), (2, 2, 37, 8)))
    kw: dict = dict(enable_gqa=True)
    if mask is None:
        kw["is_causal"] = True
    elif mask == "bool":  # key padding
        kw["attn_mask"] = torch.arange(37).expand(2, 1, 1, 37) < torch.tensor([37, 30]).view(2, 1, 1, 1)
    else:  # every row keeps at least one key (column 0)
        m = torch.randn(2, 1, 29, 37, generator=g, dtype=dtype)
        hide = torch.rand(2, 1, 29, 37, generator=g) < 0.3
        hide[..., 0] = False
        kw["attn_mask"] = m.masked_fill(hide, -math.inf)
    xs = [q, k, v] + ([kw.pop("attn_mask")] if mask == "float" else [])
    return [x.requires_grad_() for x in xs], kw


def _run_with_grads(fn, xs: list[Tensor], kw: dict, grad_seed: int = 3) -> tuple[Tensor, list[Tensor]]:
    """fn(*xs, **kw) and the gradients of <out, dO> for a fixed random dO, backward
    run inside the same (autocast) context as the forward."""
    q, k, v = xs[:3]
    if len(xs) == 4:
        kw = dict(kw, attn_mask=xs[3])
    out = fn(q, k, v, **kw)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out.dtype)
    return out, list(torch.autograd.grad(out, xs, do))


@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_autocast_matches_sdpa(mask):
    """Under torch.autocast("cpu", bfloat16) the output has SDPA's dtype (bfloat16) and
    values; gradients reach the float32 leaves (the float mask's too) in float32.
    Tolerance 2e-2 of max |ref| (as bfloat16 in tests/ojas_kernels/test_attention_kernel.py): both
    sides round q, k, v, the mask and the output to bfloat16 (u = 2^-8); SDPA's CPU
    kernel also rounds P and dS to bfloat16 before its matrix products, an error of a
    few u relative to the sums of |terms|, which with these random inputs are within a
    small factor of max |ref|."""
    xs, kw = _autocast_inputs(mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _run_with_grads(lambda *a, **k: attention(*a, impl="reference", **k), xs, kw)
        ref, ref_grads = _run_with_grads(F.scaled_dot_product_attention, xs, kw)
    assert out.dtype == ref.dtype == torch.bfloat16
    assert_normwise_close(out, ref, 2e-2, "out")
    for name, g, rg, x in zip(("grad_query", "grad_key", "grad_value", "grad_attn_mask"), grads, ref_grads, xs):
        assert g.dtype == rg.dtype == x.dtype == torch.float32, name
        assert_normwise_close(g, rg, 2e-2, name)


@pytest.mark.parametrize("mask", [None, "float"])
def test_autocast_casts_then_computes_as_without_autocast(mask):
    """Under autocast the result is bit for bit the one on inputs cast to bfloat16 outside
    autocast, forward and backward: the casts come first, the computation (float32) is not
    autocast. float64 inputs are not cast (as SDPA)."""
    xs, kw = _autocast_inputs(mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _run_with_grads(attention, xs, kw)
    cast = [x.detach().to(torch.bfloat16).requires_grad_() for x in xs]
    ref, ref_grads = _run_with_grads(attention, cast, kw)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    for g, rg in zip(grads, ref_grads):
        assert g.dtype == torch.float32 and torch.equal(g, rg.float())
    xs64, kw = _autocast_inputs(mask, F64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out64, _ = _run_with_grads(attention, xs64, kw)
        sdpa64 = _run_with_grads(F.scaled_dot_product_attention, xs64, kw)[0]
    assert out64.dtype == sdpa64.dtype == F64
    assert_normwise_close(out64, sdpa64, 1e-10, "out")
