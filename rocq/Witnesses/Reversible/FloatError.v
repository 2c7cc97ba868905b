(** * Witnesses of Reversible/FloatError.v (ojas_ref/verification/proof_audit.py): Flocq's
    round-to-nearest-even in precision 24 ([flx_rnd 24], [u = 2^-24]), identity residual
    functions (Lipschitz constant 1, no additive term), the input [(1, 2)] (scalars) or
    [([1], [2])] (vectors of length 1), one layer, and the inverse started at the computed
    output itself ([e = 0]). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.NoUnderflow Reversible.Coupling Reversible.Stack
  Reversible.Gradient Reversible.FloatError.
Import ListNotations.
Open Scope R_scope.

Definition w_rnd : R -> R := flx_rnd 24.
Definition w_u : R := bpow radix2 (- 24).

Lemma w_u_nonneg : 0 <= w_u.
Proof. apply bpow_ge_0. Qed.

Lemma w_u_le_1 : w_u <= 1.
Proof. unfold w_u; change 1 with (bpow radix2 0); apply bpow_le; lia. Qed.

Lemma w_rel : forall x, Rabs (w_rnd x - x) <= w_u * Rabs x.
Proof. exact (flx_rnd_rel 24 eq_refl). Qed.

(** [|rnd z| <= 2 |z|]. *)
Lemma w_rnd_abs : forall z, Rabs (w_rnd z) <= 2 * Rabs z.
Proof.
  intros z; pose proof (w_rel z); pose proof w_u_le_1; pose proof (Rabs_pos z).
  assert (w_u * Rabs z <= 1 * Rabs z) by (apply Rmult_le_compat_r; lra).
  pose proof (Rabs_triang (w_rnd z - z) z); replace (w_rnd z - z + z) with (w_rnd z) in * by ring.
  lra.
Qed.

(** ** Scalars *)

Lemma w_lip : approx_lipschitz 1 0 (fun x => x).
Proof. intros a b; lra. Qed.

Lemma w_close2 : forall e b, 0 <= e -> close2 e b b.
Proof. intros e b He; unfold close2; unfold Rminus; rewrite !Rplus_opp_r, Rabs_R0; lra. Qed.

Definition w_b : R * R := coupling_forward (rnd_group w_rnd) (fun x => x) (fun x => x) (1, 2).

Definition coupling_recon_error_witness :=
  coupling_recon_error w_rnd w_u w_u_nonneg w_rel (fun x => x) (fun x => x) 1 1 0 0 w_lip w_lip
    ltac:(lra) ltac:(lra) 1 2 w_b 0 (w_close2 0 w_b (Rle_refl 0)).

Definition coupling_recon_error_combined_witness :=
  coupling_recon_error_combined w_rnd w_u w_u_nonneg w_rel (fun x => x) (fun x => x) 1 1 0 0 w_lip w_lip
    ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) 1 2 w_b 0 (Rle_refl 0) (w_close2 0 w_b (Rle_refl 0)).

Definition w_layer : coupling_layer R := mk_layer (fun x => x) (fun x => x).

Lemma w_layers_ok : Forall (layer_ok 1 1 0 0) [w_layer].
Proof. apply Forall_cons; [split; apply w_lip | constructor]. Qed.

Definition w_sb : R * R := stack_forward (rnd_group w_rnd) [w_layer] (1, 2).

Definition stack_recon_error_witness :=
  stack_recon_error w_rnd w_u w_u_nonneg w_rel 1 1 0 0 ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra)
    [w_layer] (1, 2) w_sb 0 w_layers_ok (Rle_refl 0) (w_close2 0 w_sb (Rle_refl 0)).

(** The magnitudes along the forward pass: [|x1| = 1], [|x2| = |f x2| = 2],
    [|g y1| = |rnd 3| <= 6]. *)
Lemma w_bounds : forall l s,
  In (l, s) (combine [w_layer] (fst (forward_acts (layer_forward (rnd_group w_rnd)) [w_layer] (1, 2)))) ->
  Rabs (fst s) <= 1 /\ Rabs (snd s) <= 2 /\ Rabs (layer_f l (snd s)) <= 2 /\
  Rabs (layer_g l (fst (layer_forward (rnd_group w_rnd) l s))) <= 6.
Proof.
  intros l s [E | []]; injection E as <- <-; cbn.
  pose proof (w_rnd_abs (1 + 2)); rewrite (Rabs_right (1 + 2)) in H by lra.
  rewrite (Rabs_right 1), (Rabs_right 2) by lra; lra.
Qed.

Definition stack_recon_error_uniform_witness :=
  stack_recon_error_uniform w_rnd w_u w_u_nonneg w_rel 1 1 0 0 ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra)
    [w_layer] (1, 2) w_sb 0 1 2 2 6 w_layers_ok (Rle_refl 0) w_bounds (w_close2 0 w_sb (Rle_refl 0)).

(** ** Vectors of length 1 *)

Lemma w_vlip : forall n, vapprox_lipschitz n 1 0 (fun v => v).
Proof.
  intros n e a b He (La & Lb & H); repeat split; auto.
  intros i Hi; specialize (H i Hi); lra.
Qed.

Lemma w_vclose2 : forall n e b, 0 <= e -> length (fst b) = n -> length (snd b) = n -> vclose2 n e b b.
Proof.
  intros n e b He L1 L2; split; repeat split; auto;
    intros i _; unfold Rminus; rewrite Rplus_opp_r, Rabs_R0; exact He.
Qed.

Definition w_vb : list R * list R :=
  coupling_forward (list_group (rnd_group w_rnd)) (fun v => v) (fun v => v) ([1], [2]).

Definition vec_coupling_recon_error_witness :=
  vec_coupling_recon_error w_rnd w_u w_u_nonneg w_rel 1 (fun v => v) (fun v => v) 1 1 0 0
    (w_vlip 1) (w_vlip 1) ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) [1] [2] w_vb 0 (Rle_refl 0)
    eq_refl eq_refl (w_vclose2 1 0 w_vb (Rle_refl 0) eq_refl eq_refl).

Definition w_vlayer : coupling_layer (list R) := mk_layer (fun v => v) (fun v => v).

Lemma w_vlayers_ok : Forall (vlayer_ok 1 1 1 0 0) [w_vlayer].
Proof. apply Forall_cons; [split; apply w_vlip | constructor]. Qed.

Definition w_vsb : list R * list R := stack_forward (list_group (rnd_group w_rnd)) [w_vlayer] ([1], [2]).

Definition vec_stack_recon_error_witness :=
  vec_stack_recon_error w_rnd w_u w_u_nonneg w_rel 1 1 1 0 0 ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra)
    [w_vlayer] ([1], [2]) w_vsb 0 w_vlayers_ok eq_refl eq_refl (Rle_refl 0)
    (w_vclose2 1 0 w_vsb (Rle_refl 0) eq_refl eq_refl).

Lemma w_vnorm1 : forall x, vnorm [x] = Rabs x.
Proof. intros x; cbn; apply Rmax_left, Rabs_pos. Qed.

Lemma w_vbounds : forall l s,
  In (l, s) (combine [w_vlayer]
    (fst (forward_acts (layer_forward (list_group (rnd_group w_rnd))) [w_vlayer] ([1], [2])))) ->
  vnorm (fst s) <= 1 /\ vnorm (snd s) <= 2 /\ vnorm (layer_f l (snd s)) <= 2 /\
  vnorm (layer_g l (fst (layer_forward (list_group (rnd_group w_rnd)) l s))) <= 6.
Proof.
  intros l s [E | []]; injection E as <- <-; cbn [fst snd layer_f layer_g w_vlayer layer_forward
    coupling_forward list_group g_add rnd_group list_add].
  rewrite !w_vnorm1.
  pose proof (w_rnd_abs (1 + 2)); rewrite (Rabs_right (1 + 2)) in H by lra.
  rewrite (Rabs_right 1), (Rabs_right 2) by lra; lra.
Qed.

Definition vec_stack_recon_error_uniform_witness :=
  vec_stack_recon_error_uniform w_rnd w_u w_u_nonneg w_rel 1 1 1 0 0
    ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) [w_vlayer] ([1], [2]) w_vsb 0 1 2 2 6
    w_vlayers_ok eq_refl eq_refl (Rle_refl 0) w_vbounds (w_vclose2 1 0 w_vsb (Rle_refl 0) eq_refl eq_refl).

Definition vec_stack_recon_error_flx_witness :=
  vec_stack_recon_error_flx 24 eq_refl 1 1 1 0 0 [w_vlayer] ([1], [2]) w_vsb 0 1 2 2 6
    ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra)
    w_vlayers_ok eq_refl eq_refl (Rle_refl 0) w_vbounds (w_vclose2 1 0 w_vsb (Rle_refl 0) eq_refl eq_refl).
