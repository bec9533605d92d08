"""Run a benchmark script with the fused iteration's end as before 2026-11-26: the torch op
sequence instead of the commit kernel, torch's argmax for the verify's greedy picks and for
drafts over vocabularies past one tile. Usage: old_tail.py SCRIPT ARGS..."""
import runpy
import sys

from updraft.spec import commit as cm
from updraft.spec import fused

fused.commit = cm.commit_torch


def _argmax(out, logits):
    return out.argmax.view(logits.shape[:-1]) if out.argmax is not None else logits.argmax(-1)


fused._argmax = _argmax
orig_choose = fused.FusedIteration._choose


def _choose(self, logits, prm, u, out):
    if (prm is None or u is None or out is None) and logits.shape[-1] > fused.sampling_kernels.MAX_TOPK_ROW:
        ids = logits.argmax(-1)
        return self.to_target(ids) if self.to_target else ids
    return orig_choose(self, logits, prm, u, out)


fused.FusedIteration._choose = _choose
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
