"""scaling.diagnostics and `scaling diagnose`: the measurements are right on inputs whose answer is
known, the UFP4 paper's claims show on the synthetic tensors, and bad input exits 2."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from scaling import diagnostics as dg
from scaling.cli import main
from scaling.commands.diagnose import print_tables
from scaling.errors import UserError
from scaling.quant import QuantSpec, fake_quantize


def test_level_error_theory():
    assert dg.level_error_theory((0, 0.5, 1, 1.5, 2, 3, 4, 6)) == [-0.125, 0, 0, 0, -0.125, 0, -0.25, 0.5]
    assert dg.level_error_theory(dg.levels_of(dg.FORMATS["ufp4"])) == [-0.0625] + [0.0] * 6 + [0.0625]
    assert dg.level_error_theory(dg.levels_of(dg.FORMATS["nvfp4_cap4"]))[-2:] == [0.0, 0.25]


def test_sqnr_db():
    x = torch.ones(100)
    assert dg.sqnr_db(x, 0.9 * x) == pytest.approx(20.0)
    assert dg.sqnr_db(x, x) == math.inf
    assert dg.sqnr_db(x, torch.full((100,), math.inf)) == -math.inf  # an overflowed y: no traceback


@pytest.mark.parametrize("elem", ["e2m1", "e1m2"])
def test_per_level_error_matches_theory_under_uniform_density(elem):
    """MX blocks whose amax is the grid max (E8M0 scale 1) and whose other elements are uniform on
    (-max, max): the block-scaled values are exactly uniform, so every level's mean error must be
    (l - r)/2 up to sampling noise."""
    gmax = {"e2m1": 6.0, "e1m2": 1.75}[elem]
    spec = QuantSpec(elem=elem, block=(1, 32), scale="e8m0", tensor_scale=False)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2048, 256, generator=g) * 2 - 1) * gmax
    x[:, ::32] = gmax  # each block's amax
    r = dg.analyse_tensor(x, spec)
    tol = 0.006 * gmax / 6 + 0.002
    assert r["level_error"][:-1] == pytest.approx(r["level_error_theory"][:-1], abs=tol)
    # The top level also holds each block's amax (error 0): uniform part weighted against that point.
    uniform_mass = (31 / 32) * (gmax - dg.levels_of(spec)[-2]) / 2 / gmax
    top = r["level_error_theory"][-1] * uniform_mass / (uniform_mass + 1 / 32)
    assert r["level_error"][-1] == pytest.approx(top, abs=tol)
    assert sum(r["level_mass"]) == pytest.approx(1.0)
    assert r["levels_used"] == 8 and 2.7 < r["level_entropy_bits"] <= 3.0


def test_ufp4_paper_claims_on_synthetic_tensors():
    """What `scaling diagnose` prints: E2M1 negative at levels 2 and 4, E1M2 interior ~ 0, and on
    heavy-tailed / outlier tensors RHT16 raises E1M2's SQNR while E2M1's drops or barely moves."""
    out = dg.run_diagnostics(formats=("nvfp4", "ufp4"), transforms=("none", "rht16"), gemm=False)
    claims = out["claims"]
    assert len(claims) == 4 * 2 + 2 * 2
    failed = [c for c in claims if not c["holds"]]
    assert not failed, failed
    for c in claims:  # the shrinkage is near the uniform-density theory, not just negative
        if c["claim"].startswith("E2M1"):
            assert -0.15 < c["measured"]["2"] < -0.08 and -0.3 < c["measured"]["4"] < -0.12


def test_run_diagnostics_shape_and_consistency():
    out = dg.run_diagnostics(formats=("nvfp4", "mxfp4", "ufp4", "int4"), transforms=("none", "h16", "rht16"),
                             size=(64, 256), seed=1)
    assert set(out) == {"config", "formats", "quant", "gemm", "claims"}
    assert out["config"]["tensors"] == list(dg.SYNTHETIC) and out["config"]["size"] == [64, 256]
    assert out["config"]["shapes"] == {k: [64, 256] for k in dg.SYNTHETIC}
    assert len(out["quant"]) == 4 * 4 * 3 and len(out["gemm"]) == 4 * 3
    rows = {(r["tensor"], r["format"], r["transform"]): r for r in out["quant"]}
    for r in out["quant"]:
        assert set(r) >= {"sqnr_db", "delta_sqnr_db", "mean_error", "levels_used", "level_entropy_bits",
                          "level_mass", "level_error", "level_error_theory"}
        assert len(r["level_mass"]) == len(out["formats"][r["format"]]["levels"])
        base = rows[(r["tensor"], r["format"], "none")]["sqnr_db"]
        assert r["delta_sqnr_db"] == pytest.approx(r["sqnr_db"] - base)
        # INT4 is E1M2 x 4: under two-level scaling the same values, so the same SQNR
        if r["format"] == "int4":
            assert r["sqnr_db"] == pytest.approx(rows[(r["tensor"], "ufp4", r["transform"])]["sqnr_db"], abs=1e-9)
    for g in out["gemm"]:
        assert all(10 < g[f"{k}_sqnr_db"] < 30 for k in ("fprop", "dgrad", "wgrad"))
    gemm_claims = [c for c in out["claims"] if c["tensor"].startswith("gemm")]
    assert len(gemm_claims) == 3 + 2  # E1M2: fprop, dgrad, wgrad; E2M1: the backward paths
    json.dumps(out)  # plain JSON types only (NaN aside)


def test_gemm_sqnr_is_the_product_of_fake_quantized_operands():
    ops = dg.gemm_operands(seed=0, shapes={"tokens": 256, "d_in": 64, "d_out": 128})
    spec = dg.spec_for("nvfp4", "none")
    got = dg.gemm_sqnr(ops, spec)
    x, w, dy = ops["x"], ops["w"], ops["dy"]
    exact = dy.double().T @ x.double()
    by_hand = fake_quantize(dy, spec, dim=0).double().T @ fake_quantize(x, spec, dim=0).double()
    assert got["wgrad"] == pytest.approx(dg.sqnr_db(exact, by_hand), abs=1e-9)
    # With a rotation the product in the rotated basis equals the one in x's basis (to fp32 noise).
    rht = dg.spec_for("nvfp4", "rht16")
    fq = lambda t, d: fake_quantize(t, rht, dim=d, seed=dg._seed(0)).double()  # noqa: E731
    in_x_basis = dg.sqnr_db(x.double() @ w.double().T, fq(x, 1) @ fq(w, 1).T)
    assert dg.gemm_sqnr(ops, rht)["fprop"] == pytest.approx(in_x_basis, abs=1e-3)


# --- the CLI -------------------------------------------------------------------------------------

def test_cli_user_tensor_json(tmp_path, capsys):
    path = tmp_path / "acts.npy"
    np.save(path, np.random.default_rng(0).standard_t(3, size=(4, 8, 64)).astype(np.float32))
    rc = main(["diagnose", "--tensor", str(path), "--formats", "nvfp4,ufp4", "--transforms", "none,rht16",
               "--no-gemm", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["tensors"] == ["acts"] and len(out["quant"]) == 4 and out["gemm"] == []
    # the tensor measured, flattened to rows of its last axis; no synthetic size (it was 512 x 256 here)
    assert out["config"]["shapes"] == {"acts": [32, 64]} and out["config"]["size"] is None


def test_cli_table(tmp_path, capsys):
    torch.save(torch.randn(32, 64), tmp_path / "w.pt")
    assert main(["diagnose", "--tensor", str(tmp_path / "w.pt"), "--transforms", "none,h16", "--no-gemm"]) == 0
    text = capsys.readouterr().out
    assert "per grid level" in text and "nvfp4_4over6" in text and "theory" in text


def test_cli_claim_that_cannot_be_measured(tmp_path, capsys):
    """A tensor of ±1 puts every element on E1M2's top level: no interior level is hit, so the
    interior-error claim is 'not measured' (holds null), not a failure."""
    x = torch.ones(8, 64)
    x[:, 1::2] = -1
    torch.save(x, tmp_path / "flat.pt")
    assert main(["diagnose", "--tensor", str(tmp_path / "flat.pt"), "--formats", "ufp4", "--transforms", "none",
                 "--no-gemm", "--json"]) == 0
    (claim,) = json.loads(capsys.readouterr().out)["claims"]
    assert claim["holds"] is None and claim["measured"]["max_abs_interior"] is None  # JSON: NaN -> null
    assert main(["diagnose", "--tensor", str(tmp_path / "flat.pt"), "--formats", "ufp4", "--transforms", "none",
                 "--no-gemm"]) == 0
    assert "not measured" in capsys.readouterr().out


def test_cli_exact_tensor_has_no_nan_delta(tmp_path, capsys):
    """All zeros (or ±1) quantize exactly with and without a transform: SQNR inf, and its change 0,
    not NaN (inf - inf); one used level has entropy 0, not -0."""
    torch.save(torch.zeros(4, 128), tmp_path / "z.pt")
    assert main(["diagnose", "--tensor", str(tmp_path / "z.pt"), "--formats", "nvfp4,mxfp4", "--transforms",
                 "none,h16", "--no-gemm"]) == 0
    text = capsys.readouterr().out
    assert "-0 " not in text
    out = dg.run_diagnostics(formats=("mxfp4",), transforms=("none", "h16"), tensors={"z": torch.zeros(4, 128)},
                             gemm=False)
    assert [r["delta_sqnr_db"] for r in out["quant"]] == [0.0, 0.0]
    assert all(r["sqnr_db"] == math.inf and math.copysign(1, r["level_entropy_bits"]) == 1 for r in out["quant"])
    # in JSON the inf is a null, as an undefined SQNR is: `exact` tells them apart
    assert main(["diagnose", "--tensor", str(tmp_path / "z.pt"), "--formats", "mxfp4", "--transforms", "none",
                 "--no-gemm", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["quant"][0]
    assert row["sqnr_db"] is None and row["exact"] is True
    assert dg.run_diagnostics(formats=("mxfp4",), transforms=("none",), tensors={"r": torch.randn(4, 128)},
                              gemm=False)["quant"][0]["exact"] is False


def test_zero_blocks_are_left_out_in_every_format():
    """docs/numerics.md: the shrinkage and grid use are over the elements of non-zero blocks. An MX
    (E8M0) scale is never 0, so zero rows counted at level 0 for mxfp4 and not for nvfp4."""
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(0))
    x[0] = 0
    for fmt in ("nvfp4", "mxfp4"):
        spec = dg.spec_for(fmt, "none")
        with_zeros, without = dg.analyse_tensor(x, spec), dg.analyse_tensor(x[1:], spec)
        assert with_zeros["level_mass"] == pytest.approx(without["level_mass"]), fmt
        assert with_zeros["mean_error"] == pytest.approx(without["mean_error"]), fmt
    assert math.isnan(dg.analyse_tensor(torch.zeros(2, 32), dg.spec_for("mxfp4", "none"))["mean_error"])


@pytest.mark.parametrize("make, args, message", [
    (None, ["--tensor", "missing.pt"], "does not exist"),
    (lambda p: np.save(p / "t.npy", np.zeros((4, 100), np.float32)), ["--tensor", "t.npy"], "multiple of"),
    (lambda p: torch.save({"a": torch.ones(2, 32)}, p / "d.pt"), ["--tensor", "d.pt"], "not a tensor"),
    (lambda p: (p / "t.txt").write_text("1 2"), ["--tensor", "t.txt"], "must end in"),
    (lambda p: np.save(p / "n.npy", np.full((2, 32), np.nan, np.float32)), ["--tensor", "n.npy"], "non-finite"),
    # finite, but a Hadamard group's sum overflows float32 (it printed NaN, or crashed in log10)
    (lambda p: torch.save(torch.full((2, 128), 1e38), p / "big.pt"), ["--tensor", "big.pt"],
     "too large for transform h16"),
    (lambda p: torch.save(torch.randn(2, 128) * 1e37, p / "big.pt"), ["--tensor", "big.pt", "--transforms",
                                                                         "none,rht128"], "leave rht128 out"),
    # finite in float64, past float32 (it was called "non-finite")
    (lambda p: torch.save(torch.full((2, 32), 1e300, dtype=torch.float64), p / "f64.pt"), ["--tensor", "f64.pt"],
     "beyond float32"),
    (None, ["--formats", "fp5"], "unknown format"),
    # a preset that is not one of the formats was "unknown format", as a typo is (a .toml is a format file:
    # tests/test_diagnose_formats.py)
    (None, ["--formats", "mxfp4_h16"], "'mxfp4_h16' is a recipe, not a format: give one of its operands as "
                                       "RECIPE:OPERAND, e.g. mxfp4_h16:fprop.x"),
    (None, ["--formats", "nvfp5"], "unknown format 'nvfp5' (did you mean nvfp4?)"),
    (None, ["--transforms", "rht64"], "unknown transform"),
    (None, ["--size", "100000000", "100000000"], "elements in all"),  # not an allocation failure
    (None, ["--size", "0", "256"], "two positive integers"),
    # the synthetic tensors' K: named by --size with a K that fits (it named the tensor "gaussian")
    (None, ["--size", "512", "100"], "--size 512 100: K = 100 must be a multiple of 128"),
    # --size was ignored with --tensor
    (lambda p: torch.save(torch.randn(4, 128), p / "t.pt"), ["--tensor", "t.pt", "--size", "8", "8"],
     "--size shapes the synthetic tensors, and --tensor replaces them"),
    # a seed past torch's generator range was a traceback (ValueError: Overflow when unpacking long long)
    (None, ["--seed", "100000000000000000"], "--seed: must be 4294967295 or less"),
    (None, ["--seed", "-1"], "--seed: must be 0 or more"),
    # nothing reads the seed (no synthetic tensor, no GEMM, no random signs): seed 3 printed seed 0's numbers
    (lambda p: torch.save(torch.randn(4, 128), p / "t.pt"), ["--tensor", "t.pt", "--transforms", "none,h16",
                                                              "--seed", "3"],
     "--seed draws the synthetic tensors, the single-GEMM operands and the RHT signs, and none is used here"),
])
def test_cli_bad_input_exits_2(tmp_path, monkeypatch, capsys, make, args, message):
    monkeypatch.chdir(tmp_path)
    if make:
        make(tmp_path)
    try:
        code = main(["diagnose", "--no-gemm", *args])
    except SystemExit as e:  # argparse's refusal of an option's value
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.float16,
                                   torch.float8_e4m3fn, torch.float8_e5m2])
def test_any_integer_or_float_tensor_is_read(tmp_path, dtype):
    """(int32/int64 were read, int8/uint8/int16 refused as "need a float tensor"; FP8 has no isfinite)"""
    torch.save(torch.arange(-8, 120).reshape(2, 64).to(dtype), tmp_path / "t.pt")
    t = dg.load_tensor(tmp_path / "t.pt")
    assert t.dtype == torch.float32 and t.shape == (2, 64)


def test_a_bool_tensor_is_refused(tmp_path):
    torch.save(torch.ones(2, 64, dtype=torch.bool), tmp_path / "b.pt")
    with pytest.raises(UserError, match="torch.bool tensor of shape \\(2, 64\\); need a non-empty tensor of floats or integers"):
        dg.load_tensor(tmp_path / "b.pt")


def test_the_documented_json_shape_has_every_key_and_no_other():
    """docs/numerics.md's JSON example lacked config.shapes and a quant row's exact."""
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "numerics.md").read_text()
    doc = json.loads(re.search(r"## JSON shape.*?```json\n(.*?)```", text, re.S).group(1))
    out = dg.run_diagnostics(formats=("nvfp4",), transforms=("none",), size=(16, 128))
    assert set(doc) == set(out)
    assert set(doc["config"]) == set(out["config"])
    assert set(doc["formats"]["nvfp4"]) == set(out["formats"]["nvfp4"])
    for key in ("quant", "gemm", "claims"):
        assert set(doc[key][0]) == set(out[key][0]), key


def test_the_seed_help_names_everything_it_seeds(capsys):
    """--seed also draws the single-GEMM operands (with --tensor too); its help named only the synthetic
    tensors and the RHT signs."""
    ops = [dg.gemm_operands(seed)["x"] for seed in (0, 1)]
    assert not torch.equal(*ops)
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "seed of the synthetic tensors, the single-GEMM operands and the RHT signs" in help_text


def test_every_gemm_table_column_of_numbers_states_its_unit(capsys):
    """The single-GEMM table's changes were headed "Δfprop", "Δdgrad", "Δwgrad", with no unit, where the
    quantization table's reads "ΔSQNR dB"."""
    out = dg.run_diagnostics(formats=("nvfp4",), transforms=("none", "rht16"), size=(16, 128))
    print_tables(out)
    header = next(line for line in capsys.readouterr().out.splitlines() if "fprop" in line and "format" in line)
    for gemm in ("fprop", "dgrad", "wgrad"):
        assert f"{gemm} dB" in header and f"Δ{gemm} dB" in header


def test_the_documented_example_output_is_what_the_command_prints(capsys):
    """docs/numerics.md's "Measured" block is a verbatim run of its command: a change to the tables or
    the numbers shows here."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "numerics.md").read_text()
    command, shown = re.search(r"```\n\$ scaling (diagnose [^#\n]*?)\s+#[^\n]*\n(.*?)```", text, re.S).groups()
    assert main(command.split()) == 0
    printed = capsys.readouterr().out
    assert [line.rstrip() for line in printed.splitlines()] == [line.rstrip() for line in shown.splitlines()]


def test_a_seed_is_taken_where_something_reads_it(tmp_path, capsys):
    """With --tensor and --no-gemm the seed draws the RHT signs alone: taken with an rht transform (and
    it changes the numbers), and not needed without one."""
    torch.save(torch.randn(4, 128, generator=torch.Generator().manual_seed(0)), tmp_path / "t.pt")
    args = ["diagnose", "--tensor", str(tmp_path / "t.pt"), "--formats", "nvfp4", "--no-gemm", "--json"]
    sqnr = {}
    for seed in ("0", "1"):
        assert main([*args, "--transforms", "rht16", "--seed", seed]) == 0
        sqnr[seed] = json.loads(capsys.readouterr().out)["quant"][0]["sqnr_db"]
    assert sqnr["0"] != sqnr["1"]
    assert main([*args, "--transforms", "none,h16"]) == 0


def test_diagnose_and_the_report_say_a_claims_outcome_and_an_exact_row_in_the_same_words(tmp_path, capsys):
    """`scaling diagnose` printed a claim's `holds` as 'yes', 'NO' or 'not measured', while the report showed the same
    JSON's `holds` (and `exact`) as 'True', 'False' or a blank: both now say 'yes', 'no' or 'not measured'
    (`scaling.console.yes_no`)."""
    from reports.build import DIAGNOSTIC_TABLES, diagnostic_tables
    from reports.render import fmt

    torch.manual_seed(0)
    flat = torch.ones(8, 64)
    flat[:, 1::2] = -1  # no interior level hit: not measured
    near = torch.tensor([6.0, 1.9, 3.8, 1.9] * 4).repeat(8, 4)  # each block's amax 6: 1.9 -> 2, 3.8 -> 4, error > 0
    tensors = {"flat": flat, "near": near, "gauss": torch.randn(64, 64)}
    args = ["diagnose", "--formats", "nvfp4", "--transforms", "none", "--no-gemm"]
    for name, t in tensors.items():
        torch.save(t, tmp_path / f"{name}.pt")
        args += ["--tensor", str(tmp_path / f"{name}.pt")]
    assert main([*args, "--json"]) == 0
    diag = json.loads(capsys.readouterr().out)
    assert [c["holds"] for c in diag["claims"]] == [None, False, True]
    assert main(args) == 0
    table = capsys.readouterr().out.split("UFP4 paper claims")[1]
    printed = [line.strip("│ ").rsplit("│", 1)[-1].strip() for line in table.splitlines() if line.startswith("│")]
    assert printed == ["not measured", "no", "yes"], table
    shown = {caption: [{k: fmt(v) for k, v in row.items()} for row in rows] for rows, caption in diagnostic_tables(diag)}
    assert [row["holds"] for row in shown[DIAGNOSTIC_TABLES["claims"]]] == printed
    assert [row["exact"] for row in shown[DIAGNOSTIC_TABLES["quant"]]] == ["yes", "no", "no"]


def test_a_claim_whose_delta_is_within_noise_over_seeds_reads_neither_yes_nor_no():
    """Each claim was one draw (one seed's tensors, operands and RHT signs) read as yes or no: E2M1's RHT16 wgrad
    change is +0.22 dB under seed 0 ("no", it does not degrade) and -0.12 under seed 1. Over seeds its 95% interval
    straddles 0, so it is within noise (holds null); dgrad's, clear of 0 on every seed, still reads yes."""
    out = dg.run_diagnostics(formats=("nvfp4",), transforms=("none", "rht16"), size=(16, 128))
    assert out["config"]["seeds"] == dg.DEFAULT_SEEDS
    claims = {c["tensor"]: c for c in out["claims"] if c["tensor"].startswith("gemm")}
    wgrad, dgrad = claims["gemm wgrad"], claims["gemm dgrad"]
    (row,) = [r for r in out["gemm"] if r["transform"] == "rht16"]
    assert wgrad["measured"] == {"delta_db": row["wgrad_delta_db"]} and row["wgrad_delta_db"] > 0.2  # seed 0's: a "no"
    low, high = wgrad["ci95"]["delta_db"]
    assert low < 0 < high and low < wgrad["mean"]["delta_db"] < high and wgrad["sd"]["delta_db"] > 0
    assert wgrad["holds"] is None and wgrad["verdict"] == "within noise"
    assert dgrad["ci95"]["delta_db"][1] < 0 and dgrad["holds"] is True and dgrad["verdict"] == "yes"
    from reports.build import DIAGNOSTIC_TABLES, diagnostic_tables  # the report says so too, not "not measured"

    shown = dict((caption, rows) for rows, caption in diagnostic_tables(out))[DIAGNOSTIC_TABLES["claims"]]
    assert [(c["tensor"], c["holds"]) for c in shown if c["tensor"].startswith("gemm")] == [
        ("gemm dgrad", "yes"), ("gemm wgrad", "within noise")]
    # with the numbers the verdict was read from (the table left the dict-valued mean and interval out)
    (shown_wgrad,) = [c for c in shown if c["tensor"] == "gemm wgrad"]
    mean, (low, high) = wgrad["mean"]["delta_db"], wgrad["ci95"]["delta_db"]
    from reports.render import fmt

    assert shown_wgrad["measured"] == f"delta_db: {fmt(mean)} [{fmt(low)}, {fmt(high)}]"


def test_a_claim_is_judged_on_its_interval_over_seeds():
    """yes or no only where every number's interval lies on one side of the bound; a number no seed moves (a user
    tensor under RTNE, no transform) is its own interval, so it is decided however close to the bound it lies."""
    straddles, below = dg.spread([0.01, -0.02, 0.015]), dg.spread([-1.0, -1.1, -0.9])
    assert straddles.low < 0 < straddles.high and dg.judge([straddles], "<", 0.0) == (None, "within noise")
    assert dg.judge([below], "<", 0.0) == (True, "yes") and dg.judge([below], ">", 0.0) == (False, "no")
    assert dg.judge([below, straddles], "<", 0.0) == (None, "within noise")  # every number must be clear
    assert dg.judge([straddles, below], ">", 0.0) == (False, "no")  # one wholly on the wrong side is a no
    assert dg.spread([-1e-9] * 3) == (-1e-9, 0.0, -1e-9, -1e-9) and dg.judge([dg.spread([-1e-9] * 3)], "<", 0) == (True, "yes")
    assert dg.judge([dg.spread([0.0, 0.0])], "<", 0.0) == (False, "no")  # (the bound itself is not below it)
    assert dg.judge([dg.spread([1.0, math.nan])], "<", 0.0) == (None, "not measured")


def test_seeds_are_two_or_more_and_taken_where_a_seed_is_read(tmp_path, capsys):
    """--seeds 1 leaves no spread to judge a claim against; --seeds where no seed draws anything (a user tensor, no
    GEMM, no RHT or SR) measures the same numbers again: both are refused, exit 2. --help's default is the API's."""
    from scaling.commands.diagnose import DEFAULT_SEEDS

    assert DEFAULT_SEEDS == dg.DEFAULT_SEEDS
    with pytest.raises(UserError, match="seeds must be 2 or more"):
        dg.run_diagnostics(formats=("nvfp4",), transforms=("none",), size=(16, 128), seeds=1, gemm=False)
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--seeds", "1", "--no-gemm"])
    assert e.value.code == 2 and "must be 2 or more" in capsys.readouterr().err
    torch.save(torch.randn(4, 128), tmp_path / "t.pt")
    args = ["diagnose", "--tensor", str(tmp_path / "t.pt"), "--formats", "nvfp4", "--no-gemm", "--seeds", "3"]
    assert main([*args, "--transforms", "none"]) == 2
    assert "--seeds draws the synthetic tensors" in capsys.readouterr().err
    assert main([*args, "--transforms", "none,rht16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["seeds"] == 3


def test_element_grid_claims_are_checked_on_every_format_of_that_grid_by_its_spec():
    """The E2M1 shrinkage claim was checked on the format named nvfp4 only, and E1M2's on ufp4: mxfp4 (E2M1 elements
    under E8M0 scales), a format file's E2M1 spec under any name, and int4 (E1M2's grid x 4) were never checked. Now
    every RTNE format whose grid is the claim's (up to a scale the block scales absorb) is; a capped grid (its top is
    another level) or SR (no RTNE error) is not."""
    from scaling.recipes import MX4, NV

    mine = dg.Format("mine", MX4.but(block=(1, 16)), "mine.toml")
    sr = dg.Format("sr_e2m1", NV.but(rounding="sr"), "sr.toml")
    out = dg.run_diagnostics(formats=("mxfp4", "nvfp4_cap4", "nvfp4_4over6", "ufp4", "int4", mine, sr),
                             transforms=("none",), size=(128, 128), gemm=False)
    claims = {(c["claim"][:4], c["format"], c["tensor"]): c for c in out["claims"]}
    assert {(grid, f) for grid, f, _ in claims} == {("E2M1", "mxfp4"), ("E2M1", "nvfp4_4over6"), ("E2M1", "mine"),
                                                   ("E1M2", "ufp4"), ("E1M2", "int4")}
    for tensor in dg.SYNTHETIC:
        assert claims[("E2M1", "mxfp4", tensor)]["holds"] is True and claims[("E2M1", "mine", tensor)]["holds"] is True
        # in E1M2's grid units: INT4 under two-level scaling rounds to the same values, 4x the grid units
        int4, ufp4 = claims[("E1M2", "int4", tensor)], claims[("E1M2", "ufp4", tensor)]
        assert int4["mean"] == pytest.approx(ufp4["mean"]) and int4["holds"] is ufp4["holds"] is True
        # 4/6's blocks that map their amax to 4 put it on level 4, which collects their largest values: not shrunk
        four_six = claims[("E2M1", "nvfp4_4over6", tensor)]
        assert four_six["ci95"]["4"][0] > 0 and four_six["holds"] is False
    assert dg.grid_scale(dg.FORMATS["int4"], "e1m2") == 4 and dg.grid_scale(dg.FORMATS["ufp4"], "e1m2") == 1
    assert dg.grid_scale(dg.FORMATS["nvfp4_cap4"], "e2m1") is None and dg.grid_scale(sr.spec, "e2m1") is None


def test_the_synthetic_laplace_tensor_is_finite_where_a_uniform_draw_is_zero():
    """torch.rand can return 0, which the Laplace inverse CDF turned into an inf: seed 0's 4096 x 2048 laplace tensor
    held one, and `scaling diagnose --size 4096 2048` refused its own synthetic tensor as too large for h16."""
    x = dg.synthetic_tensor("laplace", 4096, 2048, 0)
    assert torch.isfinite(x).all()
    assert x.abs().max() < 12  # (the clamped draw's value, -ln(2^-24)/sqrt(2) = 11.76, is the farthest tail)


def test_diagnoses_seed_lines_say_how_far_of_how_many():
    """'seed 57: the claims' 26 measurements' said which seed, not of how many (--seeds takes up to 1000)."""
    said = []
    dg.run_diagnostics(formats=("nvfp4",), transforms=("none",), size=(16, 64), gemm=False, seeds=3, progress=said.append)
    seeds = [line for line in said if line.startswith("seed ")]
    assert [line.split(":")[0] for line in seeds] == ["seed 1 (2 of 3)", "seed 2 (3 of 3)"], said
