"""updraft: a readable LLM inference engine built around speculative decoding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "EngineConfig", "SpeculativeConfig"]

if TYPE_CHECKING:
    from updraft.config import EngineConfig, SpeculativeConfig
    from updraft.llm import LLM
    from updraft.sampling_params import SamplingParams


def __getattr__(name: str) -> Any:
    # Lazy: `import updraft` stays cheap (no torch import) for the CLI's --help and tooling.
    if name == "LLM":
        from updraft.llm import LLM

        return LLM
    if name == "SamplingParams":
        from updraft.sampling_params import SamplingParams

        return SamplingParams
    if name in ("EngineConfig", "SpeculativeConfig"):
        from updraft import config

        return getattr(config, name)
    raise AttributeError(f"module 'updraft' has no attribute {name!r}")
