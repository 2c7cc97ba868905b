"""Audit of the Coq proofs: nothing admitted, nothing assumed beyond the standard axioms,
and no theorem whose premises cannot hold together.

``ojas proofs`` builds ``rocq/``, scans the sources for ``Admitted``/``admit``/
global ``Axiom``/``Parameter``, runs ``Print Assumptions`` on every exported
theorem (``Theorem``, ``Corollary``, ``Proposition``: what the code cites; the
lemmas they use are covered by their assumptions; one run over them all when the committed
manifest is of these sources: :func:`print_assumptions`), and fails if an assumption outside
:data:`ALLOWED_AXIOMS` appears.  It
writes (or checks) ``rocq/MANIFEST.json``: theorem -> file -> source hash, which
``ojas audit`` reads on machines without Coq.

Premises and witnesses.  ``Print Assumptions`` lists axioms, not premises: a theorem
whose premises no instance meets (say ``fmt (lg x)`` for all x together with
``|lg x - ln x| <= el`` for all x > 0) is proved and proves nothing.  The rule:

- *premises* of an exported theorem are the leading binders of its statement as it
  stands after its Sections close (Section variables and hypotheses it uses become
  leading binders; ``let`` binders are passed, nothing is unfolded, so ``~ P`` is a
  conclusion) whose type is a proposition, or a type not among the plain data types
  (``R`` and any type convertible to it, such as Coquelicot's ``AbsRing.sort R_AbsRing``;
  ``nat, Z, N, bool, unit, Prop, Set, Type``, lists and options of anything, pairs of
  data and functions into data: :data:`_LTAC`, ``ojas_premises``).  A record such as
  ``MixedModel`` bundles propositions, so it counts as a premise.
- a *witness* of ``Ojas.<path>.<thm>`` is a transparent ``Definition <thm>_witness``
  in ``rocq/Witnesses/<path>.v`` (listed in ``_CoqProject``, outside any Section) whose
  body is ``<thm>`` applied to arguments until its type (after beta and zeta) is no
  longer a product: every premise instantiated and proved at once, with no assumption
  beyond :data:`ALLOWED_AXIOMS` (``ojas_check_witness`` and ``Print Assumptions``).
- the audit fails when a witness is malformed, when a theorem the committed manifest
  records as witnessed has lost its witness, when an unwitnessed theorem shows the
  vacuity pattern (:func:`vacuity_pattern`), and, with ``require_witnesses`` (default
  :data:`REQUIRE_ALL_WITNESSES`), when any theorem with premises has no witness; it
  reports "N of M exported theorems with premises witnessed" either way.

Both commands read the Coq sources, so they need a source checkout of the repository
(``rocq/`` and ``extraction/``, which a wheel or a non-editable ``pip install`` does not
ship): :func:`require_sources` says so, naming the tools the rebuild needs, instead of a
bare error from ``make``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # ojas_ref/verification/proof_audit.py
ROCQ_DIR = REPO_ROOT / "rocq"
MANIFEST_PATH = ROCQ_DIR / "MANIFEST.json"
LOGICAL_PREFIX = "Ojas"

#: The standard axioms of Coq's real-number library, and functional extensionality.
#: ``Classical_Prop.classic`` is what ``Coq.Reals`` itself uses to define ``ln``.
ALLOWED_AXIOMS = frozenset(
    {
        "ClassicalDedekindReals.sig_forall_dec",
        "ClassicalDedekindReals.sig_not_dec",
        "Classical_Prop.classic",
        "functional_extensionality_dep",
        "FunctionalExtensionality.functional_extensionality_dep",
    }
)

#: Whether every exported theorem with premises must have a witness (see the module
#: docstring): ``ojas rocq`` fails on any without one (the tests pass False to check the
#: counting, which then fails only on a lost witness, a malformed one or the vacuity pattern).
REQUIRE_ALL_WITNESSES = True
#: The directory, under rocq/, of the witness files (mirroring the theorems' files).
WITNESS_DIR = "Witnesses"
WITNESS_SUFFIX = "_witness"

#: Words that must not occur in proof sources (outside comments).
FORBIDDEN_WORDS = ("Admitted", "admit", "Axiom", "Axioms", "Conjecture")
#: Declarations that are axioms when they stand outside a Section or Module Type.
GLOBAL_ONLY_WORDS = ("Parameter", "Parameters", "Hypothesis", "Hypotheses", "Variable", "Variables")

THEOREM_RE = re.compile(
    r"^\s*(?:#\[[^\]]*\]\s*)?(Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+([A-Za-z_][A-Za-z0-9_']*)",
    re.M,
)
SCOPE_RE = re.compile(r"^\s*(Section|Module\s+Type|Module)\s+([A-Za-z_][A-Za-z0-9_']*)(.*)$")
END_RE = re.compile(r"^\s*End\s+([A-Za-z_][A-Za-z0-9_']*)\s*\.")


class ProofAuditError(RuntimeError):
    """The proofs do not pass the audit."""


class SourcesMissing(ProofAuditError):
    """The audit cannot run here: no source checkout, or a tool it runs is missing."""


@dataclass
class Theorem:
    name: str  # fully qualified, e.g. Ojas.Attention.Mask.two_pass_masked
    kind: str  # Theorem, Lemma, ...
    file: str  # path relative to the repository root
    assumptions: list[str] = field(default_factory=list)
    premises: list[str] = field(default_factory=list)  # the premise binders' types, as Coq prints them
    witness: str | None = None  # the qualified name of its checked witness

    @property
    def exported(self) -> bool:
        """Theorems and corollaries are the results other code cites; lemmas are steps."""
        return self.kind in ("Theorem", "Corollary", "Proposition")


def strip_comments(text: str) -> str:
    """Remove (nested) Coq comments, keeping line breaks so line numbers stay right."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        if text.startswith("(*", i):
            depth += 1
            i += 2
        elif depth and text.startswith("*)", i):
            depth -= 1
            i += 2
        else:
            if depth == 0 or text[i] == "\n":
                out.append(text[i])
            i += 1
    return "".join(out)


def coq_sources(root: Path = REPO_ROOT) -> list[Path]:
    """Every .v file of the proofs and of the extraction, in a stable order."""
    files = sorted((root / "rocq").rglob("*.v")) + sorted((root / "extraction").rglob("*.v"))
    return [f for f in files if "_build" not in f.parts]


def project_files(root: Path = REPO_ROOT) -> list[str]:
    """The .v files listed in rocq/_CoqProject, in build order."""
    lines = (root / "rocq" / "_CoqProject").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip().endswith(".v")]


def module_path(rel: str) -> str:
    """rocq-relative file path -> Coq module path: Attention/Mask.v -> Ojas.Attention.Mask."""
    return ".".join([LOGICAL_PREFIX, *Path(rel).with_suffix("").parts])


def scan_source(path: Path) -> list[str]:
    """Problems in one source file: admitted proofs, axioms, global parameters."""
    problems: list[str] = []
    scopes: list[tuple[str, str]] = []  # (kind, name)
    for lineno, line in enumerate(strip_comments(path.read_text()).splitlines(), 1):
        where = f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}:{lineno}"
        for word in FORBIDDEN_WORDS:
            if re.search(rf"\b{word}\b", line):
                problems.append(f"{where}: forbidden '{word}'")
        scope = SCOPE_RE.match(line)
        if scope and ":=" not in scope.group(3):
            scopes.append((" ".join(scope.group(1).split()), scope.group(2)))
        end = END_RE.match(line)
        if end:
            for k in range(len(scopes) - 1, -1, -1):
                if scopes[k][1] == end.group(1):
                    del scopes[k:]
                    break
        local = any(kind in ("Section", "Module Type") for kind, _ in scopes)
        for word in GLOBAL_ONLY_WORDS:
            if re.match(rf"\s*{word}\b", line) and not local:
                problems.append(f"{where}: global '{word}' (an axiom): make it a Section variable")
    return problems


def scan_sources(root: Path = REPO_ROOT) -> list[str]:
    return [p for f in coq_sources(root) for p in scan_source(f)]


def is_witness_file(rel: str) -> bool:
    """Whether a rocq-relative path is a witness file (rocq/Witnesses/...)."""
    return Path(rel).parts[:1] == (WITNESS_DIR,)


def list_theorems(root: Path = REPO_ROOT) -> list[Theorem]:
    """Theorems and lemmas declared in the files of rocq/_CoqProject (the witness files
    aside), with qualified names."""
    found: list[Theorem] = []
    for rel in project_files(root):
        if is_witness_file(rel):
            continue
        path = root / "rocq" / rel
        modules: list[tuple[str, str]] = []
        for line in strip_comments(path.read_text()).splitlines():
            scope = SCOPE_RE.match(line)
            if scope and ":=" not in scope.group(3):
                modules.append((" ".join(scope.group(1).split()), scope.group(2)))
            end = END_RE.match(line)
            if end:
                for k in range(len(modules) - 1, -1, -1):
                    if modules[k][1] == end.group(1):
                        del modules[k:]
                        break
            m = THEOREM_RE.match(line)
            if m and not any(kind == "Module Type" for kind, _ in modules):
                qual = [name for kind, name in modules if kind == "Module"]
                name = ".".join([module_path(rel), *qual, m.group(2)])
                found.append(Theorem(name, m.group(1), str(path.relative_to(root))))
    return found


#: What rebuilding the proofs runs (``make -C rocq`` calls coq_makefile and coqc).
PROOF_TOOLS = ("coqc", "coq_makefile", "make")
#: What building the extracted oracle runs besides them (``make -C extraction``).
ORACLE_TOOLS = (*PROOF_TOOLS, "ocamlfind")
#: The files of a source checkout that the audit reads.
SOURCE_FILES = ("rocq/_CoqProject", "rocq/MANIFEST.json", "extraction/Makefile")


def missing_tools(tools: tuple[str, ...] = PROOF_TOOLS) -> list[str]:
    """The programs of ``tools`` not found on PATH."""
    return [t for t in tools if shutil.which(t) is None]


def coq_available() -> bool:
    return not missing_tools(PROOF_TOOLS)


def require_sources(root: Path | None = None) -> None:
    """Raise SourcesMissing, saying what is needed, unless ``root`` (default
    :data:`REPO_ROOT`, read at call time) holds the Coq sources of a checkout."""
    root = REPO_ROOT if root is None else root
    missing = [f for f in SOURCE_FILES if not (root / f).is_file()]
    if missing:
        raise SourcesMissing(
            f"this needs a source checkout of ojas-ref, with its rocq/ and extraction/ directories; "
            f"{', '.join(missing)} not found under {root} (an install that is not editable ships the "
            f"Python packages only). Clone the repository, run `pip install -e .` in it and run the command "
            f"from that install; rebuilding the proofs and the oracle also needs {', '.join(ORACLE_TOOLS)} "
            f"(scripts/setup.sh installs them)"
        )


def build(root: Path = REPO_ROOT) -> None:
    """Compile rocq/ (make -C rocq, one job per core)."""
    jobs = f"-j{os.cpu_count() or 1}"
    proc = subprocess.run(["make", jobs, "-C", str(root / "rocq")], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ProofAuditError(f"building rocq/ failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def _parse_assumptions(block: str) -> list[str]:
    """Names of the axioms in one 'Print Assumptions' answer."""
    if "Closed under the global context" in block:
        return []
    names = []
    for line in block.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_'.]*)\s*(?::|$)", line)
        if m and m.group(1) not in ("Axioms", "Section Variables", "Opaque constants"):
            names.append(m.group(1))
    return names


#: The tactics the audit scripts define: ``ojas_premises`` prints the premises of the goal's
#: leading binders (the rule of the module docstring), ``ojas_check_witness thm body`` says
#: whether ``body`` is ``thm`` applied until its type is no longer a product.
_LTAC = r"""
From Coq Require Import Reals.
Open Scope R_scope.
Ltac ojas_is_data A :=
  first
  [ let _ := constr:((0%R : A)) in idtac
  | lazymatch A with
    | nat => idtac | BinNums.Z => idtac | BinNums.N => idtac | bool => idtac
    | unit => idtac | list _ => idtac | option _ => idtac | Prop => idtac | Set => idtac | Type => idtac
    | prod ?B ?C => ojas_is_data B; ojas_is_data C
    | ?B -> ?C => ojas_is_data C
    | _ => fail
    end ].
Ltac ojas_premises :=
  lazymatch goal with
  | |- forall x : ?A, _ =>
      let s := type of A in
      lazymatch s with
      | Prop => idtac "@@PREMISE"; idtac A
      | _ => tryif ojas_is_data A then idtac else (idtac "@@PREMISE"; idtac A)
      end; intro; ojas_premises
  | |- let _ := _ in _ => intro; ojas_premises
  | |- _ => idtac
  end.
Ltac ojas_head t := lazymatch t with ?f _ => ojas_head f | _ => t end.
Ltac ojas_check_witness thm b :=
  let h := ojas_head b in
  tryif constr_eq h thm then
    (let ty := type of b in let ty := eval cbv beta zeta in ty in
     lazymatch ty with
     | forall _ : _, _ => idtac "@@WITNESS_PARTIAL"
     | _ => idtac "@@WITNESS_OK"
     end)
  else idtac "@@WITNESS_HEAD".
"""


def _requires(root: Path) -> list[str]:
    modules = [module_path(rel) for rel in project_files(root)]
    return [f"From {LOGICAL_PREFIX} Require {m[len(LOGICAL_PREFIX) + 1 :]}." for m in modules]


def _assumptions_script(theorems: list[Theorem], root: Path) -> str:
    script = _requires(root) + [_LTAC]
    for i, th in enumerate(theorems):
        script.append(f'Goal True. idtac "@@AUDIT {i}". Abort.')
        script.append(f"Print Assumptions {th.name}.")
        script.append('Goal True. idtac "@@PREMISES". Abort.')
        script.append(f"Goal ltac:(let T := type of @{th.name} in exact T). ojas_premises. Abort.")
    return "\n".join(script) + "\n"


def _run_coq(scripts: list[str], root: Path, what: str) -> list[str]:
    """Run each script through coqc (in parallel) against the built rocq/; their outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k, text in enumerate(scripts):
            vfile = Path(tmp) / f"Audit{k}.v"
            vfile.write_text(text)
            procs.append(
                subprocess.Popen(
                    ["coqc", "-Q", str(root / "rocq"), LOGICAL_PREFIX, str(vfile)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=tmp,
                )
            )
        outputs = [proc.communicate() + (proc.returncode,) for proc in procs]
    for out, err, code in outputs:
        if code != 0:
            raise ProofAuditError(f"{what} failed:\n{out[-3000:]}\n{err[-3000:]}")
    return [out for out, _, _ in outputs]


def _answers(out: str, marker: str) -> dict[int, str]:
    parts = re.split(rf"^@@{marker} (\d+)\s*$", out, flags=re.M)
    return {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)}


def _strip_parens(text: str) -> str:
    """``(a -> b)`` -> ``a -> b``: Coq prints a premise in parentheses; ``(a) -> (b)`` stays."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _parse_premises(block: str) -> list[str]:
    """The premise types ``ojas_premises`` printed, each on one line, outer parentheses removed."""
    return [_strip_parens(" ".join(p.split())) for p in block.split("@@PREMISE")[1:]]


def _union_script(names: list[str], root: Path) -> str:
    """One ``Print Assumptions`` over every constant of ``names`` at once (a ``let`` of each in one
    definition): the union of their axioms, at the cost of one traversal (one per constant costs
    about 0.75 s each on 2 cores)."""
    body = " ".join(f"let _ := @{name} in" for name in names)
    return (
        "\n".join(
            _requires(root)
            + [f"Definition ojas_audit_union : True := {body} I.", "Print Assumptions ojas_audit_union."]
        )
        + "\n"
    )


def union_assumptions(names: list[str], root: Path = REPO_ROOT) -> list[str]:
    """The axioms that any of the constants ``names`` assumes (:func:`_union_script`)."""
    return _parse_assumptions(_run_coq([_union_script(names, root)], root, "Print Assumptions")[0]) if names else []


def _premises_script(theorems: list[Theorem], root: Path) -> str:
    script = _requires(root) + [_LTAC]
    for i, th in enumerate(theorems):
        script.append(f'Goal True. idtac "@@AUDIT {i}". Abort.')
        script.append(f"Goal ltac:(let T := type of @{th.name} in exact T). ojas_premises. Abort.")
    return "\n".join(script) + "\n"


def _reusable_assumptions(theorems: list[Theorem], saved: dict | None, root: Path) -> dict[str, list[str]] | None:
    """The committed manifest's per-theorem assumptions, when its source hashes match ``rocq/``
    and it lists every theorem of ``theorems``; else None."""
    if not saved or "theorems" not in saved or "files" not in saved or stale_files(saved, root):
        return None
    recorded = {th["name"]: th["assumptions"] for th in saved["theorems"]}
    return recorded if all(th.name in recorded for th in theorems) else None


def print_assumptions(theorems: list[Theorem], root: Path = REPO_ROOT, jobs: int = 2, saved: dict | None = None) -> str:
    """Fill in each theorem's assumptions (``Print Assumptions``) and premises (``ojas_premises``)
    and return how the assumptions were found.

    With ``saved``, a committed manifest whose source hashes match ``rocq/`` (what
    ``ojas rocq --write-manifest`` wrote from these very sources), one ``Print Assumptions`` over
    all the theorems at once (:func:`union_assumptions`) must give exactly the union of the
    manifest's per-theorem lists; then those lists are kept ("reused"). Otherwise, or when the
    union differs, ``Print Assumptions`` runs on each theorem, in ``jobs`` parallel coqc runs
    ("per theorem"). Either way no assumption outside the union escapes :func:`disallowed`."""
    recorded = _reusable_assumptions(theorems, saved, root)
    if recorded is not None:
        union = set(union_assumptions([th.name for th in theorems], root))
        if union == {ax for th in theorems for ax in recorded[th.name]}:
            out = _run_coq([_premises_script(theorems, root)], root, "Listing the premises")[0]
            answers = _answers(out, "AUDIT")
            for i, th in enumerate(theorems):
                if i not in answers:
                    raise ProofAuditError(f"no premises answer for {th.name}")
                th.assumptions = list(recorded[th.name])
                th.premises = _parse_premises(answers[i])
            return "reused"
    shares = [theorems[k::jobs] for k in range(jobs)]
    outs = _run_coq([_assumptions_script(share, root) for share in shares], root, "Print Assumptions")
    for share, out in zip(shares, outs):
        answers = _answers(out, "AUDIT")
        for i, th in enumerate(share):
            if i not in answers or "@@PREMISES" not in answers[i]:
                raise ProofAuditError(f"no Print Assumptions answer for {th.name}")
            axioms, premises = answers[i].split("@@PREMISES", 1)
            th.assumptions = _parse_assumptions(axioms)
            th.premises = _parse_premises(premises)
    return "per theorem"


def witness_candidates(root: Path = REPO_ROOT) -> dict[str, str]:
    """theorem -> witness, from the ``Definition <thm>_witness`` of the witness files:
    ``rocq/Witnesses/<path>.v`` witnesses the theorems of ``rocq/<path>.v``."""
    found: dict[str, str] = {}
    pattern = re.compile(rf"^\s*Definition\s+([A-Za-z_][A-Za-z0-9_']*){WITNESS_SUFFIX}\b", re.M)
    for rel in project_files(root):
        if not is_witness_file(rel):
            continue
        target = str(Path(*Path(rel).parts[1:]))
        text = strip_comments((root / "rocq" / rel).read_text())
        for m in pattern.finditer(text):
            found[f"{module_path(target)}.{m.group(1)}"] = f"{module_path(rel)}.{m.group(1)}{WITNESS_SUFFIX}"
    return found


def _witness_script(pairs: list[tuple[str, str]], root: Path, each: bool) -> str:
    """Check each witness's shape (``ojas_check_witness``); with ``each``, ``Print Assumptions`` of
    each witness too (to name the one that assumes an axiom the union found)."""
    script = _requires(root) + [_LTAC]
    for i, (thm, wit) in enumerate(pairs):
        script.append(f'Goal True. idtac "@@WITNESS {i}". Abort.')
        script.append(f"Goal True. let b := eval cbv delta [{wit}] in {wit} in ojas_check_witness @{thm} b. Abort.")
        if each:
            script.append(f"Print Assumptions {wit}.")
    return "\n".join(script) + "\n"


def check_witnesses(theorems: list[Theorem], root: Path = REPO_ROOT) -> list[str]:
    """Set ``witness`` on each exported theorem whose witness passes; the problems found
    (a witness of no exported theorem, not a full application, with an axiom)."""
    by_name = {th.name: th for th in theorems if th.exported}
    candidates = witness_candidates(root)
    problems = [
        f"{wit} witnesses {thm}, which is not an exported theorem of rocq/"
        for thm, wit in candidates.items()
        if thm not in by_name
    ]
    pairs = [(thm, wit) for thm, wit in candidates.items() if thm in by_name]
    if not pairs:
        return problems
    # the witnesses' axioms: one Print Assumptions over all of them; each one's only if that finds
    # an axiom beyond ALLOWED_AXIOMS
    each = not set(union_assumptions([wit for _, wit in pairs], root)) <= ALLOWED_AXIOMS
    out = _run_coq([_witness_script(pairs, root, each)], root, "checking the witnesses")[0]
    answers = _answers(out, "WITNESS")
    for i, (thm, wit) in enumerate(pairs):
        block = answers.get(i, "")
        axioms = [
            ax
            for ax in _parse_assumptions(block.split("@@WITNESS_", 1)[-1].split("\n", 1)[-1])
            if ax not in ALLOWED_AXIOMS
        ]
        if "@@WITNESS_HEAD" in block:
            problems.append(f"{wit} is not an application of {thm}")
        elif "@@WITNESS_PARTIAL" in block:
            problems.append(
                f"{wit} applies {thm} to too few arguments: its type is still a product "
                "(every premise must be instantiated)"
            )
        elif "@@WITNESS_OK" not in block:
            problems.append(f"no answer checking {wit}")
        elif axioms:
            problems.append(f"{wit} assumes {', '.join(axioms)}")
        else:
            by_name[thm].witness = wit
    return problems


#: ``forall x : R, ... (f x)``: a premise that puts every value of a function in a set (a format).
_EVERYWHERE_RE = re.compile(r"^forall (\w+) : R, .*\((\w+) \1\)$")
#: ``forall x : R, guards -> Rabs (f x - g) <= E``: an accuracy premise of ``f``.
_ACCURACY_RE = re.compile(r"^forall (\w+) : R, (?:(.*) -> )?Rabs \((\w+) \1 - .*\) <= (.*)$")


def _bounds_both_sides(var: str, guards: str) -> bool:
    """Whether the guards ``a -> b -> ...`` bound ``var`` from below and from above."""
    v = re.escape(var)
    below = re.search(rf"<=? {v}\b", guards) is not None
    above = re.search(rf"\b{v} <=?", guards) is not None
    return below and above


def vacuity_pattern(premises: list[str]) -> list[str]:
    """Functions whose premises match the lg family's unsatisfiable pattern: a premise that
    every value of ``f`` lies in a set (a float format: its gaps grow) together with an
    absolute accuracy bound (``E`` free of ``x``) against some function on a range of ``x``
    not bounded on both sides.  A heuristic on the printed premises: a theorem that matches
    but is satisfiable has to show it with a witness."""
    everywhere = {m.group(2) for p in premises if (m := _EVERYWHERE_RE.match(p))}
    flagged = []
    for p in premises:
        m = _ACCURACY_RE.match(p)
        if not m or m.group(3) not in everywhere:
            continue
        var, guards, bound = m.group(1), m.group(2) or "", m.group(4)
        if re.search(rf"\b{re.escape(var)}\b", bound) is None and not _bounds_both_sides(var, guards):
            flagged.append(m.group(3))
    return sorted(set(flagged))


def witness_problems(theorems: list[Theorem], saved: dict | None, require_witnesses: bool) -> list[str]:
    """Exported theorems with premises that lack a witness and may not: one the saved
    manifest records as witnessed, one showing the vacuity pattern, or any with
    ``require_witnesses``."""
    was_witnessed = {th["name"] for th in (saved or {}).get("theorems", []) if th.get("witness")}
    problems = []
    for th in theorems:
        if not th.exported or not th.premises or th.witness:
            continue
        if th.name in was_witnessed:
            problems.append(f"{th.name} ({th.file}) lost its witness")
        elif vacuity_pattern(th.premises):
            problems.append(
                f"{th.name} ({th.file}) has premises of the unsatisfiable pattern "
                f"(every value of {', '.join(vacuity_pattern(th.premises))} a float with an absolute "
                "accuracy bound on an unbounded range) and no witness"
            )
        elif require_witnesses:
            problems.append(f"{th.name} ({th.file}) has premises and no witness")
    return problems


def witness_summary(theorems: list[dict]) -> tuple[int, int]:
    """(witnessed, with premises) among the exported theorems of a manifest."""
    with_premises = [th for th in theorems if th.get("premises")]
    return sum(1 for th in with_premises if th.get("witness")), len(with_premises)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(theorems: list[Theorem], root: Path = REPO_ROOT) -> dict:
    files = sorted({th.file for th in theorems} | {f"rocq/{rel}" for rel in project_files(root)})
    return {
        "allowed_axioms": sorted(ALLOWED_AXIOMS),
        "files": {f: sha256(root / f) for f in files},
        "theorems": [{**asdict(th), "premises": len(th.premises)} for th in theorems if th.exported],
        "lemmas": [th.name for th in theorems if not th.exported],
    }


def disallowed(theorems: list[Theorem]) -> list[str]:
    return [
        f"{th.name} ({th.file}) assumes {ax}" for th in theorems for ax in th.assumptions if ax not in ALLOWED_AXIOMS
    ]


def run_audit(root: Path = REPO_ROOT, log=print, require_witnesses: bool | None = None) -> dict:
    """Build, scan, Print Assumptions, find the premises and check the witnesses; return
    the manifest, or raise ProofAuditError."""
    require_sources(root)
    missing = missing_tools(PROOF_TOOLS)
    if missing:
        raise SourcesMissing(
            f"rebuilding rocq/ needs {', '.join(missing)}, not found on PATH (scripts/setup.sh installs them)"
        )
    problems = scan_sources(root)
    if problems:
        raise ProofAuditError("forbidden declarations in the Coq sources:\n" + "\n".join(problems))
    log("building rocq/ ...")
    build(root)
    theorems = list_theorems(root)
    exported = [th for th in theorems if th.exported]
    log(
        f"Print Assumptions for the {len(exported)} exported theorems "
        f"({len(theorems) - len(exported)} lemmas are covered through them and by the source scan) ..."
    )
    saved_path = root / "rocq" / "MANIFEST.json"
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else None
    how = print_assumptions(exported, root, saved=saved)
    if how == "reused":
        log("sources match rocq/MANIFEST.json, whose axioms one Print Assumptions over them all confirms: lists kept")
    bad = disallowed(theorems)
    if bad:
        raise ProofAuditError("assumptions beyond the standard axioms:\n" + "\n".join(bad))
    bad = check_witnesses(theorems, root)
    require = REQUIRE_ALL_WITNESSES if require_witnesses is None else require_witnesses
    bad += witness_problems(theorems, saved, require)
    data = manifest(theorems, root)
    done, total = witness_summary(data["theorems"])
    log(
        f"{done} of {total} exported theorems with premises witnessed"
        + ("" if require or done == total else f' ({total - done} not yet: see rocq/MANIFEST.json, "witness": null)')
    )
    if bad:
        raise ProofAuditError("premises without a valid witness:\n" + "\n".join(bad))
    return data


def load_manifest(path: Path = MANIFEST_PATH) -> dict:
    if not path.exists():
        raise ProofAuditError(f"{path} is missing: run `ojas proofs --write-manifest` where coqc exists")
    return json.loads(path.read_text())


def stale_files(saved: dict, root: Path = REPO_ROOT) -> list[str]:
    """Files whose hash differs from the manifest's, or that it does not know."""
    current = {f"rocq/{rel}" for rel in project_files(root)}
    stale = [f for f in sorted(current) if saved["files"].get(f) != sha256(root / f)]
    stale += [f for f in saved["files"] if f not in current]
    return stale


def write_manifest(data: dict, path: Path = MANIFEST_PATH) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def manifest_matches(data: dict, path: Path = MANIFEST_PATH) -> bool:
    return path.exists() and json.loads(path.read_text()) == json.loads(json.dumps(data))


def print_report(theorems: list[dict], log=print) -> None:
    """One line per exported theorem: name, file, assumptions."""
    for th in theorems:
        axioms = ", ".join(a.rsplit(".", 1)[-1] for a in th["assumptions"]) or "none"
        log(f"  {th['kind']:<11} {th['name']}  [{th['file']}]  axioms: {axioms}")
