"""Per-phase step times with and without CUDA graphs (issue 5 benchmark), on the GPU.

Models: SmolLM2-135M (--smollm PATH to the GGUF) and a random-weight Llama-3.1-8B-shape model
built on the device (bf16). For bs in {1, 8, 32} at --context tokens: plain decode step,
TARGET_VERIFY (ndt = S + 1), the draft chain (S - 1 EAGLE draft steps), DRAFT_EXTEND_V2, and
one whole speculative cycle (SpecWorker.step: draft + verify + accept + extend), each eager and
graphed. Reports the decode step at bs 1 as a fraction of the memory floor (weights + KV bytes /
--peak-bw), graphs-vs-eager speedups, and the cycle cost in plain decode steps. Random weights
make acceptance meaningless here: this measures cost, not speed-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.models.config import ModelConfig, RopeScaling
from updraft.models.llama import LlamaForCausalLM
from updraft.models.loader import LoadedModel
from updraft.sampling_params import SamplingParams

LLAMA8B = dict(family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
               num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
               rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192), max_position_embeddings=8192,
               eos_token_ids=(128001,))


class StubTokenizer:
    """Enough tokenizer for an engine fed token ids."""

    eos_token_ids = {0}
    bos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) % 1000 + 1 for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def random_llama(cfg: ModelConfig, dtype: torch.dtype) -> LoadedModel:
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype=dtype).to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
    model.post_load(cfg.max_position_embeddings)
    model.eval()
    return LoadedModel(model=model, config=cfg, tokenizer=StubTokenizer(), source=Path("random"), hf_config={})  # type: ignore[arg-type]


def write_random_eagle(folder: Path, cfg: ModelConfig) -> Path:
    """A random EAGLE-1 head for ``cfg`` in the published layout (hidden = target hidden)."""
    from safetensors.torch import save_file

    h, i, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    g = torch.Generator().manual_seed(0)

    def w(*s: int) -> torch.Tensor:
        return (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)

    t = {"fc.weight": w(h, 2 * h), "fc.bias": torch.zeros(h, dtype=torch.bfloat16),
         "layers.0.self_attn.q_proj.weight": w(cfg.num_heads * hd, h), "layers.0.self_attn.k_proj.weight": w(cfg.num_kv_heads * hd, h),
         "layers.0.self_attn.v_proj.weight": w(cfg.num_kv_heads * hd, h), "layers.0.self_attn.o_proj.weight": w(h, cfg.num_heads * hd),
         "layers.0.mlp.gate_proj.weight": w(i, h), "layers.0.mlp.up_proj.weight": w(i, h), "layers.0.mlp.down_proj.weight": w(h, i),
         "layers.0.post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16)}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(t, str(folder / "model.safetensors"))
    conf = {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": h, "intermediate_size": i, "num_hidden_layers": 1,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": hd,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_position_embeddings, "rms_norm_eps": cfg.rms_norm_eps,
            "rope_theta": cfg.rope_theta}
    (folder / "config.json").write_text(json.dumps(conf))
    return folder


DEVICE = "cuda"


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn: Any, iters: int) -> float:
    """Median milliseconds of ``fn()`` over ``iters`` synchronised runs (after 3 warm-ups)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


#: Request ``i`` of ``fake_requests(..., text)`` holds ``text`` from this offset times ``i``.
TEXT_STRIDE = 17


def context_text(engine: Engine, context: int, max_bs: int) -> list[int]:
    """Token ids of real text (mt_bench prompts, chat-formatted, one after another), enough for
    ``max_bs`` requests of ``context`` tokens in ``fake_requests``."""
    from updraft.bench.offline import make_prompts

    n_tokens = context + TEXT_STRIDE * max_bs
    ids: list[int] = []
    for p in make_prompts(engine, "mt_bench", 80, 0):
        ids += p
        if len(ids) >= n_tokens:
            return ids
    return (ids * (n_tokens // max(len(ids), 1) + 1))[:n_tokens]


def fake_requests(engine: Engine, bs: int, context: int, text: list[int] | None = None) -> list[Request]:
    """``bs`` requests parked mid-decode at ``context`` tokens. Without ``text`` their KV is left
    as the pool holds it (timings that do not depend on the values); with ``text`` request ``i``
    holds its tokens from offset ``TEXT_STRIDE * i`` and the target's KV is written by an eager EXTEND
    forward, so the verify rows are real text's distributions (a sampled filter's cost depends
    on them: over an unwritten KV the rows are nearly flat, its worst case)."""
    from updraft.batch import ForwardMode

    reqs = []
    for i in range(bs):
        ids = [1] * (context - 1) + [2] if text is None else text[TEXT_STRIDE * i:TEXT_STRIDE * i + context]
        assert len(ids) == context, "context_text gave too few tokens"
        r = Request(request_id=f"b{i}", prompt_ids=ids[:-1], params=SamplingParams(temperature=0))
        r.output_ids = ids[-1:]
        r.row = engine.req_pool.alloc()
        assert r.row is not None and engine.allocator.ensure(r.row, context + engine.lookahead + 1)
        if text is not None:
            batch = engine.runner.make_batch(ForwardMode.EXTEND, ids[:-1], [r.row], [context - 1], [context - 1])
            engine.runner.forward(batch)
        r.num_computed = context - 1
        r.in_prefill = False
        reqs.append(r)
    return reqs


def measure(engine: Engine, sizes: list[int], context: int, iters: int) -> dict[str, dict[str, float]]:
    from updraft.batch import ForwardMode

    out: dict[str, dict[str, float]] = {}
    for bs in sizes:
        reqs = fake_requests(engine, bs, context)
        rows = [r.row for r in reqs]
        res: dict[str, float] = {}
        if engine.spec is None:
            def decode() -> None:
                b = engine.runner.make_batch(ForwardMode.DECODE, [2] * bs, rows, [context] * bs, [1] * bs, stride=1)
                engine.runner.forward(b)

            res["decode_ms"] = timed(decode, iters)
        else:
            spec = engine.spec
            res["cycle_ms"] = timed(lambda: spec.step(reqs), iters)
            res["draft_ms"] = timed(lambda: spec.proposer.propose(reqs, spec.num_steps), iters)
            ndt = spec.ndt

            def verify() -> None:
                ids = torch.full((bs * ndt,), 2, dtype=torch.long, device=engine.device)
                b = engine.runner.make_batch(ForwardMode.TARGET_VERIFY, ids, rows, [context + ndt - 1] * bs, [ndt] * bs,
                                             logits="all", stride=ndt, capture_hidden=spec.target_capture)
                o = engine.runner.forward(b)
                verify.hidden = spec.target_hidden(o)  # type: ignore[attr-defined]

            res["verify_ms"] = timed(verify, iters)
            emitted = torch.full((bs, ndt), 2, dtype=torch.long, device=engine.device)
            acc = torch.full((bs,), ndt, dtype=torch.long, device=engine.device)
            hid = verify.hidden  # type: ignore[attr-defined]
            res["extend_ms"] = timed(lambda: spec.proposer.after_verify(reqs, [context] * bs, emitted, acc, hid), iters)
        for r in reqs:
            engine.allocator.free(r.row)  # type: ignore[arg-type]
            engine.req_pool.free(r.row)  # type: ignore[arg-type]
        out[str(bs)] = res
    return out


def run_model(name: str, make: Any, head: Path | None, sizes: list[int], context: int, iters: int, steps: int) -> dict[str, Any]:
    loaded = make()
    res: dict[str, Any] = {"weights_bytes": sum(p.numel() * p.element_size() for p in loaded.model.parameters())}
    for graphs in (False, True):
        for spec_on in (False, True):
            spec = SpeculativeConfig(method="eagle", draft_model=str(head), num_steps=steps) if spec_on else None
            cfg = EngineConfig(model=name, device=DEVICE, dtype="bfloat16" if DEVICE == "cuda" else "float32", progress=False,
                               disable_cuda_graph=not graphs, graph_emulate=graphs and DEVICE == "cpu",
                               cuda_graph_bs=sizes, max_total_tokens=max(sizes) * (context + 64) + 4096,
                               max_running_requests=max(sizes), speculative=spec)
            engine = Engine(cfg, loaded=loaded)
            key = f"{'spec' if spec_on else 'plain'}_{'graph' if graphs else 'eager'}"
            res[key] = measure(engine, sizes, context, iters)
            print(name, key, json.dumps(res[key]), flush=True)
            loaded.model.aux_layers = ()
            del engine
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smollm", default=None, help="path of the SmolLM2 GGUF (skip if absent)")
    ap.add_argument("--no-8b", action="store_true")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--peak-bw", type=float, default=3.01e12)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (emulated graphs)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    sizes = [1, 8, 32]
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    results: dict[str, Any] = {"gpu": gpu, "torch": torch.__version__, "context": args.context, "S": args.steps}
    tmp = Path(tempfile.mkdtemp())
    if args.smollm:
        from updraft.models.loader import load_checkpoint

        dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
        smol = load_checkpoint(args.smollm, dtype=dtype, device=DEVICE, progress=False)
        head = write_random_eagle(tmp / "smol-eagle", smol.config)
        results["smollm2"] = run_model(args.smollm, lambda: smol, head, sizes, args.context, args.iters, args.steps)
        del smol
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    if not args.no_8b:
        cfg = ModelConfig(**LLAMA8B)  # type: ignore[arg-type]
        head = write_random_eagle(tmp / "8b-eagle", cfg)
        results["llama8b"] = run_model("random-llama-3.1-8b", lambda: random_llama(cfg, torch.bfloat16), head, sizes, args.context, args.iters, args.steps)
    print(report(results, args.peak_bw))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


def report(results: dict[str, Any], peak_bw: float) -> str:
    lines = [f"GPU {results['gpu']}, torch {results['torch']}, context {results['context']}, S = {results['S']}", ""]
    lines.append("| model | bs | decode eager ms | decode graph ms | speedup | cycle eager ms | cycle graph ms | cycle / decode (graphs) | draft / verify / extend graph ms |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in ("smollm2", "llama8b"):
        if model not in results:
            continue
        r = results[model]
        for bs in ("1", "8", "32"):
            de, dg = r["plain_eager"][bs]["decode_ms"], r["plain_graph"][bs]["decode_ms"]
            ce, cg = r["spec_eager"][bs]["cycle_ms"], r["spec_graph"][bs]["cycle_ms"]
            sg = r["spec_graph"][bs]
            lines.append(f"| {model} | {bs} | {de:.3f} | {dg:.3f} | {de / dg:.1f}x | {ce:.3f} | {cg:.3f} | {cg / dg:.2f} | "
                         f"{sg['draft_ms']:.3f} / {sg['verify_ms']:.3f} / {sg['extend_ms']:.3f} |")
        kv = results["context"] * 2 * 2 * (32 * 8 * 128 if model == "llama8b" else 30 * 3 * 64)
        floor_ms = (r["weights_bytes"] + kv) / peak_bw * 1000
        lines.append(f"{model}: bs-1 decode floor {floor_ms:.3f} ms -> graphs reach {100 * floor_ms / r['plain_graph']['1']['decode_ms']:.0f}% of the memory floor")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
