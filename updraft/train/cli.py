"""``updraft train-draft``: argparse only at import (torch and the trainer load when it runs).
Flags and defaults come from ``TrainConfig``; bad values give one ``error: ...`` line (exit 2)."""

from __future__ import annotations

import argparse
import dataclasses
import time

from updraft.train.config import TrainConfig

#: Short spellings kept for the flags people type most.
ALIASES = {"target": ["--model"], "time_budget": ["--budget"]}


def _scalar(annotation: str) -> tuple[type | None, bool]:
    ann = annotation.replace(" ", "").removesuffix("|None")
    return {"int": int, "float": float, "str": str, "bool": bool}.get(ann), annotation.replace(" ", "").endswith("|None")


def add_train_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train-draft",
        help="train an EAGLE / EAGLE-3 draft head for a target by self-distillation",
        description=(
            "The target answers updraft's own prompt set through the engine; the head learns its hidden "
            "states and tokens (EAGLE-1: feature regression + token cross-entropy; EAGLE-3: cross-entropy "
            "over a draft vocabulary), unrolled over --ttt-steps draft steps. Writes an HF-format head "
            "folder that --speculative-draft-model-path loads."
        ),
    )
    for f in dataclasses.fields(TrainConfig):
        scalar, _ = _scalar(str(f.type))
        assert scalar is not None, f.name
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "").replace("%", "%%")  # argparse formats help with %
        if scalar is bool:
            if f.default:
                p.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", default=True, help=help_text)
            else:
                p.add_argument(flag, dest=f.name, action="store_true", default=False, help=help_text)
            continue
        shown = f" (default: {f.default})".replace("%", "%%") if f.default not in (None, "") else ""
        p.add_argument(flag, *ALIASES.get(f.name, []), dest=f.name, type=scalar, default=f.default, help=help_text + shown)
    p.set_defaults(func=cmd_train_draft)
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    kwargs = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    return TrainConfig(**kwargs).validate()


def cmd_train_draft(args: argparse.Namespace) -> int:
    start = time.time()
    cfg = config_from_args(args)
    from updraft.train.trainer import train

    train(cfg, start_time=start)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m updraft.train.cli ...``: the same command without the rest of the ``updraft`` CLI."""
    import argparse as ap
    import sys

    parser = ap.ArgumentParser(prog="updraft")
    add_train_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["train-draft", *(sys.argv[1:] if argv is None else argv)])
    try:
        return cmd_train_draft(args)
    except (ValueError, FileNotFoundError) as exc:  # UpdraftError is a ValueError
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
