"""Shared test settings: hypothesis profiles, and the ``one_thread`` fixture.

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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only cost time (about 4x on 2 shared cores); a module
    uses it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
