"""The GEMM epilogue of a two-level (or per-tensor) scaled operand pair, in one pass.

An emulated FP4 GEMM accumulates in FP32 and then multiplies by 1 / (tensor scale of A x tensor
scale of B). Done with torch ops, that is three passes over the output (FP32 store, the multiply,
the cast); this kernel reads the FP32 product once and writes the scaled output in its final dtype,
with the same bits: scale = inv_a * inv_b in FP32, out * scale in FP32, one round to the dtype (RTNE).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def rtne_bfloat16(y):
    """FP32 values rounded to the nearest BF16 (ties to even), still FP32: the cast that follows is
    exact. (The GPU's cast rounds so too; the interpreter's truncates.) NaN stays NaN."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(y != y, y, bits.to(tl.float32, bitcast=True))


@triton.jit
def _scale_cast_kernel(src_ptr, dst_ptr, inv_a_ptr, inv_b_ptr, n, HAS_B: tl.constexpr, BLOCK: tl.constexpr):
    scale = tl.load(inv_a_ptr)
    if HAS_B:
        scale = scale * tl.load(inv_b_ptr)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(src_ptr + offs, mask=mask) * scale
    if dst_ptr.dtype.element_ty == tl.bfloat16:
        y = rtne_bfloat16(y)
    tl.store(dst_ptr + offs, y.to(dst_ptr.dtype.element_ty), mask=mask)


@torch.library.custom_op("scaling::scale_cast", mutates_args=())
def scale_cast(out: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """(out * (inv_a * inv_b)).to(dtype) for a contiguous FP32 `out` and 0-d FP32 scales (inv_b may
    be None: one scaled operand), in one pass."""
    dst = torch.empty(out.shape, dtype=dtype, device=out.device)
    n = out.numel()
    if n:
        _scale_cast_kernel[(triton.cdiv(n, BLOCK),)](out, dst, inv_a, inv_a if inv_b is None else inv_b, n,
                                                          HAS_B=inv_b is not None, BLOCK=BLOCK, num_warps=8)
    return dst


@scale_cast.register_fake
def _(out, inv_a, inv_b, dtype):
    return torch.empty(out.shape, dtype=dtype, device=out.device)
