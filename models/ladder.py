"""The model size ladder: named sizes from one rule and one table.

Rule (both families):
- head dimension 64, so heads = width / 64;
- width from the table SIZES; depth the table's too, and at that width the one whose nanochat N is
  nearest the name. The widths aim at nanochat's width = 64 · depth, which only 10M meets exactly
  (width/depth 57.6–85.3 on the paper ladder; 80M is 11 x 768, nearer 80M than 12 x 768 which
  would keep it: the shapes stay, recorded runs used them; docs/models.md);
- every in/out feature of a block linear is a multiple of 128 for sizes ≥ 10M (Hadamard groups of up
  to 128 and 16/32-element FP4 blocks along K tile it exactly) and a multiple of 32 for the micro sizes;
- MLP hidden width per family: nanochat 4·width (ReLU²); Llama-2 SwiGLU by Llama-2's own rule for
  sizes ≥ 10M, int(8/3·width) rounded up to a multiple of 256 (meta-llama/llama model.py,
  `multiple_of = 256`), and 8/3·width rounded to the nearest multiple of 32 for the micro sizes.

The size's name is its non-embedding parameter count N (everything except the token embedding and
the LM head), within ±10% for both families (tests/test_models.py checks every entry).

FLOPs per token (training, forward + backward = 3 × forward, Kaplan et al. 2020 §2.1):
- ``flops_per_token``  = 6·N, the C = 6ND of the fits;
- ``flops_per_token_exact`` = 6·(N + V·width) + 12·depth·width·T: the LM head's matmul plus the
  attention scores and the attention-weighted sum (2·T·width each per layer forward; Chinchilla
  App. F, PaLM App. B, nanochat's estimate_flops). Embedding lookups, softmax and the norms' arithmetic
  are not counted; llama2's RMSNorm gains are in N, so 6·N counts 6 FLOPs for each of them as if they
  were matmul weights (6·(2·depth + 1)·width a token: at most 0.13% of the exact count, 0.5M at vocab 4096).
  The full T x T scores are counted, as PaLM and nanochat count them, not the causal half that the
  fused attention kernels compute (docs/models.md: MFU by executed FLOPs is ~6% lower at 160M).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaling.errors import UserError, did_you_mean

FAMILIES = ("llama2", "nanochat")
HEAD_DIM = 64

# name -> (depth, width). Micro sizes are for CPU tests and the demo; the rest is the paper ladder.
SIZES: dict[str, tuple[int, int]] = {
    "0.5M": (10, 64),
    "1M": (5, 128),
    "2M": (10, 128),
    "4M": (5, 256),
    "8M": (7, 320),
    "10M": (6, 384),
    "20M": (6, 512),
    "40M": (8, 640),
    "80M": (11, 768),
    "160M": (13, 1024),
    "324M": (20, 1152),
}
MICRO = ("0.5M", "1M", "2M", "4M", "8M")


def swiglu_hidden(width: int, micro: bool) -> int:
    """Llama-2's SwiGLU hidden width: int(2/3 · 4·width) rounded up to a multiple of 256, as its code
    does; for the micro sizes 8/3·width to the nearest multiple of 32 (256 would be most of their MLP).
    (A multiple of 256 also tiles the H200's 256-wide GEMM tiles: with 2688 = 10.5 x 256 at 160M,
    llama2's GEMMs ran ~6% below nanochat's, `scaling bench profile`.)"""
    if micro:
        return max(32, round(8 * width / 3 / 32) * 32)
    return -(-int(2 * 4 * width / 3) // 256) * 256


@dataclass(frozen=True)
class ModelSize:
    family: str
    name: str
    depth: int
    width: int
    heads: int
    mlp: int  # MLP hidden width

    @property
    def block_linears(self) -> tuple[tuple[int, int], ...]:
        """(fan_in, fan_out) of each linear layer of a block, the GEMMs a recipe quantizes: q, k, v, o,
        then the MLP's up (Llama's gate and up) and down."""
        d, h = self.width, self.mlp
        return ((d, d),) * 4 + ((d, h),) * (2 if self.family == "llama2" else 1) + ((h, d),)

    @property
    def n_params(self) -> int:
        """Non-embedding parameters N: blocks (+ Llama's final norm), no embedding, no head."""
        block = sum(fan_in * fan_out for fan_in, fan_out in self.block_linears)
        if self.family == "nanochat":  # norms have no parameters
            return self.depth * block
        return self.depth * (block + 2 * self.width) + self.width  # + two norm weights a block, final norm

    @property
    def seq_len(self) -> int:
        """The context length a run of this size trains at unless told: 256 for the micro sizes (CPU),
        1024 for the paper ladder."""
        return 256 if self.name in MICRO else 1024

    def n_params_total(self, vocab_size: int) -> int:
        """All parameters: N + token embedding + (untied) LM head."""
        return self.n_params + 2 * vocab_size * self.width

    def flops_per_token(self) -> int:
        """6·N: training FLOPs per token as in C = 6ND."""
        return 6 * self.n_params

    def flops_per_token_exact(self, vocab_size: int, seq_len: int) -> int:
        """6·(N + V·width) + 12·depth·width·seq_len: adds the LM head and attention (module docstring)."""
        return 6 * (self.n_params + vocab_size * self.width) + 12 * self.depth * self.width * seq_len


def _size_meant(name: str) -> str:
    """" (did you mean 160M?)" for a size's name in lower case or without its M (160m, 160), else "".
    (Spelling distance would offer 324M for 3M.)"""
    meant = name.strip().upper().removesuffix("M") + "M"
    return f" (did you mean {meant}?)" if meant in SIZES else ""


def check_family(family: str) -> str:
    """`family`, if it is one of FAMILIES; else a UserError naming the near miss."""
    if family not in FAMILIES:
        raise UserError(f"unknown model family {family!r}{did_you_mean(family, FAMILIES)}; "
                        f"choose one of {', '.join(FAMILIES)}")
    return family


def model_size(family: str, name: str) -> ModelSize:
    check_family(family)
    if name not in SIZES:
        raise UserError(f"unknown model size {name!r}{_size_meant(name)}; choose one of {', '.join(SIZES)} "
                        "(see `scaling models`)")
    depth, width = SIZES[name]
    mlp = 4 * width if family == "nanochat" else swiglu_hidden(width, name in MICRO)
    return ModelSize(family, name, depth, width, width // HEAD_DIM, mlp)


def ladder(family: str) -> list[ModelSize]:
    """Every named size of a family, smallest first."""
    return [model_size(family, name) for name in SIZES]
