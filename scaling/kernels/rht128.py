"""RHT128 along a contiguous K with a thread per row's group: Quartet II's MS-EDEN operands and their
amax passes, bit for bit `quant.gemm_operand`, with no shared memory, barriers or warp shuffles.

In `quantize._quantize_kernel` a tile's 128-wide Hadamard groups are spread over the lanes of a warp:
Triton moves the values between the butterflies' layouts, the block maxima and the EDEN sums through
shared memory and shuffles (sm_90, at the tuned tiles: 56-63 instructions, 12-47 barriers and 34-136
shuffles per program; its amax pass 20-22 instructions and 25-97 barriers), and the H200 ran them at
43% (quantize) and 36% (amax) of its copy bandwidth. Here each thread holds one row's whole group
of 128 elements: it loads them as 16 slices of 8 (16-byte vectors; 32 lanes read 32 rows, and the
slices of a row are read back to back, so the L1 cache merges their sectors), runs the FWHT's
strides 1, 2, 4 inside each slice and strides 8 to 64 between slices (`_group`: the slices are
joined pairwise, a stride per level, so every butterfly is between registers of one thread), then
makes each block's scale once, its elements, the group's EDEN sums (neighbours first, the tree of
the joins) and the SR of the scales, and stores the 16 slices (`_store_group`). The same operations on the same values as the reference
and the generic kernel, in the same order: the same bits.

The transform's random signs (128 per group, the same for every row) are made once per program as 16
bytes of sign bits (`_sign_bits`) and applied as sign-bit xors (exact: x * -1 is x with its sign bit
flipped), an SHF and a LOP3 per element: held as 128 float signs they took 128 of a thread's
registers beside its 128 values.

Serves (`serves`): RHT128 along a contiguous K (the canonical view's rows: fprop/dgrad layout, or a
copy with K moved last), 1 x 16 blocks, no SR of the elements, no 4/6, row-major output. Other RHT128
specs run the generic kernel.
"""

from __future__ import annotations

import functools
import os

import triton
import triton.language as tl

from scaling.kernels.quantize import (SCALE_STREAM, _atomic_max, _block_scale, _e4m3_sr, _encode_scale, _fwht,
                                      _keyed_hash, _round_signed, _scaled, _stream_key, _tree_sum, _tuning,
                                      _uniform, autotuned)

GROUP = 128
# (the same, as constants the @jit code may read)
_GROUP_C = tl.constexpr(GROUP)
_SLICES_C = tl.constexpr(GROUP // 8)
# SCALING_RHT128=0 leaves these specs to the generic kernel (same bits; for A/B timing).
ENABLED = os.environ.get("SCALING_RHT128", "1") != "0"


@triton.jit
def _sign_bits(seeds_ptr, J: tl.constexpr, RAND_SIGNS: tl.constexpr):
    """The signs of positions 8J .. 8J + 7 of the group (seeds.random_signs) as bits 0-7 of an int
    (1: negative)."""
    if RAND_SIGNS:
        j = (tl.arange(0, 8) + J * 8).to(tl.uint32)
        h = _keyed_hash(j, _stream_key(seeds_ptr, 1, 0))
        bits = tl.sum((h >> 31) << tl.arange(0, 8).to(tl.uint32), axis=0)
    else:
        bits = tl.full((), 0, tl.uint32)
    return bits


@triton.jit
def _slice(x_ptr, base, rmask, col0, x_scale, signs, J: tl.constexpr, HAS_SCALE: tl.constexpr):
    """Columns col0 + 8J .. + 7 of the rows at `base` (offsets), float32 (times x_scale), each signed
    (bit e of `signs` flips element e's sign), then the FWHT's strides 1, 2, 4: a (BR, 8) tile."""
    cols = col0 + J * 8 + tl.arange(0, 8)
    t = _scaled(tl.load(x_ptr + base[:, None] + cols[None, :], mask=rmask[:, None], other=0.0).to(tl.float32),
                x_scale, HAS_SCALE)
    flip = (signs << (31 - tl.arange(0, 8)).to(tl.uint32)) & 0x80000000
    t = (t.to(tl.uint32, bitcast=True) ^ flip[None, :]).to(tl.float32, bitcast=True)
    return _fwht(t, t.shape[0], 8, 3, 1.0)


@triton.jit
def _group(x_ptr, base, rmask, col0, x_scale, seeds_ptr, opaque_zero, J0: tl.constexpr, N: tl.constexpr,
           RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr, ABS_LAST: tl.constexpr = False):
    """Slices J0 .. J0 + N - 1 of each row's group, signed and rotated by the FWHT's strides up to 8N
    (unnormalised): a (BR, 8, 2, ...) tile with an axis of 2 per level of the joins, the slice index's
    bits from the lowest (its columns are 8 * slice + element). ABS_LAST: the last stage (a, b) ->
    (a + b, a - b) as |a| + |b|, what an amax needs (`quantize._abs_rotation`). `opaque_zero` (0, not
    known to the compiler) keeps each tile's sign masks inside the loop over tiles: hoisted out of it,
    the 128 masks took 128 registers."""
    if N == 1:
        signs = _sign_bits(seeds_ptr, J0, RAND_SIGNS) | opaque_zero
        t = _slice(x_ptr, base, rmask, col0, x_scale, signs, J0, HAS_SCALE)
    else:
        a = _group(x_ptr, base, rmask, col0, x_scale, seeds_ptr, opaque_zero, J0, N // 2, RAND_SIGNS, HAS_SCALE)
        b = _group(x_ptr, base, rmask, col0, x_scale, seeds_ptr, opaque_zero, J0 + N // 2, N // 2, RAND_SIGNS,
                   HAS_SCALE)
        if ABS_LAST:
            t = tl.abs(a) + tl.abs(b)
        else:
            t = tl.join(a + b, a - b)
    return t


@triton.jit
def _blocks(t, rows, col0, K, s_enc, scale_key, target, J0: tl.constexpr, N: tl.constexpr, NORM: tl.constexpr,
            SCALE: tl.constexpr, EMAX: tl.constexpr, BOUND: tl.constexpr, ELEM: tl.constexpr, GMAX: tl.constexpr,
            EDEN: tl.constexpr):
    """Blocks J0 .. J0 + N - 1 (of 16: two slices) of the rotated group `t` (`_group`'s layout, axes of
    the blocks' index last): each block's elements (normalised, rounded under its scale), its scale,
    and with EDEN the tree sums of x_enc^2 and x_enc * q * s_b over the N blocks (neighbours first: a
    block's 16 in `_tree_sum`, then the joins' tree) and each scale's uniform for its SR. One block at
    a time, so a thread holds its values and its rounded elements, not both whole groups at once (255
    registers and spills)."""
    if N == 1:
        BR: tl.constexpr = t.shape[0]
        x = t * NORM  # (BR, 8, 2): element e of slice 2 J0 + i at [:, e, i]
        amax_b = tl.max(tl.max(tl.abs(x), axis=2), axis=1)
        s_b = _block_scale(amax_b, s_enc, target, SCALE, EMAX, BOUND)
        ok = s_b > 0
        factor = tl.where(ok, tl.math.div_rn(tl.zeros_like(s_b) + s_enc, tl.where(ok, s_b, 1.0)), 0.0)
        q = _round_signed(x * factor[:, None, None], x, ELEM, GMAX, False)
        if EDEN:
            x_enc = tl.reshape(tl.permute(x * s_enc, (0, 2, 1)), (BR, 1, 16))
            deq = tl.reshape(tl.permute(q * s_b[:, None, None], (0, 2, 1)), (BR, 1, 16))
            num = tl.reshape(_tree_sum(x_enc * x_enc, 4), (BR,))
            den = tl.reshape(_tree_sum(x_enc * deq, 4), (BR,))
            u = _uniform((rows.to(tl.int64) * (K // 16) + (col0 // 16 + J0)).to(tl.uint32), scale_key)
        else:  # (not read)
            num, den, u = amax_b, amax_b, amax_b
    else:
        a, b = tl.split(t)
        q_a, s_a, num_a, den_a, u_a = _blocks(a, rows, col0, K, s_enc, scale_key, target, J0, N // 2, NORM, SCALE,
                                              EMAX, BOUND, ELEM, GMAX, EDEN)
        q_b, s_bb, num_b, den_b, u_b = _blocks(b, rows, col0, K, s_enc, scale_key, target, J0 + N // 2, N // 2, NORM,
                                               SCALE, EMAX, BOUND, ELEM, GMAX, EDEN)
        q, s_b, num, den, u = tl.join(q_a, q_b), tl.join(s_a, s_bb), num_a + num_b, den_a + den_b, tl.join(u_a, u_b)
    return q, s_b, num, den, u


@triton.jit
def _store_group(out_ptr, t, base, rmask, col0, J0: tl.constexpr, N: tl.constexpr):
    """Store slices J0 .. J0 + N - 1 of a tile in `_group`'s layout, each as a (BR, 8) tile."""
    if N == 1:
        cols = col0 + J0 * 8 + tl.arange(0, 8)
        tl.store(out_ptr + base[:, None] + cols[None, :], t.to(out_ptr.dtype.element_ty), mask=rmask[:, None])
    else:
        a, b = tl.split(t)
        _store_group(out_ptr, a, base, rmask, col0, J0, N // 2)
        _store_group(out_ptr, b, base, rmask, col0, J0 + N // 2, N // 2)


@triton.jit
def _tile_rows(R, stride_r, i, BR: tl.constexpr, ITERS: tl.constexpr):
    """Tile i of the program's ITERS: its rows, their offsets, and a zero the compiler cannot see."""
    row0 = (tl.program_id(0) * ITERS + i) * BR
    rows = row0 + tl.arange(0, BR)
    return rows, rows.to(tl.int64) * stride_r, (row0 >> 31).to(tl.uint32)


@triton.jit
def _group_amax_kernel(x_ptr, amax_ptr, seeds_ptr, scale_ptr, R, K, stride_r, BR: tl.constexpr, NORM: tl.constexpr,
                       RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr, ITERS: tl.constexpr):
    """`quantize._amax_kernel` for RHT128 along a contiguous K: ITERS tiles of BR rows (one a thread) x
    one group, each row's running max in registers, one relaxed atomic max per program."""
    col0 = tl.program_id(1) * _GROUP_C
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    most = tl.zeros((BR,), tl.float32)
    for i in range(ITERS):
        rows, base, zero = _tile_rows(R, stride_r, i, BR, ITERS)
        t = _group(x_ptr, base, rows < R, col0, x_scale, seeds_ptr, zero, 0, _SLICES_C, RAND_SIGNS, HAS_SCALE, True)
        most = tl.maximum(most, tl.max(tl.reshape(t, (BR, _GROUP_C // 2)), axis=1))
    # rounding is monotone: max RN(NORM |r|) = RN(NORM max |r|)
    _atomic_max(amax_ptr, tl.max(most, axis=0) * NORM)


@triton.jit
def _group_quantize_kernel(x_ptr, out_ptr, amax_ptr, inv_ptr, seeds_ptr, scale_ptr, R, K, stride_r, numer, target,
                           BR: tl.constexpr, NORM: tl.constexpr, RAND_SIGNS: tl.constexpr,
                           TENSOR_SCALE: tl.constexpr, SCALE: tl.constexpr, EMAX: tl.constexpr, BOUND: tl.constexpr,
                           ELEM: tl.constexpr, GMAX: tl.constexpr, EDEN: tl.constexpr, HAS_SCALE: tl.constexpr,
                           ITERS: tl.constexpr):
    """`quantize._quantize_kernel` for the specs `serves` takes: ITERS tiles of BR rows (one a thread) x
    one group."""
    col0 = tl.program_id(1) * _GROUP_C
    s_enc = _encode_scale(amax_ptr, inv_ptr, numer, TENSOR_SCALE)
    scale_key = _stream_key(seeds_ptr, 0, SCALE_STREAM) if EDEN else 0
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    for i in range(ITERS):
        rows, base, zero = _tile_rows(R, stride_r, i, BR, ITERS)
        t = _group(x_ptr, base, rows < R, col0, x_scale, seeds_ptr, zero, 0, _SLICES_C, RAND_SIGNS, HAS_SCALE)
        q, s_b, num, den, u = _blocks(t, rows, col0, K, s_enc, scale_key, target, 0, _GROUP_C // 16, NORM, SCALE, EMAX,
                                      BOUND, ELEM, GMAX, EDEN)
        if EDEN:  # quant._eden_correct: c = sum x_enc^2 / sum x_enc q s_b per group, then SR of the scales
            c = tl.where(den > 0, tl.math.div_rn(num, tl.where(den > 0, den, 1.0)), 1.0)
            s_b = _e4m3_sr(s_b * c[:, None, None, None], u)
        _store_group(out_ptr, q * s_b[:, None, None, :, :, :], base, rows < R, col0, 0, _SLICES_C)


def serves(launch) -> bool:
    """Whether these kernels quantize a `quantize.Launch`'s operand (the module's docstring)."""
    c = launch.cfg
    return ENABLED and launch.groups and (launch.stride_k == 1 and launch.K % GROUP == 0 and c["HAD"] == GROUP and c["BLK_R"] == 1
            and c["BLK_K"] == 16 and not (c["SR"] or c["FOUR_SIX"] or c["OUT_T"] or c["PER_TENSOR"]))


def serves_amax(launch) -> bool:
    """Whether `_group_amax_kernel` takes a Launch's amax pass (its plain amax is not asked for)."""
    R, K, _, stride_k, _ = launch._amax_view()
    return ENABLED and launch.groups and stride_k == 1 and K % GROUP == 0 and launch.cfg["HAD"] == GROUP


# (warps, ITERS): a warp holds 32 rows. The untuned launch's is the first.
_CANDIDATES = tuple((w, n) for w in (2, 1, 4) for n in (1, 4))
_TUNE_KEY = ("R", "K", "EDEN", "HAS_SCALE")


@functools.lru_cache(maxsize=None)
def _tuner(kernel):
    configs = [triton.Config({"BR": 32 * w, "ITERS": n}, num_warps=w) for w, n in _CANDIDATES]
    return autotuned(kernel, configs, [k for k in _TUNE_KEY if k in kernel.arg_names])


def _run(kernel, args: tuple, consts: dict, R: int, K: int, tuned: bool, warps: int | None, iters: int) -> None:
    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(R, meta["BR"] * meta["ITERS"]), K // GROUP

    if tuned and warps is None:
        _tuner(kernel)[grid](*args, **consts)
    else:
        w = warps or _CANDIDATES[0][0]
        kernel[grid](*args, **consts, BR=32 * w, ITERS=iters, num_warps=w)


def run_amax(launch, warps: int | None = None, iters: int = 1) -> None:
    """The amax pass of a Launch (`serves_amax`) into launch.amax; `warps`, `iters` pin a tile (tests)."""
    c = launch.cfg
    R, K, stride_r, _, _ = launch._amax_view()
    _run(_group_amax_kernel, (launch.buf, launch.amax, launch.seeds, launch.scale, R, K, stride_r),
         {"NORM": c["NORM"], "RAND_SIGNS": c["RAND_SIGNS"], "HAS_SCALE": c["HAS_SCALE"]}, R, K, launch.tuned, warps,
         iters)


def run_quantize(launch, warps: int | None = None, iters: int = 1) -> None:
    """The quantize pass of a Launch (`serves`) into launch.out."""
    c = launch.cfg
    consts = {k: c[k] for k in ("NORM", "RAND_SIGNS", "TENSOR_SCALE", "SCALE", "EMAX", "BOUND", "ELEM", "GMAX", "EDEN",
                                "HAS_SCALE")}
    _run(_group_quantize_kernel, (launch.buf, launch.out, launch.amax, launch.inv, launch.seeds, launch.scale,
                                  launch.R, launch.K, launch.stride_r, launch.numer, launch.target),
         consts, launch.R, launch.K, launch.tuned, warps, iters)


def tuned_config(kernel, values: dict) -> str | None:
    """The tile the tuner chose for these key values, in words (None: not tuned yet)."""
    from scaling.kernels.quantize import _key_starts_with

    prefix = tuple(values[k] for k in _TUNE_KEY if k in kernel.arg_names)
    best = [c for k, c in getattr(_tuner(kernel), "cache", {}).items() if _key_starts_with(k, prefix)]
    return f"group rows {best[0].kwargs['BR']} iters {best[0].kwargs['ITERS']}" if best else None
