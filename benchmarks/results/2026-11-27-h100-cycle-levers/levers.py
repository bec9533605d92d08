"""Cycle-only levers, timed in place (issue 12: the S = 5 cycle in plain steps).

    python levers.py OUT [--reps 2] [--only a,b]

One random-weight SmolLM2 plain engine and one speculative engine (builtin:smollm2, S = 5, CUDA
graphs at bs 1 and 8) are built once. Each variant is a patch applied while both engines' graphs
are recaptured; then the plain step and the greedy cycle are timed at bs 1 and 8 (median device
time of 20 replays). Variants run in turn, ``--reps`` rounds, so machine drift hits all alike.

Variants (each a lever the last notes left open):
- ``verify_waves_{1,4}``: the 6-token verify's KV splits at 1 / 4 waves (shipped 2);
- ``split_waves_{2,8}``: decode-kernel splits (the plain step and the chain) at 2 / 8 waves (4);
- ``lm_gemv``: the draft LM head (8,192 x 576) on the small-M GEMM instead of cuBLAS, with the
  config the isolated sweep picks (tuned here first, scratch cache);
- ``fc_gemv``: the EAGLE-3 fc (576 x 1,728) of the draft extend on the small-M GEMM, tuned alike
  at 6 rows (bs 1; the heuristic at 48);
- ``both``: lm_gemv + fc_gemv.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("UPDRAFT_CACHE", tempfile.mkdtemp(prefix="levers_"))
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from spec_iteration import fake_requests, fused_ms, head_method, smollm_engine_config  # noqa: E402

from updraft.attention.triton_backend import TritonBackend  # noqa: E402
from updraft.models.eagle import Eagle3Head  # noqa: E402
from updraft.ops import gemv, gemv_config  # noqa: E402

DT = torch.bfloat16
DEV = torch.device("cuda")


@contextlib.contextmanager
def attr(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def tune_isolated(n: int, k: int, m: int) -> tuple[str, float, float]:
    """Tune ``linear`` n x k at m rows in a CUDA graph of back-to-back launches (weights rotated
    past L2), store the winner in the scratch cache; (config, its us, cuBLAS us)."""
    copies = max(1, min(8, -(-2 * 50 * 2**20 // (n * k * 2))))
    ws = [torch.randn(n, k, device=DEV, dtype=DT) * 0.02 for _ in range(copies)]
    x = torch.randn(m, k, device=DEV, dtype=DT)
    it = {"i": 0}

    def run(cfg: gemv_config.GemvConfig) -> Callable[[], object]:
        def f() -> object:
            it["i"] = (it["i"] + 1) % copies
            return gemv.linear(x, ws[it["i"]], config=cfg)
        return f

    best, secs = gemv_config.tune("linear", n, k, gemv_config.m_bucket(m), DT, DEV, run)

    def cub() -> object:
        it["i"] = (it["i"] + 1) % copies
        return torch.nn.functional.linear(x, ws[it["i"]])

    cub()
    return str(best), secs * 1e6, gemv_config.graph_seconds(cub, 24) * 1e6


@contextlib.contextmanager
def lm_gemv(head: Eagle3Head) -> Iterator[None]:
    """Chain steps' LM head (``_logits``) and the first draft's norm + LM head
    (``logits_from_feature``: the norm as the GEMM's prologue, one launch instead of two)."""
    orig, orig_ff = Eagle3Head._logits, Eagle3Head.logits_from_feature

    def logits(self: Eagle3Head, rows: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        if rows.is_cuda and 1 <= rows.shape[0] <= 16 and gemv.supported(rows, self.lm_head.weight):
            return gemv.linear(rows, self.lm_head.weight, out_dtype=torch.float32 if fp32 else None)[0]
        return orig(self, rows, fp32)

    def from_feature(self: Eagle3Head, feat: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        pro = gemv.Prologue(norm_weight=self.norm.weight, eps=self.norm.eps)
        if feat.is_cuda and 1 <= feat.shape[0] <= 16 and gemv.supported(feat, self.lm_head.weight, pro):
            return gemv.linear(feat, self.lm_head.weight, None, pro,
                               out_dtype=torch.float32 if fp32 else None)[0]
        return orig_ff(self, feat, fp32)

    with attr(Eagle3Head, "_logits", logits), attr(Eagle3Head, "logits_from_feature", from_feature):
        yield


def fc_gemv(head: Eagle3Head) -> contextlib.AbstractContextManager[None]:
    """The draft extend's fc (6 / 48 rows of the three captured features) on the small-M GEMM."""
    fc = head.fc
    orig = fc.forward

    def fwd(x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda and x.dim() == 2 and 1 <= x.shape[0] <= 64 and gemv.supported(x, fc.weight):
            return gemv.linear(x, fc.weight, fc.bias)[0]
        return orig(x)

    return attr(fc, "forward", fwd)


@contextlib.contextmanager
def both(head: Eagle3Head) -> Iterator[None]:
    with lm_gemv(head), fc_gemv(head):
        yield


VARIANTS: dict[str, Callable[[Eagle3Head], contextlib.AbstractContextManager[None]]] = {
    "base": lambda h: contextlib.nullcontext(),
    "verify_waves_1": lambda h: attr(TritonBackend, "verify_split_waves", 1),
    "verify_waves_4": lambda h: attr(TritonBackend, "verify_split_waves", 4),
    "split_waves_2": lambda h: attr(TritonBackend, "split_waves", 2),
    "split_waves_8": lambda h: attr(TritonBackend, "split_waves", 8),
    "lm_gemv": lm_gemv,
    "fc_gemv": fc_gemv,
    "both": both,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    from updraft.bench.models import random_model
    from updraft.config import SpeculativeConfig
    from updraft.engine.engine import Engine

    tuned = {}
    for name, n, k, m in (("lm_head", 8192, 576, 1), ("lm_head", 8192, 576, 8), ("fc", 576, 1728, 6)):
        cfg, us, cub = tune_isolated(n, k, m)
        tuned[f"{name}_m{m}"] = dict(config=cfg, gemv_us=us, cublas_us=cub)
        print(f"isolated {name} {n}x{k} m={m}: gemv {us:.2f} us ({cfg}), cuBLAS {cub:.2f} us", flush=True)

    loaded = random_model("random:smollm2-135m", DT, "cuda")
    sizes = [1, 8]
    # both batch sizes' requests stay parked: room for 9 rows
    base = dataclasses.replace(smollm_engine_config("random", sizes, args.context), max_running_requests=16,
                               max_total_tokens=16 * (args.context + 64) + 4096)
    plain = Engine(base, loaded=loaded)
    head_name = "builtin:smollm2"
    spec_cfg = SpeculativeConfig(method=head_method(head_name), draft_model=head_name, num_steps=5, adaptive=False)
    spec = Engine(dataclasses.replace(base, speculative=spec_cfg), loaded=loaded)
    assert spec.draft is not None and isinstance(spec.draft.model, Eagle3Head)
    head = spec.draft.model
    reqs = {(e, bs): fake_requests(eng, bs, args.context) for e, eng in (("plain", plain), ("spec", spec)) for bs in sizes}
    names = [v for v in VARIANTS if not args.only or v in args.only.split(",") or v == "base"]
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in names}
    for rep in range(args.reps):
        for v in names:
            with VARIANTS[v](head):
                for eng in (plain, spec):
                    eng.driver.fused.graphs.clear()
                row = {}
                for bs in sizes:
                    row[f"plain_bs{bs}"] = fused_ms(plain, reqs[("plain", bs)], args.iters)
                    row[f"cycle_bs{bs}"] = fused_ms(spec, reqs[("spec", bs)], args.iters, steps=5)
            for eng in (plain, spec):
                eng.driver.fused.graphs.clear()
            runs[v].append(row)
            print(f"rep {rep} {v:16s} " + "  ".join(f"{k} {x:.4f}" for k, x in row.items()), flush=True)
    table = {}
    print(f"\n{'variant':16s} {'plain1':>8s} {'cycle1':>8s} {'steps1':>7s} {'plain8':>8s} {'cycle8':>8s} {'steps8':>7s}")
    for v, rows in runs.items():
        med = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        med["steps_bs1"] = med["cycle_bs1"] / med["plain_bs1"]
        med["steps_bs8"] = med["cycle_bs8"] / med["plain_bs8"]
        table[v] = med
        print(f"{v:16s} {med['plain_bs1']:8.4f} {med['cycle_bs1']:8.4f} {med['steps_bs1']:7.3f} "
              f"{med['plain_bs8']:8.4f} {med['cycle_bs8']:8.4f} {med['steps_bs8']:7.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "levers.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), context=args.context, iters=args.iters, isolated=tuned,
        mean=table, runs=runs), indent=1))


if __name__ == "__main__":
    main()
