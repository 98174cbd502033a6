"""Printing for CLI verbs: human tables by default, JSON with --json. Torch-free."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Iterable, Sequence


def count(n: int, noun: str) -> str:
    """'1 run', '2 runs': a count with its noun (a regular plural)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


NOT_MEASURED = "not measured"


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


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
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
    for r in rows:
        table.add_row(*(Text(_cell(r.get(c))) for c in columns))
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


