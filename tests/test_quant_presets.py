"""Every preset's six GEMM operands, as one QLinear's forward and backward quantize them, against a
re-derivation from RECIPES.md's words alone (its preset table, element grids and scale rules), written
here in plain torch without scaling.quant, scaling.formats or scaling.transforms: grids listed or
enumerated from their bit layouts, RTNE by nearest-level search (ties to the even code), E8M0 by
floor(log2), the Hadamard matrix by Sylvester's construction.

What this pins that tests/test_quant.py (the quantizer against tests/reference_spec.py for MXFP4, NVFP4
and 4/6) and tests/test_recipes.py (the presets' fields) do not: that each preset's QuantSpec, through
linear.py, quantizes each operand along its own GEMM's K as the table says (fp8's per-tensor scaling,
mxfp8, UFP4's uniform grid, cap 4, the RHT'd and Hadamard'd operands included), that the GEMM applies the
tensor scales to its output, and the readings docs/numerics.md ("Where RECIPES.md leaves a reading open")
names: the RHT's sign order, cap 4 at both scale levels, nvfp4_4over6's dgrad W, 4/6's tie rule.

The inputs are small integers times powers of two, so a Hadamard group's sums are exact in float32 and
the rotated values are the exact sum times fp32(1/sqrt(n)), one rounding (what any float32 rotation
gives on them); elementwise products are computed in float32 in RECIPES.md's order, except x * (s_enc /
s_b) for the elements (the order docs/numerics.md documents).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from scaling.linear import QLinear, observe_operands
from scaling.recipes import get_recipe, list_recipes

TOKENS, D_IN, D_OUT = 128, 128, 128  # quartet2's RHT128 runs along each GEMM's K: all three are 128
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E1M2 = tuple(i / 4 for i in range(8))


def _float_values(ebits: int, mbits: int, bias: int, top_code: int) -> tuple[float, ...]:
    """The non-negative values of codes 0..top_code of a small float format (in code order, so the
    index of a value is its code and an even index an even mantissa)."""
    out = []
    for code in range(top_code + 1):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        out.append(m / (1 << mbits) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    return tuple(out)


E4M3 = _float_values(4, 3, 7, 126)   # OCP E4M3FN: code 127 is NaN; 126 is 448
E5M2 = _float_values(5, 2, 15, 123)  # OCP E5M2: exponent 31 is inf/NaN; 123 is 57344
assert (E4M3[-1], E5M2[-1]) == (448.0, 57344.0)
GRID = {"e2m1": E2M1, "e1m2": E1M2, "e4m3": E4M3, "e5m2": E5M2}
EMAX = {"e2m1": 2, "e4m3": 8}  # OCP MX: the exponent of the element format's largest power of two


def _neighbours(v: torch.Tensor, levels: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(lower level, upper level, index of the lower) around |v| clamped to the grid (float64)."""
    grid = torch.tensor(levels, dtype=torch.float64)
    mag = v.double().abs().clamp(max=levels[-1]).contiguous()
    i = (torch.searchsorted(grid, mag, right=True) - 1).clamp(max=len(levels) - 2)
    return grid[i], grid[i + 1], i


def rtne(v: torch.Tensor, levels: tuple[float, ...]) -> torch.Tensor:
    """Signed round to the nearest level, ties to the even index (code), saturating at the max."""
    lo, hi, i = _neighbours(v, levels)
    mag = v.double().abs().clamp(max=levels[-1]).contiguous()
    up = (hi - mag < mag - lo) | ((hi - mag == mag - lo) & (i % 2 == 1))
    return (torch.where(up, hi, lo) * v.double().sign()).float()


def sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    return h


def rht(x: torch.Tensor, n: int, signs: torch.Tensor | None) -> torch.Tensor:
    """RECIPES.md's H_n . diag(s), normalised by 1/sqrt(n), on each group of n along the last axis:
    a group g (a column vector) becomes H_n diag(s) g, i.e. the signs flip the inputs before the
    Hadamard mix. (Flipping the outputs instead, diag(s) H_n g, would only flip the signs of the
    deterministic Hadamard's values, which no sign-symmetric rounding can tell apart: no randomness.)"""
    s = torch.ones(n, dtype=torch.float64) if signs is None else signs.double()
    groups = x.double().reshape(-1, n) * s
    exact = groups @ sylvester(n).T  # H is symmetric; .T as written in H g
    assert torch.equal(exact.float().double(), exact), "inputs too wide for exact float32 group sums"
    return (exact.float() * torch.tensor(1 / math.sqrt(n), dtype=torch.float32)).reshape(x.shape)


def e8m0_floor(amax: torch.Tensor, elem: str) -> torch.Tensor:
    """OCP MX: 2^(floor(log2 amax) - emax_elem), clamped to E8M0's 2^-127..2^127; 1 for an all-zero block."""
    e = (torch.floor(torch.log2(amax.double())) - EMAX[elem]).clamp(-127, 127)
    return torch.where(amax > 0, torch.exp2(torch.where(amax > 0, e, 0.0)), 1.0).float()


def tiles(t: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """(R, K) -> (R/rows, K/k, rows*k): one block per row of the result."""
    R, K = t.shape
    return t.reshape(R // rows, rows, K // k, k).permute(0, 2, 1, 3).reshape(R // rows, K // k, rows * k)


def untile(t: torch.Tensor, rows: int, k: int, shape) -> torch.Tensor:
    R, K = shape
    return t.reshape(R // rows, K // k, rows, k).permute(0, 2, 1, 3).reshape(R, K)


# --- RECIPES.md's preset table, operand by operand, in this file's own words ---------------------

OPS = ("fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")
K_AXIS = {"fprop.x": 1, "fprop.w": 1, "dgrad.dy": 1, "dgrad.w": 0, "wgrad.dy": 0, "wgrad.x": 0}  # of X, W, dY


def nv(elem="e2m1", rows=1, sr=False, rht=0, cap=None, four_six=False):
    """Two-level (NV, or UFP4's uniform grid) 1x16 or 16x16, E4M3 block scale + FP32 tensor scale."""
    return dict(scheme="nv", elem=elem, rows=rows, k=16, sr=sr, rht=rht, cap=cap, four_six=four_six)


def mx(elem="e2m1", sr=False, rht=0):
    return dict(scheme="mx", elem=elem, rows=1, k=32, sr=sr, rht=rht)


def per_tensor(elem):
    return dict(scheme="tensor", elem=elem, sr=False, rht=0)


def eden():
    return dict(scheme="eden", elem="e2m1", rows=1, k=16, sr=False, rht=128)


def _nvfp4(**extra) -> dict:
    return {"fprop.x": nv(**extra), "fprop.w": nv(rows=16, **extra), "dgrad.dy": nv(sr=True, **extra),
            "dgrad.w": nv(rows=16, **extra), "wgrad.dy": nv(sr=True, rht=16, **extra), "wgrad.x": nv(rht=16, **extra)}


def _ufp4(fprop: int, dgrad: int, wgrad: int) -> dict:
    u = dict(elem="e1m2")
    return {"fprop.x": nv(rht=fprop, **u), "fprop.w": nv(rht=fprop, **u), "dgrad.dy": nv(sr=True, rht=dgrad, **u),
            "dgrad.w": nv(rht=dgrad, **u), "wgrad.dy": nv(sr=True, rht=wgrad, **u), "wgrad.x": nv(rht=wgrad, **u)}


MX4, MX8 = mx(), mx("e4m3")
TABLE = {
    "bf16": dict.fromkeys(OPS),
    "fp8": {"fprop.x": per_tensor("e4m3"), "fprop.w": per_tensor("e4m3"), "dgrad.dy": per_tensor("e5m2"),
            "dgrad.w": per_tensor("e4m3"), "wgrad.dy": per_tensor("e5m2"), "wgrad.x": per_tensor("e4m3")},
    "mxfp8": dict.fromkeys(OPS, MX8),
    "nvfp4": _nvfp4(),
    # "nvfp4 + 4/6 on X and W"; dgrad "as nvfp4", whose W is "the same 16x16 values" (fprop's, 4/6 included)
    "nvfp4_4over6": {**_nvfp4(), "fprop.x": nv(four_six=True), "fprop.w": nv(rows=16, four_six=True),
                     "dgrad.w": nv(rows=16, four_six=True)},
    "nvfp4_rht_all": {o: nv(sr=o.endswith(".dy"), rht=16) for o in OPS},
    "nvfp4_cap4": _nvfp4(cap=4.0),
    "mxfp4": dict.fromkeys(OPS, MX4),
    "mxfp4_fprop": {o: MX4 if o.startswith("fprop") else MX8 for o in OPS},
    "mxfp4_fprop_dgrad": {o: MX8 if o.startswith("wgrad") else MX4 for o in OPS},
    "mxfp4_sr": {o: mx(sr=o.endswith(".dy")) for o in OPS},
    "mxfp4_rht": dict.fromkeys(OPS, mx(rht=16)),
    "mxfp4_h16": dict.fromkeys(OPS, mx(rht=16)),
    "mxfp4_h32": dict.fromkeys(OPS, mx(rht=32)),
    "ufp4": _ufp4(16, 16, 16),
    "ufp4_rht_wgrad": _ufp4(0, 0, 16),
    "ufp4_no_rht": _ufp4(0, 0, 0),
    "quartet2": {"fprop.x": nv(four_six=True), "fprop.w": nv(four_six=True), **dict.fromkeys(OPS[2:], eden())},
}
DETERMINISTIC_H = {"mxfp4_h16", "mxfp4_h32"}  # H16/H32: s = all ones


def expected(x: torch.Tensor, op: dict, signs: torch.Tensor | None) -> dict:
    """RECIPES.md's quantization of x (rows, K) along its last axis: the rotated input, tensor scale,
    block scales (tiles(x) shaped), and the RTNE values (for SR: the two candidates around v)."""
    xr = rht(x, op["rht"], signs) if op["rht"] else x
    elem, levels = op["elem"], GRID[op["elem"]]
    amax = xr.abs().max()
    if op["scheme"] == "tensor":  # FP8 current scaling: s = fmax / amax(tensor), x * s rounded onto FP8
        s_enc = torch.tensor(levels[-1], dtype=torch.float32) / amax
        return dict(rotated=xr, s_enc=s_enc, s_b=None, v=xr * s_enc)
    xb = tiles(xr, op["rows"], op["k"])
    amax_b = xb.abs().amax(-1)
    if op["scheme"] == "mx":
        s_enc, s_b = torch.tensor(1.0), e8m0_floor(amax_b, elem)
    else:
        top = op.get("cap") or levels[-1]  # "capped at 4 (amax maps to 4)"
        if op.get("cap"):
            levels = tuple(lv for lv in levels if lv <= top)
        bound = 256.0 if op.get("four_six") or op["scheme"] == "eden" else 448.0
        target = top / ((17 / 16) * 0.93) if op["scheme"] == "eden" else top
        s_enc = torch.tensor(top * bound, dtype=torch.float32) / amax
        candidates = []
        for t in (target, 4.0) if op.get("four_six") else (target,):
            s_b = rtne((amax_b / torch.tensor(t, dtype=torch.float32)) * s_enc, E4M3)
            v = xb * torch.where(s_b > 0, s_enc / s_b, 0.0).unsqueeze(-1)
            q = rtne(v, levels)
            err = ((q.double() * s_b.double().unsqueeze(-1) - xb.double() * s_enc.double()) ** 2).sum(-1)
            candidates.append((s_b, v, err))
        if len(candidates) == 2:  # 4/6: the lower squared error per block, a tie keeping amax -> 6
            (s6, v6, e6), (s4, v4, e4) = candidates
            use4 = e4 < e6
            candidates = [(torch.where(use4, s4, s6), torch.where(use4.unsqueeze(-1), v4, v6), None)]
        s_b, v, _ = candidates[0]
        return dict(rotated=xr, s_enc=s_enc, s_b=s_b, v=untile(v, op["rows"], op["k"], x.shape), levels=levels)
    v = xb * (s_enc / s_b).unsqueeze(-1)
    return dict(rotated=xr, s_enc=s_enc, s_b=s_b, v=untile(v, op["rows"], op["k"], x.shape), levels=levels)


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """X (tokens x in), W (out x in), dY (tokens x out): integers in [-127, 127] times 2^e, e per
    16-column block in -4..1, plus an outlier channel and an all-zero block; each tensor's amax is
    3 x 2^7, so NV tensor scales are powers of two (bound 256) and the forward-quantised operands
    that quartet2's backward rotates stay exact in float32 group sums."""
    g = torch.Generator().manual_seed(seed)

    def make(rows, cols):
        t = torch.randint(-127, 128, (rows, cols), generator=g).float()
        t *= torch.exp2(torch.randint(-4, 2, (1, cols // 16), generator=g).float()).repeat_interleave(16, 1)
        t[:, 5] *= 2  # an outlier channel (along K for one GEMM, across blocks for the other)
        t[16:32, 32:48] = 0  # an all-zero block on every axis
        t[3, 7] = 384.0
        return t

    return make(TOKENS, D_IN), make(D_OUT, D_IN), make(TOKENS, D_OUT)


def _run(name: str, seed: int):
    """One QLinear under the preset: forward and backward, every quantized operand observed."""
    x, w, dy = _inputs(seed)
    layer = QLinear.from_linear(nn.Linear(D_IN, D_OUT, bias=False), get_recipe(name), layer_index=2, run_seed=seed)
    with torch.no_grad():
        layer.weight.copy_(w)
    layer.set_step(5)
    xin = x.clone().requires_grad_(True)
    with observe_operands() as seen:
        y = layer(xin)
        y.backward(dy)
    return x, w, dy, y.detach(), xin.grad, layer.weight.grad, {n: (dim, q) for n, dim, _, q in seen}


def _source(name: str, operand: str, x, w, dy, seen) -> torch.Tensor:
    """The tensor an operand quantizes, with its GEMM's K last. quartet2's backward W and X are the
    forward-quantised ones (RECIPES.md), scaled back as the forward GEMM saw them."""
    raw = {"x": x, "w": w, "dy": dy}[operand.split(".")[1]]
    if name == "quartet2" and operand in ("dgrad.w", "wgrad.x"):
        _, q = seen["fprop." + operand.split(".")[1]]
        raw = (q.values * q.block_scale.repeat_interleave(16, 1)) * (1.0 / q.tensor_scale)
    return raw if K_AXIS[operand] == 1 else raw.t()


@pytest.mark.parametrize("name", list_recipes())
def test_each_preset_quantizes_each_operand_as_recipes_md_says(name):
    assert set(TABLE) == set(list_recipes())
    x, w, dy, y, dx, dw, seen = _run(name, seed=1)
    table = TABLE[name]
    assert get_recipe(name).high_precision_blocks == ()  # the table keeps no block in BF16 by default
    assert set(seen) == {o for o in OPS if table[o] is not None}
    for operand, op in table.items():
        if op is None:
            continue
        dim, q = seen[operand]
        assert dim % 2 == K_AXIS[operand], f"{operand}: blocks must run along its GEMM's K"
        src = _source(name, operand, x, w, dy, seen)
        n = op["rht"]
        if n:
            assert (q.signs is None) == (name in DETERMINISTIC_H), operand
            if q.signs is not None:
                assert q.signs.numel() == n and set(q.signs.tolist()) <= {-1.0, 1.0}
        else:
            assert q.signs is None and not q.spec.transform, operand
        want = expected(src, op, q.signs)
        where = f"{name} {operand}"
        assert q.tensor_scale == want["s_enc"], where
        if want["s_b"] is not None and op["scheme"] != "eden":
            assert torch.equal(q.block_scale, want["s_b"]), where
        levels = want.get("levels", GRID[op["elem"]])
        if op["scheme"] == "eden":
            # RTNE elements under the uncorrected scales; the EDEN-corrected scales, stochastically rounded,
            # are checked against their definition in tests/test_quant.py
            assert torch.equal(q.values, rtne(want["v"], levels)), where
        elif not op["sr"]:
            assert torch.equal(q.values, rtne(want["v"], levels)), where
        else:  # SR: the level just below or just above v (v itself where it is a level), with v's sign
            lo, hi, _ = _neighbours(want["v"], levels)
            mag, got = want["v"].double().abs().clamp(max=levels[-1]), q.values.double().abs()
            assert ((got == lo) | (got == hi)).all() and (got[mag == lo] == lo[mag == lo]).all(), where
            assert (q.values * want["v"] >= 0).all(), where
            assert (got != torch.where(hi - mag < mag - lo, hi, lo)).any(), f"{where}: SR never left nearest"

    # The GEMMs: block-scaled operands multiplied in the rotated basis, then times both 1 / tensor scales
    def dequant(operand):
        _, q = seen[operand]
        return q.scaled().double() * (1.0 / q.tensor_scale).double()  # (rows, K), rotated

    if table["fprop.x"] is not None:
        torch.testing.assert_close(y.double(), dequant("fprop.x") @ dequant("fprop.w").T, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(dx.double(), dequant("dgrad.dy") @ dequant("dgrad.w").T, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(dw.double(), dequant("wgrad.dy") @ dequant("wgrad.x").T, rtol=1e-5, atol=1e-6)
