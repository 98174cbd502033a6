"""`scaling bench fit`: one law fitted to synthetic points, with a bootstrap, timed."""

from __future__ import annotations

import os
import time

import numpy as np

from fits.analysis import fit_and_judge
from scaling import usable_cpus
from fits.synthetic import EPOCH, synthetic_table


def bench_fit(points: int = 500, bootstrap: int = 1000, workers: int = 2, seed: int = 0) -> dict:
    """Time a Chinchilla fit of `points` synthetic runs (Epoch's law, 0.5% noise) plus `bootstrap`
    replicates over `workers` processes. The target: 500 points x 1,000 replicates in under 60 s on 2 cores."""
    n_ratios = 10
    sizes = np.geomspace(1e7, 1e10, max(1, points // n_ratios))
    table = synthetic_table(sizes=sizes, ratios=np.geomspace(2, 200, n_ratios), noise=0.005, seed=seed)
    t0, cpu0 = time.perf_counter(), os.times()
    out = fit_and_judge(table, law="chinchilla", baseline=None, bootstrap=bootstrap, seed=seed, workers=workers,
                        top=50, with_penalty=False)
    wall, cpu1 = time.perf_counter() - t0, os.times()
    cpu = sum(cpu1[:4]) - sum(cpu0[:4])  # user + system, this process and its workers
    group = next(iter(out["groups"].values()))
    return {"points": group["n_points"], "bootstrap": bootstrap, "workers": workers, "cpus": usable_cpus(),
            "wall_s": wall, "cpu_s": cpu, "fit_s": out["timing"]["fit_s"], "bootstrap_s": out["timing"]["bootstrap_s"],
            "ms_per_replicate": 1e3 * out["timing"]["bootstrap_s"] / max(1, bootstrap),
            "truth": EPOCH, "params": group["params"], "ci95": group["ci95"]}


if __name__ == "__main__":
    import json

    print(json.dumps(bench_fit(), indent=1))
