"""Every exercise's solution passes its check, and the broken variant next to it fails."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

SOLUTIONS = pathlib.Path(__file__).resolve().parent.parent / "exercises" / "solutions"


def load(name):
    spec = importlib.util.spec_from_file_location(name, SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layer_norm_function():
    module = load("layer_norm_function")
    assert module.check(module.MyLayerNorm) and not module.check(module.BrokenLayerNorm)


def test_gradcheck_names_the_planted_index():
    message = load("broken_softmax").message()
    assert "gradient mismatch" in message and "(1, 2)" in message


def test_causal_masking_by_hand():
    module = load("causal_by_hand")
    assert module.matches(module.causal_attention) and not module.matches(module.anti_causal_attention)


def test_one_head_by_hand():
    module = load("one_head_by_hand")
    assert module.matches(module.by_hand) and not module.matches(module.wrong_by_hand)


@pytest.mark.parametrize("name", sorted(p.stem for p in SOLUTIONS.glob("*.py")))
def test_solutions_run_as_scripts(name):
    proc = subprocess.run([sys.executable, str(SOLUTIONS / f"{name}.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
