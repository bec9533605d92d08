"""Where the head's acceptance comes from (issue 13, deliverable 3): left, own-draft accept length
(no lookup assist) of each prompt-set-v6 fine-tune against the fresh v6 tokens seen since the
2026-11-27 head (three runs; the deep head beside the third); right, the held-out estimate inside
calls 4 and 5 against training positions (one layer against two, same data and schedule). Reads
the logs beside it and in ../2026-12-03-h200-free-turns/; writes curve.png, prints the table.

    python benchmarks/results/2026-12-03-h200-deep-head/curve.py
"""

import ast
import json
import re
from pathlib import Path

HERE = Path(__file__).parent
EARLIER = HERE.parent / "2026-12-03-h200-free-turns"
# (label, eval log without the assist, the fine-tune's run log or None: tokens it generated)
HEADS = [
    ("2026-11-27 head", EARLIER / "call6/noassist-shipped.log", None),
    ("v6a", EARLIER / "call6/noassist-v6a.log", EARLIER / "call4-v6/run.log"),
    ("v6b", EARLIER / "call6/noassist-v6b.log", EARLIER / "call6/v6b-run.log"),
    ("v6c (shipped now)", HERE / "call4/noassist-ctl.log", HERE / "call4/ctl-run.log"),
]
DEEP = ("two layers, v6c's data", HERE / "call5/noassist-deep.log")
TRAIN_LOGS = [("one layer (v6c)", HERE / "call4/ctl-train_log.json"), ("two layers", HERE / "call5/deep-train_log.json")]


def per_set(log: Path) -> tuple[dict[str, float], float]:
    """The eval's accept length per set and mt_bench's first-position acceptance."""
    text = log.read_text()
    sets = ast.literal_eval(re.search(r"mean accept length per set: (\{.*?\})", text).group(1))  # type: ignore[union-attr]
    first = float(re.search(r"^mt_bench .*?per position \[([0-9.]+),", text, re.M).group(1))  # type: ignore[union-attr]
    return sets, first


def generated(log: Path) -> int:
    return int(re.search(r"generation (\d+) tokens in", log.read_text()).group(1))  # type: ignore[union-attr]


def main() -> None:
    rows, seen = [], 0
    for label, ev, run in HEADS:
        seen += generated(run) if run else 0
        rows.append((label, seen, *per_set(ev)))
    deep = (DEEP[0], seen, *per_set(DEEP[1]))
    names = list(rows[0][2])
    print(f"{'head':24s} {'v6 tokens':>9s} " + " ".join(f"{s:>9s}" for s in names) + "      mean  first")
    for label, n, acc, first in [*rows, deep]:
        print(f"{label:24s} {n / 1e6:8.2f}M " + " ".join(f"{acc[s]:9.3f}" for s in names)
              + f" {sum(acc.values()) / len(acc):9.3f}  {first:.2f}")
    curves = []
    for label, path in TRAIN_LOGS:
        evals = json.loads(path.read_text())["held_out_evals"]
        curves.append((label, [e["step"] for e in evals], [e["expected_accept_length"] for e in evals]))
        print(f"{label}: held-out expected accept length by step " + ", ".join(f"{s}: {v:.3f}" for s, v in zip(*curves[-1][1:])))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r[1] / 1e6 for r in rows]
    for s in names:
        left.plot(xs, [r[2][s] for r in rows], marker="o", lw=1, label=s)
    left.plot(xs, [sum(r[2].values()) / len(names) for r in rows], "k--", marker="s", label="mean of six")
    left.plot([deep[1] / 1e6], [deep[2]["mt_bench"]], "r*", ms=10, label="mt_bench, two layers")
    left.axhline(3.0, color="grey", lw=0.8, ls=":")
    left.set_xlabel("fresh v6 tokens fine-tuned on since the 2026-11-27 head (millions)")
    left.set_ylabel("mean accept length, greedy S = 5, own drafts")
    left.legend(fontsize=7, ncol=2)
    for label, steps, vals in curves:
        right.plot(steps, vals, marker="o", label=label)
    right.set_xlabel("training step (2,500 steps = 13.7M positions, 3.55 epochs)")
    right.set_ylabel("held-out expected accept length (48 v6 prompts)")
    right.legend(fontsize=8)
    fig.suptitle("builtin:smollm2 on the H200: fresh data moves it slowly, a second layer does not")
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=110)


if __name__ == "__main__":
    main()
