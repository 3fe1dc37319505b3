"""The checks every context-parallel function makes on its own rank's arguments before
the ranks compare notes (_agree.py): errors are returned, not raised, so that a rejecting
rank still takes part in the comparison and no rank is left waiting."""
import torch
import torch.distributed as dist

from .._errors import UnsupportedError, invalid_argument
from ._layout import LAYOUTS

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def process_group(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("flashattn.distributed: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    return dist.group.WORLD if group is None else group


def check_common(q, k, v, rank, dropout_p, window_size, alibi_slopes, layout):
    """This rank's own argument errors (or None), in the library's wording."""
    layout_text = ("[total_local, heads, d] (varlen)" if rank == 3
                   else "[batch, seqlen_local, heads, d]")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            return invalid_argument(name, "a torch.Tensor", type(x).__name__)
        if x.dim() != rank:
            return invalid_argument(name, f"rank {rank} {layout_text}",
                                    f"shape {tuple(x.shape)}")
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


def local_lengths(cu_seqlens, q, layout):
    """(this rank's sequence lengths, error or None) from its cu_seqlens."""
    if (not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1
            or not len(cu_seqlens)):
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


def header(q, k, v, causal, window_size, layout, error, softmax_scale, softcap, **more):
    """What must be the same on every rank: heads, head dims, dtype, the options, and
    `more` ({name: int}); zeros where this rank's call was rejected (`error`)."""
    names = ["nheads", "nheads_k", "head_dim", "head_dim_v", "dtype (0 fp32, 1 fp16, 2 bf16)",
             "layout (0 contiguous, 1 zigzag)", "causal", "window_size[0]", "window_size[1]",
             "softmax_scale (-1: 1/sqrt(head_dim))", "softcap"]
    names += list(more)
    if error is not None:
        return dict.fromkeys(names, 0)
    window = tuple(window_size)
    values = [q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], _DTYPES[q.dtype],
              LAYOUTS.index(layout), int(bool(causal)), int(window[0]), int(window[1]),
              -1.0 if softmax_scale is None else float(softmax_scale), float(softcap)]
    return dict(zip(names, values + list(more.values())))


def library_error(q, k, v, sequences, softmax_scale, softcap, alibi_slopes):
    """The library's own rejection of these tensors and options (or None), from a call on
    at most one row: what only the library checks (head dims, a dtype the device cannot
    run, softcap, scale, ALiBi's shape) then fails on every rank before any block moves,
    instead of on one rank in the middle of the ring. q, k, v are packed [rows, heads, d];
    `sequences` is the batch (or sequence count) that ALiBi's [batch, nheads] refers to."""
    from .. import _torch_ops
    from .._calls import Options
    from .._errors import Error

    rows = min(1, q.shape[0], k.shape[0])
    offsets = torch.tensor([0] + [rows] * max(sequences, 1), dtype=torch.int32,
                           device=q.device)
    options = Options(softmax_scale, False, (-1, -1), softcap, alibi_slopes)
    try:
        _torch_ops.forward_with_options(q[:rows], k[:rows], v[:rows], offsets, offsets, None,
                                        rows, rows, options, with_lse=False)
    except (Error, ValueError, NotImplementedError, TypeError, RuntimeError) as error:
        return error
    return None
