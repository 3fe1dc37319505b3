"""torch.nn.functional.scaled_dot_product_attention on flashattn's kernels.

    import flashattn.torch
    flashattn.torch.activate()    # SDPA's flash backend now runs flashattn
    flashattn.torch.deactivate()  # back to PyTorch's own FlashAttention-2

This uses PyTorch's registry of flash-attention implementations (torch 2.11 has it,
torch.nn.attention.register_flash_attention_impl), under the name "flashattn"; after
`import flashattn.torch`, torch.nn.attention.activate_flash_attention_impl("flashattn")
does the same as activate(). What an implementation provides there: a function that
registers kernels with the dispatcher and returns a handle whose remove() takes them
out again. SDPA still chooses its backend in C++ by PyTorch's own FlashAttention-2
rules (fp16/bf16 CUDA tensors, no attn_mask, head_dim <= 256, is_causal only when
seqlen_q == seqlen_k, ...); when it picks the flash backend it calls
aten::_scaled_dot_product_flash_attention and, for the gradients,
aten::_scaled_dot_product_flash_attention_backward. Activation replaces those two CUDA
kernels, and aten::_flash_attention_forward / _backward (the packed path behind
torch.nn.attention.varlen.varlen_attn), with calls into flashattn. Other backends (cuDNN,
memory-efficient, math) are left alone: a call SDPA routes to one of them is not ours.
"""
import importlib

import torch as _torch

from . import _torch_ops

_attention = importlib.import_module("torch.nn.attention")

NAME = "flashattn"

__all__ = ["NAME", "activate", "deactivate", "is_active"]


def _registry():
    if not hasattr(_attention, "register_flash_attention_impl"):
        raise RuntimeError(f"flashattn.torch: torch {_torch.__version__} has no "
                           "torch.nn.attention.register_flash_attention_impl (2.11 has it)")
    return _attention


def activate():
    """Routes SDPA's flash backend (and varlen_attn) to flashattn's kernels."""
    _registry().activate_flash_attention_impl(NAME)


def deactivate():
    """Gives SDPA back its own FlashAttention-2 kernels, if flashattn's are active."""
    if is_active():
        _registry().restore_flash_attention_impl()


def is_active():
    return _registry().current_flash_attention_impl() == NAME


class _Handle:
    """What torch's registry keeps while flashattn is active: the kernel registrations,
    which dropping the Library undoes."""

    def __init__(self, library):
        self.library = library

    def remove(self):
        self.library = None


def _register():
    library = _torch.library.Library("aten", "IMPL", "CUDA")  # noqa: TOR901
    library.impl("_scaled_dot_product_flash_attention", _sdpa_forward, "CUDA")
    library.impl("_scaled_dot_product_flash_attention_backward", _sdpa_backward, "CUDA")
    library.impl("_flash_attention_forward", _flash_forward, "CUDA")
    library.impl("_flash_attention_backward", _flash_backward, "CUDA")
    return _Handle(library)


def _scale(query, scale):
    return query.shape[-1] ** -0.5 if scale is None else float(scale)


def _window(left, right):
    return -1 if left is None else int(left), -1 if right is None else int(right)


def _bshd(*tensors):
    """SDPA's [batch, heads, seqlen, dim] as the kernels' [batch, seqlen, heads, dim] views."""
    return tuple(t.transpose(1, 2) for t in tensors)


def _no_debug_mask(return_debug_mask, query):
    if return_debug_mask:
        raise NotImplementedError("flashattn: return_debug_mask (the attention probabilities "
                                  "of SDPA's flash backend) is not supported")
    return query.new_empty((0,))


def _rng_outputs(rng_state, query):
    """(rng_state, unused) as the ops return them: flashattn's own (seed, offset) pair
    travels in the first; the backward reads it back from there."""
    return rng_state, _torch.empty((), dtype=_torch.uint64, device=query.device)


def _forward_rng_state(dropout_p, rng_state):
    if dropout_p > 0 and (rng_state.device.type != "cpu" or rng_state.dtype != _torch.int64):
        raise RuntimeError("flashattn: this dropout backward's forward did not run on flashattn "
                           "(was flashattn.torch.activate() called in between?)")
    return rng_state


def _sdpa_forward(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                  *, scale=None):
    debug_mask = _no_debug_mask(return_debug_mask, query)
    # The output (and below, the gradients) get their input's strides, as PyTorch's own
    # kernel and its meta function give them; the kernels write through the BSHD view.
    out = _torch.empty_like(query)
    q, k, v, out_view = _bshd(query, key, value, out)
    _, lse, rng_state = _torch_ops.run_forward(
        q, k, v, None, None, None, 0, 0, float(dropout_p), _scale(query, scale),
        bool(is_causal), -1, -1, 0.0, None, out_view)
    return (out, lse, None, None, query.shape[2], key.shape[2],
            *_rng_outputs(rng_state, query), debug_mask)


def _sdpa_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                   max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    grads = tuple(_torch.empty_like(x) for x in (query, key, value))
    _torch_ops.run_backward(
        *_bshd(grad_out, query, key, value, out), logsumexp,
        _forward_rng_state(dropout_p, philox_seed), None, None, None, 0, 0, float(dropout_p),
        _scale(query, scale), bool(is_causal), -1, -1, 0.0, None,
        _torch.are_deterministic_algorithms_enabled(), _bshd(*grads))
    return grads


def _flash_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                   is_causal, return_debug_mask, *, scale=None, window_size_left=None,
                   window_size_right=None, seqused_k=None, alibi_slopes=None):
    # The backward op has neither argument, so its gradients would silently ignore them.
    for name, argument in (("seqused_k", seqused_k), ("alibi_slopes", alibi_slopes)):
        if argument is not None:
            raise NotImplementedError(f"flashattn: aten::_flash_attention_forward with {name} "
                                      "is not supported (its backward cannot see it)")
    debug_mask = _no_debug_mask(return_debug_mask, query)
    left, right = _window(window_size_left, window_size_right)
    out = _torch.empty_like(query) if value.shape[-1] == query.shape[-1] else None
    out, lse, rng_state = _torch_ops.run_forward(
        query, key, value, cum_seq_q, cum_seq_k, None, int(max_q), int(max_k), float(dropout_p),
        _scale(query, scale), bool(is_causal), left, 0 if is_causal else right, 0.0, None, out)
    return (out, lse, *_rng_outputs(rng_state, query), debug_mask)


def _flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                    max_k, dropout_p, is_causal, rng_state, unused, *, scale=None,
                    window_size_left=None, window_size_right=None):
    left, right = _window(window_size_left, window_size_right)
    return _torch_ops.run_backward(
        grad_out, query, key, value, out, logsumexp, _forward_rng_state(dropout_p, rng_state),
        cum_seq_q, cum_seq_k, None, int(max_q), int(max_k), float(dropout_p),
        _scale(query, scale), bool(is_causal), left, 0 if is_causal else right, 0.0, None,
        _torch.are_deterministic_algorithms_enabled())


if hasattr(_attention, "register_flash_attention_impl"):
    _attention.register_flash_attention_impl(NAME, register_fn=_register)
