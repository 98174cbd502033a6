"""`scaling fit RESULTS`: Chinchilla-style laws per recipe, bootstrap intervals, penalty verdicts.

Torch-free: imports fits (numpy, scipy, polars) inside run().
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from scaling.errors import UserError
from scaling.files import check_output
from scaling.options import integer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, help="results.parquet of a sweep, or a CSV/parquet with "
                        "columns recipe, N, D (or C = 6ND), loss [, run_id]")
    parser.add_argument("--columns", help='map column names, e.g. "N=Model Size,C=Training FLOP"')
    parser.add_argument("--drop-highest", type=integer(0), default=0, metavar="K",
                        help="drop the K highest-loss points of each group (Epoch drops 5 of Chinchilla's)")
    parser.add_argument("--law", choices=("chinchilla", "quartet"), default="chinchilla",
                        help="E + A/N^alpha + B/D^beta, or Quartet's form with gamma and effN, effD (docs/fits.md)")
    parser.add_argument("--baseline", default="bf16", help="the recipe every other is compared with")
    parser.add_argument("--bootstrap", type=integer(0), default=1000, metavar="R",
                        help="bootstrap replicates (whole runs resampled); 0 for point estimates only")
    parser.add_argument("--margin", type=float, default=0.1,
                        help="'does not grow' if the multiplier falls by at most this fraction per decade")
    parser.add_argument("--starts", default="50", metavar="K|all",
                        help="L-BFGS-B runs from the K best points of Epoch's grid of starts (ranked by objective), "
                             "or from all 4,500 of them (slow: ~25 s of CPU for Chinchilla's law)")
    parser.add_argument("--seed", type=integer(0), default=0, help="seed of the bootstrap's resampling")
    parser.add_argument("--workers", type=integer(1), default=2,
                        help="processes for the full fit's grid starts and for the bootstrap")
    parser.add_argument("--shared-efficiencies", action="store_true",
                        help="also fit one effN per forward format and one effD per backward format, shared by the "
                             "recipes, and check each recipe's own against them (the Quartet paper's v1 law with "
                             "--law quartet; formats from the table's forward_format, backward_format columns, else "
                             "the presets'; docs/fits.md)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON on stdout (notices and the bootstrap's progress stay on stderr)")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file, named *.json (e.g. fits.json)")


def _write_json(path: Path, obj: dict) -> None:
    from scaling.files import write_json_atomic

    write_json_atomic(path, obj)


def _refuse_other_json(path: Path) -> None:
    """UserError where --out is a JSON file that no fit wrote (a sweep's sweep.json or diagnostics.json, a
    run's result.json): check_output lets any JSON be replaced, and the fit's object took its place."""
    import json

    if not path.is_file() or not path.stat().st_size:
        return
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # (check_output has refused what is not JSON)
    if not (isinstance(held, dict) and {"law", "groups"} <= set(held)):
        raise UserError(f"--out {path} exists and holds another JSON than a fit's (an earlier `scaling fit --out`); it "
                        "is not overwritten: choose another name (or remove that file first)")


def _fmt(x: float | None) -> str:
    from scaling.console import number

    return "nan" if x is None else number(x)  # (inf, -inf as such: an interval open at that end)


def _with_ci(value: float, ci) -> str:
    if not ci or any(c is None or math.isnan(c) for c in ci):
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _penalty_cell(pen: dict, value: float, ci) -> str:
    """A penalty number with its interval; "not identified" where the runs do not identify the penalty (the number is
    where the fit stopped on a flat valley: the JSON keeps it, `identified` false)."""
    from reports.build import identified  # (the report's reading of the flag: one rule for both)

    return _with_ci(value, ci) if identified(pen) else "not identified"


def print_human(out: dict, baseline: str = "bf16") -> None:
    """baseline: the one asked for (out["baseline"] is None where no penalty was computed). Warnings and the reasons
    a penalty is not identified get a short line each; their sentences are the JSON's (`warnings`, `unidentified`)."""
    from fits.analysis import warning_lines
    from reports.build import p_value_cells  # (the report's cells: "not identified" where the runs do not identify it)
    from scaling.console import print_table

    names = ["A", "B", "E", "alpha", "beta", "gamma", "effN_const", "effD_const", "effN", "effD", "kappaN", "kappaD"]
    used = [n for n in names if any(n in g["params"] for g in out["groups"].values())]
    rows = []
    for name, g in out["groups"].items():
        row = {"group": name, "points": g["n_points"], "runs": g["n_runs"], "objective": g["objective"]}
        shared = out["law"] == "quartet" and name in out["penalty"]  # the baseline's law, shown once
        for n in used:
            if shared and n in ("A", "B", "E", "alpha", "beta", "gamma"):
                row[n] = f"= {out['baseline']}"
            elif n in g.get("not_identified", ()):  # (its value and interval: where the fit stopped on a flat valley)
                row[n] = "not identified"
            else:
                row[n] = _with_ci(g["params"][n], g["ci95"].get(n)) if n in g["params"] else ""
        if g.get("isoflop"):
            row["isoFLOP a"] = g["isoflop"]["a"]
        rows.append(row)
    cols = ["group", "points", "runs", *used, "objective"]
    if any("isoFLOP a" in r for r in rows):
        cols.append("isoFLOP a")
    intervals = (f"95% bootstrap intervals ({out['bootstrap']} replicates)" if out["bootstrap"]
                 else "point estimates (no bootstrap: --bootstrap 0)")
    if any(g.get("not_identified") for g in out["groups"].values()):
        intervals += "; not identified: a parameter these runs do not pin (see the warnings; --json keeps its value)"
    print_table(rows, cols, title=f"{out['law']} law, {intervals}")
    for note in ("set_aside_note", "learning_rate_note"):
        if out.get(note):
            print(out[note])
    for reason in out.get("skipped", {}).values():
        print(f"left out: {reason}")
    for line in warning_lines(out):
        print(f"warning: {line}")
    if not out["penalty"]:
        from fits.penalty import no_penalty_reason

        print(f"no penalty: {no_penalty_reason(out, baseline)}")
        return
    rows = []
    for recipe, p in out["penalty"].items():
        m, gap = p["multiplier"], p["gap"]
        p_raw, p_holm = p_value_cells(p)
        rows.append({"recipe": recipe, "verdict": p["verdict"],
                     "multiplier @data max": _penalty_cell(p, m["value"][1], m["ci95"][1]),
                     f"multiplier @{m['where'][2]}": _penalty_cell(p, m["value"][2], m["ci95"][2]),
                     "ratio per decade": _penalty_cell(p, p["ratio_per_decade"]["value"], p["ratio_per_decade"]["ci95"]),
                     "gap @data max (nats)": _penalty_cell(p, gap["value"][1], gap["ci95"][1]),
                     "p (kappa=0)": p_raw, "p Holm-adjusted": p_holm})  # the latter: what the verdict reads
    print_table(rows, title=f"penalty against {out['baseline']} (multiplier: baseline compute for the same loss / C)")
    print(f"rule: {next(iter(out['penalty'].values()))['rule']}")
    for recipe, p in out["penalty"].items():
        if p.get("unidentified"):
            print(f"{recipe}: {p['unidentified_brief']}; why, in full: --json")
        elif p.get("undecidable"):
            print(f"{recipe}: inconclusive whatever the interval: {p['undecidable']}")


def print_shared(entry: dict, law: str, baseline: str, bootstrap: int) -> None:
    """The shared efficiencies (`fits.shared`): a row per format, a row per recipe with its own constant efficiencies
    beside its formats' shared ones, and the objectives; "not identified" where the runs do not identify a number."""
    from reports.build import NOT_IDENTIFIED, p_words  # (every p in words, as the report writes it: never "p = 0")
    from scaling.console import print_table

    rows = []
    for kind, eff in (("forward", "effN"), ("backward", "effD")):
        for fmt, e in entry[kind].items():
            value = (NOT_IDENTIFIED if not e["pinned"] else _with_ci(e[eff], e["ci95"]) if e["fitted"]
                     else f"1 ({baseline}'s format, not fitted)")
            rows.append({"efficiency": eff, "format": fmt, "value": value,
                         "recipes": ", ".join(e["recipes"])})
    intervals = f"95% bootstrap intervals ({bootstrap} replicates)" if bootstrap else "no bootstrap: no intervals"
    print_table(rows, ["efficiency", "format", "value", "recipes"],
                title=f"shared efficiencies against {baseline}'s {law} law: effN per forward format, effD per backward "
                      f"format, {intervals}")
    rows = []
    for recipe, r in entry["recipes"].items():
        row = {"recipe": recipe}
        for eff in ("effN", "effD"):
            c = r[eff]
            row[f"{eff} own"] = _with_ci(c["own"], c["own_ci95"]) if c.get("own_identified", True) else NOT_IDENTIFIED
            pinned = entry["forward" if eff == "effN" else "backward"][r["forward_format" if eff == "effN"
                                                                          else "backward_format"]]["pinned"]
            row[f"{eff} shared"] = _fmt(c["shared"]) if pinned else NOT_IDENTIFIED
            row[f"{eff} own/shared"] = _with_ci(c["own"] / c["shared"], c["ratio_ci95"]) if c["check"] else ""
            row[f"{eff} check"] = (f"{c['check']} (p {p_words(c['p_adjusted'])})" if c["check"]
                                   else f"unchecked: {c['unchecked']}")
        rows.append(row)
    print_table(rows, title="each recipe's own constant efficiencies (95% interval) against its formats' shared ones: "
                            "not consistent where the test of its own against the shared one rejects at 5% (p "
                            "Holm-adjusted over the checks)")
    print(f"objective: {entry['objective']:.6g} shared ({entry['n_params']} parameters) against "
          f"{entry['objective_separate']:.6g} summed over the recipes' own constant fits ({entry['n_params_separate']})")
    if entry["sharing_test"]:
        t = entry["sharing_test"]
        print(f"sharing as a whole (one effN per forward format, one effD per backward format) against the recipes' "
              f"own: statistic {_fmt(t['statistic'])} on {t['df']} degrees of freedom, p {p_words(t['p_value'])}")
    from fits.shared import unpinned_reasons

    for why in unpinned_reasons(entry):
        print(f"{NOT_IDENTIFIED}: {why}")


def run(args: argparse.Namespace) -> int:
    import fits
    from scaling.console import print_json

    if not 0 < args.margin < 1:
        raise UserError(f"--margin must be between 0 and 1, got {args.margin}")
    if args.starts != "all" and not (args.starts.isdigit() and int(args.starts) > 0):
        raise UserError(f"--starts must be a positive integer or 'all', got {args.starts!r}")
    top = None if args.starts == "all" else int(args.starts)
    grid = len(fits.fit.epoch_grid(args.law))
    if top is not None and top > grid:  # (more would not fit more: the grid has no more starts)
        raise UserError(f"--starts {top} is more than the {grid:,} starts of the {args.law} grid; pass at most "
                        f"{grid}, or all")
    if args.results.is_dir():  # (fits.table reads files; a folder is most often a sweep's)
        raise UserError(f"{args.results} is a folder; pass a results table, e.g. {args.results / 'results.parquet'} "
                        f"from `scaling sweep collect {args.results}`, or run `scaling report {args.results} --out DIR` "
                        "on a sweep folder")
    if args.results.is_file():  # a sweep spec given for its sweep: the folder its runs are in, and how to fit them
        from sweeps.store import refuse_spec_file

        refuse_spec_file(args.results, "scaling sweep collect {folder}, then scaling fit {folder}/results.parquet")
    if args.out:  # before the fit, so a fit is never lost to an unwritable --out
        args.out = check_output(args.out, folder=False, suffix=".json")  # (expanded: `--out=~/f.json`)
        _refuse_other_json(args.out)
    from fits.table import read_file

    raw = read_file(args.results)
    table = fits.read_table(raw, columns=args.columns, drop_highest=args.drop_highest, where=args.results)
    # (a --baseline no run has, a group that cannot be fitted: refused before the notices of a fit to come)
    fits.analysis.check_source(raw, table, args.columns, law=args.law, baseline=args.baseline,
                               shared_efficiencies=args.shared_efficiencies)
    notices = [fits.analysis.size_notice(table.height)]
    if top is None:  # L-BFGS-B from every start, before any progress line
        notices.append(f"fitting from all {grid:,} starts of the {args.law} grid: tens of seconds a group (more "
                       "with more points), without progress")
    for notice in filter(None, notices):  # (stderr, --json too: its stdout is the JSON alone)
        print(notice, file=sys.stderr, flush=True)
    out = fits.analysis.analyse_source(raw, table, args.columns, law=args.law, baseline=args.baseline,
                                       bootstrap=args.bootstrap, seed=args.seed, workers=args.workers,
                                       margin=args.margin, top=top, progress=fits.analysis.BootstrapProgress(),
                                       shared_efficiencies=args.shared_efficiencies)
    if args.out:
        _write_json(args.out, out)
    if args.json:
        print_json(out)
    else:
        print_human(out, args.baseline)
        if "shared_efficiencies" in out:
            print_shared(out["shared_efficiencies"], out["law"], out["baseline"], out["bootstrap"])
        if args.out:
            print(f"wrote {args.out}")
    return 0
