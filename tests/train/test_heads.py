"""New heads and ``save_head``: the published key layout, d2t/t2d, optional embedding copy,
and a save -> ``load_draft_head`` round trip that serves the same outputs."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from updraft.models.eagle import Eagle3Head, EagleHead, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.train.forward import head_logits, unroll
from updraft.train.heads import new_head, save_head, select_draft_vocab, vocab_maps

EAGLE_KEYS = {
    "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight",
}
EAGLE3_KEYS = {
    "fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
}


def _probe(target, method: str, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Random token ids [1, length] and target features of the head's input width."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (1, length), generator=g)
    feat = torch.randn(1, length, (3 if method == "eagle3" else 1) * target.config.hidden_size, generator=g)
    return ids, feat


def test_draft_vocab_and_maps() -> None:
    counts = torch.tensor([0, 5, 1, 5, 9, 0, 2])
    ids = select_draft_vocab(counts, 4)
    assert ids.tolist() == [1, 3, 4, 6]  # most frequent, ties by lower id, sorted
    d2t, t2d = vocab_maps(ids, 7)
    assert (torch.arange(4) + d2t).tolist() == ids.tolist()
    assert t2d.tolist() == [False, True, False, True, True, False, True]
    assert select_draft_vocab(torch.zeros(5), 3).tolist() == [0, 1, 2]  # unseen tokens fill in id order
    # `first` ranks ahead of any count: all of them when growing, their most frequent when shrinking
    assert select_draft_vocab(counts, 4, first=torch.tensor([0, 5])).tolist() == [0, 1, 4, 5]
    assert select_draft_vocab(counts, 1, first=torch.tensor([0, 2, 5])).tolist() == [2]


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_save_load_round_trip(tmp_path, tiny_target, method: str) -> None:  # noqa: ANN001
    target = tiny_target.model
    v = target.config.vocab_size
    draft = torch.arange(3, v, 3) if method == "eagle3" else None
    head, cfg = new_head(method, target, draft_ids=draft, aux_layers=(0, 1, 1) if method == "eagle3" else None, seed=4)
    with torch.no_grad():  # move off the init so a dropped tensor would show
        for p in head.parameters():
            p.add_(0.01 * torch.randn_like(p))
    folder = save_head(head, cfg, tmp_path / method, dtype=torch.float32)
    sd = load_file(str(folder / "model.safetensors"))
    conf = json.loads((folder / "config.json").read_text())
    if method == "eagle":
        assert set(sd) == EAGLE_KEYS and conf["architectures"] == ["LlamaForCausalLMEagle"]
    else:
        assert set(sd) == EAGLE3_KEYS and conf["architectures"] == ["LlamaForCausalLMEagle3"]
        assert conf["draft_vocab_size"] == draft.numel() and conf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 1]
        assert sd["d2t"].dtype == torch.int64 and torch.equal(torch.arange(draft.numel()) + sd["d2t"], draft)
        assert sd["t2d"].dtype == torch.bool and sd["t2d"].sum() == draft.numel() and sd["t2d"][draft].all()
    loaded = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(loaded, EagleHead if method == "eagle" else Eagle3Head)
    assert loaded.shared.own_embed is None  # the target's embedding is shared
    ref = {k: t for k, t in head.state_dict().items()}
    for k, t in loaded.state_dict().items():
        if k in ref:
            assert torch.equal(t, ref[k]), k
    ids, feat = _probe(target, method, 12, 0)
    with torch.no_grad():
        a = head_logits(head, unroll(head, ids, feat, 2)[1])
        b = head_logits(loaded, unroll(loaded, ids, feat, 2)[1])
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_wider_head_saves_loads_and_drafts(tmp_path, tiny_target, method: str) -> None:  # noqa: ANN001
    """--head-intermediate-size: a head whose MLP is wider than the target's keeps that width
    through save and load (config.json and the weights), and the loaded head computes the same."""
    target = tiny_target.model
    wide = 3 * target.config.intermediate_size
    draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
    head, cfg = new_head(method, target, draft_ids=draft, aux_layers=(0, 1, 1) if method == "eagle3" else None,
                         seed=2, intermediate_size=wide)
    assert cfg["intermediate_size"] == wide
    folder = save_head(head, cfg, tmp_path / method, dtype=torch.float32)
    sd = load_file(str(folder / "model.safetensors"))
    gate = next(t for k, t in sd.items() if k.endswith("gate_proj.weight"))
    assert tuple(gate.shape) == (wide, target.config.hidden_size)
    loaded = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert loaded.config.intermediate_size == wide
    ids, feat = _probe(target, method, 10, 1)
    with torch.no_grad():
        torch.testing.assert_close(head_logits(loaded, unroll(loaded, ids, feat, 2)[1]),
                                   head_logits(head, unroll(head, ids, feat, 2)[1]))


def test_warm_start_keeps_the_source_heads_width(tmp_path, tiny_target) -> None:  # noqa: ANN001
    """--init-from a wider head: the new run's head takes the saved head's MLP width and weights,
    whatever --head-intermediate-size says."""
    from updraft.train.checkpoint import warm_start
    from updraft.train.config import TrainConfig

    target = tiny_target.model
    wide = 2 * target.config.intermediate_size
    head, cfg = new_head("eagle", target, seed=5, intermediate_size=wide)
    folder = save_head(head, cfg, tmp_path / "wide", dtype=torch.float32)
    started = warm_start(TrainConfig(out=str(tmp_path / "o"), method="eagle", init_from=str(folder)), target,
                         torch.device("cpu"))
    assert started is not None
    again, again_cfg = started
    assert again_cfg["intermediate_size"] == wide
    for k, t in head.state_dict().items():
        assert torch.equal(again.state_dict()[k], t), k


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_deeper_head_saves_loads_and_drafts(tmp_path, tiny_target, method: str) -> None:  # noqa: ANN001
    """--head-layers 3: EAGLE-3 keeps its mid layer and writes the standard layers after it as
    ``layers.1.*`` / ``layers.2.*`` (the loader counts them from the tensors, whatever the config
    says); EAGLE-1 writes ``layers.0..2``. The loaded head computes the same and serves a KV pool
    of three layers."""
    target = tiny_target.model
    draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
    head, cfg = new_head(method, target, draft_ids=draft, aux_layers=(0, 1, 1) if method == "eagle3" else None,
                         seed=2, num_layers=3)
    assert cfg["num_hidden_layers"] == 3
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.01 * torch.randn_like(p))
    folder = save_head(head, cfg, tmp_path / method, dtype=torch.float32)
    names = set(load_file(str(folder / "model.safetensors")))
    layer_ids = {k.split(".")[1] for k in names if k.startswith("layers.")}
    assert layer_ids == ({"1", "2"} if method == "eagle3" else {"0", "1", "2"})
    # A config that copies the target's layer count: the tensors decide.
    conf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(conf, num_hidden_layers=30 if method == "eagle3" else 3)))
    loaded = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert loaded.config.num_layers == 3
    ids, feat = _probe(target, method, 10, 1)
    with torch.no_grad():
        torch.testing.assert_close(head_logits(loaded, unroll(loaded, ids, feat, 3)[2]),
                                   head_logits(head, unroll(head, ids, feat, 3)[2]))


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_growing_a_head_starts_as_the_source(tmp_path, tiny_target, method: str) -> None:  # noqa: ANN001
    """--init-from a 1-layer head with --head-layers 2: the added layer starts as the identity
    (zero o_proj and down_proj), so every draft step of the grown head equals the source's; its
    input projections are random, so training moves it off the identity. Shrinking is refused."""
    from updraft.train.checkpoint import warm_start
    from updraft.train.config import TrainConfig

    target = tiny_target.model
    draft = torch.arange(1, target.config.vocab_size, 3) if method == "eagle3" else None
    src, cfg = new_head(method, target, draft_ids=draft, aux_layers=(0, 1, 1) if method == "eagle3" else None, seed=6)
    with torch.no_grad():
        for p in src.parameters():
            p.add_(0.02 * torch.randn_like(p))
    folder = save_head(src, cfg, tmp_path / "src", dtype=torch.float32)
    run = TrainConfig(out=str(tmp_path / "o"), method=method, init_from=str(folder), head_layers=2).validate()
    started = warm_start(run, target, torch.device("cpu"))
    assert started is not None
    grown, grown_cfg = started
    assert grown.config.num_layers == 2 and grown_cfg["num_hidden_layers"] == 2
    added = grown.layers["1"] if isinstance(grown, Eagle3Head) else grown.layers[1]
    assert not added.self_attn.o_proj.weight.any() and not added.mlp.down_proj.weight.any()
    assert added.self_attn.qkv_proj.weight.abs().sum() > 0
    ids, feat = _probe(target, method, 11, 2)
    with torch.no_grad():
        for a, b in zip(unroll(grown, ids, feat, 3), unroll(src, ids, feat, 3), strict=True):
            torch.testing.assert_close(head_logits(grown, a), head_logits(src, b))
    deep = save_head(grown, grown_cfg, tmp_path / "deep", dtype=torch.float32)
    with pytest.raises(ValueError, match="head_layers=1: init_from=.* has 2 layers"):
        warm_start(TrainConfig(out=str(tmp_path / "o"), method=method, init_from=str(deep), head_layers=1),
                   target, torch.device("cpu"))


def test_bf16_save_is_small_and_embedding_optional(tmp_path, tiny_target) -> None:  # noqa: ANN001
    target = tiny_target.model
    head, cfg = new_head("eagle", target)
    small = save_head(head, cfg, tmp_path / "a")
    big = save_head(head, cfg, tmp_path / "b", include_embedding=True)
    sd = load_file(str(big / "model.safetensors"))
    assert "embed_tokens.weight" in sd and "embed_tokens.weight" not in load_file(str(small / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in sd.values())
    assert json.loads((small / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with_embed = load_draft_head(big, target, torch.float32, torch.device("cpu"))
    assert with_embed.shared.own_embed is not None
    assert not list(tmp_path.glob("*/.*.tmp"))  # written atomically, nothing left behind


def test_sharded_save_loads_as_one_and_merges(tmp_path, tiny_target) -> None:  # noqa: ANN001
    """A head larger than ``max_file_bytes`` is written as HF shards with an index (each file at
    most that size, so a run can bring it back in small files); it loads as the one-file head
    does, a later one-file save leaves no stale shard behind, and ``merge_shards`` joins them."""
    from updraft.train.heads import INDEX, merge_shards

    target = tiny_target.model
    head, cfg = new_head("eagle3", target, draft_ids=torch.arange(0, target.config.vocab_size, 2), aux_layers=(0, 1, 1), seed=2)
    one = load_file(str(save_head(head, cfg, tmp_path / "one", dtype=torch.float32) / "model.safetensors"))
    limit = max(t.numel() * t.element_size() for t in one.values()) + 1
    folder = save_head(head, cfg, tmp_path / "sharded", dtype=torch.float32, max_file_bytes=limit)
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 3 and not (folder / "model.safetensors").exists()
    assert all(p.stat().st_size <= limit + 4096 for p in shards)  # + the safetensors header
    index = json.loads((folder / INDEX).read_text())
    assert set(index["weight_map"]) == set(one) and set(index["weight_map"].values()) == {p.name for p in shards}
    merged = {k: v for p in shards for k, v in load_file(str(p)).items()}
    assert merged.keys() == one.keys() and all(torch.equal(merged[k], one[k]) for k in one)
    a = load_draft_head(tmp_path / "one", target, torch.float32, torch.device("cpu")).state_dict()
    b = load_draft_head(folder, target, torch.float32, torch.device("cpu")).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert merge_shards(folder) == folder / "model.safetensors"
    assert not list(folder.glob("model-*")) and not (folder / INDEX).exists()
    again = load_file(str(folder / "model.safetensors"))
    assert all(torch.equal(again[k], one[k]) for k in one)


@pytest.mark.parametrize("size", [150, 60])
def test_warm_start_resizes_the_draft_vocabulary(tmp_path, tiny_target, size: int) -> None:  # noqa: ANN001
    """--init-from an EAGLE-3 head with --resize-draft-vocab: the vocabulary is re-chosen at the
    new size with the source's tokens first; a kept token keeps its trained row (its logit is
    unchanged), a new token starts from a zero row (logit 0: the target's rows are the wrong scale
    for a trained head's feature), and every other weight is the source's."""
    from updraft.train.checkpoint import warm_start
    from updraft.train.config import TrainConfig

    target = tiny_target.model
    vocab = target.config.vocab_size
    gen = torch.Generator().manual_seed(3)
    src_ids = torch.randperm(vocab, generator=gen)[:100].sort().values
    head, cfg = new_head("eagle3", target, draft_ids=src_ids, aux_layers=(0, 1, 1), seed=5)
    with torch.no_grad():
        head.lm_head.weight.add_(torch.randn(head.lm_head.weight.shape, generator=gen))  # "trained" rows
    folder = save_head(head, cfg, tmp_path / "src", dtype=torch.float32)
    counts = torch.randint(0, 50, (vocab,), generator=gen)
    conf = TrainConfig(out=str(tmp_path / "o"), method="eagle3", init_from=str(folder), draft_vocab_size=size,
                       resize_draft_vocab=True)
    conf.validate()
    started = warm_start(conf, target, torch.device("cpu"), counts)
    assert started is not None
    again, again_cfg = started
    assert isinstance(again, Eagle3Head) and again_cfg["draft_vocab_size"] == size
    ids = again.to_target_ids(torch.arange(size))
    assert ids.tolist() == select_draft_vocab(counts, size, first=src_ids).tolist()
    src_row = {int(t): i for i, t in enumerate(src_ids)}
    for j, t in enumerate(ids.tolist()):
        want = head.lm_head.weight[src_row[t]] if t in src_row else torch.zeros(target.config.hidden_size)
        assert torch.equal(again.lm_head.weight[j], want), t
    assert (size >= 100) == set(src_ids.tolist()).issubset(ids.tolist())
    if size < 100:  # shrinking keeps the source's most frequent tokens
        kept = counts[src_ids].sort(descending=True, stable=True).values[size - 1]
        assert bool((counts[ids] >= kept).all())
    for k, t in head.state_dict().items():
        if k not in ("lm_head.weight", "d2t"):
            assert torch.equal(again.state_dict()[k], t), k
    feat = torch.randn(3, target.config.hidden_size, generator=gen)
    src_logits, new_logits = head.logits_from_feature(feat), again.logits_from_feature(feat)
    for j, t in enumerate(ids.tolist()):
        if t in src_row:
            assert torch.allclose(new_logits[:, j], src_logits[:, src_row[t]], atol=1e-5), t
        else:
            assert bool((new_logits[:, j] == 0).all()), t


def test_resize_draft_vocab_needs_an_eagle3_init(tmp_path) -> None:  # noqa: ANN001
    from updraft.train.config import TrainConfig

    with pytest.raises(ValueError, match="resize_draft_vocab"):
        TrainConfig(out=str(tmp_path), method="eagle3", resize_draft_vocab=True).validate()
    with pytest.raises(ValueError, match="resize_draft_vocab"):
        TrainConfig(out=str(tmp_path), method="eagle", init_from=str(tmp_path), resize_draft_vocab=True).validate()


def test_extending_the_target_layers_starts_as_the_source(tmp_path, tiny_checkpoint) -> None:  # noqa: ANN001
    """--init-from an EAGLE-3 head with --aux-layers naming its layers and one more: fc's added
    columns start at zero, so every draft step equals the source's on the same layers' features,
    whatever the added layer holds; the saved config names the four. Another order, an extension
    under --resume-from, and one beside --resize-draft-vocab are refused."""
    from updraft.train.checkpoint import warm_start
    from updraft.train.config import TrainConfig

    target = load_checkpoint(tiny_checkpoint("llama", num_hidden_layers=4), dtype=torch.float32, device="cpu",
                             progress=False).model
    h = target.config.hidden_size
    src, cfg = new_head("eagle3", target, draft_ids=torch.arange(1, target.config.vocab_size, 3), aux_layers=(0, 2, 3), seed=8)
    with torch.no_grad():
        for p in src.parameters():
            p.add_(0.02 * torch.randn_like(p))
    folder = save_head(src, cfg, tmp_path / "src", dtype=torch.float32)
    run = TrainConfig(out=str(tmp_path / "o"), method="eagle3", init_from=str(folder), aux_layers="0,2,3,1").validate()
    started = warm_start(run, target, torch.device("cpu"))
    assert started is not None
    grown, grown_cfg = started
    assert grown_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 3, 1]
    assert grown.fc.weight.shape[1] == 4 * h and not grown.fc.weight[:, 3 * h :].any()
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, target.config.vocab_size, (1, 11), generator=g)
    feat = torch.randn(1, 11, 4 * h, generator=g)
    with torch.no_grad():
        for a, b in zip(unroll(grown, ids, feat, 3), unroll(src, ids, feat[..., : 3 * h], 3), strict=True):
            torch.testing.assert_close(head_logits(grown, a), head_logits(src, b))
    again = load_draft_head(save_head(grown, grown_cfg, tmp_path / "four", dtype=torch.float32), target, torch.float32,
                            torch.device("cpu"))
    assert again.head_config.aux_layer_ids == (0, 2, 3, 1) and torch.equal(again.fc.weight, grown.fc.weight)
    for bad, match in (({"aux_layers": "2,0,3,1"}, "which a warm start keeps"),
                       ({"aux_layers": "0,2,3,1", "init_from": None, "resume_from": str(folder)}, "which a warm start keeps"),
                       ({"aux_layers": "0,2,3,1", "resize_draft_vocab": True}, "one change a run")):
        opts = {"out": str(tmp_path / "o"), "method": "eagle3", "init_from": str(folder)} | bad
        with pytest.raises(ValueError, match=match):
            warm_start(TrainConfig(**opts).validate(), target, torch.device("cpu"), counts=torch.ones(target.config.vocab_size))
