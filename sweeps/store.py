"""The sweep directory: what state each run is in, the run lock, status with ETA, and collect.

    runs/<sweep>/
      sweep.json              the plan of the last launch (spec + one config and price per run)
      <run_id>/job.json       the launcher's record: config, executor, SLURM job id, submit time
      <run_id>/lock           flock-ed by the process training this run (holder info inside)
      <run_id>/config.json, metrics.csv, result.json, checkpoints/   written by `scaling train`
      launch.lock             flock-ed (shared) by each local launch into the sweep while it lives

A run is done/diverged/failed once result.json says so; running while its lock is held or squeue
says its job runs; queued while its job is pending in squeue; failed where a submitted job is neither;
missing otherwise (`status` and `collect` say waiting where a local launch alive will train it, `run_status`).
The lock is an flock: the kernel drops it
when the holder dies, so a crashed job never leaves a lock that blocks a relaunch.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple

from scaling.console import count
from scaling.files import (check_run_layout, checkpoint_of_another_run, checkpoint_path, checkpoint_problem,
                           checkpoint_step, held, run_layout_problem, take_exclusive, write_atomic, write_json_atomic)
from sweeps.spec import GRID_FIELDS

if TYPE_CHECKING:  # polars is imported where a table is made (status and locks need none)
    import polars as pl

    from scaling.errors import UserError

# misnamed: a folder holding a run under a name of its own (`own_name_of`), whatever its records say of that run;
# waiting: a missing run while a local launch into the sweep lives, which trains it as a slot frees (`run_status`)
STATES = ("done", "diverged", "failed", "running", "queued", "waiting", "missing", "misnamed")
RESULT_STATES = {"completed": "done", "diverged": "diverged", "failed": "failed"}
# The result record's keys, in DESIGN.md's order (`scaling.train.result_record` writes them): collect's columns.
RESULT_FIELDS = (
    "run_id", "family", "size", "n_params", "n_params_total", "tokens", "flops", "flops_exact", "recipe",
    "seed", "status", "val_loss", "val_bpb", "tokens_per_s", "mfu", "epochs", "wall_s", "vocab_size",
    "versions", "git_commit",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Small file helpers


def write_json(path: Path, obj: Any) -> None:
    """Atomic JSON write: temp file in the same directory, fsync, rename."""
    write_json_atomic(path, obj, indent=2, default=str)


def read_json(path: Path) -> dict | None:
    """The JSON object in the file, or None where there is none: no file, or one damaged (not JSON, or
    JSON but not an object: a run's records are objects, and callers read their fields)."""
    try:
        obj = json.loads(Path(path).read_text())
    except (FileNotFoundError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


# ---------------------------------------------------------------------------------------------
# The run lock


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[bool]:
    """Hold the run's lock for the block; yields False (and holds nothing) if another process has it."""
    run_dir = Path(run_dir)
    check_run_layout(run_dir)  # (a folder named lock, or config.json, read below: one line, not an OSError)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not take_exclusive(fd):  # (a status probe at that moment is waited out)
            yield False
            return
        holder = {
            "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "slurm_job_id": _slurm_job_id(),
            # a resumed run's earlier progress, its checkpoint's (metrics.csv can hold a stopped process's rows past it
            # until train cuts them, `scaling.train.back_to_checkpoint`); none without one, where the run starts over
            "tokens_at_start": _checkpoint_tokens(run_dir) or 0,
        }  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _checkpoint_tokens(run_dir: Path, config: dict | None = None) -> int | None:
    """The training tokens a run's checkpoint holds (its step x its config.json's batch_size x seq_len, `config` where
    the caller read it), where a process resuming it starts from; 0 where it has none (a process starts over,
    `scaling.train.start_over`); None where either cannot be read (a damaged checkpoint: train refuses to resume it)."""
    path = checkpoint_path(run_dir)
    if not path.exists():
        return 0
    step = checkpoint_step(path)
    config = read_json(Path(run_dir) / "config.json") if config is None else config
    batch, seq_len = _whole((config or {}).get("batch_size")), _whole((config or {}).get("seq_len"))
    return step * batch * seq_len if step is not None and batch and seq_len else None


def lock_holder(run_dir: Path) -> dict | None:
    """The holder's info if the run's lock is held now, else None (probing takes and drops it)."""
    content = _held_elsewhere(Path(run_dir) / "lock", fcntl.LOCK_SH)
    if content is None:
        return None
    try:
        return json.loads(content or b"{}")
    except json.JSONDecodeError:
        return {}


def _held_elsewhere(path: Path, mode: int) -> bytes | None:
    """The file's first 4 KB where another process holds a lock on it that `mode` (LOCK_SH, LOCK_EX)
    conflicts with, else None: no such lock, or no file (probing takes and drops the lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4096, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


LAUNCH_LOCK = "launch.lock"  # at a sweep folder's top: held by each local launch into it while it lives
SUBMIT_LOCK = "submit.lock"  # at a sweep folder's top: held by a SLURM launch into it from its plan through its sbatch


def local_launch(sweep_dir: Path) -> contextlib.AbstractContextManager[bool]:
    """Hold the sweep's launch lock (shared: two launches into one sweep may overlap) for the block: a
    local launch's runs wait for its slots (`missing` to `run_state`; `waiting` to status, `run_status`), and `status`
    must not tell the user to launch again while one lives."""
    return held(Path(sweep_dir) / LAUNCH_LOCK, exclusive=False)


def launching(sweep_dir: Path) -> bool:
    """Whether a local launch into the sweep is alive now (`local_launch`'s shared lock)."""
    return _held_elsewhere(Path(sweep_dir) / LAUNCH_LOCK, fcntl.LOCK_EX) is not None


def slurm_submission(sweep_dir: Path, waiting: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[bool]:
    """Hold the sweep's submission lock (exclusive) for the block, a SLURM launch's plan and submission: while
    sbatch is under way its runs' job records have no job id yet, and must read queued, not failed (`run_state`);
    and a second SLURM launch into the sweep waits here until the first has submitted, then finds its runs queued
    (held shared, from the first sbatch on, a second launch read the runs of arrays the first had not reached yet
    as missing, and both submitted them). `waiting`: called once where another launch holds the lock."""
    return held(Path(sweep_dir) / SUBMIT_LOCK, waiting=waiting)


def submitting(sweep_dir: Path) -> bool:
    """Whether a SLURM launch into the sweep is submitting now (`slurm_submission`'s lock)."""
    return _held_elsewhere(Path(sweep_dir) / SUBMIT_LOCK, fcntl.LOCK_EX) is not None


def _slurm_job_id() -> str | None:
    if "SLURM_ARRAY_JOB_ID" in os.environ:
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return os.environ.get("SLURM_JOB_ID")


# ---------------------------------------------------------------------------------------------
# Run states


@dataclass(frozen=True)
class QueuedJob:
    """A job in SLURM's queue: its state (squeue's %T) and, while pending, why (%r: "Priority",
    "Resources", "PartitionConfig", ...; None where squeue gives none)."""

    state: str
    reason: str | None = None
    # where SLURM holds it until a set time (reason BeginTime: a requeued job waits ~2 minutes), that time (squeue's
    # %S, seconds since the epoch); None otherwise (the start squeue gives a job waiting for Priority or Resources is
    # the backfill scheduler's guess from the time limits of the jobs before it, not a time it is held to)
    begins: float | None = None


def _squeue_time(text: str) -> float | None:
    """squeue's time ("2026-12-08T03:07:18", the controller's local time) in seconds since the epoch; None for
    "N/A" and anything else."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def slurm_queue() -> dict[str, QueuedJob] | None:
    """Job id → its `QueuedJob` for each of this user's jobs in the queue (array tasks one per line; `--me`: no
    other user's ids, and a cheap call on a big cluster); None without squeue."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(
            ["squeue", "--me", "-h", "-r", "-o", "%i|%T|%r|%S"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    queue = {}
    for line in out.splitlines():
        job_id, state, reason, start = (line.split("|", 3) + ["", "", ""])[:4]
        if state:
            reason = reason if state == "PENDING" and reason not in ("", "None") else None
            queue[job_id] = QueuedJob(state, reason, _squeue_time(start) if reason == "BeginTime" else None)
    return queue


def pending_reason(job: dict | None, queue: dict[str, QueuedJob] | None) -> str | None:
    """squeue's reason a queued run's job waits ("Priority", "Resources", "PartitionConfig", ...)."""
    queued = (queue or {}).get((job or {}).get("job_id") or "")
    return queued.reason if queued is not None else None


def held_until(job: dict | None, queue: dict[str, QueuedJob] | None) -> float | None:
    """When SLURM lets a queued run's job start, where it holds it until then (`QueuedJob.begins`)."""
    queued = (queue or {}).get((job or {}).get("job_id") or "")
    return queued.begins if queued is not None else None


def slurm_queue_for(run_dirs: list[Path]) -> dict[str, QueuedJob] | None:
    """`slurm_queue()` where some run was submitted to SLURM, else None without asking: squeue waits
    ~10 s for a controller that is down, which a local sweep's status must not."""
    return slurm_queue_for_jobs(read_json(Path(d) / "job.json") for d in run_dirs)


def slurm_queue_for_jobs(jobs: Iterable[dict | None]) -> dict[str, QueuedJob] | None:
    """`slurm_queue_for` of the runs' job.json records, where the caller has read them."""
    return slurm_queue() if any((job or {}).get("executor") == "slurm" for job in jobs) else None


_UNREAD: Any = object()  # run_state's records not passed in: it reads them itself


def run_state(run_dir: Path, queue: dict[str, QueuedJob] | None, result: dict | None = _UNREAD,
              job: dict | None = _UNREAD, others_submitting: bool | None = None) -> str:
    """One of STATES for a run directory (queue: `slurm_queue()`, fetched once per sweep; result and
    job: its result.json and job.json where the caller has read them, None where there is none;
    others_submitting: whether a SLURM launch is submitting into the sweep, None to ask its lock (`submitting`):
    False from the launch that holds it, whose own lock is no other launch's sbatch under way)."""
    run_dir = Path(run_dir)
    result = read_json(run_dir / "result.json") if result is _UNREAD else result
    if result is not None:  # (a damaged record is no result: a relaunch moves it aside and trains the run)
        return "failed" if record_problem(result, run_dir.name) else RESULT_STATES[result["status"]]  # (a known status)
    if lock_holder(run_dir) is not None:
        return "running"
    job = read_json(run_dir / "job.json") if job is _UNREAD else job
    if job and job.get("job_id") and queue and job["job_id"] in queue:
        return "running" if queue[job["job_id"]].state in ("RUNNING", "COMPLETING") else "queued"
    if job and job.get("job_id") and queue is None and job.get("executor") == "slurm":
        return "queued"  # no squeue here: trust the record rather than submit twice
    if job and not job.get("job_id") and job.get("executor") == "slurm" and (
            submitting(run_dir.parent) if others_submitting is None else others_submitting):
        return "queued"  # sbatch is under way: the job id comes when it answers (a launcher killed meanwhile: failed)
    return "failed" if job else "missing"


def read_plan(sweep_dir: Path) -> dict:
    """The sweep's plan (sweep.json, written by each launch); {} where there is none. A damaged one is a
    UserError: read as none, status and collect would drop the planned runs not yet started, unsaid."""
    path = Path(sweep_dir) / "sweep.json"
    plan = read_json(path)
    if plan is None and not path.exists():
        return {}
    runs = plan.get("runs") if isinstance(plan, dict) else None
    if not (isinstance(runs, list) and all(isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs)):
        from scaling.errors import UserError

        raise UserError(f"{path} is damaged (not the plan `scaling sweep launch` writes); launch the sweep again "
                        "with its spec and --sweep-dir to write it anew (finished runs are kept and skipped)")
    return plan


def run_dirs(sweep_dir: Path, plan: dict | None = None) -> list[Path]:
    """The runs of a sweep: those in its plan (sweep.json, or `plan` where the caller read it), then
    any other run folder found."""
    sweep_dir = Path(sweep_dir)
    ids = [r["run_id"] for r in (read_plan(sweep_dir) if plan is None else plan).get("runs", [])]
    extra = sorted(
        p.name for p in sweep_dir.iterdir()
        if p.is_dir() and p.name not in ids and any((p / f).exists() for f in ("job.json", "config.json", "result.json"))
    ) if sweep_dir.is_dir() else []  # fmt: skip
    return [sweep_dir / i for i in ids + extra]


# What a spec's grid sets: a run's place in it. Two runs at one place under different ids were trained
# under different other settings ([train], a recipe file's content, the spec's one `data`): two versions
# of the spec.
GRID_POINT = tuple(k for k in GRID_FIELDS if k != "data")


def grid_point(config: dict) -> tuple:
    return tuple(config.get(k) for k in GRID_POINT)


def point_label(config: dict) -> str:
    """A grid point as a user reads it: nanochat 0.5M bf16 tokens=4096 seed=0 (lr_mult where not 1)."""
    lr = f" lr_mult={config.get('lr_mult'):g}" if config.get("lr_mult", 1.0) != 1.0 else ""
    return (f"{config.get('family')} {config.get('size')} {recipe_label(str(config.get('recipe', '')))} "
            f"tokens={config.get('tokens')} seed={config.get('seed')}{lr}")


def setting_differences(there: dict, here: dict, names: tuple[str, str] = ("there", "here")) -> str:
    """The settings two run configs (config.json's) differ in, as `scaling train` names them ("seq_len 32
    there, 64 here"; `names` for other words than there and here); where their fields are equal, the
    recipe file's content (edited since the one started), or for a preset the trainer's version."""
    try:  # (scaling.config needs torch, through scaling.optim: `sweep collect` on a laptop without it says the fields instead)
        from scaling.config import RunConfig, differences

        said = differences(RunConfig.from_dict(there), RunConfig.from_dict(here))
    except Exception:  # (or a config of an older version of the trainer: its fields are no longer known)
        said = "; ".join(f"{k} {there.get(k)!r} there, {here.get(k)!r} here" for k in sorted(set(there) | set(here))
                         if there.get(k) != here.get(k))
    if not said:
        return ("the recipe file's content" if str(here.get("recipe", "")).endswith(".toml") else
                "no setting this version reads: an older version of scaling started it and named it differently")
    return said.replace(" there,", f" {names[0]},").replace(" here", f" {names[1]}") if names != ("there", "here") else said


def check_sweep_folder(sweep_dir: Path, command: str | None = None) -> None:
    """A UserError saying what the path is where it is not a folder (a file, or nothing); for a sweep spec, the
    folder its runs go to, as `scaling sweep COMMAND FOLDER` where `command` names the command that was given it."""
    from scaling.errors import UserError

    sweep_dir = Path(sweep_dir)
    if sweep_dir.is_file():  # (`status()` and `collect()` in Python know no command)
        refuse_spec_file(sweep_dir, f"scaling sweep {command} {{folder}}" if command else "give {folder}")
    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir} "
                        + ("is a file, not a folder; give the folder `scaling sweep launch` wrote, e.g. runs/<name>"
                           if sweep_dir.exists() else "does not exist; launch the sweep first"))


def refuse_spec_file(path: Path, use: str) -> None:
    """Where `path` is a sweep spec given for its sweep's folder (to `sweep status`, `report`, `fit`): a UserError
    naming the folder its runs go to (launch's default, runs/<name>) and `use`, the command that reads that folder
    with '{folder}' in its place, or, where that folder is not here, that the sweep has not been launched from this
    folder. Nothing where `path` is no sweep spec."""
    from scaling.errors import UserError
    from sweeps.spec import default_sweep_dir, spec_name_of

    name = spec_name_of(path)
    if name is None:
        return
    folder = default_sweep_dir(name)
    if folder.is_dir():
        raise UserError(f"{path} is a sweep spec; its runs are in {folder} (where `scaling sweep launch` puts them "
                        f"without --sweep-dir): {use.format(folder=folder)}")
    raise UserError(f"{path} is a sweep spec; its runs would be in {folder}, which does not exist here: it has not been "
                    f"launched from this folder (`scaling sweep launch {path}` launches it; one launched with --sweep-dir "
                    f"DIR: {use.format(folder='DIR')})")


def sweep_plan(sweep_dir: Path) -> dict:
    """`read_plan` of a path that must be a folder (`check_sweep_folder`)."""
    check_sweep_folder(sweep_dir)
    return read_plan(sweep_dir)


def sweep_run_dirs(sweep_dir: Path, plan: dict | None = None) -> list[Path]:
    """`run_dirs` of a folder that is a sweep: one with a plan (sweep.json) or run folders; else
    a UserError saying what the path is instead. `plan`: its `sweep_plan`, where the caller has it."""
    from scaling.errors import UserError

    sweep_dir = Path(sweep_dir)
    dirs = run_dirs(sweep_dir, sweep_plan(sweep_dir) if plan is None else plan)
    if not dirs and not (sweep_dir / "sweep.json").exists():
        if (sweep_dir / "config.json").is_file() or (sweep_dir / "job.json").is_file():  # one run's own folder
            parent = sweep_dir.resolve().parent
            raise UserError(f"{sweep_dir} is one run's folder, not a sweep's; give the sweep folder that holds it "
                            f"({parent}), or read the run's result.json")
        raise UserError(f"{sweep_dir} is not a sweep directory (no sweep.json and no run folders in it); give the "
                        "folder `scaling sweep launch` wrote, e.g. runs/<name>")
    return dirs


def own_name_of(run_dir: Path, recorded: Any) -> str | None:
    """`recorded` where run_dir, whose result.json or checkpoint records that run (not the folder's name: read as
    another run's record copied in, damaged), is that run's own folder under a name of its own (`scaling train
    --out runs/try/nvfp4-1m`, or a folder renamed): its config.json hashes to that run, and no folder of its id is
    beside it; else None. Its sound records would otherwise be called damaged and advised away; a record copied in
    from another run's folder, or a copy of that folder, stays a damaged one. Status and collect ask only of a
    record they found another run's, so a sound sweep's records are read once."""
    if not isinstance(recorded, str) or recorded == run_dir.name or (run_dir.parent / recorded).exists():
        return None
    return recorded if _config_run_id(run_dir) == recorded else None


def misnamed_error(run_dir: Path, run_id: str) -> UserError:
    """The UserError collect and report stop on where run_dir holds run `run_id` under a name of its own
    (`own_name_of`): read by its folder's name, its records are another run's, so it can be neither dropped nor read."""
    from scaling.errors import UserError

    return UserError(f"{run_dir} holds run {run_id} under a name of its own, as `scaling train --out` names a "
                     "run's folder; a sweep's run folders are named by their run ids, which status, collect and "
                     f"report read: rename it to its id ({rename_command(run_dir, run_id)}), as `scaling "
                     "train` without --out names its runs (runs/adhoc/<run_id>)")


def rename_command(run_dir: Path, run_id: str) -> str:
    """The `mv` that names a run folder held under a name of its own (`own_name_of`) by its run id."""
    return f"mv {run_dir} {run_dir.parent / run_id}"


def check_own_name(run_dir: Path, recorded: Any) -> None:
    """`misnamed_error` where run_dir is run `recorded`'s own folder under a name of its own (`own_name_of`)."""
    run_id = own_name_of(run_dir, recorded)
    if run_id is not None:
        raise misnamed_error(run_dir, run_id)


def _config_run_id(run_dir: Path) -> str | None:
    """The run id run_dir's config.json hashes to (a recipe file's by its copy there, as `scaling train`
    reads a moved one); None where it has none this version reads."""
    from scaling.config import RunConfig
    from scaling.errors import UserError

    if not (run_dir / "config.json").is_file():
        return None
    try:
        config = RunConfig.from_json(run_dir / "config.json")
        kept = run_dir / "recipe.toml"
        if config.recipe.endswith(".toml") and kept.is_file():  # (its id hashes the file's content, kept here)
            config = replace(config, recipe=str(kept))
        return config.run_id
    except (UserError, OSError, ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Status


@dataclass
class RunStatus:
    run_id: str
    family: str
    size: str
    recipe: str
    tokens: int
    seed: int
    state: str
    # fraction of the tokens trained (1 when finished): a running run's from its freshest record (`_live_tokens`),
    # None until it shows one; another's from metrics.csv's evaluations
    progress: float | None
    # its last evaluation's (result.json's once finished); where a relaunch cuts evaluations (`progress_kept`), the last
    # one it keeps, at or before its checkpoint
    val_loss: float | None
    eta_s: float | None  # this run's remaining time, for running runs
    job_id: str | None
    resumable: bool = False  # failed with a sound checkpoint (killed, cancelled, crashed): a relaunch resumes it
    waiting: str | None = None  # a queued SLURM job's pending reason (squeue's %r)
    begins: float | None = None  # when a queued SLURM job SLURM holds (BeginTime) may start (`QueuedJob.begins`)
    diverged_at_step: int | None = None  # a diverged run's step whose loss tripped the rule (result.json's)
    # a failed run's checkpoint that is damaged, and how (`checkpoint_problem`): a relaunch stops on it, as train
    # refuses to resume from it, until it is moved away
    checkpoint_damaged: str | None = None
    # a failed run's checkpoint that is another run's, that run's id (`checkpoint_of_another_run`, the rule train
    # refuses a resume by): a relaunch stops on it until it is moved away
    checkpoint_of: str | None = None
    # a failed run's result.json that is no result record, and why (`read_result`'s words): edited or damaged, as
    # train writes it atomically; a relaunch moves it aside (result.damaged-<n>.json) and trains the run again
    result_damaged: str | None = None
    # a failed run's UserError, as its job said it (the last `error: ` line of its log, `job_error`): a relaunch
    # meets it again until it is fixed (data the compute nodes cannot see, ...)
    error: str | None = None
    lr_mult: float = 1.0  # its place on an LR sweep's axis: two runs that differ only in it differ only here
    # the run this folder holds under a name of its own (`own_name_of`: `scaling train --out`, or a folder renamed);
    # its state is then "misnamed": its records are sound, but read by the folder's name they are another run's
    misnamed: str | None = None
    # a run no process trains (not running, not finished) that logged steps past its checkpoint: the fraction of its
    # tokens that checkpoint holds (0 where it has none), where a relaunch goes on from, as it cuts those steps'
    # rows and trains them again (`scaling.train.back_to_checkpoint`, `start_over`); None where it logged none past it
    progress_kept: float | None = None

    def progress_label(self) -> str:
        """Its progress as `status --runs` and a report's list of unfinished runs say it: "75% (50% kept)" where a
        relaunch keeps less (`progress_kept`)."""
        if self.progress is None:
            return "unknown"
        return f"{self.progress:.0%}" + ("" if self.progress_kept is None else f" ({self.progress_kept:.0%} kept)")

    @property
    def relaunch_resumes(self) -> bool:
        """A relaunch resumes it from its checkpoint and goes on: resumable, and no damaged checkpoint (it fails
        on it), no damaged result.json (no kill or crash stopped it) and no error (met again). The label's
        "(resumable)" and `status`'s count of such runs, both."""
        return self.resumable and not (self.checkpoint_damaged or self.checkpoint_of or self.result_damaged or self.error)

    def state_label(self) -> str:
        """The state as `status --runs` and a report's list of unfinished runs say it."""
        if self.misnamed:
            return f"misnamed (holds run {self.misnamed}: rename it to its id)"
        if self.checkpoint_damaged:
            return "failed (checkpoint damaged: a relaunch fails on it)"
        if self.checkpoint_of:
            return f"failed (checkpoint of another run, {self.checkpoint_of}: a relaunch fails on it)"
        if self.result_damaged:  # (not "resumable": no kill or crash stopped it)
            return "failed (result.json damaged: a relaunch moves it aside and trains the run again)"
        if self.error:
            return "failed (stopped on an error)"
        if self.relaunch_resumes:
            return f"{self.state} (resumable)"
        if self.waiting:
            return f"queued ({self.waiting})"
        return f"diverged at step {self.diverged_at_step}" if self.diverged_at_step is not None else self.state


@dataclass
class SweepStatus:
    sweep_dir: str
    counts: dict[str, int]
    runs: list[RunStatus]
    eta_s: float | None  # the whole sweep, over its launch's slots (`_sweep_eta`); None when unknown
    eta_method: str


def status(sweep_dir: Path, verify_checkpoints: bool = True) -> SweepStatus:
    """The state of every run of a sweep, counts per state, and an ETA. `verify_checkpoints`: read each failed run's
    checkpoint whole (its CRC-32s, `run_status`); False checks only that each is an archive torch wrote, for a
    caller that asks often and reads the ETA alone (a local launch's line per finished run: a relaunch over failed
    runs of GB-sized checkpoints spent ~0.3 s a GB on each of them at every line)."""
    sweep_dir = Path(sweep_dir)
    plan = sweep_plan(sweep_dir)
    dirs = sweep_run_dirs(sweep_dir, plan)
    queue = slurm_queue_for(dirs)
    now = time.time()
    planned = planned_configs(plan)
    launched = launching(sweep_dir)
    rows, results = [], {}
    for d in dirs:
        problem = run_layout_problem(d)
        if problem:  # (its records unread: a folder named result.json ended status in "cannot use ... Is a directory")
            rows.append(wrong_layout_status(d, planned.get(d.name), problem))
            continue
        job, result = read_json(d / "job.json"), read_json(d / "result.json")  # once each per run
        results[d.name] = result or {}
        rows.append(run_status(d, queue, job, result, planned.get(d.name), now, launched, verify_checkpoints))
    # a planned run held in a folder named otherwise is that folder's row, not also a missing one: "launch again to
    # train the remaining run" would say what the launch refuses (`check_same_spec`) until the `mv`
    held = {r.misnamed for r in rows if r.misnamed}
    rows = [r for r in rows if not (r.state in ("missing", "waiting") and r.run_id in held)]
    counts = dict.fromkeys(STATES, 0) | state_counts(rows)
    eta_s, method = _sweep_eta(rows, results, plan.get("prices") if isinstance(plan.get("prices"), dict) else None, now)
    if queue is None and counts["queued"]:  # (`run_state` trusted the job records: said, as the jobs may be long gone)
        method += ("; squeue could not be run here (no SLURM client, or its controller did not answer): runs with a "
                   "SLURM job and no result are counted queued")
    return SweepStatus(str(sweep_dir), counts, rows, eta_s, method + _waiting_note(rows))


def state_counts(rows: Iterable[RunStatus]) -> dict[str, int]:
    """How many of the runs are in each state, of the states one is in."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    return counts


def planned_configs(plan: dict) -> dict[str, dict]:
    """Run id -> its config in the sweep's plan (`sweep_plan`'s)."""
    return {r["run_id"]: r for r in plan.get("runs", [])}


def run_status(run_dir: Path, queue: dict[str, QueuedJob] | None, job: dict | None, result: dict | None,
               planned: dict | None = None, now: float | None = None, launched: bool = False,
               verify_checkpoint: bool = True) -> RunStatus:
    """One run's `RunStatus`, from its records as the caller read them (job.json, result.json: None where it
    has none; `planned`: its plan entry), the queue (`slurm_queue_for`, once per sweep) and the time. `launched`:
    whether a local launch into the sweep lives (`launching`, asked once per sweep): a run `run_state` finds missing
    is then `waiting` for its slots, which it trains without a relaunch (it read "missing", never submitted)."""
    d = Path(run_dir)
    now = time.time() if now is None else now
    state = run_state(d, queue, result, job)
    if state == "missing" and launched:
        state = "waiting"
    result_problem = _result_problem(d, result) if state == "failed" else None
    job, result = job or {}, result or {}
    run_config = read_json(d / "config.json")  # (train's, resolved: its batch size and sequence length)
    cfg = _config_of(planned, job.get("config"), run_config)
    tokens = _whole(cfg.get("tokens")) or _whole(result.get("tokens")) or 0
    curve = _curve(d / "metrics.csv")
    seen, last_loss = curve[-1] if curve else (0, None)
    # a failed run's checkpoint is checked whole, its CRC-32s too, as train checks it before it resumes: a
    # flipped byte is found here, not by the relaunch that status would advise. Affordable: only failed runs
    # are read (no process holds or writes their checkpoints; running and finished runs are not read), once
    # each by status (or collect, or report), at ~0.3 s a GB, which the relaunch that resumes them reads anyway
    ckpt_problem = damaged_checkpoint(d, contents=verify_checkpoint) if state == "failed" else None
    other = checkpoint_of_another_run(d, d.name) if state == "failed" and not ckpt_problem else None
    # another run's record or checkpoint, or this run's in a folder named otherwise: then neither is damaged, and
    # the row says so (status goes on to every other run's; collect and report refuse it, `misnamed_error`)
    recorded = result.get("run_id") if result_problem else other["run_id"] if other else None
    misnamed = own_name_of(d, recorded) if recorded is not None else None
    if misnamed:
        state, result_problem, ckpt_problem, other = "misnamed", None, None, None
    if state == "running":  # (evaluations are an eighth of a run apart: its log says more, sooner)
        seen = max(seen, _live_tokens(d, run_config or {}))
    # a misnamed folder's finished run is as far on as a done one (its metrics.csv's last row can be short of its
    # --tokens by the whole steps it rounded down to, or absent)
    finished = misnamed and result.get("status") in ("completed", "diverged")
    progress = _progress("done" if finished else state, seen, tokens)
    eta = _run_eta(d, progress, tokens, now) if state == "running" else None
    # A stopped run's logged steps past its checkpoint are cut and trained again by whatever process trains it next;
    # not a run whose checkpoint a relaunch refuses (damaged, another run's: its lines say what to do), nor a running
    # one (its progress is its process's own, `_live_tokens`)
    stopped = state not in ("running", "done", "diverged") and not (finished or ckpt_problem or other)
    kept = _checkpoint_tokens(d, run_config or {}) if stopped and tokens and seen else None
    progress_kept = _progress(state, kept, tokens) if kept is not None and kept < seen else None
    if progress_kept is not None:  # its loss as the relaunch leaves it: the cut evaluations' are no longer the run's
        last_loss = next((loss for at, loss in reversed(curve) if at <= kept), None)
    return RunStatus(
        run_id=d.name, family=cfg.get("family", result.get("family", "")), size=cfg.get("size", result.get("size", "")),
        recipe=(result["recipe"] if isinstance(result.get("recipe"), str) and result["recipe"]
                else recipe_label(str(cfg.get("recipe", "")), d / "recipe.toml")), tokens=tokens,
        seed=_whole(cfg.get("seed", result.get("seed"))) or 0,
        state=state, progress=progress, val_loss=result.get("val_loss", last_loss), eta_s=eta,
        job_id=job.get("job_id"), checkpoint_damaged=ckpt_problem, checkpoint_of=other and other["run_id"], misnamed=misnamed,
        result_damaged=result_problem,
        error=job_error(job, d) if state == "failed" and not (ckpt_problem or other or result_problem) else None,
        resumable=state == "failed" and ckpt_problem is None and other is None and checkpoint_path(d).exists(),
        waiting=pending_reason(job, queue) if state == "queued" else None,
        begins=held_until(job, queue) if state == "queued" else None,
        diverged_at_step=_whole(result.get("diverged_at_step")) if state == "diverged" else None,
        lr_mult=_number(cfg.get("lr_mult", result.get("lr_mult"))) or 1.0, progress_kept=progress_kept,
    )  # fmt: skip


def wrong_layout_status(run_dir: Path, planned: dict | None, problem: str) -> RunStatus:
    """The `RunStatus` of a run folder holding one of the run's paths as the wrong kind (`run_layout_problem`, said in
    `problem`): failed on that error, which train and a relaunch stop on until the path is moved away; its records
    unread (they may be the wrong kind), its numbers its plan's."""
    cfg = _config_of(planned)
    return RunStatus(run_id=run_dir.name, family=cfg.get("family", ""), size=cfg.get("size", ""),
                     recipe=recipe_label(str(cfg.get("recipe", ""))), tokens=_whole(cfg.get("tokens")) or 0,
                     seed=_whole(cfg.get("seed")) or 0, state="failed", progress=None, val_loss=None, eta_s=None,
                     job_id=None, error=problem, lr_mult=_number(cfg.get("lr_mult")) or 1.0)


def _result_problem(run_dir: Path, result: dict | None) -> str | None:
    """What is wrong with a run's result.json, from the record the caller read (`read_json`'s: None where
    there is none or it is not a JSON object); the file is read again, for `read_result`'s words, only
    where it is there but was not read as one."""
    if result is not None:
        return record_problem(result, run_dir.name)
    path = run_dir / "result.json"
    return read_result(path, run_dir.name)[1] if path.exists() else None


def job_error(job: dict, run_dir: Path) -> str | None:
    """The UserError a run's job failed on: a SLURM job's last `error: ` line (as `RunJob` says it) at the end of
    its stderr log (job.json's `log` is its stdout's, `<job>_<task>_log.out`); a local worker's, the last line of
    the run's train.log where it is one (the log is appended to by every launch: an error a later process's output
    follows is not its last word). None where there is none."""
    log = job.get("log")
    if job.get("executor") == "slurm" and isinstance(log, str) and log.endswith("_log.out"):
        path, last_line_only = Path(log.removesuffix("out") + "err"), False
    elif job.get("executor") == "local":  # (its status read "failed (resumable)", and a relaunch met the error again)
        path, last_line_only = run_dir / "train.log", True
    else:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))  # (the error is its last words; a log may be long)
            lines = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    said = [line for line in (lines[-1:] if last_line_only else lines) if line.startswith("error: ")]
    return said[-1].removeprefix("error: ") if said else None


def _progress(state: str, seen: int, tokens: int) -> float | None:
    """The fraction of its `tokens` a run in `state` has trained, having recorded `seen`."""
    if state in ("done", "diverged"):
        return 1.0
    if state == "running" and not (seen and tokens):
        return None  # no step of it recorded yet: unknown, not 0% (a resumed run's may be far on)
    return min(1.0, seen / tokens) if tokens else 0.0


def _run_eta(run_dir: Path, progress: float | None, tokens: int, now: float) -> float | None:
    """A running run's remaining seconds, at the pace of the process holding its lock; None where unknown."""
    holder = lock_holder(run_dir)
    if not (holder and holder.get("started") and progress is not None and 0 < progress < 1):
        return None
    # this holder's own progress: a resumed run's earlier tokens came in another process's time
    start = min(1.0, (holder.get("tokens_at_start") or 0) / tokens) if tokens else 0.0
    return (now - holder["started"]) * (1 - progress) / (progress - start) if progress > start else None


def states_said(runs: Iterable[RunStatus]) -> str:
    """How many of the runs are in each state, as a note says it: "2 queued, 1 running"."""
    return ", ".join(f"{n} {state}" for state, n in sorted(state_counts(runs).items()))


def nothing_finished(sweep_dir: Path, runs: list[RunStatus], action: str = "collect") -> UserError:
    """The UserError `sweep collect` and `report` stop on where no run of the sweep has a result yet (`runs`: its
    runs, as `collect_runs` found them): an empty table would read as a collected sweep, and `scaling fit` refuses it."""
    from scaling.errors import UserError

    them = "it" if len(runs) == 1 else "them"
    in_flight = any(r.state in IN_FLIGHT for r in runs)
    watch = f"`scaling sweep status {sweep_dir}` follows" if in_flight else f"`scaling sweep status {sweep_dir} --runs` lists"
    return UserError(f"no run of {sweep_dir} has finished yet ({states_said(runs) or 'it plans none'}): nothing to "
                     f"{action}; {watch} {them}; {relaunch_advice(runs)}")


# The states of a run that finishes without a relaunch: trained, queued for SLURM, or waiting for a local launch's slot
IN_FLIGHT = ("running", "queued", "waiting")


def relaunch_advice(runs: Iterable[RunStatus]) -> str:
    """What to do about a sweep's runs with no result (`collect`'s note, a report's list), by their states:
    running, queued and waiting runs (IN_FLIGHT) finish without a relaunch; failed runs that stopped on an error (`RunStatus.error`,
    as `status` says it) meet it again on a relaunch until it is fixed, and so do those whose checkpoint is
    damaged (`RunStatus.checkpoint_damaged`: train refuses to resume from it) or another run's
    (`RunStatus.checkpoint_of`), so these are counted apart; a relaunch trains or resumes the others."""
    runs = list(runs)
    n, in_flight = len(runs), sum(r.state in IN_FLIGHT for r in runs)
    waiting = any(r.state == "waiting" for r in runs)
    erred = sum(bool(r.error) for r in runs)  # (failed runs only)
    broken = sum(bool(r.checkpoint_damaged) and not r.error for r in runs)  # (failed runs only)
    foreign = sum(bool(r.checkpoint_of) for r in runs)  # (failed runs only, with no error or damage)
    rest = n - in_flight - erred - broken - foreign
    if in_flight == n:
        return "it finishes without a relaunch" if n == 1 else "they finish without a relaunch"
    said = []
    if erred:
        said.append(f"{count(erred, 'failed run')} stopped on an error, which a relaunch meets again until it is fixed "
                    f"(`scaling sweep status` prints {'it' if erred == 1 else 'each'})")
    if broken:
        said.append(f"{count(broken, 'failed run')} {'has' if broken == 1 else 'have'} a damaged checkpoint, which a "
                    "relaunch fails on until it is moved aside (`scaling sweep status` says how)")
    if foreign:
        said.append(f"{count(foreign, 'failed run')} {'holds' if foreign == 1 else 'hold'} the checkpoint of another run, "
                    "which a relaunch fails on until it is moved aside (`scaling sweep status` says how)")
    if rest == n:
        said.append(f"`scaling sweep launch` again trains or resumes {'it' if n == 1 else 'them'}")
    elif rest:
        which = (("other" if rest == 1 else "others") if erred or broken or foreign else
                 "neither running, queued nor waiting" if waiting else "neither running nor queued")
        said.append(f"`scaling sweep launch` again trains or resumes the {rest} {which}")
    if in_flight and not rest:
        said.append(f"the {in_flight} running{', queued or waiting' if waiting else ' or queued'} "
                    f"{'finishes' if in_flight == 1 else 'finish'} without a relaunch")
    return "; ".join(said)


def damaged_checkpoint(run_dir: Path, contents: bool = False) -> str | None:
    """What is wrong with the run's checkpoint where it has one that is damaged (`checkpoint_problem`: its
    archive's directory, and with `contents` its CRC-32s too, as train checks it before it resumes); None
    where it has none or a sound one."""
    path = checkpoint_path(run_dir)
    return checkpoint_problem(path, contents) if path.exists() else None


def _config_of(*records: Any) -> dict:
    """The first of a run's config records (its plan entry, job.json's, config.json) that is a JSON object:
    a damaged one (a list, a text) is no config, rather than an AttributeError traceback from status."""
    return next((r for r in records if isinstance(r, dict) and r), {})


def _whole(value: Any) -> int | None:
    """A record's count (tokens, seed) as an int; None where a damaged record has something else there."""
    number = _number(value)
    return int(number) if number is not None else None


def _number(value: Any) -> float | None:
    """A record's finite number (lr_mult); None where a damaged record has something else there."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")
    return float(value) if ok else None


# squeue reasons a pending job never leaves by itself: no node or partition can meet the request
NEVER_STARTS = ("PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidQOS",
                "InvalidAccount")  # (not ReqNodeNotAvail: drained or reserved nodes come back)
# squeue reasons of a job held (`scontrol hold`, by its user or an administrator): it starts once released
HELD = ("JobHeldUser", "JobHeldAdmin")


def _is_held(r: RunStatus) -> bool:
    return (r.waiting or "").split(",")[0] in HELD


def _release_command(rows: list[RunStatus]) -> str:
    """`scontrol release` of the held runs' jobs (the first five)."""
    ids = [str(r.job_id) for r in rows if _is_held(r) and r.job_id]
    return f"`scontrol release {' '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}`"


def _waiting_note(rows: list[RunStatus]) -> str:
    """Where no run is running: why SLURM holds the queued jobs, and what to do where they never start."""
    if any(r.state == "running" for r in rows):
        return ""
    reasons: dict[str, int] = {}
    for r in rows:
        if r.waiting and r.begins is None:  # (a job held until a set time: the ETA's line says until when)
            reasons[r.waiting] = reasons.get(r.waiting, 0) + 1
    if not reasons:
        return ""
    note = "; SLURM holds the queued jobs for " + ", ".join(f"{why} ({n})" for why, n in sorted(reasons.items()))
    if any(why.split(",")[0] in NEVER_STARTS for why in reasons):
        note += (": no node can run such a job as asked, so scancel its jobs and launch again with other "
                 "executor.slurm settings (partition, cpus, mem, gpus, time, constraint)")
    if any(why.split(",")[0] in HELD for why in reasons):
        note += f": a held job starts once released ({_release_command(rows)})"
    return note


def _curve(metrics_csv: Path) -> list[tuple[int, float | None]]:
    """(tokens, val_loss) of each row of a run's metrics.csv; [] where there is none, or where the file cannot be
    read as CSV text (damaged: train rewrites it from its checkpoint on a resume)."""
    try:
        with open(metrics_csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except (FileNotFoundError, UnicodeDecodeError, csv.Error):
        return []

    def num(row: dict, key: str) -> float | None:
        try:
            return float(row[key])
        except (KeyError, TypeError, ValueError):
            return None

    return [(int(num(row, "tokens") or 0), num(row, "val_loss")) for row in rows]


def _live_tokens(run_dir: Path, config: dict) -> int:
    """Tokens trained by the process training the run, by the last row of its Lightning log (the newest
    lightning/version_<n>/metrics.csv: a row every `log_every_n_steps`, at most 50 steps, written at once;
    metrics.csv has a row per evaluation, an eighth of the run apart); 0 where it has none. A log last
    written before the run's lock was taken is an earlier process's: its steps after its checkpoint are
    trained again, so they are not counted (until the resume cuts them, `scaling.train.back_to_checkpoint`: that
    rewrite is newer than the lock, and holds the checkpoint's steps at most). `config`: the run's config.json
    (its steps' size)."""
    batch, seq_len = _whole(config.get("batch_size")), _whole(config.get("seq_len"))
    versions = [p for p in (Path(run_dir) / "lightning").glob("version_*") if p.name[8:].isdigit()]
    if not (batch and seq_len and versions):
        return 0
    log = max(versions, key=lambda p: int(p.name[8:])) / "metrics.csv"
    try:
        if log.stat().st_mtime < (Path(run_dir) / "lock").stat().st_mtime:  # (one file system's clock: no skew)
            return 0
    except FileNotFoundError:
        return 0
    step = _last_value(log, "step")
    return (int(step) + 1) * batch * seq_len if step is not None and step >= 0 else 0  # (its steps count from 0)


def _last_value(path: Path, column: str, tail: int = 4096) -> float | None:
    """`column` of the last whole row of a CSV file that grows at its end, from its header and its last
    `tail` bytes (a long run's log has thousands of rows, and status reads every running run's); None where
    there is no such row or value (a row half-appended is not whole: a writer may be at it)."""
    try:
        with open(path, "rb") as f:
            header = f.readline()
            f.seek(max(f.tell(), os.fstat(f.fileno()).st_size - tail))
            lines = f.read().split(b"\n")[:-1]  # (the last piece: "" after a whole row, else a row half-written)
        names = next(csv.reader([header.decode().strip()]))
        row = next(csv.reader([lines[-1].decode().strip()])) if lines else []
        return float(row[names.index(column)])
    except (OSError, UnicodeDecodeError, csv.Error, StopIteration, ValueError, IndexError):
        return None


def recipe_label(recipe: str, copy: Path | None = None) -> str:
    """A run's recipe as results, fits and reports name it: a preset's name, or a recipe file's `name`
    (read from `copy`, the run folder's recipe.toml, where there is one; else from the file). The path
    itself where neither can be read. Torch-free (status and plan run without it)."""
    if not recipe.endswith(".toml"):
        return recipe
    import tomllib

    for path in (copy, Path(recipe)):
        try:
            # (as Recipe.from_toml reads it: UTF-8, a byte-order mark skipped)
            name = tomllib.loads(path.read_text(encoding="utf-8-sig")).get("name") if path is not None else None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if isinstance(name, str) and name:
            return name
    return recipe


def _sweep_eta(rows: list[RunStatus], results: dict[str, dict], prices: dict | None,
               now: float | None = None) -> tuple[float | None, str]:
    """The seconds left until the sweep's runs are trained: each run's price in its plan (sweep.json's `prices`, the
    wall seconds of one of its launch's slots: `sweeps.plan.launch_prices`, the plan's steps, evaluations
    and start-up), less its progress, × what its recipe's finished runs took against their prices (`measured_ratios`:
    their wall_s, start-up included; all recipes' where none of its own has finished); a running run's at its own pace
    (`RunStatus.eta_s`) where it has one; laid out as the launch takes them (`launch_order`, `makespan`) over its slots (a SLURM
    sweep's: its runs running now). `results`: each run's result.json by run id ({} where it has none), as status read
    them. Before, the FLOPs left at the FLOP/s of the finished (or running) runs: a run's evaluations and start-up,
    which do not grow with its tokens, were left out, and the demo's ETA read 1m04s of a 4m12s sweep. A queued job that
    SLURM holds until a set time (`RunStatus.begins`: a requeued job, ~2 minutes) ends no sooner than then plus its
    time (`now`: the time status read the queue at); before, a run requeued at its time limit read as starting at once."""
    left = [r for r in rows if r.state in ("running", "queued", "waiting", "missing", "failed")]
    if not left:
        return 0.0, "nothing left"
    running = [r for r in rows if r.state == "running"]
    queued = [r for r in left if r.state == "queued"]
    waiting = sum(r.state == "waiting" for r in left)
    # (they read `missing` before, never submitted, and the line said nothing of them while a run ran)
    waits = f", {count(waiting, 'run')} waiting for the local launch's slots" if waiting else ""
    if not running and not queued and not waiting:
        return None, (f"nothing running or queued: `scaling sweep launch` again to train the "
                      f"{count(len(left), 'remaining run')}")
    if not running and not waiting and all((r.waiting or "").split(",")[0] in NEVER_STARTS + HELD for r in queued):
        # squeue's reason says no node can run them as asked, or they are held: a time would promise an end that
        # never comes (a held job's read as starting at once)
        return None, "none of the queued jobs can start" + (" until released" if all(map(_is_held, queued)) else "")
    # A failed run is trained by no one until the sweep is launched again: its time is not in the ETA
    # (an ETA that counted it promised an end that never came), and the line says so. So is a missing
    # one: no local launch lives to give it a slot (its launcher was killed, or a SLURM launch never
    # submitted it; one that waits for a live local launch's slot is `waiting`, and counted).
    idle = {s: sum(r.state == s for r in left) for s in ("failed", "missing")}
    held_jobs = [r for r in queued if _is_held(r)]  # (in the queue, but not started until released)
    remaining = [r for r in left if r.state not in idle and not (r.state == "queued" and _is_held(r))]
    given = (prices or {}).get("seconds")
    priced = {run: float(v) for run, v in given.items() if _number(v) is not None} if isinstance(given, dict) else {}
    if not priced:
        why = (prices or {}).get("unpriced")
        return None, ("unknown: " + (f"the launch could not price its runs ({why})" if why else
                                     "sweep.json holds no price of its runs (an older version's launch wrote it)") + waits)
    ratios, overall = measured_ratios(rows, results, priced)

    def seconds_left(r: RunStatus) -> float:
        if r.state == "running" and r.eta_s is not None:
            return r.eta_s
        # (a running run's unknown progress: all of it left; a stopped run's steps past its checkpoint: trained again)
        done = r.progress if r.progress_kept is None else r.progress_kept
        return priced[r.run_id] * (1 - (done or 0.0)) * ratios.get(r.recipe, overall)

    own_pace = [r for r in running if r.eta_s is not None]
    counted = [r for r in remaining if r.run_id in priced or r in own_pace]
    slots = max(_whole(prices.get("slots")) or 0, len(running), 1)
    to_start = {r.run_id: r for r in counted if r.state != "running"}  # (each priced: own_pace runs are running)
    eta = makespan([seconds_left(r) for r in counted if r.state == "running"],
                   [seconds_left(to_start[run_id]) for run_id in launch_order(to_start, priced)], slots)
    now = time.time() if now is None else now
    held = [r for r in to_start.values() if r.begins is not None and r.begins > now]
    eta = max([eta] + [r.begins - now + seconds_left(r) for r in held])
    unseen = {r.recipe for r in counted if r not in own_pace} - set(ratios)
    how = _eta_method(prices, ratios, overall, unseen, slots, bool(own_pace)) + waits
    if held:
        at = time.strftime("%H:%M:%S", time.localtime(max(r.begins for r in held)))
        how += (f"; {count(len(held), 'queued job')} held by SLURM until {at}{' at the latest' if len(held) > 1 else ''} "
                "(BeginTime: a requeued job waits ~2 minutes), counted from then")
    idle_runs = " and ".join(count(n, f"{state} run") for state, n in idle.items() if n)
    if idle_runs:
        how += f"; not counting {idle_runs}, which only `scaling sweep launch` again trains"
    if held_jobs:
        how += (f"; not counting {count(len(held_jobs), 'held job')}, which {'starts' if len(held_jobs) == 1 else 'start'}"
                f" once {_release_command(held_jobs)} frees {'it' if len(held_jobs) == 1 else 'them'}")
    if len(counted) < len(remaining):  # (run folders its plan does not hold: an older spec's)
        how += f"; not counting {count(len(remaining) - len(counted), 'run')} its plan did not price"
    return eta, how


def measured_ratios(rows: list[RunStatus], results: dict[str, dict],
                    priced: dict[str, float]) -> tuple[dict[str, float], float]:
    """What the sweep's done runs took (result.json's wall_s: from building the run to its end, evaluations and
    checkpoints included; the worker's import, once a process, not) against their prices in the plan (`priced`, by run
    id), per recipe (the summed seconds of its runs over their summed prices), and of all of them (1.0 where none has
    finished: the plan's prices as they are). A diverged run stopped early: not counted."""
    took: dict[str, list[float]] = {}
    for r in rows:
        wall = _number((results.get(r.run_id) or {}).get("wall_s"))
        if r.state == "done" and wall and priced.get(r.run_id):
            pair = took.setdefault(r.recipe, [0.0, 0.0])
            pair[0], pair[1] = pair[0] + wall, pair[1] + priced[r.run_id]
    ratios = {recipe: wall / price for recipe, (wall, price) in took.items()}
    walls, prices = (sum(pair[i] for pair in took.values()) for i in (0, 1))
    return ratios, walls / prices if prices else 1.0


def launch_order(run_ids: Iterable[str], seconds: dict[str, float]) -> list[str]:
    """The order a launch takes its runs in (`sweeps.launch.pending`), and the ETA lays them out in (`_sweep_eta`):
    longest first by their price in the plan (`seconds`: sweep.json's `prices`, `sweeps.plan.launch_prices`; a run
    not priced last), so that no slot is left with one long run at the end. Ties keep the order given, the plan's (its
    `runs`, the spec's), which both callers keep."""
    return sorted(run_ids, key=lambda run_id: -seconds.get(run_id, 0.0))


def makespan(running: list[float], waiting: list[float], slots: int) -> float:
    """When the last of these runs ends where each of `slots` trains one at a time: the `running` ones' seconds left
    each in a slot of its own, then the `waiting` ones', in the order given (the launch's: `launch_order`), each to the
    slot that frees first. (Their sum over the slots, as the ETA was before, ends a sweep whose last long run
    starts late too early.)"""
    import heapq

    free = list(running) + [0.0] * max(0, slots - len(running))
    heapq.heapify(free)
    for seconds in waiting:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def _eta_method(prices: dict, ratios: dict[str, float], overall: float, unseen: set[str], slots: int,
                own_pace: bool) -> str:
    """The ETA line's words for how `_sweep_eta` priced the runs left."""
    said = "each run at its price in the plan (" + (f"{prices['bench']}'s rows" if prices.get("bench") else
                                                    "BF16 at an assumed MFU, no benchmark file")
    if not ratios:
        unpriced = prices.get("startup_unpriced") or 0
        said += ("; not its start-up, which they record none of, until a run finishes)" if unpriced else
                 ", its start-up included)")
    else:
        took = ", ".join(f"{recipe} {ratio:.2f}×" for recipe, ratio in sorted(ratios.items()))
        said += f") × what its recipe's done runs took against theirs, start-up included ({took}"
        said += f"; {', '.join(sorted(unseen))} at all recipes' {overall:.2f}× until one of its runs is done)" \
            if unseen else ")"
    if own_pace:
        said += ", a running run at its own pace"
    where = (f"the local launch's {count(slots, 'slot')}" if prices.get("executor") == "local"
             else f"{slots} in flight")
    return f"{said}, over {where}"


# ---------------------------------------------------------------------------------------------
# Collect


class Collected(NamedTuple):
    table: pl.DataFrame  # `collect`'s
    unfinished: list[RunStatus]  # the runs with no result (or a failed one), as `status` has them


def collect(sweep_dir: Path) -> pl.DataFrame:
    """One row per finished run (every result.json under the sweep) with the result-record fields."""
    return collect_runs(sweep_dir).table


def collect_runs(sweep_dir: Path) -> Collected:
    """`collect`'s table, and the status of the runs it has no finished row for, from one walk of the run
    folders (`sweep collect` says how many there are, a report lists them: the table alone reads as the whole
    sweep)."""
    import polars as pl

    sweep_dir = Path(sweep_dir)
    plan = sweep_plan(sweep_dir)
    records, recipe_files, points, waiting, recipe_keys = [], {}, {}, [], []
    recipe_dirs: dict[tuple[str, bytes | None], Path] = {}  # (name, recipe.toml) -> a run folder of it
    for d in sweep_run_dirs(sweep_dir, plan):
        check_run_layout(d)  # (a folder named result.json: one line saying which and how to fix it, not a path error)
        r = read_json(d / "result.json")
        problem = _result_problem(d, r)  # (the judgement status makes of a failed run's record: one place)
        if problem:  # written atomically, so not by a crash: edited or damaged
            from scaling.errors import UserError

            check_own_name(d, (r or {}).get("run_id"))
            # (a file read as no JSON object is said so, not with the parser's words, as collect always said it)
            said = "not a JSON object" if r is None else problem
            raise UserError(f"{d / 'result.json'} is not a result record ({said}); restore it, or remove it "
                            "and relaunch the sweep to train that run again")
        if r is None or RESULT_STATES[r["status"]] not in ("done", "diverged"):
            waiting.append((d, read_json(d / "job.json"), r))  # its status: once the queue is known, below
        if r is not None:
            records.append(r)
            copy = (d / "recipe.toml").read_bytes() if (d / "recipe.toml").is_file() else None
            # (a recipe is its file's content: the runs of one are parsed once, not once a run)
            key = (r["recipe"], copy)
            recipe_dirs.setdefault(key, d)
            recipe_keys.append(key)
            config = read_json(d / "config.json") or {}
            points.setdefault(grid_point(config), {}).setdefault(json.dumps(config, sort_keys=True), []).append(d)
            if copy is not None:
                recipe_files.setdefault(r["recipe"], {}).setdefault(copy, []).append(d)
    _check_one_recipe_per_name(recipe_files)
    _check_one_run_per_point(points)
    queue, planned = slurm_queue_for_jobs(job for _, job, _ in waiting), planned_configs(plan)
    launched = launching(sweep_dir) if waiting else False
    unfinished = [run_status(d, queue, job, r, planned.get(d.name), launched=launched) for d, job, r in waiting]
    misnamed = next((r for r in unfinished if r.misnamed), None)  # (one with a result was refused above)
    if misnamed is not None:  # its checkpoint, read by the folder's name, is another run's: neither dropped nor misread
        raise misnamed_error(sweep_dir / misnamed.run_id, misnamed.misnamed)
    from scaling.recipes import FORMAT_COLUMNS  # (after the record's fields: a custom recipe's known from its file)

    # its BF16 blocks written for the table's model depths: [0, -1] and [0, 11] of 12-block models read the same
    depths = model_depths(records)
    formats_of = {key: run_formats(d, key[0], depths) for key, d in recipe_dirs.items()}
    formats = [formats_of[key] for key in recipe_keys]

    extra = sorted({k for r in records for k in r} - set(RESULT_FIELDS) - set(FORMAT_COLUMNS))
    columns = list(RESULT_FIELDS) + extra + list(FORMAT_COLUMNS)
    rows = [{**{c: _flat(r.get(c)) for c in columns}, **dict(zip(FORMAT_COLUMNS, f))} for r, f in zip(records, formats)]
    if not rows:
        return Collected(pl.DataFrame(schema={c: pl.Utf8 for c in columns}), unfinished)
    return Collected(pl.DataFrame(rows, infer_schema_length=None), unfinished)


def model_depths(records: Iterable[dict]) -> set[int]:
    """The depths (transformer blocks) of the models of these result records: of their family and size, where the
    ladder knows them (a record without them, or of a size it no longer has, adds none)."""
    from models import model_size
    from scaling.errors import UserError

    depths = set()
    for family, size in {(r.get("family"), r.get("size")) for r in records}:
        if isinstance(family, str) and isinstance(size, str):
            with contextlib.suppress(UserError):
                depths.add(model_size(family, size).depth)
    return depths


def run_formats(run_dir: Path, recipe: str, depths: Iterable[int] = ()) -> tuple[str | None, str | None]:
    """A finished run's recipe's (forward, backward) formats (`Recipe.formats` for models of `depths` blocks): from
    the recipe file copied into its folder, else the preset of its name; (None, None) where neither is readable."""
    from scaling.errors import UserError
    from scaling.recipes import PRESETS, Recipe

    copy = run_dir / "recipe.toml"
    try:
        spec = Recipe.from_toml(copy) if copy.is_file() else PRESETS.get(recipe)
    except UserError:  # (a damaged copy: its rows say nothing, and a shared-efficiency fit names the recipe)
        spec = None
    return spec.formats(depths) if spec is not None else (None, None)


def _check_one_recipe_per_name(recipe_files: dict[str, dict[bytes, list[Path]]]) -> None:
    """UserError where runs of one recipe name were trained under different recipe files (their copies,
    <run>/recipe.toml, differ: the file was edited between launches, or two files share a name): fits
    and reports group runs by name and would pool two recipes."""
    from scaling.errors import UserError

    for name, versions in recipe_files.items():
        if len(versions) > 1:
            groups = "; ".join(f"{', '.join(d.name for d in dirs[:3])}{' ...' if len(dirs) > 3 else ''} "
                               f"({count(len(dirs), 'run')})" for dirs in versions.values())
            raise UserError(f"the runs of recipe {name!r} were trained under {len(versions)} different versions of its "
                            f"file (their recipe.toml copies differ): {groups}; move the runs of the versions you do "
                            "not want out of the sweep folder, or give each version a name of its own and relaunch")


def _check_one_run_per_point(points: dict[tuple, dict[str, list[Path]]]) -> None:
    """UserError where finished runs share a grid point (their config.json's family, size, recipe, tokens,
    seed, lr_mult) but not their settings (`points`: grid point -> config.json's text -> run folders):
    the spec was edited between launches, and fits and reports would take two losses for one point."""
    from scaling.errors import UserError

    for point, versions in points.items():
        if len(versions) > 1 and point != grid_point({}):  # (runs without a config.json are not compared)
            (a, (d0, *_)), (b, (d1, *_)) = list(versions.items())[:2]
            differ = setting_differences(json.loads(a), json.loads(b), (f"in {d0.name}", f"in {d1.name}"))
            raise UserError(f"runs {d0.name} and {d1.name} are one grid point ({point_label(json.loads(a))}) trained "
                            f"under different settings ({differ}): the spec changed between launches; "
                            "move the runs of the version you do not want out of the sweep folder")


# The record's numbers: a text or a list here would turn a column of results.parquet into strings
NUMERIC_FIELDS = ("n_params", "n_params_total", "tokens", "flops", "flops_exact", "seed", "val_loss", "val_bpb",
                  "tokens_per_s", "mfu", "epochs", "wall_s", "vocab_size")


def read_result(path: Path, run_id: str | None = None) -> tuple[dict | None, str | None]:
    """A run's result.json as (record, problem): (record, None) for a result record, (None, None) where
    there is no file, (None, what is wrong) for a damaged one (not JSON, or not a result record; or,
    given `run_id`, the record of another run)."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"not JSON: {e}"
    problem = record_problem(record, run_id)
    return (None, problem) if problem else (record, None)


def record_problem(record: Any, run_id: str | None = None) -> str | None:
    """What makes a result.json's content no result record (a fault to name, not a row of nulls); None if it is one.
    `run_id`: the run whose folder holds it (a sweep's run folder is named by its run id), where known: another
    run's record there (copied in by hand) would count that run twice and this one with the other's loss."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [k for k in ("run_id", "status", "recipe") if not isinstance(record.get(k), str)]
    if missing:
        return f"no {', '.join(missing)}"
    if record["status"] not in RESULT_STATES:  # run_state would count it failed, but a relaunch would keep it
        return f"status {record['status']!r} is not one of {', '.join(RESULT_STATES)}"
    if run_id is not None and record["run_id"] != run_id:
        return f"run_id {record['run_id']!r} is another run's (this folder is run {run_id!r})"
    wrong = [k for k in NUMERIC_FIELDS if record.get(k) is not None
             and (isinstance(record[k], bool) or not isinstance(record[k], (int, float)))]
    return f"{', '.join(wrong)} not a number" if wrong else None


def _flat(value: Any) -> Any:
    # Nested values (versions) become JSON text so every row has one column type.
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def write_parquet(df: pl.DataFrame, out: Path) -> None:
    # Serialised in memory (a sweep's table is small), then written: polars reports a failed write to
    # a file as a parquet format error, where a plain write says "no space left" and names the file.
    buffer = io.BytesIO()
    df.write_parquet(buffer)
    write_atomic(out, buffer.getvalue())
