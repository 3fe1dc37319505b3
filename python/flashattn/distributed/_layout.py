"""Which rows of the whole sequence each rank holds: the contiguous and the zigzag layouts.

A rank's local tensor is packed (rows of sequence 0, then of sequence 1, ...); a Piece is
a run of local rows that is also a run of one sequence's global positions. Contiguous:
rank r holds one piece per sequence, after the rows of ranks 0..r-1 (shards may be
uneven). Zigzag: each sequence is cut into 2W equal chunks and rank r holds chunks r and
2W-1-r, so that under a causal mask every rank does the same amount of work.
"""
from typing import List, NamedTuple

LAYOUTS = ("contiguous", "zigzag")


class Piece(NamedTuple):
    seq: int           # which sequence (batch entry)
    local_start: int   # first row in the rank's packed tensor
    global_start: int  # its position in the whole sequence
    length: int


def pieces_of_rank(local_lengths, rank, layout):
    """Pieces of `rank` given every rank's local sequence lengths (local_lengths[r][b]);
    the caller has checked what the layout needs (zigzag: equal, even lengths)."""
    world = len(local_lengths)
    pieces: List[Piece] = []
    local_start = 0
    for seq, length in enumerate(local_lengths[rank]):
        if layout == "contiguous":
            before = sum(local_lengths[r][seq] for r in range(rank))
            pieces.append(Piece(seq, local_start, before, length))
        else:
            chunk = length // 2
            pieces.append(Piece(seq, local_start, rank * chunk, chunk))
            pieces.append(Piece(seq, local_start + chunk, (2 * world - 1 - rank) * chunk, chunk))
        local_start += length
    return [p for p in pieces if p.length > 0]


def shard(x, rank, world_size, layout="contiguous", dim=1):
    """The rows of the whole-sequence tensor `x` (sequence along `dim`) that `rank` holds
    in `layout`; the sequence length must divide evenly (by world_size, or 2*world_size
    for zigzag)."""
    parts = 2 * world_size if layout == "zigzag" else world_size
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if x.shape[dim] % parts:
        raise ValueError(f"x: expected a sequence length (dim {dim}) divisible by {parts}, "
                         f"got {x.shape[dim]}")
    chunks = x.chunk(parts, dim=dim)
    if layout == "contiguous":
        return chunks[rank]
    import torch
    return torch.cat([chunks[rank], chunks[parts - 1 - rank]], dim=dim)


def unshard(shards, layout="contiguous", dim=1):
    """The whole-sequence tensor from every rank's shard (the inverse of shard)."""
    import torch
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if layout == "contiguous":
        return torch.cat(list(shards), dim=dim)
    world = len(shards)
    halves = [s.chunk(2, dim=dim) for s in shards]
    order = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(order, dim=dim)
