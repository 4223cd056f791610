"""`torch.distributed` on a single CPU process: the names programs test before they start a process group,
so they take their single-process branch (PyTorch on a machine without a distributed backend says the same)."""

from __future__ import annotations


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def init_process_group(*args: object, **kwargs: object) -> None:
    raise RuntimeError("torch.distributed: there is no distributed backend here (tinygrad_attn runs in one process); "
                       "run the program's single-process branch (is_available() is False)")


__all__ = ["init_process_group", "is_available", "is_initialized"]
