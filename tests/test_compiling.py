"""Regional compilation (scaling.compiling): one compiled block serves every block, same numbers."""

from __future__ import annotations

import copy

import pytest
import torch

from models import build_model
from scaling.compiling import compile_model


def test_one_block_is_compiled_once_for_every_block_with_the_same_bits(monkeypatch):
    # Imported here: torch._dynamo imports triton, which tests/test_kernels.py must import interpreted.
    from torch._dynamo.utils import counters

    # Eager on a CPU, lm_head_loss runs its hand-written function (the same loss to float rounding);
    # compiled, the plain ops. Both take the plain ops here, so the bits can be compared.
    monkeypatch.setattr("models.layers._use_cpu_function", lambda h: False)

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    eager = build_model("nanochat", "0.5M", vocab_size=512, seq_len=64)  # 10 blocks
    compiled = compile_model(copy.deepcopy(eager), "default", backend="aot_eager")
    idx = torch.randint(0, 512, (2, 65))
    losses = []
    for model in (eager, compiled):
        loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        losses.append(loss)
    assert counters["stats"]["unique_graphs"] == 2  # the block and the head, not 10 blocks + 1
    assert torch.equal(losses[0], losses[1])
    for a, b in zip(eager.parameters(), compiled.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="not one of"):
        compile_model(build_model("nanochat", "0.5M", vocab_size=512, seq_len=64), "fastest")
