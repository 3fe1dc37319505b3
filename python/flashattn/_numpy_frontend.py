"""The flash_attn functions on numpy arrays: the CPU backend, forward only (numpy has no
autograd; flashattn.arrays.backward gives the gradients explicitly). Dropout seeds come
from numpy's global generator, so np.random.seed reproduces a run."""
import numpy as np

from . import _calls
from ._attn_probs import attention_probs
from ._numpy_arrays import NumpyArrays

adapter = NumpyArrays


def _draw_seed_offset():
    seed, offset = np.random.randint(0, 2**62, size=2, dtype=np.int64).tolist()
    return seed, offset


def attention(q, k, v, varlen, options, deterministic, with_lse=True, descale=None):
    """(out, lse, rng) where rng is the (seed, offset) dropout used (lse is always
    computed: the CPU backend's cost does not change without it). e4m3 inputs (ml_dtypes'
    float8_e4m3fn, with `descale`, a _calls.Descales) give a bf16 out."""
    rng = _draw_seed_offset() if options.dropout_p > 0 else (0, 0)
    options = options._replace(dropout_seed=rng[0], dropout_offset=rng[1])
    out, lse = _calls.forward(NumpyArrays, q, k, v, options, varlen, descale=descale)
    return out, lse, rng


def kvcache(q, cache, options, with_lse=True):
    return _calls.forward_kvcache(NumpyArrays, q, cache, options)


def probs(q, k, lse, options, rng, varlen):
    scale = options.softmax_scale if options.softmax_scale is not None else q.shape[-1] ** -0.5
    as_f32 = lambda x: None if x is None else np.asarray(x, dtype=np.float32)
    cu = None if varlen is None else (varlen.cu_seqlens_q, varlen.cu_seqlens_k)
    max_seqlens = None if varlen is None else (varlen.max_seqlen_q, varlen.max_seqlen_k)
    p = attention_probs(as_f32(q), as_f32(k), lse, scale, options.causal, options.window_size,
                        options.softcap, as_f32(options.alibi_slopes), options.dropout_p,
                        rng[0], rng[1], cu, max_seqlens)
    return p.astype(q.dtype)


def no_probs(q):
    return np.empty((0,), dtype=q.dtype)


def to_host(array):
    return np.asarray(array)


def from_host(array, like):
    return array
