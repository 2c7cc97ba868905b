"""The proof audit flags admitted proofs, axioms and global parameters, and nothing else."""

from pathlib import Path

import pytest

from ojas_ref.verification import proof_audit as pa


def _scan(tmp_path: Path, text: str) -> list[str]:
    f = tmp_path / "T.v"
    f.write_text(text)
    return pa.scan_source(f)


@pytest.mark.parametrize(
    "text",
    [
        "Lemma x : True.\nProof.\nAdmitted.\n",
        "Lemma x : True.\nProof. admit. Qed.\n",
        "Axiom ax : False.\n",
        "Conjecture c : False.\n",
        "Parameter rnd : nat -> nat.\n",
        "Module M.\nParameter p : nat.\nEnd M.\n",
        "Section S.\nEnd S.\nHypothesis h : False.\n",
    ],
)
def test_scan_flags(tmp_path, text):
    assert _scan(tmp_path, text), text


@pytest.mark.parametrize(
    "text",
    [
        "(* Admitted proofs are forbidden; (* nested admit *) *)\nLemma x : True. Proof. exact I. Qed.\n",
        "Section S.\nVariable rnd : nat -> nat.\nHypothesis h : forall x, rnd x = x.\nEnd S.\n",
        "Module Type ROUNDING.\nParameter rnd : nat -> nat.\nEnd ROUNDING.\n",
        "Section Outer.\nSection Inner.\nVariable x : nat.\nEnd Inner.\nVariable y : nat.\nEnd Outer.\n",
    ],
)
def test_scan_accepts(tmp_path, text):
    assert _scan(tmp_path, text) == []


def test_parse_assumptions():
    closed = "Closed under the global context\n"
    assert pa._parse_assumptions(closed) == []
    block = (
        "Axioms:\nClassicalDedekindReals.sig_not_dec : forall P : Prop, {~ ~ P} + {~ P}\n"
        "my_axiom\n  : False\n"
    )
    assert pa._parse_assumptions(block) == ["ClassicalDedekindReals.sig_not_dec", "my_axiom"]
    theorems = [pa.Theorem("Ojas.X.t", "Theorem", "rocq/X.v", ["my_axiom"])]
    assert pa.disallowed(theorems) == ["Ojas.X.t (rocq/X.v) assumes my_axiom"]


def test_list_theorems_qualifies_names():
    names = {th.name for th in pa.list_theorems()}
    assert "Ojas.ScalarOps.R_max_eq" in names
