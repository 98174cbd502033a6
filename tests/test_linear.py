"""QLinear under every preset: runs on CPU (fp32, bf16); bf16 is nn.Linear bit for bit; every GEMM
operand lies on its grid once divided by its block scales expanded along that GEMM's K."""

import copy
import dataclasses

import pytest
import torch
import torch.nn as nn

from scaling import formats, quant
from scaling.linear import QLinear, convert, observe_operands, set_step
from scaling.recipes import GEMMS, OPERANDS, get_recipe, list_recipes

T, D_IN, D_OUT = 128, 128, 128


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(D_IN, D_OUT, bias=False), nn.ReLU(),
                                                   nn.Linear(D_OUT, D_IN, bias=False)) for _ in range(2)])
        self.lm_head = nn.Linear(D_IN, 64, bias=False)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.lm_head(x)


def _run(model, x):
    x = x.clone().requires_grad_(True)
    y = model(x)
    (y.float() ** 2).mean().backward()
    return y, x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bf16_recipe_is_nn_linear_bit_for_bit(dtype):
    torch.manual_seed(0)
    ref = Tiny().to(dtype)
    model = convert(copy.deepcopy(ref), get_recipe("bf16"))
    x = torch.randn(4, T // 4, D_IN, dtype=dtype)
    y0, gx0 = _run(ref, x)
    y1, gx1 = _run(model, x)
    assert torch.equal(y0, y1) and torch.equal(gx0, gx1)
    for p0, p1 in zip(ref.parameters(), model.parameters()):
        assert torch.equal(p0.grad, p1.grad)


def _expected_k_axis(name: str) -> int:
    """The axis of each operand that is its GEMM's K (operands as QLinear holds them:
    X (T, in), W (out, in), dY (T, out))."""
    return {"fprop.x": 1, "fprop.w": 1, "dgrad.dy": 1, "dgrad.w": 0, "wgrad.dy": 0, "wgrad.x": 0}[name]


@pytest.mark.parametrize("name", [r for r in list_recipes() if r != "bf16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_operand_on_its_grid_along_its_k(name, dtype):
    torch.manual_seed(1)
    recipe = get_recipe(name)
    model = convert(Tiny().to(dtype), recipe, seed=3)
    set_step(model, 7)
    x = torch.randn(T, D_IN, dtype=dtype)
    with observe_operands() as seen:
        y, gx = _run(model, x)
    assert y.dtype == dtype and torch.isfinite(y).all() and torch.isfinite(gx).all()
    names = {s[0] for s in seen}
    expected = {f"{g}.{o.split('_')[1]}" for g, ops in GEMMS.items() for o in ops if recipe.spec(o) is not None}
    assert names == expected
    for op_name, dim, operand, q in seen:
        spec = q.spec
        k_axis = _expected_k_axis(op_name)
        assert dim % 2 == k_axis, f"{name} {op_name} quantized along axis {dim}, its GEMM's K is axis {k_axis}"
        op = operand.float().movedim(k_axis, -1)  # blocks run along the last axis now
        R, K = op.shape
        if spec.block is None:
            scale = torch.ones_like(op)
        else:
            br, bk = spec.block
            assert q.block_scale.shape == (R // br, K // bk)
            scale = q.block_scale.repeat_interleave(br, 0).repeat_interleave(bk, 1)
        ratio = torch.where(scale > 0, op / scale, op)
        assert torch.equal(op, ratio * scale), "block-scaled values must divide exactly"
        mag = ratio.abs()
        if spec.elem in formats.GRIDS:
            levels = torch.tensor(formats.Grid.of(spec.elem, spec.cap).levels)
            on_grid = (mag.unsqueeze(-1) == levels).any(-1)
        else:
            on_grid = formats.round_fp8_rtne(mag, spec.elem) == mag
        assert on_grid.all(), f"{name} {op_name}: {(~on_grid).sum().item()} values off the {spec.elem} grid"
        if spec.scale == "e4m3" and spec.block is not None:
            assert torch.equal(formats.round_fp8_rtne(q.block_scale, "e4m3"), q.block_scale)
        if spec.scale == "e8m0":
            m, _ = torch.frexp(q.block_scale)
            assert (m == 0.5).all(), "E8M0 scales are powers of two"


def test_convert_policy_keeps_head_and_high_precision_blocks():
    from dataclasses import replace

    recipe = replace(get_recipe("nvfp4"), high_precision_blocks=(-1,))
    model = convert(Tiny(), recipe)
    assert isinstance(model.blocks[0][0], QLinear) and isinstance(model.blocks[0][2], QLinear)
    assert type(model.blocks[1][0]) is nn.Linear and type(model.lm_head) is nn.Linear
    assert [m.layer_index for m in model.modules() if isinstance(m, QLinear)] == [0, 1]


def test_same_seed_same_bits_different_step_different_bits():
    torch.manual_seed(2)
    base = Tiny()
    x = torch.randn(T, D_IN)

    def grads(seed, step):
        m = convert(copy.deepcopy(base), get_recipe("nvfp4"), seed=seed)
        set_step(m, step)
        _run(m, x)
        return m.blocks[0][0].weight.grad

    g = grads(1, 5)
    assert torch.equal(g, grads(1, 5))
    assert not torch.equal(g, grads(1, 6))
    assert not torch.equal(g, grads(2, 5))


def test_each_micro_batch_draws_its_own_rounding_bits_and_layer_step_signs():
    """Under gradient accumulation every backward call gets its own SR stream and, for Quartet II's
    per-layer-and-step signs, its own rotation; per-step signs stay the step's. The first micro-batch
    draws what a run without accumulation draws."""
    from scaling.seeds import mix

    q2 = convert(Tiny(), get_recipe("quartet2"), seed=3).blocks[0][0]
    first, second = q2.step_seeds(9), q2.step_seeds(9, micro=1)
    assert first == q2.step_seeds(9, micro=0)
    dgrad_dy = OPERANDS.index("dgrad_dy")
    assert first[dgrad_dy][1] == mix(3, "signs", q2.layer_index, 9)  # layer_step signs, as documented
    assert first[dgrad_dy] != second[dgrad_dy] and second[dgrad_dy] != q2.step_seeds(9, micro=2)[dgrad_dy]
    sr = convert(Tiny(), get_recipe("nvfp4"), seed=3).blocks[0][0]  # wgrad.dy: SR after RHT16, run signs
    i = OPERANDS.index("wgrad_dy")
    a, b = sr.step_seeds(9)[i], sr.step_seeds(9, micro=1)[i]
    assert a[0] != b[0] and a[1] == b[1] != 0
    per_step = convert(Tiny(), get_recipe("mxfp4_rht"), seed=3).blocks[0][0]  # RHT16, signs redrawn per step
    assert per_step.step_seeds(9) == per_step.step_seeds(9, micro=1) != per_step.step_seeds(10)


def test_unread_seeds_are_zero_so_equal_operands_are_equal_calls():
    """wgrad.x under nvfp4 (RHT16 with run signs, RTNE) reads only the sign seed: every layer passes
    the same seeds, so a compiled graph can quantize a shared input (q, k, v) once."""
    model = convert(Tiny(), get_recipe("nvfp4"), seed=3)
    set_step(model, 4)
    first, second = model.blocks[0][0], model.blocks[1][2]
    spec = first.recipe.spec("wgrad.x")
    a, b = first.seeds("wgrad", "x", spec), second.seeds("wgrad", "x", spec)
    assert a.rounding == 0 and a == b and a.signs != 0
    dy = first.recipe.spec("wgrad.dy")  # SR: the rounding seed is read, and differs per layer
    ra, rb = first.seeds("wgrad", "dy", dy).rounding, second.seeds("wgrad", "dy", dy).rounding
    assert int(ra) != int(rb)


def test_compiled_seeds_that_no_step_or_layer_changes_are_ints(monkeypatch):
    """Compiled (and on a GPU), a seed that changes with the step or layer is a view of the layer's
    table; one that does not (an unread rounding seed, "run" signs) is the same int in every layer.
    Views of two tables are two graph inputs; equal ints make equal calls, which the compiled graph
    merges (q, k and v's shared input, quantized once for fprop and once for wgrad)."""
    model = convert(Tiny(), get_recipe("ufp4"), seed=3)  # RHT16 with run signs on every operand
    set_step(model, 4)
    first, second = model.blocks[0][0], model.blocks[1][2]
    want = {name: (first.seeds(*name.split("."), first.recipe.spec(name)),
                   second.seeds(*name.split("."), second.recipe.spec(name))) for name in ("fprop.x", "dgrad.dy")}
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    a, b = (layer.seeds("fprop", "x", first.recipe.spec("fprop.x")) for layer in (first, second))
    assert a == b == want["fprop.x"][0] and isinstance(a.signs, int) and a.rounding == 0
    sr_a, sr_b = (layer.seeds("dgrad", "dy", first.recipe.spec("dgrad.dy")) for layer in (first, second))
    assert isinstance(sr_a.rounding, torch.Tensor) and isinstance(sr_a.signs, int)
    assert (int(sr_a.rounding), int(sr_b.rounding)) == (want["dgrad.dy"][0].rounding, want["dgrad.dy"][1].rounding)


def test_seeds_from_ints_equal_the_device_table_read_when_compiled(monkeypatch):
    """On a CPU QLinear passes its seeds as ints; compiled (and on a GPU) it passes 0-d views of its
    seed table, which set_step fills, so one compiled block serves every layer and no device op
    computes a seed. The same seeds either way, and the seeds of the definition (seeds.mix)."""
    from scaling.seeds import mix

    layer = convert(Tiny(), get_recipe("quartet2"), seed=9).blocks[1][0]  # layer_step signs, MS-EDEN
    set_step(layer, 12)
    specs = [(gemm, operand, layer.recipe.spec(f"{gemm}.{operand}"))
             for gemm, operand in (("wgrad", "dy"), ("dgrad", "dy"), ("fprop", "x"))]
    from_ints = [layer.seeds(gemm, operand, spec) for gemm, operand, spec in specs]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    from_table = [layer.seeds(gemm, operand, spec) for gemm, operand, spec in specs]
    table = layer.seed_table
    assert layer.layer_index == 2
    for (gemm, operand, spec), got, want in zip(specs, from_ints, from_table):
        if not spec.needs_seed:
            assert got is None and want is None
            continue
        for field in ("rounding", "signs"):
            g, w = getattr(got, field), getattr(want, field)
            assert isinstance(g, int) and isinstance(w, torch.Tensor) and w.untyped_storage().data_ptr() == \
                table.untyped_storage().data_ptr(), "a view of the table, not a computed tensor"
            assert g == int(w)
        if spec.rounding == "sr" or spec.eden:
            assert got.rounding == mix(9, "round", 2, 12, gemm, operand) != 0
        if spec.signs == "layer_step":
            assert got.signs == mix(9, "signs", 2, 12) != 0
    set_step(layer, 13)
    assert int(from_table[0].rounding) == layer.seeds(*specs[0]).rounding != from_ints[0].rounding


@pytest.mark.parametrize("recipe", ["nvfp4", "ufp4", "quartet2", "mxfp4_rht"])
def test_eager_tensor_seeds_carry_their_table_row(monkeypatch, recipe):
    """Eager on a GPU, a seed that changes with the step or layer comes with its row of the seed
    table, which the kernels take as their [rounding, signs] tensor (no stack per call): the row
    must hold exactly the two seeds, for every operand, including the ones kept as ints."""
    from scaling import kernels

    layer = convert(Tiny(), get_recipe(recipe), seed=5).blocks[1][2]
    set_step(layer, 7)
    monkeypatch.setattr(type(layer), "_host_seeds", lambda self: False)  # as on a GPU, eager
    rows = 0
    for name in OPERANDS:
        gemm, operand = name.split("_")
        seeds = layer.seeds(gemm, operand, getattr(layer.recipe, name))
        if seeds is None or seeds.row is None:
            assert seeds is None or not isinstance(seeds.rounding, torch.Tensor)
            continue
        rows += 1
        assert seeds.row.untyped_storage().data_ptr() == layer.seed_table.untyped_storage().data_ptr()
        assert seeds.row.tolist() == [int(seeds.rounding), int(seeds.signs)]
        assert kernels._seed_tensor(seeds, seeds.row.device) is seeds.row
    assert rows > 0


def test_quantized_gradients_track_exact_ones():
    torch.manual_seed(3)
    base = Tiny()
    x = torch.randn(T, D_IN)
    _run(base, x)
    for name in ("nvfp4", "mxfp4", "ufp4", "quartet2"):
        m = convert(copy.deepcopy(base), get_recipe(name), seed=0)
        m.zero_grad()
        _run(m, x)
        for p0, p1 in zip(base.parameters(), m.parameters()):
            cos = torch.nn.functional.cosine_similarity(p0.grad.flatten(), p1.grad.flatten(), dim=0)
            assert cos > 0.9, f"{name}: gradient cosine {cos:.3f}"


def test_incompatible_width_is_refused_before_training():
    from scaling.errors import UserError

    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Sequential(nn.Linear(128, 64, bias=False))])
    with pytest.raises(UserError, match=r"blocks\.0\.0 .*multiple of 128"):
        convert(model, get_recipe("quartet2"))  # MS-EDEN's RHT128 along dgrad's K = 64
    convert(model, get_recipe("nvfp4"))  # 1x16 blocks fit
    # A block the recipe keeps in BF16 is not quantized, so its shapes are no reason to refuse.
    kept = dataclasses.replace(get_recipe("quartet2"), high_precision_blocks=(0,))
    model.blocks = nn.ModuleList([nn.Sequential(nn.Linear(128, 64, bias=False)),
                                  nn.Sequential(nn.Linear(128, 128, bias=False))])
    converted = convert(model, kept)
    assert type(converted.blocks[0][0]) is nn.Linear and isinstance(converted.blocks[1][0], QLinear)


def test_axis_free_weight_operand_is_reused_exactly():
    """NVFP4's 16x16 weight tiles give the same values along either axis, so dgrad reuses fprop's W
    operand; the gradients equal those of quantizing W again (what observe_operands forces)."""
    from scaling import quant

    recipe = get_recipe("nvfp4")
    assert recipe.fprop_w.axis_free and recipe.dgrad_w == recipe.fprop_w
    assert not recipe.fprop_x.axis_free and not recipe.wgrad_x.axis_free  # 1x16 blocks; RHT
    w = torch.randn(64, 96) * torch.logspace(-3, 3, 96)
    along_in, inv_in = quant.gemm_operand(w, recipe.fprop_w, -1, None, torch.float32)
    along_out, inv_out = quant.gemm_operand(w, recipe.fprop_w, 0, None, torch.float32)
    assert torch.equal(along_in, along_out) and torch.equal(inv_in, inv_out)

    torch.manual_seed(2)
    layer = QLinear.from_linear(nn.Linear(96, 64, bias=False), recipe, 0, 0)
    x = torch.randn(32, 96)
    y0, gx0 = _run(layer, x)
    gw0 = layer.weight.grad.clone()
    layer.weight.grad = None
    with observe_operands() as seen:
        y1, gx1 = _run(layer, x)
    assert "dgrad.w" in {name for name, *_ in seen}
    assert torch.equal(y0, y1) and torch.equal(gx0, gx1) and torch.equal(gw0, layer.weight.grad)


def test_nvfp4_4over6_dgrad_reads_the_forward_weight_values():
    """RECIPES.md: nvfp4_4over6's dgrad is "as nvfp4", whose W is "the same 16x16 values" as fprop's, here
    with 4/6: its dgrad W was plain NV 16x16 (bound 448, no 4/6), ~94% of W's values other than fprop's.
    4/6 is not axis_free (its choice made again along the other axis could differ on a tie of float32
    sums) but transposable: dgrad reuses fprop's operand. (dY kept in BF16 here, to check W alone.)"""
    recipe = dataclasses.replace(get_recipe("nvfp4_4over6"), dgrad_dy=None)
    assert recipe.dgrad_w == recipe.fprop_w and recipe.fprop_w.transposable and not recipe.fprop_w.axis_free
    torch.manual_seed(3)
    layer = QLinear.from_linear(nn.Linear(96, 64, bias=False), recipe, 0, 0)
    x = torch.randn(32, 96, requires_grad=True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    wq, inv_w = quant.gemm_operand(layer.weight.detach(), recipe.fprop_w, -1, None, torch.float32)
    assert torch.equal(x.grad, (dy @ wq) * inv_w)
    plain, inv_plain = quant.gemm_operand(layer.weight.detach(), get_recipe("nvfp4").dgrad_w, 0, None, torch.float32)
    assert not torch.equal(x.grad, (dy @ plain) * inv_plain)  # (what the old dgrad W gave: not the same)


def test_an_activation_shared_by_layers_is_quantized_once_until_it_changes(monkeypatch):
    """q, k and v (gate and up) share their input: on a CPU it is quantized once per operand name,
    and again after an in-place change; weights are always quantized."""
    from scaling import linear

    calls = []
    real = linear._plain_operand
    monkeypatch.setattr(linear, "_plain_operand", lambda *args: calls.append(args) or real(*args))
    monkeypatch.setattr(linear, "_LAST", {})
    spec = get_recipe("nvfp4").fprop_x
    x = torch.randn(32, 64)
    a = linear.gemm_operand(x, spec, -1, None, torch.float32, "fprop.x")
    b = linear.gemm_operand(x.view(32, 64), spec, -1, None, torch.float32, "fprop.x")  # another view
    assert len(calls) == 1 and a[0] is b[0]
    x.mul_(2)
    c = linear.gemm_operand(x, spec, -1, None, torch.float32, "fprop.x")
    assert len(calls) == 2 and torch.equal(c[0], a[0]) and torch.equal(c[1], 2 * a[1])
    for _ in range(2):
        linear.gemm_operand(x, spec, -1, None, torch.float32, "fprop.w")
    assert len(calls) == 4


def test_gemm_operands_are_bf16_on_a_gpu_only_where_bf16_holds_them():
    """An FP32 block scale gives operand values BF16 would round: such a recipe's GPU GEMMs take FP32
    operands; every preset's operands are exact in BF16 (E8M0 / E4M3 block scales, or per-tensor)."""
    from dataclasses import replace

    from scaling.linear import _gemm_dtype
    from scaling.recipes import PRESETS

    assert all(r.bf16_operands for r in PRESETS.values())
    nvfp4 = get_recipe("nvfp4")
    fp32_blocks = replace(nvfp4, name="fp32-blocks", fprop_x=replace(nvfp4.fprop_x, scale="fp32"))
    assert not fp32_blocks.fprop_x.bf16_exact and not fp32_blocks.bf16_operands

    class OnGPU:  # (the rule, without a GPU)
        is_cuda = True

    assert _gemm_dtype(OnGPU(), nvfp4) == torch.bfloat16
    assert _gemm_dtype(OnGPU(), fp32_blocks) == torch.float32
    assert _gemm_dtype(torch.empty(0), nvfp4) == torch.float32
    # the reference keeps such an operand's values only in FP32
    x = torch.randn(64, 64)
    op, _ = quant.gemm_operand(x, fp32_blocks.fprop_x, -1, None, torch.float32)
    assert not torch.equal(op.bfloat16().float(), op)


def _with_cpu_bf16_gemm(monkeypatch, on: str, layer, x):
    monkeypatch.setenv("SCALING_CPU_BF16_GEMM", on)
    layer.weight.grad = None
    y, gx = _run(layer, x)
    return y, gx, layer.weight.grad.clone()


def test_cpu_bf16_products_only_for_gemms_of_bf16_exact_operands(monkeypatch):
    """On a CPU that multiplies BF16 natively, a GEMM whose two operands are quantized to BF16-exact
    values runs as BF16 products with FP32 accumulation (close to MKL's FP32 GEMM, another sum order);
    a GEMM with an unquantized FP32 operand keeps IEEE FP32 (its operand is not rounded)."""
    import dataclasses

    from scaling import linear

    if not linear._cpu_multiplies_bf16():
        pytest.skip("no BF16 products for FP32 matmuls here (no AMX or AVX-512 BF16, "
                    "or a torch that ignores oneDNN's BF16 mode)")
    torch.manual_seed(3)
    # blocks of very different scales along K, so that FP32 sums of products round (FP4 values of
    # one scale sum exactly in any order)
    x = torch.randn(256, 128) * torch.logspace(-3, 3, 128)
    nv = get_recipe("nvfp4")
    layer = QLinear.from_linear(nn.Linear(128, 64, bias=False), nv, 0, 0)
    ieee, fast = (_with_cpu_bf16_gemm(monkeypatch, on, layer, x) for on in ("0", "1"))
    assert not all(torch.equal(a, b) for a, b in zip(ieee, fast)), "the BF16 products were not used"
    for a, b in zip(ieee, fast):  # the same sums in another order (elementwise, cancellation can be large)
        assert ((b - a).norm() / a.norm()).item() < 1e-6
    assert all(torch.equal(a, b) for a, b in zip(fast, _with_cpu_bf16_gemm(monkeypatch, "1", layer, x)))

    # fprop's X unquantized (FP32): the forward GEMM stays IEEE, bit for bit
    partial = dataclasses.replace(nv, name="nvfp4-fp32-x", fprop_x=None)
    layer = QLinear.from_linear(nn.Linear(128, 64, bias=False), partial, 0, 0)
    (y0, *_), (y1, *_) = (_with_cpu_bf16_gemm(monkeypatch, on, layer, x) for on in ("0", "1"))
    assert torch.equal(y0, y1)
