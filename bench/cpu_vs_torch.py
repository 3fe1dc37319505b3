"""flashattn's CPU backend against PyTorch's CPU SDPA, in one process on the same inputs.

For each dtype, head dim and mask: flash_attn_func on CPU tensors and
torch.nn.functional.scaled_dot_product_attention, forward and forward + backward; the median
of --iters timed calls after one warm-up, the two implementations alternated call by call so
that a busy or throttling machine slows both alike. GFLOP/s with FlashAttention-2's convention:
4 b h s^2 d for the forward (halved when causal), 3.5x that for forward + backward.
One JSON object per line, then a table.

    PYTHONPATH=<dir holding flashattn> python3 bench/cpu_vs_torch.py --threads 16
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import flashattn


def timed_alternately(fns, iters):
    """The median seconds of each closure in `fns`, called in turn `iters` times after a
    warm-up call of each."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, samples in zip(fns, times):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) for samples in times]


def calls(impl, q, k, v, causal, backward):
    """A closure running one call; q, k, v are [b, s, h, d] leaf tensors."""
    if impl == "flashattn":
        def forward():
            return flashattn.flash_attn_func(q, k, v, causal=causal)
    else:
        def forward():
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2), is_causal=causal)
            return out.transpose(1, 2)
    if not backward:
        def run():
            with torch.no_grad():
                forward()
        return run
    grad = torch.randn_like(q)

    def run():
        q.grad = k.grad = v.grad = None
        forward().backward(grad)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--directions", default="fwd,fwd_bwd")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    for dtype_name in args.dtypes.split(","):
        for d in map(int, args.hdims.split(",")):
            for causal in (False, True):
                torch.manual_seed(0)
                shape = (args.batch, args.seqlen, args.heads, d)
                q, k, v = (torch.randn(shape, dtype=dtypes[dtype_name]).requires_grad_()
                           for _ in range(3))
                fwd_flops = 4.0 * args.batch * args.heads * args.seqlen**2 * d
                if causal:
                    fwd_flops /= 2
                for direction in args.directions.split(","):
                    backward = direction == "fwd_bwd"
                    flops = fwd_flops * (3.5 if backward else 1.0)
                    row = {"dtype": dtype_name, "hdim": d, "causal": causal,
                           "direction": direction, "threads": torch.get_num_threads()}
                    impls = ("flashattn", "torch")
                    seconds_each = timed_alternately(
                        [calls(impl, q, k, v, causal, backward) for impl in impls], args.iters)
                    for impl, seconds in zip(impls, seconds_each):
                        row[impl + "_ms"] = round(seconds * 1e3, 2)
                        row[impl + "_gflops"] = round(flops / seconds / 1e9, 1)
                    row["ratio"] = round(row["flashattn_gflops"] / row["torch_gflops"], 3)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print("\n| dtype | d | mask | direction | flashattn GFLOP/s | torch GFLOP/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['hdim']} | {'causal' if r['causal'] else 'none'} | "
              f"{r['direction']} | {r['flashattn_gflops']} | {r['torch_gflops']} | "
              f"{r['ratio']} |")


if __name__ == "__main__":
    main()
