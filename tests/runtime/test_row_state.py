"""``RowState``: admission writes the packed tables (raw and effective sampling parameters, the
RNG key), the column views alias them, and the padding row stays greedy."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from updraft.runtime import row_state as rs
from updraft.runtime.row_state import RowState
from updraft.sampling_params import SamplingParams


@dataclass
class _Req:
    row: int
    params: SamplingParams
    rng_seed: int
    output_ids: list[int] = field(default_factory=list)
    seq_len: int = 5
    last_token: int = 7


def test_admit_packs_raw_and_effective_parameters() -> None:
    st = RowState(6, torch.device("cpu"))
    reqs = [
        _Req(1, SamplingParams(temperature=0.0), rng_seed=11),
        _Req(2, SamplingParams(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05), rng_seed=(1 << 32) - 1,
             output_ids=[3, 4], seq_len=9, last_token=4),
        _Req(3, SamplingParams(temperature=1e-6, top_k=5), rng_seed=2),  # below GREEDY_TEMPERATURE: greedy
        _Req(4, SamplingParams(temperature=1.1, top_p=1.0), rng_seed=3),
    ]
    st.admit(reqs)  # type: ignore[arg-type]
    inf = math.inf
    want = {
        1: [0.0, -1.0, 1.0, 0.0, 1.0, 1.0, inf],
        2: [0.7, 20.0, 0.9, 0.05, 0.7, 20.0, 0.9],
        3: [1e-6, 5.0, 1.0, 0.0, 1.0, 1.0, inf],
        4: [1.1, -1.0, 1.0, 0.0, 1.1, -1.0, inf],
    }
    for row, cols in want.items():
        assert torch.equal(st.sampling[row], torch.tensor(cols, dtype=torch.float32)), row
    assert st.rng[2].tolist() == [(1 << 32) - 1, 2 * rs.OFFSET_PER_TOKEN]
    assert st.seq_len[2] == 9 and st.bonus[2] == 4
    # the views are the tables' columns (the graph writes offsets through one)
    assert st.temperature[2] == st.sampling[2, rs.TEMP] and st.top_k[2] == 20
    st.offset[[1, 2]] = st.offset[[1, 2]] + 1
    assert st.rng[:3, rs.OFFSET].tolist() == [0, 1, 2 * rs.OFFSET_PER_TOKEN + 1]
    # untouched rows, the padding row among them: greedy, every filter off
    for row in (0, 5):
        assert torch.equal(st.sampling[row], torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, inf])), row
        assert st.rng[row].tolist() == [0, 0] and st.seq_len[row] == 1
