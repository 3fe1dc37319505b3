"""What each rank of a distributed test runs (tests/python/test_distributed.py sends these
to the ranks of a distributed_harness.RankPool).

Every rank builds the same whole-sequence inputs from the seed, runs the distributed
function on its shard, and gathers the shards back; rank 0 then compares them with one
flashattn call on the whole sequence and with the float64 reference, and returns the
errors: {name: (error of the distributed result, error of the single-process call)}, both
against the reference, plus "vs_single" entries (distributed against single-process)."""
import torch
import torch.distributed as dist

import flashattn
from flashattn.distributed import (hybrid_flash_attn_func, ring_flash_attn_func,
                                   ring_flash_attn_varlen_func, shard, ulysses_flash_attn_func,
                                   unshard)
import reference_torch

FUNCTIONS = {"ring": ring_flash_attn_func, "ulysses": ulysses_flash_attn_func,
             "hybrid": hybrid_flash_attn_func}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _inputs(seed, shapes, dtype, alibi, batch, heads):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(shape, generator=generator).to(dtype) for shape in shapes]
    slopes = None
    if alibi == "shared":
        slopes = torch.rand(heads, generator=generator) * 0.5
    elif alibi == "per_batch":
        slopes = torch.rand(batch, heads, generator=generator) * 0.5
    return tensors, slopes


def _gather(local, layout, dim, ulysses_size=1):
    """The whole-sequence tensor from every rank's `local` (see _sharding)."""
    every = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(every, local.contiguous())
    ring_shards = [torch.cat(every[i:i + ulysses_size], dim)
                   for i in range(0, len(every), ulysses_size)]
    return unshard(ring_shards, layout, dim)


def _sharding(rank, world, variant, ulysses_size):
    """(function of (x, layout, dim) giving this rank's rows, extra keyword arguments of
    the variant). Hybrid: rank = i * U + j holds piece j of ring shard i; its Ulysses
    group is the ranks of the same i, its ring group those of the same j."""
    if variant != "hybrid":
        return (lambda x, layout, dim=1: shard(x, rank, world, layout, dim)), {}
    rings = world // ulysses_size
    # Every rank creates every group, in the same order (torch.distributed's rule).
    ulysses_groups = [dist.new_group([i * ulysses_size + j for j in range(ulysses_size)])
                      for i in range(rings)]
    ring_groups = [dist.new_group([i * ulysses_size + j for i in range(rings)])
                   for j in range(ulysses_size)]
    i, j = divmod(rank, ulysses_size)

    def local(x, layout, dim=1):
        return shard(shard(x, i, rings, layout, dim), j, ulysses_size, "contiguous", dim)
    return local, {"ring_group": ring_groups[j], "ulysses_group": ulysses_groups[i]}


def _errors(named, single, reference):
    """{name: (max |distributed - reference|, max |single - reference|)} and vs_single."""
    result = {}
    for name, value in named.items():
        ref = reference[name].double()
        result[name] = (float((value.double() - ref).abs().max()),
                        float((single[name].double() - ref).abs().max()))
        result[name + "_vs_single"] = float((value.double() - single[name].double()).abs().max())
    return result


def dense(rank, world, variant="ring", seed=0, batch=2, seqlen=32, heads=4, heads_k=2,
          dim=16, dtype="float32", layout="contiguous", causal=False, window=(-1, -1),
          softcap=0.0, alibi=None, softmax_scale=None, backward=True, deterministic=False,
          ulysses_size=1):
    dtype = DTYPES[dtype]
    window = tuple(window)
    (q, k, v, dout), slopes = _inputs(
        seed, [(batch, seqlen, heads, dim), (batch, seqlen, heads_k, dim),
               (batch, seqlen, heads_k, dim), (batch, seqlen, heads, dim)], dtype, alibi,
        batch, heads)
    options = dict(softmax_scale=softmax_scale, causal=causal, window_size=window,
                   softcap=softcap, alibi_slopes=slopes)
    mine, groups = _sharding(rank, world, variant, ulysses_size)
    local = [mine(x, layout).detach().requires_grad_(backward) for x in (q, k, v)]
    out, lse, _ = FUNCTIONS[variant](*local, **options, deterministic=deterministic,
                                      return_attn_probs=True, layout=layout, **groups)
    u = ulysses_size if variant == "hybrid" else 1
    got = {"out": _gather(out.detach(), layout, 1, u), "lse": _gather(lse, layout, 2, u)}
    if backward:
        out.backward(mine(dout, layout))
        for name, x in zip(("dq", "dk", "dv"), local):
            got[name] = _gather(x.grad, layout, 1, u)
    if rank != 0:
        return None

    whole = [x.detach().requires_grad_(backward) for x in (q, k, v)]
    s_out, s_lse, _ = flashattn.flash_attn_func(*whole, **options, return_attn_probs=True)
    single = {"out": s_out.detach(), "lse": s_lse}
    exact = [x.detach().double().requires_grad_(backward) for x in (q, k, v)]
    r_out = reference_torch.attention(*exact, softmax_scale, causal, window, softcap, slopes)
    reference = {"out": r_out.detach(), "lse": s_lse}  # lse: flashattn's is the yardstick
    if backward:
        s_out.backward(dout)
        r_out.backward(dout.double())
        for name, s, r in zip(("dq", "dk", "dv"), whole, exact):
            single[name], reference[name] = s.grad, r.grad
    return _errors(got, single, reference)


def _cut(length, world, layout, generator):
    """Uneven contiguous shard lengths of one sequence (some may be 0), or zigzag's."""
    if layout == "zigzag":
        return [length // world] * world
    cuts = sorted(torch.randint(0, length + 1, (world - 1,), generator=generator).tolist())
    bounds = [0] + cuts + [length]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _local_rows(seqlens, shards, rank, world, layout):
    """Indices into the packed whole sequences of rank's rows, and its cu_seqlens."""
    index, cu, start = [], [0], 0
    for length, parts in zip(seqlens, shards):
        if layout == "contiguous":
            first = start + sum(parts[:rank])
            index += range(first, first + parts[rank])
        else:
            chunk = length // (2 * world)
            index += range(start + rank * chunk, start + (rank + 1) * chunk)
            index += range(start + (2 * world - 1 - rank) * chunk,
                           start + (2 * world - rank) * chunk)
        cu.append(len(index))
        start += length
    return torch.tensor(index, dtype=torch.long), torch.tensor(cu, dtype=torch.int32)


def varlen(rank, world, seed=0, seqlens=(40, 9, 24), heads=4, heads_k=2, dim=16,
           dtype="float32", layout="contiguous", causal=True, window=(-1, -1), softcap=0.0,
           alibi=None, backward=True, first_rank_only=False):
    """first_rank_only: rank 0 holds every row, the other ranks none."""
    dtype = DTYPES[dtype]
    window = tuple(window)
    total = sum(seqlens)
    (q, k, v, dout), slopes = _inputs(
        seed, [(total, heads, dim), (total, heads_k, dim), (total, heads_k, dim),
               (total, heads, dim)], dtype, alibi, len(seqlens), heads)
    generator = torch.Generator().manual_seed(seed + 1)
    shards = [_cut(n, world, layout, generator) for n in seqlens]
    if first_rank_only:
        shards = [[n] + [0] * (world - 1) for n in seqlens]
    options = dict(causal=causal, window_size=window, softcap=softcap, alibi_slopes=slopes)
    index, cu = _local_rows(seqlens, shards, rank, world, layout)
    local = [x[index].detach().requires_grad_(backward) for x in (q, k, v)]
    out, lse, _ = ring_flash_attn_varlen_func(*local, cu, int((cu[1:] - cu[:-1]).max()),
                                              **options, return_attn_probs=True, layout=layout)
    sizes = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor(len(index)))
    everything = {"out": out.detach(), "lse": lse.t().contiguous()}
    if backward:
        out.backward(dout[index])
        everything.update(dq=local[0].grad, dk=local[1].grad, dv=local[2].grad)
    got = {}
    for name, value in everything.items():  # uneven shards: pad to the largest, gather
        biggest = int(max(sizes))
        padded = value.new_zeros((biggest, *value.shape[1:]))
        padded[:len(index)] = value
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        rows = [torch.empty((biggest,), dtype=torch.long) for _ in range(world)]
        dist.all_gather(rows, torch.cat([index, index.new_zeros(biggest - len(index))]))
        whole = value.new_zeros((total, *value.shape[1:]))
        for part, where, size in zip(parts, rows, sizes):
            whole[where[:int(size)]] = part[:int(size)]
        got[name] = whole
    got["lse"] = got["lse"].t()
    if rank != 0:
        return None

    cu_whole = torch.tensor([0] + torch.tensor(seqlens).cumsum(0).tolist(), dtype=torch.int32)
    whole = [x.detach().requires_grad_(backward) for x in (q, k, v)]
    s_out, s_lse, _ = flashattn.flash_attn_varlen_func(
        *whole, cu_whole, cu_whole, max(seqlens), max(seqlens), **options,
        return_attn_probs=True)
    single = {"out": s_out.detach(), "lse": s_lse}
    exact = [x.detach().double().requires_grad_(backward) for x in (q, k, v)]
    pieces = []
    for b, (start, end) in enumerate(zip(cu_whole[:-1].tolist(), cu_whole[1:].tolist())):
        b_slopes = None if slopes is None else (slopes[b] if slopes.dim() == 2 else slopes)
        pieces.append(reference_torch.attention(
            *(x[None, start:end] for x in exact), None, causal, window, softcap,
            b_slopes)[0])
    r_out = torch.cat(pieces)
    reference = {"out": r_out.detach(), "lse": s_lse}
    if backward:
        s_out.backward(dout)
        r_out.backward(dout.double())
        for name, s, r in zip(("dq", "dk", "dv"), whole, exact):
            single[name], reference[name] = s.grad, r.grad
    return _errors(got, single, reference)


def rejects(rank, world, bad_rank=1, problem="dropout"):
    """Every rank raises when one rank's call is invalid; returns the messages."""
    q = torch.randn(1, 8, 2, 8)
    k, v = q.clone(), q.clone()
    kwargs = {}
    if rank == bad_rank:
        if problem == "dropout":
            kwargs["dropout_p"] = 0.1
        elif problem == "shape":
            q = k = v = torch.randn(1, 6, 2, 8)
        elif problem == "layout":
            kwargs["layout"] = "spiral"
        elif problem == "softcap_differs":  # valid, but not what the other ranks pass
            kwargs["softcap"] = 2.0
        elif problem == "softcap":  # only the library checks it
            kwargs["softcap"] = -1.0
        elif problem == "odd_zigzag":
            q = k = v = torch.randn(1, 7, 2, 8)
    if problem == "odd_zigzag":
        kwargs["layout"] = "zigzag"
    function = ring_flash_attn_func
    if problem == "ulysses_heads":  # 2 heads over 4 ranks: every rank rejects it
        function = ulysses_flash_attn_func
        q = k = v = torch.randn(1, 8, 2 if world > 2 else 3, 8)
    try:
        function(q, k, v, **kwargs)
    except Exception as error:  # noqa: BLE001 -- the message is the result
        message = f"{type(error).__name__}: {error}"
    else:
        message = None
    every = [None] * world
    dist.all_gather_object(every, message)
    return every


def torch_context_parallel(rank, world, seed=0, heads=4, seqlen=32, dim=8):
    """PyTorch's own context parallelism (torch.distributed.tensor.experimental.
    context_parallel) on flashattn's SDPA kernels. Its ring handler runs
    aten::_scaled_dot_product_flash_attention (and _backward) once per ring step; on CUDA
    flashattn.torch.activate() routes those two to flashattn. CPU tensors have no kernel
    for them (CPU SDPA runs _scaled_dot_product_flash_attention_for_cpu, which the ring
    does not handle), so here flashattn.torch's two functions are registered as their CPU
    kernels for the duration of the case, and the op is called on DTensors directly.
    Returns which of them ran and the errors against SDPA on the whole sequence."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.experimental import context_parallel
    import flashattn.torch as routing

    calls = []

    def forward(*args, **kwargs):
        calls.append("forward")
        return routing._sdpa_forward(*args, **kwargs)

    def backward(*args, **kwargs):
        calls.append("backward")
        return routing._sdpa_backward(*args, **kwargs)

    library = torch.library.Library("aten", "IMPL", "CPU")  # noqa: TOR901
    try:
        library.impl("_scaled_dot_product_flash_attention", forward, "CPU")
        library.impl("_scaled_dot_product_flash_attention_backward", backward, "CPU")
        mesh = init_device_mesh("cpu", (world,))
        generator = torch.Generator().manual_seed(seed)
        q, k, v, dout = (torch.randn(1, heads, seqlen, dim, generator=generator)
                         for _ in range(4))
        buffers = [x.clone() for x in (q, k, v, dout)]
        # For is_causal, context_parallel shards with its head-tail load balancer: rank r
        # holds chunks r and 2W-1-r, flashattn.distributed's "zigzag".
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2]):
            leaves = [x.detach().requires_grad_() for x in buffers[:3]]
            q_d, k_d, v_d = (DTensor.from_local(x, mesh, [Shard(2)], run_check=False)
                             for x in leaves)
            out = torch.ops.aten._scaled_dot_product_flash_attention(q_d, k_d, v_d, 0.0, True)[0]
            out.to_local().backward(buffers[3])
        got = {"out": _gather(out.to_local().detach(), "zigzag", 2)}
        for name, x in zip(("dq", "dk", "dv"), leaves):
            got[name] = _gather(x.grad, "zigzag", 2)
    finally:
        library._destroy()
    whole = [x.detach().requires_grad_() for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*whole, is_causal=True)
    ref.backward(dout)
    expected = {"out": ref.detach(), "dq": whole[0].grad, "dk": whole[1].grad,
                "dv": whole[2].grad}
    return {"calls": sorted(set(calls)),
            **{name: float((got[name] - expected[name]).abs().max()) for name in got}}


def ring_memory(rank, world, layout="zigzag", causal=True, dtype="bfloat16", batch=1,
                seqlen=64, heads=4, heads_k=4, dim=32):
    """The most bytes of tensors the ring holds at once on any rank (above its inputs and
    dout), per element of the rank's q, for the forward and for forward + backward
    (bench/live_tensor_bytes.py counts them)."""
    import os
    import sys
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
    sys.path.insert(0, bench)
    from live_tensor_bytes import LiveTensorBytes
    generator = torch.Generator().manual_seed(rank)
    shapes = [(batch, seqlen // world, h, dim) for h in (heads, heads_k, heads_k, heads)]
    q, k, v, dout = (torch.randn(s, generator=generator).to(DTYPES[dtype]) for s in shapes)
    for x in (q, k, v):
        x.requires_grad_()
    peaks = []
    for backward in (False, True):
        with LiveTensorBytes() as counter:
            out = ring_flash_attn_func(q, k, v, causal=causal, layout=layout)
            if backward:
                out.backward(dout)
        del out
        q.grad = k.grad = v.grad = None
        peak = torch.tensor([counter.peak / q.numel()], dtype=torch.float64)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        peaks.append(float(peak))
    return {"forward": peaks[0], "forward_backward": peaks[1]}


def in_head_passes(rank, world, case, row_heads_per_pass, **kwargs):
    """`case` with the ring's smallest pass over a group of heads set to
    row_heads_per_pass (query row, head) pairs: test sizes are far below the default, so
    the ring would otherwise always run all heads in one pass."""
    from flashattn.distributed import _ring_attention
    saved = _ring_attention.MIN_ROW_HEADS_PER_PASS
    _ring_attention.MIN_ROW_HEADS_PER_PASS = row_heads_per_pass
    try:
        return globals()[case](rank, world, **kwargs)
    finally:
        _ring_attention.MIN_ROW_HEADS_PER_PASS = saved
