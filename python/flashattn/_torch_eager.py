"""The eager path of the flash_attn functions on torch tensors.

A torch.library custom op costs tens of microseconds of Python per call (argument
defaults filled from the schema, the generated autograd wrapper, a redispatch per
dispatch key), several times what the kernel takes at short sequence lengths. Plain
tensors in eager mode therefore run the same computations (_torch_ops.run_*) directly,
under a torch.autograd.Function when a gradient is needed. Everything else, torch.compile
and export tracing, fake or functional tensors, tensor subclasses and dispatch modes, goes
through the custom ops, which know how to trace.
"""
import torch

from . import _torch_ops
from ._calls import Options

_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)


_Tensor = torch.Tensor


def applies(q, k, v, k_new=None):
    """Whether the eager path can take these inputs (else: the custom ops)."""
    if torch.compiler.is_compiling() or _dispatch_modes is None or _dispatch_modes():
        return False
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and (k_new is None or type(k_new) is _Tensor))


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *inputs):
        (q, k, v, cu_q, cu_k, used_k, max_q, max_k, dropout_p, softmax_scale, causal, left,
         right, softcap, alibi_slopes, _) = inputs  # deterministic is for the backward
        options = Options(softmax_scale, causal, (left, right), softcap, alibi_slopes,
                          dropout_p)
        # Without dropout the rng_state is None here: nothing to keep, nothing to allocate.
        output = _torch_ops.forward_with_options(q, k, v, cu_q, cu_k, used_k, max_q, max_k,
                                                 options)
        _torch_ops.save_for_backward(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse, grad_rng_state):
        return _torch_ops.saved_gradients(ctx, grad_out, _torch_ops.run_backward)


def needs_grad(q, k, v):
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def forward(q, k, v, *rest):
    """torch.ops.flashattn.forward(q, k, v, *rest)'s results, without its dispatch."""
    if needs_grad(q, k, v):
        return _Attention.apply(q, k, v, *rest)
    return _torch_ops.run_forward(q, k, v, *rest[:-1])


def kvcache(q, k_cache, v_cache, k, *rest, with_lse=True):
    """torch.ops.flashattn.forward_kvcache's results, without its dispatch (it has no
    gradient); lse is None without with_lse. Like the op, it bumps the caches' version
    counters when it writes them, so autograd notices if a written cache had been saved
    for a backward."""
    result = _torch_ops.run_forward_kvcache(q, k_cache, v_cache, k, *rest, with_lse=with_lse)
    if k is not None:
        torch.autograd.graph.increment_version(k_cache)
        torch.autograd.graph.increment_version(v_cache)
    return result
