"""The verbs that read, plan, fit and report run without torch: a laptop without it can plan a sweep,
list the recipes, fit and plot a cluster's results (and each such verb is spared torch's seconds of import).

Each case runs the real CLI in a fresh interpreter and checks afterwards that torch was never imported.
(`scaling fit` and `scaling report` have theirs in test_fits.py and test_reports.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_without_torch(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`scaling *argv` run in a new interpreter (`scaling.cli.main`, as the `scaling` command runs it), which
    exits 3 if the command imported torch: its exit status otherwise, its output captured."""
    code = ("import sys; from scaling.cli import main; rc = main(sys.argv[1:]); "
            "sys.exit(3 if 'torch' in sys.modules else rc)")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("argv", [
    ["recipes"],
    ["recipes", "--json"],
    # --device: where it is left to plan, a machine with a CUDA driver asks torch how many GPUs it has
    # (test_sweep_plan_on_a_machine_without_cuda_imports_no_torch)
    ["sweep", "plan", "sweeps/demo.toml", "--device", "cpu"],
    ["sweep", "plan", "sweeps/micro.toml", "--data", "builtin", "--device", "gpu", "--json"],
    ["sweep", "plan", "sweeps/paper.toml", "--data", "builtin", "--device", "gpu"],
], ids=" ".join)
def test_verb_imports_no_torch(argv):
    r = run_without_torch(argv)
    assert r.returncode != 3, f"`scaling {' '.join(argv)}` imported torch"
    assert r.returncode == 0, r.stderr[-2000:]
