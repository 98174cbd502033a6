"""Element grids: the RTNE tie tables and saturation of RECIPES.md, exactly, plus codes and FP8."""

from __future__ import annotations

import itertools

import pytest
import torch

from scaling.format_tables import FP8_MAX
from scaling.formats import (
    FP8_DTYPES,
    GRIDS,
    Grid,
    decode,
    encode,
    grid_max,
    round_elements,
    round_fp8_rtne,
    round_fp8_sr,
    round_grid_rtne,
    round_grid_sr,
)
from scaling.quant import QuantSpec, quantize

# value -> RTNE result. E2M1 is RECIPES.md's table verbatim; for E1M2 and INT4 every midpoint goes
# to the neighbour with the even code (level index), i.e. round half to even on the integer grid.
TIES = {
    "e2m1": {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0},
    "e1m2": {0.125: 0.0, 0.375: 0.5, 0.625: 0.5, 0.875: 1.0, 1.125: 1.0, 1.375: 1.5, 1.625: 1.5},
    "int4": {0.5: 0.0, 1.5: 2.0, 2.5: 2.0, 3.5: 4.0, 4.5: 4.0, 5.5: 6.0, 6.5: 6.0},
}
SATURATE = {"e2m1": [6.0001, 7.0, 1e30], "e1m2": [1.7501, 1.875, 2.0, 1e30], "int4": [7.0001, 7.5, 8.0, 1e30]}
DTYPES = [torch.float32, torch.bfloat16]


def _rtne(values, fmt, cap=None):
    return round_elements(torch.tensor(values, dtype=torch.float32), fmt, cap, "rtne").tolist()


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4"])
def test_rtne_tie_table(fmt):
    ties = TIES[fmt]
    assert _rtne(list(ties), fmt) == list(ties.values())


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4"])
def test_rtne_off_ties_and_saturation(fmt):
    levels = GRIDS[fmt]
    assert _rtne(list(levels), fmt) == list(levels)
    for mid in TIES[fmt]:
        below, above = torch.nextafter(torch.tensor([mid, mid]), torch.tensor([0.0, 100.0])).tolist()
        lo = max(v for v in levels if v < mid)
        hi = min(v for v in levels if v > mid)
        assert _rtne([below, above], fmt) == [lo, hi]
    assert _rtne(SATURATE[fmt], fmt) == [grid_max(fmt)] * len(SATURATE[fmt])


def test_int4_rtne_is_round_half_even():
    x = torch.arange(0, 7.5, 0.125)
    assert torch.equal(round_elements(x, "int4", None, "rtne"), torch.round(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4"])
def test_ties_and_saturation_through_quantize(fmt, dtype):
    """The same table through the full quantizer (signed, under a unit block scale): the tensor and
    block amax is the grid max, so s_enc / s_b = 1 and each element is rounded as given."""
    gmax = grid_max(fmt)
    spec = QuantSpec(elem=fmt, block=(1, 16), scale="e4m3", tensor_scale=False)
    # E4M3 block scale (amax / gmax) must be exactly 1: amax = gmax.
    ties = list(TIES[fmt].items())
    row = [gmax] + [v for v, _ in ties] + [-v for v, _ in ties] + [0.0]
    want = [gmax] + [r for _, r in ties] + [-r for _, r in ties] + [0.0]
    q = quantize(torch.tensor([row], dtype=dtype), spec)
    assert q.block_scale.item() == 1.0
    assert q.values[0].tolist() == want


ALL_GRIDS = [(fmt, cap) for fmt, levels in GRIDS.items() for cap in (None,) + levels[1:-1]]


def _hard_magnitudes() -> torch.Tensor:
    """Every level and midpoint with its float32 neighbours, a fine sweep, subnormals, huge, inf, NaN."""
    points = sorted({v for levels in GRIDS.values() for v in levels}
                    | {(a + b) / 2 for levels in GRIDS.values() for a, b in itertools.pairwise(levels)})
    t = torch.tensor(points)
    sweep = torch.arange(0, 8.5, 1 / 64)
    odd = torch.tensor([1e-45, 1e-40, 1.2e-38, 3e38, float("inf"), float("nan")])
    return torch.cat([t, torch.nextafter(t, torch.zeros_like(t)), torch.nextafter(t, t + 1), sweep, odd])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))  # tells -0.0 from +0.0


def _signed(mag: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs mag and -mag, and the results want and -want: the sign of v < 0, so -0.0 and NaN
    give +0, and a negative value rounded to zero gives -0.0."""
    v = torch.cat([mag, -mag])
    return v, torch.where(v < 0, -torch.cat([want, want]), torch.cat([want, want]))


@pytest.mark.parametrize("fmt, cap", ALL_GRIDS)
def test_rtne_is_nearest_level_ties_to_even_index(fmt, cap):
    """round_grid_rtne against its definition, by brute force over the levels (float64)."""
    grid = Grid.of(fmt, cap)
    mag = _hard_magnitudes()
    levels = torch.tensor(grid.levels, dtype=torch.float64)
    dist = (mag.double().clamp(max=grid.max).nan_to_num(0.0)[:, None] - levels).abs()
    nearest = dist == dist.min(1, keepdim=True).values
    even = torch.arange(len(levels)) % 2 == 0
    idx = torch.where(nearest.sum(1) > 1, (nearest & even).int().argmax(1), nearest.int().argmax(1))
    v, want = _signed(mag, levels[idx].float())
    assert _same_bits(round_grid_rtne(v, grid), want)


@pytest.mark.parametrize("fmt, cap", ALL_GRIDS)
def test_sr_is_upper_neighbour_when_u_below_fraction(fmt, cap):
    """round_grid_sr against its definition: away from zero exactly when u < (|v| - lo) / (hi - lo)
    (float64), u including the fraction itself and its float32 neighbours."""
    grid = Grid.of(fmt, cap)
    mag = _hard_magnitudes().clamp(max=grid.max).nan_to_num(0.0).double()
    levels = torch.tensor(grid.levels, dtype=torch.float64)
    lo_idx = (mag[:, None] >= levels).sum(1) - 1
    hi_idx = (lo_idx + 1).clamp(max=len(levels) - 1)
    lo, hi = levels[lo_idx], levels[hi_idx]
    frac = torch.where(hi > lo, (mag - lo) / (hi - lo), 0.0).float()
    for u in (frac, torch.nextafter(frac, torch.zeros_like(frac)), torch.nextafter(frac, torch.ones_like(frac)),
              torch.rand(frac.shape, generator=torch.Generator().manual_seed(0))):
        u = u.clamp(0, 1 - 2.0 ** -24)
        v, want = _signed(_hard_magnitudes(), torch.where(u.double() < frac.double(), hi, lo).float())
        assert _same_bits(round_grid_sr(v, grid, torch.cat([u, u])), want)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_sr_is_upper_neighbour_when_u_below_fraction(fmt):
    """round_fp8_sr against its definition over the whole FP8 grid: the neighbour above exactly when
    u < (mag - lo) / (hi - lo) (float64), at values on the grid, between, subnormal and beyond."""
    codes = torch.arange(256, dtype=torch.uint8).view(FP8_DTYPES[fmt]).float()
    levels = codes[torch.isfinite(codes) & (codes >= 0)].unique().double()
    between = levels[:-1] + (levels[1:] - levels[:-1]) * torch.tensor([[0.25], [0.5], [0.875]]).double()
    mag = torch.cat([levels, between.flatten(), torch.tensor([grid_max(fmt) * 2, float("inf")]).double()])
    m = mag.clamp(max=grid_max(fmt))
    lo_idx = (m[:, None] >= levels).sum(1) - 1
    lo, hi = levels[lo_idx], levels[(lo_idx + 1).clamp(max=len(levels) - 1)]
    frac = torch.where(hi > lo, (m - lo) / (hi - lo), 0.0)
    rand = torch.rand(len(frac), generator=torch.Generator().manual_seed(1))
    for u in (frac.float(), torch.full_like(frac, 0.5).float(), rand):
        u = u.clamp(0, 1 - 2.0 ** -24)
        want = torch.where(u.double() < frac, hi, lo).float()
        assert _same_bits(round_fp8_sr(mag.float(), fmt, u), want)


def test_capped_grid():
    assert Grid.of("e2m1", 4.0).levels == (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
    assert _rtne([3.5, 4.9, 5.0, 6.0, 100.0], "e2m1", cap=4.0) == [4.0, 4.0, 4.0, 4.0, 4.0]
    with pytest.raises(ValueError, match="not a level"):
        Grid.of("e2m1", 5.0)


@pytest.mark.parametrize("fmt, fmax, above", [("e4m3", 448.0, [449.0, 464.0, 480.0, 1e6, 1e30]),
                                               ("e5m2", 57344.0, [57345.0, 61440.0, 65536.0, 1e30])])
def test_fp8_saturation(fmt, fmax, above):
    """Torch's float8 casts do not saturate (they give NaN/inf); the formats module does."""
    x = torch.tensor(above + [-v for v in above])
    assert round_fp8_rtne(x, fmt).tolist() == [fmax] * len(above) + [-fmax] * len(above)
    assert grid_max(fmt) == fmax


def test_the_torch_free_fp8_maxima_are_the_fp8_dtypes():
    """format_tables writes the FP8 maxima down (QuantSpec reads them without torch): they must be the
    largest values of the dtypes the quantizer casts to, for every FP8 format and no other."""
    assert set(FP8_MAX) == set(FP8_DTYPES)
    for fmt, dtype in FP8_DTYPES.items():
        assert FP8_MAX[fmt] == torch.finfo(dtype).max


def test_fp8_rtne_ties():
    # E4M3: between 1 and 1.125 (step 1/8) the midpoint 1.0625 goes to 1 (even mantissa), 1.1875 to 1.25.
    assert round_fp8_rtne(torch.tensor([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10]), "e4m3").tolist() == \
        [1.0, 1.25, 0.0, 2.0 ** -8]
    assert round_fp8_rtne(torch.tensor([1.125, 1.375]), "e5m2").tolist() == [1.0, 1.5]


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4"])
def test_encode_decode_roundtrip(fmt):
    codes = torch.arange(16, dtype=torch.uint8)
    values = decode(codes, fmt)
    assert values[:8].tolist() == list(GRIDS[fmt]) and values[8:].tolist() == [-v for v in GRIDS[fmt]]
    nonzero = values != 0  # -0 encodes as +0
    assert torch.equal(encode(values, fmt)[nonzero], codes[nonzero])
    with pytest.raises(ValueError, match="not on the"):
        encode(torch.tensor([0.3]), fmt)
