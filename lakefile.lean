import Lake
open Lake DSL

-- Lean 4 proofs of the four specifications (see proofs/README.md). Every file starts with
-- `prelude` and imports only proofs/Proofs/Core.lean (the trusted core) and Meta.lean, so the
-- same sources build with a full toolchain (`lake build`, Lean 4.35.0 pinned in lean-toolchain)
-- and with the bare binary of scripts/lean.sh (proofs/build.py stands in for lake there).

package ojas

-- The library builds the root `proofs/Proofs.lean` and every module under `proofs/Proofs/`.
@[default_target]
lean_lib Proofs where
  srcDir := "proofs"
  globs := #[.andSubmodules `Proofs]
