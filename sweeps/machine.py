"""What this machine offers a launch: its GPUs (`visible_gpus`; those a local launch of a spec trains on,
`local_gpus`, checked by `check_local_gpus`), the threads its CPU workers share (`thread_budget`), the slots a local
launch splits them into (`local_slots`), and its CPU as a benchmark file names one (`this_cpu_machine`).

`sweeps.plan` and `sweeps.cost` ask it where a launch would train and how fast, `sweeps.launch` where to start its
workers: one answer for both. Torch-free (torch is asked for a GPU count only where a CUDA driver loads) and free of
submitit, so that `scaling sweep plan` imports neither. The CPU's model and the cores this process may use (its
affinity capped by a cgroup quota) are read by `scaling.cpu_name` and `scaling.usable_cpus`, which fits/ and
`scaling bench` share.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

from scaling import usable_cpus
from scaling.console import count
from scaling.errors import UserError

if TYPE_CHECKING:
    from sweeps.spec import SweepSpec


def visible_gpus() -> list[str]:
    """The GPUs a local launch with `gpus = "all"` uses: CUDA_VISIBLE_DEVICES where it is set, else
    every GPU torch sees (none: the runs train on CPU)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip()]
    return [str(i) for i in range(cuda_device_count())]


def has_cuda_driver() -> bool:
    """Whether the CUDA driver's libcuda loads here: torch sees a CUDA GPU only through it."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def cuda_device_count() -> int:
    """torch.cuda.device_count(), without importing torch where no CUDA driver is installed (a laptop, a CPU
    node): its import takes seconds that `sweep plan` (which asks where a local launch would train) need not
    spend, or fails where torch is absent."""
    if not has_cuda_driver():
        return 0
    import torch

    return torch.cuda.device_count()


def check_local_gpus(spec: SweepSpec) -> None:
    """UserError where executor.local.gpus lists a GPU this machine lacks: its worker (CUDA_VISIBLE_DEVICES=that
    index) would see no GPU and train on CPU, unsaid. Judged where CUDA_VISIBLE_DEVICES is unset (the indices are
    then torch's); where it is set, the listed indices replace it and are the driver's, which torch cannot count."""
    gpus = spec.local.gpus
    if gpus == "all" or os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return
    present = cuda_device_count()
    missing = [g for g in gpus if g >= present]
    if missing:
        has = f"it has {count(present, 'GPU')}, 0 to {present - 1}" if present else "it has none"
        raise UserError(f"executor.local.gpus: GPU {missing[0]} is not on this machine ({has}); list GPUs it has, "
                        "or \"all\"" + ("" if present else ", which trains on CPU without a GPU"))


def thread_budget() -> int:
    """The threads the local workers share: OMP_NUM_THREADS where the launch's environment sets it (a user's or
    a scheduler's statement of what this launch may use; two launches on one machine, or a test runner's
    workers, would otherwise each take every core and oversubscribe them, which OpenMP's spinning barriers
    slow several-fold), else the cores this process may use."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else usable_cpus()


def local_gpus(spec: SweepSpec) -> list[str]:
    """The GPUs a local launch of the spec trains on: executor.local.gpus, or ("all") this machine's
    (`visible_gpus`)."""
    return visible_gpus() if spec.local.gpus == "all" else [str(g) for g in spec.local.gpus]


def local_slots(spec: SweepSpec, device: str | None = None) -> list[dict[str, str]]:
    """One environment per concurrent worker of a local launch: a GPU each (jobs_per_gpu per GPU), or a share of the
    cores (cpu_jobs). `device` ("gpu", "cpu"): where the launch trains; None: where a launch on this machine does, on
    `local_gpus` where there are any, else on its CPU. One count for both: the launch starts a worker a slot, and the
    plan prices the trainer's import once a slot of its device (`sweeps.plan.plan_processes`)."""
    s = spec.local
    gpus = [] if device == "cpu" else local_gpus(spec)
    if device == "gpu" and not gpus:
        gpus = ["0"]  # a plan priced on a GPU (`sweep plan --device gpu`) where this machine has none: one GPU's slots
    if gpus:
        return [{"CUDA_VISIBLE_DEVICES": g} for g in gpus for _ in range(s.jobs_per_gpu)]
    threads = str(max(1, thread_budget() // s.cpu_jobs))
    return [{"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}] * s.cpu_jobs


def this_cpu_machine() -> dict:
    """This machine as a benchmark file's `cpu_machine` names one, without torch (a plan runs without it): its CPU model
    as `scaling.bench.cpu_header` records it, and the threads a local launch's workers share here (`thread_budget`:
    OMP_NUM_THREADS, else the cores this process may use), which a CPU sweep's hours, the whole CPU's, are of."""
    from scaling import cpu_name  # (looked up at the call: tests stand in another CPU for scaling.cpu_name)

    return {"cpu": cpu_name(), "threads": thread_budget()}
