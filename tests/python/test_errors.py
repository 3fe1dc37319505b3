"""Invalid calls raise flashattn's exceptions with the library's message (which names the
argument and the expected value), and write nothing."""
import numpy as np
import pytest

import flashattn
import flashattn.arrays
from conftest import randn


def _qkv(rng, heads_k=2):
    return (randn(rng, (1, 8, 4, 16)), randn(rng, (1, 8, heads_k, 16)),
            randn(rng, (1, 8, heads_k, 16)))


def test_heads_not_dividing(rng):
    q, k, v = _qkv(rng, heads_k=3)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"^k: expected nheads_k dividing nheads=4, got 3$"):
        flashattn.flash_attn_func(q, k, v)


def test_exception_hierarchy():
    assert issubclass(flashattn.InvalidArgumentError, ValueError)
    assert issubclass(flashattn.InvalidArgumentError, flashattn.Error)
    assert issubclass(flashattn.UnsupportedError, NotImplementedError)
    assert issubclass(flashattn.Error, RuntimeError)


@pytest.mark.parametrize("call, message", [
    (dict(dropout_p=1.0), r"dropout_p: expected a probability in \[0, 1\), got 1"),
    (dict(softcap=-1.0), r"softcap: expected a finite value >= 0"),
    (dict(window_size=(1, 2, 3)), r"window_size: expected a pair"),
    (dict(alibi_slopes=np.ones(3, dtype=np.float32)), r"alibi_slopes: expected shape"),
])
def test_option_errors(rng, call, message):
    q, k, v = _qkv(rng)
    with pytest.raises(flashattn.InvalidArgumentError, match=message):
        flashattn.flash_attn_func(q, k, v, **call)


def test_causal_with_right_window(rng):
    """The library's C++ API rejects the pair; the Python functions (flash_attn_* and
    flashattn.arrays alike) let causal win, as flash-attn does."""
    q, k, v = _qkv(rng)
    expected = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(3, 0))
    np.testing.assert_array_equal(
        flashattn.flash_attn_func(q, k, v, causal=True, window_size=(3, 4)), expected)
    np.testing.assert_array_equal(
        flashattn.arrays.forward(q, k, v, causal=True, window_size=(3, 4))[0], expected)


def test_dtype_mismatch_and_unsupported_dtype(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"^k: expected dtype fp32"):
        flashattn.flash_attn_func(q, k.astype(np.float16), v)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"^q: expected dtype float32"):
        flashattn.flash_attn_func(q.astype(np.float64), k, v)


def test_shape_errors(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"^q: expected rank 4"):
        flashattn.flash_attn_func(q[0], k, v)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"^v: "):
        flashattn.flash_attn_func(q, k, v[:, :5])


def test_bad_cu_seqlens(rng):
    q = randn(rng, (10, 2, 8))
    bad = np.array([0, 6, 4, 10], dtype=np.int32)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"cu_seqlens_q: expected non-decreasing"):
        flashattn.flash_attn_varlen_func(q, q, q, bad, bad, 10, 10)
    short = np.array([0, 6, 9], dtype=np.int32)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"last entry"):
        flashattn.flash_attn_varlen_func(q, q, q, short, short, 10, 10)


def test_kvcache_overflow_writes_nothing(rng):
    k_cache = randn(rng, (1, 8, 2, 16))
    v_cache = randn(rng, (1, 8, 2, 16))
    before = k_cache.copy()
    q, new = randn(rng, (1, 4, 4, 16)), randn(rng, (1, 4, 2, 16))
    with pytest.raises(flashattn.InvalidArgumentError, match=r"cache_seqlens"):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=6)
    np.testing.assert_array_equal(k_cache, before)


def test_wrong_types():
    with pytest.raises(TypeError, match="q: expected a torch.Tensor or a numpy array"):
        flashattn.flash_attn_func([[1.0]], [[1.0]], [[1.0]])


def test_cuda_unavailable_is_unsupported(rng):
    """CUDA tensors in a build or process without a GPU: UnsupportedError, saying why."""
    if flashattn.cuda_available():
        pytest.skip("a GPU is visible")
    from flashattn import _C
    from flashattn._numpy_arrays import NumpyArrays
    q, k, v = (x.astype(np.float16) for x in _qkv(rng))
    args = _C.ForwardArgs()
    for field, array in (("q", q), ("k", k), ("v", v), ("out", np.empty_like(q))):
        host = NumpyArrays.describe(array, field)
        setattr(args, field, _C.Tensor(host.data, host.dtype, host.shape, host.strides,
                                       _C.DeviceType.CUDA, 0))
    reason = _C.supported(args)
    assert reason is not None and "CUDA" in reason
    assert _C.supported(args, _C.Backend.REFERENCE) is not None  # host backend, device memory
    with pytest.raises(flashattn.UnsupportedError, match="CUDA"):
        _C.forward(args)
