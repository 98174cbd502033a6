"""The verbs that read, plan, fit and report run without torch: a laptop without it can plan a sweep,
list the recipes, fit and plot a cluster's results (and each such verb is spared torch's seconds of import).

Each case runs the real CLI in a fresh interpreter and checks afterwards that torch was never imported (nor, for
`sweep plan` on a CPU machine, submitit: a plan asks sweeps.machine, not sweeps.launch, what this machine offers).
(`scaling fit` and `scaling report` have theirs in test_fits.py and test_reports.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.machine import has_cuda_driver

ROOT = Path(__file__).resolve().parents[1]


def run_without(modules: tuple[str, ...], argv: list[str],
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`scaling *argv` run in a new interpreter (`scaling.cli.main`, as the `scaling` command runs it), which
    exits 3 if the command imported one of `modules`, naming them on stderr: its exit status otherwise, its output
    captured."""
    code = ("import sys; from scaling.cli import main; rc = main(sys.argv[2:]); "
            "found = [m for m in sys.argv[1].split(',') if m in sys.modules]; "
            "found and print('imported', *found, file=sys.stderr); sys.exit(3 if found else rc)")
    return subprocess.run([sys.executable, "-c", code, ",".join(modules), *argv], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def run_without_torch(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`run_without` torch."""
    return run_without(("torch",), argv, env)


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


@pytest.mark.parametrize("device", [[], ["--device", "gpu"]], ids=["auto", "gpu"])
def test_sweep_plan_on_a_cpu_machine_imports_no_submitit(device):
    """Where a local launch would train, with how many threads and workers, plan asks sweeps.machine, not
    sweeps.launch, which imports submitit (its SLURM executor): a plan is spared its import, and runs where it is
    missing. (Both plan's questions: where it trains, and, priced on a GPU, how many workers a launch starts.)"""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # a machine without a GPU, driver or not
    argv = ["sweep", "plan", "sweeps/demo.toml", *device]
    r = run_without(("submitit", "sweeps.launch"), argv, env)
    assert r.returncode != 3, f"`scaling {' '.join(argv)}`: {r.stderr.strip()}"
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"priced on {'GPU' if device else 'CPU'}:" in r.stdout


def test_the_gpu_count_is_torchs():
    """The GPUs a local launch uses (and plan prices) are the ones torch sees: where no CUDA driver loads, the count
    made without torch (0) is torch's too. (Where one loads, cuda_device_count asks torch, so this holds by
    construction; the H100 ran it, docs/sweeps.md.)"""
    import torch

    from sweeps.machine import cuda_device_count

    assert cuda_device_count() == torch.cuda.device_count()


MOVED_SPEC = """
name = "moved"
data = "{data}"
[grid]
family = "nanochat"
size = "0.5M"
recipe = "bf16"
tokens = 4096
[train]
seq_len = 64
batch_size = 8
eval_tokens = 1024
"""


def test_a_launch_refused_for_a_moved_corpus_imports_no_torch(tmp_path, run_on_moved_corpus):
    """`sweep launch` into a folder whose runs trained on the spec's corpus at its old path refuses, naming the
    corpus as the runs' own, moved (`check_same_spec`); the words come from scaling.run_data, which a laptop
    without torch can import: the refusal is said without torch's seconds of import."""
    from sweeps.spec import load_spec

    spec, sweep_dir = tmp_path / "spec.toml", tmp_path / "sweep"

    def config_for(corpus):
        spec.write_text(MOVED_SPEC.format(data=corpus))
        (c,) = load_spec(spec, []).runs()
        return c

    before, moved = run_on_moved_corpus(sweep_dir, config_for)
    spec.write_text(MOVED_SPEC.format(data=moved))
    r = run_without_torch(["sweep", "launch", str(spec), "--sweep-dir", str(sweep_dir)])
    assert r.returncode != 3, "`scaling sweep launch` imported torch to refuse a moved corpus"
    assert r.returncode == 2 and f"trained on the data {before}, which {moved} holds too" in r.stderr, r.stderr[-2000:]


def test_run_data_imports_no_torch_lightning_or_polars():
    """Which corpus a run trains on, and its checks (scaling.run_data), are torch-free: `sweep launch` words its
    moved-corpus refusal with them, and other torch-free code may use them. scaling.data (which reads corpora
    with polars) is imported inside its functions only."""
    code = ("import sys; from scaling.run_data import (DATA_IDENTITY, check_run_data, data_identity, moved_corpus, "
            "moved_corpus_link, resolve_data_dir); print(*(m for m in ('torch', 'lightning', 'polars') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [], f"importing scaling.run_data imported {r.stdout.strip()}"
