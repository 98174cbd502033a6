"""cuBLASLt's GEMM with the tensor scale in its epilogue (scaling.kernels.scaled_gemm): GPU only."""

import pytest
import torch

from scaling import linear
from scaling.kernels import scaled_gemm

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="cuBLASLt needs a CUDA device")

# Tensor scales are positive: 1 / scale of an amax (or 1). Tiny, huge (the output overflows), common.
ALPHAS = (1 / 2687.3, 3.0e-41, 1.7e35, 0.37)


def exact_operands(m: int, k: int, n: int, seed: int):
    """Small integers: every product and partial sum is exact in FP32, so any accumulation order
    gives the same FP32 accumulator, and the results can be compared bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randint(-8, 9, (m, k), generator=gen).to(torch.bfloat16).cuda()
    b = torch.randint(-8, 9, (k, n), generator=gen).to(torch.bfloat16).cuda()
    return a, b


def expected(a, b, alpha, dtype):
    return (torch.mm(a.float(), b.float()) * alpha).to(dtype)


def same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    as_int = torch.int16 if got.element_size() == 2 else torch.int32
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()].view(as_int), want[~want.isnan()].view(as_int))


@cuda
@pytest.mark.parametrize("a_major", ["row", "col"])
@pytest.mark.parametrize("b_major", ["row", "col"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_scale_applied_once_to_the_fp32_accumulator(a_major, b_major, dtype, monkeypatch):
    """Every layout of A and B (QLinear passes W^T and dY^T views), odd-but-aligned shapes; FP32
    outputs (weight gradients) as well, whatever their size."""
    monkeypatch.setenv("SCALING_SCALED_GEMM_FP32_MIN", "0")
    a, b = exact_operands(264, 4096, 136, seed=1)
    if a_major == "col":
        a = a.t().contiguous().t()
    if b_major == "col":
        b = b.t().contiguous().t()
    for value in ALPHAS:
        alpha = torch.tensor(value, dtype=torch.float32, device="cuda")
        assert scaled_gemm.supported(a, b, dtype)
        same_bits(scaled_gemm.scaled_mm(a, b, alpha, dtype), expected(a, b, alpha, dtype))


@cuda
def test_output_memory_is_not_read():
    """beta = 0 from device memory: the uninitialised output (here NaN) is never read as C."""
    a, b = exact_operands(256, 512, 128, seed=2)
    alpha = torch.tensor(0.125, device="cuda")
    out = torch.full((256, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert scaled_gemm.scaled_mm_into(a, b, alpha, out)
    same_bits(out, expected(a, b, alpha, torch.bfloat16))


@cuda
def test_operands_cublaslt_cannot_take_fall_back_to_torch():
    """An operand with no unit stride runs torch's GEMM and the same scale."""
    a, b = exact_operands(64, 96, 40, seed=3)
    strided = torch.empty(64, 2 * 96, dtype=torch.bfloat16, device="cuda")[:, ::2]
    strided.copy_(a)
    alpha = torch.tensor(0.3, device="cuda")
    assert not scaled_gemm.scaled_mm_into(strided, b, alpha, torch.empty(64, 40, dtype=torch.bfloat16, device="cuda"))
    same_bits(scaled_gemm.scaled_mm(strided, b, alpha, torch.bfloat16), expected(a, b, alpha, torch.bfloat16))


@cuda
def test_first_call_in_cuda_graphs(monkeypatch):
    """The device state made inside reduce-overhead's warmup stays out of the graph's memory pool
    (torch refuses untracked tensors there); during a capture it is not made (torch's GEMM runs)."""
    a, b = exact_operands(256, 512, 128, seed=5)
    alpha = torch.tensor(0.625, device="cuda")
    want = expected(a, b, alpha, torch.bfloat16)
    monkeypatch.setattr(scaled_gemm, "_DEVICES", {})
    graph, out = torch.cuda.CUDAGraph(), None
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = scaled_gemm.scaled_mm(a, b, alpha, torch.bfloat16)
    assert scaled_gemm._DEVICES == {}
    graph.replay()
    same_bits(out, want)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b, s: scaled_gemm.scaled_mm(a, b, s, torch.bfloat16) * 2, mode="reduce-overhead")
    for _ in range(3):
        got = f(a, b, alpha)
    assert scaled_gemm._DEVICES
    same_bits(got, want * 2)


@cuda
def test_matmul_uses_it_for_16_bit_outputs_and_compiles(monkeypatch):
    """linear._matmul: a scaled BF16 output goes through cuBLASLt, the same bits eager and compiled
    (one custom op, no graph break); an FP32 output (a weight gradient) below
    `fp32_min_outputs()` keeps torch's GEMM, one at least that large goes through cuBLASLt."""
    a, b = exact_operands(512, 1024, 256, seed=4)
    inv_a, inv_b = torch.tensor(1 / 13.7, device="cuda"), torch.tensor(0.0371, device="cuda")
    want = expected(a, b, inv_a * inv_b, torch.bfloat16)
    same_bits(linear._matmul(a, b.t().contiguous().t(), inv_a, inv_b, torch.bfloat16), want)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b, s, t: linear._matmul(a, b, s, t, torch.bfloat16), fullgraph=True)
    same_bits(compiled(a, b, inv_a, inv_b), want)
    calls = []
    monkeypatch.setattr(scaled_gemm, "scaled_mm", lambda *args: calls.append(args))
    linear._matmul(a, b, inv_a, inv_b, torch.bfloat16)
    assert len(calls) == 1  # (the bits alone cannot tell: both paths give them for these operands)
    calls.clear()
    linear._matmul(a, b, inv_a, inv_b, torch.float32)
    assert calls == []
    monkeypatch.setenv("SCALING_SCALED_GEMM_FP32_MIN", str(512 * 256))
    linear._matmul(a, b, inv_a, inv_b, torch.float32)
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setenv("SCALING_SCALED_GEMM", "0")
    same_bits(linear._matmul(a, b, inv_a, inv_b, torch.bfloat16), want)
    assert calls == []


@pytest.mark.parametrize("shape", [(64, 40), (40, 64), (8, 8)])
@pytest.mark.parametrize("major", ["row", "col", "row-padded", "strided"])
def test_operand_layouts_as_cublaslt_reads_them(shape, major):
    """_as_column_major (no GPU needed): the (op, rows, cols, ld) it gives, read back as cuBLASLt
    reads column-major memory, is t^T under op N and t under op T; an operand with no unit stride or
    an unaligned leading dimension is refused."""
    r, c = shape
    base = torch.arange(r * c * 4, dtype=torch.float32).to(torch.bfloat16)
    if major == "row":
        t = base[: r * c].view(r, c)
    elif major == "col":
        t = base[: r * c].view(c, r).t()
    elif major == "row-padded":
        t = base[: r * (c + 8)].view(r, c + 8)[:, :c]
    else:
        t = base[: r * c * 2].view(r, 2 * c)[:, ::2]
    layout = scaled_gemm._as_column_major(t)
    if major == "strided":
        assert layout is None
        return
    op, rows, cols, ld = layout
    memory = torch.as_strided(t, (rows, cols), (1, ld))  # column-major (rows, cols) with leading dim ld
    assert torch.equal(memory, t.t() if op == scaled_gemm._OP_N else t)
    misaligned = base[: r * (c + 1)].view(r, c + 1)[:, :c]  # ld of c + 1 BF16: not 16-byte aligned
    assert scaled_gemm._as_column_major(misaligned) is None
