"""Read what a report is built from: a sweep directory, or a results table from anywhere.

A sweep directory gives one result record per run (`sweeps.store.collect`), each run's validation
curve (`<run_id>/metrics.csv`) and, when `scaling demo`/the user put one there, `diagnostics.json`.
A bare CSV/parquet of external results (recipe, N, D or C, loss) gives only final losses; the report
then leaves out what needs more (curves, statuses, provenance) and says so.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from scaling.errors import UserError

if TYPE_CHECKING:
    from sweeps.store import RunStatus

DIAGNOSTICS_NAME = "diagnostics.json"


@dataclass
class Study:
    """Everything the report reads, already normalised."""

    source: Path
    runs: pl.DataFrame  # one row per run: recipe, N, D, C, loss, status, run_id (+ record fields if known)
    curves: dict[str, pl.DataFrame] = field(default_factory=dict)  # run_id -> tokens, val_loss
    sweep_dir: Path | None = None
    run_root: Path | None = None  # where <run_id>/ folders would be: the sweep dir, or the table's folder
    diagnostics: Any = None
    diagnostics_path: Path | None = None
    from_records: bool = False  # True when rows are result records (status, versions, ... known)
    has_status: bool = False  # True when each run's status is known (records, or a table's status column)
    earlier_rows: int = 0  # a table's rows set aside as earlier checkpoints of a run (`_final_rows`)
    unfinished: list[RunStatus] = field(default_factory=list)  # a sweep's runs without a result, as status has them
    loss_column: str = "loss"  # the source's column read as `loss` (a result record's val_loss, or a table's)

    @property
    def validation_loss(self) -> bool:
        """Whether `loss` is the result records' final validation loss (a sweep's, its collected table's, or a
        report's results.csv, which names it `loss`), not a table's column that could hold any loss."""
        return self.from_records and self.loss_column in ("val_loss", "loss")


def _normalise(df: pl.DataFrame, source: Path, columns: dict[str, str]) -> pl.DataFrame:
    """Give any results table the columns recipe, run_id, N, D, C, loss, status (keeping the others),
    found and derived as the fits find them (`fits.table`: N, D, C, loss, the result record's n_params,
    tokens, flops, val_loss, or what `columns` maps them to; C = 6·N·D)."""
    from fits.table import default_run_ids, find_columns, strip_number_cells, with_compute

    got = find_columns(df, columns, str(source)) | {"status": _status_column(df, columns)}
    df = strip_number_cells(df, got)
    picked = {col: name for name, col in got.items() if col is not None and col != name}
    # A mapped column takes its canonical name; a column already called that yields to it, unless it is mapped
    # itself (names swapped, "N=D,D=N": dropped, it was not there to rename).
    df = df.drop([name for name in picked.values() if name in df.columns and name not in picked]).rename(picked)
    df = with_compute(df.with_columns(pl.col(c).cast(pl.Float64, strict=False) for c in ("N", "D", "C", "loss")
                                      if c in df.columns))
    if "recipe" not in df.columns:
        df = df.with_columns(pl.lit("all").alias("recipe"))
    if "run_id" not in df.columns:
        df = df.with_columns(default_run_ids(df.height))
    if "status" not in df.columns:
        df = df.with_columns(pl.lit("completed").alias("status"))
    # a blank status cell is no completed run: listed among the failures, not dropped unsaid
    df = df.with_columns(pl.col("status").cast(pl.Utf8).fill_null("unknown"))
    if "lr_mult" in df.columns:  # records written before result.json kept it ran at the default
        df = df.with_columns(pl.col("lr_mult").cast(pl.Float64, strict=False).fill_null(1.0))
    return df.with_columns(pl.col("recipe").cast(pl.Utf8), pl.col("run_id").cast(pl.Utf8))


def _final_rows(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per run: where a table has several rows of one run_id (its checkpoints), the one with
    the most tokens. A run's mid-training losses are not points of the law (its learning rate has not
    decayed there), and the report counts, pairs and lists runs; `scaling fit` on such a table fits
    every row, resampled by run."""
    if runs.select("recipe", "run_id").n_unique() == runs.height:  # a run is (recipe, run_id), as in the fits
        return runs
    last = runs.with_row_index("_row").sort("D", maintain_order=True).group_by("recipe", "run_id").last()
    return last.sort("_row").select(runs.columns)  # in the table's order


def _status_column(df: pl.DataFrame, columns: dict[str, str]) -> str | None:
    """The table's column of run statuses (`status`, or what --columns maps it to), if any."""
    from fits.table import pick_column

    return pick_column(df, "status", columns)


def _unfinished(runs: list[RunStatus], finished: pl.Series) -> list[RunStatus]:
    """The sweep's runs that have no result (killed, cancelled, crashed, still queued or running, never
    submitted), of `collect_runs`' unfinished `runs` (a record of status failed is a result, among `finished`'s
    run ids: listed with the failures): collect has no row for them, and a report silent about them reads as a
    whole sweep."""
    results = set(finished.to_list())
    return [r for r in runs if r.run_id not in results]


def _read_curves(run_root: Path, run_ids: list[str]) -> dict[str, pl.DataFrame]:
    curves = {}
    for run_id in run_ids:
        path = run_root / run_id / "metrics.csv"
        if not path.is_file():
            continue
        try:
            curve = pl.read_csv(path, infer_schema_length=10_000)
        except (pl.exceptions.PolarsError, OSError) as e:  # damaged by hand or disk: one run's curve, not the report
            print(f"warning: {path} cannot be read ({str(e).splitlines()[0][:160]}); that run has no validation curve "
                  "in the report", file=sys.stderr)
            continue
        if {"tokens", "val_loss"} <= set(curve.columns):
            curve = curve.select(pl.col("tokens").cast(pl.Float64), pl.col("val_loss").cast(pl.Float64, strict=False))
            curves[run_id] = curve.drop_nulls().sort("tokens")
    return curves


def read_diagnostics(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"diagnostics file {path} does not exist; pass the JSON written by `scaling diagnose --json`")
    except json.JSONDecodeError as e:
        raise UserError(f"diagnostics file {path} is not JSON ({e}); pass the output of `scaling diagnose --json`")
    except UnicodeDecodeError:  # (a binary file, or JSON saved as UTF-16 by a Windows editor: a traceback)
        raise UserError(f"diagnostics file {path} is not JSON (not UTF-8 text); pass the output of "
                        "`scaling diagnose --json`, saved as UTF-8") from None


def _what_folder_holds(folder: Path) -> str:
    """For a folder that is no sweep's: the tables and sweep folders in it that `scaling report` reads (an
    earlier report's folder holds its results.csv; runs/ holds sweeps), as words to add to the refusal."""
    from fits.table import table_format

    try:
        tables = sorted(p for p in folder.iterdir() if p.is_file() and table_format(p) is not None)
        sweeps = sorted(p for p in folder.iterdir() if (p / "sweep.json").is_file())
    except OSError:
        return ""
    found = [str(p) for p in (sweeps + tables)[:3]]
    if not found:
        return ""
    more = f" (and {len(sweeps) + len(tables) - 3} more)" if len(sweeps) + len(tables) > 3 else ""
    return f"; it holds {', '.join(found)}{more}, which `scaling report` reads: pass {'that' if len(found) == 1 else 'one'}"


def load(source: str | Path, diagnostics: str | Path | None = None, columns: dict[str, str] | str | None = None) -> Study:
    """Read a sweep directory or a results table into a `Study`.

    columns maps the fit names (N, D, C, loss, recipe, run_id) to a table's own, as `scaling fit --columns`.
    """
    from fits.table import parse_columns, pick_column

    columns = parse_columns(columns)
    source = Path(source)
    if not source.exists():
        raise UserError(f"{source} does not exist; pass a sweep directory (runs/<sweep>/) or a results .csv/.parquet")
    if source.is_dir():
        from sweeps.store import collect_runs, nothing_finished  # torch-free: it reads result.json files

        try:
            records, unfinished = collect_runs(source)  # (and the status of the runs without a result: one walk)
        except UserError as e:
            hint = _what_folder_holds(source) if "is not a sweep directory" in str(e) else ""  # (not a run's folder)
            raise UserError(str(e) + hint) from None
        if records.height == 0:
            raise nothing_finished(source, unfinished, "report")
        raw, run_root, sweep_dir = records, source, source
    else:
        from fits.table import read_file, read_table

        raw, run_root, sweep_dir = read_file(source), source.parent, None
        read_table(raw, columns, where=source)  # refuses what `scaling fit` refuses, naming the file's line
    # A results.parquet from `scaling sweep collect` carries the records' status and provenance too.
    from_records = sweep_dir is not None or {"status", "versions"} <= set(raw.columns)
    runs = _normalise(raw, source, columns)
    final = _final_rows(runs)
    study = Study(source=source, runs=final, sweep_dir=sweep_dir, from_records=from_records,
                  has_status=from_records or _status_column(raw, columns) is not None,
                  earlier_rows=runs.height - final.height, loss_column=pick_column(raw, "loss", columns))
    study.run_root = run_root
    if sweep_dir is not None:
        study.unfinished = _unfinished(unfinished, final["run_id"])
    study.curves = _read_curves(run_root, study.runs["run_id"].to_list())
    # Only a sweep's own diagnostics are picked up unasked: a CSV lying in some folder is not a sweep.
    found = run_root / DIAGNOSTICS_NAME
    if diagnostics:
        path = Path(diagnostics)
    else:
        path = found if found.is_file() and (sweep_dir or study.curves) else None
    if path is not None:
        study.diagnostics, study.diagnostics_path = read_diagnostics(path), path
    return study
