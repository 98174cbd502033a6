"""Quantization diagnostics: what a format and a transform do to a tensor and to a GEMM.

Everything goes through the reference quantizer (`scaling.quant.quantize`); this module only
measures. Per tensor x format x transform: SQNR, the shrinkage bias E[|q| - |v|] in the block-scaled
domain (overall and per grid level, next to the uniform-density theory (l - r)/2), grid-level use,
and the SQNR change a transform brings. Per format x transform: the output SQNR of the three GEMMs
of a linear layer (fprop, dgrad, wgrad) with both operands quantized along their K.
`run_diagnostics` returns the dict `scaling diagnose --json` prints (shape: docs/numerics.md).
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple

import torch

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
    paper's claims, checked on nvfp4 and ufp4 by name, would be taken for those)."""
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
        u = torch.rand(rows, cols, generator=g) - 0.5
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

def run_diagnostics(formats: Iterable[str | Format] = tuple(FORMATS), transforms: Iterable[str] = DEFAULT_TRANSFORMS,
                    tensors: Mapping[str, torch.Tensor] | None = None, size: tuple[int, int] = (512, 256),
                    seed: int = 0, gemm: bool = True,
                    progress: Callable[[str], None] | None = None) -> dict:
    """Every format x transform on each tensor (default: the synthetic set), plus the GEMM SQNRs. A format is a
    name of FORMATS, a format file or RECIPE:OPERAND (`format_of`), or a Format. Returns the dict documented in
    docs/numerics.md."""
    # The tensors are small: torch's intra-op threads cost more than they save (8 s of CPU with one
    # thread vs ~70 s with several on a busy 2-core machine), so run single-threaded and restore.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(resolve_formats(formats), list(transforms), tensors, size, seed, gemm,
                    progress or (lambda _msg: None))
    finally:
        torch.set_num_threads(threads)


def _run(formats: dict[str, Format], transforms: list[str], tensors: Mapping[str, torch.Tensor] | None,
         size: tuple[int, int], seed: int, gemm: bool, say: Callable[[str], None]) -> dict:
    # every transform asked for, and none (each ΔSQNR's reference) where it was not
    specs = {(f, t): with_transform(fmt.spec, t) for f, fmt in formats.items() for t in {"none", *transforms}}
    synthetic = tensors is None
    if synthetic:
        fit = lambda n, m: max(m, n // m * m)  # noqa: E731  (the nearest multiple of m at or below n)
        _check_tiles(f"--size {size[0]} {size[1]}", size, formats.values(), transforms,
                     lambda rm, km: f"pass e.g. --size {fit(size[0], rm)} {fit(size[1], km)}")
        tensors = {k: synthetic_tensor(k, size[0], size[1], seed) for k in SYNTHETIC}
    for name, x in tensors.items():
        _check_tiles(f"tensor {name}", tuple(x.shape), formats.values(), transforms,
                     lambda rm, km: f"pass a tensor whose last dim is a multiple of {km}" if km > 1 else
                     f"pass a tensor of a multiple of {rm} rows (viewed as (-1, last dim))")
        _check_range(name, x, transforms)
    ops = gemm_operands(seed) if gemm else {}
    for g, operands in GEMM_EINSUMS.items() if gemm else ():
        for a, k_dim in operands[:2]:
            shape = (ops[a].shape[1 - k_dim], ops[a].shape[k_dim])  # (rows, K), as quantized along K
            _check_tiles(f"the single-GEMM operand {a} of {g} ({shape[0]} x K = {shape[1]})", shape,
                         formats.values(), transforms, lambda rm, km: "pass --no-gemm")

    quant_rows = []
    for name, x in tensors.items():
        say(f"tensor {name} {tuple(x.shape)}")
        for f in formats:
            base = None
            for t in ["none"] + [t for t in transforms if t != "none"]:
                r = analyse_tensor(x, specs[(f, t)], seed)
                base = r["sqnr_db"] if t == "none" else base
                if t in transforms:
                    quant_rows.append({"tensor": name, "format": f, "transform": t, **r,
                                       "delta_sqnr_db": _delta(r["sqnr_db"], base)})

    gemm_rows = []
    if gemm:
        for f in formats:
            say(f"gemm {f}")
            base = gemm_sqnr(ops, specs[(f, "none")], seed)
            for t in transforms:
                s = base if t == "none" else gemm_sqnr(ops, specs[(f, t)], seed)
                gemm_rows.append({"format": f, "transform": t,
                                  **{f"{g}_sqnr_db": s[g] for g in GEMM_EINSUMS},
                                  **{f"{g}_delta_db": _delta(s[g], base[g]) for g in GEMM_EINSUMS}})

    return {
        # size: the synthetic tensors' (None where --tensor gave them; shapes: each tensor's as measured)
        "config": {"formats": list(formats), "transforms": transforms, "size": list(size) if synthetic else None,
                   "seed": seed, "tensors": list(tensors), "shapes": {k: list(x.shape) for k, x in tensors.items()},
                   "gemm_shapes": dict(GEMM_SHAPES) if gemm else None},
        "formats": {f: format_info(fmt) for f, fmt in formats.items()},
        "quant": quant_rows,
        "gemm": gemm_rows,
        "claims": check_claims(quant_rows, gemm_rows),
    }


def format_info(fmt: Format) -> dict:
    """A format as the JSON's `formats` gives it: its spec, described, where it comes from, and its grid."""
    levels = levels_of(fmt.spec)
    return {"spec": fmt.spec.to_dict(), "describe": fmt.spec.describe(), "source": fmt.source,
            "levels": list(levels), "level_error_theory": level_error_theory(levels)}


# --- the UFP4 paper's claims, checked on whatever was measured -------------------------------------

BARELY = 0.5  # dB: a transform "barely moves" SQNR when |delta| is below this
KEEPS = 0.1   # dB: a transform "keeps" a GEMM's SQNR when it loses less than this


def check_claims(quant_rows: list[dict], gemm_rows: list[dict]) -> list[dict]:
    """Evaluate the UFP4 paper's shrinkage, RHT and single-GEMM claims (RECIPES.md, "Claims a user
    will check") on the measured rows, for whichever formats/transforms/tensors were run.
    Each: claim, tensor (or GEMM), measured numbers, holds (bool; None where a measured number is
    not finite, e.g. no interior level was hit, so the claim could not be checked). Reported, never
    tuned for."""
    out = []
    rows = {(r["tensor"], r["format"], r["transform"]): r for r in quant_rows}
    e2m1 = GRIDS["e2m1"]
    for (tensor, fmt, tr), r in rows.items():
        if tr != "none":
            continue
        if fmt == "nvfp4":
            got = {f"{lvl:g}": r["level_error"][e2m1.index(lvl)] for lvl in (2.0, 4.0)}
            theory = {f"{lvl:g}": r["level_error_theory"][e2m1.index(lvl)] for lvl in (2.0, 4.0)}
            out.append({"claim": "E2M1 RTNE error negative at levels 2 and 4", "tensor": tensor,
                        "measured": got, "theory": theory, "holds": _holds(got.values(), lambda v: v < 0)})
        if fmt == "ufp4":
            interior = [e for e, m in zip(r["level_error"][1:-1], r["level_mass"][1:-1]) if m > 0]
            worst = max((abs(e) for e in interior), default=math.nan)
            out.append({"claim": "E1M2 interior-level error ~ 0 (|err| < 0.02 grid units, step 0.25)",
                        "tensor": tensor, "measured": {"max_abs_interior": worst}, "theory": 0.0,
                        "holds": _holds([worst], lambda v: v < 0.02)})
    for tensor in ("student_t3", "outlier_channels"):
        ufp4, nvfp4 = rows.get((tensor, "ufp4", "rht16")), rows.get((tensor, "nvfp4", "rht16"))
        if ufp4:
            out.append({"claim": "RHT16 raises E1M2 (ufp4) SQNR", "tensor": tensor,
                        "measured": {"delta_sqnr_db": ufp4["delta_sqnr_db"]},
                        "holds": _holds([ufp4["delta_sqnr_db"]], lambda v: v > 0)})
        if nvfp4:
            out.append({"claim": f"RHT16 lowers or barely moves E2M1 (nvfp4) SQNR (delta < {BARELY} dB)",
                        "tensor": tensor, "measured": {"delta_sqnr_db": nvfp4["delta_sqnr_db"]},
                        "holds": _holds([nvfp4["delta_sqnr_db"]], lambda v: v < BARELY)})
    gemms = {(r["format"], r["transform"]): r for r in gemm_rows}
    for fmt, claim, holds in (("ufp4", f"RHT16 GEMM: E1M2 keeps or improves output SQNR (delta > -{KEEPS} dB)",
                               lambda d: d > -KEEPS),
                              ("nvfp4", "RHT16 GEMM: E2M1 output SQNR degrades (delta < 0)", lambda d: d < 0)):
        r = gemms.get((fmt, "rht16"))
        for g in GEMM_EINSUMS if r else ():
            if fmt == "nvfp4" and g == "fprop":
                continue  # the paper's claim for E2M1 is about the backward paths
            d = r[f"{g}_delta_db"]
            out.append({"claim": claim, "tensor": f"gemm {g}", "measured": {"delta_db": d}, "holds": _holds([d], holds)})
    return out


def _holds(measured, test) -> bool | None:
    """test on every measured number; None (not checked) if any is not finite."""
    measured = list(measured)
    if not all(math.isfinite(v) for v in measured):
        return None
    return all(test(v) for v in measured)
