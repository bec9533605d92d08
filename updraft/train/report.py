"""What a training run leaves beside its head: the log (``train_log.json``, written atomically) and
the model card (``README.md``) summarising data, schedule and measured acceptance."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def engine_check_text(e: dict[str, Any]) -> str:
    """The final engine check's figures. A check the time budget cut (the engine's build and graph
    capture can take the rest of it) says so: one cut before its first verify step has no figure,
    not an accept length of 0."""
    steps, cut = e.get("verify_steps"), e.get("cut_at_deadline", False)
    if cut and not steps:
        return "cut by the time budget before its first verify step: no figure"
    text = (f"mean accept length {e['mean_accept_length']:.2f}, "
            f"per position {[round(x, 3) for x in e['per_position']]}")
    return text + (f" (cut by the time budget after {steps} verify steps)" if cut else "")


def write_model_card(out: Path, r: dict[str, Any]) -> None:
    cfg = r["config"]
    d = r["data"]["train"]
    est = r["held_out_final"]
    lines = [
        f"# EAGLE draft head ({cfg['method']}) for {cfg['target']}",
        "",
        "Trained by `updraft train-draft` (self-distillation on updraft's own generated prompt set;",
        "no evaluation-set prompts). Serve it with `--speculative-algorithm "
        f"{'EAGLE3' if cfg['method'] == 'eagle3' else 'EAGLE'} --speculative-draft-model-path <this folder>`.",
        "",
        f"- device: {r['device']}, torch {r['torch']}, precision {r['precision']}",
        f"- data: {int(d['sequences'])} sequences, {int(d['tokens'])} tokens ({int(d['training_positions'])} training positions)",
        f"- training: {r['steps']} steps, {r['epochs_seen']:.2f} epochs, {r['train_s']:.0f}s; ttt_steps={cfg['ttt_steps']}, lr={cfg['lr']}",
        f"- held-out per-step accuracy {[round(a, 3) for a in est['acc']]} -> expected accept length {est['expected_accept_length']:.2f} (chain S={cfg['spec_steps']}); "
        f"greedy chains simulated on the held-out sequences (the engine's measure) {est.get('chain_accept_length', float('nan')):.2f}",
    ]
    e = r.get("engine_acceptance")
    if e:
        lines.append(
            f"- engine, {e['prompts']} held-out prompts x {e['max_tokens']} tokens, greedy: {engine_check_text(e)}"
        )
    lines += ["", "Full log: `train_log.json`.", ""]
    (out / "README.md").write_text("\n".join(lines))
