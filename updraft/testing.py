"""Small random checkpoints for tests, benchmarks and the kit: a byte-level tokenizer, tiny
Hugging Face models written by transformers (the real layout), EAGLE / EAGLE-3 heads in the
published key layout and MTP heads in DeepSeek-V3's; an op counter for device work (``count_ops``);
logit rows and a float64 sort-based reference of the sampler's filters (the sampled acceptance's
tests). transformers and triton are imported lazily (only tests need them)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from updraft.runtime.sampler import GREEDY_TEMPERATURE

TINY_VOCAB = 300


def repeating_prompts(n: int, seed: int) -> list[list[int]]:
    """``n`` random token-id prompts (ids < 256) of mixed lengths, each ending with a repeat of
    its own start, so n-gram drafting has something to find."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        base = [rng.randrange(0, 256) for _ in range(rng.randrange(4, 30))]
        out.append(base + base[: rng.randrange(0, len(base))])
    return out


def scripted_steps(script: list[int]) -> Any:
    """An ``AdaptiveSteps`` whose S comes from ``script`` (cycled) instead of measured costs."""
    from updraft.spec.adaptive import AdaptiveSteps

    @dataclass
    class Scripted(AdaptiveSteps):
        steps: list[int] = field(default_factory=list)

        def choose(self, bs: int, sampled: bool = False) -> int:
            s = self.steps[self._iters % len(self.steps)]
            self._iters += 1
            self.chosen[s] += 1
            return s

    return Scripted(sorted(set(script)), steps=list(script))


def write_tiny_tokenizer(folder: Path) -> None:
    """A byte-level tokenizer (no merges) with ChatML specials, as tokenizer.json + config."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = RustTokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "</s>", "<|im_end|>")])
    tok.save(str(folder / "tokenizer.json"))
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "chat_template": template})
    )


# DeepSeek-V2/V3 at test size: MLA with head dims that differ (qk_nope 16, rope 16, v 24), MoE
# from layer 1 on (8 experts, 2 per token, one shared); every width a multiple of 8, so the
# grouped-GEMM expert path runs (it needs 16-byte strides).
TINY_DEEPSEEK: dict[str, object] = dict(
    num_hidden_layers=3, num_key_value_heads=None, kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=24,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
    n_group=1, topk_group=1,
)


def tiny_hf_model(arch: str = "llama", tied: bool = False, seed: int = 0, **overrides: object) -> Any:
    """A small random transformers model of the given family (weights ~ N(0, 0.02) * scale).
    DeepSeek (``deepseek_v2`` / ``deepseek_v3``): ``TINY_DEEPSEEK`` under the overrides; a noaux_tc
    router's ``e_score_correction_bias`` is drawn ~ N(0, 0.1) (transformers leaves it 0)."""
    import transformers

    common: dict[str, object] = dict(
        vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=tied, bos_token_id=256, eos_token_id=257,
    )
    classes = {
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
        "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig, {"sliding_window": None}),
        "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config, {}),
        "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config, {"head_dim": 32}),
        "deepseek_v2": (transformers.DeepseekV2ForCausalLM, transformers.DeepseekV2Config, TINY_DEEPSEEK),
        "deepseek_v3": (transformers.DeepseekV3ForCausalLM, transformers.DeepseekV3Config, TINY_DEEPSEEK),
    }
    model_cls, config_cls, extra = classes[arch]
    common.update(extra)
    common.update(overrides)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**common))
    with torch.no_grad():  # larger weights than the default init: peaked, tie-free logits
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
    return model.eval()


HIDDEN, HEADS, KV_HEADS, INTER, VOCAB = 64, 4, 2, 96, 300


def head_config(arch: str, **extra: object) -> dict:
    cfg = {
        "architectures": [arch],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    }
    cfg.update(extra)
    return cfg


def _layer(prefix: str, in_dim: int, gen: torch.Generator, input_norm: bool) -> dict[str, torch.Tensor]:
    hd = HIDDEN // HEADS

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.08

    t = {
        f"{prefix}.self_attn.q_proj.weight": w(HEADS * hd, in_dim),
        f"{prefix}.self_attn.k_proj.weight": w(KV_HEADS * hd, in_dim),
        f"{prefix}.self_attn.v_proj.weight": w(KV_HEADS * hd, in_dim),
        f"{prefix}.self_attn.o_proj.weight": w(HIDDEN, HEADS * hd),
        f"{prefix}.mlp.gate_proj.weight": w(INTER, HIDDEN),
        f"{prefix}.mlp.up_proj.weight": w(INTER, HIDDEN),
        f"{prefix}.mlp.down_proj.weight": w(HIDDEN, INTER),
        f"{prefix}.post_attention_layernorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=gen),
    }
    if input_norm:
        t[f"{prefix}.input_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=gen)
    return t


def write_eagle_head(folder: Path, seed: int = 0, **cfg_extra: object) -> Path:
    """EAGLE-1 layout: fc (with bias) over concat(embedding, feature), layers.0 without input norm."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = head_config("LlamaForCausalLMEagle", **cfg_extra)
    h = int(cfg["hidden_size"])
    t = {"fc.weight": torch.randn(h, 2 * h, generator=gen) * 0.08, "fc.bias": torch.zeros(h)}
    t.update(_layer("layers.0", HIDDEN, gen, input_norm=False))
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def write_eagle3_head(folder: Path, seed: int = 0, draft_vocab: int = 200, extra_layers: int = 0,
                      aux_layers: tuple[int, ...] | None = None, **cfg_extra: object) -> Path:
    """EAGLE-3 layout: fc 3h -> h, midlayer (2h attention input, hidden_norm), norm, own lm_head
    over a draft vocabulary, d2t offsets and t2d membership; ``extra_layers`` standard layers
    after the mid layer as ``layers.1..`` (ours: ``train-draft --head-layers``); ``aux_layers``:
    the target layers it reads, named in its config (fc then reads that many: ours may read more
    than three)."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = head_config("LlamaForCausalLMEagle3", draft_vocab_size=draft_vocab, **cfg_extra)
    if aux_layers is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_layers)}
    keep = torch.randperm(VOCAB, generator=gen)[:draft_vocab].sort().values
    width = len(aux_layers) if aux_layers is not None else 3
    t = {"fc.weight": torch.randn(HIDDEN, width * HIDDEN, generator=gen) * 0.08}
    t.update(_layer("midlayer", 2 * HIDDEN, gen, input_norm=True))
    t["midlayer.hidden_norm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=gen)
    for i in range(1, extra_layers + 1):
        t.update(_layer(f"layers.{i}", HIDDEN, gen, input_norm=True))
    if extra_layers:
        cfg["num_hidden_layers"] = 1 + extra_layers
    t["norm.weight"] = torch.ones(HIDDEN)
    t["lm_head.weight"] = torch.randn(draft_vocab, HIDDEN, generator=gen) * 0.08
    t["d2t"] = keep - torch.arange(draft_vocab)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[keep] = True
    t["t2d"] = t2d
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def mtp_module_tensors(prefix: str, gen: torch.Generator, own_head: bool = False) -> dict[str, torch.Tensor]:
    """One random MTP module (DeepSeek-V3's names) under ``prefix`` (``model.layers.{L + m}``)."""
    t = {
        f"{prefix}.enorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=gen),
        f"{prefix}.hnorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=gen),
        f"{prefix}.eh_proj.weight": torch.randn(HIDDEN, 2 * HIDDEN, generator=gen) * 0.08,
        f"{prefix}.shared_head.norm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=gen),
    }
    t.update(_layer(prefix, HIDDEN, gen, input_norm=True))
    if own_head:
        t[f"{prefix}.shared_head.head.weight"] = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.08
    return t


def write_mtp_head(folder: Path, num_modules: int = 2, seed: int = 0, target_layers: int = 2, own_head: bool = False,
                   **cfg_extra: object) -> Path:
    """An MTP head for the tiny targets in our layout (docs/draft-heads.md): a Llama config with
    ``num_nextn_predict_layers`` modules stored as ``model.layers.{target_layers + m}.*``."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = head_config("LlamaForCausalLM", num_hidden_layers=target_layers, num_nextn_predict_layers=num_modules, **cfg_extra)
    t: dict[str, torch.Tensor] = {}
    for m in range(num_modules):
        t.update(mtp_module_tensors(f"model.layers.{target_layers + m}", gen, own_head))
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@dataclass
class FunctionTarget:
    """A tiny target whose greedy next token is a function of the current token alone (one
    layer whose attention output is zero), and MTP modules built to predict it, or to miss it by
    a known offset: the accepted drafts per position are known exactly."""

    folder: Path
    next_of: list[int]  # the target's greedy next token after each token
    weights: dict[str, torch.Tensor]  # its HF state dict

    def continuation(self, prompt: list[int], n: int) -> list[int]:
        out = [self.next_of[prompt[-1]]]
        while len(out) < n:
            out.append(self.next_of[out[-1]])
        return out

    def module_tensors(self, prefix: str, roll: int) -> dict[str, torch.Tensor]:
        """A module predicting ``next_of[token] + roll`` (mod vocabulary) from its input token
        alone: eh_proj passes the normalised embedding through (the embeddings have unit RMS, so
        that is the embedding) and drops the hidden, the block is the target's layer, the head
        the target's LM head, rolled by ``roll`` rows (roll 0 leaves it out: the target's)."""
        w = self.weights
        h = w["model.norm.weight"].shape[0]
        t = {f"{prefix}.{k.removeprefix('model.layers.0.')}": v.clone() for k, v in w.items() if k.startswith("model.layers.0.")}
        t[f"{prefix}.enorm.weight"] = torch.ones(h)
        t[f"{prefix}.hnorm.weight"] = torch.ones(h)
        t[f"{prefix}.eh_proj.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)
        t[f"{prefix}.shared_head.norm.weight"] = w["model.norm.weight"].clone()
        if roll:
            t[f"{prefix}.shared_head.head.weight"] = torch.roll(w["lm_head.weight"], roll, dims=0)
        return t

    def write_head(self, folder: Path, rolls: tuple[int, ...], **cfg_extra: object) -> Path:
        """An MTP head with one module per roll, in our layout (module m = model.layers.{1 + m})."""
        folder.mkdir(parents=True, exist_ok=True)
        cfg = json.loads((self.folder / "config.json").read_text())
        cfg.update(num_nextn_predict_layers=len(rolls), **cfg_extra)
        t: dict[str, torch.Tensor] = {}
        for m, r in enumerate(rolls):
            t.update(self.module_tensors(f"model.layers.{1 + m}", r))
        save_file(t, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(cfg))
        return folder


def write_function_target(folder: Path, seed: int = 3) -> FunctionTarget:
    """See ``FunctionTarget``: a one-layer tiny Llama with its attention output projection zeroed
    and unit-RMS embeddings, checked for near-tied logits (rounding must not flip an argmax)."""
    model = tiny_hf_model("llama", seed=seed, num_hidden_layers=1)
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        emb /= emb.pow(2).mean(-1, keepdim=True).sqrt()
        logits = model(input_ids=torch.arange(TINY_VOCAB)[:, None]).logits[:, 0]
    top = logits.topk(2, dim=-1).values
    if float((top[:, 0] - top[:, 1]).min()) <= 2e-5:
        raise ValueError(f"seed={seed} gives near-tied logits (rounding could flip them): choose another seed")
    model.save_pretrained(folder)
    write_tiny_tokenizer(folder)
    return FunctionTarget(folder, logits.argmax(-1).tolist(), {k: v.detach().clone() for k, v in model.state_dict().items()})


@dataclass
class OpCount:
    """What a piece of device work issues: aten ops as dispatched (``aten``), those of them that
    are not views or allocations (``compute``: each one kernel or more on a GPU), and Triton
    kernel launches (``triton``; their internals are not counted as aten ops).

    Hazard: under ``torch.inference_mode`` composite ops that MAY alias (``contiguous``,
    ``reshape``, ``to``, ``flatten``) reach the dispatcher as themselves, flagged as views, and
    their copy runs below it: such an op counts as compute when its result does not share
    storage with its input (it copied). ``_unsafe_view`` (how ``reshape`` rewraps its copy
    outside inference mode) launches nothing."""

    aten: int = 0
    compute: int = 0
    triton: int = 0
    names: dict[str, int] = field(default_factory=dict)


_NO_KERNEL = {"empty", "empty_strided", "empty_like", "lift_fresh", "detach", "_unsafe_view"}


def _copied(args: tuple[object, ...], out: object) -> bool:
    """Whether a view-flagged op returned a tensor that shares no storage with its inputs."""
    from torch.utils._pytree import tree_leaves

    def ptrs(tree: object) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}

    return bool(ptrs(out) - ptrs(args))


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn`` once and count its ops (a TorchDispatchMode plus a wrapper around Triton's
    launch, in the interpreter as well as compiled)."""
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    counts = OpCount()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            counts.aten += 1
            name = func.overloadpacket.__name__
            out = func(*args, **(kwargs or {}))
            if (_copied(args, out) if func.is_view else name not in _NO_KERNEL):
                counts.compute += 1
                counts.names[name] = counts.names.get(name, 0) + 1
            return out

    originals = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def wrap(run: Callable[..., object]) -> Callable[..., object]:
        def launch(self: object, *args: object, **kwargs: object) -> object:
            counts.triton += 1
            with _disable_current_modes():
                return run(self, *args, **kwargs)

        return launch

    try:
        for cls, run in originals.items():
            cls.run = wrap(run)  # type: ignore[method-assign]
        with Mode():
            fn()
    finally:
        for cls, run in originals.items():
            cls.run = run  # type: ignore[method-assign]
    return counts

# ---- the sampled acceptance's filters: rows, parameters and a float64 reference -------------
FILTER_TEMPS = [0.0, 1e-6, 2e-5, 0.05, 0.7, 1.0, 1.7, 5.0, 100.0]
FILTER_TOP_P = [1.0, 1.0, 0.999, 0.95, 0.9, 0.6, 0.3, 0.01]
FILTER_MIN_P = [0.0, 0.0, 0.0, 0.01, 0.1, 0.5, 1.0]


def filter_test_rows(kind: str, rows: int, vocab: int, g: torch.Generator) -> torch.Tensor:
    """Logit rows of one ``kind`` for the sampled-acceptance filter tests."""
    x = torch.randn(rows, vocab, generator=g)
    if kind == "randn":
        return x * (0.5 + 5.5 * torch.rand(rows, 1, generator=g))
    if kind == "ties":  # half-integers: every cut-off lands in a group of equal logits
        return (x * 2).round() / 2
    if kind == "coarse":  # four values
        return torch.randint(0, 4, (rows, vocab), generator=g).float()
    if kind == "masked":  # a masked vocabulary
        return torch.where(torch.rand(rows, vocab, generator=g) < 0.4, -math.inf, x * 3)
    if kind == "peaked":
        return x.index_fill(1, torch.tensor([vocab // 3]), 30.0)
    return x * 0.05  # flat: the nucleus is most of the vocabulary


def filter_test_params(rows: int, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(temperature, top_k, top_p, min_p) per row, drawn from edge-heavy value lists."""
    def pick(values: list[float]) -> torch.Tensor:
        return torch.tensor(values)[torch.randint(0, len(values), (rows,), generator=g)]

    top_k = [-1, -1, 0, 1, 2, 5, 37, 300, vocab - 1, vocab, vocab + 5]
    return pick(FILTER_TEMPS), pick(top_k).long(), pick(FILTER_TOP_P), pick(FILTER_MIN_P)


def sampler_filter_reference(logits: torch.Tensor, temp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
               min_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kept [R, V] bool over finite logits, probs [R, V] float64, fragile [R] bool): the
    sampler's filters by a float64 sort, on the float32 ``x = logits / T`` the sampler sees."""
    rows, vocab = logits.shape
    keep = torch.zeros(rows, vocab, dtype=torch.bool)
    probs = torch.zeros(rows, vocab, dtype=torch.float64)
    fragile = torch.zeros(rows, dtype=torch.bool)
    for r in range(rows):
        lg = logits[r].float().cpu()
        if bool(lg.isnan().any() | (lg == math.inf).any() | (lg == -math.inf).all()):
            lg = torch.zeros_like(lg)
        if float(temp[r]) < GREEDY_TEMPERATURE:
            keep[r, int(lg.argmax())] = True
            probs[r, int(lg.argmax())] = 1.0
            continue
        x32 = lg / temp[r : r + 1].float().cpu()
        x = x32.double()
        e = torch.exp(x - x.max())
        xs, order = torch.sort(x, descending=True, stable=True)
        k = int(top_k[r]) if 0 < int(top_k[r]) < vocab else vocab
        thr = xs[k - 1]
        ek = torch.where(x >= thr, e, 0.0)
        p_sorted = ek[order] / ek.sum()
        before = torch.cumsum(p_sorted, 0) - p_sorted
        tp = float(top_p[r]) if float(top_p[r]) < 1 else math.inf
        thr = torch.maximum(thr, xs[int((before < tp).sum()) - 1])
        fragile[r] = bool(((before - tp).abs() < 1e-5).any())
        if float(min_p[r]) > 0:  # float32 as the sampler: x_max + log(min_p)
            cut = x32.max() + torch.log(min_p[r : r + 1].float().cpu())
            thr = torch.maximum(thr, cut.double()[0])
            near = (x32 - cut).abs() <= 1e-6 * max(1.0, float(cut.abs()))
            fragile[r] |= bool((near & (x32 < x32.max())).any())  # the max is always kept
        keep[r] = torch.isfinite(x) & (x >= thr)
        probs[r] = torch.where(keep[r], e, 0.0) / torch.where(keep[r], e, 0.0).sum()
    return keep, probs, fragile
