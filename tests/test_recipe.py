"""ojas_ref.recipe: MemoryRecipe's checks, its flags and as_dtype."""

import argparse
import dataclasses

import pytest
import torch

from ojas_ref.recipe import MemoryRecipe, add_recipe_arguments, as_dtype, dtype_name, recipe_from_arguments


def test_defaults_are_optimize_models_and_plain_turns_every_primitive_off():
    recipe = MemoryRecipe()
    assert recipe.model_options() == {
        "attention": True,
        "linear_cross_entropy": True,
        "rms_norm": True,
        "swiglu": True,
        "rope": True,
        "relu_mask": True,
        "sparse_embedding": False,
        "checkpoint": False,
        "checkpoint_split": False,
    }
    plain = MemoryRecipe.plain(checkpoint=True)
    assert not any(
        plain.model_options()[k] for k in ("attention", "linear_cross_entropy", "rms_norm", "swiglu", "rope")
    )
    assert plain.checkpoint is True and not plain.in_backward


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MemoryRecipe().checkpoint = True


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attention": 1}, "attention must be a bool"),
        ({"checkpoint": "host"}, "checkpoint must be True, False or 'offload'"),
        ({"checkpoint": 1}, "checkpoint must be a bool or 'offload'"),
        ({"checkpoint_split": True}, "checkpoint_split=True needs checkpoint"),
        ({"in_backward": True, "bucket_cap_mb": -1.0}, "bucket_cap_mb must be a finite float >= 0"),
        ({"in_backward": True, "bucket_cap_mb": True}, "bucket_cap_mb must be a float"),
        ({"in_backward": True, "state_device": "cuda"}, "state_device must be None or 'cpu'"),
        ({"in_backward": True, "state_slice_mb": 8.0}, "state_slice_mb needs state_device='cpu'"),
        (
            {"in_backward": True, "state_device": "cpu", "state_slice_mb": 0.0},
            "state_slice_mb must be a finite float > 0",
        ),
        ({"overlap": True}, "overlap=True needs in_backward=True"),
        ({"head_update": True}, "head_update=True needs in_backward=True"),
        ({"state_device": "cpu"}, "state_device='cpu' needs in_backward=True"),
        (
            {"in_backward": True, "head_update": True, "linear_cross_entropy": False},
            "head_update=True needs linear_cross_entropy",
        ),
    ],
)
def test_bad_combinations_raise_naming_the_field(changes, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        MemoryRecipe(**changes)


def test_flags_round_trip_every_field():
    parser = argparse.ArgumentParser()
    add_recipe_arguments(parser)
    assert recipe_from_arguments(parser.parse_args([])) == MemoryRecipe()
    args = parser.parse_args(
        "--no-attention --checkpoint offload --checkpoint-split --in-backward --state-device cpu "
        "--state-slice-mb 16 --bucket-cap-mb 128 --overlap".split()
    )
    assert recipe_from_arguments(args) == MemoryRecipe(
        attention=False,
        checkpoint="offload",
        checkpoint_split=True,
        in_backward=True,
        state_device="cpu",
        state_slice_mb=16.0,
        bucket_cap_mb=128.0,
        overlap=True,
    )
    defaults = MemoryRecipe(in_backward=True, checkpoint=True)
    parser = argparse.ArgumentParser()
    add_recipe_arguments(parser, defaults)
    assert recipe_from_arguments(parser.parse_args([])) == defaults
    assert recipe_from_arguments(parser.parse_args(["--checkpoint", "off"])).checkpoint is False
    assert recipe_from_arguments(parser.parse_args(["--checkpoint"])).checkpoint is True
    assert "{cpu,none}" in parser.format_help() and "None," not in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--checkpoint", "sometimes"])


def test_as_dtype_one_spelling():
    assert as_dtype(torch.bfloat16) is torch.bfloat16
    assert as_dtype("float32") is torch.float32
    assert as_dtype("torch.bfloat16") is torch.bfloat16
    assert dtype_name(torch.float16) == "float16"
    with pytest.warns(DeprecationWarning, match="write 'bfloat16'"):
        assert as_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be"):
        as_dtype("float64")
    with pytest.raises(ValueError, match="precision must be one of"):
        as_dtype(torch.int8, "precision")
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        as_dtype(4)
