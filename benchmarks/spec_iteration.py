"""The fused speculative iteration on the GPU (issue 12): cycle cost, host work, speed-ups.

Part 1 (cost; SmolLM2 and/or a random Llama-3.1-8B shape with a random EAGLE-3-shaped head of
a 32k draft vocabulary): per batch size, the plain decode step and the fused iteration at
S = 5 (greedy and T = 0.7 top-p 0.9), both as device time from CUDA events around the replay,
at --context tokens, and the sampled cycle once more with the dense acceptance it replaced
(``sampled_dense``: Sampler.probs, a dense q, rejection_accept) for a same-machine comparison;
the cycle in plain decode steps (the fused plain step's device time, measured like the cycle's;
``cycle_forward_steps_*``: against the per-phase DECODE forward, whose events hold host
staging); host tensor ops and host time of one launch (ops counted with a TorchDispatchMode: a graph replay is one call, not counted). Plain decoding at bs 1: the
fused plain step's device time and end-to-end TPOT with and without overlap.

Part 2 (speed; SmolLM2 + builtin:smollm2, mt_bench first turns; n-gram on sum): tokens/s with
and without speculation side by side in one process (plain = overlapped plain decoding, the
default; plain_step = per-step graphs), per batch size, greedy and sampled, with
the chosen-S histogram of adaptive speculation, mean accept length, and the engine's host ops
per speculative iteration at bs 1. Prints a table; writes JSON to --out.

``--ngram-only`` (with --smollm): n-gram alone: fp32 outputs equal plain greedy through the fused
n-gram iteration, then bs 1 and 64 on sum against overlapped plain decoding (adaptive and S = 5),
with the path that ran.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))
from graph_phases import LLAMA8B, context_text, fake_requests, random_llama  # noqa: E402

from updraft.batch import ForwardMode  # noqa: E402
from updraft.bench.models import random_model  # noqa: E402
from updraft.bench.offline import make_prompts, run_one  # noqa: E402
from updraft.config import DRAFT_LM_HEADS, EngineConfig, SpeculativeConfig  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.heads import resolve_draft_path  # noqa: E402
from updraft.models.config import ModelConfig  # noqa: E402
from updraft.provenance import git_commit  # noqa: E402
from updraft.sampling_params import SamplingParams  # noqa: E402
from updraft.spec import rejection_kernels  # noqa: E402


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


#: the speed part's ``eagle_adaptive_context`` variant: prompt tokens outside an EAGLE-3 head's vocabulary per request
#: (``eagle_adaptive_nocontext``: none, whatever the config's default; ``eagle_adaptive``: the default)
CONTEXT_VOCAB = 256

def write_random_eagle3(folder: Path, cfg: ModelConfig, draft_vocab: int) -> Path:
    """A random EAGLE-3 head in the published layout (hidden = target hidden, own lm_head)."""
    from safetensors.torch import save_file

    h, i, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    g = torch.Generator().manual_seed(0)

    def w(*s: int) -> torch.Tensor:
        return (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)

    def one() -> torch.Tensor:
        return torch.ones(h, dtype=torch.bfloat16)

    t = {"fc.weight": w(h, 3 * h), "midlayer.self_attn.q_proj.weight": w(cfg.num_heads * hd, 2 * h),
         "midlayer.self_attn.k_proj.weight": w(cfg.num_kv_heads * hd, 2 * h), "midlayer.self_attn.v_proj.weight": w(cfg.num_kv_heads * hd, 2 * h),
         "midlayer.self_attn.o_proj.weight": w(h, cfg.num_heads * hd), "midlayer.mlp.gate_proj.weight": w(i, h),
         "midlayer.mlp.up_proj.weight": w(i, h), "midlayer.mlp.down_proj.weight": w(h, i), "midlayer.input_layernorm.weight": one(),
         "midlayer.hidden_norm.weight": one(), "midlayer.post_attention_layernorm.weight": one(), "norm.weight": one(),
         "lm_head.weight": w(draft_vocab, h), "d2t": torch.zeros(draft_vocab, dtype=torch.long)}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(t, str(folder / "model.safetensors"))
    conf = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": h, "intermediate_size": i, "num_hidden_layers": 1,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": hd,
            "vocab_size": cfg.vocab_size, "draft_vocab_size": draft_vocab, "max_position_embeddings": cfg.max_position_embeddings,
            "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "bias": False}
    (folder / "config.json").write_text(json.dumps(conf))
    return folder


def _free() -> None:
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def _median_event_ms(fn: Any, iters: int) -> float:
    times = []
    for _ in range(iters + 3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times[3:])


def fused_ms(eng: Engine, reqs: list[Any], iters: int, steps: int = 0, sampled: bool = False) -> float:
    """Median device time (ms) of the fused iteration with ``steps`` drafts for ``reqs`` (S = 0
    on a plain engine: the plain step, one DECODE replay with state on the device), the rows
    re-admitted before every launch so each one starts from the same lengths."""
    drv = eng.driver
    assert drv is not None, eng.graph_log
    secs = []
    for i in range(iters + 3):
        drv.admit(reqs)
        inf = drv.fused.launch(reqs, steps, sampled)
        inf.wait()
        if i >= 3:
            secs.append(inf.seconds() * 1e3)
    return statistics.median(secs)


def add_cost_args(ap: argparse.ArgumentParser, sizes: str, smollm_required: bool = True) -> None:
    """The arguments the profiling scripts share (cycle_profile.py, sampled_tune.py)."""
    ap.add_argument("--smollm", required=smollm_required, help="SmolLM2 GGUF path")
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--sizes", default=sizes)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--blank-context", action="store_true",
                    help="leave the requests' KV unwritten (as before 2026-11-25: nearly flat target rows)")
    ap.add_argument("--out", required=True)


def set_sampling(reqs: list[Any], sampled: bool, top_k: int = -1) -> None:
    """The cost benchmarks' two settings: greedy, or T = 0.7 with top-p 0.9 (and ``top_k``)."""
    for r in reqs:
        r.params = SamplingParams(temperature=0.7, top_p=0.9, top_k=top_k) if sampled else SamplingParams(temperature=0)


def args_text(args: argparse.Namespace, engine: Engine, sizes: list[int]) -> list[int] | None:
    """The requests' context for the ``add_cost_args`` scripts: mt_bench text, or None with
    ``--blank-context``."""
    return None if args.blank_context else context_text(engine, args.context, max(sizes))


def park(eng: Engine, bs: int, context: int, text: list[int] | None, sampled: bool) -> list[Any]:
    """``bs`` requests parked at ``context`` tokens (``fake_requests``), greedy or sampled,
    admitted to the fused driver's device state."""
    drv = eng.driver
    assert drv is not None, eng.graph_log
    reqs = fake_requests(eng, bs, context, text)
    set_sampling(reqs, sampled)
    drv.admit(reqs)
    return reqs


def smollm_engine_config(model: str, sizes: list[int], context: int) -> EngineConfig:
    """The cost benchmarks' engine: bf16 graphs at ``sizes``, room for ``context`` at the largest."""
    return EngineConfig(model=model, device="cuda", dtype="bfloat16", progress=False, cuda_graph_bs=sizes,
                        max_total_tokens=max(sizes) * (context + 64) + 4096, max_running_requests=max(sizes))


def plain_tpot(plain: Engine, base: EngineConfig, loaded: Any, context: int, iters: int) -> dict[str, float]:
    """Plain decoding at bs 1: the device time of the fused plain step (a DECODE replay with
    state on the device), and end-to-end TPOT (p50 over 128 tokens after a ``context``-token
    prompt) with overlap (the default) and without (per-step graphs)."""
    reqs = fake_requests(plain, 1, context)
    out = {"plain_step_device_ms_bs1": fused_ms(plain, reqs, iters)}
    for r in reqs:
        plain.scheduler.release(r)
    prompt = [(7 * i + 3) % 1000 + 10 for i in range(context)]
    params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    run_one(plain, [prompt], dataclasses.replace(params, max_tokens=8), 1)
    out["tpot_ms_overlap_bs1"] = run_one(plain, [prompt], params, 1)["tpot_s"]["p50"] * 1e3
    step = Engine(dataclasses.replace(base, disable_overlap=True), loaded=loaded)
    run_one(step, [prompt], dataclasses.replace(params, max_tokens=8), 1)
    out["tpot_ms_per_step_bs1"] = run_one(step, [prompt], params, 1)["tpot_s"]["p50"] * 1e3
    del step
    return out


def cost(model: str, loaded: Any, head: str, method: str, sizes: list[int], context: int, iters: int,
         real_text: bool = False, draft_lm_head: str = "auto", ngram_assist: int = SpeculativeConfig.ngram_assist,
         top_k: int = -1, context_vocab: int = 0) -> dict[str, Any]:
    """Decode step, plain step and S = 5 cycles (greedy, sampled, the dense sampled path) at
    ``sizes``; ``real_text``: the requests hold mt_bench text in their KV (``fake_requests``);
    ``top_k``: the sampled cycles' top-k beside top-p 0.9."""
    base = smollm_engine_config(model, sizes, context)
    out: dict[str, Any] = {"context": "mt_bench text" if real_text else "unwritten KV"}
    plain = Engine(base, loaded=loaded)
    text = context_text(plain, context, max(sizes)) if real_text else None
    for bs in sizes:
        reqs = fake_requests(plain, bs, context, text)
        batch = plain.runner.make_batch(ForwardMode.DECODE, [1] * bs, [r.row for r in reqs], [context + 1] * bs, [1] * bs, stride=1)
        out[f"decode_ms_bs{bs}"] = _median_event_ms(lambda b=batch, e=plain: e.runner.forward(b), iters)
        out[f"plain_step_ms_bs{bs}"] = fused_ms(plain, reqs, iters)
        for r in reqs:
            plain.scheduler.release(r)
    out |= plain_tpot(plain, base, loaded, context, iters)
    del plain
    _free()
    if loaded is not None:
        loaded.model.aux_layers = ()
    spec = SpeculativeConfig(method=method, draft_model=head, num_steps=5, adaptive=False, draft_lm_head=draft_lm_head,
                             ngram_assist=ngram_assist, context_vocab=context_vocab if method == "eagle3" else 0)
    eng = Engine(dataclasses.replace(base, speculative=spec), loaded=loaded)
    drv = eng.driver
    assert drv is not None, eng.graph_log
    kernels = rejection_kernels.use_kernels
    for bs in sizes:
        reqs = fake_requests(eng, bs, context, text)
        # sampled_dense: the sampled acceptance as it was (Sampler.probs + dense q +
        # rejection_accept), captured in a graph of its own, for a same-machine comparison.
        for name, sampled in (("greedy", False), ("sampled", True), ("sampled_dense", True)):
            set_sampling(reqs, sampled, top_k)
            drv.admit(reqs)
            drv.fused.graphs.pop((5, sampled, drv.fused.bucket(bs)), None)  # captured with this variant
            rejection_kernels.use_kernels = kernels if name != "sampled_dense" else (lambda t: False)
            drv.fused.graph_for(5, sampled, bs)
            secs, host, ops = [], [], []
            for i in range(iters + 3):
                drv.admit(reqs)  # back to the same lengths every time
                torch.cuda.synchronize()
                if i == 0:  # ops counted once: the counter slows the host, so no timing with it
                    with OpCounter() as counter:
                        inf = drv.fused.launch(reqs, 5, sampled)
                    ops.append(counter.count)
                else:
                    t0 = time.perf_counter()
                    inf = drv.fused.launch(reqs, 5, sampled)
                    host.append(time.perf_counter() - t0)
                inf.wait()
                if i >= 3:
                    secs.append(inf.seconds() * 1e3)
            rejection_kernels.use_kernels = kernels
            key = f"{name}_bs{bs}"
            out[f"cycle_ms_{key}"] = statistics.median(secs)
            # in plain steps as plain decoding runs them (one replay, device time: the cycle's
            # measure); the per-phase forward's events also hold its host staging
            out[f"cycle_steps_{key}"] = out[f"cycle_ms_{key}"] / out[f"plain_step_ms_bs{bs}"]
            out[f"cycle_forward_steps_{key}"] = out[f"cycle_ms_{key}"] / out[f"decode_ms_bs{bs}"]
            out[f"launch_host_ms_{key}"] = statistics.median(host[2:]) * 1e3
            out[f"launch_host_ops_{key}"] = statistics.median(ops)
        out[f"sampled_over_greedy_bs{bs}"] = out[f"cycle_ms_sampled_bs{bs}"] / out[f"cycle_ms_greedy_bs{bs}"]
        out[f"sampled_dense_over_greedy_bs{bs}"] = out[f"cycle_ms_sampled_dense_bs{bs}"] / out[f"cycle_ms_greedy_bs{bs}"]
        for r in reqs:
            eng.scheduler.release(r)
    del eng
    _free()
    return out


def engine_ops_per_iteration(eng: Engine, prompt: list[int], steps: int = 40) -> dict[str, float]:
    """Host tensor ops and host time per engine step in steady-state speculative decoding, bs 1."""
    req = eng.add_request(prompt, SamplingParams(temperature=0, max_tokens=steps * 8 + 40, ignore_eos=True))
    while not req.output_ids:
        eng.step()
    for _ in range(5):
        eng.step()
    drv = eng.driver
    assert drv is not None
    l0 = drv.launches
    counter = OpCounter()
    with counter:  # ops first: the counter slows the host, so the timing below runs without it
        for _ in range(steps):
            eng.step()
    n_ops = drv.launches - l0
    l0, w0 = drv.launches, drv.wait_s
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        eng.step()
    wall = time.perf_counter() - t0
    waited = drv.wait_s - w0
    n = drv.launches - l0
    eng.abort(req.request_id)
    while eng.has_unfinished():
        eng.step()
    return {"iterations": n, "host_ops_per_iteration": counter.count / max(n_ops, 1),
            "wall_ms_per_iteration": wall / max(n, 1) * 1e3,
            "host_ms_per_iteration": (wall - waited) / max(n, 1) * 1e3,
            "note": "host ops counted over engine.step() (graph replays are one call); host time = wall minus the wait for results"}


def arrival_cost(eng: Engine, prompt: list[int], reps: int = 5) -> dict[str, float]:
    """What one arriving request costs at bs 1: the prefill step (target, and the draft's
    prefill), synchronised; then its host tensor ops (counted in a separate step: the counter
    slows the host) and GPU kernels (from the profiler, another step)."""
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    out: dict[str, float] = {"prompt_tokens": len(prompt)}
    times = []

    def one(mode: str) -> None:
        req = eng.add_request(prompt, params)
        torch.cuda.synchronize()
        if mode == "time":
            t0 = time.perf_counter()
            eng.step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        elif mode == "ops":
            with OpCounter() as counter:
                eng.step()
            out["host_ops"] = counter.count
        else:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                eng.step()
                torch.cuda.synchronize()
            out["cuda_kernels"] = sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
        assert req.output_ids, "the step was meant to be the prefill"
        while eng.has_unfinished():
            eng.step()
        eng.release_finished(req.request_id)

    for mode in ["time"] * (reps + 1) + ["ops", "profile"]:
        one(mode)
    out["prefill_step_ms"] = statistics.median(times[1:])
    return out


def speed(gguf: str, head: str, method: str, sizes: list[int], n_prompts: int, out_len: int,
          only: set[str] | None = None, bs1_prompts: int = 0) -> dict[str, Any]:
    res: dict[str, Any] = {}
    greedy = SamplingParams(temperature=0, max_tokens=out_len, ignore_eos=True)
    sampled = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=out_len, ignore_eos=True)
    base = EngineConfig(model=gguf, device="cuda", dtype="bfloat16", progress=False, max_running_requests=max(sizes),
                        max_total_tokens=200_000)
    eagle = SpeculativeConfig(method=method, draft_model=head, num_steps=5)
    variants = [  # plain = plain decoding with overlap (the default); plain_step = per-step graphs
        ("plain", base),
        ("plain_step", dataclasses.replace(base, disable_overlap=True)),
        ("eagle_adaptive", dataclasses.replace(base, speculative=eagle)),
        ("eagle_s5", dataclasses.replace(base, speculative=dataclasses.replace(eagle, adaptive=False))),
        # the sampled graphs captured on first use (before 2026-11-27's default: at start)
        ("eagle_adaptive_lazy", dataclasses.replace(base, speculative=eagle, sampled_graphs="first-use")),
        # the head's drafts alone (before 2026-11-27's default: n-gram lookups where the history repeats)
        ("eagle_adaptive_noassist", dataclasses.replace(base, speculative=dataclasses.replace(eagle, ngram_assist=0))),
    ]
    if method == "eagle3":  # greedy drafts may propose the prompt's tokens outside the draft vocabulary
        variants += [(f"eagle_adaptive_{name}", dataclasses.replace(
            base, speculative=dataclasses.replace(eagle, context_vocab=k))) for name, k in (("context", CONTEXT_VOCAB), ("nocontext", 0))]
    prompts_cache: dict[str, list[list[int]]] = {}
    for name, cfg in variants:
        if only is not None and name not in only:
            continue
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        eng = Engine(cfg)
        torch.cuda.synchronize()
        res[f"start_{name}"] = start = {
            "seconds": time.perf_counter() - t0, "reserved_gib": torch.cuda.memory_reserved() / 2**30,
            "graphs": eng.driver.describe() if eng.driver is not None else "no fused driver",
        }
        print(f"{name:16s} start: {start['seconds']:.1f} s, {start['reserved_gib']:.2f} GiB reserved; {start['graphs']}", flush=True)
        if "mt" not in prompts_cache:
            prompts_cache["mt"] = make_prompts(eng, "mt_bench", max(n_prompts, max(sizes)), 0)
        ps = prompts_cache["mt"]
        # warm-up: captures the lazily captured fused graphs at every size used below
        for bs in sizes:
            run_one(eng, ps[:bs], dataclasses.replace(greedy, max_tokens=24), bs)
        run_one(eng, ps[:1], dataclasses.replace(sampled, max_tokens=24), 1)
        for bs in sizes:
            n = max(bs, n_prompts) if bs > 1 else bs1_prompts or max(4, n_prompts // 4)
            r = run_one(eng, ps[:n], greedy, bs)
            r.pop("outputs", None)
            res[f"{name}_greedy_bs{bs}"] = r
            print(f"{name:16s} greedy bs {bs:3d}: {r['output_tok_s']:8.1f} tok/s  accept {r.get('spec', {}).get('mean_accept_length', '-')}  {r.get('fused', {}).get('chosen_s', '')}", flush=True)
        r = run_one(eng, ps[: max(4, n_prompts // 4)], sampled, 1)
        r.pop("outputs", None)
        res[f"{name}_sampled_bs1"] = r
        print(f"{name:16s} T=0.7    bs   1: {r['output_tok_s']:8.1f} tok/s  accept {r.get('spec', {}).get('mean_accept_length', '-')}", flush=True)
        if name == "eagle_s5":
            res["engine_host"] = engine_ops_per_iteration(eng, ps[0])
        if name in ("plain", "eagle_s5"):
            res[f"arrival_{name}"] = a = arrival_cost(eng, ps[1])
            print(f"{name:16s} arrival: {json.dumps(a)}", flush=True)
        del eng
        _free()
    res |= ngram_speed(base, greedy, n_prompts)
    return res


def ngram_speed(base: EngineConfig, greedy: SamplingParams, n_prompts: int, sizes: tuple[int, ...] = (1, 64)) -> dict[str, Any]:
    """n-gram (prompt lookup) on the summarisation prompts against overlapped plain decoding in
    the same process: adaptive S and a fixed S = 5, through the fused iteration (lookups on the
    device) when the engine picks it; the path that ran is printed with each rate."""
    res: dict[str, Any] = {}
    ngram = SpeculativeConfig(method="ngram", num_steps=5)
    for name, spec in [("plain", None), ("ngram", ngram), ("ngram_s5", dataclasses.replace(ngram, adaptive=False))]:
        eng = Engine(dataclasses.replace(base, speculative=spec))
        path = "fused" if eng.driver is not None and eng.driver.fused.ngram is not None else "per-phase"
        ps = make_prompts(eng, "sum", max(n_prompts, 64), 0)
        for bs in sizes:
            run_one(eng, ps[:bs], dataclasses.replace(greedy, max_tokens=16), bs)
            r = run_one(eng, ps[: max(bs, 8)], greedy, bs)
            r.pop("outputs", None)
            res[f"{name}_sum_bs{bs}"] = r
            line = f"{name:16s} sum bs {bs:3d}: {r['output_tok_s']:8.1f} tok/s"
            if spec is not None:
                plain = res[f"plain_sum_bs{bs}"]["output_tok_s"]
                r["speedup_vs_plain"] = r["output_tok_s"] / plain
                fused = r.get("fused", {})
                line += (f"  {r['speedup_vs_plain']:.2f}x plain  path {path}  accept {r.get('spec', {}).get('mean_accept_length', '-')}"
                         f"  S {fused.get('chosen_s', '-')}  launches {fused.get('launches', 0)}  paths {r['paths']}")
            print(line, flush=True)
        if name == "ngram_s5" and eng.driver is not None:
            res["ngram_engine_host"] = engine_ops_per_iteration(eng, ps[0])
            print(f"{name:16s} host per iteration: {json.dumps(res['ngram_engine_host'])}", flush=True)
        del eng
        _free()
    return res


def ngram_lossless(gguf: str) -> dict[str, Any]:
    """fp32 on the GPU: the fused n-gram iteration's outputs equal plain greedy (bs 1 and 8,
    overlap on/off, summarisation prompts)."""
    base = EngineConfig(model=gguf, device="cuda", dtype="float32", progress=False, cuda_graph_bs=[1, 2, 4, 8], max_running_requests=8,
                        max_total_tokens=40000)
    greedy = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    plain = Engine(dataclasses.replace(base, disable_overlap=True))
    ps = make_prompts(plain, "sum", 8, 0)
    ref = {bs: run_one(plain, ps[:bs], greedy, bs)["outputs"] for bs in (1, 8)}
    del plain
    _free()
    out: dict[str, Any] = {}
    for overlap in (True, False):
        eng = Engine(dataclasses.replace(base, speculative=SpeculativeConfig(method="ngram", num_steps=5), disable_overlap=not overlap))
        assert eng.driver is not None and eng.driver.fused.ngram is not None, eng.graph_log
        for bs in (1, 8):
            out[f"ngram,overlap={overlap},bs={bs}"] = run_one(eng, ps[:bs], greedy, bs)["outputs"] == ref[bs]
        del eng
        _free()
    print("n-gram lossless fp32 on the GPU:", json.dumps(out), flush=True)
    return out


def lossless(gguf: str, head: str, method: str) -> dict[str, Any]:
    """fp32 on the GPU: fused speculative outputs equal plain greedy (bs 1 and 8, overlap on/off,
    adaptive on/off; plain decoding with overlap too), and a seeded sampled run repeats."""
    base = EngineConfig(model=gguf, device="cuda", dtype="float32", progress=False, cuda_graph_bs=[1, 2, 4, 8], max_running_requests=8,
                        max_total_tokens=20000)
    greedy = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    plain = Engine(dataclasses.replace(base, disable_overlap=True))  # the reference: per-step graphs
    ps = make_prompts(plain, "mt_bench", 8, 0)
    ref = {bs: run_one(plain, ps[:bs], greedy, bs)["outputs"] for bs in (1, 8)}
    del plain
    _free()
    out: dict[str, Any] = {}
    fused_plain = Engine(base)  # plain decoding through the fused step with overlap
    assert fused_plain.driver is not None
    for bs in (1, 8):
        out[f"plain_overlap,bs={bs}"] = run_one(fused_plain, ps[:bs], greedy, bs)["outputs"] == ref[bs]
    del fused_plain
    _free()
    for adaptive in (True, False):
        for overlap in (True, False):
            spec = SpeculativeConfig(method=method, draft_model=head, num_steps=5, adaptive=adaptive)
            eng = Engine(dataclasses.replace(base, speculative=spec, disable_overlap=not overlap))
            for bs in (1, 8):
                got = run_one(eng, ps[:bs], greedy, bs)["outputs"]
                out[f"adaptive={adaptive},overlap={overlap},bs={bs}"] = got == ref[bs]
            seeded = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=32, seed=3, ignore_eos=True)
            a = run_one(eng, ps[:4], seeded, 4)["outputs"]
            b = run_one(eng, ps[:4], seeded, 4)["outputs"]
            out[f"seeded_repeat,adaptive={adaptive},overlap={overlap}"] = a == b
            assert eng.driver is not None and eng.driver.launches > 0
            del eng
            _free()
    print("lossless fp32 on the GPU:", json.dumps(out), flush=True)
    return out


def head_method(head: str) -> str:
    """eagle or eagle3, from the head folder's config.json architecture."""
    cfg = json.loads((Path(resolve_draft_path(head)) / "config.json").read_text())
    return "eagle3" if any("Eagle3" in a for a in cfg.get("architectures", [])) else "eagle"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smollm", default=None, help="SmolLM2 GGUF path (parts 1 and 2)")
    ap.add_argument("--eight-b", action="store_true", help="part 1 on the random Llama-3.1-8B shape")
    ap.add_argument("--eight-b-sizes", default="1", help="batch sizes of the 8B shape's cycle costs")
    ap.add_argument("--random-smollm", action="store_true",
                    help="part 1 on SmolLM2's shape with random weights and --head (no GGUF; the requests' KV unwritten)")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sizes", default="1,8,32,64")
    ap.add_argument("--cost-sizes", default="1,8", help="batch sizes of the SmolLM2 cycle costs")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--bs1-prompts", type=int, default=0,
                    help="greedy bs-1 prompts (default num-prompts / 4): their bf16 texts vary from run to run, "
                         "so bs-1 ratios over 16 prompts move by several percent")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--head", default="builtin:smollm2", help="SmolLM2 draft head: folder or builtin:NAME (method from its config)")
    ap.add_argument("--draft-lm-head", default="auto", choices=DRAFT_LM_HEADS,
                    help="the EAGLE-3 draft LM head's weights in the cost part (SpeculativeConfig.draft_lm_head)")
    ap.add_argument("--ngram-assist", type=int, default=SpeculativeConfig.ngram_assist,
                    help="the cycle costs' engines: lookups replace the head's drafts where the history repeats this many tokens (0: off)")
    ap.add_argument("--context-vocab", type=int, default=0,
                    help="the cycle costs' engines: EAGLE-3 context tokens (SpeculativeConfig.context_vocab; 0: off)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--sampled-top-k", type=int, default=-1, help="the sampled cycle costs' top-k beside top-p 0.9 (-1: none)")
    ap.add_argument("--blank-context", action="store_true",
                    help="SmolLM2 costs with the requests' KV unwritten (as before 2026-11-25: nearly flat target rows)")
    ap.add_argument("--skip-lossless", action="store_true", help="no fp32 lossless check (run it in another call)")
    ap.add_argument("--ngram-only", action="store_true", help="with --smollm: only the n-gram lossless check and speed part")
    ap.add_argument("--variants", default="", help="speed: only these of plain, plain_step, eagle_adaptive, eagle_s5, eagle_adaptive_lazy, eagle_adaptive_noassist, eagle_adaptive_context, eagle_adaptive_nocontext (comma-separated)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    cost_sizes = [int(x) for x in args.cost_sizes.split(",")]
    eight_b_sizes = [int(x) for x in args.eight_b_sizes.split(",")]
    results: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.eight_b:
        cfg = ModelConfig(**LLAMA8B)
        with tempfile.TemporaryDirectory() as tmp:
            head = write_random_eagle3(Path(tmp) / "e3", cfg, 32000)
            loaded = random_llama(cfg, torch.bfloat16)
            results["cost_llama8b_eagle3"] = cost("random", loaded, str(head), "eagle3", eight_b_sizes, args.context, args.iters,
                                                  draft_lm_head=args.draft_lm_head, ngram_assist=args.ngram_assist,
                                                  top_k=args.sampled_top_k, context_vocab=args.context_vocab)
            print(json.dumps(results["cost_llama8b_eagle3"], indent=1), flush=True)
            del loaded
            torch.cuda.empty_cache()
    if args.random_smollm:  # the cycle's kernels do not depend on the weights (S pinned)
        loaded = random_model("random:smollm2-135m", torch.bfloat16, "cuda")
        results["cost_smollm2_random"] = cost("random", loaded, args.head, head_method(args.head), cost_sizes, args.context,
                                              args.iters, draft_lm_head=args.draft_lm_head, ngram_assist=args.ngram_assist,
                                              top_k=args.sampled_top_k, context_vocab=args.context_vocab)
        print(json.dumps(results["cost_smollm2_random"], indent=1), flush=True)
        del loaded
        torch.cuda.empty_cache()
    if args.smollm and args.ngram_only:
        results["ngram_lossless_fp32"] = ngram_lossless(args.smollm)
        base = EngineConfig(model=args.smollm, device="cuda", dtype="bfloat16", progress=False, max_running_requests=64,
                            max_total_tokens=200_000)
        results["ngram_speed_smollm2"] = ngram_speed(base, SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True),
                                                     args.num_prompts)
    elif args.smollm:
        method = head_method(args.head)
        results["head"] = {"path": args.head, "method": method}
        if not args.skip_lossless:
            results["lossless_fp32"] = lossless(args.smollm, args.head, method)
        results["cost_smollm2"] = cost(args.smollm, None, args.head, method, cost_sizes, args.context, args.iters,
                                       real_text=not args.blank_context, draft_lm_head=args.draft_lm_head, ngram_assist=args.ngram_assist,
                                       top_k=args.sampled_top_k, context_vocab=args.context_vocab)
        print(json.dumps(results["cost_smollm2"], indent=1), flush=True)
        if not args.skip_speed:
            only = set(args.variants.split(",")) if args.variants else None
            results["speed_smollm2"] = speed(args.smollm, args.head, method, sizes, args.num_prompts, args.output_len, only,
                                             args.bs1_prompts)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "spec_iteration.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
