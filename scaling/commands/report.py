"""`scaling report SOURCE --out DIR`: build the HTML/Markdown report of a sweep or a results table."""

from __future__ import annotations

import argparse
from pathlib import Path

from scaling.errors import UserError
from scaling.options import integer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a sweep directory (runs/<sweep>/) or a results .csv/.parquet "
                                       "(columns recipe, N, D or C, loss)")
    parser.add_argument("--out", required=True, help="output directory, e.g. reports/<name>/")
    parser.add_argument("--baseline", default="bf16", help="the recipe every other one is compared with (default bf16)")
    parser.add_argument("--law", choices=("chinchilla", "quartet"), default="chinchilla",
                        help="the scaling law behind the verdict (default chinchilla); effN/effD are fitted in "
                             "Quartet's form on the baseline's law (under chinchilla: gamma = 1)")
    parser.add_argument("--bootstrap", type=integer(0), default=200, metavar="R",
                        help="bootstrap replicates for the intervals (default 200)")
    parser.add_argument("--diagnostics", metavar="JSON",
                        help="output of `scaling diagnose --json` (default: diagnostics.json in the sweep directory)")
    parser.add_argument("--columns", metavar="MAP", help='map fit names to the table\'s columns, as `scaling fit`: '
                                                         '"N=Model Size,C=Training FLOP"')
    parser.add_argument("--seed", type=integer(0), default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--title", help="the report's title")
    parser.add_argument("--shared-efficiencies", action="store_true",
                        help="also fit effN per forward format and effD per backward format, shared by the recipes, "
                             "as `scaling fit --shared-efficiencies` (docs/fits.md)")
    parser.add_argument("--json", action="store_true", help="print the summary (paths, verdicts) as JSON")


def print_summary(summary: dict) -> None:
    """`build`'s summary for a terminal (`scaling report`, `scaling demo`): the fit warnings, and why a penalty is not
    identified, in a short line each; the report holds them in full."""
    from reports.build import p_value_cells  # ("not identified" where the runs do not identify the penalty: no p-value)
    from scaling.console import count, print_table

    rows = [{"recipe": r, "verdict": v["verdict"], **dict(zip(("p (kappa=0)", "p Holm-adjusted"), p_value_cells(v)))}
            for r, v in summary["verdicts"].items()]
    if rows:
        print_table(rows, title=f"Does the penalty against {summary['baseline']} grow with compute? ({summary['law']} law)")
        for v in summary["verdicts"].values():  # a penalty not identified: why in a line (the report says it in full)
            print(f"  {v['brief']}; why, in full: the report's Verdict" if v["brief"] else "  " + v["sentence"])
        for reason in summary.get("skipped", {}).values():
            print(f"  not judged: {reason}")
    for line in summary.get("brief_warnings", []):
        print(f"  warning: {line}")
    for title, why in summary["omitted"].items():
        print(f"  [{title}] {why}")
    unfinished = summary.get("unfinished", {})
    if unfinished:  # the report reads as a whole sweep otherwise
        n = len(unfinished)
        shown = ", ".join(f"{r}: {s}" for r, s in list(unfinished.items())[:5]) + (", …" if n > 5 else "")
        has, is_, them = ("has", "is", "it") if n == 1 else ("have", "are", "them")
        print(f"  {count(n, 'run')} of the sweep {has} no result ({shown}) and {is_} in no fit (the report lists {them} "
              f"under Diverged and failed runs; `scaling sweep status --runs` shows {them})")
    print(f"report: {summary['index_html']}")


def _check_diagnostics(path: str) -> None:
    """Refuse a --diagnostics file with no table the report could show: another command's JSON (a
    fits.json), where the report's section would say only that the file holds no table."""
    from reports.build import diagnostic_tables
    from reports.load import read_diagnostics

    diag = read_diagnostics(Path(path))  # (refuses a missing file, not JSON)
    fix = "pass the output of `scaling diagnose --json` (scaling diagnose --json > diagnostics.json), or leave --diagnostics out"
    if isinstance(diag, dict) and {"run_id", "status", "recipe"} <= diag.keys():  # (its `processes` list reads as a table)
        raise UserError(f"--diagnostics {path} is a run's result record (result.json), not diagnostics; {fix}")
    if not diagnostic_tables(diag):
        raise UserError(f"--diagnostics {path} holds no table of diagnostics (the `gemm` and `quant` lists of "
                        f"records); {fix}")


def run(args: argparse.Namespace) -> int:
    from reports import build
    from scaling.console import print_json
    from scaling.files import check_output

    if args.diagnostics:  # before the fits, not as a paragraph of the report they made
        _check_diagnostics(args.diagnostics)
    out = check_output(args.out, folder=True)  # (expanded: `--out=~/report`, which no shell expands)
    summary = build(args.source, out, baseline=args.baseline, law=args.law, bootstrap=args.bootstrap,
                    diagnostics=args.diagnostics, columns=args.columns, seed=args.seed, title=args.title,
                    shared_efficiencies=args.shared_efficiencies)
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
    return 0
