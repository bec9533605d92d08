"""Compile the ``updraft.ops`` kernels for a GPU target without a GPU (ahead of time).

The interpreter runs kernels as numpy and accepts code the compiler rejects, so CPU CI compiles
representative specialisations (Llama-3-8B and small-model shapes, bf16/fp16/fp32) down to a
cubin for ``sm_90`` (H100). Run it in a process WITHOUT ``TRITON_INTERPRET``:

    python -m updraft.ops.compile_check [--arch 90]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from updraft.ops import (
    activation,
    gemv,
    gemv_config,
    gemv_kernels,
    gemv_merge,
    interpreting,
    latent,
    norm,
    rotary,
)
from updraft.ops.triton_utils import num_warps

_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _compile(fn: Any, target: GPUTarget, ptrs: dict[str, str], consts: dict[str, Any], warps: int,
             stages: int = 3) -> tuple[float, int]:
    """Compile ``fn`` with pointer element types ``ptrs`` and constexprs ``consts``; the other
    arguments are i32 except ``eps`` (fp32)."""
    if "PDL" in fn.arg_names:  # the GPU default: every kernel launches with PDL on sm_90+
        consts = {"PDL": 1, **consts}
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptrs:
            sig[name] = "*" + ptrs[name]
        else:
            sig[name] = "fp32" if name == "eps" else "i32"
    t0 = time.time()
    kernel = triton.compile(ASTSource(fn, sig, consts), target=target, options={"num_warps": warps, "num_stages": stages})
    spills = kernel.asm["ptx"].count("st.local")  # register spills: a slow kernel, not a wrong one
    return time.time() - t0, spills


def specs() -> list[tuple[Any, ...]]:
    """(label, kernel, pointer types, constexprs, num_warps[, num_stages]) to compile."""
    out: list[tuple[Any, ...]] = []
    for dt in ("bfloat16", "float16", "float32"):
        d = _SHORT[dt]
        for dim, has_res in ((4096, True), (4096, False), (576, True), (128, False)):
            block = triton.next_power_of_2(dim)
            out.append((
                f"rmsnorm {d} D={dim} residual={has_res}",
                norm._rmsnorm_kernel,
                dict(X=d, Res=d, W=d, Out=d, ResOut=d),
                dict(D=dim, BLOCK_D=block, HAS_RES=has_res, RNE=False),
                num_warps(block),
            ))
        for hq, hk, dim in ((32, 8, 128), (9, 3, 64), (16, 1, 256)):
            bq, bk, bh = triton.next_power_of_2(hq), triton.next_power_of_2(hk), dim // 2
            out.append((
                f"rotary {d} Hq={hq} Hkv={hk} D={dim}",
                rotary._rotary_kernel,
                dict(Q=d, K=d, Pos="i64", CosSin=d),
                dict(HQ=hq, HK=hk, HALF=dim // 2, BLOCK_HQ=bq, BLOCK_HK=bk, BLOCK_HALF=bh, RNE=False),
                num_warps(2 * (bq + bk) * bh, max_warps=8),
            ))
        for heads, rank, rope in ((16, 512, 64), (128, 512, 64)):  # DeepSeek-V2-Lite, V3
            tile = rank + 2 * triton.next_power_of_2(heads) * (rope // 2)
            for store in (True, False):
                out.append((
                    f"latent_rows {d} H={heads} rank={rank} rope={rope} store={store}",
                    latent._latent_rows_kernel,
                    dict(KV=d, Q=d, Pos="i64", CosSin=d, W=d, Pool=d, Loc="i64"),
                    dict(R=rank, BLOCK_R=rank, HALF=rope // 2, BLOCK_HALF=rope // 2, H=heads,
                         BLOCK_H=triton.next_power_of_2(heads), STORE=store, RNE=False),
                    num_warps(tile, max_warps=8),
                ))
        out.append((
            f"silu_and_mul {d}",
            activation._silu_and_mul_kernel,
            dict(X=d, Out=d),
            dict(BLOCK=1024, RNE=False),
            4,
        ))
    out.append(("rmsnorm bf16 x, fp32 weight -> fp32", norm._rmsnorm_kernel,
                dict(X="bf16", Res="bf16", W="fp32", Out="fp32", ResOut="bf16"),
                dict(D=4096, BLOCK_D=4096, HAS_RES=True, RNE=False), 16))
    return out + gemv_specs()


#: (kind, N, K, head_dim, Hq, Hkv) of the small-M GEMMs: SmolLM2-135M and Llama-3.1-8B.
GEMV_SHAPES = [
    ("qkv", 960, 576, 64, 9, 3), ("linear", 576, 576, 0, 0, 0), ("gate_up", 1536, 576, 0, 0, 0),
    ("linear", 576, 1536, 0, 0, 0), ("qkv", 6144, 4096, 128, 32, 8), ("linear", 4096, 4096, 0, 0, 0),
    ("gate_up", 14336, 4096, 0, 0, 0), ("linear", 4096, 14336, 0, 0, 0), ("linear", 128256, 4096, 0, 0, 0),
]


def _bare_linear(name: str, n: int, k: int, bucket: int, *, w: str, prefetch: bool, line: int, block_p: int,
                 round_: bool = True, wscale: bool = False) -> tuple[str, Any, dict[str, str], dict[str, Any], int, int]:
    """``_linear_kernel`` without prologue, bias or argmax, float32 out from bf16 rows over weight
    dtype ``w`` (``wscale``: with its row scales), at the heuristic config of ``bucket``."""
    cfg = gemv_config.heuristic("linear", n, k, bucket, 132)
    return (f"gemv {name} N={n} K={k} m<={bucket} {cfg}", gemv_kernels.linear_kernel,
            dict(X="bf16", Ids="i64", Res="bf16", ResOut="bf16", NW="bf16", Sq="fp32", W=w, WScale="fp32",
                 Bias="bf16", Out="fp32", PMax="fp32", PIdx="i32", Argmax="i64", Sem="i32", ERes="bf16", ENW="bf16",
                 EU="bf16", ESq="fp32"),
            dict(BLOCK_M=cfg.block_m(bucket), BLOCK_K=cfg.block_k, DOT=cfg.dot, DOT_F32=False, PREC="tf32",
                 RNE=False, TWO_PASS=False, PDL=2, PREFETCH=prefetch, LINE=line, GATHER=False, HAS_RES=False,
                 HAS_NORM=False, WRITE_RES=False, PRE_RSTD=False, BLOCK_S=1, BLOCK_N=cfg.block_n, BLOCK_P=block_p,
                 HAS_BIAS=False, ARGMAX=False, ADD_NORM=False, ROUND=round_, HAS_WSCALE=wscale),
            cfg.num_warps, cfg.num_stages)


def gemv_specs() -> list[tuple[str, Any, dict[str, str], dict[str, Any], int, int]]:
    """The small-M GEMMs at the heuristic configs of M buckets 1 (FMA, one-pass norm) and 16 (dot:
    two-pass norm at SmolLM2's K, one-pass at 4096) in bf16, with the prologues and epilogues the
    decoder layer uses: QKV and gate/up reading ``NormedRows`` (and layer 0's QKV gathering and
    normalising its rows), o_proj / down adding the residual for the next norm, the LM head with
    its argmax; a few fp16 and fp32 ones."""
    out: list[tuple[str, Any, dict[str, str], dict[str, Any], int, int]] = []
    for dt, kind, n, k, d, hq, hkv, bucket in [
        ("bf16", *shape, bucket) for shape in GEMV_SHAPES for bucket in (1, 16)
    ] + [("fp16", *GEMV_SHAPES[4], 16), ("fp16", *GEMV_SHAPES[6], 1), ("fp32", *GEMV_SHAPES[0], 4),
         ("fp32", *GEMV_SHAPES[2], 8)]:
        cfg = gemv_config.heuristic(kind, n, k, bucket, 132, d)
        # layer 0's QKV gathers and normalises its rows; every other QKV and gate/up reads NormedRows
        first = kind == "qkv" and bucket == 1
        pre = kind != "linear" and not first
        # the producer (o_proj / down, hidden = k wide) leaves one partial sum of squares per program
        sums = triton.next_power_of_2(-(-k // gemv_config.heuristic("linear", k, k, bucket, 132).block_n))
        pro = dict(GATHER=first, HAS_RES=False, HAS_NORM=first, WRITE_RES=first, PRE_RSTD=pre, BLOCK_S=sums if pre else 1)
        common = dict(BLOCK_M=cfg.block_m(bucket), BLOCK_K=cfg.block_k, DOT=cfg.dot, DOT_F32=False,
                      PREC="ieee" if dt == "fp32" else "tf32", RNE=False, TWO_PASS=cfg.dot and k < gemv.TWO_PASS_MAX_K,
                      PDL=2 if dt != "fp32" else 0, PREFETCH=dt != "fp32", LINE=32 if dt == "fp32" else 64, **pro)
        ptrs = dict(X=dt, Ids="i64", Res=dt, ResOut=dt, NW=dt, Sq="fp32", W=dt)
        label = f"gemv {kind} {dt} N={n} K={k} m<={bucket} {cfg}"
        if kind == "qkv":
            qkv_ptrs = dict(ptrs, Bias=dt, Out=dt, KPool=dt, VPool=dt, Loc="i64", Pos="i64", CosSin=dt, X2=dt, NW2=dt,
                            Add="fp32")
            heads = dict(HQ=hq, HKV=hkv, HEAD_DIM=d, BLOCK_P=cfg.block_n)
            out.append((label, gemv_kernels.qkv_rope_kernel, qkv_ptrs,
                        dict(heads, HAS_BIAS=True, DUAL=False, HAS_ADD=False, **common), cfg.num_warps, cfg.num_stages))
            if dt == "bf16":  # EAGLE-3's mid layer: gathered embedding rows and the feature, two norms
                dual = dict(common, GATHER=True, HAS_RES=False, HAS_NORM=True, WRITE_RES=False, PRE_RSTD=False)
                out.append((label + " eagle3", gemv_kernels.qkv_rope_kernel, qkv_ptrs,
                            dict(heads, HAS_BIAS=False, DUAL=True, HAS_ADD=False, **dict(dual, TWO_PASS=False)),
                            cfg.num_warps, cfg.num_stages))
                # split: the embedding rows alone, the feature's product added (``addend``)
                out.append((label + " eagle3 split", gemv_kernels.qkv_rope_kernel, qkv_ptrs,
                            dict(heads, HAS_BIAS=False, DUAL=False, HAS_ADD=True, **dual), cfg.num_warps,
                            cfg.num_stages))
        elif kind == "gate_up":
            out.append((label, gemv_kernels.gate_up_kernel, dict(ptrs, Out=dt), dict(BLOCK_P=cfg.block_n, **common),
                        cfg.num_warps, cfg.num_stages))
        else:
            lm_head = n > 100000
            lin_ptrs = dict(ptrs, WScale="fp32", Bias=dt, Out="fp32" if lm_head else dt, PMax="fp32", PIdx="i32",
                            Argmax="i64", Sem="i32", ERes=dt, ENW=dt, EU=dt, ESq="fp32")
            lin = dict(common, BLOCK_N=cfg.block_n, BLOCK_P=1024, HAS_BIAS=False, ARGMAX=lm_head, GATHER=lm_head,
                       HAS_NORM=lm_head, HAS_RES=lm_head, WRITE_RES=False, ROUND=True, HAS_WSCALE=False,
                       ADD_NORM=not lm_head)
            out.append((label + (" norm+argmax" if lm_head else ""), gemv_kernels.linear_kernel, lin_ptrs, lin,
                        cfg.num_warps, cfg.num_stages))
            if dt == "bf16" and n == k == 576:  # EAGLE-3's feature product (``gemv.feature_product``)
                out.append((label + " norm f32-out", gemv_kernels.linear_kernel, dict(lin_ptrs, Out="fp32"),
                            dict(lin, HAS_NORM=True, ROUND=False, ADD_NORM=False), cfg.num_warps, cfg.num_stages))
    # an FP8 draft LM head (``gemv.linear(..., w_scale=)``): the 8B EAGLE-3 head's 32k x 4096
    out += [_bare_linear("lm_head fp8", 32000, 4096, b, w="fp8e4nv", prefetch=False, line=128, block_p=1024, wscale=True)
            for b in (1, 8)]
    # a MoE router's logits (``ops.float_linear``): DeepSeek-V2-Lite's 64 experts x 2048, float32 unrounded
    out += [_bare_linear("router bf16", 64, 2048, b, w="bf16", prefetch=True, line=64, block_p=16, round_=False)
            for b in (1, 2, 16)]
    # the split merge folded into o_proj (``gemv_merge``): SmolLM2's 9 x 64 heads and the 8B shape's 32 x 128,
    # FMA at one row, tensor cores at 6 and 48 rows
    for heads, d, rows in ((9, 64, (1, 6, 48)), (32, 128, (16,))):
        for m in rows:
            block_n, warps = gemv_merge._tile(m)
            dot, bm, bs = gemv_merge._row_tiles(m, d)
            out.append((f"merge_linear {heads}x{d} m{m}", gemv_merge.merge_linear_kernel,
                        dict(MidO="fp32", MidLse="fp32", W="bf16", Part="fp32", Tick="i32", Res="bf16", NW="bf16",
                             Stream="bf16", Scaled="bf16", Sq="fp32"),
                        dict(D=d, BLOCK_N=block_n, BLOCK_M=bm, BLOCK_S=bs, ALL_S=64,
                             DOT=dot, DOT_F32=False, PREC="tf32", RNE=False, PDL=2), warps))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="compile the updraft.ops kernels for a CUDA target, no GPU needed")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability x10 (90 = H100)")
    p.add_argument("--only", default="", help="compile only the specs whose label contains this")
    args = p.parse_args(argv)
    if interpreting():
        print("compile_check: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)", file=sys.stderr)
        return 2
    target = GPUTarget("cuda", args.arch, 32)
    failures = 0
    for label, fn, ptrs, consts, warps, *stages in specs():
        if args.only not in label:
            continue
        try:
            secs, spills = _compile(fn, target, ptrs, consts, warps, *stages)
            print(f"ok    {label}: {secs:.1f}s" + (f", {spills} local stores (spills)" if spills else ""))
        except Exception as exc:  # report every failing specialisation, not just the first
            failures += 1
            print(f"FAIL  {label}: {type(exc).__name__}: {str(exc)[:1500]}")
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
