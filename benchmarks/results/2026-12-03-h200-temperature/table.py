"""Prints this folder's table from the JSONs: accept lengths with the lookup assist of the shipped head (run C of
../2026-12-03-h200-double-data) and of run F (C fine-tuned on answers at T 0.3)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
SETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa"]
RUNS = [("C = shipped v6e (T 0.5)", HERE.parent / "2026-12-03-h200-double-data" / "c"), ("F (from C, T 0.3)", HERE / "f")]


def main() -> None:
    print("| head | drafts | " + " | ".join(SETS) + " | mean |")
    print("|---|---|" + "---|" * (len(SETS) + 1))
    for name, folder in RUNS:
        sets = json.loads((folder / "assist-eval_acceptance.json").read_text())["sets"]
        cells = [f"{sets[s]['mean_accept_length']:.3f}" for s in SETS]
        cells[0] += f" ({sets['mt_bench']['per_position'][0]:.3f})"
        mean = sum(sets[s]["mean_accept_length"] for s in SETS) / len(SETS)
        print(f"| {name} | lookup assist | " + " | ".join(cells) + f" | {mean:.3f} |")


if __name__ == "__main__":
    main()
