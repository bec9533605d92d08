"""Quick GPU numbers for SmolLM2 (bs 1/8/32): decode step time with and without CUDA graphs, and
speculative decoding (n-gram, self-draft) tokens/s, side by side in one run. Prints a table and
writes JSON to --out. The full benchmark is `updraft bench` (updraft/bench/)."""

from __future__ import annotations

import argparse
import json
import time

import torch

from updraft.batch import ForwardMode
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams


def decode_step_ms(llm: LLM, bs: int, ctx: int, iters: int = 50) -> float:
    eng = llm.engine
    rows = []
    for _ in range(bs):
        r = eng.req_pool.alloc()
        assert r is not None and eng.allocator.ensure(r, ctx + 1)
        rows.append(r)
    try:
        batch = eng.runner.make_batch(ForwardMode.DECODE, [1] * bs, rows, [ctx + 1] * bs, [1] * bs, stride=1)
        for _ in range(5):
            eng.runner.forward(batch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            batch = eng.runner.make_batch(ForwardMode.DECODE, [1] * bs, rows, [ctx + 1] * bs, [1] * bs, stride=1)
            eng.runner.forward(batch)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters * 1000
    finally:
        for r in rows:
            eng.allocator.free(r)
            eng.req_pool.free(r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for graphs in (False, True):
        llm = LLM(args.model, device="cuda", dtype="bfloat16", progress=False, disable_cuda_graph=not graphs)
        for bs in (1, 8, 32):
            res[f"decode_ms_bs{bs}_{'graph' if graphs else 'eager'}"] = decode_step_ms(llm, bs, 512)
        del llm
        torch.cuda.empty_cache()
    prompt = [{"role": "user", "content": "Write a detailed story about a lighthouse keeper."}]
    for name, spec in (("none", None), ("ngram", {"method": "ngram", "num_speculative_tokens": 5})):
        llm = LLM(args.model, device="cuda", dtype="bfloat16", progress=False, speculative_config=spec)
        p = SamplingParams(temperature=0, max_tokens=256, ignore_eos=True)
        llm.chat(prompt, p)
        t0 = time.perf_counter()
        out = llm.chat(prompt, p)[0]
        dt = time.perf_counter() - t0
        res[f"gen_tok_s_bs1_{name}"] = 256 / dt
        res[f"gen_metrics_{name}"] = out.metrics
        del llm
        torch.cuda.empty_cache()
    for bs in (1, 8, 32):
        e, g = res[f"decode_ms_bs{bs}_eager"], res[f"decode_ms_bs{bs}_graph"]
        print(f"bs {bs:>2}: decode step eager {e:.3f} ms, graph {g:.3f} ms, speedup {e / g:.2f}x")
    print(f"bs 1 generation (256 tokens): plain {res['gen_tok_s_bs1_none']:.0f} tok/s, ngram {res['gen_tok_s_bs1_ngram']:.0f} tok/s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
