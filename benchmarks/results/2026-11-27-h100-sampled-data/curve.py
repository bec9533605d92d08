"""The accept length of each head of this folder against the sampled tokens it was fine-tuned on
since the shipped head (the chain call 6 -> call 8 -> call 11, plotted; call 5 branched from the
shipped head, call 15 from call 11 on another prompt set). Reads the eval JSONs and run logs
beside it; writes curve.png and prints the table.

    python benchmarks/results/2026-11-27-h100-sampled-data/curve.py
"""

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
# (label, eval JSON, run log or None, the run it continued, on the plotted chain)
RUNS = [
    ("shipped", "call7-shipped-eval_acceptance.json", None, None, True),
    ("t08 (8k prompts)", "call5-t08-eval_acceptance.json", "call5-t08-run.log", "shipped", False),
    ("t08b", "call6-t08b-eval_acceptance.json", "call6-t08b-run.log", "shipped", True),
    ("t08d", "call8-t08d-eval_acceptance.json", "call8-t08d-run.log", "t08b", True),
    ("t08e (shipped now)", "call11-t08e-eval_acceptance.json", "call11-t08e-run.log", "t08d", True),
    ("v4t08 (set v4)", "call15-v4t08-eval_acceptance.json", "call15-v4t08-run.log", "t08e (shipped now)", False),
]
SETS = ("mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa")


def generated(log: str) -> int:
    m = re.search(r"generation (\d+) tokens in", (HERE / log).read_text())
    assert m, log
    return int(m.group(1))


def main() -> None:
    seen: dict[str, int] = {}
    rows = []
    for label, ev, log, parent, on_chain in RUNS:
        sets = json.loads((HERE / ev).read_text())["sets"]
        acc = {s: sets[s]["mean_accept_length"] for s in SETS}
        seen[label] = (seen[parent] if parent else 0) + (generated(log) if log else 0)
        rows.append((label, seen[label], acc, sets["mt_bench"]["per_position"][0], on_chain))
    print(f"{'head':20s} {'tokens':>8s} " + " ".join(f"{s:>9s}" for s in SETS) + "      mean  first")
    for label, n, acc, first, _ in rows:
        mean = sum(acc.values()) / len(acc)
        print(f"{label:20s} {n / 1e6:7.2f}M " + " ".join(f"{acc[s]:9.3f}" for s in SETS) + f" {mean:9.3f}  {first:.3f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    chain = [r for r in rows if r[4]]
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in SETS:
        ax.plot([r[1] / 1e6 for r in chain], [r[2][s] for r in chain], marker="o", label=s)
    ax.plot([r[1] / 1e6 for r in chain], [sum(r[2].values()) / len(SETS) for r in chain], "k--", marker="s",
            label="mean of six")
    ax.axhline(3.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("sampled (T = 0.8) tokens fine-tuned on since the shipped head (millions)")
    ax.set_ylabel("mean accept length, greedy S = 5")
    ax.set_title("builtin:smollm2, fine-tunes on sampled responses (H100, bf16)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=110)


if __name__ == "__main__":
    main()
