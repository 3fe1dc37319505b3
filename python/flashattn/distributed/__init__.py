"""flashattn.distributed: exact attention over a sequence sharded across the ranks of a
torch.distributed process group (context parallelism), on flashattn's kernels.

    from flashattn.distributed import ring_flash_attn_func, shard
    q_local = shard(q, rank, world_size, layout="zigzag")  # [batch, seqlen / W, heads, d]
    out_local = ring_flash_attn_func(q_local, k_local, v_local, causal=True, layout="zigzag")

- ring_flash_attn_func / ring_flash_attn_varlen_func: K/V blocks travel a ring of
  isend/irecv; partial results merge through their log-sum-exp; autograd included.
- ulysses_flash_attn_func: all-to-all from sequence shards to head shards, attention on
  the whole sequence, all-to-all back (DeepSpeed-Ulysses); nheads and nheads_k divisible
  by the world size.
- hybrid_flash_attn_func: Ulysses inside groups of ranks, the ring across them (2D).
- shard / unshard: a whole-sequence tensor to a rank's rows in a layout, and back.
"""
from ._layout import LAYOUTS, shard, unshard
from .ring import ring_flash_attn_func, ring_flash_attn_varlen_func
from .ulysses import ulysses_flash_attn_func
from .hybrid import hybrid_flash_attn_func

__all__ = ["ring_flash_attn_func", "ring_flash_attn_varlen_func", "ulysses_flash_attn_func",
           "hybrid_flash_attn_func", "shard", "unshard", "LAYOUTS"]
