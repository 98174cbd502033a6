"""`scaling models`: print the size ladder (depth, width, heads, N, N total, FLOPs per token)."""

from __future__ import annotations

import argparse


def _family(text: str) -> str:
    """A --family value, refused with the ladder's message (which names a near miss: llama -> llama2)."""
    from models.ladder import check_family
    from scaling.errors import UserError

    try:
        return check_family(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from models.ladder import FAMILIES
    from scaling.data import DEFAULT_VOCAB_SIZE

    parser.add_argument("--family", type=_family, action="append", metavar="{" + ",".join(FAMILIES) + "}",
                        help="family to list (repeatable; default: both)")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE,
                        help=f"vocabulary size for N total and exact FLOPs (default {DEFAULT_VOCAB_SIZE}, as `scaling data "
                             "prepare`)")
    parser.add_argument("--seq-len", type=int,
                        help="context length for exact FLOPs (default: each size's, as `scaling train`: 256 for the "
                             "micro sizes, 1024 for the rest)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from models.ladder import FAMILIES, ladder
    from scaling.console import print_json, print_table
    from scaling.errors import UserError

    for flag, value in (("--vocab-size", args.vocab_size), ("--seq-len", args.seq_len)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be a positive whole number, got {value}")

    rows = [
        {"family": s.family, "size": s.name, "depth": s.depth, "width": s.width, "heads": s.heads,
         "mlp": s.mlp, "n_params": s.n_params, "n_params_total": s.n_params_total(args.vocab_size),
         "seq_len": args.seq_len or s.seq_len, "flops_per_token": s.flops_per_token(),
         "flops_per_token_exact": s.flops_per_token_exact(args.vocab_size, args.seq_len or s.seq_len)}
        for family in dict.fromkeys(args.family or FAMILIES) for s in ladder(family)  # (each family once)
    ]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, title=f"model ladder (vocab {args.vocab_size}; "
                                "N excludes embedding and head; FLOPs per training token)")
    return 0
