"""The `scaling` command.

Each verb lives in ``scaling/commands/<verb>.py`` with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Verb modules are imported only when that verb runs, so that `scaling train`
works where polars and submitit are missing (the GPU image) and `scaling fit` never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scaling.errors import UserError

# verb -> (module, one-line help). Order is the order `scaling --help` lists them.
VERBS: dict[str, tuple[str, str]] = {
    "recipes": ("scaling.commands.recipes", "list the recipe presets (what each GEMM does, source)"),
    "diagnose": ("scaling.commands.diagnose", "quantization error diagnostics per format and transform"),
    "models": ("scaling.commands.models", "print the model size ladder"),
    "data": ("scaling.commands.data", "prepare a corpus: tokenizer + token memmaps"),
    "train": ("scaling.commands.train", "train one run"),
    "sweep": ("scaling.commands.sweep", "plan, launch, watch and collect a sweep"),
    "fit": ("scaling.commands.fit", "fit scaling laws per recipe and test penalty growth"),
    "report": ("scaling.commands.report", "build the HTML/Markdown report"),
    "bench": ("scaling.commands.bench", "benchmarks: kernels, linear, train, fit"),
    "demo": ("scaling.commands.demo", "the whole path on a tiny built-in sweep"),
}


def _load(verb: str):
    return importlib.import_module(VERBS[verb][0])


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaling", description="FP4 training recipes: scaling-law studies.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    # Only the verb being run is imported (plus all of them for `scaling --help`).
    wanted = [a for a in argv if a in VERBS][:1] or list(VERBS)
    for verb, (_, help_text) in VERBS.items():
        p = sub.add_parser(verb, help=help_text, description=help_text)
        if verb in wanted:
            try:
                _load(verb).add_arguments(p)
            except ModuleNotFoundError as e:  # a verb whose optional dependency is absent
                if len(wanted) == 1:
                    raise
                p.description = f"{help_text} (unavailable here: {e})"
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return 2
    try:
        return int(_load(args.verb).run(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
