"""The triton backend's launch settings under the Triton CPU interpreter: the prefill tile
policy, the verify block's PDL window and L2 prewarm per launch, and the KV-split waves of verify
blocks and one-token decode (host-side choices; each forward still checked against float64)."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.attention.triton_backend import TritonBackend  # noqa: E402
from updraft.batch import ForwardMode  # noqa: E402
from updraft.kit import harness  # noqa: E402
from updraft.kit.cases import AttnCase  # noqa: E402


def test_prefill_tile_policy() -> None:
    """The GPU's extend tiles (``TritonBackend._tile`` with the interpreter's small tiles off):
    64 rows of 64 keys on 4 warps for bf16 prefills, 128 x 128 on 8 warps for heads over 64
    wide from ``wide_prefill_rows`` new rows; short blocks keep their padded width; fp32 and
    heads over 128 wide keep their tiles. Prefix splits span two key blocks, one for blocks of
    at most ``short_extend_tokens`` new tokens (a draft extend)."""
    short = TritonBackend.short_extend_tokens
    assert short == 8

    def tile(dim: int, dtype: str, max_ext: int, bsz: int) -> tuple[int, int, int, int]:
        setup = harness.build_case(AttnCase(ForwardMode.EXTEND, 8, 2, dim, 1, (4,), (4,), dtype, "shuffled"))
        be = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, dim)
        be.interpret = False
        t = be._tile(False, max_ext, bsz)
        assert t.min_split == (1 if max_ext <= short else 2) * t.block_n, (max_ext, t)
        return t.block_rows, t.block_n, t.num_warps, t.num_stages

    wide = TritonBackend.wide_prefill_rows
    assert tile(64, "bfloat16", 4096, 1) == (64, 64, 4, 2)
    assert tile(64, "bfloat16", 1024, 8) == (64, 64, 4, 2)
    assert tile(128, "bfloat16", wide, 1) == (128, 128, 8, 2)
    assert tile(128, "bfloat16", wide // 4, 4) == (128, 128, 8, 2)
    assert tile(128, "bfloat16", wide // 2, 1) == (64, 64, 4, 2)
    assert tile(128, "float16", 6, 1) == (32, 64, 4, 2)  # a 6-token block x 4 head rows, padded
    assert tile(128, "bfloat16", short + 1, 2) == (64, 64, 4, 2)  # past the short blocks: two-block splits
    assert tile(128, "float32", wide, 1) == (32, 32, 4, 2)
    assert tile(256, "bfloat16", wide, 1) == (64, 32, 4, 2)


def _decode_kwarg_seen(monkeypatch: pytest.MonkeyPatch, name: str, mode: ForwardMode, ext: int) -> list[object]:
    """The ``name`` keyword of every ``decode_attention`` call of one forward of a 2-request batch
    (``ext`` tokens each) in ``mode``, whose output must be the reference's."""
    from updraft.attention import triton_backend as tb

    seen: list[object] = []
    real = tb.decode_kernels.decode_attention

    def spy(*args: object, **kwargs: object) -> None:
        seen.append(kwargs[name])
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tb.decode_kernels, "decode_attention", spy)
    _forward_matches_reference(mode, ext)
    return seen


def _forward_matches_reference(mode: ForwardMode, ext: int) -> None:
    """One forward of a 2-request batch (``ext`` tokens each, 19 and 6 cached) in ``mode`` on a fresh
    ``TritonBackend``, checked against the float64 reference."""
    case = AttnCase(mode, 8, 2, 32, 1, (19, 6), (ext, ext), "float32", "shuffled")
    setup = harness.build_case(case)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    assert harness.relative_error(out, harness.reference_output(setup, backend.scale)) < 1e-4


@pytest.mark.parametrize("mode,ext", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4)])
@pytest.mark.parametrize("rows,pdl", [((1, 7), True), ((8, 8), False), ((2, 8), False), ((9, 64), True)])
def test_verify_blocks_in_the_window_launch_their_attention_without_pdl(
    monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int, rows: tuple[int, int], pdl: bool
) -> None:
    """A verify block whose token rows (here 2 requests x 4 = 8) fall in ``verify_no_pdl_rows``
    asks the decode kernel and its merge for no PDL (none named in ``verify_pdl_in_window``);
    one-token decode and other blocks keep it. The output is the reference's either way."""
    monkeypatch.setattr(TritonBackend, "verify_no_pdl_rows", rows)
    monkeypatch.setattr(TritonBackend, "verify_pdl_in_window", frozenset())
    for name in ("pdl", "merge_pdl"):
        assert _decode_kwarg_seen(monkeypatch, name, mode, ext) == [mode == ForwardMode.DECODE or pdl]


def test_shipped_verify_window_keeps_pdl_with_the_merge_grid_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """As shipped, a verify block in the window (41-64 rows) launches its decode kernel and its
    split merge with PDL, the merge's grid capped at ``merge_pdl_grid`` of the SM count (H100: the
    merge on PDL over 144 programs cost 183 us a bs-8 cycle, within 66 it saved 39). The cap goes
    to every merge; ``merge_splits`` applies it only to a launch on PDL
    (``test_merge_grid_cap_applies_only_to_a_launch_on_pdl``)."""
    assert TritonBackend.verify_pdl_in_window == frozenset({"decode", "merge"})
    assert TritonBackend.merge_pdl_grid == 0.5
    monkeypatch.setattr(TritonBackend, "verify_no_pdl_rows", (8, 8))
    assert _decode_kwarg_seen(monkeypatch, "pdl", ForwardMode.TARGET_VERIFY, 4) == [True]
    assert _decode_kwarg_seen(monkeypatch, "merge_pdl", ForwardMode.TARGET_VERIFY, 4) == [True]
    assert _decode_kwarg_seen(monkeypatch, "merge_max_programs", ForwardMode.TARGET_VERIFY, 4) == [1]  # 2 SMs here
    monkeypatch.setattr(TritonBackend, "merge_pdl_grid", 3.0)
    assert _decode_kwarg_seen(monkeypatch, "merge_max_programs", ForwardMode.DECODE, 1) == [6]


@pytest.mark.parametrize("keep", [frozenset(), frozenset({"decode"}), frozenset({"merge"}), frozenset({"decode", "merge"})])
def test_verify_window_keeps_pdl_for_the_named_launches(monkeypatch: pytest.MonkeyPatch, keep: frozenset[str]) -> None:
    """``verify_pdl_in_window`` names which of the pair (the decode kernel, its merge) keeps PDL
    in the window; outside it (one-token decode) both keep it whatever it names."""
    monkeypatch.setattr(TritonBackend, "verify_no_pdl_rows", (8, 8))
    monkeypatch.setattr(TritonBackend, "verify_pdl_in_window", keep)
    for name, kernel in (("pdl", "decode"), ("merge_pdl", "merge")):
        assert _decode_kwarg_seen(monkeypatch, name, ForwardMode.TARGET_VERIFY, 4) == [kernel in keep]
        assert _decode_kwarg_seen(monkeypatch, name, ForwardMode.DECODE, 1) == [True]


@pytest.mark.parametrize("verify,decode", [(True, False), (False, True)])
@pytest.mark.parametrize("mode,ext", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4)])
def test_decode_kernel_prewarm_follows_the_mode(
    monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int, verify: bool, decode: bool
) -> None:
    """``prewarm_verify`` / ``prewarm_decode`` reach the decode kernel of verify blocks and of
    one-token decode respectively (the launcher then applies it only with PDL, which the
    interpreter never has); the output is the reference's either way."""
    monkeypatch.setattr(TritonBackend, "prewarm_verify", verify)
    monkeypatch.setattr(TritonBackend, "prewarm_decode", decode)
    seen = _decode_kwarg_seen(monkeypatch, "prewarm", mode, ext)
    assert seen == [verify if mode == ForwardMode.TARGET_VERIFY else decode]


@pytest.mark.parametrize("bs,stride,want", [(1, 6, 44), (4, 6, 11), (5, 6, 18), (8, 6, 11), (1, 1, 64), (8, 1, 22)])
def test_verify_blocks_of_few_programs_split_for_one_wave(bs: int, stride: int, want: int) -> None:
    """A verify block of at most ``verify_one_wave_programs`` decode-kernel programs a split
    (requests x KV heads; SmolLM2's 3 KV heads here, 132 SMs) aims its splits at one wave of
    programs, a larger one at ``verify_split_waves``; one-token decode at ``split_waves``."""
    from updraft.batch import make_forward_batch
    from updraft.memory.pools import KVPool

    pool = KVPool(1, 64, 16, 3, 64, torch.bfloat16, "cpu")
    table = torch.zeros(bs + 1, 8192, dtype=torch.int32)
    backend = TritonBackend(pool, table, 9, 3, 64)
    backend.interpret, backend.num_sms = False, 132
    assert (TritonBackend.verify_one_wave_programs, TritonBackend.verify_split_waves, TritonBackend.split_waves) == (12, 2, 4)
    mode = ForwardMode.DECODE if stride == 1 else ForwardMode.TARGET_VERIFY
    batch = make_forward_batch(mode, torch.zeros(bs * stride, dtype=torch.long), torch.arange(1, bs + 1),
                               torch.full((bs,), 512, dtype=torch.int32), torch.full((bs,), stride, dtype=torch.int32),
                               table, logits="none", stride=stride)
    plan = backend._plan(batch)
    assert plan.use_decode_kernel and plan.num_kv_splits == want


def test_extend_merge_takes_the_grid_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extend kernel's split merge (draft extends, prefixed prefills) takes the same cap as the
    decode kernel's (``merge_splits`` applies it on PDL only); the output stays the reference's."""
    from updraft.attention import triton_backend as tb

    seen: list[object] = []
    real = tb.extend_kernels.extend_attention

    def spy(*args: object, **kwargs: object) -> None:
        seen.append(args[-1])
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tb.extend_kernels, "extend_attention", spy)
    monkeypatch.setattr(TritonBackend, "merge_pdl_grid", 2.0)
    _forward_matches_reference(ForwardMode.EXTEND, 3)
    assert seen == [4]  # 2 SMs in the interpreter
