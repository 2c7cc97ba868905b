"""Every implementation names, in its docstring, theorems that exist in rocq/MANIFEST.json,
and the manifest matches the Coq sources (hashes), so ``ojas audit`` can vouch for each."""

import pytest

from ojas_ref import audit
from ojas_ref import proof_audit as pa


def _known_names() -> set[str]:
    saved = pa.load_manifest()
    theorems = {th["name"] for th in saved["theorems"]}
    return theorems | set(saved["lemmas"]) | {name.rsplit(".", 1)[0] for name in theorems}


@pytest.mark.parametrize("impl", audit.implementations(), ids=lambda impl: impl.name)
def test_implementation_cites_existing_theorems(impl):
    assert impl.function is not None, impl.unavailable
    cited = audit.cited_theorems(impl.function)
    assert cited, f"{impl.name}: its docstring names no Ojas.* theorem"
    missing = [name for name in cited if name not in _known_names()]
    assert not missing, f"{impl.name} cites theorems that do not exist: {missing}"


def test_manifest_matches_the_sources():
    assert pa.stale_files(pa.load_manifest()) == []
