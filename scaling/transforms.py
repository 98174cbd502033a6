"""Hadamard transforms along the last axis, in contiguous groups of n (16, 32 or 128).

H_n is the Sylvester Hadamard matrix normalised by 1/sqrt(n); the random variant (RHT) is
H_n . diag(s) with signs s from an explicit seed. The rotation of a row group x (length n) is
x' = (s * x) H_n, so rotating both GEMM operands along K leaves their product unchanged:
(A Q)(B Q)^T = A B^T with Q = diag(s) H_n orthogonal.

The reference computes the rotation as a fast Walsh-Hadamard transform: log2(n) butterfly stages
(a, b) -> (a + b, a - b) with stride 1, 2, 4, ..., then one multiply by fp32(1/sqrt(n)). That fixes
the float32 rounding exactly, and the Triton kernels run the same stages in the same order.
"""

from __future__ import annotations

import functools
import math

import torch

from scaling.seeds import random_signs

def hadamard_matrix(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The normalised Sylvester Hadamard matrix H_n (symmetric, orthogonal)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(dtype)


# fp32(1/sqrt(n)) for every power of two we may meet, computed once (no tensor work while tracing).
_NORM = {1 << k: float(torch.tensor(1.0 / math.sqrt(1 << k), dtype=torch.float32, device="cpu")) for k in range(13)}


def norm_factor(n: int) -> float:
    """fp32(1/sqrt(n)), the single normalising multiply after the butterflies."""
    return _NORM[n]


def fwht(x: torch.Tensor, n: int, signs: torch.Tensor | None = None) -> torch.Tensor:
    """Normalised Walsh-Hadamard transform of each contiguous group of n along the last axis (fp32),
    of signs * x when a sign vector (length n) is given.

    The result keeps x's memory layout: when the last axis is not the fastest one (a tensor
    quantized along dim 0), every butterfly then runs over long contiguous rows, with no transpose.
    """
    if x.shape[-1] % n:
        raise ValueError(f"last axis {x.shape[-1]} is not a multiple of the Hadamard size {n}")
    stages = n.bit_length() - 1
    buffers = [torch.empty_like(x) for _ in range(2)]  # the stages write them in turn
    y = x
    if signs is not None:  # into the buffer the first stage does not write
        torch.mul(x.unflatten(-1, (-1, n)), signs, out=buffers[1].unflatten(-1, (-1, n)))
        y = buffers[1]
    for stage in range(stages):
        h = 1 << stage  # pairs (i, i + h) in each run of 2h along the last axis (n is a multiple)
        a, b = y.unflatten(-1, (-1, 2, h)).unbind(-2)
        a_plus_b, a_minus_b = buffers[stage % 2].unflatten(-1, (-1, 2, h)).unbind(-2)
        torch.add(a, b, out=a_plus_b)
        torch.sub(a, b, out=a_minus_b)
        y = buffers[stage % 2]
    return torch.mul(y, norm_factor(n), out=buffers[stages % 2])


def rotate(x: torch.Tensor, n: int, signs: torch.Tensor | None) -> torch.Tensor:
    """x' = (s * x) H_n per group of n along the last axis. signs=None means all ones."""
    return fwht(x, n, signs)


def unrotate(y: torch.Tensor, n: int, signs: torch.Tensor | None) -> torch.Tensor:
    """The inverse of `rotate`: x = s * (y H_n) (H_n is its own inverse)."""
    x = fwht(y, n)
    if signs is not None:
        x.unflatten(-1, (-1, n)).mul_(signs)  # x is fwht's own buffer
    return x


def signs_for(policy: str, n: int, seed: int | None, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The sign vector a transform uses: None for a deterministic Hadamard, else from the seed."""
    if policy == "ones":
        return None
    if seed is None:
        raise ValueError("a random Hadamard transform needs an explicit sign seed")
    if isinstance(seed, int) and torch.device(device).type == "cpu":
        return _cpu_signs(seed, n)
    return random_signs(seed, n, device)


@functools.lru_cache(maxsize=64)
def _cpu_signs(seed: int, n: int) -> torch.Tensor:
    """random_signs on a CPU, kept: a "run" policy asks for the same vector at every call, and
    hashing 16 indices costs dozens of small tensor ops. Callers only read it."""
    return random_signs(seed, n, "cpu")
