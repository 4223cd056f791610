"""Toy tasks: deterministic batches whose answers are right, and the shapes the models need."""

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn.tasks import TASKS, PromptAnswerTask, get_task, tokenize


def split(task, batch):
    """(prompt, answer) token rows of a PromptAnswerTask batch."""
    tokens = np.concatenate([batch.inputs, batch.targets[:, -1:]], axis=1)
    answer_len = int(batch.loss_mask[0].sum())
    return tokens[:, : -answer_len - 1], tokens[:, -answer_len:]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_batches_are_deterministic_and_masks_select_the_answer(name):
    task = get_task(name)
    a = task.batch(np.random.default_rng([0, 5]), 8)
    b = task.batch(np.random.default_rng([0, 5]), 8)
    c = task.batch(np.random.default_rng([0, 6]), 8)
    assert np.array_equal(a.targets, b.targets) and not np.array_equal(a.targets, c.targets)
    assert a.targets.shape == a.loss_mask.shape and a.loss_mask.any(axis=1).all()
    assert np.array_equal(task.eval_batch().targets, task.eval_batch().targets)
    if isinstance(task, PromptAnswerTask):
        assert a.inputs.shape == a.targets.shape and np.array_equal(a.inputs[:, 1:], a.targets[:, :-1])
        assert a.inputs.max() < task.vocab_size


def test_answers_are_correct():
    rng = np.random.default_rng(1)
    for name, check in {
        "copy": lambda p, a: np.array_equal(p, a),
        "reverse": lambda p, a: np.array_equal(p[:, ::-1], a),
        "sort": lambda p, a: np.array_equal(np.sort(p, 1), a),
    }.items():
        task = get_task(name)
        assert check(*split(task, task.batch(rng, 16)))
    add = get_task("add")
    prompt, answer = split(add, add.batch(rng, 16))
    value = lambda digits: int("".join(str(d) for d in digits))  # noqa: E731
    for p, a in zip(prompt, answer):
        assert value(p[:3]) + value(p[4:7]) == value(a[::-1])
    recall = get_task("recall")
    prompt, answer = split(recall, recall.batch(rng, 16))
    for p, a in zip(prompt, answer):
        pairs = dict(zip(p[0:-1:2], p[1:-1:2]))
        assert len(pairs) == 2 and pairs[p[-1]] == a[0]
    induction = get_task("induction")
    prompt, answer = split(induction, induction.batch(rng, 16))
    for p, a in zip(prompt, answer):
        body = list(p[:-1])
        assert len(set(body)) == len(body) and body[body.index(p[-1]) + 1] == a[0]


def test_translation_pairs_and_tokenizer():
    assert tokenize("J'aime l'IA") == ["j'", "aime", "l'", "ia"]
    task = get_task("translate")
    assert len(task.pairs) >= 30 and (["j'", "aime", "l'", "ia"], ["i", "love", "ai"]) in task.pairs
    batch = task.eval_batch()
    src, lengths, tgt_in = batch.inputs
    assert src.shape[0] == len(task.pairs) and np.array_equal(tgt_in[:, 1:], batch.targets[:, :-1])
    with pytest.raises(ValueError, match="unknown words"):
        task.parse_input("le zèbre")


def test_exact_match_counts_whole_sequences():
    task = get_task("reverse")
    batch = task.batch(np.random.default_rng(0), 4)
    logits = np.eye(task.vocab_size)[batch.targets] * 5.0  # perfect predictions
    assert task.exact_match(logits, batch) == 1.0
    answer_position = np.argmax(batch.loss_mask[1])
    logits[1, answer_position] = np.roll(logits[1, answer_position], 1)  # one wrong token in one sequence
    assert task.exact_match(logits, batch) == 0.75


def test_unknown_task_and_bad_prompt():
    with pytest.raises(ValueError, match="unknown task 'nope'.*reverse"):
        get_task("nope")
    with pytest.raises(ValueError, match="needs 8 tokens"):
        get_task("reverse").parse_input("1 2 3")
    with pytest.raises(ValueError, match="unknown tokens"):
        get_task("reverse").parse_input("1 2 3 4 5 6 7 x")


def test_models_fit_the_tasks():
    ta.manual_seed(0)
    for name in TASKS:
        task = get_task(name)
        model = task.build_model()
        batch = task.batch(np.random.default_rng(0), 2)
        loss, logits = task.loss(model, batch)
        assert logits.shape[:2] == batch.targets.shape and np.isfinite(loss.item())
