"""The fused CPU ReLU² (scaling/cpu_relu2.c) against torch's relu(h).square(): the same bits forward
and backward, zero signs and edge values included."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autograd_bits import assert_same_bits, through
from scaling import cpu_relu2


def test_relu_squared_matches_torch_bit_for_bit():
    assert cpu_relu2.library() is not None  # CI has a C compiler: the fused pass itself is tested
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(4, 64, 96, generator=gen) * 10 ** (torch.rand(4, 64, 1, generator=gen) * 8 - 4)
    edge = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-30, 1.2e-38, 3e38, -3e38, float("inf"), float("-inf"),
                         float("nan"), 1.0, -1.0, 2.0 ** -75])
    h.view(-1)[: edge.numel()] = edge
    g = torch.randn(h.shape, generator=gen)
    g.view(-1)[: edge.numel()] = torch.tensor([-1.0, -2.0, -3.0, 1.0, -1.0, 2.0, 2.0, 1.0, -1.0, 1.0, 1.0, 0.0, -0.0, -5.0])
    want = through(lambda t: F.relu(t).square(), h, g)
    got = through(cpu_relu2.relu_squared, h, g)
    for a, b in zip(got, want):
        assert_same_bits(a, b)


def test_non_contiguous_inputs_and_gradients():
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(96, 64, generator=gen).t()  # a transposed view
    g = torch.randn(96, 64, generator=gen).t()
    want = through(lambda t: F.relu(t).square(), h, g)
    got = through(cpu_relu2.relu_squared, h, g)
    for a, b in zip(got, want):
        assert_same_bits(a, b)


def test_turned_off_it_is_torchs_ops(monkeypatch):
    monkeypatch.setenv("SCALING_CPU_KERNEL", "0")
    cpu_relu2.library.cache_clear()
    try:
        assert cpu_relu2.library() is None
        h = torch.randn(8, 16)
        assert torch.equal(cpu_relu2.relu_squared(h), F.relu(h).square())
    finally:
        cpu_relu2.library.cache_clear()
