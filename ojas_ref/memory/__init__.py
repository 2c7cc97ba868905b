"""The peak of device memory of a training step, predicted before running it.

``plan(model, setting)`` returns, without allocating anything on a device, the bytes
alive at each candidate point of one steady-state step of Hugging Face's
``LlamaForCausalLM`` (``model(input_ids=ids, labels=ids).loss.backward(); opt.step();
opt.zero_grad(set_to_none=True)``, as benchmarks/bench_optimize_model.py runs it), broken
down by tensor class, and the largest of them: the predicted
``torch.cuda.max_memory_allocated``. Every term is one function of
:mod:`ojas_ref.memory.formulas` whose docstring says where its count comes from.

What is modelled, of a :class:`Setting` (a :class:`ojas_ref.MemoryRecipe` and the workload):
weights, optimizer state and gradients in the run's dtype (no autocast, no master weights); SGD
without momentum (the benchmark's ``lr`` only) or AdamW (torch's foreach path); the standard loop
or :class:`ojas_ref.InBackwardOptimizer` (``recipe.in_backward``, buckets of ``bucket_cap_mb``, 64
by default); per-layer non-reentrant checkpointing (``recipe.checkpoint``), the layer whole or split
in its attention and MLP halves (``checkpoint_split``); SDPA attention and Hugging Face's loss, or
``optimize_model``'s ojas attention, :func:`ojas_ref.linear_cross_entropy`, fused RMSNorm and
SwiGLU (the recipe's ``attention``, ``linear_cross_entropy``, ``rms_norm``, ``swiglu``, together or
apart); the head updated inside the loss (``head_update``); and two ways of moving bytes to host
memory (:attr:`Plan.host`, printed as "host memory"): checkpoints offloaded to pinned host memory
(``checkpoint="offload"``) and the optimizer's state on the host (``state_device="cpu"``; with
``state_slice_mb`` the parameters whose state exceeds it updated slice by slice, :func:`sliced`).
Not modelled (yet): the recipe's ``sparse_embedding`` and ``overlap`` (:func:`plan` raises),
gradient accumulation, reversible stacks, autocast, padding masks, and the families other than
Llama and Mistral without a sliding window (:data:`FAMILIES`; :data:`UNMODELLED` says what each
other family of optimize_model's tests would need).

The per-tensor counts were read off the modules' autograd graphs (``saved_tensors_hooks``
on a small ``LlamaForCausalLM`` on the CPU, transformers 5.24) and the kernels' source.
tests/memory/test_memory.py checks the peaks against the H200 records of benchmarks/bench_optimize_model.py
(the 16 configurations, three times: errors -1.0% to +1.6%) and benchmarks/bench_memory.py
(offload, host state, whole-parameter and sliced updates, the presets at scale), copied under
tests/fixtures/plan/, and the phases against the live bytes of real CPU training steps
(standard and in-backward loops, checkpointing, bf16, GQA, tied heads; SDPA and Hugging Face's
loss: the ojas loss runs another algorithm on the CPU, and only the float32 ojas attention
saves there what its kernel saves). The cuBLAS workspace and the float32 partial sums of the
embedding's backward are CUDA's and rest on the H200 records alone.

A library module: :mod:`ojas_ref.tools.plan` (``ojas plan``) prints, fits, plots and compares
with the records; :mod:`ojas_ref.tools.throughput` and :mod:`ojas_ref.tools.step_time` time a step.
"""

from ojas_ref.memory.formulas import *  # noqa: F403 (the terms, one function each)
from ojas_ref.memory.formulas import __all__ as _formulas
from ojas_ref.memory.model import *  # noqa: F403 (Model, Setting, PRESETS, the constants)
from ojas_ref.memory.model import __all__ as _model
from ojas_ref.memory.phases import *  # noqa: F403 (plan, Plan, Phase, Term)
from ojas_ref.memory.phases import __all__ as _phases

__all__ = [*_model, *_formulas, *_phases]
