"""Element and scale formats: grids, max values, encode/decode, RTNE and SR onto a grid.

Two kinds of element format:
- small grids (E2M1, E1M2, INT4): eight non-negative levels, used with a sign. A value's magnitude
  goes to the nearest level, ties to the level with the even index (the even code), which
  reproduces RECIPES.md's tie table: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. Each
  grid is a tiny float format (`FLOAT_LAYOUT`), so rounding is round(v / spacing) * spacing with the
  spacing a power of two picked per element.
- FP8 (E4M3FN, E5M2): RTNE by torch's float8 casts (IEEE round-to-nearest-even), after clamping
  to +-max because the casts do not saturate; SR in units of the spacing, as on the small grids.

Element rounding keeps the sign of each float32 value: negative exactly where v < 0 (-0.0 and NaN
give +0, or a positive NaN on FP8). Every function here is what the Triton kernels reproduce bit
for bit: comparisons, multiplications and divisions by powers of two, torch.round/floor/ceil, and
nothing order-dependent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

# The formats' tables live in the torch-free scaling.format_tables (QuantSpec checks against them without
# torch); the quantizers and kernels read them here, beside the rounding onto them.
from scaling.format_tables import (ELEM_CODES, EMAX, E8M0_MAX_EXP, E8M0_MIN_EXP,  # noqa: F401
                                   FLOAT_LAYOUT, GRIDS, SCALE_CODES, grid_max)

FP8_DTYPES: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class Grid:
    """A small non-negative grid, optionally capped (e.g. E2M1 capped at 4 for `nvfp4_cap4`), with
    its float layout (`FLOAT_LAYOUT`)."""

    levels: tuple[float, ...]
    mantissa_bits: int
    min_normal: float

    @classmethod
    @functools.lru_cache(maxsize=None)  # frozen: one per (format, cap)
    def of(cls, fmt: str, cap: float | None = None) -> "Grid":
        levels = GRIDS[fmt]
        if cap is not None:
            if cap not in levels:
                raise ValueError(f"cap {cap} is not a level of {fmt}: {levels}")
            levels = tuple(v for v in levels if v <= cap)
        return cls(levels, *FLOAT_LAYOUT[fmt])

    @property
    def max(self) -> float:
        return self.levels[-1]

    def spacing(self, v: torch.Tensor) -> torch.Tensor | float:
        """The distance between the levels around each float32 magnitude |v| <= max, a power of
        two: a float when the grid lies within one binade (uniform), else a tensor like v."""
        if self.max < 2 * self.min_normal:
            return self.min_normal * 2.0 ** -self.mantissa_bits
        return float_spacing(v, self.mantissa_bits, self.min_normal)


def float_spacing(v: torch.Tensor, mantissa_bits: int, min_normal: float) -> torch.Tensor:
    """The spacing of a float format's values at each float32 magnitude |v| (a power of two): from
    the exponent bits of v, 2^-mantissa_bits times the power of two at or below |v|, never less
    than at the smallest normal."""
    binade = (v.view(torch.int32) & 0x7F800000).view(torch.float32)  # 2^floor(log2 |v|); 0 if subnormal
    return binade.clamp_(min=min_normal).mul_(2.0 ** -mantissa_bits)


def _in_range(v: torch.Tensor, grid: Grid, out: torch.Tensor | None) -> torch.Tensor:
    """v saturated at +-max, with -0.0 and NaN as +0 (no level is nearer NaN than another), in out
    (a new tensor if None)."""
    return torch.clamp(v, -grid.max, grid.max, out=out).add_(0.0).nan_to_num_(0.0)


def round_grid_rtne(v: torch.Tensor, grid: Grid, out: torch.Tensor | None = None) -> torch.Tensor:
    """Round float32 values to the nearest signed grid level: |v| to the nearest level, ties to the
    even index, saturating at the max, with v's sign (-0.3 gives -0.0); -0.0 and NaN give +0.
    The result goes to `out` (which may be v) or a new tensor.

    Levels are multiples of the local spacing, and every run of equal spacing starts at a level of
    even index that is an even multiple of that spacing. So round(v / spacing) (half to even,
    symmetric in sign) times the spacing is the nearest level with ties to the even index. The
    spacing is a power of two: the division and the multiplication are exact.
    """
    m = _in_range(v, grid, out)
    step = grid.spacing(m)
    return m.div_(step).round_().mul_(step)


def round_grid_sr(v: torch.Tensor, grid: Grid, u: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Stochastic rounding with v's sign: |v| goes to the level above with probability
    (|v| - lo) / (hi - lo) for its neighbours lo <= |v| < hi, exactly when u (uniforms in [0, 1)) is
    below that fraction. E[q] = v inside the range; beyond it, saturate; -0.0 and NaN give +0.
    The result goes to `out` (which may be v) or a new tensor.

    In units of the local spacing (a power of two, so exact) lo is floor(|v|) and the fraction
    above it is exact (`_sr_in_steps_`). The sign rides on the spacing: 0 times a negative spacing
    is the -0.0 of a small negative value.
    """
    m = _in_range(v, grid, out)
    step = grid.spacing(m)
    signed_step = (step if isinstance(step, torch.Tensor) else torch.full_like(m, step)).copysign_(m)
    return torch.mul(_sr_in_steps_(m.div_(signed_step), u), signed_step, out=m)


def _sr_in_steps_(pos: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """SR of values in units of their spacing (|pos| exact): floor(pos), plus 1 exactly where
    u < pos - floor(pos) (fl(fraction - u) has the sign of fraction - u, so its ceiling is 1 there and
    0 or -0 elsewhere). pos is overwritten."""
    lo = pos.floor()
    return lo.add_(pos.sub_(lo).sub_(u).ceil_())


@functools.lru_cache(maxsize=None)
def _fp8_values(dtype: torch.dtype) -> torch.Tensor:
    """The float32 value of each of the 256 codes of an FP8 dtype, by torch's own cast."""
    return torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float32)


def _fills_memory_from_start(t: torch.Tensor) -> bool:
    """Whether t's elements are exactly the first numel elements of its memory (in some order of
    its dimensions): then t.as_strided((numel,), (1,)) lists them all, in memory order."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return t.storage_offset() == 0


def fp8_to_float32(q: torch.Tensor) -> torch.Tensor:
    """q.to(float32) for an FP8 tensor, same values and layout. On a CPU by table lookup: torch's CPU
    cast from FP8 is a scalar loop, about 4x slower than the lookup over the 256 codes."""
    if q.device.type != "cpu" or torch.compiler.is_compiling() or not _fills_memory_from_start(q):
        return q.to(torch.float32)
    out = torch.empty_like(q, dtype=torch.float32)  # q's strides, so both list elements in one order
    n = q.numel()
    codes = q.view(torch.uint8).as_strided((n,), (1,)).to(torch.int32)
    torch.index_select(_fp8_values(q.dtype), 0, codes, out=out.as_strided((n,), (1,)))
    return out


def round_fp8_rtne(mag: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round float32 to an FP8 format (RTNE), saturating to +-max. Works on signed values."""
    fmax = grid_max(fmt)
    return fp8_to_float32(mag.clamp(-fmax, fmax).to(FP8_DTYPES[fmt]))


def round_fp8_sr(mag: torch.Tensor, fmt: str, u: torch.Tensor) -> torch.Tensor:
    """Stochastic rounding of non-negative float32 onto an FP8 grid (used for MS-EDEN's E4M3
    scales): the FP8 neighbour above with probability (mag - lo) / (hi - lo), exactly when u (in
    [0, 1)) is below it; saturating at the max. As `round_grid_sr`, in units of the spacing."""
    m = mag.clamp(0, grid_max(fmt))
    step = float_spacing(m, *FLOAT_LAYOUT[fmt])
    # The result is on the grid, so the FP8 cast keeps it; it also gives a NaN of mag (and a zero
    # of m's sign) the bits that the FP8 cast of mag gives.
    return fp8_to_float32(_sr_in_steps_(m / step, u).mul_(step).copysign_(m).to(FP8_DTYPES[fmt]))


def round_elements(v: torch.Tensor, fmt: str, cap: float | None, rounding: str,
                   u: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Round float32 values onto an element format (saturating), keeping the sign: negative
    exactly where v < 0. u: uniforms in [0, 1) for SR. The result goes to `out` (which may be v:
    the quantizer's temporaries are large, and a fresh buffer costs more than the arithmetic) or a
    new tensor."""
    if fmt in GRIDS:
        grid = Grid.of(fmt, cap)
        return round_grid_rtne(v, grid, out) if rounding == "rtne" else round_grid_sr(v, grid, u, out)
    mag = round_fp8_rtne(v.abs(), fmt) if rounding == "rtne" else round_fp8_sr(v.abs(), fmt, u)
    return torch.copysign(mag, (v + 0.0).nan_to_num_(0.0), out=out)  # v + 0.0: -0.0 becomes +0


# --- scale formats -----------------------------------------------------------------------------

def e8m0_floor_scale(amax: torch.Tensor, elem_fmt: str) -> torch.Tensor:
    """OCP MX shared scale: 2^(floor(log2(amax)) - emax_elem), clamped to the E8M0 range.
    An all-zero block gets scale 1 (its elements are 0 whatever the scale)."""
    _, e = torch.frexp(amax)  # amax = m * 2^e with m in [0.5, 1): floor(log2 amax) = e - 1, exactly
    exp = (e - 1 - EMAX[elem_fmt]).clamp(E8M0_MIN_EXP, E8M0_MAX_EXP)
    exp = torch.where(amax > 0, exp, torch.zeros_like(exp))
    return torch.ldexp(torch.ones_like(amax), exp)


def e4m3_scale(value: torch.Tensor) -> torch.Tensor:
    """A block scale stored in E4M3: RTNE, saturating at E4M3's largest value, 448."""
    return round_fp8_rtne(value, "e4m3")


# --- encode / decode (4-bit codes: sign << 3 | level index) --------------------------------------

def encode(values: torch.Tensor, fmt: str, cap: float | None = None) -> torch.Tensor:
    """Grid values -> uint8 codes (sign bit 3, level index bits 0-2). Values must lie on the grid."""
    levels = torch.tensor(Grid.of(fmt, cap).levels, dtype=torch.float32, device=values.device)
    mag = values.abs().to(torch.float32)
    idx = torch.searchsorted(levels, mag.contiguous())
    if not torch.equal(levels[idx.clamp(max=len(levels) - 1)], mag):
        raise ValueError(f"values are not on the {fmt} grid")
    return (idx | ((values < 0).long() << 3)).to(torch.uint8)


def decode(codes: torch.Tensor, fmt: str, cap: float | None = None) -> torch.Tensor:
    """uint8 codes -> float32 grid values."""
    levels = torch.tensor(Grid.of(fmt, cap).levels, dtype=torch.float32, device=codes.device)
    c = codes.long()
    mag = levels[c & 7]
    return torch.where((c >> 3) & 1 == 1, -mag, mag)
