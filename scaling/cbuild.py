"""Build one of this package's C sources into a shared library (once, cached per source, flags,
compiler and CPU) and load it: the fused CPU quantizer, ReLU² and RoPE (scaling/cpu_*.c).

Built with the system C compiler (`$CC`, else `cc`) into `$SCALING_CACHE` (scaling.files.cache_dir).
No compiler, or a failed build: one notice, and the caller's PyTorch fallback runs.
`SCALING_CPU_KERNEL=0` turns every library off (A/B runs).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from scaling.files import cache_dir

# No FMA contraction and no -ffast-math: every float operation stays the reference's IEEE one.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-std=c11", "-fPIC", "-shared", "-pthread")
# Tried in this order, the first set the compiler takes: OpenMP (the library then shares torch's
# libgomp threads; without it, pthreads) and 512-bit vectors where the CPU has AVX-512 (an x86
# compiler's flag; 10-30% faster per operand on the development VM's Xeon, same bits).
OPTIONAL_FLAGS = (("-fopenmp", "-mprefer-vector-width=512"), ("-fopenmp",), ())


def _cpu_id() -> str:
    """What -march=native depends on: the machine and its CPU flags (a shared cache dir may serve
    several kinds of node)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = platform.processor()
    return platform.machine() + flags


def _build(compiler: str, source: Path) -> Path:
    """The shared library for this source, flags, compiler and CPU: built once, atomically."""
    flags = " | ".join(" ".join(FLAGS + extra) for extra in OPTIONAL_FLAGS)
    key = hashlib.sha256(b"\0".join([source.read_bytes(), flags.encode(), compiler.encode(),
                                     _cpu_id().encode()])).hexdigest()[:16]
    lib = cache_dir() / f"{source.stem}-{key}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
    os.close(fd)
    try:
        for i, extra in enumerate(OPTIONAL_FLAGS):
            try:
                _compile(compiler, FLAGS + extra, source, tmp)
                break
            except subprocess.CalledProcessError:
                if i == len(OPTIONAL_FLAGS) - 1:
                    raise
        os.replace(tmp, lib)  # a concurrent build writes the same bytes
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return lib


def _compile(compiler: str, flags: tuple[str, ...], source: Path, out: str) -> None:
    subprocess.run([compiler, *flags, str(source), "-o", out, "-lm"], check=True, capture_output=True, text=True)


def load_library(source: Path, what: str, fallback: str) -> ctypes.CDLL | None:
    """A C source of this package built (once, cached) and loaded, or None, with one notice saying
    that `what` is unavailable and `fallback` runs instead, when there is no compiler or it fails;
    None without a notice when SCALING_CPU_KERNEL=0."""
    if os.environ.get("SCALING_CPU_KERNEL", "1") == "0":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    try:
        if compiler is None:
            raise RuntimeError(f"no C compiler ({os.environ.get('CC', 'cc')}) on PATH")
        return ctypes.CDLL(str(_build(compiler, source)))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        lines = (getattr(e, "stderr", "") or str(e)).strip().splitlines()
        detail = next((line for line in lines if "error" in line), lines[-1] if lines else repr(e))
        print(f"note: {what} is unavailable ({detail.strip()}); {fallback} runs instead (same bits, slower). "
              "Install a C compiler (gcc) to fix.", file=sys.stderr)
        return None
