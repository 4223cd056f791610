"""The TODO marker of the starter files: one clear message naming the exercise and where to read."""


class NotDoneYet(NotImplementedError):
    pass


def todo(what: str, exercise: int) -> NotDoneYet:
    return NotDoneYet(f"exercise {exercise}: {what} is yours to write (a TODO in exercises/); docs/exercises.md "
                      f"says what to do, and exercises/solutions/ has one answer")
