"""Llama-2 (Touvron et al. 2023, arXiv 2307.09288): pre-norm RMSNorm with a learned weight, SwiGLU
MLP, RoPE, no biases, untied embedding and head. Multi-head attention (the 7B/13B form, no GQA).
Init: normal(0, 0.02), output projections scaled by 1/√(2·depth) (GPT-2 / nanoGPT / OLMo)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.layers import CausalSelfAttention, lm_head_loss, residual_stream, rotary_tables

NORM_EPS = 1e-5  # Llama-2's rms_norm_eps


class SwiGLU(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int):
        super().__init__()
        self.attn_norm = nn.RMSNorm(width, eps=NORM_EPS)
        self.attn = CausalSelfAttention(width, heads)
        self.mlp_norm = nn.RMSNorm(width, eps=NORM_EPS)
        self.mlp = SwiGLU(width, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, depth: int, width: int, heads: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList(Block(width, heads, hidden) for _ in range(depth))
        self.norm = nn.RMSNorm(width, eps=NORM_EPS)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        cos, sin = rotary_tables(seq_len, width // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = 0.02
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)
            elif isinstance(m, nn.RMSNorm):
                nn.init.ones_(m.weight)
        for b in self.blocks:
            nn.init.normal_(b.attn.o.weight, std=std / math.sqrt(2 * len(self.blocks)))
            nn.init.normal_(b.mlp.down.weight, std=std / math.sqrt(2 * len(self.blocks)))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = residual_stream(self.embed(idx))
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(x, targets)

    def head(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Final norm and LM head: logits, or with targets the mean loss (one compiled region)."""
        h = self.norm(x)
        return self.lm_head(h) if targets is None else lm_head_loss(h, self.lm_head.weight, targets)
