(** * Witnesses of Attention/AdditiveMask.v (ojas_ref/verification/proof_audit.py): one row
    of scores [0; 1] (or [scale * q . k_j] with [q = [1; 2]], keys [[1; 1]; [0; 2]],
    scale [1/2]) over value rows [[1; 2]; [3; 4]], the bias [-1] on key 0 and [2]
    elsewhere, upstream gradient [1; -1]; a head of two query rows under the causal
    mask with the float mask [-inf] on the diagonal and [i] below it (row 0 is fully
    masked, row 1 sees key 0); for the bias gradient the strictly causal mask (row 0
    sees nothing), bias [i - j]. *)

From Coq Require Import Reals List Lia Lra.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.BackwardCorrect Attention.AdditiveMask.
Import ListNotations.
Open Scope R_scope.

Definition w_ss : list R := [0; 1].
Definition w_vs : list (list R) := [[1; 2]; [3; 4]].
Definition w_dO : list R := [1; -1].
Definition w_vis (j : nat) : bool := Nat.leb 1 j.
Definition w_all (j : nat) : bool := true.
Definition w_bias (j : nat) : R := match j with O => -1 | _ => 2 end.

Definition w_q : list R := [1; 2].
Definition w_qs : list (list R) := [[1; 0]; [0; 1]].
Definition w_ks : list (list R) := [[1; 1]; [0; 2]].
Definition w_dOs : list (list R) := [[1; 0]; [0; 1]].

(** The float mask: [-inf] ([None]) on the diagonal, [i] elsewhere. *)
Definition w_m (i j : nat) : option R := if Nat.eqb i j then None else Some (INR i).

(** The bias of the head: [i - j]; strictly causal visibility. *)
Definition w_bias2 (i j : nat) : R := INR i - INR j.
Definition w_strict (i j : nat) : bool := Nat.ltb j i.

Ltac w_lt := cbn; lia.

Lemma w_row0_masked : forall j, (j < length w_ks)%nat -> (causal 0 j && mask_finite w_m 0 j)%bool = false.
Proof. intros j Hj; cbn in Hj; destruct j as [|[|j]]; [reflexivity | reflexivity | lia]. Qed.

Lemma w_row0_strict : forall j, (j < length w_ks)%nat -> w_strict 0 j = false.
Proof. intros j _; reflexivity. Qed.

Lemma w_ks_len : forall k, In k w_ks -> length k = length w_q.
Proof. intros k [<- | [<- | []]]; reflexivity. Qed.

Definition stream_row_bias_masked_keys_witness :=
  stream_row_bias_masked_keys 1 2 w_vis w_bias w_ss w_vs eq_refl.

Definition attention_forward_float_mask_correct_witness :=
  attention_forward_float_mask_correct 1 2 (/ 2) causal w_m w_qs w_ks w_vs 1 eq_refl ltac:(w_lt).

Definition stream_row_float_mask_fully_masked_witness :=
  stream_row_float_mask_fully_masked 1 2 (/ 2) causal w_m w_qs w_ks w_vs 0 ltac:(w_lt) w_row0_masked.

Definition row_dbias_is_derive_witness :=
  row_dbias_is_derive 1 2 w_all w_bias w_ss w_vs w_dO 0 eq_refl ltac:(w_lt).

Definition row_dV_bias_is_derive_witness :=
  row_dV_bias_is_derive 2 w_all w_bias w_ss w_vs w_dO 1 0 eq_refl ltac:(w_lt) ltac:(w_lt).

Definition row_dK_bias_is_derive_witness :=
  row_dK_bias_is_derive 2 w_all w_bias (/ 2) w_q w_ks w_vs w_dO 0 1 eq_refl ltac:(w_lt) ltac:(w_lt).

Definition row_dQ_bias_is_derive_witness :=
  row_dQ_bias_is_derive 2 w_vis w_bias (/ 2) w_q w_ks w_vs w_dO 1 ltac:(lra) eq_refl w_ks_len ltac:(w_lt).

Definition attention_dbias_is_derive_witness :=
  attention_dbias_is_derive 1 2 (/ 2) causal w_bias2 w_qs w_ks w_vs w_dOs eq_refl 1 0 ltac:(w_lt) ltac:(w_lt).

Definition attention_dbias_fully_masked_witness :=
  attention_dbias_fully_masked 1 2 (/ 2) w_strict w_bias2 w_qs w_ks w_vs w_dOs 0 1 ltac:(w_lt) w_row0_strict.
