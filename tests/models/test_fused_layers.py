"""The small-M fused decoder layer (``updraft.models.fused``) end to end, under the interpreter.

A tiny model's greedy tokens on the fused path (ops forced to "triton": 5 launches per layer,
the final norm in the LM head) equal the unfused torch path's in fp32, for a 10-token prefill and
decode steps, with the torch_native and triton attention backends and page sizes 1 and 4;
TARGET_VERIFY blocks too. Qwen2 (QKV bias) takes the whole fused path; Qwen3 (q/k norm) the
documented fallback (norm-prologue QKV GEMM, then the unfused q/k norm, rotary and store). bf16
logits stay within bf16 tolerance of the unfused path (summation orders differ).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from updraft import ops
from updraft.batch import ForwardBatch, ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.ops import gemv  # noqa: E402

PROMPT = [5, 77, 13, 200, 9, 41, 150, 3, 88, 120]


class Calls:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.weights: dict[str, list[tuple[int, ...]]] = {}  # each launch's weight shape


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Counts the fused kernels' launches (which path actually ran)."""
    c = Calls()
    for name in ("linear", "linear_add_norm", "qkv_rope_store", "gate_up_silu"):
        real = getattr(gemv, name)

        def counted(*a, _real=real, _name=name, **kw):  # noqa: ANN002, ANN003, ANN202
            c.counts[_name] = c.counts.get(_name, 0) + 1
            c.weights.setdefault(_name, []).append(tuple(a[1].shape))
            return _real(*a, **kw)

        monkeypatch.setattr(gemv, name, counted)
    yield c


def generate(model: torch.nn.Module, backend: str, page: int, steps: int, verify: bool = False,
             ) -> tuple[list[int], list[torch.Tensor]]:
    """Prefill PROMPT, then ``steps`` greedy decode steps (or, with ``verify``, one 4-token
    TARGET_VERIFY block of the tokens so far): (tokens, logits of every forward)."""
    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 96 // page, page)
    runner = ModelRunner(model, pool, 96 // page, page, backend)
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 40)
    out = runner.forward(runner.make_batch(ForwardMode.EXTEND, PROMPT, [row], [len(PROMPT)], [len(PROMPT)]))
    logits = [out.logits]
    toks = [int(out.logits[-1].argmax())]
    n = len(PROMPT)
    for _ in range(steps):
        n += 1
        out = runner.forward(runner.make_batch(ForwardMode.DECODE, [toks[-1]], [row], [n], [1], stride=1))
        logits.append(out.logits)
        toks.append(int(out.logits[-1].argmax()))
        if out.argmax is not None:
            assert torch.equal(out.argmax, out.logits.argmax(-1))
    if verify:
        block = toks[-4:]
        out = runner.forward(runner.make_batch(ForwardMode.TARGET_VERIFY, block, [row], [n + 3], [4], stride=4,
                                               logits="all"))
        logits.append(out.logits)
        toks += out.logits.argmax(-1).tolist()
    return toks, logits


def load(tiny_checkpoint, arch: str, dtype: torch.dtype, **config: object) -> torch.nn.Module:  # noqa: ANN001
    return load_checkpoint(tiny_checkpoint(arch, **config), dtype=dtype, device="cpu", progress=False).model


@pytest.mark.parametrize("arch,backend,page", [("llama", "torch_native", 1), ("llama", "triton", 4),
                                               ("qwen2", "torch_native", 4), ("qwen3", "triton", 1)])
def test_greedy_tokens_fused_equal_unfused_fp32(tiny_checkpoint, calls: Calls, arch: str, backend: str,
                                                page: int) -> None:
    model = load(tiny_checkpoint, arch, torch.float32)
    with ops.use_backend("torch"):
        ref_toks, ref_logits = generate(model, "torch_native", page, steps=4, verify=True)
    assert not calls.counts, "the torch path must not touch the small-M kernels"
    with ops.use_backend("triton"):
        toks, logits = generate(model, backend, page, steps=4, verify=True)
    layers = model.config.num_layers
    if arch == "qwen3":  # q/k norm: the QKV GEMM keeps its prologue, the rest is unfused
        assert "qkv_rope_store" not in calls.counts
    else:  # prefill (10 rows), 4 decode steps, 1 verify block: every forward fused
        assert calls.counts["qkv_rope_store"] == 6 * layers
    assert calls.counts["gate_up_silu"] == 6 * layers
    # o_proj adds the residual and prepares the post-attention norm in its epilogue, and so does
    # every down projection but the last (for the next layer's input norm); the last down and the
    # LM head once per forward; qwen3 adds its QKV GEMM
    assert calls.counts["linear_add_norm"] == 6 * (2 * layers - 1)
    assert calls.counts["linear"] == 6 * (2 + (layers if arch == "qwen3" else 0))
    assert toks == ref_toks
    for a, b in zip(logits, ref_logits):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-4


def verify_batch8(model: torch.nn.Module, backend: str, splits: int | None = None) -> torch.Tensor:
    """Eight requests of mixed lengths prefilled, then one 6-token TARGET_VERIFY block each (48
    token rows, a bs-8 verify): the block's logits [48, V]. ``splits``: the triton backend's KV
    splits forced."""
    pool = ReqToTokenPool(9, 40, "cpu")
    alloc = PagedAllocator(pool, 9 * 40, 1)
    runner = ModelRunner(model, pool, 9 * 40, 1, backend)
    if splits is not None:
        runner.backend.kv_splits_override = splits  # type: ignore[attr-defined]
    rows, lens = [], [3 + 2 * i for i in range(8)]
    for i, n in enumerate(lens):
        row = pool.alloc()
        assert row is not None and alloc.ensure(row, n + 6)
        prompt = [(PROMPT[j % len(PROMPT)] * (i + 3) + j) % 256 for j in range(n)]
        runner.forward(runner.make_batch(ForwardMode.EXTEND, prompt, [row], [n], [n]))
        rows.append(row)
    block = [(7 * i + j) % 256 for i in range(8) for j in range(6)]
    out = runner.forward(runner.make_batch(ForwardMode.TARGET_VERIFY, block, rows, [n + 6 for n in lens], [6] * 8,
                                           stride=6, logits="all"))
    return out.logits


@pytest.mark.parametrize("backend", ["triton"])
def test_bs8_verify_block_fused_equals_unfused_fp32(tiny_checkpoint, calls: Calls, backend: str) -> None:
    """48 token rows (past the 16-row dot tile: the 64-row bucket) take the fused layer and match
    the unfused path in fp32."""
    model = load(tiny_checkpoint, "llama", torch.float32)
    with ops.use_backend("torch"):
        ref = verify_batch8(model, "torch_native")
    with ops.use_backend("triton"):
        got = verify_batch8(model, backend)
    assert got.shape == ref.shape == (48, ref.shape[1])
    assert calls.counts["qkv_rope_store"] == 9 * model.config.num_layers  # 8 prefills and the verify
    assert ((got - ref).abs().max() / ref.abs().max()).item() <= 1e-4


def test_bs8_verify_folds_the_split_merge_into_o_proj(tiny_checkpoint, calls: Calls,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With the backend's window open (shipped closed), over several KV splits the 48-row
    verify's decode kernel hands its partials to the layer, whose o_proj launch merges them
    (``gemv_merge``): one launch a layer fewer, the logits the unfused path's in fp32; with the
    window closed, the merge launch and linear_add_norm."""
    from updraft.attention.triton_backend import TritonBackend
    from updraft.attention.triton_kernels import decode
    from updraft.ops import gemv_merge

    merges = {"fold": 0, "launch": 0}
    fold, launch = gemv_merge.merge_linear_add_norm, decode.merge_splits

    def counted_fold(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        merges["fold"] += 1
        return fold(*a, **kw)

    def counted_launch(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        merges["launch"] += 1
        return launch(*a, **kw)

    monkeypatch.setattr(gemv_merge, "merge_linear_add_norm", counted_fold)
    monkeypatch.setattr(decode, "merge_splits", counted_launch)
    monkeypatch.setattr(TritonBackend, "fold_merge_splits", (4, 16))
    monkeypatch.setattr(TritonBackend, "fold_merge_rows", (41, 64))
    model = load(tiny_checkpoint, "llama", torch.float32)
    layers = model.config.num_layers
    with ops.use_backend("torch"):
        ref = verify_batch8(model, "torch_native")
    with ops.use_backend("triton"):
        got = verify_batch8(model, "triton", splits=4)
    assert merges["fold"] == layers and calls.counts["linear_add_norm"] == 8 * (2 * layers - 1) + layers - 1
    assert ((got - ref).abs().max() / ref.abs().max()).item() <= 1e-4
    monkeypatch.setattr(TritonBackend, "fold_merge_rows", (1, 0))
    merges["fold"] = merges["launch"] = 0
    with ops.use_backend("triton"):
        off = verify_batch8(model, "triton", splits=4)
    assert merges["fold"] == 0 and merges["launch"] == layers
    assert ((off - ref).abs().max() / ref.abs().max()).item() <= 1e-4


def test_bf16_fused_logits_within_tolerance(tiny_checkpoint) -> None:
    model = load(tiny_checkpoint, "llama", torch.bfloat16)
    with ops.use_backend("torch"):
        _, ref = generate(model, "torch_native", 1, steps=2)
    with ops.use_backend("triton"):
        _, got = generate(model, "torch_native", 1, steps=2)
    for a, b in zip(got, ref):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 3e-2


def test_switch_turns_the_fused_path_off(tiny_checkpoint, calls: Calls) -> None:
    model = load(tiny_checkpoint, "llama", torch.float32)
    x = torch.zeros(3, 8)
    with ops.use_backend("triton"), ops.use_fused_layers(False):
        assert not ops.small_m(x)
        generate(model, "torch_native", 1, steps=1)
    assert not calls.counts
    with ops.use_backend("triton"):
        assert ops.small_m(torch.zeros(64, 8)) and not ops.small_m(torch.zeros(65, 8)) and not ops.small_m(x.double())
    with ops.use_backend("auto"):
        assert not ops.small_m(x), "auto: CUDA only"


def test_auto_policy_where_the_h100_measured_a_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Production ("auto"): bf16/fp16 CUDA rows; up to 64 rows over narrow activations (SmolLM2's
    576), a verify block too; over wide ones (the 8B shape's 4096) up to 32 rows and only where every GEMM of
    the layer has a config tuned for this GPU (or one of its family) at that M bucket (the heuristic's
    launches lost there);
    on by default, off with ``use_fused_layers(False)`` (``UPDRAFT_FUSED_LAYERS=0``). Deciding
    needs no GPU."""
    from updraft.ops import gemv_config

    cuda, bf16 = torch.device("cuda"), torch.bfloat16
    monkeypatch.setattr(gemv_config, "_table", dict)  # no user cache: the shipped table only
    monkeypatch.setattr(gemv_config, "_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(gemv_config, "family", lambda device: "sm90x132")  # as on the GPU, not the CPU's ""
    gemv_config.is_tuned.cache_clear()
    llama8b = (("qkv", 6144, 4096, 128), ("linear", 4096, 4096, 0), ("gate_up", 14336, 4096, 0),
               ("linear", 4096, 14336, 0))
    qwen3_8b = (("linear", 6144, 4096, 0), ("linear", 4096, 4096, 0), ("gate_up", 12288, 4096, 0),
                ("linear", 4096, 12288, 0))  # shipped for one row (decode_kernels.py --hf-config ... --tune)
    llama2_7b = (("qkv", 12288, 4096, 128), ("linear", 4096, 4096, 0), ("gate_up", 11008, 4096, 0),
                 ("linear", 4096, 11008, 0))
    p = ops.FusedPolicy()
    assert all(p.takes(r, 576, cuda) for r in range(1, 65)) and not p.takes(65, 576, cuda)
    assert not ops.FusedPolicy(max_rows=16).takes(17, 576, cuda)
    v = p.for_verify()
    assert v.takes(64, 576, cuda) and not v.takes(65, 576, cuda) and v.for_verify() == v
    v40 = ops.FusedPolicy(verify_max_rows=40).for_verify()
    assert v40.takes(40, 576, cuda) and not v40.takes(41, 576, cuda) and p.takes(41, 576, cuda)
    assert v.takes(32, 4096, cuda, bf16, llama8b) and not v.takes(33, 4096, cuda, bf16, llama8b)
    assert ops.FusedPolicy(max_rows=16).for_verify().max_rows == 16
    assert all(p.takes(r, 4096, cuda, bf16, llama8b) for r in range(1, 9))  # buckets 1, 2, 4, 8 shipped
    # 9-32 rows: the H100 has no entries of its own; it takes the H200's by family (2026-12-02)
    assert all(p.takes(r, 4096, cuda, bf16, llama8b) for r in (9, 16, 17, 32))
    assert not p.takes(33, 4096, cuda, bf16, llama8b), "wide_max_rows"
    assert not p.takes(1, 4096, cuda, bf16, llama2_7b), "another 4096-wide model has no tuned configs"
    assert p.takes(1, 4096, cuda, bf16, qwen3_8b) and not p.takes(6, 4096, cuda, bf16, qwen3_8b)
    assert not p.takes(1, 4096, cuda, bf16, llama8b[:1] + (("gate_up", 11008, 4096, 0),))
    assert not p.takes(1, 4096, cuda, bf16), "wide rows without their GEMMs named"
    assert not p.takes(1, 4096, cuda, torch.float16, llama8b), "the table is bf16's"
    assert not p.takes(1, 8192, cuda, bf16, llama8b)
    assert ops.EVERYWHERE.takes(64, 8192, cuda) and not ops.EVERYWHERE.takes(65, 576, cuda)
    # the H200's own 16- and 32-row entries (2026-12-02): wide rows fused to 32; past that the cap
    # holds even where a 64-row config is tuned (the user's cache)
    monkeypatch.setattr(gemv_config, "_device_name", lambda device: "NVIDIA H200")
    gemv_config.is_tuned.cache_clear()
    assert all(p.takes(r, 4096, cuda, bf16, llama8b) for r in range(1, 33))
    assert not p.takes(33, 4096, cuda, bf16, llama8b) and not v.takes(48, 4096, cuda, bf16, llama8b)
    user = {gemv_config._key("NVIDIA H200", kind, n, k, 64, bf16, d): gemv_config.GemvConfig(32, 256, True)
            for kind, n, k, d in llama8b}
    monkeypatch.setattr(gemv_config, "_table", lambda: user)
    gemv_config.is_tuned.cache_clear()
    assert gemv_config.is_tuned("linear", 4096, 4096, 64, bf16, cuda) and not p.takes(48, 4096, cuda, bf16, llama8b)
    assert ops.FusedPolicy(wide_max_rows=64).takes(48, 4096, cuda, bf16, llama8b)
    monkeypatch.setattr(gemv_config, "_table", dict)
    monkeypatch.setattr(gemv_config, "_device_name", lambda device: "another GPU")  # nothing tuned
    monkeypatch.setattr(gemv_config, "family", lambda device: "sm80x108")
    gemv_config.is_tuned.cache_clear()
    assert p.takes(8, 576, cuda) and not p.takes(1, 4096, cuda, bf16, llama8b)
    gemv_config.is_tuned.cache_clear()
    with ops.use_backend("auto"):
        assert ops.fused_layers() and ops.fused_policy() == ops.FusedPolicy()
        if ops.triton_available():
            assert ops.small_m_rows(1, bf16, cuda, 576) and ops.small_m_rows(16, torch.float16, cuda, 576)
            with ops.use_fused_policy(ops.FusedPolicy(max_rows=4)):
                assert ops.small_m_rows(4, bf16, cuda, 576) and not ops.small_m_rows(5, bf16, cuda, 576)
        assert not ops.small_m_rows(65, bf16, cuda, 576)
        assert not ops.small_m_rows(1, bf16, cuda, 8192)
        assert not ops.small_m_rows(1, torch.float32, cuda, 576)
        assert not ops.small_m_rows(1, bf16, torch.device("cpu"), 576)
        with ops.use_fused_layers(False):
            assert not ops.small_m_rows(1, bf16, cuda, 576)


def test_layers_name_the_gemms_their_fused_path_launches(tiny_checkpoint) -> None:
    """The policy's ``gemms`` are the configs ``gemv`` looks up: (kind, N, K, head dim)."""
    model = load(tiny_checkpoint, "llama", torch.float32)
    cfg = model.config
    layer = model.model.layers[0]
    qkv_n = cfg.q_size + 2 * cfg.kv_size
    assert layer.gemms == (("qkv", qkv_n, cfg.hidden_size, cfg.head_dim), ("linear", cfg.hidden_size, cfg.q_size, 0),
                           ("gate_up", cfg.intermediate_size, cfg.hidden_size, 0),
                           ("linear", cfg.hidden_size, cfg.intermediate_size, 0))
    qwen3 = load(tiny_checkpoint, "qwen3", torch.float32).model.layers[0]
    assert qwen3.self_attn.gemms[0][0] == "linear", "q/k norm: the plain QKV GEMM"


def test_fused_max_rows_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPDRAFT_FUSED_MAX_ROWS", "48")  # every mode, verify blocks too
    assert ops._policy_from_env() == ops.FusedPolicy(max_rows=48, verify_max_rows=48)
    assert ops._policy_from_env().for_verify().max_rows == 48
    for bad in ("0", "65", "many"):
        monkeypatch.setenv("UPDRAFT_FUSED_MAX_ROWS", bad)
        with pytest.raises(ValueError, match=f"UPDRAFT_FUSED_MAX_ROWS='{bad}'"):
            ops._policy_from_env()


def draft_extend(head: torch.nn.Module, feat: torch.Tensor) -> tuple[ModelRunner, ForwardBatch]:
    """A runner for ``head`` and a 3-token DRAFT_EXTEND of one request reading ``feat`` as the
    target's features (every row's logits and hidden state)."""
    from updraft.batch import CaptureHidden, FeatureKind

    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 64, 1)
    runner = ModelRunner(head, pool, 64, 1, "torch_native")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 16)
    return runner, runner.make_batch(ForwardMode.DRAFT_EXTEND, [4, 9, 30], [row], [3], [3], logits="all",
                                     capture_hidden=CaptureHidden.FULL, feature=feat, feature_kind=FeatureKind.TARGET)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_heads_fused_match_unfused(tiny_checkpoint, tmp_path, calls: Calls, kind: str) -> None:
    """EAGLE-1 (layer 0 without an input norm) and EAGLE-3 (``fused.eagle3_midlayer``: the QKV
    prologue gathers the embedding rows and normalises both inputs, its o_proj adds the feature)
    over a 3-token draft extend with target features."""
    from updraft.models.eagle import load_draft_head
    from updraft.testing import write_eagle3_head, write_eagle_head

    target = load(tiny_checkpoint, "llama", torch.float32)
    folder = (write_eagle_head if kind == "eagle" else write_eagle3_head)(tmp_path / kind)
    head = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    width = target.config.hidden_size * (3 if kind == "eagle3" else 1)
    feat = torch.randn(3, width, generator=torch.Generator().manual_seed(5))

    def run() -> list[torch.Tensor]:
        runner, batch = draft_extend(head, feat)
        out = runner.forward(batch)
        return [out.logits, out.hidden]

    from updraft.models import fused

    mid = []
    real_mid = fused.eagle3_midlayer

    def counted_mid(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        mid.append(1)
        return real_mid(*a, **kw)

    with ops.use_backend("torch"):
        ref = run()
    with ops.use_backend("triton"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused, "eagle3_midlayer", counted_mid)
        got = run()
    assert calls.counts.get("qkv_rope_store") == 1 and calls.counts.get("gate_up_silu") == 1
    assert len(mid) == (kind == "eagle3")
    for a, b in zip(got, ref):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-5


def test_eagle3_feature_qkv_computed_apart(tiny_checkpoint, tmp_path, calls: Calls) -> None:  # noqa: ANN001
    """``Eagle3Head.project_for``: the fc's rows and the mid layer's QKV product of them, computed
    before the tokens are known (the fused iteration runs it beside the verify's LM head); the
    extend reading them (``FeatureKind.PROJECTED`` + ``feature_qkv``) streams only the embedding's
    QKV columns and gives what the head projecting the target's layers itself gives. Where the
    fused mid layer does not serve (the torch backend) there is no product, and a forward handed
    one anyway refuses it."""
    import dataclasses

    from updraft.batch import FeatureKind
    from updraft.models.eagle import load_draft_head
    from updraft.testing import write_eagle3_head

    target = load(tiny_checkpoint, "llama", torch.float32)
    head = load_draft_head(write_eagle3_head(tmp_path / "e3"), target, torch.float32, torch.device("cpu"))
    feat = torch.randn(3, 3 * target.config.hidden_size, generator=torch.Generator().manual_seed(5))
    runner, batch = draft_extend(head, feat)
    with ops.use_backend("torch"):
        rows, qkv = head.project_for(feat, batch)
        assert qkv is None and torch.equal(rows, head.project_target(feat))
    with ops.use_backend("triton"):
        ref = runner.forward(batch)
        rows, qkv = head.project_for(feat, batch)
        assert qkv is not None and qkv.dtype == torch.float32 and qkv.shape == (3, head.midlayer.self_attn.qkv_proj.weight.shape[0])
        got = runner.forward(dataclasses.replace(batch, feature=rows, feature_kind=FeatureKind.PROJECTED, feature_qkv=qkv))
    for a, b in zip((got.logits, got.hidden), (ref.logits, ref.hidden)):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-5
    k1 = head.shared.embed_table().shape[1]
    assert calls.weights["qkv_rope_store"][-1][1] == k1, "the split QKV streamed the feature's columns too"
    with ops.use_backend("torch"), pytest.raises(ValueError, match="feature_qkv"):
        runner.forward(dataclasses.replace(batch, feature=rows, feature_kind=FeatureKind.PROJECTED, feature_qkv=qkv))


def test_eagle3_unscaled_logits_skip_the_final_norm(tiny_checkpoint, tmp_path, calls: Calls, monkeypatch) -> None:  # noqa: ANN001
    """A draft step whose reader applies each row's scale itself (``ForwardBatch.unscaled_logits``,
    the fused iteration's chain): the EAGLE-3 head's down projection adds the residual and writes
    the rows times the final norm's weight, the LM head reads those, and no norm runs. Each row
    of logits is the normal one divided by that row's 1 / rms (> 0), which ``row_scale`` gives:
    the same argmax, the same output feature."""
    import dataclasses

    from updraft.batch import CaptureHidden, FeatureKind
    from updraft.models import layers
    from updraft.models.eagle import load_draft_head
    from updraft.testing import write_eagle3_head

    target = load(tiny_checkpoint, "llama", torch.float32)
    head = load_draft_head(write_eagle3_head(tmp_path / "e3"), target, torch.float32, torch.device("cpu"))
    feat = torch.randn(3, target.config.hidden_size, generator=torch.Generator().manual_seed(7))
    norms = []
    real_add = layers.RMSNorm.forward_add
    monkeypatch.setattr(layers.RMSNorm, "forward_add", lambda self, *a: norms.append(1) or real_add(self, *a))

    def run(unscaled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        pool = ReqToTokenPool(4, 64, "cpu")
        alloc = PagedAllocator(pool, 64, 1)
        runner = ModelRunner(head, pool, 64, 1, "torch_native")
        rows = [pool.alloc() for _ in range(3)]
        assert all(r is not None and alloc.ensure(r, 16) for r in rows)
        batch = runner.make_batch(ForwardMode.DRAFT_DECODE, [4, 9, 30], rows, [7, 11, 5], [1, 1, 1], logits="last", stride=1,
                                  capture_hidden=CaptureHidden.LAST, feature=feat, feature_kind=FeatureKind.DRAFT)
        out = runner.forward(dataclasses.replace(batch, unscaled_logits=unscaled))
        assert (out.row_scale is not None) == unscaled
        if out.row_scale is not None:
            scales.append(out.row_scale.factor())
        return out.logits, out.hidden

    scales: list[torch.Tensor] = []
    with ops.use_backend("triton"):
        ref_logits, ref_hidden = run(False)
        assert norms == [1] and calls.counts.get("linear_add_norm") == 1  # o_proj only
        logits, hidden = run(True)
    assert norms == [1], "the unscaled step ran a norm"
    assert calls.counts.get("linear_add_norm") == 3  # o_proj and down
    assert torch.equal(logits.argmax(-1), ref_logits.argmax(-1))
    assert ((hidden - ref_hidden).abs().max() / ref_hidden.abs().max()).item() <= 1e-5
    rstd = torch.rsqrt(hidden.double().pow(2).mean(-1) + head.norm.eps)
    torch.testing.assert_close(scales[0].double(), rstd, rtol=1e-5, atol=0)
    assert torch.allclose(logits.double() * rstd[:, None], ref_logits.double(), rtol=1e-4,
                          atol=1e-4 * ref_logits.abs().max().item())


def verify_after_prompt(model: torch.nn.Module) -> tuple[ModelRunner, ForwardBatch]:
    """A runner for ``model`` (triton attention) with ``PROMPT`` prefilled, and a 4-token verify
    block after it that captures the EAGLE-3 features (every row's logits)."""
    from updraft.batch import CaptureHidden

    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 64, 1)
    runner = ModelRunner(model, pool, 64, 1, "triton")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 40)
    runner.forward(runner.make_batch(ForwardMode.EXTEND, PROMPT, [row], [len(PROMPT)], [len(PROMPT)]))
    return runner, runner.make_batch(ForwardMode.TARGET_VERIFY, PROMPT[:4], [row], [len(PROMPT) + 4], [4], stride=4,
                                     logits="all", capture_hidden=CaptureHidden.FULL)


def test_captured_eagle3_features_written_in_place(tiny_checkpoint, calls: Calls) -> None:  # noqa: ANN001
    """A verify that captures EAGLE-3's features (``CaptureHidden.FULL``) on the fused layers:
    each captured layer's down projection writes the new residual stream straight into its
    column block of the features, the next layer reads it there, and no concatenation runs; the
    features and logits equal the torch path's."""
    from updraft.testing import count_ops

    model = load(tiny_checkpoint, "llama", torch.float32, num_hidden_layers=4)
    model.aux_layers = (2, 0, 1)

    def verify() -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
        runner, batch = verify_after_prompt(model)
        got: list = []
        names = count_ops(lambda: got.append(runner.forward(batch))).names
        return got[0].logits, got[0].aux_hidden, names

    with ops.use_backend("torch"):
        ref_logits, ref_aux, _ = verify()
    with ops.use_backend("triton"):
        logits, aux, names = verify()
    assert names.get("cat", 0) == 0, names
    assert aux.shape == ref_aux.shape == (4, 3 * model.config.hidden_size)
    for a, b in ((logits, ref_logits), (aux, ref_aux)):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-4


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_aux_ready_once_the_captured_layers_are_written(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch,
                                                        backend: str) -> None:
    """``DecoderLM.forward(..., aux_ready=)``: where the fused layers write the captured streams in
    place, the callback gets the features right after the last captured layer (layer 2 of 4),
    before layer 3 runs; on the torch path after every layer. Once either way, with the tensor the
    output carries."""
    from updraft.models import fused as fused_layers

    model = load(tiny_checkpoint, "llama", torch.float32, num_hidden_layers=4)
    model.aux_layers = (2, 0, 1)
    events: list[str] = []
    for name in ("decoder_layer", "decoder_layer_normed"):
        real = getattr(fused_layers, name)
        monkeypatch.setattr(fused_layers, name, lambda *a, _r=real, **kw: events.append("layer") or _r(*a, **kw))
    real_call = type(model.model.layers[0]).forward
    monkeypatch.setattr(type(model.model.layers[0]), "forward",
                        lambda self, *a, **kw: events.append("layer") or real_call(self, *a, **kw))
    got: list[torch.Tensor] = []
    with ops.use_backend(backend):
        runner, batch = verify_after_prompt(model)
        batch.attn_backend = runner.backend
        runner.backend.init_forward_metadata(batch)
        events.clear()
        out = model(batch, aux_ready=lambda aux: events.append("aux") or got.append(aux))
    assert events.count("aux") == 1 and events.count("layer") == 4
    assert events.index("aux") == (3 if backend == "triton" else 4), events
    assert got[0] is out.aux_hidden and got[0].shape == (4, 3 * model.config.hidden_size)


def test_verify_forward_takes_the_verify_policy(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """``DecoderLM.forward`` decides a TARGET_VERIFY block's layers under ``for_verify()`` and
    every other mode under the policy as it is (restored afterwards)."""
    model = load(tiny_checkpoint, "llama", torch.float32)
    seen: list[ops.FusedPolicy] = []
    monkeypatch.setattr(model, "_forward", lambda batch, *_: seen.append(ops.fused_policy()))
    with ops.use_fused_policy(ops.FusedPolicy(verify_max_rows=40)):  # the default's limits are equal
        for mode in (ForwardMode.TARGET_VERIFY, ForwardMode.DECODE, ForwardMode.EXTEND):
            model.forward(type("B", (), {"mode": mode})())
        base = ops.fused_policy()
    assert seen == [base.for_verify(), base, base] and base.for_verify() != base
