"""Keep OpenBLAS single-threaded while fitting.

scipy's L-BFGS-B calls BLAS on vectors of a few elements; with OpenBLAS's thread pool on a busy
machine every call waits for sleeping threads to wake (measured: 20x slower on 2 cores). Fits
parallelise over processes instead. OpenBLAS reads OPENBLAS_NUM_THREADS only when it loads, so for
libraries already loaded we call their set_num_threads (what threadpoolctl does, without the dependency).
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager

_NAMES = (  # (set, get) symbol pairs of the OpenBLAS builds numpy and scipy wheels ship, and plain OpenBLAS
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


def _openblas() -> list[tuple]:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    except OSError:  # not Linux: leave the libraries as they are
        return []
    found = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                found.append((getattr(lib, set_name), getattr(lib, get_name)))
                break
    return found


@contextmanager
def single_threaded_blas():
    """Run the block with every loaded OpenBLAS at one thread; restore the previous counts after."""
    libs = _openblas()
    saved = [(set_, int(get_())) for set_, get_ in libs]
    for set_, _ in saved:
        set_(1)
    try:
        yield
    finally:
        for set_, n in saved:
            set_(n)
