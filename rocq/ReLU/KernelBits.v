(** * The ReLU kernel's integer tests of a float's bits are IEEE's comparisons.

    kernels/ojas_kernels/relu.py never does floating-point arithmetic: it reads each
    float as a signed integer [x] of its width (float32 as int32, bfloat16
    and float16 as int16) and computes, with [MAG = 2^(w-1) - 1] and
    [INF] the bits of +infinity,

    - [mag = x & MAG], [nan = mag > INF], [neg = x < 0];
    - [le0 = (neg && !nan) || x == 0]: the stored mask bit is [!le0];
    - [lt0 = neg && mag != 0 && !nan]: [relu] writes [0] where [lt0], [x]
      elsewhere (with the sign of zero kept, torch's CPU convention; the
      kernel's [KEEP_NEG_ZERO=False] variant, which also zeroes [-0.0],
      is not covered here: it changes the sign of a zero output only,
      never the mask).

    For the IEEE formats of Flocq's [Bits] (a fraction of [mw] bits, an
    exponent of [ew] bits; float32 is [mw = 23, ew = 8], bfloat16 [7, 8],
    float16 [10, 5]), with [x] the two's-complement reading of the bit
    pattern [b] and [binary_float_of_bits b] the float it encodes:

    - [kernel_mask_eq]: the kernel's mask bit is [mask_f] of the float
      (rocq/ReLU/Backward.v), i.e. [not (h <= 0)] as IEEE compares;
    - [kernel_relu_eq]: the float the kernel's output bits encode is
      [relu_f] of the input float;
    - [kernel_backward_eq]: selecting the gradient's bits or [0] is
      [mask_backward] on the floats;
    - [kernel_packed_backward_bitwise]: composed with
      [relu_packed_backward_bitwise], the kernel's whole backward from its
      packed bytes is torch's [threshold_backward] on [relu_f], element by
      element;
    - [float32_constants], [bfloat16_constants], [float16_constants]: the
      kernel's [MAG] and [INF] constants are [2^(mw+ew) - 1] and
      [(2^ew - 1) 2^mw] of the three formats, and each format satisfies
      the section's hypotheses. *)

From Coq Require Import ZArith List Lia Bool.
From Flocq Require Import Core IEEE754.Binary IEEE754.Bits.
From Ojas Require Import ReLU.Backward.
Open Scope Z_scope.

Section KernelBits.

Variables mw ew : Z.
Hypothesis Hmw : 0 < mw.
Hypothesis Hew : 0 < ew.
Hypothesis Hmax : mw + 1 < 2 ^ (ew - 1).

Notation prec := (mw + 1).
Notation emax := (2 ^ (ew - 1)).

(** The float a bit pattern [0 <= b < 2^(mw+ew+1)] encodes. *)
Definition of_bits (b : Z) : binary_float prec emax := binary_float_of_bits mw ew Hmw Hew Hmax b.

Definition two_mw : Z := 2 ^ mw.
Definition two_ew : Z := 2 ^ ew.
(** The sign bit's value, [2^(mw+ew)]. *)
Definition sign_bit : Z := two_mw * two_ew.
(** The bits of +infinity: the exponent all ones, the fraction 0. *)
Definition inf_bits : Z := (two_ew - 1) * two_mw.

(** The two's-complement reading of the pattern: what the kernel loads. *)
Definition signed (b : Z) : Z := if sign_bit <=? b then b - 2 * sign_bit else b.

(** The kernel's tests on the integer [x]. *)
Definition kmag (x : Z) : Z := Z.land x (sign_bit - 1).
Definition knan (x : Z) : bool := inf_bits <? kmag x.
Definition kle0 (x : Z) : bool := ((x <? 0) && negb (knan x)) || (x =? 0).
Definition klt0 (x : Z) : bool := (x <? 0) && negb (kmag x =? 0) && negb (knan x).
Definition kmask (x : Z) : bool := negb (kle0 x).

Lemma two_mw_ge_2 : 2 <= two_mw.
Proof.
  unfold two_mw; pose proof (proj1 (Z.pow_gt_1 2 mw ltac:(lia)) Hmw); lia.
Qed.

Lemma two_ew_ge_2 : 2 <= two_ew.
Proof.
  unfold two_ew; pose proof (proj1 (Z.pow_gt_1 2 ew ltac:(lia)) Hew); lia.
Qed.

Lemma sign_bit_pow : sign_bit = 2 ^ (mw + ew).
Proof. unfold sign_bit, two_mw, two_ew; rewrite Z.pow_add_r by lia; reflexivity. Qed.

(** The fields of a pattern, and the kernel's integers in terms of them. *)
Lemma split_bits_facts : forall b, 0 <= b < 2 * sign_bit ->
  let '(sx, mx, ex) := split_bits mw ew b in
  sx = (sign_bit <=? b) /\ 0 <= mx < two_mw /\ 0 <= ex < two_ew /\
  b = (if sx then sign_bit else 0) + mx + two_mw * ex /\
  kmag (signed b) = mx + two_mw * ex /\
  (signed b <? 0) = sx /\ (signed b =? 0) = (b =? 0).
Proof.
  intros b Hb.
  pose proof two_mw_ge_2 as HP; pose proof two_ew_ge_2 as HE.
  unfold split_bits; fold two_mw two_ew; change (two_mw * two_ew) with sign_bit.
  set (mx := b mod two_mw); set (ex := (b / two_mw) mod two_ew).
  assert (Hmx : 0 <= mx < two_mw) by (apply Z.mod_pos_bound; lia).
  assert (Hex : 0 <= ex < two_ew) by (apply Z.mod_pos_bound; lia).
  set (q := b / two_mw / two_ew).
  assert (Hq : q = b / sign_bit) by (unfold q, sign_bit; apply Z.div_div; lia).
  assert (Hdecomp : b = sign_bit * q + two_mw * ex + mx).
  { pose proof (Z.div_mod b two_mw ltac:(lia)) as H1.
    pose proof (Z.div_mod (b / two_mw) two_ew ltac:(lia)) as H2.
    fold mx in H1; fold ex in H2; fold q in H2.
    unfold sign_bit; nia. }
  assert (HS : 0 < sign_bit) by (unfold sign_bit; nia).
  assert (Hq01 : q = (if sign_bit <=? b then 1 else 0)).
  { rewrite Hq.
    pose proof (Z.mul_div_le b sign_bit HS).
    pose proof (Z.mul_succ_div_gt b sign_bit HS).
    destruct (Z.leb_spec sign_bit b); nia. }
  assert (Hsmall : 0 <= two_mw * ex + mx < sign_bit) by (unfold sign_bit; nia).
  assert (Hmag : kmag (signed b) = mx + two_mw * ex).
  { unfold kmag; replace (sign_bit - 1) with (Z.ones (mw + ew))
      by (rewrite Z.ones_equiv, <- sign_bit_pow; lia).
    rewrite Z.land_ones by lia; rewrite <- sign_bit_pow.
    replace (signed b) with (two_mw * ex + mx + (q - 2 * q) * sign_bit)
      by (unfold signed; rewrite Hq01 in Hdecomp; destruct (sign_bit <=? b); lia).
    rewrite Z_mod_plus_full, Z.mod_small by exact Hsmall; lia. }
  split; [reflexivity|]. split; [exact Hmx|]. split; [exact Hex|].
  split; [rewrite Hq01 in Hdecomp; destruct (sign_bit <=? b); lia|].
  split; [exact Hmag|].
  unfold signed; destruct (Z.leb_spec sign_bit b) as [Hle|Hlt].
  - split; [apply Z.ltb_lt; lia|].
    destruct (Z.eqb_spec (b - 2 * sign_bit) 0); destruct (Z.eqb_spec b 0); try reflexivity; exfalso; lia.
  - split; [apply Z.ltb_ge; lia|reflexivity].
Qed.

(** [x <= 0], [x < 0] of a float by its constructor (Flocq's [full_float]). *)
Definition le0_full (f : full_float) : bool :=
  match f with F754_zero _ => true | F754_infinity s => s | F754_nan _ _ => false | F754_finite s _ _ => s end.
Definition lt0_full (f : full_float) : bool :=
  match f with F754_zero _ => false | F754_infinity s => s | F754_nan _ _ => false | F754_finite s _ _ => s end.

Lemma le0_B2FF : forall x : binary_float prec emax, le0 prec emax x = le0_full (B2FF prec emax x).
Proof. intros [s|s|s pl H|s m e H]; destruct s; reflexivity. Qed.

Lemma lt0_B2FF : forall x : binary_float prec emax,
  match Bcompare prec emax x (fzero prec emax) with Some Lt => true | _ => false end = lt0_full (B2FF prec emax x).
Proof. intros [s|s|s pl H|s m e H]; destruct s; reflexivity. Qed.

Lemma B2FF_of_bits : forall b, B2FF prec emax (of_bits b) = binary_float_of_bits_aux mw ew b.
Proof. intros b; unfold of_bits, binary_float_of_bits; apply B2FF_FF2B. Qed.

(** The tactic of the case analysis: every comparison decided, then arithmetic. *)
Ltac decide_all :=
  unfold kle0, klt0, knan, inf_bits;
  repeat match goal with
         | |- context [Z.ltb ?a ?b] => destruct (Z.ltb_spec a b)
         | |- context [Z.eqb ?a ?b] => destruct (Z.eqb_spec a b)
         end; cbn; try reflexivity; exfalso; nia.

Lemma classify : forall b, 0 <= b < 2 * sign_bit ->
  le0_full (binary_float_of_bits_aux mw ew b) = kle0 (signed b) /\
  lt0_full (binary_float_of_bits_aux mw ew b) = klt0 (signed b).
Proof.
  intros b Hb.
  pose proof two_mw_ge_2 as HP; pose proof two_ew_ge_2 as HE.
  pose proof (split_bits_facts b Hb) as Hf.
  unfold binary_float_of_bits_aux; change (2 ^ ew) with two_ew; change (2 ^ mw) with two_mw.
  destruct (split_bits mw ew b) as [[sx mx] ex].
  destruct Hf as (Hsx & Hmx & Hex & Hb' & Hmag & Hneg & Hzero).
  unfold kle0, klt0, knan; rewrite Hmag, Hneg, Hzero.
  case Zeq_bool_spec; intros H0.
  - destruct mx as [|px|nx]; [| |pose proof (Pos2Z.neg_is_neg nx); lia]; subst ex;
      destruct sx; cbn [le0_full lt0_full]; split; decide_all.
  - case Zeq_bool_spec; intros H1.
    + destruct mx as [|px|nx]; [| |pose proof (Pos2Z.neg_is_neg nx); lia]; subst ex;
        destruct sx; cbn [le0_full lt0_full]; split; decide_all.
    + destruct (mx + two_mw) eqn:Hp; [lia| |pose proof (Pos2Z.neg_is_neg p); lia].
      destruct sx; cbn [le0_full lt0_full]; split; decide_all.
Qed.

(** The kernel's mask bit is the IEEE [not (h <= 0)] of the float. *)
Theorem kernel_mask_eq : forall b, 0 <= b < 2 * sign_bit ->
  kmask (signed b) = mask_f prec emax (of_bits b).
Proof.
  intros b Hb; unfold kmask, mask_f; rewrite le0_B2FF, B2FF_of_bits.
  rewrite (proj1 (classify b Hb)); reflexivity.
Qed.

Lemma of_bits_0 : of_bits 0 = fzero prec emax.
Proof.
  apply B2FF_inj; rewrite B2FF_of_bits.
  pose proof two_mw_ge_2; pose proof two_ew_ge_2.
  unfold binary_float_of_bits_aux, split_bits; fold two_mw two_ew.
  rewrite !Zmod_0_l.
  replace (two_mw * two_ew <=? 0) with false by (symmetry; apply Z.leb_gt; nia).
  reflexivity.
Qed.

(** The float the kernel's output bits ([0] where [lt0], else the input's) encode is [relu_f]. *)
Theorem kernel_relu_eq : forall b, 0 <= b < 2 * sign_bit ->
  of_bits (if klt0 (signed b) then 0 else b) = relu_f prec emax (of_bits b).
Proof.
  intros b Hb; unfold relu_f.
  pose proof (lt0_B2FF (of_bits b)) as H.
  rewrite B2FF_of_bits, (proj2 (classify b Hb)) in H.
  destruct (klt0 (signed b)); destruct (Bcompare prec emax (of_bits b) (fzero prec emax)) as [[| |]|];
    try discriminate H; try reflexivity; apply of_bits_0.
Qed.

(** The backward's selection of the gradient's bits or [0] is [mask_backward] on the floats. *)
Theorem kernel_backward_eq : forall (m : bool) gb,
  of_bits (if m then gb else 0) = mask_backward prec emax m (of_bits gb).
Proof. intros [|] gb; [reflexivity|apply of_bits_0]. Qed.

(** The whole kernel: the mask bits of the input patterns [bs] packed in the
    forward, and in the backward each gradient pattern [gs_i] or [0] selected
    by its unpacked bit, encode torch's [threshold_backward] of the gradient
    float on [relu_f] of the input float. *)
Theorem kernel_packed_backward_bitwise : forall bs gs i,
  Forall (fun b => 0 <= b < 2 * sign_bit) bs -> (i < length bs)%nat ->
  of_bits (if unpack (pack (map (fun b => kmask (signed b)) bs)) i then nth i gs 0 else 0)
  = threshold_backward prec emax (of_bits (nth i gs 0)) (relu_f prec emax (of_bits (nth i bs 0))).
Proof.
  intros bs gs i Hall Hi.
  assert (Hn : forall l, nth i (map of_bits l) (fzero prec emax) = of_bits (nth i l 0)).
  { intros l; destruct (Nat.lt_ge_cases i (length l)) as [Hl|Hl].
    - rewrite (nth_indep _ (fzero prec emax) (of_bits 0)) by (rewrite map_length; exact Hl).
      apply map_nth.
    - rewrite nth_overflow, (nth_overflow l) by (rewrite ?map_length; exact Hl).
      symmetry; apply of_bits_0. }
  rewrite kernel_backward_eq.
  replace (map (fun b => kmask (signed b)) bs) with (map (mask_f prec emax) (map of_bits bs)).
  - pose proof (relu_packed_backward_bitwise prec emax (map of_bits bs) (map of_bits gs) i) as H.
    rewrite map_length in H; specialize (H Hi); rewrite !Hn in H; exact H.
  - rewrite map_map; apply map_ext_Forall.
    eapply Forall_impl; [|exact Hall].
    intros b Hb; symmetry; apply kernel_mask_eq, Hb.
Qed.

End KernelBits.

(** ** The three formats and the kernel's constants *)

Theorem float32_constants :
  0 < 23 /\ 0 < 8 /\ 23 + 1 < 2 ^ (8 - 1) /\
  sign_bit 23 8 - 1 = 2147483647 (* 0x7FFFFFFF *) /\ inf_bits 23 8 = 2139095040 (* 0x7F800000 *) /\
  2 * sign_bit 23 8 = 2 ^ 32.
Proof. vm_compute; repeat split; reflexivity. Qed.

Theorem bfloat16_constants :
  0 < 7 /\ 0 < 8 /\ 7 + 1 < 2 ^ (8 - 1) /\
  sign_bit 7 8 - 1 = 32767 (* 0x7FFF *) /\ inf_bits 7 8 = 32640 (* 0x7F80 *) /\ 2 * sign_bit 7 8 = 2 ^ 16.
Proof. vm_compute; repeat split; reflexivity. Qed.

Theorem float16_constants :
  0 < 10 /\ 0 < 5 /\ 10 + 1 < 2 ^ (5 - 1) /\
  sign_bit 10 5 - 1 = 32767 (* 0x7FFF *) /\ inf_bits 10 5 = 31744 (* 0x7C00 *) /\ 2 * sign_bit 10 5 = 2 ^ 16.
Proof. vm_compute; repeat split; reflexivity. Qed.
