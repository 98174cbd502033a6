"""Efficiencies shared across recipes by format (the Quartet paper's v1 law): one parameter efficiency effN per forward
format and one data efficiency effD per backward format, fitted jointly on every non-baseline recipe's points with the
baseline's law held fixed (κ = 0), and checked against each recipe's own constant efficiencies. docs/fits.md,
"Shared efficiencies (Quartet v1)".

A recipe's forward format is what its fprop GEMM's operands are, its backward format what its dgrad and wgrad GEMMs'
are. Where they come from: a table's `forward_format` and `backward_format` columns (any strings, `scaling sweep
collect` writes them), else a preset's (`scaling.recipes`, as `scaling recipes` describes each GEMM). The baseline's
formats are the reference: a recipe sharing one has that efficiency exactly 1, not fitted.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl

from fits import penalty
from fits.fit import (Fit, Objective, Points, best_fit, efficiency_identified, flat_columns, huber, lbfgsb,
                      percentile_ci, unpinned_terms)
from fits.laws import IDX, log_predict_scaled, scaled_logs
from fits.table import parse_columns, pick_column
from scaling.errors import UserError
from scaling.recipes import FORMAT_COLUMNS

EFFICIENCY_OF = {"forward": "effN", "backward": "effD"}
GRID = (0.0, -0.5, -1.0)  # log efficiencies of the starts' grid, as `fit.efficiency_starts`


def table_formats(raw: pl.DataFrame, columns: dict[str, str] | str | None = None) -> dict[str, tuple[str, str]]:
    """Each recipe's (forward, backward) format as a table's `forward_format` and `backward_format` columns give them
    (a recipe whose cells are all blank is left out: its formats are a preset's); {} for a table without them.
    `columns`: `--columns`' map (the recipe's column). UserError for one column without the other, or a recipe
    given two formats of a kind."""
    present = [c for c in FORMAT_COLUMNS if c in raw.columns]
    if not present:
        return {}
    if len(present) == 1:
        other = next(c for c in FORMAT_COLUMNS if c not in present)
        raise UserError(f"the table has a {present[0]!r} column but no {other!r}; add it (each recipe's "
                        f"{other.split('_')[0]} format), or remove {present[0]!r} to take the presets' formats")
    recipe = pick_column(raw, "recipe", parse_columns(columns))
    names = raw[recipe].cast(pl.Utf8) if recipe else pl.Series(["all"] * raw.height)
    text = {c: pl.col(c).cast(pl.Utf8).str.strip_chars() for c in FORMAT_COLUMNS}
    cells = raw.select(pl.Series("recipe", names), *(pl.when(t == "").then(None).otherwise(t).alias(c)
                                                     for c, t in text.items()))
    out = {}
    for (name,), rows in cells.group_by("recipe", maintain_order=True):
        said = [rows[c].drop_nulls().unique(maintain_order=True).to_list() for c in FORMAT_COLUMNS]
        for column, values in zip(FORMAT_COLUMNS, said):
            if len(values) > 1:
                raise UserError(f"recipe {name!r} has {len(values)} different {column} values ({values[0]!r} and "
                                f"{values[1]!r}); a recipe has one: correct its rows")
        if all(said):
            out[str(name)] = (said[0][0], said[1][0])
        elif any(said):
            given, blank = FORMAT_COLUMNS if said[0] else FORMAT_COLUMNS[::-1]
            raise UserError(f"recipe {name!r} has a {given} but a blank {blank}; fill it in")
    return out


def recipe_formats(recipes: list[str], given: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """(forward, backward) format of each recipe: `given`'s (a table's columns), else its preset's. One UserError
    naming every recipe that has neither, with the fix."""
    from scaling.recipes import PRESETS

    out, unknown = {}, []
    for r in recipes:
        if r in given:
            out[r] = given[r]
        elif r in PRESETS:
            out[r] = (PRESETS[r].forward_format, PRESETS[r].backward_format)
        else:
            unknown.append(r)
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise UserError(f"the formats of recipe{'s' if len(unknown) > 1 else ''} {names} are not known: not a preset "
                        "(`scaling recipes` lists them) and not given by the table; add columns forward_format (what "
                        "its fprop GEMM's operands are, e.g. \"mxfp4\") and backward_format (its dgrad and wgrad "
                        "operands'), one value per recipe, the same text for recipes that share a format "
                        "(`scaling sweep collect` writes them; docs/fits.md, Shared efficiencies)")
    return out


@dataclass(frozen=True)
class Design:
    """The joint fit's points and parameters: every judged recipe's points in one set; x holds log effN of each of
    `forward` and then log effD of each of `backward` (the formats fitted, first seen first). `fwd`, `bwd`: each
    point's format's position in x's half, or the half's length for the baseline's format (log efficiency 0)."""

    recipes: tuple[str, ...]
    formats: dict[str, tuple[str, str]]
    reference: tuple[str, str]  # the baseline's (forward, backward) formats: efficiency 1
    forward: tuple[str, ...]
    backward: tuple[str, ...]
    pts: Points
    fwd: np.ndarray
    bwd: np.ndarray
    owner: np.ndarray  # each point's recipe, its position in `recipes`

    @property
    def names(self) -> list[str]:
        """x's entries in words: 'effN of FORMAT', 'effD of FORMAT'."""
        return [f"effN of {f}" for f in self.forward] + [f"effD of {f}" for f in self.backward]

    def position(self, k: int, fmt: str) -> int | None:
        """The entry of x holding format `fmt`'s efficiency of kind k (0 effN, 1 effD); None for the baseline's format
        (efficiency 1, not fitted)."""
        if fmt == self.reference[k]:
            return None
        return self.forward.index(fmt) if k == 0 else len(self.forward) + self.backward.index(fmt)


def design(groups: dict[str, Points], base: str, formats: dict[str, tuple[str, str]]) -> Design:
    """The shared fit of `groups`' recipes but `base`, whose formats (`formats[base]`) are the reference."""
    recipes = tuple(g for g in groups if g != base)
    reference = formats[base]
    kinds = []
    for k in (0, 1):  # forward, backward
        fitted = tuple(dict.fromkeys(formats[r][k] for r in recipes if formats[r][k] != reference[k]))
        position = {f: i for i, f in enumerate(fitted)}
        index = np.concatenate([np.full(len(groups[r].logL), position.get(formats[r][k], len(fitted)))
                                for r in recipes])
        kinds.append((fitted, index))
    cat = np.concatenate
    offsets = np.cumsum([0] + [groups[r].n_runs for r in recipes])
    pts = Points(cat([groups[r].logN for r in recipes]), cat([groups[r].logD for r in recipes]),
                 cat([groups[r].logL for r in recipes]), cat([groups[r].runs + o for r, o in zip(recipes, offsets)]))
    owner = np.concatenate([np.full(len(groups[r].logL), i) for i, r in enumerate(recipes)])
    return Design(recipes, {r: formats[r] for r in (base, *recipes)}, reference, kinds[0][0], kinds[1][0], pts,
                  kinds[0][1], kinds[1][1], owner)


def split(d: Design, recipe: str, k: int) -> Design | None:
    """d with `recipe`'s format of kind k (0 forward, 1 backward) its own: one parameter more, the alternative of
    `consistency_test`. None where that format is the recipe's alone already (nothing shared to test)."""
    fmt = d.formats[recipe][k]
    if fmt != d.reference[k] and sum(d.formats[r][k] == fmt for r in d.recipes) == 1:
        return None
    own = f"{fmt} ({recipe}'s own)"
    fitted = (d.forward, d.backward)[k]
    index = np.where((d.fwd, d.bwd)[k] == len(fitted), len(fitted) + 1, (d.fwd, d.bwd)[k])  # (the reference's slot)
    index[d.owner == d.recipes.index(recipe)] = len(fitted)
    formats = {**d.formats, recipe: (own, d.formats[recipe][1]) if k == 0 else (d.formats[recipe][0], own)}
    if k == 0:
        return dataclasses.replace(d, formats=formats, forward=(*fitted, own), fwd=index)
    return dataclasses.replace(d, formats=formats, backward=(*fitted, own), bwd=index)


def consistency_test(law: np.ndarray, d: Design, fit: Fit, recipe: str, k: int) -> tuple[float, float] | None:
    """Test that `recipe`'s efficiency of kind k (0 effN, 1 effD) is its format's shared one: the shared fit `fit`
    (the null) against `split`'s, which gives the recipe its own (started from the null's optimum, so it fits no
    worse); (statistic, p) of Ronchetti's drop-in-dispersion test for the Huber fits (`penalty.lr_test`, df 1), as
    the κ = 0 test, with the baseline's law held fixed in both: its error moves every recipe of a format alike, so a
    recipe's departure from the others' is not confounded with it. None where there is nothing to test (`split`)."""
    alt_design = split(d, recipe, k)
    if alt_design is None:
        return None
    j, nf = d.position(k, d.formats[recipe][k]), len(d.forward)
    start = 0.0 if j is None else float(fit.theta[j])
    x0 = np.concatenate([fit.theta[:nf], [start], fit.theta[nf:]]) if k == 0 else np.append(fit.theta, start)
    alt = fit_shared(law, alt_design, x0[None])
    if alt is None:
        return float("nan"), float("nan")
    pred, _ = SharedObjective(law, alt_design).rows(alt.theta)
    return penalty.lr_test(fit.objective, min(alt.objective, fit.objective), pred - alt_design.pts.logL,
                           alt_design.pts.n_runs, len(alt_design.names), df=1)


def sharing_test(d: Design, fit: Fit, separate: float, residuals: np.ndarray) -> dict | None:
    """Test of the sharing as a whole, the paper's claim: the shared fit `fit` against every recipe's own constant
    fit (`separate`: their summed objective; `residuals`: theirs on d's points, in d's order), which nest it (each
    recipe its own effN and effD); Ronchetti's test as `consistency_test`'s, with as many degrees of freedom as the
    separate fits have parameters more. None where they have none more (every format one recipe's)."""
    n_separate = 2 * len(d.recipes)
    df = n_separate - len(d.names)
    if df <= 0:
        return None
    stat, p = penalty.lr_test(fit.objective, min(separate, fit.objective), residuals, d.pts.n_runs, n_separate, df=df)
    return {"statistic": float(stat), "p_value": float(p), "df": df}


def consistency_tests(law: np.ndarray, d: Design, fit: Fit) -> dict[tuple[str, str], tuple[float, float] | None]:
    """`consistency_test` of every recipe's effN and effD: {(recipe, "effN" | "effD"): (statistic, p) or None}."""
    return {(r, EFFICIENCY_OF[kind]): consistency_test(law, d, fit, r, k)
            for r in d.recipes for k, kind in enumerate(("forward", "backward"))}


class SharedObjective(Objective):
    """Σ w·Huber(log L̂ − log L) over a Design's points on the baseline's law θ, and its gradient in x (log effN per
    forward format, log effD per backward format): each point's u and v are its formats' (0 for the baseline's),
    set as θ's u and v entries per point, so `scaled_logs` and `log_predict_scaled` (its u, v derivative rows) are
    the per-recipe fits' own; a format's derivative is the sum of its points'."""

    def __init__(self, law: np.ndarray, d: Design, w: np.ndarray | None = None) -> None:
        self.columns = [IDX["u"], IDX["v"]]
        super().__init__(self.columns, law, d.pts, w)
        self.d = d
        self.theta0[IDX["kappaN"]] = self.theta0[IDX["kappaD"]] = 0.0  # constant efficiencies
        self.dN = self.dD = np.zeros(len(d.pts.logL))  # (no growth: κ = 0)

    def theta(self, x: np.ndarray) -> list:
        theta = list(self.theta0)
        nf = len(self.d.forward)
        theta[IDX["u"]] = np.append(x[:nf], 0.0)[self.d.fwd]
        theta[IDX["v"]] = np.append(x[nf:], 0.0)[self.d.bwd]
        return theta

    def rows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fitted log losses at x and their derivatives in each point's u and v (2, n)."""
        theta = self.theta(x)
        xN, xD = scaled_logs(theta, self.pts.logN, self.pts.logD, self.dN, self.dD)
        return log_predict_scaled(theta, xN, xD, self.columns, self.dN, self.dD)

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """d fitted log L / d x, a row per point (the flat-direction check's J)."""
        _, rows = self.rows(x)
        nf, nb = len(self.d.forward), len(self.d.backward)
        J = np.zeros((len(self.pts.logL), nf + nb))
        J[:, :nf] = rows[0][:, None] * (self.d.fwd[:, None] == np.arange(nf))
        J[:, nf:] = rows[1][:, None] * (self.d.bwd[:, None] == np.arange(nb))
        return J

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        pred, rows = self.rows(x)
        h, dh = huber(pred - self.pts.logL)
        if self.w is not None:
            h, dh = h * self.w, dh * self.w
        rows *= dh
        nf, nb = len(self.d.forward), len(self.d.backward)
        gradient = np.concatenate([np.bincount(self.d.fwd, rows[0], nf + 1)[:nf],
                                   np.bincount(self.d.bwd, rows[1], nb + 1)[:nb]])
        return float(h.sum()), gradient


def fit_shared(law: np.ndarray, d: Design, starts: np.ndarray, w: np.ndarray | None = None) -> Fit | None:
    """L-BFGS-B from each start (rows of x), unbounded as the per-recipe constant fits' u and v are; the best wins
    (`fit.best_fit`). Fit.theta is x. None where every start failed."""
    bounds = [(None, None)] * (len(d.forward) + len(d.backward))
    objective = SharedObjective(law, d, w)
    if not bounds:  # every recipe has the baseline's formats: nothing to fit, the objective is the law's
        return Fit(np.empty(0), objective(np.empty(0))[0])

    def one(x0: np.ndarray) -> Fit | None:
        res = lbfgsb(objective, np.array(x0, float), bounds)
        return None if res is None else Fit(np.array(res.x, float), float(res.fun))

    return best_fit(one(x0) for x0 in starts)


def shared_starts(d: Design, const: dict[str, np.ndarray]) -> np.ndarray:
    """The starts: the per-recipe constant fits' estimates (`const`: recipe -> its θ), each format at the mean log
    efficiency of its recipes (the geometric mean), then the 3×3 grid of the per-recipe fits (every format at once)."""
    def mean_log(k: int, entry: str, fmt: str) -> float:
        return float(np.mean([const[r][IDX[entry]] for r in d.recipes if d.formats[r][k] == fmt]))

    first = [mean_log(0, "u", f) for f in d.forward] + [mean_log(1, "v", f) for f in d.backward]
    grid = [[u] * len(d.forward) + [v] * len(d.backward) for u, v in itertools.product(GRID, GRID)]
    return np.array([first, *grid], float).reshape(len(grid) + 1, len(first))


def replicate_weights(d: Design, weights: dict[str, np.ndarray]) -> np.ndarray:
    """One bootstrap replicate's point weights (`weights`: per group, as `analysis._replicate` draws them) over d's
    points: the replicates of the rest of the fit, not others."""
    return np.concatenate([weights[r] for r in d.recipes])


def summarise(d: Design, law: np.ndarray, fit: Fit, replicates: list[np.ndarray], groups_out: dict,
              separate: dict[str, float], law_flat: list[str], own_flat: dict[str, list[str]],
              own_replicates: dict[str, list[np.ndarray]],
              tests: dict[tuple[str, str], tuple[float, float] | None], sharing: dict | None) -> dict:
    """The `shared_efficiencies` entry. `replicates`: x per bootstrap replicate (NaN where its fit failed);
    `groups_out`: the analysis' groups (each recipe's effN_const, effD_const and intervals); `separate`: each recipe's
    constant fit's objective; `law_flat`: the baseline law's not-identified parameters; `own_flat`: each recipe's
    constant fit's (effN, effD); `own_replicates`: each recipe's constant fit's θ in the same replicates; `tests`:
    `consistency_tests`'; `sharing`: `sharing_test`'s."""
    ok = [x for x in replicates if np.isfinite(x).all()]
    flat = flat_columns(SharedObjective(law, d).jacobian(fit.theta), d.names)
    entries: dict[str, dict] = {"forward": {}, "backward": {}}
    for k, kind in enumerate(("forward", "backward")):
        fitted = d.forward if k == 0 else d.backward
        eff = EFFICIENCY_OF[kind]
        for fmt in (d.reference[k], *fitted):
            recipes = [r for r in d.recipes if d.formats[r][k] == fmt]
            if fmt == d.reference[k]:
                if not recipes:  # (baseline_formats says it; listed where a recipe shares it)
                    continue
                entries[kind][fmt] = {eff: 1.0, "ci95": [1.0, 1.0], "fitted": False, "recipes": recipes,
                                      "pinned": True, "unpinned": []}
                continue
            j = d.position(k, fmt)
            why = _format_unpinned(kind, fmt, d.names[j] in flat, law_flat)
            entries[kind][fmt] = {eff: float(np.exp(fit.theta[j])),
                                  "ci95": list(percentile_ci(np.exp(np.array([x[j] for x in ok])))),
                                  "fitted": True, "recipes": recipes, "pinned": not why, "unpinned": why}
    return {"baseline_formats": {"forward": d.reference[0], "backward": d.reference[1]},
            **entries,
            "recipes": _checks(d, entries, groups_out, own_flat, replicates, own_replicates, tests, law_flat),
            "objective": fit.objective, "objective_separate": float(sum(separate[r] for r in d.recipes)),
            "n_params": len(d.names), "n_params_separate": 2 * len(d.recipes), "sharing_test": sharing,
            "n_points": int(len(d.pts.logL)), "n_runs": d.pts.n_runs, "n_replicates": len(ok),
            "n_replicates_failed": len(replicates) - len(ok)}


def _format_unpinned(kind: str, fmt: str, flat: bool, law_flat: list[str]) -> list[str]:
    """Why the runs do not pin a format's shared efficiency, a sentence each; [] where they do. Its parameter is
    unbounded (as the per-recipe fits' u and v), so no bound can hold it: the fit's flat directions
    (`fit.flat_columns`) and the baseline law's (the efficiency multiplies N or D inside its terms) are the causes."""
    eff = EFFICIENCY_OF[kind]
    why = []
    if flat:
        why.append(f"{eff} of {fmt} lies on a flat direction of the shared fit: other values fit the runs as well")
    terms = unpinned_terms(eff, law_flat)  # (`fit.efficiency_identified`'s rule, as every efficiency's)
    if terms:
        why.append(f"the baseline's law does not pin {', '.join(terms)}, which {eff} scales: its value moves with "
                   "where that law's fit stopped")
    return why


def unpinned_reasons(entry: dict) -> list[str]:
    """The reasons a `shared_efficiencies` entry gives for its formats' not-pinned efficiencies, each once (the
    baseline law's cause reads alike for every format it holds): what `scaling fit` and the report list."""
    return list(dict.fromkeys(why for kind in ("forward", "backward") for e in entry[kind].values()
                              for why in e["unpinned"]))


def _checks(d: Design, entries: dict, groups_out: dict, own_flat: dict[str, list[str]],
            replicates: list[np.ndarray], own_replicates: dict[str, list[np.ndarray]],
            tests: dict[tuple[str, str], tuple[float, float] | None], law_flat: list[str]) -> dict:
    """Per recipe, its own constant efficiencies beside its formats' shared ones (with the 95% interval of own /
    shared paired over the bootstrap replicates, `ratio_ci95`, to show how far apart), and the check: "not
    consistent" where `consistency_test`'s p, Holm-adjusted over the checks made (`penalty.holm`: one analysis checks
    every recipe's two; the two checks of a format of two recipes are one split, one test), is below `penalty.ALPHA`,
    else "consistent"; unchecked (None, and why) where there is nothing to test or the runs pin neither side."""
    out, reasons, p_values, family = {}, {}, {}, {}
    for r in d.recipes:
        formats = d.formats[r]
        out[r] = {"forward_format": formats[0], "backward_format": formats[1]}
        group = groups_out[r]
        for k, kind in enumerate(("forward", "backward")):
            eff = EFFICIENCY_OF[kind]
            shared = entries[kind][formats[k]]
            test = tests[(r, eff)]
            if test is None:
                reasons[(r, eff)] = f"the only recipe of its {kind} format: its {eff} is its own"
            elif eff in own_flat[r]:
                reasons[(r, eff)] = f"{r}'s own {eff} is not identified by its runs"
            elif not shared["pinned"]:
                reasons[(r, eff)] = f"the shared {eff} of its format is not identified"
            elif formats[k] == d.reference[k] and (terms := unpinned_terms(eff, law_flat)):
                reasons[(r, eff)] = (f"the baseline's law does not pin {', '.join(terms)}, which {eff} scales: its 1 "
                                     "is no reference to test against")
            elif not np.isfinite(test[1]):
                reasons[(r, eff)] = "the test could not be made (an exact fit, or its alternative fit failed)"
            else:
                mates = [m for m in d.recipes if d.formats[m][k] == formats[k]]
                # (of two recipes in a fitted format, either split is the same alternative: one test, counted once)
                key = (kind, formats[k]) if len(mates) == 2 and formats[k] != d.reference[k] else (r, eff)
                family[(r, eff)], p_values[key] = key, test[1]
            out[r][eff] = {"own": group["params"][f"{eff}_const"],
                           "own_ci95": list(group["ci95"].get(f"{eff}_const", [float("nan")] * 2)),
                           # (its group's `not_identified` says the same: one rule, `fit.efficiency_identified`)
                           "own_identified": efficiency_identified(eff, own_flat[r], law_flat),
                           "shared": shared[eff], "ratio_ci95": _ratio_ci(d, k, formats[k], replicates, own_replicates[r]),
                           "statistic": float("nan") if test is None else test[0],
                           "p_value": float("nan") if test is None else test[1]}
    adjusted = penalty.holm(p_values)
    for (r, eff), entry in ((key, out[key[0]][key[1]]) for key in tests):
        p = adjusted[family[(r, eff)]] if (r, eff) in family else float("nan")
        entry["p_adjusted"] = p
        entry["check"] = None if (r, eff) in reasons else "not consistent" if p < penalty.ALPHA else "consistent"
        entry["unchecked"] = reasons.get((r, eff))
    return out


def _ratio_ci(d: Design, k: int, fmt: str, replicates: list[np.ndarray], own: list[np.ndarray]) -> list[float]:
    """The 95% percentile interval of a recipe's own constant efficiency over its format's shared one (k: 0 effN,
    1 effD), a ratio per bootstrap replicate where both fits succeeded; NaNs where fewer than two did."""
    entry = IDX["u"] if k == 0 else IDX["v"]
    j = d.position(k, fmt)
    logs = np.array([o[entry] - (0.0 if j is None else x[j]) for x, o in zip(replicates, own)], float)
    return list(percentile_ci(np.exp(logs)))  # (a failed fit's NaN left out there)
