"""The quantizer kernels' sm_90 machine code, counted without a GPU.

Triton compiles for a target it is told (`GPUTarget("cuda", 90, 32)`) with the ptxas it ships, and
its cuobjdump disassembles the result, so the instructions, registers and local-memory stack of every
tile candidate can be read on any Linux machine. The kernels are issue-bound where their instruction
count per element is high (at the H200's copy rate a thread may spend ~32 instructions per element)
and latency-bound where registers cap the warps per SM: this says which, before a GPU is booked.
Counts are static (each program runs its tile once, without loops) and depend on the Triton version.
`scaling bench sass` writes them.
"""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from scaling.kernels import quantize as Q
from scaling.quant import QuantSpec

TARGET = GPUTarget("cuda", 90, 32)
_SIGNATURE = {"x_ptr": "*bf16", "out_ptr": "*bf16", "amax_ptr": "*fp32", "inv_ptr": "*fp32", "seeds_ptr": "*i64",
              "scale_ptr": "*fp32", "R": "i32", "K": "i32", "stride_r": "i32", "stride_k": "i32", "numer": "fp32",
              "target": "fp32"}


def _tool(name: str) -> Path:
    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name


def _cuobjdump() -> str:
    return str(_tool("cuobjdump"))


def missing_tools() -> list[str]:
    """The tools of Triton's NVIDIA backend this module needs that are not installed."""
    return [name for name in ("ptxas", "cuobjdump") if not _tool(name).exists()]


def _launch(spec: QuantSpec, dim: int, K: int) -> Q.Launch:
    """The GPU launch of one operand whose quantized axis has K elements (on a meta tensor: no memory),
    for its compile-time parameters and tile candidates."""
    import torch

    shape = (K, 4096) if dim == 0 else (4096, K)
    return Q.Launch(torch.empty(shape, device="meta"), spec, dim, None, torch.bfloat16)


def _compile_sm90(kernel, types: dict[str, str], constants: dict, warps: int):
    """A kernel compiled for sm_90 as the GPU would launch it: `types` the runtime arguments' (the
    pointers and i32s divisible by 16), `constants` the compile-time ones; no FMA contraction."""
    names = kernel.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    hints = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if n not in constants and (signature[n].startswith("*") or signature[n] == "i32")}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=hints)
    options = triton.compiler.make_backend(TARGET).parse_options({"num_warps": warps, "enable_fp_fusion": False})
    return triton.compile(source, target=TARGET, options=options.__dict__)


def compile_quantize(spec: QuantSpec, dim: int, K: int, tile: int, bk: int, warps: int, narrow: int,
                     halves: int = 0, iters: int = 1):
    """The quantize kernel for one spec and tile, compiled for sm_90 as the GPU would launch it: the
    unit stride specialised to 1 and the other integers divisible by 16, no FMA contraction."""
    launch = _launch(spec, dim, K)
    cfg = dict(launch.cfg, TILE=tile, BK=bk, NARROW=narrow, HALVES=halves, ITERS=iters)
    unit = "stride_k" if launch.stride_k == 1 else "stride_r"
    constants = ({k: v for k, v in cfg.items() if k in Q._quantize_kernel.arg_names}
                 | {unit: 1, "stride_k": launch.stride_k})  # (stride_k: compile-time, as launched)
    types = {n: t for n, t in _SIGNATURE.items() if n not in constants}
    return _compile_sm90(Q._quantize_kernel, types, constants, warps)


def compile_amax(spec: QuantSpec, dim: int, K: int, tile: int, bk: int, warps: int, narrow: int, halves: int = 0,
                 iters: int = 1):
    """The amax pass (`Q._amax_kernel`) for one spec and tile, compiled for sm_90 as `compile_quantize`,
    on the view the pass reads (`Launch._amax_view`)."""
    launch = _launch(spec, dim, K)
    consts = dict(launch._amax_consts(), TILE=tile, BK=bk, NARROW=narrow, HALVES=halves, ITERS=iters)
    stride_k = launch._amax_view()[3]
    unit = "stride_k" if stride_k == 1 else "stride_r"
    constants = ({k: v for k, v in consts.items() if k in Q._amax_kernel.arg_names}
                 | {unit: 1, "stride_k": stride_k})
    types = {n: t for n, t in (_SIGNATURE | {"plain_ptr": "*fp32"}).items()
             if n in Q._amax_kernel.arg_names and n not in constants}
    return _compile_sm90(Q._amax_kernel, types, constants, warps)


def _compile_rht128(kernel, spec: QuantSpec, warps: int, iters: int, scaled: bool, extra: dict, types: dict,
                    lanes: int = 1):
    """One of `rht128`'s kernels for an RHT128 spec, compiled for sm_90 as `compile_quantize` (32 rows
    or features a warp, `iters` tiles a program, `scaled`: a kept operand's scale, `lanes`: a row's
    group over that many lanes)."""
    cfg = Q._config(spec, 4096)
    constants = {"BR": 32 * warps, "ITERS": iters, "NORM": cfg["NORM"], "RAND_SIGNS": cfg["RAND_SIGNS"],
                 "HAS_SCALE": scaled, "LANES": lanes, **extra}
    return _compile_sm90(kernel, {n: t for n, t in types.items() if n in kernel.arg_names}, constants, warps)


def compile_group_amax(spec: QuantSpec, warps: int, iters: int = 1, scaled: bool = False, lanes: int = 1):
    """`rht128`'s amax pass (a thread per row's group, or over `lanes` 4), as `_compile_rht128`."""
    from scaling.kernels import rht128

    return _compile_rht128(rht128._group_amax_kernel, spec, warps, iters, scaled, {}, _SIGNATURE, lanes)


def compile_transposing_amax(spec: QuantSpec, warps: int, iters: int = 1, D: int = 4096, rows: bool = False,
                             lanes: int = 1):
    """`rht128`'s transposing amax pass (the moved copy and its amax, a thread per feature) along dim 0
    of a (T, D) x, as `_compile_rht128` (D a compile-time constant, as launched); `rows`: the one that
    also takes the amax along x's rows (ROWS; `lanes`: their groups' mapping)."""
    from scaling.kernels import rht128

    return _compile_rht128(rht128._transposing_amax_kernel, spec, warps, iters, False, {"D": D, "ROWS": rows},
                           _SIGNATURE | {"dst_ptr": "*bf16", "T": "i32", "rows_amax_ptr": "*fp32",
                                         "rows_seeds_ptr": "*i64"}, lanes)


def compile_pair(last: QuantSpec, first: QuantSpec, T: int, D: int, tile: int, bk: int, warps: int, narrow: int,
                 halves: int = 0, iters: int = 1, amax: bool = False):
    """The pair kernel (`scaling.kernels.pair`; with `amax`, its amax pass) for a (T, D) input and one
    tile, compiled for sm_90 as the GPU would launch it (integers divisible by 16, no FMA contraction)."""
    from scaling.kernels import pair

    cfg = dict(pair._pair_config(last, first, D, T), TILE=tile, BK=bk, NARROW=narrow, HALVES=halves, ITERS=iters)
    kernel = pair._pair_amax_kernel if amax else pair._pair_kernel
    constants = {k: v for k, v in cfg.items() if k in kernel.arg_names} | {"D": D}  # (compile-time, as launched)
    types = {n: ("*bf16" if n in ("x_ptr", "last_ptr", "first_ptr") else "*i64" if n.startswith("seeds")
                 else "*fp32" if n.endswith("_ptr") else "i32" if n == "T" else "fp32")
             for n in kernel.arg_names if n not in constants}
    return _compile_sm90(kernel, types, constants, warps)


def machine_code(compiled) -> tuple[str, str]:
    """(SASS listing, resource usage) of a compiled kernel, by the cuobjdump Triton ships."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([_cuobjdump(), "-sass", f.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_cuobjdump(), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    return sass, usage


_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);", re.MULTILINE)


def _instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of each instruction (NOPs left out) of a SASS listing."""
    return [(int(a, 16), op.split(".")[0], rest) for a, op, rest in _INSTRUCTION.findall(sass)
            if op.split(".")[0] != "NOP"]


def opcodes(sass: str) -> collections.Counter:
    """Instructions per opcode (NOPs left out) of a SASS listing."""
    return collections.Counter(op for _, op, _ in _instructions(sass))


def immediate_share(sass: str) -> float:
    """The share of the listing's global loads and stores narrower than 16 bytes (a strided tile's
    accesses: `quantize._tile_offsets`) whose address is a register plus an immediate offset, not a
    register of its own."""
    scalar = [rest for _, op, rest in _INSTRUCTION.findall(sass)
              if op.split(".")[0] in ("LDG", "STG") and not op.endswith(".128")]
    return sum(bool(re.search(r"\.64\+0x", rest)) for rest in scalar) / max(len(scalar), 1)


def loop_body(sass: str) -> int:
    """Instructions inside the listing's loops (from a backward branch's target to the branch), 0 if
    none: what runs once per iteration rather than once per program."""
    body = set()
    instructions = _instructions(sass)
    for address, op, rest in instructions:
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if target and int(target.group(1), 16) < address:
            body |= {a for a, _, _ in instructions if int(target.group(1), 16) <= a <= address}
    return len(body)


def count(spec: QuantSpec, dim: int, K: int, tile: int, bk: int, warps: int, narrow: int, halves: int = 0,
          iters: int = 1) -> dict:
    """Instructions per element, registers, stack bytes, barriers, shuffles and memory fences of one
    tile (the loop of ITERS tiles counted as its body, once per tile, and what precedes it, once per
    program)."""
    compiled = compile_quantize(spec, dim, K, tile, bk, warps, narrow, halves, iters)
    return _counted(compiled, tile, bk, warps, narrow, halves, iters)


def count_amax(spec: QuantSpec, dim: int, K: int, tile: int, bk: int, warps: int, narrow: int,
               halves: int = 0, iters: int = 1) -> dict:
    """`count` for the amax pass (per element read)."""
    return _counted(compile_amax(spec, dim, K, tile, bk, warps, narrow, halves, iters), tile, bk, warps, narrow,
                    halves, iters, trips=iters - 1)


def count_group_amax(spec: QuantSpec, warps: int, iters: int = 1, scaled: bool = False, lanes: int = 1) -> dict:
    """`count` for `rht128`'s amax pass (per element read; its loop runs ITERS times)."""
    tile = 32 * warps * 128
    return _counted(compile_group_amax(spec, warps, iters, scaled, lanes), tile, 128, warps, 0, 0, iters,
                    lanes=lanes)


def count_transposing_amax(spec: QuantSpec, warps: int, iters: int = 1, D: int = 4096, rows: bool = False,
                           lanes: int = 1) -> dict:
    """`count` for `rht128`'s transposing amax pass (per element read and copied; its loop runs ITERS
    times) on a (T, D) input; `rows`: with the rows' amax (`lanes`: their groups' mapping)."""
    tile = 32 * warps * 128
    return _counted(compile_transposing_amax(spec, warps, iters, D, rows, lanes), tile, 128, warps, 0, 0, iters,
                    lanes=lanes)


def count_pair(last: QuantSpec, first: QuantSpec, T: int, D: int, tile: int, bk: int, warps: int, narrow: int,
               halves: int = 0, iters: int = 1) -> dict:
    """`count` for the pair kernel: per element of its input (each is quantized twice)."""
    compiled = compile_pair(last, first, T, D, tile, bk, warps, narrow, halves, iters)
    return _counted(compiled, tile, bk, warps, narrow, halves, iters)


def count_pair_amax(last: QuantSpec, first: QuantSpec, T: int, D: int, tile: int, bk: int, warps: int, narrow: int,
                    iters: int = 1, halves: int = 0) -> dict:
    """`count` for the pair's amax pass (both tensor amaxes; per element read)."""
    compiled = compile_pair(last, first, T, D, tile, bk, warps, narrow, halves, iters, amax=True)
    return _counted(compiled, tile, bk, warps, narrow, halves, iters, trips=iters - 1)


def amax_counts(spec: QuantSpec, dim: int, K: int) -> list[dict]:
    """`count`'s rows for the amax pass the GPU runs before one operand's quantize pass, one per tile
    its tuner tries, each with its "stage": `rht128`'s transposing amax ("transpose+amax": MS-EDEN's
    copy with K moved last and its amax), `rht128`'s amax ("amax", a thread per row's group) or
    `_amax_kernel`'s ("amax"); none where the spec has no tensor scale."""
    from scaling.kernels import rht128

    launch = _launch(spec, dim, K)
    if not launch.needs_amax:
        return []
    if launch.moves_with_amax:
        return [{"stage": "transpose+amax", **count_transposing_amax(spec, w, n, launch.x.shape[1])}
                for w, n in rht128._CANDIDATES]
    if launch.by_groups_amax:
        return ([{"stage": "amax", **count_group_amax(spec, w, n)} for w, n in rht128._CANDIDATES]
                + [{"stage": "amax", **count_group_amax(spec, w, n, lanes=4)} for w, n in rht128._QUARTER_CANDIDATES])
    bks = launch._amax_view()[4]
    return [{"stage": "amax", **count_amax(spec, dim, K, tile, bk, w, f, h or 0, n)}
            for tile, bk, w, f, h, n in Q.tile_candidates(bks, launch.cfg["BLK_R"], launch.amax_halves)]


def pair_candidates(last: QuantSpec, first: QuantSpec, T: int, D: int) -> list[tuple[int, int, int, int, int, int]]:
    """(TILE, BK, warps, NARROW, HALVES, ITERS) of the tiles the GPU autotuner tries for a pair."""
    from scaling.kernels import pair

    bk = pair._pair_config(last, first, D, T)["BK"]
    return sorted(pair.pair_tiles(bk, pair.halves_choices(last)))


def pair_amax_counts(last: QuantSpec, first: QuantSpec, T: int, D: int) -> list[dict]:
    """`count_pair_amax`'s rows (stage "amax") for each tile the pair amax's tuner tries; none where
    the specs have no tensor scale."""
    from scaling.kernels import pair

    cfg = pair._pair_config(last, first, D, T)
    if not cfg["TENSOR_SCALE"]:
        return []
    return [{"stage": "amax", **count_pair_amax(last, first, T, D, tile, bk, w, f, n, h or 0)}
            for tile, bk, w, f, h, n in pair.pair_tiles(cfg["BK"], pair.amax_halves_choices(last))]


def _counted(compiled, tile: int, bk: int, warps: int, narrow: int, halves: int, iters: int,
             trips: int | None = None, lanes: int = 1) -> dict:
    """The counts of a program of ITERS tiles whose loop runs `trips` times (ITERS; ITERS - 1 where
    the first tile is peeled off, as in the amax passes). A loop the compiler unrolled whole has no
    body: its static count is the program's. `lanes`: the lanes a row's RHT128 group is over (`rht128`'s
    LANES; 1 for every other kernel)."""
    sass, usage = machine_code(compiled)
    ops = opcodes(sass)
    per_thread = tile / (32 * warps)
    body = loop_body(sass) if iters > 1 else 0
    trips = iters if trips is None else trips
    per_program = sum(ops.values()) + max(trips - 1, 0) * body  # the listing holds the body once
    registers, stack = (int(re.search(rf"{k}:(\d+)", usage).group(1)) for k in ("REG", "STACK"))
    return {"tile": tile, "bk": bk, "warps": warps, "narrow": narrow, "halves": halves, "iters": iters,
            "lanes": lanes,
            "instructions_per_element": round(per_program / (iters * per_thread), 1), "registers": registers,
            "stack_bytes": stack, "barriers": ops["BAR"], "shuffles": ops["SHFL"],
            "fences": ops["MEMBAR"] + ops["ERRBAR"], "immediate_share": round(immediate_share(sass), 2)}


def candidates(spec: QuantSpec, dim: int, K: int) -> list[tuple[int, int, int, int, int, int]]:
    """(TILE, BK, warps, NARROW, HALVES, ITERS) of the tiles the GPU autotuner tries for this spec
    (Launch's BKs and HALVES choices)."""
    launch = _launch(spec, dim, K)
    return sorted(Q.tile_candidates(launch.bks, launch.cfg["BLK_R"], launch.halves))
