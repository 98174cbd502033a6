"""scaling.config: the one rule that counts a run's steps, and what counts by it. Torch-free."""

from __future__ import annotations

import pytest

from scaling.config import RunConfig, evaluation_count


@pytest.mark.parametrize("tokens, batch_size, seq_len, eval_interval", [
    (40 * 4 * 64, 4, 64, None),  # whole batches
    (40 * 4 * 64 + 255, 4, 64, None),  # a batch's worth short of a 41st step: rounded down
    (3 * 8 * 64, 8, 64, 2),  # an eval interval that does not divide the steps (evaluations after steps 2 and 3)
    (7 * 2 * 32 + 1, 2, 32, None),  # fewer than 8 steps: the default interval is 1
])
def test_steps_trained_and_evaluated_tokens_count_the_same_whole_steps(tokens, batch_size, seq_len, eval_interval):
    """`steps`, `whole_batch_tokens` (`trained_tokens`), `evaluated_tokens` and the default eval_interval count a run's
    steps by one rule (`whole_steps`): the whole batches of batch_size x seq_len in its tokens."""
    config = RunConfig(family="nanochat", size="0.5M", recipe="bf16", tokens=tokens, batch_size=batch_size,
                       seq_len=seq_len, eval_interval=eval_interval, eval_tokens=1000)
    resolved = config.resolved()
    steps = tokens // (batch_size * seq_len)
    assert config.steps == resolved.steps == resolved.whole_steps() == steps
    assert config.trained_tokens == resolved.whole_batch_tokens() == steps * batch_size * seq_len <= tokens
    assert resolved.eval_interval == (eval_interval or max(1, steps // 8))
    windows = 1000 // seq_len  # (eval_tokens in whole windows of seq_len)
    assert resolved.evaluated_tokens() == evaluation_count(steps, resolved.eval_interval) * windows * seq_len
