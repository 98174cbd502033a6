"""Test-session set-up shared by every test file.

The suite runs on every core (pyproject's addopts: `-n auto`, pytest-xdist). Each worker keeps to
its share of them: torch (and the processes the tests start, which inherit the variable) would
otherwise run a thread per core in every worker. Set before any test module imports torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1 and "OMP_NUM_THREADS" not in os.environ:
    from scaling import usable_cpus  # (torch-free)

    os.environ["OMP_NUM_THREADS"] = str(max(1, usable_cpus() // _workers))


@pytest.fixture
def full_disk(tmp_path):
    """A real 1 MiB file system (tmpfs; needs root, as on CI's machine) to fill, unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def pytest_configure(config):
    """Under `--dist loadgroup` pytest-xdist (3.8) schedules a test marked `xdist_group` by the group it
    appends to the test's id ("@slurm"); pytest 9.2 keeps ids where xdist cannot append, so the group's
    tests would run at once on several workers (the SLURM tests then preempt each other's jobs). Stop
    with the reason rather than fail at random (the test extra pins pytest below 9.2)."""
    if getattr(config.option, "dist", "no") == "loadgroup" and pytest.version_tuple >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__} breaks pytest-xdist's --dist loadgroup (the SLURM "
                                "tests would run at once and preempt each other's jobs): install the test extra "
                                "(pip install -e '.[test]', which pins pytest<9.2)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Grouped tests first (the SLURM tests, minutes of jobs in one worker): collected last, their group
    ran alone at the end of the session while the other workers had finished."""
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


@pytest.fixture
def run_on_moved_corpus(tmp_path):
    """make(sweep_dir, config_for) -> (before, moved): a copy of the built-in corpus at tmp_path/corpus, one run of
    config_for(that path) recorded under sweep_dir as `scaling train` records it before its first step (config.json,
    and data.json naming the corpus), then the corpus moved to tmp_path/moved."""
    from scaling import data
    from scaling.run_data import data_identity

    def make(sweep_dir: Path, config_for) -> tuple[Path, Path]:
        before, moved = tmp_path / "corpus", tmp_path / "moved"
        shutil.copytree(data.builtin_data_dir(data.BUILTIN_VOCAB_SIZE), before)
        config = config_for(before)
        run_dir = sweep_dir / config.run_id
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(config.resolved().to_json())
        (run_dir / "data.json").write_text(json.dumps(data_identity(data.read_meta(before))))
        before.rename(moved)
        return before, moved

    return make
