"""The verbs that read, plan, fit and report run without torch: a laptop without it can plan a sweep,
list the recipes, fit and plot a cluster's results (and each such verb is spared torch's seconds of import).

Each case runs the real CLI in a fresh interpreter and checks afterwards that torch was never imported.
(`scaling fit` and `scaling report` have theirs in test_fits.py and test_reports.py.)
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_without_torch(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`scaling *argv` run in a new interpreter (`scaling.cli.main`, as the `scaling` command runs it), which
    exits 3 if the command imported torch: its exit status otherwise, its output captured."""
    code = ("import sys; from scaling.cli import main; rc = main(sys.argv[1:]); "
            "sys.exit(3 if 'torch' in sys.modules else rc)")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


def has_cuda_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize("argv", [
    ["recipes"],
    ["recipes", "--json"],
    # --device: where it is left to plan, a machine with a CUDA driver asks torch how many GPUs it has
    # (test_sweep_plan_on_a_machine_without_cuda_imports_no_torch)
    ["sweep", "plan", "sweeps/demo.toml", "--device", "cpu"],
    ["sweep", "plan", "sweeps/micro.toml", "--data", "builtin", "--device", "gpu", "--json"],
    ["sweep", "plan", "sweeps/paper.toml", "--data", "builtin", "--device", "gpu"],
    # the argument checks every bench call runs imported torch; `bench fit` and `calibration` (the same
    # path, but 30 s and 10 min) ran on a laptop only through this
    ["bench", "targets"],
    ["bench", "targets", "--json"],
    # sizes and FLOPs from the ladder's arithmetic (models.ladder; test_models checks it against the built
    # models' parameter counts): it never imported torch, and a laptop keeps it so
    ["models", "--json"],
], ids=" ".join)
def test_verb_imports_no_torch(argv):
    r = run_without_torch(argv)
    assert r.returncode != 3, f"`scaling {' '.join(argv)}` imported torch"
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.skipif(has_cuda_driver(), reason="a CUDA driver is installed: plan asks torch how many GPUs it has")
def test_sweep_plan_on_a_machine_without_cuda_imports_no_torch():
    """With no --device, plan prices the runs where a local launch would train them: on this machine's
    GPUs if it has any. Without a CUDA driver it has none, and torch need not be asked."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = run_without_torch(["sweep", "plan", "sweeps/demo.toml"], env)
    assert r.returncode != 3, "`scaling sweep plan sweeps/demo.toml` imported torch"
    assert r.returncode == 0, r.stderr[-2000:]
    assert "priced on CPU: a local launch trains on this machine's CPU (it has no GPU)" in r.stdout


def test_the_gpu_count_is_torchs():
    """The GPUs a local launch uses (and plan prices) are the ones torch sees."""
    import torch

    from sweeps.launch import cuda_device_count

    assert cuda_device_count() == torch.cuda.device_count()
