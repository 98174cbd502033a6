"""Helpers of the tests that hold a fused CPU pass (C) against torch's ops: forward and backward
results, and their comparison bit for bit."""

from __future__ import annotations

import torch


def through(f, x: torch.Tensor, g: torch.Tensor, *args) -> tuple[torch.Tensor, torch.Tensor]:
    """f(x, *args) and the gradient of x for an output gradient g."""
    x = x.detach().clone().requires_grad_()
    y = f(x, *args)
    y.backward(g)
    return y.detach(), x.grad


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal float32 bit patterns (zero signs too), NaN where want has NaN (a NaN's payload is not a
    contract)."""
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
