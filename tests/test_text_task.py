"""The text task and `generate`: training on a small file, exact resume, generation, errors, history."""

import json

import numpy as np
import pytest

from tinygrad_attn import cli
from tinygrad_attn.runs import TrainConfig, load_checkpoint, load_run
from tinygrad_attn.tasks import TextTask
from tinygrad_attn.train import train


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 20 + "é ñ", encoding="utf-8")
    return path


def config(tmp_path, text_file, name, **kw):
    settings = dict(task="text", data=str(text_file), steps=12, batch_size=4, block_size=16, d_model=16, nhead=2,
                    num_layers=1, dim_feedforward=32, out=str(tmp_path / name), checkpoint_every=5, progress=False)
    settings.update(kw)
    return TrainConfig(**settings)


def test_text_task_splits_windows_and_vocabulary(text_file):
    task = TextTask(data=str(text_file), block_size=16)
    text = text_file.read_text(encoding="utf-8")
    assert task.vocab == "".join(sorted(set(text))) and "é" in task.vocab
    assert len(task.train_ids) == int(len(text) * 0.9) and len(task.val_ids) == len(text) - len(task.train_ids)
    batch = task.batch(np.random.default_rng(0), 3)
    assert batch.inputs.shape == (3, 16) and np.array_equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert task.decode(task.encode("quick")) == "quick"


def test_train_resume_exactly_and_generate(tmp_path, text_file, capsys):
    whole = train(config(tmp_path, text_file, "whole"))
    train(config(tmp_path, text_file, "part", steps=5))
    resumed = train(config(tmp_path, text_file, "part", resume=True, d_model=None, nhead=None, num_layers=None,
                           dim_feedforward=None))  # the sizes come from the run
    assert resumed["steps"] == whole["steps"] == 12 and resumed["val_loss"] == whole["val_loss"]
    a, b = (load_checkpoint(str(tmp_path / n / "checkpoint.npz")) for n in ("whole", "part"))
    for name in a["model"]:
        assert np.array_equal(a["model"][name], b["model"][name]), name
    metrics = json.loads((tmp_path / "part" / "metrics.json").read_text())
    assert metrics["metric"] == "val_loss" and metrics["val_bits_per_char"] > 0
    assert metrics["model"] == {"d_model": 16, "nhead": 2, "num_layers": 1, "dim_feedforward": 32, "dropout": 0.0}
    history = metrics["history"]
    assert [h["step"] for h in history][-1] == 12 and {"step", "loss", "val_loss", "lr", "seconds"} <= set(history[-1])
    task, model, _ = load_run(str(tmp_path / "part"))  # rebuilt from the saved vocabulary: no file needed
    assert task.vocab == TextTask(data=str(text_file)).vocab and model.config["d_model"] == 16
    code = cli.main(["generate", "--run", str(tmp_path / "part"), "--prompt", "the ", "--tokens", "10",
                     "--top-k", "1"])
    out = capsys.readouterr().out.strip()
    assert code == 0 and out.startswith("the ") and len(out) == 14


@pytest.mark.parametrize("content, message", [
    (None, "no file"), (b"", "is empty"), (b"ab\0cd" * 50, "looks binary"), (b"\xff\xfe" * 50, "not UTF-8"),
    (b"short text", "too short"),
])
def test_bad_text_files_give_one_clear_error(tmp_path, content, message, capsys):
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_bytes(content)
    code = cli.main(["train", "--task", "text", "--data", str(path), "--steps", "1", "--out", str(tmp_path / "r"),
                     "--no-progress", "--no-plot"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and str(path.name) in err and len(err.strip().splitlines()) == 1


def test_generate_refuses_characters_outside_the_vocabulary(tmp_path, text_file, capsys):
    train(config(tmp_path, text_file, "run", steps=1))
    code = cli.main(["generate", "--run", str(tmp_path / "run"), "--prompt", "the Z@", "--tokens", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "characters '@Z' are not in the run's vocabulary" in err


def test_model_size_flags_are_saved_and_used(tmp_path, capsys):
    code = cli.main(["train", "--task", "copy", "--steps", "2", "--heads", "1", "--d-model", "32", "--layers", "1",
                     "--out", str(tmp_path / "c"), "--no-progress", "--no-plot"])
    assert code == 0
    _, model, _ = load_run(str(tmp_path / "c"))
    assert model.config["nhead"] == 1 and model.config["d_model"] == 32 and len(model.layers) == 1
    capsys.readouterr()
    code = cli.main(["train", "--task", "copy", "--heads", "3", "--out", str(tmp_path / "d"), "--no-progress"])
    assert code == 2 and "not divisible by --heads 3" in capsys.readouterr().err
    code = cli.main(["generate", "--run", str(tmp_path / "c"), "--prompt", "3 1 4 1 5 9 2 6"])
    assert code == 0 and len(capsys.readouterr().out.split()) == 8  # a built-in task answers like attend


def test_default_corpus_needs_no_file():
    task = TextTask()
    assert task.source == "stdlib docstrings" and len(task.train_ids) > 10_000


def test_attention_pictures_label_tokens_and_draw_one_head_large(tmp_path, monkeypatch):
    figure = pytest.importorskip("matplotlib.figure")
    from tinygrad_attn.tasks import get_task
    from tinygrad_attn.viz import plot_attention

    figures, save = [], figure.Figure.savefig
    monkeypatch.setattr(figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k)))
    train(TrainConfig(task="translate", steps=2, out=str(tmp_path / "tr"), progress=False))
    task, model, _ = load_run(str(tmp_path / "tr"))
    answer, batch = task.answer(model, "J'aime l'IA")
    assert plot_attention(task, model, batch, str(tmp_path / "a.png"), title="input: J'aime l'IA")
    axes = {a.get_title(): a for a in figures[-1].axes}
    cross = axes["cross L0 H0"]
    assert [t.get_text() for t in cross.get_xticklabels()] == ["j'", "aime", "l'", "ia"]  # source words
    writes = [task.tgt_words[t] for t in batch.targets[0]]  # rows: the English word being written
    assert [t.get_text() for t in cross.get_yticklabels()] == writes
    assert "J'aime" in figures[-1]._suptitle.get_text() and "predicts" in figures[-1]._suptitle.get_text()
    assert plot_attention(task, model, batch, str(tmp_path / "b.png"), head="1.2")
    big = figures[-1].axes[0]
    assert big.get_title() == "cross layer 1 head 2" and len(big.texts) == len(writes) * 4  # a weight per cell
    with pytest.raises(ValueError, match="--head must be LAYER.HEAD"):
        plot_attention(task, model, batch, str(tmp_path / "c.png"), head="x")
    copy = get_task("copy")
    _, copy_batch = copy.answer(copy.build_model(), copy.sample_prompt())
    assert copy.labels(copy_batch)["self-attention"][0][-1] == copy.format(copy_batch.targets[0]).split()[-1]


def test_a_target_in_validation_loss_stops_the_run(tmp_path, text_file, monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(TextTask, "defaults", replace(TextTask.defaults, eval_every=5))
    stopped = train(config(tmp_path, text_file, "t", steps=20, target=10.0))  # any loss is below 10
    assert stopped["steps"] == 5 and stopped["reached_target"] and stopped["val_loss"] <= 10.0
    never = train(config(tmp_path, text_file, "n", steps=10, target=0.0))
    assert never["steps"] == 10 and not never["reached_target"]
