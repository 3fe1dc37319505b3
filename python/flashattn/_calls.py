"""The library's three calls over any array framework.

An adapter (_numpy_arrays.NumpyArrays, _torch_tensors.TorchTensors) describes arrays for
the binding, allocates outputs and makes the Launch; everything else, building the
argument structs and the output shapes, is written once here.
"""
from typing import NamedTuple

from . import _C
from ._errors import invalid_argument

_Q_LAYOUT = {False: "[batch, seqlen_q, nheads, head_dim]",
             True: "[total_q, nheads, head_dim] (varlen)"}


# The argument records are NamedTuples: they are built on every call, and a NamedTuple
# builds several times faster than a frozen dataclass.
class Options(NamedTuple):
    """AttentionOptions with Python defaults; softmax_scale None means 1/sqrt(head_dim)."""

    softmax_scale: object = None
    causal: bool = False
    window_size: tuple = (-1, -1)
    softcap: float = 0.0
    alibi_slopes: object = None
    dropout_p: float = 0.0
    dropout_seed: int = 0
    dropout_offset: int = 0

    def to_c(self, adapter, head_dim):
        window = tuple(self.window_size)
        if len(window) != 2:
            raise invalid_argument("window_size", "a pair (left, right)", repr(self.window_size))
        options = _C.AttentionOptions()
        # Always explicit: the library reads 0 as "default", and a padded head dim must not
        # change the default.
        options.softmax_scale = (head_dim ** -0.5 if self.softmax_scale is None
                                 else float(self.softmax_scale))
        options.causal = bool(self.causal)
        options.window_left = int(window[0])
        options.window_right = int(window[1])
        options.softcap = float(self.softcap)
        options.alibi_slopes = adapter.describe(self.alibi_slopes, "alibi_slopes")
        options.dropout_p = float(self.dropout_p)
        options.dropout_seed = int(self.dropout_seed) & 0xFFFFFFFFFFFFFFFF
        options.dropout_offset = int(self.dropout_offset) & 0xFFFFFFFFFFFFFFFF
        return options


class Varlen(NamedTuple):
    """The packed layout: int32 offsets [batch + 1] into the rows of q and of k/v."""

    cu_seqlens_q: object
    cu_seqlens_k: object
    max_seqlen_q: int
    max_seqlen_k: int
    seqused_k: object = None

    def to_c(self, adapter):
        layout = _C.VarlenLayout()
        layout.cu_seqlens_q = adapter.describe(self.cu_seqlens_q, "cu_seqlens_q")
        layout.cu_seqlens_k = adapter.describe(self.cu_seqlens_k, "cu_seqlens_k")
        layout.seqused_k = adapter.describe(self.seqused_k, "seqused_k")
        layout.max_seqlen_q = int(self.max_seqlen_q)
        layout.max_seqlen_k = int(self.max_seqlen_k)
        return layout


def expect_rank(array, name, rank, layout):
    if array.ndim != rank:
        raise invalid_argument(name, f"rank {rank} {layout}", f"shape {tuple(array.shape)}")


def lse_shape(q, varlen):
    """fp32 log-sum-exp: [batch, nheads, seqlen_q], or [nheads, total_q] when packed."""
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def _run(entry, args, adapter, like):
    # Only the CUDA backend asks for workspace; skipping the query on the CPU spares a
    # second validation pass.
    workspace_bytes = _C.workspace_size(args, _C.Backend.CUDA) if adapter.is_cuda(like) else 0
    launch, workspace = adapter.launch(like, workspace_bytes)
    entry(args, launch)
    del workspace  # torch's allocator orders its reuse after the work queued on the stream


def forward(adapter, q, k, v, options, varlen=None, out=None):
    """Returns (out, lse); `out`, when given, is the output to write (any strides)."""
    expect_rank(q, "q", 3 if varlen else 4, _Q_LAYOUT[varlen is not None])
    if out is None:
        out = adapter.empty(q, tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = adapter.empty(q, lse_shape(q, varlen), float32=True)
    args = _C.ForwardArgs()
    args.q = adapter.describe(q, "q")
    args.k = adapter.describe(k, "k")
    args.v = adapter.describe(v, "v")
    args.out = adapter.describe(out, "out")
    args.lse = adapter.describe(lse, "lse")
    if varlen is not None:
        args.varlen = varlen.to_c(adapter)
    args.options = options.to_c(adapter, q.shape[-1])
    _run(_C.forward, args, adapter, q)
    return out, lse


def backward(adapter, dout, q, k, v, out, lse, options, varlen=None, deterministic=False,
             grads=None):
    """Returns (dq, dk, dv) in the shapes of q, k and v: contiguous, or `grads` (any
    strides) when given."""
    expect_rank(q, "q", 3 if varlen else 4, _Q_LAYOUT[varlen is not None])
    if grads is None:
        grads = tuple(adapter.empty(x, tuple(x.shape)) for x in (q, k, v))
    dq, dk, dv = grads
    args = _C.BackwardArgs()
    for field, array in (("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out),
                         ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        setattr(args, field, adapter.describe(array, field))
    if varlen is not None:
        args.varlen = varlen.to_c(adapter)
    args.options = options.to_c(adapter, q.shape[-1])
    args.deterministic = bool(deterministic)
    _run(_C.backward, args, adapter, q)
    return dq, dk, dv


class KVCache(NamedTuple):
    """What flash_attn_with_kvcache adds to attention: the cache and how to update it."""

    k_cache: object
    v_cache: object
    cache_seqlens: object
    k: object = None
    v: object = None
    rotary_cos: object = None
    rotary_sin: object = None
    cache_batch_idx: object = None
    cache_leftpad: object = None
    block_table: object = None
    rotary_interleaved: bool = True
    num_splits: int = 0


def forward_kvcache(adapter, q, cache, options):
    """Returns (out, lse); appends cache.k / cache.v to the caches in place."""
    expect_rank(q, "q", 4, _Q_LAYOUT[False])
    if cache.k is not None:
        adapter.expect_writable(cache.k_cache, "k_cache")
        adapter.expect_writable(cache.v_cache, "v_cache")
    out = adapter.empty(q, tuple(q.shape[:-1]) + (cache.v_cache.shape[-1],))
    lse = adapter.empty(q, lse_shape(q, None), float32=True)
    args = _C.KVCacheArgs()
    args.q = adapter.describe(q, "q")
    for field in ("k_cache", "v_cache", "cache_seqlens", "rotary_cos", "rotary_sin",
                  "cache_batch_idx", "cache_leftpad", "block_table"):
        setattr(args, field, adapter.describe(getattr(cache, field), field))
    args.k_new = adapter.describe(cache.k, "k")
    args.v_new = adapter.describe(cache.v, "v")
    args.rotary_interleaved = bool(cache.rotary_interleaved)
    args.num_splits = int(cache.num_splits)
    args.out = adapter.describe(out, "out")
    args.lse = adapter.describe(lse, "lse")
    args.options = options.to_c(adapter, q.shape[-1])
    _run(_C.forward_kvcache, args, adapter, q)
    return out, lse
