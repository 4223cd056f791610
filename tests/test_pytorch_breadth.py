"""Names PyTorch programs meet on a CPU-only machine, and small differences that stopped them: each behaves
as PyTorch does there (checked against PyTorch when it is installed)."""

import warnings

import numpy as np
import pytest

import tinygrad_attn as ta


def test_cpu_only_module_paths_take_the_single_process_branch():
    assert not ta.cuda.is_available() and not ta.distributed.is_available() and not ta.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="no distributed backend"):
        ta.distributed.init_process_group("gloo")
    ta.backends.cuda.matmul.allow_tf32 = True  # settable and harmless, as on a CPU-only PyTorch
    ta.backends.cudnn.allow_tf32, ta.backends.cudnn.benchmark = True, True
    assert not ta.backends.cudnn.is_available()


def test_autocast_and_grad_scaler_change_nothing():
    layer = ta.nn.Linear(3, 1)
    optimizer = ta.optim.SGD(layer.parameters(), lr=0.1)
    scaler = ta.amp.GradScaler(enabled=False)
    x = ta.ones(2, 3)
    before = layer.weight.detach().numpy().copy()
    for autocast in (ta.amp.autocast(device_type="cpu", dtype=ta.float16), ta.cuda.amp.autocast()):
        with autocast:
            loss = layer(x).sum()
        assert loss.dtype == np.float32
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    np.testing.assert_allclose(layer.weight.detach().numpy(), before - 0.1 * 2.0, rtol=1e-6)


def test_compile_runs_eagerly_with_one_note():
    layer = ta.nn.Linear(2, 2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compiled = ta.compile(layer)
        decorated = ta.compile(mode="max-autotune")(lambda t: t * 2)
    assert compiled is layer and decorated(ta.ones(1)).tolist() == [2.0]
    assert len([w for w in seen if "eagerly" in str(w.message)]) <= 1


def test_sdpa_kernel_takes_pytorchs_backend_names():
    from tinygrad_attn.nn.attention import SDPBackend, sdpa_kernel
    q = ta.randn(1, 2, 3, 4)
    with sdpa_kernel(SDPBackend.MATH):
        _, weights = ta.nn.functional.scaled_dot_product_attention(q, q, q, return_weights=True)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), pytest.raises(RuntimeError):
        ta.nn.functional.scaled_dot_product_attention(q, q, q, return_weights=True)  # weights need the math path
    assert weights.shape == (1, 2, 3, 3)


def test_small_api_differences():
    assert ta.randint(10, (3,)).shape == (3,) and ta.randint(2, 5, (4,)).min().item() >= 2
    assert f"{ta.tensor(3.14159):.2f}" == "3.14" and f"{ta.tensor(7)}" == "7"
    assert ta.tensor([7, -7]).div(2, rounding_mode="floor").tolist() == [3, -4]
    assert ta.tensor([7.0, -7.0]).div(2, rounding_mode="trunc").tolist() == [3.0, -3.0]
    with pytest.raises(ValueError, match="rounding_mode"):
        ta.tensor([1.0]).div(2, rounding_mode="round")
    beams = ta.tensor([[1.0, 2.0, 3.0]]).masked_fill(ta.tensor([[True, False, False], [False, False, True]]), 0.0)
    assert beams.tolist() == [[0.0, 2.0, 3.0], [1.0, 2.0, 0.0]]  # self broadcast to the mask's (beam, L)
    w = ta.empty(3, 3)
    ta.nn.init.normal(w)
    ta.nn.init.xavier_uniform(w)
    ta.nn.init.constant(w, 0.5)
    assert w.tolist() == [[0.5] * 3] * 3


def test_a_random_sampler_with_replacement_draws_lazily():
    sampler = ta.utils.data.RandomSampler(range(10), replacement=True, num_samples=int(1e10), generator=None)
    assert len(sampler) == 10**10
    first = [i for _, i in zip(range(100), sampler)]  # PyTorch draws as it goes: no 74 GiB up front
    assert len(first) == 100 and all(0 <= i < 10 for i in first)


@pytest.mark.torch_parity
def test_the_same_against_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (ta, torch):
        assert lib.randint(10, (3,)).shape == (3,)
        assert f"{lib.tensor(2.5):.3f}" == "2.500"
    for mode in ("floor", "trunc"):
        assert ta.tensor([7, -7, 5]).div(-2, rounding_mode=mode).tolist() == \
            torch.tensor([7, -7, 5]).div(-2, rounding_mode=mode).tolist()
    mask = [[True, False, False], [False, False, True]]
    assert ta.tensor([[1.0, 2.0, 3.0]]).masked_fill(ta.tensor(mask), 0.0).tolist() == \
        torch.tensor([[1.0, 2.0, 3.0]]).masked_fill(torch.tensor(mask), 0.0).tolist()
