"""benchmarks/eval_acceptance.py on a tiny target and a trained-for-nothing head, over stand-in
eval files (the real sets are only read in place, by the benchmark): JSON fields, lossless
outputs in fp32, the per-position histogram adds up, the per-category figures add up, the
plot-only mode."""

from __future__ import annotations

import json

import pytest
import torch

from updraft.train.heads import new_head, save_head


def test_eval_acceptance_end_to_end(tmp_path, monkeypatch, tiny_target, load_benchmark) -> None:  # noqa: ANN001
    evals = tmp_path / "eval-sets"
    evals.mkdir()
    cats = ["writing", "math", "writing"]
    for name in ("mt_bench", "qa"):
        rows = [{"turns": [f"question {i} about {name}?"]} | ({"category": cats[i]} if name == "mt_bench" else {})
                for i in range(3)]
        (evals / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("UPDRAFT_EVAL_DIR", str(evals))
    head, cfg = new_head("eagle", tiny_target.model, seed=1)
    save_head(head, cfg, tmp_path / "head", dtype=torch.float32)
    mod = load_benchmark("eval_acceptance")
    out = tmp_path / "out"
    rc = mod.main(["--model", str(tiny_target.source), "--head", str(tmp_path / "head"), "--sets", "mt_bench,qa",
                   "--limit", "default=3", "--max-tokens", "12", "--speed-prompts", "2", "--accept-batch", "2",
                   "--device", "cpu", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "eval_acceptance.json").read_text())
    assert set(res["sets"]) == {"mt_bench", "qa"} and res["method"] == "eagle" and res["num_steps"] == 5
    assert {"date", "torch", "triton", "device", "commit"} <= set(res["environment"])
    for s in res["sets"].values():
        assert s["prompts"] == 3 and s["outputs_equal"] == s["outputs_compared"] == 2  # lossless in fp32
        assert sum(s["accept_length_histogram"]) == s["verify_steps"] > 0
        assert 1.0 <= s["mean_accept_length"] <= 6.0 and s["speed_bs1"]["spec_tokens"] == s["speed_bs1"]["base_tokens"]
        assert s["draft_vocab_coverage"] is None  # EAGLE-1 drafts the whole vocabulary
    # mt_bench's rows carry categories (the speed prompts and the batched ones both count): the
    # categories' verify steps add up to the set's
    cat = res["sets"]["mt_bench"]["by_category"]
    assert {c: v["prompts"] for c, v in cat.items()} == {"math": 1, "writing": 2}
    assert sum(v["verify_steps"] for v in cat.values()) == res["sets"]["mt_bench"]["verify_steps"]
    assert all(1.0 <= v["mean_accept_length"] <= 6.0 for v in cat.values()) and res["sets"]["qa"]["by_category"] == {}
    if (out / "per_position.png").exists():  # matplotlib present: also the plot-only mode
        assert mod.main(["--plot", str(out / "eval_acceptance.json"), "--out", str(tmp_path / "replot")]) == 0
        assert (tmp_path / "replot" / "per_position.png").stat().st_size > 1000


def test_draft_vocab_reads_a_sharded_eagle3_head(tmp_path, tiny_target, load_benchmark) -> None:  # noqa: ANN001
    """The coverage figure's vocabulary: ``arange + d2t`` of an EAGLE-3 head, found in whichever
    shard holds ``d2t``; None for an EAGLE-1 head."""
    target = tiny_target.model
    ids = torch.arange(1, target.config.vocab_size, 3)
    head, cfg = new_head("eagle3", target, draft_ids=ids, aux_layers=(0, 1, 1), seed=2)
    folder = save_head(head, cfg, tmp_path / "e3", dtype=torch.float32, max_file_bytes=4096)
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    mod = load_benchmark("eval_acceptance")
    assert mod.draft_vocab(str(folder)) == set(ids.tolist())
    e1, cfg1 = new_head("eagle", target, seed=1)
    assert mod.draft_vocab(str(save_head(e1, cfg1, tmp_path / "e1", dtype=torch.float32))) is None


def test_eval_acceptance_limits_keep_the_defaults_of_sets_not_named(load_benchmark) -> None:  # noqa: ANN001
    parse = load_benchmark("eval_acceptance").parse_limits
    assert parse("") == {"mt_bench": 80, "default": 20}
    # naming one set leaves the others where the defaults put them (it once ran every other set in full)
    assert parse("sum=40") == {"mt_bench": 80, "default": 20, "sum": 40}
    assert parse("default=3") == {"default": 3}
    assert parse("sum=0,default=5") == {"default": 5, "sum": None}
    with pytest.raises(ValueError, match="'sum=x' is not NAME=N"):
        parse("sum=x")
    with pytest.raises(ValueError, match="unknown set 'summ'"):
        parse("summ=4")
