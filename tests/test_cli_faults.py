"""What once went silently wrong or ended in a traceback: each case is one clear line and exit 2 (130 for
Ctrl-C), a refused resume, or a clear error before an allocation that cannot fit."""

import errno
import json
import os

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import cli
from tinygrad_attn import train as train_module
from tinygrad_attn.runs import TrainConfig
from tinygrad_attn.serialization import load, save
from tinygrad_attn.train import train

SMALL = ["--steps", "6", "--batch-size", "4", "--d-model", "16", "--heads", "2", "--layers", "1",
         "--dim-feedforward", "32", "--no-progress", "--no-plot", "--checkpoint-every", "3"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    return path


def _error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def _text_run(tmp_path, text_file, name="run", *extra):
    code = cli.main(["train", "--task", "text", "--data", str(text_file), "--block-size", "16",
                     "--out", str(tmp_path / name), *SMALL, *extra])
    assert code == 0
    return tmp_path / name


@pytest.mark.parametrize("flags, message", [
    (["--data", ""], "--data: an empty path names nothing"),
    (["--out", ""], "--out: an empty path names nothing"),
    (["--block-size", "0"], "--block-size must be at least 1"),
    (["--d-model", "0"], "--d-model must be at least 1"),
    (["--dropout", "nan"], "--dropout must lie in [0, 1)"),
    (["--data", "/dev/zero"], "is not a regular file"),
])
def test_empty_strings_and_zeros_are_refused(flags, message, capsys):
    code = cli.main(["train", "--task", "text", "--steps", "1", "--no-progress", "--no-plot", *flags])
    assert code == 2 and message in _error(capsys)


def test_resume_refuses_an_edited_data_file_and_another_block_size(tmp_path, text_file, capsys):
    run = _text_run(tmp_path, text_file)
    text_file.write_text(text_file.read_text()[::-1], encoding="utf-8")  # the same characters, another text
    code = cli.main(["train", "--task", "text", "--data", str(text_file), "--out", str(run), "--resume", "--steps", "9",
                     "--no-progress", "--no-plot"])
    assert code == 2 and "is not the text the run was trained on" in _error(capsys)
    code = cli.main(["train", "--task", "text", "--data", str(text_file), "--out", str(run), "--resume",
                     "--block-size", "8", "--no-progress", "--no-plot"])
    assert code == 2 and "trained with --block-size 16, got 8" in _error(capsys)


@pytest.mark.parametrize("history, message", [
    ("[" * 100_000 + "]" * 100_000, "trainer/history is not valid JSON (or is nested too deeply)"),
    ('{"step": 3}', "trainer/history must be a list"),
    ('[{"step": "3", "loss": 1.0}]', "trainer/history entry 0 is not a {step, loss, ...} record"),
    ('[{"step": 3, "loss": [1]}]', "trainer/history entry 0"),
])
def test_a_tampered_history_is_one_clear_error_for_every_command(tmp_path, text_file, history, message, capsys):
    run = _text_run(tmp_path, text_file)
    path = str(run / "checkpoint.npz")
    flat = load(path)
    flat["trainer/history"] = np.asarray(history)
    save(flat, path)
    for argv in (["generate", "--run", str(run), "--prompt", "the", "--tokens", "3"],
                 ["explain", "--run", str(run), "--input", "the", "--out", str(tmp_path / "p.html")],
                 ["train", "--task", "text", "--data", str(text_file), "--out", str(run), "--resume", "--steps", "9",
                  "--no-progress", "--no-plot"]):
        code = cli.main(argv)
        err = _error(capsys)
        assert code == 2 and message in err and "checkpoint.npz" in err, (argv[0], err)


def _tamper(run, **changes):
    path = str(run / "checkpoint.npz")
    flat = load(path)
    config = json.loads(str(flat["trainer/config"]))
    config.update(changes)
    flat["trainer/config"] = np.asarray(json.dumps(config))
    save(flat, path)


@pytest.mark.parametrize("changes, message", [
    ({"task_state": {"vocab": "aab", "block_size": 16}}, "saved vocabulary does not match its weights"),
    ({"task_state": {"vocab": 7, "block_size": 16}}, "saved vocabulary does not match its weights"),
    ({"d_model": 10 ** 6}, "says d_model 1000000 but its weights have 16"),
    ({"num_layers": 100_000}, "says num_layers 100000 but its weights have 1"),
    ({"block_size": 10 ** 9}, "says block_size 1000000000 but its weights have 16"),
    ({"nhead": "4"}, "says nhead '4'; expected an int >= 1"),
    ({"dropout": 7}, "says dropout 7; expected a number in [0, 1)"),
])
def test_a_tampered_run_config_is_one_clear_error_naming_the_run(tmp_path, text_file, changes, message, capsys):
    run = _text_run(tmp_path, text_file)
    _tamper(run, **changes)
    code = cli.main(["generate", "--run", str(run), "--prompt", "the", "--tokens", "3"])
    err = _error(capsys)
    assert code == 2 and message in err and "checkpoint.npz" in err


def test_generate_checks_the_temperature_for_every_task(tmp_path, capsys):
    assert cli.main(["train", "--task", "copy", "--out", str(tmp_path / "c"), *SMALL]) == 0
    code = cli.main(["generate", "--run", str(tmp_path / "c"), "--prompt", "1 2 3", "--temperature", "nan"])
    assert code == 2 and "--temperature must be a finite number > 0" in _error(capsys)


def test_a_temperature_that_overflows_is_greedy(tmp_path, text_file, capsys):
    run = _text_run(tmp_path, text_file)
    capsys.readouterr()
    texts = []
    for temperature in ("1", "1e-310"):
        assert cli.main(["generate", "--run", str(run), "--prompt", "the ", "--tokens", "12", "--top-k", "1",
                         "--temperature", temperature]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1]
    assert cli.main(["generate", "--run", str(run), "--prompt", "the ", "--tokens", "12",
                     "--temperature", "1e-310"]) == 0  # sampling, too: every row overflows, so greedy
    assert capsys.readouterr().out == texts[0]


def test_nan_weights_never_become_text(tmp_path, text_file, capsys):
    run = _text_run(tmp_path, text_file)
    path = str(run / "checkpoint.npz")
    flat = load(path)
    flat["head.weight"] = np.full_like(flat["head.weight"], np.nan)
    save(flat, path)
    code = cli.main(["generate", "--run", str(run), "--prompt", "the ", "--tokens", "5", "--top-k", "1"])
    assert code == 2 and "logits are not finite" in _error(capsys)


def test_any_real_temperature_type_is_accepted():
    ta.manual_seed(0)
    lm = ta.nn.CausalLM(11, 8, d_model=16, nhead=2, num_layers=1, dim_feedforward=32)
    for temperature in (np.float32(0.7), np.float64(0.7), 1, np.int64(2)):
        assert lm.generate(np.array([[1, 2]]), 3, temperature=temperature).shape == (1, 5)


def test_a_resumed_run_has_the_history_of_an_uninterrupted_one(tmp_path, text_file):
    def cfg(name, **kw):
        return TrainConfig(**{**dict(task="text", data=str(text_file), steps=37, batch_size=4, block_size=16,
                                     d_model=16, nhead=2, num_layers=1, dim_feedforward=32, out=str(tmp_path / name),
                                     checkpoint_every=50, progress=False), **kw})

    whole = train(cfg("whole"))
    train(cfg("part", steps=33))  # stops between scheduled evaluations: its last step was reported
    part = train(cfg("part", resume=True))
    strip = [{k: v for k, v in h.items() if k != "seconds"} for h in whole["history"]]
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in part["history"]] == strip


def test_ctrl_c_names_the_checkpoint_and_the_resume_command(tmp_path, text_file, monkeypatch, capsys):
    calls = []

    def interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # after the checkpoint of step 3
            raise KeyboardInterrupt
        return 0.0

    monkeypatch.setattr(train_module, "clip_grad_norm_", interrupt)
    argv = ["train", "--task", "text", "--data", str(text_file), "--block-size", "16", "--out", str(tmp_path / "r"),
            *SMALL]
    assert cli.main(argv) == 130
    err = _error(capsys)
    assert "interrupted; the last checkpoint" in err and "checkpoint.npz" in err and err.endswith("--resume")


def test_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "w.npz"
    ta.save({"a": np.ones(3)}, path)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"save: cannot write .*w\.npz \(No space left on device\)") as info:
        ta.save({"a": np.zeros(3)}, path)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    np.testing.assert_array_equal(ta.load(path)["a"], np.ones(3))
    assert os.listdir(tmp_path) == ["w.npz"]


def test_save_keeps_a_ragged_list_as_a_list(tmp_path):
    ta.save({"a": [[1, 2], [3]]}, tmp_path / "r.npz")  # a list of lists, as PyTorch keeps it: not an array
    assert ta.load(tmp_path / "r.npz") == {"a": [[1, 2], [3]]}


@pytest.mark.parametrize("make", [
    lambda: ta.nn.MultiHeadAttention(64, 8)(ta.zeros(4, 8192, 64), need_weights=True),
    lambda: ta.nn.functional.scaled_dot_product_attention(*[ta.zeros(4, 8, 16384, 8)] * 3, return_weights=True),
    lambda: ta.nn.Linear(10 ** 6, 10 ** 6),
    lambda: ta.nn.CausalLM(65, 1024, d_model=64)(np.zeros((4096, 1024), np.int64)),
    lambda: ta.ones(60000, 8) @ ta.ones(8, 60000),
])
def test_sizes_are_checked_before_allocating(make, monkeypatch):
    monkeypatch.setattr("tinygrad_attn.memory.available_bytes", lambda: 4 << 30)  # as on a 4 GiB machine
    with pytest.raises(MemoryError, match=r"need \d+\.\d GiB, more than the 4\.0 GiB this machine has available"):
        make()


def test_the_command_line_reports_a_size_the_machine_cannot_hold_in_one_line(tmp_path, capsys):
    code = cli.main(["train", "--task", "copy", "--d-model", str(10 ** 6), "--heads", "1", "--out", str(tmp_path / "m"),
                     "--no-progress", "--no-plot", "--steps", "1"])
    err = _error(capsys)
    assert code == 2 and "GiB" in err and "more than" in err


def test_a_real_sigint_during_training_exits_130_with_one_line(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tinygrad_attn", "train", "--task", "reverse", "--steps", "100000",
                             "--checkpoint-every", "5", "--out", str(out), "--no-progress", "--no-plot"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": root}, cwd=tmp_path)
    deadline = time.time() + 120
    while not (out / "checkpoint.npz").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().count("\n") == 0 and "Traceback" not in err and "--resume" in err, err[-2000:]
    assert ta.load(out / "checkpoint.npz")  # intact


def test_a_finished_run_is_never_replaced_without_being_asked(tmp_path, capsys):
    out = str(tmp_path / "reverse")
    base = ["train", "--task", "reverse", "--no-progress", "--no-plot", "--out", out]
    assert cli.main([*base, "--steps", "3"]) == 0
    capsys.readouterr()
    before = (tmp_path / "reverse" / "checkpoint.npz").read_bytes()
    assert cli.main([*base, "--steps", "2"]) == 2  # a second run into the same folder: refused, nothing done
    message = _error(capsys)
    assert "already holds a run" in message and "--resume" in message and "--overwrite" in message
    assert (tmp_path / "reverse" / "checkpoint.npz").read_bytes() == before
    assert cli.main([*base, "--steps", "2", "--resume", "--overwrite"]) == 2
    assert "contradict" in _error(capsys)
    assert cli.main([*base, "--steps", "4", "--resume"]) == 0  # continuing it is fine
    assert cli.main([*base, "--steps", "2", "--overwrite"]) == 0  # and so is replacing it, when asked
    capsys.readouterr()
    assert ta.load(tmp_path / "reverse" / "checkpoint.npz")["trainer/step"] == 2


@pytest.mark.parametrize("argv, flag", [
    (["train", "--d-model", "1000000", "--heads", "1"], "--d-model 1000000, --heads 1: Linear: the weights"),
    (["train", "--dim-feedforward", "1000000000"], "--dim-feedforward 1000000000: Linear: the weights"),
    (["train", "--batch-size", "100000000"], "--batch-size 100000000: "),
])
def test_a_size_too_large_for_the_machine_names_its_flag(tmp_path, argv, flag, capsys):
    code = cli.main([*argv, "--steps", "1", "--out", str(tmp_path / "big"), "--no-progress", "--no-plot"])
    err = _error(capsys)
    assert code == 2 and err.startswith(f"tinygrad-attn: error: {flag}") and "available" in err, err


def test_generate_too_many_tokens_names_the_flag(tmp_path, text_file, capsys):
    run = _text_run(tmp_path, text_file)
    code = cli.main(["generate", "--run", str(run), "--prompt", "the", "--tokens", str(10 ** 12)])
    err = _error(capsys)
    assert code == 2 and "--tokens 1000000000000: generate:" in err and "available" in err, err
