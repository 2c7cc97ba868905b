import Proofs.ScalarOps
import Proofs.Vector
import Proofs.Attention.OnlineSoftmax
import Proofs.Attention.Backward
