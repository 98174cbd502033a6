"""Signals recorded instead of acted on, for a run that must stop cleanly on SLURM's word.

SLURM's warning (SIGUSR1) or its preemption's SIGTERM may come at any moment of a job, also in the
seconds `scaling train` spends importing torch and Lightning, where a signal's default action would
kill the process without a word. The CLI calls `record_early` before those imports; `recorded` (what
`scaling.train.train` builds the run under) takes over what arrived meanwhile. Torch-free.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The exit status of a run stopped by SIGUSR1/SIGTERM after saving its checkpoint (sysexits.h EX_TEMPFAIL: run
# again to resume): here, torch-free, so a launcher can read a worker's exit without importing the trainer
PREEMPTED_EXIT_CODE = 75
_early: list[int] = []  # signals recorded since `record_early`, not yet taken by `recorded`
_before_early: dict = {}  # the handlers `record_early` replaced


def install_handlers(signals: tuple[signal.Signals, ...], handler: Callable) -> dict:
    """`handler` for each of `signals`; returns the handlers it replaced (for `restore_handlers`)."""
    previous = {}
    for sig in signals:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: the caller handles signals
            pass
    return previous


def restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM (`kill`, `timeout`, a job's end) raises KeyboardInterrupt inside the block, as Ctrl-C does, so
    the work's cleanup runs (its default action ended the process on the spot); in the main thread only,
    elsewhere a no-op. The previous handler is restored after."""
    previous = install_handlers((signal.SIGTERM,), _interrupt)
    try:
        yield
    finally:
        restore_handlers(previous)


def record_early(signals: tuple[signal.Signals, ...]) -> None:
    """Record `signals` from now until a `recorded` block starts (which sees them as its own)."""
    for sig, handler in install_handlers(signals, lambda signum, frame: _early.append(signum)).items():
        _before_early.setdefault(sig, handler)


@contextmanager
def recorded(signals: tuple[signal.Signals, ...]) -> Iterator[list[int]]:
    """Record which of `signals` arrive (into the list it yields, first those `record_early` kept)
    instead of their default action; on leaving, the handlers from before either are back."""
    got: list[int] = []
    previous = install_handlers(signals, lambda signum, frame: got.append(signum))
    got[:0] = _early  # (installed first, taken after: a signal in between is in one list or the other)
    _early.clear()
    previous = {sig: _before_early.pop(sig, handler) for sig, handler in previous.items()}
    try:
        yield got
    finally:
        restore_handlers(previous)
