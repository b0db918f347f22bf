"""Ray tests: they need the ``ray`` extra and run in the ray leg of ``.ci/run``.

Without Ray they are skipped by ``pytest.importorskip`` at the top of each module (the main leg has no Ray); with ``ROLLOUTHUB_TEST_REQUIRE_RAY=1`` (the ray leg) a
missing Ray fails at import instead. Every test here carries the ``ray`` marker.

Test clusters are started with Ray's token authentication turned off explicitly (``RAY_AUTH_MODE=disabled``): they
run on one machine, on their own temp dir and free ports, and need no token shared between runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Iterator, List

import pytest

SKIP_REASON = "the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')"
"""Each test module starts with ``pytest.importorskip("ray", reason=SKIP_REASON)`` (a conftest may not skip)."""

if os.environ.get("ROLLOUTHUB_TEST_REQUIRE_RAY") == "1":
    import ray  # noqa: F401  - the ray leg must not skip: fail here when Ray cannot be imported


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark every test of this directory with ``ray``."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """A local Ray cluster for the module: a private temp dir, no dashboard, free ports, 4 CPUs, no token auth."""
    import ray

    assert not ray.is_initialized(), "another Ray cluster is still connected"
    previous = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp_dir = tempfile.mkdtemp(prefix="rh-ray-", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        ray.init(_temp_dir=temp_dir, include_dashboard=False, num_cpus=4, namespace="rollouthub")
        yield ray
    finally:
        ray.shutdown()
        if previous is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous
        shutil.rmtree(temp_dir, ignore_errors=True)
