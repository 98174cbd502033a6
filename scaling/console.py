"""Printing for CLI verbs: human tables by default, JSON with --json. Torch-free."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Callable, Iterable, Sequence


def count(n: int, noun: str) -> str:
    """'1 run', '2 runs': a count with its noun (a regular plural)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


NOT_MEASURED = "not measured"
WITHIN_NOISE = "within noise"  # a claim whose interval over seeds straddles its bound (`scaling diagnose`)


def yes_no(value: bool | None) -> str:
    """A check's outcome in a table's words: 'yes', 'no', or NOT_MEASURED where there is none (None: a number it
    needs is not finite). The one spelling of `scaling diagnose`'s claims and of the report's true/false cells:
    diagnose printed 'yes'/'NO' where the report showed the same JSON as 'True'/'False' and '—'."""
    return NOT_MEASURED if value is None else "yes" if value else "no"


def duration(seconds: float | None) -> str:
    """'12m05s', '3h20m'; 'unknown' for None."""
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def time_left(done: float, to_do: float, elapsed_s: float) -> str:
    """'; 2m10s left': `to_do` more units at the pace of `done` units in `elapsed_s` seconds; '' while
    no pace is known (nothing done yet). For the progress lines written where a live bar shows nothing."""
    return f"; {duration(to_do * elapsed_s / done)} left" if done > 0 and elapsed_s > 0 else ""


def stamped(line: str, at_s: float) -> str:
    """'02:14:05Z step 40 of 183 (21%): ...': a progress line written as a line (a log, a pipe; not a live bar), led
    by the time of day it was written at (`at_s`, seconds since the epoch), so its 'left' counts from a known moment
    and a log shows when a run stalled. In UTC, marked Z: a log is read on other machines and in other zones (a
    cluster's, a collaborator's) as written, no DST change repeats an hour in it, and the project's other times
    (bench rows' date, a report's 'built') are UTC; `date -u` gives the time now to compare."""
    return f"{time.strftime('%H:%M:%S', time.gmtime(at_s))}Z {line}"


def notice(line: str, wall_clock: Callable[[], float] = time.time) -> None:
    """A one-off notice on stderr ('resuming from the checkpoint ... at step 120 of 915'): where stderr is not a
    terminal (a log, a pipe: a sweep's train.log) led by the UTC time it was written (`stamped`, from `wall_clock`),
    as the progress lines there are, so a log shows when a relaunch began; as it is on a terminal."""
    print(line if sys.stderr.isatty() else stamped(line, wall_clock()), file=sys.stderr, flush=True)


def share_done(done: float, total: float) -> str:
    """'13%': the share of `total` that is `done`, rounded down, so 100% is all of it (a run stopped at step 99,999 of
    100,000 read '(100%) ...; stopped'). For the progress lines."""
    return f"{math.floor(100 * done / max(total, 1))}%"


SIGNIFICANT = 4  # a table's number: this many significant digits, or more where its column needs them (below)
MOST_SIGNIFICANT = 8  # (values that agree to as many digits as this differ by float noise, not by a finding)


def number(x: float, digits: int = SIGNIFICANT) -> str:
    """A float as a person reads it: `digits` significant digits, in scientific notation below 1e-3 and from 1e5
    ('1.235e+06', the mantissa's digits all shown); 'nan', 'inf' as such. A rounded number keeps its trailing zeros,
    so none reads as an exact one: 1.99993 is '2.000' (it read '2', beside a progress line's 1.9999), 8545.31 is
    '8545.3' (not the whole number '8545'); an exact one reads as itself ('1', '0.5', '30'). The one spelling of a
    number in the console's tables."""
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    shown = f"{x:.{digits}g}"
    if float(shown) == x:
        return shown
    shown = f"{x:#.{digits}g}"
    # (every digit left of the point, '8545.': one more digit, as no point would read as a whole number)
    return f"{x:#.{digits + 1}g}" if shown.endswith(".") else shown


def column_digits(values: Iterable[Any]) -> int:
    """The significant digits a column's numbers need: SIGNIFICANT, or more (up to MOST_SIGNIFICANT) until its distinct
    values read distinct. A ratio of 0.99996 beside one of 1 read '1' beside '1' (no change), and two val_bpb of
    1.99993 and 1.99996 both read '2'. Every number of a column gets the same digits, its rows compare at a glance."""
    distinct = {float(v) for v in values
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    for digits in range(SIGNIFICANT, MOST_SIGNIFICANT):
        if len({float(number(v, digits)) for v in distinct}) == len(distinct):
            return digits
    return MOST_SIGNIFICANT


def _cell(value: Any, digits: int = SIGNIFICANT) -> str:
    if isinstance(value, float):
        return number(value, digits)
    return "" if value is None else str(value)


def print_table(rows: Iterable[dict], columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print dict rows as a rich table (plain text when stdout is not a terminal)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Every string as Text, never as rich markup: a recipe named 'fp4[red]x' was printed 'fp4x', and one named
    # 'fp4[/b]' ended `scaling fit` in a MarkupError traceback
    rows = list(rows)
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))  # (every row's keys, first seen first)
    caption = Text(title, style="table.title") if title is not None else None
    table = Table(title=caption, show_lines=False)
    for c in columns:
        table.add_column(Text(c), overflow="fold")
    digits = {c: column_digits(r.get(c) for r in rows) for c in columns}
    for r in rows:
        table.add_row(*(Text(_cell(r.get(c), digits[c])) for c in columns))
    # Piped (a log, a file): as wide as the table needs, so no number is folded across lines
    console = Console(width=None if sys.stdout.isatty() else 100_000)
    if len(rows) == 1 and console.measure(table, options=console.options.update_width(100_000)).maximum > console.width:
        # one record wider than the terminal (`scaling train`'s result): a line per field, not every cell folded
        # into a column a few characters wide ('compl/eted')
        table = Table(title=caption, show_lines=False)
        table.add_column(Text("field"))
        table.add_column(Text("value"), overflow="fold")
        for c in columns:
            table.add_row(Text(c), Text(_cell(rows[0].get(c))))
    console.print(table)


def _default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(o)
    return str(o)


def print_json(obj: Any) -> None:
    """Print one JSON document to stdout (NaN is written as null so any parser reads it)."""
    from scaling.files import json_ready

    json.dump(json_ready(obj), sys.stdout, indent=2, default=_default)
    sys.stdout.write("\n")


