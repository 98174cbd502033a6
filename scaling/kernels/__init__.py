"""Triton kernels for the quantizers in `scaling.quant`: the same bits, one pass over memory.

`gemm_operand(x, spec, dim, seed, dtype)` has `quant.gemm_operand`'s signature and returns its
exact bits. It runs the fused kernel when x is on CUDA (or on CPU under TRITON_INTERPRET=1, for the
tests), Triton imports, the spec is covered (`supports`) and `SCALING_KERNELS` is not "0";
otherwise it runs the reference. The kernel is registered as the custom op
`scaling::gemm_operand`, so models that use it compile with torch.compile (no graph break).
"""

from __future__ import annotations

import functools
import json
import os

import torch

from scaling import quant
from scaling.quant import QuantSpec
from scaling.seeds import Seeds


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether Triton imports here (the kernels then run on CUDA, or anywhere under the interpreter)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def enabled(x: torch.Tensor) -> bool:
    """Whether `gemm_operand` would run the Triton kernel for a tensor like x."""
    if os.environ.get("SCALING_KERNELS", "1") == "0" or not available():
        return False
    return x.is_cuda or (interpreting() and x.device.type == "cpu")


def supports(spec: QuantSpec) -> bool:
    """Whether the fused kernel covers this spec (every operand spec of the presets)."""
    if spec.rounding == "sr" and spec.elem in ("e4m3", "e5m2"):
        return False  # SR onto FP8 elements: no preset uses it
    if spec.eden and spec.block_rows != 1:
        return False
    return spec.block is None or (spec.block_k in (16, 32) and spec.block_rows in (1, spec.block_k))


@torch.compiler.assume_constant_result
def _spec_json(spec: QuantSpec) -> str:
    """The spec as the custom op's string argument (a constant when compiled)."""
    return json.dumps(spec.to_dict(), sort_keys=True)


@functools.lru_cache(maxsize=256)
def _spec_from_json(text: str) -> QuantSpec:
    return QuantSpec.from_dict(json.loads(text))


def _seed_tensor(seeds: Seeds | None, device: torch.device) -> torch.Tensor | None:
    """[rounding seed, sign seed] as an int64 tensor on device (seeds may be ints or 0-d tensors)."""
    if seeds is None:
        return None
    parts = [s.to(device=device, dtype=torch.int64).reshape(()) if isinstance(s, torch.Tensor)
             else torch.full((), s & 0xFFFFFFFF, dtype=torch.int64, device=device)
             for s in (seeds.rounding, seeds.signs)]
    return torch.stack(parts)


@torch.library.custom_op("scaling::gemm_operand", mutates_args=())
def _gemm_operand_op(x: torch.Tensor, seeds: torch.Tensor | None, spec: str, dim: int,
                     dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    from scaling.kernels.quantize import quantize_operand

    return quantize_operand(x, _spec_from_json(spec), dim, seeds, dtype)


@_gemm_operand_op.register_fake
def _(x, seeds, spec, dim, dtype):
    return torch.empty(x.shape, dtype=dtype, device=x.device), torch.empty((), dtype=torch.float32, device=x.device)


def gemm_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seed: int | Seeds | None,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Exactly `quant.gemm_operand(x, spec, dim, seed, dtype)`: through the kernel where it runs."""
    if not (enabled(x) and supports(spec)) or x.numel() == 0:
        return quant.gemm_operand(x, spec, dim, seed, dtype)
    quant._canonical(torch.empty(x.shape, device="meta"), spec, dim)  # the reference's shape errors
    seeds = quant._seeds(seed, spec)
    return _gemm_operand_op(x, _seed_tensor(seeds, x.device), _spec_json(spec), dim % x.dim(), dtype)
