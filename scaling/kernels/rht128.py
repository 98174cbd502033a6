"""The RHT128 amax pass with a thread per row's group: the tensor amax of Quartet II's MS-EDEN
operands (after their rotation), bit for bit `quantize._amax_kernel`'s, with no shared memory or
barriers.

In `quantize._amax_kernel` a tile's 128-wide Hadamard groups are spread over the lanes of a warp, and
Triton moves the values between the butterflies' layouts through shared memory (sm_90 at its tiles:
20-25 instructions per element, 25-97 barriers a program); the H200 ran it at 36-37% of its copy
bandwidth. Here each thread holds one row's whole group of 128: it loads it as 16 slices of 8
(16-byte vectors; 32 lanes read 32 rows, and a row's slices are read back to back, so the L1 cache
serves their sectors), runs the FWHT's strides 1, 2, 4 inside each slice and strides 8 to 64 between
slices (`_group`: the slices are joined pairwise, a stride per level, so every butterfly is between
registers of one thread), and keeps each row's running max: 11-14 instructions per element, no
barriers. The same sums of the same values as the reference: the same amax.

The transform's random signs (128 a group, the same for every row) are made once per program as four
32-bit words (`_sign_word`: a lane a hash, then a sum across the warp) and applied as sign-bit xors
(exact: x * -1 is x with its sign bit flipped), an SHF and a LOP3 per element. Each tile takes the
words through a move the compiler cannot see through (`_per_tile`): else it computes the 128 sign
masks once, before the loop over tiles, and keeps them in registers (2026-12-03: 255 registers and a
48-byte stack at the tuned tile, 8 warps an SM; ncu: an instruction every 2.3 cycles, stalled on the
L1; with the words, 151 registers and no stack, 2257 -> 2539 GB/s on the H200).

A row's group may also lie over 4 lanes (LANES 4, `_quarters`), so that a warp load reads 8 rows, not
32; the tuners try both (H200, 2026-12-04 ~21:30, (16384, 4096): the amax pass kept a thread per
group, the transposing pass with the rows' amax took LANES 4, 2334 -> 2390 GB/s).

Tried and not kept (2026-12-03, H200): the MS-EDEN quantize pass built the same way (block scales,
elements, EDEN sums and the scales' SR per thread, the slices stored as loaded): 38-40 sm_90
instructions per element against the generic kernel's 56-63, no barriers or shuffles, the same bits,
but 1122 GB/s against 1730: 252-255 registers leave 8 warps an SM, and each warp's 16-byte stores
touch 32 rows. Loading or storing the tile whole (coalesced) instead made Triton convert layouts
through shared memory at every split (137-216 instructions per element).
"""

from __future__ import annotations

import functools
import os

import triton
import triton.language as tl

from scaling.kernels.quantize import (_PTX, _as_float, _atomic_max, _fwht, _last_first, _scaled, _sign_bit, _sign_word,
                                      autotuned, tuned_choice)

GROUP = 128
# (the same, as constants the @jit code may read)
_GROUP_C = tl.constexpr(GROUP)
_SLICES_C = tl.constexpr(GROUP // 8)
# SCALING_RHT128=0 leaves these specs to the generic kernel (same bits; for A/B timing);
# SCALING_MOVE_AMAX=0 runs the transposing copy and its amax pass as two kernels (the same);
ENABLED = os.environ.get("SCALING_RHT128", "1") != "0"
MOVE_AMAX = os.environ.get("SCALING_MOVE_AMAX", "1") != "0"
# SCALING_ROWS_AMAX=0: MS-EDEN's dgrad dY finds its amax in its own pass, not in wgrad dY's transposing one.
ROWS_AMAX = os.environ.get("SCALING_ROWS_AMAX", "1") != "0"


@triton.jit
def _per_tile(word, opaque_zero):
    """A sign word as a value of this tile, so that what derives from it (each element's sign mask) is
    made per tile, not once for all tiles into 128 registers: in PTX a move marked impure, which LLVM
    does not hoist out of the loop (through `| opaque_zero` alone, a zero it cannot see, it hoisted the
    masks all the same); in the interpreter, which runs no PTX, the or."""
    if _PTX:
        word = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [word | opaque_zero], dtype=tl.uint32,
                                         is_pure=False, pack=1)
    else:
        word = word | opaque_zero
    return word


@triton.jit
def _column_runs(x_ptr, feats, D: tl.constexpr, E0: tl.constexpr, STEP: tl.constexpr, N: tl.constexpr):
    """Rows E0 + STEP m (m < N) at x_ptr, of a row-major x of D columns, at columns `feats` (all in
    bounds: no masks), as loaded: a (BR, N) tile built by joins, so that each thread holds its
    feature's N values (each load is a row of memory, neighbouring lanes reading neighbouring
    features). A join's new axis is the lowest bit of the column: the even rows' tile joined with the
    odd rows'."""
    if N == 1:
        t = tl.load(x_ptr + E0 * D + feats)
    else:
        a = _column_runs(x_ptr, feats, D, E0, 2 * STEP, N // 2)
        b = _column_runs(x_ptr, feats, D, E0 + STEP, 2 * STEP, N // 2)
        t = tl.reshape(tl.join(a, b), (feats.shape[0], N))
    return t


@triton.jit
def _signed(t, word, B0: tl.constexpr):
    """t (BR, N) with column b's sign flipped where bit B0 + b of the sign word `word` is set (exact:
    x * -1 is x with its sign bit flipped), an SHF and a LOP3 per element."""
    flip = _sign_bit(word, (tl.arange(0, t.shape[1]) + B0).to(tl.uint32))
    return (t.to(tl.uint32, bitcast=True) ^ flip[None, :]).to(tl.float32, bitcast=True)


@triton.jit
def _slice(x_ptr, base, rmask, col0, x_scale, word, J: tl.constexpr, HAS_SCALE: tl.constexpr,
           COLUMNS: tl.constexpr = False, D: tl.constexpr = 0):
    """Columns col0 + 8J .. + 7 of the rows at `base` (offsets), float32 (times x_scale), each signed
    (bit 8 (J % 4) + e of `word`, the sign word of positions 32 (J // 4) on, flips element e's sign),
    then the FWHT's strides 1, 2, 4: a (BR, 8) tile. COLUMNS: the group runs along dim 0 of a
    row-major x of D columns: x_ptr points at the group's first row, `base` holds columns (in
    bounds), and the slice is rows 8J .. 8J + 7 (`_column_runs`; rmask, col0 unread)."""
    if COLUMNS:
        loaded = _column_runs(x_ptr, base, D, J * 8, 1, 8)
    else:
        cols = col0 + J * 8 + tl.arange(0, 8)
        loaded = tl.load(x_ptr + base[:, None] + cols[None, :], mask=rmask[:, None], other=0.0)
    # (a loaded column's BF16 lie one a register: `.to` shifts each up, where `_as_float` would pack pairs)
    t = _scaled(loaded.to(tl.float32) if COLUMNS else _as_float(loaded), x_scale, HAS_SCALE)
    return _fwht(_signed(t, word, (J % 4) * 8), t.shape[0], 8, 3, 1.0)


@triton.jit
def _group(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, J0: tl.constexpr, N: tl.constexpr,
           HAS_SCALE: tl.constexpr, ABS_LAST: tl.constexpr = False, COLUMNS: tl.constexpr = False,
           D: tl.constexpr = 0):
    """Slices J0 .. J0 + N - 1 of each row's group, signed and rotated by the FWHT's strides 1 to 4N
    (unnormalised): a (BR, 8, 2, ...) tile with an axis of 2 per level of the joins, the slice index's
    bits from the lowest (its columns are 8 * slice + element). w0 .. w3: the tile's sign words
    (`_sign_word`, `_per_tile`). ABS_LAST: the last stage (a, b) -> (a + b, a - b) as |a| + |b|, what
    an amax needs (`quantize._abs_rotation`). COLUMNS, D: `_slice`'s."""
    if N == 1:
        if J0 // 4 == 0:
            word = w0
        elif J0 // 4 == 1:
            word = w1
        elif J0 // 4 == 2:
            word = w2
        else:
            word = w3
        t = _slice(x_ptr, base, rmask, col0, x_scale, word, J0, HAS_SCALE, COLUMNS, D)
    else:
        a = _group(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, J0, N // 2, HAS_SCALE, False, COLUMNS, D)
        b = _group(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, J0 + N // 2, N // 2, HAS_SCALE, False, COLUMNS,
                   D)
        if ABS_LAST:
            t = tl.abs(a) + tl.abs(b)
        else:
            t = tl.join(a + b, a - b)
    return t


@triton.jit
def _tile_rows(R, stride_r, i, BR: tl.constexpr, ITERS: tl.constexpr):
    """Tile i of the program's ITERS: its rows, their offsets, and a zero the compiler cannot see."""
    row0 = (_last_first(0) * ITERS + i) * BR  # (from the end: `quantize._last_first`)
    rows = row0 + tl.arange(0, BR)
    return rows, rows.to(tl.int64) * stride_r, (row0 >> 31).to(tl.uint32)


@triton.jit
def _group_amax_kernel(x_ptr, amax_ptr, seeds_ptr, scale_ptr, R, K, stride_r, BR: tl.constexpr, NORM: tl.constexpr,
                       RAND_SIGNS: tl.constexpr, HAS_SCALE: tl.constexpr, ITERS: tl.constexpr,
                       LANES: tl.constexpr = 1):
    """`quantize._amax_kernel` for RHT128 along a contiguous K: ITERS tiles of BR rows x one group,
    running maxima in registers, one relaxed atomic max per program. LANES 1: a thread per row's group
    (`_group`); 4: a row's group over 4 lanes (`_quarters`)."""
    col0 = _last_first(1) * _GROUP_C
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    most = tl.zeros((BR, 32 if LANES == 4 else 1), tl.float32)
    w0, w1 = _sign_word(seeds_ptr, 0, RAND_SIGNS), _sign_word(seeds_ptr, 1, RAND_SIGNS)
    w2, w3 = _sign_word(seeds_ptr, 2, RAND_SIGNS), _sign_word(seeds_ptr, 3, RAND_SIGNS)
    for i in range(ITERS):
        rows, base, zero = _tile_rows(R, stride_r, i, BR, ITERS)
        most = tl.maximum(most, _groups_abs(x_ptr, base, rows < R, col0, x_scale, w0, w1, w2, w3, zero, HAS_SCALE,
                                            LANES))
    # rounding is monotone: max RN(NORM |r|) = RN(NORM max |r|)
    _atomic_max(amax_ptr, tl.max(tl.max(most, axis=1), axis=0) * NORM)


@triton.jit
def _quarter(x_ptr, base, rmask, col0, x_scale, word, Q: tl.constexpr, HAS_SCALE: tl.constexpr):
    """Columns col0 + 32Q .. + 31 of the rows at `base` (offsets) as a (BR, 32) tile in its load layout
    (8 columns a thread, a row's 32 over 4 neighbouring lanes: each warp load reads 64 contiguous bytes
    of 8 rows), float32 (times x_scale), signed (bit b of `word`, the sign word of positions 32Q on,
    flips column b's sign), then the FWHT's strides 1, 2, 4 inside each thread and 8, 16 across the
    lanes (`quantize._lane_butterfly`: a shuffle an element each)."""
    cols = col0 + Q * 32 + tl.arange(0, 32)
    loaded = tl.load(x_ptr + base[:, None] + cols[None, :], mask=rmask[:, None], other=0.0)
    t = _scaled(_as_float(loaded), x_scale, HAS_SCALE)
    return _fwht(_signed(t, word, 0), t.shape[0], 32, 5, 1.0, 1, 8)


@triton.jit
def _quarters(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, HAS_SCALE: tl.constexpr):
    """What an amax needs of the rows' groups at `base` rotated (unnormalised), each group over 4
    lanes (`_quarter`): a (BR, 32) tile with the same maximum, the strides 32 and 64 joining the
    quarters inside each thread, the last as |a| + |b| (`quantize._abs_rotation`). A warp load reads
    64 contiguous bytes of each of 8 rows, where a thread per row's group reads 16 bytes of each of 32
    (the L1 wavefronts of docs/kernels.md). sm_90 (Triton 3.6), 4 rows a thread, 4 tiles a program:
    11.8 instructions per element against 10.8, two of them shuffles, 160 registers against 151. The
    tuners try it beside a thread per row's group (which of them wins on the H200: the module's
    docstring)."""
    a = _quarter(x_ptr, base, rmask, col0, x_scale, w0, 0, HAS_SCALE)
    b = _quarter(x_ptr, base, rmask, col0, x_scale, w1, 1, HAS_SCALE)
    c = _quarter(x_ptr, base, rmask, col0, x_scale, w2, 2, HAS_SCALE)
    d = _quarter(x_ptr, base, rmask, col0, x_scale, w3, 3, HAS_SCALE)
    return tl.maximum(tl.abs(a + b) + tl.abs(c + d), tl.abs(a - b) + tl.abs(c - d))


@triton.jit
def _groups_abs(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, zero, HAS_SCALE: tl.constexpr,
                LANES: tl.constexpr):
    """What an amax pass keeps of the rows' groups at `base` rotated (unnormalised): LANES 1, a thread
    per row's group (`_group`, its words made per tile: `_per_tile`), each row's max as a (BR, 1)
    tile; LANES 4, `_quarters`' (BR, 32) tile."""
    if LANES == 4:
        t = _quarters(x_ptr, base, rmask, col0, x_scale, w0, w1, w2, w3, HAS_SCALE)
    else:
        t = _group(x_ptr, base, rmask, col0, x_scale, _per_tile(w0, zero), _per_tile(w1, zero), _per_tile(w2, zero),
                   _per_tile(w3, zero), 0, _SLICES_C, HAS_SCALE, True)
        t = tl.max(tl.reshape(t, (base.shape[0], _GROUP_C // 2)), axis=1, keep_dims=True)
    return t


@triton.jit
def _transposing_amax_kernel(x_ptr, dst_ptr, amax_ptr, seeds_ptr, scale_ptr, rows_amax_ptr, rows_seeds_ptr, T,
                             D: tl.constexpr, BR: tl.constexpr, NORM: tl.constexpr, RAND_SIGNS: tl.constexpr,
                             HAS_SCALE: tl.constexpr, ITERS: tl.constexpr, ROWS: tl.constexpr = False,
                             LANES: tl.constexpr = 1):
    """The transposing copy of a row-major (T, D) x that MS-EDEN along dim 0 quantizes (dst: (D, T),
    row-major) and that copy's amax pass (RHT128 along its rows), from one read of x: a thread per
    feature loads a group of 128 tokens (`_column_runs`: a row of memory a load, lanes reading
    neighbouring features), stores it into its row of dst (Triton moves the tile through shared
    memory, for coalesced stores) and rotates it as `_group_amax_kernel` does (`_slice`'s COLUMNS);
    ITERS consecutive groups of tokens a program. Bit for bit the copy, then `_group_amax_kernel` on
    it (the same sums of the same values). H200, (16384, 4096) BF16: 91.5 us against 121.8 for the
    transpose and amax kernels (71.3 + 53.6 alone).

    ROWS (BR a multiple of 128): also the amax pass of x along its rows (RHT128 along D, signs from
    rows_seeds_ptr, into rows_amax_ptr: MS-EDEN's dgrad dY, which `_group_amax_kernel` would read from
    memory again), from the same tile: a thread per token of each of the program's BR / 128 groups of
    features reloads its group's 128 values, which the column loads just brought into the caches;
    LANES 4: each token's group over 4 lanes (`_quarters`), a thread holding 4 of the tokens."""
    f0 = _last_first(0) * BR
    feats = f0 + tl.arange(0, BR)
    stored = feats < D
    # Loads need no masks: a feature past D reads feature D - 1 again and a group past T the last
    # group (T >= 128), values the amax sees anyway (their copies are not stored, or stored equal).
    feats = tl.minimum(feats, D - 1)
    dst_rows = feats.to(tl.int64) * T
    x_scale = tl.load(scale_ptr) if HAS_SCALE else 1.0
    most = tl.zeros((BR,), tl.float32)
    w0, w1 = _sign_word(seeds_ptr, 0, RAND_SIGNS), _sign_word(seeds_ptr, 1, RAND_SIGNS)
    w2, w3 = _sign_word(seeds_ptr, 2, RAND_SIGNS), _sign_word(seeds_ptr, 3, RAND_SIGNS)
    if ROWS:
        # thread i: token i % 128 of the group of tokens, features from the program's (i // 128)-th
        # group of 128 (one past D reads the last group again)
        lane = tl.arange(0, BR)
        row_col = tl.minimum(f0 + (lane // _GROUP_C) * _GROUP_C, D - _GROUP_C)
        row_tok = lane % _GROUP_C
        v0, v1 = _sign_word(rows_seeds_ptr, 0, RAND_SIGNS), _sign_word(rows_seeds_ptr, 1, RAND_SIGNS)
        v2, v3 = _sign_word(rows_seeds_ptr, 2, RAND_SIGNS), _sign_word(rows_seeds_ptr, 3, RAND_SIGNS)
        rows_most = tl.zeros((BR, 32 if LANES == 4 else 1), tl.float32)
    for i in range(ITERS):
        tok0 = tl.minimum((_last_first(1) * ITERS + i) * _GROUP_C, T - _GROUP_C)
        zero = (tok0 >> 31).to(tl.uint32)  # (a zero the compiler cannot see: `_per_tile`)
        x_tile = x_ptr + tok0.to(tl.int64) * D
        # The copy first, every load before any store (stored slice by slice after its loads, a warp
        # had 8 two-byte loads in flight: 281 us above), then the amax from the same values (the
        # compiler reuses the loaded registers).
        group = _column_runs(x_tile, feats, D, 0, 1, _GROUP_C)
        tl.store(dst_ptr + dst_rows[:, None] + (tok0 + tl.arange(0, _GROUP_C))[None, :], group, mask=stored[:, None])
        t = _group(x_tile, feats, stored, tok0, x_scale, _per_tile(w0, zero), _per_tile(w1, zero),
                   _per_tile(w2, zero), _per_tile(w3, zero), 0, _SLICES_C, HAS_SCALE, True, True, D)
        most = tl.maximum(most, tl.max(tl.reshape(t, (BR, _GROUP_C // 2)), axis=1))
        if ROWS:
            base = (tok0 + row_tok).to(tl.int64) * D + row_col
            # (every token is in bounds, tok0 clamped: the mask `_slice` takes is all true)
            rows_most = tl.maximum(rows_most, _groups_abs(x_ptr, base, row_tok < _GROUP_C, 0, x_scale, v0, v1, v2,
                                                          v3, zero, HAS_SCALE, LANES))
    _atomic_max(amax_ptr, tl.max(most, axis=0) * NORM)
    if ROWS:
        _atomic_max(rows_amax_ptr, tl.max(tl.max(rows_most, axis=1), axis=0) * NORM)


def serves_amax(launch) -> bool:
    """Whether `_group_amax_kernel` takes a `quantize.Launch`'s amax pass (without the plain amax):
    RHT128 along a contiguous K of the view the pass reads."""
    R, K, _, stride_k, _ = launch._amax_view()
    return ENABLED and launch.groups and stride_k == 1 and K % GROUP == 0 and launch.cfg["HAD"] == GROUP


# (warps, ITERS): a warp holds 32 rows (features, in the transposing pass). The untuned launch's is the first.
_CANDIDATES = tuple((w, n) for w in (2, 1, 4) for n in (1, 4))
# The transposing pass that also takes the rows' amax (ROWS): a program's features are whole groups of 128.
_ROWS_CANDIDATES = tuple((w, n) for w in (4, 8) for n in (1, 4))
# A row's group over 4 lanes (LANES 4, `_quarters`: 4 rows a thread, as many rows a tile): tried by the
# amax pass's tuner besides _CANDIDATES, and by the ROWS pass's besides _ROWS_CANDIDATES.
_QUARTER_CANDIDATES = ((2, 4), (4, 4), (4, 1))
_TUNE_KEY = ("R", "K", "HAS_SCALE")
_TRANSPOSING_KEY = ("T", "D", "HAS_SCALE")


def _configs(candidates: tuple = _CANDIDATES, lanes: int = 1) -> list:
    return [triton.Config({"BR": 32 * w, "ITERS": n, "LANES": lanes}, num_warps=w) for w, n in candidates]


@functools.lru_cache(maxsize=None)
def _tuner():
    return autotuned(_group_amax_kernel, _configs() + _configs(_QUARTER_CANDIDATES, 4), list(_TUNE_KEY))


@functools.lru_cache(maxsize=None)
def _transposing_tuner(rows: bool = False):
    configs = (_configs(_ROWS_CANDIDATES) + _configs(_ROWS_CANDIDATES, 4)) if rows else _configs()
    return autotuned(_transposing_amax_kernel, configs, list(_TRANSPOSING_KEY))


def _run(kernel, tuner, launch, args: tuple, grid, warps: int | None, iters: int,
         candidates: tuple = _CANDIDATES, lanes: int = 1, **extra) -> None:
    """One of this module's kernels for a Launch: tuned on the GPU, else at a pinned tile (`warps`,
    `iters`, `lanes`; the first of the tuner's `candidates` when not given)."""
    c = launch.cfg
    consts = {"NORM": c["NORM"], "RAND_SIGNS": c["RAND_SIGNS"], "HAS_SCALE": c["HAS_SCALE"],
              "enable_fp_fusion": False, **extra}
    if launch.tuned and warps is None:
        tuner()[grid](*args, **consts)
    else:
        w = warps or candidates[0][0]
        kernel[grid](*args, **consts, BR=32 * w, ITERS=iters, LANES=lanes, num_warps=w)


def run_amax(launch, warps: int | None = None, iters: int = 1, lanes: int = 1) -> None:
    """The amax pass of a Launch (`serves_amax`) into launch.amax (an atomic max: the tuner's reruns
    leave it as it is); `warps`, `iters`, `lanes` pin a tile (tests)."""
    R, K, stride_r, _, _ = launch._amax_view()

    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(R, meta["BR"] * meta["ITERS"]), K // GROUP

    _run(_group_amax_kernel, _tuner, launch, (launch.buf, launch.amax, launch.seeds, launch.scale, R, K, stride_r),
         grid, warps, iters, lanes=lanes)


def serves_move_amax(launch) -> bool:
    """Whether `_transposing_amax_kernel` takes a `quantize.Launch`'s transposing copy and amax pass
    (`run_move_amax`): a 2-D x moved along dim 0 (MS-EDEN's wgrad dY) whose amax pass is ours."""
    return (MOVE_AMAX and launch.needs_move and launch.needs_amax and launch.dim == 0 and launch.x.dim() == 2
            and serves_amax(launch))


def serves_rows_amax(launch, rows) -> bool:
    """Whether `run_move_amax` of `launch` (`serves_move_amax`) can also take the amax pass of `rows`,
    a Launch of the same x along its last axis that `_group_amax_kernel` serves (MS-EDEN's dgrad dY
    beside its wgrad dY), from its read of x: the same rotation's constants and neither scaled."""
    same = all(rows.cfg[k] == launch.cfg[k] for k in ("NORM", "RAND_SIGNS"))
    return (ROWS_AMAX and serves_move_amax(launch) and rows.x is launch.x and rows.dim == launch.x.dim() - 1
            and rows.needs_amax and serves_amax(rows) and same
            and not (launch.cfg["HAS_SCALE"] or rows.cfg["HAS_SCALE"]))


def run_move_amax(launch, warps: int | None = None, iters: int = 1, rows=None, lanes: int = 1) -> None:
    """A Launch's moved copy (launch.buf) and amax pass (into launch.amax) from one read of x, where
    `serves_move_amax`; with `rows` (`serves_rows_amax`), that Launch's amax pass too (into
    rows.amax). `warps`, `iters` pin a tile (tests; with rows, 4 or 8 warps, and `lanes` the rows'
    mapping). (The tuner's reruns write the same copy and leave the atomic maxima as they are.)"""
    src = launch.x.contiguous()
    T, D = src.shape

    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(D, meta["BR"]), triton.cdiv(T, GROUP * meta["ITERS"])

    with_rows = rows is not None
    rows_amax, rows_seeds = (rows.amax, rows.seeds) if with_rows else (launch.amax, launch.seeds)  # (unread)
    _run(_transposing_amax_kernel, functools.partial(_transposing_tuner, with_rows), launch,
         (src, launch.buf, launch.amax, launch.seeds, launch.scale, rows_amax, rows_seeds, T, D), grid, warps, iters,
         _ROWS_CANDIDATES if with_rows else _CANDIDATES, lanes, ROWS=with_rows)


def tuned_config(values: dict, transposing: bool = False, rows: bool = False) -> str | None:
    """The tile the tuner chose for these key values (`transposing`: the transposing pass's; `rows`:
    the one that also takes the rows' amax), in words (None: not tuned yet)."""
    if transposing:
        c = tuned_choice(_transposing_tuner(rows), _transposing_amax_kernel, values, _TRANSPOSING_KEY)
        what = "features"
    else:
        c = tuned_choice(_tuner(), _group_amax_kernel, values, _TUNE_KEY)
        what = "rows"
    if c is None:
        return None
    lanes = ", a row's group over 4 lanes" if c.kwargs["LANES"] == 4 else ""
    return f"{c.kwargs['BR']} {what} x 1 group iters {c.kwargs['ITERS']}{lanes}"
