"""QLinear: a linear layer whose three GEMMs run under a Recipe, and convert(model, recipe).

Each GEMM quantizes its two operands along its own K (fprop: in_features, dgrad: out_features,
wgrad: tokens), multiplies the block-scaled values (exact in BF16) with FP32 accumulation, and
applies the two tensor scales to the output. Both operands of a GEMM share the transform (same
Hadamard size and signs), so the product is taken in one rotated basis.

Seeds are explicit: rounding seed = mix(run seed, layer, step, operand); sign seed by the spec's
policy (once per run, per step, or per step and layer). Under gradient accumulation each micro-batch
after the first also mixes in its index (rounding and per-layer-step signs: every backward call draws
its own, as Quartet II asks; per-step signs stay the step's). `set_step` computes a layer's seeds for the
step on the host, as ints, and copies them into a small device table that the GEMMs read: a compiled
model does not recompile every step, and no device op computes a seed. (Mixing a device-side step
and layer index took ~190 tiny kernels per eager NVFP4 layer call: on the H200 its forward and
backward ran 220 kernels, 28 now, and 1.26 -> 1.01 ms at d = 2048.)
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import torch.nn as nn

from scaling import cpu_quantize, kernels, quant
from scaling.kernels import scaled_gemm
from scaling.quant import QuantSpec
from scaling.recipes import OPERANDS, Recipe, check_blocks, check_shape
from scaling.seeds import Seeds, mix, mix_from, name_code

# Integer codes of the names mixed into seeds, computed once (set_step mixes them for every layer
# each step); mix() gives the same value for a name and its code.
_CODE = {n: name_code(n) for n in ("round", "signs", "fprop", "dgrad", "wgrad", "x", "w", "dy", "micro")}


def _use_kernels(t: torch.Tensor) -> bool:
    """The Triton kernels serve CUDA tensors (`kernels.enabled`; on a CPU, even under the
    interpreter, QLinear runs the C quantizer or the reference)."""
    return t.is_cuda and kernels.enabled(t)


# Callbacks (name, dim, operand, QTensor) that see every quantized GEMM operand; see observe_operands.
_OBSERVERS: list = []


@contextlib.contextmanager
def observe_operands():
    """Record every quantized GEMM operand as ("fprop.x", dim, operand, QTensor) while active.
    Runs the reference quantizer (it needs the QTensor); used by tests and diagnostics."""
    seen: list = []
    _OBSERVERS.append(seen.append)
    try:
        yield seen
    finally:
        _OBSERVERS.remove(seen.append)


def gemm_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seeds: Seeds | None,
                 dtype: torch.dtype, name: str = "", scale: torch.Tensor | None = None,
                 amax: torch.Tensor | None = None,
                 column_major: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Dispatch: Triton kernels on CUDA, else the fused CPU quantizer or the reference (identical
    bits). `scale`: x is kept as (values, scale) (quant.in_real_units), which the kernels multiply as
    they load. `amax`: the tensor amax from kernels.shared_amaxes (the kernels then skip their amax
    pass). `column_major`: the kernels write the operand with dim 0 contiguous (kernels.gemm_operand)."""
    if _use_kernels(x) and spec is not None and not _OBSERVERS:
        return kernels.gemm_operand(x, spec, dim, seeds, dtype, scale, amax, column_major)
    x = quant.in_real_units(x, scale)
    if spec is None:
        return x.to(dtype), None
    if _OBSERVERS:
        q = quant.quantize(x, spec, dim, seeds)
        op = q.to_original_layout(q.scaled()).to(dtype)
        for observe in _OBSERVERS:
            observe((name, dim, op, q))
        return op, 1.0 / q.tensor_scale
    return _cached_operand(x, spec, dim, seeds, dtype, name)


# The last activation operand (or pair) quantized, per GEMM operand name: (key, x, result).
_LAST: dict[str, tuple] = {}


def _cached_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seeds: Seeds | None,
                    dtype: torch.dtype, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """_plain_operand, reusing the last result for this operand name when it quantized the same
    tensor the same way (`_reusing_last`). Layers that share their input (q, k, v; gate and up) would
    otherwise quantize it once each for fprop and again for wgrad (a compiled graph merges such calls
    itself)."""
    if torch.compiler.is_compiling():  # (first: dynamo cannot trace is_inference)
        return quant.gemm_operand(x, spec, dim, seeds, dtype)
    return _reusing_last(name, x, (spec, dim, seeds, dtype), lambda: _plain_operand(x, spec, dim, seeds, dtype))


def _reusing_last(name: str, x: torch.Tensor, how: tuple, compute):
    """compute(), or its last result for this operand name when that quantized the same activation x
    the same way (`how`: specs, dims, seeds, dtype). Only activations (names ending in ".x") outside
    compilation, with int seeds: the same tensor is the same memory, shape, strides and version (an
    in-place change bumps it); the entry holds x, so no other tensor can get its memory meanwhile.
    Never while a CUDA graph is captured: the graph must record the work (a layer replayed on new
    data would otherwise read the operands quantized before the capture, and a benchmark that calls
    a layer on one x would time it without its quantizers)."""
    plain_seeds = all(s is None or (isinstance(s.rounding, int) and isinstance(s.signs, int))
                      for s in how if isinstance(s, Seeds) or s is None)
    if (torch.compiler.is_compiling() or not name.endswith(".x") or not plain_seeds or x.is_inference()
            or _capturing(x)):
        return compute()
    key = (x.data_ptr(), x.shape, x.stride(), x.dtype, x._version, *how)
    last = _LAST.get(name)
    if last is not None and last[0] == key:
        return last[2]
    result = compute()
    _LAST[name] = (key, x, result)
    return result


def forget_reused() -> None:
    """Drop the kept operands of `_reusing_last` (a benchmark calling a layer on one x again and
    again, without a CUDA graph, would otherwise time the later calls without x's quantizers)."""
    _LAST.clear()


def _capturing(x: torch.Tensor) -> bool:
    """Whether x's device is capturing a CUDA graph on the current stream."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def gemm_operand_pair(x: torch.Tensor, last: QuantSpec | None, last_seeds: Seeds | None, first: QuantSpec | None,
                      first_seeds: Seeds | None, dtype: torch.dtype, name: str = "",
                      last_factor: torch.Tensor | None = None, first_factor: torch.Tensor | None = None):
    """Both operands of a 2-D x, along its last axis under `last` and along dim 0 under `first`, as
    (gemm_operand(x, last, -1, ...), gemm_operand(x, first, 0, ...)) from one read (the pair kernel),
    where the kernels run and the pair fits (`kernels.pairs`); else None and each is quantized alone.
    `last_factor`, `first_factor`: that axis's 1 / tensor scale comes out times it
    (`kernels.gemm_operand_pair`).
    Outside compilation an activation's pair is reused for the next layer reading the same x (q, k
    and v), which would otherwise keep a copy each of its wgrad operand for the backward."""
    if not _use_kernels(x) or _OBSERVERS:
        return None

    if not kernels.pairs(x, last, first):
        return None
    if last_factor is not None or first_factor is not None:  # products for these GEMMs: nothing to reuse
        return kernels.gemm_operand_pair(x, last, last_seeds, first, first_seeds, dtype, last_factor, first_factor)
    return _reusing_last(name, x, (last, last_seeds, first, first_seeds, dtype),
                         lambda: kernels.gemm_operand_pair(x, last, last_seeds, first, first_seeds, dtype))


def _plain_operand(x: torch.Tensor, spec: QuantSpec, dim: int, seeds: Seeds | None,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """quant.gemm_operand without the Triton kernels: the fused CPU quantizer where it serves the
    call, else the reference (the same bits)."""
    if cpu_quantize.serves(x, spec, dim):
        return cpu_quantize.gemm_operand(x, spec, dim, seeds, dtype)
    return quant.gemm_operand(x, spec, dim, seeds, dtype)


@functools.lru_cache(maxsize=1)
def _cpu_multiplies_bf16() -> bool:
    """Whether FP32 matmuls in oneDNN's BF16 math mode run as BF16 products here: the CPU has them
    (AMX tiles or AVX-512 BF16) and this torch honours the mode, probed once on operands that BF16
    rounds (1 + 2^-12 -> 1). (On the GPU machine's CPU and torch 2.11 the mode changed nothing.)"""
    cpu = torch.cpu
    if not torch.backends.mkldnn.is_available() or not any(
            getattr(cpu, f, lambda: False)() for f in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")):
        return False
    a, b = torch.full((64, 64), 1 + 2.0 ** -12), torch.ones(64, 64)
    return bool(_bf16_mode_mm(a, b)[0, 0] == 64)


def _bf16_mode_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (FP32) with oneDNN's BF16 math mode on for the call."""
    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        return torch.mm(a, b)
    finally:
        matmul.fp32_precision = before


def _cpu_mm(a: torch.Tensor, b: torch.Tensor, bf16_exact: bool) -> torch.Tensor:
    """a @ b on a CPU in FP32. Where both operands are exact in BF16 and the CPU multiplies BF16
    natively (`_cpu_multiplies_bf16`), as BF16 products with FP32 accumulation (oneDNN's BF16 math
    mode for FP32 matmuls: the operands' conversion to BF16 rounds nothing): the same sums as the
    GPU's BF16 GEMMs make, in another order than MKL's FP32 GEMM (on this machine's AMX, `scaling
    bench cpu`: llama2 1M's nvfp4 step 838-858 -> 717-731 ms). Else, with SCALING_CPU_BF16_GEMM=0
    (for A/B timing), or while torch.compile traces (setting the flag would break its graph): IEEE
    FP32."""
    if (not bf16_exact or torch.compiler.is_compiling() or os.environ.get("SCALING_CPU_BF16_GEMM", "1") == "0"
            or not _cpu_multiplies_bf16()):
        return torch.mm(a, b)
    return _bf16_mode_mm(a, b)


def _matmul(a: torch.Tensor, b: torch.Tensor, inv_a, inv_b, dtype: torch.dtype,
            bias: torch.Tensor | None = None, bf16_exact: bool = False) -> torch.Tensor:
    """a @ b with FP32 accumulation, times the tensor scales (0-d FP32 tensors, or None for an operand
    without one), plus bias, rounded once to `dtype`. `bf16_exact`: both operands hold values exact in
    BF16 (`Recipe.gemm_in_bf16`)."""
    scales = [inv for inv in (inv_a, inv_b) if inv is not None]
    if a.is_cuda:
        if bias is None and not scales and dtype in (a.dtype, torch.float32):
            # the FP32 accumulator rounded straight to dtype in cuBLAS's epilogue
            return torch.mm(a, b) if dtype == a.dtype else torch.mm(a, b, out_dtype=dtype)
        if bias is None and scales and scaled_gemm.supported(a, b, dtype):
            # the tensor scale in cuBLASLt's epilogue: no FP32 output to store and read again
            return scaled_gemm.scaled_mm(a, b, _product(scales), dtype)
        out = torch.mm(a, b) if a.dtype == torch.float32 else torch.mm(a, b, out_dtype=torch.float32)
        # Eager: scale and cast in one pass. Compiled: the torch ops below, which inductor fuses into
        # the kernel that consumes the output (RoPE, ReLU², residual add, ...), saving that pass.
        if bias is None and scales and _use_kernels(a) and not torch.compiler.is_compiling():
            from scaling.kernels.epilogue import scale_cast

            return scale_cast(out, scales[0], scales[1] if len(scales) > 1 else None, dtype)
    else:
        out = _cpu_mm(a.float(), b.float(), bf16_exact)
    if scales:
        out = out * _product(scales)
    if bias is not None:
        out = out + bias.float()
    return out.to(dtype)


def _product(scales: list[torch.Tensor]) -> torch.Tensor:
    """The output scale of one or two tensor scales (their FP32 product)."""
    return scales[0] if len(scales) == 1 else scales[0] * scales[1]


class _QuantizedLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer: "QLinear"):
        recipe = layer.recipe
        dtype = _gemm_dtype(x, recipe)
        amax_x = amax_wgrad_x = pair = None
        if ctx.needs_input_grad[1] and not recipe.backward_from_forward:
            # fprop's X and wgrad's X from one read, where the pair kernel serves the recipe; else one
            # amax pass for both, where the kernels can share it
            pair = layer.operand_pair("fprop", "wgrad", "x", x, dtype)
            if pair is None:
                amax_x, amax_wgrad_x = layer.shared_amaxes(x, "fprop", "wgrad", "x")
        if pair is not None:
            (xq, inv_x), (x_wgrad, inv_wgrad_x) = pair
        else:
            wgrad_reads_x = ctx.needs_input_grad[1] and layer.kept_for_dim0("wgrad", "x", x)
            xq, inv_x = layer.operand("fprop", "x", x, -1, dtype, amax=amax_x, column_major=wgrad_reads_x)
        # dgrad's W operand: fprop's where the two specs are one that serves either axis (NVFP4's 16x16
        # tiles, with 4/6 or without), else made with fprop's from one read of W where the pair kernel
        # serves the two (UFP4, MXFP4: one amax pass and one quantize pass, not two each), kept for the
        # backward. (Observers, a test's, see every operand computed: dgrad's W is then made again along
        # its own axis, the same values but where 4/6's float32 error sums tie differently.)
        reuse_w = (recipe.fprop_w is not None and recipe.dgrad_w == recipe.fprop_w and recipe.fprop_w.transposable
                   and not _OBSERVERS)
        w_pair = None
        if ctx.needs_input_grad[0] and not reuse_w and not recipe.backward_from_forward:
            w_pair = layer.operand_pair("fprop", "dgrad", "w", weight, dtype, partner=inv_x)
        scale_x = inv_x
        if w_pair is not None:
            (wq, inv_w), (w_dgrad, inv_w_dgrad) = w_pair
            scale_x = _unless_fused(inv_x, inv_w)
        else:
            dgrad_reads_w = ctx.needs_input_grad[0] and layer.kept_for_dim0("dgrad", "w", weight)
            wq, inv_w = layer.operand("fprop", "w", weight, -1, dtype, column_major=dgrad_reads_w)
            w_dgrad, inv_w_dgrad = (wq, inv_w) if reuse_w else (None, None)
        y = _matmul(xq, wq.t(), scale_x, inv_w, torch.bfloat16 if x.is_cuda else x.dtype, bias,
                    recipe.gemm_in_bf16("fprop"))
        ctx.w_is_operand = w_dgrad is not None
        x_scale = w_scale = None
        if recipe.backward_from_forward:
            # Quartet II: the backward GEMMs see what the forward GEMM saw (scaled back, x's basis).
            x_saved, x_scale = _as_seen(xq, inv_x, recipe.fprop_x, layer.seeds("fprop", "x", recipe.fprop_x))
            w_saved, w_scale = _as_seen(wq, inv_w, recipe.fprop_w, layer.seeds("fprop", "w", recipe.fprop_w))
        else:
            # wgrad's X operand itself where the pair made it (the same bytes as x)
            x_saved, w_saved = (x if pair is None else x_wgrad), (w_dgrad if ctx.w_is_operand else weight)
        ctx.x_is_operand = pair is not None
        inv_x_saved = inv_wgrad_x if pair is not None else None
        ctx.save_for_backward(x_saved, w_saved, inv_w_dgrad, x_scale, w_scale, amax_wgrad_x, inv_x_saved)
        ctx.layer, ctx.has_bias = layer, bias is not None
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, inv_w, x_scale, w_scale, amax_wgrad_x, inv_x = ctx.saved_tensors
        layer = ctx.layer
        dtype = _gemm_dtype(dy, layer.recipe)
        dx = dw = db = None
        amax_dgrad_dy = amax_wgrad_dy = pair = None
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
            # each GEMM's output scale made by the pair where the other operand's scale is at hand
            pair = layer.operand_pair("dgrad", "wgrad", "dy", dy, dtype, partner=inv_w if ctx.w_is_operand else None,
                                      first_partner=inv_x if ctx.x_is_operand else None)
            if pair is None:
                amax_dgrad_dy, amax_wgrad_dy = layer.shared_amaxes(dy, "dgrad", "wgrad", "dy")
        # wgrad first: dX, written last, is then still in the L2 cache for the op that reads it next
        # (x.grad's accumulation, or the layer below's backward)
        if ctx.needs_input_grad[1]:  # wgrad: dW = dY^T . X, K = tokens
            if pair:
                a, ia = pair[1]
            elif ctx.needs_input_grad[0] and amax_wgrad_dy is None:
                # dgrad's amax of dY from the read of wgrad's transposing pass, where one kernel takes both
                (a, ia), amax_dgrad_dy = layer.operand_and_amax("wgrad", "dgrad", "dy", dy, dtype)
            else:
                a, ia = layer.operand("wgrad", "dy", dy, 0, dtype, amax=amax_wgrad_dy)
            b, ib = ((x, inv_x) if ctx.x_is_operand
                     else layer.operand("wgrad", "x", x, 0, dtype, x_scale, amax=amax_wgrad_x))
            if pair and ctx.x_is_operand:
                ib = _unless_fused(ib, ia)
            dw = _matmul(a.t(), b, ia, ib, ctx.w_dtype, bf16_exact=layer.recipe.gemm_in_bf16("wgrad"))
        if ctx.needs_input_grad[0]:  # dgrad: dX = dY . W, K = out_features
            a, ia = pair[0] if pair else layer.operand("dgrad", "dy", dy, -1, dtype, amax=amax_dgrad_dy)
            b, ib = (w, inv_w) if ctx.w_is_operand else layer.operand("dgrad", "w", w, 0, dtype, w_scale)
            if pair and ctx.w_is_operand:
                ib = _unless_fused(ib, ia)
            dx = _matmul(a, b, ia, ib, ctx.x_dtype, bf16_exact=layer.recipe.gemm_in_bf16("dgrad"))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.float().sum(0)
        return dx, dw, db, None


def _unless_fused(partner: torch.Tensor | None, scale: torch.Tensor | None) -> torch.Tensor | None:
    """A GEMM's partner scale, or None where the pair kernel already multiplied it into the other
    operand's `scale` (`QLinear.operand_pair(partner=...)`: both operands have tensor scales)."""
    return None if partner is not None and scale is not None else partner


def _gemm_dtype(t: torch.Tensor, recipe: Recipe) -> torch.dtype:
    """BF16 operands on GPU (tensor cores) where the recipe's operands are exact in BF16, else FP32
    (a user recipe with FP32 block scales: BF16 would round its operands); FP32 on CPU (same values,
    faster there)."""
    return torch.bfloat16 if t.is_cuda and recipe.bf16_operands else torch.float32


def _as_seen(op: torch.Tensor, inv: torch.Tensor | None, spec: QuantSpec | None,
             seeds: Seeds | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A forward GEMM operand in real units and x's basis (for Quartet II's backward), as (values,
    scale) for quant.in_real_units: the operand and its 1 / tensor scale as they are (the
    quantizers apply the scale as they load: no FP32 copy), or, for a rotated operand, the unrotated
    FP32 values and no scale."""
    if spec is None or not spec.transform:
        return op, inv
    from scaling.transforms import signs_for, unrotate

    y = op.float() if inv is None else quant.in_real_units(op, inv)
    signs = signs_for(spec.signs, spec.transform, seeds.signs if seeds else None, y.device)
    return unrotate(y, spec.transform, signs), None


class QLinear(nn.Linear):
    """nn.Linear whose forward and backward GEMMs run under `recipe`. Shares the original weight."""

    recipe: Recipe
    layer_index: int
    run_seed: int

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: Recipe, layer_index: int, run_seed: int) -> "QLinear":
        q = cls.__new__(cls)
        nn.Module.__init__(q)
        q.in_features, q.out_features = linear.in_features, linear.out_features
        q.weight, q.bias = linear.weight, linear.bias
        q.recipe, q.layer_index, q.run_seed = recipe, layer_index, run_seed
        q.run_signs = mix(run_seed, _CODE["signs"])  # the sign seed under the "run" policy
        # [rounding seed, sign seed] per operand (OPERANDS order) at the current step, on the weight's
        # device. Compiled, a block reads only its table (a tensor), so every block runs the same code
        # (scaling.compiling) and no step recompiles.
        q.register_buffer("seed_table", torch.zeros(len(OPERANDS), 2, dtype=torch.int64, device=linear.weight.device),
                          persistent=False)
        q.set_step(0)
        return q

    def step_seeds(self, step: int, micro: int = 0) -> list[tuple[int, int]]:
        """(rounding seed, sign seed) of each operand, in OPERANDS order, at this step and micro-batch:
        the rounding seed mix(run seed, "round", layer, step, [*call,] gemm, operand), the sign seed
        mix(run seed, "signs", *policy) with policy (), (step,) or (layer, step, [*call]), where call =
        ("micro", micro) for micro-batches after the first (none for the first, so a run without
        accumulation draws what it always drew). A seed the spec does not read is 0 (see `seeds`).
        (Shared prefixes are folded once: every layer does this every step.)"""
        layer, run = self.layer_index, self.run_seed
        call = (_CODE["micro"], micro) if micro else ()
        policies = {"step": (step,), "layer_step": (layer, step, *call)}
        round_step, signs_of, rows = None, {"run": self.run_signs}, []
        for name in OPERANDS:
            spec = getattr(self.recipe, name)
            gemm, operand = name.split("_")
            rounding = signs = 0
            if spec is not None and spec.random_rounding:
                if round_step is None:
                    round_step = mix(run, _CODE["round"], layer, step, *call)
                rounding = mix_from(round_step, _CODE[gemm], _CODE[operand])
            if spec is not None and spec.signs != "ones":
                if spec.signs not in signs_of:
                    signs_of[spec.signs] = mix(run, _CODE["signs"], *policies[spec.signs])
                signs = signs_of[spec.signs]
            rows.append((rounding, signs))
        return rows

    def set_step(self, step: int, micro: int = 0) -> None:
        """Make this step's (and micro-batch's) seeds the ones the GEMMs read (an asynchronous copy to
        the device)."""
        self.seed_table.copy_(torch.tensor(self.step_seeds(step, micro), dtype=torch.int64), non_blocking=True)

    def seeds(self, gemm: str, operand: str, spec: QuantSpec | None) -> Seeds | None:
        """The seeds one operand's quantizer reads this step: Python ints on a CPU outside compilation
        (the reference then keeps its caches). Else a seed that changes with the step or layer is a
        0-d view of the device table (no device op computes it), and one that does not (an unread
        rounding seed: 0; "run" signs) stays an int: the same in every layer, so calls on a shared
        input are equal calls, which a compiled graph merges (q, k and v's fprop.x and wgrad.x)."""
        if spec is None or not spec.needs_seed:
            return None
        i = OPERANDS.index(f"{gemm}_{operand}")
        if self._host_seeds():
            return Seeds(*self.seed_table[i].tolist())
        rounding = self.seed_table[i, 0] if spec.random_rounding else 0
        signs = {"ones": 0, "run": self.run_signs}.get(spec.signs)
        seeds = Seeds(rounding, self.seed_table[i, 1] if signs is None else signs)
        if torch.compiler.is_compiling() or not isinstance(seeds.rounding, torch.Tensor) and signs is not None:
            return seeds
        # Eager, a tensor seed: the table's row holds both values (step_seeds writes every seed it
        # reads), so the kernels take the row itself, not a stack of the two made every call.
        return Seeds(seeds.rounding, seeds.signs, row=self.seed_table[i])

    def _host_seeds(self) -> bool:
        """Whether `seeds` gives Python ints: on a CPU outside compilation."""
        return self.seed_table.device.type == "cpu" and not torch.compiler.is_compiling()

    def operand(self, gemm: str, operand: str, t: torch.Tensor, dim: int, dtype: torch.dtype,
                scale: torch.Tensor | None = None, amax: torch.Tensor | None = None,
                column_major: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One GEMM operand under this layer's recipe, of t (times `scale`, if given): (block-scaled
        values, 1/tensor scale, or None where the spec has no tensor scale). `amax`: from shared_amaxes.
        `column_major`: written with dim 0 contiguous where the kernels run (`kept_for_dim0`)."""
        spec = self.recipe.spec(f"{gemm}.{operand}")
        op, inv = gemm_operand(t, spec, dim, self.seeds(gemm, operand, spec), dtype, name=f"{gemm}.{operand}",
                               scale=scale, amax=amax, column_major=column_major)
        return op, (inv if spec is not None and spec.has_tensor_scale else None)

    def operand_and_amax(self, gemm: str, rows_gemm: str, operand: str, t: torch.Tensor, dtype: torch.dtype
                         ) -> tuple[tuple[torch.Tensor, torch.Tensor | None], torch.Tensor | None]:
        """(`operand(gemm, operand, t, 0, dtype)`, the tensor amax of `rows_gemm`'s operand of t along its
        last axis, or None): both from one read where the kernels run and one transposing pass takes
        them (`kernels.gemm_operand_and_amax`: MS-EDEN's wgrad and dgrad dY); None: that operand finds
        its own."""
        spec, rows = self.recipe.spec(f"{gemm}.{operand}"), self.recipe.spec(f"{rows_gemm}.{operand}")
        if not _use_kernels(t) or _OBSERVERS or spec is None:
            return self.operand(gemm, operand, t, 0, dtype), None

        (op, inv), amax = kernels.gemm_operand_and_amax(t, spec, self.seeds(gemm, operand, spec), rows,
                                                        self.seeds(rows_gemm, operand, rows), dtype)
        return (op, inv if spec.has_tensor_scale else None), amax

    def kept_for_dim0(self, gemm: str, operand: str, t: torch.Tensor) -> bool:
        """Whether fprop's operand of t is best written column-major, where the backward's `gemm` will
        run: that GEMM quantizes it again (`backward_from_forward`: Quartet II) along dim 0, where the
        kernels would first copy it with K moved last (MS-EDEN: `moves_k_last`). Column-major, it is
        read in place: the forward's quantizer stores its tiles transposed (through shared memory)
        instead of a transposing copy's read and write later. The fprop GEMM takes either layout."""
        recipe, seen = self.recipe, self.recipe.spec(f"fprop.{operand}")
        spec = recipe.spec(f"{gemm}.{operand}")
        if not (recipe.backward_from_forward and spec is not None and seen is not None and not seen.transform
                and _use_kernels(t)):
            return False
        from scaling.kernels.quantize import moves_k_last

        return moves_k_last(spec, 2, 0)

    def operand_pair(self, last_gemm: str, gemm: str, operand: str, t: torch.Tensor, dtype: torch.dtype,
                     partner: torch.Tensor | None = None, first_partner: torch.Tensor | None = None
                     ) -> tuple[tuple[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]] | None:
        """Two GEMMs' operands of t from one read (`gemm_operand_pair`): `last_gemm`'s along t's last
        axis and `gemm`'s along dim 0, as ((values, 1/tensor scale or None), (...)); None where the
        pair kernel does not serve them (each operand is then quantized alone). `partner`
        (`first_partner`): the 1/tensor scale of `last_gemm`'s (`gemm`'s) other operand; where given
        and the spec has a tensor scale, that item's scale is its GEMM's output scale, the product of
        the two (made by the pair kernel; `_unless_fused` then drops the partner's)."""
        last = self.recipe.spec(f"{last_gemm}.{operand}")
        first = self.recipe.spec(f"{gemm}.{operand}")
        factor, first_factor = (p if p is not None and spec is not None and spec.has_tensor_scale else None
                                for p, spec in ((partner, last), (first_partner, first)))
        pair = gemm_operand_pair(t, last, self.seeds(last_gemm, operand, last), first,
                                 self.seeds(gemm, operand, first), dtype, name=f"{last_gemm}+{gemm}.{operand}",
                                 last_factor=factor, first_factor=first_factor)
        if pair is None:
            return None
        (op_last, inv_last), (op_first, inv_first) = pair
        return ((op_last, inv_last if last.has_tensor_scale else None),
                (op_first, inv_first if first.has_tensor_scale else None))

    def shared_amaxes(self, t: torch.Tensor, plain_gemm: str, gemm: str, operand: str
                      ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The tensor amaxes of t for two GEMMs' operands, `plain_gemm` along K = t's last axis (a spec
        without a rotation) and `gemm` along dim 0, in one read where the kernels run and the pair fits
        (kernels.shared_amaxes); else (None, None) and each quantizer finds its own."""
        if not _use_kernels(t) or _OBSERVERS:
            return None, None

        spec = self.recipe.spec(f"{gemm}.{operand}")
        return kernels.shared_amaxes(t, self.recipe.spec(f"{plain_gemm}.{operand}"), spec, 0,
                                     self.seeds(gemm, operand, spec))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda and torch.is_autocast_enabled("cuda"):
            # The activation nn.Linear would multiply under autocast (BF16), as FP4 training stacks
            # quantize it; an FP32 residual-stream input would also cost twice the bytes to read.
            x = x.to(torch.get_autocast_dtype("cuda"))
        shape = x.shape
        y = _QuantizedLinearFn.apply(x.reshape(-1, shape[-1]), self.weight, self.bias, self)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}, layer={self.layer_index}"


def convert(model: nn.Module, recipe: Recipe, seed: int = 0) -> nn.Module:
    """Replace every nn.Linear inside `model.blocks` with a QLinear under `recipe` (in place).

    Embeddings, the LM head, norms and attention products stay in high precision; blocks listed
    in `recipe.high_precision_blocks` stay BF16. With an unquantized recipe (bf16) the model is
    returned unchanged.
    """
    if not recipe.is_quantized:
        return model
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError("convert() expects the transformer blocks in `model.blocks` (an nn.ModuleList)")
    check_blocks(recipe, len(blocks))
    keep = {i % len(blocks) for i in recipe.high_precision_blocks}
    for b, block in enumerate(blocks):  # the layers it will quantize (a kept block's shapes are no concern)
        for name, module in block.named_modules():
            if type(module) is nn.Linear and b not in keep:
                check_shape(recipe, module.in_features, module.out_features, f"blocks.{b}.{name}")
    layer_index = 0
    for b, block in enumerate(blocks):
        for parent in list(block.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    if b not in keep:
                        setattr(parent, name, QLinear.from_linear(child, recipe, layer_index, seed))
                    layer_index += 1
    return model


def set_step(model: nn.Module, step: int, micro: int = 0) -> None:
    """Tell every QLinear the optimizer step and the micro-batch within it (SR and per-step transform
    seeds derive from them)."""
    for m in model.modules():
        if isinstance(m, QLinear):
            m.set_step(step, micro)
