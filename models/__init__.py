"""Model families (Llama-2, nanochat) and their size ladder (`models.ladder`: torch-free, so a
laptop can count parameters and FLOPs; the modules import torch when a model is built).

``build_model("nanochat", "4M", vocab_size=8192, seq_len=256)`` returns a module with
``blocks`` (nn.ModuleList of transformer blocks whose linears are plain nn.Linear),
``lm_head`` (nn.Linear), ``forward(idx, targets=None)`` -> logits, or the mean CE loss, and
``head(x, targets=None)``: everything after the blocks (``scaling.compiling`` compiles it as a region).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from models.ladder import FAMILIES, SIZES, ModelSize, ladder, model_size
from scaling.errors import UserError


if TYPE_CHECKING:
    import torch.nn as nn


def build_model(family: str, size: str | ModelSize, vocab_size: int = 8192, seq_len: int = 256) -> nn.Module:
    """Build a freshly initialised model (seed torch's RNG first for a reproducible init)."""
    s = size if isinstance(size, ModelSize) else model_size(family, size)
    if s.family != family:
        model_size(family, s.name)  # an unknown family: the same message as for a name
        raise UserError(f"build_model got a {s.family} size for family {family!r}; pass model_size({family!r}, "
                        f"{s.name!r}) or the size's name")
    if s.family == "nanochat":
        from models.nanochat import Nanochat as cls
    else:
        from models.llama import Llama as cls
    return cls(vocab_size, seq_len, s.depth, s.width, s.heads, s.mlp)


__all__ = ["FAMILIES", "SIZES", "ModelSize", "build_model", "ladder", "model_size"]
