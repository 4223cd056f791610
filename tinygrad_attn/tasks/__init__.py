"""The toy sequence tasks, by name: copy, reverse, sort, add, recall, induction, translate."""

from .base import Batch, Defaults, PromptAnswerTask, Task
from .sequences import Addition, Copy, Induction, Recall, Reverse, Sort
from .translation import Translation, tokenize

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (Copy, Reverse, Sort, Addition, Recall, Induction, Translation)
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name]()


__all__ = ["TASKS", "Batch", "Defaults", "PromptAnswerTask", "Task", "get_task", "tokenize"]
