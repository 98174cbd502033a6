"""The `scaling` command.

Each verb lives in ``scaling/commands/<verb>.py`` with ``add_arguments(parser)`` and ``run(args) -> int``;
its one-line help is in ``VERBS`` here. Verb modules are imported only when that verb runs, so that
`scaling train` works where polars and submitit are missing (the GPU image) and `scaling fit` never
loads torch.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from scaling.errors import UserError
from scaling.files import SPACE_ERRORS

# verb -> (module, one-line help). Order is the order `scaling --help` lists them.
VERBS: dict[str, tuple[str, str]] = {
    "recipes": ("scaling.commands.recipes", "list the recipe presets (what each GEMM does, source)"),
    "diagnose": ("scaling.commands.diagnose", "quantization error diagnostics per format and transform"),
    "models": ("scaling.commands.models", "print the model size ladder"),
    "data": ("scaling.commands.data", "prepare a corpus: tokenizer + token memmaps"),
    "train": ("scaling.commands.train", "train one run"),
    "sweep": ("scaling.commands.sweep", "plan, launch, watch and collect a sweep"),
    "fit": ("scaling.commands.fit", "fit scaling laws per recipe and test whether each recipe's penalty grows with compute"),
    "report": ("scaling.commands.report", "build the HTML/Markdown report of a sweep directory or a results table"),
    "bench": ("scaling.commands.bench", "benchmarks: kernels, loss, linear, train, profile, stages (GPU); sass, cpu, "
              "quantizer, fit, calibration; targets (checks a file)"),
    "demo": ("scaling.commands.demo", "the whole path on a tiny built-in sweep: data, diagnostics, sweep, fits, report"),
}


def _load(verb: str):
    return importlib.import_module(VERBS[verb][0])


class _HelpWithDefaults(argparse.HelpFormatter):
    """--help shows each option's default where it has one and its help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default is None or default is False or default == argparse.SUPPRESS
                or default == []
                or "default" in text
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        return f"{text} (default: {str(default).replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """A bad command line gets one line (the verb, what is wrong, where to look), exit 2: argparse's
    usage block above it would bury the message under a screen of flags."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}; see `{self.prog} --help`\n")


class _VerbParser(_Parser):
    """A verb's parser (and its sub-verbs', which inherit the class): help with defaults."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpWithDefaults)
        super().__init__(*args, **kwargs)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = _Parser(prog="scaling", description="FP4 training recipes: scaling-law studies.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_VerbParser)
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
    refuse_empty_values(parser)
    return parser


# glibc hands freed blocks above 128 KB back to the kernel, so every new activation-sized temporary
# faults its pages in again; on a CPU that costs more than the arithmetic on it. Keeping freed memory
# in the heap made `scaling train --family nanochat --size 1M --tokens 200k` 1.5x faster in bf16 and
# 1.3x in nvfp4 on a 2-core development VM (same bits). glibc reads these only at process start.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}


def malloc_reexec(environ: dict[str, str], platform: str = sys.platform) -> dict[str, str] | None:
    """The environment to restart the command with (the allocator settings added), or None when they
    are already set, the platform is not Linux, or SCALING_MALLOC_TUNING=0."""
    if platform != "linux" or environ.get("SCALING_MALLOC_TUNING") == "0":
        return None
    if all(k in environ for k in MALLOC_ENV):
        return None
    return {**environ, **MALLOC_ENV}


def python_command(statement: str) -> list[str]:
    """`python -c statement` without the working directory on sys.path (`-c`, as `-m`, puts it first):
    a folder named reports/, models/, fits/, sweeps/ or scaling/ where the user stands (`scaling report
    --out reports/a` makes one) cannot stand in for this package's modules. For the restarted command
    and the local sweep workers."""
    return [sys.executable, "-c", f"import sys; del sys.path[0]; {statement}"]


def refuse_empty_values(parser: argparse.ArgumentParser) -> None:
    """Make every option of `parser` and its sub-verbs' parsers that takes a value refuse an empty one
    (`--out ""`, `--out=`, `--ou ""`, an empty item of a list option), as a shell variable left unset
    gives: `--out ""` would otherwise read as no --out (or as Path("") = the working folder). argparse
    then names the option. No option of this CLI defaults to an empty string, or means anything by one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                refuse_empty_values(sub)
        elif action.option_strings and action.nargs != 0:
            action.type = _not_empty(action.type)


def _not_empty(convert):
    def checked(value: str):
        if value == "":
            raise argparse.ArgumentTypeError("empty value: give one, or leave the option out for its default")
        return value if convert is None else convert(value)

    # argparse names the type in its own messages ("invalid int value: 'x'")
    checked.__name__ = getattr(convert, "__name__", "str") if convert is not None else "str"
    return checked


def _parser_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the verb (and sub-verb: `data prepare`) that `args` chose."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _parser_of(action.choices[getattr(args, action.dest)], args)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the `scaling` command itself (not a call from Python): restart once, tuned
        env = malloc_reexec(dict(os.environ))
        if env is not None:
            restart = python_command("from scaling.cli import main; sys.exit(main(sys.argv[1:]))")
            os.execve(sys.executable, [*restart, *sys.argv[1:]], env)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the verb's own parser says it, pointing to its help, where they came after the verb
        before_verb = args.verb is None or argv.index(unknown[0]) < argv.index(args.verb)
        (parser if before_verb else _parser_of(parser, args)).error(f"unrecognized arguments: {' '.join(unknown)}")
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
    except BrokenPipeError:  # `scaling models --json | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python flushes stdout at exit)
        return 141
    except OSError as e:
        if e.filename is None and e.errno in SPACE_ERRORS:  # a write that named no path (a stream's flush)
            print(f"error: {e.strerror}; free space where the command writes (its --out), then run again",
                  file=sys.stderr)
            return 2
        if e.filename is None or e.errno not in _PATH_ERRORS:
            raise
        # a path the verb's own checks did not foresee (the disk filled, a folder vanished): one line
        fix = "free space there" if e.errno in SPACE_ERRORS else "check the path"
        print(f"error: cannot use {e.filename} ({e.strerror}); {fix}, then run again", file=sys.stderr)
        return 2


# OS errors that name a path the user can fix (permissions, read-only, full disk, wrong kind of path)
_PATH_ERRORS = {getattr(errno, name) for name in ("EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EISDIR", "ENOTDIR",
                                                  "EEXIST", "ENOENT", "ENAMETOOLONG") if hasattr(errno, name)}


if __name__ == "__main__":
    sys.exit(main())
