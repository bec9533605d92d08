"""The default model (SmolLM2-135M-Instruct, Q4_1 GGUF) in fp32 on CPU: greedy tokens equal
transformers' on the same GGUF, and n-gram speculation on the summarisation set equals plain
greedy."""

from __future__ import annotations

import pytest
import torch

from updraft.bench.prompts import eval_dir, load_prompts
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

CHATS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain what a hash table is.",
    "List three uses of copper.",
    "How do I reverse a list in Python?",
]


@pytest.fixture(scope="module")
def llm(smollm2_gguf) -> LLM:  # noqa: ANN001
    return LLM(str(smollm2_gguf), device="cpu", dtype="float32", progress=False)


def test_greedy_64_tokens_equal_transformers(llm: LLM, smollm2_gguf) -> None:  # noqa: ANN001
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32
    ).eval()
    token_lists = [llm.render_chat([{"role": "user", "content": c}]) for c in CHATS]
    ours = llm.generate(token_lists, SamplingParams(temperature=0, max_tokens=64))
    eos = llm.engine.eos_ids
    for ids, out in zip(token_lists, ours):
        with torch.no_grad():
            gen = hf.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=sorted(eos), pad_token_id=2)
        theirs = gen[0, len(ids) :].tolist()
        if any(t in eos for t in theirs):
            theirs = theirs[: next(i for i, t in enumerate(theirs) if t in eos) + 1]
        assert out.outputs[0].token_ids == theirs, f"prompt {ids[-8:]}: {out.outputs[0].text!r}"


def _sum_prompts(llm: LLM, n: int) -> list[list[int]]:
    if not (eval_dir() / "sum.jsonl").is_file():
        pytest.skip(f"eagle-eval data not found at {eval_dir()}")
    return [llm.render_chat([{"role": "user", "content": p}]) for p in load_prompts("sum", limit=n)]


def _ngram_matches_greedy(llm: LLM, smollm2_gguf, n: int, max_tokens: int) -> float:  # noqa: ANN001
    ps = _sum_prompts(llm, n)
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    ref = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    spec = LLM(
        str(smollm2_gguf), device="cpu", dtype="float32", progress=False,
        speculative_config={"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4},
    )
    got = [o.outputs[0].token_ids for o in spec.generate(ps, params)]
    mismatched = [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
    assert not mismatched, f"prompts {mismatched} differ from plain greedy"
    stats = spec.engine.spec_stats
    print(f"\nn-gram on sum ({n} prompts): mean accept length {stats.mean_accept_length:.3f} (counts the bonus token), "
          f"acceptance rate {stats.acceptance_rate:.3f}, per position {[round(r, 3) for r in stats.per_position_rate()]}")
    return stats.mean_accept_length


def test_ngram_on_sum_equals_greedy(llm: LLM, smollm2_gguf) -> None:  # noqa: ANN001
    # 6 prompts (articles of 400-1,400 tokens: prefill is most of the time on 2 CPU cores); the
    # whole set is the slow test below
    assert _ngram_matches_greedy(llm, smollm2_gguf, n=6, max_tokens=48) > 1.0


@pytest.mark.slow
def test_ngram_on_all_80_sum_prompts(llm: LLM, smollm2_gguf) -> None:  # noqa: ANN001
    assert _ngram_matches_greedy(llm, smollm2_gguf, n=80, max_tokens=128) > 1.0
