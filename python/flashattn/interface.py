"""The flash_attn (FlashAttention-2 v2.8) function family: same names, signatures,
defaults, layouts and return values.

torch tensors run the library's CUDA kernels (CUDA tensors) or its CPU backend (CPU
tensors), through torch custom ops with autograd; numpy arrays run the CPU backend,
forward only. softmax_scale=None means 1/sqrt(head_dim) and any number, 0.0 included, is
used as given, as in flash-attn. Differences from flash-attn 2.8: head dims need not be
multiples of 8 (the library pads them itself); return_attn_probs materializes the
probabilities on the host, and, as in flash-attn, only when dropout_p > 0 (else an empty
tensor). FP8 (as FlashAttention-3): e4m3 q, k, v (torch.float8_e4m3fn, or ml_dtypes'
float8_e4m3fn arrays) with the keywords q_descale, k_descale, v_descale (fp32 [batch,
nheads_k], [1] or a scalar tensor) give a bf16 out, without autograd; an e4m3 KV cache takes
k_descale / v_descale in flash_attn_with_kvcache. FP8 runs on the CPU backend only for now.
"""
import sys

import numpy as np

from . import _numpy_frontend, _paged
from ._calls import Descales, KVCache, Options, Q_LAYOUT, Varlen, flash_attn_window, int32
from ._calls import expect_rank as _calls_expect_rank
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
    return Options(softmax_scale, causal, flash_attn_window(causal, window_size), softcap,
                   alibi_slopes, dropout_p)


_torch_frontend = None  # imported with the first torch call: flashattn imports without torch


def _frontend(q):
    global _torch_frontend
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(q, torch.Tensor):
        if _torch_frontend is None:
            from . import _torch_frontend as frontend
            _torch_frontend = frontend
        return _torch_frontend
    if isinstance(q, np.ndarray):
        return _numpy_frontend
    raise TypeError(f"q: expected a torch.Tensor or a numpy array, got {type(q).__name__}")


def _required(*named):
    for array, name in named:
        if array is None:
            raise invalid_argument(name, "an array", "None")


def _descales(q_descale, k_descale, v_descale):
    if q_descale is None and k_descale is None and v_descale is None:
        return None
    return Descales(q_descale, k_descale, v_descale)


def _attention(q, k, v, varlen, options, deterministic, return_attn_probs, descale=None):
    _required((q, "q"), (k, "k"), (v, "v"))
    frontend = _frontend(q)
    readable = frontend.adapter.readable
    q, k, v = readable(q, "q"), readable(k, "k"), readable(v, "v")
    extra = {} if descale is None else {"descale": descale}
    out, lse, rng = frontend.attention(q, k, v, varlen, options, deterministic,
                                       with_lse=return_attn_probs, **extra)
    if not return_attn_probs:
        return out
    if options.dropout_p > 0:
        return out, lse, frontend.probs(q, k, lse, options, rng, varlen)
    return out, lse, frontend.no_probs(q)


def _varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None):
    indices = _frontend(q).adapter.indices
    return Varlen(indices(cu_seqlens_q, "cu_seqlens_q"), indices(cu_seqlens_k, "cu_seqlens_k"),
                  int32(max_seqlen_q, "max_seqlen_q"), int32(max_seqlen_k, "max_seqlen_k"),
                  indices(seqused_k, "seqused_k"))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, q_descale=None, k_descale=None, v_descale=None):
    """q [batch, seqlen_q, nheads, d], k/v [batch, seqlen_k, nheads_k, d] -> out
    [batch, seqlen_q, nheads, d]; with return_attn_probs, (out, lse [batch, nheads,
    seqlen_q] fp32, probabilities). e4m3 q, k, v take the descale keywords (module doc)."""
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p)
    return _attention(q, k, v, None, options, deterministic, return_attn_probs,
                      _descales(q_descale, k_descale, v_descale))


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
                           return_attn_probs=False, block_table=None, seqused_k=None, *,
                           q_descale=None, k_descale=None, v_descale=None):
    """Packed sequences: q [total_q, nheads, d], k/v [total_k, nheads_k, d], int32
    cu_seqlens [batch + 1] -> out [total_q, nheads, d]; lse is [nheads, total_q]. With
    block_table [batch, max_pages], k/v are a paged cache [num_pages, page_size,
    nheads_k, d] holding cu_seqlens_k's keys. seqused_k [batch] (FlashAttention-3's
    argument, not 2.8's): sequence b attends to only its first seqused_k[b] keys."""
    if block_table is not None:
        _required((q, "q"), (k, "k"), (v, "v"))
        frontend = _frontend(q)
        k = _paged.gather(frontend, k, block_table, cu_seqlens_k, "k")
        v = _paged.gather(frontend, v, block_table, cu_seqlens_k, "v")
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p)
    if seqused_k is not None and return_attn_probs and dropout_p > 0:
        raise invalid_argument("seqused_k", "None when return_attn_probs materializes the "
                               "probabilities of a dropout run", "a tensor")
    varlen = _varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    return _attention(q, k, v, varlen, options, deterministic, return_attn_probs,
                      _descales(q_descale, k_descale, v_descale))


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
        _calls_expect_rank(q, "q", 4, Q_LAYOUT[False])  # its batch size is read here
        return adapter.full_indices(q, q.shape[0], int(cache_seqlens))
    return adapter.indices(cache_seqlens, "cache_seqlens")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, q_descale=None, k_descale=None,
                            v_descale=None):
    """Decoding: q [batch, seqlen_q, nheads, d] over k_cache/v_cache [batch_cache,
    seqlen_cache, nheads_k, d] (or paged [num_pages, page_size, nheads_k, d] with
    block_table). k/v [batch, seqlen_new, nheads_k, d], when given, are written into the
    caches in place at cache_seqlens first (rotated by rotary_cos/sin when given; into
    e4m3 caches as k / k_descale, v / v_descale).
    Returns out, or (out, lse [batch, nheads, seqlen_q]) with return_softmax_lse."""
    _required((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache"))
    frontend = _frontend(q)
    adapter = frontend.adapter
    readable = adapter.readable
    q, k, v = readable(q, "q"), readable(k, "k"), readable(v, "v")
    cache = KVCache(
        k_cache, v_cache, _cache_seqlens(adapter, q, k_cache, block_table, k, cache_seqlens),
        k, v, rotary_cos, rotary_sin, adapter.indices(cache_batch_idx, "cache_batch_idx"),
        adapter.indices(cache_leftpad, "cache_leftpad"),
        adapter.indices(block_table, "block_table"), rotary_interleaved, num_splits,
        _descales(q_descale, k_descale, v_descale))
    options = _options(softmax_scale, causal, window_size, softcap, alibi_slopes)
    out, lse = frontend.kvcache(q, cache, options, with_lse=return_softmax_lse)
    return (out, lse) if return_softmax_lse else out
