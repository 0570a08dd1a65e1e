"""The bare module under the wrappers a run puts around it.

The training step calls ``torch.compile(DistributedDataParallel(model))`` (either wrapper
optional). Neither wrapper forwards the model's own methods and attributes reliably: DDP
forwards none (``ddp.encode`` is an ``AttributeError``), and a compiled module's attributes are
the wrapper's first. Whatever needs the model itself (decoding, ``max_positions``, the
diagnostics) takes ``unwrap(model)``; the wrappers share its parameters and buffers.
"""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel


def unwrap(model: nn.Module) -> nn.Module:
    """``model`` without its compile (``_orig_mod``) and DDP (``.module``) wrappers, in any order."""
    while True:
        if isinstance(model, DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model
