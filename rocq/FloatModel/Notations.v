(** * The notations shared by the error proofs in the mixed-precision model.

    Every error proof of [FloatModel/] and of the operations' [Float/] folders
    ([Attention/Float/], [LinearCrossEntropy/Float/]) is a Section over one model
    [Variable M : MixedModel] ([MixedPrecision.v]); inside it, after
    [Import ModelNotations] (and [Import ExpNotations] for the exponential),
    these names stand for the model's parts:
    - [A_], [fmt], [rnd], [u], [ea]: the accumulation format (fp32), its
      numbers, its rounding, unit roundoff and absolute term;
    - [S_], [rs], [us], [es]: the storage format (bf16, fp16), its rounding,
      unit roundoff and absolute term;
    - [ue], [ee], [exp2]: the computed [2^x], its relative and absolute error.
    The model they read is the one [MixedModel] of the context
    ([the_model]): the Section's variable; a context with two models, or
    none, is an error, not a silent choice.  An Import inside a Section ends
    with it.  Each name is two notations: one for parsing (reading the
    model of the context) and one for printing (of any model), so that goals
    show [u], not [ff_u (mp_a M)]. *)

From Ojas Require Import FloatModel.MixedPrecision.

(** The [MixedModel] of the context, which must be unique. *)
Ltac the_model :=
  lazymatch goal with
  | M : MixedModel, M' : MixedModel |- _ => fail 0 "two MixedModels in context:" M M'
  | M : MixedModel |- _ => exact M
  | _ => fail 0 "no MixedModel in context"
  end.

Module ModelNotations.
Notation A_ := (mp_a ltac:(the_model)) (only parsing).
Notation "'A_'" := (mp_a _) (only printing).
Notation S_ := (mp_s ltac:(the_model)) (only parsing).
Notation "'S_'" := (mp_s _) (only printing).
Notation fmt := (ff_fmt A_) (only parsing).
Notation "'fmt'" := (ff_fmt (mp_a _)) (only printing).
Notation rnd := (ff_rnd A_) (only parsing).
Notation "'rnd'" := (ff_rnd (mp_a _)) (only printing).
Notation u := (ff_u A_) (only parsing).
Notation "'u'" := (ff_u (mp_a _)) (only printing).
Notation ea := (ff_eta A_) (only parsing).
Notation "'ea'" := (ff_eta (mp_a _)) (only printing).
Notation rs := (ff_rnd S_) (only parsing).
Notation "'rs'" := (ff_rnd (mp_s _)) (only printing).
Notation us := (ff_u S_) (only parsing).
Notation "'us'" := (ff_u (mp_s _)) (only printing).
Notation es := (ff_eta S_) (only parsing).
Notation "'es'" := (ff_eta (mp_s _)) (only printing).
End ModelNotations.

Module ExpNotations.
Notation ue := (mp_ue ltac:(the_model)) (only parsing).
Notation "'ue'" := (mp_ue _) (only printing).
Notation ee := (mp_eta_e ltac:(the_model)) (only parsing).
Notation "'ee'" := (mp_eta_e _) (only printing).
Notation exp2 := (mp_exp2 ltac:(the_model)) (only parsing).
Notation "'exp2'" := (mp_exp2 _) (only printing).
End ExpNotations.
