"""`scaling bench calibration`: how often the κN = κD = 0 test (`penalty.lr_test`) rejects at its
nominal level, on synthetic sweeps from a known law: where the truth is a constant penalty (every
rejection is false; a calibrated 5% test rejects ~5%) and where the penalty grows (rejections are
power). Each case is `sweeps` sweeps of a baseline and one recipe on a grid of model sizes × tokens
per parameter, one run per point, fitted as `scaling fit` fits them (`fits.analysis.analyse`). With a bootstrap
(`bootstrap` replicates a sweep; the test does not use it) the same sweeps also measure how often the 95% bootstrap
interval of `ratio_per_decade`, which the verdict reads, holds the truth's (`coverage`): 1 under a constant penalty,
the truth's law's own under growth (`fits.synthetic.true_ratio_per_decade`), and how often each other interval the
verdict and the tables print for the recipe holds its truth (`intervals`: the multiplier and the loss gap at three
computes, `fits.synthetic.true_penalty`; κN, κD, effN, effD and the constant model's efficiencies).

`calibrate_shared`, for `scaling bench calibration --shared`: how often the shared-efficiency check (`fits.shared`:
the test of a recipe's own efficiency against its format's shared one, Holm-adjusted over the analysis' checks)
says "not consistent" where the truth is shared (every such verdict is false) and where one recipe's is not (power),
the raw test's rejection rate at 5% beside it, and how often the shared efficiencies' 95% bootstrap intervals hold
the truth (coverage). Each sweep is bf16 and three recipes of one forward format, fitted with a bootstrap (for the
intervals; the test needs none), under normal or heavy-tailed (t3, laplace) noise as `calibrate`'s cases."""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from fits.synthetic import reference_points, synthetic_table, true_penalty, true_ratio_per_decade
from scaling.console import count, time_left

GRIDS = {  # name -> (model sizes, tokens per parameter)
    "3x3": (np.geomspace(2e7, 2e8, 3), (10, 20, 40)),
    "4x4": (np.geomspace(2e7, 5e8, 4), (10, 20, 40, 80)),
    "6x5": (np.geomspace(2e7, 1e9, 6), (5, 10, 20, 40, 80)),
}
TRUTHS = {  # the recipe against the baseline law
    "constant": {"effN": 0.7},
    "grows": {"effN": 0.7, "kappaN": -0.15},  # the compute multiplier falls ~20% per decade of compute
}
CASES = (  # (grid, noise distribution, truth)
    ("3x3", "normal", "constant"), ("4x4", "normal", "constant"), ("6x5", "normal", "constant"),
    ("4x4", "laplace", "constant"), ("4x4", "t3", "constant"),
    ("3x3", "normal", "grows"), ("4x4", "normal", "grows"),
    # twins' shared noise (fits.synthetic's "paired": 90% of the variance common to a configuration's runs), which the
    # bootstrap draws together (`fits.analysis.pairing`): drawn apart, the penalty's intervals carry that noise twice
    ("4x4", "paired", "constant"),
)


def _one_sweep(ctx: tuple, item: tuple) -> tuple[float, float, dict, dict]:
    """(statistic, p-value) of the κ = 0 test on one synthetic sweep, the 95% bootstrap interval of each number the
    verdict and the tables print for its recipe ({name: (low, high)}, `INTERVALS`' names; (NaN, NaN) without a
    bootstrap, and where the report prints none: a penalty the runs do not identify, whose ends are float noise), and
    each one's truth ({name: value}, None where the truth's law has none: `_truths`)."""
    from fits.analysis import analyse

    noise, law, bootstrap = ctx
    grid, dist, truth, seed = item
    sizes, ratios = GRIDS[grid]
    table = synthetic_table({"bf16": {}, "fp4": TRUTHS[truth]}, sizes=sizes, ratios=ratios, noise=noise,
                            noise_dist=dist, seed=seed)
    out = analyse(table, law=law, baseline="bf16", bootstrap=bootstrap, seed=seed, workers=1)
    pen, group = out["penalty"]["fp4"], out["groups"]["fp4"]
    intervals = {"ratio_per_decade": pen["ratio_per_decade"]["ci95"]}
    for name in ("multiplier", "gap"):  # at the data's smallest and largest compute, and the extrapolation's end
        intervals.update({f"{name} at {where}": ci for where, ci in zip(pen[name]["where"], pen[name]["ci95"])})
    intervals.update({k: pen[k]["ci95"] for k in ("kappaN", "kappaD")})
    none = (np.nan, np.nan)  # (a group's ci95 is {} without a bootstrap)
    intervals.update({k: group["ci95"].get(k, none) for k in ("effN", "effD")})  # the growth model's, as κN's: at N₀, D₀
    if not pen["identified"]:  # (the report prints "not identified" for every one of these)
        intervals = dict.fromkeys(intervals, none)
    # the constant model's: `scaling fit` and the report's efficiency section print them whatever the growth fit does
    intervals.update({k: group["ci95"].get(k, none) for k in ("effN_const", "effD_const")})
    fp4 = table.filter(pl.col("recipe") == "fp4")
    truths = _truths(TRUTHS[truth], pen["multiplier"]["C"], pen["multiplier"]["where"],
                     *reference_points(fp4["N"].to_numpy(), fp4["D"].to_numpy()))
    return pen["lr_stat"], pen["p_value"], intervals, truths


def _truths(recipe: dict, C: list[float], where: list[str], N0: float, D0: float) -> dict[str, float | None]:
    """The truth of each interval `_one_sweep` reads, from the recipe's law (`fits.synthetic`), at the computes `C`
    the fit prints the multiplier and the gap at (`where`: their words) and the runs' N₀, D₀. effN_const and
    effD_const are the constant model's, whose truth is the law's efficiencies only where the penalty is constant:
    under growth that model is not the law, and its estimates have no truth of the law's to hold (None)."""
    curves = true_penalty(recipe, C, N0, D0)
    out: dict[str, float | None] = {"ratio_per_decade": true_ratio_per_decade(recipe)}
    for name in ("multiplier", "gap"):
        out.update({f"{name} at {w}": float(v) for w, v in zip(where, curves[name])})
    out.update(kappaN=recipe.get("kappaN", 0.0), kappaD=recipe.get("kappaD", 0.0), effN=recipe.get("effN", 1.0),
               effD=recipe.get("effD", 1.0))
    constant = not recipe.get("kappaN") and not recipe.get("kappaD")
    out.update(effN_const=out["effN"] if constant else None, effD_const=out["effD"] if constant else None)
    return out


def coverage(intervals: np.ndarray, truth: float) -> dict:
    """How often the intervals ((n, 2): low, high; NaN where a sweep gave none) hold `truth`: `coverage`, the fraction
    of those with an interval whose ends (both finite) hold it; `ci_width`, their median width (high − low);
    `no_interval`, how many sweeps gave none (counted out of both)."""
    intervals = np.asarray(intervals, float).reshape(-1, 2)
    known = np.isfinite(intervals).all(axis=1)
    low, high = intervals[known].T
    return {"coverage": float(np.mean((low <= truth) & (truth <= high))) if known.any() else None,
            "ci_width": float(np.median(high - low)) if known.any() else None,
            "no_interval": int(np.sum(~known))}


def interval_coverage(sweeps: list[tuple]) -> dict[str, dict]:
    """Per interval `_one_sweep` reads but ratio_per_decade (whose coverage is the row's own keys): its truth (every
    sweep of a case has the same runs' N and D, so the same truth) and `coverage` of it; where the truth's law gives
    none (None), the coverage is None and the widths are still said."""
    out = {}
    for name, truth in sweeps[0][3].items():
        if name == "ratio_per_decade":
            continue
        measured = coverage(np.array([s[2][name] for s in sweeps], float), np.nan if truth is None else truth)
        out[name] = {"truth": truth, **measured, **({"coverage": None} if truth is None else {})}
    return out


def calibrate(sweeps: int = 40, noise: float = 0.005, law: str = "chinchilla", cases=CASES, workers: int = 2,
              seed: int = 0, bootstrap: int = 100, progress=None, on_row=None) -> list[dict]:
    """One row per case: its rejection rates at 5% and 1%, and the statistic's mean (2 under a
    calibrated null: the χ²(2) mean); with a bootstrap (`bootstrap` replicates a sweep, seeded by the sweep's seed as
    `scaling fit --seed` seeds them), the coverage of ratio_per_decade's 95% interval (`coverage`) against the truth's
    ratio (`true_ratio`), and under `intervals` that of every other interval the verdict and the tables print for the
    recipe (`interval_coverage`: the multiplier and the loss gap at the data's ends and the extrapolation's, κN, κD,
    effN, effD and the constant model's effN_const, effD_const) against its truth's; bootstrap 0 measures the test
    alone. A case's sweeps are seeds seed..seed+sweeps-1. The intervals are those of the same fits: measuring them
    costs no fit. on_row(rows so far) after each case, so a caller can save them (a case takes minutes: a run cut
    short keeps the cases it finished)."""
    from fits.fit import parallel_map
    from fits.threads import single_threaded_blas

    rows, cases, started = [], list(cases), time.monotonic()
    for grid, dist, truth in cases:
        items = [(grid, dist, truth, seed + i) for i in range(sweeps)]
        with single_threaded_blas():
            out = parallel_map(_one_sweep, (noise, law, bootstrap), items, workers)
        stat, p = np.array([o[0] for o in out], float), np.array([o[1] for o in out], float)
        testable = np.isfinite(p)
        row = {"grid": grid, "noise_dist": dist, "noise_sd": noise, "truth": truth, "law": law, "sweeps": sweeps,
               "bootstrap": bootstrap, "reject_5pct": float(np.mean(p < 0.05)), "reject_1pct": float(np.mean(p < 0.01)),
               "mean_stat": float(np.mean(stat[testable])) if testable.any() else None,
               "untestable": int(np.sum(~testable))}
        if bootstrap:
            true_ratio = out[0][3]["ratio_per_decade"]
            row.update(true_ratio=true_ratio,
                       **coverage(np.array([o[2]["ratio_per_decade"] for o in out], float), true_ratio),
                       intervals=interval_coverage(out))
        rows.append(row)
        if on_row:
            on_row(rows)
        if progress:
            progress(f"  {case_done(len(rows), len(cases))} {grid} {dist:<7} {truth:<8}: rejected "
                     f"{row['reject_5pct']:.0%} at 5%, {row['reject_1pct']:.0%} at 1% of {count(sweeps, 'sweep')}; "
                     f"mean statistic {row['mean_stat'] or float('nan'):.2f}{_coverage_words(row)}"
                     f"{_left(len(rows), len(cases), started)}")
    return rows


def _coverage_words(row: dict) -> str:
    """A `calibrate` row's coverage for its progress line; nothing where it has none (no bootstrap)."""
    if "coverage" not in row:
        return ""
    width = "-" if row["ci_width"] is None else f"{row['ci_width']:.3f}"
    missing = f" ({count(row['no_interval'], 'sweep')} without one)" if row["no_interval"] else ""
    return (f"; the ratio per decade's 95% interval held its truth ({row['true_ratio']:.3f}) in "
            f"{_percent(row['coverage'])}, median width {width}{missing}{_lowest_words(row.get('intervals', {}))}")


def _lowest_words(intervals: dict[str, dict]) -> str:
    """The other intervals' lowest coverage, and whose, for a progress line; nothing where none was measured."""
    measured = {name: e["coverage"] for name, e in intervals.items() if e["coverage"] is not None}
    if not measured:
        return ""
    name = min(measured, key=measured.get)
    return f"; of the other {len(measured)} intervals, the lowest coverage is {name}'s, {_percent(measured[name])}"


# The shared-efficiency check (`fits.shared`, docs/fits.md "Shared efficiencies"): bf16 and three recipes of MXFP4's
# forward format (one effN) with three backward formats (an effD each), named as presets so their formats are the
# presets'. Truths are the Quartet paper's (RECIPES.md): effN 0.645, effD 0.85 (MXFP4), 0.893 (SR), 0.97 (MXFP8).
SHARED_TRUTHS = {
    "shared": {"mxfp4": {"effN": 0.645, "effD": 0.85}, "mxfp4_sr": {"effN": 0.645, "effD": 0.893},
               "mxfp4_fprop": {"effN": 0.645, "effD": 0.97}},
    "split": {"mxfp4": {"effN": 0.645, "effD": 0.85}, "mxfp4_sr": {"effN": 0.72, "effD": 0.893},
              "mxfp4_fprop": {"effN": 0.645, "effD": 0.97}},
}
SHARED_POWER = {"split": "mxfp4_sr effN"}  # the check whose recipe's truth is not its format's: its rejections are power
SHARED_CASES = (  # (grid, noise distribution, law, truth)
    ("6x5", "normal", "quartet", "shared"), ("6x5", "normal", "quartet", "split"),
    ("4x4", "normal", "quartet", "shared"), ("4x4", "normal", "quartet", "split"),
    ("6x5", "normal", "chinchilla", "shared"), ("6x5", "normal", "chinchilla", "split"),
    # heavy tails, as CASES': how the check behaves on messier runs than normal noise gives
    ("6x5", "t3", "quartet", "shared"), ("6x5", "t3", "quartet", "split"),
    ("6x5", "laplace", "quartet", "shared"), ("6x5", "laplace", "quartet", "split"),
)
EFFICIENCIES = {"forward": "effN", "backward": "effD"}
SHARING = "sharing as a whole"  # the raw entry of `fits.shared.sharing_test`'s rejection at 5%


def _one_shared_sweep(ctx: tuple, item: tuple) -> tuple[dict, dict, dict]:
    """One synthetic sweep's shared-efficiency fit: ({"RECIPE effN|effD": its check ("consistent", "not consistent"
    or None where unchecked)}, {"effN|effD of RECIPES": whether its format's ci95 holds the truth, None where the
    format has no single truth (its recipes' differ) or no interval (not pinned)}, {"RECIPE effN|effD": whether its
    raw test rejects at 5%, None where unchecked})."""
    from fits.analysis import shared_efficiencies

    noise, bootstrap = ctx
    grid, dist, law, truth, seed = item
    truths = SHARED_TRUTHS[truth]
    table = shared_sweep_table(grid, dist, truth, noise, seed)
    out = shared_efficiencies(table, law=law, baseline="bf16", bootstrap=bootstrap, seed=seed, workers=1)
    checks = {f"{r} {eff}": c[eff]["check"] for r, c in out["recipes"].items() for eff in ("effN", "effD")}
    raw = {f"{r} {eff}": None if c[eff]["check"] is None else bool(c[eff]["p_value"] < 0.05)
           for r, c in out["recipes"].items() for eff in ("effN", "effD")}
    sharing = out["sharing_test"]
    raw[SHARING] = None if sharing is None or not np.isfinite(sharing["p_value"]) else bool(sharing["p_value"] < 0.05)
    covered = {}
    for kind, eff in EFFICIENCIES.items():
        for entry in out[kind].values():
            if not entry["fitted"]:
                continue
            values = {truths[r][eff] for r in entry["recipes"]}
            low, high = entry["ci95"]
            known = len(values) == 1 and entry["pinned"] and np.isfinite([low, high]).all()
            covered[f"{eff} of {'+'.join(sorted(entry['recipes']))}"] = bool(low <= values.pop() <= high) if known else None
    return checks, covered, raw


def shared_sweep_table(grid: str, dist: str, truth: str, noise: float, seed: int) -> pl.DataFrame:
    """One synthetic sweep of a shared case: bf16 and the truth's recipes on the grid, `noise` of `dist` on the log
    loss (fits.synthetic.NOISE)."""
    sizes, ratios = GRIDS[grid]
    return synthetic_table({"bf16": {}, **SHARED_TRUTHS[truth]}, sizes=sizes, ratios=ratios, noise=noise,
                           noise_dist=dist, seed=seed)


def _rate(flags: list) -> float | None:
    """The fraction of True among the known (not None) flags; None where none is known."""
    known = [f for f in flags if f is not None]
    return float(np.mean(known)) if known else None


def _null_checks(truth: str) -> list[str]:
    """The checks whose recipe's truth is its format's (every recipe of that format has the same value): each "not
    consistent" of theirs is false."""
    from fits.shared import recipe_formats

    truths = SHARED_TRUTHS[truth]
    formats = recipe_formats(list(truths), {})
    out = []
    for r in truths:
        for k, eff in enumerate(("effN", "effD")):
            peers = {truths[p][eff] for p in truths if formats[p][k] == formats[r][k]}
            if len(peers) == 1:
                out.append(f"{r} {eff}")
    return out


def shared_row(grid: str, law: str, truth: str, noise: float, bootstrap: int, sweeps: list[tuple],
               noise_dist: str = "normal") -> dict:
    """A case's row from its sweeps' (checks, covered, raw): each check's "not consistent" rate among the sweeps that
    checked it, the false rate (pooled over the checks whose truth is their format's), the power (SHARED_POWER's
    check, where the case has one), the same two of the raw test at 5% and the sharing test's rejections, each format's ci95
    coverage (pooled too) and how many checks went unchecked."""
    names = list(sweeps[0][0])
    rejected = {n: _rate([None if s[0][n] is None else s[0][n] == "not consistent" for s in sweeps]) for n in names}
    null = _null_checks(truth)
    pooled = [None if s[0][n] is None else s[0][n] == "not consistent" for s in sweeps for n in null]
    raw = [s[2] for s in sweeps]
    coverage = {f: _rate([s[1][f] for s in sweeps]) for f in sweeps[0][1]}
    power = SHARED_POWER.get(truth)
    return {"grid": grid, "noise_dist": noise_dist, "noise_sd": noise, "truth": truth, "law": law, "sweeps": len(sweeps),
            "bootstrap": bootstrap, "false_rate": _rate(pooled), "false_checks": null,
            "false_rate_raw": _rate([r[n] for r in raw for n in null]),
            "power_raw": _rate([r[power] for r in raw]) if power else None,
            # the test of the sharing as a whole at 5%: false where the truth is shared, power where split
            "sharing_rejected": _rate([r[SHARING] for r in raw]),
            "power": rejected[power] if power else None, "power_check": power, "not_consistent": rejected,
            "coverage_effN": _rate([s[1][f] for s in sweeps for f in coverage if f.startswith("effN")]),
            "coverage_effD": _rate([s[1][f] for s in sweeps for f in coverage if f.startswith("effD")]),
            "coverage": coverage, "unchecked": sum(c is None for s in sweeps for c in s[0].values())}


def calibrate_shared(sweeps: int = 40, bootstrap: int = 100, noise: float = 0.005, cases=None,
                     workers: int = 2, seed: int = 0, progress=None, on_row=None) -> list[dict]:
    """One row per case (`shared_row`): how often the shared-efficiency check says "not consistent" where the truth
    is shared (false) and where one recipe's is not (power), and how often the shared efficiencies' 95% intervals
    hold the truth. Each sweep fits with `bootstrap` replicates (the check is theirs). cases: (grid, noise
    distribution, law, truth) tuples, default SHARED_CASES; a case's sweeps are seeds seed..seed+sweeps-1 whatever
    its distribution. on_row(rows so far) after each case, as `calibrate`."""
    from fits.fit import parallel_map
    from fits.threads import single_threaded_blas

    rows, cases, started = [], list(SHARED_CASES if cases is None else cases), time.monotonic()
    for grid, dist, law, truth in cases:
        items = [(grid, dist, law, truth, seed + i) for i in range(sweeps)]
        with single_threaded_blas():
            out = parallel_map(_one_shared_sweep, (noise, bootstrap), items, workers)
        row = shared_row(grid, law, truth, noise, bootstrap, out, noise_dist=dist)
        rows.append(row)
        if on_row:
            on_row(rows)
        if progress:
            progress(f"  {case_done(len(rows), len(cases))} {grid} {dist:<7} {law:<10} {truth:<6}: " + ", ".join(
                f"{k} {_percent(row[k])}" for k in ("false_rate", "false_rate_raw", "power", "power_raw",
                                                    "sharing_rejected", "coverage_effN", "coverage_effD"))
                + f" of {count(sweeps, 'sweep')} ({count(row['unchecked'], 'check')} unchecked)"
                + _left(len(rows), len(cases), started))
    return rows


def case_done(done: int, total: int) -> str:
    """'[3/8]': a calibration's progress line's place (a case takes minutes; the line ends with the time left, `_left`)."""
    return f"[{done}/{total}]"


def _left(done: int, total: int, started: float) -> str:
    """'; 5m10s left' at the pace of the cases so far (`scaling.console.time_left`); '' after the last."""
    return time_left(done, total - done, time.monotonic() - started) if done < total else ""


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
