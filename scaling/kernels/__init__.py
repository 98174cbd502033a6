"""Triton kernels for the quantizers in `scaling.quant`: the same bits, one pass over memory.

`gemm_operand(x, spec, dim, seed, dtype)` has `quant.gemm_operand`'s signature and returns its
exact bits (given a `scale`, those of `quant.gemm_operand(quant.in_real_units(x, scale), ...)`). It
runs the fused kernel when x is on CUDA (or on CPU under TRITON_INTERPRET=1, for the tests), Triton
imports, the spec is covered (`supports`) and `SCALING_KERNELS` is not "0";
otherwise it runs the reference. The kernel is registered as the custom op
`scaling::gemm_operand`, so models that use it compile with torch.compile (no graph break).
`gemm_operand_pair` (the custom op `scaling::gemm_operand_pair`, `scaling.kernels.pair`) gives an
activation's two operands, along its last axis and along dim 0, from one read.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from scaling import quant
from scaling.quant import QuantSpec
from scaling.recipes import OPERANDS, Recipe, operand_name
from scaling.seeds import Seeds


def available() -> bool:
    """Whether Triton is installed (the kernels then run on CUDA, or anywhere under the interpreter).
    Found once from its module spec, without importing it: a plain value, which torch.compile reads
    as a constant (an lru_cache wrapper here made dynamo warn at every compilation)."""
    return _TRITON_FOUND


_TRITON_FOUND = importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _turned_on() -> bool:
    """Triton imports and SCALING_KERNELS is not "0" (A/B runs turn the kernels off)."""
    return os.environ.get("SCALING_KERNELS", "1") != "0" and available()


def enabled(x: torch.Tensor) -> bool:
    """Whether `gemm_operand` would run the Triton kernel for a tensor like x."""
    if not _turned_on():
        return False
    return x.is_cuda or (interpreting() and x.device.type == "cpu")


def supports(spec: QuantSpec) -> bool:
    """Whether the fused kernel covers this spec (every operand spec of the presets). Where it does
    not, `gemm_operand` (and so QLinear) runs the reference quantizer: the same values, slower."""
    return unsupported(spec) is None


def unsupported(spec: QuantSpec) -> str | None:
    """Why the fused kernel does not cover this spec, in a user's words; None where it does. (The
    reference quantizes any valid QuantSpec: a recipe file's 1x24 blocks are valid, only slower.)"""
    if spec.rounding == "sr" and spec.elem in ("e4m3", "e5m2"):
        return "SR onto FP8 elements"  # no preset uses it
    if spec.eden and spec.block_rows != 1:
        return "MS-EDEN with 2-D blocks"
    if spec.block is not None and (spec.block_k not in (16, 32) or spec.block_rows not in (1, spec.block_k)):
        return "the kernels take blocks of 16 or 32 along K (1 row, or as many rows)"
    return None


def reference_notes(recipe: Recipe, device_type: str) -> list[str]:
    """One line per operand of recipe that a run on this device type ("cuda", "cpu") quantizes with the
    slow reference although the kernels run there (a recipe file's 1x24 blocks: `unsupported`), for
    `train` to print at start: the same bits, so nothing else would tell the user that part of every
    step runs the slow path. None on a CPU, where QLinear never runs these kernels (`linear._use_kernels`)."""
    if device_type != "cuda" or not _turned_on():
        return []
    return [f"note: {no_kernel(operand, spec, why)}; the slower reference quantizer runs it on the GPU (the same bits)"
            for operand, spec, why in unsupported_operands(recipe)]


def no_kernel(operand: str, spec: QuantSpec, why: str) -> str:
    """'<operand> (<spec>) has no fused kernel: <why>', the words train's notes and bench's skips share."""
    return f"{operand_name(operand)} ({spec.describe()}) has no fused kernel: {why}"


def unsupported_operands(recipe: Recipe) -> list[tuple[str, QuantSpec, str]]:
    """(operand, spec, why) for each quantized operand of recipe that the fused kernels do not cover."""
    return [(operand, spec, why) for operand in OPERANDS
            if (spec := getattr(recipe, operand)) is not None and (why := unsupported(spec)) is not None]


def _spec_args(spec: QuantSpec) -> tuple:
    """The spec as plain values for the custom op (attribute reads: dynamo treats them as constants)."""
    block = spec.block or (0, 0)
    return (spec.elem, -1.0 if spec.cap is None else float(spec.cap), int(block[0]), int(block[1]), spec.scale,
            spec.tensor_scale, float(spec.scale_bound), spec.rounding, int(spec.transform), spec.signs,
            spec.four_over_six, spec.eden, float(spec.headroom))


@functools.lru_cache(maxsize=256)
def _spec_from_args(elem: str, cap: float, block_rows: int, block_k: int, scale: str, tensor_scale: bool,
                    scale_bound: float, rounding: str, transform: int, signs: str, four_over_six: bool,
                    eden: bool, headroom: float) -> QuantSpec:
    return QuantSpec(elem=elem, cap=None if cap < 0 else cap, block=(block_rows, block_k) if block_k else None,
                     scale=scale, tensor_scale=tensor_scale, scale_bound=scale_bound, rounding=rounding,
                     transform=transform, signs=signs, four_over_six=four_over_six, eden=eden, headroom=headroom)


def _seed_tensor(seed, device: torch.device) -> torch.Tensor | None:
    """[rounding seed, sign seed] as an int64 tensor on device (an int, a 0-d tensor or Seeds); two
    ints give a kept tensor (`_int_seeds`: no kernel to stack them), Seeds with a `row` that row."""
    if seed is None:
        return None
    if isinstance(seed, Seeds) and seed.row is not None and seed.row.device == torch.device(device):
        return seed.row
    pair = (seed.rounding, seed.signs) if isinstance(seed, Seeds) else (seed, seed)
    if not any(isinstance(s, torch.Tensor) for s in pair):
        return _int_seeds(tuple(s & 0xFFFFFFFF for s in pair), device)
    parts = [s.to(device=device, dtype=torch.int64).reshape(()) if isinstance(s, torch.Tensor)
             else _int_seeds((s & 0xFFFFFFFF,), device) for s in pair]
    return torch.stack(parts)


_INT_SEEDS: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def _int_seeds(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """int seeds as an int64 tensor (0-d for one). Outside compilation one per values and device is
    kept (QLinear passes the same int seeds every step: no fill or copy each call); compiled, fills
    that inductor folds (and equal calls' equal fills merge, so equal quantizer calls do: q, k, v)."""
    if torch.compiler.is_compiling():
        fills = [torch.full((), v, dtype=torch.int64, device=device) for v in values]
        return fills[0] if len(values) == 1 else torch.stack(fills)
    key = (values, torch.device(device))
    if key not in _INT_SEEDS:
        if len(_INT_SEEDS) >= 256:  # a caller passing new ints every call: keep the few recent
            _INT_SEEDS.clear()
        _INT_SEEDS[key] = torch.tensor(values[0] if len(values) == 1 else list(values), dtype=torch.int64,
                                       device=device)
    return _INT_SEEDS[key]


@torch.library.custom_op("scaling::gemm_operand", mutates_args=())
def _gemm_operand_op(x: torch.Tensor, seeds: torch.Tensor | None, x_scale: torch.Tensor | None,
                     amax: torch.Tensor | None, dim: int, dtype: torch.dtype, column_major: bool, elem: str,
                     cap: float, block_rows: int, block_k: int, scale: str, tensor_scale: bool, scale_bound: float,
                     rounding: str, transform: int, signs: str, four_over_six: bool, eden: bool,
                     headroom: float) -> tuple[torch.Tensor, torch.Tensor]:
    from scaling.kernels.quantize import quantize_operand

    spec = _spec_from_args(elem, cap, block_rows, block_k, scale, tensor_scale, scale_bound, rounding,
                           transform, signs, four_over_six, eden, headroom)
    return quantize_operand(x, spec, dim, seeds, dtype, x_scale, amax, column_major)


@_gemm_operand_op.register_fake
def _(x, seeds, x_scale, amax, dim, dtype, column_major, *spec_args):
    from scaling.kernels.quantize import output_like

    inv = torch.empty((), dtype=torch.float32, device=x.device)
    return output_like(x, _spec_from_args(*spec_args), dim, dtype, column_major), inv


@torch.library.custom_op("scaling::tensor_amaxes", mutates_args=())
def _tensor_amaxes_op(x: torch.Tensor, seeds: torch.Tensor | None, dim: int, elem: str, cap: float,
                      block_rows: int, block_k: int, scale: str, tensor_scale: bool, scale_bound: float,
                      rounding: str, transform: int, signs: str, four_over_six: bool, eden: bool,
                      headroom: float) -> tuple[torch.Tensor, torch.Tensor]:
    from scaling.kernels.quantize import tensor_amaxes

    spec = _spec_from_args(elem, cap, block_rows, block_k, scale, tensor_scale, scale_bound, rounding,
                           transform, signs, four_over_six, eden, headroom)
    return tensor_amaxes(x, spec, dim, seeds)


@_tensor_amaxes_op.register_fake
def _(x, seeds, dim, *spec_args):
    return tuple(torch.empty((), dtype=torch.float32, device=x.device) for _ in range(2))


def _check(x: torch.Tensor, spec: QuantSpec, dim: int, seed) -> None:
    """The reference's errors for a shape or seed it refuses, before any kernel runs."""
    if x.shape[dim] % spec.k_multiple or (x.numel() // x.shape[dim]) % spec.block_rows:
        quant._canonical(torch.empty(x.shape, device="meta"), spec, dim)
    if seed is None and spec.needs_seed:
        quant.seeds_of(seed, spec)
    quant.check_seed(seed)


def gemm_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seed: int | Seeds | None,
                 dtype: torch.dtype, scale: torch.Tensor | None = None,
                 amax: torch.Tensor | None = None, column_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Exactly `quant.gemm_operand(quant.in_real_units(x, scale), spec, dim, seed, dtype)`: through
    the kernel where it runs (which applies `scale`, a 0-d FP32 tensor, as it loads x). `amax`: the
    tensor amax spec takes of x, from `shared_amaxes` (the kernel then reads x once, not twice; the
    reference finds the same value itself). `column_major`: the kernel writes the operand of a 2-D x
    along its last axis with dim 0 contiguous (the same values; a later quantizer along dim 0 that
    moves K last then reads it in place: `quantize.moves_k_last`); the reference's is row-major."""
    if not (enabled(x) and supports(spec)) or x.numel() == 0:
        return quant.gemm_operand(quant.in_real_units(x, scale), spec, dim, seed, dtype)
    dim = quant.operand_dim(x, dim)
    _check(x, spec, dim, seed)
    if scale is not None:
        scale = torch.as_tensor(scale).to(device=x.device, dtype=torch.float32).reshape(())
    return _gemm_operand_op(x, _seed_tensor(seed, x.device), scale, amax, dim, dtype, column_major,
                            *_spec_args(spec))


def shared_amaxes(x: torch.Tensor, plain: QuantSpec | None, spec: QuantSpec | None, dim: int,
                  seed: int | Seeds | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The tensor amaxes of two operands quantized from one x, in one read, for `gemm_operand(amax=)`:
    `plain`'s (a spec with a tensor scale and no rotation, along any axis: its amax is max |x|) and
    `spec`'s along dim (after its rotation). (None, None) where the kernels do not run or the pair does
    not fit (`quantize.finds_plain_amax`): each operand then finds its own."""
    if (plain is None or spec is None or not (enabled(x) and supports(plain) and supports(spec))
            or x.numel() == 0 or plain.transform or not plain.has_tensor_scale):
        return None, None
    from scaling.kernels.quantize import finds_plain_amax

    dim = quant.operand_dim(x, dim)
    if not finds_plain_amax(spec, x.shape, dim):
        return None, None
    _check(x, spec, dim, seed)
    return _tensor_amaxes_op(x, _seed_tensor(seed, x.device), dim, *_spec_args(spec))


# The spec's fields in a custom op's schema (as _spec_args gives them), for an op taking two specs.
_SPEC_SCHEMA = ("str {p}elem, float {p}cap, int {p}block_rows, int {p}block_k, str {p}scale, bool {p}tensor_scale, "
                "float {p}scale_bound, str {p}rounding, int {p}transform, str {p}signs, bool {p}four_over_six, "
                "bool {p}eden, float {p}headroom")
_N_SPEC_ARGS = 13
torch.library.define(
    "scaling::gemm_operand_pair",
    f"(Tensor x, Tensor? last_seeds, Tensor? first_seeds, Tensor? last_factor, Tensor? first_factor, "
    f"ScalarType dtype, {_SPEC_SCHEMA.format(p='last_')}, {_SPEC_SCHEMA.format(p='first_')}) "
    f"-> (Tensor, Tensor, Tensor, Tensor)")


@torch.library.impl("scaling::gemm_operand_pair", "default")
def _gemm_operand_pair_op(x, last_seeds, first_seeds, last_factor, first_factor, dtype, *spec_args):
    from scaling.kernels.pair import quantize_pair

    last, first = _spec_from_args(*spec_args[:_N_SPEC_ARGS]), _spec_from_args(*spec_args[_N_SPEC_ARGS:])
    return quantize_pair(x, last, last_seeds, first, first_seeds, dtype, last_factor, first_factor)


@torch.library.register_fake("scaling::gemm_operand_pair")
def _(x, last_seeds, first_seeds, last_factor, first_factor, dtype, *spec_args):
    def op():
        return torch.empty(x.shape, dtype=dtype, device=x.device)  # contiguous, as quantize_pair's

    def inv():
        return torch.empty((), dtype=torch.float32, device=x.device)

    return op(), inv(), op(), inv()


def pairs(x: torch.Tensor, last: QuantSpec | None, first: QuantSpec | None) -> bool:
    """Whether `gemm_operand_pair` runs the pair kernel for x (2-D) under these two specs (not with
    SCALING_PAIRS=0, which quantizes each operand alone: the same bits, for A/B timing)."""
    from scaling.kernels.pair import pairable

    if os.environ.get("SCALING_PAIRS", "1") == "0":
        return False
    # compiled, the function itself: dynamo traces through a cache wrapper anyway, with a warning
    fits = pairable.__wrapped__ if torch.compiler.is_compiling() else pairable
    return x.dim() == 2 and x.numel() > 0 and enabled(x) and fits(last, first)


def gemm_operand_pair(x: torch.Tensor, last: QuantSpec, last_seed: int | Seeds | None, first: QuantSpec,
                      first_seed: int | Seeds | None, dtype: torch.dtype, last_factor: torch.Tensor | None = None,
                      first_factor: torch.Tensor | None = None):
    """Exactly (`gemm_operand(x, last, -1, last_seed, dtype)`, `gemm_operand(x, first, 0, first_seed,
    dtype)`), from one read of x (and one for both tensor amaxes), where `pairs(x, last, first)`:
    ((operand, 1 / tensor scale) along the last axis, the same along dim 0). `last_factor`,
    `first_factor` (0-d FP32 tensors, for a spec with a tensor scale): that axis's 1 / tensor scale
    comes out multiplied by it in FP32 (the GEMM's output scale, another operand's inverse scale
    times this one's)."""
    _check(x, last, 1, last_seed)
    _check(x, first, 0, first_seed)
    last_factor, first_factor = (_factor(f, spec, name, x.device) for f, spec, name in
                                 ((last_factor, last, "last_factor"), (first_factor, first, "first_factor")))
    op_last, inv_last, op_first, inv_first = torch.ops.scaling.gemm_operand_pair(
        x.contiguous(), _seed_tensor(last_seed, x.device), _seed_tensor(first_seed, x.device), last_factor,
        first_factor, dtype, *_spec_args(last), *_spec_args(first))
    return (op_last, inv_last), (op_first, inv_first)


def _factor(factor: torch.Tensor | None, spec: QuantSpec, name: str, device: torch.device) -> torch.Tensor | None:
    """A pair's output-scale factor as a 0-d FP32 tensor on device (None stays None)."""
    if factor is None:
        return None
    if not spec.has_tensor_scale:
        raise ValueError(f"{name} multiplies a tensor scale; this spec has none")
    return factor.to(device=device, dtype=torch.float32).reshape(())


torch.library.define(
    "scaling::gemm_operand_and_amax",
    f"(Tensor x, Tensor? seeds, Tensor? rows_seeds, ScalarType dtype, {_SPEC_SCHEMA.format(p='')}, "
    f"{_SPEC_SCHEMA.format(p='rows_')}) -> (Tensor, Tensor, Tensor)")


@torch.library.impl("scaling::gemm_operand_and_amax", "default")
def _gemm_operand_and_amax_op(x, seeds, rows_seeds, dtype, *spec_args):
    from scaling.kernels.quantize import quantize_operand_and_amax

    spec, rows = _spec_from_args(*spec_args[:_N_SPEC_ARGS]), _spec_from_args(*spec_args[_N_SPEC_ARGS:])
    return quantize_operand_and_amax(x, spec, seeds, rows, rows_seeds, dtype)


@torch.library.register_fake("scaling::gemm_operand_and_amax")
def _(x, seeds, rows_seeds, dtype, *spec_args):
    from scaling.kernels.quantize import output_like

    def scalar():
        return torch.empty((), dtype=torch.float32, device=x.device)

    return output_like(x, _spec_from_args(*spec_args[:_N_SPEC_ARGS]), 0, dtype), scalar(), scalar()


def gemm_operand_and_amax(x: torch.Tensor, spec: QuantSpec, seed: int | Seeds | None, rows: QuantSpec | None,
                          rows_seed: int | Seeds | None, dtype: torch.dtype):
    """(`gemm_operand(x, spec, 0, seed, dtype)`, the tensor amax `rows` takes of x along its last axis
    or None): a 2-D x's operand along dim 0, and from the same read the amax that the operand along
    its last axis would find in a pass of its own, for its `gemm_operand(amax=)`, where the kernels
    make the first by a transposing pass that takes both (`quantize.quantize_operand_and_amax`:
    MS-EDEN's wgrad and dgrad dY, QLinear's backward). Elsewhere (None where the kernels do not run,
    x is not 2-D, the operand along dim 0 reads x in place, or `rows` has no tensor scale)
    `gemm_operand` alone and None: the other operand then finds its own amax."""
    from scaling.kernels.quantize import moves_k_last

    if not (rows is not None and rows.has_tensor_scale and x.dim() == 2 and x.numel() > 0 and enabled(x)
            and supports(spec) and supports(rows) and moves_k_last(spec, 2, 0)):
        return gemm_operand(x, spec, 0, seed, dtype), None
    _check(x, spec, 0, seed)
    _check(x, rows, 1, rows_seed)
    op, inv, amax = torch.ops.scaling.gemm_operand_and_amax(
        x.contiguous(), _seed_tensor(seed, x.device), _seed_tensor(rows_seed, x.device), dtype, *_spec_args(spec),
        *_spec_args(rows))
    return (op, inv), amax
