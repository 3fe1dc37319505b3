"""The library's three calls on numpy arrays, explicitly: forward (dense or packed),
backward (the gradients numpy code cannot get from autograd) and forward_kvcache.
Outputs are new numpy arrays; inputs are read in place (any strides whose last
dimension is contiguous), and forward_kvcache writes k/v into the caches in place.
Dropout takes an explicit seed and offset: the same pair drops the same elements in the
forward and the backward."""
import numpy as np

from . import _calls
from ._errors import invalid_argument
from ._numpy_arrays import NumpyArrays

__all__ = ["forward", "backward", "forward_kvcache"]


def _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k):
    if cu_seqlens_q is None:
        for value, name in ((cu_seqlens_k, "cu_seqlens_k"), (seqused_k, "seqused_k")):
            if value is not None:
                raise invalid_argument("cu_seqlens_q", f"an array, since {name} is given "
                                       "(packed layout)", "None")
        return None
    cu_q = NumpyArrays.indices(cu_seqlens_q, "cu_seqlens_q")
    cu_k = NumpyArrays.indices(cu_seqlens_k, "cu_seqlens_k")
    longest = lambda cu: int(np.diff(cu).max(initial=0))
    return _calls.Varlen(cu_q, cu_k,
                         longest(cu_q) if max_seqlen_q is None else max_seqlen_q,
                         longest(cu_k) if max_seqlen_k is None else max_seqlen_k,
                         NumpyArrays.indices(seqused_k, "seqused_k"))


def _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p,
             dropout_seed, dropout_offset):
    """The options as flash_attn_func reads them (causal wins over a right window)."""
    return _calls.Options(softmax_scale, causal, _calls.flash_attn_window(causal, window_size),
                          softcap, alibi_slopes, dropout_p, dropout_seed, dropout_offset)


def forward(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
            max_seqlen_k=None, seqused_k=None, softmax_scale=None, causal=False,
            window_size=(-1, -1), softcap=0.0, alibi_slopes=None, dropout_p=0.0,
            dropout_seed=0, dropout_offset=0):
    """Returns (out, lse). Packed (varlen) when cu_seqlens_q is given; max_seqlen_* default
    to the longest sequence."""
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p,
                       dropout_seed, dropout_offset)
    varlen = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    return _calls.forward(NumpyArrays, q, k, v, options, varlen)


def backward(dout, q, k, v, out, lse, *, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, softmax_scale=None,
             causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, dropout_p=0.0,
             dropout_seed=0, dropout_offset=0, deterministic=False):
    """Returns (dq, dk, dv) for the forward that returned (out, lse) with these options."""
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p,
                       dropout_seed, dropout_offset)
    varlen = _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    return _calls.backward(NumpyArrays, dout, q, k, v, out, lse, options, varlen, deterministic)


def forward_kvcache(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, rotary_cos=None,
                    rotary_sin=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                    rotary_interleaved=True, num_splits=0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """Returns (out, lse); k/v, when given, are appended to the caches at cache_seqlens."""
    indices = NumpyArrays.indices
    cache = _calls.KVCache(k_cache, v_cache, indices(cache_seqlens, "cache_seqlens"), k, v,
                           rotary_cos, rotary_sin, indices(cache_batch_idx, "cache_batch_idx"),
                           indices(cache_leftpad, "cache_leftpad"),
                           indices(block_table, "block_table"), rotary_interleaved, num_splits)
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, 0.0, 0, 0)
    return _calls.forward_kvcache(NumpyArrays, q, cache, options)
