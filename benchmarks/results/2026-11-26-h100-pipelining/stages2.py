"""Run a benchmark with the triton backend's decode tile before the slot prefetch (2 stages)."""
import runpy
import sys

from updraft.attention.triton_backend import TritonBackend

TritonBackend.verify_stages = 2
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
