prelude
import Proofs.Core
import Proofs.Meta
import Proofs.CoreAudit
import Proofs.Field
import Proofs.Lists
import Proofs.OnlineSoftmax
import Proofs.CrossEntropy
import Proofs.Reversible
import Proofs.OptimizerInBackward
import Proofs.Audit
