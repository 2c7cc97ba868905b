"""The proof audit flags admitted proofs, axioms and global parameters, and nothing else."""

import json
import re
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
    block = "Axioms:\nClassicalDedekindReals.sig_not_dec : forall P : Prop, {~ ~ P} + {~ P}\nmy_axiom\n  : False\n"
    assert pa._parse_assumptions(block) == ["ClassicalDedekindReals.sig_not_dec", "my_axiom"]
    theorems = [pa.Theorem("Ojas.X.t", "Theorem", "rocq/X.v", ["my_axiom"])]
    assert pa.disallowed(theorems) == ["Ojas.X.t (rocq/X.v) assumes my_axiom"]


def test_list_theorems_qualifies_names():
    names = {th.name for th in pa.list_theorems()}
    assert "Ojas.ScalarOps.R_max_eq" in names


# ---- premises and witnesses (issue 28) ----

LG_OLD = [
    "forall x : R, MixedPrecision.ff_fmt (MixedPrecision.mp_a M) (lg x)",
    "forall x : R, 0 < x -> Rabs (lg x - ln x) <= el",
]


def test_vacuity_pattern_flags_the_old_lg_premises():
    """The premise pair of the old cross-entropy lse family (every lg x a float, |lg x - ln x| <= el
    for all x > 0) matches; the restated one (x a float in [lmin, lmax]) and the exp premise
    (a relative bound) do not."""
    assert pa.vacuity_pattern(LG_OLD) == ["lg"]
    assert pa.vacuity_pattern([LG_OLD[0], "forall x : R, x <= 0 -> Rabs (lg x - exp x) <= ee"]) == ["lg"]
    new = [
        LG_OLD[0],
        "forall x : R, MixedPrecision.ff_fmt (MixedPrecision.mp_a M) x -> lmin <= x <= lmax -> "
        "Rabs (lg x - ln x) <= el",
        "forall x : R, MixedPrecision.ff_fmt (MixedPrecision.mp_a M) (ex x)",
        "forall x : R, x <= 0 -> Rabs (ex x - exp x) <= ue * exp x + ee",
    ]
    assert pa.vacuity_pattern(new) == []
    assert pa.vacuity_pattern(LG_OLD[1:]) == []  # no format premise: lg = ln meets it


def test_witness_problems_rule():
    """A theorem with premises and no witness fails when the saved manifest had one for it, when
    it shows the vacuity pattern, or when every witness is required; otherwise it is counted."""
    th = lambda name, premises, witness=None: pa.Theorem(name, "Theorem", "rocq/X.v", [], premises, witness)
    theorems = [
        th("Ojas.X.a", ["(0 < x)"]),
        th("Ojas.X.b", ["(0 < x)"]),
        th("Ojas.X.c", LG_OLD),
        th("Ojas.X.d", ["(0 < x)"], "Ojas.Witnesses.X.d_witness"),
        th("Ojas.X.e", []),
    ]
    saved = {"theorems": [{"name": "Ojas.X.b", "witness": "Ojas.Witnesses.X.b_witness"}]}
    problems = pa.witness_problems(theorems, saved, require_witnesses=False)
    assert problems == [
        "Ojas.X.b (rocq/X.v) lost its witness",
        "Ojas.X.c (rocq/X.v) has premises of the unsatisfiable pattern (every value of lg a float "
        "with an absolute accuracy bound on an unbounded range) and no witness",
    ]
    strict = pa.witness_problems(theorems, saved, require_witnesses=True)
    assert strict[0] == "Ojas.X.a (rocq/X.v) has premises and no witness" and strict[1:] == problems
    assert pa.witness_summary([{"premises": len(t.premises), "witness": t.witness} for t in theorems]) == (1, 4)


SCRATCH_THEOREMS = """From Coq Require Import Reals Lra.
Open Scope R_scope.
Theorem contradictory : forall x : R, x < 0 -> 0 < x -> x = x.
Proof. intros; reflexivity. Qed.
Theorem positive : forall x : R, 0 < x -> x <> 0.
Proof. intros x H; lra. Qed.
Theorem partial : forall x : R, 0 < x -> x + 0 = x.
Proof. intros; ring. Qed.
Theorem wrong_head : forall x : R, 1 < x -> 0 < x.
Proof. intros; lra. Qed.
Theorem was_witnessed : forall x : R, 2 < x -> 1 < x.
Proof. intros; lra. Qed.
Theorem no_premise : forall x : R, x * 1 = x.
Proof. intros; ring. Qed.
Section Lg.
Variable fmt : R -> Prop.
Variables (lg : R -> R) (el : R).
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, 0 < x -> Rabs (lg x - ln x) <= el.
Theorem lg_bound : fmt (lg 1) /\\ Rabs (lg 1) <= el.
Proof. split; [apply lg_fmt |]. rewrite <- (Rminus_0_r (lg 1)), <- ln_1; apply lg_err; lra. Qed.
End Lg.
"""

SCRATCH_WITNESSES = """From Coq Require Import Reals Lra.
From Ojas Require Import T.
Open Scope R_scope.
Definition positive_witness := positive 1 Rlt_0_1.
Definition partial_witness := partial 1.
Definition wrong_head_witness := positive 1 Rlt_0_1.
"""


def _scratch(tmp_path: Path, witnesses: str, saved: dict | None = None) -> Path:
    rocq = tmp_path / "rocq"
    (rocq / "Witnesses").mkdir(parents=True, exist_ok=True)
    (tmp_path / "extraction").mkdir(exist_ok=True)
    (tmp_path / "extraction" / "Makefile").write_text("")
    (rocq / "Makefile").write_text((pa.ROCQ_DIR / "Makefile").read_text())
    (rocq / "_CoqProject").write_text("-Q . Ojas\nT.v\nWitnesses/T.v\nOjas.v\n")
    (rocq / "T.v").write_text(SCRATCH_THEOREMS)
    (rocq / "Ojas.v").write_text("From Ojas Require Export T.\n")  # the entry file rocq/Makefile checks
    (rocq / "Witnesses" / "T.v").write_text(witnesses)
    (rocq / "MANIFEST.json").write_text(json.dumps(saved or {}))
    return tmp_path


needs_coq = pytest.mark.skipif(not pa.coq_available(), reason="needs coqc, coq_makefile and make")


@needs_coq
def test_audit_checks_witnesses_in_coq(tmp_path):
    """On a scratch project: a theorem with contradictory premises (x < 0 and 0 < x) has no
    witness and fails the strict audit; a witness applying its theorem to too few arguments, one
    applying another theorem, a theorem that lost the witness the saved manifest records, and the
    lg family's unsatisfiable premise pair fail the audit in either mode; a proper witness passes."""
    saved = {"theorems": [{"name": "Ojas.T.was_witnessed", "witness": "Ojas.Witnesses.T.was_witnessed_witness"}]}
    root = _scratch(tmp_path, SCRATCH_WITNESSES, saved)
    logs: list[str] = []
    with pytest.raises(pa.ProofAuditError) as err:
        pa.run_audit(root, log=logs.append, require_witnesses=False)
    msg = str(err.value)
    assert "partial_witness applies Ojas.T.partial to too few arguments" in msg, msg
    assert "wrong_head_witness is not an application of Ojas.T.wrong_head" in msg, msg
    assert "Ojas.T.was_witnessed (rocq/T.v) lost its witness" in msg, msg
    assert "Ojas.T.lg_bound (rocq/T.v) has premises of the unsatisfiable pattern" in msg, msg
    assert "contradictory" not in msg and "Ojas.T.positive " not in msg, msg
    assert "1 of 6 exported theorems with premises witnessed" in "\n".join(logs), logs
    with pytest.raises(pa.ProofAuditError, match=r"Ojas.T.contradictory \(rocq/T.v\) has premises and no witness"):
        pa.run_audit(root, log=logs.append, require_witnesses=True)


@needs_coq
def test_audit_rejects_a_witness_of_contradictory_premises(tmp_path):
    """No witness of x < 0 /\\ 0 < x can be written: one that tries does not build."""
    root = _scratch(
        tmp_path, SCRATCH_WITNESSES + "Definition contradictory_witness := contradictory 1 ltac:(lra) Rlt_0_1.\n"
    )
    with pytest.raises(pa.ProofAuditError, match="building rocq/ failed"):
        pa.run_audit(root, log=lambda m: None, require_witnesses=False)


@needs_coq
def test_a_witness_axiom_is_named_through_the_union(tmp_path):
    """The witnesses' axioms come from one Print Assumptions over them all; when that finds one
    beyond ALLOWED_AXIOMS, each witness's own Print Assumptions names the witness."""
    witnesses = SCRATCH_WITNESSES.replace(
        "Definition positive_witness := positive 1 Rlt_0_1.",
        "From Coq Require ProofIrrelevance.\n"
        "Definition positive_witness := positive 1 (match ProofIrrelevance.proof_irrelevance True I I "
        "in _ = _ return 0 < 1 with eq_refl => Rlt_0_1 end).",
    )
    root = _scratch(tmp_path, witnesses)
    with pytest.raises(pa.ProofAuditError) as err:
        pa.run_audit(root, log=lambda m: None, require_witnesses=False)
    assert re.search(r"positive_witness assumes \S*proof_irrelevance", str(err.value)), str(err.value)
    assert "partial_witness assumes" not in str(err.value)


@needs_coq
def test_assumptions_reused_only_from_a_manifest_of_these_sources(tmp_path):
    """With a manifest whose source hashes match and whose per-theorem axioms have the union that
    one Print Assumptions over all theorems gives, its lists are kept ("reused"); a manifest with
    another union, or sources that changed, make Print Assumptions run on each theorem again."""
    root = _scratch(tmp_path, "From Ojas Require Import T.\n")
    pa.build(root)

    def exported():
        return [th for th in pa.list_theorems(root) if th.exported]

    theorems = exported()
    assert pa.print_assumptions(theorems, root) == "per theorem"
    truth = {th.name: (th.assumptions, th.premises) for th in theorems}
    assert truth["Ojas.T.lg_bound"][0], "ln needs the real-number axioms"
    saved = pa.manifest(theorems, root)
    again = exported()
    assert pa.print_assumptions(again, root, saved=saved) == "reused"
    assert {th.name: (th.assumptions, th.premises) for th in again} == truth
    forged = json.loads(json.dumps(saved))
    forged["theorems"][0]["assumptions"].append("Fake.axiom")
    again = exported()
    assert pa.print_assumptions(again, root, saved=forged) == "per theorem"
    assert {th.name: (th.assumptions, th.premises) for th in again} == truth
    (root / "rocq" / "T.v").write_text(SCRATCH_THEOREMS + "(* changed *)\n")
    assert pa.print_assumptions(exported(), root, saved=saved) == "per theorem"
