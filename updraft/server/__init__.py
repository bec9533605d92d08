"""OpenAI-compatible HTTP server: ``updraft serve`` (FastAPI + uvicorn).

Modules:

* ``launch``: the ``serve`` subcommand (flags, startup log, uvicorn, SIGTERM handling).
* ``app``: the FastAPI app: routes, OpenAI-style errors, lifespan, periodic stats log.
* ``serving``: ``/v1/completions`` and ``/v1/chat/completions`` (validation, tokenisation,
  context checks, admission).
* ``responses``: OpenAI response pieces (logprobs, SSE framing, streaming / collecting).
* ``generation``: one HTTP request's choices on the server loop (detokenisation, stop strings,
  aborts, timings, usage).
* ``engine_thread``: the thread that owns the ``Engine`` and runs its step loop; the only code
  that touches it. Talks to handlers through a command inbox and per-request asyncio queues.
* ``protocol``: pydantic request models and the API error type.
* ``metrics``: Prometheus registry per server instance (vLLM metric names, ``updraft:`` prefix).
* ``settings`` / ``state``: per-instance options and shared state.

Threads: the uvicorn event loop (HTTP, tokenisation via worker threads, detokenisation) and the
engine thread (scheduling, forwards, sampling). Neither ever waits on the other: see
``engine_thread`` for the hand-off and ``generation`` for why text is made on the HTTP side.
"""
