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
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=name)
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


def test_save_errors_name_the_target(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"folder .*nowhere does not exist"):
        ta.save({"a": np.ones(2)}, tmp_path / "nowhere" / "ckpt.npz")
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(IsADirectoryError, match="dir.npz: it is a folder"):
        ta.save({"a": np.ones(2)}, tmp_path / "dir.npz")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        ta.load(tmp_path / "dir.npz")


def test_stale_temporaries_of_the_same_target_are_cleaned_up(tmp_path):
    (tmp_path / ".tmp-ckpt.npz-abc123.npz").write_bytes(b"half a file from a killed writer")
    (tmp_path / ".tmp-other.npz-abc123.npz").write_bytes(b"another target's")
    ta.save({"a": np.ones(2)}, tmp_path / "ckpt.npz")
    assert sorted(os.listdir(tmp_path)) == [".tmp-other.npz-abc123.npz", "ckpt.npz"]


def _npz_with(tmp_path, name, members):
    import zipfile

    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return path


def _npy_header(shape, dtype="<f8"):
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()  # magic string and header


def test_load_checks_every_member_before_reading(tmp_path):
    np.save(tmp_path / "single.npy", np.ones(3))
    with pytest.raises(ValueError, match=r"single.npy is not a readable checkpoint \(not an .npz archive"):
        ta.load(tmp_path / "single.npy")
    not_array = _npz_with(tmp_path, "text.npz", {"w.npy": _npy_header((2,)) + np.ones(2).tobytes(),
                                                 "notes.txt": b"hello"})
    with pytest.raises(ValueError, match="holds 'notes.txt', which is not an array"):
        ta.load(not_array)
    huge = _npz_with(tmp_path, "huge.npz", {"w.npy": _npy_header((2**40,)) + b"\0" * 64})
    with pytest.raises(ValueError, match=r"'w.npy' declares 8796093022208 bytes, beyond the limit"):
        ta.load(huge)
    short = _npz_with(tmp_path, "short.npz", {"w.npy": _npy_header((100,)) + b"\0" * 64})
    with pytest.raises(ValueError, match="shorter than the array it declares"):
        ta.load(short)
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, w=np.zeros(2_000_000))  # 16 MB of zeros in a few KB
    assert bomb.stat().st_size < 100_000
    with pytest.raises(ValueError, match="beyond the limit of 1000000"):
        ta.load(bomb, max_bytes=1_000_000)
    assert ta.load(bomb)["w"].shape == (2_000_000,)


def test_unsupported_compression_after_a_byte_flip(tmp_path):
    path = tmp_path / "flipped.npz"
    ta.save({"w": np.ones(10)}, path)
    data = bytearray(path.read_bytes())
    central = data.rfind(b"PK\x01\x02")  # the central directory entry: its compression method at offset 10
    data[central + 10] = 99
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="unsupported compression method"):
        ta.load(path)


def test_safetensors_round_trip_and_a_checked_table(tmp_path):
    state = {"w": np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32), "i": np.arange(5),
             "m": np.array([True, False]), "h": np.ones((2, 0), np.float16), "nested": {"b": np.float64(2.5)}}
    path = tmp_path / "weights.safetensors"
    ta.save(state, path)
    back = ta.load(path)
    assert sorted(back) == ["h", "i", "m", "nested.b", "w"]
    for key, value in [("w", state["w"]), ("i", state["i"]), ("m", state["m"]), ("h", state["h"])]:
        assert back[key].dtype == value.dtype and np.array_equal(back[key], value)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    for bad, message in [(raw[:-3], "bytes of data"), (raw[:8] + b"x" + raw[9:], "not JSON"),
                         (raw.replace(b'"F32"', b'"F99"'), "unsupported dtype"),
                         (raw[:8 + n] + raw[8 + n:] + b"x", "bytes of data")]:
        path.write_bytes(bad)
        with pytest.raises(ValueError, match=message):
            ta.load(path)
    with pytest.raises(TypeError, match="complex"):
        ta.save({"c": np.ones(2, np.complex64)}, tmp_path / "c.safetensors")


def test_safetensors_files_are_read_by_the_safetensors_package_and_back(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    state = {"a.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "a.steps": np.arange(3, dtype=np.int64)}
    ta.save(state, tmp_path / "ours.safetensors")
    theirs = st_numpy.load_file(str(tmp_path / "ours.safetensors"))
    assert all(np.array_equal(theirs[k], v) and theirs[k].dtype == v.dtype for k, v in state.items())
    st_numpy.save_file(state, str(tmp_path / "theirs.safetensors"))
    ours = ta.load(tmp_path / "theirs.safetensors")
    assert all(np.array_equal(ours[k], v) and ours[k].dtype == v.dtype for k, v in state.items())


def test_weights_move_to_a_pytorch_twin_and_back_through_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    ta.manual_seed(0)
    ours = ta.nn.Sequential(ta.nn.Embedding(7, 8), ta.nn.LayerNorm(8), ta.nn.Linear(8, 16), ta.nn.GELU(),
                            ta.nn.Linear(16, 7))
    twin = torch.nn.Sequential(torch.nn.Embedding(7, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 16),
                               torch.nn.GELU(), torch.nn.Linear(16, 7))
    tokens = np.array([[1, 2, 3], [6, 0, 5]])
    ta.save(ours.state_dict(), tmp_path / "ours.safetensors")
    loaded = ta.load(tmp_path / "ours.safetensors")
    twin.load_state_dict({k: torch.tensor(v) for k, v in loaded.items()})
    np.testing.assert_allclose(ours(ta.tensor(tokens)).detach().numpy(), twin(torch.tensor(tokens)).detach().numpy(),
                               atol=1e-6)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    ta.save({k: v.numpy() for k, v in twin.state_dict().items()}, tmp_path / "twin.safetensors")
    ours.load_state_dict(ta.load(tmp_path / "twin.safetensors"))
    np.testing.assert_allclose(ours(ta.tensor(tokens)).detach().numpy(), twin(torch.tensor(tokens)).detach().numpy(),
                               atol=1e-6)
