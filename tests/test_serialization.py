"""save/load: round trips, atomic writes, and refusal of anything that is not a plain checkpoint."""

import os
import pickle

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import nn


def test_round_trip_of_nested_dict_and_model(tmp_path):
    model = nn.MultiHeadAttention(8, 2)
    path = tmp_path / "ckpt.npz"
    ta.save({"model": model.state_dict(), "step": 7, "note": "hello", "t": ta.Tensor([1.0, 2.0])}, path)
    loaded = ta.load(path)
    assert loaded["step"] == 7 and str(loaded["note"]) == "hello"
    np.testing.assert_array_equal(loaded["t"], [1.0, 2.0])
    other = nn.MultiHeadAttention(8, 2)
    other.load_state_dict({k[len("model."):]: v for k, v in loaded.items() if k.startswith("model.")})
    for (name, p), q in zip(model.named_parameters(), other.parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary left behind


def test_failed_write_leaves_previous_checkpoint_and_no_temporary(tmp_path):
    path = tmp_path / "ckpt.npz"
    ta.save({"a": np.arange(3)}, path)
    with pytest.raises(TypeError, match="object array"):
        ta.save({"a": np.arange(3), "bad": np.array([{}, 1], dtype=object)}, path)
    np.testing.assert_array_equal(ta.load(path)["a"], np.arange(3))
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_truncated_foreign_and_pickled_files_are_refused(tmp_path):
    good = tmp_path / "good.npz"
    ta.save({"w": np.random.default_rng(0).normal(size=(50, 50))}, good)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:1000])
    foreign = tmp_path / "foreign.npz"
    foreign.write_bytes(b"this is not a checkpoint")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, obj=np.array([{"code": 1}], dtype=object))  # numpy pickles object arrays
    raw = tmp_path / "raw.npz"
    raw.write_bytes(pickle.dumps({"w": 1}))
    for path in (truncated, foreign, pickled, raw):
        with pytest.raises((ValueError, OSError), match=str(path.name)):
            ta.load(path)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        ta.load(tmp_path / "missing.npz")
