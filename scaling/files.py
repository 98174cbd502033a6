"""Atomic file writes: write a temp file beside the target, fsync, rename. A reader never sees half
a file, and a crash leaves the previous file (or none), never a torn one. Torch-free."""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import itertools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

# A full disk or quota: the errors after which every further write to that file system fails too
SPACE_ERRORS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT") if hasattr(errno, name))


@functools.cache
def _new_file_mode() -> int:
    """The mode `open()` gives a new file under the process's umask (read once: os.umask can only be
    read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_replace(tmp: Path, path: Path) -> None:
    """Flush `tmp` to disk, then rename it over `path`."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temp path beside `path` to write to; it replaces `path` when the block ends without error,
    and is removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # (a folder that takes no new file: /proc) the user's path, not the temp name
        raise OSError(e.errno, e.strerror, str(path)) from e
    os.close(fd)
    tmp = Path(name)
    # mkstemp makes the file 0600; a result on shared cluster storage must be readable as any file
    # the user writes is (results, reports: colleagues read them).
    os.chmod(tmp, _new_file_mode())
    try:
        yield tmp
        fsync_replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.filename in (None, str(tmp)):  # name the file the user asked for, not its hidden temp name
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def take_exclusive(fd: int, tries: int = 20) -> bool:
    """Take the exclusive flock on fd without waiting; False where another process holds it. A probe (`sweep
    status` asking whether a run or a launch holds its lock) holds it shared for microseconds: a try that
    meets one is made again a few ms later, so a probe at the wrong moment does not read as a holder."""
    import fcntl
    import time

    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if i + 1 < tries:
                time.sleep(0.005)
    return False


@contextlib.contextmanager
def held(path: str | Path, exclusive: bool = True, waiting: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold a flock on the file `path` (made where missing) for the block, exclusive or shared, waiting for it
    (`waiting`: called once where another process holds it); yields whether this process made the file. The
    kernel drops the lock when its process dies, and children do not inherit it. The file stays, unless its
    holder removes it inside the block (one it made, to leave a folder as it found it): a process that waited
    on the removed file then finds it no longer at `path`, and locks the file there (as a newcomer does)."""
    fd, made = _locked_fd(Path(path), exclusive, waiting)
    try:
        yield made
    finally:
        os.close(fd)


def _locked_fd(path: Path, exclusive: bool, waiting: Callable[[], None] | None) -> tuple[int, bool]:
    """(a descriptor of the file at `path`, locked, and whether this call made the file)."""
    import fcntl

    while True:
        try:
            fd, made = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, _new_file_mode()), True
        except FileExistsError:
            try:
                fd, made = os.open(path, os.O_RDWR), False
            except FileNotFoundError:  # (removed in between by its holder)
                continue
        try:
            if not exclusive:
                fcntl.flock(fd, fcntl.LOCK_SH)
            elif not take_exclusive(fd):
                if waiting is not None:
                    waiting()
                    waiting = None
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _is_at(fd, path):
                return fd, made
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # a file its holder removed while this process waited for it: the one at `path` now


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is the file at `path` (not one removed, or replaced by another)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def locked(path: str | Path) -> contextlib.AbstractContextManager[bool]:
    """Hold an exclusive flock on `.<name>.lock` beside `path` for the block (waiting for it): a writer that
    reads `path`, changes it and writes it back takes it around all three, so that two processes doing so
    at once never lose each other's changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return held(path.parent / f".{path.name}.lock")


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temp files `atomic_path(path)` left beside `path` when its process was killed
    mid-write (SIGKILL: no cleanup runs); returns them. Only for a caller that knows no other process
    writes `path` now (a run's files under its lock)."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp"))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def write_atomic(path: str | Path, data: str | bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


def cache_dir() -> Path:
    """Where derived files live (prepared built-in and sweep corpora, built C libraries):
    $SCALING_CACHE, else $XDG_CACHE_HOME/fp4-scaling, else ~/.cache/fp4-scaling."""
    if os.environ.get("SCALING_CACHE"):
        return Path(os.environ["SCALING_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fp4-scaling"


def checkpoint_path(run_dir: Path) -> Path:
    """A run's last checkpoint, which a resume starts from (here, torch-free: sweeps read it too)."""
    return Path(run_dir) / "checkpoints" / "last.ckpt"


# The paths a run writes in its folder (docs/training.md, "Run directory"; a sweep's launcher adds job.json and
# train.log), each True where it is a folder. The folders come first: a file `checkpoints` is named as such.
RUN_PATHS = {"checkpoints": True, "lightning": True, "config.json": False, "recipe.toml": False, "data.json": False,
             "metrics.csv": False, "result.json": False, "lock": False, "job.json": False, "train.log": False,
             "checkpoints/last.ckpt": False}


def run_layout_problem(run_dir: str | Path) -> str | None:
    """What is wrong where one of the paths a run writes in run_dir is of the other kind (a file named checkpoints, a
    folder named metrics.csv), and how to fix it; None where none is. `check_run_layout`'s message, and a row's
    error in `scaling sweep status` (which read such a folder as a path error, or stopped on it)."""
    for name, folder in RUN_PATHS.items():
        path = Path(run_dir) / name
        if path.exists() and path.is_dir() != folder:
            return (f"{path} is {'a folder' if path.is_dir() else 'a file'}, where this run keeps "
                    f"{'a folder' if folder else 'a file'} of that name; move it away (mv {path} {path}.old), "
                    "then run again")
    return None


def check_run_layout(run_dir: str | Path) -> None:
    """UserError where one of the paths a run writes in run_dir is of the other kind (`run_layout_problem`). Checked
    before anything in run_dir is read or changed: a file `checkpoints` read as no checkpoint, and the run discarded
    its metrics.csv (`scaling.train.start_over`) and trained to its first checkpoint before the write failed."""
    from scaling.errors import UserError

    problem = run_layout_problem(run_dir)
    if problem:
        raise UserError(problem)


def checkpoint_problem(path: Path, contents: bool = False) -> str | None:
    """What makes a run's checkpoint no archive torch wrote, or None where it is one. Checkpoints are
    renamed into place whole, so this is a disk's or a hand's damage (truncated, emptied, overwritten).
    Reads the zip archive's directory only: cheap at any size and torch-free (`sweep launch` asks it of every
    run it resumes). With `contents`, also every member's CRC-32 (the whole file, ~0.3 s a GB), as `scaling
    train` checks before resuming and `sweep status` of each failed run, to say what a relaunch would do: torch
    reads an archive without checking them, and a run resumed from flipped bytes trained on from garbage
    weights without a word."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            corrupt = archive.testzip() if contents else None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        return str(e) or type(e).__name__
    if corrupt is not None:
        return f"its member {corrupt} fails its CRC-32 check"
    return None if any(n.endswith("data.pkl") for n in names) else "no pickled state in the archive"


# The key under which a run's checkpoint names its run (`LanguageModel.on_save_checkpoint`): a JSON text of
# {"run_id", "config"}; a name no other string of a checkpoint takes (pickle would store a repeat as a reference)
CHECKPOINT_RUN_KEY = "fp4_scaling_run"


def checkpoint_run(path: Path) -> dict | None:
    """The run a checkpoint is of ({"run_id", "config"}: the resolved config), or None where it names none
    (written before checkpoints named their run) or is no archive torch wrote (`checkpoint_problem` says how).
    Torch-free, for `sweep status`, and ~5 ms for a 10 MB checkpoint, whatever its tensors' size (`_pickled_value`)."""
    text = _pickled_value(path, CHECKPOINT_RUN_KEY)
    try:
        run = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return run if isinstance(run, dict) and isinstance(run.get("run_id"), str) else None


def checkpoint_step(path: Path) -> int | None:
    """The optimizer steps a run's checkpoint holds (Lightning's `global_step`: where a resume goes on from), or None
    where it is no archive torch wrote, or its dict's first entries hold no `global_step` (`_leading_value`: a
    Lightning that moved it; tests/test_train.py compares with torch.load of a real run's checkpoint). Torch-free:
    `scaling train` cuts the run's logs back to it before it builds the model, and `sweep status` counts a resumed
    process's progress from it."""
    step = _leading_value(path, "global_step")  # (Lightning's checkpoint dict's second key, after epoch)
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _pickled_value(path: Path, key: str) -> object:
    """The value pickled just after the first string `key` in a checkpoint's pickle, where it is one op's string or
    number (`_scalar`): for a key no other string of a checkpoint takes (CHECKPOINT_RUN_KEY), wherever in the dict it
    is; None where there is none, or the file is no archive torch wrote. Runs no pickle code: it decodes that one op
    (scanning all the pickle's ops took ~30 ms for a 10 MB checkpoint; torch.load with mmap=True ~70 ms, after
    torch's import)."""
    import zipfile

    name = key.encode()
    try:
        data = _checkpoint_pickle(path)
        at = data.find(name)
        # the key's own op: BINUNICODE (torch's protocol 2) or SHORT_BINUNICODE, its length, its bytes
        own = (b"X" + len(name).to_bytes(4, "little"), bytes([0x8C, len(name)]))
        if at < 0 or not (data[at - 5 : at] == own[0] or data[at - 2 : at] == own[1]):
            return None
        op, value = next(_ops(data, at + len(name)))  # (a dict's value is pickled just after its key)
        return value if _scalar(op, value) else None
    except (OSError, zipfile.BadZipFile, EOFError, StopIteration, ValueError):
        return None


def _leading_value(path: Path, key: str) -> object:
    """The value of `key` in the dict a checkpoint's pickle holds at its top, where it is among the dict's first
    entries whose keys and values are each one op's string or number (Lightning's epoch, global_step and version);
    None where it is not: a key of that name in a nested dict (a loop's or a callback's state) is never read as the
    top's. Runs no pickle code, and decodes a few ops: the top dict's (EMPTY_DICT, MARK), then its entries while they
    are such (the unpickler's stack holds nothing else then, and a string or number takes no entry into it)."""
    import zipfile

    try:
        ops = _ops(_checkpoint_pickle(path))
        if [op.name for op, _ in itertools.islice(ops, 3)] != ["PROTO", "EMPTY_DICT", "MARK"]:
            return None
        op, arg = next(ops)
        while isinstance(arg, str) and _scalar(op, arg):  # an entry's key
            name, (value_op, value), (op, arg) = arg, next(ops), next(ops)  # its value, and the op after them
            if not _scalar(value_op, value):
                return None
            if name == key:  # (the entry ends where the top dict's SETITEMS or another entry's key comes next)
                return value if op.name == "SETITEMS" or not op.stack_before else None
    except (OSError, zipfile.BadZipFile, EOFError, StopIteration, ValueError):
        return None
    return None


def _checkpoint_pickle(path: Path) -> bytes:
    """A checkpoint's pickle (data.pkl: no tensor); an OSError, BadZipFile, EOFError or StopIteration where the file
    is no archive torch wrote."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))


def _ops(data: bytes, at: int = 0) -> Iterator[tuple[Any, Any]]:
    """pickletools' (op, argument) of a pickle from byte `at` on, without those that leave the unpickler's stack as it
    is (the memo's PUTs, FRAME)."""
    import pickletools

    stream = io.BytesIO(data)
    stream.seek(at)
    return ((op, arg) for op, arg, _ in pickletools.genops(stream)
            if op.name not in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "FRAME"))


def _scalar(op: Any, arg: Any) -> bool:
    """Whether the op pushes one string or number (its `arg`) and takes nothing from the unpickler's stack: not a
    memo reference (BINGET's arg is the memo's index), a global or a container."""
    import pickletools

    kinds = (pickletools.pyunicode, pickletools.pyint, pickletools.pylong, pickletools.pyinteger_or_bool,
             pickletools.pyfloat)
    return not op.stack_before and len(op.stack_after) == 1 and op.stack_after[0] in kinds and arg is not None


def checkpoint_of_another_run(run_dir: Path, run_id: str) -> dict | None:
    """The run (`checkpoint_run`) whose checkpoint run_dir holds where it is not the run `run_id`, else None:
    the one rule `scaling train` refuses a resume by, and `sweep status` and `launch` say it by. A checkpoint
    that names no run (from before they did) is taken as the folder's: its config.json is then the only check."""
    path = checkpoint_path(run_dir)
    run = checkpoint_run(path) if path.exists() else None
    return run if run is not None and run["run_id"] != run_id else None


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _is_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except ValueError:  # (JSONDecodeError, UnicodeDecodeError)
        return False
    return True


# The file kinds an output may be checked for (check_output's suffix): suffix -> (name, test of an
# existing file's bytes).
OUTPUT_KINDS = {".parquet": ("a Parquet table", _is_parquet), ".json": ("a JSON file", _is_json)}


def check_output(path: str | Path, folder: bool, flag: str = "--out", suffix: str | None = None) -> Path:
    """Refuse, before any work, an output this process could not write: a folder where a file is
    wanted or a file where a folder is, or a location whose nearest existing folder is not writable
    (read-only file system, permissions). With a suffix (a key of OUTPUT_KINDS: the kind of file
    written), also a name not ending in it (out.csv for Parquet bytes), and an existing file that is
    not of that kind (a file the user keeps, never replaced; an empty one is). Returns the path. (A
    check, not a guarantee: the write itself still goes through atomic_path.)"""
    from scaling.errors import UserError

    want = "a folder" if folder else "a file"
    if str(path) == "":  # Path("") is the working directory: a report would land among its files
        raise UserError(f"{flag} is empty; pass {want} path (e.g. {'reports/NAME' if folder else 'out.json'})")
    path = Path(path).expanduser()
    if path.exists() and path.is_dir() != folder:
        raise UserError(f"{flag} {path} is {'a folder' if path.is_dir() else 'a file'}, not {want}; "
                        f"pass {want} path")
    parent = path if folder and path.exists() else path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder; pass {want} path under a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot write in {parent} (read-only or no permission); "
                        f"choose a writable location")
    if suffix is not None:
        kind, holds = OUTPUT_KINDS[suffix]
        if path.suffix.lower() != suffix:
            example = path.with_name(path.stem + suffix) if path.stem else Path(f"out{suffix}")
            raise UserError(f"{flag} {path}: the output is {kind}, so its name must end in {suffix}; "
                            f"pass e.g. {example}")
        if path.is_file() and path.stat().st_size and not holds(path):
            raise UserError(f"{flag} {path} exists and is not {kind}; it is not overwritten: choose another "
                            f"name (or remove that file first)")
    return path


def json_ready(obj: Any) -> Any:
    """NaN/inf -> None, tuples -> lists, arrays and numpy scalars -> Python: strict JSON that any
    parser reads."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if hasattr(obj, "tolist"):
        return json_ready(obj.tolist())
    return obj


def write_json_atomic(path: str | Path, obj: Any, indent: int = 1, default=None) -> None:
    """obj as strict JSON (`json_ready`), written atomically."""
    write_atomic(path, json.dumps(json_ready(obj), indent=indent, default=default) + "\n")
