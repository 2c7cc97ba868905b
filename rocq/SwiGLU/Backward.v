(** * The backward of SwiGLU from the saved gate and up projection only.

    Elementwise, [h = silu a * b] with [silu a = a / (1 + exp (- a))]
    ([= a * sigmoid a], [sigmoid a = 1 / (1 + exp (- a))]).  The kernel
    saves [a] and [b] only (neither [silu a] nor [h]) and recomputes in
    backward ([swiglu_backward]): [s = sigmoid a],
    [da = (dh * b) * s * (1 + a * (1 - s))], [db = dh * silu a].

    - [swiglu_is_derive_a], [swiglu_is_derive_b]: Coquelicot's partial
      derivatives of [silu a * b];
    - [swiglu_backward_eq_vjp]: [da = dh * d h / d a] and
      [db = dh * d h / d b] (and [db = dh * a * s]);
    - [geglu_tanh_backward_eq_vjp]: the same for [h = gelu a * b] with
      the tanh approximation of gelu (kernels/ojas_kernels/swiglu.py with activation "gelu_tanh").

    [exp] is the standard library's real exponential (a definition, by
    its power series).  The map is elementwise, so its Jacobian is
    diagonal and these scalar identities are the whole vector-Jacobian
    product, entry by entry.  No statement about rounding. *)

From Coq Require Import Reals Lra.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
Open Scope R_scope.

(** ** The kernel *)

Definition sigmoid (a : R) : R := 1 / (1 + exp (- a)).

(** [silu a = a / (1 + exp (- a))], as the kernel computes it. *)
Definition silu (a : R) : R := a / (1 + exp (- a)).

Definition swiglu_forward (a b : R) : R := silu a * b.

(** The backward from [(a, b, dh)]: [(da, db)]. *)
Definition swiglu_backward (a b dh : R) : R * R :=
  let s := sigmoid a in
  let g := dh * b in
  (g * s * (1 + a * (1 - s)), dh * silu a).

(** ** Facts *)

Lemma exp_denom_pos : forall a, 0 < 1 + exp (- a).
Proof. intros a; pose proof (exp_pos (- a)); lra. Qed.

Lemma silu_sigmoid : forall a, silu a = a * sigmoid a.
Proof.
  intros a; unfold silu, sigmoid; pose proof (exp_denom_pos a); field; lra.
Qed.

(** [sigmoid' = s (1 - s)], [silu' = s (1 + a (1 - s))]. *)
Lemma silu_is_derive : forall a,
  is_derive silu a (sigmoid a * (1 + a * (1 - sigmoid a))).
Proof.
  intros a; unfold silu, sigmoid; pose proof (exp_denom_pos a) as Hd.
  auto_derive.
  - lra.
  - set (e := exp (- a)) in *; clearbody e.
    field; lra.
Qed.

(** ** Derivatives of [h = silu a * b] *)

Theorem swiglu_is_derive_a : forall a b,
  is_derive (fun t => swiglu_forward t b) a (b * sigmoid a * (1 + a * (1 - sigmoid a))).
Proof.
  intros a b; unfold swiglu_forward.
  apply (is_derive_ext (fun t => b * silu t)); [intros t; apply Rmult_comm|].
  replace (b * sigmoid a * (1 + a * (1 - sigmoid a)))
    with (b * (sigmoid a * (1 + a * (1 - sigmoid a)))) by ring.
  apply is_derive_scal, silu_is_derive.
Qed.

Theorem swiglu_is_derive_b : forall a b,
  is_derive (fun t => swiglu_forward a t) b (silu a).
Proof.
  intros a b; unfold swiglu_forward.
  apply (is_derive_ext (fun t => silu a * t)); [reflexivity|].
  pose proof (is_derive_scal (fun t => t) b (silu a) 1) as H.
  rewrite Rmult_1_r in H; apply H.
  auto_derive; [exact I|reflexivity].
Qed.

(** The kernel's backward, from [a], [b] and [dh] alone, is the
    vector-Jacobian product of [h = silu a * b]. *)
Theorem swiglu_backward_eq_vjp : forall a b dh,
  ex_derive (fun t => swiglu_forward t b) a /\
  ex_derive (fun t => swiglu_forward a t) b /\
  fst (swiglu_backward a b dh) = dh * Derive (fun t => swiglu_forward t b) a /\
  snd (swiglu_backward a b dh) = dh * Derive (fun t => swiglu_forward a t) b /\
  snd (swiglu_backward a b dh) = dh * a * sigmoid a.
Proof.
  intros a b dh.
  split; [eexists; apply swiglu_is_derive_a|].
  split; [eexists; apply swiglu_is_derive_b|].
  unfold swiglu_backward; cbn [fst snd].
  replace (Derive (fun t => swiglu_forward t b) a)
    with (b * sigmoid a * (1 + a * (1 - sigmoid a)))
    by (symmetry; apply is_derive_unique, swiglu_is_derive_a).
  replace (Derive (fun t => swiglu_forward a t) b) with (silu a)
    by (symmetry; apply is_derive_unique, swiglu_is_derive_b).
  rewrite silu_sigmoid.
  split; [ring|split; ring].
Qed.

(** ** GeGLU with the tanh approximation of gelu

    [gelu a = a / 2 * (1 + tanh (k * (a + c * a^3)))] with
    [k = sqrt (2 / PI)], [c = 0.044715] (torch's [approximate="tanh"]),
    [h = gelu a * b]; the backward from [(a, b, dh)] recomputes
    [T = tanh (k * (a + c a^3))] and
    [gelu' a = 1/2 (1 + T) + 1/2 a (1 - T^2) k (1 + 3 c a^2)]
    (the form of torch's tanh-gelu backward).  [tanh] is the standard
    library's [sinh / cosh].  The kernel (kernels/ojas_kernels/swiglu.py, activation
    "gelu_tanh") and the reference (ojas_ref/functional/swiglu.py) run this
    backward; no theorem covers their rounding. *)

Definition gelu_c : R := 0.044715.
Definition gelu_k : R := sqrt (2 / PI).

Definition gelu_tanh (a : R) : R :=
  a / 2 * (1 + tanh (gelu_k * (a + gelu_c * (a * a * a)))).

Definition gelu_tanh_grad (a : R) : R :=
  let T := tanh (gelu_k * (a + gelu_c * (a * a * a))) in
  1 / 2 * (1 + T) + 1 / 2 * a * (1 - T * T) * gelu_k * (1 + 3 * gelu_c * (a * a)).

Definition geglu_tanh_forward (a b : R) : R := gelu_tanh a * b.

(** The backward from [(a, b, dh)]: [(da, db)]. *)
Definition geglu_tanh_backward (a b dh : R) : R * R :=
  (dh * b * gelu_tanh_grad a, dh * gelu_tanh a).

Lemma gelu_tanh_is_derive : forall a, is_derive gelu_tanh a (gelu_tanh_grad a).
Proof.
  intros a; unfold gelu_tanh_grad, gelu_tanh, tanh, sinh, cosh; cbv zeta.
  set (k := gelu_k); set (c := gelu_c).
  pose proof (exp_pos (k * (a + c * (a * a * a)))).
  pose proof (exp_pos (- (k * (a + c * (a * a * a))))).
  auto_derive.
  - repeat split; lra.
  - field; lra.
Qed.

Theorem geglu_tanh_is_derive_a : forall a b,
  is_derive (fun t => geglu_tanh_forward t b) a (b * gelu_tanh_grad a).
Proof.
  intros a b; unfold geglu_tanh_forward.
  apply (is_derive_ext (fun t => b * gelu_tanh t)); [intros t; apply Rmult_comm|].
  apply is_derive_scal, gelu_tanh_is_derive.
Qed.

Theorem geglu_tanh_is_derive_b : forall a b,
  is_derive (fun t => geglu_tanh_forward a t) b (gelu_tanh a).
Proof.
  intros a b; unfold geglu_tanh_forward.
  apply (is_derive_ext (fun t => gelu_tanh a * t)); [reflexivity|].
  pose proof (is_derive_scal (fun t => t) b (gelu_tanh a) 1) as H.
  rewrite Rmult_1_r in H; apply H.
  auto_derive; [exact I|reflexivity].
Qed.

(** The GeGLU backward from [a], [b] and [dh] alone is the
    vector-Jacobian product of [h = gelu_tanh a * b]. *)
Theorem geglu_tanh_backward_eq_vjp : forall a b dh,
  ex_derive (fun t => geglu_tanh_forward t b) a /\
  ex_derive (fun t => geglu_tanh_forward a t) b /\
  fst (geglu_tanh_backward a b dh) = dh * Derive (fun t => geglu_tanh_forward t b) a /\
  snd (geglu_tanh_backward a b dh) = dh * Derive (fun t => geglu_tanh_forward a t) b.
Proof.
  intros a b dh.
  split; [eexists; apply geglu_tanh_is_derive_a|].
  split; [eexists; apply geglu_tanh_is_derive_b|].
  unfold geglu_tanh_backward; cbn [fst snd].
  replace (Derive (fun t => geglu_tanh_forward t b) a) with (b * gelu_tanh_grad a)
    by (symmetry; apply is_derive_unique, geglu_tanh_is_derive_a).
  replace (Derive (fun t => geglu_tanh_forward a t) b) with (gelu_tanh a)
    by (symmetry; apply is_derive_unique, geglu_tanh_is_derive_b).
  split; ring.
Qed.
