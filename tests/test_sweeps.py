"""Sweep specs (validation, overrides, isoFLOP, plan), run locks, relaunch logic, local launch + collect.

The SLURM launcher is tested against a real one-node cluster in tests/test_sweeps_slurm.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scaling.cli import main
from scaling.errors import UserError

# Two tiny runs: the 0.5M model, 4096 tokens (8 steps of 8×64) each.
TINY = """
name = "tiny"
data = "builtin"
[grid]
family = "nanochat"
size = "0.5M"
recipe = "bf16"
tokens = 4096
seed = [0, 1]
[train]
seq_len = 64
batch_size = 8
eval_tokens = 1024
eval_interval = 4
[executor.local]
cpu_jobs = 2
[executor.slurm]
time = "10:00"
gpus = 0
cpus = 1
"""


def write_spec(tmp_path: Path, text: str = TINY, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str = TINY, overrides: tuple[str, ...] = ()):
    from sweeps.spec import load_spec

    return load_spec(write_spec(tmp_path, text), list(overrides))


# ---------------------------------------------------------------------------------------------
# Validation: one message naming the key path; exit 2 from the CLI; nothing submitted


@pytest.mark.parametrize(
    "override, message",
    [
        ('grid.recipe=["bf16", "nvfp5"]', "grid.recipe[1]: unknown recipe 'nvfp5' (did you mean nvfp4?); known recipes: "),
        ('grid.size=["0.5M", "3M"]', "grid.size[1]: unknown model size '3M'; choose one of 0.5M, 1M"),
        ('grid.tokens="many"', "grid.tokens[0]: not a token count: 'many' (try 2M, 500k or 2000000)"),
        ('grid.tokens=["4k", "1.5"]', "grid.tokens[1]: not a token count: '1.5' is not a whole number of tokens"),
        ("grid.seed=-1", "grid.seed[0]: expected a non-negative integer, got -1"),
        ('grid.family="gpt5"', "grid.family[0]: unknown model family 'gpt5'; choose one of llama2, nanochat"),
        ('grid.family="Llama2"', "grid.family[0]: unknown model family 'Llama2' (did you mean llama2?); choose one of"),
        ('grid.size="160m"', "grid.size[0]: unknown model size '160m' (did you mean 160M?); choose one of"),
        ('train.seq_len="long"', "train.seq_len: expected an integer, got 'long'"),
        ("train.learning_rate=0.1", "train.learning_rate: unknown setting; known: "),
        ("train.recipe='bf16'", "train.recipe: set it as grid.recipe, not in [train]"),
        ("executor.slurm.cpus=1.5", "executor.slurm.cpus: expected an integer, got 1.5"),
        ('executor.slurm.time="soon"', "executor.slurm.time: 'soon' is not a SLURM time"),
        # a limit within the warning before it requeued every job before its first step, 50 times (QA)
        ("executor.slurm.time=1", "executor.slurm.time: '1' (60 s) is not longer than signal_delay_s (120 s)"),
        ('executor.slurm.time="0:01:30"', "executor.slurm.time: '0:01:30' (90 s) is not longer than signal_delay_s"),
        ("executor.slurm.time=0", "executor.slurm.time: '0' is SLURM's 'no limit'; give the jobs a limit"),
        ('executor.slurm={time="0:02:01", signal_delay_s=150}', "'0:02:01' (121 s) is not longer than signal_delay_s (150 s)"),
        ("executor.local.gpus=3", "executor.local.gpus: 3 is not \"all\" or a list of GPU indices"),
        ("executor.local.gpus=[0, 0]", "executor.local.gpus: [0, 0] names a GPU twice"),
        ("grid.sizes=1", "grid.sizes: unknown key (did you mean size?); known: family, lr_mult, recipe, seed, size, "
         "tokens, tokens_per_param"),
        # a near miss of a key is named, as a recipe file's is (a user's walk: `seqlen`, `recipes`, `executr`)
        ("train.seqlen=32", "train.seqlen: unknown setting (did you mean seq_len?); known: batch_size,"),
        ('grid.recipes=["bf16"]', "grid.recipes: unknown key (did you mean recipe?); known: family,"),
        ("executr.default='local'", "executr: unknown key (did you mean executor?); known: data, executor,"),
        ("executor.local.cpu_job=2", "executor.local.cpu_job: unknown setting (did you mean cpu_jobs?); known:"),
        ("executor.slurm.partiton='gpu'", "executor.slurm.partiton: unknown setting (did you mean partition?); known:"),
        # (both given with --set; one given with --set replaces the spec's: test_a_token_budget_given_with_set_...)
        ("grid={tokens_per_param=20, tokens=8192}", "grid: give exactly one of grid.tokens, grid.tokens_per_param or "
         "isoflop.budgets"),
        ("executor.local.cpu_jobs=0", "executor.local.cpu_jobs: must be at least 1 (got 0)"),
        ("executor.slurm.array_parallelism=0", "executor.slurm.array_parallelism: must be at least 1"),
        ("executor.slurm.gpus=-1", "executor.slurm.gpus: must be not negative"),
        # each job held them and trained on one, plan pricing one (audit)
        ("executor.slurm.gpus=2", "executor.slurm.gpus: 2 GPUs a job, but a run trains on one"),
        ('name=".."', "name: '..' is not a usable folder name"),
        # a value listed twice was merged into one grid point, unsaid (audit): refused, in the spelling given
        ("grid.tokens=[4096, 4096]", "grid.tokens[1]: 4096 repeats grid.tokens[0] = 4096; list each value once"),
        ('grid.tokens=["4k", 8192, 4000]', "grid.tokens[2]: 4000 repeats grid.tokens[0] = '4k' (both 4000); list each"),
        ("grid.seed=[0, 1, 0]", "grid.seed[2]: 0 repeats grid.seed[0] = 0; list each value once"),
        ("grid.lr_mult=[1, 2, 1.0]", "grid.lr_mult[2]: 1 repeats grid.lr_mult[0] = 1; list each value once"),
        ('grid.size=["0.5M", "0.5M"]', "grid.size[1]: '0.5M' repeats grid.size[0] = '0.5M'; list each value once"),
        ('grid.recipe=["bf16", "nvfp4", "bf16"]', "grid.recipe[2]: 'bf16' repeats grid.recipe[0] = 'bf16'; list each"),
        ('grid.family=["nanochat", "nanochat"]', "grid.family[1]: 'nanochat' repeats grid.family[0] = 'nanochat'"),
        ("grid.tokens_per_param=[2, 2.0]", "grid.tokens_per_param[1]: 2 repeats grid.tokens_per_param[0] = 2; list"),
        ("isoflop.budgets=[1e12, 1000000000000]", "isoflop.budgets[1]: 1000000000000 repeats isoflop.budgets[0] = "
         "1e+12 (both 1e+12); list each value once (one value twice is one grid point, trained once)"),
        # a list or table that is not TOML was kept as a string: "unknown recipe '[bf16,nvfp4]'" (audit)
        ("grid.recipe=[bf16,nvfp4]", "--set grid.recipe=[bf16,nvfp4]: [bf16,nvfp4] is not a TOML list (strings in it "
         "are quoted): --set 'grid.recipe=[\"bf16\", \"nvfp4\"]'"),
        ("grid.tokens=[4096, 8192", "--set grid.tokens=[4096, 8192: [4096, 8192 is not a TOML list"),
        ("train={seq_len=128", "--set train={seq_len=128: {seq_len=128 is not a TOML table"),
    ],
)
def test_bad_spec_names_the_key_path(tmp_path, override, message):
    with pytest.raises(UserError) as err:
        load(tmp_path, overrides=(override,))
    assert message in str(err.value)


def test_high_precision_blocks_beyond_a_sizes_depth_are_refused_at_plan(tmp_path):
    """A recipe file keeping block 7 in BF16 fits the 0.5M model (10 blocks) but not 1M (5): plan
    refused nothing and every 1M job failed on the cluster when convert() met it (QA)."""
    recipe = tmp_path / "keep7.toml"
    recipe.write_text('name = "keep7"\nbase = "nvfp4"\nhigh_precision_blocks = [0, 7]\n')
    grid = f'grid.recipe=["bf16", "{recipe}"]'
    load(tmp_path, overrides=(grid,))  # 0.5M alone: fine
    with pytest.raises(UserError, match=r"grid: recipe keep7: high_precision_blocks \[7\] name no block of "
                                        r"nanochat 1M, which has 5 .*drop that size or recipe"):
        load(tmp_path, overrides=(grid, 'grid.size=["0.5M", "1M"]'))


def test_run_config_checks_reach_the_user(tmp_path):
    spec = load(tmp_path, overrides=('train.schedule="linear"',))
    with pytest.raises(UserError, match=r"^train: unknown schedule 'linear'; .* \(run nanochat 0.5M bf16 tokens=4096 "
                                        r"seed=0\)$"):  # (the grid point as the sweep's messages name it: no dict)
        spec.runs()
    with pytest.raises(UserError, match="train: seq_len must be a positive whole number"):
        load(tmp_path, overrides=("train.seq_len=0",)).runs()
    # a vocabulary no byte-level BPE has: plan priced it and launch refused it, naming train's --vocab-size
    with pytest.raises(UserError, match=r"^train: vocab_size 10 must be above 256 \(the byte alphabet\) and at most "):
        load(tmp_path, overrides=("train.vocab_size=10",)).runs()
    with pytest.raises(UserError, match=r"grid.tokens\[0\] = 1000 gives the run .*, but tokens 1,000 is less than one "
                                        r"batch \(32 sequences x 64 tokens"):
        load(tmp_path, overrides=("grid.tokens=1000", "train.batch_size=32")).runs()


@pytest.mark.parametrize(
    "override, message",
    [
        ("isoflop.budgets=[1e12, 1e30]", r"isoflop.budgets\[1\] = 1e\+30 gives the run nanochat 0.5M bf16 tokens=\d+ seed=0, "
         r"but tokens must be a number from 1 to 1e\+15, got 3.39084e\+23; give isoflop.budgets values from 1.51e\+09 to "
         r"2.94e\+21, the range in which every size of the grid trains from one batch to 1e\+15 tokens$"),
        ("grid.tokens_per_param=[1e-9]", r"grid.tokens_per_param\[0\] = 1e-09 gives the run nanochat 0.5M bf16 tokens=1 "
         r"seed=0, but tokens 1 is less than one batch \(8 sequences x 64 tokens = 512\); give grid.tokens_per_param "
         r"values from 0.00105 to 2.03e\+09, .* \(or set a smaller train.batch_size or train.seq_len\)$"),
        ("grid.tokens=[4096, 1e16]", r"grid.tokens\[1\] = 1e\+16 gives .*; give grid.tokens values from 512 to 1e\+15, "),
    ],
)
def test_a_token_count_no_run_can_train_names_the_grid_setting(tmp_path, override, message):
    """`--set isoflop.budgets=[1e30]` was refused as `train: tokens ...; raise tokens`, naming neither the
    setting the user gave nor the values that work (QA)."""
    with pytest.raises(UserError) as err:
        load(tmp_path, overrides=(override, "grid.seed=0")).runs()
    assert re.search(message, str(err.value)), err.value
    assert "train:" not in str(err.value) and "raise tokens" not in str(err.value)
    key, low, high = re.search(r"give (\S+) values from (\S+) to (\S+),", str(err.value)).groups()
    assert len(load(tmp_path, overrides=(f"{key}=[{low.replace(',', '')}, {high}]", "grid.seed=0")).runs()) == 2  # both ends train


def test_plan_assumptions_and_foreign_folders_are_one_line_errors(tmp_path, capsys):
    spec = write_spec(tmp_path)
    for flag, value in (("--mfu", "0"), ("--mfu", "-1"), ("--mfu", "30"), ("--peak-tflops", "0")):
        assert main(["sweep", "plan", str(spec), flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag} ") and "Traceback" not in err, err
    elsewhere = tmp_path / "not-a-sweep"
    (elsewhere / "notes").mkdir(parents=True)
    for verb in ("status", "collect"):
        assert main(["sweep", verb, str(elsewhere)]) == 2
        assert "is not a sweep directory" in capsys.readouterr().err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["notes"]  # nothing written into it
    notes = write_spec(tmp_path, "just notes", "notes.txt")
    for verb in ("status", "collect"):  # a file is named as one, not as a missing folder
        assert main(["sweep", verb, str(notes)]) == 2
        assert "is a file, not a folder" in capsys.readouterr().err
    damaged = tmp_path / "damaged"
    (damaged / "run1").mkdir(parents=True)
    (damaged / "run1" / "result.json").write_text('{"run_id": "run1", "sta')
    assert main(["sweep", "collect", str(damaged)]) == 2  # not a 0-row table that hides the run
    assert "run1/result.json is not a result record (not a JSON object)" in capsys.readouterr().err
    assert not (damaged / "results.parquet").exists()
    for content, problem in (("{}", "no run_id, status, recipe"),  # not a row of nulls
                             ('{"run_id": "run1", "status": "completed", "recipe": "bf16", "val_loss": "abc"}',
                              "val_loss not a number"),  # not a column of strings
                             ('{"run_id": "run1", "status": "weird", "recipe": "bf16", "val_loss": 5.0}',
                              "status 'weird' is not one of completed, diverged, failed"),  # a relaunch moves it aside
                             ('{"run_id": "run2", "status": "completed", "recipe": "bf16", "val_loss": 5.0}',
                              "run_id 'run2' is another run's (this folder is run 'run1')")):  # a copied record: that run counted twice
        (damaged / "run1" / "result.json").write_text(content)
        assert main(["sweep", "collect", str(damaged)]) == 2
        assert f"is not a result record ({problem})" in capsys.readouterr().err
    assert not (damaged / "results.parquet").exists()
    (damaged / "sweep.json").write_text("{")  # a damaged plan is said, not read as no plan
    for verb in ("status", "collect"):
        assert main(["sweep", verb, str(damaged)]) == 2
        assert "sweep.json is damaged" in capsys.readouterr().err


def test_status_and_collect_of_a_spec_name_its_sweeps_folder(tmp_path, capsys, monkeypatch):
    """`scaling sweep status tiny.toml` said only that the spec is a file, not a folder (audit): it names the folder
    launch puts the spec's runs in (runs/<name> under the working folder) and the command, or says the sweep has not
    been launched from here."""
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, name="tiny.toml")
    write_spec(tmp_path, TINY.replace('name = "tiny"\n', ""), name="unnamed.toml")  # (named by its file: runs/unnamed)
    for verb in ("status", "collect"):
        assert main(["sweep", verb, "tiny.toml"]) == 2
        assert capsys.readouterr().err == (
            "error: tiny.toml is a sweep spec; its runs would be in runs/tiny, which does not exist here: it has not been "
            f"launched from this folder (`scaling sweep launch tiny.toml` launches it; one launched with --sweep-dir DIR: "
            f"scaling sweep {verb} DIR)\n")
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    (tmp_path / "runs" / "unnamed").mkdir()
    for verb in ("status", "collect"):
        for spec, name in (("tiny.toml", "tiny"), ("unnamed.toml", "unnamed")):
            assert main(["sweep", verb, spec]) == 2
            assert capsys.readouterr().err == (f"error: {spec} is a sweep spec; its runs are in runs/{name} (where `scaling "
                                               f"sweep launch` puts them without --sweep-dir): scaling sweep {verb} "
                                               f"runs/{name}\n")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["tiny", "unnamed"]  # nothing written
    assert not any((tmp_path / "runs" / "tiny").iterdir())


def test_report_and_fit_of_a_spec_name_its_sweeps_folder_and_the_command(tmp_path, capsys, monkeypatch):
    """`scaling report tiny.toml` said "neither a sweep directory nor a .csv/.parquet results table" and `scaling fit
    tiny.toml` that the spec "lacks column(s) N, loss, D" (audit): as `sweep status` does, they name the folder
    launch puts the spec's runs in and the command that reads it there."""
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, name="tiny.toml")
    use = {"report": "scaling report {} --out rep",  # (the --out given)
           "fit": "scaling sweep collect {0}, then scaling fit {0}/results.parquet"}
    argv = {"report": ["report", "tiny.toml", "--out", "rep"], "fit": ["fit", "tiny.toml"]}
    for verb in ("report", "fit"):
        assert main(argv[verb]) == 2
        assert capsys.readouterr().err == (
            "error: tiny.toml is a sweep spec; its runs would be in runs/tiny, which does not exist here: it has not been "
            f"launched from this folder (`scaling sweep launch tiny.toml` launches it; one launched with --sweep-dir DIR: "
            f"{use[verb].format('DIR')})\n")
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    for verb in ("report", "fit"):
        assert main(argv[verb]) == 2
        assert capsys.readouterr().err == ("error: tiny.toml is a sweep spec; its runs are in runs/tiny (where `scaling "
                                           f"sweep launch` puts them without --sweep-dir): {use[verb].format('runs/tiny')}\n")
    assert not (tmp_path / "rep").exists() and not any((tmp_path / "runs" / "tiny").iterdir())  # nothing written


def test_bad_spec_cli_exits_2_and_submits_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    for executor in ("local", "slurm"):
        rc = main(["sweep", "launch", str(spec), "--executor", executor, "--sweep-dir", str(sweep_dir),
                   "--set", 'grid.recipe=["bf16","nvfp5"]'])  # fmt: skip
        assert rc == 2
        err = capsys.readouterr().err
        assert err.startswith("error: grid.recipe[1]: unknown recipe 'nvfp5'") and "Traceback" not in err
        assert not sweep_dir.exists()
    assert main(["sweep", "plan", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad_toml = write_spec(tmp_path, "name = [", "bad.toml")
    assert main(["sweep", "plan", str(bad_toml)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_a_value_listed_twice_stops_plan_and_launch_with_one_line(tmp_path, capsys):
    """`tokens = [4096, 4096]` planned and launched one run per seed, as if listed once (audit): both refuse it."""
    spec, sweep_dir = write_spec(tmp_path), tmp_path / "sweep"
    for args in (["plan"], ["launch", "--executor", "local", "--sweep-dir", str(sweep_dir)]):
        assert main(["sweep", *args, str(spec), "--set", 'grid.tokens=[4096, "4096"]']) == 2
        err = capsys.readouterr().err
        assert err == "error: grid.tokens[1]: '4096' repeats grid.tokens[0] = 4096 (both 4096); list each value once " \
                      "(one value twice is one grid point, trained once)\n", err
    assert not sweep_dir.exists()


def test_a_table_given_to_set_merges_into_the_specs_table(tmp_path, capsys):
    # --set train={seq_len=128} replaced the whole [train] table: batch_size, eval_tokens and the rest
    # were silently dropped (and --set train={} emptied it); a table merges key by key
    spec = load(tmp_path, overrides=("train={seq_len=128}", "executor={local={cpu_jobs=1}}"))
    assert spec.train == {"seq_len": 128, "batch_size": 8, "eval_tokens": 1024, "eval_interval": 4}
    assert spec.local.cpu_jobs == 1 and spec.slurm.time == "10:00"
    path = write_spec(tmp_path)
    for item, said in (("train={}", "--set train={}: an empty table changes nothing"),
                       ("grid={}", "--set grid={}: an empty table changes nothing"),
                       ("grid.seed={a=1}", "--set grid.seed: the spec's grid.seed is [0, 1], not a table")):
        assert main(["sweep", "plan", str(path), "--set", item]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and "Traceback" not in err and err.count("\n") == 1


def test_a_diverged_run_is_named_with_its_step_by_launch_and_status(tmp_path, capsys):
    """The launch's line for a diverged run, and `sweep status` (with and without --runs), say at which
    step it diverged (result.json's diverged_at_step); they said only `diverged`."""
    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir),
                 "--set", "grid.seed=0", "--set", "train.fault_nan_at_step=3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert re.search(r"diverged .* at step 4 of 8", out), out
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "diverged at step 4" in out and "(nanochat 0.5M bf16) at step 4" in out
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["diverged_at_step"] == 4
    assert main(["sweep", "collect", str(sweep_dir)]) == 0  # the table has a diverged_at_step column
    assert re.search(r"diverged_at_step.*\n(.*\n)*.*diverged\s*\S?\s*4\b", capsys.readouterr().out)


def test_a_slurm_memory_size_is_checked_before_launch(tmp_path, capsys):
    """executor.slurm.mem = "lots" was accepted by plan and launch, for sbatch to refuse every job."""
    path = write_spec(tmp_path)
    for bad in ('"lots"', '"64 GiB"', '"1.5G"'):
        assert main(["sweep", "plan", str(path), "--set", f"executor.slurm.mem={bad}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: executor.slurm.mem: ") and "is not a SLURM memory size like" in err
    for good, kept in (('"64G"', "64G"), ('"500m"', "500m"), ("64000", "64000"), ('"1TB"', "1TB")):
        assert load(tmp_path, overrides=(f"executor.slurm.mem={good}",)).slurm.mem == kept


def test_a_token_budget_given_with_set_replaces_the_specs_other_one(tmp_path, capsys):
    """--set grid.tokens_per_param=... (or isoflop.budgets) on a spec with grid.tokens was refused as
    giving two token budgets, and --set cannot remove the spec's: no way to switch from the CLI."""
    spec = load(tmp_path, overrides=("grid.tokens_per_param=[10, 20]",))
    assert spec.tokens == () and spec.tokens_per_param == (10.0, 20.0)
    assert {c.tokens for c in spec.runs()} != {4096}
    iso = load(tmp_path, overrides=("isoflop.budgets=[1e12]",))
    assert len(iso.runs()) == 2 and {c.tokens for c in iso.runs()} != {4096}
    assert {c.tokens for c in load(tmp_path, overrides=("grid.tokens=[8192]",)).runs()} == {8192}
    # two budgets both given with --set are still refused
    path = write_spec(tmp_path)
    assert main(["sweep", "plan", str(path), "--set", "isoflop.budgets=[1e12]", "--set", "grid.tokens_per_param=10"]) == 2
    assert "give exactly one of" in capsys.readouterr().err


def test_runs_resolve_each_config_once(tmp_path, monkeypatch):
    """`runs` checks each grid point by resolving its config once; its ids are the configs' own."""
    from scaling.config import RunConfig

    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))
    calls = []
    resolve = RunConfig.resolved
    monkeypatch.setattr(RunConfig, "resolved", lambda self: calls.append(self) or resolve(self))
    runs = spec.runs()
    assert len(runs) == len(spec.points()) == len(calls) == 2
    monkeypatch.undo()
    assert len({r.run_id for r in runs}) == 2  # (two seeds: two runs, each its own id)


def test_overrides_isoflop_and_dedup(tmp_path):
    from models import model_size

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]", "grid.recipe=['bf16', 'nvfp4']", "name=other",
                                      "executor.slurm.partition=gpu", "train.eval_tokens=2048"))  # fmt: skip
    assert (spec.name, spec.seed, spec.recipe, spec.slurm.partition) == ("other", (0, 1, 2), ("bf16", "nvfp4"), "gpu")
    runs = spec.runs()
    assert len(runs) == 6 and len({r.run_id for r in runs}) == 6
    assert all(r.eval_tokens == 2048 and r.seq_len == 64 for r in runs)
    # isoFLOP: tokens = C / (6 N) for every (budget, size)
    iso = load(tmp_path, TINY.replace("tokens = 4096", "size = [\"0.5M\", \"1M\"]").replace('size = "0.5M"\n', "")
               + "[isoflop]\nbudgets = [1e12, 4e12]\n", overrides=("grid.seed=0",))  # fmt: skip
    got = sorted((p["size"], p["tokens"]) for p in iso.points())
    want = sorted((s, round(c / (6 * model_size("nanochat", s).n_params))) for s in ("0.5M", "1M") for c in (1e12, 4e12))
    assert got == want
    # tokens_per_param (a value listed twice is refused: test_bad_spec_names_the_key_path)
    tpp = load(tmp_path, TINY.replace("tokens = 4096", "tokens_per_param = [2, 3]"), overrides=("grid.seed=0",))
    assert [p["tokens"] for p in tpp.points()] == [k * model_size("nanochat", "0.5M").n_params for k in (2, 3)]
    # token counts as `scaling train --tokens` takes them
    written = load(tmp_path, TINY.replace("tokens = 4096", 'tokens = ["4k", "1.5M", 8192]'), overrides=("grid.seed=0",))
    assert [p["tokens"] for p in written.points()] == [4000, 1_500_000, 8192]


def test_plan_prints_runs_flops_and_gpu_hours(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", "plan", str(spec), "--json", "--mfu", "0.5", "--peak-tflops", "100", "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    from models import model_size

    s = model_size("nanochat", "0.5M")
    assert plan["runs"] == 2 and [r["seed"] for r in plan["run_list"]] == [0, 1]
    assert plan["total_flops"] == 2 * 6 * s.n_params * 4096  # 6·N·D: the fits' C
    # the hours count the FLOPs MFU counts (result.json's, `bench train`'s): the built-in corpus's vocab 4096, seq_len 64
    exact = 2 * (6 * (s.n_params + 4096 * s.width) + 12 * s.depth * s.width * 64) * 4096
    assert plan["total_flops_exact"] == exact
    assert plan["train_hours"] == pytest.approx(exact / (0.5 * 100e12) / 3600)
    assert plan["gpu_hours"] == pytest.approx(plan["train_hours"] + plan["eval_hours"])  # (evaluations: below)
    assert main(["sweep", "plan", str(spec), "--device", "gpu", "--bench", "none"]) == 0  # (no bf16 row: assumed MFU)
    out = capsys.readouterr().out
    assert "2 runs" in out and "GPU-hours at an assumed 30% MFU of 989 TFLOP/s" in out and "0.5M" in out
    assert "(MFU as `scaling train` measures it: " in out
    assert "priced on GPU: --device gpu" in out


def test_plan_prices_each_runs_evaluations_as_forward_passes(tmp_path, capsys):
    """plan priced training steps only, and said on CPU alone that evaluations come on top: sweeps/demo.toml was priced
    0.0108 CPU-hours (39 s) where its runs evaluate 8 times each on 4,096 tokens, as many forward-pass tokens as 2.1x
    the tokens they train. Each run's evaluations are priced now: `evaluation_count` passes (every eval_interval steps
    and after the last, as train evaluates) over eval_tokens in whole windows, a third of a training step's FLOPs a
    token (the forward's share), at the step's FLOP/s and its recipe's speed; a line splits training from evaluation
    and says what is not counted (start-up, checkpoints)."""
    from models import model_size
    from scaling.config import evaluates_after, evaluation_count

    # TINY: 8 steps of 8 x 64 tokens, eval_interval 4 (evaluations after steps 4 and 8), eval_tokens 1024
    assert (evaluation_count(8, 4), evaluation_count(8, 3), evaluation_count(8, 1)) == (2, 3, 8)  # (3: steps 3, 6, 8)
    assert all(evaluation_count(n, k) == sum(evaluates_after(s, n, k) for s in range(1, n + 1))  # (the trainer's rule)
               for n in range(1, 30) for k in range(1, 12))
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0")
                      .replace("eval_tokens = 1024", "eval_tokens = 1000"))  # (15 whole windows of 64: 960 tokens)
    bench = _bench_file(tmp_path, [_bf16_row("nanochat", "0.5M", 1_000_000),
                                   {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.8,
                                    "compile_mode": "reduce-overhead"}])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    bf16, nvfp4 = plan["run_list"]
    s = model_size("nanochat", "0.5M")
    assert bf16["eval_tokens"] == 2 * 960
    assert bf16["eval_flops_exact"] == pytest.approx(s.flops_per_token_exact(4096, 64) * 2 * 960 / 3)
    assert bf16["eval_hours"] / bf16["train_hours"] == pytest.approx(bf16["eval_flops_exact"] / bf16["flops_exact"])
    assert nvfp4["eval_hours"] == pytest.approx(bf16["eval_hours"] / 0.8)  # (the recipe's speed: a third of its work)
    for run in (bf16, nvfp4):
        assert run["gpu_hours"] == run["hours"] == pytest.approx(run["train_hours"] + run["eval_hours"])
    assert plan["gpu_hours"] == pytest.approx(plan["train_hours"] + plan["eval_hours"])
    assert plan["eval_hours"] == pytest.approx(bf16["eval_hours"] + nvfp4["eval_hours"])
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "eval_gpu_hours" in out
    assert (f"of which training steps {plan['train_hours']:.3g} GPU-hours and evaluations {plan['eval_hours']:.3g} "
            "(forward passes over 3.84e+03 validation tokens in all") in out, out
    assert "not counted, on top: each run's start-up" in out
    # on CPU: by 6·N, the forward's 2·N a token
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu": [
        {"recipe": "bf16", "family": "nanochat", "size": "0.5M", "tokens_per_s": 8000, "cpu_ratio_vs_bf16": 1.0}]}))
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu), "--device", "cpu"]) == 0
    bf16 = json.loads(capsys.readouterr().out)["run_list"][0]
    assert bf16["eval_flops"] == 2 * s.n_params * 2 * 960
    assert bf16["eval_hours"] == pytest.approx(bf16["eval_flops"] / (8000 * 6 * s.n_params) / 3600)
    assert bf16["cpu_hours"] == pytest.approx(bf16["train_hours"] + bf16["eval_hours"])


def test_plan_says_its_gpu_hours_do_not_count_runs_sharing_a_gpu(tmp_path, capsys, monkeypatch):
    """A local launch trains executor.local.jobs_per_gpu runs at once on each GPU (sweeps/micro.toml: 4), and the plan's
    GPU-hours, each run's alone on a GPU summed, said nothing of it: runs sharing a GPU each take longer than priced,
    and the GPU is held for less than their sum only where one run alone leaves it idle. A line says so, and that no
    speed-up is counted (none measured); SLURM (a GPU a job) and jobs_per_gpu = 1 get none."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU here: a local launch uses it
    shared = write_spec(tmp_path, TINY.replace("cpu_jobs = 2", "cpu_jobs = 2\njobs_per_gpu = 4"))
    assert main(["sweep", "plan", str(shared), "--bench", "none"]) == 0
    out = capsys.readouterr().out
    assert ("jobs_per_gpu = 4: a local launch trains 4 runs at once on each GPU; the GPU-hours are each run's alone on "
            "a GPU, summed") in out and "no speed-up from sharing has been measured, so none is counted" in out, out
    assert main(["sweep", "plan", str(shared), "--bench", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs_per_gpu"] == 4
    for args, spec in ((["--executor", "slurm", "--set", "executor.slurm.gpus=1"], shared), ([], write_spec(tmp_path))):
        assert main(["sweep", "plan", str(spec), "--bench", "none", *args]) == 0
        assert "jobs_per_gpu" not in capsys.readouterr().out


def test_plan_resolves_each_run_config_once(tmp_path, monkeypatch):
    """plan resolved every run's config three times: checking the grid (`SweepSpec.runs`), then again for its
    run_id and for its FLOPs as MFU counts them. It takes the grid's resolved configs and ids (`resolved_runs`)."""
    from sweeps.plan import plan_rows
    from scaling.config import RunConfig

    spec = load(tmp_path)
    resolve = RunConfig.resolved
    calls = []
    monkeypatch.setattr(RunConfig, "resolved", lambda self: calls.append(self) or resolve(self))
    rows = plan_rows(spec)
    assert len(rows) == 2 and len(calls) == 2
    monkeypatch.undo()
    assert [r["run_id"] for r in rows] == [c.run_id for c in spec.runs()]


def test_plan_prices_gpu_hours_at_the_vocab_of_the_corpus_the_runs_train_on(tmp_path, monkeypatch):
    """MFU counts the LM head at the corpus's vocab (result.json, `bench train`), so plan priced a run by 6·N·D
    at a measured MFU under-counted its hours (0.38x at 10M, vocab 32768). The vocab is a prepared dir's
    meta.json; a raw corpus not yet prepared, the one `scaling data prepare` gives; the built-in corpus's."""
    from models import model_size
    from scaling import data
    from sweeps.plan import plan_rows

    monkeypatch.setenv("SCALING_CACHE", str(tmp_path / "cache"))  # (no prepared copy of the raw corpus)
    s = model_size("nanochat", "0.5M")

    def hours(vocab: int) -> float:  # two runs of 4096 tokens at seq_len 64, 30% of 989 TFLOP/s
        return 2 * (6 * (s.n_params + vocab * s.width) + 12 * s.depth * s.width * 64) * 4096 / (0.3 * 989e12) / 3600

    prepared = tmp_path / "prepared"
    prepared.mkdir()
    meta = dict(format_version=1, vocab_size=1000, dtype="uint16", eot_id=0, train_tokens=8, val_tokens=4,
                train_docs=1, val_docs=1, train_bytes=8, val_bytes=4, bytes_per_token=1.0)
    (prepared / "meta.json").write_text(json.dumps(meta))
    (prepared / "train.bin").write_bytes(bytes(16))
    (prepared / "val.bin").write_bytes(bytes(8))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    for where, vocab in (("builtin", data.BUILTIN_VOCAB_SIZE), (prepared, 1000), (corpus, data.DEFAULT_VOCAB_SIZE)):
        rows = plan_rows(load(tmp_path, overrides=(f'data="{where}"',)))
        assert sum(r["train_hours"] for r in rows) == pytest.approx(hours(vocab)), where
        assert rows[0]["flops"] == 6 * s.n_params * 4096  # (the fits' C, unchanged)


def test_plan_counts_the_tokens_a_run_trains_whole_batches_of(tmp_path, capsys):
    """A run trains whole batches (batch_size x seq_len) and its result records those tokens as D (and its
    flops by them), but plan counted the tokens the grid asked for: `tokens = 4000` at batches of 8 x 64 = 512
    tokens trains 3,584, and plan showed 4000 and priced 6·N·4000 as the fits' C, 12% more than the run
    records. It counts the tokens trained and says, for a run that loses more than 1% of its budget so, why."""
    from models import model_size
    from sweeps.plan import plan_rows

    spec = load(tmp_path, overrides=("grid.tokens=4000", "grid.seed=0"))
    (row,) = plan_rows(spec)
    (config,) = spec.runs()
    assert config.trained_tokens == 3584 and row["tokens"] == 3584 and row["tokens_asked"] == 4000
    s = model_size("nanochat", "0.5M")
    assert row["flops"] == 6 * s.n_params * 3584
    assert row["flops_exact"] == s.flops_per_token_exact(4096, 64) * 3584  # (the built-in corpus's vocabulary)
    assert main(["sweep", "plan", str(write_spec(tmp_path, TINY.replace("tokens = 4096", "tokens = 4000"))),
                 "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("train fewer tokens than the grid asks for" in w and "4,000 -> 3,584" in w for w in warnings), warnings
    (row,) = plan_rows(load(tmp_path, overrides=("grid.seed=0",)))  # 4096: whole batches, as asked
    assert row["tokens"] == row["tokens_asked"] == 4096 and not plan_warnings_of(row)


def plan_warnings_of(row: dict) -> list[str]:
    from scaling.commands.sweep import plan_warnings

    return [w for w in plan_warnings([row]) if "fewer tokens" in w]


def test_plan_prices_a_cpu_sweep_in_cpu_hours_from_the_cpu_rows(tmp_path, capsys, monkeypatch):
    """sweeps/demo.toml, launched locally on a machine without a GPU, trains on CPU, but plan priced it
    in H200 GPU-hours (1.8e-06 of them) without saying so. It now prices the runs where `launch` with
    the spec's default executor trains them (executor.slurm.gpus; locally this machine's GPUs, if any),
    says which, and on CPU counts the benchmark CPU's hours from its `cpu` rows: BF16's tokens/s times
    6·N, each recipe slowed by its CPU speed there."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0"))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu_machine": {"cpu": "Test CPU", "threads": 2}, "cpu": [
        {"recipe": "bf16", "family": "nanochat", "size": "1M", "tokens_per_s": 8000, "cpu_ratio_vs_bf16": 1.0},
        {"recipe": "nvfp4", "family": "nanochat", "size": "1M", "tokens_per_s": 6400, "cpu_ratio_vs_bf16": 1.25}]}))
    from models import model_size

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu)]) == 0
    plan = json.loads(capsys.readouterr().out)
    bf16, nvfp4 = plan["run_list"]
    assert plan["device"] == "cpu" and "no GPU" in plan["device_why"] and "gpu_hours" not in plan
    rate = 8000 * model_size("nanochat", "1M").flops_per_token()  # BF16 FLOP/s of the 1M row
    assert bf16["train_hours"] == pytest.approx(bf16["flops"] / rate / 3600)
    assert nvfp4["cpu_hours"] == pytest.approx(bf16["cpu_hours"] * 1.25) and nvfp4["vs_bf16"] == 0.8
    assert plan["cpu_hours"] == pytest.approx(bf16["cpu_hours"] + nvfp4["cpu_hours"])
    assert main(["sweep", "plan", str(spec), "--bench", str(cpu)]) == 0
    out = capsys.readouterr().out
    assert "priced on CPU: a local launch trains on this machine's CPU (it has no GPU)" in out
    assert "CPU-hours of the benchmark's CPU (Test CPU, 2 threads)" in out and "GPU-hours" not in out
    # a GPU here: a local launch would use it; a spec whose SLURM jobs ask for no GPU is on CPU anyway
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert main(["sweep", "plan", str(spec), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["device"] == "gpu" and "1 GPU" in plan["device_why"] and "gpu_hours" in plan
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu), "--set", "executor.default=slurm"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"
    # the default CPU file is a committed one (cpu.json on a CPU none was measured on: `test_plan_prices_a_cpu_sweep_
    # by_the_committed_file_of_this_machine`); a file without cpu rows, or none, cannot price a CPU sweep
    monkeypatch.setattr("scaling.cpu_name", lambda: "A CPU no committed file was measured on")
    assert main(["sweep", "plan", str(spec), "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["bench"].endswith("reports/bench/cpu.json")
    gpu_only = _bench_file(tmp_path, [{"recipe": "nvfp4", "family": "nanochat", "size": "40M", "ratio_vs_bf16": 0.75}])
    assert main(["sweep", "plan", str(spec), "--device", "cpu", "--bench", str(gpu_only)]) == 2
    assert "has no bf16 `cpu` row" in capsys.readouterr().err
    assert main(["sweep", "plan", str(spec), "--device", "cpu", "--bench", "none"]) == 2
    assert "needs a benchmark's `cpu` rows" in capsys.readouterr().err


def test_plan_prices_a_cpu_sweep_by_the_committed_file_of_this_machine(tmp_path, capsys, monkeypatch):
    """A CPU sweep was priced by reports/bench/cpu.json, a 2-thread Xeon's rows, on any CPU: on the 2-core AMD EPYC
    whose rows are cpu-epyc.json's the demo's sweep took 1.6-1.9x its price, and `sweep status`'s first ETA was 0.62 of
    its wall time. Without --bench the plan now takes the committed file whose cpu_machine is this machine's (its CPU
    model, and the threads a local launch shares), else cpu.json, and says why."""
    import sweeps.cost

    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    committed = tmp_path / "bench"
    committed.mkdir()

    def bench_file(name: str, cpu: str, tokens_per_s: float) -> Path:
        path = committed / name
        path.write_text(json.dumps({"cpu_machine": {"cpu": cpu, "threads": 3, "date": "2026-12-07T23:26:19Z"}, "cpu": [
            {"recipe": "bf16", "family": "nanochat", "size": "1M", "tokens_per_s": tokens_per_s,
             "cpu_ratio_vs_bf16": 1.0}]}))
        return path

    xeon, here = bench_file("cpu.json", "Another CPU", 8000), bench_file("cpu-fake.json", "Fake CPU 9000", 4000)
    monkeypatch.setattr(sweeps.cost, "DEFAULT_CPU_BENCH", xeon)
    monkeypatch.setattr("scaling.cpu_name", lambda: "Fake CPU 9000")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # (the threads a local launch here shares)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU

    def plan(*args: str) -> dict:
        assert main(["sweep", "plan", str(spec), "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    mine = plan()
    assert mine["bench"] == str(here) and mine["cpu"] == "Fake CPU 9000, 3 threads", mine["bench"]
    assert mine["bench_why"] == "the default: measured on this CPU, its model and threads"
    given = plan("--bench", str(xeon))  # a file the user names is priced by, whatever its machine, and no why is said
    assert mine["cpu_hours"] == pytest.approx(2 * given["cpu_hours"]) and given["bench_why"] is None
    assert main(["sweep", "plan", str(spec)]) == 0
    assert f"measured in {here} (the default: measured on this CPU, its model and threads)" in capsys.readouterr().out
    # the same CPU at other threads, or another CPU, is not this machine: cpu.json, and the line says none matched
    for threads, cpu in (("2", "Fake CPU 9000"), ("3", "Fake CPU 9001")):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        monkeypatch.setattr("scaling.cpu_name", lambda cpu=cpu: cpu)
        other = plan()
        assert other["bench"] == str(xeon) and other["cpu_hours"] == pytest.approx(given["cpu_hours"])
        assert other["bench_why"] == (f"the default: none of {tmp_path.name}/bench/'s files was measured on this CPU, "
                                      f"{cpu} at {threads} threads; `scaling bench cpu --out FILE` measures one")
    # a local launch prices its runs for `sweep status` by the same default
    from sweeps.plan import launch_prices
    from sweeps.spec import load_spec

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr("scaling.cpu_name", lambda: "Fake CPU 9000")
    assert launch_prices(load_spec(spec), "local")["bench"] == "cpu-fake.json"


def test_the_default_cpu_bench_parses_only_files_with_a_cpu_machine(tmp_path, monkeypatch):
    """Finding the file measured on this CPU parsed every file in reports/bench/ on each CPU plan and launch, the GPU
    and SASS files' 0.5 MB of JSON (~10 ms): a file without `cpu_machine` in its text is not parsed."""
    import sweeps.cost

    header = {"cpu_machine": {"cpu": "Fake CPU 9000", "threads": 3}, "cpu": [{"recipe": "bf16"}]}
    (tmp_path / "cpu-fake.json").write_text(json.dumps(header))
    (tmp_path / "h200.json").write_text(json.dumps({"device": "NVIDIA H200", "train": [{"recipe": "bf16"}] * 100}))
    (tmp_path / "damaged.json").write_text("{not json")
    monkeypatch.setattr(sweeps.cost, "DEFAULT_CPU_BENCH", tmp_path / "cpu.json")
    parsed, loads = [], json.loads
    monkeypatch.setattr(sweeps.cost.json, "loads", lambda text, **kw: parsed.append(text) or loads(text, **kw))
    assert sweeps.cost.default_cpu_bench({"cpu": "Fake CPU 9000", "threads": 3})[0] == tmp_path / "cpu-fake.json"
    assert len(parsed) == 1, parsed


def test_a_launch_prices_its_runs_without_the_cli(tmp_path, monkeypatch):
    """The launcher (a library) priced its runs by importing `scaling sweep`'s CLI module, where the pricing lived:
    it is sweeps.plan's, which the CLI prints. With the CLI module unimportable, the launch's plan still has prices."""
    import sys

    from sweeps.launch import pending
    from sweeps.store import read_json

    monkeypatch.setitem(sys.modules, "scaling.commands.sweep", None)  # (an import of it raises ImportError)
    spec = load(tmp_path)
    pending(spec, tmp_path / "sweep", executor="local")
    prices = read_json(tmp_path / "sweep" / "sweep.json")["prices"]
    assert set(prices["seconds"]) == {c.run_id for c in spec.runs()}, prices


def test_a_launch_resolves_each_run_once(tmp_path, monkeypatch):
    """A launch's plan resolved the spec's runs twice, once to price them and once to launch them (and each config's
    run_id resolved it again, four times a run): once now, the prices and the launch from the same resolved runs."""
    from scaling.config import RunConfig
    from sweeps.launch import pending

    spec = load(tmp_path)
    resolved, calls = RunConfig.resolved, []
    monkeypatch.setattr(RunConfig, "resolved", lambda self: calls.append(self) or resolved(self))
    todo, _ = pending(spec, tmp_path / "sweep", executor="local")
    assert len(todo) == 2 and len(calls) == 2, calls


def test_plan_prices_the_runs_where_launch_with_the_same_executor_trains_them(tmp_path, capsys, monkeypatch):
    """`launch` takes --executor and `plan` refused it ("unrecognized arguments"): a lab lead planning a local-default
    spec (sweeps/micro.toml) for SLURM from a login node without a GPU got CPU-hours, or had to know --set
    executor.default=slurm. plan --executor prices the runs where `launch --executor` trains them; --device still wins."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU
    on_gpus = write_spec(tmp_path, TINY.replace("gpus = 0", "gpus = 1"))  # local by default, SLURM jobs ask for a GPU
    assert main(["sweep", "plan", str(on_gpus), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"
    assert main(["sweep", "plan", str(on_gpus), "--json", "--executor", "slurm"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["device"], plan["executor"]) == ("gpu", "slurm") and "1 GPU (executor.slurm.gpus)" in plan["device_why"]
    assert main(["sweep", "plan", str(on_gpus), "--executor", "slurm"]) == 0
    out = capsys.readouterr().out
    assert "priced on GPU: `launch --executor slurm`: its SLURM jobs ask for 1 GPU" in out and "GPU-hours" in out
    no_gpu = write_spec(tmp_path, TINY.replace("[executor.local]", '[executor]\ndefault = "slurm"\n[executor.local]'))
    assert main(["sweep", "plan", str(no_gpu), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["executor"] == "slurm"
    assert main(["sweep", "plan", str(no_gpu), "--json", "--executor", "local"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["device"], plan["executor"]) == ("cpu", "local") and "no GPU" in plan["device_why"]
    assert main(["sweep", "plan", str(on_gpus), "--json", "--executor", "slurm", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"


def test_plan_reads_its_benchmark_once(tmp_path, capsys, monkeypatch):
    """`sweep plan` on CPU read cpu.json twice (the rows, then its machine); once now, on either device."""
    import sweeps.cost

    spec = write_spec(tmp_path)
    reads = []
    read = sweeps.cost.read_bench
    monkeypatch.setattr(sweeps.cost, "read_bench", lambda path, option: reads.append(path) or read(path, option))
    for device in ("cpu", "gpu"):
        reads.clear()
        assert main(["sweep", "plan", str(spec), "--json", "--device", device]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert len(reads) == 1 and str(reads[0]) == plan["bench"], (device, reads)
    assert plan["device"] == "gpu" and plan["run_list"]


def test_plan_of_a_large_grid_groups_its_table_by_family_size_and_recipe(tmp_path, capsys, monkeypatch):
    """Thousands of runs take a terminal minutes to draw: beyond PLAN_TABLE_RUNS, one row per family, size
    and recipe (their runs, token budgets, FLOPs and GPU-hours); --runs still prints every run."""
    from scaling.commands import sweep

    monkeypatch.setattr(sweep, "PLAN_TABLE_RUNS", 3)
    spec = write_spec(tmp_path, TINY.replace("tokens = 4096", "tokens = [4096, 8192]"))
    assert main(["sweep", "plan", str(spec), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["run_list"]
    assert len(runs) == 4  # 2 seeds x 2 budgets: over the (patched) limit
    assert main(["sweep", "plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "4 runs by family, size and recipe" in out and "4,096–8,192 (2 budgets)" in out
    assert not any(r["run_id"] in out for r in runs)
    grouped = f"{sum(r['flops'] for r in runs):.4g}"
    assert grouped in out  # the group's FLOPs: every run's
    assert main(["sweep", "plan", str(spec), "--runs"]) == 0
    out = capsys.readouterr().out
    assert all(r["run_id"] in out for r in runs)


def test_plan_warns_of_recipes_whose_runs_are_too_few_to_fit(tmp_path, capsys):
    """Two sizes and two budgets give a recipe 4 points: `scaling fit` refused them only after the sweep
    had run. The plan says so before the compute is spent (a warning: more runs may follow), in the fit's
    own words (`fit_refusal`)."""
    spec = write_spec(tmp_path, TINY.replace('size = "0.5M"', 'size = ["0.5M", "1M"]')
                      .replace("tokens = 4096", "tokens = [4096, 8192]").replace("seed = [0, 1]", "seed = 0"))
    assert main(["sweep", "plan", str(spec)]) == 0
    # the only group, or the baseline, is not left out: the fit is refused (the plan said "leave it out")
    assert ("warning: when every run completes, `scaling fit` and `scaling report` will refuse the fit: group 'bf16' "
            "has 4 points from 4 runs; a chinchilla fit needs at least 8 points (5 parameters) from 3 runs: add runs to "
            "it\n") in capsys.readouterr().out
    assert main(["sweep", "plan", str(spec), "--set", 'grid.recipe=["bf16", "nvfp4"]']) == 0
    out = capsys.readouterr().out
    assert ("will refuse the fit: group 'bf16' has 4 points from 4 runs; a chinchilla fit needs at least 8 points "
            "(5 parameters) from 3 runs: add runs to it (every penalty is measured against the baseline 'bf16': it "
            "cannot be left out)\n") in out
    assert "`scaling fit` will leave it out: group 'nvfp4' has 4 points" in out
    # --json has them too, in the same words (a script read no warning at all)
    assert main(["sweep", "plan", str(spec), "--set", 'grid.recipe=["bf16", "nvfp4"]', "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert [f"warning: {w}\n" in out for w in warnings] == [True, True], warnings
    from scaling.commands.sweep import unfittable
    from sweeps.plan import plan_rows
    from sweeps.spec import load_spec

    enough = load_spec(spec, ["grid.tokens=[4096, 8192, 16384, 32768]"])  # 2 sizes x 4 budgets: 8 points
    assert unfittable(plan_rows(enough)) == {}
    assert main(["sweep", "plan", str(spec), "--set", "grid.tokens=[4096, 8192, 16384, 32768]", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def _bench_file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"device": "test", "train": rows}))
    return path


def test_plan_counts_each_recipe_at_its_measured_speed(tmp_path, capsys):
    """An emulated FP4 recipe trains slower than BF16, so `sweep plan` divides its runs' GPU-hours by
    the speed `scaling bench train` measured for it: at the nearest model size of the run's own family
    (before a nearer size of another family), from the CUDA-graph rows where there are any; bf16 at 1."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0"))
    graphed = {"compile_mode": "reduce-overhead"}
    bench = _bench_file(tmp_path, [
        {"recipe": "nvfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": 0.85, **graphed},
        {"recipe": "nvfp4", "family": "nanochat", "size": "40M", "ratio_vs_bf16": 0.75, **graphed},
        {"recipe": "nvfp4", "family": "llama2", "size": "1M", "ratio_vs_bf16": 0.5, **graphed,
         "measured": "2026-12-06T09:10:00Z"},  # (a dated row: `scaling bench` stamps its rows since 2026-12-06)
        {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.3, "compile_mode": "default"},
    ])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    bf16, nvfp4 = json.loads(capsys.readouterr().out)["run_list"]
    assert (bf16["vs_bf16"], nvfp4["vs_bf16"]) == (1.0, 0.75) and nvfp4["speed_from"] == "nanochat 40M, bench.json"
    assert nvfp4["gpu_hours"] == pytest.approx(bf16["gpu_hours"] / 0.75)
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "0.75x (nanochat 40M, bench.json)" in out and "each recipe at its speed measured in" in out
    assert main(["sweep", "plan", str(spec), "--json", "--bench", "none", "--device", "gpu"]) == 0
    runs = json.loads(capsys.readouterr().out)["run_list"]
    assert [r["vs_bf16"] for r in runs] == [1.0, 1.0] and runs[0]["gpu_hours"] == runs[1]["gpu_hours"]
    llama = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = "nvfp4"').replace("seed = [0, 1]", "seed = 0")
                       .replace('family = "nanochat"', 'family = "llama2"'))
    assert main(["sweep", "plan", str(llama), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    assert json.loads(capsys.readouterr().out)["run_list"][0]["speed_from"] == "llama2 1M, bench.json, measured 2026-12-06"


def test_plan_says_which_sizes_it_priced_from_a_measurement_far_from_them(tmp_path, capsys):
    """sweeps/micro.toml's 1M-4M runs were priced at the speeds measured at nanochat 40M (10-40x their parameters) and
    paper.toml's 10M at 40M's, and the plan said only "0.756x (nanochat 40M, h200.json)": nothing told a budget that
    these sizes were never measured. A line names each size more than 2x from the row it was priced at, by how much,
    and the command that measures it; --json's `far_from_measured` holds the same line; near sizes get none."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0")
                      .replace('size = "0.5M"', 'size = ["0.5M", "4M"]'))
    bench = _bench_file(tmp_path, [{"recipe": "nvfp4", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 0.8},
                                   {"recipe": "bf16", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 1.0}])
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    far = [line for line in out.splitlines() if "far from" in line]
    assert len(far) == 1, out
    assert "nanochat 4M (nvfp4 at nanochat 1M's speed, 1/4 of its parameters)" in far[0], far
    assert "0.5M" not in far[0]  # 0.5M is 2x from 1M: the ladder's next size, near enough
    assert "scaling bench train --families nanochat --sizes 4M --out FILE" in far[0], far
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["far_from_measured"] == [far[0]]
    # which way: 4M, priced from a smaller model's row (its nvfp4 run alone: BF16 is at the assumed MFU), likely too many
    hours = next(r["gpu_hours"] for r in plan["run_list"] if (r["size"], r["recipe"]) == ("4M", "nvfp4"))
    assert (f"Priced from smaller models: nanochat 4M; a larger model spends a smaller share of its step in the "
            f"quantizers, so these runs likely train faster than priced: their hours are likely too many. These runs "
            f"are {hours:.3g} of the plan's {plan['gpu_hours']:.3g} GPU-hours.") in far[0], far
    # on CPU: BF16's FLOP/s is scaled from the 1M bf16 row too
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu": [
        {"recipe": "bf16", "family": "nanochat", "size": "1M", "tokens_per_s": 8000, "cpu_ratio_vs_bf16": 1.0},
        {"recipe": "nvfp4", "family": "nanochat", "size": "1M", "tokens_per_s": 6400, "cpu_ratio_vs_bf16": 1.25}]}))
    assert main(["sweep", "plan", str(spec), "--bench", str(cpu), "--device", "cpu", "--json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)["far_from_measured"]
    assert "nanochat 4M (bf16, nvfp4 at nanochat 1M's speed, 1/4 of its parameters)" in line, line
    assert "scaling bench cpu --families nanochat --sizes 4M --out FILE" in line, line
    assert "Priced from smaller models: nanochat 4M" in line and "likely too many" in line, line
    near = _bench_file(tmp_path, [{"recipe": "nvfp4", "family": "nanochat", "size": s, "ratio_vs_bf16": 0.8}
                                  for s in ("0.5M", "4M")])
    assert main(["sweep", "plan", str(spec), "--bench", str(near), "--device", "gpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["far_from_measured"] == []


def test_plan_says_which_way_a_size_priced_from_a_far_larger_model_is_likely_off(tmp_path, capsys):
    """The far line said only "a size below the row it was priced at is likely priced low, one above it high", leaving
    the reader to work out which sizes were which and how much of the budget they are. It now names the sizes priced
    from larger models, says they likely train slower than priced (their hours too few: a smaller model's quantizer
    share is larger and its BF16 MFU lower), and how many of the plan's hours those runs are; no correction is made."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0")
                      .replace('size = "0.5M"', 'size = ["0.5M", "4M"]'))
    bench = _bench_file(tmp_path, [_bf16_row("nanochat", "4M", 1_000_000),
                                   {"recipe": "nvfp4", "family": "nanochat", "size": "4M", "ratio_vs_bf16": 0.8,
                                    "compile_mode": "reduce-overhead"}])
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (line,) = plan["far_from_measured"]
    small = sum(r["gpu_hours"] for r in plan["run_list"] if r["size"] == "0.5M")  # bf16's far row prices both recipes
    assert 0 < small < plan["gpu_hours"]
    assert ("nanochat 0.5M (bf16, nvfp4 at nanochat 4M's speed, 8x its parameters). Priced from larger models: nanochat "
            "0.5M; a smaller model spends a larger share of its step in the quantizers and reaches a lower MFU in BF16, so "
            f"these runs likely train slower than priced: their hours are likely too few. These runs are {small:.3g} of "
            f"the plan's {plan['gpu_hours']:.3g} GPU-hours.") in line, line
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    assert line in capsys.readouterr().out
    # priced from a far larger row for BF16 and a far smaller one for nvfp4: no direction is claimed
    from sweeps.cost import far_from_measured

    runs = [{"family": "nanochat", "size": "4M", "recipe": "nvfp4", "hours": 2.0,
             "measured_at": {"bf16": "nanochat 40M", "nvfp4": "nanochat 0.5M"}},
            {"family": "nanochat", "size": "40M", "recipe": "bf16", "hours": 6.0, "measured_at": {"bf16": "nanochat 40M"}}]
    (line,) = far_from_measured(runs, "gpu", "bench.json", None)
    assert "Priced from both larger and smaller models: nanochat 4M; their hours may be off either way. These runs " \
           "are 2 of the plan's 8 GPU-hours." in line, line


def test_the_lines_naming_runs_likely_off_say_their_share_of_the_plan_alike():
    """far_from_measured and other_seq_len each built their "how many of the plan's hours" phrase, and said the whole
    plan two ways ("their 0.173 GPU-hours, the whole plan's, are likely too few"; "These runs are the whole plan's
    0.173 GPU-hours"). One function (`plan_share`) builds it now, and both lines end on "These runs are <share>"."""
    from sweeps.cost import far_from_measured, other_seq_len, plan_share

    assert plan_share(2.0, 8.0, "GPU-hours") == "2 of the plan's 8 GPU-hours"
    assert plan_share(8.0, 8.0, "GPU-hours") == plan_share(8.0 - 1e-12, 8.0, "GPU-hours") == \
        "the whole plan's 8 GPU-hours"
    runs = [{"family": "nanochat", "size": "1M", "recipe": "nvfp4", "hours": 8.0, "seq_len": 256,
             "measured_at": {"nvfp4": "nanochat 40M"}, "measured_seq_len": {"nvfp4": 1024}}]
    (far,) = far_from_measured(runs, "gpu", "bench.json", None)
    (seq,) = other_seq_len(runs, "gpu", "bench.json")
    whole = "These runs are the whole plan's 8 GPU-hours"
    assert f"their hours are likely too few. {whole}." in far, far
    assert f"{whole};" in seq, seq
    runs.append(dict(runs[0], size="40M", hours=24.0, seq_len=1024, measured_seq_len={"nvfp4": 1024}))
    assert "These runs are 8 of the plan's 32 GPU-hours." in far_from_measured(runs, "gpu", "bench.json", None)[0]
    assert "These runs are 8 of the plan's 32 GPU-hours;" in other_seq_len(runs, "gpu", "bench.json")[0]


def _bench_flops_per_token(family: str, size: str) -> int:
    """The FLOPs per token `scaling bench train` counts in its rows' mfu: vocabulary 32768, sequences of 1024."""
    from models import model_size

    return model_size(family, size).flops_per_token_exact(32768, 1024)


def _bf16_row(family: str, size: str, tokens_per_s: float, **extra) -> dict:
    """A bf16 `train` row as `scaling bench train` writes it on a GPU of 989 TFLOP/s (an H100 or H200)."""
    mfu = round(_bench_flops_per_token(family, size) * tokens_per_s / 989e12, 4)
    return {"recipe": "bf16", "family": family, "size": size, "tokens_per_s": tokens_per_s, "mfu": mfu,
            "ratio_vs_bf16": 1.0, "compile_mode": "reduce-overhead", **extra}


def test_plan_names_runs_at_a_seq_len_their_benchmark_rows_were_not_measured_at(tmp_path, capsys):
    """sweeps/micro.toml trains at seq_len 256 and the `bench train` rows it is priced from were measured at 1024 (the
    demo at 64, its `cpu` rows at 256), and the plan said nothing. A line names each such size, the rows' seq_len and
    which way its hours are likely off (a quantized recipe, whose quantizer work a token does not shrink with seq_len
    as attention's does, likely slower against BF16 at a shorter one: too few); --json's `other_seq_len` the same.
    A row without its seq_len is one of `bench train`'s older rows, at BENCH_TRAIN_SEQ_LEN; a cpu row, its size's."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0"))
    rows = [_bf16_row("nanochat", "0.5M", 1_000_000, seq_len=1024, vocab_size=4096),
            {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.8, "compile_mode": "reduce-overhead"}]
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(_bench_file(tmp_path, rows)), "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (line,) = plan["other_seq_len"]
    assert plan["run_list"][1]["measured_seq_len"] == {"bf16": 1024, "nvfp4": 1024}  # (nvfp4's: BENCH_TRAIN_SEQ_LEN)
    assert "nanochat 0.5M at seq_len 64 (their rows: bf16, nvfp4 at 1024)" in line, line
    assert "a quantized recipe likely trains slower than priced at a shorter seq_len than its row's (its hours too few)" in line
    assert f"the whole plan's {plan['gpu_hours']:.3g} GPU-hours" in line and "no correction is made" in line
    assert main(["sweep", "plan", str(spec), "--bench", str(_bench_file(tmp_path, rows)), "--device", "gpu"]) == 0
    assert line in capsys.readouterr().out.splitlines()
    # rows at the run's seq_len: no line
    at_64 = [dict(r, seq_len=64) for r in rows]
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(_bench_file(tmp_path, at_64)), "--device", "gpu"]) == 0
    assert json.loads(capsys.readouterr().out)["other_seq_len"] == []
    # on CPU: a cpu row without its seq_len was measured at its size's default (`bench cpu`'s 2M-token run), 256 at 1M
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu": [
        {"recipe": "bf16", "family": "nanochat", "size": "1M", "tokens_per_s": 8000, "cpu_ratio_vs_bf16": 1.0}]}))
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu), "--device", "cpu"]) == 0
    (line,) = json.loads(capsys.readouterr().out)["other_seq_len"]
    assert "nanochat 0.5M at seq_len 64 (their rows: bf16 at 256)" in line and "6·N" in line, line  # (no nvfp4 row)


def test_plan_names_runs_at_a_batch_much_smaller_than_their_rows(tmp_path, capsys):
    """The demo's runs train 8 x 64-token batches and are priced from `bench cpu` rows of 16 x 256 (micro.toml's 1M
    runs 8,192-token steps, from `bench train` rows of 4 x 32,768), and the plan said nothing: a step's work that does
    not grow with its tokens (the optimizer's, kernel launches, a GPU left idle) is spread over fewer of them, so such
    a run likely trains slower than priced. A line names each size whose micro-batch or step is more than 2x smaller
    than a row's it is priced from, as the seq_len line does (which way: too few hours; how many of the plan's);
    --json's `smaller_batch` the same."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0"))
    at = {"seq_len": 64, "batch_tokens": 4096, "accumulate": 1}  # (at the runs' seq_len: no seq_len line)
    rows = [_bf16_row("nanochat", "0.5M", 1_000_000, **at),
            {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.8, "compile_mode": "reduce-overhead", **at}]

    def plan_of(rows: list[dict], *args: str) -> dict:
        assert main(["sweep", "plan", str(spec), "--json", "--bench", str(_bench_file(tmp_path, rows)), "--device", "gpu",
                     *args]) == 0
        return json.loads(capsys.readouterr().out)

    plan = plan_of(rows)
    (line,) = plan["smaller_batch"]
    run = plan["run_list"][1]
    assert (run["micro_tokens"], run["step_tokens"]) == (512, 512)
    assert run["measured_batch"] == {"bf16": [4096, 4096], "nvfp4": [4096, 4096]}
    assert ("runs at a batch much smaller than that of the rows in bench.json they are priced from: nanochat 0.5M at "
            "512-token micro-batches in 512-token steps (their rows: bf16, nvfp4 at 4,096 in 4,096)") in line, line
    assert (f"likely train slower than priced, BF16 and quantized recipes alike: their hours are likely too few. These "
            f"runs are the whole plan's {plan['gpu_hours']:.3g} GPU-hours; no correction is made") in line, line
    assert plan["other_seq_len"] == []
    assert main(["sweep", "plan", str(spec), "--bench", str(_bench_file(tmp_path, rows)), "--device", "gpu"]) == 0
    assert line in capsys.readouterr().out.splitlines()
    # a row's step of 8 micro-batches of the run's size: its step is much larger, its micro-batch not
    accumulated = [dict(r, batch_tokens=512, accumulate=8) for r in rows]
    assert "(their rows: bf16, nvfp4 at 512 in 4,096)" in plan_of(accumulated)["smaller_batch"][0]
    # rows at twice the run's batch (the batch rule's next power of two), or recording none: no line
    assert plan_of([dict(r, batch_tokens=1024) for r in rows])["smaller_batch"] == []
    assert plan_of([{k: v for k, v in r.items() if k != "batch_tokens"} for r in rows])["smaller_batch"] == []
    # on CPU: a `cpu` row's batch_tokens is its whole step
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu": [{"recipe": "bf16", "family": "nanochat", "size": "0.5M", "tokens_per_s": 8000,
                                        "cpu_ratio_vs_bf16": 1.0, "batch_tokens": 4096, "seq_len": 64}]}))
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu), "--device", "cpu"]) == 0
    (line,) = json.loads(capsys.readouterr().out)["smaller_batch"]
    assert "nanochat 0.5M at 512-token micro-batches in 512-token steps (their rows: bf16 at 4,096 in 4,096)" in line, line


def test_plan_prices_bf16_at_the_speed_its_benchmark_measured(tmp_path, capsys):
    """The plan priced BF16 at an assumed 30% MFU while the benchmark file it read the FP4 speeds from held
    measured bf16 rows (nanochat 160M at 52% MFU on the H200): a budget off by ~1.7x. Each run's BF16 now trains
    at the FLOP/s of the bf16 row nearest in size (the rule a recipe's speed is picked by: own family first, the
    CUDA-graph rows): its tokens/s times the FLOPs per token its mfu counts, so the hours differ from the assumed
    MFU's by the measured MFU over the assumed one. The plan names the row (`bf16_from`, `measured_at`)."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]').replace("seed = [0, 1]", "seed = 0"))
    measured = _bf16_row("nanochat", "1M", 2_000_000)
    bench = _bench_file(tmp_path, [
        measured,
        _bf16_row("nanochat", "160M", 300_000),  # farther in size
        _bf16_row("llama2", "0.5M", 9_000_000),  # nearer, but another family
        _bf16_row("nanochat", "0.5M", 5_000_000, compile_mode="default"),  # not the trainer's compile mode
        {"recipe": "nvfp4", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 0.8, "compile_mode": "reduce-overhead"},
    ])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    bf16, nvfp4 = plan["run_list"]
    rate = 2_000_000 * _bench_flops_per_token("nanochat", "1M")  # the row's BF16 FLOP/s, as its mfu counts them
    assert bf16["train_hours"] == pytest.approx(bf16["flops_exact"] / rate / 3600)
    assert nvfp4["gpu_hours"] == pytest.approx(bf16["gpu_hours"] / 0.8)
    assert (bf16["bf16_mfu"], bf16["bf16_from"]) == (measured["mfu"], "nanochat 1M, bench.json")
    assert bf16["measured_at"] == {"bf16": "nanochat 1M"}
    assert nvfp4["measured_at"] == {"bf16": "nanochat 1M", "nvfp4": "nanochat 1M"}
    assert plan["mfu"] is None and "measured in bench.json" in plan["bf16_speed"], plan["bf16_speed"]
    # the assumed MFU's price differs by the measured MFU over the assumed one
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu", "--mfu", "0.3"]) == 0
    assumed = json.loads(capsys.readouterr().out)
    assert assumed["gpu_hours"] / plan["gpu_hours"] == pytest.approx(measured["mfu"] / 0.3, rel=1e-3)
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert f"{measured['mfu']:.1%}" in out and "nanochat 1M, bench.json" in out, out
    assert "GPU-hours of the benchmark's GPU (test)" in out and "30% MFU" not in out, out


def test_plan_prices_bf16_at_the_flops_per_token_of_the_rows_own_shape(tmp_path, capsys):
    """A bf16 row's tokens/s became FLOP/s at `scaling bench train`'s defaults (vocabulary 32768, seq_len 1024) whatever
    the row was measured at: at 0.5M a row at seq_len 256 and vocabulary 4096 counts 3.6x fewer FLOPs a token, so the
    plan's BF16 FLOP/s from it was 3.6x too high. A row that records its seq_len and vocab_size is priced at them; an
    older row without them at the defaults, which every such row was measured at."""
    from models import model_size
    from sweeps.cost import bf16_rate

    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    flops = model_size("nanochat", "0.5M").flops_per_token_exact(4096, 256)
    own = _bf16_row("nanochat", "0.5M", 2_000_000, seq_len=256, vocab_size=4096, mfu=round(flops * 2_000_000 / 989e12, 4))
    assert bf16_rate("nanochat", "0.5M", [own], "bench.json").flops_per_s == 2_000_000 * flops
    older = _bf16_row("nanochat", "0.5M", 2_000_000)
    assert bf16_rate("nanochat", "0.5M", [older], "bench.json").flops_per_s == 2_000_000 * _bench_flops_per_token("nanochat", "0.5M")
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(_bench_file(tmp_path, [own])), "--device", "gpu"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["run_list"]
    assert run["train_hours"] == pytest.approx(run["flops_exact"] / (2_000_000 * flops) / 3600)


@pytest.mark.parametrize("field, value", [("seq_len", '"1024"'), ("vocab_size", "0"), ("seq_len", "1024.5"),
                                          ("batch_tokens", '"32k"'), ("accumulate", "0")])
def test_plan_refuses_a_train_rows_shape_of_another_kind(tmp_path, capsys, field, value):
    """The plan reads a train row's seq_len and vocab_size to count its FLOPs, and its batch_tokens and accumulate to
    compare a run's batch with (`smaller_batch`): a hand-edited one that is not a positive integer is refused by name
    (it stopped on a TypeError's traceback, or priced at a vocabulary of 0)."""
    path = tmp_path / "edited.json"
    path.write_text('{"device": "test GPU", "train": [{"recipe": "bf16", "family": "nanochat", "size": "1M", '
                    f'"ratio_vs_bf16": 1.0, "tokens_per_s": 1000, "{field}": {value}}}]}}')
    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    assert main(["sweep", "plan", str(spec), "--bench", str(path), "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert f"train row 1: its {field} must be a positive integer, and it has {value}" in err and "Traceback" not in err


def test_plan_prices_each_runs_start_up_as_its_benchmark_row_measured_it(tmp_path, capsys, monkeypatch):
    """The plan priced training steps and evaluations only, and said start-up came on top: `scaling demo` planned ~67 s
    of CPU and took ~2x that. `bench train` and `bench cpu` rows record a run's start-up now (`startup_s`: building the
    model to the end of its warm-up steps, less as many steady steps; `import_s`: a fresh process's imports), and each
    run's hours add its row's start-up and its share of the imports of the processes that train the plan (a SLURM job
    a run; a local launch's workers, once each); on a CPU its CPU seconds over the benchmark's threads."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]'))  # 4 runs
    rows = [_bf16_row("nanochat", "0.5M", 1_000_000, startup_s=30.0, import_s=12.0),
            {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.8,
             "compile_mode": "reduce-overhead", "startup_s": 90.0, "import_s": 12.0}]
    bench = str(_bench_file(tmp_path, rows))
    assert main(["sweep", "plan", str(spec), "--json", "--bench", bench, "--device", "gpu", "--executor", "slurm"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["processes"], plan["startup_unpriced"]) == (4, 0)  # (a SLURM job a run, each importing the trainer)
    for run in plan["run_list"]:
        assert run["startup_s"] == {"bf16": 30.0 + 12.0, "nvfp4": 90.0 + 12.0}[run["recipe"]]
        assert run["startup_hours"] == run["startup_gpu_hours"] == pytest.approx(run["startup_s"] / 3600)
        assert run["gpu_hours"] == pytest.approx(run["train_hours"] + run["eval_hours"] + run["startup_hours"])
    assert plan["startup_hours"] == pytest.approx(2 * (42 + 102) / 3600)
    assert plan["gpu_hours"] == pytest.approx(plan["train_hours"] + plan["eval_hours"] + plan["startup_hours"])
    assert main(["sweep", "plan", str(spec), "--bench", bench, "--device", "gpu", "--executor", "slurm"]) == 0
    out = capsys.readouterr().out
    assert (f"and start-up {plan['startup_hours']:.3g} (each run's as the row in bench.json it is priced from measured "
            "it: building its model to the end of its warm-up steps, compilation included, and the trainer's import once "
            "a process, a SLURM job a run); not counted, on top: checkpoints") in out, out
    assert "startup_gpu_hours" in out  # (a column of the table)
    # --mfu assumes BF16's speed, not its start-up: the bf16 row's still
    assert main(["sweep", "plan", str(spec), "--json", "--bench", bench, "--device", "gpu", "--executor", "slurm",
                 "--mfu", "0.3"]) == 0
    assert json.loads(capsys.readouterr().out)["run_list"][0]["startup_s"] == 42.0
    # a local launch on one GPU, 2 runs at once: 2 workers import once each, a quarter of those 2 imports a run
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    local = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]')
                       .replace("cpu_jobs = 2", "cpu_jobs = 2\njobs_per_gpu = 2"), name="local.toml")
    assert main(["sweep", "plan", str(local), "--json", "--bench", bench, "--device", "gpu", "--executor", "local"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["processes"] == 2
    assert {r["recipe"]: r["startup_s"] for r in plan["run_list"]} == {"bf16": 30.0 + 12.0 * 2 / 4, "nvfp4": 90.0 + 6.0}
    # on CPU: a cpu row's CPU seconds over the benchmark's threads (its wall seconds at both threads would count a
    # one-thread start-up twice), cpu_jobs workers
    cpu = tmp_path / "cpu.json"
    startup = {"startup_s": 2.5, "import_s": 7.0}  # (wall: not what a CPU plan prices)
    cpu.write_text(json.dumps({"cpu_machine": {"cpu": "test CPU", "threads": 2}, "cpu": [
        {"recipe": "bf16", "family": "nanochat", "size": "0.5M", "tokens_per_s": 8000, "cpu_ratio_vs_bf16": 1.0,
         **startup, "startup_cpu_s": 3.0, "import_cpu_s": 8.0},
        {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "tokens_per_s": 6400, "cpu_ratio_vs_bf16": 1.25,
         **startup, "startup_cpu_s": 5.0, "import_cpu_s": 8.0}]}))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(cpu), "--device", "cpu", "--executor", "local"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["processes"] == 2  # (cpu_jobs)
    assert {r["recipe"]: r["startup_s"] for r in plan["run_list"]} == {"bf16": 3.0 / 2 + 8.0 / 2 * 2 / 4,
                                                                       "nvfp4": 5.0 / 2 + 8.0 / 2 * 2 / 4}
    assert all(r["cpu_hours"] == pytest.approx(r["train_hours"] + r["eval_hours"] + r["startup_s"] / 3600)
               for r in plan["run_list"])
    assert main(["sweep", "plan", str(spec), "--bench", str(cpu), "--device", "cpu", "--executor", "local"]) == 0
    assert ("building its model to the end of its warm-up steps, and the trainer's import once a process, 2 workers of "
            "a local launch); not counted, on top: checkpoints") in capsys.readouterr().out


def test_plan_says_once_that_start_up_is_not_priced_for_rows_that_do_not_record_it(tmp_path, capsys):
    """Rows measured before rows recorded a start-up (every row of the committed files then) price none, and the plan
    says so once, naming the file and the command that measures it; a plan whose rows record it for some runs only
    prices theirs and says how many are left out. Older files stay readable."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]'))
    old = [_bf16_row("nanochat", "0.5M", 1_000_000),
           {"recipe": "nvfp4", "family": "nanochat", "size": "0.5M", "ratio_vs_bf16": 0.8, "compile_mode": "reduce-overhead"}]
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(_bench_file(tmp_path, old)), "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["startup_hours"] == 0 and plan["startup_unpriced"] == 4
    assert all(r["startup_s"] is None and r["startup_hours"] is None for r in plan["run_list"])
    assert plan["gpu_hours"] == pytest.approx(plan["train_hours"] + plan["eval_hours"])
    assert main(["sweep", "plan", str(spec), "--bench", str(_bench_file(tmp_path, old)), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    said = ("not counted, on top: each run's start-up (building its model to the end of its warm-up steps, compilation "
            "included, and the trainer's import once a process: their rows in bench.json record none, measured before "
            "rows did (2026-12-07 ~23:30); `scaling bench train --out FILE` measures it) and checkpoints")
    assert said in out and out.count("start-up") == 1, out
    # bf16's row records it, nvfp4's does not: the two bf16 runs' start-up priced, the other two said
    mixed = [dict(old[0], startup_s=30.0, import_s=12.0), old[1]]
    assert main(["sweep", "plan", str(spec), "--bench", str(_bench_file(tmp_path, mixed)), "--device", "gpu",
                 "--executor", "slurm"]) == 0
    out = capsys.readouterr().out
    assert (f"and start-up {2 * 42 / 3600:.3g} for 2 of the 4 runs (each run's as the row in bench.json") in out, out
    assert ("not counted, on top: the start-up of the other 2 runs (their rows in bench.json record none, measured "
            "before rows did (2026-12-07 ~23:30); `scaling bench train --out FILE` measures it) and checkpoints") in out
    # no benchmark file
    assert main(["sweep", "plan", str(spec), "--bench", "none", "--device", "gpu"]) == 0
    assert "each run's start-up (building its model to the end of its warm-up steps, compilation included, and the " \
           "trainer's import once a process: no benchmark file measures it: --bench none) and checkpoints" in \
           capsys.readouterr().out
    # the committed files whose rows predate it (h200.json, the GPU's default; cpu.json, the CPU's on a machine
    # cpu-epyc.json was not measured on: `sweeps.cost.default_cpu_bench`) are read as before
    from sweeps.cost import DEFAULT_CPU_BENCH

    for device, bench in (("gpu", "default"), ("cpu", str(DEFAULT_CPU_BENCH))):
        assert main(["sweep", "plan", str(spec), "--json", "--device", device, "--bench", bench]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan["startup_unpriced"] == 4 and plan["hours"] == pytest.approx(plan["train_hours"] + plan["eval_hours"])


@pytest.mark.parametrize("section, field", [("train", "startup_s"), ("train", "import_s"), ("cpu", "startup_cpu_s"),
                                            ("cpu", "import_cpu_s")])
def test_plan_refuses_a_start_up_of_another_kind(tmp_path, capsys, section, field):
    """A hand-edited start-up that is not a number is refused by name, not met by a TypeError's traceback."""
    path = tmp_path / "edited.json"
    ratio = "ratio_vs_bf16" if section == "train" else "cpu_ratio_vs_bf16"
    path.write_text(json.dumps({section: [{"recipe": "bf16", "family": "nanochat", "size": "1M", ratio: 1.0,
                                           "tokens_per_s": 1000, field: "12 s"}]}))
    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    assert main(["sweep", "plan", str(spec), "--bench", str(path), "--device", "gpu" if section == "train" else "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{section} row 1: its {field} must be a number, and it has \"12 s\"" in err and "Traceback" not in err


def test_plan_mfu_overrides_the_measured_bf16_speed_and_a_peak_carries_the_measured_mfu(tmp_path, capsys):
    """--mfu prices BF16 at that MFU of --peak-tflops (989 by default) whatever the file measured, and the plan
    says it is assumed; --peak-tflops alone prices it at the measured MFU of that peak (another GPU)."""
    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    measured = _bf16_row("nanochat", "1M", 2_000_000)
    bench = _bench_file(tmp_path, [measured])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu",
                 "--mfu", "0.5", "--peak-tflops", "100"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (run,) = plan["run_list"]
    assert run["train_hours"] == pytest.approx(run["flops_exact"] / (0.5 * 100e12) / 3600)
    assert (run["bf16_mfu"], run["bf16_from"], run["measured_at"]) == (0.5, "assumed (--mfu)", {})
    assert (plan["mfu"], plan["peak_tflops"]) == (0.5, 100) and "assumed" in plan["bf16_speed"]
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu", "--mfu", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours at an assumed 50% MFU (--mfu) of 989 TFLOP/s for BF16" in out, out
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu", "--peak-tflops", "100"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["run_list"]
    assert run["train_hours"] == pytest.approx(run["flops_exact"] / (measured["mfu"] * 100e12) / 3600)
    assert run["bf16_from"] == "nanochat 1M, bench.json"
    # a row `scaling bench` wrote on a GPU whose peak it did not know has no mfu to carry: its tokens/s prices it
    unknown = _bench_file(tmp_path, [dict(measured, mfu=None)])
    assert main(["sweep", "plan", str(spec), "--bench", str(unknown), "--device", "gpu", "--peak-tflops", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --peak-tflops 100: bench.json's bf16 row at nanochat 1M has no mfu") and "Traceback" not in err
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(unknown), "--device", "gpu"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["run_list"]
    assert run["bf16_mfu"] is None
    assert run["train_hours"] == pytest.approx(run["flops_exact"] / (2_000_000 * _bench_flops_per_token("nanochat", "1M")) / 3600)


def test_plan_without_bf16_rows_prices_bf16_at_the_assumed_mfu_and_says_so(tmp_path, capsys):
    """A benchmark file with no bf16 row (tokens_per_s) to measure BF16 by leaves it at the documented assumed
    MFU (sweeps.cost.DEFAULT_MFU of 989 TFLOP/s), and the plan says why, in its text and its JSON."""
    from sweeps.cost import DEFAULT_MFU

    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0"))
    bench = _bench_file(tmp_path, [{"recipe": "nvfp4", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 0.8},
                                   {"recipe": "bf16", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 1.0}])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (run,) = plan["run_list"]
    assert run["train_hours"] == pytest.approx(run["flops_exact"] / (DEFAULT_MFU * 989e12) / 3600)
    assert (run["bf16_mfu"], run["bf16_from"]) == (DEFAULT_MFU, "assumed")
    assert plan["mfu"] == DEFAULT_MFU and "bench.json has no bf16 `train` row" in plan["bf16_speed"], plan["bf16_speed"]
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "bench.json has no bf16 `train` row" in out and "GPU-hours at an assumed 30% MFU of 989 TFLOP/s" in out, out


def test_plan_prices_the_paper_sweep_at_the_committed_h200_bf16_rows():
    """sweeps/paper.toml's llama2 runs take the H200's llama2 bf16 rows (the CUDA-graph ones, the later on a tie):
    40M's up to 80M, 160M's from 160M; about 1.5x fewer hours than at the assumed 30% MFU."""
    import contextlib
    import io

    from models import model_size

    def plan(*extra: str) -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["sweep", "plan", "sweeps/paper.toml", "--data", "builtin", "--device", "gpu", "--json", *extra]) == 0
        return json.loads(out.getvalue())

    bench = json.loads((Path(__file__).resolve().parents[1] / "reports/bench/h200.json").read_text())
    rows = {(r["family"], r["size"]): r for r in bench["train"]  # (the later row of a size wins, as in the plan)
            if r["recipe"] == "bf16" and r.get("compile_mode") == "reduce-overhead"}
    measured = plan()
    for run in measured["run_list"]:
        at = ("llama2", "40M") if model_size("llama2", run["size"]).n_params < 100e6 else ("llama2", "160M")
        row = rows[at]
        assert (run["bf16_mfu"], run["bf16_from"]) == (row["mfu"], f"{' '.join(at)}, h200.json"), run
        rate = row["tokens_per_s"] * _bench_flops_per_token(*at) * run["vs_bf16"]
        assert run["train_hours"] == pytest.approx(run["flops_exact"] / rate / 3600)
    assert 1.3 < plan("--mfu", "0.3")["gpu_hours"] / measured["gpu_hours"] < 1.8
    assert "llama2 10M (bf16 at llama2 40M's speed" in measured["far_from_measured"][0]


def test_bench_train_mfu_counts_the_flops_the_plan_counts():
    """`scaling bench train`'s mfu is flops_per_token_exact at its vocabulary and seq_len (sweeps.cost's
    BENCH_TRAIN_*) times tokens/s over 989 TFLOP/s on the H100 and H200: the plan's BF16 FLOP/s from a row's
    tokens/s is its mfu of the peak it was measured against (the committed CUDA-graph rows, to their 4 digits)."""
    from scaling.bench import SEQ_LEN
    from scaling.data import DEFAULT_VOCAB_SIZE
    from scaling.train import PEAK_BF16_FLOPS
    from sweeps.cost import BENCH_TRAIN_SEQ_LEN, BENCH_TRAIN_VOCAB_SIZE

    assert (BENCH_TRAIN_SEQ_LEN, BENCH_TRAIN_VOCAB_SIZE) == (SEQ_LEN, DEFAULT_VOCAB_SIZE)
    assert PEAK_BF16_FLOPS["H100"] == PEAK_BF16_FLOPS["H200"] == 989e12
    for name in ("h200.json", "h100.json"):
        bench = json.loads((Path(__file__).resolve().parents[1] / "reports/bench" / name).read_text())
        graphed = [r for r in bench["train"] if r.get("compile_mode") == "reduce-overhead"]
        assert graphed
        for r in graphed:
            assert r["mfu"] == pytest.approx(r["tokens_per_s"] * _bench_flops_per_token(r["family"], r["size"]) / 989e12,
                                             abs=6e-5), (name, r)


def test_plan_prices_an_unmeasured_recipe_as_the_slowest_measured_one_whose_work_it_does(tmp_path, capsys):
    """A recipe file of one's own has no benchmark row. It was counted at BF16's speed, understating
    its cost; now it is priced as the slowest measured recipe whose quantizer work (quantized operands,
    RHT, SR, two-level scales, 4/6, MS-EDEN) it does all of, and the plan says which and why; a recipe
    doing all the work of none is priced as the slowest measured quantized recipe."""
    mine = tmp_path / "mine.toml"
    mine.write_text('name = "mine"\nbase = "nvfp4"\n[fprop.x]\nfour_over_six = true\n')  # nvfp4's work and more
    light = tmp_path / "light.toml"
    light.write_text('name = "light"\n[fprop.x]\nelem = "e2m1"\n[fprop.w]\nelem = "e2m1"\n')  # two operands only
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', f'recipe = ["{mine}", "{light}"]').replace("seed = [0, 1]", "seed = 0"))
    at = {"family": "nanochat", "size": "40M"}
    bench = _bench_file(tmp_path, [{"recipe": "mxfp4", "ratio_vs_bf16": 0.9, **at},
                                   {"recipe": "nvfp4", "ratio_vs_bf16": 0.75, **at},
                                   {"recipe": "ufp4", "ratio_vs_bf16": 0.7, **at},  # more RHT than mine
                                   {"recipe": "quartet2", "ratio_vs_bf16": 0.4, **at}])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(bench), "--device", "gpu"]) == 0
    mine_run, light_run = json.loads(capsys.readouterr().out)["run_list"]
    assert mine_run["vs_bf16"] == 0.75 and mine_run["speed_from"] == "as nvfp4: nanochat 40M, bench.json"
    assert "slowest measured recipe whose quantizer work it does all of (mxfp4, nvfp4)" in mine_run["speed_note"]
    assert light_run["vs_bf16"] == 0.4 and light_run["speed_from"] == "as quartet2: nanochat 40M, bench.json"
    assert main(["sweep", "plan", str(spec), "--bench", str(bench), "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "mine: not measured in bench.json; priced as nvfp4" in out
    assert "light: not measured in bench.json; priced as quartet2, the slowest measured quantized recipe" in out
    from sweeps.cost import priced_speed

    plain = tmp_path / "plain.toml"
    plain.write_text('name = "plain"\n')  # quantizes nothing: BF16's speed, not the slowest FP4 recipe's
    assert priced_speed(str(plain), "nanochat", "0.5M", json.loads(bench.read_text())["train"], "bench.json").vs_bf16 == 1.0
    only_bf16 = _bench_file(tmp_path, [{"recipe": "bf16", "ratio_vs_bf16": 1.0, **at}])
    assert main(["sweep", "plan", str(spec), "--json", "--bench", str(only_bf16), "--device", "gpu"]) == 0
    assert json.loads(capsys.readouterr().out)["run_list"][0]["vs_bf16"] is None  # nothing to price it by: said


def test_plan_refuses_a_benchmark_file_it_cannot_read(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", "plan", str(spec), "--bench", str(tmp_path / "missing.json"), "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "missing.json does not exist" in err and "--bench none" in err
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["sweep", "plan", str(spec), "--bench", str(tmp_path / "bad.json"), "--device", "gpu"]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "list.json").write_text("[]")
    assert main(["sweep", "plan", str(spec), "--bench", str(tmp_path / "list.json"), "--device", "gpu"]) == 2
    assert "is not a benchmark JSON" in capsys.readouterr().err
    (tmp_path / "rows.json").write_text('{"train": 5}')  # valid JSON, a section not a list of rows
    assert main(["sweep", "plan", str(spec), "--bench", str(tmp_path / "rows.json"), "--device", "gpu"]) == 2
    assert "its train must be a list of rows" in capsys.readouterr().err


def test_plan_on_a_gpu_refuses_a_benchmark_file_without_training_rows(tmp_path, capsys):
    """A GPU plan given a file `scaling bench train` did not write (reports/bench/cpu.json, fits.json, a kernels-only
    file) priced every recipe at BF16's speed and still said "each recipe at its speed measured in cpu.json", exit 0:
    a budget off by the FP4 recipes' slowdown. One line naming what the file holds and the file that fits, exit 2."""
    spec = write_spec(tmp_path, TINY.replace('recipe = "bf16"', 'recipe = ["bf16", "nvfp4"]'))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"cpu": [{"recipe": "bf16", "family": "nanochat", "size": "1M", "tokens_per_s": 8000,
                                        "cpu_ratio_vs_bf16": 1.0}]}))
    assert main(["sweep", "plan", str(spec), "--device", "gpu", "--bench", str(cpu)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cpu.json has no `train` rows" in err and "--device cpu" in err, err
    fits = tmp_path / "fits.json"
    fits.write_text(json.dumps({"calibration": [{"case": "x"}]}))
    assert main(["sweep", "plan", str(spec), "--device", "gpu", "--bench", str(fits)]) == 2
    err = capsys.readouterr().err
    assert "fits.json has no `train` rows" in err and "scaling bench train --out FILE" in err and "--bench none" in err
    # a file whose train rows measured bf16 alone still prices (its FP4 recipes marked unmeasured: `?`)
    only_bf16 = _bench_file(tmp_path, [{"recipe": "bf16", "family": "nanochat", "size": "40M", "ratio_vs_bf16": 1.0}])
    assert main(["sweep", "plan", str(spec), "--device", "gpu", "--bench", str(only_bf16)]) == 0
    capsys.readouterr()


def test_shipped_specs_validate(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1] / "sweeps"
    assert main(["sweep", "plan", str(root / "demo.toml"), "--json"]) == 0
    demo = json.loads(capsys.readouterr().out)
    assert demo["runs"] >= 8 and {r["recipe"] for r in demo["run_list"]} >= {"bf16", "nvfp4", "mxfp4"}
    (tmp_path / "doc.txt").write_text("A corpus of one document.")
    for name in ("micro.toml", "paper.toml", "quartet_v1.toml"):
        assert main(["sweep", "plan", str(root / name), "--data", str(tmp_path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["runs"] >= 20
    assert main(["sweep", "plan", str(root / "micro.toml")]) == 2  # micro needs --data
    assert "data: this spec names no corpus" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The run lock and relaunch logic (no training)

HOLD_LOCK = "import sys, time; from sweeps.store import run_lock\nwith run_lock(sys.argv[1]) as ok:\n    print(ok, flush=True); time.sleep(60)"


def test_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    from sweeps.store import lock_holder, run_lock

    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        holder = lock_holder(run_dir)
        assert holder and holder["pid"] == p.pid
        with run_lock(run_dir) as got:
            assert got is False  # a second trainer of the same run backs off
    finally:
        p.send_signal(signal.SIGKILL)  # a crashed job: no cleanup runs
        p.wait()
    assert lock_holder(run_dir) is None  # the kernel dropped the lock: not stale
    with run_lock(run_dir) as got:
        assert got is True


def test_a_status_probe_as_a_job_takes_its_run_does_not_make_the_job_leave_it(tmp_path):
    """lock_holder's probe (status, a second launch) holds the run's lock shared for an instant: a job
    taking the lock then waits it out instead of reading it as another trainer and leaving its run."""
    import fcntl
    import threading

    from sweeps.store import run_lock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "lock").touch()
    fd = os.open(run_dir / "lock", os.O_RDONLY)  # (its own open file: flock conflicts with it in-process too)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # the probe's hold
        threading.Timer(0.02, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
        with run_lock(run_dir) as got:
            assert got is True
    finally:
        os.close(fd)


def test_relaunch_skips_done_and_running_resubmits_failed_and_missing(tmp_path):
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2, 3]",))
    sweep_dir = tmp_path / "sweep"
    runs = spec.runs()
    done, failed, running, missing = (sweep_dir / c.run_id for c in runs)
    for d in (done, failed, running):
        d.mkdir(parents=True)
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0})
    write_json(failed / "job.json", {"executor": "local", "job_id": None})  # started, died without a result
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(running)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        todo, skipped = pending(spec, sweep_dir)
        assert [c.run_id for c in todo] == [failed.name, missing.name]
        assert skipped == {"done": [done.name], "running": [running.name]}
        st = status(sweep_dir)
        assert {k: v for k, v in st.counts.items() if v} == {"done": 1, "failed": 1, "running": 1, "missing": 1}
    finally:
        p.kill()
        p.wait()



# Another process (a worker of a launcher killed with SIGKILL) holding a run's lock until the other run's
# result.json appears, then finishing its own: a result, or (argv[4] "die") none, as a killed worker.
# Holds the first run's lock until the relaunch waits for it: `waiting` (argv[4]) appears when the relaunch first
# sleeps between its polls (`_relaunch_polls`), after its "waiting:" line (a fixed 3 s after the other run's result
# lost that race on a loaded machine); 60 s at most, so a launch that never waits fails the test, not hangs it.
ORPHAN = """import json, sys, time
from pathlib import Path
from sweeps.store import run_lock
run, other, end, waiting = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
with run_lock(run) as ok:
    print(ok, flush=True)
    deadline = time.monotonic() + 60
    while not (other / "result.json").exists() or not waiting.exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if end == "done":
        (run / "result.json").write_text(json.dumps({"run_id": run.name, "recipe": "bf16", "status": "completed",
                                                     "val_loss": 5.0}))
"""


def _held(tmp_path: Path, script: str, *args: str, text: str = TINY) -> tuple[Path, Path, list[Path], subprocess.Popen]:
    """The spec of `text`, its sweep folder, its run folders and the process `script` runs holding the first
    run's lock (argv: the run folders, then `args`), the first with the job.json a killed launcher left."""
    from sweeps.launch import pending
    from sweeps.store import write_json

    spec, sweep_dir = write_spec(tmp_path, text), tmp_path / "sweep"
    pending(load(tmp_path, text), sweep_dir)
    runs = [sweep_dir / c.run_id for c in load(tmp_path, text).runs()]
    write_json(runs[0] / "job.json", {"executor": "local", "job_id": None})
    p = subprocess.Popen([sys.executable, "-c", script, *map(str, runs), *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "True"
    return spec, sweep_dir, runs, p


def _orphan(tmp_path: Path, end: str, monkeypatch) -> tuple[Path, Path, Path, subprocess.Popen]:
    """The tiny spec, its sweep folder, its held run (with the job.json a killed launcher left) and
    the ORPHAN process holding it, which ends once the relaunch polls for it (`_relaunch_polls`)."""
    waiting = tmp_path / "relaunch-waits"
    _relaunch_polls(waiting, monkeypatch)
    spec, sweep_dir, (held, _), p = _held(tmp_path, ORPHAN, end, str(waiting))
    return spec, sweep_dir, held, p


def _relaunch_polls(marker: Path, monkeypatch) -> None:
    """Make `marker` when the launch first sleeps between polls of the runs others train (its only sleep)."""
    import time as real_time

    import sweeps.launch

    class Clock:
        def __getattr__(self, name):
            return getattr(real_time, name)

        def sleep(self, seconds: float) -> None:
            marker.touch()
            real_time.sleep(seconds)

    monkeypatch.setattr(sweeps.launch, "time", Clock())


def _stop(*processes: subprocess.Popen | None) -> None:
    for p in processes:
        if p is not None:
            p.kill()
            p.wait()


def test_a_relaunch_names_the_process_that_trains_a_run_and_waits_for_it(tmp_path, capsys, monkeypatch):
    """The launcher was killed outright and its worker still trains one run (under the run's lock): a
    relaunch names that run's process (pid and host, from the lock), trains the other run, and returns
    only once the orphan's run has finished, saying how it ended: the sweep is complete when it exits 0."""
    import socket

    from sweeps.store import status

    spec, sweep_dir, held, p = _orphan(tmp_path, "done", monkeypatch)
    try:
        assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 0
        assert p.wait(timeout=30) == 0  # the launch returned after the orphan's run ended, not before
    finally:
        _stop(p)
    out = capsys.readouterr().out
    said = f"1 run is being trained by another process (pid {p.pid} on {socket.gethostname()})"
    assert f"skipping 1 running; local: 1 to run\n{said}: leaving it to it" in out, out
    assert f"waiting: {said}" in out and f"{held.name}, trained by another process: done val_loss 5.0000" in out, out
    assert out.index("[1/1] done") < out.index("waiting:") < out.index("trained by another process: done"), out
    assert status(sweep_dir).counts["done"] == 2


def test_a_run_another_process_leaves_without_a_result_fails_the_relaunch(tmp_path, capsys, monkeypatch):
    """The orphan's run ends without a result (its worker killed too): the waiting relaunch counts it
    failed in --json's report and exits 1, as for a run of its own (a relaunch trains it)."""
    spec, sweep_dir, held, p = _orphan(tmp_path, "die", monkeypatch)
    try:
        code = main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir), "--json"])
    finally:
        _stop(p)
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["elsewhere"] == [held.name], report
    assert report["finished"] == {"done": 1, "failed": 1}, report


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under a run's folder: its bytes and modification time."""
    return {str(f.relative_to(run_dir)): (f.read_bytes(), f.stat().st_mtime_ns) for f in sorted(run_dir.rglob("*"))
            if f.is_file()}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_the_wait_for_another_process_not_that_process(tmp_path, sig):
    """A relaunch with no run of its own waits for the run another process trains: Ctrl-C (or `kill`)
    during that wait stops the launch (exit 130, "interrupted", no traceback), not the process training
    the run, whose folder (its lock's holder record, its job.json) the launch leaves as it was."""
    from sweeps.store import lock_holder

    spec, sweep_dir, (held,), holder = _held(tmp_path, HOLD_LOCK, text=TINY.replace("seed = [0, 1]", "seed = 0"))
    p = None
    try:
        before = _snapshot(held)
        p = _launch_process(spec, sweep_dir)
        lines = []
        while not (lines and lines[-1].startswith("waiting:")):
            line = p.stdout.readline()
            assert line, (lines, p.communicate())  # (it exited before waiting)
            lines.append(line)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, "".join(lines) + out + err
        assert err.strip().splitlines()[-1].startswith("interrupted (Ctrl-C or SIGTERM): ") and "Traceback" not in err, err
        assert holder.poll() is None  # still training
        assert lock_holder(held)["pid"] == holder.pid and _snapshot(held) == before
    finally:
        _stop(p, holder)


def _launch_process(spec: Path, sweep_dir: Path, *options: str) -> subprocess.Popen:
    """`scaling sweep launch` of the spec, locally, as a process of its own (to signal it)."""
    cmd = [sys.executable, "-m", "scaling.cli", "sweep", "launch", str(spec), "--executor", "local",
           "--sweep-dir", str(sweep_dir), *options]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_after_its_own_run_prints_the_report_as_interrupted(tmp_path):
    """With --json, `kill` after the launch's own run, while the other process's run still trains, prints the
    report so far (the other process's run named, interrupted: true, nothing failed) and exits 130. (Whether
    the signal comes in the wait or as the pool closes, --json's silence cannot tell: its own run is counted
    done in the one, not yet in the other.)"""
    from sweeps.store import lock_holder

    spec, sweep_dir, (held, own), holder = _held(tmp_path, HOLD_LOCK)
    p = None
    try:
        before = _snapshot(held)
        p = _launch_process(spec, sweep_dir, "--json")
        deadline = time.time() + 120
        while not (own / "result.json").exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert (own / "result.json").exists(), "its own run never finished"
        time.sleep(3)  # its worker reports the run and the pool closes: the launch is most likely in the wait
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, out + err
        report = json.loads(out)
        assert report["interrupted"] is True and report["elsewhere"] == [held.name], report
        assert report["finished"] in ({"done": 1}, {}), report
        assert holder.poll() is None and lock_holder(held)["pid"] == holder.pid and _snapshot(held) == before
    finally:
        _stop(p, holder)


def test_status_says_which_failed_runs_resume_and_that_nothing_runs(tmp_path, capsys):
    """A run that stopped after a checkpoint (killed, cancelled) is failed but resumable, and with
    nothing running or queued the ETA says the sweep needs launching again, not a time."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan (sweep.json)
    stopped, died, missing = (sweep_dir / c.run_id for c in spec.runs())
    for d in (stopped, died):
        write_json(d / "job.json", {"executor": "local", "job_id": None})
    write_checkpoint(stopped)
    st = status(sweep_dir)
    assert {r.run_id: (r.state, r.resumable) for r in st.runs} == {
        stopped.name: ("failed", True), died.name: ("failed", False), missing.name: ("missing", False)}
    assert st.eta_s is None and "nothing running or queued" in st.eta_method and "3 remaining runs" in st.eta_method
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "failed (resumable)" in out and "launching the sweep again resumes it" in out and "ETA: unknown" in out

def test_status_and_collect_tables_show_an_lr_sweeps_lr_mult(tmp_path, capsys):
    """An LR sweep's runs of one grid point differ only in lr_mult, which `status --runs` and `collect` left out of
    their tables: two rows alike but for val_loss, and no telling which LR gave which. They show it where a run's
    is not 1 (as `point_label` names a run)."""
    from sweeps.launch import pending
    from sweeps.store import write_json

    spec = load(tmp_path, overrides=("grid.seed=0", "grid.lr_mult=[1.0, 4.0]"))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan (sweep.json)
    for c, loss in zip(spec.runs(), (5.25, 9.5)):
        write_json(sweep_dir / c.run_id / "result.json", {"run_id": c.run_id, "status": "completed", "recipe": "bf16",
                                                          "seed": 0, "lr_mult": c.lr_mult, "val_loss": loss})
    table = re.compile(r"lr_mult.*\n.*\n.*\b0\s*\S\s*1\s*\S.*5\.25.*\n.*\b0\s*\S\s*4\s*\S.*9\.5")
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    assert table.search(capsys.readouterr().out)
    assert main(["sweep", "collect", str(sweep_dir)]) == 0
    assert table.search(capsys.readouterr().out)
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    assert [r["lr_mult"] for r in json.loads(capsys.readouterr().out)["runs"]] == [1.0, 4.0]


@pytest.mark.parametrize("name, make", [("result.json", Path.mkdir), ("metrics.csv", Path.mkdir),
                                        ("checkpoints", Path.touch), ("lock", Path.mkdir)])
def test_status_and_collect_name_a_run_path_of_the_wrong_kind_and_its_fix(tmp_path, capsys, name, make):
    """A run folder holding one of the run's paths as the wrong kind (a folder named result.json or metrics.csv, a
    file named checkpoints): status stopped on it ("cannot use .../result.json (Is a directory); check the path"),
    not showing the other runs, or read the run as done where train refuses it. Status lists that run as failed on
    the error train stops on (the path and the `mv` that fixes it), the others as they are; collect refuses it in
    those words."""
    from sweeps.launch import pending
    from sweeps.store import write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    good, bad = (sweep_dir / c.run_id for c in spec.runs())
    for d in (good, bad):
        write_json(d / "result.json", {"run_id": d.name, "status": "completed", "recipe": "bf16", "val_loss": 5.25})
    wrong = bad / name
    if wrong.exists():
        wrong.unlink()
    make(wrong)
    kind, wanted = ("a folder", "a file") if make is Path.mkdir else ("a file", "a folder")
    said = f"{wrong} is {kind}, where this run keeps {wanted} of that name; move it away (mv {wrong} {wrong}.old)"
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{good.name} .* done ", out) and re.search(rf"{bad.name} .* failed \(stopped on an error\)", out)
    assert said in " ".join(out.split()), out
    assert main(["sweep", "collect", str(sweep_dir)]) == 2
    assert capsys.readouterr().err == f"error: {said}, then run again\n"


def test_status_says_the_error_a_slurm_job_failed_on(tmp_path, monkeypatch, capsys):
    """A SLURM job that failed on a UserError (data its node cannot see) says it in one line in its log, but
    status said only "failed" and "`scaling sweep launch` again", which meets the same error. It names the error
    (its log's last `error: ` line), and counts the run neither as plainly failed nor as resumable."""
    import sweeps.store
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    monkeypatch.setattr(sweeps.store, "slurm_queue", lambda: {})  # the jobs have left the queue
    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    erred, killed = (sweep_dir / c.run_id for c in spec.runs())
    logs = sweep_dir / ".submitit"
    logs.mkdir()
    for d, job in ((erred, "7_0"), (killed, "7_1")):
        write_json(d / "job.json", {"executor": "slurm", "job_id": job, "log": str(logs / f"{job}_0_log.out")})
        write_checkpoint(d)
    (logs / "7_0_0_log.err").write_text("GPU available: False, used: False\nerror: data /x does not exist; give "
                                       "builtin\nsrun: error: vm: task 0: Exited with exit code 2\n")
    (logs / "7_1_0_log.err").write_text("srun: error: vm: task 0: Killed\n")
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert rows[erred.name].error == "data /x does not exist; give builtin" and rows[killed.name].error is None
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "failed (stopped on an error)" in out and "failed (resumable)" in out
    assert (f"1 failed run stopped on an error, which a relaunch meets again until it is fixed: {erred.name} (SLURM "
            "job 7_0): data /x does not exist; give builtin\n") in out
    assert "1 of the failed runs stopped after a checkpoint" in out  # the killed one alone


def test_status_says_the_error_a_local_run_failed_on(tmp_path, capsys):
    """A local run that failed on a UserError (its config.json damaged) ends its train.log with the worker's
    `error: ` line, but status said "failed (resumable)" and "launching the sweep again resumes it", which met the
    same error again. It names the error, as a SLURM job's; an error a later launch's output follows is not it."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    erred, killed, fixed = (sweep_dir / c.run_id for c in spec.runs())
    error = "error: cannot read run config x/config.json (not JSON); give the config.json a run wrote\n"
    for d, log in ((erred, "02:14:05Z step 1 of 8 (12%): train_loss 8.3\n" + error + "\n"),
                   (killed, "02:14:05Z step 1 of 8 (12%): train_loss 8.3\n"),
                   (fixed, error + "resuming from the checkpoint x at step 4 of 8\n")):
        write_json(d / "job.json", {"executor": "local", "job_id": None})
        write_checkpoint(d)
        (d / "train.log").write_text(log)
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert rows[erred.name].error == error.strip().removeprefix("error: ")
    assert rows[killed.name].error is None and rows[fixed.name].error is None
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "failed (stopped on an error)" in out
    assert (f"1 failed run stopped on an error, which a relaunch meets again until it is fixed: {erred.name}: "
            "cannot read run config x/config.json") in out  # (no "(SLURM job None)")
    assert "2 of the failed runs stopped after a checkpoint" in out


def test_collect_says_a_relaunch_meets_a_failed_runs_error_again(tmp_path, monkeypatch, capsys):
    """collect's note said "`scaling sweep launch` again trains or resumes them" of every failed run, also of one
    whose SLURM job stopped on a UserError, which a relaunch meets again until it is fixed: it counts those
    apart, as status does, and points at status for the error."""
    import sweeps.store
    from sweeps.launch import pending
    from sweeps.store import RunStatus, relaunch_advice, write_json

    monkeypatch.setattr(sweeps.store, "slurm_queue", lambda: {})  # the jobs have left the queue
    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    erred, killed, done = (sweep_dir / c.run_id for c in spec.runs())
    logs = sweep_dir / ".submitit"
    logs.mkdir()
    for d, job in ((erred, "7_0"), (killed, "7_1")):
        write_json(d / "job.json", {"executor": "slurm", "job_id": job, "log": str(logs / f"{job}_0_log.out")})
        write_checkpoint(d)
    (logs / "7_0_0_log.err").write_text("error: recipe file /x/r.toml does not exist\n")
    (logs / "7_1_0_log.err").write_text("srun: error: vm: task 0: Killed\n")
    done.mkdir()  # (a sweep with no finished run is refused: test_collect_and_report_of_a_sweep_with_no_finished_run_...)
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0})
    assert main(["sweep", "collect", str(sweep_dir)]) == 0
    err = capsys.readouterr().err
    assert "2 runs of the sweep have no result (2 failed)" in err, err
    assert err.rstrip().endswith(
        "lists them; 1 failed run stopped on an error, which a relaunch meets again until it is fixed (`scaling sweep "
        "status` prints it); `scaling sweep launch` again trains or resumes the 1 other"), err

    def run(state, error=None, checkpoint_damaged=None):
        return RunStatus("r", "nanochat", "0.5M", "bf16", 4096, 0, state, 0.0, None, None, None, error=error,
                         checkpoint_damaged=checkpoint_damaged)

    assert relaunch_advice([run("failed", "x"), run("failed", "y")]) == (
        "2 failed runs stopped on an error, which a relaunch meets again until it is fixed (`scaling sweep status` "
        "prints each)")
    assert relaunch_advice([run("failed", "x"), run("queued")]) == (
        "1 failed run stopped on an error, which a relaunch meets again until it is fixed (`scaling sweep status` "
        "prints it); the 1 running or queued finishes without a relaunch")
    assert relaunch_advice([run("queued")]) == "it finishes without a relaunch"
    # a damaged checkpoint: train refuses to resume from it, so a relaunch fails the run again (it was counted
    # among the runs a relaunch "trains or resumes")
    assert relaunch_advice([run("failed", checkpoint_damaged="not a zip archive"), run("failed")]) == (
        "1 failed run has a damaged checkpoint, which a relaunch fails on until it is moved aside (`scaling sweep "
        "status` says how); `scaling sweep launch` again trains or resumes the 1 other")


def test_status_says_when_squeue_could_not_be_asked(tmp_path, monkeypatch):
    """Where squeue cannot be run (its controller down), status counts a run with a SLURM job and no result as
    queued, trusting the record (a relaunch must not submit it twice); it said nothing of it, so a job long
    failed read as queued without a word. Its ETA line says squeue could not be run."""
    import sweeps.store
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=0",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    (run,) = spec.runs()
    write_json(sweep_dir / run.run_id / "job.json", {"executor": "slurm", "job_id": "7"})
    monkeypatch.setattr(sweeps.store, "slurm_queue", lambda: None)
    st = status(sweep_dir)
    assert st.counts["queued"] == 1 and "squeue could not be run here" in st.eta_method, st.eta_method
    monkeypatch.setattr(sweeps.store, "slurm_queue", lambda: {"7": sweeps.store.QueuedJob("PENDING", "Priority")})
    assert "squeue could not be run" not in status(sweep_dir).eta_method


def test_status_says_a_failed_runs_result_json_is_damaged(tmp_path, capsys):
    """A run whose result.json is no result record (not JSON, another status) is failed, but status called it
    "failed (resumable)" with the note "(killed, cancelled or crashed)", and nothing said the file was damaged
    (only collect named it). It says so, and what a relaunch does with it (moves it aside, trains the run)."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    garbled, edited, killed = (sweep_dir / c.run_id for c in spec.runs())
    for d in (garbled, edited, killed):
        write_json(d / "job.json", {"executor": "local", "job_id": None})
        write_checkpoint(d)
    (garbled / "result.json").write_text("{bad")
    write_json(edited / "result.json", {"run_id": edited.name, "status": "weird", "recipe": "bf16"})
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert {r.state for r in rows.values()} == {"failed"} and rows[killed.name].result_damaged is None
    assert rows[garbled.name].result_damaged.startswith("not JSON: ")
    assert rows[edited.name].result_damaged == "status 'weird' is not one of completed, diverged, failed"  # record_problem's
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert out.count("failed (result.json damaged: a relaunch moves it aside and trains the run again)") == 2, out
    assert out.count("failed (resumable)") == 1 and "1 of the failed runs stopped after a checkpoint (killed" in out
    note = next(line for line in out.splitlines() if line.startswith("2 failed runs have a damaged result.json, "))
    assert f"{garbled / 'result.json'} (not JSON: " in note and f"{edited / 'result.json'} (status 'weird' " in note
    assert note.endswith("launching the sweep again moves each such file aside (as result.damaged-<n>.json, kept) and "
                         "trains its run again (from its checkpoint, where it left a sound one)"), note
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs[edited.name]["result_damaged"].startswith("status 'weird'") and runs[killed.name]["result_damaged"] is None


def write_checkpoint(run_dir: Path, run_id: str | None = None, step: int = 3) -> Path:
    """A checkpoint as torch writes one (a zip archive with a pickled state) of `step` steps, at the run's checkpoint
    path; with run_id, naming that run as train's do (`CHECKPOINT_RUN_KEY`)."""
    import torch

    from scaling.files import CHECKPOINT_RUN_KEY, checkpoint_path

    path = checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    named = {CHECKPOINT_RUN_KEY: json.dumps({"run_id": run_id, "config": {}})} if run_id else {}
    torch.save({"epoch": 0, "global_step": step, "state_dict": {"w": torch.zeros(256)}, **named}, path)
    return path


@pytest.mark.parametrize("damage", ["empty", "truncated", "not a zip"])
def test_status_says_a_failed_runs_damaged_checkpoint_fails_a_relaunch(tmp_path, capsys, damage):
    """A failed run whose checkpoint is damaged is not resumable: train refuses to resume from it (one line
    naming it), so a relaunch fails the run again until the file is moved away. Status said "failed
    (resumable)" for any checkpoint file; it says what a relaunch does, by train's own check."""
    from scaling.train import check_checkpoint
    from sweeps.store import status

    spec, sweep_dir, damaged, sound = _two_checkpointed_runs(tmp_path)
    ckpt = damaged / "checkpoints" / "last.ckpt"
    whole = ckpt.read_bytes()
    ckpt.write_bytes({"empty": b"", "truncated": whole[: len(whole) // 2], "not a zip": b"a checkpoint"}[damage])
    with pytest.raises(UserError, match="is damaged"):  # what a relaunch's train does with it
        check_checkpoint(ckpt)
    check_checkpoint(sound / "checkpoints" / "last.ckpt")
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert (rows[damaged.name].resumable, rows[sound.name].resumable) == (False, True)
    assert rows[damaged.name].checkpoint_damaged and rows[sound.name].checkpoint_damaged is None
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "failed (checkpoint damaged: a relaunch fails on it)" in out and "failed (resumable)" in out
    assert "1 of the failed runs stopped after a checkpoint" in out
    assert f"1 failed run left a damaged checkpoint, on which a relaunch fails again: {ckpt} (" in out
    assert f"move it away (mv {ckpt} {ckpt}.bad)" in out
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs[damaged.name]["checkpoint_damaged"] and runs[damaged.name]["resumable"] is False


def test_status_finds_a_failed_runs_checkpoint_whose_crc_fails(tmp_path, capsys):
    """A byte flipped inside a tensor leaves the archive's directory whole: status read such a failed run as
    "failed (resumable)", and the relaunch it advised refused the checkpoint (train checks the CRC-32s). Status
    checks them too, and says what the relaunch does, with its advice (move it away)."""
    import torch

    from scaling.train import check_checkpoint
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=0",))
    sweep_dir = tmp_path / "sweep"
    (run,) = pending(spec, sweep_dir)[0]
    write_json(sweep_dir / run.run_id / "job.json", {"executor": "local", "job_id": None})
    ckpt = write_checkpoint(sweep_dir / run.run_id)
    data = bytearray(ckpt.read_bytes())
    data[data.index(torch.zeros(256).numpy().tobytes()) + 100] ^= 0x01  # inside the tensor's bytes
    ckpt.write_bytes(data)
    with pytest.raises(UserError, match="fails its CRC-32 check"):  # what a relaunch's train does with it
        check_checkpoint(ckpt)
    (row,) = status(sweep_dir).runs
    assert (row.state, row.resumable) == ("failed", False) and "fails its CRC-32 check" in row.checkpoint_damaged
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "failed (checkpoint damaged: a relaunch fails on it)" in out and "resumable" not in out
    assert f"move it away (mv {ckpt} {ckpt}.bad)" in out


def test_a_relaunch_does_with_a_damaged_checkpoint_what_status_said(tmp_path, capsys):
    """The launch that status warned of: its line counts no damaged checkpoint as one it resumes from and warns
    of it, and the run fails on train's one line naming the file, as status said; failed again, still damaged."""
    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    args = ["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir), "--set", "grid.seed=0"]
    from sweeps.launch import pending

    (run,) = pending(load(tmp_path, overrides=("grid.seed=0",)), sweep_dir)[0]
    ckpt = write_checkpoint(sweep_dir / run.run_id)
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert "1 to run\n" in out and "from its checkpoint" not in out, out
    assert f"warning: 1 run ({run.run_id}) has a damaged checkpoint, on which training fails again" in out, out
    log = (sweep_dir / run.run_id / "train.log").read_text()
    assert f"the checkpoint {ckpt} is damaged" in log and "Traceback" not in log, log
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    assert "failed (checkpoint damaged: a relaunch fails on it)" in capsys.readouterr().out


def test_status_and_launch_say_a_checkpoint_of_another_run_fails_a_relaunch(tmp_path, capsys):
    """A run folder whose checkpoint is another run's (its config.json lost, the checkpoint copied in): train
    refuses to resume it, yet status said "failed (resumable)" and launch counted it among the runs it resumes.
    Both now say what train does, by its rule (`checkpoint_of_another_run`); the run's own checkpoint resumes."""
    from sweeps.store import relaunch_advice, status

    spec, sweep_dir, theirs, own = _two_checkpointed_runs(tmp_path, both_name_the_second=True)
    ckpt = theirs / "checkpoints" / "last.ckpt"
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert (rows[theirs.name].resumable, rows[theirs.name].checkpoint_of) == (False, own.name)
    assert (rows[own.name].resumable, rows[own.name].checkpoint_of) == (True, None)
    assert relaunch_advice(rows.values()) == (
        "1 failed run holds the checkpoint of another run, which a relaunch fails on until it is moved aside "
        "(`scaling sweep status` says how); `scaling sweep launch` again trains or resumes the 1 other")
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert f"failed (checkpoint of another run, {own.name}: a relaunch fails on it)" in out and "failed (resumable)" in out
    assert (f"1 failed run holds the checkpoint of another run, on which a relaunch fails again: {ckpt} (run "
            f"{own.name}'s); move it away (mv {ckpt} {ckpt}.other) and launch") in out, out
    args = ["sweep", "launch", str(write_spec(tmp_path)), "--executor", "local", "--sweep-dir", str(sweep_dir),
            "--set", "grid.seed=0"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "1 to run\n" in out and "from its checkpoint" not in out, out
    assert f"warning: 1 run ({theirs.name}) holds the checkpoint of another run, on which training fails" in out, out
    log = (theirs / "train.log").read_text()
    assert f"{theirs} holds the checkpoint of another run ({own.name}, not {theirs.name}" in log, log
    assert "Traceback" not in log, log


# ---------------------------------------------------------------------------------------------
# Local executor: launch, status, collect, relaunch


def _misnamed(sweep_dir: Path, name: str, seed: int, finished: bool) -> tuple[Path, str]:
    """A run's own folder under a name of its own, as `scaling train --out` names one: its config.json, and a
    result.json (finished) or else a job record and a checkpoint, of run (folder, run id)."""
    from scaling.config import RunConfig
    from sweeps.store import write_json

    config = RunConfig(family="nanochat", size="0.5M", recipe="bf16", tokens=4096, seed=seed).resolved()
    run = sweep_dir / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(config.to_json())
    if finished:
        write_json(run / "result.json", {"run_id": config.run_id, "status": "completed", "recipe": "bf16", "val_loss": 6.5})
    else:
        write_json(run / "job.json", {"executor": "local", "job_id": None})
        write_checkpoint(run, run_id=config.run_id)
    return run, config.run_id


def test_status_shows_a_run_folder_under_a_name_of_its_own_as_a_row_beside_the_others(tmp_path, capsys):
    """One folder holding its run under a name of its own (`scaling train --out`, or renamed) stopped `sweep status`
    of the whole sweep with a UserError, hiding every other run's state. Now its row says so, the other runs' states
    are shown, the `mv` that names each such folder is said once, and collect still refuses it (its result, or
    its checkpoint, read by the folder's name would be another run's)."""
    from sweeps.store import collect, status, write_json

    spec = load(tmp_path)
    sweep_dir = tmp_path / "sweep"
    done, failed = (sweep_dir / c.run_id for c in spec.runs())
    for d, record in ((done, {"status": "completed", "val_loss": 6.4}), (failed, {"status": "failed"})):
        write_json(d / "result.json", {"run_id": d.name, "recipe": "bf16", **record})
    finished, finished_id = _misnamed(sweep_dir, "nvfp4-1m", seed=7, finished=True)
    stopped, stopped_id = _misnamed(sweep_dir, "try-2", seed=8, finished=False)

    st = status(sweep_dir)
    assert {k: v for k, v in st.counts.items() if v} == {"done": 1, "failed": 1, "misnamed": 2}
    rows = {r.run_id: r for r in st.runs}
    assert (rows[finished.name].misnamed, rows[stopped.name].misnamed) == (finished_id, stopped_id)
    assert not any(r.result_damaged or r.checkpoint_of or r.resumable for r in (rows[finished.name], rows[stopped.name]))
    # the finished one's progress is its record's, as a done run's: it read 0% (no metrics.csv) or, after a run that
    # trained whole steps short of its --tokens, 99% (newcomer audit)
    assert (rows[finished.name].progress, rows[stopped.name].progress) == (1.0, 0.0)
    assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
    out = capsys.readouterr().out
    assert f"misnamed (holds run {finished_id}: rename it to its id)" in out and "misnamed (holds run" in out, out
    assert out.count(f"mv {finished} {sweep_dir / finished_id}") == 1, out
    assert (f"2 run folders hold their runs under a name of their own, as `scaling train --out` names a run's folder, "
            f"where a sweep's are named by their run ids: `scaling sweep collect` and `scaling report` refuse the sweep "
            f"until they are renamed (mv {finished} {sweep_dir / finished_id}; mv {stopped} {sweep_dir / stopped_id})") in out
    assert "misnamed" in out.split("sweep " + str(sweep_dir))[1], out  # the counts table's column, where there is one

    with pytest.raises(UserError, match=f"{finished} holds run {finished_id} under a name of its own"):
        collect(sweep_dir)
    finished.rename(sweep_dir / finished_id)  # as the line says; the one left with a checkpoint is refused so too
    with pytest.raises(UserError, match=f"{stopped} holds run {stopped_id} under a name of its own"):
        collect(sweep_dir)
    stopped.rename(sweep_dir / stopped_id)
    assert {k: v for k, v in status(sweep_dir).counts.items() if v} == {"done": 2, "failed": 2}


def test_status_counts_a_planned_run_in_a_renamed_folder_once(tmp_path, capsys):
    """A planned run's folder renamed: status showed its misnamed row and, for its id, a missing one, whose ETA line
    said to launch again to train "the 1 remaining run", which the launch refuses until the folder is renamed."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path)
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan (sweep.json)
    done, renamed = (sweep_dir / c.run_id for c in spec.runs())
    for d in (done, renamed):
        write_json(d / "result.json", {"run_id": d.name, "status": "completed", "recipe": "bf16", "val_loss": 6.4})
    (renamed / "config.json").write_text(spec.runs()[1].resolved().to_json())
    renamed.rename(sweep_dir / "my-run")
    st = status(sweep_dir)
    assert [(r.run_id, r.state) for r in st.runs] == [(done.name, "done"), ("my-run", "misnamed")], st.runs
    assert "remaining run" not in st.eta_method, st.eta_method


def test_a_relaunch_refuses_a_run_of_its_spec_in_its_folder_renamed(tmp_path, capsys):
    """A finished run's folder renamed (seen on SLURM: `mv runs/tiny/<id> runs/tiny/my-run`): the relaunch found no
    folder of the run's id, submitted it again (`skipping 15 done; slurm: 1 to run`) and trained it beside its
    folder, which collect then refused as a damaged record. It stops before anything runs, with the `mv`."""
    from sweeps.store import write_json

    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    config = load(tmp_path).runs()[0]
    run = sweep_dir / "my-run"
    run.mkdir(parents=True)
    (run / "config.json").write_text(config.resolved().to_json())
    write_json(run / "result.json", {"run_id": config.run_id, "status": "completed", "recipe": "bf16", "val_loss": 6.5})
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run} holds run {config.run_id} under a name of its own") and err.count("\n") == 1, err
    assert f"(mv {run} {sweep_dir / config.run_id})" in err, err
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["my-run"]  # nothing trained, no plan written


def test_a_local_sweep_that_fills_the_disk_stops_with_one_line(tmp_path, full_disk, capfd):
    """The runs' first checkpoints do not fit: the launch stops (every further run would fail the
    same way) with one line naming the file, exit 2, no traceback, and no run recorded as a result."""
    from sweeps.store import status

    spec = write_spec(tmp_path)
    sweep_dir = full_disk / "tiny"
    (full_disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 160 * 1024))  # room for the plan and logs
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 2
    err = capfd.readouterr().err  # (capfd: the workers' own output too)
    assert "Traceback" not in err, err
    assert re.fullmatch(rf"error: cannot use {sweep_dir}/\w+/\S+ \(No space left on device\); free space there, "
                        r"then run again", err.strip().splitlines()[-1]), err
    counts = status(sweep_dir).counts  # no result written: a relaunch with room trains them
    assert counts["failed"] + counts["missing"] == 2, counts


def test_local_launch_collect_and_relaunch(tmp_path, capsys):
    import polars as pl

    from sweeps.store import RESULT_FIELDS, status

    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "runs" / "tiny"
    t0 = time.time()
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 to run" in out and "[2/2] done" in out, out
    assert out.count(" seed=1 ") == 1 and " seed=0 " not in out, out  # the two seeds' lines told apart
    # its last line says how its runs ended and what comes next (it ended on the last run's line)
    assert re.fullmatch(rf"tiny: 2 runs ended \(2 done\) in \d+m\d\ds; `scaling sweep collect {sweep_dir}` tables the "
                        rf"results, `scaling report {sweep_dir} --out DIR` reports them", out.strip().splitlines()[-1]), out
    print(f"local launch of 2 tiny runs: {time.time() - t0:.1f} s")

    assert main(["sweep", "collect", str(sweep_dir)]) == 0
    df = pl.read_parquet(sweep_dir / "results.parquet")
    assert df.height == 2 and list(df.columns[: len(RESULT_FIELDS)]) == list(RESULT_FIELDS)
    assert sorted(df["seed"].to_list()) == [0, 1] and set(df["status"]) == {"completed"}
    assert df["val_loss"].is_finite().all() and (df["tokens"] == 4096).all()

    capsys.readouterr()
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"]["done"] == 2 and all(r["progress"] == 1.0 for r in st["runs"])

    # A second launch finds both done and runs nothing, and exits 0 though the folder also holds a
    # failed run that is no longer in the spec (not this launch's to report).
    mtimes = [p.stat().st_mtime for p in sorted(sweep_dir.glob("*/result.json"))]
    stale = sweep_dir / "0000stale"
    shutil.copytree(sorted(sweep_dir.glob("*/result.json"))[0].parent, stale)
    (stale / "result.json").write_text(json.dumps({**json.loads((stale / "result.json").read_text()), "status": "failed"}))
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 0
    assert "skipping 2 done; local: 0 to run" in capsys.readouterr().out
    assert status(sweep_dir).counts["failed"] == 1
    assert [p.stat().st_mtime for p in sorted(sweep_dir.glob("*/result.json")) if p.parent != stale] == mtimes

    # A result.json damaged by hand or disk is no result: counted failed, and a relaunch moves it aside
    # (kept) and trains the run again from its checkpoint.
    shutil.rmtree(stale)
    damaged = sorted(sweep_dir.glob("*/result.json"))[0]
    damaged.write_text("{bad")
    assert status(sweep_dir).counts == {**status(sweep_dir).counts, "done": 1, "failed": 1}
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "running 1 run, 1 at a time" in out and "[1/1] done" in out, out  # (not "2 at a time": cpu_jobs)
    assert (damaged.parent / "result.damaged-0.json").read_text() == "{bad"
    assert status(sweep_dir).counts["done"] == 2
    # So is a record edited to a status train never writes, or another run's record copied in: a relaunch
    # moved neither aside (it kept failing, or kept the other run's loss under this run as done). One of
    # each, relaunched together in one worker (cpu_jobs=1: one import of torch and Lightning, not two).
    records = sorted(sweep_dir.glob("*/result.json"))  # (damaged is the first)
    for record, edit in zip(records, ({"status": "weird"}, {"run_id": "0000other"})):
        record.write_text(json.dumps({**json.loads(record.read_text()), **edit}))
    assert status(sweep_dir).counts["failed"] == 2
    assert main(["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir),
                 "--set", "executor.local.cpu_jobs=1"]) == 0
    out = capsys.readouterr().out
    assert "running 2 runs, 1 at a time" in out and "[2/2] done" in out, out
    assert all(json.loads(r.read_text())["run_id"] == r.parent.name for r in records)
    assert [len(list(r.parent.glob("result.damaged-*.json"))) for r in records] == [2, 1]
    assert status(sweep_dir).counts["done"] == 2


def test_the_exit_status_counts_this_launchs_failures():
    from scaling.commands.sweep import _failed_here
    from sweeps.launch import LaunchReport

    assert _failed_here(LaunchReport("d", "local", 3, finished={"done": 2, "failed": 1})) == 1
    assert _failed_here(LaunchReport("d", "local", 3, finished={"done": 3})) == 0
    assert _failed_here(LaunchReport("d", "slurm", 3, submitted=[{"run_id": "a", "job_id": "1"}])) == 0  # no --wait


def test_a_waited_slurm_launch_reports_what_became_of_its_runs(monkeypatch, capsys):
    """`launch --executor slurm --wait --json` exited 1 for a cancelled run but printed "finished": {}:
    a script could not tell which state its runs ended in. It reports its own submitted runs' states
    (not another launch's run in the same folder) and exits 1 on the failed one."""
    import types

    import sweeps.store
    from scaling.commands import sweep as sweep_cmd
    from sweeps.launch import LaunchReport
    from sweeps.store import RunStatus

    def run(run_id: str, state: str) -> RunStatus:
        return RunStatus(run_id, "nanochat", "0.5M", "bf16", 4096, 0, state, 1.0, None, None, None)

    # another launch's run still trains in the folder: the wait is for this launch's runs only
    runs = [run("a", "done"), run("b", "failed"), run("elsewhere", "failed"), run("theirs", "running")]
    counts = {"done": 1, "running": 1, "queued": 0, "failed": 2, "diverged": 0, "missing": 0}
    monkeypatch.setattr(sweeps.store, "status", lambda d: types.SimpleNamespace(counts=counts, runs=runs))
    monkeypatch.setattr(sweep_cmd.time, "sleep", lambda s: pytest.fail("waited for another launch's run"))
    report = LaunchReport("d", "slurm", 2, submitted=[{"run_id": "a", "job_id": "1_0"}, {"run_id": "b", "job_id": "1_1"}])
    sweep_cmd._wait(report, quiet=True)
    assert report.finished == {"done": 1, "failed": 1}
    assert sweep_cmd._failed_here(report) == 1


def test_a_requeued_array_task_is_not_taken_for_cancelled(monkeypatch):
    """The task that carries its array's id (74_3 is job 74) is shown by `scontrol show job -o 74`
    with every other task of the array: its SIGTERM must be judged on its own line (requeued:
    Restarts=1), not on the last line's (74_0, finished, Restarts=0, which read as a cancel)."""
    from sweeps import launch as launch_mod

    own = ("JobId=74 ArrayJobId=74 ArrayTaskId=3 JobState=COMPLETING Restarts=1 PreemptTime=None "
           "TimeLimit=00:30:00 StartTime=2026-12-06T03:41:13 EndTime=2026-12-06T03:41:29")
    other = ("JobId=77 ArrayJobId=74 ArrayTaskId=0 JobState=COMPLETED Restarts=0 PreemptTime=None "
             "TimeLimit=00:30:00 StartTime=2026-12-06T03:40:40 EndTime=2026-12-06T03:40:55")
    out = subprocess.CompletedProcess([], 0, stdout=f"{own}\n{other}\n", stderr="")
    monkeypatch.setattr(launch_mod.subprocess, "run", lambda *a, **k: out)
    monkeypatch.setenv("SLURM_JOB_ID", "74")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert launch_mod._sigterm_cause() == "requeued"
    # the same task cancelled (no restart counted) is still a cancel
    out = subprocess.CompletedProcess([], 0, stdout=f"{own.replace('Restarts=1', 'Restarts=0')}\n{other}\n", stderr="")
    assert launch_mod._sigterm_cause() == "cancelled"
    # ... and ended at its time limit (30 minutes after it started), a timeout, which submitit counts
    at_limit = own.replace("Restarts=1", "Restarts=0").replace("EndTime=2026-12-06T03:41:29", "EndTime=2026-12-06T04:11:13")
    out = subprocess.CompletedProcess([], 0, stdout=f"{at_limit}\n{other}\n", stderr="")
    assert launch_mod._sigterm_cause() == "timeout"


def test_a_slurm_jobs_user_error_is_one_line_in_its_log_and_fails_the_run(tmp_path, capsys):
    """A SLURM job whose train raised a UserError (missing data, a damaged checkpoint) logged submitit's whole
    traceback of it. The job's entry (what submitit calls) says the one line `scaling train` says and fails the
    job with its exit status, 2 (a SystemExit, which submitit's handler lets by); the run reads failed."""
    from sweeps.launch import RunJob, pending
    from sweeps.store import run_state, write_json

    (run,) = pending(load(tmp_path, overrides=("grid.seed=0",)), tmp_path / "sweep")[0]
    run_dir = tmp_path / "sweep" / run.run_id
    write_json(run_dir / "job.json", {"executor": "slurm", "job_id": "7_0"})
    missing = tmp_path / "no-data"
    with pytest.raises(SystemExit) as ended:
        RunJob(dataclasses.replace(run, data=str(missing)), run_dir)()
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and err.startswith("error: ") and str(missing) in err, err
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert not (run_dir / "result.json").exists() and run_state(run_dir, {}) == "failed"  # its job left the queue


def test_a_cancelled_slurm_job_says_so_in_one_line_and_a_preempted_one_still_requeues(tmp_path, monkeypatch, capsys):
    """A SLURM job cancelled (scancel) after a checkpoint raised `Preempted` on to submitit, which logged its whole
    traceback before the job's end. It says in one line what happened (the checkpoint's step, that a relaunch
    resumes) and exits PREEMPTED_EXIT_CODE (a SystemExit: submitit's handler lets it by); a SIGTERM that is no
    cancel (a preemption, `scontrol requeue`) and a time limit's USR1 still take submitit's requeue path."""
    import scaling.train
    from scaling.train import PREEMPTED_EXIT_CODE, Preempted
    from sweeps import launch as launch_mod
    from sweeps.launch import RunJob, pending

    (run,) = pending(load(tmp_path, overrides=("grid.seed=0",)), tmp_path / "sweep")[0]
    run_dir = tmp_path / "sweep" / run.run_id
    signum = signal.SIGTERM

    def stopped(config, run_dir, progress):
        raise Preempted(f"received {signal.Signals(signum).name}; checkpoint saved at step 8", signum)

    requeued, cause = [], "cancelled"
    monkeypatch.setattr(scaling.train, "train", stopped)
    monkeypatch.setattr(launch_mod, "_sigterm_cause", lambda: cause)
    monkeypatch.setattr(launch_mod, "_requeue_through_submitit", lambda timed_out: requeued.append(timed_out))
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    with pytest.raises(SystemExit) as ended:
        RunJob(run, run_dir)()
    out, err = capsys.readouterr()
    assert ended.value.code == PREEMPTED_EXIT_CODE and not requeued and out == ""
    assert err == ("cancelled (scancel): received SIGTERM; checkpoint saved at step 8; the job is not requeued, and "
                   "`scaling sweep launch` with the same spec resumes the run\n"), err
    # preempted; the time limit's USR1; the time limit's SIGTERM (USR1 came too late): submitit is told which were
    # timeouts (it counts them against max_timeouts), not left to guess from the wall time
    for signum, cause in ((signal.SIGTERM, "requeued"), (signal.SIGUSR1, "cancelled"), (signal.SIGTERM, "timeout")):
        with pytest.raises(Preempted):  # (submitit's handler exits the process first, in a real job)
            RunJob(run, run_dir)()
    assert requeued == [False, True, True] and "not requeued" not in "".join(capsys.readouterr())


def test_a_slurm_jobs_sigterm_during_its_imports_stops_it_before_training(tmp_path, monkeypatch):
    """A preemption's SIGTERM that reaches a SLURM job while it imports torch and Lightning (before train handles
    signals) went to submitit's handler, which only logs it: the job trained on until SLURM killed it KillWait
    later, and was not requeued (seen on the test cluster). The job's entry records it, as `scaling train` does:
    train stops before its first step with `Preempted`, from which the job requeues."""
    from scaling import signals
    from scaling.train import Preempted
    from sweeps import launch as launch_mod
    from sweeps.launch import RunJob, pending

    (run,) = pending(load(tmp_path, overrides=("grid.seed=0",)), tmp_path / "sweep")[0]
    run_dir = tmp_path / "sweep" / run.run_id
    real_lock = launch_mod.run_lock

    def lock_after_a_sigterm(path):  # the signal comes once the job has started, before train
        os.kill(os.getpid(), signal.SIGTERM)
        return real_lock(path)

    monkeypatch.setattr(launch_mod, "run_lock", lock_after_a_sigterm)
    before = signal.signal(signal.SIGTERM, lambda signum, frame: None)  # submitit's job: SIGTERM only logged
    try:
        with pytest.raises(Preempted, match="received SIGTERM while the run was being built"):
            RunJob(run, run_dir)()
    finally:
        signal.signal(signal.SIGTERM, before)
        signals._early.clear()
    assert not (run_dir / "result.json").exists()


def _await_run_evaluating(sweep_dir: Path, p: subprocess.Popen, but: tuple[Path, ...] = ()) -> Path:
    """The folder of a run (not one of `but`) once it has written its first evaluation, the launch `p`
    still going (asserted; waited up to 120 s)."""
    deadline = time.time() + 120
    while not (new := [m.parent for m in sweep_dir.glob("*/metrics.csv") if m.parent not in but]) \
            and p.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if p.poll() is not None or not new:
        p.kill()
        pytest.fail(f"no run evaluated while the launch ran: {p.communicate()}")
    return new[0]


def _launch_until_a_run_evaluates(spec: Path, sweep_dir: Path) -> tuple[list[str], subprocess.Popen]:
    """`sweep launch --executor local --json` started in the background and waited on until a run has
    written its first evaluation (the run is under way, or 120 s passed); the command (without --json)
    and the process."""
    cmd = [sys.executable, "-m", "scaling.cli", "sweep", "launch", str(spec), "--executor", "local",
           "--sweep-dir", str(sweep_dir)]
    p = subprocess.Popen(cmd + ["--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _await_run_evaluating(sweep_dir, p)
    return cmd, p


def test_sigterm_stops_a_local_launch_and_a_relaunch_resumes_it(tmp_path, capsys):
    """`kill` of a local launch mid-run: the launcher exits 130 once its worker has saved a checkpoint
    and gone (no run left locked, no result.json), with --json printing its report so far; a relaunch
    resumes the run from that checkpoint."""
    spec = write_spec(tmp_path, TINY.replace("tokens = 4096", "tokens = 8192").replace("seed = [0, 1]", "seed = 0")
                      .replace("eval_interval = 4", "eval_interval = 2"))
    sweep_dir = tmp_path / "sweep"
    cmd, p = _launch_until_a_run_evaluates(spec, sweep_dir)  # (step 2 of 16)
    try:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130, out + err
    report = json.loads(out)
    assert report["interrupted"] is True and "Traceback" not in err, out + err
    # one line saying what the stop left and how to go on (it was the bare word "interrupted")
    assert err.strip().splitlines()[-1] == (
        "interrupted (Ctrl-C or SIGTERM): this launch's runs saved a checkpoint and stopped (runs other processes "
        "train go on); run the same command again to go on: finished runs are kept, stopped ones resume from "
        "their checkpoints"), err
    assert report["finished"] == {} and report["total"] == 1, out  # a stopped run is no result to report
    (run_dir,) = sweep_dir.glob("*/metrics.csv")
    run_dir = run_dir.parent
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and not (run_dir / "result.json").exists()
    assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"].get("running", 0) == 0 and st["runs"][0]["resumable"] is True  # the worker is gone

    steps_before = len((run_dir / "metrics.csv").read_text().splitlines()) - 1
    assert main(cmd[3:]) == 0
    out = capsys.readouterr().out
    assert "local: 1 to run (1 from its checkpoint)" in out and "[1/1] done" in out, out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["tokens"] == 8192
    assert steps_before < len((run_dir / "metrics.csv").read_text().splitlines()) - 1 == 8  # one row per evaluation


def test_a_run_whose_worker_is_still_starting_is_not_failed_to_status(tmp_path):
    """A local launch's new worker imports torch and Lightning (seconds) before it can take a run's lock:
    the run must not read `failed` to `sweep status` meanwhile (nor its ETA say "launch again"), since a
    launch started then would take it for a dead run and start it again beside this one."""
    from sweeps.store import run_state

    spec = write_spec(tmp_path, TINY.replace("seed = [0, 1]", "seed = 0").replace("cpu_jobs = 2", "cpu_jobs = 1"))
    sweep_dir = tmp_path / "sweep"
    p = _launch_process(spec, sweep_dir)
    seen, deadline = set(), time.time() + 300
    try:
        while p.poll() is None and time.time() < deadline:
            seen.update(run_state(d, None) for d in sweep_dir.glob("*/") if d.is_dir())
            time.sleep(0.02)
        out, err = p.communicate(timeout=30)
        out += err
    finally:
        p.kill()
    assert p.returncode == 0, out
    assert "failed" not in seen and {"running", "done"} <= seen, (seen, out)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_a_run_whose_worker_is_killed_or_whose_folder_is_deleted_fails_and_the_launch_exits_1(tmp_path, capsys):
    """The OOM killer's SIGKILL of a local worker mid-run: that run is `failed` (no result.json, the
    log's note says how its worker ended), and a new worker takes the next run. `rm -rf` of a run's
    folder while its worker trains it: the run ends without a result, so the launch counts it failed
    and says what happened, rather than `missing` with exit 0 and a pointer to a log that is gone; the
    same worker runs the next run to completion. The launch exits 1 with both failures counted in
    --json's report; a relaunch reruns only the failed runs, the deleted one anew. (One sweep for
    both: each launch's worker imports torch and Lightning, seconds.)"""
    # longest first, in the only worker: the first is killed, the second (in a new worker) deleted
    spec = write_spec(tmp_path, TINY.replace("tokens = 4096", "tokens = [8192, 6144, 4096]").replace("seed = [0, 1]", "seed = 0")
                      .replace("cpu_jobs = 2", "cpu_jobs = 1").replace("eval_interval = 4", "eval_interval = 2"))
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "scaling.cli", "sweep", "launch", str(spec), "--executor", "local",
           "--sweep-dir", str(sweep_dir), "--json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        killed = _await_run_evaluating(sweep_dir, p)  # (step 2 of 16)
        (worker,) = _children(p.pid)
        os.kill(worker, signal.SIGKILL)
        deleted = _await_run_evaluating(sweep_dir, p, but=(killed,))  # (step 2 of 12, in a new worker)
        # the worker stopped while its folder goes: a run of ~1 s under a loaded CI machine's xdist otherwise wrote
        # into the folder as rmtree emptied it, and what was left then (once: a run `failed` with no word of why) is
        # no state this test is about
        (worker,) = _children(p.pid)
        os.kill(worker, signal.SIGSTOP)
        try:
            shutil.rmtree(deleted)
        finally:
            os.kill(worker, signal.SIGCONT)
        out, err = p.communicate(timeout=300)
    finally:
        p.kill()
    assert p.returncode == 1, out + err
    report = json.loads(out)
    assert report["finished"] == {"failed": 2, "done": 1} and report["total"] == 3, out
    # --json keeps stdout for the report, and the progress a long launch owes its user goes to stderr
    assert re.search(r"\[1/3\] failed .*killed by SIGKILL", err) and "[3/3] done" in err, err
    assert re.search(r"\[2/3\] failed .*its run folder was removed while it ran", err), err
    assert not (killed / "result.json").exists()
    # what a relaunch does with it, by what the kill left (an evaluation's checkpoint, or none yet)
    then = "resumes it from its checkpoint" if (killed / "checkpoints" / "last.ckpt").exists() else "trains it from the start"
    assert f"[sweep launch] its worker exited mid-run (killed by SIGKILL: out of memory?); a relaunch {then}" in (
        killed / "train.log").read_text()
    (other,) = [r for r in sweep_dir.glob("*/result.json")]
    assert json.loads(other.read_text())["status"] == "completed"

    assert main(cmd[3:]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == {"done": 2}
    assert all(json.loads((d / "result.json").read_text())["status"] == "completed" for d in (killed, deleted))


def test_a_worker_stopped_by_sigterm_says_a_relaunch_resumes_its_run(tmp_path, capsys):
    """`kill` of a local worker (not its launcher) mid-run: train saves a checkpoint and the worker exits 75.
    The launch's line for the run says so and that a relaunch resumes it (before: "its worker exited mid-run
    (exit status 75)", beside `failed`, as a crash would read), and the relaunch does."""
    spec = write_spec(tmp_path, TINY.replace("tokens = 4096", "tokens = 8192").replace("seed = [0, 1]", "seed = 0")
                      .replace("cpu_jobs = 2", "cpu_jobs = 1").replace("eval_interval = 4", "eval_interval = 2"))
    sweep_dir = tmp_path / "sweep"
    cmd, p = _launch_until_a_run_evaluates(spec, sweep_dir)  # (step 2 of 16)
    try:
        (worker,) = _children(p.pid)
        os.kill(worker, signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 1, out + err
    note = ("its worker exited mid-run (exit status 75: stopped by SIGTERM or SIGUSR1 after saving a checkpoint); "
            "a relaunch resumes it from its checkpoint")
    assert re.search(r"\[1/1\] failed .*" + re.escape(note), err), err
    (run_dir,) = [m.parent for m in sweep_dir.glob("*/metrics.csv")]
    assert f"[sweep launch] {note}" in (run_dir / "train.log").read_text()
    # the launch's last line says a run failed and what to do (it ended on the run's line, exit status 1 unsaid)
    assert re.fullmatch(rf"tiny: 1 run ended \(1 failed\) in \d+m\d\ds; `scaling sweep status {sweep_dir} --runs` says "
                        r"how each failed run stopped; run the same command again to resume or retrain it",
                        err.strip().splitlines()[-1]), err
    assert main(cmd[3:]) == 0
    out = capsys.readouterr().out
    assert "local: 1 to run (1 from its checkpoint)" in out and "[1/1] done" in out, out


def test_status_counts_progress_and_eta(tmp_path):
    from models import model_size
    from sweeps.launch import pending
    from sweeps.store import local_launch, status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan
    done, running, missing = (sweep_dir / c.run_id for c in spec.runs())
    flops = 6 * model_size("nanochat", "0.5M").n_params * 4096
    done.mkdir()
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0,
                                      "flops": flops, "wall_s": 10.0})
    running.mkdir()  # 8 steps of 8 x 64 tokens
    write_json(running / "config.json", spec.runs()[1].resolved().to_dict())
    (running / "metrics.csv").write_text("step,tokens,val_loss,val_bpb\n2,1024,7.0,2.4\n")  # before a resume
    # what it resumes from, the step its process starts at (without one the run starts over, from no tokens)
    write_checkpoint(running, step=2)
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(running)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        assert status(sweep_dir).runs[1].eta_s is None  # no progress of this process's own yet
        with open(running / "metrics.csv", "a") as f:
            f.write("4,2048,6.5,2.2\n")
        time.sleep(0.2)
        with local_launch(sweep_dir):  # the missing run waits for this launch's slot
            st = status(sweep_dir)
        unlaunched = status(sweep_dir)
    finally:
        p.kill()
        p.wait()
    assert {k: v for k, v in st.counts.items() if v} == {"done": 1, "running": 1, "waiting": 1}
    rows = {r.run_id: r for r in st.runs}
    assert rows[running.name].progress == 0.5 and rows[running.name].val_loss == 6.5
    # the resumed process did a quarter of the run (0.25 -> 0.5) in its time: the half left takes twice that
    started = json.loads((running / "lock").read_text())["started"]
    assert 2 * (time.time() - started) * 0.99 - 1 < rows[running.name].eta_s <= 2 * (time.time() - started) + 0.01
    # Left: the running run at its own pace, in one of the launch's two slots, and the waiting one in the other: priced
    # as the done run (the same plan price: only their seeds differ), which took 10 s
    assert st.eta_s == pytest.approx(max(rows[running.name].eta_s, 10.0))
    # With no launch alive (its launcher killed) no one trains the missing run: the running one only.
    assert unlaunched.eta_s == pytest.approx([r for r in unlaunched.runs if r.state == "running"][0].eta_s)
    assert unlaunched.eta_method.endswith("not counting 1 missing run, which only `scaling sweep launch` again trains")


def _last_step(metrics_csv: Path) -> int:
    """The step of metrics.csv's last row (0 where it has none yet)."""
    lines = metrics_csv.read_text().splitlines() if metrics_csv.exists() else []
    return int(lines[-1].split(",")[0]) if len(lines) > 1 else 0


def test_status_counts_a_stopped_runs_progress_from_its_checkpoint_not_the_steps_a_relaunch_trains_again(tmp_path):
    """A run SIGKILLed (a crash, a node lost) evaluations past its checkpoint left metrics.csv rows past it, which
    `sweep status` showed as its progress ("20%" where the checkpoint holds 15%) and its ETA counted as trained,
    though a relaunch cuts them (`scaling.train.back_to_checkpoint`) and trains those steps again. Status says both
    (`20% (15% kept)`, and a line naming the run), its ETA counts the checkpoint's progress, and the relaunch's cut
    leaves the run at the progress status said it keeps. A running run's progress is its own, as before. The CLI
    imports no torch."""
    from models import model_size
    from scaling.files import checkpoint_path, checkpoint_step
    from scaling.train import back_to_checkpoint
    from sweeps.launch import pending
    from sweeps.store import local_launch, status, write_json

    # 40 steps of 8 x 64 tokens, an evaluation every 2 and a checkpoint every 6
    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]", "grid.tokens=20480", "train.eval_interval=2",
                                     "train.eval_tokens=512", "train.checkpoint_interval=6",
                                     "executor.local.cpu_jobs=1"))  # (one slot: the runs' times add up)
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan
    done, running, killed = (sweep_dir / c.run_id for c in spec.runs())
    flops = 6 * model_size("nanochat", "0.5M").n_params * 20480
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0,
                                      "flops": flops, "wall_s": 10.0})
    config = tmp_path / "killed.json"
    config.write_text(spec.runs()[2].to_json())
    argv = ["train", "--config", str(config), "--out", str(killed), "--no-progress"]
    train = subprocess.Popen([sys.executable, "-m", "scaling.cli", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    try:
        while not (checkpoint_path(killed).exists() and _last_step(killed / "metrics.csv") >= 8):
            assert train.poll() is None, train.stderr.read()
            assert time.time() < deadline, "no checkpoint and step 8 within 300 s"
            time.sleep(0.02)
    finally:
        _stop(train)  # (SIGKILL: as a crash or a lost node stops it, with no checkpoint on the way out)
    step, logged = checkpoint_step(checkpoint_path(killed)), _last_step(killed / "metrics.csv")
    assert 0 < step < logged < 40, (step, logged)  # (6, and 8 or 10)
    got, kept = logged / 40, step / 40
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(running)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        with local_launch(sweep_dir):  # the killed run waits for this launch's slot: waiting, in the ETA
            st = status(sweep_dir)
        code = ("import sys; from scaling.cli import main; rc = main(sys.argv[1:]); "
                "sys.exit(3 if 'torch' in sys.modules else rc)")
        shown = subprocess.run([sys.executable, "-c", code, "sweep", "status", str(sweep_dir), "--runs"],
                               capture_output=True, text=True, timeout=120)
    finally:
        _stop(holder)
    rows = {r.run_id: (r.state, r.progress, r.progress_kept, r.progress_label()) for r in st.runs}
    assert rows[killed.name] == ("waiting", got, kept, f"{got:.0%} ({kept:.0%} kept)")
    assert rows[running.name] == ("running", None, None, "unknown")
    # left: all of the running run (no step of its own logged yet) and what the relaunch trains of the killed one, each
    # priced as the done run (which took 10 s), one slot (before: 1 - got of the killed one)
    assert st.eta_s == pytest.approx((1 + 1 - kept) * 10.0)
    assert shown.returncode == 0, (shown.returncode, shown.stderr[-2000:])  # (3: it imported torch)
    assert re.search(rf"{killed.name} .* missing .* {got:.0%} \({kept:.0%} kept\)", shown.stdout), shown.stdout
    assert (f"1 stopped run logged steps that a relaunch cuts and trains again: {killed.name} (at {got:.0%}, goes on "
            f"from its checkpoint's {kept:.0%})") in shown.stdout, shown.stdout
    # taken by a process (a relaunch's, in the seconds before its cut): its progress is that process's, as before
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(killed)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        (row,) = [r for r in status(sweep_dir).runs if r.run_id == killed.name]
    finally:
        _stop(holder)
    assert (row.state, row.progress, row.progress_kept, row.progress_label()) == ("running", got, None, f"{got:.0%}")
    back_to_checkpoint(killed)  # what the relaunch does first (`scaling train`'s resume)
    (row,) = [r for r in status(sweep_dir).runs if r.run_id == killed.name]
    assert (row.progress, row.progress_kept, row.progress_label()) == (kept, None, f"{kept:.0%}")


def test_status_says_a_stopped_run_with_no_checkpoint_starts_over_and_not_where_a_relaunch_refuses_it(tmp_path, capsys):
    """A run killed before its first checkpoint logged evaluations a relaunch discards (`scaling.train.start_over`):
    status says it keeps none of them (`50% (0% kept)`, "starts over"), and its ETA would count all of the run. A run
    whose checkpoint a relaunch refuses (damaged) gets no such word: its own line says to move the checkpoint away."""
    from scaling.files import checkpoint_path
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))  # 8 steps of 8 x 64 tokens
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan
    for c in spec.runs():
        write_json(sweep_dir / c.run_id / "job.json", {"executor": "local", "job_id": None})
        write_json(sweep_dir / c.run_id / "config.json", c.resolved().to_dict())
        (sweep_dir / c.run_id / "metrics.csv").write_text("step,tokens,val_loss,val_bpb\n4,2048,6.5,2.2\n")
    over, damaged = (sweep_dir / c.run_id for c in spec.runs())
    checkpoint_path(damaged).parent.mkdir()
    checkpoint_path(damaged).write_bytes(b"a checkpoint")
    rows = {r.run_id: r for r in status(sweep_dir).runs}
    assert (rows[over.name].state, rows[over.name].progress, rows[over.name].progress_kept) == ("failed", 0.5, 0.0)
    assert rows[over.name].progress_label() == "50% (0% kept)"
    assert (rows[damaged.name].checkpoint_damaged is not None, rows[damaged.name].progress_kept) == (True, None)
    assert rows[damaged.name].progress_label() == "50%"
    assert main(["sweep", "status", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert (f"\n1 stopped run logged steps that a relaunch cuts and trains again: {over.name} (at 50%, starts over: no "
            "checkpoint)\n") in out, out


def test_status_shows_a_stopped_runs_val_loss_at_its_checkpoint_not_of_the_evaluations_a_relaunch_cuts(tmp_path):
    """A stopped run's val_loss was its last logged evaluation's, though that evaluation was past its checkpoint: a
    relaunch cuts it (`scaling.train.back_to_checkpoint`), after which status read the checkpoint's. It is the last
    evaluation at or before the checkpoint's step, what the relaunch keeps (beside its progress's "(50% kept)"), and
    none for a run that starts over (no checkpoint); a run whose checkpoint a relaunch refuses keeps its last one."""
    from scaling.files import checkpoint_path
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",))  # 8 steps of 8 x 64 tokens
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)  # writes the plan
    rows = "step,tokens,val_loss,val_bpb\n2,1024,7.0,2.4\n4,2048,6.5,2.2\n6,3072,6.0,2.0\n"
    for c in spec.runs():
        write_json(sweep_dir / c.run_id / "job.json", {"executor": "local", "job_id": None})
        write_json(sweep_dir / c.run_id / "config.json", c.resolved().to_dict())
        (sweep_dir / c.run_id / "metrics.csv").write_text(rows)
    kept, over, damaged = (sweep_dir / c.run_id for c in spec.runs())
    write_checkpoint(kept, kept.name, step=5)  # (between two evaluations: step 4's is the last it holds)
    checkpoint_path(damaged).parent.mkdir()
    checkpoint_path(damaged).write_bytes(b"a checkpoint")
    st = {r.run_id: (r.progress_label(), r.val_loss) for r in status(sweep_dir).runs}
    assert st == {kept.name: ("75% (62% kept)", 6.5), over.name: ("75% (0% kept)", None), damaged.name: ("75%", 6.0)}


def test_a_running_runs_progress_is_its_lightning_logs_last_step_and_unknown_before_one(tmp_path, capsys):
    """A running run's progress was 0% until its first evaluation (metrics.csv's rows, an eighth of the run
    apart). It is the last step of its process's Lightning log (read from its end; a row half-written is
    not one), unknown before the log has a row, and not an earlier process's log (written before the
    lock was taken: its steps after its checkpoint are trained again), nor a failed run's."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=0",))  # 4096 tokens: 8 steps of 8 x 64 tokens
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    run = sweep_dir / spec.runs()[0].run_id
    write_json(run / "job.json", {"executor": "local", "job_id": None})
    write_json(run / "config.json", spec.runs()[0].to_dict())
    log = run / "lightning" / "version_1" / "metrics.csv"
    log.parent.mkdir(parents=True)
    (run / "lightning" / "version_0").mkdir()  # an older process's folder (a resume makes a new one)
    log.write_text("epoch,lr_mult,step,train_loss\r\n")
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        (row,) = status(sweep_dir).runs
        assert (row.state, row.progress, row.progress_label()) == ("running", None, "unknown")
        assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["runs"][0]["progress"] is None
        with open(log, "a") as f:  # thousands of rows (read from the end), and one half-appended
            f.write("0,1.0,0,8.3\r\n" * 3000 + "0,1.0,2,7.9\r\n0,1.0,5,7.")
        lock_written = (run / "lock").stat().st_mtime
        os.utime(log, (lock_written - 60, lock_written - 60))  # an earlier process's log: not this one's steps
        assert status(sweep_dir).runs[0].progress is None
        os.utime(log, (lock_written + 1, lock_written + 1))
        (row,) = status(sweep_dir).runs
        assert row.progress == 3 * 512 / 4096 and row.eta_s is not None  # steps 0-2 done: 3 of 8
        assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
        assert re.search(rf"{run.name}.*running\s*\S?\s*38%", capsys.readouterr().out)
    finally:
        p.kill()
        p.wait()
    (row,) = status(sweep_dir).runs  # killed: its steps since its last checkpoint are lost
    assert (row.state, row.progress) == ("failed", 0.0)


def test_status_reads_a_damaged_records_recipe_from_the_plan(tmp_path):
    """A result.json whose recipe is not text (edited by hand) is a failed run, and its row keeps the
    plan's recipe: a list there crashed the ETA (unhashable)."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    damaged = sweep_dir / spec.runs()[0].run_id
    damaged.mkdir()
    write_json(damaged / "result.json", {"run_id": damaged.name, "recipe": ["bf16"], "status": "completed"})
    st = status(sweep_dir)
    assert [r.recipe for r in st.runs] == ["bf16", "bf16"] and st.runs[0].state == "failed"


def test_eta_counts_a_requeued_job_from_the_time_slurm_holds_it_until():
    """A job requeued at its time limit (or by `scontrol requeue`, a preemption) waits ~2 minutes in the queue
    (BeginTime) before it starts again: the ETA read as if it started at once (0m58s, the job two minutes from its
    start). It ends no sooner than that start plus its time, and the line says when SLURM lets it start."""
    import time as clock

    from sweeps.store import RunStatus, _sweep_eta

    now = 1_000_000.0
    held = RunStatus("held", "nanochat", "0.5M", "bf16", 4096, 0, "queued", 0.5, None, None, "7", waiting="BeginTime",
                     begins=now + 100.0)  # fmt: skip
    prices = {"executor": "slurm", "bench": "cpu.json", "slots": 4, "startup_unpriced": 0, "seconds": {"held": 60.0}}
    eta, how = _sweep_eta([held], {}, prices, now)
    assert eta == pytest.approx(100.0 + 30.0)  # (half of its 60 s left, from its start)
    at = clock.strftime("%H:%M:%S", clock.localtime(now + 100.0))
    assert how.endswith(f"; 1 queued job held by SLURM until {at} (BeginTime: a requeued job waits ~2 minutes), "
                        "counted from then"), how
    # once that time has passed it is any queued job: counted from now, and not said
    eta, how = _sweep_eta([held], {}, prices, now + 200.0)
    assert eta == pytest.approx(30.0) and "BeginTime" not in how


def test_eta_leaves_out_jobs_held_in_the_queue_and_says_how_to_release_them():
    """A job held in the queue (`scontrol hold`: squeue's JobHeldUser, JobHeldAdmin) starts only once released: the
    ETA counted it as starting at once (0m05s for a sweep that never moved). Beside running runs it is left out and the
    line says so, with the command that releases it; alone, the ETA is unknown, and the line says why."""
    from sweeps.store import RunStatus, _sweep_eta, _waiting_note

    def row(name: str, state: str, job_id: str, waiting: str | None = None) -> RunStatus:
        return RunStatus(name, "nanochat", "0.5M", "bf16", 4096, 0, state, 0.0, None, None, job_id, waiting=waiting)

    prices = {"executor": "slurm", "bench": "cpu.json", "slots": 1, "startup_unpriced": 0,
              "seconds": {"a": 10.0, "b": 20.0}}
    held = row("b", "queued", "80_1", "JobHeldUser")
    eta, how = _sweep_eta([row("a", "running", "80_0"), held], {}, prices)
    assert eta == pytest.approx(10.0)
    assert how.endswith("; not counting 1 held job, which starts once `scontrol release 80_1` frees it"), how
    eta, how = _sweep_eta([held], {}, prices)
    assert eta is None and how == "none of the queued jobs can start until released", how
    assert _waiting_note([held]) == ("; SLURM holds the queued jobs for JobHeldUser (1): a held job starts once released "
                                     "(`scontrol release 80_1`)")


def test_eta_prices_each_recipe_at_what_its_done_runs_took_against_their_plan_price():
    """A remaining run is priced at its plan price (sweep.json's `prices`, in a slot's seconds) × what its recipe's done
    runs took against theirs: an nvfp4 run at nvfp4's ratio, not at a mean dragged down by bf16's; a recipe with none
    done at all recipes' ratio, and the method says which. Diverged runs (stopped early) are no measure."""
    from sweeps.store import RunStatus, _sweep_eta

    def row(name: str, recipe: str, state: str, progress: float = 0.0, eta_s: float | None = None) -> RunStatus:
        return RunStatus(name, "nanochat", "0.5M", recipe, 4096, 0, state, progress, None, eta_s, None)

    prices = {"executor": "local", "bench": "cpu.json", "slots": 1, "startup_unpriced": 0,
              "seconds": {"bf16-done": 5.0, "nvfp4-done": 10.0, "nvfp4-left": 10.0, "mxfp4-left": 10.0,
                          "bf16-diverged": 50.0, "bf16-failed": 5.0}}
    results = {name: {"status": "completed", "wall_s": wall_s}
               for name, wall_s in (("bf16-done", 10.0), ("nvfp4-done", 30.0), ("bf16-diverged", 1.0))}
    rows = [row("bf16-done", "bf16", "done", 1.0), row("nvfp4-done", "nvfp4", "done", 1.0),
            row("bf16-diverged", "bf16", "diverged", 1.0),
            row("nvfp4-left", "nvfp4", "running", 0.5), row("mxfp4-left", "mxfp4", "queued")]
    eta, how = _sweep_eta(rows, results, prices)
    # bf16 took 2x its price, nvfp4 3x: half an nvfp4 run (its own pace unknown yet) at 3x, a whole mxfp4 run at all
    # recipes' (10 + 30) / (5 + 10), one slot
    assert eta == pytest.approx(0.5 * 10.0 * 3.0 + 10.0 * 40.0 / 15.0)
    assert "(bf16 2.00×, nvfp4 3.00×; mxfp4 at all recipes' 2.67× until one of its runs is done)" in how, how
    # a failed run waits for a relaunch, not for a slot: it is left out of the time, and the line says so
    # (an ETA that counted it promised an end nothing would bring)
    eta_failed, how = _sweep_eta(rows + [row("bf16-failed", "bf16", "failed")], results, prices)
    assert eta_failed == pytest.approx(eta)
    assert how.endswith("not counting 1 failed run, which only `scaling sweep launch` again trains")
    # before any run is done: each at its plan price, a running one at its own pace where it has one; over the
    # launch's slots, longest first
    first = [row("nvfp4-a", "nvfp4", "running", 0.5, eta_s=15.0), row("nvfp4-b", "nvfp4", "waiting"),
             row("bf16-c", "bf16", "waiting")]
    two = {**prices, "slots": 2, "seconds": {"nvfp4-a": 10.0, "nvfp4-b": 10.0, "bf16-c": 8.0}}
    eta, how = _sweep_eta(first, {}, two)
    assert eta == pytest.approx(max(15.0, 10.0 + 8.0))  # (nvfp4-b and then bf16-c in the slot left free)
    assert how == ("each run at its price in the plan (cpu.json's rows, its start-up included), a running run at its "
                   "own pace, over the local launch's 2 slots, 2 runs waiting for the local launch's slots"), how
    # with no local launch alive (its launcher killed while its workers finish their runs) a run is missing: only a
    # relaunch trains it, as a failed one (the ETA promised its end)
    eta, how = _sweep_eta(first[:2] + [row("bf16-c", "bf16", "missing")], {}, two)
    assert eta == pytest.approx(15.0)
    assert how.endswith("not counting 1 missing run, which only `scaling sweep launch` again trains")
    # jobs SLURM holds for a request no node can meet (more CPUs than any has) never start: no time
    stuck = dataclasses.replace(row("mxfp4-left", "mxfp4", "queued"), waiting="PartitionConfig")
    assert _sweep_eta(rows[:2] + [stuck], results, prices) == (None, "none of the queued jobs can start")
    assert _sweep_eta(rows[:2] + [dataclasses.replace(stuck, waiting="Resources")], results, prices)[0] > 0
    # a sweep.json an older version's launch wrote prices no run: no time, and why
    assert _sweep_eta(first, {}, None) == (None, "unknown: sweep.json holds no price of its runs (an older version's "
                                                 "launch wrote it), 2 runs waiting for the local launch's slots")


def test_the_eta_lays_the_runs_out_in_the_order_a_local_launch_takes_them(tmp_path, monkeypatch):
    """The ETA laid the runs left out longest priced first while a local launch took them by 6·N·D: where a smaller
    model trains at far fewer tokens a second (its benchmark row's), its runs are the longest though they have fewer
    FLOPs, and the ETA described a launch that did not happen (here 1M, 1M, 0.5M over 3 slots, then the other 0.5M
    after a 1M). One order (`launch_order`): the launch's queue, and the ETA is when its last slot ends taking them so."""
    import sweeps.cost
    from sweeps.launch import LaunchReport, _LocalPool, pending
    from sweeps.store import local_launch, status

    folder = tmp_path / "bench"
    folder.mkdir()
    rows = [{"recipe": "bf16", "family": "nanochat", "size": size, "tokens_per_s": tokens_per_s,
             "cpu_ratio_vs_bf16": 1.0} for size, tokens_per_s in (("0.5M", 1000), ("1M", 10000))]
    machine = {"cpu": "Fake CPU 9000", "threads": 3, "date": "2026-12-07T23:26:19Z"}
    (folder / "cpu-fake.json").write_text(json.dumps({"cpu_machine": machine, "cpu": rows}))
    monkeypatch.setattr(sweeps.cost, "DEFAULT_CPU_BENCH", folder / "cpu.json")
    monkeypatch.setattr("scaling.cpu_name", lambda: "Fake CPU 9000")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # (the threads a local launch here shares: the file's)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU
    spec = load(tmp_path, TINY.replace('size = "0.5M"', 'size = ["0.5M", "1M"]').replace("cpu_jobs = 2", "cpu_jobs = 3"))
    sweep_dir = tmp_path / "sweep"
    todo, _ = pending(spec, sweep_dir, executor="local")
    pool = _LocalPool(spec, todo, sweep_dir, LaunchReport(str(sweep_dir), "local", len(todo)), progress=False)
    taken = [pool.work.get_nowait() for _ in todo]  # (the order its workers take them)
    prices = json.loads((sweep_dir / "sweep.json").read_text())["prices"]
    seconds = [prices["seconds"][c.run_id] for c in taken]
    assert prices["bench"] == "cpu-fake.json" and prices["slots"] == 3
    assert [c.size for c in taken] == ["0.5M", "0.5M", "1M", "1M"] and seconds[1] > 2 * seconds[2], seconds
    free = [0.0] * prices["slots"]
    for s in seconds:  # each run to the slot that frees first, in the order the launch takes them
        free[free.index(min(free))] += s
    with local_launch(sweep_dir):  # right after the launch: every run waits for a slot
        assert status(sweep_dir).eta_s == pytest.approx(max(free))


def test_status_prices_unfinished_runs_as_the_plan_does_then_by_what_done_runs_took(tmp_path, capsys):
    """Status priced the runs left by their FLOPs (6·N·D) at the FLOP/s of the running or finished runs: a run's
    evaluations and start-up, which do not grow with its tokens, were left out, and the demo's 24 runs (4,096 to 32,768
    tokens, each evaluated 8 times) read 1m04s at the start of a 4m12s sweep; right after the launch, no time at all.
    Each run is now priced as `sweep plan` prices it (its launch writes the prices into sweep.json: the plan's hours x
    the 2 slots sharing the CPU), laid out over the launch's slots, and once runs are done, scaled by what they took
    against their prices (start-up included)."""
    from sweeps.launch import pending
    from sweeps.store import local_launch, status, write_json

    text = TINY.replace("eval_interval = 4\n", "")  # (as the demo: about 8 evaluations a run, however long)
    spec_path = write_spec(tmp_path, text)
    spec = load(tmp_path, text, overrides=("grid.tokens=[4096, 32768]",))  # (seeds 0, 1: four runs; cpu_jobs 2)
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    assert main(["sweep", "plan", str(spec_path), "--set", "grid.tokens=[4096, 32768]", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    hours = {r["run_id"]: r["hours"] for r in plan["run_list"]}
    prices = json.loads((sweep_dir / "sweep.json").read_text())["prices"]
    assert prices["seconds"] == pytest.approx({run: h * 3600 * 2 for run, h in hours.items()})  # (2 slots: 2 x)
    short, long = sorted({round(v, 9) for v in prices["seconds"].values()})
    # (a 4,096-token run is priced at more than the eighth of a 32,768-token one its FLOPs are: its evaluations)
    assert short > long / 6
    with local_launch(sweep_dir):  # right after the launch: every run waits for its two slots
        first = status(sweep_dir)
    assert first.eta_s == pytest.approx(long + short), first.eta_method  # (long | long, then short | short)
    done = next(sweep_dir / c.run_id for c in spec.runs() if c.tokens == 32768)
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0,
                                      "wall_s": 3 * long})  # (it took 3 times its price)
    with local_launch(sweep_dir):
        then = status(sweep_dir)
    assert then.eta_s == pytest.approx(max(3 * long, 3 * short * 2)), then.eta_method  # (long | short, short)
    assert "× what its recipe's done runs took against theirs, start-up included (bf16 3.00×)" in then.eta_method


def test_a_local_launchs_line_per_run_says_the_time_left_as_status_does(tmp_path, capsys):
    """A local launch's line per finished run said the time it took and the time elapsed, not the time left, which
    only `sweep status` said: each line now ends with status's ETA (one computation for both), and with none where the
    plan could not price the runs."""
    from scaling.console import duration
    from sweeps.launch import LaunchReport, _LocalPool, pending
    from sweeps.store import local_launch, write_json

    text = TINY.replace("eval_interval = 4\n", "")
    spec = load(tmp_path, text, overrides=("grid.tokens=[4096, 32768]",))  # (seeds 0, 1: four runs; cpu_jobs 2)
    sweep_dir = tmp_path / "sweep"
    todo, _ = pending(spec, sweep_dir, executor="local")
    pool = _LocalPool(spec, todo, sweep_dir, LaunchReport(str(sweep_dir), "local", len(todo)), progress=True)
    pool.started = time.time() - 57
    prices = json.loads((sweep_dir / "sweep.json").read_text())["prices"]
    short, long = sorted({round(v, 9) for v in prices["seconds"].values()})
    first = todo[0]  # (longest first: a 32,768-token run)
    write_json(sweep_dir / first.run_id / "result.json", {"run_id": first.run_id, "recipe": "bf16",
                                                          "status": "completed", "val_loss": 5.0, "wall_s": 3 * long})
    with local_launch(sweep_dir):  # (the launch's own lock: the other three wait for its two slots)
        pool._finished(first, "done", None, 7.2)
    line = capsys.readouterr().out
    left = duration(max(3 * long, 3 * short * 2))  # (status's: long | short, short, at 3x their prices)
    assert re.search(rf"val_loss 5\.0000  \(7 s; 5[78] s elapsed, {left} left\)\n$", line), line
    # a plan that could not price its runs: no time rather than a guess
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    write_json(sweep_dir / "sweep.json", plan | {"prices": {"unpriced": "no benchmark row for nanochat 0.5M"}})
    with local_launch(sweep_dir):
        pool._finished(todo[1], "failed", None, 3.0)
    line = capsys.readouterr().out
    assert re.search(r"\(3 s; 5[78] s elapsed\)\n$", line), line


def test_a_local_launchs_time_left_reads_no_failed_runs_checkpoint_whole(tmp_path, monkeypatch, capsys):
    """The line per finished run reads status's ETA at every line: status reads each failed run's checkpoint whole
    (~0.3 s a GB), which a relaunch over failed runs of GB-sized checkpoints paid at every line. The launch's status
    checks only that each is an archive torch wrote; `sweep status`'s own still reads them whole."""
    import sweeps.store as store
    from sweeps.launch import LaunchReport, _LocalPool, pending

    spec = load(tmp_path, TINY)
    sweep_dir = tmp_path / "sweep"
    todo, _ = pending(spec, sweep_dir, executor="local")
    for c in todo:  # failed runs with a checkpoint each (a killed local launch's)
        (sweep_dir / c.run_id / "checkpoints").mkdir(parents=True)
        (sweep_dir / c.run_id / "checkpoints" / "last.ckpt").write_bytes(b"PK")
        (sweep_dir / c.run_id / "job.json").write_text(json.dumps({"executor": "local", "run_id": c.run_id}))
    read = []
    monkeypatch.setattr(store, "damaged_checkpoint", lambda d, contents=False: read.append(contents))
    pool = _LocalPool(spec, todo, sweep_dir, LaunchReport(str(sweep_dir), "local", len(todo)), progress=True)
    pool._finished(todo[0], "failed", None, 3.0)
    assert read and not any(read), read
    read.clear()
    store.status(sweep_dir)
    assert read and all(read), read


def test_makespan_ends_with_the_slot_that_ends_last():
    """The runs left laid out over the slots, longest first: a long run among short ones ends the sweep (their sum
    over the slots, as the ETA was, said 6 s for 10 s of one run beside two of 1 s)."""
    from sweeps.store import makespan

    assert makespan([], [1.0, 10.0, 1.0], 2) == 10.0
    assert makespan([4.0], [3.0, 3.0, 2.0], 2) == 6.0  # (a running 4 | 3, then 3 after that 3, then 2 after the 4)
    assert makespan([2.0, 2.0, 2.0], [1.0], 1) == 3.0  # (more running than slots: each holds one)


def test_raw_corpus_is_prepared_once_into_the_cache(tmp_path, monkeypatch):
    from scaling.data import read_meta
    from sweeps.launch import prepare_data

    monkeypatch.setenv("SCALING_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"doc{i}.txt").write_text(f"Document {i}. " + "The quick brown fox jumps over the lazy dog. " * 20)
    spec = load(tmp_path, overrides=(f"data='{corpus}'",))
    assert spec.corpus == str(corpus) and Path(spec.data).parent == tmp_path / "cache" / "data"
    prepare_data(spec, progress=False)
    assert read_meta(spec.data)["train_tokens"] > 0
    again = load(tmp_path, overrides=(f"data='{spec.data}'",))  # a prepared dir is used as is
    assert (again.corpus, again.data) == ("", spec.data)
    with pytest.raises(UserError, match="data: .*nowhere does not exist"):
        load(tmp_path, overrides=(f"data='{tmp_path / 'nowhere'}'",))


def test_plan_refuses_a_corpus_that_launch_would_refuse(tmp_path, capsys):
    """`sweep plan` priced a sweep whose data was an empty folder or a .csv, which `launch` then refused."""
    spec = write_spec(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "runs.csv").write_text("text\nhello\n")
    for data, said in ((tmp_path / "empty", "holds no .parquet, .jsonl(.gz), .ndjson(.gz) or .txt files"),
                       (tmp_path / "runs.csv", "unsupported file type")):
        assert main(["sweep", "plan", str(spec), "--data", str(data)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and err.count("\n") == 1, err


def test_a_refused_submission_names_the_setting_behind_it():
    from sweeps.launch import sbatch_refusal

    said = sbatch_refusal("Command 'sbatch' failed\nsbatch: error: Invalid --mem specification\n")
    assert said == ("sbatch refused the jobs: sbatch: error: Invalid --mem specification; check executor.slurm.mem "
                    "in the spec (or --set executor.slurm.mem=...)")
    assert "executor.slurm.gpus" in sbatch_refusal("sbatch: error: Invalid generic resource (gres) specification")
    assert "executor.slurm.constraint" in sbatch_refusal("sbatch: error: Batch job submission failed: Invalid feature specification")
    assert sbatch_refusal("sbatch: error: something else") == "sbatch refused the jobs: sbatch: error: something else"
    assert "executor.slurm.account" in sbatch_refusal("sbatch: error: Invalid account or account/partition combination specified")
    assert "executor.slurm.qos" in sbatch_refusal("sbatch: warning: --cpus-per-task ignored\nsbatch: error: Invalid qos specification")
    assert "executor.slurm.time" in sbatch_refusal("sbatch: error: Requested time limit is invalid (missing or exceeds some limit)")
    assert "executor.slurm.mem" in sbatch_refusal("sbatch: error: Memory specification can not be satisfied")
    # sbatch 23's words for too much memory: the setting is named a line before the last
    said = sbatch_refusal("sbatch: error: Memory specification can not be satisfied\n"
                          "sbatch: error: Batch job submission failed: Requested node configuration is not available")
    assert said.startswith("sbatch refused the jobs: sbatch: error: Memory specification can not be satisfied; sbatch: "
                           "error: Batch job submission failed: Requested node configuration is not available; check "
                           "executor.slurm.mem"), said
    # a warning's words name no setting of the refusal
    said = sbatch_refusal("sbatch: warning: --time ignored\nsbatch: error: Batch job submission failed: something")
    assert said == "sbatch refused the jobs: sbatch: error: Batch job submission failed: something"


def _started_run(sweep_dir: Path, config) -> Path:
    """A run folder as `scaling train` leaves it once started: its resolved config.json."""
    d = sweep_dir / config.run_id
    d.mkdir(parents=True)
    (d / "config.json").write_text(config.resolved().to_json())
    return d


def test_a_launch_refuses_a_spec_changed_since_the_sweeps_runs_started(tmp_path, capsys):
    """The spec's [train] edited between launches (seq_len 32, then 64): every grid point got a new run
    id, so the relaunch trained them all again beside the old ones and collect pooled both versions,
    unsaid. The launch stops before anything runs, naming the run, the setting and the ways out."""
    spec = write_spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    old = load(tmp_path, overrides=("train.seq_len=32",)).runs()[0]
    _started_run(sweep_dir, old)
    args = ["sweep", "launch", str(spec), "--executor", "local", "--sweep-dir", str(sweep_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"holds run {old.run_id}" in err and "seq_len 32 there, 64 here" in err and "--sweep-dir" in err, err
    assert not (sweep_dir / "sweep.json").exists() and len(list(sweep_dir.iterdir())) == 1  # nothing submitted
    # the same spec as before (--set back to seq_len 32) goes on: the run is its own
    assert main(["sweep", "plan", str(spec), "--set", "train.seq_len=32", "--json"]) == 0


def test_collect_refuses_two_versions_of_one_grid_point(tmp_path):
    """A sweep folder already holding runs of two versions of its spec (one grid point, two seq_lens):
    collect names both rather than give fits two losses for one point."""
    from sweeps.store import collect

    sweep_dir = tmp_path / "sweep"
    for overrides in ((), ("train.seq_len=32",)):
        c = load(tmp_path, overrides=("grid.seed=0",) + overrides).runs()[0]
        d = _started_run(sweep_dir, c)
        (d / "result.json").write_text(json.dumps({"run_id": c.run_id, "recipe": "bf16", "status": "completed",
                                                   "val_loss": 5.0}))
    with pytest.raises(UserError, match=r"runs \w+ and \w+ are one grid point \(nanochat 0.5M bf16 tokens=4096 seed=0"
                                        r"( lr_mult=1)?\) trained under different settings \(seq_len "):
        collect(sweep_dir)


def test_collect_writes_each_runs_recipe_formats_after_the_records_fields(tmp_path):
    """results.parquet carries forward_format and backward_format, appended after the record's fields: a preset's
    from its name, a custom recipe's from the recipe.toml copied into its run folder (the name alone says nothing),
    so `scaling fit --shared-efficiencies` can share efficiencies by format (fits.shared)."""
    from scaling.recipes import PRESETS, get_recipe
    from sweeps.store import RESULT_FIELDS, collect

    sweep_dir = tmp_path / "sweep"
    custom = tmp_path / "mine.toml"
    custom.write_text('name = "mxfp4_mine"\nbase = "mxfp4"\n[dgrad.dy]\nrounding = "sr"\n')
    for run_id, recipe, copy in (("r0", "mxfp4_sr", None), ("r1", "mxfp4_mine", custom), ("r2", "gone", None)):
        d = sweep_dir / run_id
        d.mkdir(parents=True)
        if copy is not None:
            (d / "recipe.toml").write_bytes(copy.read_bytes())
        (d / "result.json").write_text(json.dumps({"run_id": run_id, "recipe": recipe, "status": "completed",
                                                   "val_loss": 5.0, "extra_field": 1}))
    table = collect(sweep_dir).sort("run_id")
    assert table.columns == [*RESULT_FIELDS, "extra_field", "forward_format", "backward_format"]
    mine = get_recipe(str(custom))
    assert table["forward_format"].to_list() == [PRESETS["mxfp4_sr"].forward_format, mine.forward_format, None]
    assert table["backward_format"].to_list() == [PRESETS["mxfp4_sr"].backward_format, mine.backward_format, None]
    assert mine.forward_format == PRESETS["mxfp4"].forward_format  # shares mxfp4's effN, not its effD
    assert mine.backward_format not in (PRESETS["mxfp4"].backward_format, PRESETS["mxfp4_sr"].backward_format)


def test_collect_reads_each_recipe_file_once_not_once_a_run(tmp_path, monkeypatch):
    """The runs of one recipe file share its formats: collect parses the file once (it parsed every run's copy, the
    whole recipe checked again each time), and still gives every run its row's formats."""
    from scaling.recipes import Recipe
    from sweeps.store import collect

    parsed = []
    real = Recipe.from_toml.__func__
    monkeypatch.setattr(Recipe, "from_toml", classmethod(lambda cls, path: parsed.append(path) or real(cls, path)))
    text = 'name = "mxfp4_mine"\nbase = "mxfp4"\n[dgrad.dy]\nrounding = "sr"\n'
    for run_id in ("r0", "r1", "r2"):
        d = tmp_path / "sweep" / run_id
        d.mkdir(parents=True)
        (d / "recipe.toml").write_text(text)
        (d / "result.json").write_text(json.dumps({"run_id": run_id, "recipe": "mxfp4_mine", "status": "completed",
                                                   "val_loss": 5.0}))
    table = collect(tmp_path / "sweep")
    assert len(parsed) == 1
    assert table["forward_format"].to_list() == [real(Recipe, parsed[0]).forward_format] * 3


def test_collect_writes_equal_formats_for_recipes_keeping_the_same_bf16_blocks(tmp_path):
    """Two recipe files keeping the first and last of 10 blocks in BF16, one as [0, -1] and one as [9, 0], quantize
    the sweep's 0.5M models (10 blocks) alike: collect writes them equal formats, so a shared-efficiency fit gives them
    one effN and one effD (written as given, they were two formats each). Over 0.5M and 1M (5 blocks), [0, -1] keeps
    the last block of each, which no list of block numbers does: its formats say 0, -1."""
    from fits.shared import table_formats
    from sweeps.store import collect

    def run(sweep: str, run_id: str, name: str, blocks: str, size: str = "0.5M") -> None:
        d = tmp_path / sweep / run_id
        d.mkdir(parents=True)
        (d / "recipe.toml").write_text(f'name = "{name}"\nbase = "mxfp4"\nhigh_precision_blocks = {blocks}\n')
        (d / "result.json").write_text(json.dumps({"run_id": run_id, "recipe": name, "status": "completed",
                                                   "family": "nanochat", "size": size, "val_loss": 5.0}))

    run("one", "r0", "ends", "[0, -1]")
    run("one", "r1", "ends_too", "[9, 0]")
    formats = table_formats(collect(tmp_path / "one"))
    assert formats["ends"] == formats["ends_too"] and formats["ends"][0].endswith("(bf16 blocks 0, 9)"), formats
    run("two", "r0", "ends", "[0, -1]")
    run("two", "r1", "ends", "[0, -1]", size="1M")
    run("two", "r2", "first_and_4", "[0, 4]", size="1M")
    formats = table_formats(collect(tmp_path / "two"))
    assert formats["ends"][0].endswith("(bf16 blocks 0, -1)") and formats["first_and_4"][0].endswith("blocks 0, 4)")


def test_collect_says_which_runs_of_the_sweep_are_not_in_its_table(tmp_path, capsys):
    """collect of a sweep still running (or stopped part-way) writes the finished runs' rows, and says how
    many runs have no result yet and in which state, as `report` does: a table with 95 of 100 runs reads
    as the whole sweep otherwise, and `scaling fit` of it cannot tell."""
    from sweeps.launch import pending
    from sweeps.store import write_json

    spec, sweep_dir = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",)), tmp_path / "sweep"
    pending(spec, sweep_dir)
    done, failed, _ = (sweep_dir / c.run_id for c in spec.runs())
    done.mkdir()
    write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0})
    failed.mkdir()
    write_json(failed / "job.json", {"executor": "local", "job_id": None})
    assert main(["sweep", "collect", str(sweep_dir), "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 1
    assert "2 runs of the sweep have no result (1 failed, 1 missing): not in this table" in err, err
    assert main(["sweep", "collect", str(sweep_dir)]) == 0
    assert capsys.readouterr().err.rstrip().endswith("lists them; `scaling sweep launch` again trains or resumes them")
    write_json(failed / "result.json", {"run_id": failed.name, "recipe": "bf16", "status": "diverged", "val_loss": 9.0})
    assert main(["sweep", "collect", str(sweep_dir)]) == 0
    err = capsys.readouterr().err
    assert "1 run of the sweep has no result (1 missing)" in err
    # one run is "it", not "them"
    assert err.rstrip().endswith("lists it; `scaling sweep launch` again trains or resumes it"), err


def test_collect_and_report_of_a_sweep_with_no_finished_run_write_nothing_and_say_why(tmp_path, capsys):
    """collect of a sweep none of whose runs had finished wrote an empty results.parquet and exited 0, and
    `scaling fit` then refused the table (audit): collect and report write nothing and say, with exit 2, how many
    runs are in which state and what follows them."""
    from sweeps.launch import pending
    from sweeps.store import run_lock, slurm_submission, write_json

    spec, sweep_dir = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",)), tmp_path / "sweep"
    pending(spec, sweep_dir)
    queued, running, missing = (sweep_dir / c.run_id for c in spec.runs())
    queued.mkdir()
    write_json(queued / "job.json", {"executor": "slurm", "job_id": None})  # (queued while its launch's sbatch runs)
    with slurm_submission(sweep_dir), run_lock(running):
        before = {p.name for p in sweep_dir.iterdir()}
        for argv, action in ((["sweep", "collect", str(sweep_dir)], "collect"),
                             (["sweep", "collect", str(sweep_dir), "--json"], "collect"),
                             (["report", str(sweep_dir), "--out", str(tmp_path / "report")], "report")):
            assert main(argv) == 2
            out, err = capsys.readouterr()
            assert out == "" and err == (
                f"error: no run of {sweep_dir} has finished yet (1 missing, 1 queued, 1 running): nothing to {action}; "
                f"`scaling sweep status {sweep_dir}` follows them; `scaling sweep launch` again trains or resumes the 1 "
                "neither running nor queued\n"), err
    assert {p.name for p in sweep_dir.iterdir()} == before  # no results.parquet
    assert not (tmp_path / "report").exists()
    write_json(missing / "job.json", {"executor": "local", "job_id": None})  # none in flight: the runs listed
    assert main(["sweep", "collect", str(sweep_dir)]) == 2
    assert capsys.readouterr().err == (f"error: no run of {sweep_dir} has finished yet (2 failed, 1 missing): nothing to "
                                       f"collect; `scaling sweep status {sweep_dir} --runs` lists them; `scaling sweep "
                                       "launch` again trains or resumes them\n")


def test_collect_walks_the_run_folders_once(tmp_path, capsys, monkeypatch):
    """collect's note on the runs without a result counts the states collect's own walk found: it ran
    `status`, which read every run's records (and the plan) a second time and priced an ETA no one saw."""
    import sweeps.store as store

    spec, sweep_dir = load(tmp_path, overrides=("grid.seed=[0, 1, 2, 3]",)), tmp_path / "sweep"
    from sweeps.launch import pending

    pending(spec, sweep_dir)
    done, failed, running, _ = (sweep_dir / c.run_id for c in spec.runs())
    store.write_json(done / "result.json", {"run_id": done.name, "recipe": "bf16", "status": "completed", "val_loss": 5.0})
    store.write_json(failed / "job.json", {"executor": "local", "job_id": None})
    store.write_json(running / "job.json", {"executor": "local", "job_id": None})
    reads, read_json = [], store.read_json
    monkeypatch.setattr(store, "read_json", lambda path: reads.append(Path(path)) or read_json(path))
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(running)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        assert main(["sweep", "collect", str(sweep_dir)]) == 0
    finally:
        p.kill()
        p.wait()
    err = capsys.readouterr().err
    assert "3 runs of the sweep have no result (1 failed, 1 missing, 1 running): not in this table" in err
    # a running run needs no relaunch: the advice names the others
    assert err.rstrip().endswith("lists them; `scaling sweep launch` again trains or resumes the 2 neither running nor "
                                 "queued"), err
    assert reads and len(reads) == len(set(reads)), sorted(map(str, reads))  # each record read once


def test_status_does_not_say_launch_again_while_a_local_launch_lives(tmp_path, capsys):
    """Runs waiting for a local launch's slots (its workers still importing torch) read `missing`, and
    status said "nothing running or queued: `scaling sweep launch` again": a user who did so started a
    second launch. Each local launch holds the sweep's launch lock while it lives; status reads it."""
    from sweeps.launch import pending
    from sweeps.store import launching, local_launch, status

    spec, sweep_dir = load(tmp_path), tmp_path / "sweep"
    pending(spec, sweep_dir)
    assert not launching(sweep_dir) and status(sweep_dir).eta_method.startswith("nothing running or queued")
    with local_launch(sweep_dir), local_launch(sweep_dir):  # (two launches into one sweep may overlap)
        assert launching(sweep_dir)
        st = status(sweep_dir)  # (priced: the plan's price of each, over the launch's slots)
        assert st.eta_s > 0 and st.eta_method.endswith(", 2 runs waiting for the local launch's slots"), st.eta_method
        assert main(["sweep", "status", str(sweep_dir)]) == 0
        assert "launch` again" not in capsys.readouterr().out
    assert not launching(sweep_dir)  # dropped with the launch


def test_status_says_the_runs_a_live_local_launch_has_not_started_wait_for_its_slots(tmp_path, capsys):
    """While a local launch trained two runs, its 22 others read `missing` (never submitted) and the ETA line said
    nothing of them: the docs' "they wait for its free slots" came only while nothing ran. Such runs are `waiting`
    (the counts, --runs, --json, and `collect`'s count of runs without a result) and the ETA line says they wait for
    the launch's slots, never to launch again; with no launch alive they are missing, as before."""
    from sweeps.launch import pending
    from sweeps.store import collect_runs, local_launch, status

    spec, sweep_dir = load(tmp_path, overrides=("grid.seed=[0, 1, 2]",)), tmp_path / "sweep"
    pending(spec, sweep_dir)
    running, *others = (sweep_dir / c.run_id for c in spec.runs())
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(running)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        with local_launch(sweep_dir):
            st = status(sweep_dir)
            assert main(["sweep", "status", str(sweep_dir), "--runs"]) == 0
            out = capsys.readouterr().out
            assert main(["sweep", "status", str(sweep_dir), "--json"]) == 0
            shown = json.loads(capsys.readouterr().out)
            unfinished = collect_runs(sweep_dir).unfinished
        alone = status(sweep_dir)
    finally:
        _stop(holder)
    assert {k: v for k, v in st.counts.items() if v} == {"running": 1, "waiting": 2}
    assert {r.run_id: r.state for r in st.runs if r.run_id != running.name} == dict.fromkeys(
        (d.name for d in others), "waiting")
    assert "2 runs waiting for the local launch's slots" in st.eta_method, st.eta_method
    assert "launch` again" not in out and "│ missing" not in out, out  # (a run's row: none missing)
    assert re.search(r"│ waiting +│", out) and "ETA: " in out and "2 runs waiting for the local launch's slots" in out, out
    assert shown["counts"]["waiting"] == 2 and shown["counts"]["missing"] == 0
    assert sorted(r["state"] for r in shown["runs"]) == ["running", "waiting", "waiting"]
    assert sorted(r.state for r in unfinished) == ["running", "waiting", "waiting"]
    assert {k: v for k, v in alone.counts.items() if v} == {"running": 1, "missing": 2}  # (no launch: missing)


@pytest.mark.parametrize("content", [b"tokens,val_loss\n512,6.1\n\xff\xfe garbage", b"\0" * 64])
def test_status_and_the_run_lock_read_a_damaged_metrics_csv_as_no_progress(tmp_path, content):
    """A metrics.csv left undecodable (disk damage; NULs after a crash): status stopped with a
    UnicodeDecodeError traceback, and a relaunched job with it before training (its lock reads the
    curve's end), though train rewrites the file from its checkpoint. Both read it as no progress."""
    from sweeps.launch import pending
    from sweeps.store import run_lock, status, write_json

    spec = load(tmp_path, overrides=("grid.seed=0",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    run_dir = sweep_dir / spec.runs()[0].run_id
    write_json(run_dir / "job.json", {"executor": "local", "job_id": None})
    (run_dir / "metrics.csv").write_bytes(content)
    (row,) = status(sweep_dir).runs
    assert row.state == "failed" and row.progress == 0.0 and row.val_loss is None
    with run_lock(run_dir) as locked:
        assert locked


@pytest.mark.parametrize("job", [{"executor": "local", "config": [1]},
                                 {"executor": "local", "config": {"family": "nanochat", "size": "7Q", "tokens": "x",
                                                                  "seed": "y"}}])
def test_status_reads_a_run_folder_with_a_damaged_job_record(tmp_path, job):
    """A run folder outside the plan whose job.json is JSON but no job record (its config a list, or
    fields of the wrong kind): status stopped with an AttributeError or ValueError traceback. It lists
    the run as failed, its numbers unknown."""
    from sweeps.launch import pending
    from sweeps.store import status, write_json

    sweep_dir = tmp_path / "sweep"
    pending(load(tmp_path, overrides=("grid.seed=0",)), sweep_dir)
    write_json(sweep_dir / "0000extra" / "job.json", job)
    st = status(sweep_dir)
    assert [(r.run_id, r.state, r.tokens, r.seed) for r in st.runs][1:] == [("0000extra", "failed", 0, 0)]


def test_a_slurm_controller_that_is_down_is_named_in_scontrols_words(monkeypatch):
    """`scontrol show config` failing (the controller down) was said as Python's CalledProcessError
    ("Command '['scontrol', 'show', 'config']' returned non-zero exit status 1."); its own last line says why."""
    from sweeps import launch as launch_mod
    from sweeps.launch import max_array_size

    def down(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd, "", "slurm_load_ctl_conf error: Unable to contact slurm controller "
                                                        "(connect failure)\n")

    monkeypatch.setattr(launch_mod.subprocess, "run", down)
    with pytest.raises(UserError) as said:
        max_array_size()
    assert str(said.value) == ("--executor slurm: `scontrol show config` failed (slurm_load_ctl_conf error: Unable to "
                               "contact slurm controller (connect failure)); is the cluster up?")


def test_a_slurm_launch_without_sbatch_is_one_line_and_leaves_no_job_records(tmp_path, monkeypatch, capsys):
    """`launch --executor slurm` where sbatch (or srun) is not on PATH: one line naming the command, exit 2, and
    no run left with a job record (it read as failed). Before, sbatch's absence surfaced at submission as
    "cannot use sbatch (No such file or directory)" after every run's job.json was written, and srun's as
    submitit's RuntimeError traceback."""
    from scaling.cli import main

    tools = tmp_path / "bin"  # the other SLURM commands, where this machine has them
    tools.mkdir()
    for name in ("scontrol", "squeue", "sinfo", "srun"):
        if shutil.which(name):
            (tools / name).symlink_to(shutil.which(name))
    monkeypatch.setenv("PATH", str(tools))
    sweep_dir = tmp_path / "sweep"
    assert main(["sweep", "launch", str(write_spec(tmp_path)), "--executor", "slurm", "--sweep-dir", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --executor slurm: sbatch ") and "not found on PATH" in err and err.count("\n") == 1, err
    assert not list(sweep_dir.glob("*/job.json"))  # (status: the runs are missing, not failed)


def test_a_refused_submission_leaves_the_run_folders_as_they_were(tmp_path, monkeypatch):
    """A relaunch moves a failed run's result.json aside (result.failed-0.json) before sbatch; where sbatch then
    refused the jobs, only job.json was put back, so the run lost its record of failure. Refused, every run
    folder is left as it was."""
    import contextlib

    from submitit.core.utils import FailedJobError

    from sweeps import launch as launch_mod
    from sweeps.launch import LaunchReport, _launch_slurm, pending
    from sweeps.store import write_json

    spec = load(tmp_path)
    sweep_dir = tmp_path / "sweep"
    todo, _ = pending(spec, sweep_dir)
    failed = sweep_dir / todo[0].run_id
    write_json(failed / "job.json", {"executor": "slurm", "job_id": "5_0", "submitted": 1.0})
    write_json(failed / "result.json", {"run_id": failed.name, "status": "failed", "recipe": "bf16"})

    class Refused:  # sbatch says no when the batch is submitted, as submitit's executor raises it
        @contextlib.contextmanager
        def batch(self):
            yield
            raise FailedJobError("sbatch: error: Invalid account or account/partition combination specified")

        def submit(self, job):
            return None

    def files() -> dict:  # (the run folders' files)
        return {str(p.relative_to(sweep_dir)): p.read_bytes() for p in sweep_dir.glob("*/*") if p.is_file()}

    monkeypatch.setattr(launch_mod, "slurm_executor", lambda spec, folder: Refused())
    before = files()
    with pytest.raises(UserError, match="executor.slurm.account"):
        _launch_slurm(spec, todo, sweep_dir, LaunchReport(str(sweep_dir), "slurm", len(todo)), False, 10)
    assert files() == before


def test_squeue_is_asked_for_this_users_jobs_only(monkeypatch):
    """status asked squeue for every user's jobs: slow on a big cluster, and another user's job ids could be read
    as ours. It asks for the current user's (`--me`, SLURM 20.11 and later: Debian's 22.05 has it)."""
    import sweeps.store

    asked = []

    def squeue(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="7_0|PENDING|Priority\n7_1|RUNNING|None\n", stderr="")

    monkeypatch.setattr(sweeps.store.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sweeps.store.subprocess, "run", squeue)
    queue = sweeps.store.slurm_queue()
    assert "--me" in asked[0]
    assert queue == {"7_0": sweeps.store.QueuedJob("PENDING", "Priority"), "7_1": sweeps.store.QueuedJob("RUNNING")}


def test_a_run_being_submitted_reads_queued_not_failed(tmp_path, monkeypatch):
    """While sbatch was under way a run's job.json had no job id yet, and status read the run as failed (and a
    second launch would submit it again). The SLURM launcher holds the sweep's submission lock meanwhile: such
    a run reads queued; once the launcher is gone (killed mid-sbatch) it reads failed again."""
    import contextlib
    import types

    import sweeps.store
    from sweeps import launch as launch_mod
    from sweeps.launch import LaunchReport, _launch_slurm, pending
    from sweeps.store import run_state, slurm_submission

    monkeypatch.setattr(sweeps.store, "slurm_queue", lambda: {})  # (no cluster: the jobs are in no queue)
    spec = load(tmp_path, overrides=("grid.seed=0",))
    sweep_dir = tmp_path / "sweep"
    todo, _ = pending(spec, sweep_dir)
    run_dir = sweep_dir / todo[0].run_id
    seen = []

    class Submitting:
        @contextlib.contextmanager
        def batch(self):
            yield
            seen.append(run_state(run_dir, sweeps.store.slurm_queue()))  # sbatch under way

        def submit(self, job):
            return types.SimpleNamespace(job_id="9_0", paths=types.SimpleNamespace(stdout=tmp_path / "9_0_0_log.out"))

    monkeypatch.setattr(launch_mod, "slurm_executor", lambda spec, folder: Submitting())
    with slurm_submission(sweep_dir):  # (as `launch` holds it)
        _launch_slurm(spec, todo, sweep_dir, LaunchReport(str(sweep_dir), "slurm", 1), False, 10)
    assert seen == ["queued"]
    sweeps.store.write_json(run_dir / "job.json", {"executor": "slurm", "job_id": None})  # its launcher killed mid-sbatch
    assert run_state(run_dir, {}) == "failed"
    with slurm_submission(sweep_dir):  # a relaunch, under its own lock, submits it again
        assert [c.run_id for c in pending(spec, sweep_dir, submission=True)[0]] == [run_dir.name]


def test_a_relaunch_never_overwrites_an_earlier_failed_result(tmp_path):
    """The failed result a relaunch moves aside was numbered by how many result.failed-<n>.json there were: with
    result.failed-0.json removed, the next one replaced result.failed-1.json. It takes the number after the highest."""
    from sweeps.launch import _prepare
    from sweeps.store import write_json

    spec = load(tmp_path, overrides=("grid.seed=0",))
    (config,) = spec.runs()
    run_dir = tmp_path / config.run_id
    write_json(run_dir / "result.failed-1.json", {"first": True})
    write_json(run_dir / "result.json", {"run_id": run_dir.name, "status": "failed", "recipe": "bf16"})
    assert _prepare(run_dir, config, "local") == run_dir / "result.failed-2.json"
    assert json.loads((run_dir / "result.failed-1.json").read_text()) == {"first": True}


def test_a_local_launch_refuses_gpus_this_machine_lacks(tmp_path, monkeypatch):
    """executor.local.gpus = [3] on a machine without a GPU 3: each worker saw no GPU (CUDA_VISIBLE_DEVICES=3) and
    the whole sweep trained on CPU without a word. The launch stops first, naming the setting."""
    import sweeps.machine
    from sweeps.launch import launch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(sweeps.machine, "cuda_device_count", lambda: 2)  # a machine of two GPUs
    spec = load(tmp_path, overrides=("executor.local.gpus=[1, 3]",))
    with pytest.raises(UserError, match=r"executor.local.gpus: GPU 3 is not on this machine \(it has 2 GPUs"):
        launch(spec, executor="local", sweep_dir=tmp_path / "sweep", progress=False)
    assert not (tmp_path / "sweep" / "sweep.json").exists()


def _two_checkpointed_runs(tmp_path: Path, both_name_the_second: bool = False) -> tuple:
    """A pending two-run sweep (seeds 0 and 1), each run with a local job record and a checkpoint (both
    checkpoints naming the second run, where asked): (spec, sweep_dir, first run dir, second run dir)."""
    from sweeps.launch import pending
    from sweeps.store import write_json

    spec = load(tmp_path, overrides=("grid.seed=[0, 1]",))
    sweep_dir = tmp_path / "sweep"
    pending(spec, sweep_dir)
    first, second = (sweep_dir / c.run_id for c in spec.runs())
    for d in (first, second):
        write_json(d / "job.json", {"executor": "local", "job_id": None})
        if both_name_the_second:
            write_checkpoint(d, run_id=second.name)
        else:
            write_checkpoint(d)
    return spec, sweep_dir, first, second


def test_cpu_slots_split_the_launchs_thread_budget(tmp_path, monkeypatch):
    """Each CPU worker gets the launch's OMP_NUM_THREADS / cpu_jobs where the launch's environment sets it
    (a test runner's workers, or two launches, on one machine: every core to each would oversubscribe them,
    several-fold slower), else the usable cores / cpu_jobs; never below one thread."""
    from scaling import usable_cpus
    from sweeps.machine import local_slots

    write_spec(tmp_path)  # cpu_jobs = 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    slots = local_slots(load(tmp_path))
    assert [s["OMP_NUM_THREADS"] for s in slots] == ["3", "3"] and all(s["CUDA_VISIBLE_DEVICES"] == "" for s in slots)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert [s["OMP_NUM_THREADS"] for s in local_slots(load(tmp_path))] == ["1", "1"]
    for unset in ("", "auto"):  # not a count: the cores decide
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert local_slots(load(tmp_path))[0]["OMP_NUM_THREADS"] == str(max(1, usable_cpus() // 2))


# (CUDA_VISIBLE_DEVICES: this machine's GPUs, as a launch counts them; the plan's device; its slots: 2 a GPU, 3 a CPU)
@pytest.mark.parametrize("gpus, device, slots", [("", "cpu", 3), ("0,1", "gpu", 4), ("0,1", "cpu", 3), ("", "gpu", 2)])
def test_a_plan_counts_the_workers_a_local_launch_starts(tmp_path, monkeypatch, gpus, device, slots):
    """The plan counted a local launch's workers (each imports the trainer once, a start-up it prices) by a rule of
    its own beside the launch's slots: the count is the launch's, `local_slots` on the plan's device, no more than the
    runs; on a machine with no GPU, a plan priced on a GPU (`--device gpu`) counts one GPU's."""
    from sweeps.machine import local_slots
    from sweeps.plan import plan_processes

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    spec = load(tmp_path, TINY.replace("cpu_jobs = 2", "cpu_jobs = 3\njobs_per_gpu = 2"))
    assert len(local_slots(spec, device)) == slots
    for runs in (1, slots - 1, slots, slots + 5):
        assert plan_processes(spec, "local", device, runs) == min(runs, slots)
    assert plan_processes(spec, "slurm", device, 7) == 7  # (a SLURM job a run)
    launched = local_slots(spec)  # where a launch here trains: on its GPUs where it has any, else on its CPU
    assert len(launched) == (4 if gpus else 3)
    if bool(gpus) == (device == "gpu"):  # (the plan's device is the launch's: the very slots it starts)
        assert launched == local_slots(spec, device)


def test_a_launch_names_a_moved_corpus_as_the_runs_own(tmp_path, run_on_moved_corpus):
    """The spec's prepared data moved to another path: the relaunch was refused as "under other settings (data
    ... there, ... here)", as if the corpus had changed; it now says the data there are its runs' corpus, moved,
    and how to go on with them (the spec's old data path, or a link from it). Another corpus keeps the old words."""
    from sweeps.launch import check_same_spec

    before, moved = run_on_moved_corpus(
        tmp_path / "sweep", lambda corpus: load(tmp_path, TINY.replace('data = "builtin"', f'data = "{corpus}"')).runs()[0])
    (c, _) = load(tmp_path, TINY.replace('data = "builtin"', f'data = "{moved}"')).runs()
    with pytest.raises(UserError) as e:
        check_same_spec({c.run_id: c}, tmp_path / "sweep")
    assert f"holds 1 run of this spec trained on the data {before}, which {moved} holds too" in str(e.value), e.value
    assert f"set the spec's data back to {before}" in str(e.value) and f"ln -s {moved.resolve()} {before}" in str(e.value)
    meta = json.loads((moved / "meta.json").read_text())
    (moved / "meta.json").write_text(json.dumps({**meta, "val_docs": meta["val_docs"] + 1}))
    with pytest.raises(UserError, match="under other settings"):
        check_same_spec({c.run_id: c}, tmp_path / "sweep")


def test_the_run_a_study_walk_through_is_a_spec_that_plans(tmp_path):
    """docs/sweeps.md's "Run a study" spec is real: 16 runs, 8 points a recipe (a Chinchilla fit's fewest), on the
    built-in corpus; its commands are the verbs `scaling sweep` has."""
    from sweeps.spec import load_spec

    doc = (Path(__file__).resolve().parent.parent / "docs" / "sweeps.md").read_text()
    section = doc.split("## Run a study", 1)[1].split("\n## ", 1)[0]
    spec = tmp_path / "study.toml"
    spec.write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    runs = load_spec(spec, []).runs()
    assert len(runs) == 16 and {r.data for r in runs} == {"builtin"}
    assert sorted({r.recipe for r in runs}) == ["bf16", "nvfp4"]
    assert all(sum(r.recipe == recipe for r in runs) == 8 for recipe in ("bf16", "nvfp4"))
    commands = [line.split("#")[0].split() for line in section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()]
    assert [c[:3] for c in commands[:5]] == [["scaling", "sweep", v] for v in ("plan", "launch", "status", "launch",
                                                                                "collect")]
    assert [c[:2] for c in commands[5:]] == [["scaling", "fit"], ["scaling", "report"]]
