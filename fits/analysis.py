"""Fit the laws of a table's groups, bootstrap them by run, and judge each recipe's penalty.

A fit is a list of jobs, run once on the full data and once per bootstrap replicate:
  law:G      the law (chinchilla | quartet) fitted to group G on its own, from the grid of starts;
  const:R    recipe R's effN, effD with the baseline's law held fixed (κ = 0);
  growth:R   recipe R's effN₀, effD₀, κN, κD with the baseline's law held fixed.
A replicate resamples runs within each group (twin runs of different groups, one N, D and seed, together: `pairing`)
and refits every job, warm-started from the full-data
optimum plus the best grid starts; its efficiency jobs use that replicate's baseline law, so the
baseline's uncertainty carries into every penalty band.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import numpy as np
import polars as pl

from fits import penalty, shared
from fits.fit import (BOUNDS, FLAT, FREE, N_PARAMS, Pairing, Points, at_bound, best_fit, replicate_weights,
                      efficiency_identified, efficiency_starts, epoch_grid, fit_from, flat_parameters, minimize_from,
                      parallel_map, percentile_ci, rank_starts, unpinned_terms)
from fits.isoflop import isoflop_fit
from fits.laws import IDX, LAWS, THETA, log_predict, to_params
from fits.table import learning_rate_note, never_completed, read_file, read_table, set_aside_note
from fits.threads import single_threaded_blas
from scaling.console import count, stamped, time_left
from scaling.errors import UserError

REPLICATE_GRID_STARTS = 1  # grid starts per replicate, besides the full-data optimum (a guard against basin switches)
Progress = Callable[[int, int], None]  # (replicates done, total): BootstrapProgress, or your own
EXTRAPOLATE = 100.0  # penalty bands run to 100x the largest compute in the recipe's data
GRID_POINTS = 64


class Note(NamedTuple):
    """One thing a fit says, at two lengths from the same facts: `text`, the whole sentence with what would fix it
    (fits.json's `warnings` and the report: the record), and `brief`, a few words for a terminal's line (`scaling
    fit`, the report's and the demo's summary: `warning_lines`), which leaves the why and the fix to the text; None
    where another note's brief says it already."""
    text: str
    brief: str | None


def _points(table: pl.DataFrame) -> dict[str, Points]:
    groups = {}
    for (name,), g in table.sort("recipe", maintain_order=True).group_by("recipe", maintain_order=True):
        groups[str(name)] = Points.from_arrays(g["N"].to_numpy(), g["D"].to_numpy(), g["loss"].to_numpy(),
                                               g["run_id"].to_numpy())
    return groups


def pairing(table: pl.DataFrame, groups: dict[str, Points]) -> Pairing | None:
    """The twins among `groups`' runs, for the bootstrap (`fit.replicate_weights`): runs of a table with a `seed`
    column (a sweep's results) at one configuration, the same model size N, final token count D (a run's largest,
    its checkpoints aside) and seed, in different recipes, which start from the same initialisation and see the same
    data; None where the table has no seed column or no configuration is in two groups (each group's runs are then
    drawn on their own, as before pairing)."""
    if "seed" not in table.columns:
        return None
    index: dict[tuple, int] = {}
    configs, owners = {}, {}
    for g, pts in groups.items():
        rows = table.filter(pl.col("recipe") == g)
        runs = rows.group_by("run_id").agg(pl.col("N").first(), pl.col("D").max(), pl.col("seed").first().cast(pl.Utf8))
        key = dict(zip(runs["run_id"].to_list(), zip(runs["N"].to_list(), runs["D"].to_list(), runs["seed"].to_list())))
        ids = np.unique(rows["run_id"].to_numpy())  # the order of `Points.from_arrays`' run indices
        configs[g] = np.array([index.setdefault(key[i], len(index)) for i in ids], dtype=int)
        for c in set(configs[g].tolist()):
            owners[c] = owners.get(c, 0) + 1
    if max(owners.values(), default=0) < 2:
        return None
    return Pairing(configs, len(index))


def twin_configurations(pair: Pairing | None) -> int:
    """How many configurations the bootstrap draws as twins, held by two or more fitted groups (the result's `twins`,
    which the report's Verdict says); 0 where it draws each group's runs apart (`pair` None)."""
    if pair is None:
        return 0
    held = np.zeros(pair.n, dtype=int)
    for configs in pair.configs.values():
        held[np.unique(configs)] += 1
    return int((held >= 2).sum())


def _shortfall(name: str, pts: Points, kind: str) -> str | None:
    """Why group `name` cannot carry a fit of `kind`, or None if it can."""
    need = N_PARAMS[kind] + 3
    if len(pts.logL) < need or pts.n_runs < 3:
        what = {"chinchilla": "a chinchilla fit", "quartet": "a quartet fit", "efficiency": "an effN, effD fit",
                "growth": "a penalty fit (effN, effD, kappaN, kappaD)"}[kind]
        return (f"group {name!r} has {count(len(pts.logL), 'point')} from {count(pts.n_runs, 'run')}; {what} needs at least {need} "
                f"points ({N_PARAMS[kind]} parameters) from 3 runs")
    for axis, values in (("model sizes N", pts.logN), ("token counts D", pts.logD)):
        if len(np.unique(np.round(values, 9))) < 2:
            return f"group {name!r} has a single value of {axis}; a scaling law needs at least 2"
    return None


def shortfalls(table: pl.DataFrame, law: str = "chinchilla", baseline: str | None = "bf16") -> dict[str, str]:
    """Why each recipe of a table (recipe, run_id, N, D, loss: `read_table`'s columns; the losses are not
    read) could not be fitted, as `analyse` would leave it out: `scaling sweep plan` asks before the
    compute is spent."""
    groups = _points(table)
    return _shortfalls(groups, law, baseline if baseline in groups and len(groups) > 1 else None)


def _shortfalls(groups: dict[str, Points], law: str, base: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, g, _ in _plan(groups, law, base).values():
        problem = None if g in out else _shortfall(g, groups[g], kind)
        if problem:
            out[g] = problem
    return out


def _fittable(groups: dict[str, Points], law: str, baseline: str | None) -> tuple[dict[str, Points], dict[str, str]]:
    """The groups that can be fitted, and why each other one is left out. One group too small (a recipe
    whose runs diverged, say) must not stop the others' fits; the baseline, which every penalty is
    measured against, must be fittable, and so must at least one group."""
    base = baseline if baseline in groups and len(groups) > 1 else None
    skipped = _shortfalls(groups, law, base)
    for g, problem in skipped.items():
        refusal = fit_refusal(g, problem, groups, baseline)
        if refusal:
            raise UserError(refusal)
    if len(skipped) == len(groups):
        raise UserError(f"no group can be fitted: {'; '.join(skipped.values())}")
    return {g: p for g, p in groups.items() if g not in skipped}, skipped


def fit_refusal(group: str, problem: str, groups: Iterable[str], baseline: str | None = "bf16") -> str | None:
    """Where a group too small to fit (`problem`: why) stops the whole fit rather than being left out of it
    (the baseline, which every penalty is measured against, or the only group there is): the refusal's
    words and fix, as `scaling fit` refuses and `scaling sweep plan` warns; else None."""
    groups = set(groups)
    if not (len(groups) == 1 or (group == baseline and baseline in groups)):
        return None
    return f"{problem}: add runs to it" + (f" (every penalty is measured against the baseline {group!r}: it cannot be "
                                           "left out)" if len(groups) > 1 else "")


def _plan(groups: dict[str, Points], law: str, baseline: str | None) -> dict[str, tuple]:
    """Jobs as key -> (kind, group, base job key or None), in an order where bases come first."""
    penalised = [g for g in groups if baseline is not None and g != baseline]
    jobs = {}
    for g in groups:
        if law == "chinchilla" or not penalised or g == baseline:
            jobs[f"law:{g}"] = (law, g, None)
    for r in penalised:
        jobs[f"const:{r}"] = ("efficiency", r, f"law:{baseline}")
        jobs[f"growth:{r}"] = ("growth", r, f"law:{baseline}")
    return jobs


def _fit_full(groups, jobs, top, workers):
    thetas, objectives, starts = {}, {}, {}
    laws = _fit_laws(groups, jobs, top, workers)
    for key, (kind, g, base) in jobs.items():
        pts = groups[g]
        if base is None:
            fit, ranked = laws[key]
            starts[key] = ranked[:REPLICATE_GRID_STARTS]
        else:
            s = efficiency_starts(thetas[base])
            if kind == "growth":  # the constant-efficiency optimum is the natural start for κ
                s = np.vstack([thetas[f"const:{g}"][None], s])
            fit = minimize_from(s, kind, pts)
        if fit is None:
            raise UserError(f"the {kind} fit of group {g!r} failed from every start; check the data for outliers")
        thetas[key], objectives[key] = fit.theta, fit.objective
    return thetas, objectives, starts


def _fit_laws(groups: dict[str, Points], jobs: dict, top: int | None, workers: int) -> dict[str, tuple]:
    """Each law job's (fit, grid of starts ranked best first): L-BFGS-B from its `top` best starts. The starts
    of every law job share one pool of `workers` processes (most of the full fit's time is here: 50 starts a
    group of hundreds of steps each); each start's fit is independent of the others' and the best is taken in
    the starts' order (`best_fit`), so the result is the one process's, bit for bit."""
    grids, ranked = {}, {}
    for key, (kind, g, base) in jobs.items():
        if base is None:
            ranked[key] = rank_starts(grids.setdefault(kind, epoch_grid(kind)), groups[g])
    ctx = {"groups": groups, "jobs": jobs, "starts": {key: r[:top] for key, r in ranked.items()}}
    items = [(key, i) for key, s in ctx["starts"].items() for i in range(len(s))]
    fits = parallel_map(_fit_start, ctx, items, workers)
    return {key: (best_fit(f for (k, _), f in zip(items, fits) if k == key), r) for key, r in ranked.items()}


def _fit_start(ctx: dict, item: tuple[str, int]):
    """A law job's fit from one of its grid starts (a pool's task: `_fit_laws`)."""
    key, i = item
    kind, g, _ = ctx["jobs"][key]
    return fit_from(ctx["starts"][key][i], kind, ctx["groups"][g])


def _replicate(ctx: dict, i: int) -> dict:
    """Refit every job on one bootstrap replicate; returns θ per job (NaN where a fit failed)."""
    rng = np.random.default_rng([ctx["seed"], i])
    weights = replicate_weights(ctx["groups"], ctx["pairing"], rng)
    thetas = {}
    for key, (kind, g, base) in ctx["jobs"].items():
        full = ctx["thetas"][key]
        if base is None:
            starts = np.vstack([full[None], ctx["starts"][key]])
        else:
            start = thetas[base].copy()
            start[FREE[kind]] = full[FREE[kind]]
            starts = start[None]
        fit = minimize_from(starts, kind, ctx["groups"][g], weights[g])
        thetas[key] = fit.theta if fit is not None else np.full_like(full, np.nan)
    if ctx.get("shared"):  # the shared efficiencies on this replicate's baseline law and weights
        d, x, bkey = ctx["shared"]
        fit = shared.fit_shared(thetas[bkey], d, x[None], shared.replicate_weights(d, weights))
        thetas["shared"] = fit.theta if fit is not None else np.full_like(x, np.nan)
    return thetas


def _named(thetas: dict, g: str, pts: Points, law: str, jobs: dict, base: str | None) -> dict:
    """Group g's named parameters: its own law (or, under the quartet law, the baseline's that it
    shares); a penalised recipe adds its growth model against the baseline's law (effN, effD at N0,
    D0 and kappaN, kappaD: on the baseline's law, `predict` gives the recipe's law of the penalty),
    and the constant-efficiency model's effN_const, effD_const (the Quartet paper's quantities)."""
    p = to_params(thetas[f"law:{g}" if f"law:{g}" in jobs else f"law:{base}"], law)
    if f"const:{g}" in jobs:
        const = to_params(thetas[f"const:{g}"], law, efficiency=True)
        growth = to_params(thetas[f"growth:{g}"], law, pts.logN0, pts.logD0, efficiency=True, growth=True)
        p.update({k: growth[k] for k in ("effN", "effD", "kappaN", "kappaD", "N0", "D0")})
        p.update(effN_const=const["effN"], effD_const=const["effD"])
    return p


def _param_ci(samples: list[dict]) -> dict[str, list[float]]:
    keys = [k for k in samples[0] if k not in ("N0", "D0")] if samples else []
    return {k: list(percentile_ci(np.array([s[k] for s in samples]))) for k in keys}


def _lr_test(law: str, baseline: Points, pts: Points, const: np.ndarray, growth: np.ndarray):
    """Test of κN = κD = 0 on the baseline's and the recipe's points together, the baseline's law
    refitted under both hypotheses. (Holding the baseline's law fixed at its estimate instead lets κ
    absorb that estimate's error: a 5% test then rejected a true κ = 0 in half of synthetic sweeps.)"""
    joint = Points.joint(baseline, pts)
    null = minimize_from(const[None], f"{law}+efficiency", joint)
    alt = minimize_from(np.vstack([null.theta[None], growth[None]]), f"{law}+growth", joint)
    pred = log_predict(alt.theta, joint.logN, joint.logD, joint.logN0, joint.logD0, recipe=joint.recipe)
    residuals = pred - joint.logL
    return penalty.lr_test(null.objective, min(alt.objective, null.objective), residuals, joint.n_runs,
                           N_PARAMS[f"{law}+growth"])


def _warnings(name: str, params: dict, ci: dict, flat: Iterable[str] = ()) -> list[Note]:
    """Signs that the data cannot pin a group's law: a parameter at an optimiser bound, or its 95% bootstrap interval
    ending at one (the penalty's identification reads that end as the bound's, not the data's: `_unpinned`; the
    report's law table showed such an interval, a CPU study's alpha [0.04, 10], with no word), or an estimate
    outside its own bootstrap interval (resampling the runs moves the fit to another basin). `flat`: the parameters
    the runs do not identify, whose brief says that already (their estimate is noise, and so is where it lies)."""
    out = []
    for k, v in params.items():
        bounds = at_bound(v, k)
        if bounds:
            lo, hi = bounds
            out.append(Note(f"{name}: {k} = {v:.4g} is at the fit's bound [{lo:g}, {hi:g}]; the data cannot pin it "
                            "(more model sizes or token budgets would)", f"{k} = {v:.4g} at its bound"))
        c_lo, c_hi = ci.get(k, (np.nan, np.nan))
        reached = [e for e in (c_lo, c_hi) if at_bound(e, k)]
        if reached and not bounds:  # (an estimate at its bound: its own warning says it)
            ends = " and ".join(f"{e:g}" for e in reached)
            which = "bounds" if len(reached) == 2 else "bound"
            out.append(Note(f"{name}: {k}'s 95% bootstrap interval [{c_lo:.4g}, {c_hi:.4g}] ends at the fit's {which} "
                            f"({ends}), not at a value of the data: replicates stop there, so the data do not pin it "
                            "(more model sizes or token budgets would)",
                            None if k in flat else f"{k}'s 95% interval ends at its {which} {ends}"))
        slack = 1e-6 * max(abs(c_lo), abs(c_hi))  # an estimate at a bound its replicates also reach
        if np.isfinite(c_lo) and np.isfinite(c_hi) and not c_lo - slack <= v <= c_hi + slack:
            out.append(Note(f"{name}: the estimate of {k}, {v:.4g}, lies outside its own 95% bootstrap interval "
                            f"[{c_lo:.4g}, {c_hi:.4g}]; the fit is not stable under resampling the runs",
                            None if k in flat else f"{k} = {v:.4g} outside its own 95% interval [{c_lo:.4g}, {c_hi:.4g}]"))
    return out


def _group_entry(name, pts, params, ci, objective, flat, efficiency: Unidentified | None = None) -> dict:
    """A group's entry; `flat`: its law's not-identified parameters, `efficiency`: its efficiencies' (a recipe fitted
    against the baseline's law), both in its `not_identified`."""
    C = 6 * np.exp(pts.logN + pts.logD)
    efficiency_flat = list(efficiency.names) if efficiency else []
    return {"params": params, "ci95": ci, "n_points": int(len(pts.logL)), "n_runs": pts.n_runs,
            "objective": objective, "compute_range": [float(C.min()), float(C.max())],
            "isoflop": isoflop_fit(np.exp(pts.logN), np.exp(pts.logD), np.exp(pts.logL)),
            "not_identified": flat + efficiency_flat,
            **_warning_entries(name, params, ci, pts, flat, efficiency)}


def _warning_entries(name: str, params: dict, ci: dict, pts: Points, flat: list[str],
                     efficiency: Unidentified | None = None) -> dict[str, list[str]]:
    """A group's `warnings` (sentences) and `brief_warnings` (the same, in the same order, a few words each, a fact
    said once)."""
    unidentified = flat + (list(efficiency.names) if efficiency else [])
    notes = (_warnings(name, params, ci, unidentified) + _units_warning(name, float(np.exp(pts.logL.max())))
             + (_count_units_warning(name, pts) or _ratio_units_warning(name, pts))
             + _one_ratio_warning(name, pts) + _flat_warning(name, flat, pts)
             + _efficiency_warning(name, efficiency) + _no_floor_warning(name, params, pts, "E" in flat))
    return {"warnings": [n.text for n in notes], "brief_warnings": [n.brief for n in notes if n.brief]}


# A recipe's efficiency parameters as its group names them (`_named`), by the job that fits them and θ's efficiency
# name there (`fit.LAW_TERMS`' keys, as `flat_parameters` names them): the constant model's and the growth model's.
EFFICIENCY_PARAMS = {"const": ("efficiency", {"effN_const": "effN", "effD_const": "effD"}),
                     "growth": ("growth", {"effN": "effN", "effD": "effD", "kappaN": "kappaN", "kappaD": "kappaD"})}
EFFICIENCY_NAMES = frozenset(name for _, params in EFFICIENCY_PARAMS.values() for name in params)


def law_not_identified(group: dict) -> list[str]:
    """A group's (`analyse`'s groups[G]) law parameters the runs do not identify: its `not_identified` but its
    efficiencies', which are against the baseline's law, not its own (whether its own law's frontier is data)."""
    return [k for k in group.get("not_identified", ()) if k not in EFFICIENCY_NAMES]


class Unidentified(NamedTuple):
    """A recipe's efficiency parameters the runs do not identify (`fit.efficiency_identified`), named as its group's
    params, and why: the baseline law's terms they scale that it does not pin, and those of them on a flat direction
    of their own fit."""
    names: tuple[str, ...]
    baseline: str
    terms: tuple[str, ...]  # the baseline law's unpinned parameters they scale (`fit.unpinned_terms`)
    own_flat: tuple[str, ...]  # of `names`, those on a flat direction of their own fit


def _efficiency_unidentified(g: str, base: str, thetas: dict, pts: Points, base_flat: list[str]) -> Unidentified | None:
    """Recipe g's efficiency parameters (constant and growth model, against `base`'s law whose flat parameters are
    `base_flat`) the runs do not identify, and why; None where they identify every one."""
    names, terms, own = [], [], []
    for job, (kind, params) in EFFICIENCY_PARAMS.items():
        flat = flat_parameters(thetas[f"{job}:{g}"], kind, pts)
        for name, eff in params.items():
            if not efficiency_identified(eff, flat, base_flat):
                names.append(name)
                terms += unpinned_terms(eff, base_flat)
                own += [name] if eff in flat else []
    if not names:
        return None
    return Unidentified(tuple(names), base, tuple(p for p in ("A", "B", "alpha", "beta", "gamma") if p in terms),
                        tuple(own))


def _efficiency_warning(name: str, why: Unidentified | None) -> list[Note]:
    """The recipe's efficiencies the runs do not identify: their values and intervals are where the optimiser stopped,
    so `scaling fit`'s and the report's tables print "not identified" for them, the fit warnings saying why here."""
    if why is None:
        return []
    causes, brief = [], []
    if why.terms:
        scale = "it scales, so its value moves" if len(why.names) == 1 else "they scale, so their values move"
        causes.append(f"{why.baseline}'s law does not pin {_and(list(why.terms))}, which {scale} with where that law's "
                      "fit stopped")
        brief.append(f"{why.baseline}'s {_and(list(why.terms))} not pinned")
    for job, model in (("const", "constant"), ("growth", "growth")):
        flat = [n for n in why.own_flat if n in EFFICIENCY_PARAMS[job][1]]
        if flat:
            causes.append(f"{_and(flat)} {'lies' if len(flat) == 1 else 'lie'} on a flat direction of the {model} "
                          "model's fit, which other values fit as well")
    if why.own_flat:
        brief.append("own fit flat")
    pinned_by = {PINNED_BY[k] for k in (*why.terms, *(EFFICIENCY_PARAMS["const"][1].get(n, n) for n in why.names))}
    needs = {part for need in pinned_by for part in need.split(" and ")}  # (gamma's: both)
    are = "is" if len(why.names) == 1 else "are"
    return [Note(f"{name}: its efficiencies {_and(list(why.names))} {are} not identified by these runs: "
                 f"{'; '.join(causes)}; their values (the JSON keeps them) and intervals are where the optimiser "
                 f"stopped, not estimates; more {_and([n for n in NEEDS_ORDER if n in needs])} would pin them",
                 f"efficiencies not identified ({'; '.join(brief)})")]


def warning_lines(out: dict) -> list[str]:
    """A fit's warnings (`scaling fit --json`'s object) for a terminal: a line per group that has any, naming the group
    once and each warning in a few words (`brief_warnings`); fits.json's `warnings` and the report say them in full."""
    return [f"{name}: {'; '.join(g['brief_warnings'])}" for name, g in out["groups"].items() if g["brief_warnings"]]


def _flat_warning(name: str, flat: list[str], pts: Points) -> list[Note]:
    """The law's parameters the data does not identify (`fit.flat_parameters`): their printed values are where
    the optimiser stopped on a flat valley, which float noise moves, and so is the law away from the runs."""
    if not flat:
        return []
    sizes, budgets = _grid(pts)
    grid = f"{count(sizes, 'model size')}, {count(budgets, 'token count')}"
    return [Note(f"{name}: {_and(flat)} {'is' if len(flat) == 1 else 'are'} not identified by these runs ({grid}): other "
                 "values fit them as well (a unit step along the fit's flattest direction moves the fitted log losses by "
                 f"under {FLAT:g}), so the values printed are where the optimiser stopped, which float noise (the rows' "
                 "order, one ulp of a loss) moves, and so does the law away from the runs' sizes and token counts, its "
                 "compute-optimal frontier included; more model sizes or token counts would pin them",
                 f"{_and(flat)} not identified ({grid})")]


def _grid(pts: Points) -> tuple[int, int]:
    """How many distinct model sizes and token counts a group's points have."""
    sizes, budgets = (len(np.unique(np.round(v, 9))) for v in (pts.logN, pts.logD))
    return sizes, budgets


def _and(names: list[str]) -> str:
    """'A', 'A and E', 'A, E and alpha'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _one_ratio_warning(name: str, pts: Points) -> list[Note]:
    """Every point at one tokens-per-parameter ratio: N and D move together, so the law's N and D
    terms (α against β, A against B) cannot be told apart, whatever the fit prints."""
    ratio = pts.logD - pts.logN
    if len(ratio) < 2 or np.ptp(ratio) > 0.01:  # D/N within 1% across the points
        return []
    one = f"{np.exp(ratio.mean()):.3g}"
    return [Note(f"{name}: every point has about one tokens-per-parameter ratio (D/N = {one}), so N and D move together "
                 "and the fit cannot tell alpha from beta nor A from B; add token budgets per size",
                 f"one D/N ratio ({one}): alpha not told from beta")]


# E below this fraction of a group's lowest loss is no floor (`_no_floor_warning`); Epoch's fit of Chinchilla's
# data has E = 1.82 at losses from 2.08.
FLOORLESS = 1e-3


def _no_floor_warning(name: str, params: dict, pts: Points, flat: bool = False) -> list[Note]:
    """E, the irreducible loss, fitted at ~0 (e is unbounded: the demo's bf16 took E = 2.8e-18): the law
    then predicts a loss that falls to 0 with compute, and every extrapolation (compute-optimal frontiers,
    multipliers beyond the data) inherits that; the fit's E and its interval say it, here in words. `flat`: E is
    not identified, so its value (bf16's in the demo: 2.8e-18 from the sweep's table, 7e-90 from
    the same runs in another row order) is noise and is not quoted."""
    lowest = float(np.exp(pts.logL.min()))
    if "E" not in params or not params["E"] < FLOORLESS * lowest:
        return []
    value = "" if flat else f" = {params['E']:.3g}"
    return [Note(f"{name}: E{value}, the irreducible loss, is ~0 (under {FLOORLESS:g} of the lowest loss, "
                 f"{lowest:.4g}): the data puts no floor under the law, and what it predicts beyond the data falls "
                 "toward 0; larger models or more tokens per size (where the loss flattens) would pin E",
                 f"E{value} ~0: no floor under the law")]


# Epoch's start grid places E at most e ≈ 2.7 and LM losses in nats/token stay below ln(vocab) (~12 at
# a 256k vocabulary); far larger losses are in other units, where the starts lie far from the optimum.
LARGEST_NATS = 30.0


def _units_warning(name: str, largest_loss: float) -> list[Note]:
    if largest_loss <= LARGEST_NATS:
        return []
    return [Note(f"{name}: losses reach {largest_loss:.4g}, not nats per token (the fit's starts assume at most "
                 f"~{LARGEST_NATS:g}); its optimiser may stop far from the best law: give the losses in nats per token",
                 f"losses reach {largest_loss:.4g}: not nats per token?")]


# The smallest counts a real run has (a 0.5M-parameter model; a few batches of tokens): a table whose
# largest N or D is below them gives them in other units (millions of parameters, billions of tokens).
SMALLEST_COUNTS = {"N": 1e4, "D": 1e3}


def _count_units_warning(name: str, pts: Points) -> list[Note]:
    """N or D in millions or billions fit the same α, β and E, but A, B, the compute C = 6·N·D and
    every compute the report names are then in those units: said, not guessed at."""
    largest = {"N": float(np.exp(pts.logN.max())), "D": float(np.exp(pts.logD.max()))}
    notes = []
    for k, v in largest.items():
        if v < SMALLEST_COUNTS[k]:
            what = "parameters" if k == "N" else "tokens"
            notes.append(Note(f"{name}: {k} reaches only {v:.4g}, not a count of {what}: in millions or billions? The "
                              f"exponents and E are the same in any unit, but {'A' if k == 'N' else 'B'} and every compute "
                              f"(C = 6·N·D) are in the table's; give {k} as a count (e.g. 7e7, not 70)",
                              f"{k} reaches only {v:.4g}: not a count of {what}?"))
    return notes


# Tokens per parameter no real run is outside (the demo's micro models see 0.004 to 0.07; Qwen3-0.6B's
# 36T tokens are 6e4): N in millions beside D in tokens gives ~1e7, D in millions beside N in counts ~1e-5.
TOKENS_PER_PARAMETER = (1e-3, 1e5)


def _ratio_units_warning(name: str, pts: Points) -> list[Note]:
    """N and D in different units, each past SMALLEST_COUNTS: a study up to 16B parameters in millions reaches
    16,000, so only D/N tells (Chinchilla's data so given fitted A = 3.9 for 477.8, every compute 10^6 off)."""
    ratio = float(np.exp(np.median(pts.logD - pts.logN)))
    lo, hi = TOKENS_PER_PARAMETER
    if lo <= ratio <= hi:
        return []
    guess = "N in millions or billions" if ratio > hi else "D in millions or billions"
    # A column of FLOPs read as D (--columns D=FLOP) gives D/N = 6·tokens, ~1e10: no unit fixes that, the law is wrong.
    flops = (" Or is D a compute in FLOP (6·N·tokens), not tokens? Then map that column as C (--columns C=NAME): "
             "a law in FLOP where it wants tokens is another law." if ratio > hi else "")
    return [Note(f"{name}: its median D/N is {ratio:.3g} tokens per parameter, outside any real run's ({lo:g} to "
                 f"{hi:g}): {guess}? The exponents and E are the same in any unit, but A, B and every compute (C = 6·N·D) "
                 f"are not; give N and D as counts.{flops}",
                 f"median D/N {ratio:.3g} tokens per parameter: {guess}{' or D in FLOP' if flops else ''}?")]


def fit_and_judge(table: pl.DataFrame | str | Path, *, law: str, baseline: str | None, bootstrap: int, seed: int,
                  workers: int, top: int | None, margin: float = penalty.MARGIN, extrapolate: float = EXTRAPOLATE,
                  with_penalty: bool, progress: Progress | None = None, absent: dict[str, str] | None = None,
                  shared_efficiencies: bool = False, formats: dict[str, tuple[str, str]] | None = None) -> dict:
    """What `analyse` (with_penalty) and `fit_law` (without) return, with the fit's and bootstrap's
    seconds under "timing". `absent`: where `table` was read already, the recipes its reading dropped
    whole (`fits.table.never_completed` of the raw table), named among the skipped."""
    with single_threaded_blas():  # forked bootstrap workers inherit the setting
        return _fit_and_judge(table, law, baseline, bootstrap, seed, workers, top, margin, extrapolate,
                              with_penalty, progress, absent or {}, shared_efficiencies, formats)


class _Prepared(NamedTuple):
    """What a fit works on, once its arguments and table are checked (`_prepare`): the validated table, the groups to
    fit and the skipped ones (why each), the never-completed recipes (why each), the baseline fitted against (None:
    none), the jobs (`_plan`), and the shared-efficiency design (None: not asked for)."""
    table: pl.DataFrame
    groups: dict[str, Points]
    skipped: dict[str, str]
    never: dict[str, str]
    base: str | None
    jobs: dict[str, tuple]
    design: "shared.Design | None"


def _prepare(table, law: str, baseline: str | None, with_penalty: bool, absent: dict[str, str],
             shared_efficiencies: bool = False, formats: dict[str, tuple[str, str]] | None = None) -> _Prepared:
    """Everything `fit_and_judge` refuses before its first fit (an unknown law, a baseline with no completed run, a
    group that cannot be fitted and cannot be left out, a shared fit without a baseline or with an unknown format),
    refused in seconds, and what the fits then work on."""
    if law not in LAWS:
        raise UserError(f"unknown law {law!r}; choose one of {', '.join(LAWS)}")
    where = None if isinstance(table, pl.DataFrame) else table
    raw = table if where is None else read_file(Path(table))
    never = {**never_completed(raw), **absent}  # the recipes read_table drops whole: named among the skipped
    table = read_table(raw, where=where)  # validates a DataFrame too (cheap, and idempotent on its own output)
    groups = _points(table)
    # A multi-recipe table whose baseline never completed is one too, though one recipe is left to fit
    # (counting the completed ones only, a two-recipe table fitted its other recipe alone and exited 0).
    if with_penalty and len({*groups, *never}) > 1 and baseline not in groups:
        where_not = (f"has no completed run in the table ({never[baseline][len(baseline) + 2:]})" if baseline in never
                     else "is not in the table")
        raise UserError(f"baseline recipe {baseline!r} {where_not}; the recipes with completed runs: "
                        f"{', '.join(groups)}; pass --baseline NAME with one of them")
    groups, skipped = _fittable(groups, law, baseline if with_penalty else None)
    base = baseline if with_penalty and len(groups) > 1 else None
    jobs = _plan(groups, law, base)
    design = _shared_design(groups, base, raw, formats) if shared_efficiencies else None
    return _Prepared(table, groups, skipped, never, base, jobs, design)


def check_source(raw: pl.DataFrame, table: pl.DataFrame, columns: dict[str, str] | str | None = None, *,
                 law: str, baseline: str, shared_efficiencies: bool = False) -> None:
    """Refuse, before any fitting, what `analyse_source` of the same arguments would refuse before its first fit
    (`_prepare`): `scaling fit` and `scaling report` call it before they say they are fitting, so a --baseline no run
    has (a typo) is refused at once, not after the stage's line."""
    formats, absent = _source_inputs(raw, columns, shared_efficiencies, None)
    _prepare(table, law, baseline, True, absent, shared_efficiencies, formats)


def _source_inputs(raw: pl.DataFrame, columns, shared_efficiencies: bool, formats) -> tuple[dict | None, dict]:
    """What `analyse` takes that only the table as given can say: each recipe's formats (where the shared
    efficiencies are fitted and none were given: the table's columns) and the recipes none of whose runs completed."""
    if shared_efficiencies and formats is None:
        formats = shared.table_formats(raw, columns)
    return formats, never_completed(raw, columns)


def _fit_and_judge(table, law, baseline, bootstrap, seed, workers, top, margin, extrapolate, with_penalty, progress,
                   absent, shared_efficiencies=False, formats=None):
    table, groups, skipped, never, base, jobs, design = _prepare(table, law, baseline, with_penalty, absent,
                                                                 shared_efficiencies, formats)
    t0 = time.perf_counter()
    thetas, objectives, starts = _fit_full(groups, jobs, top, workers)
    ctx = {"groups": groups, "jobs": jobs, "thetas": thetas, "starts": starts, "seed": seed,
           "pairing": pairing(table, groups)}
    if design is not None:
        const = {r: thetas[f"const:{r}"] for r in design.recipes}
        shared_fit = shared.fit_shared(thetas[f"law:{base}"], design, shared.shared_starts(design, const))
        if shared_fit is None:
            raise UserError("the shared-efficiency fit failed from every start; check the data for outliers")
        ctx["shared"] = (design, shared_fit.theta, f"law:{base}")
    t1 = time.perf_counter()
    reps = parallel_map(_replicate, ctx, list(range(bootstrap)), workers, progress) if bootstrap else []
    timing = {"fit_s": t1 - t0, "bootstrap_s": time.perf_counter() - t1, "workers": workers}

    out_groups = {}
    ok = [r for r in reps if all(np.isfinite(r[k]).all() for k in jobs)]  # (the shared fit's failures aside)
    # each group's law's flat parameters: its own law's, else (quartet) the baseline's, which it shares
    law_flat = {g: flat_parameters(thetas[f"law:{g}"], law, pts) for g, pts in groups.items() if f"law:{g}" in jobs}
    for g, pts in groups.items():
        params = _named(thetas, g, pts, law, jobs, base)
        ci = _param_ci([_named(r, g, pts, law, jobs, base) for r in ok])
        objective = objectives[f"law:{g}"] if f"law:{g}" in jobs else objectives[f"const:{g}"]
        efficiency = (_efficiency_unidentified(g, base, thetas, pts, law_flat[base]) if f"const:{g}" in jobs
                      else None)  # (against the baseline's law, whose flat terms they inherit)
        out_groups[g] = _group_entry(g, pts, params, ci, objective, law_flat.get(g, law_flat.get(base)), efficiency)

    result = {"law": law, "baseline": base, "groups": out_groups, "penalty": {}, "bands": {},
              "skipped": {**skipped, **never}, "bootstrap": bootstrap, "seed": seed,
              "twins": twin_configurations(ctx["pairing"])}
    tests = _tests(law, groups, base, thetas, [g for g in groups if f"growth:{g}" in jobs])
    for r, test in tests.items():
        result["penalty"][r], result["bands"][r] = _penalty(r, groups, law, thetas, reps, base, extrapolate, test,
                                                              law_flat[base])
    result["penalty"] = _judged(result["penalty"], margin)
    if design is not None:
        separate = {r: objectives[f"const:{r}"] for r in design.recipes}
        own_residuals = np.concatenate([log_predict(thetas[f"const:{r}"], groups[r].logN, groups[r].logD, groups[r].logN0,
                                                    groups[r].logD0) - groups[r].logL for r in design.recipes])
        result["shared_efficiencies"] = shared.summarise(
            design, thetas[f"law:{base}"], shared_fit, [rep["shared"] for rep in reps], out_groups, separate,
            law_flat[base],
            {r: flat_parameters(thetas[f"const:{r}"], "efficiency", groups[r]) for r in design.recipes},
            {r: [rep[f"const:{r}"] for rep in reps] for r in design.recipes},
            shared.consistency_tests(thetas[f"law:{base}"], design, shared_fit),
            shared.sharing_test(design, shared_fit, float(sum(separate.values())), own_residuals))
    result["timing"] = {**timing, "total_s": time.perf_counter() - t0}
    return result


def _shared_design(groups: dict[str, Points], base: str | None, raw: pl.DataFrame,
                   formats: dict[str, tuple[str, str]] | None) -> "shared.Design":
    """The shared-efficiency fit of the fitted recipes (`fits.shared`): their formats from `formats`, else the table's
    columns, else their presets'. UserError where there is no baseline and other recipe to fit, or a format is
    unknown."""
    if base is None:
        raise UserError("shared efficiencies need a baseline and at least one other recipe fitted against it; "
                        f"the recipes fitted: {', '.join(groups)}")
    given = shared.table_formats(raw) if formats is None else formats
    return shared.design(groups, base, shared.recipe_formats(list(groups), given))


def _tests(law: str, groups: dict[str, Points], base: str, thetas: dict, judged: list[str]) -> dict[str, tuple]:
    """Per judged recipe, the likelihood-ratio test of kappaN = kappaD = 0: (statistic, raw p)."""
    return {r: _lr_test(law, groups[base], groups[r], thetas[f"const:{r}"], thetas[f"growth:{r}"]) for r in judged}


def _judged(penalties: dict[str, dict], margin: float) -> dict[str, dict]:
    """The penalty entries with their verdicts, `p_adjusted` and `family`. The recipes of one analysis are judged
    together, so their verdicts read p Holm-adjusted over them (penalty.holm: each at 0.05 alone, five would give a
    false "grows" somewhere ~23% of the time under the null). The family is the tests performed and reported: the
    recipes whose penalty the runs identify and whose p is finite. An unidentified one's p is no p-value (at a bound
    or on a flat direction the chi-square reference does not hold; every table prints "not identified" for it) and
    its verdict is inconclusive whatever it is: counted, it only made the others' adjusted p's larger (two recipes,
    one unidentified, doubled the other's). Its `p_adjusted` is NaN (JSON null): it was not adjusted."""
    tested = {r: pen["p_value"] for r, pen in penalties.items() if pen["identified"] and np.isfinite(pen["p_value"])}
    adjusted = penalty.holm(tested)
    out = {}
    for r, pen in penalties.items():
        p_adjusted = adjusted.get(r, float("nan"))
        ratio_ci = tuple(pen["ratio_per_decade"]["ci95"])
        out[r] = {"verdict": penalty.verdict(p_adjusted, ratio_ci, margin, pen["n_replicates"],
                                             identified=pen["identified"]),
                  **pen, "p_adjusted": p_adjusted, "family": len(tested),  # Holm over the tested recipes (`tested`)
                  "margin": margin, "rule": penalty.rule_text(margin)}
    return out


def _penalty(r, groups, law, thetas, reps, base, extrapolate, test, base_flat):
    """Recipe r's penalty entry (its verdict, adjusted p and family to come: `_judged`) and bands; `test` = (LR
    statistic, raw p)."""
    pts = groups[r]
    C = 6 * np.exp(pts.logN + pts.logD)
    c_lo, c_hi = float(C.min()), float(C.max())
    logC = np.linspace(np.log(c_lo), np.log(c_hi * extrapolate), GRID_POINTS)
    marks = np.log([c_lo, c_hi, c_hi * extrapolate])
    bkey, gkey = f"law:{base}", f"growth:{r}"

    def curves(th, lc):
        return penalty.curves(th[bkey], th[gkey], lc, pts.logN0, pts.logD0)

    point, point_marks = curves(thetas, logC), curves(thetas, marks)
    ok = [rep for rep in reps if np.isfinite(rep[bkey]).all() and np.isfinite(rep[gkey]).all()]
    boot = [curves(rep, logC) for rep in ok]
    boot_marks = [curves(rep, marks) for rep in ok]
    ratio_ci = percentile_ci(np.array([b["ratio_per_decade"] for b in boot]))

    stat, p_value = test
    kN = np.array([rep[gkey][IDX["kappaN"]] for rep in ok])
    kD = np.array([rep[gkey][IDX["kappaD"]] for rep in ok])

    def at_marks(name):
        return {"C": [c_lo, c_hi, c_hi * extrapolate], "where": ["data min", "data max", f"{extrapolate:g}x data max"],
                "value": point_marks[name].tolist(),
                "ci95": [list(percentile_ci(np.array([b[name][j] for b in boot_marks]))) for j in range(3)]}

    def band(name):
        stack = np.array([b[name] for b in boot]) if boot else np.full((1, len(logC)), np.nan)
        with np.errstate(all="ignore"):
            lo, med, hi = (np.nanpercentile(stack, q, axis=0) if boot else stack[0] for q in (2.5, 50, 97.5))
        return {"value": point[name].tolist(), "median": med.tolist(), "lo": lo.tolist(), "hi": hi.tolist()}

    multiplier = at_marks("multiplier")
    causes = _identification(r, base, pts, groups[base], base_flat, law, thetas, reps, ok, multiplier["ci95"], ratio_ci)
    unidentified = [c.text for c in causes]
    entry = {
        "undecidable": penalty.undecidable(ratio_ci, len(ok)) if reps else penalty.NO_BOOTSTRAP,
        "identified": not unidentified,  # False: the numbers below are where the optimiser stopped, not estimates
        "unidentified": unidentified,  # why, a sentence per cause, each saying what runs would pin it
        "unidentified_brief": unidentified_brief(causes),  # the same in one short line (a terminal's), or None
        "multiplier": multiplier,
        "gap": at_marks("gap"),
        "p_value": p_value,
        "lr_stat": stat, "lr_df": 2,
        "ratio_per_decade": {"value": point["ratio_per_decade"], "ci95": list(ratio_ci)},
        "kappaN": {"value": float(thetas[gkey][IDX["kappaN"]]), "ci95": list(percentile_ci(kN))},
        "kappaD": {"value": float(thetas[gkey][IDX["kappaD"]]), "ci95": list(percentile_ci(kD))},
        "n_replicates": len(ok),
    }
    bands = {"C": np.exp(logC).tolist(), "in_data": (np.exp(logC) <= c_hi * (1 + 1e-9)).tolist(),
             "multiplier": band("multiplier"), "gap": band("gap"), "loss_baseline": band("loss_baseline")}
    return entry, bands


# A multiplier interval's end this far from 1 either way (compute worth 10^12 times more or less than the baseline's)
# is no estimate from runs: it comes from replicates on laws the runs do not pin, whose compute-optimal frontier under-
# or overflows (the demo's mxfp4: [1.5e-19, 6.6e+110] at its smallest compute; nvfp4's lower end 2.5e-314).
DEGENERATE = 1e12
# Which runs pin a parameter: the N term's by more model sizes, the D term's by more token counts per size.
PINNED_BY = {"A": "model sizes", "alpha": "model sizes", "effN": "model sizes", "kappaN": "model sizes",
             "B": "token counts per size", "beta": "token counts per size", "effD": "token counts per size",
             "kappaD": "token counts per size", "gamma": "model sizes and token counts per size"}


class Cause(NamedTuple):
    """Why the runs do not identify a penalty, one cause: its sentence (fits.json's `unidentified`, the report's
    verdict), a few words of it (`unidentified_brief`), and the runs that would pin it (PINNED_BY's words)."""
    text: str
    brief: str
    needs: tuple[str, ...]


def _identification(r: str, base: str, pts: Points, base_pts: Points, base_flat: list[str], law: str, thetas: dict,
                    reps: list[dict], ok: list[dict], multiplier_ci: list, ratio_ci: tuple[float, float]) -> list[Cause]:
    """Why these runs do not identify recipe r's penalty against `base`, a cause each, whose sentence ends with what
    would pin it; [] where they do. The penalty is read along the baseline law's compute-optimal frontier with the
    recipe's efficiencies on it, so it needs both pinned: no flat direction (`fit.flat_parameters`; the baseline's
    E aside, which the multiplier and the gap do not depend on), no estimate or 95% interval end at an optimiser
    bound (the bound's value, not the data's), and a bootstrap whose replicates fit and stay finite. `base_flat`: the
    baseline law's flat parameters (its group's `not_identified`)."""
    bkey, gkey = f"law:{base}", f"growth:{r}"
    # E aside, said where the fit warnings name it among the law's (so the two lists read as one)
    aside = E_CANCELS if "E" in base_flat else ""
    base_flat = [k for k in base_flat if k != "E"]
    causes = []
    for whose, key, kind, flat, own, why in ((f"{base}'s law, along whose compute-optimal frontier every multiplier is "
                                              "read", bkey, law, base_flat, base_pts, aside),
                                             (f"{r}'s efficiencies against it", gkey, "growth",
                                              flat_parameters(thetas[gkey], "growth", pts), pts, "")):
        problems, names = _unpinned(flat, thetas[key], [rep[key] for rep in ok], kind, own, why)
        if problems:
            holder = base if key == bkey else r
            needs = sorted({PINNED_BY[k] for k in names}, key=len)
            causes.append(Cause(f"{whose}: {'; '.join(problems)}; more {holder} {' and '.join(needs)} would pin "
                                f"{'it' if len(names) == 1 else 'them'}",
                                f"{holder}'s {'law' if key == bkey else 'efficiencies'}: {_and(names)} not pinned",
                                tuple(needs)))
    failed = len(reps) - len(ok)
    if failed > 0.025 * len(reps):  # more than one tail of the interval: what it leaves out could be either end
        causes.append(Cause(f"{failed} of {len(reps)} bootstrap replicates' fits failed, more than the 2.5% beyond either "
                            "end of a 95% interval, so it does not say where the penalty lies; more runs would steady them",
                            f"{failed} of {len(reps)} bootstrap fits failed", ("runs",)))
    ends = np.array([e for pair in (*multiplier_ci, ratio_ci) for e in pair], float)
    ends = ends[np.isfinite(ends)]
    if len(ends) and (ends.min() < 1 / DEGENERATE or ends.max() > DEGENERATE):
        causes.append(Cause(f"the bootstrap intervals of the multiplier reach {ends.min():.3g} to {ends.max():.3g}, beyond "
                            f"{1 / DEGENERATE:g} to {DEGENERATE:g}: replicates on laws the runs do not pin, whose frontiers "
                            "under- or overflow, not an interval of the data; more model sizes and token counts would pin "
                            "them", f"bootstrap multipliers reach {ends.min():.2g} to {ends.max():.2g}",
                            ("model sizes", "token counts per size")))
    return causes


NEEDS_ORDER = ("runs", "model sizes", "token counts per size")


def unidentified_brief(causes: list[Cause]) -> str | None:
    """The causes in one short line for a terminal ("not identified by these runs (...): more model sizes would pin
    it"), each in its few words and the runs that would pin them said once; None where there is none."""
    if not causes:
        return None
    needs = {part for c in causes for need in c.needs for part in need.split(" and ")}  # (gamma's: both)
    return (f"not identified by these runs ({'; '.join(c.brief for c in causes)}): more "
            f"{_and([n for n in NEEDS_ORDER if n in needs])} would pin it")


# Why the baseline law's E, which the fit warnings name among its not-identified parameters, is no cause of a penalty's.
E_CANCELS = " (so is E, but it cancels from the multiplier and the gap)"


def _unpinned(flat: list[str], theta: np.ndarray, replicates: list[np.ndarray], kind: str,
              pts: Points, aside: str = "") -> tuple[list[str], list[str]]:
    """What about one fit's parameters the runs do not pin, in words, and those parameters' names: the flat
    ones, and each bounded one whose estimate or 95% bootstrap interval end is at its bound. `aside`: words after the
    flat ones' sentence (E_CANCELS)."""
    problems, names = [], list(flat)
    if flat:
        sizes, budgets = _grid(pts)
        problems.append(f"{_and(flat)} {'is' if len(flat) == 1 else 'are'} not identified by its {count(sizes, 'model size')} "
                        f"and {count(budgets, 'token count')}, which other values fit as well{aside}")
    for k in (THETA[i] for i in FREE[kind] if i in BOUNDS):
        bounds = at_bound(theta[IDX[k]], k)
        if bounds:
            problems.append(f"{k} = {theta[IDX[k]]:.4g} is at its bound [{bounds[0]:g}, {bounds[1]:g}]")
        reached = [e for e in percentile_ci(np.array([rep[IDX[k]] for rep in replicates])) if at_bound(e, k)]
        if reached:
            problems.append(f"{k}'s 95% bootstrap interval ends at its {'bounds' if len(reached) == 2 else 'bound'} "
                            f"({' and '.join(f'{e:g}' for e in reached)}), not at a value of the data")
        if (bounds or reached) and k not in names:
            names.append(k)
    return problems, names


LARGE_TABLE = 20_000  # points: about 10 s of full fit on 2 cores, before the bootstrap's first progress line


def size_notice(points: int) -> str | None:
    """A line to print before fitting a large table, else None. The full fit shows no progress and its time
    grows with the points (a 300,000-point CSV sat silent for ~4 min on 2 cores before its first line)."""
    if points < LARGE_TABLE:
        return None
    return (f"fitting {points:,} points: the full fit alone takes minutes at this size (its time grows with the "
            "points) and shows no progress; every bootstrap replicate refits them")


class BootstrapProgress:
    """Bootstrap progress on stderr, as `analyse(progress=)` reports it: 'bootstrap 120/400; 38 s left' (replicates
    cost about the same each, so the time left is the pace so far), one updating line on a terminal, a line per tenth
    of the way in a log, led there by its UTC time (`scaling.console.stamped`) as train's lines are. One per fit (it
    remembers the last tenth shown, and the pace from its first call)."""

    def __init__(self, indent: str = "", clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.indent, self.shown, self.clock, self.wall_clock = indent, -1, clock, wall_clock
        self.origin: tuple[int, float] | None = None  # (replicates done, clock) at the first call: the pace's start

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        self.origin = self.origin or (done, now)
        left = time_left(done - self.origin[0], total - done, now - self.origin[1]) if done < total else ""
        line = f"{self.indent}bootstrap {done}/{total}{left}"
        if sys.stderr.isatty():
            print(f"\r{line}\x1b[K", end="\n" if done == total else "", file=sys.stderr, flush=True)
        elif done * 10 // total > self.shown:
            self.shown = done * 10 // total
            print(stamped(line, self.wall_clock()), file=sys.stderr, flush=True)


def analyse(table: pl.DataFrame | str | Path, law: str = "chinchilla", baseline: str = "bf16", bootstrap: int = 1000,
            seed: int = 0, workers: int = 2, top: int | None = 50, margin: float = penalty.MARGIN,
            extrapolate: float = EXTRAPOLATE, progress: Progress | None = None,
            absent: dict[str, str] | None = None, shared_efficiencies: bool = False,
            formats: dict[str, tuple[str, str]] | None = None) -> dict:
    """Laws per group, bootstrap intervals and, per recipe against `baseline`, the penalty verdict.

    table: a validated table (fits.read_table) or a path. Returns the `scaling fit --json` object plus
    "bands" (per recipe: compute grid C, in_data flags, multiplier/gap/loss_baseline value, median, lo, hi).
    top: grid starts that get an L-BFGS-B run (the best `top` of the grid by objective; None = all 4,500).
    absent: for a validated table, the recipes none of whose runs completed (`fits.table.never_completed`
    of the table as read): skipped with why, and named if one is the baseline.
    shared_efficiencies: also fit effN per forward format and effD per backward format, shared by the recipes
    (`fits.shared`; the result's "shared_efficiencies"). formats: recipe -> (forward, backward) format where the
    table passed does not give them (`fits.shared.table_formats` of the table as read); presets' fill the rest.
    """
    return fit_and_judge(table, law=law, baseline=baseline, bootstrap=bootstrap, seed=seed, workers=workers, top=top,
                         margin=margin, extrapolate=extrapolate, with_penalty=True, progress=progress, absent=absent,
                         shared_efficiencies=shared_efficiencies, formats=formats)


def shared_efficiencies(table: pl.DataFrame | str | Path, law: str = "quartet", baseline: str = "bf16",
                        bootstrap: int = 1000, seed: int = 0, workers: int = 2, top: int | None = 50,
                        formats: dict[str, tuple[str, str]] | None = None, progress: Progress | None = None) -> dict:
    """Efficiencies shared across recipes by format (the Quartet paper's v1 law; docs/fits.md, "Shared
    efficiencies"): `analyse(..., shared_efficiencies=True)["shared_efficiencies"]`, the same replicates."""
    return analyse(table, law=law, baseline=baseline, bootstrap=bootstrap, seed=seed, workers=workers, top=top,
                   progress=progress, shared_efficiencies=True, formats=formats)["shared_efficiencies"]


def analyse_source(raw: pl.DataFrame, table: pl.DataFrame, columns: dict[str, str] | str | None = None,
                   **kwargs) -> dict:
    """The `scaling fit --json` object, which the report writes as its fits.json: `analyse` of `table` (`read_table`
    of `raw`, under `columns`) with what only the table as given can say: the recipes none of whose runs
    completed (`absent`), the rows set aside as no points (`set_aside_note`: a sweep's diverged runs) and which
    lr_mult an LR sweep's points took (`learning_rate_note`). kwargs: `analyse`'s."""
    kwargs["formats"], absent = _source_inputs(raw, columns, kwargs.get("shared_efficiencies", False),
                                               kwargs.get("formats"))
    out = analyse(table, absent=absent, **kwargs)
    out["set_aside_note"] = set_aside_note(raw, columns)
    out["learning_rate_note"] = learning_rate_note(raw, columns)
    return out


def fit_law(table: pl.DataFrame | str | Path, law: str = "chinchilla", by: str = "recipe", bootstrap: int = 0,
            seed: int = 0, workers: int = 2, top: int | None = 50, progress: Progress | None = None) -> dict:
    """Independent fits of `law` to each group of the table: {name: group entry} as in analyse()["groups"]."""
    if by != "recipe":
        if not isinstance(table, pl.DataFrame):  # a file: its columns are known once it is read
            table = read_file(Path(table))
        if by not in table.columns:
            raise UserError(f"cannot group by {by!r}: not a column of the table")
        table = table.with_columns(recipe=pl.col(by).cast(pl.Utf8))
    return fit_and_judge(table, law=law, baseline=None, bootstrap=bootstrap, seed=seed, workers=workers, top=top,
                         with_penalty=False, progress=progress)["groups"]
