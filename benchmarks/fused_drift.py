"""Where the small-M fused decoder layer (``updraft.models.fused``) and the unfused layer part
ways: one decode step of a model, every layer's stages computed both ways on the SAME inputs
(the fused run's), each compared with a float64 computation of that stage from the same rounded
inputs. A stage whose fused error is far above its unfused error is the bug; two equal errors
are rounding.

    python benchmarks/fused_drift.py --model tiny-llama --dtype bfloat16 --out drift.json
    python benchmarks/fused_drift.py --model random:smollm2-135m

Stages: ``resid`` (the residual add written by the prologue), ``qkv`` (norm + projection +
RoPE, q | k | v), ``kv_pool`` (the k and v rows in the pool), ``attn`` (attention over the pool,
both from the fused q), ``o_proj``, ``mlp_resid``, ``act`` (norm + gate/up + SiLU-mul), ``down``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from updraft import ops
from updraft.batch import ForwardBatch, ForwardMode
from updraft.models import fused


@dataclass
class Stage:
    layer: int
    stage: str
    fused_vs_unfused: float  # max |a - b| / max |b|
    fused_err64: float  # vs the float64 computation of the stage from the same inputs
    unfused_err64: float


@dataclass
class Report:
    model: str
    dtype: str
    device: str
    stages: list[Stage] = field(default_factory=list)
    logits_rel: list[float] = field(default_factory=list)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def norm64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rope64(x: torch.Tensor, pos: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Neox RoPE of ``x`` [T, H, D] in float64."""
    half = x.shape[-1] // 2
    cs = cos_sin[pos].double()
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    lo, hi = x[..., :half].double(), x[..., half:].double()
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


class Probe:
    """Wraps ``fused.decoder_layer``: records every stage of the fused layer against the unfused
    stages and float64 from the same inputs, then returns the fused layer's result."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.original = fused.decoder_layer

    def add(self, layer: int, stage: str, f: torch.Tensor, u: torch.Tensor, r64: torch.Tensor) -> None:
        self.report.stages.append(Stage(layer, stage, rel(f, u), rel(f, r64), rel(u, r64)))

    def __call__(self, layer, x, residual, batch: ForwardBatch, rotary, ids=None):  # noqa: ANN001, ANN204
        gemv = fused._gemv()
        i, attn = layer.self_attn.layer_id, layer.self_attn
        xin = x[ids] if ids is not None else x
        ln, post = layer.input_layernorm, layer.post_attention_layernorm
        # unfused stage 1
        r_u = xin if residual is None else (xin.float() + residual.float()).to(xin.dtype)
        xn_u = ln(r_u)
        qkv_u = attn.qkv_proj(xn_u)
        q_u, k_u, v_u = (t.clone() for t in attn.split_heads(qkv_u))
        ops.rotary_(q_u, k_u, batch.positions, rotary.cos_sin)
        qkv_u = torch.cat([q_u.flatten(1), k_u.flatten(1), v_u.flatten(1)], dim=-1)
        qkv64 = torch.nn.functional.linear(norm64(r_u, ln.weight, ln.eps), attn.qkv_proj.weight.double(),
                                           None if attn.qkv_proj.bias is None else attn.qkv_proj.bias.double())
        q64, k64, v64 = attn.split_heads(qkv64)
        qkv64 = torch.cat([rope64(q64, batch.positions, rotary.cos_sin).flatten(1),
                           rope64(k64, batch.positions, rotary.cos_sin).flatten(1), v64.flatten(1)], dim=-1)
        # fused stage 1 (as fused.decoder_layer does it)
        pro, res_f = fused.input_prologue(ln, x, residual, ids)
        pool = batch.attn_backend.kv_pool
        kp, vp = pool.k_buffer[i], pool.v_buffer[i]
        qkv_f, new_res = gemv.qkv_rope_store(
            x, attn.qkv_proj.weight, attn.qkv_proj.bias, pro, num_heads=attn.num_heads, num_kv_heads=attn.num_kv_heads,
            head_dim=attn.head_dim, k_pool=kp, v_pool=vp, loc=batch.out_cache_loc, positions=batch.positions,
            cos_sin=rotary.cos_sin)
        res_f = new_res if new_res is not None else res_f
        self.add(i, "resid", res_f, r_u, (xin.double() if residual is None else xin.double() + residual.double()))
        self.add(i, "qkv", qkv_f, qkv_u, qkv64)
        q_f, k_f, v_f = attn.split_heads(qkv_f)
        loc = batch.out_cache_loc.long()
        self.add(i, "kv_pool", torch.cat([kp[loc], vp[loc]], -1), torch.cat([k_u, v_u], -1),
                 torch.cat([rope64(k64, batch.positions, rotary.cos_sin), v64.double()], -1))
        o = batch.attn_backend.forward_stored(q_f, k_f, v_f, i, batch).reshape(q_f.shape[0], attn.q_size)
        # attention from the fused q over the pool (what the fused layer attends), float64 from it
        kk, vv = self._context(batch, kp, vp)
        o64 = self._attend64(q_f, kk, vv, attn)
        self.add(i, "attn", o, o64.to(o.dtype), o64)
        h_f, _, _ = gemv.linear(o, attn.o_proj.weight)
        h_u = attn.o_proj(o)
        self.add(i, "o_proj", h_f, h_u, torch.nn.functional.linear(o.double(), attn.o_proj.weight.double()))
        # MLP
        mlp = layer.mlp
        act_f, res2_f = gemv.gate_up_silu(h_f, mlp.gate_up_proj.weight,
                                          gemv.Prologue(norm_weight=post.weight, eps=post.eps, residual=res_f,
                                                        write_residual=True))
        xn2_u, res2_u = post.forward_add(h_f, res_f)
        act_u = ops.silu_and_mul(mlp.gate_up_proj(xn2_u))
        r2_64 = h_f.double() + res_f.double()
        gu64 = torch.nn.functional.linear(norm64(res2_u, post.weight, post.eps), mlp.gate_up_proj.weight.double())
        g64, u64 = gu64.chunk(2, dim=-1)
        self.add(i, "mlp_resid", res2_f, res2_u, r2_64)
        self.add(i, "act", act_f, act_u, torch.nn.functional.silu(g64) * u64)
        out_f, _, _ = gemv.linear(act_f, mlp.down_proj.weight)
        out_u = mlp.down_proj(act_f)
        self.add(i, "down", out_f, out_u, torch.nn.functional.linear(act_f.double(), mlp.down_proj.weight.double()))
        return out_f, res2_f

    @staticmethod
    def _context(batch: ForwardBatch, kp: torch.Tensor, vp: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each decode row's K and V [L, Hkv, D] from the pool (req_to_token rows, committed lengths)."""
        kk, vv = [], []
        table = batch.attn_backend.req_to_token
        for r in range(batch.seq_lens.shape[0]):
            n = int(batch.seq_lens[r])
            slots = table[int(batch.req_pool_indices[r]), :n].long()
            kk.append(kp[slots])
            vv.append(vp[slots])
        return kk, vv

    @staticmethod
    def _attend64(q: torch.Tensor, kk: list[torch.Tensor], vv: list[torch.Tensor], attn) -> torch.Tensor:  # noqa: ANN001
        out = []
        group = attn.num_heads // attn.num_kv_heads
        for r, (k, v) in enumerate(zip(kk, vv)):
            qd = q[r].double()  # [H, D]
            kd = k.double().repeat_interleave(group, dim=1)  # [L, H, D]
            vd = v.double().repeat_interleave(group, dim=1)
            s = torch.einsum("hd,lhd->hl", qd, kd) / attn.head_dim ** 0.5
            out.append(torch.einsum("hl,lhd->hd", s.softmax(-1), vd).reshape(-1))
        return torch.stack(out)


def load(model: str, dtype: torch.dtype, device: str):  # noqa: ANN201
    from updraft.models.loader import load_checkpoint

    if model == "tiny-llama":
        from updraft.testing import tiny_hf_model, write_tiny_tokenizer

        folder = Path(tempfile.mkdtemp())
        tiny_hf_model("llama", False, 0).save_pretrained(folder)
        write_tiny_tokenizer(folder)
        return load_checkpoint(folder, dtype=dtype, device=device, progress=False).model
    if model.startswith("random:"):
        from updraft.bench.models import random_model

        return random_model(model, dtype, device).model
    return load_checkpoint(model, dtype=dtype, device=device, progress=False).model


def run(model_name: str, dtype: torch.dtype, device: str, steps: int) -> Report:
    from updraft.memory.pools import PagedAllocator, ReqToTokenPool
    from updraft.runtime.model_runner import ModelRunner

    report = Report(model_name, str(dtype), torch.cuda.get_device_name() if device == "cuda" else device)
    model = load(model_name, dtype, device)
    vocab = model.config.vocab_size
    prompt = [(7 * j + 3) % vocab for j in range(6)]

    def generate(probe: Probe | None) -> list[torch.Tensor]:
        pool = ReqToTokenPool(2, 64, device)
        alloc = PagedAllocator(pool, 64, 1)
        runner = ModelRunner(model, pool, 64, 1, "triton")
        row = pool.alloc()
        assert row is not None and alloc.ensure(row, 6 + steps + 2)
        with ops.use_fused_layers(False):
            out = runner.forward(runner.make_batch(ForwardMode.EXTEND, prompt, [row], [6], [6]))
        logits, tok = [], int(out.logits[-1].argmax())
        for n in range(7, 7 + steps):
            if probe is not None:
                fused.decoder_layer = probe
            try:
                with ops.use_backend("triton") if probe is not None else ops.use_fused_layers(False):
                    out = runner.forward(runner.make_batch(ForwardMode.DECODE, [tok], [row], [n], [1], stride=1))
            finally:
                if probe is not None:
                    fused.decoder_layer = probe.original
            logits.append(out.logits)
            tok = (tok * 31 + 11) % vocab  # the same input tokens in both runs
        return logits

    probe = Probe(report)
    fused_logits = generate(probe)
    plain_logits = generate(None)
    report.logits_rel = [rel(a, b) for a, b in zip(fused_logits, plain_logits)]
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    report = run(args.model, getattr(torch, args.dtype), args.device, args.steps)
    print(f"{report.model} {report.dtype} on {report.device}: decode logits rel diff {', '.join(f'{v:.3g}' for v in report.logits_rel)}")
    worst: dict[str, Stage] = {}
    for s in report.stages:
        if s.stage not in worst or s.fused_err64 - s.unfused_err64 > worst[s.stage].fused_err64 - worst[s.stage].unfused_err64:
            worst[s.stage] = s
    print(f"{'stage':10s} {'layer':>5s} {'fused/unfused':>14s} {'fused/f64':>10s} {'unfused/f64':>12s}")
    for s in worst.values():
        print(f"{s.stage:10s} {s.layer:5d} {s.fused_vs_unfused:14.3g} {s.fused_err64:10.3g} {s.unfused_err64:12.3g}")
    if args.out:
        args.out.write_text(json.dumps(asdict(report), indent=1))


if __name__ == "__main__":
    main()
