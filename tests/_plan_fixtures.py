"""The planner's H200 records (tests/fixtures/plan/: the benchmarks' --out files, README.md there) and the settings
that tests/memory/test_memory.py (``ojas_ref.memory``'s formulas) and tests/tools/test_plan.py (``ojas plan``) share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ojas_ref.recipe import MemoryRecipe
from ojas_ref.tools import plan as P

transformers = pytest.importorskip("transformers")

#: the H200 records the formulas are checked against (README.md there: the commit that added each)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plan"
#: benchmarks/bench_optimize_model.py's: before the fused RMSNorm and SwiGLU existed (its ojas modes:
#: attention and loss), with everything optimize_model applies, and with the fused RoPE too
RECORDS_PATHS = tuple(FIXTURES / f"bench_optimize_model_h200{s}.json" for s in ("", "_fused", "_rope"))
#: benchmarks/bench_memory.py's: the 1.06B decoder with its memory techniques (offload, host state),
#: the presets at scale (llama-0.5b to llama-13b, llama-70b, and llama-70b's shape at 23 and 58
#: layers: 20.2B and 50.2B parameters), fp32 AdamW with the state on the host in 128 MiB slices,
#: split checkpoints offloaded in its "all" row, and issue 14's one run (32 MiB buckets)
MEMORY_RECORDS_PATHS = tuple(
    FIXTURES / f"bench_memory_h200{s}.json" for s in ("", "_presets", "_host_state_sliced128_pool_split", "_one_run")
)
ONE_B = P.record_model(RECORDS_PATHS[-1])
RECORDS = [r for path in RECORDS_PATHS for r in P.load_records(path)]
MEMORY_RECORDS = [r for path in MEMORY_RECORDS_PATHS for r in P.load_memory_records(path)]

#: the primitives of optimize_model the planner counts (MemoryRecipe fields)
OJAS = dict(attention=True, linear_cross_entropy=True, rms_norm=True, swiglu=True)
#: bf16 AdamW in backward with checkpointing and everything optimize_model applies
OJAS_CKPT = P.Setting(
    recipe=MemoryRecipe.plain(in_backward=True, checkpoint=True, **OJAS), dtype=torch.bfloat16, optimizer="adamw"
)
#: fp32 AdamW on llama-1b with offload and the state on the host in 128 MiB slices
SLICED_1B = P.Setting(
    recipe=replace(OJAS_CKPT.recipe, checkpoint="offload", state_device="cpu", state_slice_mb=P.STATE_SLICE_MB),
    dtype=torch.float32,
    optimizer="adamw",
)
#: fp32 SGD on llama-1b with offload and the head updated inside the loss
SGD_1B = P.Setting(
    recipe=MemoryRecipe.plain(in_backward=True, checkpoint="offload", head_update=True, **OJAS),
    dtype=torch.float32,
    optimizer="sgd",
)


def changed(setting: P.Setting, **recipe_changes) -> P.Setting:
    """``setting`` with its recipe's fields ``recipe_changes``."""
    return replace(setting, recipe=replace(setting.recipe, **recipe_changes))


def llama_config(**overrides) -> "transformers.LlamaConfig":
    base = dict(
        vocab_size=101,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    return transformers.LlamaConfig(**(base | overrides))
