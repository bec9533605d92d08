"""``flex``: paged attention on ``torch.nn.attention.flex_attention`` with hand-built BlockMasks.

Design
------
* Keys are the pool itself, queries are cut into per-request tiles; there is no K/V gather.

  - key / value ``[1, Hkv, num_slots, D]``: a strided view of ``k_buffer[layer]``
    (``[num_slots, Hkv, D]``), broadcast over the flex batch (flex accepts ``Bkv == 1 < Bq`` when
    the block mask has the query's batch size) and over query heads (``enable_gqa``).
  - query ``[C, Hq, W, D]``: flex's batch axis holds C query *tiles* of width
    ``W = min(max_q, Q_BLOCK)``; a tile is up to W consecutive new tokens of ONE request.
    Fixed-stride modes (DECODE, DRAFT_DECODE, TARGET_VERIFY, DRAFT_EXTEND_V2; stride <= Q_BLOCK)
    have one tile per request (``[B*stride, Hq, D] -> [B, Hq, stride, D]``, one small copy of
    ``q``). Packed modes (EXTEND, DRAFT_EXTEND v1) gather ``q`` into ``ceil(extend_i / W)``
    tiles per request, so padding is < W rows per request (a plain ``[B, max_q]`` grid would
    explode for one long prompt among many short ones), and a tile never mixes requests (a
    packed ``[1, T]`` query would make every q-block visit the union of its requests' KV blocks:
    ruinous for decode-like batches).

* "Paged" means the key axis is the flat slot axis of the pool. Per forward the builder inverts
  ``req_to_token`` for the batch's rows into two lookup tables over slots: ``slot_req[s]`` (the
  request of the batch owning slot ``s``, -1 for none) and ``slot_pos[s]`` (its position). With
  per-tile ``tile_req`` (request), ``tile_q0`` (first query index inside the request) and
  ``tile_base = prefix[tile_req] + tile_q0`` the mask_mods are a few O(1) loads::

      causal: slot_req[kv] == tile_req[b]  and  slot_pos[kv] <= tile_base[b] + q_idx
      tree:   rel = slot_pos[kv] - tile_prefix[b];  qi = tile_q0[b] + q_idx
              slot_req[kv] == tile_req[b]  and  rel <= qi  and
              (rel < 0  or  tile_tree[b, min(qi, s-1), clamp(rel, 0, s-1)])

  ``prefix = clamp(seq_lens - extend_seq_lens, 0)`` (the batch convention). Positions
  ``>= seq_lens`` are never entered in the tables, so the KV bound needs no extra test. Padded
  rows of a tile see at most their request's keys (finite, dropped when rows are scattered back).

* The BlockMask is built directly (``BlockMask.from_kv_blocks``), never by evaluating the mask
  densely (``create_block_mask`` costs O(max_q * num_slots) mask evaluations per forward, too much
  for a large pool). With one q-block per tile (W <= Q_BLOCK), pool block ``k`` (``KV_BLOCK``
  slots) is listed for tile ``c`` iff it holds a slot of the tile's request whose position some
  real row of the tile may see (``pos <= tile_base + rows_in_tile - 1``): one scatter of True
  over ``[C, max_kv]`` (request, position) pairs. Listed blocks go first in ascending order by a
  cumsum rank + scatter (no sort). The tree mask is not used for block selection (a superset is
  fine). No block is declared "full" (empty full-block lists), so the mask_mod runs in every
  visited block (exact and simple; decode blocks are nearly all partial anyway; a long prefill
  over contiguous pages could skip it in interior blocks -- a possible later optimisation).
* Per forward (shared by all layers): the slot tables (``2 * num_slots`` int32), the block
  lists (``2 * C * num_slots / KV_BLOCK`` int32 incl. the empty full lists), ``[C, max_kv]``
  index temporaries, and for packed modes the tile layout from the host lengths. Only tensor
  ops on device plus host arithmetic on the ``*_cpu`` copies: no device sync.

Hazards and conventions
-----------------------
* Slot 0 is the scratch slot: it is never entered in ``slot_req``. Padded graph rows
  (``req_pool_indices = 0``, ``seq_lens = 1``) therefore see no key at all and flex returns 0 for
  them (flex defines an all-masked row as 0, not NaN); they write their K/V to slot 0 as usual.
* The inverse map needs every slot to belong to at most one request of the batch (true for the
  ``PagedAllocator``; shared prefix pages would break it: one owner wins the scatter). The tables
  are rebuilt from scratch every forward (a stale owner from a previous batch must not survive).
* ``save_kv=False`` clones the layer's pool to place the new K/V without touching the cache:
  correct but O(pool) per layer; the engine always saves.
* Pool dtype must equal the query dtype for the no-copy path; otherwise the layer's pool is cast
  (O(pool) per layer).
* Sparsity is at pool-block granularity: a block holding a few slots of the request is visited
  entirely (masked by the mask_mod). Fragmented pages (page_size < KV_BLOCK, shuffled) cost up to
  ``KV_BLOCK / page_size`` times the ideal key reads.
* The Triton kernels address a layer's pool with 32-bit offsets in places: keep
  ``num_slots * Hkv * D`` below 2**31 per layer.

Compilation
-----------
* CUDA: ``torch.compile(flex_attention, dynamic=True)`` created once per process
  (``compiled_flex``). ``dynamic=True`` makes tile count, tile width and pool size symbolic from
  the first compile, so each variant compiles once instead of static-then-dynamic. Variants:
  heads / head_dim / dtype, tree or not, and the 0/1 specialisations (one tile; width 1) plus
  width < 128 vs = 128 (flex picks its decoding kernel for short queries only with a static
  batch, so under ``dynamic=True`` decode runs the main flex kernel). Past dynamo's recompile
  limit torch silently falls back to the unfused flex, which materialises
  ``[C, Hq, W, num_slots]`` scores (OOM on a real pool), so ``compiled_flex`` raises the
  process-wide limit to ``RECOMPILE_LIMIT``. fp32 accuracy needs TF32 off (the kernels read the
  global matmul precision at compile time). ``UPDRAFT_FLEX_DYNAMIC`` = 1 / 0 / auto overrides the
  ``dynamic`` argument (auto: torch's automatic dynamic shapes, static first).
* CPU: eager flex by default -- the unfused math implementation: exact, but it IGNORES the block
  mask and materialises scores over the whole pool; fine for tests, not for serving (use
  ``torch_native`` on CPU). Compiled flex on CPU (torch 2.13, gcc 12) is opt-in
  (``use_compile=True`` or ``UPDRAFT_FLEX_COMPILE=1``) and compiles STATIC shapes, one compile
  (~10-20 s) per shape: 2.13's C++ flex template emits invalid C++ for symbolic sizes
  (``cur_kvSplitSize3`` / ``cur_qSplitSize8`` undeclared) and needs the (empty) full-block
  lists. Compiled static on CPU, a 43-case sample of the kit sweep (every mode, both dtypes,
  tree masks, multi-tile prefills) matched the reference.

CUDA graphs
-----------
``graph_modes`` is empty for now. Capture would need: (1) the compiled flex warmed up for each
captured shape before capture (compilation cannot happen under capture; a guard failure at
replay-time shapes recompiles), ideally a static-shape compile per captured bs (flex-decoding);
(2) the metadata as static buffers: ``build_metadata(..., out=static)`` copies into them in place,
and the BlockMask / mask_mod closure must be built once, at capture, over those buffers;
(3) capture-time maxima (``max_kv`` = table width), never the live batch's. Fixed-stride modes
need no host data beyond B and the stride; packed modes take their tile layout from host lengths
and cannot be captured (they are not graph modes).

Supported modes: all six real modes (IDLE has no attention).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from updraft.attention.base import AttentionBackend
from updraft.batch import REAL_MODES, ForwardBatch
from updraft.memory.pools import KVPool

#: Query rows per sparse block; also the widest query tile (the CUDA kernels' BLOCK_M divides it).
Q_BLOCK = 128
#: Pool slots per sparse block (flex's default; must be a multiple of the kernels' BLOCK_N).
KV_BLOCK = 128
#: Dynamo recompile limit this module asks for (see "Compilation" above).
RECOMPILE_LIMIT = 64

_MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@functools.cache
def compiled_flex(dynamic: bool | None = True) -> Callable[..., torch.Tensor]:
    """``torch.compile(flex_attention, dynamic=dynamic)``, created once per process.

    CUDA uses ``dynamic=True``; CPU compiles static shapes (torch 2.13's C++ flex template emits
    invalid code for symbolic sizes: ``cur_kvSplitSize3`` / ``cur_qSplitSize8`` undeclared).

    Dynamo keys its cache on ``flex_attention``'s code object, so every caller shares one set of
    compiled variants and one recompile budget. Past that budget torch silently runs the unfused
    flex, which materialises scores over the whole pool, so the budget is raised here,
    process-wide, to ``RECOMPILE_LIMIT`` (never lowered).
    """
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(int(getattr(cfg, name)), RECOMPILE_LIMIT))
    return torch.compile(flex_attention, dynamic=dynamic)


def _dynamic_setting(device: torch.device) -> bool | None:
    """``dynamic`` for ``torch.compile``: True on CUDA, False (static) on CPU. Override with
    ``UPDRAFT_FLEX_DYNAMIC`` = 1 / 0 / auto (auto = torch's automatic dynamic shapes)."""
    env = os.environ.get("UPDRAFT_FLEX_DYNAMIC", "").lower()
    if env in ("1", "0", "auto"):
        return {"1": True, "0": False, "auto": None}[env]
    return device.type == "cuda"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class FlexMetadata:
    """Per-forward metadata, shared by every layer. B requests, T token rows, C query tiles of
    width W, ``nkb = ceil(num_slots / KV_BLOCK)``."""

    block_mask: BlockMask  # C x 1 x 1 x nkb sparse blocks over (W, num_slots)
    kv_num_blocks: torch.Tensor  # [C, 1, 1] int32: listed pool blocks per tile
    kv_indices: torch.Tensor  # [C, 1, 1, nkb] int32: listed blocks first, ascending
    slot_req: torch.Tensor  # [nkb * KV_BLOCK] int32: request of the batch owning a slot, or -1
    slot_pos: torch.Tensor  # [nkb * KV_BLOCK] int32: position of the slot in its request
    tile_req: torch.Tensor  # [C] int32: request of each tile
    tile_q0: torch.Tensor  # [C] int32: query index (inside the request) of the tile's first row
    tile_base: torch.Tensor  # [C] int32: KV position of the tile's first row (prefix + q0)
    tile_prefix: torch.Tensor  # [C] int32: prefix of the tile's request
    tile_tree: torch.Tensor | None  # [C, s, s] bool: the request's tree mask, or None
    q_gather: torch.Tensor | None  # [C, W] int64 token row per tile row (0 = pad); None = view
    row_tile: torch.Tensor  # [T] int64: tile of each token row
    row_in_tile: torch.Tensor  # [T] int64: row of each token row inside its tile
    width: int  # W
    num_tiles: int  # C
    max_kv: int
    num_slots: int

    def block_sparsity(self) -> float:
        """Fraction of (tile, pool block) pairs skipped. Syncs: diagnostics only."""
        total = self.kv_indices.numel()
        return 1.0 - float(self.kv_num_blocks.sum()) / max(total, 1)

    def copy_into(self, out: FlexMetadata) -> FlexMetadata:
        """Copy every tensor into ``out``'s (static) tensors in place; host ints must agree."""
        for f in fields(self):
            if f.name == "block_mask":
                continue
            src, dst = getattr(self, f.name), getattr(out, f.name)
            if isinstance(src, torch.Tensor) or isinstance(dst, torch.Tensor):
                same = isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
                if not same or dst.shape != src.shape:
                    raise ValueError(f"static buffer {f.name} does not match the captured layout")
                dst.copy_(src)
            elif src != dst:
                raise ValueError(f"{f.name} differs from the captured value: {src} != {dst}")
        return out


def make_mask_mod(md: FlexMetadata) -> _MaskMod:
    """The mask_mod closure over ``md``'s lookup tables (see the module docstring)."""
    slot_req, slot_pos, tile_req, tile_base = md.slot_req, md.slot_pos, md.tile_req, md.tile_base
    if md.tile_tree is None:

        def causal_mask(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            return (slot_req[kv_idx] == tile_req[b]) & (slot_pos[kv_idx] <= tile_base[b] + q_idx)

        return causal_mask

    tile_q0, tile_prefix, tile_tree = md.tile_q0, md.tile_prefix, md.tile_tree

    def tree_mask(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        # The block width is read from the tensor, not closed over as an int: dynamo would
        # guard on a closed-over int and recompile for every tree width.
        last = tile_tree.shape[-1] - 1
        rel = slot_pos[kv_idx] - tile_prefix[b]  # < 0: cached prefix, always visible
        qi = tile_q0[b] + q_idx
        in_tree = tile_tree[b, torch.clamp(qi, max=last), torch.clamp(rel, 0, last)]
        return (slot_req[kv_idx] == tile_req[b]) & (rel <= qi) & ((rel < 0) | in_tree)

    return tree_mask


def _tree_of(batch: ForwardBatch) -> torch.Tensor | None:
    mask = batch.custom_mask
    if mask is None:
        return None
    if mask.dim() != 3 or mask.shape[0] != batch.batch_size or mask.shape[1] != mask.shape[2]:
        raise ValueError(f"custom_mask must be [B, s, s] bool, got {tuple(mask.shape)}")
    return mask.to(torch.bool)


@dataclass
class _Tiles:
    """Query tiles of one forward: which request and query offset each tile covers, and where
    each token row lands (tile, row in tile)."""

    width: int
    num_tiles: int
    tile_req: torch.Tensor
    tile_q0: torch.Tensor
    q_gather: torch.Tensor | None  # [tiles, width] token rows (None: one tile per request, in order)
    row_tile: torch.Tensor
    row_in_tile: torch.Tensor
    one_per_request: bool


def _query_tiles(batch: ForwardBatch, max_q: int, ext: torch.Tensor, start: torch.Tensor, rows: torch.Tensor) -> _Tiles:
    dev, bsz = batch.device, batch.batch_size
    if batch.mode.is_fixed_stride(include_v2=True) and batch.stride <= Q_BLOCK:
        width = batch.stride
        return _Tiles(width, bsz, torch.arange(bsz, device=dev), torch.zeros(bsz, dtype=torch.long, device=dev), None,
                      rows // width, rows % width, True)
    # Host arithmetic on the *_cpu copies (no sync): ceil(extend / W) tiles per request.
    width = min(max_q, Q_BLOCK)
    per_req = (batch.extend_seq_lens_cpu.long() + width - 1) // width
    first_cpu = torch.cumsum(per_req, 0) - per_req
    num_tiles = int(per_req.sum())
    tile_req_cpu = torch.repeat_interleave(torch.arange(bsz), per_req)
    tile_q0_cpu = (torch.arange(num_tiles) - first_cpu[tile_req_cpu]) * width
    tile_req = tile_req_cpu.to(dev, non_blocking=True)
    tile_q0 = tile_q0_cpu.to(dev, non_blocking=True)
    first_tile = first_cpu.to(dev, non_blocking=True)
    i = torch.arange(width, device=dev)
    qi = tile_q0[:, None] + i[None, :]
    q_gather = torch.where(qi < ext[tile_req][:, None], start[tile_req][:, None] + qi, 0)
    # searchsorted, not repeat_interleave: no sync, and fine under graph capture.
    ends = torch.cumsum(ext, 0)
    row_req = torch.searchsorted(ends, rows, right=True).clamp(max=bsz - 1)
    off = rows - start[row_req]
    row_tile, row_in_tile = first_tile[row_req] + off // width, off % width
    # Rows past the real tokens (junk rows a padded replay may leave) read tile 0, row 0.
    junk = rows >= ends[-1]
    return _Tiles(width, num_tiles, tile_req, tile_q0, q_gather, torch.where(junk, 0, row_tile),
                  torch.where(junk, 0, row_in_tile), False)


def _block_lists(t_target: torch.Tensor, j: torch.Tensor, tile_end: torch.Tensor, n_pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per tile, the pool blocks it may see (``t_target`` [tiles, max_kv]: each position's slot,
    ``n_pad`` where invisible; positions below ``tile_end`` count): their number and the list,
    listed blocks first, then the rest, each ascending (no sort)."""
    nkb = n_pad // KV_BLOCK
    num_tiles = t_target.shape[0]
    # ---- pool blocks each tile may see: one scatter over (tile, position) pairs ----
    sees = (t_target < n_pad) & (j[None, :] < tile_end[:, None])
    blocks = torch.where(sees, t_target // KV_BLOCK, nkb)  # nkb: trash column
    dense = torch.zeros(num_tiles, nkb + 1, dtype=torch.bool, device=t_target.device)
    dense.scatter_(1, blocks, True)
    dense = dense[:, :nkb]
    # A listed block's rank is the number of listed blocks before it; an unlisted one goes after
    # all listed ones. The ranks are a permutation, so the scatter fills every entry.
    listed_upto = dense.cumsum(-1, dtype=torch.int32)  # listed blocks in [0, k]
    # contiguous: the flex kernels index the block lists assuming a dense layout (the compiled
    # CPU kernel read a strided column as garbage counts).
    kv_num_blocks = listed_upto[:, -1].contiguous()
    col = torch.arange(nkb, dtype=torch.int32, device=t_target.device).expand(num_tiles, nkb)
    rank = torch.where(dense, listed_upto - 1, kv_num_blocks[:, None] + col - listed_upto)
    kv_indices = torch.empty(num_tiles, nkb, dtype=torch.int32, device=t_target.device)
    kv_indices.scatter_(1, rank.long(), col)
    return kv_num_blocks, kv_indices


def _slot_maps(batch: ForwardBatch, req_to_token: torch.Tensor, seq: torch.Tensor, ext: torch.Tensor, j: torch.Tensor,
               n_pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Slot -> (request, position) over this batch's table rows (``j``: positions 0..max_kv-1):
    each (request, position)'s slot or ``n_pad`` (the trash entry) where invisible, and the two
    maps over ``n_pad + 1`` entries (request -1: no request sees the slot)."""
    bsz, max_kv, dev = batch.batch_size, j.shape[0], j.device
    slots = req_to_token[batch.req_pool_indices.long(), :max_kv].long()  # [B, max_kv]
    # Slot 0 (scratch) is never visible; requests without queries see nothing.
    valid = (j[None, :] < seq[:, None]) & (slots != 0) & (ext[:, None] > 0)
    target = torch.where(valid, slots, n_pad)  # invalid pairs land on the trash entry
    slot_req = torch.full((n_pad + 1,), -1, dtype=torch.int32, device=dev)
    slot_pos = torch.zeros(n_pad + 1, dtype=torch.int32, device=dev)
    b_idx = torch.arange(bsz, dtype=torch.int32, device=dev)
    slot_req.scatter_(0, target.flatten(), b_idx[:, None].expand(bsz, max_kv).flatten())
    slot_pos.scatter_(0, target.flatten(), j.to(torch.int32)[None, :].expand(bsz, max_kv).flatten())
    return target, slot_req, slot_pos


def build_metadata(
    batch: ForwardBatch,
    req_to_token: torch.Tensor,
    num_slots: int,
    max_q: int,
    max_kv: int,
    *,
    out: FlexMetadata | None = None,
) -> FlexMetadata:
    """The one metadata builder: eager forwards now, graph capture / replay later.

    ``max_q`` / ``max_kv`` bound the queries and KV positions per request (eager: the batch's
    maxima from the host copies; graphs: the captured stride and the table width). No device
    sync. With ``out`` the result is copied into ``out``'s tensors in place and ``out`` returned.
    """
    batch.check_conventions()
    if batch.num_tokens == 0:
        raise ValueError("a forward without tokens has no attention (use ForwardMode.IDLE)")
    if max_kv > req_to_token.shape[1]:
        raise ValueError(f"max_kv={max_kv} exceeds the req_to_token width {req_to_token.shape[1]}")
    dev = batch.device
    seq = batch.seq_lens.long()
    ext = batch.extend_seq_lens.long()
    prefix = (seq - ext).clamp(min=0)  # clamp: padded graph rows have seq_lens < extend_seq_lens
    start = batch.extend_start_loc.long()
    nkb = _cdiv(num_slots, KV_BLOCK)
    n_pad = nkb * KV_BLOCK  # lookups cover whole pool blocks; index n_pad is the trash entry
    rows = torch.arange(batch.num_tokens, device=dev)

    t = _query_tiles(batch, max_q, ext, start, rows)
    width, num_tiles, tile_req, tile_q0 = t.width, t.num_tiles, t.tile_req, t.tile_q0
    tile_prefix = prefix[tile_req]
    tile_base = tile_prefix + tile_q0
    tile_rows = (ext[tile_req] - tile_q0).clamp(0, width)  # real rows per tile

    j = torch.arange(max_kv, device=dev)
    target, slot_req, slot_pos = _slot_maps(batch, req_to_token, seq, ext, j, n_pad)
    kv_num_blocks, kv_indices = _block_lists(target if t.one_per_request else target[tile_req], j,
                                             tile_base + tile_rows, n_pad)
    tree = _tree_of(batch)
    md = FlexMetadata(
        block_mask=None,  # type: ignore[arg-type]  # set below, over the final tensors
        kv_num_blocks=kv_num_blocks[:, None, None],
        kv_indices=kv_indices[:, None, None],
        slot_req=slot_req[:n_pad],
        slot_pos=slot_pos[:n_pad],
        tile_req=tile_req.to(torch.int32),
        tile_q0=tile_q0.to(torch.int32),
        tile_base=tile_base.to(torch.int32),
        tile_prefix=tile_prefix.to(torch.int32),
        tile_tree=tree[tile_req] if tree is not None else None,
        q_gather=t.q_gather,
        row_tile=t.row_tile,
        row_in_tile=t.row_in_tile,
        width=width,
        num_tiles=num_tiles,
        max_kv=max_kv,
        num_slots=num_slots,
    )
    if out is not None:
        return md.copy_into(out)  # out's BlockMask already closes over out's tensors
    md.block_mask = BlockMask.from_kv_blocks(
        md.kv_num_blocks,
        md.kv_indices,
        # No block is declared "full" (mask_mod-free). Empty full-block lists are passed rather
        # than None: the torch 2.13 CPU template fails to compile without them on larger pools.
        torch.zeros_like(md.kv_num_blocks),
        torch.zeros_like(md.kv_indices),
        BLOCK_SIZE=(Q_BLOCK, KV_BLOCK),
        mask_mod=make_mask_mod(md),
        seq_lengths=(width, num_slots),
        compute_q_blocks=False,  # q-major indices only serve the backward pass
    )
    return md


class FlexBackend(AttentionBackend):
    """FlexAttention over the flat KV pool with per-forward BlockMasks (module docstring)."""

    name = "flex"
    supported_modes = frozenset(REAL_MODES)
    graph_modes = frozenset()
    devices = frozenset({"cpu", "cuda"})

    def __init__(
        self,
        kv_pool: KVPool,
        req_to_token: torch.Tensor,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float | None = None,
        *,
        use_compile: bool | None = None,
    ) -> None:
        super().__init__(kv_pool, req_to_token, num_heads, num_kv_heads, head_dim, scale)
        if use_compile is None:
            use_compile = (
                kv_pool.device.type == "cuda" or os.environ.get("UPDRAFT_FLEX_COMPILE") == "1"
            )
        #: Whether the fused, compiled flex kernel runs (else the unfused eager implementation).
        self.compiled = use_compile
        self._flex: Callable[..., torch.Tensor] = (
            compiled_flex(_dynamic_setting(kv_pool.device)) if use_compile else flex_attention
        )

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        self.check_mode(batch.mode)
        # A graph runner's fixed bound wins over the live maximum (host scalars must not drift).
        bound = getattr(batch, "max_extend_len", None)
        max_q = int(batch.extend_seq_lens_cpu.max()) if batch.batch_size else 1
        max_q = bound if bound is not None else max_q
        max_kv = int(batch.seq_lens_cpu.max()) if batch.batch_size else 1
        batch.attn_metadata = build_metadata(
            batch, self.req_to_token, self.kv_pool.num_slots, max(max_q, 1), max(max_kv, 1)
        )

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        save_kv: bool,
    ) -> torch.Tensor:
        md: FlexMetadata = batch.attn_metadata
        if not isinstance(md, FlexMetadata):
            raise TypeError(
                "init_forward_metadata was not run with the flex backend for this batch"
            )
        k_pool = self.kv_pool.k_buffer[layer_id]
        v_pool = self.kv_pool.v_buffer[layer_id]
        if save_kv:
            self.kv_pool.store(layer_id, batch.out_cache_loc, k, v)
        else:
            # Slow path: the new K/V must be visible but the cache must stay untouched.
            k_pool, v_pool = k_pool.clone(), v_pool.clone()
            k_pool[batch.out_cache_loc] = k.to(k_pool.dtype)
            v_pool[batch.out_cache_loc] = v.to(v_pool.dtype)
        if k_pool.dtype != q.dtype:
            k_pool, v_pool = k_pool.to(q.dtype), v_pool.to(q.dtype)  # O(pool): see docstring
        # [num_slots, Hkv, D] -> [1, Hkv, num_slots, D]: a strided view, no copy.
        kt = k_pool.permute(1, 0, 2).unsqueeze(0)
        vt = v_pool.permute(1, 0, 2).unsqueeze(0)
        hq, d = q.shape[1], q.shape[2]
        if md.q_gather is None:  # one tile per request
            qt = q.reshape(md.num_tiles, md.width, hq, d)
        else:
            qt = q[md.q_gather]  # [C, W, Hq, D]; padded rows read row 0
        # A fresh contiguous [C, Hq, W, D] (a copy of q only): a view would make dynamo guard on
        # the strides of q's base (the QKV projection), recompiling per caller layout.
        qt = qt.permute(0, 2, 1, 3).contiguous()
        out = self._flex(
            qt,
            kt,
            vt,
            block_mask=md.block_mask,
            scale=self.scale,
            enable_gqa=hq != kt.shape[1],
        )  # [C, Hq, W, D]
        out = out.permute(0, 2, 1, 3)  # [C, W, Hq, D]
        if md.q_gather is None:
            return out.reshape(batch.num_tokens, hq, d)
        return out[md.row_tile, md.row_in_tile]

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        return self._attend(q, k, v, layer_id, batch, save_kv)

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        return self._attend(q, k, v, layer_id, batch, save_kv)
