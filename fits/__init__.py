"""Scaling-law fits per recipe and the penalty-growth verdict. Torch-free: numpy, scipy, polars only.

    import fits
    table = fits.read_table("results.parquet")
    out = fits.analyse(table, law="chinchilla", baseline="bf16", bootstrap=1000)   # `scaling fit --json` less its notes
    fits.predict(out["groups"]["bf16"]["params"], N, D)
    fits.compute_optimal(out["groups"]["bf16"]["params"], C)   # -> N_opt, D_opt, loss_opt
    fits.shared_efficiencies(table, law="quartet")   # effN per forward format, effD per backward format

See docs/fits.md.
"""

from fits.analysis import analyse, fit_law, shared_efficiencies
from fits.laws import compute_optimal, predict
from fits.table import read_table

__all__ = ["analyse", "fit_law", "shared_efficiencies", "predict", "compute_optimal", "read_table"]
