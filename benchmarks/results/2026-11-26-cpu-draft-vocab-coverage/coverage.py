"""Share of the target's greedy tokens that the shipped EAGLE-3 head's 8,192-token draft
vocabulary holds, per eval set (CPU, fp32, plain greedy, first turn, chat template)."""
import json, sys, time
import torch
from safetensors.torch import load_file
from updraft.bench.prompts import load_prompts
from updraft.heads import resolve_draft_path
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

head = resolve_draft_path("builtin:smollm2")
sd = load_file(f"{head}/model.safetensors")
d2t = sd["d2t"].long()
vocab = set((torch.arange(d2t.numel()) + d2t).tolist())
llm = LLM("default", device="cpu", progress=False, max_running_requests=16)
tok = llm.engine.tokenizer
max_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 128
out = {}
for name, n in (("mt_bench", 80), ("sum", 20), ("qa", 20), ("humaneval", 20), ("gsm8k", 20), ("alpaca", 20)):
    t0 = time.time()
    prompts = [tok.encode_chat([{"role": "user", "content": t}]) for t in load_prompts(name, n)]
    prompts = [p for p in prompts if len(p) < 1800]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    toks = [t for o in outs for t in o.outputs[0].token_ids]
    inside = sum(t in vocab for t in toks)
    # the first draft predicts the token after the bonus: positions >= 1 of each output
    later = [t for o in outs for t in o.outputs[0].token_ids[1:]]
    out[name] = {"prompts": len(prompts), "tokens": len(toks), "in_draft_vocab": inside / max(len(toks), 1),
                 "in_draft_vocab_after_first": sum(t in vocab for t in later) / max(len(later), 1), "wall_s": time.time() - t0}
    print(name, out[name], flush=True)
json.dump(out, open("/tmp/cov/coverage.json", "w"), indent=1)
