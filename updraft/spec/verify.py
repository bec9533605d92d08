"""Acceptance of a chain of drafts: greedy matching and lossless rejection sampling.

Shapes: ``B`` requests, ``S`` drafts each, vocabulary ``V``. The target scored ``S + 1`` rows per
request (the bonus token and the S drafts), so its row ``k`` predicts the token after draft ``k``
(row 0: after the bonus). Outputs:

* ``accept_len`` [B] in ``1..S+1``: tokens emitted this step, counting the bonus/correction token;
* ``emitted`` [B, S+1]: the emitted tokens, valid in columns ``< accept_len``.

Everything stays on the device; the caller syncs once.
"""

from __future__ import annotations

import torch

from updraft.runtime.sampler import Sampler
from updraft.spec.device_rng import inverse_cdf


def greedy_accept(drafts: torch.Tensor, target_argmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept the longest prefix of drafts equal to the target's argmax; the token after it is
    the target's own prediction. ``target_argmax`` [B, S+1]."""
    s = drafts.shape[1]
    match = (drafts == target_argmax[:, :s]).to(torch.int32)
    accepted = torch.cumprod(match, dim=1).sum(dim=1)
    return accepted + 1, target_argmax


def _uniforms(shape: tuple[int, int], generators: list[torch.Generator | None], device: torch.device) -> torch.Tensor:
    """U(0,1) per row, drawn from the row's generator (per-request seeds), else the default RNG."""
    out = torch.empty(shape, device=device)
    for i, g in enumerate(generators):
        out[i].uniform_(generator=g)
    return out


def rejection_accept(
    drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generators: list[torch.Generator | None],
    uniforms: torch.Tensor | None = None,
    residual_uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lossless speculative sampling (Leviathan et al. / Chen et al.).

    ``draft_probs`` [B, S, V]: the distribution each draft was sampled from, or None when drafts
    are deterministic (argmax of a draft model, n-gram lookup): then q is one-hot at the draft.
    ``target_probs`` [B, S+1, V]: the target sampler's distribution (temperature, top-k, top-p,
    min-p already applied, exactly as plain sampling would use). Draft ``k`` is accepted with
    probability ``min(1, p_k(d_k) / q_k(d_k))``; at the first rejection the emitted token is drawn
    from ``normalize(max(p_k - q_k, 0))``; if all S are accepted the bonus is drawn from p_S. The
    emitted sequence is then distributed exactly as sampling from the target.

    ``uniforms`` [B, S] and ``residual_uniform`` [B] (counter-based, inside graphs) replace the
    draws from ``generators`` when given; the emitted token is then drawn by ``inverse_cdf``.
    """
    bsz, s = drafts.shape
    dev = drafts.device
    idx = drafts.unsqueeze(-1)
    p_d = target_probs[:, :s].gather(-1, idx).squeeze(-1)  # [B, S]
    if draft_probs is None:
        q_d = torch.ones_like(p_d)
    else:
        q_d = draft_probs.gather(-1, idx).squeeze(-1)
    u = _uniforms((bsz, s), generators, dev) if uniforms is None else uniforms
    # q_d > 0 always for a sampled draft; clamp guards a draft the draft sampler could not emit.
    ok = (u * q_d.clamp_min(1e-20) <= p_d).to(torch.int32)
    accepted = torch.cumprod(ok, dim=1).sum(dim=1)  # [B] in 0..S
    rows = torch.arange(bsz, device=dev)
    p_at = target_probs[rows, accepted]  # [B, V]: the row after the last accepted draft
    if draft_probs is None:
        q_full = torch.zeros_like(target_probs[:, :s])
        q_full.scatter_(-1, idx, 1.0)
    else:
        q_full = draft_probs
    q_pad = torch.cat([q_full, torch.zeros_like(target_probs[:, :1])], dim=1)  # q of the bonus row = 0
    residual = (p_at - q_pad[rows, accepted]).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)
    # If p <= q everywhere on the rejected row (only possible when p == q, i.e. a rejection had
    # probability 0), fall back to p so we never divide by zero.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_at)
    if residual_uniform is None:
        extra = Sampler.sample_from_probs(residual, generators)
    else:
        extra = inverse_cdf(residual, residual_uniform)
    # [B, S+1]: the drafts, a filler column (the first draft: past the accept length rows hold
    # what the fused path's kernel writes there), then the draw at the accept length. S = 0 (a
    # plain step) has no draft to fill with: the draw itself.
    emitted = torch.cat([drafts, drafts[:, :1] if s else extra[:, None]], dim=1)  # cat copies: safe to write into
    emitted[rows, accepted] = extra
    return accepted + 1, emitted
