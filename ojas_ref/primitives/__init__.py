"""The primitives: each a pure PyTorch reference of one memory-saving training operation,
with the Coq theorems it rests on named in its docstrings. ``attention`` (online-softmax
attention, rocq/Attention/), ``linear_cross_entropy`` (chunked linear cross-entropy,
rocq/CrossEntropy/), ``reversible`` (coupling blocks reconstructed in backward,
rocq/Reversible/), ``optimizer_in_backward`` (the optimizer step in each parameter's
post-accumulate-grad hook, rocq/OptimizerInBackward/), ``rms_norm`` (rocq/RMSNorm/),
``swiglu`` (rocq/SwiGLU/), ``relu`` (the packed 1-bit ReLU mask and ReLU², rocq/ReLU/) and ``rope`` (the rotary embedding, rocq/RoPE/), each dispatching to its Triton kernel in ``ojas_kernels`` where
one exists; and the rules they share: ``autocast`` (torch's autocast casts for the ops they
replace) and ``transforms`` (torch.func's transforms refused, torch.compile allowed). The
public names are exported by :mod:`ojas_ref`; the modules hold the rest.
"""
