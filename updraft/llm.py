"""Offline API in the vLLM style: ``LLM(model=...).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from updraft.config import EngineConfig
from updraft.engine.engine import Engine
from updraft.engine.request import Request, StepOutput
from updraft.progress import bar as progress_bar
from updraft.sampling_params import SamplingParams

Message = dict[str, str]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    error: str | None = None
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class RequestOutput:
    """The result of one prompt: ``outputs`` holds n completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return all(o.finish_reason is not None for o in self.outputs)


def request_metrics(req: Request) -> dict[str, Any]:
    """Timings and speculative counters of a finished request."""
    end = req.finish_time or req.first_token_time or req.arrival_time
    ttft = (req.first_token_time - req.arrival_time) if req.first_token_time else None
    decode_time = (end - req.first_token_time) if req.first_token_time else 0.0
    n = len(req.output_ids)
    m: dict[str, Any] = {
        "prompt_tokens": len(req.prompt_ids),
        "completion_tokens": n,
        "ttft_s": ttft,
        "e2e_s": end - req.arrival_time,
        "decode_tokens_per_s": (n - 1) / decode_time if n > 1 and decode_time > 0 else None,
        "preemptions": req.num_preemptions,
    }
    if req.spec.num_drafts:
        m["spec"] = req.spec.as_dict()
    return m


class LLM:
    """Load a model once, then generate for many prompts with continuous batching."""

    def __init__(self, model: str = "default", *, engine: Engine | None = None, **engine_kwargs: Any) -> None:
        self.engine = engine if engine is not None else Engine(EngineConfig.from_kwargs(model=model, **engine_kwargs))

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: str | Sequence[str] | Sequence[Sequence[int]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, or a list of token ids). Returns results in prompt order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        plist = list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [(sampling_params or SamplingParams())] * len(plist)
        else:
            params = list(sampling_params)
            if len(params) != len(plist):
                raise ValueError(f"got {len(params)} sampling params for {len(plist)} prompts")
        return self._run(plist, params, use_tqdm)

    def chat(
        self,
        messages: Sequence[Message] | Sequence[Sequence[Message]],
        sampling_params: SamplingParams | None = None,
        *,
        add_generation_prompt: bool = True,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Apply the model's chat template to one conversation or a list of them, then generate."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        token_lists = [self.render_chat(c, add_generation_prompt) for c in convs]  # type: ignore[arg-type]
        params = [(sampling_params or SamplingParams())] * len(token_lists)
        return self._run(token_lists, params, use_tqdm)

    def render_chat(self, conversation: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        if not conversation:
            raise ValueError("messages is empty: give at least one message")
        for i, m in enumerate(conversation):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content'")
        return self.tokenizer.encode_chat(list(conversation), add_generation_prompt=add_generation_prompt)

    # ---- internals -----------------------------------------------------------------------
    def _run(self, prompts: list[Any], params: list[SamplingParams], use_tqdm: bool) -> list[RequestOutput]:
        groups: list[list[str]] = []
        added: list[str] = []
        try:
            for prompt, p in zip(prompts, params):
                p.validate()
                ids = []
                for j in range(p.n):
                    child = replace(p, n=1, seed=None if p.seed is None else p.seed + j)
                    req = self.engine.add_request(
                        prompt if isinstance(prompt, str) else list(prompt), child, None, stream_text=False
                    )
                    added.append(req.request_id)
                    ids.append(req.request_id)
                groups.append(ids)
        except Exception:
            for rid in added:
                self.engine.abort(rid)
            self.engine.step()  # drain the abort outputs
            raise
        for _ in self._drive(len(added), use_tqdm):
            pass
        results: list[RequestOutput] = []
        for ids in groups:
            reqs = [self.engine.requests[r] for r in ids]
            outs = [
                CompletionOutput(j, r.output_text, list(r.output_ids), r.finish_reason, r.error, r.logprobs or None)
                for j, r in enumerate(reqs)
            ]
            first = reqs[0]
            results.append(RequestOutput(first.request_id, first.prompt, list(first.prompt_ids), outs, request_metrics(first)))
            for r in ids:
                self.engine.release_finished(r)
        return results

    def _drive(self, total: int, use_tqdm: bool) -> Iterator[list[StepOutput]]:
        bar = progress_bar(total, "Generating", enabled=use_tqdm)
        try:
            while self.engine.has_unfinished():
                outs = self.engine.step()
                if bar is not None:
                    bar.update(sum(1 for o in outs if o.finished))
                yield outs
        finally:
            if bar is not None:
                bar.close()
