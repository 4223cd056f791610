"""The trainer and the command line: outputs, exact resume, crash safety and clear errors."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn.cli import main
from tinygrad_attn.runs import TrainConfig, load_checkpoint, load_run
from tinygrad_attn.train import train


def quick(tmp_path, name, **kw):
    config = dict(task="copy", steps=6, batch_size=8, out=str(tmp_path / name), checkpoint_every=2,
                  progress=False)
    config.update(kw)
    return TrainConfig(**config)


def test_train_writes_metrics_and_checkpoint(tmp_path):
    metrics = train(quick(tmp_path, "run"))
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved == metrics and metrics["steps"] == 6
    assert {"task", "steps", "seconds", "final_loss", "accuracy"} <= set(metrics)
    parts = load_checkpoint(str(tmp_path / "run" / "checkpoint.npz"))
    assert int(parts["trainer"]["step"]) == 6 and "layers.0.self_attn.q_proj.weight" in parts["model"]
    assert "state.0.exp_avg" in parts["optimizer"] and "group.0.lr" in parts["optimizer"]
    task, model, _ = load_run(str(tmp_path / "run"))
    assert task.name == "copy" and model.num_parameters() > 0


def test_stopped_and_resumed_run_equals_uninterrupted_run(tmp_path):
    whole = quick(tmp_path, "whole")
    train(whole)
    part = quick(tmp_path, "part", steps=3)
    train(part)
    train(quick(tmp_path, "part", resume=True))
    a = load_checkpoint(str(tmp_path / "whole" / "checkpoint.npz"))
    b = load_checkpoint(str(tmp_path / "part" / "checkpoint.npz"))
    assert set(a["model"]) == set(b["model"])
    for name in a["model"]:
        assert np.array_equal(a["model"][name], b["model"][name]), name
    for name in a["optimizer"]:
        assert np.array_equal(a["optimizer"][name], b["optimizer"][name]), name


def test_early_stop_at_target(tmp_path):
    metrics = train(quick(tmp_path, "early", target=0.0))
    assert metrics["steps"] < 6 and metrics["reached_target"]


def test_killed_run_leaves_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "tinygrad_attn", "train", "--task", "copy", "--steps", "100000",
                             "--batch-size", "8", "--checkpoint-every", "1", "--out", str(out), "--no-progress",
                             "--no-plot"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (out / "checkpoint.npz").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # whatever the moment of the kill, the last complete checkpoint loads
    assert int(load_checkpoint(str(out / "checkpoint.npz"))["trainer"]["step"]) >= 1


def run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_tasks_and_attend(tmp_path, capsys):
    code, out, _ = run_cli(["tasks"], capsys)
    assert code == 0 and "reverse" in out and "translate" in out and "steps" in out
    run = str(tmp_path / "cli")
    code, out, _ = run_cli(["train", "--task", "reverse", "--steps", "2", "--batch-size", "4", "--out", run,
                            "--no-progress"], capsys)
    metrics = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert code == 0 and metrics["steps"] == 2 and len(out.splitlines()) == 1  # one summary line, no JSON dump
    assert out.startswith(f"reverse: accuracy {metrics['accuracy']:.3f} (did not reach the target 0.99), 2 steps")
    assert "curves.png, attention.png}" in out
    code, out, _ = run_cli(["attend", "--run", run, "--input", "3 1 4 1 5 9 2 6"], capsys)
    assert code == 0 and len(out.splitlines()[0].split()) == 8


@pytest.mark.parametrize("args, message", [
    (["train", "--task", "nope"], "unknown task 'nope'"),
    (["train", "--steps", "-3"], "--steps must be positive"),
    (["train", "--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (["train", "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["train", "--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["train", "--target", "nan"], "--target must be an accuracy in [0, 1], got nan"),
    (["train", "--target", "-1"], "--target must be an accuracy in [0, 1], got -1.0"),
    (["train", "--seed", "-1"], "--seed must be a non-negative int, got -1"),
    (["train", "--task", "x" * 80_000], "--task: unknown task 'xxxx"),
    (["train", "--resume", "--out", "/nonexistent/run"], "no checkpoint.npz"),
    (["attend", "--run", "/nonexistent/run", "--input", "1"], "no checkpoint"),
])
def test_cli_bad_arguments_give_one_line_and_exit_2(args, message, capsys):
    code, _, err = run_cli(args, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_usage_errors_exit_2_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "tinygrad_attn", "train", "--steps", "abc"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--steps" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_save_checkpoint_names_cannot_clash(tmp_path):
    train(quick(tmp_path, "names", steps=1))
    keys = ta.load(str(tmp_path / "names" / "checkpoint.npz"))
    model_keys = [k for k in keys if "/" not in k]
    assert all("." in k for k in model_keys) and any(k.startswith("optimizer/") for k in keys)


def test_cli_out_problems_name_the_option(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, message in ((a_file, "is a file, not a folder"), (a_file / "run", "--out: cannot create the folder")):
        code, _, err = run_cli(["train", "--steps", "1", "--out", str(out), "--no-progress"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_checkpoints_missing_keys_give_one_line(tmp_path, capsys):
    run = tmp_path / "broken"
    run.mkdir()
    ta.save({"w": np.ones(2)}, run / "checkpoint.npz")
    for args in (["train", "--resume", "--out", str(run), "--no-progress"], ["attend", "--run", str(run), "--input",
                                                                              "1 2 3 4 5 6 7 8"]):
        code, _, err = run_cli(args, capsys)
        assert code == 2 and "is not a training checkpoint" in err and len(err.strip().splitlines()) == 1


def test_resume_with_a_target_stops_where_the_uninterrupted_run_stops(tmp_path, monkeypatch):
    """Every evaluation reaches the target, so a run stops at its first evaluation (step 12, the last):
    a resumed run must not evaluate at the step it resumes from, where the uninterrupted run did not."""
    from tinygrad_attn.tasks import get_task

    monkeypatch.setattr(type(get_task("copy")), "evaluate", lambda self, model: 1.0)
    whole = train(quick(tmp_path, "whole", steps=12, target=0.5))
    train(quick(tmp_path, "part", steps=5, target=0.5))
    resumed = train(quick(tmp_path, "part", steps=12, target=0.5, resume=True))
    assert whole["steps"] == resumed["steps"] == 12
    again = train(quick(tmp_path, "part", steps=12, target=0.5, resume=True))  # after the final checkpoint
    assert again["final_loss"] == resumed["final_loss"] and again["final_loss"] is not None
    text = (tmp_path / "part" / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))


def test_the_held_out_metric_is_a_curve_even_when_the_run_stops_at_its_first_evaluation(tmp_path):
    metrics = train(TrainConfig(task="reverse", steps=50, out=str(tmp_path / "r"), progress=False,
                                target=1.0))  # one scheduled evaluation, at step 50
    evaluated = [h for h in metrics["history"] if h["accuracy"] is not None]
    assert metrics["steps"] == 50 and len(evaluated) == 5 and [h["step"] for h in evaluated] == [10, 20, 30, 40, 50]


@pytest.mark.parametrize("key, value", [("num_layers", 100000), ("nhead", 7), ("d_model", 10**6)])
def test_a_tampered_run_config_is_refused_before_any_model_is_built(tmp_path, key, value):
    """A run folder is validated whole before a model is built: a config edited to 100,000 layers is one clear
    error, not an allocation the machine cannot hold (checked in a subprocess capped at 2 GiB)."""
    train(quick(tmp_path, "tampered", steps=1))
    path = tmp_path / "tampered" / "checkpoint.npz"
    state = ta.load(path)
    config = json.loads(str(state["trainer/config"]))
    config[key] = value
    state["trainer/config"] = np.asarray(json.dumps(config))
    ta.save(state, path)
    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
              "from tinygrad_attn.runs import load_run\n"
              f"load_run({str(tmp_path / 'tampered')!r})\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "ValueError" in proc.stderr and "MemoryError" not in proc.stderr
    assert key in proc.stderr.strip().splitlines()[-1]


def test_the_command_line_reports_an_early_stop_and_checks_head_before_answering(tmp_path, capsys):
    run = str(tmp_path / "early")
    code, out, _ = run_cli(["train", "--task", "reverse", "--steps", "1000", "--target", "0.02", "--out", run,
                            "--no-progress", "--no-plot"], capsys)
    metrics = json.loads((tmp_path / "early" / "metrics.json").read_text())
    assert code == 0 and metrics["stopped_early"] and 0 < metrics["steps"] < 1000
    assert f"stopped early at step {metrics['steps']} of 1000" in out and "(reached the target 0.02)" in out
    code, out, err = run_cli(["attend", "--run", run, "--input", "3 1 4 1 5 9 2 6", "--head", "5.9"], capsys)
    assert code == 2 and out == "" and "--head 5.9: the model has layers 0..1" in err  # no answer printed first
    code, out, err = run_cli(["explain", "--run", run, "--input", "3 1 4 1 5 9 2 6", "--out",
                              str(tmp_path / "missing" / "p.html")], capsys)
    assert code == 2 and "does not exist" in err
