"""What a sweep costs: each run's FLOPs as MFU counts them (`mfu_flops`: 6·(N + V·width) + attention per
token, as `scaling train` and `scaling bench train` measure MFU) at BF16's training FLOP/s, each quantized
recipe slowed by its measured training speed against BF16 (`scaling bench train` rows of a benchmark file).
(The plan's `flops` column stays 6·N·D, the fits' C.) Each run's evaluations are priced as forward passes at the same
FLOP/s (`evaluation_flops`), and its start-up as the benchmark row it is priced from measured it (`StartUp`,
`startup_seconds`: a row measured before rows recorded it prices none); its checkpoints are not priced.

BF16's FLOP/s is measured too (`bf16_rate`): the bf16 `train` row nearest the run in size, its tokens/s times
the FLOPs per token its `mfu` counts (at the row's vocabulary and seq_len: `train_row_shape`), i.e. its MFU of the
peak it was measured against, so the hours are the benchmark GPU's. Where the file has no bf16 row (or none is given:
`--bench none`), BF16 runs at an assumed DEFAULT_MFU of DEFAULT_PEAK_TFLOPS; `--mfu` assumes one over the file's.

On GPUs without FP4 tensor cores an FP4 recipe is emulated (quantizer passes around BF16 GEMMs), so
its runs take longer than BF16's: on the H200 at 160M, 0.95x BF16's tokens/s for mxfp4 down to 0.73x
for quartet2 (reports/bench/h200.json). A run takes the speed measured for its recipe at the nearest
model size, preferring its own family; the plan shows which measurement each run used, and names each
size more than 2x in parameters from it (`far_from_measured`), BF16's row included, with which way its hours are
likely off (too few where priced from larger models) and how many of the plan's hours that is. A recipe the
file has not measured (a recipe file of your own, or a preset not benchmarked) is priced as the slowest
measured recipe whose quantizer work it does all of (`priced_speed`), and the plan says which. Runs that train at
another seq_len, or a much smaller batch, than the rows they are priced from are named too, with which way their hours
are likely off (`other_seq_len`, `smaller_batch`).

A sweep that trains on CPU (`scaling sweep plan` decides where, as `launch` would) is priced from a
benchmark's `cpu` rows instead (`scaling bench cpu`): the benchmark CPU's hours at the BF16 FLOP/s its
bf16 row measured (`cpu_flops_per_s`), each recipe slowed by its CPU speed there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scaling.errors import UserError

DEFAULT_BENCH = Path(__file__).resolve().parents[1] / "reports" / "bench" / "h200.json"
# A CPU sweep's default where no file beside it was measured on this machine (`default_cpu_bench`): `scaling bench cpu`
# rows of a 2-thread Intel Xeon
DEFAULT_CPU_BENCH = DEFAULT_BENCH.with_name("cpu.json")
# BF16's MFU on a GPU where no benchmark row measured it (--bench none, a file without bf16 rows), of this peak
DEFAULT_MFU = 0.30
DEFAULT_PEAK_TFLOPS = 989.0  # H100/H200 SXM dense BF16, the peak `scaling bench train`'s mfu divides by on both
# The sequences and vocabulary every `scaling bench train` row was measured at before its rows recorded them
# (2026-12-07 ~20:30: scaling.bench.TRAIN_SHAPE): an older row's FLOPs per token, by which the plan turns its tokens/s
# into FLOP/s (`bench_flops_per_token`); a newer row's own seq_len and vocab_size are read instead
BENCH_TRAIN_SEQ_LEN = 1024
BENCH_TRAIN_VOCAB_SIZE = 32768


@dataclass(frozen=True)
class StartUp:
    """A run's start-up as the benchmark row it is priced from measured it (`row_startup`), in the seconds a plan's
    hours count (a GPU's wall seconds; on a CPU the benchmark CPU's, `cpu_speed_row`): the run's own (`run_s`: building
    its model to the end of its warm-up steps, less as many steady steps: `scaling.bench.StepTimes`) and the start and
    imports of the process that trains it (`import_s`: `scaling.bench.import_seconds`), which each trainer process
    pays once (a local launch's worker, for every run it trains; a SLURM job, for its run)."""

    run_s: float
    import_s: float


def row_batch(row: dict) -> tuple[int, int] | None:
    """The (micro-batch, step) tokens a speed row was measured at: its `batch_tokens` (a `train` row's micro_batch x
    seq_len; a `cpu` row's whole step, which accumulates none) and that times its `accumulate` (1 where it has none);
    None for a row without batch_tokens (a file written by hand)."""
    if not _count(row.get("batch_tokens")):
        return None
    return row["batch_tokens"], row["batch_tokens"] * (row["accumulate"] if _count(row.get("accumulate")) else 1)


def row_startup(row: dict) -> StartUp | None:
    """The start-up a speed row records (`startup_s`, `import_s`: a `train` row's wall seconds, a `cpu_speed_row`'s
    CPU seconds); None for a row measured before rows recorded it (2026-12-07 ~23:30), whose runs price none."""
    if _number(row.get("startup_s")) and _number(row.get("import_s")):
        return StartUp(float(row["startup_s"]), float(row["import_s"]))
    return None


@dataclass(frozen=True)
class Speed:
    """A recipe's training tokens/s against BF16's (`vs_bf16`; None: not measured) and where it comes
    from (`source`, e.g. "nanochat 160M, h200.json")."""

    vs_bf16: float | None
    source: str
    note: str = ""  # for a recipe not measured: which recipe's speed it was priced at, and why
    at: tuple[str, str] | None = None  # the (family, size) of the row it was measured at; None: no row (bf16)
    seq_len: int | None = None  # the seq_len that row was measured at (`train_row_shape`); None: no row
    startup: StartUp | None = None  # the start-up that row measured (`row_startup`); None: no row, or none recorded
    batch: tuple[int, int] | None = None  # the (micro-batch, step) tokens that row was measured at (`row_batch`)


@dataclass(frozen=True)
class Bf16Rate:
    """BF16's training FLOP/s that a run is priced at: on a GPU as MFU counts them (`mfu_flops`), the MFU that is
    (None: a row `scaling bench` wrote on a GPU whose peak it did not know); on a CPU by 6·N (`cpu_flops_per_s`; mfu
    None). Where it comes from (`source`: "llama2 160M, h200.json", or "assumed"; `at`: the row's (family, size),
    None where assumed)."""

    flops_per_s: float
    mfu: float | None
    source: str
    at: tuple[str, str] | None = None
    seq_len: int | None = None  # the row's seq_len (`train_row_shape`); None where assumed
    startup: StartUp | None = None  # the start-up the bf16 row measured (`row_startup`), --mfu or not; None: none
    batch: tuple[int, int] | None = None  # the (micro-batch, step) tokens the row was measured at (`row_batch`)


def read_bench(path: str | Path, option: str) -> dict:
    """A benchmark JSON (`scaling bench ... --out FILE`) as a dict; a missing, unreadable or non-object
    file is one UserError naming the command-line `option` that gave it."""
    path = Path(path)
    if path.is_dir():  # (it said "cannot read ... ([Errno 21] Is a directory: ...)")
        raise UserError(f"{option} {path} is a folder, not a file; give a benchmark JSON `scaling bench` wrote "
                        "(e.g. reports/bench/h200.json)")
    try:
        bench = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{option}: {path} does not exist; give a file `scaling bench` wrote") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{option}: cannot read {path} as a benchmark JSON ({error}); give a file "
                        "`scaling bench` wrote") from None
    if not isinstance(bench, dict):
        raise UserError(f"{option}: {path} is not a benchmark JSON (an object with device, kernels, linear, "
                        "train, ...); give a file `scaling bench` wrote")
    if bench and not set(bench) & {"device", *BENCH_SECTIONS, *BENCH_RESULTS}:  # (an empty one is a new file's start)
        raise UserError(f"{option}: {path} is not a benchmark JSON: it has none of its keys (device, kernels, "
                        f"linear, train, ...) but {', '.join(sorted(bench)[:5])}; give a file `scaling bench` wrote")
    wrong = [k for k in BENCH_SECTIONS if k in bench and not _rows(bench[k], str if k == "notes" else dict)]
    if wrong:
        raise UserError(f"{option}: {path} is not a benchmark JSON: its {', '.join(wrong)} must be a list of "
                        "rows (objects; notes: strings); give a file `scaling bench` wrote")
    wrong = [k for k in BENCH_RESULTS if k in bench and not isinstance(bench[k], dict)]
    if wrong:
        raise UserError(f"{option}: {path} is not a benchmark JSON: its {', '.join(wrong)} must be an object; "
                        "give a file `scaling bench` wrote")
    check_fields(bench, path, option)
    return bench


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value) -> bool:
    return isinstance(value, str)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# The fields of a row that the targets and `sweep plan`'s prices read: (what it must be, its test, whether every
# row has it); an optional one a row lacks leaves that row unjudged (a kernel row without gbps).
ROW_FIELDS = {
    "kernels": {"name": ("a name", _text, True), "recipe": ("a name", _text, True), "operand": ("a name", _text, True),
                "gbps": ("a number", _number, False), "copy_gbps": ("a number", _number, False),
                "gbps_back_to_back": ("a number", _number, False)},
    "linear": {"recipe": ("a name", _text, True), "d": ("a number", _number, False),
               "tokens": ("a number", _number, False), "ratio_vs_bf16": ("a number", _number, False),
               "ratio_range": ("a [low, high] pair of numbers",
                               lambda v: isinstance(v, list) and len(v) == 2 and all(map(_number, v)), False)},
    "train": {"recipe": ("a name", _text, False), "family": ("a name", _text, False), "size": ("a name", _text, False),
              "ratio_vs_bf16": ("a number", _number, False), "tokens_per_s": ("a number", _number, False),
              "mfu": ("a number or null", lambda v: v is None or _number(v), False),
              "seq_len": ("a positive integer", _count, False),
              "vocab_size": ("a positive integer", _count, False),
              **{k: ("a number", _number, False) for k in ("startup_s", "import_s")},
              **{k: ("a positive integer", _count, False) for k in ("batch_tokens", "accumulate")}},
    "cpu": {"recipe": ("a name", _text, False), "family": ("a name", _text, False), "size": ("a name", _text, False),
            "cpu_ratio_vs_bf16": ("a number", _number, False),
            **{k: ("a number", _number, False) for k in ("startup_cpu_s", "import_cpu_s")},
            **{k: ("a positive integer", _count, False) for k in ("batch_tokens", "accumulate")}},
}
# The header's fields the targets and `scaling bench` read, null (or absent) where nothing measured
# them: (what it must be, its test)
HEADER_FIELDS = {"copy_gbps": ("a number", _number), "cpu_machine": ("an object", lambda v: isinstance(v, dict)),
                 "sass_versions": ("an object", lambda v: isinstance(v, dict))}


def check_fields(bench: dict, path: str | Path, option: str) -> None:
    """UserError naming the first row of a benchmark file whose field the targets or a sweep's plan read is
    missing or of another kind (a file edited by hand), or a header field of another kind: they stopped
    on a KeyError's, TypeError's or ValueError's traceback."""
    for field, (kind, holds) in HEADER_FIELDS.items():
        if bench.get(field) is not None and not holds(bench[field]):
            raise UserError(f"{option}: {path}'s {field} must be {kind} (or null), and it has "
                            f"{json.dumps(bench[field])}; fix it, or give a file `scaling bench` wrote")
    for section, fields in ROW_FIELDS.items():
        for i, row in enumerate(bench.get(section, []), 1):
            for field, (kind, holds, required) in fields.items():
                if (field in row or required) and not holds(row.get(field)):
                    got = "lacks it" if field not in row else f"has {json.dumps(row[field])}"
                    raise UserError(f"{option}: {path}'s {section} row {i}: its {field} must be {kind}, and it "
                                    f"{got}; fix or remove that row, or give a file `scaling bench` wrote")


def _rows(section, kind: type) -> bool:
    return isinstance(section, list) and all(isinstance(r, kind) for r in section)


# The sections of a benchmark JSON that hold rows (`scaling bench`'s, and `notes`), and those that hold
# one result (`bench fit`'s): a file of calibration or fit alone (reports/bench/fits.json) is one too
BENCH_SECTIONS = ("kernels", "linear", "train", "profile", "sass", "cpu", "quantizer", "loss", "calibration",
                  "calibration_shared", "notes")
BENCH_RESULTS = ("fit",)


def training_speeds(path: str | Path) -> tuple[list[dict], str, str]:
    """The `train` rows of a benchmark JSON (`scaling bench train --out FILE`) with a speed against
    BF16 (`speed_rows`), the file's name, for the plan to cite, and its GPU (its `device`; "" where none).
    A file with none (another `scaling bench` command's: cpu.json, fits.json) is a UserError: it priced every
    recipe at BF16's speed while the plan said each was at its measured speed."""
    try:
        bench = read_bench(path, "--bench")
    except UserError as error:
        raise UserError(f"{error}, or --bench none to count every recipe at BF16's speed") from None
    rows = speed_rows(bench)
    if not rows:
        held = [k for k in BENCH_SECTIONS if bench.get(k) and k != "notes"] + [k for k in BENCH_RESULTS if bench.get(k)]
        what = f"its rows are {', '.join(held)}" if held else "it holds no rows"
        cpu = "; --device cpu prices the sweep on CPU by its cpu rows" if "cpu" in held else ""
        raise UserError(f"--bench: {path} has no `train` rows (recipe, family, size, ratio_vs_bf16) to price a GPU "
                        f"sweep by ({what}){cpu}; give a file `scaling bench train --out FILE` wrote "
                        "(reports/bench/h200.json), or --bench none to count every recipe at BF16's speed")
    return rows, Path(path).name, bench["device"] if isinstance(bench.get("device"), str) else ""


def speed_rows(bench: dict) -> list[dict]:
    """A benchmark's `train` rows with a speed against BF16: those of the CUDA-graph compile mode
    (`reduce-overhead`, the trainer's on a GPU) where it has any."""
    rows = [r for r in bench.get("train", []) if isinstance(r, dict)
            and {"recipe", "family", "size", "ratio_vs_bf16"} <= set(r)]
    graphed = [r for r in rows if r.get("compile_mode") == "reduce-overhead"]
    return graphed or rows


def speed_for(recipe: str, family: str, size: str, rows: list[dict], source: str) -> Speed:
    """The speed a run of `recipe` at (family, size) is counted at: 1 for bf16; else the row of that
    recipe nearest in parameters (log scale), its own family first, the file's later row on a tie (rows
    are appended as measured); None where the recipe has no row."""
    if recipe == "bf16":
        return Speed(1.0, "bf16")
    row = nearest_row(recipe, family, size, rows)
    if row is None:
        return Speed(None, "not measured: counted at BF16's speed")
    return Speed(float(row["ratio_vs_bf16"]), row_source(row, source), at=(row["family"], row["size"]),
                 seq_len=train_row_shape(row)[0], startup=row_startup(row), batch=row_batch(row))


def row_source(row: dict, source: str) -> str:
    """How the plan cites a benchmark row: "nanochat 160M, h200.json", and its date where it has one."""
    when = f", measured {row['measured'][:10]}" if isinstance(row.get("measured"), str) else ""  # (rows since 2026-12-06)
    return f"{row['family']} {row['size']}, {source}{when}"


def bf16_rate(family: str, size: str, rows: list[dict], source: str, mfu: float | None = None,
              peak_tflops: float | None = None) -> Bf16Rate:
    """BF16's training FLOP/s for a GPU run at (family, size). `mfu` (--mfu) given: that MFU of `peak_tflops`
    (None: DEFAULT_PEAK_TFLOPS). Else measured, from the bf16 row of `rows` nearest in size (`nearest_row`, as a
    recipe's speed is picked) with a tokens/s: its tokens/s times the FLOPs per token its mfu counts (at the
    row's vocabulary and seq_len, `bench_flops_per_token`), the FLOP/s of the benchmark's GPU whatever peak its mfu was
    divided by; given `peak_tflops`, its mfu of that peak instead (another GPU, at the MFU measured). Where no
    row measured bf16, the assumed DEFAULT_MFU of the peak. The start-up is that row's (`row_startup`), --mfu or not."""
    peak = (peak_tflops or DEFAULT_PEAK_TFLOPS) * 1e12
    row = nearest_row("bf16", family, size, bf16_rows(rows))
    if mfu is not None:
        return Bf16Rate(mfu * peak, mfu, "assumed (--mfu)", startup=row_startup(row) if row else None)
    if row is None:
        return Bf16Rate(DEFAULT_MFU * peak, DEFAULT_MFU, "assumed")
    measured = float(row["mfu"]) if _number(row.get("mfu")) else None
    if peak_tflops is None:
        flops_per_s = float(row["tokens_per_s"]) * bench_flops_per_token(row)
    elif measured is None:
        raise UserError(f"--peak-tflops {peak_tflops:g}: {source}'s bf16 row at {row['family']} {row['size']} has no mfu "
                        "(`scaling bench` knew no peak for its GPU), so there is no measured MFU to price that peak "
                        "at; give --mfu as well, or leave --peak-tflops out to price at the tokens/s it measured")
    else:
        flops_per_s = measured * peak
    return Bf16Rate(flops_per_s, measured, row_source(row, source), at=(row["family"], row["size"]),
                    seq_len=train_row_shape(row)[0], startup=row_startup(row), batch=row_batch(row))


def bf16_rows(rows: list[dict]) -> list[dict]:
    """The bf16 rows of a benchmark's speed rows (`speed_rows`) that measured a tokens/s to price BF16 by."""
    return [r for r in rows if r["recipe"] == "bf16" and _number(r.get("tokens_per_s")) and r["tokens_per_s"] > 0]


def train_row_shape(row: dict) -> tuple[int, int]:
    """The (seq_len, vocabulary) a `scaling bench train` row was measured at: its own where it records them, else
    (an older row) BENCH_TRAIN_SEQ_LEN and BENCH_TRAIN_VOCAB_SIZE, which every row was measured at then."""
    return row.get("seq_len", BENCH_TRAIN_SEQ_LEN), row.get("vocab_size", BENCH_TRAIN_VOCAB_SIZE)


def bench_flops_per_token(row: dict) -> int:
    """The FLOPs per token a `scaling bench train` row's mfu counts: flops_per_token_exact at the seq_len and
    vocabulary it was measured at (`train_row_shape`)."""
    from models.ladder import model_size

    seq_len, vocab_size = train_row_shape(row)
    return model_size(row["family"], row["size"]).flops_per_token_exact(vocab_size, seq_len)


def nearest_row(recipe: str, family: str, size: str, rows: list[dict]) -> dict | None:
    """The row of `recipe` nearest to (family, size) in parameters (log scale), its own family first,
    the later row on a tie; None where the recipe has none."""
    from models.ladder import model_size

    measured = [(i, r) for i, r in enumerate(rows) if r["recipe"] == recipe]
    if not measured:
        return None
    n = math.log(model_size(family, size).n_params)

    def distance(item: tuple[int, dict]) -> tuple:
        i, r = item
        return r["family"] != family, abs(math.log(model_size(r["family"], r["size"]).n_params) - n), -i

    return min(measured, key=distance)[1]


def cpu_speeds(path: str | Path) -> tuple[list[dict], str, str]:
    """The `cpu` rows of a benchmark JSON (`scaling bench cpu --out FILE`) as speed rows (ratio_vs_bf16:
    BF16's CPU time a step over the recipe's), the file's name, and its machine ("Intel Xeon, 2 threads")."""
    try:
        bench = read_bench(path, "--bench")
    except UserError as error:
        raise UserError(f"{error}, or --device gpu to price the sweep on a GPU") from None
    machine = bench.get("cpu_machine") if isinstance(bench.get("cpu_machine"), dict) else {}
    threads = machine["threads"] if _count(machine.get("threads")) else 1
    rows = [cpu_speed_row(r, threads) for r in bench.get("cpu", [])
            if {"recipe", "family", "size", "tokens_per_s", "cpu_ratio_vs_bf16"} <= set(r)
            and float(r["cpu_ratio_vs_bf16"]) > 0]
    if not any(r["recipe"] == "bf16" for r in rows):
        raise UserError(f"--bench: {path} has no bf16 `cpu` row to price a CPU sweep by; give a file "
                        "`scaling bench cpu --out FILE` wrote (reports/bench/cpu.json), or --device gpu")
    where = ", ".join(str(x) for x in (machine.get("cpu"), machine.get("threads") and f"{machine['threads']} threads") if x)
    return rows, Path(path).name, where or "the benchmark's CPU"


def default_cpu_bench(machine: dict | None = None) -> tuple[Path, str]:
    """The benchmark file a CPU sweep is priced by where the user gives none, and why, for the plan to say: a committed
    file beside DEFAULT_CPU_BENCH (reports/bench/) whose `cpu_machine` is `machine` (None: this machine's,
    `sweeps.machine.this_cpu_machine`), by `scaling.same_cpu_machine`, with a bf16 `cpu` row to price by (the latest
    measured where several are), else DEFAULT_CPU_BENCH, the Xeon's, whose speeds another CPU's runs need not match
    (the demo's sweep took 1.6-1.9x its price by it on a 2-core AMD EPYC)."""
    from scaling import same_cpu_machine
    from scaling.console import count
    from sweeps.machine import this_cpu_machine

    machine = machine or this_cpu_machine()
    matching = []
    for path in sorted(DEFAULT_CPU_BENCH.parent.glob("*.json")):
        try:
            text = path.read_bytes()
            # a file without the key's text has no such header: not parsed (the folder's GPU and SASS files, 0.5 MB
            # of JSON, took ~10 ms a plan and launch)
            bench = json.loads(text) if b'"cpu_machine"' in text else None
        except (OSError, ValueError):  # (not ours to judge here: a file the user names is, by `read_bench`)
            continue
        header = bench.get("cpu_machine") if isinstance(bench, dict) else None
        rows = bench.get("cpu") if isinstance(header, dict) else None
        if (isinstance(rows, list) and same_cpu_machine(header, machine)
                and any(isinstance(r, dict) and r.get("recipe") == "bf16" for r in rows)):
            matching.append((str(header.get("date") or ""), path))
    if matching:
        return max(matching)[1], "the default: measured on this CPU, its model and threads"
    folder = f"{DEFAULT_CPU_BENCH.parent.parent.name}/{DEFAULT_CPU_BENCH.parent.name}/"
    return DEFAULT_CPU_BENCH, (f"the default: none of {folder}'s files was measured on this CPU, {machine['cpu']} at "
                               f"{count(machine['threads'], 'thread')}; `scaling bench cpu --out FILE` measures one")


def cpu_speed_row(row: dict, threads: int) -> dict:
    """A `cpu` row as a speed row: `ratio_vs_bf16` BF16's CPU time a step over the recipe's, its `seq_len`
    (`cpu_row_seq_len`), and its start-up (`startup_s`, `import_s`, read by `row_startup`) in the benchmark CPU's
    seconds: its CPU seconds (`startup_cpu_s`, `import_cpu_s`) over the CPU's `threads`, as the plan's CPU-hours are
    the whole CPU's: a run's start-up is mostly one thread's work, beside other runs' (a local launch's cpu_jobs
    workers), so its wall seconds at all the threads would count it `threads` times. None for a row without them."""
    out = {k: v for k, v in row.items() if k not in ("startup_s", "import_s")}
    out.update(ratio_vs_bf16=1 / float(row["cpu_ratio_vs_bf16"]), seq_len=cpu_row_seq_len(row))
    if _number(row.get("startup_cpu_s")) and _number(row.get("import_cpu_s")):
        out.update(startup_s=row["startup_cpu_s"] / threads, import_s=row["import_cpu_s"] / threads)
    return out


def cpu_row_seq_len(row: dict) -> int:
    """The seq_len a `scaling bench cpu` row was measured at: its own where it records it, else (a row written before
    2026-12-07 ~20:30) its size's default, which `bench_cpu` trained at (a 2M-token run's resolved config)."""
    from models.ladder import model_size

    return row.get("seq_len") or model_size(row["family"], row["size"]).seq_len


def cpu_flops_per_s(family: str, size: str, rows: list[dict], source: str = "") -> Bf16Rate:
    """BF16 training FLOP/s (6·N·D) on the benchmark's CPU: the nearest bf16 row's tokens/s times its
    6·N, with that row's (family, size), the seq_len it was measured at (`cpu_speeds`' rows carry it) and its
    start-up (`row_startup`)."""
    from models.ladder import model_size

    row = nearest_row("bf16", family, size, rows)
    return Bf16Rate(float(row["tokens_per_s"]) * model_size(row["family"], row["size"]).flops_per_token(), None,
                    row_source(row, source), at=(row["family"], row["size"]), seq_len=row["seq_len"],
                    startup=row_startup(row), batch=row_batch(row))


# A run priced from a row more than this factor away in parameters is named (`far_from_measured`): the ladder's
# sizes double, so a run priced at its neighbour's row is near enough, one two rungs away is not.
FAR_FROM_MEASURED = 2.05


def far_from_measured(rows: list[dict], device: str, source: str, assumed_mfu: float | None) -> list[str]:
    """The line (a list of one; none where every run is near its row) naming each (family, size) of the plan's
    `rows` priced from a measurement more than FAR_FROM_MEASURED away in parameters (`measured_at`: the row's
    "family size" per recipe, bf16's BF16 FLOP/s too), by how much; which way its hours are likely off and how many
    of the plan's hours that is (`far_direction`); and the `scaling bench` command that measures it (`source`: the
    file). `assumed_mfu`: BF16's on a GPU where no row measured it (None: measured). It says which way, not by how
    much: no row measures the size, so no correction is made."""
    far = _far_rows(rows)
    if not far:
        return []

    def said(at: str, ratio: float, recipes: list[str]) -> str:
        return f"{', '.join(recipes)} at {at}'s speed, " + (f"{ratio:.2g}x its parameters" if ratio > 1 else
                                                              f"1/{1 / ratio:.2g} of its parameters")

    sizes = "; ".join(f"{' '.join(run)} ({'; '.join(said(at, *found) for at, found in ats.items())})"
                      for run, ats in far.items())
    families = ",".join(dict.fromkeys(f for f, _ in far))
    command = f"scaling bench {'train' if device == 'gpu' else 'cpu'} --families {families} " \
              f"--sizes {','.join(dict.fromkeys(s for _, s in far))} --out FILE"
    unit = f"{device.upper()}-hours"
    total = sum(r["hours"] for r in rows)
    ways = " ".join(_far_way(way, runs, hours, total, unit, device, assumed_mfu)
                    for way, (runs, hours) in far_direction(rows, far).items())
    return [f"far from any size measured in {source}: {sizes}. {ways} `{command}` measures them (then --bench FILE)"]


def _far_rows(rows: list[dict]) -> dict[tuple[str, str], dict[str, tuple[float, list[str]]]]:
    """Each (family, size) of the plan's `rows` priced from a row more than FAR_FROM_MEASURED away in parameters:
    the row's "family size" -> (its parameters over the run's, the recipes priced from it)."""
    from models.ladder import model_size

    far: dict[tuple[str, str], dict[str, tuple[float, list[str]]]] = {}
    for r in rows:
        for recipe, at in r["measured_at"].items():
            ratio = model_size(*at.split()).n_params / model_size(r["family"], r["size"]).n_params
            if max(ratio, 1 / ratio) > FAR_FROM_MEASURED:
                _, recipes = far.setdefault((r["family"], r["size"]), {}).setdefault(at, (ratio, []))
                if recipe not in recipes:
                    recipes.append(recipe)
    return far


def far_direction(rows: list[dict], far: dict) -> dict[str, tuple[list[str], float]]:
    """The far sizes (`_far_rows`) by which way their hours are likely off: "below" (priced only from larger models'
    rows: too few hours), "above" (only from smaller ones': too many) or "both" (from larger and smaller ones); each
    with its sizes ("family size") and the hours of the plan's runs priced from a far row (a far bf16 row prices
    every recipe's runs at that size; a far recipe row its own)."""
    out: dict[str, tuple[list[str], float]] = {}
    for run, ats in far.items():
        ratios = {ratio > 1 for ratio, _ in ats.values()}
        way = "both" if len(ratios) == 2 else "below" if True in ratios else "above"
        hours = sum(r["hours"] for r in rows if (r["family"], r["size"]) == run
                    and any(at in ats for at in r["measured_at"].values()))
        sizes, total = out.get(way, ([], 0.0))
        out[way] = (sizes + [" ".join(run)], total + hours)
    return out


def plan_share(hours: float, total: float, unit: str) -> str:
    """How many of the plan's `total` hours some of its runs' `hours` are, as the lines naming runs whose hours are
    likely off say it ("These runs are ..."): "0.748 of the plan's 324 GPU-hours", or "the whole plan's 0.173
    GPU-hours" where they are all of them."""
    if hours < total * (1 - 1e-9):
        return f"{hours:.3g} of the plan's {total:.3g} {unit}"
    return f"the whole plan's {total:.3g} {unit}"


def _far_way(way: str, runs: list[str], hours: float, total: float, unit: str, device: str,
             assumed_mfu: float | None) -> str:
    """The sentence saying which way the far sizes of one direction (`far_direction`) are likely off, and why."""
    share = plan_share(hours, total, unit)
    names = ", ".join(runs)
    if way == "both":
        return f"Priced from both larger and smaller models: {names}; their hours may be off either way. These runs " \
               f"are {share}."
    below = way == "below"
    # BF16's FLOP/s: on CPU scaled by 6·N, which leaves out the LM head, a larger share of a smaller model's step
    bf16 = (f"gets {'less' if below else 'more'} than the BF16 FLOP/s scaled from the row by 6·N" if device == "cpu"
            else f"reaches a {'lower' if below else 'higher'} MFU in BF16" if assumed_mfu is None
            else f"reaches less than the assumed {assumed_mfu:.0%} MFU in BF16" if below else "")
    return (f"Priced from {'larger' if below else 'smaller'} models: {names}; a {'smaller' if below else 'larger'} model "
            f"spends a {'larger' if below else 'smaller'} share of its step in the quantizers"
            + (f" and {bf16}" if bf16 else "")
            + f", so these runs likely train {'slower' if below else 'faster'} than priced: their hours are likely too "
            f"{'few' if below else 'many'}. These runs are {share}.")


def other_seq_len(rows: list[dict], device: str, source: str) -> list[str]:
    """The line (a list of one; none where every run trains at the seq_len of the rows it is priced from) naming each
    (family, size, seq_len) of the plan's `rows` priced from a benchmark row measured at another seq_len
    (`measured_seq_len`; an older `train` row's is BENCH_TRAIN_SEQ_LEN, an older `cpu` row's its size's default:
    `train_row_shape`, `cpu_row_seq_len`), which way its hours are likely off and how many of the plan's hours they
    are. No `scaling bench` option measures another seq_len, so it says which way, not by how much."""
    runs, hours = _measured_otherwise(
        rows, lambda r: {recipe: f"{at}" for recipe, at in r["measured_seq_len"].items() if at != r["seq_len"]},
        lambda r: f"at seq_len {r['seq_len']}")
    if not runs:
        return []
    share = plan_share(hours, sum(r["hours"] for r in rows), f"{device.upper()}-hours")
    # BF16: on a GPU its FLOPs a token are counted at the run's seq_len, its MFU there unmeasured; on a CPU its FLOP/s
    # is scaled by 6·N, which leaves out attention (at 1M on the 2-thread CPU, 4,096-token batches: 4,337 tokens a
    # CPU-second at seq_len 64, 4,213 at 256; nvfp4 0.867x and 0.899x bf16's: docs/sweeps.md)
    bf16 = ("BF16's MFU at another seq_len is not measured (its FLOPs a token are counted at the run's), so a bf16 run "
            "may be off either way" if device == "gpu" else
            "BF16's FLOP/s is scaled from the row by 6·N, which leaves out attention, so BF16 likely trains a little "
            "faster than priced at a shorter seq_len and slower at a longer one")
    return [f"runs at a seq_len other than that of the rows in {source} they are priced from: {runs}. Attention's "
            "work a token grows with seq_len and a quantized recipe's quantizer work a token does not, so against BF16 "
            "a quantized recipe likely trains slower than priced at a shorter seq_len than its row's (its hours too "
            f"few) and faster at a longer one (too many); {bf16}. These runs are {share}; no `scaling bench` option "
            "measures another seq_len, so no correction is made"]


# A run whose micro-batch or step is more than this factor smaller in tokens than those of a row it is priced from is
# named (`smaller_batch`): as for FAR_FROM_MEASURED's sizes, half the row's (the batch rule's next power of two) is near
SMALLER_BATCH = 2.05


def smaller_batch(rows: list[dict], device: str, source: str) -> list[str]:
    """The line (a list of one; none where no run's batch is much smaller than its rows') naming each (family, size,
    batch) of the plan's `rows` whose micro-batch (`micro_tokens`: micro_batch_size x seq_len tokens a forward and
    backward) or step (`step_tokens`: batch_size x seq_len tokens an optimizer step) is more than SMALLER_BATCH times
    smaller than those of a row it is priced from (`measured_batch`: `row_batch`), which way its hours are likely off
    and how many of the plan's hours they are. It says which way, not by how much: no correction is made."""
    def smaller(r: dict) -> dict[str, str]:
        return {recipe: f"{micro:,} in {step:,}" for recipe, (micro, step) in r["measured_batch"].items()
                if micro > SMALLER_BATCH * r["micro_tokens"] or step > SMALLER_BATCH * r["step_tokens"]}

    runs, hours = _measured_otherwise(
        rows, smaller, lambda r: f"at {r['micro_tokens']:,}-token micro-batches in {r['step_tokens']:,}-token steps")
    if not runs:
        return []
    share = plan_share(hours, sum(r["hours"] for r in rows), f"{device.upper()}-hours")
    # (the 2-core test machine, one thread, nanochat 1M: docs/sweeps.md, "Small batches")
    fixed = ("its optimizer step, its kernel launches and a GPU a small micro-batch leaves idle" if device == "gpu" else
             "its optimizer step and each operation's overhead")
    measure = (" (`scaling bench train --batch B --accumulate A` measures micro-batches of B x 1024 tokens)"
               if device == "gpu" else "")
    return [f"runs at a batch much smaller than that of the rows in {source} they are priced from: {runs}. A step's "
            f"work that does not grow with its tokens ({fixed}) is spread over fewer of them, so these runs likely train "
            f"slower than priced, BF16 and quantized recipes alike: their hours are likely too few. These runs are "
            f"{share}; no correction is made{measure}"]


def _measured_otherwise(rows: list[dict], otherwise: Callable[[dict], dict[str, str]],
                        said: Callable[[dict], str]) -> tuple[str, float]:
    """The plan's runs priced from a benchmark row measured otherwise than they train (`otherwise(run)`: each such
    row's recipe and how it was measured, "1024"), named by family and size, grouped by how they train (`said(run)`:
    "at seq_len 256") and how their rows were measured: "nanochat 1M, nanochat 2M at seq_len 256 (their rows: bf16,
    nvfp4 at 1024)"; and those runs' hours. ("", 0.0) where there are none."""
    off: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    hours = 0.0
    for r in rows:
        others = otherwise(r)
        if others:
            hours += r["hours"]
        for recipe, at in others.items():
            recipes = off.setdefault((r["family"], r["size"], said(r)), {}).setdefault(at, [])
            if recipe not in recipes:
                recipes.append(recipe)
    sizes: dict[str, list[str]] = {}  # how a size trains and its rows were measured -> the sizes so (micro.toml's)
    for (family, size, how), ats in off.items():
        measured = "; ".join(f"{', '.join(recipes)} at {at}" for at, recipes in ats.items())
        sizes.setdefault(f"{how} (their rows: {measured})", []).append(f"{family} {size}")
    return "; ".join(f"{', '.join(names)} {what}" for what, names in sizes.items()), hours


def startup_seconds(startup: StartUp | None, processes: int, runs: int) -> float | None:
    """The seconds a run's start-up is priced at (in its plan's hours' seconds: `StartUp`): its own, and its share of
    the imports of the `processes` that train the plan's `runs` (each imports the trainer once: a local launch's
    workers, or a SLURM job a run); None where its row records no start-up."""
    if startup is None:
        return None
    return startup.run_s + startup.import_s * processes / runs


def cpu_hours(flops: float, flops_per_s: float, speed: Speed) -> float:
    """Hours of the benchmark's CPU (all its threads) for `flops` at BF16's FLOP/s there, slowed by the recipe's speed."""
    return flops / (flops_per_s * (speed.vs_bf16 or 1.0)) / 3600


def gpu_hours(flops: float, bf16: Bf16Rate, speed: Speed) -> float:
    """Hours of one GPU for `flops` (as MFU counts them: `mfu_flops`) at BF16's FLOP/s (`bf16_rate`), slowed by the
    recipe's speed."""
    return flops / (bf16.flops_per_s * (speed.vs_bf16 or 1.0)) / 3600


def corpus_vocab_size(spec) -> int | None:
    """The vocabulary the sweep's runs train with, whose LM head MFU counts: a prepared dir's (its
    meta.json); for a raw corpus that `launch` prepares (`spec.corpus`), its prepared copy's where one is
    sound, else the one `scaling data prepare` gives (DEFAULT_VOCAB_SIZE); None for the built-in corpus,
    whose vocab is each run's resolved `vocab_size` (train.vocab_size, else BUILTIN_VOCAB_SIZE)."""
    from scaling import data

    if spec.data == "builtin":
        return None
    try:
        return int(data.read_meta(spec.data)["vocab_size"])
    except UserError:
        if spec.corpus:  # not prepared yet (or damaged): launch prepares it at the default vocab
            return data.DEFAULT_VOCAB_SIZE
        raise  # a data dir launch would refuse too, naming the fix


def mfu_flops(r, vocab_size: int | None) -> float:
    """A run's training FLOPs as MFU counts them (result.json's `flops_exact`, `scaling bench train`):
    flops_per_token_exact at the corpus's `vocab_size` (`corpus_vocab_size`; None: the config's) and the
    run's seq_len, times the tokens it trains (its budget in whole batches, as result.json counts them).
    `r`: the run's resolved config (`RunConfig.resolved()`)."""
    return float(r.model_size().flops_per_token_exact(vocab_size or r.vocab_size, r.seq_len) * r.whole_batch_tokens())


# An evaluation (`LanguageModel.evaluate`, under no_grad) is a forward pass: no backward, no optimizer step. Of the
# FLOPs a training step counts a token, 6·(N + V·width) + 12·depth·width·seq_len, the forward does
# 2·(N + V·width) + 4·depth·width·seq_len, a third: the backward does two GEMMs (dgrad, wgrad) for each forward one.
FORWARD_SHARE = 1 / 3


def evaluation_flops(r, vocab_size: int | None) -> tuple[float, float]:
    """A run's evaluation FLOPs: the forward passes over the tokens its evaluations read (`RunConfig.evaluated_tokens`),
    FORWARD_SHARE of a training step's FLOPs a token, as 6·N counts them (a CPU's hours are priced by) and as MFU
    counts them (`mfu_flops`'s, a GPU's). `r`: the run's resolved config.

    Priced at the training step's FLOP/s, each recipe at its measured training speed (`gpu_hours`, `cpu_hours`): an
    FP4 recipe's evaluation quantizes the forward GEMM's two operands only (no_grad: no backward operand is made), a
    third of the six a step quantizes, so its quantizer work is taken as a third of a step's, as its FLOPs are. On the
    2-thread CPU (nanochat 1M, one thread, 2026-12-07) a forward took 0.27-0.36 of a step's CPU time a token, bf16 and
    nvfp4 alike, at 8 x 64, 64 x 64 and 16 x 256 tokens (docs/sweeps.md); on a GPU the ratio was not measured."""
    size, tokens = r.model_size(), r.evaluated_tokens()
    per_token_exact = size.flops_per_token_exact(vocab_size or r.vocab_size, r.seq_len)
    return FORWARD_SHARE * size.flops_per_token() * tokens, FORWARD_SHARE * per_token_exact * tokens


# --- a recipe the benchmark has not measured -------------------------------------------------------


def quantizer_work(recipe) -> dict[str, int]:
    """What a recipe's quantizers do, counted over its six GEMM operands (scaling.recipes.OPERANDS):
    how many are quantized, the Hadamard work (the sum of the transform sizes: an RHT of size t costs
    ~t multiply-adds an element), how many round stochastically (SR elements, or MS-EDEN's SR scales),
    use two-level scales (a block scale and a tensor scale), 4/6 or MS-EDEN; and whether the backward
    re-quantizes the forward's operands (Quartet II). Each count can only add work."""
    from scaling.recipes import OPERANDS

    specs = [s for s in (getattr(recipe, o) for o in OPERANDS) if s is not None]
    return {
        "operands": len(specs),
        "rht": sum(s.transform for s in specs),
        "sr": sum(s.rounding == "sr" or s.eden for s in specs),
        "two_level": sum(s.block is not None and s.tensor_scale for s in specs),
        "four_over_six": sum(s.four_over_six for s in specs),
        "eden": sum(s.eden for s in specs),
        "backward_from_forward": int(recipe.backward_from_forward),
    }


def does_all_of(work: dict[str, int], other: dict[str, int]) -> bool:
    """Whether a recipe of quantizer `work` does at least all of `other`'s, count by count."""
    return all(work[k] >= other[k] for k in other)


def priced_speed(recipe: str, family: str, size: str, rows: list[dict], source: str) -> Speed:
    """The speed a run of `recipe` (a preset, or a recipe file's path) is priced at: its recipe's own
    (speed_for, by the recipe's name: `scaling bench` keys a file's rows so); for a recipe the file has not
    measured (a recipe file of your own, or a preset not benchmarked), the slowest measured recipe
    whose quantizer work it does all of (quantizer_work, count by count: it can be no faster than
    that), at the run's size as speed_for picks it; where it does all of no measured quantized
    recipe's work, the slowest measured quantized recipe (an upper bound)."""
    from scaling.recipes import PRESETS, get_recipe

    chosen = get_recipe(recipe)
    own = speed_for(chosen.name, family, size, rows, source)  # (rows name a recipe file's recipe by its name)
    if own.vs_bf16 is not None:
        return own
    if not chosen.is_quantized:  # every operand BF16 (a file that only keeps blocks in BF16, say)
        return Speed(1.0, "as bf16: it quantizes no operand")
    work = quantizer_work(chosen)
    measured = {}
    for name in dict.fromkeys(r["recipe"] for r in rows):
        preset = PRESETS.get(name)  # a row's recipe file is not at hand: only presets' work is known
        if preset is not None and preset.is_quantized:
            measured[name] = quantizer_work(preset), speed_for(name, family, size, rows, source)
    if not measured:
        return Speed(None, "not measured, nor any quantized recipe: counted at BF16's speed")
    floor = {n: s for n, (w, s) in measured.items() if does_all_of(work, w)}
    name, speed = min((floor or {n: s for n, (_, s) in measured.items()}).items(), key=lambda item: item[1].vs_bf16)
    why = (f"the slowest measured recipe whose quantizer work it does all of ({', '.join(floor)})" if floor else
           "the slowest measured quantized recipe, since it does all the quantizer work of none")
    return Speed(speed.vs_bf16, f"as {name}: {speed.source}",
                 f"not measured in {source}; priced as {name}, {why}", at=speed.at, seq_len=speed.seq_len,
                 startup=speed.startup, batch=speed.batch)
