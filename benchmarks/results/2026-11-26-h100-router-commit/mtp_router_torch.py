"""mtp_cycle.py with the router's logits as before 2026-11-26 (cast x and weight, cuBLAS fp32)."""
import runpy
import sys

from updraft import ops

ops.float_linear = lambda x, w: ops.dense(x.float(), w.float())
sys.argv = ["benchmarks/mtp_cycle.py"] + sys.argv[1:]
runpy.run_path("benchmarks/mtp_cycle.py", run_name="__main__")
