"""CPU check of ``mla_decode.cu``'s fragment mappings, before any GPU time: the kernel's lane addresses for
``ldmatrix.x4`` / ``ldmatrix.x4.trans`` and its register use in ``mma.m16n8k16.row.col``, emulated in numpy as the
PTX ISA defines them, for one tile of the QK product (each warp's 144-column share) and of the PV product (each
warp's 512 / NW output columns, P taken from the QK accumulators' registers), on 4 warps and on 8 (K slice w % 4,
keys 16 (w / 4) .. +16), and ``mla_decode_h16_k64``'s 64-key tile (K half w % 2, keys 16 (w / 2) .. +16, the
halves' scores through its swizzled buffer), and the ``_cl`` forms' split merge across a cluster's shared memory.
Prints both products' largest error against numpy's (rounding only, ~1e-14). It re-states the .cu's index arithmetic, so a change there needs the same
change here.

    python benchmarks/cuda/fragments.py
"""

from __future__ import annotations

import numpy as np

H, D, DV, BN, ROWP, KSLICES = 16, 576, 512, 32, 584, 4


def ldmatrix(flat: np.ndarray, addrs: list[int], trans: bool) -> np.ndarray:
    """[lane, matrix, 2]: lanes 8m..8m+7 give matrix m's row starts (8 values each); lane l receives row l / 4,
    columns 2 (l % 4) and + 1 (``.trans``: column l / 4, rows 2 (l % 4) and + 1)."""
    regs = np.zeros((32, 4, 2))
    for m in range(4):
        mat = np.stack([flat[addrs[8 * m + r]: addrs[8 * m + r] + 8] for r in range(8)])
        for lane in range(32):
            g, c = lane // 4, lane % 4
            regs[lane, m] = [mat[2 * c, g], mat[2 * c + 1, g]] if trans else mat[g, 2 * c: 2 * c + 2]
    return regs


def mma(acc: np.ndarray, a: list[list[np.ndarray]], b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """``acc`` [lane, 4] += A [16, 16] x B [16, 8], both assembled from the lanes' registers."""
    amat, bmat = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, c = lane // 4, lane % 4
        amat[g, 2 * c: 2 * c + 2], amat[g + 8, 2 * c: 2 * c + 2] = a[lane][0], a[lane][1]
        amat[g, 2 * c + 8: 2 * c + 10], amat[g + 8, 2 * c + 8: 2 * c + 10] = a[lane][2], a[lane][3]
        bmat[2 * c: 2 * c + 2, g], bmat[2 * c + 8: 2 * c + 10, g] = b0[lane], b1[lane]
    prod = amat @ bmat
    for lane in range(32):
        g, c = lane // 4, lane % 4
        acc[lane, 0:2] += prod[g, 2 * c: 2 * c + 2]
        acc[lane, 2:4] += prod[g + 8, 2 * c: 2 * c + 2]
    return acc


def scatter(out: np.ndarray, acc: np.ndarray, col0: int) -> None:
    """An accumulator's [lane, 4] into rows g / g + 8, columns col0 + 2 (lane % 4) and + 1."""
    for lane in range(32):
        g, c = lane // 4, lane % 4
        out[g, col0 + 2 * c: col0 + 2 * c + 2] += acc[lane, 0:2]
        out[g + 8, col0 + 2 * c: col0 + 2 * c + 2] += acc[lane, 2:4]


def a_fragments(m: np.ndarray, col0: int) -> list[list[np.ndarray]]:
    """An A operand's registers a0..a3 for each lane: rows g, g + 8 of ``m`` at columns col0 + 2c, then + 8 (the .cu's
    query loads; P in a PV product, where two accumulator n-tiles make one such operand)."""
    frags = []
    for lane in range(32):
        g, c = lane // 4, lane % 4
        lo, hi = col0 + 2 * c, col0 + 2 * c + 8
        frags.append([m[g, lo: lo + 2], m[g + 8, lo: lo + 2], m[g, hi: hi + 2], m[g + 8, hi: hi + 2]])
    return frags


def qk(q: np.ndarray, flat: np.ndarray, nw: int) -> np.ndarray:
    """The scores [16, 32], the K slices' partials summed (the kernel's exchange through shared memory)."""
    scores = np.zeros((H, BN))
    qn = 16 // nw
    for warp in range(nw):
        kbase = (warp >> 2) * qn * 8
        s = np.zeros((qn, 32, 4))
        for kk in range(D // KSLICES // 16):
            k0 = (warp & 3) * (D // KSLICES) + 16 * kk
            qa = a_fragments(q, k0)
            for npair in range(qn // 2):
                addrs = [(kbase + (2 * npair + (lane >> 4)) * 8 + (lane & 7)) * ROWP + k0 + ((lane >> 3) & 1) * 8
                         for lane in range(32)]
                r = ldmatrix(flat, addrs, trans=False)
                s[2 * npair] = mma(s[2 * npair], qa, r[:, 0], r[:, 1])
                s[2 * npair + 1] = mma(s[2 * npair + 1], qa, r[:, 2], r[:, 3])
        for nt in range(qn):
            scatter(scores, s[nt], kbase + nt * 8)
    return scores


def pv(p: np.ndarray, flat: np.ndarray, nw: int) -> np.ndarray:
    """P [16, 32] (held as the QK accumulators hold scores) times the tile's first 512 columns."""
    preg = np.zeros((4, 32, 4))
    for nt in range(4):
        for lane in range(32):
            g, c = lane // 4, lane % 4
            preg[nt, lane, 0:2] = p[g, nt * 8 + 2 * c: nt * 8 + 2 * c + 2]
            preg[nt, lane, 2:4] = p[g + 8, nt * 8 + 2 * c: nt * 8 + 2 * c + 2]
    out = np.zeros((H, DV))
    for warp in range(nw):
        acc = np.zeros((64 // nw, 32, 4))
        for kk in range(2):
            pa = [[preg[2 * kk, lane, 0:2], preg[2 * kk, lane, 2:4], preg[2 * kk + 1, lane, 0:2],
                   preg[2 * kk + 1, lane, 2:4]] for lane in range(32)]
            for npair in range(32 // nw):
                addrs = [(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * ROWP + warp * (DV // nw) + npair * 16
                         + (lane >> 4) * 8
                         for lane in range(32)]
                r = ldmatrix(flat, addrs, trans=True)
                acc[2 * npair] = mma(acc[2 * npair], pa, r[:, 0], r[:, 1])
                acc[2 * npair + 1] = mma(acc[2 * npair + 1], pa, r[:, 2], r[:, 3])
        for nt in range(64 // nw):
            scatter(out, acc[nt], warp * (DV // nw) + nt * 8)
    return out


def sswz(row: int, key: int) -> int:
    """``mla_decode_h16_k64``'s score buffer index: rows of 64 keys, the 8-key group XOR-ed with the row's low bits."""
    return row * 64 + (key ^ ((row & 7) << 3))


def qk64(q: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """``_k64``'s scores [16, 64]: warp w's two key n-tiles 16 (w / 2) .. +16 over K half w % 2, each half's
    partials stored to the swizzled buffer as the .cu stores them and summed as every warp reads them back."""
    buf = np.full((2, 16 * 64), np.nan)
    for warp in range(8):
        kbase = (warp >> 1) * 16
        s = np.zeros((2, 32, 4))
        for kk in range(18):
            k0 = (warp & 1) * (D // 2) + 16 * kk
            qa = a_fragments(q, k0)
            addrs = [(kbase + (lane >> 4) * 8 + (lane & 7)) * ROWP + k0 + ((lane >> 3) & 1) * 8 for lane in range(32)]
            r = ldmatrix(flat, addrs, trans=False)
            s[0] = mma(s[0], qa, r[:, 0], r[:, 1])
            s[1] = mma(s[1], qa, r[:, 2], r[:, 3])
        for nt in range(2):
            for lane in range(32):
                g, c = lane // 4, lane % 4
                key = kbase + nt * 8 + 2 * c
                buf[warp & 1, sswz(g, key): sswz(g, key) + 2] = s[nt, lane, 0:2]
                buf[warp & 1, sswz(g + 8, key): sswz(g + 8, key) + 2] = s[nt, lane, 2:4]
    scores = np.zeros((H, 64))
    for lane in range(32):  # every warp reads the whole tile back
        g, c = lane // 4, lane % 4
        for nt in range(8):
            key = nt * 8 + 2 * c
            for row in (g, g + 8):
                scores[row, key: key + 2] = buf[0, sswz(row, key): sswz(row, key) + 2] + buf[1, sswz(row, key): sswz(row, key) + 2]
    return scores


def pv64(p: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """``_k64``'s P [16, 64] times the tile's first 512 columns: four 16-key k-steps, warp w's 64 columns."""
    out = np.zeros((H, DV))
    for warp in range(8):
        acc = np.zeros((8, 32, 4))
        for kk in range(4):
            pa = a_fragments(p, 16 * kk)
            for npair in range(4):
                addrs = [(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * ROWP + warp * 64 + npair * 16 + (lane >> 4) * 8
                         for lane in range(32)]
                r = ldmatrix(flat, addrs, trans=True)
                acc[2 * npair] = mma(acc[2 * npair], pa, r[:, 0], r[:, 1])
                acc[2 * npair + 1] = mma(acc[2 * npair + 1], pa, r[:, 2], r[:, 3])
        for nt in range(8):
            scatter(out, acc[nt], warp * 64 + nt * 8)
    return out


PPITCH = 520


def cluster_merge(parts: np.ndarray, lses: np.ndarray, nw: int) -> np.ndarray:
    """``cluster_merge`` (mla_common.cuh) over a cluster of S = len(parts) CTAs: each CTA's partial [H, DV] stored
    into its shared memory as warp w's lanes store their accumulators (rows g and g + 8, columns 512 / NW w + 8 nt +
    2c and + 1), its lse [H] beside; then each CTA gathers every head's lse (entry i: head i / S from CTA i % S),
    normalises the weights, and CTA r sums its share of the H x DV / 4 four-column groups (ceil(groups / S) from
    r times that on, heads running on; any S). Returns the merged [H, DV]."""
    s_n = len(parts)
    smem = np.zeros((s_n, H * PPITCH + H))
    for cta in range(s_n):
        for warp in range(nw):
            for lane in range(32):
                g, c = lane // 4, lane % 4
                for nt in range(64 // nw):
                    col = warp * (DV // nw) + nt * 8 + 2 * c
                    smem[cta, g * PPITCH + col: g * PPITCH + col + 2] = parts[cta, g, col: col + 2]
                    smem[cta, (g + 8) * PPITCH + col: (g + 8) * PPITCH + col + 2] = parts[cta, g + 8, col: col + 2]
        smem[cta, H * PPITCH: H * PPITCH + H] = lses[cta]
    out = np.full((H, DV), np.nan)  # a group no CTA writes stays NaN
    groups = H * (DV // 4)
    share = -(-groups // s_n)
    for rank in range(s_n):
        wts = np.array([smem[i % s_n, H * PPITCH + i // s_n] for i in range(H * s_n)])
        for tid in range(H):
            row = wts[tid * s_n: (tid + 1) * s_n]
            mx = row.max()
            w = np.where(row == -np.inf, 0.0, np.exp2(row - mx if mx > -np.inf else 0.0))
            wts[tid * s_n: (tid + 1) * s_n] = w / w.sum() if w.sum() > 0 else 0.0
        for i in range(rank * share, min(groups, rank * share + share)):
            hh, col = i // (DV // 4), (i % (DV // 4)) * 4
            at = hh * PPITCH + col
            assert np.isnan(out[hh, col]), "a group written by two CTAs"
            out[hh, col: col + 4] = sum(wts[hh * s_n + s] * smem[s, at: at + 4] for s in range(s_n))
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    q, k, p = rng.standard_normal((H, D)), rng.standard_normal((BN, D)), rng.standard_normal((H, BN))
    tile = np.zeros((BN, ROWP))
    tile[:, :D] = k
    flat = tile.reshape(-1)
    for nw in (4, 8):
        print(f"{nw} warps: QK max err {np.abs(qk(q, flat, nw) - q @ k.T).max():.1e}, "
              f"PV max err {np.abs(pv(p, flat, nw) - p @ k[:, :DV]).max():.1e}")
    k64, p64 = rng.standard_normal((64, D)), rng.standard_normal((H, 64))
    tile64 = np.zeros((64, ROWP))
    tile64[:, :D] = k64
    flat64 = tile64.reshape(-1)
    print(f"64-key tiles, 8 warps: QK max err {np.abs(qk64(q, flat64) - q @ k64.T).max():.1e}, "
          f"PV max err {np.abs(pv64(p64, flat64) - p64 @ k64[:, :DV]).max():.1e}")


if __name__ == "__main__":
    main()
