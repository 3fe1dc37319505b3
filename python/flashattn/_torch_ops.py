"""flashattn's torch operators: torch.ops.flashattn.forward, .backward, .forward_kvcache.

Each is a torch.library custom op with a fake implementation (so torch.compile traces it
without a graph break) and outputs from torch's allocator on the current CUDA stream
(so a CUDA graph captures it); forward has autograd through backward. Dense and packed
(varlen) inputs share one op: varlen when cu_seqlens_q is given. The flash_attn-style
functions (interface.py) are the user-facing layer over these.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C, _torch_rng
from ._calls import (CACHE_LAYOUT, Descales, KVCache, Options, Q_LAYOUT,
                     expect_attention_ranks, expect_rank, lse_shape)
from ._torch_tensors import TorchTensors, stream_of


def _rng_state_like(q, dropout_p):
    """Dropout keeps its (seed, offset) in an int64 [2] tensor on q's device, which the
    kernels read (_torch_rng.py); without dropout the op returns an empty one."""
    return q.new_empty((2 if dropout_p > 0 else 0,), dtype=torch.int64)


def run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                alibi_slopes, out=None):
    """The computation behind the forward op (flashattn.torch calls it directly):
    (out, lse, rng_state). `out`, when given, is written instead of a new tensor."""
    options = Options(softmax_scale, causal, (window_left, window_right), softcap,
                      alibi_slopes, dropout_p)
    out, lse, rng_state = forward_with_options(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                               max_seqlen_q, max_seqlen_k, options, out)
    return out, lse, _rng_state_like(q, 0) if rng_state is None else rng_state


def forward_with_options(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                         max_seqlen_k, options, out=None, with_lse=True):
    """The forward of every torch path: (out, lse, rng_state) with its options as one
    _calls.Options (softmax_scale None: 1/sqrt(d)). Dropout's (seed, offset) are drawn
    here, on q's device; without dropout rng_state is None (run_forward gives the op its
    empty tensor), and without with_lse so is lse (an inference call that returns only
    out)."""
    rng_state = None
    if options.dropout_p > 0:
        rng_state = _torch_rng.draw_seed_offset(q.device)
        options = options._replace(dropout_seed_offset=rng_state)
    # The outputs' shapes are read from q and v, so their ranks are checked first; the
    # library validates everything else, once, in forward_tensors.
    expect_attention_ranks(q, k, v, cu_seqlens_q)
    if out is None:
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = (q.new_empty(lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
           if with_lse else None)
    _C.forward_tensors(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                       max_seqlen_k, options, stream_of(q))
    return out, lse, rng_state


def forward_fp8_with_options(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                             max_seqlen_k, options, descale, with_lse=True):
    """The FP8 forward (e4m3 q, k, v; inference only, no autograd): (out bf16, lse), the
    descales a _calls.Descales."""
    expect_attention_ranks(q, k, v, cu_seqlens_q)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=torch.bfloat16)
    lse = (q.new_empty(lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
           if with_lse else None)
    _C.forward_tensors(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                       max_seqlen_k, options, stream_of(q), *descale)
    return out, lse


@torch.library.custom_op("flashattn::forward_fp8", mutates_args=())
def forward_fp8(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int,
                max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
                window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
                q_descale: Optional[Tensor], k_descale: Optional[Tensor],
                v_descale: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """(out, lse) of e4m3 q, k, v: out is bf16; no autograd (FP8 is for inference)."""
    options = Options(softmax_scale, causal, (window_left, window_right), softcap, alibi_slopes)
    return forward_fp8_with_options(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                                    max_seqlen_k, options,
                                    Descales(q_descale, k_descale, v_descale))


@forward_fp8.register_fake
def _forward_fp8_fake(q, k, v, cu_seqlens_q, *args):
    out = q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=torch.bfloat16)
    return out, q.new_empty(lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)


def run_backward(dout, q, k, v, out, lse, rng_state, cu_seqlens_q, cu_seqlens_k, seqused_k,
                 max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                 window_right, softcap, alibi_slopes, deterministic, grads=None):
    """The computation behind the backward op: (dq, dk, dv), contiguous in the shapes of
    q, k and v, or written into `grads` when given."""
    options = Options(softmax_scale, causal, (window_left, window_right), softcap,
                      alibi_slopes, dropout_p,
                      dropout_seed_offset=rng_state if dropout_p > 0 else None)
    return backward_with_options(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                 seqused_k, max_seqlen_q, max_seqlen_k, options, deterministic,
                                 grads)


def backward_with_options(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k,
                          max_seqlen_q, max_seqlen_k, options, deterministic, grads=None):
    """The backward of every torch path, its options (with dropout, the forward's rng_state
    as dropout_seed_offset) as one _calls.Options."""
    dout = TorchTensors.readable(dout, "dout")
    if grads is None:
        grads = (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape))
    dq, dk, dv = grads
    _C.backward_tensors(dout, q, k, v, out, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                        seqused_k, max_seqlen_q, max_seqlen_k, options, bool(deterministic),
                        stream_of(q))
    return dq, dk, dv


@torch.library.custom_op("flashattn::forward", mutates_args=())
def forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
            cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int,
            max_seqlen_k: int, dropout_p: float, softmax_scale: float, causal: bool,
            window_left: int, window_right: int, softcap: float,
            alibi_slopes: Optional[Tensor], deterministic: bool
            ) -> Tuple[Tensor, Tensor, Tensor]:
    """(out, lse, rng_state). `deterministic` is kept for the backward."""
    return run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                       max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                       window_right, softcap, alibi_slopes)


@forward.register_fake
def _forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                  dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                  alibi_slopes, deterministic):
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    return out, lse, _rng_state_like(q, dropout_p)


@torch.library.custom_op("flashattn::backward", mutates_args=())
def backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
             rng_state: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
             seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
             dropout_p: float, softmax_scale: float, causal: bool, window_left: int,
             window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
             deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of forward, given its out, lse and rng_state."""
    return run_backward(dout, q, k, v, out, lse, rng_state, cu_seqlens_q, cu_seqlens_k,
                        seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                        window_left, window_right, softcap, alibi_slopes, deterministic)


@backward.register_fake
def _backward_fake(dout, q, k, v, *args):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def save_for_backward(ctx, inputs, output):
    """forward's autograd context."""
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
     softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
     deterministic) = inputs
    out, lse, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, rng_state, cu_seqlens_q, cu_seqlens_k, seqused_k,
                          alibi_slopes)
    ctx.scalars = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                   window_right, softcap)
    ctx.deterministic = deterministic
    ctx.mark_non_differentiable(lse, rng_state)
    # lse and rng_state never get gradients: without this autograd would allocate and
    # fill a zero tensor for each on every backward.
    ctx.set_materialize_grads(False)


def saved_gradients(ctx, grad_out):
    """The gradients of forward's 16 inputs from its saved context, by the backward op."""
    q, k, v, out, lse, rng_state, cu_q, cu_k, used_k, alibi_slopes = ctx.saved_tensors
    dq, dk, dv = backward(grad_out, q, k, v, out, lse, rng_state, cu_q, cu_k, used_k,
                          *ctx.scalars, alibi_slopes, ctx.deterministic)
    # Only q, k and v have gradients (lse is not differentiated, as in FlashAttention-2).
    return (dq, dk, dv) + (None,) * 13


forward.register_autograd(
    lambda ctx, grad_out, grad_lse, grad_rng_state: saved_gradients(ctx, grad_out),
    setup_context=save_for_backward)


def run_forward_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                        cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal,
                        window_left, window_right, softcap, rotary_interleaved, alibi_slopes,
                        num_splits, k_descale=None, v_descale=None):
    """The computation behind the forward_kvcache op: (out, lse)."""
    descale = None if k_descale is None and v_descale is None else Descales(None, k_descale,
                                                                           v_descale)
    cache = KVCache(k_cache, v_cache, cache_seqlens, k, v, rotary_cos, rotary_sin,
                    cache_batch_idx, cache_leftpad, block_table, rotary_interleaved, num_splits,
                    descale)
    options = Options(softmax_scale, causal, (window_left, window_right), softcap, alibi_slopes)
    return forward_kvcache_with_options(q, cache, options)


def forward_kvcache_with_options(q, cache, options, with_lse=True):
    """The KV-cache forward of every torch path: (out, lse) from a _calls.KVCache and
    _calls.Options; lse is None without with_lse (an eager call that returns only out)."""
    # The outputs' shapes are read from q and v_cache (the library checks the rest).
    expect_rank(q, "q", 4, Q_LAYOUT[False])
    expect_rank(cache.v_cache, "v_cache", 4, CACHE_LAYOUT)
    out = q.new_empty((*q.shape[:-1], cache.v_cache.shape[-1]))
    lse = q.new_empty(lse_shape(q, False), dtype=torch.float32) if with_lse else None
    _C.forward_kvcache_tensors(q, cache.k_cache, cache.v_cache, cache.cache_seqlens, cache.k,
                               cache.v, cache.rotary_cos, cache.rotary_sin,
                               cache.cache_batch_idx, cache.cache_leftpad, cache.block_table,
                               bool(cache.rotary_interleaved), cache.num_splits, out, lse,
                               options, stream_of(q),
                               *(cache.descale if cache.descale is not None else Descales()))
    return out, lse


@torch.library.custom_op("flashattn::forward_kvcache", mutates_args=("k_cache", "v_cache"))
def forward_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor],
                    v: Optional[Tensor], rotary_cos: Optional[Tensor],
                    rotary_sin: Optional[Tensor], cache_seqlens: Tensor,
                    cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor],
                    block_table: Optional[Tensor], softmax_scale: float, causal: bool,
                    window_left: int, window_right: int, softcap: float,
                    rotary_interleaved: bool, alibi_slopes: Optional[Tensor], num_splits: int,
                    k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor]:
    """(out, lse); k and v, when given, are written into the caches first (quantized by
    k_descale / v_descale into e4m3 caches)."""
    return run_forward_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                               cache_batch_idx, cache_leftpad, block_table, softmax_scale,
                               causal, window_left, window_right, softcap, rotary_interleaved,
                               alibi_slopes, num_splits, k_descale, v_descale)


@forward_kvcache.register_fake
def _forward_kvcache_fake(q, k_cache, v_cache, *args):
    out = q.new_empty((*q.shape[:-1], v_cache.shape[-1]))
    return out, q.new_empty(lse_shape(q, False), dtype=torch.float32)
