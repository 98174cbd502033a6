"""Quantization diagnostics: what a format and a transform do to a tensor and to a GEMM.

Everything goes through the reference quantizer (`scaling.quant.quantize`); this module only
measures. Per tensor x format x transform: SQNR, the shrinkage bias E[|q| - |v|] in the block-scaled
domain (overall and per grid level, next to the uniform-density theory (l - r)/2), grid-level use,
and the SQNR change a transform brings. Per format x transform: the output SQNR of the three GEMMs
of a linear layer (fprop, dgrad, wgrad) with both operands quantized along their K. The UFP4 paper's
claims are checked on these, each over several seeds and judged against its spread (`check_claims`).
`run_diagnostics` returns the dict `scaling diagnose --json` prints (shape: docs/numerics.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import fields
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple

import torch

from scaling.console import NOT_MEASURED, WITHIN_NOISE, time_left, yes_no
from scaling.errors import UserError, did_you_mean
from scaling.formats import GRIDS, Grid
from scaling.quant import QuantSpec, expand_blocks, quantize, to_blocks
from scaling.recipes import MX4, NV, SIX_FOUR, UF
from scaling.seeds import Seeds
from scaling.transforms import rotate

# The formats a researcher compares: the presets' forward specs (element rounding RTNE; the
# transform is added separately), and INT4 on NVFP4's scales.
FORMATS: dict[str, QuantSpec] = {
    "nvfp4": NV,
    "mxfp4": MX4,
    "ufp4": UF,
    "int4": NV.but(elem="int4"),
    "nvfp4_4over6": NV.but(**SIX_FOUR),
    "nvfp4_cap4": NV.but(cap=4.0),
}
# transform name -> (Hadamard size, sign policy); random signs come from the run seed.
TRANSFORMS: dict[str, tuple[int, str]] = {
    "none": (0, "ones"), "h16": (16, "ones"), "h32": (32, "ones"),
    "rht16": (16, "run"), "rht32": (32, "run"), "rht128": (128, "run"),
}
DEFAULT_TRANSFORMS = ("none", "h16", "rht16", "rht128")
SYNTHETIC = ("gaussian", "laplace", "student_t3", "outlier_channels")
OUTLIER_SCALE = 50.0
GEMM_SHAPES = {"tokens": 1024, "d_in": 256, "d_out": 512}
MASS_THRESHOLD = 0.01  # a level "is used" when it carries at least 1% of the elements


class Format(NamedTuple):
    """A format diagnose measures: its name in the tables, its QuantSpec (with no transform: each of --transforms is
    added to it) and where it comes from: "built-in" (FORMATS), a format file's path, or RECIPE:OPERAND."""

    name: str
    spec: QuantSpec
    source: str


BUILT_IN = "built-in"
FORMAT_FILE_KEYS = ("name", "base")  # a format file's keys besides QuantSpec's fields
NO_TRANSFORM = 'transform = 0, signs = "ones"'  # a format file's fields of no transform
RECIPE_KEYS = ("fprop", "dgrad", "wgrad", "high_precision_blocks", "backward_from_forward")


def spec_for(fmt: str, transform: str) -> QuantSpec:
    """The QuantSpec of a format (a name of FORMATS, a format file or RECIPE:OPERAND) under a named transform."""
    return with_transform(format_of(fmt).spec, transform)


def with_transform(spec: QuantSpec, transform: str) -> QuantSpec:
    """A format's spec under a named transform of TRANSFORMS."""
    if transform not in TRANSFORMS:
        raise UserError(f"unknown transform {transform!r}; known: {', '.join(TRANSFORMS)}")
    n, signs = TRANSFORMS[transform]
    return spec.but(transform=n, signs=signs)


def resolve_formats(entries: Iterable[str | Format]) -> dict[str, Format]:
    """--formats' entries (`format_of`; a Format is taken as it is) by name, each checked (`_check_format`)."""
    out: dict[str, Format] = {}
    for entry in entries:
        fmt = entry if isinstance(entry, Format) else format_of(entry)
        _check_format(fmt)
        if fmt.name in out and out[fmt.name] != fmt:
            raise UserError(f"two formats are named {fmt.name!r} ({out[fmt.name].source} and {fmt.source}); the "
                            "tables tell formats apart by name: give a format file a `name` of its own")
        out[fmt.name] = fmt
    return out


def format_of(text: str) -> Format:
    """One --formats entry: a name of FORMATS, a format file (.toml: `load_format`), or RECIPE:OPERAND (the spec a
    preset or recipe file gives one operand, e.g. mxfp4:fprop.x; its name in the tables is the entry)."""
    if text.endswith(".toml"):
        return load_format(text)
    spec = named_spec(text)
    if spec is None:
        raise UserError(_not_a_format(text))
    return Format(text, spec, BUILT_IN if text in FORMATS else text)


def named_spec(text: str) -> QuantSpec | None:
    """The spec a name gives: a format of FORMATS, or RECIPE:OPERAND (`operand_spec`); None for any other text."""
    if text in FORMATS:
        return FORMATS[text]
    return operand_spec(text) if ":" in text else None


def load_format(path: str | Path) -> Format:
    """A format file: QuantSpec fields as a recipe's operand table writes them (`spec_from_table`), on top of
    `base` (a name of FORMATS or RECIPE:OPERAND; without it, QuantSpec's defaults, which are nvfp4's), and an
    optional `name` (default: the file's stem). Errors name the file and the field."""
    from scaling.recipes import check_plain_name, read_toml, spec_from_table

    where = str(path)
    data = read_toml(path, "format file")
    recipe_keys = [k for k in RECIPE_KEYS if k in data]
    if recipe_keys:
        raise UserError(f"{where} is a recipe file (it has {', '.join(recipe_keys)}), not a format file: give one of "
                        f"its operands as {where}:fprop.x (RECIPE:OPERAND), or write a format file of one table of "
                        "QuantSpec fields (docs/numerics.md)")
    known = (*FORMAT_FILE_KEYS, *(f.name for f in fields(QuantSpec)))
    for key in data:
        if key not in known:
            raise UserError(f"{where}: unknown field {key!r}{did_you_mean(key, known)}; a format file holds "
                            f"{', '.join(FORMAT_FILE_KEYS)} and QuantSpec fields: "
                            f"{', '.join(sorted(known[len(FORMAT_FILE_KEYS):]))}")
    name = data.get("name", Path(path).stem)
    check_plain_name(name, where)
    if not name:
        raise UserError(f'{where}: name is empty; give the format a name, e.g. name = "mine", or leave it out for '
                        "the file's stem")
    base = _base_spec(data["base"], where) if "base" in data else None
    spec = spec_from_table({k: v for k, v in data.items() if k not in FORMAT_FILE_KEYS}, where, base)
    return Format(name, spec, where)


def _base_spec(base: object, where: str) -> QuantSpec:
    """A format file's `base`: a name of FORMATS, or RECIPE:OPERAND (whose transform the file may set to 0)."""
    spec = named_spec(base) if isinstance(base, str) else None
    if spec is not None:
        return spec
    hint = did_you_mean(base, FORMATS) if isinstance(base, str) else ""
    raise UserError(f"{where}: base {base!r} is no format{hint}; give one of {', '.join(FORMATS)}, or a recipe's "
                    'operand as RECIPE:OPERAND (e.g. base = "ufp4:wgrad.dy"), or leave base out for nvfp4\'s spec')


def operand_spec(text: str) -> QuantSpec:
    """The QuantSpec that RECIPE:OPERAND names: a preset or recipe file (`get_recipe`), and an operand of it."""
    from scaling.recipes import OPERANDS, get_recipe, operand_name

    recipe_name, _, operand = text.rpartition(":")
    operands = [operand_name(o) for o in OPERANDS]
    if not recipe_name or operand not in operands:
        raise UserError(f"{text}: not RECIPE:OPERAND with OPERAND one of {', '.join(operands)}"
                        f"{did_you_mean(operand, operands)} (e.g. ufp4:wgrad.dy)")
    try:
        recipe = get_recipe(recipe_name)
    except UserError as e:
        raise UserError(f"{text}: {e}") from None
    spec = recipe.spec(operand)
    if spec is None:
        raise UserError(f"{text}: recipe {recipe.name} keeps {operand} in BF16, so there is no quantizer to diagnose; "
                        f"pick a quantized operand (`scaling recipes {recipe_name}` shows them)")
    return spec


def _check_format(fmt: Format) -> None:
    """Refuse a format diagnose cannot measure, or whose name would pass for a named format's (its rows and the
    paper's RHT claims, checked on nvfp4 and ufp4 by name, would be taken for those)."""
    if fmt.source == BUILT_IN:
        return
    named = {n.lower(): n for n in FORMATS}.get(fmt.name.lower())
    if named is not None:
        said = "the named format's" if named == fmt.name else f"named format {named}'s in other letter case"
        raise UserError(f"{fmt.source}: name {fmt.name!r} is {said}; give the format a name of its own, e.g. "
                        f'name = "{named}_mine"')
    spec = fmt.spec
    if spec.elem not in GRIDS:
        raise UserError(f'{fmt.source}: elem = "{spec.elem}" has no 4-bit grid; diagnose measures 4-bit element '
                        f"formats, one of {', '.join(GRIDS)}")
    if spec.eden:  # (before the transform, which MS-EDEN cannot do without)
        raise UserError(f"{fmt.source}: MS-EDEN (eden = true) corrects its block scales in a Hadamard transform's "
                        "basis, so it is a format and a transform at once, and diagnose measures each format under "
                        f"each of --transforms; {_fix(fmt, 'eden = false, ' + NO_TRANSFORM)} and pass "
                        "--transforms none,rht128 for its nearest")
    if spec.transform:
        said = f"{'H' if spec.signs == 'ones' else 'RHT'}{spec.transform}"
        nearest = f"{'h' if spec.signs == 'ones' else 'rht'}{spec.transform}"
        also = f" and pass --transforms none,{nearest}" if nearest in TRANSFORMS else ""
        raise UserError(f"{fmt.source}: transform = {spec.transform} ({said}): a format takes no transform, as "
                        "diagnose applies each of --transforms to every format (ΔSQNR is against none); "
                        f"{_fix(fmt, NO_TRANSFORM)}{also}")


def _fix(fmt: Format, fields_said: str) -> str:
    """How to change fields of a user format: in its file, in a format file based on RECIPE:OPERAND, or (a Format
    made in Python) in its QuantSpec."""
    if fmt.source.endswith(".toml"):
        return f"set {fields_said} in it"
    if ":" in fmt.source:
        return f'measure it from a format file of base = "{fmt.source}", {fields_said}'
    return f"set {fields_said} in its QuantSpec"


def _not_a_format(name: str) -> str:
    """Why `name` is no format: a recipe (a recipe quantizes six operands its own ways, a format is one tensor's,
    measured under every transform asked for), or a typo."""
    from scaling.recipes import PRESETS

    if name in PRESETS:
        return (f"{name!r} is a recipe, not a format: give one of its operands as RECIPE:OPERAND, e.g. {name}:fprop.x "
                f"(`scaling recipes {name}` shows them)")
    return (f"unknown format {name!r}{did_you_mean(name, FORMATS)}; known: {', '.join(FORMATS)}, a format file "
            "(.toml), or RECIPE:OPERAND (e.g. ufp4:wgrad.dy)")


def levels_of(spec: QuantSpec) -> tuple[float, ...]:
    return Grid.of(spec.elem, spec.cap).levels


def level_error_theory(levels: tuple[float, ...]) -> list[float]:
    """(l_i - r_i)/2 per level: the mean RTNE error |q| - |v| under a locally uniform density, with
    l_i, r_i the half-widths of level i's bin (l_0 = 0 in magnitude space, r = 0 at the top)."""
    out = []
    for i, q in enumerate(levels):
        left = (q - levels[i - 1]) / 2 if i > 0 else 0.0
        right = (levels[i + 1] - q) / 2 if i + 1 < len(levels) else 0.0
        out.append((left - right) / 2)
    return out


# --- tensors -------------------------------------------------------------------------------------

def synthetic_tensor(kind: str, rows: int, cols: int, seed: int) -> torch.Tensor:
    """Seeded float32 test tensors with unit-ish scale. Outlier channels are columns (along K)."""
    g = torch.Generator().manual_seed(seed * 1000 + SYNTHETIC.index(kind))
    normal = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    if kind == "gaussian":
        return normal(rows, cols)
    if kind == "laplace":
        # u in (-0.5, 0.5): torch.rand can return 0, whose u = -0.5 made an inf (one in ~2^24 values: a 4096 x 2048
        # tensor held one, and diagnose refused its own tensor); the next float32 up gives a finite far-tail value
        u = (torch.rand(rows, cols, generator=g) - 0.5).clamp_min(-0.5 + 2**-25)
        return -torch.sign(u) * torch.log1p(-2 * u.abs()) / math.sqrt(2)
    if kind == "student_t3":
        chi2 = (normal(3, rows, cols) ** 2).sum(0)
        return normal(rows, cols) / torch.sqrt(chi2 / 3)
    if kind == "outlier_channels":
        return with_outlier_channels(normal(rows, cols), g)
    raise ValueError(f"unknown synthetic tensor {kind!r}")


def with_outlier_channels(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """x with max(1, cols/64) randomly chosen columns multiplied by OUTLIER_SCALE."""
    cols = x.shape[1]
    idx = torch.randperm(cols, generator=g)[: max(1, cols // 64)]
    x = x.clone()
    x[:, idx] *= OUTLIER_SCALE
    return x


def load_tensor(path: str | Path) -> torch.Tensor:
    """A user tensor from .pt (a tensor) or .npy, as float32 (-1, last dim)."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"tensor file {path} {what}; pass a .pt or .npy file with --tensor")
    try:
        if path.suffix == ".npy":
            import numpy as np

            t = torch.from_numpy(np.load(path, allow_pickle=False))
        elif path.suffix in (".pt", ".pth"):
            t = torch.load(path, map_location="cpu", weights_only=True)
        else:
            raise UserError(f"tensor file {path} must end in .pt, .pth or .npy")
    except UserError:
        raise
    except Exception as e:  # unreadable or corrupt file (torch says little: "105", a byte it did not expect)
        saver = "numpy.save(path, a)" if path.suffix == ".npy" else "torch.save(t, path)"
        raise UserError(f"could not read tensor file {path} ({type(e).__name__}: {str(e)[:120]}); pass a file "
                        f"{saver} wrote") from e
    if not isinstance(t, torch.Tensor):
        raise UserError(f"{path} holds a {type(t).__name__}, not a tensor; save one tensor with torch.save(t, path)")
    if t.dim() == 0 or t.numel() == 0 or t.is_complex() or t.dtype == torch.bool:  # (any int or float dtype)
        raise UserError(f"{path} holds a {t.dtype} tensor of shape {tuple(t.shape)}; need a non-empty tensor of floats or integers")
    wide = t.double()  # (every dtype has a float64 view; FP8 dtypes have no isfinite of their own)
    if not torch.isfinite(wide).all():
        raise UserError(f"{path} holds non-finite values (inf or nan); diagnostics need finite tensors")
    t = wide.to(torch.float32).reshape(-1, t.shape[-1])
    if not torch.isfinite(t).all():  # finite in float64, past float32's range
        raise UserError(f"{path} holds values up to {wide.abs().max().item():.3g}, beyond float32's "
                        f"{FLOAT32_MAX:.3g} (the diagnostics run in float32); scale the tensor down by a power "
                        "of two (no SQNR or grid-unit error changes)")
    return t


FLOAT32_MAX = torch.finfo(torch.float32).max


def _check_range(name: str, x: torch.Tensor, transforms: Iterable[str]) -> None:
    """A size-n transform adds up groups of n values in float32 before its 1/sqrt(n): a group whose
    magnitudes sum past float32's largest value overflows to inf, and every measurement to NaN."""
    for t in transforms:
        n = TRANSFORMS[t][0]
        if not n:
            continue
        worst = x.double().abs().unflatten(-1, (-1, n)).sum(-1).max().item()
        if worst > FLOAT32_MAX:
            raise UserError(f"tensor {name} is too large for transform {t}: its {n} values in a group sum to "
                            f"{worst:.3g} in magnitude, past float32's {FLOAT32_MAX:.3g}, so the transform "
                            "overflows; scale the tensor down by a power of two (no SQNR or grid-unit error "
                            f"changes), or leave {t} out of --transforms")


def _check_tiles(name: str, shape: tuple[int, int], formats: Iterable[Format], transforms: Iterable[str],
                 fix: Callable[[int, int], str]) -> None:
    """Refuse a matrix of `shape` (R, K; blocks along K) that a format's blocks (along K, and 2-D tiles along R too)
    or a transform's Hadamard groups do not tile, naming each that does not (quantization refuses rather than
    pads). `fix(row_multiple, k_multiple)` says how to give a shape that fits."""
    rows, k = shape
    formats = list(formats)
    need = math.lcm(*(f.spec.k_multiple for f in formats), *(TRANSFORMS[t][0] or 1 for t in transforms))
    if k % need:
        misfits = [_block_said(f) for f in formats if k % f.spec.block_k]
        misfits += [f"transform {t}'s groups of {TRANSFORMS[t][0]}" for t in transforms if k % (TRANSFORMS[t][0] or 1)]
        raise UserError(f"{name}: K = {k} must be a multiple of {need} for the chosen formats and transforms (blocks "
                        f"and Hadamard groups along K; not dividing it: {', '.join(misfits)}); {fix(1, need)}, or "
                        "fewer/smaller --formats/--transforms")
    tiled = [f for f in formats if rows % f.spec.block_rows]
    if tiled:
        need = math.lcm(*(f.spec.block_rows for f in tiled))
        raise UserError(f"{name}: R = {rows} rows must be a multiple of {need} for 2-D tiles ("
                        f"{', '.join(_block_said(f) for f in tiled)}); {fix(need, 1)}, or formats of 1xN blocks")


def _block_said(fmt: Format) -> str:
    """'format mine's block = [1, 24] (mine.toml)': a format's blocks, and where they come from."""
    where = "" if fmt.source in (BUILT_IN, fmt.name) else f" ({fmt.source})"
    return f"format {fmt.name}'s block = [{fmt.spec.block_rows}, {fmt.spec.block_k}]{where}"


# --- measurements -------------------------------------------------------------------------------

def sqnr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    """10 log10(sum x^2 / sum (x - y)^2) in float64 (inf when y == x)."""
    x, y = x.double(), y.double()
    noise = ((x - y) ** 2).sum().item()
    signal = (x ** 2).sum().item()
    if noise == 0:
        return math.inf
    if math.isinf(noise):  # y overflowed: nothing of x is left
        return -math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def _delta(db: float, base: float) -> float:
    """An SQNR change: 0 where both are the same, exact (inf) ones included (inf - inf is NaN)."""
    return 0.0 if db == base else db - base


def _seed(seed: int) -> Seeds:
    return Seeds(rounding=seed, signs=seed)


def analyse_tensor(x: torch.Tensor, spec: QuantSpec, seed: int = 0) -> dict:
    """SQNR, shrinkage bias (overall and per level) and grid-level use of x (R, K) quantized along K."""
    x = x.to(torch.float32)
    q = quantize(x, spec, dim=-1, seed=_seed(seed))
    sqnr = sqnr_db(x, q.dequantize())

    # The block-scaled domain: v = x' * s_enc / s_b, the value the element rounding sees.
    xr = rotate(x, spec.transform, q.signs) if spec.transform else x
    scale = expand_blocks(q.block_scale, spec, q.values.shape).double()
    # all-zero (or underflowed) blocks carry no element information; an E8M0 scale is never 0, so
    # a zero block is found by its values (else MX would count zero blocks that NV leaves out)
    live = (scale > 0) & _nonzero_blocks(xr, spec, q.values.shape)
    v = xr.double() * q.tensor_scale.double() / torch.where(live, scale, 1.0)
    mag_q, mag_v = q.values.abs()[live].double(), v.abs()[live]
    err = mag_q - mag_v

    levels = levels_of(spec)
    idx = torch.searchsorted(torch.tensor(levels, dtype=torch.float64), mag_q)
    count = torch.bincount(idx, minlength=len(levels)).double()
    err_sum = torch.bincount(idx, weights=err, minlength=len(levels))
    mass = count / max(1.0, count.sum().item())
    nz = mass[mass > 0]
    return {
        "sqnr_db": sqnr,
        "exact": sqnr == math.inf,  # (JSON writes inf as null, as it does NaN)
        "mean_error": err.mean().item() if err.numel() else math.nan,
        "levels_used": int((mass >= MASS_THRESHOLD).sum()),
        "level_entropy_bits": float(-(nz * nz.log2()).sum()) + 0.0,  # (one level: 0, not -0)
        "level_mass": mass.tolist(),
        "level_error": [(s / c).item() if c > 0 else math.nan for s, c in zip(err_sum, count)],
        "level_error_theory": level_error_theory(levels),
    }


def _nonzero_blocks(x: torch.Tensor, spec: QuantSpec, shape: torch.Size) -> torch.Tensor:
    """Per element of x (R, K): whether its block holds a non-zero value."""
    if spec.block is None:
        return torch.full(shape, bool(x.any()))
    return expand_blocks(to_blocks(x, spec).abs().amax(-1) > 0, spec, shape)


def gemm_operands(seed: int, shapes: Mapping[str, int] = GEMM_SHAPES) -> dict[str, torch.Tensor]:
    """X (tokens x d_in), W (d_out x d_in) Gaussian; dY (tokens x d_out) Gaussian with outlier channels."""
    g = torch.Generator().manual_seed(seed * 1000 + 77)
    t, d_in, d_out = shapes["tokens"], shapes["d_in"], shapes["d_out"]
    x = torch.randn(t, d_in, generator=g)
    w = torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)
    dy = with_outlier_channels(torch.randn(t, d_out, generator=g), g)
    return {"x": x, "w": w, "dy": dy}


# Each GEMM: (operand A, its K dim), (operand B, its K dim), einsum of the two (K contracted).
GEMM_EINSUMS = {
    "fprop": (("x", 1), ("w", 1), "tk,ok->to"),    # Y  = X . W^T,  K = d_in
    "dgrad": (("dy", 1), ("w", 0), "tk,kd->td"),   # dX = dY . W,   K = d_out
    "wgrad": (("dy", 0), ("x", 0), "ko,kd->od"),   # dW = dY^T . X, K = tokens
}


def gemm_sqnr(ops: Mapping[str, torch.Tensor], spec: QuantSpec, seed: int = 0) -> dict[str, float]:
    """Output SQNR of fprop, dgrad and wgrad: both operands quantized along K under `spec` (same signs),
    multiplied in the transform's basis in float64, against the exact float64 product."""
    out = {}
    for name, ((a, da), (b, db), eq) in GEMM_EINSUMS.items():
        exact = torch.einsum(eq, ops[a].double(), ops[b].double())
        qa = quantize(ops[a], spec, dim=da, seed=_seed(seed)).dequantize(transformed=True)
        qb = quantize(ops[b], spec, dim=db, seed=_seed(seed)).dequantize(transformed=True)
        out[name] = sqnr_db(exact, torch.einsum(eq, qa.double(), qb.double()))
    return out


# --- the whole table ----------------------------------------------------------------------------

# The claims' seeds: a 95% t-interval of the mean is +-1.24 sd at 5 (t(4) = 2.78; at 3, +-2.48 sd, too wide to
# decide the noisier GEMM claims). A seed past the first measures only the rows the claims read (~0.1 s of CPU).
DEFAULT_SEEDS = 5


def run_diagnostics(formats: Iterable[str | Format] = tuple(FORMATS), transforms: Iterable[str] = DEFAULT_TRANSFORMS,
                    tensors: Mapping[str, torch.Tensor] | None = None, size: tuple[int, int] = (512, 256),
                    seed: int = 0, seeds: int = DEFAULT_SEEDS, gemm: bool = True,
                    progress: Callable[[str], None] | None = None) -> dict:
    """Every format x transform on each tensor (default: the synthetic set), plus the GEMM SQNRs, under `seed`; and the
    UFP4 paper's claims, measured under `seeds` seeds (`run_seeds`: each draws its own synthetic tensors, GEMM
    operands, RHT signs and SR bits) and judged against their spread (`check_claims`). A format is a name of FORMATS,
    a format file or RECIPE:OPERAND (`format_of`), or a Format. Returns the dict documented in docs/numerics.md."""
    if seeds < 2:
        raise UserError(f"seeds must be 2 or more (got {seeds}): each claim is judged against its spread over seeds")
    # The tensors are small: torch's intra-op threads cost more than they save (8 s of CPU with one
    # thread vs ~70 s with several on a busy 2-core machine), so run single-threaded and restore.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(resolve_formats(formats), list(transforms), tensors, size, run_seeds(seed, seeds), gemm,
                    progress or (lambda _msg: None))
    finally:
        torch.set_num_threads(threads)


def run_seeds(seed: int, n: int) -> list[int]:
    """seed, seed + 1, ... (n of them), modulo 2^32 (the RHT signs read a seed's low 32 bits)."""
    return [(seed + i) % 2**32 for i in range(n)]


def _run(formats: dict[str, Format], transforms: list[str], tensors: Mapping[str, torch.Tensor] | None,
         size: tuple[int, int], seeds: list[int], gemm: bool, say: Callable[[str], None]) -> dict:
    # every transform asked for, and none (each ΔSQNR's reference) where it was not
    specs = {(f, t): with_transform(fmt.spec, t) for f, fmt in formats.items() for t in {"none", *transforms}}
    synthetic = tensors is None
    if synthetic:
        fit = lambda n, m: max(m, n // m * m)  # noqa: E731  (the nearest multiple of m at or below n)
        _check_tiles(f"--size {size[0]} {size[1]}", size, formats.values(), transforms,
                     lambda rm, km: f"pass e.g. --size {fit(size[0], rm)} {fit(size[1], km)}")
        tensors = synthetic_tensors(size, seeds[0])
    for name, x in tensors.items():
        _check_tiles(f"tensor {name}", tuple(x.shape), formats.values(), transforms,
                     lambda rm, km: f"pass a tensor whose last dim is a multiple of {km}" if km > 1 else
                     f"pass a tensor of a multiple of {rm} rows (viewed as (-1, last dim))")
        _check_range(name, x, transforms)
    ops = gemm_operands(seeds[0]) if gemm else {}
    for g, operands in GEMM_EINSUMS.items() if gemm else ():
        for a, k_dim in operands[:2]:
            shape = (ops[a].shape[1 - k_dim], ops[a].shape[k_dim])  # (rows, K), as quantized along K
            _check_tiles(f"the single-GEMM operand {a} of {g} ({shape[0]} x K = {shape[1]})", shape,
                         formats.values(), transforms, lambda rm, km: "pass --no-gemm")

    # the tables' rows (the first seed's), "none" first in each tensor and format (the others' reference)
    in_order = sorted(transforms, key=lambda t: t != "none")
    quant_keys = [("quant", name, f, t) for name in tensors for f in formats for t in in_order]
    gemm_keys = [("gemm", f, t) for f in formats for t in transforms] if gemm else []
    rows = _measure(quant_keys + gemm_keys, tensors, ops, specs, seeds[0], say)

    claims = claims_on({f: fmt.spec for f, fmt in formats.items()}, transforms, tensors, gemm)
    reads = list(dict.fromkeys(c.row for c in claims))
    # a row no seed draws (a user tensor under a spec without random signs or SR) is the same under every seed
    drawn = [k for k in reads if k[0] == "gemm" or synthetic or specs[k[2:]].needs_seed]
    seeds_rows = [rows]
    started, gemms = time.monotonic(), any(k[0] == "gemm" for k in drawn)
    for i, s in enumerate(seeds[1:], start=1):
        if not drawn:  # (every claim reads rows no seed draws: each seed's are the first's)
            seeds_rows.append(rows)
            continue
        # each seed's measurements cost about the same: the pace so far gives the time left
        left = time_left(i - 1, len(seeds) - i, time.monotonic() - started)
        say(f"seed {s} ({i + 1} of {len(seeds)}): the claims' {len(drawn)} measurements{left}")
        seeds_rows.append({**rows, **_measure(drawn, synthetic_tensors(size, s) if synthetic else tensors,
                                              gemm_operands(s) if gemms else {}, specs, s, lambda _msg: None)})

    return {
        # size: the synthetic tensors' (None where --tensor gave them; shapes: each tensor's as measured)
        "config": {"formats": list(formats), "transforms": transforms, "size": list(size) if synthetic else None,
                   "seed": seeds[0], "seeds": len(seeds), "tensors": list(tensors),
                   "shapes": {k: list(x.shape) for k, x in tensors.items()},
                   "gemm_shapes": dict(GEMM_SHAPES) if gemm else None},
        "formats": {f: format_info(fmt) for f, fmt in formats.items()},
        "quant": [rows[k] for k in quant_keys],
        "gemm": [rows[k] for k in gemm_keys],
        "claims": check_claims(claims, seeds_rows),
    }


def synthetic_tensors(size: tuple[int, int], seed: int) -> dict[str, torch.Tensor]:
    """The synthetic set (SYNTHETIC) of one seed."""
    return {k: synthetic_tensor(k, size[0], size[1], seed) for k in SYNTHETIC}


def _measure(keys: Iterable[tuple], tensors: Mapping[str, torch.Tensor], ops: Mapping[str, torch.Tensor],
             specs: Mapping[tuple[str, str], QuantSpec], seed: int, say: Callable[[str], None]) -> dict[tuple, dict]:
    """The rows of `keys`, ("quant", tensor, format, transform) and ("gemm", format, transform), under one seed."""
    keys = list(keys)
    return {**_quant_rows([k[1:] for k in keys if k[0] == "quant"], tensors, specs, seed, say),
            **_gemm_rows([k[1:] for k in keys if k[0] == "gemm"], ops, specs, seed, say)}


def _quant_rows(keys: list[tuple], tensors: Mapping[str, torch.Tensor], specs: Mapping[tuple[str, str], QuantSpec],
                seed: int, say: Callable[[str], None]) -> dict[tuple, dict]:
    """analyse_tensor's row of each (tensor, format, transform), with its ΔSQNR against the format without one."""
    rows, base = {}, {}
    for name, f, t in keys:
        if (name, f) not in base:
            if all(b != name for b, _ in base):
                say(f"tensor {name} {tuple(tensors[name].shape)}")
            base[(name, f)] = analyse_tensor(tensors[name], specs[(f, "none")], seed)
        r = base[(name, f)] if t == "none" else analyse_tensor(tensors[name], specs[(f, t)], seed)
        rows[("quant", name, f, t)] = {"tensor": name, "format": f, "transform": t, **r,
                                       "delta_sqnr_db": _delta(r["sqnr_db"], base[(name, f)]["sqnr_db"])}
    return rows


def _gemm_rows(keys: list[tuple], ops: Mapping[str, torch.Tensor], specs: Mapping[tuple[str, str], QuantSpec],
               seed: int, say: Callable[[str], None]) -> dict[tuple, dict]:
    """gemm_sqnr's row of each (format, transform), with each GEMM's change against the format without one."""
    rows, base = {}, {}
    for f, t in keys:
        if f not in base:
            say(f"gemm {f}")
            base[f] = gemm_sqnr(ops, specs[(f, "none")], seed)
        s = base[f] if t == "none" else gemm_sqnr(ops, specs[(f, t)], seed)
        rows[("gemm", f, t)] = {"format": f, "transform": t,
                                **{f"{g}_sqnr_db": s[g] for g in GEMM_EINSUMS},
                                **{f"{g}_delta_db": _delta(s[g], base[f][g]) for g in GEMM_EINSUMS}}
    return rows


def format_info(fmt: Format) -> dict:
    """A format as the JSON's `formats` gives it: its spec, described, where it comes from, and its grid."""
    levels = levels_of(fmt.spec)
    return {"spec": fmt.spec.to_dict(), "describe": fmt.spec.describe(), "source": fmt.source,
            "levels": list(levels), "level_error_theory": level_error_theory(levels)}


# --- the UFP4 paper's claims, checked on whatever was measured, over seeds ----------------------------

BARELY = 0.5  # dB: a transform "barely moves" SQNR when |delta| is below this
KEEPS = 0.1   # dB: a transform "keeps" a GEMM's SQNR when it loses less than this
INTERIOR = 0.02  # grid units: E1M2's interior levels' error is "~ 0" below this (a step is 0.25)
CONFIDENCE = 0.95  # of the interval a claim's numbers are judged by


class Claim(NamedTuple):
    """A claim on one format and tensor (or GEMM): the row it reads, ("quant", tensor, format, transform) or ("gemm",
    format, transform), the named numbers `measure` takes from it, and the side ("<" or ">") of `bound` every one of
    them must lie on."""

    claim: str
    format: str
    tensor: str  # the tensor's name, or "gemm fprop|dgrad|wgrad"
    row: tuple
    measure: Callable[[dict], dict[str, float]]
    side: str
    bound: float
    theory: dict[str, float] | float | None = None


def claims_on(formats: Mapping[str, QuantSpec], transforms: Iterable[str], tensors: Iterable[str],
              gemm: bool) -> list[Claim]:
    """The UFP4 paper's shrinkage, RHT and single-GEMM claims (RECIPES.md, "Claims a user will check") that the
    formats (name -> spec), transforms and tensors measured (and the GEMMs, where `gemm`) can check: the element
    grid's on every format of that grid (`grid_scale`), the RHT ones on nvfp4 and ufp4."""
    transforms, tensors = list(transforms), list(tensors)
    e2m1, e2m1_theory = GRIDS["e2m1"], level_error_theory(GRIDS["e2m1"])
    at = {f"{lvl:g}": e2m1.index(lvl) for lvl in (2.0, 4.0)}
    out = []
    for tensor in tensors if "none" in transforms else ():
        for fmt, spec in formats.items():
            row = ("quant", tensor, fmt, "none")
            if k := grid_scale(spec, "e2m1"):
                out.append(Claim("E2M1 RTNE error negative at levels 2 and 4", fmt, tensor, row,
                                 lambda r, k=k: {lvl: r["level_error"][i] / k for lvl, i in at.items()}, "<", 0.0,
                                 {lvl: e2m1_theory[i] for lvl, i in at.items()}))
            if k := grid_scale(spec, "e1m2"):
                out.append(Claim(f"E1M2 interior-level error ~ 0 (|err| < {INTERIOR:g} grid units, step 0.25)", fmt,
                                 tensor, row, lambda r, k=k: {"max_abs_interior": _worst_interior(r) / k}, "<",
                                 INTERIOR, 0.0))
    for tensor in [t for t in ("student_t3", "outlier_channels") if t in tensors] if "rht16" in transforms else ():
        for fmt, claim, side, bound in (
                ("ufp4", "RHT16 raises E1M2 (ufp4) SQNR", ">", 0.0),
                ("nvfp4", f"RHT16 lowers or barely moves E2M1 (nvfp4) SQNR (delta < {BARELY:g} dB)", "<", BARELY)):
            if fmt in formats:
                out.append(Claim(claim, fmt, tensor, ("quant", tensor, fmt, "rht16"),
                                 lambda r: {"delta_sqnr_db": r["delta_sqnr_db"]}, side, bound))
    for fmt, claim, side, bound, gemms in (
            ("ufp4", f"RHT16 GEMM: E1M2 keeps or improves output SQNR (delta > -{KEEPS:g} dB)", ">", -KEEPS,
             tuple(GEMM_EINSUMS)),
            ("nvfp4", "RHT16 GEMM: E2M1 output SQNR degrades (delta < 0)", "<", 0.0,
             ("dgrad", "wgrad"))):  # (the paper's claim for E2M1 is about the backward paths)
        for g in gemms if gemm and fmt in formats and "rht16" in transforms else ():
            out.append(Claim(claim, fmt, f"gemm {g}", ("gemm", fmt, "rht16"),
                             lambda r, g=g: {"delta_db": r[f"{g}_delta_db"]}, side, bound))
    return out


def grid_scale(spec: QuantSpec, grid: str) -> float | None:
    """k where a format's elements round to nearest (RTNE) onto k x `grid`'s levels (GRIDS), else None: the claims
    about an element grid are checked on every such format, decided from its spec (elem, cap, rounding), not its
    name. k = 1 but for a grid of the same shape: INT4's is E1M2's x 4, which the block scales absorb (under two-level
    scaling the same values), so its errors divided by k are in the claim's grid units. A capped grid is another (E2M1
    capped at 4 has 4 at its top), and SR has no RTNE error to check."""
    if spec.rounding != "rtne" or spec.elem not in GRIDS:
        return None
    levels, ref = levels_of(spec), GRIDS[grid]
    k = levels[-1] / ref[-1]
    return k if len(levels) == len(ref) and all(a == k * b for a, b in zip(levels, ref)) else None


def _worst_interior(row: dict) -> float:
    """The largest |mean error| over the interior levels (neither 0 nor the top) that some element rounded to."""
    interior = [e for e, m in zip(row["level_error"][1:-1], row["level_mass"][1:-1]) if m > 0]
    return max((abs(e) for e in interior), default=math.nan)


class Spread(NamedTuple):
    """A number over seeds: its mean, sample sd, and the CONFIDENCE t-interval of the mean (NaN where not finite)."""

    mean: float
    sd: float
    low: float
    high: float


def spread(values: list[float]) -> Spread:
    """The Spread of `values` (two or more); all NaN where one is not finite, the point itself where all are equal."""
    from scipy.special import stdtrit

    n = len(values)
    if not all(math.isfinite(v) for v in values):
        return Spread(math.nan, math.nan, math.nan, math.nan)
    if len(set(values)) == 1:  # (no seed draws it: exact, where the sums below would round)
        return Spread(values[0], 0.0, values[0], values[0])
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stdtrit(n - 1, (1 + CONFIDENCE) / 2)) * sd / math.sqrt(n)
    return Spread(mean, sd, mean - half, mean + half)


def check_claims(claims: Iterable[Claim], seeds_rows: list[Mapping[tuple, dict]]) -> list[dict]:
    """Each claim on its row under every seed (`seeds_rows`: one dict of rows per seed, the first the tables'): the
    first seed's numbers (`measured`), their mean, sd and 95% interval over the seeds, and whether the claim holds,
    judged on the intervals (`judge`). Reported, never tuned for."""
    out = []
    for c in claims:
        draws = [c.measure(rows[c.row]) for rows in seeds_rows]
        spreads = {k: spread([d[k] for d in draws]) for k in draws[0]}
        holds, verdict = judge(spreads.values(), c.side, c.bound)
        out.append({"claim": c.claim, "format": c.format, "tensor": c.tensor, "measured": draws[0],
                    **({} if c.theory is None else {"theory": c.theory}),
                    "mean": {k: s.mean for k, s in spreads.items()}, "sd": {k: s.sd for k, s in spreads.items()},
                    "ci95": {k: [s.low, s.high] for k, s in spreads.items()}, "holds": holds, "verdict": verdict})
    return out


def judge(spreads: Iterable[Spread], side: str, bound: float) -> tuple[bool | None, str]:
    """(holds, its word): True ("yes") where every number's interval lies on the claim's side of the bound, False
    ("no") where one lies wholly on the other side (the bound itself counts there), None where an interval straddles
    the bound (WITHIN_NOISE: one seed's number could read either way) or a number is not finite (NOT_MEASURED: e.g.
    no interior level was hit)."""
    spreads = list(spreads)
    if any(math.isnan(s.mean) for s in spreads):
        return None, NOT_MEASURED
    below = side == "<"
    if any(s.low >= bound if below else s.high <= bound for s in spreads):
        return False, yes_no(False)
    if all(s.high < bound if below else s.low > bound for s in spreads):
        return True, yes_no(True)
    return None, WITHIN_NOISE
