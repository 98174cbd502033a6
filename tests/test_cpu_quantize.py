"""The fused CPU quantizer (scaling/cpu_quantize.c) against the reference, bit for bit: every preset
operand it serves, along either axis, edge values, layouts; and QLinear training on it."""

import copy
import subprocess

import pytest
import torch
from torch import nn

from scaling import cbuild, cpu_quantize, linear, quant
from scaling.quant import QuantSpec
from scaling.recipes import OPERANDS, PRESETS
from scaling.seeds import Seeds

SPECS = {spec: f"{r.name}.{o}" for r in PRESETS.values() for o in OPERANDS if (spec := getattr(r, o)) is not None}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's float32 bits, every NaN as one value (the reference's NaN payloads are torch's)."""
    return torch.where(t.isnan(), float("nan"), t).view(torch.int32)


def _check(x, spec, dim, seeds):
    assert cpu_quantize.serves(x, spec, dim), (spec.describe(), tuple(x.shape), x.stride(), dim)
    ref, ref_inv = quant.gemm_operand(x, spec, dim, seeds, torch.float32)
    got, got_inv = cpu_quantize.gemm_operand(x, spec, dim, seeds, torch.float32)
    assert got.stride() == ref.stride()  # the same layout: the GEMM that follows sees the same operand
    bad = _bits(got) != _bits(ref)
    assert not bad.any(), f"{spec.describe()} dim {dim}: {int(bad.sum())} elements differ"
    assert torch.equal(_bits(got_inv), _bits(ref_inv))


def test_the_library_builds_here():
    # CI installs gcc: without it every CPU run would fall back to the slow reference.
    assert cpu_quantize.library() is not None


def _served(spec):
    return not ((spec.four_over_six or spec.eden) and spec.block_rows > 1)  # (4/6 over 16x16 tiles: the reference)


@pytest.mark.parametrize("spec", [s for s in SPECS if _served(s)], ids=lambda s: SPECS[s])
@pytest.mark.parametrize("shape,dim", [((256, 128), -1), ((256, 128), 0), ((128, 512), 0), ((2, 64, 128), -1)])
def test_every_served_preset_operand_has_the_references_bits(spec, shape, dim):
    torch.manual_seed(0)
    # magnitudes over 12 decades, exact zeros and a -0.0: every binade, scale and sign path
    x = torch.randn(shape) * torch.logspace(-6, 6, shape[-1])
    x.view(-1)[::97] = 0.0
    x.view(-1)[5] = -0.0
    _check(x, spec, dim, Seeds(12345, 678) if spec.needs_seed else None)


def test_short_rows_along_k_are_quantized_as_long_ones():
    """Along a contiguous K, consecutive rows are handed to the C code as one (up to 1024 elements);
    the bit-for-bit tests here run through it ((256, 128) as (32, 1024); (48, 33) as (3, 528), whose
    SR pairs straddle the original rows)."""
    assert cpu_quantize._long_rows(256, 128) == (32, 1024)
    assert cpu_quantize._long_rows(48, 33) == (3, 528)
    assert cpu_quantize._long_rows(15, 48) == (15, 48)  # (an odd row count: one row at a time)
    assert cpu_quantize._long_rows(4, 2048) == (4, 2048)


@pytest.mark.parametrize("case", ["nan", "inf", "subnormal", "huge", "zeros", "tensor_seeds"])
@pytest.mark.parametrize("spec", [s for s in SPECS if _served(s)], ids=lambda s: SPECS[s])
def test_edge_values_have_the_references_bits(spec, case):
    torch.manual_seed(1)
    x = torch.randn(128, 128)  # (MS-EDEN's groups of 128 along either axis)
    if case == "nan":
        x[3, 17] = float("nan")
    elif case == "inf":
        x[5, 40], x[9, 3] = float("inf"), -float("inf")
    elif case == "subnormal":
        x = x * 1e-40
    elif case == "huge":
        x = x * 1e38
    elif case == "zeros":
        x.zero_()
    seeds = None
    if spec.needs_seed:
        seeds = Seeds(torch.tensor(99), torch.tensor(7)) if case == "tensor_seeds" else Seeds(99, 7)
    for dim in (-1, 0):
        _check(x, spec, dim, seeds)


@pytest.mark.parametrize("shape,dim", [((33, 48), 0), ((48, 33), -1), ((31, 48), 1), ((3, 5, 48), -1)])
def test_per_tensor_sr_with_odd_extents(shape, dim):
    # pairs of SR uniforms straddle rows when K is odd; lanes past R in a partial tile
    spec = QuantSpec(elem="e2m1", block=None, rounding="sr", scale="fp32")
    _check(torch.randn(shape), spec, dim, Seeds(5, 6))


@pytest.mark.parametrize("dim", [0, 1])
def test_a_transposed_matrix_along_either_axis(dim):
    x = torch.randn(128, 256).t()
    for spec in (PRESETS["nvfp4"].wgrad_dy, PRESETS["nvfp4"].fprop_w, PRESETS["ufp4"].fprop_x):
        _check(x, spec, dim, Seeds(5, 6))


ODD = QuantSpec(elem="e2m1", block=(1, 24), scale="e4m3", tensor_scale=True)  # a recipe file's block


@pytest.mark.parametrize("spec", [ODD, ODD.but(rounding="sr"), ODD.but(transform=16, signs="run"),
                                  ODD.but(block=(1, 12), transform=32, rounding="sr", signs="run"),
                                  QuantSpec(elem="e2m1", block=(1, 24), scale="e8m0", tensor_scale=False)],
                         ids=lambda s: s.describe())
@pytest.mark.parametrize("dim", [-1, 0])
def test_blocks_the_kernels_do_not_take_have_the_references_bits(spec, dim):
    """1x24 blocks (valid: only the GPU kernels do not take them) under RHT16 along dim 0 differed from
    the reference: a stretch of 24 rows (the larger of block and group) cut a Hadamard group in two."""
    torch.manual_seed(0)
    x = torch.randn(192, 96) * torch.logspace(-3, 3, 96)
    _check(x, spec, dim, Seeds(12345, 678) if spec.needs_seed else None)


def test_4_over_6_of_blocks_not_a_power_of_two_runs_the_reference():
    """The C code's 4/6 sums a block by halving it: a 1x24 block's came out wrong."""
    assert not cpu_quantize.serves(torch.randn(64, 96), ODD.but(four_over_six=True, scale_bound=256.0), -1)


def test_what_it_does_not_serve_runs_the_reference():
    x = torch.randn(64, 128)
    assert not cpu_quantize.serves(x, PRESETS["nvfp4_4over6"].fprop_w, -1)  # 4/6 over 16x16 tiles
    assert not cpu_quantize.serves(x.double(), PRESETS["nvfp4"].fprop_x, -1)
    assert not cpu_quantize.serves(torch.randn(4, 64, 128), PRESETS["nvfp4"].wgrad_x, 1)  # a middle axis
    assert not cpu_quantize.serves(torch.randn(64, 120), PRESETS["nvfp4"].fprop_x, -1)  # the reference's error


def test_no_compiler_means_one_note_and_the_reference(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("SCALING_CACHE", str(tmp_path))
    cpu_quantize.library.cache_clear()
    try:
        assert cpu_quantize.library() is None
        assert not cpu_quantize.serves(torch.randn(64, 128), PRESETS["nvfp4"].fprop_x, -1)
        assert "reference quantizer" in capsys.readouterr().err
    finally:
        cpu_quantize.library.cache_clear()


def test_the_build_without_optional_flags_has_the_same_bits(monkeypatch, tmp_path):
    # a compiler without OpenMP (or AVX-512 vectors) builds the pthread version of the same source
    monkeypatch.setattr(cbuild, "OPTIONAL_FLAGS", ((),))
    monkeypatch.setenv("SCALING_CACHE", str(tmp_path))
    cpu_quantize.library.cache_clear()
    try:
        lib = cpu_quantize.library()
        assert lib is not None and str(tmp_path) in lib._name
        x = torch.randn(256, 128)
        for spec in (PRESETS["nvfp4"].wgrad_dy, PRESETS["nvfp4"].dgrad_dy, PRESETS["ufp4"].fprop_x):
            for dim in (-1, 0):
                _check(x, spec, dim, Seeds(3, 4))
    finally:
        cpu_quantize.library.cache_clear()


def test_a_compile_error_is_reported(monkeypatch, tmp_path, capsys):
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    monkeypatch.setattr(cpu_quantize, "SOURCE", bad)
    monkeypatch.setenv("SCALING_CACHE", str(tmp_path))
    with pytest.raises(subprocess.CalledProcessError):
        cbuild._build("cc", bad)
    # through library(): the compiler's own error line in the note, the reference runs, nothing cached
    cpu_quantize.library.cache_clear()
    try:
        assert cpu_quantize.library() is None
        note = capsys.readouterr().err
        assert "bad.c" in note and "error" in note and "reference quantizer" in note
        assert not list(tmp_path.glob("*.so"))
    finally:
        cpu_quantize.library.cache_clear()


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(128, 256, bias=False), nn.ReLU(),
                                                   nn.Linear(256, 128, bias=False)) for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


def test_4_over_6_and_ms_eden_of_a_transposed_matrix_along_either_axis():
    # (run_refined along a contiguous K, stretch_refined along a strided one; the layout as the reference's)
    x = torch.randn(256, 512)[:, :384]  # rows of a wider tensor: neither canonical layout
    assert not cpu_quantize.serves(x, PRESETS["quartet2"].wgrad_x, 0)
    x = torch.randn(128, 256).t()
    for spec in (PRESETS["quartet2"].fprop_x, PRESETS["quartet2"].wgrad_dy, PRESETS["nvfp4_4over6"].fprop_x):
        for dim in (0, 1):
            _check(x, spec, dim, Seeds(5, 6))


def test_bad_calls_are_refused_as_the_reference_refuses():
    """A call the fused quantizer would serve but the reference refuses (a float seed: it used to be
    truncated here) is refused here too; one it cannot serve (a dim out of range) goes to the reference."""
    from test_quant import BAD_CALLS

    spec = QuantSpec(rounding="sr")
    served = 0
    for make, dim, seed, error, message in BAD_CALLS:
        x = make()
        if cpu_quantize.serves(x, spec, dim):
            served += 1
            with pytest.raises(error, match=message):
                cpu_quantize.gemm_operand(x, spec, dim, seed, torch.float32)
    assert served == 4 or cpu_quantize.library() is None


@pytest.mark.parametrize("recipe", ["nvfp4", "ufp4", "mxfp4_h16", "fp8", "quartet2"])
def test_training_steps_on_it_equal_the_reference(recipe, monkeypatch):
    torch.manual_seed(0)
    base = Tiny()
    x = torch.randn(256, 128)
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(cpu_quantize, "serves", lambda *a: False)
        monkeypatch.setattr(linear, "_LAST", {})
        model = linear.convert(copy.deepcopy(base), PRESETS[recipe], seed=3)
        for step in range(2):
            linear.set_step(model, step)
            model.zero_grad()
            (model(x) ** 2).mean().backward()
        results.append([p.grad for p in model.parameters()])
    for fused_grad, ref_grad in zip(*results):
        assert torch.equal(fused_grad, ref_grad)


@pytest.mark.parametrize("name", ["nvfp4.fprop_x", "fp8.fprop_x", "ufp4.fprop_x", "quartet2.dgrad_dy"])
def test_a_tensor_too_small_for_a_finite_scale_has_the_references_zeros(name):
    """amax < ~1e-35: the tensor scale is 1 (not inf) here as in the reference."""
    recipe, operand = name.split(".")
    spec = PRESETS[recipe].spec(operand)
    x = torch.zeros(32, 128)
    x[0, 0], x[1, 5] = 1e-40, -3e-38
    _check(x, spec, -1, Seeds(3, 4))
