"""ulysses_flash_attn_func: DeepSpeed-Ulysses context parallelism. An all-to-all turns
each rank's sequence shard of every head into the whole sequence of nheads / W heads;
flashattn attends over the whole sequence; a second all-to-all gives every rank its rows
of every head back. Gradients flow back through the same all-to-alls (autograd)."""
import torch
import torch.distributed as dist

from .. import interface
from .._errors import invalid_argument
from ._all_to_all import all_to_all
from ._agree import agree, collective_device
from ._arguments import check_common, header, library_error, process_group


def ulysses_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                            deterministic=False, return_attn_probs=False, *, group=None,
                            layout="contiguous"):
    """As ring_flash_attn_func (same shards, same results), for nheads and nheads_k
    divisible by the group's size. Returns out, or (out, lse [batch, nheads,
    seqlen_local], None) with return_attn_probs."""
    group = process_group(group)
    validate(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
             layout, dist.get_world_size(group), group, "ulysses_flash_attn_func")

    def attend(q_all, k_all, v_all, slopes):
        return interface.flash_attn_func(q_all, k_all, v_all, 0.0, softmax_scale, causal,
                                         window_size, softcap, slopes, deterministic, True)[:2]

    out, lse = heads_attention(q, k, v, group, layout, alibi_slopes, attend, return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def validate(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
             layout, heads_split, group, function, error=None, **more):
    """Checks this rank's call (heads split `heads_split` ways; `error`: what the caller
    found already) and agrees on it with every rank of `group`; raises on every rank if
    any rank's call is wrong."""
    error = error or check_common(q, k, v, 4, dropout_p, window_size, alibi_slopes, layout)
    if error is None:
        for name, heads in (("q", q.shape[2]), ("k", k.shape[2])):
            if heads % heads_split:
                error = invalid_argument(name, f"a head count divisible by {heads_split} "
                                         f"(Ulysses splits heads across {heads_split} ranks)",
                                         str(heads))
    if error is None and layout == "zigzag" and q.shape[1] % 2:
        error = invalid_argument("q", "an even local sequence length with layout='zigzag'",
                                 str(q.shape[1]))
    batch, rows = (q.shape[0], q.shape[1]) if error is None else (0, 0)
    if error is None:
        error = library_error(*(x.reshape(batch * rows, *x.shape[2:]) for x in (q, k, v)),
                              batch, softmax_scale, softcap, alibi_slopes)
    shared = header(q, k, v, causal, window_size, layout, error, softmax_scale, softcap,
                    batch=batch, local_seqlen=rows, **more)
    agree(function, error, shared, [], group, collective_device(group, q))


def heads_attention(q, k, v, group, layout, alibi_slopes, attend, with_lse):
    """all-to-all to this rank's heads of the sequence held by `group`, attend(q, k, v,
    slopes) -> (out, lse) on them, all-to-all back: (out, lse or None) of this rank's
    rows. `layout` is how the group's shards make up its sequence ("zigzag": chunks r
    and 2W-1-r; "contiguous": in rank order)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    order = _sequence_order(q.shape[1], world, layout, q.device)
    q_all, k_all, v_all = (_to_heads(x, world, group, order) for x in (q, k, v))
    if alibi_slopes is not None:
        heads = q.shape[2] // world
        alibi_slopes = alibi_slopes[..., rank * heads:(rank + 1) * heads].contiguous()
    out_all, lse_all = attend(q_all, k_all, v_all, alibi_slopes)
    out = _to_sequence(out_all, world, group, order)
    if not with_lse:
        return out, None
    # lse [batch, heads / W, seqlen] is a sequence-major tensor [batch, seqlen, heads / W, 1].
    lse = _to_sequence(lse_all.detach().transpose(1, 2).unsqueeze(-1), world, group, order)
    return out, lse.squeeze(-1).transpose(1, 2)


def _sequence_order(rows, world, layout, device):
    """Where each row of the whole sequence sits in the ranks' shards laid end to end
    (None for contiguous shards, which are in order already)."""
    if layout == "contiguous":
        return None
    chunk = rows // 2
    starts = [0] * (2 * world)
    for r in range(world):
        starts[r] = r * rows
        starts[2 * world - 1 - r] = r * rows + chunk
    index = [s + i for s in starts for i in range(chunk)]
    return torch.tensor(index, dtype=torch.long, device=device)


def _to_heads(x, world, group, order):
    """[batch, rows, heads, d] shards of the sequence -> [batch, W * rows, heads / W, d]:
    the whole sequence of this rank's heads."""
    batch, rows, heads, dim = x.shape
    send = x.reshape(batch, rows, world, heads // world, dim).permute(2, 0, 1, 3, 4)
    received = all_to_all(send, group)
    whole = received.permute(1, 0, 2, 3, 4).reshape(batch, world * rows, heads // world, dim)
    return whole if order is None else whole.index_select(1, order)


def _to_sequence(x, world, group, order):
    """The inverse of _to_heads: [batch, W * rows, heads / W, d] -> [batch, rows, heads, d]."""
    if order is not None:
        x = torch.empty_like(x).index_copy(1, order, x)
    batch, total, heads, dim = x.shape
    rows = total // world
    send = x.reshape(batch, world, rows, heads, dim).permute(1, 0, 2, 3, 4)
    received = all_to_all(send, group)
    return received.permute(1, 2, 0, 3, 4).reshape(batch, rows, world * heads, dim)
