"""Issue 12's bs-8 S = 5 cycle with its requests split into parts whose iterations run concurrently.

    python benchmarks/split_cycle_probe.py --out DIR [--bs 8] [--parts 2,4,8] [--context 512]

``split_batch_probe.py`` asks whether concurrent parts hide the forward's launch latency; this asks
it of the whole speculative iteration (draft chain, verify, acceptance, draft extend), the figure
the goal reads (cycle / plain step <= 1.25 at bs 8). Each part is an engine of its own (its KV pool,
row state, graphs and graph memory pool) over the one random-weight SmolLM2 (the engines share the
target's weights, as ``tune_in_cycle.py``'s plain and speculative engines do; each loads its own
copy of the draft head), holding ``bs / k`` parked requests at ``--context`` tokens. A timed launch:
every part's rows admitted, then a sleep kernel on the main stream while the host enqueues each
part's iteration on a stream of its own behind the sleep's end, so the interval timed (from the
sleep's end to the last part's end) holds no host time; the unsplit cycle and the plain bs-8 step
are timed through the same gate, in alternating rounds. ``host_over_gate`` counts the launches
whose enqueueing outlasted the gate (their time then includes host time: raise ``--gate-cycles``).

What an engine form would change, and this probe does not: the parts' kernels captured in one
graph (here each part replays its own graph, so the parts start a few microseconds apart), and
one copy of the draft head. On CPU (``--device cpu``, a dry run of the same calls: no streams,
no gate, host time) it only checks that the parts launch and return. Writes ``split_cycle.json``.
Measured on an H100 on 2026-12-07 (``benchmarks/results/2026-12-07-h100-split-batch/``): 2 / 4 / 8 parts
1.53 / 1.87 / 2.40 plain steps against 1.42 unsplit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_phases import fake_requests  # noqa: E402
from spec_iteration import head_method, smollm_engine_config  # noqa: E402

from updraft.bench.models import random_model  # noqa: E402
from updraft.config import SpeculativeConfig  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.engine.request import Request  # noqa: E402


@dataclass
class Part:
    """One engine and the parked requests it iterates (the first ``n`` of ``reqs``)."""

    engine: Engine
    reqs: list[Request]


def build(bs: int, parts: list[int], context: int, head: str, device: str,
          dtype: torch.dtype) -> tuple[Part, list[Part]]:
    """The plain engine at ``bs`` and ``max(parts)`` speculative engines (the first also serves the
    unsplit cycle), each with graphs at the part sizes it serves and parked requests for the largest."""
    if any(k < 1 or bs % k for k in parts):
        raise ValueError(f"--parts: every count must divide the batch size {bs} (got {parts})")
    loaded = random_model("random:smollm2-135m", dtype, device)
    base = dataclasses.replace(smollm_engine_config("random", [bs], context), device=device,
                               dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
                               graph_emulate=device != "cuda")  # the CPU dry run: the graph emulator
    plain_cfg = dataclasses.replace(base, cuda_graph_bs=[bs])
    plain = Engine(plain_cfg, loaded=loaded)
    spec_cfg = dataclasses.replace(base, speculative=SpeculativeConfig(
        method=head_method(head), draft_model=head, num_steps=5, adaptive=False))
    specs = []
    for i in range(max(parts)):  # engine i serves the parts of every k > i: graphs and requests for those
        mine = sorted({bs // k for k in (1, *parts) if k > i})
        eng = Engine(dataclasses.replace(spec_cfg, cuda_graph_bs=mine), loaded=loaded)
        specs.append(Part(eng, fake_requests(eng, mine[-1], context)))
    return Part(plain, fake_requests(plain, bs, context)), specs


class Gate:
    """Times concurrent launches on ``streams`` behind a sleep kernel (CUDA), or in turn (CPU)."""

    def __init__(self, device: torch.device, streams: int, cycles: int) -> None:
        self.cuda = device.type == "cuda"
        self.cycles = cycles
        self.streams = [torch.cuda.Stream(device) for _ in range(streams)] if self.cuda else []
        self.late = 0  # launches whose enqueueing outlasted the sleep

    def ms(self, parts: list[Part], n: int, steps: int, iters: int) -> float:
        """Median over ``iters`` launches (after 3 untimed) of every part's first ``n`` requests
        iterated at once (S = ``steps``; 0 is the plain step)."""
        times = []
        for i in range(iters + 3):
            for p in parts:
                p.engine.driver.admit(p.reqs[:n])
            times.append(self._once(parts, n, steps, count=i >= 3))
        return statistics.median(times[3:])

    def _once(self, parts: list[Part], n: int, steps: int, count: bool) -> float:
        if not self.cuda:
            t0 = time.perf_counter()
            for p in parts:
                p.engine.driver.fused.launch(p.reqs[:n], steps, False).wait()
            return (time.perf_counter() - t0) * 1e3
        main = torch.cuda.current_stream()
        gate_end = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(self.cycles)
        gate_end.record(main)
        flights = []
        for p, stream in zip(parts, self.streams, strict=False):
            stream.wait_event(gate_end)
            with torch.cuda.stream(stream):
                flights.append(p.engine.driver.fused.launch(p.reqs[:n], steps, False))
        enqueued = torch.cuda.Event()
        enqueued.record(main)  # on main behind the sleep: done already means the host was late
        for stream in self.streams[:len(parts)]:
            main.wait_stream(stream)
        end.record(main)
        late = enqueued.query()
        torch.cuda.synchronize()
        for f in flights:
            f.wait()
        self.late += int(late and count)
        return gate_end.elapsed_time(end)


def capture_all(plain: Part, specs: list[Part], bs: int, parts: list[int]) -> None:
    """Every graph the rounds replay, captured one launch at a time before any timing."""
    plain.engine.driver.admit(plain.reqs)
    plain.engine.driver.fused.launch(plain.reqs, 0, False).wait()
    for k in (1, *parts):
        for p in specs[:k]:
            p.engine.driver.admit(p.reqs[:bs // k])
            p.engine.driver.fused.launch(p.reqs[:bs // k], 5, False).wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bs", type=int, default=8)
    ap.add_argument("--parts", default="2,4,8", help="part counts, each dividing --bs")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gate-cycles", type=int, default=6_000_000, help="the sleep kernel's clock cycles (~3 ms)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run of the same calls")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: expected at least 1, got {args.rounds}")
    parts = [int(k) for k in args.parts.split(",")]
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    try:
        plain, specs = build(args.bs, parts, args.context, args.head, args.device, dtype)
    except ValueError as e:
        ap.error(str(e))
    capture_all(plain, specs, args.bs, parts)
    gate = Gate(dev, max(parts), args.gate_cycles)
    runs: dict[str, list[float]] = {}
    for rnd in range(args.rounds):  # alternating rounds: every form once a round
        forms = [("plain", [plain], args.bs, 0)] + [(f"cycle x{k}", specs[:k], args.bs // k, 5) for k in (1, *parts)]
        for name, ps, n, steps in forms:
            runs.setdefault(name, []).append(gate.ms(ps, n, steps, args.iters))
            print(f"round {rnd} {name:>10}: {runs[name][-1]:.4f} ms", flush=True)
        rows = save(args, dev, gate.late, runs)  # each round kept, should a time limit cut the run
    print(f"\nbs {args.bs}, {args.context} tokens, S = 5 (random SmolLM2, {args.head}; medians of {args.rounds} rounds; "
          f"launches past the gate: {gate.late})")
    for r in rows:
        print(f"{r['form']:>10}  {r['ms']:.4f} ms  {r['plain_steps']:.3f} plain steps")
    return 0


def save(args: argparse.Namespace, dev: torch.device, late: int, runs: dict[str, list[float]]) -> list[dict]:
    """``split_cycle.json`` with the medians of the rounds so far, in plain steps (the rows, returned)."""
    plain_ms = statistics.median(runs["plain"])
    rows = [dict(form=name, parts=1 if name == "plain" else int(name.split("x")[1]), ms=statistics.median(v),
                 plain_steps=statistics.median(v) / plain_ms, rounds=v) for name, v in runs.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    meta = dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", torch=torch.__version__)
    (args.out / "split_cycle.json").write_text(json.dumps(dict(
        meta=meta, bs=args.bs, context=args.context, head=args.head, gate_cycles=args.gate_cycles,
        host_over_gate=late, rows=rows), indent=1))
    return rows


if __name__ == "__main__":
    sys.exit(main())
