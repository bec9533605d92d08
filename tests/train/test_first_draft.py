"""The engine's first draft at every verify step equals the training forward's step 0 on the
same sequence (fp32): the features (which target layers, their order, position t vs t-1), the
draft KV from the prefill and the draft extends, the chat tokens and the draft vocabulary map
are the same on both sides, so what the trainer measures teacher-forced is what the engine
drafts. Checked on the per-phase iteration and on the fused one (graph emulator), at batch
size 2, with S pinned. The confidence analysis (``benchmarks/acceptance_by_confidence.py``) walks
the trainer's chains, so it is checked against ``chain_acceptance`` here too."""

from __future__ import annotations

import pytest
import torch

from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.engine.request import SpecStats
from updraft.models.eagle import DraftHead, default_aux_layers, load_draft_head
from updraft.sampling_params import SamplingParams
from updraft.train.data import DistillData, teacher_force
from updraft.train.forward import head_logits, unroll
from updraft.train.heads import new_head, save_head, select_draft_vocab
from updraft.train.losses import LossConfig, TargetHead, chain_acceptance, compute_loss

PROMPTS = [[1, 5, 9, 33, 70, 71, 72], list(range(40, 62))]
S = 4
TOKENS = 28
STEPS = 120  # optimizer steps fitting the head to the continuations


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, tiny_target):  # noqa: ANN001, ANN201
    """An EAGLE-3 head over a 200-token draft vocabulary, fitted to the target's greedy
    continuations of PROMPTS (so that the engine accepts drafts and the draft extends take rows
    past the first: a head that never hits would leave them untested)."""
    target = tiny_target.model
    plain = Engine(EngineConfig(model=str(tiny_target.source), device="cpu", progress=False), loaded=tiny_target)
    params = SamplingParams(temperature=0.0, max_tokens=TOKENS + S + 1, ignore_eos=True)
    reqs = [plain.add_request(p, params, detokenize=False) for p in PROMPTS]
    while plain.has_unfinished():
        plain.step()
    seqs = [list(r.prompt_ids) + list(r.output_ids) for r in reqs]
    aux = default_aux_layers(target.config.num_layers)
    data = teacher_force(plain, seqs, [len(p) for p in PROMPTS], aux, progress=False)
    counts = data.token_counts(target.config.vocab_size) + 1e-3 * torch.rand(target.config.vocab_size, generator=torch.Generator().manual_seed(1))
    head, cfg = new_head("eagle3", target, draft_ids=select_draft_vocab(counts, 200), aux_layers=aux, seed=4)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    labels, batch = TargetHead(head), data.batch(list(range(len(seqs))), "cpu", eagle3=True)
    for _ in range(STEPS):
        loss, _ = compute_loss(head, batch, LossConfig(steps=S), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
    folder = tmp_path_factory.mktemp("first-draft-head")
    save_head(head, cfg, folder, dtype=torch.float32)
    return folder


def _engine_first_drafts(engine: Engine) -> tuple[list[list[int]], list[int], list[list[tuple[int, int]]], list[SpecStats]]:
    """Greedy generation of PROMPTS together; after every step, each running request's next first
    draft (the draft's LM head on its stored draft feature) and its committed length N."""
    proposer = engine.spec.proposer  # type: ignore[union-attr]
    head = proposer.runner.model
    params = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    reqs = [engine.add_request(p, params, detokenize=False) for p in PROMPTS]
    drafts: list[list[tuple[int, int]]] = [[] for _ in reqs]
    while engine.has_unfinished():
        engine.step()
        for b, req in enumerate(reqs):
            if req.finished or not req.output_ids:
                continue
            feat = proposer.next_hidden[req.row : req.row + 1]
            d1 = int(head.to_target_ids(head.logits_from_feature(feat).argmax(-1))[0])
            drafts[b].append((req.seq_len, d1))
    # The fitted head hits: verify steps accept several drafts, so the extends select rows past 0.
    assert all(r.spec.num_drafts > 0 for r in reqs)
    assert sum(r.spec.num_accepted_tokens for r in reqs) >= sum(r.spec.num_drafts for r in reqs)
    return [list(r.prompt_ids) + list(r.output_ids) for r in reqs], [len(r.prompt_ids) for r in reqs], drafts, [r.spec for r in reqs]


@pytest.mark.parametrize("fused", [False, True])
def test_engine_first_draft_equals_teacher_forced_step0(tiny_target, head_dir, fused: bool) -> None:  # noqa: ANN001
    target = tiny_target.model
    # the head's own chains (the trainer simulates those): no lookup assist
    spec = SpeculativeConfig(method="eagle3", draft_model=str(head_dir), num_steps=S, adaptive=False, ngram_assist=0)
    engine = Engine(
        EngineConfig(model=str(tiny_target.source), device="cpu", progress=False, speculative=spec, max_running_requests=2,
                     graph_emulate=fused, disable_overlap=True, cuda_graph_max_bs=2),
        loaded=tiny_target,
    )
    try:
        assert (engine.driver is not None) == fused
        seqs, plens, drafts, stats = _engine_first_drafts(engine)
        head = engine.spec.proposer.runner.model  # type: ignore[union-attr]
        # The trainer's side: teacher forcing with the layers the trainer picks, then step 0.
        aux = default_aux_layers(target.config.num_layers)
        data = teacher_force(engine, seqs, plens, aux, progress=False)
    finally:
        target.aux_layers = ()
    checked = 0
    for i, (seq, recs) in enumerate(zip(seqs, drafts)):
        a, b = int(data.offsets[i]), int(data.offsets[i + 1])
        with torch.no_grad():
            logits = head_logits(head, unroll(head, torch.tensor(seq)[None], data.aux[a:b][None], 1)[0][0])
        top2 = logits.topk(2, dim=-1).values
        tf = head.to_target_ids(logits.argmax(-1))
        for n, d1 in recs:  # the draft at committed length n predicts token n: head row n - 2
            if n >= len(seq) or float(top2[n - 2, 0] - top2[n - 2, 1]) < 1e-4:
                continue
            assert d1 == int(tf[n - 2]), f"request {i}, committed length {n}: engine drafts {d1}, teacher-forced step 0 {int(tf[n - 2])}"
            checked += 1
    assert checked >= 10
    # The trainer's simulation of the engine's greedy chains (held-out "greedy chains" figure):
    # the same verify steps, the same accepted drafts per position (the last step of a request
    # may accept drafts past max_tokens that the sequence no longer holds).
    verify, accepted = chain_acceptance(head, data.batch([0, 1], "cpu", eagle3=True), S, TargetHead(head))
    assert verify == sum(st.num_drafts for st in stats)
    engine_acc = [sum(st.accepted_per_pos[k] for st in stats if k < len(st.accepted_per_pos)) for k in range(S)]
    assert all(0 <= e - a <= len(stats) for e, a in zip(engine_acc, accepted)), (engine_acc, accepted)
    assert sum(accepted) >= sum(engine_acc) - len(stats) * S and sum(accepted) > 0


def _plain_answers(tiny_target, head_dir) -> tuple[list[list[int]], DistillData, DraftHead]:  # noqa: ANN001
    """The target's greedy answers to PROMPTS from a plain engine, teacher-forced, and the fitted
    head loaded over the target: what the benchmarks' chain walks read."""
    target = tiny_target.model
    plain = Engine(EngineConfig(model=str(tiny_target.source), device="cpu", progress=False), loaded=tiny_target)
    params = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    reqs = [plain.add_request(p, params, detokenize=False) for p in PROMPTS]
    while plain.has_unfinished():
        plain.step()
    seqs = [list(r.prompt_ids) + list(r.output_ids) for r in reqs]
    try:
        data = teacher_force(plain, seqs, [len(p) for p in PROMPTS], default_aux_layers(target.config.num_layers),
                             progress=False)
    finally:
        target.aux_layers = ()
    return seqs, data, load_draft_head(str(head_dir), target, torch.float32, torch.device("cpu"))


def test_confidence_walk_equals_chain_acceptance(tiny_target, head_dir, load_benchmark) -> None:  # noqa: ANN001
    """``benchmarks/acceptance_by_confidence.py`` walks the same greedy chains as the trainer's
    ``chain_acceptance`` (the engine's, checked above): the same verify steps and accepted drafts
    per position; its confidence and token fields read the positions it says."""
    mod = load_benchmark("acceptance_by_confidence")
    _, data, head = _plain_answers(tiny_target, head_dir)
    batch = data.batch([0, 1], "cpu", eagle3=True)
    conf = torch.arange(batch.ids.numel(), dtype=torch.float32).view_as(batch.ids)  # a position's index
    records = mod.chains(head, batch, conf, S)
    verify, accepted = chain_acceptance(head, batch, S, TargetHead(head))
    assert len(records) == verify and sum(accepted) > 0
    assert [sum(m > k for _, m, _, _ in records) for k in range(S)] == accepted
    width = batch.ids.shape[1]
    for c, _, _, tok in records:  # the first draft's token sits right after the confidence's position
        b, pos = divmod(int(c) + 1, width)
        assert tok == int(batch.ids[b, pos])


def test_vocab_gain_first_drafts_are_the_chains_first_drafts(tiny_target, head_dir, load_benchmark) -> None:  # noqa: ANN001
    """``benchmarks/vocab_gain.py``'s first draft at every answer position is the one the greedy
    chains (``chain_steps``, the engine's, checked above) draft at their verify steps: a verify
    step at committed length N accepts a draft exactly when that position's first draft hit, and
    the token it names is token N. Its vocabulary classes count each head's hits per class."""
    from updraft.train.losses import chain_steps

    mod = load_benchmark("vocab_gain")
    seqs, data, head = _plain_answers(tiny_target, head_dir)
    drafts = mod.first_drafts(head, data, torch.device("cpu"))
    # every answer token after the first, once
    assert [(b, n) for b, n, _, _ in drafts] == [(b, n) for b, s in enumerate(seqs) for n in range(len(PROMPTS[b]) + 1, len(s))]
    assert all(tok == seqs[b][n] for b, n, tok, _ in drafts)
    hit = {(b, n): h for b, n, _, h in drafts}
    walk = chain_steps(head, data.batch([0, 1], "cpu", eagle3=True), S, TargetHead(head))
    assert walk and any(m > 0 for *_, m in walk) and any(m == 0 for *_, m in walk)
    assert all(hit[(b, n)] == (m > 0) for b, n, m in walk)
    tokens = [t for _, _, t, _ in drafts]
    inside = TargetHead(head).in_draft.cpu()
    half = inside & (torch.arange(inside.numel()) % 2 == 0)  # a second "vocabulary": half of the first
    classes = mod.by_class(tokens, [[h for *_, h in drafts]] * 2, [inside, half])
    assert sum(c["positions"] for c in classes.values()) == len(tokens) and classes["second_only"]["positions"] == 0
    both = [h for (_, _, t, h) in drafts if half[t]]
    assert classes["both"]["positions"] == len(both)
    assert classes["both"]["first_acc"][0] == pytest.approx(sum(both) / max(len(both), 1))
    assert classes["neither"]["first_acc"] == [0.0, 0.0]  # a head never drafts outside its vocabulary


def test_sampled_overlap_filter_and_its_greedy_limit(tiny_target, head_dir, load_benchmark) -> None:  # noqa: ANN001
    """``benchmarks/sampled_overlap.py``: the top-p filter keeps the best-first prefix whose mass reaches
    top_p (worked by hand), and as the temperature goes to 0 a position's overlap ``sum min(p, q)`` becomes
    whether the head's argmax is the target's: step 0 then counts the first drafts ``vocab_gain.py`` counts
    (the chains' own, checked above), over the same positions."""
    mod = load_benchmark("sampled_overlap")
    gain = load_benchmark("vocab_gain")
    logits = torch.tensor([0.5, 0.3, 0.2, 0.0]).log()
    assert mod.filtered(logits, 1.0, 0.7).tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])
    assert mod.filtered(logits, 1.0, 0.9).tolist() == pytest.approx([0.5, 0.3, 0.2, 0.0])
    assert mod.filtered(logits, 0.5, 1.0).tolist() == pytest.approx([25 / 38, 9 / 38, 4 / 38, 0.0])
    assert mod.expected_accept([0.5, 0.5]) == pytest.approx(1.75)
    _, data, head = _plain_answers(tiny_target, head_dir)
    batch = data.batch([0, 1], "cpu", eagle3=True)
    drafts = gain.first_drafts(head, data, torch.device("cpu"))
    hits = sum(h for *_, h in drafts)
    assert 0 < hits < len(drafts)
    sums, counts = mod.step_overlaps(head, batch, S, temperature=1e-4, top_p=1.0)
    assert counts[0] == len(drafts) and counts == sorted(counts, reverse=True)
    assert sums[0] == pytest.approx(hits, abs=1e-3)
    warm, _ = mod.step_overlaps(head, batch, S, temperature=1.0, top_p=0.9)
    assert all(0 < s < c for s, c in zip(warm, counts, strict=True))


def test_benchmark_answers_are_the_seeded_targets_answers(tiny_target, tmp_path, load_benchmark) -> None:  # noqa: ANN001
    """``vocab_gain.answers`` (both CPU head comparisons read it): a prompt file's first ``n`` prompts
    answered by the target, the same texts again from the same seed, others from another, teacher-forced."""
    import json

    gain = load_benchmark("vocab_gain")
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"tell me about item {i}"}) + "\n" for i in range(3)))
    engine = Engine(EngineConfig(model=str(tiny_target.source), device="cpu", progress=False), loaded=tiny_target)
    aux = default_aux_layers(tiny_target.model.config.num_layers)
    try:
        runs = [gain.answers(engine, str(rows), 2, 12, aux, temperature=1.0, seed=s) for s in (5, 5, 6)]
    finally:
        tiny_target.model.aux_layers = ()
    assert [n for _, n in runs] == [2, 2, 2]
    ids = [[d.batch([i], "cpu", eagle3=True).ids.tolist() for i in range(d.num_seqs)] for d, _ in runs]
    assert runs[0][0].num_seqs == 2 and ids[0] == ids[1] and ids[0] != ids[2]
    assert runs[0][0].batch([0, 1], "cpu", eagle3=True).feature is not None


def test_context_calibration_walks_are_the_chains_and_the_probes(tiny_target, head_dir, load_benchmark) -> None:  # noqa: ANN001
    """``benchmarks/context_calibration.py`` replays the greedy chains from its per-position records:
    with the context tokens off they are ``chain_steps``' walks (the engine's, checked above); at (1, 0)
    they are ``context_vocab_probe.py``'s ``history`` chains, which score every context token itself."""
    from updraft.train.losses import chain_steps

    cal, probe = load_benchmark("context_calibration"), load_benchmark("context_vocab_probe")
    _, data, head = _plain_answers(tiny_target, head_dir)
    labels = TargetHead(head)
    rows_x = probe.extrapolated_rows(head)
    seqs = cal.collect(head, labels, rows_x, data, S)
    assert any(bool(torch.isfinite(s.ctx).any()) for s in seqs), "no context token competes: the case tests nothing"
    walk = chain_steps(head, data.batch(list(range(data.num_seqs)), "cpu", eagle3=True), S, labels)
    off = cal.accept_length(seqs, 1.0, float("-inf"), S)
    assert off[0] == pytest.approx(1 + sum(m for *_, m in walk) / len(walk))
    acc = dict(walk={v: [] for v in probe.VARIANTS}, classes={}, oov_in_prompt=[])
    for _, batch in load_benchmark("vocab_gain").batches(data, torch.device("cpu")):
        probe.probe_batch(head, labels, rows_x, batch, S, acc)
    history = probe.summarise(acc, S)["history"]
    assert cal.accept_length(seqs, 1.0, 0.0, S) == pytest.approx((history["accept_len"], history["per_position"][0]))
    # a bias large enough hands every position with a context token to it: a different walk here
    assert cal.accept_length(seqs, 1.0, 1e4, S) != cal.accept_length(seqs, 1.0, 0.0, S)
