"""`scaling sweep plan|launch|status|collect`: a grid of runs from a TOML spec (sweeps/*.toml)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

from scaling.errors import UserError
from sweeps.cost import DEFAULT_MFU, DEFAULT_PEAK_TFLOPS
from sweeps.plan import PlanSpeeds

PLAN_TABLE_RUNS = 200  # beyond this many runs, `plan` groups its table by family, size and recipe
# What GPU-hours are counted in: the FLOPs per token that MFU counts (result.json, `scaling bench train`)
FLOPS_EXACT_RULE = "6*(N + V*width) + 12*depth*width*seq_len per token (N non-embedding, V the corpus's vocab)"
SWEEP_DIR_HELP = "the sweep's run folder that launch made: runs/<name>/, or launch's --sweep-dir"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def spec_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("spec", metavar="SPEC", help="sweep TOML, e.g. sweeps/demo.toml")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a spec key, e.g. --set grid.seed=[0,1] (repeatable; value read as TOML)")
        p.add_argument("--data", help="corpus or prepared data dir (or builtin); same as --set data=...")
        p.add_argument("--json", action="store_true", help="print JSON")

    def executor_arg(p: argparse.ArgumentParser, help: str) -> None:
        p.add_argument("--executor", choices=("slurm", "local"), help=f"{help} (default: the spec's executor.default)")

    p = sub.add_parser("plan", help="print the runs, total FLOPs and estimated GPU-hours (or CPU-hours)",
                       description="Print the runs of a sweep spec, their total FLOPs and estimated GPU-hours (or "
                                   "CPU-hours); nothing is launched.")
    spec_args(p)
    executor_arg(p, "price the runs where `launch --executor EXECUTOR` trains them")
    p.add_argument("--mfu", type=float,
                   help="assume this BF16 model FLOPs utilisation, as `scaling train` and `scaling bench train` measure "
                        "it (FLOPs of 6·(N + V·width) + attention per token), instead of the one the --bench file's "
                        f"bf16 rows measured at the nearest size (without bf16 rows: {DEFAULT_MFU:g})")
    p.add_argument("--peak-tflops", type=float,
                   help="the GPU's dense BF16 peak, TFLOP/s, that the MFU (--mfu's, or the one measured) is of "
                        "(default: the measured rows' own FLOP/s, their tokens/s; with --mfu or no bf16 rows "
                        f"{DEFAULT_PEAK_TFLOPS:g}, an H100's or H200's)")
    p.add_argument("--bench", default="default", metavar="FILE",
                   help="benchmark JSON whose `train` rows (on CPU: `cpu` rows) give each recipe's speed against "
                        "BF16 (default: reports/bench/h200.json; on CPU the reports/bench/ file measured on this CPU, same "
                        "model and threads, else reports/bench/cpu.json; none: every recipe "
                        "at BF16's speed, on a GPU only)")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto",
                   help="price the runs on a GPU or this CPU (default auto: where `launch` with --executor, else the "
                        "spec's default executor, trains them: executor.slurm.gpus, or a local launch on this machine's "
                        "GPUs if any)")
    p.add_argument("--runs", action="store_true",
                   help=f"one row per run however many (beyond {PLAN_TABLE_RUNS} runs the table has one row per "
                        "family, size and recipe)")

    p = sub.add_parser("launch", help="submit every run that is not done or in flight",
                       description="Submit every run of a sweep spec that is not done or in flight (SLURM job "
                                   "arrays, or this machine's GPUs or CPU); finished runs are skipped.")
    spec_args(p)
    executor_arg(p, "where to run")
    p.add_argument("--sweep-dir", help="where the run directories go (default: runs/<name>)")
    p.add_argument("--wait", action="store_true", help="slurm: keep watching until every run this launch submitted has finished")

    p = sub.add_parser("status", help="done / running / queued / failed / diverged counts and ETA",
                       description="Count a sweep's runs as done / running / queued / failed / diverged and "
                                   "estimate when the rest finish.")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", help=SWEEP_DIR_HELP)
    p.add_argument("--runs", action="store_true", help="one row per run as well")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("collect", help="one row per finished run → results.parquet",
                       description="Write one row per finished run of a sweep (its result.json) to a Parquet "
                                   "table, the input of `scaling fit` and `scaling report`.")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", help=SWEEP_DIR_HELP)
    p.add_argument("--out", help="Parquet file to write, named *.parquet (default: SWEEP_DIR/results.parquet)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    return {"plan": _plan, "launch": _launch, "status": _status, "collect": _collect}[args.action](args)


def _load(args: argparse.Namespace):
    from sweeps.spec import load_spec

    overrides = list(args.overrides) + ([f"data={_toml_str(args.data)}"] if args.data else [])
    return load_spec(args.spec, overrides)


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _plan(args: argparse.Namespace) -> int:
    from scaling.console import count, print_json, print_table
    from sweeps.cost import far_from_measured, other_seq_len, smaller_batch
    from sweeps.plan import bench_file, plan_device, plan_processes, plan_rows, plan_speeds

    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UserError(f"--mfu {args.mfu:g}: give the assumed utilisation as a fraction in (0, 1], e.g. 0.3")
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise UserError(f"--peak-tflops {args.peak_tflops:g}: give the GPU's peak BF16 TFLOP/s, e.g. 989")
    spec = _load(args)
    device, device_why = plan_device(spec, args.device, args.executor)
    bench, bench_why = bench_file(args.bench, device)
    speeds = plan_speeds(bench, device)
    executor = args.executor or spec.default_executor
    rows = plan_rows(spec, args.mfu, args.peak_tflops, speeds, device, executor)
    total = sum(r["flops"] for r in rows)
    hours = sum(r["hours"] for r in rows)
    summary = dict(name=spec.name, runs=len(rows), total_flops=total, executor=executor,
                   device=device, device_why=device_why,
                   hours=hours, **{f"{device}_hours": hours}, train_hours=sum(r["train_hours"] for r in rows),
                   eval_hours=sum(r["eval_hours"] for r in rows),
                   startup_hours=sum(r["startup_hours"] or 0.0 for r in rows),
                   startup_unpriced=sum(r["startup_hours"] is None for r in rows),
                   processes=plan_processes(spec, executor, device, len(rows)),
                   bench=bench, bench_why=bench_why or None, flops_rule="6*N*D (N non-embedding)",
                   total_flops_exact=sum(r["flops_exact"] for r in rows), flops_exact_rule=FLOPS_EXACT_RULE,
                   eval_tokens=sum(r["eval_tokens"] for r in rows),
                   total_eval_flops_exact=sum(r["eval_flops_exact"] for r in rows),
                   jobs_per_gpu=spec.local.jobs_per_gpu if (device, executor) == ("gpu", "local") else None)
    if device == "gpu":
        measured = any(r["measured_at"].get("bf16") for r in rows)  # (all or none: a file has bf16 rows or not)
        summary.update(mfu=None if measured else args.mfu or DEFAULT_MFU,
                       peak_tflops=args.peak_tflops if args.peak_tflops or measured else DEFAULT_PEAK_TFLOPS,
                       bf16_speed=bf16_speed(measured, args, speeds), gpu=speeds.machine if measured else None)
    else:
        summary["cpu"] = speeds.machine
    unit = f"{device}_hours"
    warnings = plan_warnings(rows)
    far = far_from_measured(rows, device, speeds.source, summary.get("mfu")) if speeds else []
    seq_lens = other_seq_len(rows, device, speeds.source) if speeds else []
    batches = smaller_batch(rows, device, speeds.source) if speeds else []
    if args.json:
        print_json({**summary, "warnings": warnings, "far_from_measured": far, "other_seq_len": seq_lens,
                    "smaller_batch": batches, "run_list": rows})
        return 0
    if args.runs or len(rows) <= PLAN_TABLE_RUNS:
        print_table(rows, ["run_id", "family", "size", "recipe", "tokens", "seed", "lr_mult", "flops", "vs_bf16",
                           f"eval_{unit}", f"startup_{unit}", unit], title=f"sweep {spec.name}")
    else:  # thousands of rows take a terminal minutes to draw and nobody reads them
        print_table(_by_model(rows, unit), title=f"sweep {spec.name}: {len(rows)} runs by family, size and recipe "
                                                 "(--runs: one row per run; --json: every run's fields)")
    if device == "gpu" and summary["mfu"] is None:
        print_table(_by_size(rows), title="BF16 per model size (the FLOP/s of the benchmark's nearest bf16 row)")
    if bench:
        print_table(_by_recipe(rows, unit), title="per recipe (speed against BF16 from the benchmark's "
                                                  + ("training rows)" if device == "gpu" else "cpu rows)"))
        for recipe, note in dict.fromkeys((r["recipe"], r["speed_note"]) for r in rows if r["speed_note"]):
            print(f"{recipe}: {note}")
        for line in far + seq_lens + batches:
            print(line)
    other = "" if args.device != "auto" else "; --device cpu prices it on CPU" if device == "gpu" else \
        "; --device gpu prices it on a GPU"
    print(f"priced on {device.upper()}: {device_why}{other}")
    if device == "gpu":
        if summary["mfu"] is not None:  # (measured: the table of sizes says by which rows)
            print(summary["bf16_speed"])
        priced, mfus = _priced_at(rows, summary, args.mfu is not None)
        print(f"{count(len(rows), 'run')}, {total:.3e} FLOPs (6·N·D), ≈ {hours:.3g} GPU-hours {priced} ({mfus}MFU as "
              f"`scaling train` measures it: {summary['total_flops_exact']:.3e} FLOPs of 6·(N + V·width) + attention per "
              "token)"
              + (f", each recipe at its speed measured in {bench}" if bench else ", every recipe at BF16's speed"))
    else:
        print(f"{count(len(rows), 'run')}, {total:.3e} FLOPs (6·N·D), ≈ {hours:.3g} CPU-hours of the benchmark's CPU "
              f"({summary['cpu']}) at the BF16 FLOP/s its cpu rows measured, each recipe at its CPU speed measured in "
              f"{bench}" + (f" ({bench_why})" if bench_why else ""))
    print(hours_split(summary, unit, speeds.source if speeds else None))
    if summary["jobs_per_gpu"] and summary["jobs_per_gpu"] > 1:
        print(shared_gpu_note(summary["jobs_per_gpu"]))
    for warning in warnings:
        print(f"warning: {warning}")
    return 0


def hours_split(summary: dict, unit: str, source: str | None) -> str:
    """The plan's line saying how many of its hours are training steps, how many evaluations (forward passes,
    `sweeps.cost.evaluation_flops`) and how many start-up (`sweeps.cost.startup_seconds`), and what is not counted:
    checkpoints, and the start-up of the runs whose rows in the benchmark file (`source`; None: --bench none) record
    none, said once."""
    from scaling.console import count

    name = unit.replace("_hours", "").upper() + "-hours"
    runs, unpriced = summary["runs"], summary["startup_unpriced"]
    steps = f"of which training steps {summary['train_hours']:.3g} {name}"
    evaluations = (f"evaluations {summary['eval_hours']:.3g} (forward passes over {summary['eval_tokens']:.3g} "
                   "validation tokens in all, eval_tokens every eval_interval steps and after the last: a third of a "
                   "training step's FLOPs a token, at its FLOP/s)")
    # what a run's start-up is, as `scaling bench` measures it (scaling.bench.StepTimes, import_seconds)
    gpu = summary["device"] == "gpu"
    what = (f"building its model to the end of its warm-up steps{', compilation included' if gpu else ''}, and the "
            "trainer's import once a process")
    command = "`scaling bench train --out FILE`" if gpu else "`scaling bench cpu --out FILE`"
    why = ("no benchmark file measures it: --bench none" if source is None else
           f"their rows in {source} record none, measured before rows did (2026-12-07 ~23:30); {command} measures it")
    if unpriced == runs:
        return f"{steps} and {evaluations}; not counted, on top: each run's start-up ({what}: {why}) and checkpoints"
    how = ("a SLURM job a run" if summary["executor"] == "slurm" else
           f"{count(summary['processes'], 'worker')} of a local launch")
    of = "" if not unpriced else f" for {runs - unpriced} of the {count(runs, 'run')}"
    unsaid = "" if not unpriced else f"the start-up of the other {count(unpriced, 'run')} ({why}) and "
    return (f"{steps}, {evaluations} and start-up {summary['startup_hours']:.3g}{of} (each run's as the row in "
            f"{source} it is priced from measured it: {what}, {how}); not counted, on top: {unsaid}checkpoints")


def shared_gpu_note(jobs_per_gpu: int) -> str:
    """What a GPU plan of a local launch that runs several runs on one GPU (executor.local.jobs_per_gpu) says of its
    GPU-hours: each run's alone on a GPU, summed; no speed-up from sharing is counted, none having been measured."""
    return (f"jobs_per_gpu = {jobs_per_gpu}: a local launch trains {jobs_per_gpu} runs at once on each GPU; the GPU-hours "
            "are each run's alone on a GPU, summed. Runs sharing a GPU each take longer than priced, and the GPU is held "
            "for less than their sum only where one run alone leaves it idle (small models); no speed-up from sharing "
            "has been measured, so none is counted")


def bf16_speed(measured: bool, args: argparse.Namespace, speeds: PlanSpeeds | None) -> str:
    """How a GPU plan priced BF16 (its text's line, its JSON's `bf16_speed`): at the speed the benchmark's bf16 rows
    measured, or at an assumed MFU, and why."""
    if measured:
        rate = (f"its MFU of --peak-tflops {args.peak_tflops:g}" if args.peak_tflops else
                "its tokens/s times the FLOPs per token its MFU counts")
        return (f"BF16 at the speed measured in {speeds.source} ({speeds.machine or 'its GPU'}): each size at the FLOP/s "
                f"of its nearest bf16 row ({rate}); --mfu assumes an MFU instead")
    peak = args.peak_tflops or DEFAULT_PEAK_TFLOPS
    why = ("--mfu" if args.mfu is not None else "no benchmark file: --bench none" if speeds is None else
           f"{speeds.source} has no bf16 `train` row with a tokens_per_s to measure it by")
    return f"BF16 at an assumed {args.mfu or DEFAULT_MFU:.0%} MFU of {peak:g} TFLOP/s ({why})"


def _priced_at(rows: list[dict], summary: dict, mfu_given: bool) -> tuple[str, str]:
    """What a GPU plan's hours are priced at for BF16, for its total's line, and the measured MFUs ("MFU 43.7%–50.5%; ",
    "" where assumed)."""
    if summary["mfu"] is not None:
        how = " (--mfu)" if mfu_given else ""
        return f"at an assumed {summary['mfu']:.0%} MFU{how} of {summary['peak_tflops']:g} TFLOP/s for BF16", ""
    mfus = [r["bf16_mfu"] for r in rows if r["bf16_mfu"] is not None]
    shown = "" if not mfus else f"{min(mfus):.1%}" if min(mfus) == max(mfus) else f"{min(mfus):.1%}–{max(mfus):.1%}"
    gpu = (f"a {summary['peak_tflops']:g} TFLOP/s GPU" if summary["peak_tflops"] else
           f"the benchmark's GPU ({summary['gpu']})" if summary["gpu"] else "the benchmark's GPU")
    return f"of {gpu} at BF16's speed measured at the nearest size", f"MFU {shown}; " if shown else ""


def plan_warnings(rows: list[dict]) -> list[str]:
    """What plan warns of (its text's `warning:` lines, its JSON's "warnings"): each recipe whose planned
    runs, all completed, are too few for `scaling fit`, and whether the fit leaves it out or is refused."""
    from fits.analysis import fit_refusal

    recipes = {r["recipe"] for r in rows}
    out = [rounded] if (rounded := rounded_tokens_warning(rows)) else []
    for recipe, problem in unfittable(rows).items():
        refusal = fit_refusal(recipe, problem, recipes)
        out.append(f"when every run completes, `scaling fit` and `scaling report` will refuse the fit: {refusal}"
                   if refusal else f"when every run completes, `scaling fit` will leave it out: {problem}")
    return out


def rounded_tokens_warning(rows: list[dict]) -> str | None:
    """The runs whose token budget loses more than 1% to whole batches (`scaling train`'s note's rule): the plan
    prices, and their results record as D, the tokens they train, not the ones the grid asked for."""
    from scaling.console import count

    short = [r for r in rows if r["tokens_asked"] - r["tokens"] > 0.01 * r["tokens_asked"]]
    if not short:
        return None
    examples = "; ".join(dict.fromkeys(
        f"{r['family']} {r['size']} {r['tokens_asked']:,} -> {r['tokens']:,} ({1 - r['tokens'] / r['tokens_asked']:.0%} "
        f"fewer, steps of {r['step_tokens']:,})" for r in short))
    return (f"{count(len(short), 'run')} train fewer tokens than the grid asks for (a run trains whole batches of "
            f"batch_size x seq_len tokens): {examples}; the plan prices, and their results will record as D, the "
            "tokens trained: ask for multiples of the steps to train them all")


def unfittable(rows: list[dict]) -> dict[str, str]:
    """The recipes whose planned runs, all completed, are still too few for the fits (too few points or
    runs, one model size or one budget), and why: said before the compute is spent, not after."""
    import polars as pl

    from fits.analysis import shortfalls
    from models import model_size

    points = pl.DataFrame([dict(recipe=r["recipe"], run_id=r["run_id"], N=float(model_size(r["family"], r["size"]).n_params),
                                D=float(r["tokens"]), seed=r["seed"], loss=1.0) for r in rows])  # fmt: skip
    points = points.unique(subset=["recipe", "N", "D", "seed"], keep="first")  # an LR sweep: one point per best LR
    return shortfalls(points)


def _by_model(rows: list[dict], unit: str = "gpu_hours") -> list[dict]:
    """The runs grouped by family, size and recipe: how many, their token budgets, FLOPs and hours (and of those,
    their evaluations' and start-up's: `_startup_sum`)."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["family"], r["size"], r["recipe"])
        entry = out.setdefault(key, dict(family=key[0], size=key[1], recipe=key[2], runs=0, tokens=set(), flops=0.0,
                                         **{f"eval_{unit}": 0.0, f"startup_{unit}": None, unit: 0.0}))  # fmt: skip
        entry["runs"] += 1
        entry["tokens"].add(r["tokens"])
        entry["flops"] += r["flops"]
        entry[f"eval_{unit}"] += r["eval_hours"]
        entry[f"startup_{unit}"] = _startup_sum(entry[f"startup_{unit}"], r["startup_hours"])
        entry[unit] += r["hours"]
    for entry in out.values():
        low, high = min(entry["tokens"]), max(entry["tokens"])
        entry["tokens"] = f"{low:,}" if low == high else f"{low:,}–{high:,} ({len(entry['tokens'])} budgets)"
    return list(out.values())


def _startup_sum(total: float | None, hours: float | None) -> float | None:
    """Start-up hours summed over runs, None (an empty cell) while none of them is priced."""
    return total if hours is None else (total or 0.0) + hours


def _by_size(rows: list[dict]) -> list[dict]:
    """BF16's MFU at each family and size of a GPU plan, and the benchmark row it was measured by."""
    out: dict[tuple, dict] = {}
    for r in rows:
        mfu = "?" if r["bf16_mfu"] is None else f"{r['bf16_mfu']:.1%}"  # (a GPU whose peak `scaling bench` did not know)
        out.setdefault((r["family"], r["size"]), dict(family=r["family"], size=r["size"], bf16_mfu=mfu,
                                                      bf16_from=r["bf16_from"]))
    return list(out.values())


def _by_recipe(rows: list[dict], unit: str = "gpu_hours") -> list[dict]:
    """Hours per recipe (and of those, its evaluations' and start-up's), with the speeds its runs were counted at and
    where they come from."""
    from scaling.console import number

    out: dict[str, dict] = {}
    for r in rows:
        entry = out.setdefault(r["recipe"], dict(recipe=r["recipe"], runs=0, hours=0.0, eval_hours=0.0,
                                                 startup_hours=None, speeds={}))
        entry["runs"] += 1
        entry["hours"] += r["hours"]
        entry["eval_hours"] += r["eval_hours"]
        entry["startup_hours"] = _startup_sum(entry["startup_hours"], r["startup_hours"])
        entry["speeds"][r["speed_from"]] = r["vs_bf16"]
    return [dict(recipe=e["recipe"], runs=e["runs"], **{f"eval_{unit}": e["eval_hours"],
                                                       f"startup_{unit}": e["startup_hours"], unit: e["hours"]},
                 vs_bf16="; ".join(f"{'?' if v is None else f'{number(v)}x'} ({src})" for src, v in e["speeds"].items()))
            for e in out.values()]


def _launch(args: argparse.Namespace) -> int:
    import contextlib
    import dataclasses

    from scaling.console import print_json
    from scaling.signals import interrupt_on_sigterm
    from sweeps.launch import LaunchInterrupted, launch

    spec = _load(args)
    executor = args.executor or spec.default_executor
    report = None
    # With --json, stdout is the report's alone and the progress goes to stderr (as `demo` and `fit` do):
    # a local launch runs for hours, and a run that fails should not wait for the JSON at the end to be seen.
    progress_out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    started = time.time()
    try:
        with interrupt_on_sigterm(), progress_out:  # `kill` stops a launch as Ctrl-C does
            report = launch(spec, executor=executor, sweep_dir=args.sweep_dir)
            if executor == "slurm" and args.wait:
                _wait(report, quiet=False)
            if report.finished:  # (a local launch's runs, or those a SLURM launch --wait'ed for)
                print(_ended_line(spec.name, report, time.time() - started), flush=True)
    except KeyboardInterrupt as e:  # (LaunchInterrupted carries the report of a launch stopped mid-way)
        report = e.report if isinstance(e, LaunchInterrupted) else report
        if args.json and report is not None:  # a script learns what ran before the stop (interrupted: true)
            report.interrupted = True
            print_json(dataclasses.asdict(report))
        print(_interrupted_line(executor, report), file=sys.stderr)
        return 130
    failed = _failed_here(report)
    if args.json:
        print_json(dataclasses.asdict(report))
    return 1 if failed else 0


def _interrupted_line(executor: str, report) -> str:
    """What a launch stopped by Ctrl-C or SIGTERM leaves, and how to go on (the bare "interrupted" said neither)."""
    if executor == "slurm":
        where = f"`scaling sweep status {report.sweep_dir}` follows them; " if report is not None else ""
        return (f"interrupted (Ctrl-C or SIGTERM): the jobs already submitted go on ({where}SLURM runs them); "
                "run the same command again to submit the rest")
    return ("interrupted (Ctrl-C or SIGTERM): this launch's runs saved a checkpoint and stopped (runs other processes "
            "train go on); run the same command again to go on: finished runs are kept, stopped ones resume from "
            "their checkpoints")


def _wait(report, quiet: bool) -> None:
    """Poll the runs this launch submitted until none of them is running or queued (`launch --wait`):
    a run of another launch in the same folder (a second spec's, a colleague's) is not waited for."""
    from scaling.console import count
    from sweeps.store import STATES, status

    mine = {s["run_id"] for s in report.submitted}
    while True:
        runs = [r for r in status(report.sweep_dir).runs if r.run_id in mine]
        c = {s: sum(r.state == s for r in runs) for s in STATES}
        if not quiet:
            print(f"done {c['done']}  running {c['running']}  queued {c['queued']}  failed {c['failed']}  "
                  f"diverged {c['diverged']}  missing {c['missing']}  (of the {count(len(mine), 'run')} this launch "
                  "submitted)", flush=True)  # fmt: skip
        if c["running"] + c["queued"] == 0:
            break
        time.sleep(10)
    # What became of them, as a local launch reports its own (`--json`'s "finished", and the exit
    # status): without it a waited launch exited 1 with "finished": {}.
    for r in runs:
        report.finished[r.state] = report.finished.get(r.state, 0) + 1


def _ended_line(name: str, report, seconds: float) -> str:
    """A launch's last line where it saw its runs end (local; slurm --wait): how they ended, and what to do next.
    Without it, a failed run's line had scrolled away among the others' and a local launch ended on the last
    run's line, its exit status 1 unexplained."""
    from scaling.console import count, duration

    sweep_dir, finished = report.sweep_dir, report.finished

    said = ", ".join(f"{finished[s]} {s}" for s in sorted(finished, key=lambda s: (s != "done", s)))
    if finished.get("failed"):
        failed = "it" if finished["failed"] == 1 else "them"
        then = (f"`scaling sweep status {sweep_dir} --runs` says how each failed run stopped; run the same command "
                f"again to resume or retrain {failed}")
    else:
        then = f"`scaling sweep collect {sweep_dir}` tables the results, `scaling report {sweep_dir} --out DIR` reports them"
    return f"{name}: {count(sum(finished.values()), 'run')} ended ({said}) in {duration(seconds)}; {then}"


def _failed_here(report) -> int:
    """How many of the runs this launch ran failed (the exit status is 1 if any did), from its
    report's `finished`: a local pool counts its own; a SLURM launch knows only with --wait (`_wait`
    fills it from its submitted runs' states). Runs left alone (done, running elsewhere) are not
    this launch's to report."""
    return report.finished.get("failed", 0)


def _status(args: argparse.Namespace) -> int:
    import dataclasses

    from scaling.console import count, duration, print_json, print_table
    from sweeps.store import STATES, check_sweep_folder, status

    check_sweep_folder(Path(args.sweep_dir), "status")  # (a spec given for its folder: the command that reads it)
    st = status(args.sweep_dir)
    if args.json:
        print_json(dataclasses.asdict(st))
        return 0
    if args.runs:
        rows = [dict(dataclasses.asdict(r), progress=r.progress_label(), eta=duration(r.eta_s) if r.state == "running" else "",
                     state=r.state_label()) for r in st.runs]
        lr = ["lr_mult"] if any(r.lr_mult != 1.0 for r in st.runs) else []  # (an LR sweep's runs differ only there)
        print_table(rows, ["run_id", "family", "size", "recipe", "tokens", "seed", *lr, "state", "progress", "val_loss",
                           "eta", "job_id"], title=f"runs in {st.sweep_dir}")  # fmt: skip
    total = sum(st.counts.values())
    # (misnamed only where a folder is: a sweep launch wrote has none, and every other table would carry a 0 column;
    # waiting only while a local launch lives, `run_status`)
    shown = [s for s in STATES if s not in ("misnamed", "waiting") or st.counts[s]]
    row = {s: st.counts[s] for s in shown} | {"total": total, "eta": duration(st.eta_s)}
    print_table([row], list(row), title=f"sweep {st.sweep_dir}")
    print(f"ETA: {duration(st.eta_s)} ({st.eta_method})")
    diverged = [r for r in st.runs if r.state == "diverged"]
    if diverged:  # where each stopped (result.json's diverged_at_step), not only how many did
        print("diverged: " + _first_ten([f"{r.run_id} ({r.family} {r.size} {r.recipe}) at step "
                                         f"{'?' if r.diverged_at_step is None else r.diverged_at_step}" for r in diverged], ", "))
    errors = [r for r in st.runs if r.error]  # a relaunch meets their error again: said (the job id names its log)
    if errors:
        print(f"{count(len(errors), 'failed run')} stopped on an error, which a relaunch meets again until it is "
              "fixed: " + _first_ten([f"{r.run_id}{f' (SLURM job {r.job_id})' if r.job_id else ''}: {r.error}"
                                           for r in errors]))
    resumable = sum(r.relaunch_resumes for r in st.runs)  # (the others: the notes around; as --runs labels them)
    if resumable:
        print(f"{resumable} of the failed runs stopped after a checkpoint (killed, cancelled or crashed): launching the "
              f"sweep again resumes {'them' if resumable > 1 else 'it'} from there")
    _say_cut([r for r in st.runs if r.progress_kept is not None])
    _say_damaged_results([r for r in st.runs if r.result_damaged], Path(st.sweep_dir))
    _say_misnamed([r for r in st.runs if r.misnamed], Path(st.sweep_dir))
    # train refuses to resume from these (`check_checkpoint`, `check_run_dir`): a relaunch would fail them again
    damaged, foreign = [r for r in st.runs if r.checkpoint_damaged], [r for r in st.runs if r.checkpoint_of]
    _say_refused_checkpoints(damaged, Path(st.sweep_dir), "left a damaged checkpoint", "bad",
                             lambda r: r.checkpoint_damaged)
    _say_refused_checkpoints(foreign, Path(st.sweep_dir), f"{'holds' if len(foreign) == 1 else 'hold'} the checkpoint "
                             "of another run", "other", lambda r: f"run {r.checkpoint_of}'s")
    return 0


def _say_cut(runs: list) -> None:
    """A line naming the stopped runs that logged steps past their checkpoint (`RunStatus.progress_kept`): a relaunch
    cuts those steps' rows and trains them again, so each is said at how far it got and where a relaunch goes on from
    (their progress alone read as work a relaunch keeps)."""
    from scaling.console import count

    said = []
    for r in runs:
        on = f"goes on from its checkpoint's {r.progress_kept:.0%}" if r.progress_kept else "starts over: no checkpoint"
        said.append(f"{r.run_id} (at {r.progress:.0%}, {on})")
    if said:
        print(f"{count(len(runs), 'stopped run')} logged steps that a relaunch cuts and trains again: "
              f"{_first_ten(said, ', ')}")


def _say_refused_checkpoints(runs: list, sweep_dir: Path, what: str, suffix: str, why: Callable) -> None:
    """A line naming the failed runs whose checkpoint a relaunch fails on (`what` they did, `why` each's: damaged,
    or another run's), and the command that moves it aside (to FILE.<suffix>)."""
    from scaling.console import count
    from scaling.files import checkpoint_path

    if not runs:
        return
    paths = [checkpoint_path(sweep_dir / r.run_id) for r in runs]
    shown = _first_ten([f"{p} ({why(r)})" for p, r in zip(paths, runs)])
    how = f"mv {paths[0]} {paths[0]}.{suffix}" if len(runs) == 1 else f"mv FILE FILE.{suffix}, each"
    print(f"{count(len(runs), 'failed run')} {what}, on which a relaunch fails again: {shown}; move it away ({how}) "
          "and launch the sweep again to train the run from the start")


def _say_damaged_results(runs: list, sweep_dir: Path) -> None:
    """A line naming the failed runs whose result.json is no result record (edited or damaged: train writes
    it atomically), and what a relaunch does with it (the launcher's `_prepare`)."""
    from scaling.console import count

    if runs:
        shown = _first_ten([f"{sweep_dir / r.run_id / 'result.json'} ({r.result_damaged})" for r in runs])
        print(f"{count(len(runs), 'failed run')} {'has' if len(runs) == 1 else 'have'} a damaged result.json, which is no "
              f"result: {shown}; launching the sweep again moves each such file aside (as result.damaged-<n>.json, kept) "
              "and trains its run again (from its checkpoint, where it left a sound one)")


def _say_misnamed(runs: list, sweep_dir: Path) -> None:
    """One line naming the folders that hold a run under a name of their own (`RunStatus.misnamed`), the `mv` that
    names each by its run id, and what stops until then (collect and report: `misnamed_error`)."""
    from scaling.console import count
    from sweeps.store import rename_command

    if not runs:
        return
    n = len(runs)
    moves = _first_ten([rename_command(sweep_dir / r.run_id, r.misnamed) for r in runs])
    print(f"{count(n, 'run folder')} {'holds its run' if n == 1 else 'hold their runs'} under a name of "
          f"{'its' if n == 1 else 'their'} own, as `scaling train --out` names a run's folder, where a sweep's are named "
          f"by their run ids: `scaling sweep collect` and `scaling report` refuse the sweep until "
          f"{'it is' if n == 1 else 'they are'} renamed ({moves}), and so does `scaling sweep launch` where one "
          "is a run of its spec")


def _first_ten(items: list[str], sep: str = "; ") -> str:
    """The first ten of a status note's items, and how many more there are (`--runs` lists every run)."""
    more = f"{sep}and {len(items) - 10} more (--runs lists them)" if len(items) > 10 else ""
    return sep.join(items[:10]) + more


def _collect(args: argparse.Namespace) -> int:
    from scaling.console import count, print_json, print_table
    from scaling.files import check_output
    from sweeps.store import check_sweep_folder, collect_runs, nothing_finished, write_parquet

    check_sweep_folder(Path(args.sweep_dir), "collect")  # a path that is no sweep folder is named as one, not as --out's
    out = Path(args.out) if args.out else Path(args.sweep_dir) / "results.parquet"
    check_output(out, folder=False, suffix=".parquet")  # before reading the runs' records
    df, unfinished = collect_runs(Path(args.sweep_dir))
    if df.height == 0:  # (an empty table would read as a collected sweep; `scaling fit` refuses it)
        raise nothing_finished(Path(args.sweep_dir), unfinished)
    write_parquet(df, out)
    _say_unfinished(Path(args.sweep_dir), unfinished)
    if args.json:
        print_json(df.to_dicts())
        return 0
    cols = [c for c in ("run_id", "family", "size", "recipe", "tokens", "seed", "status", "val_loss", "val_bpb", "wall_s")
            if c in df.columns]  # fmt: skip
    if "lr_mult" in df.columns and (df["lr_mult"].fill_null(1.0) != 1.0).any():  # an LR sweep's runs differ only there
        cols.insert(cols.index("seed") + 1 if "seed" in cols else len(cols), "lr_mult")
    if "diverged_at_step" in df.columns and df["diverged_at_step"].drop_nulls().len():  # where diverged runs stopped
        cols.insert(cols.index("status") + 1 if "status" in cols else len(cols), "diverged_at_step")
    print_table(df.select(cols).to_dicts(), cols, title=count(df.height, "run"))
    print(f"wrote {out} ({count(df.height, 'row')})")
    return 0


def _say_unfinished(sweep_dir: Path, runs: list) -> None:
    """A line on stderr where runs of the sweep have no result (running, queued, failed, never launched;
    `runs`: their `RunStatus`, as collect found them): collect has no row for them, and its table would read
    as the whole sweep (`report` says it too)."""
    from scaling.console import count
    from sweeps.store import relaunch_advice, states_said

    if runs:
        n = len(runs)
        print(f"note: {count(n, 'run')} of the sweep {'has' if n == 1 else 'have'} no result "
              f"({states_said(runs)}): not in this table; "
              f"`scaling sweep status {sweep_dir} --runs` lists {'it' if n == 1 else 'them'}; {relaunch_advice(runs)}",
              file=sys.stderr)
