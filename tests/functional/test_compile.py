"""torch.compile through the ojas Triton kernels (kernels/ojas_kernels/).

Under torch.compile the kernels run as custom operators: ``ojas::flash_attention_forward`` and
``ojas::flash_attention_backward``, ``ojas::linear_cross_entropy`` and its backward, and
``ojas::<name>_forward`` / ``ojas::<name>_backward`` for ``rms_norm``, ``swiglu``, ``rope``
and ``relu`` (opaque to Dynamo and Inductor, fake implementations, no autograd of their own:
Dynamo traces each primitive's ``autograd.Function``, which calls the forward op in its forward
and the backward op in its backward); eagerly they run as before, without the dispatcher.
Checked here: the compiled function is one graph (``fullgraph=True``) holding the forward op (in
the Function's subgraph), AOT's backward graph holds the backward op, the compiled values and
gradients are the eager ones bit for bit (the same kernels on the same arguments), and
``torch.library.opcheck`` accepts the ops (schema, fake implementation, autograd registration:
none, and no output requiring grad).  On the CPU these run the kernels in Triton's interpreter
(run with TRITON_INTERPRET=1; Inductor's CPU backend compiles the code around the ops); on CUDA
the same tests run on the GPU.

Tests marked ``gpu`` (skipped without CUDA): ``torch.compile(model)`` of an
``optimize_model``'d tiny Llama against eager (bfloat16, and float32 weights under bfloat16
autocast; with and without checkpointing; a padding mask; checkpoint="offload", checkpoint_split,
packed sequences and InBackwardOptimizer, whose CPU twins run aot_eager), and ``fullgraph=True`` for the
functional ops (attention, linear cross-entropy, RMSNorm, SwiGLU, RoPE, ReLU).
"""

from __future__ import annotations

import contextlib
import importlib
import math

import pytest
import torch

pytest.importorskip("triton")
import torch._dynamo  # noqa: E402
import torch._inductor.config  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._dynamo.backends.registry import lookup_backend  # noqa: E402
from torch._functorch.aot_autograd import make_boxed_func  # noqa: E402

import ojas_ref  # noqa: E402
from ojas_ref.functional.dispatch import use_impl  # noqa: E402
from ojas_kernels import attention as kattn  # noqa: E402
from ojas_kernels.attention import flash_attention  # noqa: E402

_INTERPRETED = type(kattn._fwd_kernel).__name__ == "InterpretedFunction"
DEVICE = "cpu" if _INTERPRETED else "cuda"
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or _INTERPRETED, reason="needs CUDA (and TRITON_INTERPRET unset)"
)
FORWARD_OP, BACKWARD_OP = "ojas.flash_attention_forward", "ojas.flash_attention_backward"


def recording(backend: str, graphs: list) -> object:
    """``backend`` (a Dynamo backend name), recording every graph Dynamo hands it."""
    inner = lookup_backend(backend)

    def compile_graph(gm, example_inputs):
        graphs.append(gm)
        return inner(gm, example_inputs)

    return compile_graph


def code(gm: torch.fx.GraphModule) -> str:
    """The code of a Dynamo graph with that of each subgraph it takes, once per use (an
    autograd.Function's forward and backward are the subgraphs of its ``autograd_function_apply``)."""
    parts = [gm.code]
    for node in gm.graph.nodes:
        sub = getattr(gm, node.target) if node.op == "get_attr" else None
        if isinstance(sub, torch.fx.GraphModule):
            parts.append(code(sub))
    return "".join(parts)


def aot_recording(graphs: dict) -> object:
    """AOT autograd with eager execution, recording its forward and backward graphs."""

    def keep(name):
        def compile_graph(gm, example_inputs):
            graphs.setdefault(name, []).append(gm)
            return make_boxed_func(gm.forward)

        return compile_graph

    return aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))


def inputs(b=2, hq=2, hkv=2, sq=9, sk=9, e=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, e, generator=g, dtype=dtype) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    return [t.to(DEVICE).requires_grad_() for t in (q, k, v)]


def bool_mask(b=2, sq=9, sk=9):
    """A key-padding-like bool mask with one fully masked row (zeros and zero gradients there)."""
    m = torch.rand(b, 1, sq, sk, generator=torch.Generator().manual_seed(1)) < 0.7
    m[0, 0, 3] = False
    return m.to(DEVICE)


def eager_and_compiled(fn, args, backend="inductor"):
    """(out, grads) of ``fn(*args)`` eagerly and compiled (``fullgraph=True``), the Dynamo
    graphs recorded; the loss's gradient is a fixed random tensor."""
    torch._dynamo.reset()
    results = []
    graphs = []
    compiled = torch.compile(fn, backend=recording(backend, graphs), fullgraph=True)
    for f in (fn, compiled):
        xs = [a.detach().clone().requires_grad_(a.requires_grad) if torch.is_tensor(a) else a for a in args]
        torch.manual_seed(7)  # the dropout key, drawn inside
        out = f(*xs)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(out)
        leaves = [x for x in xs if torch.is_tensor(x) and x.requires_grad]
        results.append((out, torch.autograd.grad(out, leaves, grad)))
    return results[0], results[1], graphs


ATTENTION_CASES = {
    "causal": (lambda q, k, v: ojas_ref.attention(q, k, v, is_causal=True, impl="triton"), {}),
    "bool mask": (lambda q, k, v, m: ojas_ref.attention(q, k, v, attn_mask=m, impl="triton"), {"mask": True}),
    "bool mask, causal": (
        lambda q, k, v, m: ojas_ref.attention(q, k, v, attn_mask=m, is_causal=True, impl="triton"),
        {"mask": True},
    ),
    "float mask": (lambda q, k, v, m: ojas_ref.attention(q, k, v, attn_mask=m, impl="triton"), {"float_mask": True}),
    "GQA, window, 5-D": (
        lambda q, k, v: ojas_ref.attention(
            q.unflatten(0, (1, 2)),
            k.unflatten(0, (1, 2)),
            v.unflatten(0, (1, 2)),
            is_causal=True,
            enable_gqa=True,
            window=4,
            impl="triton",
        ),
        {"hq": 4, "hkv": 2},
    ),
    "Sq != Sk": (lambda q, k, v: ojas_ref.attention(q, k, v, scale=0.3, impl="triton"), {"sq": 5, "sk": 12}),
    "dropout": (lambda q, k, v: ojas_ref.attention(q, k, v, dropout_p=0.3, is_causal=True, impl="triton"), {}),
    "dropout seed given, GQA, seq_major": (
        lambda q, k, v, s: flash_attention(q, k, v, True, dropout_p=0.4, dropout_seed=s, seq_major=True),
        {"hq": 4, "hkv": 1, "seed": True},
    ),
}


@pytest.mark.kernel
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
@torch._inductor.config.patch(fallback_random=True)
def test_compiled_attention_is_eager_attention(case):
    """``torch.compile(fullgraph=True)`` (Inductor) of attention on the kernels: one graph with
    the forward op, and the eager output and gradients bit for bit (the dropout key drawn by
    ``torch.randint`` in the graph: Inductor's fallback_random makes it torch's draw)."""
    fn, opts = ATTENTION_CASES[case]
    args = inputs(hq=opts.get("hq", 2), hkv=opts.get("hkv", 2), sq=opts.get("sq", 9), sk=opts.get("sk", 9))
    if opts.get("mask"):
        args.append(bool_mask(sq=args[0].shape[2], sk=args[1].shape[2]))
    if opts.get("float_mask"):
        m = torch.randn(2, 2, 9, 9).masked_fill(~bool_mask().cpu(), -math.inf)
        args.append(m.to(DEVICE))
    if opts.get("seed"):
        args.append(torch.tensor([12345, 2**32 - 7], dtype=torch.int64, device=DEVICE))
    (out, grads), (c_out, c_grads), graphs = eager_and_compiled(fn, args)
    assert len(graphs) == 1 and FORWARD_OP in code(graphs[0])
    assert torch.equal(out, c_out)
    assert all(torch.equal(g, h) for g, h in zip(grads, c_grads))
    assert out.abs().sum() > 0 and all(g.abs().sum() > 0 for g in grads)


@pytest.mark.kernel
def test_backward_graph_holds_the_backward_op():
    """AOT autograd's forward graph calls the forward op and its backward graph the backward op
    (the kernels are not traced into, and the gradients are the eager ones)."""
    graphs = {}
    args = inputs() + [bool_mask()]
    fn = ATTENTION_CASES["bool mask, causal"][0]
    (out, grads), (c_out, c_grads), _ = eager_and_compiled(fn, args, backend=aot_recording(graphs))
    assert [FORWARD_OP in g.code for g in graphs["forward"]] == [True]
    assert [BACKWARD_OP in g.code for g in graphs["backward"]] == [True]
    assert "triton" not in graphs["forward"][0].code + graphs["backward"][0].code
    assert torch.equal(out, c_out) and all(torch.equal(g, h) for g, h in zip(grads, c_grads))


@pytest.mark.kernel
@pytest.mark.parametrize("mask,seq_major", [("bool", True), ("float", False), (None, False)])
def test_opcheck(mask, seq_major):
    """torch.library.opcheck: the ops' schemas, fake implementations (shapes and strides, the
    seq_major layout included) and autograd registration agree with their real runs."""
    q, k, v = inputs(b=1, hq=2, hkv=1, sq=5, sk=7)
    m = None if mask is None else bool_mask(b=1, sq=5, sk=7)
    if mask == "float":
        m = torch.zeros(m.shape, device=DEVICE).masked_fill(~m, -math.inf)
    seed = torch.tensor([3, 4], dtype=torch.int64, device=DEVICE)
    forward = torch.ops.ojas.flash_attention_forward.default
    args = (q, k, v, m, seed, True, 0.25, 3, 0.2, seq_major, [16, 16, 4, 2, 1] * 3)
    torch.library.opcheck(forward, args)
    out, lse = forward(*args)
    assert out.stride() == kattn._forward_outputs(q, v, seq_major)[0].stride()
    backward = torch.ops.ojas.flash_attention_backward.default
    q, k, v, out, lse = (t.detach() for t in (q, k, v, out, lse))  # the backward op is not differentiable
    torch.library.opcheck(backward, (torch.randn_like(out), q, k, v, m, out, lse, seed, True, 0.25, 3, 0.2, None))


@pytest.mark.kernel
def test_ops_run_the_eager_kernels():
    """The registered forward op called directly is the eager path bit for bit, with a
    non-default config (carried through the op as ints), and the backward op on its outputs the
    eager gradients; the ops have no autograd of their own, double backward through the eager
    path raises."""
    q, k, v = inputs(hq=2, hkv=1)
    config = kattn.AttentionConfig(
        kattn.KernelConfig(16, 32), kattn.KernelConfig(32, 16, split=False), kattn.KernelConfig(16, 16)
    )
    ints = kattn._config_ints(config)
    assert kattn._config_of(ints) == config
    eager = flash_attention(q, k, v, True, scale=0.25, config=config)
    grad = torch.randn(eager.shape, generator=torch.Generator().manual_seed(2)).to(eager)
    g_eager = torch.autograd.grad(eager, (q, k, v), grad)
    with torch.no_grad():
        out, lse = torch.ops.ojas.flash_attention_forward(q, k, v, None, None, True, 0.25, None, 0.0, False, ints)
        g_op = torch.ops.ojas.flash_attention_backward(grad, q, k, v, None, out, lse, None, True, 0.25, None, 0.0, ints)
    assert torch.equal(eager, out) and out.grad_fn is None
    assert all(torch.equal(a, b) for a, b in zip(g_eager, g_op))
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(flash_attention(q, k, v, True, config=config).sum(), (q,), create_graph=True)


@pytest.mark.kernel
@pytest.mark.parametrize("all_kernels", [True, False], ids=["all kernels", "attention and loss kernels only"])
def test_compiled_optimized_llama_cpu(all_kernels):
    """``torch.compile(model)`` of an ``optimize_model``'d float32 Llama with a padding mask, the
    attention and the loss on the kernels, and with ``all_kernels`` RMSNorm, SwiGLU and RoPE too
    (else Hugging Face's): one graph holding both layers' attention op, the loss op and (all
    kernels) the 5 RMSNorm, 2 SwiGLU and 2 RoPE ops, and the eager loss and gradients.  The
    aot_eager backend (Dynamo and AOT autograd, eager kernels): Inductor's CPU compile of the
    model takes minutes on a small machine; Inductor is covered by the tests of each op and, on
    CUDA, by the GPU tests below."""
    transformers = pytest.importorskip("transformers")
    names = ["attention", "linear_cross_entropy"] + (["rms_norm", "swiglu", "rope"] if all_kernels else [])
    with use_impl(**dict.fromkeys(names, "triton")):
        # without all_kernels, RMSNorm, SwiGLU and RoPE left to Hugging Face: on CUDA "auto" would pick their kernels
        flags = {} if all_kernels else dict(rms_norm=False, swiglu=False, rope=False)
        model, data = _llama(transformers, torch.float32, DEVICE, **flags)
        graphs = []
        eager_loss, eager_grads, loss, grads = _eager_and_compiled_model(model, data, recording("aot_eager", graphs))
        assert (
            len(graphs) == 1 and code(graphs[0]).count(FORWARD_OP) == 2 and code(graphs[0]).count(LCE_OPS[0] + ".") == 1
        )
        counts = {op: code(graphs[0]).count(f"ojas.{op}_forward") for op in ("rms_norm", "swiglu", "rope")}
        assert counts == ({"rms_norm": 5, "swiglu": 2, "rope": 2} if all_kernels else dict.fromkeys(counts, 0))
        rtol = 0.0 if _INTERPRETED else 1e-5  # CUDA: the eager adapter may add is_causal (tiles skipped, not masked)
        _assert_step_close(eager_loss, loss, eager_grads, grads, rtol, rtol)


# --------------------------------------------------------------------------
# Linear cross-entropy: ojas::linear_cross_entropy and its backward
# --------------------------------------------------------------------------

LCE_OPS = ("ojas.linear_cross_entropy", "ojas.linear_cross_entropy_backward")


def _lce_inputs(bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(2, 6, 16, generator=g), torch.randn(37, 16, generator=g)
    t = torch.randint(0, 37, (2, 6), generator=g)
    t[0, :3] = -100  # ignored tokens (left padding)
    args = [x.to(DEVICE).requires_grad_(), w.to(DEVICE).requires_grad_(), t.to(DEVICE)]
    return args + ([torch.randn(37, generator=g).to(DEVICE).requires_grad_()] if bias else [])


@pytest.mark.kernel
@pytest.mark.parametrize(
    "reduction,products,bias", [("mean", 3, False), ("sum", 3, True), ("none", 3, True), ("mean", 4, False)]
)
def test_compiled_linear_cross_entropy_is_eager(reduction, products, bias):
    """``torch.compile(fullgraph=True)`` (Inductor) of ``ojas_ref.linear_cross_entropy`` on the
    kernel: one graph holding the op, the eager loss and gradients bit for bit, for the
    3-product schedule (every gradient in the forward, scaled in the backward) and the
    4-product one (reduction "none", or chosen: grad_weight and grad_bias in the backward)."""
    import dataclasses

    from ojas_kernels import linear_cross_entropy as klce

    config = dataclasses.replace(klce.default_config(torch.float32, torch.device(DEVICE)), products=products)

    def fn(x, w, t, b=None):
        if products == 3:
            return ojas_ref.linear_cross_entropy(
                x, w, t, linear_bias=b, reduction=reduction, label_smoothing=0.1, impl="triton"
            )
        return klce.linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, config=config)

    (loss, grads), (c_loss, c_grads), graphs = eager_and_compiled(fn, _lce_inputs(bias))
    assert len(graphs) == 1 and LCE_OPS[0] in code(graphs[0])
    assert torch.equal(loss, c_loss) and all(torch.equal(g, h) for g, h in zip(grads, c_grads))
    assert all(g.abs().sum() > 0 for g in grads)


@pytest.mark.kernel
def test_compiled_linear_cross_entropy_second_backward():
    """A second backward through the retained compiled graph adds the same gradients again, as
    eagerly (the backward op scales the forward's gradients in place: functionalization must
    keep the saved ones intact)."""
    x, w, t = _lce_inputs(False)
    torch._dynamo.reset()
    loss = torch.compile(lambda x, w, t: ojas_ref.linear_cross_entropy(x, w, t, impl="triton"), fullgraph=True)(x, w, t)
    loss.backward(retain_graph=True)
    first = w.grad.clone()
    loss.backward()
    assert first.abs().sum() > 0 and torch.equal(w.grad, 2 * first)


@pytest.mark.kernel
def test_compiled_linear_cross_entropy_checks_targets():
    """Under torch.compile the targets are checked inside the op (the eager check is a
    data-dependent branch): a target out of range raises the eager message, no graph break."""
    x, w, t = _lce_inputs(False)
    t[1, 2] = 37
    fn = lambda x, w, t: ojas_ref.linear_cross_entropy(x, w, t, impl="triton")  # noqa: E731
    torch._dynamo.reset()
    for f in (fn, torch.compile(fn, fullgraph=True)):
        with pytest.raises(ValueError, match=r"target holds 37, not a class in \[0, 37\)"):
            f(x, w, t)


@pytest.mark.kernel
def test_linear_cross_entropy_ops_opcheck():
    """opcheck of both ops: the 3-product forward (gradients for grad_output 1) and the
    4-product one (lse of every token), and the backward's in-place scaling declared as a
    mutation of the forward's gradients; both tagged ``cudagraph_unsafe``."""
    from ojas_kernels import linear_cross_entropy as klce

    x, w, t, b = _lce_inputs(True)
    x2, t2 = x.detach().flatten(0, 1), t.flatten()
    forward = torch.ops.ojas.linear_cross_entropy.default
    backward = torch.ops.ojas.linear_cross_entropy_backward.default
    for reduction, need in (("mean", [True, True, True]), ("none", [True, True, False])):
        args = (x2, w.detach(), b.detach(), t2, reduction, -100, 0.1, 1e-3, 5.0, need, "")
        torch.library.opcheck(forward, args, test_utils=("test_schema", "test_faketensor"))
        loss, gi, gw, gb, lse = forward(*args)
        assert (gw.numel() > 0) == (reduction == "mean") and (lse.numel() > 0) == (reduction == "none")
        grad = torch.ones_like(loss) * 0.5
        torch.library.opcheck(
            backward, (grad, *args[:4], lse, gi, gw, gb, *args[4:]), test_utils=("test_schema", "test_faketensor")
        )
    assert klce._config_of(
        klce._config_text(klce.default_config(torch.float32, torch.device("cpu")))
    ) == klce.default_config(torch.float32, torch.device("cpu"))
    # they read the kept tokens' count on the host: kept out of CUDA graphs; attention's ops are not
    for op, unsafe in ((forward, True), (backward, True), (torch.ops.ojas.flash_attention_forward.default, False)):
        assert (torch.Tag.cudagraph_unsafe in op.tags) == unsafe, op


@pytest.mark.kernel
def test_compiled_head_update_runs_eagerly(monkeypatch):
    """With ``InBackwardOptimizer(head_weight=...)`` the loss under torch.compile runs eagerly
    behind a graph break (its hooks and weak references cannot be traced): the head is updated
    inside the backward (a ``_HeadUpdate`` per forward, as eagerly) and two SGD steps give the
    eager weights bit for bit."""
    from ojas_ref import InBackwardOptimizer

    lce = importlib.import_module(
        "ojas_ref.functional.linear_cross_entropy"
    )  # the module: the package's name is the function

    updates = []
    begin = lce._HeadUpdate.begin
    monkeypatch.setattr(lce._HeadUpdate, "begin", lambda self, node: updates.append(1) or begin(self, node))
    results = []
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        emb = torch.nn.Embedding(11, 16).to(DEVICE)
        head = torch.nn.Parameter(torch.randn(37, 16, device=DEVICE))
        opt = InBackwardOptimizer([emb.weight, head], torch.optim.SGD, lr=0.1, bucket_cap_mb=0, head_weight=head)

        def step(ids, t):
            return ojas_ref.linear_cross_entropy(torch.tanh(emb(ids)), head, t, impl="triton", head_update=opt)

        step = torch.compile(step, backend="aot_eager") if compiled else step  # tanh as eager computes it
        for i in range(2):
            g = torch.Generator().manual_seed(i)
            ids, t = torch.randint(0, 11, (12,), generator=g), torch.randint(0, 37, (12,), generator=g)
            step(ids.to(DEVICE), t.to(DEVICE)).backward()
            opt.step()
            opt.zero_grad()
        results.append((emb.weight.detach(), head.detach()))
    assert len(updates) == 4
    assert all(torch.equal(a, b) for a, b in zip(*results))


# --------------------------------------------------------------------------
# RMSNorm, SwiGLU/GeGLU, RoPE, ReLU: ojas::<name>_forward and ojas::<name>_backward
# --------------------------------------------------------------------------


def _rope_tables(s=9, e=16, dtype=torch.float32):
    pos = torch.arange(s, dtype=torch.float32)[:, None] * torch.linspace(0.05, 1.0, e // 2)
    return [f(torch.cat([pos, pos], -1)).to(dtype)[None].to(DEVICE) for f in (torch.cos, torch.sin)]


def _rms_inputs(dtype=torch.float32, weight_dtype=torch.float32):
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(2, 9, 48, generator=g) * 3).to(dtype)
    return [x.to(DEVICE).requires_grad_(), torch.randn(48, generator=g).to(DEVICE, weight_dtype).requires_grad_()]


def _pair_inputs(shape=(2, 9, 40), dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(shape, generator=g) * 3).to(DEVICE, dtype).requires_grad_() for _ in range(2)]


def _relu_inputs(dtype=torch.float32):
    x = torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(6)).to(dtype)
    x[0, 0, :4] = torch.tensor([0.0, -0.0, 1.0, -1.0])  # zeros of both signs: gradient 0 there
    return [x.to(DEVICE).requires_grad_()]


def _rope_q_k(heads_first: bool, dtype=torch.float32):
    """q [2, 4, 9, 16] and k [2, 2, 9, 16] as Hugging Face makes them (a transposed projection),
    or [B, S, H, E] for unsqueeze_dim=2; cos/sin [1, 9, 16]."""
    g = torch.Generator().manual_seed(8)
    q, k = (torch.randn(2, 9, h, 16, generator=g).to(DEVICE, dtype) for h in (4, 2))
    if heads_first:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    return [q.requires_grad_(), k.requires_grad_(), *_rope_tables(dtype=dtype)]


def _rope(dim):
    from ojas_ref.functional.rope import apply_rotary_pos_emb

    def fn(q, k, cos, sin):
        return torch.cat(apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=dim, impl="triton"), 1 if dim == 1 else 2)

    return fn


ELEMENTWISE_CASES = {
    "rms_norm Llama": (lambda x, w: ojas_ref.rms_norm(x, 48, w, 1e-6, impl="triton"), _rms_inputs, "rms_norm"),
    "rms_norm Llama bf16 x, fp32 weight": (
        lambda x, w: ojas_ref.rms_norm(x, 48, w, 1e-6, impl="triton"),
        lambda: _rms_inputs(torch.bfloat16),
        "rms_norm",
    ),
    "rms_norm Gemma": (
        lambda x, w: ojas_ref.rms_norm(x, 48, w, 1e-6, offset=1.0, cast="after_weight", impl="triton"),
        lambda: _rms_inputs(torch.bfloat16, torch.bfloat16),
        "rms_norm",
    ),
    "swiglu silu": (lambda a, b: ojas_ref.swiglu(a, b, impl="triton"), _pair_inputs, "swiglu"),
    "swiglu gelu_tanh bf16": (
        lambda a, b: ojas_ref.swiglu(a, b, activation="gelu_tanh", impl="triton"),
        lambda: _pair_inputs(dtype=torch.bfloat16),
        "swiglu",
    ),
    "swiglu of a split projection": (
        lambda a, b: ojas_ref.swiglu(*torch.cat([a, b], -1).chunk(2, -1), impl="triton"),
        _pair_inputs,
        "swiglu",
    ),
    "rope q and k, unsqueeze_dim=1": (_rope(1), lambda: _rope_q_k(True), "rope"),
    "rope q and k, unsqueeze_dim=2, bf16": (_rope(2), lambda: _rope_q_k(False, torch.bfloat16), "rope"),
    "relu": (lambda x: ojas_ref.relu(x, impl="triton"), _relu_inputs, "relu"),
    "relu fp16, non-contiguous": (
        lambda x: ojas_ref.relu(x.transpose(0, 2), impl="triton"),
        lambda: _relu_inputs(torch.float16),
        "relu",
    ),
}


@pytest.mark.kernel
@pytest.mark.parametrize("case", list(ELEMENTWISE_CASES))
def test_compiled_elementwise_ops_are_eager(case):
    """``torch.compile(fullgraph=True)`` (Inductor) of rms_norm (Llama's and Gemma's casting),
    swiglu (silu and gelu_tanh), apply_rotary_pos_emb (q and k) and the packed-mask relu on the
    kernels: one graph holding the forward op, AOT's backward graph the backward op, and the
    eager output and gradients bit for bit (the code around the ops is reshapes and cats)."""
    fn, make, name = ELEMENTWISE_CASES[case]
    args = make()
    (out, grads), (c_out, c_grads), graphs = eager_and_compiled(fn, args)
    assert len(graphs) == 1 and f"ojas.{name}_forward" in code(graphs[0])
    assert torch.equal(out, c_out) and out.dtype == c_out.dtype and out.stride() == c_out.stride()
    assert all(torch.equal(g, h) for g, h in zip(grads, c_grads))
    assert out.abs().sum() > 0 and all(g.abs().sum() > 0 for g in grads)
    aot = {}
    _, (a_out, a_grads), _ = eager_and_compiled(fn, args, backend=aot_recording(aot))
    assert [f"ojas.{name}_forward" in g.code for g in aot["forward"]] == [True]
    assert [f"ojas.{name}_backward" in g.code for g in aot["backward"]] == [True]
    assert torch.equal(out, a_out) and all(torch.equal(g, h) for g, h in zip(grads, a_grads))


@pytest.mark.kernel
def test_compiled_swiglu_gate_only_and_rope_q_only_gradients():
    """Only one input needing a gradient (the up projection frozen; k a constant, its rotated
    output used or not): the compiled gradient of the other is the eager one bit for bit."""
    a, b = _pair_inputs()
    fn = lambda a, b: ojas_ref.swiglu(a, b, impl="triton")  # noqa: E731
    (out, grads), (c_out, c_grads), _ = eager_and_compiled(fn, [a, b.detach()])
    assert len(grads) == 1 and torch.equal(out, c_out) and torch.equal(grads[0], c_grads[0])
    q, k, cos, sin = _rope_q_k(True)
    for fn in (_rope(1), lambda q, k, cos, sin: _rope(1)(q, k, cos, sin)[:, :4]):  # the second drops k's output
        (out, grads), (c_out, c_grads), _ = eager_and_compiled(fn, [q, k.detach(), cos, sin])
        assert len(grads) == 1 and torch.equal(out, c_out) and torch.equal(grads[0], c_grads[0])
        assert grads[0].abs().sum() > 0


DUPLICATE_CASES = {
    "swiglu, gate is up": (lambda x: ojas_ref.swiglu(x, x, impl="triton"), lambda: _pair_inputs()[:1]),
    "rope, q is k and cos is sin": (
        lambda q, cos: _rope(1)(q, q, cos, cos),
        lambda: [_rope_q_k(True)[0], _rope_tables()[0]],
    ),
    "attention, query is key is value": (
        lambda x: ojas_ref.attention(x, x, x, is_causal=True, impl="triton"),
        lambda: inputs()[:1],
    ),
    "linear_cross_entropy, input is weight": (
        lambda x, t: ojas_ref.linear_cross_entropy(x, x, t, impl="triton"),
        lambda: [_lce_inputs(False)[0][0], torch.arange(6, device=DEVICE) % 4],
    ),
}


@pytest.mark.kernel
@pytest.mark.parametrize("case", list(DUPLICATE_CASES))
def test_compiled_function_of_one_tensor_at_two_inputs(case):
    """One tensor at two inputs of a primitive (Dynamo refuses an autograd.Function given one
    tensor twice: ``ojas_kernels.host.dynamo_apply`` passes a view the second time): one graph, the
    eager output and gradients bit for bit."""
    fn, make = DUPLICATE_CASES[case]
    (out, grads), (c_out, c_grads), graphs = eager_and_compiled(fn, make(), backend="aot_eager")
    assert len(graphs) == 1 and torch.equal(out, c_out)
    assert len(grads) == 1 and torch.equal(grads[0], c_grads[0]) and grads[0].abs().sum() > 0


def _elementwise_op_args():
    """(forward op, its arguments, backward op, a function of the forward's outputs giving the
    backward's arguments) per primitive, inputs requiring grad (opcheck then checks autograd)."""
    ops = torch.ops.ojas
    x, w = _rms_inputs(torch.bfloat16)
    a, b = _pair_inputs(dtype=torch.float16)
    q, k, cos, sin = _rope_q_k(True)
    (h,) = _relu_inputs()
    x2 = x.detach().flatten(0, 1).requires_grad_()
    return {
        "rms_norm": (
            ops.rms_norm_forward.default,
            (x2, w, 1e-6, 0.0, False),
            ops.rms_norm_backward.default,
            lambda out: (torch.randn_like(out[0]), x2.detach(), w.detach(), out[1].detach(), 0.0, False),
        ),
        "rms_norm Gemma": (
            ops.rms_norm_forward.default,
            (x2, w.detach().bfloat16().requires_grad_(), 1e-6, 1.0, True),
            ops.rms_norm_backward.default,
            lambda out: (torch.randn_like(out[0]), x2.detach(), w.detach().bfloat16(), out[1].detach(), 1.0, True),
        ),
        "swiglu": (
            ops.swiglu_forward.default,
            (a, b, "gelu_tanh"),
            ops.swiglu_backward.default,
            lambda out: (a.detach(), b.detach(), torch.randn_like(out), "gelu_tanh"),
        ),
        "rope": (
            ops.rope_forward.default,
            (q, k, cos, sin),
            ops.rope_backward.default,
            lambda out: (torch.randn_like(out[0]), torch.randn_like(out[1]), cos, sin),
        ),
        "relu": (
            ops.relu_forward.default,
            (h,),
            ops.relu_backward.default,
            lambda out: (torch.randn_like(out[0]), out[1]),
        ),
    }


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["rms_norm", "rms_norm Gemma", "swiglu", "rope", "relu"])
def test_elementwise_ops_opcheck(name):
    """torch.library.opcheck of each forward op (schema, fake implementation with the real
    outputs' dtypes and strides, autograd registration) and each backward op."""
    forward, args, backward, backward_args = _elementwise_op_args()[name]
    torch.library.opcheck(forward, args)
    out = forward(*args)
    out = out if isinstance(out, tuple) else (out,)
    torch.library.opcheck(backward, backward_args(out if len(out) > 1 else out[0]))


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["rms_norm", "swiglu", "rope", "relu"])
def test_elementwise_ops_run_the_eager_kernels(name):
    """Each forward op called directly gives the eager kernel path's outputs, and its backward op
    on the forward's saved values the eager gradients, bit for bit.  The ops have no autograd of
    their own (under torch.compile the primitive's autograd.Function calls them); double backward
    through the eager path raises."""
    from ojas_ref.functional.rope import apply_rotary_pos_emb

    forward, args, backward, _ = _elementwise_op_args()[name]
    eager = {
        "rms_norm": lambda x, w, eps, *_: ojas_ref.rms_norm(x, 48, w, eps, impl="triton"),
        "swiglu": lambda a, b, act: ojas_ref.swiglu(a, b, activation=act, impl="triton"),
        "rope": lambda q, k, cos, sin: apply_rotary_pos_emb(q, k, cos, sin, impl="triton"),
        "relu": lambda h: ojas_ref.relu(h, impl="triton"),
    }[name]
    backward_args = {  # (output gradients, the forward op's outputs) -> the backward op's arguments
        "rms_norm": lambda g, o: (g[0], args[0], args[1], o[1], *args[3:]),
        "swiglu": lambda g, o: (*args[:2], g[0], args[2]),
        "rope": lambda g, o: (*g, *args[2:]),
        "relu": lambda g, o: (g[0], o[1]),
    }[name]
    leaves = [t for t in args if torch.is_tensor(t) and t.requires_grad]
    out = eager(*args)
    out = (out,) if torch.is_tensor(out) else tuple(out)
    grad_out = [torch.randn(o.shape, generator=torch.Generator().manual_seed(9)).to(o) for o in out]
    grads = torch.autograd.grad(out, leaves, grad_out)
    with torch.no_grad():
        o_out = forward(*args)
        o_out = (o_out,) if torch.is_tensor(o_out) else tuple(o_out)
        o_grads = backward(*backward_args(grad_out, o_out))
    o_grads = (o_grads,) if torch.is_tensor(o_grads) else tuple(o_grads)
    assert len(grads) == len(o_grads) and all(g.abs().sum() > 0 for g in grads)
    assert all(torch.equal(a, b) for a, b in zip(out + grads, o_out[: len(out)] + o_grads))
    assert not o_out[0].requires_grad and o_out[0].grad_fn is None
    again = eager(*args)
    again = (again,) if torch.is_tensor(again) else tuple(again)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(again, leaves, grad_out, create_graph=True)


# --------------------------------------------------------------------------
# GPU: optimize_model'd Llama, and fullgraph for every functional op
# --------------------------------------------------------------------------


def _llama(transformers, dtype, device, checkpoint=False, **optimize):
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)
    model, _ = ojas_ref.optimize_model(model, checkpoint=checkpoint, **optimize)
    model.train()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 128, (2, 24), generator=g)
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[0, :5] = 0  # left padding of one row
    labels = ids.clone()
    labels[0, :6] = -100
    return model, {k: t.to(device) for k, t in dict(input_ids=ids, attention_mask=mask, labels=labels).items()}


def _eager_and_compiled_model(model, data, backend="inductor", autocast=None):
    torch._dynamo.reset()
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for m in (model, torch.compile(model, backend=backend)):
        with contextlib.nullcontext() if autocast is None else torch.autocast("cuda", dtype=autocast):
            loss = m(**data).loss
        results += [loss.detach(), torch.autograd.grad(loss, params)]
    return results


def _assert_close(a, b, rtol):
    scale = max(a.abs().max().item(), b.abs().max().item(), 1e-30)
    diff = (a.float() - b.float()).abs().max().item()
    assert diff <= rtol * scale, f"max difference {diff:.3e} above {rtol} x {scale:.3e}"


def _assert_step_close(eager_loss, loss, eager_tensors, tensors, loss_rtol, rtol):
    """The compiled step's loss within ``loss_rtol`` and each gradient or parameter within ``rtol``
    of the eager one's (relative to the largest entry, :func:`_assert_close`)."""
    _assert_close(eager_loss, loss, loss_rtol)
    for a, b in zip(eager_tensors, tensors):
        _assert_close(a, b, rtol)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("checkpoint", [False, True], ids=["no checkpoint", "checkpoint"])
@pytest.mark.parametrize("mode", ["bf16", "fp32 + bf16 autocast"])
@pytest.mark.parametrize("kernels_on", [True, False], ids=["all kernels", "attention and loss kernels only"])
def test_compiled_optimized_llama_gpu(mode, checkpoint, kernels_on):
    """``torch.compile(model)`` (Inductor) of an ``optimize_model``'d Llama on CUDA runs and gives
    the eager loss and gradients: relative 2e-2 of each gradient's largest entry (bfloat16
    compute, Inductor's own fusions of the code around the kernels), 1e-2 on the loss.
    ``kernels_on=False``: optimize_model(rms_norm=False, swiglu=False, rope=False), which
    crashed as well before the ops were registered (issue 29)."""
    transformers = pytest.importorskip("transformers")
    flags = {} if kernels_on else dict(rms_norm=False, swiglu=False, rope=False)
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    model, data = _llama(transformers, dtype, "cuda", checkpoint=checkpoint, **flags)
    eager_loss, eager_grads, loss, grads = _eager_and_compiled_model(
        model, data, autocast=None if mode == "bf16" else torch.bfloat16
    )
    _assert_step_close(eager_loss, loss, eager_grads, grads, 1e-2, 2e-2)


def _functional_cases():
    from ojas_ref.functional.rope import apply_rotary_pos_emb

    def attention(x):
        q = x.view(2, 24, 4, 16).transpose(1, 2)
        m = torch.ones(2, 1, 24, 24, dtype=torch.bool, device=x.device).tril()
        m[0, :, :, :3] = False
        return ojas_ref.attention(q, q[:, :2], q[:, :2], attn_mask=m, enable_gqa=True)

    def loss(x):
        w = torch.linspace(-1, 1, 100 * 64, device=x.device, dtype=x.dtype).view(100, 64)
        t = torch.arange(48, device=x.device) % 100
        t[::5] = -100
        return ojas_ref.linear_cross_entropy(x.view(48, 64), w, t, ignore_index=-100)

    def rms_norm(x):
        return ojas_ref.rms_norm(x, 64, torch.linspace(0.5, 1.5, 64, device=x.device, dtype=x.dtype))

    def swiglu(x):
        return ojas_ref.swiglu(x[..., :32], x[..., 32:])

    def rope(x):
        q = x.view(2, 24, 4, 16).transpose(1, 2)
        pos = torch.arange(24, device=x.device, dtype=torch.float32)[:, None] * torch.arange(8, device=x.device)
        cos, sin = (f(torch.cat([pos, pos], -1)).to(x.dtype)[None] for f in (torch.cos, torch.sin))
        a, b = apply_rotary_pos_emb(q, q[:, :2], cos, sin)
        return torch.cat([a, b], 1)

    def relu(x):
        return ojas_ref.relu(x)

    return dict(attention=attention, linear_cross_entropy=loss, rms_norm=rms_norm, swiglu=swiglu, rope=rope, relu=relu)


#: the forward op each functional case's graph holds
FUNCTIONAL_OPS = dict(
    attention=FORWARD_OP,
    linear_cross_entropy=LCE_OPS[0],
    rms_norm="ojas.rms_norm_forward",
    swiglu="ojas.swiglu_forward",
    rope="ojas.rope_forward",
    relu="ojas.relu_forward",
)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("name", list(FUNCTIONAL_OPS))
def test_functional_ops_compile_fullgraph_gpu(name, dtype):
    """``torch.compile(fn, fullgraph=True)`` of each functional op on CUDA (the kernels chosen by
    "auto") is one graph holding the op and gives the eager value and input gradient (relative
    1e-2 of the largest entry in bfloat16, 1e-4 in float32: only the code around the kernels is
    Inductor's)."""
    fn = _functional_cases()[name]
    x = torch.randn(2, 24, 64, generator=torch.Generator().manual_seed(0)).to("cuda", dtype)
    (out, grads), (c_out, c_grads), graphs = eager_and_compiled(fn, [x.requires_grad_()])
    assert len(graphs) == 1 and FUNCTIONAL_OPS[name] in code(graphs[0])
    rtol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    _assert_close(out, c_out, rtol)
    _assert_close(grads[0], c_grads[0], rtol)


# --------------------------------------------------------------------------
# optimize_model's other modes under torch.compile(model): offloaded and split checkpoints,
# packed sequences, InBackwardOptimizer (issue 29 item 1)
# --------------------------------------------------------------------------

MODES = {
    "checkpoint offload": dict(checkpoint="offload"),
    "checkpoint split": dict(checkpoint=True, checkpoint_split=True),
    "checkpoint offload split": dict(checkpoint="offload", checkpoint_split=True),
    "packed sequences": {},
}


def _mode_llama(transformers, mode, dtype, device):
    """``_llama`` with the mode's optimize_model flags; "packed sequences": two sequences in each
    row told apart by position_ids restarting at 0, no attention_mask, use_cache=False (the inputs of
    tests/integrations/test_optimize_huggingface.py's test_packed_sequences_by_position_ids, both rows)."""
    model, data = _llama(transformers, dtype, device, **MODES[mode])
    if mode == "packed sequences":
        ids, labels = data["input_ids"][:, :11], data["input_ids"][:, :11].clone()
        labels[:, 5] = -100  # the second sequence's first token is not predicted from the first's
        positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]] * 2, device=device)
        data = dict(input_ids=ids, labels=labels, position_ids=positions, use_cache=False)
    return model, data


def _kernels_forced(all_kernels=True):
    """The Triton kernels forced (as test_compiled_optimized_llama_cpu), a use_impl block: attention
    and the loss, and with ``all_kernels`` RMSNorm, SwiGLU and RoPE."""
    names = ("attention", "linear_cross_entropy") + (("rms_norm", "swiglu", "rope") if all_kernels else ())
    return use_impl(**dict.fromkeys(names, "triton"))


@pytest.mark.kernel
@pytest.mark.parametrize("mode", list(MODES))
def test_compiled_optimized_llama_modes_cpu(mode):
    """``torch.compile(model)`` (aot_eager, as test_compiled_optimized_llama_cpu) of an
    ``optimize_model``'d float32 Llama, every kernel forced, in each mode: the eager loss and
    gradients; packed sequences: one graph holding both layers' attention op and the loss op.
    With checkpointing (transformers 5.25) Dynamo falls back to eager for the decoder layers: a
    graph break inside ``torch.utils.checkpoint`` (the ``kernels`` package's
    ``CompileableContextVar`` set in the layer's forward, "HOP: Unsafe side effect"), so no
    compiled graph holds the attention op there, only the loss's."""
    transformers = pytest.importorskip("transformers")
    with _kernels_forced():
        model, data = _mode_llama(transformers, mode, torch.float32, DEVICE)
        graphs = []
        eager_loss, eager_grads, loss, grads = _eager_and_compiled_model(model, data, recording("aot_eager", graphs))
        if mode == "packed sequences":
            assert (
                len(graphs) == 1
                and code(graphs[0]).count(FORWARD_OP) == 2
                and code(graphs[0]).count(LCE_OPS[0] + ".") == 1
            )
        rtol = 0.0 if _INTERPRETED else 1e-5
        _assert_step_close(eager_loss, loss, eager_grads, grads, rtol, rtol)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("dtype", ["bf16", "fp32 + bf16 autocast"])
def test_compiled_optimized_llama_modes_gpu(mode, dtype):
    """The GPU twin of test_compiled_optimized_llama_modes_cpu: Inductor, the tolerances of
    test_compiled_optimized_llama_gpu."""
    transformers = pytest.importorskip("transformers")
    model, data = _mode_llama(transformers, mode, torch.bfloat16 if dtype == "bf16" else torch.float32, "cuda")
    eager_loss, eager_grads, loss, grads = _eager_and_compiled_model(
        model, data, autocast=None if dtype == "bf16" else torch.bfloat16
    )
    _assert_step_close(eager_loss, loss, eager_grads, grads, 1e-2, 2e-2)


IN_BACKWARD = {"default": {}, "overlap": dict(overlap=True), "state on cpu": dict(state_device="cpu")}


def _in_backward_steps(
    transformers, options, dtype, device, backend, autocast=None, optimizer=(torch.optim.AdamW, dict(lr=1e-2))
):
    """Two steps of ``optimizer`` (class, keywords) on an ``optimize_model``'d Llama by
    ``InBackwardOptimizer(**options)``, eager and compiled (each from the same initial weights):
    the losses and the updated parameters."""
    from ojas_ref import InBackwardOptimizer

    results = []
    for compiled in (False, True):
        torch._dynamo.reset()
        model, data = _llama(transformers, dtype, device)
        opt = InBackwardOptimizer(model.parameters(), optimizer[0], **optimizer[1], **options)
        m = torch.compile(model, backend=backend) if compiled else model
        losses = []
        for _ in range(2):
            with contextlib.nullcontext() if autocast is None else torch.autocast("cuda", dtype=autocast):
                loss = m(**data).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        results.append((torch.stack(losses), [p.detach().clone() for p in model.parameters()]))
    return results


@pytest.mark.kernel
@pytest.mark.parametrize("options", [k for k in IN_BACKWARD if k != "overlap"])
def test_compiled_optimized_llama_in_backward_cpu(options):
    """``torch.compile(model)`` (aot_eager) of an ``optimize_model``'d float32 Llama trained by
    ``InBackwardOptimizer`` (AdamW, the updates in the parameters' post-accumulate-grad hooks):
    two steps give the eager losses and updated parameters (overlap is CUDA only: the GPU twin).
    Attention and the loss on the kernels (the other kernels in the interpreter would double the
    time; they are compiled in test_compiled_optimized_llama_modes_cpu)."""
    transformers = pytest.importorskip("transformers")
    with _kernels_forced(all_kernels=False):
        (eager_losses, eager_params), (losses, params) = _in_backward_steps(
            transformers, IN_BACKWARD[options], torch.float32, DEVICE, "aot_eager"
        )
        rtol = 0.0 if _INTERPRETED else 1e-5
        _assert_step_close(eager_losses, losses, eager_params, params, rtol, rtol)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("options", list(IN_BACKWARD))
@pytest.mark.parametrize("dtype", ["bf16", "fp32 + bf16 autocast"])
def test_compiled_optimized_llama_in_backward_gpu(options, dtype):
    """The GPU twin of test_compiled_optimized_llama_in_backward_cpu (Inductor, overlap=True too),
    with plain SGD at lr 0.5: the losses to 1e-2 and each parameter's update (after minus before) to
    5e-2 of its largest entry. Not AdamW: its first update is lr * sign(g), so a gradient entry near 0
    that Inductor's rounding flips moves by 2 lr (seen in bf16 on the H100), whatever the kernels do."""
    transformers = pytest.importorskip("transformers")
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    initial = [p.detach().clone() for p in _llama(transformers, dt, "cuda")[0].parameters()]
    (eager_losses, eager_params), (losses, params) = _in_backward_steps(
        transformers,
        IN_BACKWARD[options],
        dt,
        "cuda",
        "inductor",
        autocast=None if dtype == "bf16" else torch.bfloat16,
        optimizer=(torch.optim.SGD, dict(lr=0.5)),
    )
    _assert_close(eager_losses, losses, 1e-2)
    moved = [(p - p0).float() for p, p0 in zip(eager_params, initial)]
    assert max(d.abs().max().item() for d in moved) > 1e-2  # the eager steps did update the weights
    for d, q, p0 in zip(moved, params, initial):
        # 5e-2 of the largest update, plus one ulp of the stored weight (a bf16 weight whose update is a
        # few ulps rounds one ulp apart when Inductor's gradient differs in its last bits)
        ulp = torch.finfo(dt).eps * p0.abs().max().item()
        diff = (d - (q - p0).float()).abs().max().item()
        assert diff <= 5e-2 * d.abs().max().item() + ulp, (diff, d.abs().max().item(), ulp)
