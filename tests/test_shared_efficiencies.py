"""fits.shared: efficiencies shared across recipes by format (the Quartet paper's v1 law), `scaling fit
--shared-efficiencies`, and the check of each recipe's own constant efficiencies against them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import fits
from fits.shared import recipe_formats, table_formats
from fits.synthetic import synthetic_table
from scaling.cli import main
from scaling.errors import UserError
from scaling.recipes import PRESETS

SMALL = dict(sizes=np.geomspace(2e7, 2e9, 4), ratios=(5, 20, 80))
FAST = dict(law="quartet", top=5, workers=1)


def with_formats(table: pl.DataFrame, formats: dict[str, tuple[str, str]]) -> pl.DataFrame:
    """The table with a user's forward_format and backward_format columns."""
    return table.with_columns(forward_format=pl.col("recipe").replace_strict({r: f for r, (f, _) in formats.items()}),
                              backward_format=pl.col("recipe").replace_strict({r: b for r, (_, b) in formats.items()}))


def test_shared_efficiencies_of_presets_recover_each_formats_truth():
    """mxfp4, mxfp4_sr and mxfp4_fprop share one forward format (MXFP4's fprop) and have three backward formats: one
    effN and three effDs are fitted (4 parameters against the separate fits' 6), each near its truth."""
    truth_n, truth_d = 0.65, {"mxfp4": 0.8, "mxfp4_sr": 0.9, "mxfp4_fprop": 0.97}
    t = synthetic_table({"bf16": {}, **{r: {"effN": truth_n, "effD": d} for r, d in truth_d.items()}}, noise=0.0005,
                        **SMALL)
    out = fits.shared_efficiencies(t, bootstrap=0, top=5, workers=1)
    forward = PRESETS["mxfp4"].forward_format
    assert list(out["forward"]) == [forward] and out["forward"][forward]["recipes"] == sorted(truth_d)
    assert out["forward"][forward]["effN"] == pytest.approx(truth_n, rel=0.03)
    assert len(out["backward"]) == 3 and out["n_params"] == 4 and out["n_params_separate"] == 6
    for r, d in truth_d.items():
        entry = out["recipes"][r]
        assert entry["backward_format"] == PRESETS[r].backward_format
        assert out["backward"][entry["backward_format"]]["effD"] == pytest.approx(d, rel=0.03)
        assert entry["effN"]["shared"] == out["forward"][forward]["effN"]
        assert entry["effN"]["check"] == "consistent"  # (the test needs no bootstrap)
        assert entry["effD"]["check"] is None and "the only recipe of its backward format" in entry["effD"]["unchecked"]
    # the shared fit is the separate fits with fewer parameters: never below their summed objective
    assert out["objective"] >= out["objective_separate"] * (1 - 1e-9)
    assert out["baseline_formats"] == {"forward": "bf16", "backward": "bf16"}


def test_a_bf16_forward_recipe_has_effN_exactly_1_not_a_parameter():
    """A recipe whose forward format is the baseline's (BF16) gets effN = 1, not fitted; its backward format's effD
    is shared with the recipe of the same backward format (the table's own columns, any strings)."""
    formats = {"bf16": ("bf16", "bf16"), "fp4": ("FP4 fwd", "FP4 bwd"), "fp4_sr": ("FP4 fwd", "FP4 SR bwd"),
               "bwd_only": ("bf16", "FP4 bwd")}
    truth = {"fp4": (0.7, 0.85), "fp4_sr": (0.7, 0.92), "bwd_only": (1.0, 0.85)}
    t = synthetic_table({"bf16": {}, **{r: {"effN": n, "effD": d} for r, (n, d) in truth.items()}}, noise=0.0005,
                        **SMALL)
    out = fits.analyse(with_formats(t, formats), bootstrap=0, shared_efficiencies=True, **FAST)["shared_efficiencies"]
    assert out["n_params"] == 3  # effN of "FP4 fwd"; effD of "FP4 bwd" and "FP4 SR bwd"
    assert out["forward"]["bf16"] == {"effN": 1.0, "ci95": [1.0, 1.0], "fitted": False, "recipes": ["bwd_only"],
                                      "pinned": True, "unpinned": []}
    assert out["recipes"]["bwd_only"]["effN"]["shared"] == 1.0
    assert out["forward"]["FP4 fwd"]["effN"] == pytest.approx(0.7, rel=0.03)
    assert out["backward"]["FP4 bwd"]["recipes"] == ["bwd_only", "fp4"]
    assert out["backward"]["FP4 bwd"]["effD"] == pytest.approx(0.85, rel=0.03)
    assert out["backward"]["FP4 SR bwd"]["effD"] == pytest.approx(0.92, rel=0.03)


def test_a_recipe_whose_effN_differs_from_its_format_mates_is_not_consistent():
    """Two recipes of one forward format whose true effN differ (0.55 and 0.85): the shared value falls between, and
    the test of each against it rejects; a recipe alone in its format (nvfp4) has nothing shared to check."""
    truth = {"mxfp4": (0.55, 0.9), "mxfp4_sr": (0.85, 0.9), "nvfp4": (0.7, 0.8)}
    t = synthetic_table({"bf16": {}, **{r: {"effN": n, "effD": d} for r, (n, d) in truth.items()}}, noise=0.001,
                        **SMALL)
    out = fits.shared_efficiencies(t, bootstrap=20, top=5, workers=1)
    checks = {r: e["effN"]["check"] for r, e in out["recipes"].items()}
    assert checks == {"mxfp4": "not consistent", "mxfp4_sr": "not consistent", "nvfp4": None}, out["recipes"]
    assert out["recipes"]["nvfp4"]["effN"]["unchecked"] == "the only recipe of its forward format: its effN is its own"
    assert out["n_replicates"] == 20
    lo, hi = out["forward"][PRESETS["mxfp4"].forward_format]["ci95"]
    assert 0.55 < lo < hi < 0.85
    # the constraint costs objective that the separate fits do not pay
    assert out["objective"] > 1.5 * out["objective_separate"]


def test_the_shared_fits_replicates_are_analyses():
    """The bootstrap draws the replicates `analyse` draws for the seed: the recipes' own intervals beside the shared
    ones are those of `analyse` without the option, and the rest of its output is unchanged by it."""
    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "mxfp4_sr": {"effN": 0.7, "effD": 0.9}}, **SMALL)
    plain = fits.analyse(t, bootstrap=8, seed=3, **FAST)
    both = fits.analyse(t, bootstrap=8, seed=3, shared_efficiencies=True, **FAST)
    shared = both.pop("shared_efficiencies")
    for out in (plain, both):
        out.pop("timing")
    assert json.dumps(plain, sort_keys=True) == json.dumps(both, sort_keys=True)
    assert shared["recipes"]["mxfp4"]["effD"]["own_ci95"] == plain["groups"]["mxfp4"]["ci95"]["effD_const"]


def test_a_format_the_runs_do_not_pin_is_said_so(capsys):
    """The baseline law's A and alpha not pinned (two model sizes): effN, which scales N inside that term, is no
    number of the data, and no recipe's effN is checked against it. Nor is each recipe's own effN beside it, by the
    same rule (`fit.efficiency_identified`): it was printed as a number there; both now read "not identified", as
    every efficiency the runs do not identify does (the word was "not pinned" here alone)."""
    from scaling.commands.fit import print_shared

    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "mxfp4_sr": {"effN": 0.7}}, sizes=[1e8, 1e9],
                        ratios=(5, 10, 20, 40, 80))
    out = fits.shared_efficiencies(t, law="chinchilla", bootstrap=0, top=5, workers=1)
    entry = out["forward"][PRESETS["mxfp4"].forward_format]
    assert not entry["pinned"] and any("does not pin A" in why for why in entry["unpinned"]), entry
    assert out["recipes"]["mxfp4"]["effN"]["check"] is None
    assert out["recipes"]["mxfp4"]["effN"]["own_identified"] is False, out["recipes"]["mxfp4"]["effN"]
    print_shared(out, "chinchilla", "bf16", 0)
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.lstrip("│ ").startswith("mxfp4 "))
    effN_own, effN_shared = [c.strip() for c in row.strip("│ ").split("│")][1:3]
    assert effN_own == effN_shared == "not identified" and "not pinned" not in printed, row


def test_formats_come_from_the_table_else_the_presets_and_unknown_ones_are_refused():
    raw = pl.DataFrame({"recipe": ["a", "a", "b", "mxfp4"], "forward_format": ["x", "x", " y ", None],
                        "backward_format": ["u", "u", "v", ""]})
    assert table_formats(raw) == {"a": ("x", "u"), "b": ("y", "v")}
    assert recipe_formats(["a", "mxfp4"], table_formats(raw))["mxfp4"] == (PRESETS["mxfp4"].forward_format,
                                                                          PRESETS["mxfp4"].backward_format)
    with pytest.raises(UserError, match=r"recipes 'mine', 'yours' are not known.*add columns forward_format"):
        recipe_formats(["bf16", "mine", "yours"], {})
    with pytest.raises(UserError, match=r"recipe 'a' has 2 different forward_format values \('x' and 'z'\)"):
        table_formats(raw.with_columns(forward_format=pl.Series(["x", "z", "y", None])))
    with pytest.raises(UserError, match=r"has a 'forward_format' column but no 'backward_format'"):
        table_formats(raw.drop("backward_format"))
    with pytest.raises(UserError, match=r"recipe 'b' has a backward_format but a blank forward_format"):
        table_formats(raw.with_columns(forward_format=pl.Series(["x", "x", None, None])))


def test_scaling_fit_shared_efficiencies_json_and_table(tmp_path, capsys):
    path = tmp_path / "t.csv"
    synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "mxfp4_fprop": {"effN": 0.7, "effD": 0.95}},
                    **SMALL).write_csv(path)
    args = ["fit", str(path), "--law", "quartet", "--shared-efficiencies", "--bootstrap", "4", "--starts", "5",
            "--workers", "1"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["shared_efficiencies"]["recipes"]) == {"mxfp4", "mxfp4_fprop"}
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "shared efficiencies against bf16's quartet law" in text and PRESETS["mxfp4"].forward_format in text
    assert "summed over the recipes' own constant fits" in text


def test_scaling_fit_says_a_cause_shared_by_formats_once(tmp_path, capsys):
    """Two forward formats on a baseline law that does not pin A and alpha: its cause, one sentence, printed once."""
    path = tmp_path / "t.csv"
    synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "nvfp4": {"effN": 0.8}}, sizes=[1e8, 1e9],
                    ratios=(5, 10, 20, 40, 80)).write_csv(path)
    assert main(["fit", str(path), "--shared-efficiencies", "--bootstrap", "0", "--starts", "5", "--workers", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("not identified: ")]
    assert lines and len(lines) == len(set(lines)) and any("does not pin A" in line for line in lines), lines


def test_scaling_fit_refuses_unknown_formats_with_exit_2(tmp_path, capsys):
    path = tmp_path / "t.csv"
    synthetic_table({"bf16": {}, "mine": {"effN": 0.7}}, **SMALL).write_csv(path)
    assert main(["fit", str(path), "--shared-efficiencies", "--bootstrap", "0", "--starts", "5"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "recipe 'mine' are not known" in err and "forward_format" in err and "backward_format" in err, err
    # without the option the same table fits as before
    assert main(["fit", str(path), "--bootstrap", "0", "--starts", "5", "--json"]) == 0


def test_the_quartet_v1_spec_pins_the_shared_efficiencies():
    """sweeps/quartet_v1.toml's grid (its sizes × tokens per parameter, its recipes) on losses of known efficiencies,
    with 0.3% noise on the loss: every shared efficiency is pinned and its 95% interval holds the truth, the forward
    one within ±20% of it."""
    from models.ladder import model_size
    from sweeps.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "quartet_v1.toml", ["data=builtin"])
    truth = {"mxfp4": 0.85, "mxfp4_sr": 0.893, "mxfp4_fprop": 0.97, "mxfp4_fprop_dgrad": 0.92}  # effD; effN 0.645
    assert set(spec.recipe) == {"bf16", *truth}
    t = synthetic_table({"bf16": {}, **{r: {"effN": 0.645, "effD": d} for r, d in truth.items()}},
                        sizes=[model_size(spec.family[0], s).n_params for s in spec.size],
                        ratios=spec.tokens_per_param, noise=0.003, seed=1)
    out = fits.shared_efficiencies(t, law="quartet", bootstrap=40, top=5, workers=1)
    (fmt, forward), = out["forward"].items()
    assert fmt == PRESETS["mxfp4"].forward_format and forward["pinned"]
    lo, hi = forward["ci95"]
    assert lo <= 0.645 <= hi and 0.645 / 1.2 < lo and hi < 0.645 * 1.2, forward
    for recipe, effD in truth.items():
        entry = out["backward"][PRESETS[recipe].backward_format]
        assert entry["pinned"] and entry["ci95"][0] <= effD <= entry["ci95"][1], (recipe, entry)


def test_the_check_pairs_each_replicates_own_and_shared_values():
    """effN 0.62 and 0.67 under one forward format: the test of each recipe's own effN against the shared one rejects
    for both, and each own/shared interval, paired over the replicates (the baseline law's uncertainty, which both
    share, cancels in it), excludes 1; the shared value lies inside mxfp4_sr's own interval, which that uncertainty
    widens: comparing the two said "consistent" there."""
    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.62, "effD": 0.85}, "mxfp4_sr": {"effN": 0.67, "effD": 0.893}},
                        sizes=np.geomspace(2e7, 2e9, 5), ratios=(5, 10, 20, 40, 80), noise=0.002, seed=1)
    out = fits.shared_efficiencies(t, bootstrap=60, **FAST)
    for recipe, side in (("mxfp4", -1), ("mxfp4_sr", 1)):
        e = out["recipes"][recipe]["effN"]
        lo, hi = e["ratio_ci95"]
        assert (hi < 1 if side < 0 else lo > 1) and e["check"] == "not consistent", (recipe, e)
    sr = out["recipes"]["mxfp4_sr"]["effN"]
    assert sr["own_ci95"][0] < sr["shared"] < sr["own_ci95"][1], sr  # (unpaired, mxfp4_sr would pass)


SHARED_ROW_KEYS = {"grid", "noise_dist", "noise_sd", "truth", "law", "sweeps", "bootstrap", "false_rate", "false_checks",
                   "false_rate_raw", "power_raw", "sharing_rejected", "power", "power_check", "not_consistent", "coverage_effN", "coverage_effD", "coverage", "unchecked"}


def test_calibrate_shared_runs_a_tiny_case_into_the_documented_row():
    """`fits.calibration.calibrate_shared` (`scaling bench calibration --shared`) on 2 sweeps of few replicates: one
    row per case with docs/fits.md's keys, the split truth's power read off mxfp4_sr's effN check and its effN
    interval, which has no single truth, not scored."""
    from fits.calibration import calibrate_shared

    rows = calibrate_shared(sweeps=2, bootstrap=5, cases=(("3x3", "normal", "quartet", "split"),), workers=1)
    assert len(rows) == 1 and set(rows[0]) == SHARED_ROW_KEYS
    row = rows[0]
    assert (row["sweeps"], row["bootstrap"], row["truth"], row["law"], row["noise_dist"]) == (2, 5, "split", "quartet",
                                                                                             "normal")
    assert row["power_check"] == "mxfp4_sr effN" and row["power"] == row["not_consistent"]["mxfp4_sr effN"]
    assert row["false_checks"] == ["mxfp4 effD", "mxfp4_sr effD", "mxfp4_fprop effD"]  # (effN's truth is not shared)
    assert set(row["not_consistent"]) == {f"{r} {e}" for r in ("mxfp4", "mxfp4_sr", "mxfp4_fprop") for e in ("effN", "effD")}
    assert row["coverage_effN"] is None and row["coverage"]["effN of mxfp4+mxfp4_fprop+mxfp4_sr"] is None
    assert set(row["coverage"]) == {"effN of mxfp4+mxfp4_fprop+mxfp4_sr", "effD of mxfp4", "effD of mxfp4_sr",
                                    "effD of mxfp4_fprop"}
    for rate in (row["false_rate"], row["power"], row["coverage_effD"], *row["not_consistent"].values()):
        assert rate is None or 0.0 <= rate <= 1.0


def test_shared_calibration_cases_add_heavy_tailed_noise_to_the_normal_ones():
    """The shared check was calibrated under 0.5% normal noise alone; the kappa = 0 test's CASES also under laplace
    and t3. SHARED_CASES keeps the six normal cases (their rows' keys and seeds unchanged) and adds 6 x 5, Quartet's
    law, shared and split, under t3 and laplace, each case naming its noise distribution as CASES' do."""
    from fits.calibration import SHARED_CASES
    from fits.synthetic import NOISE

    normal = [(g, law, truth) for g, dist, law, truth in SHARED_CASES if dist == "normal"]
    assert normal == [("6x5", "quartet", "shared"), ("6x5", "quartet", "split"), ("4x4", "quartet", "shared"),
                      ("4x4", "quartet", "split"), ("6x5", "chinchilla", "shared"), ("6x5", "chinchilla", "split")]
    heavy = [case for case in SHARED_CASES if case[1] != "normal"]
    assert heavy == [("6x5", dist, "quartet", truth) for dist in ("t3", "laplace") for truth in ("shared", "split")]
    assert {dist for _, dist, _, _ in SHARED_CASES} <= set(NOISE)


def test_a_shared_calibration_draws_its_cases_noise_distribution():
    """A case's noise distribution reaches its sweeps' losses (synthetic_table's with that noise_dist, the same seeds
    as the normal case's) and its row's noise_dist, which was "normal" whatever the case."""
    from fits.calibration import GRIDS, SHARED_TRUTHS, calibrate_shared, shared_sweep_table

    sizes, ratios = GRIDS["3x3"]
    t3 = shared_sweep_table("3x3", "t3", "shared", noise=0.005, seed=3)
    expected = synthetic_table({"bf16": {}, **SHARED_TRUTHS["shared"]}, sizes=sizes, ratios=ratios, noise=0.005,
                               noise_dist="t3", seed=3)
    assert t3.equals(expected)
    normal = shared_sweep_table("3x3", "normal", "shared", noise=0.005, seed=3)
    assert normal.equals(synthetic_table({"bf16": {}, **SHARED_TRUTHS["shared"]}, sizes=sizes, ratios=ratios,
                                         noise=0.005, seed=3))  # (the normal cases' sweeps as before)
    assert not np.allclose(t3["loss"], normal["loss"])
    [row] = calibrate_shared(sweeps=2, bootstrap=3, cases=(("3x3", "t3", "quartet", "shared"),), workers=1)
    assert (row["noise_dist"], row["noise_sd"], row["grid"], row["truth"]) == ("t3", 0.005, "3x3", "shared")


def test_a_shared_calibration_rows_rates_count_each_check_and_interval():
    """`shared_row`'s arithmetic on two sweeps whose verdicts are given: the false rate pools the null checks'
    "not consistent" over the sweeps that checked them (an unchecked one is counted apart, not as consistent), and
    coverage pools the intervals whose truth is known."""
    from fits.calibration import shared_row

    names = [f"{r} {e}" for r in ("mxfp4", "mxfp4_sr", "mxfp4_fprop") for e in ("effN", "effD")]
    first = dict.fromkeys(names, "consistent") | {"mxfp4 effD": "not consistent", "mxfp4_sr effN": None}
    second = dict.fromkeys(names, "consistent") | {"mxfp4_sr effN": "not consistent"}
    covered = [{"effN of all": True, "effD of mxfp4": False, "effD of mxfp4_sr": True, "effD of mxfp4_fprop": None},
               {"effN of all": False, "effD of mxfp4": True, "effD of mxfp4_sr": True, "effD of mxfp4_fprop": True}]
    raw = [{n: c == "not consistent" if c else None for n, c in first.items()} | {"sharing as a whole": True},
           {n: False for n in second} | {"sharing as a whole": None}]  # (raw tests: the second's all accept)
    sweeps = [(first, covered[0], raw[0]), (second, covered[1], raw[1])]
    row = shared_row("3x3", "quartet", "shared", 0.005, 5, sweeps)
    assert row["false_rate"] == pytest.approx(2 / 11)  # 12 checks, 1 unchecked
    assert row["false_rate_raw"] == pytest.approx(1 / 11) and row["sharing_rejected"] == 1.0
    assert row["not_consistent"]["mxfp4_sr effN"] == 1.0 and row["unchecked"] == 1 and row["power"] is None
    assert row["coverage_effN"] == 0.5 and row["coverage_effD"] == pytest.approx(4 / 5)
    split = shared_row("3x3", "quartet", "split", 0.005, 5, sweeps)
    assert split["false_rate"] == pytest.approx(1 / 6) and split["power"] == 1.0
    assert split["false_rate_raw"] == pytest.approx(1 / 6) and split["power_raw"] == 0.0


def test_bf16_blocks_mark_only_a_quantized_side_of_a_recipe():
    """A recipe's BF16 blocks set its formats apart from the same GEMMs' without them, but a side that is BF16
    throughout is the baseline's whatever blocks stay BF16: a BF16-forward recipe's effN is exactly 1, not fitted."""
    import dataclasses

    mx = PRESETS["mxfp4"]
    backward_only = dataclasses.replace(mx, name="bwd", fprop_x=None, fprop_w=None, high_precision_blocks=(0, -1))
    forward_only = dataclasses.replace(mx, name="fwd", dgrad_dy=None, dgrad_w=None, wgrad_dy=None, wgrad_x=None,
                                       high_precision_blocks=(0,))
    assert backward_only.forward_format == "bf16"
    assert backward_only.backward_format == mx.backward_format + " (bf16 blocks 0, -1)"
    assert forward_only.forward_format == mx.forward_format + " (bf16 blocks 0)"
    assert forward_only.backward_format == "bf16"


def test_a_validated_table_keeps_its_formats():
    """`fits.read_table`'s table (the Python API's first step, docs/fits.md) keeps the forward_format and
    backward_format columns, so `fits.shared_efficiencies` of it shares by the table's formats, custom recipes' too,
    as it does given the file."""
    formats = {"bf16": ("bf16", "bf16"), "fp4": ("FP4", "FP4 bwd"), "fp4_sr": ("FP4", "FP4 SR bwd")}
    t = with_formats(synthetic_table({"bf16": {}, "fp4": {"effN": 0.7, "effD": 0.85},
                                      "fp4_sr": {"effN": 0.7, "effD": 0.9}}, noise=0.0005, **SMALL), formats)
    table = fits.read_table(t)
    assert table_formats(table) == formats
    out = fits.shared_efficiencies(table, bootstrap=0, **FAST)
    assert out["forward"]["FP4"]["recipes"] == ["fp4", "fp4_sr"] and out["n_params"] == 3


def test_the_two_checks_of_a_format_of_two_recipes_are_one_test_in_holms_family():
    """mxfp4 and mxfp4_sr share a forward format: splitting either off is the same alternative, one test, so Holm's
    family has one member and the adjusted p is the raw one (counted twice, it doubled)."""
    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "mxfp4_sr": {"effN": 0.7, "effD": 0.9}}, **SMALL)
    out = fits.shared_efficiencies(t, bootstrap=0, **FAST)
    a, b = out["recipes"]["mxfp4"]["effN"], out["recipes"]["mxfp4_sr"]["effN"]
    assert a["check"] and b["check"] and a["p_value"] == pytest.approx(b["p_value"], rel=1e-6)
    assert a["p_adjusted"] == a["p_value"] and b["p_adjusted"] == a["p_value"]


def test_a_check_against_the_baselines_1_needs_its_law_pinned():
    """A recipe on the baseline's forward format is tested against effN = 1; with two model sizes the baseline's law
    does not pin A and alpha, which effN scales, so that 1 is no reference: unchecked, saying why."""
    formats = {"bf16": ("bf16", "bf16"), "bwd_only": ("bf16", "FP4 bwd"), "fp4": ("FP4 fwd", "FP4 bwd")}
    t = synthetic_table({"bf16": {}, "bwd_only": {"effD": 0.85}, "fp4": {"effN": 0.7, "effD": 0.85}}, sizes=[1e8, 1e9],
                        ratios=(5, 10, 20, 40, 80))
    out = fits.analyse(with_formats(t, formats), law="chinchilla", bootstrap=0, shared_efficiencies=True, top=5,
                       workers=1)["shared_efficiencies"]
    entry = out["recipes"]["bwd_only"]["effN"]
    assert entry["check"] is None and entry["unchecked"].startswith("the baseline's law does not pin A"), entry


def test_the_sharing_as_a_whole_is_tested_against_the_recipes_own_fits():
    """One effN for three recipes of a forward format against each its own (df 2: 6 parameters against 4): the test
    does not reject where they share it, and rejects where one recipe's is 0.7 against the others' 0.6; with every
    format one recipe's there is nothing shared, and no test."""
    effD = {"mxfp4": 0.85, "mxfp4_sr": 0.893, "mxfp4_fprop": 0.97}
    tests = {}
    for name, effN in (("shared", {"mxfp4": 0.6, "mxfp4_sr": 0.6, "mxfp4_fprop": 0.6}),
                       ("split", {"mxfp4": 0.6, "mxfp4_sr": 0.7, "mxfp4_fprop": 0.6})):
        t = synthetic_table({"bf16": {}, **{r: {"effN": effN[r], "effD": effD[r]} for r in effD}},
                            sizes=np.geomspace(2e7, 2e9, 5), ratios=(5, 10, 20, 40, 80), noise=0.002, seed=1)
        tests[name] = fits.shared_efficiencies(t, bootstrap=0, **FAST)["sharing_test"]
    assert tests["shared"]["df"] == tests["split"]["df"] == 2
    assert tests["shared"]["p_value"] > 0.05 and tests["split"]["p_value"] < 1e-6, tests
    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "nvfp4": {"effN": 0.8}}, **SMALL)
    assert fits.shared_efficiencies(t, bootstrap=0, **FAST)["sharing_test"] is None


def test_the_shared_checks_p_below_the_floor_reads_as_a_bound_never_as_0(capsys):
    """The shared-efficiency check's p's (each recipe's, Holm-adjusted, and the sharing test's) were printed by the
    number formats of the report (`_short`: "p 0") and of `scaling fit` (`_fmt`: "p = 0"), where the chi-square tail
    underflows, and "3e-09" where it is the formula's, not the data's. They go through the verdict's p words
    (`reports.build.p_words`, `fits.penalty.P_FLOOR`): "p < 0.0001" there, "p = 0.012" above it."""
    from reports.build import section_shared_efficiencies
    from reports.document import Document
    from reports.render import to_markdown
    from scaling.commands.fit import print_shared

    t = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "mxfp4_sr": {"effN": 0.7, "effD": 0.9}}, **SMALL)
    out = fits.shared_efficiencies(t, bootstrap=0, **FAST)
    out["recipes"]["mxfp4"]["effN"]["p_adjusted"] = 0.0  # (chdtrc's underflow)
    out["recipes"]["mxfp4_sr"]["effN"]["p_adjusted"] = 0.012
    assert out["sharing_test"] is not None
    out["sharing_test"]["p_value"] = 3e-9
    md = to_markdown(Document("t", "", [section_shared_efficiencies(
        {"shared_efficiencies": out, "law": "quartet", "bootstrap": 0}, "bf16")]), Path("."))
    print_shared(out, "quartet", "bf16", 0)
    printed = capsys.readouterr().out
    for text in (md, printed):
        assert "(p < 0.0001)" in text and "(p = 0.012)" in text, text
        assert "p < 0.0001" in text.split("sharing as a whole")[-1] and "p = <" not in text, text
        for zero in ("(p 0)", "(p = 0)", "p = 0 ", "3e-09", "3.00e-09"):
            assert zero not in text, (zero, text)
