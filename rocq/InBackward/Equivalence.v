(** * Optimizer in backward equals backward-then-step.

    [fused_eq_standard]: if every parameter that receives a contribution
    has a hook, no contribution to [p] comes after a hook of [p], and no
    event after a hook of [p] reads [p], then the fused run ends with
    the same parameter values and optimizer states as the standard run,
    and with every gradient freed.  A second hook of [p] is harmless (its
    gradient was freed, the hook does nothing), so "each hook exactly
    once, after all contributions" is a special case of the hypotheses.

    Then a model of reverse-mode backprop ([backward_events]): a tape of
    forward operations, each reading some parameters; the backward visits
    the tape in reverse, and the backward of an operation emits one
    contribution for each parameter it read; the hook of [p] is placed
    after the operation that holds the last contribution to [p] (the
    first use of [p] in the forward), after all of that operation's
    contributions.  [backprop_fused_eq_standard]: for this order the
    fused run equals the standard one, whatever the update rule.

    Modelling choices, honestly:
    - A contribution reads the parameters its operation read, from the
      live store: PyTorch saves the parameter tensor itself (no copy)
      for the backward, so an in-place update of [p] before a later
      backward node that saved [p] would change that node's result (in
      PyTorch: the version-counter error).  The theorem shows that in
      the backprop order no contribution reads [p] after [p]'s hook, so
      this aliasing is harmless.  Everything else a contribution needs
      (activations, upstream gradients) is a tensor computed in the
      forward/backward, captured in the closure [te_vjp] and not touched
      by the optimizer.
    - The backward of one operation computes all its input gradients
      before any of them is accumulated (autograd runs a node, then the
      [AccumulateGrad] nodes); this is why the hooks of an operation's
      parameters come after all of its contributions.  Without it a hook
      would update [p] before the sibling contribution of the same
      operation reads [p].
    - The autograd engine runs the nodes in some topological order; the
      reverse tape order is one of them.  For a parameter used several
      times autograd sums the incoming gradients and accumulates once;
      here they are accumulated one by one (equal for an associative
      [gadd]; over floats the roundings differ).  *)

From Coq Require Import List Arith Bool.
From Ojas Require Import ScalarOps InBackward.Events InBackward.UpdateRules.
Import ListNotations.

(** ** List lemmas *)

Lemma existsb_app_single : forall {A} (f : A -> bool) l x,
  existsb f (l ++ [x]) = existsb f l || f x.
Proof.
  intros A f l x; rewrite existsb_app; simpl; rewrite orb_false_r; reflexivity.
Qed.

Lemma existsb_hook_split : forall {V G} (q : nat) (l : list (event V G)),
  existsb (is_hook q) l = true -> exists a b, l = a ++ Hook q :: b.
Proof.
  intros V G q l H; apply existsb_exists in H; destruct H as (e & He & Hq).
  destruct e as [r rs f | r]; simpl in Hq; [discriminate|].
  apply Nat.eqb_eq in Hq; subst r; apply in_split; exact He.
Qed.

(** An event after a hook of [x] neither reads nor contributes to [x]. *)
Lemma after_hook_untouched : forall {V G} (evs : list (event V G)) pre e rest x,
  no_contribution_after_hook evs -> no_read_after_hook evs ->
  evs = (pre ++ [e]) ++ rest -> existsb (is_hook x) pre = true ->
  reads_param x e = false /\ contributes_to x e = false.
Proof.
  intros V G evs pre e rest x Hc Hr Hevs Hx.
  destruct (existsb_hook_split x pre Hx) as (a & b & Hab).
  assert (E : evs = a ++ Hook x :: (b ++ e :: rest))
    by (rewrite Hevs, Hab, <- !app_assoc; reflexivity).
  specialize (Hr _ _ _ E); specialize (Hc _ _ _ E).
  rewrite existsb_app in Hr, Hc; simpl in Hr, Hc.
  apply orb_false_elim in Hr as [_ Hr]; apply orb_false_elim in Hc as [_ Hc].
  apply orb_false_elim in Hr as [Hr _]; apply orb_false_elim in Hc as [Hc _].
  split; assumption.
Qed.

(** Where an element of a concatenation is. *)
Lemma app_eq_split : forall {A} (l1 l2 pre post : list A) (x : A),
  l1 ++ l2 = pre ++ x :: post ->
  (exists post', l1 = pre ++ x :: post' /\ post = post' ++ l2) \/
  (exists pre', l2 = pre' ++ x :: post).
Proof.
  intros A l1; induction l1 as [|y l1 IH]; intros l2 pre post x H.
  - right; exists pre; exact H.
  - destruct pre as [|z pre]; simpl in H; injection H as -> H.
    + left; exists l1; split; [reflexivity|symmetry; exact H].
    + destruct (IH _ _ _ _ H) as [(post' & H1 & H2)|(pre' & H1)].
      * left; exists post'; split; [rewrite H1; reflexivity|exact H2].
      * right; exists pre'; exact H1.
Qed.

Lemma fupd_eq : forall {A} (f : nat -> A) p x, fupd f p x p = x.
Proof. intros; unfold fupd; rewrite Nat.eqb_refl; reflexivity. Qed.

Lemma fupd_neq : forall {A} (f : nat -> A) p x q, q <> p -> fupd f p x q = f q.
Proof.
  intros A f p x q H; unfold fupd; destruct (Nat.eqb_spec q p); congruence.
Qed.

Section Equivalence.
Context {V S G : Type}.
Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.

Local Notation event := (Events.event V G).
Local Notation store := (Events.store V S G).

(** The update of one parameter with an optional gradient (none: unchanged). *)
Definition update_opt (q : nat) (v : V) (s : S) (og : option G) : V * S :=
  match og with Some g => update q v s g | None => (v, s) end.

Lemma backward_app_single : forall (P : nat -> V) (evs : list event) e gr,
  backward gadd P (evs ++ [e]) gr = backward_step gadd P (backward gadd P evs gr) e.
Proof. intros; unfold backward; rewrite fold_left_app; reflexivity. Qed.

Lemma fused_run_app_single : forall evs e (st : store),
  fused_run gadd update (evs ++ [e]) st = fused_step gadd update (fused_run gadd update evs st) e.
Proof. intros; unfold fused_run; rewrite fold_left_app; reflexivity. Qed.

Lemma backward_step_other : forall (P : nat -> V) (gr : nat -> option G) (e : event) q,
  contributes_to q e = false -> backward_step gadd P gr e q = gr q.
Proof.
  intros P gr [r rs f|r] q H; simpl in *; [|reflexivity].
  unfold add_grad; apply fupd_neq; intros ->; rewrite Nat.eqb_refl in H; discriminate.
Qed.

(** Without contributions to [q], the backward leaves [q]'s gradient. *)
Lemma backward_other : forall (P : nat -> V) (evs : list event) gr q,
  existsb (contributes_to q) evs = false -> backward gadd P evs gr q = gr q.
Proof.
  intros P evs; induction evs as [|e evs IH] using rev_ind; intros gr q H;
    [reflexivity|].
  rewrite existsb_app_single in H; apply orb_false_elim in H as [H1 H2].
  rewrite backward_app_single, backward_step_other by exact H2; apply IH, H1.
Qed.

(** The fused run after a prefix [pre] of the events: a parameter whose
    hook has run has been updated once with its standard gradient and
    has no gradient; any other is untouched and holds its standard
    gradient so far. *)
Definition fused_inv (st : store) (pre : list event) (q : nat) : Prop :=
  let F := fused_run gadd update pre st in
  let gq := backward gadd (s_param st) pre (s_grad st) q in
  if existsb (is_hook q) pre
  then (s_param F q, s_opt F q) = update_opt q (s_param st q) (s_opt st q) gq
       /\ s_grad F q = None
  else s_param F q = s_param st q /\ s_opt F q = s_opt st q /\ s_grad F q = gq.

Lemma fused_inv_prefix : forall (evs : list event) st,
  no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall pre rest, evs = pre ++ rest -> forall q, fused_inv st pre q.
Proof.
  intros evs st Hc Hr pre; induction pre as [|e pre IH] using rev_ind;
    intros rest Hevs q.
  - unfold fused_inv; simpl; auto.
  - assert (IH' : forall q, fused_inv st pre q)
      by (intros q'; apply (IH (e :: rest)); rewrite Hevs, <- app_assoc; reflexivity).
    assert (Hafter : forall x, existsb (is_hook x) pre = true ->
              reads_param x e = false /\ contributes_to x e = false)
      by (intros x; apply (after_hook_untouched evs pre e rest x Hc Hr Hevs)).
    (* the values read by [e] are the frozen ones *)
    assert (Hreads : forall rs, (forall x, In x rs -> existsb (is_hook x) pre = false) ->
              map (s_param (fused_run gadd update pre st)) rs = map (s_param st) rs).
    { intros rs Hrs; apply map_ext_in; intros x Hx; specialize (Hrs x Hx).
      specialize (IH' x); unfold fused_inv in IH'; rewrite Hrs in IH'; apply IH'. }
    specialize (IH' q) as IHq; unfold fused_inv in IHq |- *.
    rewrite fused_run_app_single, backward_app_single, existsb_app_single.
    set (F := fused_run gadd update pre st) in *.
    set (B := backward gadd (s_param st) pre (s_grad st)) in *.
    destruct (existsb (is_hook q) pre) eqn:Hq; simpl orb.
    + (* [q] hooked before [e]: nothing changes for [q] *)
      destruct (Hafter q Hq) as [_ Hcq].
      rewrite backward_step_other by exact Hcq.
      destruct IHq as [IH1 IH2].
      destruct e as [r rs f|r]; simpl.
      * assert (r <> q) by (intros ->; simpl in Hcq; rewrite Nat.eqb_refl in Hcq; discriminate).
        unfold add_grad; rewrite fupd_neq by congruence; auto.
      * unfold hook_update; destruct (Nat.eq_dec r q) as [->|Hne].
        -- rewrite IH2; auto.
        -- destruct (s_grad F r); simpl; [|auto].
           rewrite !fupd_neq by congruence; auto.
    + destruct IHq as (IH1 & IH2 & IH3).
      destruct e as [r rs f|r]; simpl.
      * (* a contribution: reads frozen values, same gradient *)
        assert (Hrs : forall x, In x rs -> existsb (is_hook x) pre = false).
        { intros x Hx; destruct (existsb (is_hook x) pre) eqn:E; [|reflexivity].
          destruct (Hafter x E) as [Hrx _]; simpl in Hrx.
          assert (existsb (Nat.eqb x) rs = true)
            by (apply existsb_exists; exists x; split; [exact Hx|apply Nat.eqb_refl]).
          congruence. }
        rewrite (Hreads rs Hrs); unfold add_grad, fupd.
        destruct (Nat.eqb q r) eqn:Eqr; [apply Nat.eqb_eq in Eqr; subst r|]; auto.
        rewrite IH3; auto.
      * (* a hook *)
        destruct (Nat.eqb_spec q r) as [<-|Hne]; simpl.
        -- unfold hook_update; rewrite IH3.
           destruct (B q) as [g|]; simpl.
           ++ rewrite !fupd_eq, IH1, IH2.
              destruct (update q (s_param st q) (s_opt st q) g); split; reflexivity.
           ++ split; [rewrite IH1, IH2; reflexivity|exact IH3].
        -- unfold hook_update; destruct (s_grad F r); simpl; [|auto].
           rewrite !fupd_neq by exact Hne; auto.
Qed.

(** Optimizer in backward equals backward then [optimizer.step()], from
    any starting gradients (gradient accumulation), if every parameter
    that has a gradient at the start or receives a contribution is
    hooked, and no contribution to [p] and no read of [p] comes after a
    hook of [p]; the fused run frees every gradient. *)
Theorem fused_eq_standard_from : forall (evs : list event) (st : store),
  (forall q, s_grad st q <> None \/ existsb (contributes_to q) evs = true ->
     existsb (is_hook q) evs = true) ->
  no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q,
    s_param (fused_run gadd update evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (fused_run gadd update evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (fused_run gadd update evs st) q = None.
Proof.
  intros evs st Hh Hc Hr q.
  pose proof (fused_inv_prefix evs st Hc Hr evs [] (eq_sym (app_nil_r evs)) q) as I.
  unfold fused_inv in I; unfold standard_run, optimizer_step, step_param; simpl.
  destruct (existsb (is_hook q) evs) eqn:Eh.
  - destruct I as [I1 I2].
    pose proof (f_equal fst I1) as J1; pose proof (f_equal snd I1) as J2.
    simpl in J1, J2; unfold update_opt in J1, J2; rewrite J1, J2; auto.
  - destruct (existsb (contributes_to q) evs) eqn:Ec;
      [specialize (Hh q (or_intror Ec)); congruence|].
    destruct (s_grad st q) eqn:Eg;
      [assert (Hg : s_grad st q <> None) by (rewrite Eg; discriminate);
       specialize (Hh q (or_introl Hg)); congruence|].
    destruct I as (I1 & I2 & I3).
    rewrite (backward_other (s_param st) evs (s_grad st) q Ec), Eg in I3 |- *; simpl.
    split; [exact I1|split; [exact I2|exact I3]].
Qed.

(** The fused optimizer equals the standard loop (gradients zeroed
    before the backward, set to [None]) when each contributed parameter
    is hooked after all its contributions and nothing reads a parameter
    after its hook; the fused run frees every gradient. *)
Theorem fused_eq_standard : forall (evs : list event) (st : store),
  (forall q, s_grad st q = None) ->
  contributed_hooked evs -> no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q,
    s_param (fused_run gadd update evs st) q = s_param (standard_run gadd update evs st) q /\
    s_opt (fused_run gadd update evs st) q = s_opt (standard_run gadd update evs st) q /\
    s_grad (fused_run gadd update evs st) q = None.
Proof.
  intros evs st H0 Hh Hc Hr q.
  assert (Hh' : forall q, s_grad st q <> None \/ existsb (contributes_to q) evs = true ->
                  existsb (is_hook q) evs = true).
  { intros x [Hx|Hx]; [congruence|apply Hh, Hx]. }
  exact (fused_eq_standard_from evs st Hh' Hc Hr q).
Qed.

End Equivalence.

(** ** Reverse-mode backprop orders *)

(** A forward operation on the tape: the parameters it reads and, for
    each of them, its vector-Jacobian product as a function of their
    values (activations and upstream gradients are in the closure). *)
Record tape_entry (V G : Type) : Type := mk_entry {
  te_reads : list nat;
  te_vjp : nat -> list V -> G
}.
Arguments mk_entry {V G}. Arguments te_reads {V G}. Arguments te_vjp {V G}.

Definition mem (p : nat) (l : list nat) : bool := existsb (Nat.eqb p) l.

(** The backward of an operation: one contribution per parameter it read,
    each reading all the parameters the operation read. *)
Definition entry_contribs {V G} (e : tape_entry V G) : list (event V G) :=
  map (fun p => Contribute p (te_reads e) (te_vjp e p)) (nodup Nat.eq_dec (te_reads e)).

(** The hooks after the backward of an operation: its parameters that no
    earlier operation ([seen]) reads, i.e. whose last contribution this is. *)
Definition entry_hooks {V G} (seen : list nat) (e : tape_entry V G) : list (event V G) :=
  map Hook (filter (fun p => negb (mem p seen)) (nodup Nat.eq_dec (te_reads e))).

(** The backward of a tape (in forward order) whose operations come
    after the operations reading [seen]: the later operations first. *)
Fixpoint bwd {V G} (seen : list nat) (tape : list (tape_entry V G)) : list (event V G) :=
  match tape with
  | [] => []
  | e :: rest => bwd (te_reads e ++ seen) rest ++ entry_contribs e ++ entry_hooks seen e
  end.

(** The event order of [loss.backward()] with post-accumulate-grad hooks. *)
Definition backward_events {V G} (tape : list (tape_entry V G)) : list (event V G) :=
  bwd [] tape.

(** The parameters of the hooks, in order. *)
Fixpoint hooked_params {V G} (evs : list (event V G)) : list nat :=
  match evs with
  | [] => []
  | Hook p :: rest => p :: hooked_params rest
  | Contribute _ _ _ :: rest => hooked_params rest
  end.

Section Backprop.
Context {V S G : Type}.
Local Notation event := (Events.event V G).
Local Notation entry := (tape_entry V G).

Lemma existsb_false_forall : forall {A} (f : A -> bool) l,
  (forall x, In x l -> f x = false) -> existsb f l = false.
Proof.
  intros A f l H; destruct (existsb f l) eqn:E; [|reflexivity].
  apply existsb_exists in E; destruct E as (x & Hx & Hf); rewrite H in Hf; auto.
Qed.

Lemma mem_app : forall p l1 l2, mem p (l1 ++ l2) = mem p l1 || mem p l2.
Proof. intros; unfold mem; apply existsb_app. Qed.

Lemma mem_In : forall p l, mem p l = true <-> In p l.
Proof.
  intros p l; unfold mem; rewrite existsb_exists; split.
  - intros (x & Hx & E); apply Nat.eqb_eq in E; subst; exact Hx.
  - intros H; exists p; split; [exact H|apply Nat.eqb_refl].
Qed.

Lemma entry_contribs_no_hook : forall (e : entry) q,
  existsb (is_hook q) (entry_contribs e) = false.
Proof.
  intros e q; apply existsb_false_forall; intros x Hx.
  unfold entry_contribs in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & _); reflexivity.
Qed.

Lemma entry_hooks_no_read : forall seen (e : entry) q,
  existsb (reads_param q) (entry_hooks seen e) = false.
Proof.
  intros seen e q; apply existsb_false_forall; intros x Hx.
  unfold entry_hooks in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & _); reflexivity.
Qed.

(** The contributions of an operation read what it read. *)
Lemma entry_contribs_reads : forall (e : entry) q,
  existsb (reads_param q) (entry_contribs e) = true -> mem q (te_reads e) = true.
Proof.
  intros e q H; apply existsb_exists in H; destruct H as (x & Hx & Hr).
  unfold entry_contribs in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & _).
  exact Hr.
Qed.

Lemma entry_hooks_hook : forall seen (e : entry) q,
  existsb (is_hook q) (entry_hooks seen e) = true <->
  mem q (te_reads e) = true /\ mem q seen = false.
Proof.
  intros seen e q; unfold entry_hooks; rewrite existsb_exists, mem_In; split.
  - intros (x & Hx & Hh); apply in_map_iff in Hx; destruct Hx as (p & <- & Hp).
    simpl in Hh; apply Nat.eqb_eq in Hh; subst p.
    apply filter_In in Hp; destruct Hp as [Hp Hn]; apply nodup_In in Hp.
    split; [exact Hp|apply negb_true_iff, Hn].
  - intros [H1 H2]; exists (Hook q); split; [|apply Nat.eqb_refl].
    apply in_map, filter_In; split; [apply nodup_In, H1|rewrite H2; reflexivity].
Qed.

Lemma entry_contribs_contrib : forall (e : entry) q,
  existsb (contributes_to q) (entry_contribs e) = true -> mem q (te_reads e) = true.
Proof.
  intros e q H; apply existsb_exists in H; destruct H as (x & Hx & Hc).
  unfold entry_contribs in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & Hp).
  simpl in Hc; apply Nat.eqb_eq in Hc; subst p; apply nodup_In in Hp; apply mem_In; exact Hp.
Qed.

(** A hook in the backward of the later operations is for a parameter
    that the earlier ones do not read. *)
Lemma bwd_hook_fresh : forall (tape : list entry) seen q,
  existsb (is_hook q) (bwd seen tape) = true -> mem q seen = false.
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen q H; [discriminate|].
  simpl in H; rewrite !existsb_app, entry_contribs_no_hook in H; simpl in H.
  apply orb_true_iff in H; destruct H as [H|H].
  - apply IH in H; rewrite mem_app in H; apply orb_false_iff in H; apply H.
  - apply entry_hooks_hook in H; apply H.
Qed.

(** In the backprop order, no event after the hook of [p] reads [p]. *)
Lemma bwd_no_read_after_hook : forall (tape : list entry) seen,
  no_read_after_hook (bwd seen tape).
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen pre q post H.
  - destruct pre; discriminate.
  - simpl in H; destruct (app_eq_split _ _ _ _ _ H) as [(post' & H1 & H2)|(pre' & H1)].
    + (* the hook is in the backward of the later operations *)
      subst post; rewrite existsb_app, (IH _ _ _ _ H1); simpl.
      assert (Hq : existsb (is_hook q) (bwd (te_reads e ++ seen) rest) = true).
      { rewrite H1, existsb_app; simpl; rewrite Nat.eqb_refl, orb_true_r; reflexivity. }
      apply bwd_hook_fresh in Hq; rewrite mem_app in Hq; apply orb_false_iff in Hq.
      rewrite existsb_app, entry_hooks_no_read, orb_false_r.
      destruct (existsb (reads_param q) (entry_contribs e)) eqn:E; [|reflexivity].
      apply entry_contribs_reads in E; destruct Hq as [Hq _]; congruence.
    + (* the hook is among the hooks of [e]: only hooks follow *)
      destruct (app_eq_split _ _ _ _ _ H1) as [(post' & H2 & _)|(pre'' & H2)].
      * assert (E : existsb (is_hook q) (entry_contribs e) = true)
          by (rewrite H2, existsb_app; simpl; rewrite Nat.eqb_refl, orb_true_r; reflexivity).
        rewrite entry_contribs_no_hook in E; discriminate.
      * pose proof (entry_hooks_no_read seen e q) as E; rewrite H2, existsb_app in E.
        simpl in E; apply orb_false_iff in E; apply E.
Qed.

(** Each contribution of the backprop order reads the parameter it is for. *)
Lemma bwd_contrib_reads : forall (tape : list entry) seen x q,
  In x (bwd seen tape) -> contributes_to q x = true -> reads_param q x = true.
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen x q Hx Hc; [destruct Hx|].
  simpl in Hx; apply in_app_or in Hx; destruct Hx as [Hx|Hx]; [eapply IH; eassumption|].
  apply in_app_or in Hx; destruct Hx as [Hx|Hx].
  - unfold entry_contribs in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & Hp).
    simpl in Hc |- *; apply Nat.eqb_eq in Hc; subst p.
    apply mem_In; apply nodup_In in Hp; exact Hp.
  - unfold entry_hooks in Hx; apply in_map_iff in Hx; destruct Hx as (p & <- & _).
    discriminate.
Qed.

(** No read after a hook implies no contribution after it, when every
    contribution reads the parameter it is for. *)
Lemma no_contribution_of_no_read : forall (evs : list event),
  (forall x q, In x evs -> contributes_to q x = true -> reads_param q x = true) ->
  no_read_after_hook evs -> no_contribution_after_hook evs.
Proof.
  intros evs Hcr Hr pre q post H; specialize (Hr _ _ _ H).
  apply existsb_false_forall; intros x Hx.
  destruct (contributes_to q x) eqn:Ec; [|reflexivity].
  assert (Hin : In x evs) by (rewrite H; apply in_or_app; right; right; exact Hx).
  apply (Hcr _ _ Hin) in Ec.
  assert (existsb (reads_param q) post = true)
    by (apply existsb_exists; exists x; split; assumption).
  congruence.
Qed.

(** A parameter that receives a contribution is hooked, here or in the
    backward of the earlier operations ([seen]). *)
Lemma bwd_contributed_hooked : forall (tape : list entry) seen q,
  existsb (contributes_to q) (bwd seen tape) = true ->
  mem q seen = true \/ existsb (is_hook q) (bwd seen tape) = true.
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen q H; [discriminate|].
  simpl in H |- *; rewrite !existsb_app in H |- *.
  (* if [e] reads [q], [q] is seen or hooked after [e] *)
  assert (He : mem q (te_reads e) = true ->
            mem q seen = true \/ existsb (is_hook q) (entry_hooks seen e) = true).
  { intros Hm; destruct (mem q seen) eqn:Es; [left; reflexivity|right].
    apply entry_hooks_hook; split; assumption. }
  apply orb_true_iff in H; destruct H as [H|H].
  - destruct (IH _ _ H) as [Hm|Hm].
    + rewrite mem_app in Hm; apply orb_true_iff in Hm; destruct Hm as [Hm|Hm].
      * destruct (He Hm) as [Hs|Hs]; [left; exact Hs|right].
        rewrite Hs, !orb_true_r; reflexivity.
      * left; exact Hm.
    + right; rewrite Hm; reflexivity.
  - apply orb_true_iff in H; destruct H as [H|H].
    + destruct (He (entry_contribs_contrib e q H)) as [Hs|Hs]; [left; exact Hs|right].
      rewrite Hs, !orb_true_r; reflexivity.
    + assert (existsb (contributes_to q) (entry_hooks seen e) = false).
      { apply existsb_false_forall; intros x Hx; unfold entry_hooks in Hx.
        apply in_map_iff in Hx; destruct Hx as (p & <- & _); reflexivity. }
      congruence.
Qed.

(** The backprop order satisfies the three hypotheses of [fused_eq_standard]. *)
Theorem backward_events_hypotheses : forall (tape : list entry),
  contributed_hooked (backward_events tape) /\
  no_contribution_after_hook (backward_events tape) /\
  no_read_after_hook (backward_events tape).
Proof.
  intros tape; unfold backward_events; split; [|split].
  - intros q H; destruct (bwd_contributed_hooked tape [] q H) as [Hm|Hm];
      [discriminate|exact Hm].
  - apply no_contribution_of_no_read; [apply bwd_contrib_reads|apply bwd_no_read_after_hook].
  - apply bwd_no_read_after_hook.
Qed.

(** ** One hook per parameter *)

Lemma hooked_params_app : forall (l1 l2 : list event),
  hooked_params (l1 ++ l2) = hooked_params l1 ++ hooked_params l2.
Proof.
  intros l1 l2; induction l1 as [|[r rs f|r] l1 IH]; simpl; rewrite ?IH; reflexivity.
Qed.

Lemma hooked_params_contribs : forall (e : entry), hooked_params (entry_contribs e) = [].
Proof.
  intros e; unfold entry_contribs; induction (nodup Nat.eq_dec (te_reads e)); simpl; auto.
Qed.

Lemma hooked_params_hooks : forall seen (e : entry),
  hooked_params (entry_hooks seen e) = filter (fun p => negb (mem p seen)) (nodup Nat.eq_dec (te_reads e)).
Proof.
  intros seen e; unfold entry_hooks; induction (filter _ _); simpl; rewrite ?IHl; reflexivity.
Qed.

Lemma NoDup_app_disjoint : forall (l1 l2 : list nat),
  NoDup l1 -> NoDup l2 -> (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  intros l1; induction l1 as [|a l1 IH]; intros l2 H1 H2 Hd; simpl; [exact H2|].
  apply NoDup_cons_iff in H1; destruct H1 as [Ha H1]; constructor.
  - intros Hin; apply in_app_or in Hin; destruct Hin as [Hin|Hin]; [contradiction|].
    apply (Hd a); [left; reflexivity|exact Hin].
  - apply IH; auto; intros x Hx; apply Hd; right; exact Hx.
Qed.

Lemma bwd_hooked_In : forall (tape : list entry) seen q,
  In q (hooked_params (bwd seen tape)) <->
  (exists e, In e tape /\ In q (te_reads e)) /\ ~ In q seen.
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen q; simpl.
  - split; [intros []|intros ((e & [] & _) & _)].
  - rewrite !hooked_params_app, hooked_params_contribs, hooked_params_hooks; simpl.
    rewrite in_app_iff, IH, filter_In, nodup_In, negb_true_iff.
    assert (Hs : mem q seen = false <-> ~ In q seen).
    { rewrite <- mem_In; destruct (mem q seen); split; congruence. }
    rewrite Hs, in_app_iff; split.
    + intros [((e' & He' & Hq) & Hn)|(Hq & Hn)].
      * split; [exists e'; split; [right; exact He'|exact Hq]|tauto].
      * split; [exists e; split; [left; reflexivity|exact Hq]|exact Hn].
    + intros ((e' & [<-|He'] & Hq) & Hn); [right; split; assumption|].
      destruct (in_dec Nat.eq_dec q (te_reads e)) as [Hr|Hr]; [right; split; assumption|].
      left; split; [exists e'; split; assumption|tauto].
Qed.

Lemma bwd_hooked_NoDup : forall (tape : list entry) seen, NoDup (hooked_params (bwd seen tape)).
Proof.
  intros tape; induction tape as [|e rest IH]; intros seen; simpl; [constructor|].
  rewrite !hooked_params_app, hooked_params_contribs, hooked_params_hooks; simpl.
  apply NoDup_app_disjoint; [apply IH|apply NoDup_filter, NoDup_nodup|].
  intros x Hx Hy; apply bwd_hooked_In in Hx; destruct Hx as [_ Hx].
  apply filter_In in Hy; destruct Hy as [Hy _]; apply nodup_In in Hy.
  apply Hx, in_or_app; left; exact Hy.
Qed.

(** In the backprop order every parameter that the tape reads is hooked
    exactly once (tied weights included), and no other parameter is. *)
Theorem backward_events_hook_once : forall (tape : list entry),
  NoDup (hooked_params (backward_events tape)) /\
  (forall q, In q (hooked_params (backward_events tape)) <->
             exists e, In e tape /\ In q (te_reads e)).
Proof.
  intros tape; split; [apply bwd_hooked_NoDup|].
  intros q; unfold backward_events; rewrite bwd_hooked_In; simpl; tauto.
Qed.

Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.

(** Updating each parameter in its post-accumulate-grad hook during
    [loss.backward()] gives the same parameters and optimizer states as
    [loss.backward(); optimizer.step()], and frees every gradient. *)
Theorem backprop_fused_eq_standard : forall (tape : list entry) (st : Events.store V S G),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (fused_run gadd update (backward_events tape) st) q =
      s_param (standard_run gadd update (backward_events tape) st) q /\
    s_opt (fused_run gadd update (backward_events tape) st) q =
      s_opt (standard_run gadd update (backward_events tape) st) q /\
    s_grad (fused_run gadd update (backward_events tape) st) q = None.
Proof.
  intros tape st H0; destruct (backward_events_hypotheses tape) as (H1 & H2 & H3).
  apply fused_eq_standard; assumption.
Qed.

End Backprop.

(** ** SGD and AdamW *)

(** The equivalence holds over any scalars (float instance included):
    the fused run performs the same operations on the same values. *)
Section Instances.
Context {T : Type} (o : OptOps T).

(** SGD (per-parameter configurations [cfg], as with parameter groups)
    updated in the post-accumulate-grad hooks of [loss.backward()] gives
    the parameters and momentum buffers of backward then [SGD.step()]. *)
Theorem sgd_fused_eq_standard :
  forall (cfg : nat -> sgd_config T) (tape : list (tape_entry T T))
         (st : Events.store T (option T) T),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (fused_run (sc_add (oo_sc o)) (fun q => sgd_update o (cfg q))
               (backward_events tape) st) q =
    s_param (standard_run (sc_add (oo_sc o)) (fun q => sgd_update o (cfg q))
               (backward_events tape) st) q /\
    s_opt (fused_run (sc_add (oo_sc o)) (fun q => sgd_update o (cfg q))
             (backward_events tape) st) q =
    s_opt (standard_run (sc_add (oo_sc o)) (fun q => sgd_update o (cfg q))
             (backward_events tape) st) q /\
    s_grad (fused_run (sc_add (oo_sc o)) (fun q => sgd_update o (cfg q))
              (backward_events tape) st) q = None.
Proof. intros cfg tape st H0; apply backprop_fused_eq_standard, H0. Qed.

(** AdamW updated in the post-accumulate-grad hooks of [loss.backward()]
    gives the parameters and (step, m, v) states of backward then
    [AdamW.step()]. *)
Theorem adamw_fused_eq_standard :
  forall (cfg : nat -> adamw_config T) (tape : list (tape_entry T T))
         (st : Events.store T (adam_state T) T),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (fused_run (sc_add (oo_sc o)) (fun q => adamw_update o (cfg q))
               (backward_events tape) st) q =
    s_param (standard_run (sc_add (oo_sc o)) (fun q => adamw_update o (cfg q))
               (backward_events tape) st) q /\
    s_opt (fused_run (sc_add (oo_sc o)) (fun q => adamw_update o (cfg q))
             (backward_events tape) st) q =
    s_opt (standard_run (sc_add (oo_sc o)) (fun q => adamw_update o (cfg q))
             (backward_events tape) st) q /\
    s_grad (fused_run (sc_add (oo_sc o)) (fun q => adamw_update o (cfg q))
              (backward_events tape) st) q = None.
Proof. intros cfg tape st H0; apply backprop_fused_eq_standard, H0. Qed.

End Instances.
