"""The framework's one random number generator (initialisation, dropout, data).

`manual_seed(seed)` makes every later draw reproducible; `state()` and
`set_state()` carry it through a checkpoint as plain JSON text.
"""

from __future__ import annotations

import json

import numpy as np

_generator = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the generator used for initialisation and dropout."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative int, got {seed!r}")
    global _generator
    _generator = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _generator


def state() -> str:
    return json.dumps(_generator.bit_generator.state)


def set_state(text: str) -> None:
    _generator.bit_generator.state = json.loads(text)


def seed() -> int:
    """Seed the generator from the operating system's entropy and return that seed, as torch.seed()."""
    value = int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(value)
    return value
