"""Optimizers: Muon for the block matrices, AdamW for the rest, at the LR a schedule gives (`apply_schedule`).

Where each number comes from:
- Muon (Jordan et al. 2024) on every 2-D weight inside ``model.blocks``: lr 0.02, momentum 0.95,
  Nesterov, 5 Newton–Schulz steps, lr × √max(1, rows/cols), no weight decay — nanochat's
  ``setup_optimizers`` (matrix_lr=0.02, weight_decay=0.0), which uses Keller Jordan's Muon.
  `Muon` below is ``torch.optim.Muon(adjust_lr_fn="original")`` step for step, except that the
  Newton–Schulz iteration runs in float32 off CUDA: torch's casts to bfloat16, which CPUs without
  native BF16 matmul run ~100× slower (tests/test_optim.py checks the two agree).
- AdamW, betas (0.8, 0.95), eps 1e-10, no weight decay (nanochat): token embedding lr 0.2, LM head
  lr 0.004 (nanochat), norm gains and other scalars lr 0.04 (modded-nanogpt's scalar lr);
  all three × (width / 768)^-0.5, nanochat's 1/√d_model transfer from its d=768 tuning.
- The batch-size rule and the LR schedules (`apply_schedule` sets the multiplier they give) are
  arithmetic, in the torch-free scaling.hyperparams.
"""

from __future__ import annotations

import torch
import torch.nn as nn

MUON_LR = 0.02
EMBED_LR, HEAD_LR, SCALAR_LR = 0.2, 0.004, 0.04
ADAM_BETAS, ADAM_EPS = (0.8, 0.95), 1e-10
MUON_MOMENTUM = 0.95


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton–Schulz, for 2-D parameters (torch.optim.Muon's algorithm)."""

    NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic iteration

    def __init__(self, params, lr: float = MUON_LR, momentum: float = MUON_MOMENTUM, nesterov: bool = True,
                 ns_steps: int = 5, eps: float = 1e-7):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, eps=eps))
        for g in self.param_groups:
            if any(p.ndim != 2 for p in g["params"]):
                raise ValueError("Muon optimizes 2-D matrices only")

    @staticmethod
    def orthogonalize(g: torch.Tensor, steps: int, eps: float) -> torch.Tensor:
        """The Newton–Schulz orthogonalization of a matrix, or of a stack of equal-shape matrices
        (n, rows, cols) at once: one batched product per stage instead of one per matrix."""
        a, b, c = Muon.NS_COEFFICIENTS
        x = g.to(torch.bfloat16 if g.is_cuda else torch.float32)
        if x.ndim == 2:
            return Muon.orthogonalize(x[None], steps, eps)[0]
        tall = x.size(-2) > x.size(-1)
        if tall:
            x = x.mT
        x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
        for _ in range(steps):
            gram = x @ x.mT
            x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        return x.mT if tall else x

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            shapes: dict[torch.Size, list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    shapes.setdefault(p.shape, []).append(p)
            for shape, params in shapes.items():  # equal shapes: one batched Newton–Schulz
                grads = [p.grad for p in params]
                for p in params:
                    if "momentum_buffer" not in self.state[p]:  # (setdefault would zero a new buffer every step)
                        self.state[p]["momentum_buffer"] = torch.zeros_like(p.grad)
                bufs = [self.state[p]["momentum_buffer"] for p in params]
                torch._foreach_lerp_(bufs, grads, 1 - group["momentum"])
                updates = torch._foreach_lerp(grads, bufs, group["momentum"]) if group["nesterov"] else bufs
                ortho = self.orthogonalize(torch.stack(updates), group["ns_steps"], group["eps"])
                scale = max(1.0, shape[0] / shape[1]) ** 0.5  # torch's adjust_lr_fn="original"
                torch._foreach_add_(params, list(ortho.to(params[0].dtype).unbind(0)), alpha=-group["lr"] * scale)


def build_optimizers(model: nn.Module, width: int, lr_mult: float = 1.0) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """(Muon over the block matrices, AdamW over embedding, head, norms and scalars).

    Every param group gets ``base_lr``; `apply_schedule` sets ``lr = base_lr × multiplier``."""
    matrices = [p for p in model.blocks.parameters() if p.ndim == 2]
    head = list(model.lm_head.parameters())
    embed = list(model.embed.parameters())
    taken = {id(p) for p in matrices + head + embed}
    scalars = [p for p in model.parameters() if id(p) not in taken]
    adam_scale = (width / 768) ** -0.5 * lr_mult
    muon = Muon(matrices, lr=MUON_LR * lr_mult)
    groups = [dict(params=embed, lr=EMBED_LR * adam_scale), dict(params=head, lr=HEAD_LR * adam_scale)]
    if scalars:
        groups.append(dict(params=scalars, lr=SCALAR_LR * adam_scale))
    adamw = torch.optim.AdamW(groups, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0.0)
    for opt in (muon, adamw):
        for g in opt.param_groups:
            g["base_lr"] = g["lr"]
    return muon, adamw


def apply_schedule(optimizers: tuple[torch.optim.Optimizer, ...], multiplier: float) -> None:
    for opt in optimizers:
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * multiplier
