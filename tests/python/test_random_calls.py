"""Random calls of flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache on
numpy arrays, valid and not, from a fixed seed: an accepted call agrees with the float64
oracle; a rejected one raises flashattn's InvalidArgumentError or UnsupportedError (or a
TypeError for a non-array) whose message starts with the argument's name, and leaves the
caches as they were. Any other exception (IndexError, ZeroDivisionError, MemoryError, ...)
is a failure: it is how the hostile-input session of issue 21 found its bugs."""
import re

import numpy as np
import pytest

import flashattn
import reference_attention as ref
from conftest import TOLERANCE

CALLS = 1500

NAMES = {"q", "k", "v", "k_cache", "v_cache", "cache_seqlens", "cache_batch_idx",
         "block_table", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
         "window_size", "window_size[0]", "window_size[1]", "softcap", "dropout_p",
         "alibi_slopes", "num_splits", "softmax_scale", "out", "lse", "options.softcap",
         "options.dropout_p", "options.softmax_scale", "options.window_left",
         "options.window_right", "options.alibi_slopes", "varlen.cu_seqlens_q",
         "varlen.cu_seqlens_k", "varlen.max_seqlen_q", "varlen.max_seqlen_k", "k_new", "v_new"}
EDGES = [0, 1, -1, 2, 7, 255, 257, 2**31 - 1, 2**31, -2**31 - 1, 2**40]


def _expect_named(error):
    name = re.match(r"^([\w.\[\]]+): ", str(error))
    assert name and name.group(1) in NAMES, f"{type(error).__name__}: {error}"


def _array(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _dtype(rng):
    return rng.choice([np.float32, np.float32, np.float16, np.float64, np.int32, ">f4"])


def _options(rng):
    options = {}
    if rng.random() < 0.4:
        options["causal"] = bool(rng.random() < 0.5)
    if rng.random() < 0.3:
        options["window_size"] = (int(rng.choice([-1, 0, 3] + EDGES)),
                                  int(rng.choice([-1, 0, 5] + EDGES)))
    if rng.random() < 0.2:
        options["softcap"] = float(rng.choice([0.0, 5.0, -1.0, np.nan, np.inf]))
    if rng.random() < 0.3:
        options["softmax_scale"] = float(rng.choice([0.0, 0.1, 0.5, np.nan]))
    return options


def _reference_options(options):
    window = options.get("window_size", (-1, -1))
    return dict(softmax_scale=options.get("softmax_scale"), causal=options.get("causal", False),
                window=window, softcap=options.get("softcap", 0.0))


def _dense_call(rng):
    batch, sq, sk = (int(rng.choice(v)) for v in ([0, 1, 2], [0, 1, 5, 33], [0, 1, 4, 40]))
    heads_k = int(rng.choice([1, 2, 3]))
    heads = heads_k * int(rng.choice([1, 2]))
    dim = int(rng.choice([0, 1, 8, 16, 40, 300]))
    dtype = _dtype(rng) if rng.random() < 0.2 else np.float32
    q = _array(rng, (batch, sq, heads, dim), dtype)
    k = _array(rng, (batch, sk, heads_k, dim), dtype)
    v = _array(rng, (batch, sk, heads_k, dim), dtype)
    mutation = rng.integers(0, 8)
    if mutation == 1:
        k = k[..., : max(dim - 1, 0)]
    elif mutation == 2:
        v = None
    elif mutation == 3:
        q = q[0] if batch else q
    elif mutation == 4:
        k = np.ascontiguousarray(np.swapaxes(k, 1, 2))
    return q, k, v, _options(rng)


def _oracle(q, k, v, options):
    """The float64 oracle, which needs at least one query and one key: with none, every
    output row is 0 (a row without visible keys)."""
    if q.size == 0 or k.shape[1] == 0:
        return np.zeros(q.shape[:-1] + (v.shape[-1],))
    return ref.attention(q, k, v, **_reference_options(options))[0]


def _check_dense(q, k, v, options):
    try:
        out = flashattn.flash_attn_func(q, k, v, **options)
    except (flashattn.InvalidArgumentError, flashattn.UnsupportedError, TypeError) as error:
        _expect_named(error)
        return "rejected"
    expected = _oracle(q, k, v, options)
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(out), finite)
    error = np.abs(out.astype(np.float64) - expected)[finite].max(initial=0.0)
    assert error <= 4 * TOLERANCE[np.dtype(q.dtype).name], f"max abs error {error}"
    return "accepted"


def _kvcache_call(rng):
    batch = int(rng.choice([1, 2]))
    capacity, heads_k, dim = 32, 2, 16
    k_cache = _array(rng, (batch, capacity, heads_k, dim), np.float32)
    v_cache = _array(rng, (batch, capacity, heads_k, dim), np.float32)
    q = _array(rng, (batch, int(rng.choice([1, 3])), 4, dim), np.float32)
    seqlens = rng.integers(0, capacity - 4, size=batch)
    kwargs = dict(cache_seqlens=seqlens.astype(rng.choice([np.int32, np.int64])))
    mutation = rng.integers(0, 7)
    if mutation == 1:
        kwargs["cache_seqlens"] = seqlens + int(rng.choice([capacity, 2**32, -capacity]))
    elif mutation == 2:
        kwargs["cache_batch_idx"] = np.array([int(rng.choice(EDGES))] * batch)
    elif mutation == 3:
        kwargs["num_splits"] = int(rng.choice(EDGES + [-1]))
    elif mutation == 4:
        kwargs["block_table"] = np.array([[int(rng.choice(EDGES))]] * batch)
    new = _array(rng, (batch, 2, heads_k, dim), np.float32) if rng.random() < 0.5 else None
    return q, k_cache, v_cache, new, kwargs, _options(rng)


def _check_kvcache(q, k_cache, v_cache, new, kwargs, options):
    before = (k_cache.copy(), v_cache.copy())
    try:
        out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, **kwargs,
                                                **options)
    except (flashattn.InvalidArgumentError, flashattn.UnsupportedError, TypeError) as error:
        _expect_named(error)
        np.testing.assert_array_equal(k_cache, before[0])
        np.testing.assert_array_equal(v_cache, before[1])
        return "rejected"
    assert out.shape == q.shape
    seqlens = np.asarray(kwargs["cache_seqlens"]) + (0 if new is None else new.shape[1])
    for b in range(q.shape[0]):
        # The cache row of entry b: cache_batch_idx[b], or its one page of block_table.
        row = b
        if "cache_batch_idx" in kwargs:
            row = int(kwargs["cache_batch_idx"][b])
        if "block_table" in kwargs:
            row = int(kwargs["block_table"][b][0])
        expected = _oracle(q[b:b + 1], k_cache[row:row + 1, :seqlens[b]],
                           v_cache[row:row + 1, :seqlens[b]], options)
        finite = np.isfinite(expected)
        assert np.array_equal(np.isfinite(out[b:b + 1]), finite)
        assert np.abs(out[b:b + 1] - expected)[finite].max(initial=0.0) <= 4 * TOLERANCE["float32"]
    return "accepted"


def test_random_calls():
    rng = np.random.default_rng(21)
    outcomes = {"accepted": 0, "rejected": 0}
    for call in range(CALLS):
        kind = rng.integers(0, 2)
        case = _dense_call(rng) if kind == 0 else _kvcache_call(rng)
        try:
            outcomes[(_check_dense if kind == 0 else _check_kvcache)(*case)] += 1
        except AssertionError as failure:
            raise AssertionError(f"call {call}: {failure}") from None
    print(f"{CALLS} random calls: {outcomes}")
    assert outcomes["accepted"] > CALLS // 10 and outcomes["rejected"] > CALLS // 10
