"""BlockCoordinateOptimizer (BAdam's schedule) against hand-written loops, bitwise.

The model, batches and comparison are test_in_backward's (TinyLM: 2 layers, tied
embedding; CPU, float32). BAdam is not full training, so the references are: the standard AdamW
loop when one block holds every parameter, and a hand-written freeze / AdamW on the active block
/ switch / fresh state loop otherwise.
"""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Callable, Optional

import pytest
import torch
from torch import nn

from ojas_ref.optim.block_coordinate import BlockCoordinateOptimizer, decoder_layer_blocks
from test_in_backward import CLIP, assert_same, batch, make_model

KW = dict(lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
ORDERS = {"ascending": [0, 1, 2, 0], "descending": [2, 1, 0, 2], "random": None}
FUSED = pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])

pytestmark = pytest.mark.usefixtures("one_thread")


def split(model: nn.Module, n: int) -> list[list[torch.Tensor]]:
    """TinyLM's parameters in ``n`` (1, 2 or 3) blocks, in model order."""
    emb = [model.pos, model.emb.weight]  # named_parameters order: own parameters first
    layer0, layer1 = (list(b.parameters()) for b in model.blocks)
    last = layer1 + list(model.ln_f.parameters())
    return {1: [emb + layer0 + last], 2: [emb + layer0, last], 3: [emb, layer0, last]}[n]


def train(
    model: nn.Module,
    opt: BlockCoordinateOptimizer,
    steps: range,
    sched=None,
    check: Optional[Callable[[int], None]] = None,
) -> None:
    for step in steps:
        opt.backward(model(*batch(step, 0)))
        if check is not None:
            check(step)
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


def block_run(
    n: int,
    fused: bool,
    steps: int,
    *,
    switch_every: int = 2,
    order: str = "ascending",
    model: Optional[nn.Module] = None,
    **options,
) -> tuple[nn.Module, BlockCoordinateOptimizer]:
    """Train with ``n`` blocks of TinyLM; ``options`` are passed to the optimizer (InBackwardOptimizer's
    ``max_grad_norm``, ...)."""
    model = make_model() if model is None else model
    opt = BlockCoordinateOptimizer(
        split(model, n), switch_every=switch_every, order=order, fused_into_backward=fused, **KW, **options
    )
    train(model, opt, range(steps))
    return model, opt


def reference(
    periods: list[int], steps: int, switch_every: int, n: int = 3, lam: Callable[[int], float] = lambda t: 1.0
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """BAdam by hand: at each period freeze all but its block (of ``n``) and build a fresh AdamW on it."""
    model = make_model()
    blocks = split(model, n)
    for step in range(steps):
        if step % switch_every == 0:
            active = blocks[periods[step // switch_every]]
            for block in blocks:
                for p in block:
                    p.requires_grad_(block is active)
            opt = torch.optim.AdamW(active, **KW)
        opt.param_groups[0]["lr"] = KW["lr"] * lam(step)
        model(*batch(step, 0)).backward()
        opt.step()
        opt.zero_grad()
    return model, opt


@pytest.mark.parametrize(
    "fused,clip", [(False, None), (True, None), (True, CLIP)], ids=["plain", "fused", "fused_clip"]
)
def test_one_block_is_the_standard_loop(fused: bool, clip: Optional[float]) -> None:
    model_s = make_model()
    opt_s = torch.optim.AdamW(model_s.parameters(), **KW)
    for step in range(4):
        model_s(*batch(step, 0)).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model_s.parameters(), clip)
        opt_s.step()
        opt_s.zero_grad()
    model_b, opt_b = block_run(1, fused, 4, switch_every=10**9, **({} if clip is None else dict(max_grad_norm=clip)))
    assert_same(model_s, opt_s, model_b, opt_b)
    assert all(p.requires_grad for p in model_b.parameters())


@FUSED
def test_inactive_block_is_untouched(fused: bool) -> None:
    model = make_model()
    blocks = split(model, 2)
    opt = BlockCoordinateOptimizer(blocks, switch_every=2, fused_into_backward=fused, **KW)
    for step in range(6):
        active, inactive = blocks[opt.active_block], blocks[1 - opt.active_block]
        assert opt.active_block == (step // 2) % 2
        before = [p.detach().clone() for p in inactive]
        loss = model(*batch(step, 0))
        opt.backward(loss)
        assert all(p.grad is None and not p.requires_grad for p in inactive)
        opt.step()
        assert all(torch.equal(p, b) for p, b in zip(inactive, before))
        ids = {id(p) for p in opt.state}
        if step % 2 == 0:  # no switch at this step: the state is the active block's, every parameter of it
            assert ids == {id(p) for p in active}
        else:  # switched: fresh optimizer over the other block, no state yet
            assert ids == set() and all(p.requires_grad for p in inactive)
        opt.zero_grad()


@FUSED
@pytest.mark.parametrize("order", list(ORDERS))
def test_equals_the_badam_reference(order: str, fused: bool) -> None:
    model, opt = block_run(3, fused, 7, order=order)  # 7: the state is compared before the 4th period ends
    periods = ORDERS[order] or [opt.block_at(k) for k in range(4)]
    if order == "random":
        assert sorted(periods[:3]) == [0, 1, 2]  # a permutation per pass over the blocks
    model_r, opt_r = reference(periods, 7, 2)
    assert_same(model_r, opt_r, model, opt)


@FUSED
def test_switch_to_the_same_block_restarts_its_state(fused: bool) -> None:
    model, opt = block_run(1, fused, 5)
    model_r, opt_r = reference([0, 0, 0], 5, 2, n=1)
    assert_same(model_r, opt_r, model, opt)


@FUSED
def test_scheduler_runs_across_switches(fused: bool) -> None:
    def lam(t: int) -> float:
        return 0.8**t

    model = make_model()
    opt = BlockCoordinateOptimizer(split(model, 3), switch_every=2, fused_into_backward=fused, **KW)
    train(model, opt, range(8), sched=torch.optim.lr_scheduler.LambdaLR(opt, lam))
    model_r, opt_r = reference(ORDERS["ascending"], 8, 2, lam=lam)
    assert opt.param_groups[0]["lr"] == KW["lr"] * lam(8)
    for a, b in zip(model.parameters(), model_r.parameters()):
        assert torch.equal(a, b)


@FUSED
def test_state_only_for_the_active_block(fused: bool) -> None:
    """After each backward the live AdamW moments (exp_avg, exp_avg_sq) are 2 per parameter of the
    active block (once it was updated: in this backward when fused, else at its first step), and
    none of an earlier block survives anywhere (weak references)."""
    model = make_model()
    opt = BlockCoordinateOptimizer(split(model, 3), switch_every=2, fused_into_backward=fused, **KW)
    seen: list[weakref.ref] = []

    def check(step: int) -> None:
        moments = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
        updated = fused or step % 2 == 1
        assert len(moments) == (2 * len(split(model, 3)[opt.active_block]) if updated else 0)
        seen.extend(map(weakref.ref, moments))
        gc.collect()
        assert len({id(r()) for r in seen if r() is not None}) == len(moments)

    train(model, opt, range(8), check=check)


@FUSED
@pytest.mark.parametrize("stop", [3, 4], ids=["mid_block", "at_switch"])
def test_state_dict_resumes_bit_for_bit(stop: int, fused: bool) -> None:
    model_a, opt_a = block_run(3, fused, 9, order="random")
    model_b, opt_b = block_run(3, fused, stop, order="random")
    saved_model, saved_opt = copy.deepcopy(model_b.state_dict()), copy.deepcopy(opt_b.state_dict())
    del model_b, opt_b
    model_c = make_model()
    model_c.load_state_dict(saved_model)
    opt_c = BlockCoordinateOptimizer(split(model_c, 3), switch_every=2, order="random", fused_into_backward=fused, **KW)
    opt_c.load_state_dict(saved_opt)
    train(model_c, opt_c, range(stop, 9))
    assert_same(model_a, opt_a, model_c, opt_c)
    assert opt_c.state_dict()["block_coordinate"] == opt_a.state_dict()["block_coordinate"]


def test_load_state_dict_of_another_schedule_raises() -> None:
    _, opt = block_run(3, False, 1)
    other = BlockCoordinateOptimizer(split(make_model(), 3), switch_every=3, **KW)
    with pytest.raises(ValueError, match="switch_every"):
        other.load_state_dict(opt.state_dict())


@FUSED
def test_user_frozen_parameter_stays_frozen(fused: bool) -> None:
    model = make_model()
    model.pos.requires_grad_(False)
    before = model.pos.detach().clone()
    block_run(3, fused, 8, model=model)
    assert not model.pos.requires_grad and model.pos.grad is None and torch.equal(model.pos, before)


def test_bad_arguments_raise_naming_them() -> None:
    model = make_model()
    blocks = split(model, 2)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="switch_every"):
            BlockCoordinateOptimizer(blocks, switch_every=bad)
    with pytest.raises(ValueError, match="order"):
        BlockCoordinateOptimizer(blocks, switch_every=1, order="sideways")
    with pytest.raises(ValueError, match="blocks is empty"):
        BlockCoordinateOptimizer([], switch_every=1)
    with pytest.raises(ValueError, match="block 1 is empty"):
        BlockCoordinateOptimizer([blocks[0], []], switch_every=1)
    with pytest.raises(ValueError, match="in block 0 and again in block 1"):
        BlockCoordinateOptimizer([blocks[0], blocks[1] + [model.pos]], switch_every=1)
    with pytest.raises(TypeError, match="fused_into_backward"):
        BlockCoordinateOptimizer(blocks, switch_every=1, fused_into_backward="yes")
    model.pos.requires_grad_(False)
    with pytest.raises(ValueError, match=r"blocks: block\(s\) \[1\] hold only frozen"):
        BlockCoordinateOptimizer([blocks[1], [model.pos]], switch_every=1)
    with pytest.raises(ValueError, match="model: no decoder layers"):
        decoder_layer_blocks(model)
    with pytest.raises(ValueError, match="layers_per_block"):
        decoder_layer_blocks(model, layers_per_block=0)
    with pytest.raises(ValueError, match="extra"):
        decoder_layer_blocks(model, extra="first")


@pytest.mark.parametrize("extra", ["last", "own"])
def test_decoder_layer_blocks_of_a_llama(extra: str) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=61,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    blocks = decoder_layer_blocks(model, layers_per_block=2, extra=extra)
    layers = model.model.layers
    rest = [model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight]
    expected = [
        list(layers[0].parameters()) + list(layers[1].parameters()),
        list(layers[2].parameters()) + list(layers[3].parameters()),
    ]
    expected = [expected[0], expected[1] + rest] if extra == "last" else expected + [rest]
    assert [list(map(id, b)) for b in blocks] == [list(map(id, b)) for b in expected]
    opt = BlockCoordinateOptimizer(blocks, switch_every=1, **KW)
    tokens = torch.randint(61, (2, 8), generator=torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in blocks[1]]
    opt.backward(model(input_ids=tokens, labels=tokens).loss)
    opt.step()
    assert all(torch.equal(p, b) for p, b in zip(blocks[1], before))
    assert opt.active_block == 1 and all(p.requires_grad for p in blocks[1])
