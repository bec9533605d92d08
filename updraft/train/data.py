"""Self-distillation data for draft heads: the target answers a prompt set through the updraft
engine, then one teacher-forced target forward over prompt + response records what the head
trains on.

Per token position ``p`` of a sequence ``t[0..n-1]`` (flat over all sequences):

* ``tokens[p]`` = ``t[p]``;
* ``hidden[p]``: the target's final normed hidden state at ``p`` (the EAGLE-1 feature, and the
  source of the target's logits ``lm_head(hidden[p])`` = its distribution over ``t[p+1]``);
* ``aux[p]`` (EAGLE-3): the outputs of the three aux layers at ``p``, concatenated (3h);
* ``argmax[p]``: the target's greedy token after ``p`` (= ``t[p+1]`` along greedy responses).

These come from the engine's own EXTEND forward with ``CaptureHidden.FULL`` (the same path
and kernels that feed the draft at inference). A head row ``j`` reads ``(t[j+1], feature[j])``
and is trained against target position ``j+1`` (tests/train/test_data.py checks the pairing).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from updraft.batch import CaptureHidden, ForwardMode
from updraft.data import free_turn
from updraft.data.prompts import Message, TrainPrompt
from updraft.engine.engine import Engine
from updraft.progress import bar as progress_bar
from updraft.sampling_params import SamplingParams

logger = logging.getLogger("updraft.train")


@dataclass
class DistillData:
    """Teacher-forced target states of ``S`` sequences, concatenated over tokens (N in all)."""

    tokens: torch.Tensor  # [N] int64
    offsets: torch.Tensor  # [S + 1] int64, on the CPU
    prompt_lens: torch.Tensor  # [S] int64, on the CPU
    hidden: torch.Tensor  # [N, h] final normed hidden (the target's dtype)
    argmax: torch.Tensor  # [N] int64
    aux: torch.Tensor | None = None  # [N, 3h] EAGLE-3 aux layers
    aux_layers: tuple[int, ...] = ()
    info: dict[str, float] = field(default_factory=dict)
    _argmax_host: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_seqs(self) -> int:
        return int(self.prompt_lens.numel())

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())

    def nbytes(self) -> int:
        ts = [self.tokens, self.hidden, self.argmax] + ([self.aux] if self.aux is not None else [])
        return sum(t.numel() * t.element_size() for t in ts)

    def to(self, device: torch.device | str) -> DistillData:
        aux = self.aux.to(device) if self.aux is not None else None
        return replace(self, tokens=self.tokens.to(device), hidden=self.hidden.to(device), argmax=self.argmax.to(device), aux=aux)

    def target_mask(self) -> torch.Tensor:
        """[N] bool: positions ``p`` whose next token is a response token with a successor in the
        data (``P-1 <= p <= n-2``): the target distributions the head is trained to match."""
        mask = torch.zeros(self.num_tokens, dtype=torch.bool)
        for s, (a, b) in enumerate(zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())):
            mask[a + int(self.prompt_lens[s]) - 1 : b - 1] = True
        return mask

    def token_counts(self, vocab: int) -> torch.Tensor:
        """How often each token is the target's next token at a training position."""
        ids = self.argmax.cpu()[self.target_mask()]
        return torch.bincount(ids, minlength=vocab)[:vocab]

    def stats(self) -> dict[str, float]:
        lens = self.lengths.float()
        return {
            "sequences": float(self.num_seqs), "tokens": float(self.num_tokens),
            "training_positions": float(self.target_mask().sum()),
            "mean_len": float(lens.mean()) if self.num_seqs else 0.0, "max_len": float(lens.max()) if self.num_seqs else 0.0,
            "bytes": float(self.nbytes()),
        }

    # ---- training batches -----------------------------------------------------------------
    def subset(self, seqs: list[int]) -> DistillData:
        """The given sequences only (e.g. the held-out ones), in that order."""
        idx = torch.cat([torch.arange(int(self.offsets[s]), int(self.offsets[s + 1])) for s in seqs]) if seqs else torch.zeros(0, dtype=torch.long)
        lens = self.lengths[seqs] if seqs else torch.zeros(0, dtype=torch.long)
        offsets = torch.zeros(len(seqs) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        dev = self.tokens.device
        aux = self.aux[idx.to(dev)] if self.aux is not None else None
        return DistillData(
            self.tokens[idx.to(dev)], offsets, self.prompt_lens[seqs] if seqs else torch.zeros(0, dtype=torch.long),
            self.hidden[idx.to(dev)], self.argmax[idx.to(dev)], aux, self.aux_layers,
        )

    def batch(self, seqs: list[int], device: torch.device | str, eagle3: bool, pad_to: int = 1) -> TrainBatch:
        """Right-padded ``[B, L]`` batch of the given sequences, on ``device``; ``L`` is the longest
        one rounded up to a multiple of ``pad_to`` (fewer distinct shapes; padding is masked out of
        every loss, and causal attention keeps real rows from reading it)."""
        lens = self.lengths[seqs].tolist()
        starts = self.offsets[seqs].tolist()
        length = -(-max(lens) // pad_to) * pad_to
        bsz = len(seqs)
        # Flat gather index per (row, col); padded columns repeat the row's last token and are
        # masked out of every loss. Built on the host, copied without waiting on the GPU.
        col = torch.arange(length)
        lens_t = torch.tensor(lens)
        idx_host = torch.tensor(starts)[:, None] + torch.minimum(col[None, :], lens_t[:, None] - 1)
        valid = col[None, :] < lens_t[:, None]
        plen = self.prompt_lens[seqs]
        target = valid & (col[None, :] >= plen[:, None] - 1) & (col[None, :] <= lens_t[:, None] - 2)
        idx, valid_dev = _to(idx_host, self.tokens.device), _to(valid, self.tokens.device)
        ids = torch.where(valid_dev, self.tokens[idx], torch.zeros_like(idx))
        feature = self.aux[idx] if eagle3 else None
        if eagle3 and feature is None:
            raise ValueError("EAGLE-3 training needs aux hidden states; the data has none")
        return TrainBatch(
            ids=ids.to(device), hidden=self.hidden[idx].to(device), argmax=self.argmax[idx].to(device),
            target_mask=_to(target, torch.device(device)), feature=feature.to(device) if feature is not None else None,
            size=bsz, host_mask=target, host_argmax=self.argmax_host()[idx_host],
        )

    def argmax_host(self) -> torch.Tensor:
        """``argmax`` in host memory (int32; copied once): batches carry their rows of it, so a
        step counts its training rows without reading the GPU."""
        if self._argmax_host is None:
            self._argmax_host = self.argmax.to("cpu", torch.int32)
        return self._argmax_host


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; a host tensor goes to a GPU from pinned memory without the host waiting
    (a pageable copy waits for everything queued on the GPU first)."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class TrainBatch:
    ids: torch.Tensor  # [B, L] int64 (0 in padding)
    hidden: torch.Tensor  # [B, L, h] target final normed hidden
    argmax: torch.Tensor  # [B, L] the target's next token
    target_mask: torch.Tensor  # [B, L] bool: position p is a training target (see DistillData.target_mask)
    feature: torch.Tensor | None  # [B, L, 3h] EAGLE-3 aux features (None: EAGLE-1 reads ``hidden``)
    size: int
    # host copies (CPU) of target_mask and argmax, when the batch builder made them: the loss counts
    # its rows from these instead of reading the GPU (None: it reads the counts from the device)
    host_mask: torch.Tensor | None = None
    host_argmax: torch.Tensor | None = None

    def head_input(self) -> torch.Tensor:
        return self.feature if self.feature is not None else self.hidden

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> TrainBatch:
        """The same batch with ``fn`` applied to every device tensor (pinning, a device copy); the
        host copies stay as they are."""
        return TrainBatch(fn(self.ids), fn(self.hidden), fn(self.argmax), fn(self.target_mask),
                          fn(self.feature) if self.feature is not None else None, self.size, self.host_mask, self.host_argmax)


def feature_bytes_per_token(hidden_size: int, eagle3: bool) -> int:
    """What teacher forcing stores per token: the final hidden state (and EAGLE-3's three aux
    layers) in bf16 / fp16, plus the token and its argmax (int64)."""
    return hidden_size * (4 if eagle3 else 1) * 2 + 16


def pick_data_device(choice: str, num_tokens: int, hidden_size: int, eagle3: bool, device: torch.device,
                     reserve_bytes: int = 20 * 2**30) -> torch.device:
    """Where the teacher-forced data lives: ``choice`` cpu / cuda, or auto: the GPU when the data
    fits in its free memory with ``reserve_bytes`` left for training (fastest: batches are
    gathered on the GPU), else the CPU (batches are gathered there, one step ahead on a worker
    thread, and copied over: a 15-25M-token set is 70-115 GB in bf16)."""
    if choice == "cuda" and device.type != "cuda":
        raise ValueError("data_device='cuda' needs training on a GPU (device cuda)")
    if choice != "auto":
        return torch.device(choice)
    if device.type != "cuda":
        return device
    free, _ = torch.cuda.mem_get_info(device)
    need = num_tokens * feature_bytes_per_token(hidden_size, eagle3)
    return device if need + reserve_bytes <= free else torch.device("cpu")


class Prefetcher:
    """Training batches on ``device``. Data on the GPU: built on demand. Data on the CPU (and a
    GPU to train on): the next batch is gathered into pinned memory on a worker thread while
    the current step runs (the gather releases the GIL), then copied without blocking."""

    def __init__(self, data: DistillData, device: torch.device, eagle3: bool, pad_to: int = 1) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        self.data, self.device, self.eagle3, self.pad_to = data, device, eagle3, pad_to
        self.async_copy = data.tokens.device.type == "cpu" and device.type == "cuda"
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="batches") if self.async_copy else None
        self.pending: tuple[tuple[int, ...], Future[TrainBatch]] | None = None

    def _host(self, seqs: list[int]) -> TrainBatch:
        b = self.data.batch(seqs, "cpu", self.eagle3, self.pad_to)
        return b.map(lambda t: t.pin_memory()) if torch.cuda.is_available() else b

    def get(self, seqs: list[int], upcoming: list[int] | None = None) -> TrainBatch:
        """The batch of ``seqs``; ``upcoming``: the batch after it (prefetched)."""
        if self.pool is None:
            return self.data.batch(seqs, self.device, self.eagle3, self.pad_to)
        pending, self.pending = self.pending, None
        host = pending[1].result() if pending is not None and pending[0] == tuple(seqs) else self._host(seqs)
        if upcoming:
            self.pending = (tuple(upcoming), self.pool.submit(self._host, upcoming))
        return host.map(lambda t: t.to(self.device, non_blocking=True))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def epoch_batches(lengths: list[int], batch_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Batches of sequence indices for one epoch, a pure function of ``(lengths, seed, epoch)``
    (so a resumed run sees the same order): shuffle, sort windows of 64 sequences by length
    (less padding), cut each window into batches whose padded size ``len(batch) * max length``
    stays within ``batch_tokens`` (a longer sequence alone is one batch), shuffle the batches."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens={batch_tokens} must be >= 1")
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(len(lengths), generator=g).tolist()
    window = 64
    batches: list[list[int]] = []
    for i in range(0, len(perm), window):
        chunk = sorted(perm[i : i + window], key=lambda s: (lengths[s], s))
        cur: list[int] = []
        for s in chunk:  # ascending length: the newest member is the longest
            if cur and (len(cur) + 1) * lengths[s] > batch_tokens:
                batches.append(cur)
                cur = []
            cur.append(s)
        if cur:
            batches.append(cur)
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[o] for o in order]


# ---- generation ---------------------------------------------------------------------------
def chat_ids(engine: Engine, text: str) -> list[int]:
    return engine.tokenizer.encode_chat([{"role": "user", "content": text}], add_generation_prompt=True)


def conversation_ids(engine: Engine, messages: list[Message]) -> list[int]:
    return engine.tokenizer.encode_chat(messages, add_generation_prompt=True)


@dataclass
class GenerationResult:
    """Prompt + response token ids per kept sequence (ordered by prompt index, then stage) and
    what the generation cost."""

    seqs: list[list[int]]
    prompt_lens: list[int]
    prompt_index: list[int]  # which prompt each sequence answers (both stages of a passage task)
    stats: dict[str, float]

    def select(self, keep: set[int]) -> tuple[list[list[int]], list[int]]:
        """``(seqs, prompt_lens)`` of the sequences whose prompt index is in ``keep``."""
        rows = [k for k, i in enumerate(self.prompt_index) if i in keep]
        return [self.seqs[k] for k in rows], [self.prompt_lens[k] for k in rows]

    def save(self, folder: str | Path, meta: dict[str, object]) -> None:
        """``sequences.safetensors`` (int32 tokens, offsets, prompt lengths and indices) with
        ``meta`` (what generated them) as JSON metadata; written to a temporary name, then renamed."""
        import json
        import os

        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        lens = torch.tensor([len(s) for s in self.seqs], dtype=torch.long)
        offsets = torch.zeros(len(self.seqs) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        t = {
            "tokens": torch.tensor([x for s in self.seqs for x in s], dtype=torch.int32),
            "offsets": offsets,
            "prompt_lens": torch.tensor(self.prompt_lens, dtype=torch.long),
            "prompt_index": torch.tensor(self.prompt_index, dtype=torch.long),
        }
        tmp = folder / ".sequences.safetensors.tmp"
        save_file(t, str(tmp), metadata={"meta": json.dumps(meta, sort_keys=True), "stats": json.dumps(self.stats)})
        os.replace(tmp, folder / "sequences.safetensors")

    @classmethod
    def load(cls, folder: str | Path) -> tuple[GenerationResult, dict[str, object]] | None:
        """The cached sequences and their ``meta``, or None when the folder has none."""
        import json

        from safetensors import safe_open

        path = Path(folder) / "sequences.safetensors"
        if not path.is_file():
            return None
        with safe_open(str(path), framework="pt", device="cpu") as f:
            md = f.metadata() or {}
            t = {k: f.get_tensor(k) for k in f.keys()}
        flat, off = t["tokens"].tolist(), t["offsets"].tolist()
        seqs = [flat[off[i] : off[i + 1]] for i in range(len(off) - 1)]
        stats = {k: float(v) for k, v in json.loads(md.get("stats", "{}")).items()}
        res = cls(seqs, t["prompt_lens"].tolist(), t["prompt_index"].tolist(), stats)
        return res, json.loads(md.get("meta", "{}"))


def collect_sequences(
    engine: Engine, prompts: list[TrainPrompt], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
    deadline: float | None = None, progress: bool = True, desc: str = "Generating",
) -> GenerationResult:
    """The target's responses to ``prompts`` through the engine (continuous batching; CUDA
    graphs when the engine captured them); a prompt's ``max_tokens`` caps its first response
    instead of ``max_new_tokens``. Two-stage tasks (passage, news, advice, multi-turn,
    self-instruct): as soon as the first response finishes, the second stage (the passage's
    follow-up, the conversation's next user turn, or the self-written request in a new
    conversation) is queued ahead of the remaining first-stage prompts, so a deadline cuts both
    stages alike. Both stages are training sequences (each response came from the target),
    except a free turn's first (an open user turn the target continued as the user, sampled
    with the prompt's seed even when the run is greedy; counted in ``stats["user_turn_tokens"]``);
    ``stats["fallback_requests"]`` counts self-instruct and free-turn prompts whose own request
    was unusable.

    Requests are fed in waves: whenever a quarter of the engine's ``max_running_requests`` slots
    are free, enough new requests to fill them are added at once, so their prompts share one
    prefill step (prefill runs eagerly; topping up one finished request at a time would put a
    prefill between every few graphed decode steps). Past ``deadline`` (``time.time()``) everything in flight is aborted: partial responses are
    still valid teacher-forcing data (greedy or sampled, each token came from the target) and
    are kept when they have at least 2 tokens; prompts never started are dropped."""
    c = _Collector(engine, prompts, max_new_tokens, temperature, seed)
    c.bar = progress_bar(len(prompts), desc, enabled=progress, unit="req")
    t0 = time.perf_counter()
    try:
        while True:
            c.top_up()
            if not c.inflight:
                break
            for out in engine.step():
                if out.finished and out.request_id in c.inflight:
                    c.stats["finished" if out.finish_reason != "abort" else "aborted"] += 1
                    c.finish(out.request_id)
            if c.bar is not None:
                c.bar.set_postfix(tok=int(c.stats["generated_tokens"]), refresh=False)
            if deadline is not None and time.time() > deadline and c.inflight:
                c.abort_all()
                break
    finally:
        if c.bar is not None:
            c.bar.close()
    stats = c.stats
    stats["wall_s"] = time.perf_counter() - t0
    stats["tokens_per_s"] = stats["generated_tokens"] / max(stats["wall_s"], 1e-9)
    done = sorted(c.done, key=lambda d: (d[0], d[1]))
    return GenerationResult(
        [ids + resp for _, _, ids, resp in done], [len(ids) for _, _, ids, _ in done], [d[0] for d in done], stats
    )


class _Collector:
    """``collect_sequences``' state: prompts to start (second stages first), requests in flight
    (id -> prompt index, stage, prompt ids), finished sequences, counters."""

    def __init__(self, engine: Engine, prompts: list[TrainPrompt], max_new_tokens: int, temperature: float, seed: int) -> None:
        self.engine, self.prompts = engine, prompts
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.limit = engine.max_model_len - 2
        self.slots = engine.config.max_running_requests
        self.refill = max(1, self.slots // 4)
        self.todo: deque[tuple[int, int, list[Message]]] = deque((i, 1, p.messages()) for i, p in enumerate(prompts))
        self.follow: deque[tuple[int, int, list[Message]]] = deque()
        self.inflight: dict[str, tuple[int, int, list[int]]] = {}
        self.done: list[tuple[int, int, list[int], list[int]]] = []
        self.stats = {"requests": 0.0, "finished": 0.0, "aborted": 0.0, "skipped_long": 0.0, "generated_tokens": 0.0,
                      "fallback_requests": 0.0, "user_turn_tokens": 0.0}
        self.bar: Any = None

    def params_for(self, i: int, stage: int) -> SamplingParams:
        seed = self.seed * 1_000_003 + 2 * i + stage
        p = self.prompts[i]
        if stage == 1 and p.open_turn:  # the user's turn: sampled (seeded) even in a greedy run
            return SamplingParams(temperature=free_turn.TEMPERATURE, top_p=free_turn.TOP_P, max_tokens=free_turn.MAX_TOKENS,
                                  seed=seed)
        cap = p.max_tokens if stage == 1 and p.max_tokens is not None else self.max_new_tokens
        return SamplingParams(temperature=self.temperature, max_tokens=cap, seed=None if self.temperature == 0 else seed)

    def stage_ids(self, i: int, stage: int, messages: list[Message]) -> list[int]:
        if stage == 1 and self.prompts[i].open_turn:
            return self.engine.tokenizer.encode_open_user_turn(self.prompts[i].text)
        return conversation_ids(self.engine, messages)

    def top_up(self) -> None:
        """Once a quarter of the slots are free, fill them all (one shared prefill step)."""
        add = self.slots - len(self.inflight) if len(self.inflight) <= self.slots - self.refill else 0
        while add > 0 and (self.follow or self.todo):
            i, stage, messages = self.follow.popleft() if self.follow else self.todo.popleft()
            ids = self.stage_ids(i, stage, messages)
            if len(ids) >= self.limit:
                self.stats["skipped_long"] += 1
                continue
            req = self.engine.add_request(ids, self.params_for(i, stage), detokenize=False)
            self.inflight[req.request_id] = (i, stage, ids)
            self.stats["requests"] += 1
            add -= 1

    def finish(self, rid: str) -> None:
        i, stage, ids = self.inflight.pop(rid)
        req = self.engine.release_finished(rid)
        assert req is not None
        resp = list(req.output_ids)
        p = self.prompts[i]
        trains = stage == 2 or p.trains_stage1  # not a free turn's stage 1 (the user's side)
        if req.error is None and (len(resp) >= 2 or not trains):
            if trains:
                self.done.append((i, stage, ids, resp))
                self.stats["generated_tokens"] += len(resp)
            else:
                self.stats["user_turn_tokens"] += len(resp)
            if stage == 1 and p.two_stage and req.finish_reason != "abort":
                text = self.engine.tokenizer.decode(resp, skip_special_tokens=True)
                messages = p.stage2_messages(text, complete=req.finish_reason != "length")
                if p.fallback_request is not None and messages[-1]["content"] == p.fallback_request:
                    self.stats["fallback_requests"] += 1
                self.follow.append((i, 2, messages))
                if self.bar is not None:
                    self.bar.total += 1
        if self.bar is not None:
            self.bar.update(1)

    def abort_all(self) -> None:
        """Past the deadline: abort what is in flight, keeping the partial responses."""
        for rid in list(self.inflight):
            self.engine.abort(rid)
        while self.engine.has_unfinished():
            for out in self.engine.step():
                if out.finished and out.request_id in self.inflight:
                    self.stats["aborted"] += 1
                    self.finish(out.request_id)


# ---- teacher forcing ------------------------------------------------------------------------
@torch.no_grad()
def teacher_force(
    engine: Engine, seqs: list[list[int]], prompt_lens: list[int], aux_layers: tuple[int, ...] = (),
    max_batch_tokens: int = 16384, progress: bool = True, store: torch.device | str | None = None,
) -> DistillData:
    """One target forward per chunk of whole sequences (EXTEND mode, every row's hidden state
    captured) through the engine's runner, KV pool and attention backend. ``aux_layers``: also
    capture those layers' outputs (EAGLE-3). Results are kept on ``store`` (default: the
    engine's device)."""
    model, runner = engine.model, engine.runner
    store = torch.device(store) if store is not None else engine.device
    old_aux = model.aux_layers
    model.aux_layers = tuple(aux_layers)
    lens = [len(s) for s in seqs]
    budget = max(max_batch_tokens, max(lens, default=1))
    chunks: list[list[int]] = [[]]
    used = 0
    for i, n in enumerate(lens):
        if chunks[-1] and (used + n > budget or len(chunks[-1]) >= engine.req_pool.max_reqs):
            chunks.append([])
            used = 0
        chunks[-1].append(i)
        used += n
    # Outputs written in place, chunk by chunk: concatenating per-chunk parts at the end needs
    # twice the memory (it ran out of memory on an 80 GB H100 at 10M tokens of EAGLE-3 features).
    total = sum(lens)
    cfg = model.config
    hidden = torch.empty(total, cfg.hidden_size, dtype=engine.dtype, device=store)
    aux = torch.empty(total, cfg.hidden_size * len(aux_layers), dtype=engine.dtype, device=store) if aux_layers else None
    argmax = torch.empty(total, dtype=torch.long, device=store)
    row0 = 0
    bar = progress_bar(len(seqs), "Teacher forcing", enabled=progress, unit="seq")
    try:
        for chunk in chunks:
            if not chunk:
                continue
            rows = [engine.req_pool.alloc() for _ in chunk]
            assert all(r is not None for r in rows), "request rows are busy: is the engine idle?"
            try:
                if not engine.allocator.ensure_batch(rows, [lens[i] for i in chunk]):  # type: ignore[arg-type]
                    raise RuntimeError(f"KV pool too small for {sum(lens[i] for i in chunk)} tokens; raise max_total_tokens")
                ids = [t for i in chunk for t in seqs[i]]
                batch = runner.make_batch(
                    ForwardMode.EXTEND, ids, rows, [lens[i] for i in chunk], [lens[i] for i in chunk],  # type: ignore[arg-type]
                    logits="none", capture_hidden=CaptureHidden.FULL,
                )
                out = runner.forward(batch)
                n = len(ids)
                assert out.hidden is not None and out.hidden.shape[0] == n
                hidden[row0 : row0 + n].copy_(out.hidden)
                if aux is not None:
                    assert out.aux_hidden is not None
                    aux[row0 : row0 + n].copy_(out.aux_hidden)
                for k, h in enumerate(out.hidden.split(4096)):  # the argmax in slices: [rows, vocab] logits are big
                    argmax[row0 + 4096 * k : row0 + 4096 * k + h.shape[0]].copy_(model.compute_logits(h).argmax(-1))
                row0 += n
            finally:
                for r in rows:
                    engine.allocator.free(r)  # type: ignore[arg-type]
                    engine.req_pool.free(r)  # type: ignore[arg-type]
            if bar is not None:
                bar.update(len(chunk))
    finally:
        model.aux_layers = old_aux
        if bar is not None:
            bar.close()
    offsets = torch.zeros(len(seqs) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.long), 0)
    return DistillData(
        tokens=torch.tensor([t for s in seqs for t in s], dtype=torch.long).to(store),
        offsets=offsets,
        prompt_lens=torch.tensor(prompt_lens, dtype=torch.long),
        hidden=hidden,
        argmax=argmax,
        aux=aux,
        aux_layers=tuple(aux_layers),
    )
