(** * Grouped-query attention: the kernels' head map is attention on repeated K/V heads.

    The code runs grouped-query attention (GQA: [Hkv] key/value heads
    dividing [Hq] query heads, [G = Hq / Hkv] query heads per group)
    without repeating K and V in memory: query head [h] reads key/value head
    [h / G] ([kv_head]).  That is [_grouped] in
    ojas_ref/functional/_attention_reference.py (query head [h = hkv * G + g] of the
    view [B, Hkv, G, Sq, E]), and [hk = h // group] in the Triton kernels
    [_fwd_kernel] and [_bwd_dq_kernel] of kernels/ojas_kernels/attention_forward.py and kernels/ojas_kernels/attention_backward.py.  The
    backward kernel [_bwd_dkdv_kernel] computes [dK], [dV] of key/value head
    [hk] in one accumulator, looping over the query heads
    [h = hk * G + g] for [g = 0 .. G-1] (outer loop) and, in each, over the
    query tiles (inner loop); the reference sums the same terms in one
    matrix product over the [G * tq] rows of a tile.

    Over [R], on top of the one-head definitions of
    [Attention/OnlineSoftmax.v] and [Attention/Backward.v] (not redefined
    here):

    - [gqa_forward_repeat_kv] (any [ScalarOps]): the forward pass with the
      index map [h / G] is, head by head, [attention_forward] on K/V with
      every key/value head repeated [G] times ([repeat_kv], what
      [torch.repeat_interleave(G, dim=head)] gives, i.e. SDPA's
      [enable_gqa]); [gqa_forward_correct]: it is the two-pass softmax of
      those heads, row by row;
    - [gqa_loss_repeat_kv]: the loss [sum_h sum_i dO_hi . o_hi] of the code
      is the multi-head loss on the repeated heads, so the gradients below
      are the chain rule through the repetition;
    - [gqa_dK_is_derive], [gqa_dV_is_derive]: the derivative of that loss
      in a coordinate of a key (value) row of key/value head [hk] is the
      sum, accumulated left to right over [g = 0 .. G-1] ([fold_left
      Rplus], from 0), of the [dK] ([dV]) entry of [attention_backward]
      for query head [hk * G + g] (fed with the streamed forward's out and
      lse, as the kernels are).  That is the order of the kernel's outer
      loop; over [R] any order gives the same sum, and the inner sums over
      query tiles are [attention_backward_query_tiles] (the kernel applies
      [scale] once at the end, [attention_backward] per head: equal over
      [R] by distributivity);
    - [gqa_dQ_is_derive]: the derivative in a query coordinate of head [h]
      is that head's [dQ] entry, with key/value head [h / G];
    - [gqa_backward] (any [ScalarOps], extracted: the oracle's GQA
      gradients, no repeated heads): [dQ] per query head and [dK], [dV] per
      key/value head, the group's sums accumulated in the kernel's order
      ([heads_sum]); [gqa_backward_dK], [gqa_backward_dV],
      [gqa_backward_dQ]: over [R] its entries are the entries of the three
      theorems above, so it returns the derivatives of the loss.

    Not covered: rounding (the kernels accumulate the [G] heads' terms in
    float32, in the order above; no theorem bounds that error).  Vectors
    are compared coordinate by coordinate; lemmas local to this file are
    prefixed [gq_]. *)

From Coq Require Import Reals List Lra Lia Arith.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.StreamCorrect Attention.BackwardCorrect.
Import ListNotations.
Open Scope R_scope.

(** ** The head map and the repetition *)

(** The key/value head that query head [h] reads, with [G] query heads per group. *)
Definition kv_head (G h : nat) : nat := (h / G)%nat.

(** Every head repeated [G] times in place: [repeat_interleave(G, dim=head)]. *)
Definition repeat_kv {A} (G : nat) (xs : list A) : list A :=
  flat_map (fun x => repeat x G) xs.

Lemma length_repeat_kv : forall {A} G (xs : list A), length (repeat_kv G xs) = (length xs * G)%nat.
Proof.
  intros A G xs; induction xs as [|x xs IH]; [reflexivity|].
  unfold repeat_kv in *; cbn [flat_map]; rewrite app_length, repeat_length, IH; simpl; lia.
Qed.

(** Head [h] of the repeated heads is head [h / G]: the kernels' index map. *)
Theorem nth_repeat_kv : forall {A} G (xs : list A) h dflt, (0 < G)%nat ->
  nth h (repeat_kv G xs) dflt = nth (kv_head G h) xs dflt.
Proof.
  intros A G xs; unfold kv_head; induction xs as [|x xs IH]; intros h dflt HG.
  - rewrite !nth_overflow by (simpl; lia); reflexivity.
  - unfold repeat_kv; cbn [flat_map]; fold (repeat_kv G xs).
    destruct (Nat.lt_ge_cases h G) as [Hh|Hh].
    + rewrite app_nth1 by (rewrite repeat_length; exact Hh).
      rewrite Nat.div_small by exact Hh.
      rewrite (nth_indep _ dflt x) by (rewrite repeat_length; exact Hh).
      apply nth_repeat.
    + rewrite app_nth2 by (rewrite repeat_length; exact Hh).
      rewrite repeat_length, IH by exact HG.
      replace h with ((h - G) + 1 * G)%nat at 2 by lia.
      rewrite Nat.div_add by lia; rewrite Nat.add_1_r; reflexivity.
Qed.

Section Heads.
Context {T : Type} (o : ScalarOps T).

(** Query heads [qh], key/value heads [kh], [vh]; visibility per query head
    [vis h i j] (a mask broadcast over the heads ignores [h]). *)

(** The forward pass the code runs: query head [h] with key/value head [h / G]. *)
Definition gqa_forward (b d G : nat) (scale : T) (vis : nat -> nat -> nat -> bool)
    (qh kh vh : list (list (list T))) : list (list (list T * option T)) :=
  map (fun '(h, qs) => attention_forward o b d scale (vis h) qs
                         (nth (kv_head G h) kh []) (nth (kv_head G h) vh []))
      (combine (seq 0 (length qh)) qh).

(** Multi-head attention, query head [h] with key/value head [h]. *)
Definition mha_forward (b d : nat) (scale : T) (vis : nat -> nat -> nat -> bool)
    (qh kh vh : list (list (list T))) : list (list (list T * option T)) :=
  map (fun '(h, qs) => attention_forward o b d scale (vis h) qs (nth h kh []) (nth h vh []))
      (combine (seq 0 (length qh)) qh).

(** The same heads by the two-pass specification. *)
Definition mha_two_pass (d : nat) (scale : T) (vis : nat -> nat -> nat -> bool)
    (qh kh vh : list (list (list T))) : list (list (list T * option T)) :=
  map (fun '(h, qs) => attention_two_pass o d scale (vis h) qs (nth h kh []) (nth h vh []))
      (combine (seq 0 (length qh)) qh).

(** (a) The kernels' head map is multi-head attention on the repeated K/V
    heads, exactly, for every head (any scalar operations: floats too). *)
Theorem gqa_forward_repeat_kv : forall b d G scale vis qh kh vh, (0 < G)%nat ->
  gqa_forward b d G scale vis qh kh vh = mha_forward b d scale vis qh (repeat_kv G kh) (repeat_kv G vh).
Proof.
  intros b d G scale vis qh kh vh HG; unfold gqa_forward, mha_forward.
  apply map_ext; intros [h qs]; rewrite !nth_repeat_kv by exact HG; reflexivity.
Qed.

End Heads.

(** Over [R], every head of the GQA forward pass is, row by row, the
    two-pass softmax of the repeated heads (any tile size). *)
Theorem gqa_forward_correct : forall b d G scale vis qh kh vh, (0 < G)%nat ->
  Forall2 (Forall2 row_eq) (gqa_forward R_ops b d G scale vis qh kh vh)
          (mha_two_pass R_ops d scale vis qh (repeat_kv G kh) (repeat_kv G vh)).
Proof.
  intros b d G scale vis qh kh vh HG; rewrite gqa_forward_repeat_kv by exact HG.
  unfold mha_forward, mha_two_pass; apply Forall2_map_same; intros [h qs] _.
  apply attention_forward_correct.
Qed.

(** ** The loss and the per-head backward pass *)

(** [sum_h sum_i dO_hi . o_hi] over the query heads, query head [h] with
    key/value head [h / G] ([o] the two-pass output; the streamed one is
    equal, [attention_forward_correct]). *)
Definition gqa_loss (d G : nat) (scale : R) (vis : nat -> nat -> nat -> bool)
    (qh kh vh dOh : list (list (list R))) : R :=
  rsum (map (fun h => attention_loss d scale (vis h) (nth h qh [])
                        (nth (kv_head G h) kh []) (nth (kv_head G h) vh []) (nth h dOh []))
            (seq 0 (length qh))).

(** The same loss for multi-head attention (query head [h], key/value head [h]). *)
Definition mha_loss (d : nat) (scale : R) (vis : nat -> nat -> nat -> bool)
    (qh kh vh dOh : list (list (list R))) : R :=
  rsum (map (fun h => attention_loss d scale (vis h) (nth h qh []) (nth h kh []) (nth h vh [])
                        (nth h dOh []))
            (seq 0 (length qh))).

(** The loss of the code is the multi-head loss on the repeated K/V heads. *)
Theorem gqa_loss_repeat_kv : forall d G scale vis qh kh vh dOh, (0 < G)%nat ->
  gqa_loss d G scale vis qh kh vh dOh = mha_loss d scale vis qh (repeat_kv G kh) (repeat_kv G vh) dOh.
Proof.
  intros d G scale vis qh kh vh dOh HG; unfold gqa_loss, mha_loss.
  apply rsum_map_ext; intros h _; rewrite !nth_repeat_kv by exact HG; reflexivity.
Qed.

(** [gqa_head_backward_ops o]: [attention_backward] for query head [h] (with
    key/value head [h / G]), fed with the out and lse of the streamed forward
    pass (tiles of [b] keys), as the kernels and the reference are: [(dQ, dK,
    dV)] of that head, in any scalar operations (the oracle's floats);
    [gqa_head_backward] is its instance over [R]. *)
Definition gqa_head_backward_ops {T} (o : ScalarOps T) (b d G : nat) (scale : T)
    (vis : nat -> nat -> nat -> bool) (qh kh vh dOh : list (list (list T))) (h : nat)
    : list (list T) * list (list T) * list (list T) :=
  let qs := nth h qh [] in
  let ks := nth (kv_head G h) kh [] in
  let vs := nth (kv_head G h) vh [] in
  let fw := attention_forward o b d scale (vis h) qs ks vs in
  attention_backward o scale (vis h) qs ks vs (map fst fw) (map snd fw) (nth h dOh []).

Definition gqa_head_backward (b d G : nat) (scale : R) (vis : nat -> nat -> nat -> bool)
    (qh kh vh dOh : list (list (list R))) (h : nat)
    : list (list R) * list (list R) * list (list R) :=
  gqa_head_backward_ops R_ops b d G scale vis qh kh vh dOh h.

Lemma gq_head_backward_two_pass : forall b d G scale vis qh kh vh dOh h,
  let qs := nth h qh [] in
  let ks := nth (kv_head G h) kh [] in
  let vs := nth (kv_head G h) vh [] in
  let tp := attention_two_pass R_ops d scale (vis h) qs ks vs in
  gqa_head_backward b d G scale vis qh kh vh dOh h =
  attention_backward R_ops scale (vis h) qs ks vs (map fst tp) (map snd tp) (nth h dOh []).
Proof. intros; unfold gqa_head_backward, gqa_head_backward_ops; apply attention_backward_forward_eq. Qed.

(** ** Sums over the query heads, group by group *)

Lemma gq_map_seq_offset : forall {A} (F : nat -> A) s m,
  map F (seq s m) = map (fun g => F (s + g)%nat) (seq 0 m).
Proof.
  intros A F s; revert F; induction s as [|s IH]; intros F m; [reflexivity|].
  rewrite bw_map_seq_shift, IH; reflexivity.
Qed.

(** The heads [0 .. n*G-1] are the groups [hk = 0 .. n-1] of heads [hk*G + g]. *)
Lemma gq_rsum_blocks : forall G n (F : nat -> R),
  rsum (map F (seq 0 (n * G))) =
  rsum (map (fun hk => rsum (map (fun g => F (hk * G + g)%nat) (seq 0 G))) (seq 0 n)).
Proof.
  intros G n F; induction n as [|n IH]; [reflexivity|].
  replace (S n * G)%nat with (n * G + G)%nat by lia.
  rewrite seq_app, map_app, rsum_app, IH, seq_S, map_app, rsum_app.
  cbn [map]; rewrite rsum_cons, rsum_nil, (gq_map_seq_offset F (0 + n * G)%nat G), Rplus_0_r.
  reflexivity.
Qed.

Lemma gq_div_group : forall G hk g, (g < G)%nat -> ((hk * G + g) / G)%nat = hk.
Proof.
  intros G hk g Hg; rewrite Nat.div_add_l by lia; rewrite Nat.div_small by exact Hg; lia.
Qed.

(** The loss terms of the query heads outside group [hk] are constant in
    a parameter of key/value head [hk]; those inside have derivatives [f h]:
    the loss has derivative [sum_g f (hk*G + g)]. *)
Lemma gq_is_derive_group : forall G n hk (F : nat -> R -> R) (f : nat -> R) x0,
  (0 < G)%nat -> (hk < n)%nat ->
  (forall h, (h < n * G)%nat -> kv_head G h = hk -> is_derive (F h) x0 (f h)) ->
  (forall h, (h < n * G)%nat -> kv_head G h <> hk -> forall x, F h x = F h x0) ->
  is_derive (fun x => rsum (map (fun h => F h x) (seq 0 (n * G)))) x0
            (rsum (map (fun g => f (hk * G + g)%nat) (seq 0 G))).
Proof.
  intros G n hk F f x0 HG Hhk Hin Hout.
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (n * G)) F
             (fun h => if Nat.eqb (kv_head G h) hk then f h else 0)).
    intros h Hh; apply in_seq in Hh.
    destruct (Nat.eqb_spec (kv_head G h) hk) as [E|E]; [apply Hin; auto; lia|].
    apply (is_derive_ext (fun _ => F h x0)); [intros x; symmetry; apply Hout; auto; lia|].
    apply bw_is_derive_const. }
  rewrite gq_rsum_blocks.
  rewrite (rsum_map_ext _ (fun hk' => if Nat.eqb hk' hk
                                      then rsum (map (fun g => f (hk' * G + g)%nat) (seq 0 G)) else 0)).
  2:{ intros hk' _; rewrite (rsum_map_ext _ (fun g => if Nat.eqb hk' hk then f (hk' * G + g)%nat else 0)).
      2:{ intros g Hg; apply in_seq in Hg; unfold kv_head; rewrite gq_div_group by lia; reflexivity. }
      destruct (Nat.eqb hk' hk); [reflexivity|]; apply rsum_map_zero; reflexivity. }
  rewrite (rsum_pick_seq (fun hk' => rsum (map (fun g => f (hk' * G + g)%nat) (seq 0 G))))
    by lia; reflexivity.
Qed.

Lemma gq_kv_head_lt : forall G n h, (0 < G)%nat -> (h < n * G)%nat -> (kv_head G h < n)%nat.
Proof. intros G n h HG Hh; unfold kv_head; apply Nat.div_lt_upper_bound; lia. Qed.

(** ** The whole backward pass, as the oracle runs it *)

(** The entrywise sum of the matrices [ms], shaped like [shape] (row [j]
    has the length of row [j] of [shape]); entry [(j, c)] accumulated left
    to right from 0, in the order of [ms]. *)
Definition heads_sum {T} (o : ScalarOps T) (shape : list (list T)) (ms : list (list (list T)))
    : list (list T) :=
  map (fun '(j, row) => map (fun c => fold_left (sc_add o) (map (fun m => nth c (nth j m []) (sc_zero o)) ms)
                                        (sc_zero o))
                            (seq 0 (length row)))
      (combine (seq 0 (length shape)) shape).

(** The backward pass of grouped-query attention without repeated heads:
    [dQ] of every query head, and [dK], [dV] of every key/value head [hk],
    the sums of the per-head [dK], [dV] of its query heads [hk * G + g],
    [g = 0 .. G-1] in that order (the kernel's outer loop), shaped like
    that head's keys and values. *)
Definition gqa_backward {T} (o : ScalarOps T) (b d G : nat) (scale : T) (vis : nat -> nat -> nat -> bool)
    (qh kh vh dOh : list (list (list T)))
    : list (list (list T)) * list (list (list T)) * list (list (list T)) :=
  let hb := map (gqa_head_backward_ops o b d G scale vis qh kh vh dOh) (seq 0 (length qh)) in
  let group (sel : list (list T) * list (list T) * list (list T) -> list (list T)) hk shape :=
    heads_sum o shape (map (fun g => sel (nth (hk * G + g) hb ([], [], []))) (seq 0 G)) in
  (map (fun x => fst (fst x)) hb,
   map (fun '(hk, ks) => group (fun x => snd (fst x)) hk ks) (combine (seq 0 (length kh)) kh),
   map (fun '(hk, vs) => group snd hk vs) (combine (seq 0 (length vh)) vh)).

(** ** The gradients *)

Section Grad.
Variables (b d G : nat) (scale : R) (vis : nat -> nat -> nat -> bool)
  (qh kh vh dOh : list (list (list R))).
Hypothesis HG : (0 < G)%nat.
(** [Hq = Hkv * G], as the code checks. *)
Hypothesis Hheads : length qh = (length kh * G)%nat.
Hypothesis HdO : forall h, (h < length qh)%nat -> length (nth h dOh []) = length (nth h qh []).
Hypothesis Hkv : length vh = length kh.
Hypothesis Hvs : forall hk, (hk < length kh)%nat -> length (nth hk vh []) = length (nth hk kh []).

Let HB h := gqa_head_backward b d G scale vis qh kh vh dOh h.

(** The loss as a function of a parameter [x] of key/value head [hk]
    alone ([KX x], [VX x] equal [kh], [vh] on the other heads). *)
Lemma gq_is_derive_kv : forall (KX VX : R -> list (list (list R))) hk x0 (f : nat -> R),
  (hk < length kh)%nat ->
  (forall x h, kv_head G h <> hk ->
     nth (kv_head G h) (KX x) [] = nth (kv_head G h) kh [] /\
     nth (kv_head G h) (VX x) [] = nth (kv_head G h) vh []) ->
  (forall h, (h < length qh)%nat -> kv_head G h = hk ->
     is_derive (fun x => attention_loss d scale (vis h) (nth h qh []) (nth hk (KX x) [])
                           (nth hk (VX x) []) (nth h dOh [])) x0 (f h)) ->
  is_derive (fun x => gqa_loss d G scale vis qh (KX x) (VX x) dOh) x0
            (rsum (map (fun g => f (hk * G + g)%nat) (seq 0 G))).
Proof.
  intros KX VX hk x0 f Hhk Hout Hin; unfold gqa_loss; rewrite Hheads.
  apply (gq_is_derive_group G (length kh) hk); [exact HG | exact Hhk | intros h Hh E | intros h Hh E x].
  - rewrite E; apply Hin; [lia | exact E].
  - destruct (Hout x h E) as [-> ->]; destruct (Hout x0 h E) as [-> ->]; reflexivity.
Qed.

(** (b) Keys: coordinate [c] of key row [j] of key/value head [hk]: the
    derivative of the loss is the sum over the query heads [hk*G + g] of
    the group of their [dK_j] coordinate [c], accumulated as the kernel
    does: from 0, adding [g = 0], then [g = 1], ... ([fold_left]; over [R]
    it is the sum in any order, [fold_left_Rplus]). *)
Theorem gqa_dK_is_derive : forall hk j c,
  (hk < length kh)%nat -> (j < length (nth hk kh []))%nat ->
  (c < length (nth j (nth hk kh []) []))%nat ->
  is_derive
    (fun x : R => gqa_loss d G scale vis qh
       (replace_nth hk (replace_nth j (replace_nth c x (nth j (nth hk kh []) [])) (nth hk kh [])) kh)
       vh dOh)
    (nth c (nth j (nth hk kh []) []) 0)
    (fold_left Rplus (map (fun g => nth c (nth j (snd (fst (HB (hk * G + g)%nat))) []) 0) (seq 0 G)) 0).
Proof.
  intros hk j c Hhk Hj Hc; rewrite fold_left_Rplus, Rplus_0_l.
  apply (gq_is_derive_kv (fun x => replace_nth hk (replace_nth j (replace_nth c x (nth j (nth hk kh []) []))
      (nth hk kh [])) kh) (fun _ => vh) hk _ (fun h => nth c (nth j (snd (fst (HB h))) []) 0));
    [exact Hhk | intros x h E | intros h Hh E].
  - rewrite nth_replace_nth by exact Hhk; apply Nat.eqb_neq in E; rewrite E; split; reflexivity.
  - apply (is_derive_ext (fun x => attention_loss d scale (vis h) (nth h qh [])
             (replace_nth j (replace_nth c x (nth j (nth hk kh []) [])) (nth hk kh []))
             (nth hk vh []) (nth h dOh [])));
      [intros x; rewrite nth_replace_nth, Nat.eqb_refl by exact Hhk; reflexivity|].
    unfold HB; rewrite gq_head_backward_two_pass; cbv zeta; rewrite E.
    apply attention_backward_dK_is_derive; auto; apply HdO; exact Hh.
Qed.

(** (b) Values: coordinate [c] of value row [j] of key/value head [hk]:
    the sum over the query heads of the group of their [dV_j], in the
    kernel's order as for [dK]. *)
Theorem gqa_dV_is_derive : forall hk j c,
  (hk < length kh)%nat -> (j < length (nth hk kh []))%nat ->
  (c < length (nth j (nth hk vh []) []))%nat ->
  is_derive
    (fun y : R => gqa_loss d G scale vis qh kh
       (replace_nth hk (replace_nth j (replace_nth c y (nth j (nth hk vh []) [])) (nth hk vh [])) vh)
       dOh)
    (nth c (nth j (nth hk vh []) []) 0)
    (fold_left Rplus (map (fun g => nth c (nth j (snd (HB (hk * G + g)%nat)) []) 0) (seq 0 G)) 0).
Proof.
  intros hk j c Hhk Hj Hc; rewrite fold_left_Rplus, Rplus_0_l.
  assert (Hhv : (hk < length vh)%nat) by (rewrite Hkv; exact Hhk).
  apply (gq_is_derive_kv (fun _ => kh) (fun y => replace_nth hk (replace_nth j (replace_nth c y
      (nth j (nth hk vh []) [])) (nth hk vh [])) vh) hk _ (fun h => nth c (nth j (snd (HB h)) []) 0));
    [exact Hhk | intros y h E | intros h Hh E].
  - rewrite nth_replace_nth by exact Hhv; apply Nat.eqb_neq in E; rewrite E; split; reflexivity.
  - apply (is_derive_ext (fun y => attention_loss d scale (vis h) (nth h qh []) (nth hk kh [])
      (replace_nth j (replace_nth c y (nth j (nth hk vh []) [])) (nth hk vh [])) (nth h dOh [])));
      [intros y; rewrite nth_replace_nth, Nat.eqb_refl by exact Hhv; reflexivity|].
    unfold HB; rewrite gq_head_backward_two_pass; cbv zeta; rewrite E.
    apply attention_backward_dV_is_derive; auto; apply HdO; exact Hh.
Qed.

(** Queries: coordinate [c] of query row [i] of head [h]: that head's [dQ_i]
    (key/value head [h / G]); no other head depends on it. *)
Theorem gqa_dQ_is_derive : forall h i c,
  (h < length qh)%nat -> (i < length (nth h qh []))%nat ->
  (c < length (nth i (nth h qh []) []))%nat ->
  is_derive
    (fun x : R => gqa_loss d G scale vis
       (replace_nth h (replace_nth i (replace_nth c x (nth i (nth h qh []) [])) (nth h qh [])) qh)
       kh vh dOh)
    (nth c (nth i (nth h qh []) []) 0)
    (nth c (nth i (fst (fst (HB h))) []) 0).
Proof.
  intros h i c Hh Hi Hc.
  set (qx := fun x => replace_nth h (replace_nth i (replace_nth c x (nth i (nth h qh []) [])) (nth h qh [])) qh).
  apply (is_derive_ext (fun x => rsum (map (fun h' => attention_loss d scale (vis h') (nth h' (qx x) [])
     (nth (kv_head G h') kh []) (nth (kv_head G h') vh []) (nth h' dOh [])) (seq 0 (length qh))))).
  { intros x; unfold gqa_loss, qx; rewrite length_replace_nth; reflexivity. }
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (length qh)) _
             (fun h' => if Nat.eqb h' h then nth c (nth i (fst (fst (HB h))) []) 0 else 0)).
    intros h' Hh'; apply in_seq in Hh'.
    destruct (Nat.eqb_spec h' h) as [->|E].
    - apply (is_derive_ext (fun x => attention_loss d scale (vis h)
               (replace_nth i (replace_nth c x (nth i (nth h qh []) [])) (nth h qh []))
               (nth (kv_head G h) kh []) (nth (kv_head G h) vh []) (nth h dOh []))).
      { intros x; unfold qx; rewrite nth_replace_nth, Nat.eqb_refl by exact Hh; reflexivity. }
      unfold HB; rewrite gq_head_backward_two_pass; cbv zeta.
      apply attention_backward_dQ_is_derive; auto.
      apply Hvs, gq_kv_head_lt; [exact HG | lia].
    - apply (is_derive_ext (fun _ => attention_loss d scale (vis h') (nth h' qh [])
               (nth (kv_head G h') kh []) (nth (kv_head G h') vh []) (nth h' dOh []))).
      { intros x; unfold qx; rewrite nth_replace_nth by exact Hh.
        apply Nat.eqb_neq in E; rewrite E; reflexivity. }
      apply bw_is_derive_const. }
  apply (rsum_pick_seq (fun _ => nth c (nth i (fst (fst (HB h))) []) 0)); lia.
Qed.

(** The whole backward pass: its entries are the derivatives of the
    theorems above ([gqa_backward_dK] with [gqa_dK_is_derive], [gqa_backward_dV]
    with [gqa_dV_is_derive], [gqa_backward_dQ] with [gqa_dQ_is_derive]), so
    that [gqa_backward] (extracted: the oracle's GQA gradients) returns the
    derivatives of the loss. *)
Let GB := gqa_backward R_ops b d G scale vis qh kh vh dOh.

Lemma gq_group_entry : forall (sel : list (list R) * list (list R) * list (list R) -> list (list R))
    hk (shape : list (list R)) j c,
  (hk < length kh)%nat -> (j < length shape)%nat -> (c < length (nth j shape []))%nat ->
  nth c (nth j (heads_sum R_ops shape
    (map (fun g => sel (nth (hk * G + g) (map (gqa_head_backward_ops R_ops b d G scale vis qh kh vh dOh)
                                               (seq 0 (length qh))) ([], [], []))) (seq 0 G))) []) 0
  = fold_left Rplus (map (fun g => nth c (nth j (sel (HB (hk * G + g)%nat)) []) 0) (seq 0 G)) 0.
Proof.
  intros sel hk shape j c Hhk Hj Hc; unfold heads_sum.
  rewrite (bw_nth_indexed _ _ _ _ []) by exact Hj.
  rewrite (bw_nth_map_lt _ _ _ _ 0%nat) by (rewrite seq_length; exact Hc).
  rewrite seq_nth by exact Hc; cbn [sc_add sc_zero R_ops]; rewrite map_map.
  f_equal; apply map_ext_in; intros g Hg; apply in_seq in Hg.
  rewrite (bw_nth_map_lt _ _ _ _ 0%nat) by (rewrite seq_length, Hheads; nia).
  rewrite seq_nth by (rewrite Hheads; nia); reflexivity.
Qed.

Theorem gqa_backward_dK : forall hk j c,
  (hk < length kh)%nat -> (j < length (nth hk kh []))%nat -> (c < length (nth j (nth hk kh []) []))%nat ->
  nth c (nth j (nth hk (snd (fst GB)) []) []) 0
  = fold_left Rplus (map (fun g => nth c (nth j (snd (fst (HB (hk * G + g)%nat))) []) 0) (seq 0 G)) 0.
Proof.
  intros hk j c Hhk Hj Hc; unfold GB, gqa_backward; cbn zeta; cbn [fst snd].
  rewrite (bw_nth_indexed _ _ _ _ []) by exact Hhk.
  apply (gq_group_entry (fun x => snd (fst x))); assumption.
Qed.

Theorem gqa_backward_dV : forall hk j c,
  (hk < length kh)%nat -> (j < length (nth hk vh []))%nat -> (c < length (nth j (nth hk vh []) []))%nat ->
  nth c (nth j (nth hk (snd GB) []) []) 0
  = fold_left Rplus (map (fun g => nth c (nth j (snd (HB (hk * G + g)%nat)) []) 0) (seq 0 G)) 0.
Proof.
  intros hk j c Hhk Hj Hc; unfold GB, gqa_backward; cbn zeta; cbn [fst snd].
  rewrite (bw_nth_indexed _ _ _ _ []) by (rewrite Hkv; exact Hhk).
  apply (gq_group_entry snd); assumption.
Qed.

Theorem gqa_backward_dQ : forall h, (h < length qh)%nat ->
  nth h (fst (fst GB)) [] = fst (fst (HB h)).
Proof.
  intros h Hh; unfold GB, gqa_backward; cbn zeta; cbn [fst snd]; rewrite map_map.
  rewrite (bw_nth_map_lt _ _ _ _ 0%nat) by (rewrite seq_length; exact Hh).
  rewrite seq_nth by exact Hh; reflexivity.
Qed.

End Grad.
