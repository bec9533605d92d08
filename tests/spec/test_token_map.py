"""EAGLE-1 token maps (``--speculative-token-map``): greedy output equals plain greedy in every
phase the head runs (eager v1/v2, the per-phase graphs, the fused iteration); drafts are only
mapped ids; a map over the whole vocabulary (permuted) reproduces the unmapped head's drafts;
sampled drafts carry q over target ids and rejection sampling stays exact; bad map files give
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from updraft.config import ConfigError, SpeculativeConfig, parse_speculative_config
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec import fused, rejection_kernels
from updraft.spec.token_map import load_token_map, main, most_frequent, save_token_map
from updraft.spec.verify import rejection_accept
from updraft.testing import VOCAB
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
GRAPHS = {"graph_emulate": True, "cuda_graph_bs": [1, 2, 4]}
#: phase paths: engine keyword arguments, draft extend
PATHS = {
    "eager-v2": ({}, "v2"),
    "eager-v1": ({}, "v1"),
    "fused": (GRAPHS, "v2"),
    "graphs-v2": (dict(GRAPHS, disable_fused_iteration=True), "v2"),
    "graphs-v1": (dict(GRAPHS, disable_fused_iteration=True), "v1"),
}


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor]:
    ids = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(3))[: VOCAB // 3]
    return save_token_map(ids, tmp_path_factory.mktemp("map") / "map.pt"), ids


def llm_with(target, head, path: str, token_map: Path | None, **extra: object) -> LLM:  # noqa: ANN001
    kw, ext = PATHS[path]
    kw = dict(kw, **extra)
    # the head's own (mapped) drafts: no lookup assist, whose drafts are any token of the history
    cfg = {"method": "eagle", "model": str(head), "num_speculative_tokens": 3, "draft_extend": ext, "adaptive": False,
           "ngram_assist": 0}
    if token_map is not None:
        cfg["token_map"] = str(token_map)
    return LLM(str(target), device="cpu", progress=False, speculative_config=cfg, **kw)


def record_drafts(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Every draft block the engine verifies: the per-phase proposer's output and, for the fused
    iteration, the drafts its (emulated, re-executed) graph body passes to ``commit`` (which
    accepts them)."""
    seen: list[torch.Tensor] = []
    prop = llm.engine.spec.proposer  # type: ignore[union-attr]
    propose = prop.propose

    def wrapped(reqs, n):  # noqa: ANN001, ANN202
        d = propose(reqs, n)
        seen.append(d.tokens.clone())
        return d

    monkeypatch.setattr(prop, "propose", wrapped)
    commit = fused.commit

    def committed(out, rows, n, res, state, *rest):  # noqa: ANN001, ANN002, ANN202
        seen.append(res.drafts.clone())
        return commit(out, rows, n, res, state, *rest)

    monkeypatch.setattr(fused, "commit", committed)
    return seen


@pytest.mark.parametrize("path", list(PATHS))
def test_greedy_with_token_map_equals_plain_and_drafts_are_mapped(target, reference, eagle_head, hot, path: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    file, ids = hot
    llm = llm_with(target, eagle_head, path, file)
    seen = record_drafts(llm, monkeypatch)
    ps = prompts(4, seed=21)
    assert [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)] == reference(ps)
    eng = llm.engine
    if path == "fused":
        assert eng.driver is not None and eng.driver.launches > 0
    if path.startswith("graphs"):
        assert set(eng.spec.proposer.chain_counts) == {"chain graph"}, eng.spec.proposer.chain_counts  # type: ignore[union-attr]
    drafts = torch.cat([d.reshape(-1) for d in seen])
    assert drafts.numel() > 20
    assert torch.isin(drafts, ids).all(), sorted(set(drafts.tolist()) - set(ids.tolist()))
    head = eng.spec.proposer.runner.model  # type: ignore[union-attr]
    assert head.draft_vocab_size == ids.numel() and "hot_lm_head" not in head.state_dict()


@pytest.mark.parametrize("path", ["eager-v2", "fused"])
def test_full_vocabulary_map_reproduces_unmapped_drafts(target, eagle_head, tmp_path, path: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A permutation of the whole vocabulary: logit index != token id, so a missing or wrong
    mapping anywhere changes the drafts. (Graph sizes 1-3 for 3 requests: no padding rows,
    whose drafts come from a zero feature and legitimately differ.)"""
    perm = save_token_map(torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1)), tmp_path / "perm.json")
    ps = prompts(3, seed=8)
    runs = []
    for token_map in (None, perm):
        llm = llm_with(target, eagle_head, path, token_map, **({"cuda_graph_bs": [1, 2, 3]} if path == "fused" else {}))
        seen = record_drafts(llm, monkeypatch)
        outs = [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)]
        runs.append((outs, torch.cat([d.reshape(-1) for d in seen])))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1].numel() > 0 and torch.equal(runs[0][1], runs[1][1])


def test_sampled_drafts_keep_rejection_sampling_exact(target, eagle_head, hot) -> None:  # noqa: ANN001
    """The per-phase proposer's q is over target ids (zero outside the map, summing to 1) and
    the draft is drawn from it: rejection sampling against a target distribution p emits exactly
    p (chi-square over 4000 seeded rows, one draft each)."""
    file, ids = hot
    prop = llm_with(target, eagle_head, "eager-v2", file).engine.spec.proposer  # type: ignore[union-attr]
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, ids.numel(), generator=g) * 2
    n = 4000
    params = SamplingParams(temperature=0.9, top_k=40)
    reqs = [SimpleNamespace(params=params, generator=torch.Generator().manual_seed(i)) for i in range(n)]
    tok, q = prop._choose(reqs, logits.expand(n, -1))
    assert q is not None and q.shape == (n, VOCAB)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[ids] = False
    assert q[:, outside].abs().sum() == 0 and torch.allclose(q.sum(-1), torch.ones(n))
    assert torch.isin(tok, ids).all() and (q.gather(1, tok[:, None]) > 0).all()
    p = torch.softmax(torch.randn(VOCAB, generator=g), -1)
    p[ids[:5]] *= 40  # overlap with the draft's likely tokens so that acceptances happen
    p /= p.sum()
    gens = [torch.Generator().manual_seed(10_000 + i) for i in range(n)]
    accept, emitted = rejection_accept(tok[:, None], q[:, None], p.expand(n, 2, VOCAB), gens)
    assert 0 < int((accept == 2).sum()) < n
    obs = np.bincount(emitted[:, 0].numpy(), minlength=VOCAB)
    exp = p.double().numpy() * n
    exp *= n / exp.sum()
    big = exp >= 5
    assert chisquare(np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())).pvalue > 1e-4


def test_fused_sampled_drafts_are_mapped(target, eagle_head, hot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    file, ids = hot
    llm = llm_with(target, eagle_head, "fused", file)
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    orig = rejection_kernels.sampled_accept

    def accept(logits, drafts, cand, q, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append((drafts.clone(), cand.clone(), q.clone()))
        return orig(logits, drafts, cand, q, *a, **kw)

    monkeypatch.setattr(rejection_kernels, "sampled_accept", accept)
    params = SamplingParams(temperature=0.8, top_p=0.95, seed=3, max_tokens=12, ignore_eos=True)
    outs = llm.generate(prompts(2, seed=4), params)
    assert all(len(o.outputs[0].token_ids) == 12 for o in outs)
    assert seen
    for drafts, cand, q in seen[1:]:  # the first is the capture's warm-up on padding rows
        if drafts.shape[1] == 0:
            continue
        real = q.sum(-1) > 0  # [B, S]: rows of real requests
        # every candidate with mass is a mapped (target) id, and each draft is one of them
        assert torch.isin(cand[q > 0], ids).all()
        assert torch.isin(drafts[real], ids).all()
        hit = (cand == drafts[..., None]) & (q > 0)
        assert hit.any(-1)[real].all()


def _one_line_error(path: Path, vocab: int = VOCAB) -> str:
    with pytest.raises(ConfigError) as exc:
        load_token_map(path, vocab)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_bad_token_map_files(tmp_path: Path) -> None:
    (tmp_path / "range.json").write_text(json.dumps([1, 2, VOCAB + 7]))
    assert f"token id {VOCAB + 7} is outside" in _one_line_error(tmp_path / "range.json")
    (tmp_path / "neg.txt").write_text("4 5\n-2\n")
    assert "token id -2 is outside" in _one_line_error(tmp_path / "neg.txt")
    torch.save(torch.tensor([3, 9, 3]), tmp_path / "dup.pt")
    assert "token id 3 appears more than once" in _one_line_error(tmp_path / "dup.pt")
    (tmp_path / "empty.json").write_text("[]")
    assert "is empty" in _one_line_error(tmp_path / "empty.json")
    (tmp_path / "empty.txt").write_text("\n")
    assert "is empty" in _one_line_error(tmp_path / "empty.txt")
    torch.save(torch.tensor([0.5, 1.0]), tmp_path / "float.pt")
    assert "torch.float32" in _one_line_error(tmp_path / "float.pt")
    torch.save(torch.zeros(2, 2, dtype=torch.long), tmp_path / "2d.pt")
    assert "shape (2, 2)" in _one_line_error(tmp_path / "2d.pt")
    (tmp_path / "word.txt").write_text("1 2 three")
    assert "entry 'three'" in _one_line_error(tmp_path / "word.txt")
    (tmp_path / "obj.json").write_text('{"ids": [1]}')
    assert "holds a dict" in _one_line_error(tmp_path / "obj.json")
    (tmp_path / "bad.json").write_text("[1, 2")
    assert "not valid JSON" in _one_line_error(tmp_path / "bad.json")
    (tmp_path / "junk.pt").write_bytes(b"not a tensor")
    assert "cannot be read" in _one_line_error(tmp_path / "junk.pt")
    assert "not found" in _one_line_error(tmp_path / "nowhere.pt")


def test_token_map_config_flags_and_errors(target, eagle_head, hot) -> None:  # noqa: ANN001
    from updraft.cli import build_parser, engine_config_from_args

    file, ids = hot
    cfg = parse_speculative_config({"method": "eagle", "model": "x", "speculative_token_map": str(file)})
    assert cfg is not None and cfg.token_map == str(file)
    args = build_parser().parse_args(["generate", "--prompt", "hi", "--speculative-algorithm", "EAGLE",
                                      "--speculative-draft-model-path", "x", "--speculative-token-map", str(file)])
    spec = engine_config_from_args(args).speculative
    assert spec is not None and spec.token_map == str(file)
    with pytest.raises(ConfigError, match="EAGLE-1 heads") as exc:
        SpeculativeConfig(method="eagle3", draft_model="x", token_map=str(file)).validate()
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="outside the target vocabulary"):
        bad = file.with_name("small.json")
        bad.write_text(json.dumps([0, VOCAB]))
        LLM(str(target), device="cpu", progress=False,
            speculative_config={"method": "eagle", "model": str(eagle_head), "token_map": str(bad)})


def test_build_token_map_from_counts_and_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = torch.tensor([0, 5, 1, 5, 9, 0, 2])
    assert most_frequent(counts, 4).tolist() == [1, 3, 4, 6]  # ties: lower id first; sorted
    assert most_frequent(torch.zeros(5), 3).tolist() == [0, 1, 2]
    torch.save(counts, tmp_path / "counts.pt")
    assert main(["--counts", str(tmp_path / "counts.pt"), "--size", "3", "--out", str(tmp_path / "a.pt")]) == 0
    assert load_token_map(tmp_path / "a.pt", 7).tolist() == [1, 3, 4]
    (tmp_path / "t1.txt").write_text("4 4 4 2 2 9")
    (tmp_path / "t2.json").write_text(json.dumps([9, 9, 9, 9, 1]))
    out = tmp_path / "b.txt"
    assert main(["--tokens", str(tmp_path / "t1.txt"), str(tmp_path / "t2.json"), "--vocab-size", "10",
                 "--size", "2", "--out", str(out)]) == 0
    assert load_token_map(out, 10).tolist() == [4, 9]
    assert "wrote 2 token ids" in capsys.readouterr().out
    assert main(["--tokens", str(tmp_path / "t1.txt"), "--vocab-size", "5", "--out", str(out)]) == 2
    assert "token id 9 is outside" in capsys.readouterr().out
