"""Probe for issue 14's last kernel-count lever: the decode attention's split merge folded into
the o_proj GEMV's prologue (one launch a layer fewer: SmolLM2's 183-kernel forward -> 153).

Today a one-row decode layer runs the split-KV decode kernel, then ``merge_splits`` (the splits'
partial outputs weighted by their log-sum-exp, rounded to bf16), then the o_proj GEMV. Folded,
every o_proj program would merge the whole row itself from the fp32 partials (in L2, just
written) before its product: the merge's work repeated per program, one launch and its PDL
boundary gone. This times the two at SmolLM2's one-row shape (9 heads x 64, o_proj 576 x 576,
64 captured splits of which ``live`` hold keys: 4 / 16 / 64 ~ 256 / 1k / 4k tokens of context),
each as a CUDA graph of 64 back-to-back layers' worth (64 weight copies, so the weights come
from memory as in a step; the partials stay in L2 as after the decode kernel):

* ``merge + linear``: the production ``merge_splits`` and ``gemv.linear`` (PDL on sm_90+);
* ``merge + probe``: the merge, then this script's own GEMV reading the merged row (what the
  probe kernel costs as a GEMV, against production's);
* ``probe merged``: the probe kernel merging in its prologue (the fold), over column tiles,
  K chunks and warps.

The fold pays where ``probe merged`` beats ``merge + linear``. Correctness: each variant's
output against a float64 merge + product. ``--smoke``: tiny run under the Triton interpreter.

    python benchmarks/merge_fold_probe.py --out results/merge_fold_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if not torch.cuda.is_available():  # the interpreter switch is read when a kernel is defined
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from attention_bench import meta  # noqa: E402

from updraft.attention.triton_kernels.merge import merge_splits  # noqa: E402
from updraft.ops import gemv  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.ops.triton_utils import pdl_enter, pdl_opts  # noqa: E402


@triton.jit
def probe_kernel(MidO, MidLse, X, W, Out, N, K, s_mh, s_ms, s_lh, stride_w,
                 MERGED: tl.constexpr, S: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    pdl_enter(PDL)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < K
        w = tl.load(W + n[:, None].to(tl.int64) * stride_w + k[None, :], mask=nmask[:, None] & kmask[None, :],
                    other=0.0)
        if MERGED:  # merge_splits of these columns: all splits of their heads, weighted by lse
            h = k // D
            s = tl.arange(0, S)
            lse = tl.load(MidLse + h[None, :] * s_lh + s[:, None], mask=kmask[None, :], other=float("-inf"))
            mx = tl.max(lse, 0)
            mx = tl.where(mx == float("-inf"), 0.0, mx)
            live = lse > float("-inf")
            wgt = tl.where(live, tl.exp2(lse - mx[None, :]), 0.0)
            o = tl.load(MidO + h[None, :] * s_mh + s[:, None] * s_ms + (k % D)[None, :], mask=live & kmask[None, :],
                        other=0.0)
            den = tl.sum(wgt, 0)
            a = (tl.sum(wgt * o, 0) / tl.where(den == 0.0, 1.0, den)).to(X.dtype.element_ty)
        else:
            a = tl.load(X + k, mask=kmask, other=0.0)
        acc += tl.sum(w.to(tl.float32) * a.to(tl.float32)[None, :], 1)
    tl.store(Out + n, acc.to(Out.dtype.element_ty), mask=nmask)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter (CPU)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() and not args.smoke:
        print("merge_fold_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    heads, d, splits = 9, 64, 64
    k_dim = n_dim = heads * d
    copies = 64 if dev.type == "cuda" else 2
    lives = (4, 16, 64) if dev.type == "cuda" else (3,)
    tiles = [(4, 64, 4), (4, 128, 8), (8, 64, 4), (8, 128, 8), (16, 64, 4), (16, 64, 8)] if dev.type == "cuda" else [(4, 64, 4)]
    gen = torch.Generator(device="cpu").manual_seed(0)
    ws = [(torch.randn(n_dim, k_dim, generator=gen) / k_dim**0.5).to(torch.bfloat16).to(dev) for _ in range(copies)]
    rows: list[dict[str, Any]] = []
    for live in lives:
        mid_o = torch.randn(1, heads, splits, d, generator=gen).to(dev)
        mid_lse = torch.randn(1, heads, splits, generator=gen) * 3
        mid_lse[:, :, live:] = float("-inf")
        mid_lse = mid_lse.to(dev)
        w_ = torch.softmax(mid_lse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), -1)
        merged = (w_[..., None] * mid_o.double()).sum(2).reshape(1, k_dim)
        ref = merged.to(torch.bfloat16).double() @ ws[0].double().T
        x = torch.empty(1, heads, d, dtype=torch.bfloat16, device=dev)
        out = torch.empty(1, n_dim, dtype=torch.bfloat16, device=dev)

        def probe(merged_in: bool, bn: int, bk: int, warps: int, i: int = 0) -> None:
            probe_kernel[(triton.cdiv(n_dim, bn),)](
                mid_o, mid_lse, x, ws[i % copies], out, n_dim, k_dim, mid_o.stride(1), mid_o.stride(2),
                mid_lse.stride(1), ws[0].stride(0), MERGED=merged_in, S=splits, D=d, BLOCK_N=bn, BLOCK_K=bk,
                num_warps=warps, **pdl_opts(dev, "gemv"))

        variants: dict[str, Any] = {
            "merge + linear": lambda i: (merge_splits(mid_o, mid_lse, x), gemv.linear(x.view(1, k_dim), ws[i % copies])),
        }
        for bn, bk, warps in tiles:
            variants[f"merge + probe n{bn} k{bk} w{warps}"] = (
                lambda i, bn=bn, bk=bk, warps=warps: (merge_splits(mid_o, mid_lse, x), probe(False, bn, bk, warps, i)))
            variants[f"probe merged n{bn} k{bk} w{warps}"] = (
                lambda i, bn=bn, bk=bk, warps=warps: probe(True, bn, bk, warps, i))
        for name, fn in variants.items():
            fn(0)  # compile, and the output of weight copy 0 for the check
            got = gemv.linear(x.view(1, k_dim), ws[0])[0] if name == "merge + linear" else out
            err = float((got.double() - ref).abs().max() / ref.abs().max())
            row: dict[str, Any] = {"live_splits": live, "variant": name, "rel_err": err}
            if dev.type == "cuda":
                calls = [0]

                def rep(fn: Any = fn) -> None:
                    fn(calls[0])
                    calls[0] += 1

                row["us_per_layer"] = graph_seconds(rep, copies) * 1e6
            rows.append(row)
            print(f"live {live:2d}  {name:28s} {row.get('us_per_layer', float('nan')):7.2f} us  rel err {err:.1e}",
                  flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta(dev), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
