(** * Extraction of the attention and cross-entropy algorithms to OCaml.

    Only the algorithms are extracted; they are parametric in a
    [ScalarOps] record, and the float instance is supplied by the
    hand-written glue ([oracle_main.ml]).  [R] and [R_ops] are not
    extracted.  Naturals become OCaml [int] ([ExtrOcamlNatInt]): they are
    sequence positions, tile sizes and window widths, far below [2^62].
    Integers [Z] (class indices and [ignore_index] of the cross-entropy)
    become OCaml [int] too ([ExtrOcamlZInt]); the glue bounds them by
    [2^53].  The fixed-point states of the reversible coupling stacks
    ([Z_group], rocq/Reversible/FixedPoint.v) are such integers too; the
    glue keeps every state and increment below [2^60] in magnitude, so the
    sums stay below OCaml's [2^62].  *)

From Coq Require Extraction ExtrOcamlBasic ExtrOcamlNatInt ExtrOcamlZInt.
From Ojas Require Import ScalarOps Vector Attention.OnlineSoftmax Attention.Backward
  Attention.Merge Attention.GroupedQuery Attention.AdditiveMask LinearCrossEntropy.Definitions.
From Ojas Require Import Reversible.Coupling Reversible.Stack Reversible.FixedPoint
  Reversible.Gradient.
From Ojas Require Import InBackward.UpdateRules.

(** [Nat.leb] as OCaml's integer [<=] ([ExtrOcamlNatInt] maps
    [Compare_dec.leb] but not [Nat.leb]; [Nat.ltb n m] is extracted from
    its definition [Nat.leb (S n) m]). *)
Extract Inlined Constant Nat.leb => "(<=)".

Extraction "_build/attention_spec.ml"
  attention_forward attention_two_pass attention_backward visibility chunk merge
  gqa_forward gqa_backward mha_two_pass repeat_kv kv_head
  float_mask attention_two_pass_bias attention_dbias mask_finite mask_bias
  ce_forward ce_output ce_backward
  scalar_group list_group coupling_forward coupling_inverse stack_forward stack_inverse
  coupling_stack_backward Z_group
  sgd_update adamw_update.
