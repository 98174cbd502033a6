"""The `scaling` command itself: its restart with glibc's allocator kept from returning memory, help, errors."""

import os
import re
import subprocess
import sys

import pytest

from scaling.cli import MALLOC_ENV, build_parser, main, malloc_reexec


def test_malloc_settings_are_added_once_and_can_be_turned_off():
    env = malloc_reexec({"PATH": "/bin"}, platform="linux")
    assert env == {"PATH": "/bin", **MALLOC_ENV}
    assert malloc_reexec(env, platform="linux") is None  # already set: no second restart
    assert malloc_reexec({"SCALING_MALLOC_TUNING": "0"}, platform="linux") is None
    assert malloc_reexec({}, platform="darwin") is None


def test_the_command_restarts_tuned_and_keeps_its_exit_code(tmp_path):
    # sitecustomize runs at every interpreter start: it records what each process's environment holds.
    seen = tmp_path / "seen.txt"
    (tmp_path / "sitecustomize.py").write_text(
        f"import os\nopen({str(seen)!r}, 'a').write(os.environ.get('MALLOC_TRIM_THRESHOLD_', '-') + '\\n')\n")
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != "SCALING_MALLOC_TUNING"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [env.get("PYTHONPATH")])])
    probe = "import sys; sys.argv = ['scaling', 'models', '--family', 'gpt']; from scaling.cli import main; sys.exit(main())"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "unknown model family 'gpt'" in run.stderr  # from the restarted command
    assert seen.read_text().split() == ["-", MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]]  # started once, restarted once


def test_folders_named_like_our_packages_where_the_user_stands_do_not_hide_them(tmp_path):
    """The restarted command must not import reports/, models/, fits/, sweeps/ or scaling/ from the working
    directory (`scaling report --out reports/a` makes such a folder; a second report then crashed)."""
    for name in ("reports", "models", "fits", "sweeps", "scaling"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise SystemExit('imported from the working directory')\n")
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != "SCALING_MALLOC_TUNING"}
    probe = "import sys; sys.argv = ['scaling', 'models', '--family', 'nanochat']; from scaling.cli import main; sys.exit(main())"
    # (-c puts the working directory on this probe's own path too: it imports scaling.cli from elsewhere first)
    run = subprocess.run([sys.executable, "-c", f"import sys; del sys.path[0]; {probe}"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "working directory" not in run.stderr, run.stderr
    assert "nanochat" in run.stdout


def test_a_local_sweep_worker_does_not_import_from_the_working_directory(tmp_path):
    from sweeps.launch import WORKER_COMMAND

    for name in ("reports", "models", "fits", "sweeps", "scaling"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise SystemExit('imported from the working directory')\n")
    run = subprocess.run(WORKER_COMMAND, cwd=tmp_path, input="", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "working directory" not in run.stderr, run.stderr


def test_the_bench_help_names_every_section():
    """`scaling --help` reads each verb's line from cli.VERBS (no verb module is imported for it): the
    bench line must keep up with bench's sections."""
    from scaling.cli import VERBS
    from scaling.commands.bench import SECTIONS

    import re

    assert set(SECTIONS) <= set(re.findall(r"\w+", VERBS["bench"][1])), VERBS["bench"][1]


def test_help_shows_each_default_once(capsys):
    import pytest

    from scaling.cli import main

    def help_of(*verb: str) -> str:
        with pytest.raises(SystemExit):
            main([*verb, "--help"])
        return " ".join(capsys.readouterr().out.split())  # argparse wraps lines

    fit = help_of("fit")
    assert "(default: 1000)" in fit and "(default: chinchilla)" in fit and "(default: 0)" in fit
    # a flag off by default says nothing of a default
    assert "--json print the result as JSON on stdout (notices and the bootstrap's progress stay on stderr) --out" in fit
    train = help_of("train")
    assert "(default 0)" in train and "(default: 0)" not in train  # help that gives its default is kept
    assert "(default: [])" not in help_of("sweep", "launch")  # an empty list is no default
    # a verb's sub-verbs show theirs too (`sweep plan --mfu` had one, 0.3; now none of theirs has one to show)
    from scaling.cli import _HelpWithDefaults, _parser_of, build_parser

    parser = build_parser(["sweep", "plan", "x.toml"])
    assert _parser_of(parser, parser.parse_args(["sweep", "plan", "x.toml"])).formatter_class is _HelpWithDefaults


def test_every_verb_and_sub_verb_says_what_it_does_and_what_its_positionals_are():
    """Each parser's --help opens with a description and explains each positional (`scaling sweep status
    --help` showed a bare SWEEP_DIR under no description)."""
    import argparse

    from scaling.cli import VERBS

    def unexplained(parser: argparse.ArgumentParser, name: str) -> list[str]:
        found = [] if parser.description else [f"{name}: no description"]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    found += unexplained(sub, f"{name} {sub_name}")
            elif not action.option_strings and not action.help:
                found.append(f"{name}: {action.metavar or action.dest} has no help")
        return found

    assert [line for verb in VERBS for line in unexplained(build_parser([verb]), "scaling")] == []


def test_a_full_disk_is_one_line_whether_or_not_the_error_names_a_path(monkeypatch, capsys):
    import errno

    from scaling.cli import main
    from scaling.commands import models

    for error in (OSError(errno.ENOSPC, "No space left on device"),  # a stream's flush names no file
                  OSError(errno.ENOSPC, "No space left on device", "/data/out/train.bin")):
        monkeypatch.setattr(models, "run", lambda args, e=error: (_ for _ in ()).throw(e))
        assert main(["models"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "No space left on device" in err, err
        assert "free space" in err


@pytest.mark.parametrize("argv, option", [
    (["train", "--family", "nanochat", "--size", "1M", "--out", ""], "--out"),  # was: runs/adhoc/<id>, silently
    (["train", "--family", "nanochat", "--size", "1M", "--ou", ""], "--out"),  # (an abbreviation)
    (["fit", "results.parquet", "--out="], "--out"),  # (a Path option: Path("") is the working folder)
    (["sweep", "collect", "sweeps/x", "--out", ""], "--out"),
    (["data", "prepare", "builtin", "--tokenizer", ""], "--tokenizer"),
    (["data", "prepare", "a.txt", "--val", "b.txt", ""], "--val"),  # an empty item of a list option
    (["data", "prepare", "builtin", "--vocab-size", ""], "--vocab-size"),
])
def test_an_option_given_an_empty_value_is_refused(tmp_path, monkeypatch, capsys, argv, option):
    """`--out "$DIR"` with DIR unset: one line naming the option, exit 2, nothing made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: empty value: give one, or leave the option out for its default; see `scaling " in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_an_empty_positional_after_a_flag_is_not_blamed_on_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["data", "info", "--json", ""]) == 2
    assert "--json" not in capsys.readouterr().err


def test_options_keep_their_types_and_defaults():
    args = build_parser(["models"]).parse_args(["models", "--seq-len", "300"])
    assert args.seq_len == 300 and args.vocab_size == 32768


@pytest.mark.parametrize("argv, verb, unknown", [
    (["models", "--size", "3Q"], "scaling models", "--size 3Q"),
    (["--bogus", "models"], "scaling", "--bogus"),  # before the verb: the top-level parser's
    (["data", "prepare", "builtin", "--bogus"], "scaling data prepare", "--bogus"),
])
def test_an_unknown_option_points_to_the_verbs_own_help(argv, verb, unknown, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err == f"error: {verb}: unrecognized arguments: {unknown}; see `{verb} --help`\n"


def test_a_one_record_table_wider_than_the_terminal_is_printed_a_field_a_line(monkeypatch, capsys):
    """`scaling train`'s result (one row of ~20 fields) on an 80-column terminal folded every cell into a column a
    few characters wide ('compl' / 'eted'); a record too wide for the terminal is printed a field a line instead,
    and one that fits, or a table of several rows, as before."""
    from scaling.console import print_table

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    record = {f"field_{i}": f"value-{i}-completed" for i in range(12)}
    print_table([record], title="run runs/x")
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # (a terminal's: rich's colour codes)
    assert max(map(len, out.splitlines())) <= 80, out
    for key, value in record.items():
        assert any(key in line and value in line for line in out.splitlines()), (key, out)
    print_table([{"a": "completed", "b": 1}])  # fits: a column per field, as before
    assert re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).splitlines()[1].split() == ["┃", "a", "┃", "b", "┃"]


def test_a_rounded_number_never_reads_as_an_exact_one():
    """`scaling train`'s table read 'val_bpb 2' for 1.99993 (under its progress line's 'val_bpb 1.9999') and 8545.31
    read '8545': a rounded number keeps its trailing zeros, or one more digit where all four are left of the point; an
    exact one reads as itself; scientific notation below 1e-3 and from 1e5 as before."""
    import math

    from scaling.console import number

    values = (1.99993, 5.816398, 8545.31, 1234.0, 0.1, 1.0, 30.0, 0.99996, 20.700001, 1234567.0, 2.5e-4, 0.0)
    assert [number(x) for x in values] == [
        "2.000", "5.816", "8545.3", "1234", "0.1", "1", "30", "1.000", "20.70", "1.235e+06", "2.500e-04", "0"]
    assert [number(x) for x in (math.nan, math.inf, -math.inf)] == ["nan", "inf", "-inf"]
    assert number(1.99993, 6) == "1.99993"


def test_a_column_shows_the_digits_that_tell_its_values_apart(capsys):
    """A ratio of 0.99996 printed '1' beside a row of 1 read as 'no change', and val_bpb 1.99993 and 1.99996 both read
    '2.000': a column's numbers get the significant digits (4 at least, 8 at most) that keep its distinct values distinct,
    each column its own; equal values, ints and text leave a column at 4."""
    from scaling.console import print_table

    rows = [{"run": "a", "ratio": 1.0, "val_bpb": 1.99993, "loss": 3.14159, "steps": 100},
            {"run": "b", "ratio": 0.99996, "val_bpb": 1.99996, "loss": 3.14159, "steps": 101},
            {"run": "c", "ratio": 1.0 + 1e-12, "val_bpb": None, "loss": 2.5, "steps": 7}]
    print_table(rows)
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in capsys.readouterr().out.splitlines()
             if line.startswith("│")]
    assert cells == [["a", "1", "1.9999", "3.142", "100"],  # (5 digits tell 1.99993 from 1.99996)
                     ["b", "0.99996", "2.0000", "3.142", "101"],
                     ["c", "1.0000000", "", "2.5", "7"]]  # (8 at most: 1 + 1e-12 reads as 1, rounded)
