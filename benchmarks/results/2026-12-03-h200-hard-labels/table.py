"""Prints the accept-length table of the hard-label experiment from the eval JSONs in this folder."""

import json
from pathlib import Path

HERE = Path(__file__).parent
ROWS = [
    ("shipped (v6c), own drafts", "call6/noassist-shipped-eval_acceptance.json"),
    ("control (0.0), own drafts", "ctl/noassist-eval_acceptance.json"),
    ("hard 0.5, own drafts", "h05/noassist-eval_acceptance.json"),
    ("hard 1.0, own drafts", "h10/noassist-eval_acceptance.json"),
    ("shipped (v6c), assist", "call6/assist-shipped-eval_acceptance.json"),
    ("hard 0.5, assist", "call6/assist-h05-eval_acceptance.json"),
    ("hard 1.0, assist", "call6/assist-h10-eval_acceptance.json"),
]
SETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa"]

print("| head | " + " | ".join(SETS) + " | mean |")
print("|---|" + "---|" * (len(SETS) + 1))
for name, rel in ROWS:
    sets = json.loads((HERE / rel).read_text())["sets"]
    cells = [f"{sets[s]['mean_accept_length']:.3f}" for s in SETS]
    cells[0] += f" ({sets['mt_bench']['per_position'][0]:.3f})"
    mean = sum(sets[s]["mean_accept_length"] for s in SETS) / len(SETS)
    print(f"| {name} | " + " | ".join(cells) + f" | {mean:.3f} |")
