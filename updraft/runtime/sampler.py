"""Batched token sampling: penalties, temperature, top-k / top-p / min-p, seeded generators.

Conventions (the speculative verifier relies on them):

* ``Sampler.probs`` is THE distribution ``Sampler.sample`` draws from. Both go through
  ``_distribution``; lossless rejection sampling compares draft probabilities against it, so any
  change to the filters must keep the two in one code path.
* Order of operations per row: penalties on the raw logits -> greedy rows take the argmax of the
  penalised logits -> temperature scaling -> top-k -> top-p (on the top-k-renormalised
  distribution) -> min-p (relative to the most likely token) -> softmax. This matches HF
  transformers; vLLM v1 applies min-p *before* top-k/top-p, which only differs when min-p and
  top-p are combined.
* Filters are value thresholds: a token is kept iff its scaled logit is >= the row's cut-off, so
  ties at the cut-off are all kept (top-k may keep more than k tokens when logits tie).
* Temperatures below ``GREEDY_TEMPERATURE`` are greedy (dividing by them overflows float32).
* Logprobs are vLLM's "raw" logprobs: ``log_softmax`` of the logits as the model produced them,
  before penalties, temperature and filters.
* Nothing here synchronises with the device: outputs are device tensors and the caller does one
  ``.tolist()`` per step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from updraft.sampling_params import SamplingParams

GREEDY_TEMPERATURE = 1e-5  # temperatures below this are treated as 0 (greedy)

# Column layout of the packed per-row parameter tensor (one host->device copy per build).
_TEMP, _GREEDY, _TOP_K, _TOP_P, _MIN_P, _REP, _FREQ, _PRES = range(8)


@dataclass
class SamplingBatch:
    """Per-row sampling parameters of one sampling call, as device tensors plus host flags.

    Row ``r`` follows ``params[r]``. Disabled filters hold neutral values (``top_k == vocab_size``,
    ``top_p == 1``, ``min_p == 0``) and greedy rows have every filter disabled and
    ``temperature == 1`` so the batched arithmetic needs no special cases. The ``any_*`` flags
    are host booleans that let the sampler skip whole passes over ``[B, V]``.
    """

    params: list[SamplingParams]
    generators: list[torch.Generator | None]
    vocab_size: int
    temperature: torch.Tensor  # [B] float32
    greedy: torch.Tensor  # [B] bool
    top_k: torch.Tensor  # [B] int64, vocab_size where disabled
    top_p: torch.Tensor  # [B] float32, 1 where disabled
    min_p: torch.Tensor  # [B] float32, 0 where disabled
    repetition_penalty: torch.Tensor  # [B] float32
    frequency_penalty: torch.Tensor  # [B] float32
    presence_penalty: torch.Tensor  # [B] float32
    # Only when any_penalty: token occurrence state built from ``history``.
    prompt_mask: torch.Tensor | None  # [B, V] bool: token occurs in the prompt
    output_counts: torch.Tensor | None  # [B, V] float32: occurrences in the output
    all_greedy: bool
    any_greedy: bool
    any_penalty: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    max_top_k: int  # largest enabled top-k (0 when none)
    need_logprobs: bool  # some row has logprobs is not None
    max_logprobs: int  # K of the top-logprob tensors (0: none requested)

    @property
    def batch_size(self) -> int:
        return int(self.temperature.shape[0])

    @property
    def device(self) -> torch.device:
        return self.temperature.device

    @property
    def sampling_generators(self) -> list[torch.Generator | None]:
        """Generators of the rows that actually draw noise (greedy rows never need one)."""
        pairs = zip(self.params, self.generators, strict=True)
        return [None if _is_greedy(p) else g for p, g in pairs]

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        generators: Sequence[torch.Generator | None],
        vocab_size: int,
        device: torch.device | str,
        history: Sequence[tuple[Sequence[int], Sequence[int]]] | None = None,
    ) -> SamplingBatch:
        """Pack ``params`` for a batch of ``len(params)`` rows.

        ``generators[r]`` is row ``r``'s seeded generator (on ``device``) or None for the default
        RNG. ``history[r]`` is ``(prompt_ids, output_ids)``; it is required only when some row
        uses penalties, and token ids outside ``[0, vocab_size)`` in it are ignored.
        """
        params = list(params)
        if len(generators) != len(params):
            raise ValueError(f"{len(generators)} generators for {len(params)} rows")
        device = torch.device(device)
        prompt_mask = output_counts = None
        if any(p.uses_penalties for p in params):
            if history is None or len(history) != len(params):
                raise ValueError("penalties need history=(prompt_ids, output_ids) for every row")
            prompt_mask, output_counts = _occurrences(params, history, vocab_size, device)
        return cls._assemble(
            params, list(generators), vocab_size, device, prompt_mask, output_counts
        )

    @classmethod
    def on_device(
        cls,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        vocab_size: int,
    ) -> SamplingBatch:
        """A batch whose parameters are already device tensors (gathered inside a CUDA graph).

        Every filter pass runs (the host cannot look at the values to skip one), which is the
        same distribution: a disabled filter is a no-op at its neutral value. Rows with
        ``temperature < GREEDY_TEMPERATURE`` are greedy (one-hot). No penalties, no logprobs,
        no host generators: the caller supplies the noise.
        """
        greedy = temperature < GREEDY_TEMPERATURE
        one = torch.ones_like(temperature)
        off_k = torch.full_like(top_k, vocab_size)
        k = torch.where(greedy | (top_k <= 0) | (top_k >= vocab_size), off_k, top_k)
        return cls(
            params=[],
            generators=[],
            vocab_size=vocab_size,
            temperature=torch.where(greedy, one, temperature),
            greedy=greedy,
            top_k=k,
            top_p=torch.where(greedy, one, top_p),
            min_p=torch.where(greedy, torch.zeros_like(min_p), min_p),
            repetition_penalty=one,
            frequency_penalty=torch.zeros_like(one),
            presence_penalty=torch.zeros_like(one),
            prompt_mask=None,
            output_counts=None,
            all_greedy=False,
            any_greedy=True,
            any_penalty=False,
            any_top_k=True,
            any_top_p=True,
            any_min_p=True,
            max_top_k=vocab_size,
            need_logprobs=False,
            max_logprobs=0,
        )

    def select(self, rows: Sequence[int]) -> SamplingBatch:
        """A batch whose row ``i`` is this batch's row ``rows[i]`` (rows may repeat).

        Repeated rows share one generator object, so they draw successive noise from it in row
        order: reproducible for a fixed layout, but not the same draws as a single row.
        """
        rows = list(rows)
        index = torch.tensor(rows, dtype=torch.long).to(self.device, non_blocking=True)

        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.index_select(0, index)

        return SamplingBatch._assemble(
            [self.params[r] for r in rows],
            [self.generators[r] for r in rows],
            self.vocab_size,
            self.device,
            take(self.prompt_mask),
            take(self.output_counts),
        )

    def repeat_rows(self, counts: Sequence[int]) -> SamplingBatch:
        """Row ``i`` repeated ``counts[i]`` times, rows kept in order (speculative verification)."""
        if len(counts) != self.batch_size:
            raise ValueError(f"{len(counts)} counts for {self.batch_size} rows")
        return self.select([r for r, c in enumerate(counts) for _ in range(c)])

    def record_output(self, tokens: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """Count ``tokens[r]`` ([B] int64) as output of row ``r`` for the penalties, in place.

        Lets a batch persist across steps, or lets speculative verification give position ``j``
        the penalty state that includes drafts ``0..j-1``. Rows with ``valid[r] == False`` are
        unchanged. No-op when no row uses penalties.
        """
        if self.output_counts is None:
            return
        weight = torch.ones_like(tokens, dtype=torch.float32) if valid is None else valid.float()
        rows = torch.arange(self.batch_size, device=tokens.device)
        # Invalid rows may carry padding ids such as -1: clamp them to a real column, weight 0.
        cols = tokens.clamp(0, self.vocab_size - 1)
        self.output_counts.index_put_((rows, cols), weight, accumulate=True)

    @classmethod
    def _assemble(
        cls,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
        vocab_size: int,
        device: torch.device,
        prompt_mask: torch.Tensor | None,
        output_counts: torch.Tensor | None,
    ) -> SamplingBatch:
        rows = [_pack_row(p, vocab_size) for p in params]
        # One host->device copy for all per-row scalars.
        packed = torch.tensor(rows, dtype=torch.float32).reshape(len(params), 8)
        packed = packed.to(device, non_blocking=True)
        return cls(
            params=params,
            generators=generators,
            vocab_size=vocab_size,
            temperature=packed[:, _TEMP].contiguous(),
            greedy=packed[:, _GREEDY] > 0.5,
            top_k=packed[:, _TOP_K].long(),  # exact: float32 holds integers up to 2**24
            top_p=packed[:, _TOP_P].contiguous(),
            min_p=packed[:, _MIN_P].contiguous(),
            repetition_penalty=packed[:, _REP].contiguous(),
            frequency_penalty=packed[:, _FREQ].contiguous(),
            presence_penalty=packed[:, _PRES].contiguous(),
            prompt_mask=prompt_mask,
            output_counts=output_counts,
            **_flags(params, rows, vocab_size),
        )


@dataclass
class SampleOutput:
    """Result of ``Sampler.sample``; every field is a device tensor (no host sync was done).

    ``logprobs`` and the top-logprob tensors are raw logprobs (before penalties/temperature).
    ``logprobs`` is None unless some row asked for logprobs; the top tensors are None unless some
    row asked for ``logprobs >= 1`` and hold ``K = max requested`` columns, best first (rows that
    asked for fewer slice their own). ``bad_rows[r]`` is True when row ``r``'s logits had a NaN
    or +inf, or no finite entry: its token is 0 and meaningless, and the request should fail.
    """

    tokens: torch.Tensor  # [B] int64
    bad_rows: torch.Tensor  # [B] bool
    logprobs: torch.Tensor | None = None  # [B] float32
    top_logprob_ids: torch.Tensor | None = None  # [B, K] int64
    top_logprobs: torch.Tensor | None = None  # [B, K] float32


class Sampler:
    """Stateless batched sampler; every method takes the ``SamplingBatch`` it works on."""

    def apply_penalties(self, logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
        """Repetition, frequency and presence penalties (OpenAI/vLLM definitions), out of place.

        Repetition divides positive and multiplies negative logits of every token seen in the
        prompt or output; frequency subtracts ``count * f`` and presence subtracts ``p`` once for
        every token seen in the output.
        """
        if not sb.any_penalty:
            return logits
        assert sb.prompt_mask is not None and sb.output_counts is not None
        counts = sb.output_counts
        seen = sb.prompt_mask | (counts > 0)
        rep = sb.repetition_penalty[:, None]
        penalised = torch.where(logits > 0, logits / rep, logits * rep)
        logits = torch.where(seen, penalised, logits)
        logits = logits - sb.frequency_penalty[:, None] * counts
        return logits - sb.presence_penalty[:, None] * (counts > 0).float()

    def probs(self, logits: torch.Tensor, sb: SamplingBatch) -> torch.Tensor:
        """[B, V] float32: the distribution ``sample`` draws row ``r`` from (one-hot if greedy).

        Rows with bad logits (see ``SampleOutput.bad_rows``) get the uniform distribution.
        """
        logits, _ = _sanitise(logits.float())
        probs, _ = self._distribution(self.apply_penalties(logits, sb), sb)
        return probs

    def sample(self, logits: torch.Tensor, sb: SamplingBatch) -> SampleOutput:
        """Sample one token per row of ``logits`` [B, V] (see the module docstring for order)."""
        raw = logits.float()
        if sb.all_greedy and not sb.any_penalty:
            # Fast path: one argmax. argmax picks a NaN if there is one, so the picked value
            # itself tells whether the row is bad.
            tokens = raw.argmax(dim=-1)
            bad = ~torch.isfinite(raw.gather(1, tokens[:, None]).squeeze(1))
        else:
            clean, bad = _sanitise(raw)
            probs, greedy_tokens = self._distribution(self.apply_penalties(clean, sb), sb)
            if greedy_tokens is not None and sb.all_greedy:
                tokens = greedy_tokens
            else:
                tokens = self.sample_from_probs(probs, sb.sampling_generators)
                if greedy_tokens is not None:
                    # Redundant with the one-hot rows of probs; makes greedy exact by construction.
                    tokens = torch.where(sb.greedy, greedy_tokens, tokens)
        tokens = tokens.masked_fill(bad, 0)
        out = SampleOutput(tokens=tokens, bad_rows=bad)
        if sb.need_logprobs:
            lse = torch.logsumexp(raw, dim=-1, keepdim=True)
            out.logprobs = (raw.gather(1, tokens[:, None]) - lse).squeeze(1)
            if sb.max_logprobs > 0:
                k = min(sb.max_logprobs, raw.shape[-1])
                top = torch.topk(raw, k, dim=-1)
                out.top_logprob_ids = top.indices
                out.top_logprobs = top.values - lse
        return out

    @staticmethod
    def sample_from_probs(
        probs: torch.Tensor, generators: Sequence[torch.Generator | None]
    ) -> torch.Tensor:
        """[B] int64 tokens drawn from ``probs`` [B, V] by an exponential race.

        ``argmax(p / E)`` with ``E ~ Exp(1)`` i.i.d. picks index ``i`` with probability
        ``p_i / sum(p)``, so rows need not be normalised (residual distributions of rejection
        sampling work as they are) but must have a positive entry. Row ``r`` draws its V noise
        values from ``generators[r]`` when set (the generator advances by the same amount on every
        call, whatever the rest of the batch), else from a single default-RNG call for the batch.
        """
        if len(generators) != probs.shape[0]:
            raise ValueError(f"{len(generators)} generators for {probs.shape[0]} rows")
        noise = torch.empty_like(probs, dtype=torch.float32)
        if any(g is None for g in generators):
            noise.exponential_()
        for r, g in enumerate(generators):
            if g is not None:
                noise[r].exponential_(generator=g)
        # Exp(1) may return exactly 0 on some backends: p / 0 is inf (a forced pick) or, for a
        # zero-probability token, NaN, which argmax would choose. Clamp keeps both impossible.
        noise.clamp_(min=torch.finfo(torch.float32).tiny)
        return (probs / noise).argmax(dim=-1)

    def _distribution(
        self, logits: torch.Tensor, sb: SamplingBatch
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(probs [B, V], argmax [B] or None without greedy rows) of sanitised, penalised logits."""
        greedy_tokens = logits.argmax(dim=-1) if sb.any_greedy or sb.all_greedy else None
        if sb.all_greedy:
            assert greedy_tokens is not None
            return _one_hot(greedy_tokens, logits), greedy_tokens
        x = logits / sb.temperature[:, None]
        threshold = torch.full_like(sb.top_p, -math.inf)  # [B]: keep x >= threshold
        row_max: torch.Tensor | None = None
        if sb.any_top_p:
            # One descending sort serves top-k and top-p. Only values are needed: both cut-offs
            # are turned into value thresholds and applied in the original order below.
            ordered = torch.sort(x, dim=-1, descending=True).values
            row_max = ordered[:, 0]
            kth = ordered.gather(1, (sb.top_k - 1)[:, None])  # top_k == V: the min, no-op
            ordered = ordered.masked_fill(ordered < kth, -math.inf)
            p = torch.softmax(ordered, dim=-1)
            before = torch.cumsum(p, dim=-1) - p  # mass of strictly more likely tokens
            # top_p == 1 must keep everything, even when rounding pushes ``before`` past 1.
            top_p = torch.where(sb.top_p < 1, sb.top_p, math.inf)
            kept = (before < top_p[:, None]).sum(dim=-1, keepdim=True)  # >= 1: before[0] == 0
            threshold = torch.maximum(kth, ordered.gather(1, kept - 1)).squeeze(1)
        elif sb.any_top_k:
            top = torch.topk(x, sb.max_top_k, dim=-1).values
            row_max = top[:, 0]
            kth = top.gather(1, (sb.top_k.clamp(max=sb.max_top_k) - 1)[:, None]).squeeze(1)
            threshold = torch.where(sb.top_k < sb.vocab_size, kth, threshold)
        if sb.any_min_p:
            # p_i >= min_p * p_max  <=>  x_i >= x_max + log(min_p); log(0) = -inf disables it.
            # The most likely token survives top-k/top-p, so the ratio is the same before and
            # after their renormalisation.
            if row_max is None:
                row_max = x.amax(dim=-1)
            threshold = torch.maximum(threshold, row_max + torch.log(sb.min_p))
        if sb.any_top_k or sb.any_top_p or sb.any_min_p:
            x = x.masked_fill(x < threshold[:, None], -math.inf)
        probs = torch.softmax(x, dim=-1)
        if greedy_tokens is not None:
            probs = torch.where(sb.greedy[:, None], _one_hot(greedy_tokens, probs), probs)
        return probs, greedy_tokens


def _sanitise(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits with bad rows zeroed, bad [B] bool). -inf entries are fine (masked vocab)."""
    row_max = logits.amax(dim=-1)  # NaN if any NaN, +inf if any +inf, -inf if nothing finite
    bad = ~torch.isfinite(row_max)
    return logits.masked_fill(bad[:, None], 0.0), bad


def _one_hot(tokens: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like).scatter_(1, tokens[:, None], 1.0)


def _is_greedy(p: SamplingParams) -> bool:
    return p.temperature < GREEDY_TEMPERATURE


def _pack_row(p: SamplingParams, vocab_size: int) -> tuple[float, ...]:
    """One row of the packed parameter tensor, with disabled filters set to neutral values."""
    rep, freq, pres = p.repetition_penalty, p.frequency_penalty, p.presence_penalty
    if _is_greedy(p):
        return (1.0, 1.0, float(vocab_size), 1.0, 0.0, rep, freq, pres)
    top_k = p.top_k if 0 < p.top_k < vocab_size else vocab_size  # -1 and 0 both disable
    return (p.temperature, 0.0, float(top_k), p.top_p, p.min_p, rep, freq, pres)


def _flags(
    params: list[SamplingParams], rows: list[tuple[float, ...]], vocab_size: int
) -> dict[str, bool | int]:
    """The host-side flags of a batch, from its packed rows."""
    enabled_k = [int(r[_TOP_K]) for r in rows if r[_TOP_K] < vocab_size]
    requested = [p.logprobs for p in params if p.logprobs is not None]
    return {
        "all_greedy": all(r[_GREEDY] for r in rows),
        "any_greedy": any(r[_GREEDY] for r in rows),
        "any_penalty": any(p.uses_penalties for p in params),
        "any_top_k": bool(enabled_k),
        "any_top_p": any(r[_TOP_P] < 1 for r in rows),
        "any_min_p": any(r[_MIN_P] > 0 for r in rows),
        "max_top_k": max(enabled_k, default=0),
        "need_logprobs": bool(requested),
        "max_logprobs": max(requested, default=0),
    }


def _occurrences(
    params: list[SamplingParams],
    history: Sequence[tuple[Sequence[int], Sequence[int]]],
    vocab_size: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt_mask [B, V] bool, output_counts [B, V] float32), one scatter each."""
    # Rows without penalties keep zero state: their penalties are neutral anyway.
    use = [p.uses_penalties for p in params]

    def counts(which: int) -> torch.Tensor:
        seqs = [h[which] if u else () for h, u in zip(history, use, strict=True)]
        ids = torch.tensor(list(itertools.chain.from_iterable(seqs)), dtype=torch.long)
        rows = torch.repeat_interleave(
            torch.arange(len(seqs)), torch.tensor([len(s) for s in seqs])
        )
        keep = (ids >= 0) & (ids < vocab_size)  # filtered on the host: no device sync
        ids, rows = ids[keep].to(device), rows[keep].to(device)
        out = torch.zeros(len(seqs), vocab_size, dtype=torch.float32, device=device)
        return out.index_put_(
            (rows, ids), torch.ones_like(ids, dtype=torch.float32), accumulate=True
        )

    return counts(0) > 0, counts(1)
