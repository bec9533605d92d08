"""Where topk_rows' time goes (bs 1/8, V 8192 bf16, K 64): kernel copies cut after each phase,
at 4/8/16 warps, timed per call in a CUDA graph of 50 calls (no PDL)."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from updraft.spec import sampling_kernels as sk  # noqa: E402
from updraft.spec.sampling_kernels import _canonical_bits, _kth_key, _order_key  # noqa: E402


@triton.jit
def _kern(X, s_x, OutV, s_ov, OutI, s_oi, V, K: tl.constexpr, KP2: tl.constexpr, BLOCK: tl.constexpr,
          SHIFT: tl.constexpr, PHASE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * s_x
    j = tl.arange(0, BLOCK)
    valid = j < V
    NB: tl.constexpr = 32 - SHIFT
    x = tl.load(x_row + j, mask=valid, other=0.0).to(tl.float32)
    key = tl.where(valid, _order_key(_canonical_bits(x)) >> SHIFT, -(1 << (NB - 1)))
    ov = OutV + row * s_ov
    oi = OutI + row * s_oi
    if PHASE == 1:
        tl.store(oi, tl.max(key, axis=0).to(tl.int64))
    else:
        t = _kth_key(key, K, NB)
        if PHASE == 2:
            tl.store(oi, t.to(tl.int64))
        else:
            gt = key > t
            eq = valid & (key == t)
            c = tl.cumsum(gt.to(tl.int32) + (eq.to(tl.int32) << 16), axis=0)
            need = K - tl.sum(gt.to(tl.int32), axis=0)
            eq_before = (c >> 16) - eq.to(tl.int32)
            sel = gt | (eq & (eq_before < need))
            slot = (c & 0xFFFF) - gt.to(tl.int32) + tl.minimum(eq_before, need)
            tl.store(oi + slot, j.to(tl.int64), mask=sel)
            if PHASE == 4:
                tl.debug_barrier()
                s = tl.arange(0, KP2)
                ks = s < K
                i = tl.load(oi + s, mask=ks, other=0)
                bits = _canonical_bits(tl.load(x_row + i, mask=ks, other=0.0).to(tl.float32))
                kk = _order_key(bits)
                ka, kb = kk[:, None], kk[None, :]
                before = ks[None, :] & ((kb > ka) | ((kb == ka) & (s[None, :] < s[:, None])))
                rank = tl.sum(before.to(tl.int32), axis=1)
                tl.debug_barrier()
                tl.store(ov + rank, bits.to(tl.float32, bitcast=True), mask=ks)
                tl.store(oi + rank, i, mask=ks)


def per_call_us(fn, calls=50, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / calls)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    out = {}
    dev = torch.device("cuda")
    for bs in (1, 8):
        for v in (8192, 16384):
            x = torch.randn(bs, v, device=dev).to(torch.bfloat16)
            k = 64
            vals = torch.empty(bs, k, device=dev)
            idx = torch.empty(bs, k, dtype=torch.int64, device=dev)
            block = triton.next_power_of_2(v)
            res = {}
            res["torch.topk"] = per_call_us(lambda: torch.topk(x, k, dim=-1))
            if v <= sk.MAX_TOPK_ROW:
                res["topk_rows (shipped)"] = per_call_us(lambda: sk.topk_rows(x, k, vals, idx))
            ref_v, ref_i = sk.topk_rows_reference(x, k)
            for w in (4, 8, 16, 32):
                for ph in (1, 2, 3, 4):
                    def f(ph=ph, w=w):
                        _kern[(bs,)](x, x.stride(0), vals, vals.stride(0), idx, idx.stride(0), v, K=k, KP2=64,
                                     BLOCK=block, SHIFT=16, PHASE=ph, num_warps=w)
                    try:
                        res[f"w{w} phase{ph}"] = per_call_us(f)
                        if ph == 4:
                            f()
                            torch.cuda.synchronize()
                            res[f"w{w} ok"] = bool(torch.equal(idx, ref_i) and torch.equal(vals, ref_v))
                    except Exception as e:  # noqa: BLE001
                        res[f"w{w} phase{ph}"] = f"{type(e).__name__}"
            out[f"bs{bs} V{v}"] = res
            print(f"bs {bs} V {v}: " + ", ".join(f"{n} {t:.2f}" if isinstance(t, float) else f"{n} {t}" for n, t in res.items()), flush=True)
    path = os.path.join(os.environ.get("OUT", "/tmp"), "topk_phases.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
