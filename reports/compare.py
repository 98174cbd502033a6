"""Run-by-run comparisons against the baseline recipe, from the data alone (no fitted law).

- Relative loss gap (the UFP4 paper's metric): (L_recipe − L_baseline) / L_baseline, in %, for each
  run of a recipe against the baseline's runs that differ from it only in the recipe (same family, size,
  tokens and seed): the seed-matched run, or without seeds the mean of the baseline's replicates.
- Token overhead (the AMD paper's metric): tokens a recipe needs to reach the baseline's final
  validation loss, over the tokens the baseline needed, minus one; read off the validation curves.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl


def match_keys(runs: pl.DataFrame) -> list[str]:
    """Columns that define a matched pair: everything about a run except its recipe."""
    return [c for c in ("family", "size", "N", "D", "seed", "lr_mult") if c in runs.columns]


KEY_WORDS = {"D": "tokens", "lr_mult": "learning-rate multiplier"}
OVER_WORDS = {"D": "token budgets", "seed": "seeds", "lr_mult": "learning-rate multipliers"}


def _listed(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def pairing(keys: list[str]) -> str:
    """How `relative_gaps` pairs runs with match keys `keys`, in words: the gap section's text and figure title."""
    same = "same " + _listed([KEY_WORDS.get(k, k) for k in keys])
    return same if "seed" in keys else f"{same}, against the mean of the baseline's runs there (no seeds)"


def averaged_over(gaps: pl.DataFrame) -> str:
    """What `gaps_by_size` averages a recipe's gaps over at one model size, in words: the match keys beside the
    size, and a table's replicates (runs of one recipe with the same keys) where it has no seeds to tell them apart."""
    keys = match_keys(gaps)
    words = [OVER_WORDS[k] for k in keys if k not in size_keys(gaps)]
    if "seed" not in keys and gaps.select("recipe", *keys).is_duplicated().any():
        words.append("replicates (the table has no seed column)")
    return _listed(words)


def size_keys(runs: pl.DataFrame) -> list[str]:
    return [c for c in ("family", "size", "N") if c in runs.columns]


def completed(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs that are points of the laws, as the fits read a table with statuses (`fits.table.fit_point`)."""
    from fits.table import fit_point

    return runs.filter(fit_point())


def relative_gaps(runs: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """One row per completed run of another recipe with a baseline to compare with: recipe, the match keys,
    loss, baseline_loss, baseline_runs, gap_pct.

    baseline_loss is the mean loss of the baseline's completed runs with the run's match keys, and
    baseline_runs their count. With a seed column that is the run of the same seed; without one, the mean
    of the baseline's replicates at that size and token budget: a table's first row among them is no more
    the baseline than the others, and pairing with it alone made the gap depend on the rows' order.
    """
    keys = match_keys(runs)
    done = completed(runs)
    base = (done.filter(pl.col("recipe") == baseline).group_by(keys)
            .agg(pl.col("loss").mean().alias("baseline_loss"), pl.len().alias("baseline_runs")))
    pairs = done.filter(pl.col("recipe") != baseline).join(base, on=keys, how="inner")
    pairs = pairs.with_columns(((pl.col("loss") / pl.col("baseline_loss") - 1) * 100).alias("gap_pct"))
    return pairs.select("recipe", *keys, "loss", "baseline_loss", "baseline_runs", "gap_pct").sort("recipe", *keys, "loss")


def unpaired(runs: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """The other recipes' runs that `relative_gaps` has no gap for, with why: how the run ended where it has no finite
    loss (diverged, failed, ...), else that no completed baseline run of its match keys has one. recipe, the match
    keys, why. A diverged run is a result: left out of the gaps, it is named, not dropped unsaid."""
    from fits.table import NO_LOSS, fit_point

    keys = match_keys(runs)
    others = runs.filter(pl.col("recipe") != baseline)
    have_base = completed(runs).filter(pl.col("recipe") == baseline).select(keys).unique()
    no_loss = others.filter(~fit_point()).with_columns(
        pl.when(pl.col("status") == "completed").then(pl.lit(NO_LOSS)).otherwise(pl.col("status")).alias("why"))
    alone = (completed(others).join(have_base, on=keys, how="anti")  # (as relative_gaps joins: a null key pairs with none)
             .with_columns(pl.lit(f"no {baseline} loss to compare with").alias("why")))
    return pl.concat([no_loss, alone]).select("recipe", *keys, "why").sort("recipe", *keys)


def unpaired_words(missing: pl.DataFrame) -> str:
    """`unpaired`'s runs in words, by recipe, model size and why: 'mxfp4 at XL: 1 (diverged); ...'."""
    label = "size" if "size" in missing.columns else None
    rows = (missing.group_by("recipe", "N", *([label] if label else []), "why", maintain_order=True).len()
            .sort("recipe", "N", "why"))

    def where(r: dict) -> str:
        return str(r[label]) if label else f"N = {r['N']:.3g}"

    return "; ".join(f"{r['recipe']} at {where(r)}: {r['len']} ({r['why']})" for r in rows.iter_rows(named=True))


def gaps_by_size(gaps: pl.DataFrame) -> pl.DataFrame:
    """Mean gap per recipe and model size (over the other match keys: `averaged_over`), with the pair count."""
    keys = size_keys(gaps)
    return (
        gaps.group_by("recipe", *keys)
        .agg(pl.col("gap_pct").mean().alias("mean_gap_pct"), pl.col("gap_pct").min().alias("min_gap_pct"),
             pl.col("gap_pct").max().alias("max_gap_pct"), pl.len().alias("pairs"))
        .sort("recipe", "N")
    )


def tokens_to_reach(tokens: np.ndarray, loss: np.ndarray, target: float) -> float:
    """First token count at which a validation curve reaches `target` (linear between evals); NaN if never."""
    below = np.flatnonzero(loss <= target)
    if below.size == 0:
        return math.nan
    i = int(below[0])
    if i == 0:
        return float(tokens[0])
    t0, t1, l0, l1 = tokens[i - 1], tokens[i], loss[i - 1], loss[i]
    return float(t0 + (l0 - target) / (l0 - l1) * (t1 - t0))


def token_overhead(runs: pl.DataFrame, curves: dict[str, pl.DataFrame], baseline: str) -> pl.DataFrame:
    """One row per matched pair with both curves: the target loss, tokens each needs, overhead in %.

    When the recipe's paired run never reaches the target, its longer runs (same size and seed,
    larger token budget) are searched in order, and `reached_in` names the budget of the run that
    got there. Their mid-run losses are read under another schedule than a run of that length (before
    its decay), so such an overhead bounds nothing (it can fall below the baseline's tokens); a recipe
    that reaches the target in none of its runs gets null and a note, which names its longer runs that diverged or
    failed (`stopped_longer_runs`: not searched, they are why it was not reached there).
    A pair not reached has `overhead_above_pct`, the overhead its longest searched curve's tokens would be: it needs
    more (null for every other pair).
    A paired run that diverged gets null and "no convergence", one that failed (a crash: no result)
    null and "no result": each pair is exactly one of reached, diverged, failed, not reached (which
    counts a completed pair without a curve) (`overhead_summary`'s columns add up to its pairs).
    """
    keys = match_keys(runs)
    same_model = [k for k in keys if k != "D"]
    base_runs = runs.filter((pl.col("recipe") == baseline) & (pl.col("status") == "completed"))
    rows = []
    for b in base_runs.iter_rows(named=True):
        if b["run_id"] not in curves or curves[b["run_id"]].height == 0:
            continue
        bc = curves[b["run_id"]]
        target = float(bc["val_loss"][-1])  # the baseline's final validation loss, from its own curve
        t_base = tokens_to_reach(bc["tokens"].to_numpy(), bc["val_loss"].to_numpy(), target)
        model = runs.filter(pl.all_horizontal([pl.col(k) == b[k] for k in same_model]) if same_model else pl.lit(True))
        for recipe in sorted(set(model["recipe"]) - {baseline}):
            mine = model.filter(pl.col("recipe") == recipe)
            paired = mine.filter(pl.col("D") == b["D"])
            if paired.height == 0:
                continue
            p = paired.row(0, named=True)
            row = {"recipe": recipe, **{k: b[k] for k in keys}, "target_loss": target, "baseline_tokens": t_base,
                   "recipe_tokens": None, "overhead_pct": None, "overhead_above_pct": None, "reached_in": None, "note": ""}
            if p["status"] != "completed" or p["run_id"] not in curves:
                # A diverged pair is the AMD paper's "no convergence": an outcome, not an overhead. A failed
                # one (the job crashed) says nothing about the recipe.
                row["note"] = ("no validation curve" if p["status"] == "completed" else
                               "no convergence (diverged)" if p["status"] == "diverged" else f"no result ({p['status']})")
                rows.append(row)
                continue
            candidates = mine.filter((pl.col("D") >= b["D"]) & (pl.col("status") == "completed")).sort("D")
            searched = 0.0  # the most tokens a searched curve reaches: a pair not reached needs more
            for c in candidates.iter_rows(named=True):
                curve = curves.get(c["run_id"])
                if curve is None:
                    continue
                searched = max(searched, float(curve["tokens"].max()))
                t = tokens_to_reach(curve["tokens"].to_numpy(), curve["val_loss"].to_numpy(), target)
                if not math.isnan(t):
                    row.update(recipe_tokens=t, overhead_pct=(t / t_base - 1) * 100, reached_in=c["D"])
                    if c["D"] != b["D"]:
                        row["note"] = "reached in a longer run"
                    break
            else:
                longest = candidates["D"].max() if candidates.height else b["D"]
                stopped = stopped_longer_runs(mine.filter(pl.col("D") > longest))
                row["note"] = f"not reached within {longest:.3g} tokens" + (f"; {stopped}" if stopped else "")
                row["overhead_above_pct"] = (searched / t_base - 1) * 100
            rows.append(row)
    schema = {"recipe": pl.Utf8, **{k: runs.schema[k] for k in keys}, "target_loss": pl.Float64,
              "baseline_tokens": pl.Float64, "recipe_tokens": pl.Float64, "overhead_pct": pl.Float64,
              "overhead_above_pct": pl.Float64, "reached_in": pl.Float64, "note": pl.Utf8}
    return pl.DataFrame(rows, schema=schema).sort("recipe", *keys)


def stopped_longer_runs(longer: pl.DataFrame) -> str | None:
    """A model's runs longer than any searched that did not complete (`token_overhead`'s search reads completed runs
    only), in words: 'its longer run at this size (1.2e+09 tokens) diverged at step 7'; None where there are none.
    A pair not reached said only "not reached within 5e+08 tokens" where the recipe's longer run, the one that could
    have reached the target, diverged: the divergence, not a slow recipe, was why."""
    stopped = longer.filter(pl.col("status") != "completed").sort("D")
    if not stopped.height:
        return None

    def how(r: dict) -> str:
        if r["status"] != "diverged":
            return f"{r['status']} (no result)"
        step = r.get("diverged_at_step")  # (a table's column may hold it as a float, or not at all)
        return "diverged" if step is None or step != step else f"diverged at step {int(step)}"

    ended = [(r["D"], how(r)) for r in stopped.iter_rows(named=True)]
    if len(ended) == 1:
        return f"its longer run at this size ({ended[0][0]:.3g} tokens) {ended[0][1]}"
    return "its longer runs at this size: " + ", ".join(f"{d:.3g} tokens {words}" for d, words in ended)


def overhead_summary(overhead: pl.DataFrame) -> pl.DataFrame:
    """Per recipe: pairs, how many reached the target (and of them, how many in a longer run: read mid-run, a value
    that bounds nothing), the median/min/max overhead as the range each lies in (`median_lo`, `median_hi`, ...),
    diverged, failed, not reached.

    A pair not reached needs more than its `overhead_above_pct`, at no known upper end: the median, min and max of the
    reached and not-reached pairs lie between those with each pair not reached at that lower end and at infinity
    (`lo` = `hi` where the pairs not reached cannot move one). Over the reached pairs alone they left out the pairs
    where the recipe did worst: a max below what a pair not reached already needs. Diverged and failed pairs have no
    overhead (counted apart)."""
    reached = pl.col("overhead_pct").is_not_null()
    diverged, failed = pl.col("note").str.starts_with("no convergence"), pl.col("note").str.starts_with("no result")
    counts = (
        overhead.group_by("recipe")
        .agg(pl.len().alias("pairs"), reached.sum().alias("reached"),
             (reached & (pl.col("reached_in") > pl.col("D"))).sum().alias("in_longer_run"),
             pl.col("overhead_pct").drop_nulls().alias("_reached"), pl.col("overhead_above_pct").drop_nulls().alias("_above"),
             diverged.sum().alias("diverged"), failed.sum().alias("failed"),
             (~reached & ~diverged & ~failed).sum().alias("not_reached"))
        .sort("recipe")
    )
    ranges = [_bounded(r["_reached"], r["_above"]) for r in counts.iter_rows(named=True)]
    stats = pl.DataFrame(ranges, schema={f"{s}_{e}": pl.Float64 for s in ("median", "min", "max") for e in ("lo", "hi")},
                         orient="row")
    return pl.concat([counts.drop("_reached", "_above"), stats], how="horizontal").select(
        "recipe", "pairs", "reached", "in_longer_run", *stats.columns, "diverged", "failed", "not_reached")


def _bounded(reached: list[float], above: list[float]) -> tuple[float, ...]:
    """(median, min, max) of overheads known (`reached`) and known only to exceed a value (`above`), each as (lo, hi):
    the statistic with every `above` at its value and at infinity. NaN where there is no pair."""
    lo, hi = np.array(reached + above, float), np.array(reached + [math.inf] * len(above), float)
    if not lo.size:
        return (math.nan,) * 6
    # (np.median of values with infinities: the middle pair's mean, inf where either is)
    return (float(np.median(lo)), float(np.median(hi)), float(lo.min()), float(hi.min()), float(lo.max()),
            float(hi.max()))
