"""scaling.files: atomic writes leave the old file or the new one, never a torn one or a stray temp,
and the new file has the permissions any file the user writes gets (not mkstemp's 0600); JSON is strict."""

from __future__ import annotations

import json
import stat

import pytest

from scaling.errors import UserError
from scaling.files import atomic_path, check_output, write_atomic, write_json_atomic


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_get_the_mode_open_gives(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # open() applies the process umask: the mode a colleague's read depends on
    out = tmp_path / "sub" / "result.json"
    write_json_atomic(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    assert _mode(out) == _mode(plain) and _mode(out) != 0o600
    write_atomic(out, "again")  # a replacement too
    assert out.read_text() == "again" and _mode(out) == _mode(plain)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    out = tmp_path / "fits.json"
    write_atomic(out, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fits.json"]


def test_a_folder_that_takes_no_temp_file_is_named_as_the_users_path(tmp_path, monkeypatch):
    """mkstemp's refusal (/proc takes no new file: `scaling fit --out /proc/x.json`) named the hidden
    temp file (`cannot use /proc/.x.json.1zqp2q6w.tmp`), not the user's --out."""
    import errno
    import tempfile

    def refuse(dir, prefix, suffix):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", f"{dir}/{prefix}abc{suffix}")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OSError) as e:
        write_atomic(tmp_path / "x.json", "{}")
    assert e.value.filename == str(tmp_path / "x.json") and e.value.errno == errno.ENOENT
    assert list(tmp_path.iterdir()) == []


def test_json_is_strict(tmp_path):
    """Every JSON file the project writes parses anywhere: NaN and inf become null, numpy values
    and tuples plain JSON."""
    import numpy as np
    out = tmp_path / "r.json"
    write_json_atomic(out, {"loss": float("nan"), "spike": float("inf"), "ci": (1.0, np.float64(2.5)),
                            "n": np.int64(3), "curve": np.array([1.0, np.nan]), 4: "key"})
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"loss": None, "spike": None, "ci": [1.0, 2.5], "n": 3, "curve": [1.0, None], "4": "key"}


@pytest.mark.parametrize("folder", [True, False])
def test_an_empty_output_path_is_refused_not_taken_as_the_working_folder(folder):
    """(Path("") is "."; a report built there replaces the user's files of its names.)"""
    with pytest.raises(UserError, match="--out is empty; pass a (folder|file) path"):
        check_output("", folder=folder)


def test_a_checkpoints_flipped_bytes_are_found_by_its_crcs_not_its_directory(tmp_path):
    """torch loads an archive without checking its CRC-32s: only `contents` (train's check before it
    resumes) finds bytes flipped inside a tensor; the directory check (`sweep launch`'s) is cheap and blind."""
    import torch

    from scaling.files import checkpoint_problem

    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(4096)}}, path)
    assert checkpoint_problem(path) is None and checkpoint_problem(path, contents=True) is None
    data = bytearray(path.read_bytes())
    at = bytes(data).index(torch.ones(4096).numpy().tobytes()[:64])  # inside the tensor's bytes
    data[at + 100] ^= 0x01
    path.write_bytes(data)
    assert not torch.equal(torch.load(path)["state_dict"]["w"], torch.ones(4096))  # loads, wrong
    assert checkpoint_problem(path) is None
    assert checkpoint_problem(path, contents=True) == "its member last/data/0 fails its CRC-32 check"


def test_a_checkpoints_step_is_read_without_torch_and_none_where_it_is_damaged(tmp_path):
    """`checkpoint_step`: Lightning's global_step, decoded from the archive's pickle without loading it (a resume cuts
    its logs back to it before it builds the model; `sweep status` counts a resumed process's progress from it), at
    every size of pickled int; None for a file that is no checkpoint, names no step, or holds one only where it is
    not the top dict's first entries (tests/test_train.py checks Lightning's own checkpoint against torch.load)."""
    import torch

    from scaling.files import checkpoint_step

    path = tmp_path / "last.ckpt"
    for step in (0, 7, 255, 256, 65_536, 2**31, 2**40):  # (BININT1, BININT2, BININT, LONG1)
        torch.save({"epoch": 0, "global_step": step, "state_dict": {"w": torch.ones(4)}, "loops": {}}, path)
        assert checkpoint_step(path) == step
    torch.save({"epoch": 0, "state_dict": {"w": torch.ones(4)}}, path)
    assert checkpoint_step(path) is None
    # a global_step of a nested dict (a callback's or a loop's state) is not the checkpoint's: read before the top
    # dict's (the first such string), it was taken as the run's step; the top's is read only among its first entries
    torch.save({"epoch": 0, "global_step": 7, "loops": {"global_step": 3}}, path)
    assert checkpoint_step(path) == 7
    for nested_first in ({"callbacks": {"global_step": 3}, "global_step": 7},
                         {"epoch": 0, "loops": {"global_step": 3}, "global_step": 7},
                         {"epoch": 0, ("global_step", 3): 7}, {"epoch": 0, "global_step": [7]}):
        torch.save(nested_first, path)
        assert checkpoint_step(path) is None, nested_first
    for damaged in (b"", b"PK\x03\x04 truncated", b"not a zip"):
        path.write_bytes(damaged)
        assert checkpoint_step(path) is None
    assert checkpoint_step(tmp_path / "missing.ckpt") is None


def test_a_lock_file_removed_by_its_holder_is_not_held_by_the_process_waiting_on_it(tmp_path):
    """A holder may remove its lock file (a failed `data prepare` leaves its --out as it found it): the process
    that waited on the removed file, then got it, held a lock no newcomer sees (the newcomer makes a new file at
    the path and locks that), and both went on at once. The waiter now locks the file at the path."""
    import os
    import subprocess
    import sys

    from scaling.files import held, take_exclusive

    lock = tmp_path / ".lock"
    waiter_code = ("import sys; from scaling.files import held\n"
                   f"with held({str(lock)!r}, waiting=lambda: print('waiting', flush=True)):\n"
                   "    print('holding', flush=True); sys.stdin.read()")
    with held(lock) as made:
        assert made  # (this process made the file: its to remove)
        waiter = subprocess.Popen([sys.executable, "-c", waiter_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert waiter.stdout.readline() == "waiting\n"  # blocked on this file's lock
        lock.unlink()
    try:
        assert waiter.stdout.readline() == "holding\n"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)  # a newcomer, as `held` opens the path
        try:
            assert not take_exclusive(fd, tries=1)  # the waiter holds the file at the path
        finally:
            os.close(fd)
    finally:
        waiter.communicate("", timeout=30)
    with held(lock) as made:
        assert not made  # (the waiter made the file at the path and left it)
