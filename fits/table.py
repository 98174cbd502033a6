"""Read and validate an input table: one row per point (a run's final loss, or a checkpoint of a run).

Accepted: a sweep's results.parquet (recipe, n_params, tokens, val_loss, run_id, status) or any
CSV/parquet with columns recipe, N, D (or C, with D = C / 6N), loss; run_id optional (each row is
then its own run); no recipe column means one group named `all`. Problems raise UserError.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from scaling.console import count
from scaling.errors import UserError
from scaling.recipes import FORMAT_COLUMNS

CANONICAL = ("recipe", "run_id", "N", "D", "C", "loss", "status")
# Kept as given: runs of different recipes at one N, D and seed are twins (same initialisation and data order), which
# the bootstrap draws together (`fits.analysis.pairing`)
PAIR_COLUMNS = ("seed",)
# Names a sweep's result record uses for the same quantities (DESIGN.md, result record).
ALIASES = {"N": ("n_params",), "D": ("tokens",), "C": ("flops",), "loss": ("val_loss",)}


def parse_columns(spec: str | dict[str, str] | None) -> dict[str, str]:
    """'N=Model Size,C=Training FLOP' -> {'N': 'Model Size', 'C': 'Training FLOP'}; a dict is taken as
    that mapping already (a copy), None as no mapping."""
    if isinstance(spec, dict):
        return dict(spec)
    mapping: dict[str, str] = {}
    parts: list[str] = []
    for piece in (spec or "").split(","):
        # A piece without '=' continues the entry before it: a column name may hold commas ("Params (M, non-emb)")
        if parts and piece.strip() and "=" not in piece:
            parts[-1] += "," + piece
        else:
            parts.append(piece)
    for part in parts:
        if not part.strip():
            continue
        key, sep, source = part.partition("=")
        key, source = key.strip(), source.strip()
        if not sep or key not in CANONICAL or not source:
            raise UserError(f"--columns entry {part.strip()!r} is not NAME=COLUMN with NAME one of "
                            f"{', '.join(CANONICAL)} (example: --columns \"N=Model Size,C=Training FLOP\")")
        if key in mapping and mapping[key] != source:  # (the last one was read, the first dropped without a word)
            raise UserError(f"--columns maps {key} twice, to {mapping[key]!r} and to {source!r}; give each name once")
        mapping[key] = source
    return mapping


PARQUET_SUFFIXES = (".parquet", ".pq")  # read as parquet (any case)
CSV_SUFFIXES = (".csv", ".csv.gz")  # read as CSV (any case; polars decompresses a .csv.gz)


def table_format(path: str | Path) -> str | None:
    """How a results table is read, by its name's ending: "parquet", "csv", or None where the name is no table's."""
    name = Path(path).name.lower()
    return "parquet" if name.endswith(PARQUET_SUFFIXES) else "csv" if name.endswith(CSV_SUFFIXES) else None


def read_file(path: Path) -> pl.DataFrame:
    """A results table's file as it is: CSV or parquet by its name (`table_format`); `scaling fit`, `scaling report`
    and `read_table` read tables through it, so that they take the same files."""
    if not path.exists():
        raise UserError(f"results file {path} does not exist; pass a results.parquet or a CSV/parquet table")
    kind = table_format(path)
    if kind is None:
        _refuse_other_name(path)
    parquet = kind == "parquet"
    if path.is_file() and path.stat().st_size == 0:
        raise UserError(f"results file {path} is empty; pass a table with a header row (recipe, N, D or C, loss) "
                        "and one row per run")
    if not parquet and path.is_file():
        _check_header(path)
    try:
        if parquet:
            return pl.read_parquet(path)
        return _drop_trailing_blank_lines(pl.read_csv(path, infer_schema_length=10000))
    except Exception as e:  # polars raises several types for unreadable input
        if not parquet and "invalid utf-8" in str(e):
            raise UserError(f"cannot read {path} as CSV: it is not UTF-8 text (Latin-1 or a Windows code page?); "
                            "save it as CSV in UTF-8, then run again") from None
        if not parquet and "more fields than defined" in str(e):  # a title line above the header, say
            raise UserError(f"cannot read {path} as CSV: a line has more fields than its first line "
                            f"({_first_line(path)!r}) names; is that line the header row? Remove any lines above "
                            "it, and quote fields holding commas") from None
        raise UserError(f"cannot read {path} as {'parquet' if parquet else 'CSV'} "
                        f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def _drop_trailing_blank_lines(df: pl.DataFrame) -> pl.DataFrame:
    """df without its last rows that are wholly empty: a CSV's empty last lines (an editor's, or `echo >>`'s)
    read as rows of nulls, refused as a missing N, D, loss at a line the user cannot see. An empty line inside
    the table stays, for the checks to name by its line (dropped, every line named after it would be off)."""
    filled = df.select(pl.any_horizontal(pl.all().is_not_null())).to_series().arg_true()
    return df.head(filled[-1] + 1 if filled.len() else 0)


def _first_line(path: Path) -> str:
    with open(path, "rb") as f:
        return f.readline(200).decode("utf-8-sig", "replace").strip()[:60]


BINARY_KINDS = {  # a file's first bytes -> what it is and what to do, for a table read as CSV
    b"PAR1": "a Parquet file under another name; name it .parquet",
    b"PK\x03\x04": "a zip archive (an Excel .xlsx workbook?), not CSV text; export the sheet as CSV in UTF-8",
}
GZIP = b"\x1f\x8b"  # a gzip-compressed CSV, which polars reads as it is


def _refuse_binary(path: Path, raw: bytes) -> None:
    """A table read as CSV whose first line is not UTF-8 text: UTF-16 (read as UTF-8 its names are spelt
    'r e c i p e', refused as lacking N and loss) or a binary file, named by what it is."""
    for magic, what in BINARY_KINDS.items():
        if raw.startswith(magic):
            raise UserError(f"{path} is {what}, then run again")
    head = raw[:64]
    utf16 = raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(head) >= 4 and (not any(head[1::2]) or not any(head[0::2])))
    if utf16:
        raise UserError(f"{path} is UTF-16 text (a spreadsheet's 'Unicode text' export); save it as CSV in UTF-8, "
                        "then run again")
    if b"\0" in raw:
        raise UserError(f"{path} is a binary file, not a CSV or parquet table; pass a .csv (UTF-8 text) or a .parquet")


def _refuse_other_name(path: Path) -> None:
    """A UserError for a file not named as a table (a recipe's .toml, a .txt, a .json): what its first line shows it
    is where it does (JSON, a workbook, Parquet under another name), else how a table is named. `scaling fit` read it
    as CSV, refused as lacking N and loss with columns named by its first line (`name = "x"`); `scaling report`
    refused it outright."""
    if path.is_file():
        with open(path, "rb") as f:
            raw = f.readline(100_000)
        _refuse_binary(path, raw)
        _refuse_json(path, raw.decode("utf-8-sig", "replace"))
    raise UserError(f"{path} is not named as a results table: a table is read by its name's ending, .csv (or .csv.gz) "
                    "or .parquet (or .pq); pass such a file (a CSV table under another name: rename it .csv)")


def _check_header(path: Path) -> None:
    """What polars reads without a word from a CSV's header line. A CSV saved with ';' or tabs (a spreadsheet
    in a comma-decimal locale) reads as one column named by the whole line, or fails on its decimal commas
    as "more fields than defined": neither message says the separator is the problem. A name given twice
    (two `loss` columns) is renamed `loss_duplicated_0` and the first one fitted, whichever was meant."""
    import csv

    with open(path, "rb") as f:
        raw = f.readline(100_000)
    if raw.startswith(GZIP):  # (its compressed bytes are no header to check)
        return
    _refuse_binary(path, raw)
    header = raw.decode("utf-8-sig", "replace")
    _refuse_json(path, header)
    if header.lstrip().startswith("#"):  # a tool's note above the table: polars failed "more fields than defined"
        raise UserError(f"{path} begins with a comment line ({header.strip()[:60]!r}), not the header row; remove the "
                        "lines above the header (recipe, N, D or C, loss), then run again")
    names = next(csv.reader([header]), [])
    twice = sorted({n.strip() for n in names if n.strip() and sum(m.strip() == n.strip() for m in names) > 1})
    if twice:
        raise UserError(f"{path} has several columns named {', '.join(map(repr, twice))}; rename them so that each "
                        "name is one column's (or drop the ones not meant), then run again")
    if "," in header:
        return
    sep = next((s for s in (";", "\t", "|") if s in header), None)
    if sep is not None:
        shown = {"\t": "tab", ";": "';'", "|": "'|'"}[sep]
        raise UserError(f"{path} is {shown}-separated (its header line: {header.strip()[:60]!r}); save it "
                        "comma-separated (CSV with ','), with '.' as the decimal point")


def _refuse_json(path: Path, header: str) -> None:
    """A JSON or JSON-lines file read as CSV has columns named by fragments of its first line, so it was refused
    as lacking N and loss, listing those fragments: say what it is and how to convert it."""
    start = header.lstrip()[:1]
    if start not in ("{", "["):
        return
    reader = "read_ndjson" if start == "{" else "read_json"  # one object per line, or one array
    raise UserError(f"{path} holds JSON, not a table (its first line: {header.strip()[:40]!r}); pass a CSV or parquet "
                    f"table, e.g. converted with python -c \"import polars as pl; pl.{reader}('{path}')"
                    ".write_csv('results.csv')\"")


def column_list(df: pl.DataFrame, width: int = 60, most: int = 20) -> str:
    """A table's column names for a message: each cut to `width` characters and at most `most` of them
    (a JSON-lines file read as CSV has one column named by its whole first line), quoted where spaces or
    control characters surround them."""
    # A name with spaces or a stray carriage return around it is quoted: printed bare, 'loss\r' read as loss.
    names = [n if n == n.strip() else repr(n) for n in df.columns[:most]]
    names = [n if len(n) <= width else n[: width - 1] + "…" for n in names]
    return ", ".join(names) + (f", … ({len(df.columns)} in all)" if len(df.columns) > most else "")


def pick_column(df: pl.DataFrame, name: str, mapping: dict[str, str]) -> str | None:
    """The column holding `name` (a CANONICAL name): the one `mapping` names, else the name itself,
    else a result record's alias; None where there is none."""
    if name in mapping:
        if mapping[name] not in df.columns:
            comma = (" (a comma followed by no NAME= is part of the column's name: give each entry as NAME=COLUMN)"
                     if "," in mapping[name] else "")
            raise UserError(f"--columns maps {name} to {mapping[name]!r}, which is not a column "
                            f"(columns: {column_list(df)}){comma}")
        return mapping[name]
    for candidate in (name, *ALIASES.get(name, ())):
        if candidate in df.columns:
            return candidate
    return None


def never_completed(df: pl.DataFrame, columns: dict[str, str] | str | None = None) -> dict[str, str]:
    """The recipes of a table with statuses none of whose runs completed, each with why in words (the
    clearest result a recipe can give: it never trained to the end). `read_table` keeps completed runs
    only, so a fit would otherwise not know these recipes existed. {} for a table without statuses."""
    mapping = parse_columns(columns)
    recipe, status = pick_column(df, "recipe", mapping), pick_column(df, "status", mapping)
    loss = pick_column(df, "loss", mapping)
    if recipe is None or status is None:
        return {}
    point = fit_point(status, loss) if loss else pl.col(status).cast(pl.Utf8) == "completed"
    states = df.select(recipe=pl.col(recipe).cast(pl.Utf8), point=point, status=_ended(status))
    out = {}
    for (name,), rows in states.group_by("recipe"):
        if name is not None and not rows["point"].any():
            out[name] = f"{name}: {_not_completed(rows['status'])}"
    return dict(sorted(out.items()))


def _not_completed(statuses: pl.Series) -> str:
    """How a recipe's runs, none of them a point, ended, in words: its only run's status, or the count of each."""
    if statuses.len() == 1:
        said = statuses[0]
        return f"its only run {said}" if said == NO_LOSS else f"its only run did not complete ({said})"
    finite = " with a finite loss" if (statuses == NO_LOSS).any() else ""
    return f"none of its {count(statuses.len(), 'run')} completed{finite} ({_counts(statuses)})"


NO_LOSS = "completed without a finite loss"  # how `never_completed` counts such runs


def _ended(status: str) -> pl.Expr:
    """How a row's run ended, in words: its status, where a completed run without a finite loss (no point
    either) is said as such, not as "completed"."""
    said = pl.col(status).cast(pl.Utf8).fill_null("unknown")
    return pl.when(said == "completed").then(pl.lit(NO_LOSS)).otherwise(said)


def _counts(ended: pl.Series) -> str:
    """'1 completed without a finite loss, 2 diverged': each way of ending with its count."""
    return ", ".join(f"{n} {s}" for s, n in sorted(ended.value_counts().iter_rows()))


# What a table without each optional column is taken to mean: a misspelt one is read as absent, silently.
OPTIONAL_MEANING = {"recipe": "every row is fitted as one group, 'all', whatever its recipe",
                    "run_id": "every row is its own run, so a run's checkpoints are resampled apart",
                    "status": "every row counts as a completed run, diverged ones included"}


def _near_miss(df: pl.DataFrame, name: str) -> str | None:
    """df's column spelt almost like `name` (`Recipe`, `recipe `, `runid`) or holding it as a word (`Recipe Name`,
    `recipe-name`, `fp4_recipe`, `run_status`), else None."""
    import difflib

    simple = {c.strip().lower().replace(" ", "_"): c for c in df.columns}
    close = difflib.get_close_matches(name, list(simple), n=1, cutoff=0.8)
    if close:
        return simple[close[0]]
    letters = lambda s: re.sub(r"[^a-z0-9]", "", s.lower())  # noqa: E731  ('Run ID' -> 'runid')
    return next((c for c in df.columns if letters(name) in letters(c)), None)


def _refuse_near_miss(df: pl.DataFrame, name: str, where: str) -> None:
    """UserError where df lacks the optional column `name` but has one named almost like it (`_near_miss`):
    read as absent, a two-recipe table (its recipes under `Recipe` or `Recipe Name`) was fitted as one group
    and exited 0."""
    column = _near_miss(df, name)
    if column is not None:
        # (--columns strips spaces, so a name with spaces around it can only be renamed)
        mapped = "" if column != column.strip() else f", or map it with --columns \"{name}={column}\""
        raise UserError(f"{where} has no {name!r} column but has {column!r}; rename it to {name}{mapped} "
                        f"(without a {name} column {OPTIONAL_MEANING[name]})")


# A cell naming a number format (bf16, BF16, bfloat16, FP4, mxfp4, nvfp4_rht, int8, e4m3): the whole cell is a name's
# characters, so a '#abf160' colour (Chinchilla's table has two columns of them) is no format.
FORMAT_CELL = re.compile(r"^[a-z0-9_+\-. ()/]*(bf16|bfloat16|fp\d|float\d|int\d|e\dm\d)[a-z0-9_+\-. ()/]*$", re.I)


def _refuse_unnamed_recipes(df: pl.DataFrame, got: dict[str, str | None], where: str) -> None:
    """UserError where df has no recipe column but a text column holding several number formats' names (a hardware
    team's `precision` or `dtype` of BF16 and FP4): read as a table without recipes, both were fitted as one group,
    'all', and `scaling fit` exited 0 with "One group (all) and no baseline"."""
    used = {c for c in got.values() if c is not None}
    for column in df.columns:
        if column in used or df[column].dtype != pl.Utf8:
            continue
        values = df[column].drop_nulls().str.strip_chars().unique(maintain_order=True)
        formats = [v for v in values if FORMAT_CELL.match(v)]
        if values.len() > 1 and formats:
            shown = ", ".join(repr(v) for v in values.head(4)) + (", …" if values.len() > 4 else "")
            raise UserError(f"{where} has no 'recipe' column, but its column {column!r} holds {values.len()} values "
                            f"naming number formats ({shown}): without a recipe column {OPTIONAL_MEANING['recipe']}; "
                            f"map it with --columns \"recipe={column}\" (or drop that column to fit every row as one "
                            "group)")


# A loss column named for another unit than nats per token: bits (`loss_bits`), bits per byte or character
# (`bpb`, `val_bpc`, `bits_per_byte`), perplexity (`ppl`). Its numbers cannot tell: a loss of 3.5 is either.
LOSS_UNIT_NAME = re.compile(r"(^|[^a-z0-9])(bits?|bpb|bpc|bpt|ppl|perplexity)([^a-z]|$)")  # (not `loss_4bit`'s)


def _refuse_loss_unit(column: str, where: str) -> None:
    """UserError where the loss column's name says it is not in nats per token: read as nats, bits were fitted
    without a word, every gap printed as nats 1.44 times too large (a perplexity's law is not the law at all)."""
    named = LOSS_UNIT_NAME.search(column.lower())
    if named is None:
        return
    word, col = named.group(2), f"pl.col('{column}')"
    if word in ("ppl", "perplexity"):
        unit, change, nats = "a perplexity", "loss = ln(perplexity)", f"{col}.log()"
    elif word in ("bpb", "bpc") or any(w in column.lower() for w in ("byte", "char")):
        unit, change, nats = ("bits per byte or character",
                              "loss = bits × ln 2 × the tokenizer's bytes (characters) per token", None)
    else:
        unit, change, nats = "bits", "loss = bits × ln 2", f"{col} * math.log(2)"
    reader = "read_parquet" if table_format(where) == "parquet" else "read_csv"
    convert = ("" if nats is None or not Path(where).suffix else  # (a DataFrame's `where` is no file to read)
               f", e.g. python -c \"import math, polars as pl; pl.{reader}('{where}').with_columns(loss={nats})"
               ".write_csv('nats.csv')\"")
    raise UserError(f"{where}'s loss column {column!r} is named as {unit}, but the fits read losses in nats per "
                    f"token (and say gaps in nats): convert it ({change}){convert}, then fit the converted table "
                    "(if the column holds nats per token after all, rename it)")


def _refuse_two_candidates(df: pl.DataFrame, name: str, mapping: dict[str, str], where: str) -> None:
    """UserError where no --columns entry names `name`'s column and df has both `name` and a result record's
    alias of it (`loss` beside `val_loss`, which may be a training loss beside the validation loss): the canonical
    name was fitted without a word, whichever the user meant."""
    both = [c for c in (name, *ALIASES.get(name, ())) if c in df.columns]
    if name not in mapping and len(both) > 1:
        raise UserError(f"{where} has both {both[0]!r} and {both[1]!r} columns, either of which could be {name}; "
                        f"say which with --columns \"{name}={both[1]}\" (or \"{name}={both[0]}\")")


def find_columns(df: pl.DataFrame, mapping: dict[str, str], where: str) -> dict[str, str | None]:
    """Which column of df holds each fit quantity (recipe, run_id, N, D, C, loss): the one `mapping`
    names, else the canonical name, else the result record's (ALIASES); None where there is none.
    N, loss and one of D or C must be found; a quantity both of whose names are columns (loss and val_loss)
    must be mapped."""
    got = {k: pick_column(df, k, mapping) for k in ("recipe", "run_id", "N", "D", "C", "loss")}
    for name in ("N", "D", "loss") if got["D"] is not None else ("N", "C", "loss"):  # (C is read only without D)
        _refuse_two_candidates(df, name, mapping, where)
    missing = [k for k in ("N", "loss") if got[k] is None]
    if got["D"] is None and got["C"] is None:
        missing.append("D (or C)")
    if missing:
        raise UserError(f"{where} lacks column(s) {', '.join(missing)} (columns: {column_list(df)}); "
                        f"{_column_hint(df, got)}")
    for name in OPTIONAL_MEANING:
        if got.get(name, pick_column(df, name, mapping)) is None:
            _refuse_near_miss(df, name, where)
    if got["recipe"] is None:
        _refuse_unnamed_recipes(df, got, where)
    _refuse_loss_unit(got["loss"], where)
    for column in {c for c in got.values() if c is not None}:  # one column as two quantities (N=D): nonsense fitted
        both = [k for k, c in got.items() if c == column]
        if len(both) > 1:
            raise UserError(f"{where}: the column {column!r} would be read as both {' and '.join(both)}; map each "
                            f"with --columns to a column of its own")
    return got


# Other spellings of the quantities a fit needs, as `_spelling` writes a column's name: a table from elsewhere names
# them so (Chinchilla's `Model Size` and `Training FLOP`, a team's `params`, `Tokens`, `final_loss`).
SPELLINGS = {"N": ("n", "params", "parameters", "nparams", "numparams", "paramcount", "modelsize", "nonembeddingparams"),
             "D": ("d", "tokens", "ntokens", "numtokens", "trainingtokens", "tokensseen", "datasize"),
             "C": ("c", "flops", "flop", "compute", "trainingflop", "trainingflops", "trainingcompute"),
             "loss": ("loss", "finalloss", "valloss", "validationloss", "evalloss", "testloss")}


def _spelling(column: str) -> str:
    """'Model Size' -> 'modelsize', 'Params (M)' -> 'params': lower case, a bracket's note and every non-letter gone."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"\(.*?\)", "", column.lower()))


def _column_hint(df: pl.DataFrame, got: dict[str, str | None]) -> str:
    """How to read the required quantities `got` lacks from df's columns spelt as them (`SPELLINGS`): the --columns
    that maps them ("N=Model Size,C=Training FLOP"; '...' where no column is spelt so), and the names with spaces
    around them to rename (--columns strips the spaces)."""
    free = [c for c in df.columns if c not in got.values()]
    spelt = {name: next((c for c in free if _spelling(c) in SPELLINGS[name]), None) for name in SPELLINGS}
    needed = [k for k in ("N", "D", "loss") if got[k] is None]
    if "D" in needed and got["C"] is not None:  # (C is there: D is computed from it)
        needed.remove("D")
    elif "D" in needed and spelt["D"] is None and spelt["C"] is not None:  # D = C / 6N
        needed[needed.index("D")] = "C"
    padded = [k for k in needed if spelt[k] is not None and spelt[k] != spelt[k].strip()]
    entries = ",".join(f"{k}={spelt[k] or '...'}" for k in needed if k not in padded)
    hint = [f"map yours with --columns \"{entries}\""] if entries else []
    if padded:
        hint.append("rename " + ", ".join(f"{spelt[k]!r} to {k}" for k in padded) + " (--columns strips the spaces "
                    "around a name)")
    return "; ".join(hint)


def strip_number_cells(df: pl.DataFrame, got: dict[str, str | None]) -> pl.DataFrame:
    """df with the spaces around the cells of its text columns holding N, D, C or loss (`got`: `find_columns`)
    removed: ' 1e7 ' from a spreadsheet's export or a CSV typed with ', ' is the number 1e7, which polars does not
    cast (it was refused as "not a number", its fix "write plain numbers" what it was)."""
    text = {got[k] for k in ("N", "D", "C", "loss") if got[k] is not None and df[got[k]].dtype == pl.Utf8}
    return df.with_columns(pl.col(c).str.strip_chars() for c in text)


def with_compute(df: pl.DataFrame) -> pl.DataFrame:
    """Float columns N, D and C with C = 6·N·D (N non-embedding), the compute every law and figure is
    read against: D = C / 6N where the table gives only C; a given C is replaced."""
    if "D" not in df.columns:
        df = df.with_columns(D=pl.col("C") / (6 * pl.col("N")))
    return df.with_columns(C=6 * pl.col("N") * pl.col("D"))


def default_run_ids(height: int) -> pl.Series:
    """Run ids for a table without them: each row its own run."""
    return pl.Series("run_id", [f"row{i}" for i in range(height)], dtype=pl.Utf8)


def read_table(source: pl.DataFrame | str | Path, columns: dict[str, str] | str | None = None, drop_highest: int = 0,
               where: str | Path | None = None) -> pl.DataFrame:
    """A validated table with columns recipe, run_id, N, D, C, loss (C = 6·N·D), and forward_format,
    backward_format (`fits.shared.table_formats` reads them) and seed (`fits.analysis.pairing`) as given where the
    table has them.

    source: a path (CSV or parquet) or a polars DataFrame. columns maps canonical names to the
    table's own (dict, or the CLI's "N=Model Size,C=Training FLOP"). drop_highest drops the K
    highest-loss points of each group (Epoch drops 5 from the Chinchilla data). where: the file a
    DataFrame was read from as it is, for messages naming its lines.
    """
    mapping = parse_columns(columns)
    df = source if isinstance(source, pl.DataFrame) else read_file(Path(source))
    file = where or (None if isinstance(source, pl.DataFrame) else source)
    where = str(file or "the table")
    # a CSV's rows are lines of text, named by their line (the header is line 1)
    unit = "line" if file is not None and table_format(file) == "csv" else "row"
    got = find_columns(df, mapping, where)
    df = strip_number_cells(df, got)
    _refuse_non_numbers(df, got, where)
    df = df.with_row_index("_row")  # the input's own row, for messages, before any row is dropped
    status = pick_column(df, "status", mapping)
    if status is not None:  # a sweep's table: diverged and failed runs (and completed ones without a finite
        # loss) are results, not fit points
        df = _completed(df, status, got["loss"], where)
    df = _lr_mult(df, where, unit)
    df = best_learning_rate(df, got)
    try:
        out = pl.DataFrame({
            "recipe": df[got["recipe"]].cast(pl.Utf8) if got["recipe"] else pl.Series(["all"] * df.height),
            "run_id": df[got["run_id"]].cast(pl.Utf8) if got["run_id"] else default_run_ids(df.height),
            "N": df[got["N"]].cast(pl.Float64, strict=False),
            "loss": df[got["loss"]].cast(pl.Float64, strict=False),
            **{k: df[got[k]].cast(pl.Float64, strict=False) for k in ("D", "C") if got[k]},
            "_row": df["_row"],
            **{c: df[c] for c in FORMAT_COLUMNS if c in df.columns},  # (`fits.shared` shares efficiencies by them)
            **{c: df[c] for c in PAIR_COLUMNS if c in df.columns},  # (the bootstrap pairs twin runs by it)
        })
    except pl.exceptions.PolarsError as e:
        raise UserError(f"{where}: cannot read N/D/C/loss as numbers ({str(e).splitlines()[0][:200]})") from None
    _refuse_text(df, out, got, where, unit)
    out = with_compute(out)
    _validate(out, where, unit, got["run_id"] is not None, None if got["D"] else got["C"])
    out = out.select("recipe", "run_id", "N", "D", "C", "loss",
                     *(c for c in (*FORMAT_COLUMNS, *PAIR_COLUMNS) if c in out.columns))
    if drop_highest:
        if drop_highest < 0:
            raise UserError(f"--drop-highest must be >= 0, got {drop_highest}")
        smallest = out.group_by("recipe").len().sort("len").row(0, named=True)
        if drop_highest >= smallest["len"]:
            raise UserError(f"--drop-highest {drop_highest} would drop every point of group {smallest['recipe']!r} "
                            f"({count(smallest['len'], 'point')}); drop fewer")
        out = (out.with_columns(_rank=pl.col("loss").rank("ordinal", descending=True).over("recipe"))
               .filter(pl.col("_rank") > drop_highest).drop("_rank"))
    return out


def _refuse_non_numbers(df: pl.DataFrame, got: dict[str, str | None], where: str) -> None:
    """UserError for an N, D, C or loss column of true/false, dates or lists: cast to numbers they became
    1 and 0, days or microseconds, and were fitted (a parquet's all-true column mapped as loss: A = B = E = 1)."""
    for name in ("N", "D", "C", "loss"):
        column = got[name]
        if column is None or (name == "C" and got["D"]):  # (a C beside D is unused)
            continue
        dtype = df[column].dtype
        kind = ("true/false values" if dtype == pl.Boolean else "dates or times" if dtype.is_temporal()
                else "lists or records" if dtype.is_nested() else None)
        if kind:
            what = repr(column) + ("" if column == name else f" ({name})")
            raise UserError(f"{where}'s column {what} holds {kind} ({dtype}), not numbers; map {name} to the column "
                            f"of numbers with --columns \"{name}=COLUMN\", or fix the table, then run again")


def _where_first(rows: pl.DataFrame, unit: str) -> str:
    """Where the first of `rows` is, as a user finds it: "line 7" in a CSV file (its header is line 1),
    "row 6" in a table of rows (the first data row is row 1)."""
    return f"{unit} {rows['_row'][0] + (2 if unit == 'line' else 1)}"


MISSING = ("", "na", "n/a", "nan", "null", "none", "-")  # a cell of these is missing (refused as such), not a typo


def _refuse_text(df: pl.DataFrame, out: pl.DataFrame, got: dict[str, str | None], where: str, unit: str) -> None:
    """UserError naming a cell of N, D, C or loss that is text, not a number ('1.2B', '20M', '3.1 nats'): it was
    refused as "missing, NaN or non-numeric" by line alone, which did not say which column or what to write."""
    for name in ("N", "D", "C", "loss"):
        column = got[name]
        if column is None or df[column].dtype.is_numeric() or (name == "C" and got["D"]):  # (a C beside D is unused)
            continue
        cell = df[column].cast(pl.Utf8).str.strip_chars()
        text = df.filter(out[name].is_null() & cell.is_not_null() & ~cell.str.to_lowercase().is_in(MISSING))
        if text.height:
            what = repr(column) + ("" if column == name else f" ({name})")
            raise UserError(f"{where} has {text.height} row(s) whose {what} is not a number (first: "
                            f"{_where_first(text, unit)}, {text[column].cast(pl.Utf8)[0]!r}); write plain numbers "
                            "(2e7 or 20000000, not '20M', '1.2B' or '20,000,000'; '.' as the decimal point, not ','; "
                            "a loss without units), then run again")


def fit_point(status: str = "status", loss: str = "loss") -> pl.Expr:
    """The rows of a table with statuses that are points of the laws: runs that completed with a finite loss.
    A completed run whose final loss is NaN, infinite or blank is a result like a diverged one (listed by the
    report, not fitted); refused as a bad cell, it made a report's own results.csv unreadable. A loss that is
    text ('3.1 nats') stays a point here, for `_refuse_text` to name."""
    value = pl.col(loss).cast(pl.Float64, strict=False)
    cell = pl.col(loss).cast(pl.Utf8).str.strip_chars().str.to_lowercase()
    no_loss = cell.is_null() | cell.is_in(list(MISSING)) | value.is_infinite().fill_null(False)
    return (pl.col(status).cast(pl.Utf8) == "completed").fill_null(False) & ~no_loss


def _completed(df: pl.DataFrame, status: str, loss: str, where: str) -> pl.DataFrame:
    """The rows that are fit points (`fit_point`); where there are rows but none is, a UserError naming the
    statuses there are ("Completed", "done" or "diverged" throughout: "no row completed" alone hid which)."""
    kept = df.filter(fit_point(status, loss))
    if kept.height or not df.height:
        return kept
    done = df.filter(pl.col(status).cast(pl.Utf8) == "completed").height
    if done:
        raise UserError(f"{where} has no rows to fit: its {count(done, 'completed run')} "
                        f"{'has' if done == 1 else 'have'} no finite loss (NaN, infinite or blank); only completed "
                        "runs with a loss are fitted")
    counts = df.group_by(pl.col(status).cast(pl.Utf8).fill_null("(blank)")).len().sort("len", descending=True)
    found = ", ".join(f"{n} {s!r}" for s, n in counts.head(5).iter_rows())
    raise UserError(f"{where} has no rows to fit: no row has status 'completed' (its {status!r} column holds {found}); "
                    "only completed runs are fitted")


def _lr_mult(df: pl.DataFrame, where: str | None = None, unit: str = "row") -> pl.DataFrame:
    """An `lr_mult` column as floats, a blank cell the default 1 (as the report reads a record written before
    result records kept it); with `where`, a UserError naming a cell that is text ('2x') or not > 0. Read as
    it was, a blank cell crashed the learning-rate note (None sorted beside floats), text its format."""
    if "lr_mult" not in df.columns:
        return df
    column = df["lr_mult"]
    value = column.cast(pl.Float64, strict=False)
    if where is not None:
        cell = column.cast(pl.Utf8).str.strip_chars()
        bad = df.filter((value.is_null() & cell.is_not_null() & ~cell.str.to_lowercase().is_in(MISSING))
                        | ~(value > 0).fill_null(True) | value.is_infinite().fill_null(False))
        if bad.height:
            raise UserError(f"{where} has {bad.height} row(s) whose lr_mult is not a positive number (first: "
                            f"{_where_first(bad, unit)}, {bad['lr_mult'].cast(pl.Utf8)[0]!r}); give each run's "
                            "learning-rate multiplier as a number (1, 0.5, 2; a blank cell is the default, 1)")
    return df.with_columns(lr_mult=value.fill_null(1.0))


def best_learning_rate(df: pl.DataFrame, got: dict[str, str | None]) -> pl.DataFrame:
    """A sweep over learning rates (an `lr_mult` column with several values) is fitted at each point's
    best learning rate: per recipe, N, D (and seed) the run with the lowest loss, as a tuned ladder is.
    `got`: the columns holding recipe, N, D or C, and loss (`find_columns`)."""
    if "lr_mult" not in df.columns or df["lr_mult"].n_unique() < 2:
        return df
    return (df.sort(pl.col(got["loss"]).cast(pl.Float64, strict=False), nulls_last=True)
            .unique(subset=_lr_point(df, got), keep="first", maintain_order=True))


def _lr_point(df: pl.DataFrame, got: dict[str, str | None]) -> list[str]:
    """The columns naming a point of an LR sweep: recipe, N, D (or C) and seed, where the table has them."""
    return [c for c in (got["recipe"], got["N"], got["D"] or got["C"], "seed" if "seed" in df.columns else None) if c]


def set_aside_note(source: pl.DataFrame, columns: dict[str, str] | str | None = None) -> str | None:
    """How many rows of a table with statuses `read_table` sets aside as no points (`fit_point`), and how they
    ended; None where it sets none aside. `scaling fit` prints it: its table counts the points it fitted only, so
    a sweep's diverged runs were otherwise left out without a word."""
    mapping = parse_columns(columns)
    status, loss = pick_column(source, "status", mapping), pick_column(source, "loss", mapping)
    if status is None or loss is None:
        return None
    aside = source.filter(~fit_point(status, loss)).select(ended=_ended(status))
    if not aside.height:
        return None
    return f"{aside.height} of {count(source.height, 'row')} set aside, not fitted: {_counts(aside['ended'])}."


def learning_rate_note(source: pl.DataFrame, columns: dict[str, str] | str | None = None) -> str | None:
    """What `best_learning_rate` chose for an LR sweep's completed runs: which lr_mult the points took,
    and how many took the lowest or highest they tried, where the sweep does not bracket the optimum
    (their losses may lie above a tuned run's). None without several lr_mult values. `scaling fit` prints
    it and the report's provenance says it."""
    mapping = parse_columns(columns)
    got = find_columns(source, mapping, "the table")
    source = strip_number_cells(source, got)
    status = pick_column(source, "status", mapping)
    done = _lr_mult(source if status is None else source.filter(fit_point(status, got["loss"])))
    if "lr_mult" not in done.columns or done["lr_mult"].n_unique() < 2:
        return None
    point = _lr_point(done, got)
    tried = done.group_by(point).agg(lo=pl.col("lr_mult").min(), hi=pl.col("lr_mult").max(),
                                     tried=pl.col("lr_mult").n_unique())
    best = best_learning_rate(done, got).select(*point, best=pl.col("lr_mult"))
    per = best.join(tried, on=point).filter(pl.col("tried") > 1)
    chosen = per.group_by("best").len().sort("best")
    text = (f"Learning rate: a sweep over lr_mult {', '.join(f'{v:g}' for v in sorted(done['lr_mult'].unique()))}; "
            f"each point ({', '.join(point)}) is fitted at its run of lowest loss, which took lr_mult "
            + ", ".join(f"{b:g} at {count(n, 'point')}" for b, n in chosen.iter_rows()) + ".")
    edge = per.filter((pl.col("best") == pl.col("lo")) | (pl.col("best") == pl.col("hi")))
    if edge.height:
        text += (f" {edge.height} of {count(per.height, 'point')} took the lowest or highest "
                 "lr_mult they tried: the sweep does not bracket their best learning rate, so their losses may lie "
                 "above a tuned run's.")
    return text


def _validate(df: pl.DataFrame, where: str, unit: str, run_ids: bool, c_column: str | None) -> None:
    """unit: "line" for a CSV file (the header is line 1), else "row" (the first data row is row 1).
    run_ids: the table names its runs; c_column: the column D was computed from (D = C / 6N), None
    where the table gives D."""
    if df.height == 0:
        # (a table whose rows are none of them completed is refused by `_completed`, naming their statuses)
        raise UserError(f"{where} has no rows to fit: the table is empty")
    bad = df.filter(
        pl.any_horizontal([pl.col(c).is_null() | pl.col(c).is_nan() for c in ("N", "D", "loss")])
        | pl.col("recipe").is_null())
    if bad.height:
        raise UserError(f"{where} has {bad.height} row(s) with a missing, NaN or non-numeric N, D, loss or recipe "
                        f"(first: {_where_first(bad, unit)}); remove or fix them before fitting")
    padded = df.filter(pl.col("recipe") != pl.col("recipe").str.strip_chars())
    if padded.height:  # 'bf16 ' beside 'bf16' split the baseline in two groups, each said to have too few runs
        raise UserError(f"{where} has {padded.height} row(s) whose recipe has spaces around it (first: "
                        f"{_where_first(padded, unit)}, {padded['recipe'][0]!r}); remove the spaces, so that each recipe "
                        "is one name")
    broken = df.filter(pl.col("recipe").str.contains(r"[\x00-\x1f\x7f]"))
    if broken.height:  # a spreadsheet cell's line break (Alt+Enter) split every Markdown table row of the report
        raise UserError(f"{where} has {broken.height} row(s) whose recipe holds a line break or other control character "
                        f"(first: {_where_first(broken, unit)}, {broken['recipe'][0]!r}); write each recipe's name on "
                        "one line")
    blank = df.filter(pl.col("recipe") == "")
    if blank.height:  # (a group '' was fitted, or left out, as if it were a recipe)
        raise UserError(f"{where} has {blank.height} row(s) with a blank recipe (first: {_where_first(blank, unit)}); "
                        "give each row its recipe's name")
    blank = df.filter(pl.col("run_id").is_null())
    if run_ids and blank.height:  # (numpy cannot sort None beside str ids: a traceback, later)
        raise UserError(f"{where} has {blank.height} row(s) with a blank run_id (first: {_where_first(blank, unit)}); "
                        "give each row its run's id, or drop the run_id column to make each row its own run")
    if run_ids:
        _refuse_run_of_two_sizes(df, where, unit)
    for c in ("N", "D", "loss"):
        nonpos = df.filter(~(pl.col(c) > 0) | pl.col(c).is_infinite())
        if nonpos.height:
            # A D computed from C would name a column the table does not have and a value it does not hold.
            value = (f"{c} = {nonpos[c][0]}" if c != "D" or c_column is None
                     else f"{c_column!r} = {nonpos['C'][0]:g}, so D = C / 6N = {nonpos[c][0]:g}")
            raise UserError(f"{where} has {nonpos.height} row(s) with non-positive or infinite {c} "
                            f"(first: {_where_first(nonpos, unit)}, {value}); every N, D (or C) and loss must be > 0")
    # A repeated row would count as one more run (or a run's checkpoint twice): evidence that is not there.
    # With run ids a run's point is its (run_id, D); without, a row repeating another's values is a copy
    # (two runs' losses are never equal, unless rounded, and then the runs are named).
    cols = ("recipe", "run_id", "D") if run_ids else ("recipe", "N", "D", "loss")
    dup = df.filter(pl.struct(*cols).is_duplicated())
    if dup.height:
        pair = dup.filter(pl.struct(*cols) == dup.select(pl.struct(*cols)).row(0)[0]).head(2)
        repeats = dup.height - dup.select(pl.struct(*cols)).n_unique()
        raise UserError(f"{where} has {repeats} row(s) that repeat another row's {', '.join(cols)} (first: "
                        f"{_where_first(pair, unit)} and {_where_first(pair[1:], unit)}); remove the repeats: each would "
                        "count as more evidence than there is")


def _refuse_run_of_two_sizes(df: pl.DataFrame, where: str, unit: str) -> None:
    """UserError where rows of one run (recipe, run_id) have different N: a run trains one model, so its rows are
    checkpoints. A run_id pasted onto another size's row was fitted as a checkpoint of that run (resampled with it),
    and the report kept only its row with the most tokens, dropping a point without a word."""
    mixed = df.filter(pl.col("N").n_unique().over("recipe", "run_id") > 1)
    if not mixed.height:
        return
    run = mixed.filter(pl.struct("recipe", "run_id") == mixed.select(pl.struct("recipe", "run_id")).row(0)[0])
    pair = pl.concat([run.head(1), run.filter(pl.col("N") != run["N"][0]).head(1)])
    runs = mixed.select("recipe", "run_id").n_unique()
    raise UserError(f"{where} has {count(runs, 'run')} whose rows have different N (first: run_id {run['run_id'][0]!r}, "
                    f"N = {pair['N'][0]:g} at {_where_first(pair, unit)} and {pair['N'][1]:g} at {_where_first(pair[1:], unit)}); "
                    "a run trains one model size: give each run its own run_id")
