import Lake
open Lake DSL

-- Lean 4 mirror of the Coq definitions in `rocq/` (core Lean only, no dependencies).

package ojas

-- The library builds the root `proofs/Proofs.lean` and every module under `proofs/Proofs/`.
@[default_target]
lean_lib Proofs where
  srcDir := "proofs"
  globs := #[.andSubmodules `Proofs]
