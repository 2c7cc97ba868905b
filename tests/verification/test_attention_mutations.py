"""The oracle comparison catches a wrong reference.

Each mutant below breaks ``ojas_ref.attention`` in one classic way (monkeypatched in,
built by wrapping the real function rather than copying it); ``oracle_mismatches`` of
ojas_ref/verification/attention_check.py, the comparison of the oracle tests, must report a
mismatch for it, and none for the unmutated code.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from ojas_ref.verification.attention_check import make_case, oracle_mismatches

attn_mod = importlib.import_module("ojas_ref.functional._attention_reference")

_block_step = attn_mod._online_softmax_block_step
_tile_visibility = attn_mod._tile_visibility


def _without_rescale(m, l, acc, scores, value):
    """(a) drops the rescale factor exp(m - m'): the step runs from the new max, so
    exp(m' - m') = 1 multiplies the old l and acc."""
    return _block_step(torch.maximum(m, scores.amax(dim=-1)), l, acc, scores, value)


def _stale_max(m, l, acc, scores, value):
    """(b) rescales with the wrong max: the state keeps the first tile's max, so later
    steps rescale by exp(m_first - m') what is relative to the true running max (out goes
    wrong from the third key tile on, lse from the second)."""
    m_new, l_new, acc_new = _block_step(m, l, acc, scores, value)
    return torch.where(torch.isneginf(m), m_new, m), l_new, acc_new


def _causal_off_by_one(q0, q1, k0, k1, is_causal, window, device):
    """(c) off-by-one causal mask: query i sees key j <= i + 1."""
    return _tile_visibility(q0 + 1, q1 + 1, k0, k1, is_causal, window, device)


MUTANTS = {
    "no_rescale": ("_online_softmax_block_step", _without_rescale),
    "stale_max": ("_online_softmax_block_step", _stale_max),
    "causal_off_by_one": ("_tile_visibility", _causal_off_by_one),
}

# Four key tiles of the reference's 16 keys for query rows 32.., so that the running max
# changes between tiles; causal, so that the mask is used; GQA, a bool mask and a fully
# masked row as in the oracle tests.
CASES = [
    dict(dtype=torch.float32, batch=1, kv_heads=2, group=2, sq=50, sk=64, e=16, ev=8, is_causal=True),
    dict(
        dtype=torch.bfloat16,
        batch=2,
        kv_heads=1,
        group=1,
        sq=64,
        sk=70,
        e=32,
        ev=16,
        is_causal=True,
        mask="bool",
        mask_shape="rows",
        dead_rows=(5,),
    ),
]


@pytest.mark.parametrize("params", CASES, ids=["float32", "bfloat16"])
def test_unmutated_reference_passes(params):
    assert oracle_mismatches(make_case(11, **params)) == []


@pytest.mark.parametrize("params", CASES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_caught(mutant, params, monkeypatch):
    name, replacement = MUTANTS[mutant]
    monkeypatch.setattr(attn_mod, name, replacement)
    problems = oracle_mismatches(make_case(11, **params))
    # The proved forward bound alone catches it (lse and the gradients disagree too).
    assert any(p.startswith("out:") for p in problems), f"mutant {mutant}: {problems}"
