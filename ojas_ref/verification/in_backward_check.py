"""Differential check of one optimizer update against the oracle extracted from Coq.

Shared by tests/optim/test_in_backward.py and ``ojas audit``: a case is a dict
(rule "sgd" | "adamw", its hyper-parameters, param, grad, the parameter's torch.optim
state), ``updates`` runs one float64 step of ``torch.optim.SGD`` / ``AdamW`` and of
:class:`InBackwardOptimizer` (the update in the post-accumulate-grad hook of a backward
pass) on it, and ``oracle_mismatches`` lists what disagrees with ``sgd_update`` /
``adamw_update`` of rocq/InBackward/UpdateRules.v beyond ``oracle_tolerance``.
Over the reals these rules are the documented SGD / AdamW formulas
(``Ojas.InBackward.UpdateRules.sgd_update_R`` / ``adamw_update_R``); the oracle
runs them in float64 with fused multiply-adds where torch's CPU kernels have them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ojas_ref.optim.in_backward import InBackwardOptimizer

F64 = torch.float64
OPTIMIZERS = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}

# Unit roundoff of float64, and the ulps allowed per element (see oracle_tolerance).
_U64 = 2.0**-53
_ULPS = 16

#: ``make_case`` arguments (besides the seed) covering both rules, the first step,
#: momentum off, Nesterov, other betas and a parameter large enough for torch's
#: vectorised CPU kernels.
CASES = [
    {"rule": "sgd"},
    {"rule": "sgd", "fresh": True},
    {"rule": "sgd", "momentum": 0.0},
    {"rule": "sgd", "nesterov": True, "dampening": 0.0},
    {"rule": "sgd", "momentum": 0.0, "weight_decay": 0.0},
    {"rule": "adamw"},
    {"rule": "adamw", "fresh": True},
    {"rule": "adamw", "betas": (0.8, 0.95), "eps": 1e-6},
    {"rule": "adamw", "weight_decay": 0.0, "shape": (64, 33)},
]


def make_case(seed: int, rule: str, *, shape: tuple[int, ...] = (4, 5), fresh: bool = False, **hyper: Any) -> dict:
    """A deterministic case; ``fresh``: no optimizer state yet (the first step).

    Hyper-parameters default to non-trivial values (weight decay, momentum with
    dampening for SGD); pass any of them to override."""
    gen = torch.Generator().manual_seed(seed)
    param = torch.randn(shape, generator=gen, dtype=F64)
    grad = torch.randn(shape, generator=gen, dtype=F64) * 0.3
    if rule == "sgd":
        hyper = {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "nesterov": False, **hyper}
        state = (
            {}
            if fresh or hyper["momentum"] == 0
            else {"momentum_buffer": torch.randn(shape, generator=gen, dtype=F64) * 0.2}
        )
    elif rule == "adamw":
        hyper = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1, **hyper}
        step = int(torch.randint(1, 50, (), generator=gen))
        state = (
            {}
            if fresh
            else {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.randn(shape, generator=gen, dtype=F64) * 0.1,
                "exp_avg_sq": torch.rand(shape, generator=gen, dtype=F64) * 0.01,
            }
        )
    else:
        raise ValueError(f"rule: expected 'sgd' or 'adamw', got {rule!r}")
    return {"rule": rule, "hyper": hyper, "param": param, "grad": grad, "state": state}


def updates(case: dict) -> dict[str, tuple[torch.Tensor, dict[str, Any]]]:
    """(new param, new state) of one step of torch.optim ("torch") and of
    InBackwardOptimizer ("in_backward", updated in the backward pass of <p, grad>)."""
    cls = OPTIMIZERS[case["rule"]]
    out = {}
    for impl in ("torch", "in_backward"):
        p = nn.Parameter(case["param"].clone())
        if impl == "torch":
            opt = cls([p], **case["hyper"])
        else:
            opt = InBackwardOptimizer([p], cls, **case["hyper"])
        opt.state[p] = {k: v.clone() for k, v in case["state"].items()}
        if impl == "torch":
            p.grad = case["grad"].clone()
            opt.step()
        else:
            (p * case["grad"]).sum().backward()  # d/dp <p, grad> = grad, exactly
            opt.step()  # ends the step: the consumed gradient's placeholder goes back to None
            assert p.grad is None
        out[impl] = (p.detach(), dict(opt.state[p]))
    return out


def oracle_update(case: dict) -> tuple[torch.Tensor, dict[str, Any]]:
    """The oracle's (new param, new state) for the case."""
    from ojas_ref.verification.oracle import optimizer_update_oracle

    return optimizer_update_oracle(case["rule"], case["param"], case["grad"], state=case["state"], **case["hyper"])


def oracle_tolerance(*tensors: torch.Tensor) -> float:
    """Absolute tolerance for one output: ``_ULPS`` float64 ulps of the largest input
    or output magnitude it is computed from.

    A heuristic, not a theorem: each output is a few (fused) operations on the inputs,
    rounded once each; torch's vectorised CPU ``sqrt`` is not correctly rounded and
    ``x ** 0.5`` is libm's ``pow``, so outputs differ by a few ulps of the magnitudes
    involved (the update term can be larger than the result)."""
    return _ULPS * _U64 * max(float(t.abs().max()) for t in tensors)


def oracle_mismatches(case: dict) -> list[str]:
    """torch.optim and InBackwardOptimizer vs the oracle on ``case``: what disagrees."""
    expected_param, expected_state = oracle_update(case)
    problems = []
    for impl, (param, state) in updates(case).items():
        if state.keys() != expected_state.keys():
            problems.append(f"{impl}: state keys {sorted(state)} != oracle's {sorted(expected_state)}")
            continue
        if "step" in state and int(state["step"]) != expected_state["step"]:
            problems.append(f"{impl}: step {int(state['step'])} != oracle's {expected_state['step']}")
        inputs = [case["param"], case["grad"], *(v for k, v in case["state"].items() if k != "step")]
        pairs = [("param", param, expected_param)] + [
            (k, v, expected_state[k]) for k, v in state.items() if k != "step"
        ]
        for name, actual, expected in pairs:
            err = float((actual - expected).abs().max())
            if not err <= oracle_tolerance(expected, *inputs):
                problems.append(f"{impl}: {name}: max error {err:.3g} exceeds the tolerance")
    return problems
