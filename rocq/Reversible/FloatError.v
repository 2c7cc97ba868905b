(** * Floating-point reconstruction error of reversible coupling stacks.

    In floating point the coupling inverse does not reconstruct the
    input exactly.  This file bounds, for the rounding model of
    [FloatModel/NoUnderflow.v] (every [+] and [-] is rounded by [rnd] with
    [|rnd z - z| <= u |z|], i.e. no underflow), the distance between
    the activations the reversible backward pass reconstructs and the
    activations the (floating-point) forward pass computed, which are
    the ones ordinary backprop would have stored ([Gradient.v]).

    The algorithms are literally [coupling_forward rnd_group],
    [coupling_inverse rnd_group], [stack_inverse rnd_group] and
    [forward_acts (layer_forward rnd_group)]; [rnd_group] is the group
    record of [fl_ops] ([rnd_group_fl_ops]).

    The residual functions are the computed ones ([f], [g]: what the code
    evaluates, including its own rounding).  Of them we only assume
    "approximate Lipschitz" bounds
    [|f a - f b| <= LF |a - b| + dF] ([approx_lipschitz]); this holds with
    [dF = 2 eF] when [f] is within [eF] of an [LF]-Lipschitz exact
    function ([approx_lipschitz_of_approx]), and with [dF = 0] when the
    computed function itself is [LF]-Lipschitz.

    One layer ([coupling_recon_error]), input [(x1, x2)], stored output
    [(b1, b2)] = computed forward, inverse applied to [(a1, a2)] with
    [|a1 - b1|, |a2 - b2| <= e], result [(x1', x2')]:

      |x2' - x2| <= E2 := (1+u)((1+LG) e + dG + u(|x2| + |g b1|)) + u|x2|
      |x1' - x1| <= E1 := (1+u)(e + LF E2 + dF + u(|x1| + |f x2|)) + u|x1|

    and both are [<= K e + delta] with ([recon_combine])

      K     = (1+u)^2 (1+LF) (1+LG)                       [recon_factor]
      delta = (1 + (1+u) LF) ((1+u)(dG + u(X2 + PG)) + u X2)
              + (1+u)(dF + u(X1 + PF)) + u X1              [recon_term]

    where [X1 = |x1|], [X2 = |x2|], [PF = |f x2|], [PG = |g b1|].

    A stack of [N] layers ([stack_recon_error]): starting the inverse
    from a point within [e0] of the stored output, the reconstructed
    input is within [recon_bound] of the stored input, where
    [recon_bound] is the recurrence [err(l :: ls) = K err(ls) + delta_l];
    its closed form ([recon_bound_closed]) is
    [K^N e0 + sum_k K^k delta_k] (layer [k] counted from the input), and
    with [delta_k <= delta] for every layer ([stack_recon_error_uniform])

      err <= K^N e0 + delta (K^N - 1)/(K - 1)       ([geom K N] is the sum).

    Covered: scalars ([R * R] states: [coupling_recon_error],
    [stack_recon_error], [stack_recon_error_uniform]) and vectors (lists
    of one length [n], coordinatewise rounding, max-norm:
    [vec_coupling_recon_error], [vec_stack_recon_error],
    [vec_stack_recon_error_uniform]; there [X1 = ||x1||], ... are
    max-norms and the Lipschitz bounds are in the max-norm).
    [vec_stack_recon_error_flx] instantiates the model with Flocq's
    round-to-nearest in precision [p] ([u = 2^-p]).  Not covered:
    underflow (absolute error terms), overflow, NaN; the bound is a
    worst case (it grows like [((1+LF)(1+LG))^N] even for [u = 0] in
    [K], which is the known amplification of perturbations by the
    inverse, not a rounding effect). *)

From Coq Require Import List Reals Lra Lia.
From Flocq Require Import Core.Zaux Core.Raux.
From Ojas Require Import ScalarOps FloatModel.NoUnderflow Reversible.Coupling
  Reversible.Stack Reversible.Gradient.
Import ListNotations.
Open Scope R_scope.

(** ** The constants of the bound *)

(** Per-layer growth factor of the reconstruction error. *)
Definition recon_factor (u LF LG : R) : R := (1 + u) ^ 2 * (1 + LF) * (1 + LG).

(** Per-layer additive term: [X1], [X2] bound the layer input, [PF] the
    computed [f x2], [PG] the computed [g y1]. *)
Definition recon_term (u LF dF dG X1 X2 PF PG : R) : R :=
  (1 + (1 + u) * LF) * ((1 + u) * (dG + u * (X2 + PG)) + u * X2)
  + ((1 + u) * (dF + u * (X1 + PF)) + u * X1).

(** [f] is [L]-Lipschitz up to an additive [d]. *)
Definition approx_lipschitz (L d : R) (f : R -> R) : Prop :=
  forall a b, Rabs (f a - f b) <= L * Rabs (a - b) + d.

(** A computed function within [eF] of an [L]-Lipschitz one is
    [L]-Lipschitz up to [2 eF]. *)
Lemma approx_lipschitz_of_approx : forall (F fc : R -> R) L eF,
  (forall a b, Rabs (F a - F b) <= L * Rabs (a - b)) ->
  (forall v, Rabs (fc v - F v) <= eF) ->
  approx_lipschitz L (2 * eF) fc.
Proof.
  intros F fc L eF HL He a b.
  replace (fc a - fc b) with ((fc a - F a) + (F a - F b) - (fc b - F b)) by ring.
  pose proof (HL a b); pose proof (He a); pose proof (He b).
  eapply Rle_trans; [apply Rabs_triang|].
  eapply Rle_trans; [apply Rplus_le_compat; [apply Rabs_triang | rewrite Rabs_Ropp; apply Rle_refl]|].
  lra.
Qed.

(** Both component bounds of one layer are [<= K e + delta]. *)
Lemma recon_combine : forall u LF LG dF dG X1 X2 PF PG e,
  0 <= u -> 0 <= LF -> 0 <= LG -> 0 <= dF -> 0 <= dG ->
  0 <= X1 -> 0 <= X2 -> 0 <= PF -> 0 <= PG -> 0 <= e ->
  let E2 := (1 + u) * ((1 + LG) * e + dG + u * (X2 + PG)) + u * X2 in
  let E1 := (1 + u) * (e + LF * E2 + dF + u * (X1 + PF)) + u * X1 in
  E2 <= recon_factor u LF LG * e + recon_term u LF dF dG X1 X2 PF PG /\
  E1 <= recon_factor u LF LG * e + recon_term u LF dF dG X1 X2 PF PG.
Proof.
  intros u LF LG dF dG X1 X2 PF PG e Hu HLF HLG HdF HdG HX1 HX2 HPF HPG He E2 E1.
  unfold recon_factor, recon_term, E1, E2.
  set (c2 := (1 + u) * (dG + u * (X2 + PG)) + u * X2).
  set (c1 := (1 + u) * (dF + u * (X1 + PF)) + u * X1).
  assert (Hc2 : 0 <= c2) by (unfold c2; apply Rplus_le_le_0_compat;
    apply Rmult_le_pos; lra || (apply Rplus_le_le_0_compat; [lra | apply Rmult_le_pos; lra])).
  assert (Hc1 : 0 <= c1) by (unfold c1; apply Rplus_le_le_0_compat;
    apply Rmult_le_pos; lra || (apply Rplus_le_le_0_compat; [lra | apply Rmult_le_pos; lra])).
  assert (Hue : 0 <= u * e) by (apply Rmult_le_pos; lra).
  assert (HLFe : 0 <= LF * e) by (apply Rmult_le_pos; lra).
  assert (HLGe : 0 <= LG * e) by (apply Rmult_le_pos; lra).
  assert (HLFLGe : 0 <= LF * LG * e) by (repeat apply Rmult_le_pos; lra).
  assert (HuLF : 0 <= (1 + u) * LF * c2) by (repeat apply Rmult_le_pos; lra).
  split.
  - replace ((1 + u) * ((1 + LG) * e + dG + u * (X2 + PG)) + u * X2)
      with ((1 + u) * (1 + LG) * e + c2) by (unfold c2; ring).
    assert ((1 + u) * (1 + LG) * e <= (1 + u) ^ 2 * (1 + LF) * (1 + LG) * e).
    { replace ((1 + u) ^ 2 * (1 + LF) * (1 + LG) * e)
        with ((1 + u) * (1 + LG) * e * ((1 + u) * (1 + LF))) by ring.
      rewrite <- (Rmult_1_r ((1 + u) * (1 + LG) * e)) at 1.
      apply Rmult_le_compat_l; [repeat apply Rmult_le_pos; lra | nra]. }
    replace ((1 + (1 + u) * LF) * c2 + c1) with (c2 + ((1 + u) * LF * c2 + c1)) by ring.
    lra.
  - replace ((1 + u) * (e + LF * ((1 + u) * ((1 + LG) * e + dG + u * (X2 + PG)) + u * X2)
                + dF + u * (X1 + PF)) + u * X1)
      with (((1 + u) + (1 + u) ^ 2 * LF * (1 + LG)) * e + ((1 + u) * LF * c2 + c1))
      by (unfold c1, c2; ring).
    assert (((1 + u) + (1 + u) ^ 2 * LF * (1 + LG)) * e
            <= (1 + u) ^ 2 * (1 + LF) * (1 + LG) * e).
    { apply Rmult_le_compat_r; [lra|].
      assert (0 <= u * (1 + u) * (1 + LG) + (1 + u) * LG) by
        (apply Rplus_le_le_0_compat; repeat apply Rmult_le_pos; lra).
      replace ((1 + u) ^ 2 * (1 + LF) * (1 + LG))
        with ((1 + u) + (1 + u) ^ 2 * LF * (1 + LG) + (u * (1 + u) * (1 + LG) + (1 + u) * LG))
        by ring.
      lra. }
    replace ((1 + (1 + u) * LF) * c2 + c1) with (c2 + ((1 + u) * LF * c2 + c1)) by ring.
    lra.
Qed.

(** ** Stacks: the recurrence and its closed form (generic) *)
Section StackRecurrence.
Context {St L : Type} (fwd inv : L -> St -> St).
(** [close e a b]: [a] is within [e] of [b] (in some norm). *)
Variable close : R -> St -> St -> Prop.
(** Per-layer growth factor and additive term at the stored input. *)
Variable K : R.
Variable delta : L -> St -> R.

(** The reconstruction error after the inverse has gone back through
    [ls], input [x], starting within [e0] of the stored output. *)
Fixpoint recon_bound (ls : list L) (x : St) (e0 : R) : R :=
  match ls with
  | [] => e0
  | l :: ls' => K * recon_bound ls' (fwd l x) e0 + delta l x
  end.

(** [sum_k K^k d_k], Horner form. *)
Fixpoint horner (ds : list R) : R :=
  match ds with [] => 0 | d :: ds' => d + K * horner ds' end.

(** [sum_{k<n} K^k]. *)
Fixpoint geom (n : nat) : R := match n with O => 0 | S n' => 1 + K * geom n' end.

(** Closed form of the recurrence: [K^N e0 + sum_k K^k delta_k], with
    [delta_k] the term of layer [k] at its stored input. *)
Lemma recon_bound_closed : forall ls x e0,
  recon_bound ls x e0 =
  K ^ length ls * e0 +
  horner (map (fun la => delta (fst la) (snd la)) (combine ls (fst (forward_acts fwd ls x)))).
Proof.
  induction ls as [|l ls IH]; intros x e0; simpl; [ring|].
  rewrite IH; destruct (forward_acts fwd ls (fwd l x)) as [acts y]; simpl; ring.
Qed.

(** [(K - 1) sum_{k<n} K^k = K^n - 1]. *)
Lemma geom_closed : forall n, (K - 1) * geom n = K ^ n - 1.
Proof.
  induction n as [|n IH]; simpl; [ring|].
  replace ((K - 1) * (1 + K * geom n)) with (K - 1 + K * ((K - 1) * geom n)) by ring.
  rewrite IH; ring.
Qed.

Lemma horner_le : forall ds dmax, 0 <= K -> (forall d, In d ds -> d <= dmax) ->
  horner ds <= dmax * geom (length ds).
Proof.
  induction ds as [|d ds IH]; intros dmax HK Hd; simpl; [lra|].
  assert (horner ds <= dmax * geom (length ds))
    by (apply IH; [exact HK | intros; apply Hd; simpl; auto]).
  assert (d <= dmax) by (apply Hd; simpl; auto).
  assert (K * horner ds <= K * (dmax * geom (length ds))) by (apply Rmult_le_compat_l; auto).
  replace (dmax * (1 + K * geom (length ds))) with (dmax + K * (dmax * geom (length ds))) by ring.
  lra.
Qed.

(** The layers the bound applies to, and the states (e.g. vectors of
    the right length) the forward pass keeps. *)
Variable good : L -> Prop.
Variable valid : St -> Prop.
Hypothesis fwd_valid : forall l x, good l -> valid x -> valid (fwd l x).
(** The per-layer bound. *)
Hypothesis layer_error : forall l x a e, good l -> valid x -> 0 <= e ->
  close e a (fwd l x) -> close (K * e + delta l x) (inv l a) x.
Hypothesis K_nonneg : 0 <= K.
Hypothesis delta_nonneg : forall l x, 0 <= delta l x.

Lemma recon_bound_nonneg : forall ls x e0, 0 <= e0 -> 0 <= recon_bound ls x e0.
Proof.
  induction ls as [|l ls IH]; intros x e0 He; simpl; auto.
  pose proof (IH (fwd l x) e0 He); pose proof (delta_nonneg l x).
  assert (0 <= K * recon_bound ls (fwd l x) e0) by (apply Rmult_le_pos; auto).
  lra.
Qed.

(** The inverse of the stack, started within [e0] of the stored output,
    reconstructs the input within [recon_bound]. *)
Lemma run_recon_error : forall ls x a e0, Forall good ls -> valid x -> 0 <= e0 ->
  close e0 a (run_forward fwd ls x) ->
  close (recon_bound ls x e0) (run_inverse inv ls a) x.
Proof.
  induction ls as [|l ls IH]; intros x a e0 Hg Hv He Ha; [exact Ha|].
  inversion Hg as [|l' ls' Hl Hls]; subst.
  rewrite run_inverse_cons; simpl.
  apply layer_error; [exact Hl | exact Hv | apply recon_bound_nonneg; exact He|].
  apply IH; auto.
Qed.

End StackRecurrence.

(** ** The rounding model *)
Section FloatCoupling.

Variable rnd : R -> R.
Variable u : R.
Hypothesis u_nonneg : 0 <= u.
(** Relative rounding error, no underflow (Flocq: [relative_error_N_FLX]). *)
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.

(** Rounded addition and subtraction. *)
Definition rnd_group : group_ops R :=
  {| g_zero := 0; g_add := fun x y => rnd (x + y); g_sub := fun x y => rnd (x - y) |}.

(** [rnd_group] is the group record of the rounding model [fl_ops]. *)
Lemma rnd_group_fl_ops : forall rexp rln, scalar_group (fl_ops rnd rexp rln) = rnd_group.
Proof. reflexivity. Qed.

(** One coordinate: the forward computed [b = rnd (x + v)]; the inverse
    computes [rnd (a - v')] from [a] close to [b] and [v'] close to [v]. *)
Lemma recon_coord : forall x v v' a e D,
  Rabs (a - rnd (x + v)) <= e -> Rabs (v' - v) <= D ->
  Rabs (rnd (a - v') - x) <= (1 + u) * (e + D + u * Rabs (x + v)) + u * Rabs x.
Proof.
  intros x v v' a e D Ha Hv.
  set (z := a - v').
  assert (Hz : Rabs (z - x) <= e + D + u * Rabs (x + v)).
  { replace (z - x) with ((a - rnd (x + v)) + (rnd (x + v) - (x + v)) - (v' - v))
      by (unfold z; ring).
    pose proof (rnd_rel (x + v)).
    eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat; [apply Rabs_triang | rewrite Rabs_Ropp; apply Rle_refl]|].
    lra. }
  pose proof (rnd_rel z).
  assert (Rabs z <= Rabs x + Rabs (z - x))
    by (replace z with (x + (z - x)) at 1 by ring; apply Rabs_triang).
  assert (u * Rabs z <= u * (Rabs x + Rabs (z - x))) by (apply Rmult_le_compat_l; auto).
  replace (rnd z - x) with ((rnd z - z) + (z - x)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  assert (u * Rabs (z - x) <= u * (e + D + u * Rabs (x + v))) by (apply Rmult_le_compat_l; auto).
  lra.
Qed.

Lemma Rabs_plus_le : forall x v X P, Rabs x <= X -> Rabs v <= P -> Rabs (x + v) <= X + P.
Proof. intros; eapply Rle_trans; [apply Rabs_triang | lra]. Qed.

(** ** Scalars *)

(** [a] is within [e] of [b], in both halves (max-norm). *)
Definition close2 (e : R) (a b : R * R) : Prop :=
  Rabs (fst a - fst b) <= e /\ Rabs (snd a - snd b) <= e.

Section Layer.
Variables (f g : R -> R) (LF LG dF dG : R).
Hypothesis f_lip : approx_lipschitz LF dF f.
Hypothesis g_lip : approx_lipschitz LG dG g.
Hypotheses (LF_nonneg : 0 <= LF) (LG_nonneg : 0 <= LG) (dF_nonneg : 0 <= dF) (dG_nonneg : 0 <= dG).

(** One floating-point coupling layer: the inverse applied within [e] of
    the computed output reconstructs each half of the input within the
    explicit bounds [E2] (second half) and [E1] (first half). *)
Theorem coupling_recon_error : forall x1 x2 a e,
  let b := coupling_forward rnd_group f g (x1, x2) in
  let x' := coupling_inverse rnd_group f g a in
  close2 e a b ->
  let E2 := (1 + u) * ((1 + LG) * e + dG + u * (Rabs x2 + Rabs (g (fst b)))) + u * Rabs x2 in
  let E1 := (1 + u) * (e + LF * E2 + dF + u * (Rabs x1 + Rabs (f x2))) + u * Rabs x1 in
  Rabs (snd x' - x2) <= E2 /\ Rabs (fst x' - x1) <= E1.
Proof.
  intros x1 x2 [a1 a2] e b x' [H1 H2] E2 E1; unfold b, x', E1, E2 in *; simpl in *.
  assert (Hx2 : Rabs (rnd (a2 - g a1) - x2) <=
    (1 + u) * ((1 + LG) * e + dG + u * (Rabs x2 + Rabs (g (rnd (x1 + f x2))))) + u * Rabs x2).
  { eapply Rle_trans; [apply (recon_coord x2 (g (rnd (x1 + f x2))) (g a1) a2 e (LG * e + dG)); auto|].
    - eapply Rle_trans; [apply g_lip|].
      assert (LG * Rabs (a1 - rnd (x1 + f x2)) <= LG * e) by (apply Rmult_le_compat_l; auto).
      lra.
    - pose proof (Rabs_triang x2 (g (rnd (x1 + f x2)))).
      assert (0 <= u * (Rabs (x2 + g (rnd (x1 + f x2)))) <= u * (Rabs x2 + Rabs (g (rnd (x1 + f x2)))))
        by (split; [apply Rmult_le_pos; auto using Rabs_pos | apply Rmult_le_compat_l; auto]).
      assert (0 <= 1 + u) by lra.
      apply Rplus_le_compat_r, Rmult_le_compat_l; lra. }
  split; [exact Hx2|].
  eapply Rle_trans; [apply (recon_coord x1 (f x2) (f (rnd (a2 - g a1))) a1 e
    (LF * ((1 + u) * ((1 + LG) * e + dG + u * (Rabs x2 + Rabs (g (rnd (x1 + f x2))))) + u * Rabs x2) + dF)); auto|].
  - eapply Rle_trans; [apply f_lip|].
    apply Rplus_le_compat_r, Rmult_le_compat_l; auto.
  - pose proof (Rabs_triang x1 (f x2)).
    assert (u * Rabs (x1 + f x2) <= u * (Rabs x1 + Rabs (f x2))) by (apply Rmult_le_compat_l; auto).
    assert (0 <= 1 + u) by lra.
    apply Rplus_le_compat_r, Rmult_le_compat_l; lra.
Qed.

(** One layer, combined: both halves within [K e + delta]. *)
Theorem coupling_recon_error_combined : forall x1 x2 a e, 0 <= e ->
  let b := coupling_forward rnd_group f g (x1, x2) in
  close2 e a b ->
  close2 (recon_factor u LF LG * e
          + recon_term u LF dF dG (Rabs x1) (Rabs x2) (Rabs (f x2)) (Rabs (g (fst b))))
    (coupling_inverse rnd_group f g a) (x1, x2).
Proof.
  intros x1 x2 a e He b Ha.
  destruct (coupling_recon_error x1 x2 a e Ha) as [H2 H1].
  destruct (recon_combine u LF LG dF dG (Rabs x1) (Rabs x2) (Rabs (f x2)) (Rabs (g (fst b))) e)
    as [C2 C1]; auto using Rabs_pos.
  split; simpl; eapply Rle_trans; eauto.
Qed.

End Layer.
End FloatCoupling.

Lemma recon_term_nonneg : forall u LF dF dG X1 X2 PF PG,
  0 <= u -> 0 <= LF -> 0 <= dF -> 0 <= dG -> 0 <= X1 -> 0 <= X2 -> 0 <= PF -> 0 <= PG ->
  0 <= recon_term u LF dF dG X1 X2 PF PG.
Proof.
  intros; unfold recon_term.
  repeat (apply Rplus_le_le_0_compat || apply Rmult_le_pos); lra.
Qed.

Lemma recon_term_mono : forall u LF dF dG X1 X2 PF PG X1' X2' PF' PG',
  0 <= u -> 0 <= LF ->
  X1 <= X1' -> X2 <= X2' -> PF <= PF' -> PG <= PG' ->
  recon_term u LF dF dG X1 X2 PF PG <= recon_term u LF dF dG X1' X2' PF' PG'.
Proof.
  intros; unfold recon_term.
  assert (0 <= 1 + (1 + u) * LF) by (assert (0 <= (1 + u) * LF) by (apply Rmult_le_pos; lra); lra).
  apply Rplus_le_compat; [apply Rmult_le_compat_l; [lra|] | ];
    apply Rplus_le_compat; try (apply Rmult_le_compat_l; lra);
    apply Rmult_le_compat_l; try lra;
    apply Rplus_le_compat_l; apply Rmult_le_compat_l; lra.
Qed.

Lemma recon_factor_nonneg : forall u LF LG, 0 <= u -> 0 <= LF -> 0 <= LG ->
  0 <= recon_factor u LF LG.
Proof. intros; unfold recon_factor; repeat apply Rmult_le_pos; try apply pow_le; lra. Qed.

(** ** Scalar stacks *)
Section FloatStack.
Variable rnd : R -> R.
Variable u : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Variables LF LG dF dG : R.
Hypotheses (LF_nonneg : 0 <= LF) (LG_nonneg : 0 <= LG) (dF_nonneg : 0 <= dF) (dG_nonneg : 0 <= dG).

(** Both functions of a layer satisfy the approximate Lipschitz bounds. *)
Definition layer_ok (l : coupling_layer R) : Prop :=
  approx_lipschitz LF dF (layer_f l) /\ approx_lipschitz LG dG (layer_g l).

(** The per-layer term at the stored input [x] of layer [l]. *)
Definition layer_delta (l : coupling_layer R) (x : R * R) : R :=
  recon_term u LF dF dG (Rabs (fst x)) (Rabs (snd x)) (Rabs (layer_f l (snd x)))
    (Rabs (layer_g l (fst (layer_forward (rnd_group rnd) l x)))).

(** The reconstruction error bound of a scalar stack (the recurrence
    [err(l :: ls) = K err(ls) + delta_l]). *)
Definition stack_recon_bound (ls : list (coupling_layer R)) (x : R * R) (e0 : R) : R :=
  recon_bound (layer_forward (rnd_group rnd)) (recon_factor u LF LG) layer_delta ls x e0.

(** A floating-point stack of coupling layers: the floating-point inverse,
    started within [e0] of the computed output, reconstructs the input
    within [stack_recon_bound] (both halves). *)
Theorem stack_recon_error : forall ls x a e0,
  Forall layer_ok ls -> 0 <= e0 ->
  close2 e0 a (stack_forward (rnd_group rnd) ls x) ->
  close2 (stack_recon_bound ls x e0) (stack_inverse (rnd_group rnd) ls a) x.
Proof.
  intros ls x a e0 Hok He Ha.
  apply (run_recon_error _ _ close2 _ _ layer_ok (fun _ => True)); auto.
  - intros l [x1 x2] a' e [Hf Hg] _ He' Ha'.
    apply (coupling_recon_error_combined rnd u u_nonneg rnd_rel _ _ LF LG dF dG); auto.
  - apply recon_factor_nonneg; auto.
  - intros l x'; apply recon_term_nonneg; auto using Rabs_pos.
Qed.

(** The closed form of [stack_recon_bound]: [K^N e0 + sum_k K^k delta_k]
    ([delta_k]: the term of layer [k] at its stored input). *)
Theorem stack_recon_bound_closed : forall ls x e0,
  stack_recon_bound ls x e0 =
  recon_factor u LF LG ^ length ls * e0 +
  horner (recon_factor u LF LG)
    (map (fun la => layer_delta (fst la) (snd la))
       (combine ls (fst (forward_acts (layer_forward (rnd_group rnd)) ls x)))).
Proof. intros; apply recon_bound_closed. Qed.

(** With magnitude bounds along the stored forward pass (inputs
    [|x1| <= X1], [|x2| <= X2], computed [|f x2| <= PF], [|g y1| <= PG]
    at every layer), the reconstructed input of an [N]-layer stack is
    within [K^N e0 + delta geom K N] of the stored one, where
    [geom K N = sum_{k<N} K^k = (K^N - 1)/(K - 1)]. *)
Theorem stack_recon_error_uniform : forall ls x a e0 X1 X2 PF PG,
  Forall layer_ok ls -> 0 <= e0 ->
  (forall l s, In (l, s) (combine ls (fst (forward_acts (layer_forward (rnd_group rnd)) ls x))) ->
     Rabs (fst s) <= X1 /\ Rabs (snd s) <= X2 /\ Rabs (layer_f l (snd s)) <= PF /\
     Rabs (layer_g l (fst (layer_forward (rnd_group rnd) l s))) <= PG) ->
  close2 e0 a (stack_forward (rnd_group rnd) ls x) ->
  let K := recon_factor u LF LG in
  close2 (K ^ length ls * e0 + recon_term u LF dF dG X1 X2 PF PG * geom K (length ls))
    (stack_inverse (rnd_group rnd) ls a) x.
Proof.
  intros ls x a e0 X1 X2 PF PG Hok He Hb Ha K.
  destruct (stack_recon_error ls x a e0 Hok He Ha) as [H1 H2].
  assert (B : stack_recon_bound ls x e0 <=
              K ^ length ls * e0 + recon_term u LF dF dG X1 X2 PF PG * geom K (length ls)).
  { rewrite stack_recon_bound_closed; apply Rplus_le_compat_l.
    replace (length ls) with
      (length (map (fun la => layer_delta (fst la) (snd la))
         (combine ls (fst (forward_acts (layer_forward (rnd_group rnd)) ls x)))))
      by (rewrite map_length, combine_length, length_forward_acts, Nat.min_id; reflexivity).
    apply horner_le; [apply recon_factor_nonneg; auto|].
    intros d Hd; apply in_map_iff in Hd; destruct Hd as [[l s] [Ed Hin]]; subst d; simpl.
    destruct (Hb l s Hin) as (B1 & B2 & B3 & B4).
    apply recon_term_mono; auto. }
  split; eapply Rle_trans; eauto.
Qed.

End FloatStack.

(** ** Vectors: lists of one length [n], coordinatewise rounding, max-norm *)

(** [a] and [b] have length [n] and are within [e] coordinatewise. *)
Definition vclose (n : nat) (e : R) (a b : list R) : Prop :=
  length a = n /\ length b = n /\ forall i, (i < n)%nat -> Rabs (nth i a 0 - nth i b 0) <= e.

(** Both halves within [e]. *)
Definition vclose2 (n : nat) (e : R) (a b : list R * list R) : Prop :=
  vclose n e (fst a) (fst b) /\ vclose n e (snd a) (snd b).

(** The max-norm. *)
Fixpoint vnorm (v : list R) : R :=
  match v with [] => 0 | x :: v' => Rmax (Rabs x) (vnorm v') end.

Lemma vnorm_nonneg : forall v, 0 <= vnorm v.
Proof.
  induction v as [|x v IH]; simpl; [lra|].
  eapply Rle_trans; [exact IH | apply Rmax_r].
Qed.

Lemma vnorm_nth : forall v i, Rabs (nth i v 0) <= vnorm v.
Proof.
  induction v as [|x v IH]; intros [|i]; simpl.
  - rewrite Rabs_R0; lra.
  - rewrite Rabs_R0; lra.
  - apply Rmax_l.
  - eapply Rle_trans; [apply IH | apply Rmax_r].
Qed.

(** [f] maps vectors of length [n] to vectors of length [n] and is
    [L]-Lipschitz up to [d] in the max-norm. *)
Definition vapprox_lipschitz (n : nat) (L d : R) (f : list R -> list R) : Prop :=
  forall e a b, 0 <= e -> vclose n e a b -> vclose n (L * e + d) (f a) (f b).

Lemma vapprox_lipschitz_length : forall n L d f v,
  vapprox_lipschitz n L d f -> length v = n -> length (f v) = n.
Proof.
  intros n L d f v Hf Hv.
  destruct (Hf 0 v v (Rle_refl 0)) as [H _]; [|exact H].
  repeat split; auto; intros; unfold Rminus; rewrite Rplus_opp_r, Rabs_R0; lra.
Qed.

Section ListNth.
Context {T : Type} (o : group_ops T).

Lemma nth_list_add : forall a b i d, length a = length b -> (i < length a)%nat ->
  nth i (list_add o a b) d = g_add o (nth i a d) (nth i b d).
Proof.
  induction a as [|x a IH]; intros [|y b] [|i] d E Hi; simpl in *; try lia; auto.
  apply IH; lia.
Qed.

Lemma nth_list_sub : forall a b i d, length a = length b -> (i < length a)%nat ->
  nth i (list_sub o a b) d = g_sub o (nth i a d) (nth i b d).
Proof.
  induction a as [|x a IH]; intros [|y b] [|i] d E Hi; simpl in *; try lia; auto.
  apply IH; lia.
Qed.

End ListNth.

(** One coordinate with magnitude bounds [|x| <= X], [|v| <= P]. *)
Lemma recon_coord_bound : forall rnd u, 0 <= u -> (forall x, Rabs (rnd x - x) <= u * Rabs x) ->
  forall x v v' a e D X P,
  Rabs (a - rnd (x + v)) <= e -> Rabs (v' - v) <= D -> Rabs x <= X -> Rabs v <= P ->
  Rabs (rnd (a - v') - x) <= (1 + u) * (e + D + u * (X + P)) + u * X.
Proof.
  intros rnd u Hu Hr x v v' a e D X P Ha Hv HX HP.
  eapply Rle_trans; [apply (recon_coord rnd u Hu Hr x v v' a e D); auto|].
  assert (u * Rabs (x + v) <= u * (X + P))
    by (apply Rmult_le_compat_l; auto; eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (u * Rabs x <= u * X) by (apply Rmult_le_compat_l; auto).
  assert (0 <= 1 + u) by lra.
  assert ((1 + u) * (e + D + u * Rabs (x + v)) <= (1 + u) * (e + D + u * (X + P)))
    by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Section VecLayer.
Variable rnd : R -> R.
Variable u : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Variable n : nat.
Variables (f g : list R -> list R) (LF LG dF dG : R).
Hypothesis f_lip : vapprox_lipschitz n LF dF f.
Hypothesis g_lip : vapprox_lipschitz n LG dG g.
Hypotheses (LF_nonneg : 0 <= LF) (LG_nonneg : 0 <= LG) (dF_nonneg : 0 <= dF) (dG_nonneg : 0 <= dG).

Let vg := list_group (rnd_group rnd).

(** One floating-point coupling layer on vectors of length [n]: the
    inverse applied within [e] (max-norm) of the computed output
    reconstructs each half of the input within [K e + delta], [delta]
    taken at the max-norms of [x1], [x2], [f x2], [g y1]. *)
Theorem vec_coupling_recon_error : forall x1 x2 a e, 0 <= e ->
  length x1 = n -> length x2 = n ->
  let b := coupling_forward vg f g (x1, x2) in
  vclose2 n e a b ->
  vclose2 n (recon_factor u LF LG * e
             + recon_term u LF dF dG (vnorm x1) (vnorm x2) (vnorm (f x2)) (vnorm (g (fst b))))
    (coupling_inverse vg f g a) (x1, x2).
Proof.
  intros x1 x2 [a1 a2] e He L1 L2 b [Ha1 Ha2]; unfold b in *; simpl in *.
  set (b1 := list_add (rnd_group rnd) x1 (f x2)) in *.
  set (b2 := list_add (rnd_group rnd) x2 (g b1)) in *.
  assert (Lf2 : length (f x2) = n) by (eapply vapprox_lipschitz_length; eauto).
  assert (Lb1 : length b1 = n) by (unfold b1; rewrite length_list_add; congruence).
  assert (Lgb1 : length (g b1) = n) by (eapply vapprox_lipschitz_length; eauto).
  destruct Ha1 as (La1 & _ & Ha1). destruct Ha2 as (La2 & _ & Ha2).
  assert (Lga1 : length (g a1) = n) by (eapply vapprox_lipschitz_length; eauto).
  destruct (g_lip e a1 b1 He) as (_ & _ & Hg); [repeat split; auto|].
  set (E2 := (1 + u) * ((1 + LG) * e + dG + u * (vnorm x2 + vnorm (g b1))) + u * vnorm x2).
  set (x2' := list_sub (rnd_group rnd) a2 (g a1)).
  assert (Lx2' : length x2' = n) by (unfold x2'; rewrite length_list_sub; congruence).
  assert (Hx2 : vclose n E2 x2' x2).
  { repeat split; auto; intros i Hi.
    unfold x2'; rewrite nth_list_sub by lia; simpl.
    unfold E2; replace ((1 + LG) * e + dG) with (e + (LG * e + dG)) by ring.
    apply (recon_coord_bound rnd u u_nonneg rnd_rel _ (nth i (g b1) 0)); auto using vnorm_nth.
    specialize (Ha2 i Hi); unfold b2 in Ha2; rewrite nth_list_add in Ha2 by lia; exact Ha2. }
  assert (E2_nonneg : 0 <= E2).
  { unfold E2; pose proof (vnorm_nonneg x2); pose proof (vnorm_nonneg (g b1)).
    repeat (apply Rplus_le_le_0_compat || apply Rmult_le_pos); lra. }
  destruct (f_lip E2 x2' x2 E2_nonneg Hx2) as (Lfx2' & _ & Hf).
  destruct (recon_combine u LF LG dF dG (vnorm x1) (vnorm x2) (vnorm (f x2)) (vnorm (g b1)) e)
    as [C2 C1]; auto using vnorm_nonneg.
  split; simpl.
  - repeat split; [rewrite length_list_sub; congruence | auto |].
    intros i Hi; rewrite nth_list_sub by lia; simpl.
    eapply Rle_trans;
      [apply (recon_coord_bound rnd u u_nonneg rnd_rel _ (nth i (f x2) 0) _ _ e (LF * E2 + dF));
         [ | apply Hf; lia | apply vnorm_nth | apply vnorm_nth ] |].
    + specialize (Ha1 i Hi); unfold b1 in Ha1; rewrite nth_list_add in Ha1 by lia; exact Ha1.
    + eapply Rle_trans; [|exact C1]; right; unfold E2; ring.
  - fold x2'; destruct Hx2 as (_ & _ & Hx2); repeat split; auto.
    intros i Hi; eapply Rle_trans; [apply Hx2; auto | exact C2].
Qed.

End VecLayer.

(** ** Vector stacks *)
Section VecStack.
Variable rnd : R -> R.
Variable u : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Variable n : nat.
Variables LF LG dF dG : R.
Hypotheses (LF_nonneg : 0 <= LF) (LG_nonneg : 0 <= LG) (dF_nonneg : 0 <= dF) (dG_nonneg : 0 <= dG).

Let vg := list_group (rnd_group rnd).

(** Both functions of a layer satisfy the approximate Lipschitz bounds
    on vectors of length [n]. *)
Definition vlayer_ok (l : coupling_layer (list R)) : Prop :=
  vapprox_lipschitz n LF dF (layer_f l) /\ vapprox_lipschitz n LG dG (layer_g l).

(** The per-layer term at the stored input [x] of layer [l]. *)
Definition vlayer_delta (l : coupling_layer (list R)) (x : list R * list R) : R :=
  recon_term u LF dF dG (vnorm (fst x)) (vnorm (snd x)) (vnorm (layer_f l (snd x)))
    (vnorm (layer_g l (fst (layer_forward vg l x)))).

(** A floating-point stack of coupling layers on vectors of length [n]:
    the inverse, started within [e0] (max-norm) of the computed output,
    reconstructs the input within the recurrence [recon_bound]. *)
Theorem vec_stack_recon_error : forall ls x a e0,
  Forall vlayer_ok ls -> length (fst x) = n -> length (snd x) = n -> 0 <= e0 ->
  vclose2 n e0 a (stack_forward vg ls x) ->
  vclose2 n (recon_bound (layer_forward vg) (recon_factor u LF LG) vlayer_delta ls x e0)
    (stack_inverse vg ls a) x.
Proof.
  intros ls x a e0 Hok L1 L2 He Ha.
  apply (run_recon_error _ _ (vclose2 n) _ _ vlayer_ok
           (fun x => length (fst x) = n /\ length (snd x) = n)); auto.
  - intros l [x1 x2] [Hf Hg] [H1 H2]; simpl in *.
    apply (length_coupling_forward_list (rnd_group rnd) n); auto;
      intros v Hv; eapply vapprox_lipschitz_length; eauto.
  - intros l [x1 x2] a' e [Hf Hg] [H1 H2] He' Ha'.
    apply (vec_coupling_recon_error rnd u u_nonneg rnd_rel n _ _ LF LG dF dG); auto.
  - apply recon_factor_nonneg; auto.
  - intros l x'; apply recon_term_nonneg; auto using vnorm_nonneg.
Qed.

(** With max-norm bounds along the stored forward pass ([||x1|| <= X1],
    [||x2|| <= X2], [||f x2|| <= PF], [||g y1|| <= PG] at every layer),
    the reconstructed input of an [N]-layer vector stack is within
    [K^N e0 + delta geom K N] of the stored one (max-norm, both halves). *)
Theorem vec_stack_recon_error_uniform : forall ls x a e0 X1 X2 PF PG,
  Forall vlayer_ok ls -> length (fst x) = n -> length (snd x) = n -> 0 <= e0 ->
  (forall l s, In (l, s) (combine ls (fst (forward_acts (layer_forward vg) ls x))) ->
     vnorm (fst s) <= X1 /\ vnorm (snd s) <= X2 /\ vnorm (layer_f l (snd s)) <= PF /\
     vnorm (layer_g l (fst (layer_forward vg l s))) <= PG) ->
  vclose2 n e0 a (stack_forward vg ls x) ->
  let K := recon_factor u LF LG in
  vclose2 n (K ^ length ls * e0 + recon_term u LF dF dG X1 X2 PF PG * geom K (length ls))
    (stack_inverse vg ls a) x.
Proof.
  intros ls x a e0 X1 X2 PF PG Hok L1 L2 He Hb Ha K.
  destruct (vec_stack_recon_error ls x a e0 Hok L1 L2 He Ha) as [(A1 & B1 & H1) (A2 & B2 & H2)].
  assert (B : recon_bound (layer_forward vg) K vlayer_delta ls x e0 <=
              K ^ length ls * e0 + recon_term u LF dF dG X1 X2 PF PG * geom K (length ls)).
  { rewrite recon_bound_closed; apply Rplus_le_compat_l.
    replace (length ls) with
      (length (map (fun la => vlayer_delta (fst la) (snd la))
         (combine ls (fst (forward_acts (layer_forward vg) ls x)))))
      by (rewrite map_length, combine_length, length_forward_acts, Nat.min_id; reflexivity).
    apply horner_le; [apply recon_factor_nonneg; auto|].
    intros d Hd; apply in_map_iff in Hd; destruct Hd as [[l s] [Ed Hin]]; subst d; simpl.
    destruct (Hb l s Hin) as (B1' & B2' & B3' & B4').
    apply recon_term_mono; auto. }
  split; repeat split; auto; intros i Hi; eapply Rle_trans; eauto.
Qed.

End VecStack.

(** ** Instance: binary round-to-nearest-even in precision [p] (Flocq FLX) *)

(** [vec_stack_recon_error_uniform] for Flocq's round-to-nearest in
    precision [p] (FLX: no underflow, no overflow), [u = 2^-p]
    ([p = 24] for float32, [53] for float64). *)
Theorem vec_stack_recon_error_flx : forall p, (0 < p)%Z ->
  forall n LF LG dF dG ls x a e0 X1 X2 PF PG,
  0 <= LF -> 0 <= LG -> 0 <= dF -> 0 <= dG ->
  let u := bpow radix2 (- p) in
  let vg := list_group (rnd_group (flx_rnd p)) in
  Forall (vlayer_ok n LF LG dF dG) ls -> length (fst x) = n -> length (snd x) = n -> 0 <= e0 ->
  (forall l s, In (l, s) (combine ls (fst (forward_acts (layer_forward vg) ls x))) ->
     vnorm (fst s) <= X1 /\ vnorm (snd s) <= X2 /\ vnorm (layer_f l (snd s)) <= PF /\
     vnorm (layer_g l (fst (layer_forward vg l s))) <= PG) ->
  vclose2 n e0 a (stack_forward vg ls x) ->
  let K := recon_factor u LF LG in
  vclose2 n (K ^ length ls * e0 + recon_term u LF dF dG X1 X2 PF PG * geom K (length ls))
    (stack_inverse vg ls a) x.
Proof.
  intros p Hp n LF LG dF dG ls x a e0 X1 X2 PF PG HLF HLG HdF HdG u vg.
  apply vec_stack_recon_error_uniform; auto.
  - apply bpow_ge_0.
  - apply flx_rnd_rel; exact Hp.
Qed.
