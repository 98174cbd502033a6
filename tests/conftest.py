"""Test-session set-up shared by every test file.

The suite runs on every core (pyproject's addopts: `-n auto`, pytest-xdist). Each worker keeps to
its share of them: torch (and the processes the tests start, which inherit the variable) would
otherwise run a thread per core in every worker. Set before any test module imports torch.
"""

from __future__ import annotations

import os

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1 and "OMP_NUM_THREADS" not in os.environ:
    from scaling import usable_cpus  # (torch-free)

    os.environ["OMP_NUM_THREADS"] = str(max(1, usable_cpus() // _workers))
