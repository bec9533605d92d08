"""Build the speculative pieces of an engine from a ``SpeculativeConfig``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from updraft import ops
from updraft.attention import resolve_backend_name
from updraft.config import ConfigError, SpeculativeConfig
from updraft.memory.pools import ReqToTokenPool
from updraft.models.eagle import (
    Eagle3Head,
    EagleHead,
    aux_count,
    default_aux_layers,
    load_draft_head,
)
from updraft.models.llama import LlamaForCausalLM
from updraft.models.loader import load_checkpoint
from updraft.models.mtp import MtpHead
from updraft.models.mtp_formats import load_mtp_head
from updraft.models.resolve import resolve_model
from updraft.runtime.model_runner import ModelRunner
from updraft.runtime.sampler import Sampler
from updraft.runtime.timing import PhaseTimer
from updraft.spec.adaptive import AdaptiveSteps
from updraft.spec.lookup_assist import HostLookupAssist
from updraft.spec.ngram_device import LookupAssist
from updraft.spec.proposers import DraftModelProposer, NgramProposer, Proposer
from updraft.spec.token_map import load_token_map
from updraft.spec.worker import SpecWorker

logger = logging.getLogger("updraft")

#: Share of the per-phase iteration's time that exploring S values other than the best may cost.
EXPLORE_BUDGET = 0.02


@dataclass
class DraftSetup:
    cfg: SpeculativeConfig
    model: torch.nn.Module | None  # EAGLE head or standalone LM; None for n-gram

    @property
    def kv_bytes_per_token(self) -> int:
        if self.model is None:
            return 0
        c = self.model.config  # type: ignore[union-attr]
        dtype = next(self.model.parameters()).dtype
        return c.kv_bytes_per_token(dtype)

    @property
    def lookahead(self) -> int:
        """KV positions beyond a request's length one iteration writes (S, +1 for standalone)."""
        return self.cfg.num_steps + (1 if self.cfg.method == "standalone" else 0)


def load_draft(cfg: SpeculativeConfig, target: LlamaForCausalLM, tokenizer_vocab: int, dtype: torch.dtype, device: torch.device,
               progress: bool, target_source: Path | None = None) -> DraftSetup:
    """The draft of ``cfg``; ``target_source`` is the target's checkpoint (MTP's default: its own
    modules)."""
    if cfg.method == "ngram":
        return DraftSetup(cfg, None)
    if cfg.method == "mtp":
        return DraftSetup(cfg, _load_mtp(cfg, target, dtype, device, target_source))
    assert cfg.draft_model is not None
    if cfg.method in ("eagle", "eagle3"):
        from updraft.heads import resolve_draft_path

        head = load_draft_head(resolve_draft_path(cfg.draft_model), target, dtype, device)
        want = "eagle3" if isinstance(head, Eagle3Head) else "eagle"
        if want != cfg.method:
            raise ConfigError(f"speculative method {cfg.method!r} but {cfg.draft_model} is an {want} head")
        if cfg.token_map is not None and isinstance(head, EagleHead):
            head.set_token_map(load_token_map(cfg.token_map, target.config.vocab_size))
        if isinstance(head, Eagle3Head):
            if fp8_lm_head(cfg.draft_lm_head, head.lm_head.weight):
                head.quantize_lm_head()
            layers = head.head_config.aux_layer_ids or default_aux_layers(target.config.num_layers)
            bad = [i for i in layers if not 0 <= i < target.config.num_layers]
            if bad or len(layers) != aux_count(head.head_config):  # fc reads that many layers' features
                raise ConfigError(f"EAGLE-3 aux layers {list(layers)} are invalid for a {target.config.num_layers}-layer target "
                                  f"and a head whose fc reads {aux_count(head.head_config)} layers")
            target.aux_layers = tuple(layers)
        return DraftSetup(cfg, head)
    loaded = load_checkpoint(resolve_model(cfg.draft_model), dtype=dtype, device=device, progress=progress)
    if loaded.config.vocab_size != target.config.vocab_size:
        raise ConfigError(
            f"standalone draft {cfg.draft_model} has a {loaded.config.vocab_size}-token vocabulary, the target "
            f"{target.config.vocab_size}: the draft must share the target's tokenizer"
        )
    return DraftSetup(cfg, loaded.model)


#: ``draft_lm_head="auto"`` streams an EAGLE-3 LM head as FP8 from this many bytes in its own
#: dtype: the 8B shape's 32k x 4096 (262 MB bf16: ~97 us a draft step on the H100) halves; a
#: SmolLM2 head (8k x 576, 9.4 MB) is launch-bound and stays.
FP8_LM_HEAD_MIN_BYTES = 64 * 2**20


def fp8_lm_head(choice: str, weight: torch.Tensor) -> bool:
    """Whether the draft LM head ``weight`` is served in FP8 for ``choice`` (auto / fp8 / model).
    FP8 needs the hardware conversion of compute capability >= 8.9 (or the Triton interpreter,
    for tests): ``fp8`` elsewhere is a configuration error, ``auto`` quietly keeps the weight."""
    if choice == "model":
        return False
    dev = weight.device
    capable = (dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 9)) or (
        dev.type == "cpu" and ops.interpreting() and ops.triton_available())
    if choice == "fp8":
        if not capable:
            raise ConfigError(
                f"draft_lm_head='fp8' needs a CUDA GPU of compute capability >= 8.9 (the draft is on {dev}); "
                "use auto or model")
        return True
    return capable and dev.type == "cuda" and weight.numel() * weight.element_size() >= FP8_LM_HEAD_MIN_BYTES


def _load_mtp(cfg: SpeculativeConfig, target: LlamaForCausalLM, dtype: torch.dtype, device: torch.device,
              target_source: Path | None) -> MtpHead:
    """An MTP head: the draft folder's modules, else the target checkpoint's own."""
    if cfg.draft_model is not None:
        from updraft.heads import resolve_draft_path

        path: str | Path = resolve_draft_path(cfg.draft_model)
    elif target_source is not None and target_source.is_dir():
        path = target_source
    else:
        raise ConfigError(
            f"speculative method 'mtp' without a draft model reads the target checkpoint's own MTP modules, but the "
            f"target {target_source} is no Hugging Face folder: give an MTP head (draft_model / --speculative-draft-model-path)"
        )
    head = load_mtp_head(path, target, dtype, device, cfg.num_steps)
    # Module 0 reads the target's last hidden state BEFORE its final norm (what DeepSeek's modules
    # were trained on; SGLang feeds them so): the output of the target's last layer, captured as
    # EAGLE-3's aux layers are (the target's feature is then its aux_hidden).
    target.aux_layers = (target.config.num_layers - 1,)
    hc = head.head_config
    if cfg.num_steps > hc.num_modules and not hc.cycle:
        raise ConfigError(
            f"speculative num_steps={cfg.num_steps} is invalid for {path}: it has {hc.num_modules} MTP modules and "
            "its config refuses reusing them (mtp_cycle: false); use num_steps <= "
            f"{hc.num_modules}"
        )
    cycled = f", cycled for S = {cfg.num_steps} (step j runs module j mod {hc.num_modules})" if cfg.num_steps > hc.num_modules else ""
    logger.info(f"draft: MTP modules 0..{head.num_layers - 1} of {hc.num_modules} from {path}{cycled}")
    return head


def make_worker(
    setup: DraftSetup,
    target_runner: ModelRunner,
    req_pool: ReqToTokenPool,
    num_pages: int,
    page_size: int,
    target_backend: str,
    sampler: Sampler,
    timer: PhaseTimer | None = None,
) -> SpecWorker:
    cfg = setup.cfg
    proposer: Proposer
    if setup.model is None:
        proposer = NgramProposer(cfg.ngram_min, cfg.ngram_max, target_runner.device)
    else:
        name = cfg.draft_attention_backend or "auto"
        backend = target_backend if name == "auto" else resolve_backend_name(name, target_runner.device)
        runner = ModelRunner(setup.model, req_pool, num_pages, page_size, backend)  # type: ignore[arg-type]
        proposer = DraftModelProposer(runner, cfg.method, cfg.draft_extend, sampler, cfg.context_vocab)
    # The per-phase iteration's own costs (no overlap: an iteration costs its wall time plus the
    # host's work between iterations); priced exploration, as a larger S may cost several steps.
    adaptive = AdaptiveSteps(cfg.step_choices(), enabled=cfg.adaptive, overlap=False, explore_budget=EXPLORE_BUDGET)
    # the lookup assist serves heads (EAGLE / MTP), not standalone draft models; the fused
    # iteration takes its parameters from this worker's assist (one decision, here)
    assist = (HostLookupAssist(LookupAssist(cfg.ngram_min, cfg.ngram_max, cfg.ngram_assist))
              if cfg.ngram_assist and isinstance(proposer, DraftModelProposer) and proposer.shift else None)
    return SpecWorker(target_runner, proposer, cfg.num_steps, sampler, timer, adaptive, assist)
