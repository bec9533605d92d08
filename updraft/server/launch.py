"""``updraft serve``: load the engine, log what is served, run uvicorn until SIGTERM/SIGINT.

Shutdown (SIGTERM or Ctrl-C): uvicorn stops accepting connections, lets in-flight responses run
for ``--shutdown-grace`` seconds, then cancels them (their requests are aborted); the app's
lifespan then stops the engine thread and the process exits. A second Ctrl-C exits at once.

Importing this module is cheap (no fastapi/uvicorn/torch); ``cmd_serve`` imports them.
"""

from __future__ import annotations

import argparse
import logging
import socket
from typing import Any

from updraft.server.settings import ServerSettings

logger = logging.getLogger("updraft.server")


def add_serve_parser(sub: Any) -> None:
    """Add the ``serve`` subcommand to the ``updraft`` parser's subparsers."""
    from updraft.cli import add_engine_args

    p: argparse.ArgumentParser = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (FastAPI + uvicorn)"
    )
    add_engine_args(p)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    g.add_argument(
        "--port", type=int, default=8000, help="port (default: 8000; 0 = any free port, logged)"
    )
    g.add_argument(
        "--served-model-name", help="model name clients must use (default: the --model value)"
    )
    g.add_argument(
        "--max-queue",
        type=int,
        default=ServerSettings.max_queue,
        help="most requests waiting for a running slot; beyond it, 503 with Retry-After "
        f"(default: {ServerSettings.max_queue})",
    )
    g.add_argument(
        "--log-interval",
        type=float,
        default=ServerSettings.log_interval_s,
        help=f"seconds between stats log lines; 0 = off (default: {ServerSettings.log_interval_s})",
    )
    g.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        help="seconds in-flight requests get at shutdown (default: 10)",
    )
    g.add_argument("--access-log", action="store_true", help="log every HTTP request")
    g.add_argument(
        "--enable-fault-injection",
        action="store_true",
        help="TEST ONLY: honour the x-updraft-fault request header (forward failures, engine crash)",
    )
    p.set_defaults(func=cmd_serve)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    from updraft.errors import UpdraftError

    if args.max_queue < 1:
        raise UpdraftError(f"--max-queue={args.max_queue} is invalid: must be >= 1")
    if args.log_interval < 0:
        raise UpdraftError(f"--log-interval={args.log_interval} is invalid: must be >= 0")
    if args.shutdown_grace < 0:
        raise UpdraftError(f"--shutdown-grace={args.shutdown_grace} is invalid: must be >= 0")
    settings = ServerSettings(
        served_model_name=args.served_model_name or args.model,
        max_queue=args.max_queue,
        log_interval_s=args.log_interval,
    )
    if args.enable_fault_injection:
        settings.enable_fault_injection = True
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from updraft.cli import engine_config_from_args
    from updraft.engine.engine import Engine
    from updraft.errors import UpdraftError
    from updraft.server.app import build_app, engine_description

    # Startup and stats lines are INFO; show them whatever the global --log-level says.
    logging.getLogger("updraft.server").setLevel(logging.INFO)
    settings = settings_from_args(args)
    engine_cfg = engine_config_from_args(args)
    try:  # bind before loading the model: a taken port fails fast
        sock = socket.create_server((args.host, args.port))
    except OSError as exc:
        raise UpdraftError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    engine = Engine(engine_cfg)
    for line in engine_description(engine, settings):
        logger.info("%s", line)
    if settings.enable_fault_injection:
        logger.warning("fault injection is ON (x-updraft-fault header): for tests only")
    app = build_app(engine, settings)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        log_level="info",
        access_log=args.access_log,
        timeout_graceful_shutdown=args.shutdown_grace,
        timeout_keep_alive=5,
    )
    server = uvicorn.Server(config)
    logger.info(
        "serving %r on http://%s:%d (OpenAI API under /v1)", settings.served_model_name, host, port
    )
    server.run(sockets=[sock])
    return 0
