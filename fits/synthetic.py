"""Synthetic results from a known law: the ground truth for recovery tests and the fit benchmark."""

from __future__ import annotations

import numpy as np
import polars as pl

from fits.laws import from_params, predict
from fits.penalty import curves, ratio_per_decade

# Epoch AI's fit to Chinchilla's data: a realistic baseline law.
EPOCH = {"A": 477.8, "B": 2143.0, "E": 1.817, "alpha": 0.3473, "beta": 0.3672}
# Unit-variance noise draws: (rng, n) -> n values.
NOISE = {
    "normal": lambda rng, n: rng.standard_normal(n),
    "laplace": lambda rng, n: rng.laplace(size=n) / np.sqrt(2.0),
    "t3": lambda rng, n: rng.standard_t(3, size=n) / np.sqrt(3.0),
}
# "paired" noise: normal, this share of its variance common to the twin runs of one configuration (model size, token
# count, seed) in every recipe, as runs from one initialisation and data order share it; the rest is each run's own.
PAIRED_SHARE = 0.9
NOISE_DISTS = (*NOISE, "paired")


def synthetic_table(recipes: dict[str, dict] | None = None, sizes=None, ratios=(5, 10, 20, 40, 80),
                    checkpoints: int = 1, noise: float = 0.005, base: dict | None = None,
                    seed: int = 0, noise_dist: str = "normal") -> pl.DataFrame:
    """A sweep's table: every recipe × model size × tokens-per-parameter ratio is one run.

    recipes: name -> {"effN", "effD", "kappaN", "kappaD"} on top of `base` (default: one recipe
    "bf16" with none). N₀, D₀ of the growth terms are the geometric means of the sweep's N and D,
    as the fitter uses. checkpoints > 1 adds that many evenly spaced checkpoints per run (same
    run_id). noise: standard deviation of the noise on the log loss, drawn from `noise_dist` (NOISE: normal, or the
    heavier-tailed laplace and t3, scaled to unit variance), independent per point; or "paired": normal, PAIRED_SHARE
    of its variance shared by the recipes' twin points (one configuration's, at one checkpoint), and the table says
    they are twins with a `seed` column (0 for every run: one seed per configuration), as a sweep's results do.
    """
    if noise_dist not in NOISE_DISTS:
        raise ValueError(f"noise_dist {noise_dist!r}: use one of {', '.join(NOISE_DISTS)}")
    rng = np.random.default_rng(seed)
    base = dict(EPOCH if base is None else base)
    recipes = {"bf16": {}} if recipes is None else recipes
    sizes = np.geomspace(2e7, 2e9, 7) if sizes is None else np.asarray(sizes, float)
    runs = [(N, N * r) for N in sizes for r in ratios]
    Ns = np.array([N for N, _ in runs for k in range(checkpoints)])
    Ds = np.array([D * (k + 1) / checkpoints for _, D in runs for k in range(checkpoints)])
    N0, D0 = reference_points(Ns, Ds)
    paired = noise_dist == "paired"
    shared = np.sqrt(PAIRED_SHARE) * rng.standard_normal(len(Ns)) if paired else 0.0
    rows = []
    for recipe, eff in recipes.items():
        params = {**base, "N0": N0, "D0": D0, **eff}
        own = np.sqrt(1 - PAIRED_SHARE) * rng.standard_normal(len(Ns)) if paired else NOISE[noise_dist](rng, len(Ns))
        loss = predict(params, Ns, Ds) * np.exp(noise * (shared + own))
        ids = [f"{recipe}-{i}" for i in range(len(runs)) for _ in range(checkpoints)]
        rows.append(pl.DataFrame({"recipe": recipe, "run_id": ids, "N": Ns, "D": Ds, "loss": loss,
                                  **({"seed": 0} if paired else {})}))
    return pl.concat(rows)


def reference_points(N, D) -> tuple[float, float]:
    """(N₀, D₀) of a recipe's points: the geometric means of their N and D, where its growth terms' effN₀ and effD₀
    hold (`synthetic_table` sets a truth's there, and the fitter, `fit.Points`, its estimates')."""
    return float(np.exp(np.log(np.asarray(N, float)).mean())), float(np.exp(np.log(np.asarray(D, float)).mean()))


def _true_thetas(recipe: dict, base: dict | None, N0: float = 1.0, D0: float = 1.0) -> tuple:
    """(baseline's θ, recipe's θ, log N₀, log D₀) of a synthetic truth, as `synthetic_table` builds its law."""
    base = dict(EPOCH if base is None else base)
    base_theta, _, _ = from_params(base)
    theta, logN0, logD0 = from_params({**base, "N0": N0, "D0": D0, **recipe})
    return base_theta, theta, logN0, logD0


def true_ratio_per_decade(recipe: dict, base: dict | None = None) -> float:
    """The `ratio_per_decade` that a synthetic recipe's truth has (recipe: its {"effN", "effD", "kappaN", "kappaD"} on
    `base`, default Epoch's law, as `synthetic_table` takes them): computed from the truth's law by the function that
    computes a fit's estimate (`penalty.ratio_per_decade`), so a calibration compares like with like. 1 under a
    constant penalty (κN = κD = 0). N₀ and D₀, which a sweep sets, move the multiplier's level, not its change per
    decade: the neutral 1 is taken where the recipe gives none."""
    return ratio_per_decade(*_true_thetas(recipe, base))


def true_penalty(recipe: dict, C, N0: float, D0: float, base: dict | None = None) -> dict[str, np.ndarray]:
    """The compute multiplier (the baseline's compute reaching the recipe's compute-optimal loss at C, over C) and the
    loss gap at equal compute (L_r*(C) − L_b*(C), nats) that a synthetic recipe's truth has at each compute C (recipe
    and base as `true_ratio_per_decade`'s; N₀, D₀: its runs' `reference_points`, where its effN₀, effD₀ hold, which
    move the level of a growing penalty). Computed from the truth's law by the function that computes a fit's
    estimates (`penalty.curves`), as `true_ratio_per_decade`. Under a constant penalty the multiplier is effN·effD
    at every C."""
    base_theta, theta, logN0, logD0 = _true_thetas(recipe, base, N0, D0)
    out = curves(base_theta, theta, np.log(np.asarray(C, float)), logN0, logD0)
    return {"multiplier": np.asarray(out["multiplier"], float), "gap": np.asarray(out["gap"], float)}
