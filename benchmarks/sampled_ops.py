"""CPU proxy for the cost of the fused iteration's sampled acceptance: the ops one captured body
issues (``FusedIteration._body``, the function a graph replay runs), greedy vs sampled, with the
sampled acceptance as it is (``rejection_kernels``: two Triton launches) and as it was (the dense
path, ``sampled_accept_reference``: a full-vocabulary sort per verify row, a dense q, ~100 small
kernels). Counted with ``updraft.testing.count_ops``: aten ops that are not views or allocations
(one GPU kernel or more each) plus Triton launches.

Runs on the tiny random target and a random EAGLE (``--kind eagle``) or EAGLE-3 head of the
tests (CPU, graph emulation, the Triton interpreter) by default, or on ``--model`` / ``--head``;
the counts depend on the model only through its layer count, the differences between the columns
not at all. ``--names`` lists, per (bs, S), the ops whose counts differ between greedy and sampled
(where the sampled extras come from). The timing that matters is on the GPU:
``benchmarks/spec_iteration.py`` (cycle_ms_sampled_bs1 / cycle_ms_greedy_bs1).

    PYTHONPATH=. TRITON_INTERPRET=1 python benchmarks/sampled_ops.py --kind eagle3 --steps 5 --sizes 1,8 --names
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton defines the kernels (CPU)

import torch  # noqa: E402

from updraft.llm import LLM  # noqa: E402
from updraft.spec import rejection_kernels  # noqa: E402
from updraft.spec.fused import FusedIteration  # noqa: E402
from updraft.testing import (  # noqa: E402
    OpCount,
    count_ops,
    tiny_hf_model,
    write_eagle3_head,
    write_eagle_head,
    write_tiny_tokenizer,
)


def body_ops(fused: FusedIteration, s: int, sampled: bool, bs: int, dense: bool) -> OpCount:
    """Ops of one captured body at (S, sampled, bs) on padding rows (the counts do not depend on
    the values: nothing in a body syncs with the host)."""
    use = rejection_kernels.use_kernels
    rejection_kernels.use_kernels = lambda t: not dense  # type: ignore[assignment]
    try:
        g = fused._build(s, sampled, bs)
        fused._body(g)  # warm-up: the first launch of a kernel compiles / allocates
        return count_ops(lambda: fused._body(g))
    finally:
        rejection_kernels.use_kernels = use  # type: ignore[assignment]


def name_diff(greedy: OpCount, sampled: OpCount) -> dict[str, int]:
    """Sampled minus greedy count per aten op name (nonzero only), Triton launches as ``triton``."""
    diff = {n: sampled.names.get(n, 0) - greedy.names.get(n, 0) for n in sorted({*greedy.names, *sampled.names})}
    diff["triton"] = sampled.triton - greedy.triton
    return {n: d for n, d in diff.items() if d}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="target (default: the tests' tiny random Llama)")
    ap.add_argument("--kind", choices=["eagle", "eagle3"], default="eagle", help="speculative method (head layout)")
    ap.add_argument("--head", default=None, help="head folder of --kind (default: a random one)")
    ap.add_argument("--steps", default="1,3,5")
    ap.add_argument("--sizes", default="1,8")
    ap.add_argument("--names", action="store_true", help="per-op differences, greedy vs sampled")
    ap.add_argument("--out", default=None, help="write the counts as JSON here")
    args = ap.parse_args()
    steps = [int(x) for x in args.steps.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model, head = args.model, args.head
        if model is None:
            model = str(Path(tmp) / "target")
            tiny_hf_model("llama").save_pretrained(model)
            write_tiny_tokenizer(Path(model))
        if head is None:
            write = write_eagle3_head if args.kind == "eagle3" else write_eagle_head
            head = str(write(Path(tmp) / "head"))
        spec = {"method": args.kind, "draft_model": head, "num_steps": max(steps), "adaptive": False}
        llm = LLM(model, device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=sizes,
                  speculative_config=spec)
        assert llm.engine.driver is not None, llm.engine.graph_log
        fused = llm.engine.driver.fused
        rows = []
        with torch.inference_mode():
            for bs in sizes:
                for s in steps:
                    greedy = body_ops(fused, s, False, bs, dense=False)
                    new = body_ops(fused, s, True, bs, dense=False)
                    old = body_ops(fused, s, True, bs, dense=True)
                    rows.append({"bs": bs, "S": s, "greedy": vars(greedy), "sampled": vars(new),
                                 "sampled_dense": vars(old), "extra": name_diff(greedy, new)})
    print(f"{'bs':>3} {'S':>2} | {'greedy':>14} | {'sampled (kernels)':>18} | {'sampled (dense, before)':>24}")
    print(f"{'':>6} | {'compute+triton':>14} | {'compute+triton':>18} | {'compute+triton':>24}")
    for r in rows:
        cells = [f"{c['compute']}+{c['triton']} = {c['compute'] + c['triton']}"
                 for c in (r["greedy"], r["sampled"], r["sampled_dense"])]
        print(f"{r['bs']:>3} {r['S']:>2} | {cells[0]:>14} | {cells[1]:>18} | {cells[2]:>24}")
    if args.names:
        for r in rows:
            print(f"bs {r['bs']} S {r['S']} sampled - greedy: {r['extra']}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
