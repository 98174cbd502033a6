"""`scaling demo`: the whole path on the tiny built-in sweep (sweeps/demo.toml), in minutes on a CPU.

    built-in corpus -> diagnostics.json -> sweep (local executor: GPUs if any, else CPU)
      -> results.parquet -> fits -> report

Everything lands in one folder (default runs/demo/, which git ignores):
    runs/demo/<run_id>/...        one folder per run (config.json, metrics.csv, result.json)
    runs/demo/diagnostics.json    `scaling diagnose` on the demo's formats
    runs/demo/results.parquet     `scaling sweep collect`
    runs/demo/report/index.html   the report (plus report.md, figures/, results.csv, fits.json)
Rerunning skips finished runs (the launcher finds them by run_id) and rebuilds the report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from pathlib import Path

from scaling import usable_cpus
from scaling.options import integer

DEFAULT_OUT = Path("runs") / "demo"
DIAGNOSE_TRANSFORMS = ("none", "rht16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="local (default: this machine's GPUs, else its CPU cores) or slurm")
    parser.add_argument("--spec", type=Path, default=None, help="another sweep spec (default: sweeps/demo.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec key, as `scaling sweep launch --set` (repeatable)")
    parser.add_argument("--bootstrap", type=integer(0), default=100, metavar="R", help="bootstrap replicates (default 100)")
    parser.add_argument("--law", choices=("chinchilla", "quartet"), default="chinchilla", help="law behind the verdict")
    parser.add_argument("--json", action="store_true", help="print the summary (timings, verdicts, paths) as JSON")


def demo_spec_path() -> Path:
    """sweeps/demo.toml, installed beside the sweeps modules (package data)."""
    import sweeps.spec  # a module has a __file__ even where an editable install makes `sweeps` a namespace

    return Path(sweeps.spec.__file__).parent / "demo.toml"


def _step(title: str) -> float:
    print(f"\n== {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}"
    return f"CPU ({usable_cpus()} cores)"


def _diagnostics(spec, out: Path) -> Path:
    """`scaling diagnose` on the formats of the demo's recipes, written where the report looks for it."""
    from scaling.files import write_json_atomic
    from scaling import diagnostics as dg

    formats = [f for f in dg.FORMATS if f in spec.recipe] or list(dg.FORMATS)
    result = dg.run_diagnostics(formats=formats, transforms=DIAGNOSE_TRANSFORMS,
                                progress=lambda msg: print(f"  diagnose: {msg}", file=sys.stderr, flush=True))
    path = out / "diagnostics.json"
    write_json_atomic(path, result)
    return path


def _check_outputs(out: Path) -> None:
    """Refuse, before the minutes of diagnostics and training, a file in --out of a name the demo writes
    that it would replace without having written it: a diagnostics.json that is not JSON and a
    results.parquet that is not Parquet were overwritten without a word, and a report/ of the user's
    files was refused only after the sweep."""
    from reports.build import refuse_replacing_others
    from scaling.files import check_output

    check_output(out / "diagnostics.json", folder=False, suffix=".json")
    check_output(out / "results.parquet", folder=False, suffix=".parquet")
    refuse_replacing_others(check_output(out / "report", folder=True))


def run(args: argparse.Namespace) -> int:
    from scaling.signals import interrupt_on_sigterm

    # SIGTERM in any stage, not only the sweep's (where the launch turns it into a Ctrl-C), stops the demo
    # as Ctrl-C does: one line saying so, exit 130. Its default action exited 143 without a word.
    try:
        with interrupt_on_sigterm():
            return _run(args)
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C or SIGTERM); run the same command again to go on: finished runs are kept, "
              "stopped ones resume from their checkpoints", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from reports import build
    from scaling.console import print_json
    from scaling.commands.report import print_summary
    from sweeps.launch import check_slurm_client, check_sweep_dir, launch
    from sweeps.spec import load_spec
    from sweeps.store import collect, write_parquet

    started = time.perf_counter()
    timings: dict[str, float] = {}
    out = check_sweep_dir(args.out, flag="--out")
    _check_outputs(out)
    if args.executor == "slurm":  # (a machine without SLURM's commands: refused before the data and diagnostics)
        check_slurm_client()
    spec = load_spec(args.spec or demo_spec_path(), args.set)
    runs = spec.runs()
    print(f"demo: {len(runs)} runs ({', '.join(spec.size)} × {', '.join(spec.recipe)}), {spec.data} data, "
          f"{args.executor} executor on {_device() if args.executor == 'local' else 'SLURM'}; output {out}/",
          file=sys.stderr, flush=True)

    if spec.data == "builtin":
        t = _step("1/5 the built-in corpus (prepared once, then cached)")
        from scaling.data import builtin_data_dir

        vocab = {c.vocab_size for c in runs if c.vocab_size} or {None}
        for v in vocab:
            print(f"  {builtin_data_dir() if v is None else builtin_data_dir(vocab_size=v)}", file=sys.stderr)
        timings["data_s"] = time.perf_counter() - t

    t = _step("2/5 quantization diagnostics")
    out.mkdir(parents=True, exist_ok=True)
    diag = _diagnostics(spec, out)
    print(f"  {diag}", file=sys.stderr)
    timings["diagnostics_s"] = time.perf_counter() - t

    t = _step(f"3/5 the sweep: {len(runs)} runs")
    with contextlib.redirect_stdout(sys.stderr):  # progress; stdout is the summary's (--json: JSON alone)
        launched = launch(spec, executor=args.executor, sweep_dir=out, progress=True)
    timings["sweep_s"] = time.perf_counter() - t
    if args.executor == "slurm":
        then = f"scaling report {out} --out {out / 'report'}"
        print(f"\nsubmitted to SLURM; when `scaling sweep status {out}` shows every run done, run\n  {then}",
              file=sys.stderr)
        if args.json:  # (stdout held nothing: a script reading it met no JSON) what was submitted, and what comes next
            timings["total_s"] = time.perf_counter() - started
            print_json({"executor": "slurm", "out": str(out), "diagnostics": str(diag),
                        "launch": dataclasses.asdict(launched), "timings": timings, "then": then})
        return 0

    t = _step("4/5 collect")
    table = collect(out)
    write_parquet(table, out / "results.parquet")
    print(f"  {table.height} results -> {out / 'results.parquet'}", file=sys.stderr)
    timings["collect_s"] = time.perf_counter() - t

    t = _step(f"5/5 fits ({args.law} law, {args.bootstrap} bootstrap replicates) and the report")
    summary = build(out, out / "report", baseline="bf16" if "bf16" in spec.recipe else spec.recipe[0],
                    law=args.law, bootstrap=args.bootstrap, title="fp4-scaling demo: does the FP4 penalty grow "
                    "with compute? (micro models, built-in corpus)")
    timings["report_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - started
    summary["timings"] = timings
    if args.json:
        print_json(summary)
    else:
        print()
        print_summary(summary)
        print(f"demo finished in {timings['total_s'] / 60:.1f} min")
    return 0
