"""Pieces both families share: rotary position embeddings and causal self-attention.

Every projection is a plain ``nn.Linear(bias=False)`` so that ``scaling.linear.convert`` can swap it
for a quantized ``QLinear``. Attention itself (QKᵀ, softmax, ·V) stays in high precision, as every
recipe in RECIPES.md requires.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from scaling import cpu_rope


def rotary_tables(seq_len: int, head_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (1, seq_len, 1, head_dim/2) for RoPE (Su et al. 2021)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos()[None, :, None], angles.sin()[None, :, None]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, H, D) by position; pairs are (i, i + D/2), as in GPT-NeoX and nanochat. On a
    CPU (float32, eager) one C pass each way, the same bits (scaling.cpu_rope)."""
    T = x.size(1)
    if T > cos.size(1):  # (the CPU kernel would read past the table; torch would fail on the shapes)
        raise ValueError(f"a sequence of {T} tokens is longer than the model's seq_len {cos.size(1)} (its RoPE "
                         f"tables); build the model with seq_len >= {T}")
    cos, sin = cos[:, :T].to(x.dtype), sin[:, :T].to(x.dtype)
    if cpu_rope.serves(x, cos, sin):
        return cpu_rope.rotary(x, cos.reshape(T, -1), sin.reshape(T, -1))
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


def residual_stream(x: torch.Tensor) -> torch.Tensor:
    """The embedding rows looked up, as the residual stream carries them: in the autocast dtype (BF16)
    under autocast, else as they are. Both families keep the residual stream in BF16 on a GPU:
    nanochat's embedding is BF16 there, and torchtitan trains Llama with BF16 compute copies of the
    parameters, so its embedding output and residual adds are BF16 too. Every residual add and norm
    then moves half the bytes; the optimizer keeps the FP32 master weight."""
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    return x


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """cap · tanh(logits / cap): logits squashed smoothly into (-cap, cap) (nanochat, Gemma 2)."""
    return cap * torch.tanh(logits / cap)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, cap: float | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy in nats of the logits, soft-capped by `cap` (None: as they are),
    in float32 whatever the autocast dtype."""
    z = logits.float().view(-1, logits.size(-1))
    return F.cross_entropy(z if cap is None else softcap(z, cap), targets.reshape(-1))


def lm_head_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, cap: float | None = None) -> torch.Tensor:
    """lm_loss of the LM head's logits h @ weight.T: the same loss and gradients to float rounding,
    in less time (docs/models.md). On a CPU outside compilation, one autograd function
    (`_HeadLossCPU`) that never holds the (tokens x vocab) logits; on a GPU, the loss over the
    logits in one Triton pass forward and one backward (`scaling.kernels.cross_entropy`)."""
    h2, t = h.reshape(-1, h.size(-1)), targets.reshape(-1)
    if _use_cpu_function(h2):
        if not torch.is_grad_enabled():  # evaluation: the function then computes no gradients
            h2, weight = h2.detach(), weight.detach()
        return _HeadLossCPU.apply(h2, weight, t, cap)
    logits = F.linear(h2, weight)
    if logits.is_cuda:
        from scaling import kernels  # (here: scaling.quant builds tensors as it is imported)

        if kernels.enabled(logits):
            from scaling.kernels.cross_entropy import row_losses

            return row_losses(logits, t, cap).mean()
    return lm_loss(logits, t, cap)


def _use_cpu_function(h: torch.Tensor) -> bool:
    return h.device.type == "cpu" and not torch.compiler.is_compiling()


# Logits per chunk of tokens in _HeadLossCPU: 2 MB of float32, so a chunk's passes stay in cache.
_CHUNK_LOGITS = 1 << 19


class _HeadLossCPU(torch.autograd.Function):
    """lm_head_loss for a CPU, a chunk of tokens at a time: logits, soft-cap, loss, and at once
    their gradient, softmax(c) − onehot(target) times the soft-cap's derivative 1 − tanh², taken
    back through the head into dh and dw. Over the whole logits at once, each of those passes
    over tokens × vocab floats ran from memory rather than cache."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, cap: float | None) -> torch.Tensor:
        need_dh, need_dw = ctx.needs_input_grad[:2]
        dh = torch.empty_like(h) if need_dh else None
        dw = torch.zeros_like(weight) if need_dw else None
        n, rows = h.size(0), max(16, _CHUNK_LOGITS // weight.size(0))
        total, one = torch.zeros((), dtype=torch.float64), torch.ones(())
        for start in range(0, n, rows):
            hs, ts = h[start:start + rows], targets[start:start + rows]
            r = torch.arange(ts.numel())
            z = hs @ weight.t()
            tanh = z.div_(cap).tanh_() if cap is not None else None
            c = z if cap is None else tanh * cap  # the soft-capped logits, bit for bit softcap(z, cap)
            picked = c[r, ts]
            top = c.amax(1, keepdim=True)
            e = c.sub_(top).exp_()
            total_e = e.sum(1, keepdim=True)
            lse = total_e.log().add_(top).squeeze(1)
            total += (lse - picked).sum(dtype=torch.float64)
            if not (need_dh or need_dw):
                continue
            g = e.div_(total_e)  # softmax
            g[r, ts] -= 1.0
            if tanh is not None:
                g.mul_(torch.addcmul(one, tanh, tanh, value=-1.0, out=tanh))
            if need_dh:
                torch.mm(g, weight, out=dh[start:start + rows])
            if need_dw:
                dw.addmm_(g.t(), hs)
        ctx.save_for_backward(*(t for t in (dh, dw) if t is not None))
        ctx.n, ctx.has = n, (need_dh, need_dw)
        return (total / n).float()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        saved = iter(ctx.saved_tensors)
        scale = grad_loss / ctx.n
        dh, dw = (next(saved) * scale if has else None for has in ctx.has)
        return dh, dw, None, None
