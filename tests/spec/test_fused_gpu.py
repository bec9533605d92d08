"""The fused EAGLE-3 iteration under real CUDA graphs: its head's fc on a side stream
(``FusedIteration.project_beside``, forked after the verify and joined before the rest of the
draft extend) drafts exactly what the head projecting the target's layers itself drafts,
iteration by iteration, and the outputs equal plain greedy (fp32). With ``qkv_beside`` (the fork
before the verify's LM head, the mid layer's QKV product of the feature beside it, the extend's
QKV streaming the embedding's columns only) the drafts are the same in fp32 and the features
equal up to the float32 sums' order. With ``assist_beside`` (greedy: the lookup on a side
stream of its own from the body's start, joined before the first pick, the picks taking its
locks) the verify blocks and features are bit for bit those of the lookup launch after the chain,
and with ``norm_in_read`` (the first draft's norm applied by ``read_rows``) the same drafts in
fp32. With ``extend_rows_beside`` (the draft extend's draft-token rows' K/V stored beside the
verify, each request's last accepted row run alone) the same drafts in fp32, and with ``head_pick``
(greedy: each draft's LM head and argmax without the logits) too; sampled, that row picked in the
acceptance's launch (``sampled_pick_in_accept``) in fp32, and in bf16 the filter's cut-offs in its
launch (``rejection_kernels.CUT_IN_FILTER``) sample the same tokens. Only a GPU shows the
fork and the join as captured graph edges; ``test_fused_beside.py``
runs the same bodies in place on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec.fused import FusedIteration
from updraft.testing import repeating_prompts, write_eagle3_head

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

Seen = list[tuple[torch.Tensor, torch.Tensor]]


def _params(sampled: bool) -> SamplingParams:
    return (SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=24, ignore_eos=True) if sampled
            else SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))


def _runs(target: Path, head: Path, dtype: str, sampled: bool, monkeypatch: pytest.MonkeyPatch, knob: str,
          owner: object = FusedIteration) -> list[tuple[list[list[int]], Seen]]:
    """Two generations, ``<owner>.<knob>`` on then off: (outputs, per launch the verify block's
    ids and the rows' stored draft features)."""
    ps = repeating_prompts(3, seed=21)
    real_launch = FusedIteration.launch
    seen: Seen = []

    def spy(self: FusedIteration, reqs, num_steps: int, sampled_: bool):  # noqa: ANN001, ANN202
        inf = real_launch(self, reqs, num_steps, sampled_)
        torch.cuda.synchronize()  # the replay's buffers hold this iteration's values until the next launch
        g = self.graphs[(num_steps, sampled_, self.bucket(len(reqs)))]
        assert self.drafter is not None
        seen.append((g.ids.clone(), self.drafter.next_hidden[[r.row for r in reqs]].clone()))
        return inf

    monkeypatch.setattr(FusedIteration, "launch", spy)
    runs = []
    for on in (True, False):
        monkeypatch.setattr(owner, knob, on)
        seen.clear()
        llm = LLM(str(target), device="cuda", dtype=dtype, progress=False, cuda_graph_max_bs=4, max_total_tokens=16384,
                  speculative_config={"method": "eagle3", "draft_model": str(head), "num_steps": 3, "adaptive": False})
        assert llm.engine.driver is not None, llm.engine.graph_log
        outs = [o.outputs[0].token_ids for o in llm.generate(ps, _params(sampled))]
        runs.append((outs, list(seen)))
        del llm
    return runs


def _agree_fp32(runs: list[tuple[list[list[int]], Seen]], target: Path, sampled: bool) -> None:
    """Two fp32 runs on the small-M kernels agree: the same outputs and drafts launch by launch,
    the stored features within float32 rounding (sums in another order), greedy's output plain
    decoding's."""
    (outs_a, seen_a), (outs_b, seen_b) = runs
    assert outs_a == outs_b and len(seen_a) == len(seen_b) > 5
    for i, (a, b) in enumerate(zip(seen_a, seen_b)):
        assert torch.equal(a[0], b[0]), f"launch {i}: drafts"
        assert ((a[1] - b[1]).abs().max() / b[1].abs().max()).item() <= 1e-5, f"launch {i}: features"
    if not sampled:
        assert outs_a == _plain(target, "float32", sampled)


def _plain(target: Path, dtype: str, sampled: bool) -> list[list[int]]:
    plain = LLM(str(target), device="cuda", dtype=dtype, progress=False, disable_cuda_graph=True, max_total_tokens=16384)
    return [o.outputs[0].token_ids for o in plain.generate(repeating_prompts(3, seed=21), _params(sampled))]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("sampled", [False, True])
def test_fc_on_a_side_stream_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, dtype: str, sampled: bool) -> None:  # noqa: ANN001
    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    monkeypatch.setattr(FusedIteration, "qkv_beside", False)  # the fc alone: the same kernels, bit for bit
    (outs_a, seen_a), (outs_b, seen_b) = _runs(target, head, dtype, sampled, monkeypatch, "project_beside")
    assert outs_a == outs_b and len(seen_a) == len(seen_b) > 5
    for i, (a, b) in enumerate(zip(seen_a, seen_b)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"launch {i}"
    if dtype == "float32" and not sampled:
        assert outs_a == _plain(target, dtype, sampled)


@pytest.mark.parametrize("sampled", [False, True])
def test_qkv_product_beside_the_lm_head_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, sampled: bool) -> None:  # noqa: ANN001
    """fp32 on the small-M kernels (``ops.use_backend("triton")``; "auto" keeps fp32 on torch's
    GEMMs, where there is no split): the same drafts, launch by launch, the stored features within
    float32 rounding, the same outputs, greedy's equal to plain decoding."""
    from updraft import ops
    from updraft.models import fused as fused_layers

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = fused_layers.eagle3_feature_qkv
    products: list[int] = []
    monkeypatch.setattr(fused_layers, "eagle3_feature_qkv", lambda *a: products.append(1) or real(*a))
    with ops.use_backend("triton"):
        runs = _runs(target, head, "float32", sampled, monkeypatch, "qkv_beside")
    assert products, "the split never ran"
    _agree_fp32(runs, target, sampled)


def test_qkv_product_beside_bf16(tiny_checkpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """bf16 on the "auto" kernels (the production path): the split runs, and the first launch's
    stored features (the same inputs either way) agree to bf16 rounding (later launches may
    follow other drafts: a bf16 draft can flip where its logits tie within a rounding)."""
    from updraft.models import fused as fused_layers

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = fused_layers.eagle3_feature_qkv
    products: list[int] = []
    monkeypatch.setattr(fused_layers, "eagle3_feature_qkv", lambda *a: products.append(1) or real(*a))
    (outs_a, seen_a), (outs_b, seen_b) = _runs(target, head, "bfloat16", False, monkeypatch, "qkv_beside")
    assert products, "the split never ran"
    assert [len(o) for o in outs_a] == [len(o) for o in outs_b] == [24] * 3
    a, b = seen_a[0][1].float(), seen_b[0][1].float()
    assert ((a - b).abs().max() / b.abs().max()).item() <= 2e-2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lookup_locks_beside_the_chain_draft_the_same(tiny_checkpoint, tmp_path, monkeypatch, dtype: str) -> None:  # noqa: ANN001
    """Greedy with the lookup assist (the default ``ngram_assist``; the repeating prompts match):
    the lookup beside the chain against the lookup launch after it, bit for bit launch by launch,
    in fp32 and bf16; fp32 equal to plain decoding."""
    from updraft.spec.ngram_device import DeviceNgram

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = DeviceNgram.locks
    locked: list[bool] = []

    def spy(self, rows, lens, s, min_match):  # noqa: ANN001, ANN202
        out = real(self, rows, lens, s, min_match)
        locked.append(True)
        return out

    monkeypatch.setattr(DeviceNgram, "locks", spy)
    (outs_a, seen_a), (outs_b, seen_b) = _runs(target, head, dtype, False, monkeypatch, "assist_beside")
    assert locked, "the locks were never captured"
    assert outs_a == outs_b and len(seen_a) == len(seen_b) > 5
    for i, (a, b) in enumerate(zip(seen_a, seen_b)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"launch {i}"
    if dtype == "float32":
        assert outs_a == _plain(target, dtype, False)


@pytest.mark.parametrize("sampled", [False, True])
def test_first_norm_in_read_rows_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, sampled: bool) -> None:  # noqa: ANN001
    """fp32 on the small-M kernels: the first draft's norm applied by ``read_rows`` against its own
    launch, the same drafts launch by launch, the features within float32 rounding (the norm's
    sum in another order), the same outputs, greedy's equal to plain decoding."""
    from updraft import ops

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    with ops.use_backend("triton"):
        _agree_fp32(_runs(target, head, "float32", sampled, monkeypatch, "norm_in_read"), target, sampled)


@pytest.mark.parametrize("sampled", [False, True])
def test_extend_rows_beside_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, sampled: bool) -> None:  # noqa: ANN001
    """fp32 on the small-M kernels: the draft extend's draft-token rows storing their K/V on the
    side stream beside the verify and each request's last accepted row run alone after the
    argmax or acceptance, against the extend over every row: the same drafts launch by launch,
    the features within float32 rounding, the same outputs, greedy's equal to plain decoding."""
    from updraft import ops
    from updraft.models.eagle import Eagle3Head

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = Eagle3Head.store_kv
    stored: list[int] = []
    monkeypatch.setattr(Eagle3Head, "store_kv", lambda self, *a: stored.append(1) or real(self, *a))
    with ops.use_backend("triton"):
        runs = _runs(target, head, "float32", sampled, monkeypatch, "extend_rows_beside")
    assert stored, "the rows' K/V were never stored beside"
    _agree_fp32(runs, target, sampled)


def test_extend_rows_beside_bf16(tiny_checkpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """bf16 on the "auto" kernels (the production path): the rows' K/V are stored beside, every
    output runs to its length, and the first launch's stored features agree to bf16 rounding."""
    from updraft.models.eagle import Eagle3Head

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = Eagle3Head.store_kv
    stored: list[int] = []
    monkeypatch.setattr(Eagle3Head, "store_kv", lambda self, *a: stored.append(1) or real(self, *a))
    (outs_a, seen_a), (outs_b, seen_b) = _runs(target, head, "bfloat16", False, monkeypatch, "extend_rows_beside")
    assert stored, "the rows' K/V were never stored beside"
    assert [len(o) for o in outs_a] == [len(o) for o in outs_b] == [24] * 3
    a, b = seen_a[0][1].float(), seen_b[0][1].float()
    assert ((a - b).abs().max() / b.abs().max()).item() <= 2e-2


@pytest.mark.parametrize("sampled", [False, True])
def test_head_pick_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, sampled: bool) -> None:  # noqa: ANN001
    """fp32 on the small-M kernels: each draft's LM head and argmax in ``HeadPick`` (greedy, no
    logits; sampled, with ``sampled_head_logits``, the logits from its launch) against cuBLAS's head and ``argmax_rows`` /
    ``topk_rows``: the same drafts launch by launch, the features within float32 rounding, the
    same outputs, greedy's equal to plain decoding."""
    from updraft import ops
    from updraft.spec import drafter as drafter_mod
    from updraft.spec import head_pick

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real, real_logits = drafter_mod.HeadPick.__call__, head_pick.head_logits
    picks: list[int] = []
    monkeypatch.setattr(drafter_mod.HeadPick, "__call__", lambda self, *a: picks.append(1) or real(self, *a))
    monkeypatch.setattr(head_pick, "head_logits", lambda h: picks.append(1) or real_logits(h))
    monkeypatch.setattr(FusedIteration, "sampled_head_logits", True)
    with ops.use_backend("triton"):
        runs = _runs(target, head, "float32", sampled, monkeypatch, "head_pick")
    assert picks, "the picks never read the LM head's rows"
    _agree_fp32(runs, target, sampled)


def test_head_pick_bf16(tiny_checkpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """bf16 on the "auto" kernels (the production path): the picks read the LM head's rows and
    every output runs to its length."""
    from updraft.spec import drafter as drafter_mod

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = drafter_mod.HeadPick.__call__
    picks: list[int] = []
    monkeypatch.setattr(drafter_mod.HeadPick, "__call__", lambda self, *a: picks.append(1) or real(self, *a))
    (outs_a, _), (outs_b, _) = _runs(target, head, "bfloat16", False, monkeypatch, "head_pick")
    assert picks and [len(o) for o in outs_a] == [len(o) for o in outs_b] == [24] * 3


def test_sampled_pick_in_accept_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """fp32, sampled: the draft extend's last accepted rows picked in the acceptance's launch
    (``sampled_pick_in_accept``, the side stream joined before it) against ``pick_last_rows`` after
    it: the same drafts launch by launch, the features within float32 rounding, the same outputs."""
    from updraft import ops
    from updraft.spec import last_row

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    real = last_row.LastRowPick.of
    picks: list[int] = []
    monkeypatch.setattr(last_row.LastRowPick, "of", lambda src, dst: picks.append(1) or real(src, dst))
    with ops.use_backend("triton"):
        runs = _runs(target, head, "float32", True, monkeypatch, "sampled_pick_in_accept")
    assert picks, "no pick was made"
    _agree_fp32(runs, target, True)


def test_cut_in_filter_bf16_samples_the_same(tiny_checkpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """bf16, sampled (the histogram filter's path): its cut-offs in the filter's launch
    (``rejection_kernels.CUT_IN_FILTER``) against their own launch give the same statistics bit for
    bit, so the same drafts launch by launch and the same outputs (one seed, the same uniforms)."""
    from updraft.spec import rejection_kernels

    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    (outs_a, seen_a), (outs_b, seen_b) = _runs(target, head, "bfloat16", True, monkeypatch, "CUT_IN_FILTER",
                                               owner=rejection_kernels)
    assert outs_a == outs_b and len(seen_a) == len(seen_b) > 5
    assert all(torch.equal(a[0], b[0]) for a, b in zip(seen_a, seen_b))
