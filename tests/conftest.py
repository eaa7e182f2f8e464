"""Shared fixtures: every test that takes `backend` runs once per backend in
GOHCCL_TEST_BACKENDS (default "gohccl")."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import BACKENDS  # noqa: E402


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKENDS, scope="session")


def pytest_report_header(config):
    transport = os.environ.get("GOHCCL_TRANSPORT", "auto")
    return f"gohccl tests: backends {BACKENDS} (GOHCCL_TEST_BACKENDS), GOHCCL_TRANSPORT={transport}"


@pytest.fixture(scope="session", autouse=True)
def _backend_importable():
    """Fail early and once, with the reason, if gohccl cannot be imported."""
    if "gohccl" in BACKENDS:
        import subprocess
        probe = subprocess.run(
            [sys.executable, "-c", "import gohccl"], capture_output=True, text=True,
            timeout=120)
        if probe.returncode != 0:
            pytest.exit("GOHCCL_TEST_BACKENDS includes gohccl but `import gohccl` fails:\n"
                        + probe.stderr[-3000:], returncode=1)
    yield
