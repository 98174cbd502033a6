"""torch.compile for training: one region per transformer block, CUDA graphs that survive
gradient accumulation. Used by `scaling train` and `scaling bench train`, so both measure the same step.

Why regions: compiling the whole model makes dynamo trace every block (for an FP4 recipe, every
QLinear's forward and backward with its quantizer calls) and inductor compile the unrolled result:
~4 minutes at 160M. A block compiled on its own is traced and compiled once, and every other
block runs the same code (QLinear reads its seeds from a tensor that set_step fills, so no block
differs in a Python constant). The head (final norm, LM head, soft-cap, loss) is a region of its own; only the
embedding lookup runs eagerly.

Why stable gradients: under "reduce-overhead" the compiled backward's outputs live in the CUDA
graph's memory pool. With gradient accumulation a parameter's .grad would be such an output, and
the next micro-batch's replay overwrites it. `begin_micro_batch` marks each micro-batch as a new
graph step and `zero_grads` keeps .grad in persistent zeroed buffers that autograd adds into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

# torch is imported inside the functions: `scaling bench` reads COMPILE_MODES to parse its arguments,
# and `scaling bench fit` runs on a laptop without torch.

# Modes a run may ask for. On a GPU, FP4 recipes want "reduce-overhead" (CUDA graphs): without them
# a step waits on the host launching hundreds of quantizer kernels (docs/training.md).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def uses_cudagraphs(mode: str | bool | None) -> bool:
    return mode == "reduce-overhead"


def compile_model(model: nn.Module, mode: str | bool | None, backend: str = "inductor") -> nn.Module:
    """Compile `model.blocks` one block at a time and `model.head` as one region, in place.
    `mode` is a COMPILE_MODES entry, or True/None for torch.compile's default."""
    import torch

    mode = None if mode in (True, None, "default") else mode
    if mode is not None and mode not in COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r} is not one of {COMPILE_MODES}")
    for block in model.blocks:
        block.compile(mode=mode, backend=backend)
    model.head = torch.compile(model.head, mode=mode, backend=backend)
    return model


def begin_micro_batch(mode: str | bool | None) -> None:
    """Call before each forward pass (training micro-batch or evaluation batch) of a compiled model."""
    if uses_cudagraphs(mode):
        import torch

        torch.compiler.cudagraph_mark_step_begin()


def zero_grads(model: nn.Module, optimizers, mode: str | bool | None) -> None:
    """Zero the gradients before a step. Under CUDA graphs every trainable parameter keeps a .grad
    allocated outside any graph (see above), zeroed in place; otherwise .grad is set to None."""
    cudagraphs = uses_cudagraphs(mode)
    if cudagraphs:
        import torch

        for p in model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    for opt in optimizers:
        opt.zero_grad(set_to_none=not cudagraphs)


__all__ = ["COMPILE_MODES", "begin_micro_batch", "compile_model", "uses_cudagraphs", "zero_grads"]
