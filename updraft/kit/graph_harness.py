"""Graph runner modes of the attention kit: an attention-only probe captured by the production
graph runner (``PhaseGraphRunner``), a case replayed through it, compared with the eager path and
the float64 reference.

Two runner modes share the set-up:

* ``graph`` (``run_graph``): capture, then replay. A real CUDA graph on ``cuda``; on ``cpu`` the
  emulator, which also refuses a replay whose frozen host values or buffer identities changed.
* ``graph-metadata`` (``run_graph_metadata``): the capture-time metadata of the captured batch,
  the production replay fill, the backend's replay-init, then ``backend.forward`` EAGERLY over the
  static buffers (no graph). It separates metadata bugs from graph bugs (a frozen host scalar is
  invisible to it: see failure class 6 in ../shared/design/spec-decoding.md).

DRAFT_EXTEND_V2 is captured as production captures it: logits at one selected row per request
(``i * ndt + accept_i - 1``, accept lengths varying per request: the only place a V2 batch
carries them) and every row's output as the captured hidden states, which are what is checked.
A backend that lays the V2 rows out from those accept lengths at replay, while capture used the
uniform stride, reads other requests' rows (failure class 1).

Pad styles: ``fill`` pads the replay like production (seq_lens = fill value, row 0, scratch
slot); ``real`` fills the captured batch with extra small real requests, whose rows are checked
too. Capture batch sizes are ``mult`` times the case's batch.

Hazards made visible on purpose:

* Before the replay fill, every static input buffer is POISONED with valid-looking stale values
  (real slots, real table rows, long lengths), as a previous, larger replay would leave them: a
  fill that forgets to clear a padded column writes or reads real KV (failure class 10).
* The whole KV pool is compared with the expected pool after the replay: only the real rows'
  ``out_cache_loc`` may change, besides the scratch slot 0.
* After the replay-init the captured metadata is checked for invariants (lengths and positions
  >= 0, start offsets from 0 and non-decreasing, slots inside the pool, table rows inside the
  table, gathers inside the token rows).
* ``graph`` also checks the capture itself: seeded lengths (class 8), finite capture outputs on
  the emulator, and that the runner refuses a wider or a larger batch (classes 9 and 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from updraft.attention import backend_class
from updraft.attention.base import AttentionBackend
from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch, ForwardMode
from updraft.kit.cases import TOLERANCE, AttnCase
from updraft.kit.harness import (
    DTYPE,
    CaseSetup,
    build_case,
    make_batch,
    reference_output,
    relative_error,
)
from updraft.models.llama import ModelOutput
from updraft.runtime.graphs.device_graph import new_pool
from updraft.runtime.graphs.phase_graph import BatchShape, PhaseGraphRunner, PhaseSpec
from updraft.runtime.phase_inputs import PhaseInputs

PAD_STYLES = ("fill", "real")
CAPTURE_MULTS = (1, 2, 4)


class AttentionProbe(nn.Module):
    """A "model" that is one attention call over q|k|v packed in ``batch.feature`` (FeatureKind.PROBE).
    With a shared latent cache (MLA) the rows are q|k only and v is k's first ``dv`` columns."""

    def __init__(self, hq: int, hkv: int, d: int, dtype: torch.dtype, device: torch.device | str, *,
                 dv: int | None = None, shared_kv: bool = False) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.dv, self.shared_kv = dv or d, shared_kv
        self.anchor = nn.Parameter(torch.zeros(1, dtype=dtype, device=device), requires_grad=False)

    @property
    def width(self) -> int:
        """Feature columns per token row."""
        return (self.hq + self.hkv) * self.d + (0 if self.shared_kv else self.hkv * self.dv)

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[T, width] -> q [T, hq, d], k [T, hkv, d], v [T, hkv, dv] (strided views, like a model's)."""
        t = qkv.shape[0]
        if self.shared_kv:
            q, k = qkv.split([self.hq * self.d, self.hkv * self.d], dim=-1)
            k = k.reshape(t, self.hkv, self.d)
            return q.reshape(t, self.hq, self.d), k, k[..., : self.dv]
        q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.dv], dim=-1)
        return q.reshape(t, self.hq, self.d), k.reshape(t, self.hkv, self.d), v.reshape(t, self.hkv, self.dv)

    @staticmethod
    def pack(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shared_kv: bool) -> torch.Tensor:
        """``split``'s inverse."""
        t = q.shape[0]
        parts = [q.reshape(t, -1), k.reshape(t, -1)] + ([] if shared_kv else [v.reshape(t, -1)])
        return torch.cat(parts, dim=-1)

    def forward(self, batch: ForwardBatch) -> ModelOutput:
        q, k, v = self.split(batch.feature)
        assert batch.attn_backend is not None
        out = batch.attn_backend.forward(q, k, v, 0, batch).reshape(q.shape[0], -1)
        hidden = out if batch.capture_hidden == CaptureHidden.FULL else None  # every row (V2: the checked output)
        return ModelOutput(logits=out[batch.logits_indices], hidden=hidden)


@dataclass
class GraphResult:
    case: AttnCase
    pad: str
    mult: int
    rel_err_ref: float  # replay vs float64 reference (real rows)
    max_diff_eager: float  # replay vs eager (real rows), relative to the reference's scale
    invariant_error: str
    tol: float
    kv_error: str = ""  # KV pool slots changed that the replay must not touch (or not written)
    runner_mode: str = "graph"

    @property
    def ok(self) -> bool:
        return (
            not self.invariant_error
            and not self.kv_error
            and self.rel_err_ref <= self.tol
            and self.max_diff_eager <= self.tol
        )

    def describe(self) -> str:
        extra = " ".join(e for e in (self.invariant_error, self.kv_error) if e)
        return (
            f"{self.case.name} pad={self.pad} x{self.mult}: ref_err={self.rel_err_ref:.2e} "
            f"eager_diff={self.max_diff_eager:.2e} {extra}"
        ).rstrip()


def check_invariants(md: object, num_slots: int, table_rows: int, num_tokens: int) -> str:
    """'' if the metadata is sane, else the first violation. Field names carry the meaning."""
    if not dataclasses.is_dataclass(md):
        return ""
    for f in dataclasses.fields(md):
        t = getattr(md, f.name)
        if not isinstance(t, torch.Tensor) or t.dtype == torch.bool or t.is_floating_point() or t.numel() == 0:
            continue
        name = f.name
        if ("len" in name or "pos" in name) and bool((t < 0).any()):
            return f"{name} has negative entries {t.flatten()[:16].tolist()}"
        if ("start" in name or "indptr" in name) and t.dim() == 1:
            if int(t[0]) != 0 or bool((t[1:] < t[:-1]).any()):
                return f"{name} must start at 0 and never decrease: {t.tolist()}"
        if ("slot" in name or name.endswith("loc")) and (bool((t < 0).any()) or bool((t >= num_slots).any())):
            return f"{name} has slots outside [0, {num_slots})"
        if "req_pool" in name and (bool((t < 0).any()) or bool((t >= table_rows).any())):
            return f"{name} has rows outside [0, {table_rows})"
        if name in ("q_gather",) and bool((t >= num_tokens).any()):
            return f"{name} points past the {num_tokens} token rows"
    return ""


#: Static inputs that change from replay to replay in every graph runner. The fixed-layout
#: fields (extend lengths, start offsets, logits rows) are refilled by ``PhaseGraphRunner`` too,
#: but the draft chain keeps its capture-time values (constants by construction there).
PER_REPLAY_FIELDS = ("input_ids", "positions", "token_rows", "out_cache_loc", "req_pool_indices", "seq_lens", "feature")
LAYOUT_FIELDS = ("extend_seq_lens", "extend_start_loc", "logits_indices")


def poison_static_inputs(
    st: PhaseInputs,
    num_slots: int,
    table_rows: int,
    table_width: int,
    seed: int = 0,
    fields: tuple[str, ...] = PER_REPLAY_FIELDS + LAYOUT_FIELDS,
    vocab: int = 1000,
    max_row: int | None = None,
) -> None:
    """Fill static input buffers with valid-looking stale values (what an earlier, bigger replay
    leaves behind): the replay fill must overwrite everything a replay reads. Values stay in
    range (token ids < ``vocab``, slots and rows inside the pool and table, token rows below
    ``max_row``: pass the width of one request when smaller captured sizes share the buffers),
    so a graph replayed as-is computes garbage but never faults."""
    gen = torch.Generator().manual_seed(seed)
    dev = st.input_ids.device
    n_tok = max_row or int(st.input_ids.shape[0])
    ranges = {
        "input_ids": (0, vocab),
        "positions": (0, table_width),
        "out_cache_loc": (1, num_slots),  # real slots: a padded row left on them corrupts KV
        "req_pool_indices": (1, table_rows),
        "token_rows": (1, table_rows),
        "seq_lens": (1, table_width + 1),
        "extend_seq_lens": (1, 4),
        "extend_start_loc": (0, n_tok),
        "logits_indices": (0, n_tok),
    }
    for name in fields:
        t = getattr(st, name)
        if t is None:
            continue
        if name == "feature":
            t.copy_(torch.randn(tuple(t.shape), generator=gen).to(t) * 50)
            continue
        lo, hi = ranges[name]
        t.copy_(torch.randint(lo, max(hi, lo + 1), tuple(t.shape), generator=gen).to(device=dev, dtype=t.dtype))


def _padding_case(case: AttnCase, extra: int) -> AttnCase:
    """The case plus ``extra`` small real requests (for pad style 'real')."""
    ext = case.extend_lens[0] if case.mode.is_fixed_stride(include_v2=True) else 1
    prefix = tuple(case.prefix_lens) + tuple((3 + 2 * i) % 7 for i in range(extra))
    return dataclasses.replace(case, prefix_lens=prefix, extend_lens=tuple(case.extend_lens) + (ext,) * extra)


@dataclass
class _Rig:
    """Everything one graph-mode run needs: the (padded) case, its backend, probe and runner."""

    case: AttnCase  # as given
    setup: CaseSetup  # of the case, plus the padding requests with pad style 'real'
    backend: AttentionBackend
    probe: AttentionProbe
    runner: PhaseGraphRunner
    bs: int
    batch: ForwardBatch  # the replayed (real) batch, with its qkv spec input
    pool0: tuple[torch.Tensor, torch.Tensor]  # the KV pool before any forward
    real_rows: int  # token rows to check (the case's, or every row with pad style 'real')


def _rig(backend_name: str, case: AttnCase, mult: int, pad: str, device: str, emulate: bool) -> _Rig:
    if pad not in PAD_STYLES:
        raise ValueError(f"pad style {pad!r} not in {PAD_STYLES}")
    n = case.batch_size
    big = case if pad == "fill" else _padding_case(case, (mult - 1) * n)
    setup = build_case(big, device)
    backend = backend_class(backend_name)(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    probe = AttentionProbe(case.num_heads, case.num_kv_heads, case.head_dim, DTYPE[case.dtype], device, dv=case.dv,
                           shared_kv=case.shared_kv)
    fixed = case.mode.is_fixed_stride(include_v2=True)
    # Packed modes are captured one row wider than the case needs, as production captures the
    # v1 extend at ndt and replays accept lengths <= ndt: a replay must not need the host
    # maximum of its own lengths (failure class 6).
    width = case.extend_lens[0] if fixed else max(big.extend_lens) + 1
    v2 = case.mode == ForwardMode.DRAFT_EXTEND_V2
    phase = PhaseSpec(case.mode, width, "select" if v2 else "all", CaptureHidden.FULL if v2 else CaptureHidden.NONE,
                      feature=FeatureKind.PROBE, feature_dim=probe.width)
    bs = mult * n
    runner = PhaseGraphRunner(probe, backend, phase, [bs], emulate=emulate, pool=new_pool(emulate))
    batch = make_batch(setup)
    t = batch.num_tokens
    batch.set_feature(FeatureKind.PROBE, AttentionProbe.pack(setup.q, setup.k_new, setup.v_new, case.shared_kv))
    batch.logits_indices = torch.arange(t, device=batch.device)
    if v2:  # production's V2 replay: one selected row per request, at its accept length
        batch.logits_indices = select_rows(big.batch_size, width, batch.device)
        batch.capture_hidden = CaptureHidden.FULL
    if not fixed:
        batch.max_extend_len = width
    pool0 = (setup.kv_pool.k_buffer[0].clone(), setup.kv_pool.v_buffer[0].clone())
    real_rows = sum(case.extend_lens) if pad == "fill" else t
    return _Rig(case, setup, backend, probe, runner, bs, batch, pool0, real_rows)


def select_rows(bs: int, ndt: int, device: torch.device | str) -> torch.Tensor:
    """The V2 draft extend's selected rows ``i * ndt + accept_i - 1``, accept lengths cycling
    through 1 .. ndt (so packing the rows by them differs from the stride from request 1 on)."""
    accept = (torch.arange(bs) * 2 + 1) % ndt + 1
    return (torch.arange(bs) * ndt + accept - 1).to(device)


def _stage(rig: _Rig) -> ForwardBatch:
    """The case written into the static inputs by the production builder (``stage``), padded
    to the captured size; returns the replay view."""
    c = rig.setup.case
    select = rig.batch.logits_indices if rig.runner.phase.logits == "select" else None
    return rig.runner.stage([0] * rig.batch.num_tokens, list(rig.setup.rows), list(c.seq_lens), list(c.extend_lens),
                            rig.setup.req_to_token, select=select, feature=rig.batch.feature)


def _poison(rig: _Rig) -> None:
    table = rig.setup.req_to_token
    poison_static_inputs(rig.runner.static, rig.setup.kv_pool.num_slots, int(table.shape[0]), int(table.shape[1]), rig.case.seed)


def _kv_error(rig: _Rig) -> str:
    """'' if the pool equals the expected one (new K/V at the real rows' slots, the rest as
    before) on every slot but the scratch slot 0."""
    pool = rig.setup.kv_pool
    loc = rig.batch.out_cache_loc.long()
    for name, before, new, now in (
        ("k", rig.pool0[0], rig.setup.k_new, pool.k_buffer[0]),
        ("v", rig.pool0[1], rig.setup.v_new, pool.v_buffer[0]),
    ):
        expected = before.clone()
        expected[loc] = new.to(expected.dtype)
        bad = (now != expected).flatten(1).any(1)
        bad[0] = False
        if bool(bad.any()):
            slots = bad.nonzero().flatten()[:8].tolist()
            written = set(loc.tolist())
            kind = "not written" if all(s in written for s in slots) else "written outside the batch's rows"
            return f"{name} pool slots {slots} {kind}"
    return ""


def _finish(rig: _Rig, out: torch.Tensor, inv: str, pad: str, mult: int, runner_mode: str) -> GraphResult:
    """Compare replay rows with the reference and with a fresh eager forward of the same batch."""
    case, setup, backend = rig.case, rig.setup, rig.backend
    kv = _kv_error(rig)
    ref = reference_output(setup, backend.scale)
    eager_batch = make_batch(setup)
    eager_batch.attn_backend = backend
    backend.init_forward_metadata(eager_batch)
    eager = backend.forward(setup.q, setup.k_new, setup.v_new, 0, eager_batch)
    r = rig.real_rows
    diff = (out[:r].double() - eager[:r].double()).abs().max().item() if r else 0.0
    scale = ref[:r].abs().max().item() or 1.0
    return GraphResult(case, pad, mult, relative_error(out[:r], ref[:r]), diff / scale, inv, TOLERANCE[case.dtype], kv, runner_mode)


def capture_errors(rig: _Rig) -> str:
    """'' if the capture was seeded and the runner refuses what it did not capture, else what is
    wrong: zero lengths at capture (failure class 8: NaN inside the captured kernels), a
    non-finite capture output (emulator only: a real graph does not run at capture), a batch
    wider than the captured width or larger than the captured bs accepted (classes 9 and 2)."""
    runner, batch = rig.runner, rig.batch
    captured = runner.batches[rig.bs]
    if bool((captured.seq_lens == 0).any()) or bool((captured.extend_seq_lens == 0).any()):
        return "capture metadata not seeded (zero lengths at capture)"
    graph = runner.graphs[rig.bs]
    if getattr(graph, "emulated", False) and not bool(torch.isfinite(graph.output.logits).all()):
        return "capture produced non-finite outputs (unseeded metadata?)"
    w = runner.phase.width
    if runner.phase.packed:
        wider = dataclasses.replace(batch, extend_seq_lens_cpu=batch.extend_seq_lens_cpu + w)
    else:
        wider = dataclasses.replace(batch, stride=w + 1)
    if runner.can_run(BatchShape.of(wider))[0]:
        return f"a batch wider than the captured width {w} was accepted"
    bigger = dataclasses.replace(batch, batch_size=rig.bs + 1)
    if runner.can_run(BatchShape.of(bigger))[0]:
        return f"a batch larger than the captured bs {rig.bs} was accepted"
    return ""


def run_graph(backend_name: str, case: AttnCase, mult: int, pad: str, device: str = "cpu") -> GraphResult:
    """Capture at ``mult x`` the case's batch size and replay it (emulated graph on CPU)."""
    rig = _rig(backend_name, case, mult, pad, device, emulate=device == "cpu")
    rig.runner.capture()
    ok, reason = rig.runner.can_run(BatchShape.of(rig.batch))
    if not ok:
        raise AssertionError(f"graph cannot run the case: {reason}")
    cap = capture_errors(rig)
    _poison(rig)
    t = rig.batch.num_tokens
    replayed = rig.runner.replay(_stage(rig))
    rows = replayed.hidden if replayed.hidden is not None else replayed.logits  # V2: every row in hidden
    out = rows.reshape(t, case.num_heads, case.dv).clone()
    captured = rig.runner.batches[rig.bs]
    table_rows = int(rig.setup.req_to_token.shape[0])
    inv = cap or check_invariants(captured.attn_metadata, rig.setup.kv_pool.num_slots, table_rows, captured.num_tokens)
    return _finish(rig, out, inv, pad, mult, "graph")


def run_graph_metadata(backend_name: str, case: AttnCase, mult: int, pad: str, device: str = "cpu") -> GraphResult:
    """Capture-time metadata, production replay fill and replay-init, then an EAGER
    ``backend.forward`` over the static buffers (no graph, no warm-up)."""
    rig = _rig(backend_name, case, mult, pad, device, emulate=True)
    # The capture half of PhaseGraphRunner.capture without the graph: the seeded static batch
    # and the backend's capture metadata (private helpers, used on purpose: the kit must build
    # and fill the static batch exactly as production does).
    captured = rig.runner._static_batch(rig.bs)
    rig.backend.init_capture_metadata(captured)
    rig.runner.batches[rig.bs] = captured
    _poison(rig)
    view = _stage(rig)
    rig.backend.init_replay_metadata(view)
    table_rows = int(rig.setup.req_to_token.shape[0])
    inv = check_invariants(view.attn_metadata, rig.setup.kv_pool.num_slots, table_rows, view.num_tokens)
    q, k, v = rig.probe.split(view.feature)
    out = rig.backend.forward(q, k, v, 0, view)[: rig.batch.num_tokens].clone()
    return _finish(rig, out, inv, pad, mult, "graph-metadata")
