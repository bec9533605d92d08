"""Write the one-row (M bucket 1) GEMV configs of SmolLM2's four GEMMs as tensor-core dots (each
GEMM's 8-row bucket config) into $UPDRAFT_CACHE/gemv_configs.json, one variant per folder: an
in-step A/B of the FMA tiles the one-row sweep picked (in isolation, before NormedRows)."""

import json
import sys
from pathlib import Path

GPU = "NVIDIA H100 80GB HBM3"
DOT = {"qkv": ("qkv|n=960|k=576|d=64", dict(block_n=8, block_k=256)),
       "o": ("linear|n=576|k=576|d=0", dict(block_n=16, block_k=128)),
       "gate_up": ("gate_up|n=1536|k=576|d=0", dict(block_n=16, block_k=256)),
       "down": ("linear|n=576|k=1536|d=0", dict(block_n=16, block_k=512))}
VARIANTS = {"gate_up": ["gate_up"], "o_down": ["o", "down"], "qkv": ["qkv"], "all": list(DOT)}

root = Path(sys.argv[1])
for name, gemms in VARIANTS.items():
    table = {f"{GPU}|{DOT[g][0]}|m=1|bfloat16": dict(DOT[g][1], dot=True, num_warps=4, num_stages=3) for g in gemms}
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "gemv_configs.json").write_text(json.dumps(table, indent=1))
    print(name, sorted(table))
