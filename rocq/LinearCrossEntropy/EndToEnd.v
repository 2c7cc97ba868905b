(** * The cross-entropy gradient end to end (over [R]).

    [ce_backward_correct] ([LinearCrossEntropy/Gradient.v]) says the chunked
    backward computes [G W], [G^T H] and [colsum G] for whatever forward
    state it is given, and [grad_entry_is_derive] says an entry of [G] is
    a derivative when the saved lse is exact.  Here the two are composed
    with the forward: the backward is fed the state that the chunked
    forward [ce_forward] computes (its streamed lses and kept count,
    [ce_forward_fold], [token_forward_lse]), and for every token chunk
    size [bt] and vocabulary chunk size [bv] the entries it returns are
    the partial derivatives of the reduced loss [ce_loss] (the same
    chunked forward followed by [ce_output]) in each entry [H_ic] of the
    hidden states, [W_vc] of the weight and [b_v] of the bias:

      - [ce_grad_input_is_derive]:  grad_input[i][c]  = d Phi / d H[i][c]
      - [ce_grad_weight_is_derive]: grad_weight[v][c] = d Phi / d W[v][c]
      - [ce_grad_bias_is_derive]:   grad_bias[v]      = d Phi / d b[v]

    where [Phi = sum_k dout_k * out_k] ([upstream]) is the upstream
    gradient [dout] applied to the output [out = ce_loss ...]: for "sum"
    and "mean" ([out] has one entry) [Phi = dout_0 * loss], for "none"
    [Phi = sum_i dout_i * loss_i] (the vector-Jacobian product).  The
    softcap [c tanh (z / c)], label smoothing and the z-loss are included,
    and so are ignored tokens (target = ignore_index, their loss 0 and
    their reduction weight 0) and the case where every token is ignored
    ("mean" is then 0 by the guard of [ce_output], the loss is constant
    and every gradient entry is 0: [ce_all_ignored_grads_zero]).
    [ce_backward_is_gradient] restates the three for "sum" / "mean" with
    [dout = [1]] as [Derive] of the scalar loss.

    An ignored token's row of grad_input is 0 ([ignored_grad_zero]), and
    for "sum" / "mean" grad_weight and grad_bias are those of the kept
    tokens alone ([ce_drop_ignored]); here the ignored tokens simply enter
    with weight 0.

    Hypotheses, as the code checks them: a nonempty vocabulary (the code
    raises for V = 0), the kept tokens' targets in [0, V), a nonzero softcap
    (the code requires c > 0), one target per token, and the moved entry
    inside its row (and a bias of V entries for [b_v]).

    Not covered: floating point (everything here is over the reals), class
    weights and probability targets (not in the spec). *)

From Coq Require Import Reals List Lra Arith Lia ZArith.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.Backward Attention.Merge LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse
  LinearCrossEntropy.Loss LinearCrossEntropy.Gradient LinearCrossEntropy.Reduction.
Import ListNotations.
Open Scope R_scope.

(** ** Definitions *)

(** The matrix [M] with entry [(r, c)] replaced by [x]. *)
Definition set_entry (r c : nat) (x : R) (M : list (list R)) : list (list R) :=
  firstn r M ++ set_nth c x (nth r M []) :: skipn (S r) M.

(** The upstream gradient [dout] applied to the output [out] of the loss:
    [sum_k dout_k * out_k] (one term for "sum" / "mean"). *)
Definition upstream (dout out : list R) : R :=
  rsum (map (fun k => nth k dout 0 * nth k out 0) (seq 0 (length out))).

(** The number of kept tokens, from the targets alone. *)
Definition kcount (cfg : ce_config R) (targets : list Z) : R :=
  rsum (map (fun t => if kept cfg t then 1 else 0) targets).

(** ** Derivatives of sums *)

Lemma is_derive_eq_l : forall (f : R -> R) (x l l' : R), is_derive f x l -> l = l' -> is_derive f x l'.
Proof. intros f x l l' H <-; exact H. Qed.

(** [is_derive_ext] with its equation stated at type [R] (so [ring] applies). *)
Lemma is_derive_ext_R : forall (f g : R -> R) (x l : R),
  (forall y, f y = g y) -> is_derive f x l -> is_derive g x l.
Proof. intros f g x l H; apply is_derive_ext, H. Qed.

Lemma is_derive_rsum : forall {A} (f : A -> R -> R) (f' : A -> R) l x,
  (forall a, In a l -> is_derive (f a) x (f' a)) ->
  is_derive (fun y => rsum (map (fun a => f a y) l)) x (rsum (map f' l)).
Proof.
  intros A f f' l x; induction l as [|a l IH]; intros H.
  - apply (is_derive_ext (fun _ => 0)); [intros; reflexivity|].
    apply (is_derive_const 0 x).
  - cbn [map]; rewrite rsum_cons.
    apply (is_derive_ext (fun y => f a y + rsum (map (fun a => f a y) l)));
      [intros; rewrite rsum_cons; reflexivity|].
    exact (is_derive_plus _ _ x _ _ (H a (or_introl eq_refl))
             (IH (fun b Hb => H b (or_intror Hb)))).
Qed.

(** ** List facts *)

Lemma set_entry_length : forall r c x M,
  (r < length M)%nat -> length (set_entry r c x M) = length M.
Proof. intros; unfold set_entry; apply replace_length; assumption. Qed.

Lemma nth_set_entry : forall r c x M u,
  (r < length M)%nat ->
  nth u (set_entry r c x M) [] = if Nat.eqb u r then set_nth c x (nth r M []) else nth u M [].
Proof. intros; unfold set_entry; apply nth_replace; assumption. Qed.

Lemma nth_set_nth : forall c x (l : list R) u,
  (c < length l)%nat -> nth u (set_nth c x l) 0 = if Nat.eqb u c then x else nth u l 0.
Proof. intros; unfold set_nth; apply nth_replace; assumption. Qed.

Lemma map_vocab_seq : forall {B} (F : nat * list R -> B) (W : list (list R)),
  map F (vocab W) = map (fun v => F (v, nth v W [])) (seq 0 (length W)).
Proof.
  intros B F W; unfold vocab.
  assert (G : forall k, map F (combine (seq k (length W)) W)
                        = map (fun v => F (v, nth (v - k) W [])) (seq k (length W))).
  { induction W as [|w W IH]; intros k; [reflexivity|].
    cbn [length seq combine map]; rewrite Nat.sub_diag, IH; f_equal.
    apply map_ext_in; intros v Hv; apply in_seq in Hv.
    replace (v - k)%nat with (S (v - S k)) by lia; reflexivity. }
  rewrite G; apply map_ext; intros v; rewrite Nat.sub_0_r; reflexivity.
Qed.

Lemma logits_row_seq : forall cap bias (W : list (list R)) h,
  logits_row R_ops cap bias W h
  = map (fun v => softcap R_ops cap (raw_logit R_ops bias h (v, nth v W []))) (seq 0 (length W)).
Proof. intros; unfold logits_row; apply map_vocab_seq. Qed.

Lemma combine_seq : forall (H : list (list R)) (targets : list Z),
  length targets = length H ->
  combine H targets = map (fun k => (nth k H [], nth k targets 0%Z)) (seq 0 (length H)).
Proof.
  intros H targets Hl; apply (nth_ext _ _ ([], 0%Z) ([], 0%Z)).
  - rewrite combine_length, map_length, seq_length; lia.
  - intros k Hk; rewrite combine_length in Hk.
    rewrite combine_nth, nth_map_seq by lia; reflexivity.
Qed.

Lemma tokens_seq : forall (H : list (list R)) (targets : list Z),
  length targets = length H ->
  tokens H targets = map (fun k => (k, (nth k H [], nth k targets 0%Z))) (seq 0 (length H)).
Proof.
  intros H targets Hl; apply (nth_ext _ _ (0%nat, ([], 0%Z)) (0%nat, ([], 0%Z))).
  - rewrite tokens_length, map_length, seq_length by exact Hl; reflexivity.
  - intros k Hk; rewrite tokens_length in Hk by exact Hl.
    rewrite nth_tokens, nth_map_seq by lia; reflexivity.
Qed.

Lemma rsum_tokens_seq : forall (F : tok -> R) (H : list (list R)) (targets : list Z),
  length targets = length H ->
  rsum (map F (tokens H targets))
  = rsum (map (fun k => F (k, (nth k H [], nth k targets 0%Z))) (seq 0 (length H))).
Proof. intros F H targets Hl; rewrite tokens_seq, map_map by exact Hl; reflexivity. Qed.

(** ** The derivative of one token's loss along an affine change of its raw logits *)

Lemma dlogit_R : forall n eps lam L t v z,
  dlogit R_ops n eps lam L t v z
  = (1 + (1 + 1) * lam * L) * exp (z - L) - eps / INR n - (if is_target t v then 1 - eps else 0).
Proof.
  intros; unfold dlogit, sc_two; rewrite sc_of_nat_R; cbv zeta.
  change (sc_one R_ops) with 1; change (sc_add R_ops) with Rplus; change (sc_sub R_ops) with Rminus;
  change (sc_mul R_ops) with Rmult; change (sc_div R_ops) with Rdiv; change (sc_exp R_ops) with exp.
  destruct (is_target t v); ring.
Qed.

(** The per-token loss of the logits [z_v(x) = cap (r_v + (x - x0) a_v)],
    [v = 0 .. n-1], has derivative at [x0]
    [sum_v dlogit_v * cap'(r_v) * a_v]: the chain rule through the softcap,
    the log-sum-exp, the target logit and the logit sum at once. *)
Lemma token_loss_affine_is_derive : forall eps lam cap t n (Rv Av : nat -> R) x0,
  (forall c, cap = Some c -> c <> 0) -> (0 <= t < Z.of_nat n)%Z ->
  let zs0 := map (fun v => softcap R_ops cap (Rv v)) (seq 0 n) in
  is_derive (fun x => ce_token_loss_R eps lam t
                        (map (fun v => softcap R_ops cap (Rv v + (x - x0) * Av v)) (seq 0 n))) x0
    (rsum (map (fun v => dlogit R_ops n eps lam (lse_row zs0) t v (softcap R_ops cap (Rv v))
                         * softcap_grad R_ops cap (Rv v) * Av v) (seq 0 n))).
Proof.
  intros eps lam cap t n Rv Av x0 Hc Ht zs0.
  set (zf := fun v x => softcap R_ops cap (Rv v + (x - x0) * Av v)).
  set (dz := fun v => softcap_grad R_ops cap (Rv v) * Av v).
  assert (HT : (Z.to_nat t < n)%nat) by lia.
  assert (Hz0 : forall v, zf v x0 = softcap R_ops cap (Rv v))
    by (intros v; unfold zf; f_equal; ring).
  assert (Hz : forall v, is_derive (zf v) x0 (dz v)).
  { intros v; unfold zf, dz.
    eapply is_derive_eq_l.
    - apply (is_derive_comp (softcap R_ops cap) (fun x => Rv v + (x - x0) * Av v) x0
               (softcap_grad R_ops cap (Rv v)) (Av v)).
      + replace (Rv v + (x0 - x0) * Av v) with (Rv v) by ring; apply softcap_is_derive, Hc.
      + auto_derive; [exact I|ring].
    - change (scal (Av v) (softcap_grad R_ops cap (Rv v)))
        with (Av v * softcap_grad R_ops cap (Rv v)); ring. }
  set (S := fun x => rsum (map (fun v => exp (zf v x)) (seq 0 n))).
  set (S0 := rsum (map (fun v => exp (softcap R_ops cap (Rv v))) (seq 0 n))).
  assert (HS0 : S x0 = S0) by (unfold S, S0; apply rsum_map_ext; intros v _; rewrite Hz0; reflexivity).
  assert (HSpos : 0 < S0).
  { unfold S0; rewrite <- (map_map (fun v => softcap R_ops cap (Rv v)) exp); apply rsum_exp_pos.
    destruct n; [lia|discriminate]. }
  assert (Hn : INR n <> 0) by (apply not_0_INR; lia).
  set (dS := rsum (map (fun v => exp (softcap R_ops cap (Rv v)) * dz v) (seq 0 n))).
  assert (HdS : is_derive S x0 dS).
  { unfold S, dS; apply is_derive_rsum; intros v _.
    eapply is_derive_eq_l;
      [apply (is_derive_comp exp (zf v) x0 (exp (zf v x0)) (dz v)); [apply is_derive_exp|apply Hz]|].
    rewrite Hz0; change (scal (dz v) (exp (softcap R_ops cap (Rv v))))
                   with (dz v * exp (softcap R_ops cap (Rv v))); ring. }
  assert (HdL : is_derive (fun x => ln (S x)) x0 (dS / S0)).
  { eapply is_derive_eq_l;
      [apply (is_derive_comp ln S x0 (/ S x0) dS); [apply is_derive_ln; rewrite HS0; exact HSpos|exact HdS]|].
    rewrite HS0; change (scal dS (/ S0)) with (dS * / S0); reflexivity. }
  set (dSz := rsum (map dz (seq 0 n))).
  assert (HdSz : is_derive (fun x => rsum (map (fun v => zf v x) (seq 0 n))) x0 dSz)
    by (apply is_derive_rsum; intros v _; apply Hz).
  assert (HL0 : lse_row zs0 = ln S0) by (unfold lse_row, zs0, S0; rewrite map_map; reflexivity).
  apply (is_derive_ext_R (fun x => (1 - eps) * (ln (S x) - zf (Z.to_nat t) x)
                                  + eps * (ln (S x) - / INR n * rsum (map (fun v => zf v x) (seq 0 n)))
                                  + lam * (ln (S x) * ln (S x)))).
  { intros x; unfold ce_token_loss_R, lse_row; rewrite map_length, seq_length, map_map.
    rewrite nth_map_seq0 by exact HT; unfold S, zf, Rdiv; ring. }
  assert (D : is_derive (fun x => (1 - eps) * (ln (S x) - zf (Z.to_nat t) x)
                                  + eps * (ln (S x) - / INR n * rsum (map (fun v => zf v x) (seq 0 n)))
                                  + lam * (ln (S x) * ln (S x))) x0
                ((1 - eps) * (dS / S0 - dz (Z.to_nat t)) + eps * (dS / S0 - / INR n * dSz)
                 + lam * (dS / S0 * ln (S x0) + ln (S x0) * (dS / S0)))).
  { exact (is_derive_plus _ _ x0 _ _
             (is_derive_plus _ _ x0 _ _
                (is_derive_scal _ x0 (1 - eps) _ (is_derive_minus _ _ x0 _ _ HdL (Hz (Z.to_nat t))))
                (is_derive_scal _ x0 eps _
                   (is_derive_minus _ _ x0 _ _ HdL (is_derive_scal _ x0 (/ INR n) _ HdSz))))
             (is_derive_scal _ x0 lam _ (is_derive_mult _ _ x0 _ _ HdL HdL Rmult_comm))). }
  eapply is_derive_eq_l; [exact D|].
  rewrite HS0, HL0.
  rewrite (rsum_map_ext _ (fun v => (1 + (1 + 1) * lam * ln S0) / S0 * (exp (softcap R_ops cap (Rv v)) * dz v)
                                   + ((- (eps / INR n)) * dz v
                                      + (- (1 - eps)) * (if Nat.eqb v (Z.to_nat t) then dz v else 0)))).
  2:{ intros v _; rewrite dlogit_R, is_target_to_nat by lia; fold (dz v).
      rewrite exp_minus, exp_ln by exact HSpos.
      destruct (Nat.eqb_spec (Z.to_nat t) v), (Nat.eqb_spec v (Z.to_nat t)); try lia;
        unfold dz; field; split; lra. }
  rewrite !rsum_map_plus, !rsum_map_scal_l, (rsum_pick_seq dz n 0 (Z.to_nat t)) by lia.
  fold dS dSz; field; split; lra.
Qed.

(** ** One entry of [h], [w_v] or [b] moved: the raw logits move affinely *)

Lemma dot_set_nth_l : forall (a b : list R) c x,
  (c < length a)%nat -> dot R_ops (set_nth c x a) b = dot R_ops a b + (x - nth c a 0) * nth c b 0.
Proof.
  induction a as [|y a IH]; intros b c x Hc; [simpl in Hc; lia|].
  destruct b as [|z b]; destruct c as [|c]; cbn.
  - ring.
  - unfold set_nth; cbn; destruct c; ring.
  - ring.
  - unfold set_nth in IH |- *; cbn [firstn app skipn] in *.
    rewrite IH by (simpl in Hc; lia); ring.
Qed.

Lemma dot_comm_R : forall a b : list R, dot R_ops a b = dot R_ops b a.
Proof.
  induction a as [|y a IH]; intros [|z b]; cbn; try reflexivity.
  rewrite IH; ring.
Qed.

(** [h_c] moved to [x]: [r_v] moves by [(x - h_c) w_vc]. *)
Lemma raw_logit_set_input : forall bias h (e : nat * list R) c x,
  (c < length h)%nat ->
  raw_logit R_ops bias (set_nth c x h) e = raw_logit R_ops bias h e + (x - nth c h 0) * nth c (snd e) 0.
Proof.
  intros bias h e c x Hc; unfold raw_logit; rewrite dot_set_nth_l by exact Hc.
  destruct bias; change (sc_add R_ops) with Rplus; ring.
Qed.

(** [w_vc] moved to [x]: [r_v] moves by [(x - w_vc) h_c]. *)
Lemma raw_logit_set_weight : forall bias h v w c x,
  (c < length w)%nat ->
  raw_logit R_ops bias h (v, set_nth c x w) = raw_logit R_ops bias h (v, w) + (x - nth c w 0) * nth c h 0.
Proof.
  intros bias h v w c x Hc; unfold raw_logit; cbn [snd fst].
  rewrite (dot_comm_R h), dot_set_nth_l, (dot_comm_R w) by exact Hc.
  destruct bias; change (sc_add R_ops) with Rplus; ring.
Qed.

(** [b_u] moved to [x]: [r_v] moves by [(x - b_u) [v = u]]. *)
Lemma raw_logit_set_bias : forall b h (e : nat * list R) u x,
  (u < length b)%nat ->
  raw_logit R_ops (Some (set_nth u x b)) h e
  = raw_logit R_ops (Some b) h e + (x - nth u b 0) * (if Nat.eqb (fst e) u then 1 else 0).
Proof.
  intros b h e u x Hu; unfold raw_logit; change (sc_add R_ops) with Rplus; change (sc_zero R_ops) with 0.
  rewrite nth_set_nth by exact Hu.
  destruct (Nat.eqb_spec (fst e) u) as [->|_]; ring.
Qed.

(** ** The reduced loss as a sum over the tokens *)

Lemma kept_count : forall cfg (H : list (list R)) targets,
  length targets = length H -> INR (length (kept_tokens cfg H targets)) = kcount cfg targets.
Proof.
  intros cfg H targets Hl.
  rewrite <- (map_snd_combine_eq H targets) at 2 by lia.
  unfold kept_tokens, kcount; rewrite <- rsum_indicator, map_map; reflexivity.
Qed.

(** The upstream gradient applied to the reduced loss of the chunked
    forward is [sum_k w_k * loss_k], [w_k] the backward's reduction weight
    [token_weight] (0 at an ignored token) and [loss_k] the token's
    specification loss. *)
Lemma upstream_loss : forall cfg bt bv H W bias targets dout,
  W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  length targets = length H ->
  upstream dout (ce_loss R_ops cfg bt bv H W bias targets)
  = rsum (map (fun k => token_weight R_ops cfg dout (kcount cfg targets) k (nth k targets 0%Z)
                        * token_loss_spec cfg bias W (nth k H [], nth k targets 0%Z))
              (seq 0 (length H))).
Proof.
  intros cfg bt bv H W bias targets dout HW Ht Hl.
  rewrite ce_loss_correct by assumption; unfold upstream, token_weight.
  change (sc_zero R_ops) with 0; change (sc_div R_ops) with Rdiv.
  destruct (ce_reduction cfg).
  - rewrite map_length, combine_length, Hl, Nat.min_id, combine_seq, map_map by exact Hl.
    apply rsum_map_ext; intros k Hk; apply in_seq in Hk.
    rewrite nth_map_seq0 by lia; cbn [fst snd].
    destruct (kept cfg (nth k targets 0%Z)); ring.
  - cbn [length seq map nth]; rewrite rsum_cons, rsum_nil, Rplus_0_r.
    unfold kept_tokens; rewrite <- rsum_filter, combine_seq, map_map, <- rsum_map_scal_l by exact Hl.
    apply rsum_map_ext; intros k _; cbn [fst snd].
    destruct (kept cfg (nth k targets 0%Z)); ring.
  - cbn [length seq map nth]; rewrite rsum_cons, rsum_nil, Rplus_0_r, kept_count by exact Hl.
    unfold kept_tokens; rewrite <- rsum_filter, combine_seq, map_map, <- rsum_map_div,
      <- rsum_map_scal_l by exact Hl.
    apply rsum_map_ext; intros k _; cbn [fst snd].
    destruct (kept cfg (nth k targets 0%Z)); unfold Rdiv; ring.
Qed.

(** ** The backward's entries of G, fed with the forward's state *)

(** Entry [g_kv] of G as the backward computes it from the state of the
    chunked forward: the token's reduction weight times [dlogit] at the
    token's exact lse (the streamed lse is the log-sum-exp:
    [token_forward_lse]) times the softcap's derivative. *)
Lemma grad_entry_forward : forall cfg bt bv H W bias targets dout k v,
  W <> [] -> length targets = length H -> (k < length H)%nat ->
  grad_entry R_ops cfg (length W) bias (fa_lses (ce_forward R_ops cfg bt bv H W bias targets)) dout
             (fa_count (ce_forward R_ops cfg bt bv H W bias targets))
             (k, (nth k H [], nth k targets 0%Z)) (v, nth v W [])
  = token_weight R_ops cfg dout (kcount cfg targets) k (nth k targets 0%Z)
    * (dlogit R_ops (length W) (ce_smoothing cfg) (ce_z_loss cfg)
         (lse_row (logits_row R_ops (ce_softcap cfg) bias W (nth k H []))) (nth k targets 0%Z) v
         (softcap R_ops (ce_softcap cfg) (raw_logit R_ops bias (nth k H []) (v, nth v W [])))
       * softcap_grad R_ops (ce_softcap cfg) (raw_logit R_ops bias (nth k H []) (v, nth v W []))).
Proof.
  intros cfg bt bv H W bias targets dout k v HW Hl Hk.
  destruct (ce_forward_fold cfg bv W bias bt H targets) as (_ & H2 & _ & H4).
  unfold grad_entry; cbv zeta.
  rewrite H4, kept_count by exact Hl; change (sc_zero R_ops) with 0.
  rewrite H2, combine_seq, map_map, nth_map_seq0 by assumption; cbn [fst snd].
  rewrite token_forward_lse by exact HW; reflexivity.
Qed.

(** ** The weighted token sum along an affine change of every token's raw logits *)

(** A function [f] equal to [sum_k w_k * loss_k (x)], token [k]'s raw
    logits [r_kv + (x - x0) a_kv]: its derivative at [x0] is
    [sum_k w_k sum_v dlogit_kv * cap'(r_kv) * a_kv].  An ignored token has
    [w_k = 0] (its target need not be a class). *)
Lemma tokens_affine_is_derive : forall cfg dout cnt targets n N (Rv Av : nat -> nat -> R) x0
                                       (f : R -> R),
  (forall s, ce_softcap cfg = Some s -> s <> 0) ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat n)%Z) ->
  length targets = N ->
  let cap := ce_softcap cfg in
  (forall x, f x = rsum (map (fun k => token_weight R_ops cfg dout cnt k (nth k targets 0%Z)
       * ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) (nth k targets 0%Z)
           (map (fun v => softcap R_ops cap (Rv k v + (x - x0) * Av k v)) (seq 0 n))) (seq 0 N))) ->
  is_derive f x0
    (rsum (map (fun k => token_weight R_ops cfg dout cnt k (nth k targets 0%Z)
       * rsum (map (fun v => dlogit R_ops n (ce_smoothing cfg) (ce_z_loss cfg)
                               (lse_row (map (fun u => softcap R_ops cap (Rv k u)) (seq 0 n)))
                               (nth k targets 0%Z) v (softcap R_ops cap (Rv k v))
                             * softcap_grad R_ops cap (Rv k v) * Av k v) (seq 0 n))) (seq 0 N))).
Proof.
  intros cfg dout cnt targets n N Rv Av x0 f Hc Ht Hl cap Hf.
  apply (is_derive_ext_R _ f x0 _ (fun x => eq_sym (Hf x))).
  apply is_derive_rsum; intros k Hk; apply in_seq in Hk.
  destruct (kept cfg (nth k targets 0%Z)) eqn:Ek.
  - apply is_derive_scal, token_loss_affine_is_derive; [exact Hc|apply Ht; [apply nth_In; lia|exact Ek]].
  - unfold token_weight; rewrite Ek; change (sc_zero R_ops) with 0.
    apply (is_derive_ext_R (fun _ => 0)); [intros; ring|].
    apply (is_derive_eq_l _ _ 0); [apply (is_derive_const 0 x0)|ring].
Qed.

Lemma rsum_pick_mul : forall (f : nat -> R) n j a,
  (j < n)%nat -> rsum (map (fun u => f u * (if Nat.eqb u j then a else 0)) (seq 0 n)) = f j * a.
Proof.
  intros f n j a Hj.
  rewrite (rsum_map_ext _ (fun u => if Nat.eqb u j then f u * a else 0))
    by (intros u _; destruct (Nat.eqb u j); ring).
  apply rsum_pick_seq; lia.
Qed.

Lemma set_entry_nil : forall r c x (M : list (list R)),
  M <> [] -> (r < length M)%nat -> set_entry r c x M <> [].
Proof.
  intros r c x M HM Hr Hn; apply HM, length_zero_iff_nil.
  rewrite <- (set_entry_length r c x M Hr), Hn; reflexivity.
Qed.

(** ** The three gradients *)

(** grad_input: for any token and vocabulary chunk sizes, entry [(i, c)]
    of the grad_input that the chunked backward returns, fed with the
    state of the chunked forward, is the derivative of the upstream-weighted
    reduced loss in [H_ic]. *)
Theorem ce_grad_input_is_derive : forall cfg bt bv H W bias targets dout gin gW gb i c,
  W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  (forall s, ce_softcap cfg = Some s -> s <> 0) ->
  length targets = length H -> (i < length H)%nat -> (c < length (nth i H []))%nat ->
  ce_backward R_ops cfg bt bv H W bias targets (ce_forward R_ops cfg bt bv H W bias targets) dout
    = (gin, gW, gb) ->
  is_derive (fun x => upstream dout (ce_loss R_ops cfg bt bv (set_entry i c x H) W bias targets))
            (nth c (nth i H []) 0) (nth c (nth i gin []) 0).
Proof.
  intros cfg bt bv H W bias targets dout gin gW gb i c HW Ht Hc Hl Hi Hci Hb.
  set (Rv := fun k v => raw_logit R_ops bias (nth k H []) (v, nth v W [])).
  set (Av := fun k v => if Nat.eqb k i then nth c (nth v W []) 0 else 0).
  eapply is_derive_eq_l.
  - apply (tokens_affine_is_derive cfg dout (kcount cfg targets) targets (length W) (length H) Rv Av);
      [exact Hc|exact Ht|exact Hl|].
    intros x; rewrite upstream_loss, set_entry_length;
      try (rewrite ?set_entry_length; assumption).
    apply rsum_map_ext; intros k _; unfold token_loss_spec; cbn [fst snd].
    rewrite nth_set_entry, logits_row_seq by exact Hi; do 2 f_equal.
    apply map_ext; intros v; unfold Rv, Av; f_equal.
    destruct (Nat.eqb_spec k i) as [->|_]; [|ring].
    rewrite raw_logit_set_input by exact Hci; reflexivity.
  - destruct (ce_backward_correct cfg bt bv H W bias targets _ dout gin gW gb Hl Hb) as [Hin _].
    assert (Hlg : length gin = length H)
      by (rewrite (Forall2_length _ _ _ Hin); unfold grad_input_spec, grad_matrix, grad_block;
          rewrite !map_length; apply tokens_length, Hl).
    rewrite (Forall2_nth_inv _ _ _ i [] [] Hin) by lia.
    unfold grad_input_spec; rewrite (nth_map_lt _ _ _ _ [])
      by (unfold grad_matrix, grad_block; rewrite map_length, tokens_length; assumption).
    rewrite grad_matrix_row, weighted_sum_vocab, map_vocab_seq by assumption.
    match goal with |- rsum (map ?F (seq 0 (length H))) = _ =>
      rewrite (rsum_map_ext F (fun k => if Nat.eqb k i then F i else 0));
      [rewrite (rsum_pick_seq (fun _ => F i)) by lia; cbv beta
      |intros k Hk; destruct (Nat.eqb_spec k i) as [->|Hne]; [reflexivity|cbv beta]] end.
    + symmetry; rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros v _; cbn [snd].
      rewrite grad_entry_forward, logits_row_seq by assumption.
      unfold Av, Rv; rewrite Nat.eqb_refl; cbv beta; ring.
    + unfold Av; rewrite (proj2 (Nat.eqb_neq k i) Hne), rsum_map_zero; [ring|intros; ring].
Qed.

(** grad_weight: entry [(v, c)] of the grad_weight that the chunked
    backward returns, fed with the state of the chunked forward, is the
    derivative of the upstream-weighted reduced loss in [W_vc] (every token
    contributes; an ignored one with weight 0). *)
Theorem ce_grad_weight_is_derive : forall cfg bt bv H W bias targets dout gin gW gb v c,
  W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  (forall s, ce_softcap cfg = Some s -> s <> 0) ->
  length targets = length H -> (v < length W)%nat -> (c < length (nth v W []))%nat ->
  ce_backward R_ops cfg bt bv H W bias targets (ce_forward R_ops cfg bt bv H W bias targets) dout
    = (gin, gW, gb) ->
  is_derive (fun x => upstream dout (ce_loss R_ops cfg bt bv H (set_entry v c x W) bias targets))
            (nth c (nth v W []) 0) (nth c (nth v gW []) 0).
Proof.
  intros cfg bt bv H W bias targets dout gin gW gb v c HW Ht Hc Hl Hv Hcv Hb.
  set (Rv := fun k u => raw_logit R_ops bias (nth k H []) (u, nth u W [])).
  set (Av := fun k u => if Nat.eqb u v then nth c (nth k H []) 0 else 0).
  eapply is_derive_eq_l.
  - apply (tokens_affine_is_derive cfg dout (kcount cfg targets) targets (length W) (length H) Rv Av);
      [exact Hc|exact Ht|exact Hl|].
    intros x; rewrite upstream_loss;
      [|apply set_entry_nil; assumption|rewrite set_entry_length; assumption|exact Hl].
    apply rsum_map_ext; intros k _; unfold token_loss_spec; cbn [fst snd].
    rewrite logits_row_seq, set_entry_length by exact Hv; do 2 f_equal.
    apply map_ext; intros u; unfold Rv, Av; f_equal.
    rewrite nth_set_entry by exact Hv.
    destruct (Nat.eqb_spec u v) as [->|_]; [|ring].
    rewrite raw_logit_set_weight by exact Hcv; reflexivity.
  - destruct (ce_backward_correct cfg bt bv H W bias targets _ dout gin gW gb Hl Hb) as (_ & HgW & _).
    assert (HlW : length gW = length W)
      by (rewrite (Forall2_length _ _ _ HgW); unfold grad_weight_spec; rewrite map_length, seq_length;
          reflexivity).
    rewrite (Forall2_nth_inv _ _ _ v [] [] HgW) by lia.
    rewrite grad_weight_spec_coord, rsum_tokens_seq by assumption.
    apply rsum_map_ext; intros k Hk; apply in_seq in Hk; cbn [fst snd].
    rewrite grad_entry_forward, logits_row_seq by (assumption || lia).
    unfold Av; rewrite rsum_pick_mul by exact Hv; unfold Rv; cbv beta; ring.
Qed.

(** grad_bias: entry [v] of the grad_bias that the chunked backward
    returns, fed with the state of the chunked forward, is the derivative
    of the upstream-weighted reduced loss in [b_v]. *)
Theorem ce_grad_bias_is_derive : forall cfg bt bv H W b targets dout gin gW gb v,
  W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  (forall s, ce_softcap cfg = Some s -> s <> 0) ->
  length targets = length H -> length b = length W -> (v < length W)%nat ->
  ce_backward R_ops cfg bt bv H W (Some b) targets (ce_forward R_ops cfg bt bv H W (Some b) targets) dout
    = (gin, gW, gb) ->
  is_derive (fun x => upstream dout (ce_loss R_ops cfg bt bv H W (Some (set_nth v x b)) targets))
            (nth v b 0) (nth v gb 0).
Proof.
  intros cfg bt bv H W b targets dout gin gW gb v HW Ht Hc Hl Hlb Hv Hb.
  set (Rv := fun k u => raw_logit R_ops (Some b) (nth k H []) (u, nth u W [])).
  set (Av := fun (k u : nat) => if Nat.eqb u v then 1 else 0).
  eapply is_derive_eq_l.
  - apply (tokens_affine_is_derive cfg dout (kcount cfg targets) targets (length W) (length H) Rv Av);
      [exact Hc|exact Ht|exact Hl|].
    intros x; rewrite upstream_loss by assumption.
    apply rsum_map_ext; intros k _; unfold token_loss_spec; cbn [fst snd].
    rewrite logits_row_seq; do 2 f_equal.
    apply map_ext; intros u; unfold Rv, Av; f_equal.
    rewrite raw_logit_set_bias by lia; reflexivity.
  - destruct (ce_backward_correct cfg bt bv H W (Some b) targets _ dout gin gW gb Hl Hb)
      as (_ & _ & _ & Hgb).
    rewrite Hgb, grad_bias_spec_coord, rsum_tokens_seq by assumption.
    apply rsum_map_ext; intros k Hk; apply in_seq in Hk; cbn [fst snd].
    rewrite grad_entry_forward, logits_row_seq by (assumption || lia).
    unfold Av; rewrite rsum_pick_mul by exact Hv; unfold Rv; cbv beta; ring.
Qed.

(** ** "sum" and "mean": the gradients are the partial derivatives of the loss *)

Lemma upstream_one : forall cfg bt bv H W bias targets,
  ce_reduction cfg <> Red_none ->
  upstream [1] (ce_loss R_ops cfg bt bv H W bias targets)
  = nth 0 (ce_loss R_ops cfg bt bv H W bias targets) 0.
Proof.
  intros cfg bt bv H W bias targets Hr; unfold ce_loss, ce_output.
  destruct (ce_reduction cfg); [contradiction| |];
    unfold upstream; cbn [length seq map nth]; rewrite rsum_cons, rsum_nil; ring.
Qed.

(** For "sum" and "mean" with the upstream gradient [1] (the usual
    [loss.backward()]), for any chunk sizes, the chunked backward fed with
    the chunked forward's state returns exactly the partial derivatives of
    the scalar loss [ce_loss] (itself the chunked forward, reduced): in
    [H_ic], in [W_vc] and, with a bias, in [b_v]. *)
Theorem ce_backward_is_gradient : forall cfg bt bv H W bias targets gin gW gb,
  ce_reduction cfg <> Red_none -> W <> [] ->
  (forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z) ->
  (forall s, ce_softcap cfg = Some s -> s <> 0) ->
  length targets = length H ->
  ce_backward R_ops cfg bt bv H W bias targets (ce_forward R_ops cfg bt bv H W bias targets) [1]
    = (gin, gW, gb) ->
  (forall i c, (i < length H)%nat -> (c < length (nth i H []))%nat ->
     nth c (nth i gin []) 0
     = Derive (fun x => nth 0 (ce_loss R_ops cfg bt bv (set_entry i c x H) W bias targets) 0)
              (nth c (nth i H []) 0))
  /\ (forall v c, (v < length W)%nat -> (c < length (nth v W []))%nat ->
     nth c (nth v gW []) 0
     = Derive (fun x => nth 0 (ce_loss R_ops cfg bt bv H (set_entry v c x W) bias targets) 0)
              (nth c (nth v W []) 0))
  /\ (forall b, bias = Some b -> length b = length W -> forall v, (v < length W)%nat ->
     nth v gb 0
     = Derive (fun x => nth 0 (ce_loss R_ops cfg bt bv H W (Some (set_nth v x b)) targets) 0)
              (nth v b 0)).
Proof.
  intros cfg bt bv H W bias targets gin gW gb Hr HW Ht Hc Hl Hb.
  split; [|split].
  - intros i c Hi Hci; symmetry; apply is_derive_unique.
    apply (is_derive_ext_R (fun x => upstream [1] (ce_loss R_ops cfg bt bv (set_entry i c x H) W bias targets)));
      [intros; apply upstream_one, Hr|].
    eapply ce_grad_input_is_derive; eassumption.
  - intros v c Hv Hcv; symmetry; apply is_derive_unique.
    apply (is_derive_ext_R (fun x => upstream [1] (ce_loss R_ops cfg bt bv H (set_entry v c x W) bias targets)));
      [intros; apply upstream_one, Hr|].
    eapply ce_grad_weight_is_derive; eassumption.
  - intros b -> Hlb v Hv; symmetry; apply is_derive_unique.
    apply (is_derive_ext_R (fun x => upstream [1] (ce_loss R_ops cfg bt bv H W (Some (set_nth v x b)) targets)));
      [intros; apply upstream_one, Hr|].
    eapply ce_grad_bias_is_derive; eassumption.
Qed.

(** ** Every token ignored *)

Lemma upstream_all_ignored : forall cfg bt bv H W bias targets dout,
  W <> [] -> length targets = length H ->
  (forall t, In t targets -> kept cfg t = false) ->
  upstream dout (ce_loss R_ops cfg bt bv H W bias targets) = 0.
Proof.
  intros cfg bt bv H W bias targets dout HW Hl Hig.
  rewrite upstream_loss; [|exact HW|intros t Hin Hk; rewrite Hig in Hk by exact Hin; discriminate|exact Hl].
  apply rsum_map_zero; intros k Hk; apply in_seq in Hk.
  unfold token_weight; rewrite Hig by (apply nth_In; lia); change (sc_zero R_ops) with 0; ring.
Qed.

(** A derivative of a function that is [0] everywhere is [0]. *)
Lemma is_derive_zero_fun : forall (f : R -> R) x l, (forall y, f y = 0) -> is_derive f x l -> l = 0.
Proof.
  intros f x l Hf Hd.
  apply (is_derive_ext_R f (fun _ => 0)) in Hd; [|exact Hf].
  rewrite <- (is_derive_unique _ _ _ Hd); apply Derive_const.
Qed.

(** Every token ignored (all targets are ignore_index): the upstream-weighted
    loss is 0 whatever [H], [W], [b] ("sum" and "mean" return [0]; "mean"
    by the guard of [ce_output], where [F.cross_entropy] returns NaN), and
    every gradient entry the chunked backward returns is 0 (the
    derivative of that constant). *)
Theorem ce_all_ignored_grads_zero : forall cfg bt bv H W bias targets dout gin gW gb,
  W <> [] -> (forall s, ce_softcap cfg = Some s -> s <> 0) -> length targets = length H ->
  (forall t, In t targets -> kept cfg t = false) ->
  ce_backward R_ops cfg bt bv H W bias targets (ce_forward R_ops cfg bt bv H W bias targets) dout
    = (gin, gW, gb) ->
  (ce_reduction cfg <> Red_none -> ce_loss R_ops cfg bt bv H W bias targets = [0])
  /\ (forall i c, (i < length H)%nat -> (c < length (nth i H []))%nat -> nth c (nth i gin []) 0 = 0)
  /\ (forall v c, (v < length W)%nat -> (c < length (nth v W []))%nat -> nth c (nth v gW []) 0 = 0)
  /\ (forall b, bias = Some b -> length b = length W -> forall v, (v < length W)%nat -> nth v gb 0 = 0).
Proof.
  intros cfg bt bv H W bias targets dout gin gW gb HW Hc Hl Hig Hb.
  assert (Ht : forall t, In t targets -> kept cfg t = true -> (0 <= t < Z.of_nat (length W))%Z)
    by (intros t Hin Hk; rewrite Hig in Hk by exact Hin; discriminate).
  split; [|split; [|split]].
  - intros Hr; destruct (ce_reduction cfg) eqn:E; [contradiction| |].
    + apply ce_sum_all_ignored; assumption.
    + apply (ce_mean_all_ignored cfg bt bv H W bias targets E Hig).
  - intros i c Hi Hci.
    eapply (is_derive_zero_fun _ _ _
             (fun x => upstream_all_ignored cfg bt bv (set_entry i c x H) W bias targets dout HW
                         ltac:(rewrite set_entry_length; assumption) Hig)).
    eapply ce_grad_input_is_derive; eassumption.
  - intros v c Hv Hcv.
    eapply (is_derive_zero_fun _ _ _
             (fun x => upstream_all_ignored cfg bt bv H (set_entry v c x W) bias targets dout
                         (set_entry_nil v c x W HW Hv) Hl Hig)).
    eapply ce_grad_weight_is_derive; eassumption.
  - intros b -> Hlb v Hv.
    eapply (is_derive_zero_fun _ _ _
             (fun x => upstream_all_ignored cfg bt bv H W (Some (set_nth v x b)) targets dout HW Hl Hig)).
    eapply ce_grad_bias_is_derive; eassumption.
Qed.
