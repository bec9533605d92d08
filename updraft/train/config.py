"""``TrainConfig``: every knob of ``updraft train-draft`` in one frozen dataclass (the CLI builds
its flags from these fields, so a default lives here and nowhere else); ``validate()`` raises a
one-line ``ValueError`` naming the bad value and what is allowed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updraft.data.prompts import check_prompt_set

METHODS = ("eagle", "eagle3")
PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
SDPA_CHOICES = ("auto", "no-cudnn")


def _opt(help_text: str, **kw: Any) -> Any:
    return field(metadata={"help": help_text}, **kw)


@dataclass(frozen=True)
class TrainConfig:
    # ---- what and where
    target: str = _opt("target model: HF folder, .gguf file, hub id, or 'default' (SmolLM2-135M-Instruct)", default="default")
    out: str = _opt("output folder: the HF-format head (config.json + model.safetensors), train_log.json, checkpoint/", default="")
    method: str = _opt("eagle (EAGLE-1/2: fc + one decoder layer on the final hidden state) or eagle3 (three-layer features, draft vocabulary)", default="eagle")
    data_dir: str | None = _opt("cache of the generated sequences, reused when it matches (default: OUT/data)", default=None)
    resume: bool = _opt("continue from OUT/checkpoint/state.pt (same data, same schedule)", default=False)
    init_from: str | None = _opt(
        "start from the weights (and EAGLE-3 draft vocabulary) of a head folder this command wrote, with a fresh "
        "optimizer: continues a run whose checkpoint was lost (e.g. on another machine)", default=None)
    resume_from: str | None = _opt(
        "continue the schedule of the run that saved this head folder (its weights and train_state.json: step, LR "
        "schedule, position in the data, logs) with a fresh optimizer re-warmed over --rewarm-steps; the data is "
        "regenerated from the seed when --data-dir has none: resumes on another machine from a few small files", default=None)
    rewarm_steps: int = _opt("--resume-from: steps over which the LR ramps back up to the schedule's (fresh optimizer moments)", default=50)
    device: str = _opt("auto (cuda if available), cpu or cuda", default="auto")
    precision: str = _opt("auto (bf16 on CUDA, fp32 on CPU), fp32 or bf16 (target in bf16, head under bf16 autocast with fp32 weights)", default="auto")
    seed: int = _opt("seed of the prompts, the split, the head's initialisation and the batch order", default=0)
    progress: bool = _opt("progress bars", default=True)
    # ---- data
    prompt_set: str = _opt(
        "prompt set of updraft.data.prompts: v3 (templates), v4 (v3 plus a third "
        "self-instruct prompts: the target writes a user request, then answers it in a new conversation), v5 (v3 "
        "plus long first-turn requests, two fifths of the prompts: a framing, a task and 1-4 constraints, as real "
        "users write them) or v6 (v5 plus free user turns, half of the prompts: the target continues an open user "
        "turn as the user, then answers that message in a new conversation; the shipped head's recipe)", default="v3")
    num_prompts: int = _opt("prompts generated from updraft.data.prompts (passage tasks add a follow-up each)", default=4000)
    held_out: int = _opt("prompts kept out of training for the held-out estimate and the final acceptance check", default=48)
    max_new_tokens: int = _opt("longest response generated per prompt", default=320)
    temperature: float = _opt(
        "sampling temperature of the responses (0 = greedy, one text per prompt; > 0 varies the texts while "
        "the labels stay the target's distribution: the shipped head's fine-tunes used 0.8)", default=0.0)
    gen_batch: int = _opt("requests in flight while generating (CUDA graphs up to this batch size)", default=128)
    data_device: str = _opt(
        "where the teacher-forced features live: auto (the GPU when they fit with 20 GiB to spare, else the CPU with "
        "batches gathered one step ahead), cpu or cuda", default="auto")
    gen_max_total_tokens: int | None = _opt("KV pool of the generation engine in tokens (default: gen_batch * (max_new_tokens + 512))", default=None)
    # ---- optimisation
    steps: int | None = _opt("optimizer steps (default: from --epochs, or as many as --time-budget allows)", default=None)
    epochs: float = _opt("passes over the data when neither --steps nor --time-budget decides", default=4.0)
    train_seconds: float | None = _opt(
        "training seconds the whole schedule is planned for, across --resume runs: after a few timed steps the step "
        "count (and with it the LR schedule) is fixed to fit them; --time-budget still bounds each run", default=None)
    time_budget: float | None = _opt("seconds for the whole command: generation gets --gen-fraction, training the rest minus a reserve for saving and the final check", default=None)
    gen_fraction: float = _opt("share of --time-budget for generating data", default=0.45)
    batch_tokens: int = _opt("padded tokens per training batch", default=8192)
    batch_pad: int = _opt(
        "each training batch's length padded up to a multiple of this: ~10x fewer distinct batch shapes in a run (each "
        "new one costs the step allocator growth and kernel choices, ~150 ms on an H200) for ~6% more padded tokens "
        "at 64; 1 = no padding beyond the batch's longest sequence", default=64)
    lr: float = _opt("peak learning rate (AdamW)", default=8e-4)
    min_lr_ratio: float = _opt("cosine decay ends at lr * this", default=0.05)
    warmup_steps: int = _opt("linear warm-up steps", default=60)
    weight_decay: float = _opt("AdamW weight decay", default=0.0)
    grad_clip: float = _opt("gradient norm clip (0 = off)", default=0.5)
    compile: bool = _opt(
        "torch.compile the head's unrolled forward (and through it its backward), shapes dynamic: fewer, fused kernels "
        "for a step that runs eagerly host-bound (H200, SmolLM2 head, 16,384 tokens a batch: 55 ms a step for 22 ms of "
        "GPU work); the first step compiles (minutes on a 2-core CPU)", default=False)
    sdpa: str = _opt(
        "attention kernels of the training forward: auto (PyTorch's choice; on Hopper cuDNN, which builds a plan for "
        "every new shape: the unrolled steps' 10 attention calls cost a step ~400 ms more at each new batch shape on "
        "an H200) or no-cudnn (flash, memory-efficient or math: no per-shape plans)", default="auto")
    ttt_steps: int = _opt("draft steps unrolled in training (training-time test); 1 = plain EAGLE", default=5)
    step_decay: float = _opt("loss weight decay per unrolled step", default=0.8)
    early_weight: float = _opt(
        "loss weight of each sequence's first --early-tokens training positions (an answer's opening) against 1 "
        "for the rest; 1 = off", default=1.0)
    early_tokens: int = _opt("training positions at the start of each sequence that --early-weight weighs", default=128)
    hard_label_weight: float = _opt(
        "share of the token cross-entropy taken against the target's argmax alone (the rest against its distribution): "
        "0 = soft labels only, 1 = hard labels only", default=0.0)
    feature_noise: float = _opt(
        "uniform noise U(-a, a) times the feature's own RMS (per token and target layer) added to the target feature the "
        "first draft step reads, in training only (EAGLE's data noise); 0 = off", default=0.0)
    feature_weight: float = _opt("EAGLE-1 feature regression weight (smooth L1)", default=1.0)
    token_weight: float = _opt("EAGLE-1 token cross-entropy weight", default=0.1)
    draft_vocab_size: int = _opt("EAGLE-3 draft vocabulary (most frequent target tokens in the data)", default=32000)
    resize_draft_vocab: bool = _opt(
        "--init-from an EAGLE-3 head: re-choose its draft vocabulary at --draft-vocab-size (the source's tokens ranked "
        "first, then the data's most frequent; a row the source lacks starts at zero, logit 0) instead of "
        "keeping the source's", default=False)
    head_intermediate_size: int | None = _opt(
        "MLP width of a new head (default: the target's); --init-from / --resume-from keep the source head's",
        default=None)
    aux_layers: str | None = _opt(
        "EAGLE-3: the target layers whose outputs form the head's feature, comma-separated (three, as published "
        "heads read, or more: e.g. 1,14,26,29; 0 = the first decoder layer). Default: EAGLE-3's low, middle and high "
        "(1, N/2-1, N-4 of N layers); --init-from / --resume-from keep the source head's (--init-from may extend "
        "them: its layers first, then more, whose fc columns start at zero)", default=None)
    head_layers: int | None = _opt(
        "decoder layers of the head (EAGLE-3: its mid layer and N-1 standard layers after it; each costs a layer "
        "per draft step). Default: 1, or the --init-from / --resume-from head's; --init-from a head with fewer "
        "grows it, the added layers starting as the identity (zero output projections)", default=None)
    # ---- monitoring and output
    spec_steps: int = _opt("draft steps S of the chain the estimates and the final check assume", default=5)
    eval_every: int = _opt("held-out estimate every N steps (0 = only at the end)", default=200)
    log_every: int = _opt("training log entry every N steps", default=20)
    checkpoint_every: int = _opt("resumable checkpoint every N steps (0 = only at the end)", default=500)
    final_eval_prompts: int = _opt("held-out prompts the final engine acceptance check runs (0 = skip)", default=8)
    final_eval_tokens: int = _opt("tokens per prompt in the final acceptance check", default=128)
    save_dtype: str = _opt("dtype of the saved head: bfloat16, float16 or float32", default="bfloat16")
    max_file_mb: float = _opt(
        "largest weight file of the saved head in MiB: a larger head is split into model-0000K-of-0000N.safetensors "
        "with an index, read as one by the loaders (0 = always one model.safetensors)", default=15.0)
    save_embedding: bool = _opt("EAGLE-1: store a copy of the target's embedding in the head (the loader shares the target's otherwise)", default=False)

    def resolved_precision(self, device_type: str) -> str:
        if self.precision == "auto":
            return "bf16" if device_type == "cuda" else "fp32"
        return self.precision

    def _bad(self, name: str, allowed: str) -> ValueError:
        return ValueError(f"{name}={getattr(self, name)!r} is invalid: {allowed}")

    def validate(self) -> TrainConfig:
        """Every field checked; returns self. Raises a one-line ``ValueError`` for the first bad one."""
        bad = self._bad
        if not self.out:
            raise ValueError("out is required: give --out DIR for the trained head")
        if self.method not in METHODS:
            raise bad("method", f"choose {' or '.join(METHODS)}")
        if self.device not in DEVICES:
            raise bad("device", f"choose one of {', '.join(DEVICES)}")
        if self.data_device not in DEVICES:
            raise bad("data_device", f"choose one of {', '.join(DEVICES)}")
        if self.precision not in PRECISIONS:
            raise bad("precision", f"choose one of {', '.join(PRECISIONS)}")
        if self.sdpa not in SDPA_CHOICES:
            raise bad("sdpa", f"choose one of {', '.join(SDPA_CHOICES)}")
        check_prompt_set(self.prompt_set)
        if self.save_dtype not in ("bfloat16", "float16", "float32"):
            raise bad("save_dtype", "choose bfloat16, float16 or float32")
        for name in ("num_prompts", "max_new_tokens", "gen_batch", "batch_tokens", "batch_pad", "ttt_steps", "spec_steps", "log_every", "draft_vocab_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad(name, "must be an integer >= 1")
        for name in ("held_out", "warmup_steps", "eval_every", "checkpoint_every", "final_eval_prompts", "final_eval_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise bad(name, "must be an integer >= 0")
        if self.held_out >= self.num_prompts:
            raise bad("held_out", f"must be smaller than num_prompts={self.num_prompts}")
        if not isinstance(self.rewarm_steps, int) or self.rewarm_steps < 0:
            raise bad("rewarm_steps", "must be an integer >= 0")
        if not self.max_file_mb >= 0:
            raise bad("max_file_mb", "must be >= 0 (0 = one file)")
        if self.final_eval_prompts > self.held_out:
            raise bad("final_eval_prompts", f"must be <= held_out={self.held_out} (it runs held-out prompts)")
        if self.head_intermediate_size is not None and (
                not isinstance(self.head_intermediate_size, int) or isinstance(self.head_intermediate_size, bool)
                or self.head_intermediate_size < 1):
            raise bad("head_intermediate_size", "must be an integer >= 1 or unset (the target's MLP width)")
        if self.head_layers is not None and (
                not isinstance(self.head_layers, int) or isinstance(self.head_layers, bool) or self.head_layers < 1):
            raise bad("head_layers", "must be an integer >= 1 or unset (1, or the source head's)")
        self._validate_schedule_and_loss()
        self._validate_head_source()
        return self

    def _validate_schedule_and_loss(self) -> None:
        bad = self._bad
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise bad("steps", "must be an integer >= 1 or unset")
        if self.gen_max_total_tokens is not None and self.gen_max_total_tokens < 64:
            raise bad("gen_max_total_tokens", "must be >= 64 or unset")
        if self.train_seconds is not None and not self.train_seconds > 0:
            raise bad("train_seconds", "must be > 0 seconds or unset")
        if self.train_seconds is not None and self.steps is not None:
            raise bad("train_seconds", "give one of --steps and --train-seconds")
        if self.time_budget is not None and not self.time_budget > 0:
            raise bad("time_budget", "must be > 0 seconds or unset")
        if not self.epochs > 0:
            raise bad("epochs", "must be > 0")
        if not 0 < self.gen_fraction < 1:
            raise bad("gen_fraction", "must be in (0, 1)")
        if not self.lr > 0:
            raise bad("lr", "must be > 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise bad("min_lr_ratio", "must be in [0, 1]")
        for name in ("weight_decay", "grad_clip", "feature_weight", "token_weight", "temperature"):
            if not getattr(self, name) >= 0:
                raise bad(name, "must be >= 0")
        if not 0 < self.step_decay <= 1:
            raise bad("step_decay", "must be in (0, 1]")
        if not self.early_weight > 0:
            raise bad("early_weight", "must be > 0")
        if not 0 <= self.hard_label_weight <= 1:
            raise bad("hard_label_weight", "must be in [0, 1]")
        if not 0 <= self.feature_noise <= 1:
            raise bad("feature_noise", "must be in [0, 1]")
        if not self.early_tokens >= 1:
            raise bad("early_tokens", "must be an integer >= 1")

    def _validate_head_source(self) -> None:
        """What the head starts from (--resume, --init-from, --resume-from) and what it keeps of it."""
        bad = self._bad
        if self.resume and self.init_from:
            raise bad("init_from", "resume continues from the checkpoint: give one of --resume and --init-from")
        if self.resize_draft_vocab and not (self.init_from and self.method == "eagle3"):
            raise bad("resize_draft_vocab", "needs --init-from an EAGLE-3 head (--method eagle3); a resumed schedule keeps its vocabulary")
        if self.resume_from and (self.resume or self.init_from):
            raise bad("resume_from", "give one of --resume (this machine's checkpoint), --resume-from and --init-from")
        for name in ("init_from", "resume_from"):
            if getattr(self, name) and not (Path(getattr(self, name)) / "config.json").is_file():
                raise bad(name, "no head folder there (a folder with config.json that train-draft wrote)")
        if self.head_layers is not None and self.resize_draft_vocab:
            raise bad("head_layers", "grow a head and re-choose its draft vocabulary in separate runs (--resize-draft-vocab is set)")
        if self.aux_layers is not None:
            self.aux_layer_ids()

    def aux_layer_ids(self) -> tuple[int, ...] | None:
        """``aux_layers`` as layer indices (None: unset); a one-line ``ValueError`` when malformed."""
        if self.aux_layers is None:
            return None
        allowed = "give three or more distinct target layer indices >= 0, comma-separated (e.g. 1,14,29)"
        if self.method != "eagle3":
            raise ValueError(f"aux_layers={self.aux_layers!r} is invalid: only an EAGLE-3 head (--method eagle3) reads target layers")
        try:
            ids = tuple(int(x) for x in self.aux_layers.split(","))
        except ValueError:
            raise ValueError(f"aux_layers={self.aux_layers!r} is invalid: {allowed}") from None
        if len(ids) < 3 or len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError(f"aux_layers={self.aux_layers!r} is invalid: {allowed}")
        return ids

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"unknown train-draft option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**kwargs).validate()
