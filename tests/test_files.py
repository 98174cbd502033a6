"""scaling.files: atomic writes leave the old file or the new one, never a torn one or a stray temp,
and the new file has the permissions any file the user writes gets (not mkstemp's 0600)."""

from __future__ import annotations

import json
import stat

import pytest

from scaling.files import atomic_path, write_atomic, write_json_atomic


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
