"""Model families and the size ladder."""

import json
import math

import pytest
import torch
import torch.nn as nn

from models import FAMILIES, SIZES, build_model, ladder, model_size
from models.ladder import MICRO
from scaling.cli import main
from scaling.errors import UserError


def _target(name: str) -> float:
    return float(name[:-1]) * 1e6


@pytest.mark.parametrize("family", FAMILIES)
def test_every_size_is_named_after_its_non_embedding_parameter_count(family):
    for s in ladder(family):
        with torch.device("meta"):
            model = build_model(family, s.name, vocab_size=1000, seq_len=128)
        total = sum(p.numel() for p in model.parameters())
        assert total == s.n_params_total(1000)
        assert total - model.embed.weight.numel() - model.lm_head.weight.numel() == s.n_params
        assert abs(s.n_params / _target(s.name) - 1) <= 0.10, (s, s.n_params)


@pytest.mark.parametrize("family", FAMILIES)
def test_block_linears_are_plain_and_tile_quantization_blocks(family):
    for s in ladder(family):
        with torch.device("meta"):
            model = build_model(family, s.name, vocab_size=1000, seq_len=128)
        assert isinstance(model.blocks, nn.ModuleList) and len(model.blocks) == s.depth
        assert type(model.lm_head) is nn.Linear
        multiple = 32 if s.name in MICRO else 128
        linears = [m for m in model.blocks.modules() if isinstance(m, nn.Linear)]
        assert len(linears) == s.depth * (7 if family == "llama2" else 6)
        for block in model.blocks:  # ModelSize.block_linears: the shapes sweeps check recipes against
            shapes = sorted((m.in_features, m.out_features) for m in block.modules() if isinstance(m, nn.Linear))
            assert shapes == sorted(s.block_linears), (s.name, shapes)
        for m in linears:
            assert type(m) is nn.Linear and m.bias is None
            assert m.in_features % multiple == 0 and m.out_features % multiple == 0, (s.name, m)
        assert s.width == 64 * s.heads


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_shapes_loss_and_causality(family):
    torch.manual_seed(0)
    model = build_model(family, "0.5M", vocab_size=512, seq_len=32)
    idx = torch.randint(0, 512, (2, 32))
    logits = model(idx)
    assert logits.shape == (2, 32, 512)
    loss = model(idx, idx)
    assert loss.shape == () and loss.dtype == torch.float32
    # At init the prediction is (nearly) uniform: nanochat's head is zero, so exactly ln V.
    assert loss.item() == pytest.approx(math.log(512), abs=1e-5 if family == "nanochat" else 0.1)
    # Causal: changing the last token changes no earlier position's logits.
    torch.nn.init.normal_(model.lm_head.weight, std=0.02)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 512
    a, b = model(idx), model(changed)
    assert torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_is_torchs_fused_sdpa_and_no_layer_has_a_bias(family):
    """The spec: both families attend with F.scaled_dot_product_attention (once a block, causal), and
    have no biases anywhere (the head's included)."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    calls = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append((func, (kwargs or {}).get("is_causal")))
            return func(*args, **(kwargs or {}))

    model = build_model(family, "0.5M", vocab_size=64, seq_len=16)
    with Record():
        model(torch.randint(0, 64, (1, 16)))
    assert [c for c in calls if c[0] is F.scaled_dot_product_attention] == [(F.scaled_dot_product_attention, True)] * 10
    assert not any(f in (F.softmax, torch.softmax, torch.Tensor.softmax) for f, _ in calls)
    assert [n for n, _ in model.named_parameters() if "bias" in n] == [] and model.lm_head.bias is None


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sequence_longer_than_the_rope_tables_is_refused(family):
    """On a CPU the fused RoPE kernel would read past its tables (NaN, run-to-run noise)."""
    model = build_model(family, "0.5M", vocab_size=256, seq_len=16)
    model(torch.randint(0, 256, (1, 16)))
    with pytest.raises(ValueError, match="a sequence of 32 tokens is longer than the model's seq_len 16"):
        model(torch.randint(0, 256, (1, 32)))


@pytest.mark.parametrize("family", FAMILIES)
def test_residual_stream_is_in_the_autocast_dtype(family):
    """As nanochat (whose embedding is BF16 on a GPU) and torchtitan's Llama, the residual stream
    under autocast is BF16, while the embedding's master weight stays FP32; without autocast
    everything is FP32."""
    torch.manual_seed(0)
    model = build_model(family, "0.5M", vocab_size=512, seq_len=32)
    idx = torch.randint(0, 512, (2, 32))
    seen = []
    model.blocks[1].register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(idx)  # (a CPU run trains in FP32: its loss function takes no autocast)
    logits.square().mean().backward()
    assert seen == [torch.bfloat16] and model.embed.weight.dtype == torch.float32
    assert model.embed.weight.grad.dtype == torch.float32 and torch.isfinite(model.embed.weight.grad).all()
    model(idx, idx)
    assert seen[-1] == torch.float32


def test_unknown_family_or_size_is_a_user_error():
    with pytest.raises(UserError, match="family"):
        build_model("gpt5", "1M")
    with pytest.raises(UserError, match="size"):
        build_model("nanochat", "3M")


@pytest.mark.parametrize("family, size, hint", [
    ("nanochat", "160m", "unknown model size '160m' (did you mean 160M?); choose one of 0.5M, 1M,"),
    ("nanochat", "80", "unknown model size '80' (did you mean 80M?)"),
    ("llama", "1M", "unknown model family 'llama' (did you mean llama2?); choose one of llama2, nanochat"),
    ("Nanochat", "1M", "unknown model family 'Nanochat' (did you mean nanochat?)"),
])
def test_a_near_miss_of_a_size_or_family_is_named(family, size, hint):
    """As an unknown recipe: the name meant, where one is close (the messages listed every name only)."""
    with pytest.raises(UserError) as e:
        build_model(family, size)
    assert str(e.value).startswith(hint)


def test_a_name_near_no_size_suggests_none():
    with pytest.raises(UserError) as e:
        build_model("nanochat", "3M")
    assert "did you mean" not in str(e.value)


def test_a_size_of_another_family_is_refused():
    """build_model(family, ModelSize) built the ModelSize's family whatever `family` said (a nanochat
    call with a llama2 size gave a Llama; an unknown family went unchecked)."""
    from models import model_size

    llama = model_size("llama2", "0.5M")
    assert type(build_model("llama2", llama, vocab_size=64, seq_len=8)).__name__ == "Llama"
    with pytest.raises(UserError, match="a llama2 size for family 'nanochat'"):
        build_model("nanochat", llama, vocab_size=64, seq_len=8)
    with pytest.raises(UserError, match="family"):
        build_model("gpt5", llama, vocab_size=64, seq_len=8)


def test_the_documented_ladder_table_is_the_code_s():
    """docs/models.md's ladder table (depth, width, heads, MLP and N of both families) is what
    `models.ladder` builds; the docs said width = 64·depth held 'where the parameter target allows',
    which 80M (11 x 768; 12 x 768 is within 10%) did not."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    rows = re.findall(r"^\| ([0-9.]+M) \| (.+) \|$", text, re.M)
    llama, nano = {s.name: s for s in ladder("llama2")}, {s.name: s for s in ladder("nanochat")}
    assert [name for name, _ in rows] == list(SIZES)
    for name, cells in rows:
        a, b = llama[name], nano[name]
        expect = [a.depth, a.width, a.heads, f"{a.width / a.depth:.1f}", a.mlp, b.mlp, f"{a.n_params:,}", f"{b.n_params:,}"]
        assert [c.strip() for c in cells.split("|")] == [str(e) for e in expect], name
    assert "where the parameter target allows" not in text


def test_each_depth_is_the_one_whose_nanochat_n_is_nearest_the_name():
    """docs/models.md's rule for the table's depths, which is why 80M is 11 x 768 (-2.7%) and not
    12 x 768 (+6.2%, width = 64·depth), and why only 80M could have kept width = 64·depth within 10%."""
    import dataclasses

    for s in ladder("nanochat"):
        error = {d: abs(dataclasses.replace(s, depth=d).n_params / _target(s.name) - 1) for d in range(1, 4 * s.depth)}
        assert min(error, key=error.get) == s.depth, s
        if s.name not in MICRO:  # width/64 layers within 10% of the name
            aspect = abs(dataclasses.replace(s, depth=s.width // 64).n_params / _target(s.name) - 1)
            assert (aspect <= 0.10) == (s.name in ("10M", "80M")), s
    assert dataclasses.replace(ladder("llama2")[8], depth=12).n_params == 84_953_856  # (the docs' 85.0M)


def test_flops_per_token():
    s = ladder("nanochat")[1]  # 1M: depth 5, width 128
    assert s.flops_per_token() == 6 * s.n_params
    assert s.flops_per_token_exact(4096, 256) == 6 * (s.n_params + 4096 * 128) + 12 * 5 * 128 * 256



@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("size, seq_len", [("1M", 64), ("1M", 128), ("4M", 32)])
def test_exact_flops_are_the_ones_torch_counts_in_a_training_step(family, size, seq_len):
    """flops_per_token_exact against torch's FlopCounterMode over one forward and backward, with
    attention through SDPA's math backend (its CPU kernel is not counted), at two shapes and two
    seq_lens (attention's term grows with it): nanochat's is the count to the FLOP; llama2's counts
    6 more per RMSNorm gain, which N holds as if they were matmul weights (the docs said norms were
    not counted). The forward alone is a third of it (sweeps.cost.FORWARD_SHARE, an evaluation's)."""
    import importlib

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from sweeps.cost import FORWARD_SHARE

    vocab, s = 512, model_size(family, size)
    model = build_model(family, size, vocab_size=vocab, seq_len=seq_len)
    idx = torch.randint(0, vocab, (2, seq_len))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as forward:
        logits = model(idx).float()  # (logits: the head's matmul; the CPU's fused loss hides its backward's)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as step:
        model(idx).float().sum().backward()
    gains = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    assert gains == (2 * s.depth + 1) * s.width if family == "llama2" else gains == 0
    tokens = logits.shape[0] * logits.shape[1]
    assert step.get_total_flops() + 6 * gains * tokens == s.flops_per_token_exact(vocab, seq_len) * tokens
    exact_forward = FORWARD_SHARE * s.flops_per_token_exact(vocab, seq_len) * tokens
    assert forward.get_total_flops() + 2 * gains * tokens == pytest.approx(exact_forward, rel=1e-12)
    ladder_doc = importlib.import_module("models.ladder").__doc__  # (models.ladder is the function)
    assert "norms and softmax are not counted" not in " ".join(ladder_doc.split())

def test_scaling_models_json(capsys):
    assert main(["models", "--family", "llama2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in rows] == list(SIZES)
    assert all(r["family"] == "llama2" and r["n_params_total"] > r["n_params"] for r in rows)


def test_scaling_models_counts_flops_at_the_seq_len_a_run_of_the_size_trains_at(capsys):
    """The exact FLOPs per token `scaling models` prints are those a run's MFU counts (result.json's
    flops_exact): at the run's default seq_len, 256 for the micro sizes (it printed them at 1024 for every
    size: 1M's 3.5 times its runs'); --seq-len sets one for all."""
    from scaling.config import RunConfig

    assert main(["models", "--json"]) == 0
    for r in json.loads(capsys.readouterr().out):
        run = RunConfig(family=r["family"], size=r["size"], recipe="bf16", tokens=10**9).resolved()
        s = run.model_size()
        assert r["seq_len"] == run.seq_len == (256 if r["size"] in MICRO else 1024)
        assert r["flops_per_token_exact"] == s.flops_per_token_exact(32768, run.seq_len), r
    assert main(["models", "--family", "nanochat", "--seq-len", "512", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["seq_len"] for r in rows} == {512}
    assert rows[1]["flops_per_token_exact"] == ladder("nanochat")[1].flops_per_token_exact(32768, 512)


def test_scaling_models_names_the_family_meant(capsys):
    """--family was argparse's choices: 'invalid choice: 'llama'', where `scaling train` and `bench`
    name the near miss; it now has the ladder's one message, exit 2."""
    with pytest.raises(SystemExit) as e:
        main(["models", "--family", "llama"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("error: scaling models: argument --family: unknown model family 'llama' (did "
                                       "you mean llama2?); choose one of llama2, nanochat; see `scaling models --help`\n")


def test_scaling_models_lists_a_repeated_family_once(capsys):
    assert main(["models", "--family", "llama2", "--family", "llama2", "--json"]) == 0
    assert [r["size"] for r in json.loads(capsys.readouterr().out)] == list(SIZES)  # (it listed each twice)


@pytest.mark.parametrize("cap", [None, 15.0])
def test_cpu_head_loss_matches_autograds_composition(cap, monkeypatch):
    """lm_head_loss's CPU function (chunks of tokens; never the whole logits) gives the loss and the
    gradients of (head, soft-cap, log-softmax, NLL) composed by autograd, to float rounding: three
    chunks and a remainder, targets with a repeated token and the extremes; evaluation (no grad)
    and a frozen head compute only what is asked."""
    import torch.nn.functional as F

    from models.layers import lm_head_loss, lm_loss

    monkeypatch.setattr("models.layers._CHUNK_LOGITS", 16 * 257)  # 16 tokens a chunk
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 28, 24, generator=g).requires_grad_()  # 56 tokens: 3 chunks of 16, then 8
    weight = (torch.randn(257, 24, generator=g) * 4).requires_grad_()
    targets = torch.randint(0, 257, (2, 28), generator=g)
    targets[0, :3] = torch.tensor([0, 256, 256])
    loss = lm_head_loss(h, weight, targets, cap)
    (2.5 * loss).backward()
    ref_h, ref_w = h.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref = lm_loss(F.linear(ref_h, ref_w), targets, cap)
    (2.5 * ref).backward()
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(h.grad, ref_h.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(weight.grad, ref_w.grad, rtol=1e-5, atol=1e-7)
    with torch.no_grad():  # evaluation: the forward alone
        torch.testing.assert_close(lm_head_loss(h, weight, targets, cap), ref, rtol=1e-6, atol=0)
    frozen = lm_head_loss(h, weight.detach(), targets, cap)
    h.grad = None
    (2.5 * frozen).backward()
    torch.testing.assert_close(h.grad, ref_h.grad, rtol=1e-5, atol=1e-7)


def _reference_logits(model: nn.Module, family: str, idx: torch.Tensor) -> torch.Tensor:
    """The documented forward pass written out from the papers in float64 (no code shared with
    models/): RMSNorm x/√(mean x² + eps) (Llama-2: learned gain, eps 1e-5; nanochat: no gain, eps
    of the dtype, also after the embedding), RoPE θ = 10000 on (i, i + D/2) pairs rotated as nanochat
    does, nanochat's QK-norm after RoPE, masked softmax attention, SwiGLU or ReLU², soft-cap 15."""
    import torch.nn.functional as F

    w = {k: v.detach().double() for k, v in model.state_dict().items()}
    V, C = w["embed.weight"].shape
    H = C // 64
    B, T = idx.shape
    ang = torch.outer(torch.arange(T, dtype=torch.float64),
                      10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    cos, sin = ang.cos(), ang.sin()

    def rms(x, gain=None, eps=None):
        y = x / torch.sqrt(x.square().mean(-1, keepdim=True) + (eps or torch.finfo(x.dtype).eps))
        return y if gain is None else y * gain

    def rope(x):  # (B, H, T, 64)
        x1, x2 = x[..., :32], x[..., 32:]
        return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], -1)

    def attention(x, p, qk_norm):
        q, k, v = ((x @ w[f"{p}attn.{n}.weight"].T).view(B, T, H, 64).transpose(1, 2) for n in "qkv")
        q, k = rope(q), rope(k)
        if qk_norm:
            q, k = rms(q), rms(k)
        s = (q @ k.transpose(-1, -2) / 8.0).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ w[f"{p}attn.o.weight"].T

    x = w["embed.weight"][idx]
    depth = len(model.blocks)
    if family == "llama2":
        for i in range(depth):
            p = f"blocks.{i}."
            x = x + attention(rms(x, w[p + "attn_norm.weight"], 1e-5), p, False)
            h = rms(x, w[p + "mlp_norm.weight"], 1e-5)
            swiglu = F.silu(h @ w[p + "mlp.gate.weight"].T) * (h @ w[p + "mlp.up.weight"].T)
            x = x + swiglu @ w[p + "mlp.down.weight"].T
        return rms(x, w["norm.weight"], 1e-5) @ w["lm_head.weight"].T
    x = rms(x)
    for i in range(depth):
        p = f"blocks.{i}."
        x = x + attention(rms(x), p, True)
        x = x + F.relu(rms(x) @ w[p + "mlp.up.weight"].T).square() @ w[p + "mlp.down.weight"].T
    return 15.0 * torch.tanh(rms(x) @ w["lm_head.weight"].T / 15.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_matches_an_independent_reference(family):
    """Logits of a micro model (float32, CPU kernels) and of its float64 copy agree with the forward
    pass written out in float64 from the papers; every weight random (nanochat's zero-initialised
    output projections and head too, gains away from 1), sequences shorter than the RoPE tables."""
    torch.manual_seed(0)
    model = build_model(family, "1M", vocab_size=256, seq_len=48)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))
    idx = torch.randint(0, 256, (2, 40))
    ref = _reference_logits(model, family, idx)
    torch.testing.assert_close(model(idx).double(), ref, rtol=0, atol=1e-4)  # float32 (logits up to ~10)
    torch.testing.assert_close(model.double()(idx).double(), ref, rtol=0, atol=1e-4)  # (RoPE tables in float32)


@pytest.mark.parametrize("family", FAMILIES)
def test_init_is_the_documented_one(family):
    """llama2: N(0, 0.02), output projections 0.02/√(2·depth), gains 1; nanochat: embedding N(0, 1),
    block linears 1/√fan_in · min(1, √(fan_out/fan_in)), output projections and head zero."""
    torch.manual_seed(0)
    model = build_model(family, "4M", vocab_size=4096, seq_len=32)
    depth = len(model.blocks)
    for name, p in model.named_parameters():
        if "norm" in name:
            expected = None
        elif name.endswith(("attn.o.weight", "mlp.down.weight")):
            expected = 0.02 / math.sqrt(2 * depth) if family == "llama2" else 0.0
        elif family == "llama2":
            expected = 0.02
        elif name == "embed.weight":
            expected = 1.0
        elif name == "lm_head.weight":
            expected = 0.0
        else:
            fan_out, fan_in = p.shape
            expected = min(1.0, math.sqrt(fan_out / fan_in)) / math.sqrt(fan_in)
        if expected is None:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert p.std().item() == pytest.approx(expected, rel=0.05, abs=1e-12), name
            assert abs(p.mean().item()) < 0.05 * expected + 1e-12, name
