"""`reports.build`: results -> fits -> figures and tables -> index.html, report.md.

Every number in the report is computed here from the data (run records, validation curves, the fits);
nothing is typed in. Sections the data cannot support are kept, with one line saying why they are empty.

The report's text is Markdown: a recipe's name, and every message from fits (reasons, warnings, notes:
plain text that the console prints as is, and that names recipes), enter it through `render.literal`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import polars as pl

from reports import compare, figures
from reports.document import Bullets, Document, Figure, Paragraph, Section, SortedText, Table
from reports.load import Study, load
from reports.render import code, fmt, literal, plain, to_html, to_markdown
from scaling import __version__, git_commit, usable_cpus
from scaling.console import NOT_MEASURED, WITHIN_NOISE, count, yes_no
from scaling.errors import UserError
from scaling.files import json_ready, take_exclusive, write_atomic, write_json_atomic

if TYPE_CHECKING:
    from sweeps.store import RunStatus

LAW_PARAMS = ("A", "B", "E", "alpha", "beta", "gamma")




def _flat_table(runs: pl.DataFrame) -> pl.DataFrame:
    """results.csv: nested record fields (versions) become JSON strings so CSV can hold them."""
    cols = []
    for name, dtype in runs.schema.items():
        if isinstance(dtype, (pl.Struct, pl.List, pl.Array, pl.Object)):
            cols.append(pl.col(name).map_elements(lambda v: json.dumps(json_ready(v.to_list() if hasattr(v, "to_list") else v)),
                                                  return_dtype=pl.Utf8))
        else:
            cols.append(pl.col(name))
    return runs.select(cols)


# --- fitting ------------------------------------------------------------------------------------


def _stage(what: str) -> None:
    print(f"  {what}", file=sys.stderr, flush=True)


def fit_table(runs: pl.DataFrame) -> pl.DataFrame:
    """The points the laws are fitted to: completed runs, final loss (one point per run)."""
    from fits import read_table

    extra = [c for c in ("seed", "lr_mult") if c in runs.columns]  # an LR sweep: each point at its best LR
    # read_table keeps the completed runs itself (`fits.table.fit_point`, as compare.completed): where none
    # completed it names their statuses, where the runs filtered here read as "the table is empty"
    return read_table(runs.select("recipe", "run_id", "N", "D", "C", "loss", "status", *extra))


def run_fits(runs: pl.DataFrame, law: str, baseline: str, bootstrap: int, seed: int, workers: int,
             shared_efficiencies: bool = False, table: pl.DataFrame | None = None) -> dict:
    """The `scaling fit --json` object of the runs (`fits.analysis.analyse_source`: `fits.analyse` on the completed
    runs, with its notes): laws per recipe, effN/effD, penalty bands and verdicts; with `shared_efficiencies`, the
    efficiencies shared by format too (the runs' forward_format, backward_format columns, else the presets').
    `table`: `fit_table(runs)` where the caller has it."""
    import fits

    table = fit_table(runs) if table is None else table
    notice = fits.analysis.size_notice(table.height)
    if notice:
        _stage(notice)
    import warnings

    with warnings.catch_warnings():
        # Degenerate bootstrap replicates (few runs) overflow in numpy; fits drops their non-finite
        # results from the intervals.
        warnings.simplefilter("ignore", RuntimeWarning)
        # (a recipe none of whose runs completed is skipped by name; a baseline among them is named as such)
        fitted = fits.analysis.analyse_source(runs, table, law=law, baseline=baseline, bootstrap=bootstrap, seed=seed,
                                              workers=workers, shared_efficiencies=shared_efficiencies,
                                              progress=fits.analysis.BootstrapProgress(indent="  ") if bootstrap else None)
    return fitted


def law_params(group: dict, law: str) -> dict:
    """The parameters of a group's own law curve.

    Under the Chinchilla law each recipe has its own A, B, E, α, β, and its effN/effD/κ entries are
    relative to the baseline's law, so they must not be applied on top of its own law.
    """
    p = dict(group["params"])
    if law == "chinchilla":
        for k in ("effN", "effD", "kappaN", "kappaD", "N0", "D0", "effN_const", "effD_const"):
            p.pop(k, None)
    return p


# --- sections -----------------------------------------------------------------------------------


def _ci(ci95: dict, key: str) -> str:
    lo, hi = ci95.get(key, (None, None)) if ci95 else (None, None)
    return f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None and hi is not None else ""


def _interval(pair, digits: int = 4) -> str:
    lo, hi = pair if pair else (None, None)
    if digits == 4:
        return f"[{fmt(lo)}, {fmt(hi)}]"
    return f"[{_short(lo)}, {_short(hi)}]"


CI = "95% CI"  # a table's column of intervals


def _intervals_table(columns: tuple[str, ...], rows: list, caption: str, bootstrap: int) -> Table:
    """A table with interval columns (CI, or named ending in it: "own/shared 95% CI"); with no bootstrap there are
    none, and its CI columns are left out (they read '[—, —]' in one table and blank in another; the verdict's
    opening says no bootstrap ran)."""
    keep = [i for i, c in enumerate(columns) if bootstrap or not c.endswith(CI)]
    return Table(tuple(columns[i] for i in keep), tuple(tuple(r[i] for i in keep) for r in rows), caption)


def _short(x) -> str:
    """Three significant digits, for numbers inside sentences: 0.500, 1.00, 784 (not '784.'), 0 (not '0.00':
    an interval's end that underflowed is none of 3 digits' precision; the tables say 0 too)."""
    if x == 0:
        return "0"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:#.3g}".removesuffix(".")


VERDICT_WORDS = {
    "grows": "**grows** with compute",
    "does not grow": "**does not grow** with compute",
    "shrinks": "**shrinks** with compute (the recipe gains ground on the baseline as compute grows)",
    "inconclusive": "is **inconclusive** (the data cannot tell whether it grows)",
}


NOT_IDENTIFIED = "not identified"  # a table's cell where the runs do not pin the number (its value would be float noise)


def identified(pen: dict) -> bool:
    """Whether the runs identify a recipe's penalty (fits' `identified`; a fits.json from before it has none: read as
    identified, as it was then)."""
    return pen.get("identified", True) is not False


# Why a penalty the runs do not identify gets no number: its multiplier, ratio per decade and their intervals are where
# the optimiser stopped on a flat valley. (The verdict's sentence for such a recipe, and its opening where it is every one.)
NO_NUMBERS = "no multiplier, ratio per decade or interval is given"
FLOAT_NOISE = "they would be float noise, not estimates"


def none_identified(baseline: str) -> str:
    """The words for a study whose runs identify no recipe's penalty: the Verdict's opening and Penalty vs compute's
    line without a figure say it alike."""
    return f"these runs identify no recipe's penalty against {literal(baseline)}"


def _not_identified_sentence(recipe: str, pen: dict, baseline: str) -> str:
    """The verdict of a penalty the runs do not identify: why, in fits' words, and no number: its multiplier, ratio
    per decade and their intervals are where the optimiser stopped on a flat valley, so no claim is read off them."""
    reasons = [literal(r) for r in pen.get("unidentified", [])]
    why = reasons[0] if len(reasons) == 1 else "; ".join(f"({i}) {r}" for i, r in enumerate(reasons, 1))
    return (f"**{literal(recipe)}**: the penalty against {literal(baseline)} is **not identified by these runs**: {why}. "
            f"So {NO_NUMBERS} for it ({FLOAT_NOISE}), "
            "and whether the penalty grows with compute is not claimed either way (verdict: inconclusive)")


def brief_verdict(recipe: str, pen: dict, runs: pl.DataFrame) -> str | None:
    """A terminal's line (`scaling report`, `scaling demo`) for a penalty the runs do not identify: why, in fits' few
    words (`unidentified_brief`), and the recipe's runs that are in no fit; None where the runs identify it (its
    verdict sentence is the line). The report's verdict sentence says the why in full."""
    if identified(pen):
        return None
    aside = not_fitted(runs, recipe)
    return plain(f"{literal(recipe)}: {literal(pen['unidentified_brief'])}" + (f"; not in its fit: {aside}" if aside else ""))


def verdict_sentence(recipe: str, pen: dict, baseline: str, bootstrap: int, runs: pl.DataFrame | None = None) -> str:
    """One sentence with the numbers that decide the verdict (fits.penalty's rule) and the penalty's size, or, where
    the runs do not identify the penalty, why; with the study's `runs`, followed by the recipe's runs that are in no
    fit (`not_fitted`), where it has any."""
    aside = not_fitted(runs, recipe) if runs is not None else None
    if not identified(pen):
        return _not_identified_sentence(recipe, pen, baseline) + "." + (f" Not in its fit: {aside}." if aside else "")
    words = ("is **inconclusive** (no bootstrap ran: `--bootstrap 0` judges no recipe)" if not bootstrap else
             f"is **inconclusive** ({literal(pen['undecidable'])})" if pen.get("undecidable") else
             VERDICT_WORDS.get(pen["verdict"], literal(pen["verdict"])))
    if pen["verdict"] == "does not grow" and bootstrap and "margin" in pen:  # an equivalence test: say its margin
        family = pen.get("family", 1)
        # the interval is this recipe's own (fits.penalty): unlike the test, not adjusted over the family
        alone = f" for this recipe alone, not adjusted over the {family} recipes" if family > 1 else ""
        words += f" (by more than {pen['margin']:.0%} per decade of compute, at 95%{alone})"
    text = f"**{literal(recipe)}**: the penalty against {literal(baseline)} {words}"
    rpd = pen.get("ratio_per_decade", {})

    def ci(pair) -> str:  # with no bootstrap, no interval: no '[—, —]' after every number (the verdict's opening says why)
        return f" {_interval(pair, 3)}" if bootstrap else ""

    text += (f": the compute multiplier changes by ×{_short(rpd.get('value'))}{ci(rpd.get('ci95'))} per "
             f"decade of compute ({LR_TEST}: {_test_words(pen)})")
    m, g = pen.get("multiplier"), pen.get("gap")
    if m and g:
        # m(C) = the baseline's compute for the recipe's loss at C, over C: below 1, the recipe's compute
        # is worth less than the baseline's.
        # ("it reaches the loss bf16 reaches with 0.59× of that compute" read as well as the recipe needing less)
        text += (f". At C = {m['C'][0]:.2g} FLOP, {literal(baseline)} reaches this recipe's loss with {_short(m['value'][0])}×"
                 f"{ci(m['ci95'][0])} of that compute, at {m['C'][1]:.2g} FLOP with "
                 f"{_short(m['value'][1])}×{ci(m['ci95'][1])}; its loss gap at equal compute is "
                 f"{g['value'][0]:+.3g}{ci(g['ci95'][0])} and {g['value'][1]:+.3g}"
                 f"{ci(g['ci95'][1])} nats/token there")
    return text + "." + (f" Not in its fit: {aside}." if aside else "")


def not_fitted(runs: pl.DataFrame, recipe: str) -> str | None:
    """A recipe's runs that are no points of its law (diverged, failed, or completed without a finite loss), in
    words: '2 of its 20 runs (2 diverged), at C = 1.2e+16 to 9.6e+20 FLOP'; None where every run is a point.
    The verdict says them beside the penalty: a recipe whose largest runs diverged read "does not grow" there,
    its divergences said only in the failures section."""
    from fits.table import NO_LOSS, fit_point

    mine = runs.filter(pl.col("recipe") == recipe)
    aside = mine.filter(~fit_point())
    if not aside.height:
        return None
    ended = aside.select(pl.when(pl.col("status") == "completed").then(pl.lit(NO_LOSS))
                         .otherwise(pl.col("status")).alias("ended"))["ended"]
    how = ", ".join(f"{n} {s}" for s, n in sorted(ended.value_counts().iter_rows()))
    c = aside["C"].drop_nulls()
    where = ("" if not c.len() else f", at C = {c.min():.2g} FLOP" if c.min() == c.max()
             else f", at C = {c.min():.2g} to {c.max():.2g} FLOP")
    return f"{aside.height} of its {count(mine.height, 'run')} ({literal(how)}{where}; listed under Diverged and failed runs)"


# What the verdict's p tests: κN = κD = 0 on 2 degrees of freedom, rejected as readily for a shrinking penalty as for a
# growing one (the bootstrap interval gives the direction). "test of no growth" read, beside a small p, as evidence of growth.
LR_TEST = "two-sided likelihood-ratio test of a constant multiplier, κN = κD = 0, against growth or shrinkage"


def _test_words(pen: dict) -> str:
    """The LR test's p, with the Holm-adjusted p the verdict reads where several recipes were judged
    together (a fits.json from before the adjustment has neither key: its p is the one it was judged by)."""
    p, family = pen["p_value"], pen.get("family", 1)
    if p is None or not math.isfinite(p):
        return "not computable: the fit left no noise to test against"
    adjusted = pen.get("p_adjusted")
    if family > 1 and adjusted is not None:
        return f"p {p_words(p)}, or {p_words(adjusted).removeprefix('= ')} after Holm's adjustment over {family} recipes"
    return f"p {p_words(p)}"


def p_words(p: float | None) -> str:
    """A p in a sentence, after "p ": '= 0.012', or '< 0.0001' below the test's resolution (`_p_cell`), never 'p = 0';
    'not computable' where there is none (NaN). The one way every p is written in words: the verdict's, the
    shared-efficiency check's (here and in `scaling fit`)."""
    if p is None or math.isnan(p):
        return "not computable"
    cell = _p_cell(p)
    return cell if isinstance(cell, str) else f"= {p:.2g}"


def _p_cell(p: float | None) -> float | str | None:
    """A p as a table shows it: the number, or '< 0.0001' below the test's resolution (`fits.penalty.P_FLOOR`: the
    chi-square tail there is the formula's, not the data's, and underflows to 0 further out), which the HTML's
    sortable tables sort by the p it stands for (`SortedText`), below every p shown as a number."""
    from fits.penalty import P_FLOOR  # (fits imported where used: `import reports` stays light)

    return SortedText(f"< {P_FLOOR:g}", p) if p is not None and p < P_FLOOR else p


def unfinished_note(unfinished: list[RunStatus]) -> str | None:
    """A sweep's runs with no result (still running or queued, killed), by state and recipe, for the verdict: it is
    on the runs that have one, and read alone it looked final (the runs were named only under the failures)."""
    if not unfinished:
        return None

    def tally(values: list[str]) -> str:
        return ", ".join(f"{n} {literal(v)}" for v, n in sorted(pl.Series(values).value_counts().iter_rows()))

    n = len(unfinished)
    return (f"{count(n, 'run')} of the sweep {'has' if n == 1 else 'have'} no result yet ({tally([r.state for r in unfinished])}; "
            f"by recipe: {tally([r.recipe for r in unfinished])}) and {'is' if n == 1 else 'are'} in no fit: what follows is "
            "on the runs that have one, and may change once these do (they are listed under Diverged and failed runs).")


def coverage_note(runs: pl.DataFrame, recipes: list[str]) -> str | None:
    """Which of `recipes` have completed runs at fewer of the study's model sizes than it has, in words; None where
    each has them all. A recipe run at the small sizes only is judged over its own, smaller, compute range: its verdict
    sentence gave that range's end and no word that the study's larger models are missing from it."""
    done = compare.completed(runs).drop_nulls("N")
    every = sorted(set(done["N"].to_list()))
    short = []
    for recipe in recipes:
        mine = sorted(set(done.filter(pl.col("recipe") == recipe)["N"].to_list()))
        if mine and len(mine) < len(every):
            short.append(f"{literal(recipe)} at {len(mine)} (N = {mine[0]:.3g}" + (f" to {mine[-1]:.3g})" if len(mine) > 1 else ")"))
    if not short:
        return None
    return (f"Not every recipe has completed runs at every model size of the study ({len(every)} sizes, N = "
            f"{every[0]:.3g} to {every[-1]:.3g}): {'; '.join(short)}. Such a recipe's penalty is measured over its own "
            "runs' compute range, and beyond it is an extrapolation (Penalty vs compute).")


def section_verdict(fitted: dict, baseline: str, study: Study) -> Section:
    from fits.penalty import MIN_REPLICATES, left_out, no_penalty_reason  # (fits imported where used: `import reports` stays light)

    s = Section("Verdict")
    penalty, skipped = fitted.get("penalty", {}), fitted.get("skipped", {})
    unfinished = unfinished_note(study.unfinished)
    if not penalty:
        s.omit(literal(no_penalty_reason(fitted, baseline)) + " The fitted laws are below.")
        return s.add(Paragraph(unfinished)) if unfinished else s
    n_runs = sum(g["n_runs"] for g in fitted["groups"].values())
    aside = not_fitted(study.runs, baseline)
    short = [f"{literal(r)}'s {p['n_replicates']}" for r, p in sorted(penalty.items())
             if p.get("n_replicates", fitted["bootstrap"]) < fitted["bootstrap"]]  # replicates whose fits failed
    # The seed reproduces the intervals (fits.json has it too). Their 95% is nominal for these runs: `scaling bench
    # calibration` measures how often such intervals of the ratio per decade hold the truth on synthetic sweeps of a
    # known law (docs/fits.md, Bootstrap, has the numbers). The report does not read them: the bench file need not be
    # where the report is built, and a synthetic case's rate is not this study's.
    seed = f", `--seed {fitted['seed']}`" if "seed" in fitted else ""
    # how a replicate drew the recipes' runs (fits' `twins`; a hand-made fitted dict without it: not said)
    twins = fitted.get("twins")
    drawn = [] if twins is None else ["each recipe's apart" if not twins else
                                      f"twin runs, one N, D and seed in each recipe, drawn together: {count(twins, 'configuration')}"]
    how = ", ".join(drawn + ([seed.removeprefix(", ")] if seed else []))
    intervals = (f"intervals are 95% percentile bootstrap intervals over {fitted['bootstrap']} replicates that resample "
                 f"whole runs" + (f" ({how})" if how else "")
                 + (f" (of which fitted: {', '.join(short)})" if short else "")
                 + (f", too few for their 2.5% ends to be more than the extreme replicates (a 95% interval needs at "
                    f"least {MIN_REPLICATES}: `--bootstrap`), so they are rough and no recipe is judged"
                    if fitted["bootstrap"] < MIN_REPLICATES else "")
                 + "; their 95% is nominal: how often such intervals hold the true ratio per decade is measured on "
                 "synthetic sweeps of a known law (`scaling bench calibration`, docs/fits.md), not on runs like these"
                 if fitted["bootstrap"] else "no bootstrap ran (`--bootstrap 0`), so there are no intervals and no "
                 "recipe is judged")
    # where the runs identify no penalty, no sentence below has an interval or a multiplier to read: what would pin one
    reading = (f"{intervals}; numbers are along each law's compute-optimal allocation. A multiplier below 1 means the "
               "recipe needs more compute than the baseline for the same loss." if any(map(identified, penalty.values()))
               else _none_identified_opening(fitted, baseline, seed))
    s.add(Paragraph(
        f"Does each recipe's loss penalty against **{literal(baseline)}** grow with compute? {fitted['law'].capitalize()} "
        f"laws fitted to {count(n_runs, 'completed run')}; {reading}"
        + (f" Not in {literal(baseline)}'s fit, against which every penalty is measured: {aside}." if aside else "")
    ))
    if unfinished:
        s.add(Paragraph(unfinished))
    coverage = coverage_note(study.runs, [baseline, *sorted(penalty)])
    if coverage:
        s.add(Paragraph(coverage))
    s.add(Bullets(tuple(verdict_sentence(r, penalty[r], baseline, fitted["bootstrap"], study.runs) for r in sorted(penalty))))
    if skipped:
        s.add(Paragraph(f"Not judged: {literal(left_out(fitted))} (their runs are still in the tables below)."))
    rule = next(iter(penalty.values())).get("rule")
    if rule:
        s.add(Paragraph(f"The rule (docs/fits.md): {literal(rule)}."))
    return s


def _none_identified_opening(fitted: dict, baseline: str, seed: str) -> str:
    """The Verdict's opening, after the laws fitted, where the runs identify no recipe's penalty: there is no interval
    to read (its paragraph about intervals described none shown), so it says so and what to do: run what the
    sentences below name."""
    replicates = (f" (the reasons read a bootstrap of {count(fitted['bootstrap'], 'replicate')}{seed})"
                  if fitted["bootstrap"] else "")
    return (f"{none_identified(baseline)}, so {NO_NUMBERS} for any ({FLOAT_NOISE}) and no recipe is judged. Each "
            f"sentence below says why, each reason naming the runs that would pin it{replicates}: add such runs and "
            "build the report again.")


def _params_table(fitted: dict, baseline: str) -> Table:
    """The fitted laws' parameters, a row per group. Under the Quartet law with a baseline, the other recipes have no
    law of their own: they share the baseline's A, B, E, α, β, γ (cells '= bf16', as `scaling fit` prints them) and
    differ by their constant effN, effD only, shown beside it (every row repeated the baseline's law, which read as
    a bug)."""
    groups, law = fitted["groups"], fitted["law"]
    shared = {name for name, g in groups.items() if law == "quartet" and "effN_const" in g["params"]}
    present = [k for k in LAW_PARAMS if any(k in g["params"] for g in groups.values())]
    efficiency = ("effN_const", "effD_const") if shared else ()

    def cell(g: dict, k: str) -> str:  # with no bootstrap, no brackets
        if k in g.get("not_identified", ()):  # its value and interval are where the optimiser stopped on a flat valley
            return "not identified"
        return f"{fmt(g['params'][k])} {_ci(g.get('ci95', {}), k) if fitted['bootstrap'] else ''}".strip()

    rows = []  # (the baseline's row first where the others share its law)
    for name, g in sorted(groups.items(), key=lambda item: (item[0] in shared, item[0])):
        row: list[Any] = [name]
        for k in present:
            row.append(f"= {baseline}" if name in shared else cell(g, k) if g["params"].get(k) is not None else None)
        for k in efficiency:
            row.append(cell(g, k) if g["params"].get(k) is not None else 1.0)
        row += [g.get("n_points"), g.get("n_runs"), g.get("objective")]
        rows.append(tuple(row))
    intervals = "95% bootstrap intervals in brackets" if fitted["bootstrap"] else "no intervals (no bootstrap ran)"
    if any(g.get("not_identified") for g in groups.values()):
        intervals += ("; not identified: a parameter these runs do not pin (the fit warnings say why), whose value and "
                      "interval would be float noise")
    caption = (f"Fitted law parameters, {intervals}; objective: the Huber loss at the optimum." if not shared else
               f"Fitted law parameters, {intervals}. Under the Quartet law the recipes share the "
               f"law fitted on {literal(baseline)} (its row) and differ only by their efficiencies: a recipe's law is that "
               f"one at N·effN and D·effD, with effN and effD fitted while the law is held fixed ({literal(baseline)}'s are "
               "1). Here effN and effD are constant (the Quartet paper's quantities); the curves drawn are the growth "
               "model's, whose efficiencies vary as N^κN and D^κD (Parameter and data efficiency). Objective: the Huber "
               f"loss at the optimum of the row's fit ({literal(baseline)}'s law; another recipe's effN and effD).")
    return Table(("recipe", *present, *("effN", "effD")[:len(efficiency)], "points", "runs", "objective"),
                 tuple(rows), caption)


def section_loss_vs_compute(study: Study, fitted: dict, baseline: str, styles: dict, fig_dir: Path) -> Section:
    from fits.analysis import law_not_identified
    from fits.penalty import left_out

    s = Section("Loss vs compute")
    laws = {g: law_params(entry, fitted["law"]) for g, entry in fitted["groups"].items()}
    done = compare.completed(study.runs)
    flat = frozenset(g for g, entry in fitted["groups"].items() if law_not_identified(entry))
    path = figures.loss_vs_compute(done, laws, baseline, styles, fig_dir / "loss_vs_compute.png",
                                   loss_column=None if study.validation_loss else study.loss_column, no_frontier=flat)
    n_sizes = done["N"].n_unique()
    along = ("each model size" if n_sizes <= figures.LAW_LINES else
             f"{figures.LAW_LINES} of the {n_sizes} model sizes, spread over their range")
    off = figures.frontiers_off_axes(done, laws, flat)
    off_note = "".join(f" {literal(r)}'s frontier lies outside the axes: its law's compute-optimal model at the runs' middle "
                       f"compute has N ≈ {n:.3g} (the runs' sizes: {done['N'].min():.3g} to {done['N'].max():.3g}) and "
                       f"loss {loss:.3g}." for r, (n, loss) in off.items()) + _no_frontier_note(fitted, flat)
    skipped = fitted.get("skipped", {})
    # a recipe left out of the fits has a panel of points and no law (none, with no completed run): say why here too
    unfitted = (f" No law for {', '.join(map(literal, sorted(skipped)))} (not fitted: {literal(left_out(fitted))})."
                if skipped else "")
    what = ("Final validation loss" if study.validation_loss else
            f"Loss (the table's {code(study.loss_column)} column)")  # (a table's could be any loss)
    s.add(Figure(path, f"{what} of every completed run against its training compute, one panel per recipe; "
                       f"thin lines: the fitted {fitted['law']} law along {along}"
                 + ("; thick line: its compute-optimal frontier" if set(laws) - flat else "")
                 + (f"; dashed: {literal(baseline)}'s frontier." if baseline in laws and len(laws) > 1
                    and baseline not in flat else ".")
                 + off_note + unfitted))
    s.add(_params_table(fitted, baseline))
    warnings = fit_warnings(fitted)
    if warnings:  # one an item: joined in a paragraph, the demo's nine ran ~20 lines on a desktop, hard to tell apart
        s.add(Paragraph("**Fit warnings** (read the laws and the verdicts with care):"))
        s.add(Bullets(tuple(map(literal, warnings))))
    return s


def _no_frontier_note(fitted: dict, flat: frozenset) -> str:
    """Why the recipes in `flat` have no frontier drawn: their runs do not identify the law away from their own
    sizes (fits' `not_identified`), so its optimum, the N a point estimate would print, is float noise (mxfp4's in the
    demo: N ≈ 114 from the sweep's table, 2.8e4 from the same runs in the report's results.csv)."""
    from fits.analysis import law_not_identified

    if not flat:
        return ""
    groups = fitted["groups"]
    which = "; ".join(f"{literal(g)}: {', '.join(law_not_identified(groups[g]))}" for g in sorted(flat))
    return (f" No compute-optimal frontier is drawn for {', '.join(map(literal, sorted(flat)))}: these runs do not identify "
            f"their laws ({which}; see the fit warnings), which other values fit as well, so where the optimum lies, and "
            "the model size it would name, is float noise, not data.")


def fit_warnings(fitted: dict) -> list[str]:
    return [w for _, g in sorted(fitted["groups"].items()) for w in g.get("warnings", [])]


def section_penalty(fitted: dict, baseline: str, styles: dict, fig_dir: Path) -> Section:
    s = Section("Penalty vs compute")
    bands = fitted.get("bands", {})
    if not bands:
        from fits.penalty import no_penalty_reason

        return s.omit("Not computed. " + literal(no_penalty_reason(fitted, baseline)))
    pinned = {r: b for r, b in bands.items() if identified(fitted["penalty"][r])}
    unpinned = sorted(set(bands) - set(pinned))
    not_drawn = (f" Not drawn: {', '.join(map(literal, unpinned))}, whose penalty these runs do not identify (the Verdict "
                 "says why): its curves and band would be float noise." if unpinned else "")
    if not pinned:
        s.add(Paragraph(f"No figure: {none_identified(baseline)} (the Verdict says why), so its multiplier and loss gap "
                        "along compute, and their bands, would be float noise."))
    else:
        s.add(_penalty_figure(fitted, pinned, baseline, styles, fig_dir, not_drawn))
    rows = []
    for recipe, pen in sorted(fitted["penalty"].items()):
        m, g = pen["multiplier"], pen["gap"]
        for j, where in enumerate(m["where"]):
            rows.append((recipe, where, m["C"][j], *_estimate(pen, m["value"][j], m["ci95"][j]),
                         *_estimate(pen, g["value"][j], g["ci95"][j])))
    unidentified_note = (f" A cell reading {NOT_IDENTIFIED}: a penalty these runs do not pin (the Verdict says why), whose "
                         "values and intervals would be float noise." if unpinned else "")
    s.add(_intervals_table(("recipe", "where", "C (FLOP)", "multiplier", CI, "loss gap (nats)", CI), rows,
                           "The multiplier and the loss gap at the ends of the data's compute range and of the "
                           "extrapolation." + unidentified_note, fitted["bootstrap"]))
    rows = [(r, p["verdict"], *_estimate(p, p["ratio_per_decade"]["value"], p["ratio_per_decade"]["ci95"]),
             *_estimate(p, p["kappaN"]["value"], p["kappaN"]["ci95"]), *_estimate(p, p["kappaD"]["value"], p["kappaD"]["ci95"]),
             *p_value_cells(p)) for r, p in sorted(fitted["penalty"].items())]
    s.add(_intervals_table(("recipe", "verdict", "multiplier ratio per decade", CI, "κN", CI, "κD", CI, "p (κ = 0)",
                            "p, Holm-adjusted"),
                           rows, "What decides the verdict: how the multiplier changes per decade of compute, the growth "
                                 "exponents of effN and effD, and the likelihood-ratio test of κN = κD = 0 (the verdict "
                                 "reads its p Holm-adjusted over the recipes judged together)." + unidentified_note
                                 + (" Its p is not given either: at a parameter's bound or along a flat direction the "
                                    "test's chi-square reference does not hold." if unpinned else ""),
                           fitted["bootstrap"]))
    return s


def p_value_cells(pen: dict) -> tuple:
    """The likelihood-ratio test's p and its Holm-adjusted p as a table shows them (the report's, `scaling fit`'s,
    `scaling report`'s): NOT_IDENTIFIED in both where the runs do not identify the penalty. With a parameter at its
    optimiser bound or along a flat direction the test's chi-square reference does not hold, so the number is no
    p-value: the demo's mxfp4 showed p = 0.96 beside a verdict that gives no number for it (fits.json keeps it)."""
    if not identified(pen):
        return NOT_IDENTIFIED, NOT_IDENTIFIED
    return _p_cell(pen["p_value"]), _p_cell(pen["p_adjusted"])


def _estimate(pen: dict, value, ci95) -> tuple:
    """A penalty number's (value, interval) cells: NOT_IDENTIFIED in both where the runs do not identify the penalty."""
    return (value, _interval(ci95)) if identified(pen) else (NOT_IDENTIFIED, NOT_IDENTIFIED)


def _penalty_figure(fitted: dict, bands: dict, baseline: str, styles: dict, fig_dir: Path, not_drawn: str) -> Figure:
    """The multiplier and gap along compute of the recipes in `bands` (those whose penalty the runs identify)."""
    path = figures.penalty_vs_compute(bands, fitted["penalty"], styles, baseline, fig_dir / "penalty_vs_compute.png")
    return Figure(path, f"Left: the compute multiplier, {literal(baseline)}'s compute that reaches the recipe's loss divided by the "
                       f"recipe's compute. Right: the loss gap to {literal(baseline)} at equal compute. Line: the fit; "
                       + ("shaded: the 95% bootstrap band (cut at the axes when it is very wide: the tables give its ends)"
                          if fitted["bootstrap"] else "no band (no bootstrap ran)")
                       + "; solid over the recipe's compute range in the data, dotted beyond. The curves are the growth model's, "
                       f"which gives each recipe {literal(baseline)}'s loss floor E: a recipe whose penalty is a higher floor "
                       "shows as growth, and its dotted extrapolation carries that model's assumption." + not_drawn)


def section_gaps(study: Study, baseline: str, styles: dict, fig_dir: Path) -> Section:
    s = Section("Relative loss gap per model size")
    gaps = compare.relative_gaps(study.runs, baseline)
    keys = compare.match_keys(study.runs)
    if gaps.height == 0:
        return s.omit(f"Not computed: no matched pairs (no completed run of another recipe has a completed {literal(baseline)} "
                      f"run with the same {', '.join(keys)}).")
    s.add(Paragraph(f"(L_recipe − L_{literal(baseline)}) / L_{literal(baseline)} in %, for runs that differ only in the recipe "
                    f"({compare.pairing(keys)}); the UFP4 paper's metric."))
    by_size = compare.gaps_by_size(gaps)
    label = [k for k in ("family", "size") if k in by_size.columns]
    cols = ("recipe", *label, "N", "mean gap (%)", "min (%)", "max (%)", "pairs")
    s.add(Table(cols, tuple(by_size.select("recipe", *label, "N", "mean_gap_pct", "min_gap_pct", "max_gap_pct", "pairs").iter_rows()),
                f"Per recipe and model size: mean over {compare.averaged_over(gaps)}."))
    missing = compare.unpaired(study.runs, baseline)
    if missing.height:  # (a recipe whose largest runs all diverged had no row there, and no word why)
        s.add(Paragraph(f"No gap for {count(missing.height, 'run')} of the other recipes: "
                        f"{literal(compare.unpaired_words(missing))}. Runs without a finite loss are listed under "
                        "Diverged and failed runs."))
    s.add(Figure(figures.gap_vs_size(gaps, by_size, styles, baseline, fig_dir / "gap_vs_size.png"),
                 "Relative loss gap of each matched pair (pale marks) and the per-size mean (line), each recipe in its colour, marker (filled or hollow) and line style."))
    s.add(Table(("recipe", *keys, "loss", f"{baseline} loss", f"{baseline} runs", "gap (%)"),
                tuple(gaps.select("recipe", *keys, "loss", "baseline_loss", "baseline_runs", "gap_pct").iter_rows()),
                f"Every matched pair ({literal(baseline)} loss: the mean of its runs counted beside it)."))
    return s


def section_overhead(study: Study, baseline: str, styles: dict, fig_dir: Path) -> Section:
    s = Section("Token overhead to reach the baseline's loss")
    if not study.curves:
        return s.omit("Not computed: the input has no validation curves (no `<run_id>/metrics.csv` beside the "
                      "results), and the token overhead is read off the curves. Pass a sweep directory to get it.")
    table = compare.token_overhead(study.runs, study.curves, baseline)
    if table.height == 0:
        return s.omit(f"Not computed: no matched pair has validation curves for both {literal(baseline)} and another recipe.")
    s.add(Paragraph(
        f"Tokens a recipe needs to reach {literal(baseline)}'s final validation loss, relative to the tokens {literal(baseline)} needed, "
        "read off the validation curves (linear between evaluations); the AMD paper's metric. Where the paired run "
        "never gets there, the same model's longer completed runs are searched (marked: their losses are read mid-run, under "
        "another schedule than a run of that length, so such a value is no bound on what one would need, and can fall "
        "below the baseline's tokens); no value means it was never reached (the note names a longer run of that model "
        "that diverged or failed, which was not searched)."
    ))
    summary = compare.overhead_summary(table)
    s.add(Table(("recipe", "pairs", "reached", "of which in a longer run", "median overhead (%)", "min (%)", "max (%)",
                 "diverged", "failed", "not reached"),
                tuple((r["recipe"], r["pairs"], r["reached"], r["in_longer_run"],
                       *(_range_cell(r[f"{k}_lo"], r[f"{k}_hi"]) for k in ("median", "min", "max")),
                       r["diverged"], r["failed"], r["not_reached"]) for r in summary.iter_rows(named=True)),
                "Per recipe, over its matched pairs; the median, min and max are over the pairs that reached the target, "
                "those reached in a longer run included (read mid-run: such a value bounds nothing), and those not "
                "reached, each of which needs more than its longest searched run's tokens (an overhead above that run's): "
                "where those could move a value, it reads as the range it lies in, \"≥ x\" with no upper end."))
    keys = compare.match_keys(table)
    s.add(Table(("recipe", *keys, "target loss", f"{baseline} tokens", "recipe tokens", "overhead (%)", "reached in run of D", "note"),
                tuple(table.select("recipe", *keys, "target_loss", "baseline_tokens", "recipe_tokens", "overhead_pct",
                                   "reached_in", "note").iter_rows())))
    s.add(Figure(figures.validation_curves(study.runs, study.curves, styles, baseline, fig_dir / "validation_curves.png"),
                 "Validation curves at each model size's largest token budget (its lowest seed); dashed: "
                 f"{literal(baseline)}'s final loss, the overhead's target; ×, where there is one: the last evaluation of "
                 "a run that diverged or failed."))
    return s


def _range_cell(lo: float, hi: float) -> float | str | None:
    """A statistic known to lie in [lo, hi] as a table cell: the number where lo = hi, else the range ('≥ lo' with no
    upper end), sorted by lo; None where there is none (NaN)."""
    if math.isnan(lo):
        return None
    if lo == hi:
        return lo
    return SortedText(f"≥ {fmt(lo)}" if math.isinf(hi) else f"{fmt(lo)} to {fmt(hi)}", lo)


def section_efficiency(fitted: dict, baseline: str) -> Section:
    s = Section("Parameter and data efficiency (effN, effD)")
    rows = []
    for name, g in sorted(fitted["groups"].items()):
        p, ci = g["params"], g.get("ci95", {})
        if name == baseline or "effN_const" not in p:
            continue
        pen = fitted.get("penalty", {}).get(name, {})  # κN, κD are its penalty's growth exponents (that section's)
        flat = set(g.get("not_identified", ()))  # (fits' rule for every efficiency: `fit.efficiency_identified`)
        const = [cell for k in ("effN_const", "effD_const")
                 for cell in ((NOT_IDENTIFIED, NOT_IDENTIFIED) if k in flat else (p[k], _ci(ci, k)))]
        product = NOT_IDENTIFIED if flat & {"effN_const", "effD_const"} else p["effN_const"] * p["effD_const"]
        growth = [cell for k in ("kappaN", "kappaD")
                  for cell in ((NOT_IDENTIFIED, NOT_IDENTIFIED) if k in flat else _estimate(pen, p[k], ci.get(k)))]
        rows.append((name, *const, product, *growth))
    if not rows:
        from fits.penalty import no_penalty_reason

        return s.omit("Not computed. " + literal(no_penalty_reason(fitted, baseline)))
    base = ("the Chinchilla law fitted on {b} (Quartet's form with γ = 1; `--law quartet` fits γ too)"
            if fitted["law"] == "chinchilla" else "the Quartet law fitted on {b}")
    s.add(Paragraph(
        "Quartet's parametrisation L = (A/(N·effN)^α + B/(D·effD)^β)^γ + E: a recipe trains like "
        f"{literal(baseline)} with effN× the parameters and effD× the tokens. Base law: {base.format(b=literal(baseline))}, held "
        "fixed while effN and effD are fitted per recipe (constant efficiencies, as in the Quartet paper). "
        "κN and κD are the growth model's exponents, effN(N) ∝ N^κN and effD(D) ∝ D^κD: 0 means constant."
    ))
    unpinned = any(NOT_IDENTIFIED in row for row in rows)
    s.add(_intervals_table(("recipe", "effN", CI, "effD", CI, "effN·effD", "κN", CI, "κD", CI), rows,
                           "effN·effD is the constant model's compute multiplier."
                           + (f" A cell reading {NOT_IDENTIFIED}: a number these runs do not pin (the fit warnings "
                              "say why; for κN and κD of a penalty not identified, the Verdict), whose value and "
                              "interval would be float noise." if unpinned else ""),
                           fitted["bootstrap"]))
    return s


def section_shared_efficiencies(fitted: dict, baseline: str) -> Section:
    """The efficiencies shared by format (`fits.shared`, `--shared-efficiencies`): a row per format, a row per recipe
    with its own constant efficiencies beside its formats' shared ones, and the objectives."""
    entry = fitted["shared_efficiencies"]
    s = Section("Shared efficiencies (Quartet v1)")
    s.add(Paragraph(
        f"One parameter efficiency effN per forward format (what a recipe's fprop GEMM's operands are) and one data "
        f"efficiency effD per backward format (its dgrad and wgrad operands), shared by the recipes of that format and "
        f"fitted jointly on all their runs with {literal(baseline)}'s {fitted['law']} law held fixed (κ = 0): the Quartet "
        f"paper's form L = (A/(N·effN)^α + B/(D·effD)^β)^γ + E. {literal(baseline)}'s formats have efficiency 1. A "
        "recipe's efficiency is not consistent with its format's where the test of the fit that gives the recipe its "
        "own against the shared fit rejects at 5% (p Holm-adjusted over the checks made); own/shared is the ratio's "
        "95% interval over the bootstrap replicates."))
    rows = []
    for kind, eff in (("forward", "effN"), ("backward", "effD")):
        for fmt_, e in entry[kind].items():
            value = NOT_IDENTIFIED if not e["pinned"] else e[eff] if e["fitted"] else f"1 ({baseline}'s)"
            ci = _interval(e["ci95"]) if e["fitted"] and e["pinned"] else ""
            rows.append((eff, fmt_, value, ci, ", ".join(e["recipes"])))  # (cells are data: the renderers escape them)
    s.add(_intervals_table(("efficiency", "format", "value", CI, "recipes"), rows,
                           f"Efficiencies shared by format. {NOT_IDENTIFIED}: the runs do not pin it (below)." if any(
                               r[2] == NOT_IDENTIFIED for r in rows) else "Efficiencies shared by format.",
                           fitted["bootstrap"]))
    rows = []
    for recipe, r in entry["recipes"].items():
        row: list[Any] = [recipe]
        for eff, kind, key in (("effN", "forward", "forward_format"), ("effD", "backward", "backward_format")):
            c = r[eff]
            own = c.get("own_identified", True)  # (a fits.json from before it: as it was printed then)
            row += [c["own"] if own else NOT_IDENTIFIED, _interval(c["own_ci95"]) if own else NOT_IDENTIFIED,
                    c["shared"] if entry[kind][r[key]]["pinned"] else NOT_IDENTIFIED,
                    _interval(c["ratio_ci95"]) if c["check"] else "",
                    f"{c['check']} (p {p_words(c['p_adjusted'])})" if c["check"] else f"unchecked: {c['unchecked']}"]
        rows.append(tuple(row))
    s.add(_intervals_table(("recipe", "effN", CI, "shared effN", "own/shared " + CI, "check", "effD", CI,
                            "shared effD", "own/shared " + CI, "check"), rows,
                           "Each recipe's own constant efficiencies (Parameter and data efficiency) beside its formats' "
                           "shared ones." + (f" {NOT_IDENTIFIED}: a number the runs do not pin (an own one: the fit "
                                             "warnings say why; a shared one: below)." if any(
                               NOT_IDENTIFIED in row for row in rows) else ""), fitted["bootstrap"]))
    s.add(Paragraph(f"Objective (summed Huber loss): {fmt(entry['objective'])} for the shared fit "
                    f"({count(entry['n_params'], 'parameter')}), against {fmt(entry['objective_separate'])} summed over "
                    f"the recipes' own constant fits ({count(entry['n_params_separate'], 'parameter')})"
                    + (f"; against them, the test of the sharing as a whole gives p {p_words(t['p_value'])} "
                       f"(statistic {_short(t['statistic'])} on {t['df']} degrees of freedom)."
                       if (t := entry["sharing_test"]) else ".")))
    from fits.shared import unpinned_reasons

    if unpinned := unpinned_reasons(entry):
        s.add(Bullets(tuple(literal(w) for w in unpinned)))
    return s



def _records_table(rows: list, caption: str) -> Table:
    """A list of flat dicts as a table; list-valued fields (per-level histograms) are left out."""
    cols = list(dict.fromkeys(k for r in rows for k, v in r.items() if not isinstance(v, (dict, list))))
    return Table(tuple(cols), tuple(tuple(r.get(c) for c in cols) for r in rows), caption)


DIAGNOSTIC_TABLES = {  # `scaling diagnose --json` (docs/numerics.md): key -> caption
    "claims": f"The UFP4 paper's claims about the formats, checked on these measurements over several seeds (measured: "
              f"each number the claim reads, its mean and 95% interval over the seeds; holds: "
              f"yes or no where each measured number's 95% interval over the seeds is clear of the claim's bound, "
              f"{WITHIN_NOISE} where it straddles it, {NOT_MEASURED} where a measured number is not finite, so the "
              "claim could not be checked).",
    "gemm": "Single-GEMM output SQNR (dB) with both operands quantized along that GEMM's K, and its change "
            "under the transform (delta, dB).",
    "quant": "Per tensor, format and transform: SQNR (dB), its change under the transform, the mean (shrinkage) "
             "error in grid units, and how many grid levels carry ≥ 1% of the values.",
}


def diagnostic_tables(diag: Any) -> list[tuple[list, str]]:
    """The tables a diagnostics JSON holds, as (records, caption in the report's Markdown): `scaling diagnose
    --json`'s, else (another tool's JSON) any list of records in it, captioned by its key; [] where there is none."""
    if not isinstance(diag, dict):
        return []

    def records(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(r, dict) for r in v)

    tables = [([_claim_row(r) for r in diag[k]] if k == "claims" else diag[k], caption)
              for k, caption in DIAGNOSTIC_TABLES.items() if records(diag.get(k))]
    if not tables:
        return [(v, literal(k)) for k, v in diag.items() if records(v)]  # (a key is data, not markup)
    return _formats_table(diag.get("formats")) + tables


def _claim_row(claim: dict) -> dict:
    """A claim as the report's table gives it: `holds` in `scaling diagnose`'s words (its `verdict`: yes, no, within
    noise or not measured; from `holds` alone in a JSON written before diagnose measured over seeds), not a blank
    cell where holds is null."""
    row = {k: v for k, v in claim.items() if k not in ("verdict", "holds")}
    return {**row, "measured": _claim_numbers(claim),
            "holds": claim.get("verdict") or yes_no(claim.get("holds"))}


def _claim_numbers(claim: dict) -> str | None:
    """'2: -0.1133 [-0.1138, -0.1128]; 4: ...': each number a claim reads, as its mean and 95% interval over the seeds
    (the table left out its dict-valued fields, so a verdict showed without the numbers it was read from); the one
    seed's `measured` in a JSON written before diagnose measured over seeds; None where there is neither."""
    mean, ci = claim.get("mean"), claim.get("ci95")
    values = mean if isinstance(mean, dict) else claim.get("measured")
    if not isinstance(values, dict) or not values:
        return None
    ci = ci if isinstance(ci, dict) else {}

    def shown(key: str, value: Any) -> str:
        interval = ci.get(key)
        at = f" [{fmt(interval[0])}, {fmt(interval[1])}]" if isinstance(interval, list) and len(interval) == 2 else ""
        return f"{fmt(value)}{at}"

    return "; ".join(f"{key}: {shown(key, value)}" for key, value in values.items())


FORMATS_CAPTION = ("The formats measured: what each is (`scaling recipes`' words) and where it comes from (built-in, "
                   "a format file, or a recipe's operand as RECIPE:OPERAND; docs/numerics.md).")


def _formats_table(formats: Any) -> list[tuple[list, str]]:
    """`scaling diagnose --json`'s `formats` (name -> spec, describe, source) as one table: the tables below name a
    format only, and a user's own (a format file, RECIPE:OPERAND) is defined nowhere else in the report. [] where the
    JSON has none (`source` is absent from files written before diagnose took format files)."""
    if not isinstance(formats, dict) or not all(isinstance(f, dict) for f in formats.values()):
        return []
    rows = [{"format": name, **{k: f[k] for k in ("describe", "source") if k in f}} for name, f in formats.items()]
    return [(rows, FORMATS_CAPTION)] if rows else []


def section_diagnostics(study: Study) -> Section:
    s = Section("Quantization diagnostics")
    if study.diagnostics is None:
        return s.omit("Not provided: pass `--diagnostics diag.json` (from `scaling diagnose --json`) or put "
                      "`diagnostics.json` in the sweep directory.")
    diag = study.diagnostics
    s.add(Paragraph(f"From {code(study.diagnostics_path)} (`scaling diagnose`, the reference quantizer on the same "
                    "tensors for every format; higher SQNR is better, a negative mean error is shrinkage)."))
    tables = [_records_table(rows, caption) for rows, caption in diagnostic_tables(diag)]
    if not tables:
        s.add(Paragraph("The file holds no table of records (expected the `gemm` and `quant` lists of "
                        "`scaling diagnose --json`)."))
    for t in tables:
        s.add(t)
    return s


def section_failures(study: Study) -> Section:
    s = Section("Diverged and failed runs")
    if not study.has_status:
        s.add(Paragraph("The input has no run status column, so every row is taken as a completed run."))
        return s
    bad = study.runs.filter(pl.col("status") != "completed")
    # (a blank loss is no finite one: is_finite of null is null, and the filter dropped such a run from every table)
    nonfinite = study.runs.filter((pl.col("status") == "completed") & ~pl.col("loss").is_finite().fill_null(False))
    bad = pl.concat([bad, nonfinite], how="diagonal_relaxed")
    if bad.height == 0:
        s.add(Paragraph(f"None: all {count(study.runs.height, 'run')} completed." if not study.unfinished
                        else f"None of the {count(study.runs.height, 'run')} with a result diverged or failed."))
    else:
        cols = [c for c in ("run_id", "recipe", "family", "size", "N", "D", "seed", "status", "diverged_at_step", "steps",
                            "loss") if c in bad.columns]
        what = (f"{bad.height} of {count(study.runs.height, 'run')} did not complete" if not nonfinite.height else
                f"{bad.height} of {count(study.runs.height, 'run')} did not complete or have no finite loss ("
                f"{bad.height - nonfinite.height} did not complete, {nonfinite.height} completed without one)")
        s.add(Paragraph(f"{what}; they are data (a recipe that diverges has failed), and are left out of the fits."))
        s.add(Table(tuple(cols), tuple(bad.select(cols).iter_rows())))
    _add_unfinished(s, study.unfinished)
    return s


UNFINISHED_LISTED = 50  # a sweep in progress may have hundreds queued: the report lists these many, status all


UNFINISHED_COLUMNS = ("run_id", "recipe", "family", "size", "tokens", "seed", "state", "progress")


def _add_unfinished(s: Section, unfinished: list[RunStatus]) -> None:
    """A sweep's runs with no result at all: not in any table or fit of this report, so named here."""
    if not unfinished:
        return
    from sweeps.store import relaunch_advice  # (torch-free)

    n = len(unfinished)
    listed = f" (the first {UNFINISHED_LISTED} below)" if n > UNFINISHED_LISTED else ""
    s.add(Paragraph(f"{count(n, 'run')} of the sweep {'has' if n == 1 else 'have'} no result{listed} (the job was "
                    "killed, cancelled or crashed, or is still queued or running): not in this report's fits, tables or "
                    f"counts. `scaling sweep status --runs` shows {'it' if n == 1 else 'them all'}; "
                    f"{relaunch_advice(unfinished)}."))
    s.add(Table(UNFINISHED_COLUMNS, tuple((r.run_id, r.recipe, r.family, r.size, r.tokens, r.seed, r.state_label(),
                                           r.progress_label()) for r in unfinished[:UNFINISHED_LISTED])))


def _distinct(runs: pl.DataFrame, col: str) -> list:
    if col not in runs.columns:
        return []
    values = []
    for v in runs[col].to_list():
        v = v.to_list() if hasattr(v, "to_list") else v
        v = json.loads(v) if isinstance(v, str) and v.startswith("{") else v
        if v is not None and v not in values:
            values.append(v)
    return values


def _of_processes(runs: pl.DataFrame, key: str) -> list:
    """Each value of `key` the runs' processes recorded (a record's `processes`, JSON text in a collected table):
    a run resumed on another machine or under other versions names both."""
    values = []
    for many in (runs["processes"].to_list() if "processes" in runs.columns else []):
        many = json.loads(many) if isinstance(many, str) else many
        for p in many or []:
            v = p.get(key) if isinstance(p, dict) else None
            if v is not None and v not in values:
                values.append(v)
    return values


def _run_commits(runs: pl.DataFrame) -> tuple[list, int]:
    """The commits the runs trained under, and how many runs trained under several: each record's git_commits
    (its processes', JSON text in a collected table), else its git_commit (records from before git_commits)."""
    def column(name: str) -> list:
        return runs[name].to_list() if name in runs.columns else [None] * runs.height

    commits, resumed = [], 0
    for many, one in zip(column("git_commits"), column("git_commit")):
        many = json.loads(many) if isinstance(many, str) else many
        own = [c for c in dict.fromkeys(many or [one]) if c is not None]
        resumed += len(own) > 1
        commits += [c for c in own if c not in commits]
    return commits, resumed


def _run_configs(study: Study) -> list[dict]:
    if study.run_root is None:
        return []
    out = []
    for run_id in study.runs["run_id"].to_list():
        p = study.run_root / run_id / "config.json"
        if p.is_file():
            out.append(json.loads(p.read_text()))
    return out


def section_provenance(study: Study, checkout: str | None) -> Section:
    s = Section("Provenance")
    runs = study.runs
    items = [f"Source: {code(study.source)} ({count(runs.height, 'run')}, {count(len(set(runs['recipe'])), 'recipe')})."]
    if study.earlier_rows:
        are = "is" if study.earlier_rows == 1 else "are"
        items.append(f"The table holds several rows for some runs (checkpoints): each run's row with the most tokens is "
                     f"its point, and {count(study.earlier_rows, 'earlier row')} {are} set aside (`scaling fit` on the "
                     "table would fit every row).")
    from fits.table import learning_rate_note

    lr = learning_rate_note(compare.completed(runs))  # the fits' own choice, said in their words
    if lr:
        items.append(literal(lr))
    if not study.from_records:
        items.append("The source is a table of external results, not result records: versions, commits, hardware, "
                     "data and epochs are not known to this report.")
    else:
        versions = _distinct(runs, "versions")
        for v in versions + [v for v in _of_processes(runs, "versions") if v not in versions]:
            items.append("Versions: " + (", ".join(f"{literal(k)} {literal(val)}" for k, val in v.items())
                                         if isinstance(v, dict) else literal(v)))
        commits, resumed = _run_commits(runs)
        items.append("Git commit of the runs: " + (", ".join(map(code, commits)) if commits else "not recorded")
                     + (f" ({count(resumed, 'run')} trained under more than one)" if resumed else ""))
        hardware = [h for col in ("hardware", "device", "gpu") for h in _distinct(runs, col)] + _of_processes(runs, "device")
        configs = _run_configs(study)
        hardware += [c[k] for c in configs for k in ("device", "hardware", "accelerator") if c.get(k) and c[k] not in hardware]
        items.append("Hardware: " + (", ".join(map(literal, dict.fromkeys(map(str, hardware)))) if hardware
                                     else "not recorded in the result records"))
        data = list(dict.fromkeys(str(c["data"]) for c in configs if "data" in c))
        vocab = _distinct(runs, "vocab_size")
        items.append("Data: " + (", ".join(map(code, data)) if data else "not recorded")
                     + (f"; vocabulary {', '.join(map(str, vocab))} tokens" if vocab else ""))
        if "epochs" in runs.columns:
            ep = runs["epochs"].drop_nulls()
            if ep.len():
                items.append(f"Epochs over the training data per run: {fmt(float(ep.min()))} to {fmt(float(ep.max()))}"
                             + (" (some runs repeat data)" if ep.max() > 1 else " (no run repeats data)"))
        if "wall_s" in runs.columns and runs["wall_s"].drop_nulls().len():
            items.append(f"Training time, all runs: {float(runs['wall_s'].drop_nulls().sum()) / 60:.1f} min.")
    items += _tokens_per_run(runs)
    items.append(f"Report built {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by fp4-scaling {literal(__version__)} "
                 f"(checkout {code(checkout or 'unknown')}), Python {literal(platform.python_version())}, "
                 f"polars {literal(pl.__version__)}.")
    s.add(Bullets(tuple(items)))
    if study.from_records and (recipes := _recipes_table(runs)):
        s.add(recipes)
    return s


RECIPE_COLUMNS = ("recipe", "forward (fprop)", "backward (dgrad; wgrad)", "defined by")


def _recipes_table(runs: pl.DataFrame) -> Table | None:
    """What each recipe quantizes, as its runs recorded it (a sweep's or collected table's forward_format and
    backward_format, `sweep collect`'s: from each run folder's recipe.toml copy, else the preset of its name), and the
    recipe file it came from: a study of the user's own recipe named it everywhere and defined it nowhere. None where
    the runs carry no formats (records from before collect wrote them)."""
    from scaling.recipes import FORMAT_COLUMNS  # (torch-free)

    if not set(FORMAT_COLUMNS) <= set(runs.columns):
        return None
    files = runs["recipe_file"] if "recipe_file" in runs.columns else pl.Series([None] * runs.height)
    seen: dict[tuple, list[str]] = {}  # (recipe, forward, backward) -> its files, each once
    for recipe, forward, backward, file in zip(runs["recipe"], runs[FORMAT_COLUMNS[0]], runs[FORMAT_COLUMNS[1]], files):
        named = seen.setdefault((recipe, forward or "not recorded", backward or "not recorded"), [])
        if file and file not in named:
            named.append(file)
    rows = tuple((r, f, b, ", ".join(f"recipe file {p}" for p in paths) or "preset")  # (cells are data, not markup)
                 for (r, f, b), paths in sorted(seen.items()))
    return Table(RECIPE_COLUMNS, rows, "What each recipe quantizes along each GEMM's K, in `scaling recipes`' words, as "
                 "its runs recorded it (from each run folder's recipe.toml, the recipe file's content it trained "
                 "with, else the preset of its name).")


TOKENS_LISTED_SIZES = 12  # beyond this many model sizes, the provenance gives their range, not each one's budgets


def _token_count(d: float) -> str:
    """A token budget as a reader reads it: a small run's whole (4,096, not 4.1e+03), a large one's 3 digits."""
    return f"{d:,.0f}" if d < 1e6 else f"{d:.3g}"


def _tokens_per_run(runs: pl.DataFrame) -> list[str]:
    """Each model size's token budgets, one line per size; their ranges where there are more sizes than
    a reader would read (a table read off a paper's figure has a slightly different N at every point)."""
    # A failed run's record may hold no n_params or tokens (it crashed before they were known): no budget to list.
    known = runs.drop_nulls(["N", "D"])
    tokens = known.group_by("N").agg(pl.col("D").unique().sort()).sort("N")
    ns = tokens["N"].to_list()
    if len(ns) > TOKENS_LISTED_SIZES:
        low, high = (_token_count(float(v)) for v in (known["D"].min(), known["D"].max()))
        return [f"Tokens per run: {len(ns)} model sizes, N = {ns[0]:.3g} to {ns[-1]:.3g}, trained on "
                f"{low if low == high else f'{low} to {high}'} tokens (each run's N and D: results.csv)."]
    label = "size" if "size" in runs.columns else None
    digits = next((k for k in range(3, 17) if len({f"{n:.{k}g}" for n in ns}) == len(ns)), 17)  # distinct N, distinct labels
    lines = []
    for n, ds in tokens.iter_rows():
        name = f"{literal(runs.filter(pl.col('N') == n)[label][0])} (N = {n:.{digits}g})" if label else f"N = {n:.{digits}g}"
        lines.append(f"Tokens per run, {name}: {', '.join(_token_count(d) for d in ds)}.")
    return lines


# --- the whole report ---------------------------------------------------------------------------


def _sweep_name(study: Study) -> str | None:
    """The sweep's own name, from its plan (sweep.json), where the report reads a sweep folder (whose
    folder name may be any --sweep-dir); None elsewhere or where the plan names none."""
    if study.sweep_dir is None:
        return None
    from sweeps.store import read_plan  # (load has read the folder through it: a damaged plan is refused there)

    name = read_plan(study.sweep_dir).get("name")
    return name if isinstance(name, str) and name else None


REPORT_FILES = ("results.csv", "fits.json", "report.md", "index.html")  # index.html last: the report is whole


STAGE_LOCK = ".builder.lock"  # in a staging folder: flocked by its build while it lives (`_lock_stage`)
# a staging folder with no STAGE_LOCK (one of code before it, or of a build killed in the instant between making the
# folder and locking it) is taken for a dead build's once it has not changed for this long (a build stages for seconds)
UNLOCKED_STAGE_S = 3600


@contextlib.contextmanager
def _staging(out_dir: Path) -> Iterator[Path]:
    """A fresh folder beside out_dir to build the report in, locked by this build; removed afterwards, whatever
    happened. A killed build (SIGKILL: no cleanup runs) left its folder for good: the staging folders of out_dir
    whose builds are gone are removed first (`_remove_dead_stages`), never a live build's."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_stages(out_dir)
    try:
        stage = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.building-"))
    except OSError as e:  # (a folder that takes no new one: /proc, /sys) the user's --out, not the stage's name
        raise OSError(e.errno, e.strerror, str(out_dir)) from e
    lock = None
    try:
        lock = _lock_stage(stage)
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # (still locked: no other build takes it for a dead one's meanwhile)
        if lock is not None:
            os.close(lock)


def _lock_stage(stage: Path) -> int:
    """Lock a new staging folder for its build: a flock on its STAGE_LOCK, which the kernel drops when the build's
    process dies; returns the descriptor to close once the folder is gone. The file is locked under another name
    and renamed into place, so that no other build ever finds it there and free while this one lives."""
    import fcntl

    fd, path = tempfile.mkstemp(dir=stage, prefix=f"{STAGE_LOCK}.")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (a file no other process knows yet: at once)
        os.rename(path, stage / STAGE_LOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_dead_stages(out_dir: Path) -> list[Path]:
    """Remove the staging folders beside out_dir (`.NAME.building-*`) whose builds are gone, each under its lock
    taken from its dead build, and say so; returns them. A live build holds its folder's lock: it is left alone."""
    removed = []
    for stage in sorted(out_dir.parent.glob(f".{glob.escape(out_dir.name)}.building-*")):
        if stage.is_dir() and not stage.is_symlink() and _remove_if_dead(stage):
            removed.append(stage)
            _stage(f"removed {stage}, the staging folder of a build of {out_dir} that was killed")
    return removed


def _remove_if_dead(stage: Path) -> bool:
    """Remove a staging folder whose build is gone (its STAGE_LOCK free; or, where it has none, unchanged for
    UNLOCKED_STAGE_S); False where its build may live, or the folder is another user's."""
    try:  # (no O_CREAT: a lock file made here, in a folder its build is removing, would stop that removal)
        fd = os.open(stage / STAGE_LOCK, os.O_RDWR)
    except FileNotFoundError:  # a build between making its folder and locking it, one removing it, or older code's
        try:
            unchanged = time.time() - stage.stat().st_mtime > UNLOCKED_STAGE_S
        except OSError:
            return False
        if unchanged:
            shutil.rmtree(stage, ignore_errors=True)
        return unchanged
    except OSError:  # (another user's build: not ours to judge)
        return False
    try:
        if not take_exclusive(fd, tries=1):  # its build lives
            return False
        shutil.rmtree(stage, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _publish(stage: Path, out_dir: Path) -> None:
    """Move a whole report from its staging folder into out_dir (renames on one file system: no new
    space needed), replacing the report files and figures of an earlier build and nothing else there.
    A process killed between the renames leaves a folder a relaunch rebuilds (fits.json, which marks an
    earlier report, comes first) and no reader takes for whole (index.html goes first and comes last)."""
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "index.html").unlink(missing_ok=True)
    os.replace(stage / "fits.json", out_dir / "fits.json")
    for old in fig_dir.glob("*.png"):  # a rebuild must not leave figures of an older report behind
        old.unlink()
    for png in (stage / "figures").glob("*.png"):
        os.replace(png, fig_dir / png.name)
    for name in REPORT_FILES:
        if name != "fits.json":
            os.replace(stage / name, out_dir / name)


def _refuse_replacing_source(source: Path, out_dir: Path) -> None:
    """UserError where the source table is a file this build writes (`--out` holding the input as
    results.csv): the report's own results.csv, under the fits' column names and one row per run, replaced
    the user's table, whose other names and earlier checkpoints were then gone."""
    if source.is_file() and source.name in REPORT_FILES and source.resolve().parent == out_dir.resolve():
        raise UserError(f"{source} is the {source.name} this report writes in --out {out_dir}, so the build would "
                        "replace the table it reads; pass another --out, or move the table out of that folder")


def _earlier_report(out_dir: Path) -> bool:
    """out_dir holds a report an earlier build wrote: its fits.json is `fits.analyse`'s object."""
    try:
        fitted = json.loads((out_dir / "fits.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(fitted, dict) and {"law", "groups"} <= set(fitted)


def refuse_replacing_others(out_dir: Path) -> None:
    """UserError where --out holds files named as the report's (results.csv, report.md, index.html,
    fits.json, figures/*.png) that no earlier report wrote: a folder of the user's (a paper's, whose
    results.csv and figures/*.png are their own) lost them to the build without a word."""
    if not out_dir.is_dir():
        return
    figures = out_dir / "figures"
    if figures.exists() and not figures.is_dir():
        raise UserError(f"--out {out_dir} holds a file named figures, where the report writes its figures folder; "
                        "pass another --out, or move that file")
    blocking = [name for name in REPORT_FILES if (out_dir / name).is_dir()]
    if blocking:
        raise UserError(f"--out {out_dir} holds a folder named {blocking[0]}, where the report writes that file; "
                        "pass another --out, or move that folder")
    present = [name for name in REPORT_FILES if (out_dir / name).exists()]
    present += [f"figures/{p.name}" for p in sorted(figures.glob("*.png"))] if figures.is_dir() else []
    if present and not _earlier_report(out_dir):
        shown = ", ".join(present[:5]) + (f", … ({len(present)} in all)" if len(present) > 5 else "")
        raise UserError(f"--out {out_dir} holds {shown}, which the report would replace, and no earlier report (its "
                        "fits.json) is there; pass a new or empty folder as --out, or move those files first")


def subtitle(runs: pl.DataFrame, baseline: str, compared: bool, law: str) -> str:
    """The report's line under its title: runs, recipes, baseline, law. compared: a penalty against the baseline was
    computed."""
    recipes = sorted(set(runs["recipe"]))  # (the study's, not the fitted ones: with the others left out, it is still the baseline)
    role = (f"baseline {code(baseline)}" if compared
            # a table (or a sweep so far) of the baseline alone: it is there, with nothing to compare
            else f"baseline {code(baseline)} (no other recipe has results)" if recipes == [baseline]
            else f"no baseline ({code(baseline)})")
    return f"{count(runs.height, 'run')}, recipes {', '.join(map(literal, recipes))}; {role}; law `{law}`."


def build(source: str | Path, out_dir: str | Path, baseline: str = "bf16", law: str = "chinchilla",
          bootstrap: int = 200, diagnostics: str | Path | None = None, columns: dict[str, str] | str | None = None,
          seed: int = 0, workers: int | None = None, title: str | None = None,
          shared_efficiencies: bool = False) -> dict:
    """Build the report for a sweep directory or a results table; returns a summary (paths, verdicts).

    Writes <out_dir>/{index.html, report.md, figures/*.png, results.csv, fits.json}. `columns` maps
    fit names to a table's own ("N=Model Size,C=Training FLOP"), as `scaling fit --columns`. `shared_efficiencies`:
    fit and show the efficiencies shared by format too (`scaling fit --shared-efficiencies`).
    """
    from fits.analysis import check_source, warning_lines

    if law not in ("chinchilla", "quartet"):
        raise UserError(f"unknown law {law!r}; use chinchilla or quartet")
    if bootstrap < 0:
        raise UserError(f"--bootstrap must be 0 or more, got {bootstrap}")
    out_dir = Path(out_dir)
    if Path(source).is_file():  # a sweep spec given for its sweep's folder: that folder, and this command on it
        from sweeps.store import refuse_spec_file  # (torch-free)

        refuse_spec_file(Path(source), f"scaling report {{folder}} --out {out_dir}")
    _refuse_replacing_source(Path(source), out_dir)
    refuse_replacing_others(out_dir)  # before the fits: a user's own results.csv or figures are not overwritten
    checkout = git_commit(short=True)  # before writing: a report written into the checkout would dirty it
    study = load(source, diagnostics, columns)
    # (a --baseline no run has, a group that cannot be fitted: refused before the stage's line, not after it)
    table = fit_table(study.runs)
    check_source(study.runs, table, law=law, baseline=baseline, shared_efficiencies=shared_efficiencies)
    workers = workers or min(4, usable_cpus())
    # Each stage takes seconds to minutes on a laptop: say which one it is in (stderr; --json keeps stdout)
    _stage(f"fitting the {law} law to {count(compare.completed(study.runs).height, 'completed run')} "
           f"({count(bootstrap, 'bootstrap replicate')}, {count(workers, 'worker')})")
    fitted = run_fits(study.runs, law, baseline, bootstrap, seed, workers, shared_efficiencies, table)
    _stage("drawing the figures and writing the report")
    styles = figures.recipe_styles(sorted(set(study.runs["recipe"])), baseline)
    compared = baseline in fitted["groups"] and study.runs["recipe"].n_unique() > 1  # (a penalty against it)
    with _staging(out_dir) as stage:  # a failure (a full disk) leaves the folder as it was
        fig_dir = stage / "figures"
        fig_dir.mkdir()
        write_atomic(stage / "results.csv", _flat_table(study.runs).write_csv())
        write_json_atomic(stage / "fits.json", fitted, indent=2)
        doc = Document(
            title=title or f"FP4 scaling report: {_sweep_name(study) or study.source.name}",
            subtitle=subtitle(study.runs, baseline, compared, law),
            sections=[
                section_verdict(fitted, baseline, study),
                section_loss_vs_compute(study, fitted, baseline, styles, fig_dir),
                section_penalty(fitted, baseline, styles, fig_dir),
                section_gaps(study, baseline, styles, fig_dir),
                section_overhead(study, baseline, styles, fig_dir),
                section_efficiency(fitted, baseline),
                *([section_shared_efficiencies(fitted, baseline)] if "shared_efficiencies" in fitted else []),
                section_diagnostics(study),
                section_failures(study),
                section_provenance(study, checkout),
            ],
        )
        write_atomic(stage / "index.html", to_html(doc))
        write_atomic(stage / "report.md", to_markdown(doc, stage))
        _publish(stage, out_dir)
    fig_dir = out_dir / "figures"
    return {
        "out_dir": str(out_dir),
        "index_html": str(out_dir / "index.html"),
        "report_md": str(out_dir / "report.md"),
        "figures": sorted(str(p) for p in fig_dir.glob("*.png")),
        "law": law,
        "baseline": baseline if compared else None,  # (as `fit --json`: None where nothing is compared with it)
        "n_runs": study.runs.height,
        "verdicts": {
            r: {"verdict": p.get("verdict"), "p_value": p.get("p_value"),
                "p_adjusted": p.get("p_adjusted"), "identified": identified(p),  # (False: no p is shown for it)
                "sentence": plain(verdict_sentence(r, p, baseline, bootstrap, study.runs)),
                "brief": brief_verdict(r, p, study.runs)}
            for r, p in sorted(fitted.get("penalty", {}).items())
        },
        "skipped": fitted.get("skipped", {}),
        "warnings": fit_warnings(fitted),
        "brief_warnings": warning_lines(fitted),  # the same, a line per group, for a terminal (print_summary)
        "omitted": {s.title: plain(s.omitted) for s in doc.sections if s.omitted},  # (the console's words)
        "unfinished": {r.run_id: r.state_label() for r in study.unfinished},  # a sweep's runs with no result
    }
