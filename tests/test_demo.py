"""scaling demo: the shipped demo spec can be fitted, and the command's mistakes are one-line errors.

The demo itself (minutes of training) is measured, not tested: `time scaling demo` (docs/reports.md).
"""

from __future__ import annotations

from collections import Counter

import pytest

from scaling.commands.demo import demo_spec_path


def test_demo_spec_is_small_and_fittable():
    """bf16 and 2-3 FP4 recipes, ≥ 2 sizes and ≥ 2 token budgets per size, and enough runs per recipe
    for a Chinchilla fit (5 parameters: fits needs 8 points from ≥ 3 runs, ≥ 2 distinct N and D)."""
    from sweeps.spec import load_spec

    spec = load_spec(demo_spec_path())
    assert spec.data == "builtin"
    assert "bf16" in spec.recipe and 2 <= len(set(spec.recipe) - {"bf16"}) <= 3
    runs = spec.points()
    per_recipe = Counter(r["recipe"] for r in runs)
    assert min(per_recipe.values()) >= 8, per_recipe
    for recipe in spec.recipe:
        mine = [r for r in runs if r["recipe"] == recipe]
        assert len({r["size"] for r in mine}) >= 2
        for size in {r["size"] for r in mine}:
            assert len({r["tokens"] for r in mine if r["size"] == size}) >= 2


def test_demo_reports_a_bad_spec_in_one_line(tmp_path, capsys):
    from scaling.cli import main

    assert main(["demo", "--spec", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.toml" in err and "Traceback" not in err


def test_demo_and_launch_refuse_a_run_folder(tmp_path, capsys):
    """A run's folder (`scaling train --out DIR`: its config.json) is not a sweep's: the demo and a
    launch into it are refused before writing anything there."""
    from scaling.cli import main

    run_dir = tmp_path / "one-run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text('{"family": "nanochat"}')
    assert main(["demo", "--out", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "is a single run's folder" in err and "Traceback" not in err, err
    assert main(["sweep", "launch", str(demo_spec_path()), "--executor", "local", "--sweep-dir", str(run_dir)]) == 2
    assert "is a single run's folder" in capsys.readouterr().err
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


def test_demo_refuses_files_of_its_names_in_out_before_any_work(tmp_path, capsys):
    """A diagnostics.json that is not JSON and a results.parquet that is not Parquet in --out were
    replaced without a word, and a report/ holding a user's report.md was refused only after the
    sweep's minutes: each is refused before anything runs or is written, and left as it was."""
    from scaling.cli import main

    cases = {"diagnostics.json": "my notes\n", "results.parquet": "a,b\n1,2\n", "report/report.md": "# mine\n"}
    for name, text in cases.items():
        out = tmp_path / name.replace("/", "_")
        (out / name).parent.mkdir(parents=True)
        (out / name).write_text(text)
        assert main(["demo", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --out ") and name.split("/")[-1] in err and "Traceback" not in err, err
        assert (out / name).read_text() == text
        assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [name]


def test_demo_stopped_by_sigterm_outside_the_sweep_says_so_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    """SIGTERM before the sweep (data, diagnostics) or after it (the report) killed the demo by its
    default action, exit 143 and not a word; it now stops as Ctrl-C does, with the way to go on."""
    import os
    import signal

    import scaling.commands.demo as demo
    from scaling.cli import main

    class Killed(Exception):  # stands for SIGTERM's default action (which would end pytest's process)
        pass

    def killed(signum, frame):
        raise Killed

    monkeypatch.setattr(demo, "_device", lambda: os.kill(os.getpid(), signal.SIGTERM) or "CPU")
    before = signal.signal(signal.SIGTERM, killed)
    try:
        assert main(["demo", "--out", str(tmp_path / "out")]) == 130
        assert signal.getsignal(signal.SIGTERM) is killed  # (the handler from before the demo is back)
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert "interrupted" in err and "run the same command again" in err and "Traceback" not in err


def test_demo_on_slurm_without_its_commands_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """--executor slurm on a machine without sbatch/srun was refused only at the sweep, after the corpus
    and the diagnostics (and with a diagnostics.json left in --out)."""
    import sweeps.launch
    import scaling.commands.demo as demo
    from scaling.cli import main

    monkeypatch.setattr(sweeps.launch.shutil, "which", lambda name: None)
    monkeypatch.setattr(demo, "_diagnostics", lambda *a: pytest.fail("the demo ran the diagnostics"))
    monkeypatch.setattr("scaling.data.builtin_data_dir", lambda *a, **k: pytest.fail("the demo prepared the data"))
    assert main(["demo", "--executor", "slurm", "--out", str(tmp_path / "out")]) == 2
    assert "sbatch and srun not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_demo_on_slurm_with_json_prints_what_it_submitted(tmp_path, capsys, monkeypatch):
    """`demo --executor slurm --json` returns once the runs are submitted: it printed nothing on stdout (a script
    reading its JSON met none). It prints the launch report, its timings and the command to run once all is done."""
    import json

    import sweeps.launch
    import scaling.commands.demo as demo
    from scaling.cli import main

    out = tmp_path / "out"
    report = sweeps.launch.LaunchReport(str(out), "slurm", 1, submitted=[{"run_id": "abc", "job_id": "7_0"}])
    monkeypatch.setattr(sweeps.launch, "check_slurm_client", lambda: None)
    monkeypatch.setattr(sweeps.launch, "launch", lambda spec, **kwargs: report)
    monkeypatch.setattr(demo, "_diagnostics", lambda spec, out: out / "diagnostics.json")
    assert main(["demo", "--executor", "slurm", "--out", str(out), "--json", "--set", 'grid.size="0.5M"']) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["launch"]["submitted"] == [{"run_id": "abc", "job_id": "7_0"}]
    assert summary["then"] == f"scaling report {out} --out {out / 'report'}" and summary["timings"]["sweep_s"] >= 0
