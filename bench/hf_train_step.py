#!/usr/bin/env python3
"""Times a Transformers training step (forward + backward) of a Llama-3-8B-shaped stack with
flashattn ("fa2cpp") against PyTorch's SDPA ("sdpa"), in one process; writes JSON lines.

The model: hidden 4096, 32 query heads on 8 KV heads (d = 128), MLP 14336, vocab 128256,
--layers decoder layers (default 4), random weights, bf16, on the GPU. Both implementations
run the same weights (a copy of one state dict) on the same token ids. Each time is the
median of --iters steps after --warmup untimed ones, measured with CUDA events around
loss.backward() of the model's own loss; gradients are dropped between steps.

    python3 bench/hf_train_step.py [--shapes 1x4096,1x16384,4x4096] [--layers 4] [--out F]
"""
import argparse
import json
import statistics
import sys

import torch


def build(implementation, layers, state=None):
    import transformers
    config = transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        num_hidden_layers=layers, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500000.0)
    with torch.device("cuda"):  # random init on the GPU: on the host it takes minutes
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation=implementation, dtype=torch.bfloat16)
    if state is not None:
        model.load_state_dict(state)
    return model.train()


def step_ms(model, ids, warmup, iters):
    times = []
    for i in range(warmup + iters):
        model.zero_grad(set_to_none=True)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        stop.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4096,1x16384,4x4096", help="batch x seqlen, comma-separated")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import flashattn.hf
    ours = flashattn.hf.register()
    torch.manual_seed(0)
    reference = build("sdpa", args.layers)
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    models = {"sdpa": reference, ours: build(ours, args.layers, state)}
    rows = []
    for shape in args.shapes.split(","):
        batch, seqlen = (int(x) for x in shape.split("x"))
        ids = torch.randint(0, 128256, (batch, seqlen), device="cuda")
        for name, model in models.items():
            ms = step_ms(model, ids, args.warmup, args.iters)
            row = {"implementation": name, "batch": batch, "seqlen": seqlen, "layers": args.layers,
                   "step_ms": round(ms, 3), "device": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
        model = None
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
