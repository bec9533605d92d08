"""Held-out acceptance of a draft head against the training positions it has seen, from the
``train_log.json`` that ``updraft train-draft`` writes (its evaluations accumulate across
``--resume`` runs, each with ``tokens_seen``).

Prints a table (step, positions seen, per-step accuracy, expected accept length, and the
greedy-chain accept length where the log has it: the engine's figure simulated on the held-out
sequences) and draws ``learning_curve.png``: accept lengths and per-step accuracy against
training positions (log x axis). A curve still rising at the end says more steps (or data) would pay; a flat one
with a train/held-out gap says data, one flat at both says head capacity or the features. When
several logs are given, each is drawn (e.g. an earlier head beside the new one). Example:

    python benchmarks/learning_curve.py OUT/head/train_log.json --out benchmarks/results/DATE/
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def curve(log: dict[str, Any]) -> list[dict[str, Any]]:
    """The held-out evaluations in step order, one per step (a resumed run repeats none)."""
    seen: dict[int, dict[str, Any]] = {}
    for e in log.get("held_out_evals", []):
        seen[int(e["step"])] = e
    return [seen[s] for s in sorted(seen)]


def table(name: str, points: list[dict[str, Any]]) -> str:
    lines = [f"{name}", f"{'step':>6} {'positions':>10} {'accept len':>10} {'chains':>7}  per-step accuracy"]
    for e in points:
        toks = e.get("tokens_seen")
        lines.append(
            f"{e['step']:>6} {(f'{toks / 1e6:.1f}M' if toks is not None else '?'):>10} "
            f"{e['expected_accept_length']:>10.2f} {e.get('chain_accept_length', float('nan')):>7.2f}  "
            f"{[round(a, 3) for a in e['acc']]}"
        )
    return "\n".join(lines)


def plot(logs: list[tuple[str, list[dict[str, Any]]]], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, pts in logs:
        pts = [p for p in pts if p.get("tokens_seen")]
        if not pts:
            continue
        x = [p["tokens_seen"] for p in pts]
        ax1.plot(x, [p["expected_accept_length"] for p in pts], marker="o", label=f"{name} (per-step product)")
        chained = [p for p in pts if "chain_accept_length" in p]
        if chained:
            ax1.plot([p["tokens_seen"] for p in chained], [p["chain_accept_length"] for p in chained], marker="s",
                     label=f"{name} (greedy chains, as the engine)")
        for k in range(len(pts[0]["acc"])):
            ax2.plot(x, [p["acc"][k] for p in pts], marker=".", label=f"{name} step {k + 1}")
    for ax, title in ((ax1, "expected accept length (held out, S=5)"), (ax2, "per-step accuracy (held out)")):
        ax.set_xscale("log")
        ax.set_xlabel("training positions seen")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="train_log.json files (NAME=PATH to label one)")
    ap.add_argument("--out", default=".", help="folder for learning_curve.png and learning_curve.txt")
    ap.add_argument("--chain", action="store_true",
                    help="the logs are successive runs of one head (--init-from): draw one curve, each run's positions "
                         "offset by the positions of the runs before it")
    args = ap.parse_args()
    logs = []
    offset = 0
    for item in args.logs:
        name, _, path = item.rpartition("=") if "=" in item else ("", "", item)
        p = Path(path)
        log = json.loads(p.read_text())
        pts = curve(log)
        if args.chain:
            pts = [dict(e, tokens_seen=e["tokens_seen"] + offset, run=name or p.parent.name) for e in pts if "tokens_seen" in e]
            offset += int(log.get("tokens_seen", 0))
        logs.append((name or p.parent.name, pts))
    if args.chain:
        logs = [("+".join(n for n, _ in logs), [e for _, pts in logs for e in pts])]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(table(n, pts) for n, pts in logs)
    print(text)
    (out / "learning_curve.txt").write_text(text + "\n")
    if plot(logs, out / "learning_curve.png"):
        print(f"wrote {out / 'learning_curve.png'}")
    else:
        print("matplotlib missing: no PNG")


if __name__ == "__main__":
    main()
