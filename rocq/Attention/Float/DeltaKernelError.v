(** * The backward's [delta] against the forward kernel that runs: [|sum_c dO_c out_c - D|].

    DeltaReweight.v's [attention_delta_ratio_error] takes the forward kernel's numerator
    and normaliser as premises (weights [Lc P_j (1 + a_j)], [Lc P_j (1 + b_j)], the
    normaliser's common factor [lam], the accumulator's errors [E_c], the store).  Here
    they are instantiated from the kernel's run ([kernel_run_acc] from [kernel_start d]
    over the key tiles, ForwardAccError.v) by ForwardSharedWeights.v's lemmas over the
    final shared list, and every premise left is the model's (formats, [exp2]'s accuracy,
    the accumulating dot's [acc_dot_split_model]) or a number the caller computes from the
    exact softmax.  The accumulating dot is the split model [acc_dot_split_model accf n
    g_acc g_dot ga] (NumeratorError.v): the accumulator charged [g_acc], the tile's products
    [g_dot].

    The exact side (one query row, keys [ks = concat tiles], the masked keys' [P] zero):
      P_k = e^(S_k) / sum_(j visible) e^(S_j),   dp_k = sum_c dO_c v_kc,   D = sum_k P_k dp_k,
    [S_k] ([se k]) the exact score in nats, the kernel's base-2 score [sc_k] within
    [|sc_k ln 2 - S_k| <= dl_k <= dmax] (per key, as PerPairScoreError.v's [d]).

    Result ([attention_delta_kernel_error]): with [Tt] tiles of [n] keys, the visible
    scores numbers of the accumulation format in [[m0, m0 + K]], and [sc_j - sc_k <= Kk_k]
    for visible [j], [k] (the key's gap to the row's max; the caller's from [S] and [dl]),
      tw_k = (1 + ue)^Tt 2^(u Kk_k) e^(dl_k) - 1       (a weight's relative error: exp2's,
                                                         its arguments' roundings, the score's)
      r    = Rw K Tt e^dmax = Tt ((1 + ue + ee) (1 + ue))^Tt 2^(u K) ee e^dmax
                                                        (the [exp2] underflow [ee] terms)
      pm   = (1 + ue + ee)^Tt,   sa = us r + es pm e^dmax,   rho = (1 + g_acc) (1 + u),
      Av_c = sum_k P_k |v_kc|,
      Aa_c = sum_k P_k ((1 + us) tw_k + us) |v_kc| + ((1 + us) r + es pm e^dmax) sum_(k visible) |v_kc|,
      Pre_c,t = |sum_(k in the first t tiles) P_k v_kc|     (the exact signed prefixes),
      EB_c = rho^Tt (sum_(t < Tt) (rho - 1) Pre_c,t + (rho - 1) Tt Aa_c + g_dot (Av_c + Aa_c))
             + rho^Tt Tt pm ((1 + g_acc) ea + ga) e^dmax,
    (per tile the accumulator is rescaled by [alpha], one rounding [u], then the dot adds
    the tile's products to it: the accumulator, so the prefixes [Pre_c,t], grow by [rho],
    the tile's products are charged [g_dot]; ForwardSharedWeights.v's [acc_step_shared]),
    and premises [sum_k P_k tw_k + N r <= tb < 1] ([N] the number of visible keys) and
    [(1 + u)^(n - 1 + 2 Tt) - 1 + Tt l_growth^Tt ea e^dmax / (1 - tb) <= lb < 1]:
      |sum_c dO_c out_c - D|
        <= (sum_k P_k (tw_k + tb) |dp_k - D| + r sum_(k visible) |dp_k - D|
            + sum_k P_k us (1 + tw_k) |dp_k| + sa sum_(k visible) |dp_k|
            + sum_c |dO_c| EB_c) / ((1 - tb) (1 - lb))
           + lb / (1 - lb) |D| + sum_c |dO_c| (store_ur |out_c| + store_er),
    [out_c = rs (rnd (acc_c / l))] the kernel's stored output.  The weights' errors
    [tw_k] are charged on [|dp_k - D|] (the re-weighted mean), the storage rounding of
    [p] ([us]) and the accumulation on [|dp_k|] and [|dO_c|], the P.V dot's prefixes
    signed.  At [dl = 0], [tw_k] is about [Tt ue + u Kk_k ln 2] and [tb] its mean: the
    leading terms are [sum_k P_k (tw_k + tb) |dp_k - D|], [us sum_k P_k |dp_k|], the
    accumulation's [g_dot (Av_c + Aa_c)] and [(rho - 1) Pre_c,t] on [|dO_c|], and [lb |D|].

    The right-hand side is [delta_kernel_bound] (its pieces [dk_P], [dk_dp], [dk_D],
    [dk_tw], [dk_r], [dk_Av], [dk_Aa], [dk_Pre], [dk_EB]), the premises on the run and
    the caller's numbers the bundle [dk_premises] (with the gaps [Kk], [dk_tb_sum <= tb],
    [dk_lam <= lb]); the theorem [attention_delta_kernel_error] is over any key type
    ([Key], the kernel's [sc], [vis], [val]), any [acc_dot_split_model] P.V dot (a one-constant
    [acc_dot_model accf n g ga] is the case [g_acc = g_dot = g], [acc_dot_split_of_model]: the
    bound as before the split), any model whose [exp2] is nonnegative.

    [attention_delta_kernel_error_dot]: the same with the kernel's scores
    [sc_k = rnd (dotf q k * c)] ([score2_with], [dotf] any [dot_model] with [g_rel], [g_abs])
    against [S_k = scale q.k], keys [(k, v)] with [v_kc = nth c v 0]: each key's
    [dl_k = score_delta_de scale uc |q|.|k| (g_rel |q|.|k| + g_abs)] (ForwardError.v's
    [score2_with_error] at the key's own [dot_abs q k], so per pair, as PerPairScoreError.v's
    [d]), [dmax] and the range [K = 2 score_max_de] at a bound [P] of every [dot_abs q k]
    ([m0 = - score_max_de], every gap [Kk_k = K]).

    The H100 instances [attention_delta_kernel_error_tf32x3_op] (float32: the P.V dot in
    3xTF32, [tf32x3_tc_op_acc_dot_split_model]: the accumulator added in one float32
    rounding after the three dots, [g_acc = u], [rho = (1 + u)^2]) and
    [attention_delta_kernel_error_tc_op] (bf16/fp16: the tensor cores' chain from the
    accumulator, [tc_acc_op_dot_model] through [acc_dot_split_of_model], [g_acc = g_dot = g])
    fix the kernel's P.V dot and its constants; their scores' errors [dl] stay the caller's
    premise.

    Not covered here: what ForwardAccError.v's header does not cover; the caller's
    evaluation of the sums over the exact softmax (upper bounds, its own rounding
    included). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core Raux.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.MixedPrecision FloatModel.Notations FloatModel.DotError.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import Attention.BackwardCorrect Attention.ScorePerturbation Attention.StreamError.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.NumeratorError.
From Ojas Require Import Attention.Float.ForwardAccError Attention.Float.DeltaReweight Attention.Float.ForwardSharedWeights.
Import ListNotations.
Open Scope R_scope.

(** ** List facts *)

Lemma dk_skipn_skipn : forall {A} a b (l : list A), skipn a (skipn b l) = skipn (b + a) l.
Proof.
  intros A a b; induction b as [|b IH]; intros l; [reflexivity |].
  destruct l as [|x l]; [destruct a; reflexivity | apply IH].
Qed.

(** The tiles of [n] entries partition a list of [T n] entries. *)
Lemma rsum_tiles_partition : forall {A} (f : A -> R) (n T : nat) (L : list A),
  length L = (T * n)%nat ->
  rsum (map (fun t => rsum (map f (firstn n (skipn (t * n) L)))) (seq 0 T)) = rsum (map f L).
Proof.
  intros A f n; induction T as [|T IH]; intros L HL.
  - destruct L; [reflexivity | discriminate].
  - cbn [seq map]; rewrite rsum_cons, Nat.mul_0_l, skipn_O, <- seq_shift, map_map.
    rewrite (map_ext (fun t => rsum (map f (firstn n (skipn (S t * n) L))))
                     (fun t => rsum (map f (firstn n (skipn (t * n) (skipn n L)))))).
    2:{ intros t; rewrite dk_skipn_skipn; do 4 f_equal; lia. }
    rewrite IH by (rewrite skipn_length; cbn in HL; lia).
    rewrite <- rsum_app, <- map_app, firstn_skipn; reflexivity.
Qed.

Lemma rsum_firstn_le : forall {A} (f : A -> R) j (L : list A),
  (forall x, In x L -> 0 <= f x) -> rsum (map f (firstn j L)) <= rsum (map f L).
Proof.
  intros A f j L H; rewrite <- (firstn_skipn j L) at 2; rewrite map_app, rsum_app.
  assert (0 <= rsum (map f (skipn j L))); [| lra].
  apply drw_rsum_nonneg; intros x Hx; apply H; rewrite <- (firstn_skipn j L); apply in_or_app; right; exact Hx.
Qed.

Lemma length_concat_uniform : forall {A} (tiles : list (list A)) n,
  (forall tl, In tl tiles -> length tl = n) -> length (concat tiles) = (length tiles * n)%nat.
Proof.
  intros A tiles n H; induction tiles as [|tl rest IH]; [reflexivity |].
  cbn [concat length]; rewrite app_length, IH by (intros; apply H; right; assumption).
  rewrite (H tl (or_introl eq_refl)); lia.
Qed.

(** ** The kernel's final running max is a visible score *)

Section MaxAttained.

Variable M : MixedModel.
Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).

Lemma vmax_attained : forall tl mo m', vmax Key sc vis mo tl = Some m' ->
  mo = Some m' \/ exists q, In q tl /\ vis q = true /\ sc q = m'.
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros mo m' E; cbn [fold_left] in E; [left; exact E |].
  destruct (IH _ _ E) as [E1 | [q [Hq [Hv Eq]]]].
  2:{ right; exists q; split; [right; exact Hq | split; assumption]. }
  destruct (vis k) eqn:Ev; [| left; exact E1].
  destruct mo as [x|]; cbn [omax] in E1; injection E1 as E1.
  - unfold Rmax in E1; destruct (Rle_dec x (sc k)).
    + right; exists k; split; [left; reflexivity | split; assumption].
    + left; rewrite E1; reflexivity.
  - right; exists k; split; [left; reflexivity | split; assumption].
Qed.

Lemma kernel_m_attained : forall tiles st m,
  ks_m (kernel_run_acc M Key sc vis val accf st tiles) = Some m ->
  ks_m st = Some m \/ exists q, In q (concat tiles) /\ vis q = true /\ sc q = m.
Proof.
  induction tiles as [|tl rest IH]; intros st m E; [left; exact E |].
  change (kernel_run_acc M Key sc vis val accf st (tl :: rest))
    with (kernel_run_acc M Key sc vis val accf (kernel_step_acc M Key sc vis val accf st tl) rest) in E.
  destruct (IH _ _ E) as [E1 | [q [Hq [Hv Eq]]]].
  - change (ks_m (kernel_step_acc M Key sc vis val accf st tl)) with (vmax Key sc vis (ks_m st) tl) in E1.
    destruct (vmax_attained tl (ks_m st) m E1) as [E2 | [q [Hq [Hv Eq]]]]; [left; exact E2 |].
    right; exists q; split; [cbn [concat]; apply in_or_app; left; exact Hq | split; assumption].
  - right; exists q; split; [cbn [concat]; apply in_or_app; right; exact Hq | split; assumption].
Qed.

End MaxAttained.

(** ** The composition *)

Section DeltaKernel.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).

Local Notation srun := (shared_run M Key sc vis val accf).

(** Sums over the final shared list of functions of the key are sums over the keys. *)
Lemma rsum_shared_keys : forall d tiles (f : Key -> R) (h : Key * R * R -> R),
  (forall x, h x = f (sw_key Key x)) ->
  rsum (map h (srun (kernel_start d) [] tiles)) = rsum (map f (concat tiles)).
Proof.
  intros d tiles f h Hh.
  pose proof (shared_run_keys M Key sc vis val accf tiles (kernel_start d) []) as E; cbn [map app] in E.
  rewrite <- E, map_map.
  apply rsum_map_ext; intros x _; apply Hh.
Qed.

Lemma rsum_shared_keys_firstn : forall d tiles j (f : Key -> R) (h : Key * R * R -> R),
  (forall x, h x = f (sw_key Key x)) ->
  rsum (map h (firstn j (srun (kernel_start d) [] tiles))) = rsum (map f (firstn j (concat tiles))).
Proof.
  intros d tiles j f h Hh.
  pose proof (shared_run_keys M Key sc vis val accf tiles (kernel_start d) []) as E; cbn [map app] in E.
  rewrite <- E, firstn_map, map_map.
  apply rsum_map_ext; intros x _; apply Hh.
Qed.

(** ** The bound, as the caller evaluates it

    [dk_P se ks] the exact softmax over the visible keys of [ks] (zero on the masked ones),
    [dk_dp cs dO k = dO . v_k], [dk_D] the exact [D]; [dk_tw], [dk_r] a visible weight's
    relative and (underflow) absolute error factors; [dk_tb_sum] the premise of [tb],
    [dk_lam] that of [lb]; [delta_kernel_bound] the right-hand side. *)
Definition dk_P (se : Key -> R) (ks : list Key) (k : Key) : R :=
  if vis k then exp (se k) / rsum (map (fun j => if vis j then exp (se j) else 0) ks) else 0.
Definition dk_dp (cs : list nat) (dO : nat -> R) (k : Key) : R := rsum (map (fun c => dO c * val k c) cs).
Definition dk_D (se : Key -> R) (ks : list Key) (cs : list nat) (dO : nat -> R) : R :=
  rsum (map (fun k => dk_P se ks k * dk_dp cs dO k) ks).
Definition dk_tw (Tt : nat) (Kk dl : Key -> R) (k : Key) : R :=
  (1 + ue) ^ Tt * Rpower 2 (u * Kk k) * exp (dl k) - 1.
Definition dk_r (Tt : nat) (K dmax : R) : R := Rw M K Tt * exp dmax.
Definition dk_tb_sum (se dl Kk : Key -> R) (tiles : list (list Key)) (K dmax : R) : R :=
  rsum (map (fun k => dk_P se (concat tiles) k * dk_tw (length tiles) Kk dl k) (concat tiles))
  + INR (length (filter vis (concat tiles))) * dk_r (length tiles) K dmax.
Definition dk_lam (n Tt : nat) (dmax tb : R) : R :=
  (1 + u) ^ (n - 1 + 2 * Tt) - 1 + INR Tt * l_growth M ^ Tt * ea * exp dmax / (1 - tb).

Definition dk_Av (P : Key -> R) (ks : list Key) (c : nat) : R := rsum (map (fun k => P k * Rabs (val k c)) ks).
Definition dk_Aa (P tw : Key -> R) (r pm dmax : R) (ks : list Key) (c : nat) : R :=
  rsum (map (fun k => P k * ((1 + us) * tw k + us) * Rabs (val k c)) ks)
  + ((1 + us) * r + es * pm * exp dmax) * rsum (map (fun k => Rabs (val k c)) (filter vis ks)).
Definition dk_Pre (P : Key -> R) (n : nat) (ks : list Key) (c t : nat) : R :=
  Rabs (rsum (map (fun k => P k * val k c) (firstn (t * n) ks))).
Definition dk_EB (n : nat) (g_acc g_dot ga : R) (P tw : Key -> R) (ks : list Key) (Tt : nat) (r pm dmax : R)
    (c : nat) : R :=
  rho_acc M g_acc ^ Tt * (rsum (map (fun t => (rho_acc M g_acc - 1) * dk_Pre P n ks c t) (seq 0 Tt))
                          + (rho_acc M g_acc - 1) * INR Tt * dk_Aa P tw r pm dmax ks c
                          + g_dot * (dk_Av P ks c + dk_Aa P tw r pm dmax ks c))
  + rho_acc M g_acc ^ Tt * INR Tt * pm * ((1 + g_acc) * ea + ga) * exp dmax.

Definition delta_kernel_bound (n : nat) (g_acc g_dot ga : R) (se dl Kk : Key -> R) (tiles : list (list Key))
    (cs : list nat) (dO out : nat -> R) (K dmax tb lb : R) : R :=
  let ks := concat tiles in
  let Tt := length tiles in
  let P := dk_P se ks in
  let dp := dk_dp cs dO in
  let D := dk_D se ks cs dO in
  let tw := dk_tw Tt Kk dl in
  let r := dk_r Tt K dmax in
  let pm := (1 + ue + ee) ^ Tt in
  let sa := us * r + es * pm * exp dmax in
  let EB := dk_EB n g_acc g_dot ga P tw ks Tt r pm dmax in
  (rsum (map (fun k => P k * (tw k + tb) * Rabs (dp k - D)) ks) + r * rsum (map (fun k => Rabs (dp k - D)) (filter vis ks))
   + rsum (map (fun k => P k * us * (1 + tw k) * Rabs (dp k)) ks) + sa * rsum (map (fun k => Rabs (dp k)) (filter vis ks))
   + rsum (map (fun c => Rabs (dO c) * EB c) cs)) / ((1 - tb) * (1 - lb))
  + lb / (1 - lb) * Rabs D
  + rsum (map (fun c => Rabs (dO c) * (store_ur A_ S_ * Rabs (out c) + store_er A_ S_)) cs).

(** The premises on the run and the caller's numbers, one bundle: [n] keys a tile, the
    visible scores numbers of the accumulation format in [[m0, m0 + K]], within [dl <= dmax]
    of the exact ones [se], each key's gap [sc_j - sc_k <= Kk_k] to every visible score, a
    visible key, the output coordinates [cs] below [d], [tb], [lb]. *)
Record dk_premises (n : nat) (se dl Kk : Key -> R) (d : nat) (tiles : list (list Key)) (cs : list nat)
    (m0 K dmax tb lb : R) : Prop := {
  dkp_K : 0 <= K;
  dkp_tiles : forall tl, In tl tiles -> length tl = n;
  dkp_scores : forall k, In k (concat tiles) -> vis k = true -> fmt (sc k) /\ m0 <= sc k <= m0 + K;
  dkp_dl : forall k, In k (concat tiles) -> vis k = true -> Rabs (sc k * ln 2 - se k) <= dl k /\ dl k <= dmax;
  dkp_gap : forall j k, In j (concat tiles) -> In k (concat tiles) -> vis j = true -> vis k = true ->
    sc j - sc k <= Kk k;
  dkp_vis : exists k, In k (concat tiles) /\ vis k = true;
  dkp_cs : forall c, In c cs -> (c < d)%nat;
  dkp_tb : dk_tb_sum se dl Kk tiles K dmax <= tb;
  dkp_tb1 : tb < 1;
  dkp_lb : dk_lam n (length tiles) dmax tb <= lb;
  dkp_lb1 : lb < 1
}.

(** The backward's [delta] of the kernel's stored output against the exact [D] (see the
    header): [out_c = rs (rnd (acc_c / l))] after the kernel's tiles, the exact scores
    [se] in nats, the kernel's within [dl <= dmax] of them. *)
Theorem attention_delta_kernel_error : forall (n : nat) (g_acc g_dot ga : R) (se dl Kk : Key -> R) (d : nat)
    (tiles : list (list Key)) (cs : list nat) (dO : nat -> R) (m0 K dmax tb lb : R),
  let st := kernel_run_acc M Key sc vis val accf (kernel_start d) tiles in
  let out := fun c => ff_rnd S_ (rnd (nth c (ks_acc st) 0 / ks_l st)) in
  (forall x, 0 <= exp2 x) -> acc_dot_split_model accf n g_acc g_dot ga ->
  dk_premises n se dl Kk d tiles cs m0 K dmax tb lb ->
  Rabs (rsum (map (fun c => dO c * out c) cs) - dk_D se (concat tiles) cs dO)
  <= delta_kernel_bound n g_acc g_dot ga se dl Kk tiles cs dO out K dmax tb lb.
Proof.
  intros n g gd ga se dl Kk d tiles cs dO m0 K dmax tb lb st out Hexp Hm
    [HK Hn Hsc Hdl Hgap [q0 [Hq0 Hv0]] Hcs Htb Htb1 Hlb Hlb1].
  unfold delta_kernel_bound; cbv zeta.
  set (ks := concat tiles) in *; set (Tt := length tiles) in *; set (P := dk_P se ks); set (dp := dk_dp cs dO).
  set (D := dk_D se ks cs dO); set (tw := dk_tw Tt Kk dl); set (r := dk_r Tt K dmax); set (pm := (1 + ue + ee) ^ Tt).
  set (sa := us * r + es * pm * exp dmax); set (EB := dk_EB n g gd ga P tw ks Tt r pm dmax).
  set (rho := rho_acc M g); set (Av := dk_Av P ks); set (Aa := dk_Aa P tw r pm dmax ks); set (Pre := dk_Pre P n ks).
  change (rsum (map (fun k => P k * tw k) ks) + INR (length (filter vis ks)) * r <= tb) in Htb.
  change ((1 + u) ^ (n - 1 + 2 * Tt) - 1 + INR Tt * l_growth M ^ Tt * ea * exp dmax / (1 - tb) <= lb) in Hlb.
  set (Z := rsum (map (fun k => if vis k then exp (se k) else 0) ks)).
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (adsm_acc_nonneg _ _ _ _ _ Hm) as Hg; pose proof (adsm_dot_nonneg _ _ _ _ _ Hm) as Hgd.
  pose proof (adsm_abs_nonneg _ _ _ _ _ Hm) as Hga.
  pose proof ln_lt_2 as Hln2.
  set (L := srun (kernel_start d) [] tiles).
  assert (HLk : map (sw_key Key) L = ks)
    by (unfold L; rewrite (shared_run_keys M Key sc vis val accf tiles (kernel_start d) []); reflexivity).
  assert (Hfmt : forall k, In k ks -> vis k = true -> fmt (sc k)) by (intros k Hk Hv; apply (Hsc k Hk Hv)).
  (* the weights against [2^(s - m_T)] *)
  destruct (weight_run M Key sc vis val accf m0 K tiles 0 (kernel_start d) [] Hsc) as [HmT Hws].
  { split; [intros m Em; discriminate | intros y []]. }
  fold st L in HmT, Hws; cbn [Nat.add] in Hws; fold Tt in Hws.
  assert (Hx0 : exists x0, In x0 L /\ sw_key Key x0 = q0).
  { rewrite <- HLk in Hq0; apply in_map_iff in Hq0; destruct Hq0 as [x0 [E0 Hx0]]; exists x0; auto. }
  destruct Hx0 as [x0 [Hx0 Ex0]].
  assert (HmS : exists mT, ks_m st = Some mT).
  { pose proof (Hws x0 Hx0) as H; rewrite Ex0, Hv0 in H; destruct H as [m [Em _]]; exists m; exact Em. }
  destruct HmS as [mT EmT].
  destruct (HmT mT EmT) as [FmT HmTK].
  destruct (kernel_m_attained M Key sc vis val accf tiles (kernel_start d) mT EmT) as [E0 | [qs [Hqs [Hvs Eqs]]]];
    [discriminate |].
  (* the exact side *)
  assert (HZ : 0 < Z).
  { apply (rsum_pos _ (exp (se q0))); [| apply in_map_iff; exists q0; rewrite Hv0; auto | apply exp_pos].
    intros y Hy; apply in_map_iff in Hy; destruct Hy as [k [<- _]]; destruct (vis k); [left; apply exp_pos | lra]. }
  assert (HP0 : forall k, 0 <= P k) by (intros k; unfold P, dk_P; fold Z; destruct (vis k); [apply Rlt_le, Rdiv_lt_0_compat; [apply exp_pos | exact HZ] | lra]).
  assert (HPv : forall k, vis k = true -> 0 < P k) by (intros k Hk; unfold P, dk_P; fold Z; rewrite Hk; apply Rdiv_lt_0_compat; [apply exp_pos | exact HZ]).
  assert (HP1 : rsum (map P ks) = 1).
  { unfold P, dk_P; fold Z; rewrite (rsum_map_ext _ (fun k => (if vis k then exp (se k) else 0) / Z)) by (intros k _; destruct (vis k); [reflexivity | unfold Rdiv; ring]).
    rewrite rsum_map_div; fold Z; field; lra. }
  set (Lc := exp (- (mT * ln 2)) * Z).
  assert (HLcP : forall k, vis k = true -> Lc * P k = exp (se k - mT * ln 2)).
  { intros k Hk; unfold Lc, P, dk_P; fold Z; rewrite Hk; replace (se k - mT * ln 2) with (- (mT * ln 2) + se k) by ring.
    rewrite exp_plus; field; lra. }
  assert (HLc : exp (- dmax) <= Lc).
  { assert (Hq : exp (- dmax) <= Lc * P qs).
    { rewrite (HLcP qs Hvs); apply sp_exp_le; destruct (Hdl qs Hqs Hvs) as [H1 H2]; apply Rabs_le_inv in H1; rewrite <- Eqs; lra. }
    assert (P qs <= 1).
    { rewrite <- HP1; apply rsum_ge_in; [intros y Hy; apply in_map_iff in Hy; destruct Hy as [k [<- _]]; apply HP0 |].
      apply in_map, Hqs. }
    assert (0 < Lc) by (unfold Lc; apply Rmult_lt_0_compat; [apply exp_pos | exact HZ]).
    assert (Lc * P qs <= Lc) by (apply fa_mult_le_l; lra).
    lra. }
  assert (HLc0 : 0 < Lc) by (pose proof (exp_pos (- dmax)); lra).
  assert (HLce : 1 <= Lc * exp dmax).
  { replace 1 with (exp (- dmax) * exp dmax) by (rewrite <- exp_plus, Rplus_opp_l; apply exp_0).
    apply Rmult_le_compat_r; [left; apply exp_pos | exact HLc]. }
  assert (HiLc : / Lc <= exp dmax).
  { apply (Rmult_le_reg_l Lc); [exact HLc0 |]; rewrite Rinv_r by lra; lra. }
  (* every entry of the final shared list: its weight and its stored weight relative to [Lc P_k] *)
  set (tk := fun k => if vis k then tw k + r / P k else 0).
  set (sk := fun k => if vis k then us * (1 + tw k + r / P k) + es * pm * exp dmax / P k else 0).
  set (fb := fun x => if vis (sw_key Key x) then sw_w Key x / (Lc * P (sw_key Key x)) - 1 else 0).
  set (fa := fun x => if vis (sw_key Key x) then sw_ws M Key x / (Lc * P (sw_key Key x)) - 1 else 0).
  assert (Hr0 : 0 <= r) by (unfold r, dk_r; apply Rmult_le_pos; [apply Rw_nonneg | left; apply exp_pos]).
  assert (Hpm : 1 <= pm) by (apply pow_R1_Rle; lra).
  assert (Hpi : forall x, In x L -> 0 <= sw_pi Key x <= pm).
  { intros x Hx; destruct (shared_pi_bounds M Key sc vis val accf Hexp tiles (kernel_start d) [] 0 Hfmt I
                             ltac:(intros y []) x Hx) as [H1 H2]; split; assumption. }
  assert (HE : forall x, In x L ->
      sw_w Key x = Lc * P (sw_key Key x) * (1 + fb x) /\ sw_ws M Key x = Lc * P (sw_key Key x) * (1 + fa x)
      /\ Rabs (fb x) <= tk (sw_key Key x) /\ Rabs (fa x - fb x) <= sk (sw_key Key x)).
  { intros x Hx; pose proof (Hws x Hx) as Hw.
    assert (Hk : In (sw_key Key x) ks) by (rewrite <- HLk; apply in_map, Hx).
    unfold fb, fa, tk, sk; destruct (vis (sw_key Key x)) eqn:Ev; rewrite ?Ev in Hw.
    2:{ assert (EP : P (sw_key Key x) = 0) by (unfold P, dk_P; fold Z; rewrite Ev; reflexivity).
        unfold sw_ws, sw_w; rewrite EP, Hw, (ff_rnd_id S_ 0 (ff_fmt_0 S_)), Rminus_0_r, Rabs_R0.
        split; [ring | split; [ring | lra]]. }
    destruct Hw as [m [Em [[Hs0 Hsm] Hw]]]; rewrite EmT in Em; injection Em as <-.
    set (k := sw_key Key x) in *.
    destruct (Hdl k Hk Ev) as [Hdk Hdm].
    set (Wx := Lc * P k).
    assert (HWx : 0 < Wx) by (unfold Wx; apply Rmult_lt_0_compat; [exact HLc0 | apply HPv, Ev]).
    set (dd := (sc k * ln 2 - se k) / ln 2).
    assert (EW : Rpower 2 (sc k - mT) = Wx * Rpower 2 dd).
    { unfold Wx, Rpower, dd; rewrite (HLcP k Ev), <- exp_plus; f_equal; field; lra. }
    destruct (weight_rel_exact (sw_w Key x) _ Wx (Gw M Tt mT (sc k)) (Rw M K Tt) dd HWx EW
                (Gw_ge_1 M Tt mT (sc k) Hsm) Hw) as [b [Eb Hb]].
    assert (Ebf : sw_w Key x / Wx - 1 = b) by (rewrite Eb; field; lra).
    assert (HG : Gw M Tt mT (sc k) <= (1 + ue) ^ Tt * Rpower 2 (u * Kk k)).
    { unfold Gw; apply Rmult_le_compat_l; [apply pow_le; lra | apply ost_rpow_le; apply Rmult_le_compat_l; [lra |]].
      rewrite <- Eqs; apply (Hgap qs k Hqs Hk Hvs Ev). }
    assert (Hdd : Rpower 2 (Rabs dd) <= exp (dl k)).
    { unfold Rpower; apply sp_exp_le.
      replace (Rabs dd * ln 2) with (Rabs (sc k * ln 2 - se k)); [exact Hdk |].
      unfold dd, Rdiv; rewrite Rabs_mult, Rabs_inv, (Rabs_right (ln 2)) by lra; field; lra. }
    assert (HiP : 0 < / P k) by (apply Rinv_0_lt_compat, HPv, Ev).
    assert (HRw : Rw M K Tt / Wx <= r / P k).
    { unfold Wx, r, dk_r, Rdiv; rewrite Rinv_mult.
      replace (Rw M K Tt * (/ Lc * / P k)) with ((Rw M K Tt * / P k) * / Lc) by ring.
      replace (Rw M K Tt * exp dmax * / P k) with ((Rw M K Tt * / P k) * exp dmax) by ring.
      apply Rmult_le_compat_l; [apply Rmult_le_pos; [apply Rw_nonneg | lra] | exact HiLc]. }
    assert (Htk : Rabs b <= tw k + r / P k).
    { eapply Rle_trans; [exact Hb |]; unfold tw, dk_tw.
      pose proof (Gw_ge_1 M Tt mT (sc k) Hsm).
      assert (Gw M Tt mT (sc k) * Rpower 2 (Rabs dd) <= (1 + ue) ^ Tt * Rpower 2 (u * Kk k) * exp (dl k))
        by (apply Rmult_le_compat; [lra | left; apply Rpower_pos | exact HG | exact Hdd]).
      lra. }
    destruct (Hpi x Hx) as [Hpi0 Hpi1].
    destruct (weight_rel_stored S_ (sw_p Key x) (sw_pi Key x) Wx b HWx Hpi0 Eb) as [a [Ea Ha]].
    assert (Eaf : sw_ws M Key x / Wx - 1 = a) by (unfold sw_ws; rewrite Ea; field; lra).
    assert (Hes' : es * sw_pi Key x / Wx <= es * pm * exp dmax / P k).
    { unfold Wx, Rdiv; rewrite Rinv_mult.
      replace (es * sw_pi Key x * (/ Lc * / P k)) with (es * / P k * (sw_pi Key x * / Lc)) by ring.
      replace (es * pm * exp dmax * / P k) with (es * / P k * (pm * exp dmax)) by ring.
      apply Rmult_le_compat_l; [apply Rmult_le_pos; lra |].
      apply Rmult_le_compat; [exact Hpi0 | left; apply Rinv_0_lt_compat, HLc0 | exact Hpi1 | exact HiLc]. }
    assert (us * (1 + Rabs b) <= us * (1 + (tw k + r / P k))) by (apply Rmult_le_compat_l; lra).
    rewrite Ebf, Eaf; split; [exact Eb | split; [unfold sw_ws; exact Ea | split; [exact Htk | lra]]]. }
  assert (Hsum_keys : forall f : Key -> R, rsum (map (fun x => f (sw_key Key x)) L) = rsum (map f ks))
    by (intros f; apply (rsum_shared_keys d tiles f); intros; reflexivity).
  assert (HPt : rsum (map (fun k => P k * tk k) ks) <= tb).
  { eapply Rle_trans; [| exact Htb].
    assert (Er : INR (length (filter vis ks)) * r = rsum (map (fun k => if vis k then r else 0) ks))
      by (rewrite <- ost_rsum_const; symmetry; apply (rsum_vis Key vis (fun _ => r))).
    rewrite Er, <- rsum_map_plus; apply bw_rsum_le; intros k _.
    unfold tk; destruct (vis k) eqn:Ev.
    - replace (P k * (tw k + r / P k)) with (P k * tw k + r) by (field; apply Rgt_not_eq, HPv, Ev); lra.
    - unfold P, dk_P; fold Z; rewrite Ev; lra. }
  (* the normaliser: one common factor *)
  set (Sw := rsum (map (sw_w Key) L)).
  assert (ESw : Sw = rsum (map (fun x => Lc * P (sw_key Key x) * (1 + fb x)) L))
    by (apply rsum_map_ext; intros x Hx; apply (HE x Hx)).
  assert (HSw : Lc * (1 - tb) <= Sw).
  { rewrite ESw, (rsum_map_ext _ (fun x => Lc * P (sw_key Key x) + Lc * (P (sw_key Key x) * fb x))) by (intros; ring).
    rewrite rsum_map_plus, !rsum_map_scal_l, (Hsum_keys P), HP1.
    assert (Hb : Rabs (rsum (map (fun x => P (sw_key Key x) * fb x) L)) <= tb).
    { eapply Rle_trans; [| exact HPt]; rewrite <- (Hsum_keys (fun k => P k * tk k)); apply drw_rsum_abs_le; intros x Hx.
      rewrite Rabs_mult, (Rabs_right (P _)) by (apply Rle_ge, HP0).
      apply Rmult_le_compat_l; [apply HP0 | apply (HE x Hx)]. }
    apply Rabs_le_inv in Hb; rewrite <- Rmult_plus_distr_l; apply Rmult_le_compat_l; lra. }
  destruct (l_kernel_common_factor M Key sc vis val accf n Hexp d tiles
              ltac:(intros tl Htl; rewrite (Hn tl Htl); lia) Hfmt) as [lam0 [eta0 [El0 [Hl0 He0]]]].
  fold st L Sw in El0.
  assert (HSmin : 0 < exp (- dmax) * (1 - tb)) by (apply Rmult_lt_0_compat; [apply exp_pos | lra]).
  destruct (common_factor_absorb (ks_l st) Sw lam0 eta0 (exp (- dmax) * (1 - tb)) HSmin
              ltac:(apply Rle_trans with (Lc * (1 - tb)); [apply Rmult_le_compat_r; lra | exact HSw]) El0)
    as [lam [El Hlam]].
  assert (Hlam' : Rabs lam <= lb).
  { eapply Rle_trans; [exact Hlam |]; eapply Rle_trans; [| exact Hlb].
    apply Rplus_le_compat; [exact Hl0 |].
    unfold Rdiv; rewrite Rinv_mult.
    replace (/ exp (- dmax)) with (exp dmax) by (rewrite exp_Ropp, Rinv_inv; reflexivity).
    replace (INR Tt * l_growth M ^ Tt * ea * exp dmax * / (1 - tb))
      with ((INR Tt * l_growth M ^ Tt * ea) * (exp dmax * / (1 - tb))) by ring.
    apply Rmult_le_compat_r; [apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat; lra] | exact He0]. }
  (* the accumulator: the shared numerator plus [E_c] *)
  set (Ec := fun c => nth c (ks_acc st) 0 - sw_num M Key val c L).
  assert (HsnL : forall c, sw_num M Key val c L = rsum (map (fun x => Lc * P (sw_key Key x) * (1 + fa x) * val (sw_key Key x) c) L)).
  { intros c; unfold sw_num; apply rsum_map_ext; intros x Hx; destruct (HE x Hx) as [_ [E2 _]]; rewrite E2; reflexivity. }
  assert (Hrho : 1 <= rho) by (unfold rho, rho_acc; assert (0 <= g * u) by (apply Rmult_le_pos; lra); nra).
  assert (HEc : forall c, In c cs -> Rabs (Ec c) <= Lc * EB c).
  { intros c Hc.
    destruct (acc_kernel_shared_final M Key sc vis val accf n g gd ga Hm Hexp d tiles c Hn Hfmt (Hcs c Hc)) as [E [Ex HEb]].
    fold st L in Ex, HEb.
    assert (EE : Ec c = E) by (unfold Ec; rewrite Ex; ring).
    rewrite EE; eapply Rle_trans; [exact HEb |]; clear EE Ex HEb.
    assert (HAa : rsum (map (fun x => P (sw_key Key x) * Rabs (fa x) * Rabs (val (sw_key Key x) c)) L) <= Aa c).
    { apply Rle_trans with (rsum (map (fun x => P (sw_key Key x) * (tk (sw_key Key x) + sk (sw_key Key x))
                                                 * Rabs (val (sw_key Key x) c)) L)).
      - apply bw_rsum_le; intros x Hx; apply Rmult_le_compat_r; [apply Rabs_pos |].
        apply Rmult_le_compat_l; [apply HP0 |]; destruct (HE x Hx) as [_ [_ [H1 H2]]].
        pose proof (Rabs_triang (fa x - fb x) (fb x)) as H; replace (fa x - fb x + fb x) with (fa x) in H by ring; lra.
      - rewrite (Hsum_keys (fun k => P k * (tk k + sk k) * Rabs (val k c))); unfold Aa, dk_Aa.
        set (C := (1 + us) * r + es * pm * exp dmax).
        assert (EC : C * rsum (map (fun k => Rabs (val k c)) (filter vis ks))
                     = rsum (map (fun k => if vis k then C * Rabs (val k c) else 0) ks))
          by (rewrite <- rsum_map_scal_l; symmetry; apply (rsum_vis Key vis (fun k => C * Rabs (val k c)))).
        rewrite EC, <- rsum_map_plus; apply bw_rsum_le; intros k _; unfold tk, sk; destruct (vis k) eqn:Ev.
        + replace (P k * (tw k + r / P k + (us * (1 + tw k + r / P k) + es * pm * exp dmax / P k)))
            with (P k * ((1 + us) * tw k + us) + C) by (unfold C; field; apply Rgt_not_eq, HPv, Ev); lra.
        + unfold P, dk_P; fold Z; rewrite Ev; lra. }
    assert (Hnum : forall j, sw_num M Key val c (firstn j L)
      = Lc * (rsum (map (fun k => P k * val k c) (firstn j ks))
              + rsum (map (fun x => P (sw_key Key x) * fa x * val (sw_key Key x) c) (firstn j L)))).
    { intros j; unfold sw_num.
      rewrite (rsum_map_ext _ (fun x => Lc * (P (sw_key Key x) * val (sw_key Key x) c
                                              + P (sw_key Key x) * fa x * val (sw_key Key x) c))).
      2:{ intros x Hx; assert (HxL : In x L) by (rewrite <- (firstn_skipn j L); apply in_or_app; left; exact Hx).
          destruct (HE x HxL) as [_ [E2 _]]; rewrite E2; ring. }
      rewrite rsum_map_scal_l, rsum_map_plus; f_equal; f_equal.
      apply (rsum_shared_keys_firstn d tiles j (fun k => P k * val k c)); intros; reflexivity. }
    assert (Hpre : forall t, Rabs (sw_num M Key val c (firstn (0 + t * n) L)) <= Lc * (Pre c t + Aa c)).
    { intros t; rewrite Nat.add_0_l, Hnum, Rabs_mult, (Rabs_right Lc) by lra; apply Rmult_le_compat_l; [lra |].
      eapply Rle_trans; [apply Rabs_triang |]; apply Rplus_le_compat; [apply Rle_refl |].
      eapply Rle_trans; [apply bw_rsum_abs |]; eapply Rle_trans; [| exact HAa].
      eapply Rle_trans; [| apply (rsum_firstn_le _ (t * n))].
      - apply bw_rsum_le; intros x _; rewrite !Rabs_mult, (Rabs_right (P _)) by (apply Rle_ge, HP0); apply Rle_refl.
      - intros x _; apply Rmult_le_pos; [apply Rmult_le_pos; [apply HP0 | apply Rabs_pos] | apply Rabs_pos]. }
    assert (Habs : sw_abs M Key val c L <= Lc * (Av c + Aa c)).
    { unfold sw_abs; apply Rle_trans with (rsum (map (fun x => Lc * (P (sw_key Key x) * Rabs (val (sw_key Key x) c)
                                   + P (sw_key Key x) * Rabs (fa x) * Rabs (val (sw_key Key x) c))) L)).
      - apply bw_rsum_le; intros x Hx; destruct (HE x Hx) as [_ [E2 _]]; rewrite E2.
        rewrite !Rabs_mult, (Rabs_right Lc) by lra; rewrite (Rabs_right (P _)) by (apply Rle_ge, HP0).
        pose proof (Rabs_triang 1 (fa x)) as H; rewrite Rabs_R1 in H.
        replace (Lc * (P (sw_key Key x) * Rabs (val (sw_key Key x) c) + P (sw_key Key x) * Rabs (fa x) * Rabs (val (sw_key Key x) c)))
          with (Lc * P (sw_key Key x) * (1 + Rabs (fa x)) * Rabs (val (sw_key Key x) c)) by ring.
        apply Rmult_le_compat_r; [apply Rabs_pos |]; apply Rmult_le_compat_l; [apply Rmult_le_pos; [lra | apply HP0] | exact H].
      - rewrite rsum_map_scal_l, rsum_map_plus; apply Rmult_le_compat_l; [lra |].
        rewrite (Hsum_keys (fun k => P k * Rabs (val k c))).
        change (rsum (map (fun k => P k * Rabs (val k c)) ks)) with (Av c); lra. }
    assert (HlenL : length L = (Tt * n)%nat)
      by (rewrite <- (map_length (sw_key Key) L), HLk; apply length_concat_uniform, Hn).
    assert (Htl : rsum (map (fun t => sw_abs M Key val c (firstn n (skipn (0 + t * n) L))) (seq 0 Tt)) = sw_abs M Key val c L)
      by (unfold sw_abs; apply (rsum_tiles_partition (fun x => Rabs (sw_ws M Key x * val (sw_key Key x) c)) n Tt L HlenL)).
    assert (Hs1 : rsum (map (fun t => Rabs (sw_num M Key val c (firstn (0 + t * n) L))) (seq 0 Tt))
                  <= Lc * (rsum (map (Pre c) (seq 0 Tt)) + INR Tt * Aa c)).
    { eapply Rle_trans; [apply bw_rsum_le; intros t _; apply Hpre |].
      rewrite rsum_map_scal_l, rsum_map_plus, ost_rsum_const, seq_length; apply Rle_refl. }
    assert (Hterms : acc_err_terms M Key val n g gd c L 0 Tt
                     <= Lc * (rsum (map (fun t => (rho - 1) * Pre c t) (seq 0 Tt)) + (rho - 1) * INR Tt * Aa c + gd * (Av c + Aa c))).
    { unfold acc_err_terms; rewrite rsum_map_plus, !rsum_map_scal_l, Htl; change (rho_acc M g) with rho.
      assert (H1 : (rho - 1) * rsum (map (fun t => Rabs (sw_num M Key val c (firstn (0 + t * n) L))) (seq 0 Tt))
                   <= (rho - 1) * (Lc * (rsum (map (Pre c) (seq 0 Tt)) + INR Tt * Aa c)))
        by (apply Rmult_le_compat_l; lra).
      assert (H2 : gd * sw_abs M Key val c L <= gd * (Lc * (Av c + Aa c))) by (apply Rmult_le_compat_l; lra).
      replace (Lc * ((rho - 1) * rsum (map (Pre c) (seq 0 Tt)) + (rho - 1) * INR Tt * Aa c + gd * (Av c + Aa c)))
        with ((rho - 1) * (Lc * (rsum (map (Pre c) (seq 0 Tt)) + INR Tt * Aa c)) + gd * (Lc * (Av c + Aa c)))
        by ring.
      lra. }
    change (rho_acc M g) with rho; fold Tt.
    assert (Hrt : 0 <= rho ^ Tt) by (apply pow_le; lra).
    assert (H1 : rho ^ Tt * acc_err_terms M Key val n g gd c L 0 Tt
                 <= rho ^ Tt * (Lc * (rsum (map (fun t => (rho - 1) * Pre c t) (seq 0 Tt)) + (rho - 1) * INR Tt * Aa c + gd * (Av c + Aa c))))
      by (apply Rmult_le_compat_l; assumption).
    set (X := rho ^ Tt * INR Tt * (1 + ue + ee) ^ Tt * ((1 + g) * ea + ga)).
    assert (HX : 0 <= X).
    { unfold X; apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos; [exact Hrt | apply pos_INR] | apply pow_le; lra] |].
      assert (0 <= (1 + g) * ea) by (apply Rmult_le_pos; lra); lra. }
    assert (H2 : X <= Lc * (X * exp dmax)).
    { replace (Lc * (X * exp dmax)) with (X * (Lc * exp dmax)) by ring; apply fa_le_mult_r; assumption. }
    unfold EB, dk_EB; fold pm in X; unfold X in *.
    change (rho_acc M g) with rho; change (dk_Pre P n ks) with Pre; change (dk_Aa P tw r pm dmax ks) with Aa.
    change (dk_Av P ks) with Av.
    replace (Lc * (rho ^ Tt * (rsum (map (fun t => (rho - 1) * Pre c t) (seq 0 Tt)) + (rho - 1) * INR Tt * Aa c + gd * (Av c + Aa c))
                   + rho ^ Tt * INR Tt * pm * ((1 + g) * ea + ga) * exp dmax))
      with (rho ^ Tt * (Lc * (rsum (map (fun t => (rho - 1) * Pre c t) (seq 0 Tt)) + (rho - 1) * INR Tt * Aa c + gd * (Av c + Aa c)))
            + Lc * (rho ^ Tt * INR Tt * pm * ((1 + g) * ea + ga) * exp dmax)) by ring.
    lra. }
  (* the store *)
  assert (Hout : forall c, In c cs ->
    Rabs (out c - (rsum (map (fun x => Lc * P (sw_key Key x) * (1 + fa x) * val (sw_key Key x) c) L) + Ec c) / ks_l st)
    <= store_ur A_ S_ * Rabs (out c) + store_er A_ S_).
  { intros c _; rewrite <- HsnL.
    replace (sw_num M Key val c L + Ec c) with (nth c (ks_acc st) 0) by (unfold Ec; ring).
    apply store_close. }
  assert (ElL : ks_l st = rsum (map (fun x => Lc * P (sw_key Key x) * (1 + fb x)) L) * (1 + lam))
    by (rewrite El, ESw; reflexivity).
  assert (HP1L : rsum (map (fun x => P (sw_key Key x)) L) = 1) by (rewrite (Hsum_keys P); exact HP1).
  assert (HPtL : rsum (map (fun x => P (sw_key Key x) * tk (sw_key Key x)) L) <= tb)
    by (rewrite (Hsum_keys (fun k => P k * tk k)); exact HPt).
  pose proof (attention_delta_ratio_error L cs (fun x => P (sw_key Key x)) fa fb (fun x => tk (sw_key Key x))
                (fun x => sk (sw_key Key x)) (fun x c => val (sw_key Key x) c) dO Ec out Lc (ks_l st) lam tb lb
                (store_ur A_ S_) (store_er A_ S_) (fun x _ => HP0 _) HP1L
                (fun x Hx => proj1 (proj2 (proj2 (HE x Hx)))) (fun x Hx => proj2 (proj2 (proj2 (HE x Hx))))
                HPtL Htb1 HLc0 ElL Hlam' Hlb1 Hout) as Hr.
  cbv beta in Hr.
  assert (EDL : rsum (map (fun j => P (sw_key Key j) * rsum (map (fun c => dO c * val (sw_key Key j) c) cs)) L) = D)
    by (apply (rsum_shared_keys d tiles (fun k => P k * dp k)); intros; reflexivity).
  rewrite EDL in Hr.
  (* the terms over the keys *)
  assert (B1 : rsum (map (fun j => P (sw_key Key j) * (tk (sw_key Key j) + tb)
                                   * Rabs (rsum (map (fun c => dO c * val (sw_key Key j) c) cs) - D)) L)
               <= rsum (map (fun k => P k * (tw k + tb) * Rabs (dp k - D)) ks)
                  + r * rsum (map (fun k => Rabs (dp k - D)) (filter vis ks))).
  { rewrite (rsum_shared_keys d tiles (fun k => P k * (tk k + tb) * Rabs (dp k - D))) by (intros; reflexivity).
    rewrite <- rsum_map_scal_l, <- (rsum_vis Key vis (fun k => r * Rabs (dp k - D))), <- rsum_map_plus.
    apply bw_rsum_le; intros k _; cbv beta.
    unfold tk; destruct (vis k) eqn:Ev.
    - replace (P k * (tw k + r / P k + tb)) with (P k * (tw k + tb) + r) by (field; apply Rgt_not_eq, HPv, Ev); lra.
    - unfold P, dk_P; fold Z; rewrite Ev; lra. }
  assert (Hsa : 0 <= sa).
  { unfold sa; assert (0 <= us * r) by (apply Rmult_le_pos; lra).
    assert (0 <= es * pm * exp dmax) by (apply Rmult_le_pos; [apply Rmult_le_pos; lra | left; apply exp_pos]); lra. }
  assert (B2 : rsum (map (fun j => P (sw_key Key j) * sk (sw_key Key j)
                                   * Rabs (rsum (map (fun c => dO c * val (sw_key Key j) c) cs))) L)
               <= rsum (map (fun k => P k * us * (1 + tw k) * Rabs (dp k)) ks)
                  + sa * rsum (map (fun k => Rabs (dp k)) (filter vis ks))).
  { rewrite (rsum_shared_keys d tiles (fun k => P k * sk k * Rabs (dp k))) by (intros; reflexivity).
    rewrite <- rsum_map_scal_l, <- (rsum_vis Key vis (fun k => sa * Rabs (dp k))), <- rsum_map_plus.
    apply bw_rsum_le; intros k _; cbv beta.
    unfold sk; destruct (vis k) eqn:Ev.
    - replace (P k * (us * (1 + tw k + r / P k) + es * pm * exp dmax / P k)) with (P k * us * (1 + tw k) + sa)
        by (unfold sa; field; apply Rgt_not_eq, HPv, Ev); lra.
    - unfold P, dk_P; fold Z; rewrite Ev; lra. }
  assert (B3 : rsum (map (fun c => Rabs (dO c) * Rabs (Ec c)) cs) / Lc <= rsum (map (fun c => Rabs (dO c) * EB c) cs)).
  { rewrite <- rsum_map_div; apply bw_rsum_le; intros c Hc.
    assert (H : Rabs (Ec c) / Lc <= EB c).
    { apply (Rmult_le_reg_r Lc); [exact HLc0 |]; unfold Rdiv; rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
      rewrite Rmult_comm; apply HEc, Hc. }
    unfold Rdiv in *; rewrite Rmult_assoc; apply Rmult_le_compat_l; [apply Rabs_pos | exact H]. }
  eapply Rle_trans; [exact Hr |].
  apply Rplus_le_compat_r, Rplus_le_compat_r.
  apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat, Rmult_lt_0_compat; lra |].
  lra.
Qed.

End DeltaKernel.

(** ** The scores of the kernel: [tl.dot (q, k)] by any dot model, per key *)

Section DeltaKernelDot.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** [score_delta_de] and [score_max_de] at [P] and the dot's error [g_rel P + g_abs] grow with [P]. *)
Lemma score_de_mono : forall scale uc P1 P2 gr ga, 0 <= scale -> 0 <= uc -> 0 <= gr -> P1 <= P2 ->
  score_delta_de A_ scale uc P1 (gr * P1 + ga) <= score_delta_de A_ scale uc P2 (gr * P2 + ga)
  /\ score_max_de A_ scale uc P1 (gr * P1 + ga) <= score_max_de A_ scale uc P2 (gr * P2 + ga).
Proof.
  intros scale uc P1 P2 gr ga Hs Huc Hg HP; pose proof (ff_u_nonneg A_) as Hu.
  assert (Hd : gr * P1 <= gr * P2) by (apply Rmult_le_compat_l; lra).
  unfold score_delta_de, score_max_de; split; apply Rplus_le_compat_r.
  - apply Rmult_le_compat_l; [lra |]; apply Rplus_le_compat; [| lra].
    apply Rmult_le_compat_r; [assert (0 <= u * (1 + uc)) by (apply Rmult_le_pos; lra); lra | lra].
  - apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_l; [lra |].
    apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | lra].
Qed.

(** [attention_delta_kernel_error] with the kernel's scores [rnd (dotf q k * c)] ([score2_with],
    [dotf] any [dot_model]) and the exact scores [scale q.k]: keys [(k, v)], the per-key
    score error [dl = score_delta_de scale uc |q|.|k| (g_rel |q|.|k| + g_abs)] (ForwardError.v's
    [score2_with_error] at the key's own [dot_abs q k]), [dmax] and the score range
    [K = 2 score_max_de] at a bound [P] of every [dot_abs q k]. *)
Theorem attention_delta_kernel_error_dot : forall (dotf : list R -> list R -> R) (E : nat) (g_rel g_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_acc g_dot ga : R) (q : list R) (c scale uc P : R)
    (vis : list R * list R -> bool) (d : nat) (tiles : list (list (list R * list R))) (cs : list nat)
    (dO : nat -> R) (tb lb : R),
  let sck := fun kv : list R * list R => score2_with A_ dotf c q (fst kv) in
  let valk := fun (kv : list R * list R) (i : nat) => nth i (snd kv) 0 in
  let se := fun kv : list R * list R => scale * dot_R q (fst kv) in
  let dl := fun kv : list R * list R =>
    score_delta_de A_ scale uc (dot_abs q (fst kv)) (g_rel * dot_abs q (fst kv) + g_abs) in
  let dmax := score_delta_de A_ scale uc P (g_rel * P + g_abs) in
  let K := 2 * score_max_de A_ scale uc P (g_rel * P + g_abs) in
  let st := kernel_run_acc M (list R * list R) sck vis valk accf (kernel_start d) tiles in
  let out := fun i => ff_rnd S_ (rnd (nth i (ks_acc st) 0 / ks_l st)) in
  (forall x, 0 <= exp2 x) -> acc_dot_split_model accf n g_acc g_dot ga -> dot_model dotf E g_rel g_abs ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  (forall tl, In tl tiles -> length tl = n) ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  (forall i, In i cs -> (i < d)%nat) ->
  dk_tb_sum M (list R * list R) vis se dl (fun _ => K) tiles K dmax <= tb -> tb < 1 ->
  dk_lam M n (length tiles) dmax tb <= lb -> lb < 1 ->
  Rabs (rsum (map (fun i => dO i * out i) cs) - dk_D (list R * list R) vis valk se (concat tiles) cs dO)
  <= delta_kernel_bound M (list R * list R) vis valk n g_acc g_dot ga se dl (fun _ => K) tiles cs dO out K dmax tb lb.
Proof.
  intros dotf E g_rel g_abs accf n g_acc g_dot ga q c scale uc P vis d tiles cs dO tb lb sck valk se dl dmax K st out
    Hexp Hm Hdm Hs Huc Hc Hq Hkeys Hn Hvis Hcs Htb Htb1 Hlb Hlb1.
  set (smax := score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  pose proof (dm_rel_nonneg _ _ _ _ Hdm) as Hgr.
  assert (Hone : forall kv, In kv (concat tiles) -> vis kv = true ->
            Rabs (sck kv * ln 2 - se kv) <= dl kv /\ dl kv <= dmax /\ Rabs (sck kv) <= smax).
  { intros kv Hkv Hv; destruct (Hkeys kv Hkv Hv) as [Hk HP].
    destruct (score2_with_error A_ dotf E g_rel g_abs c scale uc q (fst kv) (dot_abs q (fst kv)) Hdm Hq Hk Hs Huc Hc
                (Rle_refl _)) as [H1 H2].
    destruct (score_de_mono scale uc (dot_abs q (fst kv)) P g_rel g_abs ltac:(lra) Huc Hgr HP) as [H3 H4].
    split; [exact H1 | split; [exact H3 | eapply Rle_trans; [exact H2 | exact H4]]]. }
  apply (attention_delta_kernel_error M (list R * list R) sck vis valk accf n g_acc g_dot ga se dl (fun _ => K) d tiles cs dO
           (- smax) K dmax tb lb Hexp Hm); split; try assumption.
  - destruct Hvis as [kv [Hkv Hv]]; destruct (Hone kv Hkv Hv) as [_ [_ H]]; pose proof (Rabs_pos (sck kv)); unfold K; lra.
  - intros kv Hkv Hv; destruct (Hone kv Hkv Hv) as [_ [_ H]]; apply Rabs_le_inv in H.
    split; [apply ff_rnd_fmt | unfold K; lra].
  - intros kv Hkv Hv; destruct (Hone kv Hkv Hv) as [H1 [H2 _]]; split; assumption.
  - intros j kv Hj Hkv Hvj Hv; destruct (Hone j Hj Hvj) as [_ [_ H1]]; destruct (Hone kv Hkv Hv) as [_ [_ H2]].
    apply Rabs_le_inv in H1; apply Rabs_le_inv in H2; unfold K; lra.
Qed.

End DeltaKernelDot.

(** ** The H100 instances: the P.V dot as the kernels run it

    [attention_delta_kernel_error] with the P.V [tl.dot (p, v, acc * alpha)] of the H100
    (ForwardError.v PART F, as [attention_forward_acc_posteriori_tf32x3_op] / [_tc_op]):
    float32, Triton's 3xTF32 ([tf32x3_acc_fn], [tf32x3_tc_op_acc_dot_split_model]:
    [g_acc = u], [g_dot = u + (1 + u) tf32x3_tc_rel (2^(1-F)) ur k qv], [ga = (1 + u) 0 + ea]);
    bf16/fp16, the tensor cores' chain from [acc * alpha] ([tc_acc_fn], [tc_acc_op_dot_model]
    as a split model, [acc_dot_split_of_model]: [g_acc = g_dot = gamma (tc_delta (2^(1-F)) ur k) qv],
    [ga = 0]); tiles of [n <= qv k] keys.  The
    scores' errors [dl] stay premises (the caller's per pair, as PerPairScoreError.v). *)

Section DeltaKernelH100.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R).

Theorem attention_delta_kernel_error_tf32x3_op : forall (tco : R -> R) (ur : R) (F : Z) (k qv n : nat)
    (se dl Kk : Key -> R) (d : nat) (tiles : list (list Key)) (cs : list nat) (dO : nat -> R) (m0 K dmax tb lb : R),
  let accf := tf32x3_acc_fn F tco rnd k in
  let g_dot := u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qv in
  let ga := (1 + u) * 0 + ea in
  let st := kernel_run_acc M Key sc vis val accf (kernel_start d) tiles in
  let out := fun c => ff_rnd S_ (rnd (nth c (ks_acc st) 0 / ks_l st)) in
  0 <= ur -> (forall x, Rabs (tco x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR (3 * qv) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (forall x, 0 <= exp2 x) -> dk_premises M Key sc vis n se dl Kk d tiles cs m0 K dmax tb lb ->
  Rabs (rsum (map (fun c => dO c * out c) cs) - dk_D Key vis val se (concat tiles) cs dO)
  <= delta_kernel_bound M Key vis val n u g_dot ga se dl Kk tiles cs dO out K dmax tb lb.
Proof.
  intros tco ur F k qv n se dl Kk d tiles cs dO m0 K dmax tb lb accf g_dot ga st out Hur Htco Hk Hqv Hn Hd Hexp.
  exact (attention_delta_kernel_error M Key sc vis val accf n u g_dot ga se dl Kk d tiles cs dO m0 K dmax tb lb Hexp
           (tf32x3_tc_op_acc_dot_split_model tco rnd ur u ea F k qv n Hur Htco (ff_u_nonneg _) (ff_abs _) Hk Hqv Hn Hd)).
Qed.

Theorem attention_delta_kernel_error_tc_op : forall (tco : R -> R) (ur : R) (F : Z) (k qv n : nat)
    (se dl Kk : Key -> R) (d : nat) (tiles : list (list Key)) (cs : list nat) (dO : nat -> R) (m0 K dmax tb lb : R),
  let accf := tc_acc_fn F tco k in
  let g := gamma (tc_delta (bpow radix2 (1 - F)) ur k) qv in
  let st := kernel_run_acc M Key sc vis val accf (kernel_start d) tiles in
  let out := fun c => ff_rnd S_ (rnd (nth c (ks_acc st) 0 / ks_l st)) in
  0 <= ur -> (forall x, Rabs (tco x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR qv * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (forall x, 0 <= exp2 x) -> dk_premises M Key sc vis n se dl Kk d tiles cs m0 K dmax tb lb ->
  Rabs (rsum (map (fun c => dO c * out c) cs) - dk_D Key vis val se (concat tiles) cs dO)
  <= delta_kernel_bound M Key vis val n g g 0 se dl Kk tiles cs dO out K dmax tb lb.
Proof.
  intros tco ur F k qv n se dl Kk d tiles cs dO m0 K dmax tb lb accf g st out Hur Htco Hk Hqv Hn Hd Hexp.
  exact (attention_delta_kernel_error M Key sc vis val accf n g g 0 se dl Kk d tiles cs dO m0 K dmax tb lb Hexp
           (acc_dot_split_of_model _ _ _ _ (tc_acc_op_dot_model tco ur F k qv n Hur Htco Hk Hqv Hn Hd))).
Qed.

End DeltaKernelH100.
