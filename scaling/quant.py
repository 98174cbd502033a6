"""The reference quantizer: plain PyTorch, CPU or GPU, the ground truth (QuantSpec, the data it quantizes
by, is scaling.quantspec's, torch-free).

One quantization call takes a tensor, a `QuantSpec` and the axis `dim` that is the GEMM's K; blocks
always run along `dim`. The steps, in this order (the Triton kernels follow the same order):

1. move `dim` last and view the tensor as (R, K) in float32 (the canonical layout; a view where
   it can be, so its memory keeps x's order and the temporaries below follow it);
2. optional Hadamard rotation of each group of n along K (signs from the explicit seed);
3. tensor scale (FP32): s_enc = elem_max * scale_bound / amax_tensor (two-level NV scheme) or
   elem_max / amax_tensor (per-tensor FP8 scaling); 1 when there is none. amax is taken after the
   rotation;
4. block scales: E8M0 (OCP floor rule), E4M3 ((amax_block / target) * s_enc, RTNE, saturating at
   E4M3's 448) or FP32; target = elem_max / headroom;
5. elements: v = x * (s_enc / s_block), rounded (RTNE or SR) onto the grid with saturation;
6. options: 4/6 keeps, per block, whichever of the two candidates (amax -> 6, amax -> 4) has the
   lower squared error; MS-EDEN multiplies each Hadamard group's block scales by the EDEN
   correction c = sum(x^2) / sum(x * q(x)) and rounds them stochastically onto E4M3.

The dequantised value is values * block_scale / tensor_scale. For the GEMM, `gemm_operand` returns
values * block_scale (exactly representable in BF16 for E8M0 and E4M3 block scales, `bf16_exact`: an
element has at most 4 significant bits and an E4M3 scale 4) and 1/tensor_scale, which is applied to
the GEMM's output.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import torch

from scaling import formats
from scaling.errors import UserError
from scaling.quantspec import QuantSpec
from scaling.seeds import Seeds, paired_uniform_like, uniform_like
from scaling.transforms import rotate, signs_for, unrotate

# Keys for the separate random streams of one call (elements vs block scales).
SCALE_STREAM = 0x2545F491


@dataclass
class QTensor:
    """A quantized tensor in the canonical layout (R, K), K = the quantized axis, last.

    dequantised = values * block_scale (expanded over each block) / tensor_scale, in the
    transform's basis; `dequantize()` also undoes the transform and restores x's shape.
    """

    values: torch.Tensor        # (R, K) float32, signed grid values
    block_scale: torch.Tensor   # (R / block_rows, K / block_k) float32 (values of the scale format)
    tensor_scale: torch.Tensor  # () float32: s_enc
    spec: QuantSpec
    dim: int
    shape: torch.Size           # x's original shape
    signs: torch.Tensor | None  # the transform's sign vector (None: all ones or no transform)

    def scaled(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """values * block_scale, (R, K) float32: what the emulated GEMM multiplies (BF16-exact).
        Written to `out` if given, which may be self.values (then lost)."""
        br, bk = self.spec.block_rows, self.spec.block_k  # 1 and 1 per-tensor, with a (1, 1) scale
        tiles = lambda t: t.unflatten(0, (-1, br)).unflatten(-1, (-1, bk))  # views
        product = torch.mul(tiles(self.values), self.block_scale[:, None, :, None],
                            out=None if out is None else tiles(out))
        return product.flatten(0, 1).flatten(-2)

    def to_original_layout(self, t: torch.Tensor) -> torch.Tensor:
        moved = list(self.shape)
        moved.append(moved.pop(self.dim))
        return t.reshape(moved).movedim(-1, self.dim)

    def dequantize(self, transformed: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The values as the GEMM sees them, scaled back; in x's basis unless transformed=True."""
        y = self.scaled() / self.tensor_scale
        if self.spec.transform and not transformed:
            y = unrotate(y, self.spec.transform, self.signs)
        return self.to_original_layout(y).to(dtype or torch.float32)


# --- block helpers -----------------------------------------------------------------------------

def to_blocks(t: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """(R, K) -> (R/br, K/bk, br*bk): each block's elements contiguous in the last axis."""
    R, K = t.shape
    br, bk = spec.block_rows, spec.block_k
    if br == 1:  # one view op instead of three (this runs for every operand)
        return t.unflatten(1, (K // bk, bk))
    return t.reshape(R // br, br, K // bk, bk).permute(0, 2, 1, 3).reshape(R // br, K // bk, br * bk)


def from_blocks(t: torch.Tensor, spec: QuantSpec, shape: torch.Size) -> torch.Tensor:
    R, K = shape
    br, bk = spec.block_rows, spec.block_k
    if br == 1:
        return t.flatten(1)
    return t.reshape(R // br, K // bk, br, bk).permute(0, 2, 1, 3).reshape(R, K)


def expand_blocks(per_block: torch.Tensor, spec: QuantSpec, shape: torch.Size) -> torch.Tensor:
    """A (R/br, K/bk) tensor repeated over each block's elements -> (R, K)."""
    if spec.block is None:
        return per_block.reshape(1, 1).expand(shape)
    return per_block.repeat_interleave(spec.block_rows, 0).repeat_interleave(spec.block_k, 1)


def tree_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis (a power of two) as a pairwise tree, neighbours first: (t0 + t1),
    (t2 + t3), ..., then the neighbouring pair sums, and so on (strides 1, 2, 4, ...). A fixed
    order the kernels reproduce; neighbours first because a GPU thread holds neighbouring elements,
    so all but the last few levels add in its registers (halving, strides 64, 32, ... first, made
    every level a warp shuffle: quartet2's MS-EDEN quantize, sm_90, 77.6 -> 63.8 instructions per
    element). A two-term sum is the same either way round. (On a CPU the strided adds below beat a
    sum over a size-2 axis ~7x, and the old halving too.)"""
    while t.shape[-1] > 1:
        t = t[..., 0::2] + t[..., 1::2]
    return t[..., 0]


def block_amax(t: torch.Tensor) -> torch.Tensor:
    """Max of |t| over the last axis. Any order gives the same max, so the fastest on a CPU:
    halving first (elementwise maxima, in place on |t|) where a reduction is slow, then one amax.
    - strided blocks (a tensor quantized along dim 0): halving to 1 runs over long contiguous rows
      (a strided amax would also leave a NaN other than the canonical one);
    - short contiguous blocks (16 or fewer): a reduction runs a small loop per block, so halve to 4;
    - long contiguous blocks (MX's 32, 16x16 tiles): the reduction itself is fast."""
    t = t.abs()
    if t.stride(-1) != 1:
        stop = 1
    else:
        stop = 4 if t.shape[-1] <= 16 else t.shape[-1]
    while t.shape[-1] > stop and t.shape[-1] % 2 == 0:
        h = t.shape[-1] // 2
        t = torch.maximum(t[..., :h], t[..., h:], out=t[..., :h])
    # The last reduction keeps t's memory layout (out=) and, like amax over whole blocks, gives a
    # NaN as the canonical one (CPU maximum would leave its own).
    return torch.amax(t, -1, out=torch.empty_like(t[..., 0]))


# --- the reference quantizer ---------------------------------------------------------------------

def operand_dim(x: torch.Tensor, dim: int) -> int:
    """dim (the GEMM's K) as an index into x's shape. The reference, the kernels and the C quantizer
    refuse alike what they cannot quantize: a tensor that is not floating point or has no axis, and a
    dim outside x's (not wrapped: a caller's axis bug would quantize along the wrong K)."""
    if not x.is_floating_point():
        raise TypeError(f"cannot quantize a {x.dtype} tensor: pass a floating-point one")
    if x.dim() == 0:
        raise ValueError("cannot quantize a 0-d tensor: blocks run along an axis (K)")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim {dim} is out of range for a {x.dim()}-d tensor (expected -{x.dim()} to {x.dim() - 1})")
    return dim % x.dim()


def _canonical(x: torch.Tensor, spec: QuantSpec, dim: int) -> tuple[torch.Tensor, int]:
    dim = operand_dim(x, dim)
    # detach: the quantizer has no gradient of its own (QLinear's autograd Function defines the
    # backward), and amax(out=) refuses a tensor that requires grad
    x2 = x.detach().to(torch.float32).movedim(dim, -1)
    K = x2.shape[-1]
    x2 = x2.reshape(x2.shape[:-1].numel(), K)
    m = spec.k_multiple
    if K % m:
        raise UserError(
            f"cannot quantize along a dimension of size {K} with {spec.describe()}: it must be a multiple "
            f"of {m} (blocks of {spec.block_k} along K"
            + (f", Hadamard groups of {spec.transform}" if spec.transform else "")
            + "). We refuse rather than pad, since padding changes the block statistics; use model widths "
            f"and token counts (batch x sequence) that are multiples of {m}.")
    if x2.shape[0] % spec.block_rows:
        raise UserError(
            f"cannot quantize a tensor with {x2.shape[0]} rows in {spec.block_rows}x{spec.block_k} tiles: "
            f"the other dimension must be a multiple of {spec.block_rows}; use model widths that are.")
    return x2, dim


def seeds_of(seed: int | Seeds | None, spec: QuantSpec) -> Seeds | None:
    """The Seeds a quantization call reads (an int seeds both streams); an error if spec needs one,
    or if a seed is not an int or a one-element integer tensor (`check_seed`)."""
    if seed is None:
        if spec.needs_seed:
            raise ValueError(f"{spec.describe()} is random (SR, random signs or MS-EDEN): pass an explicit seed")
        return None
    check_seed(seed)
    return seed if isinstance(seed, Seeds) else Seeds(rounding=seed, signs=seed)


def check_seed(seed: int | Seeds | torch.Tensor | None) -> None:
    """A seed is an int, a one-element integer tensor, or Seeds of those (None: none given). A float
    would be truncated on one path and refused on another, so every path refuses it here."""
    for s in (seed.rounding, seed.signs) if isinstance(seed, Seeds) else (seed,):
        if isinstance(s, torch.Tensor):
            ok = s.numel() == 1 and not (s.is_floating_point() or s.is_complex() or s.dtype == torch.bool)
        else:
            ok = s is None or (isinstance(s, numbers.Integral) and not isinstance(s, bool))
        if not ok:
            raise TypeError(f"seed {s!r}: pass an int, a one-element integer tensor, or Seeds of those")


def _constant(value: float, device: torch.device) -> torch.Tensor:
    """A float32 scalar tensor on `device`, made once per value and device on a CPU (a tensor
    creation costs as much as a small op, and every quantization call needs a few)."""
    if device.type != "cpu" or torch.compiler.is_compiling():
        return torch.tensor(value, dtype=torch.float32, device=device)
    return _cpu_constant(value)


@functools.lru_cache(maxsize=256)
def _cpu_constant(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


def tensor_encode_scale(amax: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """s_enc (float32 scalar): elem_max * scale_bound / amax, or elem_max / amax for per-tensor
    scaling; 1 where that is not finite (amax 0 or NaN, or so tiny, < ~1e-35, that the quotient
    overflows: such a tensor then quantizes to zeros, where an infinite scale made 0 x inf = NaN)
    and where there is no tensor scale."""
    if spec.block is not None and not spec.tensor_scale:
        return torch.ones((), dtype=torch.float32, device=amax.device)
    s_enc = _constant(spec.encode_numerator, amax.device) / amax
    return torch.where(s_enc < float("inf"), s_enc, 1.0)


@functools.lru_cache(maxsize=None)
def scale_constants(spec: QuantSpec) -> tuple[float, float]:
    """QuantSpec.encode_numerator and block_target as the FP32 values the reference computes with, for the
    fused quantizers (Triton and C), which take them as floats."""
    return (float(torch.tensor(spec.encode_numerator, dtype=torch.float32)),
            float(torch.tensor(spec.block_target, dtype=torch.float32)))


def block_scale_for(amax_b: torch.Tensor, s_enc: torch.Tensor, spec: QuantSpec, target: float) -> torch.Tensor:
    """Block scales (float32 values of the scale format) mapping each block's amax to `target`."""
    if spec.scale == "e8m0":
        return formats.e8m0_floor_scale(amax_b, spec.elem)
    # target as a device tensor: PyTorch's CUDA division by a CPU scalar multiplies by its reciprocal
    # instead (one bit off now and then), which would make the reference differ between CPU and GPU.
    raw = (amax_b / _constant(target, amax_b.device)) * s_enc
    # Saturate at E4M3's own bound, not scale_bound: scale_bound sets s_enc so that the amax -> 6
    # scales stay <= it; 4/6's amax -> 4 candidate is those times 1.5 (<= 384 under 256), as Four
    # Over Six's reference computes it (its 256 applies to the tensor scale only).
    return formats.e4m3_scale(raw) if spec.scale == "e4m3" else raw


def _round_blocks(xb: torch.Tensor, s_enc: torch.Tensor, s_b: torch.Tensor, spec: QuantSpec,
                  u: torch.Tensor | None) -> torch.Tensor:
    """Elements of blocked x (nb_r, nb_k, n) under block scales s_b: signed grid values."""
    factor = torch.where(s_b > 0, s_enc / s_b, 0.0)  # (a zero or NaN block scale: all elements 0)
    v = xb * factor.unsqueeze(-1)
    return formats.round_elements(v, spec.elem, spec.cap, spec.rounding, u, out=v)


def _amax(t: torch.Tensor) -> torch.Tensor:
    """The largest element (0 for an empty tensor); NaN if there is one."""
    return t.amax() if t.numel() else torch.zeros((), device=t.device)


def rotated(x: torch.Tensor, spec: QuantSpec, dim: int, seeds: Seeds | None
            ) -> tuple[torch.Tensor, int, torch.Tensor | None]:
    """x as the (rows, K) FP32 matrix the blocks are cut from (K = `dim` moved last), rotated by the
    spec's Hadamard transform under `seeds`; the dim and the signs (None: no transform)."""
    x2, dim = _canonical(x, spec, dim)
    signs = None
    if spec.transform:
        signs = signs_for(spec.signs, spec.transform, seeds.signs if seeds else None, x2.device)
        x2 = rotate(x2, spec.transform, signs)
    return x2, dim, signs


def quantize(x: torch.Tensor, spec: QuantSpec, dim: int = -1, seed: int | Seeds | None = None) -> QTensor:
    """Quantize x with blocks along `dim` (the GEMM's K). Returns grid values, block scales and
    the tensor scale. `seed` (an int, or Seeds(rounding, signs)) is required when spec is random."""
    seeds = seeds_of(seed, spec)
    x2, dim, signs = rotated(x, spec, dim, seeds)
    R, K = x2.shape
    u = None
    if spec.rounding == "sr":
        u = paired_uniform_like(seeds.rounding, x2)

    if spec.block is None:  # per-tensor scaling (FP8 current scaling)
        s_enc = tensor_encode_scale(_amax(x2.abs()), spec)
        values = _round_blocks(x2.reshape(R, 1, K), s_enc, torch.ones(R, 1, device=x2.device),
                               spec, u.reshape(R, 1, K) if u is not None else None).reshape(R, K)
        return QTensor(values, torch.ones(1, 1, device=x2.device), s_enc, spec, dim, x.shape, signs)

    xb = to_blocks(x2, spec)
    ub = to_blocks(u, spec) if u is not None else None
    amax_b = block_amax(xb)
    s_enc = tensor_encode_scale(_amax(amax_b), spec)  # the largest block amax is the tensor's
    s_b = block_scale_for(amax_b, s_enc, spec, spec.block_target)
    qb = _round_blocks(xb, s_enc, s_b, spec, ub)

    if spec.four_over_six:
        s_b4 = block_scale_for(amax_b, s_enc, spec, 4.0)
        qb4 = _round_blocks(xb, s_enc, s_b4, spec, ub)
        x_enc = xb * s_enc
        err6 = tree_sum(_squared_error(qb, s_b, x_enc))
        err4 = tree_sum(_squared_error(qb4, s_b4, x_enc))
        use4 = err4 < err6  # ties keep the standard (amax -> 6) candidate
        s_b = torch.where(use4, s_b4, s_b)
        qb = torch.where(use4.unsqueeze(-1), qb4, qb)

    if spec.eden:
        s_b = _eden_scales(xb, qb, s_b, s_enc, spec, seeds)

    values = from_blocks(qb, spec, x2.shape)
    return QTensor(values, s_b, s_enc, spec, dim, x.shape, signs)


def _squared_error(qb: torch.Tensor, s_b: torch.Tensor, x_enc: torch.Tensor) -> torch.Tensor:
    """(qb * s_b - x_enc)^2 per element, in one new tensor."""
    err = (qb * s_b.unsqueeze(-1)).sub_(x_enc)
    return err.mul_(err)


def _eden_scales(xb: torch.Tensor, qb: torch.Tensor, s_b: torch.Tensor, s_enc: torch.Tensor,
                 spec: QuantSpec, seeds: Seeds) -> torch.Tensor:
    """MS-EDEN: per Hadamard group, c = sum(x^2) / sum(x * q(x)) (in the s_enc-scaled units),
    then the group's block scales times c, stochastically rounded onto E4M3."""
    nr, nk, n = xb.shape
    per_group = spec.transform // spec.block_k
    # xb is quantize's own rotated copy (MS-EDEN has a transform) and is not read again: scale it in place.
    x_enc = xb.mul_(s_enc).reshape(nr, nk // per_group, per_group * n)
    deq = (qb * s_b.unsqueeze(-1)).reshape(nr, nk // per_group, per_group * n)
    den = tree_sum(deq.mul_(x_enc))  # x_enc * deq, in place on temporaries
    num = tree_sum(x_enc.mul_(x_enc))
    c = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 1.0)
    corrected = s_b * c.repeat_interleave(per_group, 1)
    u = uniform_like(seeds.rounding ^ SCALE_STREAM, corrected)
    return formats.round_fp8_sr(corrected, "e4m3", u)


def fake_quantize(x: torch.Tensor, spec: QuantSpec, dim: int = -1, seed: int | Seeds | None = None) -> torch.Tensor:
    """Same shape and dtype as x: the values the GEMM sees, scaled back, in x's own basis."""
    return quantize(x, spec, dim, seed).dequantize(dtype=x.dtype)


def in_real_units(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """A tensor kept as (values, scale), such as a forward GEMM operand and its 1 / tensor scale, in
    real units: x.float() * scale in FP32 (or x, for no scale). The kernels take the pair and do this
    multiply in their load, with the same bits."""
    return x if scale is None else x.float() * scale


def gemm_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seed: int | Seeds | None,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """What an emulated GEMM multiplies: (values * block_scale in x's layout and the transform's
    basis, cast to `dtype` exactly), and 1 / tensor_scale (float32 scalar) for the GEMM output."""
    q = quantize(x, spec, dim, seed)
    return q.to_original_layout(q.scaled(out=q.values)).to(dtype), 1.0 / q.tensor_scale
