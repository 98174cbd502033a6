"""Does a recipe's penalty against the baseline grow with compute?

Model: the baseline law (fitted on the baseline recipe) with per-recipe efficiencies,
    L_r(N, D) = L_base(N·effN(N), D·effD(D)),  effN(N) = effN₀(N/N₀)^κN,  effD(D) = effD₀(D/D₀)^κD.
Along each law's compute-optimal allocation (C = 6ND), the compute-equivalent multiplier
    m(C) = (baseline compute reaching L_r*(C)) / C
is a power of C: log m(C) = const + (a_r/a_b − 1)·log C with a = α'β'/(α'+β') (the exponent of the
compute-optimal inner term), so "the penalty grows" means a_r < a_b, i.e. m falls as C grows.
With κN = κD = 0, m(C) = effN₀·effD₀ at every C. `ratio_per_decade` = m(10C)/m(C) = 10^(a_r/a_b − 1).

Verdict (the rule also in docs/fits.md), with p the likelihood-ratio test's of κN = κD = 0, Holm-adjusted
over the recipes judged together in one analysis (`holm`: each is tested at 0.05, so with 5 independent
tests under the null at least one would otherwise reject κ = 0 ~23% of the time); the family is the recipes
whose penalty the runs identify and whose p is finite (`analysis._judged`: an unidentified one's p is no p-value):
  inconclusive   whatever the numbers where the runs do not identify the penalty (`analysis._identification`:
                 a flat direction of the baseline's law or of the recipe's efficiencies, an estimate or interval
                 end at an optimiser bound, failed or degenerate bootstrap replicates): its numbers are then where
                 the optimiser stopped, float noise, and neither growth nor its absence can be read off them;
  inconclusive   whatever the numbers where the bootstrap cannot decide (`undecidable`: fewer than
                 MIN_REPLICATES replicates fitted, or every replicate giving the same ratio; resampling
                 the runs does not move the fit) or where p or the interval is not finite (no bootstrap);
  grows          p < 0.05 AND the bootstrap 95% interval of ratio_per_decade lies entirely below 1 (the
                 multiplier falls with compute);
  shrinks        p < 0.05 AND the interval lies entirely above 1 (the multiplier rises with compute: the
                 recipe gains ground on the baseline);
  does not grow  otherwise, if the interval's lower end is ≥ 1 − margin (the multiplier cannot fall by
                 more than `margin` per decade of compute; default 10%);
  inconclusive   otherwise.
The intervals are each recipe's own 95% intervals; only the test is adjusted for the family.
"""

from __future__ import annotations

import numpy as np
from scipy.special import chdtrc, erf  # chdtrc: chi2.sf's function, without scipy.stats' ~0.4 s import

from fits.fit import DELTA
from fits.laws import effective_chinchilla, log_compute_optimal
from scaling.console import count

ALPHA = 0.05
# The smallest p worth printing as a number. The test's chi-square reference is calibrated at the 5% and 1% levels
# (`scaling bench calibration`, 40 sweeps a case); a smaller p is the asymptotic formula's tail, not the data's
# (6.4e-26 on a 4 x 3 synthetic sweep), and beyond a statistic of ~1,490 it underflows to 0, which printed "p = 0".
# Below it the report and the terminals say p < P_FLOOR; the JSON keeps the number.
P_FLOOR = 1e-4
MARGIN = 0.10
MIN_REPLICATES = 40  # the fewest with a replicate beyond each 2.5% end of a 95% percentile interval


def _inner_exponent(theta: np.ndarray, logN0: float, logD0: float) -> tuple[float, float]:
    """(a, log K) with inner*(s) = K·s^-a the compute-optimal inner sum at s = C/6."""
    la, al, lb, be = effective_chinchilla(theta, logN0, logD0)
    a = al * be / (al + be)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # as laws.log_compute_optimal
        logN = (np.log(al) + la - np.log(be) - lb) / (al + be)  # log N_opt at s = 1
        logK = np.logaddexp(la - al * logN, lb + be * logN)
    return float(a), float(logK)


def ratio_per_decade(base: np.ndarray, recipe: np.ndarray, logN0: float, logD0: float) -> float:
    """m(10C)/m(C) = 10^(a_r/a_b − 1): how the compute multiplier of `recipe` (θ with its u, v, κN, κD on the baseline's
    law, N₀ and D₀ its reference points) against `base` (the baseline's θ) changes per decade of compute. The one
    formula for a fit's estimate (`curves`) and a synthetic truth's (`fits.synthetic.true_ratio_per_decade`)."""
    a_b, _ = _inner_exponent(base, 0.0, 0.0)
    a_r, _ = _inner_exponent(recipe, logN0, logD0)
    return float(10 ** (a_r / a_b - 1))


def curves(base: np.ndarray, recipe: np.ndarray, logC: np.ndarray, logN0: float, logD0: float) -> dict:
    """Multiplier, loss gap (L_r* − L_b*, nats) and baseline loss along compute, plus ratio_per_decade.

    base: θ of the baseline law; recipe: the same θ with the recipe's u, v, κN, κD set (same E and γ,
    so equal losses mean equal inner sums).
    """
    a_b, logK_b = _inner_exponent(base, 0.0, 0.0)
    a_r, logK_r = _inner_exponent(recipe, logN0, logD0)
    logs = logC - np.log(6.0)
    inner_r = logK_r - a_r * logs
    log_mult = (logK_b - inner_r) / a_b - logs  # baseline s with the same inner sum, over s
    # A degenerate law (a bootstrap replicate of few runs) gives inf here: its replicate is dropped
    # from the intervals, and the JSON writes a point estimate's inf as null.
    with np.errstate(over="ignore", invalid="ignore"):
        loss_r = np.exp(log_compute_optimal(recipe, logC, logN0, logD0)[2])
        loss_b = np.exp(log_compute_optimal(base, logC)[2])
        return {"multiplier": np.exp(log_mult), "gap": loss_r - loss_b, "loss_baseline": loss_b,
                "ratio_per_decade": ratio_per_decade(base, recipe, logN0, logD0)}


# Residual scale (log loss) below which a fit is exact: float32 resolves a loss to ~1e-7 of itself, so
# no measured loss fits closer; what is left there is the optimiser's round-off, not noise to test by.
EXACT_SIGMA = 1e-7


def lr_test(objective_null: float, objective_alt: float, residuals: np.ndarray, n_runs: int, n_params: int,
            delta: float = DELTA, df: int = 2) -> tuple[float, float]:
    """Test of κN = κD = 0 for the Huber fits: (statistic, p-value); both NaN where no noise is left to
    test against (an exact fit, residuals below EXACT_SIGMA, or no more points than parameters: a
    guard, since a recipe is fitted only with more points than that, `analysis._shortfall`).

    The Huber loss is not a likelihood, so twice the drop in objective is rescaled by E ψ' / E ψ²
    (ψ = ρ'): Ronchetti's drop-in-dispersion test for M-estimators, χ²(df) under the null. Both
    expectations are taken under normal errors whose scale is the alternative's residuals' with
    their degrees of freedom, σ² = Σ r² / (n − n_params). Taken from the residuals themselves (a
    kernel density for E ψ' = P(|r| ≤ δ)) they overstated the statistic ~4× on a 3 × 3 grid: a Huber
    fit with δ = 1e-3 puts a point inside δ for each parameter it has, so more residuals sit near 0
    than errors do, and the 5% test rejected a true κ = 0 in 60% of sweeps (`scaling bench
    calibration`). With heavier-tailed errors σ² grows with the tails, which makes the test
    conservative, not optimistic. Points are scaled to runs (× n_runs / n_points): checkpoints of one
    run are not independent evidence.
    """
    r = np.asarray(residuals, float)
    n = len(r)
    sigma = float(np.sqrt(np.sum(r**2) / (n - n_params))) if n > n_params else 0.0
    if sigma < EXACT_SIGMA:
        return float("nan"), float("nan")
    z = delta / sigma
    p_in = float(erf(z / np.sqrt(2.0)))  # E ψ' = P(|e| ≤ δ)
    psi2 = sigma**2 * (p_in - 2.0 * z * float(np.exp(-z * z / 2.0)) / np.sqrt(2.0 * np.pi)) + delta**2 * (1.0 - p_in)
    stat = max(0.0, 2.0 * (objective_null - objective_alt) * p_in / psi2 * n_runs / n)
    return stat, float(chdtrc(df, stat))


NO_BOOTSTRAP = "no bootstrap ran (--bootstrap 0), so there is no interval to judge by"


def undecidable(ratio_ci: tuple[float, float], n_replicates: int) -> str | None:
    """Why the bootstrap cannot decide a verdict whatever its interval says, in words; None where it can."""
    if n_replicates < MIN_REPLICATES:
        return (f"only {count(n_replicates, 'bootstrap replicate')} fitted; a 95% interval "
                f"needs at least {MIN_REPLICATES} (--bootstrap)")
    lo, hi = ratio_ci
    if np.isfinite(lo) and np.isfinite(hi) and hi - lo <= 1e-9 * max(1.0, abs(hi)):
        return ("every bootstrap replicate gave the same ratio per decade: resampling the runs does not move "
                "the fit, so the data do not identify the penalty (a loss that does not fall with compute?)")
    return None


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm–Bonferroni step-down adjusted p-values: {name: adjusted p}.

    The recipes of one analysis are judged together against one baseline, each at ALPHA; the chance
    of at least one false rejection of κ = 0 among them then exceeds ALPHA (~23% for 5 independent tests
    under the null).
    Holm's adjustment holds that family-wise error at ALPHA with no assumption on how the tests
    depend on each other (they share the baseline's points, so they do). Sorted ascending, the i-th
    (from 0) becomes max over j ≤ i of min(1, (m − j)·p_(j)), m the number of finite p-values; a
    non-finite p (an untestable recipe) is left out of the family and comes back unchanged.
    """
    finite = sorted((p, name) for name, p in p_values.items() if np.isfinite(p))
    out = dict(p_values)
    running = 0.0
    for j, (p, name) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - j) * p))  # the max keeps the order of the raw p's
        out[name] = running
    return out


def verdict(p_value: float, ratio_ci: tuple[float, float], margin: float = MARGIN,
            n_replicates: int | None = None, identified: bool = True) -> str:
    """The rule in this module's docstring; `p_value` the test's p as the rule reads it (Holm-adjusted
    where several recipes are judged together), `n_replicates` (the bootstrap replicates fitted) where known,
    `identified`: whether the runs identify the penalty (False: inconclusive, whatever the numbers)."""
    lo, hi = ratio_ci
    if not (identified and np.isfinite(lo) and np.isfinite(hi) and np.isfinite(p_value)):
        return "inconclusive"
    if n_replicates is not None and undecidable(ratio_ci, n_replicates):
        return "inconclusive"
    if p_value < ALPHA and hi < 1.0:
        return "grows"
    if p_value < ALPHA and lo > 1.0:
        return "shrinks"
    if lo >= 1.0 - margin:
        return "does not grow"
    return "inconclusive"


def rule_text(margin: float = MARGIN) -> str:
    return (f"grows: LR test of kappaN = kappaD = 0 gives p < {ALPHA}, Holm-adjusted over the recipes judged "
            f"together, and the bootstrap 95% CI of ratio_per_decade (multiplier at 10C / multiplier at C) lies "
            f"below 1; shrinks: that adjusted p < {ALPHA} and the CI lies above 1; does not grow: the CI's lower "
            f"end is >= {1 - margin:g} (the multiplier falls by at most {margin:.0%} per decade of compute); "
            f"the CIs are each recipe's own 95% intervals; else inconclusive, as also with fewer than "
            f"{MIN_REPLICATES} bootstrap replicates, an interval of zero width, or a penalty the runs do not identify")


def left_out(fitted: dict) -> str:
    """The reasons `analyse` left recipes out of the fits (its "skipped"), in one line."""
    return "; ".join(reason for _, reason in sorted(fitted.get("skipped", {}).items()))


def no_penalty_reason(fitted: dict, baseline: str) -> str:
    """Why no recipe has a penalty against the baseline (when none has), in a sentence: `scaling fit` and
    the report both say it, so a table without the baseline's runs does not read as a forgotten table."""
    if fitted.get("skipped"):
        return f"No recipe could be judged against {baseline}: {left_out(fitted)}."
    if baseline not in fitted["groups"]:
        return f"One group ({', '.join(fitted['groups'])}) and no baseline ({baseline}): there is no penalty to judge."
    return f"Only the baseline ({baseline}) has results, so there is no penalty to judge."
