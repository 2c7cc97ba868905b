(** * Extraction of the computable error bounds (rocq/Bounds/) to OCaml.

    A separate extraction from [Extract.v]: there [Z] is OCaml's [int]
    ([ExtrOcamlZInt]), which cannot carry the numerators and denominators
    of the bounds (hundreds of bits).  Here [positive], [N] and [Z] are
    arbitrary-precision integers, [Big_int_Z] of Zarith (GMP), through
    Coq's own [ExtrOcamlZBigInt]: its [Extract Inductive] / [Extract
    Constant] directives (the ring operations, comparisons, [Z.div],
    [Z.modulo], shifts) are trusted; every other function (e.g. [Z.log2],
    [Pos.pow]) is extracted from its definition.  [Q] is Coq's record
    [{qnum; qden}] over those. *)

From Coq Require Extraction ExtrOcamlBasic ExtrOcamlZBigInt.
From Ojas Require Import Bounds.Sums Bounds.Softmax Bounds.Attention Bounds.AttentionChain Bounds.LinearCrossEntropy
  Bounds.LinearCrossEntropyGrad Bounds.LinearCrossEntropyChain Bounds.LinearCrossEntropySoftcapChain.

Extraction "_build/bounds_spec.ml"
  dot_bound_q chunked_sum_factor_q nat_err_q stream_beta_q stream_err_q perturbation_q
  neg_ln_check attn_fwd_q attn_fwd_post_q attn_lse_q score_max_q score_delta_q attn_grad_chain_q ce_lse_q
  ce_merge_lse_q ce_grad_q ce_grad_chain_q ce_gp_q sc_grad_q sc_grad_chain_q.
