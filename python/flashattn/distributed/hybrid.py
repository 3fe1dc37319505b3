"""hybrid_flash_attn_func: Ulysses inside groups, the ring across them (2D context
parallelism). The ranks form a grid: a Ulysses group trades sequence for heads among its
U ranks, then each head slice runs the ring over the R ranks that hold it (one per
Ulysses group), so all-to-all traffic stays inside a group (a node, say) and only K/V
blocks cross between groups."""
import torch
import torch.distributed as dist

from .._errors import invalid_argument
from ._arguments import process_group
from ._layout import LAYOUTS
from .ring import ring_flash_attn_func
from .ulysses import heads_attention, validate


def hybrid_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, *, ring_group,
                           ulysses_group, layout="contiguous", group=None):
    """q [batch, seqlen_local, nheads, d], k/v [batch, seqlen_local, nheads_k, d]: the rank
    with index i in its ring_group and j in its ulysses_group holds contiguous piece j (of
    U) of ring shard i (of R, in `layout`): shard(shard(x, i, R, layout), j, U). nheads
    and nheads_k divisible by U. `group` (default: the world) holds every rank of the
    grid: the ranks agree on the call there first. Returns out, or (out, lse [batch,
    nheads, seqlen_local], None) with return_attn_probs."""
    group = process_group(group)
    ring_size, ulysses_size = dist.get_world_size(ring_group), dist.get_world_size(ulysses_group)
    # The ring's layout applies to a Ulysses group's pieces together, not to one rank's.
    error = None
    if layout not in LAYOUTS:
        error = invalid_argument("layout", f"one of {LAYOUTS}", repr(layout))
    elif layout == "zigzag" and isinstance(q, torch.Tensor) and q.dim() == 4 \
            and ulysses_size * q.shape[1] % 2:
        error = invalid_argument("q", "an even sequence length per Ulysses group with "
                                 "layout='zigzag'", f"{ulysses_size} x {q.shape[1]}")
    validate(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
             "contiguous", ulysses_size, group, "hybrid_flash_attn_func", error,
             ring_size=ring_size, ulysses_size=ulysses_size,
             ring_layout=LAYOUTS.index(layout) if error is None else 0)

    def attend(q_all, k_all, v_all, slopes):
        return ring_flash_attn_func(q_all, k_all, v_all, 0.0, softmax_scale, causal,
                                    window_size, softcap, slopes, deterministic, True,
                                    group=ring_group, layout=layout)[:2]

    # A Ulysses group's pieces, in its rank order, are one ring shard.
    out, lse = heads_attention(q, k, v, ulysses_group, "contiguous", alibi_slopes, attend,
                               return_attn_probs)
    return (out, lse, None) if return_attn_probs else out
