(** * Witnesses of Reversible/APosteriori.v (ojas_ref/verification/proof_audit.py).

    Generic theorems: the state [R], layers [x |-> x + 1] inverted by [y |-> y - 1], the
    distance [|a - b| <= e], the per-layer hypothesis [K >= 1, r >= 0, d >= 0], the local
    backward [(d, 0)].  The code's instance: one coupling layer of identity residual
    functions on vectors of length 1, rounded by Flocq's round-to-nearest-even in
    precision 24 ([w_rnd] of the FloatError witnesses), input [([1], [2])], computed output
    [([3], [5])] (exact: small integers), exact functions [F = G = id] with [LF = LG = 1],
    so [K = 4], [r = d = 0]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.NoUnderflow Reversible.Coupling Reversible.Stack
  Reversible.Gradient Reversible.FloatError Reversible.APosteriori Witnesses.Reversible.FloatError.
Import ListNotations.
Open Scope R_scope.

(** ** Generic theorems *)

Definition w_fwd (_ : unit) (x : R) : R := x + 1.
Definition w_inv (_ : unit) (y : R) : R := y - 1.
Definition w_close (e : R) (a b : R) : Prop := Rabs (a - b) <= e.
Definition w_hyp (_ : unit) (c : layer_consts) (_ _ : R) : Prop := 1 <= lc_K c /\ 0 <= lc_r c /\ 0 <= lc_d c.

Lemma w_step : forall l c a x E, w_hyp l c a x -> 0 <= E ->
  w_close E a (w_fwd l x) -> w_close (lc_K c * E + (lc_r c + lc_d c)) (w_inv l a) x.
Proof.
  unfold w_hyp, w_close, w_fwd, w_inv; intros l c a x E (HK & Hr & Hd) HE H.
  replace (a - 1 - x) with (a - (x + 1)) by ring.
  assert (1 * E <= lc_K c * E) by (apply Rmult_le_compat_r; lra); lra.
Qed.

Lemma w_nonneg : forall l c a x, w_hyp l c a x -> 0 <= lc_K c /\ 0 <= lc_r c /\ 0 <= lc_d c.
Proof. unfold w_hyp; intros; lra. Qed.

Definition w_c : layer_consts := mk_consts 1 0 0.

Lemma w_ok : apost_ok w_fwd w_inv w_hyp [tt] [w_c] 0 1.
Proof. cbn; unfold w_hyp; cbn; repeat split; lra. Qed.

Lemma w_close0 : w_close 0 1 (run_forward w_fwd [tt] 0).
Proof. unfold w_close; cbn; unfold w_fwd; rewrite Rplus_0_l; unfold Rminus; rewrite Rplus_opp_r, Rabs_R0; lra. Qed.

Definition apost_recon_error_witness :=
  apost_recon_error w_fwd w_inv w_close w_hyp w_step w_nonneg [tt] [w_c] 0 1 0 w_ok (Rle_refl 0) w_close0.

Lemma w_products : forall p, In p (prefix_products (map lc_K [w_c])) -> p <= 1.
Proof. cbn; intros p [<- | [<- | []]]; lra. Qed.

Lemma w_close_mono : forall e e', e <= e' -> forall s t, w_close e s t -> w_close e' s t.
Proof. unfold w_close; intros; lra. Qed.

Definition apost_recon_error_small_products_witness :=
  apost_recon_error_small_products w_fwd w_inv w_close w_hyp w_step w_nonneg [tt] [w_c] 0 1 0 1
    w_ok (Rle_refl 0) w_products w_close0 w_close_mono.

Definition w_vjp (_ : unit) (_ : R) (d : R) : R * R := (d, 0).
Definition w_q : grad_consts := mk_gconsts 1 0 0 0.

Lemma w_grad_ok : grad_ok w_fwd w_inv w_vjp w_close w_close w_close w_hyp [tt] [w_c] [w_q] 0 1 1 0 0.
Proof.
  cbn; unfold w_hyp, vjp_hyp, w_close; cbn; split; [lra | split; [| exact I]].
  intros a d' _ Hd; split; [lra | unfold Rminus; rewrite Rplus_opp_r, Rabs_R0; lra].
Qed.

Lemma w_close_refl : forall e x, 0 <= e -> w_close e x x.
Proof. unfold w_close; intros; unfold Rminus; rewrite Rplus_opp_r, Rabs_R0; lra. Qed.

Definition apost_grad_error_witness :=
  apost_grad_error w_fwd w_inv w_vjp w_close w_close w_close w_hyp w_step w_nonneg [tt] [w_c] [w_q] 0 1 1 1 0 0
    w_grad_ok (Rle_refl 0) w_close0 (w_close_refl 0 1 (Rle_refl 0)).

(** ** The floating-point coupling stack on vectors *)

Local Instance w_prec : Prec_gt_0 24 := eq_refl.

(** Small integers are float32 numbers: [w_rnd] leaves them unchanged. *)
Lemma w_rnd_int : forall (z : Z) x, x = IZR z -> (Z.abs z < 2 ^ 24)%Z -> w_rnd x = x.
Proof.
  intros z x -> Hz; unfold w_rnd, flx_rnd; apply round_generic; [apply valid_rnd_N |].
  apply generic_format_FLX; exists (Float radix2 z 0).
  all: try (unfold F2R; simpl; ring); simpl; lia.
Qed.

Definition w_vg : group_ops (list R) := list_group (rnd_group w_rnd).
Definition w_x : list R * list R := ([1], [2]).
Definition w_y : list R * list R := ([3], [5]).

Lemma w_layer_fwd : layer_forward w_vg w_vlayer w_x = w_y.
Proof.
  cbn; rewrite (w_rnd_int 3 (1 + 2)) by (lra || lia); rewrite (w_rnd_int 5 (2 + (1 + 2))) by (lra || lia).
  unfold w_x, w_y; f_equal; f_equal; lra.
Qed.

Lemma w_stack_fwd : stack_forward w_vg [w_vlayer] w_x = w_y.
Proof. exact w_layer_fwd. Qed.

Lemma w_layer_inv : layer_inverse w_vg w_vlayer w_y = w_x.
Proof.
  cbn; rewrite (w_rnd_int 2 (5 - 3)) by (lra || lia); rewrite (w_rnd_int 1 (3 - (5 - 3))) by (lra || lia).
  unfold w_x, w_y; f_equal; f_equal; lra.
Qed.

Lemma w_exact_inv : exact_inverse (fun v => v) (fun v => v) w_y = w_x.
Proof. cbn; unfold w_x; f_equal; f_equal; lra. Qed.

Lemma w_vlip_at : forall n a b, vlip_at n 1 (fun v => v) a b.
Proof. intros n a b e He H; rewrite <- (Rplus_0_r (1 * e)); apply (w_vlip n e a b He H). Qed.

Definition w_vc : layer_consts := mk_consts 4 0 0.

Lemma w_apost_hyp : coupling_apost_hyp w_rnd 1 (fun v => v) (fun v => v) 1 1 w_vlayer w_vc w_y w_x.
Proof.
  unfold coupling_apost_hyp; fold w_vg; rewrite w_layer_fwd, w_layer_inv, w_exact_inv.
  cbn [lc_K lc_r lc_d w_vc].
  refine (conj _ (conj _ (conj _ (conj _ (conj _ (conj _ (conj _ (conj _ _))))))));
    try lra; try apply w_vlip_at; apply w_vclose2; try lra; reflexivity.
Qed.

Lemma w_vclose0 : vclose2 1 0 w_y (layer_forward w_vg w_vlayer w_x).
Proof. rewrite w_layer_fwd; apply w_vclose2; [lra | reflexivity | reflexivity]. Qed.

Definition coupling_step_apost_witness :=
  coupling_step_apost w_rnd 1 (fun v => v) (fun v => v) 1 1 w_vlayer w_vc w_y w_x 0
    w_apost_hyp (Rle_refl 0) w_vclose0.

Lemma w_vok : apost_ok (layer_forward w_vg) (layer_inverse w_vg) (coupling_apost_ok w_rnd 1)
  [w_vlayer] [w_vc] w_x w_y.
Proof. split; [exists (fun v => v), (fun v => v), 1, 1; exact w_apost_hyp | exact I]. Qed.

Lemma w_vclose_stack : vclose2 1 0 w_y (stack_forward w_vg [w_vlayer] w_x).
Proof. exact w_vclose0. Qed.

Definition vec_stack_recon_error_apost_witness :=
  vec_stack_recon_error_apost w_rnd 1 [w_vlayer] [w_vc] w_x w_y 0 w_vok (Rle_refl 0) w_vclose_stack.

Lemma w_vproducts : forall p, In p (prefix_products (map lc_K [w_vc])) -> p <= 4.
Proof. cbn; intros p [<- | [<- | []]]; lra. Qed.

Definition vec_stack_recon_error_apost_small_witness :=
  vec_stack_recon_error_apost_small w_rnd 1 [w_vlayer] [w_vc] w_x w_y 0 4 w_vok (Rle_refl 0) w_vproducts
    w_vclose_stack.

(** The local backward passes the cotangent on and has no parameter gradient. *)
Definition w_cvjp (_ : coupling_layer (list R)) (_ : list R * list R) (d : list R * list R)
  : (list R * list R) * R := (d, 0).

Lemma w_vgrad_ok : grad_ok (layer_forward w_vg) (layer_inverse w_vg) w_cvjp (vclose2 1) (vclose2 1) w_close
  (coupling_apost_ok w_rnd 1) [w_vlayer] [w_vc] [w_q] w_x w_y w_y 0 0.
Proof.
  split; [exists (fun v => v), (fun v => v), 1, 1; exact w_apost_hyp |].
  split; [| exact I].
  intros a d' _ Hd; cbn [w_cvjp fst snd gc_J gc_M gc_JP gc_MP w_q grad_bound]; split.
  - eapply vclose2_mono; [| exact Hd]; cbn; lra.
  - apply w_close_refl; cbn; lra.
Qed.

Definition vec_stack_grad_error_apost_witness :=
  vec_stack_grad_error_apost w_rnd 1 w_cvjp (vclose2 1) w_close [w_vlayer] [w_vc] [w_q] w_x w_y w_y w_y 0 0
    w_vgrad_ok (Rle_refl 0) w_vclose_stack (w_vclose2 1 0 w_y (Rle_refl 0) eq_refl eq_refl).
