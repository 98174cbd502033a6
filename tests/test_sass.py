"""The quantizer kernels compiled for sm_90 without a GPU (scaling.kernels.sass): the layouts the
dim-0 tiles rely on, checked on the machine code of the installed Triton."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

# In a fresh interpreter: test_kernels.py sets TRITON_INTERPRET=1, under which @triton.jit gives
# interpreted functions, which cannot be compiled for a GPU target.
SCRIPT = """
import json
from scaling.kernels import sass
from scaling.recipes import get_recipe
spec = get_recipe("nvfp4").wgrad_dy  # RHT16 + NV 1x16 + SR along dim 0 (wgrad's dY)
rows = {name: sass.count(spec, 0, 16384, *tile) for name, tile in
        {"narrow": (1024, 16, 1, 2), "rows8": (4096, 16, 1, 0), "split16": (2048, 16, 1, 0)}.items()}
dy = get_recipe("nvfp4").dgrad_dy  # NV 1x16 + SR along a contiguous K (dgrad's dY)
rows |= {f"halves{h}": sass.count(dy, -1, 4096, 4096, 128, 4, 0, h) for h in (0, 1, 2)}
nv, uf = get_recipe("nvfp4"), get_recipe("ufp4")
rows |= {f"pair{n}": sass.count_pair(nv.dgrad_dy, nv.wgrad_dy, 16384, 4096, 2048, 16, 2, 2, 0, n) for n in (1, 4)}
rows["pair_halves"] = sass.count_pair(nv.dgrad_dy, nv.wgrad_dy, 16384, 4096, 2048, 16, 2, 2, 2)
rows["pair_rht16"] = sass.count_pair(uf.dgrad_dy, uf.wgrad_dy, 16384, 4096, 2048, 16, 2, 2, 1)
rows |= {f"eden{h}": sass.count(get_recipe("quartet2").dgrad_dy, -1, 4096, 4096, 128, 4, 0, h)
         for h in (0, 2)}  # RHT128 + MS-EDEN, loaded whole and in halves
rows["rht128_amax"] = sass.count_amax(get_recipe("quartet2").dgrad_dy, -1, 4096, 8192, 128, 8, 0)
rows |= {f"group_amax{n}": sass.count_group_amax(get_recipe("quartet2").dgrad_dy, 1, n) for n in (1, 4)}
rows |= {f"transposing_amax{n}": sass.count_transposing_amax(get_recipe("quartet2").dgrad_dy, 2, n) for n in (1, 4)}
rows["transposing_rows_amax"] = sass.count_transposing_amax(get_recipe("quartet2").dgrad_dy, 4, 1, rows=True)
ops = [op for _, op, _ in sass._instructions(sass.machine_code(
    sass.compile_transposing_amax(get_recipe("quartet2").dgrad_dy, 2, 1))[0])]
rows["transposing_loads_before_store"] = ops[:ops.index("STG")].count("LDG")
rows["amax_stages"] = {name: sorted({r["stage"] for r in sass.amax_counts(spec, dim, 4096)}) for name, spec, dim in
                       (("eden_dim0", get_recipe("quartet2").wgrad_dy, 0), ("mx", get_recipe("mxfp4").fprop_x, -1))}
rows |= {f"amax{n}": sass.count_amax(nv.wgrad_x, 0, 4096, 4096, 16, 2, 4, 0, n) for n in (1, 4)}  # RHT16, dim 0
rows["plain_amax"] = sass.count_amax(nv.fprop_x, -1, 4096, 16384, 128, 8, 0)  # no rotation
rows["lane_amax"] = sass.count_amax(uf.fprop_x, -1, 4096, 8192, 128, 4, 0, 2)  # RHT16 whole, last stage across lanes
rows["pair_amax"] = sass.count_pair_amax(uf.fprop_x, uf.wgrad_x, 16384, 4096, 8192, 16, 4, 4, 1, 1)  # RHT16 both ways
listing = sass.machine_code(sass.compile_pair(uf.fprop_x, uf.wgrad_x, 16384, 4096, 8192, 16, 4, 4, 1, amax=True))[0]
rows["pair_amax_prmt"] = sass.opcodes(listing)["PRMT"]
rows["strided"] = sass.count(nv.wgrad_x, 0, 4096, 4096, 16, 2, 4, 0, 4)  # RHT16 + RTNE along dim 0, NARROW 4
listing = sass.machine_code(sass.compile_quantize(uf.fprop_x, -1, 4096, 4096, 128, 4, 0))[0]
rows["scaled_rtne_bf16_ops"] = sass.opcodes(listing)["PRMT"] + sass.opcodes(listing)["HFMA2"]
print(json.dumps(rows))
"""


def test_tiles_keep_the_elements_of_a_block_in_one_thread():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    if r.returncode and "ptxas" in r.stderr.lower() and "CompilationError" not in r.stderr:  # (no tools, not our code)
        pytest.skip(f"this Triton cannot compile for sm_90 here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    narrow, rows8, split16 = (rows.pop(k) for k in ("narrow", "rows8", "split16"))
    # NARROW = 2 and 16-byte rows: all 16 tokens of a block in one thread (no shuffles, no barriers)
    assert narrow["shuffles"] == 0 and narrow["barriers"] == 0 and rows8["shuffles"] == 0
    # ... with a quarter of the values per thread, so no spills and far fewer registers
    assert narrow["stack_bytes"] == 0 and narrow["registers"] <= 160 < rows8["registers"]
    # 128 rows on one warp splits the 16 tokens over two threads: shuffles
    assert split16["shuffles"] > 0
    for row in (narrow, rows8, split16):
        assert 10 < row["instructions_per_element"] < 200
    # Along a contiguous K, 16-byte loads split a block of 16 over two threads (a shuffle for its
    # amax, its scale made twice); loaded as halves, a thread holds whole blocks: fewer instructions,
    # and stored as halves, no layout conversion (no barrier) before the store.
    whole, halves_in, halves_both = rows["halves0"], rows["halves1"], rows["halves2"]
    assert whole["shuffles"] > 0 and halves_in["shuffles"] == halves_both["shuffles"] == 0
    assert halves_both["barriers"] == 0 < halves_in["barriers"]
    assert halves_both["instructions_per_element"] < halves_in["instructions_per_element"] < whole["instructions_per_element"]

    # The pair kernel (both of dY's operands): no spills; 4 tiles a program make the per-program
    # values once; the reloaded tile along the features in halves holds whole blocks of 16 (no
    # shuffle), and an RHT16 along them runs in registers (no shuffle either).
    pair1, pair4, halves, rht16 = rows["pair1"], rows["pair4"], rows["pair_halves"], rows["pair_rht16"]
    assert all(r["stack_bytes"] == 0 for r in (pair1, pair4, halves, rht16))
    assert pair4["instructions_per_element"] < pair1["instructions_per_element"] < 200
    assert halves["shuffles"] == rht16["shuffles"] == 0 < pair1["shuffles"]
    assert halves["instructions_per_element"] < pair1["instructions_per_element"]

    # MS-EDEN after RHT128 works on the tile in its load layout: the butterflies whose pairs lie in
    # other lanes trade values by shuffles (`_lane_butterfly`), not through shared memory (Triton 3.6:
    # 23 barriers and 63.3 instructions per element before), and loaded in halves a thread holds each
    # of its blocks whole (51.1). In the butterflies' layout it took 140 instructions per element and
    # 239 registers (each block's scale and EDEN sums made by every thread touching the block).
    # Its group sums add neighbours first (quant.tree_sum), in a thread's registers before any shuffle:
    # halving (strides 64, 32, ... first) took 77.6 instructions and 9.1 shuffles per element.
    per_thread = 4096 // (32 * 4)
    for eden in (rows["eden0"], rows["eden2"]):
        assert eden["stack_bytes"] == eden["barriers"] == 0 and eden["registers"] <= 128
        assert eden["shuffles"] / per_thread < 6
    assert rows["eden2"]["instructions_per_element"] < min(55, rows["eden0"]["instructions_per_element"])
    assert rows["eden2"]["shuffles"] / per_thread < 4
    # ... and so does the RHT128 amax pass's max (in the butterflies' layout: 33.6 instructions and
    # 5.4 shuffles per element, the max's; 25.9 and 1.6 in the load layout)
    amax, per_thread = rows["rht128_amax"], 8192 // (32 * 8)  # its tile: 8192 elements on 8 warps
    assert amax["stack_bytes"] == 0 and amax["instructions_per_element"] < 30 and amax["shuffles"] / per_thread < 3
    # `rht128`'s amax pass, a thread per row's group, makes the same maximum in registers: no barriers
    # or shuffles in its loop (the sign words' sums, once a program, take a few shuffles) and half the
    # instructions; 4 tiles a program make the sign words once ...
    for n in (1, 4):
        group = rows[f"group_amax{n}"]
        assert group["barriers"] == 0 and group["stack_bytes"] == 0 and group["shuffles"] <= 64
        assert group["instructions_per_element"] < amax["instructions_per_element"] / 1.5
    assert rows["group_amax4"]["instructions_per_element"] < rows["group_amax1"]["instructions_per_element"]
    # ... and makes each tile's 128 sign masks in the loop from four words, not once into registers
    # before it (sm_90, Triton 3.9: 226 registers against 145 for one tile; Triton 3.6: 255 and a stack).
    assert rows["group_amax4"]["registers"] <= rows["group_amax1"]["registers"] + 16
    # The same rotation on dY's columns (`_transposing_amax_kernel`), which also writes dY's transpose:
    # a few instructions more, and a group's 128 two-byte loads all issued before its first store
    # (stored slice by slice after its 8 loads, the H200 ran it at 955 GB/s against 2982).
    for n in (1, 4):
        fused = rows[f"transposing_amax{n}"]
        assert fused["stack_bytes"] == 0 and fused["instructions_per_element"] < 18
    assert rows.pop("transposing_loads_before_store") >= 128
    # With the rows' amax too (ROWS: dgrad dY's), about the two passes' instructions together, no stack
    # (sm_90, Triton 3.6: 26.6 against 15.7 + 11.3).
    both = rows["transposing_rows_amax"]
    assert both["stack_bytes"] == 0
    assert both["instructions_per_element"] < (rows["transposing_amax1"]["instructions_per_element"]
                                               + rows["group_amax1"]["instructions_per_element"] + 3)
    # `bench sass` counts the amax pass the GPU runs for an operand: that kernel for MS-EDEN's moved
    # copy, none for a spec without a tensor scale (MX's E8M0 blocks)
    assert rows.pop("amax_stages") == {"eden_dim0": ["transpose+amax"], "mx": []}

    # An amax pass's atomic max is relaxed (an acq_rel one put 4 fences in the RHT16 pass's code), and
    # a program of 4 tiles reduces its running maxima once (barriers and atomics once per program).
    amax1, amax4 = rows["amax1"], rows["amax4"]
    assert amax1["fences"] == amax4["fences"] == 0 and amax4["barriers"] == amax1["barriers"]
    assert amax4["instructions_per_element"] < amax1["instructions_per_element"]

    # The amax passes take each rotation's last stage as |a| + |b| (the larger of |a + b| and |a - b|):
    # UFP4's X pair amax, two RHT16s, took 22.5 instructions per element with the whole last stages.
    assert rows["pair_amax"]["stack_bytes"] == 0 and rows["pair_amax"]["instructions_per_element"] < 21
    # Its BF16 loads become floats by a shift and a mask (`quantize._as_float`): `.to(tl.float32)` gave
    # a PRMT per pair of loaded values besides the shifts (Triton 3.9: 18.3 -> 17.3 per element here).
    assert rows.pop("pair_amax_prmt") == 0
    # RTNE on a uniform grid with the block scale in the rounding (UFP4's, `quantize._grid_rtne`): the
    # sign is set on the scaled value right before the BF16 conversion, as opaque assembly; as integer
    # masks LLVM moved it past the conversion as a copysign, negating BF16 halves under predicates
    # (Triton 3.9 here: 77 PRMT and 49 HFMA2 against 0 and 2)
    assert rows.pop("scaled_rtne_bf16_ops") <= 4
    # RHT16's amax loaded whole (`_abs_lane_pairs`): its last stage across lanes by shuffles (half an
    # element with Triton 3.6 here, one with 3.9) and no shared memory beyond the reduction's
    lane = rows["lane_amax"]
    assert lane["stack_bytes"] == 0 and lane["barriers"] <= rows["plain_amax"]["barriers"]
    assert lane["shuffles"] / (8192 // 128) < 1.1
    # (and without a rotation, |x| itself: a load, a max and little else per element)
    assert rows["plain_amax"]["stack_bytes"] == 0 and rows["plain_amax"]["instructions_per_element"] < 6

    # Along dim 0 the tokens' stride is a compile-time constant, so a thread's loads and stores of a
    # column are its row's address plus immediates (`quantize._tile_offsets`). With a runtime stride
    # 3% of them were (each access its own address: an add and two address instructions).
    for name in ("strided", "pair_amax", "pair1", "pair4"):
        assert rows[name]["immediate_share"] >= 0.75, (name, rows[name])
