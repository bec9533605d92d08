"""Context tokens for a truncated draft vocabulary (``updraft.spec.context_vocab``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.errors import CheckpointError
from updraft.models.eagle import CONTEXT_KEY, Eagle3Head, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.spec import context_vocab as cv
from updraft.testing import HIDDEN, count_ops, write_eagle3_head


@pytest.fixture(scope="module")
def head(tiny_checkpoint, tmp_path_factory) -> Eagle3Head:  # noqa: ANN001
    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model
    folder = write_eagle3_head(tmp_path_factory.mktemp("cv"), draft_vocab=120)
    h = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(h, Eagle3Head)
    return h


def _float64_pick(logits, feature, norm_w, eps, ids, rows, req_rows, table, unscaled, bias=0.0):  # noqa: ANN001, ANN202
    """Row by row in float64, written out: the vocabulary's first best index (mapped), against
    every context token's score on the normed feature plus ``bias``; a context token needs a
    strictly larger one."""
    out = []
    for b in range(logits.shape[0]):
        x = logits[b].double()
        arg = int(x.argmax())
        best = float(x[arg])
        f = feature[b].double()
        inv = 1.0 / float(torch.sqrt((f * f).mean() + eps))
        if unscaled:
            best *= inv
        fn = f * inv * norm_w.double()
        pick = arg + int(table[0][arg]) if table[1] else int(table[0][arg])
        cbest = float("-inf")
        for k in range(ids.shape[1]):
            t = int(ids[req_rows[b], k])
            if t < 0:
                continue
            s = float(rows[req_rows[b], k].double() @ fn) + bias
            if s > cbest:
                cbest, cid = s, t
        out.append(cid if cbest > best else pick)
    return out


@pytest.mark.parametrize("unscaled", [False, True])
@pytest.mark.parametrize("add", [True, False])
@pytest.mark.parametrize("bias", [0.0, 1.5])
def test_pick_equals_a_float64_reference(unscaled: bool, add: bool, bias: float) -> None:
    gen = torch.Generator().manual_seed(1 + unscaled + 2 * add)
    b, v, h, k, nrows = 6, 150, 48, 11, 5  # h and k not powers of two: the masks
    logits = torch.randn(b, v, generator=gen)
    # the feature's rms is ~10, so logits that lack its 1 / rms are ~10x the scaled ones
    feature = torch.randn(b, h, generator=gen) * 10
    norm_w = 1 + 0.1 * torch.randn(h, generator=gen)
    ids = torch.randint(1000, 2000, (nrows, k), generator=gen)
    ids[1, 4:] = -1  # a row with fewer context tokens
    ids[4] = -1  # the spare row: none
    # context scores between the scaled and the unscaled best logits: the flag decides, and both picks occur
    rows = torch.randn(nrows, k, h, generator=gen) * (0.45 if not unscaled else 0.1)
    rows[ids < 0] = 1e3  # an empty entry's row is read (the count bounds the loads): it must still never win
    # the bias lifts the context scores by as much as the vocabulary's best logits rise here (in
    # the units the flag says), so the case still mixes both picks
    logits += bias * (feature.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() if unscaled else bias
    req_rows = torch.tensor([0, 1, 2, 3, 4, 1])
    table = (torch.randint(0, 900, (v,), generator=gen), add)
    want = _float64_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, unscaled, bias)
    assert any(w >= 1000 for w in want) and any(w < 1000 for w in want), "the case should mix both picks"
    assert want != _float64_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, not unscaled, bias)
    if bias:
        assert want != _float64_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, unscaled)
    ref = cv.context_pick_reference(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, unscaled, bias)
    assert ref.tolist() == want
    dst = torch.full((b,), -7, dtype=torch.long)
    got = cv.context_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, dst, table, unscaled=unscaled, bias=bias)
    assert got is dst and got.tolist() == want  # the Triton kernel under the interpreter (CPU tests)


def test_a_tie_keeps_the_vocabulary_pick() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    feature = torch.ones(1, 4)  # normed: ones (unit norm weight)
    ids = torch.tensor([[500, -1]])
    rows = torch.zeros(1, 2, 4)
    rows[0, 0] = 0.5  # score 0.5 * 4 = 2.0: equal to the best logit
    out = cv.context_pick(logits, feature, torch.ones(4), 0.0, ids, rows, torch.tensor([0]),
                          torch.empty(1, dtype=torch.long), (torch.zeros(3, dtype=torch.long), True))
    assert out.tolist() == [1]
    rows[0, 0] = 0.51
    out = cv.context_pick(logits, feature, torch.ones(4), 0.0, ids, rows, torch.tensor([0]),
                          torch.empty(1, dtype=torch.long), (torch.zeros(3, dtype=torch.long), True))
    assert out.tolist() == [500]


def test_pick_over_many_tiles_merges_them_in_order_and_leaves_its_tickets_at_zero() -> None:
    """Hidden 600 gives 16-token tiles: 40 context tokens are three programs a row besides the
    argmax's, merged by the row's last program (one tile: two; none: the argmax's alone). The best token sits in a later tile than an
    equal-scoring twin in the next one (the first wins), rows hold 40, 13 and 0 tokens, and the
    same counters serve a second launch."""
    gen = torch.Generator().manual_seed(5)
    b, v, h, k = 4, 300, 600, 40
    feature = torch.randn(b, h, generator=gen)
    norm_w = 1 + 0.1 * torch.randn(h, generator=gen)
    ids = torch.arange(1000, 1000 + 3 * k).view(3, k).clone()
    count = torch.tensor([k, 13, 0], dtype=torch.int32)
    ids[1, 13:] = -1
    ids[2] = -1
    rows = torch.randn(3, k, h, generator=gen) * 0.01
    fn = feature * torch.rsqrt(feature.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w
    req_rows = torch.tensor([0, 1, 2, 0])
    rows[0, 27] = rows[0, 35] = 5 * fn[0] / fn[0].pow(2).sum()  # score 5 in tiles 1 and 2
    rows[0, 3] = 6 * fn[3] / fn[3].pow(2).sum()  # batch row 3 (request row 0 again): 6 in tile 0
    rows[1, 12] = 3 * fn[1] / fn[1].pow(2).sum()  # the last valid token of a partial tile
    logits = torch.randn(b, v, generator=gen)
    logits[:, 7] = 4.5  # the vocabulary's best: below those, above row 1's 3
    table = (torch.zeros(v, dtype=torch.long), True)
    want = _float64_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, False)
    assert want == [1027, 7, 7, 1003]
    tickets = torch.zeros(8, dtype=torch.int32)
    # the default 16-token tiles; 4-token ones (11 programs a row, the twins in tiles 6 and 8);
    # one tile holding all 40 (two programs)
    for tiles in (None, cv.PickTiles(4, 4), cv.PickTiles(64, 8)):
        for bias in (0.0, 2.0):  # the same counters twice; with the bias row 1's token wins too
            want = _float64_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, table, False, bias)
            dst = torch.full((b,), -7, dtype=torch.long)
            got = cv.context_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, dst, table, count=count,
                                  bias=bias, tickets=tickets, tiles=tiles)
            assert got.tolist() == want, (tiles, bias)
            assert int(tickets.abs().sum()) == 0
    assert want == [1027, 1040 + 12, 7, 1003]
    assert cv.pick_tiles(600, k) == cv.PickTiles(16, 4) and cv.pick_tiles(4096, 256) == cv.PickTiles(8, 4)
    with pytest.raises(ValueError, match="block_k must be a power of two"):
        cv.PickTiles(3, 4)
    with pytest.raises(ValueError, match="tickets"):
        cv.context_pick(logits, feature, norm_w, 1e-6, ids, rows, req_rows, dst, table, tickets=tickets[:2])


def test_prompt_choice_takes_the_most_frequent_tokens_outside_the_vocabulary() -> None:
    in_vocab = torch.zeros(20, dtype=torch.bool)
    in_vocab[[1, 2, 3]] = True
    tokens = [1, 7, 2, 9, 7, 9, 9, 3, 11, 12, 7, 25]  # 25: past the vocabulary (ignored)
    assert cv.prompt_choice(tokens, in_vocab, 3) == [7, 9, 11]  # 7 and 9 three times: first seen first
    assert cv.prompt_choice(tokens, in_vocab, 10) == [7, 9, 11, 12]
    assert cv.prompt_choice([1, 2, 3], in_vocab, 4) == []


def test_extrapolation_recovers_a_linear_head_and_admit_writes_its_rows(head: Eagle3Head) -> None:
    gen = torch.Generator().manual_seed(0)
    h = head.lm_head.weight.shape[1]
    a0 = torch.eye(h) + 0.1 * torch.randn(h, h, generator=gen)
    saved = head.lm_head.weight.detach().clone()
    w_t = head.shared.lm_head_weight().detach()
    try:
        with torch.no_grad():
            head.lm_head.weight.copy_(w_t[head.vocab_ids()] @ a0)
        torch.testing.assert_close(cv.extrapolation_map(head), a0, atol=1e-4, rtol=1e-4)
        ctx = cv.ContextVocab(head, rows=3, size=4)
        outside = [t for t in range(w_t.shape[0]) if t not in set(head.vocab_ids().tolist())][:5]
        prompt = [outside[0], outside[1], outside[1], int(head.vocab_ids()[0]), outside[2]]
        assert ctx.admit(1, prompt) == 3
        assert ctx.ids[1].tolist() == [-1] * 4  # written at the flush
        ctx.flush()
        assert ctx.ids[1].tolist() == [outside[1], outside[0], outside[2], -1]
        assert ctx.count.tolist() == [0, 3, 0]
        torch.testing.assert_close(ctx.rows[1, :3], w_t[ctx.ids[1, :3]] @ a0, atol=1e-4, rtol=1e-4)
        assert ctx.admit(1, [int(head.vocab_ids()[0])]) == 0  # a new prompt replaces the row's tokens
        ctx.flush()
        assert ctx.ids[1].tolist() == [-1] * 4 and ctx.count.tolist() == [0, 0, 0]
    finally:
        with torch.no_grad():
            head.lm_head.weight.copy_(saved)


def _outside(head: Eagle3Head, n: int) -> list[int]:
    inside = set(head.vocab_ids().tolist())
    return [t for t in range(head.shared.lm_head_weight().shape[0]) if t not in inside][:n]


def test_observed_tokens_reach_the_device_at_the_flush_for_every_row_at_once(head: Eagle3Head) -> None:
    """``observe`` queues on the host; ``flush`` writes every row's new tokens after what the row
    holds (each once, while there is room), clears re-admitted rows first, and drops a released
    row's queue. Its device work is a fixed handful of ops for any number of rows."""
    x = _outside(head, 12)
    inside = int(head.vocab_ids()[0])
    ctx = cv.ContextVocab(head, rows=5, size=4)
    for row in range(5):
        ctx.admit(row, [x[row]])
    ctx.flush()
    ctx.observe(0, [x[5], inside, x[5], x[0], x[6]])  # x[5] once; x[0] held already; inside never
    ctx.observe(0, [x[7], x[8], x[9]])  # room for one more: x[7]
    ctx.observe(2, [x[10]])
    ctx.observe(3, [x[11]])
    ctx.release(3)  # its queue goes with it
    ctx.admit(4, [x[9], x[9], inside])  # replaces x[4] at the flush
    ctx.observe(4, [x[1]])
    assert ctx.queued == 6  # x[5], x[6], x[7]; x[10]; x[9], x[1] (row 3's went with it)

    ops = count_ops(ctx.flush).aten
    assert ops <= 16, f"{ops} tensor ops in one flush"
    assert ctx.ids.tolist() == [[x[0], x[5], x[6], x[7]], [x[1], -1, -1, -1], [x[2], x[10], -1, -1],
                                [x[3], -1, -1, -1], [x[9], x[1], -1, -1]]
    assert ctx.count.tolist() == [4, 1, 2, 1, 2]
    w_t = head.shared.lm_head_weight().detach()
    valid = ctx.ids >= 0
    torch.testing.assert_close(ctx.rows[valid], w_t[ctx.ids[valid]] @ ctx.map)
    ctx.observe(0, [x[11]])  # full: nothing queued
    assert count_ops(ctx.flush).aten == 0


def test_staged_flushes_reuse_pinned_staging_and_never_rewrite_a_queued_copy(head: Eagle3Head, fake_cuda,  # noqa: ANN001
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA (faked) a flush copies through the ring's staging: no pinned tensor or event per
    flush; while a copy is still queued (the device has not reached it) its slot is kept and a
    new one taken. The device ends with what unstaged flushes write."""
    x = _outside(head, 10)
    staged, plain = cv.ContextVocab(head, rows=3, size=4, staged=True), cv.ContextVocab(head, rows=3, size=4)
    assert fake_cuda.events == 1
    pinned = {"n": 0}
    real_pin = torch.Tensor.pin_memory

    def pin_memory(t: torch.Tensor, *a: object, **k: object) -> torch.Tensor:
        pinned["n"] += 1
        return real_pin(t, *a, **k) if torch.cuda.is_available() else t

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    for ctx in (staged, plain):
        ctx.admit(0, [x[0], x[1]])
        ctx.admit(2, [x[2]])
        ctx.flush()
        ctx.observe(0, [x[3]])
        ctx.flush()
        ctx.observe(2, [x[4], x[5]])
        ctx.admit(1, [x[6]])
        ctx.flush()
    assert pinned["n"] == 0, "a pinned tensor made per flush"
    assert fake_cuda.events == 1 and len(fake_cuda.records) == 3, "an event per flush"
    for name in ("ids", "count", "rows"):
        assert torch.equal(getattr(staged, name), getattr(plain, name)), name
    fake_cuda.busy.add(fake_cuda.records[-1][0])  # the last copy still queued
    staged.observe(1, [x[7]])
    staged.flush()
    assert len(staged._ring._slots) == 2 and fake_cuda.events == 2, "a queued copy's staging was rewritten"
    assert staged.ids[1].tolist() == [x[6], x[7], -1, -1] and staged.count.tolist() == [3, 2, 3]


def test_size_must_be_positive(head: Eagle3Head) -> None:
    with pytest.raises(ValueError, match="size=0"):
        cv.ContextVocab(head, rows=2, size=0)


@pytest.fixture(scope="module")
def linear_head(tiny_checkpoint, tmp_path_factory) -> Path:  # noqa: ANN001
    """An EAGLE-3 head whose LM head is the target's rows of its vocabulary times one map: the
    extrapolated rows are exact, so tokens outside the vocabulary compete as often as they would
    in a full vocabulary."""
    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model
    folder = write_eagle3_head(tmp_path_factory.mktemp("cv_linear"), draft_vocab=120, seed=4)
    t = load_file(str(folder / "model.safetensors"))
    keep = torch.arange(120) + t["d2t"]
    gen = torch.Generator().manual_seed(5)
    a0 = torch.eye(HIDDEN) + 0.2 * torch.randn(HIDDEN, HIDDEN, generator=gen)
    t["lm_head.weight"] = (target.lm_head_weight.detach()[keep] @ a0).contiguous()
    save_file(t, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("path", ["eager", "phase_graphs", "fused"])
@pytest.mark.parametrize("bsz", [1, 8])
def test_engine_lossless_and_drafting_context_tokens(target, reference, linear_head, monkeypatch, path: str,  # noqa: ANN001
                                                     bsz: int) -> None:
    """Greedy outputs equal plain decoding with context tokens competing, on every path (eager per-phase
    steps, per-phase graphs with the chained draft graph, the fused iteration); their picks are where
    the drafts come from (some outside the draft vocabulary), and the kernel (the interpreter here)
    ran inside the captured bodies."""
    from updraft.llm import LLM
    from updraft.sampling_params import SamplingParams
    from updraft.testing import repeating_prompts

    picks: list[torch.Tensor] = []
    real = cv.context_pick

    def spy(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        out = real(*args, **kw)
        picks.append(out.detach().clone())
        return out

    monkeypatch.setattr(cv, "context_pick", spy)
    cfg = {"method": "eagle3", "draft_model": str(linear_head), "num_steps": 3, "adaptive": False, "context_vocab": 64}
    kw: dict = {}
    if path != "eager":
        kw = dict(graph_emulate=True, cuda_graph_bs=[1, 2, 4, 8], disable_fused_iteration=path == "phase_graphs")
    llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg, **kw)
    ps = repeating_prompts(bsz, seed=40 + bsz)
    outs = llm.generate(ps, SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    eng = llm.engine
    proposer = eng.spec.proposer  # type: ignore[union-attr]
    assert proposer.context is not None
    if path == "fused":
        assert eng.driver is not None and eng.driver.launches > 0 and eng.driver.fused.graphs
    elif path == "phase_graphs":
        assert set(proposer.chain_counts) == {"chain graph"}, proposer.chain_counts
    in_vocab = proposer.context.in_vocab
    got = torch.cat([p.flatten() for p in picks])
    assert len(got) > 0 and not bool(in_vocab[got].all()), "no context token was ever drafted"
    assert proposer.context.queued == 0, "the engine's step left observed tokens unwritten"
    assert eng.allocator.used_tokens == 0


def test_the_engine_writes_observed_tokens_once_a_step_whatever_the_batch(target, linear_head, monkeypatch) -> None:  # noqa: ANN001
    """Fused iterations at bs 8: ``observe`` (every row's emit) does no device work, and the
    engine flushes at most once a step plus once a prefill (at bs 64 the H200 ran 0.61x of the same
    head without context tokens when each row wrote its own tokens: its iterations were host-bound)."""
    from updraft.llm import LLM
    from updraft.sampling_params import SamplingParams
    from updraft.testing import repeating_prompts

    seen = {"observe": 0, "flushes": 0, "flush_ops": 0, "written": 0}
    real_observe, real_flush = cv.ContextVocab.observe, cv.ContextVocab.flush

    def observe(self: cv.ContextVocab, row: int, tokens: list[int]) -> None:
        seen["observe"] += count_ops(lambda: real_observe(self, row, tokens)).aten

    def flush(self: cv.ContextVocab) -> None:
        seen["written"] += self.queued
        seen["flushes"] += 1
        seen["flush_ops"] = max(seen["flush_ops"], count_ops(lambda: real_flush(self)).aten)

    monkeypatch.setattr(cv.ContextVocab, "observe", observe)
    monkeypatch.setattr(cv.ContextVocab, "flush", flush)
    cfg = {"method": "eagle3", "draft_model": str(linear_head), "num_steps": 3, "adaptive": False, "context_vocab": 64}
    eng = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4, 8],
              speculative_config=cfg).engine
    for p in repeating_prompts(8, seed=48):
        eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    ctx = eng.spec.proposer.context  # type: ignore[union-attr]
    assert ctx is not None
    steps = 0
    while eng.has_unfinished():
        eng.step()
        steps += 1
        assert ctx.queued == 0, f"step {steps} left {ctx.queued} observed tokens unwritten"
    assert eng.driver is not None and eng.driver.launches > 0
    assert seen["observe"] == 0
    assert seen["flushes"] <= steps + eng.stats.prefill_steps and seen["flush_ops"] <= 16, seen
    assert seen["written"] > 0, seen


def _with_calibration(folder: Path, entry: object) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg[CONTEXT_KEY] = entry
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_the_heads_calibration_scales_the_rows_and_biases_the_pick(tiny_checkpoint, tmp_path) -> None:  # noqa: ANN001
    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model
    plain = load_draft_head(write_eagle3_head(tmp_path / "a", draft_vocab=120), target, torch.float32, torch.device("cpu"))
    folder = _with_calibration(write_eagle3_head(tmp_path / "b", draft_vocab=120), {"scale": 1.25, "bias": 2.5})
    tuned = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(plain, Eagle3Head) and isinstance(tuned, Eagle3Head)
    assert (plain.head_config.context_scale, plain.head_config.context_bias) == (1.0, 0.0)
    assert (tuned.head_config.context_scale, tuned.head_config.context_bias) == (1.25, 2.5)
    a, b = cv.ContextVocab(plain, rows=1, size=4), cv.ContextVocab(tuned, rows=1, size=4)
    torch.testing.assert_close(b.map, a.map * 1.25)
    assert (a.bias, b.bias) == (0.0, 2.5)
    # the pick passes the bias on: a context token 2 below the vocabulary's best wins only with it
    for ctx, want in ((a, 0), (b, 1)):
        ctx.ids[0, 0], ctx.count[0] = 7, 1  # one context token (id 7)
        ctx.rows[0, 0] = 0.0
        logits = torch.full((1, 120), -5.0)
        logits[0, 3] = 2.0  # vocabulary best; the context token scores 0
        out = ctx.pick(logits, torch.ones(1, HIDDEN), torch.tensor([0]), torch.empty(1, dtype=torch.long))
        assert (int(out[0]) == 7) == bool(want)


@pytest.mark.parametrize("entry,needle", [("fast", "with numbers"), ({"scale": 0}, "scale must be > 0"),
                                          ({"bias": "inf"}, "both finite"), ({"scale": "x"}, "with numbers")])
def test_a_bad_calibration_is_a_checkpoint_error(tiny_checkpoint, tmp_path, entry: object, needle: str) -> None:  # noqa: ANN001
    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model
    folder = _with_calibration(write_eagle3_head(tmp_path, draft_vocab=120), entry)
    with pytest.raises(CheckpointError, match=needle):
        load_draft_head(folder, target, torch.float32, torch.device("cpu"))
