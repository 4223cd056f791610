"""The framework's random number generator (initialisation, dropout, data), and `Generator`s of one's own.

`manual_seed(seed)` makes every later draw reproducible; `state()` and
`set_state()` carry it through a checkpoint as plain JSON text. A `Generator`
(torch.Generator) is a stream of its own for the draws given `generator=` it.
"""

from __future__ import annotations

import json

import numpy as np

_generator = np.random.default_rng(0)


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative int, got {seed!r}")
    return int(seed)


def manual_seed(seed: int) -> Generator:
    """Reset the generator used for initialisation and dropout; returns it (`default_generator`), as PyTorch."""
    global _generator, _initial_seed
    _initial_seed = _check_seed(seed)
    _generator = np.random.default_rng(_initial_seed)
    return default_generator


class Generator:
    """torch.Generator: a random stream of its own, for the draws that are given `generator=` it.

    Its numbers come from numpy's PCG64, not from PyTorch's Mersenne Twister: a seed gives a repeatable stream,
    not PyTorch's numbers. `get_state()` is a uint8 array (the JSON of numpy's state) that `set_state` takes."""

    def __init__(self, device: object = "cpu"):
        if device not in (None, "cpu") and str(device) != "cpu":
            raise RuntimeError(f"Generator: device {device!r}: tinygrad_attn runs on the CPU only")
        self.device = "cpu"
        self._own = np.random.default_rng()
        self._seed = int(self._own.bit_generator.seed_seq.entropy % (2**63))

    @property
    def _numpy(self) -> np.random.Generator:
        return self._own

    def manual_seed(self, seed: int) -> Generator:
        self._seed = _check_seed(seed)
        self._own = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        """A new seed from the operating system's entropy, set and returned."""
        value = int(np.random.SeedSequence().entropy % (2**63))
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> np.ndarray:
        return np.frombuffer(json.dumps(self._numpy.bit_generator.state).encode(), np.uint8).copy()

    def set_state(self, new_state: object) -> Generator:
        data = np.asarray(getattr(new_state, "_data", new_state), np.uint8)
        try:
            self._numpy.bit_generator.state = json.loads(data.tobytes().decode())
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            raise ValueError(f"Generator.set_state: not a state from get_state(): {error}") from None
        return self


class _DefaultGenerator(Generator):
    """The framework's own generator as a Generator (torch.default_generator): manual_seed reseeds it."""

    def __init__(self) -> None:
        self.device = "cpu"

    @property
    def _numpy(self) -> np.random.Generator:
        return _generator

    def manual_seed(self, seed: int) -> Generator:
        return manual_seed(seed)

    def initial_seed(self) -> int:
        return _initial_seed


_initial_seed = 0
default_generator = _DefaultGenerator()


def generator(given: object = None) -> np.random.Generator:
    """The numpy generator to draw from: `given`'s (a Generator, or a numpy Generator), else the framework's."""
    if given is None:
        return _generator
    if isinstance(given, Generator):
        return given._numpy
    if isinstance(given, np.random.Generator):
        return given
    raise TypeError(f"generator must be a tinygrad_attn Generator (torch.Generator), a numpy Generator or None, "
                    f"got {type(given).__name__}")


def state() -> str:
    return json.dumps(_generator.bit_generator.state)


def set_state(text: str) -> None:
    _generator.bit_generator.state = json.loads(text)


def seed() -> int:
    """Seed the generator from the operating system's entropy and return that seed, as torch.seed()."""
    value = int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(value)
    return value


def initial_seed() -> int:
    return _initial_seed
