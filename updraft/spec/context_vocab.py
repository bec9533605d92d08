"""Context tokens for a truncated draft vocabulary: an EAGLE-3 head drafts the tokens of a
request's own text (its prompt, then what it generates) that its draft vocabulary lacks.

An EAGLE-3 head's LM head covers a few thousand frequent tokens (8,192 for ``builtin:smollm2``);
a summary that copies its article's names and rare words meets them at 15% of its positions,
where no draft can be right. Those tokens are known when the request arrives: they are in the
prompt. Each gets a row in the draft LM head's own logit space, extrapolated from the target's
LM head: the head's rows ``W_d`` against the target's rows of the same tokens, fitted once by
least squares (``W_d ~ W_t[vocab] @ A``, one hidden x hidden map), give ``W_t[x] @ A`` for any
token ``x``. Nothing is trained; on the CPU probe (``benchmarks/context_vocab_probe.py``) the
head drafted 38% of sum's context-only positions right and lost none of its own.

Per request row, up to ``size`` such tokens (the prompt's most frequent ones outside the
vocabulary, ``ContextVocab.admit``; then generated ones as they are emitted, ``observe``) and
their rows live on the device, written for every row at once by ``flush`` (the engine calls it
once a step, the prefill after its admissions); a greedy draft step's
pick (``pick``: one launch, in place of ``argmax_rows``) compares the vocabulary's best logit with
theirs and takes the larger. Sampled drafts keep their q over the draft vocabulary: rejection
sampling is lossless for any q, and greedy verification for any draft, so this only changes
what is accepted.

Hazards: the logits a step hands over may lack the final norm's 1 / rms (``RowScale``: the
fused mid layer leaves that launch out); the kernel computes the rms from the feature itself,
so ``unscaled`` must say which. Graph padding rows read whatever request row their batch slot
names (row 0): their picks are discarded with the rest of the padding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from updraft.memory.staging import StagingRing
from updraft.models.eagle import Eagle3Head
from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.spec.sampling_kernels import MAX_TOPK_ROW, row_argmax, target_id, use_triton


def extrapolation_map(head: Eagle3Head) -> torch.Tensor:
    """``A`` [h, h] float32 with ``lm_head.weight ~ W_t[vocab] @ A`` (least squares), on the
    head's device: ``W_t[x] @ A`` is token ``x``'s row in the draft LM head's logit space."""
    w_t = head.shared.lm_head_weight().detach()
    src = w_t[head.vocab_ids().to(w_t.device)].double().cpu()  # float64 on the host: a few ms, once
    sol = torch.linalg.lstsq(src, head.lm_head.weight.detach().double().cpu()).solution
    return sol.float().to(head.lm_head.weight.device)


def prompt_choice(tokens: list[int], in_vocab: bytes | bytearray, size: int) -> list[int]:
    """The ``size`` most frequent tokens of ``tokens`` outside the vocabulary (``in_vocab``: one
    byte per target id, nonzero inside), ties by first occurrence."""
    counts = Counter(t for t in tokens if 0 <= t < len(in_vocab) and not in_vocab[t])
    return [t for t, _ in counts.most_common(size)]  # most_common keeps insertion order among ties


class ContextVocab:
    """Per request row: up to ``size`` context token ids (-1: none) and their extrapolated rows."""

    def __init__(self, head: Eagle3Head, rows: int, size: int, *, staged: bool | None = None) -> None:
        """``staged``: copy through pinned staging guarded by events (default: the head is on CUDA)."""
        if size < 1:
            raise ValueError(f"context vocabulary size={size} is invalid: must be >= 1")
        w = head.lm_head.weight
        self.size = size
        self.hidden = w.shape[1]
        self.device = w.device
        hc = head.head_config
        #: the map with the head's calibration scale folded in; ``bias`` joins each score in the pick
        self.map = extrapolation_map(head) * hc.context_scale
        self.bias = hc.context_bias
        self.target_rows = head.shared.lm_head_weight
        self.in_vocab = torch.zeros(self.target_rows().shape[0], dtype=torch.bool)
        self.in_vocab[head.vocab_ids().cpu()] = True
        #: the same as bytes: the host's per-token checks stay off the tensor dispatcher
        self._in_vocab_host = self.in_vocab.numpy().tobytes()
        #: request row -> the context tokens it holds (``ids``' valid entries, with what the next
        #: ``flush`` writes; their slots come from ``_pending``)
        self._held: dict[int, set[int]] = {}
        #: request row -> (first slot, tokens) that the next ``flush`` writes there
        self._pending: dict[int, tuple[int, list[int]]] = {}
        #: rows whose earlier tokens the next ``flush`` clears first (admitted since the last one)
        self._reset: set[int] = set()
        #: request row -> the request admitted there (``owner``)
        self._owner: dict[int, str] = {}
        #: draft index -> target id, as ``argmax_rows`` takes it
        self.table = (head.d2t, True)
        self.norm_weight = head.norm.weight
        self.eps = float(head.norm.eps)
        self.ids = torch.full((rows, size), -1, dtype=torch.long, device=self.device)
        #: valid entries per row (the kernel's loop bound; ``ids`` past it are -1)
        self.count = torch.zeros(rows, dtype=torch.int32, device=self.device)
        self.rows = torch.zeros(rows, size, self.hidden, dtype=w.dtype, device=self.device)
        #: the pick's per-batch-row counters (zero between launches; a batch has at most ``rows`` rows)
        self._tickets = torch.zeros(rows, dtype=torch.int32, device=self.device)
        self._tiles = pick_tiles(self.hidden, size)  # the pick's launch shape, fixed by the head and K
        self._ring = StagingRing(self.device, staged=staged)

    def owner(self, row: int) -> str | None:
        """The request last admitted into ``row`` (None after ``release``)."""
        return self._owner.get(row)

    def admit(self, row: int, tokens: list[int], owner: str | None = None) -> int:
        """Row ``row`` drafts ``tokens``' most frequent tokens outside the vocabulary from the
        next ``flush`` on (a request's prompt at its prefill; it replaces what the row held), for
        request ``owner``. Returns how many."""
        if owner is not None:
            self._owner[row] = owner
        chosen = prompt_choice(tokens, self._in_vocab_host, self.size)
        self._held[row] = set(chosen)
        self._pending[row] = (0, chosen)
        self._reset.add(row)
        return len(chosen)

    def observe(self, row: int, tokens: list[int]) -> None:
        """Tokens the request at ``row`` just generated: those outside the vocabulary that it does
        not hold yet join its context tokens while there is room (a name the answer introduced
        recurs in it), at the next ``flush``. O(len(tokens)) on the host, no device work."""
        held = self._held.get(row)
        if held is None or len(held) >= self.size:
            return
        vocab = self._in_vocab_host
        new = [t for t in dict.fromkeys(tokens) if 0 <= t < len(vocab) and not vocab[t] and t not in held]
        if not new:
            return
        new = new[: self.size - len(held)]
        start, queued = self._pending.get(row, (len(held), []))
        self._pending[row] = (start, queued + new)
        held.update(new)

    @property
    def queued(self) -> int:
        """Tokens ``admit`` and ``observe`` queued that the next ``flush`` writes."""
        return sum(len(new) for _, new in self._pending.values())

    def release(self, row: int) -> None:
        self._held.pop(row, None)
        self._owner.pop(row, None)
        self._pending.pop(row, None)
        self._reset.discard(row)

    def flush(self) -> None:
        """Write what ``admit`` and ``observe`` queued since the last flush to the device: one host
        to device copy through reused pinned staging (``StagingRing``) and a fixed handful of
        launches whatever the batch. (A pageable copy per row made the host wait for the iteration
        in flight at every new token: the H200 ran bs 64 at 0.61x of the same head without context
        tokens.) The writes are stream-ordered after any iteration already queued, before any
        queued later."""
        if not self._pending and not self._reset:
            return
        n = sum(len(new) for _, new in self._pending.values())
        touched = sorted(self._pending.keys() | self._reset)
        reset = sorted(self._reset)
        m = len(touched)
        a = self._ring.fill(3 * n + 2 * m + len(reset))
        i = 0
        for row, (start, new) in self._pending.items():  # [rows | slots | tokens | touched | counts | reset]
            k = len(new)
            a[i : i + k] = row
            a[n + i : n + i + k] = range(start, start + k)
            a[2 * n + i : 2 * n + i + k] = new
            i += k
        a[3 * n : 3 * n + m] = touched
        a[3 * n + m : 3 * n + 2 * m] = [len(self._held.get(r, ())) for r in touched]
        a[3 * n + 2 * m :] = reset
        self._pending.clear()
        self._reset.clear()
        packed = self._ring.send()
        if reset:
            self.ids[packed[3 * n + 2 * m :]] = -1
        if n:
            r, s, t = packed[:n], packed[n : 2 * n], packed[2 * n : 3 * n]
            self.ids[r, s] = t
            self.rows[r, s] = (self.target_rows()[t].float() @ self.map).to(self.rows.dtype)
        self.count[packed[3 * n : 3 * n + m]] = packed[3 * n + m : 3 * n + 2 * m].to(torch.int32)

    def pick(self, logits: torch.Tensor, feature: torch.Tensor, rows: torch.Tensor, dst: torch.Tensor,
             unscaled: bool = False) -> torch.Tensor:
        """Greedy drafts [B] (target ids) into ``dst``: each row's best draft-vocabulary logit
        (``logits`` [B, Vd]; index mapped through the head's ``d2t``) or its request's best
        context token where that scores higher. ``feature`` [B, h]: the
        pre-norm output feature the logits came from; ``rows`` [B]: request rows; ``unscaled``:
        the logits lack the norm's 1 / rms."""
        return context_pick(logits, feature, self.norm_weight, self.eps, self.ids, self.rows, rows, dst, self.table,
                            unscaled=unscaled, count=self.count, bias=self.bias, tickets=self._tickets,
                            tiles=self._tiles)


@triton.jit
def _feature_rms(F, H, eps, BLOCK_H: tl.constexpr):
    """``(f, 1 / rms(f))`` of the ``H`` values at ``F`` (float32; ``f`` padded to ``BLOCK_H``)."""
    h = tl.arange(0, BLOCK_H)
    f = tl.load(F + h, mask=h < H, other=0.0).to(tl.float32)
    return f, 1.0 / tl.sqrt(tl.sum(f * f, axis=0) / H + eps)


@triton.jit
def _context_pick_kernel(X, s_x, V, Map, Feat, s_f, NormW, eps, bias, H, Ids, s_ids, Rows, s_rows, Count, ReqRows, Out, s_out,
                         PartScore, PartId, Tickets, NPROG, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_P: tl.constexpr, MAP: tl.constexpr, ADD: tl.constexpr, UNSCALED: tl.constexpr,
                         PDL: tl.constexpr):
    """Programs ``(b, p)`` for batch row ``b``: ``p = 0`` takes the vocabulary's argmax, ``p >= 1``
    scores tile ``t = p - 1``, ``BLOCK_K`` held tokens of the row's request from ``t * BLOCK_K``,
    against the normed feature. The argmax programs come first in launch order (the batch axis
    varies fastest), so the longest programs start first and the short tiles fill in beside them.
    Only the tiles the request's count reaches do anything (the rest return at once); with none,
    the argmax's program writes the pick. Else each live program stores its best score and id at
    ``PartScore`` / ``PartId[b, slot]`` (tiles at ``t``, the argmax at ``tiles``) and the last of
    them to finish (a ticket per row) merges: a context token wins only by a strictly larger score
    than the vocabulary's best (plus ``bias``), the first among equals."""
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    r = tl.load(ReqRows + b).to(tl.int64)
    n = tl.load(Count + r)
    tiles = tl.cdiv(n, BLOCK_K)
    vocab = p == 0
    t = p - 1
    if vocab | (t < tiles):
        if vocab:
            best, arg = row_argmax(X + b * s_x, V, BLOCK)
            if UNSCALED:
                _, inv = _feature_rms(Feat + b * s_f, H, eps, BLOCK_H)
                best = best * inv
            arg = target_id(Map, arg, MAP, ADD)
            slot = tiles
        else:
            f, inv = _feature_rms(Feat + b * s_f, H, eps, BLOCK_H)
            h = tl.arange(0, BLOCK_H)
            fn = f * inv * tl.load(NormW + h, mask=h < H, other=0.0).to(tl.float32)
            k = t * BLOCK_K + tl.arange(0, BLOCK_K)
            ids = tl.load(Ids + r * s_ids + k, mask=k < n, other=-1).to(tl.int64)
            # masked by the count, not by the ids: the two loads issue together; a -1 entry's row
            # is read and then scored -inf below
            w = tl.load(Rows + r * s_rows + k[:, None] * H + h[None, :], mask=(k[:, None] < n) & (h[None, :] < H),
                        other=0.0).to(tl.float32)
            s = tl.where(ids >= 0, tl.sum(w * fn[None, :], axis=1), float("-inf"))
            sb = tl.max(s, axis=0)
            si = tl.min(tl.where(s == sb, tl.arange(0, BLOCK_K), BLOCK_K), axis=0)
            best = sb + bias
            arg = tl.sum(tl.where(tl.arange(0, BLOCK_K) == si, ids, 0), axis=0)
            slot = t
        if tiles == 0:  # nothing held: the argmax is the pick
            tl.store(Out + b * s_out, arg)
        else:
            tl.store(PartScore + b * NPROG + slot, best.to(tl.float32))
            tl.store(PartId + b * NPROG + slot, arg)
            tl.debug_barrier()  # every thread's stores before the ticket releases them
            if tl.atomic_add(Tickets + b, 1, sem="acq_rel") == tiles:
                q = tl.arange(0, BLOCK_P)
                live = q <= tiles
                # .cg: the other programs' results are in L2; never serve them from a stale L1 line
                scores = tl.load(PartScore + b * NPROG + q, mask=live, other=0.0, cache_modifier=".cg")
                cand = tl.load(PartId + b * NPROG + q, mask=live, other=-1, cache_modifier=".cg")
                vbest = tl.sum(tl.where(q == tiles, scores, 0.0), axis=0)
                cs = tl.where(q < tiles, scores, float("-inf"))
                cbest = tl.max(cs, axis=0)
                ci = tl.min(tl.where(cs == cbest, q, BLOCK_P), axis=0)
                pick = tl.where(cbest > vbest, tl.sum(tl.where(q == ci, cand, 0), axis=0),
                                tl.sum(tl.where(q == tiles, cand, 0), axis=0))
                tl.store(Out + b * s_out, pick)
                tl.atomic_xchg(Tickets + b, 0)  # ready for the next launch (stream order)


def context_pick_reference(logits: torch.Tensor, feature: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                           ids: torch.Tensor, rows: torch.Tensor, req_rows: torch.Tensor,
                           table: tuple[torch.Tensor, bool] | None, unscaled: bool = False, bias: float = 0.0) -> torch.Tensor:
    """``context_pick`` in torch ops (float32): the CPU path, and what the kernel must equal."""
    best, arg = logits.float().max(-1)
    if table is not None:
        arg = arg + table[0][arg] if table[1] else table[0][arg]
    f = feature.float()
    inv = torch.rsqrt(f.pow(2).mean(-1) + eps)
    if unscaled:
        best = best * inv
    fn = f * inv[:, None] * norm_weight.float()
    cid = ids[req_rows]  # [B, K]
    score = torch.einsum("bkh,bh->bk", rows[req_rows].float(), fn).masked_fill(cid < 0, float("-inf"))
    cbest, carg = score.max(-1)
    return torch.where(cbest + bias > best, cid.gather(1, carg[:, None])[:, 0], arg)


@dataclass(frozen=True)
class PickTiles:
    """The pick's launch shape: ``block_k`` held tokens a program (a power of two), ``num_warps``
    a program (the argmax's and the tiles' alike: one launch)."""

    block_k: int
    num_warps: int

    def __post_init__(self) -> None:
        for name, val in (("block_k", self.block_k), ("num_warps", self.num_warps)):
            if val < 1 or val & (val - 1):
                raise ValueError(f"PickTiles.{name} must be a power of two >= 1, got {val}")

    def programs(self, k: int) -> int:
        """Programs a row for ``k`` held tokens: the vocabulary's argmax, then the tokens' tiles."""
        return triton.cdiv(k, self.block_k) + 1


def pick_tiles(hidden: int, k: int) -> PickTiles:
    """The default launch shape for a head of width ``hidden`` and ``k`` context tokens a row:
    16,384-value tiles (16 tokens at SmolLM2's width), at least 8 tokens a program at wider heads,
    4 warps. H100, 2026-12-05 (``benchmarks/results/2026-12-05-h100-pick-tiles/``; bs 1 / 8 / 64 x
    0 / 64 / 256 held): SmolLM2's best everywhere within 0.3 us, 12.1 us against 17.4 with 16 warps
    at bs 64 / 256 held; the 8B shape's 8 x 4 54.6 against 107.0 for 4 x 16 there (16 warps were
    up to 0.4 us faster only where nothing is held, at bs 1 and 8)."""
    block_h = triton.next_power_of_2(hidden)
    return PickTiles(max(1, min(triton.next_power_of_2(k), max(8, 16384 // block_h))), 4)


def context_pick(logits: torch.Tensor, feature: torch.Tensor, norm_weight: torch.Tensor, eps: float, ids: torch.Tensor,
                 rows: torch.Tensor, req_rows: torch.Tensor, dst: torch.Tensor, table: tuple[torch.Tensor, bool] | None,
                 *, unscaled: bool = False, count: torch.Tensor | None = None, bias: float = 0.0,
                 tickets: torch.Tensor | None = None, tiles: PickTiles | None = None) -> torch.Tensor:
    """See ``ContextVocab.pick``; one launch where Triton runs (``use_triton``), else torch.
    ``count`` [R] int32: each row's valid entries (a prefix of ``ids``; default: all K); ``bias``:
    added to every context token's score; ``tickets``: >= B int32 counters, zero between launches
    (the kernel leaves them so; default: new ones); ``tiles``: the launch shape (default
    ``pick_tiles``; ``benchmarks/context_pick_bench.py --sweep`` times others)."""
    b, v = logits.shape
    if b == 0:
        return dst
    if not use_triton(logits) or logits.stride(1) != 1 or feature.stride(1) != 1:
        return dst.copy_(context_pick_reference(logits, feature, norm_weight, eps, ids, rows, req_rows, table, unscaled,
                                                bias))
    hsz, k = rows.shape[2], rows.shape[1]
    block = min(triton.next_power_of_2(v), MAX_TOPK_ROW)
    block_h = triton.next_power_of_2(hsz)
    tiles = tiles or pick_tiles(hsz, k)
    nprog = tiles.programs(k)
    tab = table[0] if table is not None else dst
    if count is None:
        count = torch.full((ids.shape[0],), k, dtype=torch.int32, device=ids.device)
    if tickets is None:
        tickets = torch.zeros(b, dtype=torch.int32, device=logits.device)
    if tickets.dtype != torch.int32 or tickets.numel() < b or not tickets.is_contiguous():
        raise ValueError(f"context_pick: tickets must be >= {b} contiguous int32 counters")
    # each live program writes its own slot
    part_score = torch.empty((b, nprog), dtype=torch.float32, device=logits.device)
    part_id = torch.empty((b, nprog), dtype=torch.int64, device=logits.device)
    _context_pick_kernel[(b, nprog)](logits, logits.stride(0), v, tab, feature, feature.stride(0), norm_weight, eps,
                                     float(bias), hsz, ids, ids.stride(0), rows, rows.stride(0), count, req_rows, dst,
                                     dst.stride(0), part_score, part_id, tickets, nprog, BLOCK=block, BLOCK_H=block_h, BLOCK_K=tiles.block_k,
                                     BLOCK_P=triton.next_power_of_2(nprog), MAP=table is not None,
                                     ADD=table[1] if table is not None else True, UNSCALED=unscaled,
                                     num_warps=tiles.num_warps,
                                     **pdl_opts(logits.device, "sampling"))
    return dst
