"""The one training loop the kit's trained models share (the small draft, the EAGLE-3 head, the Medusa
heads, the DFlash draft): AdamW without weight decay, its rate decaying linearly to zero, each step on
random rows drawn from one seeded generator. A fixed step count, not a time budget, keeps every build
reproducible."""

from __future__ import annotations

from collections.abc import Callable

import torch


def fit(params: list[torch.nn.Parameter], cfg: dict, num_rows: int,
        loss_on: Callable[[torch.Tensor, torch.Generator], torch.Tensor], clip_norm: float | None = None) -> None:
    """``cfg["steps"]`` steps at ``cfg["lr"]``, each on ``cfg["batch"]`` rows of ``num_rows`` drawn from a
    generator seeded with ``cfg["seed"]``: ``loss_on(rows, generator)`` (it may draw more from it)."""
    opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / cfg["steps"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    for _ in range(cfg["steps"]):
        rows = torch.randint(num_rows, (cfg["batch"],), generator=gen)
        loss = loss_on(rows, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        opt.step()
        sched.step()
