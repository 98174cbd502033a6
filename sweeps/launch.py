"""Launch a sweep: skip finished runs, submit the rest on SLURM (submitit job arrays) or run them here.

One run = one job = ``RunJob(config, run_dir)``. The job takes the run's lock first, so one config
never trains twice at once, however often the sweep is relaunched; then it calls
``scaling.train.train(config, run_dir)``, which resumes from the run's last checkpoint and returns
the stored result if the run already finished.

SLURM: arrays are split to fit the cluster's MaxArraySize. Before a timeout SLURM sends USR1
(``--signal``), on preemption SIGTERM: train() checkpoints at the end of the step and raises
``Preempted``; the job then takes submitit's own path (its USR2 handler): ``RunJob.checkpoint()``
resubmits the same run and submitit requeues the job, which resumes from the checkpoint. A
``scancel`` (SIGTERM too) is told apart (``_sigterm_cause``) and not requeued: the job says so in one line and
exits 75, with no traceback; a relaunch resumes the run.
Lightning's own SLURM auto-requeue is off in train (it runs with ``LightningEnvironment``), so
only submitit requeues.

Local: long-lived worker processes (``WORKER_COMMAND``, as ``python -m sweeps.launch --worker``) over the visible GPUs,
``jobs_per_gpu`` per GPU, or ``cpu_jobs`` at once on CPU with the cores split between them (the slots this machine
offers, ``sweeps.machine.local_slots``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue as queue_mod
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import submitit

from sweeps.machine import check_local_gpus, local_slots
from sweeps.plan import launch_prices
from sweeps.spec import SweepSpec, default_sweep_dir
from sweeps.store import (RESULT_STATES, damaged_checkpoint, grid_point, launch_order, local_launch, lock_holder,
                          misnamed_error, own_name_of, point_label, read_json, read_result, recipe_label, run_dirs,
                          run_lock, run_state, setting_differences, slurm_queue_for, slurm_submission, status,
                          write_json)
from scaling import signals
from scaling.signals import interrupt_on_sigterm
from scaling.cli import python_command
from scaling.console import count, duration
from scaling.errors import UserError
from scaling.files import SPACE_ERRORS, check_output, checkpoint_of_another_run, checkpoint_path


@dataclass
class LaunchReport:
    sweep_dir: str
    executor: str
    total: int
    skipped: dict[str, list[str]] = field(default_factory=dict)  # state -> run ids left alone
    submitted: list[dict] = field(default_factory=list)  # {run_id, job_id}
    finished: dict[str, int] = field(default_factory=dict)  # final state -> count (local; slurm with --wait)
    elsewhere: list[str] = field(default_factory=list)  # local: run ids another process trained, waited for
    interrupted: bool = False  # Ctrl-C or SIGTERM stopped the launch (LaunchInterrupted)


class LaunchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a launch, carrying what the launch had done by then (its report)."""

    def __init__(self, report: LaunchReport):
        super().__init__()
        self.report = report


# ---------------------------------------------------------------------------------------------
# The job


class RunJob(submitit.helpers.Checkpointable):
    """Train one run under its lock. Picklable: SLURM jobs carry it; local workers rebuild it."""

    def __init__(self, config, run_dir: str | Path):
        self.config = config  # a scaling.config.RunConfig
        self.run_dir = str(run_dir)

    def __call__(self) -> dict:
        """The job's entry (submitit's, on SLURM): `run`, with a UserError said in one line and the job failed
        with the CLI's exit status, 2. Raised on, submitit logs the error's whole traceback, then re-raises it."""
        # SLURM's warning or a preemption's SIGTERM may come while `run` imports torch and Lightning, before train
        # handles them: recorded, as `scaling train` does, so train stops before its first step and the job requeues
        # (submitit's own SIGTERM handler only logged it: the job trained on until SLURM killed it, not requeued)
        signals.record_early((signal.SIGUSR1, signal.SIGTERM))
        try:
            return self.run()
        except UserError as e:  # (a damaged checkpoint, another corpus): as `scaling train` says it
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None  # (no Exception: submitit's handler lets it by, and the process exits 2)

    def run(self, record: str | None = None) -> dict:
        """Train the run under its lock (a local worker's entry: it says a UserError itself, and goes on).
        `record`: the executor whose job record (job.json, `_prepare`) to write once the lock is held: a
        local worker's, so that no moment finds the record without the lock (`failed` to `sweep status`)."""
        from scaling.train import PREEMPTED_EXIT_CODE, Preempted, train

        with run_lock(Path(self.run_dir)) as locked:
            if not locked:
                print(f"{self.run_dir} is being trained by another job; leaving it", flush=True)
                return {"run_id": Path(self.run_dir).name, "status": "skipped"}
            if record:
                _prepare(Path(self.run_dir), self.config, record)
            try:
                # progress as a line a minute in the job's log (its stderr is a file: `tail -f` follows a run)
                return train(self.config, Path(self.run_dir), progress=True)
            except Preempted as e:
                slurm = os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
                cause = _stop_cause(e.signum) if slurm else None
                if cause == "cancelled":
                    # the end of this job, said in one line (its log's stderr): a Preempted raised on went to
                    # submitit, which logged its whole traceback. A SystemExit, as for a UserError: submitit's
                    # handler lets it by; scancel is SLURM's record of the job's end (CANCELLED)
                    print(f"cancelled (scancel): {e}; the job is not requeued, and `scaling sweep launch` with the "
                          "same spec resumes the run", file=sys.stderr, flush=True)
                    raise SystemExit(PREEMPTED_EXIT_CODE) from None
                print(f"{e}", flush=True)
                if slurm:  # a preemption, a time limit's USR1, `scontrol requeue`: submitit's requeue path
                    try:
                        _requeue_through_submitit(timed_out=cause == "timeout")
                    except submitit.core.utils.UncompletedJobError as why:
                        if "timed-out too many times" not in str(why):
                            raise
                        # max_timeouts spent: said in one line that `sweep status` repeats, where submitit logged two
                        # tracebacks and status read the run as "killed, cancelled or crashed"
                        print(f"error: the run met its time limit once more than executor.slurm.max_timeouts allows, so "
                              f"its job is not requeued ({e}); give it a longer executor.slurm.time or a larger "
                              "max_timeouts, and `scaling sweep launch` again resumes the run", file=sys.stderr, flush=True)
                        raise SystemExit(PREEMPTED_EXIT_CODE) from None
                raise

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        # Timeout or preemption: resubmit the same run; train() resumes from its last checkpoint.
        print(f"requeueing {self.run_dir}", flush=True)
        return submitit.helpers.DelayedSubmission(RunJob(self.config, self.run_dir))


def _stop_cause(signum: int) -> str:
    """Why SLURM stopped this job: "timeout" for USR1 (sent signal_delay_s before the time limit), else why its
    SIGTERM came (`_sigterm_cause`)."""
    return "timeout" if signum == signal.SIGUSR1 else _sigterm_cause()


def _sigterm_cause() -> str:
    """Why SLURM's SIGTERM came: "cancelled" (`scancel`: the job ends for good), "requeued" (`scontrol requeue`,
    a preemption) or "timeout" (the time limit, reached before the USR1 ahead of it was acted on). While a job
    handles SIGTERM, `scontrol show job` reads COMPLETING either way; what differs is that a requeue has already
    counted a restart beyond the one this job started as, a preemption sets PreemptTime, and a time limit ends
    the job at StartTime + TimeLimit. Where scontrol cannot tell, "requeued" (the job is requeued, as before)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return "requeued"
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "requeued"
    fields = _own_record(out.stdout, job)
    if out.returncode != 0 or not fields.get("Restarts", "").isdigit():
        return "requeued"
    requeued = int(fields["Restarts"]) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    preempted = fields.get("PreemptTime", "None") not in ("None", "Unknown")
    if requeued or preempted:
        return "requeued"
    return "timeout" if _at_time_limit(fields) else "cancelled"


def _own_record(scontrol_out: str, job: str) -> dict[str, str]:
    """This job's fields in `scontrol show job -o JOB`'s output. The job that carries an array's
    id (its last task) is shown with every other task of the array, one line each: reading them
    all as one record took another task's Restarts and times (a requeue read as a cancel)."""
    for line in scontrol_out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("JobId") == job:
            return fields
    return {}


def _at_time_limit(fields: dict[str, str]) -> bool:
    """Whether `scontrol show job`'s fields put the job's end at its time limit (within 10 s); True
    where the times cannot be read (then the job is not taken for cancelled)."""
    from datetime import datetime

    limit = fields.get("TimeLimit", "UNLIMITED")
    if limit in ("UNLIMITED", "Partition_Limit"):
        return False
    try:
        days, _, clock = limit.rpartition("-")
        parts = [int(x) for x in clock.split(":")]
        seconds = int(days or 0) * 86400 + sum(v * 60 ** i for i, v in enumerate(reversed(parts)))
        ran = datetime.fromisoformat(fields["EndTime"]) - datetime.fromisoformat(fields["StartTime"])
    except (KeyError, ValueError):
        return True
    return ran.total_seconds() >= seconds - 10


def _requeue_through_submitit(timed_out: bool) -> None:
    """After train saved a checkpoint on SLURM's signal: submitit's own preemption path, i.e.
    RunJob.checkpoint() → the same run stored for the requeued job → `scontrol requeue` → exit.
    `timed_out`: the job met its time limit (`_stop_cause`), which submitit counts against max_timeouts, rather
    than a preemption or `scontrol requeue` (free). submitit's handler guesses it from the job's wall time (a
    signal after min(80% of the limit, the limit - 10 min) is a timeout): under a limit of 10 minutes or less
    every preemption spent a timeout, and with signal_delay_s over a fifth of the limit and 10 minutes, no
    time limit did (requeued for ever). This job knows which it was, and tells it."""
    try:  # (submitit's internals: where another release moved them, its own wall-time guess decides, as before)
        from submitit.core.job_environment import SignalHandler
    except ImportError:
        SignalHandler = None
    if SignalHandler is not None and hasattr(SignalHandler, "has_timed_out"):
        SignalHandler.has_timed_out = lambda self: timed_out  # (the job's one handler; the process ends in it)
    try:
        os.kill(os.getpid(), signal.SIGUSR2)  # submitit's handler (SlurmJobEnvironment.USR_SIG)
        time.sleep(60)  # the handler runs at once and exits; this is never reached in practice
    except subprocess.CalledProcessError:
        # `scontrol requeue` refused: SLURM is already requeueing this job (preemption, or an
        # admin's `scontrol requeue`), and the stored job is this same run. Leave quietly.
        print("scontrol requeue refused: the job is already being requeued (or was cancelled)", flush=True)
        sys.exit(-1)


# ---------------------------------------------------------------------------------------------
# Planning what to submit


def sweep_dir_for(spec: SweepSpec, sweep_dir: str | Path | None) -> Path:
    return Path(sweep_dir) if sweep_dir else default_sweep_dir(spec.name)


def check_sweep_dir(path: str | Path, flag: str = "sweep dir") -> Path:
    """The resolved sweep folder, refused (UserError) where it could not be written or where it is one
    run's folder (`scaling train --out`: its config.json): a sweep there would mix its runs, plan and
    report into that run's files."""
    path = check_output(Path(path).expanduser().resolve(), folder=True, flag=flag)
    if (path / "config.json").is_file() and not (path / "sweep.json").exists():
        raise UserError(f"{flag} {path} is a single run's folder (it holds that run's config.json), not a sweep's; "
                        f"pass a new folder, or the sweep folder above it ({path.parent})")
    return path


def pending(spec: SweepSpec, sweep_dir: Path, submission: bool = False,
            executor: str | None = None) -> tuple[list, dict[str, list[str]]]:
    """(configs to submit, in the order a launch takes them: `launch_order`, longest priced first; {state: run ids
    skipped}). Writes the plan to sweep.json, with each run's price for a
    launch with `executor` (None: the spec's default; `launch_prices`, which `sweep status`'s ETA reads). `submission`:
    the caller holds the sweep's submission lock (`slurm_submission`, exclusive), so no other launch is submitting into
    it: a job record with no job id is a killed launch's (failed), not one whose sbatch is under way.
    The runs are resolved once, for the prices and the launch both (a config's `run_id` resolves it again)."""
    planned = spec.resolved_runs()
    runs = {run.run_id: run.config for run in planned}
    check_same_spec(runs, sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    prices = _prices(spec, executor or spec.default_executor, planned)
    write_json(sweep_dir / "sweep.json", {
        "name": spec.name, "source": spec.source, "data": spec.data,
        "runs": [{"run_id": run_id, **c.to_dict()} for run_id, c in runs.items()],
        "prices": prices,
    })  # fmt: skip
    queue = slurm_queue_for([sweep_dir / run_id for run_id in runs])
    todo, skipped = [], {}
    for run_id in runs:
        state = run_state(sweep_dir / run_id, queue, others_submitting=False if submission else None)
        if state in ("failed", "missing"):
            todo.append(run_id)
        else:
            skipped.setdefault(state, []).append(run_id)
    return [runs[run_id] for run_id in launch_order(todo, prices.get("seconds", {}))], skipped


def _prices(spec: SweepSpec, executor: str, runs: list) -> dict:
    """`launch_prices` of the spec's `runs` (`resolved_runs()`), or where the plan cannot price them (a benchmark file
    edited by hand) why not, for status to say: the launch goes on, as it did before it priced them."""
    try:
        return launch_prices(spec, executor, runs)
    except UserError as e:
        return {"unpriced": str(e)}


def check_same_spec(runs: dict, sweep_dir: Path) -> None:
    """UserError where the sweep folder holds a started run (its config.json) at one of these runs' grid
    points under another id: the spec's [train] (or a recipe file) changed since that launch. Launched
    anyway, every changed point would train again beside the old run, and collect would pool both. So is one
    of these runs in its own folder under a name of its own (renamed, `own_name_of`): it would train again.
    `runs`: each run's config by its run id."""
    here = {grid_point(c.to_dict()): run_id for run_id, c in runs.items()}  # the run id at each grid point
    at_points = [(d, cfg) for d in run_dirs(sweep_dir, {}) if d.name not in runs
                 and (cfg := read_json(d / "config.json")) is not None and grid_point(cfg) in here]
    for d, cfg in at_points:  # one of these runs, in its folder renamed: launched, it would train again beside it
        run_id = own_name_of(d, here[grid_point(cfg)])
        if run_id is not None:
            raise misnamed_error(d, run_id)
    old = [(d, cfg) for d, cfg in at_points if _changed(d, cfg, runs[here[grid_point(cfg)]])]
    if not old:
        return
    d, cfg = old[0]
    c = runs[here[grid_point(cfg)]]
    more = f" (and {count(len(old) - 1, 'other run')} like it)" if len(old) > 1 else ""
    from scaling.config import RunConfig
    from scaling.run_data import moved_corpus, moved_corpus_link

    try:  # (a config of an older version of RunConfig is not this one's moved)
        started = RunConfig.from_dict(cfg)
        moved = all(moved_corpus(RunConfig.from_dict(one), runs[here[grid_point(one)]].resolved(), run_dir)
                    for run_dir, one in old)
    except (UserError, TypeError):
        moved = False
    if moved:
        raise UserError(f"{sweep_dir} holds {count(len(old), 'run')} of this spec trained on the data {started.data}, "
                        f"which {c.data} holds too (the same tokenizer and token files), moved there; a run's id includes "
                        f"its data's path, so set the spec's data back to {started.data} to go on with them"
                        f"{moved_corpus_link(started, c)} (--set data=... does too), or move the old runs out of {sweep_dir}")
    raise UserError(f"{sweep_dir} holds run {d.name}{more} at this spec's grid point {point_label(cfg)} "
                    f"{_what_changed(d, cfg, c)} since that run started; launch the changed spec into a sweep folder of "
                    f"its own (launch --sweep-dir, demo --out), or undo the change, or move the old runs out of {sweep_dir}")


def _what_changed(run_dir: Path, started: dict, config) -> str:
    """What sets a run folder's run (its config.json, `started`) apart from `config`, another version of it
    (`_changed`), as the middle of `check_same_spec`'s message: the settings that differ, or, where none does,
    the file of its recipe's chain edited since (the recipe file itself, or a base file it is built on)."""
    from scaling.recipes import edited_recipe_files

    if not _same_settings(started, config):
        said = setting_differences(started, config.resolved().to_dict())
        return f"under other settings ({said}): the spec or a recipe file changed"
    edited = edited_recipe_files(config.recipe, (run_dir / "recipe.toml").read_bytes())
    return f"under an earlier version of its recipe: {edited} has changed"


def _changed(run_dir: Path, started: dict, config) -> bool:
    """Whether a run folder's config.json (`started`) is another version of `config`: a setting differs,
    or its recipe file's copy is not the file as it is now (not a copy of the same run's folder)."""
    from scaling.recipes import recipe_content

    if not _same_settings(started, config):
        return True
    copy, recipe = run_dir / "recipe.toml", Path(config.recipe)
    file = config.recipe.endswith(".toml") and copy.is_file() and recipe.is_file()
    return file and copy.read_bytes() != recipe_content(recipe)


def _same_settings(started: dict, config) -> bool:
    """Whether a run folder's config.json (`started`) holds `config`'s settings (as JSON gives them back)."""
    return started == json.loads(json.dumps(config.resolved().to_dict()))


# sbatch's words for a setting it refused -> the spec's key that made it
SBATCH_KEYS = (("account", "account"), ("qos", "qos"), ("partition", "partition"), ("--mem", "mem"), ("memory", "mem"),
               ("gres", "gpus"), ("feature", "constraint"), ("--time", "time"), ("time limit", "time"),
               ("--cpus-per-task", "cpus"))


def sbatch_refusal(error: str) -> str:
    """One line for a refused submission: sbatch's last words, and the executor.slurm key behind them
    (with the partitions sinfo lists, where it was the partition)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    said = lines[-1] if lines else "no reason given"
    # the setting may be named an error line before sbatch's last words ("Memory specification can not be
    # satisfied", then "Requested node configuration is not available"): the latest error line naming one,
    # quoted beside the last (in what is quoted, not elsewhere; not a warning's words)
    named = [line for line in lines[:-1] if "error" in line.lower()] + [said]
    line, key = next(((line, k) for line in reversed(named) for word, k in SBATCH_KEYS if word in line.lower()),
                     (said, None))
    said = said if line == said else f"{line}; {said}"
    if key is None:
        return f"sbatch refused the jobs: {said}"
    hint = f"; check executor.slurm.{key} in the spec (or --set executor.slurm.{key}=...)"
    if key == "partition" and shutil.which("sinfo"):
        try:
            names = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30).stdout.split()
        except (subprocess.SubprocessError, OSError):
            names = []
        if names:
            hint += f"; this cluster's partitions: {', '.join(n.rstrip('*') for n in names)}"
    return f"sbatch refused the jobs: {said}{hint}"


def _prepare(run_dir: Path, config, executor: str) -> Path | None:
    """Record the submission; move a failed or damaged result aside (result.failed-<n>.json,
    result.damaged-<n>.json: kept, never read as a result) so train() runs again (it resumes).
    Returns where the result was moved (None: it had none to move), for `_restore_job`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "result.json"
    result, damaged = read_result(path, run_dir.name)
    moved = None
    if damaged or (result is not None and RESULT_STATES.get(result.get("status")) == "failed"):
        kind = "damaged" if damaged else "failed"
        # the number after the highest kept (not their count: with one removed, that would replace another)
        kept = [p.name[len(f"result.{kind}-") : -len(".json")] for p in run_dir.glob(f"result.{kind}-*.json")]
        n = max((int(k) + 1 for k in kept if k.isdigit()), default=0)
        moved = run_dir / f"result.{kind}-{n}.json"
        os.replace(path, moved)
    write_json(run_dir / "job.json", {
        "executor": executor, "job_id": None, "submitted": time.time(), "config": config.to_dict(),
    })  # fmt: skip
    return moved


def _restore_job(run_dir: Path, job: dict | None, moved: Path | None = None) -> None:
    """Put back what a refused submission's `_prepare` changed: the job record it replaced (or remove the one
    it made) and the result it moved aside (`moved`), so the run keeps its record of failure."""
    if job is None:
        (run_dir / "job.json").unlink(missing_ok=True)
    else:
        write_json(run_dir / "job.json", job)
    if moved is not None:
        os.replace(moved, run_dir / "result.json")


def _record_job_id(run_dir: Path, job_id: str | None, log: str | None = None) -> None:
    job = read_json(run_dir / "job.json") or {}
    write_json(run_dir / "job.json", {**job, "job_id": job_id, "log": log})


# ---------------------------------------------------------------------------------------------
# Launch


def launch(spec: SweepSpec, executor: str = "local", sweep_dir: str | Path | None = None,
           progress: bool = True) -> LaunchReport:  # fmt: skip
    """Submit (slurm) or run to completion (local) every run of the spec that is not done or in flight; a local
    launch then waits for the runs of its spec that other processes train (`_wait_for_others`)."""
    if executor not in ("local", "slurm"):
        raise UserError(f"--executor {executor!r}: use local or slurm")
    sweep_dir = check_sweep_dir(sweep_dir_for(spec, sweep_dir))
    if executor == "slurm":
        check_slurm_client()
    else:
        check_local_gpus(spec)
    chunk = max_array_size() if executor == "slurm" else 0  # also: is there a cluster at all?
    prepare_data(spec, progress)
    if executor == "slurm":
        # one SLURM launch at a time plans and submits into a sweep folder: a second one waits, then finds the
        # first's runs queued (planned beside it, it read those of arrays not yet submitted as missing: twice)
        def waiting() -> None:
            if progress:
                print(f"waiting for another launch into {sweep_dir} to finish submitting", flush=True)

        sweep_dir.mkdir(parents=True, exist_ok=True)  # (the lock's folder)
        with slurm_submission(sweep_dir, waiting):
            todo, skipped = pending(spec, sweep_dir, submission=True, executor=executor)
            return _launch_runs(spec, executor, sweep_dir, todo, skipped, progress, chunk)
    todo, skipped = pending(spec, sweep_dir, executor=executor)
    # held while this launch lives: its runs waiting for a slot read `missing`, and status must not say
    # "launch again" meanwhile (a SLURM launch returns once submitted: squeue says what is queued)
    with local_launch(sweep_dir):
        return _launch_runs(spec, executor, sweep_dir, todo, skipped, progress, chunk)


def _launch_runs(spec: SweepSpec, executor: str, sweep_dir: Path, todo: list, skipped: dict, progress: bool,
                 chunk: int) -> LaunchReport:
    """`launch` past its plan: say what it runs, then submit (slurm) or run (local) `todo`."""
    report = LaunchReport(str(sweep_dir), executor, total=len(todo) + sum(map(len, skipped.values())),
                          skipped=skipped)  # fmt: skip
    if progress:
        left = ", ".join(f"{len(v)} {k}" for k, v in skipped.items()) or "none"
        # (the archives' directories only: their CRC-32s would read every resumable run's checkpoint here, on a
        # login node, before each job reads its own again; train refuses flipped bytes in one line, and status names them)
        damaged = [c.run_id for c in todo if damaged_checkpoint(sweep_dir / c.run_id)]
        foreign = [c.run_id for c in todo
                   if c.run_id not in damaged and checkpoint_of_another_run(sweep_dir / c.run_id, c.run_id)]
        resuming = sum(checkpoint_path(sweep_dir / c.run_id).exists() for c in todo) - len(damaged) - len(foreign)
        resume = f" ({resuming} from {'their checkpoints' if resuming > 1 else 'its checkpoint'})" if resuming else ""
        print(f"{spec.name}: {count(report.total, 'run')} in {sweep_dir}; skipping {left}; {executor}: {len(todo)} to "
              f"run{resume}", flush=True)
        if damaged:  # train refuses to resume from a damaged checkpoint: those runs fail again, said before they do
            print(f"warning: {count(len(damaged), 'run')} ({', '.join(damaged[:5])}{', ...' if len(damaged) > 5 else ''}) "
                  f"{'has a damaged checkpoint' if len(damaged) == 1 else 'have damaged checkpoints'}, on which "
                  "training fails again; `scaling sweep status` names the files to move away", flush=True)
        if foreign:  # train refuses to resume another run's checkpoint (`check_run_dir`): said before they fail
            print(f"warning: {count(len(foreign), 'run')} ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}) "
                  f"{'holds the checkpoint' if len(foreign) == 1 else 'hold checkpoints'} of another run, on which "
                  "training fails; `scaling sweep status` names the files to move away", flush=True)
    if executor == "local":  # (a SLURM launch returns once submitted: `status` follows every run)
        report.elsewhere = list(skipped.get("running", []))
        if progress and report.elsewhere and todo:  # (with none of its own, the wait's line says it)
            them = "it" if len(report.elsewhere) == 1 else "them"
            print(f"{_trained_elsewhere(sweep_dir, report.elsewhere)}: leaving {them} to it, and waiting for {them} "
                  "after this launch's own runs", flush=True)
    try:
        with interrupt_on_sigterm():  # `kill` stops a launch (and a local pool's workers) as Ctrl-C does
            if executor == "slurm" and todo:
                _launch_slurm(spec, todo, sweep_dir, report, progress, chunk)
                if progress:  # (it returns once they are submitted: where to follow them, not left to guess)
                    print(f"`scaling sweep status {sweep_dir}` follows them", flush=True)
            elif todo:
                _launch_local(spec, todo, sweep_dir, report, progress)
            if executor == "local":
                _wait_for_others(sweep_dir, report, progress)
    except KeyboardInterrupt:
        report.interrupted = True
        raise LaunchInterrupted(report) from None
    return report


def _trained_elsewhere(sweep_dir: Path, run_ids: list[str]) -> str:
    """"2 runs are being trained by other processes (pids 25245, 25246 on vm)": who holds the runs'
    locks, from the holder records (a SLURM job by its id, from the lock or the run's job.json)."""
    pids: dict[str, list[int]] = {}  # host -> pids
    jobs: list[str] = []
    for run_id in run_ids:
        holder = lock_holder(sweep_dir / run_id) or {}
        job = holder.get("slurm_job_id") or (read_json(sweep_dir / run_id / "job.json") or {}).get("job_id")
        if job:
            jobs.append(str(job))
        elif holder.get("pid"):
            pids.setdefault(str(holder.get("host")), []).append(holder["pid"])
    said = [f"pid{'s' if len(p) > 1 else ''} {', '.join(map(str, sorted(set(p))))} on {host}" for host, p in pids.items()]
    said += [f"SLURM job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}"] if jobs else []
    n = len(run_ids)
    return (f"{count(n, 'run')} {'is' if n == 1 else 'are'} being trained by "
            f"{'another process' if n == 1 else 'other processes'} ({'; '.join(said) or 'holder unknown'})")


def _wait_for_others(sweep_dir: Path, report: LaunchReport, progress: bool, poll_s: float = 2.0) -> None:
    """Wait for the runs of this spec that another process trains (report.elsewhere: a launcher killed
    outright leaves its workers finishing their runs; a second launch of the spec) and count their final
    states in report.finished: a local launch returns once every run of its spec has finished, so that
    `launch && collect` (and `scaling demo`) never read a sweep with runs still in flight. Ctrl-C stops
    the wait, not those processes."""
    queue = slurm_queue_for([sweep_dir / r for r in report.elsewhere])  # (one squeue for them all, not one a run)
    left = [r for r in report.elsewhere if run_state(sweep_dir / r, queue) == "running"]
    if progress and left:
        print(f"waiting: {_trained_elsewhere(sweep_dir, left)} (Ctrl-C stops the wait, not them; "
              f"`scaling sweep status {sweep_dir}` follows them)", flush=True)
    for run_id in report.elsewhere:
        if run_id not in left:  # (finished while this launch ran its own)
            _count_other(sweep_dir, run_id, report, progress)
    while left:
        time.sleep(poll_s)
        queue = slurm_queue_for([sweep_dir / r for r in left])
        for run_id in [r for r in left if run_state(sweep_dir / r, queue) != "running"]:
            left.remove(run_id)
            _count_other(sweep_dir, run_id, report, progress)


def _count_other(sweep_dir: Path, run_id: str, report: LaunchReport, progress: bool) -> None:
    """Count (and say) how a run another process trained ended."""
    state = run_state(sweep_dir / run_id, None)
    report.finished[state] = report.finished.get(state, 0) + 1
    if progress:
        loss = (read_json(sweep_dir / run_id / "result.json") or {}).get("val_loss")
        what = f" val_loss {loss:.4f}" if isinstance(loss, float) else ""
        print(f"{run_id}, trained by another process: {state}{what}", flush=True)


def prepare_data(spec: SweepSpec, progress: bool = True) -> None:
    """Prepare the data once, here, before any job needs it (each step is a no-op when done):
    the built-in corpus, or a raw corpus (scaling.data.prepare, under its lock); else check the dir."""
    from scaling import data

    if spec.data == "builtin":
        data.builtin_data_dir(spec.train.get("vocab_size"))
    elif spec.corpus:
        if progress:
            print(f"preparing {spec.corpus} into {spec.data} (once; vocab {data.DEFAULT_VOCAB_SIZE})", flush=True)
        data.prepare([spec.corpus], spec.data, progress=progress)
    else:
        data.read_meta(spec.data)  # UserError naming `scaling data prepare` if it is not ready


def check_slurm_client() -> None:
    """UserError where this machine lacks the commands a SLURM launch runs here: sbatch (submits) and srun
    (submitit refuses to start without it). Found missing only at submission, sbatch's absence was an OSError
    after every run's job record was written (each read as a failed run), and srun's a RuntimeError traceback.
    Then whether the cluster's controller answers (`check_slurm_controller`)."""
    missing = [c for c in ("sbatch", "srun") if shutil.which(c) is None]
    if missing:
        raise UserError(f"--executor slurm: {' and '.join(missing)} not found on PATH; run on a SLURM login node "
                        "(or put the SLURM commands' folder on PATH), or use --executor local")
    check_slurm_controller()


PING_TIMEOUT_S = 10  # `scontrol ping` answers in milliseconds; a missing SLURM_CONF retries for a minute


def check_slurm_controller(timeout_s: float = PING_TIMEOUT_S) -> None:
    """UserError where SLURM's controller does not answer `scontrol ping` (slurmctld stopped, SLURM_CONF naming
    another host): `demo` found it out only at its sweep, after the data and the diagnostics."""
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise UserError("--executor slurm: scontrol not found; run on a SLURM login node or use --executor local") from None
    except subprocess.TimeoutExpired as e:
        said = _last_words(e.stderr)
        raise UserError(f"--executor slurm: the SLURM controller did not answer `scontrol ping` in {timeout_s:g} s"
                        f"{f' ({said})' if said else ''}; is the cluster up, and does SLURM_CONF name its "
                        "slurm.conf? Or use --executor local") from None
    if " is UP" in out.stdout:  # (any of the controllers: a backup answers while the primary is down)
        return
    said = (out.stdout.strip().splitlines() or [""])[0] or _last_words(out.stderr) or f"exit status {out.returncode}"
    raise UserError(f"--executor slurm: the SLURM controller does not answer (`scontrol ping`: {said}); start "
                    "slurmctld, or point SLURM_CONF at this cluster's slurm.conf, or use --executor local")


def _last_words(text: str | bytes | None) -> str:
    """A SLURM command's last line of stderr ("scontrol: fatal: Unable to process configuration file")."""
    text = text.decode(errors="replace") if isinstance(text, bytes) else text or ""
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def max_array_size() -> int:
    """The cluster's MaxArraySize (`scontrol show config`): an array holds at most this many tasks."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True, timeout=30).stdout
    except FileNotFoundError:
        raise UserError("--executor slurm: scontrol not found; run on a SLURM login node or use --executor local") from None
    except subprocess.SubprocessError as e:  # (scontrol's own last words, where it said any: "Unable to contact ...")
        said = _last_words(e.stderr) if isinstance(e, subprocess.CalledProcessError) else ""
        raise UserError(f"--executor slurm: `scontrol show config` failed ({said or e}); is the "
                        "cluster up?") from None
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 1001  # SLURM's default


def slurm_executor(spec: SweepSpec, folder: Path) -> submitit.SlurmExecutor:
    s = spec.slurm
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=s.max_timeouts)
    params = dict(
        job_name=spec.name, time=s.time_min, nodes=1, ntasks_per_node=1, cpus_per_task=s.cpus,
        array_parallelism=s.array_parallelism,
        # torch would start a thread per core of the node; keep to the CPUs SLURM gave the job. A job
        # runs `python -u -m submitit.core._submit`, and `-m` puts the working directory first on
        # sys.path: started in submitit's own folder (every path a job uses is absolute), not the one
        # the sweep was launched from, a models/ or sweeps/ folder there cannot stand in for ours, on
        # any Python (WORKER_COMMAND keeps local workers off it too).
        setup=["export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1} MKL_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}",
               f"cd {shlex.quote(str(Path(folder).resolve()))}"],
        # --requeue: requeueable even where the cluster sets JobRequeue=0. --signal: USR1 goes to
        # train(), which checkpoints at the end of the step and hands over to submitit (RunJob).
        additional_parameters={"requeue": True, "signal": f"USR1@{s.signal_delay_s}"},
    )  # fmt: skip
    optional = dict(partition=s.partition, account=s.account, qos=s.qos, constraint=s.constraint,
                    gpus_per_node=s.gpus or None, mem=s.mem)  # fmt: skip
    params.update({k: v for k, v in optional.items() if v})
    ex.update_parameters(**params)
    return ex


def _launch_slurm(spec: SweepSpec, todo: list, sweep_dir: Path, report: LaunchReport, progress: bool,
                  chunk: int) -> None:  # fmt: skip
    """Submit `todo` in arrays of `chunk`, under the sweep's submission lock (`launch` holds it: status reads a run
    whose job id sbatch has not yet given as queued)."""
    chunk = max(1, chunk)
    ex = slurm_executor(spec, sweep_dir / ".submitit")
    for start in range(0, len(todo), chunk):
        _submit_part(ex, todo, start, chunk, sweep_dir, report, progress)


def _submit_part(ex: submitit.SlurmExecutor, todo: list, start: int, chunk: int, sweep_dir: Path, report: LaunchReport,
                 progress: bool) -> None:
    """Submit the runs todo[start : start + chunk] as one array, recording each one's job id."""
    part = todo[start : start + chunk]
    before = {c.run_id: read_json(sweep_dir / c.run_id / "job.json") for c in part}
    moved = {c.run_id: _prepare(sweep_dir / c.run_id, c, "slurm") for c in part}
    # Ctrl-C or SIGTERM waits until sbatch has answered and its job ids are recorded: stopped between the two,
    # the jobs sbatch submitted ran with no id in their runs' records (`failed` to status, submitted again)
    with signals.recorded((signal.SIGINT, signal.SIGTERM)) as stops:
        try:  # (submitit prints a refusing sbatch's stderr itself: kept for the one line below, not said twice)
            with contextlib.redirect_stderr(io.StringIO()), ex.batch():
                jobs = [ex.submit(RunJob(c, sweep_dir / c.run_id)) for c in part]
        except submitit.core.utils.FailedJobError as e:
            for c in part:  # nothing was submitted: the runs stay as they were (missing, or failed before)
                _restore_job(sweep_dir / c.run_id, before[c.run_id], moved[c.run_id])
            if stops:  # (a Ctrl-C reaches sbatch too, which then submits nothing)
                raise KeyboardInterrupt from None
            raise UserError(sbatch_refusal(str(e))) from None
        for c, job in zip(part, jobs):
            _record_job_id(sweep_dir / c.run_id, job.job_id, str(job.paths.stdout))
            report.submitted.append({"run_id": c.run_id, "job_id": job.job_id})
    if stops:
        raise KeyboardInterrupt
    if progress:
        ids = jobs[0].job_id.split("_")[0]
        print(f"submitted {count(len(part), 'run')} as SLURM job {ids} ({start + len(part)}/{len(todo)})", flush=True)


# ---------------------------------------------------------------------------------------------
# Local: a pool of worker processes


def _launch_local(spec: SweepSpec, todo: list, sweep_dir: Path, report: LaunchReport, progress: bool) -> None:
    _LocalPool(spec, todo, sweep_dir, report, progress).run()


class _LocalPool:
    """One long-lived worker process per slot (importing torch + Lightning costs seconds), each fed
    one run directory per line from a shared queue, longest run first; a worker that dies is
    replaced for the next run. Ctrl-C or SIGTERM stops the workers (train saves a checkpoint)."""

    def __init__(self, spec: SweepSpec, todo: list, sweep_dir: Path, report: LaunchReport, progress: bool):
        self.slots, self.sweep_dir, self.report, self.progress = local_slots(spec), sweep_dir, report, progress
        self.total, self.done, self.started = len(todo), 0, time.time()
        self.work: queue_mod.Queue = queue_mod.Queue()
        # In `pending`'s order: longest priced first (`launch_order`, as the ETA lays them out). A run's
        # job.json is written by the worker that takes it, under its lock: until then it is `missing`.
        for c in todo:
            self.work.put(c)
        self.lock = threading.Lock()
        self.workers: set[subprocess.Popen] = set()
        self.stopping = False  # set (under the lock) by _stop: no worker starts, no run is reported
        self.error: OSError | None = None  # the sweep folder could not be written (a full disk): stop, say it

    def run(self) -> None:
        threads = [threading.Thread(target=self._slot, args=(env,), daemon=True) for env in self.slots]
        if self.progress:
            at_once = min(len(self.slots), self.total)  # (the slots beyond the runs take none)
            print(f"running {count(self.total, 'run')}, {at_once} at a time; logs in {self.sweep_dir}/<run_id>/train.log",
                  flush=True)  # fmt: skip
        try:  # (Ctrl-C, or `kill`: `launch` turns SIGTERM into the same)
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            self._stop()
            raise
        if self.error is not None:  # (the CLI's one line; finished runs are kept, a relaunch resumes the rest)
            raise self.error

    def _slot(self, env_extra: dict[str, str]) -> None:
        worker = None
        try:
            while not self.stopping:
                try:
                    c = self.work.get_nowait()
                except queue_mod.Empty:
                    break
                if worker is None or worker.poll() is not None:
                    worker = self._start_worker(env_extra)
                    if worker is None or self.stopping:
                        break
                (self.sweep_dir / c.run_id).mkdir(parents=True, exist_ok=True)  # (its log goes there)
                t0 = time.time()
                state, note = self._run(worker, c)
                if not self.stopping:  # (a run stopped by Ctrl-C is no result: the launcher says "interrupted")
                    self._finished(c, state, note, time.time() - t0)
        except OSError as e:  # here or in the run (_run): every run after it would fail the same way
            with self.lock:
                self.error = self.error or e
            self._stop()
        if worker is not None and worker.poll() is None:
            worker.stdin.close()
            worker.wait()

    def _start_worker(self, env_extra: dict[str, str]) -> subprocess.Popen | None:
        """A new worker process, or None once the pool is stopping (started under the lock, so _stop
        sees every worker there is)."""
        with self.lock:
            if self.stopping:
                return None
            worker = subprocess.Popen(
                WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env={**os.environ, **env_extra}, text=True, start_new_session=True,
            )  # fmt: skip
            self.workers.add(worker)
        # Wait for its "ready" (torch and Lightning imported: seconds) before giving it a run, whose start
        # is then no longer far off. A worker that dies first answers nothing; its run says so (_run).
        # (Lines before it, a library's print at import, are not replies: skipped, so none is read as one.)
        while (line := worker.stdout.readline()) and line != "ready\n":
            pass
        return worker

    def _run(self, worker: subprocess.Popen, c) -> tuple[str, str | None]:
        """One run in `worker`: its state when the worker answers, and a note where the log cannot
        say what happened (the worker died mid-run; another launcher has the run). Raises the
        OSError of a run that found no space to write (the worker's reply names it)."""
        try:  # (the worker writes the run's job record once it holds its lock: RunJob.run)
            worker.stdin.write(json.dumps({"run_dir": str(self.sweep_dir / c.run_id), "config": c.to_dict()}) + "\n")
            worker.stdin.flush()
            reply = worker.stdout.readline()
        except (BrokenPipeError, OSError):
            reply = ""
        _, *space = reply.rstrip("\n").split("\t")
        if space:
            code, filename = int(space[0]), space[1]
            raise OSError(code, os.strerror(code), filename)
        state = run_state(self.sweep_dir / c.run_id, None)
        if state == "missing" and reply:  # its job.json, written as it started, is gone: the folder was removed
            return "failed", "its run folder was removed while it ran; a relaunch trains it from the start"
        if not reply:  # (before it took the run's lock, the run is left `missing`: a relaunch trains it)
            note = _worker_death_note(worker.wait(), self.sweep_dir / c.run_id)
            if not self.stopping:  # the log is where `sweep status` sends a user asking why a run failed
                with open(self.sweep_dir / c.run_id / "train.log", "a") as log:
                    log.write(f"\n[sweep launch] {note}\n")
            return "failed" if state == "missing" else state, note
        if state == "running":
            return state, "left to the launcher that holds its lock"
        return state, None

    def _finished(self, c, state: str, note: str | None, seconds: float) -> None:
        run_dir = self.sweep_dir / c.run_id
        result = read_json(run_dir / "result.json") or {}
        left = self._time_left() if self.progress else ""
        with self.lock:
            self.done += 1
            if state == "running":  # another process took it first: the launch waits for it after the pool
                self.report.elsewhere.append(c.run_id)
            else:
                self.report.finished[state] = self.report.finished.get(state, 0) + 1
            if self.progress:
                loss = result.get("val_loss")
                log = f"see {run_dir / 'train.log'}" if (run_dir / "train.log").exists() else ""
                at = result.get("diverged_at_step") if state == "diverged" else None
                what = (f"val_loss {loss:.4f}" if isinstance(loss, float) else
                        f"at step {at} of {result.get('steps', '?')}" if at is not None else
                        "; ".join(x for x in (note, log) if x))
                # the recipe as results name it (a file's `name`, not its path); seed and lr_mult where they
                # tell an LR sweep's or a seed sweep's lines apart
                defaults = type(c).__dataclass_fields__
                extra = "".join(f" {k}={getattr(c, k):g}" for k in ("seed", "lr_mult") if getattr(c, k) != defaults[k].default)
                label = recipe_label(c.recipe, run_dir / "recipe.toml")
                print(f"[{self.done:>{len(str(self.total))}}/{self.total}] {state:<8} {c.family} {c.size:>5} "
                      f"{label:<14} D={c.tokens:<9.3g}{extra} {what}  ({seconds:.0f} s; {time.time() - self.started:.0f} s "
                      f"elapsed{left})", flush=True)  # fmt: skip

    def _time_left(self) -> str:
        """', 3m10s left': the sweep's ETA as `scaling sweep status` computes it (`sweeps.store.status`, which reads
        every run folder: 5-13 ms for the demo's 24 runs), or '' where it has none (the plan could not price the runs).
        One ETA for both, so the launch's lines and status agree; before, the lines said only the time elapsed."""
        eta_s = status(self.sweep_dir, verify_checkpoints=False).eta_s  # (the ETA alone: no checkpoint read whole)
        return "" if eta_s is None else f", {duration(eta_s)} left"

    def _stop(self) -> None:
        """Drop the runs not started; SIGTERM the running ones (train checkpoints; a relaunch resumes)
        and wait for them."""
        with self.lock:
            self.stopping = True
            while not self.work.empty():
                self.work.get_nowait()
            workers = list(self.workers)
            for w in workers:
                if w.poll() is None:
                    w.terminate()
        for w in workers:
            w.wait()


def _worker_death_note(code: int, run_dir: Path) -> str:
    """Why a run's worker gave no answer, and what a relaunch does with the run: it resumes from the checkpoint
    the run left (SIGTERM's or SIGUSR1's, saved as it stopped, or an evaluation's before a SIGKILL), else it
    trains it anew. Before, a SIGTERMed run read only "exited mid-run (exit status 75)", beside `failed`."""
    how = _exit_status(code)
    if code == signals.PREEMPTED_EXIT_CODE:
        how += ": stopped by SIGTERM or SIGUSR1 after saving a checkpoint"
    elif code == -signal.SIGKILL:
        how += ": out of memory?"
    if damaged_checkpoint(run_dir):
        then = "its checkpoint is damaged: `scaling sweep status` says what to do"
    elif checkpoint_path(run_dir).exists():
        then = "a relaunch resumes it from its checkpoint"
    else:
        then = "a relaunch trains it from the start"
    return f"its worker exited mid-run ({how}); {then}"


def _exit_status(code: int) -> str:
    """A process's exit code in words: a signal by name, else the status."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# A local worker, kept off the working directory's modules (scaling.cli.python_command)
WORKER_COMMAND = python_command("from sweeps.launch import _worker; sys.exit(_worker())")


def _flush_into_log() -> None:
    """Flush what the run printed into its log (fds 1 and 2); what a full disk refuses is dropped
    rather than left in the buffers for the worker's own output."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            with contextlib.suppress(OSError):
                stream.flush()


def _worker() -> int:
    """`python -m sweeps.launch --worker`: train the runs given on stdin, one a line: a JSON object with the
    run's directory and config (`run_dir`, `config`); each one's job record is written under its lock.

    Once its imports are done it says "ready" on stdout. Each run's output (fd 1 and 2) goes to
    <run_dir>/train.log; the reply line "<state>" (with
    "\t<errno>\t<path>" after it where the run found no space to write) goes to the original stdout,
    which the launcher reads."""
    from scaling.train import PREEMPTED_EXIT_CODE, Preempted

    reply = os.fdopen(os.dup(1), "w")
    own = os.dup(1), os.dup(2)  # this process's own output, between runs and at exit
    reply.write("ready\n")  # (imports done: the launcher gives it a run only now; _LocalPool._start_worker)
    reply.flush()
    for line in sys.stdin:  # {"run_dir": ..., "config": RunConfig.to_dict()} (_LocalPool._run)
        job = json.loads(line)
        run_dir = Path(job["run_dir"])
        no_space = ""  # "\t<errno>\t<path>" where the run found no space to write: the launcher stops
        with open(run_dir / "train.log", "ab") as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                from scaling.config import RunConfig

                RunJob(RunConfig.from_dict(job["config"]), run_dir).run(record="local")
            except Preempted:
                return PREEMPTED_EXIT_CODE
            except UserError as e:  # (a damaged checkpoint, another corpus): one line, as `scaling train` says it
                print(f"error: {e}", file=sys.stderr)
            except Exception as e:  # the run failed; its log says why, the next run goes on
                import traceback

                if isinstance(e, OSError) and e.errno in SPACE_ERRORS:
                    no_space = f"\t{e.errno}\t{e.filename or run_dir}"
                with contextlib.suppress(OSError):  # (the log may be on the disk that is full)
                    traceback.print_exc()
            finally:
                _flush_into_log()
                os.dup2(own[0], 1)
                os.dup2(own[1], 2)
        try:
            reply.write(f"{run_state(run_dir, None)}{no_space}\n")
            reply.flush()
        except BrokenPipeError:  # the launcher is gone (killed outright): the run in hand is done; stop
            os.dup2(os.open(os.devnull, os.O_WRONLY), reply.fileno())  # (nothing left to flush at exit)
            return 0
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--worker"]:
        sys.exit("usage: python -m sweeps.launch --worker  (runs as JSON lines on stdin; used by `scaling sweep launch`)")
    sys.exit(_worker())
