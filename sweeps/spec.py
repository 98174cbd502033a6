"""A sweep spec: one TOML file → a validated, frozen grid of runs.

    name = "demo"                   # the sweep's folder: runs/<name>/
    data = "builtin"                # or a prepared data dir, or a raw corpus (--data on the CLI)

    [grid]                          # every axis takes one value or a list (each value once); runs = the product
    family = "nanochat"
    size = ["0.5M", "1M"]
    recipe = ["bf16", "nvfp4"]
    tokens_per_param = [10, 40]     # or tokens = [...] (absolute), or an [isoflop] table
    seed = 0
    lr_mult = 1.0                   # multiplies every base learning rate

    [isoflop]                       # instead of grid.tokens*: each compute budget C × each size
    budgets = [1e15, 3e15]          #   → tokens = C / (6 N), N = non-embedding parameters

    [train]                         # any other RunConfig field, shared by all runs
    seq_len = 128

    [executor.slurm]                # partition, account, time, gpus, cpus, mem, array_parallelism, ...
    [executor.local]                # gpus ("all" or a list), jobs_per_gpu, cpu_jobs

Any key can be overridden with ``--set key.path=value`` (the value is read as TOML, else a string, except
one that opens a list or table: that must be TOML);
an inline table (``--set train={seq_len=128}``) is merged key by key into the spec's table.
Every mistake raises ``UserError`` naming the key path and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from scaling.config import parse_tokens
from scaling.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from models.ladder import ModelSize
    from scaling.config import RunConfig
    from scaling.recipes import TokenMisfit

GRID_AXES = ("family", "size", "recipe", "tokens", "tokens_per_param", "seed", "lr_mult")
# RunConfig fields that the grid (or the top-level `data`) sets, so [train] may not.
GRID_FIELDS = ("family", "size", "recipe", "tokens", "seed", "lr_mult", "data")


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "24:00:00"  # per job ("D-HH:MM:SS", "HH:MM:SS" or minutes); on timeout the run requeues
    gpus: int = 1  # per run (one node)
    cpus: int = 8  # per run
    mem: str | None = None  # e.g. "64G"; None: the partition's default
    array_parallelism: int = 256  # at most this many tasks of one array run at once
    constraint: str | None = None
    signal_delay_s: int = 120  # SLURM sends USR1 this long before the time limit: checkpoint + requeue
    max_timeouts: int = 50  # requeues after timeouts before submitit gives up (preemptions are free)

    @property
    def time_min(self) -> int:
        return time_minutes(self.time)


def time_minutes(text: str | int) -> int:
    """SLURM time ("D-HH:MM:SS", "HH:MM:SS", "MM", or an int of minutes) in whole minutes (rounded up)."""
    return text if isinstance(text, int) else max(1, -(-time_seconds(text) // 60))


def time_seconds(text: str) -> int:
    """SLURM time ("D-HH:MM:SS", "HH:MM:SS", "MM:SS", "MM") in seconds; ValueError for other text."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        raise ValueError(text)
    d, a, b, c = (int(g) if g else 0 for g in m.groups())
    if m.group(4):  # D-HH:MM:SS or HH:MM:SS
        h, mi, sec = a, b, c
    elif m.group(3):  # HH:MM (with a day) or MM:SS (without)
        h, mi, sec = (a, b, 0) if m.group(1) else (0, a, b)
    else:
        h, mi, sec = (a, 0, 0) if m.group(1) else (0, a, 0)
    return (d * 1440 + h * 60 + mi) * 60 + sec


@dataclass(frozen=True)
class LocalSettings:
    gpus: str | tuple[int, ...] = "all"  # "all" visible GPUs, or their indices
    jobs_per_gpu: int = 1  # small runs share a GPU
    cpu_jobs: int = 1  # runs at once when there is no GPU; threads are split between them


class PlannedRun(NamedTuple):
    """A run of the grid: its config (`scaling.config.RunConfig`), that config's `resolved()`, and its run_id."""

    config: Any
    resolved: Any
    run_id: str


@dataclass(frozen=True)
class SweepSpec:
    name: str
    data: str
    family: tuple[str, ...]
    size: tuple[str, ...]
    recipe: tuple[str, ...]
    seed: tuple[int, ...]
    lr_mult: tuple[float, ...]
    tokens: tuple[int, ...] = ()
    tokens_per_param: tuple[float, ...] = ()
    budgets: tuple[float, ...] = ()  # isoFLOP mode
    train: dict[str, Any] = field(default_factory=dict)
    slurm: SlurmSettings = SlurmSettings()
    local: LocalSettings = LocalSettings()
    default_executor: str = "local"
    source: str = ""  # the TOML file it came from
    corpus: str = ""  # a raw corpus that `launch` prepares into `data` first ("" when data is ready)

    def points(self) -> list[dict[str, Any]]:
        """The grid as plain dicts: family, size, recipe, tokens, seed, lr_mult, in order (each axis lists a value
        once, `_check_once`; two values of the token setting that round to one token count are one point)."""
        from models import model_size

        out, seen = [], set()
        for fam, size, recipe, seed, lr_mult in itertools.product(
            self.family, self.size, self.recipe, self.seed, self.lr_mult
        ):
            s = model_size(fam, size)
            for tokens in (self._tokens_of(s, v) for v in self.token_setting()[1]):
                p = dict(family=fam, size=size, recipe=recipe, tokens=tokens, seed=seed, lr_mult=lr_mult)
                key = tuple(p.values())
                if key not in seen:
                    seen.add(key)
                    out.append(p)
        return out

    def token_setting(self) -> tuple[str, tuple[float, ...]]:
        """The setting that gives the runs their token budgets, by its key path, and its values."""
        if self.budgets:
            return "isoflop.budgets", self.budgets
        if self.tokens_per_param:
            return "grid.tokens_per_param", self.tokens_per_param
        return "grid.tokens", self.tokens

    def _tokens_per_unit(self, s: ModelSize) -> tuple[int, int]:
        """Training tokens per unit of the token setting for model size `s`, as (numerator, denominator):
        1 / 6N per FLOP of an isoFLOP budget (C = 6·N·D), N per token per parameter, 1 per token."""
        if self.budgets:
            return 1, s.flops_per_token()
        return (s.n_params, 1) if self.tokens_per_param else (1, 1)

    def _tokens_of(self, s: ModelSize, value: float) -> int:
        """The training tokens of model size `s` for one value of the token setting."""
        num, den = self._tokens_per_unit(s)
        return max(1, round(value * num / den))

    def runs(self) -> list:
        """One `scaling.config.RunConfig` per grid point (same order as `points()`), de-duplicated by run_id."""
        return [run.config for run in self.resolved_runs()]

    def resolved_runs(self) -> list[PlannedRun]:
        """`runs()` with each config's `resolved()` and run_id, which checking the runs computes anyway: for a
        caller that needs them (`plan`), rather than resolving every config again."""
        from scaling.config import RunConfig, TokensError
        from scaling.recipes import get_recipe, token_misfit
        from sweeps.store import point_label

        runs, seen, recipes = [], set(), {}
        for p in self.points():
            cfg = RunConfig(**self.train, data=self.data, **{k: p[k] for k in GRID_FIELDS if k in p})
            try:
                r = cfg.resolved()  # RunConfig's own checks (e.g. train.schedule)
                run_id = cfg.run_id_of(r)
                if r.recipe not in recipes:  # (setdefault's argument would read a recipe file every run)
                    recipes[r.recipe] = get_recipe(r.recipe)
            except TokensError as e:
                raise UserError(self._token_problem(p, e.problem)) from None
            except UserError as e:
                raise UserError(f"train: {e} (run {point_label(p)})") from None
            # wgrad's K is a micro-batch's token count: a recipe that cannot take it fails every such run at its
            # first step, so refuse it before anything is launched
            misfit = token_misfit(recipes[r.recipe], r.micro_batch_size * r.seq_len)
            if misfit is not None:
                raise UserError(self._micro_batch_problem(p, r, misfit))
            if run_id not in seen:
                seen.add(run_id)
                runs.append(PlannedRun(cfg, r, run_id))
        return runs

    def _token_problem(self, p: dict, problem: str) -> str:
        """A run's token count it cannot train, blamed on the value of the token setting that gave it (not
        on [train]), with the values every size of the grid can train."""
        from models import model_size
        from scaling.config import MAX_TOKENS
        from sweeps.store import point_label

        key, values = self.token_setting()
        i = next(i for i, v in enumerate(values) if self._tokens_of(model_size(p["family"], p["size"]), v) == p["tokens"])
        lo, hi = self._token_setting_range()
        fix = (f"give {key} values from {_bound(lo, up=True)} to {_bound(hi, up=False)}, the range in which every "
               f"size of the grid trains from one batch to {MAX_TOKENS:.0e} tokens" if lo <= hi else
               f"no one value of {key} suits every size of the grid; split it into sweeps of fewer sizes")
        # too few tokens (not too many): a smaller batch is the other way out
        fewer = " (or set a smaller train.batch_size or train.seq_len)" if p["tokens"] <= MAX_TOKENS else ""
        return f"{key}[{i}] = {values[i]:g} gives the run {point_label(p)}, but {problem}; {fix}{fewer}"

    def _micro_batch_problem(self, p: dict, r: RunConfig, misfit: TokenMisfit) -> str:
        """A grid point whose recipe cannot quantize its micro-batches (`misfit`, `scaling.recipes.token_misfit`'s; `r` the
        point's resolved config), blamed on the grid's recipe entry, with the [train] setting that fits it (the
        smallest micro_batch_size that this run's batch takes, where one does) or the recipe file's change."""
        from sweeps.store import point_label

        micro, seq_len, batch, m = r.micro_batch_size, r.seq_len, r.batch_size, misfit.multiple
        fits = [d for d in range(1, batch + 1) if batch % d == 0 and d * seq_len % m == 0]
        fix = (f"set train.micro_batch_size = {fits[0]} ({fits[0]} x {seq_len} = {fits[0] * seq_len}; it divides this "
               f"run's batch of {batch} sequences)" if fits else
               f"this run's batch of {batch} sequences ({batch * seq_len} tokens) holds no such micro-batch: set "
               "train.batch_size and train.micro_batch_size (or train.seq_len) so that it does")
        is_file = p["recipe"].endswith(".toml")
        other = (f"or change {misfit.operand} in {p['recipe']} to blocks that divide {micro * seq_len}" if is_file else
                 "or drop the recipe from the grid")
        return (f"grid.recipe[{self.recipe.index(p['recipe'])}]: {'recipe file' if is_file else 'recipe'} {p['recipe']} "
                f"cannot quantize the micro-batches of the run {point_label(p)}: its {misfit.operand} ({misfit.quantizer}) "
                f"needs their token count, micro_batch_size x seq_len, to be a multiple of {m}, and it is {micro} x "
                f"{seq_len} = {micro * seq_len}; {fix}, {other}")

    def _token_setting_range(self) -> tuple[float, float]:
        """The values of the token setting that give every (family, size) of the grid a token count it can
        train: from one batch (`RunConfig.min_tokens`, with [train]'s settings) to MAX_TOKENS."""
        from models import model_size
        from scaling.config import MAX_TOKENS, RunConfig

        lo, hi = 0.0, math.inf
        for fam, size in itertools.product(self.family, self.size):
            num, den = self._tokens_per_unit(model_size(fam, size))
            cfg = RunConfig(**self.train, data=self.data, family=fam, size=size, recipe=self.recipe[0], tokens=1)
            lo, hi = max(lo, cfg.min_tokens() * den / num), min(hi, MAX_TOKENS * den / num)
        return lo, hi


def _bound(x: float, up: bool) -> str:
    """One end of a range of values: a whole number below a million as it is, else 3 significant digits,
    rounded up (or down) so that the end stays inside the range."""
    if x == int(x) and x < 1e6:
        return f"{int(x):,}"
    scale = 10.0 ** (math.floor(math.log10(x)) - 2)
    return f"{(math.ceil if up else math.floor)(x / scale) * scale:.3g}"


# ---------------------------------------------------------------------------------------------
# Loading: TOML → dict → overrides → validated SweepSpec


def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> SweepSpec:
    """Read a sweep TOML, apply ``key.path=value`` overrides, validate, return the frozen spec."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"sweep spec {path} " + ("is a folder (a sweep's runs?); `sweep plan` and `launch` take the "
                        "spec's TOML file, such as sweeps/demo.toml" if path.is_dir() else
                        "does not exist; pass a TOML file such as sweeps/demo.toml"))
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:  # (a binary file, a UTF-16 export)
        raise UserError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                        "save the sweep spec as UTF-8 TOML") from None
    except OSError as e:
        raise UserError(f"cannot read sweep spec {path} ({e.strerror or e})") from None
    if "grid" not in raw and (recipe_keys := [k for k in ("base", "fprop", "dgrad", "wgrad") if k in raw]):
        raise UserError(f"{path} is a recipe file (its {', '.join(recipe_keys)}), not a sweep spec: name it in a spec's "
                        f"grid.recipe (recipe = [\"bf16\", \"{path}\"]), or `scaling recipes {path}` shows it")
    before = _token_axes(raw)
    for item in overrides:
        apply_override(raw, item)
    _drop_replaced_token_axes(raw, before)
    return parse_spec(raw, source=str(path), default_name=path.stem)


def _token_axes(raw: dict) -> dict[str, Any]:
    """The spec's token-budget axes, by name: grid.tokens, grid.tokens_per_param, isoflop."""
    grid = raw.get("grid") if isinstance(raw.get("grid"), dict) else {}
    axes = {f"grid.{k}": grid[k] for k in ("tokens", "tokens_per_param") if k in grid}
    if "isoflop" in raw:
        axes["isoflop"] = raw["isoflop"]
    return {k: copy.deepcopy(v) for k, v in axes.items()}


def _drop_replaced_token_axes(raw: dict, before: dict[str, Any]) -> None:
    """A token budget given with --set (grid.tokens_per_param=[10,20], isoflop.budgets=[...]) replaces
    the spec's other one: --set cannot remove a key, so the spec's would otherwise clash with it."""
    after = _token_axes(raw)
    given = {k for k, v in after.items() if before.get(k, None) != v or k not in before}
    if not given:
        return
    for k in set(after) - given:  # the spec file's, not --set's
        if k == "isoflop":
            del raw["isoflop"]
        else:
            del raw["grid"][k.split(".", 1)[1]]


def apply_override(raw: dict, item: str) -> None:
    """Set ``a.b.c=value`` in the raw spec dict; the value is parsed as TOML, else kept as a string (one that
    opens a list or table, `[bf16,nvfp4]`, is a UserError saying how to quote it)."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set {item!r}: expected key.path=value, e.g. --set grid.seed=[0,1]")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError as error:
        value = text.strip()
        if value[:1] in "[{" and value:  # a list or table, not a string: kept as one it read as "unknown recipe '[bf16,nvfp4]'"
            raise UserError(_not_toml(key, value, error)) from None
    parts = key.split(".")
    table = raw
    for i, part in enumerate(parts[:-1]):
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise UserError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a table")
    if isinstance(value, dict):
        # A table merges key by key into the spec's table there (as --set key.sub=value for each
        # key); replacing the whole table would silently drop the spec's other keys.
        if not value:
            raise UserError(f"--set {item.strip()}: an empty table changes nothing (a table given to --set "
                            f"is merged key by key into the spec's); change one key with --set "
                            f"{key}.KEY=VALUE, or edit the spec to remove [{key}]")
        _merge(table, parts[-1], value, key)
        return
    table[parts[-1]] = value


def _not_toml(key: str, value: str, error: Exception) -> str:
    """What --set KEY=VALUE says of a VALUE that opens a list or table and is no TOML, with the list quoted where
    quoting its bare words makes one (`[bf16,nvfp4]` -> `["bf16", "nvfp4"]`)."""
    kind = "list" if value[0] == "[" else "table"
    if kind == "list" and value.endswith("]"):
        items = [i.strip() for i in value[1:-1].split(",") if i.strip()]
        quoted = "[" + ", ".join(i if _is_toml(i) else json.dumps(i) for i in items) + "]"
        if _is_toml(quoted):
            return f"--set {key}={value}: {value} is not a TOML list (strings in it are quoted): --set '{key}={quoted}'"
    example = "'grid.recipe=[\"bf16\", \"nvfp4\"]'" if kind == "list" else "'train={seq_len=128, compile=\"default\"}'"
    return (f"--set {key}={value}: {value} is not a TOML {kind} ({error}); close it and quote the strings in it, "
            f"e.g. --set {example}")


def _is_toml(text: str) -> bool:
    try:
        tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return False
    return True


def _merge(table: dict, name: str, value: dict, key: str) -> None:
    """Merge the inline table ``value`` into ``table[name]``, nested tables key by key."""
    there = table.setdefault(name, {})
    if not isinstance(there, dict):
        raise UserError(f"--set {key}: the spec's {key} is {there!r}, not a table, so a table cannot be "
                        f"merged into it; give a value of its kind")
    for sub, v in value.items():
        if isinstance(v, dict) and v:
            _merge(there, sub, v, f"{key}.{sub}")
        else:
            there[sub] = v


def sweep_name(raw: dict, default_name: str) -> str:
    """The spec's `name` (`default_name`, the file's stem, where it gives none): the folder its runs go to."""
    name = _get(raw, "name", str, "", default=default_name)
    if not name or "/" in name or name in (".", ".."):
        raise UserError(f"name: {name!r} is not a usable folder name")
    return name


def default_sweep_dir(name: str) -> Path:
    """Where `scaling sweep launch` puts a sweep's runs without --sweep-dir: runs/<name>, under the working folder."""
    return Path("runs") / name


def spec_name_of(path: Path) -> str | None:
    """The sweep name of the spec file at `path` (as `load_spec` names it), or None where the file is no sweep spec
    (not TOML, no [grid] table, no usable name): for a command given a spec where it wants the sweep's folder."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(raw.get("grid"), dict):
        return None
    try:
        return sweep_name(raw, Path(path).stem)
    except UserError:
        return None


def parse_spec(raw: dict, source: str = "", default_name: str = "sweep") -> SweepSpec:
    known_top = {"name", "data", "grid", "isoflop", "train", "executor"}
    _no_unknown(raw, known_top, "")
    name = sweep_name(raw, default_name)
    data = _get(raw, "data", str, "", default="")
    if not data:
        raise UserError("data: this spec names no corpus; pass --data builtin|DIR or set data in the TOML")
    corpus = ""
    if data != "builtin":
        path = Path(data).expanduser().resolve()
        if not path.exists():
            raise UserError(f"data: {data} does not exist; give builtin, a prepared data dir or a corpus")
        data = str(path)
        if not (path / "meta.json").is_file():  # a raw corpus: launch prepares it once, into the cache
            from scaling.data import resolve_sources

            resolve_sources([path])  # (plan refuses, as launch does, a folder of no corpus files or a .csv)
            corpus, data = data, str(prepared_dir(path))

    grid = _table(raw, "grid", "")
    _no_unknown(grid, set(GRID_AXES), "grid.")
    iso = _table(raw, "isoflop", "")
    _no_unknown(iso, {"budgets"}, "isoflop.")

    family = _axis(grid, "family", str, default=["nanochat"])
    from models import model_size
    from models.ladder import check_family

    for i, fam in enumerate(family):
        _at(f"grid.family[{i}]", check_family, fam)
    size = _axis(grid, "size", str)
    for i, s in enumerate(size):
        for fam in family:
            _at(f"grid.size[{i}]", model_size, fam, s)
    recipe = _axis(grid, "recipe", str)
    from scaling.recipes import get_recipe

    file_names = {}  # recipe file -> its recipe's name
    for i, r in enumerate(recipe):
        if r.endswith(".toml"):
            _check_recipe_beside_spec(r, source, f"grid.recipe[{i}]")
            recipe[i] = r = str(Path(r).expanduser().resolve())
            file_names[r] = _check_recipe_file(r, f"grid.recipe[{i}]")
        else:
            _at(f"grid.recipe[{i}]", get_recipe, r)
    _check_once(grid, "recipe", recipe)  # (by resolved path: a file named twice, "mine.toml" and "./mine.toml")
    _check_recipe_names(file_names, recipe, grid["recipe"])
    _check_shapes(family, size, recipe)
    seed = _axis(grid, "seed", int, default=[0], check=lambda v: v >= 0, what="a non-negative integer")
    lr_mult = _axis(grid, "lr_mult", float, default=[1.0], check=lambda v: v > 0, what="a positive number")

    tokens = _axis(grid, "tokens", int, default=[], check=lambda v: v > 0, what="a positive integer", parse=parse_tokens)
    tpp = _axis(grid, "tokens_per_param", float, default=[], check=lambda v: v > 0, what="a positive number")
    budgets = _axis(iso, "budgets", float, default=[], check=lambda v: v > 0, what="a positive number", prefix="isoflop.")
    for key, values in (("family", family), ("size", size), ("seed", seed), ("lr_mult", lr_mult), ("tokens", tokens),
                        ("tokens_per_param", tpp)):
        _check_once(grid, key, values)
    _check_once(iso, "budgets", budgets, prefix="isoflop.")
    given = [k for k, v in (("grid.tokens", tokens), ("grid.tokens_per_param", tpp), ("isoflop.budgets", budgets)) if v]
    if len(given) != 1:
        raise UserError(
            "grid: give exactly one of grid.tokens, grid.tokens_per_param or isoflop.budgets"
            + (f" (got {', '.join(given)})" if given else "")
        )

    train = _train_settings(_table(raw, "train", ""))
    executor = _table(raw, "executor", "")
    _no_unknown(executor, {"default", "slurm", "local"}, "executor.")
    default_executor = _get(executor, "default", str, "executor.", default="local")
    if default_executor not in ("local", "slurm"):
        raise UserError(f"executor.default: {default_executor!r} is not local or slurm")
    slurm_table = _table(executor, "slurm", "executor.")
    if isinstance(slurm_table.get("mem"), int) and not isinstance(slurm_table["mem"], bool):  # sbatch's megabytes
        slurm_table = {**slurm_table, "mem": str(slurm_table["mem"])}
    slurm = _check_time_limit(_settings(SlurmSettings, slurm_table, "executor.slurm."))
    if slurm.gpus > 1:  # (`scaling train` is one process on one device: a job holding more leaves them idle)
        raise UserError(f"executor.slurm.gpus: {slurm.gpus} GPUs a job, but a run trains on one (`scaling train` runs "
                        "one process on one device), so the others would sit idle and plan's GPU-hours would count "
                        "one of them; set gpus = 1 (0 for CPU jobs): the runs of a sweep spread over GPUs as jobs of "
                        "its arrays (array_parallelism)")
    if slurm.mem is not None and not re.fullmatch(r"\d+([KMGT]B?)?", slurm.mem.strip(), re.IGNORECASE):
        raise UserError(f"executor.slurm.mem: {slurm.mem!r} is not a SLURM memory size like \"64G\", \"500M\" or "
                        "64000 (megabytes); sbatch would refuse every job")
    local = _local_settings(_table(executor, "local", "executor."))
    return SweepSpec(
        name=name, data=data, family=tuple(family), size=tuple(size), recipe=tuple(recipe),
        seed=tuple(seed), lr_mult=tuple(lr_mult), tokens=tuple(tokens), tokens_per_param=tuple(tpp),
        budgets=tuple(budgets), train=train, slurm=slurm, local=local,
        default_executor=default_executor, source=source, corpus=corpus,
    )  # fmt: skip


def _check_once(table: dict, key: str, values: list, prefix: str = "grid.") -> None:
    """A UserError where an axis lists one value twice (`values`: as read, "4k" as 4000 and a recipe file by its
    resolved path; the table's own spelling is said): it would be one grid point, trained once, and a sweep that
    silently runs fewer points than it lists is not the one its author planned."""
    first: dict[Any, int] = {}
    for i, v in enumerate(values):
        j = first.setdefault(v, i)
        if j != i:  # (two values: the table's is a list)
            a, b = _written(table[key][j]), _written(table[key][i])
            same = "" if a == b else f" (both {_written(v)})"  # "4k" and 4000; "./mine.toml" and "mine.toml"
            raise UserError(f"{prefix}{key}[{i}]: {b} repeats {prefix}{key}[{j}] = {a}{same}; list each value once "
                            "(one value twice is one grid point, trained once)")


def _written(value: Any) -> str:
    """A spec's value as an error names it: a number as %g (1e+12, not 1000000000000.0), a string quoted."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def prepared_dir(corpus: Path) -> Path:
    """Where a raw corpus named as `data` is prepared (scaling.data's cache, one dir per corpus path).

    Runs name this dir, so plan and launch agree on run ids before it exists. With SLURM, point
    $SCALING_CACHE at storage the compute nodes see."""
    import hashlib

    from scaling.files import cache_dir

    digest = hashlib.sha256(str(corpus).encode()).hexdigest()[:10]
    return cache_dir() / "data" / f"corpus-{corpus.name}-{digest}"


def _check_recipe_beside_spec(path: str, source: str, where: str) -> None:
    """A relative recipe path that is missing from the working folder but found beside the spec: the
    user read it as relative to the spec (it is relative to where `scaling` runs); say so."""
    given = Path(path).expanduser()
    beside = Path(source).parent / given if source else None
    if not given.is_absolute() and not given.exists() and beside is not None and beside.is_file():
        raise UserError(f"{where}: recipe file {given} is not in the folder `scaling` runs in ({Path.cwd()}); "
                        f"recipe paths are relative to it, not to the spec: run from {Path(source).parent} "
                        f"or write the path as {beside}")


def _check_recipe_file(path: str, where: str) -> str:
    """The recipe file's name, or a UserError saying where in the spec it was named."""
    from scaling.recipes import Recipe

    return _at(where, lambda: Recipe.from_toml(path).name)


def _check_recipe_names(file_names: dict[str, str], recipes: list[str], given: list | str) -> None:
    """Two recipe files (file -> recipe name) of one name but different content would pool two recipes
    under that name in results, fits and reports (they group runs by name). Two files of the same
    content are one recipe (their runs have one id): listed twice, as `_check_once` refuses a value
    listed twice (`recipes`: grid.recipe as read, files by their resolved paths; `given`: as written)."""
    from scaling.recipes import recipe_content

    files: dict[str, str] = {}
    for r, name in file_names.items():
        other = files.setdefault(name, r)
        if other == r:
            continue
        if recipe_content(other) != recipe_content(r):
            raise UserError(f"grid.recipe: {other} and {r} are both named {name!r} but differ; results, fits and "
                            "reports group runs by recipe name, so give each file a name of its own")
        i, j = recipes.index(r), recipes.index(other)  # (two files: grid.recipe is a list)
        raise UserError(f"grid.recipe[{i}]: {given[i]!r} is a copy of grid.recipe[{j}] = {given[j]!r} (recipe {name!r}, "
                        "the same content: its runs are one); list each recipe once")


def _check_shapes(families: list[str], sizes: list[str], recipes: list[str]) -> None:
    """Every (family, size, recipe) must fit: each GEMM's K a multiple of the recipe's blocks and
    Hadamard groups (e.g. quartet2's RHT128 needs widths that are multiples of 128), and its
    high_precision_blocks blocks of that model (the sizes differ in depth: 1M has 5, 0.5M 10)."""
    from models import model_size
    from scaling.recipes import check_model, get_recipe

    for fam in families:
        for size in sizes:
            m = model_size(fam, size)
            for r in recipes:
                recipe = get_recipe(r)  # (an unknown name: its own error, not this check's)
                try:
                    check_model(recipe, m.depth, m.block_linears, f"{fam} {size}")
                except UserError as e:
                    raise UserError(f"grid: {e}; drop that size or recipe from the grid") from None


def _train_settings(table: dict) -> dict[str, Any]:
    """[train]: RunConfig fields shared by all runs, type-checked against the field annotations."""
    from scaling.config import RunConfig

    fields = {f.name: f for f in dataclasses.fields(RunConfig) if f.init}
    allowed = sorted(set(fields) - set(GRID_FIELDS))
    out = {}
    for key, value in table.items():
        if key in GRID_FIELDS:
            where = "data" if key == "data" else f"grid.{key}"
            raise UserError(f"train.{key}: set it as {where}, not in [train]")
        if key not in fields:
            raise UserError(f"train.{key}: unknown setting{did_you_mean(key, allowed)}; known: {', '.join(allowed)}")
        kind, optional = _hint(fields[key].type)
        out[key] = value if optional and value is None else _coerce(value, kind, f"train.{key}")
    return out


def _hint(annotation: Any) -> tuple[type | None, bool]:
    """(type, may be None) from a simple annotation such as "int | None"; (None, True) when unsure."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = [p.strip() for p in text.split("|")]
    kinds = [k for k in (_BUILTIN_TYPES.get(p) for p in parts if p != "None") if k]
    return (kinds[0] if len(kinds) == 1 and len(parts) - ("None" in parts) == 1 else None), "None" in parts


_BUILTIN_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _local_settings(table: dict) -> LocalSettings:
    gpus = table.pop("gpus", "all")
    settings = _settings(LocalSettings, table, "executor.local.")
    if gpus != "all":
        if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
            raise UserError(f"executor.local.gpus: {gpus!r} is not \"all\" or a list of GPU indices like [0, 1]")
        if len(set(gpus)) < len(gpus):
            raise UserError(f"executor.local.gpus: {gpus!r} names a GPU twice; list each once and set "
                            "executor.local.jobs_per_gpu for several runs per GPU")
        gpus = tuple(gpus)
    return dataclasses.replace(settings, gpus=gpus)


def _settings(cls, table: dict, prefix: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in table.items():
        if key not in fields:
            raise UserError(f"{prefix}{key}: unknown setting{did_you_mean(key, fields)}; known: {', '.join(fields)}")
        default = fields[key].default
        if key == "time" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # minutes
        kwargs[key] = _coerce(value, type(default) if default is not None else str, prefix + key)
        if key == "time":
            try:
                time_minutes(kwargs[key])
            except ValueError:
                raise UserError(f"{prefix}time: {value!r} is not a SLURM time like \"4:00:00\" or \"1-00:00:00\"") from None
        if isinstance(kwargs[key], (int, float)) and kwargs[key] < (1 if key in AT_LEAST_ONE else 0):
            raise UserError(f"{prefix}{key}: must be {'at least 1' if key in AT_LEAST_ONE else 'not negative'} "
                            f"(got {value!r})")
    return cls(**kwargs)


def _check_time_limit(slurm: SlurmSettings) -> SlurmSettings:
    """A job's time limit must outlast the warning before it: SLURM sends USR1 signal_delay_s before the
    limit and the run checkpoints and requeues, so a shorter limit requeues every job before its first
    step, up to max_timeouts times. 0 is SLURM's "no limit", which would never requeue a run at all."""
    if time_seconds(slurm.time) == 0:
        raise UserError(f"executor.slurm.time: {slurm.time!r} is SLURM's 'no limit'; give the jobs a limit (e.g. "
                        "\"24:00:00\"): at it each run checkpoints and requeues")
    if time_seconds(slurm.time) <= slurm.signal_delay_s:
        raise UserError(f"executor.slurm.time: {slurm.time!r} ({time_seconds(slurm.time)} s) is not longer than signal_delay_s "
                        f"({slurm.signal_delay_s} s), the warning a job gets before its limit to checkpoint and requeue: "
                        "every job would requeue before training; raise time or lower signal_delay_s")
    return slurm


# Settings that count runs or cores: zero would run nothing (local slots) or be refused by sbatch.
AT_LEAST_ONE = ("jobs_per_gpu", "cpu_jobs", "cpus", "array_parallelism")


# ---------------------------------------------------------------------------------------------
# Small typed getters; each error names the key path.

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _coerce(value: Any, kind: type | None, path: str) -> Any:
    if kind is None or isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():  # 1e9 in TOML is a float
        return int(value)
    if kind in (tuple, list) and isinstance(value, list):
        return kind(value)
    raise UserError(f"{path}: expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}")


def _get(table: dict, key: str, kind: type, prefix: str, default: Any = None) -> Any:
    return _coerce(table[key], kind, prefix + key) if key in table else default


def _table(raw: dict, key: str, prefix: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise UserError(f"{prefix}{key}: expected a table ([{prefix}{key}]), got {value!r}")
    return dict(value)


def _axis(table: dict, key: str, kind: type, default: list | None = None, check=None, what: str = "",
          prefix: str = "grid.", parse=None) -> list:  # fmt: skip
    """The values of table[key] (one or a list) as `kind`, each passing `check`; `parse` reads a string value
    (grid.tokens' "2M", as `scaling train --tokens` reads it)."""
    if key not in table:
        if default is None:
            raise UserError(f"{prefix}{key}: missing; give one value or a list")
        return default
    values = table[key] if isinstance(table[key], list) else [table[key]]
    if not values:
        raise UserError(f"{prefix}{key}: empty list; give at least one value")
    out = []
    for i, v in enumerate(values):
        if parse is not None and isinstance(v, str):
            v = _at(f"{prefix}{key}[{i}]", parse, v)
        v = _coerce(v, kind, f"{prefix}{key}[{i}]")
        if check is not None and (isinstance(v, float) and not math.isfinite(v) or not check(v)):
            raise UserError(f"{prefix}{key}[{i}]: expected {what}, got {values[i]!r}")
        out.append(v)
    return out


def _at(where: str, check, *args):
    """check(*args), its UserError prefixed by where in the spec the value came from."""
    try:
        return check(*args)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def _no_unknown(table: dict, known: set[str], prefix: str) -> None:
    for key in table:
        if key not in known:
            raise UserError(f"{prefix}{key}: unknown key{did_you_mean(key, sorted(known))}; known: {', '.join(sorted(known))}")
