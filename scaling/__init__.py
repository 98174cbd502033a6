"""fp4-scaling: scaling-law studies of FP4 LLM pretraining recipes.

Importing this package is cheap and torch-free (fits/ and reports/ rely on that);
import the submodules you need, e.g. ``from scaling.quant import quantize``.
"""

from __future__ import annotations

__version__ = "0.1.0"


def git_commit(short: bool = False, where: str | None = None) -> str | None:
    """The commit of the checkout this package runs from (or of the checkout holding `where`), with
    "-dirty" appended where its tracked files differ from that commit (as `git describe --dirty`):
    the commit alone would not reproduce what ran. None outside a git checkout."""
    import subprocess
    from pathlib import Path

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=where or Path(__file__).resolve().parent)

    try:
        out = git("rev-parse", *(["--short"] if short else []), "HEAD")
        if out.returncode != 0 or not out.stdout.strip():
            return None
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = changed.returncode == 0 and changed.stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def cpu_name() -> str:
    """The CPU's model name ("AMD EPYC 7B13"): /proc/cpuinfo's where there is one, else what platform says.
    CPU runs of one config differ in their last bits between CPU models (their float kernels do), so a
    record names the model, not "cpu"."""
    import platform

    name = platform.processor() or platform.machine() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        return name


def same_cpu_machine(a: dict, b: dict) -> bool:
    """Whether two machine descriptions (a benchmark file's `cpu_machine`, `scaling.bench.cpu_header`'s) name one CPU
    model at one thread count: its CPU rows' speeds hold for the other (a CPU's speed differs by model, and a step's
    by the threads it is spread over), so `scaling bench --out` adds rows to a file of its own machine only and
    `scaling sweep plan` prices a CPU sweep by such a file by default (`sweeps.cost.default_cpu_bench`)."""
    return (a.get("cpu"), a.get("threads")) == (b.get("cpu"), b.get("threads"))


def usable_cpus() -> int:
    """The cores this process may use, not the node's: its CPU affinity (a SLURM allocation or `taskset`
    narrows it), capped by a cgroup CPU quota (`docker --cpus`, a Kubernetes limit), whose extra cores
    would only be throttled."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, quota)) if quota else cores


def cgroup_cpu_quota(root: str = "/") -> int | None:
    """This process's cgroup CPU quota in whole cores (rounded up), or None where it has none: cgroup v2's
    `cpu.max` ("QUOTA PERIOD", or "max PERIOD"), else v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us`, at
    the process's own cgroup (`/proc/self/cgroup`). `root` is the filesystem root the paths are read
    under (tests)."""
    import math
    from pathlib import Path

    base = Path(root)

    def read(path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError:
            return None

    own = {}
    for line in (read(base / "proc/self/cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        for c in controllers.split(","):
            own[c] = path.lstrip("/")
    v2 = read(base / "sys/fs/cgroup" / own.get("", "") / "cpu.max") if "" in own else None
    if v2:
        quota, _, period = v2.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        folder = base / "sys/fs/cgroup" / name / own.get("cpu", "")
        quota, period = read(folder / "cpu.cfs_quota_us"), read(folder / "cpu.cfs_period_us")
        if quota and period and quota.lstrip("-").isdigit() and period.isdigit():
            q, p = int(quota), int(period)
            return max(1, math.ceil(q / p)) if q > 0 and p > 0 else None
    return None
