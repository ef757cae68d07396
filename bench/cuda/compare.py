#!/usr/bin/env python3
"""Compares bench_cuda's output with bench_torch's: usage compare.py cascade.jsonl torch.jsonl.
Prints each op's times and the ratio; the goal is Cascade within 10% of PyTorch (ratio <= 1.10).
A row "op:path" (bench_cuda's conv2d:im2col, conv2d:cudnn: one path of the driver forced) is set
against PyTorch's "op" row, and left out of the worst ratio, which is about what Cascade does by
default."""
import json
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                r = json.loads(line)
                rows[(r["op"], r["type"], r["size"])] = r
    return rows


def main():
    ours, theirs = load(sys.argv[1]), load(sys.argv[2])
    worst = 0.0
    print(f"{'op':14} {'type':5} {'size':22} {'cascade ms':>11} {'torch ms':>9} {'ratio':>6}")
    for key, r in ours.items():
        op, _, path = key[0].partition(":")
        t = theirs.get((op,) + key[1:])
        if not t:
            continue
        ratio = r["ms"] / t["ms"]
        if not path:
            worst = max(worst, ratio)
        flag = "" if ratio <= 1.10 else "  <- more than 10% slower"
        print(f"{key[0]:14} {key[1]:5} {key[2]:22} {r['ms']:11.3f} {t['ms']:9.3f} {ratio:6.2f}{flag}")
    print(f"worst ratio {worst:.2f} (goal <= 1.10)")


if __name__ == "__main__":
    main()
