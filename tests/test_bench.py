"""The benchmark JSON: rows from a later run replace only their own keys (GPU runs are spread over
several sessions), and the committed file keeps the keys scripts read."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scaling.commands.bench import _keep_copy, _merge, row_key

ROOT = Path(__file__).resolve().parents[1]


def test_later_rows_replace_only_their_keys():
    old = [{"family": "nanochat", "size": "160M", "recipe": "bf16", "tokens_per_s": 1},
           {"family": "llama2", "size": "160M", "recipe": "bf16", "tokens_per_s": 2}]
    new = [{"family": "nanochat", "size": "160M", "recipe": "bf16", "tokens_per_s": 3},
           {"family": "nanochat", "size": "160M", "recipe": "nvfp4", "tokens_per_s": 4}]
    merged = _merge("train", old, new)
    assert [r["tokens_per_s"] for r in merged] == [2, 3, 4]


def test_train_rows_without_a_seq_len_or_vocabulary_were_measured_at_the_defaults():
    """A train row is keyed by its shape: rows written before they recorded seq_len and vocab_size were measured at
    sweeps.cost's BENCH_TRAIN_*, so a new row at those replaces one, and a row at another seq_len or vocabulary (which
    shared the older key's batch_tokens, accumulate and compile mode) does not."""
    setting = {"family": "nanochat", "size": "160M", "recipe": "bf16", "batch_tokens": 65536, "accumulate": 4,
               "compile_mode": "reduce-overhead"}
    old = [dict(setting, tokens_per_s=1)]
    same = dict(setting, seq_len=1024, vocab_size=32768, tokens_per_s=2)
    assert _merge("train", old, [same]) == [same]
    for other in (dict(setting, seq_len=2048, vocab_size=32768, tokens_per_s=3),
                  dict(setting, seq_len=1024, vocab_size=4096, tokens_per_s=4)):
        assert _merge("train", old, [other]) == old + [other]


def test_sass_rows_without_a_stage_were_quantize_passes():
    """Machine-code rows written before they named their kernel's stage are the quantize passes': a
    new quantize row of the same tile replaces one, an amax row of the same tile does not."""
    tile = {"recipe": "nvfp4", "operand": "fprop.x", "tile": 4096, "bk": 128, "warps": 4, "narrow": 0, "halves": 0,
            "iters": 1}
    old = [dict(tile, instructions_per_element=30.0)]
    new = [dict(tile, stage="quantize", instructions_per_element=29.0), dict(tile, stage="amax",
                                                                             instructions_per_element=5.0)]
    assert _merge("sass", old, new) == new
    assert _merge("sass", old, new[1:]) == old + new[1:]


def test_kernel_rows_keep_the_copy_they_were_judged_against():
    """Before a GPU call replaces the header's copy rate, each kernel row without its own copy_gbps
    takes the header's (the rate its share was taken against); rows with their own keep it."""
    result = {"copy_gbps": 4100.0, "kernels": [{"name": "amax", "gbps": 3000.0},
                                               {"name": "amax", "gbps": 2900.0, "copy_gbps": 4200.0}]}
    _keep_copy(result)
    assert [r["copy_gbps"] for r in result["kernels"]] == [4100.0, 4200.0]
    fresh = {"copy_gbps": None, "kernels": [{"name": "amax"}]}  # a new file: nothing to keep
    _keep_copy(fresh)
    assert fresh["kernels"] == [{"name": "amax"}]


def test_committed_h200_json_has_the_documented_keys():
    bench = json.loads((ROOT / "reports" / "bench" / "h200.json").read_text())
    assert {"device", "date", "versions", "copy_gbps", "kernels", "linear", "train"} <= set(bench)
    for section, keys in {"kernels": ("name", "recipe", "operand", "gbps"),
                          "linear": ("recipe", "d", "tokens", "ms", "ratio_vs_bf16"),
                          "train": ("recipe", "family", "size", "tokens_per_s", "mfu", "ratio_vs_bf16"),
                          "profile": ("family", "size", "recipe", "kind", "ms", "over_bf16_ms")}.items():
        assert bench[section], f"{section} is empty"
        for row in bench[section]:
            assert set(keys) <= set(row), (section, row)
        ids = [row_key(section, r) for r in bench[section]]
        assert len(ids) == len(set(ids)), f"duplicate {section} rows"


def test_train_rows_accumulate_as_the_trainer_batches():
    """The benchmark runs the trainer's micro-batch and steps the optimizers once per batch of the
    trainer's rule (20 tokens/parameter), as a resolved RunConfig of that size has them."""
    from models import model_size
    from scaling import hyperparams
    from scaling.bench import train_accumulation
    from scaling.config import RunConfig, default_micro_batch

    for size, micro, steps in (("324M", 32, 16), ("160M", 64, 4), ("40M", 64, 2)):
        n = model_size("nanochat", size).n_params
        assert default_micro_batch(n, 1024) == micro
        assert train_accumulation(n, micro) == steps == hyperparams.batch_sequences(n, 20 * n, 1024) // micro
        run = RunConfig("nanochat", size, "bf16", tokens=20 * n, data="unused").resolved()
        assert (run.micro_batch_size, run.batch_size // run.micro_batch_size) == (micro, steps)


def test_the_bench_command_imports_no_torch_until_a_gpu_section_runs():
    """`scaling bench fit` runs where torch is not installed (fits/ is torch-free)."""
    import subprocess
    import sys

    code = "import sys, scaling.commands.bench, scaling.compiling; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cpu_section_times_the_trainers_cpu_step(tmp_path):
    """`scaling bench cpu` times the step `scaling train` takes on a CPU for a 2M-token run of a
    micro size (its batch and sequence length, the built-in vocabulary) and keeps earlier rows."""
    from scaling.cli import main

    out = tmp_path / "cpu.json"
    out.write_text(json.dumps({"cpu": [{"family": "llama2", "size": "1M", "recipe": "bf16", "step_ms": 1.0}]}))
    args = ["bench", "cpu", "--families", "nanochat", "--sizes", "0.5M", "--recipes", "nvfp4", "--steps", "1", "--out", str(out)]
    assert main(args) == 0
    bench = json.loads(out.read_text())
    assert bench["cpu_machine"]["threads"] >= 1 and bench["cpu_machine"]["cpu"]
    rows = {(r["family"], r["recipe"]): r for r in bench["cpu"]}
    assert set(rows) == {("llama2", "bf16"), ("nanochat", "bf16"), ("nanochat", "nvfp4")}
    new = rows["nanochat", "nvfp4"]
    assert new["batch_tokens"] == 16 * 256 and new["step_ms"] > 0 and new["step_cpu_ms"] > 0 and new["run_s"] > 0
    # the shape it was measured at: the 2M-token run's 16 x 256 tokens a step, the built-in vocabulary, eager
    assert {k: new[k] for k in ("micro_batch", "accumulate", "seq_len", "vocab_size", "compile_mode")} == \
        {"micro_batch": 16, "accumulate": 1, "seq_len": 256, "vocab_size": 4096, "compile_mode": None}
    assert abs(new["cpu_ratio_vs_bf16"] - new["step_cpu_ms"] / rows["nanochat", "bf16"]["step_cpu_ms"]) < 0.01
    # its start-up, which `sweep plan` prices: the run's (wall and CPU seconds) and a fresh process's imports, measured
    # once a call (the older row, measured before rows recorded it, keeps none)
    assert new["startup_s"] >= 0 and new["startup_cpu_s"] >= 0 and new["import_s"] > 0 and new["import_cpu_s"] > 0
    assert new["import_s"] == rows["nanochat", "bf16"]["import_s"] and "startup_s" not in rows["llama2", "bf16"]


def test_quantizer_section_times_both_quantizers_and_checks_their_bits(tmp_path, monkeypatch):
    from scaling import cpu_quantize
    from scaling.cli import main

    out = tmp_path / "cpu.json"
    assert main(["bench", "quantizer", "--recipes", "nvfp4,quartet2", "--dims", "128", "--out", str(out)]) == 0
    bench = json.loads(out.read_text())
    rows = {(r["recipe"], r["operand"]): r for r in bench["quantizer"]}
    assert {op for r, op in rows if r == "nvfp4"} == {"fprop.x", "dgrad.dy", "wgrad.dy", "wgrad.x"}
    for row in rows.values():  # every activation operand of both is fused (quartet2: 4/6 and MS-EDEN)
        assert row["tokens"] == 4096 and row["d"] == 128 and row["reference_ms"] > 0
        assert row["bits_equal"] is True and row["fused_ms"] > 0
        assert abs(row["speedup"] - row["reference_ms"] / row["fused_ms"]) < 0.01 * row["speedup"] + 0.01
    assert bench["cpu_machine"]["quantizer"].startswith("fused")
    # without the fused quantizer: the reference's times alone
    monkeypatch.setenv("SCALING_CPU_KERNEL", "0")
    cpu_quantize.library.cache_clear()
    try:
        assert main(["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128", "--out", str(out)]) == 0
    finally:
        cpu_quantize.library.cache_clear()
    bench = json.loads(out.read_text())
    assert bench["device"] is None and bench["kernels"] == []  # (issue 7's keys in every file, unmeasured here)
    assert all(r["fused_ms"] is None and r["reference_ms"] > 0 for r in bench["quantizer"] if r["recipe"] == "nvfp4")
    assert not bench["cpu_machine"]["quantizer"].startswith("fused")


def test_every_committed_benchmark_file_holds_the_issues_keys():
    """Issue 7: "Keep these keys so scripts can read every file" -- a file of CPU rows, fits or sass counts
    too, null (no rows) where no GPU was measured; `scaling bench` writes them into every file."""
    keys = {"device", "date", "versions", "copy_gbps", "kernels", "linear", "train"}
    files = sorted((ROOT / "reports" / "bench").glob("*.json"))
    assert len(files) >= 6
    for path in files:
        bench = json.loads(path.read_text())
        assert keys <= set(bench), (path.name, keys - set(bench))
        assert all(isinstance(bench[k], list) for k in ("kernels", "linear", "train")), path.name
        assert (bench["device"] is None) == (not bench["kernels"] + bench["linear"] + bench["train"]), path.name


@pytest.mark.parametrize("name", ["cpu.json", "cpu-epyc.json"])
def test_committed_cpu_json_names_its_machine(name):
    bench = json.loads((ROOT / "reports" / "bench" / name).read_text())
    assert bench["device"] is None and not bench["kernels"] + bench["linear"] + bench["train"]  # no GPU here
    assert set(bench) <= {"cpu_machine", "cpu", "quantizer", "notes", "device", "date", "versions", "copy_gbps",
                          "kernels", "linear", "train"}
    assert {"cpu", "threads", "date"} <= set(bench["cpu_machine"])
    for row in bench["cpu"]:
        assert {"recipe", "family", "size", "step_ms", "step_cpu_ms", "tokens_per_s", "run_s"} <= set(row), row
    for row in bench.get("quantizer", []):
        assert row["fused_ms"] is None or row["bits_equal"] is True, row


def test_train_section_runs_end_to_end_on_a_cpu():
    """bench_train's own code (rows, ratios) runs here, eager, so a GPU session does not find its bugs."""
    import torch

    from scaling.bench import bench_train

    rows = bench_train(torch.device("cpu"), families=("nanochat",), sizes=("0.5M",), recipes=("bf16", "nvfp4"),
                       steps=1, batch=1, accumulate=1, compile_mode=None, progress=lambda line: None)
    assert [r["recipe"] for r in rows] == ["bf16", "nvfp4"] and rows[0]["mfu"] is None
    assert all(r["startup_s"] >= 0 and r["import_s"] > 0 and "startup_cpu_s" not in r for r in rows), rows
    assert all({k: r[k] for k in ("batch_tokens", "micro_batch", "accumulate", "seq_len", "vocab_size", "compile_mode")}
               == {"batch_tokens": 1024, "micro_batch": 1, "accumulate": 1, "seq_len": 1024, "vocab_size": 32768,
                   "compile_mode": None} for r in rows), rows
    # The ratio is of the unrounded rates, rounded to 3 decimals; the rows' rates are rounded to integers,
    # which at a few hundred tokens/s (one eager step) moves their quotient by up to ratio x (0.5/a + 0.5/b).
    a, b = rows[0]["tokens_per_s"], rows[1]["tokens_per_s"]
    ratio = rows[1]["ratio_vs_bf16"]
    assert abs(ratio - b / a) <= 0.0005 + ratio * (0.5 / a + 0.5 / b) + 1e-9


def test_a_runs_start_up_is_the_time_to_its_steady_pace():
    """`startup_s` is the wall time from the start of building a run to the end of its warm-up steps, less as many
    steady steps: with the timed steps, the whole call's time less the steps at their steady pace."""
    import time

    import torch

    from scaling.bench import train_step_seconds

    import scaling.train  # noqa: F401  (imported before, as train_step_seconds does: not the run's start-up)

    start = time.perf_counter()
    times = train_step_seconds("nanochat", "0.5M", "nvfp4", torch.device("cpu"), batch=2, seq_len=64, steps=2,
                               warmup=2, compile_mode=None, vocab_size=4096)
    elapsed = time.perf_counter() - start
    assert times.wall_s > 0 and times.cpu_s > 0 and times.startup_cpu_s >= 0
    assert times.startup_s == pytest.approx(max(0.0, elapsed - 4 * times.wall_s), abs=0.02), (times, elapsed)


def test_train_rows_record_the_shape_they_were_measured_at():
    """`bench train` rows kept batch_tokens, accumulate and compile_mode but not the seq_len and vocabulary their mfu
    counts FLOPs at, nor the micro-batch in sequences, so `sweep plan` had to assume the command's defaults to turn a
    row's tokens/s into FLOP/s. A row now records its whole shape after issue 7's keys, and its mfu is counted at the
    shape's vocabulary and seq_len (what sweeps.cost reads back from the row)."""
    from models import model_size
    from scaling.bench import TRAIN_SHAPE, train_row, train_shape
    from sweeps.cost import bench_flops_per_token

    n = model_size("nanochat", "160M").n_params
    trainer = train_shape(n, None, None, "reduce-overhead")  # the trainer's 64 x 1024 tokens, 4 a step at 160M
    assert trainer == {"batch_tokens": 65536, "accumulate": 4, "compile_mode": "reduce-overhead", "micro_batch": 64,
                       "seq_len": 1024, "vocab_size": 32768}
    given = train_shape(n, 16, 2, "default")  # --batch 16 --accumulate 2
    assert (given["micro_batch"], given["batch_tokens"], given["accumulate"]) == (16, 16 * 1024, 2)
    shape = dict(trainer, seq_len=256, vocab_size=4096)  # another shape: the mfu counts its FLOPs
    row = train_row("nvfp4", "nanochat", "160M", 300_000.4, 375_000.0, 989e12, shape)
    assert list(row)[:6] == ["recipe", "family", "size", "tokens_per_s", "mfu", "ratio_vs_bf16"]  # (issue 7's)
    assert set(TRAIN_SHAPE) <= set(row) and all(row[k] == shape[k] for k in TRAIN_SHAPE)
    assert (row["tokens_per_s"], row["ratio_vs_bf16"]) == (300_000, 0.8)
    flops = model_size("nanochat", "160M").flops_per_token_exact(4096, 256)
    assert row["mfu"] == round(flops * 300_000.4 / 989e12, 4) and bench_flops_per_token(row) == flops
    assert train_row("bf16", "nanochat", "160M", 1.0, 1.0, None, trainer)["mfu"] is None  # (a GPU of unknown peak)


def test_a_later_bench_train_call_finds_an_older_rows_bf16_at_its_shape():
    """`bench train --recipes nvfp4` divides by the file's bf16 row of the same shape (`same_shape`); rows written
    before the shape was recorded lack seq_len, vocab_size and micro_batch, and were all measured at the defaults,
    so they still match the trainer's shape (and not another micro-batch)."""
    from models import model_size
    from scaling.bench import same_shape, train_shape

    old = {"recipe": "bf16", "family": "nanochat", "size": "160M", "tokens_per_s": 383698, "mfu": 0.5223,
           "ratio_vs_bf16": 1.0, "batch_tokens": 65536, "accumulate": 4, "compile_mode": "reduce-overhead"}
    n = model_size("nanochat", "160M").n_params
    assert same_shape(old, train_shape(n, None, None, "reduce-overhead"))
    assert not same_shape(old, train_shape(n, 32, None, "reduce-overhead"))
    assert not same_shape(dict(old, seq_len=2048), train_shape(n, None, None, "reduce-overhead"))


def test_profile_sorts_kernels_by_kind():
    """`bench profile`'s kinds, on kernel names as the H200's torch 2.11 profiler gives them."""
    from scaling.bench import kernel_kind

    names = {
        "_quantize_kernel": "quantize", "_pair_kernel": "quantize", "_pair_amax_kernel": "amax",
        "_amax_kernel": "amax", "_transpose_kernel": "transpose", "_scale_cast_kernel": "scale epilogue",
        "_loss_backward_kernel": "loss",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN": "gemm",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0": "attention",
        "triton_per_fused__to_copy_mul_rsqrt_0": "inductor", "triton_poi_fused_relu_pow_1": "inductor",
        "triton_poi_fused__to_copy_gemm_operand_pair_mul_pow_relu_select_stack_threshold_backward_view_4": "inductor",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)": "other",
        "Memset (Device)": "other",
    }
    assert {n: kernel_kind(n) for n in names} == names


def test_linear_rows_clock_is_none_where_nvml_cannot_be_read():
    """bench linear records the SM clock beside its timings (the GPU's drift explains some of them);
    without an NVIDIA driver the reading is None, not an error that stops the benchmark."""
    import torch

    from scaling.bench import _median_or_none, sm_clock_mhz

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the clock is read")
    assert sm_clock_mhz(torch.device("cpu")) is None
    assert sm_clock_mhz(torch.device("cuda")) is None  # (no pynvml, or NVML finds no driver)
    assert _median_or_none([1500.0, None, 1700.0]) is None
    assert _median_or_none([1500.0, 1980.0, 1700.0]) == 1700.0


def test_back_to_back_timing_cycles_through_its_inputs(monkeypatch):
    """bench kernels times each stage as calls back to back in one CUDA graph, alternating between
    copies of its input (no call finds its input left in the L2 cache by the one before): one replay
    runs every function as often as the others, and the time returned is per call, not per replay
    (the graph's replay timed here as 10 ms, run once)."""
    from scaling import bench

    monkeypatch.setattr(bench, "graph_ms", lambda fn: (fn(), 10.0)[-1])
    calls = []
    per_call = bench.back_to_back_ms([lambda: calls.append("a"), lambda: calls.append("b")], calls=10)
    assert calls == ["a", "b"] * 5 and per_call == 1.0


def test_kernel_rows_carry_both_timings_of_each_stage(monkeypatch):
    """bench kernels times each stage of a launch alone and back to back (the latter cycling through
    one launch per copy of the input), and each row carries both rates: the stages a launch has
    (transpose only where it moves K last, amax only where it needs one), with its first stage run
    before any is timed (a moved copy must exist before its readers run alone)."""
    from scaling import bench

    calls = []

    class FakeLaunch:
        def __init__(self, name, needs_move, needs_amax, moves_with_amax=False):
            self.name, self.needs_move, self.needs_amax = name, needs_move, needs_amax
            self.moves_with_amax = moves_with_amax

        def run_move(self):
            calls.append((self.name, "move"))

        def run_move_amax(self):
            calls.append((self.name, "move+amax"))

        def run_amax(self):
            calls.append((self.name, "amax"))

        def run_quantize(self):
            calls.append((self.name, "quantize"))

    timed = []
    monkeypatch.setattr(bench, "graph_ms", lambda fn: (timed.append(("alone", fn)), fn(), 2.0)[-1])
    monkeypatch.setattr(bench, "back_to_back_ms", lambda fns: (timed.append(("back", fns)), [f() for f in fns], 1.0)[-1])
    launches = [FakeLaunch("a", True, True), FakeLaunch("b", True, True)]
    t = bench._timed_stages(launches)
    assert calls[:2] == [("a", "move"), ("b", "move")]
    assert list(t) == ["transpose", "amax", "quantize", "gemm_operand"] and set(t.values()) == {(2.0, 1.0)}
    assert all(len(fns) == 2 for kind, fns in timed if kind == "back")
    calls.clear()
    bench._timed_stages([FakeLaunch("a", False, False)])
    assert ("a", "move") not in calls and ("a", "amax") not in calls
    calls.clear()
    t = bench._timed_stages([FakeLaunch("a", True, True, moves_with_amax=True)])
    assert list(t) == ["transpose+amax", "quantize", "gemm_operand"] and calls[0] == ("a", "move+amax")
    assert ("a", "move") not in calls and ("a", "amax") not in calls
    rows = bench._kernel_rows("nvfp4", "fprop.x", {"quantize": [3000.0, 3300.0]})
    assert rows == [{"name": "quantize", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 3000.0,
                     "gbps_back_to_back": 3300.0}]


def test_copy_row_is_the_kernels_yardstick_at_their_size(monkeypatch):
    """bench kernels starts with a plain copy of its tensor, timed both ways like the quantizer
    stages (one row: name "copy", recipe "bf16", operand "x"), and the copies are really made."""
    import torch

    from scaling import bench

    monkeypatch.setattr(bench, "graph_ms", lambda fn: (fn(), 2.0)[-1])
    monkeypatch.setattr(bench, "back_to_back_ms", lambda fns: ([f() for f in fns], 1.0)[-1])
    xs = (torch.randn(64, 32).bfloat16(), torch.randn(64, 32).bfloat16())
    copied = []
    real_empty_like = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda t: copied.append(real_empty_like(t)) or copied[-1])
    rows = bench._copy_rows(xs, progress=lambda line: None)
    assert all(torch.equal(c, x) for c, x in zip(copied, xs))
    nbytes = 2 * 64 * 32 * 2
    assert rows == [{"name": "copy", "recipe": "bf16", "operand": "x", "gbps": round(nbytes / 2.0 / 1e6, 1),
                     "gbps_back_to_back": round(nbytes / 1.0 / 1e6, 1)}]


def test_stages_run_once_each_inside_the_profilers_range():
    """bench stages (for ncu --profile-from-start off) runs each stage bench kernels times once between
    the profiler's start and stop, after untimed rounds, and names them in the order they ran: here
    mxfp4's operands and pairs on a small tensor, the kernels under Triton's interpreter on the CPU."""
    import os
    import subprocess
    import sys

    script = """
import json
import torch
events = []
torch.cuda.synchronize = lambda device=None: None
torch.cuda.profiler.start = lambda: events.append("start")
torch.cuda.profiler.stop = lambda: events.append("stop")
from scaling import bench
names = bench.profile_stages(torch.device("cpu"), tokens=64, d=128, recipes=["mxfp4"], progress=events.append)
print(json.dumps([names, events]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "TRITON_INTERPRET": "1"}).stdout.splitlines()
    names, events = json.loads(out[-1])
    assert names == ["mxfp4.fprop.x quantize", "mxfp4.dgrad.w quantize", "mxfp4.fprop.x+wgrad.x quantize",
                     "mxfp4.dgrad.dy+wgrad.dy quantize"]
    assert events == ["start", *(f"  {n}" for n in names), "stop"]


def test_only_msedens_dy_takes_both_amaxes_in_its_transposing_pass():
    """bench kernels times the transposing pass that also finds dgrad dY's amax where QLinear's
    backward runs it: quartet2's dY (MS-EDEN both ways), no other preset's."""
    import torch

    from scaling import bench
    from scaling.recipes import get_recipe, list_recipes

    x, seeds = torch.empty(256, 384), torch.tensor(bench.BENCH_SEEDS)
    found = {name for name in list_recipes() if bench._rows_amax_launches(x, get_recipe(name), seeds)}
    assert found == {"quartet2"}
    launch, rows = bench._rows_amax_launches(x, get_recipe("quartet2"), seeds)
    assert (launch.dim, rows.dim) == (0, 1) and bench._rows_tile(launch) == ""


def test_sass_counts_the_transposing_pass_with_both_amaxes_where_it_runs(monkeypatch):
    """bench sass counts dY's transposing pass with dgrad's amax (rows=True) at each tile its tuner
    tries, for quartet2 only (stage "transpose+amax", operand "dgrad.dy+wgrad.dy")."""
    pytest.importorskip("triton")
    from scaling import bench
    from scaling.kernels import rht128, sass

    calls = []
    monkeypatch.setattr(sass, "count_transposing_amax",
                        lambda spec, w, n, D, rows=False, lanes=1: calls.append((w, n, D, rows, lanes))
                        or {"tile": 32 * w * 128, "bk": 128, "warps": w, "narrow": 0, "halves": 0, "iters": n,
                            "lanes": lanes, "instructions_per_element": 20.0, "registers": 128})
    rows = bench._sass_rows_amaxes(16384, 2048, ["nvfp4", "quartet2", "ufp4"], lambda line: None)
    assert calls == [(w, n, 2048, True, lanes) for lanes in (1, 4) for w, n in rht128._ROWS_CANDIDATES]
    assert {(r["recipe"], r["operand"], r["stage"]) for r in rows} == {("quartet2", "dgrad.dy+wgrad.dy",
                                                                        "transpose+amax")}


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the steps' bookkeeping where no GPU runs them")
def test_the_gpu_runbook_runs_its_steps_in_turn(tmp_path):
    """`.ci/gpu`: a misspelt step is refused before any runs (exit 2); steps split at '+' each get a
    log, the benchmark file is a copy of the committed one (which stays as it was) and the targets
    are checked against it; the call's status is the first failing step's (here, no CUDA: 2)."""
    committed = (ROOT / "reports/bench/h200.json").read_bytes()
    env = {**os.environ, "OUT": str(tmp_path), "GPU_STEP_LIMIT_S": "120"}
    bad = subprocess.run(["bash", ".ci/gpu", "kernels", "+", "lienar"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown step 'lienar'" in bad.stderr and not list(tmp_path.glob("*.log"))
    r = subprocess.run(["bash", ".ci/gpu", "kernels", "--recipes", "nvfp4", "+", "kernels", "+", "linear"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["kernels: exit 2", "kernels: exit 2", "linear: exit 2"]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["kernels-2.log", "kernels.log", "linear.log"]
    assert "needs a CUDA GPU" in (tmp_path / "linear.log").read_text()
    assert (tmp_path / "h200.json").read_bytes() == committed == (ROOT / "reports/bench/h200.json").read_bytes()
    assert "layer <= 1.3x bf16" in (tmp_path / "targets.txt").read_text()
    # a second run into the same $OUT keeps the file the first left (it copied the committed one over it, and
    # a run of no bench step then removed its copy); the tests and resume steps ran on the CPU too (interpreted
    # kernels, training on the cores) and said "exit 0" as if the GPU had passed them: they fail without CUDA,
    # as the bench steps do. (One call for both: each call's python imports torch, seconds.)
    earlier = json.loads((tmp_path / "h200.json").read_text())
    (tmp_path / "h200.json").write_text(json.dumps({**earlier, "notes": ["an earlier run's rows"]}))
    again = subprocess.run(["bash", ".ci/gpu", "tests", "-k", "no_such_test", "+", "resume"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "the one an earlier run left" in again.stderr, again.stderr
    assert json.loads((tmp_path / "h200.json").read_text())["notes"] == ["an earlier run's rows"]
    assert again.stdout.splitlines() == ["tests: exit 2", "resume: exit 2"], again.stdout
    assert "the tests step needs a CUDA GPU" in (tmp_path / "tests.log").read_text()
    assert "the resume step needs a CUDA GPU" in (tmp_path / "resume.log").read_text()


def test_a_gpus_rows_never_go_into_another_gpus_file(tmp_path, capsys):
    """A bench file is one device's: adding an H100's rows to the H200's file is refused (exit 2)
    before anything is measured, naming the file to use; each GPU's name gives its file's."""
    from scaling.commands.bench import _same_device, device_file
    from scaling.errors import UserError

    assert device_file("NVIDIA H200") == "h200.json" and device_file("NVIDIA H100 80GB HBM3") == "h100.json"
    assert device_file("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090.json"
    _same_device({"device": "NVIDIA H200"}, "NVIDIA H200", "h200.json")
    _same_device({}, "NVIDIA H100 80GB HBM3", "new.json")
    with pytest.raises(UserError, match=r"holds rows measured on NVIDIA H200, and this GPU is NVIDIA H100 80GB "
                                        r"HBM3; give a file of this device's \(e.g. reports/bench/h100.json\)"):
        _same_device({"device": "NVIDIA H200"}, "NVIDIA H100 80GB HBM3", "reports/bench/h200.json")


def test_bench_fit_prints_a_table_and_json_on_request(monkeypatch, capsys):
    """(It printed its JSON without --json: every verb prints a table by default, DESIGN.md)"""
    import fits.bench
    from scaling.cli import main

    truth = {"A": 477.8, "B": 2143.0, "E": 1.817, "alpha": 0.3473, "beta": 0.3672}
    fit = {"points": 500, "bootstrap": 1000, "workers": 2, "wall_s": 5.8, "ms_per_replicate": 5.3, "truth": truth,
           "params": {**truth, "A": 516.6}, "ci95": {k: [v * 0.99, v * 1.01] for k, v in truth.items()}}
    monkeypatch.setattr(fits.bench, "bench_fit", lambda: fit)
    assert main(["bench", "fit"]) == 0
    table = capsys.readouterr().out
    assert "truth inside" in table and "516.6" in table and "{" not in table
    assert main(["bench", "fit", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit"] == fit


def test_sass_progress_names_operands_as_its_rows_do(monkeypatch):
    """bench sass's progress said mxfp4.fprop_x where its table said fprop.x."""
    pytest.importorskip("triton")
    from scaling import bench
    from scaling.kernels import sass

    row = {"tile": 2048, "bk": 128, "warps": 4, "narrow": 0, "halves": 0, "iters": 1,
           "instructions_per_element": 20.0, "registers": 40}
    monkeypatch.setattr(sass, "candidates", lambda spec, dim, K: [()])
    monkeypatch.setattr(sass, "count", lambda spec, dim, K: dict(row))
    monkeypatch.setattr(sass, "amax_counts", lambda spec, dim, K: [])
    monkeypatch.setattr(bench, "_sass_pairs", lambda *a: [])
    monkeypatch.setattr(bench, "_sass_rows_amaxes", lambda *a: [])
    lines: list[str] = []
    rows = bench.bench_sass(recipes=["mxfp4"], progress=lines.append)
    assert lines and all(line.split()[0] in {f"mxfp4.{r['operand']}" for r in rows} for line in lines), lines


def test_bench_kernels_says_which_operands_have_no_kernel(tmp_path):
    """`bench kernels` and `stages` skipped an operand the fused kernels do not take (a recipe file's
    1x24 blocks) without a word; they now say so, and time the others."""
    from scaling.bench import _kernel_operands

    path = tmp_path / "nv24.toml"
    path.write_text('name = "nv24"\nbase = "nvfp4"\n[fprop.x]\nblock = [1, 24]\n')
    said = []
    timed = [(operand, spec.describe()) for _, operand, spec, _ in _kernel_operands([str(path)], said.append)]
    assert len(timed) == 5 and "fprop_x" not in dict(timed)
    assert len(said) == 1 and "fprop.x (NV e2m1 1x24" in said[0] and "no fused kernel" in said[0], said
    assert "blocks of 16 or 32" in said[0] and "with the reference" in said[0]


def test_rows_key_a_recipe_file_by_its_name(tmp_path, capsys, monkeypatch):
    """Rows of `--recipes path/mine.toml` were keyed by the path as typed: the same file by two paths made
    two rows, and `sweep plan` (which finds recipes by name) matched neither. They are keyed by the
    recipe's name now, the same recipe given twice is benchmarked once, and two different recipes of
    one name (whose rows would replace each other) are refused."""
    from scaling import bench
    from scaling.cli import main

    (tmp_path / "sub").mkdir()
    mine = tmp_path / "mine.toml"
    mine.write_text('name = "mine"\nbase = "nvfp4"\n')
    asked = []
    monkeypatch.setattr(bench, "bench_cpu_quantizer", lambda recipes, **kw: asked.append(recipes) or [
        {"recipe": name, "operand": op.replace("_", "."), "tokens": 1, "d": 128}
        for name, op, _, _ in bench._preset_operands(recipes)])
    out = tmp_path / "out.json"
    for path in (mine, tmp_path / "sub" / ".." / "mine.toml"):
        assert main(["bench", "quantizer", "--recipes", f"{path},{mine}", "--out", str(out)]) == 0
    assert [len(a) for a in asked] == [1, 1]
    rows = json.loads(out.read_text())["quantizer"]
    assert {r["recipe"] for r in rows} == {"mine"} and len(rows) == 6  # one row per operand, not per path
    assert bench.recipe_key(str(mine)) == "mine" and bench.recipe_key("nvfp4") == "nvfp4"
    other = tmp_path / "sub" / "mine.toml"
    other.write_text('name = "mine"\nbase = "ufp4"\n')
    assert main(["bench", "quantizer", "--recipes", f"{mine},{other}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "two different recipes named 'mine'" in err and "rename one" in err, err


def test_fit_and_calibration_files_take_a_second_run(tmp_path, monkeypatch, capsys):
    """A file of `bench fit` or `bench calibration` alone (reports/bench/fits.json) was refused as "not a
    benchmark JSON" by the next run into it (the documented `bench calibration --out
    reports/bench/fits.json`) and by `bench targets`: their sections were not among a benchmark's keys."""
    import fits.bench
    import fits.calibration
    from scaling.cli import main

    monkeypatch.setattr(fits.bench, "bench_fit", lambda: {"points": 1, "bootstrap": 0, "workers": 1, "wall_s": 1.0,
                                                          "ms_per_replicate": 0.0, "truth": {}, "params": {},
                                                          "ci95": {}})
    monkeypatch.setattr(fits.calibration, "calibrate", lambda **kw: [{"grid": "3x3", "sweeps": kw["sweeps"]}])
    for section in ("fit", "calibration"):
        out = tmp_path / f"{section}.json"
        for _ in range(2):
            assert main(["bench", section, "--out", str(out)]) == 0, capsys.readouterr().err
        assert main(["bench", "targets", "--out", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["bench", "targets", "--out", str(ROOT / "reports" / "bench" / "fits.json")]) == 0
    # one line, not a table of blanks: a file of CPU sections measures no target
    assert capsys.readouterr().out.strip().endswith("no target is measured in this file; they read a GPU's file, "
                                                    "e.g. reports/bench/h200.json")
    bench = json.loads((tmp_path / "calibration.json").read_text())
    provenance = bench["calibration_provenance"]
    assert bench["calibration"] == [{"grid": "3x3", "sweeps": 40, "measured": provenance["date"],
                                     "git_commit": provenance["git_commit"]}]
    (tmp_path / "bad.json").write_text(json.dumps({"fit": [1]}))
    assert main(["bench", "targets", "--out", str(tmp_path / "bad.json")]) == 2
    assert "its fit must be an object" in capsys.readouterr().err


def test_calibration_cut_short_keeps_its_finished_cases(tmp_path, monkeypatch):
    """`bench calibration` wrote its file once, at the end of ~10 minutes: a run stopped in its last case
    lost every case before it. Each case is saved as it ends, merged into the file's earlier cases."""
    import fits.calibration
    from scaling.cli import main

    out = tmp_path / "fits.json"
    out.write_text(json.dumps({"calibration": [{"grid": "3x3", "noise_dist": "normal", "noise_sd": 0.005,
                                                "truth": "constant", "law": "chinchilla", "sweeps": 40, "reject_5pct": 0.5},
                                               {"grid": "4x4", "noise_dist": "normal", "noise_sd": 0.005,
                                                "truth": "constant", "law": "chinchilla", "sweeps": 40, "reject_5pct": 0.5}]}))

    def calibrate(sweeps, on_row, **kw):
        on_row([{"grid": "3x3", "noise_dist": "normal", "noise_sd": 0.005, "truth": "constant", "law": "chinchilla",
                 "sweeps": sweeps, "reject_5pct": 0.05}])
        raise KeyboardInterrupt  # stopped in the second case

    monkeypatch.setattr(fits.calibration, "calibrate", calibrate)
    assert main(["bench", "calibration", "--out", str(out)]) == 130  # (main's exit code on Ctrl-C)
    rows = json.loads(out.read_text())["calibration"]
    assert [(r["grid"], r["reject_5pct"]) for r in rows] == [("4x4", 0.5), ("3x3", 0.05)]
    assert "measured" in rows[1] and "measured" not in rows[0]  # the new case says when it was measured


def test_a_cpus_rows_never_go_into_another_machines_file(tmp_path, monkeypatch, capsys):
    """`bench quantizer --out reports/bench/cpu.json` on another CPU merged its rows into the Xeon's file and
    renamed the file's machine after itself: every earlier row (and `sweep plan`'s CPU pricing) then
    named the wrong machine. As for GPUs, another machine's or thread count's file is refused (exit 2,
    the file untouched) before anything is measured."""
    from scaling import bench
    from scaling.cli import main
    from scaling.console import count

    monkeypatch.setattr(bench, "bench_cpu_quantizer", lambda recipes, **kw: [
        {"recipe": "nvfp4", "operand": "fprop.x", "tokens": 1, "d": 128, "reference_ms": 1.0}])
    here = bench.cpu_header()
    out = tmp_path / "cpu.json"
    more = here["threads"] + 1
    one = 1 if here["threads"] != 1 else 3  # (one thread: "1 thread", not "1 threads")
    for machine, refused in (({"cpu": "Other CPU", "threads": here["threads"]}, "Other CPU"),
                             ({"cpu": here["cpu"], "threads": more}, f"{here['cpu']} ({more} threads)"),
                             ({"cpu": here["cpu"], "threads": one}, f"{here['cpu']} ({count(one, 'thread')})")):
        text = json.dumps({"cpu_machine": {**machine, "date": "then"}, "quantizer": [{"recipe": "ufp4", "d": 1}]})
        out.write_text(text)
        assert main(["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"holds cpu and quantizer rows measured on {refused}" in err and "or a new one" in err, err
        assert "Traceback" not in err and out.read_text() == text
    out.write_text(json.dumps({"cpu_machine": here, "quantizer": [{"recipe": "ufp4", "d": 1}]}))
    assert main(["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128", "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["quantizer"]) == 2


def test_a_file_another_machine_wrote_meanwhile_is_refused_when_rows_are_saved(tmp_path, monkeypatch, capsys):
    """The file's machine was checked only as the call began: a file another machine's call wrote while
    this one measured (a shared reports/ folder) was merged into and its header renamed after this
    machine, over that machine's rows. The save checks again under the file's lock: exit 2, and the
    other machine's file is left as it is."""
    from scaling import bench
    from scaling.cli import main

    out = tmp_path / "cpu.json"
    theirs = json.dumps({"cpu_machine": {"cpu": "Other CPU", "threads": 1}, "quantizer": [{"recipe": "ufp4", "d": 1}]})

    def measured_while_another_machine_writes(recipes, **kw):
        out.write_text(theirs)
        return [{"recipe": "nvfp4", "operand": "fprop.x", "tokens": 1, "d": 128, "reference_ms": 1.0}]

    monkeypatch.setattr(bench, "bench_cpu_quantizer", measured_while_another_machine_writes)
    assert main(["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds cpu and quantizer rows measured on Other CPU" in err and "since this one started" in err, err
    assert "Traceback" not in err and out.read_text() == theirs


def test_sass_rows_never_go_into_another_tritons_file(tmp_path, monkeypatch, capsys):
    """`bench sass --out reports/bench/sass-sm90-triton3.6.json` without the 3.6 wheel on the path
    merged Triton 3.9's counts into the 3.6 file and stamped all its rows 3.9. Refused now (exit 2)."""
    triton = pytest.importorskip("triton")
    from scaling.cli import main
    from scaling.commands import bench as command

    monkeypatch.setattr(command, "_bench_sass", lambda recipes, progress: [])
    out = tmp_path / "sass.json"
    text = json.dumps({"sass": [{"recipe": "mxfp4"}], "sass_versions": {"triton": "0.1.0"}})
    out.write_text(text)
    assert main(["bench", "sass", "--recipes", "mxfp4", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"compiled with Triton 0.1.0, and this Triton is {triton.__version__}" in err, err
    assert out.read_text() == text
    out.write_text(json.dumps({"sass": [{"recipe": "mxfp4"}], "sass_versions": {"triton": triton.__version__}}))
    assert main(["bench", "sass", "--recipes", "mxfp4", "--out", str(out)]) == 0


def test_quantizer_widths_beyond_this_machines_memory_are_refused(tmp_path, capsys, monkeypatch):
    """`bench quantizer --dims 99999984` ended in torch's allocator traceback (1.6 TB asked for), and a
    width just inside memory would have been OOM-killed without a word; it is refused before any row."""
    from scaling import bench
    from scaling.cli import main

    monkeypatch.setattr(bench, "bench_cpu_quantizer", lambda **kw: pytest.fail("measured"))
    out = tmp_path / "q.json"
    out.write_text("{}")
    assert main(["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128,99999984", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--dims 128,99999984: 99999984 is too wide for this machine" in err and "give widths up to" in err, err
    assert "Traceback" not in err and out.read_text() == "{}"


@pytest.mark.parametrize("text", ["[1, 2]", "{bad", "{\"foo\": 1}", "{\"quantizer\": [1]}", "{\"fit\": []}"])
def test_a_file_that_is_no_benchmark_is_refused_saying_what_to_give(tmp_path, capsys, text):
    """Each refusal of a --out that is no benchmark JSON says what to give instead (a JSON list's said
    only what it was not), exits 2 and leaves the file as it was."""
    from scaling.cli import main

    out = tmp_path / "x.json"
    out.write_text(text)
    for args in (["quantizer", "--recipes", "nvfp4", "--dims", "128"], ["targets"]):
        assert main(["bench", *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and "Traceback" not in err, err
        assert "give a file `scaling bench` wrote" in err or "choose another name" in err, err  # (not JSON: check_output's)
        assert out.read_text() == text


def test_an_empty_out_file_is_a_new_one(tmp_path, monkeypatch, capsys):
    """An empty --out (`mktemp --suffix .json`), which check_output takes as a file to write, was refused
    as "cannot read ... as a benchmark JSON (Expecting value ...)"; `bench targets` still refuses one."""
    import fits.bench
    from scaling.cli import main

    monkeypatch.setattr(fits.bench, "bench_fit", lambda: {"points": 1, "bootstrap": 0, "workers": 1, "wall_s": 1.0,
                                                          "ms_per_replicate": 0.0, "truth": {}, "params": {},
                                                          "ci95": {}})
    out = tmp_path / "new.json"
    out.write_text("")
    assert main(["bench", "targets", "--out", str(out)]) == 2 and "cannot read" in capsys.readouterr().err
    assert main(["bench", "fit", "--out", str(out)]) == 0, capsys.readouterr().err
    bench = json.loads(out.read_text())
    assert bench["fit"]["points"] == 1 and bench["device"] is None and bench["kernels"] == []


def test_out_after_an_equals_sign_expands_its_tilde(tmp_path, monkeypatch, capsys):
    """`--out=~/x.json` (no shell expands a ~ after '='): check_output checked the home folder's path and
    the file went to a folder named '~' under the working directory; bench targets found no such file."""
    import fits.bench
    from scaling.cli import main

    monkeypatch.setattr(fits.bench, "bench_fit", lambda: {"points": 1, "bootstrap": 0, "workers": 1, "wall_s": 1.0,
                                                          "ms_per_replicate": 0.0, "truth": {}, "params": {},
                                                          "ci95": {}})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "fit", "--out=~/x.json"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "home" / "x.json").read_text())["fit"]["points"] == 1
    assert not (tmp_path / "~").exists()
    assert main(["bench", "targets", "--out=~/x.json"]) == 0, capsys.readouterr().err


def test_calls_writing_one_file_at_once_keep_each_others_rows(tmp_path, monkeypatch):
    """Two `scaling bench` calls into one --out lost rows: each read the file at its start and wrote it
    whole (at its end, or after each row), so `bench quantizer` and `bench fit` side by side left the
    fit alone. Each write merges this call's rows into what the file holds then, under its lock."""
    import fits.bench
    import fits.calibration
    from scaling import bench
    from scaling.cli import main

    out = tmp_path / "cc.json"
    out.write_text(json.dumps({"notes": ["a note"]}))
    monkeypatch.setattr(bench, "bench_cpu_quantizer", lambda recipes, **kw: [
        {"recipe": "nvfp4", "operand": "fprop.x", "tokens": 1, "d": 128, "reference_ms": 1.0}])
    quantizer = ["bench", "quantizer", "--recipes", "nvfp4", "--dims", "128", "--out", str(out)]

    def bench_fit():  # another call writes the file while this one measures
        assert main(quantizer) == 0
        return {"points": 1}

    def calibrate(sweeps, on_row, **kw):
        rows = [{"grid": "3x3", "sweeps": sweeps}]
        on_row(rows)
        data = json.loads(out.read_text())  # (a row of the file's replaced meanwhile: this call's wins)
        data["quantizer"][0]["reference_ms"] = 2.0
        data["calibration"][0]["reject_5pct"] = "theirs"
        out.write_text(json.dumps(data))
        return rows + [{"grid": "4x4", "sweeps": sweeps}]

    monkeypatch.setattr(fits.bench, "bench_fit", bench_fit)
    monkeypatch.setattr(fits.calibration, "calibrate", calibrate)
    assert main(["bench", "fit", "calibration", "--json", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["fit"] == {"points": 1} and data["notes"] == ["a note"]
    assert [(r["recipe"], r["reference_ms"]) for r in data["quantizer"]] == [("nvfp4", 2.0)]
    assert [r["grid"] for r in data["calibration"]] == ["3x3", "4x4"]
    assert "reject_5pct" not in data["calibration"][0]  # this call's row of that key wins
    assert data["cpu_machine"] == bench.cpu_header() and data["device"] is None


def test_a_bench_write_waits_for_the_files_lock(tmp_path):
    """The file is written under an exclusive flock on `.<name>.lock` beside it, taken before it is re-read."""
    import fcntl
    import threading

    from scaling.commands.bench import _save

    out = tmp_path / "cc.json"
    out.write_text(json.dumps({"fit": {"points": 1}}))
    with open(tmp_path / ".cc.json.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        writer = threading.Thread(target=_save, args=(out, {}, {"quantizer": [{"recipe": "nvfp4"}]}))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive() and "quantizer" not in out.read_text()
        out.write_text(json.dumps({"fit": {"points": 2}}))  # written meanwhile by the lock's holder
        fcntl.flock(lock, fcntl.LOCK_UN)
        writer.join(5)
    data = json.loads(out.read_text())
    assert data["fit"] == {"points": 2} and data["quantizer"] == [{"recipe": "nvfp4"}]


def test_calibration_shared_writes_its_key_and_keeps_the_files_others(tmp_path, monkeypatch, capsys):
    """`bench calibration --shared` runs the shared-efficiency check's calibration (here one tiny case, for real) into
    calibration_shared, stamped, with calibration_shared_provenance; the file's kappa = 0 rows, their provenance
    and its notes are kept as they were."""
    import fits.calibration
    from scaling.cli import main

    out = tmp_path / "fits.json"
    before = {"calibration": [{"grid": "3x3", "noise_dist": "normal", "noise_sd": 0.005, "truth": "constant",
                               "law": "chinchilla", "sweeps": 40, "reject_5pct": 0.05}],
              "calibration_provenance": {"date": "2026-12-05 09:21 UTC", "git_commit": "abc"}, "notes": ["a note"]}
    out.write_text(json.dumps(before))
    monkeypatch.setattr(fits.calibration, "SHARED_CASES", (("3x3", "normal", "quartet", "shared"),))
    assert main(["bench", "calibration", "--shared", "--sweeps", "2", "--bootstrap", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "false_rate" in printed and "noise_dist" in printed  # (cases differ by their noise distribution too)
    after = json.loads(out.read_text())
    assert {k: after[k] for k in before} == before
    provenance = after["calibration_shared_provenance"]
    [row] = after["calibration_shared"]
    assert (row["grid"], row["truth"], row["sweeps"], row["bootstrap"]) == ("3x3", "shared", 2, 5)
    assert (row["measured"], row["git_commit"]) == (provenance["date"], provenance["git_commit"])
    assert 0.0 <= row["false_rate"] <= 1.0 and row["power"] is None
    assert main(["bench", "targets", "--out", str(out)]) == 0  # (the file is still a benchmark JSON)


def test_benchs_progress_is_on_stderr_with_json_too(tmp_path, monkeypatch, capsys):
    """bench's progress went to stdout, into the tables' stream, and with --json was dropped: `bench calibration
    --json` (~14 minutes) said nothing until its JSON. It is on stderr (here one tiny case, for real), each case's
    line as it ends; stdout holds the JSON alone."""
    import fits.calibration
    from scaling.cli import main

    monkeypatch.setattr(fits.calibration, "CASES", (("3x3", "normal", "constant"),))
    out = tmp_path / "fits.json"
    assert main(["bench", "calibration", "--sweeps", "2", "--bootstrap", "0", "--out", str(out), "--json"]) == 0
    printed, said = capsys.readouterr()
    assert json.loads(printed)["calibration"][0]["grid"] == "3x3"
    assert said.startswith("calibration of the kappa = 0 test, 2 synthetic sweeps per case") and "3x3 normal" in said


def test_calibration_noise_dist_runs_only_its_cases_and_keeps_the_others_rows(tmp_path, monkeypatch, capsys):
    """`bench calibration [--shared] --noise-dist t3` runs only the cases under t3 noise (here one tiny case of each
    calibration, for real) and merges their rows by key: the file's normal rows are kept, not rerun. Adding the
    heavy-tailed shared cases otherwise meant rerunning the six normal ones (12 min) to measure four."""
    import fits.calibration
    from scaling.cli import main

    out = tmp_path / "fits.json"
    normal = {"grid": "3x3", "noise_dist": "normal", "noise_sd": 0.005, "truth": "shared", "law": "quartet",
              "sweeps": 2, "bootstrap": 5, "false_rate": 0.5}
    out.write_text(json.dumps({"calibration_shared": [normal]}))
    monkeypatch.setattr(fits.calibration, "SHARED_CASES", (("3x3", "normal", "quartet", "shared"),
                                                            ("3x3", "t3", "quartet", "shared")))
    monkeypatch.setattr(fits.calibration, "CASES", (("3x3", "normal", "constant"), ("3x3", "t3", "constant")))
    argv = ["--noise-dist", "t3", "--sweeps", "2", "--out", str(out)]
    assert main(["bench", "calibration", "--shared", "--bootstrap", "5", *argv]) == 0
    assert main(["bench", "calibration", "--bootstrap", "5", *argv]) == 0
    assert "t3" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["calibration_shared"][0] == normal
    assert [(r["grid"], r["noise_dist"]) for r in data["calibration_shared"]] == [("3x3", "normal"), ("3x3", "t3")]
    assert [(r["grid"], r["noise_dist"]) for r in data["calibration"]] == [("3x3", "t3")]


def test_calibration_measures_coverage_in_rows_of_their_own_and_says_where_it_was_not(tmp_path, monkeypatch, capsys):
    """`bench calibration --bootstrap B` (here one tiny case, for real) adds each case's coverage of the ratio per
    decade's 95% interval (against the truth's ratio: 1 under a constant penalty) to its row, keyed by B: a file's
    earlier row, measured without a bootstrap (no `bootstrap` key), is kept beside it and printed with its coverage
    "not measured"; `--bootstrap 0` measures the test alone and replaces that row."""
    import fits.calibration
    from scaling.cli import main

    out = tmp_path / "fits.json"
    old = {"grid": "3x3", "noise_dist": "normal", "noise_sd": 0.005, "truth": "constant", "law": "chinchilla",
           "sweeps": 2, "reject_5pct": 0.5}
    out.write_text(json.dumps({"calibration": [old]}))
    monkeypatch.setattr(fits.calibration, "CASES", (("3x3", "normal", "constant"),))
    assert main(["bench", "calibration", "--sweeps", "2", "--bootstrap", "5", "--out", str(out)]) == 0
    printed, err = capsys.readouterr()
    # (5 replicates: the rows are kept, and the run says their intervals are rough)
    assert "note: 5 replicates are fewer than the 40 a 95% interval needs" in printed + err
    rows = json.loads(out.read_text())["calibration"]
    assert rows[0] == old and [r.get("bootstrap") for r in rows] == [None, 5]
    new = rows[1]
    assert new["true_ratio"] == 1.0 and 0.0 <= new["coverage"] <= 1.0 and new["ci_width"] > 0, new
    assert new["no_interval"] == 0
    table = printed[printed.index("bench calibration"):]
    assert "coverage" in table and "ci_width" in table and table.count("not measured") == 4  # (the old row's 4 cells)
    # the other intervals the verdict and the tables print: their coverage in the row and a table of their own
    assert new["intervals"]["multiplier at data max"]["truth"] == pytest.approx(0.7) and "effD_const" in new["intervals"]
    assert "how often each other 95% interval" in printed and "multiplier at data max" in printed
    assert main(["bench", "calibration", "--sweeps", "2", "--bootstrap", "0", "--out", str(out)]) == 0
    assert "fewer than the 40" not in "".join(capsys.readouterr())  # (no intervals at all: nothing rough)
    rows = json.loads(out.read_text())["calibration"]
    assert [r["bootstrap"] for r in rows] == [5, 0] and "coverage" not in rows[1] and rows[1]["reject_5pct"] != 0.5


def test_calibration_rows_print_every_column_and_not_measured_without_coverage():
    """The table's rows (`calibration_rows`): CALIBRATION_COLUMNS in order, a row without a bootstrap key at its
    default (0), its coverage cells "not measured"; a row with coverage keeps its numbers."""
    from scaling.commands.bench import CALIBRATION_COLUMNS, calibration_rows

    measured = {"grid": "4x4", "bootstrap": 100, "coverage": 0.95, "ci_width": 0.2, "true_ratio": 1.0, "no_interval": 0}
    old, new = calibration_rows([{"grid": "3x3", "reject_5pct": 0.05}, measured])
    assert tuple(old) == tuple(new) == CALIBRATION_COLUMNS
    assert old["bootstrap"] == 0 and old["reject_5pct"] == 0.05 and old["coverage"] == old["ci_width"] == "not measured"
    assert (new["coverage"], new["ci_width"], new["bootstrap"]) == (0.95, 0.2, 100)


def test_the_benchmarks_doc_names_every_section():
    """docs/kernels.md's "Benchmarks" listed `scaling bench kernels|loss|linear|train|profile|stages|sass|fit`:
    cpu, quantizer and calibration, which run on any machine, were named nowhere in it but a rule on their files."""
    import re

    from scaling.commands.bench import SECTIONS

    text = (Path(__file__).resolve().parent.parent / "docs" / "kernels.md").read_text()
    benchmarks = text.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    (listed,) = re.findall(r"`scaling bench ([a-z]+(?:\|[a-z]+)+) \[--out", benchmarks)
    assert set(listed.split("|")) == set(SECTIONS) - {"targets"}  # (targets: its own line, it writes nothing)
    assert "`scaling bench targets [--out FILE]`" in benchmarks
    # what the numbers of their rows are (bench_cpu's and bench_cpu_quantizer's measured fields)
    for field in ("step_ms", "step_cpu_ms", "cpu_ratio_vs_bf16", "run_s", "reference_ms", "fused_ms", "speedup",
                  "bits_equal", "startup_s", "startup_cpu_s", "import_s", "import_cpu_s"):
        assert f"`{field}`" in benchmarks, field


def test_calibration_counts_its_cases_and_sweeps_with_their_nouns(tmp_path, capsys):
    """`bench calibration --noise-dist laplace --sweeps 1` (one case, for real) said '1 synthetic sweeps per case, ...
    1 cases:'; counts go through scaling.console.count, as its other lines do."""
    from scaling.cli import main

    out = tmp_path / "fits.json"
    assert main(["bench", "calibration", "--noise-dist", "laplace", "--sweeps", "1", "--bootstrap", "2",
                 "--out", str(out)]) == 0
    said = "".join(capsys.readouterr())  # (progress: stdout, or stderr under --json)
    assert "1 synthetic sweep per case, 2 bootstrap replicates each" in said and "1 case:" in said, said
    assert "of 1 sweep;" in said, said  # (the case's own line)


def test_a_calibrations_case_lines_say_which_of_how_many_and_the_time_left():
    """A calibration case takes minutes (8 cases, ~14 min by default), and its lines said neither which case of how
    many nor how long the rest would take."""
    from fits import calibration

    said: list[str] = []
    calibration.calibrate(sweeps=1, bootstrap=0, cases=[("3x3", "normal", "constant")] * 2, workers=1,
                          progress=said.append)
    assert [line.split()[0] for line in said] == ["[1/2]", "[2/2]"], said
    assert said[0].endswith(" left") and "left" not in said[1], said


def test_the_module_doc_states_the_flops_a_train_rows_mfu_counts():
    """scaling.bench's doc gave a `train` row's MFU numerator as (6N + attention) FLOPs per token, leaving out
    the LM head's 6·V·width that flops_per_token_exact counts (45% of it at 10M, 15% at 160M, vocabulary 32768)."""
    import scaling.bench

    doc = " ".join(scaling.bench.__doc__.split())
    assert ("MFU = 6·(N + V·width) + 12·depth·width·seq_len FLOPs per token (ModelSize.flops_per_token_exact, "
            "V the vocabulary)") in doc
