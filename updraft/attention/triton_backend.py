"""``triton``: paged attention with Triton kernels (CUDA; CPU only under ``TRITON_INTERPRET=1``).

Routing (failure classes 3 and 5):

* DECODE, DRAFT_DECODE (one token per request) and TARGET_VERIFY (a chain's block, causal in
  the block, while its tokens x the query heads of a KV head fit ``max_decode_rows`` rows) -> the
  split-KV decode kernel, which reads the block from the pool (stored first); a second launch
  merges its splits (``merge_in_kernel``: the kernel's own last split can, but that measured
  slower). Verify used the extend kernel until 2026-11-26; on the H100 that cost a zeroed output
  per layer and the extend kernel's slower tiles (a SmolLM2 6-token verify step: 1.02 ms against
  0.84 ms for a decode step).
* DRAFT_DECODE with a tree mask (topk > 1), TARGET_VERIFY with a tree mask or wider than
  ``max_decode_rows`` -> the extend kernel with causal-in-block masking, the optional tree mask,
  and KV splits.
* EXTEND, DRAFT_EXTEND (v1, packed) and DRAFT_EXTEND_V2 (fixed stride) -> the extend kernel,
  never the decode kernel.
* ``save_kv=False`` in a decode mode also takes the extend kernel (the decode kernel reads the new
  token from the pool, the extend kernel from the K/V tensors).

Numerics: fp32 dot products are IEEE fp32 (``input_precision="ieee"``, no TF32), so fp32 meets
the kit's 1e-4 tolerance; bf16/fp16 accumulate in fp32 (see ``triton_kernels``).

Metadata: ``TritonMetadata`` = device buffers + a ``LaunchPlan`` of host scalars that the kernels
take by value (grid sizes, splits, tiles). It is built once per forward (no device sync) and
shared by every layer. Its lengths, starts and request rows ARE the batch's own tensors (bound by
``_alloc_metadata``, no copies): the builders that write a batch's static inputs (the runner's
``PhaseInputs.write``, the fused iteration's layout launch) write the metadata with them, so a
graph replay's metadata costs no launch. The kernels derive the prefix length ``kv_lens =
max(seq_lens - ext_lens, 0)`` themselves (padded graph rows: seq_lens 1 < ext, failure class 4).
Under CUDA graphs those host scalars are FROZEN at capture; for the fixed-stride modes (DECODE,
DRAFT_DECODE, TARGET_VERIFY, DRAFT_EXTEND_V2) ``_plan`` derives them only from the mode, batch
size, stride, tree-ness, dtype, head layout, the ``req_to_token`` width and the SM count: never
from per-step lengths. A replay
that would need different host scalars is refused by ``_fill_metadata`` (failure class 6).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from updraft import ops
from updraft.attention.base import AttentionBackend, Rope, SplitPartials, UnsupportedModeError
from updraft.attention.triton_kernels import TileConfig, interpreting, next_pow2, rope_store
from updraft.attention.triton_kernels import decode as decode_kernels
from updraft.attention.triton_kernels import extend as extend_kernels
from updraft.attention.triton_kernels.kv_store import store_kv
from updraft.attention.triton_metadata import (
    MAX_KV_SPLITS,
    LaunchPlan,
    TritonMetadata,
    as_kernel_input,
    same_tensor,
)
from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode
from updraft.memory.pools import KVPool


class TritonBackend(AttentionBackend):
    """Triton paged attention. Graphs: ``init_capture_metadata`` builds the metadata of one
    captured batch (bound to its tensors); ``init_replay_metadata`` checks the replayed batch
    against it with ``_fill_metadata`` (which refuses a batch needing other host scalars)."""

    name = "triton"
    supported_modes = frozenset(REAL_MODES)
    graph_modes = frozenset(
        {
            ForwardMode.EXTEND,  # packed under a graph: the captured width sizes the grid
            ForwardMode.DECODE,
            ForwardMode.DRAFT_DECODE,
            ForwardMode.TARGET_VERIFY,
            ForwardMode.DRAFT_EXTEND,
            ForwardMode.DRAFT_EXTEND_V2,
        }
    )
    devices = frozenset({"cpu", "cuda"})
    stored_kv = True
    #: KV splits aim at this many programs per SM (``_num_kv_splits``), at most ``max_kv_splits``;
    #: a verify block's decode-kernel programs (ndt x group rows each) at ``verify_split_waves``.
    #: H100 sweep (``benchmarks/decode_attn_sweep.py``, 2026-11-26, 1k context, merge launch):
    #: decode fastest at 2-4 waves, 6-token verify at 1-2 (8B heads, bs 1: 16 splits 7.8 us,
    #: 64 splits 9.2 us). A verify block of at most ``verify_one_wave_programs`` programs a split
    #: (requests x KV heads) aims at one wave instead. H200, 2026-12-03, SmolLM2's S = 5 cycle
    #: (random weights, alternating rounds; benchmarks/results/2026-12-03-h200-verify-window), one
    #: wave against two: at 512 tokens of context bs 1 / 2 / 4 (3 / 6 / 12 programs) 0.815 -> 0.802,
    #: 0.851 -> 0.837, 0.979 -> 0.929 ms and bs 8 (24) 1.047 -> 1.039; at 4k bs 1 0.876 -> 0.866,
    #: bs 4 1.129 -> 1.135, but bs 8 1.304 -> 1.426 (6 splits of ~680 keys each).
    split_waves: ClassVar[int] = 4
    verify_split_waves: ClassVar[int] = 2
    verify_one_wave_programs: ClassVar[int] = 12
    #: Pipeline stages of the decode kernel's tile for verify blocks (>= 3: slots prefetched, K/V
    #: double-buffered). H100, 2026-11-26, 1k context, 6-token verify: 8B bs 8 7.02 -> 6.82 ms,
    #: SmolLM2 bs 8 1.142 -> 1.122 ms, bs 1 unchanged. One-token decode stays at 2: at 3 its
    #: 8k / 32k attention read 74% / 76% of the copy bandwidth at bs 1 against 78% / 80%.
    verify_stages: ClassVar[int] = 3
    max_kv_splits: ClassVar[int] = MAX_KV_SPLITS
    #: The most query rows (verify tokens x query heads per KV head) a decode-kernel program holds
    #: (its tile is that, padded to a power of two >= 16); a wider verify takes the extend kernel.
    max_decode_rows: ClassVar[int] = 64
    #: Verify blocks of this many token rows (batch x stride, frozen at capture; both ends
    #: included) launch their decode kernel and merge without PDL, unless ``verify_pdl_in_window``
    #: names them (both, as shipped since 2026-12-07: the window is a probe's knob now): the blocks past the 40 rows
    #: where the fused layers ran without a loss, up to their 64. H100, 2026-11-27, SmolLM2
    #: 6-token verify on the fused layers (benchmarks/results/2026-11-27-h100-cycle-kernels):
    #: bs 8 (48 rows) 1.171 ms with PDL there, 0.984 without (0.995 with PDL off everywhere; 0.972
    #: / 0.981 with it on for the GEMMs alone / the attention alone: the pair of them loses);
    #: bs 1 (6 rows) 0.662 with it, 0.694 without. Blocks over 64 rows run the unfused layers,
    #: where the attention's PDL made no difference at 48 rows (1.132 / 1.137 ms): unchanged.
    verify_no_pdl_rows: ClassVar[tuple[int, int]] = (41, 64)
    #: Launches of a verify block in that window that keep PDL all the same: "decode" (the
    #: attention kernel), "merge" (its split merge). The decode kernel does: H200, 2026-12-03,
    #: SmolLM2's bs-8 S = 5 cycle (48 rows; benchmarks/results/2026-12-03-h200-verify-window,
    #: alternating rounds) 1.0554 -> 1.0373 ms with it on, 1.1142 with the merge's on instead. The
    #: merge does too since its grid is capped (``merge_pdl_grid``): its loss was the grid's.
    verify_pdl_in_window: ClassVar[frozenset[str]] = frozenset({"decode", "merge"})
    #: A split merge launched with PDL takes more heads a program until its grid is at most this
    #: fraction of the SM count (``merge_splits(max_programs=)``; 0: the tile rule alone). H100,
    #: 2026-12-07 (benchmarks/results/2026-12-07-h100-merge-fold/call3), SmolLM2's merge + o_proj
    #: pair a layer with the merge on PDL: 48 rows over 11 splits at 1 / 2 / 4 / 8 / 16 heads a
    #: program (432 / 240 / 144 / 96 / 48 programs) 11.4 / 11.7 / 11.6 / 5.2 / 5.0 us, 6.1 without
    #: PDL; 64 rows over 3 splits (64 / 128 / 320 / 576 programs at 16 / 8 / 2 / 1) 5.7 / 11.4 /
    #: 11.5 / 11.3. Past ~100 programs the merge on PDL doubles; half the SMs keeps each case at
    #: its fastest. The bs-8 S = 5 cycle with the 48-row verify's merge on PDL: 1.1614 ms on the
    #: tile rule's grid, 0.9791 within the SM count, 1.0181 with the merge off PDL (before); shipped
    #: at half the SMs, on another H100 (call5): 0.9923 ms (1.430 plain steps) against 0.9908 at the
    #: SM count and 1.0301 (1.485) before; bs 4 0.8856 against 0.8887. The extend kernel's merges (a
    #: draft extend's) take it too: 1.0273 against 1.0301 with only theirs capped (within the spread).
    merge_pdl_grid: ClassVar[float] = 0.5
    #: Whether the decode kernel prefetches each split's first block of cached K/V rows into L2
    #: before its PDL wait (``decode_attention``'s ``prewarm``), for verify blocks and for one-token
    #: decode (read at each launch: a graph keeps the value it was captured with). H200,
    #: 2026-12-02, random weights, 1k context, alternating rounds
    #: (benchmarks/results/2026-12-02-h200-verify-prewarm, ../2026-12-02-h200-store-prewarm):
    #: SmolLM2's 6-token verify at bs 1 0.628-0.630 -> 0.619-0.620 ms (verify blocks past 40 rows
    #: launch without PDL, so without prewarm); its decode at bs 1 0.594 -> 0.587 but at bs 8 0.671
    #: -> 0.684 ms (the 8B shape's 4.78 -> 4.83): eight requests' programs prefetch while the QKV
    #: GEMV before them streams its weights. Off for verify blocks too since 2026-12-03: in the
    #: S = 5 cycle, where the verify runs, the prewarm cost time at every batch size (H200, with
    #: one verify wave and the decode kernel's PDL at 41-64 rows: bs 1 / 2 / 4 / 8 0.8025 /
    #: 0.8385 / 0.9291 / 1.0179 ms with it, 0.7961 / 0.8360 / 0.9280 / 1.0109 without;
    #: benchmarks/results/2026-12-03-h200-verify-window).
    prewarm_verify: ClassVar[bool] = False
    prewarm_decode: ClassVar[bool] = False
    #: Whether a decode-kernel program whose KV split lies past its request's context (the splits
    #: are sized at capture for the longest context; short ones leave the trailing ones empty)
    #: stores only its rows' lse and skips the body (``decode_attention``'s ``skip_empty``). Off:
    #: H200, 2026-12-03, SmolLM2 at 512 tokens (benchmarks/results/2026-12-03-h200-live-splits),
    #: the S = 5 cycle 6-9 us and the plain step 3-5 us slower with it at bs 1 and 8.
    skip_empty_splits: ClassVar[bool] = False
    #: Whether the decode kernel merges its KV splits itself (the last split of each request
    #: and KV head to finish) instead of a second merge launch (a default for every backend; a
    #: test or benchmark may set it on one instance). Off: on the H100 the second launch was
    #: faster at every decode and verify shape swept (SmolLM2 bs 1 decode at 1k: 5.1 us against
    #: 7.4 in one launch; Llama-8B heads 6.4 against 8.7; the last program's serial merge after
    #: its atomic ticket is a longer chain than a parallel launch). Only the splits holding keys
    #: take part since 2026-12-03, a lone one writing the output itself: on the H200 that won only
    #: the bs-1 plain step at 512 tokens (0.634 -> 0.627 ms) and lost the S = 5 cycle (+47 / +51 us
    #: at bs 1 / 8) and the plain step at 4k (+68 us; benchmarks/results/2026-12-03-h200-live-splits).
    #: Read when metadata is built, so graphs keep the choice they were captured with.
    merge_in_kernel: bool = False
    #: Decode-kernel launches of this many token rows (frozen at capture; both ends included) over
    #: ``fold_merge_splits`` KV splits hand their merge to the layer's o_proj GEMV (``ops.gemv_merge``,
    #: ``forward_stored_split``: a launch a layer fewer). Off: each o_proj program repeats its head's
    #: merge: against the engine's two launches as it runs them (the 48-row verify's merge without
    #: PDL) at most 0.2 us a SmolLM2 layer faster (8-16 rows, 2-3 live splits), up to 3.3 slower (H100,
    #: 2026-12-07), and the S = 5 cycle lost with it at 12-64 rows (bs 4
    #: / 8 +51 / +84 us) and at 41-64 rows (bs 8 +124 us; ``cycle_variants.py``'s ``merge_fold``;
    #: benchmarks/results/2026-12-07-h100-merge-fold).
    fold_merge_rows: ClassVar[tuple[int, int]] = (1, 0)
    fold_merge_splits: ClassVar[tuple[int, int]] = (8, 16)
    #: Fewest keys a decode-kernel KV split covers (rounded up to whole key blocks; 0: one block).
    #: The split count is frozen at capture for the longest context, so short contexts leave
    #: most splits empty; a larger floor gives them fewer, longer live splits (one at most this
    #: many keys: with ``merge_in_kernel`` it writes the output itself, no merge at all). 0: H200,
    #: 2026-12-03, with the in-launch merge, floors of 128 / 256 keys made the SmolLM2 plain step at
    #: 512 tokens 42 / 123 us slower than no floor (benchmarks/results/2026-12-03-h200-live-splits):
    #: short contexts want many short splits.
    decode_min_split: ClassVar[int] = 0
    #: New token rows (``max_ext x bsz``, frozen at capture) from which an extend with heads over
    #: 64 wide takes the 128 x 128 tile (``_tile``).
    wide_prefill_rows: ClassVar[int] = 4096
    #: Extends of at most this many new tokens a request (frozen at capture: a draft extend, a
    #: verify through the extend kernel) split their prefix at one key block, as the decode
    #: kernel's splits; others at two (the prefill sweep's). H100, 2026-12-06, SmolLM2's S = 5
    #: cycle at 512 tokens (its 6-row draft extend; benchmarks/results/2026-12-06-h100-side-fc):
    #: bs 1 0.8021 -> 0.8010 ms (every round faster), bs 8 1.0628 -> 1.0596 (within the spread).
    short_extend_tokens: ClassVar[int] = 8
    #: Whether fixed-stride extends (DRAFT_EXTEND_V2, a verify through the extend kernel) start
    #: from a zeroed output as the packed ones do (``_extend_out``: a memset launch before the
    #: kernel) instead of the kernel writing every row of their blocks (its ``stride``). Off:
    #: H100, 2026-12-06, SmolLM2's bs-1 S = 5 cycle 0.8048 ms with the memset, 0.8021 without
    #: (benchmarks/results/2026-12-06-h100-side-fc; bs 8 within the spread).
    zero_fixed_stride_out: ClassVar[bool] = False

    def __init__(
        self,
        kv_pool: KVPool,
        req_to_token: torch.Tensor,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float | None = None,
    ) -> None:
        super().__init__(kv_pool, req_to_token, num_heads, num_kv_heads, head_dim, scale)
        self.interpret = interpreting()
        device = kv_pool.device
        if device.type != "cuda" and not self.interpret:
            raise ValueError(
                f"attention backend 'triton' on {device.type!r} needs TRITON_INTERPRET=1 set before "
                "triton is imported (slow, for tests); otherwise use a CUDA device or 'torch_native'"
            )
        if device.type == "cuda" and not self.interpret:
            self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            self.num_sms = 2  # interpreter: small grids, but still several splits in tests
        #: Tests set this to force a split count (None: the occupancy policy in ``_num_kv_splits``).
        self.kv_splits_override: int | None = None

    # ---- launch plan (host scalars) ----------------------------------------------------
    def _tile(self, use_decode_kernel: bool, max_ext: int, bsz: int) -> TileConfig:
        """Tiling per path (H100: 228 KB smem/SM). fp32 is the correctness path: IEEE dots run on
        FMA units, so its tiles are small (also to keep compile time down). ``bsz``: requests in
        the batch (the graph's captured size; MLA's tiles use it)."""
        fp32 = self.kv_pool.dtype == torch.float32
        group_pad = next_pow2(self.num_heads // self.num_kv_heads)
        if self.interpret:  # small blocks: short test sequences still cross block boundaries
            rows = min(max(16, next_pow2(max_ext * group_pad)), 32)
            return TileConfig(block_rows=rows, block_n=16, min_split=self._decode_floor(16) if use_decode_kernel else 16,
                              num_warps=1, num_stages=1)
        big_head = self.head_dim > 128
        if fp32:
            block_n, max_rows = (16 if big_head else 32), 32
        else:
            block_n, max_rows = (32, 64) if big_head else (64, 64)
        if use_decode_kernel:  # a split may be one block: short contexts still spread (same sweep)
            # verify blocks: 3 stages, the K/V tiles double-buffered, the slots loaded a block ahead
            # (decode.py); one-token decode keeps 2 (more programs per SM hide its latency better)
            return TileConfig(block_rows=16, block_n=block_n, min_split=self._decode_floor(block_n), num_warps=4,
                              num_stages=self.verify_stages if max_ext > 1 else 2)
        # Extend tiles for bf16/fp16 heads up to 128 wide, H200 sweep 2026-12-02
        # (benchmarks/results/2026-12-02-h200-prefill-tiles): 64 rows of 64 keys on 4 warps came
        # within 2% of the best tile at six of eight SmolLM2 shapes (20% behind over an 8k
        # prefix) and won the 8B heads' short prefills (bs 1 x 2k: 127 against 204 us for the
        # 128-row tile before); heads over 64 wide with >= 4096 new rows in the batch take 128
        # rows of 128 keys on 8 warps (bs 1 x 4k: 353 against 386).
        if not fp32 and 64 < self.head_dim <= 128 and max_ext * bsz >= self.wide_prefill_rows:
            max_rows, block_n = 128, 128
        rows = min(max(16, next_pow2(max_ext * group_pad)), max_rows)
        warps = 8 if rows >= 128 else 4
        split = block_n if max_ext <= self.short_extend_tokens else 2 * block_n
        return TileConfig(block_rows=rows, block_n=block_n, min_split=split, num_warps=warps, num_stages=2)

    def _decode_floor(self, block_n: int) -> int:
        """The decode kernel's ``min_split``: ``decode_min_split`` in whole blocks, at least one."""
        return max(1, -(-self.decode_min_split // block_n)) * block_n

    def _num_kv_splits(self, base_programs: int, tile: TileConfig, waves: int | None = None) -> int:
        """Splits so that ``base_programs * splits`` covers ``waves`` (default ``split_waves``)
        waves of SMs, capped by what the table width can use. Depends on no per-step length
        (graph-safe)."""
        if self.kv_splits_override is not None:
            return max(1, int(self.kv_splits_override))
        want = -(-(waves or self.split_waves) * self.num_sms // max(base_programs, 1))
        width_cap = -(-int(self.req_to_token.shape[1]) // tile.min_split)
        return max(1, min(want, self.max_kv_splits, width_cap))

    def _verify_waves(self, base_programs: int) -> int:
        """Waves of programs a verify block's decode-kernel splits aim at (``split_waves``'s note)."""
        return 1 if base_programs <= self.verify_one_wave_programs else self.verify_split_waves

    def _uses_decode_kernel(self, mode: ForwardMode, tree_stride: int, stride: int = 1) -> bool:
        """Whether ``mode`` (``stride`` tokens per request, a tree mask over ``tree_stride``
        tokens, 0: none) takes the decode kernel when its new K/V are stored first. Never for an
        extend mode (failure class 5)."""
        if tree_stride:
            return False
        if mode.is_decode():
            return True
        return mode.is_target_verify() and stride * (self.num_heads // self.num_kv_heads) <= self.max_decode_rows

    def _base_programs(self, use_decode: bool, bsz: int, max_ext: int, tile: TileConfig) -> int:
        """Programs of one KV split (the split policy's input): one per request and KV head in
        decode, one per query tile, request and KV head in extend."""
        if use_decode:
            return bsz * self.num_kv_heads
        block_t = extend_kernels.tokens_per_tile(tile.block_rows, self.num_heads // self.num_kv_heads)
        return -(-max_ext // block_t) * bsz * self.num_kv_heads

    def _plan(self, batch: ForwardBatch) -> LaunchPlan:
        mode = batch.mode
        bsz = batch.batch_size
        fixed = mode.is_fixed_stride(include_v2=True)
        tree_stride = 0
        if batch.custom_mask is not None:
            if not fixed:
                raise ValueError(f"a tree mask needs a fixed-stride mode, got {mode.name}")
            tree_stride = batch.stride
        use_decode = self._uses_decode_kernel(mode, tree_stride, batch.stride if fixed else 1)
        eager = not fixed and batch.max_extend_len is None  # EXTEND, DRAFT_EXTEND v1 outside a graph
        if fixed:
            max_ext = batch.stride  # frozen: never the per-step lengths
        elif batch.max_extend_len is not None:  # packed under a graph: the captured width
            max_ext = batch.max_extend_len
        else:  # eager: the host copy sizes the grid
            max_ext = int(batch.extend_seq_lens_cpu.max()) if bsz else 0
        tile = self._tile(use_decode, max_ext, bsz)
        base = self._base_programs(use_decode, bsz, max_ext, tile)
        splits = self._num_kv_splits(base, tile, self._verify_waves(base) if use_decode and max_ext > 1 else None)
        if eager and self.kv_splits_override is None and bsz and int(batch.prefix_lens_cpu().max()) == 0:
            # An eager extend with no cached prefix anywhere (a fresh prompt's prefill): splits
            # divide only the prefix, so more would add empty programs, fp32 partials and the
            # merge launch. Graphs keep the policy (a replay may bring a prefix).
            splits = 1
        return LaunchPlan(
            mode=mode,
            batch_size=bsz,
            num_tokens=batch.num_tokens,
            stride=batch.stride if fixed else 0,
            use_decode_kernel=use_decode,
            tree_stride=tree_stride,
            max_ext=max_ext,
            num_kv_splits=splits,
            tile=tile,
        )

    # ---- metadata ----------------------------------------------------------------------
    def _alloc_metadata(self, plan: LaunchPlan, batch: ForwardBatch) -> TritonMetadata:
        """Metadata for ``plan`` over ``batch``'s tensors (eager: per forward; graphs: once, at
        capture) and its scratch buffers."""
        device = batch.device
        bsz, tokens, splits = plan.batch_size, plan.num_tokens, plan.num_kv_splits
        if splits > 1:
            dv = self.kv_pool.v_head_dim  # the output's width (head_dim here; the latent rank in mla)
            mid_o = torch.empty(tokens, self.num_heads, splits, dv, dtype=torch.float32, device=device)
            # -inf = "no keys": rows no program reaches (unseeded capture metadata, failure class
            # 8) merge to 0 instead of reading garbage. Written rows are rewritten every layer.
            mid_lse = torch.full((tokens, self.num_heads, splits), float("-inf"), device=device)
        else:
            mid_o = torch.empty(1, 1, 1, 1, dtype=torch.float32, device=device)
            mid_lse = torch.empty(1, 1, 1, dtype=torch.float32, device=device)
        s = plan.tree_stride
        merge_in_kernel = self.merge_in_kernel and plan.use_decode_kernel and splits > 1
        return TritonMetadata(
            seq_lens=as_kernel_input(batch.seq_lens, torch.int32),
            ext_lens=as_kernel_input(batch.extend_seq_lens, torch.int32),
            ext_start=as_kernel_input(batch.extend_start_loc, torch.int32),
            req_pool_indices=as_kernel_input(batch.req_pool_indices, torch.int64),
            tree_mask=torch.zeros(bsz, s, s, dtype=torch.uint8, device=device) if s else None,
            mid_o=mid_o,
            mid_lse=mid_lse,
            plan=plan,
            sem=torch.zeros(bsz * self.num_kv_heads, dtype=torch.int32, device=device) if merge_in_kernel else None,
        )

    def _fill_metadata(self, batch: ForwardBatch, md: TritonMetadata) -> None:
        """THE metadata builder: ``batch``'s values into ``md``, in place.

        Asserts the seq_lens convention, and that the host scalars this batch needs are the ones
        ``md`` was built (captured) with. ``md`` built over this batch's tensors (every forward
        and replay in production) needs nothing else: no launch; a batch over other tensors (a
        test refilling one batch's metadata from another) is copied in. Device work only; no
        host sync.
        """
        batch.check_conventions()
        self.check_mode(batch.mode)
        plan = self._plan(batch)
        if plan != md.plan:
            raise AssertionError(
                "triton metadata: this batch needs different host scalars than the buffers were "
                f"built with (frozen at capture under graphs): {plan} != {md.plan}"
            )
        for src, dst in ((batch.seq_lens, md.seq_lens), (batch.extend_seq_lens, md.ext_lens),
                         (batch.extend_start_loc, md.ext_start), (batch.req_pool_indices, md.req_pool_indices)):
            if not same_tensor(src, dst):
                dst.copy_(src)
        if md.tree_mask is not None:
            assert batch.custom_mask is not None
            s = plan.tree_stride
            md.tree_mask.copy_(batch.custom_mask.reshape(plan.batch_size, s, s))

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        self.check_mode(batch.mode)
        md = self._alloc_metadata(self._plan(batch), batch)
        self._fill_metadata(batch, md)
        batch.attn_metadata = md

    def init_graph_state(self, max_bs: int, max_tokens_per_req: int) -> None:
        return None  # buffers are allocated per captured batch size in init_capture_metadata

    def init_capture_metadata(self, batch: ForwardBatch) -> None:
        if batch.mode not in self.graph_modes:
            raise UnsupportedModeError(f"triton cannot capture {batch.mode.name} in a graph")
        self.init_forward_metadata(batch)

    def init_replay_metadata(self, batch: ForwardBatch) -> None:
        self._fill_metadata(batch, self._metadata_of(batch))

    def _metadata_of(self, batch: ForwardBatch) -> TritonMetadata:
        md = batch.attn_metadata
        if not isinstance(md, TritonMetadata):
            raise AssertionError("triton backend: replay-init before capture-init")
        return md

    # ---- compute -----------------------------------------------------------------------
    def _metadata(self, batch: ForwardBatch, q: torch.Tensor) -> TritonMetadata:
        md = batch.attn_metadata
        if not isinstance(md, TritonMetadata):
            raise AssertionError("triton backend: call init_forward_metadata(batch) before forward")
        if md.plan.mode != batch.mode or md.plan.num_tokens != q.shape[0]:
            raise AssertionError(
                f"triton metadata was built for {md.plan.mode.name} with {md.plan.num_tokens} "
                f"tokens, forward got {batch.mode.name} with {q.shape[0]}"
            )
        return md

    def _dot_f32(self, q: torch.Tensor) -> bool:
        # The interpreter's bf16 tl.dot is wrong (see triton_kernels); upcast only there.
        return self.interpret and torch.bfloat16 in (q.dtype, self.kv_pool.dtype)

    def _store(self, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch) -> None:
        store_kv(k, v, self.kv_pool.k_buffer[layer_id], self.kv_pool.v_buffer[layer_id], batch.out_cache_loc)

    def _run_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, md: TritonMetadata
    ) -> torch.Tensor:
        stride = 0 if self.zero_fixed_stride_out else md.plan.stride  # the plan's is 0 unless fixed-stride
        out = self._extend_out(q, md, every_row=stride > 0)
        extend_kernels.extend_attention(
            q,
            k,
            v,
            self.kv_pool.k_buffer[layer_id],
            self.kv_pool.v_buffer[layer_id],
            out,
            self.req_to_token,
            md.req_pool_indices,
            md.seq_lens,
            md.ext_lens,
            md.ext_start,
            md.tree_mask,
            md.mid_o,
            md.mid_lse,
            md.plan.max_ext,
            md.plan.num_kv_splits,
            self.scale,
            md.plan.tile,
            self._dot_f32(q),
            stride,
            self._merge_cap(),
        )
        return out

    def _extend_out(self, q: torch.Tensor, md: TritonMetadata, every_row: bool = False) -> torch.Tensor:
        """The extend kernel's output [T, num_heads, v_head_dim]. The kernel writes only rows
        covered by ext_start/ext_lens: with unseeded (all-zero) metadata (failure class 8) that
        is none, and packed graph replays (DRAFT_EXTEND v1) leave junk rows after the real
        tokens, so speculative modes start from zeros (a small memset). Prefill (EXTEND) keeps
        torch.empty, and so does a launch that writes every row itself (``every_row``: the GQA
        extend kernel in a fixed-stride mode, zeros where zero-length metadata left none)."""
        fresh = md.plan.mode == ForwardMode.EXTEND or every_row
        alloc = torch.empty if fresh else torch.zeros
        return alloc((q.shape[0], self.num_heads, self.kv_pool.v_head_dim), dtype=q.dtype, device=q.device)

    def _attention_pdl(self, plan: LaunchPlan) -> tuple[bool, bool]:
        """Whether the decode kernel and its merge may launch with PDL: not for a verify block
        in ``verify_no_pdl_rows`` unless ``verify_pdl_in_window`` names it (host scalars only:
        frozen at capture with the plan)."""
        lo, hi = self.verify_no_pdl_rows
        if plan.stride <= 1 or not lo <= plan.num_tokens <= hi:
            return True, True
        return "decode" in self.verify_pdl_in_window, "merge" in self.verify_pdl_in_window

    def _merge_cap(self) -> int:
        """The split merges' grid cap on PDL (``merge_pdl_grid`` of the SMs; ``merge_splits`` applies it
        only to a launch that is on PDL, whichever family and window decided that)."""
        return int(self.num_sms * self.merge_pdl_grid)

    def _run_decode(self, q: torch.Tensor, layer_id: int, md: TritonMetadata, merge: bool = True) -> torch.Tensor:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        pdl, merge_pdl = self._attention_pdl(md.plan)
        decode_kernels.decode_attention(
            q,
            self.kv_pool.k_buffer[layer_id],
            self.kv_pool.v_buffer[layer_id],
            out,
            self.req_to_token,
            md.req_pool_indices,
            md.seq_lens,
            md.mid_o,
            md.mid_lse,
            md.plan.num_kv_splits,
            self.scale,
            md.plan.tile,
            self._dot_f32(q),
            md.sem,
            max(md.plan.stride, 1),
            pdl=pdl,
            prewarm=self.prewarm_verify if md.plan.stride > 1 else self.prewarm_decode,
            merge_pdl=merge_pdl,
            skip_empty=self.skip_empty_splits,
            merge=merge,
            merge_max_programs=self._merge_cap(),
        )
        return out

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
        """As the base class; a ``rope`` to apply with ``save_kv`` runs in one kernel with the KV
        store (``rope_store``) where it covers the inputs, and under the ops override "torch"
        (the unfused path, kept for timing and debugging) never."""
        if (rope is None or not save_kv or ops.backend() == "torch"
                or not rope_store.supported(q, k, v, self.kv_pool.k_buffer[layer_id], self.kv_pool.v_buffer[layer_id],
                                            rope.positions, rope.cos_sin)):
            return super().forward(q, k, v, layer_id, batch, save_kv=save_kv, rope=rope)
        if not (batch.mode.is_decode() or batch.mode.is_target_verify() or batch.mode.is_extend_like(include_v2=True)):
            raise UnsupportedModeError(f"attention has no path for {batch.mode.name}")
        return self._attend(q, k, v, layer_id, batch, save_kv=True, rope=rope)

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
        if not batch.mode.is_extend_like(include_v2=True):
            raise UnsupportedModeError(f"forward_extend got {batch.mode.name}")
        return self._attend(q, k, v, layer_id, batch, save_kv=save_kv)

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
        if not (batch.mode.is_decode() or batch.mode.is_target_verify()):
            raise UnsupportedModeError(f"forward_decode got {batch.mode.name}")
        return self._attend(q, k, v, layer_id, batch, save_kv=save_kv)

    def forward_stored(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch
    ) -> torch.Tensor:
        """As the base class: the decode kernel reads the new token from the pool."""
        if not (batch.mode.is_decode() or batch.mode.is_target_verify() or batch.mode.is_extend_like(include_v2=True)):
            raise UnsupportedModeError(f"attention has no path for {batch.mode.name}")
        return self._attend(q, k, v, layer_id, batch, save_kv=False, stored=True)

    def forward_stored_split(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch
    ) -> SplitPartials | None:
        """As the base class: decode-kernel plans in ``fold_merge_rows`` over ``fold_merge_splits``
        KV splits, merged by the next launch (with the merge launch's PDL setting), not in the kernel."""
        (lo, hi), (s_lo, s_hi) = self.fold_merge_rows, self.fold_merge_splits
        if lo > hi or not (batch.mode.is_decode() or batch.mode.is_target_verify()):
            return None
        md = self._metadata(batch, q)
        plan = md.plan
        if not (plan.use_decode_kernel and md.sem is None and lo <= plan.num_tokens <= hi
                and max(2, s_lo) <= plan.num_kv_splits <= s_hi):
            return None
        self._run_decode(q, layer_id, md, merge=False)
        return SplitPartials(md.mid_o, md.mid_lse, pdl=self._attention_pdl(plan)[1])

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch, *,
                save_kv: bool, rope: Rope | None = None, stored: bool = False) -> torch.Tensor:
        """The new K/V into the pool when ``save_kv`` (with ``rope`` applied in the same kernel
        when given; ``stored``: already there), then the decode kernel where the plan takes it
        (decode-like modes with the new token in the pool), else the extend kernel."""
        md = self._metadata(batch, q)
        if rope is not None:
            rope_store.rope_store_(q, k, v, self.kv_pool.k_buffer[layer_id], self.kv_pool.v_buffer[layer_id],
                                   batch.out_cache_loc, rope.positions, rope.cos_sin)
        elif save_kv:
            self._store(k, v, layer_id, batch)
        decode_like = batch.mode.is_decode() or batch.mode.is_target_verify()
        if decode_like and md.plan.use_decode_kernel and (save_kv or stored):
            return self._run_decode(q, layer_id, md)
        return self._run_extend(q, k, v, layer_id, md)
