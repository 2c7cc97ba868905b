(** * Witnesses of Attention/Float/PerPairScoreError.v (ojas_ref/verification/proof_audit.py).

    Part 1: one item, exact scores, [d = 0], [D = pp_shift] itself. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError Attention.Float.PerPairScoreError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
From Ojas Require Import Witnesses.Attention.Float.SavedLseError.
Import ListNotations.
Open Scope R_scope.

Lemma wpp_zero : forall x : unit, In x [tt] -> Rabs ((fun _ => 0) x - (fun _ => 0) x) <= (fun _ => 0) x.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition lse_perturbation_pp_witness :=
  lse_perturbation_pp [tt] (fun _ => 0) (fun _ => 0) (fun _ => 0) ltac:(discriminate) wpp_zero.

Definition softmax_perturbation_pp_witness :=
  softmax_perturbation_pp [tt] (fun _ => 0) (fun _ => 0) (fun _ => 0) (fun _ => 0)
    (pp_shift [tt] (fun _ => 0) (fun _ => 0)) ltac:(discriminate) wpp_zero (Rle_refl _).
