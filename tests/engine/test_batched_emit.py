"""Emitting several tokens at once (a speculative iteration) is exactly emitting them one at a
time: ``TextStream.feed`` against token-by-token detokenisation + stop strings, and
``Engine._emit`` with one batch against the same tokens one per call (stop strings spanning
tokens of one batch, stop ids, max_tokens, lazy text, aborts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from updraft.engine.detokenizer import IncrementalDetokenizer, StopChecker, TextStream
from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

STOPS = ["ab", "b c", "ccc", "a", " "]


@pytest.fixture(scope="module")
def tok(tiny_checkpoint) -> Tokenizer:  # noqa: ANN001
    return Tokenizer.from_file(str(Path(tiny_checkpoint("llama")) / "tokenizer.json"))


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:  # noqa: ANN001
    return LLM(str(tiny_checkpoint("llama")), device="cpu", progress=False).engine


def ids_of(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text).ids


def reference_feed(tok: Tokenizer, prompt: list[int], stop: list[str], tokens: list[int]) -> tuple[str, int | None]:
    """Token by token (what the engine did before batching): the text and the token that
    completed a stop string; without one, the text includes what the end releases."""
    detok, checker = IncrementalDetokenizer(tok, prompt), StopChecker(stop, False)
    out = ""
    for i, t in enumerate(tokens):
        text, stopped = checker.feed(detok.add([t]))
        out += text
        if stopped:
            return out, i
    text, stopped = checker.feed(detok.flush())
    return out + text + ("" if stopped else checker.flush()), None


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet="abc \u00e9\U0001f389", max_size=24),
    stop=st.lists(st.sampled_from(STOPS), max_size=2),
    cuts=st.lists(st.integers(1, 5), max_size=12),
)
def test_text_stream_batches_equal_token_by_token(tok: Tokenizer, text: str, stop: list[str], cuts: list[int]) -> None:
    tokens = ids_of(tok, text)  # one token per UTF-8 byte: batches also split characters
    prompt = ids_of(tok, "hi")
    want_text, want_stop = reference_feed(tok, prompt, stop, tokens)
    ts = TextStream(tok, prompt, True, stop, False)
    got, pos, i = "", None, 0
    for n in cuts + [len(tokens)]:
        batch = tokens[i : i + n]
        if not batch:
            break
        delta, at = ts.feed(batch)
        got += delta
        if at is not None:
            pos = i + at
            break
        i += n
    if pos is None:
        got += ts.finish()
    assert (got, pos) == (want_text, want_stop)


def emit_both(engine: Engine, params: SamplingParams, tokens: list[int], *, stream: bool = True) -> tuple[Request, Request, list, list]:  # noqa: ANN001
    """One request gets ``tokens`` in one ``_emit``, another one token per ``_emit`` (until it
    finishes); returns both and their outputs."""
    prompt = [71, 72]
    batched = engine.add_request(prompt, params, stream_text=stream)
    single = engine.add_request(prompt, params)
    engine._emit(batched, list(tokens), [])
    outs_b, engine._pending = engine._pending, []
    outs_s = []
    for t in tokens:
        if single.finished:
            break
        engine._emit(single, [t], [])
        outs_s += engine._pending
        engine._pending = []
    return batched, single, outs_b, outs_s


def finish(engine: Engine, *reqs: Request) -> None:
    for r in reqs:
        engine.abort(r.request_id)
        engine.release_finished(r.request_id)
    engine._pending = []


@pytest.mark.parametrize(
    ("text", "params", "cut"),
    [
        ("xyab cdef", dict(stop=["b c"]), "xyab c"),  # the stop string spans three tokens of the batch
        ("xyab cdef", dict(stop=["b c"], include_stop_str_in_output=True), "xyab c"),
        ("xyab cdef", dict(stop=["zz", "yab"]), "xyab"),
        ("abcdef", dict(stop=["a"]), "a"),  # first token
        ("abcdef", dict(max_tokens=3), "abc"),
        ("abcdef", dict(stop=["cd"], max_tokens=3), "abc"),  # length comes first
        ("abcdef", dict(stop=["cd"], max_tokens=4), "abcd"),  # stop string on the last allowed token
    ],
)
def test_emit_batch_equals_token_by_token(engine: Engine, tok: Tokenizer, text: str, params: dict, cut: str) -> None:
    p = SamplingParams(temperature=0.0, ignore_eos=True, **{"max_tokens": 50, **params})
    tokens = ids_of(tok, text)
    b, s, outs_b, outs_s = emit_both(engine, p, tokens)
    assert b.output_ids == s.output_ids == ids_of(tok, cut)
    assert b.output_text == s.output_text
    assert (b.finish_reason, b.finished) == (s.finish_reason, True)
    assert "".join(o.new_text for o in outs_b) == b.output_text
    assert [t for o in outs_b for t in o.new_token_ids] == b.output_ids
    if p.stop and not p.include_stop_str_in_output and b.finish_reason == "stop":
        assert not any(x in b.output_text for x in p.stop)  # never text past (or of) the stop
    assert b.row is None and s.row is None  # KV freed on finish
    finish(engine, b, s)


def test_emit_stop_id_inside_batch(engine: Engine, tok: Tokenizer) -> None:
    tokens = ids_of(tok, "abcdef")
    p = SamplingParams(temperature=0.0, max_tokens=50, stop_token_ids=[tokens[2]], ignore_eos=True)
    b, s, outs_b, _ = emit_both(engine, p, tokens)
    assert b.output_ids == s.output_ids == tokens[:3] and b.finish_reason == "stop"
    assert b.output_text == s.output_text == "abc"
    assert outs_b[-1].finished and outs_b[-1].new_token_ids == tokens[:3]


@pytest.mark.parametrize("stop", [[], ["q"], ["zzz"]])
def test_lazy_text_final_output_carries_it_all(engine: Engine, tok: Tokenizer, stop: list[str]) -> None:
    """stream_text=False: no text per step unless stop strings need it; deltas still
    concatenate to the final text, which equals the streamed one."""
    p = SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True, stop=stop)
    lazy = engine.add_request([71, 72], p, stream_text=False)
    streamed = engine.add_request([71, 72], p)
    deltas: dict[str, list[str]] = {lazy.request_id: [], streamed.request_id: []}
    for chunk in ("ab", " c\u00e9", "d q", "rst"):
        for r in (lazy, streamed):
            if not r.finished:
                engine._emit(r, ids_of(tok, chunk), [])
        for o in engine._pending:
            deltas[o.request_id].append(o.new_text)
        engine._pending = []
        if not stop and not lazy.finished:
            assert lazy.output_text == "" and lazy.text_pos == 0  # nothing decoded yet
    assert lazy.output_text == streamed.output_text and lazy.output_ids == streamed.output_ids
    assert "".join(deltas[lazy.request_id]) == lazy.output_text
    assert lazy.finish_reason == streamed.finish_reason
    engine.release_finished(lazy.request_id)
    engine.release_finished(streamed.request_id)


def test_lazy_text_abort_reports_text_so_far(engine: Engine, tok: Tokenizer) -> None:
    p = SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    lazy = engine.add_request([71, 72], p, stream_text=False)
    streamed = engine.add_request([71, 72], p)
    for r in (lazy, streamed):
        engine._emit(r, ids_of(tok, "abc d"), [])
    engine._pending = []
    assert engine.abort(lazy.request_id) and engine.abort(streamed.request_id)
    outs = {o.request_id: o for o in engine._pending}
    assert outs[lazy.request_id].new_text == lazy.output_text == streamed.output_text == "abc d"
    assert outs[streamed.request_id].new_text == ""  # already streamed
    finish(engine, lazy, streamed)


def test_streamed_deltas_concatenate_through_the_fused_iteration(tiny_checkpoint, tmp_path: Path) -> None:  # noqa: ANN001
    """EAGLE fused iteration with overlap (graph emulator), stop strings taken from the plain
    greedy text: each request stops exactly where token-by-token matching stops, and the
    streamed deltas concatenate to the final text."""
    from updraft.testing import repeating_prompts, write_eagle_head

    target = tiny_checkpoint("llama")
    plain = LLM(str(target), device="cpu", progress=False)
    ps = repeating_prompts(4, seed=31)
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    ref = [o.outputs[0] for o in plain.generate(ps, greedy)]
    tk = plain.engine.tokenizer
    stops = [[r.text[6:9]] if len(r.text) > 9 else [] for r in ref]
    spec = {"method": "eagle", "draft_model": str(write_eagle_head(tmp_path / "eagle")), "num_steps": 3, "adaptive": False}
    eng = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4],
              speculative_config=spec).engine
    reqs = [eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, stop=s))
            for p, s in zip(ps, stops)]
    texts = {r.request_id: "" for r in reqs}
    while eng.has_unfinished():
        for o in eng.step():
            texts[o.request_id] += o.new_text
    assert eng.driver is not None and eng.driver.launches > 0
    for r, ref_out, stop, p in zip(reqs, ref, stops, ps):
        want_text, at = reference_feed(tk, p, stop, ref_out.token_ids)
        want_ids = ref_out.token_ids if at is None else ref_out.token_ids[: at + 1]
        assert r.output_ids == want_ids
        assert texts[r.request_id] == r.output_text
        if at is not None:
            assert r.output_text == want_text and r.finish_reason == "stop"
    assert eng.allocator.used_tokens == 0
    eng.allocator.check_consistency()
