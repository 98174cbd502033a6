"""A run's config: one frozen dataclass, `RunConfig`, that names everything a run depends on, fills
what it leaves unset from the size rules (`resolved`), and hashes to the run's id (`run_id`).

Its own module, not `scaling.train`'s: `scaling sweep plan|status|collect` name and price hundreds of
runs without importing Lightning (seconds of a command's start).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from models.ladder import ModelSize, model_size
from scaling import hyperparams
from scaling.compiling import COMPILE_MODES
from scaling.console import count
from scaling.errors import UserError

# Tokens per forward pass when micro_batch_size is not given (`default_micro_batch`): 64 x 1024 up to
# this many non-embedding parameters, 32 x 1024 above. Measured on the H200 (docs/training.md): 160M at
# 64 x 1024 peaks at 39-42 GiB in BF16 and runs 2-3% faster than at 32 x 1024 (fewer, larger GEMMs and
# kernels); 324M needs 32 x 1024 to leave an 80 GB GPU room. The micro CPU runs need no accumulation.
LARGE_MICRO_BATCH_MAX_PARAMS = 200_000_000
MAX_TOKENS = 10**15  # a quadrillion training tokens: beyond any run this framework plans (a typo guard)
# lr_mult's ceiling: far beyond any lr that trains (1e6 already trains at chance), and far below where
# an optimizer's float32 step size overflows (~1e38: torch's Adam raised, a traceback, not a divergence)
MAX_LR_MULT = 1e9
PRECISIONS = ("auto", "64-true", "32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed", "64", "32", "16", "bf16")  # Lightning's


def parse_tokens(text: str) -> int:
    """A token count as people write it: '2M' -> 2000000, '500k', '1.5M', '1e6', '2000000' (`scaling train
    --tokens`, a sweep's grid.tokens). A fraction of a token ('1.5', '0.4') is refused, not truncated.
    Decimal arithmetic: 1.1M is 1100000 exactly. UserError where `text` is no token count."""
    from decimal import Decimal, InvalidOperation

    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}.get(text[-1:].lower(), 1)
    try:
        value = Decimal(text[:-1] if scale != 1 else text) * scale
        if not value.is_finite() or float(value) == float("inf"):  # 'inf', 'nan', '1e400'
            raise InvalidOperation
    except (InvalidOperation, ValueError):  # 'abc'
        raise UserError(f"not a token count: {text!r} (try 2M, 500k or 2000000)") from None
    if value < 1:  # 0.4 would otherwise read as 0
        raise UserError(f"not a token count: {text!r} is less than one token (try 2M, 500k or 2000000)")
    if value != value.to_integral_value():  # 1.5 would otherwise read as 1
        raise UserError(f"not a token count: {text!r} is not a whole number of tokens "
                        f"(try {int(value)} or {int(value) + 1}, or a suffix: 1.5M is 1500000)")
    return int(value)


def default_micro_batch(n_params: int, seq_len: int) -> int:
    """Sequences per forward pass by default: 65536 tokens' worth up to LARGE_MICRO_BATCH_MAX_PARAMS
    non-embedding parameters, else 32768 (`--micro-batch-size` overrides; the batch is then
    accumulated). RunConfig takes the smaller of this and its batch."""
    return max(1, (65536 if n_params <= LARGE_MICRO_BATCH_MAX_PARAMS else 32768) // seq_len)


class TokensError(UserError):
    """A run's token count that it cannot train (fewer than one batch, more than MAX_TOKENS). `problem`
    is the message without its fix: a sweep names the grid setting that gave the tokens instead."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem + (f"; {fix}" if fix else ""))
        self.problem = problem


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run. ``None`` fields are filled by `resolved()` from the size rules."""

    family: str
    size: str
    recipe: str  # a preset name (`scaling recipes`)
    tokens: int  # training tokens D (rounded down to whole steps)
    seed: int = 0
    data: str = "builtin"  # "builtin" or a prepared data dir (`scaling data prepare`)
    vocab_size: int | None = None  # builtin corpus only; None -> scaling.data.BUILTIN_VOCAB_SIZE
    seq_len: int | None = None  # None -> ModelSize.seq_len: 256 for micro sizes, 1024 otherwise
    batch_size: int | None = None  # sequences per step; None -> hyperparams.batch_sequences (DeepSeek rule)
    micro_batch_size: int | None = None  # sequences per forward (gradient accumulation); None -> default_micro_batch
    lr_mult: float = 1.0  # multiplies every base lr of scaling.optim
    schedule: str = "wsd"  # "wsd" | "cosine"
    warmup: float = 0.0  # fraction of steps (nanochat: 0)
    decay: float = 0.2  # WSD: fraction of steps in the final linear decay (nanochat: 0.2)
    final_lr: float = 0.0  # lr multiplier at the end of the decay, in [0, 1]
    grad_clip: float = 1.0  # global grad-norm clip; 0 disables
    eval_interval: int | None = None  # steps; None -> about 8 evaluations per run
    eval_tokens: int = 65536  # size of the fixed validation set (capped by the val split)
    checkpoint_interval: int | None = None  # steps; None -> at every evaluation
    spike_nats: float = 1.0  # divergence: train loss above running min + spike_nats ...
    spike_steps: int = 50  # ... for this many consecutive steps (or any non-finite loss)
    precision: str = "auto"  # "auto" (bf16-mixed on CUDA, 32-true on CPU) or a Lightning precision
    compile: bool | str = False  # torch.compile the model: True (default mode) or a mode in COMPILE_MODES
    fault_nan_at_step: int | None = None  # TEST ONLY: the loss becomes NaN from this step on

    def resolved(self) -> "RunConfig":
        """Fill the None fields from the rules; validate names (UserError)."""
        s = self.model_size()
        if self.schedule not in hyperparams.SCHEDULES:
            raise UserError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(hyperparams.SCHEDULES)}")
        self._check_ranges()
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise UserError(f"seed must be a whole number from 0 to 2**32 - 1, got {self.seed!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_MODES:
            raise UserError(f"compile must be true, false or one of {', '.join(COMPILE_MODES)} (got {self.compile!r})")
        for name in ("seq_len", "batch_size", "micro_batch_size", "eval_interval", "checkpoint_interval"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise UserError(f"{name} must be a positive whole number or left unset (the rule), got {value!r}")
        if not isinstance(self.data, str) or not self.data.strip():  # ("" would read as the working folder, Path(""))
            raise UserError(f"data must be builtin (the built-in corpus) or a folder that `scaling data prepare` made, "
                            f"got {self.data!r}")
        vocab_size = self.vocab_size
        if self.data != "builtin" and vocab_size is not None:  # else ignored, yet a part of the run's id
            raise UserError(f"vocab_size {vocab_size} applies to the built-in corpus only: the prepared dir {self.data} "
                            "has its own (its meta.json); leave it unset, or prepare the corpus again with "
                            "`scaling data prepare ... --vocab-size N`")
        if self.data == "builtin":  # (a sweep's plan refused none: its launch did, naming train's --vocab-size)
            from scaling.data import BUILTIN_VOCAB_SIZE, check_vocab_size

            vocab_size = BUILTIN_VOCAB_SIZE if vocab_size is None else vocab_size
            check_vocab_size(vocab_size, "vocab_size")
        # (after the other checks: a sweep blames a TokensError on its token budgets, not on [train])
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, (int, float)) or not 1 <= self.tokens <= MAX_TOKENS:
            got = f"{self.tokens:.6g}" if isinstance(self.tokens, (int, float)) else repr(self.tokens)
            raise TokensError(f"tokens must be a number from 1 to {MAX_TOKENS:.0e}, got {got}")
        batch_size, seq_len = self._batch_shape(self.tokens)
        if self.eval_tokens < seq_len:  # (the validation set is whole windows: it would hold one, not what was asked)
            raise UserError(f"eval_tokens {self.eval_tokens} is less than one sequence (seq_len {seq_len}): the "
                            f"validation set holds whole windows of seq_len tokens; give at least {seq_len}, or a shorter seq_len")
        micro_batch_size = min(batch_size, self.micro_batch_size or default_micro_batch(s.n_params, seq_len))
        if batch_size % micro_batch_size:
            given = "" if self.micro_batch_size else f" (the default for {s.name} at seq_len {seq_len})"
            divisor = max(d for d in range(1, micro_batch_size + 1) if batch_size % d == 0)
            raise UserError(f"batch_size {batch_size} is not a multiple of micro_batch_size {micro_batch_size}{given}; "
                            f"set a batch_size that is, or micro_batch_size {divisor} (the largest that divides it)")
        if int(self.tokens) < batch_size * seq_len:  # the run would train a whole batch: more than asked
            raise TokensError(f"tokens {int(self.tokens):,} is less than one batch ({count(batch_size, 'sequence')} x {seq_len} "
                              f"tokens = {batch_size * seq_len:,})", "raise tokens or set a smaller batch_size/seq_len")
        # A recipe file by its absolute path (as sweeps name it): config.json then serves from any folder.
        # (The run's id hashes the file's content instead: `run_id`.)
        recipe = str(Path(self.recipe).expanduser().resolve()) if self.recipe.endswith(".toml") else self.recipe
        shaped = dataclasses.replace(self, recipe=recipe, tokens=int(self.tokens), vocab_size=vocab_size,
                                     seq_len=seq_len, batch_size=batch_size, micro_batch_size=micro_batch_size)
        eval_interval = self.eval_interval or max(1, shaped.whole_steps() // 8)
        return dataclasses.replace(shaped, eval_interval=eval_interval,
                                   checkpoint_interval=self.checkpoint_interval or eval_interval)

    def _batch_shape(self, tokens: float) -> tuple[int, int]:
        """(sequences per step, seq_len): the given ones, else the rules' (the batch rule's grows with tokens)."""
        s = self.model_size()
        seq_len = self.seq_len or s.seq_len
        return self.batch_size or hyperparams.batch_sequences(s.n_params, tokens, seq_len), seq_len

    def min_tokens(self) -> int:
        """The fewest tokens this run can train (`resolved` refuses fewer than one batch). The batch rule's
        batch grows with tokens, so step up to the first count that holds the batch it gets."""
        tokens = 1
        while tokens < (need := math.prod(self._batch_shape(tokens))):
            tokens = need
        return tokens

    def _check_ranges(self) -> None:
        """The float settings and the sizes a rule would otherwise fill: finite and in range, or a run
        would crash (NaN warmup), diverge at once (NaN or infinite lr) or silently mean something else
        (a decay over more than the run, a vocabulary of 0 read as the default)."""
        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
            v = getattr(self, name)
            ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
                  and (v > lo if lo_open else v >= lo) and v <= hi)
            if not ok:
                raise UserError(f"{name} must be a finite number {'>' if lo_open else '>='} {lo:g}"
                                + (f" and <= {hi:g}" if hi < math.inf else "") + f", got {v!r}")

        number("lr_mult", 0, MAX_LR_MULT, lo_open=True)
        number("warmup", 0, 1)
        number("decay", 0, 1)
        number("final_lr", 0, 1)  # (above 1 the "decay" would raise the lr: a typo of a base lr)
        number("grad_clip", 0)
        number("spike_nats", 0, lo_open=True)
        if self.schedule == "wsd" and self.warmup + self.decay > 1:  # (cosine reads no decay: its warmup may be 1)
            raise UserError(f"warmup {self.warmup:g} + decay {self.decay:g} is more than the whole run; "
                            "keep their sum at most 1")
        for name in ("vocab_size", "eval_tokens", "spike_steps"):
            v = getattr(self, name)
            if (v is not None or name != "vocab_size") and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise UserError(f"{name} must be a positive whole number"
                                + (" or left unset (the corpus's)" if name == "vocab_size" else "") + f", got {v!r}")
        v = self.fault_nan_at_step
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise UserError(f"fault_nan_at_step must be a step number (0 or more) or left unset, got {v!r}")

    def model_size(self) -> ModelSize:
        return model_size(self.family, self.size)

    @property
    def steps(self) -> int:
        """Optimizer steps: whole batches in `tokens` (at least one: `resolved` refuses fewer tokens)."""
        return self.resolved().whole_steps()

    def whole_steps(self) -> int:
        """`steps` of a config whose batch shape is resolved (`resolved()`): the whole batches of batch_size x
        seq_len in its `tokens`. The one rule that counts a run's steps: `whole_batch_tokens`, `evaluated_tokens`
        and `resolved`'s default eval_interval count them by it."""
        return self.tokens // (self.batch_size * self.seq_len)

    @property
    def trained_tokens(self) -> int:
        """The tokens the run trains on: its whole steps' (`tokens` rounded down to whole batches)."""
        return self.resolved().whole_batch_tokens()  # (resolved once)

    def evaluated_tokens(self) -> int:
        """Of a config already resolved (`resolved()`): the tokens its evaluations read in all, forward only:
        `evaluation_count` passes over the validation set, eval_tokens in whole windows of seq_len (`val_windows`;
        fewer where the corpus's validation split is shorter, which no shipped corpus's is)."""
        windows = self.eval_tokens // self.seq_len
        return evaluation_count(self.whole_steps(), self.eval_interval) * windows * self.seq_len

    def whole_batch_tokens(self) -> int:
        """`trained_tokens` of a config already resolved (`resolved()`): its `tokens` rounded down to whole
        batches of batch_size x seq_len, the `steps` it trains and the D its result records."""
        return self.whole_steps() * self.batch_size * self.seq_len

    @property
    def run_id(self) -> str:
        """Stable short hash of the resolved config (sorted JSON, sha256)."""
        return self.run_id_of(self.resolved())

    def run_id_of(self, resolved: "RunConfig") -> str:
        """`run_id` given this config's `resolved()`, for a caller that needs both (resolving once)."""
        blob = json.dumps(self.identity(resolved), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def identity(self, resolved: "RunConfig | None" = None) -> dict:
        """What `run_id` hashes: the resolved fields (`resolved`, this config's `resolved()`, when
        given), a recipe file by its content."""
        fields = (resolved or self.resolved()).to_dict()
        if self.recipe.endswith(".toml") and Path(self.recipe).is_file():
            from scaling.recipes import recipe_content

            # the recipe's content, not its path: the same file moved, or a checkout at another path (a
            # laptop's, a cluster's), keeps its runs' ids (and a file built on another file, both files' content)
            fields["recipe"] = "file"
            fields["recipe_sha256"] = hashlib.sha256(recipe_content(self.recipe)).hexdigest()
        return fields

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        if not isinstance(d, dict):
            raise UserError(f"a run config is a JSON object of named fields (family, size, recipe, tokens, ...), "
                            f"not {type(d).__name__ if d is not None else 'null'}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"unknown run config field(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        missing = [n for n in ("family", "size", "recipe", "tokens") if n not in d]
        if missing:
            raise UserError(f"run config lacks {', '.join(missing)}")
        # names and paths are text (the numbers are checked by `resolved`, with their ranges)
        for f in dataclasses.fields(cls):
            if f.type == "str" and f.name in d and not isinstance(d[f.name], str):
                raise UserError(f"run config field {f.name} must be text (a name or a path), got {d[f.name]!r}")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> "RunConfig":
        if Path(path).is_dir():  # (a run's folder for its config.json)
            inside = Path(path) / "config.json"
            raise UserError(f"run config {path} is a folder; give a run's config.json"
                            + (f": {inside}" if inside.is_file() else " (a run folder holds one)"))
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except FileNotFoundError:  # (a path mistyped: nothing to restore)
            raise UserError(f"run config {path} does not exist; give the config.json a run wrote (RUN_DIR/config.json), "
                            "or describe the run with `scaling train`'s options instead of --config") from None
        except UnicodeDecodeError as e:  # (a binary file, a checkpoint passed by mistake)
            raise UserError(f"cannot read run config {path} (not UTF-8 text: byte {e.object[e.start]:#04x} at offset "
                            f"{e.start}); give the config.json a run wrote") from None
        except (OSError, json.JSONDecodeError, UserError) as e:
            said = f"not JSON: {e}" if isinstance(e, json.JSONDecodeError) else e
            if isinstance(e, json.JSONDecodeError) and Path(path).suffix.lower() == ".toml":
                said = f"{said}; a TOML file: a recipe goes to --recipe, a sweep spec to `scaling sweep`"
            raise UserError(f"cannot read run config {path} ({said}); give the config.json a run wrote (a run "
                            "directory's own is its resolved config: restore it, or train into another --out)") from None


def evaluates_after(step: int, steps: int, eval_interval: int) -> bool:
    """Whether a run of `steps` optimizer steps evaluates after its step `step` (from 1): every eval_interval steps,
    and after its last (`scaling.train.RunDirectory`)."""
    return step % eval_interval == 0 or step == steps


def evaluation_count(steps: int, eval_interval: int) -> int:
    """How many steps of a run of `steps` optimizer steps `evaluates_after`, counted without visiting each."""
    return steps // eval_interval + (1 if steps % eval_interval else 0)


def differences(there: RunConfig, here: RunConfig) -> str:
    """What sets two runs apart, as a user reads it: the fields their ids hash that differ, in
    RunConfig's order (family, size, recipe, tokens first; the ones a rule derives from them later)."""
    a, b = there.identity(), here.identity()
    said = []
    for k in (f.name for f in dataclasses.fields(RunConfig)):
        if k == "recipe" and a[k] != b[k]:  # (a preset and a file: each as given, not as "file")
            said.append(f"recipe {there.recipe!r} there, {here.recipe!r} here")
        elif k == "recipe" and a.get("recipe_sha256") != b.get("recipe_sha256"):  # two files
            said.append("the recipe file's content")
        elif a.get(k) != b.get(k):
            said.append(f"{k} {a.get(k)!r} there, {b.get(k)!r} here")
    return "; ".join(said)
