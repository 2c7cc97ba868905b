"""The oracle extracted from the Coq spec (extraction/) against float64 torch.

The oracle runs ``attention_forward``/``attention_two_pass``
(rocq/Attention/OnlineSoftmax.v) and ``attention_backward``
(rocq/Attention/Backward.v) in float64; here it is compared with a
materialised softmax computed independently in torch.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ojas_ref.verification.oracle import attention_oracle, oracle_binary, oracle_request

F64 = torch.float64


def reference(q, k, v, *, scale, is_causal=False, window=None, mask=None, groups=1, grad_out=None, bias=None):
    """Materialised float64 attention; kv head ``h // groups`` serves query head ``h``;
    ``bias`` a full-shape float mask added to the scores (-inf entries masked)."""
    q, k, v = (t.detach().clone().requires_grad_(grad_out is not None) for t in (q, k, v))
    if bias is not None:
        mask = torch.isfinite(bias) if mask is None else mask & torch.isfinite(bias)
        bias = bias.masked_fill(~torch.isfinite(bias), 0.0).requires_grad_(grad_out is not None)
    hq, sq, sk = q.shape[1], q.shape[2], k.shape[2]
    kh = torch.arange(hq) // groups
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if is_causal:
        visible &= j <= i
    if window is not None:
        visible &= (i - j).abs() < window
    visible = visible.expand(q.shape[0], hq, sq, sk)
    if mask is not None:
        visible = visible & mask
    s = scale * q @ k[:, kh].transpose(-1, -2)
    if bias is not None:
        s = s + bias
    any_visible = visible.any(-1, keepdim=True)
    s = s.masked_fill(~visible, -math.inf).masked_fill(~any_visible, 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(~any_visible[..., 0], -math.inf)
    out = torch.where(any_visible, torch.softmax(s, -1) @ v[:, kh], 0.0)
    res = {"out": out.detach(), "lse": lse.detach()}
    if grad_out is not None:
        out.backward(grad_out)
        res.update(
            grad_query=q.grad,
            grad_key=k.grad,
            grad_value=v.grad,
            grad_attn_mask=None if bias is None else bias.grad.masked_fill(~visible, 0.0),
        )
    return res


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@st.composite
def problems(draw):
    b, hkv, groups = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    sq, sk, e, ev = (draw(st.integers(1, 6)) for _ in range(4))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    amp = draw(st.sampled_from([0.1, 1.0, 4.0]))
    q = amp * torch.randn(b, hkv * groups, sq, e, generator=gen, dtype=F64)
    k = amp * torch.randn(b, hkv, sk, e, generator=gen, dtype=F64)
    v = torch.randn(b, hkv, sk, ev, generator=gen, dtype=F64)
    d_o = torch.randn(b, hkv * groups, sq, ev, generator=gen, dtype=F64)
    mask_shape = draw(st.sampled_from([None, (sq, sk), (b, 1, sq, sk), (b, hkv * groups, sq, sk)]))
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape, generator=gen) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    kw = dict(
        is_causal=draw(st.booleans()),
        window=draw(st.one_of(st.none(), st.integers(1, 6))),
        scale=draw(st.one_of(st.none(), st.floats(0.05, 2.0))),
    )
    return q, k, v, d_o, mask, groups, kw, draw(st.integers(1, 7))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_oracle_matches_materialised_torch(problem):
    q, k, v, d_o, mask, groups, kw, block_size = problem
    got = attention_oracle(q, k, v, mask, enable_gqa=True, block_size=block_size, grad_out=d_o, **kw)
    scale = kw["scale"] if kw["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    full_mask = None if mask is None else mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    want = reference(
        q,
        k,
        v,
        scale=scale,
        is_causal=kw["is_causal"],
        window=kw["window"],
        mask=full_mask,
        groups=groups,
        grad_out=d_o,
    )
    # streamed (block_step over chunk) = two-pass spec, up to rounding
    close(got["out"], got["out_two_pass"], 1e-12)
    close(got["lse"], got["lse_two_pass"], 1e-12)
    for name in ("out", "lse", "grad_query", "grad_key", "grad_value"):
        close(got[name], want[name])
    masked_rows = torch.isneginf(got["lse"])
    assert (got["out"][masked_rows] == 0).all()
    assert (got["grad_query"][masked_rows] == 0).all()


def test_grouped_heads_are_not_repeated_by_the_client():
    """The oracle takes the key/value heads as they are (gqa_forward / gqa_backward):
    its gradients come back with Hkv heads, and they are the per-group sums of the
    gradients of the same problem with the heads repeated (gqa_backward_dK with gqa_dK_is_derive,
    gqa_forward_repeat_kv)."""
    gen = torch.Generator().manual_seed(3)
    q, d_o = (torch.randn(1, 6, 4, 3, generator=gen, dtype=F64) for _ in range(2))
    k, v = (torch.randn(1, 2, 5, 3, generator=gen, dtype=F64) for _ in range(2))
    got = attention_oracle(q, k, v, is_causal=True, enable_gqa=True, block_size=2, grad_out=d_o)
    rep = attention_oracle(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), is_causal=True, block_size=2, grad_out=d_o
    )
    assert got["grad_key"].shape == k.shape and got["grad_value"].shape == v.shape
    close(got["out"], rep["out"], 0.0)
    close(got["grad_query"], rep["grad_query"], 0.0)
    for name in ("grad_key", "grad_value"):
        close(got[name], rep[name].unflatten(1, (2, 3)).sum(2), 1e-12)


@settings(max_examples=30, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.3, 1.0]))
def test_oracle_float_mask_matches_materialised_torch(problem, masked):
    """A float mask (AdditiveMask.v: float_mask, attention_dbias): out, lse and the
    mask's gradient against float64 torch, -inf entries (a fraction ``masked``, whole
    rows included) masked, combined with causal / window / GQA."""
    q, k, v, d_o, _, groups, kw, block_size = problem
    gen = torch.Generator().manual_seed(q.numel())
    bias = 3 * torch.randn(q.shape[0], q.shape[1], q.shape[2], k.shape[2], generator=gen, dtype=F64)
    bias = bias.masked_fill(torch.rand(bias.shape, generator=gen) < masked, -math.inf)
    got = attention_oracle(q, k, v, bias, enable_gqa=True, block_size=block_size, grad_out=d_o, **kw)
    scale = kw["scale"] if kw["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    want = reference(
        q, k, v, scale=scale, is_causal=kw["is_causal"], window=kw["window"], groups=groups, grad_out=d_o, bias=bias
    )
    close(got["out"], got["out_two_pass"], 1e-12)
    close(got["lse"], got["lse_two_pass"], 1e-12)
    for name in ("out", "lse", "grad_attn_mask"):
        close(got[name], want[name])
    assert "grad_query" not in got  # no whole-head theorem under a float mask: not returned


def test_tile_size_does_not_change_the_result():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 4, generator=gen, dtype=F64) for n in (5, 9, 9))
    base = attention_oracle(q, k, v, is_causal=True, block_size=1)
    for block_size in (2, 3, 9, 100):
        got = attention_oracle(q, k, v, is_causal=True, block_size=block_size)
        close(got["out"], base["out"], 1e-12)
        close(got["lse"], base["lse"], 1e-12)


def test_fully_masked_rows_and_single_positions():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 1, 3, generator=gen, dtype=F64) for _ in range(3))
    one = attention_oracle(q, k, v)
    close(one["out"], v)
    close(one["lse"], q.mul(k).sum(-1) / math.sqrt(3))

    q, k, v = (torch.randn(1, 1, 3, 2, generator=gen, dtype=F64) for _ in range(3))
    mask = torch.tensor([[True, False, True], [False, False, False], [False, True, False]])
    got = attention_oracle(q, k, v, mask, grad_out=torch.ones(1, 1, 3, 2, dtype=F64))
    assert got["lse"][0, 0, 1] == -math.inf and got["lse_two_pass"][0, 0, 1] == -math.inf
    assert (got["out"][0, 0, 1] == 0).all() and (got["out_two_pass"][0, 0, 1] == 0).all()
    assert (got["grad_query"][0, 0, 1] == 0).all()
    assert torch.isfinite(got["grad_key"]).all() and torch.isfinite(got["grad_value"]).all()


def test_client_rejects_what_the_oracle_cannot_carry(monkeypatch):
    q = torch.randn(1, 1, 2, 2, dtype=F64)
    with pytest.raises(TypeError, match="boolean or floating-point"):
        attention_oracle(q, q, q, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="finite or -inf"):
        attention_oracle(q, q, q, torch.full((2, 2), math.inf))
    with_nan = q.clone()
    with_nan[0, 0, 0, 1] = math.nan  # (a mask of q > 0 held no entry in one draw of 16: the flake seen once)
    with pytest.raises(ValueError, match="NaN"):
        attention_oracle(q, q, with_nan)
    with pytest.raises(ValueError, match="enable_gqa"):
        attention_oracle(torch.randn(1, 2, 2, 2), q, q)
    with pytest.raises(ValueError, match="window"):
        attention_oracle(q, q, q, window=0)
    monkeypatch.setenv("OJAS_ORACLE", "/nonexistent/ojas-oracle")
    with pytest.raises(RuntimeError, match="make -C extraction"):
        oracle_binary()


def _request(**changes):
    one = [[[[1.0, 0.5]]]]
    req = {
        "op": "attention",
        "query": one,
        "key": one,
        "value": one,
        "scale": 1.0,
        "is_causal": False,
        "window": None,
        "attn_mask": None,
        "block_size": 2,
        "grad_out": None,
    }
    req.update(changes)
    return req


@pytest.mark.parametrize(
    "field, changes",
    [
        ("query", {"query": [[[[1.0, 0.5], [1.0]]]]}),
        ("query", {"query": [[[[1.0, "x"]]]]}),
        ("key", {"key": [[[[1.0, 0.5, 2.0]]]]}),
        ("key", {"key": [[[[1.0, 0.5]]], [[[1.0, 0.5]]]]}),
        ("key", {"key": [[[[1.0, 0.5]], [[1.0, 0.5]]]], "value": [[[[1.0, 0.5]], [[1.0, 0.5]]]]}),
        ("value", {"value": [[[[1.0], [2.0]]]]}),
        ("attn_mask", {"attn_mask": [[[[True, False]]]]}),
        ("attn_mask", {"attn_mask": [[[[1]]]]}),
        ("grad_out", {"grad_out": [[[[1.0]]]]}),
        ("block_size", {"block_size": 0}),
        ("block_size", {"block_size": 1.5}),
        ("window", {"window": 0}),
        ("scale", {"scale": "one"}),
        ("is_causal", {"is_causal": 1}),
        ("op", {"op": "matmul"}),
        ("mask", {"mask": None}),
    ],
)
def test_malformed_request_names_the_field(field, changes):
    answer = oracle_request(_request(**changes))
    assert set(answer) == {"error"}
    assert answer["error"].startswith(field + ":"), answer["error"]


def test_oracle_answers_after_an_error():
    lines = ["not json", json.dumps(_request(block_size=-1)), json.dumps(_request())]
    proc = subprocess.run(
        [str(oracle_binary())], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "invalid JSON" in answers[0]["error"]
    assert answers[1]["error"].startswith("block_size:")
    assert answers[2]["out"] == [[[[1.0, 0.5]]]] and answers[2]["lse"] == [[[1.25]]]
