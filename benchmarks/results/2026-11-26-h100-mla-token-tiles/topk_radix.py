"""(Run from the repository root: python benchmarks/results/2026-11-26-h100-mla-token-tiles/topk_radix.py.
The "shipped" column of run 5 was the radix version with the tuple reduce, since reverted.)

topk_rows' k-th key search: the old 16-round bisection against radix-16 histograms reduced as
one tuple reduce, as four tl.sum, or as one [BLOCK, 4] sum; whole kernels, checked against the
reference, per call in a CUDA graph of 50 (no PDL)."""
import json, os, sys
import torch, triton
import triton.language as tl
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from updraft.spec import sampling_kernels as sk
from updraft.spec.sampling_kernels import _canonical_bits, _order_key


@triton.jit
def _pack_bin(m, w: tl.constexpr):
    """Bin ``m`` (0..15) one-hot in 16-bit fields: word ``w`` holds bins ``4w .. 4w + 3``."""
    return tl.where((m >> 2) == w, tl.full(m.shape, 1, tl.int64) << ((m & 3) * 16).to(tl.int64), 0)


@triton.jit
def _add4(a0, a1, a2, a3, b0, b1, b2, b3):
    return a0 + b0, a1 + b1, a2 + b2, a3 + b3
from topk_phases import per_call_us


@triton.jit
def _bisect(key, K: tl.constexpr, NB: tl.constexpr):
    lo = -(1 << (NB - 1))
    t = tl.where(tl.sum((key >= 0).to(tl.int32), axis=0) >= K, 0, lo)
    for b in tl.static_range(NB - 2, -1, -1):
        cand = t | (1 << b)
        t = tl.where(tl.sum((key >= cand).to(tl.int32), axis=0) >= K, cand, t)
    return t


@triton.jit
def _radix(key, K: tl.constexpr, NB: tl.constexpr, HOW: tl.constexpr):
    t = tl.full([], -(1 << (NB - 1)), tl.int32)
    ND: tl.constexpr = (NB + 3) // 4
    for d in tl.static_range(ND - 1, -1, -1):
        shift = 4 * d
        m = tl.where(key >= t, tl.minimum((key - t) >> shift, 15), 0).to(tl.int32)
        if HOW == 1:
            w0, w1, w2, w3 = tl.reduce((_pack_bin(m, 0), _pack_bin(m, 1), _pack_bin(m, 2), _pack_bin(m, 3)), 0, _add4)
        elif HOW == 2:
            w0 = tl.sum(_pack_bin(m, 0), axis=0)
            w1 = tl.sum(_pack_bin(m, 1), axis=0)
            w2 = tl.sum(_pack_bin(m, 2), axis=0)
            w3 = tl.sum(_pack_bin(m, 3), axis=0)
        else:
            q = tl.arange(0, 4)
            one = tl.full([1, 4], 1, tl.int64) << ((m[:, None] & 3) * 16).to(tl.int64)
            ws = tl.sum(tl.where((m[:, None] >> 2) == q[None, :], one, 0), axis=0)
            w0 = tl.sum(tl.where(q == 0, ws, 0), axis=0)
            w1 = tl.sum(tl.where(q == 1, ws, 0), axis=0)
            w2 = tl.sum(tl.where(q == 2, ws, 0), axis=0)
            w3 = tl.sum(tl.where(q == 3, ws, 0), axis=0)
        above = tl.zeros([], tl.int32)
        c = tl.zeros([], tl.int32)
        for b in tl.static_range(15, 0, -1):
            wd = w3 if b >= 12 else (w2 if b >= 8 else (w1 if b >= 4 else w0))
            above += ((wd >> ((b & 3) * 16)) & 0xFFFF).to(tl.int32)
            c = tl.where((c == 0) & (above >= K), b, c)
        t = t + (c << shift)
    return t


@triton.jit
def _kern(X, s_x, OutV, s_ov, OutI, s_oi, V, K: tl.constexpr, KP2: tl.constexpr, BLOCK: tl.constexpr,
          SHIFT: tl.constexpr, HOW: tl.constexpr, SEARCH_ONLY: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * s_x
    j = tl.arange(0, BLOCK)
    valid = j < V
    NB: tl.constexpr = 32 - SHIFT
    x = tl.load(x_row + j, mask=valid, other=0.0).to(tl.float32)
    key = tl.where(valid, _order_key(_canonical_bits(x)) >> SHIFT, -(1 << (NB - 1)))
    ov = OutV + row * s_ov
    oi = OutI + row * s_oi
    if HOW == 0:
        t = _bisect(key, K, NB)
    else:
        t = _radix(key, K, NB, HOW)
    if SEARCH_ONLY:
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


out = {}
dev = torch.device("cuda")
for bs, v, dt in ((1, 8192, torch.bfloat16), (8, 8192, torch.bfloat16), (1, 16384, torch.bfloat16), (1, 32000, None)):
    if dt is None:
        continue
    k = 64
    x = (torch.randn(bs, v, device=dev) * 4).to(dt)
    vals = torch.empty(bs, k, device=dev)
    idx = torch.empty(bs, k, dtype=torch.int64, device=dev)
    ref_v, ref_i = sk.topk_rows_reference(x, k)
    block = triton.next_power_of_2(v)
    res = {"shipped": per_call_us(lambda: sk.topk_rows(x, k, vals, idx))}
    sk.topk_rows(x, k, vals, idx); torch.cuda.synchronize()
    res["shipped ok"] = bool(torch.equal(idx, ref_i) and torch.equal(vals, ref_v))
    for how in (0, 1, 2, 3):
        for w in (8, 16):
            for so in (True, False):
                def f(how=how, w=w, so=so):
                    _kern[(bs,)](x, x.stride(0), vals, vals.stride(0), idx, idx.stride(0), v, K=k, KP2=64, BLOCK=block,
                                 SHIFT=16, HOW=how, SEARCH_ONLY=so, num_warps=w)
                name = f"how{how} w{w} {'search' if so else 'full'}"
                try:
                    res[name] = per_call_us(f)
                    if not so:
                        f(); torch.cuda.synchronize()
                        res[name + " ok"] = bool(torch.equal(idx, ref_i) and torch.equal(vals, ref_v))
                except Exception as e:  # noqa: BLE001
                    res[name] = f"{type(e).__name__}: {str(e)[:80]}"
    out[f"bs{bs} V{v}"] = res
    print(f"bs {bs} V {v}: " + ", ".join(f"{n} {t:.2f}" if isinstance(t, float) else f"{n} {t}" for n, t in res.items()), flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "topk_radix.json"), "w"), indent=1)
