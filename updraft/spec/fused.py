"""One whole EAGLE speculative iteration in ONE graph replay, state on the device.

Without a draft (plain decoding) the same machinery runs a DECODE step of the bonus token, so
plain decoding gets device-resident state and overlap too (S = 0 only, steps 2 and 5 absent).
N-gram drafting has no draft model either: step 2 is a lookup in each row's token history on
the device (``updraft.spec.ngram_device``), step 5 is absent, and step 6 appends the emitted
tokens to that history.

For a batch of decoding requests (request-pool rows ``rows``), with ``S`` drafts (0 allowed: a
plain target step that keeps the draft's KV and feature current), the captured body does:

1. read each row's committed length ``N``, bonus token, draft feature (the proposer's
   ``next_hidden``; and its norm for the first draft's LM head, ``norm_in_read``) and, sampled,
   its sampling parameters (``RowState``) and the iteration's uniforms from its RNG key, and
   write every forward's positions, KV slots and lengths (the batches are views of one
   ``IterLayout``; the attention metadata is bound to them): one launch, ``row_io.read_rows``;
2. draft: the first draft from the stored feature (the draft's LM head), then ``S - 1``
   DRAFT_DECODE forwards, each step's token and feature fed straight into the next (an MTP
   head's step ``k`` runs its module at its own position: ``updraft.models.mtp.chain_step``;
   an EAGLE-3 head's next step's QKV product of the feature runs on the side stream beside the
   LM head and pick, ``qkv_beside``).
   With the lookup assist (``LookupAssist``), the n-gram lookup's drafts replace the head's in
   the rows whose token history repeats its last tokens: greedy, the lookup runs on a side stream
   from step 1 and each draft pick takes its draft there (``assist_beside``); sampled, one launch
   after the chain replaces the drafts and makes their q one-hot at each; the histories are the
   n-gram proposer's, appended by step 6;
3. TARGET_VERIFY over ``[bonus, d_1..d_S]`` at positions ``N-1..N+S-1`` (stride ``S + 1``; a
   DECODE forward when S = 0: one token is the decode kernel's job); step 1 writes the bonus and
   each draft step its token straight into that block's ids (no stack kernel), and draft step
   ``k`` reads its token from column ``k`` of them (a strided view, no copy);
4. sampled: lossless rejection sampling with counter-based uniforms, one draw of ``2 S + 2`` per
   row per iteration (``updraft.spec.device_rng``, drawn in step 1; the row's offset advances in
   the graph);
5. DRAFT_EXTEND_V2 over all ``S + 1`` rows (it needs the emitted tokens, not the accept lengths;
   the verify's argmax or the acceptance writes them straight into its ids). An EAGLE-3 head's
   fc reads only the verify's captured layers, so it runs on a side stream forked as soon as
   the last of them is written, beside the verify's remaining layers, its LM head and that
   argmax or acceptance (``project_beside``; ``updraft.runtime.side_stream``); with
   ``qkv_beside`` the side stream also computes the mid layer's QKV product of the projected
   feature, so the extend's QKV streams only the embedding's weight columns. A one-layer EAGLE-3
   head's extend rows that take a draft as token store their keys and values there too, and
   after the argmax or acceptance only each request's last accepted row runs the head, a
   DRAFT_DECODE forward of one row a request (``extend_rows_beside``; ``updraft.spec.last_row``);
6. one launch (``updraft.spec.commit``): greedy acceptance; the row's ``N``, bonus token and
   offset updated in place; with token histories, the emitted tokens appended; the draft
   extend's feature at row ``accept_len - 1`` (or its one-row forward's) becomes the row's next
   draft feature (no LM head here: step 2 of the next iteration applies it); ``out``
   holds ``[accept_len, emitted...]`` per row for the host, copied to pinned memory without a
   sync. An MTP head keeps its modules' states of that row too (``MtpHead.keep_layer_states``).

Every LM head's logits stay in the model's dtype (``ForwardBatch.fp32_logits`` off): the argmax,
top-k and acceptance kernels widen as they load, so no conversion kernel sits between an LM head
and its reader (the dense acceptance, where the kernels do not run, widens them itself).

Every phase's inputs are written by device ops into the static buffers its attention metadata
was captured with, and each backend's replay-init runs INSIDE the graph (fixed-stride metadata
is pure device work in both graph-capable backends), so a launch is: one copy of the row list
(only when the batch's rows changed since the graph's last launch), one replay, one copy back,
with events made once (``updraft.runtime.launcher``). Padded rows use row 0 (see ``RowState``).

KV: the host must have allocated positions ``< N + S`` of every row before launching (the
scheduler's lookahead covers an iteration in flight as well, see ``Engine``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import ClassVar

import torch

from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch, ForwardMode
from updraft.models.eagle import Eagle3Head
from updraft.models.llama import DecoderLM, RowScale
from updraft.models.mtp import MtpHead, chain_step
from updraft.runtime import row_state as rs
from updraft.runtime.graphs.device_graph import make_graph, new_pool
from updraft.runtime.graphs.phase_graph import PhaseSpec
from updraft.runtime.launcher import fastest_replay, make_launcher
from updraft.runtime.model_runner import ModelRunner
from updraft.runtime.row_state import RowState
from updraft.runtime.sampler import Sampler
from updraft.runtime.side_stream import SideStream
from updraft.spec import rejection_kernels, sampling_kernels
from updraft.spec.commit import Commit, commit
from updraft.spec.drafter import DRAFT_CANDIDATES, Drafter, RowParams
from updraft.spec.head_pick import HeadRows
from updraft.spec.iter_graph import InFlight, IterGraph, fed_batch, static_batch_of
from updraft.spec.last_row import ExtendRows, LastRowPick, argmax_and_pick, pick_last_rows
from updraft.spec.ngram_device import DeviceNgram, LookupAssist
from updraft.spec.proposers import DraftModelProposer, NgramProposer
from updraft.spec.request_view import SpecRequestView
from updraft.spec.row_io import IterLayout, UniformDraw, lay_out, read_rows

#: The RNG stream of a sampled iteration: ONE draw of ``2 S + 2`` uniforms per row per iteration
#: (columns: S draft picks, S acceptance tests, the residual pick, the S = 0 sample), since every
#: hash round is a kernel of its own inside the graph.
_STREAM_ITER = 1000
#: timed replays per graph at start-up (after an untimed one): the first cost adaptive S knows
TIMED_REPLAYS = 2


class FusedIteration:
    """Captures and launches whole speculative iterations (EAGLE or n-gram drafts) or plain
    decoding steps (see the module docstring)."""

    #: An EAGLE-3 head's fc runs on a side stream forked once the verify has written the layers it
    #: reads (``DecoderLM.forward``'s ``aux_ready``), not after the argmax or acceptance (read at
    #: capture). H100, SmolLM2's S = 5 cycle: bs 1 0.8076 -> 0.8021 ms, bs 8
    #: 1.0680 -> 1.0628 (benchmarks/results/2026-12-06-h100-side-fc, forked after the LM head then).
    project_beside: ClassVar[bool] = True
    #: Where an EAGLE-3 head's forwards take the fused mid layer: the side stream computes each
    #: one's mid-layer QKV product of its input feature before the tokens are known (the draft
    #: steps' beside the LM head and pick before them, the extend's with the fc), so their QKV
    #: launches stream only the embedding's weight columns (read at capture). H100, 5 rounds: bs 1
    #: 0.8008 -> 0.7973 ms, bs 8 1.0530 -> 1.0394 (benchmarks/results/2026-12-06-h100-qkv-beside).
    qkv_beside: ClassVar[bool] = True
    #: With ``qkv_beside``: the first draft step's product too, beside the first draft's LM head
    #: (off: that step's QKV streams both inputs; 3-6 us slower at bs 1).
    qkv_beside_first: ClassVar[bool] = True
    #: The first draft's norm applied by ``read_rows`` as it gathers the features (off: a norm
    #: launch before the first draft's LM head).
    norm_in_read: ClassVar[bool] = True
    #: Greedy, with the lookup assist: the lookup runs on a side stream from the body's start and
    #: the draft picks take its drafts in the rows it replaces (``DeviceNgram.locks``), so no
    #: lookup launch sits between the chain and the verify (off: it does, and replaces the drafts).
    assist_beside: ClassVar[bool] = True
    #: With ``qkv_beside``, a one-layer EAGLE-3 head: the draft extend's rows whose token is a
    #: draft (every row before a request's last accepted one) store their keys and values on the
    #: side stream beside the verify's last layers, and after the argmax or acceptance the head
    #: runs each request's last accepted row alone (off: all S + 1 rows after it).
    extend_rows_beside: ClassVar[bool] = True
    #: Greedy, an EAGLE-3 head of at most ``head_pick.MAX_HIDDEN`` width, batches of at most
    #: ``head_pick.MAX_ROWS``: each draft's LM head and argmax run without the logits
    #: (``HeadPick``: the head's weights loaded before the PDL wait, one atomic a row), in place
    #: of cuBLAS's head and ``argmax_rows`` (read at capture). H100, SmolLM2's S = 5 cycle: bs 1
    #: 0.7927 -> 0.7766 ms, bs 8 1.0234 -> 1.0177 (benchmarks/results/2026-12-06-h100-head-pick).
    head_pick: ClassVar[bool] = True
    #: With ``head_pick``, sampled too: that launch writes the draft's logits in place of cuBLAS's
    #: head (``head_logits``; it starts under PDL, cuBLAS's does not): the H100's bs-1 sampled cycle
    #: 15.7 us shorter (benchmarks/results/2026-12-06-h100-sampled-levers).
    sampled_head_logits: ClassVar[bool] = True
    #: With ``extend_rows_beside``, sampled: the acceptance's launch picks each request's last
    #: accepted row for the extend (``accept_kernel.rejection_sample``'s ``pick``), the side stream
    #: joined before it; off: ``pick_last_rows``, a launch after it (the join after it too).
    sampled_pick_in_accept: ClassVar[bool] = True

    def __init__(self, target: ModelRunner, proposer: DraftModelProposer | NgramProposer | None, sampler: Sampler,
                 sizes: list[int], *, emulate: bool, capture_hidden: CaptureHidden,
                 assist: LookupAssist | None = None) -> None:
        self.target = target
        #: the draft model's side (EAGLE heads); None for n-gram drafts and plain decoding
        self.drafter = Drafter.of(proposer, max(sizes)) if isinstance(proposer, DraftModelProposer) else None
        #: with a drafter: its chains replaced by lookups in the rows whose history repeats
        self.assist = assist if self.drafter is not None else None
        #: per-row token histories on the device: the n-gram proposer's drafts, or the assist's;
        #: neither this nor a drafter: plain decoding (S = 0 only, a DECODE forward)
        grams = ((proposer.n_min, proposer.n_max) if isinstance(proposer, NgramProposer)
                 else (self.assist.n_min, self.assist.n_max) if self.assist is not None else None)
        self.ngram = (DeviceNgram(target.req_pool.max_reqs + 1, target.req_pool.width, *grams, target.device)
                      if grams is not None else None)
        self.sampler = sampler
        self.sizes = sorted(sizes)
        self.emulate = emulate
        self.device = target.device
        self.target_capture = capture_hidden
        self.state = RowState(target.req_pool.max_reqs + 1, self.device)
        self.graphs: dict[tuple[int, bool, int], IterGraph] = {}
        self.pool = new_pool(emulate)
        self.capture_seconds = 0.0
        self._slot = 0
        self._pinned = self.device.type == "cuda"
        #: events and stream made once (CUDA), see ``updraft.runtime.launcher``
        self.launcher = make_launcher(self.device)
        #: where an EAGLE-3 head's fc runs in the draft extend (``project_beside``) and its QKV products
        self._side = SideStream(self.device)
        #: where the lookup assist runs beside the chain (``assist_beside``), apart from the products
        #: forked at the same point (the first pick waits for it, the first draft step for them)
        self._lookup_side = SideStream(self.device)
        self._bucket_of = [next(b for b in self.sizes if b >= n) for n in range(self.sizes[-1] + 1)]
        #: the sampled acceptance's per-request tickets (at 0 between launches; one set serves
        #: every graph: replays run in stream order)
        self._tickets = torch.zeros(self.sizes[-1], dtype=torch.int32, device=self.device)

    def _picks_rows(self, sampled: bool, bs: int) -> bool:
        """Whether the (sampled, bs) graph's draft picks read the LM head's input rows
        (``head_pick``, ``sampled_head_logits``)."""
        return (self.head_pick and (not sampled or self.sampled_head_logits) and self.drafter is not None
                and self.drafter.picks_rows(bs))

    @property
    def speculative(self) -> bool:
        """Whether iterations carry drafts (else plain decoding)."""
        return self.drafter is not None or self.ngram is not None

    def admit(self, reqs: list[SpecRequestView]) -> None:
        """The host's view of ``reqs`` becomes their device state (after a prefill or a
        per-phase iteration): length, last token, sampling parameters, and the n-gram history."""
        if not reqs:
            return
        self.state.admit(reqs)
        if self.ngram is not None:
            self.ngram.admit(reqs)

    # ---- eligibility ---------------------------------------------------------------------
    @staticmethod
    def supports(proposer: object) -> tuple[bool, str]:
        if isinstance(proposer, NgramProposer):
            return True, ""
        if not isinstance(proposer, DraftModelProposer):
            return False, "not a draft-model proposer"
        if not proposer.shift:
            return False, "standalone drafts run on the per-phase path"
        if proposer.draft_extend != "v2":
            return False, "draft extend v1 needs host accept lengths"
        if proposer.next_hidden is None:
            return False, "no draft feature"
        return True, ""

    def can_run(self, reqs: list[SpecRequestView]) -> tuple[bool, str]:
        if len(reqs) > self.sizes[-1]:
            return False, f"batch size {len(reqs)} > largest captured {self.sizes[-1]}"
        for r in reqs:
            p = r.params
            if p.uses_penalties:
                return False, "penalties run on the per-phase path"
            if p.logprobs is not None:
                return False, "logprobs run on the per-phase path"
        return True, ""

    # ---- capture -------------------------------------------------------------------------
    def _build(self, s: int, sampled: bool, bs: int) -> IterGraph:
        dev = self.device
        ndt = s + 1
        d = self.drafter
        if d is None:
            if s and self.ngram is None:
                raise ValueError(f"plain decoding has no drafts: S = {s}")
            # n-gram drafts: the target verifies [bonus, d_1..d_S] (a DECODE forward when S = 0)
            phase = (PhaseSpec(ForwardMode.TARGET_VERIFY, ndt, "all", self.target_capture) if s
                     else PhaseSpec(ForwardMode.DECODE, 1, "last", CaptureHidden.NONE))
            verify = static_batch_of(phase, bs, self.target.backend, dev, self.target.dtype)
            chain: list[ForwardBatch] = []
            extend = None
        else:
            # The draft forwards read their feature where the body produced it (``_fed``): no
            # feature buffers in these batches.
            chain_phase = PhaseSpec(ForwardMode.DRAFT_DECODE, 1, "last", CaptureHidden.LAST)
            chain = [static_batch_of(dataclasses.replace(chain_phase, draft_step=chain_step(d.head, k).key), bs, d.runner.backend,
                                   dev, d.runner.dtype) for k in range(1, s)]
            # S = 0 scores one token: the decode kernel (split KV), not the extend kernel that a
            # multi-token verify needs (the latter is far slower for one token at large batch).
            mode = ForwardMode.TARGET_VERIFY if s else ForwardMode.DECODE
            verify = static_batch_of(PhaseSpec(mode, ndt, "all", self.target_capture), bs,
                                   self.target.backend, dev, self.target.dtype)
            # No logits rows: the next iteration applies the LM head to the selected feature.
            ext_phase = PhaseSpec(ForwardMode.DRAFT_EXTEND_V2, ndt, "none", CaptureHidden.FULL)
            extend = static_batch_of(ext_phase, bs, d.runner.backend, dev, d.runner.dtype)
        rows = torch.zeros(bs, dtype=torch.long, device=dev)
        last = None
        if d is not None and s and self._extends_last_rows(d):  # its inputs are the pick's, not the layout's
            last_phase = PhaseSpec(ForwardMode.DRAFT_DECODE, 1, "none", CaptureHidden.FULL)
            last = dataclasses.replace(static_batch_of(last_phase, bs, d.runner.backend, dev, d.runner.dtype),
                                       req_pool_indices=rows, unscaled_logits=True, fp32_logits=False)
        layout, chain, verify, extend = self._lay_out(rows, chain, verify, extend)
        ids = verify.input_ids.view(bs, ndt)
        # The draft's logits go to argmax / top-k kernels, a greedy verify's to argmax and a sampled
        # one's to the acceptance kernels: all widen as they load. Draft step k reads d_k in place.
        chain = [dataclasses.replace(b, fp32_logits=False, input_ids=ids[:, k], unscaled_logits=True,
                                     head_rows=self._picks_rows(sampled, bs))
                 for k, b in enumerate(chain, start=1)]
        verify = dataclasses.replace(verify, fp32_logits=False)
        if extend is not None:  # no logits rows: its final norm would only add the residual
            extend = dataclasses.replace(extend, unscaled_logits=True)
        if d is not None:
            for b in chain + [x for x in (extend, last) if x is not None]:
                d.runner.backend.init_capture_metadata(b)
        self.target.backend.init_capture_metadata(verify)
        g = IterGraph(s, sampled, bs, rows, chain, verify, extend, last, layout, ids,
                       torch.zeros(bs, s + 2, dtype=torch.long, device=dev))
        for _ in range(2):
            g.rows_host.append(torch.zeros(bs, dtype=torch.long, pin_memory=self._pinned))
            g.out_host.append(torch.zeros(bs, s + 2, dtype=torch.long, pin_memory=self._pinned))
        g.rows_np = [h.numpy() for h in g.rows_host]
        g.out_np = [h.numpy() for h in g.out_host]
        return g

    def _lay_out(self, rows: torch.Tensor, chain: list[ForwardBatch], verify: ForwardBatch,
                 extend: ForwardBatch | None) -> tuple[IterLayout, list[ForwardBatch], ForwardBatch, ForwardBatch | None]:
        """The batches rebound to one ``IterLayout`` (``row_io.lay_out``): draft step ``k`` at
        ``N - 2 + k`` plus its head's chain offset (EAGLE's), the verify block and the draft extend
        sharing ``N - 1 ..``."""
        segs: list[tuple[int, list[ForwardBatch]]] = []
        if chain:
            assert self.drafter is not None
            segs = [(chain_step(self.drafter.head, k).offset - 2, [b]) for k, b in enumerate(chain, start=1)]
        segs.append((-1, [verify] + ([extend] if extend is not None else [])))
        layout, out = lay_out(segs, rows, self.target.req_pool.req_to_token)
        last = out.pop()
        return layout, [b[0] for b in out], last[0], last[1] if extend is not None else None

    def _capture(self, s: int, sampled: bool, bs: int) -> IterGraph:
        t0 = time.perf_counter()
        g = self._build(s, sampled, bs)
        for _ in range(2):  # warm-up on padding rows only: touches row 0 and the scratch slot
            self._body(g)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        graph = make_graph(self.emulate, self.pool)
        graph.capture(lambda: self._body(g), watch=lambda: g.batches)
        g.graph = graph
        self.graphs[(s, sampled, bs)] = g
        self.capture_seconds += time.perf_counter() - t0
        return g

    def capture_all(self, choices: list[int], sampled: bool) -> dict[tuple[int, int], float]:
        """Capture every (S, bs) now: a capture in the middle of serving stalls it for the
        capture's duration, and adaptive S visits every S at every batch size. On CUDA, also
        time each (on padding rows): the device seconds per (S, bs), a first cost estimate for
        adaptive S that spares it trying every S at every batch size. The first replay of a graph
        just captured is not timed (its first launch uploads the graph and runs cold: the start-up
        price of S = 5 at bs 24 read 1.6x its serving time on the H200), then the fastest of
        ``TIMED_REPLAYS``."""
        timed: dict[tuple[int, int], float] = {}
        for bs in self.sizes:
            for s in choices:
                g = self.graphs.get((s, sampled, bs)) or self._capture(s, sampled, bs)
                if self.device.type == "cuda" and g.graph is not None:
                    g.rows.zero_()  # padding rows only: row 0 and the scratch KV slot
                    g.rows_now = None
                    timed[(s, bs)] = fastest_replay(g.graph.replay, TIMED_REPLAYS)
        return timed

    def bucket(self, n: int) -> int:
        """The captured batch size a batch of ``n`` requests replays at."""
        return self._bucket_of[n]

    def graph_for(self, s: int, sampled: bool, n: int) -> IterGraph:
        bs = self.bucket(n)
        g = self.graphs.get((s, sampled, bs))
        return g if g is not None else self._capture(s, sampled, bs)

    # ---- the captured body ---------------------------------------------------------------
    def _body(self, g: IterGraph) -> torch.Tensor:
        st, rows, s, bs = self.state, g.rows, g.num_steps, g.bs
        d = self.drafter
        # sampled: the RNG keys are read at the rows in the same launch (the offsets advance in ``commit``)
        draw = UniformDraw(st.seed, st.offset, _STREAM_ITER, 2 * s + 2) if g.sampled else None
        # the verify block's ids [bs, S + 1]: the bonus (written here) and the drafts (written by
        # their draft steps or copied from the lookups) land in place, no stack of them
        norm = d.first_norm if d is not None and s and self.norm_in_read else None
        got = read_rows(rows, st.seq_len, st.bonus, d.next_hidden if d is not None else None,
                        st.sampling if g.sampled else None, draw, bonus_out=g.ids[:, 0], layout=g.layout, norm=norm)
        n, feat, u = got.seq_len, got.feat, got.uniforms
        prm = RowParams(got.params) if got.params is not None else None
        ng = self.ngram
        if d is not None:
            assert feat is not None
            res = self._speculate(g, d, (feat, got.normed), n, prm, u)
        else:  # n-gram drafts (none when S = 0 or for plain decoding), verified from position N - 1
            if ng is not None:
                ng.lookup_into(rows, n, g.ids)  # S = 0: nothing
            res = self._verify_lookup(g, prm, u)
        # accept lengths, the rows' length / last token / RNG offset, the output block, the next
        # draft feature and the emitted tokens into the token histories (positions N..N+S; past
        # N + accept - 1 is junk): one launch (the uniforms above read the offsets before it advances them)
        accept = commit(g.out, rows, n, res, st, ng)
        if d is not None and isinstance(d.head, MtpHead) and res.layer_states is not None:
            ar = torch.arange(bs, device=rows.device)
            d.head.keep_layer_states(rows, res.layer_states.view(bs, s + 1, -1)[ar, accept - 1])
            d.head.clear_padding_row()
        return g.out

    def _speculate(self, g: IterGraph, d: Drafter, feats: tuple[torch.Tensor, torch.Tensor | None], n: torch.Tensor,
                   prm: RowParams | None, u: torch.Tensor | None) -> Commit:
        """Draft chain, verify, acceptance (sampled; greedy's is ``commit``'s) and draft extend;
        ``g.ids`` [bs, S + 1]: the verify block, its column 0 holding the bonus tokens (the draft
        steps write their tokens into columns 1..S; with ``assist``, the lookups replace them
        (sampled: and their q) in the rows whose history matches, after the chain or, greedy, as
        the picks write them: ``assist_beside``); ``feats``: the rows' draft features and, where
        ``read_rows`` applied it, their first norm; ``n``: their committed lengths. Every forward's
        other inputs were written by ``read_rows`` (``g.layout``). The draft extend reads the
        emitted tokens, not the drafts, so whichever chain was verified, the draft's KV and next
        feature follow the text."""
        rows, s, bs, ids = g.rows, g.num_steps, g.bs, g.ids
        # sampled: each draft's q and its candidates, written in place by the draft steps
        k_cand = min(DRAFT_CANDIDATES, d.head.draft_vocab_size)
        dist = ((torch.empty(bs, s, k_cand, dtype=torch.float32, device=rows.device),
                 torch.empty(bs, s, k_cand, dtype=torch.long, device=rows.device)) if prm is not None else None)

        # greedy: the lookups beside the chain, from here, on a side stream of their own
        assist, locks = self.assist, None
        if assist is not None and s and prm is None and self.assist_beside and d.takes_locks:
            ng = self.ngram
            assert ng is not None
            locks = self._lookup_side.run(lambda: ng.locks(rows, n, s, assist.min_match))

        def choose(logits: torch.Tensor | HeadRows, k: int, feature: torch.Tensor, scale: RowScale | None = None) -> None:
            out = (dist[0][:, k], dist[1][:, k]) if dist is not None else None
            if k == 0:
                self._lookup_side.join()
            d.choose(logits, prm, u[:, k] if u is not None else None, out, ids[:, k + 1], scale, (feature, rows),
                     lock=locks[:, k + 1] if locks is not None else None)

        self._chain(g, d, feats, choose)
        if assist is not None and s and locks is None:  # sampled: those rows' q one-hot at their lookups
            assert self.ngram is not None
            self.ngram.lookup_into(rows, n, ids, assist.min_match, dist)
        return self._verify_extend(g, d, n, prm, u, dist)

    def _verify_extend(self, g: IterGraph, d: Drafter, n: torch.Tensor, prm: RowParams | None, u: torch.Tensor | None,
                       dist: tuple[torch.Tensor, torch.Tensor] | None) -> Commit:
        """The verify of ``g.ids``, its argmax or acceptance, and the draft extend."""
        bs, ids, ndt = g.bs, g.ids, g.num_steps + 1
        v, e = g.verify, g.extend
        assert e is not None
        self.target.backend.init_replay_metadata(v)
        head = d.head
        # An EAGLE-3 head's fc reads only the captured layers: it runs on a side stream forked as
        # soon as the last of them is written, beside the verify's remaining layers, its LM head
        # and the argmax or the acceptance (which write the emitted tokens the extend needs)
        side: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        fork = None
        if isinstance(head, Eagle3Head) and self.project_beside and isinstance(self.target.model, DecoderLM):
            def fork(aux: torch.Tensor) -> None:
                side.append(self._side.run(lambda: self._project(head, aux, g)))
        tout = self.target.model(v, aux_ready=fork) if fork is not None else self.target.model(v)
        drafts = ids[:, 1:]
        emitted = e.input_ids.view(bs, ndt)  # the draft extend reads the emitted tokens where they land
        kind, feat, fqkv = FeatureKind.TARGET, tout.aux_hidden if tout.aux_hidden is not None else tout.hidden, None
        if side:
            kind, (feat, fqkv) = FeatureKind.PROJECTED, side[0]
        logits = tout.logits.view(bs, ndt, -1)
        # the other rows' K/V stored on the side stream (``_project``): the extend runs the last row alone
        last = g.extend_last if fqkv is not None else None
        picked = None
        if prm is None or u is None:
            accept = None
            if last is not None and tout.argmax is None:  # the pick inside the argmax's launch
                self._side.join()
                src = ExtendRows(emitted, drafts, None, e.positions, e.out_cache_loc, feat, fqkv, n)
                picked = argmax_and_pick(logits.view(bs * ndt, -1), src, last, self._tickets)
            else:
                sampling_kernels.logits_argmax(logits, tout.argmax, emitted)
        else:
            pick = None
            if last is not None and self.sampled_pick_in_accept:
                self._side.join()
                pick = LastRowPick.of(ExtendRows(emitted, drafts, None, e.positions, e.out_cache_loc, feat, fqkv, n), last)
                picked = pick.outputs
            accept, _ = self._sampled_accept(logits, drafts, dist, prm, u, emitted, pick)
        self._side.join()
        if last is not None:
            assert fqkv is not None
            if picked is None:
                picked = pick_last_rows(ExtendRows(emitted, drafts, accept, e.positions, e.out_cache_loc, feat, fqkv, n),
                                        last)
            d.runner.backend.init_replay_metadata(last)
            dout = head(fed_batch(last, kind, picked[0], d.runner.dtype, picked[1]))
            return Commit(emitted, drafts, accept, dout.hidden, d.next_hidden)
        d.runner.backend.init_replay_metadata(e)
        dout = head(fed_batch(e, kind, feat, d.runner.dtype, fqkv))
        states = dout.aux_hidden if isinstance(d.head, MtpHead) else None
        return Commit(emitted, drafts, accept, dout.hidden, d.next_hidden, layer_states=states)

    def _extends_last_rows(self, d: Drafter) -> bool:
        """Whether the draft extend runs each request's last accepted row alone (``extend_rows_beside``)."""
        return (self.extend_rows_beside and self.project_beside and self.qkv_beside and isinstance(d.head, Eagle3Head)
                and d.head.one_layer and isinstance(self.target.model, DecoderLM))

    def _project(self, head: Eagle3Head, aux: torch.Tensor, g: IterGraph) -> tuple[torch.Tensor, torch.Tensor | None]:
        """On the side stream, once the verify wrote the layers the head reads: the draft extend's
        features and (``qkv_beside``) their QKV product; with ``g.extend_last``, the K/V of its rows
        whose token is a draft: row ``i`` of a request takes ``d_{i+1}``, the verify block's ids
        shifted by one (its row S takes the next request's bonus: never kept, as the extend's rows
        past a request's accepted ones always were)."""
        e = g.extend
        assert e is not None
        if not self.qkv_beside:
            return head.project_target(aux), None
        feat, qkv = head.project_for(aux, e)
        if g.extend_last is not None and qkv is not None:
            m = e.num_tokens - 1
            head.store_kv(g.ids.view(-1)[1:], qkv[:m], e, e.positions[:m], e.out_cache_loc[:m])
        return feat, qkv

    def _chain(self, g: IterGraph, d: Drafter, feats: tuple[torch.Tensor, torch.Tensor | None],
               choose: Callable[[torch.Tensor | HeadRows, int, torch.Tensor, RowScale | None], None]) -> None:
        """The S drafts: the first from the stored feature (``feats``: it and, where ``read_rows``
        applied it, its first norm), then draft step ``k`` reading
        d_k (``g.ids[:, k]``) at N - 2 + k (EAGLE's offset) and the previous feature. With
        ``qkv_beside``, an EAGLE-3 head's mid-layer QKV product of each step's input feature runs on
        the side stream beside the LM head and pick before that step (the feature is known before
        the token), and the step's QKV streams the embedding's columns only."""
        head = d.head
        feat, normed = feats
        rows_mode = self._picks_rows(g.sampled, g.bs)
        nxt: list[torch.Tensor | None] = []  # the product the next step reads, once forked

        def fork_for(b: ForwardBatch) -> Callable[[torch.Tensor], None] | None:
            if not (self.qkv_beside and isinstance(head, Eagle3Head)):
                return None
            return lambda f: nxt.append(self._side.run(lambda: head.feature_qkv_for(f, b)))

        if g.num_steps >= 1:
            fork = fork_for(g.chain[0]) if g.chain and self.qkv_beside_first else None
            if fork is not None:
                fork(feat)
            choose(d.first_head(feat, normed, rows_mode), 0, feat, None)
        for k, b in enumerate(g.chain, start=1):
            d.runner.backend.init_replay_metadata(b)
            self._side.join()
            qkv = nxt.pop() if nxt else None
            fork = fork_for(g.chain[k]) if k < len(g.chain) else None
            fed = fed_batch(b, FeatureKind.DRAFT, feat, d.runner.dtype, qkv)
            out = head(fed, feature_ready=fork) if fork is not None else head(fed)
            feat = out.hidden
            choose(d.head_of(out), k, feat, out.row_scale)

    def _verify_lookup(self, g: IterGraph, prm: RowParams | None, u: torch.Tensor | None) -> Commit:
        """The target over the verify block ``g.ids`` ``[bs, S + 1]`` (S = 0 allowed; ``read_rows``
        wrote the bonus, the lookups the drafts) and the drafts' acceptance (sampled; greedy's is
        ``commit``'s): drafts without a draft model (n-gram lookups, or none), so q is one-hot at
        each draft."""
        bs, ndt = g.bs, g.ids.shape[1]
        drafts = g.ids[:, 1:]
        v = g.verify
        self.target.backend.init_replay_metadata(v)
        out = self.target.model(v)
        logits = out.logits.view(bs, ndt, -1)
        if prm is None or u is None:
            return Commit(sampling_kernels.logits_argmax(logits, out.argmax), drafts)
        accept, emitted = self._sampled_accept(logits, drafts, None, prm, u)
        return Commit(emitted, drafts, accept)

    def _sampled_accept(self, logits: torch.Tensor, drafts: torch.Tensor, dist: tuple[torch.Tensor, torch.Tensor] | None,
                        prm: RowParams, u: torch.Tensor, emitted_out: torch.Tensor | None = None,
                        pick: LastRowPick | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Lossless rejection sampling of the drafts ``[B, S]`` against the target's exact
        distribution (the plain sampler's: every filter applied on the device), in two kernel
        launches (``rejection_kernels.sampled_accept``). ``dist``: the drafts' probabilities and
        candidates (target ids), [B, S, K] each; None: deterministic drafts (q one-hot at the
        draft, as the per-phase path treats n-gram lookups). S = 0 samples the one row with
        ``u[:, 1]``. ``emitted_out`` [B, S + 1]: where the emitted tokens land (``pick`` reads them there)."""
        bs, ndt, _ = logits.shape
        s = ndt - 1
        dev = logits.device
        if s and dist is not None:
            q, cand = dist
        elif s:  # lookups: one candidate each, probability 1
            cand = drafts[:, :, None]
            q = torch.ones(bs, s, 1, dtype=torch.float32, device=dev)
        else:  # shaped like S > 0 (one compiled kernel for every S)
            cand = torch.empty(bs, 0, DRAFT_CANDIDATES, dtype=torch.long, device=dev)
            q = torch.empty(bs, 0, DRAFT_CANDIDATES, dtype=torch.float32, device=dev)
        u_residual = u[:, 2 * s] if s else u[:, 1]
        # the owned tickets cover every captured size; an eager body past them (the kit's, at a
        # batch above the largest graph) zeroes its own
        tickets = self._tickets if bs <= self._tickets.numel() else None
        # a bf16 target's logits are bf16 values (the LM head rounds to the model dtype)
        return rejection_kernels.sampled_accept(logits, drafts, cand, q, prm.col(rs.TEMP), prm.col(rs.TOP_K),
                                                prm.col(rs.TOP_P), prm.col(rs.MIN_P), u[:, s : 2 * s], u_residual,
                                                bf16_values=self.target.dtype == torch.bfloat16, tickets=tickets,
                                                emitted_out=emitted_out, pick=pick)

    # ---- launch ----------------------------------------------------------------------------
    def launch(self, reqs: list[SpecRequestView], num_steps: int, sampled: bool) -> InFlight:
        """Replay the iteration for ``reqs`` (their rows admitted, their KV allocated)."""
        n = len(reqs)
        g = self.graphs.get((num_steps, sampled, self.bucket(n)))
        captured = g is None
        if g is None:
            g = self._capture(num_steps, sampled, self.bucket(n))
        slot = self._slot ^ 1
        rows = [r.row for r in reqs]
        if rows != g.rows_now:  # else the graph's rows already hold them (a steady batch: no copy)
            staged = g.rows_np[slot]  # plain host writes, no tensor op
            staged[:] = 0
            staged[:n] = rows
            g.rows.copy_(g.rows_host[slot], non_blocking=True)
            g.rows_now = rows
        assert g.graph is not None
        done = self.launcher.launch(slot, g.graph.replay, g.out_host[slot], g.out)
        # Only a launch that got this far takes the slot: a retry after a failed launch must not
        # take the slot of the iteration still in flight.
        self._slot = slot
        return InFlight(reqs, num_steps, sampled, g.bs, captured, g.out_np[slot], done)
