"""``updraft train-draft``: self-distil an EAGLE / EAGLE-3 draft head for a target model.

1. Data: the target answers our own generated prompt set (``updraft.data.prompts``; the EAGLE
   evaluation sets are never read) through the updraft engine -- continuous batching, CUDA
   graphs on GPU -- and one teacher-forced forward records the hidden states the head reads
   (``updraft.train.data``). Sequences are cached in ``--data-dir`` and reused.
2. Training: AdamW, bf16 autocast on CUDA (fp32 on CPU), linear warm-up then cosine decay,
   gradient clipping; the head is unrolled over ``ttt_steps`` draft steps (training-time test)
   with the published losses (``updraft.train.losses``).
3. Monitoring: a per-step accuracy estimate on held-out prompts (-> expected accept length of
   a chain of ``spec_steps`` drafts) every ``eval_every`` steps, a JSON log, resumable
   checkpoints (head, optimizer, schedule, position in the data, RNG); at the end the head is
   saved in the published HF layout (split into files of at most ``max_file_mb``, with
   ``train_state.json``: what ``--resume-from`` continues on another machine, see
   ``updraft.train.checkpoint``) and served by the engine on held-out prompts to measure the
   real acceptance.

``time_budget`` bounds the whole command: generation stops at ``gen_fraction`` of it
(unfinished responses are kept as they are), training stops ``reserve_fraction`` before the
end, and the number of optimizer steps (hence the LR schedule) is fixed after a few timed steps.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from updraft.config import EngineConfig, SpeculativeConfig
from updraft.data.prompts import TrainPrompt, build_prompts, prompts_version, split_prompts
from updraft.engine.engine import Engine
from updraft.models.eagle import Eagle3Head
from updraft.models.loader import LoadedModel, load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.progress import bar as progress_bar
from updraft.provenance import git_commit
from updraft.sampling_params import SamplingParams
from updraft.train.checkpoint import (
    CarriedState,
    TrainState,
    carried_state,
    checkpoint_draft_ids,
    data_fingerprint,
    load_checkpoint_state,
    read_checkpoint,
    run_aux_layers,
    save_checkpoint,
    warm_start,
)
from updraft.train.config import TrainConfig
from updraft.train.data import (
    DistillData,
    GenerationResult,
    Prefetcher,
    collect_sequences,
    epoch_batches,
    pick_data_device,
    teacher_force,
)
from updraft.train.heads import Head, new_head, save_head, select_draft_vocab
from updraft.train.losses import (
    HostMetrics,
    LossConfig,
    TargetHead,
    chain_acceptance,
    compute_loss,
    expected_accept_length,
)
from updraft.train.report import engine_check_text, write_json, write_model_card
from updraft.train.schedule import StepPlanner, lr_at, plan_schedule, rewarm_factor
from updraft.train.stepper import Stepper

CHECKPOINT = "checkpoint/state.pt"
LOG_NAME = "train_log.json"
#: Config fields that decide which sequences get generated (the data cache is reused if equal);
#: the prompt set enters as its version (``prompts_version``), so v3 caches written before
#: there was a choice of sets still match.
DATA_KEYS = ("num_prompts", "held_out", "seed", "max_new_tokens", "temperature")
RESERVE_FRACTION = 0.1  # share of the time budget kept for saving and the final check
Scope = Callable[[], AbstractContextManager[Any]]  # Stepper.scope: what the head's forwards run under


def _say(msg: str) -> None:
    print(f"[train-draft] {msg}", file=sys.stderr, flush=True)


@dataclass
class Prepared:
    loaded: LoadedModel
    train: DistillData
    held: DistillData
    held_prompts: list[TrainPrompt]
    data_info: dict[str, Any]
    aux_layers: tuple[int, ...]  # the target layers the EAGLE-3 head reads (() for EAGLE-1)


# ---- data -----------------------------------------------------------------------------------
def _target_identity(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"target_name": path.name, "target_size": st.st_size if path.is_file() else None}


def prepare(cfg: TrainConfig, device: torch.device, dtype: torch.dtype, t0: float, loaded: LoadedModel | None = None,
            blob: dict[str, Any] | None = None) -> Prepared:
    """Load the target, generate (or reuse) the sequences, teacher-force them (at the target layers
    ``run_aux_layers`` picks; ``blob``: the checkpoint a ``--resume`` continues)."""
    path = resolve_model(cfg.target)
    if loaded is None:
        loaded = load_checkpoint(path, dtype=dtype, device=device, progress=cfg.progress)
    aux = run_aux_layers(cfg, loaded.config.num_layers, blob)
    prompts = build_prompts(cfg.num_prompts, cfg.seed, cfg.prompt_set)
    train_p, held_p = split_prompts(prompts, cfg.held_out, cfg.seed)
    ordered = held_p + train_p  # held-out first: always generated in full, before any deadline
    data_dir = Path(cfg.data_dir or Path(cfg.out) / "data")
    meta = {k: getattr(cfg, k) for k in DATA_KEYS} | _target_identity(path) | {"prompts_version": prompts_version(cfg.prompt_set)}
    cached = GenerationResult.load(data_dir)
    if cached is not None and cached[1] == json.loads(json.dumps(meta)):
        gen = cached[0]
        _say(f"reusing {len(gen.seqs)} cached sequences from {data_dir}")
        reused = True
    else:
        if cfg.resume:
            raise ValueError(f"resume needs the data the run trained on: no matching sequences in {data_dir}")
        if cached is not None:
            _say(f"{data_dir} holds sequences of other settings: generating anew")
        deadline = t0 + cfg.time_budget * cfg.gen_fraction if cfg.time_budget else None
        gen = _generate(cfg, loaded, ordered, deadline)
        gen.save(data_dir, meta)
        reused = False
    held_ids = set(range(len(held_p)))
    held_seqs, held_plens = gen.select(held_ids)
    train_seqs, train_plens = gen.select(set(range(len(held_p), len(ordered))))
    if not train_seqs or not held_seqs:
        raise ValueError(
            f"generation produced {len(train_seqs)} training and {len(held_seqs)} held-out sequences: "
            "raise time_budget / gen_fraction or lower held_out"
        )
    longest = max(len(s) for s in train_seqs + held_seqs)
    tf_tokens = max(16384 if device.type == "cuda" else 4096, longest)
    t = time.perf_counter()
    engine = Engine(
        EngineConfig(model=str(path), device=device.type, dtype=_dtype_name(dtype), max_total_tokens=tf_tokens + 64,
                     max_running_requests=64, disable_cuda_graph=True, progress=False),
        loaded=loaded,
    )
    build_s = time.perf_counter() - t
    store = pick_data_device(cfg.data_device, sum(len(x) for x in train_seqs), loaded.config.hidden_size, bool(aux), device)
    t = time.perf_counter()
    train = teacher_force(engine, train_seqs, train_plens, aux, tf_tokens, cfg.progress, store=store)
    held = teacher_force(engine, held_seqs, held_plens, aux, tf_tokens, False)
    tf_s = time.perf_counter() - t
    del engine
    _free()
    info = {"reused_cache": reused, "data_dir": str(data_dir), "generation": gen.stats, "teacher_forcing_s": tf_s,
            "engine_build_s": build_s, "aux_layers": list(aux),
            "train": train.stats(), "held_out": held.stats(), "data_device": str(store)}
    _say(
        f"data: {len(train_seqs)} training sequences ({train.num_tokens} tokens, "
        f"{int(info['train']['training_positions'])} training positions, {train.nbytes() / 2**30:.1f} GiB on {store}), "
        f"{len(held_seqs)} held out"
    )
    return Prepared(loaded, train, held, held_p, info, aux)


def _generate(cfg: TrainConfig, loaded: LoadedModel, prompts: list[TrainPrompt], deadline: float | None) -> GenerationResult:
    device = next(loaded.model.parameters()).device
    kv = cfg.gen_max_total_tokens or cfg.gen_batch * (cfg.max_new_tokens + 512)
    engine = Engine(
        EngineConfig(
            model=str(loaded.source), device=device.type, dtype=_dtype_name(next(loaded.model.parameters()).dtype),
            max_total_tokens=kv, max_running_requests=cfg.gen_batch, cuda_graph_max_bs=cfg.gen_batch,
            chunked_prefill_size=8192,  # a wave of new requests (see collect_sequences) in one prefill step
            seed=cfg.seed, progress=cfg.progress,
        ),
        loaded=loaded,
    )
    gen = collect_sequences(engine, prompts, cfg.max_new_tokens, cfg.temperature, cfg.seed, deadline, cfg.progress)
    s = gen.stats
    _say(
        f"generated {int(s['generated_tokens'])} tokens in {s['wall_s']:.1f}s ({s['tokens_per_s']:.0f} tok/s, "
        f"{int(s['finished'])} finished, {int(s['aborted'])} cut at the deadline"
        + (f", {int(s['fallback_requests'])} self-written requests unusable: fallback" if s.get("fallback_requests") else "")
        + (f", {int(s['user_turn_tokens'])} tokens of user turns, not trained on)" if s.get("user_turn_tokens") else ")")
    )
    del engine
    _free()
    return gen


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _start_state(cfg: TrainConfig, blob: dict[str, Any] | None, head: Head, opt: torch.optim.Optimizer,
                 fp: list[int]) -> TrainState:
    """The schedule this run starts from: this machine's checkpoint ``blob`` (``--resume``), the
    state a head folder carries (``--resume-from``), or a new one."""
    if blob is not None:
        state = load_checkpoint_state(blob, head, opt, cfg, fp)
    elif cfg.resume_from:
        state = carried_state(cfg, fp, prompts_version(cfg.prompt_set))
    else:
        return TrainState()
    _say(f"resumed at step {state.step} of {state.total_steps} (epoch {state.epoch}, batch {state.batch_index})")
    return state


# ---- evaluation -----------------------------------------------------------------------------
@torch.no_grad()
def held_out_estimate(head: Head, data: DistillData, cfg: TrainConfig, labels: TargetHead, device: torch.device, scope: Scope) -> dict[str, Any]:
    """Per-step top-1 accuracy of a chain of ``spec_steps`` drafts on the held-out sequences
    (teacher-forced along the target's tokens) and the accept length it implies."""
    loss_cfg = LossConfig(steps=cfg.spec_steps, feature_weight=cfg.feature_weight, token_weight=cfg.token_weight, step_decay=cfg.step_decay)
    lengths = data.lengths.tolist()
    order = sorted(range(data.num_seqs), key=lambda s: lengths[s])
    hits = [0.0] * cfg.spec_steps
    rows = [0.0] * cfg.spec_steps
    verify, accepted = 0, [0] * cfg.spec_steps
    loss_sum, n_batches = 0.0, 0
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and (j - i + 1) * lengths[order[j]] <= cfg.batch_tokens:
            j += 1
        batch = data.batch(order[i:j], device, cfg.method == "eagle3")
        with scope():
            _, m = compute_loss(head, batch, loss_cfg, labels)
            v, a = chain_acceptance(head, batch, cfg.spec_steps, labels)
        verify += v
        accepted = [x + y for x, y in zip(accepted, a)]
        for k in range(cfg.spec_steps):
            r = m.get(f"rows{k}", 0.0)
            rows[k] += r
            hits[k] += m.get(f"acc{k}", 0.0) * r
        loss_sum += m["loss"]
        n_batches += 1
        i = j
    acc = [h / r if r else 0.0 for h, r in zip(hits, rows)]
    est = expected_accept_length({f"acc{k}": a for k, a in enumerate(acc)}, cfg.spec_steps)
    # What the engine would measure on these sequences (greedy chains, S pinned): the verify
    # steps start after rejections, where the per-position accuracies above run lower.
    chain = 1 + sum(accepted) / max(1, verify)
    return {"acc": acc, "expected_accept_length": est, "chain_accept_length": chain,
            "chain_per_position": [x / max(1, verify) for x in accepted], "loss": loss_sum / max(1, n_batches)}


def engine_acceptance(
    cfg: TrainConfig, loaded: LoadedModel, head_dir: Path, prompts: list[TrainPrompt], deadline: float | None
) -> dict[str, Any]:
    """Serve the saved head in the engine (greedy, chain of ``spec_steps``) on held-out prompts:
    mean accept length (counting the bonus token) and per-position acceptance."""
    from updraft.train.data import chat_ids

    device = next(loaded.model.parameters()).device
    n = len(prompts)
    # S pinned: the head's acceptance along a chain of spec_steps, not what adaptive S would run.
    spec = SpeculativeConfig(method=cfg.method, draft_model=str(head_dir), num_steps=cfg.spec_steps, adaptive=False)
    engine = Engine(
        EngineConfig(
            model=str(loaded.source), device=device.type, dtype=_dtype_name(next(loaded.model.parameters()).dtype),
            max_total_tokens=n * (cfg.final_eval_tokens + 1024) + 64, max_running_requests=n, cuda_graph_max_bs=n,
            speculative=spec, progress=False,
        ),
        loaded=loaded,
    )
    t = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=cfg.final_eval_tokens)
    encoded = [chat_ids(engine, p.eval_request) for p in prompts]
    # A prompt that leaves no room to generate is left out (tiny test targets have short contexts).
    reqs = [engine.add_request(ids, params, detokenize=False) for ids in encoded if len(ids) < engine.max_model_len - 1]
    cut = False
    while engine.has_unfinished():
        engine.step()
        if deadline is not None and time.time() > deadline and not cut:
            cut = True
            for r in reqs:
                engine.abort(r.request_id)
    stats = engine.spec_stats
    out = {
        "prompts": len(reqs),
        "max_tokens": cfg.final_eval_tokens,
        "mean_accept_length": stats.mean_accept_length,
        "acceptance_rate": stats.acceptance_rate,
        "per_position": stats.per_position_rate(),
        "verify_steps": stats.num_drafts,
        "tokens": sum(len(r.output_ids) for r in reqs),
        "wall_s": time.perf_counter() - t,
        "cut_at_deadline": cut,
    }
    del engine, reqs
    loaded.model.aux_layers = ()  # set by the EAGLE-3 engine; the target is shared
    _free()
    return out


# ---- the run ----------------------------------------------------------------------------------
def _build_head(cfg: TrainConfig, prep: Prepared, target: torch.nn.Module, device: torch.device,
                blob: dict[str, Any] | None) -> tuple[Head, Any]:
    """The head to train: warm-started (--init-from / --resume-from) or new (EAGLE-3: its draft
    vocabulary picked from the training targets, or under --resume the one of the checkpoint
    ``blob``, whose weights ``_start_state`` loads next), and its vocabulary coverage logged."""
    # EAGLE-3 only: the draft vocabulary is chosen (or re-chosen) from them and its coverage logged
    counts = prep.train.token_counts(prep.loaded.config.vocab_size) if cfg.method == "eagle3" else None
    started = warm_start(cfg, target, device, counts)
    if started is not None:
        _say(f"initialised from {cfg.init_from or cfg.resume_from}")
    else:
        draft_ids = None
        if counts is not None:
            draft_ids = checkpoint_draft_ids(blob) if blob is not None else None
            if draft_ids is None:
                draft_ids = select_draft_vocab(counts, cfg.draft_vocab_size)
        started = new_head(cfg.method, target, draft_ids=draft_ids, aux_layers=prep.aux_layers or None, seed=cfg.seed,
                           device=device, intermediate_size=cfg.head_intermediate_size, num_layers=cfg.head_layers or 1)
    head, hf_cfg = started
    if isinstance(head, Eagle3Head) and counts is not None:
        in_vocab = head.vocab_ids().cpu()
        prep.data_info["draft_vocab_coverage"] = float(counts[in_vocab].sum() / counts.sum().clamp(min=1))
        _say(f"draft vocabulary of {in_vocab.numel()} tokens covers {prep.data_info['draft_vocab_coverage']:.4f} of the training targets")
    return head, hf_cfg


@dataclass
class _LogWindow:
    """Step metrics averaged over ``log_every`` steps into ``state.log`` (and stderr without a bar)."""

    sums: dict[str, float] = field(default_factory=dict)
    n: int = 0
    since: float = field(default_factory=time.time)

    def add(self, m: dict[str, float]) -> None:
        for k, v in m.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.n += 1

    def flush(self, cfg: TrainConfig, state: TrainState, lr: float, t0: float, quiet: bool) -> None:
        now = time.time()
        entry = {k: v / self.n for k, v in self.sums.items()} | {
            "step": state.step, "epoch": state.epoch, "lr": lr, "elapsed_s": now - t0, "tokens_seen": state.tokens_seen,
            "train_tokens_per_s": self.sums.get("tokens", 0.0) / max(now - self.since, 1e-9),
        }
        state.log.append(entry)
        self.sums, self.n, self.since = {}, 0, now
        if not quiet:
            accs = " ".join(f"{entry.get(f'acc{k}', 0):.2f}" for k in range(cfg.ttt_steps))
            _say(f"step {state.step}/{state.total_steps or '?'} loss {entry['loss']:.4f} acc [{accs}] lr {lr:.2e}")


def _device(cfg: TrainConfig) -> torch.device:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is available: use --device cpu or auto")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _show(bar: Any, state: TrainState, m: dict[str, float], lr: float) -> None:
    """The progress bar after a step (its total follows the planner's)."""
    if bar is None:
        return
    if bar.total != state.total_steps:
        bar.total = state.total_steps
        bar.refresh()
    bar.update(1)
    bar.set_postfix(loss=f"{m['loss']:.3f}", acc0=f"{m.get('acc0', 0):.2f}", lr=f"{lr:.1e}", refresh=False)


@dataclass
class _Where:
    """Where a run checkpoints and the clock it keeps."""

    ckpt: Path
    fingerprint: Any
    t0: float
    train_start: float
    deadline: float | None


def _steps(cfg: TrainConfig, prep: Prepared, run: Stepper, state: TrainState, at: _Where, loader: Prefetcher, bar: Any,
           rewarm_from: int | None, stop_after: int | None) -> str | None:
    """Train until the schedule, the time budget or Ctrl-C ends it; what stopped it (None:
    ``stop_after`` steps were done and checkpointed, the head is not to be saved)."""
    window = _LogWindow()
    planner = StepPlanner()
    lengths = prep.train.lengths.tolist()
    batches = epoch_batches(lengths, cfg.batch_tokens, cfg.seed, state.epoch)
    # Step i's metrics are read once step i + 1 is queued (the host builds and queues the next step
    # while the GPU runs this one); a log line, evaluation, checkpoint or progress bar reads them at once.
    unread: HostMetrics | None = None
    try:
        while state.total_steps is None or state.step < state.total_steps:
            if at.deadline is not None and time.time() > at.deadline:
                return "time budget"
            if state.batch_index >= len(batches):
                state.epoch += 1
                state.batch_index = 0
                batches = epoch_batches(lengths, cfg.batch_tokens, cfg.seed, state.epoch)
            upcoming = batches[state.batch_index + 1] if state.batch_index + 1 < len(batches) else None
            lr = lr_at(cfg, state.step, state.total_steps, state.warmup) * rewarm_factor(cfg, state.step, rewarm_from)
            launched = run.launch(loader.get(batches[state.batch_index], upcoming), lr, state.step)
            if unread is not None:
                window.add(unread.metrics())
            unread = launched
            state.step += 1
            state.batch_index += 1
            state.tokens_seen += launched.positions
            if planner.due(state):
                per_step = planner.plan(cfg, state, at.train_start, at.deadline)
                _say(f"{per_step * 1000:.0f} ms/step: training for {state.total_steps} steps")
            stop = stop_after is not None and state.step >= stop_after
            log = state.step % cfg.log_every == 0
            evaluate = bool(cfg.eval_every) and state.step % cfg.eval_every == 0
            checkpoint = bool(cfg.checkpoint_every) and state.step % cfg.checkpoint_every == 0 or stop
            if bar is not None or log or evaluate or checkpoint:
                m = unread.metrics()
                window.add(m)
                unread = None
                _show(bar, state, m, lr)
            if log:
                window.flush(cfg, state, lr, at.t0, quiet=bar is not None)
            if evaluate:
                _eval(run.head, prep, cfg, run.labels, run.device, run.scope, state, at.t0, bar)
            if checkpoint:
                save_checkpoint(at.ckpt, run.head, run.opt, state, cfg, at.fingerprint, prep.aux_layers)
            if stop:
                return None
    except KeyboardInterrupt:  # Ctrl-C (or a timeout's SIGINT): keep what was trained
        _say(f"interrupted at step {state.step}: saving the head as it is")
        return "interrupted"
    return "steps"


def train(
    cfg: TrainConfig, *, start_time: float | None = None, stop_after: int | None = None, loaded: LoadedModel | None = None,
) -> dict[str, Any]:
    """Run ``updraft train-draft``; returns the training log (also written to OUT/train_log.json).
    ``stop_after``: stop (after checkpointing) once this many steps are done, without saving the
    head -- an interrupted run, for tests of ``resume``. ``loaded``: reuse a loaded target."""
    cfg = cfg.validate()
    t0 = start_time if start_time is not None else time.time()
    device = _device(cfg)
    precision = cfg.resolved_precision(device.type)
    # bf16: the target runs in bf16 (as it serves on GPU) and the head trains under bf16 autocast
    # with fp32 weights; fp32: nothing is mixed.
    target_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    budget_end = t0 + cfg.time_budget if cfg.time_budget else None
    train_deadline = t0 + cfg.time_budget * (1 - RESERVE_FRACTION) if cfg.time_budget else None

    ckpt = out / CHECKPOINT
    blob = read_checkpoint(ckpt) if cfg.resume else None
    prep = prepare(cfg, device, target_dtype, t0, loaded, blob)
    prep.loaded.model.requires_grad_(False)
    head, hf_cfg = _build_head(cfg, prep, prep.loaded.model, device, blob)
    run = Stepper.for_head(cfg, head, device, precision)
    opt = run.opt
    fp = data_fingerprint(prep.train)
    state = _start_state(cfg, blob, head, opt, fp)
    del blob  # the optimizer moments and weights are copied out: free the checkpoint's tensors
    rewarm_from = state.step if cfg.resume_from else None
    lengths = prep.train.lengths.tolist()
    batches = epoch_batches(lengths, cfg.batch_tokens, cfg.seed, state.epoch)
    if not (cfg.resume or cfg.resume_from is not None):
        plan_schedule(cfg, state, len(batches))
    bar = progress_bar(state.total_steps, "Training", enabled=cfg.progress, initial=state.step, unit="step")
    loader = Prefetcher(prep.train, device, cfg.method == "eagle3", cfg.batch_pad)
    train_start = time.time()
    tokens_at_start = state.tokens_seen
    try:
        stopped = _steps(cfg, prep, run, state, _Where(ckpt, fp, t0, train_start, train_deadline), loader, bar, rewarm_from, stop_after)
    finally:
        loader.close()
        if bar is not None:
            bar.close()
    if stopped is None:
        return {"stopped_after": state.step}
    batches = epoch_batches(lengths, cfg.batch_tokens, cfg.seed, state.epoch)  # the last epoch's (its length)
    train_s = time.time() - train_start
    done = state.evals and state.evals[-1]["step"] == state.step
    final = state.evals[-1] if done else _eval(head, prep, cfg, run.labels, device, run.scope, state, t0, None)
    save_checkpoint(ckpt, head, opt, state, cfg, fp, prep.aux_layers)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[cfg.save_dtype]
    save_head(head, hf_cfg, out, dtype=dtype, include_embedding=cfg.save_embedding,
              max_file_bytes=int(cfg.max_file_mb * 2**20) or None)
    CarriedState.of(state, cfg, fp, prompts_version(cfg.prompt_set)).write(out)
    del opt, run, head
    _free()
    result: dict[str, Any] = {
        "config": cfg.as_dict(), "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "commit": git_commit(), "precision": precision, "data": prep.data_info,
        "steps": state.step, "total_steps": state.total_steps,
        "epochs_seen": state.epoch + state.batch_index / max(1, len(batches)), "stopped_by": stopped,
        "train_s": train_s, "tokens_seen": state.tokens_seen,
        "train_tokens_per_s": (state.tokens_seen - tokens_at_start) / max(train_s, 1e-9),
        "log": state.log, "held_out_evals": state.evals, "held_out_final": final,
    }
    return _finish(cfg, prep, out, result, t0, budget_end)


def _finish(cfg: TrainConfig, prep: Prepared, out: Path, result: dict[str, Any], t0: float, budget_end: float | None) -> dict[str, Any]:
    """The engine's acceptance on held-out prompts (the head is saved already: a failure here
    must not lose the run), then the log and the model card."""
    # The check starts only with time left to build its engine (as long as the teacher-forcing
    # engine took: seconds on a loaded CPU); the budget is kept, not overrun by the check.
    left = budget_end - time.time() if budget_end is not None else float("inf")
    build_s = float(prep.data_info.get("engine_build_s", 0.0))
    if cfg.final_eval_prompts and left < build_s:
        result["engine_acceptance_error"] = (f"skipped: {max(left, 0.0):.1f} s of the time budget left, "
                                             f"under the {build_s:.1f} s an engine took to build")
        _say(f"final engine check {result['engine_acceptance_error']}")
    elif cfg.final_eval_prompts:
        # The log now, and again with the engine's figures: a run killed during the check keeps it.
        write_json(out / LOG_NAME, result | {"total_s": time.time() - t0})
        _free()
        try:
            e = engine_acceptance(cfg, prep.loaded, out, prep.held_prompts[: cfg.final_eval_prompts], budget_end)
            result["engine_acceptance"] = e
            _say(f"engine on {e['prompts']} held-out prompts (S={cfg.spec_steps}): {engine_check_text(e)}")
        except Exception as exc:  # noqa: BLE001
            result["engine_acceptance_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            _say(f"final engine check failed: {result['engine_acceptance_error']}")
    result["total_s"] = time.time() - t0
    write_json(out / LOG_NAME, result)
    write_model_card(out, result)
    _say(f"head written to {out} in {result['total_s']:.0f}s")
    return result


def _eval(head: Head, prep: Prepared, cfg: TrainConfig, labels: TargetHead, device: torch.device, scope: Scope,
          state: TrainState, t0: float, bar: Any) -> dict[str, Any]:
    t = time.time()
    r = held_out_estimate(head, prep.held, cfg, labels, device, scope)
    r |= {"step": state.step, "tokens_seen": state.tokens_seen, "eval_s": time.time() - t, "elapsed_s": time.time() - t0}
    state.evals.append(r)
    msg = (f"step {state.step}: held-out acc {[round(a, 3) for a in r['acc']]} -> expected accept length "
           f"{r['expected_accept_length']:.2f}, greedy chains {r['chain_accept_length']:.2f} (S={cfg.spec_steps})")
    if bar is not None:
        bar.write(f"[train-draft] {msg}", file=sys.stderr)
    else:
        _say(msg)
    return r
