#!/usr/bin/env python3
"""Merges flashattn-bench JSON lines with bench/peers.py JSON into markdown tables and charts.

    python3 bench/report.py --ours ours.jsonl --peers peers.json --md RESULTS.md --png chart.png \
        [--commit "abc1234 plus uncommitted changes"]

One table per direction present (forward, backward), one row per (head dim, causal, seqlen):
TFLOP/s of flashattn and each peer, and flashattn's ratio to each. One chart per direction
(the backward's next to --png, named *_bwd.png): one panel per head dim x causal, TFLOP/s
against seqlen, one line per implementation (the layout of FlashAttention's README plots).
"""
import argparse
import datetime
import json
import sys

NAMES = {"flashattn": "flashattn", "sdpa_flash": "SDPA FLASH (FA2)",
         "sdpa_cudnn": "SDPA cuDNN", "flex": "FlexAttention"}


def load(ours_path, peers_path):
    rows = {}
    device = None
    with open(ours_path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            key = (r.get("direction", "fwd"), r["hdim"], bool(r["causal"]), r["seqlen_q"])
            rows.setdefault(key, {})["flashattn"] = r["tflops"]
            device = device or r.get("device")
    if peers_path:
        with open(peers_path) as f:
            for r in json.load(f):
                key = (r.get("direction", "fwd"), r["hdim"], bool(r["causal"]), r["seqlen"])
                rows.setdefault(key, {})[r["implementation"]] = r.get("tflops")
                device = device or r.get("device")
    return rows, device


DIRECTIONS = {"fwd": ("Forward", "TFLOP/s = 4 b h sq sk d / time, halved for causal"),
              "bwd": ("Backward", "TFLOP/s = 2.5 x 4 b h sq sk d / time, halved for causal (the "
                      "FA2 convention); the backward alone: flashattn-bench --direction bwd, "
                      "peers: autograd.grad on a saved graph")}


def markdown(rows, device, commit, peers):
    out = [f"Date: {datetime.date.today().isoformat()}  ",
           f"Device: {device}  ",
           f"Commit: {commit}  ",
           "Setting: bf16, batch x seqlen = 16384 tokens, hidden 2048 (d=64: 32 heads, "
           "d=128: 16 heads, d=256: 8 heads). flashattn: flashattn-bench median (rotating "
           "input sets); peers: triton.testing.do_bench median.", ""]
    for direction in [d for d in DIRECTIONS if any(k[0] == d for k in rows)]:
        title, flops = DIRECTIONS[direction]
        out += [f"### {title}", "", flops + ".", ""]
        head = ["d", "causal", "seqlen", "flashattn"] + [NAMES[p] for p in peers] + \
            [f"vs {NAMES[p]}" for p in peers]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for (_, d, causal, s) in sorted(k for k in rows if k[0] == direction):
            r = rows[(direction, d, causal, s)]
            ours = r.get("flashattn")
            cells = [str(d), "yes" if causal else "no", str(s), f"{ours:.0f}" if ours else "-"]
            for p in peers:
                cells.append(f"{r[p]:.0f}" if r.get(p) else "-")
            for p in peers:
                cells.append(f"{ours / r[p]:.2f}x" if ours and r.get(p) else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def chart(rows, path, device, peers, direction):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = {k[1:]: v for k, v in rows.items() if k[0] == direction}
    hdims = sorted({k[0] for k in rows})
    fig, axes = plt.subplots(2, len(hdims), figsize=(5 * len(hdims), 8), squeeze=False)
    for col, d in enumerate(hdims):
        for row, causal in enumerate((False, True)):
            ax = axes[row][col]
            keys = sorted(k for k in rows if k[0] == d and k[1] == causal)
            seqlens = [k[2] for k in keys]
            for impl in ["flashattn"] + peers:
                ys = [rows[k].get(impl) for k in keys]
                pts = [(s, y) for s, y in zip(seqlens, ys) if y]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                            label=NAMES[impl], linewidth=2.5 if impl == "flashattn" else 1.5)
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens)
            ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.set_title(f"d={d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"Attention {DIRECTIONS[direction][0].lower()}, bf16, 16k tokens, hidden 2048 "
                 f"— {device}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", required=True)
    ap.add_argument("--peers")
    ap.add_argument("--md", required=True)
    ap.add_argument("--png")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    rows, device = load(args.ours, args.peers)
    present = {impl for r in rows.values() for impl in r}
    peers = [p for p in ("sdpa_flash", "sdpa_cudnn", "flex") if p in present]
    with open(args.md, "w") as f:
        f.write(markdown(rows, device, args.commit, peers))
    if args.png:
        for direction in [d for d in DIRECTIONS if any(k[0] == d for k in rows)]:
            path = args.png if direction == "fwd" else args.png.replace(".png", "_bwd.png")
            chart(rows, path, device, peers, direction)
    return 0


if __name__ == "__main__":
    sys.exit(main())
