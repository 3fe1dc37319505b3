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
