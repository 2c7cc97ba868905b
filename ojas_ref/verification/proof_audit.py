"""Audit of the Coq proofs: nothing admitted, nothing assumed beyond the standard axioms.

``ojas proofs`` builds ``rocq/``, scans the sources for ``Admitted``/``admit``/
global ``Axiom``/``Parameter``, runs ``Print Assumptions`` on every exported
theorem (``Theorem``, ``Corollary``, ``Proposition``: what the code cites; the
lemmas they use are covered by their assumptions), and fails if an assumption outside :data:`ALLOWED_AXIOMS` appears.  It
writes (or checks) ``rocq/MANIFEST.json``: theorem -> file -> source hash, which
``ojas audit`` reads on machines without Coq.

Both commands read the Coq sources, so they need a source checkout of the repository
(``rocq/`` and ``extraction/``, which a wheel or a non-editable ``pip install`` does not
ship): :func:`require_sources` says so, naming the tools the rebuild needs, instead of a
bare error from ``make``.
"""

from __future__ import annotations

import hashlib
import json
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


def list_theorems(root: Path = REPO_ROOT) -> list[Theorem]:
    """Theorems and lemmas declared in the files of rocq/_CoqProject, with qualified names."""
    found: list[Theorem] = []
    for rel in project_files(root):
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
            f"(scripts/setup.sh installs them)")


def build(root: Path = REPO_ROOT) -> None:
    """Compile rocq/ (make -C rocq)."""
    proc = subprocess.run(["make", "-C", str(root / "rocq")], capture_output=True, text=True)
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


def _assumptions_script(theorems: list[Theorem], root: Path) -> str:
    modules = [module_path(rel) for rel in project_files(root)]
    script = [f"From {LOGICAL_PREFIX} Require {m[len(LOGICAL_PREFIX) + 1:]}." for m in modules]
    for i, th in enumerate(theorems):
        script.append(f'Goal True. idtac "@@AUDIT {i}". Abort.')
        script.append(f"Print Assumptions {th.name}.")
    return "\n".join(script) + "\n"


def print_assumptions(theorems: list[Theorem], root: Path = REPO_ROOT, jobs: int = 2) -> None:
    """Fill in each theorem's assumptions: ``Print Assumptions`` in ``jobs`` parallel coqc runs."""
    shares = [theorems[k::jobs] for k in range(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k, share in enumerate(shares):
            vfile = Path(tmp) / f"AuditAssumptions{k}.v"
            vfile.write_text(_assumptions_script(share, root))
            procs.append(subprocess.Popen(
                ["coqc", "-Q", str(root / "rocq"), LOGICAL_PREFIX, str(vfile)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp))
        outputs = [proc.communicate() + (proc.returncode,) for proc in procs]
    for share, (out, err, code) in zip(shares, outputs):
        if code != 0:
            raise ProofAuditError(f"Print Assumptions failed:\n{out[-3000:]}\n{err[-3000:]}")
        parts = re.split(r"^@@AUDIT (\d+)\s*$", out, flags=re.M)
        answers = {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)}
        for i, th in enumerate(share):
            if i not in answers:
                raise ProofAuditError(f"no Print Assumptions answer for {th.name}")
            th.assumptions = _parse_assumptions(answers[i])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(theorems: list[Theorem], root: Path = REPO_ROOT) -> dict:
    files = sorted({th.file for th in theorems} | {f"rocq/{rel}" for rel in project_files(root)})
    return {
        "allowed_axioms": sorted(ALLOWED_AXIOMS),
        "files": {f: sha256(root / f) for f in files},
        "theorems": [asdict(th) for th in theorems if th.exported],
        "lemmas": [th.name for th in theorems if not th.exported],
    }


def disallowed(theorems: list[Theorem]) -> list[str]:
    return [
        f"{th.name} ({th.file}) assumes {ax}"
        for th in theorems
        for ax in th.assumptions
        if ax not in ALLOWED_AXIOMS
    ]


def run_audit(root: Path = REPO_ROOT, log=print) -> dict:
    """Build, scan and Print Assumptions; return the manifest, or raise ProofAuditError."""
    require_sources(root)
    missing = missing_tools(PROOF_TOOLS)
    if missing:
        raise SourcesMissing(f"rebuilding rocq/ needs {', '.join(missing)}, not found on PATH "
                              "(scripts/setup.sh installs them)")
    problems = scan_sources(root)
    if problems:
        raise ProofAuditError("forbidden declarations in the Coq sources:\n" + "\n".join(problems))
    log("building rocq/ ...")
    build(root)
    theorems = list_theorems(root)
    exported = [th for th in theorems if th.exported]
    log(f"Print Assumptions for the {len(exported)} exported theorems "
        f"({len(theorems) - len(exported)} lemmas are covered through them and by the source scan) ...")
    print_assumptions(exported, root)
    bad = disallowed(theorems)
    if bad:
        raise ProofAuditError("assumptions beyond the standard axioms:\n" + "\n".join(bad))
    return manifest(theorems, root)


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
