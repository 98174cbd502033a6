"""Explicit, counter-based randomness: the same (seed, index) gives the same bits on CPU, GPU and
in the Triton kernels. No global RNG state is ever read.

`hash32` is Chris Wellons' "lowbias32" integer hash. The Triton kernels compute it on uint32 with
wrapping multiplies; here tensors are hashed as int32 holding the same 32 bits (see `_lowbias32_`):
PyTorch's CPU kernels lack unsigned shifts, and int32 is half the bytes of int64.
"""

from __future__ import annotations

import functools
import sys
import zlib
from dataclasses import dataclass, field

import torch

M32 = 0xFFFFFFFF
HASH_C1, HASH_C2 = 0x7FEB352D, 0x846CA68B


Seed = int | torch.Tensor  # a Python int, or a 0-d int64 tensor (so compiled graphs need no recompiles)


@dataclass(frozen=True)
class Seeds:
    """The two seeds one quantization call may use: element/scale rounding and transform signs.
    `row`: optionally, an int64 device tensor [rounding, signs] (a row of QLinear's seed table), which
    the kernels then read as it is (no kernel stacks the two); it holds the values the kernels read
    (its rounding entry may differ from a `rounding` of 0 that a deterministic spec never reads)."""

    rounding: int | torch.Tensor
    signs: int | torch.Tensor
    row: torch.Tensor | None = field(default=None, compare=False, repr=False)


def name_code(name: str) -> int:
    """The integer a name stands for inside `mix` (its CRC-32)."""
    return zlib.crc32(name.encode())


MIX_START = 0x9E3779B9  # mix() of no parts


def mix(*parts: int | str | torch.Tensor) -> int | torch.Tensor:
    """A stable 32-bit seed from (run seed, layer, step, operand, ...). Ints and strings give an
    int; a 0-d int64 tensor among the parts gives a tensor."""
    return mix_from(MIX_START, *parts)


def mix_from(acc: int | torch.Tensor, *parts: int | str | torch.Tensor) -> int | torch.Tensor:
    """mix(*prefix, *parts) from acc = mix(*prefix): seeds that share a prefix fold it once."""
    for p in parts:
        if isinstance(p, str):
            p = name_code(p)
        acc = hash32((acc ^ hash32(p & M32)) & M32)
    return acc


def _mul32(x: int, c: int) -> int:
    return (x * c) & M32


def _i32(v: int) -> int:
    """A uint32 Python int as the int32 with the same bits."""
    return v - (1 << 32) if v >= 1 << 31 else v


def _key_i32(key: int | torch.Tensor) -> int | torch.Tensor:
    """A 32-bit key (a uint32 int, or an int64 tensor) as int32 bits, to xor into int32 tensors."""
    return _as_i32(key) if isinstance(key, torch.Tensor) else _i32(key)


def _as_i32(x: torch.Tensor) -> torch.Tensor:
    """A new int32 tensor holding the low 32 bits of an integer tensor (casts wrap modulo 2^32)."""
    return x.to(torch.int32, copy=True)


def _xorshift_(x: torch.Tensor, shift: int, scratch: torch.Tensor) -> torch.Tensor:
    """x ^= x >> shift (a logical shift: the mask clears the copied sign bits), in place on an int32
    tensor read as uint32; scratch is an int32 buffer like x."""
    torch.bitwise_right_shift(x, shift, out=scratch)
    x ^= scratch.bitwise_and_(M32 >> shift)
    return x


def _lowbias32_(x: torch.Tensor, first_xorshift_done: bool = False) -> torch.Tensor:
    """lowbias32, in place, on an int32 tensor read as uint32. Products wrap modulo 2^32 as in
    uint32 (two's complement on every torch backend). With first_xorshift_done, x has had the
    first step (x ^= x >> 16) already (see `_counter_hashes`)."""
    scratch = torch.empty_like(x)
    if not first_xorshift_done:
        _xorshift_(x, 16, scratch)
    x *= _i32(HASH_C1)
    _xorshift_(x, 15, scratch)
    x *= _i32(HASH_C2)
    return _xorshift_(x, 16, scratch)


def hash32(x: Seed) -> Seed:
    """lowbias32 on Python ints or int64 tensors holding values in [0, 2^32) (the same type back)."""
    if isinstance(x, torch.Tensor):
        return _lowbias32_(_as_i32(x)).to(torch.int64) & M32
    x = x ^ (x >> 16)
    x = _mul32(x, HASH_C1)
    x = x ^ (x >> 15)
    x = _mul32(x, HASH_C2)
    return x ^ (x >> 16)


def seed_key(seed: Seed) -> Seed:
    """The per-stream key mixed into every index hash (an int, or a tensor for a tensor seed)."""
    return hash32((seed ^ 0x9E3779B9) & M32)


def _keyed_bits(hashed_index: torch.Tensor, seed: Seed) -> torch.Tensor:
    """hash32(hashed index ^ seed_key(seed)) on int32 tensors read as uint32."""
    key = seed_key(seed)
    return _lowbias32_(hashed_index ^ _key_i32(key))


def random_bits(seed: Seed, index: torch.Tensor) -> torch.Tensor:
    """32 random bits (int64 in [0, 2^32)) for each element index under `seed`."""
    return _keyed_bits(_lowbias32_(_as_i32(index)), seed).to(torch.int64) & M32


def uniform(seed: Seed, index: torch.Tensor) -> torch.Tensor:
    """float32 uniforms in [0, 1) with 24 random bits, one per index."""
    return _unit_float(_keyed_bits(_lowbias32_(_as_i32(index)), seed))


def _unit_float(bits: torch.Tensor) -> torch.Tensor:
    """The top 24 of 32 random bits (int32 read as uint32) as a float32 in [0, 1), written over the
    bits themselves (each element is read before it is written; no new buffer)."""
    top = bits.bitwise_right_shift_(8).bitwise_and_(0xFFFFFF)
    return torch.mul(top, 1.0 / (1 << 24), out=top.view(torch.float32))


def _laid_out_index(shape: tuple[int, ...], strides: tuple[int, ...]) -> torch.Tensor:
    """The row-major index of each element (int32) of a tensor of this shape and these strides."""
    like = torch.empty_strided(shape, strides, dtype=torch.int32)
    return torch.empty_like(like).copy_(torch.arange(like.numel(), dtype=torch.int32).view(shape))


@functools.lru_cache(maxsize=16)
def _counter_hashes(shape: tuple[int, ...], strides: tuple[int, ...]) -> torch.Tensor:
    """For the row-major index i of each element (laid out as given): hash32(i), then the first
    step of the keyed hash. hash32(h ^ key) begins with y ^= y >> 16, which distributes over the
    xor (logical shifts do): (h ^ key) ^ ((h ^ key) >> 16) = (h ^ h >> 16) ^ (key ^ key >> 16).
    So that step is taken here once on h, and per call on the key alone (`_hash_from_first_step`)."""
    hashed = _lowbias32_(_laid_out_index(shape, strides))
    return _xorshift_(hashed, 16, torch.empty_like(hashed))


def uniform_like(seed: Seed, t: torch.Tensor) -> torch.Tensor:
    """`uniform(seed, i)` for the row-major index i of every element of t: float32, shaped like t
    and, on a CPU, laid out like t (elementwise work with t then reads both in one order). There
    the seed-independent half of the hash (hash32 of each index) is kept for the few shapes a
    training run uses, with the keyed hash's first step (see `_counter_hashes`)."""
    n = t.numel()
    if t.device.type != "cpu" or n > 1 << 22 or torch.compiler.is_compiling():
        return uniform(seed, torch.arange(n, device=t.device).view(t.shape))
    return _unit_float(_hash_from_first_step(_counter_hashes(tuple(t.shape), _dense_strides(t)), seed))


def _dense_strides(t: torch.Tensor) -> tuple[int, ...]:
    """t's strides where they lay it out densely, else row-major ones: the layout for a new tensor
    shaped like t (an expanded t has stride 0: a tensor with its strides cannot be written)."""
    if t.is_contiguous() or (t.dim() == 2 and t.t().is_contiguous()):  # dense already: its own (no meta tensor)
        return tuple(t.stride())
    return tuple(torch.empty_like(t, device="meta").stride())


def _hash_from_first_step(stepped: torch.Tensor, seed: Seed) -> torch.Tensor:
    """hash32(v ^ seed_key(seed)) for values v given as stepped = v ^ v >> 16 (a new int32 tensor
    laid out like stepped): the first step's key side, then the rest of the hash."""
    key = seed_key(seed)
    key = key ^ (key >> 16)
    bits = torch.empty_like(stepped)
    torch.bitwise_xor(stepped, _key_i32(key), out=bits)
    return _lowbias32_(bits, first_xorshift_done=True)


# Stochastic rounding of elements: 16 random bits per element, two elements per hash. Element i
# (row-major) takes the low half (i even) or the high half (i odd) of pair_bits(seed, i >> 1) =
# hash32((i >> 1) ^ seed_key(seed)), as the centred uniform u = (half + 1/2) / 2^16. That is one
# lowbias32 round per two elements: the quantizer kernels are bound by their integer arithmetic under
# SR, and the keyed hash (hash32(hash32(i) ^ key), as `uniform` uses) cost 13 operations a pair where
# this costs 8 (until 2026-12-03 the element stream was that keyed hash). lowbias32 is a bijection
# with a low avalanche bias, so each stream is uniform over its 2^32 pair indices; two streams are the
# same values at pair indices that differ by the xor of their keys (different positions of the
# tensor, or of another operand). SR rounds up when u < p: with 2^16 centred levels, P(up) is p to
# within 2^-17, so SR's bias stays below 2^-17 of a grid step, and p = 0 (a value on the grid) stays
# exact.
PAIR_BITS = 16


def pair_bits(seed: Seed, pair_index: torch.Tensor) -> torch.Tensor:
    """hash32(pair_index ^ seed_key(seed)) for int64 pair indices in [0, 2^32): the 32 bits (int64 in
    [0, 2^32)) that two neighbouring elements' SR uniforms are cut from."""
    return _pair_bits(_as_i32(pair_index), seed).to(torch.int64) & M32


def _pair_bits(index: torch.Tensor, seed: Seed) -> torch.Tensor:
    """pair_bits on an int32 tensor of indices (read as uint32), in place."""
    key = seed_key(seed)
    return _lowbias32_(index.bitwise_xor_(_key_i32(key)))


def _halves_to_unit_(halves: torch.Tensor) -> torch.Tensor:
    """int32 odd values 2 * half + 1 -> float32 value / 2^17, written over the ints (same memory)."""
    return torch.mul(halves, 1.0 / (2 << PAIR_BITS), out=halves.view(torch.float32))


def _pair_halves_(hashes: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> None:
    """2 * half + 1 for the low and high 16 bits of int32 hashes (read as uint32), into lo and hi."""
    torch.bitwise_left_shift(hashes, 1, out=lo)
    lo.bitwise_and_(0x1FFFE).bitwise_or_(1)
    torch.bitwise_right_shift(hashes, 15, out=hi)
    hi.bitwise_and_(0x1FFFE).bitwise_or_(1)  # the mask also clears the copied sign bits


def paired_uniforms(seed: Seed, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The n element uniforms (float32, flat) of stream `seed`, as defined above."""
    pairs = _pair_bits(_as_i32(torch.arange((n + 1) // 2, device=device)), seed)  # (indices past 2^31 wrap)
    halves = torch.empty(pairs.numel(), 2, dtype=torch.int32, device=device)
    _pair_halves_(pairs, halves[:, 0], halves[:, 1])
    return _halves_to_unit_(halves).view(-1)[:n]


def paired_uniform_like(seed: Seed, t: torch.Tensor) -> torch.Tensor:
    """`paired_uniforms` for the row-major index of every element of t: float32, shaped like t and, on
    a CPU, laid out like t (see `uniform_like`; for a 2-D t with an even last dimension, each pair is
    two neighbours along it)."""
    n = t.numel()
    if (t.device.type != "cpu" or n > 1 << 22 or torch.compiler.is_compiling() or t.dim() != 2 or t.shape[1] % 2
            or sys.byteorder != "little"):
        return paired_uniforms(seed, n, t.device).view(t.shape)
    R, K = t.shape
    u = torch.empty_strided(t.shape, _dense_strides(t), dtype=torch.float32)
    pairs = _hash_from_first_step(_pair_counters((R, K // 2), _pair_strides(u)), seed)
    _halves_into_(pairs, u)
    return u.add_(0.5).mul_(1.0 / (1 << PAIR_BITS))  # (half + 1/2) / 2^16, exact


@functools.lru_cache(maxsize=16)
def _pair_counters(shape: tuple[int, ...], strides: tuple[int, ...]) -> torch.Tensor:
    """For the row-major index i of each pair (laid out as given): i ^ i >> 16, pair_bits' first step
    on the index's side (`_hash_from_first_step` takes the key's)."""
    index = _laid_out_index(shape, strides)
    return _xorshift_(index, 16, torch.empty_like(index))


def _halves_into_(pairs: torch.Tensor, u: torch.Tensor) -> None:
    """u[r, 2p + h] = half h (0: the low 16 bits) of the hash pairs[r, p], as float32. The int32
    hashes are read as uint16 in memory order, low half first on a little-endian machine: one
    converting copy where u is row-major, two along its rows where it is column-major. (Shifting and
    masking into u's strided halves took 3.5x the time for a row-major (4096, 128) u on 2 cores.)"""
    R, K = u.shape
    if u.stride(1) == 1 or R == 1:
        u.copy_(pairs.view(torch.uint16))  # (R, K / 2) int32 as (R, K) uint16: pair p at 2p, 2p + 1
    else:  # u's memory is [p][h][r], the halves' [p][r][h]
        halves = pairs.t().view(torch.uint16).unflatten(1, (R, 2))
        rows = u.t().unflatten(0, (K // 2, 2))
        rows[:, 0].copy_(halves[..., 0])
        rows[:, 1].copy_(halves[..., 1])


def _pair_strides(t: torch.Tensor) -> tuple[int, int]:
    """Strides for the (R, K/2) pair hashes of a 2-D t: its own order (row- or column-major)."""
    R, K = t.shape
    return (K // 2, 1) if t.stride(1) == 1 or R == 1 else (1, R)


def random_signs(seed: Seed, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A vector of n signs in {+1, -1} (float32) from the top bit of each index's hash."""
    bits = random_bits(seed, torch.arange(n, device=device))
    return 1.0 - 2.0 * (bits >> 31).to(torch.float32)
