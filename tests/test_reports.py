"""reports: build from a sweep directory and from an external results table; open it in Chromium.

The sweep fixture is test input written in the result-record schema (DESIGN.md): losses from a known
Chinchilla law with per-recipe efficiencies and noise, validation curves that approach each run's
final loss, one diverged run. The fits and the report run for real on it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from reports import compare

ROOT = Path(__file__).resolve().parents[1]
LAW = dict(A=400.0, B=1200.0, E=1.8, alpha=0.34, beta=0.30)
SIZES = {"S": 2e6, "M": 5e6, "L": 1.2e7, "XL": 3e7}
BUDGETS = (2e8, 5e8, 1.2e9)
# recipe -> (effN, effD): how much of the model and of the data the recipe effectively uses
RECIPES = {"bf16": (1.0, 1.0), "nvfp4": (0.85, 0.95), "mxfp4": (0.6, 0.8)}


def law_loss(N: float, D: float, effN: float = 1.0, effD: float = 1.0) -> float:
    return LAW["E"] + LAW["A"] / (N * effN) ** LAW["alpha"] + LAW["B"] / (D * effD) ** LAW["beta"]


def write_run(sweep: Path, run_id: str, recipe: str, size: str, tokens: float, loss: float, status: str,
              curve: list[tuple[float, float]], **extra) -> None:
    d = sweep / run_id
    d.mkdir(parents=True)
    N = SIZES[size]
    record = {
        "run_id": run_id, "family": "nanochat", "size": size, "n_params": int(N), "n_params_total": int(N * 1.3),
        "tokens": int(tokens), "flops": 6 * N * tokens, "flops_exact": 6.4 * N * tokens, "recipe": recipe, "seed": 0,
        "status": status, "val_loss": loss, "val_bpb": loss / math.log(2) / 4.2, "tokens_per_s": 5.0e4, "mfu": 0.3,
        "epochs": tokens / 1.0e9, "wall_s": tokens / 5.0e4, "vocab_size": 8192,
        "versions": {"torch": "2.13.0", "fp4-scaling": "0.1.0"}, "git_commit": "abc1234", **extra,
    }  # fmt: skip
    (d / "result.json").write_text(json.dumps(record))
    (d / "config.json").write_text(json.dumps({"family": "nanochat", "size": size, "recipe": recipe,
                                               "tokens": int(tokens), "seed": 0, "data": "builtin"}))
    rows = ["step,tokens,val_loss,val_bpb"] + [f"{i},{int(t)},{v},{v / math.log(2) / 4.2}" for i, (t, v) in enumerate(curve)]
    (d / "metrics.csv").write_text("\n".join(rows) + "\n")


def _styles(*recipes: str) -> dict:
    """The figures' styles of `recipes`, the first the baseline, as `reports.build` gives them."""
    from reports.figures import recipe_styles

    return recipe_styles(sorted(recipes), recipes[0])


def make_sweep(root: Path, noise: float = 0.003) -> Path:
    """A 3-recipe × 4-size × 3-budget sweep; mxfp4 diverges on the largest model's longest run."""
    rng = np.random.default_rng(0)
    sweep = root / "sweep"
    for recipe, (effN, effD) in RECIPES.items():
        for size, N in SIZES.items():
            for D in BUDGETS:
                final = law_loss(N, D, effN, effD) * math.exp(rng.normal(0, noise))
                ts = np.geomspace(D / 50, D, 12)
                # mid-run losses sit above a finished run's (the learning rate has not decayed yet)
                curve = [(t, final * (law_loss(N, t, effN, effD) / law_loss(N, D, effN, effD)) * (1 + 0.01 * (1 - t / D)))
                         for t in ts]
                status, extra = "completed", {"steps": 12, "diverged_at_step": None}
                if recipe == "mxfp4" and size == "XL" and D == BUDGETS[-1]:
                    status, final, extra = "diverged", float("nan"), {"steps": 12, "diverged_at_step": 7}
                    curve = curve[:6]
                write_run(sweep, f"{recipe}-{size}-{int(D / 1e6)}M", recipe, size, D, final, status, curve, **extra)
    return sweep


def external_csv(root: Path) -> Path:
    """External results: only recipe, N, D, loss (no curves, no statuses, no provenance)."""
    rng = np.random.default_rng(1)
    rows = [{"recipe": r, "N": N, "D": D, "loss": law_loss(N, D, *eff) * math.exp(rng.normal(0, 0.003))}
            for r, eff in RECIPES.items() for N in SIZES.values() for D in BUDGETS]
    path = root / "external.csv"
    pl.DataFrame(rows).write_csv(path)
    return path


# --- comparisons computed from the data ---------------------------------------------------------


def test_the_failures_section_says_where_a_diverged_run_stopped(tmp_path):
    from reports.build import section_failures
    from reports.document import Table
    from reports.load import load

    table = next(b for b in section_failures(load(make_sweep(tmp_path))).blocks if isinstance(b, Table))
    row = dict(zip(table.columns, table.rows[0]))
    assert row["status"] == "diverged" and row["diverged_at_step"] == 7 and row["steps"] == 12


def test_the_failures_section_names_a_sweeps_runs_that_have_no_result(tmp_path):
    """A job killed or cancelled mid-run leaves no result.json: the report said "None: all 35 runs completed"
    of a 36-run sweep, as if it were whole. It names such runs, with their state."""
    from reports.build import section_failures
    from reports.document import Paragraph, Table
    from reports.load import load

    sweep = make_sweep(tmp_path)
    killed = sweep / "nvfp4-XL-1200M-seed1"
    killed.mkdir()
    (killed / "config.json").write_text(json.dumps({"family": "nanochat", "size": "XL", "recipe": "nvfp4",
                                                    "tokens": 1_200_000_000, "seed": 1, "data": "builtin"}))
    (killed / "metrics.csv").write_text("step,tokens,val_loss,val_bpb\n1,300000000,3.1,1.0\n")
    (killed / "job.json").write_text(json.dumps({"executor": "local", "job_id": None}))  # launched, then killed
    study = load(sweep)
    assert [(r.run_id, r.state_label()) for r in study.unfinished] == [(killed.name, "failed")]
    blocks = section_failures(study).blocks
    text = " ".join(b.text for b in blocks if isinstance(b, Paragraph))
    assert "1 run of the sweep has no result" in text and "all 36 runs completed" not in text
    assert text.endswith("shows it; `scaling sweep launch` again trains or resumes it.")  # one run: not "them"
    table = [b for b in blocks if isinstance(b, Table)][-1]
    assert dict(zip(table.columns, table.rows[0])) == {"run_id": killed.name, "recipe": "nvfp4", "family": "nanochat",
                                                       "size": "XL", "tokens": 1_200_000_000, "seed": 1,
                                                       "state": "failed", "progress": "25% (0% kept)"}  # (starts over)
    shutil.rmtree(killed)
    assert load(sweep).unfinished == []


def test_a_report_reads_each_runs_records_once(tmp_path, monkeypatch):
    """`scaling report` walked a sweep's run folders twice: collect's walk for the results, then status's for
    the runs without one (every run's result.json read again). Collect's one walk gives both."""
    import sweeps.store
    from reports.load import load

    sweep = make_sweep(tmp_path)
    killed = sweep / "nvfp4-XL-1200M-seed1"
    killed.mkdir()
    (killed / "job.json").write_text(json.dumps({"executor": "local", "job_id": None}))
    read_json, reads = sweeps.store.read_json, []
    monkeypatch.setattr(sweeps.store, "read_json", lambda path: reads.append(Path(path)) or read_json(path))
    study = load(sweep)
    assert [(r.run_id, r.state) for r in study.unfinished] == [(killed.name, "failed")]
    assert (sweep / "nvfp4-S-200M" / "result.json") in reads
    assert len(reads) == len(set(reads)), sorted({str(p) for p in reads if reads.count(p) > 1})


def test_a_sweep_in_progress_lists_its_first_runs_without_a_result():
    """Hundreds of queued runs would be hundreds of rows: the report lists UNFINISHED_LISTED, status all."""
    from reports.build import UNFINISHED_LISTED, _add_unfinished
    from reports.document import Paragraph, Section, Table
    from sweeps.store import RunStatus

    s = Section("Diverged and failed runs")
    _add_unfinished(s, [RunStatus(f"r{i}", "nanochat", "0.5M", "bf16", 4096, 0, "queued", 0.0, None, None, None)
                        for i in range(UNFINISHED_LISTED + 10)])
    text = next(b.text for b in s.blocks if isinstance(b, Paragraph))
    assert text.startswith(f"{UNFINISHED_LISTED + 10} runs of the sweep have no result (the first {UNFINISHED_LISTED} below)")
    assert len(next(b for b in s.blocks if isinstance(b, Table)).rows) == UNFINISHED_LISTED
    assert text.endswith("shows them all; they finish without a relaunch.")  # (queued: no launch again)


@pytest.mark.parametrize("penalty", [{}, {"nvfp4": {"verdict": "inconclusive", "p_value": 0.5, "n_replicates": 0,
                                                 "ratio_per_decade": {"value": 1.0, "ci95": [None, None]}}}])
def test_the_verdict_of_a_sweep_in_progress_says_which_runs_it_is_without(penalty):
    """A report of a sweep still running gave its verdict (or "Only the baseline (bf16) has results") as if final:
    the runs with no result were named only in the failures section, near the end."""
    from reports.build import section_verdict
    from reports.document import Paragraph
    from reports.load import Study
    from sweeps.store import RunStatus

    runs = pl.DataFrame({"recipe": ["bf16"] * 3 + ["nvfp4"] * 3, "status": ["completed"] * 6,
                         "loss": [3.0] * 6, "C": [1e18] * 6, "N": [1e8] * 6})
    fitted = {"law": "chinchilla", "bootstrap": 0, "groups": {r: {"n_runs": 3} for r in ("bf16", *penalty)},
              "penalty": penalty, "skipped": {}}
    unfinished = [RunStatus(f"{r}-{i}", "nanochat", "0.5M", r, 4096, 0, state, 0.5, None, None, None)
                  for i, (r, state) in enumerate([("mxfp4", "running"), ("mxfp4", "queued"), ("nvfp4", "running")])]
    study = Study(source=Path("sweep"), runs=runs if penalty else runs.head(3), unfinished=unfinished)
    text = " ".join(b.text for b in section_verdict(fitted, "bf16", study).blocks if isinstance(b, Paragraph))
    assert ("3 runs of the sweep have no result yet (1 queued, 2 running; by recipe: 2 mxfp4, 1 nvfp4) and are in no "
            "fit: what follows is on the runs that have one, and may change once these do") in text, text
    study.unfinished = []
    text = " ".join(b.text for b in section_verdict(fitted, "bf16", study).blocks if isinstance(b, Paragraph))
    assert "no result" not in text


def test_the_reports_relaunch_advice_counts_states_not_the_words_of_their_labels(tmp_path, monkeypatch):
    """The report counted its runs without a result by their labels' first words ("queued (Priority)"): a
    label worded otherwise would have told the user to launch again a run SLURM still holds. It counts
    the states status has."""
    from reports.build import section_failures
    from reports.document import Paragraph, Table
    from reports.load import load
    from sweeps import store
    from sweeps.store import RunStatus

    sweep = make_sweep(tmp_path)
    held = sweep / "nvfp4-XL-1200M-seed1"
    held.mkdir()
    (held / "job.json").write_text(json.dumps({"executor": "slurm", "job_id": "7_1"}))  # no squeue: queued
    monkeypatch.setattr(store, "slurm_queue", lambda: None)  # (squeue may be there, a test cluster's, without 7_1)
    monkeypatch.setattr(RunStatus, "state_label", lambda r: f"held by SLURM as {r.state}")
    blocks = section_failures(load(sweep)).blocks
    text = " ".join(b.text for b in blocks if isinstance(b, Paragraph))
    assert text.endswith("shows it; it finishes without a relaunch."), text
    assert [b for b in blocks if isinstance(b, Table)][-1].rows[0][6] == "held by SLURM as queued"


def test_the_report_command_says_a_sweep_has_runs_without_a_result(capsys):
    """It said such runs are "not in the report", which lists them under Diverged and failed runs, and "shows them" of
    one run (audit)."""
    from scaling.commands.report import print_summary

    print_summary({"verdicts": {}, "omitted": {}, "index_html": "r/index.html", "baseline": "bf16",
                   "law": "chinchilla", "unfinished": {"0d626ff6cc44": "failed (resumable)"}})
    assert ("1 run of the sweep has no result (0d626ff6cc44: failed (resumable)) and is in no fit (the report lists it "
            "under Diverged and failed runs; `scaling sweep status --runs` shows it)") in capsys.readouterr().out
    print_summary({"verdicts": {}, "omitted": {}, "index_html": "r/index.html", "baseline": "bf16",
                   "law": "chinchilla", "unfinished": {"a": "queued", "b": "running"}})
    assert ("2 runs of the sweep have no result (a: queued, b: running) and are in no fit (the report lists them "
            "under Diverged and failed runs; `scaling sweep status --runs` shows them)") in capsys.readouterr().out


def test_tokens_to_reach_interpolates_and_reports_never():
    tokens = np.array([100.0, 200.0, 300.0])
    loss = np.array([3.0, 2.5, 2.0])
    assert compare.tokens_to_reach(tokens, loss, 2.25) == pytest.approx(250.0)
    assert compare.tokens_to_reach(tokens, loss, 3.5) == 100.0
    assert math.isnan(compare.tokens_to_reach(tokens, loss, 1.9))


def test_relative_gap_and_token_overhead_on_matched_runs(tmp_path):
    from reports.load import load

    study = load(make_sweep(tmp_path, noise=0.0))
    gaps = compare.relative_gaps(study.runs, "bf16")
    # 2 recipes × 12 matched pairs, minus the diverged mxfp4 run
    assert gaps.height == 23
    row = gaps.filter((pl.col("recipe") == "nvfp4") & (pl.col("size") == "M") & (pl.col("D") == 5e8)).row(0, named=True)
    expected = (law_loss(5e6, 5e8, 0.85, 0.95) / law_loss(5e6, 5e8) - 1) * 100
    assert row["gap_pct"] == pytest.approx(expected, rel=1e-6)
    assert (gaps["gap_pct"] > 0).all()

    over = compare.token_overhead(study.runs, study.curves, "bf16")
    assert over.height == 24  # every matched pair with curves, the diverged one included
    diverged = over.filter((pl.col("recipe") == "mxfp4") & (pl.col("size") == "XL") & (pl.col("D") == BUDGETS[-1]))
    assert diverged["note"][0].startswith("no convergence (diverged)") and diverged["overhead_pct"].is_null().all()
    reached = over.filter(pl.col("overhead_pct").is_not_null())
    # a worse recipe needs more tokens for the baseline's loss: found in a longer run of the same model
    assert reached.height > 0 and (reached["overhead_pct"] > 0).all()
    assert (reached["reached_in"] > reached["D"]).all()
    summary = compare.overhead_summary(over)  # each pair is exactly one of reached, diverged, failed, not reached
    assert (summary["pairs"] == summary["reached"] + summary["diverged"] + summary["failed"] + summary["not_reached"]).all()
    assert summary.filter(pl.col("recipe") == "mxfp4")["diverged"].item() == 1


def test_the_gap_section_names_the_runs_it_has_no_gap_for(tmp_path):
    """The gap tables counted mxfp4's XL pairs as 2 of 3 without a word: its diverged run (no finite loss) and a run
    whose bf16 twin failed (no baseline loss) left no gap, and a recipe all of whose largest runs diverged would have
    lost that size's row unsaid (audit). The section names them by recipe, size and why."""
    from reports.build import section_gaps
    from reports.document import Paragraph
    from reports.load import load

    sweep = make_sweep(tmp_path)
    record = sweep / "bf16-S-200M" / "result.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "status": "failed", "val_loss": None}))
    study = load(sweep)
    missing = compare.unpaired(study.runs, "bf16")
    assert sorted(missing.select("recipe", "size", "D", "why").iter_rows()) == [
        ("mxfp4", "S", 2e8, "no bf16 loss to compare with"), ("mxfp4", "XL", 1.2e9, "diverged"),
        ("nvfp4", "S", 2e8, "no bf16 loss to compare with")]
    text = " ".join(b.text for b in section_gaps(study, "bf16", _styles("bf16", "mxfp4", "nvfp4"), tmp_path).blocks
                    if isinstance(b, Paragraph))
    assert ("No gap for 3 runs of the other recipes: mxfp4 at S: 1 (no bf16 loss to compare with); mxfp4 at XL: 1 "
            "(diverged); nvfp4 at S: 1 (no bf16 loss to compare with). Runs without a finite loss are listed under "
            "Diverged and failed runs.") in text


REPLICATES = "recipe,N,D,loss\nbf16,1e6,2e7,4.00\nbf16,1e6,2e7,4.10\nbf16,1e6,2e7,4.20\nfp4,1e6,2e7,4.15\nfp4,1e6,2e7,4.25\n"


def test_replicates_without_seeds_are_compared_with_the_mean_of_the_baselines(tmp_path):
    """Without a seed column each recipe run was paired with the table's first baseline row at its (N, D), the
    other replicates ignored: the gap depended on the rows' order. It is taken against their mean."""
    from reports.build import section_gaps
    from reports.document import Paragraph, Table
    from reports.load import load

    csv = tmp_path / "rep.csv"
    csv.write_text(REPLICATES)
    gaps = compare.relative_gaps(load(csv).runs, "bf16")
    assert gaps["baseline_loss"].to_list() == pytest.approx([4.1, 4.1]) and gaps["baseline_runs"].to_list() == [3, 3]
    assert gaps["gap_pct"].to_list() == pytest.approx([(4.15 / 4.1 - 1) * 100, (4.25 / 4.1 - 1) * 100])
    lines = REPLICATES.splitlines()
    csv.write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")  # the same runs in another order
    assert compare.relative_gaps(load(csv).runs, "bf16")["gap_pct"].to_list() == pytest.approx(gaps["gap_pct"].to_list())

    blocks = section_gaps(load(csv), "bf16", _styles("bf16", "fp4"), tmp_path).blocks
    assert isinstance(blocks[0], Paragraph)
    assert "(same N and tokens, against the mean of the baseline's runs there (no seeds))" in blocks[0].text
    every = [b for b in blocks if isinstance(b, Table)][-1]
    assert [dict(zip(every.columns, r))["bf16 runs"] for r in every.rows] == [3, 3]


@pytest.mark.parametrize("table, over", [
    (REPLICATES, "token budgets and replicates (the table has no seed column)"),
    ("recipe,N,D,loss\nbf16,1e6,2e7,4.0\nfp4,1e6,2e7,4.1\nbf16,1e6,4e7,3.9\nfp4,1e6,4e7,4.0\n", "token budgets"),
    ("recipe,N,D,seed,loss\nbf16,1e6,2e7,0,4.0\nfp4,1e6,2e7,0,4.1\n", "token budgets and seeds")],
    ids=["replicates", "no seeds", "seeds"])
def test_the_per_size_gap_table_says_what_its_mean_is_over(tmp_path, table, over):
    """Its caption said "mean over token budgets and seeds" of a table without seeds."""
    from reports.build import section_gaps
    from reports.document import Table
    from reports.load import load

    csv = tmp_path / "t.csv"
    csv.write_text(table)
    by_size = next(b for b in section_gaps(load(csv), "bf16", _styles("bf16", "fp4"), tmp_path).blocks if isinstance(b, Table))
    assert by_size.caption == f"Per recipe and model size: mean over {over}."


def test_replicates_with_seeds_are_paired_by_seed(tmp_path):
    from reports.load import load

    csv = tmp_path / "seeds.csv"
    csv.write_text("recipe,N,D,seed,loss\nbf16,1e6,2e7,0,4.00\nbf16,1e6,2e7,1,4.10\nbf16,1e6,2e7,2,4.20\n"
                   "fp4,1e6,2e7,2,4.25\nfp4,1e6,2e7,1,4.15\n")
    gaps = compare.relative_gaps(load(csv).runs, "bf16").sort("seed")
    assert gaps["baseline_loss"].to_list() == [4.10, 4.20] and gaps["baseline_runs"].to_list() == [1, 1]
    assert gaps["gap_pct"].to_list() == pytest.approx([(4.15 / 4.10 - 1) * 100, (4.25 / 4.20 - 1) * 100])
    assert compare.pairing(compare.match_keys(gaps)) == "same N, tokens and seed"


def test_the_validation_curves_mark_where_a_diverged_run_stopped_and_give_the_losss_unit(tmp_path, monkeypatch):
    """mxfp4's diverged XL run was a curve that ended mid-panel like any other, its legend silent, and the y axis read
    "validation loss" without the nats/token of the loss figure's (audit): its last point is marked, the legend says
    what the mark means and the axis gives the unit."""
    from reports import figures
    from reports.load import load

    drawn = []
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig) or save(fig, path))
    study = load(make_sweep(tmp_path))
    figures.validation_curves(study.runs, study.curves, figures.recipe_styles(["bf16", "mxfp4", "nvfp4"], "bf16"), "bf16",
                              tmp_path / "v.png")
    axes = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert axes[0].get_ylabel() == "validation loss (nats/token)"
    marks = {ax.get_title(): [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.lines
                              if line.get_marker() == "x"] for ax in axes}
    stopped = study.curves["mxfp4-XL-1200M"]
    assert marks == {"S, 1.2e+09 tokens": [], "M, 1.2e+09 tokens": [], "L, 1.2e+09 tokens": [],
                     "XL, 1.2e+09 tokens": [((stopped["tokens"][-1],), (stopped["val_loss"][-1],))]}
    assert "run stopped (diverged or failed)" in [t.get_text() for t in drawn[0].legends[0].get_texts()]


@pytest.mark.parametrize("table, title", [
    (REPLICATES, "Matched runs: same N and tokens, against the mean of the baseline's runs there (no seeds)"),
    ("recipe,N,D,seed,loss\nbf16,1e6,2e7,0,4.0\nfp4,1e6,2e7,0,4.1\n", "Matched runs: same N, tokens and seed")], ids=["no seeds", "seeds"])
def test_the_gap_figures_title_says_how_the_runs_were_paired(tmp_path, monkeypatch, table, title):
    """The title said "same size, tokens and seed" of a table without seeds, whose runs were not paired by seed."""
    from reports import figures
    from reports.load import load

    titles = []
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: titles.append(fig.axes[0].get_title()) or save(fig, path))
    csv = tmp_path / "t.csv"
    csv.write_text(table)
    gaps = compare.relative_gaps(load(csv).runs, "bf16")
    figures.gap_vs_size(gaps, compare.gaps_by_size(gaps), figures.recipe_styles(["bf16", "fp4"], "bf16"), "bf16", tmp_path / "g.png")
    assert [t.replace("\n", " ") for t in titles] == [title]


def test_the_overhead_summary_counts_the_values_read_in_longer_runs(tmp_path):
    """The summary's median overhead (mxfp4's 80.8%) was over values every one of which was read mid-run in a longer
    run (which bounds nothing, the section says), with no column saying how many were (audit)."""
    from reports.build import section_overhead
    from reports.document import Table
    from reports.load import load

    study = load(make_sweep(tmp_path, noise=0.0))
    over = compare.token_overhead(study.runs, study.curves, "bf16")
    summary = compare.overhead_summary(over)
    longer = over.filter(pl.col("reached_in") > pl.col("D")).group_by("recipe").len().sort("recipe")
    assert longer.height == 2 and summary.join(longer, on="recipe")["in_longer_run"].to_list() == longer["len"].to_list()
    assert (summary["in_longer_run"] <= summary["reached"]).all()
    table = next(b for b in section_overhead(study, "bf16", _styles("bf16", "mxfp4", "nvfp4"), tmp_path).blocks
                 if isinstance(b, Table))
    assert table.columns[:4] == ("recipe", "pairs", "reached", "of which in a longer run")
    assert "in a longer run" in table.caption and "bounds nothing" in table.caption


def test_a_pair_not_reached_names_the_longer_run_that_diverged(tmp_path):
    """mxfp4's XL pair at 5e8 tokens read "not reached within 5e+08 tokens", as if the recipe were slow, where its
    1.2e9-token run at that size, the one that could have reached bf16's loss, diverged at step 7 (audit). The note
    says so; a pair whose longer runs all completed reads as before."""
    from reports.load import load

    sweep = make_sweep(tmp_path, noise=0.0)
    study = load(sweep)
    over = compare.token_overhead(study.runs, study.curves, "bf16")

    def note(recipe: str, size: str, tokens: float) -> str:
        return over.filter((pl.col("recipe") == recipe) & (pl.col("size") == size) & (pl.col("D") == tokens))["note"].item()

    assert note("mxfp4", "XL", BUDGETS[1]) == ("not reached within 5e+08 tokens; its longer run at this size "
                                               "(1.2e+09 tokens) diverged at step 7")
    assert note("mxfp4", "L", BUDGETS[2]) == "not reached within 1.2e+09 tokens"
    summary = compare.overhead_summary(over).filter(pl.col("recipe") == "mxfp4").row(0, named=True)
    assert summary["not_reached"] == 5 and summary["diverged"] == 1  # (counted as before: a pair not reached)
    for tokens, status in ((BUDGETS[1], "failed"), (BUDGETS[2], "diverged")):  # both longer runs stopped, one failed
        record = sweep / f"mxfp4-XL-{int(tokens / 1e6)}M" / "result.json"
        r = json.loads(record.read_text())
        record.write_text(json.dumps({**r, "status": status, "val_loss": float("nan"), "diverged_at_step": None}))
    study = load(sweep)
    over = compare.token_overhead(study.runs, study.curves, "bf16")
    assert note("mxfp4", "XL", BUDGETS[0]) == ("not reached within 2e+08 tokens; its longer runs at this size: 5e+08 "
                                               "tokens failed (no result), 1.2e+09 tokens diverged")


@pytest.mark.parametrize("status, note, column", [("diverged", "no convergence (diverged)", "diverged"),
                                                  ("failed", "no result (failed)", "failed")])
def test_a_diverged_pair_is_no_convergence_even_where_a_longer_run_reaches(tmp_path, status, note, column):
    """A diverged pair is the recipe's "no convergence"; a failed one (a crash) is no result, not a divergence."""
    from reports.load import load

    sweep = make_sweep(tmp_path, noise=0.0)  # nvfp4's shortest M run diverges; its longer runs complete
    record = sweep / "nvfp4-M-200M" / "result.json"
    r = json.loads(record.read_text())
    record.write_text(json.dumps({**r, "status": status, "val_loss": float("nan")}))
    study = load(sweep)
    over = compare.token_overhead(study.runs, study.curves, "bf16")
    row = over.filter((pl.col("recipe") == "nvfp4") & (pl.col("size") == "M") & (pl.col("D") == BUDGETS[0])).row(0, named=True)
    assert row["note"] == note and row["overhead_pct"] is None and row["reached_in"] is None
    summary = compare.overhead_summary(over).filter(pl.col("recipe") == "nvfp4").row(0, named=True)
    assert summary["pairs"] == summary["reached"] + summary["diverged"] + summary["failed"] + summary["not_reached"]
    assert summary[column] == 1 and summary["diverged" if column == "failed" else "failed"] == 0


def test_report_judges_the_recipes_it_can_fit_and_names_the_one_it_cannot(tmp_path):
    """A recipe with too few completed runs for a fit (its runs diverged) is named, not fatal; the
    verdict sentence reads the multiplier the right way round (a worse recipe: below 1)."""
    from reports import build

    rows = pl.read_csv(external_csv(tmp_path))
    rows = pl.concat([rows.filter(pl.col("recipe") != "nvfp4"), rows.filter(pl.col("recipe") == "nvfp4").head(4)])
    csv = tmp_path / "few.csv"
    rows.write_csv(csv)
    summary = build(csv, tmp_path / "r", bootstrap=0, workers=1)
    assert set(summary["verdicts"]) == {"mxfp4"} and set(summary["skipped"]) == {"nvfp4"}
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Not judged: group 'nvfp4' has 4 points from 4 runs" in md
    fitted = json.loads((tmp_path / "r" / "fits.json").read_text())
    m = fitted["penalty"]["mxfp4"]["multiplier"]
    assert m["value"][0] < 1  # effN 0.6, effD 0.8: bf16 reaches mxfp4's loss with less compute
    assert (f"bf16 reaches this recipe's loss with {m['value'][0]:#.3g}× " in summary["verdicts"]["mxfp4"]["sentence"])


def test_a_sweep_none_of_whose_runs_completed_is_refused_naming_their_statuses(tmp_path, capsys):
    """A sweep whose every run diverged is refused as `scaling fit` refuses its table, naming the statuses:
    the report filtered the runs first and said "the table has no rows to fit: the table is empty"."""
    from scaling.cli import main

    sweep = tmp_path / "sweep"
    for D in BUDGETS:
        write_run(sweep, f"bf16-S-{int(D / 1e6)}M", "bf16", "S", D, float("nan"), "diverged", [(D / 2, 9.0)],
                  diverged_at_step=3)
    assert main(["report", str(sweep), "--out", str(tmp_path / "r"), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "no row has status 'completed' (its 'status' column holds 3 'diverged')" in err, err
    assert "the table is empty" not in err and "Traceback" not in err


def test_a_report_that_cannot_be_written_leaves_the_earlier_one(tmp_path, full_disk):
    """The report is built beside its folder and moved in whole: a full disk ends the build with the
    earlier report's files as they were and no staging folder left behind."""
    from reports import build

    out = full_disk / "report"
    (out / "figures").mkdir(parents=True)
    (out / "index.html").write_text("<p>the earlier report</p>")
    (out / "fits.json").write_text('{"law": "chinchilla", "groups": {}, "penalty": {}}')  # what marks a report
    (out / "figures" / "loss_vs_compute.png").write_bytes(b"earlier figure")
    (full_disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))  # room left for less than a report
    with pytest.raises(OSError, match="No space left on device"):
        build(external_csv(tmp_path), out, bootstrap=0, workers=1)
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "report"]
    assert (out / "index.html").read_text() == "<p>the earlier report</p>"
    assert sorted(p.name for p in out.rglob("*")) == ["figures", "fits.json", "index.html", "loss_vs_compute.png"]


KILLED_AT_RENAME = """
import os, signal, sys
import reports.build
b = sys.modules["reports.build"]  # (the module: `reports.build` is also its function build)
renames = 0
def replace(src, dst):
    global renames
    renames += 1
    if renames > int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies between two of the publish's renames
    os.rename(src, dst)
publish = b._publish
def killed_publish(stage, out_dir):
    os.replace = replace  # (from here on: the renames into the folder, not the staging's own writes)
    publish(stage, out_dir)
b._publish = killed_publish
b.build(sys.argv[1], sys.argv[2], bootstrap=0, workers=1)
"""


@pytest.mark.parametrize("earlier", [False, True], ids=["first", "rebuild"])
@pytest.mark.parametrize("renames", [0, 1, 3])
def test_a_report_killed_while_moving_into_its_folder_is_rebuilt_by_the_relaunch(tmp_path, renames, earlier):
    """A build SIGKILLed between the renames that move its report in (figures first, fits.json second to
    last) left figures/*.png, or those and results.csv, and no fits.json: the relaunch refused that folder as
    one holding files no earlier report wrote. A rebuild killed so left the earlier index.html over new
    figures. A folder whose report is not whole now has no index.html, and the relaunch builds it."""
    from scaling.cli import main

    table = tmp_path / "bf16.csv"
    pl.read_csv(external_csv(tmp_path)).filter(pl.col("recipe") == "bf16").write_csv(table)
    out = tmp_path / "rep"
    if earlier:
        assert main(["report", str(table), "--out", str(out), "--bootstrap", "0"]) == 0
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_RENAME, str(table), str(out), str(renames)],
                            cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not (out / "index.html").exists()  # (no entry point to a report that is not whole)
    assert [p.name[: len(".rep.building-")] for p in tmp_path.glob(".rep.*")] == [".rep.building-"]  # its stage
    assert main(["report", str(table), "--out", str(out), "--bootstrap", "0"]) == 0
    assert {"index.html", "report.md", "fits.json", "results.csv"} <= {p.name for p in out.iterdir()}
    assert not list(tmp_path.glob(".rep.*"))  # the killed build's staging folder stayed there for good


HOLDS_A_STAGE = """
import os, signal, sys
from pathlib import Path
from reports.build import _staging
with _staging(Path(sys.argv[1])) as stage:
    print(stage, flush=True)
    if sys.argv[2] == "dies":
        os.kill(os.getpid(), signal.SIGKILL)  # a build killed while it stages
    sys.stdin.read()  # a build staging until the test closes its stdin
"""


def test_a_build_removes_the_staging_folders_of_dead_builds_and_never_a_live_ones(tmp_path, capsys):
    """A build killed mid-way left its hidden staging folder beside --out for good. A build now removes those of
    builds that are gone (their lock free; one with no lock, of older code, once it is an hour old) and keeps a
    live build's: two builds of one folder at once do not delete each other's."""
    from scaling.cli import main

    table = tmp_path / "bf16.csv"
    pl.read_csv(external_csv(tmp_path)).filter(pl.col("recipe") == "bf16").write_csv(table)
    out = tmp_path / "rep"
    live = subprocess.Popen([sys.executable, "-c", HOLDS_A_STAGE, str(out), "lives"], cwd=Path(__file__).parent.parent,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    # (staged before the dead build runs: a build starting after it died removes its folder, as it should)
    live_stage = Path(live.stdout.readline().strip())
    dead = subprocess.run([sys.executable, "-c", HOLDS_A_STAGE, str(out), "dies"], cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True)
    assert dead.returncode == -9, dead.stderr
    dead_stage = Path(dead.stdout.strip())
    older, newer = tmp_path / ".rep.building-0ld3rc0d", tmp_path / ".rep.building-n3w3rc0d"  # no lock in them
    for lockless in (older, newer):
        (lockless / "figures").mkdir(parents=True)
    os.utime(older, (time.time() - 2 * 3600,) * 2)
    other = tmp_path / ".other.building-d3adb33f"  # another folder's: not this build's to judge
    shutil.copytree(dead_stage, other)
    try:
        assert dead_stage.is_dir() and live_stage.is_dir()
        assert main(["report", str(table), "--out", str(out), "--bootstrap", "0"]) == 0
        assert sorted(p.name for p in tmp_path.glob(".*.building-*")) == sorted([live_stage.name, newer.name,
                                                                                 other.name])
        err = capsys.readouterr().err
        assert f"removed {dead_stage}, the staging folder of a build of {out} that was killed" in err, err
        assert f"removed {older}," in err and f"removed {live_stage}" not in err
    finally:
        live.communicate("")
    assert live.returncode == 0 and not live_stage.exists()  # the live build ended as builds end


def test_a_report_never_replaces_files_of_a_folder_that_holds_no_earlier_report(tmp_path, capsys):
    """--out naming a folder of the user's (a paper's, with its own results.csv, report.md and figures)
    replaced those files and deleted its figures/*.png without a word. It is refused before the fits;
    a folder holding an earlier report is rebuilt as before."""
    from scaling.cli import main

    # the baseline's runs alone: the folder is what is judged here, and one law fits in a fraction of the
    # time of three recipes' laws and penalties (the report is built twice below)
    table = tmp_path / "bf16.csv"
    pl.read_csv(external_csv(tmp_path)).filter(pl.col("recipe") == "bf16").write_csv(table)
    paper = tmp_path / "paper"
    (paper / "figures").mkdir(parents=True)
    (paper / "results.csv").write_text("my,own\n1,2\n")
    (paper / "figures" / "fig1.png").write_bytes(b"my figure")
    assert main(["report", str(table), "--out", str(paper), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert f"--out {paper} holds results.csv, figures/fig1.png, which the report would replace" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (paper / "results.csv").read_text() == "my,own\n1,2\n" and (paper / "figures" / "fig1.png").exists()
    assert sorted(p.name for p in paper.rglob("*")) == ["fig1.png", "figures", "results.csv"]
    (paper / "figures" / "fig1.png").unlink()
    (paper / "figures").rmdir()
    (paper / "figures").write_text("not a folder")
    (paper / "results.csv").unlink()
    assert main(["report", str(table), "--out", str(paper), "--bootstrap", "0"]) == 2
    assert "holds a file named figures" in capsys.readouterr().err
    (paper / "figures").unlink()
    assert main(["report", str(table), "--out", str(paper), "--bootstrap", "0"]) == 0  # an emptied folder
    assert main(["report", str(table), "--out", str(paper), "--bootstrap", "0"]) == 0  # a rebuild of its report


def test_collect_onto_a_full_disk_is_one_line_naming_the_table(tmp_path, full_disk, capsys):
    from scaling.cli import main

    (full_disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 4096))
    out = full_disk / "results.parquet"
    assert main(["sweep", "collect", str(make_sweep(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"error: cannot use {out} (No space left on device); free space there, "
                                            "then run again"), err
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


# --- the whole report ---------------------------------------------------------------------------


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return exe


CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  // sortable: click the first numeric header of the first table twice, read the column back
  var sorted = "none";
  var td = document.querySelector("table.sortable td[data-sort]");
  if (td) {
    var col = Array.prototype.indexOf.call(td.parentNode.children, td);
    var table = td.closest("table"), th = table.tHead.rows[0].children[col];
    var values = function () {
      return Array.prototype.map.call(table.tBodies[0].rows, function (r) {
        var v = r.children[col].dataset.sort; return v === undefined ? null : parseFloat(v); })
        .filter(function (v) { return v !== null; });
    };
    th.click();
    var up = values(), asc = up.every(function (v, i) { return i === 0 || up[i - 1] <= v; });
    th.click();
    var down = values(), desc = down.every(function (v, i) { return i === 0 || down[i - 1] >= v; });
    sorted = (asc && desc && up.length > 1) ? "yes" : "no";
  }
  var out = document.createElement("pre");
  out.id = "check";
  out.textContent = "images " + ok + "/" + imgs.length + " sorted " + sorted;
  document.body.appendChild(out);
});
</script>"""


def chromium(exe: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp / 'profile'}"]  # fmt: skip
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=90)


def probed_dom(page: str, script: str, tmp: Path, *window: str, budget_ms: int = 5000, name: str = "probe.html") -> str:
    """The DOM headless Chromium leaves of `page` with `script` run in it (a probe that writes what it measured into
    a <pre>), in a window of `window` ("--window-size=W,H") where given."""
    probe = tmp / name
    probe.write_text(page.replace("</body>", script + "</body>"))
    return chromium(_chromium(), tmp, *window, f"--virtual-time-budget={budget_ms}", "--dump-dom", probe.as_uri()).stdout


def check_in_browser(index: Path, tmp: Path) -> None:
    """Every <img> decodes, a numeric column sorts both ways, and a screenshot is not blank."""
    dom = probed_dom(index.read_text(), CHECK_SCRIPT, tmp, budget_ms=10000)
    n_images = index.read_text().count("<img ")
    assert n_images >= 3
    assert f"images {n_images}/{n_images} sorted yes" in dom, dom[-500:]

    shot = tmp / "shot.png"
    chromium(_chromium(), tmp, "--window-size=1200,1600", "--hide-scrollbars", f"--screenshot={shot}", index.as_uri())
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (1600, 1200)
    assert pixels.std() > 10, "the screenshot is blank"
    assert (pixels < 128).mean() > 0.01, "no dark ink on the page: nothing rendered"


def _sections(html: str) -> list[str]:
    import re

    return re.findall(r'<section id="([^"]+)"><h2>', html)


def test_infinite_cells_sort_as_infinities_in_the_html():
    """An interval open at one end (∞) got data-sort="inf", which JavaScript's parseFloat reads as NaN: the column
    sorted that row anywhere. The key is written as parseFloat reads it: 'Infinity', '-Infinity'."""
    import re

    from reports.document import Document, Section, Table
    from reports.render import to_html

    doc = Document("t", "", [Section("s", [Table(("x",), ((1.5,), (math.inf,), (-math.inf,), (3,), (math.nan,)))])])
    keys = re.findall(r'data-sort="([^"]*)"', to_html(doc))
    assert keys == ["1.5", "Infinity", "-Infinity", "3"]
    js_number = re.compile(r"-?(Infinity|\d+(\.\d+)?(e[+-]?\d+)?)")  # what parseFloat reads whole
    assert all(js_number.fullmatch(k) for k in keys), keys


def test_a_p_below_the_floor_sorts_as_the_smallest_p_in_the_html():
    """A p below the test's resolution is shown as '< 0.0001' (`_p_cell`): as text it had no data-sort, so the sortable
    table put it after every number, the strongest evidence sorted as the weakest. Its cell sorts by the p it stands
    for, below every p shown as a number, and still reads '< 0.0001' in the HTML, report.md and a terminal's table."""
    import re

    from reports.build import p_value_cells
    from reports.document import Document, Section, Table
    from reports.render import to_html, to_markdown

    pen = {"identified": True, "verdict": "grows", "p_value": 3e-9, "p_adjusted": 0.0}
    floored, zero = p_value_cells(pen)
    assert floored == zero == "< 0.0001" and str(floored) == "< 0.0001"
    rows = (("a", 0.5), ("b", floored), ("c", 0.01), ("d", zero))
    doc = Document("t", "", [Section("s", [Table(("recipe", "p"), rows)])])
    cells = dict(re.findall(r"<tr><td[^>]*>(\w)</td><td(?: class=\"[^\"]*\")?(?: data-sort=\"([^\"]*)\")?>",
                            to_html(doc)))  # (a cell's class: its column's kind, render._column_kinds)
    assert set(cells) == set("abcd") and all(cells.values()), cells  # every p cell sorts as a number
    assert sorted(cells, key=lambda r: float(cells[r])) == ["d", "b", "c", "a"], cells
    assert "| b | < 0.0001 |" in to_markdown(doc, Path("."))


SORT_PROBE = """<script>
window.addEventListener("load", function () {
  var table = document.querySelector("table.sortable"), ths = table.tHead.rows[0].children, out = [];
  [1, 1, 2, 2].forEach(function (col) {
    ths[col].click();
    out.push(Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.children[0].textContent; }).join(""));
  });
  var pre = document.createElement("pre");
  pre.id = "sorted";
  pre.textContent = "sorted " + out.join(" ");
  document.body.appendChild(pre);
});
</script>"""


def test_the_html_sorts_infinities_intervals_and_blanks_in_order(tmp_path):
    """Two Infinity cells made the comparator return NaN (Infinity - Infinity), and an interval column ('[10, 20]')
    sorted as text ('[10' before '[2'). Numbers and intervals (by their first number) sort both ways, equal ones
    keep their order, text follows, blank and NaN cells come last."""
    import re

    from reports.document import Document, Section, Table
    from reports.render import to_html

    rows = (("a", math.inf, "[0.68, 0.76]"), ("b", 1.0, "[10, 20]"), ("c", math.inf, "[2, 3]"), ("d", math.nan, "[—, —]"),
            ("e", -math.inf, "[−∞, 1]"), ("f", 2.0, "9.5 [9, 12]"), ("g", None, ""), ("h", 1e-4, "text"))
    page = to_html(Document("t", "", [Section("s", [Table(("name", "x", "ci"), rows)])]))
    dom = probed_dom(page, SORT_PROBE, tmp_path)
    found = re.search(r'<pre id="sorted">sorted (\w+) (\w+) (\w+) (\w+)</pre>', dom)
    assert found, dom[-500:]
    # x up, x down (the two infinities a, c equal: kept in order), ci up, ci down ('text' after the numbers)
    assert found.groups() == ("ehbfacdg", "acfbhedg", "eacfbhdg", "bfcaehdg"), found.groups()


def test_report_from_sweep_dir(tmp_path):
    from reports import build

    sweep = make_sweep(tmp_path)
    (sweep / "diagnostics.json").write_text(json.dumps(
        {"formats": [{"format": "nvfp4", "sqnr_db": 19.4, "mean_error": -0.002},
                     {"format": "mxfp4", "sqnr_db": 16.1, "mean_error": -0.004}]}))
    (sweep / "sweep.json").write_text(json.dumps({"name": "fp4-ladder", "runs": []}))  # the plan names the sweep
    out = tmp_path / "report"
    summary = build(sweep, out, baseline="bf16", bootstrap=16, workers=2)

    for name in ("index.html", "report.md", "results.csv", "fits.json"):
        assert (out / name).is_file(), name
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs == ["gap_vs_size.png", "loss_vs_compute.png", "penalty_vs_compute.png", "validation_curves.png"]
    assert pl.read_csv(out / "results.csv").height == 36
    fitted = json.loads((out / "fits.json").read_text())
    assert set(fitted["groups"]) == set(RECIPES) and set(fitted["penalty"]) == {"nvfp4", "mxfp4"}
    assert set(summary["verdicts"]) == {"nvfp4", "mxfp4"}
    assert summary["omitted"] == {} and summary["unfinished"] == {}
    for recipe, pen in fitted["penalty"].items():  # the two recipes are one Holm family
        assert pen["family"] == 2 and pen["p_adjusted"] >= pen["p_value"]
        assert pen["identified"] is True and pen["unidentified"] == []  # four sizes by three budgets pin the penalty
        assert summary["verdicts"][recipe]["p_adjusted"] == pytest.approx(pen["p_adjusted"])
        assert "after Holm's adjustment over 2 recipes" in summary["verdicts"][recipe]["sentence"]

    html = (out / "index.html").read_text()
    assert _sections(html) == ["verdict", "loss-vs-compute", "penalty-vs-compute", "relative-loss-gap-per-model-size",
                               "token-overhead-to-reach-the-baseline-s-loss", "parameter-and-data-efficiency-effn-effd",
                               "quantization-diagnostics", "diverged-and-failed-runs", "provenance"]
    assert "http://" not in html and "https://" not in html  # opens offline: nothing fetched
    assert "mxfp4-XL-1200M" in html  # the diverged run is listed
    assert "19.4" in html  # the diagnostics table
    import html as html_lib
    import re

    text = html_lib.unescape(re.sub(r"<[^>]+>", "", html))
    for recipe in ("nvfp4", "mxfp4"):  # the verdict the CLI prints is the one in the report
        assert summary["verdicts"][recipe]["sentence"] in text
    # 16 replicates: the report's "95% bootstrap intervals" said so without a word on how few that is
    assert ("over 16 replicates that resample whole runs (twin runs, one N, D and seed in each recipe, drawn together: "
            "12 configurations, --seed 0), too few") in text, text  # (the sweep's runs are seed 0 in every recipe)
    assert "needs at least 40" in text
    md = (out / "report.md").read_text()
    assert "![penalty_vs_compute](figures/penalty_vs_compute.png)" in md
    assert "not identified" not in md and "Not drawn" not in md
    assert md.startswith("# FP4 scaling report: fp4-ladder\n")  # the sweep's name, not its folder's
    check_in_browser(out / "index.html", tmp_path)


def test_report_from_external_csv_omits_what_it_cannot_support_and_never_imports_torch(tmp_path):
    csv = external_csv(tmp_path)
    out = tmp_path / "ext"
    code = (
        "import sys, json; from reports import build; "
        f"s = build({str(csv)!r}, {str(out)!r}, bootstrap=8, workers=1); "
        "assert 'torch' not in sys.modules, 'reports imported torch'; print(json.dumps(s))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "validation curves" in summary["omitted"]["Token overhead to reach the baseline's loss"]
    assert "Quantization diagnostics" in summary["omitted"]
    assert not (out / "figures" / "validation_curves.png").exists()
    html = (out / "index.html").read_text()
    assert "the input has no validation curves" in html
    assert "table of external results" in html
    assert set(summary["verdicts"]) == {"nvfp4", "mxfp4"}
    # each stage says on stderr what it is doing (the fit and the figures take seconds to minutes)
    assert "fitting the chinchilla law to" in proc.stderr and "drawing the figures" in proc.stderr


def test_report_reads_a_table_as_the_fits_do(tmp_path):
    """One reading of a results table: the report's runs have the fits' columns, run ids and compute
    (C = 6·N·D even where the table's own C disagrees; a mapped column wins over one of the same name)."""
    from fits import read_table
    from reports.load import load

    csv = tmp_path / "t.csv"
    csv.write_text("recipe,size,N,D,C,loss\nbf16,1e6,7,2e7,999,3.5\nbf16,2e6,7,4e7,999,3.2\n")
    runs = load(csv, columns="N=size").runs.sort("run_id")
    fits = read_table(csv, columns="N=size").sort("run_id")
    for c in ("recipe", "run_id", "N", "D", "C", "loss"):
        assert runs[c].to_list() == fits[c].to_list(), c
    assert runs["C"].to_list() == [6 * 1e6 * 2e7, 6 * 2e6 * 4e7]
    # a gzip-compressed CSV, which `scaling fit` reads, was refused as "neither a sweep directory nor a .csv"
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(__import__("gzip").compress(csv.read_bytes()))
    assert load(gz, columns="N=size").runs.sort("run_id")["loss"].to_list() == runs["loss"].to_list()
    # columns whose names are swapped ("N=D,D=N"): both were dropped before the renaming, a polars traceback
    csv.write_text("recipe,D,N,loss\nbf16,1e6,2e7,3.5\nbf16,2e6,4e7,3.2\n")
    swapped = load(csv, columns="N=D,D=N").runs.sort("run_id")
    assert swapped["N"].to_list() == [1e6, 2e6] and swapped["D"].to_list() == [2e7, 4e7]


def test_a_tables_checkpoint_rows_give_one_point_per_run_its_last(tmp_path):
    """Several rows of one run_id (checkpoints): the report counts runs, not rows, and fits each run's
    row with the most tokens (mid-training losses are not points of the law), saying so."""
    from fits.synthetic import synthetic_table
    from reports import build
    from reports.load import load

    table = synthetic_table({"bf16": {}, "fp4": {"effN": 0.8}}, sizes=(1e6, 2e6, 4e6, 8e6), ratios=(10, 20, 40),
                            checkpoints=3, seed=1)
    shuffled = tmp_path / "ckpt.PQ"  # a suffix `scaling fit` reads as parquet, in any case
    table.sample(fraction=1.0, shuffle=True, seed=3).write_parquet(shuffled)
    study = load(shuffled)
    assert study.runs.height == 24 == table["run_id"].n_unique() and study.earlier_rows == 48
    last = table.sort("D").group_by("run_id").last()
    assert dict(study.runs.select("run_id", "D").iter_rows()) == dict(last.select("run_id", "D").iter_rows())
    summary = build(shuffled, tmp_path / "r", bootstrap=0, workers=1)
    assert summary["n_runs"] == 24
    fitted = json.loads((tmp_path / "r" / "fits.json").read_text())
    assert {g["n_points"] for g in fitted["groups"].values()} == {12} == {g["n_runs"] for g in fitted["groups"].values()}
    md = (tmp_path / "r" / "report.md").read_text()
    assert "24 runs" in md and "48 earlier rows are set aside" in md and "72 runs" not in md
    # a run is (recipe, run_id), as in the fits: ids that repeat across recipes are not checkpoints
    shared = tmp_path / "shared.csv"
    pl.DataFrame({"recipe": ["bf16"] * 4 + ["nvfp4"] * 4, "run_id": [f"r{i}" for i in range(4)] * 2,
                  "N": [1e6, 1e6, 2e6, 2e6] * 2, "D": [2e7, 4e7, 2e7, 4e7] * 2, "loss": [4.0, 3.8, 3.7, 3.5] * 2}).write_csv(shared)
    both = load(shared)
    assert both.runs.height == 8 and both.earlier_rows == 0


def test_one_earlier_row_is_said_in_the_singular(tmp_path):
    """"1 earlier row are set aside": the provenance's count of a table's checkpoint rows took the plural verb."""
    from reports.build import section_provenance
    from reports.load import load

    csv = tmp_path / "t.csv"
    csv.write_text("recipe,run_id,N,D,loss\nbf16,a,1e6,1e7,4.0\nbf16,a,1e6,2e7,3.8\nbf16,b,2e6,2e7,3.6\n")
    study = load(csv)
    text = " ".join(section_provenance(study, None).blocks[0].items)
    assert study.earlier_rows == 1 and "1 earlier row is set aside" in text, text


def test_the_reports_fits_json_is_the_scaling_fit_json_object(tmp_path, capsys):
    """docs call fits.json the `scaling fit --json` object, but it lacked that object's set_aside_note and
    learning_rate_note: a diverged run and an LR sweep's choice were in the report's text only."""
    from fits.synthetic import synthetic_table
    from reports import build
    from scaling.cli import main

    t = synthetic_table({"bf16": {}}, sizes=np.geomspace(1e7, 1e9, 4), ratios=(5, 20, 80), noise=0.0, seed=3)
    t = t.with_columns(run_id=pl.col("run_id").cast(pl.Utf8), lr_mult=pl.lit(1.0), status=pl.lit("completed"))
    worse = t.with_columns(lr_mult=pl.lit(2.0), loss=pl.col("loss") * 1.05, run_id=pl.col("run_id") + "-lr2")
    diverged = t.head(1).with_columns(run_id=pl.lit("x"), status=pl.lit("diverged"), loss=pl.lit(None, pl.Float64))
    csv = tmp_path / "t.csv"
    pl.concat([t, worse, diverged]).write_csv(csv)
    build(csv, tmp_path / "r", bootstrap=0, workers=1)
    report = json.loads((tmp_path / "r" / "fits.json").read_text())
    assert main(["fit", str(csv), "--bootstrap", "0", "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert set(report) == set(fitted)
    assert report["set_aside_note"] == fitted["set_aside_note"] == "1 of 25 rows set aside, not fitted: 1 diverged."
    assert report["learning_rate_note"] == fitted["learning_rate_note"] and "lr_mult 1 at 12 points" in report["learning_rate_note"]


def test_a_table_without_recipes_is_not_said_to_have_a_baseline(tmp_path):
    """One group (no recipe column): its law alone; no baseline named as if it were in the data."""
    from fits.synthetic import synthetic_table
    from reports import build

    csv = tmp_path / "one.csv"
    synthetic_table({"bf16": {}}, sizes=(1e6, 2e6, 4e6), ratios=(10, 20, 40), seed=2).drop("recipe").write_csv(csv)
    summary = build(csv, tmp_path / "r", bootstrap=0, workers=1)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "no baseline (`bf16`)" in md and "baseline `bf16`" not in md and "bf16's frontier" not in md
    assert summary["baseline"] is None  # `report --json` said "bf16", as if it were in the data (`fit --json`: null)


def test_an_external_tables_statuses_are_shown_and_its_bad_rows_refused_by_line(tmp_path, capsys):
    """A CSV's status column is read as the records' is (its diverged runs listed, not fitted); a NaN
    loss, a repeated row or a bad N is refused as `scaling fit` refuses it, naming the file's line
    (the report dropped NaN losses unsaid, and counted lines after dropping them)."""
    from reports.load import load
    from scaling.cli import main

    rows = external_csv(tmp_path).read_text().splitlines()
    csv = tmp_path / "status.csv"
    csv.write_text("\n".join([rows[0] + ",status", *(r + ",completed" for r in rows[1:-2]), rows[-2] + ",",
                              rows[-1].rsplit(",", 1)[0] + ",nan,diverged"]) + "\n")
    study = load(csv)
    assert study.has_status and not study.from_records
    assert study.runs.filter(pl.col("status") == "diverged").height == 1
    assert study.runs.filter(pl.col("status") == "unknown").height == 1  # a blank status: listed, not dropped
    from reports.build import section_failures
    from reports.document import Paragraph

    text = " ".join(b.text for b in section_failures(study).blocks if isinstance(b, Paragraph))
    assert "2 of 36 runs did not complete" in text, text

    for name, body, needle in (
        ("nan.csv", rows[:3] + [rows[3].rsplit(",", 1)[0] + ",nan"], "line 4"),
        ("repeat.csv", rows[:3] + [rows[2]], "repeat another row's recipe, N, D, loss"),
        ("negative.csv", rows[:4] + ["bf16,-5,1e9,3.0"], "line 5"),
    ):
        bad = tmp_path / name
        bad.write_text("\n".join(body) + "\n")
        assert main(["report", str(bad), "--out", str(tmp_path / "r")]) == 2, name
        err = capsys.readouterr().err
        assert needle in err and str(bad) in err and "_row" not in err, err


# What the verdict sentence calls its p: the likelihood-ratio test of kappa = 0 on 2 degrees of freedom is two-sided
LR_TEST = "two-sided likelihood-ratio test of a constant multiplier, κN = κD = 0, against growth or shrinkage"


def test_sections_say_why_there_is_no_penalty(tmp_path):
    """Penalty and efficiency sections name the real reason (a recipe left out, no baseline), and a
    run without a bootstrap judges no recipe and says so."""
    from reports.build import section_efficiency, section_penalty, verdict_sentence

    fitted = {"groups": {"bf16": {"params": {}}}, "skipped": {"nvfp4": "nvfp4: 2 completed runs, a law needs at least 3"},
              "penalty": {}, "bands": {}, "law": "chinchilla", "bootstrap": 10}
    for section in (section_penalty(fitted, "bf16", {}, tmp_path), section_efficiency(fitted, "bf16")):
        assert "nvfp4: 2 completed runs" in section.omitted, section.omitted
    alone = {**fitted, "groups": {"all": {"params": {}}}, "skipped": {}}
    assert "no baseline (bf16)" in section_efficiency(alone, "bf16").omitted
    from fits.table import never_completed

    runs = pl.DataFrame({"recipe": ["bf16", "fp4", "fp4", "fp4"], "status": ["completed", "diverged", "diverged", "failed"]})
    assert never_completed(runs) == {"fp4": "fp4: none of its 3 runs completed (2 diverged, 1 failed)"}
    undecided = {"verdict": "inconclusive", "p_value": 1.0, "ratio_per_decade": {"value": 1.0, "ci95": (1.0, 1.0)},
                 "undecidable": "every bootstrap replicate gave the same ratio per decade"}
    assert "**inconclusive** (every bootstrap replicate gave" in verdict_sentence("fp4", undecided, "bf16", 100)
    pen = {"verdict": "inconclusive", "p_value": float("nan"), "ratio_per_decade": {"value": 1.0, "ci95": None}}
    sentence = verdict_sentence("nvfp4", pen, "bf16", bootstrap=0)
    assert "**inconclusive** (no bootstrap ran" in sentence and "not computable" in sentence
    flat = {**pen, "verdict": "does not grow", "p_value": 0.4, "margin": 0.1, "ratio_per_decade": {"value": 0.97, "ci95": (0.93, 1.01)}}
    assert "does not grow** with compute (by more than 10% per decade" in verdict_sentence("nvfp4", flat, "bf16", 100)
    assert f"({LR_TEST}: p = 0.4)" in verdict_sentence("nvfp4", flat, "bf16", 100)  # no p_adjusted: an old fits.json
    assert "at 95%)" in verdict_sentence("nvfp4", flat, "bf16", 100)  # a family of one: nothing to adjust
    in_family = {**flat, "p_adjusted": 0.8, "family": 3}  # the test is adjusted over the family, the interval is not
    assert ("(by more than 10% per decade of compute, at 95% for this recipe alone, not adjusted over the 3 recipes)"
            in verdict_sentence("nvfp4", in_family, "bf16", 100))


def _quartet_fits(bootstrap: int = 8) -> dict:
    """A fits.json under --law quartet: the recipes share bf16's law (their params repeat it) and add effN, effD."""
    law = {"A": 379.1, "B": 660.0, "E": 1.591, "alpha": 0.34, "beta": 0.268, "gamma": 1.025}
    ci = {k: ([0.9 * v, 1.1 * v] if bootstrap else [math.nan, math.nan]) for k, v in law.items()}

    def recipe(effN, effD):
        eff = {"effN": effN, "effD": effD, "kappaN": 0.01, "kappaD": -0.02, "N0": 5e6, "D0": 5e8,
               "effN_const": effN, "effD_const": effD}
        return {"params": {**law, **eff}, "n_points": 12, "n_runs": 12, "objective": 3e-5,
                "ci95": {**ci, **{k: ([0.9 * v, 1.1 * v] if bootstrap else [math.nan, math.nan]) for k, v in eff.items()}}}

    return {"law": "quartet", "baseline": "bf16", "bootstrap": bootstrap,
            "groups": {"mxfp4": recipe(0.64, 0.76), "bf16": {"params": law, "ci95": ci, "n_points": 12, "n_runs": 12,
                                                             "objective": 7e-6}, "nvfp4": recipe(0.88, 0.93)}}


def test_under_the_quartet_law_the_parameters_table_shows_the_shared_law_once_and_each_recipes_efficiencies():
    """Under --law quartet every recipe's row repeated the baseline's A..γ and intervals (the recipes share its law),
    which read as a bug; what differs, effN and effD, was only in a later section."""
    from reports.build import _params_table

    table = _params_table(_quartet_fits(), "bf16")
    assert table.columns == ("recipe", "A", "B", "E", "alpha", "beta", "gamma", "effN", "effD", "points", "runs",
                             "objective")
    (base, *recipes) = table.rows
    assert base[0] == "bf16" and base[1] == "379.1 [341.2, 417]" and base[7:9] == (1.0, 1.0)
    assert [r[0] for r in recipes] == ["mxfp4", "nvfp4"]
    for r in recipes:
        assert r[1:7] == ("= bf16",) * 6
    assert recipes[0][7:9] == ("0.64 [0.576, 0.704]", "0.76 [0.684, 0.836]")
    assert "share the law fitted on bf16" in table.caption
    chinchilla = _params_table({**_quartet_fits(), "law": "chinchilla"}, "bf16")  # each recipe's own law: as it was
    assert "effN" not in chinchilla.columns and "= bf16" not in {c for r in chinchilla.rows for c in r}


def test_without_a_bootstrap_no_number_is_followed_by_brackets(tmp_path, monkeypatch):
    """--bootstrap 0: the verdict's sentences printed '[—, —]' after every number and the penalty tables had columns
    of them, while the efficiency table's were blank; there are no intervals, so none is shown anywhere."""
    import importlib

    b = importlib.import_module("reports.build")  # (the module: `reports.build` is also the function)
    nan = [math.nan, math.nan]
    ends = {"C": [1e15, 1e17, 1e19], "where": ["data min", "data max", "100x data max"], "value": [0.5, 0.47, 0.44],
            "ci95": [nan] * 3}
    pen = {"verdict": "inconclusive", "undecidable": "no bootstrap", "p_value": 0.26, "p_adjusted": 0.51, "family": 2,
           "ratio_per_decade": {"value": 0.963, "ci95": nan}, "multiplier": ends, "gap": ends,
           "kappaN": {"value": -0.1, "ci95": nan}, "kappaD": {"value": 0.07, "ci95": nan}}
    fitted = {**_quartet_fits(bootstrap=0), "penalty": {"mxfp4": pen}, "bands": {"mxfp4": {}}}
    sentence = b.verdict_sentence("mxfp4", pen, "bf16", bootstrap=0)
    assert "×0.963 per decade" in sentence and "with 0.500× of that compute" in sentence and "[" not in sentence
    monkeypatch.setattr(b.figures, "penalty_vs_compute", lambda *a: tmp_path / "p.png")
    tables = [b._params_table(fitted, "bf16")]
    tables += [blk for s in (b.section_penalty(fitted, "bf16", {}, tmp_path), b.section_efficiency(fitted, "bf16"))
               for blk in s.blocks if isinstance(blk, b.Table)]
    assert len(tables) == 4
    for t in tables:
        assert b.CI not in t.columns and not any("[" in str(c) for r in t.rows for c in r), (t.columns, t.rows)
    assert "no intervals (no bootstrap ran)" in tables[0].caption
    with_bootstrap = {**fitted, "bootstrap": 8}
    assert b.CI in b.section_efficiency(with_bootstrap, "bf16").blocks[-1].columns  # (as it was)
    assert "[" in b.verdict_sentence("mxfp4", pen, "bf16", bootstrap=8)


def test_the_verdict_says_which_recipes_ran_only_some_of_the_model_sizes(tmp_path):
    """A recipe run at the three smallest of five sizes was judged ("shrinks") over its own compute range with no word
    that the study's two largest models are not in it (audit): the verdict names it, its sizes and the extrapolation."""
    from fits.synthetic import synthetic_table
    from reports.build import run_fits, section_verdict
    from reports.document import Paragraph
    from reports.load import load

    sizes = np.geomspace(2e7, 5e8, 5)
    table = synthetic_table({"bf16": {}, "full": {"effN": 0.8}, "small": {"effN": 0.8}}, sizes=sizes, ratios=(10, 20, 40, 80),
                            noise=0.003, seed=4)
    table = table.filter(~((pl.col("recipe") == "small") & (pl.col("N") > sizes[2])))
    table.write_csv(tmp_path / "t.csv")
    study = load(tmp_path / "t.csv")
    fitted = run_fits(study.runs, "chinchilla", "bf16", bootstrap=0, seed=0, workers=1)
    text = [b.text for b in section_verdict(fitted, "bf16", study).blocks if isinstance(b, Paragraph)]
    assert ("Not every recipe has completed runs at every model size of the study (5 sizes, N = 2e+07 to 5e+08): small "
            "at 3 (N = 2e+07 to 1e+08). Such a recipe's penalty is measured over its own runs' compute range, and beyond "
            "it is an extrapolation (Penalty vs compute).") in text
    whole = study.runs.filter(pl.col("recipe") != "small")
    assert not any("Not every recipe" in t for t in [b.text for b in section_verdict(fitted, "bf16", study.__class__(
        source=study.source, runs=whole)).blocks if isinstance(b, Paragraph)])


def test_verdict_sentence_says_shrinks_and_the_holm_adjusted_p():
    """The p is the likelihood-ratio test's of kappaN = kappaD = 0 on 2 degrees of freedom: two-sided, as small for a
    shrinking penalty as for a growing one. The sentence called it a "test of no growth", which beside a small p
    reads as evidence of growth, here in the sentence of a recipe whose penalty shrinks; it now says what it tests."""
    from reports.build import verdict_sentence

    pen = {"verdict": "shrinks", "p_value": 0.01, "p_adjusted": 0.03, "family": 3, "margin": 0.1,
           "ratio_per_decade": {"value": 1.2, "ci95": (1.05, 1.4)}}
    sentence = verdict_sentence("nvfp4", pen, "bf16", 100)
    assert "the penalty against bf16 **shrinks** with compute (the recipe gains ground" in sentence
    assert f"({LR_TEST}: p = 0.01, or 0.03 after Holm's adjustment over 3 recipes)" in sentence
    alone = {**pen, "p_adjusted": 0.01, "family": 1}  # a family of one: the adjustment changes nothing, not said
    assert f"({LR_TEST}: p = 0.01)" in verdict_sentence("nvfp4", alone, "bf16", 100)
    untestable = {**pen, "p_value": float("nan"), "p_adjusted": float("nan"), "verdict": "inconclusive"}
    assert "not computable" in verdict_sentence("nvfp4", untestable, "bf16", 100)


def test_a_p_below_the_tests_resolution_is_printed_as_a_bound_never_as_0():
    """The p is the chi-square tail of the statistic: it underflows to 0 beyond a statistic of ~1,490 (a large sweep
    with a strong growth), and the sentence then read "p = 0, or 0 after Holm's adjustment" and the tables 0, a
    certainty no test gives. Far short of that the number is the asymptotic formula's, not the data's: the reference
    is calibrated at the 5% and 1% levels (`scaling bench calibration`), and the synthetic sweep of
    test_holms_family_is_the_identified_recipes_only gives 6.4e-26. Below 1e-4 the report says p < 0.0001."""
    from scipy.special import chdtrc

    from reports.build import p_value_cells, verdict_sentence

    assert chdtrc(2, 1600.0) == 0.0  # the underflow the sentence printed as p = 0
    pen = {"verdict": "grows", "p_value": 0.0, "p_adjusted": 0.0, "family": 2, "margin": 0.1,
           "ratio_per_decade": {"value": 0.8, "ci95": (0.7, 0.9)}}
    sentence = verdict_sentence("nvfp4", pen, "bf16", 100)
    assert f"({LR_TEST}: p < 0.0001, or < 0.0001 after Holm's adjustment over 2 recipes)" in sentence, sentence
    assert p_value_cells({**pen, "p_value": 6.4e-26, "p_adjusted": 1.3e-25}) == ("< 0.0001", "< 0.0001")
    assert p_value_cells({**pen, "p_value": 0.012, "p_adjusted": 0.024}) == (0.012, 0.024)  # numbers where they mean one
    assert f"({LR_TEST}: p = 0.00012)" in verdict_sentence("nvfp4", {**pen, "p_value": 1.2e-4, "family": 1}, "bf16", 100)


def test_the_verdict_names_the_runs_of_a_recipe_and_of_the_baseline_that_are_in_no_fit():
    """A recipe whose largest run diverged read "does not grow" in the verdict (and on the console), its
    divergence said only in the failures section; the verdict now names each recipe's runs left out of its fit,
    and the baseline's, with how they ended and at what compute."""
    from reports.build import section_verdict, verdict_sentence
    from reports.load import Study

    runs = pl.DataFrame({"recipe": ["bf16"] * 3 + ["mxfp4"] * 4, "run_id": list("abcdefg"),
                         "C": [1e15, 1e16, 1e17, 1e15, 1e16, 1e17, 2e17], "N": [1e8] * 7,
                         "loss": [4.0, 3.5, float("nan"), 4.2, float("inf"), float("nan"), None],
                         "status": ["completed", "completed", "diverged", "completed", "completed", "diverged", "failed"]})
    flat = {"verdict": "does not grow", "p_value": 0.4, "margin": 0.1, "ratio_per_decade": {"value": 0.97, "ci95": (0.93, 1.01)}}
    sentence = verdict_sentence("mxfp4", flat, "bf16", 100, runs)
    assert sentence.endswith(" Not in its fit: 3 of its 4 runs (1 completed without a finite loss, 1 diverged, 1 failed, "
                             "at C = 1e+16 to 2e+17 FLOP; listed under Diverged and failed runs)."), sentence
    assert "Not in its fit" not in verdict_sentence("bf16", flat, "bf16", 100, runs.filter(pl.col("status") == "completed"))
    fitted = {"law": "chinchilla", "bootstrap": 100, "skipped": {}, "penalty": {"mxfp4": flat},
              "groups": {"bf16": {"n_runs": 2}, "mxfp4": {"n_runs": 1}}}
    section = section_verdict(fitted, "bf16", Study(source=Path("t.csv"), runs=runs))
    intro, bullets = section.blocks[0].text, section.blocks[1].items
    assert ("Not in bf16's fit, against which every penalty is measured: 1 of its 3 runs (1 diverged, at C = 1e+17 FLOP; "
            "listed under Diverged and failed runs).") in intro, intro
    assert bullets == (sentence,)


def test_the_verdict_says_which_intervals_with_which_seed_and_that_their_95_percent_is_nominal():
    """The verdict called its intervals "95% bootstrap intervals": not which kind (percentile, docs/fits.md), not the
    seed that reproduces them (fits.json has it, the report did not), and not that the 95% is nominal (the
    shared-efficiency rows found percentile intervals covering 70-100%). `scaling bench calibration` now measures the
    ratio per decade's coverage, on synthetic sweeps only: the verdict says where, not a number of another study's."""
    from reports.build import section_verdict
    from reports.load import Study

    runs = pl.DataFrame({"recipe": ["bf16", "mxfp4"], "run_id": ["a", "b"], "C": [1e15, 1e15], "N": [1e8, 1e8],
                         "loss": [4.0, 4.2], "status": ["completed", "completed"]})
    flat = {"verdict": "does not grow", "p_value": 0.4, "margin": 0.1, "ratio_per_decade": {"value": 0.97, "ci95": (0.93, 1.01)}}
    fitted = {"law": "chinchilla", "bootstrap": 100, "seed": 7, "twins": 0, "skipped": {}, "penalty": {"mxfp4": flat},
              "groups": {"bf16": {"n_runs": 1}, "mxfp4": {"n_runs": 1}}}
    intro = section_verdict(fitted, "bf16", Study(source=Path("t.csv"), runs=runs)).blocks[0].text
    assert ("intervals are 95% percentile bootstrap intervals over 100 replicates that resample whole runs (each "
            "recipe's apart, `--seed 7`); their 95% is nominal: how often such intervals hold the true ratio per "
            "decade is measured on synthetic sweeps of a known law (`scaling bench calibration`, docs/fits.md), not on "
            "runs like these;") in intro, intro


@pytest.mark.parametrize("bootstrap", [100, 0])
def test_the_verdict_reads_no_intervals_where_no_penalty_is_identified_and_says_what_would_pin_one(bootstrap):
    """Where the runs identify no recipe's penalty, the Verdict's opening still described its intervals (percentile,
    their seed, their nominal 95%) and how to read a multiplier, of which no sentence below shows one (the demo's
    example). It now says, in the words the sentences and Penalty vs compute use, that no penalty is identified and what
    to do: run what each sentence names. Where one recipe's penalty is identified, the intervals are there to read."""
    from reports.build import NO_NUMBERS, none_identified, section_verdict
    from reports.load import Study

    runs = pl.DataFrame({"recipe": ["bf16", "mxfp4", "nvfp4"], "run_id": ["a", "b", "c"], "C": [1e15] * 3,
                         "N": [1e8] * 3, "loss": [4.0, 4.2, 4.3], "status": ["completed"] * 3})
    flat = {"identified": False, "verdict": "inconclusive", "p_value": 0.9, "unidentified": ["more model sizes would pin it"],
            "ratio_per_decade": {"value": 0.97, "ci95": (1e-19, 1e110)}}
    judged = {"verdict": "does not grow", "p_value": 0.4, "margin": 0.1, "ratio_per_decade": {"value": 0.97, "ci95": (0.93, 1.01)}}
    fitted = {"law": "chinchilla", "bootstrap": bootstrap, "seed": 7, "skipped": {},
              "penalty": {"mxfp4": flat, "nvfp4": flat},
              "groups": {"bf16": {"n_runs": 1}, "mxfp4": {"n_runs": 1}, "nvfp4": {"n_runs": 1}}}
    study = Study(source=Path("t.csv"), runs=runs)
    intro = section_verdict(fitted, "bf16", study).blocks[0].text
    assert "interval" not in intro.replace(NO_NUMBERS, "") and "A multiplier below 1" not in intro, intro
    assert f"{none_identified('bf16')}, so {NO_NUMBERS} for any" in intro, intro
    assert "add such runs and build the report again" in intro, intro
    assert "each reason naming the runs that would pin it" in intro, intro
    assert ("the reasons read a bootstrap of 100 replicates, `--seed 7`" in intro) == bool(bootstrap), intro
    some = section_verdict({**fitted, "penalty": {"mxfp4": flat, "nvfp4": judged}}, "bf16", study).blocks[0].text
    assert ("intervals are 95% percentile bootstrap intervals" in some) == bool(bootstrap), some
    assert "A multiplier below 1" in some and none_identified("bf16") not in some, some


def test_the_loss_figures_caption_says_why_a_recipe_has_no_law(tmp_path, monkeypatch):
    """A recipe left out of the fits (too few runs) had a panel of points and no law, and no row in the parameters'
    table, without a word in that section; its caption now names it and the fits' reason."""
    from reports import figures
    from reports.build import section_loss_vs_compute
    from reports.load import Study

    monkeypatch.setattr(figures, "loss_vs_compute", lambda *a, **k: a[-1])  # the caption, not the drawing
    rows = [("bf16", N, D, law_loss(N, D)) for N in SIZES.values() for D in BUDGETS] + [("fp4", 2e6, 2e8, 9.0)]
    runs = pl.DataFrame(rows, schema=["recipe", "N", "D", "loss"], orient="row").with_columns(
        C=6 * pl.col("N") * pl.col("D"), status=pl.lit("completed"), run_id=pl.int_range(len(rows)).cast(pl.Utf8))
    reason = "group 'fp4' has 1 point from 1 run; a chinchilla fit needs at least 8 points (5 parameters) from 3 runs"
    fitted = {"law": "chinchilla", "bootstrap": 100, "skipped": {"fp4": reason},
              "groups": {"bf16": {"params": {k: LAW[k] for k in ("A", "B", "E", "alpha", "beta")}, "n_points": 12,
                                  "n_runs": 12, "objective": 0.0}}}
    section = section_loss_vs_compute(Study(source=Path("t.csv"), runs=runs), fitted, "bf16",
                                      {"bf16": "#000000", "fp4": "#1f77b4"}, tmp_path)
    assert section.blocks[0].caption.endswith(f" No law for fp4 (not fitted: {reason}).")


def test_the_loss_figure_calls_a_tables_loss_by_its_column(tmp_path, monkeypatch):
    """A CSV's `loss` column could hold any loss (training, perplexity's log): the caption and the axis said
    "Final validation loss" of it as of a sweep's result records. A table's is named by its column."""
    from reports import figures
    from reports.build import section_loss_vs_compute
    from reports.load import load

    drawn = []
    monkeypatch.setattr(figures, "loss_vs_compute", lambda *a, **k: drawn.append(k.get("loss_column")) or a[-1])
    fitted = {"law": "chinchilla", "bootstrap": 0, "skipped": {}, "groups": {}}

    def caption(study) -> str:
        return section_loss_vs_compute(study, fitted, "bf16", {}, tmp_path).blocks[0].caption

    csv = external_csv(tmp_path)
    assert caption(load(csv)).startswith("Loss (the table's `loss` column) of every completed run")
    pl.read_csv(csv).rename({"loss": "train loss"}).write_csv(csv)
    assert caption(load(csv, columns="loss=train loss")).startswith("Loss (the table's `train loss` column)")
    sweep = make_sweep(tmp_path)
    assert caption(load(sweep)).startswith("Final validation loss of every completed run")
    from reports.build import _flat_table
    from sweeps.store import collect_runs

    collect_runs(sweep)[0].write_parquet(sweep / "results.parquet")  # the sweep's records, as collect writes them
    _flat_table(load(sweep).runs).write_csv(tmp_path / "results.csv")  # and as a report writes them (val_loss: loss)
    for table in (sweep / "results.parquet", tmp_path / "results.csv"):
        assert caption(load(table)).startswith("Final validation loss of every completed run"), table
    assert drawn == ["loss", "train loss", None, None, None]  # the axis: the table's column, or validation loss


def test_cli_report_errors_are_one_line(tmp_path, capsys):
    from scaling.cli import main

    assert main(["report", str(tmp_path / "nope"), "--out", str(tmp_path / "r")]) == 2
    assert "does not exist" in capsys.readouterr().err
    csv = tmp_path / "bad.csv"
    csv.write_text("recipe,N,loss\nbf16,1e6,3.0\n")
    assert main(["report", str(csv), "--out", str(tmp_path / "r")]) == 2
    assert "D (or C)" in capsys.readouterr().err
    good = external_csv(tmp_path)
    assert main(["report", str(good), "--out", str(tmp_path / "r"), "--baseline", "fp8"]) == 2
    assert "--baseline" in capsys.readouterr().err
    (tmp_path / "empty.csv").write_text("")
    assert main(["report", str(tmp_path / "empty.csv"), "--out", str(tmp_path / "r")]) == 2
    assert "empty.csv is empty; pass a table with a header row" in capsys.readouterr().err
    (tmp_path / "t.toml").write_text('name = "mine"\n')
    assert main(["report", str(tmp_path / "t.toml"), "--out", str(tmp_path / "r")]) == 2
    assert "t.toml is not named as a results table" in capsys.readouterr().err


def test_a_baseline_no_run_has_is_refused_before_any_fitting(tmp_path, capsys):
    """`scaling report DIR --baseline bf61` printed "fitting the chinchilla law to ..." and then refused the baseline
    (and `scaling fit --starts all` its notice of a long fit): both refuse it first, in one line, exit 2."""
    from scaling.cli import main
    from sweeps.store import collect_runs

    sweep = make_sweep(tmp_path)
    collect_runs(sweep)[0].write_parquet(sweep / "results.parquet")
    said = "baseline recipe 'bf61' is not in the table; the recipes with completed runs: "
    for argv in (["report", str(sweep), "--out", str(tmp_path / "r"), "--baseline", "bf61"],
                 ["report", str(external_csv(tmp_path)), "--out", str(tmp_path / "r"), "--baseline", "bf61"],
                 ["fit", str(sweep / "results.parquet"), "--baseline", "bf61", "--starts", "all"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and len(err.splitlines()) == 1, (argv, err)
    assert not (tmp_path / "r").exists()
    # and a shared-efficiency fit without a baseline to share against, as early
    argv = ["fit", str(sweep / "results.parquet"), "--baseline", "mxfp4", "--shared-efficiencies", "--starts", "all"]
    collect_runs(sweep)[0].filter(pl.col("recipe") == "mxfp4").write_parquet(sweep / "results.parquet")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: shared efficiencies need a baseline") and len(err.splitlines()) == 1, err


def test_damaged_run_files_neither_crash_the_report_nor_sweep_status(tmp_path, capsys):
    """A run's metrics.csv with a ragged row: the report's curve reader leaves that run out (the others
    read) and a warning names the file; a result.json that is JSON but no object counts as no result (failed) in
    `sweep status`, and `sweep collect` names it."""
    from reports.load import _read_curves
    from scaling.cli import main
    from sweeps.store import run_state

    sweep = make_sweep(tmp_path)
    damaged = sorted(sweep.glob("*/metrics.csv"))[0]
    damaged.write_text(damaged.read_text() + "1,2,3,4,5,6,7,8,9,10,11,12,13\n")
    run_ids = [p.parent.name for p in sweep.glob("*/metrics.csv")]
    curves = _read_curves(sweep, run_ids)
    assert damaged.parent.name not in curves and len(curves) == len(run_ids) - 1
    assert f"warning: {damaged} cannot be read" in capsys.readouterr().err

    record = sorted(sweep.glob("*/result.json"))[0]
    record.write_text("[1, 2]")
    (record.parent / "job.json").write_text('{"executor": "local"}')  # a run that was launched
    assert run_state(record.parent, None) == "failed"
    assert main(["sweep", "collect", str(sweep)]) == 2
    assert f"{record} is not a result record (not a JSON object)" in capsys.readouterr().err


def test_an_out_folder_beside_which_no_stage_can_be_made_is_named_as_given(tmp_path, monkeypatch):
    """mkdtemp's refusal (`scaling report ... --out /sys/rep`: Operation not permitted) named the
    hidden staging folder (/sys/.rep.building-bd47mjn5), not the user's --out."""
    import errno
    import tempfile

    from reports.build import _staging

    def refuse(dir, prefix):
        raise PermissionError(errno.EPERM, "Operation not permitted", f"{dir}/{prefix}abc")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(OSError) as e:
        with _staging(tmp_path / "rep"):
            pass
    assert e.value.filename == str(tmp_path / "rep") and e.value.errno == errno.EPERM


def _tick_labels(width: float, lo: float, hi: float) -> tuple[list[str], list]:
    """The x tick labels `_log_axis` draws on a panel `width` inches wide over [lo, hi], as text, and their boxes."""
    import matplotlib.pyplot as plt

    from reports.figures import STYLE, _log_axis

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(width, 2.7), layout="constrained")
        ax.plot([lo, hi], [0, 1])
        _log_axis(ax)
        fig.canvas.draw()
        left, right = ax.get_xlim()
        ticks = [t for t in ax.xaxis.get_major_ticks() if left <= t.get_loc() <= right]
        boxes = [t.label1.get_window_extent() for t in ticks]
        plt.close(fig)
    words = [re.sub(r"\\times|\\mathdefault|[${}]", lambda m: "×" if "times" in m[0] else "", t.label1.get_text())
             for t in ticks]
    return words, boxes


def test_a_log_axis_labels_every_tick_it_draws():
    """The gap figure's N axis drew ticks at 5×10^7 and 5×10^8 without a label (matplotlib's formatter labels a subset
    of a range over 0.4 decades long), so the largest sizes of a ladder sat at an unnamed tick, and the demo's 0.5M at
    none (audit)."""
    assert _tick_labels(5.2, 2e7, 5e8)[0] == ["2×10^7", "5×10^7", "10^8", "2×10^8", "5×10^8"]
    assert _tick_labels(5.2, 4e5, 1e6)[0] == ["5×10^5", "10^6"]
    assert _tick_labels(4.8, 1e16, 1e22)[0] == [f"10^{k}" for k in range(16, 23)]


@pytest.mark.parametrize("width", [3.2, 4.8, 5.2])  # a loss-vs-compute panel, a penalty panel, the gap figure
@pytest.mark.parametrize("lo, hi", [(6e9, 3.9e11), (1.2e15, 4.4e17), (2e6, 3e7), (4e5, 1e6), (1e16, 1e22), (3e8, 9e8),
                                    (1.1e8, 1.9e8), (9.2e7, 1.07e8)])
def test_a_log_axis_has_two_labels_or_more_and_none_touches_another(width, lo, hi):
    """Labelling every tick must not crowd a narrow panel: 1, 2, 5 × 10^k only where they fit, else fewer ticks. An
    axis with no integer × 10^k inside it (1.1e8 to 1.9e8) had no label at all: it is labelled at even steps."""
    words, boxes = _tick_labels(width, lo, hi)
    assert len(words) >= 2 and all(words), words
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), words


def _multiplier_labels(monkeypatch, tmp_path, start: float, end: float) -> tuple[list[str], list]:
    """The y tick labels of the penalty figure's multiplier panel, for a recipe whose multiplier goes from `start` to
    `end` over three decades of compute (band ±5%), as text, and their boxes (bottom to top)."""
    import matplotlib.pyplot as plt

    from reports import figures

    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.setdefault("fig", fig))
    c = np.geomspace(1e16, 1e19, 30)
    value = np.geomspace(start, end, 30)
    band = {"value": value.tolist(), "lo": (value * 0.95).tolist(), "hi": (value * 1.05).tolist()}
    figures.penalty_vs_compute({"mxfp4": {"C": c.tolist(), "in_data": [True] * 10 + [False] * 20, "multiplier": band,
                                          "gap": band}}, {"mxfp4": {"verdict": "does not grow"}}, figures.recipe_styles(["bf16", "mxfp4"], "bf16"),
                               "bf16", tmp_path / "penalty.png")
    fig = drawn["fig"]
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    ticks = [t for t in ax.yaxis.get_major_ticks() if low <= t.get_loc() <= high]
    words = [re.sub(r"\\times|\\mathdefault|[${}]", lambda m: "×" if "times" in m[0] else "", t.label1.get_text())
             for t in ticks]
    boxes = [t.label1.get_window_extent() for t in ticks]
    plt.close(fig)
    return words, boxes


@pytest.mark.parametrize("start, end, expected", [
    (0.9, 0.97, ["0.8", "0.85", "0.9", "0.95", "1", "1.05", "1.1"]),  # near 1: plain decimals, not 8×10^-1
    (0.5, 0.55, ["0.5", "0.6", "0.7", "0.8", "0.9", "1", "1.1"]),  # '0.5' and '1' only, before
    (0.02, 0.05, ["0.02", "0.05", "0.1", "0.2", "0.5", "1"]),
    (1e-4, 1e-3, [m + f"10^{k}" for k in range(-4, 0) for m in ("", "3×")] + ["10^0"]),  # far from 1: m × 10^k
])
def test_the_multiplier_axis_labels_ticks_that_fit_in_decimals_near_1(monkeypatch, tmp_path, start, end, expected):
    """The penalty figure's multiplier axis (log) labelled 1, 2, 5 × 10^k only, so a panel from 0.4 to 1.1 read '0.5'
    and '1' (audit). It takes `_log_axis`, as the x axes do: labels that fit, finer even steps where nice ones are
    too few, plain decimals near 1; no two labels touch."""
    words, boxes = _multiplier_labels(monkeypatch, tmp_path, start, end)
    assert words == expected, words
    assert all(a.y1 < b.y0 for a, b in zip(boxes, boxes[1:])), words


def test_every_recipe_has_its_own_colour():
    """Past tab10's 10 colours the figures repeated them (r0, r10, r20 alike in one legend)."""
    from reports.figures import recipe_colors

    for n in (3, 10, 11, 20, 30):
        recipes = ["bf16", *(f"r{i}" for i in range(n))]
        colors = recipe_colors(recipes, "bf16")
        assert colors["bf16"] == "#000000" and len(set(colors.values())) == n + 1, n
    assert recipe_colors(["bf16", "fp4"], "bf16")["fp4"] == "#332288"  # few recipes: the colour-blind-safe palette


@pytest.mark.parametrize("n", [1, 9, 10, 11, 20])
def test_every_recipe_has_its_own_colour_and_marker(n):
    """Recipes were told apart by colour only: past MUTED's nine, tab20's colours are not told apart with a colour-vision
    deficiency, and in a black-and-white print none were (visual audit). Each recipe has a (colour, marker) pair of its
    own, its colour `recipe_colors`'s; the baseline and up to len(MARKERS) others each a shape of their own too."""
    from reports.figures import MARKERS, recipe_colors, recipe_styles

    recipes = ["bf16", *(f"r{i}" for i in range(n))]
    styles = recipe_styles(recipes, "bf16")
    assert set(styles) == set(recipes) and styles["bf16"] == ("#000000", "o", True, "-")
    assert len(set(styles.values())) == n + 1
    assert {r: s.color for r, s in styles.items()} == recipe_colors(recipes, "bf16")
    if n <= len(MARKERS):
        assert len({s.marker for s in styles.values()}) == n + 1
    assert not {"x", "X"} & {s.marker for s in styles.values()}  # (the validation curves' mark of a stopped run)


@pytest.mark.parametrize("n", [10, 21, 25, 100])
def test_no_two_recipes_look_alike_in_a_black_and_white_print(n):
    """Past ten recipes the markers repeated (MARKERS[i % 10]): r0 and r10 were one shape, told apart by colour only,
    grey alike in a black-and-white print. Each recipe now has a (marker, fill, line style) of its own for any count,
    by the recipes' order, the baseline keeping its filled circle on a solid line and the first ten their filled
    shapes (a report of up to ten recipes is drawn as before)."""
    from reports.figures import BASELINE_MARKER, MARKERS, recipe_styles

    recipes = ["bf16", *(f"r{i:03d}" for i in range(n))]
    styles = recipe_styles(recipes, "bf16")
    assert styles == recipe_styles(list(recipes), "bf16")  # (deterministic)
    print_looks = {r: (s.marker, s.filled, s.linestyle) for r, s in styles.items()}
    assert len(set(print_looks.values())) == len(set(styles.values())) == n + 1
    assert print_looks["bf16"] == (BASELINE_MARKER, True, "-")
    assert [print_looks[f"r{i:03d}"] for i in range(10)] == [(m, True, "-") for m in MARKERS]
    assert not {"x", "X"} & {s.marker for s in styles.values()}  # (the validation curves' mark of a stopped run)
    assert ":" not in {s.linestyle for s in styles.values()}  # (the penalty figure's extrapolation)


def _look(line) -> tuple:
    """A curve's (marker, filled, solid) as drawn: filled where its marker's face is its line's colour."""
    from matplotlib.colors import to_hex

    return line.get_marker(), to_hex(line.get_markerfacecolor()) == to_hex(line.get_color()), line.get_linestyle() == "-"


def test_the_figures_draw_a_recipes_hollow_marker_and_dashed_line_and_their_legends_show_them(monkeypatch, tmp_path):
    """A recipe past the 21st is hollow or dashed (`recipe_styles`): every figure draws its points, its curves' markers
    and its legend key so, as its style says."""
    from reports import figures
    from reports.load import load

    many = figures.recipe_styles(["bf16", *(f"r{i:02d}" for i in range(30))], "bf16")
    styles = {"bf16": many["bf16"], "mxfp4": many["r12"], "nvfp4": many["r23"]}  # hollow solid; filled dashed
    assert (styles["mxfp4"].filled, styles["nvfp4"].filled, styles["nvfp4"].linestyle != "-") == (False, True, True)
    looks = {r: (s.marker, s.filled, s.linestyle == "-") for r, s in styles.items()}
    recipes = list(styles)

    runs = pl.DataFrame([{"recipe": r, "N": N, "D": D, "C": 6 * N * D, "loss": law_loss(N, D)}
                         for r in recipes for N in (2e6, 5e6) for D in (2e8, 1e9)])
    fig = _drawn(monkeypatch, lambda path: figures.loss_vs_compute(runs, {}, "bf16", styles, path))
    for ax in (ax for ax in fig.axes if ax.get_visible()):
        points = ax.collections[0]
        hollow = (points.get_facecolor()[:, :3] == 1).all()  # white inside
        assert (_scatter_marker(points), not hollow) == looks[ax.get_title()][:2], ax.get_title()

    gaps = pl.DataFrame([{"recipe": r, "N": N, "D": 1e9, "gap_pct": 1.0 + i + j}
                         for i, r in enumerate(recipes[1:]) for j, N in enumerate((2e6, 5e6, 1.2e7))])
    fig = _drawn(monkeypatch, lambda path: figures.gap_vs_size(gaps, gaps.rename({"gap_pct": "mean_gap_pct"}), styles,
                                                               "bf16", path))
    assert {line.get_label(): _look(line) for line in fig.axes[0].lines if line.get_label() in recipes} == \
        {r: looks[r] for r in recipes[1:]}
    (legend,) = fig.legends
    assert {t.get_text(): _look(h) for t, h in zip(legend.get_texts(), legend.legend_handles)} == \
        {r: looks[r] for r in recipes[1:]}

    fig = _drawn(monkeypatch, lambda path: figures.penalty_vs_compute(_flat_bands(recipes[1:]), {}, styles, "bf16", path))
    for ax in fig.axes:
        assert {line.get_label(): _look(line) for line in ax.lines if line.get_label() in recipes} == \
            {r: looks[r] for r in recipes[1:]}

    study = load(make_sweep(tmp_path))
    fig = _drawn(monkeypatch, lambda path: figures.validation_curves(study.runs, study.curves, styles, "bf16", path))
    for ax in (ax for ax in fig.axes if ax.get_visible()):
        curves = {line.get_label(): _look(line) for line in ax.lines if line.get_label() in recipes}
        assert curves and curves == {r: looks[r] for r in curves}


def _scatter_marker(collection) -> str:
    """The recipe marker a scatter's points are drawn in (a collection keeps paths, not the marker's name)."""
    from matplotlib.markers import MarkerStyle

    from reports import figures

    drawn = collection.get_paths()[0].vertices
    for marker in (figures.BASELINE_MARKER, *figures.MARKERS):
        style = MarkerStyle(marker)
        shape = style.get_path().transformed(style.get_transform()).vertices
        if shape.shape == drawn.shape and np.allclose(shape, drawn):
            return marker
    raise AssertionError("points in no recipe's marker")


def _legend_markers(fig) -> dict[str, str]:
    """label -> marker of the figure's legend below its panels."""
    (legend,) = fig.legends
    return {text.get_text(): handle.get_marker() for text, handle in zip(legend.get_texts(), legend.legend_handles)}


def test_the_figures_draw_each_recipe_in_its_marker_and_their_legends_show_it(monkeypatch, tmp_path):
    """Every figure drew a recipe's points and lines in its colour only (the gap figure's means as circles, whatever
    the recipe): each recipe's points, its lines' markers and its legend entry take its marker (`recipe_styles`)."""
    from reports import figures
    from reports.load import load

    recipes = ["bf16", "mxfp4", "nvfp4"]
    styles = figures.recipe_styles(recipes, "bf16")
    marker = {r: s.marker for r, s in styles.items()}
    assert len(set(marker.values())) == 3

    runs = pl.DataFrame([{"recipe": r, "N": N, "D": D, "C": 6 * N * D, "loss": law_loss(N, D)}
                         for r in recipes for N in (2e6, 5e6) for D in (2e8, 1e9)])
    fig = _drawn(monkeypatch, lambda path: figures.loss_vs_compute(runs, {}, "bf16", styles, path))
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert {title: _scatter_marker(ax.collections[0]) for title, ax in panels.items()} == marker

    gaps = pl.DataFrame([{"recipe": r, "N": N, "D": 1e9, "gap_pct": 1.0 + i + j}
                         for i, r in enumerate(recipes[1:]) for j, N in enumerate((2e6, 5e6, 1.2e7))])
    fig = _drawn(monkeypatch, lambda path: figures.gap_vs_size(gaps, gaps.rename({"gap_pct": "mean_gap_pct"}), styles,
                                                               "bf16", path))
    ax = fig.axes[0]
    assert [_scatter_marker(c) for c in ax.collections] == [marker["mxfp4"], marker["nvfp4"]]
    assert [line.get_marker() for line in ax.lines if line.get_label() in recipes] == [marker["mxfp4"], marker["nvfp4"]]
    assert _legend_markers(fig) == {"mxfp4": marker["mxfp4"], "nvfp4": marker["nvfp4"]}

    fig = _drawn(monkeypatch, lambda path: figures.penalty_vs_compute(_flat_bands(recipes[1:]), {}, styles, "bf16", path))
    for ax in fig.axes:
        solid = {line.get_label(): line.get_marker() for line in ax.lines if line.get_label() in recipes}
        assert solid == {"mxfp4": marker["mxfp4"], "nvfp4": marker["nvfp4"]}
    assert _legend_markers(fig) == {"mxfp4": marker["mxfp4"], "nvfp4": marker["nvfp4"]}

    study = load(make_sweep(tmp_path))
    fig = _drawn(monkeypatch, lambda path: figures.validation_curves(study.runs, study.curves, styles, "bf16", path))
    for ax in (ax for ax in fig.axes if ax.get_visible()):
        curves = {line.get_label(): line.get_marker() for line in ax.lines if line.get_label() in recipes}
        assert curves and curves == {r: marker[r] for r in curves}
    assert _legend_markers(fig) == {**marker, figures.STOPPED: "x"}


def test_provenance_lists_budgets_of_runs_whose_size_and_tokens_are_known(tmp_path):
    """A failed run's record may hold no tokens (it crashed before): the tokens-per-run lines skip it
    rather than formatting None (a TypeError that stopped the whole report)."""
    from reports.build import section_provenance
    from reports.document import Bullets
    from reports.load import load

    sweep = make_sweep(tmp_path)
    record = json.loads((sweep / "bf16-S-200M" / "result.json").read_text())
    (sweep / "bf16-S-200M" / "result.json").write_text(json.dumps({**record, "status": "failed", "val_loss": None,
                                                                   "tokens": None, "flops": None}))
    items = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Bullets)).items
    assert "Tokens per run, S (N = 2e+06): 2e+08, 5e+08, 1.2e+09." in items  # the other recipes' S runs of 2e8


def test_provenance_gives_the_range_of_budgets_where_there_are_many_sizes():
    """A table read off a paper's figure has a slightly different N at every point: ~150 lines of
    "Tokens per run, N = ..." became one line with the sizes' and budgets' ranges."""
    from reports.build import TOKENS_LISTED_SIZES, _tokens_per_run

    many = pl.DataFrame({"N": [1e7 * (1 + i / 100) for i in range(TOKENS_LISTED_SIZES + 1)],
                         "D": [2e8 * (1 + i) for i in range(TOKENS_LISTED_SIZES + 1)]})
    assert _tokens_per_run(many) == [f"Tokens per run: {TOKENS_LISTED_SIZES + 1} model sizes, N = 1e+07 to 1.12e+07, "
                                     "trained on 2e+08 to 2.6e+09 tokens (each run's N and D: results.csv)."]
    assert len(_tokens_per_run(many.head(TOKENS_LISTED_SIZES))) == TOKENS_LISTED_SIZES  # few: each size's line
    small = pl.DataFrame({"N": [5e5, 5e5], "D": [4096.0, 2e6]})  # a CPU run's budget in full, not 4.1e+03
    assert _tokens_per_run(small) == ["Tokens per run, N = 5e+05: 4,096, 2e+06."]


def test_the_subtitle_names_the_baseline_when_the_other_recipes_are_left_out(tmp_path):
    """With every other recipe too small to fit, the subtitle said "no baseline (`bf16`)" of a table
    whose baseline is bf16, beside a verdict naming the recipes left out against it."""
    import reports

    table = pl.read_csv(external_csv(tmp_path))
    table = pl.concat([table.filter(pl.col("recipe") == "bf16"), table.filter(pl.col("recipe") == "nvfp4").head(2)])
    table.write_csv(tmp_path / "few.csv")
    reports.build(tmp_path / "few.csv", tmp_path / "r", bootstrap=0)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "recipes bf16, nvfp4; baseline `bf16`; law" in md and "No recipe could be judged against bf16" in md


@pytest.mark.parametrize("recipes, compared, role", [
    (["bf16", "nvfp4"], True, "baseline `bf16`"),
    (["bf16"], False, "baseline `bf16` (no other recipe has results)"),  # said "no baseline (`bf16`)" of bf16's runs
    (["nvfp4"], False, "no baseline (`bf16`)"),
])
def test_the_subtitle_says_whether_the_baseline_is_there(recipes, compared, role):
    """A table of bf16's runs alone (or a sweep whose other recipes are still running) read "recipes bf16; no
    baseline (`bf16`)": bf16 is there, with nothing to compare against it."""
    from reports.build import subtitle

    runs = pl.DataFrame({"recipe": [r for r in recipes for _ in range(3)]})
    assert subtitle(runs, "bf16", compared, "chinchilla") == (
        f"{3 * len(recipes)} runs, recipes {', '.join(recipes)}; {role}; law `chinchilla`.")


def test_a_failed_record_without_its_size_does_not_crash_the_validation_curves(tmp_path):
    """A failed run's record may hold no n_params (it crashed before they were known): the report's
    validation-curve figure sorted its N, None beside floats, and the report ended in a TypeError."""
    from reports import build

    sweep = make_sweep(tmp_path)
    path = sweep / "mxfp4-S-200M" / "result.json"
    record = json.loads(path.read_text())
    record.update(status="failed", val_loss=None)
    del record["n_params"]
    path.write_text(json.dumps(record))
    summary = build(sweep, tmp_path / "report", bootstrap=0, workers=1)
    assert any(p.endswith("validation_curves.png") for p in summary["figures"])


def test_a_failed_record_is_listed_once_and_a_completed_run_without_a_loss_is_listed(tmp_path):
    """A record of status failed is a result: it was listed with the failures and again as a run with no
    result ("the job was killed ... not in this report"), and `scaling report` said so on the console. A
    completed record with a blank val_loss was in no table, fit or count."""
    from reports.build import section_failures
    from reports.document import Paragraph, Table
    from reports.load import load

    sweep = make_sweep(tmp_path)
    for run_id, status, loss in (("nvfp4-M-200M", "failed", None), ("nvfp4-S-200M", "completed", None)):
        path = sweep / run_id / "result.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"status": status, "val_loss": loss}))
    study = load(sweep)
    assert study.unfinished == []
    blocks = section_failures(study).blocks
    text = " ".join(b.text for b in blocks if isinstance(b, Paragraph))
    assert text.startswith("3 of 36 runs did not complete or have no finite loss (2 did not complete, 1 completed "
                           "without one)") and "no result" not in text
    tables = [b for b in blocks if isinstance(b, Table)]
    assert len(tables) == 1 and sorted(r[0] for r in tables[0].rows) == ["mxfp4-XL-1200M", "nvfp4-M-200M", "nvfp4-S-200M"]


def test_a_folder_that_is_no_sweep_names_the_tables_and_sweeps_in_it(tmp_path, capsys):
    """An earlier report's folder (its results.csv) or runs/ (its sweeps) was refused as no sweep directory,
    with no word that the report reads what it holds."""
    from scaling.cli import main

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    shutil.copy(external_csv(tmp_path), earlier / "results.csv")
    assert main(["report", str(earlier), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        f"; it holds {earlier / 'results.csv'}, which `scaling report` reads: pass that")
    sweep = make_sweep(tmp_path / "runs")
    (sweep / "sweep.json").write_text(json.dumps({"name": "s", "runs": []}))
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 2
    assert f"it holds {sweep}, which" in capsys.readouterr().err
    assert main(["report", str(sweep / "bf16-S-200M"), "--out", str(tmp_path / "r")]) == 2  # a run's: its own words
    assert "is one run's folder" in (err := capsys.readouterr().err) and "which `scaling report` reads" not in err


def test_a_table_of_thousands_of_model_sizes_draws_its_loss_figure_in_one_scatter_per_recipe(tmp_path, monkeypatch):
    """A table read off a paper's figure has a model size per point: the loss-vs-compute figure drew one
    scatter and one law curve per size and recipe (72 s of a 80 s report at 6,000 points). It draws one
    scatter per recipe and the law along at most LAW_LINES sizes, and its caption says so."""
    import matplotlib.axes

    from reports import build
    from reports.figures import LAW_LINES

    rng = np.random.default_rng(0)
    N = 10 ** rng.uniform(6, 7.5, 40)
    D = N * 10 ** rng.uniform(1, 2.5, 40)
    rows = [{"recipe": r, "N": n, "D": d, "loss": law_loss(n, d, *RECIPES[r]) * math.exp(rng.normal(0, 0.003))}
            for r in ("bf16", "nvfp4") for n, d in zip(N, D)]
    pl.DataFrame(rows).write_csv(tmp_path / "t.csv")
    from reports import figures

    calls = {"scatter": 0, "plot": 0, "inside": False}  # counted inside loss_vs_compute only
    for name in ("scatter", "plot"):
        original = getattr(matplotlib.axes.Axes, name)

        def counted(self, *a, _name=name, _original=original, **k):
            calls[_name] += calls["inside"]
            return _original(self, *a, **k)
        monkeypatch.setattr(matplotlib.axes.Axes, name, counted)
    drawing = figures.loss_vs_compute

    def loss_vs_compute(*a, **k):
        calls["inside"] = True
        try:
            return drawing(*a, **k)
        finally:
            calls["inside"] = False
    monkeypatch.setattr(figures, "loss_vs_compute", loss_vs_compute)
    build(tmp_path / "t.csv", tmp_path / "r", bootstrap=0, workers=1)
    assert calls["scatter"] == 2
    assert calls["plot"] <= 2 * (LAW_LINES + 2)  # per recipe: the law along LAW_LINES sizes, its frontier, the baseline's
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"the fitted chinchilla law along {LAW_LINES} of the 40 model sizes, spread over their range" in md


def test_a_completed_run_without_a_finite_loss_reads_back_from_the_reports_results_csv(tmp_path):
    """A completed record whose val_loss is NaN is listed with the failures and left out of the fits; the
    report's results.csv holds it as NaN, and reading that table back refused the whole table ("a missing,
    NaN or non-numeric ... loss"), so no report could be rebuilt from it. Read back, it is listed as before."""
    from reports.build import _flat_table, fit_table, section_failures
    from reports.document import Table
    from reports.load import load

    sweep = make_sweep(tmp_path)
    path = sweep / "nvfp4-S-200M" / "result.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"val_loss": float("nan")}))
    csv = tmp_path / "results.csv"
    csv.write_text(_flat_table(load(sweep).runs).write_csv())
    study = load(csv)
    assert study.runs.height == 36 and "nvfp4-S-200M" not in fit_table(study.runs)["run_id"].to_list()
    table = next(b for b in section_failures(study).blocks if isinstance(b, Table))
    assert sorted(r[0] for r in table.rows) == ["mxfp4-XL-1200M", "nvfp4-S-200M"]


def test_a_recipe_name_with_markup_characters_is_shown_as_it_is(tmp_path):
    """A recipe named 'nv**fp4_<b>' ended the bold of its verdict in the HTML at its '**' (and its '_' and '*'
    began emphasis in report.md): names are escaped where the text is built, and the escapes are undone in the
    HTML, the console's sentence and nowhere else; table cells are escaped in the Markdown."""
    import html as html_module
    import re

    from reports.build import verdict_sentence
    from reports.document import Document, Paragraph, Section, Table
    from reports.render import plain, to_html, to_markdown

    name = "nv**fp4_<b>`x`"
    pen = {"verdict": "grows", "p_value": 0.01, "ratio_per_decade": {"value": 0.9, "ci95": (0.8, 0.95)}}
    sentence = verdict_sentence(name, pen, "bf*16", bootstrap=100)
    assert plain(sentence).startswith(f"{name}: the penalty against bf*16 grows with compute")
    doc = Document("t", "s", [Section("Verdict", [Paragraph(sentence), Table(("recipe",), ((name,),))])])
    page = to_html(doc)
    bold = re.findall(r"<strong>(.*?)</strong>", page)
    assert [html_module.unescape(b) for b in bold] == [name, "grows"], bold
    assert "<b>" not in page and "<code>" not in page
    md = to_markdown(doc, tmp_path)
    assert "**nv\\*\\*fp4\\_\\<b>\\`x\\`**: the penalty against bf\\*16" in md, md
    assert "| nv\\*\\*fp4\\_\\<b>\\`x\\` |" in md, md


def test_the_fits_messages_naming_a_recipe_with_markup_characters_show_it_as_it_is(tmp_path):
    """fits' reasons and warnings (plain text the console prints as is) entered the report's Markdown unescaped:
    a recipe 'nv*fp4_x' warned about, or 'mx**fp4`q`' whose runs all diverged, began emphasis in report.md and
    ended the bold (and opened a code span) in the HTML. Read by a CommonMark parser and in the HTML, each name is
    itself and the report's own bold is intact."""
    import html as html_module
    import re

    from reports import build

    markdown_it = pytest.importorskip("markdown_it")
    warned, never = "nv*fp4_x", "mx**fp4`q`"
    rows = pl.read_csv(external_csv(tmp_path)).with_columns(status=pl.lit("completed"))
    rows = rows.with_columns(
        recipe=pl.col("recipe").replace({"nvfp4": warned, "mxfp4": never}),
        loss=pl.when(pl.col("recipe") == "nvfp4").then(pl.col("loss") * 20).otherwise(pl.col("loss")),  # not nats
        status=pl.when(pl.col("recipe") == "mxfp4").then(pl.lit("diverged")).otherwise(pl.col("status")))
    rows.write_csv(tmp_path / "t.csv")
    build(tmp_path / "t.csv", tmp_path / "r", bootstrap=0, workers=1)
    page = (tmp_path / "r" / "index.html").read_text()
    md = markdown_it.MarkdownIt("commonmark").render((tmp_path / "r" / "report.md").read_text())
    for rendered in (page, md):
        text = html_module.unescape(re.sub(r"<[^>]+>", "", rendered))
        assert f"{warned}: losses reach" in text and f"{never}: none of its 12 runs completed" in text
        bold = {html_module.unescape(b) for b in re.findall(r"<strong>(.*?)</strong>", rendered)}
        assert bold == {"bf16", warned, "inconclusive", "Fit warnings"}, bold
        for tag in ("em", "code"):  # (captions are in italics in report.md: a name there is whole, not markup's end)
            for c in re.findall(rf"<{tag}>(.*?)</{tag}>", rendered, re.S):
                whole = html_module.unescape(re.sub(r"<[^>]+>", "", c)).replace(warned, "").replace(never, "")
                assert "fp4" not in whole and (tag == "em" or "fp4" not in c), (tag, c)


def test_the_fit_warnings_are_a_list_one_warning_an_item_in_the_html_and_in_report_md(tmp_path):
    """The fit warnings were one paragraph, joined by semicolons: the demo's nine ran ~20 lines on a desktop (visual
    audit), one hard to tell from the next. They are a list under their heading, one warning an item with its text,
    in index.html and in report.md."""
    import html as html_module

    from reports import build
    from reports.render import literal

    rows = pl.read_csv(external_csv(tmp_path))
    not_nats = pl.col("recipe") != "bf16"  # losses ×20: fits warns of each such recipe
    rows.with_columns(loss=pl.when(not_nats).then(pl.col("loss") * 20).otherwise(pl.col("loss"))).write_csv(tmp_path / "t.csv")
    warnings = build(tmp_path / "t.csv", tmp_path / "r", bootstrap=0, workers=1)["warnings"]
    assert len(warnings) == 2 and all("not nats per token" in w for w in warnings), warnings
    page = (tmp_path / "r" / "index.html").read_text()
    listed = re.search(r"<p><strong>Fit warnings</strong> \(read the laws and the verdicts with care\):</p><ul>(.*?)</ul>",
                       page)
    assert listed, page[page.find("Fit warnings") - 200:][:2000]
    assert [html_module.unescape(i) for i in re.findall(r"<li>(.*?)</li>", listed[1])] == warnings
    md = (tmp_path / "r" / "report.md").read_text()
    assert ("\n\n**Fit warnings** (read the laws and the verdicts with care):\n\n"
            + "".join(f"- {literal(w)}\n" for w in warnings)) in md, md


def test_a_name_holding_dollars_is_escaped_in_report_md_and_itself_in_the_html(tmp_path):
    """GitHub's Markdown, where a committed report.md is read, sets '$m$' as math (an italic m): report.md left a
    recipe '$m$' or a size '$0.5_M$' unescaped. The '$' is escaped there; CommonMark, the HTML and the console
    show the name as it is."""
    import html as html_module
    import re

    from reports.build import verdict_sentence
    from reports.document import Document, Paragraph, Section, Table
    from reports.render import plain, to_html, to_markdown

    markdown_it = pytest.importorskip("markdown_it")
    pen = {"verdict": "grows", "p_value": 0.01, "ratio_per_decade": {"value": 0.9, "ci95": (0.8, 0.95)}}
    sentence = verdict_sentence("$m$", pen, "50% $x", bootstrap=100)
    assert plain(sentence).startswith("$m$: the penalty against 50% $x grows with compute")
    doc = Document("t", "s", [Section("Verdict", [Paragraph(sentence), Table(("size",), (("$0.5_M$",),))])])
    md = to_markdown(doc, tmp_path)
    assert r"**\$m\$**: the penalty against 50% \$x" in md and r"| \$0.5_M\$ |" in md, md
    for rendered in (to_html(doc), markdown_it.MarkdownIt("commonmark").enable("table").render(md)):
        text = html_module.unescape(re.sub(r"<[^>]+>", "", rendered))
        assert "$m$: the penalty against 50% $x" in text and "$0.5_M$" in text, text


# Names that begin a Markdown block where a line begins (CommonMark): a heading, a quote, a list item (bullet or
# ordered), a thematic break; each ends a name whose rest shows whether the escape kept it whole
BLOCK_NAMES = ["# x", "###### x", "> x", ">x", "- x", "+ x", "1. x", "2) x", "123456789. x", "---", "- - -", "  # x"]


def _text_of(rendered: str) -> str:
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", "", rendered))


@pytest.mark.parametrize("name", BLOCK_NAMES)
def test_a_name_that_begins_a_list_item_or_paragraph_is_no_heading_list_or_quote_in_report_md(tmp_path, name):
    """In report.md a list item or paragraph that began with a name (a fit warning begins with its recipe's) set a
    recipe '# x' as a heading, '1. x' or '- x' as a list, '> x' as a quote: `literal` escapes a leading block
    marker. A CommonMark parser reads each as the name, in a list item and a paragraph of their own (a table's cells
    take no blocks); the HTML and the console's text show the name as it is."""
    from reports.document import Bullets, Document, Paragraph, Section, Table
    from reports.render import literal, plain, to_html, to_markdown

    markdown_it = pytest.importorskip("markdown_it")
    said = f"{literal(name)}: losses reach 80"
    assert plain(said) == f"{name}: losses reach 80"
    doc = Document("t", "s", [Section("Warnings", [Bullets((said,)), Paragraph(said), Table(("recipe",), ((name,),))])])
    md = markdown_it.MarkdownIt("commonmark").enable("table").render(to_markdown(doc, tmp_path))
    body = md[md.index("<h2>Warnings</h2>") + len("<h2>Warnings</h2>"):]
    tags = re.findall(r"<(\w+)", body)
    assert tags == ["ul", "li", "p", "table", "thead", "tr", "th", "tbody", "tr", "td"], (name, body)
    # (leading spaces included: `literal` sets the first as a character reference, which CommonMark does not strip)
    for tag, text in (("li", f"{name}: losses reach 80"), ("p", f"{name}: losses reach 80"), ("td", name)):
        assert [_text_of(i) for i in re.findall(rf"<{tag}>(.*?)</{tag}>", body, re.S)] == [text], body
    page = to_html(doc)
    page = page[page.index('<section id="warnings">'):]
    assert [_text_of(i) for i in re.findall(r"<li>(.*?)</li>", page)] == [f"{name}: losses reach 80"]
    assert [_text_of(i) for i in re.findall(r"<p>(.*?)</p>", page)] == [f"{name}: losses reach 80"]


def test_a_title_or_table_value_with_leading_spaces_or_line_breaks_is_text_in_report_md(tmp_path):
    """Recipe names cannot begin with spaces (recipe files and tables refuse them), but a title, a value of the
    user's table (a size) and a diagnostics JSON's key can: report.md set a title's second line after four spaces as a
    code block, a size holding a blank line split its provenance line in two paragraphs (the label entered the text
    unescaped), and a key ' listed' as a caption '* listed*' was a list item. `literal` sets a line break as a space and
    a leading or trailing space as a character reference (text, never indentation); the HTML reads them the same."""
    from reports import build

    markdown_it = pytest.importorskip("markdown_it")
    rows = pl.read_csv(ROOT / "reports" / "examples" / "demo" / "results.csv")
    rows.with_columns(size=pl.col("size").replace({"0.5M": "    0.5M\n\n    tail"})).write_csv(tmp_path / "t.csv")
    (tmp_path / "diag.json").write_text(json.dumps({"notes": [{"a": 1}], " listed": [{"b": 2}]}))
    title = "    four spaces\n\n    then a code block"
    build(tmp_path / "t.csv", tmp_path / "r", bootstrap=0, workers=1, title=title, diagnostics=tmp_path / "diag.json")
    md = markdown_it.MarkdownIt("commonmark").enable("table").render((tmp_path / "r" / "report.md").read_text())
    page = (tmp_path / "r" / "index.html").read_text()
    assert "<pre>" not in md and not re.search(r"<(p|td|li)>\s*tail", md), md
    assert md.count("<h1>") == 1 and md.count("<ul>") == page.count("<ul>"), md
    assert "<p><em> listed</em></p>" in md, md

    def one_line(text: str) -> str:  # as a browser shows it
        return " ".join(text.split())

    for rendered in (md, page):
        assert one_line(_text_of(re.search(r"<h1>(.*?)</h1>", rendered, re.S)[1])) == "four spaces then a code block"
        tokens = [one_line(_text_of(p)) for p in re.findall(r"<(?:li|p)>([^<]*Tokens per run, [^<]*)<", rendered)
                  if "1M" not in p]
        assert tokens == ["Tokens per run, 0.5M tail (N = 4.92e+05): 4,096, 8,192, 16,384, 32,768."], tokens
        cells = [one_line(_text_of(c)) for c in re.findall(r"<td[^>]*>([^<]*tail[^<]*)</td>", rendered)]
        assert cells and set(cells) == {"0.5M tail"}, cells
    from reports.render import literal, plain, to_html
    from reports.document import Document, Paragraph, Section

    name = "R&amp;D &#32;x\t"  # character references in a name are its text, not the characters they name
    doc = Document("t", "s", [Section("S", [Paragraph(literal(name))])])
    for rendered in (markdown_it.MarkdownIt("commonmark").render(literal(name)), to_html(doc)):
        assert _text_of(re.findall(r"<p>(.*?)</p>", rendered, re.S)[-1]) == name, rendered
    assert plain(literal(name)) == name


def test_a_name_that_merely_starts_like_a_block_is_left_unescaped_in_report_md():
    """Only a leading block marker is escaped: a name that reads as text where a line begins ('1.5x', '-x', '#x',
    '10^3', 'a - b', '1234567890. x') is left as it is (report.md stays readable as text)."""
    from reports.render import literal

    for name in ("1.5x", "-x", "#x", "+x", "10^3", "a - b", "1234567890. x", "=x"):
        assert literal(name) == name, name


def test_a_reports_fit_warnings_about_recipes_named_like_blocks_are_list_items_in_report_md(tmp_path):
    """A fit warning begins with its recipe's name, a list item in report.md: recipes '# x' and '1. x' were a
    heading inside the list and a list inside the list; the HTML showed them as they are. Read by a CommonMark
    parser, report.md's warnings are the names' as the HTML's are."""
    from reports import build

    markdown_it = pytest.importorskip("markdown_it")
    names = {"mxfp4": "# x", "nvfp4": "1. x"}
    rows = pl.read_csv(external_csv(tmp_path)).with_columns(recipe=pl.col("recipe").replace(names))
    not_nats = pl.col("recipe") != "bf16"  # losses ×20: fits warns of each such recipe, its name first
    rows = rows.with_columns(loss=pl.when(not_nats).then(pl.col("loss") * 20).otherwise(pl.col("loss")))
    rows.write_csv(tmp_path / "t.csv")
    warnings = build(tmp_path / "t.csv", tmp_path / "r", bootstrap=0, workers=1)["warnings"]
    assert sorted(w.split(":")[0] for w in warnings) == sorted(names.values()), warnings
    md = markdown_it.MarkdownIt("commonmark").enable("table").render((tmp_path / "r" / "report.md").read_text())
    page = (tmp_path / "r" / "index.html").read_text()
    for rendered in (md, page):
        listed = re.search(r"Fit warnings</strong> \(read the laws and the verdicts with care\):</p>\s*<ul>(.*?)</ul>",
                           rendered, re.S)
        assert [_text_of(i).strip() for i in re.findall(r"<li>(.*?)</li>", listed[1], re.S)] == warnings, listed[1]
    # (its h2s are the sections')
    assert not re.search(r"<(h[13-6]|ol|blockquote)>", md[md.index("</h1>"):]), "a name set as markup"


def test_a_name_in_a_code_span_is_itself_in_the_html_and_in_report_md(tmp_path):
    """The subtitle's baseline sat in a code span with its markup characters backslash-escaped: report.md showed
    the backslashes (no escapes inside a code span), and a backtick in the name ended the span. `code` fences it
    as CommonMark reads it, and the HTML reads it the same way."""
    import html as html_module
    import re

    from reports.document import Document
    from reports.render import code, literal, to_html, to_markdown

    markdown_it = pytest.importorskip("markdown_it")
    for name in ("bf16", "nv**fp4_x", "a`b", "``c", "d\\*`", " e "):
        subtitle = f"3 runs, recipes {literal(name)}; baseline {code(name)}; law `chinchilla`."
        doc = Document(f"report: {name}", subtitle, [])
        page = to_html(doc)
        md = markdown_it.MarkdownIt("commonmark").render(to_markdown(doc, tmp_path))
        for rendered in (page, md):
            spans = [html_module.unescape(c) for c in re.findall(r"<code>(.*?)</code>", rendered)]
            assert spans == [name, "chinchilla"], (name, spans, rendered)
            assert "<strong>" not in rendered and "<em>" not in rendered
            assert html_module.unescape(re.search(r"<h1>(.*?)</h1>", rendered)[1]).strip() == f"report: {name}".strip()


def test_the_figures_draw_names_with_markup_characters_as_they_are(tmp_path, monkeypatch):
    """matplotlib reads a label holding two '$' as mathtext: a baseline named '$m$' was drawn as an italic m in
    titles and axis labels, and a recipe named '$a_$*c' failed the whole build (a mathtext parse error at savefig);
    a recipe named '_x<y> 50%' was missing from every legend (a leading '_' is matplotlib's mark for 'no label').
    Every figure draws each name as it is, in plain text."""
    import matplotlib.text

    from reports import build, figures

    names = {"bf16": "$m$", "nvfp4": "_x<y> 50%", "mxfp4": "$a_$*c"}
    sweep = make_sweep(tmp_path)
    for path in sweep.glob("*/*.json"):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "recipe": names[record["recipe"]],
                                    "size": "$S_$" if record["size"] == "S" else record["size"]}))
    shown: dict[str, set[str]] = {}
    save = figures._save

    def record_texts(fig, path):  # each text as the renderer draws it: (string, whether it is mathtext)
        texts = [t._preprocess_math(t.get_text()) for t in fig.findobj(matplotlib.text.Text)]
        shown[path.stem] = {s for s, math in texts if not math}
        return save(fig, path)

    monkeypatch.setattr(figures, "_save", record_texts)
    summary = build(sweep, tmp_path / "r", baseline="$m$", bootstrap=0, workers=1)
    verdicts = {r: p["verdict"] for r, p in json.loads((tmp_path / "r" / "fits.json").read_text())["penalty"].items()}
    assert set(verdicts) == {"_x<y> 50%", "$a_$*c"}, summary
    assert set(names.values()) <= shown["loss_vs_compute"], shown["loss_vs_compute"]
    assert {f"{r} ({v})" for r, v in verdicts.items()} <= shown["penalty_vs_compute"], shown["penalty_vs_compute"]
    assert "loss gap vs $m$ (nats/token)" in shown["penalty_vs_compute"]
    assert {"_x<y> 50%", "$a_$*c", "relative loss gap vs $m$ (%)"} <= shown["gap_vs_size"], shown["gap_vs_size"]
    assert set(names.values()) | {"$S_$, 1.2e+09 tokens"} <= shown["validation_curves"], shown["validation_curves"]


def test_versions_hardware_and_a_diagnostics_key_enter_the_report_as_text(tmp_path):
    """A version string, a hardware name (from the result records) or another tool's diagnostics key
    holding Markdown's characters ('*', '_') is set as it is, escaped, not read as emphasis."""
    from reports.build import diagnostic_tables, section_provenance
    from reports.document import Bullets
    from reports.load import load
    from reports.render import plain

    sweep = make_sweep(tmp_path)
    for result in sweep.glob("*/result.json"):
        record = json.loads(result.read_text())
        result.write_text(json.dumps({**record, "versions": {"torch": "2.5*dev"}, "hardware": "_gpu*"}))
    items = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Bullets)).items
    assert r"Versions: torch 2.5\*dev" in items and r"Hardware: \_gpu\*" in items, items
    assert plain(r"Hardware: \_gpu\*") == "Hardware: _gpu*"
    for result in sweep.glob("*/result.json"):  # an older record's versions: one string, set as it is
        result.write_text(json.dumps({**json.loads(result.read_text()), "versions": "torch 2.5"}))
    items = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Bullets)).items
    assert "Versions: torch 2.5" in items, items
    assert diagnostic_tables({"_per*tensor": [{"sqnr_db": 19.4}]}) == [([{"sqnr_db": 19.4}], r"\_per\*tensor")]


def test_a_frontier_outside_the_figures_axes_is_named_with_its_optimum():
    """The demo's mxfp4 law (a small α fitted over two sizes) put its compute-optimal model at ~100
    parameters, its frontier below the figure's losses: its panel had no thick line and nothing said why."""
    import fits
    from fits.synthetic import EPOCH
    from reports import figures

    sizes, ratios = (5e5, 1e6, 2e6), (8, 16, 32)
    runs = pl.DataFrame([{"recipe": "bf16", "N": n, "C": 6 * n * n * r} for n in sizes for r in ratios])
    runs = runs.with_columns(loss=pl.Series([float(fits.predict(EPOCH, n, n * r)) for n in sizes for r in ratios]))
    flat = {**EPOCH, "A": 3.7, "alpha": 0.063, "E": 0.586}  # the demo's mxfp4 law, roughly
    off = figures.frontiers_off_axes(runs, {"bf16": EPOCH, "mxfp4": flat})
    assert set(off) == {"mxfp4"}  # bf16's own frontier crosses its runs' losses
    n_opt, loss_opt = off["mxfp4"]
    c_mid = math.sqrt(runs["C"].min() * runs["C"].max())
    assert (n_opt, loss_opt) == pytest.approx(tuple(float(v) for v in fits.compute_optimal(flat, c_mid)[::2]))
    assert n_opt < 5e5 and loss_opt < runs["loss"].min()


def test_a_law_the_runs_do_not_identify_has_no_frontier_nor_printed_optimum_or_parameters(tmp_path, monkeypatch):
    """The demo's caption said mxfp4's frontier lay outside the axes at N ≈ 114: the optimum of a law its two
    model sizes do not identify (A, α and E trade off along a line of equally good fits), which the same runs in
    another row order put at 2.8e4. Such a law's frontier is neither drawn nor named, nor are the parameters
    it cannot pin printed; a law that three sizes pin keeps its frontier and its numbers."""
    import fits
    from fits.synthetic import synthetic_table
    from reports import figures
    from reports.build import section_loss_vs_compute
    from reports.load import Study

    drawn: dict = {}
    real = figures.loss_vs_compute
    monkeypatch.setattr(figures, "loss_vs_compute", lambda *a, **k: drawn.update(k) or real(*a, **k))
    table = pl.concat([synthetic_table({"bf16": {}}, sizes=(1e7, 1e8, 1e9), ratios=(5, 10, 20, 40), noise=0.003),
                       synthetic_table({"mxfp4": {}}, sizes=(1e7, 1e9), ratios=(5, 10, 20, 40), noise=0.003)])
    fitted = {"law": "chinchilla", "bootstrap": 0, "skipped": {}, "groups": fits.fit_law(table, top=10)}
    runs = table.with_columns(C=6 * pl.col("N") * pl.col("D"), status=pl.lit("completed"))
    section = section_loss_vs_compute(Study(source=Path("t.csv"), runs=runs), fitted, "bf16",
                                      figures.recipe_styles(["bf16", "mxfp4"], "bf16"), tmp_path)
    caption = section.blocks[0].caption
    assert drawn["no_frontier"] == {"mxfp4"}
    assert ("thick line: its compute-optimal frontier; dashed: bf16's frontier. No compute-optimal frontier is drawn "
            "for mxfp4: these runs do not identify their laws (mxfp4: A, E, alpha; see the fit warnings)") in caption
    assert "N ≈" not in caption
    params = section.blocks[1]
    rows = {row[0]: dict(zip(params.columns, row)) for row in params.rows}
    assert [k for k, v in rows["mxfp4"].items() if v == "not identified"] == ["A", "E", "alpha"]
    assert "not identified" not in rows["bf16"].values()
    assert "not identified: a parameter these runs do not pin" in params.caption


def test_a_penalty_the_runs_do_not_identify_is_said_in_words_not_printed_as_an_interval(tmp_path, capsys):
    """The demo's real runs (two model sizes, reports/examples/demo/results.csv) do not identify bf16's law, along
    whose frontier every penalty is read: the example report printed mxfp4's multiplier as 0.954x [1.50e-19,
    6.58e+110] and kappaN's interval as [-0.9, 5] (its bounds), float noise as estimates, beside a verdict
    sentence built on them. The report now says, per recipe, that these runs do not identify the penalty and what
    would, prints no number for it in the verdict or the tables, draws no penalty figure, and claims neither
    growth nor its absence. The table of what decides the verdict, and the terminal's, showed its likelihood-ratio p
    (0.96) beside that sentence, a p-value whose chi-square reference does not hold with parameters at their bounds:
    they read "not identified" too."""
    import html as html_lib
    import re

    from reports import build
    from scaling.commands.report import print_summary

    demo = ROOT / "reports" / "examples" / "demo" / "results.csv"
    summary = build(demo, tmp_path / "r", bootstrap=8, workers=1)
    md = (tmp_path / "r" / "report.md").read_text()
    verdict = md[md.index("## Verdict"):md.index("## Loss vs compute")]
    for recipe in ("mxfp4", "nvfp4"):
        sentence = summary["verdicts"][recipe]["sentence"]
        assert sentence.startswith(f"{recipe}: the penalty against bf16 is not identified by these runs: (1) bf16's law, "
                                   "along whose compute-optimal frontier every multiplier is read: A, B and alpha are not "
                                   "identified by its 2 model sizes and 4 token counts"), sentence
        assert "more bf16 model sizes and token counts per size would pin them" in sentence, sentence
        assert sentence.endswith("whether the penalty grows with compute is not claimed either way (verdict: "
                                 "inconclusive)."), sentence
        assert not re.search(r"\bgrows\*\* with|does not grow\*\*|×", verdict), verdict
    assert "multiplier changes by" not in verdict and "e-1" not in verdict and "e+1" not in verdict, verdict
    # bf16's law: the verdict names A, B and alpha, the fit warnings and the figure's caption A, B, E and alpha; E is
    # said where the lists differ, and why the penalty does not count it
    assert verdict.count("fit as well (so is E, but it cancels from the multiplier and the gap)") == 2, verdict
    # the efficiency table: no number for an efficiency these runs do not identify (it printed mxfp4's effN 1.005
    # [0.038, 4499] and nvfp4's 0.9994 [0.09273, 1.19e+13]); the fit warnings say why
    efficiency = md[md.index("## Parameter and data efficiency"):].split("\n## ")[0]
    rows = [line for line in efficiency.splitlines() if line.startswith(("| mxfp4", "| nvfp4"))]
    assert len(rows) == 2 and all(row.count("not identified") == 9 for row in rows), rows
    assert all(f"- {r}: its efficiencies effN_const, effD_const" in md for r in ("mxfp4", "nvfp4"))
    penalty = md[md.index("## Penalty vs compute"):md.index("## Relative loss gap")]
    assert "No figure: these runs identify no recipe's penalty against bf16" in penalty
    rows = [line for line in penalty.splitlines() if line.startswith(("| mxfp4", "| nvfp4"))]
    # (the verdict's table: no p or Holm-adjusted p either, where the likelihood-ratio test's chi-square does not hold)
    assert len(rows) == 8 and all(row.count("not identified") in (4, 8) for row in rows), rows
    assert "Its p is not given either" in penalty
    assert not (tmp_path / "r" / "figures" / "penalty_vs_compute.png").exists()
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", (tmp_path / "r" / "index.html").read_text()))
    assert all(summary["verdicts"][r]["sentence"] in text for r in ("mxfp4", "nvfp4"))
    print_summary(summary)  # the terminal (`scaling report`, `scaling demo`): a short line each, the report in full
    lines = capsys.readouterr().out.splitlines()
    for recipe in ("mxfp4", "nvfp4"):
        row = next(line for line in lines if line.lstrip("│ ").startswith(recipe) and "inconclusive" in line)
        assert row.count("not identified") == 2 and not re.search(r"\d", row.split(recipe, 1)[1]), row  # no p
        assert summary["verdicts"][recipe]["p_value"] is not None  # (the summary, as fits.json, keeps the number)
        assert (f"  {recipe}: not identified by these runs (bf16's law: A, B and alpha not pinned; {recipe}'s "
                "efficiencies: ") in "\n".join(lines) and summary["verdicts"][recipe]["sentence"] not in lines
    warned = [line for line in lines if line.startswith("  warning: ")]
    assert len(warned) == 3 and all(len(line) < 250 for line in warned), warned
    fitted = json.loads((tmp_path / "r" / "fits.json").read_text())  # the keys as before, and what is not pinned
    for pen in fitted["penalty"].values():
        assert {"verdict", "multiplier", "gap", "ratio_per_decade", "kappaN", "kappaD", "undecidable"} <= set(pen)
        assert pen["identified"] is False and len(pen["unidentified"]) == 2


def test_provenance_names_every_commit_a_resumed_run_trained_under(tmp_path):
    """A run preempted under one commit and resumed under another lists both in its record's git_commits; the
    report named its git_commit (the last process's) alone, as if one version of the code had trained it."""
    from reports.build import section_provenance
    from reports.document import Bullets
    from reports.load import load

    sweep = make_sweep(tmp_path)
    path = sweep / "bf16-S-200M" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "git_commits": ["0ld1234", "abc1234"]}))
    items = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Bullets)).items
    line = next(i for i in items if i.startswith("Git commit"))
    assert "0ld1234" in line and "abc1234" in line and "(1 run trained under more than one)" in line, line


def test_provenance_names_every_device_and_versions_a_resumed_run_trained_on(tmp_path):
    """A run requeued onto another kind of node, or resumed under another torch, records each process
    (`processes`); the report named the last process's device and versions alone."""
    from reports.build import section_provenance
    from reports.document import Bullets
    from reports.load import load

    sweep = make_sweep(tmp_path)
    path = sweep / "bf16-S-200M" / "result.json"
    record = json.loads(path.read_text())
    first = {"git_commit": "abc1234", "device": "NVIDIA A100-SXM4-80GB", "versions": {"torch": "2.11.0"}}
    last = {"git_commit": "abc1234", "device": "NVIDIA H100 80GB HBM3", "versions": {"torch": "2.13.0"}}
    path.write_text(json.dumps({**record, "device": last["device"], "versions": last["versions"],
                                "processes": [first, last]}))
    items = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Bullets)).items
    hardware = next(i for i in items if i.startswith("Hardware"))
    assert "A100" in hardware and "H100" in hardware, hardware
    versions = [i for i in items if i.startswith("Versions")]
    assert any("2.11.0" in v for v in versions) and any("2.13.0" in v for v in versions), versions


def test_a_report_shows_the_shared_efficiencies_when_its_fits_carry_them(tmp_path):
    """`scaling report --shared-efficiencies`: the fits read a table's own forward_format and backward_format columns
    (the report's runs keep them) and the report shows a "Shared efficiencies" section; without the option, none."""
    from fits.synthetic import synthetic_table
    from reports import build

    formats = {"bf16": ("bf16", "bf16"), "fp4a": ("FP4 | fwd", "FP4 bwd"), "fp4b": ("FP4 | fwd", "FP4 SR bwd")}
    t = synthetic_table({"bf16": {}, "fp4a": {"effN": 0.7, "effD": 0.9}, "fp4b": {"effN": 0.7, "effD": 0.95}},
                        sizes=np.geomspace(2e7, 2e9, 4), ratios=(5, 20, 80))
    t = t.with_columns(forward_format=pl.col("recipe").replace_strict({r: f for r, (f, _) in formats.items()}),
                       backward_format=pl.col("recipe").replace_strict({r: b for r, (_, b) in formats.items()}))
    csv = tmp_path / "results.csv"
    t.write_csv(csv)
    build(csv, tmp_path / "plain", law="quartet", bootstrap=4, workers=1)
    assert "Shared efficiencies" not in (tmp_path / "plain" / "report.md").read_text()
    build(csv, tmp_path / "shared", law="quartet", bootstrap=4, workers=1, shared_efficiencies=True)
    md = (tmp_path / "shared" / "report.md").read_text()
    fitted = json.loads((tmp_path / "shared" / "fits.json").read_text())["shared_efficiencies"]
    assert "## Shared efficiencies (Quartet v1)" in md
    effN = fitted["forward"]["FP4 | fwd"]["effN"]
    # the format's '|' escaped once in the Markdown table, as any cell's
    assert f"| effN | FP4 \\| fwd | {effN:.4g} |" in md, md
    assert "| fp4a |" in md
    assert "for the shared fit (3 parameters), against" in md
    assert "Shared efficiencies (Quartet v1)" in (tmp_path / "shared" / "index.html").read_text()


def test_the_shared_efficiencies_section_says_a_cause_of_several_formats_once(tmp_path):
    """Two sizes leave the baseline law's A and alpha unpinned: the cause, one sentence, is one bullet, not one per
    forward format that it leaves unpinned."""
    from fits.synthetic import synthetic_table
    from reports import build

    csv = tmp_path / "results.csv"
    synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7}, "nvfp4": {"effN": 0.8}}, sizes=[1e8, 1e9],
                    ratios=(5, 10, 20, 40, 80)).write_csv(csv)
    build(csv, tmp_path / "r", bootstrap=0, workers=1, shared_efficiencies=True)
    md = (tmp_path / "r" / "report.md").read_text()
    section = md[md.index("## Shared efficiencies"):].split("\n## ")[0]  # (each recipe's fit warning says its own)
    bullets = [line for line in section.splitlines() if line.startswith("- ") and "does not pin A" in line]
    assert len(bullets) == 1, bullets


def test_the_shared_efficiencies_section_without_a_bootstrap_has_no_interval_columns(tmp_path):
    """With --bootstrap 0 there is no interval: the shared-efficiencies tables leave their interval columns out, the
    paired own/shared one too (it read '[—, —]' on every checked row), as every table of the report does."""
    from fits.synthetic import synthetic_table
    from reports import build

    csv = tmp_path / "results.csv"
    synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.7, "effD": 0.9}, "mxfp4_sr": {"effN": 0.7, "effD": 0.95}},
                    sizes=np.geomspace(2e7, 2e9, 4), ratios=(5, 20, 80)).write_csv(csv)
    build(csv, tmp_path / "r", law="quartet", bootstrap=0, workers=1, shared_efficiencies=True)
    md = (tmp_path / "r" / "report.md").read_text()
    section = md[md.index("## Shared efficiencies"):].split("\n## ")[0]
    assert "| mxfp4 |" in section and "consistent (p " in section
    assert "95% CI" not in section and "[—, —]" not in section, section


def test_a_tables_number_is_in_scientific_notation_only_outside_its_documented_range():
    """fmt's rule is scientific outside [1e-3, 1e6), but '.4g' went scientific from 1e4: the demo's token column read
    4096, 8192, 1.638e+04, 3.277e+04 (16,384 rounded to 16,380) and N 4.915e+05, while the provenance beside it said
    16,384 (visual audit). Floats from 1e4 to 1e6 are whole numbers, without a thousands comma (an interval's cells
    are comma-separated)."""
    from reports.render import fmt

    assert [fmt(v) for v in (4096.0, 16384.0, 32768.0, 491520.0, 999999.4)] == ["4096", "16384", "32768", "491520",
                                                                               "999999"]
    assert [fmt(v) for v in (-12747.6, 1234.5, 0.001234, 1e6, 2.5e-4, 3)] == ["-12748", "1234", "0.001234", "1e+06",
                                                                            "0.00025", "3"]
    assert fmt(16384) == "16,384"  # an int keeps its comma, as before


def _wide_table_page() -> str:
    """A report page holding one table wider than a phone: twelve numeric columns, intervals and a long note."""
    from reports.document import Document, Paragraph, Section, Table
    from reports.render import to_html

    columns = ("recipe", "verdict", *(f"column {i}" for i in range(10)), "95% CI", "note")
    rows = tuple((f"nvfp4_variant_{r}", "does not grow", *(12345.678 * (i + 1) for i in range(10)),
                  f"0.{r}1 [0.{r}0, 0.{r}2]", "not reached within 3.28e+04 tokens; its longer run diverged at step 7")
                 for r in range(1, 4))
    table = Table(columns, rows, caption="A caption long enough to need several lines on a phone " * 3)
    return to_html(Document("t", "", [Section("s", [Paragraph("Some text."), table])]))


PAGE_WIDTH_PROBE = """<script>
window.addEventListener("load", function () {
  var pre = document.createElement("pre");
  pre.id = "width";
  pre.textContent = "page " + document.documentElement.scrollWidth + " of " + window.innerWidth;
  document.body.appendChild(pre);
});
</script>"""


def test_a_wide_table_scrolls_in_its_own_box_and_the_page_never_sideways(tmp_path):
    """A table wider than the screen widened the whole page: on a phone every paragraph had to be scrolled sideways,
    and a long table caption, set inside the table, was as wide as the table (visual audit, 390 px screenshots). The
    table scrolls in a box of its own, its caption above the box."""
    page = _wide_table_page()
    assert re.search(r'<figure class="table"><figcaption>A caption[^<]*</figcaption><div class="scroll"><table ', page)
    # (headless Chromium's narrowest window is 500 px: a phone's 390 px is narrower still)
    dom = probed_dom(page, PAGE_WIDTH_PROBE, tmp_path, "--window-size=500,900")
    found = re.search(r'<pre id="width">page (\d+) of (\d+)</pre>', dom)
    assert found, dom[-500:]
    assert int(found[1]) <= int(found[2]), found[0]


NAV_SPLIT_PROBE = """<script>
window.addEventListener("load", function () {
  // the contents list at every width a phone or a narrow window gives it: an entry whose lines lie in two columns
  var nav = document.querySelector("nav"), split = [];
  for (var w = 240; w <= 700; w++) {
    nav.style.width = w + "px";
    nav.querySelectorAll("li").forEach(function (li) {
      var lefts = Array.prototype.map.call(li.getClientRects(), function (r) { return Math.round(r.left); });
      if (new Set(lefts).size > 1) split.push(w + ": " + li.textContent);
    });
  }
  var pre = document.createElement("pre");
  pre.id = "split";
  pre.textContent = "split " + split.length + " " + split.slice(0, 3).join(" | ");
  document.body.appendChild(pre);
});
</script>"""


def test_no_entry_of_the_contents_list_is_split_across_its_two_columns(tmp_path):
    """At a phone's width the contents list's two columns split "Token overhead to reach the baseline's loss", its
    last line at the top of the second column (visual audit, 390 px). Each entry stays whole in one column at every
    width from 240 to 700 px."""
    from reports.document import Document, Paragraph, Section
    from reports.render import to_html

    titles = ("Verdict", "Loss vs compute", "Penalty vs compute", "Relative loss gap per model size",
              "Token overhead to reach the baseline's loss", "Parameter and data efficiency (effN, effD)",
              "Quantization diagnostics", "Diverged and failed runs", "Provenance")  # the report's sections
    page = to_html(Document("t", "", [Section(t, [Paragraph("Text.")]) for t in titles]))
    dom = probed_dom(page, NAV_SPLIT_PROBE, tmp_path, "--window-size=800,900")
    found = re.search(r'<pre id="split">split (\d+)(.*)</pre>', dom)
    assert found, dom[-500:]
    assert found[1] == "0", found[0]


def _wide_figure_page(tmp_path: Path) -> str:
    """A report page holding one figure as wide as the three-panel loss figure (1068 x 309 px in the demo)."""
    from PIL import Image, ImageDraw

    from reports.document import Document, Figure, Section
    from reports.render import to_html

    png = tmp_path / "figures" / "wide.png"
    png.parent.mkdir()
    image = Image.new("RGB", (1068, 309), "white")
    ImageDraw.Draw(image).line([(0, 300), (1067, 0)], fill="black", width=3)
    image.save(png)
    return to_html(Document("t", "", [Section("s", [Figure(png, "A caption.")])]))


FIGURE_WIDTH_PROBE = """<script>
window.addEventListener("load", function () {
  var img = document.querySelector("figure img"), box = img.parentNode;
  var pre = document.createElement("pre");
  pre.id = "figure";
  pre.textContent = "img " + Math.round(img.getBoundingClientRect().width) + " box " + box.clientWidth + " scrolls "
    + box.scrollWidth + " page " + document.documentElement.scrollWidth + " of " + window.innerWidth;
  document.body.appendChild(pre);
});
</script>"""


def test_a_figure_keeps_a_readable_width_on_a_phone_in_a_box_of_its_own(tmp_path):
    """Fitted to a 390 px phone, the three-panel loss figure (1068 px) was ~350 px wide, its tick labels 4-5 px tall
    (visual audit). On a narrow screen a figure is shrunk to no less than 70% of its pixel width and scrolls sideways in
    a box of its own, the page not; on a desktop it fits the page as before, and print (no min-width there) as before."""
    page = _wide_figure_page(tmp_path)
    html_ok = re.search(r'<figure><div class="scroll"><img alt="wide" style="--width: 1068px" src="data:image/png;base64,'
                        r'[^"]+"></div><figcaption>A caption\.</figcaption></figure>', page)
    css = re.search(r"<style>(.*?)</style>", page, re.S)[1]
    css_ok = re.search(r"@media screen \{ figure img \{ min-width: calc\(var\(--width\) \* 0\.7\); \} \}", css)
    found = {}
    for window in (500, 1400):  # (headless Chromium's narrowest window is 500 px; a phone's 390 px is narrower)
        dom = probed_dom(page, FIGURE_WIDTH_PROBE, tmp_path, f"--window-size={window},900")
        m = re.search(r'<pre id="figure">img (\d+) box (\d+) scrolls (\d+) page (\d+) of (\d+)</pre>', dom)
        assert m, dom[-500:]
        found[window] = [int(v) for v in m.groups()]
    img, box, scrolls, page_width, window = found[500]
    assert img >= 0.7 * 1068 - 1 and box < img <= scrolls, found  # readable, in a box that scrolls
    assert page_width <= window, found  # the page itself never sideways
    img, box, scrolls, page_width, window = found[1400]
    assert img == box == scrolls < 1068 and page_width <= window, found  # the desktop's page width, as before
    assert html_ok and css_ok


def test_a_tables_text_columns_are_set_left_and_an_interval_breaks_only_before_its_bracket():
    """Every cell but the first column's was set right, so a verdict ('does not grow') or a note stood ragged at the
    right edge of a narrow column, one word a line, and an interval cell wrapped at every space ('[0.9257,' over
    '1.056]'). Text columns are set left; a long note gets room; numbers stay on one line; an estimate with its
    interval breaks only before the bracket."""
    page = _wide_table_page()
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", page)[1]
    assert re.findall(r"<th([^>]*)>", head) == [' class="text"', ' class="text"', *[""] * 11, ' class="text long"']
    row = re.search(r"<tbody><tr>(.*?)</tr>", page)[1]
    assert '<td class="text">does not grow</td>' in row
    assert '<td class="ci">0.11 <span>[0.10, 0.12]</span></td>' in row
    assert '<td data-sort="12345.678">12346</td>' in row
    css = re.search(r"<style>(.*?)</style>", page, re.S)[1]
    assert re.search(r"th\.text, td\.text \{ text-align: left; \}", css)
    assert re.search(r"td\.ci span \{ white-space: nowrap; \}", css) and re.search(r"th, td \{[^}]*white-space: nowrap", css)


LONG_RECIPES = ["nvfp4_rht16_stochastic_rounding_backward", "mxfp4_e8m0_scales_quartet_ii_forward",
                "nvfp4_tensorwise_fp32_second_level_scale", "mxfp4_plain", "nvfp4_4over6_adaptive_block_scaling",
                "mxfp4_rht32_all_gemms", "nvfp4_sr_wgrad_only_and_more", "fp8_e4m3_reference_recipe_long",
                "nvfp4_random_hadamard_on_dgrad"]


def _flat_bands(recipes: list[str]) -> dict:
    """penalty_vs_compute's bands for `recipes`: a flat multiplier and gap of 0.9 in [0.8, 1.0] over 30 computes, the
    first 10 in the data."""
    c = np.geomspace(1e16, 1e19, 30)
    band = {"value": [0.9] * 30, "lo": [0.8] * 30, "hi": [1.0] * 30}
    return {r: {"C": c.tolist(), "in_data": [True] * 10 + [False] * 20, "multiplier": band, "gap": band} for r in recipes}


def _drawn(monkeypatch, draw):
    """The figure `draw(path)` makes, drawn, instead of saved."""
    from reports import figures

    kept = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: kept.setdefault("fig", fig))
    draw(Path("unused.png"))
    kept["fig"].canvas.draw()
    return kept["fig"]


def _assert_legend_outside_the_plots_and_within_the_figure(fig) -> None:
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    # the saved PNG is cut to its contents: a legend wider than the figure widened it, and shrank the panels
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
    for ax in fig.axes:
        if ax.get_visible():
            assert not box.overlaps(ax.get_window_extent(renderer)), "the legend covers a plot"


@pytest.mark.parametrize("n", [2, 9])
def test_the_legends_of_many_long_recipe_names_lie_outside_the_plots_and_within_the_figure(monkeypatch, n):
    """With nine recipes of long names the gap figure's legend ("best" place in the panel) covered its points, and
    the penalty figure's, four columns below the panels, was wider than both panels together: the PNG, cut to its
    contents, came out 1617 px wide for 1056 px of panels, and the page shrank it all (visual audit)."""
    from reports import figures

    recipes = LONG_RECIPES[:n]
    styles = figures.recipe_styles(["bf16", *recipes], "bf16")
    sizes = [2e6, 5e6, 1.2e7, 3e7]
    gaps = pl.DataFrame([{"recipe": r, "N": N, "D": 1e9, "gap_pct": 1.0 + i + 0.1 * j}
                         for i, r in enumerate(recipes) for j, N in enumerate(sizes)])
    by_size = gaps.rename({"gap_pct": "mean_gap_pct"})
    fig = _drawn(monkeypatch, lambda path: figures.gap_vs_size(gaps, by_size, styles, "bf16", path))
    _assert_legend_outside_the_plots_and_within_the_figure(fig)

    c = np.geomspace(1e16, 1e19, 30)
    bands = {}
    for i, r in enumerate(recipes):
        value = np.full(30, 0.9 - 0.05 * i)
        band = {"value": value.tolist(), "lo": (value * 0.9).tolist(), "hi": (value * 1.1).tolist()}
        bands[r] = {"C": c.tolist(), "in_data": [True] * 10 + [False] * 20, "multiplier": band, "gap": band}
    fig = _drawn(monkeypatch, lambda path: figures.penalty_vs_compute(
        bands, {r: {"verdict": "does not grow"} for r in recipes}, styles, "bf16", path))
    _assert_legend_outside_the_plots_and_within_the_figure(fig)


def _loss_figure(monkeypatch, recipes: list[str]):
    """loss_vs_compute drawn for `recipes` (the first the baseline), each with runs at two sizes, no laws."""
    from reports import figures

    runs = pl.DataFrame([{"recipe": r, "N": N, "D": D, "C": 6 * N * D, "loss": law_loss(N, D)}
                         for r in recipes for N in (2e6, 5e6) for D in (2e8, 1e9)])
    styles = figures.recipe_styles(recipes, recipes[0])
    return _drawn(monkeypatch, lambda path: figures.loss_vs_compute(runs, {}, recipes[0], styles, path))


@pytest.mark.parametrize("n", [2, 4, 5, 7, 10])
def test_every_column_of_loss_panels_has_its_compute_axis_labelled(monkeypatch, n):
    """The panels share their compute axis, labelled on the bottom row only: with ten recipes (three columns, one panel
    in the last row) the second and third columns had no compute tick labels at all (visual audit)."""
    fig = _loss_figure(monkeypatch, ["bf16", *(f"r{i}" for i in range(n - 1))])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    columns = {}
    for ax in shown:  # the lowest panel of each column
        x = round(ax.get_position().x0, 3)
        columns[x] = min(columns.get(x, ax), ax, key=lambda a: a.get_position().y0)
    assert len(columns) == min(n, 3)
    for ax in columns.values():
        labels = [t.label1 for t in ax.xaxis.get_major_ticks() if t.label1.get_visible() and t.label1.get_text()]
        assert labels, f"a column of panels without compute tick labels ({n} recipes)"


@pytest.mark.parametrize("names", [
    LONG_RECIPES,
    ["bf16", "nvfp4 with random hadamard transforms on every backward gemm and stochastic rounding", "a" * 70,
     "mxfp4-e8m0/rht32+sr.v2-all-gemms-and-more-words"],
])
def test_long_recipe_names_as_panel_titles_never_run_over_each_other(monkeypatch, names):
    """A recipe's name was its panel's title on one line: one longer than the panel ran over its neighbours' titles
    (visual audit: 40 characters filled a panel). It is wrapped to the panel's width, and every panel keeps it whole."""
    fig = _loss_figure(monkeypatch, ["bf16", *names] if names[0] != "bf16" else names)
    renderer = fig.canvas.get_renderer()
    titles = [ax.title for ax in fig.axes if ax.get_visible()]
    boxes = [t.get_window_extent(renderer) for t in titles]
    for i, a in enumerate(boxes):
        assert a.x0 >= 0 and a.x1 <= fig.bbox.width, titles[i].get_text()
        for j, b in enumerate(boxes[:i]):
            assert not a.overlaps(b), (titles[j].get_text(), titles[i].get_text())
    shown = "".join(t.get_text().replace("\n", "") for t in titles)
    assert all(name.replace(" ", "") in shown.replace(" ", "") for name in names)  # (a break drops the space it was at)


# Machado, Oliveira and Fernandes (2009): linear-RGB matrices simulating full dichromacy
DICHROMACY = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def _lab(hex_colors: list[str], vision: tuple | None) -> np.ndarray:
    """CIELAB (D65) of sRGB colours, as seen with `vision` (a DICHROMACY matrix; None: normal vision)."""
    from matplotlib.colors import to_rgb

    rgb = np.array([to_rgb(c) for c in hex_colors])
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    if vision is not None:
        linear = np.clip(linear @ np.array(vision).T, 0, 1)
    xyz = linear @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))
    f = np.where(f > 6 / 29, f, (xyz / np.array([0.95047, 1.0, 1.08883])) / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


@pytest.mark.parametrize("n", range(1, 10))
def test_up_to_nine_recipes_colours_are_told_apart_with_each_colour_vision_deficiency(n):
    """The recipes' colours were tab10's: with protanopia its orange and green (the 2nd and 3rd recipes, so any study of
    three FP4 recipes) differ by 4.6 CIELAB units, about as far as two shades of one colour, and with deuteranopia five
    recipes had two 7 units apart (visual audit). Every pair of up to nine recipes and the black baseline differ by 15
    units or more with normal vision and with each of the three dichromacies; up to seven, 30 or more from white."""
    from reports.figures import recipe_colors

    colors = list(recipe_colors(["bf16", *(f"r{i}" for i in range(n))], "bf16").values())
    for vision in (None, *DICHROMACY.values()):
        lab = _lab(colors, vision)
        distance = np.linalg.norm(lab[:, None] - lab[None], axis=2)
        assert distance[np.triu_indices(len(colors), 1)].min() >= 15, (n, vision)
        if n <= 7:  # and, but for a crowd of recipes, none is pale on the white page (their bands are 15% of it)
            assert np.linalg.norm(lab - _lab(["#ffffff"], vision), axis=1).min() >= 30, (n, vision)


def test_provenance_says_what_each_recipe_quantizes_a_recipe_file_of_the_users_too(tmp_path):
    """A study of the user's own recipe (`mx8`, a recipe file) named it in every section without ever saying what it
    is: the reader of a report had to find the file. Provenance now has a table of each recipe's forward and backward
    formats, as the runs recorded them (collect's forward_format and backward_format: from each run folder's recipe.toml
    copy, else the preset), and the recipe file it came from."""
    from reports.build import section_provenance
    from reports.document import Table
    from reports.load import load
    from scaling.recipes import Recipe, get_recipe

    sweep = make_sweep(tmp_path)
    source = tmp_path / "mx8.toml"
    source.write_text('name = "mx8"\nbase = "nvfp4"\n[fprop.x]\nblock = [1, 8]\nscale = "e8m0"\ntensor_scale = false\n')
    for size, N in SIZES.items():
        for D in BUDGETS:
            run_id = f"mx8-{size}-{int(D / 1e6)}M"
            write_run(sweep, run_id, "mx8", size, D, law_loss(N, D, 0.8, 0.9), "completed",
                      [(D / 2, law_loss(N, D / 2, 0.8, 0.9)), (D, law_loss(N, D, 0.8, 0.9))], recipe_file=str(source))
            (sweep / run_id / "recipe.toml").write_text(source.read_text())
    source.write_text('name = "mx8"\nbase = "bf16"\n')  # edited after the runs: the report shows what they trained

    table = next(b for b in section_provenance(load(sweep), None).blocks if isinstance(b, Table))
    rows = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    assert set(rows) == {"bf16", "nvfp4", "mxfp4", "mx8"}
    trained = Recipe.from_toml(sweep / "mx8-S-200M" / "recipe.toml")
    assert trained.forward_format.startswith("x: MX e2m1 1x8 e8m0")
    assert rows["mx8"]["forward (fprop)"] == trained.forward_format
    assert rows["mx8"]["backward (dgrad; wgrad)"] == trained.backward_format
    assert str(source) in rows["mx8"]["defined by"]
    assert rows["nvfp4"]["forward (fprop)"] == get_recipe("nvfp4").forward_format
    assert rows["nvfp4"]["defined by"] == "preset"
    assert rows["bf16"]["forward (fprop)"] == "bf16"


def test_provenance_has_no_recipe_table_for_an_external_table(tmp_path):
    """External results name recipes the report cannot look up (a name is no definition): no table of them."""
    from reports.build import section_provenance
    from reports.document import Table
    from reports.load import load

    assert not [b for b in section_provenance(load(external_csv(tmp_path)), None).blocks if isinstance(b, Table)]


def test_the_diagnostics_section_says_what_each_format_is_and_where_it_comes_from(tmp_path):
    """`scaling diagnose --formats nvfp4,e2m1_1x8_e8m0.toml` measures a user's own format beside the named ones, and
    its JSON says what each is (`describe`) and where it came from (`source`): the report's diagnostics section showed
    the format's name alone (its `formats` is no list of records), so a reader could not tell what was measured."""
    from reports.build import diagnostic_tables
    from scaling.diagnostics import run_diagnostics

    (tmp_path / "e2m1_1x8_e8m0.toml").write_text('base = "mxfp4"\nblock = [1, 8]\n')
    diag = run_diagnostics(formats=("nvfp4", str(tmp_path / "e2m1_1x8_e8m0.toml"), "mxfp4:wgrad.dy"),
                           transforms=("none",), size=(64, 64), gemm=False)
    diag = json.loads(json.dumps(diag))  # as the report reads it: the JSON file `diagnose --json` writes
    records, caption = diagnostic_tables(diag)[0]
    assert records == [{"format": "nvfp4", "describe": "NV e2m1 1x16 e4m3+fp32", "source": "built-in"},
                       {"format": "e2m1_1x8_e8m0", "describe": "MX e2m1 1x8 e8m0",
                        "source": str(tmp_path / "e2m1_1x8_e8m0.toml")},
                       {"format": "mxfp4:wgrad.dy", "describe": "MX e2m1 1x32 e8m0", "source": "mxfp4:wgrad.dy"}]
    assert "format file" in caption
    older = {k: v for k, v in diag.items() if k != "formats"}  # a JSON without `formats`: its tables as before
    assert [c for _, c in diagnostic_tables(older)] == [c for _, c in diagnostic_tables(diag)[1:]]


def test_docs_reports_md_names_every_option_of_scaling_report_and_of_reports_build():
    """docs/reports.md's Options and its `reports.build(...)` line left out --shared-efficiencies (newcomer audit):
    a user reading them could not find the shared-efficiency section's switch."""
    import argparse
    import inspect

    from scaling.cli import build_parser

    doc = (ROOT / "docs" / "reports.md").read_text()
    verbs = next(a for a in build_parser(["report"])._actions if isinstance(a, argparse._SubParsersAction))
    options = [o for a in verbs.choices["report"]._actions for o in a.option_strings
               if o.startswith("--") and o not in ("--help", "--out")]  # (--out: in every example above them)
    listed = doc.split("\nOptions: ", 1)[1].split("\nIt writes", 1)[0]  # (the paragraph that lists them)
    assert [o for o in options if f"`{o}" not in listed] == []
    from reports import build

    documented = doc.split("Python: `reports.build(", 1)[1].split("`", 1)[0]  # (the signature, across its lines)
    assert [p for p in inspect.signature(build).parameters if f"{p}" not in documented] == []


def test_docs_reports_md_quotes_the_committed_demo_examples_multiplier_ranges():
    """docs/reports.md says how far the committed demo example's bootstrap multipliers reach, as the example's
    report.md prints them: it gave nvfp4's range as if it were both recipes' (mxfp4's reaches 0 to 3.74e+121)."""
    doc = " ".join((ROOT / "docs" / "reports.md").read_text().split())
    example = (ROOT / "reports" / "examples" / "demo" / "report.md").read_text()
    reach = dict(re.findall(r"^- \*\*(\w+)\*\*: .*?the bootstrap intervals of the multiplier reach (\S+ to \S+),", example,
                            re.M))
    assert reach and set(reach) <= {"mxfp4", "nvfp4"}, reach  # (each recipe whose Verdict gives this reason)
    for recipe, span in reach.items():
        low, high = (float(x) for x in span.split(" to "))
        quoted = f"{low:.2g} to {high:.2g}"
        assert f"reach {quoted} ({recipe}" in doc or f"and {quoted} ({recipe}" in doc, (recipe, quoted)


@pytest.mark.parametrize("paired", [True, False])
def test_the_verdict_says_how_the_bootstrap_drew_the_recipes_runs(paired):
    """A sweep's twin runs (one N, D and seed in each recipe) are drawn together by the bootstrap (docs/fits.md,
    Bootstrap), yet the Verdict said every report's replicates drew "each recipe's apart": the report tests' own sweep,
    seed 0 in every run, read so. It now says what the fit did: twins together where the table has them, else apart."""
    import fits
    from fits.synthetic import synthetic_table
    from reports.build import section_verdict
    from reports.load import Study

    table = synthetic_table({"bf16": {}, "mxfp4": {"effN": 0.8}}, sizes=np.geomspace(2e7, 2e9, 4), ratios=(5, 20, 80),
                            noise=0.004, noise_dist="paired")
    if not paired:
        table = table.drop("seed")  # nothing says which runs are twins: each recipe's runs are drawn on their own
    fitted = fits.analyse(table, bootstrap=4, seed=0, workers=1, top=5)
    assert fitted["twins"] == (12 if paired else 0)
    runs = table.with_columns(C=6 * pl.col("N") * pl.col("D"), status=pl.lit("completed"))
    intro = section_verdict(fitted, "bf16", Study(source=Path("t.csv"), runs=runs)).blocks[0].text
    drawn = ("twin runs, one N, D and seed in each recipe, drawn together: 12 configurations" if paired
             else "each recipe's apart")
    assert f"resample whole runs ({drawn}, `--seed 0`)" in intro, intro


def test_the_overhead_summary_counts_the_pairs_not_reached_as_above_the_longest_run_searched(tmp_path):
    """The summary's median, min and max were over the pairs that reached the target only: the pairs not reached, where
    the recipe did worst, were left out, so mxfp4's max read 114% beside a pair (S at 5e8 tokens) not reached within
    1.2e9 tokens, an overhead above 140%, and its median 84.7% was that of its better half. A pair not reached is now
    an overhead above its longest searched run's tokens over the baseline's; a value it could move reads as the range
    it lies in ("≥ x" where there is no upper end), one it cannot as a number (the demo example's: its pairs not
    reached are above 0%, its middle ones reached below 0%)."""
    from reports.build import section_overhead
    from reports.document import Table
    from reports.load import load
    from reports.render import fmt

    study = load(make_sweep(tmp_path, noise=0.0))
    over = compare.token_overhead(study.runs, study.curves, "bf16")
    row = over.filter((pl.col("recipe") == "mxfp4") & (pl.col("size") == "S") & (pl.col("D") == BUDGETS[1])).row(0, named=True)
    assert row["overhead_pct"] is None and row["overhead_above_pct"] == pytest.approx(140.0)
    assert over.filter(pl.col("overhead_pct").is_not_null())["overhead_above_pct"].is_null().all()
    summary = {r["recipe"]: r for r in compare.overhead_summary(over).iter_rows(named=True)}
    mx, nv = summary["mxfp4"], summary["nvfp4"]
    reached = over.filter((pl.col("recipe") == "mxfp4") & pl.col("overhead_pct").is_not_null())["overhead_pct"].sort()
    # 6 reached, 5 not reached (four above 0%, one above 140%): the median of 11 lies from the 5th to the 6th reached
    assert (mx["median_lo"], mx["median_hi"]) == (pytest.approx(reached[1]), pytest.approx(reached[5]))
    assert mx["max_lo"] == pytest.approx(140.0) and mx["max_hi"] == math.inf
    assert mx["min_lo"] == pytest.approx(0.0, abs=1e-9) and mx["min_hi"] == pytest.approx(reached[0])
    reached = over.filter((pl.col("recipe") == "nvfp4") & pl.col("overhead_pct").is_not_null())["overhead_pct"].sort()
    # 8 reached, 4 not reached above 0%: the median of 12 lies from the 2nd and 3rd reached's to the 6th and 7th's
    assert nv["median_lo"] == pytest.approx(reached[1:3].mean()) and nv["median_hi"] == pytest.approx(reached[5:7].mean())
    # the demo example's mxfp4: its middle pairs reached (−0.38%, −0.34%) lie below its pairs not reached (above 0%)
    demo = compare._bounded([-1.984, -0.3821, -1.736, -0.6209, 1.457, -0.342], [0.0, 0.0])
    assert demo == pytest.approx((-0.36205, -0.36205, -1.984, -1.984, 1.457, math.inf))
    table = next(b for b in section_overhead(study, "bf16", _styles("bf16", "mxfp4", "nvfp4"), tmp_path).blocks
                 if isinstance(b, Table))
    cells = {r[0]: dict(zip(table.columns, r)) for r in table.rows}
    assert cells["mxfp4"]["max (%)"] == "≥ 140" and cells["mxfp4"]["max (%)"].sort == pytest.approx(140.0)
    assert cells["mxfp4"]["median overhead (%)"] == f"{fmt(mx['median_lo'])} to {fmt(mx['median_hi'])}"
    assert cells["nvfp4"]["max (%)"] == f"≥ {fmt(nv['max_lo'])}"
    assert "not reached" in table.caption
