"""A training run's progress, on stderr: stdout is the result's (`scaling train --json | jq`).

On a terminal, Lightning's rich bar counting the run's steps to their total (its batches come from an
iterable with no length, so Lightning's own bar read '31/--' with no ETA). In a log or a pipe (nohup, a
sweep's train.log) a live bar shows nothing until the run ends: there, a line a minute instead.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from lightning.pytorch.callbacks import Callback, RichProgressBar

from scaling.console import duration


class StepBar(RichProgressBar):
    """Lightning's rich progress bar on stderr, out of the run's steps."""

    def __init__(self) -> None:
        super().__init__(console_kwargs={"stderr": True})

    @property
    def total_train_batches(self) -> int:
        return self.trainer.max_steps  # (one batch a step: train.py's micro-batches are inside a step)


class StepLines(Callback):
    """A line on stderr after the first step (the model built and compiled) and then every `every_s`
    seconds: step, share done, the bar's metrics (train_loss, val_loss, val_bpb), and the time left at
    this process's pace."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.started: float | None = None
        self.first_step = 0
        self.last_line: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.started, self.first_step, self.last_line = self.clock(), trainer.global_step, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = self.clock()
        if self.last_line is not None and now - self.last_line < self.every_s:
            return
        self.last_line = now
        print(progress_line(trainer.global_step, trainer.max_steps, self.first_step, now - (self.started or now),
                            trainer.progress_bar_metrics), file=sys.stderr, flush=True)


def progress_line(step: int, total: int, first_step: int, elapsed_s: float, metrics: dict) -> str:
    """'step 120 of 915 (13%): train_loss 5.231, val_loss 5.402; 2m10s left'. The pace is this process's
    (a resumed run's earlier steps came in another's time)."""
    done = step - first_step
    left = (total - step) * elapsed_s / done if done > 0 and elapsed_s > 0 else None
    shown = ", ".join(f"{k} {float(v):.4g}" for k, v in metrics.items())
    return (f"step {step} of {total} ({step / max(total, 1):.0%})" + (f": {shown}" if shown else "")
            + f"; {duration(left)} left")


def progress_callbacks(progress: bool) -> list[Callback]:
    """The callback showing a run's progress where it is wanted: the bar on a terminal, else the lines."""
    if not progress:
        return []
    return [StepBar()] if sys.stderr.isatty() else [StepLines()]
