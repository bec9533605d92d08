"""The sampled acceptance's filter on bf16-valued rows: one program per row
(``rejection_kernels``) against the histogram filter (``filter_hist``), side by side.

For SmolLM2's and Llama-3's vocabularies (49152, 128256), 6 / 48 / 384 rows (bs 1 / 8 / 64 at
S = 5) and the benchmarks' filters, on scaled Gaussian rows rounded to bf16 values: us per call
inside a CUDA graph for each, and whether the two keep the same tokens (rows that differ, and the
largest relative difference of the normaliser Z).

    python benchmarks/filter_hist_bench.py --out OUT
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from filter_bench import FILTERS  # noqa: E402
from sampled_tune import _graph_ms  # noqa: E402

from updraft.provenance import git_commit  # noqa: E402
from updraft.spec import filter_hist as fh  # noqa: E402
from updraft.spec import rejection_kernels as rk  # noqa: E402


def registers() -> dict[str, list[tuple[int, int]]]:
    """(registers a thread, spilled bytes) of each compiled variant of the histogram filter's
    launches, read from triton's per-device kernel caches (empty where this triton keeps them
    elsewhere)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for name in ("_max_kernel", "_hist_kernel", "_block_kernel", "_cut_kernel"):
        caches = getattr(getattr(fh, name), "device_caches", {})
        for entry in caches.values():
            for k in entry[0].values():
                k._init_handles()
                out.setdefault(name, []).append((int(k.n_regs), int(k.n_spills)))
    return out


def case(rows: int, vocab: int, flt: tuple[str, float, int, float, float]) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(rows * 7 + vocab)
    scale = torch.linspace(1.0, 6.0, rows, device="cuda")[:, None]
    x = (torch.randn(rows, vocab, device="cuda", generator=g) * scale).to(torch.bfloat16).float()
    _, t, k, p, mp = flt
    params = (torch.full((rows,), t, device="cuda"), torch.full((rows,), float(k), device="cuda"),
              torch.full((rows,), p, device="cuda"), torch.full((rows,), mp, device="cuda"))
    ref = rk.filter_rows(x, 1, *params)
    new = rk.filter_rows(x, 1, *params, bf16_values=True)
    keep_ref = x >= ref[:, rk.THR, None]
    keep_new = x >= new[:, rk.THR, None]
    differ = int((keep_ref != keep_new).any(-1).sum())
    z_rel = float(((new[:, rk.Z] - ref[:, rk.Z]).abs() / ref[:, rk.Z]).max())
    same_m = bool(torch.equal(new[:, rk.M], ref[:, rk.M]) and torch.equal(new[:, rk.AMAX], ref[:, rk.AMAX]))
    row_us = _graph_ms(lambda: rk.filter_rows(x, 1, *params), 20) * 1e3
    hist_us = _graph_ms(lambda: rk.filter_rows(x, 1, *params, bf16_values=True), 20) * 1e3
    return dict(rows=rows, vocab=vocab, filter=flt[0], one_program_us=row_us, hist_us=hist_us, speedup=row_us / hist_us,
                rows_keeping_other_tokens=differ, max_rel_z_diff=z_rel, same_max_and_argmax=same_m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="6,48,384")
    ap.add_argument("--vocabs", default="49152,128256")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "cases": []}
    print(f"{'vocab':>7} {'rows':>5} {'filter':>20} {'one-program us':>15} {'hist us':>8} {'x':>6} {'differ':>6} {'z diff':>8}")
    for vocab in (int(v) for v in args.vocabs.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            for flt in FILTERS:
                r = case(rows, vocab, flt)
                out["cases"].append(r)
                print(f"{vocab:>7} {rows:>5} {flt[0]:>20} {r['one_program_us']:>15.1f} {r['hist_us']:>8.1f} "
                      f"{r['speedup']:>6.1f} {r['rows_keeping_other_tokens']:>6} {r['max_rel_z_diff']:>8.1e}"
                      + ("" if r["same_max_and_argmax"] else "  M/AMAX DIFFER"), flush=True)
    out["registers_spills"] = registers()
    print("registers, spilled bytes:", out["registers_spills"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "filter_hist_bench.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
