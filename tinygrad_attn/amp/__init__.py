"""`torch.amp` (and `torch.cuda.amp`) on a CPU framework that computes in float32 or float64: `autocast` runs
what it wraps unchanged (documented: there is no mixed precision here), and `GradScaler` is the no-op a
CPU-only PyTorch program gets with `enabled=False`: scale() returns the loss, step() steps the optimizer."""

from __future__ import annotations

from typing import Any


class autocast:  # noqa: N801  (PyTorch's name)
    """A context manager and decorator that changes nothing: ops keep their inputs' dtypes (float32 here)."""

    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True, cache_enabled: Any = None):
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: Any) -> Any:
        return fn


class GradScaler:
    """Loss scaling for float16 training, not needed in float32: scale(loss) is loss, step(optimizer) steps."""

    def __init__(self, device: str = "cpu", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self.enabled = enabled

    def scale(self, outputs: Any) -> Any:
        return outputs

    def unscale_(self, optimizer: Any) -> None:
        return None

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


__all__ = ["GradScaler", "autocast"]
