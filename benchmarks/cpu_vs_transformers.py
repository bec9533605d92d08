"""updraft vs Hugging Face transformers at batch 1, same model / prompts / machine, one run.

Both generate a fixed number of greedy tokens (EOS ignored) for each prompt; runs alternate
between the engines so machine noise hits both. Reports decode tokens/s (tokens after the
first / time after the first), time to first token, and the ratio. Also updraft with n-gram
speculation. Writes JSON + a markdown table under --out.

    python benchmarks/cpu_vs_transformers.py --prompts mt_bench --num-prompts 4 --max-tokens 128
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch


def bench_transformers(model, ids: list[int], n: int) -> dict[str, float]:  # noqa: ANN001
    x = torch.tensor([ids])
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(x, max_new_tokens=1, min_new_tokens=1, do_sample=False, pad_token_id=0)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        total = time.perf_counter() - t0
    assert out.shape[1] - len(ids) == n
    return {"ttft_s": ttft, "decode_tok_s": (n - 1) / max(total - ttft, 1e-9), "tokens": n, "total_s": total}


def bench_updraft(llm, ids: list[int], n: int) -> dict[str, float]:  # noqa: ANN001
    from updraft.sampling_params import SamplingParams

    out = llm.generate([ids], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))[0]
    m = out.metrics
    res = {"ttft_s": m["ttft_s"], "decode_tok_s": m["decode_tokens_per_s"], "tokens": len(out.outputs[0].token_ids), "total_s": m["e2e_s"]}
    if "spec" in m:
        res["mean_accept_length"] = m["spec"]["mean_accept_length"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--prompts", default="mt_bench", help="eval set name or JSONL file")
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results/<date>-cpu)")
    args = ap.parse_args()

    import transformers

    from updraft.bench.prompts import load_prompts
    from updraft.llm import LLM
    from updraft.models.resolve import resolve_model
    from updraft.provenance import git_commit

    path = resolve_model(args.model)
    llm = LLM(str(path), device="cpu", dtype="float32", progress=False)
    spec = LLM(str(path), device="cpu", dtype="float32", progress=False,
               speculative_config={"method": "ngram", "num_speculative_tokens": 5})
    if path.suffix == ".gguf":
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    else:
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    hf.eval()
    prompts = [llm.render_chat([{"role": "user", "content": p}]) for p in load_prompts(args.prompts, args.num_prompts)]
    # Warm-up both (first calls pay lazy initialisation).
    bench_transformers(hf, prompts[0][:32], 4)
    bench_updraft(llm, prompts[0][:32], 4)
    bench_updraft(spec, prompts[0][:32], 4)
    rows = []
    for i, ids in enumerate(prompts):
        r = {"prompt": i, "prompt_tokens": len(ids)}
        r["transformers"] = bench_transformers(hf, ids, args.max_tokens)
        r["updraft"] = bench_updraft(llm, ids, args.max_tokens)
        r["updraft_ngram"] = bench_updraft(spec, ids, args.max_tokens)
        rows.append(r)
        print(f"prompt {i} ({len(ids)} tokens): transformers {r['transformers']['decode_tok_s']:.1f} tok/s, "
              f"updraft {r['updraft']['decode_tok_s']:.1f} tok/s, updraft+ngram {r['updraft_ngram']['decode_tok_s']:.1f} tok/s", flush=True)

    def med(engine: str, key: str) -> float:
        return statistics.median(r[engine][key] for r in rows)

    summary = {
        engine: {"decode_tok_s": med(engine, "decode_tok_s"), "ttft_ms": 1000 * med(engine, "ttft_s")}
        for engine in ("transformers", "updraft", "updraft_ngram")
    }
    summary["updraft_ngram"]["mean_accept_length"] = statistics.mean(r["updraft_ngram"].get("mean_accept_length", 1.0) for r in rows)
    summary["speedup_vs_transformers"] = summary["updraft"]["decode_tok_s"] / summary["transformers"]["decode_tok_s"]
    summary["ngram_speedup_vs_transformers"] = summary["updraft_ngram"]["decode_tok_s"] / summary["transformers"]["decode_tok_s"]
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": str(path.name),
        "dtype": "float32",
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "command": "python benchmarks/cpu_vs_transformers.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"
        ),
    }
    table = [
        "| engine | decode tok/s (median) | TTFT ms (median) | vs transformers |",
        "|---|---:|---:|---:|",
    ]
    for engine in ("transformers", "updraft", "updraft_ngram"):
        s = summary[engine]
        ratio = s["decode_tok_s"] / summary["transformers"]["decode_tok_s"]
        table.append(f"| {engine} | {s['decode_tok_s']:.1f} | {s['ttft_ms']:.0f} | {ratio:.2f}x |")
    text = "\n".join(table)
    print("\n" + text)
    out = Path(args.out or f"benchmarks/results/{datetime.now().strftime('%Y-%m-%d')}-cpu")
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_vs_transformers.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=2))
    (out / "cpu_vs_transformers.md").write_text(f"# updraft vs transformers, CPU, batch 1\n\n{json.dumps(meta, indent=1)}\n\n{text}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
