"""Shared test settings: hypothesis profiles, the gating markers (``gpu``, ``interpreter``,
``kernel``, ``oracle``), and the ``one_thread`` and ``oracle_and_hand`` fixtures.

``ci`` (the default) is derandomized, so a run is reproducible; ``dev`` draws fresh
examples and more of them. Pick one with HYPOTHESIS_PROFILE=dev.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# A test module may import another's helpers (``from test_offload import train``): every test
# folder is on sys.path from the start, so that works whatever order (or xdist worker) collects
# them in. Test file names are unique across the folders (pytest's default import mode needs it).
sys.path[:0] = [
    str(p)
    for p in sorted(Path(__file__).parent.iterdir())
    if p.is_dir() and p.name[0] not in "._" and p.name != "fixtures"
]

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=50,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    """Under pytest-xdist (``check.sh`` runs ``-n auto``) each worker gets its share of the cores
    as torch's intra-op threads, so the workers do not oversubscribe the machine."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _gates() -> dict[str, tuple[bool, str]]:
    """Marker name -> (whether its tests can run here, the reason they skip where they cannot).
    Read after collection: a kernel test module sets TRITON_INTERPRET=1 where there is no CUDA
    device, before it imports ojas_kernels (Triton reads it when a kernel is defined)."""
    from ojas_ref.functional.dispatch import triton_interpreted
    from ojas_ref.verification.bounds.common import oracle_bounds_available

    cuda = torch.cuda.is_available()
    triton = importlib.util.find_spec("triton") is not None
    interpreted = triton and triton_interpreted()
    return {
        "gpu": (cuda, "needs a CUDA device"),
        "interpreter": (interpreted, "needs triton and TRITON_INTERPRET=1 (the Triton kernels on the CPU)"),
        "kernel": (triton and (cuda or interpreted), "needs triton, and CUDA or TRITON_INTERPRET=1"),
        "oracle": (
            oracle_bounds_available(),
            "needs the extracted oracle, which is not built here (scripts/setup.sh --proofs)",
        ),
    }


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu``, ``interpreter``, ``kernel`` or ``oracle`` (bounds with no hand copy) skip,
    with the reason, where their condition does not hold (pyproject.toml lists the markers); where
    it holds they run."""
    gates = ("gpu", "interpreter", "kernel", "oracle")
    gated = [item for item in items if any(item.get_closest_marker(name) for name in gates)]
    if not gated:
        return
    for name, (runs, reason) in _gates().items():
        if runs:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in gated:
            if item.get_closest_marker(name):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only cost time (about 4x on 2 shared cores); a module
    uses it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def oracle_and_hand():
    """``both(f, *args, **kwargs)``: the value of a bound function of
    ojas_ref/verification/bounds/ from the oracle and from its hand copy (the oracle
    switched off for the second call); skips when the oracle binary is not built."""
    from ojas_ref.verification.bounds import common as eb

    if not eb.oracle_bounds_available():
        pytest.skip("oracle not built (make -C extraction)")

    def both(f, *args, **kwargs):
        oracle = f(*args, **kwargs)
        eb._oracle_state["available"] = False
        try:
            return oracle, f(*args, **kwargs)
        finally:
            del eb._oracle_state["available"]

    return both
