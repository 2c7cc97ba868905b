(** * Extraction of the attention and cross-entropy algorithms to OCaml.

    Only the algorithms are extracted; they are parametric in a
    [ScalarOps] record, and the float instance is supplied by the
    hand-written glue ([oracle_main.ml]).  [R] and [R_ops] are not
    extracted.  Naturals become OCaml [int] ([ExtrOcamlNatInt]): they are
    sequence positions, tile sizes and window widths, far below [2^62].
    Integers [Z] (class indices and [ignore_index] of the cross-entropy)
    become OCaml [int] too ([ExtrOcamlZInt]); the glue bounds them by
    [2^53].  *)

From Coq Require Extraction ExtrOcamlBasic ExtrOcamlNatInt ExtrOcamlZInt.
From Ojas Require Import ScalarOps Vector Attention.OnlineSoftmax Attention.Backward
  Attention.Merge CrossEntropy.Definitions.

(** [Nat.leb] as OCaml's integer [<=] ([ExtrOcamlNatInt] maps
    [Compare_dec.leb] but not [Nat.leb]; [Nat.ltb n m] is extracted from
    its definition [Nat.leb (S n) m]). *)
Extract Inlined Constant Nat.leb => "(<=)".

Extraction "_build/attention_spec.ml"
  attention_forward attention_two_pass attention_backward visibility chunk merge
  ce_forward ce_output ce_backward.
