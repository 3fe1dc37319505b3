"""The eager path of the flash_attn functions on torch tensors.

A torch.library custom op costs tens of microseconds of Python per call (argument
defaults filled from the schema, the generated autograd wrapper, a redispatch per
dispatch key), several times what the kernel takes at short sequence lengths. Plain
tensors in eager mode therefore run the same computations (_torch_ops.*_with_options)
directly, under a torch.autograd.Function when a gradient is needed. Everything else,
torch.compile and export tracing, fake or functional tensors, tensor subclasses, dispatch
modes and functorch transforms, goes through the custom ops, which know how to trace.
"""
import torch

from . import _torch_ext, _torch_ops

_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_Tensor = torch.Tensor


def applies(q, k, v, k_new=None):
    """Whether the eager path can take these inputs (else: the custom ops)."""
    if (torch.compiler.is_compiling() or _dispatch_modes is None or _dispatch_modes()
            or _functorch_active is None or _functorch_active()):
        return False
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and (k_new is None or type(k_new) is _Tensor))


def needs_grad(q, k, v):
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


class _Call:
    """Everything of an attention call but q, k and v, as one argument of
    _Attention.apply: an object pytree does not walk (apply's cost grows with its
    argument count) and whose tensors need no gradient."""

    __slots__ = ("varlen", "options", "deterministic")

    def __init__(self, varlen, options, deterministic):
        self.varlen = varlen  # (cu_seqlens_q, cu_seqlens_k, seqused_k, max_q, max_k)
        self.options = options
        self.deterministic = deterministic


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, call):
        out, lse, rng_state = _torch_ops.forward_with_options(q, k, v, *call.varlen,
                                                              call.options)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.call = call
        ctx.rng_state = rng_state  # None without dropout: nothing to keep
        ctx.mark_non_differentiable(*(t for t in (lse, rng_state) if t is not None))
        # lse and rng_state never get gradients: without this autograd would allocate and
        # fill a zero tensor for each on every backward.
        ctx.set_materialize_grads(False)
        return out, lse, rng_state

    @staticmethod
    def backward(ctx, grad_out, grad_lse, grad_rng_state):
        q, k, v, out, lse = ctx.saved_tensors
        call = ctx.call
        options = call.options
        if options.dropout_p > 0:
            options = options._replace(dropout_seed_offset=ctx.rng_state)
        dq, dk, dv = _torch_ops.backward_with_options(grad_out, q, k, v, out, lse, *call.varlen,
                                                      options, call.deterministic)
        return dq, dk, dv, None


def attention(q, k, v, varlen, options, deterministic):
    """torch.ops.flashattn.forward's (out, lse, rng_state) with autograd, without its
    dispatch; rng_state is None without dropout. `varlen` is (cu_seqlens_q, cu_seqlens_k,
    seqused_k, max_seqlen_q, max_seqlen_k). The torch extension's C++ Function when it is
    there and takes the call (_torch_ext.py), else _Attention: the same results."""
    result = _torch_ext.attention(q, k, v, varlen, options, deterministic)
    if result is not None:
        return result
    return _Attention.apply(q, k, v, _Call(varlen, options, deterministic))


def inference(q, k, v, varlen, options, with_lse):
    """The same forward without autograd: (out, lse, rng_state), lse None without with_lse.
    The torch extension's when it takes the call (its one op call is cheaper than the
    Python path's allocations and binding call), else _torch_ops.forward_with_options."""
    result = _torch_ext.attention(q, k, v, varlen, options, False, with_lse)
    if result is not None:
        return result
    return _torch_ops.forward_with_options(q, k, v, *varlen, options, with_lse=with_lse)


def kvcache(q, cache, options, with_lse):
    """torch.ops.flashattn.forward_kvcache's (out, lse), without its dispatch (it has no
    gradient); lse is None without with_lse. Like the op, it bumps the caches' version
    counters when it writes them, so autograd notices if a written cache had been saved
    for a backward."""
    result = _torch_ops.forward_kvcache_with_options(q, cache, options, with_lse)
    if cache.k is not None:
        torch.autograd.graph.increment_version(cache.k_cache)
        torch.autograd.graph.increment_version(cache.v_cache)
    return result
