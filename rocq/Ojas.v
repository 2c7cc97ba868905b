(** * Ojas: the entry file.  [From Ojas Require Import Ojas.] loads every layer.

    The layers, each built on the ones above it (as Flocq's Core, Calc,
    Prop, IEEE754):
    - Core: the scalar interface every algorithm is written against
      ([ScalarOps]: the reals, the floats of the model and the oracle's
      floats are instances) and vectors;
    - the rounding model ([FloatModel/MixedPrecision.v]: THE model, storage
      and accumulation formats from Flocq, underflow covered;
      [FloatModel/NoUnderflow.v]: its special case without absolute terms)
      and the generic error lemmas built on it (dot products, blocked sums,
      the computed [exp2]);
    - one folder per operation ([Attention/], [LinearCrossEntropy/], [Reversible/],
      [InBackward/], [RMSNorm/], [SwiGLU/], [ReLU/], [RoPE/]): the
      specification (the algorithm the kernel runs, as a definition the
      oracle extracts), its exact proofs (equal to the reference in exact
      arithmetic) and its error proofs in the rounding model: beside them
      those stated without underflow (e.g. [Attention/StreamError.v],
      [LinearCrossEntropy/LseError.v]), and in the operation's [Float/] subfolder
      the kernels' error proofs in the mixed-precision model
      ([Attention/Float/]: the online softmax's rescaling and tiles, the
      forward output (also with the P.V product accumulated by the tensor cores), its saved lse, dV, dK and dQ (also with a running bound on the
      tile loop); [LinearCrossEntropy/Float/]:
      the streamed lse and loss, dH and dW (also with the streamed lse composed in),
      softcap (its dH and dW also with the capped streamed lse composed in), a-posteriori bounds);
    - [Bounds/]: the error bounds' values over exact rationals, one file per
      operation, which the oracle (extraction/ExtractBounds.v) computes.

    Every .v file of _CoqProject except the witnesses ([Witnesses/], the
    proof audit's instances of the theorems' premises) is exported here, and
    [make] checks that ([check-entry] in the Makefile). *)

(** ** Core *)
From Ojas Require Export ScalarOps Vector VectorFacts.

(** ** The rounding model and its generic error lemmas *)
From Ojas Require Export FloatModel.MixedPrecision FloatModel.NoUnderflow FloatModel.Notations FloatModel.DotError.
From Ojas Require Export FloatModel.BlockedSum FloatModel.Exp2Weight.
From Ojas Require Export FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Export FloatModel.CertifiedSum.

(** ** Attention: specification, exact proofs, error proofs *)
From Ojas Require Export Attention.OnlineSoftmax Attention.Backward Attention.Merge Attention.Mask.
From Ojas Require Export Attention.AdditiveMask Attention.GroupedQuery Attention.Lse.
From Ojas Require Export Attention.StreamCorrect Attention.BackwardCorrect.
From Ojas Require Export Attention.ScorePerturbation Attention.StreamError.
From Ojas Require Export Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile.
From Ojas Require Export Attention.Float.NumeratorError Attention.Float.ForwardError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Export Attention.Float.SavedLseError Attention.Float.DvError Attention.Float.DkDqError.
From Ojas Require Export Attention.Float.BackwardChainError Attention.Float.RunningAccError Attention.Float.ForwardAccRunning.
From Ojas Require Export Attention.Float.PerPairScoreError Attention.Float.RunningAccErrorPP.
From Ojas Require Export Attention.Float.ForwardAccRunningCounted Attention.Float.DeltaReweight.
From Ojas Require Export Attention.Float.ForwardSharedWeights Attention.Float.DeltaKernelError.
From Ojas Require Export Attention.Float.PerPairExpArg.

(** ** Linear cross-entropy: specification, exact proofs, error proofs *)
From Ojas Require Export LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse LinearCrossEntropy.Loss.
From Ojas Require Export LinearCrossEntropy.Gradient LinearCrossEntropy.Reduction.
From Ojas Require Export LinearCrossEntropy.LseError LinearCrossEntropy.LossError LinearCrossEntropy.EndToEnd.
From Ojas Require Export LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Export LinearCrossEntropy.Float.WeightedGradError LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Export LinearCrossEntropy.Float.SoftcapGradError LinearCrossEntropy.Float.LossPosteriori.
From Ojas Require Export LinearCrossEntropy.Float.GradPosteriori LinearCrossEntropy.Float.GradChainError.
From Ojas Require Export LinearCrossEntropy.Float.SoftcapGradChainError LinearCrossEntropy.Float.SoftcapPosteriori.

(** ** Reversible coupling stacks *)
From Ojas Require Export Reversible.Coupling Reversible.Stack Reversible.FixedPoint Reversible.Gradient.
From Ojas Require Export Reversible.FloatError Reversible.APosteriori.

(** ** The optimizer in backward *)
From Ojas Require Export InBackward.Events InBackward.UpdateRules.
From Ojas Require Export InBackward.Equivalence InBackward.Variants.
From Ojas Require Export InBackward.Repairs InBackward.Counterexamples.
From Ojas Require Export InBackward.Buckets InBackward.SparseRows.
From Ojas Require Export InBackward.ChunkedHead.

(** ** Elementwise and normalisation backward passes *)
From Ojas Require Export RMSNorm.Backward SwiGLU.Backward ReLU.Backward ReLU.KernelBits RoPE.Backward.

(** ** The bounds' values, over exact rationals *)
From Ojas Require Export Bounds.Rational Bounds.Sums Bounds.Softmax Bounds.Attention Bounds.AttentionChain.
From Ojas Require Export Bounds.LinearCrossEntropy Bounds.LinearCrossEntropyGrad Bounds.LinearCrossEntropyChain.
From Ojas Require Export Bounds.LinearCrossEntropySoftcapChain.
