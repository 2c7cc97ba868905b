prelude
import Proofs.CoreAudit
import Proofs.OnlineSoftmax
import Proofs.CrossEntropy
import Proofs.Reversible
import Proofs.OptimizerInBackward
/-!
# Axiom audit

`proofs/build.py` compiles this file last and reads the output of every `#print axioms` below:
each must say the theorem "does not depend on any axioms" (the trusted core declares none);
any assumed constant (the placeholder of an unfinished proof included) fails the check, and so
does a name listed here that is missing.
-/

#print axioms CoreAudit.add_succ
#print axioms CoreAudit.mul_succ
#print axioms CoreAudit.sub_succ
#print axioms CoreAudit.beq_succ_succ
#print axioms CoreAudit.ble_succ_succ
#print axioms CoreAudit.gmp_small
#print axioms CoreAudit.gmp_big

-- (a) online softmax / streamed attention forward
#print axioms Ojas.Softmax.run_snd
#print axioms Ojas.Softmax.online_softmax_correct
#print axioms Ojas.Attention.stream_represents
#print axioms Ojas.Attention.stream_correct
#print axioms Ojas.Attention.stream_row_correct

-- (b) chunked log-sum-exp and chunked cross-entropy
#print axioms Ojas.CrossEntropy.chunked_lse_correct
#print axioms Ojas.CrossEntropy.vocab_loop_correct
#print axioms Ojas.CrossEntropy.token_loss_chunked
#print axioms Ojas.CrossEntropy.ce_forward_correct
#print axioms Ojas.CrossEntropy.ce_mean_correct

-- (c) reversible coupling layers
#print axioms Ojas.Reversible.coupling_inverse_forward
#print axioms Ojas.Reversible.coupling_forward_inverse
#print axioms Ojas.Reversible.stack_inverse_forward
#print axioms Ojas.Reversible.stack_forward_inverse
#print axioms Ojas.Reversible.backprop_reversible_correct
#print axioms Ojas.Reversible.backprop_coupling

-- (d) optimizer in backward
#print axioms Ojas.OptimizerInBackward.fused_inv
#print axioms Ojas.OptimizerInBackward.fused_eq_standard
#print axioms Ojas.OptimizerInBackward.accum_fused_neq_standard
#print axioms Ojas.OptimizerInBackward.clip_unclipped_neq_standard
#print axioms Ojas.Attention.attention_forward_correct
