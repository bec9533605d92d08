"""``mla``: DeepSeek MLA attention over the paged latent cache, with Triton kernels (CUDA; CPU only
under ``TRITON_INTERPRET=1``).

Interface, per layer (the model absorbs W_UK into the query and applies W_UV to the output):

* the pool is ``KVPool(..., kv_heads=1, head_dim=kv_lora_rank + rope_dim, v_head_dim=kv_lora_rank,
  shared_kv=True)``: one latent row ``[c | k_rope]`` per token, V its first ``kv_lora_rank``
  columns, stored once;
* ``q`` [T, H, Dk]: ``q_nope . W_UK`` in the first ``Dv`` columns, the rotated ``q_rope`` after;
* ``k`` [T, 1, Dk]: the new tokens' latent rows (rope part rotated), written to
  ``out_cache_loc``; ``v`` (``k[..., :Dv]``) is ignored: only ``k`` is stored;
* ``rope`` must be None: the model rotates the rope parts itself (the backend cannot tell them
  apart from a Llama head);
* returns [T, H, Dv] in ``q``'s dtype; ``scale`` is the model's (DeepSeek scales by the
  unabsorbed query width, not by ``Dk``).

Routing (failure classes 3 and 5):

* DECODE, DRAFT_DECODE (one token, or topk under a tree mask) and TARGET_VERIFY (ndt tokens,
  causal in the block, tree mask optional) -> ``mla_decode``: every key from the pool after the
  store, the block's ndt x heads rows packed into the dot's M dimension, split-KV with a merge.
* EXTEND, DRAFT_EXTEND (v1, packed) and DRAFT_EXTEND_V2 (fixed stride) -> ``mla_extend`` (prefix
  from the pool, the new rows from ``k``), never the decode kernel. So does a decode mode with
  ``save_kv=False`` (its new rows are not in the pool).

Metadata, graphs and host scalars are the triton backend's (this class extends it): ONE builder
(``_fill_metadata``) for eager, capture and replay; the launch plan of the fixed-stride modes
depends on the mode, batch size, stride, tree-ness, dtype, head count, table width and SM count
only, and a replay that would need other host scalars is refused (failure class 6);
``kv_lens = max(seq_lens - extend_seq_lens, 0)``, derived by the kernels (class 4); the
fixed-stride modes' query starts are the uniform stride the builder writes at capture and replay
alike (class 1; the decode kernel even takes them from the frozen stride, not from the metadata).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from updraft.attention.base import Rope
from updraft.attention.triton_backend import TritonBackend
from updraft.attention.triton_kernels import TileConfig, next_pow2
from updraft.attention.triton_kernels.kv_store import store_kv
from updraft.attention.triton_kernels.mla_common import grid_rows
from updraft.attention.triton_kernels.mla_decode import mla_decode_attention
from updraft.attention.triton_kernels.mla_extend import mla_extend_attention
from updraft.attention.triton_metadata import TritonMetadata
from updraft.batch import ForwardBatch, ForwardMode
from updraft.memory.pools import KVPool
from updraft.ops.triton_utils import pdl_enabled


class MLABackend(TritonBackend):
    """Absorbed (latent) MLA attention; see the module docstring."""

    name = "mla"
    v_layouts = True
    separate_kv = False
    #: KV splits aim at this many programs per SM, rounded down to a power of two and capped at
    #: ``max_kv_splits`` (H100 sweep, 2026-11-26, 16 heads, 8k/32k context: bs 8 was fastest at 32
    #: splits, bs 64 at 8; the earlier 2 waves, cap 16, left bs 8 at 53-69% of the copy bandwidth
    #: and bs 64 at 71-74%). A split's partial output is H x kv_lora_rank fp32 (written, then read
    #: by the merge), so more splits than this costs more than the programs it adds.
    split_waves: ClassVar[int] = 4
    verify_split_waves: ClassVar[int] = 4  # MLA's verify is its decode, ndt rows wider (same sweep)
    verify_one_wave_programs: ClassVar[int] = 0  # no small-batch exception (the GQA kernel's)
    #: The decode kernel's tiles take a whole SM (a double-buffered 64-key latent tile), so their
    #: splits aim at one wave: decode bs 8 -> 16 splits, a 4-token verify bs 8 -> 8 (H100,
    #: 2026-11-26, 16 heads, 8k: decode 41.6 us at 16 splits, 48.8 at 32; verify 68.9 / 82.1 us at
    #: 8 / 16). ``split_waves`` / ``verify_split_waves`` are the extend kernel's and the 2-stage
    #: tiles'.
    decode_split_waves: ClassVar[int] = 1
    max_kv_splits: ClassVar[int] = 32
    #: A decode-kernel split covers at least ``max(block_n, rows * block_m)`` keys, ``rows`` these
    #: factors for decode and for verify blocks: one 64-key tile at short contexts, where the bs-1
    #: kernel is latency-bound and more programs beat a split long enough to double-buffer. H100,
    #: random DeepSeek-V2-Lite + one MTP module, bs 1, 1k context
    #: (benchmarks/results/2026-11-26-h100-mla-verify-splits): at 16 / 16 a 2-token verify (32
    #: rows) got 2 splits of 512 keys and the MTP S = 1 cycle took 8.66 ms = 1.49 plain steps;
    #: verify 2: 7.47 ms; decode 8 took the plain step from 5.81 to 5.66 ms. With the 3-stage tiles
    #: (benchmarks/results/2026-11-26-h100-router-commit), 128-key splits (8 at 1k) against 64-key
    #: ones (16): plain step 5.481 -> 5.442 ms, S = 1 cycle 7.164 -> 7.079 ms; bs 8 unchanged.
    #: Long contexts split by the occupancy policy.
    min_split_rows: ClassVar[int] = 4
    verify_min_split_rows: ClassVar[int] = 2
    #: Verify blocks of at most this many query tokens in the whole batch (``bsz x ndt``) take
    #: one token's heads per program (16-row tiles for 16 heads) instead of packing 32 rows: a
    #: small batch is latency-bound, and twice the programs of half the rows (each reading the
    #: same latent rows, side by side in L2) finish sooner. H100, 2026-11-26, 16 heads, us per
    #: forward (store + attention + merge; benchmarks/results/2026-11-26-h100-mla-token-tiles):
    #: 2-token verify bs 1 / 1k 13.1 -> 12.3, bs 1 / 4k 17.0 -> 14.0, bs 8 / 1k 18.1 -> 13.9;
    #: 4-token bs 1 / 4 at 1k 14.5 / 18.9 -> 12.7 / 14.5; the DeepSeek-V2-Lite MTP S = 1 cycle
    #: 1.31 -> 1.28 plain steps. bs 8 / 8k lost (46.1 -> 48.2), so larger batches keep 32 rows.
    token_tile_max_tokens: ClassVar[int] = 16
    #: The decode kernel reads its lengths and pool rows before its PDL wait (``mla_decode_attention``'s
    #: ``early_metadata``; H100, 2026-12-07, issue 15's measure at bs 8 / 8k 36.7 -> 36.3-36.4 us,
    #: benchmarks/results/2026-12-07-h100-mla-early-form).
    decode_early_metadata: ClassVar[bool] = True
    #: The GQA backend's merge cap (``TritonBackend.merge_pdl_grid``): off. MLA's merge grids are wide
    #: (bs 8 / 8k: 8 rows x 16 heads x 2 column blocks over 16 splits, 256 programs), and capped they
    #: were slower: H100, 2026-12-07, issue 15's measure at 25 / 50 / 100% of the SMs, bs 8 / 8k 37.5 /
    #: 38.3 / 36.8 us against 36.5, bs 64 / 8k 218.2 / 218.1 / 213.3 against 211.5
    #: (benchmarks/results/2026-12-07-h100-merge-fold/call5; the 25% cap's tiles were past today's limit).
    merge_pdl_grid: ClassVar[float] = 0.0

    def __init__(
        self,
        kv_pool: KVPool,
        req_to_token: torch.Tensor,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float | None = None,
    ) -> None:
        if not kv_pool.shared_kv or kv_pool.kv_heads != 1 or num_kv_heads != 1:
            raise ValueError(
                "attention backend 'mla' serves a shared latent cache with one KV head (KVPool(shared_kv=True, "
                f"kv_heads=1)); got shared_kv={kv_pool.shared_kv}, pool kv_heads={kv_pool.kv_heads}, "
                f"num_kv_heads={num_kv_heads} (use triton or torch_native for other layouts)"
            )
        if head_dim != kv_pool.head_dim or kv_pool.v_head_dim >= head_dim:
            raise ValueError(
                f"attention backend 'mla' needs head_dim = kv_lora_rank + rope_dim with a rope part: head_dim={head_dim}, "
                f"pool head_dim={kv_pool.head_dim}, v_head_dim (kv_lora_rank)={kv_pool.v_head_dim}"
            )
        super().__init__(kv_pool, req_to_token, num_heads, num_kv_heads, head_dim, scale)
        self.v_head_dim = kv_pool.v_head_dim

    # ---- launch plan (the triton backend's, with MLA's kernels and tiles) ----------------
    def _uses_decode_kernel(self, mode: ForwardMode, tree_stride: int, stride: int = 1) -> bool:
        # The decode kernel reads the verify block (and a draft tree) from the pool, causal
        # and masked in-kernel: the MLA verify is the bandwidth-bound decode, ndt rows wider.
        return mode.is_decode() or mode.is_target_verify()

    def _base_programs(self, use_decode: bool, bsz: int, max_ext: int, tile: TileConfig) -> int:
        return grid_rows(max_ext, self.num_heads, tile.block_rows) * bsz

    def _num_kv_splits(self, base_programs: int, tile: TileConfig, waves: int | None = None) -> int:
        if tile.num_stages >= 3:  # the double-buffered decode tiles: one program per SM
            waves = self.decode_split_waves
        splits = super()._num_kv_splits(base_programs, tile, waves)
        if self.kv_splits_override is not None:
            return splits
        return 1 << (splits.bit_length() - 1)  # a power of two: 33 -> 32, 9 -> 8

    def _tile(self, use_decode: bool, max_ext: int, bsz: int) -> TileConfig:
        """Tiles per path. ``block_rows``: (token, head) rows per program; ``min_split``: fewest
        keys a split covers, large in decode, where a split's fp32 partial (rows x Dv x 4 bytes,
        written and read again) must stay small next to the latent rows it reads (~16 rows x
        1152 bytes per row of the tile). A small verify batch tiles one token a program
        (``token_tile_max_tokens``) and splits as decode does."""
        ext = max(1, max_ext)
        # one token's heads a program where that is a smaller tile than the packed block
        token_tiles = (use_decode and bsz * ext <= self.token_tile_max_tokens
                       and next_pow2(self.num_heads) < min(next_pow2(ext * self.num_heads), 32))
        rows = (1 if token_tiles else ext) * self.num_heads
        if self.interpret:  # small blocks: short test sequences still cross block boundaries
            return TileConfig(block_rows=min(max(16, next_pow2(rows)), 32), block_n=16, min_split=16, num_warps=1,
                              num_stages=1)
        if self.kv_pool.dtype == torch.float32:  # IEEE fp32 dots on FMA units: the correctness path
            return TileConfig(block_rows=16, block_n=16, min_split=64, num_warps=4, num_stages=2)
        block_m = min(max(16, next_pow2(rows)), 32 if use_decode else 64)
        warps = 4 if block_m <= 16 else 8
        if not use_decode:
            block_n = 64 if block_m <= 16 else 32
            return TileConfig(block_rows=block_m, block_n=block_n, min_split=2 * block_n, num_warps=warps, num_stages=2)
        # 64-key latent tiles in 3 stages with the slots a block ahead: double-buffered (mla_decode),
        # 168-184 KB of shared memory, one program per SM (H100, 2026-11-26, 16 heads, 8k: decode
        # bs 8 43.2 -> 41.6 us; a 4-token verify bs 8 / 64 159.8 -> 68.9 / 958.9 -> 455.1 us
        # against 32-row x 32-key tiles in 2 stages, which never overlapped a copy with the dots).
        rows_factor = self.min_split_rows if max_ext <= 1 or token_tiles else self.verify_min_split_rows
        return TileConfig(block_rows=block_m, block_n=64, min_split=max(64, rows_factor * block_m), num_warps=warps,
                          num_stages=3)

    # ---- compute -----------------------------------------------------------------------
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
        rope: Rope | None = None,
    ) -> torch.Tensor:
        """See the module docstring: ``rope`` must be None, ``v`` is ignored."""
        if rope is not None:
            raise ValueError(
                "attention backend 'mla' takes q and k with their rope parts already rotated (rope must be None): "
                "only the last head_dim - kv_lora_rank columns rotate, which the model does itself"
            )
        dk = self.head_dim
        if q.dim() != 3 or q.shape[1:] != (self.num_heads, dk) or k.dim() != 3 or k.shape[1:] != (1, dk):
            raise ValueError(
                f"attention backend 'mla' expects q [T, {self.num_heads}, {dk}] and k [T, 1, {dk}] (latent rows), "
                f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
            )
        return super().forward(q, k, v, layer_id, batch, save_kv=save_kv)

    def _store(self, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch) -> None:
        store_kv(k, None, self.kv_pool.k_buffer[layer_id], None, batch.out_cache_loc)  # V is K's leading columns

    def _run_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, md: TritonMetadata
    ) -> torch.Tensor:
        out = self._extend_out(q, md)
        mla_extend_attention(
            q, k, self.kv_pool.k_buffer[layer_id], out, self.req_to_token, md.req_pool_indices, md.seq_lens,
            md.ext_lens, md.ext_start, md.tree_mask, md.mid_o, md.mid_lse, md.plan.max_ext, md.plan.num_kv_splits,
            self.scale, md.plan.tile, self._dot_f32(q),
        )
        return out

    def _run_decode(self, q: torch.Tensor, layer_id: int, md: TritonMetadata) -> torch.Tensor:
        # Every row is written (the grid covers B x stride rows at the frozen uniform stride).
        out = torch.empty((q.shape[0], self.num_heads, self.v_head_dim), dtype=q.dtype, device=q.device)
        mla_decode_attention(
            q, self.kv_pool.k_buffer[layer_id], out, self.req_to_token, md.req_pool_indices, md.seq_lens,
            md.tree_mask, md.mid_o, md.mid_lse, md.plan.stride, md.plan.num_kv_splits, self.scale, md.plan.tile,
            self._dot_f32(q), early_metadata=self.decode_early_metadata and pdl_enabled(q.device, "attention"),
            merge_max_programs=self._merge_cap(),
        )
        return out
