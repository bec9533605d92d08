"""The S = 5 cycle and the plain step under named variants, in alternating rounds on one machine.

    python benchmarks/cycle_variants.py --bs 8 --variants base,verify_pdl,tiles,verify_pdl+tiles \
        --tiles-json tiles.json --rounds 3 --out DIR

Random-weight SmolLM2 with the builtin head, as ``tune_in_cycle.py`` builds them (plain and
speculative engines over one model, ``--bs`` parked requests at ``--context`` tokens). A variant
is ``base`` (the shipped settings) or a ``+``-joined set of knobs, each applied before the graphs
are captured anew; a setting no knob names keeps its shipped value:

* ``verify_pdl``: a verify block of 41-64 token rows launches its attention with PDL too
  (``TritonBackend.verify_no_pdl_rows`` emptied; the H100 measured it off, 2026-11-27);
  ``verify_pdl_decode`` / ``verify_pdl_merge`` / ``verify_pdl_none``: in that window only the
  decode kernel / only its split merge / neither keeps PDL (``TritonBackend.verify_pdl_in_window``);
* ``prewarm`` / ``no_prewarm``: verify blocks launched with PDL do / skip the prefetch of their
  first cached K/V rows before the wait (``TritonBackend.prewarm_verify``);
* ``verify_wavesN``: every verify block's KV splits aim at N waves of programs
  (``TritonBackend.verify_split_waves``, and no block at one wave for its size:
  ``verify_one_wave_programs`` 0);
* ``decode_wavesN``: one-token decode's KV splits (the plain step's, the draft steps') aim at N
  waves of programs (``TritonBackend.split_waves``);
* ``skip_empty`` / ``no_skip_empty``: decode-kernel programs whose split lies past the context
  do / do not skip their body (``TritonBackend.skip_empty_splits``);
* ``merge_in_kernel``: every decode-kernel launch (plain step, verify, draft steps) merges its KV
  splits in its own last live program instead of a merge launch (``TritonBackend.merge_in_kernel``);
* ``draft_merge_in_kernel``: only the draft's attention (its backend instance: the chain's steps
  and the draft extend) merges its KV splits in its own launch;
* ``min_splitN``: decode-kernel KV splits cover at least N keys (``TritonBackend.decode_min_split``);
* ``max_splitsN``: at most N KV splits a launch (``TritonBackend.max_kv_splits``; the engine's graphs are
  captured for its ``max_model_len``, so at bs 1 they take the cap, 64, at every context);
* ``zero_fixed_out``: fixed-stride extends (the draft extend) start from a zeroed output, a memset launch
  before their kernel (``TritonBackend.zero_fixed_stride_out``; shipped off since 2026-12-06);
* ``short_extendN``: extends of at most N new tokens a request split their prefix at one key block
  (``TritonBackend.short_extend_tokens``);
* ``serial_fc``: an EAGLE-3 head's fc runs after the verify's argmax or acceptance, on the same stream
  (``FusedIteration.project_beside`` off; shipped on: beside them, on a side stream);
* ``serial_qkv``: the side stream computes the fc only; the draft steps' and the draft extend's QKV
  stream the feature's weight columns too (``FusedIteration.qkv_beside`` off);
* ``no_first_product``: only the first draft step's QKV streams them (``FusedIteration.qkv_beside_first`` off);
* ``norm_launch``: the first draft's norm is a launch of its own before its LM head
  (``FusedIteration.norm_in_read`` off; shipped on: ``read_rows`` applies it);
* ``assist_after``: greedy, the lookup assist's launch runs after the chain and replaces the drafts
  (``FusedIteration.assist_beside`` off; shipped on: beside the chain, the picks take its locks);
* ``extend_all_rows``: the draft extend runs the head over all S + 1 rows after the argmax
  (``FusedIteration.extend_rows_beside`` off; shipped on: the draft-token rows' K/V stored beside
  the verify, each request's last accepted row run alone);
* ``head_logits``: greedy, each draft's LM head writes its logits (cuBLAS) and ``argmax_rows`` picks
  (``FusedIteration.head_pick`` off; shipped on: ``HeadPick``, no logits); ``head_after_wait``: ``HeadPick``
  loads its weight rows after the PDL wait (``head_pick.PRELOAD`` off; shipped: before); ``sampled_cublas_head``:
  sampled draft steps take their logits from cuBLAS's head (``FusedIteration.sampled_head_logits`` off; shipped on
  since 2026-12-06: from ``HeadPick``'s launch; that day's runs name the lever ``sampled_head_logits``), timed with
  ``--sampled`` (the sampled cycle and its ratio to the greedy one beside each variant);
* ``cut_launch``: the sampled verify's histogram filter runs its cut-offs in a launch of their own
  (``rejection_kernels.CUT_IN_FILTER`` off; shipped on: in the filter launch beside its other rows);
* ``pick_launch``: sampled, the draft extend's last accepted rows picked in a launch after the acceptance
  (``FusedIteration.sampled_pick_in_accept`` off; shipped on: in the acceptance's launch);
* ``fp8_head``: the EAGLE-3 head's LM head served from its FP8 copy in the draft steps
  (``Eagle3Head.quantize_lm_head``; shipped for SmolLM2's head: the bf16 weight on cuBLAS);
* ``argmax_pt64``: ``argmax_rows`` at 64 values a thread (4 warps over a draft's 8,192 values; shipped: 16);
* ``draft_max_splitsN``: at most N KV splits a launch in the draft's attention only;
* ``merge_fold``: decode-kernel launches of 41-64 token rows over 8-16 KV splits (the bs-8 verify) hand their
  merge to the o_proj GEMV, which folds it (``TritonBackend.fold_merge_rows``; shipped off, 2026-12-07);
  ``fold_rowsN``: from N token rows (to 64); ``fold_splitsN``: over N splits and more;
* ``merge_gridN``: a split merge on PDL takes more heads a program until its grid is at most N% of the SM
  count (``TritonBackend.merge_pdl_grid``, shipped 50%); ``merge_grid_off``: the tile rule's grid alone;
* ``tiles``: the launch configs of ``--tiles-json`` (cache-file entries: key -> config fields)
  written into a scratch ``$UPDRAFT_CACHE``, over the shipped table.

Rounds run every variant in order, so drift over the run hits each alike. Prints per variant
the median of its rounds (cycle, plain step, cycle in plain steps); writes ``cycle_variants.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).parent))

if TYPE_CHECKING:
    from updraft.models.eagle import Eagle3Head

KNOBS = ("verify_pdl", "verify_pdl_decode", "verify_pdl_merge", "verify_pdl_none", "prewarm", "no_prewarm",
         "merge_in_kernel", "draft_merge_in_kernel", "skip_empty", "no_skip_empty", "serial_fc", "serial_qkv",
         "no_first_product", "norm_launch", "assist_after", "extend_all_rows", "head_logits", "head_after_wait", "sampled_cublas_head", "cut_launch", "pick_launch", "fp8_head", "argmax_pt64", "zero_fixed_out", "merge_fold",
         "merge_grid_off", "tiles")
_WINDOW = {"verify_pdl_decode": "decode", "verify_pdl_merge": "merge", "verify_pdl_none": None}
#: Knobs that carry a number: ``verify_wavesN``, ``decode_wavesN``, ``min_splitN``, ``max_splitsN``,
#: ``short_extendN``.
_NUMBERED = ("verify_waves", "decode_waves", "min_split", "max_splits", "short_extend", "draft_max_splits",
             "fold_rows", "fold_splits", "merge_grid")


#: The shipped values of the settings the knobs change, per class (read at the first ``apply``).
_SHIPPED: dict[object, dict[str, object]] = {}


def _waves(knob: str, prefix: str = "verify_waves") -> int:
    """``verify_wavesN`` (``prefix`` N) -> N (> 0), anything else -> 0."""
    digits = knob.removeprefix(prefix)
    return int(digits) if digits != knob and digits.isdigit() and int(digits) > 0 else 0


def parse_variants(spec: str) -> list[tuple[str, frozenset[str]]]:
    """``base,verify_pdl,tiles+verify_pdl`` -> [(name, knobs)], unknown knobs refused."""
    out = []
    for name in (v.strip() for v in spec.split(",") if v.strip()):
        knobs = frozenset() if name == "base" else frozenset(name.split("+"))
        bad = sorted(k for k in knobs if k not in KNOBS and not any(_waves(k, p) for p in _NUMBERED))
        if bad:
            raise ValueError(f"--variants {name!r}: unknown knob(s) {', '.join(bad)}; expected base or "
                             f"'+'-joined of {', '.join(KNOBS)}, {', '.join(p + 'N' for p in _NUMBERED)}")
        out.append((name, knobs))
    if not out:
        raise ValueError("--variants: expected at least one variant")
    return out


def _apply_fused(knobs: frozenset[str]) -> None:
    """The fused iteration's and its kernels' switches: shipped, less those the knobs turn off."""
    from updraft.spec import head_pick, rejection_kernels
    from updraft.spec.fused import FusedIteration

    fused_shipped = _SHIPPED.setdefault(FusedIteration, dict(
        project_beside=FusedIteration.project_beside, qkv_beside=FusedIteration.qkv_beside,
        qkv_beside_first=FusedIteration.qkv_beside_first, norm_in_read=FusedIteration.norm_in_read,
        assist_beside=FusedIteration.assist_beside, extend_rows_beside=FusedIteration.extend_rows_beside,
        head_pick=FusedIteration.head_pick, sampled_head_logits=FusedIteration.sampled_head_logits,
        sampled_pick_in_accept=FusedIteration.sampled_pick_in_accept))
    FusedIteration.project_beside = fused_shipped["project_beside"] and "serial_fc" not in knobs
    FusedIteration.qkv_beside = fused_shipped["qkv_beside"] and "serial_qkv" not in knobs
    FusedIteration.qkv_beside_first = fused_shipped["qkv_beside_first"] and "no_first_product" not in knobs
    FusedIteration.norm_in_read = fused_shipped["norm_in_read"] and "norm_launch" not in knobs
    FusedIteration.assist_beside = fused_shipped["assist_beside"] and "assist_after" not in knobs
    FusedIteration.extend_rows_beside = fused_shipped["extend_rows_beside"] and "extend_all_rows" not in knobs
    FusedIteration.head_pick = fused_shipped["head_pick"] and "head_logits" not in knobs
    FusedIteration.sampled_head_logits = bool(fused_shipped["sampled_head_logits"]) and "sampled_cublas_head" not in knobs
    FusedIteration.sampled_pick_in_accept = bool(fused_shipped["sampled_pick_in_accept"]) and "pick_launch" not in knobs
    preload = bool(_SHIPPED.setdefault(head_pick, {"PRELOAD": head_pick.PRELOAD})["PRELOAD"])
    head_pick.PRELOAD = preload and "head_after_wait" not in knobs
    cut_in = bool(_SHIPPED.setdefault(rejection_kernels, {"CUT_IN_FILTER": rejection_kernels.CUT_IN_FILTER})["CUT_IN_FILTER"])
    rejection_kernels.CUT_IN_FILTER = cut_in and "cut_launch" not in knobs


def _apply_backend(knobs: frozenset[str]) -> None:
    """The Triton backend's shipped values back, then the knobs on top."""
    from updraft.attention.triton_backend import TritonBackend

    shipped = _SHIPPED.setdefault(TritonBackend, dict(
        verify_no_pdl_rows=TritonBackend.verify_no_pdl_rows, verify_pdl_in_window=TritonBackend.verify_pdl_in_window,
        prewarm_verify=TritonBackend.prewarm_verify, merge_in_kernel=TritonBackend.merge_in_kernel,
        verify_split_waves=TritonBackend.verify_split_waves,
        verify_one_wave_programs=TritonBackend.verify_one_wave_programs, split_waves=TritonBackend.split_waves,
        skip_empty_splits=TritonBackend.skip_empty_splits, decode_min_split=TritonBackend.decode_min_split,
        max_kv_splits=TritonBackend.max_kv_splits, short_extend_tokens=TritonBackend.short_extend_tokens,
        zero_fixed_stride_out=TritonBackend.zero_fixed_stride_out, fold_merge_rows=TritonBackend.fold_merge_rows,
        fold_merge_splits=TritonBackend.fold_merge_splits, merge_pdl_grid=TritonBackend.merge_pdl_grid))
    for name, value in shipped.items():
        setattr(TritonBackend, name, value)
    if "verify_pdl" in knobs:
        TritonBackend.verify_no_pdl_rows = (1, 0)  # no row count
    if knobs & _WINDOW.keys():
        TritonBackend.verify_pdl_in_window = frozenset(_WINDOW[k] for k in knobs & _WINDOW.keys()) - {None}
    if "prewarm" in knobs or "no_prewarm" in knobs:
        TritonBackend.prewarm_verify = "prewarm" in knobs
    if "merge_in_kernel" in knobs:
        TritonBackend.merge_in_kernel = True
    if "skip_empty" in knobs or "no_skip_empty" in knobs:
        TritonBackend.skip_empty_splits = "skip_empty" in knobs
    if any(_waves(k, "decode_waves") for k in knobs):
        TritonBackend.split_waves = max(_waves(k, "decode_waves") for k in knobs)
    if any(_waves(k, "min_split") for k in knobs):
        TritonBackend.decode_min_split = max(_waves(k, "min_split") for k in knobs)
    if any(_waves(k, "max_splits") for k in knobs):
        TritonBackend.max_kv_splits = min(n for n in (_waves(k, "max_splits") for k in knobs) if n)
    if any(_waves(k, "short_extend") for k in knobs):
        TritonBackend.short_extend_tokens = max(_waves(k, "short_extend") for k in knobs)
    if "zero_fixed_out" in knobs:
        TritonBackend.zero_fixed_stride_out = True
    if "merge_fold" in knobs:
        TritonBackend.fold_merge_rows = (41, 64)
    if "merge_grid_off" in knobs:
        TritonBackend.merge_pdl_grid = 0.0
    if any(_waves(k, "merge_grid") for k in knobs):
        TritonBackend.merge_pdl_grid = max(_waves(k, "merge_grid") for k in knobs) / 100
    if any(_waves(k, "fold_rows") for k in knobs):
        TritonBackend.fold_merge_rows = (max(_waves(k, "fold_rows") for k in knobs), 64)
    if any(_waves(k, "fold_splits") for k in knobs):
        TritonBackend.fold_merge_splits = (max(_waves(k, "fold_splits") for k in knobs), TritonBackend.max_kv_splits)
    if any(_waves(k) for k in knobs):
        TritonBackend.verify_split_waves = max(_waves(k) for k in knobs)
        TritonBackend.verify_one_wave_programs = 0


def apply(knobs: frozenset[str], tiles: dict[str, dict], cache: Path, draft_backend: object = None,
          head: Eagle3Head | None = None) -> None:
    """Put the knobs in force (and the others back to the shipped state); ``draft_backend``: the
    speculative engine's draft attention backend (``draft_merge_in_kernel`` sets it alone);
    ``head``: its EAGLE-3 head (``fp8_head``)."""
    from updraft.ops import gemv_config
    from updraft.ops.gemv_config import GemvConfig
    from updraft.spec import sampling_kernels

    _apply_fused(knobs)
    _apply_backend(knobs)
    if draft_backend is not None:
        for name in ("merge_in_kernel", "max_kv_splits"):
            vars(draft_backend).pop(name, None)  # back to the class's value
        if "draft_merge_in_kernel" in knobs:
            draft_backend.merge_in_kernel = True  # type: ignore[attr-defined]
        if any(_waves(k, "draft_max_splits") for k in knobs):
            draft_backend.max_kv_splits = min(n for n in (_waves(k, "draft_max_splits") for k in knobs) if n)  # type: ignore[attr-defined]
    if head is not None:
        head.quantize_lm_head("fp8_head" in knobs)
    sampling_kernels.ARGMAX_PER_THREAD = 64 if "argmax_pt64" in knobs else 16
    cache.unlink(missing_ok=True)
    gemv_config.reread()
    if "tiles" in knobs:
        for key, cfg in tiles.items():
            gemv_config.store(key, GemvConfig(**cfg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="base,verify_pdl")
    ap.add_argument("--tiles-json", type=Path, default=None, help="launch configs for the 'tiles' knob")
    ap.add_argument("--sampled", action="store_true",
                    help="also the sampled S = 5 cycle (T 0.7, top-p 0.9) and its ratio to the greedy one (issue 12)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    if any("tiles" in k for _, k in variants) and args.tiles_json is None:
        ap.error("--variants with 'tiles' needs --tiles-json")
    tiles = json.loads(args.tiles_json.read_text()) if args.tiles_json else {}
    os.environ["UPDRAFT_CACHE"] = tempfile.mkdtemp(prefix="cycle_variants_")
    from spec_iteration import fused_ms, set_sampling
    from tune_in_cycle import engines, measure

    from updraft.models.eagle import Eagle3Head
    from updraft.ops import gemv_config

    cache = gemv_config.cache_path()
    plain, spec, preqs, sreqs = engines(args.bs, args.context, args.head)
    drafter = spec.driver.fused.drafter
    draft_backend = drafter.runner.backend if drafter is not None else None
    head = drafter.head if drafter is not None and isinstance(drafter.head, Eagle3Head) else None
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in variants}
    sampled: dict[str, list[float]] = {name: [] for name, _ in variants}

    def sampled_ms() -> float:  # the same requests at T 0.7 / top-p 0.9, then greedy again
        set_sampling(sreqs, True)
        ms = fused_ms(spec, sreqs, args.iters, steps=5, sampled=True)
        set_sampling(sreqs, False)
        spec.driver.admit(sreqs)
        return ms

    for rnd in range(args.rounds):
        for name, knobs in variants:
            apply(knobs, tiles, cache, draft_backend, head)
            cycle, step = measure(plain, spec, preqs, sreqs, args.iters)
            runs[name].append((cycle, step))
            extra = ""
            if args.sampled:
                sampled[name].append(sampled_ms())
                extra = f", sampled {sampled[name][-1]:.4f} ms ({sampled[name][-1] / cycle:.3f} greedy)"
            print(f"round {rnd} {name:>24}: cycle {cycle:.4f} ms, plain {step:.4f} ms, {cycle / step:.3f} steps{extra}",
                  flush=True)
    apply(frozenset(), tiles, cache, draft_backend, head)
    rows = []
    for name, _ in variants:
        cyc = statistics.median(c for c, _ in runs[name])
        step = statistics.median(s for _, s in runs[name])
        row = dict(variant=name, cycle_ms=cyc, plain_ms=step, steps=cyc / step, rounds=runs[name])
        extra = ""
        if args.sampled:  # the ratio as issue 12 reads it: each round's own, then their median
            row |= dict(sampled_ms=statistics.median(sampled[name]), sampled_rounds=sampled[name],
                        sampled_over_greedy=statistics.median(x / c for x, (c, _) in zip(sampled[name], runs[name])))
            extra = f", sampled {row['sampled_ms']:.4f} ms ({row['sampled_over_greedy']:.3f} greedy)"
        rows.append(row)
        print(f"{name:>24}: cycle {cyc:.4f} ms, plain {step:.4f} ms, {cyc / step:.3f} plain steps{extra} (median of "
              f"{args.rounds})")
    import torch
    from attention_bench import meta

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cycle_variants.json").write_text(json.dumps(dict(meta=meta(torch.device("cuda")), bs=args.bs,
                                                                 context=args.context, rows=rows, tiles=tiles), indent=1))


if __name__ == "__main__":
    main()
