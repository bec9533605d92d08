"""Does a batch split into parts on concurrent streams hide the forward's launch latency?

    python benchmarks/split_batch_probe.py --out DIR [--batch-sizes 8] [--parts 1,2,4] [--context 512]

SmolLM2's step is latency-bound (~3.5 us a launch, 183 launches, its weights read in ~0.09 ms of a
~0.69 ms bs-8 step), and a 48-row verify (bs 8, S = 5) costs ~1.2 bs-8 decode steps where its rows
are six times the decode's: each launch does more work at the same latency. Issue 12's bs-8 S = 5
cycle (1.430 plain steps, goal 1.25) would need the verify about as cheap as the decode step. One
lever not measured before: the requests split into ``k`` parts, each part's forward on a stream of
its own inside one graph (fork and join as graph edges), so one part's launches run while another's
wait. The bound: a part can run no faster than alone, so a split verify costs at least one part's
verify alone (``alone_ms``), and a whole S = 5 cycle at least one part's cycle (bs 4's cycle was
1.247 of its plain step, 0.886 ms = 1.276 bs-8 plain steps, on an H100 on 2026-12-07): two parts
cannot reach 1.25, four or eight might if the parts overlap well enough.

For each mode (DECODE, 6-token TARGET_VERIFY), batch size and part count, in alternating rounds,
each graph captured fresh: the back-to-back replay time of the split graph, of one part alone, its
kernel count and GPU-busy time (torch profiler). Each part is its own runner (KV pool, metadata) over
the one model, so the parts share the weights (and L2) and nothing else, and each part's token ids
are its own. Before timing, each split graph's logits are checked bit for bit against the same
parts run one after another (a race between the parts, or a part reading another's rows, would
show there). Random weights; the default path (fused layers, "auto").
The gate for building it into the engine: a split verify within ~1.08 of the bs-8 decode step
(the draft chain and extend take ~0.25 plain steps at any batch size). Writes ``split_batch.json``.
Measured on an H100 on 2026-12-07 (``benchmarks/results/2026-12-07-h100-split-batch/``): missed at every
part count (a split verify 2.2-2.6 bs-8 decode steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode_kernels as dk  # noqa: E402
from attention_bench import meta  # noqa: E402

from updraft.batch import ForwardBatch, ForwardMode  # noqa: E402
from updraft.ops import gemv  # noqa: E402
from updraft.runtime.model_runner import ModelRunner  # noqa: E402
from updraft.runtime.side_stream import SideStream  # noqa: E402

MODES = {"decode": ForwardMode.DECODE, "verify": ForwardMode.TARGET_VERIFY}


def part_batches(model: torch.nn.Module, mode: ForwardMode, context: int, bs: int, parts: int,
                 device: str = "cuda", backend: str = "triton") -> list[tuple[ModelRunner, ForwardBatch]]:
    """``parts`` (runner, batch) pairs of ``bs // parts`` requests each (the runner kept alive)."""
    if parts < 1 or bs % parts:
        raise ValueError(f"--parts: {parts} does not divide batch size {bs}")
    pairs = [dk.step_batch(model, mode, context, bs // parts, device=device, backend=backend) for _ in range(parts)]
    gen = torch.Generator().manual_seed(parts)
    vocab = model.config.vocab_size
    for _, batch in pairs:  # token ids of their own: parts that read each other's rows would show in the check
        batch.input_ids.copy_(torch.randint(0, vocab, batch.input_ids.shape, generator=gen))
    return pairs


def forward_parts(model: torch.nn.Module, batches: list[ForwardBatch], sides: list[SideStream]) -> list[torch.Tensor]:
    """Part 0 on the current stream, part i > 0 on ``sides[i - 1]`` (forked here), all joined."""
    outs = [model(batches[0]).logits]
    outs += [side.run(lambda b=b: model(b).logits) for side, b in zip(sides, batches[1:], strict=True)]
    for side in sides:
        side.join()
    return outs


def capture_split(model: torch.nn.Module, batches: list[ForwardBatch],
                  sides: list[SideStream]) -> tuple[torch.cuda.CUDAGraph, list[torch.Tensor]]:
    graph, outs = dk.capture_call(lambda: forward_parts(model, batches, sides))
    if gemv._semaphores.cache_info().currsize:
        # the argmax epilogue's ticket counter is one a device: concurrent parts would race on it
        raise RuntimeError("the forward ran the fused LM head's argmax (UPDRAFT_FUSED_LM_HEAD / UPDRAFT_OPS=triton): "
                           "its counter is shared, so parts cannot run concurrently")
    return graph, outs


def check_parts(model: torch.nn.Module, graph: torch.cuda.CUDAGraph, outs: list[torch.Tensor],
                batches: list[ForwardBatch]) -> bool:
    """The split graph's logits equal the parts' run one after another (same inputs, same KV)."""
    graph.replay()
    torch.cuda.synchronize()
    got = [o.clone() for o in outs]
    with torch.no_grad():
        want = [model(b).logits for b in batches]
    torch.cuda.synchronize()
    return all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def measure(model: torch.nn.Module, mode: str, bs: int, parts: int, context: int, sides: list[SideStream],
            check: bool) -> dict:
    pairs = part_batches(model, MODES[mode], context, bs, parts)
    batches = [b for _, b in pairs]
    graph, outs = capture_split(model, batches, sides[:parts - 1])
    row = dict(mode=mode, bs=bs, parts=parts, replay_ms=dk.replay_time(graph) * 1e3)
    kernels, busy, _, _ = dk.profile_replay(graph)
    row.update(kernels=kernels, busy_ms=busy / 1e3)
    if check:  # at one part: the graph against eager, the control for a mismatch at more
        row["same_as_serial"] = check_parts(model, graph, outs, batches)
    del graph, outs
    if parts > 1:  # one part alone: the split form's floor
        alone, _ = capture_split(model, batches[:1], [])
        row["alone_ms"] = dk.replay_time(alone) * 1e3
        del alone
    del pairs, batches
    torch.cuda.empty_cache()
    return row


def summarise(rows: list[dict]) -> list[dict]:
    """Medians over the rounds; ``over_decode``: against the unsplit decode step at the same bs."""
    keys = sorted({(r["mode"], r["bs"], r["parts"]) for r in rows}, key=lambda k: (k[1], k[0], k[2]))
    out = []
    for mode, bs, parts in keys:
        mine = [r for r in rows if (r["mode"], r["bs"], r["parts"]) == (mode, bs, parts)]
        s = dict(mode=mode, bs=bs, parts=parts, rounds=len(mine),
                 replay_ms=statistics.median(r["replay_ms"] for r in mine),
                 kernels=mine[0]["kernels"], busy_ms=statistics.median(r["busy_ms"] for r in mine))
        if "alone_ms" in mine[0]:
            s["alone_ms"] = statistics.median(r["alone_ms"] for r in mine)
        checked = [r["same_as_serial"] for r in mine if "same_as_serial" in r]  # the rounds that checked
        if checked:
            s["same_as_serial"] = all(checked)
        out.append(s)
    for s in out:
        base = [d for d in out if (d["mode"], d["bs"], d["parts"]) == ("decode", s["bs"], 1)]
        if base:
            s["over_decode"] = s["replay_ms"] / base[0]["replay_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="8")
    ap.add_argument("--parts", default="1,2,4", help="part counts (each dividing every batch size)")
    ap.add_argument("--modes", default="decode,verify")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    counts = [int(p) for p in args.parts.split(",")]
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"--modes: {bad} not among {sorted(MODES)}")
    if args.rounds < 1:
        ap.error(f"--rounds: expected at least 1, got {args.rounds}")
    if any(k < 1 or bs % k for bs in sizes for k in counts):
        ap.error(f"--parts: every count must divide every batch size ({counts} against {sizes})")
    torch.manual_seed(0)
    model = dk.random_model(dk.MODELS["smollm2"])
    sides = [SideStream(torch.device("cuda")) for _ in range(max(counts) - 1)]
    rows = []
    for rnd in range(args.rounds):  # alternating rounds: every form once a round
        for bs in sizes:
            for mode in modes:
                for k in counts:
                    row = measure(model, mode, bs, k, args.context, sides, check=rnd == 0)
                    rows.append(dict(row, round=rnd))
                    print(f"round {rnd} {mode} bs {bs} parts {k}: {row['replay_ms']:.4f} ms"
                          + (f" (one part alone {row['alone_ms']:.4f})" if "alone_ms" in row else ""), flush=True)
        summary = save(args.out, args.context, rows)  # each round kept, should a time limit cut the run
    cols = ["mode", "bs", "parts", "replay_ms", "alone_ms", "over_decode", "kernels", "busy_ms", "same_as_serial"]
    dk.show(f"SmolLM2 (random weights), {args.context} tokens: batches split into concurrent parts (medians of "
            f"{args.rounds} rounds)", [{c: s.get(c, "-") for c in cols} for s in summary], cols)


def save(out: Path, context: int, rows: list[dict]) -> list[dict]:
    """``split_batch.json`` with the rows so far and their summary (returned)."""
    summary = summarise(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "split_batch.json").write_text(json.dumps(
        dict(meta=meta(torch.device("cuda")), context=context, rows=rows, summary=summary), indent=1))
    return summary


if __name__ == "__main__":
    main()
