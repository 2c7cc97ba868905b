(** * Row-sparse gradients: when updating only the touched rows is the dense step.

    An embedding's gradient is zero outside the rows of the batch's tokens
    ([nn.Embedding(sparse=True)] gives only those rows).  A table of
    parameters is [W : nat -> nat -> T] (row, column), with per-element
    optimizer state [S : nat -> nat -> St] and gradient [G]; the rules of
    [UpdateRules] are elementwise, so the dense step maps the rule over every
    element, and the lazy (row-sparse) step maps it over the elements of the
    rows in [rows] only, leaving the others and their state as they are.

    - [rows_update_eq_dense]: for any rule that leaves a value and its state
      unchanged under a zero gradient, the two agree whenever the gradient is
      zero outside [rows].
    - [sgd_sparse_rows_eq]: plain SGD over [R] (no momentum, weight decay 0)
      is such a rule: the row update of [InBackwardOptimizer._update_sparse]
      is the dense step.  [sgd_zero_grad_fixed_R] is the one-element fact.
    - [momentum_zero_row_changes], [adamw_zero_row_changes]: with momentum,
      or for AdamW (even with weight decay 0: the first moment decays and
      still moves the weight), an element with zero gradient changes, so
      [lazy_momentum_neq_dense] / [lazy_adamw_neq_dense]: the lazy update is
      not the dense step.

    Over [R]; the floats (the sign of a zero, the order in which duplicate
    token rows are summed) are argued and tested in
    [ojas_ref/optim/in_backward.py], not proved here. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import ScalarOps InBackward.UpdateRules.
Import ListNotations.
Open Scope R_scope.

Definition mem_row (r : nat) (rows : list nat) : bool := existsb (Nat.eqb r) rows.

Lemma mem_row_In : forall r rows, mem_row r rows = false -> ~ In r rows.
Proof.
  intros r rows H Hin; unfold mem_row in H.
  assert (existsb (Nat.eqb r) rows = true) as Ht.
  { apply existsb_exists; exists r; split; [exact Hin|apply Nat.eqb_refl]. }
  congruence.
Qed.

Section Rows.
Context {T St : Type}.
Variable zero : T.
Variable update : T -> St -> T -> T * St.

(** Every element stepped with its gradient. *)
Definition dense_update (W : nat -> nat -> T) (S : nat -> nat -> St) (G : nat -> nat -> T)
    : nat -> nat -> T * St :=
  fun r j => update (W r j) (S r j) (G r j).

(** Only the elements of the rows in [rows]; the others keep value and state. *)
Definition rows_update (rows : list nat) (W : nat -> nat -> T) (S : nat -> nat -> St)
    (G : nat -> nat -> T) : nat -> nat -> T * St :=
  fun r j => if mem_row r rows then update (W r j) (S r j) (G r j) else (W r j, S r j).

Theorem rows_update_eq_dense :
  (forall x s, update x s zero = (x, s)) ->
  forall rows W S G,
  (forall r j, ~ In r rows -> G r j = zero) ->
  forall r j, rows_update rows W S G r j = dense_update W S G r j.
Proof.
  intros Hfix rows W S G Hzero r j; unfold rows_update, dense_update.
  destruct (mem_row r rows) eqn:Hm; [reflexivity|].
  rewrite (Hzero r j (mem_row_In r rows Hm)), Hfix; reflexivity.
Qed.

End Rows.

(** ** Plain SGD *)

Lemma sgd_zero_grad_fixed_R : forall (c : sgd_config R) p buf,
  sgd_momentum c = None -> sgd_weight_decay c = 0 ->
  sgd_update R_opt_ops c p buf 0 = (p, buf).
Proof.
  intros c p buf Hm Hwd; rewrite sgd_update_R; cbv zeta; rewrite Hm, Hwd.
  f_equal; ring.
Qed.

(** SGD without momentum and weight decay, with a gradient zero outside
    [rows]: updating the rows of [rows] only is the dense step (values and
    the (absent) momentum buffers). *)
Theorem sgd_sparse_rows_eq : forall (c : sgd_config R),
  sgd_momentum c = None -> sgd_weight_decay c = 0 ->
  forall rows (W : nat -> nat -> R) (S : nat -> nat -> option R) (G : nat -> nat -> R),
  (forall r j, ~ In r rows -> G r j = 0) ->
  forall r j, rows_update (sgd_update R_opt_ops c) rows W S G r j
              = dense_update (sgd_update R_opt_ops c) W S G r j.
Proof.
  intros c Hm Hwd rows W S G Hz r j.
  apply (rows_update_eq_dense 0); [|exact Hz].
  intros x s; apply sgd_zero_grad_fixed_R; assumption.
Qed.

(** ** Momentum and AdamW: a zero-gradient element still changes *)

Definition momentum_cex : sgd_config R := mk_sgd_config 1 (Some (1/2)) 0 0 false.

Lemma momentum_zero_row_changes :
  fst (sgd_update R_opt_ops momentum_cex 0 (Some 1) 0) <> 0.
Proof. rewrite sgd_update_R; cbn; lra. Qed.

Definition adamw_cex : adamw_config R := mk_adamw_config 1 (1/2) (1/2) 1 0.

(** Weight decay 0, first moment 1, second 0: the step of a zero gradient
    moves the weight from 1 to 0. *)
Lemma adamw_zero_row_changes :
  fst (adamw_update R_opt_ops adamw_cex 1 (mk_adam_state 0 1 0) 0) <> 1.
Proof.
  unfold adamw_update; rewrite lerp_R;
    cbn [R_opt_ops oo_sc oo_fma oo_sqrt oo_pow R_ops sc_add sc_sub sc_mul sc_div sc_one sc_zero
         adamw_cex aw_lr aw_beta1 aw_beta2 aw_eps aw_weight_decay ad_step ad_m ad_v fst].
  replace ((1 - 1 / 2) * 0 * 0 + 0 * (1 / 2)) with 0 by ring.
  rewrite sqrt_0.
  replace (0 / sqrt (1 - (1 / 2) ^ 1)) with 0 by (unfold Rdiv; ring).
  cbn [pow]. lra.
Qed.

(** The lazy update (only the rows with a gradient) is not the dense step:
    one row, one column, the gradient zero everywhere (so zero outside the
    empty set of rows). *)
Theorem lazy_momentum_neq_dense :
  exists rows (W : nat -> nat -> R) (S : nat -> nat -> option R) G,
    (forall r j, ~ In r rows -> G r j = 0) /\
    rows_update (sgd_update R_opt_ops momentum_cex) rows W S G 0%nat 0%nat
    <> dense_update (sgd_update R_opt_ops momentum_cex) W S G 0%nat 0%nat.
Proof.
  exists [], (fun _ _ => 0), (fun _ _ => Some 1), (fun _ _ => 0); split; [reflexivity|].
  unfold rows_update, dense_update; cbn [mem_row existsb].
  intro H; apply momentum_zero_row_changes; rewrite <- H; reflexivity.
Qed.

Theorem lazy_adamw_neq_dense :
  exists rows (W : nat -> nat -> R) (S : nat -> nat -> adam_state R) G,
    (forall r j, ~ In r rows -> G r j = 0) /\
    rows_update (adamw_update R_opt_ops adamw_cex) rows W S G 0%nat 0%nat
    <> dense_update (adamw_update R_opt_ops adamw_cex) W S G 0%nat 0%nat.
Proof.
  exists [], (fun _ _ => 1), (fun _ _ => mk_adam_state 0 1 0), (fun _ _ => 0); split; [reflexivity|].
  unfold rows_update, dense_update; cbn [mem_row existsb].
  intro H; apply adamw_zero_row_changes; rewrite <- H; reflexivity.
Qed.
