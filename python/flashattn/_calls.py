"""The argument records every frontend shares (Options, Varlen, KVCache and their checks),
and the library's three calls through an array adapter.

numpy arrays run the calls here: the adapter (_numpy_arrays.NumpyArrays) describes arrays
for the binding, allocates outputs and makes the Launch; building the argument structs
and the output shapes is written once here. torch tensors take the binding's *_tensors
calls instead (_torch_ops.py), which read the same records in C++.
"""
from typing import NamedTuple

from . import _C
from ._errors import invalid_argument

Q_LAYOUT = {False: "[batch, seqlen_q, nheads, head_dim]",
             True: "[total_q, nheads, head_dim] (varlen)"}
K_LAYOUT = {False: "[batch, seqlen_k, nheads_k, head_dim]",
             True: "[total_k, nheads_k, head_dim] (varlen)"}
CACHE_LAYOUT = "[batch_cache, seqlen_cache, nheads_k, head_dim] (or paged)"
_INT32 = (-2**31, 2**31 - 1)


def int32(value, name):
    """`value` as a Python int, or the library's kind of error when it does not fit the
    int32 the library takes (the binding would only say "incompatible arguments")."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise invalid_argument(name, "an integer", repr(value)) from None
    if not _INT32[0] <= number <= _INT32[1]:
        raise invalid_argument(name, "an integer that fits int32 (|x| < 2^31)", str(number))
    return number


def flash_attn_window(causal, window_size):
    """flash-attn's rule: causal wins over a right window (the library's API rejects the
    pair), so causal=True with window_size=(left, right) is (left, 0)."""
    window = tuple(window_size)
    if len(window) != 2:
        raise invalid_argument("window_size", "a pair (left, right)", repr(window_size))
    left, right = window
    return (left, 0) if causal else (left, right)


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
    # torch: an int64 [2] tensor on q's device holding (seed, offset), read when the call
    # runs (so a CUDA graph replays with the values drawn in it); None: the two ints above.
    dropout_seed_offset: object = None

    def to_c(self, adapter, head_dim):
        window = tuple(self.window_size)
        if len(window) != 2:
            raise invalid_argument("window_size", "a pair (left, right)", repr(self.window_size))
        options = _C.AttentionOptions()
        # The default is made explicit here, from the head dim the caller passed. Left unset
        # (None) only for a head dim the library will reject with its own message.
        if self.softmax_scale is not None:
            options.softmax_scale = float(self.softmax_scale)
        elif head_dim > 0:
            options.softmax_scale = head_dim ** -0.5
        options.causal = bool(self.causal)
        options.window_left = int32(window[0], "window_size[0]")
        options.window_right = int32(window[1], "window_size[1]")
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
        layout.max_seqlen_q = int32(self.max_seqlen_q, "max_seqlen_q")
        layout.max_seqlen_k = int32(self.max_seqlen_k, "max_seqlen_k")
        return layout


class Descales(NamedTuple):
    """FP8 dequantization factors (FlashAttention-3's q_descale, k_descale, v_descale):
    fp32 [batch, nheads_k] or [1], each optional."""

    q: object = None
    k: object = None
    v: object = None

    def as_library_takes(self):
        """A 0-dim factor is one for the whole tensor, which the library takes as [1]."""
        return Descales(*(x.reshape(1) if x is not None and x.ndim == 0 else x for x in self))

    def to_c(self, adapter):
        q, k, v = self.as_library_takes()
        descale = _C.Descales()
        descale.q = adapter.describe(q, "q_descale")
        descale.k = adapter.describe(k, "k_descale")
        descale.v = adapter.describe(v, "v_descale")
        return descale


def expect_rank(array, name, rank, layout):
    if array is None:
        raise invalid_argument(name, f"an array {layout}", "None")
    if array.ndim != rank:
        raise invalid_argument(name, f"rank {rank} {layout}", f"shape {tuple(array.shape)}")


def expect_attention_ranks(q, k, v, varlen):
    """q, k and v present with the layout's rank: the shapes of the outputs are read from
    them before the library sees the call."""
    packed = varlen is not None
    rank = 3 if packed else 4
    expect_rank(q, "q", rank, Q_LAYOUT[packed])
    expect_rank(k, "k", rank, K_LAYOUT[packed])
    expect_rank(v, "v", rank, K_LAYOUT[packed])


def _allocate(make_outputs, explain):
    """make_outputs(), or, when the outputs do not fit in memory, the library's error for
    the call if it has one (a huge shape is usually an invalid one): explain() describes
    the call without outputs of its own and asks the library to validate it."""
    try:
        return make_outputs()
    except MemoryError:
        explain()
        raise


def _validate_only(entry_args, adapter, like):
    """Validation without running: workspace_size raises the library's exception for an
    invalid call and writes nothing."""
    _C.workspace_size(entry_args, _C.Backend.CUDA if adapter.is_cuda(like) else _C.Backend.CPU)


def _stand_in(adapter, like, shape, name, float32=False, bf16=False):
    """A description of an output that was not allocated: `like`'s memory, read by nothing
    (only validation sees it), with the output's dtype, shape and contiguous strides."""
    described = adapter.describe(like, name)
    dtype = _C.DType.F32 if float32 else _C.DType.BF16 if bf16 else described.dtype
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return _C.Tensor(described.data, dtype, list(shape), strides[::-1],
                     described.device_type, described.device_index)


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


def forward(adapter, q, k, v, options, varlen=None, out=None, descale=None):
    """Returns (out, lse); `out`, when given, is the output to write (any strides). e4m3
    inputs (with `descale`, a Descales) give a bf16 out."""
    expect_attention_ranks(q, k, v, varlen)
    args = _C.ForwardArgs()
    args.q = adapter.describe(q, "q")
    args.k = adapter.describe(k, "k")
    args.v = adapter.describe(v, "v")
    if varlen is not None:
        args.varlen = varlen.to_c(adapter)
    args.options = options.to_c(adapter, q.shape[-1])
    if descale is not None:
        args.descale = descale.to_c(adapter)
    out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    new_out = adapter.empty_bf16 if adapter.is_e4m3(q) else adapter.empty

    def explain():
        args.out = _stand_in(adapter, q, out_shape, "out", bf16=adapter.is_e4m3(q))
        args.lse = _stand_in(adapter, q, lse_shape(q, varlen), "lse", float32=True)
        _validate_only(args, adapter, q)

    out, lse = _allocate(lambda: (new_out(q, out_shape) if out is None else out,
                                  adapter.empty(q, lse_shape(q, varlen), float32=True)),
                         explain)
    args.out = adapter.describe(out, "out")
    args.lse = adapter.describe(lse, "lse")
    _run(_C.forward, args, adapter, q)
    return out, lse


def backward(adapter, dout, q, k, v, out, lse, options, varlen=None, deterministic=False,
             grads=None):
    """Returns (dq, dk, dv) in the shapes of q, k and v: contiguous, or `grads` (any
    strides) when given."""
    expect_attention_ranks(q, k, v, varlen)
    args = _C.BackwardArgs()
    for field, array in (("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out),
                         ("lse", lse)):
        setattr(args, field, adapter.describe(array, field))
    if varlen is not None:
        args.varlen = varlen.to_c(adapter)
    args.options = options.to_c(adapter, q.shape[-1])
    args.deterministic = bool(deterministic)

    def explain():
        for field, x in (("dq", q), ("dk", k), ("dv", v)):
            setattr(args, field, _stand_in(adapter, x, tuple(x.shape), field))
        _validate_only(args, adapter, q)

    if grads is None:
        grads = _allocate(lambda: tuple(adapter.empty(x, tuple(x.shape)) for x in (q, k, v)),
                          explain)
    dq, dk, dv = grads
    for field, array in (("dq", dq), ("dk", dk), ("dv", dv)):
        setattr(args, field, adapter.describe(array, field))
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
    descale: object = None  # Descales of an e4m3 cache


def forward_kvcache(adapter, q, cache, options):
    """Returns (out, lse); appends cache.k / cache.v to the caches in place."""
    expect_rank(q, "q", 4, Q_LAYOUT[False])
    expect_rank(cache.k_cache, "k_cache", 4, CACHE_LAYOUT)
    expect_rank(cache.v_cache, "v_cache", 4, CACHE_LAYOUT)
    if cache.k is not None:
        adapter.expect_writable(cache.k_cache, "k_cache")
        adapter.expect_writable(cache.v_cache, "v_cache")
    args = _C.KVCacheArgs()
    args.q = adapter.describe(q, "q")
    for field in ("k_cache", "v_cache", "cache_seqlens", "rotary_cos", "rotary_sin",
                  "cache_batch_idx", "cache_leftpad", "block_table"):
        setattr(args, field, adapter.describe(getattr(cache, field), field))
    args.k_new = adapter.describe(cache.k, "k")
    args.v_new = adapter.describe(cache.v, "v")
    args.rotary_interleaved = bool(cache.rotary_interleaved)
    args.num_splits = int32(cache.num_splits, "num_splits")
    args.options = options.to_c(adapter, q.shape[-1])
    if cache.descale is not None:
        args.descale = cache.descale.to_c(adapter)
    out_shape = tuple(q.shape[:-1]) + (cache.v_cache.shape[-1],)

    def explain():
        args.out = _stand_in(adapter, q, out_shape, "out")
        args.lse = _stand_in(adapter, q, lse_shape(q, None), "lse", float32=True)
        _validate_only(args, adapter, q)

    out, lse = _allocate(lambda: (adapter.empty(q, out_shape),
                                  adapter.empty(q, lse_shape(q, None), float32=True)), explain)
    args.out = adapter.describe(out, "out")
    args.lse = adapter.describe(lse, "lse")
    _run(_C.forward_kvcache, args, adapter, q)
    return out, lse
