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
    assert loaded["step"] == 7 and type(loaded["step"]) is int and loaded["note"] == "hello"
    assert isinstance(loaded["t"], ta.Tensor) and loaded["t"].tolist() == [1.0, 2.0]
    other = nn.MultiHeadAttention(8, 2)
    other.load_state_dict(loaded["model"])
    for (name, p), q in zip(model.named_parameters(), other.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=name)
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary left behind


def test_a_nanogpt_style_checkpoint_comes_back_with_its_structure_and_types(tmp_path):
    model = nn.Linear(3, 2)
    optimizer = ta.optim.AdamW(model.parameters())
    model(ta.randn(4, 3)).sum().backward()
    optimizer.step()
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "model_args": {"n_layer": 2, "bias": True, "dropout": 0.1, "name": "gpt", "vocab": None},
                  "iter_num": 3, "best_val_loss": float("inf"), "nan": float("nan"), "big": 2**70,
                  "config": {"betas": (0.9, 0.95), "ragged": [[1, 2], [3]], 0: "int key"},
                  "scalar": np.float32(2.5), "array": np.arange(4, dtype=np.int16),
                  "grad_leaf": ta.tensor([1.0], requires_grad=True), "empty": {}, "nothing": []}
    ta.save(checkpoint, tmp_path / "ckpt.pt")
    back = ta.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=True)
    assert back["model_args"] == checkpoint["model_args"] and back["iter_num"] == 3
    assert back["best_val_loss"] == float("inf") and np.isnan(back["nan"]) and back["big"] == 2**70
    assert back["config"] == {"betas": (0.9, 0.95), "ragged": [[1, 2], [3]], 0: "int key"}
    assert type(back["config"]["betas"]) is tuple and type(back["scalar"]) is np.float32
    assert back["array"].dtype == np.int16 and back["array"].tolist() == [0, 1, 2, 3]
    assert back["grad_leaf"].requires_grad and not back["model"]["weight"].requires_grad
    assert back["empty"] == {} and back["nothing"] == []
    fresh = nn.Linear(3, 2)
    fresh.load_state_dict(back["model"])
    again = ta.optim.AdamW(fresh.parameters())
    again.load_state_dict(back["optimizer"])
    for k, v in ta.optim.flat_state(optimizer.state_dict()).items():
        np.testing.assert_array_equal(ta.optim.flat_state(again.state_dict())[k], v, err_msg=k)


@pytest.mark.parametrize("bad", [object(), {"f": print}, [1, {2, 3}], {"k": ta.nn.Linear(2, 2)}, {(1, 2): 3}])
def test_what_cannot_be_stored_without_pickle_is_refused_at_save_time(tmp_path, bad):
    with pytest.raises(TypeError, match="save: "):
        ta.save(bad, tmp_path / "x.npz")
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.parametrize("structure", ['{"tensor": 5}', '{"dict": [[{"str": "a"}]]}', '{"int": "1e9"}', '"x"',
                                       '{"list": ' * 200 + '[]' + '}' * 200, '{"pickle": "os.system"}',
                                       "not json"])
def test_a_tampered_structure_is_one_clear_error(tmp_path, structure):
    path = tmp_path / "t.npz"
    np.savez(path, **{"0": np.ones(2), "__structure__": np.asarray(structure)})
    with pytest.raises(ValueError, match="load: .*structure"):
        ta.load(path)


def test_map_location_takes_the_cpu_only(tmp_path):
    ta.save({"w": ta.ones(2)}, tmp_path / "w.npz")
    for where in (None, "cpu", ta.device("cpu"), {"cuda:0": "cpu"}):
        assert ta.load(tmp_path / "w.npz", map_location=where)["w"].tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="cuda"):
        ta.load(tmp_path / "w.npz", map_location="cuda:0")


def test_an_archive_of_flat_arrays_written_before_the_structure_still_loads(tmp_path):
    np.savez(tmp_path / "old.npz", **{"model.w": np.ones(2), "step": np.asarray(3)})
    loaded = ta.load(tmp_path / "old.npz")
    assert set(loaded) == {"model.w", "step"} and int(loaded["step"]) == 3


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
