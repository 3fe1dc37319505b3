"""Padding helpers of flash_attn.bert_padding: between padded batches [batch, seqlen, ...]
and the packed rows the varlen functions take. torch tensors (differentiable) and numpy
arrays alike."""
import sys

import numpy as np

__all__ = ["unpad_input", "pad_input"]


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states [batch, seqlen, ...], attention_mask [batch, seqlen] (nonzero: a token).
    unused_mask marks rows that are allocated but not attended (counted in cu_seqlens,
    not in the returned used lengths).

    Returns (rows [total, ...], indices [total] into the flattened batch*seqlen,
    cu_seqlens int32 [batch + 1], max_seqlen_in_batch (int), seqused int32 [batch])."""
    if _is_torch(hidden_states):
        import torch
        mask = attention_mask.bool()
        rows = mask | unused_mask.bool() if unused_mask is not None else mask
        seqlens = rows.sum(dim=-1, dtype=torch.int32)
        used = mask.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(rows.flatten(), as_tuple=False).flatten()
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32),
                                             (1, 0))
        flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
        return flat[indices], indices, cu_seqlens, int(seqlens.max().item()), used
    hidden_states = np.asarray(hidden_states)
    mask = np.asarray(attention_mask).astype(bool)
    rows = mask | np.asarray(unused_mask).astype(bool) if unused_mask is not None else mask
    seqlens = rows.sum(axis=-1).astype(np.int32)
    indices = np.flatnonzero(rows)
    cu_seqlens = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return (flat[indices], indices, cu_seqlens, int(seqlens.max(initial=0)),
            mask.sum(axis=-1).astype(np.int32))


def pad_input(hidden_states, indices, batch, seqlen):
    """rows [total, ...] back to [batch, seqlen, ...], zeros where there is no token."""
    shape = (batch * seqlen, *hidden_states.shape[1:])
    if _is_torch(hidden_states):
        output = hidden_states.new_zeros(shape).index_put((indices,), hidden_states)
    else:
        output = np.zeros(shape, dtype=hidden_states.dtype)
        output[np.asarray(indices)] = hidden_states
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])
