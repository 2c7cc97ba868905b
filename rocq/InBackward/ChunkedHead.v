(** * The head's weight updated chunk by chunk inside the cross-entropy's backward.

    The linear cross-entropy's backward, with the head weight [W] ([Vn] rows)
    updated by the optimizer inside it ([ojas_ref/functional/_linear_cross_entropy_reference.py],
    [_backward_kept_update_head]), runs this loop over the vocabulary chunks
    [[k vc, min((k+1) vc, Vn))] ([vocab_chunk]), [k = 0 .. n_chunks - 1]:

      for each chunk [c]:
        over all tokens (the token chunks inside, the lse of the forward):
          dH  += G[:, c] W[c]      (reads the rows of [c], not yet updated)
          dW[c] = G[:, c]^T X      (reads the rows of [c])
        W[c] <- update(W[c], dW[c]); dW[c] is dropped

    then hands dH, complete, to the rest of the backward.  In the event model
    of [Events] this is [head_events]: per chunk, one contribution to the
    hidden-state gradient (index [h]) and one per row of the chunk, all
    reading the rows of the chunk, then the hooks of those rows; at the end
    the hook of [h].  The hidden-state gradient is not a parameter: it is an
    extra index of the store that no event reads, and its "update" at its
    hook is the hand-over to the rest of the backward ([hand_over]: its value
    becomes its gradient), so the equality of its value below is the
    equality of dH.

    - [chunked_head_eq_standard]: for any chunks that are pairwise disjoint and
      do not contain [h], followed by any rest of the backward that satisfies
      the hypotheses of [fused_eq_standard] itself and neither reads nor
      contributes to the head's rows or to [h] (in particular: [W] is not tied
      to the embedding, whose gradient would be a contribution to the rows
      after their hooks), the run that updates each chunk's rows right after
      its contributions equals backward-then-step, and frees every gradient.
      It is an instance of [Equivalence.fused_eq_standard]: the hypotheses
      are proved for these events.
    - [vocab_chunks_disjoint], [vocab_chunk_lt], [vocab_chunks_cover]: the
      code's chunks are disjoint, inside the vocabulary, and cover it (every
      row [v < Vn] is in chunk [v / vc]), so every row of the head is updated
      exactly once, after its whole gradient over all tokens.
    - [chunked_head_code_eq_standard]: the code's chunks, any rest as above.
    - [chunked_head_dh_first_eq_standard], [chunked_head_dh_first_code_eq_standard]:
      the Triton kernel's schedule ([head_events_dh_first]): dH whole first (its
      4-product forward: one contribution reading every row, before any update),
      then per vocabulary slab the rows' gradients and their hooks.
    - [chunked_head_sgd_eq_standard]: the rows updated by SGD (elementwise
      [sgd_update] of [UpdateRules], any configuration per row: in the code
      plain SGD, [p.add_(g, alpha=-lr)] on the rows of the chunk), [h] handed
      over: the head's weights and dH are those of backward then
      [SGD.step()].

    Like [fused_eq_standard], this holds over any scalars (no arithmetic
    fact is used): the fused run performs the same operations on the same
    values as the standard run of the same events.  That the dense code
    (gradients of all rows first, then the step) computes the contributions
    of these events in the same order is a fact about the code, not proved
    here (the reference sums each row's gradient over the token chunks in the
    same order both ways; tested bitwise in [tests/test_head_update.py]). *)

From Coq Require Import List Arith Bool Lia.
From Ojas Require Import ScalarOps InBackward.Events InBackward.Equivalence
  InBackward.UpdateRules.
Import ListNotations.

(** ** Events after a hook: composing lists *)

Section Clean.
Context {V G : Type}.
Local Notation event := (Events.event V G).

Definition after_hook_clean (l : list event) : Prop :=
  no_read_after_hook l /\ no_contribution_after_hook l.

Lemma existsb_hook_in : forall (l : list event) p,
  existsb (is_hook p) l = true -> In (Hook p) l.
Proof.
  intros l p H; apply existsb_exists in H; destruct H as ([q rs f|q] & Hin & Hq);
    simpl in Hq; [discriminate|].
  apply Nat.eqb_eq in Hq; subst q; exact Hin.
Qed.

Lemma clean_no_hooks : forall (l : list event),
  (forall p, existsb (is_hook p) l = false) -> after_hook_clean l.
Proof.
  intros l H; split; intros pre p post E; exfalso;
    specialize (H p); rewrite E, existsb_app in H; simpl in H;
    rewrite Nat.eqb_refl, orb_true_r in H; discriminate.
Qed.

Lemma clean_hooks_only : forall (ps : list nat), after_hook_clean (map Hook ps).
Proof.
  intros ps; split; intros pre p post E;
    apply existsb_false_forall; intros e He;
    assert (Hin : In e (map (@Hook V G) ps)) by (rewrite E; apply in_or_app; right; right; exact He);
    apply in_map_iff in Hin; destruct Hin as (q & <- & _); reflexivity.
Qed.

Lemma clean_app : forall (A B : list event),
  after_hook_clean A -> after_hook_clean B ->
  (forall p, existsb (is_hook p) A = true ->
     existsb (reads_param p) B = false /\ existsb (contributes_to p) B = false) ->
  after_hook_clean (A ++ B).
Proof.
  intros A B [HrA HcA] [HrB HcB] X; split; intros pre p post E;
    destruct (app_eq_split A B pre post (Hook p) E) as [(post' & E1 & E2)|(pre' & E1)].
  - subst post; rewrite existsb_app, (HrA _ _ _ E1).
    assert (Hh : existsb (is_hook p) A = true)
      by (rewrite E1, existsb_app; simpl; rewrite Nat.eqb_refl, orb_true_r; reflexivity).
    rewrite (proj1 (X p Hh)); reflexivity.
  - exact (HrB _ _ _ E1).
  - subst post; rewrite existsb_app, (HcA _ _ _ E1).
    assert (Hh : existsb (is_hook p) A = true)
      by (rewrite E1, existsb_app; simpl; rewrite Nat.eqb_refl, orb_true_r; reflexivity).
    rewrite (proj2 (X p Hh)); reflexivity.
  - exact (HcB _ _ _ E1).
Qed.

Lemma existsb_concat_map : forall {A B} (g : B -> bool) (f : A -> list B) ks,
  existsb g (concat (map f ks)) = existsb (fun k => existsb g (f k)) ks.
Proof.
  intros A B g f ks; induction ks as [|k ks IH]; [reflexivity|].
  simpl; rewrite existsb_app, IH; reflexivity.
Qed.

(** Blocks in order, each clean, none of whose hooks a later block reads or
    contributes to. *)
Lemma clean_concat_map : forall (f : nat -> list event) ks,
  (forall k, In k ks -> after_hook_clean (f k)) ->
  ForallOrdPairs (fun k k' => forall p, existsb (is_hook p) (f k) = true ->
      existsb (reads_param p) (f k') = false /\ existsb (contributes_to p) (f k') = false) ks ->
  after_hook_clean (concat (map f ks)).
Proof.
  intros f ks; induction ks as [|k ks IH]; intros Hk Ho.
  - apply clean_no_hooks; reflexivity.
  - inversion Ho as [|? ? Hfst Hrest]; subst.
    simpl; apply clean_app; [apply Hk; left; reflexivity|apply IH; [intros; apply Hk; right; assumption|exact Hrest]|].
    intros p Hp; rewrite !existsb_concat_map; rewrite Forall_forall in Hfst; split;
      apply existsb_false_forall; intros k' Hk'; apply (Hfst k' Hk' p Hp).
Qed.

End Clean.

Lemma ForallOrdPairs_mono : forall {A} (R R' : A -> A -> Prop) l,
  ForallOrdPairs R l ->
  (forall x y, In x l -> In y l -> R x y -> R' x y) -> ForallOrdPairs R' l.
Proof.
  intros A R R' l H; induction H as [|a l Ha Hl IH]; intros Himp; constructor.
  - rewrite Forall_forall in Ha |- *; intros y Hy; apply Himp; [left; reflexivity|right; exact Hy|apply Ha, Hy].
  - apply IH; intros x y Hx Hy; apply Himp; right; assumption.
Qed.

(** ** The chunk loop *)

Section ChunkedHead.
Context {V S G : Type}.
Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.
Local Notation event := (Events.event V G).
Local Notation store := (Events.store V S G).

(** [h]: the index of the hidden-state gradient; [chunk k]: the rows of
    vocabulary chunk [k]; [dh k]: chunk [k]'s contribution to dH over all
    tokens, [dw k v]: its (whole) gradient of row [v], both from the values
    of the chunk's rows (the lse, the hidden states and the upstream
    gradient of the loss are in the closures: computed before the loop,
    untouched by it). *)
Variable h : nat.
Variable chunk : nat -> list nat.
Variable dh : nat -> list V -> G.
Variable dw : nat -> nat -> list V -> G.

Definition chunk_events (k : nat) : list event :=
  (Contribute h (chunk k) (dh k) :: map (fun v => Contribute v (chunk k) (dw k v)) (chunk k))
  ++ map Hook (chunk k).

Definition head_events (ks : list nat) : list event :=
  concat (map chunk_events ks) ++ [Hook h].

Lemma chunk_events_hook : forall k p, existsb (is_hook p) (chunk_events k) = true -> In p (chunk k).
Proof.
  intros k p H; apply existsb_hook_in in H; unfold chunk_events in H.
  apply in_app_or in H as [H|H].
  - destruct H as [H|H]; [discriminate|]; apply in_map_iff in H; destruct H as (? & ? & _); discriminate.
  - apply in_map_iff in H; destruct H as (q & E & Hq); injection E as ->; exact Hq.
Qed.

Lemma chunk_events_reads : forall k p, existsb (reads_param p) (chunk_events k) = true -> In p (chunk k).
Proof.
  intros k p H; apply existsb_exists in H; destruct H as (e & He & Hr); unfold chunk_events in He.
  apply in_app_or in He as [He|He].
  - destruct He as [<-|He].
    + simpl in Hr; apply mem_In, Hr.
    + apply in_map_iff in He; destruct He as (v & <- & _); simpl in Hr; apply mem_In, Hr.
  - apply in_map_iff in He; destruct He as (q & <- & _); discriminate.
Qed.

Lemma chunk_events_contrib : forall k p,
  existsb (contributes_to p) (chunk_events k) = true -> p = h \/ In p (chunk k).
Proof.
  intros k p H; apply existsb_exists in H; destruct H as (e & He & Hc); unfold chunk_events in He.
  apply in_app_or in He as [He|He].
  - destruct He as [<-|He].
    + left; simpl in Hc; apply Nat.eqb_eq, Hc.
    + apply in_map_iff in He; destruct He as (v & <- & Hv); simpl in Hc;
        apply Nat.eqb_eq in Hc; subst; right; exact Hv.
  - apply in_map_iff in He; destruct He as (q & <- & _); discriminate.
Qed.

Lemma chunk_events_clean : forall k, after_hook_clean (chunk_events k).
Proof.
  intros k; unfold chunk_events; apply clean_app; [|apply clean_hooks_only|].
  - apply clean_no_hooks; intros p; simpl; apply existsb_false_forall; intros e He;
      apply in_map_iff in He; destruct He as (v & <- & _); reflexivity.
  - intros p Hp; exfalso; simpl in Hp; rewrite existsb_false_forall in Hp; [discriminate|].
    intros e He; apply in_map_iff in He; destruct He as (v & <- & _); reflexivity.
Qed.

Definition chunks_disjoint (k k' : nat) : Prop :=
  forall v, In v (chunk k) -> ~ In v (chunk k').

(** The hypotheses on the rest of the backward: those of [fused_eq_standard]
    for itself, and no read of, or contribution to, a row of the head or [h]. *)
Definition rest_ok (ks : list nat) (rest : list event) : Prop :=
  after_hook_clean rest /\
  (forall p, existsb (contributes_to p) rest = true -> existsb (is_hook p) rest = true) /\
  (forall p, (p = h \/ exists k, In k ks /\ In p (chunk k)) ->
     existsb (reads_param p) rest = false /\ existsb (contributes_to p) rest = false).

Theorem chunked_head_hypotheses : forall ks rest,
  (forall k, In k ks -> ~ In h (chunk k)) ->
  ForallOrdPairs chunks_disjoint ks ->
  rest_ok ks rest ->
  contributed_hooked (head_events ks ++ rest) /\
  no_contribution_after_hook (head_events ks ++ rest) /\
  no_read_after_hook (head_events ks ++ rest).
Proof.
  intros ks rest Hh Hd (Hrc & Hrh & Hrx).
  assert (Hcl : after_hook_clean (head_events ks ++ rest)).
  { unfold head_events; apply clean_app; [apply clean_app| exact Hrc |].
    - apply clean_concat_map; [intros; apply chunk_events_clean|].
      apply (ForallOrdPairs_mono _ _ _ Hd); intros k k' Hk _ Hkk' p Hp.
      apply chunk_events_hook in Hp; split.
      + destruct (existsb (reads_param p) (chunk_events k')) eqn:E; [|reflexivity].
        exfalso; exact (Hkk' p Hp (chunk_events_reads k' p E)).
      + destruct (existsb (contributes_to p) (chunk_events k')) eqn:E; [|reflexivity].
        exfalso; destruct (chunk_events_contrib k' p E) as [->|Hin];
          [exact (Hh k Hk Hp)|exact (Hkk' p Hp Hin)].
    - exact (clean_hooks_only [h]).
    - intros; split; reflexivity.
    - intros p Hp; apply Hrx; rewrite existsb_app, orb_true_iff in Hp; destruct Hp as [Hp|Hp].
      + right; rewrite existsb_concat_map in Hp; apply existsb_exists in Hp;
          destruct Hp as (k & Hk & Hp); exists k; split; [exact Hk|apply chunk_events_hook, Hp].
      + left; simpl in Hp; rewrite orb_false_r in Hp; apply Nat.eqb_eq, Hp. }
  destruct Hcl as [Hr Hc]; split; [|split; assumption].
  intros p Hp; rewrite existsb_app, orb_true_iff in Hp |- *; destruct Hp as [Hp|Hp]; [left|right; apply Hrh, Hp].
  unfold head_events in Hp |- *; rewrite existsb_app, orb_true_iff in Hp |- *.
  destruct Hp as [Hp|Hp]; [|simpl in Hp; discriminate].
  rewrite existsb_concat_map in Hp; apply existsb_exists in Hp; destruct Hp as (k & Hk & Hp).
  destruct (chunk_events_contrib k p Hp) as [->|Hin].
  - right; simpl; rewrite Nat.eqb_refl; reflexivity.
  - left; rewrite existsb_concat_map; apply existsb_exists; exists k; split; [exact Hk|].
    unfold chunk_events; rewrite existsb_app, orb_true_iff; right.
    apply existsb_exists; exists (Hook p); split; [apply in_map, Hin|simpl; apply Nat.eqb_refl].
Qed.

Lemma rest_ok_nil : forall ks, rest_ok ks [].
Proof.
  intros ks; split; [apply clean_no_hooks; reflexivity|split; [intros p H; discriminate|]].
  intros; split; reflexivity.
Qed.

(** Updating the rows of each chunk right after the chunk's contributions,
    then the rest of the backward, equals backward-then-step: the same
    parameters (the head's rows included) and optimizer states, the same
    dH (the value of [h] with the [hand_over] rule below), every gradient
    freed. *)
Theorem chunked_head_eq_standard : forall ks rest (st : store),
  (forall q, s_grad st q = None) ->
  (forall k, In k ks -> ~ In h (chunk k)) ->
  ForallOrdPairs chunks_disjoint ks ->
  rest_ok ks rest ->
  forall q,
    s_param (fused_run gadd update (head_events ks ++ rest) st) q =
      s_param (standard_run gadd update (head_events ks ++ rest) st) q /\
    s_opt (fused_run gadd update (head_events ks ++ rest) st) q =
      s_opt (standard_run gadd update (head_events ks ++ rest) st) q /\
    s_grad (fused_run gadd update (head_events ks ++ rest) st) q = None.
Proof.
  intros ks rest st H0 Hh Hd Hr.
  destruct (chunked_head_hypotheses ks rest Hh Hd Hr) as (H1 & H2 & H3).
  apply (fused_eq_standard gadd update); assumption.
Qed.

(** ** dH whole first (the Triton kernel's schedule)

    The Triton kernel's 4-product schedule computes all of dH in the forward
    (one contribution reading every row of the head, before any update), then in
    the backward each vocabulary slab's gradients and its rows' updates. *)

Definition chunk_events_w (k : nat) : list event :=
  map (fun v => Contribute v (chunk k) (dw k v)) (chunk k) ++ map Hook (chunk k).

Definition head_events_dh_first (ks : list nat) (dh_all : list V -> G) : list event :=
  Contribute h (concat (map chunk ks)) dh_all :: concat (map chunk_events_w ks) ++ [Hook h].

Lemma existsb_app_true_r : forall {A} (f : A -> bool) l l', existsb f l' = true -> existsb f (l ++ l') = true.
Proof. intros; rewrite existsb_app; apply orb_true_iff; right; assumption. Qed.

Lemma chunk_events_w_hook : forall k p, existsb (is_hook p) (chunk_events_w k) = true -> In p (chunk k).
Proof.
  intros k p H; apply existsb_hook_in in H; unfold chunk_events_w in H.
  apply in_app_or in H as [H|H].
  - apply in_map_iff in H; destruct H as (? & ? & _); discriminate.
  - apply in_map_iff in H; destruct H as (q & E & Hq); injection E as ->; exact Hq.
Qed.

Lemma chunk_events_w_reads : forall k p, existsb (reads_param p) (chunk_events_w k) = true -> In p (chunk k).
Proof.
  intros k p H; apply existsb_exists in H; destruct H as (e & He & Hr); unfold chunk_events_w in He.
  apply in_app_or in He as [He|He].
  - apply in_map_iff in He; destruct He as (v & <- & _); simpl in Hr; apply mem_In, Hr.
  - apply in_map_iff in He; destruct He as (q & <- & _); discriminate.
Qed.

Lemma chunk_events_w_contrib : forall k p,
  existsb (contributes_to p) (chunk_events_w k) = true -> In p (chunk k).
Proof.
  intros k p H; apply existsb_exists in H; destruct H as (e & He & Hc); unfold chunk_events_w in He.
  apply in_app_or in He as [He|He].
  - apply in_map_iff in He; destruct He as (v & <- & Hv); simpl in Hc; apply Nat.eqb_eq in Hc; subst; exact Hv.
  - apply in_map_iff in He; destruct He as (q & <- & _); discriminate.
Qed.

Lemma chunk_events_w_clean : forall k, after_hook_clean (chunk_events_w k).
Proof.
  intros k; unfold chunk_events_w; apply clean_app; [|apply clean_hooks_only|].
  - apply clean_no_hooks; intros p; apply existsb_false_forall; intros e He;
      apply in_map_iff in He; destruct He as (v & <- & _); reflexivity.
  - intros p Hp; exfalso; rewrite existsb_false_forall in Hp; [discriminate|].
    intros e He; apply in_map_iff in He; destruct He as (v & <- & _); reflexivity.
Qed.

Theorem chunked_head_dh_first_eq_standard : forall ks dh_all rest (st : store),
  (forall q, s_grad st q = None) ->
  (forall k, In k ks -> ~ In h (chunk k)) ->
  ForallOrdPairs chunks_disjoint ks ->
  rest_ok ks rest ->
  forall q,
    s_param (fused_run gadd update (head_events_dh_first ks dh_all ++ rest) st) q =
      s_param (standard_run gadd update (head_events_dh_first ks dh_all ++ rest) st) q /\
    s_opt (fused_run gadd update (head_events_dh_first ks dh_all ++ rest) st) q =
      s_opt (standard_run gadd update (head_events_dh_first ks dh_all ++ rest) st) q /\
    s_grad (fused_run gadd update (head_events_dh_first ks dh_all ++ rest) st) q = None.
Proof.
  intros ks dh_all rest st H0 Hh Hd (Hrc & Hrh & Hrx).
  set (body := concat (map chunk_events_w ks)).
  assert (Hbody_hook : forall p, existsb (is_hook p) body = true -> exists k, In k ks /\ In p (chunk k)).
  { intros p Hp; unfold body in Hp; rewrite existsb_concat_map in Hp; apply existsb_exists in Hp;
      destruct Hp as (k & Hk & Hp); exists k; split; [exact Hk|].
    apply chunk_events_w_hook, Hp. }
  assert (Hcl : after_hook_clean (head_events_dh_first ks dh_all ++ rest)).
  { unfold head_events_dh_first; rewrite <- app_comm_cons.
    apply (clean_app [Contribute h (concat (map chunk ks)) dh_all] ((body ++ [Hook h]) ++ rest)); [apply clean_no_hooks; reflexivity| |intros p Hp; discriminate].
    apply clean_app; [apply clean_app| exact Hrc |].
    - apply clean_concat_map; [intros; apply chunk_events_w_clean|].
      apply (ForallOrdPairs_mono _ _ _ Hd); intros k k' Hk _ Hkk' p Hp.
      apply chunk_events_w_hook in Hp; split.
      + destruct (existsb (reads_param p) (chunk_events_w k')) eqn:E; [|reflexivity].
        exfalso; exact (Hkk' p Hp (chunk_events_w_reads k' p E)).
      + destruct (existsb (contributes_to p) (chunk_events_w k')) eqn:E; [|reflexivity].
        exfalso; exact (Hkk' p Hp (chunk_events_w_contrib k' p E)).
    - exact (clean_hooks_only [h]).
    - intros; split; reflexivity.
    - intros p Hp; apply Hrx; rewrite existsb_app, orb_true_iff in Hp; destruct Hp as [Hp|Hp].
      + right; apply Hbody_hook, Hp.
      + left; simpl in Hp; rewrite orb_false_r in Hp; apply Nat.eqb_eq, Hp. }
  destruct Hcl as [Hr Hc].
  apply (fused_eq_standard gadd update); [exact H0| |exact Hc|exact Hr].
  intros p Hp; apply existsb_exists in Hp; destruct Hp as (e & He & Hce).
  assert (Hin : forall x, In x (head_events_dh_first ks dh_all) -> In x (head_events_dh_first ks dh_all ++ rest))
    by (intros; apply in_or_app; left; assumption).
  assert (Hhook : In (Hook p) (head_events_dh_first ks dh_all ++ rest) -> existsb (is_hook p)
                    (head_events_dh_first ks dh_all ++ rest) = true)
    by (intros Hx; apply existsb_exists; exists (Hook p); split; [exact Hx|apply Nat.eqb_refl]).
  apply in_app_or in He as [He|He]; [|apply existsb_app_true_r, Hrh, existsb_exists; exists e; split; assumption].
  apply Hhook, Hin; unfold head_events_dh_first in *; destruct He as [<-|He].
  - simpl in Hce; apply Nat.eqb_eq in Hce; subst p; right; apply in_or_app; right; left; reflexivity.
  - apply in_app_or in He as [He|[<-|[]]]; [|discriminate].
    apply in_concat in He; destruct He as (l & Hl & He); apply in_map_iff in Hl; destruct Hl as (k & <- & Hk).
    assert (Hp : In p (chunk k)).
    { apply chunk_events_w_contrib, existsb_exists; exists e; split; assumption. }
    right; apply in_or_app; left; apply in_concat; exists (chunk_events_w k); split; [apply in_map, Hk|].
    unfold chunk_events_w; apply in_or_app; right; apply in_map, Hp.
Qed.

End ChunkedHead.

(** ** The code's vocabulary chunks *)

(** [range(v0, min(v0 + vc, Vn))] for [v0 = k vc], [k] in [range(n_chunks)]:
    the chunks of [range(0, Vn, vc)]. *)
Definition vocab_chunk (vc Vn k : nat) : list nat := seq (k * vc) (Nat.min vc (Vn - k * vc)).
Definition n_chunks (vc Vn : nat) : nat := (Vn + vc - 1) / vc.

Lemma in_vocab_chunk : forall vc Vn k v,
  In v (vocab_chunk vc Vn k) <-> k * vc <= v /\ v < k * vc + Nat.min vc (Vn - k * vc).
Proof. intros; unfold vocab_chunk; rewrite in_seq; tauto. Qed.

Lemma vocab_chunk_lt : forall vc Vn k v, In v (vocab_chunk vc Vn k) -> v < Vn.
Proof. intros vc Vn k v H; apply in_vocab_chunk in H; lia. Qed.

Lemma vocab_chunks_disjoint : forall vc Vn s n,
  ForallOrdPairs (chunks_disjoint (vocab_chunk vc Vn)) (seq s n).
Proof.
  intros vc Vn s n; revert s; induction n as [|n IH]; intros s; [constructor|].
  cbn [seq]; constructor; [|apply IH].
  apply Forall_forall; intros k' Hk' v Hv Hv'.
  apply in_seq in Hk'; apply in_vocab_chunk in Hv, Hv'.
  assert (S s * vc <= k' * vc) by (apply Nat.mul_le_mono_r; lia).
  cbn [Nat.mul] in *; lia.
Qed.

(** Every row of the vocabulary is in chunk [v / vc], one of the chunks the
    loop visits. *)
Lemma vocab_chunks_cover : forall vc Vn v, 0 < vc -> v < Vn ->
  In (v / vc) (seq 0 (n_chunks vc Vn)) /\ In v (vocab_chunk vc Vn (v / vc)).
Proof.
  intros vc Vn v Hvc Hv; split.
  - apply in_seq; split; [lia|]; unfold n_chunks.
    replace (Vn + vc - 1) with ((Vn - 1) + 1 * vc) by lia.
    rewrite Nat.div_add by lia.
    assert (v / vc <= (Vn - 1) / vc) by (apply Nat.div_le_mono; lia); lia.
  - apply in_vocab_chunk.
    pose proof (Nat.div_mod v vc ltac:(lia)) as Hd; pose proof (Nat.mod_upper_bound v vc ltac:(lia)) as Hm.
    rewrite (Nat.mul_comm (v / vc) vc); lia.
Qed.

Lemma vocab_chunk_not_h : forall vc Vn k, ~ In Vn (vocab_chunk vc Vn k).
Proof. intros vc Vn k H; apply vocab_chunk_lt in H; lia. Qed.

(** The loop the code runs: [h = Vn] (past the head's rows), the chunks of
    [range(0, Vn, vc)], then any rest of the backward as in [rest_ok]. *)
Theorem chunked_head_code_eq_standard :
  forall {V S G : Type} (gadd : G -> G -> G) (update : nat -> V -> S -> G -> V * S)
         (vc Vn : nat) (dh : nat -> list V -> G) (dw : nat -> nat -> list V -> G)
         (rest : list (Events.event V G)) (st : Events.store V S G),
  (forall q, s_grad st q = None) ->
  rest_ok Vn (vocab_chunk vc Vn) (seq 0 (n_chunks vc Vn)) rest ->
  let evs := head_events Vn (vocab_chunk vc Vn) dh dw (seq 0 (n_chunks vc Vn)) ++ rest in
  forall q,
    s_param (fused_run gadd update evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (fused_run gadd update evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (fused_run gadd update evs st) q = None.
Proof.
  intros V S G gadd update vc Vn dh dw rest st H0 Hr evs.
  apply chunked_head_eq_standard; [exact H0| |apply vocab_chunks_disjoint|exact Hr].
  intros k _; apply vocab_chunk_not_h.
Qed.

(** The Triton kernel's schedule on the slabs of [range(0, Vn, slab)]: dH whole from the
    forward, then each slab's gradients and its rows' updates. *)
Theorem chunked_head_dh_first_code_eq_standard :
  forall {V S G : Type} (gadd : G -> G -> G) (update : nat -> V -> S -> G -> V * S)
         (slab Vn : nat) (dh_all : list V -> G) (dw : nat -> nat -> list V -> G)
         (rest : list (Events.event V G)) (st : Events.store V S G),
  (forall q, s_grad st q = None) ->
  rest_ok Vn (vocab_chunk slab Vn) (seq 0 (n_chunks slab Vn)) rest ->
  let evs := head_events_dh_first Vn (vocab_chunk slab Vn) dw (seq 0 (n_chunks slab Vn)) dh_all ++ rest in
  forall q,
    s_param (fused_run gadd update evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (fused_run gadd update evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (fused_run gadd update evs st) q = None.
Proof.
  intros V S G gadd update slab Vn dh_all dw rest st H0 Hr evs.
  apply chunked_head_dh_first_eq_standard; [exact H0| |apply vocab_chunks_disjoint|exact Hr].
  intros k _; apply vocab_chunk_not_h.
Qed.

(** ** SGD on the rows, dH handed over *)

Section SGD.
Context {T : Type} (o : OptOps T).

(** A row of [D] entries (any width: a function of the column), updated
    elementwise by [sgd_update]; its state the per-entry momentum buffers. *)
Definition row_sgd (c : sgd_config T) (w : nat -> T) (s : nat -> option T) (g : nat -> T)
    : (nat -> T) * (nat -> option T) :=
  (fun j => fst (sgd_update o c (w j) (s j) (g j)), fun j => snd (sgd_update o c (w j) (s j) (g j))).

(** The hidden-state gradient's "update": its value becomes dH. *)
Definition hand_over (w : nat -> T) (s : nat -> option T) (g : nat -> T)
    : (nat -> T) * (nat -> option T) := (g, s).

Definition head_rule (Vn : nat) (cfg : nat -> sgd_config T) (q : nat)
    : (nat -> T) -> (nat -> option T) -> (nat -> T) -> (nat -> T) * (nat -> option T) :=
  if q <? Vn then row_sgd (cfg q) else hand_over.

Definition row_add (a b : nat -> T) : nat -> T := fun j => sc_add (oo_sc o) (a j) (b j).

(** The head's rows stepped by SGD chunk by chunk inside the loss's backward,
    then the rest of the backward: the rows, their (absent) momentum buffers
    and dH are those of backward then [SGD.step()] (the standard run: all
    contributions with the weights frozen, then every row with a gradient
    stepped once). *)
Theorem chunked_head_sgd_eq_standard :
  forall (vc Vn : nat) (cfg : nat -> sgd_config T)
         (dh : nat -> list (nat -> T) -> nat -> T) (dw : nat -> nat -> list (nat -> T) -> nat -> T)
         rest (st : Events.store (nat -> T) (nat -> option T) (nat -> T)),
  (forall q, s_grad st q = None) ->
  rest_ok Vn (vocab_chunk vc Vn) (seq 0 (n_chunks vc Vn)) rest ->
  let evs := head_events Vn (vocab_chunk vc Vn) dh dw (seq 0 (n_chunks vc Vn)) ++ rest in
  forall q,
    s_param (fused_run row_add (head_rule Vn cfg) evs st) q =
      s_param (standard_run row_add (head_rule Vn cfg) evs st) q /\
    s_opt (fused_run row_add (head_rule Vn cfg) evs st) q =
      s_opt (standard_run row_add (head_rule Vn cfg) evs st) q /\
    s_grad (fused_run row_add (head_rule Vn cfg) evs st) q = None.
Proof. intros; apply chunked_head_code_eq_standard; assumption. Qed.

End SGD.
