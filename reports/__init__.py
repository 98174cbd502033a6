"""Reports: a sweep's results (or any results table) -> one HTML page and its Markdown twin.

`build(source, out_dir, ...)` writes index.html (self-contained), report.md, figures/*.png,
results.csv and fits.json. Reads result tables only and never imports torch.
"""

from reports.build import build

__all__ = ["build"]
