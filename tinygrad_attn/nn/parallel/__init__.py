"""`torch.nn.parallel` on a CPU-only machine, as PyTorch behaves there: `DataParallel` with no GPU runs the
module itself (its `.module` is the wrapped one, as programs unwrap it), and `DistributedDataParallel`
needs a process group, which `torch.distributed` never has here."""

from __future__ import annotations

from typing import Any

from ..module import Module


class DataParallel(Module):
    """The module, called as it is: PyTorch's DataParallel does the same when no GPU is available."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None, dim: int = 0):
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: module must be a Module, got {type(module).__name__}")
        if device_ids:
            raise RuntimeError("DataParallel: device_ids name GPUs, and this machine runs on the CPU only")
        self.module, self.device_ids, self.dim = module, [], dim

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class DistributedDataParallel(Module):
    """Refused as PyTorch refuses it without `init_process_group` (which cannot run here)."""

    def __init__(self, module: Module, *args: Any, **kwargs: Any):
        raise RuntimeError("DistributedDataParallel: Default process group has not been initialized, please make "
                           "sure to call init_process_group (torch.distributed is not available here: one process)")


__all__ = ["DataParallel", "DistributedDataParallel"]
