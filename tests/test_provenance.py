"""scaling.git_commit: the commit a run came from, marked -dirty where tracked files differ from it."""

import subprocess

import scaling


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_changed_tracked_file_marks_the_commit_dirty(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "model.py").write_text("width = 64\n")
    _git(tmp_path, "add", "model.py")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert scaling.git_commit(where=tmp_path) == head
    (tmp_path / "notes.txt").write_text("untracked: not part of what ran\n")
    assert scaling.git_commit(where=tmp_path) == head
    (tmp_path / "model.py").write_text("width = 128\n")
    assert scaling.git_commit(where=tmp_path) == head + "-dirty"
    assert scaling.git_commit(short=True, where=tmp_path) == _git(tmp_path, "rev-parse", "--short", "HEAD") + "-dirty"


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert scaling.git_commit(where=tmp_path) is None


def test_a_run_records_the_commit_it_started_from_not_the_one_checked_out_when_it_ends(tmp_path, monkeypatch):
    """The process runs the code it imported at the start: a `git pull` or commit during a long run
    must not relabel it (it recorded the checkout's commit at the end)."""
    import scaling.train as train_module
    from scaling.config import RunConfig

    checkout = {"head": "started-at"}
    monkeypatch.setattr(scaling, "git_commit", lambda *a, **k: checkout["head"])
    build = train_module.build

    def build_then_commit(config):
        built = build(config)
        checkout["head"] = "committed-during-the-run"
        return built

    monkeypatch.setattr(train_module, "build", build_then_commit)
    config = RunConfig(family="nanochat", size="0.5M", recipe="bf16", tokens=2 * 4 * 64, seq_len=64, batch_size=4,
                       eval_tokens=256)
    assert train_module.train(config, tmp_path / "run", progress=False)["git_commit"] == "started-at"


def test_a_run_records_each_process_its_commit_device_and_versions(tmp_path, monkeypatch):
    """A run preempted under one commit and resumed under another recorded the second alone, and its versions
    and device were its last process's alone (a CPU's as "x86_64", platform.processor, though CPU models give
    different bits): the record now lists each process's commit, device (a CPU's model name) and versions
    (`processes`; consecutive processes with the same record once), their commits (`git_commits`), and the
    last process's `git_commit`, `versions` and `device`."""
    import os
    import signal

    import pytest

    import scaling.train as train_module
    from scaling.config import RunConfig

    # three processes: commit one, then commit two, then commit two under another torch; the first two preempted
    now = {"commit": "one", "torch": "2.0-first", "stop_at": 1}
    monkeypatch.setattr(scaling, "git_commit", lambda *a, **k: now["commit"])
    versions = train_module.versions
    monkeypatch.setattr(train_module, "versions", lambda: {**versions(), "torch": now["torch"]})
    step = train_module.LanguageModel.training_step

    def preempted(self, batch, batch_idx):
        if int(batch[0]) == now["stop_at"]:
            os.kill(os.getpid(), signal.SIGUSR1)  # as SLURM's warning: the run checkpoints at the step's end
        return step(self, batch, batch_idx)

    monkeypatch.setattr(train_module.LanguageModel, "training_step", preempted)
    config = RunConfig(family="nanochat", size="0.5M", recipe="bf16", tokens=4 * 4 * 64, seq_len=64, batch_size=4,
                       eval_tokens=256)
    for change in ({"commit": "two", "stop_at": 2}, {"torch": "2.0-second", "stop_at": None}):
        with pytest.raises(train_module.Preempted):
            train_module.train(config, tmp_path / "run", progress=False)
        now.update(change)
    record = train_module.train(config, tmp_path / "run", progress=False)
    processes = record["processes"]
    assert [(p["git_commit"], p["versions"]["torch"]) for p in processes] == [
        ("one", "2.0-first"), ("two", "2.0-first"), ("two", "2.0-second")]
    assert record["git_commits"] == ["one", "two"] and record["git_commit"] == "two"
    assert record["versions"]["torch"] == "2.0-second"
    assert record["device"] == scaling.cpu_name() == processes[0]["device"]
    with open("/proc/cpuinfo") as f:  # (Linux: the model's name, not the architecture's)
        model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    assert record["device"] == model
