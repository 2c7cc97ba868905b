"""Shared test settings: hypothesis profiles.

``ci`` (the default) is derandomized, so a run is reproducible; ``dev`` draws fresh
examples and more of them. Pick one with HYPOTHESIS_PROFILE=dev.
"""

import os

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
