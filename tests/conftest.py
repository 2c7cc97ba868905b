"""Shared test settings: hypothesis profiles, the ``oracle`` marker, and the ``one_thread`` and
``oracle_and_hand`` fixtures.

``ci`` (the default) is derandomized, so a run is reproducible; ``dev`` draws fresh
examples and more of them. Pick one with HYPOTHESIS_PROFILE=dev.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``oracle`` (bounds with no hand copy) skip, with the reason, where the oracle
    binary is not built (a GPU machine without Coq); where it is built (CI) they run."""
    from ojas_ref.verification.bounds.common import oracle_bounds_available

    marked = [item for item in items if item.get_closest_marker("oracle")]
    if marked and not oracle_bounds_available():
        skip = pytest.mark.skip(
            reason="needs the extracted oracle, which is not built here (scripts/setup.sh --proofs)"
        )
        for item in marked:
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
