"""`scaling bench calibration`: how often the κN = κD = 0 test (`penalty.lr_test`) rejects at its
nominal level, on synthetic sweeps from a known law: where the truth is a constant penalty (every
rejection is false; a calibrated 5% test rejects ~5%) and where the penalty grows (rejections are
power). Each case is `sweeps` sweeps of a baseline and one recipe on a grid of model sizes × tokens
per parameter, one run per point, fitted as `scaling fit` fits them (without the bootstrap, which the
test does not use)."""

from __future__ import annotations

import numpy as np

from fits.synthetic import synthetic_table

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
)


def _one_sweep(ctx: tuple, item: tuple) -> tuple[float, float]:
    """(statistic, p-value) of the κ = 0 test on one synthetic sweep."""
    from fits.analysis import analyse

    noise, law = ctx
    grid, dist, truth, seed = item
    sizes, ratios = GRIDS[grid]
    table = synthetic_table({"bf16": {}, "fp4": TRUTHS[truth]}, sizes=sizes, ratios=ratios, noise=noise,
                            noise_dist=dist, seed=seed)
    pen = analyse(table, law=law, baseline="bf16", bootstrap=0, seed=seed, workers=1)["penalty"]["fp4"]
    return pen["lr_stat"], pen["p_value"]


def calibrate(sweeps: int = 40, noise: float = 0.005, law: str = "chinchilla", cases=CASES, workers: int = 2,
              seed: int = 0, progress=None, on_row=None) -> list[dict]:
    """One row per case: its rejection rates at 5% and 1%, and the statistic's mean (2 under a
    calibrated null: the χ²(2) mean). on_row(rows so far) after each case, so a caller can save them
    (a case takes minutes: a run cut short keeps the cases it finished)."""
    from fits.fit import parallel_map
    from fits.threads import single_threaded_blas

    rows = []
    for grid, dist, truth in cases:
        items = [(grid, dist, truth, seed + i) for i in range(sweeps)]
        with single_threaded_blas():
            out = np.array(parallel_map(_one_sweep, (noise, law), items, workers), float)
        stat, p = out[:, 0], out[:, 1]
        testable = np.isfinite(p)
        row = {"grid": grid, "noise_dist": dist, "noise_sd": noise, "truth": truth, "law": law, "sweeps": sweeps,
               "reject_5pct": float(np.mean(p < 0.05)), "reject_1pct": float(np.mean(p < 0.01)),
               "mean_stat": float(np.mean(stat[testable])) if testable.any() else None,
               "untestable": int(np.sum(~testable))}
        rows.append(row)
        if on_row:
            on_row(rows)
        if progress:
            progress(f"  {grid} {dist:<7} {truth:<8}: rejected {row['reject_5pct']:.0%} at 5%, "
                     f"{row['reject_1pct']:.0%} at 1% of {sweeps} sweeps; mean statistic {row['mean_stat'] or float('nan'):.2f}")
    return rows
