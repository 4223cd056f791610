"""Each program in examples/ written in PyTorch's idioms has a PyTorch twin in examples/pytorch/ that differs in
its import lines only; from the same weights, both train to the same losses."""

import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
TWINS = sorted(p.name for p in (EXAMPLES / "pytorch").glob("*.py"))
END_OF_IMPORTS = "# --- end of imports ---"


def _body(path: pathlib.Path) -> list[str]:
    """The lines that are not imports: everything but the block from the first import to the end marker."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
    end = lines.index(END_OF_IMPORTS)
    return lines[:start] + lines[end:]


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", TWINS)
def test_twin_differs_in_its_imports_only(name):
    ours, twin = _body(EXAMPLES / name), _body(EXAMPLES / "pytorch" / name)
    assert ours == twin
    imports = (EXAMPLES / name).read_text().split(END_OF_IMPORTS)[0]
    assert "tinygrad_attn" in imports and "tinygrad_attn" not in (EXAMPLES / "pytorch" / name).read_text()


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", TWINS)
def test_twin_trains_to_the_same_losses_from_the_same_weights(name):
    pytest.importorskip("torch")
    ours = _load(EXAMPLES / name, f"ours_{name[:-3]}")
    theirs = _load(EXAMPLES / "pytorch" / name, f"twin_{name[:-3]}")
    model, _, _ = ours.main(steps=0)
    weights = {k: np.array(v) for k, v in model.state_dict().items()}
    _, our_losses, our_sample = ours.main(steps=30, weights=weights)
    _, their_losses, their_sample = theirs.main(steps=30, weights=weights)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    assert our_sample.tolist() == their_sample.tolist()
