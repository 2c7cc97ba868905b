(** * The attention backward's dQ and dK from the inputs: the forward's saved lse and output composed in.

    [dq_error] and [dk_error] (DkDqError.v) bound the backward kernels' coordinates given the
    errors of what they read from the forward as premises: [|lse2 ln 2 - LSE| <= Dl] for
    [lse2 = rnd (lse * c2)], and [|delta - D| <= eD] for the dQ kernel's
    [delta = tl.sum (o * dO)].  Here both are discharged, row by row ([forward_row_close]):
    - [lse] is the forward kernel's saved log-sum-exp of the row ([fwd_lse]: its loop from its
      start under the mask, [rnd (rnd (m + lg l) * cl)]), within [Lb] of the exact [LSE] by
      [attention_lse_error_masked] (SavedLseError.v); [lse2_close] (DvError.v) turns that into
      [Dl = chain_Dl] and the magnitude [Am = chain_Am] ([|LSE| <= Lm]);
    - [o] is the forward kernel's stored output row ([fwd_o], one run per value coordinate),
      each coordinate within [r W_c + a] of the exact [O_c] by
      [attention_forward_posteriori_masked] (ForwardPosteriori.v), [W_c = sum_j P_j |v_jc|];
      [delta] is [tl.sum] of the rounded products [o_c dO_c] by any tree of depth at most [Dd]
      ([delta_close]); the two compose by [dot_R_perturb_each] into [chain_eD], against
      [D = dO . O] of the EXACT output.
    [fwd_consts] bundles what the forward theorems ask of the model's constants (upper bounds
    [X, Y, P1, CG, CR] with [afe_premises], [(r, a)] at least [(afp_rel, afp_abs)], [Lb] at least
    the lse's [lse_bound], [tl.log2]'s range): exactly what Bounds/Attention.v's
    [attn_fwd_post_q_spec] and [attn_lse_q_spec] give, nothing about the kernels' outputs.

    [dq_error_from_forward] (one query row) and [dk_error_from_forward] (one key; its rows, of
    any type [T], each with its own forward: [dk_kernel_rows], [dk_kernel]'s schedule) are then
    [dq_error] and [grad_error] at these [Dl], [Am] and [eD]: their premises are about the inputs
    (lengths, [sum |q k| <= P], [|v| <= V], [|LSE| <= Lm], [sum |dO v| <= Pd], [|dP - D| <= Ym],
    [|w| <= W], [chain_eD <= eD]: closed forms of the data), the rounding model and its
    constants ([fwd_consts], [X]), the kernels' tilings, the [tl.log2] accuracy on
    [[lmin, lmax]] (a Section hypothesis as in SavedLseError.v) and the [delta] tree; none
    about the error of [lse] or [delta].

    The forward is stated per value coordinate [j < Ev]: its tiles [fts j] of (key, [v_j])
    pairs and mask [fvis j] (for the kernel, the same key tiles and mask for every [j]); the
    lse is coordinate [0]'s run (the running max and sum do not read the values).  The exact
    dQ / dK is the gradient when the backward's visible keys / queries are the forward's
    ([attention_backward_dQ_is_derive], [attention_backward_dK_is_derive], BackwardCorrect.v).
    The scores' and [dp]'s dots are the blocked fp32 dot ([score2], [blocked_dot]) as in
    [dq_error], [dk_error], [attention_lse_error_masked] and [attention_forward_posteriori_masked].

    The GPU's dots: [dq_error_acc_from_forward] and [dk_error_acc_from_forward] compose the same
    way [dq_error_acc] / [grad_error_acc_with] (any scores' dot [sdot] of a [dot_model], in the
    forward too: [fwd_consts_with], [forward_row_close_with] with [attention_lse_error_masked_dot]
    and [attention_forward_posteriori_masked_dot]; [dp]'s [pdot]; the tiles accumulated by any
    [acc_dot_model], e.g. the H100's 3xTF32 and tensor-core instances of ForwardError.v).

    Not covered: as in those theorems (the order inside the MMAs for the blocked fp32 dot, FMA
    contraction, [tl.sum]'s padding zeros, additive masks, overflow, [exp2]'s error a field of
    the model; the forward's P.V modelled as fp32 products summed per tile). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.ForwardPosteriori Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.DvError Attention.Float.DkDqError.
Import ListNotations.
Open Scope R_scope.

(** [|dO . o - dO . O| <= sum_c e_c |dO_c|] when every coordinate of [o] is
    within its own [e_c] of [O]'s ([dot_R_perturb] with one [e] for all). *)
Theorem dot_R_perturb_each : forall o O es d, length o = length O -> length es = length o ->
  (forall i, (i < length o)%nat -> Rabs (nth i o 0 - nth i O 0) <= nth i es 0) ->
  Rabs (dot_R o d - dot_R O d) <= dot_R es (map Rabs d).
Proof.
  induction o as [|x o IH]; intros [|y O] [|z es] d Hl He H; try discriminate.
  - unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - destruct d as [|w d].
    + unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    + assert (Hx : Rabs (x - y) <= z) by exact (H 0%nat ltac:(simpl; lia)).
      assert (IHo : Rabs (dot_R o d - dot_R O d) <= dot_R es (map Rabs d)).
      { apply IH; [simpl in Hl; lia | simpl in He; lia |].
        intros i Hi; exact (H (S i) ltac:(simpl; lia)). }
      unfold dot_R in *; cbn [combine map]; rewrite !rsum_cons; cbn [fst snd].
      set (a := rsum (map (fun xy => fst xy * snd xy) (combine o d))) in *.
      set (b := rsum (map (fun xy => fst xy * snd xy) (combine O d))) in *.
      replace (x * w + a - (y * w + b)) with ((x - y) * w + (a - b)) by ring.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
      assert (Rabs (x - y) * Rabs w <= z * Rabs w) by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hx]).
      lra.
Qed.

Lemma nth_map_seq : forall (f : nat -> R) n i, (i < n)%nat -> nth i (map f (seq 0 n)) 0 = f i.
Proof.
  intros f n i Hi.
  rewrite (nth_indep _ 0 (f 0%nat)) by (rewrite map_length, seq_length; lia).
  rewrite map_nth, seq_nth by lia; reflexivity.
Qed.

(** [W = sum_j P_j |v_j| >= 0]. *)
Lemma chain_W_nonneg : forall s q keys, 0 <= exact_softmax s q (map abs_value keys).
Proof.
  intros s q keys; unfold exact_softmax; rewrite !map_map.
  exact (proj2 (sm_avg_abs keys (fun kv => s * dot_R q (fst kv)) snd)).
Qed.

Section Chain.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The kernel's [tl.log2], within [el] of [log2] on [[lmin, lmax]] (SavedLseError.v). *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** ** The forward of one query row *)

(** The forward kernel's loop for the query [q] over [tiles] of (key, value
    coordinate) pairs under [vis], its saved lse and its stored output coordinate. *)
Definition fwd_state (c : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) :=
  kernel_run M (list R * R) (fun kv : list R * R => score2 A_ c q (fst kv)) vis (fun kv _ => snd kv)
    (kernel_start 1) tiles.

Definition fwd_lse (c cl : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  rnd (rnd (m_use (ks_m (fwd_state c q vis tiles)) + lg (ks_l (fwd_state c q vis tiles))) * cl).

Definition fwd_out (c : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  ff_rnd S_ (rnd (nth 0 (ks_acc (fwd_state c q vis tiles)) 0 / ks_l (fwd_state c q vis tiles))).

(** The row's stored output [o] (coordinate [j] from the tiles [fts j] under [fvis j]), the exact
    log-sum-exp, output [O] and [W_j = sum_k P_k |v_kj|]. *)
Definition fwd_o (c : R) (q : list R) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (Ev : nat) : list R :=
  map (fun j => fwd_out c q (fvis j) (fts j)) (seq 0 Ev).

Definition fwd_LSE (scale : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))).

Definition fwd_O (scale : R) (q : list R) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (Ev : nat) : list R :=
  map (fun j => exact_softmax scale q (filter (fvis j) (concat (fts j)))) (seq 0 Ev).

Definition fwd_W (scale : R) (q : list R) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (Ev : nat) : list R :=
  map (fun j => exact_softmax scale q (map abs_value (filter (fvis j) (concat (fts j))))) (seq 0 Ev).

(** The forward's premises on the data of one row, every value coordinate [j < Ev]. *)
Definition fwd_row_ok (q : list R) (E B N Tt : nat) (P V : R) (fvis : nat -> list R * R -> bool)
    (fts : nat -> list (list (list R * R))) (Ev : nat) : Prop :=
  length q = E /\
  forall j, (j < Ev)%nat ->
     (exists kv, In kv (concat (fts j)) /\ fvis j kv = true)
     /\ (forall kv, In kv (concat (fts j)) -> fvis j kv = true ->
           length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V)
     /\ Forall (fun tl => (length tl <= B)%nat) (fts j)
     /\ (length (filter (fvis j) (concat (fts j))) <= N)%nat /\ (length (fts j) <= Tt)%nat.

(** The model's constants for the forward theorems, as Bounds/Attention.v's [attn_lse_q_spec] and
    [attn_fwd_post_q_spec] give them: upper bounds [X, Y, P1, CG, CR] with [afe_premises] and
    [(r, a)] at least [(afp_rel, afp_abs)] ([attention_forward_posteriori_masked]); upper bounds
    for the lse's theorem with [Lb] at least its [lse_bound] and [tl.log2]'s range
    ([attention_lse_error_masked]).  Propositions about the model's constants only. *)
Record fwd_consts (c scale uc P V cl ucl LN Lb r a : R) (E B N Tt : nat) : Prop := {
  fc_post : exists X Y P1 CG CR, afe_premises M c scale uc P V X Y P1 CG CR E B N Tt
    /\ afp_rel u ue ee ea us B N Tt X Y P1 CG CR <= r /\ afp_abs u ue ee ea us es V B N Tt X P1 CG CR <= a;
  fc_lse : exists X P1 CG CR NL,
    Rpower 2 (u * (2 * score_max A_ scale uc E P)) <= X
    /\ (1 + u) ^ (B - 1) <= P1 /\ cg M ^ Tt <= CG /\ cr M ^ Tt <= CR
    /\ afe_bL u ue ee ea B N Tt X P1 CG CR < 1
    /\ - ln (1 - afe_bL u ue ee ea B N Tt X P1 CG CR) <= NL
    /\ lmin <= 1 - afe_bL u ue ee ea B N Tt X P1 CG CR
    /\ (1 + afe_bL u ue ee ea B N Tt X P1 CG CR) * exp LN <= lmax
    /\ lse_bound u ea el ucl (score_max A_ scale uc E P) (score_delta A_ scale uc E P) LN NL <= Lb;
  fc_ucl : 0 <= ucl;
  fc_cl : Rabs (cl - ln 2) <= ucl * ln 2;
  fc_LN : ln (INR N) <= LN
}.

(** The closed forms: [lse2]'s error [Dl] and the magnitude [Am] of [s2 - lse2] from the lse's
    bound [Lb] and [|LSE| <= Lm] ([lse2_close]); [delta]'s error against [dO . O]
    ([delta_close] with [T1 = sum_c |o_c dO_c|], and [sum_c (r W_c + a) |dO_c|]). *)
Definition chain_Dl (uc2 Lb Lm : R) : R := Lb + (Lm + Lb) * (u * (1 + uc2) + uc2) + ea.
Definition chain_Am (uc2 smax Lb Lm : R) : R := smax + (2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea).
Definition chain_eD (Dd Ev : nat) (T1 r a : R) (Ws dO : list R) : R :=
  gamma u Dd * ((1 + u) * T1 + INR Ev * ea) + u * T1 + INR Ev * ea + dot_R (map (fun w => r * w + a) Ws) (map Rabs dO).

(** ** Any dots: the scores' [sdot] with its [dot_model] (ForwardError.v, PART B')

    The forward's loop, lse and output with the scores' dot [sdot] ([fwd_state] is
    [fwd_state_with (bdot A_)]), the constants of the [_dot] forward theorems
    ([attention_lse_error_masked_dot], [attention_forward_posteriori_masked_dot]) at the dot's
    error [g_rel P + g_abs], and the row's closeness; [forward_row_close] is its blocked fp32
    instance. *)
Definition fwd_state_with (sdot : list R -> list R -> R) (c : R) (q : list R) (vis : list R * R -> bool)
    (tiles : list (list (list R * R))) :=
  kernel_run M (list R * R) (fun kv : list R * R => score2_with A_ sdot c q (fst kv)) vis (fun kv _ => snd kv)
    (kernel_start 1) tiles.

Definition fwd_lse_with (sdot : list R -> list R -> R) (c cl : R) (q : list R) (vis : list R * R -> bool)
    (tiles : list (list (list R * R))) : R :=
  rnd (rnd (m_use (ks_m (fwd_state_with sdot c q vis tiles)) + lg (ks_l (fwd_state_with sdot c q vis tiles))) * cl).

Definition fwd_out_with (sdot : list R -> list R -> R) (c : R) (q : list R) (vis : list R * R -> bool)
    (tiles : list (list (list R * R))) : R :=
  ff_rnd S_ (rnd (nth 0 (ks_acc (fwd_state_with sdot c q vis tiles)) 0 / ks_l (fwd_state_with sdot c q vis tiles))).

Definition fwd_o_with (sdot : list R -> list R -> R) (c : R) (q : list R) (fvis : nat -> list R * R -> bool)
    (fts : nat -> list (list (list R * R))) (Ev : nat) : list R :=
  map (fun j => fwd_out_with sdot c q (fvis j) (fts j)) (seq 0 Ev).

Record fwd_consts_with (sdot : list R -> list R -> R) (g_rel g_abs c scale uc P V cl ucl LN Lb r a : R)
    (E B N Tt : nat) : Prop := {
  fw_dm : dot_model sdot E g_rel g_abs;
  fw_post : exists X Y P1 CG CR, afe_premises_de M c scale uc P (g_rel * P + g_abs) V X Y P1 CG CR B N Tt
    /\ afp_rel u ue ee ea us B N Tt X Y P1 CG CR <= r /\ afp_abs u ue ee ea us es V B N Tt X P1 CG CR <= a;
  fw_lse : exists X P1 CG CR NL,
    Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X
    /\ (1 + u) ^ (B - 1) <= P1 /\ cg M ^ Tt <= CG /\ cr M ^ Tt <= CR
    /\ afe_bL u ue ee ea B N Tt X P1 CG CR < 1
    /\ - ln (1 - afe_bL u ue ee ea B N Tt X P1 CG CR) <= NL
    /\ lmin <= 1 - afe_bL u ue ee ea B N Tt X P1 CG CR
    /\ (1 + afe_bL u ue ee ea B N Tt X P1 CG CR) * exp LN <= lmax
    /\ lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs))
         (score_delta_de A_ scale uc P (g_rel * P + g_abs)) LN NL <= Lb;
  fw_ucl : 0 <= ucl;
  fw_cl : Rabs (cl - ln 2) <= ucl * ln 2;
  fw_LN : ln (INR N) <= LN
}.

(** The blocked fp32 constants are those of its [dot_model]. *)
Lemma fwd_consts_blocked : forall c scale uc P V cl ucl LN Lb r a E B N Tt,
  fwd_consts c scale uc P V cl ucl LN Lb r a E B N Tt ->
  fwd_consts_with (bdot A_) (gamma u E) ((1 + gamma u (E - 1)) * INR E * ea) c scale uc P V cl ucl LN Lb r a E B N Tt.
Proof.
  intros c scale uc P V cl ucl LN Lb r a E B N Tt [[X [Y [P1 [CG [CR [Hpre [Hr Ha]]]]]]] Hlse Hucl Hcl HLN].
  split; [exact (blocked_dot_model A_ E (afe_E_pos _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)
                   (afe_E_u _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)) | | exact Hlse | exact Hucl | exact Hcl | exact HLN].
  exists X, Y, P1, CG, CR; split; [exact (afe_premises_blocked M _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre) | split; assumption].
Qed.

Lemma forward_row_close_with : forall (sdot : list R -> list R -> R) (g_rel g_abs : R) (q dO : list R) (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm : R)
    (E B N Tt Ev Dd : nat) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R))) (shape : stree),
  fwd_consts_with sdot g_rel g_abs c scale uc P V cl ucl LN Lb r a E B N Tt ->
  mp_exp2 M 0 = 1 -> fwd_row_ok q E B N Tt P V fvis fts Ev ->
  Rabs (fwd_LSE scale q (fvis 0%nat) (fts 0%nat)) <= Lm ->
  leaves shape = dot_terms A_ (fwd_o_with sdot c q fvis fts Ev) dO -> (depth shape <= Dd)%nat -> INR Dd * u < 1 ->
  length dO = Ev -> (1 <= Ev)%nat -> 0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  Rabs (rnd (fwd_lse_with sdot c cl q (fvis 0%nat) (fts 0%nat) * c2) * ln 2 - fwd_LSE scale q (fvis 0%nat) (fts 0%nat))
    <= chain_Dl uc2 Lb Lm
  /\ Rabs (rnd (fwd_lse_with sdot c cl q (fvis 0%nat) (fts 0%nat) * c2)) <= 2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea
  /\ Rabs (tree_sum A_ shape - dot_R (fwd_O scale q fvis fts Ev) dO)
     <= chain_eD Dd Ev (dot_abs (fwd_o_with sdot c q fvis fts Ev) dO) r a (fwd_W scale q fvis fts Ev) dO.
Proof.
  intros sdot g_rel g_abs q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd fvis fts shape
    Hcs Hexp0 [Hq Hfwd] HLm Hshape Hdepth HDd HdO HEv Huc2 Hc2.
  destruct Hcs as [Hdm [X0 [Y [P1 [CG [CR [Hpre [Hr Ha]]]]]]] [XL [P1L [CGL [CRL [NL [HXL [HP1L [HGL [HCL [HbL [HNL [Hlmin [Hlmax HLb]]]]]]]]]]]]] Hucl Hcl HLN].
  pose proof Hpre as [HV Hs Huc Hc HB HX0 HY HP HG HC HbL0].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  set (lse := fwd_lse_with sdot c cl q (fvis 0%nat) (fts 0%nat)).
  set (LSE := fwd_LSE scale q (fvis 0%nat) (fts 0%nat)) in *.
  (* the saved lse *)
  destruct (Hfwd 0%nat ltac:(lia)) as [Hvis0 [Hk0 [HBt0 [HN0 HT0]]]].
  assert (Hk0' : forall kv, In kv (concat (fts 0%nat)) -> fvis 0%nat kv = true ->
                   length (fst kv) = E /\ dot_abs q (fst kv) <= P)
    by (intros kv Hin Hv; destruct (Hk0 kv Hin Hv) as [H1 [H2 _]]; split; assumption).
  assert (Hlse : Rabs (lse - LSE) <= Lb).
  { eapply Rle_trans; [| exact HLb].
    exact (attention_lse_error_masked_dot M lg el lmin lmax lg_err sdot g_rel g_abs q c scale uc P XL P1L CGL CRL cl ucl
             LN NL E B N Tt (fvis 0%nat) (fts 0%nat) Hexp0 Hvis0 Hdm Hq Hk0' Hs Huc Hc HB HBt0 HN0 HT0 HXL HP1L HGL HCL
             HbL Hucl Hcl HLN HNL Hlmin Hlmax). }
  destruct (lse2_close M lse LSE Lb c2 uc2 Huc2 Hlse Hc2) as [HDl0 HAl0].
  split; [| split].
  { unfold chain_Dl; eapply Rle_trans; [exact HDl0 |].
    assert ((Rabs LSE + Lb) * (u * (1 + uc2) + uc2) <= (Lm + Lb) * (u * (1 + uc2) + uc2))
      by (apply Rmult_le_compat_r; [nra | lra]).
    lra. }
  { eapply Rle_trans; [exact HAl0 |].
    assert ((1 + uc2) * (Rabs LSE + Lb) <= (1 + uc2) * (Lm + Lb)) by (apply Rmult_le_compat_l; lra).
    nra. }
  (* the stored output and delta *)
  set (o := fwd_o_with sdot c q fvis fts Ev) in *.
  assert (Hlo : length o = Ev) by (unfold o, fwd_o_with; rewrite map_length, seq_length; reflexivity).
  assert (Hpert : Rabs (dot_R o dO - dot_R (fwd_O scale q fvis fts Ev) dO)
                  <= dot_R (map (fun w => r * w + a) (fwd_W scale q fvis fts Ev)) (map Rabs dO)).
  { apply dot_R_perturb_each;
      [unfold fwd_O; rewrite map_length, seq_length; exact Hlo
      | unfold fwd_W; rewrite !map_length, seq_length; exact (eq_sym Hlo) |].
    intros i Hi; rewrite Hlo in Hi.
    unfold o, fwd_o_with, fwd_O, fwd_W; rewrite map_map, !nth_map_seq by exact Hi.
    destruct (Hfwd i Hi) as [Hvi [Hki [HBti [HNi HTi]]]].
    eapply Rle_trans.
    { exact (attention_forward_posteriori_masked_dot M sdot g_rel g_abs q c scale uc P V X0 Y P1 CG CR E B N Tt
               (fvis i) (fts i) Hexp0 Hvi Hdm Hpre Hq Hki HBti HNi HTi). }
    pose proof (chain_W_nonneg scale q (filter (fvis i) (concat (fts i)))).
    apply Rplus_le_compat; [apply Rmult_le_compat_r |]; assumption. }
  pose proof (delta_close M shape o dO Dd Hshape Hdepth HDd) as Hd; cbv zeta in Hd.
  rewrite combine_length, Hlo, HdO, Nat.min_id in Hd.
  unfold chain_eD.
  replace (tree_sum A_ shape - dot_R (fwd_O scale q fvis fts Ev) dO)
    with ((tree_sum A_ shape - dot_R o dO) + (dot_R o dO - dot_R (fwd_O scale q fvis fts Ev) dO)) by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma forward_row_close : forall (q dO : list R) (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm : R)
    (E B N Tt Ev Dd : nat) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R))) (shape : stree),
  fwd_consts c scale uc P V cl ucl LN Lb r a E B N Tt ->
  mp_exp2 M 0 = 1 -> fwd_row_ok q E B N Tt P V fvis fts Ev ->
  Rabs (fwd_LSE scale q (fvis 0%nat) (fts 0%nat)) <= Lm ->
  leaves shape = dot_terms A_ (fwd_o c q fvis fts Ev) dO -> (depth shape <= Dd)%nat -> INR Dd * u < 1 ->
  length dO = Ev -> (1 <= Ev)%nat -> 0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  Rabs (rnd (fwd_lse c cl q (fvis 0%nat) (fts 0%nat) * c2) * ln 2 - fwd_LSE scale q (fvis 0%nat) (fts 0%nat))
    <= chain_Dl uc2 Lb Lm
  /\ Rabs (rnd (fwd_lse c cl q (fvis 0%nat) (fts 0%nat) * c2)) <= 2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea
  /\ Rabs (tree_sum A_ shape - dot_R (fwd_O scale q fvis fts Ev) dO)
     <= chain_eD Dd Ev (dot_abs (fwd_o c q fvis fts Ev) dO) r a (fwd_W scale q fvis fts Ev) dO.
Proof.
  intros q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd fvis fts shape Hcs.
  exact (forward_row_close_with (bdot A_) _ _ q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd fvis fts
           shape (fwd_consts_blocked c scale uc P V cl ucl LN Lb r a E B N Tt Hcs)).
Qed.

(** ** dQ: one query row *)

Theorem dq_error_from_forward : forall (q dO : list R) (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm : R)
    (E B N Tt Ev Dd : nat) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (shape : stree) (bvis : list R * list R -> bool) (cs ucs : R) (e : nat)
    (btiles : list (list (list R * list R))) (X Pd eD Ym W : R) (b : nat),
  let lse := fwd_lse c cl q (fvis 0%nat) (fts 0%nat) in
  let LSE := fwd_LSE scale q (fvis 0%nat) (fts 0%nat) in
  let D := dot_R (fwd_O scale q fvis fts Ev) dO in
  (* the forward *)
  fwd_consts c scale uc P V cl ucl LN Lb r a E B N Tt -> mp_exp2 M 0 = 1 ->
  fwd_row_ok q E B N Tt P V fvis fts Ev -> Rabs LSE <= Lm ->
  (* delta *)
  leaves shape = dot_terms A_ (fwd_o c q fvis fts Ev) dO -> (depth shape <= Dd)%nat -> INR Dd * u < 1 ->
  chain_eD Dd Ev (dot_abs (fwd_o c q fvis fts Ev) dO) r a (fwd_W scale q fvis fts Ev) dO <= eD ->
  (* the dQ kernel *)
  0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> (1 <= Ev)%nat -> INR Ev * u < 1 ->
  Forall (fun tl => (length tl <= b)%nat) btiles ->
  INR ((b - 1) + (length btiles - 1)) * u < 1 ->
  (forall y, In y (concat btiles) -> bvis y = true ->
     length (fst y) = E /\ dot_abs q (fst y) <= P
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  Rpower 2 (2 * (score_delta A_ scale uc E P + chain_Dl uc2 Lb Lm)
            + u * chain_Am uc2 (score_max A_ scale uc E P) Lb Lm + ea) <= X ->
  let eP := dot_err A_ Ev Pd in
  let EX := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length btiles - 1)) in
  let Pr := fun y => exp (scale * dot_R q (fst y) - LSE) in
  let Yf := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if bvis y then Pr y * Rabs (Yf y) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let SR := rsum (map (fun y => if bvis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let eA := grad_eA M g EX S1 SR (INR (length (concat btiles))) (grad_c M EX Ym ((1 + u) * (eP + eD) + ea) W) in
  Rabs (dq_kernel M bvis c cs q dO (rnd (lse * c2)) (tree_sum A_ shape) e btiles
        - scale * rsum (map (fun y => if bvis y then Pr y * Yf y * nth e (fst y) 0 else 0) (concat btiles)))
  <= grad_bound M scale ucs eA S1.
Proof.
  intros q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd fvis fts shape bvis cs ucs e
    btiles X Pd eD Ym W b lse LSE D Hcs Hexp0 Hrow HLm Hshape Hdepth HDd HeD
    Huc2 Hc2 Hucs Hcsc HPd HYm HW HdO HEv HEvu HBt Hbu Hkeys HX.
  pose proof Hcs as [[X0 [Y [P1 [CG [CR [Hpre _]]]]]] _ _ _ _].
  pose proof Hpre as [HE1 HEu HV Hs Huc Hc HB HX0 HY HP HG HC HbL].
  pose proof Hrow as [Hq _].
  destruct (forward_row_close q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd fvis fts shape
              Hcs Hexp0 Hrow HLm Hshape Hdepth HDd HdO HEv Huc2 Hc2) as [HDl [HAl Hd]].
  assert (HeD' : Rabs (tree_sum A_ shape - D) <= eD) by (eapply Rle_trans; [exact Hd | exact HeD]).
  assert (Hitems : forall y, In y (concat btiles) -> bvis y = true ->
     Rabs (score2 A_ c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= 2 * ln 2 * score_delta A_ scale uc E P
     /\ Rabs (score2 A_ c q (fst y) - rnd (lse * c2)) <= chain_Am uc2 (score_max A_ scale uc E P) Lb Lm
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W).
  { intros y Hin Hv; destruct (Hkeys y Hin Hv) as [Hly [HPy Hrest]].
    destruct (score2_error A_ c scale uc q (fst y) E P Hq Hly HE1 HEu Hs Huc Hc HPy) as [Hd1 Hm1].
    split; [exact (le_2ln2 _ _ Hd1) | split; [| exact Hrest]].
    unfold chain_Am, lse.
    unfold Rminus; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra. }
  exact (dq_error M bvis c cs scale ucs q dO (rnd (lse * c2)) (tree_sum A_ shape) e btiles LSE D eD
           (2 * ln 2 * score_delta A_ scale uc E P) (2 * ln 2 * chain_Dl uc2 Lb Lm)
           (chain_Am uc2 (score_max A_ scale uc E P) Lb Lm) X Ev Pd Ym W b ltac:(lra) Hucs Hcsc HPd HYm HW HdO HEv
           HEvu HBt Hbu (dv_exp2_premise_scaled _ _ _ _ _ HX) (le_2ln2 _ _ HDl) HeD' Hitems).
Qed.

(** ** dK: one key, the query rows of its tiles, each with its own forward *)

(** The dK kernel's coordinate [e] of key [k] (value [v]) over rows of any type [T]: the row's
    query [rq x], [dO] [rdO x], its forward (tiles [rfts x j], mask [rfvis x j]) whose saved lse
    the kernel reads as [lse2 = rnd (lse * c2)], its [delta] by the tree [rshape x];
    [dk_kernel] (DkDqError.v) with the items built from the rows. *)
Definition dk_kernel_rows {T : Type} (rq rdO : T -> list R) (rfvis : T -> nat -> list R * R -> bool)
    (rfts : T -> nat -> list (list (list R * R))) (rshape : T -> stree) (rvis : T -> bool)
    (c cl c2 cs : R) (k v : list R) (e : nat) (rtiles : list (list T)) : R :=
  grad_kernel M T (fun _ => k) rq (fun x => rnd (fwd_lse c cl (rq x) (rfvis x 0%nat) (rfts x 0%nat) * c2))
    (fun x => blocked_dot A_ (length v) v (rdO x)) (fun x => tree_sum A_ (rshape x)) (fun x => nth e (rq x) 0)
    rvis c cs rtiles.

Theorem dk_error_from_forward : forall {T : Type} (rq rdO : T -> list R) (rfvis : T -> nat -> list R * R -> bool)
    (rfts : T -> nat -> list (list (list R * R))) (rshape : T -> stree) (rvis : T -> bool)
    (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm cs ucs : R) (k v : list R) (e : nat) (rtiles : list (list T))
    (E B N Tt Ev Dd : nat) (X Pd eDm Ym W : R) (b : nat),
  let Lx := fun x => fwd_LSE scale (rq x) (rfvis x 0%nat) (rfts x 0%nat) in
  let Dx := fun x => dot_R (fwd_O scale (rq x) (rfvis x) (rfts x) Ev) (rdO x) in
  let eD := fun x => chain_eD Dd Ev (dot_abs (fwd_o c (rq x) (rfvis x) (rfts x) Ev) (rdO x)) r a
                               (fwd_W scale (rq x) (rfvis x) (rfts x) Ev) (rdO x) in
  fwd_consts c scale uc P V cl ucl LN Lb r a E B N Tt -> mp_exp2 M 0 = 1 ->
  0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length k = E -> length v = Ev -> (1 <= Ev)%nat -> INR Ev * u < 1 -> INR Dd * u < 1 ->
  Forall (fun tl => (length tl <= b)%nat) rtiles ->
  INR ((b - 1) + (length rtiles - 1)) * u < 1 ->
  (forall x, In x (concat rtiles) -> rvis x = true ->
     fwd_row_ok (rq x) E B N Tt P V (rfvis x) (rfts x) Ev /\ dot_abs k (rq x) <= P /\ Rabs (Lx x) <= Lm
     /\ leaves (rshape x) = dot_terms A_ (fwd_o c (rq x) (rfvis x) (rfts x) Ev) (rdO x)
     /\ (depth (rshape x) <= Dd)%nat /\ eD x <= eDm
     /\ length (rdO x) = Ev /\ dot_abs v (rdO x) <= Pd
     /\ Rabs (dot_R v (rdO x) - Dx x) <= Ym /\ Rabs (nth e (rq x) 0) <= W) ->
  Rpower 2 (2 * (score_delta A_ scale uc E P + chain_Dl uc2 Lb Lm)
            + u * chain_Am uc2 (score_max A_ scale uc E P) Lb Lm + ea) <= X ->
  let eP := dot_err A_ Ev Pd in
  let EX := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length rtiles - 1)) in
  let Pr := fun x => exp (scale * dot_R k (rq x) - Lx x) in
  let Yf := fun x => dot_R v (rdO x) - Dx x in
  let S1 := rsum (map (fun x => if rvis x then Pr x * Rabs (Yf x) * Rabs (nth e (rq x) 0) else 0)
                      (concat rtiles)) in
  let SR := rsum (map (fun x => if rvis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (rq x) 0) else 0)
                      (concat rtiles)) in
  let eA := grad_eA M g EX S1 SR (INR (length (concat rtiles))) (grad_c M EX Ym ((1 + u) * (eP + eDm) + ea) W) in
  Rabs (dk_kernel_rows rq rdO rfvis rfts rshape rvis c cl c2 cs k v e rtiles
        - scale * rsum (map (fun x => if rvis x then Pr x * Yf x * nth e (rq x) 0 else 0) (concat rtiles)))
  <= grad_bound M scale ucs eA S1.
Proof.
  intros T rq rdO rfvis rfts rshape rvis c scale uc P V cl ucl LN Lb r a c2 uc2 Lm cs ucs k v e rtiles
    E B N Tt Ev Dd X Pd eDm Ym W b Lx Dx eD Hcs Hexp0 Huc2 Hc2 Hucs Hcsc HPd HeDm HYm HW Hk Hv HEv HEvu HDd
    HBt Hbu Hrows HX.
  apply dv_exp2_premise_scaled in HX.
  pose proof Hcs as [[X0 [Y [P1 [CG [CR [Hpre _]]]]]] _ _ _ _].
  pose proof Hpre as [HE1 HEu HV Hs Huc Hc HB HX0 HY HP HG HC HbL].
  pose proof (blocked_dot_model A_ Ev HEv HEvu) as Hdm.
  apply (grad_error M T (fun _ => k) rq (fun x => rnd (fwd_lse c cl (rq x) (rfvis x 0%nat) (rfts x 0%nat) * c2))
           (fun x => blocked_dot A_ (length v) v (rdO x)) (fun x => tree_sum A_ (rshape x)) (fun x => nth e (rq x) 0)
           rvis c cs scale ucs rtiles Lx (fun x => dot_R v (rdO x)) Dx eD
           (2 * ln 2 * score_delta A_ scale uc E P) (2 * ln 2 * chain_Dl uc2 Lb Lm)
           (chain_Am uc2 (score_max A_ scale uc E P) Lb Lm)
           X (dot_err A_ Ev Pd) eDm Ym W b); auto.
  - lra.
  - exact (dm_eP_nonneg (bdot A_) Ev _ _ Pd Hdm HPd).
  - intros x Hin Hvis.
    destruct (Hrows x Hin Hvis) as [Hrow [HPx [HLx [Hsh [Hdep [HeDx [HdOx [HPdx [HYx HWx]]]]]]]]].
    pose proof Hrow as [Hqx _].
    destruct (forward_row_close (rq x) (rdO x) c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd
                (rfvis x) (rfts x) (rshape x) Hcs Hexp0 Hrow HLx Hsh Hdep HDd HdOx HEv Huc2 Hc2) as [HDl [HAl Hd]].
    destruct (score2_error A_ c scale uc k (rq x) E P Hk Hqx HE1 HEu Hs Huc Hc HPx) as [Hd1 Hm1].
    split; [exact (le_2ln2 _ _ Hd1) | split; [exact (le_2ln2 _ _ HDl) | split; [| split; [| split; [exact Hd |
      repeat split; assumption]]]]].
    + unfold chain_Am; unfold Rminus; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra.
    + exact (dm_eP_bound (bdot A_) Ev _ _ Pd v (rdO x) Hdm Hv HdOx HPdx).
Qed.

(** ** The GPU's dots: any scores' and [dp]'s dots, the tiles accumulated by [tl.dot]

    [dq_error_acc] and [grad_error_acc_with] (DkDqError.v: the H100's 3xTF32 and tensor-core
    instances are [dq_error_tf32x3_op], [dq_error_tc_op], ...) with the forward's lse and output
    composed in ([forward_row_close_with]): the scores' dot [sdot] of [dot_model] constants
    [gs_rel], [gs_abs] in the forward and the backward alike, [dp]'s [pdot], the accumulating
    [accf] of [acc_dot_model] over tiles of [n] items. *)

Theorem dq_error_acc_from_forward : forall (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (sdot pdot : list R -> list R -> R) (gs_rel gs_abs gp_rel gp_abs : R)
    (q dO : list R) (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm : R)
    (E B N Tt Ev Dd : nat) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (shape : stree) (bvis : list R * list R -> bool) (cs ucs : R) (e : nat)
    (btiles : list (list (list R * list R))) (X Pd eD Ym W : R),
  let lse := fwd_lse_with sdot c cl q (fvis 0%nat) (fts 0%nat) in
  let LSE := fwd_LSE scale q (fvis 0%nat) (fts 0%nat) in
  let D := dot_R (fwd_O scale q fvis fts Ev) dO in
  let de := gs_rel * P + gs_abs in
  fwd_consts_with sdot gs_rel gs_abs c scale uc P V cl ucl LN Lb r a E B N Tt -> mp_exp2 M 0 = 1 ->
  fwd_row_ok q E B N Tt P V fvis fts Ev -> Rabs LSE <= Lm ->
  leaves shape = dot_terms A_ (fwd_o_with sdot c q fvis fts Ev) dO -> (depth shape <= Dd)%nat -> INR Dd * u < 1 ->
  chain_eD Dd Ev (dot_abs (fwd_o_with sdot c q fvis fts Ev) dO) r a (fwd_W scale q fvis fts Ev) dO <= eD ->
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) btiles ->
  0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> (1 <= Ev)%nat -> dot_model pdot Ev gp_rel gp_abs ->
  (forall y, In y (concat btiles) -> bvis y = true ->
     length (fst y) = E /\ dot_abs q (fst y) <= P
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  Rpower 2 (2 * (score_delta_de A_ scale uc P de + chain_Dl uc2 Lb Lm)
            + u * chain_Am uc2 (score_max_de A_ scale uc P de) Lb Lm + ea) <= X ->
  let eP := gp_rel * Pd + gp_abs in
  let EX := (1 + ue) * X in
  let G := (1 + g_rel) ^ length btiles in
  let Pr := fun y => exp (scale * dot_R q (fst y) - LSE) in
  let Yf := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if bvis y then Pr y * Rabs (Yf y) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let SR := rsum (map (fun y => if bvis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let eA := gacc_eA M G EX S1 SR (INR (length (concat btiles))) (gacc_c M EX Ym ((1 + u) * (eP + eD) + ea) W)
                    (INR (length btiles)) g_abs in
  Rabs (dq_kernel_acc M accf sdot pdot bvis c cs q dO (rnd (lse * c2)) (tree_sum A_ shape) e btiles
        - scale * rsum (map (fun y => if bvis y then Pr y * Yf y * nth e (fst y) 0 else 0) (concat btiles)))
  <= grad_bound M scale ucs eA S1.
Proof.
  intros accf n g_rel g_abs sdot pdot gs_rel gs_abs gp_rel gp_abs q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm
    E B N Tt Ev Dd fvis fts shape bvis cs ucs e btiles X Pd eD Ym W lse LSE D de Hcs Hexp0 Hrow HLm Hshape Hdepth
    HDd HeD Hm Hn Huc2 Hc2 Hucs Hcsc HPd HYm HW HdO HEv Hpdm Hkeys HX.
  pose proof Hcs as [Hsdm [X0 [Y [P1 [CG [CR [Hpre _]]]]]] _ _ _ _].
  pose proof Hpre as [HV Hs Huc Hc HB HX0 HY HP HG HC HbL].
  pose proof Hrow as [Hq _].
  destruct (forward_row_close_with sdot gs_rel gs_abs q dO c scale uc P V cl ucl LN Lb r a c2 uc2 Lm E B N Tt Ev Dd
              fvis fts shape Hcs Hexp0 Hrow HLm Hshape Hdepth HDd HdO HEv Huc2 Hc2) as [HDl [HAl Hd]].
  assert (HeD' : Rabs (tree_sum A_ shape - D) <= eD) by (eapply Rle_trans; [exact Hd | exact HeD]).
  assert (Hitems : forall y, In y (concat btiles) -> bvis y = true ->
     Rabs (score2_with A_ sdot c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= 2 * ln 2 * score_delta_de A_ scale uc P de
     /\ Rabs (score2_with A_ sdot c q (fst y) - rnd (lse * c2)) <= chain_Am uc2 (score_max_de A_ scale uc P de) Lb Lm
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W).
  { intros y Hin Hv; destruct (Hkeys y Hin Hv) as [Hly [HPy Hrest]].
    destruct (score2_with_error A_ sdot E gs_rel gs_abs c scale uc q (fst y) P Hsdm Hq Hly Hs Huc Hc HPy)
      as [Hd1 Hm1].
    split; [exact (le_2ln2 _ _ Hd1) | split; [| exact Hrest]].
    unfold chain_Am, lse, de.
    unfold Rminus; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra. }
  exact (dq_error_acc M accf n g_rel g_abs sdot pdot gp_rel gp_abs bvis c cs scale ucs q dO (rnd (lse * c2))
           (tree_sum A_ shape) e btiles LSE D eD (2 * ln 2 * score_delta_de A_ scale uc P de)
           (2 * ln 2 * chain_Dl uc2 Lb Lm) (chain_Am uc2 (score_max_de A_ scale uc P de) Lb Lm) X Ev Pd Ym W
           Hm Hn ltac:(lra) Hucs Hcsc HPd HYm HW HdO Hpdm (dv_exp2_premise_scaled _ _ _ _ _ HX) (le_2ln2 _ _ HDl)
           HeD' Hitems).
Qed.

(** The dK kernel with the GPU's dots over rows of any type ([dk_kernel_rows] with [accf]). *)
Definition dk_kernel_rows_acc {T : Type} (accf : R -> list R -> list R -> R) (sdot pdot : list R -> list R -> R)
    (rq rdO : T -> list R) (rfvis : T -> nat -> list R * R -> bool)
    (rfts : T -> nat -> list (list (list R * R))) (rshape : T -> stree) (rvis : T -> bool)
    (c cl c2 cs : R) (k v : list R) (e : nat) (rtiles : list (list T)) : R :=
  grad_kernel_acc_with M T sdot (fun _ => k) rq
    (fun x => rnd (fwd_lse_with sdot c cl (rq x) (rfvis x 0%nat) (rfts x 0%nat) * c2))
    (fun x => pdot v (rdO x)) (fun x => tree_sum A_ (rshape x)) (fun x => nth e (rq x) 0) accf rvis c cs rtiles.

Theorem dk_error_acc_from_forward : forall (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (sdot pdot : list R -> list R -> R) (gs_rel gs_abs gp_rel gp_abs : R)
    {T : Type} (rq rdO : T -> list R) (rfvis : T -> nat -> list R * R -> bool)
    (rfts : T -> nat -> list (list (list R * R))) (rshape : T -> stree) (rvis : T -> bool)
    (c scale uc P V cl ucl LN Lb r a c2 uc2 Lm cs ucs : R) (k v : list R) (e : nat) (rtiles : list (list T))
    (E B N Tt Ev Dd : nat) (X Pd eDm Ym W : R),
  let Lx := fun x => fwd_LSE scale (rq x) (rfvis x 0%nat) (rfts x 0%nat) in
  let Dx := fun x => dot_R (fwd_O scale (rq x) (rfvis x) (rfts x) Ev) (rdO x) in
  let eD := fun x => chain_eD Dd Ev (dot_abs (fwd_o_with sdot c (rq x) (rfvis x) (rfts x) Ev) (rdO x)) r a
                               (fwd_W scale (rq x) (rfvis x) (rfts x) Ev) (rdO x) in
  let de := gs_rel * P + gs_abs in
  fwd_consts_with sdot gs_rel gs_abs c scale uc P V cl ucl LN Lb r a E B N Tt -> mp_exp2 M 0 = 1 ->
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) rtiles ->
  0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length k = E -> length v = Ev -> (1 <= Ev)%nat -> dot_model pdot Ev gp_rel gp_abs -> INR Dd * u < 1 ->
  (forall x, In x (concat rtiles) -> rvis x = true ->
     fwd_row_ok (rq x) E B N Tt P V (rfvis x) (rfts x) Ev /\ dot_abs k (rq x) <= P /\ Rabs (Lx x) <= Lm
     /\ leaves (rshape x) = dot_terms A_ (fwd_o_with sdot c (rq x) (rfvis x) (rfts x) Ev) (rdO x)
     /\ (depth (rshape x) <= Dd)%nat /\ eD x <= eDm
     /\ length (rdO x) = Ev /\ dot_abs v (rdO x) <= Pd
     /\ Rabs (dot_R v (rdO x) - Dx x) <= Ym /\ Rabs (nth e (rq x) 0) <= W) ->
  Rpower 2 (2 * (score_delta_de A_ scale uc P de + chain_Dl uc2 Lb Lm)
            + u * chain_Am uc2 (score_max_de A_ scale uc P de) Lb Lm + ea) <= X ->
  let eP := gp_rel * Pd + gp_abs in
  let EX := (1 + ue) * X in
  let G := (1 + g_rel) ^ length rtiles in
  let Pr := fun x => exp (scale * dot_R k (rq x) - Lx x) in
  let Yf := fun x => dot_R v (rdO x) - Dx x in
  let S1 := rsum (map (fun x => if rvis x then Pr x * Rabs (Yf x) * Rabs (nth e (rq x) 0) else 0)
                      (concat rtiles)) in
  let SR := rsum (map (fun x => if rvis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (rq x) 0) else 0)
                      (concat rtiles)) in
  let eA := gacc_eA M G EX S1 SR (INR (length (concat rtiles))) (gacc_c M EX Ym ((1 + u) * (eP + eDm) + ea) W)
                    (INR (length rtiles)) g_abs in
  Rabs (dk_kernel_rows_acc accf sdot pdot rq rdO rfvis rfts rshape rvis c cl c2 cs k v e rtiles
        - scale * rsum (map (fun x => if rvis x then Pr x * Yf x * nth e (rq x) 0 else 0) (concat rtiles)))
  <= grad_bound M scale ucs eA S1.
Proof.
  intros accf n g_rel g_abs sdot pdot gs_rel gs_abs gp_rel gp_abs T rq rdO rfvis rfts rshape rvis
    c scale uc P V cl ucl LN Lb r a c2 uc2 Lm cs ucs k v e rtiles E B N Tt Ev Dd X Pd eDm Ym W Lx Dx eD de
    Hcs Hexp0 Hm Hn Huc2 Hc2 Hucs Hcsc HPd HeDm HYm HW Hk Hv HEv Hpdm HDd Hrows HX.
  apply dv_exp2_premise_scaled in HX.
  pose proof Hcs as [Hsdm [X0 [Y [P1 [CG [CR [Hpre _]]]]]] _ _ _ _].
  pose proof Hpre as [HV Hs Huc Hc HB HX0 HY HP HG HC HbL].
  apply (grad_error_acc_with M T sdot (fun _ => k) rq
           (fun x => rnd (fwd_lse_with sdot c cl (rq x) (rfvis x 0%nat) (rfts x 0%nat) * c2))
           (fun x => pdot v (rdO x)) (fun x => tree_sum A_ (rshape x)) (fun x => nth e (rq x) 0)
           accf n g_rel g_abs rvis c cs scale ucs rtiles Lx (fun x => dot_R v (rdO x)) Dx eD
           (2 * ln 2 * score_delta_de A_ scale uc P de) (2 * ln 2 * chain_Dl uc2 Lb Lm)
           (chain_Am uc2 (score_max_de A_ scale uc P de) Lb Lm)
           X (gp_rel * Pd + gp_abs) eDm Ym W); auto.
  - lra.
  - exact (dm_eP_nonneg pdot Ev gp_rel gp_abs Pd Hpdm HPd).
  - intros x Hin Hvis.
    destruct (Hrows x Hin Hvis) as [Hrow [HPx [HLx [Hsh [Hdep [HeDx [HdOx [HPdx [HYx HWx]]]]]]]]].
    pose proof Hrow as [Hqx _].
    destruct (forward_row_close_with sdot gs_rel gs_abs (rq x) (rdO x) c scale uc P V cl ucl LN Lb r a c2 uc2 Lm
                E B N Tt Ev Dd (rfvis x) (rfts x) (rshape x) Hcs Hexp0 Hrow HLx Hsh Hdep HDd HdOx HEv Huc2 Hc2)
      as [HDl [HAl Hd]].
    destruct (score2_with_error A_ sdot E gs_rel gs_abs c scale uc k (rq x) P Hsdm Hk Hqx Hs Huc Hc HPx) as [Hd1 Hm1].
    split; [exact (le_2ln2 _ _ Hd1) | split; [exact (le_2ln2 _ _ HDl) | split; [| split; [| split; [exact Hd |
      repeat split; assumption]]]]].
    + unfold chain_Am, de; unfold Rminus; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra.
    + exact (dm_eP_bound pdot Ev gp_rel gp_abs Pd v (rdO x) Hpdm Hv HdOx HPdx).
Qed.

End Chain.
