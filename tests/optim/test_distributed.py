"""InBackwardOptimizer and ReversibleSequence under DistributedDataParallel and FSDP2 (fully_shard).

Two CPU processes on the gloo backend (tests/_distributed.py) train a small float64
MLP for 3 steps, each rank on its half of every batch; configs: SGD with momentum,
AdamW, AdamW with clipping, gradient accumulation over 2 micro-batches (the first
without gradient synchronisation: DDP's ``no_sync()``, FSDP2's
``set_requires_gradient_sync(False)``), with and without clipping.  After the steps,
every rank's parameters must be bitwise equal, and equal to those of the
single-process standard loop on the concatenated batches within ``TOL``.  Before the
fix, each rank updated with its own gradient before DDP averaged it, and the ranks
differed by about 4e-2 after two SGD steps.  A model with a ReversibleSequence inside
is trained the same way (AdamW, clipping) under both, and a tiny LM made of
ojas_ref.attention and ojas_ref.linear_cross_entropy (SGD with momentum; AdamW's
division by sqrt(v) + eps amplifies the rounding of its near-zero embedding
gradients to about 1e-12, beyond TOL).

One ``spawn`` per engine runs all its configs (process start-up is most of the
cost: about 10 s in all on 2 cores).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed with the gloo backend"
)

import _distributed as D  # noqa: E402  (tests/_distributed.py)

# The distributed gradient is the mean over ranks of each rank's mean-loss gradient, the
# single-process one the mean over all rows: the same real number summed in another order,
# a few float64 ulps apart (unit roundoff 1.1e-16) on gradients of order 1. Three SGD/AdamW
# steps with lr <= 0.1 on parameters of order 1 carry that into the parameters at the same
# order (measured: at most 5.6e-17); 1e-14 leaves a factor of 100 and is 10^12 times below the
# divergence of the bug (4e-2).
TOL = 1e-14


@pytest.fixture(scope="module")
def ddp() -> list[dict]:
    return D.spawn(D.ddp_worker)


@pytest.fixture(scope="module")
def fsdp() -> list[dict]:
    return D.spawn(D.fsdp_worker)


def ranks_equal(results: list[dict], key: str) -> list[torch.Tensor]:
    """Rank 0's parameters, after checking every rank has bitwise the same."""
    first = results[0][key]
    for rank, other in enumerate(results[1:], 1):
        for i, (a, b) in enumerate(zip(first, other[key])):
            assert torch.equal(a, b), (
                f"{key}: parameter {i} differs between rank 0 and rank {rank}: "
                f"max |diff| {float((a - b).abs().max()):.3g}"
            )
    return first


def assert_close(params: list[torch.Tensor], expected: list[torch.Tensor], name: str) -> None:
    assert len(params) == len(expected)
    for i, (a, e) in enumerate(zip(params, expected)):
        diff = float((a - e).abs().max())
        assert diff <= TOL, f"{name}: parameter {i} differs from the single-process run by {diff:.3g}"


def assert_close_to_reference(params: list[torch.Tensor], name: str, reversible: bool = False) -> None:
    expected, norms = D.reference(name, reversible)
    if D.CONFIGS[name][2] is not None:
        assert min(norms) > D.CONFIGS[name][2], "the test must exercise clipping"
    assert_close(params, expected, name)


@pytest.mark.parametrize("name", list(D.CONFIGS))
def test_ddp_matches_single_process(ddp: list[dict], name: str) -> None:
    assert_close_to_reference(ranks_equal(ddp, name), name)


@pytest.mark.parametrize("name", list(D.CONFIGS))
def test_ddp_is_torch_optim_under_ddp_bitwise(ddp: list[dict], name: str) -> None:
    """The same reduced gradients and the same torch.optim arithmetic: bitwise the standard DDP loop."""
    ours, theirs = ranks_equal(ddp, name), ranks_equal(ddp, name + "/torch")
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("option", ["bucket_view", "static_graph"])
def test_ddp_options(ddp: list[dict], option: str) -> None:
    """gradient_as_bucket_view=True (.grad is a view of DDP's bucket), static_graph=True (the
    first iteration all-reduces in a callback of DDP's): the same result."""
    assert_close_to_reference(ranks_equal(ddp, "sgd/" + option), "sgd")


def test_ddp_reversible_sequence(ddp: list[dict]) -> None:
    """A model with a ReversibleSequence inside, under DDP, clipped: as the single process."""
    assert_close_to_reference(ranks_equal(ddp, "adamw_clip/reversible"), "adamw_clip", reversible=True)


def test_ddp_find_unused_parameters(ddp: list[dict]) -> None:
    """A layer only rank 1 uses (rank 0 gets DDP's average and steps it too) and one no rank
    uses (no gradient, not stepped, AdamW's weight decay included): as the standard DDP loop."""
    ours, theirs = ranks_equal(ddp, "adamw/find_unused"), ranks_equal(ddp, "adamw/find_unused/torch")
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    model = D.make_model()  # the initial weights, built as _ddp_run builds them
    model.extend([torch.nn.Linear(4, 4).to(D.F64), torch.nn.Linear(4, 4).to(D.F64)])
    initial = [p.detach() for p in model.parameters()]
    assert len(ours) == len(initial)
    assert not torch.equal(ours[-4], initial[-4])  # used on rank 1: updated on both ranks
    assert torch.equal(ours[-1], initial[-1])  # used nowhere: never stepped


def test_ddp_mixed_precision_is_refused(ddp: list[dict]) -> None:
    assert "does not support DistributedDataParallel with mixed_precision" in ddp[0]["error/mixed_precision"]


def test_ddp_attention_and_linear_cross_entropy(ddp: list[dict]) -> None:
    """An LM with ojas_ref.attention and ojas_ref.linear_cross_entropy (CPU: their PyTorch
    references), SGD with momentum in backward: as the single process, and bitwise
    torch.optim under DDP."""
    params = ranks_equal(ddp, "lm")
    assert_close(params, D.lm_reference(), "lm")
    assert all(torch.equal(a, b) for a, b in zip(params, ranks_equal(ddp, "lm/torch")))


def test_ddp_finding_hook_is_removed(ddp: list[dict]) -> None:
    """The global forward pre-hook that finds DDP models (it runs at every module call) is
    removed once the optimizer knows the DDP of each of its parameters."""
    assert ddp[0]["watch_removed"] and ddp[1]["watch_removed"]


def test_ddp_accumulation_steps_is_refused(ddp: list[dict]) -> None:
    assert "accumulation_steps > 1 is not supported under DistributedDataParallel" in ddp[0]["error/accumulation_steps"]
    assert "no_sync()" in ddp[0]["error/accumulation_steps"]


@pytest.mark.parametrize("name", list(D.CONFIGS))
def test_fsdp2_matches_single_process(fsdp: list[dict], name: str) -> None:
    """Updated on the local shard after the reduce-scatter; with clipping, the global norm."""
    assert_close_to_reference(ranks_equal(fsdp, name), name)


def test_fsdp2_reversible_sequence(fsdp: list[dict]) -> None:
    """A ReversibleSequence sharded by the root FSDP module (its parameters all-gathered again
    for the reversible backward): as the single process, with the global-norm clipping."""
    assert_close_to_reference(ranks_equal(fsdp, "adamw_clip/reversible"), "adamw_clip", reversible=True)


def test_fsdp2_attention_and_linear_cross_entropy(fsdp: list[dict]) -> None:
    assert_close(ranks_equal(fsdp, "lm"), D.lm_reference(), "lm")


def test_fsdp2_on_reversible_blocks_is_refused(fsdp: list[dict]) -> None:
    """Sharding the blocks themselves: a clear error, not torch's "mixed torch.Tensor and DTensor"."""
    assert (
        "apply fully_shard to the ReversibleSequence or to a module above it"
        in fsdp[0]["error/reversible_blocks_sharded"]
    )


def test_fsdp2_accumulation_steps_is_refused(fsdp: list[dict]) -> None:
    assert "set_requires_gradient_sync(False)" in fsdp[0]["error/accumulation_steps"]


def test_local_update_in_a_distributed_job_warns(ddp: list[dict]) -> None:
    """A parameter no DDP reduces, in a 2-rank job: updated with the local gradient, with one warning."""
    assert len(ddp[0]["warning/local"]) == 1
    assert "updates a parameter with this rank's local gradient" in ddp[0]["warning/local"][0]
