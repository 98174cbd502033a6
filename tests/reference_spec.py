"""Test-only reference quantizers for MXFP4 and NVFP4, written from the spec text and NOT from
`scaling.quant`, by deliberately different algorithms:

- every grid is enumerated from its bit layout (E2M1: 2 exponent bits, bias 1, 1 mantissa bit;
  E4M3FN: 4 exponent bits, bias 7, 3 mantissa bits, S.1111.111 = NaN) rather than read from a table;
- rounding is an exhaustive nearest-value search in float64 over all codes, with the tie rule written
  out: of two equally near values, the one whose code has mantissa LSB 0 (round half to even);
  values beyond the largest finite value therefore saturate to it;
- the E8M0 exponent floor(log2 amax) is found by searching the powers of two 2^-149 ... 2^127;
- numpy, one block at a time.

MX (OCP Microscaling v1.0, section 6.3): X = 2^(floor(log2(max_i |V_i|)) - emax_elem), emax = 2 for
E2M1, clamped to the E8M0 range [-127, 127]; P_i = quantize(V_i / X) with RTNE and saturation.
Convention (the spec leaves it open): an all-zero block gets X = 1.

NV (NVFP4, two-level; RECIPES.md): s_enc = (6 * bound) / amax_tensor (FP32; 1 if amax is 0; bound = 448,
or 256 under 4/6);
s_b = E4M3_RTNE((amax_block / 6) * s_enc) saturating at E4M3's largest value (448); element =
RTNE(x * s_enc / s_b). Under 4/6 the amax -> 4 candidate's scale, 1.5x, reaches 384 (Four Over Six's
reference, mit-han-lab/fouroversix `quantize_to_nvfp4` with `scale_expansion_factor=1.5`, bounds only
the tensor scale by 256).
The spec's product x * s_enc / s_b is not associative in float32: this module computes it in the
order `scaling.quant` documents, x * (s_enc / s_b) in float32 (`order="documented"`), and can also
compute the literal left-to-right (x * s_enc) / s_b (`order="left_to_right"`), to measure how often
the two orders disagree. Convention: a block whose scale rounds to 0 quantizes to all zeros.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _fp_values(ebits: int, mbits: int, bias: int, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative values of a small float format for codes 0..n_codes-1, and each code's mantissa LSB."""
    codes = np.arange(n_codes)
    e, m = codes >> mbits, codes & ((1 << mbits) - 1)
    frac = m / (1 << mbits)
    values = np.where(e == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (e - bias))
    return values.astype(np.float64), codes & 1


E2M1_VALUES, E2M1_LSB = _fp_values(ebits=2, mbits=1, bias=1, n_codes=8)         # 0 ... 6
E4M3_VALUES, E4M3_LSB = _fp_values(ebits=4, mbits=3, bias=7, n_codes=127)       # 0 ... 448 (code 127 is NaN)
assert E2M1_VALUES[-1] == 6.0 and E4M3_VALUES[-1] == 448.0


def round_nearest_even(mag: np.ndarray, values: np.ndarray, lsb: np.ndarray) -> np.ndarray:
    """Nearest of `values` to each non-negative magnitude (float64), ties to the code with LSB 0."""
    mag = np.asarray(mag, dtype=np.float64)
    dist = np.abs(mag.reshape(-1, 1) - values.reshape(1, -1))
    best = dist.min(axis=1, keepdims=True)
    candidates = dist == best
    even = candidates & (lsb.reshape(1, -1) == 0)
    pick = np.where(even.any(axis=1), even.argmax(axis=1), candidates.argmax(axis=1))
    return values[pick].reshape(mag.shape)


def e2m1(v: np.ndarray) -> np.ndarray:
    """Signed RTNE onto E2M1 with saturation to +-6."""
    v = np.asarray(v, dtype=np.float64)
    return np.sign(v) * round_nearest_even(np.abs(v), E2M1_VALUES, E2M1_LSB)


def e4m3(v: np.ndarray, bound: float = 448.0) -> np.ndarray:
    """Non-negative RTNE onto E4M3FN values <= bound (saturating)."""
    keep = E4M3_VALUES <= bound
    return round_nearest_even(v, E4M3_VALUES[keep], E4M3_LSB[keep])


POW2_EXPONENTS = np.arange(-149, 128)
POW2 = np.ldexp(1.0, POW2_EXPONENTS)


def floor_log2(a: float) -> int:
    """The largest e with 2^e <= a (a > 0, a float32 value), by search over all powers of two."""
    return int(POW2_EXPONENTS[np.searchsorted(POW2, a, side="right") - 1])


def _blocks(x: np.ndarray, rows: int, cols: int):
    R, K = x.shape
    for i in range(0, R, rows):
        for j in range(0, K, cols):
            yield i // rows, j // cols, (slice(i, i + rows), slice(j, j + cols))


def mxfp4(x: np.ndarray, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """OCP MXFP4 along the last axis of a 2-D float32 array: (E2M1 values, per-block scales X)."""
    x = np.asarray(x, dtype=F32)
    R, K = x.shape
    values = np.zeros((R, K))
    scales = np.ones((R, K // block))
    for bi, bj, sl in _blocks(x, 1, block):
        amax = float(np.abs(x[sl]).max())
        if amax == 0:
            continue
        exp = min(127, max(-127, floor_log2(amax) - 2))
        scales[bi, bj] = 2.0 ** exp
        values[sl] = e2m1(x[sl].astype(np.float64) / 2.0 ** exp)  # exact: division by a power of two
    return values, scales


def nvfp4(x: np.ndarray, block: tuple[int, int] = (1, 16), bound: float = 448.0,
          order: str = "documented", four_over_six: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """NVFP4 two-level quantization of a 2-D float32 array, blocks along the last axis:
    (E2M1 values, E4M3 block scales s_b, FP32 tensor scale s_enc).

    four_over_six (Four Over Six, arXiv 2512.02010): each block is also quantized with its amax
    mapped to 4 (s_b = E4M3((amax / 4) * s_enc)), and the candidate with the lower squared error
    sum((q * s_b - x * s_enc)^2), computed here exactly in float64, is kept; a tie keeps the
    amax -> 6 candidate."""
    x = np.asarray(x, dtype=F32)
    R, K = x.shape
    amax_t = F32(np.abs(x).max())
    with np.errstate(over="ignore", divide="ignore"):
        s_enc = F32(6 * bound) / amax_t
    s_enc = s_enc if np.isfinite(s_enc) else F32(1)  # amax 0, or so tiny the quotient overflows
    values = np.zeros((R, K))
    scales = np.zeros((R // block[0], K // block[1]))
    for bi, bj, sl in _blocks(x, *block):
        amax_b = F32(np.abs(x[sl]).max())
        best = None
        for target in (6, 4) if four_over_six else (6,):
            s_b = F32(e4m3(np.array([F32(amax_b / F32(target)) * s_enc]))[0])
            q = np.zeros(x[sl].shape)
            if s_b > 0:
                with np.errstate(over="ignore"):
                    v = x[sl] * F32(s_enc / s_b) if order == "documented" else (x[sl] * s_enc) / s_b
                q = e2m1(v)
            err = float(((q * float(s_b) - x[sl].astype(np.float64) * float(s_enc)) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, s_b, q)
        _, scales[bi, bj], values[sl] = best
    return values, scales, float(s_enc)
