"""Muon + AdamW parameter groups, schedules, the batch-size rule."""

import pytest
import torch

from models import build_model
from scaling import hyperparams, optim


@pytest.mark.parametrize("family", ["llama2", "nanochat"])
def test_every_parameter_in_exactly_one_group(family):
    model = build_model(family, "0.5M", vocab_size=256, seq_len=16)
    muon, adamw = optim.build_optimizers(model, width=64)
    muon_params = [p for g in muon.param_groups for p in g["params"]]
    adam_params = [p for g in adamw.param_groups for p in g["params"]]
    ids = [id(p) for p in muon_params + adam_params]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    block_matrices = {id(p) for p in model.blocks.parameters() if p.ndim == 2}
    assert {id(p) for p in muon_params} == block_matrices
    assert id(model.embed.weight) in ids and id(model.lm_head.weight) not in {id(p) for p in muon_params}
    # AdamW lrs follow nanochat's 1/sqrt(width/768) transfer
    scale = (64 / 768) ** -0.5
    assert adamw.param_groups[0]["lr"] == pytest.approx(optim.EMBED_LR * scale)
    assert adamw.param_groups[1]["lr"] == pytest.approx(optim.HEAD_LR * scale)


def test_muon_matches_torch_muon():
    """Our Muon (float32 Newton–Schulz on CPU) takes torch.optim.Muon's steps (bfloat16 Newton–Schulz)."""
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(96, 32)), torch.nn.Parameter(torch.randn(32, 64))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    a = optim.Muon(ours, lr=0.02)
    b = torch.optim.Muon(ref, lr=0.02, weight_decay=0.0, adjust_lr_fn="original")
    start = [p.detach().clone() for p in ours]
    for _ in range(3):
        for p, q in zip(ours, ref):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        a.step()
        b.step()
    for p, q, p0 in zip(ours, ref, start):
        step_ours, step_ref = p.detach() - p0, q.detach() - p0
        assert (step_ours - step_ref).norm() < 0.03 * step_ref.norm()
    with pytest.raises(ValueError):
        optim.Muon([torch.nn.Parameter(torch.zeros(3))])


def test_equal_shapes_orthogonalize_as_one_batch():
    """Muon stacks equal-shape matrices into one batched Newton–Schulz: the same result per matrix."""
    torch.manual_seed(0)
    stack = torch.randn(3, 48, 16)
    batched = optim.Muon.orthogonalize(stack, 5, 1e-7)
    for g, o in zip(stack, batched):
        assert torch.allclose(optim.Muon.orthogonalize(g, 5, 1e-7), o, atol=1e-5)
    assert batched.shape == stack.shape


def test_a_few_steps_fit_a_batch():
    torch.manual_seed(0)
    model = build_model("nanochat", "0.5M", vocab_size=128, seq_len=32)
    opts = optim.build_optimizers(model, width=64)
    x = torch.randint(0, 128, (4, 32))
    first = model(x, x).item()
    for _ in range(10):
        loss = model(x, x)
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
    assert model(x, x).item() < first - 1.0


def test_wsd_and_cosine_schedules():
    total = 100
    wsd = [hyperparams.lr_multiplier(s, total, "wsd", warmup=0.02, decay=0.2, final=0.1) for s in range(total)]
    assert wsd[0] == pytest.approx(0.5) and wsd[1] == 1.0  # linear warmup over 2 steps
    assert all(m == 1.0 for m in wsd[2:81])  # stable
    assert all(a > b for a, b in zip(wsd[80:], wsd[81:]))  # linear decay ...
    assert wsd[-1] == pytest.approx(0.1 + 0.9 / 20)  # ... towards `final`
    cos = [hyperparams.lr_multiplier(s, total, "cosine", warmup=0.0, final=0.0) for s in range(total)]
    assert cos[0] == 1.0 and cos[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(cos, cos[1:]))
    with pytest.raises(ValueError):
        hyperparams.lr_multiplier(0, 10, "linear")



@pytest.mark.parametrize("steps, warmup, decay, final", [(10, 0.0, 0.2, 0.0), (100, 0.05, 0.2, 0.1),
                                                         (7, 0.0, 0.2, 0.0), (37, 0.1, 0.3, 0.05)])
def test_schedules_are_the_formulas_in_docs_training_md(steps, warmup, decay, final):
    """Every step's multiplier, written out from docs/training.md: warmup (s + 1)/w for s < w, w =
    round(warmup·steps); wsd then 1, and final + (1 − final)·(steps − s)/n over the last n =
    round(decay·steps) steps; cosine final + (1 − final)·½(1 + cos(π(s − w)/(steps − 1 − w)))."""
    import math

    w, n = round(warmup * steps), round(decay * steps)
    for s in range(steps):
        if s < w:
            wsd = cosine = (s + 1) / w
        else:
            wsd = final + (1 - final) * (steps - s) / n if steps - s <= n else 1.0
            cosine = final + (1 - final) * 0.5 * (1 + math.cos(math.pi * (s - w) / (steps - 1 - w)))
        assert hyperparams.lr_multiplier(s, steps, "wsd", warmup, decay, final) == pytest.approx(wsd, abs=1e-12)
        assert hyperparams.lr_multiplier(s, steps, "cosine", warmup, decay, final) == pytest.approx(cosine, abs=1e-12)
    assert hyperparams.lr_multiplier(steps - 1, steps, "cosine", warmup, decay, final) == pytest.approx(final, abs=1e-12)

def test_batch_size_rule_grows_with_compute():
    sizes = [hyperparams.batch_sequences(n, 20 * n, 1024) for n in (10e6, 40e6, 160e6, 324e6)]
    assert all(b & (b - 1) == 0 for b in sizes)  # powers of two
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    # DeepSeek LLM eq. 1: about 0.33M tokens at C = 3e18
    assert hyperparams.batch_tokens(160e6, 3.125e9) == pytest.approx(0.292 * 3e18**0.3271)


def test_the_documented_deepseek_batch_ratios_are_their_own_m_s():
    """docs/training.md compares the batch rule's C = 6·N·D with DeepSeek's own C = M·D, M = 72·n_layer·d² +
    12·n_layer·d·l_seq (arXiv 2401.02954, eq. 2; their Table 3's 6N₁/M = 0.43 at 8 x 512, l_seq 4096): 6·N plus
    the attention term of flops_per_token_exact, the head left out (vocabulary 0). The docs gave the term as
    6·depth·width·seq_len, half of theirs, and so B ratios of 1.07, 1.04 and 1.03 for 1.13, 1.08 and 1.05."""
    import re
    from pathlib import Path

    from models import FAMILIES, model_size

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    quoted = re.search(r"their rule would give a B ([\d.]+)× this one's at 10M, ([\d.]+)× at 40M and ([\d.]+)× at "
                       r"160M", text)
    assert quoted, "docs/training.md's comparison with DeepSeek's own batch rule"
    for size, ratio in zip(("10M", "40M", "160M"), quoted.groups()):
        for family in FAMILIES:
            s = model_size(family, size)
            deepseek_m = s.flops_per_token_exact(0, s.seq_len)
            tokens = 20 * s.n_params
            assert f"{hyperparams.batch_tokens(deepseek_m / 6, tokens) / hyperparams.batch_tokens(s.n_params, tokens):.2f}" \
                == ratio, (family, size)
    assert "M its non-embedding FLOPs per token with the attention scores, 6·N + 12·depth·width·seq_len here" in text
