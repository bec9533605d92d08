"""updraft: a readable LLM inference engine built around speculative decoding."""

__version__ = "0.1.0"
