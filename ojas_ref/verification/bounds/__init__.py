"""The proved floating-point error bounds, as tolerances: one module per operation.

* :mod:`.common`: the float models' constants (unit roundoffs, storage formats, the assumed
  ``exp`` error) and the oracle that evaluates the bounds exactly (``rocq/Bounds/``),
  with the hand copies of the formulas as its fallback;
* :mod:`.sums`: dot products (``gamma_n``) and chunked sums;
* :mod:`.online_softmax`: the streamed softmax and the score perturbation (the PyTorch
  reference attention);
* :mod:`.attention`: the Triton flash-attention kernel (output, lse, dV, dK, dQ);
* :mod:`.linear_cross_entropy`: the linear cross-entropy's forward (the reference's per-token
  loss and its reductions; the Triton kernel's lse, loss, logits and softcap);
* :mod:`.linear_cross_entropy_grad`: the Triton linear cross-entropy's dH and dW;
* :mod:`.reversible`: the reconstruction of a reversible coupling stack.

Each bound's docstring names the Coq theorem it evaluates.
"""
