"""The toy sequence tasks, by name: copy, reverse, sort, add, recall, induction, translate."""

from .base import Batch, Defaults, PromptAnswerTask, Task
from .sequences import Addition, Copy, Induction, Recall, Reverse, Sort
from .text import TextTask
from .translation import Translation, tokenize

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (Copy, Reverse, Sort, Addition, Recall, Induction, Translation, TextTask)
}


def get_task(name: str, data: str | None = None, state: dict | None = None) -> Task:
    """The task `name`; `data` (a text file) and `state` (a saved vocabulary and block size) are the text task's."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    if TASKS[name] is TextTask:
        return TextTask(data=data, **(state or {}))
    if data is not None:
        raise ValueError(f"--data is for the text task, not {name!r}")
    return TASKS[name]()


__all__ = ["TASKS", "Batch", "Defaults", "PromptAnswerTask", "Task", "TextTask", "get_task", "tokenize"]
