(** * Witnesses of Attention/StreamError.v (ojas_ref/verification/proof_audit.py): the model
    without underflow at float32's precision of Witnesses/LinearCrossEntropy/LseError.v
    ([rnd] Flocq's round-to-nearest-even in FLX precision 24, [u = 2^-24]; [rexp] the exact
    [exp] rounded to it, [ue = 2^-24]; [rln] the exact [ln] rounded to float32); the keys
    [(Some 0, [1; 2])] and [(Some 1, [3; 4])] (in one tile, or one tile each), output
    coordinate [c = 1] bounded by [V = 4]; the attention row of [q = [1; 2]] against the
    keys [[1; 1]; [0; 2]] with scale [1/2], [|q . k| <= A = 4], causal row 0 in tiles of
    one key. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import ScalarOps Vector VectorFacts FloatModel.NoUnderflow
  Attention.OnlineSoftmax Attention.StreamError Witnesses.LinearCrossEntropy.LseError.
Import ListNotations.
Open Scope R_scope.

Definition w_keys : list key := [(Some 0, [1; 2]); (Some 1, [3; 4])].
Definition w_vs : list (list R) := [[1; 2]; [3; 4]].
Definition w_q : list R := [1; 2].
Definition w_ks : list (list R) := [[1; 1]; [0; 2]].

Lemma w_V_keys : forall k, In k w_keys -> Rabs (nth 1 (snd k) 0) <= 4.
Proof. intros k [<- | [<- | []]]; cbn; apply Rabs_le; lra. Qed.

Lemma w_V_tiles : forall k, In k (concat [[(Some 0, [1; 2])]; [(Some 1, [3; 4])]]) -> Rabs (nth 1 (snd k) 0) <= 4.
Proof. exact w_V_keys. Qed.

Lemma w_V_rows : forall j, (j < length w_vs)%nat -> Rabs (nth 1 (nth j w_vs []) 0) <= 4.
Proof. intros j Hj; cbn in Hj; destruct j as [|[|j]]; cbn; try lia; apply Rabs_le; lra. Qed.

Lemma w_ks_len : forall k, In k w_ks -> length k = length w_q.
Proof. intros k [<- | [<- | []]]; reflexivity. Qed.

Lemma w_A : forall k, In k w_ks -> rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine w_q k)) <= 4.
Proof.
  intros k [<- | [<- | []]]; unfold rsum; cbn;
    repeat rewrite Rabs_pos_eq by lra; lra.
Qed.

Lemma w_q_u : INR (length w_q) * wu < 1.
Proof. rewrite wu_val; simpl; lra. Qed.

Definition stream_error_bound_witness :=
  stream_error_bound w_rnd w_rexp w_rln wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel
    2 1 4 [[(Some 0, [1; 2])]; [(Some 1, [3; 4])]] wu_lt_1 (w_beta 2 ltac:(lia)) ltac:(lra) w_V_tiles.

Definition stream_keywise_error_bound_witness :=
  stream_keywise_error_bound w_rnd w_rexp w_rln wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel
    2 1 4 w_keys wu_lt_1 (w_beta 2 ltac:(lia)) ltac:(lra) w_V_keys.

Definition stream_row_error_bound_witness :=
  stream_row_error_bound w_rnd w_rexp w_rln wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel
    2 2 1 4 w_keys wu_lt_1 (w_beta 2 ltac:(lia)) ltac:(lra) w_V_keys.

Definition attention_row_error_bound_witness :=
  attention_row_error_bound w_rnd w_rexp w_rln wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rnd_idem
    1 2 1 4 4 (/ 2) (causal 0) w_q w_ks w_vs eq_refl ltac:(cbn; lia) w_ks_len w_q_u wu_lt_1
    (w_beta 2 ltac:(lia)) w_V_rows w_A.
