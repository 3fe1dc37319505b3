#!/usr/bin/env python3
"""End-to-end Transformers numbers with flashattn ("fa2cpp") beside "sdpa" and "eager", in one
process on one set of weights: greedy generate() tokens/s and training-step time, with peak
memory; writes JSON lines.

Models are built from configs (nothing is downloaded), random weights:
  llama  a Llama-3-8B-shaped stack: hidden 4096, 32 query heads on 8 KV heads (d = 128),
         MLP 14336, vocab 128256, cut to --layers decoder layers;
  qwen2  a Qwen2-0.5B-shaped stack: hidden 896, 14 query heads on 2 KV heads (d = 64), MLP
         4864, vocab 151936, --layers layers.
Every implementation runs the same model object: the attention implementation is switched
between measurements (set_attn_implementation), so the weights are shared and only one copy
is in memory.

Measurements (each the median of --repeats after a warm-up). The implementations of a cell
are alternated: every round runs each of them once, in an order that rotates from round to
round, so that the host's drift (large for the host-bound generation cells) falls on all of
them alike instead of on whichever ran last:
  generate  batch x prompt tokens, --new-tokens greedy tokens forced (no early EOS), dynamic
            cache; with --compile also "static+compile": generate(...,
            cache_implementation="static", compile_config=CompileConfig(fullgraph=True)), as a
            Transformers user asks for it: Transformers compiles the decoding forward (mode
            "reduce-overhead", CUDA graphs; the prefill runs uncompiled), on CUDA only: on the
            CPU the cell runs the static cache uncompiled (Transformers warns so).
            fullgraph=True makes a graph break an error row, not a silently split graph.
            Reported: tokens/s over the whole call, the prefill (a one-token call) and the
            decode rate (the other tokens over the time past the prefill).
  train     batch x seqlen: forward + backward of the model's loss. "padded": rows of random
            lengths between seqlen / 2 and seqlen, padded to seqlen with an attention mask;
            "packed": the same sequences concatenated into one row, position_ids restarting
            at every sequence (padding-free training, as each implementation runs it in
            Transformers).

    python3 bench/hf_e2e.py [--models llama,qwen2] [--impls fa2cpp,sdpa,eager] [--layers 4]
        [--generate 1x1024,1x8192,8x1024] [--new-tokens 64] [--train 1x4096,1x16384]
        [--compile] [--repeats 3] [--profile] [--out F] [--tiny]

--profile adds, after each dynamic-cache generate cell, one generate() per implementation
under torch.profiler: host and device time per token and its largest kernels.

--tiny shrinks every model and shape for a smoke test (on the CPU when no GPU is visible).
A measurement that fails (out of memory, an implementation Transformers refuses) is written
as a row with "error" and the run goes on.
"""
import argparse
import json
import statistics
import sys
import time

import torch

MODELS = {
    "llama": dict(family="llama", hidden_size=4096, intermediate_size=14336,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                  rope_theta=500000.0),
    "qwen2": dict(family="qwen2", hidden_size=896, intermediate_size=4864,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                  rope_theta=1000000.0),
}
TINY = dict(hidden_size=128, intermediate_size=256, vocab_size=512)


def build_model(name, layers, tiny, device, dtype):
    import transformers
    spec = dict(MODELS[name])
    family = spec.pop("family")
    if tiny:
        spec.update(TINY)
        spec["num_attention_heads"], spec["num_key_value_heads"] = 4, 2
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    config = config_class(num_hidden_layers=layers, max_position_embeddings=131072, **spec)
    with torch.device(device):  # random init where the model runs: on the host it takes minutes
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                              dtype=dtype)
    return model


def use_implementation(model, implementation):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    else:
        model.config._attn_implementation = implementation


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device):
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


class Measured:
    """What a cell needs from one implementation: `setup` (switch to it), `run` (the timed
    call), `teardown` (undo what setup did)."""

    def __init__(self, setup, run, teardown=lambda: None):
        self.setup, self.run, self.teardown = setup, run, teardown


def alternated(cells, device, repeats):
    """{name: (median seconds, peak GiB) or an exception} of the named Measured calls: one
    untimed call each, then `repeats` rounds in which each runs once, the order rotated by
    one every round. A call that fails is left out of the later rounds."""
    names = list(cells)
    results = {name: [] for name in names}
    peaks = {name: None for name in names}
    failed = {}
    if device == "cuda":
        torch.cuda.empty_cache()  # once: the timed calls then reuse what the warm-up cached

    def once(name, timed):
        cell = cells[name]
        try:
            cell.setup()
            reset_peak(device)
            synchronize(device)
            start = time.perf_counter()
            cell.run()
            synchronize(device)
            seconds = time.perf_counter() - start
            if timed:
                results[name].append(seconds)
                peak = peak_gib(device)
                peaks[name] = peak if peaks[name] is None else max(peaks[name], peak)
        except Exception as error:  # one failed implementation must not end the cell
            failed[name] = error
        finally:
            cell.teardown()

    for name in names:
        once(name, False)
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if name not in failed:
                once(name, True)
    return {name: failed.get(name) or (statistics.median(results[name]), peaks[name])
            for name in names}


def generate_cells(model, implementations, batch, prompt, new_tokens, device, repeats, static):
    """{implementation: row fields or an exception}: tokens/s of the whole call, the prefill
    (a one-token call) and the decode rate (the other tokens over the time past the prefill)."""
    import transformers
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), device=device)
    mask = torch.ones_like(ids)
    extra = {}
    if static:
        # On CUDA Transformers compiles the decoding step itself; a compile of our own of the
        # forward on top of it failed on the GPU (CUDA graph outputs overwritten by a later run).
        extra = {"cache_implementation": "static",
                 "compile_config": transformers.CompileConfig(fullgraph=True)}
        # The one compiled forward is shared by every implementation and cell, each adding
        # graphs to it; with fullgraph=True, passing dynamo's recompile limit is an error.
        torch._dynamo.reset()

    def setup(implementation):
        return lambda: use_implementation(model, implementation)

    def run(tokens):
        return lambda: model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                      max_new_tokens=tokens, min_new_tokens=tokens,
                                      pad_token_id=0, **extra)

    with torch.no_grad():
        whole = alternated({i: Measured(setup(i), run(new_tokens))
                            for i in implementations}, device, repeats)
        prefill = alternated({i: Measured(setup(i), run(1)) for i in implementations},
                             device, repeats)
    rows = {}
    for i in implementations:
        if isinstance(whole[i], Exception) or isinstance(prefill[i], Exception):
            rows[i] = whole[i] if isinstance(whole[i], Exception) else prefill[i]
            continue
        (seconds, peak), (prefill_seconds, _) = whole[i], prefill[i]
        # The two medians come from different calls: a whole call no longer than the prefill
        # (noise, on a host-bound run) leaves no decode time to divide by.
        decode = None
        if seconds > prefill_seconds:
            decode = round(batch * (new_tokens - 1) / (seconds - prefill_seconds), 1)
        rows[i] = {"tokens_per_s": round(batch * new_tokens / seconds, 1),
                   "decode_tokens_per_s": decode,
                   "prefill_ms": round(prefill_seconds * 1e3, 2), "peak_gib": peak}
    return rows


def profile_generate(model, implementation, batch, prompt, new_tokens, device, top=12):
    """Where one dynamic-cache generate() of `implementation` spends its time: torch.profiler
    over the whole call, the device time of its kernels (the `top` largest by total time, each
    with its count) and the host and device time per generated token."""
    from torch.profiler import ProfilerActivity, profile
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
    mask = torch.ones_like(ids)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    use_implementation(model, implementation)

    def run():
        model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                       max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
        synchronize(device)

    with torch.no_grad():
        run()  # warm-up outside the profile
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            run()
        wall = time.perf_counter() - start
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels.sort(key=lambda e: e.device_time_total, reverse=True)
    device_us = sum(e.device_time_total for e in kernels)
    return {"profile_wall_ms_per_token": round(wall * 1e3 / new_tokens, 3),
            "profile_device_ms_per_token": round(device_us / 1e3 / new_tokens, 3),
            "top_kernels": [{"name": e.key[:90], "count": e.count,
                             "us_per_token": round(e.device_time_total / new_tokens, 2)}
                            for e in kernels[:top]]}


def sequence_lengths(batch, seqlen, generator):
    low = max(1, seqlen // 2)
    return [int(x) for x in torch.randint(low, seqlen + 1, (batch,), generator=generator)]


def train_inputs(kind, batch, seqlen, vocab, device):
    generator = torch.Generator().manual_seed(batch * 100003 + seqlen)
    lengths = sequence_lengths(batch, seqlen, generator)
    if kind == "padded":
        ids = torch.randint(0, vocab, (batch, seqlen), generator=generator)
        mask = torch.zeros(batch, seqlen, dtype=torch.long)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1  # right padding, as training collators do
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
                "labels": labels.to(device)}
    total = sum(lengths)
    ids = torch.randint(0, vocab, (1, total), generator=generator)
    position_ids = torch.cat([torch.arange(length) for length in lengths]).unsqueeze(0)
    labels = ids.clone()
    starts = torch.tensor([0] + lengths[:-1]).cumsum(0)
    labels[0, starts] = -100  # no label across a sequence boundary
    return {"input_ids": ids.to(device), "position_ids": position_ids.to(device),
            "labels": labels.to(device)}


def train_cells(model, implementations, kind, batch, seqlen, device, repeats):
    """{implementation: row fields or an exception}: the step time of forward + backward."""
    inputs = train_inputs(kind, batch, seqlen, model.config.vocab_size, device)

    def setup(implementation):
        def switch():
            use_implementation(model, implementation)
            model.train()
        return switch

    def step():
        model.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()

    def teardown():
        model.zero_grad(set_to_none=True)
        model.eval()

    measured = alternated({i: Measured(setup(i), step, teardown) for i in implementations},
                          device, repeats)
    tokens = int(inputs["input_ids"].numel()) if kind == "packed" else \
        int(inputs["attention_mask"].sum())
    rows = {}
    for i, result in measured.items():
        if isinstance(result, Exception):
            rows[i] = result
            continue
        seconds, peak = result
        rows[i] = {"step_ms": round(seconds * 1e3, 2), "tokens": tokens,
                   "tokens_per_s": round(tokens / seconds, 1), "peak_gib": peak}
    return rows


def shapes(text):
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,qwen2")
    ap.add_argument("--impls", default="fa2cpp,sdpa,eager")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--generate", default="1x1024,1x8192,8x1024", help="batch x prompt")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--train", default="1x4096,1x16384", help="batch x seqlen")
    ap.add_argument("--compile", action="store_true",
                    help="also generate with the static cache, compiled by Transformers "
                         "(CUDA only: on the CPU it runs uncompiled)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="after each dynamic-cache generate cell, one profiled generate() per "
                         "implementation: its largest kernels and time per token")
    ap.add_argument("--tiny", action="store_true", help="small models and shapes: a smoke test")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import flashattn.hf
    flashattn.hf.register()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    generate_shapes, train_shapes, new_tokens = shapes(args.generate), shapes(args.train), \
        args.new_tokens
    if args.tiny:
        generate_shapes, train_shapes, new_tokens = [(1, 32), (2, 48)], [(2, 64)], 4
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    out = open(args.out, "w") if args.out else None

    def emit(row):
        row["device"] = device_name
        print(json.dumps(row), flush=True)
        if out:
            out.write(json.dumps(row) + "\n")

    for name in args.models.split(","):
        torch.manual_seed(0)
        model = build_model(name, args.layers, args.tiny, device, dtype).eval()
        cases = [("generate", "dynamic", shape) for shape in generate_shapes]
        if args.compile:
            cases += [("generate", "static+compile", shape) for shape in generate_shapes]
        cases += [("train", kind, shape) for shape in train_shapes
                  for kind in ("padded", "packed")]
        implementations = args.impls.split(",")
        for what, kind, (batch, length) in cases:
            try:
                if what == "generate":
                    rows = generate_cells(model, implementations, batch, length, new_tokens,
                                          device, args.repeats, kind != "dynamic")
                else:
                    rows = train_cells(model, implementations, kind, batch, length, device,
                                       args.repeats)
            except Exception as error:  # e.g. the inputs do not fit: every row of the cell
                rows = {i: error for i in implementations}
            for implementation in implementations:
                row = {"model": name, "layers": args.layers, "what": what, "kind": kind,
                       "batch": batch, "length": length, "implementation": implementation}
                result = rows[implementation]
                if isinstance(result, Exception):
                    row["error"] = f"{type(result).__name__}: {str(result)[:300]}"
                else:
                    row.update(result)
                emit(row)
            if args.profile and what == "generate" and kind == "dynamic":
                for implementation in implementations:
                    row = {"model": name, "layers": args.layers, "what": "profile",
                           "kind": kind, "batch": batch, "length": length,
                           "implementation": implementation}
                    try:
                        row.update(profile_generate(model, implementation, batch, length,
                                                    new_tokens, device))
                    except Exception as error:
                        row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
                    emit(row)
        model = None
        if device == "cuda":
            torch.cuda.empty_cache()
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
