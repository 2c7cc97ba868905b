(** * Witnesses of InBackward/ChunkedHead.v (ojas_ref/verification/proof_audit.py): a head of
    [Vn = 4] rows in the code's vocabulary chunks of [vc = 2] rows ([[0; 1]], [[2; 3]]), the
    hidden-state gradient at [h = 4], then the rest of the backward: one earlier layer's
    parameter [5], contributed to (reading itself) and hooked.  The values of the rows are in
    [R] with the SGD step of Witnesses/InBackward/Equivalence.v, or (for
    [chunked_head_sgd_eq_standard]) rows of [R] stepped entrywise by SGD. *)

From Coq Require Import Reals List Bool.
From Ojas Require Import InBackward.Events InBackward.Equivalence InBackward.UpdateRules InBackward.ChunkedHead.
From Ojas Require Import Witnesses.InBackward.Equivalence.
Import ListNotations.
Open Scope R_scope.

Definition w_chunk : nat -> list nat := vocab_chunk 2 4.
Definition w_ks : list nat := seq 0 (n_chunks 2 4).

(** The rest of the backward: the layer below the head, its parameter [5]. *)
Definition w_rest {V G : Type} (f : list V -> G) : list (event V G) := [Contribute 5 [5%nat] f; Hook 5].

Lemma w_rest_ok : forall {V G : Type} (f : list V -> G), rest_ok 4 w_chunk w_ks (w_rest f).
Proof.
  intros V G f; split; [| split].
  - split; intros pre p post E;
      (destruct pre as [| a [| b pre]]; cbn in E; injection E as E1 E2; subst;
       [discriminate | reflexivity | destruct pre; discriminate]).
  - intros p Hp; cbn in Hp |- *; rewrite orb_false_r in *; exact Hp.
  - intros p [-> | (k & Hk & Hp)]; [split; reflexivity |].
    cbn in Hk; destruct Hk as [<- | [<- | []]]; cbn in Hp;
      destruct Hp as [<- | [<- | []]]; split; reflexivity.
Qed.

Lemma w_not_h : forall k, In k w_ks -> ~ In 4%nat (w_chunk k).
Proof. intros k _; apply vocab_chunk_not_h. Qed.

(** The contributions (any functions of the values read): the sums of the rows read. *)
Definition w_dh (k : nat) (vs : list R) : R := fold_right Rplus 0 vs.
Definition w_dw (k v : nat) (vs : list R) : R := fold_right Rplus 0 vs.

Definition chunked_head_hypotheses_witness :=
  chunked_head_hypotheses 4 w_chunk w_dh w_dw w_ks (w_rest (fun _ => 1)) w_not_h
    (vocab_chunks_disjoint 2 4 0 _) (w_rest_ok _).

Definition chunked_head_eq_standard_witness :=
  chunked_head_eq_standard Rplus w_update 4 w_chunk w_dh w_dw w_ks (w_rest (fun _ => 1)) w_st
    (fun _ => eq_refl) w_not_h (vocab_chunks_disjoint 2 4 0 _) (w_rest_ok _) 1.

Definition chunked_head_dh_first_eq_standard_witness :=
  chunked_head_dh_first_eq_standard Rplus w_update 4 w_chunk w_dw w_ks (fold_right Rplus 0)
    (w_rest (fun _ => 1)) w_st (fun _ => eq_refl) w_not_h (vocab_chunks_disjoint 2 4 0 _) (w_rest_ok _) 1.

Definition chunked_head_code_eq_standard_witness :=
  chunked_head_code_eq_standard Rplus w_update 2 4 w_dh w_dw (w_rest (fun _ => 1)) w_st
    (fun _ => eq_refl) (w_rest_ok _) 1.

Definition chunked_head_dh_first_code_eq_standard_witness :=
  chunked_head_dh_first_code_eq_standard Rplus w_update 2 4 (fold_right Rplus 0) w_dw
    (w_rest (fun _ => 1)) w_st (fun _ => eq_refl) (w_rest_ok _) 1.

(** Rows of [R] (functions of the column): the contributions the entrywise sums of the rows read. *)
Definition w_row_sum (vs : list (nat -> R)) (j : nat) : R := fold_right (fun w acc => w j + acc) 0 vs.

Definition chunked_head_sgd_eq_standard_witness :=
  chunked_head_sgd_eq_standard R_opt_ops 2 4 (fun _ => w_sgd) (fun _ => w_row_sum) (fun _ _ => w_row_sum)
    (w_rest (fun _ _ => 1)) (mk_store (fun _ _ => 1) (fun _ _ => None) (fun _ => None))
    (fun _ => eq_refl) (w_rest_ok _) 1.
