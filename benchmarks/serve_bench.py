"""Serving benchmark: Poisson arrivals at several request rates against a running
``updraft serve`` (or any OpenAI-compatible server) on 127.0.0.1.

For each rate it sends ``--num-prompts`` streaming requests whose inter-arrival times are
exponential with mean 1/rate (``inf``: all at once), then reports request and token
throughput, TTFT / TPOT / ITL / end-to-end latency (mean, p50, p90, p99) and the speculative
accept length (mean tokens per verify step, counting the bonus token): from the server's
``/metrics`` counters over the run, and the mean of the per-request ``usage.acceptance_length``.

Bounded: a fixed number of requests per rate and ``--max-duration`` seconds per rate (requests
still running then are cancelled and counted as failed). Client dependencies: httpx only (plus
``updraft.bench.prompts`` for the EAGLE eval sets, which needs nothing beyond the standard
library).

    python benchmarks/serve_bench.py --url http://127.0.0.1:8000 --prompts sum \\
        --num-prompts 64 --request-rates 1,4,16,inf --max-tokens 256 --output serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from updraft.bench.prompts import load_prompts  # noqa: E402

SPEC_COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_accepted_tokens_total")


@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    ttft: float | None = None  # s
    e2e: float | None = None  # s
    itl: list[float] = field(default_factory=list)  # s between streamed chunks after the first
    prompt_tokens: int = 0
    completion_tokens: int = 0
    acceptance_length: float | None = None

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    """mean, p50, p90, p99 (linear interpolation), scaled (s -> ms by default)."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    xs = sorted(values)

    def pct(p: float) -> float:
        k = (len(xs) - 1) * p / 100
        lo, hi = math.floor(k), math.ceil(k)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    out = {"mean": sum(xs) / len(xs), "p50": pct(50), "p90": pct(90), "p99": pct(99)}
    return {k: round(v * scale, 3) for k, v in out.items()}


def scrape(client: httpx.Client) -> dict[str, float]:
    """Sum of each ``updraft:`` series (any labels) on /metrics; empty if there is none."""
    try:
        text = client.get("/metrics").text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, _, value = line.rpartition(" ")
        name = key.partition("{")[0].split(":", 1)[-1]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


async def one_request(
    client: httpx.AsyncClient, args: argparse.Namespace, model: str, prompt: str
) -> RequestResult:
    res = RequestResult()
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.endpoint == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt
    t0 = last = time.perf_counter()
    try:
        async with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    res.error = str(event["error"].get("message"))
                    return res
                if event.get("usage"):
                    u = event["usage"]
                    res.prompt_tokens, res.completion_tokens = (
                        u["prompt_tokens"],
                        u["completion_tokens"],
                    )
                    res.acceptance_length = u.get("acceptance_length")
                has_text = any(
                    (c.get("delta") or {}).get("content") or c.get("text")
                    for c in event.get("choices", [])
                )
                if has_text:
                    now = time.perf_counter()
                    if res.ttft is None:
                        res.ttft = now - t0
                    else:
                        res.itl.append(now - last)
                    last = now
        res.e2e = time.perf_counter() - t0
        res.ok = res.ttft is not None
        if not res.ok:
            res.error = "no tokens streamed"
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return res


async def run_rate(
    args: argparse.Namespace, model: str, prompts: list[str], rate: float
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    limits = httpx.Limits(
        max_connections=args.max_concurrency, max_keepalive_connections=args.max_concurrency
    )
    timeout = httpx.Timeout(args.request_timeout, connect=10)
    with httpx.Client(base_url=args.url, timeout=10) as sync_client:
        before = scrape(sync_client)
    async with httpx.AsyncClient(base_url=args.url, timeout=timeout, limits=limits) as client:
        tasks: list[asyncio.Task[RequestResult]] = []
        t0 = time.perf_counter()

        async def arrivals() -> None:
            for prompt in prompts:
                tasks.append(asyncio.create_task(one_request(client, args, model, prompt)))
                if math.isfinite(rate):
                    await asyncio.sleep(rng.expovariate(rate))

        try:
            await asyncio.wait_for(arrivals(), args.max_duration)
            remaining = max(0.0, args.max_duration - (time.perf_counter() - t0))
            if tasks:
                await asyncio.wait(tasks, timeout=remaining)
        except asyncio.TimeoutError:
            pass
        duration = time.perf_counter() - t0
        results: list[RequestResult] = []
        for t in tasks:
            if t.done():
                results.append(t.result())
            else:
                t.cancel()
                results.append(RequestResult(error="cancelled at --max-duration"))
        results += [RequestResult(error="not sent before --max-duration")] * (
            len(prompts) - len(tasks)
        )
        await asyncio.gather(*tasks, return_exceptions=True)
    with httpx.Client(base_url=args.url, timeout=10) as sync_client:
        after = scrape(sync_client)
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.completion_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    drafts = after.get(SPEC_COUNTERS[0], 0.0) - before.get(SPEC_COUNTERS[0], 0.0)
    accepted = after.get(SPEC_COUNTERS[1], 0.0) - before.get(SPEC_COUNTERS[1], 0.0)
    per_req = [r.acceptance_length for r in ok if r.acceptance_length is not None]
    errors = [r.error for r in results if not r.ok]
    return {
        "request_rate": rate if math.isfinite(rate) else "inf",
        "num_requests": len(results),
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": sorted(set(e for e in errors if e))[:5],
        "duration_s": round(duration, 3),
        "request_throughput": round(len(ok) / duration, 4),
        "output_token_throughput": round(out_tokens / duration, 2),
        "total_token_throughput": round((in_tokens + out_tokens) / duration, 2),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "ttft_ms": percentiles([r.ttft for r in ok if r.ttft is not None]),
        "tpot_ms": percentiles([t for r in ok if (t := r.tpot) is not None]),
        "itl_ms": percentiles([x for r in ok for x in r.itl]),
        "e2e_ms": percentiles([r.e2e for r in ok if r.e2e is not None]),
        "accept_length": {
            "server": round((drafts + accepted) / drafts, 4) if drafts else None,
            "per_request_mean": round(sum(per_req) / len(per_req), 4) if per_req else None,
        },
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--url", default="http://127.0.0.1:8000", help="server base URL (127.0.0.1 only)"
    )
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    p.add_argument(
        "--prompts",
        default="sum",
        help="an EAGLE eval set (mt_bench, humaneval, gsm8k, alpaca, sum, qa) or a JSONL file",
    )
    p.add_argument(
        "--num-prompts", type=int, default=64, help="requests per rate (prompts are cycled)"
    )
    p.add_argument(
        "--request-rates",
        default="1,4,16,inf",
        help="comma-separated requests/s; inf = all at once",
    )
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="generate exactly --max-tokens tokens (vLLM extension)",
    )
    p.add_argument("--max-concurrency", type=int, default=256, help="most open connections")
    p.add_argument(
        "--max-duration",
        type=float,
        default=600.0,
        help="seconds per rate before the rest is cancelled",
    )
    p.add_argument("--request-timeout", type=float, default=300.0)
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="requests sent (and not measured) before the first rate",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--output", help="write the JSON report here (it is printed to stdout either way)"
    )
    args = p.parse_args(argv)
    if urlparse(args.url).hostname != "127.0.0.1":
        p.error(f"--url {args.url}: only servers on 127.0.0.1 are benchmarked")
    if args.num_prompts < 1 or args.max_tokens < 1 or args.max_duration <= 0:
        p.error("--num-prompts, --max-tokens and --max-duration must be positive")
    try:
        args.rates = [float(r) for r in args.request_rates.split(",")]
    except ValueError:
        p.error(f"--request-rates {args.request_rates!r}: give numbers or inf, comma-separated")
    if any(r <= 0 for r in args.rates):
        p.error("--request-rates must be > 0")
    return args


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=args.url, timeout=10) as c:
        models = c.get("/v1/models").json()["data"]
    model = args.model or models[0]["id"]
    base = load_prompts(args.prompts)
    if not base:
        raise SystemExit(f"no prompts in {args.prompts}")
    prompts = [base[i % len(base)] for i in range(args.num_prompts)]
    if args.warmup:
        async with httpx.AsyncClient(base_url=args.url, timeout=args.request_timeout) as client:
            await asyncio.gather(
                *(one_request(client, args, model, p) for p in prompts[: args.warmup])
            )
    results = []
    for rate in args.rates:
        res = await run_rate(args, model, prompts, rate)
        results.append(res)
        print(
            f"rate {res['request_rate']}: {res['completed']}/{res['num_requests']} ok in {res['duration_s']:.1f}s | "
            f"{res['request_throughput']:.2f} req/s, {res['output_token_throughput']:.1f} out tok/s | "
            f"TTFT p50/p99 {res['ttft_ms']['p50']}/{res['ttft_ms']['p99']} ms | "
            f"TPOT p50/p99 {res['tpot_ms']['p50']}/{res['tpot_ms']['p99']} ms | "
            f"accept len {res['accept_length']['server']}",
            file=sys.stderr,
        )
    config = {k: v for k, v in vars(args).items() if k not in ("rates",)}
    return {"model": model, "server": models[0], "config": config, "results": results}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(amain(args))
    text = json.dumps(report, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 1 if any(r["failed"] for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
