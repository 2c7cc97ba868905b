prelude
import Proofs.Core
import Proofs.Meta
import Proofs.CoreAudit
import Proofs.Audit
