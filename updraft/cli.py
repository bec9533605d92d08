"""Command line: ``updraft generate`` (and, as they land, serve / bench / kit / train-draft).

Flags come from the config dataclasses (``EngineConfig``, ``SamplingParams``), so defaults live
in one place. User errors print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from updraft.config import (
    DRAFT_LM_HEADS,
    ConfigError,
    EngineConfig,
    SpeculativeConfig,
    normalize_method,
    parse_speculative_config,
)
from updraft.errors import UpdraftError
from updraft.sampling_params import SamplingParams

if TYPE_CHECKING:
    from updraft.engine.engine import Engine
    from updraft.engine.request import Request
    from updraft.models.loader import LoadedModel

SAMPLING_HELP = {
    "temperature": "sampling temperature (0 = greedy)",
    "top_p": "nucleus sampling probability mass, in (0, 1]",
    "top_k": "keep the k most likely tokens (-1 = off)",
    "min_p": "drop tokens below min_p * max probability (0 = off)",
    "repetition_penalty": "penalise tokens already in prompt or output (1 = off)",
    "frequency_penalty": "subtract count * value for output tokens",
    "presence_penalty": "subtract value for tokens present in the output",
    "max_tokens": "most tokens to generate",
    "stop": "stop string (repeatable)",
    "stop_token_ids": "stop token id (repeatable)",
    "ignore_eos": "keep generating after the end-of-sequence token",
}
SAMPLING_CLI_FIELDS = tuple(SAMPLING_HELP)


def _parse_type(annotation: str) -> tuple[type | None, bool, bool]:
    """(scalar type, optional, is_list) from a dataclass field annotation string."""
    ann = annotation.replace(" ", "")
    optional = ann.endswith("|None")
    ann = ann.removesuffix("|None")
    is_list = ann.startswith("list[")
    inner = ann[5:-1] if is_list else ann
    scalar = {"int": int, "float": float, "str": str, "bool": bool}.get(inner)
    return scalar, optional, is_list


def add_dataclass_args(
    parser: argparse.ArgumentParser, cls: type, only: tuple[str, ...] | None = None, helps: dict[str, str] | None = None
) -> None:
    """Add one flag per dataclass field; defaults are read from the dataclass itself."""
    group = parser.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        scalar, _optional, is_list = _parse_type(str(f.type))
        if scalar is None:
            continue
        # argparse formats help with %: a literal one ("~6% more") must be doubled
        help_text = ((helps or {}).get(f.name) or f.metadata.get("help", "")).replace("%", "%%")
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else None
        if scalar is bool and not is_list:
            if default:
                group.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=help_text)
            else:
                group.add_argument(flag, dest=f.name, action="store_true", help=help_text)
            continue
        if is_list:
            group.add_argument(flag, dest=f.name, type=scalar, action="append", default=None, help=help_text)
        else:
            shown = f" (default: {default})".replace("%", "%%") if default is not None else ""
            group.add_argument(flag, dest=f.name, type=scalar, default=default, help=help_text + shown)


def dataclass_from_args(cls: type, args: argparse.Namespace, only: tuple[str, ...] | None = None) -> Any:
    kwargs = {}
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        if hasattr(args, f.name) and getattr(args, f.name) is not None:
            kwargs[f.name] = getattr(args, f.name)
    return cls(**kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="updraft", description="updraft: speculative-decoding LLM engine")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default: WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text for a prompt or a chat message")
    src = gen.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="raw prompt text (no chat template)")
    src.add_argument("--chat", help="user message, wrapped in the model's chat template")
    gen.add_argument("--system", help="system message for --chat")
    gen.add_argument("--no-stream", dest="stream", action="store_false", help="print the text at the end")
    gen.add_argument("--compare-plain", action="store_true",
                     help="also generate without speculation and print both decode rates side by side")
    add_engine_args(gen)
    add_dataclass_args(gen, SamplingParams, only=SAMPLING_CLI_FIELDS, helps=SAMPLING_HELP)
    gen.set_defaults(func=cmd_generate, temperature=0.0)

    bench = sub.add_parser("bench", help="offline benchmark: throughput/latency with and without speculation")
    add_engine_args(bench)
    from updraft.bench.args import add_bench_args

    add_bench_args(bench)
    bench.set_defaults(func=cmd_bench)

    from updraft.server.launch import add_serve_parser  # light import: no fastapi/torch

    add_serve_parser(sub)

    from updraft.kit.cli import add_kit_parser  # light import: argparse only

    add_kit_parser(sub)

    from updraft.train.cli import add_train_parser  # light import: argparse only

    add_train_parser(sub)
    return parser


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Engine flags plus speculative decoding, both vLLM-style JSON and SGLang-style flags."""
    add_dataclass_args(parser, EngineConfig)
    spec = parser.add_argument_group("speculative decoding")
    spec.add_argument(
        "--speculative-config",
        help='vLLM-style JSON, e.g. \'{"method": "eagle3", "model": "PATH", "num_speculative_tokens": 5}\'',
    )
    spec.add_argument("--speculative-algorithm", help="SGLang-style: EAGLE, EAGLE3, MTP (alias NEXTN), STANDALONE or NGRAM")
    spec.add_argument("--speculative-draft-model-path", help="draft checkpoint (EAGLE or MTP head folder, or a model; MTP defaults to the target's own modules)")
    spec.add_argument("--speculative-num-steps", type=int, help="draft steps per iteration (S)")
    spec.add_argument("--speculative-eagle-topk", type=int, help="draft branching (1 = chain)")
    spec.add_argument("--speculative-num-draft-tokens", type=int, help="tokens verified per request (S + 1)")
    spec.add_argument("--speculative-draft-extend", choices=["v1", "v2"], help="draft extend semantics (default v2)")
    spec.add_argument("--draft-attention-backend", help="attention backend of the draft model (default: the target's)")
    spec.add_argument(
        "--speculative-token-map",
        help="EAGLE-1: file of frequent target token ids (.pt, .json or .txt); the draft's LM head runs over those only",
    )
    spec.add_argument(
        "--speculative-draft-lm-head", choices=DRAFT_LM_HEADS,
        help="EAGLE-3 draft LM head weights: auto (FP8 for heads >= 64 MiB on compute capability >= 8.9), fp8 or model",
    )
    spec.add_argument(
        "--speculative-disable-adaptive", dest="speculative_adaptive", action="store_false", default=None,
        help="always draft --speculative-num-steps tokens (default: choose S per iteration, 0 included)",
    )
    spec.add_argument(
        "--speculative-adaptive-steps", type=int, action="append", default=None,
        help="an S value adaptive speculation may choose (repeatable; default 0 1 2 3 and num_steps)",
    )
    spec.add_argument(
        "--speculative-context-vocab", type=int, default=None,
        help="EAGLE-3: greedy drafts may also propose up to this many prompt tokens the draft vocabulary lacks "
             f"(0: off; default {SpeculativeConfig.context_vocab})",
    )
    spec.add_argument(
        "--speculative-ngram-assist", type=int, default=None,
        help=f"EAGLE / MTP: verify n-gram lookups instead of the head's drafts where the history repeats its "
             f"last this-many tokens (0: off; default {SpeculativeConfig.ngram_assist})",
    )


def speculative_from_args(args: argparse.Namespace) -> SpeculativeConfig | None:
    flags = {
        "method": args.speculative_algorithm,
        "draft_model": args.speculative_draft_model_path,
        "num_steps": args.speculative_num_steps,
        "topk": args.speculative_eagle_topk,
        "num_draft_tokens": args.speculative_num_draft_tokens,
        "draft_extend": args.speculative_draft_extend,
        "draft_attention_backend": args.draft_attention_backend,
        "adaptive": getattr(args, "speculative_adaptive", None),
        "adaptive_steps": getattr(args, "speculative_adaptive_steps", None),
        "token_map": getattr(args, "speculative_token_map", None),
        "draft_lm_head": getattr(args, "speculative_draft_lm_head", None),
        "ngram_assist": getattr(args, "speculative_ngram_assist", None),
        "context_vocab": getattr(args, "speculative_context_vocab", None),
    }
    given = {k: v for k, v in flags.items() if v is not None}
    if args.speculative_config is not None:
        cfg = parse_speculative_config(args.speculative_config)
        late = ("draft_attention_backend", "adaptive", "adaptive_steps", "token_map", "draft_lm_head", "ngram_assist",
                "context_vocab")
        extra = {k: v for k, v in given.items() if k not in late}
        if extra:
            raise ConfigError("give speculative decoding either as --speculative-config JSON or as --speculative-* flags, not both")
        if cfg is not None and any(k in given for k in late):
            cfg = dataclasses.replace(cfg, **{k: given[k] for k in late if k in given}).validate()
        return cfg
    if not given:
        return None
    if "method" not in given:
        raise ConfigError("--speculative-* flags need --speculative-algorithm (EAGLE, EAGLE3, MTP, STANDALONE or NGRAM)")
    given["method"] = normalize_method(given["method"])
    return SpeculativeConfig(**given).validate()


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    cfg = dataclass_from_args(EngineConfig, args)
    return dataclasses.replace(cfg, speculative=speculative_from_args(args)).validate()


def _generate_one(engine: Engine, prompt: str | list[int], params: SamplingParams, stream: bool) -> tuple[Request, float]:
    """Run one request to completion, streaming its text (or printing it at the end)."""
    req = engine.add_request(prompt, params, stream_text=stream)
    t0 = time.perf_counter()
    while engine.has_unfinished():
        for out in engine.step():
            if stream and out.new_text:
                sys.stdout.write(out.new_text)
                sys.stdout.flush()
    if not stream:
        sys.stdout.write(req.output_text)
    sys.stdout.write("\n")
    if req.error:
        raise UpdraftError(f"generation failed: {req.error}")
    return req, time.perf_counter() - t0


def cmd_generate(args: argparse.Namespace) -> int:
    from updraft.engine.engine import Engine
    from updraft.llm import LLM, request_metrics

    engine_cfg = engine_config_from_args(args)
    params = dataclass_from_args(SamplingParams, args, only=SAMPLING_CLI_FIELDS).validate()
    if args.prompt is None and args.chat is None:
        args.chat = "Write a haiku about speculative decoding."
    if args.compare_plain and engine_cfg.speculative is None:
        raise UpdraftError("--compare-plain needs speculative decoding (--speculative-algorithm or --speculative-config)")
    llm = LLM(engine=Engine(engine_cfg))
    engine = llm.engine
    if args.chat is not None:
        if not args.chat.strip():
            raise UpdraftError("--chat is empty: give a message")
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.chat}
        ]
        prompt: str | list[int] = llm.render_chat(messages)
    else:
        prompt = args.prompt
    req, wall = _generate_one(engine, prompt, params, args.stream)
    m = request_metrics(req)
    n = m["completion_tokens"]
    tps = m["decode_tokens_per_s"]
    rate = f"decode {tps:.1f} tok/s" if tps is not None else "decode n/a (1 token)"
    print(
        f"[{n} tokens in {wall:.2f}s | TTFT {m['ttft_s'] * 1000:.1f} ms | {rate} | finish: {req.finish_reason} | "
        f"{engine.device.type}, {str(engine.dtype).removeprefix('torch.')}, attention {engine.backend_name}]",
        file=sys.stderr,
    )
    if "spec" in m:
        s = m["spec"]
        per_pos = ", ".join(f"{c / n if n else 0.0:.2f}" for c, n in zip(s["accepted_per_position"], s["proposed_per_position"]))
        print(
            f"[speculative {engine_cfg.speculative.method}: mean accept length {s['mean_accept_length']:.2f} "  # type: ignore[union-attr]
            f"(tokens per verify step, counting the bonus token) | acceptance rate {s['acceptance_rate']:.2f} | "
            f"per position [{per_pos}] | {s['num_drafts']} verify steps]",
            file=sys.stderr,
        )
    if args.compare_plain:
        loaded, spec_ids, first = engine.loaded, list(req.output_ids), _decode_sample(req)
        del req
        keep: Engine | None = engine
        if engine.device.type == "cuda":
            del llm, engine  # the plain engine needs the KV memory back (the weights stay)
            keep = None
        _compare_plain(loaded, engine_cfg, prompt, params, spec_ids, first, keep)
    return 0


def _decode_sample(req: Request) -> tuple[int, float]:
    """(tokens after the first, seconds they took) of a finished request."""
    from updraft.llm import request_metrics

    m = request_metrics(req)
    n, tps = m["completion_tokens"] - 1, m["decode_tokens_per_s"]
    return (n, n / tps) if tps else (0, 0.0)


def _compare_plain(loaded: LoadedModel, cfg: EngineConfig, prompt: str | list[int], params: SamplingParams,
                   spec_ids: list[int], first: tuple[int, float], spec_engine: Engine | None) -> None:
    """The same request without speculation (same weights, same process), side by side.

    With ``spec_engine`` (CPU: both engines fit) each engine runs the request once more, the runs
    alternating (speculative, plain, speculative, plain), and each rate is over both of its runs:
    a CPU's speed drifts by ~10% between runs of a few seconds, which one pair cannot tell from
    the engines. On a GPU (one pair: the speculative engine's KV memory goes to the plain one)
    the timings are steady."""
    import gc

    import torch

    from updraft.engine.engine import Engine

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print("[without speculation:]", file=sys.stderr)
    plain = Engine(dataclasses.replace(cfg, speculative=None), loaded=loaded)
    req, _ = _generate_one(plain, prompt, params, stream=False)
    runs = {"speculative": [first], "plain": [_decode_sample(req)]}
    if spec_engine is not None:
        for name, eng in (("speculative", spec_engine), ("plain", plain)):
            again = eng.add_request(prompt, params)
            while eng.has_unfinished():
                eng.step()
            runs[name].append(_decode_sample(again))
    spec_tps, tps = (sum(n for n, _ in r) / sum(t for _, t in r) if sum(t for _, t in r) else None for r in runs.values())
    if not params.greedy:
        same = "sampled: not comparable token for token"
    elif req.output_ids == spec_ids:
        same = "identical (greedy)"
    elif plain.dtype != torch.float32:
        same = (f"differ (greedy in {str(plain.dtype).removeprefix('torch.')}: a multi-token verify rounds "
                "differently from a one-token decode; identical in float32)")
    else:
        same = "DIFFER (greedy, float32: a bug)"
    ratio = f"{spec_tps / tps:.2f}x" if spec_tps and tps else "n/a"
    how = f" ({len(runs['plain'])} runs each, alternating)" if spec_engine is not None else ""
    print(f"[side by side{how}: speculative {spec_tps or 0:.1f} tok/s | plain {tps or 0:.1f} tok/s | speculative / plain "
          f"{ratio} | outputs {same}]", file=sys.stderr)


def cmd_bench(args: argparse.Namespace) -> int:
    from updraft.bench.offline import cmd_bench as run

    return run(args, engine_config_from_args(args))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s %(levelname)s] %(message)s")
    try:
        return int(args.func(args) or 0)
    except (UpdraftError, ValueError, FileNotFoundError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
