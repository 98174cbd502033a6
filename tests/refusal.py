"""The check of a refusal that every test of bad input makes: the CLI exits 2 with one `error: ` line, no
traceback, naming what was wrong (DEVELOPERS' bar for bad input)."""

from __future__ import annotations

from scaling.cli import main


def refused(argv: list[str], capsys, *words: str) -> str:
    """Runs `scaling ARGV` and asserts it refused it: exit code 2 (argparse's own refusals included), stderr one
    line starting `error: ` without a traceback and holding every one of `words`; returns that line."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's refusal of an option's value
        code = e.code
    assert code == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), (argv, err)
    return err
