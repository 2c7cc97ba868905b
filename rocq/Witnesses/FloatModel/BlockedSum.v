(** * Witnesses of FloatModel/BlockedSum.v (ojas_ref/verification/proof_audit.py): float32
    (or the storage formats), one tile of the number [0] or one product [0 * 0]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

Lemma w_u_small : forall n, (n <= 1)%nat -> INR n * ff_u fp32 < 1.
Proof.
  intros n Hn; rewrite fp32_u; apply (le_INR n 1) in Hn; simpl in Hn.
  pose proof (pos_INR n); lra.
Qed.

Lemma w_fmt_00 : forall F xy, In xy (combine [0] [0]) -> ff_fmt F (fst xy * snd xy).
Proof. intros F xy [<- | []]; cbn [fst snd]; rewrite Rmult_0_l; apply ff_fmt_0. Qed.

Lemma w_zero_or_big : forall xy, In xy (combine [0] [0]) ->
  fst xy * snd xy = 0 \/ bpow radix2 (-134) <= Rabs (fst xy * snd xy).
Proof. intros xy [<- | []]; cbn [fst snd]; left; ring. Qed.

Ltac w_bs := first [ apply w_u_small; cbn; lia | rewrite Rmult_0_l; lra | cbn; lia | repeat constructor; apply ff_fmt_0
                   | apply w_fmt_00 | apply w_zero_or_big | rewrite fp32_u in *; simpl; lra ].

Definition blocked_sum_with_error_bound_witness :=
  blocked_sum_with_error_bound fp32 (fun _ => 0) 0 [] (Forall_nil _) ltac:(w_bs).

Definition blocked_sum_error_bound_witness :=
  ltac:(refine (blocked_sum_error_bound fp32 1 [[0]] _ _ _); w_bs).

Definition chunked_sum_error_bound_witness :=
  ltac:(refine (chunked_sum_error_bound fp32 1 [0] _ _ _); w_bs).

Definition chunked_sum_error_bound_t_witness :=
  ltac:(refine (chunked_sum_error_bound_t fp32 1 1 [0] _ _ _ _ _); w_bs).

Definition blocked_sum_skip_zero_tiles_witness := blocked_sum_skip_zero_tiles fp32 [].

Definition blocked_sum_skip_zero_tile_witness :=
  blocked_sum_skip_zero_tile fp32 [] [0] [] (Forall_cons _ eq_refl (Forall_nil _)).

Lemma w_shape_tiles : forall tl, In tl [[0]] -> leaves (w_shape tl) = tl /\ (depth (w_shape tl) <= 0)%nat.
Proof. intros tl [<- | []]; cbn; split; [reflexivity | lia]. Qed.

Definition blocked_tree_sum_error_bound_witness :=
  ltac:(refine (blocked_tree_sum_error_bound fp32 w_shape 0 [[0]] w_shape_tiles _ _); w_bs).

Definition blocked_dot_error_bound_witness :=
  ltac:(refine (blocked_dot_error_bound fp32 1 1 [0] [0] _ _ _ _ _); w_bs).

Definition blocked_dot_error_bound_rounded_witness :=
  ltac:(refine (blocked_dot_error_bound_rounded fp32 1 1 [0] [0] _ _ _ _); w_bs).

Definition bf16_blocked_dot_error_bound_witness :=
  ltac:(refine (bf16_blocked_dot_error_bound 1 1 [0] [0] _ _ _ _ _ _ _); w_bs).

Definition fp16_blocked_dot_error_bound_witness :=
  ltac:(refine (fp16_blocked_dot_error_bound 1 1 [0] [0] _ _ _ _ _ _); w_bs).
