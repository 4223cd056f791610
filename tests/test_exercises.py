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


def test_hessian_vector_product_by_double_backward():
    module = load("hessian_vector")
    assert module.matches(module.hvp) and not module.matches(module.wrong_hvp)


@pytest.mark.parametrize("name", sorted(p.stem for p in SOLUTIONS.glob("*.py")))
def test_solutions_run_as_scripts(name):
    proc = subprocess.run([sys.executable, str(SOLUTIONS / f"{name}.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- the starter files: the same scaffolding with a TODO where the learner writes the code -------------------

EXERCISES = SOLUTIONS.parent
STARTERS = {"layer_norm_function": 1, "broken_softmax": 2, "causal_by_hand": 3, "one_head_by_hand": 4,
            "hessian_vector": 5}


def load_starter(name, monkeypatch):
    monkeypatch.syspath_prepend(str(EXERCISES))  # as when the script runs from its folder: `from todo import todo`
    spec = importlib.util.spec_from_file_location(f"starter_{name}", EXERCISES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_solution_has_a_starter():
    assert {p.stem for p in SOLUTIONS.glob("*.py")} == set(STARTERS)
    assert {p.stem for p in EXERCISES.glob("*.py")} == set(STARTERS) | {"todo"}


@pytest.mark.parametrize("name", sorted(STARTERS))
def test_a_starter_run_as_is_says_what_to_write(name):
    proc = subprocess.run([sys.executable, str(EXERCISES / f"{name}.py")], capture_output=True, text=True,
                          timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and f"exercise {STARTERS[name]}: " in last and "docs/exercises.md" in last, last


def test_starters_filled_with_the_solutions_pass_and_keep_their_planted_mistakes(monkeypatch):
    starter, solution = load_starter("layer_norm_function", monkeypatch), load("layer_norm_function")
    assert not starter.check(starter.BrokenLayerNorm)
    monkeypatch.setattr(starter.MyLayerNorm, "backward", solution.MyLayerNorm.backward)
    assert starter.check(starter.MyLayerNorm)

    starter, solution = load_starter("broken_softmax", monkeypatch), load("broken_softmax")
    monkeypatch.setattr(starter.OnePercentOff, "backward", solution.OnePercentOff.backward)
    assert "(1, 2)" in starter.message()

    starter, solution = load_starter("causal_by_hand", monkeypatch), load("causal_by_hand")
    assert not starter.matches(starter.anti_causal_attention)
    assert starter.matches(solution.causal_attention)

    starter, solution = load_starter("one_head_by_hand", monkeypatch), load("one_head_by_hand")
    assert not starter.matches(starter.wrong_by_hand)
    assert starter.matches(solution.by_hand)

    starter, solution = load_starter("hessian_vector", monkeypatch), load("hessian_vector")
    assert not starter.matches(starter.wrong_hvp)
    assert starter.matches(solution.hvp)
