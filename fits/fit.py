"""Fitting: Huber loss on log-loss residuals, L-BFGS-B from a grid of starts, bootstrap by run.

Objective (Besiroglu et al. 2024, Epoch AI's Chinchilla replication): Σᵢ wᵢ·Huber_δ(log L̂ᵢ − log Lᵢ)
with δ = 1e-3. The weights wᵢ are 1 for a plain fit; a bootstrap replicate resamples whole runs with
replacement, which is the same as weighting every point by how often its run was drawn (all
checkpoints of one run move together), so replicates reuse the same arrays.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterable

import numpy as np
from scipy.optimize import minimize

from fits.laws import IDX, THETA, base_theta, log_predict, log_predict_scaled, scaled_logs
from scaling import usable_cpus

DELTA = 1e-3
EFFICIENCY = ("u", "v", "kappaN", "kappaD")  # θ's entries of a recipe's efficiencies and their growth
FREE = {  # parameters each fit moves; the rest of θ stays where the caller put it
    "chinchilla": [IDX[k] for k in ("a", "b", "e", "alpha", "beta")],
    "quartet": [IDX[k] for k in ("a", "b", "e", "alpha", "beta", "gamma")],
    "efficiency": [IDX["u"], IDX["v"]],
    "growth": [IDX[k] for k in ("u", "v", "kappaN", "kappaD")],
}
for _law in ("chinchilla", "quartet"):  # joint fits of the baseline's and one recipe's points (the LR test)
    FREE[f"{_law}+efficiency"] = FREE[_law] + FREE["efficiency"]
    FREE[f"{_law}+growth"] = FREE[_law] + FREE["growth"]
N_PARAMS = {k: len(v) for k, v in FREE.items()}
# Bounds keep the optimiser where the law means something: γ > 0; κ > -1 keeps N·effN(N) increasing in N;
# 0 < α, β ≤ 10: loss falls with N and D, and A = e^a stays finite (a ≈ α log N where the data cannot pin
# α: unbounded, a demo-sized sweep gave α = 131 and A = inf). Epoch's fits lie far inside (α, β ≈ 0.35).
BOUNDS = {IDX["gamma"]: (0.05, 20.0), IDX["kappaN"]: (-0.9, 5.0), IDX["kappaD"]: (-0.9, 5.0),
          IDX["alpha"]: (1e-3, 10.0), IDX["beta"]: (1e-3, 10.0)}


def at_bound(value: float, name: str) -> tuple[float, float] | None:
    """The bounds of parameter `name` (θ's: alpha, kappaN, ...) where `value` sits at one of them, else None.
    L-BFGS-B stops short of an active bound by up to ~1e-5 of it (bf16's alpha 9.99994 of 10 in the demo), so "at"
    the bound is within 1e-4 of it."""
    lo, hi = BOUNDS.get(IDX.get(name, -1), (None, None))
    if lo is None or not np.isfinite(value):
        return None
    return (lo, hi) if np.isclose(value, lo, rtol=1e-4, atol=1e-9) or np.isclose(value, hi, rtol=1e-4) else None


@dataclass(frozen=True)
class Points:
    """One group's data in log space; `runs` maps each point to its run (0..n_runs-1)."""

    logN: np.ndarray
    logD: np.ndarray
    logL: np.ndarray
    runs: np.ndarray
    logN0: float = 0.0  # growth reference points (geometric means of the group's N and D)
    logD0: float = 0.0
    recipe: np.ndarray | None = None  # joint fits: 1 where the efficiencies apply, 0 on baseline points

    @property
    def n_runs(self) -> int:
        return int(self.runs.max()) + 1 if len(self.runs) else 0

    @classmethod
    def joint(cls, baseline: "Points", recipe: "Points") -> "Points":
        """The baseline's and a recipe's points as one set; runs stay distinct; the recipe's N₀, D₀."""
        cat = np.concatenate
        return cls(cat([baseline.logN, recipe.logN]), cat([baseline.logD, recipe.logD]),
                   cat([baseline.logL, recipe.logL]), cat([baseline.runs, recipe.runs + baseline.n_runs]),
                   recipe.logN0, recipe.logD0,
                   cat([np.zeros(len(baseline.logL)), np.ones(len(recipe.logL))]))

    @classmethod
    def from_arrays(cls, N, D, loss, run_ids=None) -> "Points":
        logN, logD = np.log(np.asarray(N, float)), np.log(np.asarray(D, float))
        if run_ids is None:
            runs = np.arange(len(logN))
        else:
            runs = np.unique(np.asarray(run_ids), return_inverse=True)[1].ravel()
        return cls(logN, logD, np.log(np.asarray(loss, float)), runs, float(logN.mean()), float(logD.mean()))


def huber(r: np.ndarray, delta: float = DELTA) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss and its derivative (scipy.special.huber's definition)."""
    a = np.abs(r)
    value = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return value, np.minimum(np.maximum(r, -delta), delta)  # np.clip's, without its Python-level dispatch


class Objective:
    """Σ w·Huber(log L̂ − log L) over `pts` and its gradient in θ's entries `free`, as L-BFGS-B calls it: x holds
    the free entries, centred by `shifts`; the rest of θ stays at theta0's. A fit calls it hundreds of times per
    start on a few points, where numpy's overhead per operation is the cost, so what does not move with x (the
    points' offsets from N₀, D₀, and log N·effN, log D·effD while the efficiencies stay fixed) is computed
    once here, and only the free entries' derivatives are."""

    def __init__(self, free: list[int], theta0: np.ndarray, pts: Points, w: np.ndarray | None = None,
                 shifts: tuple = ()) -> None:
        self.free, self.pts, self.w, self.shifts = free, pts, w, shifts
        self.theta0 = [float(t) for t in theta0]
        self.dN, self.dD = pts.logN - pts.logN0, pts.logD - pts.logD0
        moves_efficiency = any(THETA[i] in EFFICIENCY for i in free)
        self.scaled = None if moves_efficiency else self._scaled(self.theta0)
        self._at, self._gradient = b"", np.empty(0)

    def _scaled(self, theta: list[float]) -> tuple[np.ndarray, np.ndarray]:
        return scaled_logs(theta, self.pts.logN, self.pts.logD, self.dN, self.dD, self.pts.recipe)

    def theta(self, x: np.ndarray) -> list[float]:
        """The full θ at the optimiser's x."""
        theta = list(self.theta0)
        for i, value in zip(self.free, uncentre(x, self.shifts).tolist()):
            theta[i] = value
        return theta

    def value(self, x: np.ndarray) -> float:
        """The objective at x; its gradient there is kept for `gradient`, which L-BFGS-B asks for next at the
        same x (cheaper than scipy's own memo of jac=True, which compares and copies x on every call)."""
        self._at, (f, self._gradient) = x.tobytes(), self(x)
        return f

    def gradient(self, x: np.ndarray) -> np.ndarray:
        return self._gradient if x.tobytes() == self._at else self(x)[1]

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        theta = self.theta(x)
        xN, xD = self.scaled or self._scaled(theta)
        pred, rows = log_predict_scaled(theta, xN, xD, self.free, self.dN, self.dD, self.pts.recipe)
        h, dh = huber(pred - self.pts.logL)
        if self.w is not None:
            h, dh = h * self.w, dh * self.w
        # Σᵢ dhᵢ·∂ᵢ as each row's sum, not a BLAS dot: its threads fight over 2 cores for tiny products, and its
        # order of summation differs, which moves where a fit stops in a flat valley.
        rows *= dh
        return float(h.sum()), centred_derivatives(rows.sum(1), self.shifts)


def centred_derivatives(d: np.ndarray, shifts: tuple) -> np.ndarray:
    """Derivatives along the last axis with respect to (a, α) turned into ones with respect to (a_c, α): the
    chain rule through a = a_c + m·α (`centring`); likewise b, β. In place; returns d."""
    columns = d.T  # each derivative's values as one row: d[ial] of a vector is a float, not a view (the objective's case)
    for ia, ial, m in shifts:
        columns[ial] += m * columns[ia]
    return d


def centring(free: list[int], pts: Points) -> tuple:
    """(position of a, position of α, mean log N) pairs (likewise b, β, mean log D): the optimiser
    moves a_c = a − α·mean(log N) instead of a. a and α are otherwise almost collinear (log N ≈ 20),
    and L-BFGS-B stops early in the flat valley."""
    pos = {i: k for k, i in enumerate(free)}
    return tuple((pos[a], pos[al], m) for a, al, m in ((IDX["a"], IDX["alpha"], pts.logN0),
                                                      (IDX["b"], IDX["beta"], pts.logD0)) if a in pos and al in pos)


def uncentre(x: np.ndarray, shifts: tuple) -> np.ndarray:
    x = np.array(x, float)
    for ia, ial, m in shifts:
        x[ia] += m * x[ial]
    return x


# A direction of the free parameters (centred, as the optimiser moves them) along which a unit step moves the
# fitted log losses by less than this (root mean square over the points) is one the data does not identify: the
# fit is flat along it, and where the optimiser stops on it is float noise (the rows' order, one ulp of a loss).
# An identified law's flattest direction moves them ~1e-2 (Chinchilla's 240 points, a 3 x 3 synthetic grid); an
# exactly flat one (A, alpha and E from two model sizes) ~1e-17, and bf16's alpha at its bound in the demo ~7e-9.
FLAT = 1e-6


def flat_parameters(theta: np.ndarray, kind: str, pts: Points) -> list[str]:
    """The named parameters (A, B, E, alpha, ...) that move along a direction the data does not identify
    (FLAT): the singular vectors of the fit's Jacobian, d log L / d parameters at the points, whose singular
    value is below FLAT; a parameter moves along one where its component is not ~0 (over 1e-6: an exact zero
    comes out of the SVD as ~1e-13). How much each moves depends on where on the valley the fit stopped (noise),
    so only whether it moves at all is said."""
    free = FREE[kind]
    _, J = log_predict(theta, pts.logN, pts.logD, pts.logN0, pts.logD0, jac=True, recipe=pts.recipe)
    J = centred_derivatives(J[:, free], centring(free, pts))  # (a and α are otherwise collinear)
    names = {"a": "A", "b": "B", "e": "E", "u": "effN", "v": "effD"}
    return flat_columns(J, [names.get(THETA[i], THETA[i]) for i in free])


def flat_columns(J: np.ndarray, names: list[str]) -> list[str]:
    """The `names` of J's columns (a fit's parameters; J: d fitted log L / d parameter, a row per point) that move
    along a direction the data does not identify (FLAT), in their order; [] where J is not finite."""
    if not np.isfinite(J).all():
        return []
    _, s, vt = np.linalg.svd(J / np.sqrt(len(J)), full_matrices=False)
    moved = (np.abs(vt[s < FLAT]) > 1e-6).any(axis=0)
    return [names[k] for k in np.flatnonzero(moved)]


# The baseline law's parameters each efficiency parameter reads that law through: effN and κN scale N inside
# A/(N·effN(N))^α, effD and κD scale D inside B/(D·effD(D))^β, and γ is the power of their sum. An efficiency places
# a recipe's runs on the baseline's law at N·effN and D·effD, away from the sizes and token counts that law was
# fitted on, so where the runs do not pin one of these terms the efficiency moves with where that law's fit stopped.
# (E does not count: it is added outside the terms.)
LAW_TERMS = {"effN": ("A", "alpha", "gamma"), "kappaN": ("A", "alpha", "gamma"),
             "effD": ("B", "beta", "gamma"), "kappaD": ("B", "beta", "gamma")}


def unpinned_terms(efficiency: str, law_flat: Iterable[str]) -> list[str]:
    """The baseline law's parameters that `efficiency` (effN, effD, kappaN or kappaD) scales and the runs do not pin
    (`law_flat`: that law's `flat_parameters`), in LAW_TERMS' order; [] where it scales none of them."""
    return [p for p in LAW_TERMS[efficiency] if p in law_flat]


def efficiency_identified(efficiency: str, own_flat: Iterable[str], law_flat: Iterable[str]) -> bool:
    """The rule for every efficiency parameter, of every fit (constant, growth, shared): identified unless it lies on
    a flat direction of its own fit (`own_flat`: that fit's flat parameters, `flat_parameters`/`flat_columns`) or
    the baseline's law does not pin a term it scales (`unpinned_terms`)."""
    return efficiency not in own_flat and not unpinned_terms(efficiency, law_flat)


def centre(y: np.ndarray, shifts: tuple) -> np.ndarray:
    y = np.array(y, float)
    for ia, ial, m in shifts:
        y[ia] -= m * y[ial]
    return y


def objective_at(thetas: np.ndarray, pts: Points, w: np.ndarray | None = None) -> np.ndarray:
    """The objective at many full θ vectors at once (k, 10) -> (k,); used to rank grid starts."""
    out = np.empty(len(thetas))
    for i in range(0, len(thetas), 512):
        chunk = thetas[i:i + 512].T[:, :, None]  # each parameter as a (k, 1) column
        pred = log_predict(chunk, pts.logN, pts.logD, pts.logN0, pts.logD0, recipe=pts.recipe)
        h = huber(pred - pts.logL)[0]
        out[i:i + 512] = (h * w).sum(1) if w is not None else h.sum(1)
    return out


def epoch_grid(law: str = "chinchilla") -> np.ndarray:
    """Epoch AI's 4,500 starts as full θ vectors: α, β ∈ {0, 0.5, …, 2}; e ∈ {-1, -0.5, …, 1};
    a, b ∈ {0, 5, …, 25}. The Quartet form adds γ ∈ {0.5, 1, 2}."""
    alphas = np.arange(0, 2.01, 0.5)
    es = np.arange(-1, 1.01, 0.5)
    abs_ = np.arange(0, 25.01, 5)
    gammas = [1.0] if law == "chinchilla" else [0.5, 1.0, 2.0]
    rows = []
    for a, b, e, al, be, g in itertools.product(abs_, abs_, es, alphas, alphas, gammas):
        t = base_theta()
        t[[IDX["a"], IDX["b"], IDX["e"], IDX["alpha"], IDX["beta"], IDX["gamma"]]] = a, b, e, al, be, g
        rows.append(t)
    return np.array(rows)


def efficiency_starts(base: np.ndarray) -> np.ndarray:
    """A small grid for effN, effD (and κ = 0): efficiencies from 1 down to e^-1."""
    rows = []
    for u, v in itertools.product([0.0, -0.5, -1.0], [0.0, -0.5, -1.0]):
        t = base.copy()
        t[IDX["u"]], t[IDX["v"]] = u, v
        t[IDX["kappaN"]] = t[IDX["kappaD"]] = 0.0
        rows.append(t)
    return np.array(rows)


@dataclass(frozen=True)
class Fit:
    theta: np.ndarray
    objective: float


def minimize_from(starts: np.ndarray, kind: str, pts: Points, w: np.ndarray | None = None) -> Fit | None:
    """L-BFGS-B from each start (full θ vectors; `kind` says which entries move); the best wins
    (None if every start ended at a non-finite objective)."""
    return best_fit(fit_from(theta0, kind, pts, w) for theta0 in starts)


def fit_from(theta0: np.ndarray, kind: str, pts: Points, w: np.ndarray | None = None) -> Fit | None:
    """L-BFGS-B from one start (a full θ; `kind` says which entries move); None if it ended at a non-finite
    objective."""
    free = FREE[kind]
    bounds = [BOUNDS.get(i, (None, None)) for i in free]
    shifts = centring(free, pts)  # bounds apply to x; centring moves only a and b, which are unbounded
    lo = np.array([b[0] if b[0] is not None else -np.inf for b in bounds])
    hi = np.array([b[1] if b[1] is not None else np.inf for b in bounds])
    x0 = centre(np.clip(theta0[free], lo, hi), shifts)
    res = lbfgsb(Objective(free, theta0, pts, w, shifts), x0, bounds)
    if res is None:
        return None
    theta = theta0.copy()
    theta[free] = uncentre(res.x, shifts)
    return Fit(theta, float(res.fun))


def lbfgsb(objective: "Objective", x0: np.ndarray, bounds: list[tuple]):
    """scipy's L-BFGS-B result of `objective` (value and analytic gradient) from x0, with every fit's options; None
    where it ended at a non-finite objective."""
    res = minimize(objective.value, x0, jac=objective.gradient, method="L-BFGS-B",
                   bounds=bounds, options={"maxiter": 2000, "ftol": 1e-14, "gtol": 1e-10})
    return res if np.isfinite(res.fun) else None


def best_fit(fits: Iterable[Fit | None]) -> Fit | None:
    """The fit of lowest objective, the first of equal ones (None: every start failed, as `fit_from` says it):
    the starts' order decides a tie, so fits made in any order or any process give the same answer."""
    best = None
    for fit in fits:
        if fit is not None and (best is None or fit.objective < best.objective):
            best = fit
    return best


def rank_starts(starts: np.ndarray, pts: Points) -> np.ndarray:
    """A grid of starts (full θ vectors) ordered by their objective, lowest first (ties in the grid's order):
    a law is fitted from the best `top` of them (from all, as Epoch does, with `--starts all`)."""
    return starts[np.argsort(objective_at(starts, pts), kind="stable")]


def bootstrap_weights(runs: np.ndarray, n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """Point weights of one replicate: draw n_runs runs with replacement; a point weighs its run's count."""
    counts = np.bincount(rng.integers(0, n_runs, n_runs), minlength=n_runs)
    return counts[runs].astype(float)


@dataclass(frozen=True)
class Pairing:
    """Runs of different groups that are twins: one configuration (model size, token count, seed) trained once per
    recipe, from the same initialisation and data order, so their losses' noise is shared. `configs[g][k]`: the
    configuration (0..n-1) of group g's run k, over the union of every group's configurations."""

    configs: dict[str, np.ndarray]
    n: int


def replicate_weights(groups: dict[str, Points], pairing: Pairing | None,
                      rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every group's point weights in one replicate. Without a pairing each group's runs are drawn on their own
    (`bootstrap_weights`, group by group). With one, the configurations are drawn (n of the union, with replacement)
    and every group's run of a drawn configuration weighs its count: twins move together, so a difference of their
    losses keeps the little noise it has, where independent draws added each run's whole noise to it. A group
    lacking a configuration gets no point from its draws."""
    if pairing is None:
        return {g: bootstrap_weights(p.runs, p.n_runs, rng) for g, p in groups.items()}
    counts = np.bincount(rng.integers(0, pairing.n, pairing.n), minlength=pairing.n)
    return {g: counts[pairing.configs[g]][p.runs].astype(float) for g, p in groups.items()}


# --- parallel map over bootstrap replicates -------------------------------------------------------

_CTX = None


def _init(ctx, parent: int) -> None:
    global _CTX
    _CTX = ctx
    _end_with(parent)


def _end_with(parent: int) -> None:
    """End this pool worker when `parent` (the process that started it) ends. Each worker holds the write
    end of the pool's task queue too, so a parent killed by SIGTERM, SIGKILL or the OOM killer left its
    workers waiting on that queue forever (`kill` of a `scaling fit`'s pid: two idle processes of ~120 MB
    each, left running)."""
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: (a worker has nothing to save)
    if os.getppid() != parent:  # the parent ended before the line above
        os._exit(1)


def _run_chunk(args):
    fn, chunk = args
    return [fn(_CTX, item) for item in chunk]


def parallel_map(fn, ctx, items: list, workers: int = 2, progress=None) -> list:
    """[fn(ctx, item) for item in items], over `workers` processes (ctx is sent once per worker).

    `fn` must be a module-level function. With workers <= 1 or few items it runs in-process: starting
    processes costs more than a handful of small fits.
    """
    workers = max(1, min(workers, usable_cpus()))
    if workers == 1 or len(items) < 8:
        out = []
        for i, item in enumerate(items):
            out.append(fn(ctx, item))
            if progress:
                progress(i + 1, len(items))
        return out
    n_chunks = min(len(items), workers * 8)  # several chunks per worker: progress and load balance
    chunks = [items[i::n_chunks] for i in range(n_chunks)]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    results: list = [None] * n_chunks
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method), initializer=_init,
                             initargs=(ctx, os.getpid())) as pool:
        futures = {pool.submit(_run_chunk, (fn, c)): i for i, c in enumerate(chunks)}
        done = 0
        from concurrent.futures import as_completed

        for f in as_completed(futures):
            results[futures[f]] = f.result()
            done += len(chunks[futures[f]])
            if progress:
                progress(done, len(items))
    out: list = [None] * len(items)
    for i, chunk_out in enumerate(results):
        out[i::n_chunks] = chunk_out
    return out


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples, NaN samples (failed replicates) left out. An infinite
    sample (a replicate whose multiplier overflowed) is an extreme one, kept: dropped, the interval
    would close in on the finite rest. Where there are infinities the ends are the order statistics
    either side of each percentile (interpolating towards an infinity gives NaN or inf)."""
    s = np.asarray(samples, float)
    s = s[~np.isnan(s)]
    if len(s) < 2:
        return (float("nan"), float("nan"))
    q = (1 - level) / 2 * 100
    if np.isinf(s).any():
        return (float(np.percentile(s, q, method="lower")), float(np.percentile(s, 100 - q, method="higher")))
    lo, hi = np.percentile(s, [q, 100 - q])
    return (float(lo), float(hi))
