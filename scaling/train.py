"""One training run: config → run directory → result record.

``train(RunConfig(...), run_dir)`` builds the model (``models.build_model``), applies the recipe
(``scaling.linear.convert``), trains with Muon + AdamW (``scaling.optim``) in Lightning, evaluates on
a fixed set of validation windows, checkpoints, resumes, and writes ``result.json`` once at the end.

Run directory (DESIGN.md): ``config.json`` (the resolved config), ``metrics.csv`` (the validation
curve, rewritten atomically at each evaluation), ``result.json`` (written last, atomically; a crash
leaves none), ``checkpoints/last.ckpt`` (atomic), ``lightning/version_<n>/`` (Lightning's CSVLogger,
one per process that worked on the run: per-step training loss and lr).

Determinism: the training batch of step i is a pure function of (seed, i), the lr of step i a pure
function of i, the init a function of the seed, and SR/RHT seeds come from ``set_step``; so a run
killed and resumed from its last checkpoint ends with the same bits as one that never stopped.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import math
import os
import platform
import shutil
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import lightning as L
import numpy as np
import torch

import scaling
from models import build_model
from scaling import hyperparams, kernels, optim, signals
from scaling.compiling import begin_micro_batch, compile_model, zero_grads
from scaling.console import notice
from scaling.config import RunConfig, differences, evaluates_after, evaluation_count
from scaling.errors import UserError
from scaling.files import (CHECKPOINT_RUN_KEY, atomic_path, check_run_layout, checkpoint_of_another_run,
                           checkpoint_path, checkpoint_problem, checkpoint_step, remove_stale_temps, write_atomic,
                           write_json_atomic)
from scaling.progress import StepBar, progress_callbacks
from scaling.recipes import edited_recipe_files, recipe_content
from scaling.run_data import check_run_data, data_identity, moved_corpus, moved_corpus_link, resolve_data_dir

if TYPE_CHECKING:
    from scaling.data import ScoredBytes

PREEMPTED_EXIT_CODE = signals.PREEMPTED_EXIT_CODE  # checkpoint saved, run again to resume
# Dense BF16 tensor-core peak FLOP/s (NVIDIA datasheets: half the "with sparsity" figure), matched against
# the CUDA device name, the longest key first: the PCIe and NVL cards of a name run at lower clocks and
# power ("NVIDIA H100 PCIe" 756e12, "NVIDIA H100 NVL" / "NVIDIA H200 NVL" 835e12) than the SXM ones
# ("NVIDIA H100 80GB HBM3", "NVIDIA H200": 989e12).
PEAK_BF16_FLOPS = {"H100": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H200": 989e12, "H200 NVL": 835e12,
                   "GH200": 989e12, "A100": 312e12, "L40S": 362e12}
METRICS_COLUMNS = ("step", "tokens", "val_loss", "val_bpb", "train_loss", "lr", "tokens_per_s")


class Preempted(Exception):
    """SIGUSR1/SIGTERM (or Ctrl-C) arrived; a checkpoint was saved. `scaling train` exits with
    PREEMPTED_EXIT_CODE (130 after Ctrl-C)."""

    def __init__(self, message: str, signum: int = 0):
        super().__init__(message)
        self.signum = signum


class StepInterrupted(Exception):
    """A stop was asked for between two micro-batches of step `step` (0-based): its gradients are
    dropped, and the run's checkpoint is the state after step - 1, so a resume redoes the whole step
    (the same windows, SR bits and signs: they are functions of the step and micro-batch)."""

    def __init__(self, step: int, micro: int, micros: int):
        super().__init__(f"step {step + 1} stopped after {micro} of its {micros} micro-batches")
        self.step, self.micro, self.micros = step, micro, micros


# ---------------------------------------------------------------------------------------------------
# Data


def train_batch(tokens: np.ndarray, seed: int, step: int, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (inputs, targets) of training step `step`: random windows, a pure function of (seed, step)."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
    windows = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
    w = torch.from_numpy(windows)
    return w[:, :-1], w[:, 1:]


class TrainWindows(torch.utils.data.IterableDataset):
    """Yields (step, inputs, targets) for steps [start, steps)."""

    def __init__(self, tokens: np.ndarray, seed: int, start: int, steps: int, batch_size: int, seq_len: int):
        self.tokens, self.seed, self.start, self.steps = tokens, seed, start, steps
        self.batch_size, self.seq_len = batch_size, seq_len

    def __iter__(self):
        for step in range(self.start, self.steps):
            yield (step, *train_batch(self.tokens, self.seed, step, self.batch_size, self.seq_len))


def val_windows(tokens: np.ndarray, n_tokens: int, seq_len: int) -> torch.Tensor:
    """A fixed validation set: evenly spaced windows of seq_len + 1 tokens, no randomness."""
    n = max(1, min(n_tokens // seq_len, (len(tokens) - 1) // seq_len))
    starts = np.linspace(0, len(tokens) - seq_len - 1, n).astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64))


class TokenDataModule(L.LightningDataModule):
    def __init__(self, config: RunConfig, data_dir: Path):
        super().__init__()
        from scaling.data import load_tokens, max_token_id, read_meta

        self.config, self.data_dir, self.meta = config, data_dir, read_meta(data_dir)
        self.train_tokens = load_tokens(data_dir, "train")
        self.val_tokens = val = load_tokens(data_dir, "val")  # (also what val_bpb's byte count scans)
        if len(self.train_tokens) <= config.seq_len + 1:
            raise UserError(f"{data_dir} holds only {len(self.train_tokens)} training tokens; need more than seq_len={config.seq_len}")
        if len(val) < config.seq_len + 1:  # a shorter window would be scored, not one of seq_len tokens
            raise UserError(f"{data_dir}'s validation split holds only {len(val)} tokens, less than one window of "
                            f"seq_len + 1 = {config.seq_len + 1}; use a shorter --seq-len, or prepare the data again "
                            "with a larger --val-fraction (or more --val text)")
        # An id past the vocabulary was an IndexError deep in the embedding: meta.json and the token files are of
        # two preparations (the largest id is meta.json's record; a scan only where it lacks one or a file is newer)
        top, vocab_size = max_token_id(data_dir, self.meta), int(self.meta["vocab_size"])
        if top >= vocab_size:
            raise UserError(f"{data_dir} holds token id {top:,}, beyond its meta.json's vocab_size {vocab_size:,}: its "
                            f"token files and meta.json do not belong together; prepare it again with `scaling data "
                            f"prepare SOURCES --out {data_dir}`")
        self.val = val_windows(val, config.eval_tokens, config.seq_len)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        # Called after Lightning restored a checkpoint, so global_step is where to continue.
        start = self.trainer.global_step if self.trainer is not None else 0
        c = self.config
        ds = TrainWindows(self.train_tokens, c.seed, start, c.steps, c.batch_size, c.seq_len)
        return torch.utils.data.DataLoader(ds, batch_size=None)

    def val_batches(self) -> list[torch.Tensor]:
        return list(self.val.split(self.config.micro_batch_size))


# ---------------------------------------------------------------------------------------------------
# Model


def forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, step: int, micro_batch_size: int,
                     compile_mode: str | None, backward=torch.Tensor.backward, fault: bool = False,
                     stop: Callable[[], bool] | None = None) -> torch.Tensor:
    """One optimizer step's forward and backward passes: the batch (x, y) in micro-batches of
    micro_batch_size sequences, each drawing its own SR bits and Hadamard signs (set_step(model,
    step, micro)) and weighted by its share of the batch, so the gradients accumulated in the
    parameters are the batch mean's. Returns the batch's mean loss (detached). fault: multiply the
    loss by NaN (the divergence tests' injected fault). stop: a callable asked before each
    micro-batch after the first; when it answers True, raises `StepInterrupted` (a step of many
    micro-batches can outlast SLURM's warning before it kills the job)."""
    from scaling.linear import set_step

    loss = torch.zeros((), device=x.device)
    micros = -(-len(x) // micro_batch_size)
    for micro, (xs, ys) in enumerate(zip(x.split(micro_batch_size), y.split(micro_batch_size))):
        if micro > 0 and stop is not None and stop():
            raise StepInterrupted(step, micro, micros)
        set_step(model, step, micro)
        begin_micro_batch(compile_mode)
        part = model(xs, ys) * (len(xs) / len(x))
        if fault:
            part = part * float("nan")
        backward(part)
        loss += part.detach()
    return loss


class LanguageModel(L.LightningModule):
    """The model under a recipe, trained with Muon + AdamW on a step-indexed lr schedule."""

    def __init__(self, config: RunConfig, vocab_size: int):
        super().__init__()
        from scaling.linear import convert
        from scaling.recipes import check_tokens, get_recipe

        self.config, self.size, self.recipe = config, config.model_size(), get_recipe(config.recipe)
        self.run_id = config.run_id  # (as the run starts: a recipe file's id hashes its content then)
        check_tokens(self.recipe, config.micro_batch_size * config.seq_len)
        self.automatic_optimization = False  # two optimizers (Muon + AdamW)
        torch.manual_seed(config.seed)
        self.model = convert(build_model(config.family, self.size, vocab_size, config.seq_len), self.recipe,
                             seed=config.seed)
        if config.compile:
            compile_model(self.model, config.compile)
        self.steps = config.steps
        self.running_min, self.spike_count, self.diverged = math.inf, 0, False
        self.diverged_at_step: int | None = None  # (1-based, as metrics.csv's steps) the step that tripped the rule
        self.stop_requested = None  # set by train(): a signal asked the run to stop (see forward_backward)
        # set by train(): this process's code, device and versions (`process_record`), which its checkpoints name
        self.process: dict = {"git_commit": None}
        self.data: dict | None = None  # set by train(): the corpus's `data_identity`, which its checkpoints record
        # the records of the earlier processes whose work the checkpoint resumed from holds (`processes`)
        self.earlier_processes: list[dict] = []

    def configure_optimizers(self):
        return list(optim.build_optimizers(self.model, self.size.width, self.config.lr_mult))

    def lr_multiplier(self, step: int) -> float:
        c = self.config
        return hyperparams.lr_multiplier(step, self.steps, c.schedule, c.warmup, c.decay, c.final_lr)

    def training_step(self, batch, batch_idx):
        step, x, y = batch
        muon, adamw = self.optimizers()
        optim.apply_schedule((muon.optimizer, adamw.optimizer), self.lr_multiplier(step))
        zero_grads(self.model, (muon, adamw), self.config.compile)
        fault = self.config.fault_nan_at_step is not None and step >= self.config.fault_nan_at_step
        loss = forward_backward(self.model, x, y, step, self.config.micro_batch_size, self.config.compile,
                                self.manual_backward, fault, self.stop_requested)
        value = loss.item()
        self.log("train_loss", value, prog_bar=True)
        self.log("lr_mult", self.lr_multiplier(step))
        if self._diverging(value):  # before the optimizer step: the weights stay finite
            self.diverged, self.diverged_at_step = True, step + 1
            self.trainer.should_stop = True
            return loss
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        # Lightning counts every LightningOptimizer.step as a global step; step AdamW through the raw
        # optimizer so that global_step counts training steps.
        adamw.optimizer.step()
        muon.step()
        return loss

    def _diverging(self, loss: float) -> bool:
        """Non-finite loss, or `spike_steps` consecutive losses above running min + `spike_nats`."""
        if not math.isfinite(loss):
            return True
        self.running_min = min(self.running_min, loss)
        self.spike_count = self.spike_count + 1 if loss > self.running_min + self.config.spike_nats else 0
        return self.spike_count >= self.config.spike_steps

    @torch.no_grad()
    def evaluate(self, batches: list[torch.Tensor]) -> float:
        """Mean next-token loss (nats) over the fixed validation windows."""
        was_training = self.model.training
        self.model.eval()
        total, count = torch.zeros((), device=self.device, dtype=torch.float64), 0
        for w in batches:
            w = w.to(self.device)
            begin_micro_batch(self.config.compile)
            with self.trainer.precision_plugin.forward_context():
                loss = self.model(w[:, :-1], w[:, 1:])
            total += loss.double() * w[:, 1:].numel()
            count += w[:, 1:].numel()
        self.model.train(was_training)
        return float(total / count)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["divergence"] = (self.running_min, self.spike_count)
        # the run the checkpoint is of, so that a folder whose config.json is lost is not resumed as another run
        # (`check_run_dir`); one JSON text, which `checkpoint_run` reads without loading the tensors
        # and the corpus it trained on, which a resume checks the data against where data.json was lost.
        # (git_commit and git_commits follow from processes: kept for older code resuming this checkpoint)
        checkpoint[CHECKPOINT_RUN_KEY] = json.dumps({"run_id": self.run_id, "config": self.config.to_dict(),
                                                     "git_commit": self.process["git_commit"],
                                                     "git_commits": self.git_commits, "processes": self.processes,
                                                     "data": self.data})

    @property
    def processes(self) -> list[dict]:
        """The records (`process_record`) of the processes that trained the run up to now, in order, this one's
        last (consecutive processes with the same record once): a run resumed under other code, on another
        kind of device or under other versions says so."""
        earlier = self.earlier_processes
        return earlier + [self.process] if earlier[-1:] != [self.process] else list(earlier)

    @property
    def git_commits(self) -> list[str | None]:
        return commits_of(self.processes)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # (called before Lightning loads the weights: a checkpoint the code's model has changed from since was
        # a traceback of load_state_dict's)
        run = json.loads(checkpoint[CHECKPOINT_RUN_KEY]) if CHECKPOINT_RUN_KEY in checkpoint else {}
        written = run.get("git_commit")
        # (a checkpoint of code before it kept processes knows their commits (git_commits), or its writer's commit
        # at most: null where not even it)
        self.earlier_processes = run.get("processes") or [{"git_commit": c} for c in run.get("git_commits") or [written]]
        misfit = state_misfit(self.state_dict(), checkpoint["state_dict"])
        if misfit:
            path = Path(self.trainer.ckpt_path)
            code = f"the code that wrote it (commit {written})" if written else "the code that wrote it"
            raise UserError(f"the checkpoint {path} does not fit this code's model ({misfit}): resume the run with "
                            f"{code}, or move the checkpoint away (mv {path} {path}.old) to train the run from the start")
        self.running_min, self.spike_count = checkpoint["divergence"]
        # (in place of Lightning's two lines for it, LIGHTNING_NOISE, which said neither the step nor of how many)
        notice(f"resuming from the checkpoint {self.trainer.ckpt_path} at step {checkpoint['global_step']} of {self.steps}")


def commits_of(processes: list[dict]) -> list[str | None]:
    """The commits of a run's processes (`LanguageModel.processes`), in order, a commit repeated by consecutive
    processes once: a run trained under two versions of the code says so."""
    commits = [p.get("git_commit") for p in processes]
    return [c for i, c in enumerate(commits) if i == 0 or c != commits[i - 1]]


def state_misfit(model: dict, saved: dict) -> str | None:
    """How a checkpoint's weights (`saved`) do not fit the model's state dict (`model`): the names one has and
    the other lacks, and shapes that differ (a few of each); None where they fit."""
    def few(names: list[str]) -> str:
        return ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")

    shape = lambda v: tuple(getattr(v, "shape", ()))  # noqa: E731
    lacks, extra = [k for k in model if k not in saved], [k for k in saved if k not in model]
    shapes = [f"{k} {shape(saved[k])} there, {shape(v)} here" for k, v in model.items()
              if k in saved and shape(saved[k]) != shape(v)]
    said = ([f"it lacks {few(lacks)}"] if lacks else []) + ([f"it holds {few(extra)}, which the model has not"]
                                                             if extra else []) + shapes[:2]
    return "; ".join(said) or None


def build(config: RunConfig) -> tuple[LanguageModel, TokenDataModule]:
    """The LightningModule and DataModule of a run (also used by `scaling bench train`)."""
    config = config.resolved()
    data_dir = resolve_data_dir(config)
    datamodule = TokenDataModule(config, data_dir)
    vocab_size = int(datamodule.meta["vocab_size"])
    return LanguageModel(config, vocab_size), datamodule


# ---------------------------------------------------------------------------------------------------
# Run directory: evaluation, metrics.csv, checkpoints, preemption




class RunDirectory(L.Callback):
    """Evaluates every `eval_interval` steps and at the end, writes metrics.csv, checkpoints every
    `checkpoint_interval` steps, and on SIGUSR1/SIGTERM/SIGINT saves a checkpoint and raises `Preempted`
    (at the end of the step, or at the next micro-batch boundary of a step of several)."""

    def __init__(self, run_dir: Path, config: RunConfig, scored: ScoredBytes, started: float | None = None):
        # scored: the bytes of text the validation windows' targets spell, val_bpb's denominator
        self.run_dir, self.config, self.scored = run_dir, config, scored
        # wall time: this process's since `started` (perf_counter), plus the earlier processes' up to
        # the checkpoint this one resumed from (their work after it is redone, so counted here)
        self.started = time.perf_counter() if started is None else started
        self.wall_before = 0.0
        self.rows: list[dict] = []
        # how the last row's val_bpb counted its bytes (`ScoredBytes.counted`): a row of a checkpoint written by code
        # before they were counted divided by the split average. (Kept beside the rows, not in them: older code
        # writing metrics.csv from a newer checkpoint's rows refused a key it did not know.)
        self.bpb_bytes: str | None = None
        self.step_time, self.step_tokens, self.train_losses = 0.0, 0, []
        # this process's own timed steps (not saved: a resumed run's progress shows its own rate, not the stopped
        # process's carried in `step_time`, which result.json's tokens_per_s counts over the whole run)
        self.process_step_time, self.process_step_tokens = 0.0, 0
        self.preempt_signal: int | None = None

    @property
    def checkpoint_path(self) -> Path:
        return checkpoint_path(self.run_dir)

    # tokens/s counts training steps only (not evaluation or checkpointing, nor each process's first
    # step), over the run: a resumed run carries its earlier processes' timed steps up to its checkpoint.
    def on_train_start(self, trainer, module):
        self.first_step = True  # the first step of a process pays for warm-up (and compilation)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        step = int(batch[0]) + 1  # optimizer steps done
        if not self.first_step:
            seconds, tokens = time.perf_counter() - self._t0, batch[1].numel()
            self.step_time += seconds
            self.step_tokens += tokens
            self.process_step_time += seconds
            self.process_step_tokens += tokens
        else:
            note = first_step_note(time.perf_counter() - self._t0, module.device.type == "cuda",
                                   module.recipe.is_quantized)
            if note:
                notice(note)
        self.first_step = False
        self.train_losses.append(float(outputs["loss"]))
        if module.diverged:
            return
        c = self.config
        if evaluates_after(step, c.steps, c.eval_interval):
            self.evaluate(trainer, module, step)
        if self.preempt_signal is not None or step % c.checkpoint_interval == 0:
            self.save(trainer)
        if self.preempt_signal is not None:
            raise Preempted(f"received {signal.Signals(self.preempt_signal).name}; checkpoint saved at step {step}",
                            self.preempt_signal)

    def on_exception(self, trainer, module, exception: BaseException) -> None:
        # a signal stopped a step between its micro-batches: the weights and optimizer are still
        # those after the step before (the checkpoint a resume redoes the step from)
        if isinstance(exception, StepInterrupted):
            # Lightning counts a step for its logger on a restart from a checkpoint saved neither at a
            # step's end nor after the last: take it back, or the resumed log's steps run one ahead.
            # (A private counter of Lightning 2.x: where a later Lightning lacks it, only its own CSV
            # log's step numbers are off by one after the resume; metrics.csv and result.json are ours.)
            loop = trainer.fit_loop.epoch_loop
            if isinstance(getattr(loop, "_batches_that_stepped", None), int):
                loop._batches_that_stepped -= 1
            self.save(trainer)

    def stop_requested(self) -> bool:
        return self.preempt_signal is not None

    def evaluate(self, trainer, module: LanguageModel, step: int) -> dict:
        from scaling.data import bits_per_byte

        loss = module.evaluate(trainer.datamodule.val_batches())
        row = {"step": step, "tokens": step * self.config.batch_size * self.config.seq_len, "val_loss": loss,
               "val_bpb": bits_per_byte(loss, self.scored.tokens, self.scored.bytes),
               "train_loss": float(np.mean(self.train_losses)) if self.train_losses else math.nan,
               "lr": module.lr_multiplier(step - 1), "tokens_per_s": self.tokens_per_s}
        self.train_losses = []
        self.rows = [r for r in self.rows if r["step"] < step] + [row]
        self.bpb_bytes = self.scored.counted
        module.log_dict({"val_loss": loss, "val_bpb": row["val_bpb"]}, prog_bar=True)
        self.write_metrics()
        return row

    @property
    def tokens_per_s(self) -> float:
        return self.step_tokens / self.step_time if self.step_time > 0 else math.nan

    @property
    def process_tokens_per_s(self) -> float:
        """This process's training rate (its timed steps'; NaN before one): the progress shows it, so that a resumed
        run's first lines are not the stopped process's rate, carried in its checkpoint."""
        return self.process_step_tokens / self.process_step_time if self.process_step_time > 0 else math.nan

    def write_metrics(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=METRICS_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomic(self.run_dir / "metrics.csv", buf.getvalue())

    def save(self, trainer) -> None:
        with atomic_path(self.checkpoint_path) as tmp:
            trainer.save_checkpoint(tmp, weights_only=False)  # optimizer and loop state: a resume needs them

    @property
    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.started

    def state_dict(self) -> dict:
        # train_losses: the steps since the last evaluation, so a resumed run's next metrics row
        # averages the same steps as an uninterrupted run's
        return {"rows": self.rows, "wall_s": self.wall_s, "train_losses": list(self.train_losses),
                "step_time": self.step_time, "step_tokens": self.step_tokens, "bpb_bytes": self.bpb_bytes}

    def load_state_dict(self, state: dict) -> None:
        self.rows = state["rows"]  # rows written after the checkpoint by a killed process are dropped
        self.bpb_bytes = state.get("bpb_bytes", "split average" if self.rows else None)
        self.wall_before = state.get("wall_s", 0.0)
        # (a run resumed at its last step times no step of its own: its rate is the earlier processes')
        self.step_time, self.step_tokens = state.get("step_time", 0.0), state.get("step_tokens", 0)
        self.train_losses = list(state.get("train_losses", []))
        self.write_metrics()

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.preempt_signal == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: stop now (the last periodic checkpoint stays)
        self.preempt_signal = signum

    def install_signal_handlers(self) -> dict:
        """SLURM sends SIGUSR1 (with --signal=USR1@T) or SIGTERM before it preempts or times out a job;
        a user, Ctrl-C (SIGINT). Each ends the run with a checkpoint at the end of its step, or at the
        step's next micro-batch where it has several (`forward_backward`'s stop)."""
        return signals.install_handlers((signal.SIGUSR1, signal.SIGTERM, signal.SIGINT), self._on_signal)


# ---------------------------------------------------------------------------------------------------
# The run


def peak_flops(device: torch.device) -> float | None:
    """Dense BF16 peak FLOP/s of a CUDA device from PEAK_BF16_FLOPS; None elsewhere or if unknown."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_BF16_FLOPS[key]
    return None


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model (`scaling.cpu_name`)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else scaling.cpu_name()


def process_record(git_commit: str | None, device: torch.device) -> dict:
    """What a process that trains a run records of itself: its code's commit, its device and its versions. A
    run's processes may differ in each (a resume after a pull, a requeue onto another node), and each changes
    the run's bits or speed."""
    return {"git_commit": git_commit, "device": device_name(device), "versions": versions()}


def versions() -> dict:
    import lightning

    from scaling import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__,
            "numpy": np.__version__, "fp4-scaling": __version__}




def _precision(config: RunConfig) -> str:
    """Lightning's precision for the run: auto is bf16-mixed on a GPU and 32-true on a CPU, where the
    fused CPU kernels (head + loss, RoPE, ReLU²) take float32 only."""
    if config.precision == "auto":
        return "bf16-mixed" if torch.cuda.is_available() else "32-true"
    if not torch.cuda.is_available() and config.precision not in ("32-true", "32", "64-true", "64"):
        raise UserError(f"precision {config.precision} needs a GPU; on a CPU runs train in float32 "
                        "(--precision auto or 32-true)")
    return config.precision


def check_run_dir(config: RunConfig, run_dir: Path) -> None:
    """UserError unless run_dir is new or holds this same run: its config.json, its recipe file's content
    as the run started (the run's id hashes the file as it is now, on both sides), and the run its
    checkpoint is of (`checkpoint_of_another_run`), which a folder whose config.json is lost still says."""
    if (run_dir / "config.json").exists():
        _check_config_json(config, run_dir)
    other = checkpoint_of_another_run(run_dir, config.run_id)
    if other is not None:
        try:
            said = differences(RunConfig.from_dict(other["config"]), config)
        except (UserError, TypeError):  # (a config of another version of RunConfig: its id alone is said)
            said = ""
        raise UserError(f"{run_dir} holds the checkpoint of another run ({other['run_id']}, not {config.run_id}"
                        + (f": {said}" if said else "") + "); choose another --out directory, or give that run's "
                        "settings to resume it")


def _check_config_json(config: RunConfig, run_dir: Path) -> None:
    """`check_run_dir`'s check of the folder's config.json (and its recipe.toml)."""
    existing = RunConfig.from_json(run_dir / "config.json")
    kept = run_dir / "recipe.toml"
    moved = existing.recipe.endswith(".toml") and not Path(existing.recipe).is_file() and kept.is_file()
    if moved and config.recipe == existing.recipe:  # (the same path as the run's: its id would hash the path)
        raise UserError(f"the recipe file {config.recipe} this run started with no longer exists; {kept} is its copy: "
                        f"pass --recipe {kept} (with --config too) to go on with the same run, or restore the file")
    if moved:
        existing = dataclasses.replace(existing, recipe=str(kept))  # the file moved: its id is its content's
    if existing.run_id != config.run_id:
        started = checkpoint_path(run_dir).exists() or (run_dir / "result.json").exists()
        if started and moved_corpus(existing, config, run_dir):
            raise UserError(f"{run_dir} holds this run trained on the data {existing.data}; {config.data} holds the same "
                            "corpus (its tokenizer and token files), moved there, but a run's id includes its data's "
                            f"path: go on with the run by giving --data {existing.data}{moved_corpus_link(existing, config)}, "
                            "or train it anew in another --out directory")
        raise UserError(f"{run_dir} holds a different run ({existing.run_id}, not {config.run_id}: "
                        f"{differences(existing, config)}); "
                        + ("choose another --out directory" if started else
                           f"it stopped before its first checkpoint, so nothing of it is kept: remove {run_dir} "
                           "or choose another --out directory"))
    if kept.exists() and Path(config.recipe).is_file() and kept.read_bytes() != recipe_content(config.recipe):
        edited = edited_recipe_files(config.recipe, kept.read_bytes())
        raise UserError(f"{edited} has changed since the run in {run_dir} started (its recipe then is {kept}); restore "
                        "the file, or train the new recipe in another --out directory")


def prepare_run_dir(config: RunConfig, run_dir: Path) -> None:
    """Create run_dir with config.json (and a copy of a recipe file) unless it has them; `train` has
    checked by then that it holds this run (`check_run_dir`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / "config.json").exists():
        return
    if config.recipe.endswith(".toml"):  # what was run, should the file (or a file it is built on) change or move later
        write_atomic(run_dir / "recipe.toml", recipe_content(config.recipe))
    write_atomic(run_dir / "config.json", config.resolved().to_json())


def repeated_data_note(tokens: int, train_tokens: int) -> str | None:
    """What to tell a user whose run would see the training split more than once, else None."""
    if not train_tokens or tokens <= train_tokens:
        return None
    return (f"note: this run trains on {tokens:,} tokens but the training split holds {train_tokens:,}: it sees the "
            f"data {tokens / train_tokens:.1f} times, so its validation loss also measures memorization (a larger "
            "model can end worse after more tokens). For scaling-law fits use a corpus at least as large as the "
            "largest budget (`scaling data prepare`, docs/data.md).")


def rounded_tokens_note(asked: int, trained: int, step_tokens: int) -> str | None:
    """What to tell a user whose token budget loses more than 1% to whole steps (a run trains whole batches; the
    result records the tokens trained as D), else None: at a study's batch sizes the loss is a fraction of a
    percent and goes unsaid; a tiny run's can be 10%."""
    if asked - trained <= 0.01 * asked:
        return None
    return (f"note: this run trains {trained:,} of the {asked:,} tokens asked for ({1 - trained / asked:.0%} fewer): "
            f"whole steps of {step_tokens:,} tokens (batch_size x seq_len); its result records {trained:,} as D. Ask "
            f"for a multiple of {step_tokens:,} to train them all.")


def evaluation_share_note(trained: int, steps: int, eval_interval: int, eval_tokens: int) -> str | None:
    """What to tell a user whose evaluations read at least three times the tokens the run trains on (a forward pass
    costs about a third of a training step's, so validation takes as long as training or longer), else None: a
    smoke run of a few thousand tokens evaluated 65,536 tokens ~8 times and spent most of its time there."""
    evaluations = evaluation_count(steps, eval_interval)
    evaluated = evaluations * eval_tokens
    if evaluated < 3 * trained:
        return None
    from scaling.console import count

    return (f"note: this run evaluates {count(evaluations, 'time')} on {eval_tokens:,} validation tokens, {evaluated:,} in all "
            f"against the {trained:,} it trains on: validation takes most of its time. A smaller --eval-tokens or a "
            "larger --eval-interval (a sweep's [train] eval_tokens, eval_interval) cuts it; the fits read the last "
            "evaluation, and every run of a study should use the same validation set.")


def cpu_compile_note(compile_mode: bool | str | None, on_gpu: bool) -> str | None:
    """What to tell a user who asked for torch.compile on a CPU, else None: there tracing costs minutes
    before the first step, for a gain never measured (docs/training.md, "Cost on a CPU")."""
    if not compile_mode or on_gpu:
        return None
    return ("note: --compile on a CPU: dynamo and inductor trace the model for minutes before the first step (over "
            "12 for nvfp4's 1M model, docs/training.md 'Cost on a CPU'), and the compiled step's speed on a CPU "
            "was never measured; leave it off for CPU runs")


def first_step_note(seconds: float, on_gpu: bool, quantized: bool) -> str | None:
    """What to tell a user whose first step took long (over 30 s), else None: on a GPU the step compiles
    the model and, under a quantized recipe, compiles and tunes the quantizer kernels for each of the
    model's widths (docs/kernels.md), which Triton's cache keeps for the next run."""
    if seconds < 30 or not on_gpu:
        return None
    what = "compilation and the quantizer kernels' tuning for these widths" if quantized else "compilation"
    return (f"note: the first step took {seconds:.0f} s ({what}); Triton's cache (TRITON_CACHE_DIR, default "
            "~/.triton/cache) keeps it, so the next run at these widths starts in seconds. Steps after the first "
            "count towards tokens/s.")


# INFO lines of Lightning's rank-zero logger that say nothing the run's own output does not: its "💡 Tip"
# adverts, which accelerators exist (the result's `processes` name the device), and why fit stopped (the
# step count and the result table say it; a diverged run's read "`max_epochs=1` reached", which it was not), and
# its two lines for a resume (the run's own line says it, and at which step: `LanguageModel.on_load_checkpoint`)
LIGHTNING_NOISE = ("💡 Tip", "GPU available:", "TPU available:", "HPU available:", "`Trainer.fit` stopped:",
                   "[rank: 0] Received SIGTERM:",  # (the run's own line says it, and what was saved)
                   "Restoring states from the checkpoint path at ", "Restored all states from the checkpoint at ")
# the loggers those lines come from: rank_zero's, and the signal connector's for SIGTERM
LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.trainer.connectors.signal_connector")


def _not_noise(record) -> bool:
    return not str(record.msg).startswith(LIGHTNING_NOISE)


def _quiet_lightning() -> None:
    import logging

    for name in LIGHTNING_LOGGERS:
        log = logging.getLogger(name)
        if _not_noise not in log.filters:
            log.addFilter(_not_noise)


class DirectCheckpointIO(L.pytorch.plugins.TorchCheckpointIO):
    """torch.save straight to the path given. RunDirectory.save already writes through a temp file
    beside the checkpoint and renames it (atomic_path); Lightning's own atomic save would first hold
    the whole checkpoint in memory and then stage it in the system temp folder (/tmp: often small on
    cluster nodes, where a full disk then names a file the user never chose)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        try:
            torch.save(checkpoint, path)
        except RuntimeError as e:
            # torch's zip writer reports a failed write as a RuntimeError with no errno: a full disk
            # is said as one (the CLI's one-line message) where the folder has next to no room left
            if shutil.disk_usage(Path(path).parent).free < FULL_DISK_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from e
            raise


FULL_DISK_BYTES = 16 << 20  # less free space than this after a failed checkpoint write: the disk is full


def train(config: RunConfig, run_dir: str | Path, progress: bool = True) -> dict:
    """Train one run in `run_dir` (resuming from its checkpoint) and return the result record.

    Returns the existing record if result.json exists. Raises `Preempted` after saving a checkpoint
    when SIGUSR1/SIGTERM arrives; any other exception leaves no result.json. Its callers (`scaling
    train`, a sweep's job) hold the run's lock: the temp files of a killed process's writes are removed."""
    run_dir = Path(run_dir)
    result_path = run_dir / "result.json"
    config = config.resolved()
    check_run_layout(run_dir)  # before anything reads run_dir's files, and `start_over` discards any
    finished = finished_record(config, run_dir)
    if finished is not None:
        return finished
    precision = _precision(config)  # a precision this machine cannot run: before anything is made
    # (before the build's seconds, in which `sweep status` would read the stopped process's rows as this one's)
    over = None
    if checkpoint_path(run_dir).exists():
        back_to_checkpoint(run_dir)
    else:
        over = start_over(run_dir, config.steps)
    wall_start = time.perf_counter()
    # the code this process imports now is what trains: a commit or pull into the checkout during the run
    # must not relabel it (read at the end, it did)
    commit = scaling.git_commit()
    # SLURM's warning (or its preemption's SIGTERM) may come while the run is being built: recorded, and
    # the run stops before its first step (the signal's default action would kill the process unsaid)
    with signals.recorded((signal.SIGUSR1, signal.SIGTERM)) as early:
        # user errors (unknown recipe, missing data, ...) come from here: a run dir is made only for a run that starts
        module, datamodule = build(config)
        prepare_run_dir(config, run_dir)
        # a process killed while writing a checkpoint (SIGKILL after SLURM's grace period) left its temp
        # file, as large as a checkpoint, beside it; this process holds the run's lock, so none is being written
        last = checkpoint_path(run_dir)
        for name in (last, run_dir / "metrics.csv", result_path):
            remove_stale_temps(name)
        ckpt = last if last.exists() else None
        if ckpt is not None:
            check_checkpoint(ckpt)
        meta = datamodule.meta
        check_run_data(run_dir, meta, config.data, ckpt)
        from scaling.data import scored_bytes

        # val.bin as the data module opened it, and the windows' targets
        scored = scored_bytes(datamodule.data_dir, meta, datamodule.val_tokens, datamodule.val[:, 1:].numpy())
        resolved = config.resolved()  # (its batch shape and evaluation interval, as the run trains them)
        evaluation = evaluation_share_note(config.trained_tokens, resolved.steps, resolved.eval_interval,
                                           datamodule.val[:, 1:].numel())
        for note in (rounded_tokens_note(config.tokens, config.trained_tokens, resolved.batch_size * resolved.seq_len),
                     evaluation,
                     repeated_data_note(config.trained_tokens, meta.get("train_tokens", 0)), scored.note,
                     cpu_compile_note(config.compile, torch.cuda.is_available()),
                     *kernels.reference_notes(module.recipe, "cuda" if torch.cuda.is_available() else "cpu")):
            if note:
                notice(note)
        if over:  # (where a resume's line comes: `LanguageModel.on_load_checkpoint`)
            notice(over)
        run = RunDirectory(run_dir, config, scored, started=wall_start)
        from lightning.fabric.plugins.environments import LightningEnvironment
        from lightning.pytorch.loggers import CSVLogger

        # Lightning's hint to use `srun` is wrong here (one process per run, by design); its advert for a
        # cloud logger and its own use of a pytree API torch deprecates are nothing a user can act on.
        warnings.filterwarnings("ignore", message="The `srun` command is available")
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
        _quiet_lightning()

        # (this process's training rate: a resumed run's earlier processes' is in result.json's, not in its progress)
        shown = progress_callbacks(progress, rate=lambda: run.process_tokens_per_s,
                                   tokens_per_step=config.batch_size * config.seq_len)
        trainer = L.Trainer(
            max_steps=config.steps, max_epochs=1, precision=precision, devices=1,
            logger=CSVLogger(run_dir, name="lightning"), callbacks=[run, *shown],  # version_<n>: one per process
            # LightningEnvironment: no Lightning SLURM auto-requeue (we handle preemption)
            plugins=[LightningEnvironment(), DirectCheckpointIO()],
            enable_checkpointing=False, limit_val_batches=0, num_sanity_val_steps=0,
            log_every_n_steps=max(1, min(50, config.steps // 50)),
            enable_progress_bar=any(isinstance(c, StepBar) for c in shown),
            enable_model_summary=False, deterministic=False,
        )
    if early:
        raise Preempted(f"received {signal.Signals(early[0]).name} while the run was being built, before its "
                        "first step; nothing was trained (its last checkpoint, if any, stays)", early[0])
    previous = run.install_signal_handlers()
    module.stop_requested, module.data = run.stop_requested, data_identity(meta)
    module.process = process_record(commit, trainer.strategy.root_device)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    except StepInterrupted as e:
        raise Preempted(f"received {signal.Signals(run.preempt_signal).name}; {e}, which a resume redoes; "
                        f"checkpoint saved at step {e.step}", run.preempt_signal) from None
    except torch.OutOfMemoryError:
        raise UserError(out_of_memory_message(config, trainer.strategy.root_device)) from None
    except SystemExit:  # Lightning's answer to a KeyboardInterrupt: our Ctrl-C twice (`_on_signal`)
        if run.preempt_signal == signal.SIGINT:
            raise Preempted("received SIGINT twice; stopped at once, the last periodic checkpoint stays",
                            signal.SIGINT) from None
        raise
    finally:
        signals.restore_handlers(previous)
    status = "diverged" if module.diverged else "completed"
    final = ({**run.rows[-1], "bpb_bytes": run.bpb_bytes} if status == "completed" else
             {"val_loss": math.nan, "val_bpb": math.nan, "bpb_bytes": None})
    result = result_record(config, module.recipe.name, status, final, run.tokens_per_s, trainer.strategy.root_device,
                           int(meta["train_tokens"]), int(meta["vocab_size"]), run.wall_s, module.diverged_at_step,
                           processes=module.processes)
    write_json_atomic(result_path, result, indent=2)
    return result


def start_over(run_dir: Path, steps: int) -> str | None:
    """Before a run trains from step 0 (no checkpoint), remove the metrics.csv a stopped process of it left (killed
    before its first checkpoint, or its checkpoint moved away), and return the line that says so, as a resume says
    where it goes on from; None where run_dir holds nothing of the run (a new one). Those rows stayed until this
    process's first evaluation rewrote the file, and `sweep status` read them as its progress and val_loss (or, where
    it diverged before that evaluation, as its curve). The removal is atomic: a reader finds the whole file or none.
    The caller holds the run's lock and has checked that run_dir holds this run (`finished_record`)."""
    metrics = run_dir / "metrics.csv"
    if not (run_dir / "config.json").exists() and not metrics.exists():
        return None
    said = (f"starting over from step 0 of {steps}: {run_dir} holds this run but no checkpoint of it (a process stopped "
            "before its first one, or it was moved away)")
    if metrics.exists():
        read = _step_rows(metrics)
        rows = read[1] if read else []
        if rows:
            last = "?" if rows[-1][1] is None else f"{rows[-1][1]:.0f}"
            said += f"; its metrics.csv's evaluations, {len(rows)} up to step {last}, are discarded"
        else:
            said += "; its metrics.csv is discarded"
        metrics.unlink()
    return said


def back_to_checkpoint(run_dir: Path) -> None:
    """Before a run resumes from its checkpoint, cut the rows a stopped process of it wrote after the checkpoint's step
    out of its logs: metrics.csv's evaluations and each lightning/version_<n>/metrics.csv's steps. The resume trains
    those steps again; until then `sweep status` read the stopped process's rows as this one's progress and val_loss
    (for the build's seconds, until Lightning restored the checkpoint's rows), and the Lightning logs held those
    steps twice, the stopped process's and the resume's. Each file is rewritten atomically: a reader finds it whole,
    with or without those rows. (The resume's own line says where it goes on from: `LanguageModel.on_load_checkpoint`.)
    Where the checkpoint's step cannot be read (a damaged archive, which `check_checkpoint` refuses, or a Lightning that
    moved `global_step`, which tests/test_train.py's comparison with torch.load catches) nothing is cut. The caller
    holds the run's lock."""
    step = checkpoint_step(checkpoint_path(run_dir))
    if step is None:
        return
    # metrics.csv's step counts steps done (row 20 follows the 20th); Lightning's, the step's index from 0
    _keep_rows(run_dir / "metrics.csv", lambda done: done <= step)
    for log in (run_dir / "lightning").glob("version_*/metrics.csv"):
        _keep_rows(log, lambda index: index < step)


def _keep_rows(path: Path, keep: Callable[[float], bool]) -> None:
    """Rewrite the CSV log `path` (atomically) without its rows whose `step` fails `keep`, and without a last row
    half-appended (`_step_rows`). The other lines keep their bytes; a row whose step is not a number stays. Nothing is
    written where no row goes, or the file has no `step` column or cannot be read as text (metrics.csv: the resume
    writes it again from the checkpoint's rows, `RunDirectory.load_state_dict`)."""
    read = _step_rows(path)
    if read is None:
        return
    header, rows = read
    kept = (header + "".join(line for line, step in rows if step is None or keep(step))).encode()
    if len(kept) < path.stat().st_size:  # (a row cut, or a half row: the caller holds the run's lock, no one appends)
        write_atomic(path, kept)


def _step_rows(path: Path) -> tuple[str, list[tuple[str, float | None]]] | None:
    """A CSV log's header line and its whole rows, each as (its line, the number in its `step` column: None where it
    holds none), their bytes kept (line ends too: Lightning ends its lines in CRLF, metrics.csv in LF). A last row
    half-appended (no line end: Lightning appends to its log, and a SIGKILL can stop it mid-row, where the step read
    may be a cut-off number) is no whole row. None where the file cannot be read as text or has no `step` column."""
    try:
        lines = path.read_bytes().decode().splitlines(keepends=True)
        column = next(csv.reader(lines[:1])).index("step")
    except (OSError, UnicodeDecodeError, csv.Error, StopIteration, ValueError):
        return None
    whole = lines[1:] if lines[-1].endswith(("\n", "\r")) else lines[1:-1]
    return lines[0], [(line, _row_step(line, column)) for line in whole]


def _row_step(line: str, column: int) -> float | None:
    """The number in a CSV line's `column`; None where it holds none."""
    try:
        return float(next(csv.reader([line]))[column])
    except (csv.Error, StopIteration, IndexError, ValueError):
        return None


def finished_record(config: RunConfig, run_dir: Path) -> dict | None:
    """The record of the run in run_dir if it has finished (result.json), else None; a UserError where
    run_dir holds another run (`check_run_dir`). Reads and writes nothing else, and takes no lock (the
    record is written last, atomically): a finished run is read on any machine (a GPU run's precision
    is not checked) and from read-only storage."""
    config = config.resolved()
    check_run_dir(config, run_dir)
    path = run_dir / "result.json"
    if not path.exists():
        return None
    record = _finished_record(path)
    # (a folder whose config.json is gone: its record was returned as that of any run asked for)
    if not (run_dir / "config.json").exists() and record["run_id"] != config.run_id:
        raise UserError(f"{path} is the record of another run ({record['run_id']}, not {config.run_id}), and "
                        f"{run_dir} has no config.json; choose another --out directory")
    return record


def _finished_record(path: Path) -> dict:
    """A finished run's record; a UserError naming the way out where the file is not one (written
    atomically, so a hand's or a disk's damage, not a crash's)."""
    from sweeps.store import read_result  # (torch-free: the check `sweep launch` makes too)

    record, problem = read_result(path)
    if problem:
        raise UserError(f"{path} is damaged ({problem}): move it away (mv {path} {path}.bad) and run again, "
                        "which trains the run's last steps again from its checkpoint")
    return record


def check_checkpoint(path: Path) -> None:
    """A UserError naming the way out where a run's checkpoint is damaged (`checkpoint_problem`, its
    contents too), which would otherwise surface as a traceback deep in Lightning's restore, or not at all."""
    problem = checkpoint_problem(path, contents=True)
    if problem:
        raise UserError(f"the checkpoint {path} is damaged ({problem}): to start this run over, move it away "
                        f"(mv {path} {path}.bad) and run again")


def out_of_memory_message(config: RunConfig, device: torch.device) -> str:
    """What to tell a user whose run ran out of memory: the forward pass's size and a smaller one."""
    where = f"{device}" + (f" ({torch.cuda.get_device_properties(device).total_memory / 2**30:.0f} GiB)"
                           if device.type == "cuda" else "")
    seen = f"out of memory on {where} at {config.micro_batch_size} sequences x {config.seq_len} tokens per forward pass"
    if config.micro_batch_size < 2:
        return f"{seen}: this model needs a device with more memory"
    half = config.micro_batch_size // 2
    return (f"{seen}: run it again with --micro-batch-size {half} (micro_batch_size = {half} in a run config or "
            f"sweep; the batch of {config.batch_size} sequences is then accumulated over more passes, the same "
            "up to float rounding): a run of its own, so with --out give it a new directory")


def result_record(config: RunConfig, recipe: str, status: str, final: dict, tokens_per_s: float,
                  device: torch.device, train_tokens: int, vocab_size: int, wall_s: float,
                  diverged_at_step: int | None = None, *, processes: list[dict]) -> dict:
    """The result record (DESIGN.md); `recipe` is the recipe's name, also for a recipe file (fits and
    reports group by it; the file's path goes into recipe_file). tokens, flops and epochs are the run's
    budget (its grid point), also for a diverged run, which stopped at `diverged_at_step` of `steps`.
    `processes`: the records of the run's processes (`LanguageModel.processes`); the last one's commit (the
    checkout's when it started: `train` reads it before building), versions and device are the record's
    `git_commit`, `versions` and `device`, and `git_commits` lists every process's commit."""
    s = config.model_size()
    tokens = config.trained_tokens
    per_token_exact = s.flops_per_token_exact(vocab_size, config.seq_len)
    peak = peak_flops(device)
    record = {
        "run_id": config.run_id, "family": config.family, "size": config.size, "n_params": s.n_params,
        "n_params_total": s.n_params_total(vocab_size), "tokens": tokens, "flops": s.flops_per_token() * tokens,
        "flops_exact": per_token_exact * tokens, "recipe": recipe, "seed": config.seed, "status": status,
        "val_loss": final["val_loss"], "val_bpb": final["val_bpb"], "tokens_per_s": tokens_per_s,
        "mfu": per_token_exact * tokens_per_s / peak if peak and math.isfinite(tokens_per_s) else None,
        "epochs": tokens / train_tokens, "wall_s": wall_s, "vocab_size": vocab_size,
        "versions": processes[-1]["versions"], "git_commit": processes[-1]["git_commit"],
        # extras
        "steps": config.steps, "batch_size": config.batch_size, "seq_len": config.seq_len, "lr_mult": config.lr_mult,
        "diverged_at_step": diverged_at_step, "git_commits": commits_of(processes), "processes": processes,
        "bpb_bytes": final.get("bpb_bytes"),  # how val_bpb's bytes were counted (`scaling.data.scored_bytes`)
        **({"recipe_file": config.recipe} if recipe != config.recipe else {}),
        "device": processes[-1]["device"],
    }
    return record


