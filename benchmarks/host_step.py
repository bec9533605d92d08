"""Host work per engine step on the CPU (issue 12: speculation loses at bs 32/64 because the
host's work per iteration exceeds the device's).

Builds a tiny random Llama (byte-level tokenizer; its LM head only scores printable ASCII tokens,
so the text detokenises cleanly, as real text mostly does) and runs --bs concurrent requests
through the fused iteration under the CPU graph emulator with overlap, for plain decoding and for
EAGLE (a random head, S pinned), each with text only at the end (what ``LLM.generate`` and
``updraft bench`` ask for) and with streamed text ("stream"). Only steady-state decode steps with every request running are
measured. The emulated graph replay runs on the CPU inside the launch; its time is subtracted, so
"host" is what the host would still do per iteration on a GPU:

* schedule: ``_overlap_continues`` + ``Scheduler.schedule`` (page checks, KV allocation)
* launch:   ``SpecDriver.launch`` minus the emulated replay
* finish:   ``SpecDriver.finish`` (the results to Python lists, adaptive bookkeeping)
* emit:     the rest of ``_complete`` (``_emit`` per request: tokens, stops, text; KV frees)
* other:    the rest of ``Engine.step``

A random head accepts few drafts, so the speculative rows emit ~1 token per request per
iteration; the "emit S+1" row times ``Engine._emit`` alone with S + 1 tokens per request (what an
accepting head emits), with and without streamed text and with stop strings on half the
requests. Medians over --repeats runs. Prints a table; --out writes JSON; --profile prints a
cProfile of the measured steps.

    PYTHONPATH=. python benchmarks/host_step.py --bs 1 64 --out host.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.llm import LLM
from updraft.provenance import git_commit
from updraft.sampling_params import SamplingParams
from updraft.testing import tiny_hf_model, write_eagle_head, write_tiny_tokenizer

PHASES = ("schedule", "launch", "finish", "emit", "other")


def build_target(folder: Path) -> Path:
    """Tiny random Llama whose LM head scores only printable ASCII byte tokens."""
    model = tiny_hf_model("llama", num_hidden_layers=1)
    folder.mkdir(parents=True)
    write_tiny_tokenizer(folder)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with torch.no_grad():
        for i in range(model.lm_head.weight.shape[0]):
            text = tok.decode([i]) if i < tok.get_vocab_size() else ""
            if not (len(text) == 1 and " " <= text <= "~"):
                model.lm_head.weight[i] = 0.0  # logit 0: never the greedy pick over positive ones
    model.save_pretrained(folder)
    return folder


def make_llm(target: Path, head: Path | None, bs: int, steps: int) -> LLM:
    spec = None if head is None else {"method": "eagle", "draft_model": str(head), "num_steps": steps, "adaptive": False}
    sizes = sorted({1, bs})
    return LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=sizes,
               max_running_requests=max(bs, 1), speculative_config=spec)


class Probe:
    """Times the engine's phases by wrapping bound methods of one engine (benchmark only)."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.on = False
        self.acc: dict[str, float] = defaultdict(float)
        self.replay = 0.0
        self.emitted = 0
        drv = eng.driver
        assert drv is not None, eng.graph_log
        self._wrap(eng, "_overlap_continues", "schedule")
        self._wrap(eng.scheduler, "schedule", "schedule")
        self._wrap(drv, "launch", "launch", after=self._count_replay)
        self._wrap(drv, "finish", "finish")
        self._wrap(eng, "_complete", "complete")

    def _count_replay(self, inf: Any) -> None:  # noqa: ANN401 - spec.fused.InFlight
        self.replay += inf.seconds()  # the emulated replay (CPU: known at launch)

    def _wrap(self, obj: object, name: str, key: str, after: Callable[[Any], None] | None = None) -> None:
        fn = getattr(obj, name)
        acc = self.acc

        def timed(*a: Any, **k: Any) -> Any:  # noqa: ANN401
            t0 = time.perf_counter()
            out = fn(*a, **k)
            acc[key] += time.perf_counter() - t0
            if after is not None:
                after(out)
            return out

        setattr(obj, name, timed)

    def reset(self) -> None:
        self.acc.clear()
        self.replay = 0.0

    def phases(self, steps: int, step_s: float) -> dict[str, float]:
        """Milliseconds per step of each phase, and host = step - emulated replay."""
        a = self.acc
        ms = {
            "schedule": a["schedule"],
            "launch": a["launch"] - self.replay,
            "finish": a["finish"],
            "emit": a["complete"] - a["finish"],
        }
        ms["other"] = step_s - self.replay - sum(ms.values())
        ms["host"] = step_s - self.replay
        ms["replay"] = self.replay
        return {k: 1000 * v / steps for k, v in ms.items()}


def add(eng: Engine, prompt: list[int], params: SamplingParams, stream: bool) -> Any:  # noqa: ANN401
    """``add_request``; without ``stream``, text only at the end where the engine supports it
    (``LLM.generate`` and ``updraft bench`` ask for that; before it existed, every request
    streamed)."""
    if stream:
        return eng.add_request(prompt, params)
    try:
        return eng.add_request(prompt, params, stream_text=False)
    except TypeError:
        return eng.add_request(prompt, params)


def run_steps(llm: LLM, bs: int, steps: int, max_tokens: int, stream: bool, profile: cProfile.Profile | None) -> dict[str, float]:
    """One run: bs requests, warm up until all decode, then time ``steps`` steps."""
    eng = llm.engine
    probe = getattr(eng, "_host_probe", None) or Probe(eng)
    eng._host_probe = probe  # type: ignore[attr-defined]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    reqs = [add(eng, [65 + (i * 7 + j) % 26 for j in range(8 + i % 9)], params, stream) for i in range(bs)]
    while any(r.in_prefill for r in reqs) or eng.driver.inflight is None:  # type: ignore[union-attr]
        eng.step()
    for _ in range(3):  # capture and the first completions are not steady state
        eng.step()
    probe.reset()
    tokens0 = sum(len(r.output_ids) for r in reqs)
    if profile is not None:
        profile.enable()
    t0 = time.perf_counter()
    for _ in range(steps):
        eng.step()
    wall = time.perf_counter() - t0
    if profile is not None:
        profile.disable()
    assert all(not r.finished for r in reqs), "raise --max-tokens: requests finished while measured"
    emitted = sum(len(r.output_ids) for r in reqs) - tokens0
    res = probe.phases(steps, wall)
    res["tokens_per_req_step"] = emitted / (bs * steps)
    _discard(eng, reqs)
    return res


def _discard(eng: Engine, reqs: list[Request]) -> None:
    """Abort the measured requests and release them (the engine is reused for the next row)."""
    for r in reqs:
        eng.abort(r.request_id)
    while eng.has_unfinished():
        eng.step()
    for r in reqs:
        eng.release_finished(r.request_id)


def emit_micro(llm: LLM, bs: int, ntok: int, iters: int, stream: bool, stops: bool) -> float:
    """Milliseconds per iteration of ``Engine._emit`` with ``ntok`` tokens for each of bs requests."""
    eng = llm.engine
    ascii_ids = [i for i in range(256) if len(t := eng.tokenizer.decode([i])) == 1 and "a" <= t <= "z"]
    stop_params = SamplingParams(max_tokens=10**6, ignore_eos=True, stop=["\n\n", "###", "zzzq"])
    plain = SamplingParams(max_tokens=10**6, ignore_eos=True)
    reqs = [add(eng, [66, 67, 68], stop_params if stops and i % 2 == 0 else plain, stream) for i in range(bs)]
    toks = [[ascii_ids[(i * 5 + k * 3) % len(ascii_ids)] for k in range(ntok)] for i in range(bs)]
    t0 = time.perf_counter()
    for _ in range(iters):
        for r, t in zip(reqs, toks):
            eng._emit(r, t, [])
        eng._pending.clear()
    dt = time.perf_counter() - t0
    _discard(eng, reqs)
    return 1000 * dt / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--steps", type=int, default=40, help="measured steps per run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--num-steps", type=int, default=3, help="S of the EAGLE rows")
    ap.add_argument("--modes", nargs="+", default=["plain", "eagle"], choices=["plain", "eagle"])
    ap.add_argument("--profile", choices=["plain", "eagle"], help="cProfile the measured steps of this mode (largest bs)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="host-step-"))
    target = build_target(tmp / "target")
    head = write_eagle_head(tmp / "eagle")
    rows: list[dict[str, Any]] = []
    max_tokens = 8 * args.steps + 64
    for mode in args.modes:
        for bs in args.bs:
            llm = make_llm(target, head if mode == "eagle" else None, bs, args.num_steps)
            prof = cProfile.Profile() if args.profile == mode and bs == max(args.bs) else None
            for stream in (False, True):
                runs = [run_steps(llm, bs, args.steps, max_tokens, stream, prof if k == 0 and not stream else None)
                        for k in range(args.repeats)]
                row: dict[str, Any] = {"mode": mode + (" stream" if stream else ""), "bs": bs}
                row.update({k: statistics.median(r[k] for r in runs) for k in runs[0]})
                rows.append(row)
            if prof is not None:
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats("engine/|memory/|tokeniz|adaptive|fused.py:(412|152)", 30)
            if mode == "plain":  # _emit alone: what an accepting head emits per iteration
                ntok = args.num_steps + 1
                for stream, stops in ((True, False), (True, True), (False, False), (False, True)):
                    ms = statistics.median(emit_micro(llm, bs, ntok, args.steps, stream, stops) for _ in range(args.repeats))
                    rows.append({"mode": f"emit {ntok} tok{' stream' if stream else ''}{' stops' if stops else ''}",
                                 "bs": bs, "emit": ms, "host": ms})
            del llm
    print(f"\nhost ms per step (median of {args.repeats} x {args.steps} steps; replay = emulated device, not host)")
    cols = ("schedule", "launch", "finish", "emit", "other", "host", "replay", "tokens_per_req_step")
    print(f"{'mode':<26}{'bs':>4}" + "".join(f"{c[:9]:>10}" for c in cols))
    for r in rows:
        print(f"{r['mode']:<26}{r['bs']:>4}" + "".join(f"{r[c]:>10.3f}" if c in r else f"{'':>10}" for c in cols))
    if args.out is not None:
        args.out.write_text(json.dumps({"commit": git_commit(), "args": {k: str(v) for k, v in vars(args).items()},
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
