"""The fused CPU quantizer: `quant.gemm_operand` in one C call (cpu_quantize.c), bit for bit.

On a CPU the reference runs ~20 tensor ops per operand, each a pass over memory; for the 1M model's
(4096, 128) operands that was 3-9 ms each and over half of an NVFP4 training step. The C version
does each piece of the tensor in cache, on torch's thread count (docs/kernels-log.md, "On a CPU: the
fused C quantizer"). It serves every spec except 4/6 over 2-D tiles and SR onto FP8 (those run the
reference), for 2-D tensors along either axis and any contiguous tensor along its last.

The library is built on first use with the system C compiler (`scaling.cbuild`: `$CC`, else `cc`;
kept under `$SCALING_CACHE`, keyed by the source, the flags and the CPU). No compiler: one notice,
and the reference runs. `SCALING_CPU_KERNEL=0` turns it off (A/B runs).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from scaling import formats, quant
from scaling.cbuild import load_library
from scaling.quant import QuantSpec
from scaling.seeds import Seeds, seed_key
from scaling.transforms import norm_factor, signs_for

SOURCE = Path(__file__).with_name("cpu_quantize.c")
# scaling_quantize's parameters, in order (cpu_quantize.c)
_ARGTYPES = ([ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_int] * 11
             + [ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_float] * 4 + [ctypes.c_int] * 3
             + [ctypes.c_uint32])
LANES = 16  # cpu_quantize.c's L: the rows of a 2-D block it takes
MAX_NK = 128  # the largest stretch or run unit it is given (the largest Hadamard group)
MAXRUN = 1024  # cpu_quantize.c's MAXRUN: the longest run along a contiguous K


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled quantizer, or None (then the reference runs) when turned off or unbuildable."""
    lib = load_library(SOURCE, "the fused CPU quantizer", "the reference quantizer")
    if lib is None:
        return None
    fn = lib.scaling_quantize
    fn.argtypes, fn.restype = _ARGTYPES, ctypes.c_float
    return lib


def _canonical_contiguous(x: torch.Tensor, dim: int) -> bool | None:
    """Whether x's canonical (R, K) view (K = x.shape[dim]) has strides (K, 1) (True) or (1, R) (False)
    in x's own memory, or None when it has neither (then the reference runs)."""
    if x.dim() == 2 and x.stride(dim) == 1 and x.stride(1 - dim) == x.shape[dim]:
        return True
    if x.dim() == 2 and x.stride(1 - dim) == 1 and x.stride(dim) == x.shape[1 - dim]:
        return False
    if dim == x.dim() - 1 and x.is_contiguous():
        return True
    return None


def _unit_k(spec: QuantSpec, K: int) -> int | None:
    """nk, the C code's unit along K (a stretch's rows; runs are multiples of it): whole blocks and
    Hadamard groups, dividing K, at most MAX_NK (None: no fit)."""
    if spec.block is None:
        nk = spec.transform or next(n for n in (16, 8, 4, 2, 1) if K % n == 0)
    else:
        nk = spec.k_multiple  # (not the larger of the two: 1x24 blocks under RHT16 straddled groups)
    return nk if nk <= MAX_NK and K % nk == 0 else None


def _long_rows(R: int, K: int) -> tuple[int, int]:
    """(R, K) memory as rows of up to MAXRUN: m consecutive rows as one, m the largest power of two
    dividing R with m * K <= MAXRUN. For 1-row blocks along a contiguous K nothing else changes: blocks
    and Hadamard groups divide K, so none straddles two rows, and the SR uniforms, the tensor amax and
    every block's values depend only on the flat index. (A short K otherwise pays the run's setup per
    row: inside a 1M-model step, (4096, 128) operands along K took ~25% less time so.)"""
    m = 1
    while R % (2 * m) == 0 and 2 * m * K <= MAXRUN:
        m *= 2
    return R // m, K * m


def serves(x: torch.Tensor, spec: QuantSpec, dim: int) -> bool:
    """Whether `gemm_operand` here gives quant.gemm_operand's result for this call."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or torch.compiler.is_compiling():
        return False
    if spec.elem in formats.FP8_DTYPES and spec.rounding == "sr":
        return False
    if (spec.four_over_six or spec.eden) and spec.block_rows != 1:  # (4/6 over 16x16 tiles: the reference)
        return False
    if (spec.four_over_six or spec.eden) and spec.block_k & (spec.block_k - 1):
        return False  # (their block sums halve a block log2(block) times: a 1x24 block is the reference's)
    if x.dim() == 0 or x.numel() == 0 or x.numel() >= 1 << 31 or spec.block_rows not in (1, LANES):
        return False
    if not -x.dim() <= dim < x.dim():
        return False  # (the reference says so)
    dim %= x.dim()
    K = x.shape[dim]
    if K % spec.k_multiple or (x.numel() // K) % spec.block_rows or _unit_k(spec, K) is None:
        return False  # (the reference says what is wrong with the shape)
    return _canonical_contiguous(x, dim) is not None and library() is not None


def gemm_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seed: int | Seeds | None,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """quant.gemm_operand(x, spec, dim, seed, dtype) for a call that `serves` accepts."""
    seeds = quant.seeds_of(seed, spec)
    dim %= x.dim()
    K = x.shape[dim]
    R = x.numel() // K
    k_contiguous = _canonical_contiguous(x, dim)
    # The reference's layout: x's, except that 2-D blocks come out of its tile reshapes row-major (R, K).
    out_rowmajor = not k_contiguous and spec.block_rows > 1
    if out_rowmajor:
        out = torch.empty(R, K, dtype=torch.float32).movedim(-1, dim)  # (2-D: R, K)
    else:
        out = torch.empty_strided(x.shape, x.stride(), dtype=torch.float32)
    rows, length = R, K
    if k_contiguous and spec.block_rows == 1 and x.is_contiguous():
        rows, length = _long_rows(R, K)
    signs = None
    if spec.transform:
        signs = signs_for(spec.signs, spec.transform, int(seeds.signs) if seeds else None)
    key = seed_key(int(seeds.rounding)) if spec.rounding == "sr" else 0
    scale_key = seed_key(int(seeds.rounding) ^ quant.SCALE_STREAM) if spec.eden else 0
    numer, target = quant.scale_constants(spec)
    s_enc = library().scaling_quantize(
        x.data_ptr(), out.data_ptr(), rows, length, int(k_contiguous), int(out_rowmajor), _unit_k(spec, K),
        formats.ELEM_CODES[spec.elem], formats.SCALE_CODES[spec.scale], formats.EMAX[spec.elem],
        spec.block_rows, spec.block_k,
        int(spec.block is None), int(spec.has_tensor_scale), int(spec.rounding == "sr"), key,
        spec.transform, None if signs is None else signs.data_ptr(),
        norm_factor(spec.transform) if spec.transform else 1.0,
        float(spec.elem_max), numer, target, torch.get_num_threads(),
        int(spec.four_over_six), int(spec.eden), scale_key)
    inv = 1.0 / torch.tensor(s_enc, dtype=torch.float32)  # as the reference: 1.0 / its 0-d s_enc
    return out.to(dtype), inv
