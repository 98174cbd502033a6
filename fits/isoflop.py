"""Chinchilla Approach 2: per isoFLOP level, a parabola of loss in log N; then N_opt ∝ C^a.

Used only when the data has isoFLOP structure: at least 3 compute levels that each hold at least 3
distinct model sizes and a minimum inside the sizes tried.

Levels are density peaks of log10 C, C = 6ND (`find_levels`). The window of ±LEVEL_HALF_WIDTH
decades (±6% in C) around some point's C that holds the most points is a candidate; it is centred
once on its points' mean, its points are set aside, and the next densest window is taken (none
centred within LEVEL_GAP of one already taken), until no window holds MIN_SIZES points. A candidate
is a level if it stands out of the points around it: under a Poisson count at the density of the
flanks (LEVEL_HALF_WIDTH < |Δlog10 C| < LEVEL_GAP, all points), a window holding as many points
as it does has probability < PEAK_P. A sweep's own grid (exact budgets, empty flanks: budgets at
least LEVEL_GAP + LEVEL_HALF_WIDTH = 0.125 decades apart) gives one level per budget. Published
data also holds runs that belong to no isoFLOP level (in Epoch's extraction of Hoffmann et al.'s
Figure 4, runs whose C spreads continuously between the budgets): chaining neighbours (any gap
< 0.1 decades) joined every budget into one span there; the peaks pick the budgets out of that background,
and the Poisson test drops windows that are crowds of it (docs/fits.md gives the numbers).
"""

from __future__ import annotations

import numpy as np
from scipy.special import pdtrc  # poisson.sf's function, without scipy.stats' ~0.4 s import

LEVEL_GAP = 0.1  # decades of compute: least distance between the centres of two isoFLOP levels
LEVEL_HALF_WIDTH = 0.025  # decades: a level's points lie within this of its centre (±6% in C)
MIN_SIZES = 3  # distinct model sizes (and points) a level needs for a parabola
PEAK_P = 1e-3  # a level's count must be this improbable at its flanks' density (Poisson)


def find_levels(logC: np.ndarray) -> list[np.ndarray]:
    """Indices (into logC, log10 of compute) of each isoFLOP level's points, levels ascending in C.

    O(n log n) per level tried, and levels tried lie ≥ LEVEL_GAP apart: a few dozen at most.
    """
    logC = np.asarray(logC, dtype=float)
    tol = LEVEL_HALF_WIDTH + 1e-9  # points given exactly at ±0.025 stay inside despite rounding
    order = np.argsort(logC, kind="stable")  # ties: the lower index first
    free = np.ones(len(logC), dtype=bool)  # over `order`
    centres: list[float] = []
    levels: list[np.ndarray] = []
    while True:
        pos = np.flatnonzero(free)
        s = logC[order[pos]]  # the points not in a level yet, ascending
        counts = np.searchsorted(s, s + tol, side="right") - np.searchsorted(s, s - tol, side="left")
        if centres:  # no window centred within LEVEL_GAP of a level's centre: that peak's shoulders
            counts[np.min(np.abs(s[:, None] - np.array(centres)[None, :]), axis=1) < LEVEL_GAP] = 0
        if not len(s) or counts.max() < MIN_SIZES:
            break
        best = s[int(np.argmax(counts))]  # the densest window; ties: the lower C
        first = np.abs(s - best) <= tol
        centre = float(s[first].mean())
        inside = np.abs(s - centre) <= tol  # the window, centred on its points
        if inside.sum() < MIN_SIZES:
            inside = first
            centre = float(s[first].mean())
        free[pos[inside]] = False
        centres.append(centre)
        levels.append(np.sort(order[pos[inside]]))
    kept = []
    for k in np.argsort(centres):
        d = np.abs(logC - centres[k])
        flanks = int(np.sum((d > tol) & (d < LEVEL_GAP)))  # (0.025, 0.1) decades either side
        expected = flanks * (2 * LEVEL_HALF_WIDTH) / (2 * (LEVEL_GAP - LEVEL_HALF_WIDTH))
        p = float(pdtrc(len(levels[k]) - 1, expected))  # P(count >= the level's) if expected > 0 else 0.0
        if p < PEAK_P:
            kept.append(levels[k])
    return kept


def isoflop_fit(N: np.ndarray, D: np.ndarray, loss: np.ndarray) -> dict | None:
    """{"a", "b", "levels": [{"C", "N_opt", "D_opt", "loss_opt", "points"}]} or None without the structure.

    a and b are the exponents of N_opt ∝ C^a and D_opt ∝ C^b (b = 1 − a since C = 6ND). Levels
    (`find_levels`) come in ascending C; a level's C is the geometric mean of its points' C.
    """
    N, D, loss = (np.asarray(v, dtype=float) for v in (N, D, loss))
    logC = np.log10(6.0 * N * D)
    order = np.argsort(logC)  # each level's points in ascending C, as the fits always took them
    levels = []
    for members in find_levels(logC):
        idx = order[np.isin(order, members)]
        x, y = np.log(N[idx]), loss[idx]
        if len(np.unique(np.round(x, 6))) < MIN_SIZES:
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
