"""Plot speculative / plain tokens per second by batch size from ``spec_iteration.py`` JSONs
(one line per file and variant), with the plain rates in the legend.

    python benchmarks/plot_speed.py --out ratios.png run5.json:unfused run9.json:default
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SIZES = (1, 8, 32, 64)
VARIANTS = ("eagle_adaptive", "eagle_s5")


def ratios(path: Path) -> tuple[dict[str, list[float]], float]:
    """{variant: [spec / plain at each batch size]}, and the plain bs-1 rate (tok/s)."""
    speed = json.loads(path.read_text())["speed_smollm2"]
    rate = {k: v["output_tok_s"] for k, v in speed.items() if isinstance(v, dict) and "output_tok_s" in v}
    out = {v: [rate[f"{v}_greedy_bs{b}"] / rate[f"plain_greedy_bs{b}"] for b in SIZES] for v in VARIANTS}
    return out, rate["plain_greedy_bs1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="FILE.json:LABEL")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in args.runs:
        path, _, label = run.partition(":")
        r, plain1 = ratios(Path(path))
        for v, style in zip(VARIANTS, ("-o", "--s")):
            ax.plot(range(len(SIZES)), r[v], style, label=f"{label or path}, {v.removeprefix('eagle_')} (plain bs 1: {plain1:.0f} tok/s)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(SIZES)), [f"bs {b}" for b in SIZES])
    ax.set_ylabel("speculative / plain tokens/s")
    ax.set_title("SmolLM2-135M + EAGLE-3 head, greedy, H100 bf16")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
