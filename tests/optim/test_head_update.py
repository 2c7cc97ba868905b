"""The head's weight updated chunk by chunk inside the linear cross-entropy's backward
(``InBackwardOptimizer(head_weight=...)`` passed to the loss as ``head_update=``,
ojas_ref/functional/_linear_cross_entropy_reference.py ``_backward_kept_update_head``;
Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard).

Against the standard loop (``loss.backward(); SGD.step(); zero_grad()``) with the same loss:
bitwise, since each row's gradient is summed over the token chunks in the same order both
ways and the step is the same ``add_``; against the loop on materialised logits
(``F.cross_entropy``, another summation order) within a tolerance. No [tokens, V] or [V, D]
tensor is allocated in the backward (a dispatch-mode record of every op's output).
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

if not torch.cuda.is_available():  # the kernel tests run the Triton interpreter on the CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref import InBackwardOptimizer, linear_cross_entropy  # noqa: E402

head_module = importlib.import_module("ojas_ref.functional._linear_cross_entropy_head")

V, D, N, EMB = 37, 8, 21, 30  # V not a multiple of the vocabulary chunk (5), N not of the token chunk (8)
CHUNKS = (8, 5)
LR = 0.1


class _Model(torch.nn.Module):
    """An embedding, a tanh and an untied head [V, D] (no bias)."""

    def __init__(self, dtype: torch.dtype, tied: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(V if tied else EMB, D).to(dtype)
        self.head = self.emb.weight if tied else torch.nn.Parameter(torch.randn(V, D, dtype=dtype))

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.emb(ids) * 1.5)


def _batch(step: int, ignore_every: int = 4, all_ignored: bool = False):
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(0, EMB, (N,), generator=g)
    target = torch.randint(0, V, (N,), generator=g)
    if ignore_every:
        target[::ignore_every] = -100
    if all_ignored:
        target[:] = -100
    return ids, target


def _optimizer(mode: str, model: _Model):
    """torch.optim.SGD for "standard", else InBackwardOptimizer (head_weight for "head")."""
    if mode == "standard":
        return torch.optim.SGD(model.parameters(), lr=LR)
    return InBackwardOptimizer(
        model.parameters(), torch.optim.SGD, lr=LR, bucket_cap_mb=0, head_weight=model.head if mode == "head" else None
    )


def _train(
    mode: str, dtype: torch.dtype, steps: int = 3, reduction: str = "mean", all_ignored: bool = False, **loss_kw
):
    """mode: "standard" (torch.optim.SGD after backward), "dense" (InBackwardOptimizer, the head's
    gradient in its hook), "head" (head_weight=...). Returns (head, embedding, losses)."""
    model = _Model(dtype)
    opt = _optimizer(mode, model)
    losses = []
    for step in range(steps):
        ids, target = _batch(step, all_ignored=all_ignored)
        loss = linear_cross_entropy(
            model.hidden(ids),
            model.head,
            target,
            reduction=reduction,
            chunk_size=CHUNKS,
            impl="reference",
            head_update=opt if mode == "head" else None,
            **loss_kw,
        )
        (loss if reduction != "none" else (loss * torch.linspace(0.5, 2.0, N)).sum()).backward()
        opt.step()
        opt.zero_grad()
        if mode == "head":
            assert model.head.grad is None
        losses.append(loss.detach().clone())
    return model.head.detach().clone(), model.emb.weight.detach().clone(), losses


def _same(a, b) -> None:
    for x, y in zip(a[:2], b[:2]):
        assert torch.equal(x, y), (x - y).abs().max()
    for x, y in zip(a[2], b[2]):
        assert torch.equal(x, y)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_head_update_bitwise_standard_loop(reduction):
    """float32, three steps, V = 37 over chunks of 5 (the last of 2 rows), ignored tokens: the
    head, the embedding and the losses bit for bit those of backward then SGD.step (and of the
    dense in-backward update)."""
    head = _train("head", torch.float32, reduction=reduction)
    _same(head, _train("standard", torch.float32, reduction=reduction))
    _same(head, _train("dense", torch.float32, reduction=reduction))
    assert not torch.equal(head[0], _Model(torch.float32).head.detach())  # the head did move


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_head_update_bf16_one_ulp(reduction):
    """bfloat16, one step: the gradient rows are the same bits (the embedding, updated from dH,
    and the loss are bitwise), but ATen's CPU ``add_`` on bfloat16 rounds the elements of its
    vectorised body once (a float fma) and those of its scalar tail twice (alpha * g rounded to
    bfloat16, then the sum), and a chunk's tail is not the whole tensor's: an element of the head
    may differ by the extra rounding of lr * g and the final rounding: at most half an ulp of
    |lr g| plus one of the result, below 2^-7 (|w| + |w'|) (|lr g| <= |w| + |w'|, a bfloat16 ulp
    is at most 2^-7 of its value)."""
    head = _train("head", torch.bfloat16, steps=1, reduction=reduction)
    standard = _train("standard", torch.bfloat16, steps=1, reduction=reduction)
    assert torch.equal(head[1], standard[1]) and torch.equal(head[2][0], standard[2][0])
    h, s, w = head[0].float(), standard[0].float(), _Model(torch.bfloat16).head.detach().float()
    assert ((h - s).abs() <= 2.0**-7 * (w.abs() + s.abs())).all()
    assert (h != s).float().mean() < 0.5  # most elements bitwise (the vectorised body)


@pytest.mark.parametrize(
    "kw",
    [
        dict(label_smoothing=0.1, z_loss=1e-3, softcap=5.0),
        dict(weight=torch.linspace(0.5, 1.5, V), label_smoothing=0.05),
    ],
)
def test_head_update_loss_options_bitwise(kw):
    """Label smoothing, z-loss, a soft cap, class weights take the same path: bitwise."""
    _same(_train("head", torch.float32, **kw), _train("standard", torch.float32, **kw))


def test_head_update_all_ignored():
    """Every token ignored: loss 0, zero gradients, the head unchanged, as the standard loop."""
    head = _train("head", torch.float32, all_ignored=True)
    _same(head, _train("standard", torch.float32, all_ignored=True))
    assert torch.equal(head[0], _Model(torch.float32).head.detach())
    assert all(float(l) == 0.0 for l in head[2])


def test_head_update_close_to_materialised_logits():
    """Against the standard loop on materialised logits (F.cross_entropy, sums in another order),
    in float32: the one-step difference is rounding of sums of <= N = 21 terms of size <= 1 (G
    entries, tanh-bounded hidden states) times lr, about N x 2^-24 relative; 1e-5 absolute on
    weights of size ~1 allows a few hundred ulps after three steps."""
    head = _train("head", torch.float32)
    model = _Model(torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(3):
        ids, target = _batch(step)
        F.cross_entropy(model.hidden(ids) @ model.head.T, target).backward()
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(head[0], model.head.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(head[1], model.emb.weight.detach(), rtol=0, atol=1e-5)


class _Record(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        """The shapes of the fresh tensors the ops return (not views, not in-place results: their
        schema's returns alias an input; e.g. the interpreter's ``set_`` of a kernel argument)."""
        out = func(*args, **(kwargs or {}))
        if all(r.alias_info is None for r in func._schema.returns):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("head_update", [True, False])
def test_no_full_gradient_allocated(head_update):
    """In the backward with head_weight no op returns a [V, D] or [tokens, V] tensor (the largest
    are grad x [kept, D], one [vocab chunk, D] gradient, one [token chunk, vocab chunk] block);
    without it the [V, D] gradient is there (so the check can fail)."""
    model = _Model(torch.float32)
    opt = InBackwardOptimizer(
        model.parameters(), torch.optim.SGD, lr=LR, bucket_cap_mb=0, head_weight=model.head if head_update else None
    )
    ids, target = _batch(0)
    loss = linear_cross_entropy(
        model.hidden(ids),
        model.head,
        target,
        chunk_size=CHUNKS,
        impl="reference",
        head_update=opt if head_update else None,
    )
    with _Record() as rec:
        loss.backward()
    opt.step()
    full = [s for s in rec.shapes if s in ((V, D), (N, V)) or (len(s) == 2 and s[0] * s[1] >= V * D)]
    assert bool(full) != head_update, full
    assert (CHUNKS[1], D) in rec.shapes or not head_update


def test_autograd_grad_leaves_head_alone():
    """torch.autograd.grad accumulates nothing: the head gets its ordinary gradient back and is
    not updated."""
    model = _Model(torch.float32)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.head)
    before = model.head.detach().clone()
    ids, target = _batch(0)
    x = model.hidden(ids).detach().requires_grad_()
    loss = linear_cross_entropy(x, model.head, target, chunk_size=CHUNKS, impl="reference", head_update=opt)
    (gw,) = torch.autograd.grad(loss, [model.head])
    ref = linear_cross_entropy(x, model.head, target, chunk_size=CHUNKS, impl="reference")
    (gw_ref,) = torch.autograd.grad(ref, [model.head])
    assert torch.equal(gw, gw_ref) and torch.equal(model.head.detach(), before)
    del opt


# --------------------------------------------------------------------------
# Unsupported uses raise, naming the reason
# --------------------------------------------------------------------------


def _opt(model, cls=torch.optim.SGD, **kw):
    return InBackwardOptimizer(model.parameters(), cls, head_weight=model.head, **{"lr": LR, **kw})


@pytest.mark.parametrize(
    "cls, kw, match",
    [
        (torch.optim.AdamW, {}, "optimizer_class=torch.optim.SGD"),
        (torch.optim.SGD, {"momentum": 0.9}, "momentum=0.9"),
        (torch.optim.SGD, {"weight_decay": 0.1}, "weight_decay=0.1"),
        (torch.optim.SGD, {"accumulation_steps": 2}, "accumulation_steps=2"),
        (torch.optim.SGD, {"max_grad_norm": 1.0}, "max_grad_norm"),
    ],
)
def test_construction_refuses(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        _opt(_Model(torch.float32), cls, **kw)


def test_construction_refuses_bad_head_weight():
    model = _Model(torch.float32)
    with pytest.raises(TypeError, match="head_weight must be a torch.Tensor"):
        InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight="lm_head")
    with pytest.raises(ValueError, match="2-D"):
        InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=torch.zeros(3))
    with pytest.raises(ValueError, match="one of params"):
        InBackwardOptimizer(model.emb.parameters(), torch.optim.SGD, lr=LR, head_weight=model.head)


def _loss(model, opt, **kw):
    ids, target = _batch(0)
    return linear_cross_entropy(model.hidden(ids), model.head, target, chunk_size=CHUNKS, head_update=opt, **kw)


def test_tied_head_refused_at_forward():
    model = _Model(torch.float32, tied=True)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.head)
    before = model.head.detach().clone()
    with pytest.raises(ValueError, match="tied to the input embedding"):
        _loss(model, opt)
    assert torch.equal(model.head.detach(), before)
    del opt


def test_use_after_loss_raises():
    """A regulariser on the head after the loss: its gradient reaches the head's hook after the
    loss updated it (or autograd's in-place check fires): an error, not a silent wrong step."""
    model = _Model(torch.float32)
    opt = _opt(model)
    loss = _loss(model, opt) + (model.head**2).sum() * 1e-3
    with pytest.raises(RuntimeError, match="another use|modified by an inplace operation"):
        loss.backward()
    del opt


def test_bias_and_autocast_refused():
    model = _Model(torch.float32)
    opt = _opt(model)
    ids, target = _batch(0)
    with pytest.raises(NotImplementedError, match="linear_bias"):
        linear_cross_entropy(model.hidden(ids), model.head, target, linear_bias=torch.zeros(V), head_update=opt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(NotImplementedError, match="autocast"):
            linear_cross_entropy(model.hidden(ids), model.head, target, head_update=opt)
    del opt


def test_second_backward_refused():
    model = _Model(torch.float32)
    opt = _opt(model)
    loss = _loss(model, opt, impl="reference")
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward through this graph"):
        loss.backward()
    opt.zero_grad()
    opt.step()
    _loss(model, opt).backward()  # a fresh forward after step() is fine
    with pytest.raises(RuntimeError, match="already updated since the last optimizer.step"):
        _loss(model, opt).backward()


def test_group_changed_after_construction_raises():
    model = _Model(torch.float32)
    opt = _opt(model)
    opt.param_groups[0]["momentum"] = 0.9
    before = model.head.detach().clone()
    with pytest.raises(RuntimeError, match="no longer plain SGD: momentum=0.9"):
        _loss(model, opt).backward()
    assert torch.equal(model.head.detach(), before)


@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.kernel)])
def test_loss_without_head_update_raises(impl):
    """The optimizer's head given to a loss called without head_update: its whole gradient reaches
    the head's gradient hook, which raises saying to pass head_update=opt, before the gradient is
    accumulated or stepped (the head unchanged, no .grad); after zero_grad() the same forward with
    head_update=opt updates it as the "head" runs do."""
    device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
    model = _Model(torch.float32).to(device)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, bucket_cap_mb=0, head_weight=model.head)
    before = model.head.detach().clone()
    ids, target = (t.to(device) for t in _batch(0))
    loss = linear_cross_entropy(model.hidden(ids), model.head, target, chunk_size=CHUNKS, impl=impl)
    with pytest.raises(RuntimeError, match=r"called without head_update.*head_update=opt"):
        loss.backward()
    assert torch.equal(model.head.detach(), before) and model.head.grad is None
    opt.zero_grad()
    loss = linear_cross_entropy(model.hidden(ids), model.head, target, chunk_size=CHUNKS, impl=impl, head_update=opt)
    loss.backward()
    opt.step()
    assert model.head.grad is None and not torch.equal(model.head.detach(), before)


def test_head_update_argument_checked():
    """head_update must be the InBackwardOptimizer whose head_weight is this loss's linear_weight:
    anything else raises at the forward, naming head_update and what was expected."""
    model = _Model(torch.float32)
    ids, target = _batch(0)
    x = model.hidden(ids)
    plain = torch.optim.SGD(model.parameters(), lr=LR)
    without_head = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR)
    with pytest.raises(TypeError, match="head_update must be None or the InBackwardOptimizer .* got SGD"):
        linear_cross_entropy(x, model.head, target, head_update=plain)
    with pytest.raises(ValueError, match="head_update is an InBackwardOptimizer constructed without head_weight"):
        linear_cross_entropy(x, model.head, target, head_update=without_head)
    without_head.remove_hooks()
    other = torch.nn.Parameter(torch.randn(V, D))
    opt = InBackwardOptimizer([*model.parameters(), other], torch.optim.SGD, lr=LR, head_weight=other)
    with pytest.raises(
        ValueError, match=r"head_update's head_weight \(shape \(37, 8\)\) is not this loss's linear_weight"
    ):
        linear_cross_entropy(x, model.head, target, head_update=opt)
    with torch.no_grad():  # checked without grad too (then nothing is linked)
        with pytest.raises(ValueError, match="is not this loss's linear_weight"):
            linear_cross_entropy(x, model.head, target, head_update=opt)


# --------------------------------------------------------------------------
# The Triton kernel (CUDA, or the interpreter on the CPU): 4 products, slabs updated in the backward
# --------------------------------------------------------------------------


def _train_kernel(
    mode: str,
    reduction: str,
    steps: int = 2,
    dtype: torch.dtype = torch.float32,
    all_ignored: bool = False,
    forwards: int = 1,
):
    """The kernel's loss; mode "head" (head_weight), "dense4" (InBackwardOptimizer without it, the
    kernel with the config head mode picks: 4 products, its forward token chunk, float32 CUDA logits
    from cuBLAS), "standard"
    (torch.optim.SGD, the kernel's default schedule). ``forwards`` forwards of the loss per step
    (batches ``step + 10 f``), one backward of their sum."""
    from ojas_kernels import linear_cross_entropy as klce

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _Model(dtype).to(device)
    opt = _optimizer(mode, model)
    losses = []
    for step in range(steps):
        scalars = []
        for f in range(forwards):
            ids, target = (t.to(device) for t in _batch(step + 10 * f, all_ignored=all_ignored))
            h = model.hidden(ids)
            if mode == "dense4":
                config = klce._head_update_config(
                    klce.default_config(h.dtype, h.device), h, model.head, cublas_logits=True
                )  # the config head mode gets by default
                loss = klce.linear_cross_entropy(h, model.head, target, reduction=reduction, config=config)
            else:
                loss = linear_cross_entropy(
                    h,
                    model.head,
                    target,
                    reduction=reduction,
                    impl="triton",
                    head_update=opt if mode == "head" else None,
                )
            scalars.append(loss if reduction != "none" else (loss * torch.linspace(0.5, 2.0, N, device=device)).sum())
        sum(scalars[1:], scalars[0]).backward()
        opt.step()
        opt.zero_grad()
        if mode == "head":
            assert model.head.grad is None
        losses.append(loss.detach().cpu().clone())
    return model.head.detach().cpu().clone(), model.emb.weight.detach().cpu().clone(), losses


@pytest.mark.kernel
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_kernel_head_update_bitwise_4_products(reduction):
    """The kernel with head_weight: bit for bit the dense in-backward loop on the kernel's
    4-product schedule (each slab's gradient is the same product into another buffer, the step
    the same add_); close to the standard loop on the default schedule (3 products for "mean":
    grad_weight rounded per token chunk instead of once; float32, <= 21 tokens, weights ~1:
    1e-5)."""
    head = _train_kernel("head", reduction)
    _same(head, _train_kernel("dense4", reduction))
    standard = _train_kernel("standard", reduction)
    for a, b in zip(head[:2], standard[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.kernel
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_kernel_head_two_forwards_one_backward_takes_the_dense_path(reduction):
    """Two forwards of the kernel's loss, one backward of their sum: the head's update needs both
    gradients, so it takes the dense path for the step (each loss returns its gradient, the hook
    steps their sum): bit for bit the dense in-backward loop on the same 4-product schedule. (It
    used to update the head with the first loss's part, then raise.)"""
    head = _train_kernel("head", reduction, forwards=2)
    _same(head, _train_kernel("dense4", reduction, forwards=2))
    assert not torch.equal(head[0], _Model(torch.float32).head.detach())


@pytest.mark.kernel
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_kernel_head_update_all_ignored(reduction):
    """Every token ignored: loss 0, the head unchanged (no slab is stepped: w + (-lr) 0 = w), the
    same bits as the dense loops."""
    head = _train_kernel("head", reduction, all_ignored=True)
    _same(head, _train_kernel("dense4", reduction, all_ignored=True))
    _same(head, _train_kernel("standard", reduction, all_ignored=True))
    assert torch.equal(head[0], _Model(torch.float32).head.detach())


@pytest.mark.kernel
def test_kernel_no_full_gradient_allocated():
    """No [V, D] tensor in the kernel's backward with head_weight (the slab buffer is at most
    [V rounded to the slab, D] only when one slab covers the vocabulary: checked against the
    dense run, which does allocate [V, D])."""
    from ojas_kernels import linear_cross_entropy as klce

    device = "cuda" if torch.cuda.is_available() else "cpu"
    for head_update in (True, False):
        model = _Model(torch.float32).to(device)
        opt = InBackwardOptimizer(
            model.parameters(), torch.optim.SGD, lr=LR, bucket_cap_mb=0, head_weight=model.head if head_update else None
        )
        ids, target = (t.to(device) for t in _batch(0))
        h = model.hidden(ids)
        config = klce.LinearCrossEntropyConfig(**{**klce.default_config(h.dtype, h.device).__dict__, "vocab_slab": 16})
        if head_update:
            loss = klce.linear_cross_entropy(
                h, model.head, target, config=config, head=head_module._HeadUpdate(opt, model.head)
            )
        else:
            loss = klce.linear_cross_entropy(
                h, model.head, target, config=klce._head_update_config(config, h, model.head)
            )
        with _Record() as rec:
            loss.backward()
        opt.step()
        assert ((V, D) in rec.shapes) != head_update, rec.shapes


# --------------------------------------------------------------------------
# Through optimize_model on a Hugging Face Llama
# --------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_optimize_model_llama(tied):
    """optimize_model's loss with head_update=opt (head_weight=model.lm_head.weight): an untied head gives the
    dense loop's weights bit for bit after two steps (CPU: both run the reference); a tied one
    (lm_head.weight is embed_tokens.weight) is refused at the forward, before any update."""
    transformers = pytest.importorskip("transformers")
    from ojas_ref import optimize_model

    def build():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=37,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=16,
            tie_word_embeddings=tied,
        )
        model = transformers.LlamaForCausalLM(config)
        optimize_model(model)
        return model.train()

    ids = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(3))
    runs = []
    for head_update in [True] if tied else [True, False]:
        model = build()
        opt = InBackwardOptimizer(
            model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.lm_head.weight if head_update else None
        )
        if tied:
            before = model.lm_head.weight.detach().clone()
            with pytest.raises(ValueError, match="tied to the input embedding"):
                model(ids, labels=ids, head_update=opt)
            assert torch.equal(model.lm_head.weight.detach(), before)
            return
        for _ in range(2):
            model(ids, labels=ids, head_update=opt if head_update else None).loss.backward()
            opt.step()
        runs.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize(
    "dtype,device,cublas",
    [(torch.float32, "cuda", True), (torch.bfloat16, "cuda", False), (torch.float32, "cpu", False)],
)
def test_head_update_float32_on_cuda_takes_the_logits_from_cublas(
    dtype: torch.dtype, device: str, cublas: bool
) -> None:
    """The default config's head update in float32 on CUDA computes both passes' logits with cuBLAS
    (the Triton dots run float32 on the FMA units); other dtypes and devices, and a config the caller
    chose, keep the Triton dots."""
    from types import SimpleNamespace

    klce = importlib.import_module("ojas_kernels.linear_cross_entropy")
    x = SimpleNamespace(dtype=dtype, device=torch.device(device), numel=lambda: 2048 * 64, element_size=lambda: 4)
    weight = torch.empty(1000, 64)
    base = klce.default_config(torch.float32, torch.device("cpu"))
    for chosen in (False, True):
        config = klce._head_update_config(base, x, weight, cublas_logits=not chosen)
        expected = "cublas" if cublas and not chosen else "triton"
        assert (config.fwd_logits, config.bwd_logits, config.products) == (expected, expected, 4)
