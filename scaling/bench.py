"""Benchmarks on one CUDA device (quantizer kernels, QLinear forward+backward, training steps), and
without one: sm_90 machine code (sass) and the trainer's CPU step (cpu).

Every section returns rows for one JSON file (`scaling bench ... --out reports/bench/<name>.json`):
{"device", "date", "versions", "copy_gbps",
 "kernels": [{"name", "recipe", "operand", "gbps", "gbps_back_to_back", "copy_gbps"}],
 "linear": [{"recipe", "d", "tokens", "ms", "ratio_vs_bf16", "ratio_range", "bf16_ms", "sm_mhz"}],
 "train": [{"recipe", "family", "size", "tokens_per_s", "mfu", "ratio_vs_bf16", and the shape measured at:
            "batch_tokens", "accumulate", "compile_mode", "micro_batch", "seq_len", "vocab_size" (TRAIN_SHAPE), and
            the start-up: "startup_s", "import_s" (`startup_fields`)}]}

Each row a GPU section measures also carries "measured" (its call's date, the header's) and
"git_commit" (the code it measured): a file gathers rows from many calls (rows before 2026-12-06 ~09:00
have neither; the file's `notes` name their calls).

How each number is taken (docs/kernels.md, "Benchmarks", says more):
- copy_gbps: a 1 GiB device-to-device copy, bytes read + written over the median time.
- kernels: one (16384, 4096) BF16 tensor quantized along the operand's K as the recipe's GEMM does,
  each stage replayed from a CUDA graph, one call per replay (gbps), and 10 calls back to back per
  replay alternating between two copies of the tensor (gbps_back_to_back: `back_to_back_ms`, as a
  CUDA-graphed training step runs its kernels); the row "copy" (recipe "bf16", operand "x") is a
  plain copy of the tensor timed both ways, the rates' yardstick at their own size
  (dim -1 for fprop X/W and dgrad dY, dim 0 for dgrad W and both wgrad operands); each row's
  copy_gbps is its call's 1 GiB copy (the header's when it ran), what `scaling bench targets`
  judges it against, since the copy rate moves a few percent between calls. "amax" (the
  tensor-amax pass of two-level/per-tensor scaling) counts the bytes it reads; "quantize" (the
  fused kernel), "transpose" (the copy with K moved last that MS-EDEN along dim 0 quantizes),
  "transpose+amax" (that copy and its amax pass in one kernel: MS-EDEN's; operand
  "dgrad.dy+wgrad.dy": the one that also finds dgrad dY's amax, as QLinear's backward runs it) and
  "gemm_operand" (all stages, as QLinear calls them) count bytes read + written.
- linear: QLinear(d, d) forward + backward on 16384 tokens, FP32 master weight, BF16 autocast,
  against nn.Linear in the same setting; replayed from a CUDA graph (no launch gaps). Each recipe is
  timed alternately with bf16 (LINEAR_ROUNDS times, a median of 20 replays each): ms is the median of
  its times, ratio_vs_bf16 the median of the paired ratios and ratio_range their least and greatest
  (the GPU's clocks drift by a few percent between calls, more than some differences measured),
  bf16_ms the median of the bf16 times paired with them, and sm_mhz the median of the SM clock NVML
  reports after each round (over its last sample period, 1/6 to 1 s: the rounds' clock, roughly;
  None where NVML cannot be read).
- loss: the LM loss over (32768 tokens, 32768 vocab) BF16 logits, forward + backward, replayed from a
  CUDA graph: the Triton kernels the head runs on a GPU (scaling.kernels.cross_entropy) and the same
  loss as torch ops compiled by inductor (models.layers.lm_loss), soft-capped at 15 (nanochat) and
  not (llama2); gbps counts the kernels' bytes (logits read twice, their gradient written once).
- sass (no GPU): the sm_90 machine code of each tile the tuner tries, compiled here
  (scaling.kernels.sass), per kernel ("stage": quantize, amax or transpose+amax, as in "kernels"):
  instructions per element, registers, stack bytes, barriers, shuffles.
- train: training steps as scaling.train runs them, under BF16 autocast on random tokens (vocabulary
  32768, the GPU corpus's): the trainer's micro-batches (64 x 1024 tokens up to 160M, 32 x 1024 at
  324M; --batch), as many per Muon + AdamW step as the trainer's batch rule gives a compute-optimal
  run (4 at 160M; --accumulate), the model
  compiled one block at a time (scaling.compiling);
  MFU = 6·(N + V·width) + 12·depth·width·seq_len FLOPs per token (ModelSize.flops_per_token_exact,
  V the vocabulary) x tokens/s / the GPU's dense BF16 peak (scaling.train.PEAK_BF16_FLOPS).
  startup_s: the wall seconds from the start of building the row's run to the end of its two warm-up steps
  (compilation, CUDA-graph recording), less two steady steps (`StepTimes`); import_s: a fresh process's start,
  imports of the trainer and CUDA's start-up (`import_seconds`, once a call). `sweep plan` prices both.
- profile: where a training micro-batch's GPU time goes, per recipe: torch.profiler's kernel times
  over the forward and backward of two micro-batches (no optimizer step; compile mode default),
  summed by kind of kernel (`kernel_kind`: quantize, amax, transpose, gemm, attention, inductor,
  loss, scale epilogue, other); rows {"family", "size", "recipe", "batch_tokens", "kind", "ms",
  "over_bf16_ms"} per micro-batch, a "total" row each.
- stages (writes no rows): every stage `kernels` times, once each inside a profiler range
  (`profile_stages`), for Nsight Compute's counters (`ncu --profile-from-start off`).
- quantizer (no GPU): each activation operand of a recipe on this CPU, the reference against the
  fused C quantizer (scaling.cpu_quantize): rows {"recipe", "operand", "tokens", "d", "reference_ms",
  "fused_ms", "speedup", "bits_equal"}.
- cpu (no GPU): training steps on this machine's CPU as `scaling train` runs a 2M-token run of the
  micro sizes on the built-in corpus: float32, eager, the run's quantizer; {"cpu", "threads",
  "quantizer"} name the machine and which quantizer ran, rows {"recipe", "family", "size", "step_ms",
  "step_cpu_ms", "tokens_per_s", "cpu_ratio_vs_bf16", "run_s"}, the shape measured at ("batch_tokens",
  "micro_batch", "accumulate", "seq_len", "vocab_size", "compile_mode": `cpu_shape`) and the start-up, as train's
  with its CPU seconds too ("startup_s", "startup_cpu_s", "import_s", "import_cpu_s": `startup_fields`; since
  2026-12-07 ~23:30: older rows have none, and `sweep plan` prices no start-up for the runs priced from them).
"""

from __future__ import annotations

import datetime
import platform
import time
from typing import Callable, NamedTuple

import torch

from scaling.recipes import OPERANDS, get_recipe, operand_name

# The dim each operand is quantized along (its GEMM's K) in QLinear: (T, in) X, (out, in) W, (T, out) dY.
OPERAND_DIM = {"fprop_x": -1, "fprop_w": -1, "dgrad_dy": -1, "dgrad_w": 0, "wgrad_dy": 0, "wgrad_x": 0}
LINEAR_RECIPES = ("nvfp4", "mxfp4", "mxfp4_h16", "ufp4", "quartet2", "mxfp8", "fp8")
KERNEL_RECIPES = LINEAR_RECIPES
TRAIN_RECIPES = ("bf16", "nvfp4", "mxfp4", "mxfp4_h16", "ufp4", "quartet2")
SEQ_LEN = 1024  # bench train's sequences (the GPU ladder's)


def median(values: list[float]) -> float:
    """The middle value (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def median_ms(fn: Callable[[], None], warmup: int = 5, reps: int = 30) -> float:
    """Median wall time of fn on the current CUDA stream, in ms (events around each call)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return median(times)


def graph_replay(fn: Callable[[], None]) -> Callable[[], None]:
    """fn, after 3 warm-up calls, captured in a CUDA graph: the graph's replay (fn itself where the
    capture fails)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return fn
    return graph.replay


def graph_ms(fn: Callable[[], None], reps: int = 20) -> float:
    """Median time of fn replayed from a CUDA graph (falls back to plain launches if capture fails)."""
    return median_ms(graph_replay(fn), warmup=2, reps=reps)


BACK_TO_BACK = 10  # calls per replay in bench_kernels


def back_to_back_ms(fns: list[Callable[[], None]], calls: int = BACK_TO_BACK) -> float:
    """Time per call of `calls` calls captured back to back in one CUDA graph, cycling through fns (one
    stage on different copies of its input, so that no call finds its input in the L2 cache where the
    call before left it): a stage as a CUDA-graphed training step runs it, with no idle GPU and no
    timing events between calls. (On the H200, 2026-12-03, the quantizer kernels measured 1-26 us
    faster per call this way than one call per replay, in calls of their own: docs/kernels-log.md,
    "Where a training step's time goes".)"""
    def calls_in_turn() -> None:
        for i in range(calls):
            fns[i % len(fns)]()

    return graph_ms(calls_in_turn) / calls


LINEAR_ROUNDS = 5  # bf16 and a recipe timed alternately, so that the GPU's drift between calls cancels


def sm_clock_mhz(device: torch.device) -> float | None:
    """The device's SM clock in MHz over NVML's last sample period (torch.cuda.clock_rate), or None
    where NVML cannot be read (no pynvml, no NVIDIA driver)."""
    if device.type != "cuda":
        return None
    try:
        import pynvml  # (what torch reads NVML through: the nvidia-ml-py package)
    except ImportError:
        return None
    try:
        return float(torch.cuda.clock_rate(device))
    except pynvml.NVMLError:
        return None


def _median_or_none(values: list[float | None]) -> float | None:
    return None if None in values else median(values)


def _timed_rounds(fns: list[Callable[[], None]], device: torch.device) -> tuple[list[list[float]], float | None]:
    """LINEAR_ROUNDS rounds, each timing every fn in turn (a median of 20 calls, in ms): the rounds'
    times, and the median of the SM clock read after each round."""
    times, clocks = [], []
    for _ in range(LINEAR_ROUNDS):
        times.append([median_ms(fn, warmup=2, reps=20) for fn in fns])
        clocks.append(sm_clock_mhz(device))
    return times, _median_or_none(clocks)


def copy_gbps(device: torch.device) -> float:
    src = torch.randn(2**28, device=device)  # 1 GiB of float32
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps=20)
    return 2 * src.numel() * src.element_size() / ms / 1e6


def recipe_key(recipe: str) -> str:
    """The name a benchmark row keys a recipe by (`--recipes` item: a preset or a recipe file): the
    recipe's own name, not a file's path, so that one recipe given by two paths is one row and `sweep
    plan`, which finds a run's speed by its recipe's name, finds it."""
    return get_recipe(recipe).name


def _preset_operands(recipes):
    """(recipe name, operand, spec, dim) for every quantized operand of these recipes, dim its K's axis."""
    for recipe_name in recipes:
        recipe = get_recipe(recipe_name)
        for operand in OPERANDS:
            spec = getattr(recipe, operand)
            if spec is not None:
                yield recipe.name, operand, spec, OPERAND_DIM[operand]


def no_kernel_line(recipe: str, operand: str, spec, why: str) -> str:
    """'<recipe>.<operand> (<spec>) has no fused kernel: <why> (QLinear quantizes it with the reference)': what
    bench says of an operand it cannot time (kernels, stages) or compile (sass's refusal), in train's words."""
    from scaling import kernels

    return f"{recipe}.{kernels.no_kernel(operand, spec, why)} (QLinear quantizes it with the reference)"


def _kernel_operands(recipes, progress: Callable[[str], None]):
    """`_preset_operands` that the fused kernels cover; for each of the others a line saying it has no
    kernel (a recipe file's 1x24 blocks: QLinear runs the reference for it), where it was skipped
    without a word."""
    from scaling import kernels

    for recipe_name, operand, spec, dim in _preset_operands(recipes):
        why = kernels.unsupported(spec)
        if why is None:
            yield recipe_name, operand, spec, dim
        else:
            progress(f"  {no_kernel_line(recipe_name, operand, spec, why)}; not timed")


BENCH_SEEDS = (12345, 678)  # (rounding, signs) seeds of every operand the kernel benchmarks quantize


def _operand_launch(x: torch.Tensor, spec, dim: int, seeds: torch.Tensor):
    """The kernels' launch of one operand of x, in BF16, with the seeds where its spec draws any."""
    from scaling.kernels.quantize import Launch

    return Launch(x, spec, dim, seeds if spec.needs_seed else None, torch.bfloat16)


def _pair_launch(x: torch.Tensor, last, first, seeds: torch.Tensor):
    """The pair kernel's launch of x's two operands (along the last axis, along dim 0), in BF16."""
    from scaling.kernels.pair import PairLaunch

    return PairLaunch(x, last, seeds if last.needs_seed else None, first, seeds if first.needs_seed else None,
                      torch.bfloat16)


def bench_kernels(device: torch.device, tokens: int = 16384, d: int = 4096,
                  recipes: list[str] | None = None, progress: Callable[[str], None] = print,
                  on_row: Callable[[list[dict]], None] | None = None, copy: float | None = None) -> list[dict]:
    """The kernels section's rows (the module docstring says how each is taken), each with this
    call's 1 GiB copy rate `copy` (measured here when not given) as copy_gbps. on_row: called with
    the rows so far after each operand while every operand so far had the reference's bits, so a call
    cut short keeps what it measured; a difference raises at the end, after every operand ran."""
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
    xs = (x, x.clone())  # (back_to_back_ms alternates between the copies)
    seeds = torch.tensor(BENCH_SEEDS, dtype=torch.int64, device=device)
    done: dict = {}
    copy = round(copy or copy_gbps(device), 1)
    rows, mismatches = [], []

    def measured(new_rows: list[dict]) -> None:
        rows.extend(r | {"copy_gbps": copy} for r in new_rows)
        if on_row is not None and not any(mismatches):
            on_row(list(rows))

    measured(_copy_rows(xs, progress))
    for recipe_name, operand, spec, dim in _kernel_operands(recipes or KERNEL_RECIPES, progress):
        key = (spec, dim)
        if key not in done:
            launches = [_operand_launch(xi, spec, dim, seeds) for xi in xs]
            launch = launches[0]
            t = _timed_stages(launches)
            # The tuned kernels at full size against the reference, bit for bit.
            bad = _bits_differing(*launch.result(), x, spec, dim)
            mismatches.append(bad)
            done[key] = _gbps(t, x, written=1)
            tiles = "; ".join(f"{k}: {v}" for k, v in launch.tuned_configs().items())
            progress(f"  {recipe_name}.{operand} ({spec.describe()}, dim {dim}) [{tiles}]: {_rates(done[key])}"
                     + f"; bits vs reference: {'equal' if bad == 0 else f'{bad} DIFFER'}")
        measured(_kernel_rows(recipe_name, operand_name(operand), done[key]))
    _bench_pairs(xs, recipes or KERNEL_RECIPES, seeds, mismatches, progress, measured)
    _bench_rows_amaxes(xs, recipes or KERNEL_RECIPES, seeds, mismatches, progress, measured)
    if any(mismatches):
        raise RuntimeError(f"kernel and reference bits differ for {sum(m > 0 for m in mismatches)} operand(s)")
    return rows


def _copy_rows(xs: tuple[torch.Tensor, torch.Tensor], progress: Callable[[str], None]) -> list[dict]:
    """The row of a plain copy of the kernels' tensor (name "copy", recipe "bf16": x moved as it is),
    timed both ways as the quantizer stages are: what their rates compare with at their own size (the
    header's copy_gbps copies 1 GiB, where a call's fixed costs do not show)."""
    copies = [torch.empty_like(xi) for xi in xs]
    fns = [lambda src=src, dst=dst: dst.copy_(src) for src, dst in zip(xs, copies)]
    gbps = _gbps({"copy": (graph_ms(fns[0]), back_to_back_ms(fns))}, xs[0], written=1)
    progress(f"  copy of the {tuple(xs[0].shape)} tensor: {_rates(gbps)}")
    return _kernel_rows("bf16", "x", gbps)


def _bits_differing(out: torch.Tensor, inv: torch.Tensor, x: torch.Tensor, spec, dim: int) -> int:
    """How many of a kernel operand's BF16 bit patterns (zero signs too), and of its inverse scale,
    differ from the reference's for x under BENCH_SEEDS (bench_kernels' seeds)."""
    from scaling import quant
    from scaling.seeds import Seeds

    ref, ref_inv = quant.gemm_operand(x, spec, dim, Seeds(*BENCH_SEEDS), torch.bfloat16)
    return int((out.view(torch.int16) != ref.view(torch.int16)).sum()) + int(not torch.equal(inv, ref_inv))


# The operand pairs QLinear quantizes from one read (scaling.kernels.pair): (along the last axis, along dim 0).
PAIRS = (("fprop_x", "wgrad_x"), ("dgrad_dy", "wgrad_dy"))


def _preset_pairs(recipes):
    """(recipe name, "fprop.x+wgrad.x" or dY's, spec along the last axis, spec along dim 0) of every
    pair of these recipes the pair kernel serves."""
    from scaling.kernels.pair import pairable

    for recipe_name in recipes:
        recipe = get_recipe(recipe_name)
        for last_name, first_name in PAIRS:
            last, first = getattr(recipe, last_name), getattr(recipe, first_name)
            if pairable(last, first):
                yield recipe.name, f"{operand_name(last_name)}+{operand_name(first_name)}", last, first


def _bench_pairs(xs: tuple[torch.Tensor, torch.Tensor], recipes, seeds: torch.Tensor, mismatches: list[int],
                 progress: Callable[[str], None], measured: Callable[[list[dict]], None]) -> None:
    """bench_kernels' rows of the pair kernel, each operand's passed to `measured`: operand
    "fprop.x+wgrad.x" (or dY's), "amax" counting the bytes it reads, "quantize" and "gemm_operand"
    (both stages) x read once and two operands written; bits checked against the reference (x: the
    first of the two copies)."""
    x = xs[0]
    for recipe_name, operand, last, first in _preset_pairs(recipes):
        launches = [_pair_launch(xi, last, first, seeds) for xi in xs]
        launch = launches[0]
        t = _timed_stages(launches)
        out_last, inv_last, out_first, inv_first = launch.result()
        bad = _bits_differing(out_last, inv_last, x, last, -1) + _bits_differing(out_first, inv_first, x, first, 0)
        mismatches.append(bad)
        gbps = _gbps(t, x, written=2)
        tiles = "; ".join(f"{k}: {v}" for k, v in launch.tuned_configs().items())
        progress(f"  {recipe_name}.{operand} (pair) [{tiles}]: {_rates(gbps)}"
                 + f"; bits vs reference: {'equal' if bad == 0 else f'{bad} DIFFER'}")
        measured(_kernel_rows(recipe_name, operand, gbps))


def _rows_amax_launches(x: torch.Tensor, recipe, seeds: torch.Tensor):
    """(wgrad dY's launch, dgrad dY's) of x where one transposing pass takes both amaxes
    (`rht128.serves_rows_amax`: QLinear's backward under MS-EDEN), else None."""
    from scaling.kernels import rht128

    if recipe.wgrad_dy is None or recipe.dgrad_dy is None:
        return None
    launch, rows = _operand_launch(x, recipe.wgrad_dy, 0, seeds), _operand_launch(x, recipe.dgrad_dy, -1, seeds)
    return (launch, rows) if rht128.serves_rows_amax(launch, rows) else None


def _bench_rows_amaxes(xs: tuple[torch.Tensor, torch.Tensor], recipes, seeds: torch.Tensor, mismatches: list[int],
                       progress: Callable[[str], None], measured: Callable[[list[dict]], None]) -> None:
    """bench_kernels' rows of the transposing pass that also finds dgrad dY's amax (operand
    "dgrad.dy+wgrad.dy", "transpose+amax": x read once, its copy written), where a recipe's dY takes
    it; bits: both operands quantized after it against the reference's."""
    for recipe_name in recipes:
        recipe = get_recipe(recipe_name)
        found = [_rows_amax_launches(xi, recipe, seeds) for xi in xs]
        if found[0] is None:
            continue
        fns = [lambda ln=ln, rows=rows: ln.run_move_amax(rows) for ln, rows in found]
        fns[0]()
        t = {"transpose+amax": (graph_ms(fns[0]), back_to_back_ms(fns))}
        launch, rows = found[0]
        launch.run_quantize()
        rows.run_quantize()
        bad = (_bits_differing(*launch.result(), xs[0], recipe.wgrad_dy, 0)
               + _bits_differing(*rows.result(), xs[0], recipe.dgrad_dy, -1))
        mismatches.append(bad)
        gbps = _gbps(t, xs[0], written=1)
        tile = _rows_tile(launch)
        progress(f"  {recipe.name}.dgrad.dy+wgrad.dy (transposing pass with both amaxes) [{tile}]: {_rates(gbps)}"
                 + f"; bits vs reference: {'equal' if bad == 0 else f'{bad} DIFFER'}")
        measured(_kernel_rows(recipe.name, "dgrad.dy+wgrad.dy", gbps))


def _rows_tile(launch) -> str:
    """The tile the tuner chose for a launch's transposing pass with the rows' amax ("" untuned)."""
    from scaling.kernels import rht128

    if not launch.tuned:
        return ""
    return rht128.tuned_config({**launch.cfg, "T": launch.x.shape[0], "D": launch.x.shape[1]}, True, True) or ""


def _stages(launch) -> dict[str, Callable[[], None]]:
    """A (Pair)Launch's kernels in the order QLinear runs them: "transpose" where it moves K last,
    "amax" where it needs one ("transpose+amax" where one kernel does both), "quantize"."""
    if launch.moves_with_amax:
        named = {"transpose+amax": launch.run_move_amax}
    else:
        named = {"transpose": launch.run_move} if launch.needs_move else {}
        if launch.needs_amax:
            named["amax"] = launch.run_amax
    return named | {"quantize": launch.run_quantize}


def _timed_stages(launches: list) -> dict[str, tuple[float, float]]:
    """Each stage of a (Pair)Launch (`_stages`), as (ms per call replayed alone, ms per call back to
    back), the latter alternating between the launches (one per copy of the input), and
    "gemm_operand" (all its stages in order)."""
    per_launch = [_stages(ln) for ln in launches]
    for stages in per_launch:
        next(iter(stages.values()))()  # (a moved copy filled before its readers are timed alone)
    named = {name: [stages[name] for stages in per_launch] for name in per_launch[0]}
    named["gemm_operand"] = [lambda fs=tuple(stages.values()): [f() for f in fs] for stages in per_launch]
    # Replayed from CUDA graphs: a launch's Python cost (tens of us) would otherwise count.
    return {name: (graph_ms(fns[0]), back_to_back_ms(fns)) for name, fns in named.items()}


def profile_stages(device: torch.device, tokens: int = 16384, d: int = 4096, recipes: list[str] | None = None,
                   progress: Callable[[str], None] = print) -> list[str]:
    """Every quantizer stage `bench_kernels` times (the same tensor, operands, pairs and tuned tiles),
    each run once between torch.cuda.profiler.start() and stop(), after three untimed rounds (the
    tuning): for a profiler that records only that range, e.g. Nsight Compute,
    `ncu --profile-from-start off --clock-control none --section ... scaling bench stages`. Returns the
    stages' names ("<recipe>.<operand> <stage>") in the order they ran: the profiler's kernels, one
    each."""
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
    seeds = torch.tensor(BENCH_SEEDS, dtype=torch.int64, device=device)
    named, done = {}, set()
    for recipe_name, operand, spec, dim in _kernel_operands(recipes or KERNEL_RECIPES, progress):
        if (spec, dim) not in done:
            done.add((spec, dim))
            launch = _operand_launch(x, spec, dim, seeds)
            named |= {f"{recipe_name}.{operand.replace('_', '.')} {k}": f for k, f in _stages(launch).items()}
    for recipe_name, operand, last, first in _preset_pairs(recipes or KERNEL_RECIPES):
        launch = _pair_launch(x, last, first, seeds)
        named |= {f"{recipe_name}.{operand} {k}": f for k, f in _stages(launch).items()}
    for _ in range(3):
        for fn in named.values():
            fn()
    torch.cuda.synchronize(device)
    torch.cuda.profiler.start()
    for name, fn in named.items():
        fn()
        progress(f"  {name}")
    torch.cuda.synchronize(device)
    torch.cuda.profiler.stop()
    return list(named)


def _gbps(times: dict[str, tuple[float, float]], x: torch.Tensor, written: int) -> dict[str, list[float]]:
    """GB/s of each stage's two times (ms): x read once, plus `written` tensors of x's size written by
    every stage but the amax pass (which only reads)."""
    x_bytes = x.numel() * x.element_size()
    return {name: [x_bytes * (1 if name == "amax" else 1 + written) / ms / 1e6 for ms in pair]
            for name, pair in times.items()}


def _rates(gbps: dict[str, list[float]]) -> str:
    return ", ".join(f"{k} {alone:.0f} GB/s ({back:.0f} back to back)" for k, (alone, back) in gbps.items())


def _kernel_rows(recipe: str, operand: str, gbps: dict[str, list[float]]) -> list[dict]:
    return [{"name": name, "recipe": recipe, "operand": operand, "gbps": round(alone, 1),
             "gbps_back_to_back": round(back, 1)} for name, (alone, back) in gbps.items()]


def bench_loss(device: torch.device, tokens: int = 32768, vocab: int = 32768,
               progress: Callable[[str], None] = print) -> list[dict]:
    from models.layers import lm_loss
    from scaling.kernels.cross_entropy import row_losses

    logits = (torch.randn(tokens, vocab, device=device) * 4).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (tokens,), device=device)
    kernel_bytes = 3 * logits.numel() * logits.element_size()
    rows = []

    def forward_backward(loss_fn) -> None:
        z = logits.detach().requires_grad_()
        loss_fn(z).backward()

    for cap in (15.0, None):
        compiled = torch.compile(lambda z, cap=cap: lm_loss(z, targets, cap))
        ms = graph_ms(lambda cap=cap: forward_backward(lambda z: row_losses(z, targets, cap).mean()))
        torch_ms = graph_ms(lambda compiled=compiled: forward_backward(compiled))
        rows.append({"name": "lm_loss", "cap": cap, "tokens": tokens, "vocab": vocab, "ms": round(ms, 3),
                     "torch_compiled_ms": round(torch_ms, 3), "gbps": round(kernel_bytes / ms / 1e6, 1)})
        progress(f"  lm_loss cap {cap}, {tokens} x {vocab} BF16 logits, forward + backward: {ms:.3f} ms "
                 f"({kernel_bytes / ms / 1e6:.0f} GB/s); torch ops compiled: {torch_ms:.3f} ms")
    return rows


def bench_sass(tokens: int = 16384, d: int = 4096, recipes: list[str] | None = None,
               progress: Callable[[str], None] = print) -> list[dict]:
    """sm_90 machine code of every tile the GPU autotuner tries for each preset operand's kernels,
    compiled here without a GPU (scaling.kernels.sass): instructions per element, registers, stack,
    barriers and shuffles, for the kernels' (tokens, d) input as `bench_kernels` quantizes it. Each
    row's "stage" is the kernel's, as `bench kernels` names it: "quantize", "amax" or
    "transpose+amax"."""
    from scaling.kernels import sass

    done: dict = {}
    rows = []
    for recipe_name, operand, spec, dim in _preset_operands(recipes or KERNEL_RECIPES):
        K = d if dim == -1 else tokens
        if (spec, dim) not in done:
            quantize = [{"stage": "quantize", **sass.count(spec, dim, K, *tile)}
                        for tile in sass.candidates(spec, dim, K)]
            done[(spec, dim)] = quantize + sass.amax_counts(spec, dim, K)
            _sass_progress(f"{recipe_name}.{operand_name(operand)} ({spec.describe()}, dim {dim})", done[(spec, dim)],
                           progress)  # (named as its rows name it: fprop.x, not fprop_x)
        rows += [{"recipe": recipe_name, "operand": operand_name(operand), "dim": dim, **r}
                 for r in done[(spec, dim)]]
    return (rows + _sass_pairs(tokens, d, recipes or KERNEL_RECIPES, progress)
            + _sass_rows_amaxes(tokens, d, recipes or KERNEL_RECIPES, progress))


def _sass_progress(what: str, rows: list[dict], progress: Callable[[str], None]) -> None:
    """A line per stage of bench_sass's rows: how many tiles, and the one of fewest instructions."""
    for stage in dict.fromkeys(r["stage"] for r in rows):
        mine = [r for r in rows if r["stage"] == stage]
        best = min(mine, key=lambda r: r["instructions_per_element"])
        progress(f"  {what} {stage}: {len(mine)} tiles, fewest {best['instructions_per_element']} instructions per "
                 f"element (TILE {best['tile']} BK {best['bk']} warps {best['warps']} narrow {best['narrow']} halves "
                 f"{best['halves']} iters {best['iters']}, {best['registers']} registers)")


def _sass_pairs(tokens: int, d: int, recipes, progress: Callable[[str], None]) -> list[dict]:
    """bench_sass's rows of the pair kernel (operand "fprop.x+wgrad.x" or dY's; no dim: both)."""
    from scaling.kernels import sass

    rows = []
    for recipe_name, operand, last, first in _preset_pairs(recipes):
        counts = [{"stage": "quantize", **sass.count_pair(last, first, tokens, d, *tile)}
                  for tile in sass.pair_candidates(last, first, tokens, d)]
        counts += sass.pair_amax_counts(last, first, tokens, d)
        _sass_progress(f"{recipe_name}.{operand} (pair)", counts, progress)
        rows += [{"recipe": recipe_name, "operand": operand, **r} for r in counts]
    return rows


def _sass_rows_amaxes(tokens: int, d: int, recipes, progress: Callable[[str], None]) -> list[dict]:
    """bench_sass's rows of dY's transposing pass that also takes dgrad's amax (operand
    "dgrad.dy+wgrad.dy", stage "transpose+amax"), where a recipe's dY takes it (`_rows_amax_launches`)."""
    from scaling.kernels import rht128, sass

    x, seeds = torch.empty(tokens, d, device="meta"), torch.tensor(BENCH_SEEDS)
    rows = []
    for recipe_name in recipes:
        recipe = get_recipe(recipe_name)
        if _rows_amax_launches(x, recipe, seeds) is None:
            continue
        counts = [{"stage": "transpose+amax",
                   **sass.count_transposing_amax(recipe.wgrad_dy, w, n, d, rows=True, lanes=lanes)}
                  for lanes in (1, 4) for w, n in rht128._ROWS_CANDIDATES]
        _sass_progress(f"{recipe.name}.dgrad.dy+wgrad.dy (transposing pass with both amaxes)", counts, progress)
        rows += [{"recipe": recipe.name, "operand": "dgrad.dy+wgrad.dy", **r} for r in counts]
    return rows


def bench_linear(device: torch.device, tokens: int = 16384, dims: tuple[int, ...] = (512, 1024, 2048, 4096),
                 recipes: tuple[str, ...] = LINEAR_RECIPES, progress: Callable[[str], None] = print,
                 on_row: Callable[[list[dict]], None] | None = None, top: int = 0) -> list[dict]:
    """QLinear(d, d) forward + backward against nn.Linear (rows as the module docstring says). top > 0:
    also each layer's `top` kernels by GPU time per call (torch.profiler over 10 replays of the timed
    CUDA graph, in us; shown, not kept), and its kernel time in all. Replays, not eager calls: on the
    H200 an eager profile put the FP4 layers' GEMMs ~30 us above bf16's, where inside the graph they
    run 13-19 us below (docs/kernels.md, "Benchmarks")."""
    from scaling.linear import QLinear, forget_reused

    rows = []
    for d in dims:
        x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
        base = torch.nn.Linear(d, d, bias=False, device=device)

        def step(layer):
            def fn():
                forget_reused()  # each call a new activation (the replayed graph holds the work anyway)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    y = layer(x)
                y.backward(dy)
            return fn

        def show(replay) -> None:
            if top > 0:
                by_name = kernel_ms(lambda: [replay() for _ in range(10)], 10)
                progress(f"    {len(by_name)} kernels, {sum(by_name.values()) * 1e3:.1f} us of kernel time per call")
                _show_kernels(by_name, top, progress, unit="us")

        bf16 = graph_replay(step(base))
        times, mhz = _timed_rounds([bf16], device)
        bf16_ms = median([t[0] for t in times])
        rows.append({"recipe": "bf16", "d": d, "tokens": tokens, "ms": round(bf16_ms, 4), "ratio_vs_bf16": 1.0,
                     "sm_mhz": mhz})
        progress(f"  d={d} bf16 {bf16_ms:.3f} ms" + (f" at {mhz:.0f} MHz" if mhz else ""))
        show(bf16)
        for name in recipes:
            layer = QLinear.from_linear(torch.nn.Linear(d, d, bias=False, device=device), get_recipe(name), 0, 0)
            run = graph_replay(step(layer))
            times, mhz = _timed_rounds([bf16, run], device)
            ratios = [t / b for b, t in times]
            ms, ratio = median([t for _, t in times]), median(ratios)
            paired_bf16_ms = median([b for b, _ in times])
            rows.append({"recipe": recipe_key(name), "d": d, "tokens": tokens, "ms": round(ms, 4), "ratio_vs_bf16": round(ratio, 3),
                         "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
                         "bf16_ms": round(paired_bf16_ms, 4), "sm_mhz": mhz})
            progress(f"  d={d} {name} {ms:.3f} ms ({ratio:.3f}x; {min(ratios):.3f}-{max(ratios):.3f}x "
                     f"over {LINEAR_ROUNDS} alternations with bf16 at {paired_bf16_ms:.3f} ms"
                     + (f"; {mhz:.0f} MHz)" if mhz else ")"))
            show(run)
            if on_row:
                on_row(rows)
    return rows


def train_accumulation(n_params: int, micro_batch: int, seq_len: int = 1024) -> int:
    """Micro-batches per optimizer step in a compute-optimal run (20 tokens per parameter), by the
    trainer's batch rule (scaling.hyperparams.batch_sequences): 256 sequences at 160M (4 of 64), 128 at
    40M (2 of 64)."""
    from scaling.hyperparams import batch_sequences

    return max(1, batch_sequences(n_params, 20 * n_params, seq_len) // micro_batch)


def training_step(family: str, size: str, recipe: str, device: torch.device, batch: int = 32,
                  accumulate: int = 1, seq_len: int = 1024, compile_mode: str | None = "default",
                  vocab_size: int | None = None) -> Callable[[int, bool], None]:
    """The trainer's optimizer step i as scaling.train runs it (`train.forward_backward`), on random
    tokens: `accumulate` micro-batches of `batch` sequences (fwd, bwd), then (unless `optimize` is
    False) the Muon + AdamW step; compiled by scaling.compiling (None: eager); BF16 autocast on CUDA,
    float32 on a CPU. Vocabulary: the GPU corpus's unless given."""
    from models import build_model
    from scaling import optim
    from scaling.compiling import compile_model, zero_grads
    from scaling.data import DEFAULT_VOCAB_SIZE
    from scaling.linear import convert
    from scaling.train import forward_backward

    vocab_size = vocab_size or DEFAULT_VOCAB_SIZE
    torch._dynamo.reset()  # each row compiles from scratch, as a run of its own would
    torch.manual_seed(0)
    model = build_model(family, size, vocab_size, seq_len).to(device)
    model = convert(model, get_recipe(recipe), seed=0)
    if compile_mode:
        compile_model(model, compile_mode)
    optimizers = optim.build_optimizers(model, model.lm_head.in_features)
    idx = torch.randint(0, vocab_size, (accumulate * batch, seq_len + 1), device=device)
    x, y = idx[:, :-1], idx[:, 1:]
    cuda = device.type == "cuda"

    def train_step(i: int, optimize: bool = True) -> None:
        zero_grads(model, optimizers, compile_mode)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            forward_backward(model, x, y, i, batch, compile_mode)
        if optimize:
            for opt in optimizers:
                opt.step()

    return train_step


class StepTimes(NamedTuple):
    """What `train_step_seconds` measures of a run: a steady training step's wall seconds and this process's CPU
    seconds (all its threads), and its start-up (`startup_s`, `startup_cpu_s`): the seconds from the start of
    building the run (`training_step`: the model, the recipe's conversion, compilation's wrapping, the optimizers) to
    the end of its warm-up steps (the first compiles the model on a GPU; under CUDA graphs the second records them),
    less as many steady steps: what a run pays before it trains at its steady pace, in a process that has already
    imported the trainer (`import_seconds` measures that apart). Never below 0 (a shared machine's noise)."""

    wall_s: float
    cpu_s: float
    startup_s: float
    startup_cpu_s: float


def train_step_seconds(family: str, size: str, recipe: str, device: torch.device, batch: int = 32,
                       accumulate: int = 1, seq_len: int = 1024, steps: int = 4, warmup: int = 2,
                       compile_mode: str | None = "default", vocab_size: int | None = None) -> StepTimes:
    """Wall seconds and this process's CPU seconds per training step (`training_step`), and the run's start-up
    (`StepTimes`)."""
    import scaling.train  # noqa: F401  (a process's imports are `import_seconds`', not the run's start-up)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    sync()
    start, cpu_start = time.perf_counter(), time.process_time()
    train_step = training_step(family, size, recipe, device, batch, accumulate, seq_len, compile_mode, vocab_size)
    for i in range(warmup):
        train_step(i)
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(warmup, warmup + steps):
        train_step(i)
    sync()
    wall_s, cpu_s = (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
    return StepTimes(wall_s, cpu_s, max(0.0, t0 - start - warmup * wall_s), max(0.0, c0 - cpu_start - warmup * cpu_s))


def import_seconds(device: torch.device) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) a fresh Python process takes to start and import the trainer
    (`scaling.train`, with torch and Lightning), and on a CUDA device to make its first tensor there (CUDA's
    start-up): what each process that trains runs pays once (a local launch's worker, a SLURM job), before any
    run's own start-up (`StepTimes`). One process, timed from here: it inherits this one's environment
    (OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES) and imports this checkout's code."""
    import resource
    import subprocess
    import sys
    from pathlib import Path

    import scaling

    code = "import scaling.train" + ("; import torch; torch.zeros(1, device='cuda')" if device.type == "cuda" else "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(scaling.__file__).resolve().parents[1])
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall_s, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


# What `bench profile` sorts GPU kernels into, by name: the first rule that matches (lowercase).
# Inductor's kernels come before the GEMMs: their names list the ops they fuse, which may be ours
# ("triton_poi_fused__to_copy_gemm_operand_pair_..." makes the pair kernel's input).
KERNEL_KINDS = (
    ("quantize", ("_quantize_kernel", "_pair_kernel")),
    ("amax", ("_amax_kernel", "_pair_amax_kernel")),
    ("transpose", ("_transpose_kernel",)),
    ("scale epilogue", ("_scale_cast_kernel",)),
    ("loss", ("_loss_forward_kernel", "_loss_backward_kernel")),
    ("inductor", ("triton_",)),
    ("attention", ("flash", "fmha", "cudnn", "attn", "sdpa")),
    ("gemm", ("gemm", "xmma", "nvjet", "cutlass", "cublas", "sm90_", "sm80_")),
)


def kernel_kind(name: str) -> str:
    """The KERNEL_KINDS entry a GPU kernel's name falls under, else "other" (torch's own elementwise
    and reduction kernels, copies, memsets)."""
    lower = name.lower()
    return next((kind for kind, marks in KERNEL_KINDS if any(m in lower for m in marks)), "other")


def profile_micro_batch(family: str, size: str, recipe: str, device: torch.device, batch: int = 32,
                        micro_batches: int = 2, seq_len: int = 1024, warmup: int = 2,
                        compile_mode: str = "default") -> dict[str, float]:
    """GPU kernel time (ms) per micro-batch, forward + backward without the optimizer step, by kernel
    name, from torch.profiler over `micro_batches` micro-batches after `warmup` steps. Kernel
    time, not wall time: under CUDA graphs the two agree (the GPU is never idle); without them an FP4
    step also waits on the host. Compile mode "default": CUDA-graph replays hide kernels from some
    profilers, and a kernel takes as long either way."""
    train_step = training_step(family, size, recipe, device, batch, micro_batches, seq_len, compile_mode)
    for i in range(warmup):
        train_step(i)
    return kernel_ms(lambda: train_step(warmup, optimize=False), micro_batches)


def kernel_ms(fn: Callable[[], None], per: int = 1) -> dict[str, float]:
    """GPU kernel time (ms) by kernel name of one fn() under torch.profiler, divided by `per`."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by_name: dict[str, float] = {}
    for event in prof.key_averages():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(event, "self_device_time_total", None)
        us = event.self_cuda_time_total if us is None else us
        by_name[event.key] = by_name.get(event.key, 0.0) + us / 1e3 / per
    return by_name


def _show_kernels(by_name: dict[str, float], top: int, progress: Callable[[str], None], unit: str = "ms") -> None:
    """The `top` kernels by time, one line each (us: in microseconds)."""
    factor = 1e3 if unit == "us" else 1.0
    for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]:
        progress(f"    {ms * factor:8.3f} {unit}  {kernel_kind(name):<14} {name[:150]}")


def _by_kind(by_name: dict[str, float]) -> dict[str, float]:
    kinds: dict[str, float] = {}
    for name, ms in by_name.items():
        kind = kernel_kind(name)
        kinds[kind] = kinds.get(kind, 0.0) + ms
    return kinds


def bench_profile(device: torch.device, families: tuple[str, ...] = ("nanochat",), sizes: tuple[str, ...] = ("160M",),
                  recipes: tuple[str, ...] = TRAIN_RECIPES, batch: int | None = None, top: int = 25,
                  progress: Callable[[str], None] = print,
                  on_row: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Where a training micro-batch's GPU time goes, per recipe (`profile_micro_batch`): one row per
    (family, size, recipe, kind) with ms per micro-batch of `batch` x 1024 tokens (None: the
    trainer's micro-batch, `scaling.config.default_micro_batch`) and the extra ms
    over the same kind under bf16 (measured first in the call); the `top` kernels by time are shown
    (progress), not kept."""
    from models import model_size
    from scaling.config import default_micro_batch

    rows = []
    for family in families:
        for size in sizes:
            base: dict[str, float] | None = None
            micro_batch = batch or default_micro_batch(model_size(family, size).n_params, SEQ_LEN)
            for recipe in ("bf16",) + tuple(r for r in recipes if r != "bf16"):
                start = time.perf_counter()
                try:
                    by_name = profile_micro_batch(family, size, recipe, device, batch=micro_batch, seq_len=SEQ_LEN)
                    kinds = _by_kind(by_name)
                except (RuntimeError, torch.OutOfMemoryError) as e:
                    progress(f"  {family} {size} {recipe}: FAILED: {str(e).splitlines()[0][:300]}")
                    if recipe == "bf16":
                        break
                    continue
                base = kinds if recipe == "bf16" else base
                total = sum(kinds.values())
                for kind in sorted(set(kinds) | set(base), key=lambda k: -kinds.get(k, 0.0)):
                    ms = kinds.get(kind, 0.0)
                    rows.append({"family": family, "size": size, "recipe": recipe_key(recipe),
                                 "batch_tokens": micro_batch * SEQ_LEN, "kind": kind, "ms": round(ms, 3),
                                 "over_bf16_ms": round(ms - base.get(kind, 0.0), 3)})
                rows.append({"family": family, "size": size, "recipe": recipe_key(recipe),
                             "batch_tokens": micro_batch * SEQ_LEN,
                             "kind": "total", "ms": round(total, 3),
                             "over_bf16_ms": round(total - sum(base.values()), 3)})
                progress(f"  {family} {size} {recipe}: {total:.1f} ms of kernels per micro-batch of "
                         f"{micro_batch} x {SEQ_LEN} tokens ({time.perf_counter() - start:.0f} s): "
                         + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
                _show_kernels(by_name, top, progress)
                if on_row:
                    on_row(rows)
    return rows


def bench_cpu(families: tuple[str, ...] = ("nanochat", "llama2"), sizes: tuple[str, ...] = ("1M",),
              recipes: tuple[str, ...] = ("bf16", "nvfp4"), steps: int = 8, tokens: int = 2_000_000,
              progress: Callable[[str], None] = print) -> list[dict]:
    """Training steps on this machine's CPU, as `scaling train --tokens <tokens>` on the built-in
    corpus runs them: float32, eager, the trainer's sequence length and batch for that run, the
    built-in corpus's vocabulary, the quantizer such a run uses (the fused C one of `cpu_quantize`
    where it builds, else the reference: `cpu_header` says which). `step_ms` is wall time; `step_cpu_ms`
    the process's CPU time (all threads), which a shared machine's stolen time does not inflate;
    ratios divide CPU times. `run_s`: the steps of such a run at this wall speed (evaluations and
    checkpoints not counted). The run's start-up (`StepTimes`: `startup_s` wall, `startup_cpu_s` CPU seconds) and a
    trainer process's (`import_seconds`, once a call: `import_s`, `import_cpu_s` on each row), which `sweep plan`
    prices."""
    from scaling.config import RunConfig

    cpu = torch.device("cpu")
    import_s, import_cpu_s = import_seconds(cpu)
    progress(f"  a fresh process imports the trainer in {import_s:.1f} s ({import_cpu_s:.1f} s of CPU time)")
    rows = []
    for family in families:
        for size in sizes:
            base = None
            for recipe in ("bf16",) + tuple(r for r in recipes if r != "bf16"):
                c = RunConfig(family, size, recipe, tokens).resolved()
                times = train_step_seconds(family, size, recipe, cpu, batch=c.batch_size, seq_len=c.seq_len,
                                           steps=steps, compile_mode=None, vocab_size=c.vocab_size)
                wall_s, cpu_s = times.wall_s, times.cpu_s
                base = base or cpu_s
                rows.append({"recipe": recipe_key(recipe), "family": family, "size": size,
                             "batch_tokens": c.batch_size * c.seq_len,
                             "step_ms": round(wall_s * 1e3, 1), "step_cpu_ms": round(cpu_s * 1e3, 1),
                             "tokens_per_s": round(c.batch_size * c.seq_len / wall_s),
                             "cpu_ratio_vs_bf16": round(cpu_s / base, 3), "run_s": round(c.steps * wall_s),
                             **cpu_shape(c), **startup_fields(times, import_s, import_cpu_s)})
                progress(f"  {family} {size} {recipe} ({c.batch_size} x {c.seq_len} tokens per step): "
                         f"{wall_s * 1e3:.0f} ms a step ({cpu_s * 1e3:.0f} ms of CPU time, {cpu_s / base:.2f}x bf16's); "
                         f"{c.steps} steps ~{c.steps * wall_s:.0f} s; start-up {times.startup_s:.2f} s "
                         f"({times.startup_cpu_s:.2f} s of CPU time)")
    return rows


def startup_fields(times: StepTimes, import_s: float, import_cpu_s: float | None = None) -> dict:
    """A row's start-up fields: the run's (`StepTimes`) and a fresh trainer process's imports
    (`import_seconds`), wall seconds, and on a CPU row (`import_cpu_s` given) their CPU seconds too."""
    wall = {"startup_s": round(times.startup_s, 3), "import_s": round(import_s, 2)}
    if import_cpu_s is None:
        return wall
    return {**wall, "startup_cpu_s": round(times.startup_cpu_s, 3), "import_cpu_s": round(import_cpu_s, 2)}



def cpu_shape(c) -> dict:
    """The shape a `cpu` row is measured at, as `bench_cpu` trains a resolved RunConfig `c`: one micro-batch of
    c.batch_size sequences a step (the micro CPU runs accumulate none), its seq_len and vocabulary, eager
    (compile_mode null, as `bench_train`'s None). Rows before 2026-12-07 ~20:30 record batch_tokens alone."""
    return {"micro_batch": c.batch_size, "accumulate": 1, "seq_len": c.seq_len, "vocab_size": c.vocab_size,
            "compile_mode": None}


QUANTIZER_TOKENS = 4096  # bench_cpu_quantizer's rows: the 1M models' 16 x 256 tokens


def bench_cpu_quantizer(recipes: tuple[str, ...] = ("nvfp4",), tokens: int = QUANTIZER_TOKENS,
                        dims: tuple[int, ...] = (128, 512),
                        reps: int = 20, progress: Callable[[str], None] = print) -> list[dict]:
    """Each activation operand of these recipes (fprop X and dgrad dY along the last axis, wgrad's
    along dim 0) of a (tokens, d) float32 tensor, quantized on this CPU by the reference and by the
    fused C quantizer (scaling.cpu_quantize): median wall ms of each, and whether their bits agree.
    The defaults are the 1M models' operands in `scaling train --tokens 2M` (16 x 256 tokens, widths
    128 and 512). fused_ms is None where the fused quantizer does not serve the spec or did not build."""
    from scaling import cpu_quantize, quant
    from scaling.seeds import Seeds

    def wall_ms(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2] * 1e3

    gen = torch.Generator().manual_seed(0)
    rows = []
    for recipe, operand, spec, dim in _preset_operands(recipes):
        if operand.endswith("_w"):
            continue
        for d in dims:
            x = torch.randn(tokens, d, generator=gen)
            seeds = Seeds(1234, 5678) if spec.needs_seed else None
            ref = lambda: quant.gemm_operand(x, spec, dim, seeds, torch.float32)  # noqa: E731
            row = {"recipe": recipe, "operand": operand_name(operand), "tokens": tokens, "d": d,
                   "reference_ms": round(wall_ms(ref), 3), "fused_ms": None, "speedup": None, "bits_equal": None}
            if cpu_quantize.serves(x, spec, dim):
                fused = lambda: cpu_quantize.gemm_operand(x, spec, dim, seeds, torch.float32)  # noqa: E731
                row["fused_ms"] = round(wall_ms(fused), 3)
                row["speedup"] = round(row["reference_ms"] / row["fused_ms"], 2)
                (a, inv_a), (b, inv_b) = ref(), fused()
                row["bits_equal"] = bool(torch.equal(a.view(torch.int32), b.view(torch.int32)) and torch.equal(inv_a, inv_b))
            rows.append(row)
            fused_text = (f"fused {row['fused_ms']:.2f} ms ({row['speedup']:.1f}x, bits "
                          f"{'equal' if row['bits_equal'] else 'DIFFER'})" if row["fused_ms"] is not None else "not fused")
            progress(f"  {recipe}.{row['operand']} ({tokens}, {d}) dim {dim}: reference {row['reference_ms']:.2f} ms, "
                     + fused_text)
    return rows


def cpu_header() -> dict:
    """The CPU the `cpu` and `quantizer` sections ran on: its model name, torch's thread count and
    which quantizer a CPU run uses here (the fused C one, or the reference where it does not build)."""
    from scaling import cpu_name, cpu_quantize

    quantizer = "fused C (scaling/cpu_quantize.c)" if cpu_quantize.library() is not None else "reference (no C compiler)"
    return {"cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__, "quantizer": quantizer,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def bench_train(device: torch.device, families: tuple[str, ...] = ("nanochat", "llama2"),
                sizes: tuple[str, ...] = ("40M", "160M"), recipes: tuple[str, ...] = TRAIN_RECIPES,
                steps: int = 4, batch: int | None = None, accumulate: int | None = None, compile_mode: str = "default",
                earlier: list[dict] | None = None, progress: Callable[[str], None] = print,
                on_row: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Tokens/s and MFU per (family, size, recipe). `batch` (sequences per micro-batch) and
    `accumulate` None: the trainer's at each size (scaling.config.default_micro_batch, train_accumulation). Each
    ratio_vs_bf16 divides by the bf16 row of the same family, size, micro-batch, compile mode and
    accumulation: measured in this call first,
    or taken from `earlier` rows when bf16 is not among `recipes` (so a later call can add recipes)."""
    from models import model_size
    from scaling.train import peak_flops

    peak = peak_flops(device)
    import_s, _ = import_seconds(device)
    progress(f"  a fresh process imports the trainer and starts CUDA in {import_s:.1f} s")
    rows = []
    for family in families:
        for size in sizes:
            shape = train_shape(model_size(family, size).n_params, batch, accumulate, compile_mode)
            micro_batch, micro_batches, seq_len = shape["micro_batch"], shape["accumulate"], shape["seq_len"]
            prior = [r for r in earlier or [] if r["family"] == family and r["size"] == size
                     and r["recipe"] == "bf16" and same_shape(r, shape)]
            base = prior[0]["tokens_per_s"] if prior and "bf16" not in recipes else None
            for recipe in ("bf16",) * (base is None) + tuple(r for r in recipes if r != "bf16"):
                start = time.perf_counter()
                try:
                    times = train_step_seconds(family, size, recipe, device, batch=micro_batch,
                                               accumulate=micro_batches, seq_len=seq_len, steps=steps,
                                               compile_mode=compile_mode, vocab_size=shape["vocab_size"])
                    tps = micro_batch * micro_batches * seq_len / times.wall_s
                except (RuntimeError, torch.OutOfMemoryError) as e:  # record the others; say why not this
                    progress(f"  {family} {size} {recipe}: FAILED: {str(e).splitlines()[0][:300]}")
                    if recipe == "bf16":
                        break
                    continue
                base = tps if recipe == "bf16" else base
                row = {**train_row(recipe, family, size, tps, base, peak, shape), **startup_fields(times, import_s)}
                rows.append(row)
                progress(f"  {family} {size} {recipe} ({micro_batches} x {micro_batch} x {seq_len} tokens per step): "
                         f"{tps:,.0f} tokens/s ({tps / base:.2f}x bf16)"
                         + (f", MFU {row['mfu']:.1%}" if row["mfu"] is not None else "")
                         + f"; start-up {times.startup_s:.1f} s; {time.perf_counter() - start:.0f} s with compilation")
                if on_row:
                    on_row(rows)
    return rows


# The fields a `train` row records its shape in (rows before 2026-12-07 ~20:30 have batch_tokens, accumulate and
# compile_mode alone; sweeps.cost.BENCH_TRAIN_* say the seq_len and vocabulary they were measured at).
TRAIN_SHAPE = ("batch_tokens", "accumulate", "compile_mode", "micro_batch", "seq_len", "vocab_size")


def train_shape(n_params: int, batch: int | None, accumulate: int | None, compile_mode: str | None) -> dict:
    """The shape `bench_train` trains a model of `n_params` at, as its rows record it (TRAIN_SHAPE): `batch`
    sequences of SEQ_LEN tokens per micro-batch (None: the trainer's, scaling.config.default_micro_batch),
    `accumulate` micro-batches per step (None: the trainer's batch rule, `train_accumulation`), the GPU corpus's
    vocabulary (scaling.data.DEFAULT_VOCAB_SIZE) and `compile_mode` (None: eager)."""
    from scaling.config import default_micro_batch
    from scaling.data import DEFAULT_VOCAB_SIZE

    micro_batch = batch or default_micro_batch(n_params, SEQ_LEN)
    micro_batches = accumulate or train_accumulation(n_params, micro_batch)
    return {"batch_tokens": micro_batch * SEQ_LEN, "accumulate": micro_batches, "compile_mode": compile_mode,
            "micro_batch": micro_batch, "seq_len": SEQ_LEN, "vocab_size": DEFAULT_VOCAB_SIZE}


def same_shape(row: dict, shape: dict) -> bool:
    """Whether a `train` row was measured at `shape` (`train_shape`): an older row's missing seq_len and vocab_size
    are those every row was measured at then (sweeps.cost.train_row_shape), its micro-batch its batch_tokens'."""
    from sweeps.cost import train_row_shape

    seq_len, vocab_size = train_row_shape(row)
    recorded = {**row, "seq_len": seq_len, "vocab_size": vocab_size,
                "micro_batch": row.get("micro_batch", (row.get("batch_tokens") or 0) // seq_len)}
    return all(recorded.get(k) == shape[k] for k in TRAIN_SHAPE)


def train_row(recipe: str, family: str, size: str, tokens_per_s: float, bf16_tokens_per_s: float,
              peak: float | None, shape: dict) -> dict:
    """A `train` row: issue 7's {"recipe", "family", "size", "tokens_per_s", "mfu", "ratio_vs_bf16"}, then the shape
    it was measured at (`train_shape`). mfu: the FLOPs per token at the shape's vocabulary and seq_len
    (ModelSize.flops_per_token_exact) x tokens/s over the GPU's `peak` FLOP/s (None where the peak is unknown)."""
    from models import model_size

    flops = model_size(family, size).flops_per_token_exact(shape["vocab_size"], shape["seq_len"])
    return {"recipe": recipe_key(recipe), "family": family, "size": size, "tokens_per_s": round(tokens_per_s),
            "mfu": round(flops * tokens_per_s / peak, 4) if peak else None,
            "ratio_vs_bf16": round(tokens_per_s / bf16_tokens_per_s, 3), **shape}


def versions() -> dict:
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}


def header(device: torch.device) -> dict:
    return {"device": torch.cuda.get_device_name(device),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "versions": versions(), "copy_gbps": round(copy_gbps(device), 1)}


__all__ = ["bench_cpu", "bench_cpu_quantizer", "bench_kernels", "bench_linear", "bench_loss", "bench_profile", "bench_sass",
           "bench_train", "copy_gbps", "cpu_header", "header", "graph_ms", "kernel_kind", "median_ms", "training_step"]
