(** * A-posteriori reconstruction error of reversible coupling stacks.

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

    Covered: the reconstruction error.  Not covered: the resulting
    gradient error (the gradients are the ordinary ones at the
    reconstructed activations, [Gradient.v]; how far they move with the
    activations needs Lipschitz constants of the backward maps, not done
    here); soundness of a test's measurement of [r_i], [d_i], [LF_i],
    [LG_i] (a float64 reference stands in for exact arithmetic there). *)

From Coq Require Import List Reals Lra Lia.
From Ojas Require Import Reversible.Coupling Reversible.Stack Reversible.FloatError.
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
