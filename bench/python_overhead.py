#!/usr/bin/env python3
"""The Python package's eager call overhead over the kernel it launches, on the GPU.

At a short sequence the kernel takes microseconds, so a call's cost is the host work in
front of it. Each variant is called back to back (`--calls` times, after warm-up) with
one synchronize at the end: wall time / calls is what a caller pays per call, since the
GPU keeps up whenever the kernel is shorter than the host work. The kernel's own time is
a CUDA graph of `--calls` launches replayed (CUDA events, median of the replays), which
takes the host out entirely. Inputs rotate over 8 sets, all L2-resident at this size (as
they are in a model, fresh from the projection that made them).

    python3 bench/python_overhead.py [--batch 1 --heads 16 --seqlen 128 --hdim 64] [--json F]
"""
import argparse
import importlib
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _C, _calls, _torch_ops
from flashattn._torch_tensors import TorchTensors

SETS = 8


def per_call_us(fn, calls, repeats=5):
    """Median over `repeats` of wall time / calls, the GPU drained before and after."""
    for i in range(50):
        fn(i)
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def graph_us(fn, calls, repeats=10):
    """Device time per call: `calls` launches captured in one CUDA graph, replayed."""
    for i in range(3):
        fn(i)
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


def raw_launches(inputs):
    """_C.forward with argument structs built beforehand: the binding and the launch."""
    prepared = []
    for q, k, v in inputs:
        out, lse = torch.empty_like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]),
                                                    dtype=torch.float32)
        args = _C.ForwardArgs()
        for field, tensor in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
            setattr(args, field, TorchTensors.describe(tensor, field))
        args.options = _calls.Options(causal=True).to_c(TorchTensors, q.shape[-1])
        prepared.append((args, out, lse))

    def launch(i):
        args = prepared[i % SETS][0]
        run = _C.Launch()
        run.backend = _C.Backend.CUDA
        run.stream = torch.cuda.current_stream().cuda_stream
        _C.forward(args, run)
    launch.outputs = [(out, lse) for _, out, lse in prepared]
    return launch


def raw_backward_launches(inputs, forward_launch):
    """_C.backward with argument structs and workspace made beforehand (after a forward
    gave out and lse)."""
    prepared = []
    for i, (q, k, v) in enumerate(inputs):
        forward_launch(i)
        args = _C.BackwardArgs()
        out, lse = forward_launch.outputs[i]
        tensors = dict(dout=torch.randn_like(q), q=q, k=k, v=v, out=out, lse=lse,
                       dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v))
        for field, tensor in tensors.items():
            setattr(args, field, TorchTensors.describe(tensor, field))
        args.options = _calls.Options(causal=True).to_c(TorchTensors, q.shape[-1])
        workspace = torch.empty(_C.workspace_size(args, _C.Backend.CUDA), dtype=torch.uint8,
                                device="cuda")
        prepared.append((args, tensors, workspace))

    def launch(i):
        args, _, workspace = prepared[i % SETS]
        run = _C.Launch()
        run.backend = _C.Backend.CUDA
        run.stream = torch.cuda.current_stream().cuda_stream
        run.workspace = workspace.data_ptr()
        run.workspace_bytes = workspace.numel()
        _C.backward(args, run)
    return launch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--hdim", type=int, default=64)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--json")
    a = ap.parse_args()

    shape = (a.batch, a.seqlen, a.heads, a.hdim)
    make = lambda grad: [tuple(torch.randn(shape, dtype=torch.bfloat16, device="cuda",
                                           requires_grad=grad) for _ in range(3))
                         for _ in range(SETS)]
    inputs, trainable = make(False), make(True)
    sdpa_in = [tuple(x.transpose(1, 2) for x in qkv) for qkv in inputs]
    sdpa_train = [tuple(x.transpose(1, 2) for x in qkv) for qkv in trainable]
    pick = lambda sets: (lambda i: sets[i % SETS])

    def ours(i):
        return flashattn.flash_attn_func(*pick(inputs)(i), causal=True)

    def ours_train(i):
        q, k, v = pick(trainable)(i)
        out = flashattn.flash_attn_func(q, k, v, causal=True)
        torch.autograd.grad(out, (q, k, v), out)

    def op(i):
        q, k, v = pick(inputs)(i)
        return torch.ops.flashattn.forward(q, k, v, None, None, None, 0, 0, 0.0,
                                           a.hdim ** -0.5, True, -1, 0, 0.0, None, False)

    def sdpa(i):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(*pick(sdpa_in)(i), is_causal=True)

    def sdpa_train_step(i):
        q, k, v = pick(sdpa_train)(i)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), out)

    raw = raw_launches(inputs)
    raw_backward = raw_backward_launches(inputs, raw)
    saved = [_torch_ops.run_forward(q, k, v, None, None, None, 0, 0, 0.0,
                                              a.hdim ** -0.5, True, -1, 0, 0.0, None)
             for q, k, v in inputs]

    def python_backward(i):
        (q, k, v), (out, lse, rng_state) = pick(inputs)(i), pick(saved)(i)
        _torch_ops.run_backward(out, q, k, v, out, lse, rng_state, None, None, None,
                                          0, 0, 0.0, a.hdim ** -0.5, True, -1, 0, 0.0, None,
                                          False)

    results = {"shape": dict(batch=a.batch, heads=a.heads, seqlen=a.seqlen, hdim=a.hdim,
                             dtype="bf16", causal=True),
               "kernel_us (CUDA graph replay)": graph_us(raw, a.calls),
               "backward_kernels_us (CUDA graph replay)": graph_us(raw_backward, a.calls // 4),
               "per_call_us": {}}
    calls = results["per_call_us"]
    calls["_C.forward, prebuilt args"] = per_call_us(raw, a.calls)
    calls["_C.backward, prebuilt args"] = per_call_us(raw_backward, a.calls // 4)
    calls["_torch_ops.run_backward (no autograd)"] = per_call_us(python_backward, a.calls // 4)
    calls["flash_attn_func"] = per_call_us(ours, a.calls)
    calls["torch.ops.flashattn.forward (custom op)"] = per_call_us(op, a.calls)
    calls["F.sdpa, PyTorch's flash backend"] = per_call_us(sdpa, a.calls)
    calls["flash_attn_func fwd+bwd"] = per_call_us(ours_train, a.calls // 4)
    calls["F.sdpa fwd+bwd, PyTorch's flash backend"] = per_call_us(sdpa_train_step, a.calls // 4)
    try:
        sdpa_routing = importlib.import_module("flashattn.torch")
    except ImportError:  # a flashattn from before flashattn.torch
        sdpa_routing = None
    if sdpa_routing is not None and hasattr(torch.nn.attention, "register_flash_attention_impl"):
        sdpa_routing.activate()
        calls["F.sdpa, flashattn.torch.activate()"] = per_call_us(sdpa, a.calls)
        calls["F.sdpa fwd+bwd, flashattn.torch.activate()"] = per_call_us(sdpa_train_step,
                                                                        a.calls // 4)
        sdpa_routing.deactivate()
    for name, us in calls.items():
        print(f"{name:48s} {us:8.2f} us/call")
    for name in ("kernel_us (CUDA graph replay)", "backward_kernels_us (CUDA graph replay)"):
        print(f"{name:48s} {results[name]:8.2f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
