"""ring_flash_attn_func and ring_flash_attn_varlen_func: flash_attn_func's arguments on a
sequence sharded over the ranks of a torch.distributed process group.

Each rank passes its own rows (its shard, in the layout every rank names the same) and
gets back the attention of those rows over the whole sequence, exactly: every key block
visits every rank, and the ranks' partial results merge through their log-sum-exp.
"""
import torch
import torch.distributed as dist

from .._errors import InvalidArgumentError, UnsupportedError, invalid_argument
from . import _blocks
from ._agree import agree, collective_device
from ._calls import DeviceCall
from ._exchange import Ring
from ._layout import LAYOUTS, pieces_of_rank
from ._ring_attention import RingAttention, RingPlan

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


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
    error = _check_common(q, k, v, 4, dropout_p, window_size, alibi_slopes, layout)
    if error is None and layout == "zigzag" and q.shape[1] % 2:
        error = invalid_argument("q", "an even local sequence length with layout='zigzag' "
                                 "(two equal chunks)", f"{q.shape[1]}")
    batch, rows = (q.shape[0], q.shape[1]) if error is None else (0, 0)
    group = _group(group)
    header = _header(q, k, v, causal, window_size, layout, error, batch=batch,
                     local_seqlen=rows)
    agree(function, error, header, [], group, collective_device(group, q))
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
    error = _check_common(q, k, v, 3, dropout_p, window_size, alibi_slopes, layout)
    lengths = []
    if error is None:
        lengths, error = _local_lengths(cu_seqlens, q, layout)
    group = _group(group)
    header = _header(q, k, v, causal, window_size, layout, error)
    every = agree(function, error, header, lengths, group, collective_device(group, q))
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
                                  rows[source], causal, tuple(window_size), alibi_slopes is not None)
        steps.append([DeviceCall(c, rows[ring.rank], alibi_slopes, q.device) for c in calls])
    plan = RingPlan(ring, steps, rows, softmax_scale, softcap, bool(deterministic))
    return RingAttention.apply(q, k, v, plan)


def _group(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("flashattn.distributed: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    return dist.group.WORLD if group is None else group


def _check_common(q, k, v, rank, dropout_p, window_size, alibi_slopes, layout):
    """This rank's own argument errors (or None), in the library's wording."""
    layout_text = "[total_local, heads, d] (varlen)" if rank == 3 else "[batch, seqlen_local, heads, d]"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            return invalid_argument(name, "a torch.Tensor", type(x).__name__)
        if x.dim() != rank:
            return invalid_argument(name, f"rank {rank} {layout_text}", f"shape {tuple(x.shape)}")
    if k.shape[:-1] != v.shape[:-1] or k.shape[:-2] != q.shape[:-2]:
        return invalid_argument("k", "the rows of q (a ring shards q, k and v alike) and of v",
                                f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.dtype != k.dtype or q.dtype != v.dtype or q.dtype not in _DTYPES:
        return invalid_argument("k", f"q's dtype ({q.dtype}), one of fp32, fp16, bf16",
                                f"k {k.dtype}, v {v.dtype}")
    if dropout_p != 0:
        return UnsupportedError(f"dropout_p: expected 0.0 (ring attention has no dropout: "
                                f"its blocks would need the whole sequence's dropout "
                                f"pattern), got {dropout_p}")
    if layout not in LAYOUTS:
        return invalid_argument("layout", f"one of {LAYOUTS}", repr(layout))
    window = tuple(window_size) if isinstance(window_size, (tuple, list)) else ()
    if len(window) != 2 or not all(isinstance(w, int) and w >= -1 for w in window):
        return invalid_argument("window_size", "a pair (left, right) of ints >= -1 "
                                "(-1: unbounded)", repr(window_size))
    if alibi_slopes is not None and (not isinstance(alibi_slopes, torch.Tensor)
                                     or alibi_slopes.dim() not in (1, 2)):
        return invalid_argument("alibi_slopes", "an fp32 tensor [nheads] or [batch, nheads]",
                                repr(getattr(alibi_slopes, "shape", alibi_slopes)))
    return None


def _local_lengths(cu_seqlens, q, layout):
    """(this rank's sequence lengths, error or None) from its cu_seqlens."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or not len(cu_seqlens):
        return [], invalid_argument("cu_seqlens", "an int32 tensor [batch + 1]",
                                    repr(getattr(cu_seqlens, "shape", cu_seqlens)))
    offsets = cu_seqlens.tolist()
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    if offsets[0] != 0 or any(n < 0 for n in lengths) or offsets[-1] != q.shape[0]:
        return [], invalid_argument("cu_seqlens", f"offsets from 0, never decreasing, ending "
                                    f"at q's {q.shape[0]} rows", str(offsets))
    if layout == "zigzag" and any(n % 2 for n in lengths):
        return [], invalid_argument("cu_seqlens", "even sequence lengths with "
                                    "layout='zigzag' (two equal chunks each)", str(lengths))
    return lengths, None


def _header(q, k, v, causal, window_size, layout, error, **more):
    """What must be the same on every rank: heads, head dims, dtype, the options, and
    `more` ({name: int}); zeros where this rank's call was rejected (`error`)."""
    names = ["nheads", "nheads_k", "head_dim", "head_dim_v", "dtype (0 fp32, 1 fp16, 2 bf16)",
             "layout (0 contiguous, 1 zigzag)", "causal", "window_size[0]", "window_size[1]"]
    names += list(more)
    if error is not None:
        return dict.fromkeys(names, 0)
    window = tuple(window_size)
    values = [q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], _DTYPES[q.dtype],
              LAYOUTS.index(layout), int(bool(causal)), int(window[0]), int(window[1])]
    return dict(zip(names, values + list(more.values())))
