"""How often an answer sampled at temperature T takes the target's greedy token (CPU, fp32, the default
model): the share of sampled tokens that are the argmax at their position, and the mean probability of
the argmax, for v6 prompts of our own (seed 99; free user turns skipped: they need a generation first)."""
import json
import math
import sys
import time

from updraft.data.prompts import build_prompts
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

n, max_tokens = int(sys.argv[1]), int(sys.argv[2])
ps = [p for p in build_prompts(4 * n, seed=99, prompt_set="v6") if not p.open_turn and p.followup is None][:n]
llm = LLM("default", device="cpu", dtype="float32", progress=False)
convs = [[{"role": "user", "content": p.text}] for p in ps]
out = {}
for T in (0.0, 0.3, 0.5, 0.8, 1.0):
    t0 = time.time()
    toks = [llm.render_chat(c) for c in convs]
    res = llm.generate(toks, [SamplingParams(temperature=T, max_tokens=max_tokens, seed=i, logprobs=1) for i in range(len(toks))])
    hits = total = 0
    pmax = 0.0
    for r in res:
        for tok, lp in zip(r.outputs[0].token_ids, r.outputs[0].logprobs or []):
            total += 1
            best_id, best_lp = max(lp["top"], key=lambda e: e[1])
            hits += int(best_id == tok)
            pmax += math.exp(best_lp)
    out[T] = {"tokens": total, "argmax_share": round(hits / max(total, 1), 4), "mean_argmax_prob": round(pmax / max(total, 1), 4),
              "s": round(time.time() - t0, 1)}
    print(T, out[T], flush=True)
print(json.dumps(out))
