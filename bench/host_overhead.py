#!/usr/bin/env python3
"""Host time per call: the flash_attn functions against PyTorch's SDPA on its flash
backend, in one process, on the GPU (or, with --device cpu, on CPU tensors: fp32, one torch
thread, SDPA's CPU kernel).

At small sizes a call's cost is the host work in front of its kernels. Each call runs
`--calls` times back to back (after warm-up) with one synchronize at the end: wall time /
calls is what a caller pays per call, since the GPU keeps up whenever its kernels are
shorter than the host work. Repeats alternate flashattn and SDPA; each row is the median
of `--repeats`. flashattn's eager calls run the torch extension's C++ autograd Function
when it is built for this torch (flashattn/_torch_ext.py); the rows "python_path" run the
same calls on the Python path (what FLASHATTN_TORCH_EXT=0 gives), alternated with the
others in the same process. Inputs rotate over 8 sets, as a model's layers would. The device
time of a call (its kernels alone) is a CUDA graph of the calls replayed. The decode row also
gives TB/s: the bytes of K and V read per call over the time per call.

    python3 bench/host_overhead.py [--calls 2000] [--repeats 5] [--json F]
        [--device cuda|cpu] [--seqlen 128] [--heads 16] [--hdim 64]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _C, _calls, _torch_ext, _torch_ops

SETS = 8


DEVICE = "cuda"


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def input_dtype():
    """bf16 on the GPU (the CUDA kernels take 16-bit inputs), fp32 on the CPU."""
    return torch.bfloat16 if DEVICE == "cuda" else torch.float32


def timed(fn, calls):
    """Wall time / calls of `calls` calls, the GPU drained before and after."""
    synchronize()
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def python_path(fn):
    """`fn` with flashattn's eager calls on the Python path (the torch extension set aside
    for the call, as FLASHATTN_TORCH_EXT=0 would), for rows beside the extension's."""
    def run(i):
        loaded = _torch_ext._op
        _torch_ext._op = None
        try:
            return fn(i)
        finally:
            _torch_ext._op = loaded
    return run


def per_call_us(fns, calls, repeats):
    """{name: median us per call}, the repeats of the functions interleaved."""
    for fn in fns.values():
        for i in range(50):
            fn(i)
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(timed(fn, calls))
    return {name: statistics.median(s) for name, s in samples.items()}


def graph_us(fn, calls, repeats=10):
    """Device time per call: `calls` calls captured in one CUDA graph, replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def rotating(make):
    sets = [make() for _ in range(SETS)]
    return lambda i: sets[i % SETS]


def forward_rows(a):
    """b=1, 16 heads, seqlen 128, d=64, bf16 (fp32 on the CPU), causal: forward, and forward
    + backward."""
    shape = (1, a.seqlen, a.heads, a.hdim)
    dtype = input_dtype()
    make = lambda grad: tuple(torch.randn(shape, dtype=dtype, device=DEVICE,
                                          requires_grad=grad) for _ in range(3))
    ours_in, ours_train = rotating(lambda: make(False)), rotating(lambda: make(True))
    # SDPA takes [b, h, s, d]: the same memory, transposed.
    sdpa_in = lambda i: tuple(x.transpose(1, 2) for x in ours_in(i))
    sdpa_train = lambda i: tuple(x.transpose(1, 2) for x in ours_train(i))

    def ours(i):
        return flashattn.flash_attn_func(*ours_in(i), causal=True)

    def sdpa(i):
        return F.scaled_dot_product_attention(*sdpa_in(i), is_causal=True)

    def op(i):
        q, k, v = ours_in(i)
        return torch.ops.flashattn.forward(q, k, v, None, None, None, 0, 0, 0.0,
                                           a.hdim ** -0.5, True, -1, 0, 0.0, None, False)

    def ours_step(i):
        q, k, v = ours_train(i)
        out = flashattn.flash_attn_func(q, k, v, causal=True)
        torch.autograd.grad(out, (q, k, v), out)

    def sdpa_step(i):
        q, k, v = sdpa_train(i)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), out)

    rows = {}
    fwd = per_call_us({"flashattn": ours, "python_path": python_path(ours), "sdpa_flash": sdpa,
                       "custom_op": op}, a.calls, a.repeats)
    if DEVICE == "cuda":
        fwd["device_us"] = {"flashattn": graph_us(ours, 200), "sdpa_flash": graph_us(sdpa, 200)}
    name = f"b=1 h={a.heads} s={a.seqlen} d={a.hdim} causal"
    rows["flash_attn_func " + name] = fwd
    # Where a forward's host time goes: the binding's one call with its outputs made
    # beforehand, and one output allocation.
    made = rotating(lambda: (torch.empty(shape, dtype=dtype, device=DEVICE),))
    options = _calls.Options(causal=True)
    stream = torch.cuda.current_stream().cuda_stream if DEVICE == "cuda" else 0

    def binding(i):
        q, k, v = ours_in(i)
        _C.forward_tensors(q, k, v, made(i)[0], None, None, None, None, 0, 0, options, stream)

    def allocation(i):
        return ours_in(i)[0].new_empty(shape)

    fwd["parts"] = per_call_us({"_C.forward_tensors": binding, "new_empty": allocation},
                               a.calls, a.repeats)
    step = per_call_us({"flashattn": ours_step, "python_path": python_path(ours_step),
                        "sdpa_flash": sdpa_step}, a.calls, a.repeats)

    # Where a training step's host time goes: the forward alone on inputs that need
    # gradients, and our backward without autograd around it.
    def ours_forward_with_grad(i):
        return flashattn.flash_attn_func(*ours_train(i), causal=True)

    def sdpa_forward_with_grad(i):
        return F.scaled_dot_product_attention(*sdpa_train(i), is_causal=True)

    def forward_saved():
        q, k, v = make(False)
        out, lse, _ = _torch_ops.forward_with_options(q, k, v, None, None, None, 0, 0, options)
        return q, k, v, out, lse
    saved = rotating(forward_saved)

    def ours_backward(i):
        q, k, v, out, lse = saved(i)
        _torch_ops.backward_with_options(out, q, k, v, out, lse, None, None, None, 0, 0,
                                         options, False)

    step["parts"] = per_call_us({"forward_with_grad": ours_forward_with_grad,
                                 "python_path_forward_with_grad":
                                     python_path(ours_forward_with_grad),
                                 "sdpa_forward_with_grad": sdpa_forward_with_grad,
                                 "backward_with_options": ours_backward}, a.calls, a.repeats)
    rows["the same, forward + backward"] = step
    return rows


def decode_rows(a):
    """One query, 32/8 heads, d=128, 4096 cached keys, batch 1, bf16."""
    heads, heads_k, d, n = 32, 8, 128, 4096
    def make():
        q = torch.randn(1, 1, heads, d, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(1, n, heads_k, d, dtype=torch.bfloat16, device="cuda")
                for _ in range(2))
        return q, k, v
    sets = rotating(make)
    seqlens = torch.full((1,), n, dtype=torch.int32, device="cuda")

    def ours(i):
        q, k, v = sets(i)
        return flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True)

    def sdpa(i):
        q, k, v = (x.transpose(1, 2) for x in sets(i))
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    row = per_call_us({"flashattn": ours, "sdpa_flash": sdpa}, a.calls, a.repeats)
    row["device_us"] = {"flashattn": graph_us(ours, 200), "sdpa_flash": graph_us(sdpa, 200)}
    kv_bytes = 2 * n * heads_k * d * 2
    row["TB/s per call"] = {name: kv_bytes / (row[name] * 1e-6) / 1e12
                            for name in ("flashattn", "sdpa_flash")}
    return {"flash_attn_with_kvcache b=1 32/8 heads d=128 4096 keys": row}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--hdim", type=int, default=64)
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    # The extension is loaded by the first call; loaded here, so the rows can say.
    _torch_ext.attention(*(torch.ones(1, 1, 1, 8, device=DEVICE, dtype=input_dtype()),) * 3,
                         (None, None, None, 0, 0), _calls.Options(), False)
    if DEVICE == "cuda":
        # SDPA's backend is chosen once, outside the timed loops (the context manager costs
        # host time of its own that no model pays per call).
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            rows = {**forward_rows(a), **decode_rows(a)}
        device = torch.cuda.get_device_name()
    else:
        torch.set_num_threads(1)  # host time, not the CPU kernels' threads
        rows = forward_rows(a)
        device = "cpu"
    results = dict(torch=torch.__version__, device=device, calls=a.calls, repeats=a.repeats,
                   torch_extension=_torch_ext.status(), rows=rows)
    print(f"torch {torch.__version__}, {device}, torch extension: {_torch_ext.status()}")
    for name, row in rows.items():
        print(name)
        for key, value in row.items():
            if isinstance(value, dict):
                print(f"  {key:14s} " + "  ".join(f"{k} {v:.3f}" for k, v in value.items()))
            else:
                print(f"  {key:14s} {value:8.2f} us/call")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
