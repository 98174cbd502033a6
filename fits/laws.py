"""Scaling laws in one parametrisation, evaluated in log space.

Chinchilla:   L = E + A/N^α + B/D^β
Quartet form: L = (A/(N·effN)^α + B/(D·effD)^β)^γ + E          (Chinchilla is γ = 1, effN = effD = 1)
Growth:       effN(N) = effN₀·(N/N₀)^κN,  effD(D) = effD₀·(D/D₀)^κD

The fitter works on the vector θ = (a, b, e, α, β, γ, u, v, κN, κD) with A = eᵃ, B = eᵇ, E = eᵉ,
effN₀ = eᵘ, effD₀ = eᵛ (Epoch AI's parametrisation: the log prediction is a log-sum-exp, which stays
finite for any θ). N₀, D₀ are fixed reference points, not parameters.
Users see the named form: {"A", "B", "E", "alpha", "beta", "gamma", "effN", "effD", "kappaN", "kappaD", "N0", "D0"}.
"""

from __future__ import annotations

import numpy as np

THETA = ("a", "b", "e", "alpha", "beta", "gamma", "u", "v", "kappaN", "kappaD")
IDX = {name: i for i, name in enumerate(THETA)}
LAWS = ("chinchilla", "quartet")


def base_theta() -> np.ndarray:
    """θ of the neutral law: γ = 1, efficiencies 1, no growth (the rest is set by a fit)."""
    theta = np.zeros(len(THETA))
    theta[IDX["gamma"]] = 1.0
    return theta


def log_predict(theta: np.ndarray, logN: np.ndarray, logD: np.ndarray, logN0: float = 0.0,
                logD0: float = 0.0, jac: bool = False, recipe: np.ndarray | None = None):
    """log L at each point, and (if jac) d log L / dθ as an (n, 10) array.

    recipe: optional 0/1 per point; the efficiencies apply only where it is 1 (a joint fit of the
    baseline's points, 0, and one recipe's, 1). None: they apply everywhere.
    """
    dN, dD = logN - logN0, logD - logD0
    xN, xD = scaled_logs(theta, logN, logD, dN, dD, recipe)
    if not jac:
        return log_predict_scaled(theta, xN, xD)
    pred, rows = log_predict_scaled(theta, xN, xD, range(len(THETA)), dN, dD, recipe)
    return pred, np.ascontiguousarray(rows.T)


def scaled_logs(theta, logN: np.ndarray, logD: np.ndarray, dN: np.ndarray, dD: np.ndarray,
                recipe: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(log(N·effN(N)), log(D·effD(D))) at each point; dN, dD are log N − log N₀, log D − log D₀.
    θ: anything indexed by THETA's positions (an array, a list of floats, or (10, k, 1) columns)."""
    gN = theta[IDX["u"]] + theta[IDX["kappaN"]] * dN  # log effN(N)
    gD = theta[IDX["v"]] + theta[IDX["kappaD"]] * dD
    if recipe is not None:
        gN, gD = gN * recipe, gD * recipe
    return logN + gN, logD + gD


def log_predict_scaled(theta, xN: np.ndarray, xD: np.ndarray, columns=None, dN: np.ndarray | None = None,
                       dD: np.ndarray | None = None, recipe: np.ndarray | None = None):
    """log L from `scaled_logs`' xN, xD; with `columns` (positions in θ), also d log L / dθ of those
    entries, one row each: a (len(columns), n) array (dN, dD and recipe as `scaled_logs` took them: the
    u, v, κ rows need them). A fit asks only for the entries it moves, and computes xN, xD once where the
    efficiencies stay fixed: the optimiser calls this thousands of times on a handful of points."""
    a, b, e, alpha, beta, gamma = theta[:6]
    t1 = a - alpha * xN
    t2 = b - beta * xD
    s = np.logaddexp(t1, t2)  # log(A/(N effN)^α + B/(D effD)^β)
    pred = np.logaddexp(e, gamma * s)
    if columns is None:
        return pred
    qe = np.exp(e - pred)
    ds = (1.0 - qe) * gamma  # d pred / d s
    da, db = ds * np.exp(t1 - s), ds * np.exp(t2 - s)  # d pred / d a, d b
    if max(columns) >= IDX["u"]:  # d pred / d u, d v: only where the efficiencies apply
        du = -da * alpha if recipe is None else -da * alpha * recipe
        dv = -db * beta if recipe is None else -db * beta * recipe
    derivative = {  # by θ entry, each computed only when asked for
        "a": lambda: da, "b": lambda: db, "e": lambda: qe, "alpha": lambda: -da * xN, "beta": lambda: -db * xD,
        "gamma": lambda: (1.0 - qe) * s, "u": lambda: du, "v": lambda: dv, "kappaN": lambda: du * dN,
        "kappaD": lambda: dv * dD,
    }
    return pred, np.array([derivative[THETA[i]]() for i in columns])


def to_params(theta: np.ndarray, law: str, logN0: float = 0.0, logD0: float = 0.0,
              efficiency: bool = False, growth: bool = False) -> dict:
    """Named parameters of θ: what users, JSON and `predict` see."""
    t = dict(zip(THETA, (float(x) for x in theta)))
    with np.errstate(over="ignore"):  # log A past ~709 (a degenerate fit): A = inf, which the JSON writes as null
        p = {"A": np.exp(t["a"]), "B": np.exp(t["b"]), "E": np.exp(t["e"]), "alpha": t["alpha"], "beta": t["beta"]}
        if efficiency:  # likewise an efficiency's log
            p["effN"], p["effD"] = np.exp(t["u"]), np.exp(t["v"])
    if law == "quartet":
        p["gamma"] = t["gamma"]
    if growth:
        p["kappaN"], p["kappaD"] = t["kappaN"], t["kappaD"]
        p["N0"], p["D0"] = np.exp(logN0), np.exp(logD0)
    return {k: float(v) for k, v in p.items()}


def from_params(params: dict) -> tuple[np.ndarray, float, float]:
    """(θ, log N₀, log D₀) of named parameters; absent ones take neutral values."""
    theta = base_theta()
    theta[IDX["a"]], theta[IDX["b"]], theta[IDX["e"]] = np.log([params["A"], params["B"], params["E"]])
    theta[IDX["alpha"]], theta[IDX["beta"]] = params["alpha"], params["beta"]
    theta[IDX["gamma"]] = params.get("gamma", 1.0)
    theta[IDX["u"]], theta[IDX["v"]] = np.log(params.get("effN", 1.0)), np.log(params.get("effD", 1.0))
    theta[IDX["kappaN"]], theta[IDX["kappaD"]] = params.get("kappaN", 0.0), params.get("kappaD", 0.0)
    return theta, float(np.log(params.get("N0", 1.0))), float(np.log(params.get("D0", 1.0)))


def predict(params: dict, N, D) -> np.ndarray:
    """Loss of a fitted law at (N, D); arrays broadcast."""
    theta, logN0, logD0 = from_params(params)
    logN, logD = np.broadcast_arrays(np.log(np.asarray(N, float)), np.log(np.asarray(D, float)))
    shape = logN.shape
    return np.exp(log_predict(theta, logN.ravel(), logD.ravel(), logN0, logD0)).reshape(shape)


def effective_chinchilla(theta: np.ndarray, logN0: float = 0.0, logD0: float = 0.0):
    """(log A', α', log B', β') with the efficiencies folded in: A'/N^α' + B'/D^β' is the inner sum.

    N·effN(N) = effN₀·N₀^-κN·N^(1+κN), so A' = A·(effN₀·N₀^-κN)^-α and α' = α(1+κN); likewise for D.
    """
    a, b, e, alpha, beta, gamma, u, v, kN, kD = theta
    return (a - alpha * (u - kN * logN0), alpha * (1 + kN), b - beta * (v - kD * logD0), beta * (1 + kD))


def log_compute_optimal(theta: np.ndarray, logC: np.ndarray, logN0: float = 0.0, logD0: float = 0.0):
    """(log N_opt, log D_opt, log L_opt) along C = 6·N·D: the allocation that minimises the loss."""
    la, al, lb, be = effective_chinchilla(theta, logN0, logD0)
    logs = np.asarray(logC, float) - np.log(6.0)
    # A bootstrap replicate's law can have no finite optimum here (exponents that overflow it): NaN,
    # which every caller drops (percentile_ci, nanpercentile), so numpy's warnings would only be noise.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # d/dN [A'N^-α' + B'(s/N)^-β'] = 0  =>  N = (α'A'/(β'B'))^(1/(α'+β')) · s^(β'/(α'+β'))
        logN = (np.log(al) + la - np.log(be) - lb + be * logs) / (al + be)
        logD = logs - logN
        inner = np.logaddexp(la - al * logN, lb - be * logD)
        logL = np.logaddexp(theta[IDX["e"]], theta[IDX["gamma"]] * inner)
    return logN, logD, logL


def compute_optimal(params: dict, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N_opt, D_opt, loss_opt) of a fitted law at compute C = 6·N·D."""
    theta, logN0, logD0 = from_params(params)
    logN, logD, logL = log_compute_optimal(theta, np.log(np.asarray(C, float)), logN0, logD0)
    return np.exp(logN), np.exp(logD), np.exp(logL)
