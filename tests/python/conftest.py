"""Shared helpers of the Python tests: seeded inputs, dtypes, tolerances, optional torch."""
import zlib

import numpy as np
import pytest

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # numpy alone has no bfloat16
    BFLOAT16 = None

NUMPY_DTYPES = [np.dtype(np.float32), np.dtype(np.float16)] + (
    [BFLOAT16] if BFLOAT16 is not None else [])

# Max abs error allowed against the float64 oracle computed on the same (rounded) inputs:
# P and the output are rounded to the dtype inside the kernels (docs/contract.md, FA2's rule).
TOLERANCE = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name: fresh inputs per test, same on every run."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def assert_close(actual, expected, dtype, scale=1.0):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    assert not np.isnan(actual).any()
    error = np.abs(actual - expected).max(initial=0.0)
    assert error <= TOLERANCE[np.dtype(dtype).name] * scale, f"max abs error {error}"


def assert_lse_close(actual, expected, dtype):
    """lse rows with no visible key are -inf in both."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.dtype == np.float64 and np.array_equal(np.isinf(actual), np.isinf(expected))
    finite = np.isfinite(expected)
    assert_close(actual[finite], expected[finite], dtype)


def count_torch_forwards(monkeypatch):
    """Counts, for the rest of the test, the dense and varlen forwards that reach flashattn's
    library from torch: the Python path (_torch_ops.forward_with_options) and the torch
    extension (_torch_ext.attention, when it takes the call). Returns the live counts."""
    import flashattn._torch_ext
    import flashattn._torch_ops

    calls = {"dense": 0, "varlen": 0}
    forward = flashattn._torch_ops.forward_with_options
    extension = flashattn._torch_ext.attention

    def counting(q, k, v, cu_seqlens_q, *rest, **kwargs):
        calls["varlen" if cu_seqlens_q is not None else "dense"] += 1
        return forward(q, k, v, cu_seqlens_q, *rest, **kwargs)

    def counting_extension(q, k, v, varlen, *rest, **kwargs):
        result = extension(q, k, v, varlen, *rest, **kwargs)
        if result is not None:
            calls["varlen" if varlen[0] is not None else "dense"] += 1
        return result

    monkeypatch.setattr(flashattn._torch_ops, "forward_with_options", counting)
    monkeypatch.setattr(flashattn._torch_ext, "attention", counting_extension)
    return calls
