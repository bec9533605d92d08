"""decode_kernels.py --tune with a wider candidate list (scratch: finds whether the shipped sweep
misses faster configs for the 8B shape's verify GEMMs)."""
import runpy
import sys

from updraft.ops import gemv_config as gc
from updraft.ops.gemv_config import GemvConfig


def wide(kind: str, n: int, k: int, bucket: int, head_dim: int = 0) -> list[GemvConfig]:
    out = set(ORIG(kind, n, k, bucket, head_dim))
    for dot in ((False,) if bucket == 1 else (False, True)):
        for block in ((8, 16, 32, 64) if dot else (2, 4, 8)):
            for bk in (256, 512, 1024, 2048):
                for warps, stages in ((4, 3), (4, 4), (4, 5), (8, 3), (8, 4), (8, 5)):
                    cfg = GemvConfig(block, min(bk, gc.triton_next_pow2(k)), dot, warps, stages)
                    rows = cfg.rows(kind)
                    if not gc.allowed(kind, cfg, head_dim):
                        continue
                    if not dot and rows * bucket * cfg.block_k > 32768:
                        continue
                    bm = cfg.block_m(bucket)
                    if dot and stages * (rows + bm) * cfg.block_k * 2 > 200 * 1024:
                        continue
                    if -(-gc.units(kind, n, head_dim) // block) < 16:
                        continue
                    out.add(cfg)
    return sorted(out, key=lambda c: (c.dot, c.block_n, c.block_k, c.num_warps, c.num_stages))


ORIG = gc.candidates
gc.candidates = wide
sys.argv = ["benchmarks/decode_kernels.py"] + sys.argv[1:]
runpy.run_path("benchmarks/decode_kernels.py", run_name="__main__")
