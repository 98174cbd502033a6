"""Recipes: one QuantSpec (or None = BF16) per GEMM operand, plus the layer policy.

A linear layer runs three GEMMs (RECIPES.md):
    fprop  Y  = X  . W^T   K = in_features     operands fprop.x, fprop.w
    dgrad  dX = dY . W     K = out_features    operands dgrad.dy, dgrad.w
    wgrad  dW = dY^T . X   K = tokens          operands wgrad.dy, wgrad.x
Each operand is quantized along its own GEMM's K. Presets follow RECIPES.md's table by name.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from dataclasses import dataclass, fields, replace
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from scaling.errors import UserError, did_you_mean
from scaling.quantspec import QuantSpec

OPERANDS = ("fprop_x", "fprop_w", "dgrad_dy", "dgrad_w", "wgrad_dy", "wgrad_x")
GEMMS = {"fprop": ("fprop_x", "fprop_w"), "dgrad": ("dgrad_dy", "dgrad_w"), "wgrad": ("wgrad_dy", "wgrad_x")}
# A results table's columns of each run's `Recipe.forward_format` and `backward_format` (`sweep collect` writes
# them; `scaling fit --shared-efficiencies` shares efficiencies by them)
FORMAT_COLUMNS = ("forward_format", "backward_format")


def operand_name(field_name: str) -> str:
    """'fprop_x' -> 'fprop.x' (the name users and TOML files use)."""
    return field_name.replace("_", ".", 1)


@dataclass(frozen=True)
class Recipe:
    """How every quantized linear layer runs its three GEMMs. None means the operand stays BF16."""

    name: str
    fprop_x: QuantSpec | None = None
    fprop_w: QuantSpec | None = None
    dgrad_dy: QuantSpec | None = None
    dgrad_w: QuantSpec | None = None
    wgrad_dy: QuantSpec | None = None
    wgrad_x: QuantSpec | None = None
    # Transformer blocks kept in BF16 (indices; negative counts from the end).
    high_precision_blocks: tuple[int, ...] = ()
    # Quartet II: the backward GEMMs quantize the forward-quantized W and X, not the BF16 originals.
    backward_from_forward: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "high_precision_blocks", tuple(self.high_precision_blocks))
        for gemm, (a, b) in GEMMS.items():
            sa, sb = getattr(self, a), getattr(self, b)
            ta = (sa.transform, sa.signs) if sa else (0, "ones")
            tb = (sb.transform, sb.signs) if sb else (0, "ones")
            if ta != tb:
                said = (f'transform = {spec.transform}, signs = "{spec.signs}" for {operand_name(o)}' if spec
                        else f"{operand_name(o)} in BF16 (no transform)" for o, spec in ((a, sa), (b, sb)))
                raise ValueError(
                    f"{gemm}: both operands must get the same transform along K (so the product is unchanged), "
                    f"got {' and '.join(said)}: give [{operand_name(a)}] and [{operand_name(b)}] the same transform "
                    "and signs")

    def spec(self, operand: str) -> QuantSpec | None:
        return getattr(self, operand.replace(".", "_"))

    @property
    def is_quantized(self) -> bool:
        return any(getattr(self, o) is not None for o in OPERANDS)

    @property
    def bf16_operands(self) -> bool:
        """Whether every quantized GEMM operand is exact in BF16 (QuantSpec.bf16_exact), so the GEMMs
        can run on BF16 tensor cores without rounding it."""
        return all(getattr(self, o) is None or getattr(self, o).bf16_exact for o in OPERANDS)

    def gemm_in_bf16(self, gemm: str) -> bool:
        """Whether both of this GEMM's operands are quantized to values exact in BF16 (QuantSpec.bf16_exact):
        then BF16 products with FP32 accumulation give the GEMM without rounding an operand."""
        return all(getattr(self, o) is not None and getattr(self, o).bf16_exact for o in GEMMS[gemm])

    def describe_gemm(self, gemm: str) -> str:
        """One GEMM's operands for `scaling recipes`' table, with every field that tells two specs
        apart (`QuantSpec.describe`); under backward_from_forward, the backward's W and X are marked as
        the forward's quantized operands."""
        a, b = GEMMS[gemm]
        sa, sb = getattr(self, a), getattr(self, b)
        if sa is None and sb is None:
            return "bf16"
        la, lb = a.split("_")[1], b.split("_")[1]
        if self.backward_from_forward and gemm != "fprop":
            lb = f"fprop's {lb}"
        da = sa.describe() if sa else "bf16"
        db = sb.describe() if sb else "bf16"
        return f"{la}: {da} | {lb}: {db}" if da != db else f"{la}, {lb}: {da}"

    @property
    def forward_format(self) -> str:
        """What its fprop GEMM's operands are, as `scaling recipes` shows them ("x, w: MX e2m1 1x32 e8m0"; "bf16"):
        recipes with equal ones share a parameter efficiency effN in a shared-efficiency fit (docs/fits.md). Its
        BF16 blocks as `formats` writes them where no model depth is known."""
        return self.formats()[0]

    @property
    def backward_format(self) -> str:
        """What its dgrad and wgrad GEMMs' operands are ("bf16" where both are BF16), as `forward_format`: recipes
        with equal ones share a data efficiency effD."""
        return self.formats()[1]

    def formats(self, depths: Iterable[int] = ()) -> tuple[str, str]:
        """(forward, backward) formats, the BF16 blocks written as `canonical_blocks` writes them for models of
        `depths` blocks (`sweep collect` gives its table's depths): two recipes that quantize the same blocks of
        those models get equal strings ([0, -1] and [-1, 0] always; [0, 11] too on 12-block models alone)."""
        dgrad, wgrad = self.describe_gemm("dgrad"), self.describe_gemm("wgrad")
        sides = (self.describe_gemm("fprop"), "bf16" if dgrad == wgrad == "bf16" else f"dgrad {dgrad}; wgrad {wgrad}")
        blocks = canonical_blocks(self.high_precision_blocks, depths)
        forward, backward = (said + self._blocks_note(said, blocks) for said in sides)
        return forward, backward

    @staticmethod
    def _blocks_note(said: str, blocks: tuple[int, ...]) -> str:
        """A recipe that leaves transformer blocks in BF16 trains otherwise than one of the same GEMMs that does not:
        its formats say which blocks, so the two share no efficiency. A side that is BF16 throughout (`said`) is
        BF16 in those blocks too: it is the baseline's, whatever blocks the other side leaves in BF16."""
        if said == "bf16" or not blocks:
            return ""
        return f" (bf16 blocks {', '.join(map(str, blocks))})"

    def to_dict(self) -> dict:
        d = {"name": self.name, "source": self.source,
             "high_precision_blocks": list(self.high_precision_blocks),
             "backward_from_forward": self.backward_from_forward}
        for o in OPERANDS:
            s = getattr(self, o)
            d[operand_name(o)] = s.to_dict() if s else None
        return d

    @classmethod
    def from_toml(cls, path: str | Path) -> "Recipe":
        """A user-defined recipe. Errors name the file and the field. Its `base` names a preset, or another
        recipe file that is built first (`recipe_chain`)."""
        return recipe_from_chain(recipe_chain(path))


def recipe_from_chain(chain: list[tuple[Path, dict]]) -> Recipe:
    """The recipe a chain of recipe files builds (`recipe_chain`: the file given first, its last base last), each file
    on the recipe of the one it names."""
    files = [file for file, _ in chain]
    recipe = None
    for i in reversed(range(len(chain))):
        recipe = recipe_from_dict(chain[i][1], where=in_chain(files[:i + 1]), base=recipe,
                                  source=f"user recipe ({built_on(chain[i:])})")
    return recipe


def built_on(chain: list[tuple[Path, dict]]) -> str:
    """A recipe file's chain of bases (`recipe_chain`) in short, as `scaling recipes` shows where a recipe comes from:
    the file's path, then each base's file name and the preset at the end ('bad/c1.toml on t2.toml on t1.toml on
    nvfp4'; a file on no base: its path alone)."""
    preset = chain[-1][1].get("base")
    names = [str(chain[0][0])] + [file.name for file, _ in chain[1:]] + ([preset] if isinstance(preset, str) else [])
    return " on ".join(names)


def in_chain(files: list[Path]) -> str:
    """How an error names the last of `files`, a recipe file's chain of bases (`recipe_chain`) down to it: its path
    where it is the file the user gave; else that file, this base and the chain between, so that the user, who
    named the first, learns how the error's file comes into it."""
    if len(files) == 1:
        return str(files[0])
    return f"recipe file {files[0]}, in its base {files[-1]} ({' -> '.join(map(str, files))})"


def read_toml(path: str | Path, what: str, where: str | None = None) -> dict:
    """The TOML file at `path` as a dict; a file that is missing, unreadable or not TOML is a UserError naming it
    as `what` ("recipe file", "format file"), its errors in the file's text after `where` (default: the path)."""
    path = Path(path)
    where = where or str(path)
    try:
        # UTF-8 as TOML says, whatever the locale; "-sig" drops the byte-order mark some Windows
        # editors write, which tomllib reports as an "invalid statement" at line 1, column 1
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        near = near_file(path)
        raise UserError(f"{what} {path} does not exist{f' (did you mean {path.parent / near}?)' if near else ''}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                        f"save the {what} as UTF-8") from None
    except OSError as e:
        said = "" if where == str(path) else f"{where}: "
        raise UserError(f"{said}cannot read {what} {path} ({type(e).__name__}: {e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{where}: not valid TOML ({e})") from None


def near_file(path: Path) -> str | None:
    """The name of a .toml file in a missing file's folder close to its name (a typo: `my_chlid.toml` for
    `my_child.toml`; compared by name, not path, which a shared folder would make alike); else None."""
    try:
        siblings = sorted(p.name for p in path.parent.glob("*.toml") if p.is_file())
    except OSError:  # (an unreadable folder: no suggestion)
        return None
    close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.75)
    return close[0] if close else None


def names_recipe_file(base: object) -> bool:
    """Whether a recipe's `base` names another recipe file (a path ending in .toml, as `get_recipe` takes one),
    not a preset."""
    return isinstance(base, str) and base.endswith(".toml")


def recipe_chain(path: str | Path) -> list[tuple[Path, dict]]:
    """The recipe file at `path`, then the recipe file its `base` names (relative to the file that names it, or
    absolute), and so on, as (path, TOML data), down to the one built on a preset or on nothing. A base that is
    missing, or one that leads back to a file of the chain, is one UserError naming the chain."""
    chain = [(Path(path), read_toml(path, "recipe file"))]
    seen = {os.path.realpath(path)}
    while names_recipe_file(base := chain[-1][1].get("base")):
        naming = chain[-1][0]
        file = naming.parent / Path(base).expanduser()  # (an absolute base stays itself)
        said = " -> ".join(str(p) for p, _ in chain) + f" -> {file}"
        if os.path.realpath(file) in seen:
            raise UserError(f"recipe file {chain[0][0]}: its bases go round in a cycle ({said}); a recipe cannot be "
                            f"built on itself: give {naming} a base that is not in this chain")
        if not file.is_file():
            what = "is a folder" if file.is_dir() else "does not exist"
            hint = (f" (the preset is named without .toml: base = \"{Path(base).stem}\")"
                    if not file.exists() and Path(base).stem in PRESETS else "")
            if not hint and not file.exists() and (near := near_file(file)):
                hint = f" (did you mean base = \"{Path(base).parent / near}\"?)"
            raise UserError(f"recipe file {chain[0][0]}: the base {base!r} of {naming} {what} ({said}){hint}; a base "
                            "file's path is relative to the file that names it, or absolute")
        seen.add(os.path.realpath(file))
        chain.append((file, read_toml(file, "recipe file", in_chain([p for p, _ in chain] + [file]))))
    return chain


def recipe_content(path: str | Path) -> bytes:
    """A recipe file's content, as a run's id hashes it and the run's folder keeps it (recipe.toml): the file's
    bytes; for a file whose `base` is another recipe file, a self-contained recipe file instead, of the recipe
    the chain builds (every operand's every field), after the text of each file of the chain as comments. So a
    change to any file of the chain changes it (as any change to a lone file does), no path enters it, and the
    run's copy reads (and hashes) the same without the base files."""
    raw = Path(path).read_bytes()
    if b"base" not in raw:  # (the common file, and the cheap test: status hashes every run's recipe)
        return raw
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):  # (refused, with the place named, where it is read)
        return raw
    if not names_recipe_file(data.get("base")):
        return raw
    chain = recipe_chain(path)  # (read once: its files' data build the recipe below)
    texts = []
    for i, (file, _) in enumerate(chain):
        title = "the recipe file" if i == 0 else f"its base {chain[i - 1][1]['base']!r}"
        texts.append(f"{KEPT_TEXT_MARK}{title}\n" + _as_comments(file))
    header = ("# A recipe built on other recipe files (`base`), written out whole: what a run under it keeps and what\n"
              "# its id hashes. The files' text, as it was:\n#\n")
    return (header + "".join(texts) + "\n" + recipe_toml(recipe_from_chain(chain), data.get("source"))).encode()


# The line before each file's text in a `recipe_content` of a chain. A text's lines are "# " and the file's line, so
# only a file line that starts "---- " (a bare key of dashes, or inside a multi-line string) reads as one: then
# `edited_recipe_files` may name the wrong file of the chain, nothing else reads it
KEPT_TEXT_MARK = "# ---- "


def _as_comments(file: Path) -> str:
    """A recipe file's text as `recipe_content` keeps it: each line commented (trailing spaces dropped)."""
    text = file.read_bytes().decode("utf-8-sig")
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def _kept_texts(kept: bytes) -> list[str]:
    """The files' texts a `recipe_content` of a chain keeps, as `_as_comments` wrote them, in the chain's order;
    [] for a lone file's content (its bytes)."""
    texts: list[str] = []
    for line in kept.decode("utf-8-sig", errors="replace").splitlines():
        if line.startswith(KEPT_TEXT_MARK):
            texts.append("")
        elif texts and line.startswith("#"):
            texts[-1] += line + "\n"
        elif texts:  # (the blank line before the recipe written out whole)
            break
    return texts


def edited_recipe_files(path: str | Path, kept: bytes) -> str:
    """Which files of the chain of the recipe file at `path` (`recipe_chain`) differ from those a run's recipe.toml
    (`kept`: `recipe_content` when the run started) was written from, in words: 'the recipe file mine.toml', 'the
    base file b.toml of mine.toml (mine.toml -> b.toml)', 'the recipe file mine.toml and its base file b.toml (...)'.
    Where no file's kept text tells (a lone file's content keeps no text), the recipe file."""
    files = [file for file, _ in recipe_chain(path)]
    kept_texts = _kept_texts(kept)
    edited = [i for i, file in enumerate(files) if i < len(kept_texts) and _as_comments(file) != kept_texts[i]]
    if not edited or edited == [0]:
        return f"the recipe file {files[0]}"
    bases = [str(files[i]) for i in edited if i > 0]
    said = f"base file{'s' if len(bases) > 1 else ''} {', '.join(bases)}"
    chain = " -> ".join(map(str, files[:edited[-1] + 1]))
    if edited[0] == 0:
        return f"the recipe file {files[0]} and its {said} ({chain})"
    return f"the {said} of {files[0]} ({chain})"


def recipe_toml(recipe: Recipe, source: str | None = None) -> str:
    """The TOML of a recipe file that gives `recipe` without a base: every operand's every QuantSpec field
    (`Recipe.from_toml` of it is `recipe`, but for its `source`: `source`, else the file's default)."""
    lines = [f"name = {_toml_value(recipe.name)}"]
    if source is not None:
        lines.append(f"source = {_toml_value(source)}")
    lines += [f"high_precision_blocks = {_toml_value(recipe.high_precision_blocks)}",
              f"backward_from_forward = {_toml_value(recipe.backward_from_forward)}"]
    for gemm, ops in GEMMS.items():
        bf16 = [o for o in ops if getattr(recipe, o) is None]
        if bf16:
            lines += ["", f"[{gemm}]", *(f'{o.split("_")[1]} = "bf16"' for o in bf16)]
        for o in ops:
            spec = getattr(recipe, o)
            if spec is not None:
                # (TOML has no None: a per-tensor block is "tensor", the whole grid's cap is left to the default)
                table = {k: ("tensor" if k == "block" and v is None else v) for k, v in spec.to_dict().items()}
                lines += ["", f"[{operand_name(o)}]",
                          *(f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None)]
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    """A TOML value of a recipe's: a string (a JSON string is a TOML basic string, where non-ASCII is left as
    it is, but for DEL, which TOML takes escaped only), a boolean, a number (finite: QuantSpec refuses others), or
    a list of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def check_plain_name(name: object, where: str) -> None:
    """Refuse a name (of a recipe, of a format) that is no plain string: results, fits, reports and tables
    show it as it is."""
    if not isinstance(name, str):
        raise UserError(f'{where}: name must be a string (got {name!r}); quote it, e.g. name = "mine"')
    if name != name.strip() or not name.isprintable():
        raise UserError(f"{where}: name {name!r} has spaces around it or unprintable characters; "
                        "results, fits and reports show it as it is: write it plainly")


def canonical_blocks(blocks: Iterable[int], depths: Iterable[int] = ()) -> tuple[int, ...]:
    """`blocks` (high_precision_blocks: an index, negative from the end) in one spelling for each set of blocks they
    keep in models of `depths` blocks (those depths where every index names a block; `check_blocks` refuses the
    rest), so that recipes keeping the same blocks read the same. One depth: the blocks' numbers, 0 to depth - 1
    ([0, -1] and [0, 11] on 12 blocks: 0, 11). Several: every index, within the shallowest model's range, that names
    a kept block at each depth ([0, -1] over 5 and 10 blocks: 0, -1, as [0, 4] cannot be). None: the indices without
    repeats, those from the start first ([-1, 0]: 0, -1)."""
    blocks = set(blocks)
    fit = sorted({d for d in depths if all(-d <= i < d for i in blocks)})
    if not blocks or not fit:
        return tuple(sorted(blocks, key=_from_start_first))
    kept = {d: {i % d for i in blocks} for d in fit}
    if len(fit) == 1:
        return tuple(sorted(kept[fit[0]]))
    shallowest = fit[0]
    named = (i for i in range(-shallowest, shallowest) if all(i % d in kept[d] for d in fit))
    return tuple(sorted(named, key=_from_start_first))


def _from_start_first(index: int) -> tuple[bool, int]:
    """Block indices in reading order: 0, 1, ..., then -2, -1."""
    return index < 0, index


def recipe_from_dict(data: dict, where: str = "recipe", base: Recipe | None = None,
                     source: str | None = None) -> Recipe:
    """Build a Recipe from TOML-shaped data: top-level keys plus [fprop.x]-style operand tables.

    `base = "nvfp4"` starts from a preset, and `base = "other.toml"` from the recipe of that file: `base`, which
    the caller built from it (`Recipe.from_toml`); an operand table changes the base's operand field by field
    (the fields it does not name keep the base's values; without a base, QuantSpec's defaults), and
    an operand given as "bf16" clears it. Its `source` is the data's, else `source`, else 'user recipe (where)'.
    """
    data = dict(data)
    allowed = {"name", "base", "source", "high_precision_blocks", "backward_from_forward", "fprop", "dgrad", "wgrad"}
    unknown = set(data) - allowed
    if "grid" in unknown:  # (a sweep spec given for a recipe read "grid (did you mean wgrad?)")
        raise UserError(f"{where}: this is a sweep spec (it has a [grid] table), not a recipe file: `scaling sweep "
                        "plan SPEC` reads it; a recipe file holds name, base and [fprop]/[dgrad]/[wgrad] operand tables")
    if unknown:
        said = ", ".join(key + did_you_mean(key, allowed) for key in sorted(unknown))
        raise UserError(f"{where}: unknown key(s) {said}; allowed: {', '.join(sorted(allowed))}")
    if "name" not in data or data["name"] == "":
        raise UserError(f"{where}: `name` (a string) is required")
    check_plain_name(data["name"], where)
    # results, fits and reports name runs by it: they would pass for the preset's, or in another case
    # be taken for a typo of it
    preset = {n.lower(): n for n in PRESETS}.get(data["name"].lower())
    if preset is not None:
        said = "a preset's" if preset == data["name"] else f"preset {preset}'s in other letter case"
        raise UserError(f"{where}: name {data['name']!r} is {said}; give the recipe a name of its own "
                        f"(e.g. {preset}_mine)")
    if "source" in data and not isinstance(data["source"], str):
        raise UserError(f"{where}: source must be a string (where the recipe comes from), got {data['source']!r}")
    if names_recipe_file(data.get("base")):
        if base is None:  # (a dict read from no file: a path has nothing to be relative to)
            raise UserError(f"{where}: base {data['base']!r} names a recipe file, which only a recipe file can name")
        if base.name == data["name"]:  # results, fits and reports would take the two for one recipe
            raise UserError(f"{where}: name {data['name']!r} is its base's ({data['base']}); give the recipe a name "
                            f"of its own (e.g. {data['name']}_mine)")
    elif "base" in data and (not isinstance(data["base"], str) or data["base"] not in PRESETS):
        hint = did_you_mean(data["base"], PRESETS) if isinstance(data["base"], str) else ""
        raise UserError(f"{where}: base {data['base']!r} is not a preset{hint}; choose one of {', '.join(PRESETS)}, "
                        "or give a recipe .toml file (its path relative to this file, or absolute)")
    else:
        base = PRESETS[data["base"]] if "base" in data else Recipe(name=data["name"])
    changes: dict = {"name": data["name"], "source": data.get("source", source or f"user recipe ({where})")}
    if "high_precision_blocks" in data:
        hp = data["high_precision_blocks"]
        if not isinstance(hp, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in hp):
            raise UserError(f"{where}: high_precision_blocks must be a list of block indices, e.g. [0, -1]")
        changes["high_precision_blocks"] = tuple(hp)
    if "backward_from_forward" in data:
        if not isinstance(data["backward_from_forward"], bool):
            raise UserError(f"{where}: backward_from_forward must be true or false")
        changes["backward_from_forward"] = data["backward_from_forward"]
    for gemm, ops in GEMMS.items():
        table = data.get(gemm, {})
        if not isinstance(table, dict):
            raise UserError(f"{where}: [{gemm}] must be a table with operand tables like [{gemm}.{ops[0].split('_')[1]}]")
        names = {o.split("_")[1]: o for o in ops}
        for key, value in table.items():
            if key not in names:
                raise UserError(f"{where}: unknown operand {gemm}.{key}; {gemm} has {', '.join(gemm + '.' + n for n in names)}")
            changes[names[key]] = spec_from_table(value, f"{where}: {gemm}.{key}", getattr(base, names[key]))
    try:
        return replace(base, **changes)
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None


def spec_from_table(value, where: str, base: QuantSpec | None) -> QuantSpec | None:
    """An operand table (a recipe's [fprop.x], or a format file's fields: `scaling.diagnostics.load_format`) on top
    of the base's spec (None: QuantSpec's defaults), as a QuantSpec; "bf16" gives None. Errors name `where`."""
    if value == "bf16":
        return None
    if not isinstance(value, dict):
        raise UserError(f"{where}: must be a table of QuantSpec fields or the string \"bf16\" (got {value!r})")
    known = {f.name for f in fields(QuantSpec)}
    for key in value:
        if key not in known:
            raise UserError(f"{where}.{key}: unknown field{did_you_mean(key, known)}; QuantSpec fields are "
                            f"{', '.join(sorted(known))}")
    if value.get("block") == "tensor":  # TOML has no None: the file's word for per-tensor scaling
        value = {**value, "block": None}
    if value.get("cap") == "none":  # and for the whole grid (a base's cap taken off: nvfp4_cap4's)
        value = {**value, "cap": None}
    elif isinstance(value.get("cap"), str):
        raise UserError(f'{where}.cap: {value["cap"]!r} is not a cap; give a level of the grid, e.g. 4, or "none" '
                        "for the whole grid")
    merged = {**(base.to_dict() if base else {}), **value}
    if (value.get("four_over_six") is True and "scale_bound" not in value and not (base and base.four_over_six)
            and _reads_scale_bound(merged)):
        # 4/6 maps the tensor's amax to an E4M3 block scale of 256, not 448 (RECIPES.md; SIX_FOUR), so the
        # amax -> 4 candidate's scale has room up to 384: turning it on in a file brings that bound along (where
        # the operand has a two-level scale to read it: else the bound, never asked for, was refused beside 4/6)
        merged["scale_bound"] = SIX_FOUR["scale_bound"]
    try:
        return QuantSpec.from_dict(merged)
    except (ValueError, TypeError) as e:
        raise UserError(f"{where}: {e}") from None


def _reads_scale_bound(spec_fields: dict) -> bool:
    """Whether a QuantSpec of these fields (QuantSpec's defaults for those missing) reads its scale_bound: E4M3
    block scales under a tensor scale (QuantSpec refuses a bound elsewhere)."""
    default = QuantSpec()
    block = spec_fields.get("block", default.block)
    return (block is not None and spec_fields.get("scale", default.scale) == "e4m3"
            and spec_fields.get("tensor_scale", default.tensor_scale) is True)


# --- presets (RECIPES.md) ----------------------------------------------------------------------

NV = QuantSpec(elem="e2m1", block=(1, 16), scale="e4m3", tensor_scale=True)           # NVFP4 1x16, RTNE
NV_2D = NV.but(block=(16, 16))
NV_SR = NV.but(rounding="sr")
MX4 = QuantSpec(elem="e2m1", block=(1, 32), scale="e8m0", tensor_scale=False)         # OCP MXFP4
MX8 = QuantSpec(elem="e4m3", block=(1, 32), scale="e8m0", tensor_scale=False)         # OCP MXFP8 (E4M3)
UF = QuantSpec(elem="e1m2", block=(1, 16), scale="e4m3", tensor_scale=True)           # uniform FP4 (our default)
FP8_E4M3 = QuantSpec(elem="e4m3", block=None, scale="fp32", tensor_scale=True)       # per-tensor current scaling
FP8_E5M2 = FP8_E4M3.but(elem="e5m2")
RHT16 = dict(transform=16, signs="run")
SIX_FOUR = dict(four_over_six=True, scale_bound=256.0)
# MS-EDEN (Quartet II backward): RHT128 redrawn per backward call (step and layer), RTNE with
# headroom (amax -> 6 / ((17/16) * 0.93)), EDEN-corrected E4M3 scales rounded stochastically.
# Tensor scale bound 256 as in IST-DASLab/Quartet-II (their 255.99): the correction c can raise a
# block scale, which must not saturate at E4M3's 448.
EDEN = NV.but(transform=128, signs="layer_step", eden=True, headroom=(17 / 16) * 0.93, scale_bound=256.0)


def _same(spec: QuantSpec | None) -> dict:
    return {o: spec for o in OPERANDS}


def _presets() -> dict[str, Recipe]:
    nvfp4 = Recipe(
        "nvfp4", fprop_x=NV, fprop_w=NV_2D, dgrad_dy=NV_SR, dgrad_w=NV_2D,
        wgrad_dy=NV_SR.but(**RHT16), wgrad_x=NV.but(**RHT16),
        source="NVIDIA, Pretraining LLMs with NVFP4 (arXiv 2509.25149); TE NVFP4BlockScaling")
    mxfp4 = Recipe("mxfp4", **_same(MX4), source="OCP Microscaling v1.0")
    mxfp8 = Recipe("mxfp8", **_same(MX8), source="torchao MX training")
    ufp4 = Recipe(
        "ufp4", fprop_x=UF.but(**RHT16), fprop_w=UF.but(**RHT16),
        dgrad_dy=UF.but(rounding="sr", **RHT16), dgrad_w=UF.but(**RHT16),
        wgrad_dy=UF.but(rounding="sr", **RHT16), wgrad_x=UF.but(**RHT16),
        source="Rethinking shrinkage bias in LLM FP4 pretraining (arXiv 2606.20381)")
    cap4 = {o: getattr(nvfp4, o).but(cap=4.0) for o in OPERANDS}
    rht_all = dict(fprop_x=NV.but(**RHT16), fprop_w=NV.but(**RHT16),
                   dgrad_dy=NV_SR.but(**RHT16), dgrad_w=NV.but(**RHT16))
    presets = [
        Recipe("bf16", source="baseline"),
        Recipe("fp8", fprop_x=FP8_E4M3, fprop_w=FP8_E4M3, dgrad_dy=FP8_E5M2, dgrad_w=FP8_E4M3,
               wgrad_dy=FP8_E5M2, wgrad_x=FP8_E4M3,
               source="TransformerEngine Float8CurrentScaling (HYBRID)"),
        mxfp8,
        nvfp4,
        replace(nvfp4, name="nvfp4_4over6", fprop_x=NV.but(**SIX_FOUR), fprop_w=NV_2D.but(**SIX_FOUR),
                dgrad_w=NV_2D.but(**SIX_FOUR),  # dgrad "as nvfp4": W the same 16x16 values as fprop's
                source="Four Over Six (arXiv 2512.02010); TE nvfp4_4over6"),
        replace(nvfp4, name="nvfp4_rht_all", **rht_all, source="UFP4 paper's comparison: E2M1 under pervasive RHT"),
        replace(nvfp4, name="nvfp4_cap4", **cap4, source="UFP4 paper's range-restriction ablation"),
        mxfp4,
        replace(mxfp8, name="mxfp4_fprop", fprop_x=MX4, fprop_w=MX4, source="AMD ladder step 1"),
        replace(mxfp8, name="mxfp4_fprop_dgrad", fprop_x=MX4, fprop_w=MX4, dgrad_dy=MX4, dgrad_w=MX4,
                source="AMD ladder step 2"),
        replace(mxfp4, name="mxfp4_sr", dgrad_dy=MX4.but(rounding="sr"), wgrad_dy=MX4.but(rounding="sr"),
                source="AMD (arXiv 2605.09825): fails to stabilise"),
        Recipe("mxfp4_rht", **_same(MX4.but(transform=16, signs="step")),
               source="AMD (arXiv 2605.09825): fails to stabilise"),
        Recipe("mxfp4_h16", **_same(MX4.but(transform=16)),
               source="AMD, Pretraining LLMs with MXFP4 on native FP4 hardware (arXiv 2605.09825); "
                      "ROCm TE NVTE_MXFP4_USE_HADAMARD"),
        Recipe("mxfp4_h32", **_same(MX4.but(transform=32)), source="ablation of mxfp4_h16"),
        ufp4,
        Recipe("ufp4_rht_wgrad", fprop_x=UF, fprop_w=UF, dgrad_dy=UF.but(rounding="sr"), dgrad_w=UF,
               wgrad_dy=ufp4.wgrad_dy, wgrad_x=ufp4.wgrad_x, source="UFP4 ablation: RHT scope"),
        Recipe("ufp4_no_rht", fprop_x=UF, fprop_w=UF, dgrad_dy=UF.but(rounding="sr"), dgrad_w=UF,
               wgrad_dy=UF.but(rounding="sr"), wgrad_x=UF, source="UFP4 ablation: no transform"),
        Recipe("quartet2", fprop_x=NV.but(**SIX_FOUR), fprop_w=NV.but(**SIX_FOUR),
               dgrad_dy=EDEN, dgrad_w=EDEN, wgrad_dy=EDEN, wgrad_x=EDEN, backward_from_forward=True,
               source="Quartet II (arXiv 2601.22813; IST-DASLab/Quartet-II)"),
    ]
    return {r.name: r for r in presets}


PRESETS: dict[str, Recipe] = _presets()


def list_recipes() -> list[str]:
    """Preset names, in RECIPES.md's order."""
    return list(PRESETS)


def get_recipe(name: str | Path) -> Recipe:
    """A preset by name, or a user recipe from a .toml path (a str or a Path)."""
    name = str(name)
    if name in PRESETS:
        return PRESETS[name]
    if not name.strip():  # (Path("") is the working folder)
        raise UserError(f"a recipe name is empty; give one of {', '.join(PRESETS)} (or a path to a recipe .toml)")
    path = Path(name).expanduser()
    # `.toml` exactly, as runs and sweeps take a recipe for a file (`RunConfig` hashes its content, `train`
    # keeps a copy): `x.TOML` read here trained as a name, its edits unseen by the run's id
    if name.endswith(".toml"):
        if not path.exists() and Path(name).stem in PRESETS:  # `nvfp4.toml` for the preset nvfp4
            raise UserError(f"recipe file {name} does not exist; the preset is named without .toml: "
                            f"{Path(name).stem}")
        return Recipe.from_toml(name)
    if path.is_dir():
        raise UserError(f"recipe {name} is a folder; give a preset's name or a recipe .toml file in it")
    if path.is_file():
        raise UserError(f"recipe file {name} must end in .toml (recipe files are TOML); rename it, e.g. "
                        f"{path.with_suffix('.toml')}")
    raise UserError(f"unknown recipe {name!r}{did_you_mean(name, PRESETS)}; known recipes: {', '.join(PRESETS)} "
                    "(or a path to a recipe .toml)")


# ---- what a recipe can quantize: checked before a model is built or a run starts (no torch: a sweep's
# plan and the benchmark's argument checks call them too)

def check_model(recipe: Recipe, depth: int, linears: Iterable[tuple[int, int]], where: str) -> None:
    """Refuse, before the model is built (a sweep's plan, a benchmark's sections), a model of `depth` blocks
    whose block linears (`linears`: (fan_in, fan_out) each) the recipe cannot quantize: its blocks
    (`check_blocks`), then each shape (`check_shape`). A bf16 recipe fits any (convert leaves it alone)."""
    if not recipe.is_quantized:
        return
    check_blocks(recipe, depth, where)
    for fan_in, fan_out in sorted(set(linears)):
        check_shape(recipe, fan_in, fan_out, where)


def check_blocks(recipe: Recipe, depth: int, where: str = "this model") -> None:
    """Refuse a recipe whose high_precision_blocks name a block the model does not have."""
    outside = [i for i in recipe.high_precision_blocks if not -depth <= i < depth]
    if outside:
        raise UserError(f"recipe {recipe.name}: high_precision_blocks {outside} name no block of {where}, "
                        f"which has {depth} (0 to {depth - 1}, or -1 for the last)")


def check_shape(recipe: Recipe, in_features: int, out_features: int, where: str = "a linear layer") -> None:
    """Refuse, before any training, a layer whose GEMM K does not fit the recipe's blocks/transforms.
    (The token count, wgrad's K, is checked when the batch arrives.)"""
    ks = {"fprop_x": in_features, "fprop_w": in_features, "dgrad_dy": out_features, "dgrad_w": out_features}
    for operand, k in ks.items():
        spec = getattr(recipe, operand)
        if spec is not None and k % spec.k_multiple:
            raise UserError(
                f"recipe {recipe.name!r} cannot quantize {where} ({in_features} -> {out_features}): "
                f"{operand_name(operand)} needs K = {k} to be a multiple of {spec.k_multiple} "
                f"({spec.describe()}); pick a model size whose widths are multiples of {spec.k_multiple}")
        if spec is not None and spec.block_rows > 1 and operand.endswith("_w"):
            # a weight's 2-D tiles span its other dimension too (an activation's span tokens, which
            # the reference checks when the batch arrives)
            other = out_features if operand == "fprop_w" else in_features
            if other % spec.block_rows:
                raise UserError(f"recipe {recipe.name!r}: {where} needs both dimensions to be multiples of "
                                f"{spec.block_rows} for {spec.block_rows}x{spec.block_k} tiles")


class TokenMisfit(NamedTuple):
    """An operand of a recipe that cannot quantize a micro-batch's tokens: its name as users write it ("wgrad.dy"),
    its quantizer (`QuantSpec.describe`), and the multiple of which the token count must be."""

    operand: str
    quantizer: str
    multiple: int


def token_misfit(recipe: Recipe, tokens: int) -> TokenMisfit | None:
    """The first operand of the recipe that cannot quantize a micro-batch of `tokens` tokens (wgrad's K is the
    token count, and an activation's 2-D tiles span tokens), or None where every one can. (Unchecked, the first
    backward stopped the run with the dimension's size alone, after its run folder was made.) `check_tokens`
    refuses it for `scaling train`; a sweep's plan names the grid point and its [train] keys."""
    needs = {"wgrad_dy": "k_multiple", "wgrad_x": "k_multiple", "fprop_x": "block_rows", "dgrad_dy": "block_rows"}
    for operand, need in needs.items():
        spec = getattr(recipe, operand)
        m = getattr(spec, need) if spec is not None else 1
        if tokens % m:
            return TokenMisfit(operand_name(operand), spec.describe(), m)
    return None


def check_tokens(recipe: Recipe, tokens: int) -> None:
    """Refuse, before any training, a micro-batch of `tokens` tokens that the recipe cannot quantize (`token_misfit`),
    in `scaling train`'s words."""
    misfit = token_misfit(recipe, tokens)
    if misfit is not None:
        m = misfit.multiple
        raise UserError(f"recipe {recipe.name!r} cannot quantize the micro-batches of this run ({tokens} tokens each): "
                        f"{misfit.operand} ({misfit.quantizer}) needs the token count to be a multiple of {m}; set "
                        f"micro_batch_size x seq_len (--micro-batch-size, --seq-len) to a multiple of {m}")
