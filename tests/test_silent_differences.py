"""Differences from PyTorch that gave a result silently: each now gives PyTorch's result or PyTorch's error.
Closed forms and numpy here; the same cases against PyTorch itself when it is installed."""

import numpy as np
import pytest

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64, np.bool_, np.float32])
def test_min_amin_minimum_and_topk_are_exact_for_every_dtype(dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    values = np.array([0, 1, 0, 1]) if dtype is np.bool_ else np.array([0, 128, 255, 7]) if dtype is np.uint8 else (
        np.array([info.min, -1, info.max, 0]) if info else np.array([-np.inf, 2.5, -0.5, 3.0]))
    x = ta.tensor(values.astype(dtype))
    assert x.min().item() == values.astype(dtype).min() and x.amin().item() == values.astype(dtype).min()
    assert x.min(dim=0).values.item() == values.astype(dtype).min()
    other = ta.tensor(values[::-1].astype(dtype))
    expected = np.minimum(values.astype(dtype), values[::-1].astype(dtype))
    np.testing.assert_array_equal(ta.minimum(x, other).numpy(), expected)
    if dtype is not np.bool_:
        top = x.topk(2)
        np.testing.assert_array_equal(top.values.numpy(), np.sort(values.astype(dtype))[::-1][:2])
        low = x.topk(2, largest=False)
        np.testing.assert_array_equal(low.values.numpy(), np.sort(values.astype(dtype))[:2])


def test_min_of_a_float_tensor_still_has_its_gradient_shared_among_ties():
    x = ta.tensor([3.0, 1.0, 1.0, 2.0], requires_grad=True, dtype=ta.float64)
    x.amin().backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5, 0.0]
    assert ta.gradcheck(lambda t: ta.minimum(t, t * 0.5), [ta.tensor([0.3, -1.2, 2.0], requires_grad=True,
                                                                     dtype=ta.float64)])


def test_cos_is_computed_as_cos_even_for_large_angles():
    angles = np.array([1e6, -3.7e5, 12345.678, 0.25], np.float32)
    np.testing.assert_allclose(ta.tensor(angles).cos().numpy(), np.cos(angles), rtol=0, atol=2e-7)


def test_power_zero_has_zero_gradient_and_integer_powers_follow_pytorchs_dtypes():
    x = ta.tensor([0.0, 2.0], requires_grad=True)
    (x**0.0).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    ints = ta.tensor([1, 4, 9])
    assert (ints**0.5).dtype == np.float32 and (ints**0.5).tolist() == [1.0, 2.0, 3.0]
    assert (ints**2).dtype == np.int64 and (ints**2).tolist() == [1, 16, 81]
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        ints ** -1


def test_cumsum_and_nonzero_of_a_0d_tensor_keep_pytorchs_shapes():
    assert ta.tensor(3.0).cumsum(0).shape == () and ta.tensor(3.0).cumsum(0).item() == 3.0
    assert ta.tensor(3).cumsum(0).dtype == np.int64
    assert ta.tensor(5.0).nonzero().shape == (1, 0) and ta.tensor(0.0).nonzero().shape == (0, 0)


@pytest.mark.parametrize("other", [[1.0, 2.0, 3.0], (1.0, 2.0, 3.0), None, "x"])
def test_a_list_a_pair_none_or_a_string_operand_is_pytorchs_type_error(other):
    t = ta.ones(3)
    with pytest.raises(TypeError, match="unsupported operand type"):
        t + other
    with pytest.raises(TypeError, match="unsupported operand type"):
        other - t


def test_subtracting_a_max_dim_result_is_a_type_error_not_a_broadcast():
    x = ta.tensor([[1.0, 5.0], [3.0, 2.0]])
    with pytest.raises(TypeError, match="unsupported operand type"):
        x - x.max(dim=-1, keepdim=True)
    assert (x - x.max(dim=-1, keepdim=True).values).tolist() == [[-4.0, 0.0], [0.0, -1.0]]


def test_a_float_attention_mask_that_requires_grad_gets_its_gradient():
    rng = np.random.default_rng(0)
    q, k, v = (ta.tensor(rng.normal(size=(1, 2, 3, 4)), dtype=ta.float64) for _ in range(3))
    bias = ta.tensor(rng.normal(size=(3, 3)), requires_grad=True, dtype=ta.float64)
    assert ta.gradcheck(lambda b: F.scaled_dot_product_attention(q, k, v, attn_mask=b), [bias])
    F.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
    assert bias.grad is not None and np.abs(bias.grad.numpy()).sum() > 0


def test_scatter_with_a_source_of_another_dtype_and_a_bool_linspace_are_refused():
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        ta.zeros(3).half().scatter(0, ta.tensor([0]), ta.ones(1))
    with pytest.raises(RuntimeError, match="linspace"):
        ta.linspace(0, 1, 3, dtype=ta.bool)


@pytest.mark.torch_parity
def test_the_same_cases_against_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (ta, torch):
        lib.manual_seed(0)
    cases = [
        lambda m: m.tensor([0, 128, 255], dtype=m.uint8).min().item(),
        lambda m: m.tensor([-2**63, 0, 5]).min().item(),
        lambda m: m.minimum(m.tensor([0, 200], dtype=m.uint8), m.tensor([100, 7], dtype=m.uint8)).tolist(),
        lambda m: m.tensor([1, 255, 3], dtype=m.uint8).topk(2).values.tolist(),
        lambda m: round(m.tensor([1e6], dtype=m.float32).cos().item(), 6),
        lambda m: str((m.tensor([1, 4]) ** 0.5).dtype).split(".")[-1],
        lambda m: tuple(m.tensor(2.0).cumsum(0).shape),
        lambda m: tuple(m.tensor(2.0).nonzero().shape),
    ]
    for case in cases:
        assert case(ta) == case(torch)
