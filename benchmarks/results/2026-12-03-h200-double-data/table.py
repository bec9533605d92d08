"""Prints this folder's tables from its JSONs: accept lengths of runs A, B, C (own drafts and with the lookup
assist) and spec / plain with heads A (call 5) and C (call 7)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
SETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa"]
RUNS = [("A (32k prompts, T 0.8, from v6d)", "a"), ("B (32k, T 0.8, from A)", "b"), ("C (32k, T 0.5, from A)", "c")]
SPEED = [("bs 1 greedy", "greedy_bs1"), ("bs 1 T 0.7 top-p 0.9", "sampled_bs1"), ("bs 8", "greedy_bs8"),
         ("bs 32", "greedy_bs32"), ("bs 64", "greedy_bs64")]


def accept_table() -> None:
    print("| head | drafts | " + " | ".join(SETS) + " | mean |")
    print("|---|---|" + "---|" * (len(SETS) + 1))
    for kind in ("noassist", "assist"):
        for name, d in RUNS:
            sets = json.loads((HERE / d / f"{kind}-eval_acceptance.json").read_text())["sets"]
            cells = [f"{sets[s]['mean_accept_length']:.3f}" for s in SETS]
            cells[0] += f" ({sets['mt_bench']['per_position'][0]:.3f})"
            mean = sum(sets[s]["mean_accept_length"] for s in SETS) / len(SETS)
            label = "own" if kind == "noassist" else "lookup assist"
            print(f"| {name} | {label} | " + " | ".join(cells) + f" | {mean:.3f} |")


def speed_table() -> None:
    print("\n| | head A: plain / spec tok/s | spec / plain | head C: plain / spec tok/s | spec / plain |")
    print("|---|---|---|---|---|")
    runs = [json.loads((HERE / c / "spec_iteration.json").read_text())["speed_smollm2"] for c in ("call5", "call7")]
    for label, key in SPEED:
        cells = []
        for r in runs:
            p, s = r[f"plain_{key}"]["output_tok_s"], r[f"eagle_adaptive_{key}"]["output_tok_s"]
            cells += [f"{p:,.0f} / {s:,.0f}", f"{s / p:.2f}x"]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (("n-gram, sum, bs 1", "sum_bs1"), ("n-gram, sum, bs 64", "sum_bs64")):
        cells = []
        for r in runs:
            p, s = r[f"plain_{key}"]["output_tok_s"], r[f"ngram_{key}"]["output_tok_s"]
            cells += [f"{p:,.0f} / {s:,.0f}", f"{s / p:.2f}x"]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    accept_table()
    speed_table()
