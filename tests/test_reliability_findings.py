"""Findings of the fuzz suites that gave a silently wrong result or a raw error: each is now PyTorch's result
or PyTorch's error (with the package's message naming the argument), or one clear error for files."""

import json

import numpy as np
import pytest

import tinygrad_attn as ta

F = ta.nn.functional


def test_integer_masks_are_refused_as_pytorch_refuses_them():
    mha = ta.nn.MultiheadAttention(4, 2, batch_first=True)
    x = ta.ones(1, 3, 4)
    for kwargs in ({"key_padding_mask": ta.tensor([[0, 0, 1]])}, {"attn_mask": ta.tensor(np.zeros((3, 3), int))}):
        with pytest.raises(TypeError, match="only bool and floating types"):
            mha(x, x, x, **kwargs)
    with pytest.raises(TypeError, match="bool .* or float"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=ta.tensor([[0, 1, 1]] * 3))


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_"])
def test_in_place_ops_on_bool_tensors_refuse_an_integer_result(op):
    t = ta.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type bool"):
        getattr(t, op)(2)
    assert t.tolist() == [True, False, True]  # unchanged


def test_bad_attention_and_loss_arguments_are_one_clear_error():
    x = ta.ones(1, 2, 2)
    with pytest.raises(ValueError, match="dropout_p"):
        F.scaled_dot_product_attention(x, x, x, dropout_p=-0.5)
    with pytest.raises(ValueError, match="same leading dims"):
        F.scaled_dot_product_attention(ta.ones(2, 3), ta.ones(3), ta.ones(3))
    with pytest.raises(TypeError, match="ignore_index must be an int64"):
        F.cross_entropy(ta.ones(2, 3), ta.tensor([0, 1]), ignore_index=2**70)


def test_data_loading_arguments_and_dtypes():
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        ta.utils.data.BatchSampler(range(5), 0, False)
    for dtype in (np.int32, np.uint8, np.int16):
        assert ta.utils.data.default_collate([dtype(1), dtype(2)]).dtype == dtype


def test_an_optimizer_state_with_an_unknown_key_is_refused():
    optimizer = ta.optim.AdamW(ta.nn.Linear(2, 2).parameters())
    state = optimizer.state_dict()
    state["bogus"] = np.zeros(1)
    with pytest.raises(KeyError, match="unexpected keys \\['bogus'\\]"):
        optimizer.load_state_dict(state)


def _safetensors(path, header, data=b""):
    text = header.encode() if isinstance(header, str) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)
    return path


@pytest.mark.parametrize("header", [
    '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
    '"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}',  # a name twice
    {"a": {"dtype": "F32", "shape": "12", "data_offsets": [0, 8]}},  # a shape as a string
    {"a": {"dtype": "F32", "shape": [2.7], "data_offsets": [0, 8]}},  # a float size
    {"a": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}},  # a bool size
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}},  # float offsets
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}},
])
def test_safetensors_headers_are_read_as_strictly_as_the_format_says(tmp_path, header):
    path = _safetensors(tmp_path / "bad.safetensors", header, b"\0" * 8)
    with pytest.raises(ValueError, match="load: "):
        ta.load(path)


def test_safetensors_bool_bytes_other_than_0_and_1_are_refused(tmp_path):
    path = _safetensors(tmp_path / "b.safetensors", {"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}},
                        bytes([2, 255]))
    with pytest.raises(ValueError, match="BOOL tensor 'm' holds bytes other than 0 and 1"):
        ta.load(path)
