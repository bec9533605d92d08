"""Compile the attention kernels for a GPU target without a GPU (ahead of time).

The interpreter runs the kernels as numpy and accepts code that the compiler rejects (loop-carried
type changes, dot shapes, unsupported ops). This compiles representative specializations down
to a cubin for ``sm_90`` (H100) so CPU CI catches those too. It must run in a process WITHOUT
``TRITON_INTERPRET`` (the kernels must be ``JITFunction``s):

    python -m updraft.attention.triton_kernels.compile_check [--full] [--arch 90]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from updraft.attention.triton_kernels import (
    decode,
    extend,
    interpreting,
    kv_store,
    merge,
    mla_decode,
    mla_extend,
    next_pow2,
    rope_store,
)

_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _compile(
    fn: Any, target: GPUTarget, ptrs: dict[str, str], consts: dict[str, Any], num_warps: int = 4, floats: tuple[str, ...] = ()
) -> tuple[float, int, int, str]:
    """Compile ``fn`` with pointer types ``ptrs``, constexprs ``consts``, other args i32/fp32:
    (seconds, shared memory bytes, local-memory stores in the PTX: register spills, the MMA
    instructions its dots became: "wgmma" (Hopper warpgroup MMA), "mma" (mma.sync) or "")."""
    if "PDL" in fn.arg_names:  # the GPU default: every kernel launches with PDL on sm_90+
        consts = {"PDL": 2, **consts}
    stages = int(consts.pop("num_stages", 2))
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptrs:
            sig[name] = "*" + ptrs[name]
        else:
            sig[name] = "fp32" if name in floats else "i32"
    # As the launcher specializes real arguments: pointers and strides divisible by 16 (without
    # it the pipeliner sees scalar loads and issues no async copies: the shared memory and
    # buffering checked here would not be the GPU's).
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
             if name in ptrs or (name.startswith("stride") and name not in consts)}
    t0 = time.time()
    kernel = triton.compile(ASTSource(fn, sig, consts, attrs), target=target,
                            options={"num_warps": num_warps, "num_stages": stages})
    ptx = kernel.asm["ptx"]
    mma = "wgmma" if "wgmma.mma_async" in ptx else "mma" if "mma.sync" in ptx else ""
    return time.time() - t0, int(kernel.metadata.shared), ptx.count("st.local"), mma


def specs(full: bool) -> list[tuple[str, Any, dict[str, str], dict[str, Any], int]]:
    """(label, kernel, pointer types, constexprs, num_warps) to compile."""
    out = []
    dtypes = ("bfloat16", "float32", "float16") if full else ("bfloat16", "float32")
    for dt in dtypes:
        d, fp32 = _SHORT[dt], dt == "float32"
        bn = 32 if fp32 else 64
        prec = "ieee" if fp32 else "tf32"
        for direct, merge_in in ((True, False), (False, False), (False, True)) if full or not fp32 else ((False, True),):
            for group, hd in ((4, 128), (3, 64)) if merge_in else ((4, 128),):
                for stride in (1, 6) if merge_in or full else (1,):  # decode; a 6-token verify block
                    out.append((
                        f"decode {dt} direct={direct} merge_in_kernel={merge_in} group={group} hd={hd} stride={stride}",
                        decode._decode_kernel,
                        dict(Q=d, KPool=d, VPool=d, Out=d, MidO="fp32", MidLse="fp32", Sem="i32", ReqToToken="i32",
                             ReqPoolIdx="i64", SeqLens="i32"),
                        dict(GROUP=group, STRIDE=stride, HEAD_DIM=hd, BLOCK_H=max(16, next_pow2(stride * group)),
                             BLOCK_N=bn, BLOCK_D=hd, MIN_SPLIT=2 * bn, DIRECT=direct, DOT_F32=False, DOT_PREC=prec,
                             MERGE=merge_in, PREFETCH=stride > 1, num_stages=3 if stride > 1 else 2,  # _tile's
                             PREWARM=dt != "float32", LINE=128 // (4 if dt == "float32" else 2),
                             SKIP_EMPTY=not direct),  # decode_attention: on with the in-kernel merge
                        4,
                    ))
        # verify block; prefill; SmolLM2's draft extend (fixed stride 6: every row written)
        shapes = [(128, 4, 16, True, False, 0), (128, 4, 128, False, True, 0), (64, 3, 32, False, False, 6)]
        if full:
            shapes += [(256, 16, 64, False, True, 0), (64, 1, 128, True, True, 0), (40, 3, 32, False, False, 0)]
        for hd, group, rows, tree, direct, stride in shapes:
            if fp32 and not full and rows > 16:
                continue
            if fp32:
                rows = min(rows, 32)
            gp = next_pow2(group)
            bt = max(rows, gp) // gp
            bn_e = (16 if fp32 else 32) if hd > 128 else bn
            out.append((
                f"extend {dt} hd={hd} group={group} rows={bt * gp} tree={tree} direct={direct} stride={stride}",
                extend._extend_kernel,
                dict(Q=d, KNew=d, VNew=d, KPool=d, VPool=d, Out=d, MidO="fp32", MidLse="fp32", ReqToToken="i32",
                     ReqPoolIdx="i64", SeqLens="i32", ExtLens="i32", ExtStart="i32", TreeMask="u8" if tree else "i32"),
                dict(GROUP=group, GROUP_PAD=gp, BLOCK_T=bt, ROWS=bt * gp, BLOCK_N=bn_e, HEAD_DIM=hd,
                     BLOCK_D=max(16, next_pow2(hd)), MIN_SPLIT=2 * bn_e, TREE=tree, DIRECT=direct, DOT_F32=False, DOT_PREC=prec,
                     STRIDE=stride),
                8 if bt * gp >= 128 else 4,
            ))
        out.append((f"merge -> {dt}", merge._merge_kernel, dict(MidO="fp32", MidLse="fp32", Out=d),
                    dict(HEAD_DIM=128, BLOCK_HM=1, BLOCK_S=64, BLOCK_D=128, WRITTEN=False), 4))
        out.append((f"merge written -> {dt}", merge._merge_kernel, dict(MidO="fp32", MidLse="fp32", Out=d),
                    dict(HEAD_DIM=64, BLOCK_HM=4, BLOCK_S=32, BLOCK_D=64, WRITTEN=True), 4))
        for has_v, (hkv, hd) in ((True, (8, 128)), (False, (1, 576))):  # K and V; MLA's latent rows (K only)
            out.append((f"kv_store {dt} has_v={has_v}", kv_store._kv_store_kernel, dict(K=d, V=d, KPool=d, VPool=d, Loc="i64"),
                        dict(NUM_KV_HEADS=hkv, HEAD_DIM=hd, BLOCK_H=hkv, BLOCK_D=next_pow2(hd), HAS_V=has_v), 4))
        out += _mla_specs(dt, full)
        out.append((f"rope_store {dt}", rope_store._rope_store_kernel,
                    dict(Q=d, K=d, V=d, KPool=d, VPool=d, Loc="i64", Pos="i64", CosSin=d),
                    dict(HQ=32, HK=8, HALF=64, BLOCK_HQ=32, BLOCK_HK=8, BLOCK_HALF=64, RNE=False), 8))
    return out


def _mla_specs(dt: str, full: bool) -> list[tuple[str, Any, dict[str, str], dict[str, Any], int]]:
    """The MLA kernels at DeepSeek's widths (512 + 64) with the backend's GPU tiles: decode of 16
    heads (V2-Lite) and of 128 (V3, 32-row head blocks), a verify block of 4 x 16 rows under a
    tree mask, prefill and a V2 draft extend (64-row tiles); fp32 at its 16 x 16 tiles."""
    d, fp32 = _SHORT[dt], dt == "float32"
    prec = "ieee" if fp32 else "tf32"
    lat = dict(DV=512, DR=64, BLOCK_DV=512, BLOCK_DR=64, DOT_F32=False, DOT_PREC=prec)
    decode_ptrs = dict(Q=d, KPool=d, Out=d, MidO="fp32", MidLse="fp32", ReqToToken="i32", ReqPoolIdx="i64", SeqLens="i32")
    extend_ptrs = dict(Q=d, KNew=d, KPool=d, Out=d, MidO="fp32", MidLse="fp32", ReqToToken="i32", ReqPoolIdx="i64",
                       SeqLens="i32", ExtLens="i32", ExtStart="i32")
    # (heads, stride, rows, keys, tree, direct, warps) decode; (heads, rows, keys, tree, direct, warps) extend;
    # the bf16 decode tiles run 3 stages with the slots prefetched (MLABackend._tile)
    dec = [(16, 1, 16, 64, False, False, 4), (128, 1, 32, 64, False, False, 8), (16, 4, 32, 64, True, False, 8)]
    ext = [(16, 64, 32, False, True, 8)]
    if fp32:
        dec = [(16, 4, 16, 16, True, False, 4)]
        ext = []
    if full:
        dec += [(16, 1, 16, 16, False, True, 4)] if fp32 else [(16, 1, 16, 64, False, True, 4)]
        ext += [(16, 16, 16, True, False, 4)] if fp32 else [(128, 64, 32, False, False, 8), (16, 64, 32, True, False, 8)]
    out = []
    for heads, stride, rows, bn, tree, direct, warps in dec:
        out.append((f"mla_decode {dt} H={heads} stride={stride} rows={rows} tree={tree} direct={direct}",
                    mla_decode._mla_decode_kernel, decode_ptrs | dict(TreeMask="u8" if tree else "i32"),
                    dict(NUM_HEADS=heads, STRIDE=stride, BLOCK_M=rows, BLOCK_N=bn, MIN_SPLIT=max(2 * bn, 16 * rows),
                         TREE=tree, DIRECT=direct, PREFETCH=not fp32, EARLY_META=not fp32, num_stages=2 if fp32 else 3,
                         **lat), warps))
    for heads, rows, bn, tree, direct, warps in ext:
        out.append((f"mla_extend {dt} H={heads} rows={rows} tree={tree} direct={direct}", mla_extend._mla_extend_kernel,
                    extend_ptrs | dict(TreeMask="u8" if tree else "i32"),
                    dict(NUM_HEADS=heads, BLOCK_M=rows, BLOCK_N=bn, MIN_SPLIT=2 * bn, TREE=tree, DIRECT=direct, **lat),
                    warps))
    if full:
        out.append((f"merge mla -> {dt}", merge._merge_kernel, dict(MidO="fp32", MidLse="fp32", Out=d),
                    dict(HEAD_DIM=512, BLOCK_HM=1, BLOCK_S=64, BLOCK_D=512, WRITTEN=False), 4))
        out.append((f"merge mla written -> {dt}", merge._merge_kernel, dict(MidO="fp32", MidLse="fp32", Out=d),
                    dict(HEAD_DIM=512, BLOCK_HM=1, BLOCK_S=16, BLOCK_D=256, WRITTEN=True), 4))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="compile the triton attention kernels for a CUDA target, no GPU needed")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability x10 (90 = H100)")
    p.add_argument("--full", action="store_true", help="more dtypes / head shapes (slower: fp32 FMA dots compile slowly)")
    args = p.parse_args(argv)
    if interpreting():
        print("compile_check: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)", file=sys.stderr)
        return 2
    target = GPUTarget("cuda", args.arch, 32)
    failures = 0
    for label, fn, ptrs, consts, warps in specs(args.full):
        try:
            dt, smem, spills, mma = _compile(fn, target, ptrs, consts, warps, floats=("scale_log2",))
            print(f"ok    {label}: {dt:.1f}s, {smem} B shared" + (f", {mma}" if mma else "")
                  + (f", {spills} local stores (spills)" if spills else ""))
        except Exception as exc:  # report every failing specialization, not just the first
            failures += 1
            print(f"FAIL  {label}: {type(exc).__name__}: {str(exc)[:1500]}")
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
