"""A transformers TrainerCallback that runs :func:`memplan.check` at ``on_train_begin``.

    from memplan.integrations.transformers import MemplanCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[MemplanCallback(seq=1024)])
    trainer.train()   # raises memplan.OutOfMemoryPlanError before the first step if the peak does not fit

``on_train_begin`` runs after the Trainer has built its arguments, model (PEFT adapters and
quantization included) and DeepSpeed/FSDP settings, and before the first batch is drawn.
"""
from __future__ import annotations

from typing import Any, Optional

from transformers import TrainerCallback

from .._api import Plan
from .._check import check


class MemplanCallback(TrainerCallback):
    """Plans the Trainer's setup when training begins; raises :class:`memplan.OutOfMemoryPlanError`
    (or warns, ``on_fail="warn"``) when the planned peak does not fit.

    Args:
        model: what :func:`memplan.plan` takes, instead of the Trainer's model (its config).
        on_fail: ``"raise"`` or ``"warn"``.
        **options: plan options, e.g. ``seq=2048``, ``gpu_mem="24GiB"`` (see :func:`memplan.check`).

    The plan is kept as ``callback.plan``.
    """

    def __init__(self, model: Any = None, on_fail: str = "raise", **options: Any):
        self.model = model
        self.on_fail = on_fail
        self.options = options
        self.plan: Optional[Plan] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.plan = check(args, self.model if self.model is not None else model, on_fail=self.on_fail, **self.options)
