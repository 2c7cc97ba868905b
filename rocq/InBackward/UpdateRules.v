(** * SGD and AdamW as per-parameter update rules.

    The rules follow [torch.optim.SGD] and [torch.optim.AdamW]
    ([_single_tensor_sgd] / [_single_tensor_adam] with
    [decoupled_weight_decay=True], [maximize=False], [amsgrad=False]),
    operation by operation, on one scalar of a parameter (the rules are
    elementwise; the oracle maps them over a tensor).

    They are written over [OptOps]: the [ScalarOps] record plus [sqrt],
    [pow] (the Python [beta ** step] of the bias correction) and [fma]
    ([fma a b c = a * b + c] rounded once).  PyTorch's CPU kernels for
    [add(alpha=)], [addcmul] and [lerp] are fused multiply-adds (checked
    bit for bit against torch 2.13 CPU on float64), so the rules use
    [fma] exactly there; [addcdiv] and the division by a Python scalar
    are not fused.  With [fma = Float.fma] and [pow b n = b ** n] the
    extracted rules reproduced [torch.optim.SGD] / [AdamW] bit for bit
    on the float64 cases tried, but that is not guaranteed: the
    vectorised [torch.sqrt] on CPU is not always correctly rounded (1
    ulp off on some float64 inputs), and other backends (CUDA, the
    foreach and fused paths) contract and round differently.  Skipped
    branches: torch skips the weight decay when [weight_decay == 0];
    here [fma 0 p g = g] and [p * (1 - lr * 0) = p] (up to the sign of
    a zero).  Over [R] ([R_opt_ops]) the rules are the formulas of
    the documentation ([sgd_update_R], [adamw_update_R]).

    Arguments of every rule: configuration, parameter value, optimizer
    state, gradient; result: (new value, new state).  *)

From Coq Require Import Reals List Lra.
From Ojas Require Import ScalarOps.
Open Scope R_scope.

Record OptOps (T : Type) : Type := mk_opt_ops {
  oo_sc : ScalarOps T;
  oo_sqrt : T -> T;
  oo_pow : T -> nat -> T;          (** [b ^ t] *)
  oo_fma : T -> T -> T -> T        (** [fma a b c = a * b + c] *)
}.
Arguments mk_opt_ops {T}. Arguments oo_sc {T}. Arguments oo_sqrt {T}.
Arguments oo_pow {T}. Arguments oo_fma {T}.

(** Exact real instance. *)
Definition R_opt_ops : OptOps R :=
  mk_opt_ops R_ops sqrt pow (fun a b c => a * b + c).

(** ** SGD *)

(** [momentum = None] is [momentum = 0] (no buffer is created). *)
Record sgd_config (T : Type) : Type := mk_sgd_config {
  sgd_lr : T;
  sgd_momentum : option T;
  sgd_dampening : T;
  sgd_weight_decay : T;
  sgd_nesterov : bool
}.
Arguments mk_sgd_config {T}. Arguments sgd_lr {T}. Arguments sgd_momentum {T}.
Arguments sgd_dampening {T}. Arguments sgd_weight_decay {T}. Arguments sgd_nesterov {T}.

Section Rules.
Context {T : Type} (o : OptOps T).

Let sc := oo_sc o.
Let add := sc_add sc. Let sub := sc_sub sc. Let mul := sc_mul sc.
Let div := sc_div sc. Let one := sc_one sc. Let zero := sc_zero sc.
Let fma := oo_fma o.

(** One SGD step; the state is the momentum buffer ([None] before the
    first step):
      g   = g + wd * p                        [grad.add(param, alpha=wd)]
      buf = g (first step), else mu * buf + (1 - dampening) * g
      g   = g + mu * buf (nesterov), else buf
      p   = p - lr * g                        [param.add_(grad, alpha=-lr)] *)
Definition sgd_update (c : sgd_config T) (p : T) (buf : option T) (g : T)
    : T * option T :=
  let g1 := fma (sgd_weight_decay c) p g in
  match sgd_momentum c with
  | None => (fma (sub zero (sgd_lr c)) g1 p, buf)
  | Some mu =>
      let b := match buf with
               | None => g1
               | Some b0 => fma (sub one (sgd_dampening c)) g1 (mul b0 mu)
               end in
      let g2 := if sgd_nesterov c then fma mu b g1 else b in
      (fma (sub zero (sgd_lr c)) g2 p, Some b)
  end.

(** ** AdamW *)

(** [torch.lerp(a, b, w)]: [a + w (b - a)] if [|w| < 1/2], else
    [b - (b - a) (1 - w)] (both with one fused multiply-add). *)
Definition lerp (a b w : T) : T :=
  let half := div one (add one one) in
  if andb (sc_ltb sc (sub zero half) w) (sc_ltb sc w half)
  then fma w (sub b a) a
  else fma (sub zero (sub b a)) (sub one w) b.

End Rules.

Record adamw_config (T : Type) : Type := mk_adamw_config {
  aw_lr : T;
  aw_beta1 : T;
  aw_beta2 : T;
  aw_eps : T;
  aw_weight_decay : T
}.
Arguments mk_adamw_config {T}. Arguments aw_lr {T}. Arguments aw_beta1 {T}.
Arguments aw_beta2 {T}. Arguments aw_eps {T}. Arguments aw_weight_decay {T}.

(** The AdamW state of one scalar: the step count and the two moments. *)
Record adam_state (T : Type) : Type := mk_adam_state {
  ad_step : nat;
  ad_m : T;
  ad_v : T
}.
Arguments mk_adam_state {T}. Arguments ad_step {T}. Arguments ad_m {T}. Arguments ad_v {T}.

Section AdamW.
Context {T : Type} (o : OptOps T).

Let sc := oo_sc o.
Let add := sc_add sc. Let sub := sc_sub sc. Let mul := sc_mul sc.
Let div := sc_div sc. Let one := sc_one sc. Let zero := sc_zero sc.
Let fma := oo_fma o.

(** The state before the first step. *)
Definition adam_init : adam_state T := mk_adam_state 0 zero zero.

(** One AdamW step ([_single_tensor_adam], decoupled weight decay):
      t = step + 1
      p = p * (1 - lr * wd)
      m = lerp m g (1 - b1)                   [= b1 m + (1 - b1) g]
      v = v * b2 + (1 - b2) * g * g           [addcmul]
      step_size = lr / (1 - b1 ^ t)
      denom = sqrt v / sqrt (1 - b2 ^ t) + eps
      p = p - step_size * m / denom           [addcdiv(value=-step_size)] *)
Definition adamw_update (c : adamw_config T) (p : T) (s : adam_state T) (g : T)
    : T * adam_state T :=
  let t := S (ad_step s) in
  let p1 := mul p (sub one (mul (aw_lr c) (aw_weight_decay c))) in
  let m := lerp o (ad_m s) g (sub one (aw_beta1 c)) in
  let v := fma (mul (sub one (aw_beta2 c)) g) g (mul (ad_v s) (aw_beta2 c)) in
  let bc1 := sub one (oo_pow o (aw_beta1 c) t) in
  let bc2 := sub one (oo_pow o (aw_beta2 c) t) in
  let step_size := div (aw_lr c) bc1 in
  let denom := add (div (oo_sqrt o v) (oo_sqrt o bc2)) (aw_eps c) in
  (add p1 (div (mul (sub zero step_size) m) denom), mk_adam_state t m v).

End AdamW.

(** ** Over the reals: the formulas of the documentation *)

(** [lerp] over [R] is [a + w (b - a)] on both branches. *)
Lemma lerp_R : forall a b w, lerp R_opt_ops a b w = a + w * (b - a).
Proof.
  intros a b w; unfold lerp; cbn [R_opt_ops oo_sc oo_fma R_ops sc_add sc_sub sc_mul sc_div
    sc_one sc_zero sc_ltb].
  destruct (andb _ _); ring.
Qed.

(** SGD over [R]: [g = g + wd p]; [buf = g] at the first step, else
    [mu buf + (1 - dampening) g]; [g = g + mu buf] (Nesterov) or [buf];
    [p = p - lr g]. *)
Theorem sgd_update_R : forall (c : sgd_config R) p buf g,
  sgd_update R_opt_ops c p buf g =
  let g1 := g + sgd_weight_decay c * p in
  match sgd_momentum c with
  | None => (p - sgd_lr c * g1, buf)
  | Some mu =>
      let b := match buf with
               | None => g1
               | Some b0 => mu * b0 + (1 - sgd_dampening c) * g1
               end in
      (p - sgd_lr c * (if sgd_nesterov c then g1 + mu * b else b), Some b)
  end.
Proof.
  intros [lr [mu|] d wd nes] p buf g; unfold sgd_update;
    cbn [R_opt_ops oo_sc oo_fma R_ops sc_add sc_sub sc_mul sc_one sc_zero
         sgd_lr sgd_momentum sgd_dampening sgd_weight_decay sgd_nesterov].
  - destruct buf as [b0|], nes; f_equal; [ring|f_equal; ring|ring|f_equal; ring
      |ring|f_equal; ring|ring|f_equal; ring].
  - f_equal; ring.
Qed.

Lemma pow_S_lt_1 : forall x n, 0 <= x < 1 -> x ^ S n < 1.
Proof.
  intros x n Hx; induction n as [|n IH]; simpl in *; [lra|].
  assert (0 <= x * x ^ n) by (apply Rmult_le_pos; [lra|apply pow_le; lra]).
  nra.
Qed.

(** AdamW over [R], for [0 <= b2 < 1]: [t = step + 1],
    [m = b1 m + (1 - b1) g], [v = b2 v + (1 - b2) g^2],
    [p = p (1 - lr wd) - lr mhat / (sqrt vhat + eps)] with
    [mhat = m / (1 - b1^t)], [vhat = v / (1 - b2^t)]. *)
Theorem adamw_update_R : forall (c : adamw_config R) p s g,
  0 <= aw_beta2 c < 1 ->
  adamw_update R_opt_ops c p s g =
  let t := S (ad_step s) in
  let m := aw_beta1 c * ad_m s + (1 - aw_beta1 c) * g in
  let v := aw_beta2 c * ad_v s + (1 - aw_beta2 c) * g ^ 2 in
  let mhat := m / (1 - aw_beta1 c ^ t) in
  let vhat := v / (1 - aw_beta2 c ^ t) in
  (p * (1 - aw_lr c * aw_weight_decay c) - aw_lr c * mhat / (sqrt vhat + aw_eps c),
   mk_adam_state t m v).
Proof.
  intros [lr b1 b2 eps wd] p [n m0 v0] g Hb2; cbn in Hb2.
  unfold adamw_update; rewrite lerp_R;
    cbn [R_opt_ops oo_sc oo_fma oo_sqrt oo_pow R_ops sc_add sc_sub sc_mul sc_div
         sc_one sc_zero aw_lr aw_beta1 aw_beta2 aw_eps aw_weight_decay ad_step ad_m ad_v].
  assert (Hbc : 0 < 1 - b2 ^ S n) by (pose proof (pow_S_lt_1 b2 n Hb2); lra).
  rewrite sqrt_div_alt by exact Hbc.
  replace (m0 + (1 - b1) * (g - m0)) with (b1 * m0 + (1 - b1) * g) by ring.
  replace ((1 - b2) * g * g + v0 * b2) with (b2 * v0 + (1 - b2) * g ^ 2) by ring.
  f_equal; unfold Rdiv; ring.
Qed.
