"""Row-sparse embedding gradients updated in backward (issue 14, item 3, the embedding half).

``optimize_model(model, sparse_embedding=True)`` sets the input embedding's ``sparse = True``;
:class:`ojas_ref.InBackwardOptimizer` with plain SGD then updates the rows of the batch's tokens
from the sparse gradient (Ojas.InBackward.SparseRows.sgd_sparse_rows_eq), with no dense
``[V, D]`` gradient.  On the CPU the result is the dense run's bit for bit (duplicate token rows
are summed in token order from zero, as the dense embedding backward does; ``Tensor.coalesce``
would not be).  Everything else with a sparse gradient raises with the reason.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

from ojas_ref.optim.in_backward import InBackwardOptimizer  # noqa: E402
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model  # noqa: E402

V, D, PAD = 61, 32, 0


def llama(tied: bool = False, dtype=torch.float32, seed: int = 0):
    config = transformers.LlamaConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_dropout=0.0,
        pad_token_id=PAD,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).to(dtype)


def batches(n: int = 3):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 12, (2, 12), generator=g)  # few tokens: many duplicate rows
        ids[:, -3:] = PAD  # padding (padding_idx rows get no gradient)
        labels = ids.clone()
        labels[ids == PAD] = -100
        out.append((ids, labels))
    return out


def train(model, opt, data):
    for ids, labels in data:
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_llama_sgd_sparse_bitwise_dense(dtype):
    dense, sparse = llama(dtype=dtype), llama(dtype=dtype)
    initial = dense.get_input_embeddings().weight.detach().clone()
    optimize_model(dense)
    _, report = optimize_model(sparse, sparse_embedding=True)
    assert sparse.get_input_embeddings().sparse and not dense.get_input_embeddings().sparse
    change = [c for c in report.changed if "sparse=True" in c.what]
    assert len(change) == 1 and change[0].module == "model.embed_tokens"
    assert "Ojas.InBackward.SparseRows.sgd_sparse_rows_eq" in change[0].theorems
    assert str(V * D * initial.element_size()) in change[0].what
    data = batches()
    for model in (dense, sparse):
        train(model, InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.5, bucket_cap_mb=0), data)
    for (name, a), b in zip(dense.named_parameters(), sparse.parameters()):
        assert torch.equal(a, b), name
    weight = sparse.get_input_embeddings().weight
    touched = torch.unique(torch.cat([ids.flatten() for ids, _ in data]))
    untouched = torch.ones(V, dtype=torch.bool)
    untouched[touched] = False
    untouched[PAD] = True
    assert torch.equal(weight[untouched], initial[untouched])  # padding and unseen rows unchanged
    assert not torch.equal(weight[1:12], initial[1:12])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_duplicate_rows_summed_in_token_order(dtype):
    """Many duplicate tokens (where ``coalesce()``'s order would differ), a -0.0 weight in an
    untouched row (kept: ``x + (-lr) * 0.0 == x``), default bucket cap."""
    torch.manual_seed(0)
    w0 = torch.randn(97, 33, dtype=dtype)
    w0[50] = -0.0
    idx = torch.randint(0, 40, (4000,))
    idx[:500] = 3
    g = torch.randn(4000, 33, dtype=dtype)
    coalesced = None
    out = []
    for sparse in (False, True):
        emb = torch.nn.Embedding(97, 33, padding_idx=5, sparse=sparse, dtype=dtype)
        with torch.no_grad():
            emb.weight.copy_(w0)
        opt = InBackwardOptimizer(emb.parameters(), torch.optim.SGD, lr=0.1)
        (emb(idx) * g).sum().backward()
        opt.step()
        out.append(emb.weight.detach())
        if sparse:  # the reference of what Tensor.coalesce would give
            e2 = torch.nn.Embedding(97, 33, padding_idx=5, sparse=True, dtype=dtype)
            with torch.no_grad():
                e2.weight.copy_(w0)
            (e2(idx) * g).sum().backward()
            coalesced = w0 - 0.1 * e2.weight.grad.coalesce().to_dense()
    assert torch.equal(out[0], out[1])
    assert torch.equal(out[1][50], w0[50]) and torch.signbit(out[1][50]).all()
    assert torch.equal(out[1][5], w0[5])
    assert not torch.equal(coalesced, out[0])  # Tensor.coalesce()'s sums are not the dense backward's


def _sparse_embedding(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Embedding(10, 4, sparse=True, dtype=dtype)


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (torch.optim.AdamW, dict(lr=0.1), "not torch.optim.SGD.*AdamW.*lazy_adamw_neq_dense|not torch.optim.SGD"),
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9), "momentum=0.9"),
        (torch.optim.SGD, dict(lr=0.1, weight_decay=0.01), "weight_decay=0.01"),
        (torch.optim.SGD, dict(lr=0.1, maximize=True), "maximize=True"),
    ],
)
def test_unsupported_settings_raise(cls, kwargs, match):
    emb = _sparse_embedding()
    before = emb.weight.detach().clone()
    opt = InBackwardOptimizer(emb.parameters(), cls, **kwargs)
    with pytest.raises(RuntimeError, match=match):
        emb(torch.tensor([1, 2, 2])).sum().backward()
    assert torch.equal(emb.weight, before) and emb.weight.grad is None
    opt.zero_grad()


def test_adamw_message_says_why():
    emb = _sparse_embedding()
    opt = InBackwardOptimizer(emb.parameters(), torch.optim.AdamW, lr=0.1)  # noqa: F841 (kept alive)
    with pytest.raises(RuntimeError) as info:
        emb(torch.tensor([1, 2])).sum().backward()
    msg = str(info.value)
    assert "momentum=0, weight_decay=0" not in msg  # the class is refused first
    assert "no gradient still changes" in msg and "sgd_sparse_rows_eq" in msg


def test_clipping_accumulation_low_precision_raise():
    emb = _sparse_embedding()
    opt = InBackwardOptimizer(emb.parameters(), torch.optim.SGD, lr=0.1, max_grad_norm=1.0)
    with pytest.raises(RuntimeError, match="no max_grad_norm"):
        opt.backward(emb(torch.tensor([1, 2])).sum())
    opt.zero_grad()
    opt.remove_hooks()
    emb = _sparse_embedding()
    opt = InBackwardOptimizer(emb.parameters(), torch.optim.SGD, lr=0.1, accumulation_steps=2)
    with pytest.raises(RuntimeError, match="accumulation_steps=1"):
        emb(torch.tensor([1, 2])).sum().backward()
    emb = _sparse_embedding(torch.bfloat16)
    opt = InBackwardOptimizer(emb.parameters(), torch.optim.SGD, lr=0.1)
    with pytest.raises(RuntimeError, match="bfloat16"):
        emb(torch.tensor([1, 2])).sum().backward()
    del opt


def test_subclass_of_sgd_refused():
    class MySGD(torch.optim.SGD):
        pass

    emb = _sparse_embedding()
    opt = InBackwardOptimizer(emb.parameters(), MySGD, lr=0.1)  # noqa: F841 (kept alive)
    with pytest.raises(RuntimeError, match="MySGD"):
        emb(torch.tensor([1])).sum().backward()


def test_tied_model_left_alone():
    model = llama(tied=True)
    assert model.lm_head.weight is model.get_input_embeddings().weight
    _, report = optimize_model(model, sparse_embedding=True)
    assert not model.get_input_embeddings().sparse
    left = [s for s in report.left_alone if s.reason.startswith("sparse_embedding")]
    assert len(left) == 1 and "tied" in left[0].reason and left[0].module == "model.embed_tokens"
    assert not any("sparse=True" in c.what for c in report.changed)


def test_revert_restores_dense():
    model = llama()
    optimize_model(model, sparse_embedding=True)
    assert model.get_input_embeddings().sparse
    revert_model(model)
    assert not model.get_input_embeddings().sparse
    _, report = optimize_model(model)  # default: dense
    assert not model.get_input_embeddings().sparse
    assert not any("sparse" in s.reason for s in report.left_alone)


def test_plain_model_raises():
    with pytest.raises(NotImplementedError, match="Hugging Face models only"):
        optimize_model(torch.nn.Sequential(torch.nn.Embedding(4, 2)), sparse_embedding=True)


class _Allocations(TorchDispatchMode):
    """Shapes of the tensors the ops produce that are not views/in-place results on a parameter."""

    def __init__(self, params):
        super().__init__()
        self.ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.layout is torch.strided:
                if t.untyped_storage().data_ptr() not in self.ptrs:
                    self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("sparse", [False, True])
def test_no_dense_embedding_gradient_allocated(sparse):
    """The head is frozen (its own gradient is [V, D] too); the backward with the update in it
    allocates no [V, D] tensor with sparse_embedding=True, and one (the gradient) without."""
    model = llama()
    optimize_model(model, sparse_embedding=sparse)
    model.lm_head.weight.requires_grad_(False)
    opt = InBackwardOptimizer(
        [p for p in model.parameters() if p.requires_grad], torch.optim.SGD, lr=0.1, bucket_cap_mb=0
    )
    ids, labels = batches(1)[0]
    loss = model(input_ids=ids, labels=labels).loss
    mode = _Allocations(list(model.parameters()))
    with mode:
        loss.backward()
    opt.step()
    full = [s for s in mode.shapes if s == (V, D)]
    assert (len(full) == 0) if sparse else (len(full) >= 1), mode.shapes
