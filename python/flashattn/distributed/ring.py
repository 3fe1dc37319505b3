"""ring_flash_attn_func and ring_flash_attn_varlen_func: flash_attn_func's arguments on a
sequence sharded over the ranks of a torch.distributed process group.

Each rank passes its own rows (its shard, in the layout every rank names the same) and
gets back the attention of those rows over the whole sequence, exactly: every key block
visits every rank, and the ranks' partial results merge through their log-sum-exp.
"""
import torch.distributed as dist

from .._errors import InvalidArgumentError, invalid_argument
from . import _blocks
from ._agree import agree, collective_device
from ._arguments import (check_common, header, library_error, local_lengths,
                         process_group)
from ._block_calls import DeviceCall
from ._exchange import Ring
from ._layout import pieces_of_rank
from ._ring_attention import RingAttention, RingPlan


def ring_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                         window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                         deterministic=False, return_attn_probs=False, *, group=None,
                         layout="contiguous"):
    """q [batch, seqlen_local, nheads, d], k/v [batch, seqlen_local, nheads_k, d]: this
    rank's shard of the sequence (layout "contiguous": rows [r*n, (r+1)*n); "zigzag":
    chunks r and 2W-1-r of 2W, concatenated). Returns out [batch, seqlen_local, nheads,
    d], or with return_attn_probs (out, lse [batch, nheads, seqlen_local], None).
    Masks, windows and ALiBi are those of the whole sequence (seqlen_q == seqlen_k)."""
    function = "ring_flash_attn_func"
    error = check_common(q, k, v, 4, dropout_p, window_size, alibi_slopes, layout)
    if error is None and layout == "zigzag" and q.shape[1] % 2:
        error = invalid_argument("q", "an even local sequence length with layout='zigzag' "
                                 "(two equal chunks)", f"{q.shape[1]}")
    batch, rows = (q.shape[0], q.shape[1]) if error is None else (0, 0)
    if error is None:
        error = library_error(*(x.reshape(batch * rows, *x.shape[2:]) for x in (q, k, v)),
                              batch, softmax_scale, softcap, alibi_slopes)
    group = process_group(group)
    shared = header(q, k, v, causal, window_size, layout, error, softmax_scale, softcap,
                    batch=batch, local_seqlen=rows)
    agree(function, error, shared, [], group, collective_device(group, q))
    lengths = [[rows] * batch for _ in range(dist.get_world_size(group))]
    packed = [x.reshape(batch * rows, *x.shape[2:]) for x in (q, k, v)]
    out, lse = _ring(packed, lengths, group, layout, softmax_scale, causal, window_size,
                     softcap, alibi_slopes, deterministic)
    out = out.view(batch, rows, *out.shape[1:])
    if not return_attn_probs:
        return out
    return out, lse.view(lse.shape[0], batch, rows).transpose(0, 1), None


def ring_flash_attn_varlen_func(q, k, v, cu_seqlens, max_seqlen, dropout_p=0.0,
                                softmax_scale=None, causal=False, window_size=(-1, -1),
                                softcap=0.0, alibi_slopes=None, deterministic=False,
                                return_attn_probs=False, *, group=None,
                                layout="contiguous"):
    """Packed sequences: q [total_local, nheads, d], k/v [total_local, nheads_k, d] hold
    this rank's rows of every sequence, cu_seqlens (int32 [batch + 1], this rank's
    offsets) delimits them. Contiguous shards may be uneven (sequence b's rows on rank r
    follow those on ranks 0..r-1); zigzag needs every rank to hold the same, even number
    of rows of each sequence. max_seqlen (this rank's longest shard) is accepted for
    flash_attn's signature; the ring works the lengths out itself. Returns out, or (out,
    lse [nheads, total_local], None) with return_attn_probs."""
    function = "ring_flash_attn_varlen_func"
    error = check_common(q, k, v, 3, dropout_p, window_size, alibi_slopes, layout)
    lengths = []
    if error is None:
        lengths, error = local_lengths(cu_seqlens, q, layout)
    if error is None:
        error = library_error(q, k, v, len(lengths), softmax_scale, softcap, alibi_slopes)
    group = process_group(group)
    shared = header(q, k, v, causal, window_size, layout, error, softmax_scale,
                    softcap)
    every = agree(function, error, shared, lengths, group, collective_device(group, q))
    if layout == "zigzag" and any(every[r] != every[0] for r in range(len(every))):
        raise InvalidArgumentError(f"cu_seqlens: expected the same sequence lengths on every "
                                   f"rank with layout='zigzag', got {every}")
    out, lse = _ring((q, k, v), every, group, layout, softmax_scale, causal, window_size,
                     softcap, alibi_slopes, deterministic)
    return (out, lse, None) if return_attn_probs else out


def _ring(packed, lengths, group, layout, softmax_scale, causal, window_size, softcap,
          alibi_slopes, deterministic):
    q, k, v = packed
    ring = Ring(group)
    pieces = [pieces_of_rank(lengths, r, layout) for r in range(ring.world)]
    rows = [sum(per_seq) for per_seq in lengths]
    steps = []
    for step in range(ring.world):
        source = ring.source(step)
        calls = _blocks.plan_step(pieces[ring.rank], pieces[source], rows[ring.rank],
                                  rows[source], causal, tuple(window_size),
                                  alibi_slopes is not None)
        steps.append([DeviceCall(c, rows[ring.rank], alibi_slopes, q.device) for c in calls])
    plan = RingPlan(ring, steps, rows, softmax_scale, softcap, bool(deterministic))
    return RingAttention.apply(q, k, v, plan)
