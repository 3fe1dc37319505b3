"""The flash_attn (FlashAttention-2 v2.8) function family: same names, signatures,
defaults, layouts and return values.

torch tensors run the library's CUDA kernels (CUDA tensors) or its CPU backend (CPU
tensors), through torch custom ops with autograd; numpy arrays run the CPU backend,
forward only. Differences from flash-attn 2.8: softmax_scale=0.0 means the default
1/sqrt(head_dim) (the library reads 0 as "default"); head dims need not be multiples of 8
(the library pads them itself); return_attn_probs materializes the probabilities on the
host, and, as in flash-attn, only when dropout_p > 0 (else an empty tensor).
"""
import sys

import numpy as np

from . import _numpy_frontend, _paged
from ._calls import KVCache, Options, Varlen
from ._errors import invalid_argument

__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
]


def _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p=0.0):
    """As flash-attn, causal wins over a right window (the library's API rejects the pair)."""
    window = tuple(window_size)
    if len(window) != 2:
        raise invalid_argument("window_size", "a pair (left, right)", repr(window_size))
    left, right = window
    return Options(softmax_scale, causal, (left, 0 if causal else right), softcap,
                   alibi_slopes, dropout_p)


def _frontend(q):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(q, torch.Tensor):
        from . import _torch_frontend
        return _torch_frontend
    if isinstance(q, np.ndarray):
        return _numpy_frontend
    raise TypeError(f"q: expected a torch.Tensor or a numpy array, got {type(q).__name__}")


def _attention(q, k, v, varlen, options, deterministic, return_attn_probs):
    frontend = _frontend(q)
    q, k, v = (frontend.adapter.readable(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    out, lse, rng = frontend.attention(q, k, v, varlen, options, deterministic)
    if not return_attn_probs:
        return out
    if options.dropout_p > 0:
        return out, lse, frontend.probs(q, k, lse, options, rng, varlen)
    return out, lse, frontend.no_probs(q)


def _varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None):
    indices = _frontend(q).adapter.indices
    return Varlen(indices(cu_seqlens_q, "cu_seqlens_q"), indices(cu_seqlens_k, "cu_seqlens_k"),
                  int(max_seqlen_q), int(max_seqlen_k), indices(seqused_k, "seqused_k"))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """q [batch, seqlen_q, nheads, d], k/v [batch, seqlen_k, nheads_k, d] -> out
    [batch, seqlen_q, nheads, d]; with return_attn_probs, (out, lse [batch, nheads,
    seqlen_q] fp32, probabilities)."""
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p)
    return _attention(q, k, v, None, options, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv [batch, seqlen, 3, nheads, d]; otherwise as flash_attn_func."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                           causal, window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """kv [batch, seqlen_k, 2, nheads_k, d]; otherwise as flash_attn_func."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, seqused_k=None):
    """Packed sequences: q [total_q, nheads, d], k/v [total_k, nheads_k, d], int32
    cu_seqlens [batch + 1] -> out [total_q, nheads, d]; lse is [nheads, total_q]. With
    block_table [batch, max_pages], k/v are a paged cache [num_pages, page_size,
    nheads_k, d] holding cu_seqlens_k's keys. seqused_k [batch] (FlashAttention-3's
    argument, not 2.8's): sequence b attends to only its first seqused_k[b] keys."""
    if block_table is not None:
        frontend = _frontend(q)
        k = _paged.gather(frontend, k, block_table, cu_seqlens_k)
        v = _paged.gather(frontend, v, block_table, cu_seqlens_k)
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p)
    if seqused_k is not None and return_attn_probs and dropout_p > 0:
        raise invalid_argument("seqused_k", "None when return_attn_probs materializes the "
                               "probabilities of a dropout run", "a tensor")
    varlen = _varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    return _attention(q, k, v, varlen, options, deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, nheads, d]; otherwise as flash_attn_varlen_func."""
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                  max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """kv [total_k, 2, nheads_k, d]; otherwise as flash_attn_varlen_func."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def _cache_seqlens(adapter, q, k_cache, block_table, k, cache_seqlens):
    """int32 [batch]: an int applies to every sequence; None means a full cache."""
    if cache_seqlens is None:
        capacity = (block_table.shape[1] * k_cache.shape[1] if block_table is not None
                    else k_cache.shape[1])
        cache_seqlens = capacity - (k.shape[1] if k is not None else 0)
    if isinstance(cache_seqlens, (int, np.integer)):
        return adapter.full_indices(q, q.shape[0], int(cache_seqlens))
    return adapter.indices(cache_seqlens, "cache_seqlens")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """Decoding: q [batch, seqlen_q, nheads, d] over k_cache/v_cache [batch_cache,
    seqlen_cache, nheads_k, d] (or paged [num_pages, page_size, nheads_k, d] with
    block_table). k/v [batch, seqlen_new, nheads_k, d], when given, are written into the
    caches in place at cache_seqlens first (rotated by rotary_cos/sin when given).
    Returns out, or (out, lse [batch, nheads, seqlen_q]) with return_softmax_lse."""
    frontend = _frontend(q)
    adapter = frontend.adapter
    q, k, v = (adapter.readable(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    cache = KVCache(
        k_cache, v_cache, _cache_seqlens(adapter, q, k_cache, block_table, k, cache_seqlens),
        k, v, rotary_cos, rotary_sin, adapter.indices(cache_batch_idx, "cache_batch_idx"),
        adapter.indices(cache_leftpad, "cache_leftpad"),
        adapter.indices(block_table, "block_table"), rotary_interleaved, num_splits)
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes)
    out, lse = frontend.kvcache(q, cache, options)
    return (out, lse) if return_softmax_lse else out
