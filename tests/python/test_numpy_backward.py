"""flashattn.arrays.backward: the gradients through the binding, against the float64
oracle's analytic gradients."""
import numpy as np
import pytest

import flashattn.arrays
import reference_attention as ref
from conftest import assert_close, randn


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(window_size=(3, 2)),
                                     dict(softcap=2.0, causal=True),
                                     dict(alibi_slopes=np.array([0.5, 0.25, 0.1, 0.05],
                                                                dtype=np.float32))],
                         ids=["full", "causal", "window", "softcap", "alibi"])
def test_backward_matches_reference(rng, options):
    q = randn(rng, (2, 21, 4, 16))
    k = randn(rng, (2, 30, 2, 16))
    v = randn(rng, (2, 30, 2, 16))
    dout = randn(rng, (2, 21, 4, 16))
    out, lse = flashattn.arrays.forward(q, k, v, **options)
    grads = flashattn.arrays.backward(dout, q, k, v, out, lse, deterministic=True, **options)
    window = options.pop("window_size", (-1, -1))
    expected = ref.attention_backward(dout, q, k, v, window=window, **options)
    for grad, want in zip(grads, expected):
        assert grad.shape == want.shape
        assert_close(grad, want, np.float32, scale=5)


def test_varlen_backward(rng):
    cu_q = np.array([0, 4, 4, 13], dtype=np.int32)
    cu_k = np.array([0, 6, 9, 20], dtype=np.int32)
    q, dout = randn(rng, (13, 2, 8)), randn(rng, (13, 2, 8))
    k, v = randn(rng, (20, 1, 8)), randn(rng, (20, 1, 8))
    out, lse = flashattn.arrays.forward(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                        causal=True)
    dq, dk, dv = flashattn.arrays.backward(dout, q, k, v, out, lse, cu_seqlens_q=cu_q,
                                           cu_seqlens_k=cu_k, causal=True)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = ref.attention_backward(dout[None, qs], q[None, qs], k[None, ks], v[None, ks],
                                      causal=True)
        for grad, rows, expected in zip((dq, dk, dv), (qs, ks, ks), want):
            assert_close(grad[rows], expected[0], np.float32, scale=5)
