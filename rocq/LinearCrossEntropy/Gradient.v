(** * Gradients of the chunked linear cross-entropy (over [R]).

    Two parts.

    1. The derivative of the per-token loss computed by the vocabulary
       loop ([logits_loss]) with respect to one logit [z_v] is
       [dlogit = (1 + 2 lam lse) p_v - eps / V - (1 - eps) [v = t]],
       with [p_v = exp (z_v - lse)] the softmax (Coquelicot [is_derive]);
       through a softcap [c tanh (r / c)] the derivative with respect to
       the raw logit [r_v] is [dlogit * (1 - tanh (r_v / c)^2)], the
       entry [g_iv] of [grad_entry] up to the reduction weight.

    2. The backward loop ([ce_backward]: token chunks outside, vocabulary
       chunks inside, [grad_input[tc] += G_blk W_blk],
       [grad_weight[vc] += G_blk^T H_blk], [grad_bias[vc] += colsum G_blk])
       gives the unchunked products [G W], [G^T H] and [colsum G], row
       by row and coordinate by coordinate, for all chunk sizes. *)

From Coq Require Import Reals List Lra Arith Lia ZArith.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.Backward Attention.StreamCorrect Attention.Merge
  LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse LinearCrossEntropy.Loss.
Import ListNotations.
Open Scope R_scope.

(** ** List lemmas *)

Lemma list_decomp : forall {A} (l : list A) v d,
  (v < length l)%nat -> l = firstn v l ++ nth v l d :: skipn (S v) l.
Proof.
  intros A l; induction l as [|x l IH]; intros v d H; [simpl in H; lia|].
  destruct v as [|v]; [reflexivity|].
  simpl; f_equal; apply IH; simpl in H; lia.
Qed.

(** Replacing entry [v] of a list. *)
Lemma nth_replace : forall {A} (l : list A) v y u d,
  (v < length l)%nat ->
  nth u (firstn v l ++ y :: skipn (S v) l) d = if Nat.eqb u v then y else nth u l d.
Proof.
  intros A l v y u d Hv.
  pose proof (list_decomp l v d Hv) as Hl.
  assert (Hf : length (firstn v l) = v) by (rewrite firstn_length; lia).
  remember (firstn v l) as l1; remember (skipn (S v) l) as l2.
  destruct (Nat.eqb_spec u v) as [->|Hne].
  - rewrite app_nth2 by lia; rewrite Hf, Nat.sub_diag; reflexivity.
  - rewrite Hl.
    destruct (Nat.lt_ge_cases u v).
    + rewrite !app_nth1 by lia; reflexivity.
    + rewrite !app_nth2 by lia; rewrite Hf.
      destruct (u - v)%nat as [|k] eqn:E; [lia|reflexivity].
Qed.

Lemma replace_length : forall {A} (l : list A) v y,
  (v < length l)%nat -> length (firstn v l ++ y :: skipn (S v) l) = length l.
Proof.
  intros A l v y Hv; rewrite app_length; cbn [length]; rewrite firstn_length, skipn_length; lia.
Qed.

Lemma Forall2_map_combine : forall {A B C D} (P : A -> B -> Prop) (Q : C -> B -> Prop)
    (f : A * D -> C) (h : B -> D) l1 l2,
  Forall2 P l1 l2 -> (forall a b, P a b -> Q (f (a, h b)) b) ->
  Forall2 Q (map f (combine l1 (map h l2))) l2.
Proof. intros until l2; induction 1; simpl; constructor; auto. Qed.

Lemma Forall2_map_r : forall {A B C} (P : A -> B -> Prop) (Q : A -> C -> Prop) (f : B -> C) l1 l2,
  Forall2 P l1 l2 -> (forall a b, P a b -> Q a (f b)) -> Forall2 Q l1 (map f l2).
Proof. intros until l2; induction 1; simpl; constructor; auto. Qed.

Lemma Forall2_of_nth : forall {A B} (P : A -> B -> Prop) (l1 : list A) (l2 : list B) d1 d2,
  length l1 = length l2 ->
  (forall i, (i < length l1)%nat -> P (nth i l1 d1) (nth i l2 d2)) -> Forall2 P l1 l2.
Proof.
  intros A B P l1; induction l1 as [|x l1 IH]; intros [|y l2] d1 d2 Hl H;
    try (simpl in Hl; lia); constructor.
  - apply (H 0%nat); simpl; lia.
  - apply (IH l2 d1 d2); [simpl in Hl; lia|].
    intros i Hi; apply (H (S i)); simpl; lia.
Qed.

Lemma Forall2_length : forall {A B} (P : A -> B -> Prop) l1 l2,
  Forall2 P l1 l2 -> length l1 = length l2.
Proof. intros until l2; induction 1; simpl; congruence. Qed.

Lemma rsum_concat : forall {A} (f : A -> R) (ls : list (list A)),
  rsum (map f (concat ls)) = rsum (map (fun l => rsum (map f l)) ls).
Proof.
  intros A f ls; induction ls as [|l ls IH]; [reflexivity|].
  simpl; rewrite map_app, rsum_app, IH; reflexivity.
Qed.

Lemma rsum_map_if_plus : forall {A} (b : A -> bool) (f1 f2 : A -> R) l,
  rsum (map (fun x => if b x then f1 x + f2 x else 0) l)
  = rsum (map (fun x => if b x then f1 x else 0) l) + rsum (map (fun x => if b x then f2 x else 0) l).
Proof.
  intros A b f1 f2 l; rewrite <- rsum_map_plus; apply rsum_map_ext; intros x _.
  destruct (b x); ring.
Qed.

(** Picking entry [v] of the vocabulary by its index. *)
Lemma rsum_vocab_pick : forall (W : list (list R)) (K : nat * list R -> R) v,
  (v < length W)%nat ->
  rsum (map (fun e => if Nat.eqb v (fst e) then K e else 0) (vocab W)) = K (v, nth v W []).
Proof.
  intros W K v Hv; unfold vocab.
  assert (G : forall k, (k <= v < k + length W)%nat ->
    rsum (map (fun e => if Nat.eqb v (fst e) then K e else 0) (combine (seq k (length W)) W))
    = K (v, nth (v - k) W [])).
  { clear Hv; induction W as [|w W IH]; intros k Hk; [simpl in Hk; lia|].
    cbn [length seq combine map]; rewrite rsum_cons; cbn [fst].
    destruct (Nat.eqb_spec v k) as [->|Hne].
    - rewrite Nat.sub_diag, (rsum_map_zero _ _); [simpl; ring|].
      intros [j x] Hin; apply in_combine_seq in Hin as [Hj _]; cbn [fst].
      destruct (Nat.eqb_spec k j); [lia|reflexivity].
    - rewrite IH by (simpl in Hk; lia).
      replace (v - k)%nat with (S (v - S k)) by lia; simpl; ring. }
  rewrite G by lia; rewrite Nat.sub_0_r; reflexivity.
Qed.

Lemma vocab_length : forall {T} (W : list (list T)), length (vocab W) = length W.
Proof. intros; unfold vocab; rewrite combine_length, seq_length; apply Nat.min_id. Qed.

Lemma in_vocab : forall {T} (W : list (list T)) e, In e (vocab W) -> (fst e < length W)%nat.
Proof.
  intros T W [v w] H; unfold vocab in H; apply in_combine_l, in_seq in H; simpl; lia.
Qed.

Lemma nth_vocab : forall {T} (W : list (list T)) v d,
  (v < length W)%nat -> nth v (vocab W) d = (v, nth v W []).
Proof.
  intros T W v [d1 d2] Hv; unfold vocab; rewrite combine_nth by (rewrite seq_length; reflexivity).
  rewrite seq_nth by exact Hv; f_equal; apply nth_indep; exact Hv.
Qed.

Lemma map_tok_row_tokens : forall (H : list (list R)) targets,
  length targets = length H -> map tok_row (tokens H targets) = H.
Proof.
  intros H targets Hl; unfold tokens.
  assert (G : forall k (H : list (list R)) (ts : list Z), length ts = length H ->
            map tok_row (combine (seq k (length H)) (combine H ts)) = H).
  { intros k H0; revert k; induction H0 as [|h H0 IH]; intros k [|t ts] E;
      simpl in E; try lia; [reflexivity|].
    simpl; unfold tok_row at 1; simpl; rewrite IH by lia; reflexivity. }
  apply G; exact Hl.
Qed.

(** ** Row and scalar accumulation ([index_add_]) *)

Lemma add_row_at_length : forall acc v r,
  (v < length acc)%nat -> length (add_row_at R_ops acc v r) = length acc.
Proof. intros; unfold add_row_at; apply replace_length; assumption. Qed.

Lemma nth_add_row_at : forall acc v r u c,
  (v < length acc)%nat ->
  nth c (nth u (add_row_at R_ops acc v r) []) 0
  = nth c (nth u acc []) 0 + (if Nat.eqb u v then nth c r 0 else 0).
Proof.
  intros acc v r u c Hv; unfold add_row_at; rewrite nth_replace by exact Hv.
  destruct (Nat.eqb_spec u v) as [->|_]; [apply nth_vadd|ring].
Qed.

Lemma add_at_length : forall acc v x,
  (v < length acc)%nat -> length (add_at R_ops acc v x) = length acc.
Proof. intros; unfold add_at; apply replace_length; assumption. Qed.

Lemma nth_add_at : forall acc v x u,
  (v < length acc)%nat ->
  nth u (add_at R_ops acc v x) 0 = nth u acc 0 + (if Nat.eqb u v then x else 0).
Proof.
  intros acc v x u Hv; unfold add_at; rewrite nth_replace by exact Hv.
  destruct (Nat.eqb_spec u v) as [->|_]; simpl; ring.
Qed.

Lemma fold_add_row_at : forall {A} (idx : A -> nat) (F : A -> list R) us acc,
  (forall u, In u us -> (idx u < length acc)%nat) ->
  let acc' := fold_left (fun acc u => add_row_at R_ops acc (idx u) (F u)) us acc in
  length acc' = length acc
  /\ forall v c, nth c (nth v acc' []) 0
                 = nth c (nth v acc []) 0
                   + rsum (map (fun u => if Nat.eqb v (idx u) then nth c (F u) 0 else 0) us).
Proof.
  intros A idx F us; induction us as [|u us IH]; intros acc Hi; simpl.
  - split; [reflexivity|intros; unfold rsum; simpl; ring].
  - assert (Hu : (idx u < length acc)%nat) by (apply Hi; left; reflexivity).
    destruct (IH (add_row_at R_ops acc (idx u) (F u))) as [H1 H2].
    { intros u' Hu'; rewrite add_row_at_length by exact Hu; apply Hi; right; exact Hu'. }
    split; [rewrite H1; apply add_row_at_length, Hu|].
    intros v c; rewrite H2, nth_add_row_at by exact Hu; try rewrite rsum_cons; ring.
Qed.

Lemma fold_add_at : forall {A} (idx : A -> nat) (F : A -> R) us acc,
  (forall u, In u us -> (idx u < length acc)%nat) ->
  let acc' := fold_left (fun acc u => add_at R_ops acc (idx u) (F u)) us acc in
  length acc' = length acc
  /\ forall v, nth v acc' 0
               = nth v acc 0 + rsum (map (fun u => if Nat.eqb v (idx u) then F u else 0) us).
Proof.
  intros A idx F us; induction us as [|u us IH]; intros acc Hi; simpl.
  - split; [reflexivity|intros; unfold rsum; simpl; ring].
  - assert (Hu : (idx u < length acc)%nat) by (apply Hi; left; reflexivity).
    destruct (IH (add_at R_ops acc (idx u) (F u))) as [H1 H2].
    { intros u' Hu'; rewrite add_at_length by exact Hu; apply Hi; right; exact Hu'. }
    split; [rewrite H1; apply add_at_length, Hu|].
    intros v; rewrite H2, nth_add_at by exact Hu; try rewrite rsum_cons; ring.
Qed.

(** A sum over the positions [(j, e_j)] of a chunk of a quantity that
    only depends on the entry is the sum over the chunk. *)
Lemma rsum_combine_seq : forall {A} (K : nat * A -> R) (K' : A -> R) (l : list A),
  (forall j e, In (j, e) (combine (seq 0 (length l)) l) -> K (j, e) = K' e) ->
  rsum (map K (combine (seq 0 (length l)) l)) = rsum (map K' l).
Proof.
  intros A K K' l H.
  rewrite (rsum_map_ext K (fun je => K' (snd je))) by (intros [j e] Hin; apply H, Hin).
  rewrite <- (map_map snd K'), map_snd_combine_seq; reflexivity.
Qed.

(** ** The backward loop *)

Section Backward.
Variables (cfg : ce_config R) (V : nat) (bias : option (list R)) (lses dout : list R) (count : R).

Local Notation g := (grad_entry R_ops cfg V bias lses dout count).

(** Coordinate [c] of [sum_{e in Q} g_xe w_e]: token [x]'s grad_input row
    after the vocabulary entries [Q]. *)
Definition S_in (x : tok) (Q : list (nat * list R)) (c : nat) : R :=
  rsum (map (fun e => g x e * nth c (snd e) 0) Q).

(** Coordinate [c] of grad_weight row [v] contributed by the tokens [P]
    and the vocabulary entries [Q]: [sum_{e in Q, e = v} sum_{x in P} g_xe h_x]. *)
Definition S_W (P : list tok) (Q : list (nat * list R)) (v c : nat) : R :=
  rsum (map (fun e => if Nat.eqb v (fst e)
                      then rsum (map (fun x => g x e * nth c (tok_row x) 0) P) else 0) Q).

Definition S_b (P : list tok) (Q : list (nat * list R)) (v : nat) : R :=
  rsum (map (fun e => if Nat.eqb v (fst e) then rsum (map (fun x => g x e) P) else 0) Q).

Lemma S_in_app : forall x Q1 Q2 c, S_in x (Q1 ++ Q2) c = S_in x Q1 c + S_in x Q2 c.
Proof. intros; unfold S_in; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma S_W_app_Q : forall P Q1 Q2 v c, S_W P (Q1 ++ Q2) v c = S_W P Q1 v c + S_W P Q2 v c.
Proof. intros; unfold S_W; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma S_b_app_Q : forall P Q1 Q2 v, S_b P (Q1 ++ Q2) v = S_b P Q1 v + S_b P Q2 v.
Proof. intros; unfold S_b; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma S_W_app_P : forall P1 P2 Q v c, S_W (P1 ++ P2) Q v c = S_W P1 Q v c + S_W P2 Q v c.
Proof.
  intros; unfold S_W; rewrite <- rsum_map_if_plus; apply rsum_map_ext; intros e _.
  rewrite map_app, rsum_app; reflexivity.
Qed.

Lemma S_b_app_P : forall P1 P2 Q v, S_b (P1 ++ P2) Q v = S_b P1 Q v + S_b P2 Q v.
Proof.
  intros; unfold S_b; rewrite <- rsum_map_if_plus; apply rsum_map_ext; intros e _.
  rewrite map_app, rsum_app; reflexivity.
Qed.

(** Column [j] of a block of G is [g_x e_j] over the chunk's tokens. *)
Lemma column_grad_block : forall tc vc j e,
  In (j, e) (combine (seq 0 (length vc)) vc) ->
  column R_ops (grad_block R_ops cfg V bias lses dout count tc vc) j = map (fun x => g x e) tc.
Proof.
  intros tc vc j e Hin.
  pose proof Hin as Hj; apply in_combine_l, in_seq in Hj.
  apply in_combine_seq in Hin as [_ He]; rewrite Nat.sub_0_r in He.
  unfold column, grad_block; rewrite map_map; apply map_ext; intros x.
  change (sc_zero R_ops) with 0.
  rewrite (nth_indep _ 0 (g x e)) by (rewrite map_length; lia).
  rewrite map_nth, He; reflexivity.
Qed.

(** The vocabulary loop of the backward for one token chunk [tc]. *)
Lemma fold_vocab_bwd : forall tc vcs gin gW gb Q gin' gW' gb',
  (forall e, In e (concat vcs) -> (fst e < length gW)%nat /\ (fst e < length gb)%nat) ->
  Forall2 (fun r x => forall c, nth c r 0 = S_in x Q c) gin tc ->
  fold_left (vocab_bwd_step R_ops cfg V bias lses dout count tc) vcs (gin, gW, gb)
    = (gin', gW', gb') ->
  Forall2 (fun r x => forall c, nth c r 0 = S_in x (Q ++ concat vcs) c) gin' tc
  /\ length gW' = length gW
  /\ (forall v c, nth c (nth v gW' []) 0 = nth c (nth v gW []) 0 + S_W tc (concat vcs) v c)
  /\ length gb' = length gb
  /\ (forall v, nth v gb' 0 = nth v gb 0 + S_b tc (concat vcs) v).
Proof.
  intros tc vcs; induction vcs as [|vc vcs IH]; intros gin gW gb Q gin' gW' gb' Hidx Hin Hf.
  - simpl in Hf; injection Hf as <- <- <-; rewrite app_nil_r.
    split; [exact Hin|split; [reflexivity|split; [|split; [reflexivity|]]]];
      intros; unfold S_W, S_b; simpl; unfold rsum; simpl; ring.
  - cbn [fold_left] in Hf.
    set (G := grad_block R_ops cfg V bias lses dout count tc vc) in Hf.
    set (cols := combine (seq 0 (length vc)) vc) in Hf.
    set (FW := fun je : nat * (nat * list R) =>
                 weighted_sum R_ops (column R_ops G (fst je)) (map tok_row tc)).
    set (Fb := fun je : nat * (nat * list R) => sc_sum R_ops (column R_ops G (fst je))).
    assert (Hcols : forall je, In je cols -> (fst (snd je) < length gW)%nat /\
                                            (fst (snd je) < length gb)%nat).
    { intros [j e] Hje; apply Hidx; cbn [concat]; apply in_or_app; left.
      apply in_combine_r in Hje; exact Hje. }
    destruct (fold_add_row_at (fun je => fst (snd je)) FW cols gW) as [HW1 HW2];
      [intros; apply Hcols; assumption|].
    destruct (fold_add_at (fun je => fst (snd je)) Fb cols gb) as [Hb1 Hb2];
      [intros; apply Hcols; assumption|].
    unfold FW, Fb in HW1, HW2, Hb1, Hb2; cbv beta in HW1, HW2, Hb1, Hb2.
    unfold vocab_bwd_step in Hf; fold G cols in Hf.
    match type of Hf with fold_left _ _ (?a, ?b, ?c) = _ =>
      destruct (IH a b c (Q ++ vc) gin' gW' gb') as (H1 & H2 & H3 & H4 & H5); [| |exact Hf|]
    end.
    + intros e He; rewrite HW1, Hb1; apply Hidx; cbn [concat]; apply in_or_app; right; exact He.
    + apply (Forall2_map_combine _ _ _ _ gin tc Hin).
      intros r x Hr c; cbn [fst snd]; rewrite nth_vadd, Hr, S_in_app, nth_weighted_sum_map.
      reflexivity.
    + rewrite <- app_assoc in H1; cbn [concat].
      split; [exact H1|split; [rewrite H2; exact HW1|split; [|split; [rewrite H4; exact Hb1|]]]].
      * intros v c; rewrite H3, HW2, S_W_app_Q, <- Rplus_assoc; f_equal; f_equal.
        unfold S_W; apply rsum_combine_seq; intros j e Hje; cbn [fst snd].
        destruct (Nat.eqb v (fst e)); [|reflexivity].
        cbn [fst]; unfold G; rewrite (column_grad_block tc vc j e Hje).
        rewrite nth_weighted_sum_map; reflexivity.
      * intros v; rewrite H5, Hb2, S_b_app_Q, <- Rplus_assoc; f_equal; f_equal.
        unfold S_b; apply rsum_combine_seq; intros j e Hje; cbn [fst snd].
        destruct (Nat.eqb v (fst e)); [|reflexivity].
        cbn [fst]; unfold G; rewrite (column_grad_block tc vc j e Hje), sc_sum_R; reflexivity.
Qed.

Lemma Forall2_init : forall tc,
  Forall2 (fun r x => forall c, nth c r 0 = S_in x [] c)
          (map (fun x => vzero R_ops (length (tok_row x))) tc) tc.
Proof.
  induction tc as [|x tc IH]; simpl; constructor; [|exact IH].
  intros c; rewrite nth_vzero; reflexivity.
Qed.

(** The token loop of the backward. *)
Lemma fold_token_bwd : forall (W : list (list R)) bv tcs gin gW gb P gin' gW' gb',
  length gW = length W -> length gb = length W ->
  Forall2 (fun r x => forall c, nth c r 0 = S_in x (vocab W) c) gin P ->
  (forall v c, nth c (nth v gW []) 0 = S_W P (vocab W) v c) ->
  (forall v, nth v gb 0 = S_b P (vocab W) v) ->
  fold_left (token_bwd_step R_ops cfg V bias lses dout count (chunk bv (vocab W))) tcs
            (gin, gW, gb) = (gin', gW', gb') ->
  Forall2 (fun r x => forall c, nth c r 0 = S_in x (vocab W) c) gin' (P ++ concat tcs)
  /\ length gW' = length W /\ length gb' = length W
  /\ (forall v c, nth c (nth v gW' []) 0 = S_W (P ++ concat tcs) (vocab W) v c)
  /\ (forall v, nth v gb' 0 = S_b (P ++ concat tcs) (vocab W) v).
Proof.
  intros W bv tcs; induction tcs as [|tc tcs IH];
    intros gin gW gb P gin' gW' gb' HlW Hlb Hin HW Hb Hf.
  - simpl in Hf; injection Hf as <- <- <-; rewrite !app_nil_r; auto.
  - cbn [fold_left] in Hf; unfold token_bwd_step at 2 in Hf.
    destruct (fold_left (vocab_bwd_step R_ops cfg V bias lses dout count tc)
                (chunk bv (vocab W))
                (map (fun x => vzero R_ops (length (tok_row x))) tc, gW, gb))
      as [[gin_c gW1] gb1] eqn:E.
    destruct (fold_vocab_bwd tc (chunk bv (vocab W))
                (map (fun x => vzero R_ops (length (tok_row x))) tc) gW gb [] gin_c gW1 gb1)
      as (H1 & H2 & H3 & H4 & H5).
    + rewrite concat_chunk; intros e He; rewrite HlW, Hlb; split; apply in_vocab, He.
    + apply Forall2_init.
    + exact E.
    + rewrite concat_chunk in H1, H3, H5; cbn [app] in H1.
      cbn [concat].
      replace (P ++ tc ++ concat tcs) with ((P ++ tc) ++ concat tcs) by (rewrite app_assoc; reflexivity).
      apply (IH (gin ++ gin_c) gW1 gb1 (P ++ tc)); [congruence|congruence| | | |exact Hf].
      * apply Forall2_app; assumption.
      * intros v c; rewrite H3, HW, S_W_app_P; reflexivity.
      * intros v; rewrite H5, Hb, S_b_app_P; reflexivity.
Qed.

End Backward.

Lemma nth_rows_vzero : forall (W : list (list R)) v c,
  nth c (nth v (map (fun w => vzero R_ops (length w)) W) []) 0 = 0.
Proof.
  induction W as [|w W IH]; intros v c.
  - destruct v, c; reflexivity.
  - destruct v; [apply nth_vzero|apply IH].
Qed.

(** Column [v] of G over the whole vocabulary. *)
Lemma column_grad_vocab : forall cfg V bias lses dout count toks (W : list (list R)) v,
  (v < length W)%nat ->
  column R_ops (grad_block R_ops cfg V bias lses dout count toks (vocab W)) v
  = map (fun x => grad_entry R_ops cfg V bias lses dout count x (v, nth v W [])) toks.
Proof.
  intros cfg V bias lses dout count toks W v Hv.
  unfold column, grad_block; rewrite map_map; apply map_ext; intros x.
  change (sc_zero R_ops) with 0.
  rewrite (nth_indep _ 0 (grad_entry R_ops cfg V bias lses dout count x (0%nat, [])))
    by (rewrite map_length, vocab_length; exact Hv).
  rewrite map_nth, nth_vocab by exact Hv; reflexivity.
Qed.

Lemma weighted_sum_vocab : forall (f : nat * list R -> R) (W : list (list R)) c,
  nth c (weighted_sum R_ops (map f (vocab W)) W) 0
  = rsum (map (fun e => f e * nth c (snd e) 0) (vocab W)).
Proof.
  intros f W c.
  transitivity (nth c (weighted_sum R_ops (map f (vocab W)) (map snd (vocab W))) 0).
  - unfold vocab at 3; rewrite map_snd_combine_seq; reflexivity.
  - apply nth_weighted_sum_map.
Qed.

Lemma nth_map_seq : forall {B} (f : nat -> B) n v d,
  (v < n)%nat -> nth v (map f (seq 0 n)) d = f v.
Proof.
  intros B f n v d Hv; rewrite (nth_indep _ d (f 0%nat)) by (rewrite map_length, seq_length; exact Hv).
  rewrite map_nth, seq_nth by exact Hv; reflexivity.
Qed.

(** ** Correctness of the chunked backward *)

(** The backward loop (token chunks of [bt] rows outside, vocabulary
    chunks of [bv] rows inside, accumulating [G_blk W_blk] into the token
    chunk's grad_input rows and [G_blk^T H_blk], [colsum G_blk] into the
    vocabulary chunk's grad_weight rows and grad_bias entries) computes the
    unchunked products [G W], [G^T H] and [colsum G], row by row and
    coordinate by coordinate, for any chunk sizes. *)
Theorem ce_backward_correct : forall cfg bt bv H W bias targets fa dout gin gW gb,
  length targets = length H ->
  ce_backward R_ops cfg bt bv H W bias targets fa dout = (gin, gW, gb) ->
  let G := grad_matrix R_ops cfg bias H W targets fa dout in
  Forall2 veq gin (grad_input_spec R_ops G W)
  /\ Forall2 veq gW (grad_weight_spec R_ops G H W)
  /\ length gb = length W /\ veq gb (grad_bias_spec R_ops G W).
Proof.
  intros cfg bt bv H W bias targets fa dout gin gW gb Hlen Hbwd G.
  set (V := length W) in *.
  set (toks := tokens H targets).
  unfold ce_backward in Hbwd; fold V toks in Hbwd.
  destruct (fold_token_bwd cfg V bias (fa_lses fa) dout (fa_count fa) W bv (chunk bt toks)
              [] (map (fun w => vzero R_ops (length w)) W) (vzero R_ops V) [] gin gW gb)
    as (H1 & H2 & H3 & H4 & H5).
  - rewrite map_length; reflexivity.
  - unfold vzero; rewrite repeat_length; reflexivity.
  - constructor.
  - intros v c; rewrite nth_rows_vzero; unfold S_W; symmetry; apply rsum_map_zero.
    intros e _; destruct (Nat.eqb v (fst e)); reflexivity.
  - intros v; rewrite nth_vzero; unfold S_b; symmetry; apply rsum_map_zero.
    intros e _; destruct (Nat.eqb v (fst e)); reflexivity.
  - exact Hbwd.
  - rewrite concat_chunk in H1, H4, H5; cbn [app] in H1, H4, H5.
    assert (HG : G = map (fun x => map (grad_entry R_ops cfg V bias (fa_lses fa) dout
                                                     (fa_count fa) x) (vocab W)) toks)
      by reflexivity.
    split; [|split; [|split]].
    + unfold grad_input_spec; rewrite HG, map_map.
      apply (Forall2_map_r _ _ _ gin toks H1).
      intros r x Hr c; rewrite Hr, weighted_sum_vocab; reflexivity.
    + apply (Forall2_of_nth _ _ _ [] []).
      * unfold grad_weight_spec; rewrite map_length, seq_length; exact H2.
      * intros v Hv c; rewrite H2 in Hv; rewrite H4.
        unfold grad_weight_spec.
        rewrite nth_map_seq by exact Hv.
        unfold S_W; rewrite (rsum_vocab_pick W _ v Hv).
        unfold G, grad_matrix; fold V toks; rewrite column_grad_vocab by exact Hv.
        rewrite <- (map_tok_row_tokens H targets Hlen); fold toks.
        rewrite nth_weighted_sum_map; reflexivity.
    + exact H3.
    + intros v; rewrite H5.
      destruct (Nat.lt_ge_cases v V) as [Hv|Hv].
      * unfold grad_bias_spec.
        rewrite nth_map_seq by exact Hv.
        unfold S_b; rewrite (rsum_vocab_pick W _ v Hv).
        unfold G, grad_matrix; fold V toks; rewrite column_grad_vocab by exact Hv.
        rewrite sc_sum_R; reflexivity.
      * unfold S_b; rewrite rsum_map_zero.
        -- unfold grad_bias_spec; rewrite nth_overflow; [reflexivity|].
           rewrite map_length, seq_length; exact Hv.
        -- intros e He; apply in_vocab in He.
           destruct (Nat.eqb_spec v (fst e)); [lia|reflexivity].
Qed.

(** ** The derivative of the per-token loss *)

(** The logit row [zs] with entry [v] replaced by [x]. *)
Definition set_nth (v : nat) (x : R) (zs : list R) : list R :=
  firstn v zs ++ x :: skipn (S v) zs.

Lemma set_nth_length : forall v x zs,
  (v < length zs)%nat -> length (set_nth v x zs) = length zs.
Proof. intros; unfold set_nth; apply replace_length; assumption. Qed.

Lemma rsum_map_set_nth : forall (f : R -> R) v x zs,
  (v < length zs)%nat ->
  rsum (map f (set_nth v x zs)) = rsum (map f zs) - f (nth v zs 0) + f x.
Proof.
  intros f v x zs Hv; pose proof (list_decomp zs v 0 Hv) as Hl; unfold set_nth.
  remember (firstn v zs) as l1; remember (skipn (S v) zs) as l2; remember (nth v zs 0) as y.
  rewrite Hl, !map_app, !rsum_app; cbn [map]; rewrite !rsum_cons; ring.
Qed.

Lemma map_set_nth : forall (f : R -> R) v x zs,
  map f (set_nth v x zs) = set_nth v (f x) (map f zs).
Proof.
  intros f v x zs; unfold set_nth; rewrite map_app, firstn_map, skipn_map; reflexivity.
Qed.

Lemma is_target_to_nat : forall t v,
  (0 <= t)%Z -> is_target t v = Nat.eqb (Z.to_nat t) v.
Proof.
  intros t v Ht; unfold is_target.
  destruct (Z.eqb_spec (Z.of_nat v) t), (Nat.eqb_spec (Z.to_nat t) v); auto; lia.
Qed.

(** The derivative of the per-token loss computed by the vocabulary loop
    (chunks of any size [bv]) with respect to the logit [z_v]:
    [(1 + 2 lam lse) p_v - eps / V - (1 - eps) [v = t]] with
    [p_v = exp (z_v - lse)] the softmax; without smoothing and z-loss
    this is [p_v - [v = t]]. *)
Theorem logits_loss_is_derive : forall eps lam bv t zs v,
  (0 <= t < Z.of_nat (length zs))%Z -> (v < length zs)%nat ->
  is_derive (fun x => logits_loss R_ops eps lam bv t (set_nth v x zs)) (nth v zs 0)
            (dlogit R_ops (length zs) eps lam (lse_row zs) t v (nth v zs 0)).
Proof.
  intros eps lam bv t zs v Ht Hv.
  assert (Hne : zs <> []) by (destruct zs; [simpl in Hv; lia|discriminate]).
  set (z := nth v zs 0).
  set (A := rsum (map exp zs) - exp z).
  set (B := rsum zs - z).
  set (n := INR (length zs)).
  set (zt := fun x => if Nat.eqb (Z.to_nat t) v then x else nth (Z.to_nat t) zs 0).
  set (F := fun x => (1 - eps) * (ln (A + exp x) - zt x)
                     + eps * (ln (A + exp x) - (B + x) / n)
                     + lam * (ln (A + exp x) * ln (A + exp x))).
  apply (is_derive_ext F).
  { intros x; rewrite logits_loss_correct.
    - unfold ce_token_loss_R, lse_row, F.
      rewrite rsum_map_set_nth by exact Hv.
      rewrite <- (map_id (set_nth v x zs)), rsum_map_set_nth, map_id by exact Hv.
      rewrite set_nth_length by exact Hv.
      unfold set_nth; rewrite nth_replace by exact Hv; fold (set_nth v x zs).
      rewrite !map_id; unfold zt, A, B, n, z; destruct (Nat.eqb (Z.to_nat t) v); reflexivity.
    - unfold set_nth; destruct (firstn v zs); discriminate.
    - rewrite set_nth_length; assumption. }
  assert (HS : A + exp z = rsum (map exp zs)) by (unfold A; ring).
  assert (HSpos : 0 < A + exp z) by (rewrite HS; apply rsum_exp_pos, Hne).
  assert (Hn : n <> 0) by (apply not_0_INR; lia).
  assert (Hp : exp (z - lse_row zs) = exp z / (A + exp z))
    by (rewrite exp_minus; unfold lse_row; rewrite <- HS, exp_ln by exact HSpos; reflexivity).
  unfold dlogit; rewrite is_target_to_nat by lia.
  unfold sc_two; change (sc_one R_ops) with 1; change (sc_zero R_ops) with 0.
  change (sc_add R_ops) with Rplus; change (sc_sub R_ops) with Rminus;
  change (sc_mul R_ops) with Rmult; change (sc_div R_ops) with Rdiv;
  change (sc_exp R_ops) with exp; rewrite sc_of_nat_R; fold n z; cbv zeta.
  rewrite Hp; unfold lse_row; rewrite <- HS.
  unfold F, zt; destruct (Nat.eqb (Z.to_nat t) v);
    (auto_derive; [repeat split; exact HSpos|field; split; lra]).
Qed.

(** The extractable [sc_tanh] is the real hyperbolic tangent of the
    standard library ([tanh = sinh / cosh]). *)
Lemma sc_tanh_R : forall x, sc_tanh R_ops x = tanh x.
Proof.
  intros x; unfold sc_tanh, sc_two, tanh, sinh, cosh; cbn -[exp].
  replace ((1 + 1) * x) with (x + x) by ring; rewrite exp_plus, exp_Ropp.
  pose proof (exp_pos x) as Hx.
  field; split; [lra|nra].
Qed.

(** Over [R] the softcap is [z -> c * tanh (z / c)]. *)
Theorem softcap_tanh : forall c z, softcap R_ops (Some c) z = c * tanh (z / c).
Proof. intros c z; unfold softcap; rewrite sc_tanh_R; reflexivity. Qed.

(** The softcap [c tanh (r / c)] has derivative [1 - tanh (r / c)^2]. *)
Lemma softcap_is_derive : forall cap r,
  (forall c, cap = Some c -> c <> 0) ->
  is_derive (softcap R_ops cap) r (softcap_grad R_ops cap r).
Proof.
  intros [c|] r Hc.
  - specialize (Hc c eq_refl).
    unfold softcap_grad, softcap, sc_tanh, sc_two; cbn -[exp].
    assert (He : 0 < exp ((1 + 1) * (r / c)) + 1) by (pose proof (exp_pos ((1 + 1) * (r / c))); lra).
    auto_derive; unfold Rdiv in *; [lra|field; split; lra].
  - unfold softcap, softcap_grad; change (sc_one R_ops) with 1.
    auto_derive; [exact I|reflexivity].
Qed.

(** Through the softcap: the derivative of the per-token loss with respect
    to the raw logit [r_v = h . w_v + b_v] is [dlogit] at the capped
    logit times [1 - tanh (r_v / c)^2]. *)
Theorem raw_logits_loss_is_derive : forall eps lam cap bv t rs v,
  (forall c, cap = Some c -> c <> 0) ->
  (0 <= t < Z.of_nat (length rs))%Z -> (v < length rs)%nat ->
  let zs := map (softcap R_ops cap) rs in
  is_derive (fun x => logits_loss R_ops eps lam bv t (map (softcap R_ops cap) (set_nth v x rs)))
            (nth v rs 0)
            (dlogit R_ops (length rs) eps lam (lse_row zs) t v (softcap R_ops cap (nth v rs 0))
             * softcap_grad R_ops cap (nth v rs 0)).
Proof.
  intros eps lam cap bv t rs v Hc Ht Hv zs.
  assert (Hz : nth v zs 0 = softcap R_ops cap (nth v rs 0)).
  { unfold zs; rewrite (nth_indep _ 0 (softcap R_ops cap 0)) by (rewrite map_length; exact Hv).
    apply map_nth. }
  apply (is_derive_ext (fun x => logits_loss R_ops eps lam bv t (set_nth v (softcap R_ops cap x) zs))).
  { intros x; rewrite map_set_nth; reflexivity. }
  rewrite Rmult_comm.
  pose proof (logits_loss_is_derive eps lam bv t zs v) as HD.
  unfold zs in HD; rewrite map_length in HD; fold zs in HD; rewrite Hz in HD.
  apply (is_derive_comp (fun y => logits_loss R_ops eps lam bv t (set_nth v y zs))
                        (softcap R_ops cap));
    [apply HD; [exact Ht|exact Hv]|apply softcap_is_derive, Hc].
Qed.

(** The entry [g_iv] of G used by the backward is the reduction weight of
    token [i] times the derivative of its loss (the vocabulary loop over
    its capped logits) with respect to its raw logit
    [r_iv = h_i . w_v + b_v], provided the saved lse is the token's lse. *)
Theorem grad_entry_is_derive : forall cfg bv W bias lses dout count i h t v,
  (forall c, ce_softcap cfg = Some c -> c <> 0) ->
  (0 <= t < Z.of_nat (length W))%Z -> (v < length W)%nat ->
  nth i lses 0 = lse_row (logits_row R_ops (ce_softcap cfg) bias W h) ->
  let rs := map (raw_logit R_ops bias h) (vocab W) in
  is_derive (fun x => token_weight R_ops cfg dout count i t
                      * logits_loss R_ops (ce_smoothing cfg) (ce_z_loss cfg) bv t
                          (map (softcap R_ops (ce_softcap cfg)) (set_nth v x rs)))
            (nth v rs 0)
            (grad_entry R_ops cfg (length W) bias lses dout count (i, (h, t)) (v, nth v W [])).
Proof.
  intros cfg bv W bias lses dout count i h t v Hc Ht Hv Hl rs.
  assert (Hlen : length rs = length W) by (unfold rs; rewrite map_length; apply vocab_length).
  assert (Hr : nth v rs 0 = raw_logit R_ops bias h (v, nth v W [])).
  { unfold rs; rewrite (nth_indep _ 0 (raw_logit R_ops bias h (0%nat, []))) by (rewrite map_length, vocab_length; exact Hv).
    rewrite map_nth, nth_vocab by exact Hv; reflexivity. }
  assert (Hzs : map (softcap R_ops (ce_softcap cfg)) rs
                = logits_row R_ops (ce_softcap cfg) bias W h)
    by (unfold rs, logits_row; rewrite map_map; reflexivity).
  apply is_derive_scal.
  pose proof (raw_logits_loss_is_derive (ce_smoothing cfg) (ce_z_loss cfg) (ce_softcap cfg)
                bv t rs v Hc ltac:(rewrite Hlen; exact Ht) ltac:(rewrite Hlen; exact Hv)) as HD.
  cbv zeta in HD.
  unfold grad_entry; cbv zeta; rewrite <- Hr.
  change (sc_zero R_ops) with 0; rewrite Hl, <- Hzs, <- Hlen.
  exact HD.
Qed.
