"""Graph mode of the attention kit: capture an attention-only probe with the production graph
runner, replay a case, compare with the eager path and the float64 reference.

Pad styles: ``fill`` pads the replay like production (seq_lens = fill value, row 0, scratch
slot); ``real`` fills the captured batch with extra small real requests, whose rows are checked
too. Capture batch sizes are ``mult`` times the case's batch. After every replay-init the
metadata invariants are checked (lengths >= 0, start offsets from 0 and non-decreasing, slots
inside the pool, request rows inside the table).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from updraft.attention import backend_class
from updraft.batch import ForwardBatch
from updraft.graphs.device_graph import new_pool
from updraft.graphs.runner import PhaseGraphRunner, PhaseSpec
from updraft.kit.cases import TOLERANCE, AttnCase
from updraft.kit.harness import DTYPE, build_case, make_batch, reference_output, relative_error
from updraft.models.llama import ModelOutput


class AttentionProbe(nn.Module):
    """A "model" that is one attention call over q|k|v packed in ``spec_inputs["qkv"]``."""

    def __init__(self, hq: int, hkv: int, d: int, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.anchor = nn.Parameter(torch.zeros(1, dtype=dtype, device=device), requires_grad=False)

    def forward(self, batch: ForwardBatch) -> ModelOutput:
        qkv = batch.spec_inputs["qkv"]
        t = qkv.shape[0]
        q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        assert batch.attn_backend is not None
        out = batch.attn_backend.forward(
            q.reshape(t, self.hq, self.d), k.reshape(t, self.hkv, self.d), v.reshape(t, self.hkv, self.d), 0, batch
        )
        return ModelOutput(logits=out.reshape(t, -1)[batch.logits_indices])


@dataclass
class GraphResult:
    case: AttnCase
    pad: str
    mult: int
    rel_err_ref: float  # replay vs float64 reference (real rows)
    max_diff_eager: float  # replay vs eager (real rows), absolute
    invariant_error: str
    tol: float

    @property
    def ok(self) -> bool:
        return not self.invariant_error and self.rel_err_ref <= self.tol and self.max_diff_eager <= self.tol

    def describe(self) -> str:
        return (
            f"{self.case.name} pad={self.pad} x{self.mult}: ref_err={self.rel_err_ref:.2e} "
            f"eager_diff={self.max_diff_eager:.2e} {self.invariant_error}"
        )


def check_invariants(md: object, num_slots: int, table_rows: int, num_tokens: int) -> str:
    """'' if the metadata is sane, else the first violation."""
    if not dataclasses.is_dataclass(md):
        return ""
    for f in dataclasses.fields(md):
        t = getattr(md, f.name)
        if not isinstance(t, torch.Tensor) or t.dtype == torch.bool or t.is_floating_point() or t.numel() == 0:
            continue
        name = f.name
        if "len" in name and bool((t < 0).any()):
            return f"{name} has negative entries {t.tolist()}"
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


def _padding_case(case: AttnCase, extra: int) -> AttnCase:
    """The case plus ``extra`` small real requests (for pad style 'real')."""
    ext = case.extend_lens[0] if case.mode.is_fixed_stride(include_v2=True) else 1
    prefix = tuple(case.prefix_lens) + tuple((3 + 2 * i) % 7 for i in range(extra))
    return dataclasses.replace(case, prefix_lens=prefix, extend_lens=tuple(case.extend_lens) + (ext,) * extra)


def run_graph(backend_name: str, case: AttnCase, mult: int, pad: str, device: str = "cpu") -> GraphResult:
    """Capture at ``mult x`` the case's batch size and replay it (emulated graph on CPU)."""
    n = case.batch_size
    big = case if pad == "fill" else _padding_case(case, (mult - 1) * n)
    setup = build_case(big, device)
    cls = backend_class(backend_name)
    backend = cls(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    dtype = DTYPE[case.dtype]
    probe = AttentionProbe(case.num_heads, case.num_kv_heads, case.head_dim, dtype, device)
    fixed = case.mode.is_fixed_stride(include_v2=True)
    width = case.extend_lens[0] if fixed else max(big.extend_lens)
    qkv_dim = (case.num_heads + 2 * case.num_kv_heads) * case.head_dim
    phase = PhaseSpec(case.mode, width, "all", spec_input="qkv", spec_dim=qkv_dim)
    runner = PhaseGraphRunner(probe, backend, phase, [mult * n], emulate=device == "cpu", pool=new_pool(device == "cpu"))
    runner.capture()
    batch = make_batch(setup)
    t = batch.num_tokens
    qkv = torch.cat([setup.q.reshape(t, -1), setup.k_new.reshape(t, -1), setup.v_new.reshape(t, -1)], dim=-1)
    batch.spec_inputs["qkv"] = qkv
    batch.logits_indices = torch.arange(t, device=batch.device)
    if not fixed:
        batch.max_extend_len = width
    ok, reason = runner.can_run(batch)
    if not ok:
        raise AssertionError(f"graph cannot run the case: {reason}")
    out = runner.replay(batch).logits.reshape(t, case.num_heads, case.head_dim).clone()
    captured = runner.batches[mult * n]
    table_rows = int(setup.req_to_token.shape[0])
    inv = check_invariants(captured.attn_metadata, setup.kv_pool.num_slots, table_rows, captured.num_tokens)
    ref = reference_output(setup, backend.scale)
    eager_batch = make_batch(setup)
    eager_batch.attn_backend = backend
    backend.init_forward_metadata(eager_batch)
    eager = backend.forward(setup.q, setup.k_new, setup.v_new, 0, eager_batch)
    real_rows = sum(case.extend_lens) if pad == "fill" else t
    diff = (out[:real_rows].double() - eager[:real_rows].double()).abs().max().item() if real_rows else 0.0
    scale = ref[:real_rows].abs().max().item() or 1.0
    return GraphResult(case, pad, mult, relative_error(out[:real_rows], ref[:real_rows]), diff / scale, inv, TOLERANCE[case.dtype])
