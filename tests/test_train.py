"""One training run: config and run_id, resume to the bit, divergence, preemption, CLI errors."""

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scaling.cli import main
from scaling.errors import UserError
from scaling.config import RunConfig
from scaling.train import METRICS_COLUMNS, PREEMPTED_EXIT_CODE, LanguageModel, Preempted, train, train_batch
from sweeps.store import RESULT_FIELDS

# 0.5M nanochat, 40 steps of 4 x 64 tokens: seconds on 2 CPU cores.
BASE = dict(family="nanochat", size="0.5M", recipe="bf16", tokens=40 * 4 * 64, seq_len=64, batch_size=4,
            eval_interval=10, checkpoint_interval=5, eval_tokens=2048)


def _config(**changes) -> RunConfig:
    return RunConfig(**{**BASE, **changes})


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run."""
    run_dir = tmp_path_factory.mktemp("reference")
    return run_dir, train(_config(), run_dir, progress=False)


# A run the signal tests stop from outside: 160 steps, ~9 s on a 2-core CPU, so that the signal, sent once its first
# checkpoint (step 5) is seen, comes seconds before its end even while the test's process waits for a busy core (40
# steps, ~2.4 s past step 5, ended first under a loaded xdist run now and then: exit 0, no signal taken)
LONG = _config(tokens=160 * 4 * 64, eval_interval=40)


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory) -> dict:
    """LONG's uninterrupted run's result."""
    return train(LONG, tmp_path_factory.mktemp("long-reference"), progress=False)


def _start_cli(config: RunConfig, run_dir: Path) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir.parent / f"{run_dir.name}.json"
    path.write_text(config.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return subprocess.Popen([sys.executable, "-m", "scaling.cli", "train", "--config", str(path), "--out", str(run_dir),
                             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(proc: subprocess.Popen, run_dir: Path) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not ckpt.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "no checkpoint within 300 s"
        time.sleep(0.02)


def _killed_after_checkpoint(tmp_path: Path) -> tuple[Path, int]:
    """A run of `_config()` SIGKILLed after its first checkpoint (no result), and the step that checkpoint holds."""
    run_dir = tmp_path / "killed"
    proc = _start_cli(_config(), run_dir)
    _wait_for_checkpoint(proc, run_dir)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = _checkpoint_step(run_dir)
    assert 0 < step < 40
    return run_dir, step


def _checkpoint_step(run_dir: Path) -> int:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]


@pytest.mark.parametrize("name, peak", [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                         ("NVIDIA H100 NVL", 835e12), ("NVIDIA H200", 989e12),
                                         ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12),
                                         ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA GeForce RTX 4090", None)])
def test_mfu_peak_is_the_cards_own(monkeypatch, name, peak):
    """MFU's denominator is the dense BF16 peak of the card the run is on: an H100 PCIe (756 TFLOP/s)
    or an NVL card (835) is not the SXM card (989), which would understate their MFU by 15-24%."""
    from scaling.train import peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_flops(torch.device("cuda")) == peak


def _copy_without(run_dir: Path, to: Path, *names: str) -> Path:
    """A copy of a finished run's folder without the named files (result.json: the run stopped after its last
    checkpoint, before its record), as a preempted or damaged run would leave it."""
    shutil.copytree(run_dir, to)
    for name in names:
        (to / name).unlink()
    return to


def test_result_record_and_run_directory(reference):
    run_dir, result = reference
    assert set(RESULT_FIELDS) <= set(result)
    assert result["status"] == "completed" and result["tokens"] == BASE["tokens"]
    assert result["flops"] == 6 * result["n_params"] * result["tokens"] < result["flops_exact"]
    assert result["vocab_size"] == 4096 and result["mfu"] is None  # no peak FLOP/s for a CPU
    assert result["lr_mult"] == 1.0  # an LR sweep's runs differ by it: collect, fits and pairs read it here
    assert result["diverged_at_step"] is None
    assert json.loads((run_dir / "result.json").read_text()) == json.loads(json.dumps(result))
    assert RunConfig.from_json(run_dir / "config.json").run_id == result["run_id"] == _config().run_id
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("step,tokens,val_loss,val_bpb") and len(lines) == 1 + 4  # steps 10, 20, 30, 40
    # the run learned something in 10k tokens: below the uniform ln(4096) = 8.3 nats
    assert result["val_loss"] < 7.5
    # a second call returns the record without training
    start = time.perf_counter()
    assert train(_config(), run_dir) == json.loads((run_dir / "result.json").read_text())
    assert time.perf_counter() - start < 5
    # a result.json damaged by hand or disk: one line with the way out, not a traceback
    record = (run_dir / "result.json").read_bytes()
    try:
        (run_dir / "result.json").write_text('{"run_id": "3599')
        with pytest.raises(UserError, match=r"result.json is damaged \(not JSON: .*\): move it away \(mv "):
            train(_config(), run_dir)
    finally:
        (run_dir / "result.json").write_bytes(record)


def test_a_real_checkpoints_step_and_run_are_read_as_torch_loads_them(reference):
    """`checkpoint_step` and `checkpoint_run` decode Lightning's checkpoint of a real run without torch, from where
    Lightning's layout puts them (global_step among the top dict's first entries, the run's JSON text after the key
    only this project writes): a Lightning that moved or renamed global_step fails here, not in a resume that cut
    nothing or a status that counted no progress."""
    from scaling.files import CHECKPOINT_RUN_KEY, checkpoint_run, checkpoint_step

    path = reference[0] / "checkpoints" / "last.ckpt"
    loaded = torch.load(path, weights_only=False, map_location="cpu")
    assert checkpoint_step(path) == loaded["global_step"] == 40
    assert checkpoint_run(path) == json.loads(loaded[CHECKPOINT_RUN_KEY])
    assert checkpoint_run(path)["run_id"] == reference[1]["run_id"]


def _doc_table(title: str) -> dict[str, list[str]]:
    """docs/training.md's table under the bold `title`: its first column's names (a cell may name several,
    "family, size") -> the row's other cells."""
    text = (Path(__file__).parent.parent / "docs" / "training.md").read_text()
    rows = text.split(f"**{title}**", 1)[1].split("\n\n")[1].splitlines()[2:]  # (after the header and its rule)
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return {name: rest for first, *rest in cells for name in first.split(", ")}


def test_the_docs_give_every_result_field_and_metrics_column_with_its_type_and_unit(reference):
    """result.json's fields and metrics.csv's columns had no units in the docs (metrics.csv's `lr` is the schedule's
    multiplier, not a learning rate): each has its row in docs/training.md, result.json's with the type the
    record has (recipe_file: a run under a recipe file only)."""
    run_dir, result = reference
    fields = _doc_table("result.json, field by field")
    assert set(fields) == set(result) | {"recipe_file"}
    kinds = {"integer": int, "number": (int, float), "string": str, "object": dict, "list": list}
    for name, value in result.items():
        kind = fields[name][0]
        assert (value is None and kind.endswith(" or null")) or (
            isinstance(value, kinds[kind.removesuffix(" or null")]) and not isinstance(value, bool)), (name, value)
    columns = _doc_table("metrics.csv, column by column")
    assert list(columns) == list(METRICS_COLUMNS)
    assert (run_dir / "metrics.csv").read_text().splitlines()[0] == ",".join(columns)


def test_val_bpb_is_the_nats_scored_over_the_bytes_of_the_text_scored(reference):
    """val_bpb divided the windows' mean loss by the whole validation split's bytes per token, not by the bytes
    of the windows' own text: off by their ratio. It is the targets' nats / ln 2 / the UTF-8 bytes they spell."""
    from scaling import data
    from scaling.train import val_windows

    run_dir, result = reference
    d = data.builtin_data_dir()
    tok, meta = data.load_tokenizer(d), data.read_meta(d)
    targets = val_windows(data.load_tokens(d, "val"), BASE["eval_tokens"], BASE["seq_len"])[:, 1:]
    text_bytes = sum(len(tok.decode(row.tolist()).encode("utf-8")) for row in targets)  # (decode drops EOTs: no text)
    expected = result["val_loss"] * targets.numel() / math.log(2) / text_bytes
    assert result["val_bpb"] == pytest.approx(expected, rel=1e-12) and result["bpb_bytes"] == "scored text"
    assert result["val_bpb"] != pytest.approx(result["val_loss"] / math.log(2) / meta["bytes_per_token"], rel=1e-4)
    last = (run_dir / "metrics.csv").read_text().splitlines()[-1].split(",")
    assert float(last[3]) == result["val_bpb"]


def test_a_row_evaluated_before_bytes_were_counted_says_so(reference, tmp_path):
    """A run resumed at its last step from a checkpoint of code that divided by the split's average (it does not
    record bpb_bytes) keeps that row's val_bpb, and result.json says how it was counted."""
    run_dir, result = reference
    old = _copy_without(run_dir, tmp_path / "old", "result.json")
    ckpt = old / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)
    callback = state["callbacks"]["RunDirectory"]
    assert callback.pop("bpb_bytes") == "scored text"
    callback["rows"][-1]["val_bpb"] = 1.5  # (the old definition's value, kept)
    torch.save(state, ckpt)
    resumed = train(_config(), old, progress=False)
    assert (resumed["val_bpb"], resumed["bpb_bytes"]) == (1.5, "split average")
    assert resumed["val_loss"] == result["val_loss"]


def test_a_run_resumed_at_its_last_step_keeps_its_training_rate(reference, tmp_path):
    """Stopped after its last step's checkpoint, before result.json (a preemption then): the relaunch
    times no step of its own, and reports the rate its earlier process measured, not NaN."""
    run_dir, result = reference
    again = _copy_without(run_dir, tmp_path / "again", "result.json")
    assert _checkpoint_step(again) == 40  # the last step
    resumed = train(_config(), again, progress=False)
    assert resumed["tokens_per_s"] == result["tokens_per_s"] > 0
    assert resumed["val_loss"] == result["val_loss"]


def test_a_checkpoint_whose_config_json_is_lost_resumes_its_own_run_only(reference, tmp_path, capsys):
    """A run folder with a checkpoint and no config.json (lost by hand or disk) was resumed under any config asked
    for (an nvfp4 checkpoint trained on as bf16): the checkpoint names its run, another run is refused (one line
    naming both, exit 2) and the same run resumes, its config.json written again."""
    run_dir, result = reference
    lost = _copy_without(run_dir, tmp_path / "lost", "config.json", "result.json")
    other = _config(lr_mult=2.0)
    args = ["train", "--config", str(run_dir / "config.json"), "--lr-mult", "2", "--out", str(lost), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {lost} holds the checkpoint of another run ({result['run_id']}, not {other.run_id}: "
                   "lr_mult 1.0 there, 2.0 here); choose another --out directory, or give that run's settings to "
                   "resume it\n"), err
    assert sorted(p.name for p in lost.iterdir()) == ["checkpoints", "data.json", "lightning", "lock", "metrics.csv"]
    resumed = train(_config(), lost, progress=False)  # (at its last step: nothing left to train)
    assert resumed["val_loss"] == result["val_loss"] and resumed["run_id"] == result["run_id"]
    assert RunConfig.from_json(lost / "config.json") == _config().resolved()


@pytest.mark.parametrize("name, checkpoint, make", [("checkpoints", False, Path.touch), ("metrics.csv", True, Path.mkdir),
                                                     ("lightning", True, Path.touch), ("config.json", True, Path.mkdir),
                                                     ("lock", True, Path.mkdir)])
def test_a_run_folder_holding_a_path_of_the_wrong_kind_is_refused_before_anything_is_discarded(
        reference, tmp_path, capsys, name, checkpoint, make):
    """A file named `checkpoints` in a run's folder: `train` said it started over, deleted the stopped process's
    metrics.csv, trained to its first checkpoint and only then failed ("cannot use .../checkpoints (File exists)").
    It, and any other of the run's paths of the wrong kind, is one line naming the path, exit 2, before the folder
    changes."""
    run_dir, _ = reference
    stopped = _copy_without(run_dir, tmp_path / "stopped", "result.json")
    if not checkpoint:
        shutil.rmtree(stopped / "checkpoints")
    wrong = stopped / name
    if wrong.is_dir():
        shutil.rmtree(wrong)
    else:
        wrong.unlink(missing_ok=True)
    make(wrong)
    before = {p.relative_to(stopped): p.read_bytes() for p in stopped.rglob("*") if p.is_file() and p.name != "lock"}
    args = ["train", "--config", str(run_dir / "config.json"), "--out", str(stopped), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    kind, wanted = ("a folder", "a file") if make is Path.mkdir else ("a file", "a folder")
    assert err == (f"error: {wrong} is {kind}, where this run keeps {wanted} of that name; move it away (mv {wrong} "
                   f"{wrong}.old), then run again\n"), err
    after = {p.relative_to(stopped): p.read_bytes() for p in stopped.rglob("*") if p.is_file() and p.name != "lock"}
    assert after == before


def test_a_checkpoint_the_models_code_has_changed_from_since_is_one_line(reference, tmp_path):
    """The code changed between the run's processes (a model's or a recipe's weights renamed, added, reshaped):
    the resume was Lightning's load_state_dict traceback; it is one line naming the weights that differ, the
    commit that wrote the checkpoint, and the two ways out."""
    run_dir, _ = reference
    changed = _copy_without(run_dir, tmp_path / "changed", "result.json")
    ckpt = changed / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)
    name = next(k for k in state["state_dict"] if k.endswith(".weight"))
    state["state_dict"][name + "_old"] = state["state_dict"].pop(name)
    torch.save(state, ckpt)
    said = (rf"the checkpoint {ckpt} does not fit this code's model \(it lacks {re.escape(name)}; it holds "
            rf"{re.escape(name)}_old, which the model has not\): resume the run with the code that wrote it \(commit "
            rf"\w+(-dirty)?\), or move the checkpoint away \(mv {ckpt} {ckpt}.old\) to train the run from the start$")
    with pytest.raises(UserError, match=said):
        train(_config(), changed, progress=False)
    assert not (changed / "result.json").exists()


def test_kill_and_resume_gives_the_same_bits(reference, tmp_path):
    run_dir, _ = _killed_after_checkpoint(tmp_path)
    assert not (run_dir / "result.json").exists()  # a crash leaves no result
    # a damaged checkpoint is one line naming it and the way out, not Lightning's traceback
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    good = ckpt.read_bytes()
    ckpt.write_bytes(b"garbage")
    with pytest.raises(UserError, match=rf"the checkpoint {ckpt} is damaged \(.*\): to start this run over, move it"):
        train(_config(), run_dir, progress=False)
    flipped = bytearray(good)  # bytes flipped inside a tensor: torch loads them; the CRC-32s say it
    flipped[len(good) // 2] ^= 0xFF
    ckpt.write_bytes(flipped)
    with pytest.raises(UserError, match=rf"the checkpoint {ckpt} is damaged \(its member .* fails its CRC-32 check\)"):
        train(_config(), run_dir, progress=False)
    ckpt.write_bytes(good)
    # a data folder prepared again differently since the run started: refused, not trained on
    started = json.loads((run_dir / "data.json").read_text())
    assert started["vocab_size"] == 4096 and started["train_tokens"] > 0
    (run_dir / "data.json").write_text(json.dumps({**started, "vocab_size": 300}))
    with pytest.raises(UserError, match="is not the corpus the run in .* started on \\(vocab_size 300 then, 4096 now\\)"):
        train(_config(), run_dir, progress=False)
    (run_dir / "data.json").write_text(json.dumps(started))
    result = train(_config(), run_dir, progress=False)
    ref_dir, ref = reference
    assert result["val_loss"] == ref["val_loss"] and result["status"] == "completed"
    assert (run_dir / "metrics.csv").read_text().split("\n")[0] == (ref_dir / "metrics.csv").read_text().split("\n")[0]
    # every column but tokens/s: the train loss averages the same steps (those before the kill come
    # back from the checkpoint)
    val = lambda d: [line.split(",")[:6] for line in (d / "metrics.csv").read_text().splitlines()]  # noqa: E731
    assert val(run_dir) == val(ref_dir)


def test_a_data_json_that_is_no_record_is_refused_as_damaged(tmp_path):
    """data.json holding JSON that is not an object (`5`, `[]`: edited by hand) stopped a resume with an
    AttributeError traceback; it is damaged, as one that is not JSON is: one line with the way out."""
    from scaling.run_data import DATA_IDENTITY, check_run_data

    meta = {k: 1 for k in DATA_IDENTITY}
    for text in ("5", "[]", "{"):
        (tmp_path / "data.json").write_text(text)
        with pytest.raises(UserError, match=rf"^{tmp_path / 'data.json'} is damaged: move it away \(mv "):
            check_run_data(tmp_path, meta, "builtin")
        assert (tmp_path / "data.json").read_text() == text  # left as it was


def _rewrite_checkpoint_run(ckpt: Path, change) -> None:
    """Rewrite the run record a checkpoint holds (its `fp4_scaling_run` JSON) through `change(record)`."""
    from scaling.files import CHECKPOINT_RUN_KEY

    state = torch.load(ckpt, weights_only=False)
    record = json.loads(state[CHECKPOINT_RUN_KEY])
    change(record)
    state[CHECKPOINT_RUN_KEY] = json.dumps(record)
    torch.save(state, ckpt)


def test_a_lost_data_json_is_written_again_only_once_the_checkpoint_vouches_for_the_data(reference, tmp_path):
    """data.json deleted between a preemption and the resume: the resume wrote a new one from whatever the data
    folder held then. The checkpoint records the corpus: data that differ from it are refused, a checkpoint of
    older code that records none is refused (nothing can tell the corpus), matching data get data.json back."""
    run_dir, result = reference
    started = json.loads((run_dir / "data.json").read_text())
    lost = _copy_without(run_dir, tmp_path / "lost", "data.json", "result.json")
    ckpt = lost / "checkpoints" / "last.ckpt"
    good = ckpt.read_bytes()
    _rewrite_checkpoint_run(ckpt, lambda r: r["data"].update(train_tokens=r["data"]["train_tokens"] + 1))
    with pytest.raises(UserError, match=rf"is not the corpus the run in {lost} started on \(train_tokens "
                                        rf"{started['train_tokens'] + 1} then, {started['train_tokens']} now\)"):
        train(_config(), lost, progress=False)
    assert not (lost / "data.json").exists()
    _rewrite_checkpoint_run(ckpt, lambda r: r.pop("data"))  # (a checkpoint of code before they recorded it)
    with pytest.raises(UserError, match=rf"^{lost / 'data.json'} is missing and the checkpoint {ckpt} predates "
                                        rf"checkpoints recording their corpus, .*: restore data.json .*, or move the "
                                        rf"checkpoint away \(mv {ckpt} {ckpt}.old\) to train the run from the start$"):
        train(_config(), lost, progress=False)
    assert not (lost / "data.json").exists()
    ckpt.write_bytes(good)
    assert train(_config(), lost, progress=False)["val_loss"] == result["val_loss"]
    assert json.loads((lost / "data.json").read_text()) == started


def test_a_checkpoint_half_written_by_a_killed_process_is_removed_on_resume(tmp_path):
    """SIGKILL while a checkpoint was being written left its temp file (as large as a checkpoint: GBs
    at 160M) in checkpoints/ for good, one more at each such kill; the resume removes it and goes on
    from last.ckpt."""
    config = _config(tokens=4 * 4 * 64, eval_interval=2, checkpoint_interval=2)
    run_dir = tmp_path / "run"
    first = train(config, run_dir, progress=False)
    (run_dir / "result.json").unlink()  # killed after its last checkpoint, in the next one's write
    stale = [run_dir / "checkpoints" / ".last.ckpt.k1ll3d.tmp", run_dir / ".result.json.h4lf.tmp"]
    for path in stale:
        path.write_bytes(b"PK\x03\x04 half")
    assert train(config, run_dir, progress=False)["val_loss"] == first["val_loss"]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["last.ckpt"]
    assert not any(p.exists() for p in stale)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU machine's refusal of a GPU precision")
def test_a_finished_gpu_run_is_read_on_a_cpu(tmp_path):
    """A finished run under --precision bf16-mixed, relaunched on a CPU machine (a login node, to read
    its record) was refused as 'precision bf16-mixed needs a GPU' though nothing was to be trained."""
    run_dir = tmp_path / "run"
    train(_config(tokens=2 * 4 * 64, eval_interval=2), run_dir, progress=False)
    on_gpu = _config(tokens=2 * 4 * 64, eval_interval=2, precision="bf16-mixed").resolved()
    (run_dir / "config.json").write_text(on_gpu.to_json())
    record = {**json.loads((run_dir / "result.json").read_text()), "run_id": on_gpu.run_id}
    (run_dir / "result.json").write_text(json.dumps(record))
    assert train(on_gpu, run_dir, progress=False) == record


def test_a_finished_run_is_read_back_without_writing_in_its_folder(tmp_path, capsys):
    """A finished run on read-only storage (an archive) was refused ('cannot write in ...'): the command
    took the run's lock, which creates its lock file. Its record is read, and nothing is written there."""
    archived = tmp_path / "archived"
    short = _config(tokens=2 * 4 * 64, eval_interval=2)
    result = train(short, archived, progress=False)
    state = lambda: sorted((str(p), p.stat().st_mtime_ns) for p in archived.rglob("*"))  # noqa: E731
    before = state()
    config = tmp_path / "config.json"
    config.write_text(short.to_json())
    assert main(["train", "--config", str(config), "--out", str(archived), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["val_loss"] == result["val_loss"]
    assert state() == before


def test_a_finished_run_relaunched_says_it_trained_nothing(tmp_path, capsys):
    """The same command again on a finished run printed the same table as a run just trained, and
    nothing said that no step was trained: a note on stderr says so and how to train it again; exit 0."""
    run_dir, config = tmp_path / "run", tmp_path / "config.json"
    config.write_text(_config(tokens=2 * 4 * 64, eval_interval=2).to_json())
    assert main(["train", "--config", str(config), "--out", str(run_dir), "--no-progress"]) == 0
    assert "already finished" not in capsys.readouterr().err
    for flags in ([], ["--json"]):
        assert main(["train", "--config", str(config), "--out", str(run_dir), *flags]) == 0
        out, err = capsys.readouterr()
        assert (f"note: {run_dir} holds this run, already finished (completed; its result.json): nothing was "
                f"trained, its record follows. To train it again, move the folder away (mv {run_dir} {run_dir}.old) "
                "or pass another --out") in err
        assert "step 1 of" not in err and "Traceback" not in err
    assert json.loads(out)["status"] == "completed"  # (--json: stdout holds the record alone)


def test_a_finished_folder_whose_config_is_gone_is_not_taken_for_another_run(tmp_path):
    """A finished run's folder whose config.json was lost: `train` returned its result.json as the record
    of any run asked for (another recipe, another budget). Its own run still reads it."""
    run_dir = tmp_path / "run"
    config = _config(tokens=2 * 4 * 64, eval_interval=2)
    record = train(config, run_dir, progress=False)
    (run_dir / "config.json").unlink()
    with pytest.raises(UserError, match=r"result.json is the record of another run \(\w+, not \w+\), and .* has no "
                                        r"config.json; choose another --out directory"):
        train(_config(tokens=2 * 4 * 64, eval_interval=2, recipe="nvfp4"), run_dir, progress=False)
    assert train(config, run_dir, progress=False)["val_loss"] == record["val_loss"]


@pytest.mark.parametrize("sig, code, said", [
    (signal.SIGUSR1, PREEMPTED_EXIT_CODE, "preempted: received SIGUSR1"),  # SLURM, before preempting: requeue
    (signal.SIGINT, 130, "interrupted: received SIGINT"),  # Ctrl-C
    (signal.SIGTERM, PREEMPTED_EXIT_CODE, "preempted: received SIGTERM"),  # SLURM's preemption, `kill`
])
def test_a_signal_checkpoints_at_the_end_of_the_step_and_the_same_command_resumes(long_reference, tmp_path, sig, code,
                                                                                  said):
    run_dir = tmp_path / "stopped"
    proc = _start_cli(LONG, run_dir)
    _wait_for_checkpoint(proc, run_dir)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert said in err and "resume with the same command" in err and "Traceback" not in err
    assert "weights_only" not in err  # Lightning's note on every checkpoint save: the trainer says what it saves
    assert "Tip" not in err and "LeafSpec" not in err  # Lightning's cloud-logger advert, its pytree deprecation
    assert "available:" not in err and "stopped: `max_steps" not in err  # Lightning's accelerator and fit-end lines
    assert "Received SIGTERM" not in err  # Lightning's own line for it, beside the run's
    assert not (run_dir / "result.json").exists()
    assert 0 < _checkpoint_step(run_dir) < LONG.steps
    start = time.perf_counter()
    result = train(LONG, run_dir, progress=False)
    assert result["val_loss"] == long_reference["val_loss"]
    assert result["wall_s"] > time.perf_counter() - start  # the first process's time counts too


def test_a_signal_during_a_step_of_micro_batches_stops_at_the_next_one_and_resumes_to_the_bit(tmp_path, monkeypatch):
    """A step of many micro-batches can outlast SLURM's warning (120 s) before the kill: the stop comes
    at the next micro-batch, the checkpoint is the step before's, and the resume redoes the step."""
    config = _config(tokens=12 * 4 * 64, micro_batch_size=1, eval_interval=6, checkpoint_interval=100)
    straight = train(config, tmp_path / "straight", progress=False)
    step = LanguageModel.training_step

    def signal_in_step_8s_first_micro_batch(self, batch, batch_idx):
        if int(batch[0]) == 7:
            forward = self.model.forward

            def forward_then_signal(*args, **kwargs):
                self.model.forward = forward
                os.kill(os.getpid(), signal.SIGUSR1)  # as SLURM's warning would, mid-step
                return forward(*args, **kwargs)

            self.model.forward = forward_then_signal
        return step(self, batch, batch_idx)

    run_dir, handler = tmp_path / "stopped", signal.getsignal(signal.SIGUSR1)
    with monkeypatch.context() as m:
        m.setattr(LanguageModel, "training_step", signal_in_step_8s_first_micro_batch)
        with pytest.raises(Preempted, match=r"received SIGUSR1; step 8 stopped after 1 of its 4 micro-batches, "
                                            r"which a resume redoes; checkpoint saved at step 7"):
            train(config, run_dir, progress=False)
    assert _checkpoint_step(run_dir) == 7 and not (run_dir / "result.json").exists()
    assert signal.getsignal(signal.SIGUSR1) == handler  # train() put the handlers back
    resumed = train(config, run_dir, progress=False)
    assert resumed["val_loss"] == straight["val_loss"] and resumed["status"] == "completed"
    val = lambda d: [line.split(",")[:6] for line in (d / "metrics.csv").read_text().splitlines()]  # noqa: E731
    assert val(run_dir) == val(tmp_path / "straight")
    # Lightning's per-step log (train_loss, lr_mult) of the two processes: each step once, as straight through
    assert _lightning_steps(run_dir) == _lightning_steps(tmp_path / "straight") == list(range(12))


@pytest.mark.parametrize("recipe, size", [("nvfp4", "0.5M"), ("mxfp4_rht", "0.5M"), ("quartet2", "1M")])
def test_a_resumed_run_draws_the_same_random_bits_as_one_straight_through(recipe, size, tmp_path, monkeypatch):
    """SR, the per-step RHT signs and MS-EDEN's stochastic scales come from seeds of (run seed, layer, step,
    operand): a run preempted and resumed must draw the same ones at each step as the run straight through, or
    its loss differs from the straight run's (the bf16 kill-and-resume test cannot see this)."""
    config = _config(recipe=recipe, size=size, tokens=6 * 4 * 64, eval_interval=3, checkpoint_interval=100)
    straight = train(config, tmp_path / "straight", progress=False)
    step = LanguageModel.training_step

    def signal_at_step_4(self, batch, batch_idx):
        if int(batch[0]) == 3:
            os.kill(os.getpid(), signal.SIGUSR1)  # as SLURM's warning would: the checkpoint ends this step
        return step(self, batch, batch_idx)

    run_dir = tmp_path / "stopped"
    with monkeypatch.context() as m:
        m.setattr(LanguageModel, "training_step", signal_at_step_4)
        with pytest.raises(Preempted, match="checkpoint saved at step 4"):
            train(config, run_dir, progress=False)
    resumed = train(config, run_dir, progress=False)
    assert resumed["status"] == straight["status"] == "completed"
    assert resumed["val_loss"] == straight["val_loss"], (resumed["val_loss"], straight["val_loss"])
    val = lambda d: [line.split(",")[:6] for line in (d / "metrics.csv").read_text().splitlines()]  # noqa: E731
    assert val(run_dir) == val(tmp_path / "straight")


def _lightning_steps(run_dir: Path) -> list[int]:
    """The steps Lightning's CSVLogger logged train_loss at, over the run's processes (versions)."""
    import csv

    steps = []
    for version in sorted((run_dir / "lightning").glob("version_*")):
        with open(version / "metrics.csv") as f:
            steps += [int(r["step"]) for r in csv.DictReader(f) if r.get("train_loss")]
    return steps


def test_a_signal_while_the_run_is_built_stops_it_before_its_first_step(reference, tmp_path, monkeypatch):
    """SLURM's SIGTERM (a preemption) or warning during the seconds the run takes to build: recorded, and
    the run stops before training, exit 75 (requeue), instead of dying by the signal's default action."""
    import scaling.train

    build = scaling.train.build

    def build_then_signal(config):
        built = build(config)
        os.kill(os.getpid(), signal.SIGTERM)
        return built

    run_dir, handler = tmp_path / "run", signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as m:
        m.setattr(scaling.train, "build", build_then_signal)
        with pytest.raises(Preempted, match="received SIGTERM while the run was being built, before its first step") as e:
            train(_config(), run_dir, progress=False)
    assert e.value.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) == handler
    assert not (run_dir / "result.json").exists() and not (run_dir / "checkpoints" / "last.ckpt").exists()
    assert train(_config(), run_dir, progress=False)["val_loss"] == reference[1]["val_loss"]  # the relaunch trains it


# `scaling train` with SIGTERM sent to itself the moment it first imports torch (the slow seconds before
# the run is built), by an import hook: the same as SLURM's signal coming then, without a race.
_SIGTERM_AT_TORCH = """
import os, signal, sys

class SignalAtTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, SignalAtTorch())
from scaling.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_signal_while_torch_is_imported_stops_the_run_as_preempted(tmp_path):
    """SIGTERM during `scaling train`'s imports (before train() could take it): recorded, exit 75 with
    the preemption's message, not death by the signal's default action; the relaunch trains the run."""
    config, run_dir = tmp_path / "config.json", tmp_path / "run"
    config.write_text(_config(tokens=10 * 4 * 64, eval_interval=5).to_json())  # (the relaunch trains it: 10 steps)
    args = ["train", "--config", str(config), "--out", str(run_dir), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    stopped = subprocess.run([sys.executable, "-c", _SIGTERM_AT_TORCH, *args], env=env, capture_output=True, text=True)
    assert stopped.returncode == PREEMPTED_EXIT_CODE, stopped.stderr
    assert "received SIGTERM while the run was being built, before its first step" in stopped.stderr
    assert "Traceback" not in stopped.stderr and not (run_dir / "result.json").exists()
    assert main(args) == 0 and json.loads((run_dir / "result.json").read_text())["status"] == "completed"


def test_nan_loss_ends_the_run_as_diverged(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(_config(fault_nan_at_step=7).to_json())
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run"), "--no-progress", "--json"]) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "diverged" and result["val_loss"] is None
    # where it stopped (its 8th step's loss was NaN: fault_nan_at_step counts from 0); its budget stays
    assert result["diverged_at_step"] == 8 and result["tokens"] == BASE["tokens"] and result["steps"] == 40
    assert json.loads(capsys.readouterr().out)["status"] == "diverged"


def test_a_sustained_spike_ends_the_run_as_diverged(tmp_path):
    """The spike rule end to end, with finite losses (not the NaN fault): a learning rate 10^6 times the
    base one throws the loss far above its running minimum, and spike_steps = 3 such steps in a row end the
    run `diverged` at the third, exit 0. Its output named Lightning's reason, "`max_epochs=1` reached",
    which was not why it stopped."""
    run_dir = tmp_path / "run"
    proc = _start_cli(_config(lr_mult=1e6, spike_steps=3), run_dir)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "diverged" and result["val_loss"] is None and result["val_bpb"] is None
    with open(run_dir / "lightning" / "version_0" / "metrics.csv") as f:  # (Lightning's log: every step's loss here)
        logged = [float(row["train_loss"]) for row in csv.DictReader(f) if row["train_loss"]]
    assert all(math.isfinite(x) for x in logged) and 3 <= len(logged) == result["diverged_at_step"] < 40
    assert all(x > min(logged) + 1.0 for x in logged[-3:])  # three in a row above the minimum + spike_nats
    assert "diverged at step" in out and "Trainer.fit" not in err and "Traceback" not in err


def test_json_is_all_of_stdout_and_progress_is_lines_on_stderr(tmp_path, capsys, monkeypatch):
    """`scaling train --json` printed Lightning's progress bar and its metrics on stdout ahead of the JSON
    (`| jq` failed), and a log or a pipe got no progress until the run ended: progress goes to stderr,
    as a line a minute where stderr is no terminal (pytest's capture: none), with the run's training rate
    (a line every step here)."""
    import scaling.progress

    monkeypatch.setattr(scaling.progress, "LINE_INTERVAL_S", 0.0)
    path = tmp_path / "config.json"
    path.write_text(_config().to_json())
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "completed"
    assert re.search(r"^\d\d:\d\d:\d\dZ step 1 of 40 \(2%\): train_loss [0-9.]+$", err, re.M), err  # (no step timed)
    assert re.search(r"^\d\d:\d\d:\d\dZ step 40 of 40 \(100%\): train_loss [0-9.]+, val_loss [0-9.]+, val_bpb [0-9.]+; "
                     r"[0-9,]+ tokens/s; 0m00s left$", err, re.M), err


def test_progress_lines_come_every_interval_with_the_rate_and_the_time_left_at_this_processs_pace():
    """Each line led by the UTC time it was written: a log's 'left' counted from no known moment, nor did it show
    when a run stalled (the wall clock here at 02:12:00 UTC plus the pace's clock)."""
    from types import SimpleNamespace

    from scaling.progress import StepLines

    now, rate = [100.0], [math.nan]
    lines = StepLines(every_s=60, clock=lambda: now[0], rate=lambda: rate[0], wall_clock=lambda: 7920.0 + now[0])
    trainer = SimpleNamespace(global_step=200, max_steps=1000, progress_bar_metrics={})
    lines.on_train_start(trainer, None)  # a resumed run: its first 200 steps came in another process's time
    said = []
    # the run's training rate (its RunDirectory's): none yet where no step was timed
    for step, at, rate[0] in [(201, 130.0, math.nan), (202, 150.0, 3000.0), (301, 190.0, 7480.2), (302, 191.0, 7000.0),
                              (401, 260.0, 6999.7)]:
        trainer.global_step, now[0] = step, at
        trainer.progress_bar_metrics = {"train_loss": 4.25}
        with contextlib.redirect_stderr(io.StringIO()) as err:
            lines.on_train_batch_end(trainer, None, None, None, step)
        said += err.getvalue().splitlines()
    # the first step's line (its 30 s are start-up: no pace yet), then one a minute: 100 steps in 60 s, 699 left
    assert said == ["02:14:10Z step 201 of 1000 (20%): train_loss 4.2500",
                    "02:15:10Z step 301 of 1000 (30%): train_loss 4.2500; 7,480 tokens/s; 6m59s left",
                    "02:16:20Z step 401 of 1000 (40%): train_loss 4.2500; 7,000 tokens/s; 6m29s left"]


def test_a_progress_lines_time_is_utc_whatever_the_machines_zone(monkeypatch):
    """A log read on another machine or in another zone (a cluster's, a collaborator's) reads the same time, and no
    DST change repeats an hour in it: UTC, marked Z, not the zone of the process that wrote it."""
    from scaling.console import stamped

    try:
        for zone in ("America/New_York", "Asia/Kolkata"):
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            assert time.localtime(8045.0).tm_hour != 2  # (the zone taken: its local time differs)
            assert stamped("step 40 of 183 (21%)", 8045.0) == "02:14:05Z step 40 of 183 (21%)"
    finally:
        monkeypatch.undo()
        time.tzset()  # (this process's other tests in its own zone again)


def test_a_notice_in_a_log_leads_with_its_utc_time_as_the_progress_lines_do(capsys, monkeypatch):
    """`scaling train`'s one-off notices ('resuming from the checkpoint ... at step N of M', 'starting over from step
    0 ...') carried no time in a sweep's train.log, beside progress lines that do: a log did not show when a relaunch
    began. Where stderr is not a terminal they are stamped as those lines are; on a terminal, as they are."""
    from scaling.console import notice

    line = "resuming from the checkpoint runs/x/checkpoints/last.ckpt at step 120 of 915"
    notice(line, wall_clock=lambda: 8045.0)
    assert capsys.readouterr().err == f"02:14:05Z {line}\n"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    notice(line, wall_clock=lambda: 8045.0)
    assert capsys.readouterr().err == f"{line}\n"


def test_the_bar_counts_the_runs_steps():
    """Lightning's bar read '31/--' with no ETA: the batches come from an iterable with no length."""
    from types import SimpleNamespace

    from scaling.progress import StepBar

    bar = StepBar()
    bar._trainer = SimpleNamespace(max_steps=78)
    assert bar.total_train_batches == 78


def test_the_line_of_a_diverged_run_names_its_step(tmp_path, capsys):
    """`scaling train`'s closing table said only `diverged`; result.json's diverged_at_step is named."""
    path = tmp_path / "config.json"
    path.write_text(_config(fault_nan_at_step=7, tokens=10 * 4 * 64).to_json())
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "diverged at step 8 of 10" in capsys.readouterr().out


def test_out_of_memory_says_which_micro_batch_to_take(tmp_path, capsys, monkeypatch):
    """A forward pass too large for the device ends with one message naming a micro-batch half the
    size, exit 2, no result.json and the checkpoints kept (a GPU's OOM, raised from step 7 here)."""
    step = LanguageModel.training_step

    def out_of_memory_at_step_7(self, batch, batch_idx):
        if self.global_step >= 7:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
        return step(self, batch, batch_idx)

    monkeypatch.setattr(LanguageModel, "training_step", out_of_memory_at_step_7)
    path, run_dir = tmp_path / "config.json", tmp_path / "run"
    path.write_text(_config().to_json())
    assert main(["train", "--config", str(path), "--out", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "out of memory on cpu at 4 sequences x 64 tokens per forward pass" in err
    assert "--micro-batch-size 2" in err and "Traceback" not in err
    assert not (run_dir / "result.json").exists() and _checkpoint_step(run_dir) == 5


def test_a_full_disk_is_one_line_naming_the_checkpoint(full_disk, tmp_path, capsys):
    """The first checkpoint does not fit: one line naming the run's checkpoint (not a temp file
    elsewhere: checkpoints are written in place, never staged in /tmp), exit 2, no result.json."""
    path, run_dir = tmp_path / "config.json", full_disk / "run"
    path.write_text(_config().to_json())
    assert main(["train", "--config", str(path), "--out", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"error: cannot use {run_dir / 'checkpoints' / 'last.ckpt'} (No space left on device); free space "
                           "there, then run again"), err
    assert not (run_dir / "result.json").exists() and list((run_dir / "checkpoints").iterdir()) == []


def test_spike_rule():
    module = LanguageModel(_config(spike_nats=1.0, spike_steps=3).resolved(), vocab_size=256)
    losses = [5.0, 4.0, 4.5, 5.2, 5.3, 4.9, 5.1, 5.2, 5.05]  # min 4.0; 4.9 breaks the first run of spikes
    assert [module._diverging(x) for x in losses] == [False] * 8 + [True]
    assert module._diverging(float("inf"))


def test_batches_are_a_pure_function_of_seed_and_step():
    import numpy as np

    tokens = np.arange(10_000, dtype=np.uint16)
    x1, y1 = train_batch(tokens, 0, 7, 4, 16)
    x2, y2 = train_batch(tokens, 0, 7, 4, 16)
    assert torch.equal(x1, x2) and torch.equal(y1[:, :-1], x1[:, 1:])
    assert not torch.equal(x1, train_batch(tokens, 0, 8, 4, 16)[0])
    assert not torch.equal(x1, train_batch(tokens, 1, 7, 4, 16)[0])


def test_run_id_is_a_stable_hash_of_the_resolved_config():
    c = _config(batch_size=None, eval_interval=None, checkpoint_interval=None)
    assert c.run_id == c.resolved().run_id == RunConfig.from_dict(json.loads(c.to_json())).run_id
    assert len(c.run_id) == 12 and c.run_id != dataclasses.replace(c, seed=1).run_id
    assert c.resolved().batch_size >= 1 and c.resolved().seq_len == 64


def test_compile_takes_a_mode():
    from scaling.cli import build_parser
    from scaling.commands.train import config_from_args

    base = ["train", "--family", "nanochat", "--size", "1M", "--recipe", "nvfp4", "--tokens", "2M"]
    parse = lambda *extra: config_from_args(build_parser([*base, *extra]).parse_args([*base, *extra]))
    assert parse().compile is False and parse("--compile").compile is True
    cudagraphs = parse("--compile", "reduce-overhead")
    assert cudagraphs.compile == "reduce-overhead" and cudagraphs.resolved().compile == "reduce-overhead"
    assert RunConfig.from_dict(json.loads(cudagraphs.to_json())) == cudagraphs


@pytest.mark.parametrize("final_lr", [1.5, -0.1, float("nan")])
def test_a_final_lr_outside_0_to_1_is_refused(final_lr):
    """final_lr is the lr multiplier the decay ends at: above 1 the decay raised the lr (it was accepted)."""
    with pytest.raises(UserError, match="final_lr must be a finite number >= 0 and <= 1"):
        _config(final_lr=final_lr).resolved()
    assert _config(final_lr=1.0).resolved().final_lr == 1.0  # (no decay at all: allowed)


@pytest.mark.parametrize("data", ["", "  "])
def test_an_empty_data_path_is_refused_not_read_as_the_working_folder(data, tmp_path, capsys):
    """A config.json with "data": "" was read as Path("") = ".", and the error then told the user to
    prepare a corpus into the working folder."""
    (tmp_path / "config.json").write_text(_config(data=data).to_json())
    assert main(["train", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "data must be builtin" in err and "--out ." not in err, err


def test_a_cosine_schedule_is_not_refused_for_a_decay_it_does_not_read():
    """warmup + decay > 1 is refused for wsd; cosine reads no decay, so its long warmup was refused for
    the default decay 0.2, a setting the user never gave."""
    assert _config(schedule="cosine", warmup=0.9).resolved().warmup == 0.9
    with pytest.raises(UserError, match="is more than the whole run"):
        _config(schedule="wsd", warmup=0.9).resolved()


def test_a_test_only_fault_of_the_wrong_type_is_refused_before_training():
    with pytest.raises(UserError, match="fault_nan_at_step must be a step number"):
        _config(fault_nan_at_step="x").resolved()


@pytest.mark.parametrize("args, message", [
    (["--recipe", "fp3"], "unknown recipe"),
    (["--size", "3M"], "unknown model size"),
    (["--family", "gpt"], "unknown model family"),
    (["--data", "/nonexistent/data"], "data /nonexistent/data does not exist; give builtin"),  # was: "prepare it"
    (["--data", "biultin"], "data biultin does not exist; give builtin (the built-in corpus)"),
    (["--schedule", "linear"], "unknown schedule"),
    (["--compile", "fast"], "compile must be true, false or one of"),
    (["--precision", "foo"], "precision must be one of"),
    pytest.param(["--precision", "bf16-mixed"], "precision bf16-mixed needs a GPU",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only refusal")),
    (["--seed", "-1"], "seed must be a whole number from 0"),
    # float settings out of range: NaN used to crash mid-setup, NaN/inf lr to diverge, the rest to train silently
    (["--warmup", "nan"], "warmup must be a finite number >= 0 and <= 1"),
    (["--decay", "2"], "decay must be a finite number >= 0 and <= 1"),
    (["--warmup", "0.9"], "is more than the whole run"),
    (["--lr-mult", "inf"], "lr_mult must be a finite number > 0"),
    (["--lr-mult", "0"], "lr_mult must be a finite number > 0"),
    (["--lr-mult", "1e300"], "lr_mult must be a finite number > 0 and <= 1e+09"),  # Adam's overflow: a traceback
    (["--eval-tokens", "0"], "eval_tokens must be a positive whole number"),
    (["--eval-tokens", "100", "--seq-len", "128"], "eval_tokens 100 is less than one sequence (seq_len 128)"),
    (["--vocab-size", "0"], "vocab_size must be a positive whole number"),
    (["--data", "/nonexistent/data", "--vocab-size", "300"], "vocab_size 300 applies to the built-in corpus only"),
    (["--tokens", "1e99"], "tokens must be a number from 1 to 1e+15"),
    # (it named no way out, and the micro-batch it named was the rule's, not one the user gave)
    (["--tokens", "1M", "--batch-size", "300"], "batch_size 300 is not a multiple of micro_batch_size 256 (the "
     "default for 0.5M at seq_len 256); set a batch_size that is, or micro_batch_size 150"),
    (["--batch-size", "12", "--micro-batch-size", "8", "--seq-len", "64"], "micro_batch_size 8; set a batch_size "
     "that is, or micro_batch_size 6"),
    # a window longer than the built-in corpus's validation split (220,566 tokens), not its training split
    (["--tokens", "3e5", "--seq-len", "250000", "--batch-size", "1", "--eval-tokens", "250000"],
     "validation split holds only 220566 tokens, less than one window of seq_len + 1 = 250001"),
])
def test_cli_user_errors_exit_2(args, message, tmp_path, capsys):
    flags = dict(zip(["--family", "--size", "--recipe", "--tokens"], ["nanochat", "0.5M", "bf16", "10k"]))
    flags.update(dict(zip(args[::2], args[1::2])))
    argv = ["train", *[x for kv in flags.items() for x in kv], "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()



def test_data_missing_in_a_slurm_job_names_the_node(tmp_path, monkeypatch, capsys):
    """A sweep's launch finds its data on the login node; a job on a compute node that lacks the folder (the login
    node's /tmp, a disk the nodes do not mount) said only "does not exist; give builtin", as for a typo, and status
    repeated it. The job's line names the node it looked on and the way out."""
    monkeypatch.setenv("SLURM_JOB_ID", "60")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu17")
    argv = ["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "10k",
            "--data", str(tmp_path / "gone"), "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: data {tmp_path / 'gone'} does not exist; give builtin") and err.count("\n") == 1, err
    assert err.endswith("; SLURM job 60 looked for it on node gpu17: keep the data on a filesystem that every compute "
                        "node mounts at the same path\n"), err


def test_a_refused_run_leaves_no_empty_runs_folder(tmp_path, monkeypatch, capsys):
    """Without --out a run goes under runs/adhoc/: a refusal makes none of those folders stay behind,
    and a runs/ folder that was there already is kept."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "recipes/nope.toml", "--tokens", "10k"]
    assert main(argv) == 2 and "does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs").mkdir()
    assert main(argv) == 2
    assert [p.name for p in tmp_path.rglob("*")] == ["runs"]

def test_ctrl_c_before_a_run_starts_leaves_no_empty_folder(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the run was being built (its data read, its model made) left --out and the parents
    made for it behind, holding only the lock: a refusal's cleanup caught Exception, not KeyboardInterrupt."""
    import scaling.train

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(scaling.train, "train", interrupted)
    out = tmp_path / "runs" / "run"
    assert main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "10k",
                 "--out", str(out)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_budget_below_one_batch_is_one_line_with_the_batch_spelled_right(tmp_path, capsys):
    """`--tokens 100` under the batch rule (one sequence of 256 at 0.5M) said '1 sequences x 256 tokens'."""
    argv = ["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "100",
            "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    assert capsys.readouterr().err == ("error: tokens 100 is less than one batch (1 sequence x 256 tokens = 256); raise "
                                       "tokens or set a smaller batch_size/seq_len\n")
    assert not (tmp_path / "run").exists()


def test_a_token_count_below_one_is_refused_not_read_as_zero(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own error for the flag
        main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "0.4",
              "--out", str(tmp_path / "run")])
    assert e.value.code == 2 and "'0.4' is less than one token" in capsys.readouterr().err


def test_cli_missing_arguments_and_foreign_run_dir(tmp_path, capsys):
    assert main(["train", "--family", "nanochat"]) == 2
    assert "missing --size, --recipe, --tokens" in capsys.readouterr().err
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(_config(seed=5).to_json())
    cfg = tmp_path / "c.json"
    cfg.write_text(_config().to_json())
    assert main(["train", "--config", str(cfg), "--out", str(run_dir)]) == 2
    assert "holds a different run" in capsys.readouterr().err
    # a relaunch with another option says which: the user who mistyped one sees it
    assert main(["train", "--config", str(run_dir / "config.json"), "--tokens", "5000", "--lr-mult", "2",
                 "--out", str(run_dir)]) == 2
    assert "tokens 10240 there, 5000 here; lr_mult 1.0 there, 2.0 here);" in capsys.readouterr().err
    recipe = tmp_path / "mine.toml"
    recipe.write_text('name = "mine"\nbase = "nvfp4"\n')
    assert main(["train", "--config", str(run_dir / "config.json"), "--recipe", str(recipe), "--out", str(run_dir)]) == 2
    assert f"recipe 'bf16' there, '{recipe}' here);" in capsys.readouterr().err  # (not "'file' here")
    (run_dir / "result.json").write_text(json.dumps({"run_id": _config(seed=5).run_id, "status": "completed"}))
    assert main(["train", "--config", str(cfg), "--out", str(run_dir)]) == 2  # finished, but not this run
    assert "holds a different run" in capsys.readouterr().err


def test_an_out_folder_inside_another_run_is_refused(tmp_path, capsys):
    """--out RUN/lightning/version_0 (it holds only a metrics.csv, a run's file name) trained a new run
    there, replacing the other run's per-step log with its own validation curve."""
    other = tmp_path / "other"
    log = other / "lightning" / "version_0" / "metrics.csv"
    log.parent.mkdir(parents=True)
    log.write_text("train_loss,step\n")
    (other / "config.json").write_text(_config(seed=5).to_json())
    (other / "data.json").write_text("{}")
    cfg = tmp_path / "c.json"
    cfg.write_text(_config().to_json())
    for out in (log.parent, other / "checkpoints" / "new"):
        assert main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"--out {out} lies inside the folder of another run, {other}; " in err, err
        assert f"such as {tmp_path / 'run'}" in err
    assert log.read_text() == "train_loss,step\n" and sorted(p.name for p in log.parent.iterdir()) == ["metrics.csv"]
    assert not (other / "checkpoints").exists()
    # a folder that merely holds a config.json of some other program is no run
    (tmp_path / "config.json").write_text("{}")
    from scaling.commands.train import check_not_foreign

    check_not_foreign(tmp_path / "fresh")


@pytest.mark.parametrize("text, said", [
    ("[1, 2]", "a run config is a JSON object of named fields (family, size, recipe, tokens, ...), not list"),
    ("null", "a run config is a JSON object of named fields (family, size, recipe, tokens, ...), not null"),
    ('{"family": "nanochat", "size": "0.5M", "recipe": ["bf16"], "tokens": 4096}',
     "run config field recipe must be text (a name or a path), got ['bf16']"),
    ('{"family": "nanochat", "size": "0.5M", "recipe": "bf16", "tokens": 4096, "data": 5}',
     "run config field data must be text (a name or a path), got 5"),
])
def test_a_config_of_the_wrong_shape_is_one_line(tmp_path, capsys, text, said):
    """As --config, and as a run folder's own config.json when the run is started again."""
    cfg = tmp_path / "c.json"
    cfg.write_text(text)
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read run config {cfg} ({said}") and "Traceback" not in err, err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(text)
    assert main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "4096",
                 "--out", str(tmp_path / "run")]) == 2
    assert f"cannot read run config {tmp_path / 'run' / 'config.json'} ({said}" in capsys.readouterr().err


def test_a_toml_file_as_config_is_named_as_one(tmp_path, capsys):
    """--config recipe.toml said only "Expecting value: line 1 column 1" of a file that is no JSON."""
    toml = tmp_path / "ufp4_mine.toml"
    toml.write_text('name = "ufp4_mine"\nbase = "ufp4"\n')
    assert main(["train", "--config", str(toml), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"cannot read run config {toml} (not JSON: Expecting value" in err and "a recipe goes to --recipe" in err, err


def test_a_run_that_never_checkpointed_says_it_can_be_removed(tmp_path, capsys):
    """A different run in --out that crashed before its first checkpoint: the message says nothing of
    it is kept, so the folder can go (one that checkpointed is only 'choose another')."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(_config(seed=5).to_json())
    cfg = tmp_path / "c.json"
    cfg.write_text(_config().to_json())
    assert main(["train", "--config", str(cfg), "--out", str(run_dir)]) == 2
    assert "stopped before its first checkpoint" in capsys.readouterr().err


def test_a_second_copy_of_a_running_run_is_refused(tmp_path, capsys):
    """While one process trains into a folder (holding the run's lock, as sweeps' jobs do), the same
    command started again is refused instead of training the run twice into it."""
    from sweeps.store import run_lock

    run_dir = tmp_path / "run"
    cfg = tmp_path / "c.json"
    cfg.write_text(_config().to_json())
    with run_lock(run_dir) as locked:
        assert locked
        assert main(["train", "--config", str(cfg), "--out", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "is being trained by another process" in err and "Traceback" not in err
    assert not (run_dir / "config.json").exists()


def test_a_recipe_file_changed_since_its_run_started_is_refused(tmp_path):
    recipe = tmp_path / "mine.toml"
    recipe.write_text('name = "mine"\nbase = "nvfp4"\n')
    config = _config(recipe=str(recipe))
    from scaling.train import prepare_run_dir

    prepare_run_dir(config.resolved(), tmp_path / "run")  # as a run that started, then crashed
    recipe.write_text('name = "mine"\nbase = "mxfp4"\n')
    with pytest.raises(UserError, match="has changed since the run in"):
        train(config, tmp_path / "run", progress=False)


def test_train_imports_without_polars_and_submitit():
    """The GPU image has neither; `scaling train` must not need them."""
    code = ("import sys; sys.modules['polars'] = None; sys.modules['submitit'] = None\n"
            "import scaling.train, scaling.commands.train\n"
            "from scaling.cli import main; sys.exit(main(['train', '--help']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "--recipe" in out.stdout


def test_repeated_data_is_pointed_out():
    from scaling.train import repeated_data_note

    assert repeated_data_note(1000, 2000) is None and repeated_data_note(2000, 2000) is None
    note = repeated_data_note(8_000_000, 2_643_058)
    assert "3.0 times" in note and "memorization" in note and "scaling data prepare" in note


def test_the_repeated_data_note_counts_the_tokens_the_run_trains(tmp_path, monkeypatch):
    """A run trains whole steps: the note weighs those tokens against the split, not the budget asked
    for, which a request just above the split whose whole steps stay below it would call repeated."""
    import scaling.train

    seen = []
    monkeypatch.setattr(scaling.train, "repeated_data_note", lambda tokens, train_tokens: seen.append(tokens))
    config = _config(tokens=2 * 4 * 64 + 100)  # two whole steps of 4 x 64 tokens, and 100 left over
    result = train(config, tmp_path / "run", progress=False)
    assert config.trained_tokens == 2 * 4 * 64 == result["tokens"] and seen == [2 * 4 * 64]


def test_a_budget_rounded_down_by_more_than_a_percent_is_pointed_out(tmp_path, capsys):
    """`--tokens 4k` trained 3,584 tokens (whole steps of 512), 10% fewer than asked, and said nothing at run time."""
    from scaling.train import rounded_tokens_note

    assert rounded_tokens_note(1_000_000, 995_000, 5_000) is None  # (a study's batches: a fraction of a percent)
    result = train(_config(tokens=2 * 4 * 64 + 100), tmp_path / "run", progress=False)
    assert result["tokens"] == 512
    assert ("note: this run trains 512 of the 612 tokens asked for (16% fewer): whole steps of 256 tokens "
            "(batch_size x seq_len); its result records 512 as D. Ask for a multiple of 256") in capsys.readouterr().err


def test_validation_that_outweighs_training_is_pointed_out(tmp_path, capsys):
    """A smoke run of a few thousand tokens evaluated 65,536 tokens ~8 times, most of its time, without a word."""
    from scaling.train import evaluation_share_note

    assert evaluation_share_note(3_000_000_000, 6000, 750, 65536) is None  # a study's run: 8 evaluations, unsaid
    assert evaluation_share_note(8192, 2, 1, 65536).startswith("note: this run evaluates 2 times on 65,536 validation "
                                                               "tokens, 131,072 in all against the 8,192 it trains on")
    train(_config(tokens=2 * 4 * 64), tmp_path / "run", progress=False)  # one evaluation of 2,048 tokens against 512
    assert "note: this run evaluates 1 time on 2,048 validation tokens" in capsys.readouterr().err


def test_compile_on_a_cpu_is_pointed_out(tmp_path, monkeypatch, capsys):
    """--compile on a CPU costs minutes of tracing and no speed: one note says so, and the run goes on."""
    import scaling.train
    from scaling.train import cpu_compile_note

    assert cpu_compile_note(None, False) is None and cpu_compile_note("reduce-overhead", True) is None
    monkeypatch.setattr(scaling.train, "compile_model", lambda model, mode: None)  # the note, not the minutes
    result = train(_config(tokens=2 * 4 * 64, compile=True), tmp_path / "run", progress=False)
    assert result["status"] == "completed"
    assert "note: --compile on a CPU" in capsys.readouterr().err


def test_a_slow_first_step_on_a_gpu_is_explained():
    from scaling.train import first_step_note

    assert first_step_note(12.0, True, True) is None  # quick enough to need no word
    assert first_step_note(300.0, False, True) is None  # a CPU compiles nothing of ours
    note = first_step_note(214.0, True, True)
    assert "214 s" in note and "tuning" in note and "TRITON_CACHE_DIR" in note
    assert "tuning" not in first_step_note(40.0, True, False)  # bf16: compilation only


def test_the_model_is_told_each_micro_batch_of_a_step(tmp_path, monkeypatch):
    """With gradient accumulation the model's quantizers are told the micro-batch too (scaling.linear
    draws each backward call's own SR bits and Quartet II signs from it)."""
    from scaling import linear

    calls = []
    real = linear.set_step
    monkeypatch.setattr(linear, "set_step", lambda model, step, micro=0: (calls.append((step, micro)), real(model, step, micro)))
    config = _config(tokens=3 * 4 * 64, micro_batch_size=2, eval_interval=3, checkpoint_interval=3)
    assert train(config, tmp_path / "run", progress=False)["status"] == "completed"
    assert [c for c in calls if c[0] < 3] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def test_a_run_under_a_recipe_file_records_its_name_and_keeps_the_file(tmp_path):
    recipe = tmp_path / "mine.toml"
    recipe.write_text('name = "mine"\nbase = "nvfp4"\n[wgrad]\ndy = "bf16"\nx = "bf16"\n')
    config = _config(recipe=str(recipe), tokens=2 * 4 * 64, eval_interval=2, checkpoint_interval=2)
    result = train(config, tmp_path / "run", progress=False)
    assert result["recipe"] == "mine" and result["recipe_file"] == str(recipe)  # fits group by the name
    assert (tmp_path / "run" / "recipe.toml").read_text() == recipe.read_text()
    assert _config(recipe=os.path.relpath(recipe), tokens=config.tokens, eval_interval=2,
                   checkpoint_interval=2).run_id == config.run_id  # however the path is spelt


def test_a_second_ctrl_c_while_the_process_exits_stops_it_without_a_traceback(tmp_path):
    """After Ctrl-C's checkpoint, the user who sees 'interrupted: ...' and presses Ctrl-C again while
    the process is still exiting got a KeyboardInterrupt traceback from torch's exit handler."""
    script = f"""
import atexit, os, signal, sys, time
import scaling.train
from scaling.cli import main
def stopped(*args, **kwargs):
    raise scaling.train.Preempted("received SIGINT; checkpoint saved at step 3", signal.SIGINT)
scaling.train.train = stopped
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(1)))  # Ctrl-C during the exit
sys.exit(main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "40k",
               "--out", {str(tmp_path / "run")!r}]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "interrupted: received SIGINT" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == -signal.SIGINT  # killed by the second Ctrl-C (a shell shows 130)


def test_a_moved_corpus_is_named_as_the_runs_own_with_the_way_to_go_on(tmp_path):
    """A prepared corpus moved to another path was refused as "a different run" (the run's id includes its
    data's path), as if the data had changed: the message now says the data there are the run's own corpus and
    how to go on with the run (the old path, or a link from it), which then resumes or returns the run."""
    from scaling import data

    moved, before = tmp_path / "moved", tmp_path / "corpus"
    shutil.copytree(data.builtin_data_dir(data.BUILTIN_VOCAB_SIZE), before)
    config = _config(tokens=2 * 4 * 64, eval_tokens=256, data=str(before))
    record = train(config, tmp_path / "run", progress=False)
    before.rename(moved)
    with pytest.raises(UserError) as e:
        train(dataclasses.replace(config, data=str(moved)), tmp_path / "run", progress=False)
    assert f"holds this run trained on the data {before}" in str(e.value)
    assert f"--data {before}" in str(e.value) and f"ln -s {moved.resolve()} {before}" in str(e.value), e.value
    before.symlink_to(moved)
    assert train(config, tmp_path / "run", progress=False) == record
    # other data at the new path (another corpus, not the run's) is still "a different run"
    shutil.rmtree(moved)
    shutil.copytree(data.builtin_data_dir(data.BUILTIN_VOCAB_SIZE), moved)
    meta = json.loads((moved / "meta.json").read_text())
    (moved / "meta.json").write_text(json.dumps({**meta, "val_docs": meta["val_docs"] + 1}))
    with pytest.raises(UserError, match="holds a different run"):
        train(dataclasses.replace(config, data=str(moved)), tmp_path / "run", progress=False)


def test_a_progress_lines_metrics_keep_four_decimals():
    """val_bpb 1.99977 was shown 'val_bpb 2' (four significant digits): a metric reads at the decimals a loss is
    compared by, whatever its leading digits."""
    from scaling.progress import progress_line

    line = progress_line(10, 100, 10, 0.0, 0.0, {"train_loss": 10.123456, "val_bpb": 1.99977})
    assert line == "step 10 of 100 (10%): train_loss 10.1235, val_bpb 1.9998", line


def _progress_lines(err: str) -> list[str]:
    """The progress lines in a run's stderr, each without the UTC time that leads it (a real run's: not this test's)."""
    return [m[1] for m in re.finditer(r"^\d\d:\d\d:\d\dZ (step .*)$", err, re.M)]


def _lines_said(lines, trainer, hook: str, *args) -> list[str]:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        getattr(lines, hook)(trainer, *args)
    return err.getvalue().splitlines()


def test_a_log_says_where_the_run_ended():
    """A run shorter than the line interval stopped at 'step 1 of N' in its log (a sweep's train.log, a pipe): a
    last line says the step it ended at and how (completed, diverged, stopped), once for a step already shown."""
    from types import SimpleNamespace

    from scaling.progress import StepLines

    now = [0.0]
    lines = StepLines(every_s=60, clock=lambda: now[0], rate=lambda: 7000.0, wall_clock=lambda: 7920.0 + now[0])
    trainer = SimpleNamespace(global_step=1, max_steps=3, progress_bar_metrics={"train_loss": 4.25})
    run = SimpleNamespace(diverged_at_step=None)
    lines.on_train_start(trainer, run)
    assert _lines_said(lines, trainer, "on_train_batch_end", run, None, None, 0) == [
        "02:12:00Z step 1 of 3 (33%): train_loss 4.2500; 7,000 tokens/s"]
    for trainer.global_step in (2, 3):
        now[0] += 1.0
        assert _lines_said(lines, trainer, "on_train_batch_end", run, None, None, 0) == []
    assert _lines_said(lines, trainer, "on_train_end", run) == [
        "02:12:02Z step 3 of 3 (100%): train_loss 4.2500; 7,000 tokens/s; completed"]

    lines.on_train_start(trainer, run)  # a run of one step: its first line is its last
    trainer.global_step, trainer.max_steps = 1, 1
    assert len(_lines_said(lines, trainer, "on_train_batch_end", run, None, None, 0)) == 1
    assert _lines_said(lines, trainer, "on_train_end", run) == []

    lines.on_train_start(trainer, run)  # diverged: the step it stopped at, and the one that tripped the rule
    trainer.global_step, trainer.max_steps, run.diverged_at_step = 7, 40, 8
    _lines_said(lines, trainer, "on_train_batch_end", run, None, None, 0)
    assert _lines_said(lines, trainer, "on_train_end", run) == [
        "02:12:02Z step 7 of 40 (17%): train_loss 4.2500; 7,000 tokens/s; diverged at step 8"]

    lines.on_train_start(trainer, run)  # a signal or an error: stopped (the run's next line says why)
    run.diverged_at_step = None
    assert _lines_said(lines, trainer, "on_exception", run, KeyboardInterrupt()) == []  # (no step trained here)
    _lines_said(lines, trainer, "on_train_batch_end", run, None, None, 0)
    trainer.global_step = 9
    assert _lines_said(lines, trainer, "on_exception", run, KeyboardInterrupt()) == [
        "02:12:02Z step 9 of 40 (22%): train_loss 4.2500; 7,000 tokens/s; stopped"]


def test_a_diverged_runs_log_ends_with_the_step_it_diverged_at(tmp_path, capsys):
    """The line interval outlasts this run: its log said 'step 1 of 10' and nothing of where it stopped."""
    path = tmp_path / "config.json"
    path.write_text(_config(fault_nan_at_step=7, tokens=10 * 4 * 64).to_json())
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 0
    said = _progress_lines(capsys.readouterr().err)
    assert said[0].startswith("step 1 of 10 (10%): ") and len(said) == 2, said
    assert re.fullmatch(r"step 7 of 10 \(70%\): train_loss nan.*; [0-9,]+ tokens/s; diverged at step 8", said[1]), said


def test_the_bar_shows_the_runs_metrics_without_lightnings_version_number(tmp_path):
    """The bar read 'v_num: 0.000 train_loss: 6.349': the number of the process's lightning/version_<n> folder."""
    from types import SimpleNamespace

    from lightning.pytorch.loggers import CSVLogger

    from scaling.progress import StepBar

    trainer = SimpleNamespace(loggers=[CSVLogger(tmp_path, name="lightning")], progress_bar_metrics={"train_loss": 6.349})
    assert StepBar().get_metrics(trainer, None) == {"train_loss": 6.349}


def test_a_resumed_run_says_so_in_one_line_of_its_own(reference, tmp_path):
    """Lightning said it in two lines ('Restoring states from the checkpoint path at ...', 'Restored all states
    from the checkpoint at ...') and not at which step: one line says where the run goes on from."""
    run_dir, result = reference
    again = _copy_without(run_dir, tmp_path / "again", "result.json")
    out, err = _start_cli(_config(), again).communicate(timeout=300)  # (Lightning's log lines: a process's stderr)
    assert f"resuming from the checkpoint {again / 'checkpoints' / 'last.ckpt'} at step 40 of 40\n" in err, err
    assert "Restor" not in err, err
    assert json.loads((again / "result.json").read_text())["val_loss"] == result["val_loss"]


def test_the_bar_on_a_terminal_counts_steps_and_tokens_not_lightnings_epoch(tmp_path, capsys, monkeypatch):
    """On a terminal the bar read 'Epoch 0/0 ━━━╸━━ 58/146 0:10:00 • 0:09:51 0.15it/s train_loss: ...': every run is
    one pass over a token budget (max_epochs=1), so the epoch said nothing, nor 'it/s'. It reads 'step 40/40',
    the steps' tokens and the run's training rate, with the time and the metrics as before."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "200")  # (the whole bar on one line)
    assert main(["train", "--config", str(_write_config(tmp_path)), "--out", str(tmp_path / "run"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "completed"  # (stdout the JSON alone: the bar is on stderr)
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err).replace("\r", "\n").strip().splitlines()[-1]
    assert re.fullmatch(r"step 40/40 ━+ 10.24k/10.24k tokens \d:\d\d:\d\d • \d:\d\d:\d\d [0-9,]+ tokens/s "
                        r"train_loss: [0-9.]+ val_loss: [0-9.]+ val_bpb: [0-9.]+", last.strip()), last
    assert "Epoch" not in err and "it/s" not in err, err


def test_a_resumed_runs_bar_starts_at_its_step(tmp_path, capsys, monkeypatch):
    """A resumed run's bar (Lightning adds it as the process's first step ends) was drawn at 'step 0/40', then jumped
    to the run's step, the jump counted as steps done in an instant (a time left far too short): it starts at the run's
    step, the checkpoint's, as the process starts training (as a fresh run's at 'step 0/40'). On a terminal of 80 columns (the line's 153 wrapped over seven rows): each
    frame is one row, with the time left, the rate and the train_loss."""
    run_dir, step = _killed_after_checkpoint(tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["train", "--config", str(_write_config(tmp_path)), "--out", str(run_dir), "--json"]) == 0
    rows = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", capsys.readouterr().err).replace("\r", "\n").splitlines()
    frames = [row.rstrip() for row in rows if row.startswith("step ")]
    shown = [int(f.split()[1].split("/")[0]) for f in frames]
    assert shown[0] == step and shown[-1] == 40 and shown == sorted(shown), (step, shown)
    assert max(len(f) for f in frames) <= 80 and not [row for row in rows if row.startswith("  ")], rows
    assert re.fullmatch(r"step 40/40 ━+ \d:\d\d:\d\d left [0-9,]+ tokens/s train_loss: [0-9.]+", frames[-1]), frames


def test_a_resumed_runs_progress_shows_this_processs_rate_not_the_stopped_ones(tmp_path, capsys, monkeypatch):
    """A resumed run's first progress line showed the stopped process's tokens/s ('step 50 ... 3,735 tokens/s'), carried
    in its checkpoint for result.json's rate over the whole run, and its later lines that blend: the progress shows
    this process's own rate, none until a step of its own is timed. The checkpoint here carries an absurd rate (1 token
    in 10^6 s), which any line showing it, or a blend of it with this process's 40 steps at most, reads as 0 tokens/s."""
    import scaling.progress

    run_dir, step = _killed_after_checkpoint(tmp_path)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)
    state["callbacks"]["RunDirectory"].update(step_time=1e6, step_tokens=1)
    torch.save(state, ckpt)
    monkeypatch.setattr(scaling.progress, "LINE_INTERVAL_S", 0.0)  # (a line every step)
    assert main(["train", "--config", str(_write_config(tmp_path)), "--out", str(run_dir), "--json"]) == 0
    lines = _progress_lines(capsys.readouterr().err)
    assert lines[0].startswith(f"step {step + 1} of 40") and "tokens/s" not in lines[0], lines  # (its step untimed)
    rates = [float(m.replace(",", "")) for line in lines[1:] for m in re.findall(r"; ([0-9,.]+) tokens/s", line)]
    assert len(rates) == len(lines) - 1 and min(rates) >= 1, lines  # (its own: a 256-token step in under 256 s)


def _write_config(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "config.json"
    path.write_text(_config(**changes).to_json())
    return path


def test_a_relaunch_over_a_run_killed_before_its_first_checkpoint_says_it_starts_over_and_drops_its_rows(
        tmp_path, monkeypatch, capsys):
    """A process SIGKILLed after evaluations but before its first checkpoint left config.json, data.json, lock and
    metrics.csv rows. Its relaunch started from step 0 without a word, and the dead process's rows stayed in
    metrics.csv until the relaunch's first evaluation rewrote it: `sweep status` read them as the new process's
    progress and val_loss, and the lock recorded them as tokens it started from (its time left was then off)."""
    from sweeps.store import lock_holder, run_status
    from scaling.train import RunDirectory

    config = _config(eval_interval=5, eval_tokens=512, checkpoint_interval=40)  # one checkpoint: at the end
    run_dir = tmp_path / "run"
    proc = _start_cli(config, run_dir)
    metrics, deadline = run_dir / "metrics.csv", time.time() + 300
    while len(metrics.read_text().splitlines() if metrics.exists() else []) < 3:  # (header and two rows)
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "last.ckpt").exists() and not (run_dir / "result.json").exists()
    rows = list(csv.DictReader(io.StringIO(metrics.read_text())))
    assert len(rows) >= 2 and int(rows[-1]["step"]) < 40
    seen = {}
    started = RunDirectory.on_train_start

    def look(self, trainer, module):  # the relaunch's folder as its first step starts, read as status reads it
        status = run_status(run_dir, None, None, None)
        seen.update(metrics=metrics.exists(), state=status.state, progress=status.progress, val_loss=status.val_loss,
                    tokens_at_start=(lock_holder(run_dir) or {}).get("tokens_at_start"))
        return started(self, trainer, module)

    monkeypatch.setattr(RunDirectory, "on_train_start", look)
    cfg = tmp_path / "run.json"
    assert main(["train", "--config", str(cfg), "--out", str(run_dir), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert seen == dict(metrics=False, state="running", progress=None, val_loss=None, tokens_at_start=0)
    lines = [line for line in err.splitlines() if "from step 0" in line]
    assert all(re.match(r"\d\d:\d\d:\d\dZ ", line) for line in lines), err  # (a log's notice: stamped)
    said = [line[len("02:14:05Z "):] for line in lines]
    assert said == [f"starting over from step 0 of 40: {run_dir} holds this run but no checkpoint of it (a process "
                    f"stopped before its first one, or it was moved away); its metrics.csv's evaluations, "
                    f"{len(rows)} up to step {rows[-1]['step']}, are discarded"], err
    final = list(csv.DictReader(io.StringIO(metrics.read_text())))
    assert [r["step"] for r in final] == [str(s) for s in range(5, 41, 5)]
    assert [r["val_loss"] for r in final[: len(rows)]] == [r["val_loss"] for r in rows]  # (the same bits again)


def _csv_rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text()))) if path.exists() else []


def test_a_resumed_run_cuts_the_rows_its_stopped_process_wrote_after_the_checkpoint_before_it_builds(
        tmp_path, monkeypatch, capsys):
    """A process SIGKILLed two evaluations after its checkpoint (step 20) left metrics.csv rows for steps 25 and 30 and
    Lightning log rows up to step 28 or 29 (from 0). Its resume kept them through the build and the restore, until Lightning loaded
    the checkpoint's rows: `sweep status` read step 30's progress (75%) and val_loss as the resumed process's, the
    lock recorded 30 steps' tokens as where it started (its time left unknown until it passed them), and the Lightning
    logs held steps 20 to 29 twice, the stopped process's and the resume's. The resume cuts them first; the run ends
    with the bits of one never stopped, each step once in metrics.csv and once across the Lightning logs."""
    from scaling.train import RunDirectory, build
    from sweeps.store import lock_holder, run_status

    config = _config(eval_interval=5, eval_tokens=512, checkpoint_interval=20)  # checkpoints at steps 20 and 40
    run_dir = tmp_path / "run"
    proc = _start_cli(config, run_dir)
    metrics, deadline = run_dir / "metrics.csv", time.time() + 300
    evaluated = lambda: int((_csv_rows(metrics) or [{"step": 0}])[-1]["step"])  # noqa: E731
    while not ((run_dir / "checkpoints" / "last.ckpt").exists() and evaluated() >= 30):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _checkpoint_step(run_dir) == 20 and not (run_dir / "result.json").exists()
    before = _csv_rows(metrics)
    assert [r["step"] for r in before][:6] == ["5", "10", "15", "20", "25", "30"]
    logs = lambda: sorted((run_dir / "lightning").glob("version_*/metrics.csv"))  # noqa: E731
    # (Lightning logs a step after the callbacks' end of it: the kill may come between metrics.csv's row 30 and its 29)
    assert max(int(r["step"]) for r in _csv_rows(logs()[0])) >= 28
    seen = {}

    def look(where: str) -> None:  # the folder as `sweep status` reads it while the resume runs
        status = run_status(run_dir, None, None, None)
        seen[where] = dict(steps=[r["step"] for r in _csv_rows(metrics)], progress=status.progress,
                           val_loss=status.val_loss, logged=max(int(r["step"]) for log in logs() for r in _csv_rows(log)),
                           tokens_at_start=(lock_holder(run_dir) or {}).get("tokens_at_start"))

    monkeypatch.setattr("scaling.train.build", lambda c: (look("build"), build(c))[1])
    started = RunDirectory.on_train_start
    monkeypatch.setattr(RunDirectory, "on_train_start", lambda self, t, m: (look("first step"), started(self, t, m))[1])
    cfg = tmp_path / "run.json"
    assert main(["train", "--config", str(cfg), "--out", str(run_dir), "--no-progress"]) == 0
    capsys.readouterr()
    at_checkpoint = dict(steps=["5", "10", "15", "20"], progress=0.5, val_loss=float(before[3]["val_loss"]),
                         tokens_at_start=20 * 4 * 64, logged=19)
    assert seen == {"build": at_checkpoint, "first step": at_checkpoint}
    final = _csv_rows(metrics)
    assert [r["step"] for r in final] == [str(s) for s in range(5, 41, 5)]
    rate = lambda rows: [{**r, "tokens_per_s": None} for r in rows]  # noqa: E731
    assert rate(final[:6]) == rate(before[:6])  # (the same bits again, but for tokens/s)
    steps = sorted(int(r["step"]) for log in logs() for r in _csv_rows(log) if r["train_loss"])
    assert len(logs()) == 2 and steps == list(range(40))


def test_the_cut_back_to_the_checkpoint_keeps_the_other_rows_bytes_and_drops_a_row_half_appended(tmp_path):
    """`back_to_checkpoint` (a resume, before its build) at a step-20 checkpoint: metrics.csv keeps its rows up to step
    20 (steps done), each Lightning log its rows up to step 19 (from 0), byte for byte (CRLF lines stay CRLF), and drops
    a last row a SIGKILL stopped mid-append, whose cut-off step ("2" of "28") would read as a step before the
    checkpoint. A file with nothing past the checkpoint is not written; one that is not CSV text is left as it is."""
    from scaling.train import back_to_checkpoint

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save({"epoch": 0, "global_step": 20, "state_dict": {}}, run_dir / "checkpoints" / "last.ckpt")
    header = ",".join(METRICS_COLUMNS) + "\n"
    row = lambda s: f"{s},{s * 256},6.{s},2.{s},6.{s},1.0,nan\n"  # noqa: E731
    (run_dir / "metrics.csv").write_text(header + "".join(row(s) for s in (10, 20, 30)))
    logs = [run_dir / "lightning" / f"version_{n}" / "metrics.csv" for n in range(3)]
    for log in logs:
        log.parent.mkdir(parents=True)
    lightning_row = lambda s: f"0,1.0,{s},{8 - s / 10:.3f},,\r\n"  # noqa: E731
    lightning_header = "epoch,lr_mult,step,train_loss,val_bpb,val_loss\r\n"
    logs[0].write_bytes((lightning_header + "".join(lightning_row(s) for s in range(15))).encode())
    logs[1].write_bytes((lightning_header + "".join(lightning_row(s) for s in range(10, 28)) + "0,1.0,2").encode())
    logs[2].write_bytes(b"\xff\xfe not text")
    unchanged = logs[0].stat().st_mtime_ns
    back_to_checkpoint(run_dir)
    assert (run_dir / "metrics.csv").read_text() == header + row(10) + row(20)
    assert logs[0].stat().st_mtime_ns == unchanged
    assert logs[1].read_bytes() == (lightning_header + "".join(lightning_row(s) for s in range(10, 20))).encode()
    assert logs[2].read_bytes() == b"\xff\xfe not text"
    assert sorted(p.name for p in (run_dir / "lightning" / "version_1").iterdir()) == ["metrics.csv"]  # (no temp left)


def test_the_documented_peaks_are_the_table_s():
    """docs/training.md's MFU paragraph names every card of PEAK_BF16_FLOPS with its peak: it left out the
    GH200 (989e12) and the L40S (362e12), whose runs' MFU divided by them."""
    from scaling.train import PEAK_BF16_FLOPS

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    paragraph = text.split("**MFU** =", 1)[1].split("`null` on a CPU", 1)[0]
    for card, peak in PEAK_BF16_FLOPS.items():
        assert re.search(rf"\b{card}\b", paragraph) and f"{peak / 1e12:g}e12" in paragraph, card
