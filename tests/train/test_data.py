"""Self-distillation data: generation through the engine, teacher forcing, batches, and the
pairing the losses rely on (head row ``j`` reads ``t[j+1]`` and ``feature[j]`` and is trained
against target position ``j+1``)."""

from __future__ import annotations

import pytest
import torch

from updraft.config import EngineConfig
from updraft.data.prompts import build_prompts, split_prompts
from updraft.engine.engine import Engine
from updraft.train import losses
from updraft.train.data import GenerationResult, collect_sequences, epoch_batches, teacher_force
from updraft.train.forward import shift_left
from updraft.train.heads import new_head


@pytest.fixture(scope="module")
def engine(tiny_target):  # noqa: ANN001, ANN201
    return Engine(EngineConfig(model=str(tiny_target.source), device="cpu", progress=False, max_running_requests=8), loaded=tiny_target)


@pytest.fixture(scope="module")
def generated(engine):  # noqa: ANN001, ANN201
    # Prompts that fit the tiny target's 256-token context with their second stage (function
    # stubs and inline texts of the v3 set do not).
    prompts = [p for p in build_prompts(60, seed=3) if len(p.text) < 110][:12]
    assert len(prompts) == 12
    return prompts, collect_sequences(engine, prompts, max_new_tokens=12, progress=False)


def test_prompts_are_deterministic_and_split_disjoint() -> None:
    a, b = build_prompts(300, seed=7), build_prompts(300, seed=7)
    assert a == b and len({p.text for p in a}) == 300
    assert build_prompts(50, seed=8) != build_prompts(50, seed=7)
    assert {p.category for p in a} >= {"writing", "coding", "math", "passage", "qa", "advice", "roleplay", "essay"}
    train, held = split_prompts(a, 20, seed=7)
    assert len(held) == 20 and len(train) == 280 and not {p.text for p in train} & {p.text for p in held}
    passage = next(p for p in a if p.followup is not None)
    assert "MY PASSAGE" in passage.fill("  MY PASSAGE ")
    assert passage.stage2_messages(" MY PASSAGE ") == [{"role": "user", "content": passage.fill("MY PASSAGE")}]
    advice = next(p for p in a if p.second_turn is not None)
    assert advice.followup is None and advice.two_stage
    assert advice.stage2_messages(" MY ANSWER ") == [
        {"role": "user", "content": advice.text}, {"role": "assistant", "content": "MY ANSWER"},
        {"role": "user", "content": advice.second_turn},
    ]
    single = next(p for p in a if not p.two_stage)
    with pytest.raises(ValueError, match="single-stage"):
        single.stage2_messages("x")


def test_evaluation_style_categories() -> None:
    """Prompt set v3: short instructions, factual questions, function completion from a docstring
    with doctests, news articles summarised in a second stage (longer first responses), inline
    texts to extract from, and multi-turn reworks -- each deterministic and present in a pool."""
    from updraft.data.prompts import PROMPTS_VERSION, WEIGHTS
    from updraft.data.styles import NEWS_TOKENS

    assert PROMPTS_VERSION == 3
    pool = build_prompts(2000, seed=5)
    assert pool == build_prompts(2000, seed=5)
    by_cat: dict[str, list] = {}
    for p in pool:
        by_cat.setdefault(p.category, []).append(p)
    assert set(by_cat) == set(WEIGHTS)
    for cat in ("instruct", "factual", "code_complete", "news", "extraction", "multiturn"):
        assert len(by_cat[cat]) >= 0.4 * 2000 * WEIGHTS[cat] / sum(WEIGHTS.values()), cat
    assert all(p.followup and "{passage}" in p.followup and p.max_tokens == NEWS_TOKENS for p in by_cat["news"])
    assert all(p.max_tokens is None for c, ps in by_cat.items() if c != "news" for p in ps)
    assert all(p.second_turn and p.followup is None for p in by_cat["multiturn"])
    assert all("def " in p.text and ">>>" in p.text for p in by_cat["code_complete"])
    assert all(len(p.text) < 160 for p in by_cat["factual"] + by_cat["instruct"])
    assert len({p.text.split("\n")[0] for p in by_cat["code_complete"]}) >= 5


def test_a_prompt_can_cap_its_first_response(engine) -> None:  # noqa: ANN001
    """``TrainPrompt.max_tokens`` caps the first stage (news articles run longer than the rest);
    the second stage keeps ``max_new_tokens``."""
    from updraft.data.prompts import TrainPrompt

    long_first = TrainPrompt("Write a news article.", "news", followup="Summarize: {passage}", max_tokens=9)
    plain = TrainPrompt("Write a poem.", "writing")
    gen = collect_sequences(engine, [long_first, plain], max_new_tokens=5, progress=False)
    lens = [len(s) - pl for s, pl in zip(gen.seqs, gen.prompt_lens)]
    assert gen.prompt_index == [0, 0, 1] and lens[0] <= 9 and lens[1] <= 5 and lens[2] <= 5
    assert lens[0] > 5  # the tiny random target rarely stops early


def test_generation_keeps_both_stages_in_prompt_order(generated) -> None:  # noqa: ANN001
    prompts, gen = generated
    n_follow = sum(p.two_stage for p in prompts)
    assert n_follow >= 2
    assert len(gen.seqs) == len(prompts) + n_follow  # every passage / advice task got its second stage
    assert gen.prompt_index == sorted(gen.prompt_index)
    assert all(len(s) > pl for s, pl in zip(gen.seqs, gen.prompt_lens))
    assert gen.stats["generated_tokens"] == sum(len(s) - pl for s, pl in zip(gen.seqs, gen.prompt_lens))


def test_advice_second_stage_continues_the_conversation(engine, generated) -> None:  # noqa: ANN001
    """The second stage of a multi-turn task is prompted with the whole conversation: the first
    user turn, the model's own first response as the assistant turn, then the next user turn."""
    from updraft.train.data import conversation_ids

    prompts, gen = generated
    i = next(k for k, p in enumerate(prompts) if p.second_turn is not None)
    first, second = [k for k, j in enumerate(gen.prompt_index) if j == i]
    response = gen.seqs[first][gen.prompt_lens[first]:]
    want = conversation_ids(engine, prompts[i].stage2_messages(engine.tokenizer.decode(response)))
    assert gen.seqs[second][: gen.prompt_lens[second]] == want


def test_deadline_keeps_partial_responses(engine) -> None:  # noqa: ANN001
    import time

    gen = collect_sequences(engine, build_prompts(30, seed=4), max_new_tokens=200, progress=False, deadline=time.time() + 0.3)
    assert gen.stats["aborted"] > 0 or gen.stats["finished"] < 30
    assert not engine.has_unfinished() and not engine.requests  # everything released
    assert all(len(s) - pl >= 2 for s, pl in zip(gen.seqs, gen.prompt_lens))


def test_cache_round_trip(tmp_path, generated) -> None:  # noqa: ANN001
    _, gen = generated
    gen.save(tmp_path, {"seed": 3})
    back, meta = GenerationResult.load(tmp_path)
    assert meta == {"seed": 3} and back.seqs == gen.seqs and back.prompt_lens == gen.prompt_lens
    assert back.prompt_index == gen.prompt_index
    assert GenerationResult.load(tmp_path / "none") is None


def test_teacher_forcing_matches_greedy_generation(engine, generated) -> None:  # noqa: ANN001
    """The teacher-forced argmax at ``p`` is the token greedy decoding produced at ``p+1``, for
    every response position, and the hidden state is the engine's own (one sequence alone)."""
    _, gen = generated
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, progress=False, max_batch_tokens=300)
    assert data.num_tokens == sum(len(s) for s in gen.seqs)
    mask = data.target_mask()
    nxt = torch.cat([data.tokens[1:], data.tokens[:1]])
    assert torch.equal(data.argmax[mask], nxt[mask])
    one = teacher_force(engine, gen.seqs[2:3], gen.prompt_lens[2:3], progress=False)
    a, b = int(data.offsets[2]), int(data.offsets[3])
    torch.testing.assert_close(data.hidden[a:b], one.hidden, rtol=1e-5, atol=1e-5)
    aux = teacher_force(engine, gen.seqs[:2], gen.prompt_lens[:2], aux_layers=(0, 1, 1), progress=False)
    assert aux.aux is not None and aux.aux.shape == (aux.num_tokens, 3 * engine.model_config.hidden_size)
    assert engine.model.aux_layers == ()  # restored


def test_batch_layout_and_target_mask(engine, generated) -> None:  # noqa: ANN001
    _, gen = generated
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, progress=False)
    b = data.batch([3, 0], "cpu", eagle3=False)
    for r, s in enumerate([3, 0]):
        n, plen = len(gen.seqs[s]), gen.prompt_lens[s]
        assert b.ids[r, :n].tolist() == gen.seqs[s] and (b.ids[r, n:] == 0).all()
        want = torch.zeros(b.ids.shape[1], dtype=torch.bool)
        want[plen - 1 : n - 1] = True  # positions whose next token is a response token
        assert torch.equal(b.target_mask[r], want)
        a = int(data.offsets[s])
        torch.testing.assert_close(b.hidden[r, :n], data.hidden[a : a + n])
    # the host copies a step counts its rows from: the batch's own mask and labels
    assert b.host_mask is not None and b.host_argmax is not None and b.host_mask.device.type == "cpu"
    assert torch.equal(b.host_mask, b.target_mask) and torch.equal(b.host_argmax.long(), b.argmax)
    sub = data.subset([2, 0])
    assert sub.num_seqs == 2 and torch.equal(sub.tokens, torch.tensor(gen.seqs[2] + gen.seqs[0]))


def test_loss_pairing_row_j_predicts_position_j_plus_1(engine, generated) -> None:  # noqa: ANN001
    """With the head's step-k output replaced by the target's feature at ``j+k+1`` (a perfect
    draft under the pairing), every step is 100% accurate with zero regression loss; one
    position off, it is not."""
    _, gen = generated
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, progress=False)
    head, _ = new_head("eagle", engine.model)
    batch = data.batch(list(range(data.num_seqs)), "cpu", eagle3=False)
    labels = losses.TargetHead(head)

    def oracle(shift: int):  # noqa: ANN202
        return lambda head, ids, feat, steps: [shift_left(batch.hidden, k + shift) for k in range(steps)]

    _, m = losses.compute_loss(head, batch, losses.LossConfig(steps=3), labels, forward=oracle(1))
    assert all(m[f"acc{k}"] == 1.0 and m[f"vloss{k}"] == 0.0 for k in range(3))
    _, m = losses.compute_loss(head, batch, losses.LossConfig(steps=3), labels, forward=oracle(0))
    assert m["acc0"] < 0.9


def test_epoch_batches_pure_and_within_budget() -> None:
    lengths = [5 + (i * 37) % 90 for i in range(200)]
    a = epoch_batches(lengths, 256, seed=1, epoch=2)
    assert a == epoch_batches(lengths, 256, seed=1, epoch=2)
    assert a != epoch_batches(lengths, 256, seed=1, epoch=3)
    assert sorted(s for b in a for s in b) == list(range(200))
    assert all(len(b) == 1 or len(b) * max(lengths[s] for s in b) <= 256 for b in a)
    with pytest.raises(ValueError, match="batch_tokens"):
        epoch_batches(lengths, 0, 0, 0)


def test_prefetched_batches_equal_direct_ones(engine, generated) -> None:  # noqa: ANN001
    """Data kept on the CPU for a GPU run: batches built one step ahead on the worker thread are
    the batches ``DistillData.batch`` builds, whether or not the prefetch guessed right."""
    from updraft.train.data import Prefetcher, feature_bytes_per_token, pick_data_device

    _, gen = generated
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=(0, 1, 1), progress=False)
    loader = Prefetcher(data, torch.device("cpu"), eagle3=True)
    loader.async_copy = True  # the GPU path's machinery, on the CPU
    from concurrent.futures import ThreadPoolExecutor

    loader.pool = ThreadPoolExecutor(1)
    order = [[3, 0], [1], [5, 2, 4], [6]]
    got = [loader.get(s, order[i + 1] if i + 1 < len(order) and i != 1 else None) for i, s in enumerate(order)]
    got.append(loader.get([7], [8]))
    got.append(loader.get([9]))  # a prefetched [8] that is not asked for is dropped
    loader.close()
    for b, s in zip(got, order + [[7], [9]]):
        want = data.batch(s, "cpu", eagle3=True)
        assert b.feature is not None and want.feature is not None and b.size == want.size
        assert all(torch.equal(x, y) for x, y in zip((b.ids, b.hidden, b.argmax, b.target_mask, b.feature, b.host_mask, b.host_argmax),
                                                      (want.ids, want.hidden, want.argmax, want.target_mask, want.feature,
                                                       want.host_mask, want.host_argmax)))
    assert feature_bytes_per_token(576, True) == 576 * 8 + 16
    assert pick_data_device("auto", 10**9, 576, True, torch.device("cpu")).type == "cpu"
    assert pick_data_device("cpu", 10, 576, True, torch.device("cuda")).type == "cpu"


def test_self_instruct_generation_on_a_tiny_target(engine) -> None:  # noqa: ANN001
    """Set v4's self-instruct prompts end to end: stage 1 (the target writes a request) and stage
    2 (that request, cleaned, or the fallback, as a new one-turn conversation) are both kept. A
    random tiny target writes junk: with 3 tokens it can never reach the 4 words of a request,
    so every stage 2 takes the fallback."""
    from updraft.train.data import conversation_ids

    # The shortest ones: the tiny byte-level target's context is 256 tokens.
    pool = build_prompts(1500, seed=2, prompt_set="v4")
    prompts = [p for p in pool if p.category == "self_instruct" and len(p.text) < 205 and len(p.fallback_request) < 150][:5]
    assert len(prompts) == 5
    for max_new in (12, 3):
        gen = collect_sequences(engine, prompts, max_new_tokens=max_new, progress=False)
        assert gen.prompt_index == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
        fallbacks = 0
        for i, p in enumerate(prompts):
            first, second = 2 * i, 2 * i + 1
            response = engine.tokenizer.decode(gen.seqs[first][gen.prompt_lens[first]:], skip_special_tokens=True)
            messages = p.stage2_messages(response)
            assert len(messages) == 1 and messages[0]["role"] == "user" and p.text not in messages[0]["content"]
            assert gen.seqs[second][: gen.prompt_lens[second]] == conversation_ids(engine, messages)
            fallbacks += messages[0]["content"] == p.fallback_request
        assert gen.stats["fallback_requests"] == fallbacks
        if max_new == 3:
            assert fallbacks == len(prompts)


def test_free_turn_generation_on_a_tiny_target(engine) -> None:  # noqa: ANN001
    """Set v6's free turns end to end: stage 1 continues an open user turn (sampled with the
    prompt's seed even in a greedy run) and is not kept; stage 2, the cleaned turn or the
    fallback as a new conversation, is the one training sequence. Reproducible from the seed."""
    from updraft.data import free_turn
    from updraft.sampling_params import SamplingParams
    from updraft.train.data import conversation_ids

    pool = build_prompts(300, seed=2, prompt_set="v6")
    prompts = [p for p in pool if p.open_turn and len(p.fallback_request) < 120][:5]
    assert len(prompts) == 5
    gen = collect_sequences(engine, prompts, max_new_tokens=6, seed=5, progress=False)
    assert gen.prompt_index == [0, 1, 2, 3, 4]  # stage 2 only
    assert gen.stats["user_turn_tokens"] > 0 and gen.stats["requests"] == 10
    turns = []
    for i, p in enumerate(prompts):
        # stage 1 again, alone, with the collector's parameters: the same user turn
        params = SamplingParams(temperature=free_turn.TEMPERATURE, top_p=free_turn.TOP_P, max_tokens=free_turn.MAX_TOKENS,
                                seed=5 * 1_000_003 + 2 * i + 1)
        ids = engine.tokenizer.encode_open_user_turn(p.text)
        req = engine.add_request(ids, params, detokenize=False)
        while engine.has_unfinished():
            engine.step()
        engine.release_finished(req.request_id)
        turns.append(list(req.output_ids))
        text = engine.tokenizer.decode(list(req.output_ids), skip_special_tokens=True)
        messages = p.stage2_messages(text, complete=req.finish_reason != "length")
        assert gen.seqs[i][: gen.prompt_lens[i]] == conversation_ids(engine, messages)
        assert len(gen.seqs[i]) - gen.prompt_lens[i] == 6  # the greedy answer, capped
    assert len({tuple(t) for t in turns}) == 5  # sampled: five different turns
    again = collect_sequences(engine, prompts, max_new_tokens=6, seed=5, progress=False)
    assert again.seqs == gen.seqs
    other = collect_sequences(engine, prompts, max_new_tokens=6, seed=6, progress=False)
    assert other.stats["user_turn_tokens"] != gen.stats["user_turn_tokens"] or other.seqs != gen.seqs


def test_padded_batches_train_as_unpadded_ones(engine, generated) -> None:  # noqa: ANN001
    """``pad_to``: the batch's length is a multiple of it, the real columns are unchanged, and the
    losses and per-step metrics of every unrolled step are those of the unpadded batch (padding
    is masked out of the losses, and causal attention keeps real rows from reading it)."""
    _, gen = generated
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=(0, 1, 1), progress=False)
    head, _ = new_head("eagle3", engine.model, aux_layers=(0, 1, 1))
    labels = losses.TargetHead(head)
    seqs = [3, 0, 5]
    plain = data.batch(seqs, "cpu", eagle3=True)
    padded = data.batch(seqs, "cpu", eagle3=True, pad_to=64)
    n = plain.ids.shape[1]
    assert padded.ids.shape[1] % 64 == 0 and padded.ids.shape[1] - n < 64
    assert padded.ids.shape[1] > n  # the test pads something (the fixture's longest is not a multiple of 64)
    for a, b in zip((plain.ids, plain.target_mask, plain.feature), (padded.ids, padded.target_mask, padded.feature)):
        assert torch.equal(b[:, :n], a)
    assert not padded.target_mask[:, n:].any()
    loss_a, ma = losses.compute_loss(head, plain, losses.LossConfig(steps=3), labels)
    loss_b, mb = losses.compute_loss(head, padded, losses.LossConfig(steps=3), labels)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    assert all(mb[f"acc{k}"] == ma[f"acc{k}"] and mb[f"rows{k}"] == ma[f"rows{k}"] for k in range(3))
