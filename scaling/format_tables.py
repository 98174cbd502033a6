"""The element and scale formats as plain numbers: grids, float layouts, maxima, kernel codes.

No torch here: a `QuantSpec` is checked against these tables, and so are the recipes a sweep plan, a
report or `scaling recipes` reads on a machine without torch. `scaling.formats` rounds onto them (and
names them too, for the quantizers and kernels).
"""

from __future__ import annotations

GRIDS: dict[str, tuple[float, ...]] = {
    "e2m1": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
    "e1m2": (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75),
    "int4": (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0),
}
# The largest value of each FP8 element format (OCP FP8: E4M3FN has no infinity, so 448; E5M2 57344),
# the `torch.finfo(...).max` of the dtype `scaling.formats.FP8_DTYPES` casts to (tests/test_formats.py checks).
FP8_MAX: dict[str, float] = {"e4m3": 448.0, "e5m2": 57344.0}
# Every element format as a float format: (mantissa bits, smallest normal). The spacing of its values
# at a magnitude a is 2^-mantissa_bits times the power of two at or below a, never less than at the
# smallest normal: E2M1 steps 0.5 on [0, 2), 1 on [2, 4), 2 on [4, 6]; E1M2 and INT4 are uniform.
FLOAT_LAYOUT: dict[str, tuple[int, float]] = {
    "e2m1": (1, 1.0), "e1m2": (2, 1.0), "int4": (2, 4.0), "e4m3": (3, 2.0 ** -6), "e5m2": (2, 2.0 ** -14)}
ELEMENT_FORMATS = tuple(GRIDS) + tuple(FP8_MAX)
# emax of each element format: the exponent of its largest normal power of two (OCP MX table).
EMAX = {"e2m1": 2, "e1m2": 0, "int4": 2, "e4m3": 8, "e5m2": 15}
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127
# The integer each element and block-scale format is known by inside the kernels (Triton and C).
ELEM_CODES = {"e2m1": 0, "e1m2": 1, "int4": 2, "e4m3": 3, "e5m2": 4}
SCALE_CODES = {"e8m0": 0, "e4m3": 1, "fp32": 2}


def grid_max(fmt: str) -> float:
    """The largest magnitude of an element format."""
    return GRIDS[fmt][-1] if fmt in GRIDS else FP8_MAX[fmt]
