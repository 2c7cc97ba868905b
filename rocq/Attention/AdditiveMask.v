(** * Additive float masks: biased scores, streamed, and the gradient of the bias.

    The code accepts an [attn_mask] of the query's dtype, added to the
    scores as in [torch.nn.functional.scaled_dot_product_attention]: row
    [i], key [j] has score [scale * (q_i . k_j) + mask_ij]
    ([_tile_scores] in ojas_ref/functional/_attention_reference.py, [_apply_mask] in
    kernels/ojas_kernels/attention_tiles.py, which adds it in base 2, times log2 e), and a
    [-inf] entry masks the key.  [-inf] is not a real number: here a float
    mask is a finite bias [bias i j] together with a set of masked entries
    ([visible i j = false]); [float_mask] reads a mask [m i j : option R]
    ([None] = [-inf], [Some b] = the finite value [b]) that way, in
    conjunction with the causal / window / boolean masks ([visibility] of
    [Attention/OnlineSoftmax.v]).  Masked entries are the [None] scores of
    [masked_keys], as for the boolean masks of [Attention/Mask.v].

    - [attention_forward_bias_correct], [stream_row_bias_masked_keys]: the
      streamed forward pass ([stream_row], any tile size) on the biased
      scores is the two-pass softmax of the visible keys with scores
      [s_j + bias_j].  This is an instance, not a new proof:
      [stream_row_correct] and [stream_row_masked_keys] hold for any
      scores, and [add_bias] only names the scores the code forms;
      [attention_forward_float_mask_correct] is the same for the code's
      float mask ([-inf] entries dropped).
    - [stream_row_float_mask_fully_masked], [attention_dbias_fully_masked]:
      a row whose entries are all [-inf] (or hidden) gives zeros, lse
      [None] (-inf) and a zero mask gradient.
    - [row_dbias_is_derive], [attention_dbias_is_derive]: the derivative
      of the loss [sum_i dO_i . o_i] in the bias entry [(i, j)] is
      [dS_ij = P_ij (dP_ij - D_i)], entry [(i, j)] of [attention_dbias]
      (the [dS] of [attention_backward] on the biased scores, fed with the
      streamed forward's out and lse): what the reference returns as the
      mask's gradient.  Where the entry is masked the loss does not depend
      on the bias and [dS_ij = 0] (as the code returns).
    - [row_dV_bias_is_derive], [row_dK_bias_is_derive],
      [row_dQ_bias_is_derive]: for one row on biased scores, the [dV],
      [dK] and [dQ] terms of [attention_backward] ([P_j dO],
      [scale * dS_j * q], [scale * sum_j dS_j k_j]) with P and dS of the
      biased scores are the derivatives in the value, key and query
      coordinates ([dV] is an instance of [dV_row_is_derive]; [dK] is the
      chain rule through the one score [s_j] that depends on [k_j]; [dQ]
      is [dQ_row_is_derive] on the query [q ++ [1]] and the keys
      [k_j ++ [bias j / scale]], whose unbiased scores are the biased
      ones: it needs [scale <> 0] and keys of the query's length).

    Not covered: the gradient at a [-inf] entry as a limit (no real
    derivative there; the code returns 0, the value stated above for a
    masked entry); the sum of [dS] over the dimensions a broadcast mask
    is broadcast in ([_accumulate_mask_grad]; the chain rule through a
    broadcast is the same sum as through [repeat_kv] in
    [Attention/GroupedQuery.v], but no theorem here states it); the
    whole-head [dQ], [dK], [dV] on biased scores (only the rows above: the
    sums over rows of [attention_backward_dK_is_derive] and its siblings
    are not restated with a bias); [dQ] for [scale = 0]; rounding, and the
    kernels' reading of values below about [-2.4e38] as [-inf].  Lemmas local to this file are prefixed [am_]. *)

From Coq Require Import Reals List Lra Lia Arith Bool.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.StreamCorrect Attention.Mask Attention.BackwardCorrect.
Import ListNotations.
Open Scope R_scope.

Section Bias.
Context {T : Type} (o : ScalarOps T).

(** The scores of one row plus a bias: entry [j] is [s_j + bias j]. *)
Definition add_bias (bias : nat -> T) (ss : list T) : list T :=
  map (fun '(j, s) => sc_add o s (bias j)) (combine (seq 0 (length ss)) ss).

(** Forward pass of one head on the scores [scale * (q_i . k_j) + bias i j],
    key [j] masked for query [i] where [visible i j = false]. *)
Definition attention_forward_bias (b d : nat) (scale : T) (visible : nat -> nat -> bool)
    (bias : nat -> nat -> T) (qs ks vs : list (list T)) : list (list T * option T) :=
  map (fun '(i, q) => stream_row o b d (masked_keys (visible i) (add_bias (bias i) (scores o scale q ks)) vs))
      (combine (seq 0 (length qs)) qs).

(** The same head by the two-pass specification. *)
Definition attention_two_pass_bias (d : nat) (scale : T) (visible : nat -> nat -> bool)
    (bias : nat -> nat -> T) (qs ks vs : list (list T)) : list (list T * option T) :=
  map (fun '(i, q) => two_pass o d (masked_keys (visible i) (add_bias (bias i) (scores o scale q ks)) vs))
      (combine (seq 0 (length qs)) qs).

(** A float mask read as the code reads it: [None] is [-inf] (the entry is
    masked), [Some b] adds [b]. *)
Definition mask_finite (m : nat -> nat -> option T) (i j : nat) : bool :=
  match m i j with Some _ => true | None => false end.

Definition mask_bias (m : nat -> nat -> option T) (i j : nat) : T :=
  match m i j with Some x => x | None => sc_zero o end.

(** The forward pass with a float mask [m], in conjunction with the other
    masks [visible]. *)
Definition float_mask (b d : nat) (scale : T) (visible : nat -> nat -> bool)
    (m : nat -> nat -> option T) (qs ks vs : list (list T)) : list (list T * option T) :=
  attention_forward_bias b d scale (fun i j => visible i j && mask_finite m i j) (mask_bias m) qs ks vs.

(** The gradient of the bias (of the float mask): [dS] of
    [attention_backward] on the biased scores, P recomputed from the saved
    lse: [dS_ij = P_ij (dP_ij - D_i)]. *)
Definition attention_dbias (scale : T) (visible : nat -> nat -> bool) (bias : nat -> nat -> T)
    (qs ks vs : list (list T)) (outs : list (list T)) (lses : list (option T))
    (dOs : list (list T)) : list (list T) :=
  map (fun '(i, q) =>
         row_dscores o (row_probs o (masked_keys (visible i) (add_bias (bias i) (scores o scale q ks)) vs)
                                  (nth i lses None))
                     vs (nth i dOs []) (nth i outs []))
      (combine (seq 0 (length qs)) qs).

End Bias.

(** ** The biased scores *)

Lemma am_length_add_bias : forall {T} (o : ScalarOps T) bias ss, length (add_bias o bias ss) = length ss.
Proof.
  intros; unfold add_bias; rewrite map_length, combine_length, seq_length; apply Nat.min_id.
Qed.

Lemma am_nth_add_bias : forall bias (ss : list R) j, (j < length ss)%nat ->
  nth j (add_bias R_ops bias ss) 0 = nth j ss 0 + bias j.
Proof.
  intros bias ss j Hj; unfold add_bias.
  rewrite (bw_nth_indexed (fun '(j, s) => sc_add R_ops s (bias j)) ss j 0 0) by exact Hj.
  reflexivity.
Qed.

(** Changing the bias of key [j] to [x] sets score [j] to [s_j + x]. *)
Lemma am_add_bias_update : forall bias (ss : list R) j x, (j < length ss)%nat ->
  add_bias R_ops (fun j' => if Nat.eqb j' j then x else bias j') ss
  = replace_nth j (nth j ss 0 + x) (add_bias R_ops bias ss).
Proof.
  intros bias ss j x Hj; apply (nth_ext _ _ 0 0).
  - rewrite length_replace_nth, !am_length_add_bias; reflexivity.
  - intros k Hk; rewrite am_length_add_bias in Hk.
    rewrite nth_replace_nth by (rewrite am_length_add_bias; exact Hj).
    rewrite !am_nth_add_bias by assumption.
    destruct (Nat.eqb_spec k j) as [->|_]; reflexivity.
Qed.

(** ** Forward: the streamed biased row is the two-pass softmax of the biased scores *)

(** Instance of [attention_forward_correct]'s argument ([stream_row_correct]
    holds for any scores): the streamed head on biased scores agrees, row by
    row, with the two-pass specification on the same scores. *)
Theorem attention_forward_bias_correct : forall b d scale visible bias qs ks vs,
  Forall2 row_eq (attention_forward_bias R_ops b d scale visible bias qs ks vs)
                 (attention_two_pass_bias R_ops d scale visible bias qs ks vs).
Proof.
  intros; unfold attention_forward_bias, attention_two_pass_bias.
  apply Forall2_map_same; intros [i q] _; apply stream_row_correct.
Qed.

(** One row: streaming the keys of scores [s_j + bias j], those with
    [vis j = false] masked, is the two-pass softmax of the visible keys
    alone with their biased scores (instance of [stream_row_masked_keys]). *)
Theorem stream_row_bias_masked_keys : forall b d vis bias (ss : list R) vs,
  length vs = length ss ->
  row_eq (stream_row R_ops b d (masked_keys vis (add_bias R_ops bias ss) vs))
         (two_pass R_ops d (map (fun j => (Some (nth j ss 0 + bias j), nth j vs []))
                                (filter vis (seq 0 (length ss))))).
Proof.
  intros b d vis bias ss vs Hl.
  eapply row_eq_trans; [apply stream_row_masked_keys; rewrite am_length_add_bias; exact Hl|].
  rewrite am_length_add_bias.
  replace (map (fun j => (Some (nth j (add_bias R_ops bias ss) 0), nth j vs [])) (filter vis (seq 0 (length ss))))
    with (map (fun j => (Some (nth j ss 0 + bias j), nth j vs [])) (filter vis (seq 0 (length ss))));
    [apply row_eq_refl|].
  apply map_ext_in; intros j Hj; apply filter_In in Hj; destruct Hj as [Hj _]; apply in_seq in Hj.
  rewrite am_nth_add_bias by lia; reflexivity.
Qed.

Lemma am_nth_indexed_rows : forall {A} (f : nat * list R -> A) (qs : list (list R)) i dflt,
  (i < length qs)%nat -> nth i (map f (combine (seq 0 (length qs)) qs)) dflt = f (i, nth i qs []).
Proof. intros; apply bw_nth_indexed; assumption. Qed.

(** The code's float mask: row [i] of the streamed head is the two-pass
    softmax of the keys [j] with [visible i j] and a finite mask entry
    [m i j = Some b_ij], with scores [scale * (q_i . k_j) + b_ij]; the
    [-inf] entries are dropped. *)
Theorem attention_forward_float_mask_correct : forall b d scale visible m qs ks vs i,
  length vs = length ks -> (i < length qs)%nat ->
  row_eq (nth i (float_mask R_ops b d scale visible m qs ks vs) ([], None))
         (two_pass R_ops d
            (map (fun j => (Some (scale * dot R_ops (nth i qs []) (nth j ks []) + mask_bias R_ops m i j),
                            nth j vs []))
                 (filter (fun j => visible i j && mask_finite m i j) (seq 0 (length ks))))).
Proof.
  intros b d scale visible m qs ks vs i Hl Hi; unfold float_mask, attention_forward_bias.
  rewrite am_nth_indexed_rows by exact Hi.
  eapply row_eq_trans; [apply stream_row_bias_masked_keys; rewrite bw_length_scores; exact Hl|].
  rewrite bw_length_scores.
  replace (map (fun j => (Some (nth j (scores R_ops scale (nth i qs []) ks) 0 + mask_bias R_ops m i j),
                          nth j vs []))
               (filter (fun j => visible i j && mask_finite m i j) (seq 0 (length ks))))
    with (map (fun j => (Some (scale * dot R_ops (nth i qs []) (nth j ks []) + mask_bias R_ops m i j),
                         nth j vs []))
              (filter (fun j => visible i j && mask_finite m i j) (seq 0 (length ks))));
    [apply row_eq_refl|].
  apply map_ext_in; intros j Hj; apply filter_In in Hj; destruct Hj as [Hj _]; apply in_seq in Hj.
  rewrite bw_nth_scores by lia; reflexivity.
Qed.

(** A row whose float-mask entries are all [-inf] (or hidden by the other
    masks) gives exactly zeros and lse [None] (-inf), for every tiling. *)
Theorem stream_row_float_mask_fully_masked : forall b d scale visible m qs ks vs i,
  (i < length qs)%nat ->
  (forall j, (j < length ks)%nat -> visible i j && mask_finite m i j = false) ->
  nth i (float_mask R_ops b d scale visible m qs ks vs) ([], None) = (vzero R_ops d, None).
Proof.
  intros b d scale visible m qs ks vs i Hi H; unfold float_mask, attention_forward_bias.
  rewrite am_nth_indexed_rows by exact Hi.
  apply stream_row_fully_masked; intros j Hj.
  rewrite am_length_add_bias, bw_length_scores in Hj; apply H, Hj.
Qed.

(** ** Backward: the gradient of the bias is dS *)

Lemma am_is_derive_shift : forall (F : R -> R) (s0 x0 l : R),
  is_derive F (s0 + x0) l -> is_derive (fun x => F (s0 + x)) x0 l.
Proof.
  intros F s0 x0 l H.
  eapply bw_is_derive_eq.
  - apply (is_derive_comp F (fun x => s0 + x)); [exact H|].
    apply (is_derive_plus (fun _ : R => s0) (fun x : R => x)); [apply is_derive_const | apply is_derive_id].
  - change (scal (plus zero one) l = l); rewrite plus_zero_l; apply scal_one.
Qed.

(** One row, with the forward pass the code runs: the derivative of
    [L = dO . o] (o the streamed output on the biased scores) in the bias of
    key [j] is entry [j] of [row_dscores], [P_j (dP_j - D)], with P
    recomputed from the saved lse: the score gradient. *)
Theorem row_dbias_is_derive : forall b d vis (bias : nat -> R) (ss : list R) vs dO j,
  length vs = length ss -> (j < length ss)%nat ->
  let K := masked_keys vis (add_bias R_ops bias ss) vs in
  let fw := stream_row R_ops b d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO (fst (stream_row R_ops b d
       (masked_keys vis (add_bias R_ops (fun j' => if Nat.eqb j' j then x else bias j') ss) vs))))
    (bias j)
    (nth j (row_dscores R_ops p vs dO (fst fw)) 0).
Proof.
  intros b d vis bias ss vs dO j Hl Hj K fw p.
  apply (is_derive_ext (fun x => dot R_ops dO (fst (stream_row R_ops b d
           (masked_keys vis (replace_nth j (nth j ss 0 + x) (add_bias R_ops bias ss)) vs))))).
  { intros x; rewrite am_add_bias_update by exact Hj; reflexivity. }
  apply (am_is_derive_shift (fun y => dot R_ops dO (fst (stream_row R_ops b d
           (masked_keys vis (replace_nth j y (add_bias R_ops bias ss)) vs))))).
  rewrite <- am_nth_add_bias by exact Hj.
  apply row_dscores_is_derive_stream; rewrite am_length_add_bias; assumption.
Qed.

(** Values, one row, on biased scores: the derivative of [L = dO . o] in
    coordinate [c] of value row [v_j] is [P_j * dO_c] with P the softmax
    of the biased scores (instance of [dV_row_is_derive], which holds for
    any scores). *)
Theorem row_dV_bias_is_derive : forall d vis bias (ss : list R) vs dO j c,
  length vs = length ss -> (j < length ss)%nat -> (c < length (nth j vs []))%nat ->
  let K := masked_keys vis (add_bias R_ops bias ss) vs in
  let p := row_probs R_ops K (snd (two_pass R_ops d K)) in
  is_derive
    (fun y : R => dot R_ops dO (fst (two_pass R_ops d
       (masked_keys vis (add_bias R_ops bias ss) (replace_nth j (replace_nth c y (nth j vs [])) vs)))))
    (nth c (nth j vs []) 0)
    (nth j p 0 * nth c dO 0).
Proof. intros; apply dV_row_is_derive; rewrite ?am_length_add_bias; assumption. Qed.

(** Keys, one row, on biased scores [scale * (q . k_j) + bias j]: the
    derivative of [L] in coordinate [c] of key row [k_j] is
    [scale * dS_j * q_c], [dS] on the biased scores (the chain rule through
    the one score [s_j] that depends on [k_j]). *)
Theorem row_dK_bias_is_derive : forall d vis bias scale q (ks vs : list (list R)) dO j c,
  length vs = length ks -> (j < length ks)%nat -> (c < length (nth j ks []))%nat ->
  let K := masked_keys vis (add_bias R_ops bias (scores R_ops scale q ks)) vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO (fst (two_pass R_ops d (masked_keys vis
       (add_bias R_ops bias (scores R_ops scale q (replace_nth j (replace_nth c x (nth j ks [])) ks))) vs))))
    (nth c (nth j ks []) 0)
    (scale * nth j (row_dscores R_ops p vs dO (fst fw)) 0 * nth c q 0).
Proof.
  intros d vis bias scale q ks vs dO j c Hl Hj Hc K fw p.
  set (ss := add_bias R_ops bias (scores R_ops scale q ks)).
  set (kj := nth j ks []).
  set (g := fun x => nth j ss 0 + scale * nth c q 0 * (x - nth c kj 0)).
  set (F := fun y => dot R_ops dO (fst (two_pass R_ops d (masked_keys vis (replace_nth j y ss) vs)))).
  assert (Hlen : length ss = length ks) by (unfold ss; rewrite am_length_add_bias; apply bw_length_scores).
  assert (Hss : forall x, add_bias R_ops bias (scores R_ops scale q (replace_nth j (replace_nth c x kj) ks))
                          = replace_nth j (g x) ss).
  { intros x; unfold g; apply (nth_ext _ _ 0 0).
    - rewrite am_length_add_bias, bw_length_scores, !length_replace_nth; auto.
    - intros k Hk; rewrite am_length_add_bias, bw_length_scores, length_replace_nth in Hk.
      rewrite nth_replace_nth by lia; unfold ss.
      rewrite !am_nth_add_bias by (rewrite bw_length_scores, ?length_replace_nth; lia).
      rewrite !bw_nth_scores, nth_replace_nth by (rewrite ?length_replace_nth; lia).
      destruct (Nat.eqb_spec k j) as [->|_]; [|reflexivity].
      rewrite bw_dot_replace_nth_r by exact Hc; fold kj; ring. }
  apply (is_derive_ext (fun x => F (g x))); [intros x; unfold F; rewrite Hss; reflexivity|].
  assert (H1 : is_derive F (g (nth c kj 0)) (nth j (row_dscores R_ops p vs dO (fst fw)) 0)).
  { replace (g (nth c kj 0)) with (nth j ss 0) by (unfold g; ring).
    apply row_dscores_is_derive; rewrite Hlen; assumption. }
  assert (H2 : is_derive g (nth c kj 0) (scale * nth c q 0)) by apply bw_is_derive_affine.
  eapply bw_is_derive_eq; [apply (is_derive_comp F g _ _ _ H1 H2)|].
  match goal with |- scal ?a ?b = _ => change (scal a b) with (a * b) end; ring.
Qed.

(** ** Queries on biased scores, by folding the bias into the keys

    With [scale <> 0] and keys of the query's length, the biased scores
    [scale * (q . k_j) + bias j] are the unbiased scores of the query
    [q ++ [1]] and the keys [k_j ++ [bias j / scale]] ([am_keys]), so
    [dQ_row_is_derive] applies to them; its first [length q] coordinates
    are the [dQ] of the biased row. *)

Definition am_keys (scale : R) (bias : nat -> R) (ks : list (list R)) : list (list R) :=
  map (fun '(j, k) => k ++ [bias j / scale]) (combine (seq 0 (length ks)) ks).

Lemma am_nth_keys : forall scale bias ks j, (j < length ks)%nat ->
  nth j (am_keys scale bias ks) [] = nth j ks [] ++ [bias j / scale].
Proof. intros; unfold am_keys; rewrite (bw_nth_indexed _ ks j [] []) by assumption; reflexivity. Qed.

Lemma am_dot_snoc : forall a b x y, length a = length b ->
  dot R_ops (a ++ [x]) (b ++ [y]) = dot R_ops a b + x * y.
Proof.
  induction a as [|z a IH]; intros [|w b] x y H; simpl in H; try discriminate.
  - cbn; ring.
  - cbn [app dot]; rewrite IH by lia; cbn; ring.
Qed.

Lemma am_replace_nth_snoc : forall {A} c (x y : A) l, (c < length l)%nat ->
  replace_nth c x (l ++ [y]) = replace_nth c x l ++ [y].
Proof.
  intros A c x y l; revert c; induction l as [|z l IH]; intros [|c] H; simpl in *; try lia; auto.
  rewrite IH by lia; reflexivity.
Qed.

Lemma am_scores_fold : forall scale bias q ks, scale <> 0 ->
  (forall k, In k ks -> length k = length q) ->
  scores R_ops scale (q ++ [1]) (am_keys scale bias ks) = add_bias R_ops bias (scores R_ops scale q ks).
Proof.
  intros scale bias q ks Hs Hq; apply (nth_ext _ _ 0 0).
  - unfold am_keys; rewrite am_length_add_bias, !bw_length_scores, bw_length_indexed; reflexivity.
  - intros j Hj; unfold am_keys in Hj; rewrite bw_length_scores, bw_length_indexed in Hj.
    rewrite am_nth_add_bias by (rewrite bw_length_scores; exact Hj).
    rewrite !bw_nth_scores by (unfold am_keys; rewrite ?bw_length_indexed; exact Hj).
    rewrite am_nth_keys, am_dot_snoc by (try symmetry; try apply Hq, nth_In; exact Hj).
    field; exact Hs.
Qed.

(** Queries, one row, on biased scores: the derivative of [L] in
    coordinate [c] of the query is coordinate [c] of
    [scale * sum_j dS_j k_j], [dS] on the biased scores ([scale <> 0],
    keys of the query's length, as in the code). *)
Theorem row_dQ_bias_is_derive : forall d vis bias scale q (ks vs : list (list R)) dO c,
  scale <> 0 -> length vs = length ks -> (forall k, In k ks -> length k = length q) ->
  (c < length q)%nat ->
  let K := masked_keys vis (add_bias R_ops bias (scores R_ops scale q ks)) vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO (fst (two_pass R_ops d
       (masked_keys vis (add_bias R_ops bias (scores R_ops scale (replace_nth c x q) ks)) vs))))
    (nth c q 0)
    (nth c (vscale R_ops scale (weighted_sum R_ops (row_dscores R_ops p vs dO (fst fw)) ks)) 0).
Proof.
  intros d vis bias scale q ks vs dO c Hs Hl Hq Hc K fw p.
  assert (Hl' : length vs = length (am_keys scale bias ks))
    by (unfold am_keys; rewrite bw_length_indexed; exact Hl).
  assert (Hc' : (c < length (q ++ [1%R]))%nat) by (rewrite app_length; simpl; lia).
  pose proof (dQ_row_is_derive d vis scale (q ++ [1]) (am_keys scale bias ks) vs dO c Hl' Hc') as H.
  cbv zeta in H; rewrite (am_scores_fold scale bias q ks Hs Hq), app_nth1 in H by exact Hc.
  apply (is_derive_ext (fun x => dot R_ops dO (fst (two_pass R_ops d
           (masked_keys vis (scores R_ops scale (replace_nth c x (q ++ [1])) (am_keys scale bias ks)) vs))))).
  { intros x; rewrite am_replace_nth_snoc, am_scores_fold by
      (try intros k Hk; rewrite ?length_replace_nth; auto); reflexivity. }
  replace (nth c (vscale R_ops scale (weighted_sum R_ops (row_dscores R_ops p vs dO (fst fw)) ks)) 0)
    with (nth c (vscale R_ops scale (weighted_sum R_ops (row_dscores R_ops p vs dO (fst fw))
                                                     (am_keys scale bias ks))) 0); [exact H|].
  assert (Hld : length (row_dscores R_ops p vs dO (fst fw)) = length ks).
  { unfold row_dscores, p, K.
    rewrite map_length, combine_length, bw_length_row_probs, am_length_add_bias, bw_length_scores; [lia|].
    rewrite am_length_add_bias, bw_length_scores; exact Hl. }
  rewrite !nth_vscale, !nth_weighted_sum; f_equal.
  rewrite (bw_combine_as_map _ ks 0 [] (length ks)), (bw_combine_as_map _ (am_keys scale bias ks) 0 [] (length ks))
    by (unfold am_keys; rewrite ?bw_length_indexed; auto).
  rewrite !map_map; apply rsum_map_ext; intros k Hk; apply in_seq in Hk; cbn [fst snd].
  rewrite am_nth_keys, app_nth1 by (try rewrite Hq by (apply nth_In; lia); lia); reflexivity.
Qed.

(** The loss [sum_i dO_i . o_i] of one head on biased scores, [o_i] the
    streamed output (tiles of [b] keys). *)
Definition attention_loss_bias (b d : nat) (scale : R) (vis : nat -> nat -> bool)
    (bias : nat -> nat -> R) (qs ks vs dOs : list (list R)) : R :=
  rsum (map (fun i => dot R_ops (nth i dOs [])
               (fst (nth i (attention_forward_bias R_ops b d scale vis bias qs ks vs) ([], None))))
            (seq 0 (length qs))).

(** The bias with entry [(i, j)] set to [x]. *)
Definition bias_update (bias : nat -> nat -> R) (i j : nat) (x : R) : nat -> nat -> R :=
  fun i' j' => if Nat.eqb i' i && Nat.eqb j' j then x else bias i' j'.

Section Head.
Variables (b d : nat) (scale : R) (vis : nat -> nat -> bool) (bias : nat -> nat -> R)
  (qs ks vs dOs : list (list R)).
Hypothesis Hvs : length vs = length ks.

Let fw := attention_forward_bias R_ops b d scale vis bias qs ks vs.
Let dB := attention_dbias R_ops scale vis bias qs ks vs (map fst fw) (map snd fw) dOs.
Let Krow i := masked_keys (vis i) (add_bias R_ops (bias i) (scores R_ops scale (nth i qs []) ks)) vs.

Lemma am_nth_fw : forall i, (i < length qs)%nat -> nth i fw ([], None) = stream_row R_ops b d (Krow i).
Proof. intros i Hi; unfold fw, attention_forward_bias; rewrite am_nth_indexed_rows by exact Hi; reflexivity. Qed.

Lemma am_nth_dB : forall i, (i < length qs)%nat ->
  nth i dB [] = row_dscores R_ops (row_probs R_ops (Krow i) (snd (stream_row R_ops b d (Krow i))))
                            vs (nth i dOs []) (fst (stream_row R_ops b d (Krow i))).
Proof.
  intros i Hi; unfold dB, attention_dbias; rewrite am_nth_indexed_rows by exact Hi.
  assert (Hfw : (i < length fw)%nat)
    by (unfold fw, attention_forward_bias; rewrite bw_length_indexed; exact Hi).
  rewrite (bw_nth_map_lt snd _ _ _ ([], None)), (bw_nth_map_lt fst _ _ _ ([], None)), am_nth_fw
    by assumption.
  reflexivity.
Qed.

(** The whole head: the derivative of the loss in the bias entry [(i, j)]
    is entry [(i, j)] of [attention_dbias], fed with the streamed forward
    pass's out and lse: [dS_ij = P_ij (dP_ij - D_i)], the mask gradient
    the code returns (0 where the entry is masked). *)
Theorem attention_dbias_is_derive : forall i j,
  (i < length qs)%nat -> (j < length ks)%nat ->
  is_derive (fun x : R => attention_loss_bias b d scale vis (bias_update bias i j x) qs ks vs dOs)
    (bias i j)
    (nth j (nth i dB []) 0).
Proof.
  intros i j Hi Hj; unfold attention_loss_bias.
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (length qs)) _
             (fun i' => if Nat.eqb i' i then nth j (nth i dB []) 0 else 0)).
    intros i' Hi'; apply in_seq in Hi'.
    destruct (Nat.eqb_spec i' i) as [->|E].
    - apply (is_derive_ext (fun x => dot R_ops (nth i dOs []) (fst (stream_row R_ops b d
               (masked_keys (vis i) (add_bias R_ops (fun j' => if Nat.eqb j' j then x else bias i j')
                                       (scores R_ops scale (nth i qs []) ks)) vs))))).
      { intros x; unfold attention_forward_bias; rewrite am_nth_indexed_rows by exact Hi.
        unfold bias_update; rewrite Nat.eqb_refl; reflexivity. }
      rewrite am_nth_dB by exact Hi.
      apply (row_dbias_is_derive b d (vis i) (bias i)); rewrite ?bw_length_scores; assumption.
    - apply (is_derive_ext (fun _ => dot R_ops (nth i' dOs []) (fst (stream_row R_ops b d (Krow i'))))).
      { intros x; unfold attention_forward_bias; rewrite am_nth_indexed_rows by lia.
        unfold bias_update, Krow; apply Nat.eqb_neq in E; rewrite E; reflexivity. }
      apply bw_is_derive_const. }
  apply (rsum_pick_seq (fun _ => nth j (nth i dB []) 0)); lia.
Qed.

(** A row whose entries are all masked has a zero mask gradient. *)
Theorem attention_dbias_fully_masked : forall i j,
  (i < length qs)%nat -> (forall j', (j' < length ks)%nat -> vis i j' = false) ->
  nth j (nth i dB []) 0 = 0.
Proof.
  intros i j Hi H; rewrite am_nth_dB by exact Hi.
  unfold Krow, stream_row; rewrite stream_fully_masked
    by (intros j' Hj'; rewrite am_length_add_bias, bw_length_scores in Hj'; apply H, Hj').
  cbn [finalize snd fst].
  set (l := row_dscores R_ops _ _ _ _).
  assert (H0 : forall x, In x l -> x = 0).
  { intros x Hx; unfold l, row_dscores in Hx; apply in_map_iff in Hx.
    destruct Hx as [[pij v] [<- Hin]]; apply in_combine_l in Hin.
    unfold row_probs in Hin; apply in_map_iff in Hin; destruct Hin as [k [<- _]].
    destruct (fst k); cbn; ring. }
  destruct (Nat.lt_ge_cases j (length l)) as [Hl|Hl];
    [apply H0, nth_In, Hl | apply nth_overflow, Hl].
Qed.

End Head.
