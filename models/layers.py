"""Pieces both families share: rotary position embeddings and causal self-attention.

Every projection is a plain ``nn.Linear(bias=False)`` so that ``scaling.linear.convert`` can swap it
for a quantized ``QLinear``. Attention itself (QKᵀ, softmax, ·V) stays in high precision, as every
recipe in RECIPES.md requires.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def rotary_tables(seq_len: int, head_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (1, seq_len, 1, head_dim/2) for RoPE (Su et al. 2021)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos()[None, :, None], angles.sin()[None, :, None]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, H, D) by position; pairs are (i, i + D/2), as in GPT-NeoX and nanochat."""
    T = x.size(1)
    cos, sin = cos[:, :T].to(x.dtype), sin[:, :T].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with RoPE; `qk_norm` applies a parameter-free RMSNorm to q and k."""

    def __init__(self, width: int, heads: int, qk_norm: bool = False):
        super().__init__()
        self.heads, self.head_dim, self.qk_norm = heads, width // heads, qk_norm
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width, bias=False)
        self.o = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        # RoPE and QK-norm in the projections' own (B, T, H, D) layout; attention takes (B, H, T, D)
        # views of it. (Elementwise kernels over the transposed layout ran at a third of the bandwidth.)
        q, k, v = (p(x).view(B, T, self.heads, self.head_dim) for p in (self.q, self.k, self.v))
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.qk_norm:
            q, k = F.rms_norm(q, (self.head_dim,)), F.rms_norm(k, (self.head_dim,))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """cap · tanh(logits / cap): logits squashed smoothly into (-cap, cap) (nanochat, Gemma 2)."""
    return cap * torch.tanh(logits / cap)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, cap: float | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy in nats of the logits, soft-capped by `cap` (None: as they are),
    in float32 whatever the autocast dtype. On a CPU outside compilation it runs as one autograd
    function (`_CrossEntropyCPU`), the same loss to float rounding in fewer passes over the
    (tokens x vocab) logits; compiled, inductor fuses the plain ops itself."""
    z, t = logits.float().view(-1, logits.size(-1)), targets.reshape(-1)
    if _use_cpu_function(z):
        return _CrossEntropyCPU.apply(z, t, cap)
    return F.cross_entropy(z if cap is None else softcap(z, cap), t)


def _use_cpu_function(z: torch.Tensor) -> bool:
    return z.device.type == "cpu" and not torch.compiler.is_compiling()


class _CrossEntropyCPU(torch.autograd.Function):
    """lm_loss with a hand-written backward, softmax(c) − onehot(target) times the soft-cap's
    derivative 1 − tanh², for a CPU: autograd's chain (soft-cap, log-softmax, NLL and their
    backwards) makes about twice the passes over the logits, ~30% of a 1M model's training step."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor, cap: float | None) -> torch.Tensor:
        tanh = torch.div(z, cap).tanh_() if cap is not None else None
        c = z if cap is None else tanh * cap  # the soft-capped logits, bit for bit softcap(z, cap)
        lse = torch.logsumexp(c, 1)
        ctx.save_for_backward(c, lse, targets, tanh)
        return (lse - c.gather(1, targets[:, None]).squeeze(1)).mean()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        c, lse, targets, tanh = ctx.saved_tensors
        n = targets.numel()
        grad = torch.sub(c, lse[:, None]).exp_()  # softmax
        grad[torch.arange(n), targets] -= 1.0
        grad.mul_(grad_loss / n)
        if tanh is not None:
            grad.mul_(tanh.square().neg_().add_(1.0))
        return grad, None, None
