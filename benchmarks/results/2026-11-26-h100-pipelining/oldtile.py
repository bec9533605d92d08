"""Run a benchmark with the MLA decode-kernel tiles before 2026-11-27: 2 stages (one latent buffer,
no slot prefetch), 64-key tiles for 16 rows and 32-key tiles for 32, the 4-wave split policy."""
import runpy
import sys

from updraft.attention.mla_backend import MLABackend
from updraft.attention.triton_kernels import TileConfig

orig = MLABackend._tile


def old_tile(self, use_decode, max_ext):
    t = orig(self, use_decode, max_ext)
    if not use_decode or t.num_stages < 3:
        return t
    block_n = 64 if t.block_rows <= 16 else 32
    factor = self.min_split_rows if max_ext <= 1 else self.verify_min_split_rows
    return TileConfig(t.block_rows, block_n, max(2 * block_n, factor * t.block_rows), t.num_warps, 2)


MLABackend._tile = old_tile
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
