"""A training run's progress, on stderr: stdout is the result's (`scaling train --json | jq`).

On a terminal, Lightning's rich bar counting the run's steps and tokens to their total (its batches come from an
iterable with no length, so Lightning's own bar read '31/--' with no ETA). In a log or a pipe (nohup, a
sweep's train.log) a live bar shows nothing until the run ends: there, a line a minute instead, and a last one
where the run ends, each led by the UTC time it was written.
"""

from __future__ import annotations

import math
import sys
import time
from datetime import timedelta
from typing import Callable

from lightning.pytorch.callbacks import Callback, RichProgressBar
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.progress import ProgressColumn, Task
from rich.progress_bar import ProgressBar
from rich.table import Column, Table
from rich.text import Text

from scaling.console import number, share_done, stamped, time_left


class StepBar(RichProgressBar):
    """Lightning's rich progress bar on stderr, in the run's words: 'step 89/146 ━━━━╺━━━ 182.3k/299.0k tokens 0:13:53 •
    0:05:32 244 tokens/s train_loss: 5.288 val_loss: 5.336 val_bpb: 1.835' (elapsed • left, then the training rate
    `rate` gives, this process's own, and the run's metrics). Lightning's own read 'Epoch 0/0 ━━━╸━━━ 58/146
    0:10:00 • 0:09:51 0.15it/s ...': a run is one pass (max_epochs=1) over a token budget, so its epoch said nothing,
    nor did 'it' for a step. The line takes 153 columns; a narrower terminal gets a shorter one (`_Line`), not one
    wrapped over several."""

    def __init__(self, tokens_per_step: int = 0, rate: Callable[[], float] | None = None) -> None:
        super().__init__(console_kwargs={"stderr": True})
        self.tokens_per_step, self.rate = tokens_per_step, rate
        self.metrics: dict = {}  # the line's, taken in the training thread (rich draws in a thread of its own)

    def configure_columns(self, trainer) -> list:
        return [_StepLine(self)]

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if self.progress is None:  # (the bar disabled)
            return
        # Lightning appends its own metrics column to ours, which wraps onto rows of its own on a narrow terminal: the
        # line shows the metrics instead
        self.progress.columns = tuple(c for c in self.progress.columns if isinstance(c, _StepLine))
        # The bar, added here at the run's step: Lightning adds a resumed run's (its epoch began in the stopped
        # process) as the first step ends, at 'step 0/146', then moves it to the step, the earlier steps counted as
        # done in an instant (the time left far too short). A fresh run's, at step 0, Lightning resets as its epoch
        # starts. (A public hook: this bar overrode Lightning's private _add_task, which a release may change.)
        self.train_progress_bar_id = self.progress.add_task("", total=self.total_train_batches,
                                                            completed=trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the bar at the run's step (Lightning's puts it at batch_idx + 1, a count of this epoch's batches)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    def get_metrics(self, trainer, pl_module) -> dict:
        # (Lightning's documented way) its logger's version number ('v_num: 0.000'): the
        # lightning/version_<n> folder of the run's process, nothing a user reads the bar for
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        self.metrics = metrics  # (the line's: Lightning asks for them as each step ends, in the training thread)
        return metrics

    @property
    def total_train_batches(self) -> int:
        return self.trainer.max_steps  # (one batch a step: train.py's micro-batches are inside a step)


class _StepLine(ProgressColumn):
    """The bar's line (`_Line`): its step, bar, tokens, time, rate (the bar's `rate`) and metrics."""

    def __init__(self, bar: StepBar) -> None:
        from lightning.pytorch.callbacks.progress.rich_progress import CustomBarColumn

        super().__init__()
        theme = bar.theme
        self.bar, self.theme = bar, theme
        self.bar_column = CustomBarColumn(complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                                          pulse_style=theme.progress_bar_pulse)

    def render(self, task: Task) -> _Line:
        theme, tokens = self.theme, self.bar.tokens_per_step
        done, total = int(task.completed), int(task.total or 0)
        elapsed, left = clock(task.finished_time if task.finished else task.elapsed), clock(task.time_remaining)
        rate = rate_text(self.bar.rate() if self.bar.rate else None)
        # each part's forms, its fullest first ('' a part not shown), and its style
        parts = {"tokens": ([f"{token_count(done * tokens)}/{token_count(total * tokens)} tokens" if tokens else "", ""],
                            theme.batch_progress),
                 "time": ([f"{elapsed} • {left}", f"{left} left"], theme.time),
                 "rate": ([rate, rate.replace("tokens/s", "tok/s")], theme.processing_speed)}
        for name, value in self.bar.metrics.items():
            value = metric_text(value, theme.metrics_format)
            parts[name] = ([f"{name}: {value}", f"loss: {value}" if name == "train_loss" else ""], theme.metrics)
        # shortened, where the line is too wide, in this order: what the step says already, or a user needs least, first
        others = [name for name in self.bar.metrics if name != "train_loss"]
        order = ["tokens", "time", *reversed(others), "rate", "train_loss"]
        return _Line(Text(f"step {done}/{total}", style=theme.description), self.bar_column.render(task), parts,
                     [name for name in order if name in parts])


class _Line:
    """The bar's line on one row of the terminal's width: its parts each at their fullest form that lets the line fit
    with a bar of BAR_WIDTHS[0] at least, shortened one by one in `order`; the bar takes the rest, up to BAR_WIDTHS[1].
    A line fully shortened that still does not fit is cut at the terminal's edge (under ~60 columns), its step whole."""

    BAR_WIDTHS = (10, 40)

    def __init__(self, step: Text, bar: ProgressBar, parts: dict[str, tuple[list[str], str]], order: list[str]) -> None:
        self.step, self.bar, self.parts, self.order = step, bar, parts, order

    def layout(self, width: int) -> tuple[Text, int]:
        """The text after the bar, cut at the terminal's edge, and the bar's width, for a line of `width` columns."""
        form = dict.fromkeys(self.parts, 0)
        room = width - self.step.cell_len - 2  # (the bar's and the text's after it)

        def rest() -> Text:
            shown = [Text(forms[form[name]], style=style) for name, (forms, style) in self.parts.items()]
            return Text(" ").join(text for text in shown if text.plain)

        for name in self.order:
            if self.BAR_WIDTHS[0] + rest().cell_len <= room:
                break
            form[name] += 1
        after = rest()
        bar_width = max(self.BAR_WIDTHS[0], min(self.BAR_WIDTHS[1], room - after.cell_len))
        after.truncate(max(0, room - bar_width), overflow="ellipsis")
        return after, bar_width

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        after, bar_width = self.layout(options.max_width)
        width = min(options.max_width, self.step.cell_len + 1 + bar_width + 1 + after.cell_len)
        return Measurement(width, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        after, self.bar.width = self.layout(options.max_width)
        row = Table.grid(Column(no_wrap=True), Column(no_wrap=True), Column(no_wrap=True, overflow="crop"),
                         padding=(0, 1))
        row.add_row(self.step, self.bar, after)
        yield row


def clock(seconds: float | None) -> str:
    """'0:13:53', as Lightning's bar shows a time; '-:--:--' while none is known."""
    return "-:--:--" if seconds is None else str(timedelta(seconds=int(seconds)))


def metric_text(value, format_spec: str) -> str:
    """A metric as Lightning's bar shows it: '5.288' (its theme's `metrics_format`, '.3f')."""
    return f"{value:{format_spec}}" if isinstance(value, (int, float)) else str(value)


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
    the run ends, saying how (`ending`): a run shorter than `every_s` stopped at 'step 1 of N' in its log.
    Each line led by the UTC time it was written (`stamped`, from `wall_clock`; the pace's `clock` is monotonic)."""

    def __init__(self, every_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 rate: Callable[[], float] | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        self.every_s = LINE_INTERVAL_S if every_s is None else every_s
        self.clock, self.rate, self.wall_clock = clock, rate, wall_clock
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
        print(stamped(line, self.wall_clock()), file=sys.stderr, flush=True)


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
    return f"step {step} of {total} ({share_done(step, total)})" + (f": {shown}" if shown else "") + rate + left


def progress_callbacks(progress: bool, rate: Callable[[], float] | None = None,
                       tokens_per_step: int = 0) -> list[Callback]:
    """The callback showing a run's progress where it is wanted: the bar on a terminal (with the steps' tokens), else
    the lines; both with `rate`'s tokens/s."""
    if not progress:
        return []
    return [StepBar(tokens_per_step, rate)] if sys.stderr.isatty() else [StepLines(rate=rate)]
