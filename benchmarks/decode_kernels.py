"""Issue 14 on the GPU: small-M fused kernels vs cuBLAS, and the decode step fused vs unfused.

    python benchmarks/decode_kernels.py --out benchmarks/results/DATE-h100-decode-kernels [--tune]

1. GEMMs (SmolLM2-135M and Llama-3.1-8B shapes: qkv, o, gate_up, down, lm_head at M = 1, 2, 6,
   8, 16; bf16): the fused kernel as the layer launches it (qkv / gate_up reading rows made ready
   for their norm, ``Prologue(normed=...)``; o / down adding the residual for the next norm,
   ``linear_add_norm``; RoPE + KV store for qkv, SiLU-mul for gate_up; lm_head with the final
   norm + residual prologue and the argmax) against
   the cuBLAS GEMM alone, each timed inside a CUDA graph of back-to-back launches that rotate over
   weight copies larger than L2; achieved weight bandwidth against --peak-bw (3.01 TB/s).
   ``--tune`` first sweeps the launch configs per (shape, M bucket) and writes
   ``$UPDRAFT_CACHE/gemv_configs.json`` (~1 s per candidate compile; a few minutes once).
   ``--hf-config config.json --models custom`` takes another model's shapes: tuned, its wide
   rows take the fused layers under the "auto" policy (``ops.FusedPolicy``).
2. Whole steps in CUDA graphs (random weights, --context tokens of KV, --batch-sizes requests):
   DECODE and a 6-token TARGET_VERIFY of both models, and a draft-step-shaped model (one decoder
   layer + a draft-vocabulary LM head); --variants of ``unfused`` (unfused layers), ``fused`` (the
   default), ``fused_merge_in_launch`` (the decode kernel merging its own KV splits, the default
   until 2026-11-26), ``fused_head`` (the fused LM head) and ``fused_rows64`` (the fused layers
   at every shape the kernels take, up to 64 token rows, whatever the "auto" policy says): time per replay, kernels per step and
   GPU-busy time (torch profiler), the weight+KV floor and its share.

Prints a short table per part; writes ``decode_kernels.json`` under --out.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from updraft import ops
from updraft.batch import ForwardBatch, ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models import fused as fused_mod
from updraft.models.config import ModelConfig, RopeScaling
from updraft.models.llama import LlamaForCausalLM
from updraft.ops import gemv, gemv_config
from updraft.ops.gemv import NormedRows, Prologue
from updraft.runtime.model_runner import ModelRunner

SMOLLM2 = ModelConfig(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                      num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
                      max_position_embeddings=8192, tie_word_embeddings=True)
LLAMA8B = ModelConfig(family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                      num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192), max_position_embeddings=8192)
DRAFTS = {"smollm2": replace(SMOLLM2, num_layers=1, vocab_size=8192, tie_word_embeddings=False),
          "llama8b": replace(LLAMA8B, num_layers=1, vocab_size=32000)}
MODELS = {"smollm2": SMOLLM2, "llama8b": LLAMA8B}
T = TypeVar("T")
M_VALUES = (1, 2, 6, 8, 16)
L2_BYTES = 50 * 2**20
DT = torch.bfloat16


def graph_time(fns: list[Callable[[], object]], replays: int = 20) -> float:
    """Seconds per call of ``fns`` (called round-robin, 3 rounds) captured in one CUDA graph."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    turn = itertools.cycle(fns)
    return gemv_config.graph_seconds(lambda: next(turn)(), 3 * len(fns), replays)


# ---- part 1: GEMMs -------------------------------------------------------------------------
def gemm_cases(cfg: ModelConfig) -> list[tuple[str, str, int, int]]:
    """(name, kind, N, K) as the fused layer launches them (``LlamaAttention.gemms``): N in the
    kind's units (gate_up: intermediate size); with q/k norm (Qwen3) the QKV GEMM is a plain one."""
    h, q, kv, i = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    return [("qkv", "linear" if cfg.qk_norm else "qkv", q + 2 * kv, h), ("o", "linear", h, q),
            ("gate_up", "gate_up", i, h), ("down", "linear", h, i), ("lm_head", "linear", cfg.vocab_size, h)]


class GemmBench:
    """Inputs and weight copies of one GEMM, and closures launching it fused or on cuBLAS."""

    def __init__(self, cfg: ModelConfig, name: str, kind: str, n: int, k: int, m: int) -> None:
        self.cfg, self.name, self.kind, self.n, self.k, self.m = cfg, name, kind, n, k, m
        rows = 2 * n if kind == "gate_up" else n
        self.bytes = rows * k * 2
        copies = max(1, min(8, math.ceil(2 * L2_BYTES / self.bytes)))
        self.w = [torch.randn(rows, k, device="cuda", dtype=DT) * 0.02 for _ in range(copies)]
        self.x = torch.randn(m, k, device="cuda", dtype=DT)
        self.res = torch.randn(m, k, device="cuda", dtype=DT)
        self.nw = torch.ones(k, device="cuda", dtype=DT)
        d = cfg.head_dim
        self.pools = (torch.zeros(4096, cfg.num_kv_heads, d, device="cuda", dtype=DT),
                      torch.zeros(4096, cfg.num_kv_heads, d, device="cuda", dtype=DT))
        self.loc = torch.arange(m, device="cuda") + 7
        self.pos = torch.arange(m, device="cuda") + 100
        self.cos_sin = torch.randn(8192, d, device="cuda", dtype=DT)
        # as the layer runs them: QKV and gate/up read the rows o_proj / down left ready for their
        # norm (``NormedRows``: 36 partial sums of squares, SmolLM2's o_proj tiles), and o_proj /
        # down add their output to the residual stream for the next norm
        self.normed = NormedRows(self.x, self.x, torch.rand(m, 36, device="cuda") * k, 1e-5)
        self.res_n = torch.randn(m, n, device="cuda", dtype=DT)
        self.nw_n = torch.ones(n, device="cuda", dtype=DT)

    def fused(self, w: torch.Tensor, cfg: gemv_config.GemvConfig | None = None) -> Callable[[], object]:
        pro = Prologue(normed=self.normed)
        c = self.cfg
        if self.name == "qkv" and self.kind == "linear":  # q/k norm: the norm-prologue QKV GEMM
            return lambda: gemv.linear(self.x, w, None, pro, config=cfg)
        if self.kind == "qkv":
            return lambda: gemv.qkv_rope_store(self.x, w, None, pro, num_heads=c.num_heads, num_kv_heads=c.num_kv_heads,
                                               head_dim=c.head_dim, k_pool=self.pools[0], v_pool=self.pools[1],
                                               loc=self.loc, positions=self.pos, cos_sin=self.cos_sin, config=cfg)
        if self.kind == "gate_up":
            return lambda: gemv.gate_up_silu(self.x, w, pro, config=cfg)
        if self.name == "lm_head":
            return lambda: gemv.linear(self.x, w, None, Prologue(self.nw, 1e-5, self.res), out_dtype=torch.float32,
                                       argmax=True, config=cfg)
        return lambda: gemv.linear_add_norm(self.x, w, self.res_n, self.nw_n, 1e-5, config=cfg)

    def cublas(self, w: torch.Tensor) -> Callable[[], object]:
        return lambda: torch.nn.functional.linear(self.x, w)

    def rotating(self, cfg: gemv_config.GemvConfig | None = None) -> Callable[[], object]:
        """One fused launch with ``cfg`` a call, each on the next weight copy (from memory, not L2)."""
        fns = [self.fused(w, cfg) for w in self.w]
        calls = itertools.count()
        return lambda: fns[next(calls) % len(fns)]()

    def tune(self, block_n: int = 0) -> tuple[gemv_config.GemvConfig, float]:
        """Sweep this GEMM's launch configs (``block_n`` > 0: only tiles that wide) into the cache."""
        kind = "linear" if self.name == "lm_head" else self.kind  # the LM head's argmax is timed with it
        return gemv_config.tune(kind, self.n, self.k, gemv_config.m_bucket(self.m), DT, torch.device("cuda"),
                                self.rotating, self.cfg.head_dim if kind == "qkv" else 0,
                                keep=(lambda c: c.block_n == block_n) if block_n else None)


def bench_gemms(peak: float, tune: bool, models: list[str], gemms: list[str] | None,
                m_values: tuple[int, ...], tune_block_n: int = 0) -> list[dict[str, Any]]:
    rows = []
    for model in models:
        cfg = MODELS[model] if model in MODELS else DRAFTS[model.removesuffix("-draft")]
        for name, kind, n, k in gemm_cases(cfg):
            if gemms is not None and name not in gemms:
                continue
            for m in m_values:
                if name == "lm_head" and m > gemv.ARGMAX_MAX_M:  # the argmax epilogue's limit
                    continue
                b = GemmBench(cfg, name, kind, n, k, m)
                tuned = b.tune(tune_block_n) if tune else None
                t_f = graph_time([b.fused(w) for w in b.w])
                t_c = graph_time([b.cublas(w) for w in b.w])
                used = gemv_config.lookup(kind, n, k, m, DT, torch.device("cuda"), cfg.head_dim if kind == "qkv" else 0)
                rows.append(dict(model=model, gemm=name, m=m, n=n, k=k, weight_mb=b.bytes / 2**20, fused_us=t_f * 1e6,
                                 cublas_us=t_c * 1e6, fused_bw=b.bytes / t_f / peak, cublas_bw=b.bytes / t_c / peak,
                                 config=str(used), tuned=tuned is not None))
                del b
            torch.cuda.empty_cache()
    return rows


# ---- part 2: whole steps -------------------------------------------------------------------
def random_model(cfg: ModelConfig) -> LlamaForCausalLM:
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype=DT).to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
    model.post_load(cfg.max_position_embeddings)
    return model.eval()


def replay_time(graph: torch.cuda.CUDAGraph, replays: int = 30) -> float:
    """Seconds per replay, back to back (the host enqueues faster than a step runs)."""
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / replays


def profile_replay(graph: torch.cuda.CUDAGraph) -> tuple[int, float, dict[str, int], dict[str, float]]:
    """(kernels, GPU-busy microseconds, launches per kernel name, microseconds per kernel name) of
    one replay, from the torch profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]

    def dur(e: Any) -> float:
        return float(getattr(e, "device_time", 0.0) or getattr(e, "cuda_time", 0.0))

    names = Counter(e.name[:60] for e in kernels)
    times: Counter[str] = Counter()
    for e in kernels:
        times[e.name[:60]] += dur(e)
    return len(kernels), sum(dur(e) for e in kernels), dict(names.most_common()), {
        k: round(v, 1) for k, v in times.most_common()}


def step_batch(model: torch.nn.Module, mode: ForwardMode, context: int, bs: int,
               merge_in_kernel: bool = False, device: str = "cuda",
               backend: str = "triton") -> tuple[ModelRunner, ForwardBatch]:
    """A runner on ``backend`` and one DECODE (or 6-token TARGET_VERIFY) batch of ``bs`` requests
    at ``context`` tokens, its metadata built (buffers allocated outside any capture)."""
    pool = ReqToTokenPool(bs + 1, context + 64, device)
    pages = bs * (context + 64)
    alloc = PagedAllocator(pool, pages, 1)
    runner = ModelRunner(model, pool, pages, 1, backend)
    runner.backend.merge_in_kernel = merge_in_kernel
    rows = [pool.alloc() for _ in range(bs)]
    assert all(r is not None and alloc.ensure(r, context + 8) for r in rows)
    width = 6 if mode == ForwardMode.TARGET_VERIFY else 1
    batch = runner.make_batch(mode, [1] * (width * bs), rows, [context + width] * bs, [width] * bs, stride=width,
                              logits="all" if width > 1 else "last")
    batch.attn_backend = runner.backend
    runner.backend.init_forward_metadata(batch)
    return runner, batch


def capture_call(fn: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
    """Two warm-up calls (compiles, the argmax counter), then one call captured, and its result."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def capture_graph(model: torch.nn.Module, batch: ForwardBatch) -> torch.cuda.CUDAGraph:
    """Two warm-up forwards, then one forward captured."""
    return capture_call(lambda: model(batch))[0]


def step_variant(model: LlamaForCausalLM, mode: ForwardMode, context: int, variant: str, bs: int = 1) -> dict[str, Any]:
    cfg = model.config
    width = 6 if mode == ForwardMode.TARGET_VERIFY else 1
    runner, batch = step_batch(model, mode, context, bs, merge_in_kernel=variant == "fused_merge_in_launch")
    head_flag = fused_mod.FUSED_LM_HEAD
    fused_mod.FUSED_LM_HEAD = variant == "fused_head"  # the fused LM head (final norm + argmax)
    policy = ops.EVERYWHERE if variant == "fused_rows64" else ops.fused_policy()
    try:
        with ops.use_fused_layers(variant.startswith("fused")), ops.use_fused_policy(policy):
            graph = capture_graph(model, batch)
    finally:
        fused_mod.FUSED_LM_HEAD = head_flag
    t = replay_time(graph)
    kernels, busy, names, times = profile_replay(graph)
    # tied embeddings are one parameter, read once (by the LM head); an untied embedding table is
    # only gathered from (a row per token), so it is not part of what a step must read
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    embed = model.model.embed_tokens.weight
    if model.lm_head_weight is not embed:
        weights -= embed.numel() * embed.element_size()
    kv = cfg.kv_bytes_per_token(DT) * (context + width) * bs
    floor = (weights + kv) / PEAK
    del graph, runner
    return dict(mode=mode.name, variant=variant, bs=bs, ms=t * 1e3, kernels=kernels, busy_ms=busy / 1e3,
                floor_ms=floor * 1e3, of_floor=floor / t, kernel_names=names,
                kernel_us=times)


PEAK = 3.01e12


VARIANTS = ("unfused", "fused", "fused_merge_in_launch", "fused_head", "fused_rows64")


def bench_steps(context: int, models: list[str], batch_sizes: list[int], variants: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name, cfg in [*((k, MODELS[k]) for k in models), *((f"{k}-draft", DRAFTS[k]) for k in models)]:
        model = random_model(cfg)
        modes = [ForwardMode.DECODE] if name.endswith("draft") else [ForwardMode.DECODE, ForwardMode.TARGET_VERIFY]
        for bs, mode, variant in itertools.product(batch_sizes, modes, variants):
            rows.append(dict(model=name, context=context, **step_variant(model, mode, context, variant, bs)))
        del model
        torch.cuda.empty_cache()
    return rows


def show(title: str, rows: list[dict[str, Any]], cols: list[str]) -> None:
    print(f"\n{title}")
    print("  ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>12.3f}" if isinstance(r[c], float) else f"{str(r[c]):>12}" for c in cols))


def main() -> None:
    global PEAK
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tune", action="store_true", help="sweep launch configs first and write the cache file")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--peak-bw", type=float, default=3.01e12, help="bytes/s the floor is computed against")
    p.add_argument("--tune-block-n", type=int, default=0,
                   help="with --tune: sweep only the candidates of this many columns a program (0: all)")
    p.add_argument("--skip-gemms", action="store_true")
    p.add_argument("--skip-steps", action="store_true")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)} (and custom)")
    p.add_argument("--hf-config", type=Path, default=None,
                   help="a Hugging Face config.json: its shapes as model 'custom' (e.g. --models custom --tune --skip-steps "
                        "to tune another model's GEMMs, so the fused layers' policy takes its wide rows)")
    p.add_argument("--gemms", default=None, help="part 1: only these GEMMs (qkv, o, gate_up, down, lm_head)")
    p.add_argument("--m-values", default=",".join(map(str, M_VALUES)), help="part 1: token rows")
    p.add_argument("--batch-sizes", default="1", help="part 2: requests per step (a verify has 6 rows each)")
    p.add_argument("--variants", default=",".join(VARIANTS[:4]), help=f"part 2: of {', '.join(VARIANTS)}")
    args = p.parse_args()
    models = args.models.split(",")
    if args.hf_config is not None:
        custom = ModelConfig.from_hf(json.loads(args.hf_config.read_text()))
        MODELS["custom"] = custom
        DRAFTS["custom"] = replace(custom, num_layers=1, vocab_size=min(custom.vocab_size, 32000),
                                   tie_word_embeddings=False)
    # part 1 also takes a model's draft shape ("smollm2-draft": its draft-vocabulary LM head)
    unknown = [m for m in models if m not in MODELS and not (args.skip_steps and m.removesuffix("-draft") in DRAFTS)]
    if unknown:
        p.error(f"--models {','.join(unknown)}: expected {', '.join(MODELS)}"
                + ("" if args.hf_config else " (custom needs --hf-config)") + " (NAME-draft with --skip-steps)")
    PEAK = args.peak_bw
    torch.manual_seed(0)
    result: dict[str, Any] = dict(device=torch.cuda.get_device_name(), peak_bw=PEAK, context=args.context,
                                  cache=str(gemv_config.cache_path()))
    if not args.skip_gemms:
        result["gemms"] = bench_gemms(PEAK, args.tune, models, args.gemms.split(",") if args.gemms else None,
                                      tuple(int(v) for v in args.m_values.split(",")), args.tune_block_n)
        show("GEMMs (bf16, CUDA graphs; bw = share of peak)", result["gemms"],
             ["model", "gemm", "m", "fused_us", "cublas_us", "fused_bw", "cublas_bw"])
    if not args.skip_steps:
        result["steps"] = bench_steps(args.context, models, [int(b) for b in args.batch_sizes.split(",")],
                                      args.variants.split(","))
        show(f"steps at {args.context} tokens of context (CUDA graphs)", result["steps"],
             ["model", "bs", "mode", "variant", "ms", "kernels", "busy_ms", "floor_ms", "of_floor"])
        print("\nmicroseconds per kernel name (the 6 largest) per step")
        for r in result["steps"]:
            top = ", ".join(f"{name[:34]} {us:.0f} x{r['kernel_names'][name]}" for name, us in list(r["kernel_us"].items())[:6])
            print(f"  {r['model']} bs {r['bs']} {r['mode']} {r['variant']}: {top}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_kernels.json").write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.out / 'decode_kernels.json'}")


if __name__ == "__main__":
    main()
