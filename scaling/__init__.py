"""fp4-scaling: scaling-law studies of FP4 LLM pretraining recipes.

Importing this package is cheap and torch-free (fits/ and reports/ rely on that);
import the submodules you need, e.g. ``from scaling.quant import QuantSpec``.
"""

from __future__ import annotations

__version__ = "0.1.0"


def git_commit(short: bool = False) -> str | None:
    """The commit of the checkout this package runs from (None outside a git checkout)."""
    import subprocess
    from pathlib import Path

    try:
        out = subprocess.run(["git", "rev-parse", *(["--short"] if short else []), "HEAD"], capture_output=True,
                             text=True, timeout=10, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def usable_cpus() -> int:
    """The cores this process may run on (a SLURM allocation or `taskset` narrows them), not the node's."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1
