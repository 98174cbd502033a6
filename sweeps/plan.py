"""A sweep spec's runs priced: where they train (`plan_device`), by which benchmark file's rows (`bench_file`,
`plan_speeds`), each run's FLOPs and hours (`plan_rows`, by `sweeps.cost`'s rules), and the prices a launch records for
`sweep status`'s ETA (`launch_prices`). `scaling sweep plan` prints them; `sweeps.launch` writes `launch_prices` into
sweep.json."""

from __future__ import annotations

from typing import NamedTuple

from scaling.errors import UserError


class PlanSpeeds(NamedTuple):
    """A benchmark file's speed rows for the plan's device, read once: the rows, the file's name (the
    rows' source) and its machine (on a GPU its `device`, "NVIDIA H200"; on CPU "Intel Xeon, 2 threads")."""

    rows: list[dict]
    source: str
    machine: str = ""


def plan_speeds(bench: str | None, device: str) -> PlanSpeeds | None:
    """The `bench` file's `cpu` rows (device "cpu"; None: the default's, `sweeps.cost.default_cpu_bench`) or `train`
    rows (device "gpu"; None: no file, every recipe at BF16's speed)."""
    from sweeps.cost import cpu_speeds, default_cpu_bench, training_speeds

    if device == "cpu":
        return PlanSpeeds(*cpu_speeds(bench or default_cpu_bench()[0]))
    return PlanSpeeds(*training_speeds(bench)) if bench else None


def bench_file(value: str, device: str = "gpu") -> tuple[str | None, str]:
    """--bench: a path, "none", or "default" (the committed H200 file where this checkout has it; on CPU, the
    committed file measured on this CPU, else cpu.json: `sweeps.cost.default_cpu_bench`), and why a default was
    picked ("" for a file the user gave, or none), for the plan to say beside the file's name."""
    from sweeps.cost import DEFAULT_BENCH, default_cpu_bench

    if value == "none":
        if device == "cpu":
            raise UserError("--bench none: a sweep priced on CPU needs a benchmark's `cpu` rows (its BF16 tokens/s); "
                            "give one (`scaling bench cpu --out FILE`), or --device gpu")
        return None, ""
    if value == "default":
        if device == "cpu":  # no speed to count at without it: said, not assumed
            path, why = default_cpu_bench()
            return str(path), why
        return (str(DEFAULT_BENCH), "") if DEFAULT_BENCH.exists() else (None, "")
    return value, ""


def plan_device(spec, choice: str = "auto", executor: str | None = None) -> tuple[str, str]:
    """Where plan prices the runs ("gpu" or "cpu"), and why: --device, else where `launch` with `executor`
    (--executor; None: the spec's default executor) would train them: on SLURM, on a GPU if
    executor.slurm.gpus asks for one; locally, on the GPUs executor.local.gpus lists, or (\"all\") on
    this machine's, if it has any."""
    if choice != "auto":
        return choice, f"--device {choice}"
    device, why = _launch_device(spec, executor or spec.default_executor)
    return device, f"`launch --executor {executor}`: {why}" if executor else why


def _launch_device(spec, executor: str) -> tuple[str, str]:
    """Where `launch --executor EXECUTOR` trains the spec's runs ("gpu" or "cpu"), and why."""
    from scaling.console import count

    if executor == "slurm":
        gpus = spec.slurm.gpus
        return ("gpu", f"its SLURM jobs ask for {count(gpus, 'GPU')} (executor.slurm.gpus)") if gpus \
            else ("cpu", "its SLURM jobs ask for no GPU (executor.slurm.gpus = 0)")
    if spec.local.gpus != "all":
        return "gpu", "executor.local.gpus lists the GPUs its local launch uses"
    from sweeps.machine import visible_gpus

    gpus = visible_gpus()
    return ("gpu", f"a local launch here uses this machine's {count(len(gpus), 'GPU')}") if gpus \
        else ("cpu", "a local launch trains on this machine's CPU (it has no GPU)")


def plan_rows(spec, mfu: float | None = None, peak_tflops: float | None = None,
              speeds: PlanSpeeds | None = None, device: str = "gpu", executor: str | None = None,
              runs: list | None = None) -> list[dict]:
    """One row per run: its grid values (`tokens`: the tokens it trains, its budget `tokens_asked` rounded
    down to whole batches of `step_tokens`, as its result records D; its `seq_len`), 6·N·D FLOPs (`flops`, the fits'
    C), its FLOPs as MFU counts them (`flops_exact`: `sweeps.cost.mfu_flops`, as result.json's `mfu` and `scaling
    bench train` count them), its evaluations' forward passes (`eval_tokens` read in all, `eval_flops` and
    `eval_flops_exact`: `sweeps.cost.evaluation_flops`), and the hours it takes: its training steps' (`train_hours`),
    its evaluations' at the same FLOP/s (`eval_hours`), its start-up (`startup_hours`, of `startup_s` seconds:
    `sweeps.cost.startup_seconds`, its row's start-up and its share of the imports of the `plan_processes` a launch
    with `executor` (None: the spec's default) starts; None where its row records none), and the three (`hours`, and
    under `gpu_hours` or `cpu_hours` by `device`). On "gpu": its FLOPs as MFU counts them at BF16's
    FLOP/s (`sweeps.cost.bf16_rate`: the benchmark's nearest bf16 row's, or `mfu` of `peak_tflops` where given or where
    no row measured bf16; `bf16_mfu`, `bf16_from`), its recipe slowed by the speed the benchmark's `train` rows
    measured (`speeds`, from `plan_speeds`; None: every recipe at BF16's speed, BF16 at the assumed MFU). On "cpu":
    the benchmark CPU's hours (all its threads), its 6·N FLOPs at the BF16 FLOP/s (6·N per token) of the
    benchmark's `cpu` rows, its recipe slowed by its CPU speed there (None: the committed cpu.json's).
    `measured_at`: the "family size" of each benchmark row its hours come from, by the recipe it measured
    (on CPU, "bf16" too: BF16's FLOP/s), for `sweeps.cost.far_from_measured`; `measured_seq_len`: the seq_len each
    was measured at, for `sweeps.cost.other_seq_len`; `measured_batch`: the (micro-batch, step) tokens each was
    measured at (`sweeps.cost.row_batch`), for `sweeps.cost.smaller_batch`, beside the run's (`micro_tokens`,
    `step_tokens`). `runs`: the spec's `resolved_runs()` where the caller has them (a launch), else resolved here."""
    from models import model_size
    from sweeps.cost import (Speed, bf16_rate, corpus_vocab_size, cpu_flops_per_s, cpu_hours, evaluation_flops,
                             gpu_hours, mfu_flops, priced_speed, startup_seconds)
    from sweeps.store import recipe_label

    if device == "cpu" and speeds is None:
        speeds = plan_speeds(None, device)
    vocab_size = corpus_vocab_size(spec)  # (the corpus's meta.json read once, not once a run)
    rows, priced = [], {}  # (recipe, family, size) -> Speed: a recipe file is read once, not once a run
    bf16 = {}  # (family, size) -> BF16's rate there (`Bf16Rate`), looked up once
    runs = spec.resolved_runs() if runs is None else runs
    processes = plan_processes(spec, executor or spec.default_executor, device, len(runs))
    for c, resolved, run_id in runs:  # (each config resolved once, as checking the grid did)
        tokens = resolved.whole_batch_tokens()  # (what the run trains and its result records as D)
        flops = float(model_size(c.family, c.size).flops_per_token() * tokens)
        flops_exact = mfu_flops(resolved, vocab_size)
        eval_flops, eval_flops_exact = evaluation_flops(resolved, vocab_size)
        key = (c.recipe, c.family, c.size)
        if key not in priced:
            priced[key] = (priced_speed(*key, speeds.rows, speeds.source) if speeds is not None else Speed(1.0, ""))
        speed, recipe = priced[key], recipe_label(c.recipe)
        at = {recipe: " ".join(speed.at)} if speed.at else {}  # the rows its hours come from, by what they measured
        seq_at = {recipe: speed.seq_len} if speed.at else {}  # (and the seq_len each measured at)
        batch_at = {recipe: speed.batch} if speed.at and speed.batch else {}  # (and the batch: `row_batch`)
        if (c.family, c.size) not in bf16:  # BF16's FLOP/s there, which every recipe's hours scale
            bf16[c.family, c.size] = (
                cpu_flops_per_s(c.family, c.size, speeds.rows, speeds.source) if device == "cpu" else
                bf16_rate(c.family, c.size, speeds.rows if speeds else [], speeds.source if speeds else "", mfu,
                          peak_tflops))
        rate = bf16[c.family, c.size]
        if device == "cpu":
            train_hours, eval_hours = (cpu_hours(f, rate.flops_per_s, speed) for f in (flops, eval_flops))
            rate_of = {}
        else:
            train_hours, eval_hours = (gpu_hours(f, rate, speed) for f in (flops_exact, eval_flops_exact))
            rate_of = dict(bf16_mfu=rate.mfu, bf16_from=rate.source)
        if rate.at:  # (a CPU rate always comes from a row; a GPU one where the benchmark has BF16's)
            at, seq_at = {"bf16": " ".join(rate.at), **at}, {"bf16": rate.seq_len, **seq_at}
            batch_at = {"bf16": rate.batch, **batch_at} if rate.batch else batch_at
        # its start-up as its recipe's row measured it; a run at BF16's speed (bf16, a recipe with no row), as BF16's
        startup_s = startup_seconds(speed.startup if speed.at else rate.startup, processes, len(runs))
        startup_hours = None if startup_s is None else startup_s / 3600
        hours = train_hours + eval_hours + (startup_hours or 0.0)
        rows.append(dict(run_id=run_id, family=c.family, size=c.size, recipe=recipe, tokens=tokens,
                         tokens_asked=int(c.tokens), step_tokens=resolved.batch_size * resolved.seq_len,
                         micro_tokens=resolved.micro_batch_size * resolved.seq_len,
                         seq_len=resolved.seq_len, seed=c.seed, lr_mult=c.lr_mult, flops=flops, flops_exact=flops_exact,
                         eval_tokens=resolved.evaluated_tokens(), eval_flops=eval_flops,
                         eval_flops_exact=eval_flops_exact, vs_bf16=speed.vs_bf16, speed_from=speed.source,
                         speed_note=speed.note, **rate_of, measured_at=at, measured_seq_len=seq_at,
                         measured_batch=batch_at,
                         train_hours=train_hours, eval_hours=eval_hours, startup_s=startup_s,
                         startup_hours=startup_hours, hours=hours,
                         **{f"eval_{device}_hours": eval_hours, f"startup_{device}_hours": startup_hours,
                            f"{device}_hours": hours}))  # fmt: skip
    return rows


def plan_processes(spec, executor: str, device: str, runs: int) -> int:
    """How many processes a launch with `executor` starts to train the spec's `runs` (each imports the trainer once, a
    start-up the plan prices): on SLURM a job a run; a local launch's workers, one a slot of `device`
    (`sweeps.machine.local_slots`, as the launch starts them: executor.local.jobs_per_gpu a GPU, at least one GPU for a
    plan priced on a GPU; cpu_jobs on a CPU), no more than the runs. (A worker that dies is replaced, and a requeued
    SLURM job starts again: not counted.)"""
    if executor == "slurm":
        return runs
    from sweeps.machine import local_slots

    return max(1, min(runs, len(local_slots(spec, device))))


def launch_prices(spec, executor: str, runs: list | None = None) -> dict:
    """Each run's price as `scaling sweep plan --executor EXECUTOR` gives it (`plan_rows`: its steps, evaluations and
    start-up, on the device a launch with `executor` trains on, from the default benchmark file for it), in the wall
    seconds a run takes in one of that launch's slots, for `sweep status`'s ETA (the launch writes it into sweep.json's
    `prices`, `sweeps.launch.pending`): the plan's hours × `share`, the slots a device is shared by (a local CPU
    launch's `cpu_jobs`: the plan's CPU-hours are the whole CPU's; a local GPU launch's `jobs_per_gpu`, with no speed-up
    from sharing counted, as the plan says; 1 on SLURM: a job's device is its own). `slots`: the runs the launch trains
    at once (`plan_processes`; None on SLURM: the queue decides). `startup_unpriced`: the runs whose rows record no
    start-up (`hours_split`), which the prices leave out until runs finish. `runs`: as `plan_rows` takes them."""
    device, _ = plan_device(spec, "auto", executor)
    bench, _ = bench_file("default", device)
    speeds = plan_speeds(bench, device)
    rows = plan_rows(spec, speeds=speeds, device=device, executor=executor, runs=runs)
    share = 1 if executor == "slurm" else spec.local.jobs_per_gpu if device == "gpu" else spec.local.cpu_jobs
    return {"device": device, "executor": executor, "bench": speeds.source if speeds else None,
            "slots": None if executor == "slurm" else plan_processes(spec, executor, device, len(rows)),
            "share": share, "startup_unpriced": sum(r["startup_hours"] is None for r in rows),
            "seconds": {r["run_id"]: r["hours"] * 3600 * share for r in rows}}
