"""mtp_cycle.py with the MLA decode kernel's splits at most 64 keys long for verify (V) or for
decode and verify (DV) at short contexts: argv[1] in {V, DV}."""
import dataclasses
import runpy
import sys

from updraft.attention.mla_backend import MLABackend

which = sys.argv.pop(1)
orig = MLABackend._tile


def tile(self, use_decode, max_ext):
    t = orig(self, use_decode, max_ext)
    if use_decode and t.num_stages >= 3 and (max_ext > 1 or which == "DV"):
        return dataclasses.replace(t, min_split=64)
    return t


MLABackend._tile = tile
sys.argv = ["benchmarks/mtp_cycle.py"] + sys.argv[1:]
runpy.run_path("benchmarks/mtp_cycle.py", run_name="__main__")
