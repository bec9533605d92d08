"""Per-request decoding state that lives on the device, indexed by request-pool row.

The fused speculative iteration (``updraft.spec.fused``) reads and updates these tensors inside
its graph, so the host never has to know a request's length or last token to launch the next
iteration. The host writes a row only when a request enters decoding (its prefill finished, or
an iteration ran on the per-phase path): ``admit``, a few packed host-to-device copies for all
rows.

Row 0 is the padding row of graph replays: it always holds ``seq_len = 1`` and zeros, so padded
rows read position 0 and write the scratch slot. Graphs that update rows write junk into row 0
(several padded rows share it) and reset it with ``reset_padding`` at the end of their body.

Packing: inside a graph every gather is a kernel node, so the sampling parameters are ONE
float32 table ``sampling`` [rows, NUM_SAMPLING] (one gather per iteration) holding the raw values
and the effective ones derived from them here, once, at admission; the RNG key is one int64
table ``rng`` [rows, 2]. ``temperature`` / ``top_k`` / ... / ``seed`` / ``offset`` are views of
their columns (``top_k`` is float32: exact below 2**24, and any larger value is past every
vocabulary, i.e. off either way).
"""

from __future__ import annotations

import math

import torch

from updraft.runtime.request_view import RequestView
from updraft.runtime.sampler import GREEDY_TEMPERATURE
from updraft.runtime.transfer import to_device

#: Columns of ``RowState.sampling``. Raw (as ``SamplingParams`` has them; what the target's
#: filtered distribution takes, ``rejection_kernels``): TEMP (below GREEDY_TEMPERATURE: greedy),
#: TOP_K (<= 0 or >= vocab: off), TOP_P (>= 1: off), MIN_P (0: off). Effective (what the draft's
#: choice takes, ``sampling_kernels.choose``): TEMP_EFF (1 for greedy rows), TOP_K_EFF (1 for
#: greedy rows: they keep their best candidate), TOP_P_EFF (inf where top-p is off: a running sum
#: rounded to 1 must not drop the tail).
TEMP, TOP_K, TOP_P, MIN_P, TEMP_EFF, TOP_K_EFF, TOP_P_EFF = range(7)
NUM_SAMPLING = 7
#: Columns of ``RowState.rng``: the request's seed and its counter (advanced once per iteration).
SEED, OFFSET = range(2)

#: Offset units per emitted token at admission: a re-admitted request starts beyond every
#: offset its earlier iterations used (each iteration advances the offset by one and emits at
#: least one token), so no random number is ever reused.
OFFSET_PER_TOKEN = 64


def sampling_rows(reqs: list[RequestView]) -> torch.Tensor:
    """[len(reqs), NUM_SAMPLING] float32 (host): the rows of ``RowState.sampling``. The greedy
    test runs on float32 values, as every device reader's ``temperature < GREEDY_TEMPERATURE``."""
    raw = torch.tensor([[r.params.temperature, r.params.top_k, r.params.top_p, r.params.min_p] for r in reqs],
                       dtype=torch.float32)
    temp, top_k, top_p = raw[:, TEMP], raw[:, TOP_K], raw[:, TOP_P]
    greedy = temp < GREEDY_TEMPERATURE
    eff = torch.stack([torch.where(greedy, 1.0, temp), torch.where(greedy, 1.0, top_k),
                       torch.where(top_p < 1, top_p, math.inf)], dim=1)
    return torch.cat([raw, eff], dim=1)


class RowState:
    """Device tensors ``[rows]`` per request-pool row; see the module docstring."""

    def __init__(self, num_rows: int, device: torch.device) -> None:
        self.device = device
        self.num_rows = num_rows
        self.seq_len = torch.ones(num_rows, dtype=torch.int64, device=device)  # committed tokens
        self.bonus = torch.zeros(num_rows, dtype=torch.int64, device=device)  # the last committed token
        # every row (the padding row included) starts greedy, every filter off
        greedy_row = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, math.inf], dtype=torch.float32)
        self.sampling = greedy_row.to(device).repeat(num_rows, 1)
        self.rng = torch.zeros(num_rows, 2, dtype=torch.int64, device=device)
        # Column views (writes through them land in the tables).
        self.temperature, self.top_k, self.top_p, self.min_p = (self.sampling[:, c] for c in (TEMP, TOP_K, TOP_P, MIN_P))
        self.seed = self.rng[:, SEED]
        self.offset = self.rng[:, OFFSET]  # advanced by one in the graph per sampled iteration

    def admit(self, reqs: list[RequestView]) -> None:
        """Write the host's view of ``reqs`` (length, last token, sampling parameters, RNG key)."""
        if not reqs:
            return
        ints = torch.tensor([[r.seq_len, r.last_token, r.rng_seed, len(r.output_ids) * OFFSET_PER_TOKEN] for r in reqs],
                            dtype=torch.int64)
        floats = sampling_rows(reqs)
        rows = torch.tensor([r.row for r in reqs], dtype=torch.long)
        ints, floats, rows = (to_device(t, self.device) for t in (ints, floats, rows))
        self.seq_len[rows] = ints[:, 0]
        self.bonus[rows] = ints[:, 1]
        self.rng[rows] = ints[:, 2:]
        self.sampling[rows] = floats

    def reset_padding(self) -> None:
        """Row 0 back to its padding values (device ops; safe inside a graph)."""
        self.seq_len[:1].fill_(1)
        self.bonus[:1].zero_()
        self.offset[:1].zero_()
