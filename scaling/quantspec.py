"""QuantSpec: how one GEMM operand is quantized, as data (no torch).

A recipe is six of these (`scaling.recipes`); `scaling.quant` quantizes by one (and names it too:
``from scaling.quant import QuantSpec`` is the same class). Kept apart from the quantizer so that reading
and checking recipes (`scaling recipes`, `scaling sweep plan`) works where torch is not installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from scaling.format_tables import ELEMENT_FORMATS, EMAX, FLOAT_LAYOUT, GRIDS, grid_max

# The Hadamard group sizes a transform may use (scaling.transforms rotates in groups of these).
HADAMARD_SIZES = (16, 32, 128)
SIGN_POLICIES = ("ones", "run", "step", "layer_step")
SCALE_FORMATS = ("e8m0", "e4m3", "fp32")
E4M3_MIN_NORMAL = FLOAT_LAYOUT["e4m3"][1]  # 2^-6


@dataclass(frozen=True)
class QuantSpec:
    """How one GEMM operand is quantized. Frozen: a recipe is data."""

    elem: str = "e2m1"                        # e2m1 | e1m2 | int4 | e4m3 | e5m2
    cap: float | None = None                  # restrict the grid (E2M1 capped at 4: amax maps to 4)
    block: tuple[int, int] | None = (1, 16)   # (rows, along K); (16, 16) is 2-D; None = per-tensor
    scale: str = "e4m3"                       # block-scale format: e8m0 | e4m3 | fp32
    tensor_scale: bool = True                 # second-level FP32 tensor scale (NV two-level scheme)
    scale_bound: float = 448.0                # the block scale the tensor's amax maps to (256 with 4/6,
                                              # leaving 4/6's amax -> 4 candidate room up to 384)
    rounding: str = "rtne"                    # rtne | sr
    transform: int = 0                        # Hadamard group size along K: 0 (none), 16, 32, 128
    signs: str = "ones"                       # ones (deterministic H) | run | step | layer_step
    four_over_six: bool = False               # 4/6 block-scale selection
    eden: bool = False                        # MS-EDEN (EDEN correction + SR of E4M3 block scales)
    headroom: float = 1.0                     # block amax maps to elem_max / headroom

    def __post_init__(self) -> None:
        if isinstance(self.block, list):
            object.__setattr__(self, "block", tuple(self.block))
        problems = list(self._problems())
        if problems:
            raise ValueError("; ".join(problems))

    def _problems(self):
        # Types first: TOML hands strings and floats where a typo was made, and a string "no" would
        # read as true, a float block size would fail mid-run.
        for name in ("tensor_scale", "four_over_six", "eden"):
            if not isinstance(getattr(self, name), bool):
                yield f"{name} must be true or false (got {getattr(self, name)!r})"
        for name in ("scale_bound", "headroom", *(("cap",) if self.cap is not None else ())):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                yield f"{name} must be a positive number (got {value!r})"
                return
        if isinstance(self.transform, bool) or not isinstance(self.transform, int):
            yield f"transform must be an integer: 0 or a Hadamard size in {HADAMARD_SIZES} (got {self.transform!r})"
            return
        if self.scale == "e4m3" and self.scale_bound > 448:
            yield f"scale_bound must be at most 448, E4M3's largest value (got {self.scale_bound!r})"
        if self.elem not in ELEMENT_FORMATS:
            yield f"elem must be one of {', '.join(ELEMENT_FORMATS)} (got {self.elem!r})"
            return
        if self.cap is not None and (self.elem not in GRIDS or self.cap not in GRIDS[self.elem]):
            yield f"cap must be a level of a 4-bit grid (got {self.cap!r} for {self.elem})"
        elif self.cap is not None and self.scale == "e8m0" and self.block is not None:
            # the floor rule reads the whole grid's emax (formats.e8m0_floor_scale): a block's amax lands in
            # [2^emax, 2^(emax + 1)) whatever the cap, so a cap below that binade clips every block's top values
            emax = EMAX[self.elem]
            top = [lvl for lvl in GRIDS[self.elem] if lvl >= 2.0 ** emax]
            if self.cap < 2.0 ** emax:
                yield (f"an E8M0 (MX) block scale maps a block's amax to [{2.0 ** emax:g}, {2.0 ** (emax + 1):g}) on "
                       f"the {self.elem} grid whatever the cap (OCP floor rule, emax {emax}), so a cap of {self.cap:g} "
                       f"would clip every block's largest values to it: cap at {' or '.join(f'{t:g}' for t in top)}, "
                       "or use E4M3 block scales (which map the amax to the cap)")
        if self.block is not None:
            if len(self.block) != 2 or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.block):
                yield (f"block must be [rows, cols] of positive integers, or per-tensor (None; \"tensor\" in a "
                       f"recipe file) (got {self.block!r})")
            elif self.block[0] not in (1, self.block[1]):
                yield f"block must be 1xN or NxN (got {self.block[0]}x{self.block[1]})"
        if self.scale not in SCALE_FORMATS:
            yield f"scale must be one of {', '.join(SCALE_FORMATS)} (got {self.scale!r})"
        if self.block is None and (self.scale in ("e8m0", "e4m3") or not self.tensor_scale):
            # per-tensor scaling is always an FP32 amax scale (quantize ignores `scale` and `tensor_scale` there):
            # a power-of-two (E8M0) or E4M3 per-tensor scale, or none, would be asked for and not made
            said = f'scale = "{self.scale}"' if self.scale in ("e8m0", "e4m3") else "tensor_scale = false"
            yield (f"per-tensor scaling (block \"tensor\") is one FP32 scale per tensor, so {said} would be "
                   "ignored: set scale = \"fp32\" and tensor_scale = true, or give blocks")
        elif self.scale == "e8m0" and self.tensor_scale:
            yield "an E8M0 (MX) block scale takes no tensor scale: set tensor_scale = false"
        elif self.scale == "e4m3" and not self.tensor_scale and self.block_target * E4M3_MIN_NORMAL > 1:
            # with no tensor scale to lift it, the block scale amax / target of a block of amax 1 (FP8
            # elements: 1/448, 1/57344) is an E4M3 subnormal or 0, and the elements saturate or vanish
            yield (f"an E4M3 block scale without a tensor scale is amax / {self.block_target:g} for {self.elem} "
                   f"elements, below E4M3's smallest normal ({E4M3_MIN_NORMAL:g}) for any block of amax under "
                   f"{self.block_target * E4M3_MIN_NORMAL:g}, so ordinary data quantizes to zeros or saturates: "
                   'set tensor_scale = true (two-level scaling), or scale = "e8m0" (MX scaling)')
        # headroom sets an E4M3/FP32 block scale's target (amax -> elem_max / headroom), scale_bound the two-level
        # tensor scale (amax -> elem_max * scale_bound); elsewhere quantize reads neither, and a value asked for
        # would be ignored (the recipe table would still show the headroom)
        if self.headroom != 1.0 and (self.block is None or self.scale == "e8m0"):
            where = ("per-tensor scaling maps the tensor's amax to the element max and" if self.block is None else
                     "an E8M0 (MX) block scale follows the OCP floor rule (2^(floor(log2 amax) - emax)) and")
            yield f"{where} would ignore headroom = {self.headroom:g}: set headroom = 1"
        if self.scale_bound != 448.0 and (self.block is None or not self.tensor_scale):
            where = ("per-tensor scaling (one FP32 scale: amax -> element max)" if self.block is None else
                     "a block scale without a tensor scale (tensor_scale = false)")
            yield (f"scale_bound sets the two-level FP32 tensor scale (amax -> element max x scale_bound); {where} "
                   f"would ignore scale_bound = {self.scale_bound:g}: leave it at 448")
        if self.rounding not in ("rtne", "sr"):
            yield f"rounding must be 'rtne' or 'sr' (got {self.rounding!r})"
        if self.transform not in (0, *HADAMARD_SIZES):
            yield f"transform must be 0 or a Hadamard size in {HADAMARD_SIZES} (got {self.transform!r})"
        if self.signs not in SIGN_POLICIES:
            yield f"signs must be one of {', '.join(SIGN_POLICIES)} (got {self.signs!r})"
        if self.signs in SIGN_POLICIES[1:] and not self.transform:  # (a misspelt policy: one message)
            yield (f'signs = "{self.signs}" draws random signs for a transform: set transform to 16, 32 or 128, '
                   'or signs = "ones" for none')
        if (self.four_over_six or self.eden) and (self.scale != "e4m3" or self.block is None):
            said = "four_over_six" if self.four_over_six else "eden"
            yield (f'4/6 and MS-EDEN need E4M3 block scales: set scale = "e4m3" with blocks (e.g. block = [1, 16]), '
                   f"or {said} = false")
        if self.four_over_six and self.elem != "e2m1":
            yield "4/6 is defined for the E2M1 grid"
        elif self.four_over_six and self.cap is not None:
            # quantize's second candidate maps the amax to 4 whatever the cap: under cap 4 it is the first
            yield (f"4/6 chooses per block between amax -> 6 and amax -> 4 on the whole E2M1 grid, so it takes no cap "
                   f'(got {self.cap:g}): remove the cap (cap = "none" in a recipe file) or set four_over_six = false')
        if self.eden and (not self.transform or self.transform % self.block_k):
            yield "MS-EDEN needs a Hadamard transform whose group is a multiple of the block"
        if self.eden and self.rounding == "sr":
            yield ("MS-EDEN rounds its elements to nearest and its block scales stochastically (RECIPES.md), so it "
                   'takes no element SR: set rounding = "rtne", or eden = false for plain SR')

    # ---- derived properties
    @property
    def elem_max(self) -> float:
        return self.cap if self.cap is not None else grid_max(self.elem)

    @property
    def encode_numerator(self) -> float:
        """The tensor encode scale's numerator: element max x scale bound (element max per-tensor)."""
        return self.elem_max * (self.scale_bound if self.block is not None else 1.0)

    @property
    def block_target(self) -> float:
        """What a block's amax maps to: element max / headroom."""
        return self.elem_max / self.headroom

    @property
    def block_k(self) -> int:
        return self.block[1] if self.block else 1

    @property
    def block_rows(self) -> int:
        return self.block[0] if self.block else 1

    @property
    def random_rounding(self) -> bool:
        """Whether rounding reads a seed: SR elements, or MS-EDEN's stochastically rounded scales."""
        return self.rounding == "sr" or self.eden

    @property
    def needs_seed(self) -> bool:
        return self.random_rounding or self.signs != "ones"

    @property
    def has_tensor_scale(self) -> bool:
        """Whether a GEMM on this operand must multiply its output by 1 / tensor scale (else it is 1)."""
        return self.block is None or self.tensor_scale

    @property
    def bf16_exact(self) -> bool:
        """Whether every GEMM operand value (element x block scale) is a BF16 number: with an E8M0 or
        E4M3 block scale, or none (per-tensor), at most 8 significant bits; an FP32 block scale can
        carry 24, which a BF16 operand would round. (Outside it: MXFP8 blocks of amax below 2^-116, whose
        E4M3 subnormals times the E8M0 scale fall below BF16's smallest subnormal; docs/numerics.md.)"""
        return self.block is None or self.scale != "fp32"

    @property
    def axis_free(self) -> bool:
        """Whether quantizing a matrix along either axis gives the same values: square (or no) blocks,
        no transform, and rounding that depends neither on element order (SR indices, 4/6 and
        MS-EDEN sums) nor on the axis. NVFP4's 16x16 weight tiles are so: dgrad can reuse fprop's W."""
        return self.transposable and not self.four_over_six

    @property
    def transposable(self) -> bool:
        """Whether this operand's values, made along one axis, can serve the GEMM that reads the matrix
        along the other: square (or no) blocks, no transform, no SR draws or MS-EDEN sums (which follow
        the axis). 4/6 qualifies though it is not `axis_free`: its choice is the tile's, which made
        again along the other axis could differ on a tie of float32 sums. So dgrad reuses fprop's W for
        NVFP4's 16x16 tiles, with 4/6 or without (RECIPES.md: "W: the same 16x16 values")."""
        square = self.block is None or self.block_rows == self.block_k
        return square and not self.transform and self.rounding == "rtne" and not self.eden

    @property
    def k_multiple(self) -> int:
        """K must be a multiple of this (the block and the Hadamard group)."""
        return math.lcm(self.block_k, self.transform or 1)

    def describe(self) -> str:
        """A short human description, e.g. 'RHT16(run) NV e2m1 1x16 e4m3+fp32 SR', 'NV e2m1 1x16 e4m3+fp32 4/6 bound 256'."""
        if self.block is None:
            base = f"{self.elem} per-tensor"
        else:
            kind = "MX" if self.scale == "e8m0" else ("NV" if self.tensor_scale else "block")
            if self.elem in ("e1m2", "int4") and self.scale == "e4m3":
                kind = "uniform"
            scale = self.scale + ("+fp32" if self.tensor_scale else "")
            base = f"{kind} {self.elem} {self.block[0]}x{self.block[1]} {scale}"
        parts = []
        if self.transform:
            parts.append(f"{'H' if self.signs == 'ones' else 'RHT'}{self.transform}"
                         + ("" if self.signs == "ones" else f"({self.signs})"))
        parts.append(base)
        if self.cap is not None:
            parts.append(f"cap {self.cap:g}")
        if self.eden:
            parts.append("MS-EDEN")
        elif self.rounding == "sr":
            parts.append("SR")
        if self.four_over_six:
            parts.append("4/6")
        # the fields that tell two specs apart where they differ from the defaults (nvfp4_4over6's E4M3 bound;
        # MS-EDEN's headroom), so that two different specs never read the same
        if self.block is not None and self.tensor_scale and self.scale_bound != 448.0:
            parts.append(f"bound {self.scale_bound:g}")
        if self.headroom != 1.0:
            parts.append(f"headroom {self.headroom:.4g}")
        return " ".join(parts)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["block"] = list(self.block) if self.block else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "QuantSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        d = dict(d)
        if d.get("block") is not None:
            if not isinstance(d["block"], (list, tuple)):
                raise ValueError(f"block must be [rows, k] (e.g. [1, 16], or [16, 16] for 2-D tiles; \"tensor\" "
                                 f"in a recipe file for per-tensor scaling), got {d['block']!r}")
            d["block"] = tuple(d["block"])
        return cls(**d)

    def but(self, **changes) -> "QuantSpec":
        return replace(self, **changes)
