"""`scaling bench kernels|loss|linear|train|profile|stages|sass|cpu|quantizer|fit|calibration`: benchmarks written to a JSON
under reports/bench/ (stages: for a profiler, no rows);
`scaling bench targets`: the emulation's speed targets checked against such a file (scaling.targets)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaling import same_cpu_machine
from scaling.compiling import COMPILE_MODES
from scaling.errors import UserError
from sweeps.cost import BENCH_TRAIN_SEQ_LEN, BENCH_TRAIN_VOCAB_SIZE

SECTIONS = ("kernels", "loss", "linear", "train", "profile", "stages", "sass", "cpu", "quantizer", "fit", "calibration",
            "targets")
NO_GPU = ("sass", "cpu", "quantizer", "fit", "calibration", "targets")
FAMILIES = "nanochat,llama2"  # train's and cpu's default; profile's is nanochat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", nargs="+", choices=SECTIONS,
                        help="which benchmarks to run (sass compiles every tile of each recipe's kernels for sm_90: "
                             "~2-3 min per recipe on 2 CPU cores; --recipes narrows it)")
    parser.add_argument("--out", type=Path, help="JSON file to write (each write merges this call's rows into "
                        "what it holds then, under a lock: sections not run, and rows other calls wrote, are kept); "
                        "targets: the file checked (default reports/bench/h200.json)")
    parser.add_argument("--recipes", help="comma-separated recipes (default: per section)")
    parser.add_argument("--families", help="train, profile, cpu: model families (default: nanochat,llama2; "
                        "nanochat for profile)")
    parser.add_argument("--sizes", help="train, profile, cpu: model sizes (default: 40M,160M for train, 160M for "
                        "profile, 1M for cpu)")
    parser.add_argument("--dims", help="linear: layer widths (default 512,1024,2048,4096); quantizer: operand widths (default 128,512)")
    parser.add_argument("--steps", type=int, help="train, cpu: timed optimizer steps per run (default: 4 for train, 8 for cpu)")
    parser.add_argument("--batch", type=int, help="train, profile: sequences of 1024 tokens per micro-batch "
                        "(default: the trainer's, 64 up to 160M and 32 at 324M)")
    parser.add_argument("--accumulate", type=int,
                        help="train: micro-batches per optimizer step (default: the trainer's batch rule per size)")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES,
                        help="train: torch.compile mode (reduce-overhead replays CUDA graphs) (default: default)")
    parser.add_argument("--top", type=int, help="linear, profile: list each layer's or recipe's top kernels by GPU "
                        "time (default: none for linear, 25 for profile)")
    parser.add_argument("--sweeps", type=int,
                        help="calibration: synthetic sweeps per case (default 40; each case's rate is +-~7%% at 40)")
    parser.add_argument("--shared", action="store_true", default=None,  # (None where not given: OPTION_SECTIONS)
                        help="calibration: calibrate the shared-efficiency check (`scaling fit --shared-efficiencies`) "
                             "instead of the kappa = 0 test; rows under calibration_shared (~18 min on 2 cores)")
    parser.add_argument("--bootstrap", type=int,
                        help="calibration: bootstrap replicates per sweep (default 100), for the coverage of the 95%% "
                             "intervals the verdict and the tables print (the ratio per decade's, the multiplier's, the "
                             "loss gap's, kappa's and the efficiencies'; --shared: the shared efficiencies'); 0: the "
                             "kappa = 0 test alone, without --shared")
    parser.add_argument("--noise-dist", help="calibration: run only the cases under these noise distributions, "
                        "comma-separated (normal, laplace, t3, paired: twin runs' shared noise; default: every case), their rows "
                        "merged into --out's")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of tables")


def _current(path: Path) -> dict:
    """What a benchmark file holds now to merge into: nothing where it does not exist or is empty (a new
    file, as check_output takes it: `mktemp --suffix .json`)."""
    return _read(path) if path.is_file() and path.stat().st_size else {}


def _read(path: Path) -> dict:
    from sweeps.cost import read_bench

    return read_bench(path, "--out")  # (a row edited by hand is refused before the targets read it, or rows merge into it)


# Rows are merged into an existing --out file by these keys: a run of some recipes or sizes replaces
# only their rows, so a benchmark can be completed over several sessions.
ROW_KEYS = {"kernels": ("name", "recipe", "operand"), "linear": ("recipe", "d", "tokens"),
            "train": ("family", "size", "recipe", "batch_tokens", "compile_mode", "accumulate", "seq_len", "vocab_size"),
            "sass": ("recipe", "operand", "stage", "tile", "bk", "warps", "narrow", "halves", "iters", "lanes"),
            "cpu": ("family", "size", "recipe"), "loss": ("name", "cap", "tokens", "vocab"),
            "quantizer": ("recipe", "operand", "tokens", "d"),
            "profile": ("family", "size", "recipe", "batch_tokens", "kind"),
            "calibration": ("grid", "noise_dist", "noise_sd", "truth", "law", "sweeps", "bootstrap"),
            "calibration_shared": ("grid", "noise_dist", "noise_sd", "truth", "law", "sweeps", "bootstrap")}


def _items(value: str | None, default: str) -> tuple[str, ...]:
    """A comma-separated option's items (spaces around them dropped), each once in order (a repeated one
    was benchmarked twice and written as two rows of the same key), or the default's."""
    return tuple(dict.fromkeys(v.strip() for v in (value or default).split(",") if v.strip()))


# Each option the sections read, and those sections: an option given to sections none of which reads
# it was silently ignored (`bench cpu --batch 4` ran the trainer's 16 x 256 tokens).
OPTION_SECTIONS = {"--recipes": ("kernels", "linear", "train", "profile", "stages", "sass", "cpu", "quantizer"),
                   "--families": ("train", "profile", "cpu"), "--sizes": ("train", "profile", "cpu"),
                   "--dims": ("linear", "quantizer"), "--steps": ("train", "cpu"), "--batch": ("train", "profile"),
                   "--accumulate": ("train",), "--top": ("linear", "profile"), "--compile-mode": ("train",),
                   "--sweeps": ("calibration",), "--bootstrap": ("calibration",), "--shared": ("calibration",),
                   "--noise-dist": ("calibration",)}


def _check_options_used(args: argparse.Namespace, wanted: list[str]) -> None:
    """Refuse an option that no section of this call reads, saying which sections do and the command that runs one
    with it ("none of them runs here" left the reader to work out what "them" and "here" were)."""
    for flag, sections in OPTION_SECTIONS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is None or set(sections) & set(wanted):
            continue
        if len(sections) == 1:
            readers, none = f"the {sections[0]} section", "which this call does not run"
        else:
            readers, none = f"the {', '.join(sections[:-1])} or {sections[-1]} sections", "none of which this call runs"
        given = flag if value is True else f"{flag} {value}"
        raise UserError(f"{flag} applies only to {readers}, {none} (it runs {' '.join(wanted)}); leave {flag} out, or "
                        f"add {'it' if len(sections) == 1 else 'one of them'}: scaling bench {' '.join(wanted)} "
                        f"{sections[0]} {given}")


def _check_lists(args: argparse.Namespace) -> None:
    """A list option given but naming nothing (`--sizes ,,`) is refused: it ran nothing, or the defaults."""
    for flag in ("--recipes", "--families", "--sizes", "--noise-dist"):  # (--dims: `_dims`)
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None and not _items(value, ""):
            raise UserError(f"{flag} {value!r} names nothing; give items separated by commas, or leave {flag} out "
                            "for the section's defaults")


# A key a section's older rows lack, and the value it stood for (sass rows before 2026-12-04 were all
# quantize passes, and until ~20:30 that day every RHT128 group a thread's; calibration rows before the
# coverage was measured fitted no bootstrap; train rows before 2026-12-07 ~20:30 were all measured at
# sweeps.cost's BENCH_TRAIN_SEQ_LEN and BENCH_TRAIN_VOCAB_SIZE).
ROW_KEY_DEFAULTS = {"sass": {"stage": "quantize", "lanes": 1}, "calibration": {"bootstrap": 0},
                    "train": {"seq_len": BENCH_TRAIN_SEQ_LEN, "vocab_size": BENCH_TRAIN_VOCAB_SIZE}}


def row_key(section: str, row: dict) -> tuple:
    """What identifies a section's row in its file (ROW_KEYS; a key an older row lacks: ROW_KEY_DEFAULTS's value)."""
    defaults = ROW_KEY_DEFAULTS.get(section, {})
    return tuple(row.get(k, defaults.get(k)) for k in ROW_KEYS[section])


def _merge(section: str, old: list[dict], new: list[dict]) -> list[dict]:
    """The section's old rows that no new row replaces (by `row_key`), then the new rows."""
    fresh = {row_key(section, r) for r in new}
    return [r for r in old if row_key(section, r) not in fresh] + new


def _merged(base: dict, fresh: dict) -> dict:
    """`fresh` (what this call measured: each section's rows, and the other keys it set) merged into `base`
    (the file as it is now): its rows replace those of the same key (ROW_KEYS) and are added after the
    others; its other keys (a GPU call's header: device, date, versions, copy_gbps; cpu_machine,
    sass_versions, calibration_provenance, calibration_shared_provenance, fit) replace the file's; everything else the file holds is kept
    as it is now (sections, rows and headers another call wrote meanwhile, the hand-written `notes`).
    Every file keeps issue 7's keys (`_file_keys`), and a GPU call's (one that set `device`) a GPU file's
    layout (bench.py's docstring)."""
    merged = {**_file_keys(), **base}
    if "device" in fresh:
        merged = {"profile": [], **merged}
    if "copy_gbps" in fresh:
        _keep_copy(merged)
    for key, value in fresh.items():
        merged[key] = _merge(key, merged.get(key, []), value) if key in ROW_KEYS else value
    return merged


def _save(out: Path | None, result: dict, fresh: dict) -> None:
    """The one way `scaling bench` writes its file: under the lock beside `out` (`scaling.files.locked`),
    re-read it, merge `fresh` into it (`_merged`) and write it atomically, so calls writing one file at
    once (a 10-minute `bench calibration` beside a `bench fit`) never lose each other's rows; a file
    damaged meanwhile is refused, never overwritten. Without out, `fresh` is merged into `result` alone.
    Either way `result` becomes the merged file (what the tables and targets read)."""
    from scaling.files import locked, write_json_atomic

    if out:
        with locked(out):
            now = _current(out)
            try:  # (checked as the call began; another machine's call may have written the file since)
                _same_machine(now, fresh, out)
            except UserError as e:
                raise UserError(f"{e} (another call wrote the file since this one started; this call's rows "
                                "were not added to it)") from None
            merged = _merged(now, fresh)
            write_json_atomic(out, merged)
    else:
        merged = _merged(result, fresh)
    result.clear()
    result.update(merged)


def _row_saver(result: dict, fresh: dict, section: str, stamp: dict, out: Path | None):
    """(a callback taking the section's rows this call measured so far, which saves them, each with the
    stamp, at once (`_save`); the section's rows before this call)."""
    earlier = list(result.get(section, []))

    def save(rows: list[dict]) -> None:
        fresh[section] = [{**r, **stamp} for r in rows]
        _save(out, result, fresh)
    return save, earlier


def _keep_copy(result: dict) -> None:
    """Give each kernel row without its own copy_gbps the header's before a new call replaces it: the
    copy rate its share was taken against (rows before 2026-12-04 ~21:30 have none of their own)."""
    from scaling.targets import row_copy_gbps

    for row in result.get("kernels", []):
        copy = row_copy_gbps(row, result)
        if copy:
            row["copy_gbps"] = copy


def _provenance() -> dict:
    """When and from what code a CPU section's rows came (a GPU section's header says it for its rows)."""
    import datetime
    import platform

    import numpy
    import scipy

    import scaling

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "git_commit": scaling.git_commit(), "python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__}


def _bench_sass(recipes: list[str] | None, progress) -> list[dict]:
    try:
        import triton  # noqa: F401
    except ImportError:
        raise UserError("`scaling bench sass` needs Triton (pip install triton; on Linux it comes with torch)") from None
    from scaling import bench
    from scaling.kernels.sass import missing_tools

    missing = missing_tools()
    if missing:
        raise UserError(f"`scaling bench sass` needs the NVIDIA tools Triton ships ({', '.join(missing)} not found "
                        "in triton/backends/nvidia/bin); install the Linux x86-64 or aarch64 Triton wheel")
    return bench.bench_sass(recipes=recipes, progress=progress)


def _file_keys() -> dict:
    """The keys every benchmark file holds (issue 7: "so scripts can read every file"), unmeasured: null (or
    no rows) where no GPU section measured (a file of cpu, quantizer, sass, fit or calibration results alone)."""
    return {"device": None, "date": None, "versions": None, "copy_gbps": None, "kernels": [], "linear": [], "train": []}


def run(args: argparse.Namespace) -> int:
    from scaling.console import print_json
    from scaling.files import check_output

    wanted = list(dict.fromkeys(args.what))
    if args.out:  # (`--out=~/x.json`, which no shell expands: check_output checked ~'s, and ./~/x.json was written)
        args.out = args.out.expanduser()
    recipes = _items(args.recipes, "")
    dims = _check_args(args, wanted, recipes)  # before any benchmark runs, so a typo costs nothing
    recipes = _one_per_name(args.recipes, recipes)
    gpu = [w for w in wanted if w not in NO_GPU]
    if gpu:  # (before the CPU sections run: their minutes were lost when the GPU ones were refused after)
        _check_gpu(gpu, wanted)
    only_targets = wanted == ["targets"]  # reads the file, writes nothing
    if args.out and not only_targets:
        check_output(args.out, folder=False, suffix=".json")
    # The file as this call starts (the refusals below and train's earlier rows read it); what it writes is
    # merged into the file as it is then (`_save`)
    if only_targets and args.out and args.out.exists():
        current = _read(args.out)  # (as it is: an empty file is refused, it holds nothing to check)
    else:
        current = _current(args.out) if args.out else {}
    result: dict = {**_file_keys(), **current}

    def progress(line: str) -> None:  # (stderr: stdout is the tables', or with --json the JSON's alone)
        print(line, file=sys.stderr, flush=True)

    _same_machine(result, _headers(wanted), args.out)  # (before any section runs: a refusal costs nothing)
    fresh: dict = {}  # what this call measures, merged into the file as it is when saved (`_save`)
    _run_cpu_sections(args, wanted, recipes, dims, result, fresh, progress)
    if gpu:
        _run_gpu_sections(args, gpu, recipes, dims, result, fresh, progress)
    if not only_targets:
        _save(args.out, result, fresh)
    checked = _targets(result if args.out else None, args.out) if "targets" in wanted else None
    if args.json:
        print_json({"targets": checked[0]} if only_targets else
                   result | ({"targets": checked[0]} if checked else {}))
        return 0
    _print_sections(wanted, gpu, result, checked, args.shared)
    if args.out and not only_targets:
        print(f"wrote {args.out}")
    return 0


def _run_cpu_sections(args: argparse.Namespace, wanted: list[str], recipes: tuple[str, ...], dims: dict,
                      result: dict, fresh: dict, progress) -> None:
    """The sections that need no GPU (fit, calibration, sass, cpu, quantizer), into fresh (result: the
    file as this call read it)."""
    if "fit" in wanted:
        from fits.bench import bench_fit  # the fits helper's benchmark (no torch)

        fresh["fit"] = bench_fit()
    if "calibration" in wanted and args.shared:
        _calibrate_shared(args, result, fresh, progress)
    elif "calibration" in wanted:
        from fits import calibration
        from scaling.console import count

        sweeps = 40 if args.sweeps is None else args.sweeps
        bootstrap = 100 if args.bootstrap is None else args.bootstrap
        cases = _noise_cases(calibration.CASES, args.noise_dist)
        progress(f"calibration of the kappa = 0 test, {count(sweeps, 'synthetic sweep')} per case, "
                 + (f"{count(bootstrap, 'bootstrap replicate')} each (the coverage of the verdict's intervals), "
                    if bootstrap else "no bootstrap (the test alone), ") + f"{count(len(cases), 'case')}:")
        _say_rough_intervals(bootstrap, progress)
        fresh["calibration_provenance"] = provenance = _provenance()
        # each case saved as it ends (the whole takes ~14 minutes on 2 cores with 100 replicates a sweep), stamped:
        # a run cut short leaves the earlier call's other cases, from other code
        save, _ = _row_saver(result, fresh, "calibration", {"measured": provenance["date"],
                                                            "git_commit": provenance["git_commit"]}, args.out)
        save(calibration.calibrate(sweeps=sweeps, cases=cases, workers=2, bootstrap=bootstrap, progress=progress,
                                   on_row=save))  # (fewer on fewer cores)
    if "sass" in wanted:
        fresh["sass"] = _bench_sass(list(recipes) or None, progress)
        from scaling.bench import versions

        fresh["sass_versions"] = versions()
    if "cpu" in wanted or "quantizer" in wanted:
        from scaling import bench

        fresh["cpu_machine"] = machine = bench.cpu_header()
        progress(f"{machine['cpu']}, {machine['threads']} threads"
                 + (f", quantizer: {machine['quantizer']}" if "quantizer" in wanted else ""))
    if "cpu" in wanted:
        rows = bench.bench_cpu(families=_items(args.families, FAMILIES), sizes=_items(args.sizes, "1M"),
                               recipes=recipes or ("bf16", "nvfp4"), steps=8 if args.steps is None else args.steps,
                               progress=progress)
        fresh["cpu"] = rows
    if "quantizer" in wanted:
        rows = bench.bench_cpu_quantizer(recipes=recipes or ("nvfp4",), dims=dims["quantizer"], progress=progress)
        fresh["quantizer"] = rows


def _calibrate_shared(args: argparse.Namespace, result: dict, fresh: dict, progress) -> None:
    """`bench calibration --shared`: the shared-efficiency check's calibration (`fits.calibration.calibrate_shared`)
    under calibration_shared, each case saved as it ends and stamped, as the kappa = 0 test's."""
    from fits import calibration
    from scaling.console import count

    sweeps = 40 if args.sweeps is None else args.sweeps
    bootstrap = 100 if args.bootstrap is None else args.bootstrap
    cases = _noise_cases(calibration.SHARED_CASES, args.noise_dist)
    progress(f"calibration of the shared-efficiency check, {count(sweeps, 'synthetic sweep')} per case, "
             f"{count(bootstrap, 'bootstrap replicate')} each, {count(len(cases), 'case')}:")
    _say_rough_intervals(bootstrap, progress)
    fresh["calibration_shared_provenance"] = provenance = _provenance()
    save, _ = _row_saver(result, fresh, "calibration_shared", {"measured": provenance["date"],
                                                               "git_commit": provenance["git_commit"]}, args.out)
    save(calibration.calibrate_shared(sweeps=sweeps, bootstrap=bootstrap, cases=cases, workers=2, progress=progress,
                                      on_row=save))


def _say_rough_intervals(bootstrap: int, progress) -> None:
    """A line where a calibration's replicates are too few for a 95% percentile interval (`fits.penalty.MIN_REPLICATES`:
    its 2.5% ends are then the extreme replicates, and `scaling fit` judges no recipe on them): the rows are kept, keyed
    by their `bootstrap`, but their coverage is of rough intervals, not of the ones a study's verdict reads."""
    from fits.penalty import MIN_REPLICATES

    if 0 < bootstrap < MIN_REPLICATES:
        progress(f"note: {bootstrap} replicates are fewer than the {MIN_REPLICATES} a 95% interval needs (its 2.5% ends "
                 f"are the extreme replicates): these rows measure rough intervals; --bootstrap {MIN_REPLICATES} or more "
                 "for the intervals `scaling fit` judges by")


# calibration_shared's columns in the printed table (the JSON has each check's and each format's too)
SHARED_COLUMNS = ("grid", "noise_dist", "law", "truth", "sweeps", "bootstrap", "false_rate", "false_rate_raw", "power", "power_raw",
                  "sharing_rejected", "coverage_effN", "coverage_effD", "unchecked")


def _check_gpu(gpu: list[str], wanted: list[str]) -> None:
    """Refuse GPU sections where no CUDA GPU is visible, naming the CPU sections that would run here."""
    import torch

    if not torch.cuda.is_available():
        cpu = [w for w in wanted if w in NO_GPU]
        raise UserError(f"`scaling bench {' '.join(gpu)}` needs a CUDA GPU; none is visible here"
                        + (f" (nothing was run; drop {', '.join(gpu)} to run {', '.join(cpu)} alone)" if cpu else "."))


# The sections that build models, and their --families, --sizes and --recipes where those are not given.
MODEL_DEFAULTS = {"cpu": (FAMILIES, "1M", "bf16,nvfp4"), "train": (FAMILIES, "40M,160M", None),
                  "profile": ("nanochat", "160M", None)}


def _check_models(args: argparse.Namespace, wanted: list[str], recipes: tuple[str, ...]) -> None:
    """Refuse, before any section runs, a family or size that does not exist (`--sizes 160m`) and a
    recipe whose blocks the size's widths do not tile (quartet2's RHT128 on 0.5M): each was refused
    only when its turn came, after the rows before it had taken their minutes (and were not saved)."""
    sections = [s for s in MODEL_DEFAULTS if s in wanted]
    if not sections:  # (scaling.bench imports torch: `bench fit`, `calibration` and `targets` run without it)
        return
    from models import model_size
    from scaling import bench
    from scaling.recipes import check_model, get_recipe

    for section in sections:
        families, sizes, default_recipes = MODEL_DEFAULTS[section]
        names = recipes or _items(default_recipes, "") or bench.TRAIN_RECIPES
        for family in _items(args.families, families):
            for size in _items(args.sizes, sizes):
                try:
                    m = model_size(family, size)
                except UserError as e:
                    flag = "--families" if "family" in str(e) else "--sizes"
                    raise UserError(f"{flag} {getattr(args, flag[2:])}: {e}") from None
                for name in names:
                    recipe = get_recipe(name)  # (an unknown name: its own error, not this check's)
                    try:
                        check_model(recipe, m.depth, m.block_linears, f"{family} {size}")
                    except UserError as e:
                        raise UserError(f"bench {section}: {e}; or drop that size (--sizes) or recipe (--recipes)") from None


def _check_kernels(args: argparse.Namespace, wanted: list[str], recipes: tuple[str, ...]) -> None:
    """Refuse, for `sass`, recipes that quantize nothing (an empty table) and a recipe with an operand the
    fused GPU kernel does not cover (a 1x24 block from a recipe file: Triton's traceback). (kernels and
    stages skip such an operand, and time the copy yardstick whatever the recipes.)"""
    sections = [w for w in ("sass",) if w in wanted]
    if not sections or not recipes:
        return
    from scaling.bench import no_kernel_line
    from scaling.kernels import unsupported_operands
    from scaling.recipes import get_recipe

    if not any(get_recipe(name).is_quantized for name in recipes):  # (sass printed an empty table, exit 0)
        raise UserError(f"--recipes {args.recipes}: {', '.join(sections)} compiles and times the quantizer kernels, "
                        "and these recipes quantize nothing; give a quantized recipe (e.g. nvfp4)")
    for name in recipes:
        for operand, spec, why in unsupported_operands(get_recipe(name)):
            raise UserError(f"--recipes {args.recipes}: {no_kernel_line(name, operand, spec, why)}, and "
                            f"{', '.join(sections)} compiles and times the kernels; leave {name} out of --recipes")


def _one_per_name(value: str | None, recipes: tuple[str, ...]) -> tuple[str, ...]:
    """--recipes with each recipe once: rows are keyed by a recipe's name (`bench.recipe_key`), so the
    same recipe file given by two paths is benchmarked once, and two different recipes of one name
    (whose rows would replace each other) are refused."""
    from scaling.recipes import get_recipe

    seen: dict[str, tuple[str, dict]] = {}
    for item in recipes:
        recipe = get_recipe(item)
        content = {k: v for k, v in recipe.to_dict().items() if k != "source"}  # (source names the path)
        if recipe.name in seen and seen[recipe.name][1] != content:
            raise UserError(f"--recipes {value}: {seen[recipe.name][0]} and {item} are two different recipes named "
                            f"{recipe.name!r}, and benchmark rows name a recipe by its name; rename one (its `name`)")
        seen.setdefault(recipe.name, (item, content))
    return tuple(item for item, _ in seen.values())


# The sections that read --dims, and their widths where it is not given.
DIMS_DEFAULTS = {"quantizer": "128,512", "linear": "512,1024,2048,4096"}


def _check_bootstrap(bootstrap: int | None, shared: bool | None) -> None:
    """--bootstrap: at least 2 replicates (a percentile interval of fewer is none); 0, the kappa = 0 test alone, only
    without --shared (the shared-efficiency check is the bootstrap's)."""
    if bootstrap is None or bootstrap >= 2 or (bootstrap == 0 and not shared):
        return
    zero = "" if shared else ", or 0 for the kappa = 0 test alone"
    raise UserError(f"--bootstrap must be at least 2 (replicates for a 95% interval){zero}, got {bootstrap}")


def _check_args(args: argparse.Namespace, wanted: list[str], recipes: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Refuse, before any benchmark runs, a count that is not one (--steps 0, --batch -1) and a
    recipe that does not exist; returns the --dims widths of the sections that read them."""
    _check_options_used(args, wanted)
    _check_lists(args)
    for flag, value, least in (("--steps", args.steps, 1), ("--batch", args.batch, 1),
                               ("--accumulate", args.accumulate, 1), ("--top", args.top, 0),
                               ("--sweeps", args.sweeps, 1)):
        if value is not None and value < least:
            raise UserError(f"{flag} must be at least {least}, got {value}")
    _check_bootstrap(args.bootstrap, args.shared)
    if recipes:
        from scaling.recipes import get_recipe

        for name in recipes:
            try:
                get_recipe(name)
            except UserError as e:  # (it names the known ones)
                raise UserError(f"--recipes {args.recipes}: {e}") from None
        from scaling.recipes import OPERANDS

        activations = [op for op in OPERANDS if not op.endswith("_w")]  # (what the quantizer section times)
        if "quantizer" in wanted and not any(getattr(get_recipe(r), op) is not None for r in recipes
                                             for op in activations):
            raise UserError(f"--recipes {args.recipes}: the quantizer section times the quantized activation "
                            "operands (fprop.x, dgrad.dy, wgrad.dy, wgrad.x), and these recipes quantize none; "
                            "give an FP4 recipe (e.g. nvfp4)")
    _check_noise_dists(args.noise_dist, args.shared)
    _check_models(args, wanted, recipes)
    _check_kernels(args, wanted, recipes)
    return {section: _dims(args.dims, default, section, recipes) for section, default in DIMS_DEFAULTS.items()
            if section in wanted}


def _check_noise_dists(value: str | None, shared: bool = False) -> None:
    """Refuse a --noise-dist that the calibration run (`shared`: --shared's) has no case of (a typo ran no case and
    left the file as it was; "paired", twin runs' shared noise, is the kappa = 0 calibration's alone)."""
    if value is None:
        return
    from fits.calibration import CASES, SHARED_CASES
    from fits.synthetic import NOISE_DISTS

    drawn = [d for d in NOISE_DISTS if any(case[1] == d for case in (SHARED_CASES if shared else CASES))]
    unknown = [d for d in _items(value, "") if d not in drawn]
    if unknown:
        raise UserError(f"--noise-dist {value}: no calibration case{' of --shared' if shared else ''} draws "
                        f"{', '.join(map(repr, unknown))}; use {', '.join(drawn)}")


def _noise_cases(cases: tuple[tuple, ...], noise_dist: str | None) -> tuple[tuple, ...]:
    """The calibration cases (fits.calibration's CASES or SHARED_CASES: the noise distribution second in each) whose
    noise distribution --noise-dist names; all of them without it."""
    wanted = _items(noise_dist, "")
    return tuple(c for c in cases if not wanted or c[1] in wanted)


def _dims(value: str | None, default: str, section: str, recipes: tuple[str, ...]) -> tuple[int, ...]:
    """--dims as widths: positive integers, each a multiple of what the section's recipes quantize in
    blocks of (the block and Hadamard group along K, the block's rows across it)."""
    import math

    from scaling import bench
    from scaling.recipes import OPERANDS, get_recipe

    items = _items(value, default)
    dims = tuple(int(d) if d.strip().isdigit() else 0 for d in items)
    bad = [d for d, n in zip(items, dims) if n < 1]
    dims = tuple(dict.fromkeys(dims))  # (128 and 0128 are one width)
    if bad or not dims:
        raise UserError(f"--dims {value!r}: " + (f"{', '.join(map(repr, bad))} is not a positive integer" if bad
                                                 else "names no width")
                        + f"; give widths as positive integers separated by commas, e.g. --dims {default}")
    names = recipes or {"quantizer": ("nvfp4",), "linear": bench.LINEAR_RECIPES}[section]
    # the quantizer section quantizes activations only; linear each operand of a QLinear(d, d)
    specs = [getattr(get_recipe(r), op) for r in names for op in OPERANDS
             if section == "linear" or not op.endswith("_w")]
    need = math.lcm(1, *(m for spec in specs if spec is not None for m in (spec.k_multiple, spec.block_rows)))
    off = [d for d in dims if d % need]
    if off:
        given = f"--dims {value}" if value else f"{section}'s default widths"
        raise UserError(f"{given}: {', '.join(map(str, off))} is not a multiple of {need}, which "
                        f"{section} needs for recipes {', '.join(names)} (their quantization blocks along a "
                        f"width); give multiples of {need}, e.g. --dims {default}")
    if section == "quantizer":
        _check_memory(value, dims, need)
    return dims


# The quantizer section's peak is ~12 of its (tokens, d) float32 operands (the reference's intermediates:
# 367 MB above its start at d = 2048 under quartet2); 16 leaves a margin.
QUANTIZER_OPERANDS = 16


def _check_memory(value: str | None, dims: tuple[int, ...], need: int) -> None:
    """Refuse quantizer widths whose operands do not fit this machine's memory: torch's allocator
    failed with a traceback, or the OOM killer ended the process without a word."""
    import os

    from scaling.bench import QUANTIZER_TOKENS

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # (not on every platform: then unchecked)
        return
    per_width = QUANTIZER_OPERANDS * QUANTIZER_TOKENS * 4
    wide = [d for d in dims if d * per_width > memory]
    if wide:
        most = memory // per_width // need * need
        raise UserError(f"--dims {value}: {', '.join(map(str, wide))} is too wide for this machine: a "
                        f"({QUANTIZER_TOKENS}, {wide[0]}) float32 operand and the reference's copies of it take "
                        f"~{wide[0] * per_width / 1e9:.0f} GB, and it has {memory / 1e9:.0f} GB; give widths up to "
                        f"{most}")


def _same_device(result: dict, name: str, out) -> None:
    """Refuse to add this GPU's rows to a file measured on another: its targets would read one device's
    kernels against the other's copy rate and BF16 speed."""
    if result.get("device") and result["device"] != name:
        raise UserError(f"--out {out} holds rows measured on {result['device']}, and this GPU is {name}; "
                        f"give a file of this device's (e.g. reports/bench/{device_file(name)}), or a new one")


def _headers(wanted: list[str]) -> dict:
    """The file headers naming this machine that the sections wanted write (cpu_machine for cpu and
    quantizer, sass_versions' Triton for sass; a GPU's device: `_run_gpu_sections`)."""
    headers: dict = {}
    if {"cpu", "quantizer"} & set(wanted):
        from scaling.bench import cpu_header

        headers["cpu_machine"] = cpu_header()
    if "sass" in wanted:
        try:
            import triton
        except ImportError:  # (`_bench_sass` says what to install)
            return headers
        headers["sass_versions"] = {"triton": triton.__version__}
    return headers


def _same_machine(file: dict, headers: dict, out) -> None:
    """Refuse to add this call's rows to a file measured on another GPU, CPU or thread count, or compiled
    with another Triton: `headers` (device, cpu_machine, sass_versions) are this call's, and the file's name
    one machine or compiler for all its rows; a new call rewrote them under the older rows."""
    if headers.get("device"):
        _same_device(file, headers["device"], out)
    old, now = file.get("cpu_machine"), headers.get("cpu_machine")
    if old and now and not same_cpu_machine(old, now):
        from scaling.console import count

        threads = lambda n: count(n, "thread") if isinstance(n, int) else f"{n} threads"  # noqa: E731
        raise UserError(f"--out {out} holds cpu and quantizer rows measured on {old.get('cpu')} "
                        f"({threads(old.get('threads'))}), and this is {now['cpu']} ({threads(now['threads'])}); "
                        "give a file of this machine's (e.g. reports/bench/cpu-<machine>.json), or a new one"
                        + (f", or run with OMP_NUM_THREADS={old.get('threads')}" if old.get("cpu") == now["cpu"]
                           else ""))
    old, now = ((d.get("sass_versions") or {}).get("triton") for d in (file, headers))
    if old and now and old != now:
        raise UserError(f"--out {out} holds sass rows compiled with Triton {old}, and this Triton is "
                        f"{now}; give a file of this Triton's (e.g. reports/bench/sass-sm90-triton"
                        f"{'.'.join(now.split('.')[:2])}.json), or a new one, or put Triton {old} "
                        "first on PYTHONPATH (docs/kernels.md, \"Benchmarks\")")


def device_file(name: str) -> str:
    """The benchmark file's name for a GPU: its model's word ('NVIDIA H200' -> h200.json, 'NVIDIA H100 80GB
    HBM3' -> h100.json), else its name's words joined ('NVIDIA GeForce RTX 4090' -> geforce-rtx-4090.json)."""
    import re

    words = re.findall(r"[a-z0-9]+", name.lower().replace("nvidia", ""))
    model = next((w for w in words if re.fullmatch(r"[a-z]+[0-9]+", w)), None)
    return f"{model or '-'.join(words) or 'gpu'}.json"


def _run_gpu_sections(args: argparse.Namespace, gpu: list[str], recipes: tuple[str, ...], dims: dict,
                      result: dict, fresh: dict, progress) -> None:
    """The GPU sections, into fresh (result: the file as this call read it); with --out each finished row
    is saved at once, so a run cut short (a time limit) keeps what it measured."""
    import torch

    _check_gpu(gpu, gpu)
    from scaling import bench

    device = torch.device("cuda")
    _same_device(result, torch.cuda.get_device_name(device), args.out)
    header = bench.header(device)  # (the file's rows without their own copy_gbps keep its old one: `_merged`)
    fresh.update(header)
    progress(f"{header['device']}: copy {header['copy_gbps']:.0f} GB/s")

    import scaling

    # each row this call measures names when and from what code (a file's rows come from many calls)
    stamp = {"measured": header["date"], "git_commit": scaling.git_commit()}

    def saver(section: str):
        return _row_saver(result, fresh, section, stamp, args.out)

    if "kernels" in gpu:
        bench.bench_kernels(device, recipes=list(recipes) or None, progress=progress, on_row=saver("kernels")[0],
                            copy=header["copy_gbps"])
    if "loss" in gpu:
        fresh["loss"] = bench.bench_loss(device, progress=progress)
    if "linear" in gpu:
        bench.bench_linear(device, dims=dims["linear"], recipes=recipes or bench.LINEAR_RECIPES, progress=progress,
                           on_row=saver("linear")[0], top=args.top or 0)
    if "train" in gpu:
        save_rows, earlier = saver("train")
        bench.bench_train(device, families=_items(args.families, FAMILIES), sizes=_items(args.sizes, "40M,160M"),
                          recipes=recipes or bench.TRAIN_RECIPES, steps=4 if args.steps is None else args.steps,
                          batch=args.batch,
                          accumulate=args.accumulate, compile_mode=args.compile_mode or "default",
                          earlier=earlier, progress=progress, on_row=save_rows)
    if "stages" in gpu:
        progress("stages, once each inside the profiler's range:")
        bench.profile_stages(device, recipes=list(recipes) or None, progress=progress)
    if "profile" in gpu:
        bench.bench_profile(device, families=_items(args.families, "nanochat"),
                            sizes=_items(args.sizes, "160M"), recipes=recipes or bench.TRAIN_RECIPES,
                            batch=args.batch, progress=progress, on_row=saver("profile")[0],
                            top=25 if args.top is None else args.top)


def _print_sections(wanted: list[str], gpu: list[str], result: dict, checked: tuple[list[dict], str] | None,
                    shared: bool = False) -> None:
    """The sections run now as tables, then the targets checked (shared: calibration's was --shared)."""
    from scaling.console import print_table

    for section in ("kernels", "loss", "linear", "train", "profile"):
        if section in gpu and result[section]:
            print_table(result[section], title=f"bench {section} ({result['device']}, copy {result['copy_gbps']} GB/s)")
    if "sass" in wanted:
        triton_version = result["sass_versions"]["triton"]
        print_table(result["sass"], title=f"bench sass (sm_90 code from Triton {triton_version}, no GPU)")
    machine = result.get("cpu_machine", {})
    for section in ("cpu", "quantizer"):
        if section in wanted:
            print_table(result[section], title=f"bench {section} ({machine['cpu']}, {machine['threads']} threads, no GPU)")
    if "fit" in wanted:
        fit = result["fit"]
        print_table(_fit_rows(fit), title=f"bench fit ({fit['points']} points, {fit['bootstrap']} bootstrap replicates "
                    f"on {fit['workers']} workers: {fit['wall_s']:.1f} s, {fit['ms_per_replicate']:.1f} ms a replicate; "
                    "--json for all)")
    if "calibration" in wanted and shared:
        print_table(result["calibration_shared"], columns=SHARED_COLUMNS,
                    title="bench calibration --shared (the shared-efficiency check on synthetic sweeps; --json for "
                          "each check's and format's)")
    elif "calibration" in wanted:
        print_table(calibration_rows(result["calibration"]), title="bench calibration (the kappa = 0 test on synthetic "
                    "sweeps; coverage: of the ratio per decade's 95% bootstrap interval)")
        others = interval_rows(result["calibration"])
        if others:
            print_table(others, title="bench calibration: how often each other 95% interval the verdict and the tables "
                        "print held its truth (-: no truth, the constant model under growth; --json for truths and widths)")
    if checked:
        from scaling.targets import summary

        rows, title = checked
        if all(r["measured"] is None for r in rows):  # (a file of CPU sections: a table of blanks said nothing)
            print(f"{title}: no target is measured in this file; they read a GPU's file, e.g. "
                  "reports/bench/h200.json")
            return
        print_table(rows, title=title)
        for line in summary(rows):
            print(line)


# calibration's columns in the printed table, in this order (the file's rows may lack the later ones: `calibration_rows`)
CALIBRATION_COLUMNS = ("grid", "noise_dist", "noise_sd", "truth", "law", "sweeps", "bootstrap", "reject_5pct",
                       "reject_1pct", "mean_stat", "untestable", "true_ratio", "coverage", "ci_width", "no_interval")
COVERAGE_KEYS = ("true_ratio", "coverage", "ci_width", "no_interval")


def calibration_rows(rows: list[dict]) -> list[dict]:
    """The kappa = 0 calibration's rows as its table prints them: CALIBRATION_COLUMNS; a row measured without a bootstrap
    (`--bootstrap 0`, and every row before the coverage was measured: no `bootstrap` key, ROW_KEY_DEFAULTS) says its
    coverage is "not measured" rather than leaving blanks that read as a failed measurement."""
    out = []
    for row in rows:
        shown = {k: row.get(k, ROW_KEY_DEFAULTS["calibration"].get(k)) for k in CALIBRATION_COLUMNS}
        if "coverage" not in row:
            shown.update(dict.fromkeys(COVERAGE_KEYS, "not measured"))
        out.append(shown)
    return out


def interval_rows(rows: list[dict]) -> list[dict]:
    """The calibration rows that measured the other intervals' coverage (`intervals`: fits.calibration.calibrate), one
    line each: the case, and each interval's coverage as a percentage ("-" where its truth's law gives it none)."""
    return [{"grid": r["grid"], "noise_dist": r["noise_dist"], "truth": r["truth"], "sweeps": r["sweeps"],
             "bootstrap": r["bootstrap"],
             **{name: "-" if e["coverage"] is None else f"{e['coverage']:.0%}" for name, e in r["intervals"].items()}}
            for r in rows if r.get("intervals")]


def _fit_rows(fit: dict) -> list[dict]:
    """bench fit's law, one row a parameter: the truth it was drawn from, the fit and its interval."""
    return [{"parameter": k, "truth": fit["truth"][k], "fitted": fit["params"][k], "ci95 low": fit["ci95"][k][0],
             "ci95 high": fit["ci95"][k][1], "truth inside": fit["ci95"][k][0] <= fit["truth"][k] <= fit["ci95"][k][1]}
            for k in fit["truth"]]


def _targets(result: dict | None, path: Path | None) -> tuple[list[dict], str]:
    """The targets checked against a benchmark file, and a title naming it: the --out file (`result`, as
    the sections run now left it), or without --out the committed H200 file (`result` None; rows that
    sections measured now without --out are in no file, and not checked)."""
    from scaling import targets
    from sweeps.cost import DEFAULT_BENCH

    path = path or DEFAULT_BENCH
    if not path.exists():
        raise UserError(f"`scaling bench targets` checks a benchmark file: {path} does not exist; "
                        "give one with --out FILE")
    if result is None:
        result = _read(path)
    rows = targets.check(result, path.name)
    # (a file of CPU sections alone has no device or copy rate: it printed "None" for both)
    device = result.get("device") or "no GPU rows: nothing to check"
    copy = f", copy {result['copy_gbps']} GB/s" if result.get("copy_gbps") else ""
    return rows, f"targets ({device}, {path.name}{copy})"
