(** * The backward's [delta] premise in ratio form: the forward's weight errors charged
    on [|dp_j - D|].

    The backward kernel's [delta_i = sum_c dO_ic O~_ic] (of the STORED forward output)
    stands for [D_i = sum_j P_ij dp_ij], [dp_ij = dO_i . v_j] ([P] the exact softmax).
    Bounding [|delta - D|] by [sum_c |dO_c| fwd_c] ([fwd] the output's error bound per
    entry) charges each key's weight error [theta_j] on [sum_c |dO_c| |v_jc|].  When the
    kernel's numerator and normaliser carry the SAME perturbed weights, the common
    perturbation cancels in the ratio and only its deviation from the mean is left,
    charged on [|dp_j - D|], about [sqrt E] smaller for unstructured [dO] and [v].

    Results (one query row; any index type [T] for the keys, [cs] the coordinates):
    - [reweighted_mean_error]: with weights [Lc P_j (1 + th_j)], [|th_j| <= t_j],
      [sum_j P_j t_j <= tb < 1], [Lc > 0],
        |sum_j w_j dp_j / sum_j w_j - D| <= sum_j P_j (t_j + tb) |dp_j - D| / (1 - tb).
    - [attention_delta_ratio_error]: the kernel's representation, numerator weights
      [Lc P_j (1 + a_j)] and normaliser weights [Lc P_j (1 + b_j)] ([|b_j| <= t_j],
      [|a_j - b_j| <= s_j]: the storage rounding of [p]), each coordinate's accumulator
      [sum_j Lc P_j (1 + a_j) v_jc + E_c], [l = (sum_j Lc P_j (1 + b_j)) (1 + lam)]
      ([|lam| <= lb < 1]) and the stored output within [ur |out_c| + er] of [acc_c / l]:
        |sum_c dO_c out_c - D|
          <= (sum_j P_j (t_j + tb) |dp_j - D| + sum_j P_j s_j |dp_j|
              + sum_c |dO_c| |E_c| / Lc) / ((1 - tb) (1 - lb))
             + lb / (1 - lb) |D| + sum_c |dO_c| (ur |out_c| + er).
      The representation of the forward kernel's tile loop is a premise here. *)

From Coq Require Import Reals List Lra.
From Flocq Require Import Raux.
From Ojas Require Import VectorFacts Attention.BackwardCorrect.
Import ListNotations.
Open Scope R_scope.

Lemma drw_rsum_abs_le : forall {T} (f g : T -> R) (l : list T),
  (forall j, In j l -> Rabs (f j) <= g j) -> Rabs (rsum (map f l)) <= rsum (map g l).
Proof. intros T f g l H; eapply Rle_trans; [apply bw_rsum_abs | apply bw_rsum_le; exact H]. Qed.

(** ** The re-weighted mean

    With [w~_j = Lc P_j (1 + th_j)] ([P] the exact softmax, [|th_j| <= t_j], [sum_j P_j t_j <= tb < 1]):
    [|sum_j w~_j dp_j / sum_j w~_j - sum_j P_j dp_j| <= sum_j P_j (t_j + tb) |dp_j - D| / (1 - tb)],
    [D = sum_j P_j dp_j]: the weights' errors charged on [|dp_j - D|], not on [|dp_j|]. *)
Theorem reweighted_mean_error : forall {T} (l : list T) (P th t dp : T -> R) (Lc D tb : R),
  (forall j, In j l -> 0 <= P j) -> rsum (map P l) = 1 ->
  (forall j, In j l -> Rabs (th j) <= t j) ->
  rsum (map (fun j => P j * t j) l) <= tb -> tb < 1 ->
  D = rsum (map (fun j => P j * dp j) l) -> 0 < Lc ->
  Rabs (rsum (map (fun j => Lc * P j * (1 + th j) * dp j) l) / rsum (map (fun j => Lc * P j * (1 + th j)) l) - D)
    <= rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l) / (1 - tb).
Proof.
  intros T l P th t dp Lc D tb HP H1 Hth Htb Htb1 HD HLc.
  set (thb := rsum (map (fun j => P j * th j) l)).
  assert (Hthb : Rabs thb <= tb).
  { eapply Rle_trans; [| exact Htb]; apply drw_rsum_abs_le; intros j Hj.
    rewrite Rabs_mult, (Rabs_right (P j)) by (apply Rle_ge, HP, Hj).
    apply Rmult_le_compat_l; [apply HP, Hj | apply Hth, Hj]. }
  assert (Hthb2 : - tb <= thb <= tb) by (split; [apply Ropp_le_cancel; rewrite Ropp_involutive; eapply Rle_trans; [apply Rle_abs|]; rewrite Rabs_Ropp; exact Hthb | eapply Rle_trans; [apply Rle_abs | exact Hthb]]).
  assert (Hs : rsum (map (fun j => Lc * P j * (1 + th j)) l) = Lc * (1 + thb)).
  { rewrite (rsum_map_ext _ (fun j => Lc * (P j + P j * th j))) by (intros; ring).
    rewrite rsum_map_scal_l, rsum_map_plus, H1; reflexivity. }
  assert (Hn : rsum (map (fun j => Lc * P j * (1 + th j) * dp j) l)
               = Lc * (D + rsum (map (fun j => P j * th j * dp j) l))).
  { rewrite (rsum_map_ext _ (fun j => Lc * (P j * dp j + P j * th j * dp j))) by (intros; ring).
    rewrite rsum_map_scal_l, rsum_map_plus, <- HD; reflexivity. }
  assert (Hc : rsum (map (fun j => P j * (th j - thb) * (dp j - D)) l)
               = rsum (map (fun j => P j * th j * dp j) l) - thb * D).
  { rewrite (rsum_map_ext _ (fun j => P j * th j * dp j + ((- D) * (P j * th j)
               + ((- thb) * (P j * dp j) + (thb * D) * P j)))) by (intros; ring).
    rewrite !rsum_map_plus, !rsum_map_scal_l, <- HD, H1; fold thb; ring. }
  assert (Hpos : 0 < 1 + thb) by lra.
  rewrite Hs, Hn.
  replace (Lc * (D + rsum (map (fun j => P j * th j * dp j) l)) / (Lc * (1 + thb)) - D)
    with (rsum (map (fun j => P j * (th j - thb) * (dp j - D)) l) / (1 + thb))
    by (rewrite Hc; field; lra).
  unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ (1 + thb))) by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; lra).
  assert (Hb : Rabs (rsum (map (fun j => P j * (th j - thb) * (dp j - D)) l))
               <= rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l)).
  { apply drw_rsum_abs_le; intros j Hj.
    rewrite !Rabs_mult, (Rabs_right (P j)) by (apply Rle_ge, HP, Hj).
    apply Rmult_le_compat_r; [apply Rabs_pos |].
    apply Rmult_le_compat_l; [apply HP, Hj |].
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp.
    assert (Rabs (th j) <= t j) by (apply Hth, Hj).
    assert (Rabs thb <= tb) by (apply Rabs_le; lra).
    lra. }
  assert (Hnn : 0 <= rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l))
    by (eapply Rle_trans; [apply Rabs_pos | exact Hb]).
  assert (Hi : / (1 + thb) <= / (1 - tb)) by (apply Rinv_le_contravar; lra).
  apply Rmult_le_compat; auto using Rabs_pos; left; apply Rinv_0_lt_compat; lra.
Qed.

(** ** The backward's [delta] from the forward kernel's representation *)

Lemma drw_rsum_swap : forall {A B} (f : A -> B -> R) (xs : list A) (ys : list B),
  rsum (map (fun x => rsum (map (fun y => f x y) ys)) xs) = rsum (map (fun y => rsum (map (fun x => f x y) xs)) ys).
Proof.
  intros A B f xs ys; induction xs as [|x xs IH]; cbn [map].
  - rewrite rsum_nil; symmetry; apply rsum_map_zero; intros y _; cbn [map]; apply rsum_nil.
  - rewrite rsum_cons, IH.
    rewrite <- rsum_map_plus; apply rsum_map_ext; intros y _; cbn [map]; rewrite rsum_cons; reflexivity.
Qed.

Lemma drw_rsum_nonneg : forall {T} (f : T -> R) (l : list T), (forall j, In j l -> 0 <= f j) -> 0 <= rsum (map f l).
Proof.
  intros T f l H; apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx; destruct Hx as [j [<- Hj]]; apply H, Hj.
Qed.

(** The kernel's representation of one query row (see the header) gives [|sum_c dO_c out_c - D|]:
    the normaliser's weight errors [b] re-weighted ([reweighted_mean_error]), the storage
    rounding [a - b] and the accumulation errors [E] on [|dp_j|] and [|dO_c|], [l]'s fold
    [lam] on [|D|], the store on [|dO_c|]. *)
Theorem attention_delta_ratio_error : forall {T} (l : list T) (cs : list nat) (P a b t s : T -> R) (v : T -> nat -> R)
    (dO E out : nat -> R) (Lc Lk lam tb lb ur er : R),
  let dp := fun j => rsum (map (fun c => dO c * v j c) cs) in
  let D := rsum (map (fun j => P j * dp j) l) in
  (forall j, In j l -> 0 <= P j) -> rsum (map P l) = 1 ->
  (forall j, In j l -> Rabs (b j) <= t j) ->
  (forall j, In j l -> Rabs (a j - b j) <= s j) ->
  rsum (map (fun j => P j * t j) l) <= tb -> tb < 1 -> 0 < Lc ->
  Lk = rsum (map (fun j => Lc * P j * (1 + b j)) l) * (1 + lam) -> Rabs lam <= lb -> lb < 1 ->
  (forall c, In c cs ->
     Rabs (out c - (rsum (map (fun j => Lc * P j * (1 + a j) * v j c) l) + E c) / Lk) <= ur * Rabs (out c) + er) ->
  Rabs (rsum (map (fun c => dO c * out c) cs) - D)
  <= (rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l)
      + rsum (map (fun j => P j * s j * Rabs (dp j)) l)
      + rsum (map (fun c => Rabs (dO c) * Rabs (E c)) cs) / Lc) / ((1 - tb) * (1 - lb))
     + lb / (1 - lb) * Rabs D
     + rsum (map (fun c => Rabs (dO c) * (ur * Rabs (out c) + er)) cs).
Proof.
  intros T l cs P a b t s v dO E out Lc Lk lam tb lb ur er dp D HP H1 Hb Hab Htb Htb1 HLc HLk Hlam Hlb Hout.
  set (thb := rsum (map (fun j => P j * b j) l)).
  assert (Hthb : Rabs thb <= tb).
  { eapply Rle_trans; [| exact Htb]; apply drw_rsum_abs_le; intros j Hj.
    rewrite Rabs_mult, (Rabs_right (P j)) by (apply Rle_ge, HP, Hj).
    apply Rmult_le_compat_l; [apply HP, Hj | apply Hb, Hj]. }
  assert (Hthb2 : - tb <= thb <= tb) by (apply Rabs_le_inv; exact Hthb).
  set (Sw := rsum (map (fun j => Lc * P j * (1 + b j)) l)).
  assert (ESw : Sw = Lc * (1 + thb)).
  { unfold Sw; rewrite (rsum_map_ext _ (fun j => Lc * (P j + P j * b j))) by (intros; ring).
    rewrite rsum_map_scal_l, rsum_map_plus, H1; reflexivity. }
  assert (HSw : Lc * (1 - tb) <= Sw) by (rewrite ESw; apply Rmult_le_compat_l; lra).
  assert (HSw0 : 0 < Sw) by (assert (0 < Lc * (1 - tb)) by (apply Rmult_lt_0_compat; lra); lra).
  assert (Hlam2 : - lb <= lam <= lb) by (apply Rabs_le_inv; exact Hlam).
  assert (Hl0 : 0 < 1 + lam) by lra.
  (* the numerators' sum over the coordinates *)
  set (Nn := rsum (map (fun j => Lc * P j * (1 + a j) * dp j) l)).
  set (Ec := rsum (map (fun c => dO c * E c) cs)).
  set (x := fun c => (rsum (map (fun j => Lc * P j * (1 + a j) * v j c) l) + E c) / Lk).
  assert (Ex : rsum (map (fun c => dO c * x c) cs) = (Nn + Ec) / Lk).
  { unfold x, Nn, Ec, Rdiv.
    assert (Hc : forall c, rsum (map (fun j => Lc * P j * (1 + a j) * v j c) l) * dO c
                           = rsum (map (fun j => Lc * P j * (1 + a j) * (dO c * v j c)) l)).
    { intros c; rewrite Rmult_comm, <- rsum_map_scal_l; apply rsum_map_ext; intros; ring. }
    rewrite (rsum_map_ext _ (fun c => / Lk * (rsum (map (fun j => Lc * P j * (1 + a j) * (dO c * v j c)) l) + dO c * E c))).
    2:{ intros c _; rewrite <- Hc; ring. }
    rewrite rsum_map_scal_l, rsum_map_plus, Rmult_comm; f_equal; f_equal.
    rewrite <- drw_rsum_swap; apply rsum_map_ext; intros j _; unfold dp.
    rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros c _; ring. }
  set (Q := rsum (map (fun j => Lc * P j * (1 + b j) * dp j) l) / Sw).
  set (Aab := rsum (map (fun j => P j * (a j - b j) * dp j) l)).
  assert (ENn : Nn = Sw * Q + Lc * Aab).
  { unfold Q; field_simplify; [| lra].
    unfold Nn, Aab; rewrite <- rsum_map_scal_l, <- rsum_map_plus; apply rsum_map_ext; intros; ring. }
  assert (HQ : Rabs (Q - D) <= rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l) / (1 - tb))
    by (unfold Q, Sw; apply (reweighted_mean_error l P b t dp Lc D tb HP H1 Hb Htb Htb1 eq_refl HLc)).
  assert (HA : Rabs Aab <= rsum (map (fun j => P j * s j * Rabs (dp j)) l)).
  { apply drw_rsum_abs_le; intros j Hj; rewrite !Rabs_mult, (Rabs_right (P j)) by (apply Rle_ge, HP, Hj).
    apply Rmult_le_compat_r; [apply Rabs_pos | apply Rmult_le_compat_l; [apply HP, Hj | apply Hab, Hj]]. }
  assert (HE : Rabs Ec <= rsum (map (fun c => Rabs (dO c) * Rabs (E c)) cs))
    by (apply drw_rsum_abs_le; intros c _; rewrite Rabs_mult; lra).
  assert (Hout' : Rabs (rsum (map (fun c => dO c * out c) cs) - rsum (map (fun c => dO c * x c) cs))
                  <= rsum (map (fun c => Rabs (dO c) * (ur * Rabs (out c) + er)) cs)).
  { replace (rsum (map (fun c => dO c * out c) cs) - rsum (map (fun c => dO c * x c) cs))
      with (rsum (map (fun c => dO c * (out c - x c)) cs)).
    2:{ rewrite (rsum_map_ext _ (fun c => dO c * out c + (-1) * (dO c * x c))) by (intros; ring).
        rewrite rsum_map_plus, rsum_map_scal_l; ring. }
    apply drw_rsum_abs_le; intros c Hc; rewrite Rabs_mult; apply Rmult_le_compat_l; [apply Rabs_pos | apply Hout, Hc]. }
  (* the ratio *)
  set (R1 := rsum (map (fun j => P j * (t j + tb) * Rabs (dp j - D)) l)) in *.
  set (R2 := rsum (map (fun j => P j * s j * Rabs (dp j)) l)) in *.
  set (R3 := rsum (map (fun c => Rabs (dO c) * Rabs (E c)) cs)) in *.
  set (R4 := rsum (map (fun c => Rabs (dO c) * (ur * Rabs (out c) + er)) cs)) in *.
  assert (ER : (Nn + Ec) / Lk - D = ((Q - D) + (Lc * Aab + Ec) / Sw) / (1 + lam) - lam / (1 + lam) * D).
  { rewrite HLk; fold Sw; rewrite ENn; field; split; apply Rgt_not_eq; lra. }
  assert (HR0 : 0 <= R1).
  { apply drw_rsum_nonneg; intros j Hj; pose proof (Rabs_pos (b j)); pose proof (Hb j Hj); pose proof (Rabs_pos thb).
    pose proof (HP j Hj); pose proof (Rabs_pos (dp j - D)); apply Rmult_le_pos; [apply Rmult_le_pos |]; lra. }
  assert (HR2 : 0 <= R2) by (eapply Rle_trans; [apply Rabs_pos | exact HA]).
  assert (HR3 : 0 <= R3) by (eapply Rle_trans; [apply Rabs_pos | exact HE]).
  assert (HB1 : Rabs (Q - D) + Rabs ((Lc * Aab + Ec) / Sw) <= (R1 + R2 + R3 / Lc) / (1 - tb)).
  { assert (Rabs ((Lc * Aab + Ec) / Sw) <= (Lc * R2 + R3) / (Lc * (1 - tb))).
    { unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ Sw)) by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; lra).
      apply Rmult_le_compat; [apply Rabs_pos | left; apply Rinv_0_lt_compat; lra | |].
      - eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult, (Rabs_right Lc) by lra.
        apply Rplus_le_compat; [apply Rmult_le_compat_l; lra | exact HE].
      - apply Rinv_le_contravar; [apply Rmult_lt_0_compat; lra | exact HSw]. }
    replace ((R1 + R2 + R3 / Lc) / (1 - tb)) with (R1 / (1 - tb) + (Lc * R2 + R3) / (Lc * (1 - tb)))
      by (field; lra).
    lra. }
  replace (rsum (map (fun c => dO c * out c) cs) - D)
    with ((rsum (map (fun c => dO c * out c) cs) - rsum (map (fun c => dO c * x c) cs)) + ((Nn + Ec) / Lk - D))
    by (rewrite Ex; ring).
  eapply Rle_trans; [apply Rabs_triang |]; rewrite ER.
  assert (Hdiv : Rabs (((Q - D) + (Lc * Aab + Ec) / Sw) / (1 + lam)) <= (R1 + R2 + R3 / Lc) / ((1 - tb) * (1 - lb))).
  { unfold Rdiv at 1; rewrite Rabs_mult, (Rabs_right (/ (1 + lam))) by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; lra).
    replace ((R1 + R2 + R3 / Lc) / ((1 - tb) * (1 - lb))) with ((R1 + R2 + R3 / Lc) / (1 - tb) * / (1 - lb)) by (field; lra).
    apply Rmult_le_compat; [apply Rabs_pos | left; apply Rinv_0_lt_compat; lra | |].
    - eapply Rle_trans; [apply Rabs_triang | exact HB1].
    - apply Rinv_le_contravar; lra. }
  assert (Hlamt : Rabs (lam / (1 + lam) * D) <= lb / (1 - lb) * Rabs D).
  { rewrite Rabs_mult; apply Rmult_le_compat_r; [apply Rabs_pos |].
    unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ (1 + lam))) by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; lra).
    apply Rmult_le_compat; [apply Rabs_pos | left; apply Rinv_0_lt_compat; lra | exact Hlam | apply Rinv_le_contravar; lra]. }
  pose proof (Rabs_triang (((Q - D) + (Lc * Aab + Ec) / Sw) / (1 + lam)) (- (lam / (1 + lam) * D))) as Ht.
  rewrite Rabs_Ropp in Ht.
  replace (((Q - D) + (Lc * Aab + Ec) / Sw) / (1 + lam) - lam / (1 + lam) * D)
    with (((Q - D) + (Lc * Aab + Ec) / Sw) / (1 + lam) + - (lam / (1 + lam) * D)) by ring.
  lra.
Qed.
