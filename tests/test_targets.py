"""scaling.targets and `scaling bench targets`: the emulation's speed targets read from a benchmark file."""

import json
import subprocess
import sys

from scaling import targets


def bench_file() -> dict:
    kernels = [
        {"name": "copy", "recipe": "bf16", "operand": "x", "gbps": 3800.0, "gbps_back_to_back": 4000.0},
        {"name": "quantize", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 2900.0, "gbps_back_to_back": 3100.0},
        {"name": "quantize", "recipe": "nvfp4", "operand": "fprop.w", "gbps": 2900.0, "gbps_back_to_back": 3100.0},
        {"name": "amax", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 2700.0},
        {"name": "gemm_operand", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 1500.0},
        # a later call's row, against its own call's copy
        {"name": "amax", "recipe": "ufp4", "operand": "fprop.x", "gbps": 2900.0, "copy_gbps": 4200.0},
    ]
    linear = [
        {"recipe": "nvfp4", "d": 2048, "tokens": 16384, "ratio_vs_bf16": 1.28, "ratio_range": [1.26, 1.35]},
        {"recipe": "mxfp4", "d": 2048, "tokens": 16384, "ratio_vs_bf16": 1.17, "ratio_range": [1.12, 1.2]},
        {"recipe": "mxfp4", "d": 4096, "tokens": 16384, "ratio_vs_bf16": 2.0},
        {"recipe": "quartet2", "d": 2048, "tokens": 16384, "ratio_vs_bf16": 1.45},
        {"recipe": "ufp4", "d": 2048, "tokens": 16384, "ratio_vs_bf16": 1.34},
    ]
    train = [
        {"recipe": "nvfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": 0.78, "compile_mode": "reduce-overhead"},
        {"recipe": "nvfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": 0.83, "compile_mode": "reduce-overhead"},
        {"recipe": "mxfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": 0.95, "compile_mode": "default"},
        {"recipe": "quartet2", "family": "nanochat", "size": "40M", "ratio_vs_bf16": 0.9, "compile_mode": "reduce-overhead"},
    ]
    return {"device": "test GPU", "copy_gbps": 4000.0, "kernels": kernels, "linear": linear, "train": train}


def by(rows, target_prefix):
    return {(r["recipe"], r["what"]): r for r in rows if r["target"].startswith(target_prefix)}


def test_kernels_are_shares_of_the_copy_one_row_a_launch():
    rows = by(targets.kernel_rows(bench_file()), "kernel")
    # the copy (the yardstick) and gemm_operand (every stage of an operand) are not kernels
    assert set(rows) == {("nvfp4", "quantize fprop.x, fprop.w"), ("nvfp4", "amax fprop.x"), ("ufp4", "amax fprop.x")}
    quantize, amax = rows[("nvfp4", "quantize fprop.x, fprop.w")], rows[("nvfp4", "amax fprop.x")]
    assert quantize["measured"] == 0.725 and quantize["met"] == "yes" and quantize["note"] == "of 4000 GB/s; 77.5% back to back"
    assert amax["measured"] == 0.675 and amax["met"] == "no" and amax["note"] == "of 4000 GB/s"
    # 2900 / 4200, not the header's 2900 / 4000
    assert rows[("ufp4", "amax fprop.x")]["measured"] == 2900 / 4200 and rows[("ufp4", "amax fprop.x")]["met"] == "no"


def test_layers_at_d_2048_with_quartet2s_own_limit_and_the_line():
    rows = {r["recipe"]: r for r in targets.layer_rows(bench_file())}
    assert rows["mxfp4"]["met"] == "yes" and rows["mxfp4"]["measured"] == 1.17  # not d = 4096's row
    assert rows["nvfp4"]["met"] == targets.AT_THE_LINE  # median 1.28, an alternation at 1.35
    assert rows["quartet2"]["limit"] == 1.5 and rows["quartet2"]["met"] == "yes"
    assert rows["ufp4"]["met"] == "no"
    assert rows["mxfp4_h16"]["met"] == "not measured" and rows["mxfp4_h16"]["measured"] is None


def test_training_from_the_row_a_sweeps_cost_uses():
    rows = {r["recipe"]: r for r in targets.train_targets(bench_file(), "b.json")}
    assert rows["nvfp4"]["measured"] == 0.83 and rows["nvfp4"]["met"] == "yes"  # the later of two rows
    assert rows["quartet2"]["met"] == "not measured"  # its 40M speed is not the 160M target's
    assert rows["mxfp4"]["met"] == "not measured"  # only a default-mode row, dropped where CUDA-graph rows exist


def test_summary_names_what_misses():
    lines = targets.summary(targets.check(bench_file(), "b.json"))
    assert lines[0] == "kernel >= 70% of copy: 1 of 3 met; not met: nvfp4 amax fprop.x; ufp4 amax fprop.x"
    assert "layer <= 1.3x bf16: 1 of 4 met; at the line: nvfp4; not met: ufp4; not measured: mxfp4_h16" in lines


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "scaling.cli", "bench", "targets", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_reads_the_file_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench_file()))
    before = path.read_text()
    r = run_cli("--out", str(path))
    assert r.returncode == 0, r.stderr
    assert "layer <= 1.3x bf16: 1 of 4 met; at the line: nvfp4" in r.stdout
    assert path.read_text() == before
    r = run_cli("--out", str(path), "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["targets"]) == 3 + 5 + 5


def test_cli_bad_file_is_one_message(tmp_path):
    r = run_cli("--out", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run_cli("--out", str(bad))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_cli_a_folder_is_one_plain_message(tmp_path):
    """`bench targets --out DIR` said "cannot read DIR as a benchmark JSON ([Errno 21] Is a directory: ...)"."""
    r = run_cli("--out", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--out {tmp_path} is a folder, not a file; give a benchmark JSON" in r.stderr and "Errno" not in r.stderr


def test_a_measurement_just_short_of_its_limit_is_not_rounded_onto_it(capsys):
    """A kernel at 69.96% of the copy rate was recorded as measured 0.7 (rounded to 3 decimals) against the limit
    0.7, met "no": the JSON and the table read as if the target held. The row keeps the measurement as measured."""
    from scaling.console import print_table

    bench = {"device": "test GPU", "copy_gbps": 4000.0,
             "kernels": [{"name": "amax", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 2798.4}]}
    (row,) = targets.kernel_rows(bench)
    assert row["measured"] == 2798.4 / 4000.0 and row["met"] == "no"
    print_table([row])
    assert "0.6996" in capsys.readouterr().out
