"""The engine: loads the model, owns the KV memory and the scheduler, runs steps.

``Engine.step()`` runs one batch (a prefill step or a decode step), samples, and returns the
per-request deltas. A request whose forward raises or whose logits are not finite fails alone;
the other requests of its batch are re-run without it and go on.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from updraft.attention import resolve_backend_name
from updraft.batch import CaptureHidden, ForwardMode
from updraft.config import ConfigError, EngineConfig
from updraft.engine.detokenizer import TextStream
from updraft.engine.request import Request, RequestStatus, StepOutput
from updraft.engine.scheduler import ScheduledBatch, Scheduler
from updraft.engine.spec_driver import SpecDriver, build_driver, fused_planned
from updraft.errors import RequestError
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import LoadedModel, load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.runtime.model_runner import ModelRunner
from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.runtime.timing import PhaseTimer
from updraft.sampling_params import SamplingParams
from updraft.spec.setup import DraftSetup, load_draft, make_worker
from updraft.spec.stats import SpecStats
from updraft.spec.worker import SpecWorker

logger = logging.getLogger("updraft")

CPU_KV_BUDGET_BYTES = 2 << 30  # default KV pool on CPU (allocated lazily by the OS)
#: KV positions a growing request takes beyond what it needs while pages are free (reclaimable
#: slack; see PagedAllocator): most decode steps then allocate nothing.
KV_GROW_AHEAD_TOKENS = 32


@dataclass
class EngineStats:
    steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    preemptions: int = 0
    failed_requests: int = 0
    #: batch steps that raised and were re-run request by request (each request that fails
    #: alone is a failed request; a bug that breaks only batched steps shows here, not there)
    batch_failures: int = 0


class Engine:
    """Continuous-batching engine over one target model (speculative drafts plug in later)."""

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        self.config = config.validate()
        self.device = config.resolved_device()
        self.dtype = config.resolved_dtype()
        if loaded is None:
            path = resolve_model(config.model)
            loaded = load_checkpoint(path, dtype=self.dtype, device=self.device, progress=config.progress)
        self.loaded = loaded
        self.model = loaded.model
        self.model_config = loaded.config
        self.tokenizer = loaded.tokenizer
        mc = self.model_config
        v_layouts = mc.shared_kv or (mc.v_head_dim is not None and mc.v_head_dim != mc.head_dim)
        self.backend_name = resolve_backend_name(config.attention_backend, self.device, needs_v_layouts=v_layouts)
        self.draft: DraftSetup | None = None
        if config.speculative is not None:
            self.draft = load_draft(
                config.speculative, self.model, self.model_config.vocab_size, self.dtype, self.device, config.progress,
                target_source=loaded.source,
            )
        self.lookahead = self.draft.lookahead if self.draft is not None else 0
        if fused_planned(config, self.device) and not config.disable_overlap:
            # An iteration in flight may commit S + 1 tokens the host does not know yet, and the
            # next one writes S positions past that: allocate for both (see spec_driver). Plain
            # decoding (S = 0): one position.
            self.lookahead = 2 * self.lookahead + 1
        self._check_backend_modes()
        self._setup_memory()
        self.runner = ModelRunner(self.model, self.req_pool, self.num_pages, config.page_size, self.backend_name)
        self.scheduler = Scheduler(
            self.req_pool, self.allocator, config.max_running_requests, config.chunked_prefill_size, self.lookahead,
            admit_group=config.admit_group,
        )
        self.sampler = Sampler()
        #: Per-phase wall time for benchmarks (``engine.timer.enabled = True``; syncs on CUDA).
        self.timer = PhaseTimer(self.device, enabled=False)
        self.spec: SpecWorker | None = None
        if self.draft is not None:
            self.spec = make_worker(
                self.draft, self.runner, self.req_pool, self.num_pages, config.page_size, self.backend_name,
                self.sampler, self.timer,
            )
        self.eos_ids = set(self.tokenizer.eos_token_ids) | set(self.model_config.eos_token_ids)
        from updraft.engine.graph_setup import capture_engine_graphs

        self.graph_log = capture_engine_graphs(self)
        self.driver: SpecDriver | None = build_driver(self)
        if self.driver is not None:
            self.graph_log.append(self.driver.describe())
        self.requests: dict[str, Request] = {}
        self._pending: list[StepOutput] = []
        self._ids = itertools.count()
        # Requests without their own seed draw from the default generator, seeded here.
        torch.manual_seed(config.seed)
        self._seed_rng = random.Random(config.seed)  # RNG keys of unseeded requests (graph sampling)
        self.stats = EngineStats()
        self.spec_stats = SpecStats()
        self._fail_forward: set[str] = set()  # fault injection: request ids whose forward raises

    def _check_backend_modes(self) -> None:
        """Refuse at start-up a backend that lacks a mode this configuration will run."""
        from updraft.attention import backend_class

        target_modes = {ForwardMode.EXTEND, ForwardMode.DECODE}
        draft_modes: set[ForwardMode] = set()
        spec = self.config.speculative
        if spec is not None:
            target_modes.add(ForwardMode.TARGET_VERIFY)
            if spec.uses_draft_model:
                draft_modes = {ForwardMode.EXTEND, ForwardMode.DRAFT_DECODE}
                draft_modes.add(ForwardMode.DRAFT_EXTEND_V2 if spec.draft_extend == "v2" else ForwardMode.DRAFT_EXTEND)
        checks = [(self.backend_name, target_modes, "attention backend")]
        if draft_modes:
            name = spec.draft_attention_backend or "auto"  # type: ignore[union-attr]
            draft = self.backend_name if name == "auto" else resolve_backend_name(name, self.device)
            checks.append((draft, draft_modes, "draft attention backend"))
        for name, modes, what in checks:
            cls = backend_class(name)
            cls.check_device(self.device)
            missing = sorted(m.name for m in modes - cls.supported_modes)
            if missing:
                raise ConfigError(f"{what} {name!r} does not support {', '.join(missing)}, which this configuration needs")

    # ---- memory --------------------------------------------------------------------------
    def _kv_bytes_per_token(self) -> int:
        c = self.model_config
        draft = self.draft.kv_bytes_per_token if self.draft is not None else 0
        return c.kv_bytes_per_token(self.dtype) + draft

    def _setup_memory(self) -> None:
        cfg = self.config
        page = cfg.page_size
        context = min(cfg.max_model_len or self.model_config.context_len, self.model_config.max_position_embeddings)
        if cfg.max_model_len and cfg.max_model_len > self.model_config.max_position_embeddings:
            raise ConfigError(
                f"max_model_len={cfg.max_model_len} exceeds the model's "
                f"max_position_embeddings={self.model_config.max_position_embeddings}"
            )
        per_token = self._kv_bytes_per_token()
        if cfg.max_total_tokens is not None:
            tokens = cfg.max_total_tokens
        elif self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            budget = free - (1 - cfg.mem_fraction_static) * total
            tokens = int(budget // per_token)
            if tokens < page * 4:
                raise ConfigError(
                    f"no GPU memory left for the KV cache (free {free / 2**30:.1f} GiB); lower the "
                    "model size or raise mem_fraction_static"
                )
        else:
            tokens = min(CPU_KV_BUDGET_BYTES // per_token, cfg.max_running_requests * (context + 64))
        # One page is the scratch page; at least one full request must fit.
        self.num_pages = max(2, -(-tokens // page) + 1)
        capacity = (self.num_pages - 1) * page
        self.max_model_len = min(context, capacity - self.lookahead - 1)
        if self.max_model_len < 2:
            raise ConfigError(f"KV pool of {capacity} tokens is too small; raise max_total_tokens")
        width = self.max_model_len + self.lookahead + 1
        self.req_pool = ReqToTokenPool(cfg.max_running_requests, width, self.device)
        self.allocator = PagedAllocator(self.req_pool, self.num_pages, page, ahead=KV_GROW_AHEAD_TOKENS)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.allocator.capacity_tokens

    @property
    def kv_usage(self) -> float:
        return self.allocator.used_tokens / max(1, self.allocator.capacity_tokens)

    # ---- requests --------------------------------------------------------------------------
    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        *,
        detokenize: bool = True,
        stream_text: bool = True,
    ) -> Request:
        """Validate, tokenise and queue a request. Bad input raises ``RequestError``/``ValueError``
        with a one-line message; nothing is queued then.

        ``detokenize=False``: outputs carry token ids only (``new_text`` stays empty) and stop
        strings are not matched here; the caller detokenises and aborts the request when a stop
        string matches (the HTTP server does this off the engine thread). EOS, stop token ids and
        max_tokens still end the request here.

        ``stream_text=False``: the text is produced once, when the request finishes (its final
        output carries all of it; ``output_text`` is empty until then), so a request without stop
        strings costs no detokenisation per step. Token ids still stream every step."""
        params = (params or SamplingParams()).validate()
        if params.n != 1:
            raise RequestError(f"n={params.n}: the engine takes n=1 per request (LLM.generate fans out n)")
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError("prompt is empty: give at least one character")
            ids = self.tokenizer.encode(prompt)
            text = prompt
        else:
            ids = [int(t) for t in prompt]
            text = None
        if not ids:
            raise RequestError("prompt is empty: give at least one token")
        vocab = self.model_config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if len(ids) >= self.max_model_len:
            raise RequestError(
                f"prompt has {len(ids)} tokens but the context is {self.max_model_len} tokens "
                "(the prompt must leave room for at least one generated token)"
            )
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if rid in self.requests:
            raise RequestError(f"request id {rid!r} is already in use")
        rng_seed = (params.seed if params.seed is not None else self._seed_rng.getrandbits(32)) & ((1 << 48) - 1)
        req = Request(request_id=rid, prompt_ids=ids, params=params, prompt=text, rng_seed=rng_seed)
        req.max_len = self.max_model_len
        if params.seed is not None:
            req.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        req.stop_ids = self._stop_ids(params)
        if detokenize:
            req.text = TextStream(self.tokenizer, ids, params.skip_special_tokens, params.stop,
                                  params.include_stop_str_in_output)
            req.stream_text = stream_text
        self.requests[rid] = req
        self.scheduler.add(req)
        return req

    def abort(self, request_id: str) -> bool:
        """Abort a request: its KV is freed now and a final output is reported. False if unknown."""
        req = self.requests.get(request_id)
        if req is None or req.finished:
            return False
        self._finish(req, "abort")
        self._pending.append(StepOutput(req.request_id, [], self._catch_up_text(req), True, "abort"))
        return True

    def has_unfinished(self) -> bool:
        inflight = self.driver is not None and self.driver.inflight is not None
        return self.scheduler.num_unfinished > 0 or bool(self._pending) or inflight

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    # ---- the step ----------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        with self.timer("step"):
            return self._step()

    def _step(self) -> list[StepOutput]:
        drv = self.driver
        if drv is not None and drv.inflight is not None and not self._overlap_continues():
            self._drain()
        with self.timer("schedule"):
            sched = self.scheduler.schedule()
        if sched is None:
            self._drain()
        else:
            self.stats.steps += 1
            if sched.mode == ForwardMode.EXTEND:
                self.stats.prefill_steps += 1
                self.stats.prompt_tokens += sum(sched.extend_lens)
            else:
                self.stats.decode_steps += 1
            self._run_isolated(sched)
        if self.spec is not None:
            self.spec.flush_observed()
        out, self._pending = self._pending, []
        return out

    def _run_isolated(self, sched: ScheduledBatch) -> None:
        try:
            self._run(sched)
            return
        except Exception as exc:  # noqa: BLE001 - one request's failure must not stop the others
            if len(sched.reqs) == 1:
                self._fail(sched.reqs[0], exc)
                return
            self.stats.batch_failures += 1
        for i, req in enumerate(sched.reqs):
            single = ScheduledBatch(sched.mode, [req], [sched.extend_lens[i]], [sched.samples[i]])
            try:
                self._run(single)
            except Exception as exc:  # noqa: BLE001
                self._fail(req, exc)

    def _run(self, sched: ScheduledBatch) -> None:
        for req in sched.reqs:
            if req.request_id in self._fail_forward:
                raise RuntimeError(f"injected forward failure for {req.request_id}")
        if sched.mode == ForwardMode.DECODE and self.driver is not None and self.driver.can_run(sched.reqs):
            if self.spec is not None:  # drafts behind after per-phase S = 0 steps
                self.spec.catch_up(sched.reqs)
            self._run_fused(sched.reqs)
            return
        if sched.mode == ForwardMode.DECODE and self.spec is not None:
            self._run_speculative(sched.reqs)
            return
        self._drain()  # a per-step forward needs every request's tokens on the host
        phase = "prefill" if sched.mode == ForwardMode.EXTEND else "decode"
        with self.timer(phase):
            batch = self._build_batch(sched)
            out = self.runner.forward(batch)
        starts = [r.num_computed for r in sched.reqs]
        for req, n in zip(sched.reqs, sched.extend_lens):
            req.num_computed += n
        sampling = [i for i, s in enumerate(sched.samples) if s]
        if sampling:
            reqs = [sched.reqs[i] for i in sampling]
            logits = out.logits if len(sampling) == len(sched.reqs) else out.logits[sampling]
            with self.timer("sample"):
                tokens, logprobs, bad = self._sample(reqs, logits)
            for req, tok, lp, is_bad in zip(reqs, tokens, logprobs, bad):
                req.in_prefill = False
                if is_bad:
                    self._fail(req, RuntimeError("the model produced non-finite logits"))
                    continue
                self._emit(req, [tok], [lp] if lp is not None else [])
        if self.spec is not None and sched.mode == ForwardMode.EXTEND:
            with self.timer("draft_prefill"):
                self.spec.proposer.on_prefill(
                    sched.reqs, starts, sched.extend_lens, sched.samples, self.spec.target_hidden(out)
                )
        if self.driver is not None:  # the device state follows the host's view again
            self.driver.admit([r for r, s in zip(sched.reqs, sched.samples) if s and not r.finished])

    def _run_speculative(self, reqs: list[Request]) -> None:
        """The per-phase iteration (n-gram, standalone, v1, penalties, logprobs, large batches)."""
        assert self.spec is not None
        drv = self.driver
        if drv is not None:
            self._drain()
            self.spec.proposer.redraft_first(drv.claim_host_drafts(reqs))
        res = self.spec.step(reqs)
        for i, req in enumerate(reqs):
            req.num_computed += res.accept_lens[i]
            self._emit(req, res.tokens[i], res.logprobs[i] if res.logprobs is not None else [])
        if drv is not None:
            drv.admit([r for r in reqs if not r.finished])

    # ---- the fused iteration (overlap) ---------------------------------------------------
    def _overlap_continues(self) -> bool:
        """Whether the next step can launch while the iteration in flight runs: only another
        decode iteration that needs no preemption (anything else drains first). Requests
        waiting while every running slot is taken do not stop it: nothing can be admitted
        until the host reads a finish, which is one iteration late under overlap anyway (with
        a queue longer than the batch, draining every step would serialise host and device)."""
        sch = self.scheduler
        return not sch.can_admit() and all(not r.in_prefill for r in sch.running) and sch.decode_fits()

    def _run_fused(self, reqs: list[Request]) -> None:
        drv = self.driver
        assert drv is not None
        with self.timer("fused_launch"):
            inf = drv.launch(reqs)
        if not drv.overlap:  # read it now (back to back with the next one: no drained())
            self._complete(inf)
            return
        prev, drv.inflight = drv.inflight, inf
        if prev is not None:
            self._complete(prev)

    def _drain(self) -> None:
        """Read the iteration in flight, if any (then nothing is in flight)."""
        drv = self.driver
        if drv is None or drv.inflight is None:
            return
        inf, drv.inflight = drv.inflight, None
        self._complete(inf)
        drv.drained()

    def _complete(self, inf) -> None:  # noqa: ANN001 - spec.fused.InFlight
        """Emit a finished iteration's tokens; requests that finished meanwhile are skipped."""
        drv = self.driver
        assert drv is not None
        with self.timer("fused_wait"):
            acc, toks = drv.finish(inf)
        for req, a, t in zip(inf.reqs, acc, toks):
            if req.finished:
                continue
            req.num_computed += a
            if inf.num_steps:
                req.spec.record(inf.num_steps, a - 1)
            self._emit(req, t, [])
        for req in drv.take_freeable():
            self.scheduler.free_kv(req)

    def _build_batch(self, sched: ScheduledBatch):  # -> ForwardBatch
        if sched.mode == ForwardMode.EXTEND:
            ids: list[int] = []
            for req, n in zip(sched.reqs, sched.extend_lens):
                ids.extend(req.tokens(req.num_computed, req.num_computed + n))
            seq_lens = [r.num_computed + n for r, n in zip(sched.reqs, sched.extend_lens)]
            return self.runner.make_batch(
                ForwardMode.EXTEND,
                ids,
                [r.row for r in sched.reqs],
                seq_lens,
                sched.extend_lens,
                logits="last",
                capture_hidden=self.spec.target_capture if self.spec is not None else CaptureHidden.NONE,
            )
        ids = [r.last_token for r in sched.reqs]
        return self.runner.make_batch(
            ForwardMode.DECODE,
            ids,
            [r.row for r in sched.reqs],
            [r.seq_len for r in sched.reqs],
            [1] * len(sched.reqs),
            logits="last",
            stride=1,
        )

    def _sample(
        self, reqs: list[Request], logits: torch.Tensor
    ) -> tuple[list[int], list[dict[str, Any] | None], list[bool]]:
        params = [r.params for r in reqs]
        gens = [r.generator for r in reqs]  # None: one batched draw on the default RNG
        history = [(r.prompt_ids, r.output_ids) for r in reqs] if any(p.uses_penalties for p in params) else None
        sb = SamplingBatch.build(params, gens, logits.shape[-1], logits.device, history)
        res = self.sampler.sample(logits, sb)
        tokens = res.tokens.tolist()
        bad = res.bad_rows.tolist() if res.bad_rows is not None else [False] * len(reqs)
        lps: list[dict[str, Any] | None] = [None] * len(reqs)
        if any(p.logprobs is not None for p in params):
            sampled = res.logprobs.tolist()
            top_ids = res.top_logprob_ids.tolist() if res.top_logprob_ids is not None else None
            top_lps = res.top_logprobs.tolist() if res.top_logprobs is not None else None
            for i, p in enumerate(params):
                if p.logprobs is None:
                    continue
                entry: dict[str, Any] = {"token_id": tokens[i], "logprob": sampled[i], "top": []}
                if p.logprobs and top_ids is not None and top_lps is not None:
                    entry["top"] = list(zip(top_ids[i][: p.logprobs], top_lps[i][: p.logprobs]))
                lps[i] = entry
        return tokens, lps, bad

    # ---- outputs -----------------------------------------------------------------------
    def _stop_ids(self, p: SamplingParams) -> frozenset[int]:
        return frozenset(p.stop_token_ids) | (frozenset() if p.ignore_eos else frozenset(self.eos_ids))

    def _token_cut(self, req: Request, tokens: list[int]) -> tuple[int, str | None]:
        """How many of ``tokens`` to keep, and the finish reason the last kept one brings: the
        first stop id (EOS, stop_token_ids) or the token that reaches max_tokens or the context
        limit, whichever comes first (a stop id on that very token wins). At least one is kept."""
        stop_ids = req.stop_ids if req.stop_ids is not None else self._stop_ids(req.params)
        room = max(1, min(req.params.max_tokens - len(req.output_ids), req.max_len - req.seq_len))
        if stop_ids and not stop_ids.isdisjoint(tokens):
            first = next(i for i, t in enumerate(tokens) if t in stop_ids)
            if first < room:
                return first + 1, "stop"
        if room <= len(tokens):
            return room, "length"
        return len(tokens), None

    def _emit(self, req: Request, tokens: list[int], logprobs: list[dict[str, Any]]) -> None:
        """Append sampled tokens, check stop conditions, detokenise, report the delta. Tokens
        after a stop condition are dropped (speculation can produce several at once).

        Per request, not per token: stop ids and lengths cut the list first, then the text of
        every kept token is decoded at once (a stop string inside them cuts again, exactly where
        token-by-token feeding would). A request that wants no streamed text and has no stop
        strings is not detokenised until it finishes."""
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        n, reason = self._token_cut(req, tokens)
        new_ids = tokens[:n]
        req.output_ids.extend(new_ids)
        if self.spec is not None:
            self.spec.observe(req, new_ids)
        text = ""
        ts = req.text
        if ts is not None and (reason is not None or req.stream_text or ts.has_stop_strings):
            text, stop_at = ts.feed(req.output_ids[req.text_pos :])
            if stop_at is not None:
                keep = req.text_pos + stop_at + 1
                drop = len(req.output_ids) - keep
                if drop:
                    del req.output_ids[keep:]
                    del new_ids[n - drop :]
                reason = "stop"
            req.text_pos = len(req.output_ids)
            if reason is not None and stop_at is None:
                text += ts.finish()
            req.output_text += text
        self.stats.generated_tokens += len(new_ids)
        out = StepOutput(req.request_id, new_ids, text, reason is not None, reason)
        if logprobs:
            out.new_logprobs = logprobs[: len(new_ids)]
            req.logprobs.extend(out.new_logprobs)
        if reason is not None:
            self._finish(req, reason)
        self._pending.append(out)

    def _catch_up_text(self, req: Request) -> str:
        """Text of output tokens not detokenised yet (``stream_text=False``), for a request that
        ends without a final emit (abort, error): what streaming would have emitted by now."""
        ts = req.text
        if ts is None or req.text_pos == len(req.output_ids):
            return ""
        text, _ = ts.feed(req.output_ids[req.text_pos :])  # no stop strings: never lazy with them
        req.text_pos = len(req.output_ids)
        req.output_text += text
        return text

    def _finish(self, req: Request, reason: str) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finish_time = time.perf_counter()
        self.stats.preemptions += req.num_preemptions
        if self.driver is not None and self.driver.in_flight(req):
            self.scheduler.retire(req)  # its KV is freed once the iteration in flight is done
            self.driver.defer(req)
        else:
            self.scheduler.release(req)
        if self.driver is not None:
            self.driver.forget(req)
        self.spec_stats.merge(req.spec)
        if self.spec is not None:
            self.spec.release(req)

    def inject_failure(self, request_id: str) -> None:
        """Fault injection for tests: every forward that includes this request raises."""
        self._fail_forward.add(request_id)

    def _fail(self, req: Request, exc: BaseException) -> None:
        self._fail_forward.discard(req.request_id)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        logger.warning("request %s failed: %s", req.request_id, msg)
        req.error = msg
        self.stats.failed_requests += 1
        self._finish(req, "error")
        self._pending.append(StepOutput(req.request_id, [], self._catch_up_text(req), True, "error", error=msg))

    def release_finished(self, request_id: str) -> Request | None:
        """Forget a finished request (the caller has read its outputs)."""
        req = self.requests.get(request_id)
        if req is not None and req.finished:
            return self.requests.pop(request_id)
        return None
