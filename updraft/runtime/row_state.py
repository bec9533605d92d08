"""Per-request decoding state that lives on the device, indexed by request-pool row.

The fused speculative iteration (``updraft.spec.fused``) reads and updates these tensors inside
its graph, so the host never has to know a request's length or last token to launch the next
iteration. The host writes a row only when a request enters decoding (its prefill finished, or
an iteration ran on the per-phase path): ``admit``, one packed host-to-device copy for all rows.

Row 0 is the padding row of graph replays: it always holds ``seq_len = 1`` and zeros, so padded
rows read position 0 and write the scratch slot. Graphs that update rows write junk into row 0
(several padded rows share it) and reset it with ``reset_padding`` at the end of their body.
"""

from __future__ import annotations

import torch

from updraft.runtime.request_view import RequestView

# Packed admission columns (float64 holds every int64 seed below 2**53 exactly; seeds are 32-bit).
_LEN, _BONUS, _TEMP, _TOP_K, _TOP_P, _MIN_P, _SEED, _OFFSET = range(8)

#: Offset units per emitted token at admission: a re-admitted request starts beyond every
#: offset its earlier iterations used (each iteration advances the offset by one and emits at
#: least one token), so no random number is ever reused.
OFFSET_PER_TOKEN = 64


class RowState:
    """Device tensors ``[rows]`` per request-pool row; see the module docstring."""

    def __init__(self, num_rows: int, device: torch.device) -> None:
        self.device = device
        self.num_rows = num_rows

        def z(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(num_rows, dtype=dtype, device=device)

        self.seq_len = torch.ones(num_rows, dtype=torch.int64, device=device)  # committed tokens
        self.bonus = z(torch.int64)  # the last committed token (next verify's first input)
        self.temperature = z(torch.float32)
        self.top_k = z(torch.int64)
        self.top_p = torch.ones(num_rows, dtype=torch.float32, device=device)
        self.min_p = z(torch.float32)
        self.seed = z(torch.int64)
        self.offset = z(torch.int64)  # advanced by one in the graph per iteration

    def admit(self, reqs: list[RequestView]) -> None:
        """Write the host's view of ``reqs`` (length, last token, sampling parameters, RNG key)."""
        if not reqs:
            return
        packed = torch.tensor(
            [
                [
                    r.seq_len,
                    r.last_token,
                    r.params.temperature,
                    r.params.top_k,
                    r.params.top_p,
                    r.params.min_p,
                    r.rng_seed,
                    len(r.output_ids) * OFFSET_PER_TOKEN,
                ]
                for r in reqs
            ],
            dtype=torch.float64,
        )
        rows = torch.tensor([r.row for r in reqs], dtype=torch.long)
        if self.device.type == "cuda":  # pinned: a pageable copy would wait for the iteration in flight
            packed, rows = packed.pin_memory(), rows.pin_memory()
        packed = packed.to(self.device, non_blocking=True)
        rows = rows.to(self.device, non_blocking=True)
        self.seq_len[rows] = packed[:, _LEN].long()
        self.bonus[rows] = packed[:, _BONUS].long()
        self.temperature[rows] = packed[:, _TEMP].float()
        self.top_k[rows] = packed[:, _TOP_K].long()
        self.top_p[rows] = packed[:, _TOP_P].float()
        self.min_p[rows] = packed[:, _MIN_P].float()
        self.seed[rows] = packed[:, _SEED].long()
        self.offset[rows] = packed[:, _OFFSET].long()

    def reset_padding(self) -> None:
        """Row 0 back to its padding values (device ops; safe inside a graph)."""
        self.seq_len[:1].fill_(1)
        self.bonus[:1].zero_()
        self.offset[:1].zero_()
