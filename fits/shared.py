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

import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl

from fits.fit import Fit, Objective, Points, best_fit, flat_columns, huber, lbfgsb, percentile_ci
from fits.laws import IDX, log_predict_scaled, scaled_logs
from fits.table import parse_columns, pick_column
from scaling.errors import UserError
from scaling.recipes import FORMAT_COLUMNS

EFFICIENCY_OF = {"forward": "effN", "backward": "effD"}
# The baseline law's parameters an efficiency multiplies (A/(N·effN)^α, B/(D·effD)^β; γ both): where the runs do not
# pin them, the efficiency's value moves with where that law stopped.
LAW_TERMS = {"forward": ("A", "alpha", "gamma"), "backward": ("B", "beta", "gamma")}
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

    @property
    def names(self) -> list[str]:
        """x's entries in words: 'effN of FORMAT', 'effD of FORMAT'."""
        return [f"effN of {f}" for f in self.forward] + [f"effD of {f}" for f in self.backward]


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
    return Design(recipes, {r: formats[r] for r in (base, *recipes)}, reference, kinds[0][0], kinds[1][0], pts,
                  kinds[0][1], kinds[1][1])


class SharedObjective(Objective):
    """Σ w·Huber(log L̂ − log L) over a Design's points on the baseline's law θ, and its gradient in x (log effN per
    forward format, log effD per backward format): each point's u and v are its formats' (0 for the baseline's),
    set as θ's u and v entries per point, so `scaled_logs` and `log_predict_scaled` (its u, v derivative rows) are
    the per-recipe fits' own; a format's derivative is the sum of its points'."""

    def __init__(self, law: np.ndarray, d: Design, w: np.ndarray | None = None) -> None:
        self.pts, self.w, self.shifts, self.d = d.pts, w, (), d
        self.theta0 = [float(t) for t in law]
        self.theta0[IDX["kappaN"]] = self.theta0[IDX["kappaD"]] = 0.0  # constant efficiencies
        self.dN = self.dD = np.zeros(len(d.pts.logL))  # (no growth: κ = 0)
        self.columns = [IDX["u"], IDX["v"]]
        self._at, self._gradient = b"", np.empty(0)

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
              own_replicates: dict[str, list[np.ndarray]]) -> dict:
    """The `shared_efficiencies` entry. `replicates`: x per bootstrap replicate (NaN where its fit failed);
    `groups_out`: the analysis' groups (each recipe's effN_const, effD_const and intervals); `separate`: each recipe's
    constant fit's objective; `law_flat`: the baseline law's not-identified parameters; `own_flat`: each recipe's
    constant fit's (effN, effD); `own_replicates`: each recipe's constant fit's θ in the same replicates."""
    ok = [x for x in replicates if np.isfinite(x).all()]
    flat = flat_columns(SharedObjective(law, d).jacobian(fit.theta), d.names)
    entries: dict[str, dict] = {"forward": {}, "backward": {}}
    nf = len(d.forward)
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
            j = fitted.index(fmt) + (0 if k == 0 else nf)
            why = _unpinned(kind, fmt, d.names[j] in flat, law_flat)
            entries[kind][fmt] = {eff: float(np.exp(fit.theta[j])),
                                  "ci95": list(percentile_ci(np.exp(np.array([x[j] for x in ok])))),
                                  "fitted": True, "recipes": recipes, "pinned": not why, "unpinned": why}
    return {"baseline_formats": {"forward": d.reference[0], "backward": d.reference[1]},
            **entries,
            "recipes": {r: _check(r, d, entries, groups_out[r], own_flat[r], replicates, own_replicates[r])
                        for r in d.recipes},
            "objective": fit.objective, "objective_separate": float(sum(separate[r] for r in d.recipes)),
            "n_params": len(d.names), "n_params_separate": 2 * len(d.recipes),
            "n_points": int(len(d.pts.logL)), "n_runs": d.pts.n_runs, "n_replicates": len(ok),
            "n_replicates_failed": len(replicates) - len(ok)}


def _unpinned(kind: str, fmt: str, flat: bool, law_flat: list[str]) -> list[str]:
    """Why the runs do not pin a format's shared efficiency, a sentence each; [] where they do. Its parameter is
    unbounded (as the per-recipe fits' u and v), so no bound can hold it: the fit's flat directions
    (`fit.flat_columns`) and the baseline law's (the efficiency multiplies N or D inside its terms) are the causes."""
    eff = EFFICIENCY_OF[kind]
    why = []
    if flat:
        why.append(f"{eff} of {fmt} lies on a flat direction of the shared fit: other values fit the runs as well")
    terms = [p for p in LAW_TERMS[kind] if p in law_flat]
    if terms:
        why.append(f"the baseline's law does not pin {', '.join(terms)}, which {eff} scales: its value moves with "
                   "where that law's fit stopped")
    return why


def _check(recipe: str, d: Design, entries: dict, group: dict, own_flat: list[str], replicates: list[np.ndarray],
           own_replicates: list[np.ndarray]) -> dict:
    """A recipe's own constant efficiencies beside its formats' shared ones, and whether they agree: the 95% interval
    of own / shared, paired over the bootstrap replicates (both fitted on each replicate's runs, so the shared
    value's own uncertainty and its correlation with the recipe's, whose runs it includes, are in it), holds 1."""
    formats = d.formats[recipe]
    out = {"forward_format": formats[0], "backward_format": formats[1]}
    for k, kind in enumerate(("forward", "backward")):
        eff = EFFICIENCY_OF[kind]
        shared = entries[kind][formats[k]]
        own, ci = group["params"][f"{eff}_const"], group["ci95"].get(f"{eff}_const", [float("nan")] * 2)
        ratio = _ratio_ci(d, k, formats[k], replicates, own_replicates)
        if eff in own_flat:
            check, why = None, f"{recipe}'s own {eff} is not identified by its runs"
        elif not shared["pinned"]:
            check, why = None, f"the shared {eff} of its format is not pinned"
        elif not all(np.isfinite(ratio)):
            check, why = None, "no bootstrap interval (--bootstrap 0)"
        else:
            check, why = ("consistent" if ratio[0] <= 1.0 <= ratio[1] else "not consistent"), None
        out[eff] = {"own": own, "own_ci95": list(ci), "shared": shared[eff], "ratio_ci95": ratio, "check": check,
                    "unchecked": why}
    return out


def _ratio_ci(d: Design, k: int, fmt: str, replicates: list[np.ndarray], own: list[np.ndarray]) -> list[float]:
    """The 95% percentile interval of a recipe's own constant efficiency over its format's shared one (k: 0 effN,
    1 effD), a ratio per bootstrap replicate where both fits succeeded; NaNs where fewer than two did."""
    entry = IDX["u"] if k == 0 else IDX["v"]
    fitted = d.forward if k == 0 else d.backward
    j = None if fmt == d.reference[k] else fitted.index(fmt) + (0 if k == 0 else len(d.forward))
    logs = np.array([o[entry] - (0.0 if j is None else x[j]) for x, o in zip(replicates, own)], float)
    return list(percentile_ci(np.exp(logs)))  # (a failed fit's NaN left out there)
