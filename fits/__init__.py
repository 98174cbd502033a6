"""Scaling-law fits per recipe and the penalty-growth verdict. Torch-free: numpy, scipy, polars only.

    import fits
    table = fits.read_table("results.parquet")
    out = fits.analyse(table, law="chinchilla", baseline="bf16", bootstrap=1000)   # = `scaling fit --json`
    fits.predict(out["groups"]["bf16"]["params"], N, D)
    fits.compute_optimal(out["groups"]["bf16"]["params"], C)   # -> N_opt, D_opt, loss_opt

See docs/fits.md.
"""

import os

# scipy's L-BFGS-B calls OpenBLAS on tiny vectors; with its thread pool on a busy machine each call
# waits on waking threads (20x slower on 2 cores). Fits parallelise over processes instead. The
# library reads this once, when scipy loads it, so it must be set before fits imports scipy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fits.analysis import analyse, fit_law  # noqa: E402
from fits.laws import compute_optimal, predict  # noqa: E402
from fits.table import read_table  # noqa: E402

__all__ = ["analyse", "fit_law", "predict", "compute_optimal", "read_table"]
