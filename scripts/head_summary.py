"""The numbers that matter from a ``train-draft`` head folder (``train_log.json``) and, when
present, an ``eval_acceptance.py`` output folder: ``python scripts/head_summary.py HEAD [EVAL]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from updraft.train.report import engine_check_text


def train_summary(log: dict) -> list[str]:
    d, g = log["data"]["train"], log["data"]["generation"]
    f = log["held_out_final"]
    lines = [
        f"device {log['device']}, torch {log['torch']}, precision {log['precision']}",
        f"data: {int(d['sequences'])} seqs, {int(d['tokens'])} tokens ({log['data'].get('data_device', '?')}); generation "
        f"{g.get('generated_tokens', 0):.0f} tokens in {g.get('wall_s', 0):.0f}s ({g.get('tokens_per_s', 0):.0f} tok/s, "
        f"{g.get('aborted', 0):.0f} cut); teacher forcing {log['data']['teacher_forcing_s']:.1f}s; "
        f"reused cache {log['data'].get('reused_cache')}",
        f"training: step {log['steps']}/{log['total_steps']} ({log['epochs_seen']:.2f} epochs), {log['train_s']:.0f}s this run, "
        f"stopped by {log['stopped_by']}; {log.get('tokens_seen', 0) / 1e6:.1f}M positions seen, "
        f"{log.get('train_tokens_per_s', 0) / 1e3:.0f}k positions/s; draft vocab coverage {log['data'].get('draft_vocab_coverage')}",
        f"held-out per-step acc {[round(a, 3) for a in f['acc']]} -> expected accept length {f['expected_accept_length']:.2f}, "
        f"greedy chains {f.get('chain_accept_length', float('nan')):.2f} per position "
        f"{[round(x, 3) for x in f.get('chain_per_position', [])]}",
    ]
    e = log.get("engine_acceptance")
    if e:
        lines.append(f"engine, {e['prompts']} held-out prompts: {engine_check_text(e)}")
    return lines


def eval_summary(path: Path) -> list[str]:
    if not path.is_file():
        return ["no eval_acceptance.json (eval skipped, failed or timed out; see run.log)"]
    r = json.loads(path.read_text())
    lines = []
    for name, s in r["sets"].items():
        sp = s.get("speed_bs1")
        extra = (f"; bs1 {sp['spec_tok_s']:.0f} vs {sp['base_tok_s']:.0f} tok/s = {sp['speedup']:.2f}x "
                 f"(decode {sp['decode_speedup']:.2f}x), equal {s['outputs_equal']}/{s['outputs_compared']}") if sp else ""
        lines.append(f"{name:10s} n={s['prompts']:3d} accept length {s['mean_accept_length']:.2f} "
                     f"per position {[round(x, 2) for x in s['per_position']]}{extra}")
    return lines


def main(argv: list[str]) -> int:
    head = Path(argv[1])
    log_path = head / "train_log.json"
    lines = train_summary(json.loads(log_path.read_text())) if log_path.is_file() else [f"no {log_path}"]
    if len(argv) > 2:
        lines += eval_summary(Path(argv[2]) / "eval_acceptance.json")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
