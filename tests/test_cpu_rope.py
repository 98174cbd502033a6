"""The fused CPU RoPE (scaling/cpu_rope.c) against torch's ops in models.layers.apply_rotary: the same
bits forward and backward, edge values included."""

from __future__ import annotations

import torch

from models.layers import apply_rotary, rotary_tables
from autograd_bits import assert_same_bits, through
from scaling import cpu_rope


def _torch_rotary(x, cos, sin):
    T = x.size(1)
    cos, sin = cos[:, :T], sin[:, :T]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


def test_rotary_matches_torch_bit_for_bit():
    assert cpu_rope.library() is not None  # CI has a C compiler: the fused pass itself is tested
    gen = torch.Generator().manual_seed(0)
    cos, sin = rotary_tables(64, 32)
    x = torch.randn(3, 48, 4, 32, generator=gen) * 10 ** (torch.rand(3, 48, 4, 1, generator=gen) * 8 - 4)
    edge = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1.2e-38, 3e38, -3e38, float("inf"), float("-inf"), float("nan"), 1.0])
    x.view(-1)[: edge.numel()] = edge
    x[0, 5, 1, 16:27] = edge  # the other half of a pair
    g = torch.randn(x.shape, generator=gen)
    g.view(-1)[100: 100 + edge.numel()] = edge
    assert cpu_rope.serves(x, cos[:, :48], sin[:, :48])
    for got, want in zip(through(apply_rotary, x, g, cos, sin), through(_torch_rotary, x, g, cos, sin)):
        assert_same_bits(got, want)


def test_non_contiguous_gradient_and_torch_elsewhere():
    """A transposed gradient is made contiguous; float64, or tables that need a gradient, take torch's ops."""
    cos, sin = rotary_tables(16, 8)
    x = torch.randn(2, 16, 3, 8)
    g = torch.randn(2, 3, 16, 8).transpose(1, 2)
    for got, want in zip(through(apply_rotary, x, g, cos, sin), through(_torch_rotary, x, g, cos, sin)):
        assert_same_bits(got, want)
    assert not cpu_rope.serves(x.double(), cos[:, :16], sin[:, :16])
    assert not cpu_rope.serves(x, cos[:, :16].requires_grad_(), sin[:, :16])
