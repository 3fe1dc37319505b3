"""Regression tests for what a hostile-input session found (issue 21): each call here once
ran wrong, crashed with an error that did not name the argument, or ran out of memory
before validating. Each must now raise the library's error naming the argument (and write
nothing), or compute what SPEC says."""
import numpy as np
import pytest

import flashattn
import flashattn.arrays
from conftest import randn

Invalid = flashattn.InvalidArgumentError


def _qkv(rng, shape=(1, 8, 2, 16)):
    return tuple(randn(rng, shape) for _ in range(3))


def test_nan_in_a_value_only_reaches_rows_that_see_it(rng):
    q, k, v = _qkv(rng, (1, 8, 1, 16))
    v[0, 7, 0, 0] = np.nan
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert np.isnan(out[0, 7, 0, 0])
    assert np.isfinite(np.delete(out, 7, axis=1)).all()
    assert np.isfinite(out[0, 7, 0, 1:]).all()


def test_zero_softmax_scale_is_a_scale_of_zero(rng):
    """flash-attn reads softmax_scale=0.0 literally: every score is 0, so out averages the
    visible values and the returned probabilities agree with out."""
    q, k, v = _qkv(rng)
    out = flashattn.flash_attn_func(q, k, v, softmax_scale=0.0, causal=True)
    visible = np.tril(np.ones((8, 8)))
    expected = np.einsum("ij,bjhd->bihd", visible / visible.sum(1, keepdims=True), v)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    out, lse, p = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, softmax_scale=0.0,
                                            causal=True, return_attn_probs=True)
    np.testing.assert_allclose(lse[0, 0], np.log(np.arange(1, 9)), atol=1e-5)
    p = p[:, :, :8, :8]
    np.testing.assert_allclose(np.abs(p).sum(-1), 1.0, atol=1e-5)
    kept = np.where(p > 0, p, 0) / (1 - 0.3)
    np.testing.assert_allclose(out, np.einsum("bhij,bjhd->bihd", kept, v), atol=1e-5)


@pytest.mark.parametrize("name", ["cache_seqlens", "cache_batch_idx", "block_table"])
def test_int64_indices_that_do_not_fit_int32(rng, name):
    q = randn(rng, (1, 1, 2, 16))
    k_cache, v_cache = randn(rng, (2, 16, 2, 16)), randn(rng, (2, 16, 2, 16))
    kwargs = dict(cache_seqlens=np.array([3]))
    kwargs[name] = np.array([2**32 + 3]) if name != "block_table" else np.array([[2**32]])
    before = k_cache.copy()
    with pytest.raises(Invalid, match=rf"^{name}: expected values that fit int32"):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, **kwargs)
    np.testing.assert_array_equal(k_cache, before)


def test_int64_cu_seqlens_that_do_not_fit_int32(rng):
    q = randn(rng, (8, 2, 16))
    cu = np.array([0, 2**32 + 8])
    with pytest.raises(Invalid, match=r"^cu_seqlens_q: expected values that fit int32"):
        flashattn.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)


@pytest.mark.parametrize("table, message", [
    ([[-2, -1]], r"^block_table: expected \[0, 0\] a page index in 0\.\.3, got -2$"),
    ([[0, 7]], r"^block_table: expected \[0, 1\] a page index in 0\.\.3, got 7$"),
    ([0, 1], r"^block_table: expected shape \[batch=1, max_pages\], got shape \[2\]$"),
    ([[0.0, 1.0]], r"^block_table: expected an integer array"),
    ([[0]], r"^block_table: expected at least 2 columns"),
])
def test_varlen_block_table(rng, table, message):
    q = randn(rng, (20, 2, 16))
    pages = randn(rng, (4, 16, 2, 16))
    cu_q = np.array([0, 20], dtype=np.int32)
    cu_k = np.array([0, 20], dtype=np.int32)
    with pytest.raises(Invalid, match=message):
        flashattn.flash_attn_varlen_func(q, pages, pages, cu_q, cu_k, 20, 20,
                                         block_table=np.array(table))


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: flashattn.flash_attn_func(q, k, v, window_size=(2**40, 0)),
     r"^window_size\[0\]: expected an integer that fits int32"),
    (lambda q, k, v: flashattn.flash_attn_func(q, k, None), r"^v: expected an array, got None"),
    (lambda q, k, v: flashattn.flash_attn_func(np.zeros((), np.float32), k, v),
     r"^q: expected rank 4"),
    (lambda q, k, v: flashattn.flash_attn_func(q[..., :0], k[..., :0], v[..., :0]),
     r"^q: expected head_dim in 1\.\.256, got 0"),
    (lambda q, k, v: flashattn.flash_attn_func(q.astype(">f4"), k, v),
     r"^q: expected an array in the machine's byte order, got byte-swapped float32"),
])
def test_errors_name_the_argument(rng, call, message):
    q, k, v = _qkv(rng)
    with pytest.raises(Invalid, match=message):
        call(q, k, v)


def test_varlen_and_kvcache_sizes_that_do_not_fit_int32(rng):
    q = randn(rng, (8, 2, 16))
    cu = np.array([0, 8], dtype=np.int32)
    with pytest.raises(Invalid, match=r"^max_seqlen_k: expected an integer that fits int32"):
        flashattn.flash_attn_varlen_func(q, q, q, cu, cu, 8, 2**31)
    cache = randn(rng, (1, 16, 2, 16))
    with pytest.raises(Invalid, match=r"^num_splits: expected an integer that fits int32"):
        flashattn.flash_attn_with_kvcache(q[None, :1], cache, cache, cache_seqlens=4,
                                          num_splits=2**33)


def test_huge_invalid_shape_is_an_error_not_a_memory_error(rng):
    """The outputs of a call with 2^31 query rows would not fit in memory; the call is
    invalid anyway (sizes are int32), and the library says so before anything is allocated."""
    base = np.zeros(16, dtype=np.float32)
    q = np.lib.stride_tricks.as_strided(base, (1, 2**31, 1, 16), (0, 0, 0, 4))
    k = randn(rng, (1, 8, 1, 16))
    with pytest.raises(Invalid, match=r"^q: expected every size <= 2\^31-1"):
        flashattn.flash_attn_func(q, k, k)


def test_arrays_seqused_k_needs_the_packed_layout(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(Invalid, match=r"^cu_seqlens_q: expected an array, since seqused_k"):
        flashattn.arrays.forward(q, k, v, seqused_k=np.array([4], dtype=np.int32))


def test_torch_cpu_tensors_get_the_same_errors():
    """The torch frontend goes through the same checks (int64 indices, int32 options, ranks,
    softmax_scale=0.0 as a scale of 0)."""
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(Invalid, match=r"^window_size\[0\]: expected an integer that fits int32"):
        flashattn.flash_attn_func(q, q, q, window_size=(2**40, 0))
    with pytest.raises(Invalid, match=r"^q: expected rank 4"):
        flashattn.flash_attn_func(torch.tensor(1.0), q, q)
    cache = torch.randn(2, 16, 2, 16)
    with pytest.raises(Invalid, match=r"^cache_seqlens: expected values that fit int32"):
        flashattn.flash_attn_with_kvcache(q[:, :1], cache, cache,
                                          cache_seqlens=torch.tensor([2**32 + 3]))
    packed = torch.randn(20, 2, 16)
    cu = torch.tensor([0, 20], dtype=torch.int32)
    with pytest.raises(Invalid, match=r"^block_table: expected \[0, 0\] a page index"):
        flashattn.flash_attn_varlen_func(packed, cache, cache, cu, cu, 20, 20,
                                         block_table=torch.tensor([[-2, -1]], dtype=torch.int32))
    _, lse, _ = flashattn.flash_attn_func(q, q, q, dropout_p=0.3, softmax_scale=0.0, causal=True,
                                          return_attn_probs=True)
    np.testing.assert_allclose(lse[0, 0].numpy(), np.log(np.arange(1, 9)), atol=1e-5)
