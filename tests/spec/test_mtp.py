"""Multi-layer (MTP) drafts: lossless greedy with random K-module heads (v1 / v2, batch 1 and 8,
eager / the per-phase graphs / the fused iteration, under the CPU graph emulator); extends of
any shape leave the draft where a fresh prefill does; a target whose next token is a function of
the current one with modules built to predict it (or to miss it by a known offset), so the
per-position acceptance and the drafts themselves show which module ran at each step; the
modules' states come from the path that ran (failure class 2); a target checkpoint's own
modules; config errors. GPU twin: test_mtp_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.config import ConfigError, SpeculativeConfig, normalize_method
from updraft.errors import CheckpointError
from updraft.llm import LLM
from updraft.models.mtp import MtpHead
from updraft.sampling_params import SamplingParams
from updraft.testing import (
    TINY_VOCAB,
    FunctionTarget,
    repeating_prompts,
    write_function_target,
    write_mtp_head,
)

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def mtp_llm(target: Path, head: Path | None, *, steps: int = 3, version: str = "v2", graphs: str = "off", **kw) -> LLM:  # noqa: ANN003
    """``graphs``: "off" (eager), "phase" (the per-phase path's graphs under the emulator) or
    "fused" (the fused iteration; v2 only, v1 falls back to the per-phase graphs)."""
    # the modules' own drafts: the lookup assist would replace some where the text repeats
    # (tests/spec/test_fused.py covers it)
    cfg: dict = {"method": "mtp", "num_steps": steps, "draft_extend": version, "adaptive": False, "ngram_assist": 0}
    if head is not None:
        cfg["model"] = str(head)
    return LLM(str(target), device="cpu", progress=False, graph_emulate=graphs != "off", disable_fused_iteration=graphs == "phase",
               cuda_graph_bs=kw.pop("cuda_graph_bs", [1, 8]), speculative_config=cfg, **kw)


#: (version, graphs) combinations: v1 has no fused iteration (it needs host accept lengths)
PATHS = [("v2", "off"), ("v2", "phase"), ("v2", "fused"), ("v1", "off"), ("v1", "phase")]


# ---- random heads: lossless --------------------------------------------------------------------
@pytest.fixture(scope="module")
def mtp_heads(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return {k: write_mtp_head(tmp_path_factory.mktemp(f"mtp{k}"), num_modules=k, seed=k) for k in (1, 2)}


def _lossless_cases() -> list[object]:
    """K = 2 (it cycles at step 2) on every path; K = 1 (EAGLE's chain over one module) fused in
    CI, its other paths marked slow."""
    return [pytest.param(k, v, g, marks=[pytest.mark.slow] if k == 1 and g != "fused" else []) for k in (1, 2) for v, g in PATHS]


@pytest.mark.parametrize(("k", "version", "graphs"), _lossless_cases())
def test_mtp_lossless_greedy(target, reference, mtp_heads, k: int, version: str, graphs: str) -> None:  # noqa: ANN001
    """S = 3 over K modules (K = 2 cycles at step 2); batch 1, then 8 of mixed lengths."""
    llm = mtp_llm(target, mtp_heads[k], version=version, graphs=graphs)
    for bsz in (1, 8):
        ps = repeating_prompts(bsz, seed=20 + bsz)
        assert [o.outputs[0].token_ids[:12] for o in llm.generate(ps, GREEDY)] == [r[:12] for r in reference(ps)]
    eng = llm.engine
    stats = eng.spec_stats
    assert stats.num_drafts > 0 and stats.num_draft_tokens == 3 * stats.num_drafts
    assert eng.allocator.used_tokens == 0
    head = eng.spec.proposer.runner.model  # type: ignore[union-attr]
    assert isinstance(head, MtpHead) and head.num_layers == k
    if graphs == "fused":
        assert eng.driver is not None and eng.driver.launches > 0, eng.graph_log
    elif graphs == "phase":
        counts = eng.spec.proposer.chain_counts  # type: ignore[union-attr]
        assert counts.get("chain graph", 0) > 0, counts
        if version == "v2":
            assert eng.spec.proposer.runner.path_counts["DRAFT_EXTEND_V2 graph"] > 0  # type: ignore[union-attr]


@pytest.mark.parametrize("graphs", ["off", "phase", pytest.param("fused", marks=pytest.mark.slow)])
def test_mtp_seeded_sampling_repeats(target, mtp_heads, graphs: str) -> None:  # noqa: ANN001
    """Sampled drafts (each step's distribution from its own module; per-step DRAFT_DECODE
    graphs, one per module step, on the per-phase path) under rejection sampling: a seeded
    request repeats token for token."""
    p = SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=12, ignore_eos=True)
    llm = mtp_llm(target, mtp_heads[2], graphs=graphs)
    ps = repeating_prompts(2, seed=6)
    a = [o.outputs[0].token_ids for o in llm.generate(ps, p)]
    b = [o.outputs[0].token_ids for o in llm.generate(ps, p)]
    assert a == b and all(len(t) == 12 for t in a)
    eng = llm.engine
    if graphs == "phase":
        counts = eng.spec.proposer.runner.path_counts  # type: ignore[union-attr]
        assert counts["DRAFT_DECODE graph"] > 0, counts
    if graphs == "fused":
        assert eng.driver is not None and eng.driver.launches > 0


def _draft_state(llm: LLM, row: int, n: int) -> tuple[int, list[torch.Tensor]]:
    """The first draft of request-pool row ``row`` (committed length ``n``), its feature, the
    modules' kept states and every module's K and V at positions 0..n-2."""
    prop = llm.engine.spec.proposer  # type: ignore[union-attr]
    head, pool = prop.runner.model, prop.runner.kv_pool
    assert isinstance(head, MtpHead) and head.layer_states is not None and prop.next_hidden is not None
    slots = llm.engine.req_pool.req_to_token[row, : n - 1].long()
    kv = [buf[m][slots].clone() for m in range(head.num_layers) for buf in (pool.k_buffer, pool.v_buffer)]
    return int(prop.next_token[row]), [prop.next_hidden[row].clone(), head.layer_states[row].clone(), *kv]


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_extends_equal_a_fresh_prefill(target, reference, mtp_heads, version: str) -> None:  # noqa: ANN001
    """Whatever extends brought the draft to committed length N (prefill, v1 / v2 draft extends
    over accepted and rejected rows, a catch-up after S = 0 steps), its first draft, feature,
    module states and every module's KV at positions <= N - 2 equal those of a prefill of the
    same N - 1 tokens: every extend computes the same states for the same positions."""
    from updraft.testing import scripted_steps

    llm = mtp_llm(target, mtp_heads[2], version=version)
    fresh = mtp_llm(target, mtp_heads[2], version=version)
    eng = llm.engine
    eng.spec.adaptive = scripted_steps([0, 0, 3, 1, 0, 3, 2, 3])  # type: ignore[union-attr]
    p = repeating_prompts(1, seed=12)[0]
    req = eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))  # = reference's
    checked = 0
    while eng.has_unfinished():
        before = eng.spec.adaptive.chosen[0]  # type: ignore[union-attr]
        eng.step()
        if req.finished or req.in_prefill or eng.spec.adaptive.chosen[0] > before:  # type: ignore[union-attr]
            continue
        ref = fresh.engine.add_request(req.all_ids[: req.seq_len - 1], SamplingParams(temperature=0.0, max_tokens=2))
        fresh.engine.step()
        got, want = _draft_state(llm, req.row, req.seq_len), _draft_state(fresh, ref.row, req.seq_len)  # type: ignore[arg-type]
        fresh.engine.abort(ref.request_id)
        assert got[0] == want[0], f"after {req.seq_len} tokens"
        for i, (a, b) in enumerate(zip(got[1], want[1])):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m, i=i: f"state {i} after {req.seq_len} tokens: {m}")
        checked += 1
    assert checked >= 3 and eng.spec.adaptive.chosen[0] > 0  # type: ignore[union-attr]
    assert req.output_ids == reference([p])[0]


# ---- a target whose next token is a function of the current one ---------------------------------
@pytest.fixture(scope="module")
def fn_target(tmp_path_factory: pytest.TempPathFactory) -> FunctionTarget:
    return write_function_target(tmp_path_factory.mktemp("fn-target"), seed=3)


def _check_outputs(fn: FunctionTarget, llm: LLM, ps: list[list[int]]) -> list[dict]:
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == [fn.continuation(p, GREEDY.max_tokens) for p in ps]
    return [o.metrics["spec"] for o in outs]


@pytest.mark.parametrize(("version", "graphs"), PATHS)
def test_each_step_runs_its_module(fn_target, tmp_path, version: str, graphs: str) -> None:  # noqa: ANN001
    """Modules 0 and 1 predict the target, module 2 misses by one: every iteration accepts
    exactly the drafts of steps 0 and 1 (a step that ran the wrong module shows at once)."""
    head = fn_target.write_head(tmp_path / "head", (0, 0, 1))
    llm = mtp_llm(fn_target.folder, head, steps=3, version=version, graphs=graphs)
    for bsz in (1, 8):
        for spec in _check_outputs(fn_target, llm, repeating_prompts(bsz, seed=30 + bsz)):
            n = spec["num_drafts"]
            assert n > 0 and spec["accepted_per_position"] == [n, n, 0], spec
            assert spec["mean_accept_length"] == 3.0


@pytest.mark.parametrize("graphs", ["off", "phase"])
def test_chain_cycles_modules(fn_target, tmp_path, graphs: str) -> None:  # noqa: ANN001
    """K = 3 modules off by 0, 1, 2, S = 5: draft j comes from module j mod 3 fed with draft
    j - 1 (the chain graph and the per-step path alike)."""
    head = fn_target.write_head(tmp_path / "head", (0, 1, 2))
    llm = mtp_llm(fn_target.folder, head, steps=5, graphs=graphs)
    eng = llm.engine
    prompt = repeating_prompts(1, seed=5)[0]
    req = eng.add_request(prompt, GREEDY)
    eng.step()  # the prefill: the draft's extend gives the first draft
    assert req.output_ids and eng.spec is not None
    drafts = eng.spec.proposer.propose([req], 5).tokens[0].tolist()
    want, tok = [], req.output_ids[-1]
    for j in range(5):
        tok = (fn_target.next_of[tok] + j % 3) % TINY_VOCAB
        want.append(tok)
    assert drafts == want
    assert eng.spec.proposer.chain_counts == ({"chain graph": 1} if graphs == "phase" else {})


def test_module_states_come_from_the_path_that_ran(fn_target, tmp_path) -> None:  # noqa: ANN001
    """Failure class 2: batches above the largest graph extend eagerly, smaller ones replay the
    graph; after every step the modules' states (what the next extend reads) equal those of an
    engine without graphs."""
    head = fn_target.write_head(tmp_path / "head", (0, 0, 0))
    engines = [mtp_llm(fn_target.folder, head, graphs="phase", cuda_graph_bs=[1, 2]).engine, mtp_llm(fn_target.folder, head).engine]
    ps = repeating_prompts(5, seed=9)
    reqs = [[eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=6 + 3 * i, ignore_eos=True)) for i, p in enumerate(ps)]
            for eng in engines]
    while engines[1].has_unfinished():
        for eng in engines:
            eng.step()
        live = [(a.row, b.row) for a, b in zip(*reqs) if a.row is not None and a.output_ids]
        assert [a.output_ids for a in reqs[0]] == [b.output_ids for b in reqs[1]]
        states = [eng.spec.proposer.runner.model.layer_states for eng in engines]  # type: ignore[union-attr]
        for ra, rb in live:
            torch.testing.assert_close(states[0][ra], states[1][rb], atol=1e-4, rtol=1e-4)
    counts = engines[0].spec.proposer.runner.path_counts  # type: ignore[union-attr]
    assert any("DRAFT_EXTEND_V2 eager: batch size" in k for k in counts) and counts["DRAFT_EXTEND_V2 graph"] > 0, counts
    # a batch step that raised would be re-run request by request (each then fits a graph)
    assert engines[0].stats.batch_failures == 0


def test_target_checkpoint_own_modules(fn_target, tmp_path) -> None:  # noqa: ANN001
    """``method: mtp`` without a draft model reads the target checkpoint's own modules
    (model.layers.{L..}); the target's loader leaves them alone."""
    import shutil

    folder = tmp_path / "target-with-mtp"
    shutil.copytree(fn_target.folder, folder)
    sd = load_file(str(folder / "model.safetensors"))
    for m in range(2):
        sd.update(fn_target.module_tensors(f"model.layers.{1 + m}", 0))
    save_file(sd, str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, num_nextn_predict_layers=2)))
    llm = mtp_llm(folder, None, steps=2)
    for spec in _check_outputs(fn_target, llm, repeating_prompts(2, seed=4)):
        assert spec["accepted_per_position"] == [spec["num_drafts"]] * 2, spec


# ---- configuration -------------------------------------------------------------------------
def test_mtp_method_names() -> None:
    for name in ("MTP", "NEXTN", "deepseek_mtp"):
        assert normalize_method(name) == "mtp"
    cfg = SpeculativeConfig.from_dict({"method": "mtp", "num_speculative_tokens": 2})
    assert cfg.draft_model is None and cfg.uses_draft_model and not cfg.needs_draft_model
    with pytest.raises(ConfigError, match="token_map"):
        SpeculativeConfig(method="mtp", token_map="map.pt").validate()


def test_mtp_config_errors(fn_target, target, tmp_path) -> None:  # noqa: ANN001
    no_cycle = fn_target.write_head(tmp_path / "nocycle", (0, 0), mtp_cycle=False)
    with pytest.raises(ConfigError, match=r"num_steps=3 .* 2 MTP modules .*mtp_cycle"):
        mtp_llm(fn_target.folder, no_cycle, steps=3)
    with pytest.raises(CheckpointError, match="no MTP modules .*num_nextn_predict_layers is None"):
        mtp_llm(target, None)  # a plain target has none of its own
    bad = fn_target.write_head(tmp_path / "bad", (0,))
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(dict(cfg, num_nextn_predict_layers="2")))
    with pytest.raises(CheckpointError, match="num_nextn_predict_layers='2' is invalid"):
        mtp_llm(fn_target.folder, bad)
    other = write_mtp_head(tmp_path / "other", num_modules=1, target_layers=2)  # its module: model.layers.2
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=1)))  # says model.layers.1
    with pytest.raises(CheckpointError, match="missing .* tensors, e.g. layers.0.enorm.weight"):
        mtp_llm(fn_target.folder, other)
