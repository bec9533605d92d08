"""Call 7: one user cache per candidate config of SmolLM2's 48-row QKV or gate/up (the two
GEMMs whose 48-row launches still take ~1.5x their 8-row time in the cycle), so each run of the
cycle measures one candidate in place (the sweep's back-to-back timing ranked them differently).

    python insitu_variants.py DIR  ->  DIR/<name>/gemv_configs.json
"""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from updraft.ops import gemv_config
from updraft.ops.gemv_config import GemvConfig

DEV = torch.device("cuda")
QKV = gemv_config.key("qkv", 960, 576, 64, torch.bfloat16, DEV, 64)
GATE_UP = gemv_config.key("gate_up", 1536, 576, 64, torch.bfloat16, DEV)
VARIANTS = {
    "qkv_8_128_m16": (QKV, GemvConfig(8, 128, True, 4, 3, 16)),
    "qkv_16_128_m16": (QKV, GemvConfig(16, 128, True, 4, 3, 16)),
    "qkv_8_256_m16": (QKV, GemvConfig(8, 256, True, 4, 3, 16)),
    "qkv_8_64_m32w8": (QKV, GemvConfig(8, 64, True, 8, 3, 32)),
    "gate_up_16_128_m16": (GATE_UP, GemvConfig(16, 128, True, 4, 3, 16)),
    "gate_up_32_128_m16": (GATE_UP, GemvConfig(32, 128, True, 4, 3, 16)),
    "gate_up_16_256_m16": (GATE_UP, GemvConfig(16, 256, True, 4, 3, 16)),
    "gate_up_16_64_m32w8": (GATE_UP, GemvConfig(16, 64, True, 8, 3, 32)),
}
out = Path(sys.argv[1])
for name, (k, cfg) in VARIANTS.items():
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "gemv_configs.json").write_text(json.dumps({k: asdict(cfg)}, indent=1))
print(" ".join(VARIANTS))
