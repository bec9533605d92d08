"""GGUF reading: synthetic files written the way llama.cpp's converter writes them, and the real
default model checked against what transformers loads from the same file."""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from tokenizers import pre_tokenizers

from updraft.errors import CheckpointError, UpdraftError
from updraft.models.gguf import GGUFCheckpoint, unpermute_qk
from updraft.models.loader import load_checkpoint

transformers = pytest.importorskip("transformers")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS = SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["Ġt", "he"]
MERGES = ["Ġ t", "h e"]
VOCAB = len(TOKENS)

_HF_TO_GGUF_BLOCK = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_name(hf: str) -> str:
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)", hf)
    assert m, hf
    return f"blk.{m.group(1)}.{_HF_TO_GGUF_BLOCK[m.group(2)]}.{m.group(3)}"


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_hf_model(arch: str, tied: bool) -> transformers.PreTrainedModel:
    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, tie_word_embeddings=tied,
    )
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.Qwen3Config(**common, head_dim=32)
        model = transformers.Qwen3ForCausalLM(cfg)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # norms too, so a swapped mapping shows
            p.uniform_(-1, 1)
    return model.eval()


def write_gguf(path: Path, model: transformers.PreTrainedModel, arch: str, qtype: QT) -> None:
    """Write ``model`` as llama.cpp would: Q/K rows permuted for ``llama``, 2-D weights in
    ``qtype``, 1-D tensors in F32, no ``output.weight`` when tied."""
    cfg = model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    if arch == "qwen3":
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch != "llama" else "smollm")
    w.add_token_list(TOKENS)
    w.add_token_types([3] * len(SPECIALS) + [1] * (VOCAB - len(SPECIALS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        a = t.float().numpy()
        if arch == "llama" and ".q_proj." in name:
            a = llama_cpp_permute(a, cfg.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            a = llama_cpp_permute(a, cfg.num_key_value_heads)
        if a.ndim == 2 and qtype != QT.F32:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expected(t: torch.Tensor, qtype: QT) -> torch.Tensor:
    """What a tensor reads back as after quantisation. Quantisation blocks run along rows and the
    Q/K permutation moves whole rows, so the two commute: no need to permute here."""
    if t.ndim != 2 or qtype == QT.F32:
        return t.float()
    return torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(t.float().numpy(), qtype), qtype))


@pytest.mark.parametrize(
    "arch,tied,qtype",
    [
        ("llama", False, QT.F32),
        ("llama", True, QT.F16),
        ("llama", False, QT.Q8_0),
        ("qwen2", True, QT.F32),
        ("qwen3", False, QT.Q8_0),
    ],
)
def test_synthetic_gguf_round_trip(tmp_path: Path, arch: str, tied: bool, qtype: QT) -> None:
    model = tiny_hf_model(arch, tied)
    path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(path, model, arch, qtype)
    ckpt = GGUFCheckpoint(path)

    cfg = ckpt.hf_config()
    assert cfg["model_type"] == arch
    assert cfg["tie_word_embeddings"] is tied
    assert cfg["num_key_value_heads"] == 2 and cfg["vocab_size"] == VOCAB
    assert cfg["rms_norm_eps"] == 1e-5  # float32-stored 9.99999975e-06, rounded back
    assert cfg.get("head_dim") == (32 if arch == "qwen3" else None)

    ref = {k: v for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    got = dict(ckpt.tensors(torch.float32))
    assert set(got) == set(ref)
    for name, t in ref.items():
        assert torch.equal(got[name], expected(t, qtype)), name

    # Through the loader: the fused parameters are the concatenated HF tensors.
    lm = load_checkpoint(path, dtype=torch.float32, device="cpu", progress=False)
    layer = lm.model.model.layers[1]
    qkv = torch.cat([got[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv"])
    assert torch.equal(layer.self_attn.qkv_proj.weight, qkv)
    if arch == "qwen2":
        bias = torch.cat([got[f"model.layers.1.self_attn.{p}_proj.bias"] for p in "qkv"])
        assert torch.equal(layer.self_attn.qkv_proj.bias, bias)
    assert (lm.model.lm_head is None) is tied
    assert lm.tokenizer.eos_token_id == 2 and lm.tokenizer.decode(lm.tokenizer.encode("the")) == "the"


def test_gguf_bf16_to_requested_dtype(tmp_path: Path) -> None:
    model = tiny_hf_model("qwen2", tied=True)
    path = tmp_path / "bf16.gguf"
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-6)
    emb = model.state_dict()["model.embed_tokens.weight"]
    bits = emb.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint8)
    w.add_tensor("token_embd.weight", bits, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    name, t = next(GGUFCheckpoint(path).tensors(torch.bfloat16))
    assert name == "model.embed_tokens.weight" and t.dtype == torch.bfloat16
    assert torch.equal(t, emb.to(torch.bfloat16))


@pytest.mark.parametrize("n_heads,head_dim", [(4, 16), (2, 64), (1, 8)])
def test_unpermute_inverts_llama_cpp_permute(n_heads: int, head_dim: int) -> None:
    w = np.random.default_rng(0).standard_normal((n_heads * head_dim, 24)).astype(np.float32)
    back = unpermute_qk(torch.from_numpy(llama_cpp_permute(w, n_heads)), n_heads)
    assert torch.equal(back, torch.from_numpy(w))
    b = np.arange(n_heads * head_dim, dtype=np.float32)  # biases permute the same way
    assert torch.equal(unpermute_qk(torch.from_numpy(llama_cpp_permute(b, n_heads)), n_heads), torch.from_numpy(b))


def _minimal_gguf(path: Path, arch: str, extra_tensors: dict[str, np.ndarray] | None = None) -> None:
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(0)
    w.add_context_length(131072)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
    for name, a in (extra_tensors or {}).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_llama3_rope_scaling_recovered_from_rope_freqs(tmp_path: Path) -> None:
    # llama.cpp's LlamaModel.generate_extra_tensors for Llama 3.1 (factor 8, low 1, high 4, 8192).
    head_dim, theta, factor, orig = 16, 500000.0, 8.0, 8192
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factors = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < orig / 4.0:
            factors.append(1.0)
        elif wavelen > orig / 1.0:
            factors.append(factor)
        else:
            smooth = (orig / wavelen - 1.0) / (4.0 - 1.0)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    path = tmp_path / "llama31.gguf"
    _minimal_gguf(path, "llama", {"rope_freqs.weight": np.array(factors, dtype=np.float32)})
    ckpt = GGUFCheckpoint(path)
    cfg = ckpt.hf_config()
    assert cfg["rope_scaling"] == {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    }
    assert cfg["max_position_embeddings"] == 131072 and cfg["rope_theta"] == 500000.0
    assert [n for n, _ in ckpt.tensors()] == ["model.embed_tokens.weight"]  # table not yielded


def _assert_one_line(err: UpdraftError, *needles: str) -> None:
    msg = str(err)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg


def test_gguf_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.gguf"
    _minimal_gguf(good, "llama")
    data = good.read_bytes()

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[: len(data) - 1000])
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(truncated, dtype=torch.float32, device="cpu", progress=False)
    _assert_one_line(e.value, "truncated.gguf")

    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(garbage, dtype=torch.float32, device="cpu", progress=False)
    _assert_one_line(e.value, "garbage.gguf")

    header_cut = tmp_path / "header_cut.gguf"
    header_cut.write_bytes(data[:40])
    with pytest.raises(CheckpointError) as e:
        GGUFCheckpoint(header_cut)
    _assert_one_line(e.value, "header_cut.gguf")

    other = tmp_path / "gemma.gguf"
    _minimal_gguf(other, "gemma2")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(other, dtype=torch.float32, device="cpu", progress=False)
    _assert_one_line(e.value, "gemma.gguf", "gemma2", "llama")


# ---- the default model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_pair(smollm2_gguf: Path) -> tuple[object, dict[str, torch.Tensor]]:
    ours = load_checkpoint(smollm2_gguf, dtype=torch.float32, device="cpu", progress=False)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    return ours, ref.state_dict()


def test_smollm2_tensors_match_transformers(smollm2_pair: tuple[object, dict[str, torch.Tensor]]) -> None:
    ours, ref = smollm2_pair
    cfg = ours.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0 and cfg.rms_norm_eps == 1e-5
    model = ours.model
    assert torch.equal(model.model.embed_tokens.weight, ref["model.embed_tokens.weight"])
    assert torch.equal(model.model.norm.weight, ref["model.norm.weight"])
    for i in (0, 13, 29):
        layer = model.model.layers[i]
        q, k, v = layer.self_attn.qkv_proj.weight.split([cfg.q_size, cfg.kv_size, cfg.kv_size])
        gate, up = layer.mlp.gate_up_proj.weight.chunk(2)
        mine = {
            "self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k,
            "self_attn.v_proj.weight": v, "self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
            "mlp.gate_proj.weight": gate, "mlp.up_proj.weight": up,
            "mlp.down_proj.weight": layer.mlp.down_proj.weight,
            "input_layernorm.weight": layer.input_layernorm.weight,
            "post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
        }
        for name, t in mine.items():
            assert torch.equal(t, ref[f"model.layers.{i}.{name}"]), (i, name)


def test_smollm2_metadata(smollm2_gguf: Path) -> None:
    ckpt = GGUFCheckpoint(smollm2_gguf)
    meta = ckpt.tokenizer_metadata()
    assert meta["model"] == "gpt2" and meta["pre"] == "smollm"
    assert len(meta["tokens"]) == 49152 and meta["eos_token_id"] == 2
    assert "<|im_start|>" in meta["chat_template"]
    types = {t.tensor_type.name for t in ckpt.reader.tensors}
    assert {"Q4_1", "Q8_0", "F32"} <= types
