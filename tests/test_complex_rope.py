"""Complex numbers for rotary embeddings written PyTorch's way (polar, view_as_complex, view_as_real, complex
products): values against numpy's complex arithmetic, gradients against finite differences, Meta-Llama-style
RoPE against the library's own rotary (interleaved) and against PyTorch when installed."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.nn.rotary import apply_rotary, rotary_angles


def precompute_freqs_cis(dim, end, lib, theta=10000.0):
    freqs = 1.0 / (theta ** (lib.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = lib.arange(end)
    freqs = lib.outer(t, freqs).float()
    return lib.polar(lib.ones_like(freqs), freqs)


def apply_rotary_emb(xq, freqs_cis, lib):
    xq_ = lib.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    return lib.view_as_real(xq_ * freqs_cis.view(*shape)).flatten(3).type_as(xq)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), shape=st.sampled_from([(3,), (2, 4), (1, 2, 3)]))
def test_products_and_parts_equal_numpys_complex_arithmetic(seed, shape):
    rng = np.random.default_rng(seed)
    a, b, c, d = (rng.normal(size=shape) for _ in range(4))
    x = ta.view_as_complex(ta.tensor(np.stack([a, b], -1)))
    y = ta.complex(ta.tensor(c), ta.tensor(d))
    want = (a + 1j * b) * (c + 1j * d)
    np.testing.assert_allclose((x * y).numpy(), want, atol=1e-12)
    np.testing.assert_allclose(ta.view_as_real(x * y).numpy(), np.stack([want.real, want.imag], -1), atol=1e-12)
    np.testing.assert_allclose((x + y - x).numpy(), c + 1j * d, atol=1e-12)
    np.testing.assert_allclose((x * 2.0).real.numpy(), 2 * a, atol=1e-12)
    np.testing.assert_allclose(x.conj().imag.numpy(), -b, atol=1e-12)
    np.testing.assert_allclose(x.abs().numpy(), np.abs(a + 1j * b), atol=1e-12)
    polar = ta.polar(ta.tensor(np.abs(c)), ta.tensor(d))
    np.testing.assert_allclose(polar.numpy(), np.abs(c) * np.exp(1j * d), atol=1e-12)
    assert x.shape == shape and x.dtype == "complex128" and polar.ndim == len(shape)


def test_gradients_of_a_real_loss_through_complex_products_against_finite_differences():
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.normal(size=(2, 3, 4)), requires_grad=True)
    angles = ta.tensor(rng.normal(size=(3, 2)), requires_grad=True)

    def rotate(a, theta):
        z = ta.view_as_complex(a.reshape(2, 3, 2, 2)) * ta.polar(ta.ones_like(theta), theta)
        return ta.view_as_real(z).flatten(2) ** 2

    assert ta.gradcheck(rotate, [x, angles])
    assert ta.gradgradcheck(rotate, [x, angles])


def test_meta_llama_rope_equals_the_interleaved_rotary_and_pytorchs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)  # (B, T, H, d), as Llama's attention holds it
    ours = apply_rotary_emb(ta.tensor(x), precompute_freqs_cis(8, 5, ta), ta).numpy()
    angles = rotary_angles(np.arange(5), 8)  # (T, d/2)
    want = apply_rotary(ta.tensor(x.transpose(0, 2, 1, 3)), angles, interleaved=True).numpy().transpose(0, 2, 1, 3)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
    assert ours.dtype == np.float32


@pytest.mark.torch_parity
def test_meta_llama_rope_equals_pytorchs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    want = apply_rotary_emb(xt, precompute_freqs_cis(8, 6, torch), torch)
    mine = ta.tensor(x, requires_grad=True)
    got = apply_rotary_emb(mine, precompute_freqs_cis(8, 6, ta), ta)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    weights = rng.normal(size=x.shape).astype(np.float32)
    (want * torch.tensor(weights)).sum().backward()
    (got * ta.tensor(weights)).sum().backward()
    np.testing.assert_allclose(mine.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    freqs = precompute_freqs_cis(8, 6, torch)
    ours = precompute_freqs_cis(8, 6, ta)
    assert ours.dtype == str(freqs.dtype).replace("torch.", "") and ours.shape == tuple(freqs.shape)
    np.testing.assert_allclose(ours.real.numpy(), freqs.real.numpy(), rtol=1e-5, atol=1e-6)
    a, b = x[..., 0], x[..., 1]
    np.testing.assert_allclose(ta.complex(ta.tensor(a), ta.tensor(b)).numpy(),
                               torch.complex(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-6)


def test_bad_complex_inputs_are_one_clear_error():
    with pytest.raises(ValueError, match="last dim is 2"):
        ta.view_as_complex(ta.tensor(np.zeros((2, 3))))
    with pytest.raises(TypeError, match="needs a complex tensor"):
        ta.view_as_real(ta.tensor(np.zeros((2, 2))))
    with pytest.raises(TypeError, match="one dtype"):
        ta.polar(ta.tensor(np.zeros(2, np.float32)), ta.tensor(np.zeros(2)))
    with pytest.raises(AttributeError, match="ComplexTensor has no 'matmul'"):
        _ = ta.view_as_complex(ta.tensor(np.zeros((2, 2)))).matmul
