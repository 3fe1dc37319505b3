"""Padding helpers of flash_attn.bert_padding: between padded batches [batch, seqlen, ...]
and the packed rows the varlen functions take. torch tensors (differentiable) and numpy
arrays alike."""
import sys

import numpy as np

__all__ = ["unpad_input", "pad_input", "index_first_axis", "index_put_first_axis",
           "unpad_input_for_concatenated_sequences"]


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


def index_first_axis(input, indices):
    """input [rows, ...] -> input[indices] (flash_attn's name for the gather)."""
    return input[indices]


def index_put_first_axis(values, indices, first_axis_dim):
    """values [n, ...] scattered to rows `indices` of zeros [first_axis_dim, ...]."""
    shape = (first_axis_dim, *values.shape[1:])
    if _is_torch(values):
        return values.new_zeros(shape).index_put((indices,), values)
    output = np.zeros(shape, dtype=values.dtype)
    output[np.asarray(indices)] = values
    return output


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Several sequences concatenated in each row: attention_mask_in_length [batch, seqlen]
    holds, left-aligned, the lengths of the sequences of each row (zeros after them), e.g.
    [2, 3, 0, 0, 0, 0] for a row of a 2-token then a 3-token sequence and one pad.

    Returns (rows [total, ...], indices [total] into the flattened batch*seqlen, cu_seqlens
    int32 [sequences + 1] over every sequence of every row, longest sequence (int))."""
    if _is_torch(hidden_states):
        import torch
        lengths = attention_mask_in_length
        seqlen = lengths.shape[-1]
        used = torch.arange(seqlen, device=lengths.device)[None, :] < lengths.sum(-1, keepdim=True)
        sequence_lengths = lengths.flatten()[lengths.flatten() != 0].to(torch.int32)
        indices = torch.nonzero(used.flatten(), as_tuple=False).flatten()
        cu_seqlens = torch.nn.functional.pad(
            torch.cumsum(sequence_lengths, dim=0, dtype=torch.int32), (1, 0))
        flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
        return flat[indices], indices, cu_seqlens, int(sequence_lengths.max().item())
    lengths = np.asarray(attention_mask_in_length)
    seqlen = lengths.shape[-1]
    used = np.arange(seqlen)[None, :] < lengths.sum(-1, keepdims=True)
    sequence_lengths = lengths.flatten()[lengths.flatten() != 0].astype(np.int32)
    indices = np.flatnonzero(used)
    cu_seqlens = np.concatenate([[0], np.cumsum(sequence_lengths)]).astype(np.int32)
    flat = np.asarray(hidden_states).reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, int(sequence_lengths.max(initial=0))
