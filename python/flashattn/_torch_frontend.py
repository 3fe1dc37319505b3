"""The flash_attn functions on torch tensors (CPU or CUDA), through the custom ops of
_torch_ops.py: autograd, torch.compile and CUDA graphs work as with any torch op. Plain
eager calls take _torch_eager.py's shortcut to the same computations."""
import numpy as np
import torch

from ._attn_probs import attention_probs
from ._calls import Descales
from . import _torch_eager
from . import _torch_ops
from ._torch_ops import forward, forward_kvcache
from ._torch_rng import from_rng_state
from ._torch_tensors import TorchTensors

adapter = TorchTensors


def _scale(q, options):
    """The ops take an explicit scale. A head dim of 0 gets any (the library rejects it)."""
    if options.softmax_scale is not None:
        return options.softmax_scale
    return q.shape[-1] ** -0.5 if q.shape[-1] > 0 else 1.0


_FLOAT8 = getattr(torch, "float8_e4m3fn", None)


def attention(q, k, v, varlen, options, deterministic, with_lse=True, descale=None):
    """(out, lse, rng_state); without with_lse, an inference call may skip lse (None).
    e4m3 q (with `descale`, a _calls.Descales) runs the FP8 forward: bf16 out, no
    autograd, rng_state None."""
    cu_q = cu_k = used_k = None
    max_q = max_k = 0
    if varlen is not None:
        cu_q, cu_k, used_k = varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.seqused_k
        max_q, max_k = varlen.max_seqlen_q, varlen.max_seqlen_k
    if (_FLOAT8 is not None and q.dtype == _FLOAT8) or descale is not None:
        return _fp8_attention(q, k, v, (cu_q, cu_k, used_k, max_q, max_k), options,
                              descale if descale is not None else Descales(), with_lse)
    if _torch_eager.applies(q, k, v):
        # Eager calls take the options as they are, without the op's scalars.
        varlen = (cu_q, cu_k, used_k, max_q, max_k)
        if _torch_eager.needs_grad(q, k, v):
            return _torch_eager.attention(q, k, v, varlen, options, bool(deterministic))
        return _torch_eager.inference(q, k, v, varlen, options, with_lse)
    left, right = options.window_size
    return forward(q, k, v, cu_q, cu_k, used_k, int(max_q), int(max_k),
                   float(options.dropout_p), float(_scale(q, options)), bool(options.causal),
                   int(left), int(right), float(options.softcap), options.alibi_slopes,
                   bool(deterministic))


def _fp8_attention(q, k, v, varlen, options, descale, with_lse):
    descale = descale.as_library_takes()
    cu_q, cu_k, used_k, max_q, max_k = varlen
    if _torch_eager.applies(q, k, v):
        out, lse = _torch_ops.forward_fp8_with_options(q, k, v, cu_q, cu_k, used_k, max_q,
                                                       max_k, options, descale, with_lse)
        return out, lse, None
    left, right = options.window_size
    out, lse = _torch_ops.forward_fp8(q, k, v, cu_q, cu_k, used_k, int(max_q), int(max_k),
                                      float(_scale(q, options)), bool(options.causal),
                                      int(left), int(right), float(options.softcap),
                                      options.alibi_slopes, *descale)
    return out, lse, None


def kvcache(q, cache, options, with_lse=True):
    """(out, lse); without with_lse, an eager call skips lse (None)."""
    if cache.descale is not None:
        cache = cache._replace(descale=cache.descale.as_library_takes())
    if _torch_eager.applies(q, cache.k_cache, cache.v_cache, cache.k):
        return _torch_eager.kvcache(q, cache, options, with_lse)
    left, right = options.window_size
    descale = cache.descale if cache.descale is not None else Descales()
    return forward_kvcache(q, cache.k_cache, cache.v_cache, cache.k, cache.v, cache.rotary_cos,
                           cache.rotary_sin, cache.cache_seqlens, cache.cache_batch_idx,
                           cache.cache_leftpad, cache.block_table, float(_scale(q, options)),
                           bool(options.causal), int(left), int(right), float(options.softcap),
                           bool(cache.rotary_interleaved), options.alibi_slopes,
                           int(cache.num_splits), descale.k, descale.v)


def _host_f32(tensor):
    return None if tensor is None else tensor.detach().float().cpu().numpy()


def probs(q, k, lse, options, rng_state, varlen):
    seed, offset = from_rng_state(rng_state) if rng_state.numel() else (0, 0)
    cu = max_seqlens = None
    if varlen is not None:
        cu = (to_host(varlen.cu_seqlens_q), to_host(varlen.cu_seqlens_k))
        max_seqlens = (varlen.max_seqlen_q, varlen.max_seqlen_k)
    p = attention_probs(_host_f32(q), _host_f32(k), _host_f32(lse), _scale(q, options),
                        options.causal, options.window_size, options.softcap,
                        _host_f32(options.alibi_slopes), options.dropout_p, seed, offset, cu,
                        max_seqlens)
    return torch.from_numpy(p).to(device=q.device, dtype=q.dtype)


def no_probs(q):
    return torch.empty((0,), dtype=q.dtype, device=q.device)


def to_host(tensor):
    return tensor.detach().cpu().numpy()


def from_host(array, like):
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)
