"""The training hyperparameters that are arithmetic: the batch-size rule and the LR schedules (no torch).

`scaling.config` resolves a run's batch from them and checks its schedule where torch is not installed (a
sweep's plan on a laptop); `scaling.optim` builds the optimizers whose learning rates they scale.

- Batch size: DeepSeek LLM (arXiv 2401.02954, eq. 1) B_opt = 0.292 · C^0.3271 tokens with
  C = 6·N·D, rounded to a power-of-two number of sequences.
- Schedules multiply every group's base lr by a pure function of the step (so a resumed run gets
  the same lr): WSD (warmup–stable–decay; nanochat: no warmup, linear "warmdown" over the last 20%
  to 0; MiniCPM/Hägele et al. 2024) or cosine (warmup, then cosine to ``final``).
"""

from __future__ import annotations

import math

SCHEDULES = ("wsd", "cosine")


def batch_tokens(n_params: int, tokens: int) -> float:
    """DeepSeek LLM's compute-optimal batch size in tokens for C = 6·N·D."""
    return 0.292 * (6.0 * n_params * tokens) ** 0.3271


def batch_sequences(n_params: int, tokens: int, seq_len: int) -> int:
    """`batch_tokens` as a power-of-two number of sequences (at least 1)."""
    return 2 ** max(0, round(math.log2(batch_tokens(n_params, tokens) / seq_len)))


def lr_multiplier(step: int, total_steps: int, schedule: str = "wsd", warmup: float = 0.0,
                  decay: float = 0.2, final: float = 0.0) -> float:
    """The lr multiplier at `step` (0-based) of `total_steps`; warmup/decay are fractions of the run."""
    warmup_steps = round(warmup * total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "wsd":
        decay_steps = round(decay * total_steps)
        left = total_steps - step  # steps left including this one (nanochat's warmdown)
        return 1.0 if left > decay_steps else final + (1.0 - final) * left / decay_steps
    if schedule == "cosine":
        progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
        return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULES}")
