"""The SLURM launcher against a real cluster (CI starts a one-node one with .ci/slurm-up).

A tiny CPU sweep completes through submitit's SLURM executor; a second launch submits nothing;
a job requeued mid-run (`scontrol requeue`) resumes from its checkpoint and ends with the same
val_loss as the run that was never interrupted; arrays larger than MaxArraySize are split.
Skipped where there is no `sbatch` or no responsive node, except in CI (CI=true), where that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from scaling.files import checkpoint_path
from sweeps.store import read_json


def _cluster_problem() -> str | None:
    if shutil.which("sbatch") is None:
        return "sbatch not found (no SLURM client here; .ci/slurm-up starts a local cluster)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo failed: {e}"
    if not any(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states):
        return f"no responsive SLURM node (sinfo: {states or 'nothing'}); run .ci/slurm-up"
    return None


PROBLEM = _cluster_problem()
if PROBLEM and os.environ.get("CI") == "true":
    raise RuntimeError(f"CI must run the SLURM tests: {PROBLEM}")
# One worker takes every test of this file, in turn: they share the one-node cluster's two CPUs.
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or ""), pytest.mark.xdist_group("slurm")]

# The 0.5M model, 12288 tokens in 24 steps of 8×64; a checkpoint at every 4 steps. (The tests that stop a
# job do so at its first checkpoint: 20 steps before it ends, seconds, where the signal took under 1 s.)
SPEC = """
name = "slurm-tiny"
data = "builtin"
[grid]
size = "0.5M"
recipe = "bf16"
tokens = 12288
seed = [0, 1]
[train]
seq_len = 64
batch_size = 8
eval_tokens = 1024
eval_interval = 4
[executor.slurm]
time = "15:00"
gpus = 0
cpus = 1
"""
DEADLINE_S = 300


def load(tmp_path: Path, *overrides: str):
    from sweeps.spec import load_spec

    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(SPEC))
    return load_spec(path, list(overrides))


def job_state(job_id: str) -> str | None:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.split()
    return out[0] if out else None


def wait_for(what: str, ok, sweep_dir: Path, timeout: float = DEADLINE_S, every: float = 0.5):
    t0 = time.time()
    while not ok():
        if time.time() - t0 > timeout:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted((sweep_dir / ".submitit").glob("*log*")))
            pytest.fail(f"timed out after {timeout} s waiting for {what}\n{logs}")
        time.sleep(every)


def wait_done(sweep_dir: Path, run_ids: list[str]) -> None:
    wait_for(f"results of {run_ids}", lambda: all((sweep_dir / r / "result.json").exists() for r in run_ids), sweep_dir)


def launch_to_first_checkpoint(tmp_path: Path, *overrides: str):
    """(spec, sweep dir, run dir, job id) of the finished sweep's seed-0 run launched alone, once its
    first checkpoint is on disk (long before it ends)."""
    from sweeps.launch import launch

    spec = load(tmp_path, "grid.seed=0", *overrides)
    sweep_dir = tmp_path / "runs"
    (sub,) = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False).submitted
    run_dir = sweep_dir / sub["run_id"]
    wait_for("the first checkpoint", lambda: checkpoint_path(run_dir).exists(), sweep_dir, every=0.1)
    return spec, sweep_dir, run_dir, sub["job_id"]


def job_log(sweep_dir: Path, job_id: str) -> str:
    return "".join(p.read_text() for p in (sweep_dir / ".submitit").glob(f"{job_id}_*log*"))


def val_loss(run_dir: Path) -> float:
    return json.loads((run_dir / "result.json").read_text())["val_loss"]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """The two-run sweep, launched through SLURM and finished without interruption."""
    from sweeps.launch import launch

    tmp = tmp_path_factory.mktemp("slurm")
    spec = load(tmp)
    sweep_dir = tmp / "runs"
    # launched from a folder whose models/, sweeps/ and scaling/ are not ours: the jobs must not import them
    decoys = tmp / "elsewhere"
    for name in ("models", "sweeps", "scaling"):
        (decoys / name).mkdir(parents=True)
        (decoys / name / "__init__.py").write_text("raise SystemExit('imported from the launch folder')\n")
    t0 = time.time()
    here = os.getcwd()
    os.chdir(decoys)
    try:
        report = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False)
    finally:
        os.chdir(here)
    assert len(report.submitted) == 2 and report.skipped == {}
    wait_done(sweep_dir, [s["run_id"] for s in report.submitted])
    print(f"2-run SLURM sweep finished in {time.time() - t0:.1f} s")
    return spec, sweep_dir, report


def test_sweep_completes_on_slurm(finished_sweep):
    from sweeps.store import collect, status

    spec, sweep_dir, report = finished_sweep
    # One array of two tasks, recorded per run.
    array_ids = {s["job_id"].split("_")[0] for s in report.submitted}
    assert len(array_ids) == 1 and sorted(s["job_id"].split("_")[1] for s in report.submitted) == ["0", "1"]
    for s in report.submitted:
        assert read_json(sweep_dir / s["run_id"] / "job.json")["job_id"] == s["job_id"]
    st = status(sweep_dir)
    assert st.counts["done"] == 2 and sum(st.counts.values()) == 2
    df = collect(sweep_dir)
    assert df.height == 2 and set(df["status"]) == {"completed"} and sorted(df["seed"].to_list()) == [0, 1]
    assert df["val_loss"].is_finite().all()


def test_second_launch_submits_nothing(finished_sweep):
    from sweeps.launch import launch

    spec, sweep_dir, _ = finished_sweep
    def queued() -> set[str]:
        return set(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())

    before = queued()
    report = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False)
    assert report.submitted == [] and sorted(report.skipped) == ["done"] and len(report.skipped["done"]) == 2
    # No new job: the queue may only have shrunk (finished array tasks can still be leaving it).
    assert queued() <= before


def test_requeued_job_resumes_with_the_same_result(finished_sweep, tmp_path):
    from sweeps.launch import launch

    _, baseline_dir, _ = finished_sweep
    spec, sweep_dir, run_dir, job_id = launch_to_first_checkpoint(tmp_path)
    assert subprocess.run(["scontrol", "requeue", job_id]).returncode == 0
    assert not (run_dir / "result.json").exists(), "the run ended before the requeue: make it longer"
    # SLURM holds a requeued job back ~2 minutes (BeginTime); let it start at once.
    wait_for("the job to be pending again", lambda: job_state(job_id) == "PENDING", sweep_dir, every=0.2)
    # status reads when SLURM lets it start (squeue's %S), and its ETA counts from then
    from sweeps.store import status

    wait_for("squeue's BeginTime", lambda: status(sweep_dir).runs[0].begins is not None, sweep_dir, 20, 0.2)
    st = status(sweep_dir)
    assert st.runs[0].waiting == "BeginTime" and st.eta_s is not None and st.eta_s > st.runs[0].begins - time.time()
    # While it waits, a relaunch sees it queued and submits nothing.
    again = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False)
    assert again.submitted == [] and again.skipped == {"queued": [run_dir.name]}
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "starttime=now"], check=True)
    wait_done(sweep_dir, [run_dir.name])

    log = job_log(sweep_dir, job_id)
    assert "checkpoint saved at step" in log, log  # train saved on SIGTERM...
    assert "requeueing" in log, log  # ...handed over to submitit (RunJob.checkpoint)...
    assert "resuming from the checkpoint" in log, log  # ...and the requeued job resumed
    assert log.count("Starting with JobEnvironment") == 2, log
    assert json.loads((run_dir / "result.json").read_text())["status"] == "completed"
    assert val_loss(run_dir) == val_loss(baseline_dir / run_dir.name)



def test_a_cancelled_job_stays_cancelled_and_a_relaunch_resumes_it(finished_sweep, tmp_path):
    """`scancel` ends a run for good (the job does not requeue itself, as it does on a preemption or
    `scontrol requeue`); its checkpoint stays, and launching the sweep again resumes it to the
    uninterrupted run's result."""
    from sweeps.launch import launch

    _, baseline_dir, _ = finished_sweep
    spec, sweep_dir, run_dir, job_id = launch_to_first_checkpoint(tmp_path)
    assert subprocess.run(["scancel", job_id]).returncode == 0
    wait_for("the job to leave the queue", lambda: job_state(job_id) is None, sweep_dir, every=0.2)
    time.sleep(3)  # a requeued job would be back in the queue (PENDING, held ~2 minutes) by now
    assert job_state(job_id) is None and not (run_dir / "result.json").exists()
    log = job_log(sweep_dir, job_id)
    assert "checkpoint saved at step" in log and "is not requeued" in log, log
    assert "requeueing" not in log, log  # submitit's requeue path was not taken
    assert "Traceback" not in log, log  # one line says it (`RunJob.run`), not Preempted's traceback

    again = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False)
    assert [s["run_id"] for s in again.submitted] == [run_dir.name]
    wait_done(sweep_dir, [run_dir.name])
    assert val_loss(run_dir) == val_loss(baseline_dir / run_dir.name)
    log = job_log(sweep_dir, again.submitted[0]["job_id"])
    assert "resuming from the checkpoint" in log, log


def test_a_job_past_its_max_timeouts_says_so_in_one_line(tmp_path):
    """A time limit met once more than max_timeouts allows (USR1 sent by hand, as SLURM sends it before the limit):
    the job said nothing of it but submitit's two tracebacks, and `status` read the run as "killed, cancelled or
    crashed". One line of the job's log says it, with the way out, and status repeats it."""
    from sweeps.store import status

    _, sweep_dir, run_dir, job_id = launch_to_first_checkpoint(tmp_path, "executor.slurm.max_timeouts=0")
    assert subprocess.run(["scancel", "--signal=USR1", job_id]).returncode == 0
    wait_for("the job to leave the queue", lambda: job_state(job_id) is None, sweep_dir, every=0.2)
    log = job_log(sweep_dir, job_id)
    assert "Traceback" not in log and "checkpoint saved at step" in log, log
    (run,) = status(sweep_dir).runs
    assert run.state == "failed" and not (run_dir / "result.json").exists()
    assert run.error and run.error.startswith("the run met its time limit once more than executor.slurm.max_timeouts "
                                              "allows, so its job is not requeued (received SIGUSR1; checkpoint saved "
                                              "at step "), run.error
    assert run.error.endswith("give it a longer executor.slurm.time or a larger max_timeouts, and `scaling sweep "
                              "launch` again resumes the run"), run.error


def _urgent_partition() -> bool:
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()
    return "urgent" in out


def test_a_preempted_job_requeues_itself_and_resumes(finished_sweep, tmp_path):
    """Preemption (.ci/slurm-up: partition `urgent` preempts `debug` in CANCEL mode) also sends
    SIGTERM; the job tells it from a cancel (PreemptTime is set), requeues itself through submitit and
    resumes from its checkpoint to the uninterrupted run's result. Under a short time limit too, as a
    preemption, not a timeout: submitit took any signal after min(80% of the limit, the limit - 10 min) for a
    timeout, so under a limit of 10 minutes or less every preemption spent one of max_timeouts."""
    if not _urgent_partition():
        pytest.skip("no `urgent` partition to preempt with (a cluster not set up by .ci/slurm-up)")
    _, baseline_dir, _ = finished_sweep
    _, sweep_dir, run_dir, job_id = launch_to_first_checkpoint(tmp_path, "executor.slurm.time=5")
    cpus = os.cpu_count() or 1  # the whole node: the run's job must make way
    urgent = subprocess.run(["sbatch", "--parsable", "-p", "urgent", "-c", str(cpus), "-o", str(tmp_path / "urgent.out"),
                             "--wrap", "sleep 1"], capture_output=True, text=True, check=True).stdout.strip()
    wait_for("the preempted job to be pending again", lambda: job_state(job_id) == "PENDING", sweep_dir, every=0.2)
    assert not (run_dir / "result.json").exists(), "the run ended before the preemption: make it longer"
    wait_for("the urgent job to finish", lambda: job_state(urgent) is None, sweep_dir, every=0.2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "starttime=now"], check=True)  # skip the ~2 min hold
    wait_done(sweep_dir, [run_dir.name])

    log = job_log(sweep_dir, job_id)
    assert "DUE TO PREEMPTION" in log and "checkpoint saved at step" in log, log
    assert "is not requeued" not in log and "requeueing" in log, log  # submitit's requeue path
    assert "this job is preempted" in log and "(50 remaining timeouts)" in log, log  # no timeout spent
    assert "resuming from the checkpoint" in log, log
    assert val_loss(run_dir) == val_loss(baseline_dir / run_dir.name)

def test_demo_with_an_unreachable_controller_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """`demo --executor slurm` where the controller does not answer (slurmctld stopped, SLURM_CONF naming
    another host or port): one line, exit 2, before the data and the diagnostics. Before, only the commands
    were checked up front, and `scontrol show config` failed at the sweep, after the diagnostics were written."""
    import re

    import scaling.commands.demo as demo
    from scaling.cli import main

    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if not conf.is_file():
        pytest.skip(f"no slurm.conf at {conf} to copy")
    text = re.sub(r"^SlurmctldPort=.*\n", "", conf.read_text(), flags=re.M)
    (tmp_path / "slurm.conf").write_text(text + "SlurmctldPort=1\n")  # (nothing listens there)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.setattr(demo, "_diagnostics", lambda *a: pytest.fail("the demo ran the diagnostics"))
    monkeypatch.setattr("scaling.data.builtin_data_dir", lambda *a, **k: pytest.fail("the demo prepared the data"))
    t0 = time.time()
    assert main(["demo", "--executor", "slurm", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --executor slurm: the SLURM controller does not answer (`scontrol ping`: ")
    assert err.count("\n") == 1 and "is DOWN" in err, err
    assert not (tmp_path / "out").exists() and time.time() - t0 < 10


def test_arrays_are_split_above_max_array_size(tmp_path):
    from sweeps.launch import launch, max_array_size

    limit = max_array_size()
    if limit > 8:
        pytest.skip(f"MaxArraySize={limit}: this test wants the small limit of .ci/slurm-up")
    seeds = list(range(limit + 1))
    spec = load(tmp_path, f"grid.seed={seeds}", "executor.slurm.time=5")
    report = launch(spec, executor="slurm", sweep_dir=tmp_path / "runs", progress=False)
    try:
        ids = [s["job_id"] for s in report.submitted]
        assert len(ids) == limit + 1
        first = {i.split("_")[0] for i in ids[:limit]}
        assert len(first) == 1 and ids[limit].split("_")[0] not in first  # the last run: a second submission
    finally:
        subprocess.run(["scancel", *{i.split("_")[0] for i in ids}], check=False)


def test_a_launch_says_where_its_runs_go_and_how_to_follow_them(tmp_path, capsys):
    """`scaling sweep launch SPEC` puts the runs in runs/<name> under the working folder, yet said only
    "tiny: 16 runs; skipping none; slurm: 16 to run" and the job ids: where to point `sweep status` was left
    to guess. Its first line names the folder, and its last the status command."""
    from scaling.cli import main

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(textwrap.dedent(SPEC))
    sweep_dir = (tmp_path / "runs").resolve()
    assert main(["sweep", "launch", str(spec_path), "--executor", "slurm", "--sweep-dir", str(sweep_dir),
                 "--set", "grid.seed=0", "--set", "executor.slurm.time=5"]) == 0
    jobs = [read_json(d / "job.json")["job_id"] for d in sweep_dir.glob("*/") if (d / "job.json").exists()]
    subprocess.run(["scancel", *jobs], check=False)
    out = capsys.readouterr().out
    assert f"slurm-tiny: 1 run in {sweep_dir}; skipping none; slurm: 1 to run\n" in out, out
    assert out.endswith(f"`scaling sweep status {sweep_dir}` follows them\n"), out


def test_a_refused_submission_leaves_the_runs_as_they_were(tmp_path, capsys):
    """sbatch refuses an unknown partition: one error, exit 2, and no job record left behind that
    `status` would read as a failed run (the runs were never submitted: they stay missing)."""
    from scaling.cli import main
    from sweeps.store import status

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(textwrap.dedent(SPEC))
    sweep_dir = tmp_path / "runs"
    rc = main(["sweep", "launch", str(spec_path), "--executor", "slurm", "--sweep-dir", str(sweep_dir),
               "--set", 'executor.slurm.partition="no-such-partition"'])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    # one line: submitit's own print of sbatch's stderr is not said besides it
    assert err.startswith("error: sbatch refused the jobs") and err.count("\n") == 1, err
    assert "check executor.slurm.partition in the spec" in err and "this cluster's partitions: debug" in err
    assert not list(sweep_dir.glob("*/job.json"))
    assert {k: v for k, v in status(sweep_dir).counts.items() if v} == {"missing": 2}
    # more memory than the node has: sbatch names it a line before its last words, and the line names the key
    rc = main(["sweep", "launch", str(spec_path), "--executor", "slurm", "--sweep-dir", str(sweep_dir),
               "--set", 'executor.slurm.mem="999999G"'])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "check executor.slurm.mem in the spec" in err, err
    assert not list(sweep_dir.glob("*/job.json"))


def test_a_launch_stopped_while_sbatch_submits_records_the_jobs(tmp_path):
    """SIGTERM (or Ctrl-C) to a launch while sbatch is submitting: sbatch goes on and submits, so the launch waits
    for its answer and records the job ids before it stops (exit 130). Before, the runs kept job records with no
    id, which status read as failed ("launch again") while their jobs were queued, and a relaunch submitted them
    twice."""
    import sys

    from sweeps.store import status

    slow = tmp_path / "bin"  # an sbatch that takes a few seconds to answer, as a busy controller's does
    slow.mkdir()
    (slow / "sbatch").write_text(f"#!/bin/sh\nsleep 3\nexec {shutil.which('sbatch')} \"$@\"\n")
    (slow / "sbatch").chmod(0o755)
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(textwrap.dedent(SPEC))
    sweep_dir = tmp_path / "runs"
    env = {**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"}
    p = subprocess.Popen([sys.executable, "-m", "scaling.cli", "sweep", "launch", str(spec_path), "--executor", "slurm",
                          "--sweep-dir", str(sweep_dir), "--set", 'name="slurm-stopped"'],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        # the job records are written just before sbatch is called
        wait_for("the launch to call sbatch", lambda: len(list(sweep_dir.glob("*/job.json"))) == 2, sweep_dir, 60, 0.1)
        time.sleep(1)
        p.terminate()
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 130, out
        jobs = [read_json(d)["job_id"] for d in sweep_dir.glob("*/job.json")]
        assert all(jobs), (jobs, out)
        assert {r.state for r in status(sweep_dir).runs} <= {"queued", "running", "done"}
    finally:  # (by the sweep's name: jobs whose ids went unrecorded too)
        if p.poll() is None:
            p.kill()
        subprocess.run(["scancel", "--name", "slurm-stopped"], check=False)


def test_two_launches_at_once_submit_each_run_once(tmp_path):
    """A second SLURM launch into a sweep folder while the first still submits waits for it, then finds every run
    queued. Before, the runs of the arrays the first had not reached yet (no job record) read missing to the
    second, and both submitted them."""
    import sys

    from sweeps.launch import launch, max_array_size

    limit = max_array_size()
    if limit > 8:
        pytest.skip(f"MaxArraySize={limit}: this test wants the small limit of .ci/slurm-up")
    slow = tmp_path / "bin"  # the first launch's sbatch takes a few seconds to answer, as a busy controller's does
    slow.mkdir()
    (slow / "sbatch").write_text(f"#!/bin/sh\nsleep 3\nexec {shutil.which('sbatch')} \"$@\"\n")
    (slow / "sbatch").chmod(0o755)
    # two arrays; more CPUs than the node has, so that the jobs wait in the queue and never run
    sets = [f"grid.seed={list(range(limit + 1))}", "executor.slurm.cpus=999", 'name="slurm-twice"']
    spec = load(tmp_path, *sets)
    sweep_dir = tmp_path / "runs"
    first = subprocess.Popen([sys.executable, "-m", "scaling.cli", "sweep", "launch", str(tmp_path / "spec.toml"),
                              "--executor", "slurm", "--sweep-dir", str(sweep_dir), *(x for s in sets for x in ("--set", s))],
                             env={**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_for("the first array's sbatch", lambda: len(list(sweep_dir.glob("*/job.json"))) == limit, sweep_dir, 60, 0.1)
        second = launch(spec, executor="slurm", sweep_dir=sweep_dir, progress=False)
        out, _ = first.communicate(timeout=60)
        assert first.returncode == 0, out
        assert second.submitted == [] and len(second.skipped["queued"]) == limit + 1, second
        names = subprocess.run(["squeue", "--me", "-h", "-r", "-n", "slurm-twice", "-o", "%i"], capture_output=True,
                               text=True).stdout.split()  # fmt: skip
        assert len(names) == limit + 1, names
    finally:
        if first.poll() is None:
            first.kill()
        subprocess.run(["scancel", "--name", "slurm-twice"], check=False)


def test_status_says_why_slurm_holds_jobs_that_can_never_start(tmp_path):
    """More CPUs than any node has: sbatch takes the jobs and they wait forever; status names squeue's
    reason and the way out instead of an ETA of 'unknown'."""
    from sweeps.launch import launch
    from sweeps.store import status

    spec = load(tmp_path, "executor.slurm.cpus=999")
    report = launch(spec, executor="slurm", sweep_dir=tmp_path / "runs", progress=False)
    ids = {s["job_id"].split("_")[0] for s in report.submitted}
    try:
        deadline = time.time() + 30
        while True:
            st = status(tmp_path / "runs")
            if all(r.waiting for r in st.runs) or time.time() > deadline:
                break
            time.sleep(0.5)
        assert {r.state for r in st.runs} == {"queued"} and {r.waiting for r in st.runs} == {"PartitionConfig"}
        assert "SLURM holds the queued jobs for PartitionConfig (2)" in st.eta_method
        assert "scancel its jobs and launch again with other executor.slurm settings" in st.eta_method
    finally:
        subprocess.run(["scancel", *ids], check=False)
