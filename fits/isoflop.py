"""Chinchilla Approach 2: per isoFLOP level, a parabola of loss in log N; then N_opt ∝ C^a.

Used only when the data has isoFLOP structure: at least 3 compute levels (points whose C = 6ND
follow each other within 0.1 decades and span at most 0.05, i.e. ±6%) that each hold at least 3
distinct model sizes and a minimum inside the sizes tried.
"""

from __future__ import annotations

import numpy as np

LEVEL_GAP = 0.1  # decades of compute between two isoFLOP levels


def isoflop_fit(N: np.ndarray, D: np.ndarray, loss: np.ndarray) -> dict | None:
    """{"a", "b", "levels": [{"C", "N_opt", "D_opt", "loss_opt", "points"}]} or None without the structure.

    a and b are the exponents of N_opt ∝ C^a and D_opt ∝ C^b (b = 1 − a since C = 6ND).
    """
    logC = np.log10(6.0 * N * D)
    order = np.argsort(logC)
    splits = np.flatnonzero(np.diff(logC[order]) > LEVEL_GAP) + 1
    levels = []
    for idx in np.split(order, splits):
        x, y = np.log(N[idx]), loss[idx]
        if np.ptp(logC[idx]) > LEVEL_GAP / 2 or len(np.unique(np.round(x, 6))) < 3:
            continue
        c2, c1, c0 = np.polyfit(x, y, 2)
        if c2 <= 0:
            continue
        x_opt = -c1 / (2 * c2)
        if not (x.min() <= x_opt <= x.max()):
            continue  # the minimum lies outside the sizes tried: no honest estimate
        C = float(10 ** logC[idx].mean())
        N_opt = float(np.exp(x_opt))
        levels.append({"C": C, "N_opt": N_opt, "D_opt": C / (6 * N_opt),
                       "loss_opt": float(c0 + c1 * x_opt + c2 * x_opt**2), "points": int(len(idx))})
    if len(levels) < 3:
        return None
    a = float(np.polyfit(np.log([lv["C"] for lv in levels]), np.log([lv["N_opt"] for lv in levels]), 1)[0])
    return {"a": a, "b": 1.0 - a, "levels": levels}
