"""The LM loss over the logits, soft-capped or not, in two Triton passes: one forward, one backward.

`models.layers.lm_loss` computes mean(logsumexp(c) - c[target]) with c = cap · tanh(z / cap) (or
c = z) over the (tokens × vocab) logits z. Compiled, inductor ran it as a forward and a backward
reduction of ~2 ms each over nanochat 160M's 32768 × 32768 BF16 logits (2 GB) on the H200: several
passes over each row and an exact tanh per element, where one read of 2 GB takes ~0.5 ms.

Here the forward reads each row once and the backward reads it once and writes its gradient. The
soft cap is computed from one exponential: with r = 1 / (1 + e^(2z/cap)),
c = cap (1 - 2r), so c - cap = -2 cap r, and tanh' = 1 - tanh² = 4 r (1 - r). Since c <= cap,
sum(e^(c - cap)) needs no running maximum. Exponentials and the division are the GPU's fast
approximations (relative error ~1e-7): the result is the loss to float rounding, not its bits
(inductor's own kernels differ from eager PyTorch at that level too).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from scaling.kernels.epilogue import rtne_bfloat16

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)  # e^x = 2^(x log2 e)
BLOCK = 4096  # logits per row per iteration (8 warps: 16 per thread)


@triton.jit
def _capped_r(z, cap):
    """r = 1 / (1 + e^(2z/cap)): the soft-capped logit is cap (1 - 2r). (The exponent is bounded so
    that the power stays finite: r is then below 1e-38, as good as 0.)"""
    power = tl.exp2(tl.minimum(z * (2.0 * LOG2E / cap), 126.0))
    return tl.fdiv(tl.full(z.shape, 1.0, tl.float32), 1.0 + power)


@triton.jit
def _loss_forward_kernel(logits_ptr, row_stride, targets_ptr, loss_ptr, norm_ptr, V, cap,
                         HAS_CAP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * row_stride
    lanes = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.float32)
    if HAS_CAP:
        for start in range(0, V, BLOCK):
            mask = start + lanes < V
            z = tl.load(base + start + lanes, mask=mask, other=0.0).to(tl.float32)
            below = -2.0 * cap * _capped_r(z, cap)  # c - cap <= 0
            total += tl.where(mask, tl.exp2(below * LOG2E), 0.0)
        row_top = cap
    else:
        row_top = float("-inf")  # the running maximum (finite after the first block: V >= 1)
        for start in range(0, V, BLOCK):
            z = tl.load(base + start + lanes, mask=start + lanes < V, other=float("-inf")).to(tl.float32)
            new_top = tl.maximum(row_top, tl.max(z, 0))
            total = total * tl.exp2((row_top - new_top) * LOG2E) + \
                tl.exp2((z - new_top) * LOG2E)
            row_top = new_top
    log_total = tl.log(tl.sum(total, 0))
    target = tl.load(targets_ptr + row)
    z_target = tl.load(base + target).to(tl.float32)
    if HAS_CAP:
        picked = cap * (1.0 - 2.0 * _capped_r(z_target, cap))
    else:
        picked = z_target
    # logsumexp(c) = row_top + log_total, kept as the two (the backward's c - row_top is then exact
    # where logits are large; c - logsumexp would lose their low bits)
    tl.store(norm_ptr + 2 * row, row_top)
    tl.store(norm_ptr + 2 * row + 1, log_total)
    tl.store(loss_ptr + row, (row_top - picked) + log_total)


@triton.jit
def _loss_backward_kernel(logits_ptr, row_stride, targets_ptr, norm_ptr, grad_ptr, grad_stride, dlogits_ptr, V,
                          cap, HAS_CAP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * row_stride
    lanes = tl.arange(0, BLOCK)
    row_top = tl.load(norm_ptr + 2 * row)
    log_total = tl.load(norm_ptr + 2 * row + 1)
    grad = tl.load(grad_ptr + row * grad_stride)
    target = tl.load(targets_ptr + row)
    for start in range(0, V, BLOCK):
        cols = start + lanes
        mask = cols < V
        z = tl.load(logits_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_CAP:
            r = _capped_r(z, cap)
            p = tl.exp2((-2.0 * cap * r - log_total) * LOG2E)  # softmax(c); row_top = cap
            g = (p - tl.where(cols == target, 1.0, 0.0)) * (4.0 * r * (1.0 - r)) * grad
        else:
            p = tl.exp2(tl.minimum((z - row_top) - log_total, 0.0) * LOG2E)
            g = (p - tl.where(cols == target, 1.0, 0.0)) * grad
        if dlogits_ptr.dtype.element_ty == tl.bfloat16:
            g = rtne_bfloat16(g)
        tl.store(dlogits_ptr + base + cols, g.to(dlogits_ptr.dtype.element_ty), mask=mask)


def _check(logits: torch.Tensor, targets: torch.Tensor) -> None:
    if logits.dim() != 2 or logits.stride(1) != 1 or targets.shape != logits.shape[:1]:
        raise ValueError(f"row_losses takes (tokens, vocab) logits with contiguous rows and (tokens,) targets "
                         f"(got {tuple(logits.shape)} with strides {logits.stride()}, targets {tuple(targets.shape)})")


@torch.library.custom_op("scaling::row_losses", mutates_args=())
def _row_losses(logits: torch.Tensor, targets: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    _check(logits, targets)
    n, vocab = logits.shape
    loss = torch.empty(n, dtype=torch.float32, device=logits.device)
    norm = torch.empty(n, 2, dtype=torch.float32, device=logits.device)
    if n:
        _loss_forward_kernel[(n,)](logits, logits.stride(0), targets, loss, norm, vocab, cap, HAS_CAP=cap > 0,
                                   BLOCK=BLOCK, num_warps=8)
    return loss, norm


@_row_losses.register_fake
def _(logits, targets, cap):
    n = logits.shape[0]
    return logits.new_empty(n, dtype=torch.float32), logits.new_empty(n, 2, dtype=torch.float32)


@torch.library.custom_op("scaling::row_losses_backward", mutates_args=())
def _row_losses_backward(logits: torch.Tensor, targets: torch.Tensor, norm: torch.Tensor, grad: torch.Tensor,
                         cap: float) -> torch.Tensor:
    n, vocab = logits.shape
    dlogits = torch.empty_like(logits, memory_format=torch.contiguous_format)
    if n:
        _loss_backward_kernel[(n,)](logits, logits.stride(0), targets, norm, grad, grad.stride(0), dlogits, vocab,
                                    cap, HAS_CAP=cap > 0, BLOCK=BLOCK, num_warps=8)
    return dlogits


@_row_losses_backward.register_fake
def _(logits, targets, norm, grad, cap):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    logits, targets, cap = inputs
    ctx.save_for_backward(logits, targets, output[1])
    ctx.cap = cap


def _backward(ctx, grad_loss: torch.Tensor, _grad_norm: torch.Tensor):
    logits, targets, norm = ctx.saved_tensors
    return _row_losses_backward(logits, targets, norm, grad_loss, ctx.cap), None, None


_row_losses.register_autograd(_backward, setup_context=_setup_context)


def row_losses(logits: torch.Tensor, targets: torch.Tensor, cap: float | None = None) -> torch.Tensor:
    """Per token, logsumexp(c) - c[target] in float32 for (tokens, vocab) logits with contiguous rows,
    c = cap · tanh(logits / cap) (None: the logits); differentiable with respect to the logits.
    Targets must index the vocabulary (no ignore index)."""
    return _row_losses(logits, targets, float(cap) if cap else 0.0)[0]


__all__ = ["row_losses"]
