"""Mixed precision in every scheme (``training.options.precision``).

- ``fp32``: as written.
- ``bf16``: the training step and evaluation run under ``torch.autocast`` with
  bfloat16; weights, gradients and optimizer state stay fp32, so nothing else changes.
- ``fp16``: autocast with float16 and a ``GradScaler``: the loss is scaled before
  backward (:func:`backward`, which the default ``Task.train_step`` calls; a task's own
  ``train_step`` calls ``self.backward(loss)`` instead of ``loss.backward()``), the
  optimizers unscale and skip a step whose gradients overflowed, and the scale is
  updated once per training step. Ranks whose gradients are averaged (allreduce, DASO's
  node groups, Horovod) see the same overflow and skip together.

On GPUs the gradient allreduce of DDP travels in bf16/fp16 too (:meth:`Precision.compress`).

The same code runs on CPUs (autocast on ``cpu``) and on CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

_active: Precision | None = None


def low_precision_hook(dtype: torch.dtype) -> Any:
    """A DDP comm hook that averages each gradient bucket in ``dtype`` (bf16 or fp16):
    divided by the group's size, cast, allreduced, and copied back into the fp32
    bucket. torch's ``bf16_compress_hook`` does the same but refuses anything but NCCL;
    gloo has had a bf16 allreduce since torch 2.x, so this one runs on CPUs as well."""
    import torch.distributed as dist

    # Unannotated: DDP refuses a hook whose annotations are not its own classes (and
    # this module's annotations are strings).
    def hook(group, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer()
        low = buffer.to(dtype).div_(dist.get_world_size(group))
        future = dist.all_reduce(low, group=group, async_op=True).get_future()

        def back(done: Any) -> torch.Tensor:
            out: torch.Tensor = bucket.buffer()
            out.copy_(done.value()[0])
            return out

        return future.then(back)

    return hook


class Precision:
    def __init__(self, name: str, device: torch.device) -> None:
        if name not in DTYPES:
            raise ValueError(f"training.options.precision: must be one of {', '.join(DTYPES)}, got {name!r}")
        self.name = name
        self.device = device
        self.dtype = DTYPES[name]
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        self.scaled = False  # a loss was scaled since the last update

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The training step or evaluation of this rank: autocast, and :func:`backward`
        scaling the loss."""
        global _active
        previous, _active = _active, self
        try:
            if self.dtype is None:
                yield
            else:
                with torch.autocast(self.device.type, dtype=self.dtype):
                    yield
        finally:
            _active = previous

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is None:
            loss.backward()  # type: ignore[no-untyped-call]
            return
        self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        self.scaled = True

    def compress(self, models: dict[str, Any]) -> None:
        """On GPUs, DDP's gradient allreduce in the training precision (allreduce, DASO's
        node groups): torch's bf16/fp16 compression hooks, half the bytes on the wire;
        the average comes back as fp32 before any optimizer sees it, and under fp16 an
        overflow arrives as inf, which the scaler skips like any other. Only NCCL has a
        bf16 allreduce, so CPUs (gloo) exchange fp32. Parameter-server exchanges stay fp32
        everywhere: they carry weights and elastic differences, whose small updates
        bf16's 8-bit mantissa would round away."""
        if self.dtype is None or self.device.type != "cuda":
            return
        from torch.nn.parallel import DistributedDataParallel

        hook = low_precision_hook(self.dtype)
        for model in models.values():
            # A scheme's own hook (allreduce's compression) stays.
            if isinstance(model, DistributedDataParallel) and not getattr(model, "_hpcopt_comm_hook", None):
                model.register_comm_hook(model.process_group, hook)

    def wrap(self, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, torch.optim.Optimizer]:
        """Under fp16, optimizers whose ``step`` goes through the scaler."""
        if self.scaler is None:
            return optimizers
        return {name: ScaledStep(opt, self) for name, opt in optimizers.items()}

    def end_step(self) -> None:
        """After one training step (all its optimizers): the scale follows overflows."""
        if self.scaler is not None and self.scaled:
            self.scaler.update()
            self.scaled = False

    def state(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def backward(loss: torch.Tensor) -> None:
    """``loss.backward()``, scaled when the fold trains in fp16 (``Task.backward``)."""
    if _active is None:
        loss.backward()  # type: ignore[no-untyped-call]
    else:
        _active.backward(loss)


class ScaledStep(torch.optim.Optimizer):
    """An optimizer whose ``step`` unscales the gradients and skips on overflow (the
    scaler's ``step``); everything else is the wrapped optimizer's."""

    def __init__(self, inner: torch.optim.Optimizer, precision: Precision) -> None:
        # No Optimizer.__init__: param_groups, state and the rest are the inner optimizer's.
        self.__dict__["_inner"] = inner
        self.__dict__["_precision"] = precision

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return dict(self._inner.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._inner.load_state_dict(state_dict)

    def step(self, closure: Any = None) -> Any:
        precision, inner = self._precision, self._inner
        scaler = precision.scaler
        assert scaler is not None
        if not precision.scaled:
            raise RuntimeError(
                "training.options.precision is fp16 but this step's loss was not scaled: a Task.train_step of "
                "your own must call self.backward(loss) instead of loss.backward()"
            )
        if hasattr(inner, "synchronize") and hasattr(inner, "skip_synchronize"):  # Horovod
            inner.synchronize()
            scaler.unscale_(inner)
            with inner.skip_synchronize():
                return scaler.step(inner)
        return scaler.step(inner)

    def __repr__(self) -> str:
        return f"ScaledStep({self._inner!r})"
