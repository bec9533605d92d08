"""DeepSeek-V2/V3 mixture-of-experts MLP: router, routed experts stacked per layer, shared expert.

Routing (``route``) is static-shape tensor work (softmax/sigmoid, group masks, top-k), so it
captures in a CUDA graph. The experts run by one of four paths, all producing the same
result (``StackedExperts.forward``):

* ``grouped_mm`` (default where ``torch._grouped_mm`` runs: CPU in fp32/bf16, CUDA bf16 on
  sm90+, checked once per device and dtype by a small probe at load time): the (token, k) pairs
  sorted by expert, two grouped GEMMs over the stacked weights with per-expert offsets computed
  on the device. Reads only the chosen experts' weights, no host sync: capturable at every
  batch size.
* ``gather``: each pair's expert weights gathered and one batched matmul. No host sync, so
  capturable, but it copies one expert's weights per pair: used where ``grouped_mm`` is not
  available and the pairs are few (``3 * pairs <= experts``: cheaper than reading every expert).
* ``loop``: one matmul pair per expert that has tokens, the counts read on the host (a sync,
  eager only): prefill without ``grouped_mm``, the reference implementations' way.
* ``dense``: every expert over every token, weighted by the (mostly zero) routing weights. No
  host sync and reads each expert once, but computes ``experts / k`` times the work: what a CUDA
  graph captures where ``grouped_mm`` is missing and the pairs are many.

Rounding: each pair's expert output is rounded to the model dtype, then the k outputs of a
token are weighted and summed in float32 and rounded once (the reference implementations round
each weighted product to the model dtype and add in expert order: bf16 results differ from
theirs by that rounding; fp32 agrees to ~1e-6).
"""

from __future__ import annotations

import torch
from torch import nn

from updraft import ops
from updraft.models.deepseek_config import MoEShape
from updraft.models.layers import GatedMLP

EXPERT_PATHS = ("auto", "grouped_mm", "gather", "loop", "dense")


def route(logits: torch.Tensor, moe: MoEShape, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert choice of each token: ``(weights [T, K] float32, ids [T, K] int64)`` from router
    ``logits`` [T, E] float32 (see ``MoEShape`` for the rules)."""
    scores = logits.softmax(dim=-1) if moe.scoring_func == "softmax" else logits.sigmoid()
    choice = scores if bias is None else scores + bias.float()  # the bias steers selection only
    if moe.topk_method != "greedy" and moe.n_group > 1:
        t, g = choice.shape[0], moe.n_group
        grouped = choice.view(t, g, -1)
        if moe.topk_method == "noaux_tc":
            group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)
        else:
            group_score = grouped.amax(dim=-1)
        top_groups = group_score.topk(moe.topk_group, dim=-1).indices
        keep = torch.zeros(t, g, dtype=torch.bool, device=choice.device).scatter_(1, top_groups, True)
        choice = choice.masked_fill(~keep[:, :, None].expand_as(grouped).reshape(t, -1), float("-inf"))
    ids = choice.topk(moe.num_experts_per_tok, dim=-1).indices
    weights = scores.gather(1, ids)
    k = moe.num_experts_per_tok
    if moe.scale_normed:  # V3: normalise (optionally), then always scale
        if moe.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        weights = weights * moe.routed_scaling_factor
    elif moe.norm_topk_prob and k > 1:  # V2: normalise or scale, not both
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    else:
        weights = weights * moe.routed_scaling_factor
    return weights, ids


class MoEGate(nn.Module):
    """Router: ``weight`` [E, hidden] in the model dtype (logits computed in float32) and, for
    noaux_tc, ``e_score_correction_bias`` [E] kept in float32 whatever the model dtype (a bf16
    bias would move near-tied selections)."""

    def __init__(self, hidden: int, moe: MoEShape) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(moe.n_routed_experts, hidden))
        self.e_score_correction_bias = (
            nn.Parameter(torch.empty(moe.n_routed_experts, dtype=torch.float32)) if moe.has_bias else None
        )

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]  # nn.Module's signature
        # ``model.to(dtype)`` casts every floating tensor; put the bias back to float32 (on the
        # meta device or before loading there is nothing to lose).
        super()._apply(fn, recurse)
        b = self.e_score_correction_bias
        if b is not None and b.dtype != torch.float32:
            b.data = b.data.float()
        return self


_GROUPED_MM_OK: dict[tuple[str, torch.dtype], bool] = {}


def probe_grouped_mm(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs and is right on ``device`` in ``dtype`` (cached; a
    small problem checked against per-group matmuls). Call it outside graph capture (it syncs):
    ``DeepseekDecoderLayer.absorb`` does, after loading."""
    key = (device.type, dtype)
    if key not in _GROUPED_MM_OK:
        # CUDA: bf16 on sm90+ only. In fp32 it runs eagerly but copies a host tensor inside a
        # CUDA graph capture (H100, torch 2.11: tests/models/test_deepseek_gpu.py).
        cuda_ok = device.type != "cuda" or (dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) >= (9, 0))
        ok = hasattr(torch, "_grouped_mm") and cuda_ok
        if ok:
            try:
                gen = torch.Generator(device=device).manual_seed(0)
                a = torch.randn(24, 32, device=device, generator=gen).to(dtype)
                b = torch.randn(3, 64, 32, device=device, generator=gen).to(dtype)
                offs = torch.tensor([8, 8, 24], device=device, dtype=torch.int32)
                got = torch._grouped_mm(a, b.transpose(1, 2), offs=offs).float()
                want = torch.cat([a[:8] @ b[0].T, a[8:] @ b[2].T]).float()
                ok = bool(torch.allclose(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max())))
            except (RuntimeError, TypeError, NotImplementedError):
                ok = False
        _GROUPED_MM_OK[key] = ok
    return _GROUPED_MM_OK[key]


class StackedExperts(nn.Module):
    """The routed experts of one layer: ``w13`` [E, 2I, hidden] (gate rows, then up rows) and
    ``w2`` [E, hidden, I]. ``path`` picks the compute path ("auto": see the module docstring)."""

    def __init__(self, hidden: int, moe: MoEShape) -> None:
        super().__init__()
        e, i = moe.n_routed_experts, moe.moe_intermediate_size
        self.num_experts, self.intermediate, self.hidden = e, i, hidden
        self.w13 = nn.Parameter(torch.empty(e, 2 * i, hidden))
        self.w2 = nn.Parameter(torch.empty(e, hidden, i))
        self.path = "auto"

    def prepare(self) -> None:
        """After loading, outside graph capture: probe ``grouped_mm`` for this device and dtype."""
        probe_grouped_mm(self.w13.device, self.w13.dtype)

    def pick_path(self, pairs: int) -> str:
        """The path for ``pairs`` (token, k) pairs; a function of shapes, device and dtype only
        (and of whether a CUDA graph is being captured), so a graph replays the path it captured."""
        if self.path != "auto":
            return self.path
        w = self.w13
        aligned = all((n * w.element_size()) % 16 == 0 for n in (self.hidden, self.intermediate))
        if aligned and _GROUPED_MM_OK.get((w.device.type, w.dtype), False):
            return "grouped_mm"
        if 3 * pairs <= self.num_experts:
            return "gather"
        return "dense" if w.is_cuda and torch.cuda.is_current_stream_capturing() else "loop"

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``x`` [T, hidden], ``ids`` / ``weights`` [T, K] -> the weighted sum [T, hidden]."""
        t, k = ids.shape
        flat = ids.reshape(-1)
        path = self.pick_path(flat.numel())
        if path not in EXPERT_PATHS[1:]:
            raise ValueError(f"expert path {path!r} is not one of {', '.join(EXPERT_PATHS)}")
        if path == "dense":
            return self._dense(x, ids, weights)
        if path == "gather":
            y = self._gather(x, flat, k)
        else:
            y = self._sorted(x, flat, k, grouped=path == "grouped_mm")
        out = (y.view(t, k, -1).float() * weights[:, :, None]).sum(dim=1)
        return out.to(x.dtype)

    def _dense(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        dense_w = torch.zeros(x.shape[0], self.num_experts, device=x.device).scatter_(1, ids, weights)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in range(self.num_experts):
            y = ops.dense(ops.silu_and_mul(ops.dense(x, self.w13[e])), self.w2[e])
            out += y.float() * dense_w[:, e : e + 1]
        return out.to(x.dtype)

    def _gather(self, x: torch.Tensor, flat: torch.Tensor, k: int) -> torch.Tensor:
        xs = x.repeat_interleave(k, dim=0)  # pair p = (token p // k, its k-th choice)
        h = torch.bmm(self.w13[flat], xs[:, :, None])[:, :, 0]
        return torch.bmm(self.w2[flat], ops.silu_and_mul(h)[:, :, None])[:, :, 0]

    def _sorted(self, x: torch.Tensor, flat: torch.Tensor, k: int, grouped: bool) -> torch.Tensor:
        """Pairs sorted by expert, run per expert, written back in pair order."""
        order = torch.argsort(flat, stable=True)
        xs = x[order // k]
        counts = torch.zeros(self.num_experts, dtype=torch.int64, device=x.device)
        counts.scatter_add_(0, flat, torch.ones_like(flat))
        if grouped:
            offs = counts.cumsum(0).to(torch.int32)
            h = torch._grouped_mm(xs, self.w13.transpose(1, 2), offs=offs)
            ys = torch._grouped_mm(ops.silu_and_mul(h), self.w2.transpose(1, 2), offs=offs)
        else:
            ys = torch.empty_like(xs)
            start = 0
            for e, n in enumerate(counts.tolist()):  # host sync: eager only
                if n:
                    rows = slice(start, start + n)
                    ys[rows] = ops.dense(ops.silu_and_mul(ops.dense(xs[rows], self.w13[e])), self.w2[e])
                    start += n
        return torch.empty_like(ys).index_copy_(0, order, ys)


class DeepseekMoE(nn.Module):
    """Router + routed experts + the shared expert (``n_shared_experts`` of them as one MLP)."""

    def __init__(self, hidden: int, moe: MoEShape) -> None:
        super().__init__()
        self.moe = moe
        self.gate = MoEGate(hidden, moe)
        self.experts = StackedExperts(hidden, moe)
        shared = moe.moe_intermediate_size * moe.n_shared_experts
        self.shared_experts = GatedMLP(hidden, shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = ops.float_linear(x, self.gate.weight)
        weights, ids = route(logits, self.moe, self.gate.e_score_correction_bias)
        out = self.experts(x, ids, weights)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out
