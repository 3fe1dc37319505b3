#!/usr/bin/env python3
"""Context parallelism on flashattn: tokens/s and TFLOP/s per GPU, and peak memory per
GPU, for one GPU (flash_attn_func on the whole sequence) and N GPUs (flashattn.distributed:
ring with contiguous or zigzag shards, and Ulysses), forward and forward+backward.

Defaults are issue 23's measurement: bf16, 32 heads, d = 128, causal, batch 1, total
sequence 128k to 1M. On a machine with N GPUs (NCCL):

    python3 bench/context_parallel.py --nproc 1,2 [--json results.json] [--profile DIR]

spawns 1 and then N processes, one GPU each (or run one world size under torchrun:
`torchrun --nproc-per-node 2 bench/context_parallel.py`). Without a GPU it runs on gloo
and the CPU backend; --smoke picks sizes a laptop finishes in seconds:

    python3 bench/context_parallel.py --smoke --nproc 1,2

FLOPs are counted as FlashAttention's benchmarks do: 4 * seqlen^2 * heads * d per
forward, halved under a causal mask, and 2.5x that for the backward; TFLOP/s per GPU
divides by the world size. Time is the slowest rank's, median over --iters after
--warmup. Memory: the GPU allocator's peak, and on any device the bytes of tensors one
untimed call holds at most (bench/live_tensor_bytes.py), per element of a rank's q, beside
the estimate the size checks use. A size whose estimated memory does not fit a GPU is
reported as skipped rather than attempted, since an out-of-memory error on one rank would
leave the others waiting in the ring.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flashattn.distributed._ring_attention import pass_count
from live_tensor_bytes import LiveTensorBytes

# Estimated peak bytes per (local token x head x d) element for 16-bit inputs, with
# headroom: the inputs, outputs, the library's per-call outputs and workspace. The ring's
# is worked out from its design (ring_bytes_per_element). Only used to skip sizes that
# cannot fit.
BYTES_PER_ELEMENT = {("single", "fwd"): 12, ("single", "fwd+bwd"): 28,
                     ("ulysses", "fwd"): 24, ("ulysses", "fwd+bwd"): 44}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def ring_bytes_per_element(args, world, mode, seqlen):
    """The ring's peak bytes per element of a rank's q, from the buffers its design holds
    (flashattn/distributed/_ring_attention.py; tests/python/test_distributed.py checks the
    same sum against the tensors counted on the CPU), plus the inputs (q, k, v, dout) and
    the CUDA backward's fp32 dQ workspace of each call, which the CPU count cannot see."""
    size = DTYPES[args.dtype].itemsize
    kv = args.heads_k / args.heads  # K/V elements per q element
    count = pass_count(args.batch * seqlen // world, args.heads, args.heads_k)
    blocks = 2 * size * kv * (1 if world == 2 else 2)  # the block arriving (and the one before)
    own_kv = 2 * size * kv if count > 1 else 0  # a pass's own K/V heads, copied to be sent
    inputs = size * (2 + 2 * kv)
    if mode == "fwd":
        return inputs + (size if count > 1 else 0) + (4 + size + blocks + own_kv) / count
    per_call = size * (1 + 2 * kv)  # dq, dk, dv of one call
    return (inputs + size + (per_call if count > 1 else 0)
            + (4 + per_call + blocks + 2 * 2 * 4 * kv + own_kv + 4) / count)


def estimated_bytes_per_element(args, world, kind, mode, seqlen):
    if kind == "ring":
        return ring_bytes_per_element(args, world, mode, seqlen)
    return BYTES_PER_ELEMENT[(kind, mode)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", default="1,2",
                   help="world sizes to run, comma-separated (1 = flash_attn_func alone)")
    p.add_argument("--seqlens", default="131072,262144,524288,1048576",
                   help="total sequence lengths, comma-separated")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--heads-k", type=int, default=None, help="KV heads (default: --heads)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--variants", default="ring-zigzag,ring-contiguous,ulysses",
                   help="N-rank variants: ring-zigzag, ring-contiguous, ulysses")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--json", help="write the rows here (a JSON list)")
    p.add_argument("--profile", help="directory for one torch.profiler trace per rank "
                   "(Chrome format) of one fwd+bwd at the smallest size: shows whether the "
                   "ring's transfers overlap its attention")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes (CPU/gloo check that everything runs)")
    p.add_argument("--assume-fits", action="store_true",
                   help="attempt every size, even those the memory estimate would skip")
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds one collective may wait before the process group fails")
    args = p.parse_args(argv)
    if args.smoke:
        args.seqlens, args.heads, args.dim, args.warmup, args.iters = "256,512", 4, 32, 1, 2
        if not torch.cuda.is_available():
            args.dtype = "fp32"
    args.heads_k = args.heads_k or args.heads
    return args


def flops(args, seqlen, mode):
    forward = 4 * args.batch * seqlen * seqlen * args.heads * args.dim
    forward /= 2 if args.causal else 1
    return forward * (3.5 if mode == "fwd+bwd" else 1.0)


def attention_fn(variant, world):
    """(name, function of (q, k, v, causal) on this rank's shard), layout."""
    import flashattn
    from flashattn.distributed import ring_flash_attn_func, ulysses_flash_attn_func
    if world == 1:
        return (lambda q, k, v, causal: flashattn.flash_attn_func(q, k, v, causal=causal),
                "contiguous")
    if variant == "ulysses":
        return (lambda q, k, v, causal: ulysses_flash_attn_func(
            q, k, v, causal=causal, layout="zigzag")), "zigzag"
    layout = variant.split("-", 1)[1]
    return (lambda q, k, v, causal: ring_flash_attn_func(
        q, k, v, causal=causal, layout=layout)), layout


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def slowest(value, device):
    """The largest value over the ranks (time, memory)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64,
                     device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def fits(args, device, world, kind, mode, seqlen):
    if device.type != "cuda" or args.assume_fits:
        return True
    elements = args.batch * (seqlen // world) * args.heads * args.dim
    need = elements * estimated_bytes_per_element(args, world, kind, mode, seqlen)
    free, _ = torch.cuda.mem_get_info(device)
    # Every rank decides alike: the smallest free memory over the ranks.
    return need <= 0.92 * -slowest(-free, device)


def measure(args, device, world, rank, variant, mode, seqlen):
    fn, layout = attention_fn(variant, world)
    dtype = DTYPES[args.dtype]
    local = seqlen // world
    shape_q = (args.batch, local, args.heads, args.dim)
    shape_k = (args.batch, local, args.heads_k, args.dim)
    generator = torch.Generator(device=device).manual_seed(1234 + rank)
    backward = mode == "fwd+bwd"
    q, k, v = (torch.randn(s, device=device, dtype=dtype, generator=generator)
               .requires_grad_(backward) for s in (shape_q, shape_k, shape_k))
    dout = torch.randn(shape_q, device=device, dtype=dtype, generator=generator)

    def step():
        out = fn(q, k, v, args.causal)
        if backward:
            out.backward(dout)
            q.grad = k.grad = v.grad = None

    # One untimed call with its tensors counted: the memory the code holds, on any device.
    counter = LiveTensorBytes()
    with counter:
        step()
    held = sum(x.untyped_storage().nbytes() for x in (q, k, v, dout)) + counter.peak
    times = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for i in range(args.warmup + args.iters):
        if dist.is_initialized():
            dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        if i >= args.warmup:
            times.append(slowest(time.perf_counter() - start, device))
    seconds = statistics.median(times)
    peak = (slowest(torch.cuda.max_memory_allocated(device), device) / 2**30
            if device.type == "cuda" else None)
    return {"world": world, "variant": variant if world > 1 else "single", "layout": layout,
            "mode": mode, "seqlen": seqlen, "batch": args.batch, "heads": args.heads,
            "heads_k": args.heads_k, "dim": args.dim, "dtype": args.dtype,
            "causal": args.causal, "ms": seconds * 1e3,
            "tokens_per_s": args.batch * seqlen / seconds,
            "tflops_per_gpu": flops(args, seqlen, mode) / seconds / world / 1e12,
            "peak_gib_per_gpu": peak,
            "counted_bytes_per_element": slowest(held, device) / q.numel(),
            "estimated_bytes_per_element": estimated_bytes_per_element(
                args, world, variant.split("-")[0] if world > 1 else "single", mode, seqlen),
            "device": torch.cuda.get_device_name(device)
            if device.type == "cuda" else "cpu"}


def profile(args, device, world, rank):
    if not args.profile or world == 1:
        return
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn, _ = attention_fn("ring-zigzag", world)
    seqlen = min(int(s) for s in args.seqlens.split(","))
    shape = (args.batch, seqlen // world, args.heads, args.dim)
    q, k, v = (torch.randn(shape, device=device, dtype=DTYPES[args.dtype]).requires_grad_()
               for _ in range(3))
    fn(q, k, v, args.causal).sum().backward()  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        fn(q, k, v, args.causal).sum().backward()
        synchronize(device)
    os.makedirs(args.profile, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.profile, f"ring_zigzag_w{world}_rank{rank}.json"))


def run(rank, world, args, port, results):
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=args.timeout))
    rows = []
    variants = ["single"] if world == 1 else args.variants.split(",")
    for seqlen in (int(s) for s in args.seqlens.split(",")):
        for variant in variants:
            for mode in args.modes.split(","):
                kind = variant.split("-")[0]
                if world > 1 and kind == "ulysses" and (args.heads % world or args.heads_k % world):
                    continue
                if not fits(args, device, world, kind, mode, seqlen):
                    row = {"world": world, "variant": variant, "mode": mode, "seqlen": seqlen,
                           "skipped": "estimated memory exceeds the GPU's"}
                else:
                    row = measure(args, device, world, rank, variant, mode, seqlen)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                if rank == 0:
                    print(format_row(row), flush=True)
                rows.append(row)
    profile(args, device, world, rank)
    if rank == 0:
        if isinstance(results, list):
            results.extend(rows)
        else:  # a queue back to the spawning process
            results.put(rows)
    if dist.is_initialized():
        dist.destroy_process_group()


def format_row(row):
    if "skipped" in row:
        return (f"W={row['world']} {row['variant']:>15} {row['mode']:>7} "
                f"S={row['seqlen']:>8}  skipped: {row['skipped']}")
    peak = "" if row["peak_gib_per_gpu"] is None else f" {row['peak_gib_per_gpu']:8.2f} GiB/GPU"
    return (f"W={row['world']} {row['variant']:>15} {row['mode']:>7} S={row['seqlen']:>8} "
            f"{row['ms']:10.2f} ms {row['tokens_per_s']:12.0f} tok/s "
            f"{row['tflops_per_gpu']:8.3g} TFLOP/s/GPU{peak} "
            f"{row['counted_bytes_per_element']:5.1f} B/element counted "
            f"({row['estimated_bytes_per_element']:.1f} estimated)")


def _free_port():
    """A TCP port of the loopback that no one holds now, for the ranks' rendezvous (a port
    derived from the pid could be one another process holds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank, world, args, port, queue):
    run(rank, world, args, port, queue)


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        port = int(os.environ.get("MASTER_PORT", 29500))
        rows = []
        if world > 1:
            device_type = "nccl" if torch.cuda.is_available() else "gloo"
            if torch.cuda.is_available():
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
            dist.init_process_group(device_type, timeout=timedelta(seconds=args.timeout))
        run(rank, world, args, port, rows)
        all_rows = rows
    else:
        all_rows = []
        for world in (int(w) for w in args.nproc.split(",")):
            if torch.cuda.is_available() and world > torch.cuda.device_count():
                sys.exit(f"--nproc {world}: only {torch.cuda.device_count()} GPUs visible")
            port = _free_port()
            if world == 1:
                run(0, 1, args, port, all_rows)
                continue
            context = mp.get_context("spawn")
            queue = context.SimpleQueue()
            mp.start_processes(_spawned, args=(world, args, port, queue), nprocs=world,
                               start_method="spawn")
            all_rows.extend(queue.get())
    if args.json and all_rows:
        with open(args.json, "w") as f:
            json.dump(all_rows, f, indent=1)


if __name__ == "__main__":
    main()
