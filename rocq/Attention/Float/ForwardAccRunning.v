(** * Forward attention with the accumulating P.V, a running (a-posteriori) bound.

    HEADER *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.RunningAccError.
Import ListNotations.
Open Scope R_scope.

Section KernelRunning.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** ** The constants of the running fold

    [gR g = (1 + g) (1 + u) (1 + ue) - 1]: the growth per tile of the errors already in
    [acc] ([rnd (acc * alpha)] then the accumulating dot); [GR k m = 1 + (1 + gR)^k
    (H_pv 2^(u (m - m0)) - 1)]: the factor of [A] (the stored weights' error, and the
    [2^(u (m' - m))] of each rescale, telescoping); [RR k = k (1 + gR)^k dRR] the
    absolute (underflow) term, with [Ep] the a-priori bound of [|acc|] (from
    [acc_kernel_inv]'s invariant). *)
Definition gR (g : R) : R := (1 + g) * (1 + u) * (1 + ue) - 1.
Definition GR (K g m0 : R) (k : nat) (m : R) : R :=
  1 + (1 + gR g) ^ k * (H_pv M K * Rpower 2 (u * (m - m0)) - 1).
Definition Ep (K g ga V : R) (n N Tt : nat) : R :=
  H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K) * (INR N * V) + RkA M K g ga V n N Tt Tt.
Definition dRR (K g ga V : R) (n N Tt : nat) : R :=
  (1 + g) * ((1 + u) * ee * Ep K g ga V n N Tt + ea + ((1 + us) * ee + es) * (INR n * V)) + ga.
Definition RR (K g ga V : R) (n N Tt k : nat) : R := INR k * (1 + gR g) ^ k * dRR K g ga V n N Tt.

Lemma gR_nonneg : forall g, 0 <= g -> 0 <= gR g.
Proof.
  intros g Hg; unfold gR; pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M).
  assert (1 <= (1 + g) * (1 + u)) by nra. nra.
Qed.

Lemma Ep_nonneg : forall K g ga V n N Tt, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= Ep K g ga V n N Tt.
Proof.
  intros K g ga V n N Tt HK Hg Hga HV; unfold Ep.
  pose proof (H_pv_ge_1 M K HK); pose proof (cgA_ge_1 M g Hg); pose proof (Rpower_pos (u * K)).
  pose proof (RkA_nonneg M K g ga V n N Tt Tt HK Hg Hga HV).
  assert (1 <= cgA M g ^ Tt) by (apply pow_R1_Rle; lra).
  assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra.
Qed.

Lemma dRR_nonneg : forall K g ga V n N Tt, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= dRR K g ga V n N Tt.
Proof.
  intros K g ga V n N Tt HK Hg Hga HV; unfold dRR.
  pose proof (Ep_nonneg K g ga V n N Tt HK Hg Hga HV).
  pose proof (ff_u_nonneg A_); pose proof (ff_u_nonneg S_); pose proof (ff_eta_nonneg S_);
  pose proof (ff_eta_nonneg A_); pose proof (mp_eta_e_nonneg M).
  assert (0 <= INR n * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= (1 + u) * ee * Ep K g ga V n N Tt) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= ((1 + us) * ee + es) * (INR n * V)) by (apply Rmult_le_pos; nra).
  nra.
Qed.

Lemma RR_nonneg : forall K g ga V n N Tt k, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= RR K g ga V n N Tt k.
Proof.
  intros; unfold RR; pose proof (dRR_nonneg K g ga V n N Tt); pose proof (gR_nonneg g); pose proof (pos_INR k).
  assert (0 <= (1 + gR g) ^ k) by (apply pow_le; lra).
  apply Rmult_le_pos; [nra | lra].
Qed.

Lemma GR_ge_1 : forall K g m0 k m, 0 <= K -> 0 <= g -> m0 <= m -> 1 <= GR K g m0 k m.
Proof.
  intros K g m0 k m HK Hg Hm; unfold GR.
  pose proof (H_pv_ge_1 M K HK); pose proof (gR_nonneg g Hg); pose proof (ff_u_nonneg A_).
  assert (1 <= (1 + gR g) ^ k) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (0 <= H_pv M K * Rpower 2 (u * (m - m0)) - 1) by nra.
  nra.
Qed.

(** ** One tile into the accumulator, keeping [|x - X|] and [|X|] apart *)

Section Tile.

Variable Key : Type.
Variable sc : Key -> R.
Variable vis : Key -> bool.
Variable val : Key -> nat -> R.
Variable accf : R -> list R -> list R -> R.
Variables (n : nat) (g ga K V : R) (c : nat).

Hypothesis Hm : acc_dot_model accf n g ga.
Hypothesis HK : 0 <= K.
Hypothesis HV : 0 <= V.

(** [tile_acc_masked] with the accumulating dot's [g_rel] charged on [|X|] (the exact
    signed prefix) and on the tile's weights, not on [x]'s error bound. *)
Lemma tile_acc_run : forall x X m' tl,
  length tl = n -> fmt m' ->
  (forall k, In k tl -> vis k = true -> fmt (sc k) /\ sc k <= m' /\ m' - sc k <= K /\ Rabs (val k c) <= V) ->
  Rabs (accf x (map (fun k => ff_rnd S_ (kweight M Key sc vis m' k)) tl) (map (fun k => val k c) tl)
        - (X + exact_pv m' (kpairs Key sc vis val c tl)))
  <= (1 + g) * Rabs (x - X) + g * Rabs X + (H_pv M K - 1) * exact_pv_abs m' (kpairs Key sc vis val c tl)
     + g * H_pv M K * exact_pv_abs m' (kpairs Key sc vis val c tl)
     + ((1 + g) * (((1 + us) * ee + es) * (INR n * V)) + ga).
Proof.
  intros x X m' tl Hn Fm' Hk.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  set (c0 := (1 + us) * ee + es).
  assert (Hc0 : 0 <= c0) by (unfold c0; nra).
  set (f := fun k => ff_rnd S_ (kweight M Key sc vis m' k)).
  set (W := fun k => if vis k then Rpower 2 (sc k - m') else 0).
  set (vm := fun k => if vis k then val k c else 0).
  assert (Hf0 : forall k, vis k = false -> f k = 0).
  { intros k Ek; unfold f, kweight; rewrite Ek; apply (ff_rnd_id S_ 0 (ff_fmt_0 S_)). }
  destruct (weighted_close f W vm (H_pv M K) c0 tl) as [Hw1 Hw2].
  { intros k _; unfold W; destruct (vis k); [left; apply Rpower_pos | lra]. }
  { intros k Hin; unfold W; destruct (vis k) eqn:Ev.
    - destruct (Hk k Hin Ev) as [Fs [H1 [H2 _]]].
      unfold f, kweight; rewrite Ev; unfold H_pv, c0.
      apply stored_weight_close; [apply Rpower_pos | apply tile_E_ge_1, HK |].
      apply weight_close; assumption.
    - rewrite (Hf0 k Ev), Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l; exact Hc0. }
  assert (ED : dot_R (map f tl) (map (fun k => val k c) tl) = rsum (map (fun k => f k * vm k) tl)).
  { unfold dot_R; rewrite combine_map_both, map_map; cbn [fst snd]; f_equal; apply map_ext; intros k.
    unfold vm; destruct (vis k) eqn:Ev; [reflexivity | rewrite (Hf0 k Ev); ring]. }
  assert (EA : dot_abs (map f tl) (map (fun k => val k c) tl) = rsum (map (fun k => Rabs (f k * vm k)) tl)).
  { unfold dot_abs; rewrite combine_map_both, map_map; cbn [fst snd]; f_equal; apply map_ext; intros k.
    unfold vm; destruct (vis k) eqn:Ev; [reflexivity | rewrite (Hf0 k Ev), !Rmult_0_l; reflexivity]. }
  assert (EY : rsum (map (fun k => W k * vm k) tl) = exact_pv m' (kpairs Key sc vis val c tl)).
  { unfold exact_pv, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); ring. }
  assert (ET : rsum (map (fun k => W k * Rabs (vm k)) tl) = exact_pv_abs m' (kpairs Key sc vis val c tl)).
  { unfold exact_pv_abs, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); [reflexivity | rewrite Rabs_R0; ring]. }
  assert (Hv : rsum (map (fun k => Rabs (vm k)) tl) <= INR n * V).
  { rewrite <- Hn, <- ost_rsum_const; apply bw_rsum_le; intros k Hin.
    unfold vm; destruct (vis k) eqn:Ev; [apply (Hk k Hin Ev) | rewrite Rabs_R0; exact HV]. }
  assert (HT : 0 <= exact_pv_abs m' (kpairs Key sc vis val c tl))
    by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
  assert (E1 : c0 * rsum (map (fun k => Rabs (vm k)) tl) <= c0 * (INR n * V)) by (apply Rmult_le_compat_l; lra).
  pose proof (adm_err _ _ _ _ Hm x (map f tl) (map (fun k => val k c) tl)
                ltac:(rewrite map_length; exact Hn) ltac:(rewrite map_length; exact Hn)) as He.
  change (rsum (map (fun xy => fst xy * snd xy) (combine (map f tl) (map (fun k => val k c) tl))))
    with (dot_R (map f tl) (map (fun k => val k c) tl)) in He.
  change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine (map f tl) (map (fun k => val k c) tl))))
    with (dot_abs (map f tl) (map (fun k => val k c) tl)) in He.
  rewrite ED, EA in He; rewrite EY, ET in Hw1; rewrite ET in Hw2.
  set (y := accf x (map f tl) (map (fun k => val k c) tl)) in *.
  set (D := rsum (map (fun k => f k * vm k) tl)) in *.
  set (Aa := rsum (map (fun k => Rabs (f k * vm k)) tl)) in *.
  set (Yt := exact_pv m' (kpairs Key sc vis val c tl)) in *.
  set (Tt := exact_pv_abs m' (kpairs Key sc vis val c tl)) in *.
  set (Sv := rsum (map (fun k => Rabs (vm k)) tl)) in *.
  assert (Hx : Rabs x <= Rabs X + Rabs (x - X))
    by (replace x with ((x - X) + X) at 1 by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (y - (X + Yt)) with ((y - (x + D)) + (x - X) + (D - Yt)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  assert (E2 : g * (Rabs x + Aa) <= g * (Rabs X + Rabs (x - X) + (H_pv M K * Tt + c0 * (INR n * V))))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

End Tile.
End KernelRunning.
