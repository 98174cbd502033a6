"""A training run's progress, on stderr: stdout is the result's (`scaling train --json | jq`).

On a terminal, Lightning's rich bar counting the run's steps and tokens to their total (its batches come from an
iterable with no length, so Lightning's own bar read '31/--' with no ETA). In a log or a pipe (nohup, a
sweep's train.log) a live bar shows nothing until the run ends: there, a line a minute instead, and a last one
where the run ends.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable

from lightning.pytorch.callbacks import Callback, RichProgressBar
from rich.progress import ProgressColumn, Task
from rich.text import Text

from scaling.console import number, time_left


class StepBar(RichProgressBar):
    """Lightning's rich progress bar on stderr, in the run's words: 'step 89/146 ━━━━╺━━━ 182.3k/299.0k tokens 0:13:53 •
    0:05:32 244 tokens/s train_loss: 5.288 val_loss: 5.336 val_bpb: 1.835' (elapsed • left, then the training rate
    `rate` gives, this process's own, and the run's metrics). Lightning's own read 'Epoch 0/0 ━━━╸━━━ 58/146
    0:10:00 • 0:09:51 0.15it/s ...': a run is one pass (max_epochs=1) over a token budget, so its epoch said nothing,
    nor did 'it' for a step. (Short counts: the bar fits a line of 125 columns, Lightning's 120.)"""

    def __init__(self, tokens_per_step: int = 0, rate: Callable[[], float] | None = None) -> None:
        super().__init__(console_kwargs={"stderr": True})
        self.tokens_per_step, self.rate = tokens_per_step, rate

    def configure_columns(self, trainer) -> list:
        from lightning.pytorch.callbacks.progress.rich_progress import CustomBarColumn, CustomTimeColumn

        theme = self.theme
        return [_StepColumn(theme.description), CustomBarColumn(complete_style=theme.progress_bar,
                                                                finished_style=theme.progress_bar_finished,
                                                                pulse_style=theme.progress_bar_pulse),
                _TokensColumn(self.tokens_per_step, theme.batch_progress), CustomTimeColumn(style=theme.time),
                _RateColumn(self.rate, theme.processing_speed)]

    def _add_task(self, total_batches: int | float, description: str, visible: bool = True):
        # Lightning's, but a resumed run's bar (added as the process's first step ends) starts at the run's step: it
        # was drawn at 'step 0/146', then moved to the step, the earlier steps counted as done in an instant (the time
        # left far too short). rich draws a task as it is added, so it is added there (no column shows a description)
        completed = self.trainer.global_step if self.trainer.training else 0
        return self.progress.add_task(description, total=total_batches, completed=completed, visible=visible)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the bar at the run's step (Lightning's puts it at batch_idx + 1, a count of this epoch's batches)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    def get_metrics(self, trainer, pl_module) -> dict:
        # (Lightning's documented way) its logger's version number ('v_num: 0.000'): the
        # lightning/version_<n> folder of the run's process, nothing a user reads the bar for
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    @property
    def total_train_batches(self) -> int:
        return self.trainer.max_steps  # (one batch a step: train.py's micro-batches are inside a step)


class _StepColumn(ProgressColumn):
    """'step 58/146'."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.style = style

    def render(self, task: Task) -> Text:
        return Text(f"step {int(task.completed)}/{int(task.total or 0)}", style=self.style)


class _TokensColumn(ProgressColumn):
    """'118.8k/299.0k tokens': the steps' tokens, the run's D at the end (nothing where none is given)."""

    def __init__(self, tokens_per_step: int, style: str) -> None:
        super().__init__()
        self.tokens_per_step, self.style = tokens_per_step, style

    def render(self, task: Task) -> Text:
        if not self.tokens_per_step:
            return Text()
        done, total = int(task.completed) * self.tokens_per_step, int(task.total or 0) * self.tokens_per_step
        return Text(f"{token_count(done)}/{token_count(total)} tokens", style=self.style)


class _RateColumn(ProgressColumn):
    """'6,321 tokens/s': `rate`, the process's training rate (nothing while none is known: no step timed yet)."""

    def __init__(self, rate: Callable[[], float] | None, style: str) -> None:
        super().__init__()
        self.rate, self.style = rate, style

    def render(self, task: Task) -> Text:
        return Text(rate_text(self.rate() if self.rate else None), style=self.style)


def token_count(n: int) -> str:
    """'118.8k', '2.097M', '300k', '512': a count of tokens in --tokens' units (k, M, B), to console.number's digits
    (a rounded one shows its trailing zeros: '299.0k' is not 299,000)."""
    for suffix, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            return number(n / scale) + suffix
    return str(n)


def rate_text(tokens_per_s: float | None) -> str:
    """'7,480 tokens/s'; '' while no rate is known (None or NaN: no step timed yet)."""
    return f"{tokens_per_s:,.0f} tokens/s" if tokens_per_s is not None and math.isfinite(tokens_per_s) else ""


LINE_INTERVAL_S = 60.0  # seconds between two progress lines in a log


class StepLines(Callback):
    """A line on stderr after the first step (the model built and compiled) and then every `every_s`
    seconds: step, share done, the bar's metrics (train_loss, val_loss, val_bpb), the training rate
    (`rate`, tokens/s: this process's own, as `RunDirectory.process_tokens_per_s` counts it, so a resumed run shows
    none until a step of its own is timed, not the stopped process's) and the time left at the pace since
    that first step (the first step's own time is mostly start-up and compilation). And a last line where
    the run ends, saying how (`ending`): a run shorter than `every_s` stopped at 'step 1 of N' in its log."""

    def __init__(self, every_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 rate: Callable[[], float] | None = None) -> None:
        self.every_s = LINE_INTERVAL_S if every_s is None else every_s
        self.clock, self.rate = clock, rate
        self.origin: tuple[int, float] | None = None  # (step, time) at this process's first step's end
        self.last_line = 0.0
        self.last_step: int | None = None  # the step of the last line printed

    def on_train_start(self, trainer, pl_module) -> None:
        self.origin, self.last_step = None, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now, step = self.clock(), trainer.global_step
        if self.origin is None:
            self.origin = (step, now)
        elif now - self.last_line < self.every_s:
            return
        self.last_line = now
        self._print(trainer, progress_line(step, trainer.max_steps, *self.origin, now, trainer.progress_bar_metrics,
                                           self.rate() if self.rate else None))

    def on_train_end(self, trainer, pl_module) -> None:
        said = ending(trainer.global_step, trainer.max_steps, getattr(pl_module, "diverged_at_step", None))
        if said == "completed" and self.last_step == trainer.global_step:
            return  # (the line of the last step, 100%, says it)
        self._closing_line(trainer, said)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.origin is not None:  # (a process that trained no step: the error says where it stopped)
            self._closing_line(trainer, "stopped")

    def _closing_line(self, trainer, said: str) -> None:
        origin = self.origin or (trainer.global_step, self.clock())  # (a run resumed at its last step trains none)
        self._print(trainer, progress_line(trainer.global_step, trainer.max_steps, *origin, self.clock(),
                                           trainer.progress_bar_metrics, self.rate() if self.rate else None, said))

    def _print(self, trainer, line: str) -> None:
        self.last_step = trainer.global_step
        print(line, file=sys.stderr, flush=True)


def ending(step: int, total: int, diverged_at_step: int | None) -> str:
    """How a run that left its training loop ended, in its result's words: 'completed' (all its steps),
    'diverged at step 8' (`LanguageModel.diverged_at_step`, 1-based), else 'stopped'."""
    if diverged_at_step is not None:
        return f"diverged at step {diverged_at_step}"
    return "completed" if step >= total else "stopped"


def progress_line(step: int, total: int, origin_step: int, origin_s: float, now_s: float, metrics: dict,
                  tokens_per_s: float | None = None, ended: str | None = None) -> str:
    """'step 120 of 915 (13%): train_loss 5.2310, val_loss 5.4020, val_bpb 1.8590; 7,480 tokens/s; 2m10s left', at the
    pace since origin (this process's first step: a resumed run's earlier steps came in another's time); no
    time left at the origin itself, and no rate while none is known (None or NaN: no step timed yet). A run's
    last line says how it `ended` ('completed', `ending`) in place of the time left."""
    left = f"; {ended}" if ended else time_left(step - origin_step, total - step, now_s - origin_s)
    shown = ", ".join(f"{k} {float(v):.4f}" for k, v in metrics.items())
    rate = f"; {rate_text(tokens_per_s)}" if rate_text(tokens_per_s) else ""
    return f"step {step} of {total} ({step / max(total, 1):.0%})" + (f": {shown}" if shown else "") + rate + left


def progress_callbacks(progress: bool, rate: Callable[[], float] | None = None,
                       tokens_per_step: int = 0) -> list[Callback]:
    """The callback showing a run's progress where it is wanted: the bar on a terminal (with the steps' tokens), else
    the lines; both with `rate`'s tokens/s."""
    if not progress:
        return []
    return [StepBar(tokens_per_step, rate)] if sys.stderr.isatty() else [StepLines(rate=rate)]
