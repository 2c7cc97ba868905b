(** * Reductions over tokens and [ignore_index] (over [R]).

    The forward token loop accumulates, chunk by chunk, the per-token
    losses (0 at ignored tokens), the lses, the sum of the kept losses and
    the number of kept tokens.  Here:

    - the reductions: "none" is the per-token losses with 0 at ignored
      tokens; "sum" is the sum over the kept tokens; "mean" is that sum
      divided by the number of kept tokens ([ce_loss_correct]);
    - all tokens ignored: the kept count is 0 and "mean" is [0], by the
      guard of [ce_output] ([if 0 < count then total / count else 0];
      [ce_mean_all_ignored]).  THIS IS THE DEFINED BEHAVIOUR OF THE
      SPECIFICATION, and it is the same over [R] and over floats (the
      oracle).  [F.cross_entropy(..., reduction="mean")] returns NaN
      there (a float 0/0); a reference following this specification
      returns 0 (e.g. divides by [max(count, 1)], which gives 0 since the
      sum is then 0).  Over [R] the guard changes nothing: [x / 0 = 0]
      ([mean_guard_R]), so [ce_loss_correct] states "mean" as a plain
      division;
    - ignored tokens contribute nothing to the gradients: their rows of G
      and of grad_input are zero ([ignored_grad_zero]);
    - the ignored tokens can be dropped before the projection: for "sum"
      and "mean", the loss, grad_weight and grad_bias over the kept tokens
      only equal those over all tokens, and grad_input over the kept tokens
      is the kept rows of grad_input over all tokens ([ce_drop_ignored]). *)

From Coq Require Import Reals List Lra Arith Lia ZArith.
Set Warnings "-ambiguous-paths".
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.Backward Attention.StreamCorrect LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse
  LinearCrossEntropy.Loss
  LinearCrossEntropy.Gradient.
Import ListNotations.
Open Scope R_scope.

(** The specification's loss of token [(h, t)]. *)
Definition token_loss_spec (cfg : ce_config R) (bias : option (list R)) (W : list (list R))
    (ht : list R * Z) : R :=
  ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) (snd ht)
                  (logits_row R_ops (ce_softcap cfg) bias W (fst ht)).

(** The kept tokens [(h_i, t_i)], [t_i <> ignore_index], in order. *)
Definition kept_tokens (cfg : ce_config R) (H : list (list R)) (targets : list Z)
    : list (list R * Z) :=
  filter (fun ht => kept cfg (snd ht)) (combine H targets).

(** The rows of a per-token matrix (e.g. grad_input) at the kept tokens. *)
Definition kept_rows (cfg : ce_config R) (rows : list (list R)) (targets : list Z)
    : list (list R) :=
  map fst (filter (fun rt => kept cfg (snd rt)) (combine rows targets)).

(** ** List lemmas *)

Lemma rsum_filter : forall {A} (p : A -> bool) (f : A -> R) l,
  rsum (map (fun x => if p x then f x else 0) l) = rsum (map f (filter p l)).
Proof.
  intros A p f l; induction l as [|x l IH]; [reflexivity|].
  simpl; destruct (p x); simpl; rewrite <- IH; [reflexivity|].
  unfold rsum; simpl; ring.
Qed.

Lemma rsum_indicator : forall {A} (p : A -> bool) l,
  rsum (map (fun x => if p x then 1 else 0) l) = INR (length (filter p l)).
Proof.
  intros A p l; rewrite (rsum_filter p (fun _ => 1)).
  induction (filter p l) as [|x l' IH]; [reflexivity|].
  cbn [map length]; rewrite rsum_cons, IH, S_INR; ring.
Qed.

Lemma map_combine_self : forall {A B C} (F : A * B -> C) (f : A -> B) l,
  map F (combine l (map f l)) = map (fun x => F (x, f x)) l.
Proof.
  intros A B C F f l; induction l as [|x l IH]; [reflexivity|].
  simpl; rewrite IH; reflexivity.
Qed.

Lemma map_snd_combine_eq : forall {A B} (l1 : list A) (l2 : list B),
  length l1 = length l2 -> map snd (combine l1 l2) = l2.
Proof.
  intros A B l1; induction l1 as [|x l1 IH]; intros [|y l2] H; simpl in H; try lia;
    [reflexivity|].
  simpl; rewrite IH by lia; reflexivity.
Qed.

Lemma filter_filter_same : forall {A} (p : A -> bool) l, filter p (filter p l) = filter p l.
Proof.
  intros A p l; induction l as [|x l IH]; [reflexivity|].
  simpl; destruct (p x) eqn:E; simpl; [rewrite E, IH|]; auto.
Qed.

Lemma Forall2_filter_rows : forall {A B} (P : A -> B * Z -> Prop) (q : Z -> bool) rows l,
  Forall2 P rows l ->
  Forall2 P (map fst (filter (fun rt => q (snd rt)) (combine rows (map snd l))))
            (filter (fun x => q (snd x)) l).
Proof.
  intros A B P q rows l H; induction H as [|r x rows l Hr _ IH]; [constructor|].
  simpl; destruct (q (snd x)); simpl; [constructor|]; assumption.
Qed.

Lemma filter_all_false : forall {A} (p : A -> bool) l,
  (forall x, In x l -> p x = false) -> filter p l = [].
Proof.
  intros A p l H; induction l as [|x l IH]; [reflexivity|].
  simpl; rewrite H by (left; reflexivity); apply IH; intros y Hy; apply H; right; exact Hy.
Qed.

Lemma Forall2_nth_inv : forall {A B} (P : A -> B -> Prop) l1 l2 i d1 d2,
  Forall2 P l1 l2 -> (i < length l1)%nat -> P (nth i l1 d1) (nth i l2 d2).
Proof.
  intros A B P l1 l2 i d1 d2 H; revert i; induction H as [|x y l1 l2 Hxy _ IH]; intros i Hi;
    [simpl in Hi; lia|].
  destruct i; [exact Hxy|apply IH; simpl in Hi; lia].
Qed.

Lemma nth_all_zero : forall (l : list R) v, (forall y, In y l -> y = 0) -> nth v l 0 = 0.
Proof.
  intros l v H; destruct (Nat.lt_ge_cases v (length l)).
  - apply H, nth_In; assumption.
  - apply nth_overflow; assumption.
Qed.

Lemma tokens_length : forall (H : list (list R)) targets,
  length targets = length H -> length (tokens H targets) = length H.
Proof.
  intros; unfold tokens, tok; rewrite !combine_length, seq_length; lia.
Qed.

Lemma nth_tokens : forall (H : list (list R)) targets i d,
  length targets = length H -> (i < length H)%nat ->
  nth i (tokens H targets) d = (i, (nth i H [], nth i targets 0%Z)).
Proof.
  intros H targets i [d1 [d2 d3]] Hl Hi; unfold tokens, tok.
  rewrite combine_nth by (rewrite seq_length, combine_length; lia).
  rewrite seq_nth, combine_nth by lia.
  f_equal; f_equal; apply nth_indep; lia.
Qed.

(** ** The forward token loop *)

Section Forward.
Variables (cfg : ce_config R) (bv : nat) (W : list (list R)) (bias : option (list R)).

Local Notation tf := (fun ht : list R * Z => token_forward R_ops cfg bv W bias (fst ht) (snd ht)).
Local Notation lossf :=
  (fun ht : list R * Z => if kept cfg (snd ht) then fst (tf ht) else 0).

Lemma fold_token_chunk_step : forall tcs P acc,
  fa_losses acc = map lossf P -> fa_lses acc = map (fun ht => snd (tf ht)) P ->
  fa_total acc = rsum (map lossf P) ->
  fa_count acc = INR (length (filter (fun ht => kept cfg (snd ht)) P)) ->
  let acc' := fold_left (token_chunk_step R_ops cfg bv W bias) tcs acc in
  fa_losses acc' = map lossf (P ++ concat tcs)
  /\ fa_lses acc' = map (fun ht => snd (tf ht)) (P ++ concat tcs)
  /\ fa_total acc' = rsum (map lossf (P ++ concat tcs))
  /\ fa_count acc' = INR (length (filter (fun ht => kept cfg (snd ht)) (P ++ concat tcs))).
Proof.
  induction tcs as [|tc tcs IH]; intros P acc H1 H2 H3 H4; simpl.
  - rewrite app_nil_r; auto.
  - rewrite app_assoc; apply IH; unfold token_chunk_step; cbn [fa_losses fa_lses fa_total fa_count].
    + rewrite H1, map_combine_self, map_app; reflexivity.
    + rewrite H2, map_map, map_app; reflexivity.
    + rewrite H3, map_combine_self, sc_sum_R, map_app, rsum_app; reflexivity.
    + rewrite H4, sc_sum_R; change (sc_one R_ops) with 1; change (sc_zero R_ops) with 0.
      rewrite rsum_indicator, filter_app, app_length, plus_INR; reflexivity.
Qed.

(** The forward pass, for any token chunk size [bt]: the per-token losses
    (0 at ignored tokens), the lses, the sum of the losses and the number
    of kept tokens. *)
Theorem ce_forward_fold : forall bt H targets,
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  fa_losses fa = map lossf (combine H targets)
  /\ fa_lses fa = map (fun ht => snd (tf ht)) (combine H targets)
  /\ fa_total fa = rsum (map lossf (combine H targets))
  /\ fa_count fa = INR (length (kept_tokens cfg H targets)).
Proof.
  intros bt H targets; unfold ce_forward.
  pose proof (fold_token_chunk_step (chunk bt (combine H targets)) [] (mk_fwd_acc [] [] 0 0))
    as Hf; rewrite concat_chunk in Hf; apply Hf; reflexivity.
Qed.

End Forward.

(** ** The reductions *)

(** Over [R] the guarded mean of [ce_output] is the plain division by a
    count ([x / 0 = 0] in Coq's reals). *)
Lemma mean_guard_R : forall x n,
  (if Rltb 0 (INR n) then x / INR n else 0) = x / INR n.
Proof.
  intros x n; unfold Rltb; destruct (Rlt_dec 0 (INR n)) as [_|Hn]; [reflexivity|].
  assert (H0 : INR n = 0) by (pose proof (pos_INR n); lra).
  rewrite H0; unfold Rdiv; rewrite Rinv_0; ring.
Qed.

(** The loss computed by the chunked forward (token chunks of [bt],
    vocabulary chunks of [bv]) and the reduction: "none" is the per-token
    specification loss with 0 at ignored tokens, "sum" the sum over the
    kept tokens, "mean" that sum divided by the number of kept tokens. *)
Theorem ce_loss_correct : forall cfg bt bv H W bias targets,
  W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  ce_loss R_ops cfg bt bv H W bias targets =
  match ce_reduction cfg with
  | Red_none => map (fun ht => if kept cfg (snd ht) then token_loss_spec cfg bias W ht else 0)
                    (combine H targets)
  | Red_sum => [rsum (map (token_loss_spec cfg bias W) (kept_tokens cfg H targets))]
  | Red_mean => [rsum (map (token_loss_spec cfg bias W) (kept_tokens cfg H targets))
                 / INR (length (kept_tokens cfg H targets))]
  end.
Proof.
  intros cfg bt bv H W bias targets HW Ht.
  destruct (ce_forward_fold cfg bv W bias bt H targets) as (H1 & _ & H3 & H4).
  assert (E : map (fun ht => if kept cfg (snd ht)
                             then fst (token_forward R_ops cfg bv W bias (fst ht) (snd ht)) else 0)
                  (combine H targets)
              = map (fun ht => if kept cfg (snd ht) then token_loss_spec cfg bias W ht else 0)
                    (combine H targets)).
  { apply map_ext_in; intros [h t] Hin; cbn [fst snd].
    destruct (kept cfg t) eqn:Ek; [|reflexivity].
    rewrite token_forward_correct; [reflexivity|exact HW|].
    apply Ht; [apply in_combine_r in Hin; exact Hin|exact Ek]. }
  unfold ce_loss, ce_output; rewrite H1, H3, H4, E, rsum_filter; fold (kept_tokens cfg H targets).
  destruct (ce_reduction cfg); [reflexivity|reflexivity|].
  exact (f_equal (fun y => [y]) (mean_guard_R _ _)).
Qed.

(** All tokens ignored: the kept sum and count are both 0 and "mean" is
    0, by the guard of [ce_output] (no division by the zero count).  This
    is the defined behaviour of the specification, the same over floats;
    [F.cross_entropy] returns NaN here. *)
Theorem ce_mean_all_ignored : forall cfg bt bv H W bias targets,
  ce_reduction cfg = Red_mean ->
  (forall t, In t targets -> kept cfg t = false) ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  fa_total fa = 0 /\ fa_count fa = 0 /\ ce_loss R_ops cfg bt bv H W bias targets = [0].
Proof.
  intros cfg bt bv H W bias targets Hr Hig fa.
  destruct (ce_forward_fold cfg bv W bias bt H targets) as (_ & _ & H3 & H4).
  assert (Hk : kept_tokens cfg H targets = []).
  { unfold kept_tokens; apply filter_all_false; intros [h t] Hin; cbn [snd].
    apply Hig; apply in_combine_r in Hin; exact Hin. }
  assert (Ht : fa_total fa = 0).
  { unfold fa; rewrite H3, (rsum_filter (fun ht => kept cfg (snd ht))
                              (fun ht => fst (token_forward R_ops cfg bv W bias (fst ht) (snd ht)))).
    fold (kept_tokens cfg H targets); rewrite Hk; reflexivity. }
  assert (Hc : fa_count fa = 0) by (unfold fa; rewrite H4, Hk; reflexivity).
  split; [exact Ht|split; [exact Hc|]].
  unfold ce_loss, ce_output; rewrite Hr; fold fa; rewrite Hc.
  change (sc_ltb R_ops (sc_zero R_ops) 0) with (Rltb 0 0); unfold Rltb.
  destruct (Rlt_dec 0 0) as [H0|_]; [lra|reflexivity].
Qed.

(** All tokens ignored with "sum": the loss is 0. *)
Theorem ce_sum_all_ignored : forall cfg bt bv H W bias targets,
  ce_reduction cfg = Red_sum ->
  (forall t, In t targets -> kept cfg t = false) ->
  ce_loss R_ops cfg bt bv H W bias targets = [0].
Proof.
  intros cfg bt bv H W bias targets Hr Hig.
  assert (Hm : ce_reduction (mk_ce_config (ce_ignore_index cfg) (ce_smoothing cfg)
                  (ce_z_loss cfg) (ce_softcap cfg) Red_mean) = Red_mean) by reflexivity.
  destruct (ce_mean_all_ignored _ bt bv H W bias targets Hm Hig) as (Ht & _).
  unfold ce_loss, ce_output; rewrite Hr; f_equal; rewrite <- Ht; reflexivity.
Qed.

(** ** Gradients at ignored tokens *)

Lemma nth_map_lt : forall {A B} (f : A -> B) l i d d',
  (i < length l)%nat -> nth i (map f l) d = f (nth i l d').
Proof.
  intros A B f l i d d' Hi; rewrite (nth_indep _ d (f d')) by (rewrite map_length; exact Hi).
  apply map_nth.
Qed.

Lemma grad_entry_ignored : forall cfg V bias lses dout count i h t e,
  kept cfg t = false -> grad_entry R_ops cfg V bias lses dout count (i, (h, t)) e = 0.
Proof.
  intros cfg V bias lses dout count i h t e Hk; unfold grad_entry, token_weight.
  cbv beta iota zeta; rewrite Hk; change (sc_mul R_ops) with Rmult;
    change (sc_zero R_ops) with 0; ring.
Qed.

Lemma grad_matrix_row : forall cfg bias H W targets fa dout i,
  length targets = length H -> (i < length H)%nat ->
  nth i (grad_matrix R_ops cfg bias H W targets fa dout) []
  = map (grad_entry R_ops cfg (length W) bias (fa_lses fa) dout (fa_count fa)
           (i, (nth i H [], nth i targets 0%Z))) (vocab W).
Proof.
  intros cfg bias H W targets fa dout i Hl Hi; unfold grad_matrix, grad_block.
  rewrite (nth_map_lt (A := @tok R) _ _ _ _ (0%nat, ([], 0%Z)))
    by (rewrite tokens_length; assumption).
  rewrite nth_tokens by assumption; reflexivity.
Qed.

(** An ignored token (target = ignore_index) has a zero row of G and a
    zero row of grad_input (the chunked backward's). *)
Theorem ignored_grad_zero : forall cfg bt bv H W bias targets fa dout gin gW gb i,
  length targets = length H -> (i < length H)%nat -> kept cfg (nth i targets 0%Z) = false ->
  ce_backward R_ops cfg bt bv H W bias targets fa dout = (gin, gW, gb) ->
  (forall v, nth v (nth i (grad_matrix R_ops cfg bias H W targets fa dout) []) 0 = 0)
  /\ (forall c, nth c (nth i gin []) 0 = 0).
Proof.
  intros cfg bt bv H W bias targets fa dout gin gW gb i Hl Hi Hk Hb.
  split.
  - intros v; apply nth_all_zero; rewrite grad_matrix_row by assumption.
    intros y Hy; apply in_map_iff in Hy; destruct Hy as [e [<- _]].
    apply grad_entry_ignored, Hk.
  - destruct (ce_backward_correct cfg bt bv H W bias targets fa dout gin gW gb Hl Hb)
      as [Hin _].
    assert (Hlg : length gin = length H)
      by (rewrite (Forall2_length _ _ _ Hin); unfold grad_input_spec, grad_matrix, grad_block;
          rewrite !map_length; apply tokens_length, Hl).
    intros c; rewrite (Forall2_nth_inv _ _ _ i [] [] Hin) by lia.
    unfold grad_input_spec; rewrite (nth_map_lt _ _ _ _ []).
    + rewrite grad_matrix_row, weighted_sum_vocab by assumption.
      apply rsum_map_zero; intros e _; rewrite grad_entry_ignored by exact Hk; ring.
    + unfold grad_matrix, grad_block; rewrite map_length, tokens_length; assumption.
Qed.

(** ** Dropping the ignored tokens before the projection *)

(** The reduction weight of a kept token for "sum" / "mean". *)
Definition red_weight (cfg : ce_config R) (dout : list R) (count : R) : R :=
  match ce_reduction cfg with
  | Red_mean => nth 0 dout 0 / count
  | _ => nth 0 dout 0
  end.

(** [g_iv] as a function of the token [(h, t)], its lse recomputed by the
    per-token forward. *)
Definition grad_tok (cfg : ce_config R) (bv : nat) (W : list (list R)) (bias : option (list R))
    (dout : list R) (count : R) (ht : list R * Z) (e : nat * list R) : R :=
  let r := raw_logit R_ops bias (fst ht) e in
  (if kept cfg (snd ht) then red_weight cfg dout count else 0)
  * (dlogit R_ops (length W) (ce_smoothing cfg) (ce_z_loss cfg)
       (snd (token_forward R_ops cfg bv W bias (fst ht) (snd ht))) (snd ht) (fst e)
       (softcap R_ops (ce_softcap cfg) r)
     * softcap_grad R_ops (ce_softcap cfg) r).

Lemma grad_entry_tok : forall cfg bt bv H W bias targets dout x e,
  ce_reduction cfg <> Red_none -> length targets = length H ->
  In x (tokens H targets) ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  grad_entry R_ops cfg (length W) bias (fa_lses fa) dout (fa_count fa) x e
  = grad_tok cfg bv W bias dout (fa_count fa) (snd x) e.
Proof.
  intros cfg bt bv H W bias targets dout [i [h t]] e Hr Hl Hin fa.
  assert (Hlen : length (combine H targets) = length H)
    by (rewrite combine_length; lia).
  pose proof Hin as Hi; unfold tokens in Hi; apply in_combine_l, in_seq in Hi.
  unfold tokens in Hin; rewrite <- Hlen in Hin.
  apply in_combine_seq in Hin as [_ Hnth]; rewrite Nat.sub_0_r in Hnth.
  destruct (ce_forward_fold cfg bv W bias bt H targets) as (_ & H2 & _ & _).
  assert (HL : nth i (fa_lses fa) 0 = snd (token_forward R_ops cfg bv W bias h t)).
  { unfold fa; rewrite H2, (nth_map_lt _ _ _ _ (h, t)) by lia; rewrite Hnth; reflexivity. }
  unfold grad_entry, grad_tok, token_weight, red_weight; cbv beta iota zeta; cbn [fst snd].
  change (sc_zero R_ops) with 0; rewrite HL.
  destruct (kept cfg t); [|reflexivity].
  destruct (ce_reduction cfg); [contradiction|reflexivity|reflexivity].
Qed.

(** A sum over the tokens of [g_xe * F (h_x, t_x)] is the sum over the kept
    tokens of the same quantity. *)
Lemma rsum_tokens_kept : forall cfg bt bv H W bias targets dout (F : list R * Z -> R) e,
  ce_reduction cfg <> Red_none -> length targets = length H ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  rsum (map (fun x => grad_entry R_ops cfg (length W) bias (fa_lses fa) dout (fa_count fa) x e
                      * F (snd x)) (tokens H targets))
  = rsum (map (fun ht => grad_tok cfg bv W bias dout (fa_count fa) ht e * F ht)
              (kept_tokens cfg H targets)).
Proof.
  intros cfg bt bv H W bias targets dout F e Hr Hl fa.
  rewrite (rsum_map_ext _ (fun x : @tok R => grad_tok cfg bv W bias dout (fa_count fa) (snd x) e * F (snd x)))
    by (intros x Hx; unfold fa; rewrite grad_entry_tok by assumption; reflexivity).
  assert (Hlen : length (combine H targets) = length H) by (rewrite combine_length; lia).
  unfold tokens; rewrite <- Hlen.
  rewrite (rsum_combine_seq _ (fun ht => grad_tok cfg bv W bias dout (fa_count fa) ht e * F ht))
    by (intros; reflexivity).
  unfold kept_tokens; rewrite <- rsum_filter; apply rsum_map_ext; intros [h t] _.
  unfold grad_tok; cbn [fst snd]; destruct (kept cfg t); [reflexivity|ring].
Qed.

Lemma kept_tokens_split : forall cfg H targets Hk tk,
  split (kept_tokens cfg H targets) = (Hk, tk) ->
  kept_tokens cfg Hk tk = kept_tokens cfg H targets /\ length tk = length Hk.
Proof.
  intros cfg H targets Hk tk Hs.
  pose proof (split_combine _ Hs) as Hc.
  pose proof (split_length_l (kept_tokens cfg H targets)) as H1.
  pose proof (split_length_r (kept_tokens cfg H targets)) as H2.
  rewrite Hs in H1, H2; cbn [fst snd] in H1, H2.
  split; [|congruence].
  unfold kept_tokens at 1; rewrite Hc; unfold kept_tokens; apply filter_filter_same.
Qed.

Lemma ce_forward_kept : forall cfg bt bt' bv H W bias targets Hk tk,
  split (kept_tokens cfg H targets) = (Hk, tk) ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  let fa' := ce_forward R_ops cfg bt' bv Hk W bias tk in
  fa_total fa' = fa_total fa /\ fa_count fa' = fa_count fa.
Proof.
  intros cfg bt bt' bv H W bias targets Hk tk Hs fa fa'.
  destruct (kept_tokens_split cfg H targets Hk tk Hs) as [Hkt _].
  destruct (ce_forward_fold cfg bv W bias bt H targets) as (_ & _ & H3 & H4).
  destruct (ce_forward_fold cfg bv W bias bt' Hk tk) as (_ & _ & H3' & H4').
  unfold fa, fa'; rewrite H3, H4, H3', H4', Hkt.
  rewrite !(rsum_filter (fun ht => kept cfg (snd ht))
              (fun ht => fst (token_forward R_ops cfg bv W bias (fst ht) (snd ht)))).
  fold (kept_tokens cfg H targets) (kept_tokens cfg Hk tk); rewrite Hkt; split; reflexivity.
Qed.

(** Coordinates of [G^T H] and [colsum G]. *)
Lemma grad_weight_spec_coord : forall cfg bias H W targets fa dout v c,
  length targets = length H -> (v < length W)%nat ->
  let G := grad_matrix R_ops cfg bias H W targets fa dout in
  nth c (nth v (grad_weight_spec R_ops G H W) []) 0
  = rsum (map (fun x => grad_entry R_ops cfg (length W) bias (fa_lses fa) dout (fa_count fa)
                          x (v, nth v W []) * nth c (fst (snd x)) 0) (tokens H targets)).
Proof.
  intros cfg bias H W targets fa dout v c Hl Hv G.
  unfold grad_weight_spec; rewrite nth_map_seq by exact Hv.
  unfold G, grad_matrix; rewrite column_grad_vocab by exact Hv.
  rewrite <- (map_tok_row_tokens H targets Hl) at 2.
  rewrite nth_weighted_sum_map; reflexivity.
Qed.

Lemma grad_bias_spec_coord : forall cfg bias H W targets fa dout v,
  (v < length W)%nat ->
  let G := grad_matrix R_ops cfg bias H W targets fa dout in
  nth v (grad_bias_spec R_ops G W) 0
  = rsum (map (fun x => grad_entry R_ops cfg (length W) bias (fa_lses fa) dout (fa_count fa)
                          x (v, nth v W []) * 1) (tokens H targets)).
Proof.
  intros cfg bias H W targets fa dout v Hv G.
  unfold grad_bias_spec; rewrite nth_map_seq by exact Hv.
  unfold G, grad_matrix; rewrite column_grad_vocab by exact Hv.
  rewrite sc_sum_R; apply rsum_map_ext; intros; ring.
Qed.

Lemma Forall2_veq_common : forall (rho : list R * Z -> nat -> R) a b l,
  Forall2 (fun r y => forall c, nth c r 0 = rho y c) a l ->
  Forall2 (fun r y => forall c, nth c r 0 = rho y c) b l ->
  Forall2 veq a b.
Proof.
  intros rho a b l Ha; revert b; induction Ha as [|r y a l Hr _ IH]; intros b Hb;
    inversion Hb as [|r' y' b' l' Hr' Hb']; subst; constructor; [|apply IH; assumption].
  intros c; rewrite Hr, Hr'; reflexivity.
Qed.

Lemma Forall2_map_r_in : forall {A B C} (P : A -> C -> Prop) (Q : A -> B -> Prop) (f : B -> C) l1 l2,
  Forall2 P l1 (map f l2) -> (forall a b, In b l2 -> P a (f b) -> Q a b) -> Forall2 Q l1 l2.
Proof.
  intros A B C P Q f l1 l2; revert l1; induction l2 as [|y l2 IH]; intros l1 H HPQ;
    inversion H as [|x y' l1' l2' Hxy Hrest]; subst; constructor.
  - apply HPQ; [left; reflexivity|exact Hxy].
  - apply IH; [exact Hrest|intros a b Hb; apply HPQ; right; exact Hb].
Qed.

Lemma Forall2_snd : forall {A B C} (P : A -> C -> Prop) (l1 : list A) (l2 : list (B * C)),
  Forall2 (fun r x => P r (snd x)) l1 l2 -> Forall2 P l1 (map snd l2).
Proof. intros until l2; induction 1; simpl; constructor; auto. Qed.

(** grad_input rows, as functions of the token. *)
Lemma grad_input_rows : forall cfg bt bv H W bias targets dout gin gW gb,
  ce_reduction cfg <> Red_none -> length targets = length H ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  ce_backward R_ops cfg bt bv H W bias targets fa dout = (gin, gW, gb) ->
  Forall2 (fun r ht => forall c, nth c r 0
             = rsum (map (fun e => grad_tok cfg bv W bias dout (fa_count fa) ht e * nth c (snd e) 0)
                         (vocab W)))
          gin (combine H targets).
Proof.
  intros cfg bt bv H W bias targets dout gin gW gb Hr Hl fa Hb.
  destruct (ce_backward_correct cfg bt bv H W bias targets fa dout gin gW gb Hl Hb) as [Hin _].
  unfold grad_input_spec, grad_matrix, grad_block in Hin; rewrite map_map in Hin.
  assert (Hlen : length (combine H targets) = length H) by (rewrite combine_length; lia).
  rewrite <- (map_snd_combine_seq 0 (combine H targets)), Hlen.
  apply Forall2_snd; fold (tokens H targets).
  apply (Forall2_map_r_in _ _ _ _ _ Hin).
  intros r x Hx Hrx c; rewrite Hrx, weighted_sum_vocab.
  apply rsum_map_ext; intros e _; unfold fa; rewrite grad_entry_tok by assumption; reflexivity.
Qed.

(** Dropping the ignored tokens before the projection: for "sum" and
    "mean", the chunked forward and backward over the kept tokens only
    (any token chunk sizes [bt], [bt']) give the same loss, the same
    grad_weight and grad_bias (coordinate-wise) and, as grad_input, the
    kept rows of grad_input over all tokens. *)
Theorem ce_drop_ignored : forall cfg bt bt' bv H W bias targets dout Hk tk,
  ce_reduction cfg <> Red_none -> length targets = length H ->
  split (kept_tokens cfg H targets) = (Hk, tk) ->
  let fa := ce_forward R_ops cfg bt bv H W bias targets in
  let fa' := ce_forward R_ops cfg bt' bv Hk W bias tk in
  ce_output R_ops cfg fa' = ce_output R_ops cfg fa
  /\ forall gin gW gb gin' gW' gb',
     ce_backward R_ops cfg bt bv H W bias targets fa dout = (gin, gW, gb) ->
     ce_backward R_ops cfg bt' bv Hk W bias tk fa' dout = (gin', gW', gb') ->
     Forall2 veq gin' (kept_rows cfg gin targets)
     /\ length gW' = length gW /\ (forall v c, nth c (nth v gW' []) 0 = nth c (nth v gW []) 0)
     /\ length gb' = length gb /\ veq gb' gb.
Proof.
  intros cfg bt bt' bv H W bias targets dout Hk tk Hr Hl Hs fa fa'.
  destruct (ce_forward_kept cfg bt bt' bv H W bias targets Hk tk Hs) as [Ht Hc].
  fold fa fa' in Ht, Hc.
  destruct (kept_tokens_split cfg H targets Hk tk Hs) as [Hkt Hlk].
  split.
  { unfold ce_output; rewrite Ht, Hc; destruct (ce_reduction cfg); [contradiction|reflexivity|reflexivity]. }
  intros gin gW gb gin' gW' gb' Hb Hb'.
  destruct (ce_backward_correct cfg bt bv H W bias targets fa dout gin gW gb Hl Hb)
    as (_ & HW & Hgb1 & Hgb2).
  destruct (ce_backward_correct cfg bt' bv Hk W bias tk fa' dout gin' gW' gb' Hlk Hb')
    as (_ & HW' & Hgb1' & Hgb2').
  assert (HlW : length gW = length W)
    by (rewrite (Forall2_length _ _ _ HW); unfold grad_weight_spec;
        rewrite map_length, seq_length; reflexivity).
  assert (HlW' : length gW' = length W)
    by (rewrite (Forall2_length _ _ _ HW'); unfold grad_weight_spec;
        rewrite map_length, seq_length; reflexivity).
  split; [|split; [congruence|split; [|split; [congruence|]]]].
  - (* grad_input *)
    pose proof (grad_input_rows cfg bt bv H W bias targets dout gin gW gb Hr Hl Hb) as R1.
    pose proof (grad_input_rows cfg bt' bv Hk W bias tk dout gin' gW' gb' Hr Hlk Hb') as R2.
    fold fa in R1; fold fa' in R2; rewrite Hc in R2.
    pose proof (split_combine _ Hs) as Ecomb; rewrite Ecomb in R2.
    apply Forall2_filter_rows with (q := kept cfg) in R1.
    rewrite map_snd_combine_eq in R1 by (symmetry; exact Hl).
    fold (kept_rows cfg gin targets) in R1; fold (kept_tokens cfg H targets) in R1.
    exact (Forall2_veq_common _ _ _ _ R2 R1).
  - (* grad_weight *)
    intros v c.
    destruct (Nat.lt_ge_cases v (length W)) as [Hv|Hv].
    + rewrite (Forall2_nth_inv _ _ _ v [] [] HW') by lia.
      rewrite (Forall2_nth_inv _ _ _ v [] [] HW) by lia.
      rewrite !grad_weight_spec_coord by assumption.
      pose proof (rsum_tokens_kept cfg bt bv H W bias targets dout
                    (fun ht => nth c (fst ht) 0) (v, nth v W []) Hr Hl) as K1.
      pose proof (rsum_tokens_kept cfg bt' bv Hk W bias tk dout
                    (fun ht => nth c (fst ht) 0) (v, nth v W []) Hr Hlk) as K2.
      cbv zeta in K1, K2; fold fa in K1; fold fa' in K2; cbn beta in K1, K2.
      rewrite K1, K2, Hc, Hkt; reflexivity.
    + rewrite (nth_overflow gW'), (nth_overflow gW) by lia; destruct c; reflexivity.
  - (* grad_bias *)
    intros v; rewrite Hgb2, Hgb2'.
    destruct (Nat.lt_ge_cases v (length W)) as [Hv|Hv].
    + rewrite !grad_bias_spec_coord by assumption.
      pose proof (rsum_tokens_kept cfg bt bv H W bias targets dout (fun _ => 1)
                    (v, nth v W []) Hr Hl) as K1.
      pose proof (rsum_tokens_kept cfg bt' bv Hk W bias tk dout (fun _ => 1)
                    (v, nth v W []) Hr Hlk) as K2.
      cbv zeta in K1, K2; fold fa in K1; fold fa' in K2; cbn beta in K1, K2.
      rewrite K1, K2, Hc, Hkt; reflexivity.
    + unfold grad_bias_spec; rewrite !nth_overflow by (rewrite map_length, seq_length; lia).
      reflexivity.
Qed.
