"""RoPE (`models.layers.apply_rotary`) on a CPU in one C pass forward and one backward
(cpu_rope.c), bit for bit torch's ops; elsewhere, and under compilation (inductor fuses the ops
itself), the torch ops."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from scaling.cbuild import load_library

SOURCE = Path(__file__).with_name("cpu_rope.c")


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = load_library(SOURCE, "the fused CPU RoPE", "torch's RoPE ops")
    if lib is not None:
        lib.scaling_rope.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_int] * 2
    return lib


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool) -> torch.Tensor:
    """x (B, T, H, D) rotated by the tables' angles, or by their negatives (the gradient)."""
    x = x.contiguous()
    B, T, H, D = x.shape
    out = torch.empty_like(x)
    library().scaling_rope(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), B * T * H, H, T, D // 2,
                           int(inverse), torch.get_num_threads())
    return out


class _RotaryCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, inverse=False)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, sin, inverse=True), None, None


def serves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether `rotary` runs the C pass: float32 CPU tensors outside compilation, tables without grad."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 4 and x.numel() > 0
            and not torch.compiler.is_compiling() and not (cos.requires_grad or sin.requires_grad)
            and library() is not None)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, D) rotated by the (T, D/2) float32 tables cos and sin, through the C pass (call
    where `serves`)."""
    return _RotaryCPU.apply(x, cos.contiguous(), sin.contiguous())
