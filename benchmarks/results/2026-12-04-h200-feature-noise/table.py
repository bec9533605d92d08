"""Prints this folder's table from the JSONs: mean accept lengths, own drafts and with the lookup assist, of the
shipped head (run C of ../2026-12-03-h200-double-data), run G (C fine-tuned with --feature-noise 0.1) and run H
(the same without the noise)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
SETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa"]
RUNS = [
    ("C = shipped v6e", HERE.parent / "2026-12-03-h200-double-data" / "c"),
    ("G (from C, noise 0.1, 1,539 steps)", HERE / "g"),
    ("H (from C, no noise, 2,370 steps)", HERE / "h"),
]


def main() -> None:
    print("| head | drafts | " + " | ".join(SETS) + " | mean |")
    print("|---|---|" + "---|" * (len(SETS) + 1))
    for kind, label in (("noassist", "own"), ("assist", "lookup assist")):
        for name, folder in RUNS:
            sets = json.loads((folder / f"{kind}-eval_acceptance.json").read_text())["sets"]
            cells = [f"{sets[s]['mean_accept_length']:.3f}" for s in SETS]
            cells[0] += f" ({sets['mt_bench']['per_position'][0]:.3f})"
            mean = sum(sets[s]["mean_accept_length"] for s in SETS) / len(SETS)
            print(f"| {name} | {label} | " + " | ".join(cells) + f" | {mean:.3f} |")


if __name__ == "__main__":
    main()
