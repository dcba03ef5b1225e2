"""memplan from Python: per-GPU memory, communication and step time of DDP, ZeRO-1/2/3 and FSDP,
before you run.

The planner is compiled into this package (no subprocess, no GPU library): every call runs the
command line's own parsing, validation and JSON writer, so ``memplan.plan("gpt2-xl", gpus=8)``
returns the document ``memplan plan --model gpt2-xl --gpus 8 --json`` prints, and raises
:class:`PlanError` with the line the command line would print.

    >>> import memplan
    >>> p = memplan.plan("gpt2-xl", gpus=8, act_ckpt="full")
    >>> p["recommendation"]["strategy"]
    >>> print(p)                      # the command line's table
    >>> memplan.auto("llama2-7b", gpus=8, gpu="h100-80gb")["auto"]["explain"]
    >>> memplan.check(trainer)        # before trainer.train(): raises when the peak does not fit
"""
from ._api import ConfigLike, ModelLike, Plan, PlanError, PlanWarning, __version__, auto, gpus, models, plan
from ._check import OutOfMemoryPlanError, check

__all__ = ["plan", "auto", "models", "gpus", "check", "Plan", "PlanError", "PlanWarning", "OutOfMemoryPlanError",
           "ModelLike", "ConfigLike", "__version__"]
