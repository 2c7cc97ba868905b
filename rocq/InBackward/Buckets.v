(** * Bucketed updates: the hook only marks a parameter pending, a later flush updates it.

    [bucketed_run choose evs st]: contributions read the current store,
    as in [fused_run]; at [Hook p] the parameter [p] is appended to the
    pending list, then the pending parameters that [choose] picks (from
    the pending list) are flushed: each is updated with its gradient,
    which is freed ([hook_update]), and leaves the pending list.  At the
    end of the backward pass every parameter still pending is flushed.
    [choose] is any flush rule; [cap_flush] is the rule of
    [InBackwardOptimizer] (ojas_ref/optim/in_backward.py): flush the
    pending parameters of the group of the parameter just hooked when
    the sizes of their gradients reach the cap.

    - [fused_is_flush_every_hook]: flushing everything at every hook is
      [fused_run] (the per-parameter updates of [Equivalence]).
    - [bucketed_eq_standard_from] / [bucketed_eq_standard]: under the
      hypotheses of [fused_eq_standard], any flush rule gives the
      parameters and optimizer states of [standard_run], and frees every
      gradient.
    - [backprop_bucketed_eq_standard]: for the reverse tape order of
      [loss.backward()] and any flush rule; [backprop_cap_bucketed_eq_standard]
      for [cap_flush].

    Why a flush may come at any time after the hook: after [Hook p] no
    event contributes to [p] (its gradient is final) or reads [p] (so
    when [p] is updated does not matter to the other events). *)

From Coq Require Import List Arith Bool.
From Ojas Require Import InBackward.Events InBackward.Equivalence.
Import ListNotations.

Section Buckets.
Context {V S G : Type}.
Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.

Local Notation event := (Events.event V G).
Local Notation store := (Events.store V S G).

(** Update (and free the gradient of) each parameter of [ps], in order. *)
Definition flush (st : store) (ps : list nat) : store :=
  fold_left (hook_update update) ps st.

(** The store and the pending parameters (in hook order). *)
Definition bstate : Type := (store * list nat)%type.

(** Flush the pending parameters that [chosen] names; the others stay pending. *)
Definition flush_chosen (chosen : list nat) (b : bstate) : bstate :=
  (flush (fst b) (filter (fun q => mem q chosen) (snd b)),
   filter (fun q => negb (mem q chosen)) (snd b)).

Section Rule.
(** The flush rule: which pending parameters to flush after a hook. *)
Variable choose : list nat -> list nat.

(** One event: a contribution reads the current store; a hook makes its
    parameter pending, then the chosen pending parameters are flushed. *)
Definition bucketed_step (b : bstate) (e : event) : bstate :=
  match e with
  | Contribute p rs f =>
      (mk_store (s_param (fst b)) (s_opt (fst b))
                (add_grad gadd (s_grad (fst b)) p (f (map (s_param (fst b)) rs))),
       snd b)
  | Hook p => let pend := snd b ++ [p] in flush_chosen (choose pend) (fst b, pend)
  end.

(** The backward pass, then the flush of everything still pending. *)
Definition bucketed_run (evs : list event) (st : store) : store :=
  let b := fold_left bucketed_step evs (st, []) in flush (fst b) (snd b).

End Rule.

(** ** Flushing *)

Lemma hook_update_other : forall (st : store) r q, q <> r ->
  s_param (hook_update update st r) q = s_param st q /\
  s_opt (hook_update update st r) q = s_opt st q /\
  s_grad (hook_update update st r) q = s_grad st q.
Proof.
  intros st r q H; unfold hook_update; destruct (s_grad st r); simpl; [|auto].
  rewrite !fupd_neq by exact H; auto.
Qed.

Lemma hook_update_self : forall (st : store) q,
  s_grad (hook_update update st q) q = None /\
  (s_param (hook_update update st q) q, s_opt (hook_update update st q) q) =
    update_opt update q (s_param st q) (s_opt st q) (s_grad st q).
Proof.
  intros st q; unfold hook_update, update_opt; destruct (s_grad st q) eqn:E; simpl.
  - rewrite !fupd_eq; destruct (update q (s_param st q) (s_opt st q) g); auto.
  - auto.
Qed.

(** A flush updates each parameter it names once (a repeated name finds
    the gradient freed and does nothing) and leaves the others. *)
Lemma flush_param : forall ps (st : store) q,
  let F := flush st ps in
  if mem q ps
  then s_grad F q = None /\
       (s_param F q, s_opt F q) = update_opt update q (s_param st q) (s_opt st q) (s_grad st q)
  else s_param F q = s_param st q /\ s_opt F q = s_opt st q /\ s_grad F q = s_grad st q.
Proof.
  unfold flush; intros ps; induction ps as [|r ps IH]; intros st q; simpl; [auto|].
  specialize (IH (hook_update update st r) q).
  destruct (Nat.eqb_spec q r) as [->|Hne]; simpl.
  - destruct (hook_update_self st r) as [H1 H2].
    destruct (mem r ps).
    + destruct IH as [I1 I2]; split; [exact I1|].
      rewrite I2, H1; simpl; exact H2.
    + destruct IH as (I1 & I2 & I3); rewrite I1, I2, I3; split; [exact H1|exact H2].
  - destruct (hook_update_other st r q Hne) as (H1 & H2 & H3).
    destruct (mem q ps); rewrite <- H1, <- H2, <- H3; exact IH.
Qed.

(** ** The per-parameter run is the rule that flushes at every hook *)

(** Flushing every pending parameter after every hook is [fused_run]. *)
Theorem fused_is_flush_every_hook : forall (evs : list event) (st : store),
  bucketed_run (fun pend => pend) evs st = fused_run gadd update evs st.
Proof.
  intros evs st; unfold bucketed_run, fused_run.
  assert (H : forall evs (st : store),
            fold_left (bucketed_step (fun pend => pend)) evs (st, []) =
            (fold_left (fused_step gadd update) evs st, [])).
  { intros evs'; induction evs' as [|e evs' IH]; intros st'; simpl; [reflexivity|].
    rewrite <- IH; f_equal; destruct e as [r rs f|r]; simpl; [reflexivity|].
    unfold flush_chosen, flush, mem; simpl; rewrite Nat.eqb_refl; reflexivity. }
  rewrite H; reflexivity.
Qed.

(** ** Any flush rule is the standard run *)

Section AnyRule.
Variable choose : list nat -> list nat.

Lemma bucketed_step_app_single : forall evs e (b : bstate),
  fold_left (bucketed_step choose) (evs ++ [e]) b =
  bucketed_step choose (fold_left (bucketed_step choose) evs b) e.
Proof. intros; rewrite fold_left_app; reflexivity. Qed.

(** The bucketed run after a prefix [pre]: a pending parameter has been
    hooked; a hooked one has either been updated once with its standard
    gradient and freed, or is pending, untouched, with its standard
    gradient; a parameter not hooked yet is untouched and holds its
    standard gradient so far. *)
Definition bucketed_inv (st : store) (pre : list event) (q : nat) : Prop :=
  let b := fold_left (bucketed_step choose) pre (st, []) in
  let F := fst b in
  let gq := backward gadd (s_param st) pre (s_grad st) q in
  (mem q (snd b) = true -> existsb (is_hook q) pre = true) /\
  if existsb (is_hook q) pre
  then (s_grad F q = None /\
        (s_param F q, s_opt F q) = update_opt update q (s_param st q) (s_opt st q) gq) \/
       (mem q (snd b) = true /\
        s_param F q = s_param st q /\ s_opt F q = s_opt st q /\ s_grad F q = gq)
  else s_param F q = s_param st q /\ s_opt F q = s_opt st q /\ s_grad F q = gq.

Lemma mem_filter : forall f q l, mem q (filter f l) = mem q l && f q.
Proof.
  intros f q l; induction l as [|x l IH]; [reflexivity|].
  simpl; destruct (f x) eqn:Ef; unfold mem in *; simpl; rewrite IH;
    destruct (Nat.eqb_spec q x) as [->|Hne]; simpl; rewrite ?Ef, ?andb_false_r; reflexivity.
Qed.

Lemma update_opt_none : forall q (v : V) (s : S), update_opt update q v s None = (v, s).
Proof. reflexivity. Qed.

Lemma bucketed_inv_prefix : forall (evs : list event) st,
  no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall pre rest, evs = pre ++ rest -> forall q, bucketed_inv st pre q.
Proof.
  intros evs st Hc Hr pre; induction pre as [|e pre IH] using rev_ind;
    intros rest Hevs q.
  - unfold bucketed_inv; simpl; split; [discriminate|auto].
  - assert (IH' : forall q, bucketed_inv st pre q)
      by (intros q'; apply (IH (e :: rest)); rewrite Hevs, <- app_assoc; reflexivity).
    assert (Hafter : forall x, existsb (is_hook x) pre = true ->
              reads_param x e = false /\ contributes_to x e = false)
      by (intros x; apply (after_hook_untouched evs pre e rest x Hc Hr Hevs)).
    specialize (IH' q) as IHq; unfold bucketed_inv in IHq |- *.
    rewrite bucketed_step_app_single, backward_app_single, existsb_app_single.
    set (b := fold_left (bucketed_step choose) pre (st, [])) in *.
    set (B := backward gadd (s_param st) pre (s_grad st)) in *.
    destruct IHq as [Hpend IHq].
    destruct e as [r rs f|r]; simpl bucketed_step; simpl orb.
    + (* a contribution: the pending list does not change *)
      simpl fst; simpl snd; rewrite orb_false_r; split; [exact Hpend|].
      destruct (existsb (is_hook q) pre) eqn:Hq.
      * destruct (Hafter q Hq) as [_ Hcq].
        rewrite backward_step_other by exact Hcq.
        assert (r <> q) by (intros ->; simpl in Hcq; rewrite Nat.eqb_refl in Hcq; discriminate).
        unfold add_grad; simpl; rewrite fupd_neq by congruence; exact IHq.
      * destruct IHq as (I1 & I2 & I3); simpl.
        (* the values read are the frozen ones *)
        assert (Hrs : map (s_param (fst b)) rs = map (s_param st) rs).
        { apply map_ext_in; intros x Hx.
          destruct (existsb (is_hook x) pre) eqn:E.
          - destruct (Hafter x E) as [Hrx _]; simpl in Hrx.
            assert (existsb (Nat.eqb x) rs = true)
              by (apply existsb_exists; exists x; split; [exact Hx|apply Nat.eqb_refl]).
            congruence.
          - specialize (IH' x); unfold bucketed_inv in IH'; rewrite E in IH'; apply IH'. }
        rewrite Hrs; unfold add_grad, fupd.
        destruct (Nat.eqb q r) eqn:Eqr; [apply Nat.eqb_eq in Eqr; subst r|]; auto.
        rewrite I3; auto.
    + (* a hook: [r] becomes pending, then a flush *)
      rewrite backward_step_other by reflexivity.
      set (pend := snd b ++ [r]).
      set (ch := choose pend).
      unfold flush_chosen; simpl fst; simpl snd.
      pose proof (flush_param (filter (fun x => mem x ch) pend) (fst b) q) as Hfl.
      simpl in Hfl; rewrite mem_filter in Hfl.
      rewrite mem_filter.
      assert (Hmp : mem q pend = mem q (snd b) || Nat.eqb q r)
        by (unfold pend; rewrite mem_app; unfold mem; simpl; rewrite orb_false_r; reflexivity).
      rewrite Hmp in Hfl |- *.
      destruct (existsb (is_hook q) pre) eqn:Hq; simpl orb.
      * (* [q] hooked before *)
        split; [intros _; reflexivity|].
        destruct IHq as [(I1 & I2)|(Im & I1 & I2 & I3)].
        -- left; destruct (mem q ch); simpl in Hfl;
             destruct (mem q (snd b) || Nat.eqb q r); simpl in Hfl.
           ++ destruct Hfl as [F1 F2]; rewrite F2, I1, update_opt_none; split; [exact F1|].
              destruct (update_opt update q (s_param st q) (s_opt st q) (B q)) eqn:U.
              injection I2 as <- <-; reflexivity.
           ++ destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; split; assumption.
           ++ destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; split; assumption.
           ++ destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; split; assumption.
        -- rewrite Im in Hfl |- *; simpl orb in Hfl |- *.
           destruct (mem q ch); simpl in Hfl |- *.
           ++ left; destruct Hfl as [F1 F2]; rewrite F2, I1, I2, I3; split; [exact F1|reflexivity].
           ++ right; destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; auto.
      * (* [q] not hooked before: it is not pending *)
        destruct IHq as (I1 & I2 & I3).
        assert (Hnp : mem q (snd b) = false)
          by (destruct (mem q (snd b)) eqn:E; [specialize (Hpend eq_refl); congruence|reflexivity]).
        rewrite Hnp in Hfl |- *; simpl orb in Hfl |- *.
        destruct (Nat.eqb_spec q r) as [->|Hne]; simpl.
        -- (* the hook of [q] itself *)
           split; [intros _; reflexivity|].
           destruct (mem r ch); simpl in Hfl |- *.
           ++ left; destruct Hfl as [F1 F2]; rewrite F2, I1, I2, I3; split; [exact F1|reflexivity].
           ++ right; destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; auto.
        -- split; [auto|]; simpl in Hfl.
           destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; auto.
Qed.

(** Bucketed updates, with any flush rule, equal backward then
    [optimizer.step()], from any starting gradients, if every parameter
    that has a gradient at the start or receives a contribution is
    hooked, and no contribution to [p] and no read of [p] comes after a
    hook of [p]; the bucketed run frees every gradient. *)
Theorem bucketed_eq_standard_from : forall (evs : list event) (st : store),
  (forall q, s_grad st q <> None \/ existsb (contributes_to q) evs = true ->
     existsb (is_hook q) evs = true) ->
  no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q,
    s_param (bucketed_run choose evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (bucketed_run choose evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (bucketed_run choose evs st) q = None.
Proof.
  intros evs st Hh Hc Hr q.
  pose proof (bucketed_inv_prefix evs st Hc Hr evs [] (eq_sym (app_nil_r evs)) q) as [Hp I].
  unfold bucketed_run, standard_run, optimizer_step, step_param; simpl.
  set (b := fold_left (bucketed_step choose) evs (st, [])) in *.
  pose proof (flush_param (snd b) (fst b) q) as Hfl; simpl in Hfl.
  destruct (existsb (is_hook q) evs) eqn:Eh.
  - assert (K : (s_param (flush (fst b) (snd b)) q, s_opt (flush (fst b) (snd b)) q) =
                 update_opt update q (s_param st q) (s_opt st q)
                   (backward gadd (s_param st) evs (s_grad st) q) /\
                 s_grad (flush (fst b) (snd b)) q = None).
    { destruct I as [(I1 & I2)|(Im & I1 & I2 & I3)].
      - destruct (mem q (snd b)).
        + destruct Hfl as [F1 F2]; rewrite F2, I1, update_opt_none; split; [exact I2|exact F1].
        + destruct Hfl as (F1 & F2 & F3); rewrite F1, F2, F3; split; [exact I2|exact I1].
      - rewrite Im in Hfl; destruct Hfl as [F1 F2]; rewrite F2, I1, I2, I3; split; [reflexivity|exact F1]. }
    destruct K as [K1 K2].
    pose proof (f_equal fst K1) as J1; pose proof (f_equal snd K1) as J2.
    simpl in J1, J2; unfold update_opt in J1, J2; rewrite J1, J2; auto.
  - destruct (existsb (contributes_to q) evs) eqn:Ec;
      [specialize (Hh q (or_intror Ec)); congruence|].
    destruct (s_grad st q) eqn:Eg;
      [assert (Hg : s_grad st q <> None) by (rewrite Eg; discriminate);
       specialize (Hh q (or_introl Hg)); congruence|].
    destruct I as (I1 & I2 & I3).
    assert (Hnp : mem q (snd b) = false)
      by (destruct (mem q (snd b)) eqn:E; [specialize (Hp eq_refl); congruence|reflexivity]).
    rewrite Hnp in Hfl; destruct Hfl as (F1 & F2 & F3).
    rewrite (backward_other gadd (s_param st) evs (s_grad st) q Ec), Eg in I3 |- *; simpl.
    rewrite F1, F2, F3; auto.
Qed.

(** Bucketed updates, with any flush rule, equal the standard loop
    (gradients zeroed before the backward, set to [None]) when each
    contributed parameter is hooked after all its contributions and
    nothing reads a parameter after its hook; every gradient is freed. *)
Theorem bucketed_eq_standard : forall (evs : list event) (st : store),
  (forall q, s_grad st q = None) ->
  contributed_hooked evs -> no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q,
    s_param (bucketed_run choose evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (bucketed_run choose evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (bucketed_run choose evs st) q = None.
Proof.
  intros evs st H0 Hh Hc Hr q.
  apply bucketed_eq_standard_from; [|assumption|assumption].
  intros x [Hx|Hx]; [congruence|apply Hh, Hx].
Qed.

(** Bucketed updates, with any flush rule, in the hooks of
    [loss.backward()] give the parameters and optimizer states of
    [loss.backward(); optimizer.step()], and free every gradient. *)
Theorem backprop_bucketed_eq_standard : forall (tape : list (tape_entry V G)) (st : store),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (bucketed_run choose (backward_events tape) st) q =
      s_param (standard_run gadd update (backward_events tape) st) q /\
    s_opt (bucketed_run choose (backward_events tape) st) q =
      s_opt (standard_run gadd update (backward_events tape) st) q /\
    s_grad (bucketed_run choose (backward_events tape) st) q = None.
Proof.
  intros tape st H0; destruct (backward_events_hypotheses tape) as (H1 & H2 & H3).
  apply bucketed_eq_standard; assumption.
Qed.

End AnyRule.

(** ** The rule of [InBackwardOptimizer] *)

(** Parameters are in groups ([group q]) and have gradients of [size q]
    bytes.  After the hook of [p] (the last pending parameter), the
    pending parameters of [p]'s group are flushed, together, when the
    sizes of their gradients reach [cap]; otherwise nothing is. *)
Definition cap_flush (group size : nat -> nat) (cap : nat) (pend : list nat) : list nat :=
  let bucket := filter (fun q => Nat.eqb (group q) (group (last pend 0))) pend in
  if cap <=? fold_right plus 0 (map size bucket) then bucket else [].

(** [InBackwardOptimizer]'s buckets in the hooks of [loss.backward()]
    (any groups, gradient sizes and cap) give the parameters and
    optimizer states of [loss.backward(); optimizer.step()], and free
    every gradient. *)
Theorem backprop_cap_bucketed_eq_standard :
  forall (group size : nat -> nat) (cap : nat) (tape : list (tape_entry V G)) (st : store),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (bucketed_run (cap_flush group size cap) (backward_events tape) st) q =
      s_param (standard_run gadd update (backward_events tape) st) q /\
    s_opt (bucketed_run (cap_flush group size cap) (backward_events tape) st) q =
      s_opt (standard_run gadd update (backward_events tape) st) q /\
    s_grad (bucketed_run (cap_flush group size cap) (backward_events tape) st) q = None.
Proof.
  intros group size cap tape st H0; apply backprop_bucketed_eq_standard, H0.
Qed.

End Buckets.
