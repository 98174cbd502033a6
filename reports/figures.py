"""The report's figures (matplotlib, Agg): one function per figure, each writes one PNG and returns its path."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Iterator, NamedTuple

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports build on a login node or in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from reports.compare import match_keys, pairing  # noqa: E402

DPI = 110  # sharp on screen, small files (the example report is committed)
STYLE = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linewidth": 0.6,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "savefig.bbox": "tight",
}


# Paul Tol's "muted" qualitative palette: nine colours told apart with any of the three colour-vision deficiencies, and
# from the baseline's black. tab10's were not: with protanopia its orange and green (two FP4 recipes beside bf16) differ
# by 4.6 CIELAB units, as near as two shades of one colour. Its two light colours (cyan, sand) last: their 15% bands and
# pale small-model points all but vanish on white.
MUTED = ("#332288", "#CC6677", "#44AA99", "#999933", "#882255", "#117733", "#AA4499", "#88CCEE", "#DDCC77")


def recipe_colors(recipes: list[str], baseline: str) -> dict[str, str]:
    """Baseline in black, every other recipe its own colour, stable across all figures."""
    others = [r for r in recipes if r != baseline]
    # MUTED while it lasts; past it, colours that are at least distinct with normal colour vision (past 10 recipes
    # tab10 repeated: r0, r10, r20 one blue, a legend that names none of them): tab20, past 20 a continuous map's
    palette = (MUTED if len(others) <= len(MUTED) else plt.get_cmap("tab20").colors if len(others) <= 20
               else plt.get_cmap("turbo")(np.linspace(0.05, 0.95, len(others))))
    colors = {r: matplotlib.colors.to_hex(palette[i]) for i, r in enumerate(others)}
    colors[baseline] = "#000000"
    return colors


# Each recipe's marker shape, beside its colour: past MUTED's nine the colours are not told apart with a colour-vision
# deficiency, and in a black-and-white print not at all. Filled shapes that differ at POINT_SIZE (not 'x' or 'X', the
# validation curves' mark of a stopped run; not 'd', '8', 'H', too like 'D', 'o', 'h'): the baseline's circle and ten more.
BASELINE_MARKER = "o"
MARKERS = ("s", "^", "D", "v", "P", "*", "p", "h", "<", ">")
POINT_SIZE = 4.0  # a recipe's marker, in points (a scatter's size is its square, 16 pt², the loss figure's points)
MARK_STEP = 0.1  # a curve's markers, one per this fraction of its panel's diagonal (fewer crowd out the curves)
SOLID = "-"
# What tells recipes apart in a black-and-white print, in the order they are given out: the ten shapes filled, then the
# eleven (the baseline's circle too) hollow, each once per line style: solid, then dashed, dash-dot, dash-dot-dot, ...
# (past ten recipes, two shared a shape and only their colours, grey alike in print, told them apart)
LOOKS_PER_LINE_STYLE = len(MARKERS) + len(MARKERS) + 1


def line_style(k: int) -> str | tuple:
    """The `k`th recipe line style (k from 0): solid, then a dash followed by k - 1 dots, so there is one for any k.
    (Not dotted alone: the penalty figure's extrapolation is dotted.)"""
    return SOLID if k == 0 else (0, (3.0, 1.5) + (0.8, 1.5) * (k - 1))


class RecipeStyle(NamedTuple):
    """How a recipe is drawn in every figure: its points' and lines' colour, its marker shape, whether the marker is
    filled (else hollow: white inside its coloured edge) and its curves' line style (matplotlib's `linestyle`)."""

    color: str
    marker: str
    filled: bool = True
    linestyle: str | tuple = SOLID


def recipe_markers(recipes: list[str], baseline: str) -> dict[str, tuple[str, bool, str | tuple]]:
    """Baseline a filled circle on a solid line, every other recipe, in the order of `recipe_colors`'s colours, a
    (marker, filled, line style) of its own, for any number of recipes: `LOOKS_PER_LINE_STYLE` on each line style."""
    hollow = (BASELINE_MARKER, *MARKERS)

    def look(i: int) -> tuple[str, bool, str | tuple]:
        k, j = divmod(i, LOOKS_PER_LINE_STYLE)
        return (MARKERS[j], True, line_style(k)) if j < len(MARKERS) else (hollow[j - len(MARKERS)], False, line_style(k))

    markers = {r: look(i) for i, r in enumerate(r for r in recipes if r != baseline)}
    markers[baseline] = (BASELINE_MARKER, True, SOLID)
    return markers


UNKNOWN_STYLE = RecipeStyle("grey", BASELINE_MARKER)  # a recipe not given a style (not among the runs)


def recipe_styles(recipes: list[str], baseline: str) -> dict[str, RecipeStyle]:
    """Each recipe's colour (`recipe_colors`), marker, fill and line style (`recipe_markers`), stable across all
    figures: the one place the figures' recipes are told apart."""
    colors, markers = recipe_colors(recipes, baseline), recipe_markers(recipes, baseline)
    return {r: RecipeStyle(colors[r], *markers[r]) for r in colors}


def marker_kwargs(style: RecipeStyle) -> dict:
    """A curve's (`Axes.plot`) marker in `style`: its shape, filled in its colour or hollow (white inside)."""
    return {"marker": style.marker, "ms": POINT_SIZE, "markeredgecolor": style.color,
            "markerfacecolor": style.color if style.filled else "white"}


def scatter_kwargs(style: RecipeStyle, colors, edge: float) -> dict:
    """A scatter's points in `style`, `colors` (one colour, or one per point): filled in them with a white edge `edge`
    points wide, or hollow, white inside an edge of them (thick enough to be seen at POINT_SIZE)."""
    if style.filled:
        return {"marker": style.marker, "c": colors, "edgecolors": "white", "linewidths": edge}
    return {"marker": style.marker, "c": "white", "edgecolors": colors, "linewidths": 1.0}


def _marks(index: int, count: int) -> tuple[float, float]:
    """`markevery` for the `index`th of `count` curves in a panel: a marker every MARK_STEP of the panel's diagonal,
    each curve's shifted by its share of a step, so where curves run together their markers do not sit on each other."""
    return MARK_STEP * index / max(1, count), MARK_STEP


def _text(name: object) -> str:
    """A name from the data (a recipe's, a size's) as matplotlib shows it literally: with an even number of '$'
    matplotlib reads it as mathtext, so '$m$' was drawn as an italic m and '$a_$' failed the whole report's
    build; an escaped '\\$' outside mathtext is drawn as '$'."""
    return str(name).replace("$", r"\$")


# A title character's width, in inches per point of font size: DejaVu Sans's lowercase letters are 0.5 to 0.65 em wide,
# 'a' 0.61; a panel's room is some 90% of its share of the figure (the constrained layout's gaps and y labels).
TITLE_CHAR_IN = 0.62 / 72 / 0.9


def _wrapped(name: object, width_in: float, size_pt: float) -> str:
    """`name` (a recipe's) as a panel title `width_in` inches wide shows it: in lines that fit, broken after a '_', '-',
    '.', '+', '/' or space where it can be, else inside a word. On one line a long name ran over its neighbours' titles.
    (`_text`'s escaping is applied to each line.)"""
    most = max(8, int(width_in / (TITLE_CHAR_IN * size_pt)))
    lines = [""]
    for part in re.split(r"(?<=[_\-.+/ ])", str(name)):
        while len(part) > most:  # a part longer than a line: cut
            room = most - len(lines[-1])
            lines[-1] += part[:room]
            lines.append("")
            part = part[room:]
        if len(lines[-1]) + len(part) > most:
            lines.append("")
        lines[-1] += part
    return "\n".join(_text(line.strip()) for line in lines if line.strip())


def _legend(target, handles: list, **kwargs) -> None:
    """A legend of exactly these lines: matplotlib's own gathering leaves out every line whose label begins with
    '_' (its mark for 'no label'), so a recipe named '_x' was missing from every legend."""
    target.legend(handles=handles, labels=[h.get_label() for h in handles], **kwargs)


LEGEND_COLUMNS = 4  # the most columns a legend below the panels takes


def _legend_below(fig, handles: list) -> None:
    """The figure's legend below its panels, outside every plot (in a panel, "best" still covered the gaps' points once
    there were nine recipes), in as many columns as fit the figure's width, at most LEGEND_COLUMNS: four columns of
    long recipe names made the legend wider than the panels, and the saved PNG, cut to its contents, shrank them."""
    width, height = fig.get_size_inches()
    renderer = fig.canvas.get_renderer()
    # a dashed recipe's key (past LOOKS_PER_LINE_STYLE recipes) long enough to show its dashes and dots
    dashed = {"handlelength": 3.5} if any(h.get_linestyle() not in (SOLID, "None") for h in handles) else {}
    for ncol in range(min(LEGEND_COLUMNS, len(handles)), 0, -1):
        _legend(fig, handles, loc="outside lower center", ncol=ncol, **dashed)
        box = fig.legends[-1].get_window_extent(renderer)
        if ncol == 1 or box.width <= width * fig.dpi:
            break
        fig.legends[-1].remove()
    # the figure grows by the legend's height: taken from the panels, nine rows of names left them a strip
    fig.set_size_inches(width, height + box.height / fig.dpi)


# The least room between two tick labels' positions, in inches, along each axis: '2×10^16' is about 0.55 in wide at
# 9 pt; stacked, twice the font size (as matplotlib spaces a linear y axis's ticks): 0.2 in crowded '2×10^-4' labels.
LABEL_GAP_IN = {"x": 0.7, "y": 0.25}
NICE_SUBS = ((1.0, 2.0, 5.0), (1.0, 3.0))  # the ticks per decade a log axis takes, densest first, where they fit
FEW_LABELS = 3  # a log axis with fewer nice ticks than this (0.5 and 1 only) takes finer steps that keep them, where they fit
PLAIN = (0.01, 100.0)  # an axis within this range is labelled in decimals (0.05, 0.8, 1.1), not as 8×10^-1


def _log_axis(ax, axis: str = "x") -> None:
    """Log x (or y) axis with a label at every tick, no two labels touching: at 1, 2, 5 × 10^k where the axis is long
    enough, else at 1, 3 × 10^k, else at decades. Where that leaves fewer than FEW_LABELS labels (a multiplier axis from
    0.4 to 1.1 had '0.5' and '1' only), at even steps that keep them and fit (0.4, 0.5, ..., 1); over a range too short
    for two of any, at the even steps' ticks that clear each other. Plain decimals within PLAIN, else m × 10^k. No minor labels."""
    scale, limits, line = ((ax.set_xscale, ax.get_xlim, ax.xaxis) if axis == "x" else
                           (ax.set_yscale, ax.get_ylim, ax.yaxis))
    scale("log")
    lo, hi = limits()
    box, size = ax.get_position(), ax.get_figure().get_size_inches()
    length = box.width * size[0] if axis == "x" else box.height * size[1]  # (before a constrained layout: about)
    need = LABEL_GAP_IN[axis] * math.log10(hi / lo) / length  # decades between two labels' positions
    ticks = _label_ticks(lo, hi, need)
    # decades, every few of them over a long range (LogLocator's own stride), or exactly the ticks chosen
    line.set_major_locator(LogLocator(base=10, subs=(1.0,)) if ticks is None else FixedLocator(ticks))
    plain = PLAIN[0] <= lo and hi <= PLAIN[1]
    # every tick the locator puts: matplotlib's log formatter labels a subset of a range over 0.4 decades long (5×10^7
    # and 5×10^8 of a ladder of sizes were drawn unnamed) and rounds a mantissa to an integer (1.2×10^8 read 1×10^8)
    line.set_major_formatter(FuncFormatter(lambda v, _: _tick_label(v, plain)))
    line.set_minor_formatter(NullFormatter())


def _label_ticks(lo: float, hi: float, need: float) -> list[float] | None:
    """`_log_axis`'s ticks between lo and hi, each `need` decades or more from the next; None for decades."""
    nice = next((ticks for subs in NICE_SUBS if _apart(ticks := _ticks_in(lo, hi, subs), need)), [])
    if not nice and len(_ticks_in(lo, hi, (1.0,))) >= 2:
        return None
    if len(nice) < FEW_LABELS:
        finer = next((ticks for ticks in _even_ticks(lo, hi) if _apart(ticks, need) and _holds(ticks, nice)), [])
        if len(finer) > len(nice):
            return finer
    if nice:
        return nice
    # 3e8 to 9e8 on a narrow panel: no two nice or evenly stepped ticks fit; of a step's ticks (at most 10 in range, so
    # round ones), each that clears the last kept one, from the step that keeps the most (3, 5, 7 × 10^8)
    return max((_cleared(ticks, need) for ticks in _even_ticks(lo, hi) if len(ticks) <= 10), key=len)


def _cleared(ticks: list[float], need: float) -> list[float]:
    """Each of `ticks` that is `need` decades or more above the last one kept."""
    kept: list[float] = []
    for t in ticks:
        if not kept or math.log10(t / kept[-1]) >= need:
            kept.append(t)
    return kept


def _apart(ticks: list[float], need: float) -> bool:
    """Two ticks or more, no two closer than `need` decades."""
    return len(ticks) >= 2 and np.diff(np.log10(ticks)).min() >= need


def _holds(ticks: list[float], keep: list[float]) -> bool:
    """Every tick of `keep` is among `ticks` (finer steps add labels between the nice ones, never drop one)."""
    return all(np.isclose(ticks, t, rtol=1e-9).any() for t in keep)


def _even_ticks(lo: float, hi: float) -> Iterator[list[float]]:
    """The multiples of each even step (1, 2, 5 × 10^j) between lo and hi, finest step first, from one with some
    ten ticks in range to one with at most one."""
    for j in range(math.floor(math.log10(hi - lo)) - 1, math.floor(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            step = m * 10.0 ** j
            yield [float(f"{k * step:.12g}") for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def _tick_label(value: float, plain: bool) -> str:
    """A log axis's tick label: '0.8', '1.1' where `plain`, else '2×10^7', '1.2×10^8', '10^16' (as mathtext, in the
    axes' font)."""
    if plain:
        return f"{value:.6g}"
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = float(f"{value / 10.0 ** exponent:.6g}")
    if mantissa == 1:
        return rf"$\mathdefault{{10^{{{exponent}}}}}$"
    return rf"$\mathdefault{{{mantissa:g}\times10^{{{exponent}}}}}$"


def _ticks_in(lo: float, hi: float, subs: tuple[float, ...]) -> list[float]:
    """The values m × 10^k (m in subs) between lo and hi, in order."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    return sorted(m * 10.0 ** k for k in decades for m in subs if lo <= m * 10.0 ** k <= hi)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


PANEL_WIDTH_IN = 3.2  # a panel of a grid of them (the loss and validation figures)


def _grid(n: int, width: float = PANEL_WIDTH_IN, height: float = 2.7, share: bool = True):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharex=share, sharey=share,
                             layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if share:  # a shared x axis is labelled on the bottom row only: a column whose bottom panel is empty had no labels
        for i in range(max(0, n - cols), min(n, (rows - 1) * cols)):
            axes.flat[i].tick_params(axis="x", labelbottom=True)
    return fig, axes.flat[:n]


LAW_LINES = 12  # beyond this many model sizes, the law is drawn along this many of them, spread over the range


def law_line_sizes(sizes: list[float]) -> list[float]:
    """The model sizes whose law curve the loss-vs-compute figure draws: all of them up to LAW_LINES, else
    LAW_LINES spread evenly over the sorted sizes (a table read off a paper's figure has a size per point)."""
    if len(sizes) <= LAW_LINES:
        return list(sizes)
    return [sizes[i] for i in sorted(set(np.round(np.linspace(0, len(sizes) - 1, LAW_LINES)).astype(int)))]


def _compute_range(runs: pl.DataFrame) -> tuple[float, float]:
    """loss_vs_compute's x range: the runs' compute, a factor 2 either side."""
    return runs["C"].min() / 2, runs["C"].max() * 2


def _loss_range(runs: pl.DataFrame) -> tuple[float, float]:
    """loss_vs_compute's y range: the finite losses, 8% padded."""
    loss = runs.filter(pl.col("loss").is_finite())["loss"]
    pad = 0.08 * (loss.max() - loss.min())
    return loss.min() - pad, loss.max() + pad


def frontiers_off_axes(runs: pl.DataFrame, laws: dict, no_frontier: frozenset = frozenset()) -> dict[str, tuple[float, float]]:
    """recipe -> (N_opt, loss_opt) at the runs' middle compute, for each recipe whose compute-optimal
    frontier never enters loss_vs_compute's axes (a law fitted over few sizes can put the optimum far
    outside them): the caption says so, where the thick line is missing from its panel. The recipes in
    `no_frontier` (laws the runs do not identify, whose optimum is float noise) are not among them."""
    import fits

    lo, hi = _loss_range(runs)
    c_mid = math.sqrt(runs["C"].min() * runs["C"].max())
    grid_c = np.logspace(*np.log10(_compute_range(runs)), 200)
    out = {}
    for recipe, params in laws.items():
        if params is None or recipe in no_frontier:
            continue
        loss = fits.compute_optimal(params, grid_c)[2]
        if not np.any((loss >= lo) & (loss <= hi)):
            n_opt, _, loss_opt = fits.compute_optimal(params, c_mid)
            out[recipe] = (float(n_opt), float(loss_opt))
    return out


def loss_vs_compute(runs: pl.DataFrame, laws: dict, baseline: str, styles: dict[str, RecipeStyle], path: Path,
                    loss_column: str | None = None, no_frontier: frozenset = frozenset()) -> Path:
    """One panel per recipe: runs as points in its marker (shade = model size), the fitted law along each size,
    and the compute-optimal frontier (the baseline's frontier dashed in every panel).
    laws: recipe -> the parameters of its law curve (fits' named form); loss_column: the table's column the
    losses come from, None for result records' validation loss; no_frontier: recipes whose frontier is not
    drawn (their law is not identified away from the runs' sizes: where it lies is float noise)."""
    import fits

    recipes = [r for r in [baseline, *sorted(set(runs["recipe"]) - {baseline})] if r in set(runs["recipe"])]
    sizes = sorted(set(runs["N"].to_list()))
    shade = {n: 0.35 + 0.65 * i / max(1, len(sizes) - 1) for i, n in enumerate(sizes)}
    c_lo, c_hi = _compute_range(runs)
    grid_c = np.logspace(math.log10(c_lo), math.log10(c_hi), 200)
    base_front = (fits.compute_optimal(laws[baseline], grid_c)[2] if baseline in laws and baseline not in no_frontier
                  else None)
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(recipes))
        for ax, recipe in zip(axes, recipes):
            mine = runs.filter(pl.col("recipe") == recipe)
            style = styles[recipe]
            color = style.color
            params = laws.get(recipe)
            if params is not None:
                c = np.logspace(math.log10(c_lo), math.log10(c_hi), 80)
                for n in law_line_sizes(sizes):
                    ax.plot(c, fits.predict(params, n, c / (6 * n)), color=color, alpha=0.35 * shade[n], lw=0.8)
            if mine.height:  # one scatter, each point shaded by its size (one per size took minutes at 6,000 sizes)
                rgba = [(*to_rgb(color), shade[n]) for n in mine["N"].to_list()]
                ax.scatter(mine["C"], mine["loss"], s=POINT_SIZE ** 2, **scatter_kwargs(style, rgba, edge=0.4), zorder=3)
            if params is not None and recipe not in no_frontier:
                ax.plot(grid_c, fits.compute_optimal(params, grid_c)[2], color=color, lw=2, label="compute-optimal (fit)")
            if base_front is not None and recipe != baseline:
                ax.plot(grid_c, base_front, color="black", lw=1, ls="--", label=f"{_text(baseline)} frontier")
            ax.set_title(_wrapped(recipe, PANEL_WIDTH_IN, STYLE["axes.titlesize"]),
                         color=color if recipe != baseline else "black")
            ax.set_xlabel("training compute C = 6ND (FLOP)")
        axes[0].set_ylabel("validation loss (nats/token)" if loss_column is None else
                           f"loss (the table's {_text(loss_column)} column)")
        if axes[0].get_legend_handles_labels()[0]:  # (none where no frontier is drawn)
            axes[0].legend(loc="upper right")  # (the baseline's panel: its labels are ours, none a recipe's name)
        axes[0].set_ylim(*_loss_range(runs))
        axes[0].set_xlim(c_lo, c_hi)
        for ax in axes:
            _log_axis(ax)
        fig.suptitle("Loss vs compute per recipe (darker points: larger models)", fontsize=10)
        return _save(fig, path)


def penalty_vs_compute(bands: dict, penalty: dict, styles: dict[str, RecipeStyle], baseline: str, path: Path) -> Path:
    """The headline: compute multiplier and loss gap against the baseline, along compute: the fit's line
    and the 95% bootstrap band. Solid, with the recipe's markers, inside the data's compute range, dotted where it
    extrapolates."""
    with plt.rc_context(STYLE):
        fig, (ax_m, ax_g) = plt.subplots(1, 2, figsize=(9.6, 3.9), layout="constrained")
        keys = []
        for i, (recipe, band) in enumerate(sorted(bands.items())):
            c = np.asarray(band["C"], dtype=float)
            inside = np.asarray(band["in_data"], dtype=bool)
            style = styles.get(recipe, UNKNOWN_STYLE)
            color = style.color
            verdict = penalty.get(recipe, {}).get("verdict", "")
            for ax, key in ((ax_m, "multiplier"), (ax_g, "gap")):
                med, lo, hi = (np.asarray(band[key][k], dtype=float) for k in ("value", "lo", "hi"))
                ax.fill_between(c, lo, hi, color=color, alpha=0.15, lw=0)
                line, = ax.plot(c[inside], med[inside], color=color, lw=2, ls=style.linestyle, **marker_kwargs(style),
                                markevery=_marks(i, len(bands)),
                                label=f"{_text(recipe)} ({verdict})" if verdict else _text(recipe))
                ax.plot(c, med, color=color, lw=1.2, ls=":")
                keys += [line] if ax is ax_m else []
        _legend_below(fig, keys)  # (first: it sets the figure's height, which the log axes' labels are fitted to)
        ax_m.axhline(1, color="black", lw=0.8)
        ax_g.axhline(0, color="black", lw=0.8)
        ax_m.set_ylim(*_band_limits(bands, "multiplier", ratio=True))
        _log_axis(ax_m, "y")  # a ratio: 0.5x and 2x are equally far from 1
        ax_g.set_ylim(*_band_limits(bands, "gap", ratio=False))
        ax_m.set_ylabel(f"compute multiplier vs {_text(baseline)}\n(baseline compute for the same loss / C)")
        ax_g.set_ylabel(f"loss gap vs {_text(baseline)} (nats/token)")
        for ax in (ax_m, ax_g):
            _log_axis(ax)
            ax.set_xlabel("training compute C (FLOP), compute-optimal allocation")
        fig.suptitle("Does the penalty grow with compute? Fit and 95% bootstrap band; dotted: extrapolation", fontsize=10)
        return _save(fig, path)


def _band_limits(bands: dict, key: str, ratio: bool) -> tuple[float, float]:
    """Axis limits that show every median and as much of the bands as stays readable: with few runs a
    bootstrap band can span 100 decades, which would flatten the medians to a line."""
    med = np.concatenate([np.asarray(b[key]["value"], float) for b in bands.values()])
    lo = np.concatenate([np.asarray(b[key]["lo"], float) for b in bands.values()])
    hi = np.concatenate([np.asarray(b[key]["hi"], float) for b in bands.values()])
    med, lo, hi = med[np.isfinite(med)], lo[np.isfinite(lo)], hi[np.isfinite(hi)]
    if ratio:
        m_lo, m_hi = min(med.min(initial=1.0), 1.0), max(med.max(initial=1.0), 1.0)
        return max(lo.min(initial=m_lo), m_lo / 4) / 1.1, min(hi.max(initial=m_hi), m_hi * 4) * 1.1
    m_lo, m_hi = min(med.min(initial=0.0), 0.0), max(med.max(initial=0.0), 0.0)
    pad = max(m_hi - m_lo, 0.02)
    lim_lo, lim_hi = max(lo.min(initial=m_lo), m_lo - 2 * pad), min(hi.max(initial=m_hi), m_hi + 2 * pad)
    return lim_lo - 0.05 * (lim_hi - lim_lo), lim_hi + 0.05 * (lim_hi - lim_lo)


def gap_vs_size(gaps: pl.DataFrame, by_size: pl.DataFrame, styles: dict[str, RecipeStyle], baseline: str,
                path: Path) -> Path:
    """Relative loss gap of each matched pair (`compare.relative_gaps`) against model size, in the recipe's marker;
    the line joins the per-size means (`compare.gaps_by_size`), those of the section's table."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.2, 3.4), layout="constrained")
        keys = []
        for recipe in sorted(set(gaps["recipe"])):
            mine = gaps.filter(pl.col("recipe") == recipe)
            mean = by_size.filter(pl.col("recipe") == recipe)
            style = styles[recipe]
            ax.scatter(mine["N"], mine["gap_pct"], s=POINT_SIZE ** 2, **scatter_kwargs(style, style.color, edge=0),
                       alpha=0.5)
            keys += ax.plot(mean["N"], mean["mean_gap_pct"], color=style.color, lw=1.6, ls=style.linestyle,
                            **marker_kwargs(style), label=_text(recipe))
        ax.axhline(0, color="black", lw=0.8)
        _legend_below(fig, keys)
        _log_axis(ax)
        ax.set_xlabel("non-embedding parameters N")
        ax.set_ylabel(f"relative loss gap vs {_text(baseline)} (%)")
        # the pairing the gaps were computed with: a table without seeds has none to match
        ax.set_title(textwrap.fill(f"Matched runs: {pairing(match_keys(gaps))}", 64), fontsize=9)
        return _save(fig, path)


STOPPED = "run stopped (diverged or failed)"  # the validation curves' legend for the mark at such a run's last point


def validation_curves(runs: pl.DataFrame, curves: dict, styles: dict[str, RecipeStyle], baseline: str,
                      path: Path) -> Path:
    """Validation curves at each model size's largest token budget (first seed), each with its recipe's markers along
    it, the baseline's final loss marked."""
    # (a failed run's record may hold no n_params or tokens: it crashed before they were known; no panel to draw it in)
    done = runs.filter(pl.col("run_id").is_in(list(curves))).drop_nulls(["N", "D"])
    sizes = sorted(set(done["N"].to_list()))
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(sizes), height=2.6, share=False)
        keys: dict[str, Line2D] = {}  # recipe -> its first curve, in the legend below the panels
        stopped = False  # a run that did not complete drawn in some panel: the legend says what its mark is
        for ax, n in zip(axes, sizes):
            at_n = done.filter(pl.col("N") == n)
            d_max = at_n["D"].max()
            at_n = at_n.filter(pl.col("D") == d_max)
            if "seed" in at_n.columns:
                at_n = at_n.filter(pl.col("seed") == at_n["seed"].min())
            shown = []
            for i, r in enumerate(at_n.sort("recipe").iter_rows(named=True)):
                curve = curves[r["run_id"]]
                style = styles[r["recipe"]]
                color = style.color
                line, = ax.plot(curve["tokens"], curve["val_loss"], color=color, lw=1.3, ls=style.linestyle,
                                **marker_kwargs(style), markevery=_marks(i, at_n.height), label=_text(r["recipe"]))
                keys.setdefault(r["recipe"], line)  # (a recipe of the larger sizes only is named too)
                if r["recipe"] == baseline:
                    ax.axhline(curve["val_loss"][-1], color="black", lw=0.7, ls="--")
                if r["status"] != "completed" and curve.height:  # a diverged run is a result: where it stopped, marked
                    ax.plot(curve["tokens"][-1], curve["val_loss"][-1], color=color, marker="x", ms=7,
                            mew=1.6, ls="none")
                    stopped = True
                late = curve.filter(pl.col("tokens") >= d_max / 10)["val_loss"]  # zoom past the first drop
                shown += late.filter(late.is_finite()).to_list()
            if shown:
                pad = 0.05 * (max(shown) - min(shown) + 1e-9)
                ax.set_ylim(min(shown) - pad, max(shown) + pad)
            label = at_n["size"][0] if "size" in at_n.columns else f"N = {n:.3g}"
            ax.set_title(f"{_text(label)}, {d_max:.3g} tokens")
            ax.set_xlabel("tokens")
        axes[0].set_ylabel("validation loss (nats/token)")
        handles = [keys[r] for r in sorted(keys)]
        if stopped:
            handles.append(Line2D([], [], color="grey", marker="x", ms=7, mew=1.6, ls="none", label=STOPPED))
        _legend_below(fig, handles)  # (in a panel, over the curves)
        for ax in axes:
            _log_axis(ax)
        fig.suptitle("Validation curves (dashed: the baseline's final loss, the token-overhead target)", fontsize=10)
        return _save(fig, path)
