"""Flags of ``updraft bench`` (kept free of heavy imports: ``updraft --help`` stays fast)."""

from __future__ import annotations

import argparse


def add_bench_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompts", default="random", help="eval set name (mt_bench, sum, ...), a JSONL file, or random")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens for --prompts random")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--batch-sizes", default="1,8", help="comma-separated")
    ap.add_argument("--no-baseline", action="store_true", help="do not also run without speculation")
    ap.add_argument("--peak-bw", type=float, default=3.01e12, help="bytes/s for the bandwidth fraction (H100 copy: 3.01e12)")
    ap.add_argument("--bw-context", type=int, default=1024)
    ap.add_argument("--out", default=None, help="folder for results JSON (and PNG plots with matplotlib)")
    ap.add_argument("--peer", choices=["none", "transformers"], default="none", help="also run a peer engine on the same prompts")
    ap.add_argument("--peer-modes", default="eager,static_compile,prompt_lookup", help="transformers modes (comma-separated)")
