"""Engine configuration: frozen dataclasses, one source of defaults, ``validate()`` with clear
errors. The CLI builds its flags from these fields (``updraft.cli``), so a default lives here
and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from updraft.errors import UpdraftError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("auto", "cpu", "cuda")
SAMPLED_GRAPHS = ("auto", "start", "first-use")


class ConfigError(UpdraftError):
    """An invalid engine or speculative configuration."""


def _opt(help_text: str, **kw: Any) -> Any:
    """A dataclass field with CLI help text; ``default`` or ``default_factory`` go in ``kw``."""
    return field(metadata={"help": help_text}, **kw)


@dataclass(frozen=True)
class EngineConfig:
    """Everything that shapes an engine instance (not a request)."""

    model: str = _opt("HF folder, .gguf file, hub id, or 'default' (SmolLM2-135M-Instruct)", default="default")
    device: str = _opt("auto (cuda if available), cpu or cuda", default="auto")
    dtype: str = _opt("auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16", default="auto")
    seed: int = _opt("seed of the engine's random generator (requests without their own seed)", default=0)
    max_model_len: int | None = _opt("context length served (default: the model's)", default=None)
    max_total_tokens: int | None = _opt("KV pool size in tokens (default: from memory)", default=None)
    mem_fraction_static: float = _opt("CUDA: fraction of free GPU memory for weights + KV", default=0.85)
    page_size: int = _opt("KV page size in tokens", default=1)
    max_running_requests: int = _opt("most requests in flight at once (request pool rows)", default=64)
    chunked_prefill_size: int = _opt("most prompt tokens per prefill step (longer prompts are chunked)", default=2048)
    admit_group: int = _opt(
        "while requests decode, waiting ones start in groups of this many (at most max_running_requests / 8; "
        "fewer when fewer wait): each start is a prefill step that pauses every decoding request; 1 = start each "
        "as soon as a slot frees", default=4
    )
    attention_backend: str = _opt("auto (triton on CUDA, torch_native on CPU), torch_native, triton, flex, mla (MLA models: the latent cache)", default="auto")
    disable_cuda_graph: bool = _opt("run every step eagerly", default=False)
    cuda_graph_max_bs: int = _opt("largest batch size captured in a CUDA graph", default=64)
    cuda_graph_bs: list[int] | None = _opt("batch sizes to capture (default: 1 2 4 8 12 16 24 32 48 64 ...)", default=None)
    prefill_graph_tokens: list[int] | None = _opt(
        "token budgets of the many-request prefill graphs (repeatable): a prefill step of several prompt chunks "
        "replays the smallest budget its tokens fit (default: 512, 1024, ... up to chunked_prefill_size; an empty "
        "list: none)", default=None
    )
    disable_graph_phase: list[str] | None = _opt(
        "phase to run eagerly (repeatable): prefill, decode, target_verify, draft_decode, draft_extend", default=None
    )
    graph_emulate: bool = _opt("CPU: run the graph machinery under the graph emulator (tests)", default=False)
    disable_fused_iteration: bool = _opt(
        "speculative decoding: run each iteration phase by phase (per-phase graphs) instead of one fused graph", default=False
    )
    disable_overlap: bool = _opt(
        "speculative decoding: read each iteration's results before launching the next (no overlap)", default=False
    )
    sampled_graphs: str = _opt(
        "when the fused iteration captures its sampled (T > 0) graphs: start, first-use (a faster start; the first "
        "sampled batch, and each S adaptive speculation first picks for it, waits for a capture) or auto (start on "
        "CUDA; first use under the CPU graph emulator, where a capture costs an eager iteration)", default="auto"
    )
    progress: bool = _opt("show progress bars (loading, capture) on a terminal; never in logs", default=True)
    speculative: SpeculativeConfig | None = _opt("speculative decoding (None = off)", default=None)

    def resolved_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def sampled_graphs_at_start(self) -> bool:
        """Whether the fused iteration captures its sampled graphs at start (``sampled_graphs``)."""
        if self.sampled_graphs == "auto":
            return self.resolved_device().type == "cuda"
        return self.sampled_graphs == "start"

    def resolved_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if self.resolved_device().type == "cuda" else torch.float32
        return DTYPES[self.dtype]

    def validate(self) -> EngineConfig:
        if self.device not in DEVICES:
            raise ConfigError(f"device={self.device!r} is invalid: choose one of {', '.join(DEVICES)}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA GPU is available: use --device cpu or auto")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r} is invalid: choose auto, {', '.join(DTYPES)}")
        for name in ("page_size", "max_running_requests", "chunked_prefill_size", "admit_group", "cuda_graph_max_bs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} is invalid: must be an integer >= 1")
        for name in ("max_model_len", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} is invalid: must be an integer >= 1 or unset")
        if not 0 < self.mem_fraction_static < 1:
            raise ConfigError(f"mem_fraction_static={self.mem_fraction_static!r} is invalid: must be in (0, 1)")
        from updraft.attention import BACKEND_NAMES

        if self.sampled_graphs not in SAMPLED_GRAPHS:
            raise ConfigError(f"sampled_graphs={self.sampled_graphs!r} is invalid: choose one of {', '.join(SAMPLED_GRAPHS)}")
        if self.attention_backend != "auto" and self.attention_backend not in BACKEND_NAMES:
            raise ConfigError(
                f"attention_backend={self.attention_backend!r} is invalid: choose auto, {', '.join(BACKEND_NAMES)}"
            )
        if self.speculative is not None:
            self.speculative.validate()
        phases = ("prefill", "decode", "target_verify", "draft_decode", "draft_extend")
        bad = [p for p in (self.disable_graph_phase or []) if p not in phases]
        if bad:
            raise ConfigError(f"disable_graph_phase={bad[0]!r} is invalid: choose from {', '.join(phases)}")
        if any(not isinstance(b, int) or b < 1 for b in (self.cuda_graph_bs or [])):
            raise ConfigError(f"cuda_graph_bs={self.cuda_graph_bs!r} is invalid: batch sizes must be integers >= 1")
        if any(not isinstance(t, int) or t < 1 for t in (self.prefill_graph_tokens or [])):
            raise ConfigError(
                f"prefill_graph_tokens={self.prefill_graph_tokens!r} is invalid: token budgets must be integers >= 1"
            )
        return self

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Build from keyword arguments, refusing unknown names with the list of known ones."""
        known = {f.name for f in fields(cls)}
        if "speculative_config" in kwargs:  # vLLM's name
            kwargs["speculative"] = kwargs.pop("speculative_config")
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown engine option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "speculative" in kwargs:
            kwargs["speculative"] = parse_speculative_config(kwargs["speculative"])
        return cls(**kwargs).validate()


SPEC_METHODS = ("eagle", "eagle3", "mtp", "standalone", "ngram")
DRAFT_LM_HEADS = ("auto", "fp8", "model")
#: Largest ``SpeculativeConfig.context_vocab``: each request row holds that many rows of the draft's width.
MAX_CONTEXT_VOCAB = 4096
# vLLM `method` names and SGLang `--speculative-algorithm` names -> ours.
_METHOD_ALIASES = {
    "eagle": "eagle",
    "eagle1": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",  # vLLM's method name for a checkpoint's own MTP modules
    "nextn": "mtp",  # SGLang's --speculative-algorithm NEXTN
    "deepseek_mtp": "mtp",  # vLLM's older name
    "standalone": "standalone",
    "draft_model": "standalone",
    "ngram": "ngram",
    "prompt_lookup": "ngram",
}


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding. ``num_steps`` (S) drafts per iteration; a chain verifies
    ``num_draft_tokens = S + 1`` tokens (the bonus token + S drafts)."""

    method: str = _opt("eagle, eagle3, mtp (alias nextn), standalone or ngram", default="ngram")
    draft_model: str | None = _opt(
        "draft checkpoint: EAGLE head folder, builtin:NAME (a shipped head, e.g. builtin:smollm2), an MTP head folder "
        "(method mtp; default: the target checkpoint's own MTP modules) or a standalone model", default=None,
    )
    num_steps: int = _opt("draft tokens proposed per iteration (S)", default=5)
    topk: int = _opt("draft branching; 1 = chain (trees come later)", default=1)
    num_draft_tokens: int | None = _opt("tokens verified per request (S + 1 for a chain)", default=None)
    draft_extend: str = _opt("v2 (all S+1 rows, fixed stride) or v1 (accepted rows, packed)", default="v2")
    ngram_min: int = _opt("n-gram proposer: shortest suffix to match", default=1)
    ngram_max: int = _opt("n-gram proposer: longest suffix to match", default=4)
    ngram_assist: int = _opt(
        "EAGLE / MTP heads: verify the n-gram lookup's drafts (sampled: q one-hot at each) instead of the "
        "head's in the rows whose history repeats their last this-many tokens (ngram_min..ngram_max are matched; "
        "0: off)", default=3,
    )
    context_vocab: int = _opt(
        "EAGLE-3 heads: greedy drafts may also propose up to this many tokens of each request's prompt that the "
        "draft vocabulary lacks (its most frequent ones), scored through rows extrapolated from the target's LM head "
        "(0: off)", default=0,
    )
    draft_attention_backend: str | None = _opt("attention backend of the draft (default: the target's)", default=None)
    adaptive: bool = _opt("choose S per iteration from measured cycle costs and running acceptance (False: always num_steps)", default=True)
    adaptive_steps: list[int] | None = _opt("S values adaptive speculation may choose (default: 0, 1, 2, 3 and num_steps)", default=None)
    token_map: str | None = _opt(
        "EAGLE-1: file of frequent target token ids (.pt tensor, .json or .txt list); the draft's LM head runs over "
        "those rows only (build one with python -m updraft.spec.token_map)", default=None,
    )

    draft_lm_head: str = _opt(
        "EAGLE-3 draft LM head weights: auto (FP8 where it pays: CUDA compute capability >= 8.9 and a head of at "
        "least 64 MiB in its own dtype, e.g. 32k x 4096), fp8 (e4m3, a scale per row, streamed by the small-M "
        "kernel for up to 16 rows where its launch config is tuned for the GPU; needs compute capability >= 8.9) or "
        "model (the checkpoint's dtype)", default="auto",
    )

    def step_choices(self) -> list[int]:
        """The S values an iteration may run (just num_steps when adaptive is off)."""
        if not self.adaptive:
            return [self.num_steps]
        if self.adaptive_steps:
            return sorted(set(self.adaptive_steps))
        return sorted({s for s in (0, 1, 2, 3) if s < self.num_steps} | {self.num_steps})

    @property
    def ndt(self) -> int:
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.num_steps + 1

    @property
    def needs_draft_model(self) -> bool:
        """Whether ``draft_model`` must be given (MTP defaults to the target's own modules)."""
        return self.method in ("eagle", "eagle3", "standalone")

    @property
    def uses_draft_model(self) -> bool:
        """Whether a draft model runs (its own KV pool, draft phases)."""
        return self.needs_draft_model or self.method == "mtp"

    def validate(self) -> SpeculativeConfig:
        if self.method not in SPEC_METHODS:
            raise ConfigError(f"speculative method={self.method!r} is invalid: choose one of {', '.join(SPEC_METHODS)}")
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ConfigError(f"speculative num_steps={self.num_steps!r} is invalid: must be an integer >= 1")
        if self.topk != 1:
            raise ConfigError(
                f"speculative topk={self.topk} (tree drafting) is not supported yet: use topk=1 (a chain)"
            )
        if self.ndt != self.num_steps + 1:
            raise ConfigError(
                f"num_draft_tokens={self.ndt} with num_steps={self.num_steps} and topk=1: a chain verifies "
                f"num_steps + 1 = {self.num_steps + 1} tokens"
            )
        if self.draft_extend not in ("v1", "v2"):
            raise ConfigError(f"draft_extend={self.draft_extend!r} is invalid: choose v1 or v2")
        if self.adaptive_steps is not None:
            bad = [s for s in self.adaptive_steps if not isinstance(s, int) or not 0 <= s <= self.num_steps]
            if bad or not self.adaptive_steps:
                raise ConfigError(
                    f"adaptive_steps={self.adaptive_steps!r} is invalid: give integers in 0..num_steps={self.num_steps}"
                )
        if self.needs_draft_model and not self.draft_model:
            raise ConfigError(f"speculative method {self.method!r} needs a draft model (draft_model / --speculative-draft-model-path)")
        if self.method == "ngram":
            if self.draft_model:
                raise ConfigError("the ngram method takes no draft model; remove draft_model")
            if not 1 <= self.ngram_min <= self.ngram_max:
                raise ConfigError(
                    f"ngram_min={self.ngram_min}, ngram_max={self.ngram_max} are invalid: need 1 <= ngram_min <= ngram_max"
                )
        if not isinstance(self.ngram_assist, int) or not (self.ngram_assist == 0 or 1 <= self.ngram_assist <= self.ngram_max):
            raise ConfigError(
                f"ngram_assist={self.ngram_assist!r} is invalid: 0 (off) or a match length in 1..ngram_max={self.ngram_max}"
            )
        if self.token_map is not None and (self.method != "eagle" or not isinstance(self.token_map, str) or not self.token_map):
            raise ConfigError(
                f"token_map={self.token_map!r} is invalid: a token map is a file path for EAGLE-1 heads (method eagle); "
                "EAGLE-3 heads carry their own draft vocabulary (d2t)"
            )
        if not isinstance(self.context_vocab, int) or not 0 <= self.context_vocab <= MAX_CONTEXT_VOCAB:
            raise ConfigError(
                f"context_vocab={self.context_vocab!r} is invalid: 0 (off) or a token count in 1..{MAX_CONTEXT_VOCAB}")
        if self.context_vocab and self.method != "eagle3":
            raise ConfigError(
                f"context_vocab={self.context_vocab} is for EAGLE-3 heads (method eagle3, a draft vocabulary); the "
                f"method is {self.method!r}: set it to 0")
        if self.draft_lm_head not in DRAFT_LM_HEADS:
            raise ConfigError(f"draft_lm_head={self.draft_lm_head!r} is invalid: choose one of {', '.join(DRAFT_LM_HEADS)}")
        if self.draft_attention_backend is not None:
            from updraft.attention import BACKEND_NAMES

            if self.draft_attention_backend != "auto" and self.draft_attention_backend not in BACKEND_NAMES:
                raise ConfigError(
                    f"draft_attention_backend={self.draft_attention_backend!r} is invalid: "
                    f"choose auto, {', '.join(BACKEND_NAMES)}"
                )
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeculativeConfig:
        """Accept vLLM-style keys (method, model, num_speculative_tokens, prompt_lookup_min/max),
        SGLang's ``speculative_token_map`` and our own field names (``token_map``); unknown keys
        are refused."""
        if not isinstance(d, dict):
            raise ConfigError(f"speculative config must be a JSON object, got {type(d).__name__}")
        renames = {
            "model": "draft_model",
            "num_speculative_tokens": "num_steps",
            "prompt_lookup_min": "ngram_min",
            "prompt_lookup_max": "ngram_max",
            "algorithm": "method",
            "speculative_token_map": "token_map",  # SGLang's server argument
        }
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            name = renames.get(key, key)
            if name not in known:
                raise ConfigError(
                    f"unknown speculative config key {key!r}; known: {', '.join(sorted(known | set(renames)))}"
                )
            kwargs[name] = value
        if "method" in kwargs:
            kwargs["method"] = normalize_method(str(kwargs["method"]))
        return cls(**kwargs).validate()


def normalize_method(name: str) -> str:
    key = name.strip().lower()
    if key not in _METHOD_ALIASES:
        raise ConfigError(f"speculative method {name!r} is invalid: choose one of {', '.join(SPEC_METHODS)}")
    return _METHOD_ALIASES[key]


def parse_speculative_config(value: SpeculativeConfig | dict[str, Any] | str | None) -> SpeculativeConfig | None:
    """``LLM(speculative_config=...)`` and ``--speculative-config``: a dict, a JSON string, or None."""
    if value is None or isinstance(value, SpeculativeConfig):
        return value.validate() if value is not None else None
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--speculative-config is not valid JSON: {exc.msg} at position {exc.pos}") from None
    return SpeculativeConfig.from_dict(value)  # type: ignore[arg-type]
