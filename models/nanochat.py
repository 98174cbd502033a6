"""The nanochat GPT (karpathy/nanochat, nanochat/gpt.py): RoPE, QK-norm, ReLU² MLP, parameter-free
RMSNorm (also right after the token embedding), untied embedding and head, no biases, logits
soft-capped at 15, and nanochat's init (zero-initialised output projections and head)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.layers import CausalSelfAttention, lm_head_loss, residual_stream, rotary_tables, softcap
from scaling.cpu_relu2 import relu_squared

LOGIT_SOFTCAP = 15.0  # nanochat: logits = 15 · tanh(logits / 15)


def norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


class MLP(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(relu_squared(self.up(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int):
        super().__init__()
        self.attn = CausalSelfAttention(width, heads, qk_norm=True)
        self.mlp = MLP(width, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(norm(x), cos, sin)
        return x + self.mlp(norm(x))


class Nanochat(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, depth: int, width: int, heads: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList(Block(width, heads, hidden) for _ in range(depth))
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        cos, sin = rotary_tables(seq_len, width // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.embed.weight, std=1.0)
        for m in self.blocks.modules():
            if isinstance(m, nn.Linear):  # arXiv 2310.17813, as nanochat does
                fan_out, fan_in = m.weight.shape
                nn.init.normal_(m.weight, std=min(1.0, math.sqrt(fan_out / fan_in)) / math.sqrt(fan_in))
        for b in self.blocks:
            nn.init.zeros_(b.attn.o.weight)
            nn.init.zeros_(b.mlp.down.weight)
        nn.init.zeros_(self.lm_head.weight)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = norm(residual_stream(self.embed(idx)))
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(x, targets)

    def head(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Final norm, LM head and soft-cap: logits, or with targets the mean loss (one compiled region)."""
        if targets is not None:
            return lm_head_loss(norm(x), self.lm_head.weight, targets, LOGIT_SOFTCAP)
        return softcap(self.lm_head(norm(x)).float(), LOGIT_SOFTCAP)
