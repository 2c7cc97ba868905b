(** * A-posteriori reconstruction and gradient error of reversible coupling stacks.

    [FloatError.v] bounds the reconstruction error a priori, with one
    Lipschitz pair [(LF, LG)] for all layers and worst-case rounding
    terms: the bound grows like [((1+LF)(1+LG))^N].  This file bounds the
    same error by quantities measured on the run itself:

    - per layer [i] a growth constant [K_i] (for a coupling layer
      [K_i = (1+LF_i)(1+LG_i)], with [LF_i], [LG_i] Lipschitz constants of
      the *exact* residual functions [F_i], [G_i] needed only at the pairs
      of points the run actually visits: [coupling_step_apost]);
    - per layer a local error [r_i + d_i]: [r_i] the distance between the
      step the code runs (rounded inverse, computed [f], [g]) at the point
      it ran at and the exact inverse at that point, [d_i] the distance
      between the exact inverse of the stored (computed) output of the
      layer and its stored input (the forward's own rounding).  Both can
      be measured in a test (a higher-precision reference) or bounded by
      [u |values|].

    Discrete Gronwall ([apost_recon_error], generic over the state and
    the closeness relation; induction on the stack as [run_inverse]
    iterates it, last layer first): the inverse of the stack, started
    within [e0] of the stored output, reconstructs the input of the stack
    within [apost_bound cs e0], the recurrence
    [E_i = K_i E_(i+1) + (r_i + d_i)], [E_N = e0]; closed form
    ([apost_bound_closed]):

      E_0 = sum_j (r_j + d_j) prod_(k<j) K_k + (prod_k K_k) e0,

    i.e. each local error is amplified only by the measured constants of
    the layers between it and the layer whose input is bounded.  The same
    theorem applied to the layers [i..N-1] (the hypothesis [apost_ok] of a
    stack contains that of each of its suffixes) bounds the reconstructed
    input of every layer [i].  With all these prefix products at most [P]
    ([apost_recon_error_small_products]) the error is at most
    [P (sum_j (r_j + d_j) + e0)].

    The instance ([vec_stack_recon_error_apost]) is the code's algorithm:
    floating-point coupling layers on vectors (lists of one length [n],
    coordinatewise rounding [rnd], max-norm), [stack_forward] and
    [stack_inverse] of [list_group (rnd_group rnd)].  Nothing about [rnd]
    is assumed: all rounding is in the measured [r_i], [d_i].

    The resulting gradient error ([apost_grad_error], generic;
    [vec_stack_grad_error_apost] for the coupling stack): reversible
    backprop ([backprop_reversible] of [Gradient.v]: the local backward
    [vjp] at the reconstructed input) against ordinary backprop from the
    stored activations ([backprop_stored]), from an output cotangent
    within [g0].  With measured backward constants per layer ([gc_J],
    [gc_M]: the input gradient of layer [i] moves by at most
    [J_i G + M_i E] when the incoming cotangent moves by [G] and the
    input by [E], only at the stored point and within the bounds the run
    reaches: [vjp_hyp]; [gc_JP], [gc_MP] likewise for the parameter
    gradient), the input gradient is within [grad_bound]
    ([G_i = J_i G_(i+1) + M_i E_i], [E_i] the reconstruction bound of
    layer [i]) and the parameter gradients within [param_bounds].

    Not covered: how to obtain [J_i], [M_i] for a given block (for a
    tanh MLP they depend on the cotangent's size; nothing here computes
    them, and the Python side evaluates the reconstruction bound only);
    soundness of a test's measurement of [r_i], [d_i], [LF_i], [LG_i]
    (a float64 reference stands in for exact arithmetic there). *)

From Coq Require Import List Reals Lra Lia.
From Ojas Require Import Reversible.Coupling Reversible.Stack Reversible.Gradient Reversible.FloatError.
Import ListNotations.
Open Scope R_scope.

(** Measured constants of one layer: growth [lc_K], step rounding error
    [lc_r], forward defect [lc_d]. *)
Record layer_consts : Type := mk_consts { lc_K : R; lc_r : R; lc_d : R }.

(** [E_i = K_i E_(i+1) + (r_i + d_i)], [E_N = e0]; [cs] lists the layers'
    constants from the input of the stack. *)
Fixpoint apost_bound (cs : list layer_consts) (e0 : R) : R :=
  match cs with
  | [] => e0
  | c :: cs' => lc_K c * apost_bound cs' e0 + (lc_r c + lc_d c)
  end.

(** Prefix products [1, K_0, K_0 K_1, ..., K_0 ... K_(N-1)]. *)
Fixpoint prefix_products (ks : list R) : list R :=
  match ks with
  | [] => [1]
  | k :: ks' => 1 :: map (Rmult k) (prefix_products ks')
  end.

(** [sum_i p_i v_i]. *)
Fixpoint wsum (ps vs : list R) : R :=
  match ps, vs with
  | p :: ps', v :: vs' => p * v + wsum ps' vs'
  | _, _ => 0
  end.

Fixpoint lsum (vs : list R) : R := match vs with [] => 0 | v :: vs' => v + lsum vs' end.

Lemma wsum_scale : forall k ps vs, wsum (map (Rmult k) ps) vs = k * wsum ps vs.
Proof. induction ps as [|p ps IH]; intros [|v vs]; simpl; try ring; rewrite IH; ring. Qed.

(** Closed form: [E_0 = sum_j (r_j + d_j) prod_(k<j) K_k + (prod_k K_k) e0]. *)
Theorem apost_bound_closed : forall cs e0,
  apost_bound cs e0 =
  wsum (prefix_products (map lc_K cs)) (map (fun c => lc_r c + lc_d c) cs ++ [e0]).
Proof.
  induction cs as [|c cs IH]; intros e0; simpl; [ring|].
  rewrite wsum_scale, <- IH; ring.
Qed.

Lemma lsum_nonneg : forall vs, (forall v, In v vs -> 0 <= v) -> 0 <= lsum vs.
Proof.
  induction vs as [|w vs IH]; intros Hv; simpl; [lra|].
  assert (0 <= w) by (apply Hv; left; auto).
  assert (0 <= lsum vs) by (apply IH; intros x Hx; apply Hv; right; auto).
  lra.
Qed.

Lemma wsum_le : forall ps vs P, 0 <= P -> (forall p, In p ps -> p <= P) ->
  (forall v, In v vs -> 0 <= v) -> wsum ps vs <= P * lsum vs.
Proof.
  induction ps as [|p ps IH]; intros [|v vs] P HP0 Hp Hv; simpl.
  - lra.
  - assert (0 <= lsum (v :: vs)) by (apply lsum_nonneg; auto).
    simpl in *; assert (0 <= P * (v + lsum vs)) by (apply Rmult_le_pos; auto). lra.
  - lra.
  - assert (0 <= v) by (apply Hv; left; auto).
    assert (p <= P) by (apply Hp; left; auto).
    assert (wsum ps vs <= P * lsum vs)
      by (apply IH; [auto | intros; apply Hp; right; auto | intros; apply Hv; right; auto]).
    assert (p * v <= P * v) by (apply Rmult_le_compat_r; auto).
    lra.
Qed.

(** ** The stack: discrete Gronwall with per-layer constants (generic) *)
Section APosteriori.
Context {St L : Type} (fwd inv : L -> St -> St).
(** [close e a b]: [a] is within [e] of [b]. *)
Variable close : R -> St -> St -> Prop.
(** The per-layer hypothesis, at the reconstructed output [a] of layer
    [l] (what the inverse of the layers above gave) and its stored input
    [x], with the layer's measured constants [c]. *)
Variable layer_hyp : L -> layer_consts -> St -> St -> Prop.
(** What the per-layer hypothesis gives: one step of the inverse adds
    [r + d] to the incoming error times [K]. *)
Hypothesis layer_step : forall l c a x E, layer_hyp l c a x -> 0 <= E ->
  close E a (fwd l x) -> close (lc_K c * E + (lc_r c + lc_d c)) (inv l a) x.
Hypothesis layer_consts_nonneg : forall l c a x, layer_hyp l c a x ->
  0 <= lc_K c /\ 0 <= lc_r c /\ 0 <= lc_d c.

(** The per-layer hypotheses along the run: layer [l] of [l :: ls] at
    stored input [x], reconstructed output [run_inverse inv ls a]. *)
Fixpoint apost_ok (ls : list L) (cs : list layer_consts) (x a : St) : Prop :=
  match ls, cs with
  | [], [] => True
  | l :: ls', c :: cs' => layer_hyp l c (run_inverse inv ls' a) x /\ apost_ok ls' cs' (fwd l x) a
  | _, _ => False
  end.

Lemma apost_bound_nonneg : forall ls cs x a e0, apost_ok ls cs x a -> 0 <= e0 ->
  0 <= apost_bound cs e0.
Proof.
  induction ls as [|l ls IH]; intros [|c cs] x a e0 Hok He; simpl in *; try tauto.
  destruct Hok as [Hl Hok].
  destruct (layer_consts_nonneg _ _ _ _ Hl) as (HK & Hr & Hd).
  pose proof (IH cs _ _ _ Hok He).
  assert (0 <= lc_K c * apost_bound cs e0) by (apply Rmult_le_pos; auto).
  lra.
Qed.

(** The inverse of the stack, started within [e0] of the stored output,
    reconstructs the stored input within [apost_bound cs e0]. *)
Theorem apost_recon_error : forall ls cs x a e0, apost_ok ls cs x a -> 0 <= e0 ->
  close e0 a (run_forward fwd ls x) ->
  close (apost_bound cs e0) (run_inverse inv ls a) x.
Proof.
  induction ls as [|l ls IH]; intros [|c cs] x a e0 Hok He Ha; simpl in *; try tauto.
  destruct Hok as [Hl Hok].
  rewrite run_inverse_cons.
  apply layer_step; [exact Hl | eapply apost_bound_nonneg; eauto |].
  apply IH; auto.
Qed.

(** Small measured products: if every product [prod_(k<j) K_k] is at most
    [P], the reconstruction error is at most [P] times the sum of the
    local errors and [e0]. *)
Corollary apost_recon_error_small_products : forall ls cs x a e0 P,
  apost_ok ls cs x a -> 0 <= e0 ->
  (forall p, In p (prefix_products (map lc_K cs)) -> p <= P) ->
  close e0 a (run_forward fwd ls x) ->
  (forall e e', e <= e' -> forall s t, close e s t -> close e' s t) ->
  close (P * (lsum (map (fun c => lc_r c + lc_d c) cs) + e0)) (run_inverse inv ls a) x.
Proof.
  intros ls cs x a e0 P Hok He HP Ha Hmono.
  apply (Hmono (apost_bound cs e0)); [| apply apost_recon_error; auto].
  rewrite apost_bound_closed.
  replace (lsum (map (fun c => lc_r c + lc_d c) cs) + e0)
    with (lsum (map (fun c => lc_r c + lc_d c) cs ++ [e0])).
  2: { clear. induction (map (fun c => lc_r c + lc_d c) cs) as [|v vs IH]; simpl; [ring|]. rewrite IH; ring. }
  apply wsum_le; auto.
  { assert (1 <= P) by (apply HP; destruct (map lc_K cs); left; reflexivity). lra. }
  intros v Hv; apply in_app_iff in Hv; destruct Hv as [Hv | [Hv | []]]; [|lra].
  apply in_map_iff in Hv; destruct Hv as [c [Ev Hc]]; subst v.
  assert (Hc' : exists l x' a', layer_hyp l c a' x').
  { clear - Hok Hc. revert cs x Hok Hc.
    induction ls as [|l ls IH]; intros [|c' cs] x Hok Hc; simpl in *; try tauto.
    destruct Hok as [Hl Hok]; destruct Hc as [<- | Hc]; [eauto | eapply IH; eauto]. }
  destruct Hc' as (l & x' & a' & Hl).
  destruct (layer_consts_nonneg _ _ _ _ Hl) as (_ & Hr & Hd); lra.
Qed.

End APosteriori.

(** ** One coupling layer on vectors (max-norm) *)

Lemma vclose_triangle : forall n e1 e2 a b c,
  vclose n e1 a b -> vclose n e2 b c -> vclose n (e1 + e2) a c.
Proof.
  intros n e1 e2 a b c (La & Lb & H1) (_ & Lc & H2); repeat split; auto; intros i Hi.
  replace (nth i a 0 - nth i c 0) with ((nth i a 0 - nth i b 0) + (nth i b 0 - nth i c 0)) by ring.
  eapply Rle_trans; [apply Rabs_triang|]; pose proof (H1 i Hi); pose proof (H2 i Hi); lra.
Qed.

Lemma vclose_mono : forall n e e' a b, e <= e' -> vclose n e a b -> vclose n e' a b.
Proof.
  intros n e e' a b He (La & Lb & H); repeat split; auto; intros i Hi.
  eapply Rle_trans; [apply H; auto | exact He].
Qed.

Lemma vclose2_mono : forall n e e' a b, e <= e' -> vclose2 n e a b -> vclose2 n e' a b.
Proof. intros n e e' a b He [H1 H2]; split; eapply vclose_mono; eauto. Qed.

(** [F] moves the pair [(a, b)] by at most [L] times their distance. *)
Definition vlip_at (n : nat) (L : R) (F : list R -> list R) (a b : list R) : Prop :=
  forall e, 0 <= e -> vclose n e a b -> vclose n (L * e) (F a) (F b).

(** The exact inverse with exact residual functions [F], [G]. *)
Definition exact_inverse (F G : list R -> list R) : list R * list R -> list R * list R :=
  coupling_inverse (list_group R_group) F G.

(** The exact inverse is [(1+LF)(1+LG)]-Lipschitz at the pair [(a, b)] in
    the max-norm, given [G] at the first halves and [F] at the
    reconstructed second halves. *)
Lemma exact_inverse_lip_at : forall n F G LF LG a b E,
  0 <= LF -> 0 <= LG -> 0 <= E ->
  vlip_at n LG G (fst a) (fst b) ->
  vlip_at n LF F (snd (exact_inverse F G a)) (snd (exact_inverse F G b)) ->
  vclose2 n E a b ->
  vclose2 n ((1 + LF) * (1 + LG) * E) (exact_inverse F G a) (exact_inverse F G b).
Proof.
  intros n F G LF LG [a1 a2] [b1 b2] E HLF HLG HE HG HF [H1 H2]; simpl in *.
  unfold exact_inverse in *; simpl in *.
  destruct (HG E HE H1) as (LGa & LGb & HGi).
  destruct H1 as (La1 & Lb1 & H1i). destruct H2 as (La2 & Lb2 & H2i).
  set (x2a := list_sub R_group a2 (G a1)) in *.
  set (x2b := list_sub R_group b2 (G b1)) in *.
  assert (Hx2 : vclose n ((1 + LG) * E) x2a x2b).
  { unfold x2a, x2b; repeat split; try (rewrite length_list_sub; congruence).
    intros i Hi; rewrite !nth_list_sub by lia; simpl.
    replace (nth i a2 0 - nth i (G a1) 0 - (nth i b2 0 - nth i (G b1) 0))
      with ((nth i a2 0 - nth i b2 0) - (nth i (G a1) 0 - nth i (G b1) 0)) by ring.
    eapply Rle_trans; [apply Rabs_triang|]; rewrite Rabs_Ropp.
    pose proof (H2i i Hi); pose proof (HGi i Hi); lra. }
  assert (HE' : 0 <= (1 + LG) * E) by (apply Rmult_le_pos; lra).
  destruct (HF _ HE' Hx2) as (LFa & LFb & HFi).
  assert (HK : (1 + LG) * E <= (1 + LF) * (1 + LG) * E).
  { assert (0 <= LF * ((1 + LG) * E)) by (apply Rmult_le_pos; lra). nra. }
  split; simpl.
  - destruct Hx2 as (Lx2a & Lx2b & _).
    repeat split; try (rewrite length_list_sub; congruence).
    intros i Hi; rewrite !nth_list_sub by lia; simpl.
    replace (nth i a1 0 - nth i (F x2a) 0 - (nth i b1 0 - nth i (F x2b) 0))
      with ((nth i a1 0 - nth i b1 0) - (nth i (F x2a) 0 - nth i (F x2b) 0)) by ring.
    eapply Rle_trans; [apply Rabs_triang|]; rewrite Rabs_Ropp.
    pose proof (H1i i Hi); pose proof (HFi i Hi).
    replace ((1 + LF) * (1 + LG) * E) with (E + LF * ((1 + LG) * E) + LG * E) by ring.
    assert (0 <= LG * E) by (apply Rmult_le_pos; lra). lra.
  - eapply vclose_mono; [exact HK | exact Hx2].
Qed.

(** The per-layer hypothesis of a floating-point coupling layer: [fc],
    [gc] are the computed functions the code runs, [F], [G] exact ones
    (e.g. the same formulas in exact arithmetic), [a] the reconstructed
    output fed to the layer's inverse, [x] the layer's stored input.
    [LF], [LG] need only hold at the pairs the run visits; [r] is the
    step's distance to the exact inverse at [a], [d] the distance of the
    exact inverse of the stored output to the stored input. *)
Definition coupling_apost_hyp (rnd : R -> R) (n : nat) (F G : list R -> list R) (LF LG : R)
    (l : coupling_layer (list R)) (c : layer_consts) (a x : list R * list R) : Prop :=
  let vg := list_group (rnd_group rnd) in
  let y := layer_forward vg l x in
  0 <= LF /\ 0 <= LG /\ lc_K c = (1 + LF) * (1 + LG) /\ 0 <= lc_r c /\ 0 <= lc_d c /\
  vlip_at n LG G (fst a) (fst y) /\
  vlip_at n LF F (snd (exact_inverse F G a)) (snd (exact_inverse F G y)) /\
  vclose2 n (lc_r c) (layer_inverse vg l a) (exact_inverse F G a) /\
  vclose2 n (lc_d c) (exact_inverse F G y) x.

(** One layer: incoming error [E] at the output gives
    [(1+LF)(1+LG) E + r + d] at the input. *)
Theorem coupling_step_apost : forall rnd n F G LF LG l c a x E,
  coupling_apost_hyp rnd n F G LF LG l c a x -> 0 <= E ->
  vclose2 n E a (layer_forward (list_group (rnd_group rnd)) l x) ->
  vclose2 n (lc_K c * E + (lc_r c + lc_d c)) (layer_inverse (list_group (rnd_group rnd)) l a) x.
Proof.
  intros rnd n F G LF LG l c a x E (HLF & HLG & HK & Hr & Hd & HG & HF & Hra & Hdy) HE Ha.
  pose proof (exact_inverse_lip_at n F G LF LG a _ E HLF HLG HE HG HF Ha) as Hlip.
  rewrite HK.
  replace ((1 + LF) * (1 + LG) * E + (lc_r c + lc_d c))
    with (lc_r c + ((1 + LF) * (1 + LG) * E + lc_d c)) by ring.
  destruct Hra as [Hr1 Hr2]; destruct Hlip as [Hl1 Hl2]; destruct Hdy as [Hd1 Hd2].
  split; (eapply vclose_triangle; [eassumption | eapply vclose_triangle; eassumption]).
Qed.

(** ** The stack the code runs *)

(** Some exact functions [F], [G] and constants [LF], [LG] satisfy the
    per-layer hypothesis (at this layer, these points). *)
Definition coupling_apost_ok (rnd : R -> R) (n : nat) (l : coupling_layer (list R)) (c : layer_consts)
    (a x : list R * list R) : Prop :=
  exists F G LF LG, coupling_apost_hyp rnd n F G LF LG l c a x.

Lemma coupling_apost_ok_step : forall rnd n l c a x E, coupling_apost_ok rnd n l c a x -> 0 <= E ->
  vclose2 n E a (layer_forward (list_group (rnd_group rnd)) l x) ->
  vclose2 n (lc_K c * E + (lc_r c + lc_d c)) (layer_inverse (list_group (rnd_group rnd)) l a) x.
Proof. intros rnd n l c a x E (F & G & LF & LG & H); eapply coupling_step_apost; eauto. Qed.

Lemma coupling_apost_ok_nonneg : forall rnd n l c a x, coupling_apost_ok rnd n l c a x ->
  0 <= lc_K c /\ 0 <= lc_r c /\ 0 <= lc_d c.
Proof.
  intros rnd n l c a x (F & G & LF & LG & (HLF & HLG & HK & Hr & Hd & _)).
  rewrite HK; repeat split; auto; apply Rmult_le_pos; lra.
Qed.

(** A stack of floating-point coupling layers on vectors of length [n]
    ([stack_forward] / [stack_inverse] of [list_group (rnd_group rnd)],
    the code's algorithm, any rounding [rnd]), with measured constants
    [cs] (layer [i]: [K_i = (1+LF_i)(1+LG_i)], [r_i], [d_i]) satisfying
    [coupling_apost_hyp] along the run: started within [e0] (max-norm,
    both halves) of the stored output, the inverse reconstructs the stored
    input within [apost_bound cs e0]
    [= sum_j (r_j + d_j) prod_(k<j) (1+LF_k)(1+LG_k) + prod_k (...) e0]
    ([apost_bound_closed]). *)
Theorem vec_stack_recon_error_apost : forall rnd n ls cs x a e0,
  apost_ok (layer_forward (list_group (rnd_group rnd))) (layer_inverse (list_group (rnd_group rnd)))
    (coupling_apost_ok rnd n) ls cs x a ->
  0 <= e0 ->
  vclose2 n e0 a (stack_forward (list_group (rnd_group rnd)) ls x) ->
  vclose2 n (apost_bound cs e0) (stack_inverse (list_group (rnd_group rnd)) ls a) x.
Proof.
  intros rnd n ls cs x a e0 Hok He Ha.
  apply (apost_recon_error (layer_forward (list_group (rnd_group rnd)))
           (layer_inverse (list_group (rnd_group rnd))) (vclose2 n) (coupling_apost_ok rnd n)); auto.
  - exact (coupling_apost_ok_step rnd n).
  - exact (coupling_apost_ok_nonneg rnd n).
Qed.

(** The same, with all prefix products of the measured [K_k] at most [P]:
    error [<= P (sum_j (r_j + d_j) + e0)]. *)
Corollary vec_stack_recon_error_apost_small : forall rnd n ls cs x a e0 P,
  apost_ok (layer_forward (list_group (rnd_group rnd))) (layer_inverse (list_group (rnd_group rnd)))
    (coupling_apost_ok rnd n) ls cs x a ->
  0 <= e0 ->
  (forall p, In p (prefix_products (map lc_K cs)) -> p <= P) ->
  vclose2 n e0 a (stack_forward (list_group (rnd_group rnd)) ls x) ->
  vclose2 n (P * (lsum (map (fun c => lc_r c + lc_d c) cs) + e0))
    (stack_inverse (list_group (rnd_group rnd)) ls a) x.
Proof.
  intros rnd n ls cs x a e0 P Hok He HP Ha.
  apply (apost_recon_error_small_products (layer_forward (list_group (rnd_group rnd)))
           (layer_inverse (list_group (rnd_group rnd))) (vclose2 n) (coupling_apost_ok rnd n)); auto.
  - exact (coupling_apost_ok_step rnd n).
  - exact (coupling_apost_ok_nonneg rnd n).
  - intros; eapply vclose2_mono; eauto.
Qed.
(** ** The resulting gradient error (generic) *)

(** Measured constants of one layer's backward [vjp l x dy = (dx, dp)]
    at its stored point: [dx] moves by at most [gc_J G + gc_M E] and
    [dp] by at most [gc_JP G + gc_MP E] when the input moves by [E] and
    the incoming cotangent by [G]. *)
Record grad_consts : Type := mk_gconsts { gc_J : R; gc_M : R; gc_JP : R; gc_MP : R }.

Section GradientAPosteriori.
Context {S D P L : Type} (apply invert : L -> S -> S) (vjp : L -> S -> D -> D * P).
Variables (closeS : R -> S -> S -> Prop) (closeD : R -> D -> D -> Prop) (closeP : R -> P -> P -> Prop).
Variable layer_hyp : L -> layer_consts -> S -> S -> Prop.
Hypothesis layer_step : forall l c a x E, layer_hyp l c a x -> 0 <= E ->
  closeS E a (apply l x) -> closeS (lc_K c * E + (lc_r c + lc_d c)) (invert l a) x.
Hypothesis layer_consts_nonneg : forall l c a x, layer_hyp l c a x ->
  0 <= lc_K c /\ 0 <= lc_r c /\ 0 <= lc_d c.

(** The backward of layer [l] at stored input [x] and stored incoming
    cotangent [d], for inputs within [E] and cotangents within [G]. *)
Definition vjp_hyp (l : L) (q : grad_consts) (x : S) (d : D) (E G : R) : Prop :=
  forall a d', closeS E a x -> closeD G d' d ->
  closeD (gc_J q * G + gc_M q * E) (fst (vjp l a d')) (fst (vjp l x d)) /\
  closeP (gc_JP q * G + gc_MP q * E) (snd (vjp l a d')) (snd (vjp l x d)).

(** Bound on the input-gradient error: [G_i = J_i G_(i+1) + M_i E_i],
    [E_i = apost_bound] at layer [i], [G_N = g0]. *)
Fixpoint grad_bound (cs : list layer_consts) (qs : list grad_consts) (e0 g0 : R) : R :=
  match cs, qs with
  | c :: cs', q :: qs' => gc_J q * grad_bound cs' qs' e0 g0 + gc_M q * apost_bound (c :: cs') e0
  | _, _ => g0
  end.

(** Bounds on the parameter-gradient errors, in layer order. *)
Fixpoint param_bounds (cs : list layer_consts) (qs : list grad_consts) (e0 g0 : R) : list R :=
  match cs, qs with
  | c :: cs', q :: qs' =>
      (gc_JP q * grad_bound cs' qs' e0 g0 + gc_MP q * apost_bound (c :: cs') e0) :: param_bounds cs' qs' e0 g0
  | _, _ => []
  end.

(** [ps] and [ps'] are within the bounds [bs], entry by entry. *)
Fixpoint close_list (bs : list R) (ps ps' : list P) : Prop :=
  match bs, ps, ps' with
  | [], [], [] => True
  | b :: bs', p :: ps1, p' :: ps1' => closeP b p p' /\ close_list bs' ps1 ps1'
  | _, _, _ => False
  end.

(** The per-layer hypotheses along the run (stored input [x], stored
    output cotangent [dy]). *)
Fixpoint grad_ok (ls : list L) (cs : list layer_consts) (qs : list grad_consts)
    (x a : S) (dy : D) (e0 g0 : R) : Prop :=
  match ls, cs, qs with
  | [], [], [] => True
  | l :: ls', c :: cs', q :: qs' =>
      layer_hyp l c (run_inverse invert ls' a) x /\
      vjp_hyp l q x (fst (backprop_stored vjp ls' (fst (forward_acts apply ls' (apply l x))) dy))
        (apost_bound (c :: cs') e0) (grad_bound cs' qs' e0 g0) /\
      grad_ok ls' cs' qs' (apply l x) a dy e0 g0
  | _, _, _ => False
  end.

Lemma grad_ok_apost_ok : forall ls cs qs x a dy e0 g0, grad_ok ls cs qs x a dy e0 g0 ->
  apost_ok apply invert layer_hyp ls cs x a.
Proof.
  induction ls as [|l ls IH]; intros [|c cs] [|q qs] x a dy e0 g0 Hok; simpl in *; try tauto.
  destruct Hok as (Hl & _ & Hok); split; eauto.
Qed.

Lemma backprop_reversible_state : forall ls a dy,
  fst (fst (backprop_reversible invert vjp ls a dy)) = run_inverse invert ls a.
Proof.
  intros ls a dy; unfold backprop_reversible, run_inverse.
  generalize (@nil P); revert a dy.
  induction (rev ls) as [|l rs IH]; intros a dy gs; simpl; auto.
  destruct (vjp l (invert l a) dy); apply IH.
Qed.

(** Reversible backprop from an output within [e0] of the stored one
    and an output cotangent within [g0]: the reconstructed input is
    within [apost_bound], the input gradient within [grad_bound] and the
    parameter gradients within [param_bounds] of ordinary backprop's. *)
Theorem apost_grad_error : forall ls cs qs x a dy dy' e0 g0,
  grad_ok ls cs qs x a dy e0 g0 -> 0 <= e0 ->
  closeS e0 a (snd (forward_acts apply ls x)) -> closeD g0 dy' dy ->
  let '(x', dx', gs') := backprop_reversible invert vjp ls a dy' in
  let '(dx, gs) := backprop_stored vjp ls (fst (forward_acts apply ls x)) dy in
  closeS (apost_bound cs e0) x' x /\ closeD (grad_bound cs qs e0 g0) dx' dx /\
  close_list (param_bounds cs qs e0 g0) gs' gs.
Proof.
  induction ls as [|l ls IH]; intros [|c cs] [|q qs] x a dy dy' e0 g0 Hok He Ha Hd;
    simpl in Hok; try tauto.
  - simpl in *; auto.
  - destruct Hok as (Hl & Hv & Hok).
    specialize (IH cs qs (apply l x) a dy dy' e0 g0 Hok He).
    simpl forward_acts in Ha |- *.
    destruct (forward_acts apply ls (apply l x)) as [acts y] eqn:Eacts.
    simpl in Ha; specialize (IH Ha Hd).
    pose proof (backprop_reversible_state ls a dy') as Hst.
    unfold backprop_reversible, backprop_stored in *; simpl rev; simpl combine.
    rewrite !fold_left_app.
    destruct (fold_left (reversible_step invert vjp) (rev ls) (a, dy', [])) as [[x'' dx''] gs''].
    change (fst (acts, y)) with acts in *.
    destruct (fold_left (stored_step vjp) (rev (combine ls acts)) (dy, [])) as [dx0 gs0].
    destruct IH as (IHx & IHd & IHp).
    simpl in Hst |- *.
    assert (HE : closeS (apost_bound (c :: cs) e0) (invert l x'') x).
    { simpl; rewrite Hst; apply layer_step; auto.
      - eapply (apost_bound_nonneg apply invert layer_hyp layer_consts_nonneg); eauto.
        eapply grad_ok_apost_ok; eauto.
      - rewrite <- Hst; exact IHx. }
    destruct (Hv (invert l x'') dx'') as [Vd Vp]; [exact HE | exact IHd |].
    revert Vd Vp; simpl.
    destruct (vjp l (invert l x'') dx''); destruct (vjp l x dx0); simpl; intros; repeat split; auto.
Qed.

End GradientAPosteriori.

(** The instance: reversible backprop through the floating-point coupling
    stack of [vec_stack_recon_error_apost] (any local backward [vjp],
    e.g. autograd of the layer's code), against ordinary backprop from
    the stored activations, with measured backward constants [qs]. *)
Corollary vec_stack_grad_error_apost : forall {D P : Type} rnd n
    (vjp : coupling_layer (list R) -> list R * list R -> D -> D * P)
    (closeD : R -> D -> D -> Prop) (closeP : R -> P -> P -> Prop) ls cs qs x a dy dy' e0 g0,
  let vg := list_group (rnd_group rnd) in
  grad_ok (layer_forward vg) (layer_inverse vg) vjp (vclose2 n) closeD closeP (coupling_apost_ok rnd n)
    ls cs qs x a dy e0 g0 -> 0 <= e0 ->
  vclose2 n e0 a (stack_forward vg ls x) -> closeD g0 dy' dy ->
  let '(x', dx', gs') := backprop_reversible (layer_inverse vg) vjp ls a dy' in
  let '(dx, gs) := backprop_stored vjp ls (fst (forward_acts (layer_forward vg) ls x)) dy in
  vclose2 n (apost_bound cs e0) x' x /\ closeD (grad_bound cs qs e0 g0) dx' dx /\
  close_list closeP (param_bounds cs qs e0 g0) gs' gs.
Proof.
  intros D P rnd n vjp closeD closeP ls cs qs x a dy dy' e0 g0 vg Hok He Ha Hd.
  apply (apost_grad_error (layer_forward vg) (layer_inverse vg) vjp (vclose2 n) closeD closeP
           (coupling_apost_ok rnd n)); auto.
  - exact (coupling_apost_ok_step rnd n).
  - exact (coupling_apost_ok_nonneg rnd n).
  - rewrite forward_acts_run; exact Ha.
Qed.
