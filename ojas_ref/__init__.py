"""ojas-ref: formally verified reference implementations of memory-saving training primitives.

Online-softmax (flash) attention: :func:`ojas_ref.attention.attention`, following
rocq/Attention/OnlineSoftmax.v and rocq/Attention/Backward.v. The function is not
re-exported here, so that ``ojas_ref.attention`` always names the module.
"""
