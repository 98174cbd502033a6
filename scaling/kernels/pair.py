"""Both GEMM operands of one activation in one read: a (T, d) tensor quantized along its last axis
(K = d: fprop's X, dgrad's dY) and along dim 0 (K = T: wgrad's X and dY), bit for bit the two
`quant.gemm_operand` calls.

QLinear quantizes x and dY twice each. Apart, that is two reads of the tensor from DRAM, plus the
amax pass of two-level scaling. Here a program quantizes a tile of BK tokens x BR features along
the tokens as `_quantize_kernel` does along dim 0 (the tile held features x tokens, a thread holding
every token of its features), then loads the same tile again, now from the cache, laid out along the
features, quantizes it along them, and stores both operands in x's layout. The amax pass finds both
tensor amaxes (each after its own rotation) in one read of DRAM too.

The two specs share what the tile's scaling needs (`pairable`: element and scale formats, blocks
of 1 x 16 or 1 x 32); each has its own rounding, transform and seeds.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from scaling import formats
from scaling.kernels import supports
from scaling.kernels.quantize import (RECIPROCAL_TARGETS, _abs_rotated, _abs_rotation, _atomic_max, _encode_scale,
                                      _last_first, _load_rotated, _load_tile, _offsets_pass_int32,
                                      _program_signs, _quantize_tile, _rotate, _store_halves, _stream_key, _tile_max,
                                      _tile_offsets, _tuning, _wide_strides, autotuned, tile_candidates,
                                      tuned_config, untuned_args)
from scaling.quant import QuantSpec, scale_constants
from scaling.transforms import norm_factor


@triton.jit
def _last_axis_tile(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, signs_lo, signs_hi, BR: tl.constexpr,
                    BK: tl.constexpr, HAD_L: tl.constexpr, LOG2H_L: tl.constexpr, NORM_L: tl.constexpr,
                    SIGNS_L: tl.constexpr, HALVES: tl.constexpr):
    """The program's tile as (BK tokens, BR features), loaded again in the layout of a tile along a
    contiguous K (16-byte vectors along the features: the read after the first hits the cache, not
    DRAM), rotated along the features; HALVES: loaded as halves (`_load_halves`: blocks of 16 and an
    RHT16 in registers, no shuffles). (Transposing dim 0's tile in registers instead gave sm_90 code of about as many
    instructions with 1.3-2x the registers (168-255 against 80-192), and the H200's tuner picked
    the reloaded tile for both of nvfp4's pairs.)"""
    xl, _ = _load_rotated(x_ptr, pid_k, pid_r, T, D, stride_k, stride_r, signs_lo, signs_hi, 1.0, BK, BR, HAD_L,
                          LOG2H_L, NORM_L, SIGNS_L, HALVES, 0, False, False)
    return xl


@triton.jit
def _pair_amax_kernel(x_ptr, amax_last_ptr, amax_first_ptr, seeds_last_ptr, seeds_first_ptr, D: tl.constexpr, T,
                      TILE: tl.constexpr, BK: tl.constexpr, NARROW: tl.constexpr, I64: tl.constexpr,
                      HAD_L: tl.constexpr, LOG2H_L: tl.constexpr, NORM_L: tl.constexpr, SIGNS_L: tl.constexpr,
                      HAD_F: tl.constexpr, LOG2H_F: tl.constexpr, NORM_F: tl.constexpr, SIGNS_F: tl.constexpr,
                      ITERS: tl.constexpr, HALVES: tl.constexpr):
    """Both tensor amaxes of x (T, D): after the last axis's rotation (features) and after dim 0's
    (tokens), from one DRAM read of each (BK tokens, BR features) tile; a program takes ITERS
    consecutive tiles along the tokens, keeps each element's running maxima and ends with an atomic
    max each (as `_amax_kernel`). The tile is held as dim 0's canonical view, (BR features, BK
    tokens); without a rotation along the features its max is taken as it is (a max is exact in any
    order), else from the tile reloaded along the features (`_pair_abs`; HALVES as `_amax_kernel`'s).
    The normalisations are applied to the maxima (rounding is monotone)."""
    BR: tl.constexpr = TILE // BK
    pid_r = _last_first(0)  # (from the end: the quantize pass then starts on what the L2 cache holds)
    stride_r, stride_k = _wide_strides(1, D, I64)
    signs_lo, signs_hi = _program_signs(seeds_last_ptr, BR, HAD_L, SIGNS_L, HALVES == 1)
    signs_f, _ = _program_signs(seeds_first_ptr, BK, HAD_F, SIGNS_F, 0)
    pid_k = _last_first(1) * ITERS
    most_l, most_f = _pair_abs(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, signs_lo, signs_hi, signs_f, BR, BK,
                               NARROW, HAD_L, LOG2H_L, SIGNS_L, HAD_F, LOG2H_F, SIGNS_F, HALVES)
    for i in range(1, ITERS):  # (the first tile outside the loop: no max with zeros)
        tile_l, tile_f = _pair_abs(x_ptr, pid_r, pid_k + i, D, T, stride_r, stride_k, signs_lo, signs_hi, signs_f, BR,
                                   BK, NARROW, HAD_L, LOG2H_L, SIGNS_L, HAD_F, LOG2H_F, SIGNS_F, HALVES)
        most_l, most_f = tl.maximum(most_l, tile_l), tl.maximum(most_f, tile_f)
    _atomic_max(amax_last_ptr, _tile_max(most_l) * NORM_L)
    _atomic_max(amax_first_ptr, _tile_max(most_f) * NORM_F)


@triton.jit
def _pair_abs(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, signs_lo, signs_hi, signs_f, BR: tl.constexpr,
              BK: tl.constexpr, NARROW: tl.constexpr, HAD_L: tl.constexpr, LOG2H_L: tl.constexpr,
              SIGNS_L: tl.constexpr, HAD_F: tl.constexpr, LOG2H_F: tl.constexpr, SIGNS_F: tl.constexpr,
              HALVES: tl.constexpr):
    """What the pair amax needs of |the tile rotated along the features| and of |the tile rotated
    along the tokens|, unnormalised (`_abs_rotation`: each rotation's last stage as |a| + |b|): the
    tile as loaded without a rotation along the features; else the tile reloaded along them as the
    single amax pass reads it (`_abs_rotated`, with its HALVES: under RHT16 1 as halves, 2 whole with
    the last stage across lanes)."""
    x = _load_tile(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, 1.0, BR, BK, NARROW, False)
    if HAD_L == 0:
        last = tl.abs(x)
    else:
        last, _ = _abs_rotated(x_ptr, pid_k, pid_r, T, D, stride_k, stride_r, signs_lo, signs_hi, 1.0, BK, BR, HAD_L,
                               LOG2H_L, SIGNS_L, HALVES, 0, False, False)
    return last, _abs_rotation(x, signs_f, BR, BK, HAD_F, LOG2H_F, SIGNS_F)


@triton.jit
def _pair_kernel(x_ptr, last_ptr, first_ptr, amax_last_ptr, amax_first_ptr, inv_last_ptr, inv_first_ptr,
                 seeds_last_ptr, seeds_first_ptr, factor_last_ptr, factor_first_ptr, D: tl.constexpr, T,
                 numer, target, TILE: tl.constexpr, BK: tl.constexpr, NARROW: tl.constexpr, I64: tl.constexpr,
                 HAD_L: tl.constexpr, LOG2H_L: tl.constexpr, NORM_L: tl.constexpr, SIGNS_L: tl.constexpr,
                 SR_L: tl.constexpr, PAIRS_L: tl.constexpr,
                 HAD_F: tl.constexpr, LOG2H_F: tl.constexpr, NORM_F: tl.constexpr, SIGNS_F: tl.constexpr,
                 SR_F: tl.constexpr, PAIRS_F: tl.constexpr,
                 BLK: tl.constexpr, LOG2_BLK: tl.constexpr, TENSOR_SCALE: tl.constexpr, SCALE: tl.constexpr,
                 EMAX: tl.constexpr, ELEM: tl.constexpr, GMAX: tl.constexpr,
                 HALVES: tl.constexpr, ITERS: tl.constexpr, HAS_FACTOR_L: tl.constexpr,
                 HAS_FACTOR_F: tl.constexpr, TARGET: tl.constexpr = 0.0):
    """x (T, D) -> its operand along dim 0 (first_ptr) and along the last axis (last_ptr), both in x's
    layout, from one DRAM read of each (BK tokens, BR features) tile (`_last_axis_tile`); HAS_FACTOR_L
    (_F): the last axis's (dim 0's) inverse tensor scale comes out times the value at its factor_ptr,
    another operand's. ITERS: the program quantizes ITERS consecutive tiles along the tokens, after
    making once what they all use (encode scales, stream keys, both transforms' signs). D, the
    tokens' stride, is a compile-time constant (`quantize._tile_offsets`: loads and stores along the
    tokens at immediate offsets); the kernel is compiled once per width."""
    BR: tl.constexpr = TILE // BK
    pid_r = tl.program_id(0)  # features; tokens: ITERS tiles from program_id(1) * ITERS
    stride_r, stride_k = _wide_strides(1, D, I64)
    s_enc_f = _encode_scale(amax_first_ptr, inv_first_ptr, numer, TENSOR_SCALE, factor_first_ptr, HAS_FACTOR_F)
    s_enc_l = _encode_scale(amax_last_ptr, inv_last_ptr, numer, TENSOR_SCALE, factor_last_ptr, HAS_FACTOR_L)
    key_f = _stream_key(seeds_first_ptr, 0, 0) if SR_F else 0
    key_l = _stream_key(seeds_last_ptr, 0, 0) if SR_L else 0
    # RHT16's normalisation (1/4, a power of two) rides on the random signs (+-1/4, made as the +-1 are:
    # `_signed_one`), so no multiply an element of a rotated operand is left for it (sm_90, Triton 3.9:
    # nvfp4's dY pair 54.4 -> 53.5 instructions per element at 4096-element tiles, 4 a program; ufp4's
    # 62.5 -> 61.4 at 1024, halves). x in BF16 or FP16: their values and sums are multiples of 2^-133,
    # so a quarter of each is exact in FP32, and the signed first stage's products by +-1/4 and every
    # later stage's sums are exactly a quarter of the unnormalised ones: the same bits as the multiply
    # after the FWHT. Not for FP32 inputs, whose subnormals' quarters round, nor without random signs
    # (no product to carry it).
    NARROW_IN: tl.constexpr = x_ptr.dtype.element_ty != tl.float32
    FOLD_F: tl.constexpr = (HAD_F == 16) and SIGNS_F and NARROW_IN
    FOLD_L: tl.constexpr = (HAD_L == 16) and SIGNS_L and NARROW_IN
    signs_f, _ = _program_signs(seeds_first_ptr, BK, HAD_F, SIGNS_F, 0, 0x3E800000 if FOLD_F else 0x3F800000)
    signs_lo, signs_hi = _program_signs(seeds_last_ptr, BR, HAD_L, SIGNS_L, HALVES,
                                        0x3E800000 if FOLD_L else 0x3F800000)
    # amax_b / target by the reciprocal (`quantize._by_reciprocal`) where its checks cover the amaxes:
    # for 6 multiples of 2^-135 (x in BF16 or FP16, unrotated or under RHT16), for 1.75 under RHT16
    RCP_F: tl.constexpr = TARGET if (TARGET == 6.0 and NARROW_IN and (HAD_F == 0 or HAD_F == 16)) or (
        TARGET == 1.75 and HAD_F == 16) else 0.0
    RCP_L: tl.constexpr = TARGET if (TARGET == 6.0 and NARROW_IN and (HAD_L == 0 or HAD_L == 16)) or (
        TARGET == 1.75 and HAD_L == 16) else 0.0
    NORM_QF: tl.constexpr = 1.0 if FOLD_F else NORM_F
    NORM_QL: tl.constexpr = 1.0 if FOLD_L else NORM_L
    dtype = first_ptr.dtype.element_ty
    features = pid_r * BR + tl.arange(0, BR)
    for i in range(ITERS):
        pid_k = tl.program_id(1) * ITERS + i
        x = _load_tile(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, 1.0, BR, BK, NARROW, False)
        offs, mask = _tile_offsets(pid_r, pid_k, D, T, stride_r, stride_k, BR, BK, NARROW)

        # along dim 0 (K = tokens, the tile's columns): as _quantize_kernel along dim 0
        xf = _rotate(x, signs_f, BR, BK, HAD_F, LOG2H_F, NORM_QF, SIGNS_F)
        out = _quantize_tile(xf, features, pid_k * BK, T, s_enc_f, key_f, 0, target, BR, BK, 0, 1, BLK, LOG2_BLK,
                             False, TENSOR_SCALE, SCALE, EMAX, ELEM, GMAX, SR_F, PAIRS_F, False, False, RCP_F)
        tl.store(first_ptr + offs, out.to(dtype), mask=mask)

        # along the last axis (K = features): the same tile as (BK tokens, BR features)
        tokens = pid_k * BK + tl.arange(0, BK)
        xl = _last_axis_tile(x_ptr, pid_r, pid_k, D, T, stride_r, stride_k, signs_lo, signs_hi, BR, BK, HAD_L,
                             LOG2H_L, NORM_QL, SIGNS_L, HALVES)
        out = _quantize_tile(xl, tokens, pid_r * BR, D, s_enc_l, key_l, 0, target, BK, BR, 0, 1, BLK, LOG2_BLK,
                             False, TENSOR_SCALE, SCALE, EMAX, ELEM, GMAX, SR_L, PAIRS_L, False, False, RCP_L)
        if HALVES == 2:  # stored as loaded
            _store_halves(last_ptr, out, pid_k, pid_r, T, D, stride_k, stride_r, BK, BR)
        else:
            offs, mask = _tile_offsets(pid_k, pid_r, T, D, stride_k, stride_r, BK, BR, 0)
            tl.store(last_ptr + offs, out.to(dtype), mask=mask)


# --- launch ----------------------------------------------------------------------------------------

# What a tuned pair tile is kept for (absent names are skipped: the amax kernel has no SR).
_PAIR_KEY = ("D", "T", "HAD_L", "HAD_F", "SR_L", "SR_F", "ELEM", "SCALE", "BLK")


@functools.lru_cache(maxsize=None)
def _pair_tuner(kernel, bk: int, halves: tuple[int, ...] = ()):
    """The autotuned kernel over `pair_tiles`: with ITERS 1 and, for the small tiles, 4 tiles along
    the tokens per program; for the quantize kernel each with the last axis's HALVES choices."""
    def config(t, b, w, f, h, n):
        return triton.Config({"TILE": t, "BK": b, "NARROW": f, "ITERS": n}
                             | ({"HALVES": h} if h is not None else {}), num_warps=w)

    configs = [config(*c) for c in pair_tiles(bk, halves)]
    return autotuned(kernel, configs, list(_PAIR_KEY))


def pair_tiles(bk: int, halves: tuple[int, ...] = ()) -> list[tuple]:
    """(TILE, BK, warps, NARROW, HALVES, ITERS) the pair's tuner tries: dim 0's tiles
    (quantize.tile_candidates) of at most 64 elements per thread. With 128 (8 features x 16 tokens in
    16-byte vectors) the pair spilled registers in sm_90 code (nvfp4's dY pair: 255 registers and a
    480-920 byte stack), so those tiles only cost tuning time."""
    return [c for c in tile_candidates((bk,), 1, halves) if c[0] // (32 * c[2]) <= 64]


def halves_choices(last: QuantSpec) -> tuple[int, ...]:
    """The quantize kernel's HALVES choices for the tile along the last axis, the untuned launch's
    first: 0 whole, 1 halves in, 2 halves in and out. Blocks of 16 in halves are one thread's (no
    shuffle, one scale each) and an RHT16 runs in registers, but each access then skips every other
    16 bytes (docs/kernels-log.md, "Dim-0 tiles"): so 0 or 2 unrotated, 1 or 2 under RHT16; for blocks
    of 32 what the rotation needs."""
    rht16 = last.transform == 16
    if last.block_k != 16 or last.transform not in (0, 16):
        return (int(rht16),)
    return (1, 2) if rht16 else (0, 2)


def amax_halves_choices(last: QuantSpec) -> tuple[int, ...]:
    """The amax pass's HALVES choices for the tile reloaded along the last axis (`_pair_abs`): under
    RHT16 whole with the last stage across lanes first (the H200's best for the single amax pass,
    `quantize._abs_lane_pairs`), or halves; none to tune otherwise."""
    return (2, 1) if last.transform == 16 else ()


def _core(spec: QuantSpec) -> QuantSpec:
    """What the two specs of a pair must share: the spec without its rounding and transform."""
    return spec.but(rounding="rtne", transform=0, signs="ones")


@functools.lru_cache(maxsize=256)
def pairable(last: QuantSpec | None, first: QuantSpec | None) -> bool:
    """Whether `quantize_pair` serves these specs (last: along the last axis; first: along dim 0):
    blocks of 1 x 16 or 1 x 32, no 4/6 or MS-EDEN, transforms of at most 32, and the same element
    and scale formats (bound, cap, headroom) in both, each one the kernels cover (`supports`)."""
    if last is None or first is None:
        return False
    specs = (last, first)
    if any(s.four_over_six or s.eden or s.transform not in (0, 16, 32) for s in specs):
        return False
    if _core(last) != _core(first) or last.block is None or last.block_rows != 1 or last.block_k not in (16, 32):
        return False
    return all(supports(s) for s in specs)


def _rotation(spec: QuantSpec, suffix: str) -> dict:
    had = spec.transform
    return {f"HAD_{suffix}": had, f"LOG2H_{suffix}": int(math.log2(had)) if had else 0,
            f"NORM_{suffix}": norm_factor(had) if had else 1.0,
            f"SIGNS_{suffix}": bool(had) and spec.signs != "ones"}


@functools.lru_cache(maxsize=256)
def _pair_config(last: QuantSpec, first: QuantSpec, D: int, T: int) -> dict:
    """The compile-time parameters of a pair's two kernels and its untuned tile (BK = one block or
    rotation group of tokens)."""
    blk = last.block_k
    return dict(TILE=4096, BK=max(blk, first.transform), NARROW=0, ITERS=1, HALVES=halves_choices(last)[0],
                I64=_offsets_pass_int32(D, T, 1, D), **_rotation(last, "L"), **_rotation(first, "F"),
                SR_L=last.rounding == "sr", PAIRS_L=D % 2 == 0, SR_F=first.rounding == "sr", PAIRS_F=T % 2 == 0,
                BLK=blk, LOG2_BLK=int(math.log2(blk)), TENSOR_SCALE=last.has_tensor_scale,
                SCALE=formats.SCALE_CODES[last.scale], EMAX=formats.EMAX[last.elem],
                ELEM=formats.ELEM_CODES[last.elem], GMAX=float(last.elem_max),
                HAS_FACTOR_L=False, HAS_FACTOR_F=False, TARGET=_reciprocal_target(last))


def _reciprocal_target(spec: QuantSpec) -> float:
    """The block scales' target where `quantize._by_reciprocal` divides by it (E4M3 scales), else 0.0
    (div_rn)."""
    target = scale_constants(spec)[1]
    return target if formats.SCALE_CODES[spec.scale] == 1 and target in RECIPROCAL_TARGETS else 0.0


_AMAX_NAMES = ("TILE", "BK", "NARROW", "I64", "HAD_L", "LOG2H_L", "NORM_L", "SIGNS_L",
               "HAD_F", "LOG2H_F", "NORM_F", "SIGNS_F", "ITERS", "HALVES")


class PairLaunch:
    """One `quantize_pair` call's kernels, ready to run (`scaling bench` times them apart)."""

    needs_move = moves_with_amax = False  # (as quantize.Launch says them: the pair reads x in place)

    def __init__(self, x: torch.Tensor, last: QuantSpec, last_seeds: torch.Tensor | None, first: QuantSpec,
                 first_seeds: torch.Tensor | None, dtype: torch.dtype, tile: int | None = None,
                 narrow: int | None = None, iters: int | None = None, halves: int | None = None,
                 last_factor: torch.Tensor | None = None, first_factor: torch.Tensor | None = None):
        self.x = x.contiguous()
        self.T, self.D = x.shape
        self.cfg = dict(_pair_config(last, first, self.D, self.T))
        if tile is not None:  # a pinned tile (tests)
            self.cfg["TILE"] = tile
        if narrow is not None:
            self.cfg["NARROW"] = narrow
        if iters is not None:
            self.cfg["ITERS"] = iters
        self.halves = halves_choices(last) if halves is None else (halves,)
        self.cfg["HALVES"] = self.halves[0]
        choices = amax_halves_choices(last)  # (a pinned `halves` pins the amax pass's where it has choices)
        self.amax_halves = choices if halves is None or not choices else (halves,)
        self.numer, self.target = scale_constants(last)
        device = x.device
        # both amaxes in one buffer: one fill for the atomic maxima to start from
        self.amaxes = list((torch.zeros if self.cfg["TENSOR_SCALE"] else torch.empty)(2, dtype=torch.float32,
                                                                                       device=device).unbind())
        self.invs = [torch.empty((), dtype=torch.float32, device=device) for _ in range(2)]
        unread = self.amaxes[0]  # a deterministic spec's seeds are never read
        self.seeds = [unread if s is None else s for s in (last_seeds, first_seeds)]
        self.outs = [torch.empty(x.shape, dtype=dtype, device=device) for _ in range(2)]
        # each axis's output scale times another operand's (a 0-d FP32 tensor), where given
        factors = (last_factor, first_factor)
        self.factors = [inv if f is None else f for inv, f in zip(self.invs, factors)]
        for suffix, f in zip("LF", factors):
            self.cfg[f"HAS_FACTOR_{suffix}"] = f is not None and self.cfg["TENSOR_SCALE"]
        self.tuned = x.is_cuda and _tuning()

    @property
    def needs_amax(self) -> bool:
        return self.cfg["TENSOR_SCALE"]

    def _launch(self, kernel, args: tuple, consts: dict) -> None:
        def grid(meta: dict) -> tuple[int, int]:
            return triton.cdiv(self.D, meta["TILE"] // meta["BK"]), triton.cdiv(self.T, meta["BK"] * meta.get("ITERS", 1))

        if self.tuned:
            tuned = self._tuner(kernel)
            tuned[grid](*args, **untuned_args(tuned, consts), enable_fp_fusion=False)
        else:
            kernel[grid](*args, **consts, num_warps=8, enable_fp_fusion=False)

    def _tuner(self, kernel):
        return _pair_tuner(kernel, self.cfg["BK"], self.halves if kernel is _pair_kernel else self.amax_halves)

    def run_amax(self) -> None:
        """Both tensor amaxes, one read (an atomic max each: reruns leave the same values)."""
        self._launch(_pair_amax_kernel, (self.x, *self.amaxes, *self.seeds, self.D, self.T),
                     {k: self.cfg[k] for k in _AMAX_NAMES} | {"HALVES": (self.amax_halves or (0,))[0]})

    def run_quantize(self) -> None:
        self._launch(_pair_kernel, (self.x, *self.outs, *self.amaxes, *self.invs, *self.seeds, *self.factors, self.D,
                                    self.T, self.numer, self.target), self.cfg)

    def tuned_configs(self) -> dict[str, str]:
        """The tile each kernel's tuner chose so far (for benchmark logs)."""
        if not self.tuned:
            return {}
        chosen = {}
        for stage, kernel in (("amax", _pair_amax_kernel), ("quantize", _pair_kernel)):
            tuner = self._tuner(kernel)
            described = tuned_config(tuner, kernel, {"D": self.D, "T": self.T, **self.cfg}, _PAIR_KEY)
            if described:
                chosen[stage] = described
        return chosen

    def result(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(operand along the last axis, its 1 / tensor scale, operand along dim 0, its 1 / tensor scale)."""
        return self.outs[0], self.invs[0], self.outs[1], self.invs[1]


def quantize_pair(x: torch.Tensor, last: QuantSpec, last_seeds: torch.Tensor | None, first: QuantSpec,
                  first_seeds: torch.Tensor | None, dtype: torch.dtype, last_factor: torch.Tensor | None = None,
                  first_factor: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`quant.gemm_operand(x, last, -1, ...)` and `quant.gemm_operand(x, first, 0, ...)` of a 2-D x, in
    one read (and one more for the tensor amaxes), where `pairable(last, first)`: (operand, 1 / tensor
    scale) of each, each axis's 1 / tensor scale times its factor (`last_factor`, `first_factor`: 0-d
    FP32) where given and the spec has a tensor scale. Seeds: int64 tensors [rounding seed, sign seed]
    on x's device, or None."""
    launch = PairLaunch(x, last, last_seeds, first, first_seeds, dtype, last_factor=last_factor,
                        first_factor=first_factor)
    if launch.needs_amax:
        launch.run_amax()
    launch.run_quantize()
    return launch.result()
