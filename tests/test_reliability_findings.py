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


@pytest.mark.parametrize("tq, causal", [(8, True), (8, False), (20, True), (70, False)])
def test_a_huge_scale_keeps_the_flash_gradients_finite_and_equal_to_the_math_paths_dv(tq, causal):
    """With scale 1e30 the softmax is one-hot; the backward must recompute the forward's very scores (S - lse
    exactly <= 0), or exp overflows into inf * 0 = NaN."""
    rng = np.random.default_rng(tq)
    arrays = [rng.normal(size=(2, 2, tq, 16)).astype(np.float32) for _ in range(3)]
    grads = {}
    for backend in (ta.nn.attention.SDPBackend.FLASH_ATTENTION, ta.nn.attention.SDPBackend.MATH):
        q, k, v = (ta.tensor(a, requires_grad=True) for a in arrays)
        with ta.nn.attention.sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, scale=1e30, is_causal=causal).sum().backward()
        grads[backend] = [t.grad.numpy() for t in (q, k, v)]
        assert all(np.isfinite(g).all() for g in grads[backend]), backend
    flash, math_path = grads.values()
    np.testing.assert_array_equal(flash[2], math_path[2])  # dv counts the queries whose one-hot picks each key


@pytest.mark.parametrize("d", [1, 2])
def test_flash_attention_takes_a_head_dim_of_one_and_a_broadcast_gradient(d):
    rng = np.random.default_rng(d)
    arrays = [rng.normal(size=(1, 2, 40, d)) for _ in range(3)]
    grads = []
    for backend in (ta.nn.attention.SDPBackend.FLASH_ATTENTION, ta.nn.attention.SDPBackend.MATH):
        q, k, v = (ta.tensor(a, requires_grad=True) for a in arrays)
        with ta.nn.attention.sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()  # the gradient: strides 0
        grads.append([t.grad.numpy() for t in (q, k, v)])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_datasets_out_of_range_or_without_len_are_one_clear_error():
    data = ta.utils.data
    with pytest.raises(IndexError, match=r"Subset: indices\[0\]: index 5 is out of range for 3 items"):
        data.Subset([1, 2, 3], [5])[0]
    with pytest.raises(IndexError, match="Subset: index 2 is out of range for 1 items"):
        data.Subset([1, 2, 3], [0])[2]
    assert data.Subset([1, 2, 3], [2, 0])[-1] == 1  # negative indices as PyTorch's

    class NoLen(data.Dataset):
        def __getitem__(self, i):
            return i

    for shuffle in (True, False):
        with pytest.raises(TypeError, match="the dataset \\(NoLen\\) has no __len__"):
            list(data.DataLoader(NoLen(), shuffle=shuffle))


def _mha_state():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(4, 2).state_dict()


def test_interop_keeps_unknown_keys_and_refuses_what_it_cannot_convert():
    from tinygrad_attn import interop

    state = {"enc.self_attn." + k: v for k, v in _mha_state().items()} | {"enc.self_attn.extra": np.ones(2)}
    ours = interop.from_torch(state)
    assert "enc.self_attn.extra" in ours  # a strict load_state_dict then reports it
    back = interop.to_torch(ours)
    assert sorted(back) == sorted(state) and all(np.array_equal(back[k], np.asarray(state[k])) for k in state)
    plain = _mha_state()
    bad = [
        ([1], TypeError, "state must be a dict"),
        ({**plain, "out_proj.bias": "x"}, TypeError, "'out_proj.bias' must be a tensor or array of numbers"),
        ({**plain, "in_proj_weight": np.ones((47, 4))}, ValueError, "3 \\* embed_dim rows"),
        ({k: v for k, v in plain.items() if k != "in_proj_weight"}, ValueError, "'q_proj_weight' is missing"),
        ({**plain, "q_proj_weight": np.ones((4, 4))}, ValueError, "both 'in_proj_weight' and"),
        (interop.mha_from_torch(plain), ValueError, "already in this framework's layout"),
    ]
    for given, error, message in bad:
        with pytest.raises(error, match=message):
            interop.mha_from_torch(given)
    partial = {k: v for k, v in interop.mha_from_torch(plain).items() if k != "q_proj.bias"}
    with pytest.raises(ValueError, match="given without \\['q_proj.bias'\\]"):
        interop.mha_to_torch(partial)  # the k and v biases are never dropped silently


def test_explore_refuses_wrong_labels_empty_inputs_and_a_diverged_model():
    torch_free = ta.nn.CausalLM(10, 8, 8, 2, 1, 16)
    tokens = np.array([[1, 2, 3]])
    with pytest.raises(ValueError, match="gives 1 query labels for 3 query positions"):
        ta.viz.explore(torch_free, tokens, labels={"self-attention": (["a"], ["b"])})
    with pytest.raises(ValueError, match="inputs of shape \\(1, 0\\) are empty"):
        ta.viz.explore(torch_free, np.zeros((1, 0), int), np.zeros((1, 0), int))
    with ta.no_grad():
        torch_free.embed.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="the loss is nan"):
        ta.viz.explore(torch_free, tokens)


def test_the_memory_check_counts_a_process_address_space_limit():
    """Under `ulimit -v` the room is the limit, not the machine's free memory: a request between the two is
    one clear MemoryError, not numpy's "Unable to allocate" (or the kernel's killer)."""
    import subprocess
    import sys

    code = ("import resource, numpy as np\n"
            "from tinygrad_attn import memory\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))\n"
            "room = memory.available_bytes()\n"
            "assert room is not None and room <= 3 << 30, room\n"
            "try:\n"
            "    memory.check_fits('op', 'an array', (2 << 30,), 4)\n"
            "except MemoryError as err:\n"
            "    assert 'more than the' in str(err), err\n"
            "else:\n"
            "    raise SystemExit('no MemoryError')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
