(** * The backward of ReLU from a packed 1-bit mask, and of ReLU² from the saved [relu h].

    What the code runs (ojas_ref/functional/relu.py, kernels/ojas_kernels/relu.py):

    - ReLU forward: [r = relu h] (torch's [F.relu]) and the mask
      [m = not (h <= 0)] packed 8 bits per byte ([pack], bit [j] of byte
      [k] is element [8 k + j], the tail of the last byte zero); only the
      bytes are saved.  Backward: [dh_i = if unpack bytes i then g_i else +0]
      ([mask_backward]).  torch's own backward is
      [threshold_backward g r 0 = if r <= 0 then +0 else g] on the saved
      output [r] (derivatives.yaml: [relu: threshold_backward(grad, result, 0)]).
    - ReLU² ([relu h * relu h], Hugging Face's "relu2") followed by a linear
      map: only [r = relu h] is saved (not the square the linear map would
      save); the backward recomputes [s = r * r] by the forward's own
      operation and computes [dh = if r <= 0 then 0 else ds * (2 r)].

    Theorems:

    - [unpack_pack]: unpacking the packed bytes gives back every bit
      ([pack_byte_bound]: each byte is in [0, 256)); [unpack_pack_tail]: the
      padding bits of the last byte are zero;
    - over the reals, [relu_backward_eq_derive]: where relu is
      differentiable ([h <> 0]) the masked gradient is [g * relu' h];
      [relu_not_ex_derive_0]: relu is not differentiable at 0;
      [relu_backward_at_0]: there the mask is 0 and the gradient 0, which
      is a subgradient of relu at 0 (torch's convention);
    - in IEEE floats (Flocq's [binary_float], any precision and range, NaN
      and signed zeros included), [relu_mask_backward_bitwise]: the backward
      from the mask is the very float torch's [threshold_backward] returns
      (structural equality: the same bits, NaN payloads included);
      [relu_packed_backward_bitwise]: the same for the whole tensor through
      [pack] and [unpack]; [relu_mask_backward_exact]: for finite inputs its
      value is exactly the real masked gradient (no rounding: [g] or [+0]),
      so [relu_float_backward_eq_derive]: exactly [g * relu' h] where
      [h <> 0]; [relu_float_forward_exact]: the float relu is the real one;
    - ReLU² over the reals: [relu2_is_derive] ([(relu h)^2] is
      differentiable everywhere with derivative [2 relu h]) and
      [relu2_backward_eq_vjp]: the backward from [r = relu h] alone is
      [ds * d/dh (relu h)^2]; [relu2_linear_backward_eq_vjp]: with the linear
      map after it ([y = W (relu h)^2 + b]), the code's [dh], [dW] (the square
      recomputed from [r]) and [db] are the vector-Jacobian products of [y] in
      [h], [W] and [b].  No theorem covers the rounding of ReLU²'s
      backward: the code runs torch's operations in torch's order
      (tests/test_relu.py checks it bit for bit).

    The maps are elementwise, so their Jacobians are diagonal and these
    scalar identities are the whole vector-Jacobian product, entry by entry. *)

From Coq Require Import Reals ZArith List Arith Lia Lra.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
From Flocq Require Import Core.
From Flocq Require Import IEEE754.Binary.
Import ListNotations.
Open Scope nat_scope.

(** ** Packing bits, 8 to a byte *)

(** A list of bits as a number, bit [j] of the list the [2^j] bit. *)
Definition bits_to_Z (l : list bool) : Z :=
  fold_right (fun b z => (2 * z + Z.b2z b)%Z) 0%Z l.

Lemma bits_to_Z_testbit : forall l j,
  Z.testbit (bits_to_Z l) (Z.of_nat j) = nth j l false.
Proof.
  induction l as [|b l IH]; intros j; cbn [bits_to_Z fold_right].
  - destruct j; reflexivity.
  - destruct j as [|j].
    + apply Z.testbit_0_r.
    + rewrite Nat2Z.inj_succ, Z.testbit_succ_r by lia. apply IH.
Qed.

Lemma bits_to_Z_bound : forall l,
  (0 <= bits_to_Z l < 2 ^ Z.of_nat (length l))%Z.
Proof.
  induction l as [|b l IH]; cbn [bits_to_Z fold_right length].
  - cbn; lia.
  - rewrite Nat2Z.inj_succ, Z.pow_succ_r by lia.
    fold (bits_to_Z l). destruct b; cbn [Z.b2z]; lia.
Qed.

(** Byte [k] of the mask [m]: elements [8 k .. 8 k + 7], missing ones 0. *)
Definition pack_byte (m : list bool) (k : nat) : Z :=
  bits_to_Z (map (fun j => nth (8 * k + j) m false) (seq 0 8)).

(** The packed mask: [ceil (n / 8)] bytes. *)
Definition pack (m : list bool) : list Z :=
  map (pack_byte m) (seq 0 ((length m + 7) / 8)).

(** Bit [i] of the packed bytes: [(bytes[i / 8] >> (i mod 8)) & 1]. *)
Definition unpack (bytes : list Z) (i : nat) : bool :=
  Z.testbit (nth (i / 8) bytes 0%Z) (Z.of_nat (i mod 8)).

Lemma pack_length : forall m, length (pack m) = (length m + 7) / 8.
Proof. intros m; unfold pack; rewrite map_length, seq_length; reflexivity. Qed.

Theorem pack_byte_bound : forall m k, (0 <= pack_byte m k < 256)%Z.
Proof.
  intros m k; unfold pack_byte.
  pose proof (bits_to_Z_bound (map (fun j => nth (8 * k + j) m false) (seq 0 8))) as H.
  rewrite map_length, seq_length in H; exact H.
Qed.

Lemma nth_map_seq : forall (A : Type) (f : nat -> A) n j d, j < n -> nth j (map f (seq 0 n)) d = f j.
Proof.
  intros A f n j d Hj.
  rewrite (nth_indep _ d (f 0)) by (rewrite map_length, seq_length; exact Hj).
  rewrite map_nth, seq_nth by exact Hj; reflexivity.
Qed.

(** Every bit of every byte, the padding included, is the mask's (false past its end). *)
Lemma unpack_pack_all : forall m i,
  i < 8 * length (pack m) -> unpack (pack m) i = nth i m false.
Proof.
  intros m i Hi; rewrite pack_length in Hi; unfold unpack, pack.
  assert (Hk : i / 8 < (length m + 7) / 8).
  { apply Nat.div_lt_upper_bound; lia. }
  rewrite nth_map_seq by exact Hk; unfold pack_byte.
  rewrite bits_to_Z_testbit.
  assert (Hj : i mod 8 < 8) by (apply Nat.mod_upper_bound; lia).
  rewrite nth_map_seq by exact Hj.
  rewrite <- (Nat.div_mod i 8) by lia; reflexivity.
Qed.

(** [unpack (pack m) = m]: the backward reads back exactly the forward's mask. *)
Theorem unpack_pack : forall m i, i < length m -> unpack (pack m) i = nth i m false.
Proof.
  intros m i Hi; apply unpack_pack_all; rewrite pack_length.
  pose proof (Nat.div_mod (length m + 7) 8 ltac:(lia)).
  pose proof (Nat.mod_upper_bound (length m + 7) 8 ltac:(lia)); lia.
Qed.

Theorem unpack_pack_tail : forall m i,
  length m <= i < 8 * length (pack m) -> unpack (pack m) i = false.
Proof.
  intros m i Hi; rewrite unpack_pack_all by lia; apply nth_overflow; lia.
Qed.

(** ** ReLU over the reals *)

Open Scope R_scope.

Definition relu (x : R) : R := Rmax 0 x.

(** The mask the code stores: [not (x <= 0)]. *)
Definition mask_R (x : R) : bool := negb (Rle_bool x 0).

(** The backward from a mask bit: [g] or [0]. *)
Definition masked_grad (m : bool) (g : R) : R := if m then g else 0.

Lemma relu_is_derive_pos : forall x, 0 < x -> is_derive relu x 1.
Proof.
  intros x Hx.
  apply (is_derive_ext_loc (fun t => t)).
  - apply (locally_interval _ x 0 p_infty); [exact Hx|exact I|].
    intros t Ht _; cbn in Ht; unfold relu; rewrite Rmax_right by lra; reflexivity.
  - apply (is_derive_id x).
Qed.

Lemma relu_is_derive_neg : forall x, x < 0 -> is_derive relu x 0.
Proof.
  intros x Hx.
  apply (is_derive_ext_loc (fun _ => 0)).
  - apply (locally_interval _ x m_infty 0); [exact I|exact Hx|].
    intros t _ Ht; cbn in Ht; unfold relu; rewrite Rmax_left by lra; reflexivity.
  - apply (is_derive_const 0 x).
Qed.

(** Where relu is differentiable, the masked gradient is [g * relu' x]. *)
Theorem relu_backward_eq_derive : forall x g, x <> 0 ->
  ex_derive relu x /\ masked_grad (mask_R x) g = g * Derive relu x.
Proof.
  intros x g Hx; unfold masked_grad, mask_R.
  destruct (Rlt_or_le 0 x) as [Hp|Hn].
  - split; [eexists; apply relu_is_derive_pos, Hp|].
    rewrite (is_derive_unique _ _ _ (relu_is_derive_pos x Hp)), Rle_bool_false by exact Hp.
    cbn; ring.
  - assert (Hn' : x < 0) by lra.
    split; [eexists; apply relu_is_derive_neg, Hn'|].
    rewrite (is_derive_unique _ _ _ (relu_is_derive_neg x Hn')), Rle_bool_true by exact Hn.
    cbn; ring.
Qed.

(** relu is not differentiable at 0: its derivative would be 0 (a minimum
    of relu) and 1 (a minimum of [relu t - t]). *)
Theorem relu_not_ex_derive_0 : ~ ex_derive relu 0.
Proof.
  intros Hd; apply ex_derive_Reals_0 in Hd.
  pose proof (deriv_minimum relu (-1) 1 0 Hd ltac:(lra) ltac:(lra)) as H0.
  assert (Hmin : forall t, -1 < t -> t < 1 -> relu 0 <= relu t).
  { intros t _ _; unfold relu; rewrite (Rmax_left 0 0) by lra; apply Rmax_l. }
  specialize (H0 Hmin).
  set (pr := derivable_pt_minus relu id 0 Hd (derivable_pt_id 0)).
  pose proof (deriv_minimum (relu - id)%F (-1) 1 0 pr ltac:(lra) ltac:(lra)) as H1.
  assert (Hmin1 : forall t, -1 < t -> t < 1 -> (relu - id)%F 0 <= (relu - id)%F t).
  { intros t _ _; unfold minus_fct, id, relu.
    rewrite (Rmax_left 0 0) by lra.
    destruct (Rle_dec 0 t); [rewrite Rmax_right by lra | rewrite Rmax_left by lra]; lra. }
  specialize (H1 Hmin1).
  unfold pr in H1; rewrite derive_pt_minus, derive_pt_id, H0 in H1; lra.
Qed.

(** At 0 the mask is 0 and the gradient 0 (torch's [relu'(0) = 0]); 0 is a
    subgradient of relu at 0 (relu lies above the line of slope 0 through
    [(0, relu 0)]). *)
Theorem relu_backward_at_0 : forall g,
  mask_R 0 = false /\ masked_grad (mask_R 0) g = 0 /\
  forall y, relu 0 + 0 * (y - 0) <= relu y.
Proof.
  intros g; unfold mask_R, masked_grad; rewrite Rle_bool_true by lra.
  split; [reflexivity|split; [reflexivity|]].
  intros y; unfold relu; rewrite (Rmax_left 0 0) by lra.
  pose proof (Rmax_l 0 y); lra.
Qed.

(** ** ReLU in IEEE floats *)

Section Floats.

Context (prec emax : Z).

Notation float := (binary_float prec emax).

Definition fzero : float := B754_zero prec emax false.

(** [x <= 0] as an IEEE comparison: false for NaN. *)
Definition le0 (x : float) : bool :=
  match Bcompare prec emax x fzero with Some Lt | Some Eq => true | _ => false end.

(** torch's relu ([clamp_min(x, 0)]): [+0] for [x < 0]; [x] itself
    otherwise (NaN, [-0] and [+0] kept as they are). *)
Definition relu_f (x : float) : float :=
  match Bcompare prec emax x fzero with Some Lt => fzero | _ => x end.

(** The stored bit: [not (x <= 0)] (true for NaN, as torch passes the gradient there). *)
Definition mask_f (x : float) : bool := negb (le0 x).

(** torch's [threshold_backward(g, r, 0)]: [r <= 0 ? 0 : g]. *)
Definition threshold_backward (g r : float) : float := if le0 r then fzero else g.

(** The code's backward from a mask bit: a selection, no arithmetic. *)
Definition mask_backward (m : bool) (g : float) : float := if m then g else fzero.

Lemma le0_relu : forall x, le0 (relu_f x) = le0 x.
Proof.
  intros x; unfold le0, relu_f.
  destruct (Bcompare prec emax x fzero) as [[| |]|] eqn:E; try rewrite E; reflexivity.
Qed.

(** The mask computed from the output [r] (the reference) is the mask computed from [h] (the kernel). *)
Theorem mask_f_relu : forall x, mask_f (relu_f x) = mask_f x.
Proof. intros x; unfold mask_f; rewrite le0_relu; reflexivity. Qed.

(** The backward from the mask bit is torch's [threshold_backward] on the
    saved output, bit for bit, for every float [h] and [g]. *)
Theorem relu_mask_backward_bitwise : forall h g,
  mask_backward (mask_f h) g = threshold_backward g (relu_f h).
Proof.
  intros h g; unfold mask_backward, threshold_backward, mask_f; rewrite le0_relu.
  destruct (le0 h); reflexivity.
Qed.

(** The whole tensor: the mask of [hs] packed in the forward, unpacked
    element by element in the backward. *)
Theorem relu_packed_backward_bitwise : forall hs gs i,
  (i < length hs)%nat ->
  mask_backward (unpack (pack (map mask_f hs)) i) (nth i gs fzero)
  = threshold_backward (nth i gs fzero) (relu_f (nth i hs fzero)).
Proof.
  intros hs gs i Hi.
  rewrite unpack_pack by (rewrite map_length; exact Hi).
  rewrite (nth_indep _ false (mask_f fzero)) by (rewrite map_length; exact Hi).
  rewrite map_nth; apply relu_mask_backward_bitwise.
Qed.

Lemma le0_correct : forall x, is_finite prec emax x = true -> le0 x = Rle_bool (B2R prec emax x) 0.
Proof.
  intros x Hx; unfold le0.
  rewrite (Bcompare_correct prec emax) by (exact Hx || reflexivity).
  replace (B2R prec emax fzero) with 0 by reflexivity.
  destruct (Rcompare_spec (B2R prec emax x) 0) as [H|H|H].
  - rewrite Rle_bool_true by lra; reflexivity.
  - rewrite Rle_bool_true by lra; reflexivity.
  - rewrite Rle_bool_false by lra; reflexivity.
Qed.

(** No rounding: for finite [h] and [g], the float backward's value is the
    real masked gradient of the real values. *)
Theorem relu_mask_backward_exact : forall h g,
  is_finite prec emax h = true -> is_finite prec emax g = true ->
  mask_f h = mask_R (B2R prec emax h) /\
  B2R prec emax (mask_backward (mask_f h) g) = masked_grad (mask_R (B2R prec emax h)) (B2R prec emax g).
Proof.
  intros h g Hh Hg; unfold mask_f, mask_R; rewrite le0_correct by exact Hh.
  split; [reflexivity|].
  unfold mask_backward, masked_grad; destruct (negb (Rle_bool (B2R prec emax h) 0)); reflexivity.
Qed.

(** Hence, where relu is differentiable, exactly [g * relu' h]. *)
Theorem relu_float_backward_eq_derive : forall h g,
  is_finite prec emax h = true -> is_finite prec emax g = true -> B2R prec emax h <> 0 ->
  B2R prec emax (mask_backward (mask_f h) g) = B2R prec emax g * Derive relu (B2R prec emax h).
Proof.
  intros h g Hh Hg Hz.
  destruct (relu_mask_backward_exact h g Hh Hg) as [_ ->].
  apply relu_backward_eq_derive, Hz.
Qed.

(** The float forward is the real relu of the input, exactly. *)
Theorem relu_float_forward_exact : forall h,
  is_finite prec emax h = true -> B2R prec emax (relu_f h) = relu (B2R prec emax h).
Proof.
  intros h Hh; unfold relu_f, relu.
  rewrite (Bcompare_correct prec emax) by (exact Hh || reflexivity).
  replace (B2R prec emax fzero) with 0 by reflexivity.
  destruct (Rcompare_spec (B2R prec emax h) 0) as [H|H|H].
  - rewrite Rmax_left by lra; reflexivity.
  - rewrite H, Rmax_left by lra; reflexivity.
  - rewrite Rmax_right by lra; reflexivity.
Qed.

End Floats.

(** ** ReLU² over the reals *)

Definition relu2 (x : R) : R := relu x * relu x.

Lemma relu2_is_derive_pos : forall x, 0 < x -> is_derive relu2 x (2 * relu x).
Proof.
  intros x Hx.
  apply (is_derive_ext_loc (fun t => t * t)).
  - apply (locally_interval _ x 0 p_infty); [exact Hx|exact I|].
    intros t Ht _; cbn in Ht; unfold relu2, relu; rewrite Rmax_right by lra; reflexivity.
  - unfold relu; rewrite Rmax_right by lra.
    auto_derive; [exact I|ring].
Qed.

Lemma relu2_is_derive_neg : forall x, x < 0 -> is_derive relu2 x (2 * relu x).
Proof.
  intros x Hx.
  apply (is_derive_ext_loc (fun _ => 0)).
  - apply (locally_interval _ x m_infty 0); [exact I|exact Hx|].
    intros t _ Ht; cbn in Ht; unfold relu2, relu; rewrite Rmax_left by lra; now rewrite Rmult_0_r.
  - unfold relu; rewrite Rmax_left by lra; rewrite Rmult_0_r; apply (is_derive_const 0 x).
Qed.

(** At 0, [(relu t)^2 <= t^2], so the difference quotient tends to 0. *)
Lemma relu2_is_derive_0 : is_derive relu2 0 (2 * relu 0).
Proof.
  replace (2 * relu 0) with 0 by (unfold relu; rewrite Rmax_left by lra; ring).
  apply is_derive_Reals; intros eps Heps.
  exists (mkposreal eps Heps); intros t Ht0 Ht; cbn [pos] in Ht.
  unfold relu2, relu; rewrite Rplus_0_l, (Rmax_left 0 0), Rmult_0_l, Rminus_0_r, Rminus_0_r by lra.
  destruct (Rle_dec 0 t).
  - rewrite Rmax_right by lra.
    replace (t * t / t) with t by (field; exact Ht0).
    exact Ht.
  - rewrite Rmax_left by lra.
    replace (0 * 0 / t) with 0 by (field; exact Ht0).
    rewrite Rabs_R0; exact Heps.
Qed.

(** [(relu x)^2] is differentiable everywhere, with derivative [2 relu x]. *)
Theorem relu2_is_derive : forall x, is_derive relu2 x (2 * relu x).
Proof.
  intros x; destruct (Rtotal_order x 0) as [H|[H|H]].
  - apply relu2_is_derive_neg, H.
  - subst x; apply relu2_is_derive_0.
  - apply relu2_is_derive_pos, H.
Qed.

(** The backward the code runs from the saved [r = relu h] and the incoming
    [ds]: torch's [threshold_backward(ds * (2 r), r, 0)]. *)
Definition relu2_backward (r ds : R) : R := masked_grad (mask_R r) (ds * (2 * r)).

(** From [r = relu h] alone it is the vector-Jacobian product of [(relu h)^2];
    and the square the linear map needs is recomputed from the same [r]. *)
Theorem relu2_backward_eq_vjp : forall h ds,
  ex_derive relu2 h /\
  relu2_backward (relu h) ds = ds * Derive relu2 h /\
  relu2 h = relu h * relu h.
Proof.
  intros h ds.
  split; [eexists; apply relu2_is_derive|].
  split; [|reflexivity].
  rewrite (is_derive_unique _ _ _ (relu2_is_derive h)).
  unfold relu2_backward, masked_grad, mask_R.
  destruct (Rle_bool_spec (relu h) 0) as [Hle|Hgt]; cbn [negb]; [|ring].
  assert (Hz : relu h = 0) by (unfold relu in *; pose proof (Rmax_l 0 h); lra).
  rewrite Hz; ring.
Qed.

(** ** ReLU² and the linear map after it, over the reals

    [relu_squared_linear] computes [y k = sum_i W k i * (relu (h i))^2 + b k]
    ([i] from 0 to [n]), saves [r i = relu (h i)] and, in the backward,
    computes [ds i = sum_k dy k * W k i] ([k] from 0 to [m]: the linear map's
    input gradient), [dh i = relu2_backward (r i) (ds i)],
    [dW k i = dy k * (r i * r i)] (the square recomputed from [r]) and
    [db k = dy k].  [relu2_linear_backward_eq_vjp]: these are the
    vector-Jacobian products of [y] in [h], [W] and [b], each partial
    derivative taken with the other arguments fixed. *)

Definition upd (v : nat -> R) (j : nat) (t : R) : nat -> R :=
  fun i => if Nat.eq_dec i j then t else v i.

Definition upd2 (W : nat -> nat -> R) (k j : nat) (t : R) : nat -> nat -> R :=
  fun k' => if Nat.eq_dec k' k then upd (W k') j t else W k'.

Definition relu2_linear (n : nat) (W : nat -> nat -> R) (b h : nat -> R) (k : nat) : R :=
  sum_n (fun i => W k i * relu2 (h i)) n + b k.

(** The code's backward. *)
Definition relu2_linear_grad_h (n m : nat) (W : nat -> nat -> R) (h dy : nat -> R) (j : nat) : R :=
  relu2_backward (relu (h j)) (sum_n (fun k => dy k * W k j) m).
Definition relu2_linear_grad_W (h dy : nat -> R) (k j : nat) : R := dy k * (relu (h j) * relu (h j)).
Definition relu2_linear_grad_b (dy : nat -> R) (k : nat) : R := dy k.

Lemma sum_n_indicator : forall (c : R) j n, (j <= n)%nat ->
  sum_n (fun i => if Nat.eq_dec i j then c else 0) n = c.
Proof.
  intros c j n; induction n as [|n IH]; intros Hj.
  - rewrite sum_O; destruct (Nat.eq_dec 0 j); [reflexivity|lia].
  - rewrite sum_Sn; destruct (Nat.eq_dec (S n) j) as [E|E].
    + subst j; rewrite (sum_n_ext_loc _ (fun _ => 0)), sum_n_const.
      * change (plus (INR (S n) * 0) c = c); unfold plus; cbn; ring.
      * intros i Hi; destruct (Nat.eq_dec i (S n)); [lia|reflexivity].
    + rewrite IH by lia; change (plus c 0 = c); unfold plus; cbn; ring.
Qed.

(** The sum with one summand varying: its derivative is that summand's. *)
Lemma is_derive_sum_upd : forall (f : nat -> R -> R) (v : nat -> R) j n d, (j <= n)%nat ->
  is_derive (f j) (v j) d ->
  is_derive (fun t => sum_n (fun i => f i (upd v j t i)) n) (v j) d.
Proof.
  intros f v j n d Hj Hd.
  rewrite <- (sum_n_indicator d j n Hj).
  apply (is_derive_sum_n (fun i t => f i (upd v j t i))).
  intros i _; unfold upd; destruct (Nat.eq_dec i j) as [->|E].
  - exact Hd.
  - apply (is_derive_const (f i (v i)) (v j)).
Qed.

Lemma relu2_backward_relu : forall x ds, relu2_backward (relu x) ds = ds * (2 * relu x).
Proof.
  intros x ds; unfold relu2_backward, masked_grad, mask_R.
  destruct (Rle_bool_spec (relu x) 0) as [Hle|Hgt]; cbn [negb]; [|reflexivity].
  assert (Hz : relu x = 0) by (unfold relu in *; pose proof (Rmax_l 0 x); lra).
  rewrite Hz; ring.
Qed.

Lemma relu2_linear_is_derive_h : forall n W b h k j, (j <= n)%nat ->
  is_derive (fun t => relu2_linear n W b (upd h j t) k) (h j) (W k j * (2 * relu (h j))).
Proof.
  intros n W b h k j Hj; unfold relu2_linear.
  replace (W k j * (2 * relu (h j))) with (plus (W k j * (2 * relu (h j))) zero)
    by (unfold plus, zero; cbn; ring).
  apply (is_derive_plus (fun t => sum_n (fun i => W k i * relu2 (upd h j t i)) n) (fun _ => b k)).
  - apply (is_derive_sum_upd (fun i x => W k i * relu2 x) h j n _ Hj).
    apply is_derive_scal, relu2_is_derive.
  - apply (is_derive_const (b k) (h j)).
Qed.

Lemma relu2_linear_is_derive_W : forall n W b h k j, (j <= n)%nat ->
  is_derive (fun t => relu2_linear n (upd2 W k j t) b h k) (W k j) (relu (h j) * relu (h j)).
Proof.
  intros n W b h k j Hj; unfold relu2_linear, upd2.
  destruct (Nat.eq_dec k k) as [_|E]; [|contradiction].
  replace (relu (h j) * relu (h j)) with (plus (relu (h j) * relu (h j)) zero)
    by (unfold plus, zero; cbn; ring).
  apply (is_derive_plus (fun t => sum_n (fun i => upd (W k) j t i * relu2 (h i)) n) (fun _ => b k));
    [|apply (is_derive_const (b k) (W k j))].
  apply (is_derive_sum_upd (fun i t => t * relu2 (h i)) (W k) j n _ Hj).
  replace (relu (h j) * relu (h j)) with (1 * relu2 (h j)) by (unfold relu2; ring).
  apply (is_derive_scal_l (fun t => t) (W k j) 1 (relu2 (h j))).
  apply (is_derive_id (W k j)).
Qed.

Lemma relu2_linear_is_derive_b : forall n W b h k,
  is_derive (fun t => relu2_linear n W (upd b k t) h k) (b k) 1.
Proof.
  intros n W b h k; unfold relu2_linear, upd.
  destruct (Nat.eq_dec k k) as [_|E]; [|contradiction].
  auto_derive; [exact I|ring].
Qed.

(** The backward from [r = relu h] (and [dy], [W]) is the vector-Jacobian
    product of [y = W (relu h)^2 + b] in every argument. *)
Theorem relu2_linear_backward_eq_vjp : forall n m W b h dy,
  (forall j, (j <= n)%nat ->
     relu2_linear_grad_h n m W h dy j
     = sum_n (fun k => dy k * Derive (fun t => relu2_linear n W b (upd h j t) k) (h j)) m) /\
  (forall k j, (j <= n)%nat ->
     relu2_linear_grad_W h dy k j = dy k * Derive (fun t => relu2_linear n (upd2 W k j t) b h k) (W k j)) /\
  (forall k, relu2_linear_grad_b dy k = dy k * Derive (fun t => relu2_linear n W (upd b k t) h k) (b k)).
Proof.
  intros n m W b h dy; split; [|split].
  - intros j Hj; unfold relu2_linear_grad_h; rewrite relu2_backward_relu.
    transitivity (sum_n (fun k => mult (dy k * W k j) (2 * relu (h j))) m).
    + rewrite sum_n_mult_r; reflexivity.
    + apply sum_n_ext; intros k.
      replace (Derive (fun t => relu2_linear n W b (upd h j t) k) (h j)) with (W k j * (2 * relu (h j)))
        by (symmetry; apply is_derive_unique, relu2_linear_is_derive_h, Hj).
      unfold mult; cbn; ring.
  - intros k j Hj; unfold relu2_linear_grad_W.
    replace (Derive (fun t => relu2_linear n (upd2 W k j t) b h k) (W k j)) with (relu (h j) * relu (h j))
      by (symmetry; apply is_derive_unique, relu2_linear_is_derive_W, Hj).
    reflexivity.
  - intros k; unfold relu2_linear_grad_b.
    replace (Derive (fun t => relu2_linear n W (upd b k t) h k) (b k)) with 1
      by (symmetry; apply is_derive_unique, relu2_linear_is_derive_b).
    ring.
Qed.
