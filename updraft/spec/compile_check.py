"""Compile the fused speculative iteration's kernels for sm_90 without a GPU (ahead of time).

The interpreter runs constructs the compiler rejects (a branch that redefines a constant as a
tensor, a scalar mask of the wrong type), so CPU CI compiles the rejection sampler's kernels,
``filter_hist``, the acceptance, ``choose``, ``topk_rows``, ``argmax_rows``, ``read_rows``,
``commit``, the draft extend's last-row pick, ``HeadPick``, the n-gram lookup and the context tokens' pick as
the engine launches them, with the ptxas triton ships. Run it in a process WITHOUT
``TRITON_INTERPRET``:

    python -m updraft.spec.compile_check
"""

from __future__ import annotations

from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from updraft.spec import accept_kernel as ak
from updraft.spec import commit as cm
from updraft.spec import context_vocab as cv
from updraft.spec import filter_hist as fh
from updraft.spec import head_pick as hp
from updraft.spec import last_row as lr
from updraft.spec import ngram_device as nd
from updraft.spec import rejection_kernels as rk
from updraft.spec import row_io as ri
from updraft.spec import sampling_kernels as sk

SM90 = GPUTarget("cuda", 90, 32)  # an H100 / H200


def src(fn: Any, sig: dict[str, str], cons: dict[str, Any]) -> ASTSource:  # every kernel launches with PDL on sm_90
    return ASTSource(fn, sig, {"PDL": 1, **cons})


def sampling() -> None:
    """The sampled iteration's kernels: the filter, its histogram passes, the acceptance,
    ``choose``, ``topk_rows`` and the greedy draft pick."""
    # The parameters as the engine passes them: columns of RowState.sampling (float32, stride 7).
    prm = {"Temp": "*fp32", "s_temp": "i64", "TopK": "*fp32", "s_top_k": "i64", "TopP": "*fp32",
           "s_top_p": "i64", "MinP": "*fp32", "s_min_p": "i64"}
    ptr = {"Logits": "*bf16", "Temp": "*fp32", "s_temp": "i64", "Stats": "*fp32"}
    sig = {**ptr, **prm, "stride_row": "i64", "Tiles": "*fp32", "ndt": "i32", "greedy_below": "fp32",
           "log_cap": "fp32", "Hist": "*i32", "Acc": "*i64", "Part": "*fp32", "Tail": "*fp32"}
    for cut in (True, False):  # with filter_hist's cut-offs in its launch (CUT_IN_FILTER), and without
        cons = {"V": 49152, "BLOCK": rk._BLOCK, "TILE": rk.TILE, "CHUNK": rk._CHUNK, "KEY_AFTER": rk._KEY_AFTER,
                "NS": rk.NUM_STATS, "SKIP_CUTS": True, "CUT": cut, "NBINS": fh.NBINS, "BB": fh._BB, "NB": fh._NB,
                "NCH": 12, "NCH_P2": 16}
        triton.compile(src(rk._filter_kernel, sig, cons), target=SM90, options={"num_warps": 8})
    # filter_hist's four launches over a bf16 target's logits (SmolLM2's 12 chunks of the vocabulary)
    sel = {**{k: prm[k] for k in ("Temp", "s_temp", "TopK", "s_top_k", "TopP", "s_top_p")}, "ndt": "i32",
           "greedy_below": "fp32", "V": "i32"}
    coarse = {"NCOARSE": fh.NCOARSE, "SHIFT": fh.SHIFT}
    sig = {"Logits": "*bf16", "stride_row": "i64", "Hist": "*i32", "Acc": "*i64", "Coarse": "*i32", **sel}
    triton.compile(src(fh._max_kernel, sig, {"CHUNK": fh._CHUNK, "NBINS": fh.NBINS, "ZB": 8192, "IDX": fh._IDX,
                                             "GROUP": fh.GROUP, **coarse}),
                   target=SM90, options={"num_warps": 8, "maxnreg": fh.MAX_REGS})
    sig = {"Logits": "*bf16", "stride_row": "i64", "Hist": "*i32", "Acc": "*i64", "Coarse": "*i32", "Tail": "*fp32", **sel}
    triton.compile(src(fh._hist_kernel, sig, {"CHUNK": fh._CHUNK, "NCH": 12, "NBINS": fh.NBINS,
                                              "TAIL_P_MAX": fh.TAIL_P_MAX, **coarse}),
                   target=SM90, options={"num_warps": 8})
    sig = {"Hist": "*i32", "Acc": "*i64", "Part": "*fp32", **sel}
    triton.compile(src(fh._block_kernel, sig, {"NBINS": fh.NBINS, "BB": fh._BB, "NB": fh._NB}),
                   target=SM90, options={"num_warps": 4})
    sig = {"Hist": "*i32", "Acc": "*i64", "Part": "*fp32", "Tail": "*fp32", **{k: v for k, v in prm.items()},
           "Stats": "*fp32", "ndt": "i32", "V": "i32", "greedy_below": "fp32"}
    triton.compile(src(fh._cut_kernel, sig, {"NBINS": fh.NBINS, "BB": fh._BB, "NB": fh._NB, "NS": rk.NUM_STATS,
                                             "NCH": 12, "NCH_P2": 16}),
                   target=SM90, options={"num_warps": 8})
    sig = {**ptr, "stride_row": "i64", "Drafts": "*i64", "sd_b": "i64", "Cand": "*i64", "Q": "*fp32",
           "UA": "*fp32", "sua_b": "i64", "sua_k": "i64", "UR": "*fp32", "sur_b": "i64", "Accept": "*i64",
           "Emitted": "*i64", "Part": "*i64", "Tickets": "*i32", "greedy_below": "fp32", "S": "i32"}
    # with the draft extend's last accepted row picked in the launch (SmolLM2's 576-wide feature, its
    # head's QKV product of 9 + 2 x 3 heads of 64: 960 float32), and without
    sig |= {"N": "*i64", "ExtPos": "*i64", "ExtLoc": "*i64", "Feat": "*bf16", "s_f": "i64", "Qkv": "*fp32", "s_q": "i64",
            "Ids": "*i64", "Pos": "*i64", "Loc": "*i64", "SeqLen": "*i32", "FeatOut": "*bf16", "s_fo": "i64",
            "QkvOut": "*fp32", "s_qo": "i64", "H": "i32", "QW": "i32"}
    for pick in (True, False):
        cons = {"V": 49152, "K": 64, "KP2": 64, "SP2": 8, "NSUB": ak._NSUB, "SUB": ak._SUB, "NBLK": 16, "NS": rk.NUM_STATS,
                "PICK": pick, "BLOCK_H": 1024, "BLOCK_Q": 1024}
        triton.compile(src(ak._accept_kernel, sig, cons), target=SM90, options={"num_warps": 8})
    sig = {**prm, "Vals": "*fp32", "s_vals": "i64", "U": "*fp32", "s_u": "i64", "Q": "*fp32", "s_q": "i64",
           "Ids": "*i64", "s_ids": "i64", "IdsOut": "*i64", "s_ids_out": "i64", "Pick": "*i64", "s_pick": "i64",
           "Sq": "*fp32", "s_sq": "i64", "n_sq": "i32", "width": "i32", "eps": "fp32"}
    # a draft step's candidates without its final norm's factor (the row's 36 partial sums of squares)
    cons = {"K": 64, "BLOCK_K": 64, "HAS_IDS": True, "COPY_IDS": True, "SCALE": True, "BLOCK_SQ": 64}
    triton.compile(src(sk._choose_kernel, sig, cons), target=SM90, options={"num_warps": 2})
    # topk_rows as _choose launches it: the EAGLE-3 head's bf16 logits over its 8,192-token vocabulary,
    # the candidates mapped to target ids (d2t) in the same launch.
    sig = {"X": "*bf16", "s_x": "i64", "OutV": "*fp32", "s_ov": "i64", "OutI": "*i64", "s_oi": "i64", "Map": "*i64",
           "V": "i32"}
    cons = {"K": 64, "KP2": 64, "BLOCK": 8192, "SHIFT": 16, "MAP": True, "ADD": True}
    triton.compile(src(sk._topk_rows_kernel, sig, cons), target=SM90, options={"num_warps": 16})
    # the greedy draft pick (argmax + d2t)
    sig = {"X": "*bf16", "s_x": "i64", "Map": "*i64", "Out": "*i64", "s_out": "i64", "Lock": "*i64", "s_lock": "i64",
           "V": "i32"}
    for lock in (False, True):  # with the lookup assist's locks (greedy, beside the chain), and without
        cons = {"BLOCK": 8192, "MAP": True, "ADD": True, "LOCK": lock}
        triton.compile(src(sk._argmax_rows_kernel, sig, cons), target=SM90, options={"num_warps": 16})


def iteration() -> None:
    """The iteration's own kernels: ``read_rows``, ``commit``, the n-gram lookup, ``argmax_rows``."""
    # read_rows as the sampled S = 5 iteration launches it: the SmolLM2 head's bf16 feature, RowState's
    # sampling parameters and its RNG columns (strided), the iteration's uniforms drawn in the launch,
    # and the layout of its forwards (four draft steps, the verify block / draft extend)
    sig = {"Rows": "*i64", "SeqLen": "*i64", "Bonus": "*i64", "Feat": "*bf16", "FeatOut": "*bf16", "Prm": "*fp32",
           "PrmOut": "*fp32", "NOut": "*i64", "BonusOut": "*i64", "s_bonus": "i64", "stride_f": "i64", "stride_p": "i64", "Seed": "*i64",
           "s_seed": "i64", "Offset": "*i64", "s_offset": "i64", "UOut": "*fp32", "stream_c": "i64", "n_u": "i32",
           "Table": "*i32", "s_table": "i64", "Pos": "*i64", "Loc": "*i64", "Seq": "*i32", "Seg": "*i32", "bs": "i32",
           "NormW": "*bf16", "NormOut": "*bf16", "eps": "fp32"}
    for norm in (False, True):  # with the first draft's norm applied in the launch, and without
        cons = {"D": 576, "BLOCK_D": 1024, "P": 7, "BLOCK_P": 8, "U": True, "BLOCK_U": 16, "J": 5, "BLOCK_W": 8,
                "NORM": norm, "RNE": False}
        triton.compile(src(ri._read_rows_kernel, sig, cons), target=SM90, options={"num_warps": 4})
    # the iteration's commit (greedy, the SmolLM2 head's 576-wide bf16 feature) and the greedy
    # acceptance's argmax over a target's vocabulary (longer than one tile)
    sig = {"Rows": "*i64", "N": "*i64", "Drafts": "*i64", "s_d": "i64", "Emitted": "*i64", "s_e": "i64",
           "AcceptIn": "*i64", "Out": "*i64", "s_o": "i64", "SeqLen": "*i64", "Bonus": "*i64", "Offset": "*i64",
           "s_off": "i64", "Hidden": "*bf16", "s_h": "i64", "NextHidden": "*bf16", "s_nh": "i64", "H": "i32",
           "Hist": "*i32", "s_hist": "i64", "HIST_COLS": "i32"}
    for hist, one_row in ((False, False), (True, False), (False, True)):  # one_row: the extend ran its last rows alone
        cons = {"NDT": 6, "BLOCK_T": 8, "GREEDY": True, "HIDDEN": True, "ONE_ROW": one_row, "BLOCK_H": 1024,
                "HIST": hist, "HIST_PAD": 4}
        triton.compile(src(cm._commit_kernel, sig, cons), target=SM90, options={"num_warps": 1})
    # the draft extend's last accepted rows (greedy and sampled): the SmolLM2 head's feature and QKV product
    sig = {"Emitted": "*i64", "s_e": "i64", "Drafts": "*i64", "s_d": "i64", "AcceptIn": "*i64", "N": "*i64",
           "ExtPos": "*i64", "ExtLoc": "*i64", "Feat": "*bf16", "s_f": "i64", "Qkv": "*fp32", "s_q": "i64",
           "Ids": "*i64", "Pos": "*i64", "Loc": "*i64", "SeqLen": "*i32", "FeatOut": "*bf16", "s_fo": "i64",
           "QkvOut": "*fp32", "s_qo": "i64", "H": "i32", "Q": "i32"}
    for greedy in (True, False):
        cons = {"NDT": 6, "BLOCK_T": 8, "GREEDY": greedy, "BLOCK_H": 1024, "BLOCK_Q": 1024}
        triton.compile(src(lr._pick_kernel, sig, cons), target=SM90, options={"num_warps": 4})
    # greedy: that pick inside the verify's argmax (a bf16 target's vocabulary, one ticket per request)
    del sig["AcceptIn"], sig["s_e"]
    sig = {"X": "*bf16", "s_x": "i64", "V": "i32", "Tickets": "*i32", **sig}
    cons = {"BLOCK": sk.MAX_TOPK_ROW, "NDT": 6, "BLOCK_T": 8, "BLOCK_H": 1024, "BLOCK_Q": 1024}
    triton.compile(src(lr._argmax_pick_kernel, sig, cons), target=SM90, options={"num_warps": 16})
    # the n-gram lookup (the proposer's and the assist's; sampled: the replaced rows' q and candidates)
    sig = {"Hist": "*i32", "s_h": "i64", "Rows": "*i64", "Lens": "*i64", "Ids": "*i64", "s_i": "i64", "Q": "*fp32",
           "Cand": "*i64", "s_qb": "i64", "s_qk": "i64", "s_cb": "i64", "s_ck": "i64", "W": "i32", "MIN_MATCH": "i32"}
    for dist, fill in ((False, False), (True, False), (False, True)):  # fill: the greedy picks' locks
        cons = {"PAD": 4, "N_MIN": 1, "N_MAX": 4, "N_P2": 4, "K": 5, "BLOCK_K": 8, "DIST": dist, "KC": 64, "BLOCK_KC": 64,
                "BLOCK_E": 1024, "FILL": fill}
        triton.compile(src(nd._lookup_kernel, sig, cons), target=SM90, options={"num_warps": 4})
    sig = {"X": "*fp32", "s_x": "i64", "Map": "*i64", "Out": "*i64", "s_out": "i64", "Lock": "*i64", "s_lock": "i64",
           "V": "i32"}
    cons = {"BLOCK": sk.MAX_TOPK_ROW, "MAP": False, "ADD": True, "LOCK": False}
    triton.compile(src(sk._argmax_rows_kernel, sig, cons), target=SM90, options={"num_warps": 16})
    # the greedy draft pick with context tokens: the SmolLM2 head's bf16 logits and 576-wide feature
    # (scaled and without the norm's factor), d2t, 256 context rows a request
    sig = {"X": "*bf16", "s_x": "i64", "V": "i32", "Map": "*i64", "Feat": "*bf16", "s_f": "i64", "NormW": "*bf16",
           "eps": "fp32", "bias": "fp32", "H": "i32", "Ids": "*i64", "s_ids": "i64", "Rows": "*bf16", "s_rows": "i64", "Count": "*i32",
           "ReqRows": "*i64", "Out": "*i64", "s_out": "i64", "PartScore": "*fp32", "PartId": "*i64", "Tickets": "*i32", "NPROG": "i32"}
    tiles = cv.pick_tiles(576, 256)  # the launch shape ContextVocab takes for this head and K
    for unscaled in (False, True):
        cons = {"BLOCK": 8192, "BLOCK_H": 1024, "BLOCK_K": tiles.block_k,
                "BLOCK_P": triton.next_power_of_2(tiles.programs(256)), "MAP": True, "ADD": True,
                "UNSCALED": unscaled}
        triton.compile(src(cv._context_pick_kernel, sig, cons), target=SM90, options={"num_warps": tiles.num_warps})

    # the greedy draft pick without logits (HeadPick): the SmolLM2 head's 8,192 x 576 bf16 weight
    # at 1 and 8 rows, the fp32 tile, and its reader with the d2t map and the assist's locks
    # (sampled: the same launch writing the logits)
    for dt, rows, logits in (("bf16", 1, False), ("bf16", 8, False), ("fp32", 1, False), ("fp32", 8, False),
                             ("bf16", 1, True), ("bf16", 8, True)):
        bn, warps, dot = hp._tile(torch.bfloat16 if dt == "bf16" else torch.float32, rows)
        out = f"*{dt}" if logits else "*i64"  # the logits launch passes them as its (unread) slot too
        sig = {"X": f"*{dt}", "s_x": "i64", "W": f"*{dt}", "s_w": "i64", "Slot": out, "Out": out, "s_out": "i64",
               "M": "i32", "N": "i32"}
        cons = {"K1": 512, "K2": 64, "BLOCK_K2": 64, "BLOCK_N": bn, "BLOCK_M": max(16, rows) if dot else rows,
                "DOT": dot, "PRELOAD": True, "IEEE": dt == "fp32", "LOGITS": logits}
        triton.compile(src(hp._pick_kernel, sig, cons), target=SM90, options={"num_warps": warps})
    sig = {"Slot": "*i64", "Map": "*i64", "Out": "*i64", "s_out": "i64", "Lock": "*i64", "s_lock": "i64", "M": "i32"}
    triton.compile(src(hp._read_kernel, sig, {"BLOCK_M": 8, "MAP": True, "ADD": True, "LOCK": True}), target=SM90,
                   options={"num_warps": 1})


def main() -> int:
    sampling()
    iteration()
    print("compiled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
