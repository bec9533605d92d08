"""Accept length (own drafts: no lookup assist) of the heads of this folder against the sampled
tokens of prompt set v6 they were fine-tuned on since the 2026-11-27 head (shipped -> v6a ->
v6b). Reads the eval JSONs and run logs beside it; writes curve.png and prints the table.

    python benchmarks/results/2026-12-03-h200-free-turns/curve.py
"""

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
# (label, eval JSON without the assist, the fine-tune's run log or None)
RUNS = [
    ("2026-11-27 head", "call6/noassist-shipped-eval_acceptance.json", None),
    ("v6a", "call6/noassist-v6a-eval_acceptance.json", "call4-v6/run.log"),
    ("v6b (shipped now)", "call6/noassist-v6b-eval_acceptance.json", "call6/v6b-run.log"),
]
SETS = ("mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa")


def generated(log: str) -> int:
    m = re.search(r"generation (\d+) tokens in", (HERE / log).read_text())
    assert m, log
    return int(m.group(1))


def main() -> None:
    rows, seen = [], 0
    for label, ev, log in RUNS:
        sets = json.loads((HERE / ev).read_text())["sets"]
        seen += generated(log) if log else 0
        rows.append((label, seen, {s: sets[s]["mean_accept_length"] for s in SETS}, sets["mt_bench"]["per_position"][0]))
    print(f"{'head':20s} {'tokens':>8s} " + " ".join(f"{s:>9s}" for s in SETS) + "      mean  first")
    for label, n, acc, first in rows:
        mean = sum(acc.values()) / len(acc)
        print(f"{label:20s} {n / 1e6:7.2f}M " + " ".join(f"{acc[s]:9.3f}" for s in SETS) + f" {mean:9.3f}  {first:.3f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r[1] / 1e6 for r in rows]
    for s in SETS:
        ax.plot(xs, [r[2][s] for r in rows], marker="o", label=s)
    ax.plot(xs, [sum(r[2].values()) / len(SETS) for r in rows], "k--", marker="s", label="mean of six")
    ax.axhline(3.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("sampled (T = 0.8) tokens of prompt set v6 fine-tuned on (millions)")
    ax.set_ylabel("mean accept length, greedy S = 5, own drafts")
    ax.set_title("builtin:smollm2 fine-tuned on free user turns (H200, bf16)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=110)


if __name__ == "__main__":
    main()
