"""The static inputs of one phase of one model, and the one builder that fills them.

Every forward of a phase (eager, graph capture, graph replay) reads the tensors of a
``PhaseInputs``: the builder (``PhaseInputs.write``) writes a batch's rows straight into them, the eager
path views the first ``n`` rows, a graph replay the rows of its captured batch size. No batch is
built first and copied into graph buffers afterwards (that doubled the host work and let the
two paths drift apart).

Host data (token ids, positions, lengths, rows) is written into host staging whose layout
mirrors the device tensors, so it reaches the device in two copies (one int64 block, one int32
block); on CUDA the staging is pinned and rotates over a few slots, each guarded by an event
(the copy is asynchronous: a slot is rewritten only once its copy has run). On a CPU the
"device" tensors are host memory and are written in place. KV slots (``out_cache_loc``) are
gathered on the device from ``req_to_token`` at each token's row and position: padded tokens
(row 0, position 0) land on the scratch slot 0.

Padded rows of a graph replay (``n <= i < bs``) are written as the graph contract says
(../shared/design/spec-decoding.md): ``seq_lens`` = the backend's fill value, ``extend_seq_lens``
= the captured width (one token in a many-request prefill graph, whose rows are a token budget),
``req_pool_indices`` = 0, their tokens on row 0 / position 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

_SLOTS = 4  # pinned staging slots per phase on CUDA


@dataclass
class Staged:
    """What ``PhaseInputs.write`` laid out, for the ForwardBatch built over it."""

    bs: int  # rows written (real + padded)
    tokens: int  # token rows written (real + padded)
    logit_rows: int
    seq_lens_cpu: torch.Tensor  # [bs] int32 host copies (metadata without a device sync)
    extend_seq_lens_cpu: torch.Tensor


@dataclass
class PhaseInputs:
    """Every tensor a forward of one phase reads, at capacity ``max_tokens`` / ``max_bs``.

    ``i64`` = input_ids | positions | token_rows | logits_indices | req_pool_indices and
    ``i32`` = seq_lens | extend_seq_lens | extend_start_loc: the named tensors are views into
    these two blocks, so staging reaches them in one copy each. ``token_rows`` is each token's
    request-pool row (for the KV-slot gather); ``feature`` is the draft's per-token input."""

    max_tokens: int
    max_bs: int
    max_logit_rows: int
    i64: torch.Tensor
    i32: torch.Tensor
    out_cache_loc: torch.Tensor  # [max_tokens] int64, gathered on the device
    feature: torch.Tensor | None  # [max_tokens, feature_dim]
    _slots: list[tuple[torch.Tensor, torch.Tensor, torch.cuda.Event | None]] = field(default_factory=list)
    _next: int = 0

    def _staging(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.cuda.Event | None]]:
        """Host staging, made at the first write (inputs that device ops fill, as the fused
        iteration's, never need it)."""
        if not self._slots:
            if self.i64.device.type != "cuda":  # CPU: write the "device" tensors themselves
                self._slots = [(self.i64, self.i32, None)]
            else:
                self._slots = [
                    (torch.zeros_like(self.i64, device="cpu").pin_memory(), torch.zeros_like(self.i32, device="cpu").pin_memory(),
                     torch.cuda.Event())
                    for _ in range(_SLOTS)
                ]
        return self._slots

    @classmethod
    def alloc(cls, max_tokens: int, max_bs: int, max_logit_rows: int, feature_dim: int,
              device: torch.device, dtype: torch.dtype) -> PhaseInputs:
        n64 = 3 * max_tokens + max_logit_rows + max_bs
        return cls(
            max_tokens, max_bs, max_logit_rows,
            torch.zeros(n64, dtype=torch.int64, device=device),
            torch.zeros(3 * max_bs, dtype=torch.int32, device=device),
            torch.zeros(max_tokens, dtype=torch.int64, device=device),
            torch.zeros(max_tokens, feature_dim, dtype=dtype, device=device) if feature_dim else None,
        )

    def fits(self, tokens: int, bs: int, logit_rows: int, feature_dim: int) -> bool:
        have = 0 if self.feature is None else self.feature.shape[1]
        return tokens <= self.max_tokens and bs <= self.max_bs and logit_rows <= self.max_logit_rows and feature_dim in (0, have)

    def write(self, token_ids: list[int] | None, rows: list[int], seq_lens: list[int], extend_lens: list[int],
              logits: str, *, pad_to: int, width: int, fill: int, read_tokens: int = 0) -> Staged:
        """The builder: lay out ``len(rows)`` requests (plus padding up to ``pad_to`` requests of ``width``
        tokens each when a graph will replay: its captured width, or one token in a many-request
        prefill graph) and copy them to the device. ``token_ids`` None:
        the caller copies device token ids in afterwards. ``read_tokens``: token rows the
        forward reads (a graph: the token rows of its captured batch). ``logits``: "last" / "select" (one
        row per request, the last; a "select" caller overwrites the real rows), "all", "none"."""
        inp = self
        slots = self._staging()
        h64, h32, event = slots[self._next]
        self._next = (self._next + 1) % len(slots)
        if event is not None:
            event.synchronize()  # this slot's previous copy has been read by the device
        n, bs = len(rows), max(pad_to, len(rows))
        t_max, b_max = inp.max_tokens, inp.max_bs
        ext = np.asarray(extend_lens, dtype=np.int64)
        seq = np.asarray(seq_lens, dtype=np.int64)
        t_real = int(ext.sum())
        pad = bs - n
        # Token rows the forward reads: a graph reads every row of its captured batch (packed
        # modes leave junk rows after the real tokens), which must all land on the scratch slot.
        tokens = max(t_real + pad * width, read_tokens)
        a64, a32 = h64.numpy(), h32.numpy()
        starts = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(ext[:-1], out=starts[1:])
        req_of_tok = np.repeat(np.arange(n), ext)
        pos = (seq - ext)[req_of_tok] + np.arange(t_real) - starts[req_of_tok]
        if token_ids is not None:
            a64[:t_real] = token_ids
        a64[t_real:tokens] = 0
        a64[t_max : t_max + t_real] = pos
        a64[t_max + t_real : t_max + tokens] = 0
        a64[2 * t_max : 2 * t_max + t_real] = np.asarray(rows, dtype=np.int64)[req_of_tok]
        a64[2 * t_max + t_real : 2 * t_max + tokens] = 0  # padded tokens: row 0, position 0 -> slot 0
        lo = 3 * t_max
        if logits == "all":
            r = tokens
            a64[lo : lo + r] = np.arange(tokens)
        elif logits == "none":
            r = 0
        else:
            r = bs
            a64[lo : lo + n] = starts + ext - 1
            a64[lo + n : lo + bs] = t_real + np.arange(pad) * width + width - 1
        rb = lo + inp.max_logit_rows
        a64[rb : rb + n] = rows
        a64[rb + n : rb + bs] = 0
        a32[:n] = seq
        a32[n:bs] = fill
        a32[b_max : b_max + n] = ext
        a32[b_max + n : b_max + bs] = width
        a32[2 * b_max : 2 * b_max + n] = starts
        a32[2 * b_max + n : 2 * b_max + bs] = t_real + np.arange(pad) * width
        if event is not None:
            inp.i64.copy_(h64, non_blocking=True)
            inp.i32.copy_(h32, non_blocking=True)
            event.record()
        seq_cpu = torch.from_numpy(np.concatenate([seq, np.full(pad, fill)]).astype(np.int32))
        ext_cpu = torch.from_numpy(np.concatenate([ext, np.full(pad, width)]).astype(np.int32))
        return Staged(bs, tokens, r, seq_cpu, ext_cpu)

    def gather_slots(self, req_to_token: torch.Tensor, tokens: int) -> None:
        """KV slots of the first ``tokens`` staged tokens, read from the request table on the
        device at each token's row and position."""
        idx = self.token_rows[:tokens] * req_to_token.shape[1] + self.positions[:tokens]
        self.out_cache_loc[:tokens].copy_(req_to_token.view(-1)[idx])

    # views (offsets follow the block layout above)
    @property
    def input_ids(self) -> torch.Tensor:
        return self.i64[: self.max_tokens]

    @property
    def positions(self) -> torch.Tensor:
        t = self.max_tokens
        return self.i64[t : 2 * t]

    @property
    def token_rows(self) -> torch.Tensor:
        t = self.max_tokens
        return self.i64[2 * t : 3 * t]

    @property
    def logits_indices(self) -> torch.Tensor:
        t = self.max_tokens
        return self.i64[3 * t : 3 * t + self.max_logit_rows]

    @property
    def req_pool_indices(self) -> torch.Tensor:
        return self.i64[3 * self.max_tokens + self.max_logit_rows :]

    @property
    def seq_lens(self) -> torch.Tensor:
        return self.i32[: self.max_bs]

    @property
    def extend_seq_lens(self) -> torch.Tensor:
        return self.i32[self.max_bs : 2 * self.max_bs]

    @property
    def extend_start_loc(self) -> torch.Tensor:
        return self.i32[2 * self.max_bs :]


