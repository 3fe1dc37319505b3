#!/usr/bin/env python3
"""Times the PyTorch peers of flashattn (forward and backward) on the FA2 benchmark grid; writes JSON.

Peers: SDPA with the FLASH_ATTENTION backend (FlashAttention-2 inside PyTorch), SDPA with the
CUDNN_ATTENTION backend, and FlexAttention compiled with torch.compile. Inputs are bf16
[batch, seqlen, heads, d] viewed as [batch, heads, seqlen, d] (the layout flashattn reads),
fresh random normals. Each time is the median of triton.testing.do_bench (which clears the
L2 cache between calls) after its warm-up. Forward TFLOP/s = 4 b h sq sk d / time, halved
when causal; backward TFLOP/s = 2.5 x that (the FA2 convention).

The backward alone is timed: the forward runs once with q, k, v requiring grad, and each timed
call is torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on that saved graph, so
only the peer's backward kernels (and autograd's small bookkeeping) are in the time.

    python3 bench/peers.py --out peers.json [--hdims 64,128,256] [--seqlens 512,...,16384] \
        [--directions fwd,bwd] [--dropout P]

--dropout P passes dropout_p=P to SDPA (FlashAttention-2's and cuDNN's own Philox masks);
FlexAttention has no dropout and is reported as an error row.

--decode times the decode grid instead: q [b, 32, 1, 128] against K/V [b, 8, N, 128] (GQA,
enable_gqa=True), b in --decode-batches, N in --decode-cache-lens; each row also reports
TB/s = bytes of K and V read / time, the number flashattn-bench --mode decode prints.
"""
import argparse
import json
import sys
import time


def grid(hdims, seqlens, tokens, hidden):
    for d in hdims:
        for causal in (False, True):
            for s in seqlens:
                yield {"hdim": d, "causal": causal, "seqlen": s, "batch": max(1, tokens // s),
                       "heads": hidden // d}


def tflops(p, ms, direction):
    flops = 4.0 * p["batch"] * p["heads"] * p["seqlen"] * p["seqlen"] * p["hdim"]
    if p["causal"]:
        flops /= 2
    if direction == "bwd":
        flops *= 2.5
    return flops / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--peers", default="sdpa_flash,sdpa_cudnn,flex")
    ap.add_argument("--directions", default="fwd,bwd")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--flex-seqlens", default="",
                    help="seqlens at which FlexAttention runs (default: all); each new shape "
                         "costs a torch.compile")
    ap.add_argument("--decode", action="store_true", help="time the decode grid instead")
    ap.add_argument("--decode-batches", default="1,8,64")
    ap.add_argument("--decode-cache-lens", default="4096,32768,131072")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    peers = args.peers.split(",")
    flex = None
    if "flex" in peers:
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # One compiled kernel per shape: without this, dynamo gives up after 8 shapes and
        # silently runs the unfused (score-materializing) fallback.
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1000)
        flex = torch.compile(flex_attention, dynamic=False)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    if args.decode:
        return decode_grid(args, peers, flex)

    flex_seqlens = {int(x) for x in args.flex_seqlens.split(",") if x}
    results = []
    device = torch.cuda.get_device_name()
    for p in grid([int(x) for x in args.hdims.split(",")],
                  [int(x) for x in args.seqlens.split(",")], args.tokens, args.hidden):
        shape = (p["batch"], p["seqlen"], p["heads"], p["hdim"])
        q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                         for _ in range(4))
        for peer, direction in ((peer, direction) for peer in peers
                                for direction in args.directions.split(",")):
            if peer == "flex" and flex_seqlens and p["seqlen"] not in flex_seqlens:
                continue
            entry = dict(p, implementation=peer, direction=direction, device=device, dtype="bf16")
            if args.dropout:
                entry["dropout"] = args.dropout
            try:
                start = time.time()
                if peer in ("sdpa_flash", "sdpa_cudnn"):
                    backend = (SDPBackend.FLASH_ATTENTION if peer == "sdpa_flash"
                               else SDPBackend.CUDNN_ATTENTION)

                    def attention(q, k, v):
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(
                                q, k, v, is_causal=p["causal"], dropout_p=args.dropout)
                elif args.dropout:
                    raise ValueError("FlexAttention has no dropout")
                else:
                    mask = (create_block_mask(causal_mask, None, None, p["seqlen"], p["seqlen"])
                            if p["causal"] else None)

                    def attention(q, k, v):
                        return flex(q, k, v, block_mask=mask)
                if direction == "fwd":
                    def fn():
                        return attention(q, k, v)
                else:
                    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                    out = attention(qg, kg, vg)

                    def fn():
                        return torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)
                fn()
                torch.cuda.synchronize()
                ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
                entry.update(ms=ms, tflops=tflops(p, ms, direction),
                             setup_s=round(time.time() - start, 2))
            except Exception as e:  # a peer that cannot run this problem is reported, not fatal
                entry.update(error=f"{type(e).__name__}: {e}"[:300])
            results.append(entry)
            print(json.dumps(entry), flush=True)
            with open(args.out, "w") as f:  # rewritten each time: a cut-off run keeps its rows
                json.dump(results, f, indent=1)
            out = qg = kg = vg = None  # frees the saved graph before the next peer
        del q, k, v, dout
    return 0


def decode_grid(args, peers, flex):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    heads, heads_k, d = 32, 8, 128
    results = []
    device = torch.cuda.get_device_name()
    for b in [int(x) for x in args.decode_batches.split(",")]:
        for n in [int(x) for x in args.decode_cache_lens.split(",")]:
            # One input set (batch 64 x 131072 keys is 34 GB of K and V); do_bench clears L2
            # between calls.
            q = torch.randn(b, heads, 1, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, heads_k, n, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, heads_k, n, d, device="cuda", dtype=torch.bfloat16)
            kv_bytes = 2 * b * heads_k * n * d * 2
            for peer in peers:
                entry = dict(mode="decode", batch=b, heads=heads, heads_k=heads_k, hdim=d,
                             seqlen_q=1, cache_len=n, implementation=peer, device=device,
                             dtype="bf16")
                try:
                    start = time.time()
                    if peer in ("sdpa_flash", "sdpa_cudnn"):
                        backend = (SDPBackend.FLASH_ATTENTION if peer == "sdpa_flash"
                                   else SDPBackend.CUDNN_ATTENTION)

                        def fn():
                            with sdpa_kernel(backend):
                                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    else:
                        def fn():
                            return flex(q, k, v, enable_gqa=True)
                    fn()
                    torch.cuda.synchronize()
                    ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
                    entry.update(ms=ms, tbps=kv_bytes / (ms * 1e-3) / 1e12,
                                 setup_s=round(time.time() - start, 2))
                except Exception as e:  # reported, not fatal
                    entry.update(error=f"{type(e).__name__}: {e}"[:300])
                results.append(entry)
                print(json.dumps(entry), flush=True)
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)
            del q, k, v
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
