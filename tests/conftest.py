"""Shared test settings and hypothesis strategies.

Every gradcheck runs in float64. `arrays(shape)` draws float64 data that may
be a non-contiguous view (a transpose of its storage), so ops are checked on
strided inputs too.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import tinygrad_attn as ta

settings.register_profile(
    "default",
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("default")


@st.composite
def arrays(draw, shape, low=-2.0, high=2.0):
    """float64 data of `shape`, sometimes stored transposed (a non-contiguous view)."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if len(shape) >= 2 and draw(st.booleans()):
        return np.ascontiguousarray(rng.uniform(low, high, shape[::-1])).T
    return rng.uniform(low, high, shape)


def shapes(min_dims=0, max_dims=3, max_side=3, min_side=0):
    """Tensor shapes with sizes from min_side to max_side. 0 (an empty dim) is drawn too by default, a tenth
    as often as the others together, so that most examples still hold data; size 1 is as likely as any."""
    sizes = [n for n in range(max(min_side, 1), max_side + 1) for _ in range(3)]
    return st.lists(st.sampled_from([0] * (min_side == 0) + sizes), min_size=min_dims, max_size=max_dims).map(tuple)


@pytest.fixture(params=["math", "flash"])
def sdpa_path(request):
    """Runs the test once on each attention implementation, as minitorch runs its tests on each backend."""
    with ta.sdpa_kernel(request.param):
        yield request.param


# The files that take longest with an empty numba cache (compiles, notebooks, scripts), collected first:
# `-n auto --dist loadfile` (pyproject.toml) hands whole files to the workers in collection order, so that no
# long file is left to run alone at the end.
LONGEST_FILES = ("test_kernels.py", "test_attention_core.py", "test_notebooks.py", "test_examples.py",
                 "test_flex_compiled.py", "test_explorer_browser.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


ATTENTION_PRODUCTS = ["blas", "loops"]


def share_work_among_threads(patch, n: int, products: str = "blas") -> None:
    """With `patch` (a pytest MonkeyPatch): as after ta.set_num_threads(n), work is shared among n threads
    however small it is; with products="loops", attention's tile products are the compiled loops that run
    where numpy's BLAS is not OpenBLAS."""
    from tinygrad_attn.kernels import flash, parallel

    patch.setattr(parallel, "MIN_ATTENTION_WORK", 0)
    patch.setattr(parallel, "MIN_ROWS_WORK", 0)
    patch.setattr(parallel, "blas_threads", lambda: 1)
    patch.setattr(parallel, "_num_threads", n)
    if products == "loops":
        patch.setattr(flash, "kernel_gemm", lambda dtype: (None, True))


def products_on_numba_threads(patch, blas_threads: int = 2, private: bool = False) -> list:
    """With `patch` (a pytest MonkeyPatch), matrix products are cut into blocks on numba's threads however
    small, as by default on 3 CPUs without a private OpenBLAS copy (blas_threads > 1: blocks of at most 8
    multiply-adds, so that every product crosses many blocks and chunks of its inner dimension), or after
    ta.set_num_threads(3) (blas_threads 1), or by default with the private copy (`private`): one whole block
    per thread; returns the list that records each such product."""
    from tinygrad_attn.kernels import blas, parallel

    def kernel_gemm(dtype):
        if blas_threads == 1:
            return blas.gemm_for(dtype), True
        return (blas._private_gemm(dtype), True) if private else (blas.gemm_for(dtype), False)

    patch.setattr(parallel, "kernel_gemm", kernel_gemm)

    calls = []
    patch.setattr(parallel, "MIN_PRODUCT_WORK", 0)
    patch.setattr(parallel, "ONE_THREAD_PRODUCT", 0)
    patch.setattr(blas, "ONE_THREAD_PRODUCT", 8)
    patch.setattr(parallel, "blas_threads", lambda: blas_threads)
    patch.setattr(parallel, "_num_threads", 3)
    kernel = parallel.matmul_blocks_parallel
    patch.setattr(parallel, "matmul_blocks_parallel",
                  lambda *args: calls.append(1) or parallel.any_layout(kernel)(*args))  # the library's version
    return calls
