"""OpenAI-compatible request models (pydantic 2) and the error type of the HTTP API.

Conventions:

* Requests are parsed with ``model_validate_json`` in strict mode: a JSON string is never coerced
  into a number or a boolean, an integer field refuses ``1.5``, NaN/Infinity are refused. Unknown
  fields are ignored (clients send fields such as ``user`` or ``metadata``), but known fields
  whose non-default values we cannot honour (``echo``, ``logit_bias``, ``tools`` ...) are refused.
* Fields whose OpenAI type is a union (``prompt``, ``stop``, message ``content``) are declared
  ``Any`` and checked by a validator with one clear message, so the error names the field
  instead of listing every union member pydantic tried.
* Every validation failure becomes :class:`APIError` (HTTP 400) whose body is OpenAI's
  ``{"error": {"message", "type", "param", "code"}}`` with ``param`` naming the field
  (``messages[0].content`` style for nested fields).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_LOGPROBS = 20  # the sampler returns at most this many top logprobs per token
MAX_N = 16  # choices per request
MAX_STOP = 16  # stop strings per request
SEED_LIMIT = 2**63  # seeds are torch generator seeds: 0 <= seed < 2**63


class APIError(Exception):
    """An error answered as an OpenAI-style JSON body with the given HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind  # OpenAI's error "type"
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def _loc_to_param(loc: tuple[int | str, ...]) -> str | None:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or None


_CODES = {
    "missing": "missing_required_parameter",
    "json_invalid": "invalid_json",
    "model_type": "invalid_type",
}


def validation_error(exc: ValidationError) -> APIError:
    """The first pydantic error as a 400 naming the field."""
    err = exc.errors(include_url=False)[0]
    param = _loc_to_param(tuple(err.get("loc", ())))
    kind = str(err.get("type", ""))
    msg = str(err.get("msg", "invalid value"))
    if kind == "json_invalid":
        return bad_request(
            f"request body is not valid JSON: {err.get('ctx', {}).get('error', msg)}",
            None,
            "invalid_json",
        )
    if kind == "model_type" and param is None:
        return bad_request("request body must be a JSON object", None, "invalid_type")
    if kind.startswith("value_error"):
        msg = msg.removeprefix("Value error, ")
    detail = f"{param}: {msg}" if param else msg
    if kind != "missing" and "input" in err and param is not None:
        shown = repr(err["input"])
        detail += f" (got {shown[:60] + '...' if len(shown) > 60 else shown})"
    code = _CODES.get(kind, "invalid_type" if kind.endswith("_type") else "invalid_value")
    return bad_request(detail, param, code)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool = False


class _SamplingRequest(_Strict):
    """Fields shared by completions and chat completions (OpenAI names plus vLLM extensions)."""

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    stop: Any = None  # str | list[str] | None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, v: Any) -> list[str]:
        if v is None:
            return []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise ValueError("must be a string or a list of strings")
        if any(not s for s in v):
            raise ValueError("stop strings must be non-empty")
        if len(v) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings")
        return list(v)

    @field_validator("stop_token_ids")
    @classmethod
    def _check_stop_ids(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(t < 0 for t in v):
            raise ValueError("token ids must be >= 0")
        return v


class CompletionRequest(_SamplingRequest):
    """``POST /v1/completions``."""

    prompt: Any  # str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=MAX_N)

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, v: Any) -> list[str] | list[list[int]]:
        """Normalised to a non-empty list of prompts, each a string or a list of token ids."""
        shape = (
            "must be a string, a list of strings, a list of token ids or a list of token-id lists"
        )
        if isinstance(v, str):
            v = [v]
        elif isinstance(v, list) and v and all(type(t) is int for t in v):
            v = [v]
        if not isinstance(v, list) or not v:
            raise ValueError(f"{shape} (and not empty)")
        if all(isinstance(p, str) for p in v):
            if any(not p for p in v):
                raise ValueError("is empty: give at least one character")
            return list(v)
        if all(isinstance(p, list) and all(type(t) is int for t in p) for p in v):
            if any(not p for p in v):
                raise ValueError("is empty: give at least one token")
            return [list(p) for p in v]
        raise ValueError(shape)


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None  # str | list[{"type": "text", "text": str}] | None
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _check_content(cls, v: Any) -> str | None:
        """Normalised to a string (text parts joined); only text content is supported."""
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, list):
            parts: list[str] = []
            for i, part in enumerate(v):
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    raise ValueError(
                        f"part {i} must be {{'type': 'text', 'text': str}} (only text content is supported)"
                    )
                parts.append(part["text"])
            return "".join(parts)
        raise ValueError("must be a string, a list of text parts, or null")


class ResponseFormat(_Strict):
    type: Literal["text"]


class ChatCompletionRequest(_SamplingRequest):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
