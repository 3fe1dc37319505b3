"""FlashAttention-3's Python functions (its hopper/flash_attn_interface.py: names, argument
order and defaults, return values) over flashattn's kernels. The compat package's
`flash_attn_interface` module (distribution flash-attn-3) re-exports them, which is what
Transformers' attn_implementation="flash_attention_3" imports.

As in FlashAttention-3: no dropout and no ALiBi arguments; flash_attn_func and the varlen
function return out, or (out, softmax_lse) with return_attn_probs=True;
flash_attn_with_kvcache returns out, or with return_softmax_lse (out, softmax_lse,
out_accum, softmax_lse_accum), the last two the split-KV partials, which flashattn keeps
in its workspace and returns empty. Speed hints (pack_gqa, sm_margin, scheduler_metadata;
num_splits outside the KV cache) are accepted and have no effect on the result. FP8: e4m3
q, k, v with q/k/v_descale give a bf16 out (CPU backend only for now), and an e4m3 KV cache
takes k/v_descale. qv, attention_chunk, seqused_q and varlen queries in the KV cache
(cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, rotary_seqlens) raise UnsupportedError.
"""
from ._errors import UnsupportedError, invalid_argument
from . import interface

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache"]


def _refuse(attention_chunk=0, **arguments):
    """UnsupportedError naming the first argument that asks for what flashattn lacks."""
    for name, value in arguments.items():
        if value is not None:
            raise UnsupportedError(f"{name}: expected None (flashattn has no FlashAttention-3 "
                                   f"{name} yet), got {type(value).__name__}")
    if attention_chunk:
        raise UnsupportedError(f"attention_chunk: expected 0 (flashattn has no chunked "
                               f"attention), got {attention_chunk}")


def _out_and_lse(result, return_attn_probs):
    out, lse, _ = result
    return (out, lse) if return_attn_probs else out


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False):
    """q [batch, seqlen_q, nheads, d], k/v [batch, seqlen_k, nheads_k, d] -> out, or
    (out, softmax_lse [batch, nheads, seqlen_q]) with return_attn_probs."""
    _refuse(qv=qv, attention_chunk=attention_chunk)
    result = interface.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                       window_size=window_size, softcap=softcap,
                                       deterministic=deterministic, return_attn_probs=True,
                                       q_descale=q_descale, k_descale=k_descale,
                                       v_descale=v_descale)
    return _out_and_lse(result, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None,
                              k_descale=None, v_descale=None, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """qkv [batch, seqlen, 3, nheads, d], or [batch, seqlen, nheads_q + 2 * nheads_k, d]
    with num_heads_q (GQA); otherwise as flash_attn_func."""
    if qkv.ndim == 5:
        if qkv.shape[2] != 3:
            raise invalid_argument("qkv", "[batch, seqlen, 3, nheads, d]",
                                   f"shape {tuple(qkv.shape)}")
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        if qkv.ndim != 4 or num_heads_q is None:
            raise invalid_argument("qkv", "[batch, seqlen, 3, nheads, d], or [batch, seqlen, "
                                   "nheads_q + 2 * nheads_k, d] with num_heads_q",
                                   f"shape {tuple(qkv.shape)}, num_heads_q={num_heads_q}")
        num_heads_k = (qkv.shape[2] - num_heads_q) // 2
        if num_heads_q + 2 * num_heads_k != qkv.shape[2]:
            raise invalid_argument("num_heads_q", f"nheads_q leaving an even count of the "
                                   f"{qkv.shape[2]} heads for k and v", str(num_heads_q))
        q = qkv[:, :, :num_heads_q]
        k = qkv[:, :, num_heads_q:num_heads_q + num_heads_k]
        v = qkv[:, :, num_heads_q + num_heads_k:]
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                           q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                           window_size=window_size, attention_chunk=attention_chunk,
                           softcap=softcap, deterministic=deterministic,
                           return_attn_probs=return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           qv=None, q_descale=None, k_descale=None, v_descale=None,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False):
    """Packed sequences: q [total_q, nheads, d], k/v [total_k, nheads_k, d] -> out
    [total_q, nheads, d], or (out, softmax_lse [nheads, total_q]) with return_attn_probs.
    seqused_k [batch]: sequence b sees only its first seqused_k[b] keys."""
    _refuse(seqused_q=seqused_q, qv=qv, attention_chunk=attention_chunk)
    result = interface.flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        deterministic=deterministic, return_attn_probs=True, seqused_k=seqused_k,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return _out_and_lse(result, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                            cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False):
    """Decoding over a KV cache (page_table: FlashAttention-2's block_table); k/v, when
    given, are written into the caches in place first. Returns out, or (out, softmax_lse,
    out_accum, softmax_lse_accum) with return_softmax_lse, the last two empty."""
    _refuse(qv=qv, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
            max_seqlen_q=max_seqlen_q, rotary_seqlens=rotary_seqlens,
            attention_chunk=attention_chunk)
    result = interface.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, block_table=page_table, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap,
        rotary_interleaved=rotary_interleaved, num_splits=num_splits,
        return_softmax_lse=return_softmax_lse, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale)
    if not return_softmax_lse:
        return result
    out, lse = result
    empty = lse.reshape(-1)[:0]
    return out, lse, empty, empty
