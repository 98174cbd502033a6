"""The fused Triton quantizer: one pass from x to the GEMM operand, bit for bit `quant.gemm_operand`.

Each program owns a (BR, BK) tile of the canonical (R, K) view (K = the quantized axis) and does,
in registers: load -> [signs + FWHT butterflies] -> block amax -> block scale -> element rounding
(RTNE, or SR from the counter hash) -> [4/6 choice] -> [MS-EDEN scale correction + SR of the
scales] -> store values * block_scale in x's own layout (so quantizing along dim 0 of a (T, d)
tensor needs no transpose: the tile is just read and written with the other strides).

Two-level (NV) and per-tensor scaling need the tensor amax *after* the rotation before any block
can be scaled, so those specs run a read-only reduction first (`_amax_kernel`, rotation included,
atomic max into one float). Everything else is one read and one write.

Every float operation mirrors the reference's order and rounding: IEEE division (`div_rn`, since
Triton's `/` is approximate), no FMA contraction (`enable_fp_fusion=False`), pairwise sums (neighbours
first) for the 4/6 errors and the EDEN sums, FWHT stages in the reference's order.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from scaling import formats
from scaling.kernels import interpreting
from scaling.quant import SCALE_STREAM as _SCALE_STREAM
from scaling.quant import QuantSpec, scale_constants
from scaling.transforms import norm_factor

SCALE_STREAM = tl.constexpr(_SCALE_STREAM)


# Whether the kernels compile for a GPU (PTX may be inlined) or run in Triton's interpreter, which
# decides at import too (tests set TRITON_INTERPRET before anything imports triton).
_PTX = tl.constexpr(not interpreting())


@triton.jit
def _as_float(x):
    """x (as loaded) in float32. A BF16 is the top half of its float32, so each 32-bit register of two
    loaded BF16 becomes two floats by a shift and a mask: 2 instructions where ptxas makes 3 of
    `.to(tl.float32)` (it moves the high half down with a PRMT, then shifts it back up). Exact. In the
    interpreter, and for other dtypes, `.to`."""
    if _PTX and x.dtype == tl.bfloat16:
        y = tl.inline_asm_elementwise("shl.b32 $0, $2, 16;\n\tand.b32 $1, $2, 0xffff0000;", "=r,=r,r", [x],
                                      dtype=tl.float32, is_pure=True, pack=2)
    else:
        y = x.to(tl.float32)
    return y


# --- integer hash (scaling.seeds) -------------------------------------------------------------

@triton.jit
def _hash32(x):
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _keyed_hash(index, key):
    """hash32(hash32(index) ^ key), the keyed hash of seeds, in 4 fewer operations: the inner hash's
    last step (z ^ z >> 16) and the outer hash's first (y ^ y >> 16) cancel on the index's side
    (for 32-bit z, (z ^ z >> 16) ^ ((z ^ z >> 16) >> 16) = z), leaving key ^ key >> 16 to xor in."""
    x = index ^ (index >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B  # z: hash32(index) before its last step
    x = x ^ (key ^ (key >> 16))
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _pair_hash(index, key):
    """seeds.pair_bits: hash32(index ^ key), one round, with its first step (y ^ y >> 16, which
    distributes over the xor) split between the index and the key: 8 integer operations, where the
    keyed hash takes 13."""
    x = index ^ (index >> 16) ^ (key ^ (key >> 16))
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _stream_key(seeds_ptr, i: tl.constexpr, XOR: tl.constexpr):
    """seeds.seed_key(seed ^ XOR) for the int64 seed at seeds_ptr[i] (only its low 32 bits matter)."""
    seed = tl.load(seeds_ptr + i).to(tl.uint32)
    return _hash32(seed ^ (XOR ^ 0x9E3779B9))


@triton.jit
def _uniform(index, key):
    """seeds.uniform: index (uint32) under a stream key (uint32) -> float32 in [0, 1)."""
    bits = _keyed_hash(index, key)
    return (bits >> 8).to(tl.float32) * (1.0 / 16777216.0)


@triton.jit
def _sign_word(seeds_ptr, W: tl.constexpr, RAND_SIGNS: tl.constexpr):
    """The signs of positions 32W .. 32W + 31 of a transform group (seeds.random_signs: the top bit of
    the keyed hash under the sign seed's key) as the bits of an int (bit b: position 32W + b; 1:
    negative): a hash a lane, then a sum across the warp (of distinct powers of two: exact)."""
    if RAND_SIGNS:
        b = tl.arange(0, 32).to(tl.uint32)
        h = _keyed_hash(b + W * 32, _stream_key(seeds_ptr, 1, 0))
        word = tl.sum((h >> 31) << b, axis=0)
    else:
        word = tl.full((), 0, tl.uint32)
    return word


@triton.jit
def _sign_bit(word, j):
    """Bit j of a sign word (`_sign_word`; j uint32, < 32) moved to a float's sign bit: a mask to xor
    into a value (`rht128`), or to set on 1.0 (`_signed_one`)."""
    return (word << (31 - j)) & 0x80000000


@triton.jit
def _signed_one(sign_bit, ONE: tl.constexpr = 0x3F800000):
    """+1.0 or -1.0 with the given sign bit (one LOP3, not a shift, a conversion and a subtraction);
    ONE: the bits of another magnitude (a power of two: `pair`'s signs carrying RHT16's 1/4)."""
    return (sign_bit | ONE).to(tl.float32, bitcast=True)


@triton.jit
def _random_signs(j, sign_key):
    """seeds.random_signs at positions j (uint32) of a transform group: +1 or -1 from the top bit of
    the keyed hash under the sign seed's key."""
    return _signed_one(_keyed_hash(j, sign_key) & 0x80000000)


@triton.jit
def _word_signs(word, j, ONE: tl.constexpr = 0x3F800000):
    """The signs at positions j (uint32, < 32) of a sign word: a shift and a LOP3 a sign."""
    return _signed_one(_sign_bit(word, j), ONE)


@triton.jit
def _program_signs(seeds_ptr, BK: tl.constexpr, HAD: tl.constexpr, RAND_SIGNS: tl.constexpr,
                   HALVES: tl.constexpr, ONE: tl.constexpr = 0x3F800000):
    """The transform's signs a program applies, made once per program (a tile's columns hold the same
    positions of each group: BK is a multiple of HAD): for the columns of a tile, or, for halves, for
    positions 0-7 and 8-15 of a group of 16. Groups of at most 32 take them from the group's sign
    word: a thread hashing each of its positions (`_random_signs`, ~7 sm_90 instructions a sign once
    the index's half of the hash folds) cost ~3 instructions per element of ufp4's dY pair at its
    H200 tile (16 tokens' signs and 16 features' a thread; 71.2 -> 67.9) and ~1.7 of its pair amax's
    (17.9 -> 16.2). For RHT128 four words and the selects between them cost what the hashes do.
    ONE: the random signs' magnitude as float bits (`_signed_one`; groups of at most 32 only)."""
    if HALVES and HAD > 16:  # positions 16g + j and 16g + 8 + j of a run g, as (BK / 16, 8) tiles
        j = ((tl.arange(0, BK // 16)[:, None] * 16 + tl.arange(0, 8)[None, :]) % HAD).to(tl.uint32)
        if RAND_SIGNS:
            key = _stream_key(seeds_ptr, 1, 0)
            signs_a, signs_b = _random_signs(j, key), _random_signs(j + 8, key)
        else:
            signs_a = tl.full((BK // 16, 8), 1.0, tl.float32)
            signs_b = signs_a
    elif HALVES:
        j = tl.arange(0, 8).to(tl.uint32)
        if RAND_SIGNS:
            word = _sign_word(seeds_ptr, 0, True)
            signs_a, signs_b = _word_signs(word, j, ONE), _word_signs(word, j + 8, ONE)
        else:
            signs_a, signs_b = tl.full((8,), 1.0, tl.float32), tl.full((8,), 1.0, tl.float32)
    else:
        if RAND_SIGNS and HAD > 0:
            j = (tl.arange(0, BK) % HAD).to(tl.uint32)
            if HAD <= 32:
                signs_a = _word_signs(_sign_word(seeds_ptr, 0, True), j, ONE)
            else:
                signs_a = _random_signs(j, _stream_key(seeds_ptr, 1, 0))
        else:
            signs_a = tl.full((BK,), 1.0, tl.float32)
        signs_b = signs_a
    return signs_a, signs_b


@triton.jit
def _centred_unit16(h, SHIFT: tl.constexpr):
    """The 16 bits of h at SHIFT (0 or 16) as seeds' centred uniform u = (half + 1/2) / 2^16, negated:
    -u is what `_grid_sr` adds, and Triton's `-u` is 0 - u (an FADD a ptxas cannot fold: it differs
    from a negation at zero), so the stream carries -u (sm_90, Triton 3.6: nvfp4's dY pair 64.5 ->
    62.5 instructions per element). Built on a float's bits: 1 + half / 2^23 (the half as the low
    mantissa bits: one mask or shift, one OR), then one FMA, x -2^7 + (2^7 - 2^-17), exact (the
    product is, and the result has 17 significant bits). No int-to-float conversion, and no shift
    into the mantissa's top bits with its mask (sm_90, Triton 3.9: nvfp4's dY pair 61.0 -> 57.6
    instructions per element, ufp4's 62.5 -> 59.7; the same bits)."""
    half = h & 0xFFFF if SHIFT == 0 else h >> 16
    one_plus = (half | 0x3F800000).to(tl.float32, bitcast=True)
    return tl.fma(one_plus, -128.0, 127.99999237060547)  # 2^7 - 2^-17, exact in float32


@triton.jit
def _paired_uniforms(rows, col0, K, key, BK: tl.constexpr, PAIRS: tl.constexpr):
    """seeds.paired_uniforms for a tile (rows: its row indices; columns col0 .. col0 + BK - 1 of K),
    negated (`_centred_unit16`): one hash per two elements, its low half for the even row-major
    index, its high half for the odd one."""
    if PAIRS:  # K even: a pair is two neighbours along the tile's row, hashed once
        pcols = col0 // 2 + tl.arange(0, BK // 2)
        pair = rows[:, None].to(tl.uint32) * tl.cast(K // 2, tl.uint32) + pcols[None, :].to(tl.uint32)
        h = _pair_hash(pair, key)
        neg_u = tl.interleave(_centred_unit16(h, 0), _centred_unit16(h, 16))
    else:  # pairs straddle rows: one hash per element, as the reference defines it
        index = rows[:, None].to(tl.int64) * K + (col0 + tl.arange(0, BK))[None, :]
        h = _pair_hash((index >> 1).to(tl.uint32), key)
        neg_u = tl.where((index & 1) == 0, _centred_unit16(h, 0), _centred_unit16(h, 16))
    return neg_u


# --- rounding helpers (scaling.formats) ----------------------------------------------------------

@triton.jit
def _rint(y):
    """Round to the nearest integer, ties to even (|y| < 2^22): the float32 magic-number trick."""
    return (y + 8388608.0) - 8388608.0


@triton.jit
def _binade(m):
    """The power of two at or below m, never below 1 (E2M1's smallest normal), as float32 bits."""
    return tl.maximum(m, 1.0).to(tl.int32, bitcast=True) & 0x7F800000


@triton.jit
def _grid_rtne(mag, ELEM: tl.constexpr, GMAX: tl.constexpr, s_b=None, neg_cs=None, SCALED: tl.constexpr = False):
    """formats.round_grid_rtne: nearest level, ties to the even index, saturating at GMAX (a level).
    Adding c = 2^22 x (the spacing's binade) rounds to a multiple of the spacing (c's ulp), ties to an
    even multiple (the even index), and subtracting c is exact: 2 FADDs instead of a rint per binade.
    SCALED (a uniform grid, `_quantize_tile`): the level times the block scale s_b, as fma(m + c, s_b,
    neg_cs) with neg_cs = -c s_b: the exact product (m + c) s_b minus the exact c s_b is the level
    times s_b, exact in FP32 (a level of 3 and a scale of 4 significant bits), so the FMA returns it
    unrounded: the subtraction and the multiply by s_b in one instruction, the same bits."""
    m = tl.minimum(mag, GMAX)
    if ELEM == 0:  # e2m1: spacing 0.5 below 2, 1 below 4, 2 above = 2^-1 x binade (>= 1)
        c = (_binade(m) + (22 << 23)).to(tl.float32, bitcast=True)
    elif ELEM == 1:  # e1m2: uniform spacing 0.25 = the ulp of 2^21
        c = 2097152.0
    else:  # int4: integers = the ulp of 2^23
        c = 8388608.0
    if SCALED:
        q = tl.fma(m + c, s_b, neg_cs)
    else:
        q = (m + c) - c
    return q


@triton.jit
def _grid_sr(mag, neg_u, ELEM: tl.constexpr, GMAX: tl.constexpr, s_fold=None, SCALED: tl.constexpr = False):
    """formats.round_grid_sr with the uniform u given as -u: the upper neighbour with probability
    (mag - lo) / step, saturating at GMAX (a level: a saturated value is on the grid and stays), as
    (ceil, step): the level is ceil * step. SCALED (`_quantize_tile`): the step times the block
    scale, from s_fold (`_scale_fold`), so one multiply an element makes the scaled value where two
    ran (the level, then the level times its scale; sm_90, Triton 3.6: nvfp4's dY pair 62.5 -> 60.6
    instructions per element at a 1024-element tile). A level (at most 3 significant bits) times an
    E4M3 scale (4) is exact in FP32 in either order: the same bits."""
    # In units of the spacing (a power of two, so exact) y = m / step, and the level is
    # floor(y) + [u < y - floor(y)] = ceil(y - u): where y >= u, y - u is exact (u is a multiple of
    # 2^-17, so of y's ulp, for y < 2^7); where y < u, floor(y) = 0 and the rounded difference is
    # still in (-1, 0), whose ceiling is -0.0 (`_round_signed` takes |q|). Two instructions fewer
    # than floor, subtract, compare, add and select. y = m * inv is exact (a power of two from 1/2
    # to 4 times m <= GMAX, 1/2 only for m >= 4), so one FMA rounds y - u as the multiply and the
    # subtraction would: one instruction fewer (sm_90, Triton 3.9: nvfp4's dY pair 68.2 -> 66.0
    # per element at its 2048-element tile, 4 tiles a program).
    m = tl.minimum(mag, GMAX)
    if ELEM == 0:  # e2m1: spacing = binade / 2 (binade >= 1)
        # 1 / step = 2 / binade has the bits 0x7F800000 - b for the binade's bits b = bits & 0x7F800000;
        # b's bits lie inside 0x7F800000, so the subtraction borrows nothing: it is ~bits & 0x7F800000,
        # one instruction (the binade's mask and two additions before).
        inv_bits = ~tl.maximum(m, 1.0).to(tl.int32, bitcast=True) & 0x7F800000
        inv = inv_bits.to(tl.float32, bitcast=True)
        # the step, binade / 2, has the bits 0x7F000000 - inv_bits; times the block scale (s_fold: its
        # bits, a normal FP32) the exponents add: s_fold + (0x7F000000 - inv_bits) - 0x3F800000
        if SCALED:
            step = (s_fold - inv_bits + 0x3F800000).to(tl.float32, bitcast=True)  # (one IADD3)
        else:
            step = (0x7F000000 - inv_bits).to(tl.float32, bitcast=True)
    elif ELEM == 1:
        inv = 4.0
        step = s_fold if SCALED else 0.25
    else:
        inv = 1.0
        step = s_fold if SCALED else 1.0
    return tl.ceil(tl.fma(m, inv, neg_u)), step


@triton.jit
def _fp8_rtne(mag, SUB: tl.constexpr, MIN_NORMAL: tl.constexpr, SHIFT: tl.constexpr,
              HALF: tl.constexpr, FMAX: tl.constexpr):
    """formats.round_fp8_rtne on non-negative float32: clamp to FMAX, then RTNE onto the FP8 grid
    (subnormals are multiples of 1/SUB; normals keep 23 - SHIFT mantissa bits)."""
    m = tl.minimum(mag, FMAX)
    q_sub = _rint(m * SUB) * (1.0 / SUB)
    bits = m.to(tl.uint32, bitcast=True)
    bits = (bits + HALF + ((bits >> SHIFT) & 1)) >> SHIFT << SHIFT
    return tl.where(m < MIN_NORMAL, q_sub, bits.to(tl.float32, bitcast=True))


@triton.jit
def _e4m3_rtne(mag):
    return _fp8_rtne(mag, 512.0, 0.015625, 20, 0x7FFFF, 448.0)


@triton.jit
def _e4m3_code(q):
    """A non-negative E4M3 value (float32) -> its 7-bit code (positive codes are ordered)."""
    bits = q.to(tl.int32, bitcast=True)
    normal = ((((bits >> 23) & 0xFF) - 120) << 3) | ((bits >> 20) & 7)
    return tl.where(q < 0.015625, (q * 512.0).to(tl.int32), normal)


@triton.jit
def _e4m3_value(code):
    normal = ((((code >> 3) + 120) << 23) | ((code & 7) << 20)).to(tl.float32, bitcast=True)
    return tl.where(code < 8, code.to(tl.float32) * (1.0 / 512.0), normal)


@triton.jit
def _e4m3_sr(val, u):
    """formats.round_fp8_sr(val, 'e4m3', u) for non-negative val."""
    m = tl.minimum(tl.maximum(val, 0.0), 448.0)
    q = _e4m3_rtne(m)
    code = _e4m3_code(q)
    lo = tl.where(q > m, _e4m3_value(tl.maximum(code - 1, 0)), q)
    hi = tl.where(q < m, _e4m3_value(tl.minimum(code + 1, 126)), q)
    # Neighbouring E4M3 values are a power of two apart (2^-9 to 32), so (m - lo) / step is m - lo
    # (exact: lo <= m <= 2 lo, or lo = 0) times 1 / step, a power of two made on the bits: the same
    # rounding of the same quotient as the division, without one (~10 instructions and a call).
    step = hi - lo
    inv_step = (0x7F000000 - tl.where(step > 0, step, 1.0).to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)
    p = tl.where(step > 0, (m - lo) * inv_step, 0.0)
    return tl.where(u < p, hi, lo)


@triton.jit
def _e8m0_scale(amax, EMAX: tl.constexpr):
    """formats.e8m0_floor_scale: 2^(floor(log2 amax) - EMAX) clamped to [2^-127, 2^127]; 1 for 0."""
    bits = amax.to(tl.int32, bitcast=True)
    exp = ((bits >> 23) & 0xFF) - 127 - EMAX  # a subnormal amax gives <= -127: clamped below anyway
    exp = tl.minimum(tl.maximum(exp, -127), 127)
    exp = tl.where(amax > 0, exp, 0)
    sbits = tl.where(exp >= -126, (exp + 127) << 23, 0x00400000)
    return sbits.to(tl.float32, bitcast=True)


@triton.jit
def _round_elements(mag, neg_u, ELEM: tl.constexpr, GMAX: tl.constexpr, SR: tl.constexpr):
    if ELEM == 3:
        q = _e4m3_rtne(mag)
    elif ELEM == 4:
        q = _fp8_rtne(mag, 65536.0, 6.103515625e-05, 21, 0xFFFFF, 57344.0)
    elif SR:
        level, step = _grid_sr(mag, neg_u, ELEM, GMAX)
        q = level * step
    else:
        q = _grid_rtne(mag, ELEM, GMAX)
    return q


@triton.jit
def _round_signed(v, neg_u, ELEM: tl.constexpr, GMAX: tl.constexpr, SR: tl.constexpr, s_fold=None, neg_cs=None,
                  SCALED: tl.constexpr = False):
    """formats.round_elements: |v| rounded, negative exactly where v < 0, so -0.3 gives -0.0 and
    -0.0 gives +0 (v's sign bit alone would not do: a negative product that underflows is -0.0, and
    a rotation's zeros came out +0 on the GPU where the reference's were -0.0). The sign is the
    sign bit of v + 0.0 (+0 for -0.0 and for +0; v's otherwise), set on |q| by one LOP3 that also
    clears the -0.0 `_grid_sr` may give: two instructions where a compare and two selects ran."""
    signed = v + 0.0
    if SCALED and SR:  # the sign on the level, then times the (positive) scaled step
        level, step = _grid_sr(tl.abs(v), neg_u, ELEM, GMAX, s_fold, True)
        q = _with_sign_of(level, signed) * step
    elif SCALED:  # the scaled level goes to the BF16 conversion next: its sign set opaquely
        q = _with_sign_of(_grid_rtne(tl.abs(v), ELEM, GMAX, s_fold, neg_cs, True), signed, True)
    else:
        q = _with_sign_of(_round_elements(tl.abs(v), neg_u, ELEM, GMAX, SR), signed)
    return q


@triton.jit
def _with_sign_of(q, s, OPAQUE: tl.constexpr = False):
    """|q| with the sign bit of s: a bit select, one LOP3. Written as integer masks LLVM finds a
    copysign in it, and where the BF16 conversion comes right after, moves the copysign past it
    (BF16 halves negated under predicates: sm_90, Triton 3.6, +8 instructions an element of ufp4's X
    pair); OPAQUE: as inline assembly in PTX, which it leaves where it is. (Everywhere, the assembly
    changed the registers ptxas allots other kernels: 4/6's 90 -> 128.)"""
    if _PTX and OPAQUE:
        bits = tl.inline_asm_elementwise("lop3.b32 $0, $1, $2, 0x7fffffff, 0xe4;", "=r,r,r",
                                         [q.to(tl.uint32, bitcast=True), s.to(tl.uint32, bitcast=True)],
                                         dtype=tl.uint32, is_pure=True, pack=1)
    else:
        bits = (q.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) | (s.to(tl.uint32, bitcast=True) & 0x80000000)
    return bits.to(tl.float32, bitcast=True)


# --- tile helpers ----------------------------------------------------------------------------------

@triton.jit
def _pair_up(t, H: tl.constexpr):
    """Neighbouring pairs of the last axis (length 2H) of a 3-D tile summed: t[..., 2i] + t[..., 2i + 1]."""
    # A sum of two terms is the same whichever way round: tl.sum over the size-2 axis is exact here.
    return tl.sum(tl.reshape(t, (t.shape[0], t.shape[1], H, 2)), axis=3)


@triton.jit
def _tree_sum(t, LOG2N: tl.constexpr):
    """quant.tree_sum over the last axis (length 2^LOG2N <= 256) of a 3-D tile: neighbours first."""
    if LOG2N >= 8:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 7:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 6:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 5:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 4:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 3:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 2:
        t = _pair_up(t, t.shape[2] // 2)
    if LOG2N >= 1:
        t = _pair_up(t, 1)
    return tl.reshape(t, (t.shape[0], t.shape[1]))


@triton.jit
def _stage_pairs(x, BR: tl.constexpr, BK: tl.constexpr, H: tl.constexpr):
    """The (a, b) pairs an FWHT stage of stride H combines, each a (BR, BK / 2H, H) tile."""
    return tl.split(tl.permute(tl.reshape(x, (BR, BK // (2 * H), 2, H)), (0, 1, 3, 2)))


@triton.jit
def _butterfly(x, BR: tl.constexpr, BK: tl.constexpr, H: tl.constexpr):
    """One FWHT stage of stride H: (a, b) -> (a + b, a - b)."""
    a, b = _stage_pairs(x, BR, BK, H)
    return tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BR, BK))


@triton.jit
def _signed_fwht(x, signs, BR: tl.constexpr, BK: tl.constexpr, LOG2H: tl.constexpr, NORM: tl.constexpr,
                 RAND_SIGNS: tl.constexpr, LANES: tl.constexpr = 256):
    """transforms.rotate's steps on the tile's columns: x times the signs (a (BK,) vector of +-1), then
    the FWHT. With signs, the first stage (a s_a + b s_b, a s_a - b s_b) is t = b s_b, then
    fma(a, s_a, +-t): a product by +-1 is exact, so each FMA rounds once where the add did (the same
    bits, one multiply fewer per two elements). -t is written t * -1.0, which LLVM makes a negation
    and ptxas folds into the FMA: Triton's -t is 0 - t, an FADD of its own (it differs from -t at
    t = +0; a zero's sign never reaches an operand: `_round_signed` makes both +0, and amaxes take
    |x|). sm_90, Triton 3.6: ufp4's X pair amax 14.4 -> 13.0 instructions per element."""
    if RAND_SIGNS and LOG2H >= 1:
        a, b = _stage_pairs(x, BR, BK, 1)
        s_a, s_b = _stage_pairs(tl.broadcast_to(signs[None, :], (BR, BK)), BR, BK, 1)
        t = b * s_b
        x = tl.reshape(tl.permute(tl.join(tl.fma(a, s_a, t), tl.fma(a, s_a, t * -1.0)), (0, 1, 3, 2)), (BR, BK))
        x = _fwht(x, BR, BK, LOG2H, NORM, 2, LANES)
    else:
        if RAND_SIGNS:
            x = x * signs[None, :]
        x = _fwht(x, BR, BK, LOG2H, NORM, 1, LANES)
    return x


@triton.jit
def _partner(y, AXIS: tl.constexpr):
    """Each element's partner along a size-2 axis (the other of the pair), bit for bit: y ^ (a ^ b) on
    the int view. Where the axis lies across lanes, the xor sum is a shuffle: the tile keeps its layout."""
    i = y.to(tl.int32, bitcast=True)
    return (i ^ tl.xor_sum(i, AXIS, keep_dims=True)).to(tl.float32, bitcast=True)


@triton.jit
def _lane_butterfly(x, BR: tl.constexpr, BK: tl.constexpr, H: tl.constexpr):
    """`_butterfly` in x's own layout: a gets fma(a, 1, b) = a + b, b gets fma(b, -1, a) = a - b (a product
    by +-1 is exact: one rounding, the same bits), the partner from `_partner`. For strides whose pairs
    lie in different lanes, where `_butterfly`'s split makes Triton move the tile through shared memory."""
    y = tl.reshape(x, (BR, BK // (2 * H), 2, H))
    first = tl.arange(0, 2) == 0
    y = tl.fma(y, tl.where(first, 1.0, -1.0)[None, None, :, None], _partner(y, 2))
    return tl.reshape(y, (BR, BK))


@triton.jit
def _stage(x, BR: tl.constexpr, BK: tl.constexpr, H: tl.constexpr, LANES: tl.constexpr):
    """The FWHT stage of stride H: across lanes (`_lane_butterfly`) from stride LANES on."""
    if H >= LANES:
        x = _lane_butterfly(x, BR, BK, H)
    else:
        x = _butterfly(x, BR, BK, H)
    return x


@triton.jit
def _fwht(x, BR: tl.constexpr, BK: tl.constexpr, LOG2H: tl.constexpr, NORM: tl.constexpr,
          FIRST: tl.constexpr = 1, LANES: tl.constexpr = 256):
    """transforms.fwht on each group of 2^LOG2H (<= 128) along the tile's columns: strides 1, 2, 4...
    (from stride FIRST: the stages before it done); strides from LANES on by `_lane_butterfly`."""
    if LOG2H >= 1 and FIRST <= 1:
        x = _stage(x, BR, BK, 1, LANES)
    if LOG2H >= 2 and FIRST <= 2:
        x = _stage(x, BR, BK, 2, LANES)
    if LOG2H >= 3 and FIRST <= 4:
        x = _stage(x, BR, BK, 4, LANES)
    if LOG2H >= 4 and FIRST <= 8:
        x = _stage(x, BR, BK, 8, LANES)
    if LOG2H >= 5 and FIRST <= 16:
        x = _stage(x, BR, BK, 16, LANES)
    if LOG2H >= 6 and FIRST <= 32:
        x = _stage(x, BR, BK, 32, LANES)
    if LOG2H >= 7 and FIRST <= 64:
        x = _stage(x, BR, BK, 64, LANES)
    return x * NORM


@triton.jit
def _wide_strides(stride_r, stride_k, I64: tl.constexpr):
    """The strides as int64 where a tile's offsets may pass 2^31 (I64, `Launch`), so that the offsets
    made from them are; else as they are. Offsets in int32 save ~7 instructions per column of a tile
    along dim 0 (its 64-bit multiplies, shifts and adds: ~2 per element of an SR operand's wgrad tile)."""
    if I64:
        stride_r = stride_r * tl.full((), 1, tl.int64)
        stride_k = stride_k * tl.full((), 1, tl.int64)
    return stride_r, stride_k


@triton.jit
def _tile_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr,
                  NARROW: tl.constexpr):
    """Memory offsets and mask of the program's (BR, BK) tile. NARROW = F > 0 (for contiguous rows: a
    tensor quantized along dim 0) tells the compiler that rows come in contiguous runs of F only, so
    that a thread holds F rows (F * 2-byte accesses) across all BK columns, where 16-byte vectors give
    it 8 rows and so 8 * BK values: the butterflies and block maxima along K still run in registers,
    with fewer values per thread (registers: occupancy). The same layout with Triton 3.6 and 3.9.
    With NARROW, K's stride is a compile-time constant (the kernels' stride_k), so a thread's columns
    lie at constant distances from its row: the offsets are made as an int64 base per row plus
    constants, and each load or store addresses base + an immediate. As one int32 sum per element,
    sign-extended, they cost an add and two address instructions per 4- or 8-byte access (sm_90,
    Triton 3.6: ufp4's pair amax 19.8 -> 17.8 instructions per element, 126 -> 94 registers; nvfp4's
    dY pair 80.7 -> 78.5 and 121 -> 91). With a runtime stride this form costs 2-4 more."""
    rows = pid_r * BR + tl.arange(0, BR)
    if NARROW > 0:
        rows = tl.max_contiguous(tl.multiple_of(rows, NARROW), NARROW)
    cols = pid_k * BK + tl.arange(0, BK)
    if NARROW > 0:  # (int32 before the cast unless `_wide_strides`: `_offsets_pass_int32` bounds it)
        base = (rows * stride_r + pid_k * BK * stride_k).to(tl.int64)
        offs = base[:, None] + (tl.arange(0, BK) * stride_k).to(tl.int64)[None, :]
    else:
        offs = rows[:, None] * stride_r + cols[None, :] * stride_k  # int32 unless `_wide_strides`
    return offs, (rows[:, None] < R) & (cols[None, :] < K)


@triton.jit
def _rotate(x, signs, BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr,
            NORM: tl.constexpr, RAND_SIGNS: tl.constexpr):
    """transforms.rotate along the tile's columns: signs (`_program_signs`), then the FWHT."""
    if HAD > 0:
        x = _signed_fwht(x, signs, BR, BK, LOG2H, NORM, RAND_SIGNS)
    return x


@triton.jit
def _abs_rotation(x, signs, BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr,
                  RAND_SIGNS: tl.constexpr):
    """What an amax needs of |x rotated along the tile's columns, unnormalised|: without a rotation
    |x|; else a (BR, BK / 2) tile with the same maximum, the FWHT's last stage (a, b) -> (a + b,
    a - b) taken as |a| + |b|. That is max(|a + b|, |a - b|) to the bit: RN is odd-symmetric and
    monotone, and |a| + |b| is the one of the two whose terms have one sign (for inf - inf, NaN,
    against the other's inf: the max ignores the NaN). One FADD and one max per two elements instead
    of two each."""
    if HAD == 0:  # (no early return: Triton compiles what follows it in a compile-time branch too)
        t = tl.abs(x)
    else:
        a, b = _stage_pairs(_signed_fwht(x, signs, BR, BK, LOG2H - 1, 1.0, RAND_SIGNS), BR, BK, HAD // 2)
        t = tl.reshape(tl.abs(a) + tl.abs(b), (BR, BK // 2))
    return t


@triton.jit
def _scaled(x, x_scale, HAS_SCALE: tl.constexpr):
    """x * x_scale, the FP32 scale (an operand brought back to real units, as the reference's
    x.float() * scale), or x."""
    if HAS_SCALE:
        x = x * x_scale
    return x


@triton.jit
def _load_rotated(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale,
                  BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr,
                  NORM: tl.constexpr, RAND_SIGNS: tl.constexpr, HALVES: tl.constexpr, NARROW: tl.constexpr,
                  HAS_SCALE: tl.constexpr, LOAD_LAYOUT: tl.constexpr):
    """The program's (BR, BK) tile in float32 (times x_scale where HAS_SCALE), rotated along K (signs
    from `_program_signs`), and its row indices. LOAD_LAYOUT (MS-EDEN's RHT128 loaded whole): the
    rotation keeps the load layout, its strides from 8 on across lanes (`_lane_butterfly`). HALVES
    with a group wider than 16 (MS-EDEN's RHT128): `_load_halves_wide`."""
    rows = pid_r * BR + tl.arange(0, BR)
    if HALVES and HAD > 16:
        x = _load_halves_wide(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR, BK,
                              LOG2H, NORM, RAND_SIGNS, HAS_SCALE)
    elif HALVES:  # along a contiguous K, in halves (rotated by RHT16), then each run's 16 put back together
        lo, hi = _load_halves(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR, BK,
                              HAD, NORM, RAND_SIGNS, HAS_SCALE)
        x = tl.reshape(tl.permute(tl.join(lo, hi), (0, 2, 1)), (BR, BK))
    else:  # (one return: Triton compiles what follows a return inside a compile-time branch too)
        loaded = _load_tile(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, x_scale, BR, BK, NARROW, HAS_SCALE)
        if LOAD_LAYOUT:
            x = _signed_fwht(loaded, signs_a, BR, BK, LOG2H, NORM, RAND_SIGNS, 8)
        else:
            x = _rotate(loaded, signs_a, BR, BK, HAD, LOG2H, NORM, RAND_SIGNS)
    return x, rows


@triton.jit
def _in_layout_of(x, like, K):
    """x, the same bits, in the register layout of `like` (a tensor of x's shape): or-ed with like's
    bits and'ed with K >> 31, a zero the compiler cannot see (K >= 0), so one layout conversion is
    made here (the generic amax pass's RHT128 max, `_abs_rotated`). For MS-EDEN's quantize pass after
    RHT128 the compiler otherwise kept the butterflies' layout, in which a thread's elements fall in
    many blocks: each block's scale, division and EDEN sums were made per thread that touches it
    (sm_90, quartet2's 4096-element tile: 140 instructions per element and 239 registers; 78 and 96
    with the conversion). That pass now never leaves its load layout (`_lane_butterfly`,
    `_load_halves_wide`: 42.5)."""
    zero = (K >> 31).to(tl.uint32)
    bits = x.to(tl.uint32, bitcast=True) | (like.to(tl.uint32, bitcast=True) & zero)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _load_tile(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, x_scale, BR: tl.constexpr, BK: tl.constexpr,
               NARROW: tl.constexpr, HAS_SCALE: tl.constexpr):
    """The program's (BR, BK) tile in float32, times x_scale where HAS_SCALE."""
    offs, mask = _tile_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK, NARROW)
    return _scaled(_as_float(tl.load(x_ptr + offs, mask=mask, other=0.0)), x_scale, HAS_SCALE)


@triton.jit
def _halves_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr):
    """Memory offsets and mask of the low halves (elements 0-7 of each run of 16 along a contiguous
    K) of the program's (BR, BK) tile, as a (BR, BK / 16, 8) tile; the high halves are 8 further on."""
    NG: tl.constexpr = BK // 16
    rows = pid_r * BR + tl.arange(0, BR)
    cols = (pid_k * NG + tl.arange(0, NG))[:, None] * 16 + tl.arange(0, 8)[None, :]
    offs = rows[:, None, None] * stride_r + cols[None, :, :] * stride_k  # int32 unless `_wide_strides`
    return offs, (rows[:, None, None] < R) & (cols[None, :, :] < K)


@triton.jit
def _load_halves(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_lo, signs_hi, x_scale,
                 BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, NORM: tl.constexpr,
                 RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr):
    """The tile along a contiguous K as its halves (elements 0-7 and 8-15 of each run of 16), each a
    (BR * BK / 16, 8) tile, rotated by RHT16 where HAD = 16. A load gives each thread 8 contiguous
    BF16 (16 bytes), so a run of 16 loaded whole spans two threads: a block of 16 then needs a warp
    shuffle for its amax and both threads compute its scale, and the butterflies trade values by
    shuffles (~4 per element). Loaded as two halves laid out alike, a thread holds both halves of its
    runs: the strides 1, 2, 4 run inside each half and the stride-8 stage pairs the halves, in
    registers, and a block's scale is made once (sm_90, nvfp4's SR dY: 42.7 -> 40.1 instructions
    per element)."""
    lo, hi = _halves_unpaired(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_lo, signs_hi, x_scale, BR, BK,
                              HAD, RAND_SIGNS, HAS_SCALE)
    if HAD == 0:
        return lo, hi
    return (lo + hi) * NORM, (lo - hi) * NORM


@triton.jit
def _runs_first_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr):
    """`_halves_offsets` as a (BR * BK / 16, 8) tile whose rows are (tile row, run) with the run
    fastest: Triton lays such a load's lanes along its rows, so the runs of a row lie in neighbouring
    lanes (as a (BR, BK / 16, 8) tile the lanes took the rows and the warps the runs (Triton 3.6), or
    load and store differed (3.9): every stride from 16 on went through shared memory)."""
    NG: tl.constexpr = BK // 16
    i = tl.arange(0, BR * NG)
    rows = pid_r * BR + i // NG
    cols = (pid_k * NG + i % NG)[:, None] * 16 + tl.arange(0, 8)[None, :]
    offs = rows[:, None] * stride_r + cols * stride_k  # int32 unless `_wide_strides`
    return offs, (rows[:, None] < R) & (cols < K)


@triton.jit
def _load_halves_wide(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale,
                      BR: tl.constexpr, BK: tl.constexpr, LOG2H: tl.constexpr, NORM: tl.constexpr,
                      RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr):
    """The (BR, BK) tile along a contiguous K rotated by a Hadamard group wider than 16 (MS-EDEN's
    RHT128), loaded as halves (`_halves_offsets`) so that a thread holds each of its runs of 16 whole:
    the strides 1, 2, 4 inside each half, 8 between the halves, in registers; the wider strides pair
    runs in other lanes (`_lane_butterfly`: a shuffle an element), and the tile keeps its layout. A
    block of 16 is then one thread's: its scale is made once, where loaded whole a block spans two
    threads, both making it. signs_a, signs_b: (BK / 16, 8) signs of the halves' positions."""
    lo, hi = _wide_halves_raw(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, BR, BK, True)
    return _rotate_wide_halves(lo, hi, signs_a, signs_b, x_scale, BR, BK, LOG2H, NORM, RAND_SIGNS, HAS_SCALE)


@triton.jit
def _wide_halves_raw(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr, live):
    """`_load_halves_wide`'s two loads, as loaded (none of the tile's elements where `live` is false:
    a prefetch past the program's last tile)."""
    offs, mask = _runs_first_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK)
    mask = mask & live
    return tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(x_ptr + offs + 8 * stride_k, mask=mask, other=0.0)


@triton.jit
def _rotate_wide_halves(lo, hi, signs_a, signs_b, x_scale, BR: tl.constexpr, BK: tl.constexpr, LOG2H: tl.constexpr,
                        NORM: tl.constexpr, RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr):
    """`_load_halves_wide`'s rotation of its loaded halves (`_wide_halves_raw`)."""
    NG: tl.constexpr = BK // 16
    lo = _scaled(_as_float(lo), x_scale, HAS_SCALE)
    hi = _scaled(_as_float(hi), x_scale, HAS_SCALE)
    # each half's runs side by side: (BR, BK / 2), the signs of its columns, strides 1, 2, 4
    lo = _signed_fwht(tl.reshape(lo, (BR, BK // 2)), tl.reshape(signs_a, (BK // 2,)), BR, BK // 2, 3, 1.0, RAND_SIGNS)
    hi = _signed_fwht(tl.reshape(hi, (BR, BK // 2)), tl.reshape(signs_b, (BK // 2,)), BR, BK // 2, 3, 1.0, RAND_SIGNS)
    lo, hi = tl.reshape(lo, (BR, NG, 8)), tl.reshape(hi, (BR, NG, 8))
    x = tl.reshape(tl.permute(tl.join(lo + hi, lo - hi), (0, 1, 3, 2)), (BR, BK))
    return _fwht(x, BR, BK, LOG2H, NORM, 16, 16)


@triton.jit
def _abs_halves(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_lo, signs_hi, x_scale,
                BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, RAND_SIGNS: tl.constexpr,
                HAS_SCALE: tl.constexpr):
    """`_abs_rotation` for a tile loaded as halves (`_halves_unpaired`), a (BR * BK / 16, 8) tile:
    under RHT16 |lo| + |hi| (its last stage pairs the halves), else the larger of |lo| and |hi|."""
    lo, hi = _halves_unpaired(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_lo, signs_hi, x_scale, BR, BK,
                              HAD, RAND_SIGNS, HAS_SCALE)
    if HAD == 0:
        t = tl.maximum(tl.abs(lo), tl.abs(hi))
    else:
        t = tl.abs(lo) + tl.abs(hi)
    return t


@triton.jit
def _halves_unpaired(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_lo, signs_hi, x_scale,
                     BR: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, RAND_SIGNS: tl.constexpr,
                     HAS_SCALE: tl.constexpr):
    """`_load_halves` before RHT16's last stage (the stride-8 one, which pairs the halves): with
    HAD = 16 each half signed and through the strides 1, 2, 4; else as loaded."""
    NG: tl.constexpr = BK // 16
    offs, mask = _halves_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK)
    lo = _as_float(tl.load(x_ptr + offs, mask=mask, other=0.0))
    hi = _as_float(tl.load(x_ptr + offs + 8 * stride_k, mask=mask, other=0.0))
    lo = tl.reshape(_scaled(lo, x_scale, HAS_SCALE), (BR * NG, 8))
    hi = tl.reshape(_scaled(hi, x_scale, HAS_SCALE), (BR * NG, 8))
    if HAD > 0:
        lo = _signed_fwht(lo, signs_lo, BR * NG, 8, 3, 1.0, RAND_SIGNS)
        hi = _signed_fwht(hi, signs_hi, BR * NG, 8, 3, 1.0, RAND_SIGNS)
    return lo, hi


@triton.jit
def _store_halves(out_ptr, out, pid_r, pid_k, R, K, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr,
                  WIDE: tl.constexpr = False):
    """Store a (BR, BK) tile as `_load_halves` read it (WIDE: `_load_halves_wide`): no layout
    conversion before the store."""
    NG: tl.constexpr = BK // 16
    lo, hi = tl.split(tl.permute(tl.reshape(out, (BR * NG, 2, 8)), (0, 2, 1)))
    if WIDE:
        offs, mask = _runs_first_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK)
    else:
        offs, mask = _halves_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK)
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + offs, tl.reshape(lo, offs.shape).to(dtype), mask=mask)
    tl.store(out_ptr + offs + 8 * stride_k, tl.reshape(hi, offs.shape).to(dtype), mask=mask)


@triton.jit
def _tile_max(t):
    """max of a non-negative 2-D tile: over runs of 16 along its rows first, as the quantize kernel's
    block reductions do. After butterflies Triton then needs fewer layout conversions (29 -> 23
    shared-memory barriers per RHT16 tile in the sm_90 PTX). A max is exact in any order."""
    BR: tl.constexpr = t.shape[0]
    BK: tl.constexpr = t.shape[1]
    RUN: tl.constexpr = 16 if BK >= 16 else BK
    runs = tl.max(tl.reshape(t, (BR, BK // RUN, RUN)), axis=2)
    return tl.max(tl.max(runs, axis=1), axis=0)


# --- kernels ---------------------------------------------------------------------------------------

@triton.jit
def _last_first(axis: tl.constexpr):
    """This program's index along a grid axis, counted from the end. The amax passes walk their tiles
    from the end of the launch order so that the quantize pass after them, walking from the start,
    first reads the tiles the amax pass read last, which the L2 cache still holds (the H200's 50 MB
    hold most of a layer's 64 MB activation at d = 2048): fewer DRAM bytes, the same bits (a max does
    not depend on the order)."""
    return tl.num_programs(axis) - 1 - tl.program_id(axis)


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, plain_ptr, R, K, stride_r, stride_k: tl.constexpr, seeds_ptr, scale_ptr,
                 TILE: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr,
                 NORM: tl.constexpr, RAND_SIGNS: tl.constexpr, HALVES: tl.constexpr, NARROW: tl.constexpr,
                 HAS_SCALE: tl.constexpr, PLAIN: tl.constexpr, I64: tl.constexpr, LOAD_LAYOUT: tl.constexpr,
                 ITERS: tl.constexpr):
    """Tensor amax of the (rotated) canonical view: one read (tiles in reverse launch order:
    `_last_first`), an atomic max per program of ITERS consecutive tiles along R (each element's
    running max in registers, one reduction at the end: per tile, the reduction's barriers were ~20%
    of the H200 pair amax's stall samples in ncu). HALVES (RHT16 along a contiguous K): 1 rotated in two
    halves (`_abs_halves`), 2 loaded whole with the last stage across lanes (`_abs_lane_pairs`), 0 loaded
    whole as any other rotation. PLAIN (not with HALVES): also the amax of the tile before the rotation,
    into plain_ptr (`tensor_amaxes`). LOAD_LAYOUT: the rotated tile's max is taken in its load layout
    (`_in_layout_of`; a rotation along a contiguous K: sm_90, MS-EDEN's RHT128 at the 8192-element
    tile, 33.6 -> 25.9 instructions and 5.4 -> 1.6 shuffles per element; the max in the butterflies'
    layout took the shuffles)."""
    BR: tl.constexpr = TILE // BK
    pid_k = _last_first(1)
    stride_r, stride_k = _wide_strides(stride_r, stride_k, I64)
    signs_a, signs_b = _program_signs(seeds_ptr, BK, HAD, RAND_SIGNS, HALVES == 1)
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    # The rotation's normalisation is applied to the maximum, not to each element: rounding is
    # monotone, so max RN(NORM |r|) = RN(NORM max |r|) to the bit.
    pid_r = _last_first(0) * ITERS
    most, most_plain = _abs_rotated(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR, BK,
                                    HAD, LOG2H, RAND_SIGNS, HALVES, NARROW, HAS_SCALE, LOAD_LAYOUT)
    for i in range(1, ITERS):  # (the first tile outside the loop: no max with zeros)
        tile, plain = _abs_rotated(x_ptr, pid_r + i, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR,
                                   BK, HAD, LOG2H, RAND_SIGNS, HALVES, NARROW, HAS_SCALE, LOAD_LAYOUT)
        most = tl.maximum(most, tile)
        if PLAIN:
            most_plain = tl.maximum(most_plain, plain)
    if PLAIN:
        _atomic_max(plain_ptr, tl.max(tl.max(most_plain, axis=1), axis=0))
    _atomic_max(amax_ptr, _tile_max(most) * NORM)


@triton.jit
def _abs_lane_pairs(x, signs, BR: tl.constexpr, BK: tl.constexpr, RAND_SIGNS: tl.constexpr):
    """`_abs_rotation` under RHT16 for a (BR, BK) tile along a contiguous K in its load layout (8
    contiguous elements a thread, a run's two halves in neighbouring lanes): the strides 1, 2, 4
    inside each thread, then the last stage's |a| + |b| (`_abs_rotation`) with each lane of a pair
    finishing half of the run's 8 pairs: it keeps 4 of its values and takes 4 of its partner's
    (`_partner`: a shuffle each), half a shuffle an element. Each warp load then reads 512 contiguous
    bytes, where the halves' loads (`_abs_halves`) read every other 16 bytes of 1 KB twice: on the
    H200 ufp4's amax ran 2783 -> 3347 GB/s at (16384, 4096), 2265 -> 2558 at (16384, 2048), each at its
    best tile (a plain amax: 3591 and 2767); with all 8 pairs a lane, 8 shuffles, 3246 and 2521.

    Which 4 a lane keeps needs no select: the second lane's elements 4-7 (a run's 12-15) come in
    negated, which turns its 8-point FWHT's output k into output k ^ 4, to the bit (the strides 1 and 2
    give the negated values exactly, and stride 4's p + (-q) and p - (-q) are p - q and p + q). So
    both lanes keep their outputs 0-3 and send 4-7: the first lane pairs its 0-3 with the second's
    0-3, the second its 4-7 with the first's 4-7. The negation rides on the signs (a product by +-1,
    made once per program): one FSEL an element fewer."""
    j = tl.arange(0, BK) % 16
    flips = tl.where(j >= 12, -1.0, 1.0)
    if RAND_SIGNS:
        flips = flips * signs
    y = tl.reshape(_signed_fwht(x, flips, BR, BK, 3, 1.0, True), (BR, BK // 16, 2, 2, 4))  # (row, run, lane, half, 4)
    kept, sent = tl.split(tl.permute(y, (0, 1, 2, 4, 3)))  # each lane's outputs 0-3 and 4-7
    t = tl.abs(kept) + tl.abs(_partner(sent, 2))
    return tl.reshape(t, (BR, BK // 2))


@triton.jit
def _abs_rotated(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR: tl.constexpr,
                 BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr, RAND_SIGNS: tl.constexpr,
                 HALVES: tl.constexpr, NARROW: tl.constexpr, HAS_SCALE: tl.constexpr, LOAD_LAYOUT: tl.constexpr):
    """What the amax pass needs of |the tile rotated, unnormalised| (`_abs_rotation`: a (BR, BK / 2)
    tile under a rotation; with HALVES 1 `_abs_halves`, a (BR * BK / 16, 8) tile; with HALVES 2
    `_abs_lane_pairs`; with LOAD_LAYOUT the whole rotated tile in the load layout) and |the tile as
    loaded| (never read with HALVES)."""
    if HALVES == 1:
        rotated = _abs_halves(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale, BR, BK, HAD,
                              RAND_SIGNS, HAS_SCALE)
        plain = rotated  # (never read)
    else:
        loaded = _load_tile(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, x_scale, BR, BK, NARROW, HAS_SCALE)
        if HALVES == 2:
            rotated = _abs_lane_pairs(loaded, signs_a, BR, BK, RAND_SIGNS)
        elif LOAD_LAYOUT:  # (the halved tile has no load layout to be put in)
            rotated = tl.abs(_in_layout_of(_rotate(loaded, signs_a, BR, BK, HAD, LOG2H, 1.0, RAND_SIGNS), loaded, K))
        else:
            rotated = _abs_rotation(loaded, signs_a, BR, BK, HAD, LOG2H, RAND_SIGNS)
        plain = tl.abs(loaded)
    return rotated, plain


@triton.jit
def _atomic_max(ptr, value):
    """An amax pass's atomic max, relaxed: the amax is read by the next kernel only, after this one
    ends, so no fence is needed (the default acq_rel one cost ~5% of the H200 pair amax's stall
    samples in ncu)."""
    tl.atomic_max(ptr, value, sem="relaxed")


@triton.jit
def _block_scale(amax_b, s_enc, target, SCALE: tl.constexpr, EMAX: tl.constexpr, BY_RCP: tl.constexpr = 0.0):
    """quant.block_scale_for (E4M3 saturating at its largest value, 448, as there). BY_RCP (target's
    value, where `_by_reciprocal` serves it and the amaxes; 0.0: div_rn): amax_b / target by it."""
    if SCALE == 0:
        s = _e8m0_scale(amax_b, EMAX)
    elif SCALE == 1 and BY_RCP != 0.0:
        s = _e4m3_rtne(tl.minimum(_by_reciprocal(amax_b, BY_RCP) * s_enc, 448.0))
    elif SCALE == 1:
        s = _e4m3_rtne(tl.minimum(tl.math.div_rn(amax_b, target) * s_enc, 448.0))
    else:
        s = tl.math.div_rn(amax_b, target) * s_enc
    return s


# The targets `_by_reciprocal` divides by as IEEE division does (FP32 values), each for the amaxes
# its docstring says.
RECIPROCAL_TARGETS = (6.0, 1.75)


@triton.jit
def _by_reciprocal(a, B: tl.constexpr):
    """a / B, rounded as IEEE division (`div_rn`) rounds it, for a >= 0, in 3 or 4 instructions where
    div_rn takes ~10 (a reciprocal, its check, 5 FMAs, a branch to its slow path). Checked exhaustively
    against IEEE division with exact FMA semantics (numpy: every FP32 a below 2^-121, the binade [1, 2)
    and the top binades; the rest follow by scaling, every step exact or rounded in FP32's normal
    range), and in the interpreter.
    B = 6 (NVFP4's target): q0 = a fp32(1/6), r = a - 6 q0 (exact: one FMA), q0 + r fp32(1/6) (one
    FMA). Equal to div_rn for every a that is a multiple of 2^-135 (an amax of BF16 or FP16 values, or
    of RHT16 rotations of them); among other a below 2^-121 (a subnormal quotient) 1 in ~6 is 1 ulp
    off at a tie, which a multiple of 2^-135 never is (a / 6 lies at least 2^-149 / 6 from one).
    B = 1.75 (UFP4's): the same with 7 and 4a: q0 = a fp32(4/7), r = 4a - 7 q0 (exact, where
    a - 1.75 q0 rounds in the subnormal range: 536 multiples of 2^-135 were off that way), q0 + r
    fp32(1/7) (fp32(4/7) / 4, exactly). Equal to div_rn for every FP32 a below 2^126 (4a finite): an
    RHT16 rotation's amax in the bit contract (|a| = 2^-2 |a sum of 16| < 2^126 where the sum does not
    overflow FP32)."""
    if B == 1.75:
        q0 = a * 0.5714285969734192  # fp32(4 / 7)
        r = tl.fma(q0 * -1.0, 7.0, a * 4.0)
        q = tl.fma(r, 0.1428571492433548, q0)  # fp32(1 / 7)
    else:
        tl.static_assert(B == 6.0)
        q0 = a * 0.1666666716337204  # fp32(1 / 6)
        r = tl.fma(q0 * -1.0, 6.0, a)
        q = tl.fma(r, 0.1666666716337204, q0)
    return q


@triton.jit
def _scale_fold(s_b, ELEM: tl.constexpr, SR: tl.constexpr, SCALED: tl.constexpr):
    """What a SCALED rounding takes of each block's scale s_b (an E4M3 value, or 0), per block: SR on
    E2M1 its bits (`_grid_sr` adds the step's exponent to them; a zero scale as 1: its block's levels
    are all 0 and any finite step keeps them 0), SR on a uniform grid the step times it, RTNE on one
    s_b and -c s_b (`_grid_rtne`). Without SCALED, s_b twice (never read)."""
    s_fold = s_b
    neg_cs = s_b
    if SCALED:
        if SR and ELEM == 0:
            s_fold = tl.where(s_b > 0, s_b, 1.0).to(tl.int32, bitcast=True)
        elif SR:
            s_fold = s_b * (0.25 if ELEM == 1 else 1.0)
        else:
            neg_cs = s_b * (-2097152.0 if ELEM == 1 else -8388608.0)
    return s_fold, neg_cs


@triton.jit
def _round_blocks(x4, s_b, s_enc, neg_u4, ELEM: tl.constexpr, GMAX: tl.constexpr, SR: tl.constexpr,
                  SCALED: tl.constexpr = False):
    """quant._round_blocks on a (nbr, br, nbk, bk) tile with (nbr, nbk) block scales (SR: the negated
    uniforms `neg_u4`); SCALED (`_quantize_tile`): the levels times their block scale."""
    ok = s_b > 0
    factor = tl.where(ok, tl.math.div_rn(tl.zeros_like(s_b) + s_enc, tl.where(ok, s_b, 1.0)), 0.0)
    s_fold, neg_cs = _scale_fold(s_b, ELEM, SR, SCALED)
    return _round_signed(x4 * factor[:, None, :, None], neg_u4, ELEM, GMAX, SR, s_fold[:, None, :, None],
                         neg_cs[:, None, :, None], SCALED)


@triton.jit
def _block_sq_err(q4, s_b, neg_x_enc4, NBR: tl.constexpr, NBK: tl.constexpr, LOG2N: tl.constexpr,
                  EXACT_PRODUCT: tl.constexpr):
    """tree_sum((q * s_b - x_enc)^2) per block, elements in quant.to_blocks order, given -x_enc (Triton's
    `-t` is 0 - t, an FADD an element: sm_90, quartet2's 4/6 fprop X 54.1 -> 53.1 per element).
    EXACT_PRODUCT (E4M3 or E8M0 block scales): q (a 4- or 8-bit element, at most 4 significant bits)
    times s_b (at most 4; an E8M0 scale's subnormal products are multiples of 2^-149 still) is exact in
    FP32, so fma(q, s_b, -x_enc) rounds once where the subtraction did: the same bits, one instruction
    fewer."""
    if EXACT_PRODUCT:
        d = tl.fma(q4, s_b[:, None, :, None], neg_x_enc4)
    else:
        d = q4 * s_b[:, None, :, None] + neg_x_enc4
    d = tl.reshape(tl.permute(d * d, (0, 2, 1, 3)), (NBR, NBK, 1 << LOG2N))
    return _tree_sum(d, LOG2N)


@triton.jit
def _quantize_tile(x, rows, col0, K, s_enc, round_key, scale_key, target,
                   BR: tl.constexpr, BK: tl.constexpr, LOG2H: tl.constexpr,
                   BLK_R: tl.constexpr, BLK_K: tl.constexpr, LOG2_BLK: tl.constexpr,
                   PER_TENSOR: tl.constexpr, TENSOR_SCALE: tl.constexpr,
                   SCALE: tl.constexpr, EMAX: tl.constexpr,
                   ELEM: tl.constexpr, GMAX: tl.constexpr, SR: tl.constexpr, PAIRS: tl.constexpr,
                   FOUR_SIX: tl.constexpr, EDEN: tl.constexpr, BY_RCP: tl.constexpr = 0.0):
    """quant.quantize's steps 3-6 on a loaded, rotated (BR, BK) tile of the canonical (R, K) view
    (`rows`: its row indices; its columns start at col0), given the tensor's encode scale s_enc and
    the rounding streams' keys: values * block scale."""
    NBR: tl.constexpr = BR // BLK_R
    NBK: tl.constexpr = BK // BLK_K
    x4 = tl.reshape(x, (NBR, BLK_R, NBK, BLK_K))
    if PER_TENSOR:
        s_b = tl.full((NBR, NBK), 1.0, tl.float32)
    else:
        amax_b = tl.max(tl.max(tl.abs(x4), axis=3), axis=1)
        s_b = _block_scale(amax_b, s_enc, target, SCALE, EMAX, BY_RCP)

    # The uniforms come after the block amax, so each can be made where it is used: made before,
    # the whole tile of them stays live beside x (255 registers and spills for RHT16+SR in sm_90).
    neg_u = x  # placeholder when SR is off (never read)
    if SR:
        neg_u = _paired_uniforms(rows, col0, K, round_key, BK, PAIRS)
    neg_u4 = tl.reshape(neg_u, (NBR, BLK_R, NBK, BLK_K))
    # SCALED: the rounding multiplies the block scale in (`_scale_fold`) instead of a pass over the
    # levels after it: E4M3 block scales (normal in FP32, 4 significant bits: a level times a scale is
    # exact), a uniform grid or SR on E2M1 (where that saves an instruction an element), and nothing
    # after the rounding that needs the levels themselves (4/6's errors, MS-EDEN's correction).
    SCALED: tl.constexpr = ((SCALE == 1) and (ELEM <= 2) and (SR or ELEM > 0) and (not PER_TENSOR)
                            and (not FOUR_SIX) and (not EDEN))
    q4 = _round_blocks(x4, s_b, s_enc, neg_u4, ELEM, GMAX, SR, SCALED)

    if FOUR_SIX:
        s_b4 = _block_scale(amax_b, s_enc, 4.0, SCALE, EMAX)
        q4_4 = _round_blocks(x4, s_b4, s_enc, neg_u4, ELEM, GMAX, SR)
        neg_x_enc4 = x4 * (s_enc * -1.0)  # = -(x4 * s_enc), bit for bit
        err6 = _block_sq_err(q4, s_b, neg_x_enc4, NBR, NBK, LOG2_BLK, SCALE != 2)
        err4 = _block_sq_err(q4_4, s_b4, neg_x_enc4, NBR, NBK, LOG2_BLK, SCALE != 2)
        use4 = err4 < err6
        s_b = tl.where(use4, s_b4, s_b)
        q4 = tl.where(use4[:, None, :, None], q4_4, q4)

    if EDEN:  # blocks are 1 x BLK_K here (NBR == BR); groups of 2^LOG2H along K
        # One group per tile row (BK == the group): tree_sum over its 2^LOG2H, neighbours first.
        x_enc = tl.reshape(x4 * s_enc, (BR, 1, BK))
        deq = tl.reshape(q4 * s_b[:, None, :, None], (BR, 1, BK))
        num = _tree_sum(x_enc * x_enc, LOG2H)  # (BR, 1)
        den = _tree_sum(x_enc * deq, LOG2H)
        c = tl.where(den > 0, tl.math.div_rn(num, tl.where(den > 0, den, 1.0)), 1.0)
        corrected = s_b * c
        bcol = col0 // BLK_K + tl.arange(0, NBK)
        bindex = rows[:, None].to(tl.int64) * (K // BLK_K) + bcol[None, :]
        s_b = _e4m3_sr(corrected, _uniform(bindex.to(tl.uint32), scale_key))

    if not SCALED:
        q4 = q4 * s_b[:, None, :, None]
    return tl.reshape(q4, (BR, BK))


@triton.jit
def _encode_scale(amax_ptr, inv_ptr, numer, TENSOR_SCALE: tl.constexpr, factor_ptr=None,
                  HAS_FACTOR: tl.constexpr = False):
    """quant.tensor_encode_scale from the tensor amax (1 without a tensor scale); the first program
    also stores its inverse, the GEMM's output scale, at inv_ptr (HAS_FACTOR: times the FP32 value at
    factor_ptr, the other operand's, so the GEMM's output scale needs no kernel of its own)."""
    if TENSOR_SCALE:
        s_enc = tl.math.div_rn(numer, tl.load(amax_ptr))
        s_enc = tl.where(s_enc < float("inf"), s_enc, 1.0)  # amax 0, NaN or too tiny: 1, as the reference
    else:
        s_enc = tl.full((), 1.0, tl.float32)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        inv = tl.math.div_rn(1.0, s_enc)
        if HAS_FACTOR:
            inv = inv * tl.load(factor_ptr)
        tl.store(inv_ptr, inv)
    return s_enc


@triton.jit
def _quantize_kernel(x_ptr, out_ptr, amax_ptr, inv_ptr, seeds_ptr, scale_ptr, R, K, stride_r, stride_k: tl.constexpr,
                     numer, target,
                     TILE: tl.constexpr, BK: tl.constexpr, HAD: tl.constexpr, LOG2H: tl.constexpr,
                     NORM: tl.constexpr, RAND_SIGNS: tl.constexpr, HALVES: tl.constexpr,
                     BLK_R: tl.constexpr, BLK_K: tl.constexpr, LOG2_BLK: tl.constexpr,
                     PER_TENSOR: tl.constexpr, TENSOR_SCALE: tl.constexpr,
                     SCALE: tl.constexpr, EMAX: tl.constexpr,
                     ELEM: tl.constexpr, GMAX: tl.constexpr, SR: tl.constexpr, PAIRS: tl.constexpr,
                     FOUR_SIX: tl.constexpr, EDEN: tl.constexpr, NARROW: tl.constexpr, HAS_SCALE: tl.constexpr,
                     I64: tl.constexpr, ITERS: tl.constexpr, OUT_T: tl.constexpr = False):
    """One operand: load -> rotate -> _quantize_tile -> store, one (TILE // BK, BK) tile per program.
    HALVES (blocks of 16 along a contiguous K, with no rotation, RHT16 or MS-EDEN's RHT128): 0 loads
    and stores the tile whole, 1 loads it as halves (`_load_halves`; `_load_halves_wide` for RHT128)
    and stores it whole (Triton converts the layout through shared memory), 2 loads and stores halves.
    Halves make a block's scale once and keep RHT16 in registers, but each load or store instruction
    then touches every other 16 bytes: which wins
    depends on the spec (H200: RTNE without a rotation loses ~18% with halves both ways, nvfp4's SR dY
    gains ~10%), so the tuner tries each.
    ITERS: the program quantizes ITERS consecutive tiles along R, after making once what every tile
    uses (the tensor's encode scale, the streams' keys, the transform's signs). What a thread does
    besides its elements' work was ~190 (nvfp4's SR dY) to ~530 (its RHT16 wgrad dY) sm_90
    instructions before (fitted to the counts at 32 and 64 elements per thread): 6-17 per element of
    a tile with 32 per thread.
    stride_k is a compile-time constant (1 along a contiguous K, the row length along dim 0:
    `_tile_offsets`), so a kernel along dim 0 is compiled once per tensor width."""
    BR: tl.constexpr = TILE // BK  # tile rows
    pid_k = tl.program_id(1)
    stride_r, stride_k = _wide_strides(stride_r, stride_k, I64)
    s_enc = _encode_scale(amax_ptr, inv_ptr, numer, TENSOR_SCALE)
    round_key = _stream_key(seeds_ptr, 0, 0) if SR else 0
    scale_key = _stream_key(seeds_ptr, 0, SCALE_STREAM) if EDEN else 0
    signs_a, signs_b = _program_signs(seeds_ptr, BK, HAD, RAND_SIGNS, HALVES)
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    # MS-EDEN's halves (a group wider than 16) in a loop: each tile's loads are issued before the tile
    # before it is quantized, so they are in flight while it is (H200, (16384, 4096) BF16 at 4096-element
    # tiles, 4 a program: 115.5 -> 109.8 us; 1.1 more sm_90 instructions per element, 80 -> 95 registers
    # at 2048-element tiles)
    PREFETCH: tl.constexpr = HALVES == 2 and HAD > 16 and ITERS > 1
    first = tl.program_id(0) * ITERS
    if PREFETCH:
        lo_next, hi_next = _wide_halves_raw(x_ptr, first, pid_k, R, K, stride_r, stride_k, BR, BK, True)
    for i in range(ITERS):
        pid_r = first + i
        if PREFETCH:
            lo, hi = lo_next, hi_next
            lo_next, hi_next = _wide_halves_raw(x_ptr, pid_r + 1, pid_k, R, K, stride_r, stride_k, BR, BK,
                                                i + 1 < ITERS)
            x = _rotate_wide_halves(lo, hi, signs_a, signs_b, x_scale, BR, BK, LOG2H, NORM, RAND_SIGNS, HAS_SCALE)
            rows = pid_r * BR + tl.arange(0, BR)
        else:
            x, rows = _load_rotated(x_ptr, pid_r, pid_k, R, K, stride_r, stride_k, signs_a, signs_b, x_scale,
                                    BR, BK, HAD, LOG2H, NORM, RAND_SIGNS, HALVES, NARROW, HAS_SCALE, EDEN)
        out = _quantize_tile(x, rows, pid_k * BK, K, s_enc, round_key, scale_key, target, BR, BK, LOG2H,
                             BLK_R, BLK_K, LOG2_BLK, PER_TENSOR, TENSOR_SCALE, SCALE, EMAX,
                             ELEM, GMAX, SR, PAIRS, FOUR_SIX, EDEN)
        if OUT_T:  # the (R, K) operand with R contiguous (`Launch`'s column_major): offsets r + k R
            out_r, out_k = _wide_strides(1, R, I64)
            offs, mask = _tile_offsets(pid_r, pid_k, R, K, out_r, out_k, BR, BK, 0)
            tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)
        elif HALVES == 2:
            _store_halves(out_ptr, out, pid_r, pid_k, R, K, stride_r, stride_k, BR, BK, HAD > 16)
        else:
            offs, mask = _tile_offsets(pid_r, pid_k, R, K, stride_r, stride_k, BR, BK, NARROW)
            tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _transpose_kernel(src_ptr, dst_ptr, ROWS, COLS, BLOCK: tl.constexpr):
    """dst (COLS, ROWS) = src (ROWS, COLS) transposed, both row-major: a (BLOCK, BLOCK) tile per program,
    read and written along rows of memory (torch's strided copy ran at ~0.85 TB/s on the H200)."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tile = tl.load(src_ptr + r[:, None].to(tl.int64) * COLS + c[None, :],
                   mask=(r[:, None] < ROWS) & (c[None, :] < COLS))
    tl.store(dst_ptr + c[:, None].to(tl.int64) * ROWS + r[None, :], tl.trans(tile),
             mask=(c[:, None] < COLS) & (r[None, :] < ROWS))


# --- launch ----------------------------------------------------------------------------------------

def _bench(fn, quantiles):
    return triton.testing.do_bench(fn, warmup=5, rep=20, quantiles=quantiles)


def autotuned(kernel, configs: list, key: list[str]):
    """kernel tuned over configs by timing each (`_bench`), per value of the `key` arguments. The
    choices are kept on disk in Triton's cache (keyed by the kernel's source, the GPU target, the key
    values and the candidates), so a relaunched run, or the next run of a study with the same shapes,
    does not tune again. Key names that are not the kernel's arguments (one key serves the quantize
    and amax passes) are left out: Triton 3.6 skips them, later versions refuse them."""
    key = [n for n in key if n in kernel.arg_names]
    return triton.autotune(configs, key=key, do_bench=_bench, cache_results=True)(kernel)


# On the GPU the tile (elements per program), its K extent BK and the warps are tuned per shape and
# layout. Along a contiguous K one BK serves; along dim 0 (the wgrad layout: K strided) a short BK
# (one block or Hadamard group of tokens) reads long rows of memory and wins (see Launch), with the
# tiles of `_tiles`.
# The 2048-element tile is for the heavy variants (SR, RHT, 4/6, MS-EDEN): 16 elements per thread
# halve their registers (sm_90: nvfp4 RHT16+SR along dim 0 162 -> 75, MS-EDEN 222 -> 126), so more
# warps fit on an SM. Both kernels are idempotent (an atomic max; plain stores): the tuner's reruns
# are harmless.
_TILES = ((2048, 4), (4096, 4), (8192, 8), (16384, 8))


def _key_starts_with(key, prefix: tuple) -> bool:
    """Whether a Triton autotuner cache key (a tuple, or its str in some versions) begins with prefix."""
    if isinstance(key, str):
        return key == str(prefix) or key.startswith(str(prefix)[:-1] + ",")
    return tuple(key[:len(prefix)]) == prefix


def _tiles(bk: int) -> tuple[tuple[int, int, int], ...]:
    """(TILE, warps, NARROW) candidates for a tile BK wide along K.

    With a short BK (16 or 32: one NVFP4 block, RHT16 group or MX block of tokens, the wgrad layout)
    a tile whose rows are spread over the threads alone keeps all BK in each thread: butterflies and
    block maxima run in registers, with no shared memory or barriers. Loaded in 16-byte vectors, a
    thread holds 8 rows (256 x warps rows: 8 x BK values, 255 registers and spills under SR); with
    NARROW = 2 or 4 (`_tile_offsets`: 4- or 8-byte accesses) it holds 2 x BK or 4 x BK values, so
    more warps fit on an SM. 128 rows on one warp splits the 16 over two threads."""
    if bk not in (16, 32):
        return tuple((t, w, 0) for t, w in _TILES)
    narrow = tuple((32 * w * f * bk, w, f) for f in (2, 4) if f * bk <= 64 for w in (1, 2, 4))
    plain = ((bk * 128, 1, 0),) + (tuple((bk * 256 * w, w, 0) for w in (1, 2, 4)) if bk == 16 else ())
    return plain + narrow


# What a tuned tile is kept for: the shape and layout, and the spec's compile-time choices. Without
# the latter, two operands of one shape (wgrad's dY with SR and X with RTNE) shared whichever tile the
# first one tuned (on the H200 the RTNE kernel then ran 10% slower). Absent names (amax) are skipped.
# (The amax pass's HALVES follows from HAD and stride_k; the quantize pass tunes its own.)
_TUNE_KEY = ("R", "K", "stride_k", "HAD", "SR", "ELEM", "SCALE", "BLK_R", "FOUR_SIX", "EDEN", "OUT_T")


# Tiles of at most this many elements are also tried looping over ITERS_LOOPED tiles per program
# (the kernels' ITERS): small tiles are where the per-program work (and, in an amax pass, the final
# reduction and atomic) counts.
LOOPED_TILE, ITERS_LOOPED = 4096, 4


def tile_candidates(bks: tuple[int, ...], min_tile: int,
                    halves: tuple[int, ...] = ()) -> list[tuple[int, int, int, int, int | None, int]]:
    """(TILE, BK, warps, NARROW, HALVES, ITERS) of every tile the tuner tries for these BKs, at least
    `min_tile` rows (a 2-D block's), without repeats; NARROW only for 1-row blocks; each of `halves`
    (the quantize pass's HALVES choices; None: not tuned), with ITERS 1 and, for a tile of at most
    LOOPED_TILE, ITERS_LOOPED."""
    tiles = dict.fromkeys((max(t, min_tile * bk), bk, w, f) for bk in bks for t, w, f in _tiles(bk)
                          if not (f and min_tile > 1))
    return [(*tile, h, n) for tile in tiles for h in (halves or (None,))
            for n in ((1, ITERS_LOOPED) if tile[0] <= LOOPED_TILE else (1,))]


def untuned_args(tuned, consts: dict) -> dict:
    """What a launch of an autotuned kernel passes besides its config: consts less the names the
    configs set (the tile; HALVES where it is tuned, and only there)."""
    chosen = set(tuned.configs[0].kwargs)
    return {k: v for k, v in consts.items() if k not in chosen}


@functools.lru_cache(maxsize=None)
def _tuner(kernel, bks: tuple[int, ...], min_tile: int, halves: tuple[int, ...] = ()):
    def config(t, bk, w, f, h, n):
        extra = {} if h is None else {"HALVES": h}
        return triton.Config({"TILE": t, "BK": bk, "NARROW": f, "ITERS": n} | extra, num_warps=w)

    configs = [config(*c) for c in tile_candidates(bks, min_tile, halves)]
    return autotuned(kernel, configs, list(_TUNE_KEY))


@functools.lru_cache(maxsize=None)
def _transpose_tuner():
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128) for w in (4, 8)]
    return autotuned(_transpose_kernel, configs, ["ROWS", "COLS"])


def _tuning() -> bool:
    """Autotune on the GPU unless SCALING_KERNEL_TUNE=0 (then: the fixed default tile, as on CPU)."""
    return not interpreting() and os.environ.get("SCALING_KERNEL_TUNE", "1") != "0"


@functools.lru_cache(maxsize=None)
def _config(spec: QuantSpec, K: int) -> dict:
    """Compile-time parameters and the tile shape for one spec."""
    had = spec.transform
    group = max(spec.k_multiple, 1)
    bk = max(group, min(128, triton.next_power_of_2(K)))
    if spec.block is None:
        blk_r, blk_k = 1, bk
    else:
        blk_r, blk_k = spec.block_rows, spec.block_k
    tile = max(blk_r * bk, 8192 if not (spec.four_over_six or spec.eden) else 4096)
    elem_max = spec.elem_max
    return dict(
        TILE=tile, BK=bk, HAD=had, LOG2H=int(math.log2(had)) if had else 0,
        NORM=norm_factor(had) if had else 1.0, RAND_SIGNS=bool(had) and spec.signs != "ones",
        BLK_R=blk_r, BLK_K=blk_k, LOG2_BLK=int(math.log2(blk_r * blk_k)),
        PER_TENSOR=spec.block is None, TENSOR_SCALE=spec.has_tensor_scale,
        SCALE=formats.SCALE_CODES[spec.scale], EMAX=formats.EMAX[spec.elem],
        ELEM=formats.ELEM_CODES[spec.elem], GMAX=float(elem_max), SR=spec.rounding == "sr", PAIRS=K % 2 == 0,
        FOUR_SIX=spec.four_over_six, EDEN=spec.eden, NARROW=0,
    )


def moves_k_last(spec: QuantSpec, ndim: int, dim: int) -> bool:
    """Whether the kernels quantize a copy of x with the quantized axis moved last (and return the
    result as that copy's view with the axis moved back: `output_like`). Along dim 0 the tile is read
    in place with a strided K, except for MS-EDEN: its RHT128 butterflies and group sums along a
    strided K take ~2x the instructions of a contiguous K (284 against 141-156 per element in sm_90
    SASS), so a transposing copy first is cheaper. A middle axis is always moved."""
    dim = dim % ndim
    return dim != ndim - 1 and (dim != 0 or spec.eden)


def _offsets_pass_int32(R: int, K: int, stride_r: int, stride_k: int) -> bool:
    """Whether a tile's element offsets into an (R, K) view with these strides (or the amax pass's
    view of its rows, (K, R) with strides (R, 1)) may pass 2^31 - 1: a tile overruns R and K by less
    than the largest TILE, and masked elements' offsets are made too."""
    pad = max(t for t, _ in _TILES)
    return max((R + pad) * stride_r + (K + pad) * stride_k, (K + pad) * R + R + pad) >= 2**31


def _k_last(x: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty contiguous tensor shaped like x with `dim` moved last: the moved copy's layout."""
    return torch.empty(x.movedim(dim, -1).shape, dtype=dtype, device=x.device)


def _writes_column_major(x: torch.Tensor, dim: int, column_major: bool) -> bool:
    """Whether the operand is written with dim 0 contiguous: asked for, of a 2-D x along its last axis
    (never a moved copy: `moves_k_last` moves no last axis)."""
    return column_major and x.dim() == 2 and dim % 2 == 1


def _lies_k_last(x: torch.Tensor, dim: int) -> bool:
    """Whether x, with dim moved last, is contiguous: a copy with K moved last would be x itself."""
    return x.movedim(dim, -1).is_contiguous()


def output_like(x: torch.Tensor, spec: QuantSpec, dim: int, dtype: torch.dtype,
                column_major: bool = False) -> torch.Tensor:
    """An empty operand for x with the layout the kernels write (so the custom op's fake matches)."""
    if moves_k_last(spec, x.dim(), dim):
        return _k_last(x, dim, dtype).movedim(-1, dim)
    if _writes_column_major(x, dim, column_major):
        return torch.empty(x.shape[::-1], dtype=dtype, device=x.device).t()
    return torch.empty(x.shape, dtype=dtype, device=x.device)


def _canonical_strides(shape: torch.Size, spec: QuantSpec, dim: int) -> tuple[int, int, int, int]:
    """(R, K, stride_r, stride_k) of the canonical (R, K) view the kernels read for a tensor of this
    shape: K contiguous for dim = last or a moved copy (`moves_k_last`), strided for dim = 0."""
    dim %= len(shape)
    K = shape[dim]
    R = math.prod(shape) // K if K else 0
    if moves_k_last(spec, len(shape), dim) or dim == len(shape) - 1:
        return R, K, K, 1
    return R, K, 1, R


def _canonical_view(x: torch.Tensor, spec: QuantSpec, dim: int) -> tuple[torch.Tensor, int, int, int, int]:
    """x as (R, K) strides into a contiguous buffer: x itself for dim = last or dim = 0 (K strided);
    for the copy with dim moved last (`moves_k_last`), x's own view so where x already lies that way
    (a column-major operand along dim 0), else an empty buffer (filled by Launch.run_move)."""
    dim = dim % x.dim()
    if moves_k_last(spec, x.dim(), dim):
        buf = x.movedim(dim, -1) if _lies_k_last(x, dim) else _k_last(x, dim, x.dtype)
    else:
        buf = x.contiguous()
    return (buf, *_canonical_strides(x.shape, spec, dim))


def tuned_choice(tuner, kernel, values: dict, key: tuple[str, ...]) -> triton.Config | None:
    """The config a tuner chose for a launch with these argument values (None: not tuned yet)."""
    cache = getattr(tuner, "cache", {})  # Triton's Autotuner: {(key values..., dtypes...): Config}
    prefix = tuple(values[n] for n in key if n in kernel.arg_names)
    return next((c for k, c in cache.items() if _key_starts_with(k, prefix)), None)


def tuned_config(tuner, kernel, values: dict, key: tuple[str, ...] = _TUNE_KEY) -> str | None:
    """The tile a tuner chose for a launch with these argument values, in words (None: not tuned yet)."""
    c = tuned_choice(tuner, kernel, values, key)
    if c is None:
        return None
    return (f"TILE {c.kwargs['TILE']} BK {c.kwargs['BK']} warps {c.num_warps}"
            + (f" narrow {c.kwargs['NARROW']}" if c.kwargs["NARROW"] else "")
            + (f" halves {c.kwargs['HALVES']}" if c.kwargs.get("HALVES") else "")
            + (f" iters {c.kwargs['ITERS']}" if c.kwargs.get("ITERS", 1) > 1 else ""))


class Launch:
    """One quantization call's kernels, ready to run (`scaling bench` times the stages apart)."""

    def __init__(self, x: torch.Tensor, spec: QuantSpec, dim: int, seeds: torch.Tensor | None, dtype: torch.dtype,
                 bk: int | None = None, narrow: int = 0, scale: torch.Tensor | None = None,
                 amax: torch.Tensor | None = None, halves: int | None = None, iters: int = 1,
                 column_major: bool = False, groups: bool = True):
        self.dim = dim % x.dim()
        self.groups = groups  # rht128's amax pass where it serves (False: this module's, for tests)
        self.moved = moves_k_last(spec, x.dim(), self.dim)
        self.x = x
        self.buf, self.R, self.K, self.stride_r, self.stride_k = _canonical_view(x, spec, self.dim)
        # a moved copy is needed unless x already lies with K last (e.g. an operand written column-major)
        self.needs_move = self.moved and not _lies_k_last(x, self.dim)
        self.column_major = _writes_column_major(x, self.dim, column_major)
        self.cfg = dict(_config(spec, self.K), OUT_T=self.column_major)
        # HALVES choices for the tuner, the first one the untuned launch's. The quantize pass: where a
        # block is 16 long along a contiguous K (on the H200 MX's 1x32 blocks lost 5% with halves),
        # unpinned (`halves`) halves first for RHT16 and MS-EDEN's RHT128 (both ways first: the H200's
        # tuner chose them for every MS-EDEN operand, 2026-12-04), whole first otherwise. The amax
        # pass: for RHT16 along a contiguous K, whole with the last stage across lanes first (the
        # H200's best: `_abs_lane_pairs`), halves, or whole as other rotations; a pin as the
        # quantize pass's (the same number); else none (its HALVES is 0).
        rht16 = _rotates_in_halves(spec, self.stride_k)
        wide = self.cfg["HAD"] > 16  # MS-EDEN's RHT128: `_load_halves_wide`
        if not (self.stride_k == 1 and self.cfg["BLK_K"] == 16 and (self.cfg["HAD"] in (0, 16) or spec.eden)):
            self.halves = (0,)
        else:
            self.halves = ((halves,) if halves is not None
                           else (2, 0, 1) if wide else (1, 0, 2) if rht16 else (0, 1, 2))
            if self.column_major:  # (stored whole: the halves' store is row-major)
                self.halves = tuple(h for h in self.halves if h != 2) or (1,)
        self.cfg["HALVES"] = self.halves[0]
        self.amax_halves = ((2, 1, 0) if halves is None else (halves,)) if rht16 else ()
        self.numer, self.target = scale_constants(spec)
        group = max(spec.k_multiple, 1)
        # BK candidates: the contiguous-K default; along a strided K also one group (not for MS-EDEN,
        # whose correction sums over one Hadamard group per tile row, nor per-tensor scaling, whose
        # "block" is the tile row). `bk` pins one (tests).
        # On the H200 the short BK won along dim 0 for every 1 x N spec (by 1.5-3x), so the default
        # is tried beside it only for 2-D blocks (whose tiles cannot be NARROW).
        short = self.stride_k != 1 and spec.block is not None and not spec.eden and group < self.cfg["BK"]
        if bk or short:
            self.bks = (bk,) if bk else ((group,) if spec.block_rows == 1 else (group, self.cfg["BK"]))
        else:
            self.bks = (self.cfg["BK"],)
        if bk:
            self.cfg["BK"] = bk
            self.cfg["TILE"] = max(self.cfg["TILE"], self.cfg["BLK_R"] * bk)
        self.cfg["NARROW"] = narrow
        self.cfg["HAS_SCALE"] = scale is not None
        self.cfg["I64"] = _offsets_pass_int32(self.R, self.K, self.stride_r, self.stride_k)
        self.cfg["ITERS"] = iters
        self.dtype = dtype
        self.inv = torch.empty((), dtype=torch.float32, device=x.device)
        # `amax`: the tensor amax, already found (tensor_amaxes); else zeros for the amax pass.
        self.amax_given = amax is not None
        if amax is None:
            amax = (torch.zeros if self.cfg["TENSOR_SCALE"] else torch.empty)((), dtype=torch.float32, device=x.device)
        self.amax = amax
        self.seeds = self.amax if seeds is None else seeds  # never read by a deterministic spec
        self.scale = self.amax if scale is None else scale  # read only with HAS_SCALE
        self.tuned = self.buf.is_cuda and _tuning()

    @functools.cached_property
    def out(self) -> torch.Tensor:
        """The operand's buffer (made when the quantize pass first needs it: not for an amax alone), as
        the canonical (R, K) view; column-major, the transpose of a contiguous (K, R) buffer."""
        if self.column_major:
            return torch.empty((self.K, self.R), dtype=self.dtype, device=self.x.device).t()
        return torch.empty(self.buf.shape, dtype=self.dtype, device=self.x.device)

    @property
    def by_groups_amax(self) -> bool:
        """Whether the amax pass (without the plain amax) is `rht128`'s (a thread per row's group)."""
        return rht128.serves_amax(self)

    @property
    def needs_amax(self) -> bool:
        return self.cfg["TENSOR_SCALE"] and not self.amax_given

    @property
    def _amax_reads_rows(self) -> bool:
        """Whether the amax pass reads x along its own rows instead of the canonical view: without a
        rotation the amax is max |x|, the same in any order, and a strided K (dim 0; canonical strides
        (1, R)) read so ran at ~1.55 TB/s against ~3.2 along the rows (H200, FP8's wgrad operands)."""
        return self.cfg["HAD"] == 0 and self.stride_k != 1

    def _amax_view(self) -> tuple[int, int, int, int, tuple[int, ...]]:
        """(R, K, stride_r, stride_k) of the view the amax pass reads, and its tile BKs."""
        if self._amax_reads_rows:
            return self.K, self.R, self.R, 1, (self.cfg["BK"],)
        return self.R, self.K, self.stride_r, self.stride_k, self.bks

    def _launch(self, kernel, args: tuple, consts: dict, R: int, K: int, bks: tuple[int, ...],
                halves: tuple[int, ...] = ()) -> None:
        def grid(meta: dict) -> tuple[int, int]:
            return triton.cdiv(R, meta["TILE"] // meta["BK"] * meta.get("ITERS", 1)), triton.cdiv(K, meta["BK"])

        if self.tuned:
            tuned = _tuner(kernel, bks, self.cfg["BLK_R"], halves)
            tuned[grid](*args, **untuned_args(tuned, consts), enable_fp_fusion=False)
        else:
            kernel[grid](*args, **consts, num_warps=8, enable_fp_fusion=False)

    def tuned_configs(self) -> dict[str, str]:
        """The tile each stage's tuner chose for this shape so far (for benchmark logs)."""
        if not self.tuned:
            return {}
        R, K, _, stride_k, bks = self._amax_view()
        amax_stage = "amax"
        if self.moves_with_amax:
            amax_stage = "transpose+amax"
            amax = rht128.tuned_config({**self.cfg, "T": self.x.shape[0], "D": self.x.shape[1]}, transposing=True)
        elif self.by_groups_amax:
            amax = rht128.tuned_config({**self.cfg, "R": R, "K": K})
        else:
            amax = tuned_config(_tuner(_amax_kernel, bks, self.cfg["BLK_R"], self.amax_halves), _amax_kernel,
                                {"R": R, "K": K, "stride_k": stride_k, **self._amax_consts()})
        quantize = tuned_config(_tuner(_quantize_kernel, self.bks, self.cfg["BLK_R"], self.halves), _quantize_kernel,
                                {"R": self.R, "K": self.K, "stride_k": self.stride_k, **self.cfg})
        return {stage: tile for stage, tile in ((amax_stage, amax), ("quantize", quantize)) if tile}

    def _amax_consts(self, plain: bool = False) -> dict:
        c = self.cfg
        return {**{k: c[k] for k in ("TILE", "BK", "HAD", "LOG2H", "NORM", "RAND_SIGNS", "NARROW", "HAS_SCALE", "I64",
                                     "ITERS")},
                "HALVES": self.amax_halves[0] if self.amax_halves else 0, "PLAIN": plain,
                "LOAD_LAYOUT": c["HAD"] > 0 and self._amax_view()[3] == 1}

    def run_move(self) -> None:
        """Fill the moved copy (`moves_k_last`; where `needs_move`): along dim 0 by the transpose kernel,
        else by torch."""
        if self.dim == 0:
            src = self.x.contiguous()
            if self.tuned:
                def grid(meta):
                    return triton.cdiv(self.K, meta["BLOCK"]), triton.cdiv(self.R, meta["BLOCK"])

                _transpose_tuner()[grid](src, self.buf, self.K, self.R)
            else:
                grid = (triton.cdiv(self.K, 64), triton.cdiv(self.R, 64))
                _transpose_kernel[grid](src, self.buf, self.K, self.R, BLOCK=64, num_warps=4)
        else:
            self.buf.copy_(self.x.movedim(self.dim, -1))

    @property
    def moves_with_amax(self) -> bool:
        """Whether the moved copy and the amax pass are one kernel (`run_move_amax`)."""
        return rht128.serves_move_amax(self)

    def run_move_amax(self, rows: "Launch | None" = None) -> None:
        """The moved copy and the amax pass from one read of x (`rht128.run_move_amax`: MS-EDEN's dY
        along dim 0), where `moves_with_amax`; with `rows` (`rht128.serves_rows_amax`), that Launch's
        amax pass too (MS-EDEN's dgrad dY)."""
        rht128.run_move_amax(self, rows=rows)

    def run_move_and_amax(self) -> None:
        """Whatever the quantize pass waits on: the moved copy where `needs_move`, the amax pass where
        `needs_amax` (one kernel where `moves_with_amax`)."""
        if self.moves_with_amax:
            self.run_move_amax()
            return
        if self.needs_move:
            self.run_move()
        if self.needs_amax:
            self.run_amax()

    def run_amax(self, plain: torch.Tensor | None = None) -> None:
        """The amax pass, into self.amax; with `plain` (a zero 0-d FP32 tensor), also the amax before
        the rotation into it (where `finds_plain_amax`). An atomic max: rerunning on the same input leaves
        the same amaxes (the autotuner runs it several times)."""
        if plain is None and self.by_groups_amax:
            return rht128.run_amax(self)
        consts = self._amax_consts(plain is not None)
        R, K, stride_r, stride_k, bks = self._amax_view()
        self._launch(_amax_kernel, (self.buf, self.amax, self.amax if plain is None else plain, R, K,
                                    stride_r, stride_k, self.seeds, self.scale), consts, R, K, bks, self.amax_halves)

    def run_quantize(self) -> None:
        self._launch(_quantize_kernel, (self.buf, self.out, self.amax, self.inv, self.seeds, self.scale, self.R,
                                        self.K, self.stride_r, self.stride_k, self.numer, self.target), self.cfg,
                     self.R, self.K, self.bks, self.halves)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.moved:  # x's shape, the layout of output_like
            return self.out.movedim(-1, self.dim), self.inv
        return self.out.view(self.x.shape), self.inv  # (column-major: 2-D, out is already x's shape)


def quantize_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seeds: torch.Tensor | None,
                     dtype: torch.dtype, scale: torch.Tensor | None = None,
                     amax: torch.Tensor | None = None, column_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`quant.gemm_operand` of x (times `scale`, a 0-d FP32 tensor, if given) through the fused kernels
    (x on CUDA, or on CPU under TRITON_INTERPRET=1). `seeds`: int64 tensor [rounding seed, sign
    seed] on x's device, or None for a deterministic spec. `amax`: the tensor amax this spec takes
    of x, if already found (`tensor_amaxes`): then no amax pass. `column_major`: a 2-D x quantized
    along its last axis comes out with dim 0 contiguous (`output_like`), for a later quantizer along
    dim 0 that would otherwise make a transposing copy of it (`moves_k_last`)."""
    launch = Launch(x, spec, dim, seeds, dtype, scale=scale, amax=amax, column_major=column_major)
    launch.run_move_and_amax()
    launch.run_quantize()
    return launch.result()


def quantize_operand_and_amax(x: torch.Tensor, spec: QuantSpec, seeds: torch.Tensor | None, rows_spec: QuantSpec,
                              rows_seeds: torch.Tensor | None,
                              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`quantize_operand(x, spec, 0, seeds, dtype)` of a 2-D x, and the tensor amax `rows_spec` (with a
    tensor scale) takes of x along its last axis, for a later `quantize_operand(amax=)`: from the
    transposing pass's read of x where it can take both (`rht128.serves_rows_amax`: MS-EDEN's wgrad
    and dgrad dY), else by that spec's own amax pass. (operand, 1 / tensor scale, rows' amax)."""
    if not rows_spec.has_tensor_scale:
        raise ValueError("rows_spec has no tensor scale: there is no tensor amax to find")
    launch = Launch(x, spec, 0, seeds, dtype)
    rows = Launch(x, rows_spec, -1, rows_seeds, dtype)
    if rht128.serves_rows_amax(launch, rows):
        launch.run_move_amax(rows)
    else:
        launch.run_move_and_amax()
        rows.run_amax()
    launch.run_quantize()
    return (*launch.result(), rows.amax)


def _rotates_in_halves(spec: QuantSpec, stride_k: int) -> bool:
    """Whether the amax pass rotates in two halves (`_load_halves`): RHT16 along a contiguous K."""
    return spec.transform == 16 and stride_k == 1


def finds_plain_amax(spec: QuantSpec, shape: torch.Size, dim: int) -> bool:
    """Whether `tensor_amaxes` serves spec along dim of a tensor of this shape: spec takes a tensor
    amax, read in place (not a moved copy: MS-EDEN) and rotated in one piece (`_rotates_in_halves`:
    the plain amax is taken before the rotation). Plain values only: torch.compile reads it as such."""
    dim %= len(shape)
    if not spec.has_tensor_scale or moves_k_last(spec, len(shape), dim):
        return False
    return not _rotates_in_halves(spec, _canonical_strides(shape, spec, dim)[3])


def tensor_amaxes(x: torch.Tensor, spec: QuantSpec, dim: int,
                  seeds: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """In one read of x: its plain amax max |x| (the tensor amax of any unrotated spec) and the tensor
    amax that `spec` takes along dim (after its rotation), as 0-d FP32 tensors. So an activation that
    two GEMMs quantize, one of them without a rotation (NVFP4's fprop X and the RHT16 wgrad X), is
    read by one amax pass, not two. Needs `finds_plain_amax`."""
    launch = Launch(x, spec, dim, seeds, torch.bfloat16)
    plain = torch.zeros((), dtype=torch.float32, device=x.device)
    launch.run_amax(plain=plain)
    return plain, launch.amax


from scaling.kernels import rht128  # noqa: E402  (it imports this module's helpers)
