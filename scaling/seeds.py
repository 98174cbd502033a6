"""Explicit, counter-based randomness: the same (seed, index) gives the same bits on CPU, GPU and
in the Triton kernels. No global RNG state is ever read.

`hash32` is Chris Wellons' "lowbias32" integer hash. The Triton kernels compute it on uint32 with
wrapping multiplies; here it runs on int64 tensors holding uint32 values, with the multiply split
into 16-bit halves so nothing overflows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

M32 = 0xFFFFFFFF
HASH_C1, HASH_C2 = 0x7FEB352D, 0x846CA68B


@dataclass(frozen=True)
class Seeds:
    """The two seeds one quantization call may use: element/scale rounding and transform signs."""

    rounding: int
    signs: int


def mix(*parts: int | str) -> int:
    """A stable 31-bit seed from a tuple of ints/strings (run seed, layer, step, operand...)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, HASH_C1)
    x = x ^ (x >> 15)
    x = _mul32(x, HASH_C2)
    return x ^ (x >> 16)


def seed_key(seed: int) -> int:
    """The per-stream key the kernels receive as a plain integer."""
    return int(hash32(torch.tensor([(seed ^ 0x9E3779B9) & M32], dtype=torch.int64))[0])


def random_bits(seed: int, index: torch.Tensor) -> torch.Tensor:
    """32 random bits (int64 in [0, 2^32)) for each element index under `seed`."""
    return hash32(hash32(index.to(torch.int64) & M32) ^ seed_key(seed))


def uniform(seed: int, index: torch.Tensor) -> torch.Tensor:
    """float32 uniforms in [0, 1) with 24 random bits, one per index."""
    return (random_bits(seed, index) >> 8).to(torch.float32) * (1.0 / (1 << 24))


def random_signs(seed: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A vector of n signs in {+1, -1} (float32) from the top bit of each index's hash."""
    bits = random_bits(seed, torch.arange(n, device=device))
    return 1.0 - 2.0 * (bits >> 31).to(torch.float32)
