"""``benchmarks/cycle_variants.py`` (GPU script): its variant names and knobs, on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_variants_parse_into_knobs(load_benchmark) -> None:
    cv = load_benchmark("cycle_variants")
    assert cv.parse_variants("base, verify_pdl,tiles+verify_pdl") == [
        ("base", frozenset()), ("verify_pdl", frozenset({"verify_pdl"})),
        ("tiles+verify_pdl", frozenset({"tiles", "verify_pdl"}))]
    assert cv.parse_variants("verify_waves1+no_prewarm") == [
        ("verify_waves1+no_prewarm", frozenset({"verify_waves1", "no_prewarm"}))]
    assert cv.parse_variants("decode_waves2") == [("decode_waves2", frozenset({"decode_waves2"}))]
    assert cv.parse_variants("draft_merge_in_kernel") == [("draft_merge_in_kernel", frozenset({"draft_merge_in_kernel"}))]
    assert cv.parse_variants("min_split256+merge_in_kernel") == [
        ("min_split256+merge_in_kernel", frozenset({"min_split256", "merge_in_kernel"}))]
    for bad in ("verify_waves0", "verify_waves", "verify_wavesx", "decode_waves0", "min_split", "min_split0", "max_splits0"):
        with pytest.raises(ValueError, match="unknown knob"):
            cv.parse_variants(bad)
    with pytest.raises(ValueError, match="unknown knob"):
        cv.parse_variants("base,pdl")
    with pytest.raises(ValueError, match="at least one"):
        cv.parse_variants(" , ")


def test_knobs_put_in_force_and_back(load_benchmark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tiles`` writes the given entries into the scratch cache the lookups read; a knob changes
    its setting only, the others keep their shipped values; ``base`` leaves an empty cache and
    every setting as shipped."""
    import torch

    from updraft.attention.triton_backend import TritonBackend
    from updraft.ops import gemv_config

    cv = load_benchmark("cycle_variants")
    monkeypatch.setenv("UPDRAFT_CACHE", str(tmp_path))
    monkeypatch.setattr(TritonBackend, "verify_no_pdl_rows", TritonBackend.verify_no_pdl_rows)
    monkeypatch.setattr(TritonBackend, "verify_pdl_in_window", TritonBackend.verify_pdl_in_window)
    monkeypatch.setattr(TritonBackend, "prewarm_verify", TritonBackend.prewarm_verify)
    monkeypatch.setattr(TritonBackend, "merge_in_kernel", TritonBackend.merge_in_kernel)
    monkeypatch.setattr(TritonBackend, "verify_split_waves", TritonBackend.verify_split_waves)
    monkeypatch.setattr(TritonBackend, "verify_one_wave_programs", TritonBackend.verify_one_wave_programs)
    monkeypatch.setattr(TritonBackend, "split_waves", TritonBackend.split_waves)
    monkeypatch.setattr(TritonBackend, "skip_empty_splits", TritonBackend.skip_empty_splits)
    monkeypatch.setattr(TritonBackend, "decode_min_split", TritonBackend.decode_min_split)
    monkeypatch.setattr(TritonBackend, "max_kv_splits", TritonBackend.max_kv_splits)
    monkeypatch.setattr(TritonBackend, "merge_pdl_grid", TritonBackend.merge_pdl_grid)
    min_split, max_splits = TritonBackend.decode_min_split, TritonBackend.max_kv_splits
    decode_waves, skip = TritonBackend.split_waves, TritonBackend.skip_empty_splits
    one_wave = TritonBackend.verify_one_wave_programs
    prewarm = TritonBackend.prewarm_verify
    window = TritonBackend.verify_pdl_in_window
    waves = TritonBackend.verify_split_waves
    cache = gemv_config.cache_path()
    key = gemv_config.key("linear", 576, 576, 64, torch.bfloat16, torch.device("cpu"))
    tiles = {key: dict(block_n=16, block_k=256, dot=True, num_warps=4, num_stages=3, m_tile=32)}
    cv.apply(frozenset({"tiles", "verify_pdl"}), tiles, cache)
    assert TritonBackend.verify_no_pdl_rows == (1, 0) and TritonBackend.verify_pdl_in_window == window
    cv.apply(frozenset({"verify_pdl_merge"}), tiles, cache)
    assert TritonBackend.verify_no_pdl_rows == (41, 64) and TritonBackend.verify_pdl_in_window == {"merge"}
    assert TritonBackend.prewarm_verify == prewarm and not TritonBackend.merge_in_kernel
    cv.apply(frozenset({"verify_pdl", "no_prewarm", "merge_in_kernel", "verify_waves5"}), tiles, cache)
    assert not TritonBackend.prewarm_verify and TritonBackend.merge_in_kernel
    assert TritonBackend.verify_split_waves == 5 and TritonBackend.verify_one_wave_programs == 0
    cv.apply(frozenset({"decode_waves7", "no_skip_empty", "min_split192", "max_splits16"}), tiles, cache)
    assert TritonBackend.split_waves == 7 and not TritonBackend.skip_empty_splits
    assert TritonBackend.decode_min_split == 192 and TritonBackend.max_kv_splits == 16
    cv.apply(frozenset({"prewarm", "verify_pdl_none"}), tiles, cache)
    assert TritonBackend.split_waves == decode_waves and TritonBackend.skip_empty_splits == skip
    assert TritonBackend.decode_min_split == min_split and TritonBackend.max_kv_splits == max_splits
    assert TritonBackend.prewarm_verify and TritonBackend.verify_pdl_in_window == frozenset()
    assert TritonBackend.verify_split_waves == waves and not TritonBackend.merge_in_kernel
    cv.apply(frozenset({"merge_grid_off"}), tiles, cache)
    assert TritonBackend.merge_pdl_grid == 0.0
    cv.apply(frozenset({"merge_grid100"}), tiles, cache)
    assert TritonBackend.merge_pdl_grid == 1.0
    cv.apply(frozenset({"tiles", "verify_pdl"}), tiles, cache)
    assert gemv_config.lookup("linear", 576, 576, 48, torch.bfloat16, torch.device("cpu")) == \
        gemv_config.GemvConfig(16, 256, True, 4, 3, 32)
    assert json.loads(cache.read_text()) == tiles
    cv.apply(frozenset(), tiles, cache)
    assert TritonBackend.verify_no_pdl_rows == (41, 64) and not cache.exists()
    assert TritonBackend.verify_pdl_in_window == window
    assert TritonBackend.prewarm_verify == prewarm and not TritonBackend.merge_in_kernel
    assert TritonBackend.verify_split_waves == waves and TritonBackend.verify_one_wave_programs == one_wave
    assert TritonBackend.merge_pdl_grid == 0.5
    assert gemv_config.lookup("linear", 576, 576, 48, torch.bfloat16, torch.device("cpu")).m_tile == 0
    monkeypatch.undo()  # the user cache as it was, and the in-process tables read afresh
    gemv_config.reread()


def test_draft_merge_knob_sets_the_draft_backend_alone(load_benchmark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``draft_merge_in_kernel`` shadows the class setting on the draft's backend instance only;
    any other variant puts the instance back on the class's value."""
    from updraft.attention.triton_backend import TritonBackend

    cv = load_benchmark("cycle_variants")
    monkeypatch.setenv("UPDRAFT_CACHE", str(tmp_path))
    monkeypatch.setattr(TritonBackend, "merge_in_kernel", TritonBackend.merge_in_kernel)

    class Draft:  # stands for the draft runner's TritonBackend instance
        merge_in_kernel = TritonBackend.merge_in_kernel

    draft, cache = Draft(), tmp_path / "cache.json"
    cv.apply(frozenset({"draft_merge_in_kernel"}), {}, cache, draft)
    assert draft.merge_in_kernel and not TritonBackend.merge_in_kernel
    cv.apply(frozenset(), {}, cache, draft)
    assert not draft.merge_in_kernel and "merge_in_kernel" not in vars(draft)
    cv.apply(frozenset({"merge_in_kernel"}), {}, cache, draft)
    assert TritonBackend.merge_in_kernel and "merge_in_kernel" not in vars(draft)
    cv.apply(frozenset(), {}, cache, None)
    assert not TritonBackend.merge_in_kernel
