"""Every verb that writes refuses, before its work and in one line (exit 2), an output it could not
write: a read-only location (a real read-only tmpfs mount), a file where a folder is wanted, a
folder where a file is wanted."""

from __future__ import annotations

import subprocess

import pytest

from refusal import refused

CSV = "recipe,N,D,loss\nbf16,1e6,2e7,3.5\nbf16,2e6,4e7,3.2\nbf16,4e6,8e7,3.0\n"


@pytest.fixture
def read_only(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)], capture_output=True)
    if mounted.returncode:
        pytest.skip("cannot mount a read-only tmpfs here (needs root and mount)")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def _verbs(tmp_path, out: str, folder: str) -> list[list[str]]:
    """(argv) per verb, writing to `out` (a file output) or `folder` (a folder output)."""
    csv = tmp_path / "results.csv"
    csv.write_text(CSV)
    sweep = tmp_path / "sweep"
    sweep.mkdir(exist_ok=True)
    (sweep / "sweep.json").write_text('{"runs": []}')
    return [
        ["fit", str(csv), "--bootstrap", "0", "--out", out],
        ["bench", "fit", "--out", out],
        ["sweep", "collect", str(sweep), "--out", out],
        ["report", str(csv), "--out", folder],
        ["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "64k", "--out", folder],
        ["demo", "--out", folder],
    ]


def test_a_read_only_location_is_refused_before_the_work(tmp_path, read_only, capsys):
    for argv in _verbs(tmp_path, str(read_only / "out.json"), str(read_only / "out")):
        refused(argv, capsys, str(read_only), "cannot write")


def test_the_wrong_kind_of_path_is_refused(tmp_path, capsys):
    a_file, a_folder = tmp_path / "a_file", tmp_path / "a_folder"
    a_file.write_text("x")
    a_folder.mkdir()
    for argv in _verbs(tmp_path, str(a_folder), str(a_file)):
        refused(argv, capsys, "--out", "not a")
    refused(["fit", str(tmp_path / "results.csv"), "--out", str(a_file / "f.json")], capsys, "is a file")
