"""Training throughput of a draft head: the trainer's own optimizer step (``updraft.train.stepper``)
timed on synthetic teacher-forced data at a real target's shape, and a profile of a few steps.

Nothing is generated: sequences of random tokens with random target features (the target's random
weights at the named shape give the labels), lengths drawn between ``--min-len`` and ``--max-len``,
batched by ``epoch_batches`` as a run batches them. The numbers are speed only: milliseconds per
optimizer step, training positions per second (the trainer's ``train_tokens_per_s``), peak memory,
and with ``--profile N`` the kernels of N steps by GPU time and the host time they leave idle.

    python benchmarks/train_step.py --target random:smollm2-135m --steps 40 --profile 3 --out DIR
    python benchmarks/train_step.py --target random:tiny --device cpu --steps 3 --batch-tokens 512 --seqs 40 \
        --min-len 16 --max-len 64 --draft-vocab 256  # the CPU check
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from updraft.bench.models import random_model
from updraft.train.config import TrainConfig
from updraft.train.data import DistillData, Prefetcher, TrainBatch, epoch_batches
from updraft.train.heads import new_head
from updraft.train.losses import HostMetrics
from updraft.train.stepper import Stepper


def synthetic_data(vocab: int, hidden: int, seqs: int, lengths: tuple[int, int], dist: str, dtype: torch.dtype,
                   device: torch.device, seed: int) -> DistillData:
    """``seqs`` sequences of random tokens, features and argmax labels; a third of each is prompt
    (the share of generated tokens in the 2026-12-04 run L's data: 69%). ``dist``: lognormal
    lengths (mean ~340 tokens, as run L's 14.4M tokens over 42,645 sequences) or uniform ones."""
    g = torch.Generator().manual_seed(seed)
    if dist == "lognormal":
        lens = torch.exp(5.7 + 0.5 * torch.randn(seqs, generator=g)).long().clamp(lengths[0], lengths[1])
    else:
        lens = torch.randint(lengths[0], lengths[1] + 1, (seqs,), generator=g)
    offsets = torch.zeros(seqs + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lens, 0)
    n = int(offsets[-1])
    return DistillData(
        tokens=torch.randint(0, vocab, (n,), generator=g).to(device),
        offsets=offsets,
        prompt_lens=(lens * 31 // 100).clamp(min=2),
        hidden=torch.randn(n, hidden, generator=g).to(device=device, dtype=dtype),
        argmax=torch.randint(0, vocab, (n,), generator=g).to(device),
        aux=torch.randn(n, 3 * hidden, generator=g).to(device=device, dtype=dtype),
        aux_layers=(1, 2, 3),
    )


def kernel_profile(stepper: Stepper, batches: list[TrainBatch], steps: int) -> dict[str, Any]:
    """Kernels of ``steps`` optimizer steps: count, GPU-busy time, the top names by GPU time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            stepper.step(batches[i % len(batches)], 1e-4, i)
        torch.cuda.synchronize()
    wall = time.perf_counter() - t
    kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]

    def dur(e: Any) -> float:
        return float(getattr(e, "device_time", 0.0) or getattr(e, "cuda_time", 0.0))

    times: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for e in kernels:
        times[e.name[:90]] += dur(e)
        counts[e.name[:90]] += 1
    busy = sum(times.values())
    return {
        "steps": steps, "kernels_per_step": len(kernels) / steps, "gpu_busy_ms_per_step": busy / 1000 / steps,
        "wall_ms_per_step_profiled": wall * 1000 / steps,
        "top": [{"name": k, "ms_per_step": round(v / 1000 / steps, 3), "share": round(v / max(busy, 1e-9), 4),
                 "calls_per_step": counts[k] / steps} for k, v in times.most_common(25)],
    }


def timed(stepper: Stepper, batches: Iterable[TrainBatch], first: int = 0) -> tuple[float, float]:
    """(seconds, training positions) of one step on each of ``batches`` (step numbers from
    ``first``), each step's metrics read once the next is queued, as the trainer reads them. A
    generator that builds each batch when asked times the building too, as a run pays it."""
    if stepper.device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    positions = 0.0
    unread: HostMetrics | None = None
    for i, batch in enumerate(batches, first):
        launched = stepper.launch(batch, 1e-4, i)
        if unread is not None:
            unread.metrics()
        unread, positions = launched, positions + launched.positions
    if stepper.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, positions


def measure(stepper: Stepper, loader: Prefetcher, data: DistillData, batch_tokens: int, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up on ``--shapes`` batches of ``batch_tokens`` (every one at least once), time
    ``--steps`` steps cycling over them, then profile ``--profile`` steps (CUDA)."""
    device = stepper.device
    order = epoch_batches(data.lengths.tolist(), batch_tokens, 0, 0)
    batches = [loader.get(order[i]) for i in range(min(args.shapes, len(order)))]
    fresh = [loader.get(b) for b in order[len(batches) : len(batches) + args.cold]]

    def run(first: int, count: int, pool: list[TrainBatch]) -> tuple[float, float]:
        return timed(stepper, (pool[i % len(pool)] for i in range(first, first + count)), first)

    t = time.perf_counter()
    run(0, max(args.warmup, len(batches)), batches)  # every shape once at least (and the compilation, if any)
    warm_s = time.perf_counter() - t
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    wall, positions = run(args.warmup, args.steps, batches)
    seen = {tuple(b.ids.shape) for b in batches}
    cold_wall = run(0, len(fresh), fresh)[0] if fresh else 0.0
    loop = order[len(batches) + len(fresh) : len(batches) + len(fresh) + args.loop]
    # each built inside the timed loop, the next batch named, as the trainer asks its Prefetcher
    built = (loader.get(seqs, loop[i + 1] if i + 1 < len(loop) else None) for i, seqs in enumerate(loop))
    loop_wall = timed(stepper, built)[0] if loop else 0.0
    result: dict[str, Any] = {
        "batch_tokens": batch_tokens, "pad": args.pad, "warmup_s": warm_s, "shapes": [list(b.ids.shape) for b in batches],
        "ms_per_step": wall * 1000 / args.steps, "positions_per_step": positions / args.steps,
        "positions_per_s": positions / wall,
        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "cold_steps": len(fresh), "cold_new_shapes": len({tuple(b.ids.shape) for b in fresh} - seen),
        "cold_ms_per_step": cold_wall * 1000 / len(fresh) if fresh else None,
        "loop_steps": len(loop), "loop_ms_per_step": loop_wall * 1000 / len(loop) if loop else None,
    }
    print(f"{args.target} {stepper.precision} ttt {args.ttt_steps}{' compiled' if args.compile else ''} sdpa {args.sdpa} batch {batch_tokens} "
          f"pad {args.pad}: warm-up {warm_s:.1f} s, {result['ms_per_step']:.1f} ms/step, "
          f"{result['positions_per_step']:.0f} positions/step, {result['positions_per_s'] / 1e3:.1f}k positions/s"
          + (f", peak {result['peak_gib']:.1f} GiB" if result["peak_gib"] is not None else "")
          + (f"; {len(fresh)} unseen batches ({result['cold_new_shapes']} new shapes) {result['cold_ms_per_step']:.1f} ms/step"
             if fresh else "")
          + (f"; {len(loop)} more built in the loop {result['loop_ms_per_step']:.1f} ms/step" if loop else ""))
    if args.profile and device.type == "cuda":
        prof = kernel_profile(stepper, batches, args.profile)
        result["profile"] = prof
        print(f"profiled {prof['steps']} steps: {prof['kernels_per_step']:.0f} kernels/step, GPU busy "
              f"{prof['gpu_busy_ms_per_step']:.1f} of {prof['wall_ms_per_step_profiled']:.1f} ms/step")
        for row in prof["top"]:
            print(f"  {row['ms_per_step']:7.3f} ms {row['share'] * 100:5.1f}% x{row['calls_per_step']:<5.0f} {row['name']}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="random:smollm2-135m", help="random:<shape> (bench/models.py)")
    ap.add_argument("--method", default="eagle3", choices=["eagle3"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-tokens", default="16384",
                    help="padded tokens per batch (the trainer's --batch-tokens); a comma list is measured in order, "
                         "in one process (a compiled forward compiles once)")
    ap.add_argument("--ttt-steps", type=int, default=5)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--seqs", type=int, default=1200)
    ap.add_argument("--shapes", type=int, default=8,
                    help="distinct batches, each stepped during the warm-up and cycled in the timed steps (a run's "
                         "steady state: its batch shapes recur; a new shape costs allocator growth and kernel choices)")
    ap.add_argument("--compile", action="store_true", help="TrainConfig.compile: the unrolled forward torch.compile'd")
    ap.add_argument("--sdpa", default=TrainConfig().sdpa, help="TrainConfig.sdpa: auto or no-cudnn (attention kernels)")
    ap.add_argument("--pad", type=int, default=TrainConfig().batch_pad, help="TrainConfig.batch_pad: batch lengths padded to a multiple")
    ap.add_argument("--cold", type=int, default=0,
                    help="then time this many batches not met before, once each (a fresh process's first steps)")
    ap.add_argument("--loop", type=int, default=0,
                    help="then time this many further batches built inside the loop, as the trainer builds them")
    ap.add_argument("--lengths", default="lognormal", choices=["lognormal", "uniform"],
                    help="lognormal: exp(N(5.7, 0.5)) in [--min-len, --max-len], mean ~340 as run L's data; uniform: in between")
    ap.add_argument("--min-len", type=int, default=20)
    ap.add_argument("--max-len", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (allocator, kernel choices)")
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--profile", type=int, default=0, help="then profile this many steps (CUDA only)")
    ap.add_argument("--out", type=Path, default=None, help="folder for train_step.json")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    precision = "bf16" if device.type == "cuda" else "fp32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    loaded = random_model(args.target, dtype, device)
    target = loaded.model
    target.requires_grad_(False)
    cfg = TrainConfig(target=args.target, out="unused", ttt_steps=args.ttt_steps, device=args.device, compile=args.compile,
                      sdpa=args.sdpa, batch_pad=args.pad).validate()
    vocab = loaded.config.vocab_size
    draft_ids = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[: min(args.draft_vocab, vocab)].sort().values
    head, _ = new_head(args.method, target, draft_ids=draft_ids, aux_layers=(1, 2, 3), device=device)
    stepper = Stepper.for_head(cfg, head, device, precision)
    data = synthetic_data(vocab, loaded.config.hidden_size, args.seqs, (args.min_len, args.max_len), args.lengths, dtype,
                          device, 0)
    loader = Prefetcher(data, device, eagle3=True, pad_to=cfg.batch_pad)
    result: dict[str, Any] = {
        "target": args.target, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "precision": precision, "compile": args.compile, "sdpa": args.sdpa, "ttt_steps": args.ttt_steps,
        "draft_vocab": int(draft_ids.numel()), "lengths": [args.lengths, args.min_len, args.max_len], "steps": args.steps,
        "runs": [measure(stepper, loader, data, int(b), args) for b in args.batch_tokens.split(",")],
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "train_step.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
