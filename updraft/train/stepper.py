"""One optimizer step of a draft head: what ``updraft train-draft`` runs per batch and what
``benchmarks/train_step.py`` times (the same object, so the benchmark measures the trainer)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from updraft.train.config import TrainConfig
from updraft.train.data import TrainBatch
from updraft.train.forward import unroll
from updraft.train.heads import Head
from updraft.train.losses import HostMetrics, LossConfig, TargetHead, Unroll, loss_terms

NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]  # TrainConfig.sdpa "no-cudnn"


@dataclass
class Stepper:
    """A head, its optimizer and loss: ``step`` trains it on one batch."""

    head: Head
    opt: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    labels: TargetHead
    loss_cfg: LossConfig
    precision: str  # "bf16": autocast over fp32 weights; "fp32": nothing mixed
    device: torch.device
    seed: int
    grad_clip: float
    forward: Unroll = unroll  # or its torch.compile'd copy (TrainConfig.compile)
    sdpa: str = "auto"  # TrainConfig.sdpa: "no-cudnn" keeps cuDNN's per-shape attention plans out

    @classmethod
    def for_head(cls, cfg: TrainConfig, head: Head, device: torch.device, precision: str) -> Stepper:
        """AdamW over the head's trainable parameters and the loss ``cfg`` describes."""
        params = [p for p in head.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=cfg.weight_decay)
        loss_cfg = LossConfig(steps=cfg.ttt_steps, feature_weight=cfg.feature_weight, token_weight=cfg.token_weight,
                              step_decay=cfg.step_decay, early_weight=cfg.early_weight, early_tokens=cfg.early_tokens,
                              hard_label_weight=cfg.hard_label_weight, feature_noise=cfg.feature_noise)
        # dynamic: every batch has its own [B, L]; one compiled graph serves them all
        forward: Unroll = torch.compile(unroll, dynamic=True) if cfg.compile else unroll
        return cls(head, opt, params, TargetHead(head), loss_cfg, precision, device, cfg.seed, cfg.grad_clip, forward,
                   cfg.sdpa)

    def scope(self) -> contextlib.ExitStack:
        """What every forward of the head runs under (training steps and held-out estimates): bf16
        autocast when mixed, and the attention kernels ``sdpa`` allows (the backward runs the kernels
        its forward chose)."""
        stack = contextlib.ExitStack()
        if self.precision == "bf16":
            stack.enter_context(torch.autocast(device_type=self.device.type, dtype=torch.bfloat16))
        if self.sdpa == "no-cudnn":
            stack.enter_context(sdpa_kernel(NO_CUDNN))
        return stack

    def step(self, batch: TrainBatch, lr: float, index: int) -> dict[str, float]:
        """``launch`` and wait for the step's metrics."""
        return self.launch(batch, lr, index).metrics()

    def launch(self, batch: TrainBatch, lr: float, index: int) -> HostMetrics:
        """Optimizer step number ``index`` at ``lr``, queued on the device without waiting for it
        (a batch from ``DistillData.batch`` carries the host copies its row counts need); its
        metrics on their way to host memory. Its feature noise (if any) is drawn from a generator
        seeded by the run's seed and ``index``, so a resumed run draws what the uninterrupted one
        would have."""
        for g in self.opt.param_groups:
            g["lr"] = lr
        noise = None
        if self.loss_cfg.feature_noise > 0:
            noise = torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + index)
        with self.scope():
            loss, metrics = loss_terms(self.head, batch, self.loss_cfg, self.labels, noise, self.forward)
        loss.backward()
        gnorm = (torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip) if self.grad_clip > 0
                 else torch.zeros((), device=loss.device))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return metrics.to_host(grad_norm=gnorm)

