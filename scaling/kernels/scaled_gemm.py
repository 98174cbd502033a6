"""A GEMM with the tensor scale in cuBLASLt's own epilogue: round(dtype, (a @ b) * scale).

An emulated FP4 GEMM accumulates in FP32 and multiplies the result by 1 / (tensor scale of A x
tensor scale of B), a 0-d FP32 tensor on the device. torch's matmuls take only a host alpha (a
sync), so the FP32 product would otherwise be stored, then read again to scale and cast it: twice
the output bytes of a BF16 GEMM, and a second pass (or, compiled, an FP32 read in the consumer).
cuBLASLt reads alpha from device memory (CUBLASLT_POINTER_MODE_DEVICE) and applies it in FP32 to
the finished accumulator before the one rounding to the output type, which is the spec's order.

Called through ctypes on the libcublasLt torch itself loaded. Split-K algorithms are excluded
(reduction scheme mask 0): each output is one FP32 accumulation, scaled once. `supported` says where
it runs; elsewhere `linear._matmul` keeps torch's FP32 GEMM and a separate scale. Measured on the H200
(tests/test_scaled_gemm.py, exact integer operands): the same bits as torch's FP32 GEMM times the
scale, for positive scales (tensor scales are); under a negative one a BF16 output's exact zero comes
out +0 where torch's multiply gives -0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading

import torch

# cuBLASLt enums (cublasLt.h, library_types.h)
_CUDA_R = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}
_COMPUTE_32F = 68
_DESC_POINTER_MODE, _DESC_TRANSA, _DESC_TRANSB = 2, 3, 4
_POINTER_MODE_DEVICE = 1
_PREF_MAX_WORKSPACE_BYTES, _PREF_REDUCTION_SCHEME_MASK = 1, 3
_PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}  # bytes; the heuristic assumes 256 unless told
_OP_N, _OP_T = 0, 1
WORKSPACE_BYTES = 32 << 20


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def _loaded_cublaslt() -> str | None:
    """The path of the libcublasLt this process already mapped (torch's), so both use one library."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip().split(" ")[-1]
                if "libcublasLt.so" in os.path.basename(path):
                    return path
    except OSError:
        pass
    return ctypes.util.find_library("cublasLt")


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    if not torch.cuda.is_available():
        return None
    torch.cuda.init()
    path = _loaded_cublaslt()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    vp, u64, i64 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64
    lib.cublasLtCreate.argtypes = [ctypes.POINTER(vp)]
    lib.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int]
    lib.cublasLtMatmulDescSetAttribute.argtypes = [vp, ctypes.c_int, vp, ctypes.c_size_t]
    lib.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_int, u64, u64, i64]
    lib.cublasLtMatmulPreferenceCreate.argtypes = [ctypes.POINTER(vp)]
    lib.cublasLtMatmulPreferenceSetAttribute.argtypes = [vp, ctypes.c_int, vp, ctypes.c_size_t]
    lib.cublasLtMatmulAlgoGetHeuristic.argtypes = [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int,
                                                   ctypes.POINTER(_HeuristicResult), ctypes.POINTER(ctypes.c_int)]
    lib.cublasLtMatmul.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_size_t, vp]
    return lib


def _ok(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt {call} failed with status {status}")


def _set(setter, obj, attribute: int, value) -> None:
    _ok(setter(obj, attribute, ctypes.byref(value), ctypes.sizeof(value)), setter.__name__)


class _Device:
    """Per-device state: the handle, a workspace, the zero beta, and one plan per GEMM shape."""

    def __init__(self, lib: ctypes.CDLL, device: torch.device):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        with torch.cuda.device(device):
            _ok(lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        # One workspace serves every call: they run in the order of the current stream.
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.zero = torch.zeros((), dtype=torch.float32, device=device)
        torch.cuda.synchronize(device)
        self.plans: dict[tuple, tuple | None] = {}

    def plan(self, key: tuple) -> tuple | None:
        """(desc, layout_a, layout_b, layout_d, algo) for this shape, or None if cuBLASLt has no algorithm."""
        if key not in self.plans:
            self.plans[key] = self._make_plan(*key)
        return self.plans[key]

    def _make_plan(self, in_type, out_type, op_a, rows_a, cols_a, ld_a, op_b, rows_b, cols_b, ld_b, m, n,
                   align_a, align_b, align_d):
        lib, vp = self.lib, ctypes.c_void_p
        desc = vp()
        _ok(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_32F, _CUDA_R[torch.float32]), "MatmulDescCreate")
        set_desc = lib.cublasLtMatmulDescSetAttribute
        _set(set_desc, desc, _DESC_TRANSA, ctypes.c_int32(op_a))
        _set(set_desc, desc, _DESC_TRANSB, ctypes.c_int32(op_b))
        _set(set_desc, desc, _DESC_POINTER_MODE, ctypes.c_int32(_POINTER_MODE_DEVICE))
        layouts = []
        for dtype, rows, cols, ld in ((in_type, rows_a, cols_a, ld_a), (in_type, rows_b, cols_b, ld_b),
                                      (out_type, m, n, m)):
            layout = vp()
            _ok(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), _CUDA_R[dtype], rows, cols, ld), "LayoutCreate")
            layouts.append(layout)
        pref = vp()
        _ok(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
        set_pref = lib.cublasLtMatmulPreferenceSetAttribute
        _set(set_pref, pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(WORKSPACE_BYTES))
        _set(set_pref, pref, _PREF_REDUCTION_SCHEME_MASK, ctypes.c_uint32(0))  # no split-K: alpha once
        for name, align in (("a", align_a), ("b", align_b), ("c", align_d), ("d", align_d)):
            _set(set_pref, pref, _PREF_MIN_ALIGNMENT[name], ctypes.c_uint32(align))
        result, count = _HeuristicResult(), ctypes.c_int(0)
        a, b, d = layouts
        status = lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, a, b, d, d, pref, 1, ctypes.byref(result),
                                                    ctypes.byref(count))
        if status != 0 or count.value < 1:
            return None
        return desc, a, b, d, result

    def run(self, plan: tuple, a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor, out: torch.Tensor) -> None:
        desc, la, lb, ld, result = plan
        p = ctypes.c_void_p
        stream = torch.cuda.current_stream(out.device).cuda_stream
        # beta = 0 from device memory: cuBLASLt then does not read C (C is D, uninitialised)
        _ok(self.lib.cublasLtMatmul(self.handle, desc, p(alpha.data_ptr()), p(a.data_ptr()), la, p(b.data_ptr()), lb,
                                    p(self.zero.data_ptr()), p(out.data_ptr()), ld, p(out.data_ptr()), ld,
                                    ctypes.byref(result.algo), p(self.workspace.data_ptr()),
                                    WORKSPACE_BYTES, p(stream)), "cublasLtMatmul")


_DEVICES: dict[int, _Device] = {}
_LOCK = threading.Lock()


def _device(t: torch.Tensor) -> _Device | None:
    """t's device state, made on first use; None while a CUDA graph is being captured before it exists
    (its allocations and synchronisation would break the capture)."""
    lib = _library()
    if lib is None:
        return None
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    with _LOCK:
        if index not in _DEVICES:
            if torch.cuda.is_current_stream_capturing():
                return None
            _DEVICES[index] = _made_in_own_thread(lib, torch.device("cuda", index))
        return _DEVICES[index]


def _made_in_own_thread(lib: ctypes.CDLL, device: torch.device) -> _Device:
    """_Device(lib, device), made in a thread of its own: a CUDA-graph warmup (torch.compile's
    reduce-overhead) sends the calling thread's allocations to the graph's memory pool, where tensors
    that outlive the graph are refused."""
    made: list = []

    def make() -> None:
        try:
            made.append(_Device(lib, device))
        except BaseException as error:  # noqa: BLE001 (re-raised in the caller's thread)
            made.append(error)

    thread = threading.Thread(target=make, name="scaled_gemm-init")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def _as_column_major(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """t (r, c) as cuBLASLt sees it: (op giving t^T, rows, cols, ld) of its column-major memory, or
    None if neither axis is unit-stride with a 16-byte-aligned leading dimension."""
    r, c = t.shape
    for unit, other, op, rows, cols in ((1, 0, _OP_N, c, r), (0, 1, _OP_T, r, c)):
        ld = t.stride(other)
        if t.stride(unit) == 1 and ld >= max(1, rows) and (ld * t.element_size()) % 16 == 0:
            return op, rows, cols, ld
    return None


def _alignment(t: torch.Tensor) -> int:
    """The largest power of two up to 256 that divides t's address (cuBLASLt picks kernels by it)."""
    address = t.data_ptr()
    return min(256, address & -address) if address else 256


def enabled() -> bool:
    return os.environ.get("SCALING_SCALED_GEMM", "1") != "0"


# FP32 outputs (weight gradients: d x d', K = tokens) of at least this many elements go through
# cuBLASLt; smaller ones keep torch's GEMM, which may split K over a few output tiles, and a separate
# scale. SCALING_SCALED_GEMM_FP32_MIN overrides it (A/B runs; 0: every FP32 output).
FP32_MIN_OUTPUTS = 1 << 22


def fp32_min_outputs() -> int:
    return int(os.environ.get("SCALING_SCALED_GEMM_FP32_MIN", FP32_MIN_OUTPUTS))


def supported(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether `scaled_mm` takes these operands: CUDA, 2-D, one 16-bit input type, a 16-bit output or
    an FP32 one of at least `fp32_min_outputs()` elements. Static facts only, so a compiled graph can
    ask; the op checks the rest (the library, pointers and strides cuBLASLt takes) when it runs."""
    if not (enabled() and a.is_cuda and b.is_cuda and a.dim() == 2 and b.dim() == 2 and a.dtype == b.dtype
            and a.dtype in (torch.bfloat16, torch.float16)):
        return False
    return dtype in (torch.bfloat16, torch.float16) or (
        dtype == torch.float32 and a.shape[0] * b.shape[1] >= fp32_min_outputs())


def _takes(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether cuBLASLt can run these pointers and this (contiguous) output (the operands' strides are
    _as_column_major's to judge)."""
    return (min(a.shape[0], a.shape[1], b.shape[1]) > 0 and out.is_contiguous()
            and all(t.data_ptr() % 16 == 0 for t in (a, b, out)) and (out.shape[1] * out.element_size()) % 16 == 0
            and _library() is not None)


def scaled_mm_into(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor, out: torch.Tensor) -> bool:
    """out (M, N), contiguous, := round(out.dtype, FP32 (a @ b) * alpha), alpha a 0-d FP32 device
    tensor. False (out untouched) where cuBLASLt cannot take the operands or has no algorithm."""
    # Row-major D = A @ B is column-major D^T = B^T @ A^T: cuBLASLt's A is our b, its B our a.
    layout_b, layout_a = _as_column_major(b), _as_column_major(a)  # b^T: (N, K); a^T: (K, M)
    if layout_a is None or layout_b is None or not _takes(a, b, out):
        return False
    state = _device(out)
    if state is None:
        return False
    key = (a.dtype, out.dtype, *layout_b, *layout_a, out.shape[1], out.shape[0],
           _alignment(b), _alignment(a), _alignment(out))
    plan = state.plan(key)
    if plan is None:
        return False
    state.run(plan, b, a, alpha, out)
    return True


@torch.library.custom_op("scaling::scaled_mm", mutates_args=())
def scaled_mm(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """round(dtype, (a @ b) accumulated in FP32, times alpha (0-d FP32) in FP32), for `supported`
    operands. Operands cuBLASLt cannot take get torch's FP32 GEMM and the same scale."""
    out = torch.empty((a.shape[0], b.shape[1]), dtype=dtype, device=a.device)
    if not scaled_mm_into(a, b, alpha, out):
        out.copy_(torch.mm(a, b, out_dtype=torch.float32) * alpha)
    return out


@scaled_mm.register_fake
def _(a, b, alpha, dtype):
    return torch.empty((a.shape[0], b.shape[1]), dtype=dtype, device=a.device)
