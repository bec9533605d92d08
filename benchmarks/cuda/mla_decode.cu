// MLA decode in CUDA (issue 15's last named lever; a probe, not the engine's kernel): the split-KV decode of
// `mla_decode.py` for DeepSeek-V2-Lite's shape (16 heads, latent 512 + rope 64, bf16, one query token a
// request), written to cut what the Triton kernel pays around its streaming loop at bs 8 / 8k:
//
// * before `griddepcontrol.wait`: the request's length and pool row, the first tiles' slots, and the
//   cp.async copies of the first STAGES - 1 tiles of cached rows (positions below seq - 1 were stored by
//   earlier forwards and the metadata by the batch builder: every kernel before the one this launch
//   follows has completed once it may start; the new row and the queries load after the wait);
// * STAGES = 4 tiles of 32 keys in shared memory (three in flight while one is computed) against the
//   Triton kernel's two of 64;
// * two block barriers a tile: the warps split the QK product over K (144 of the 576 columns each, their
//   query fragments in registers), exchange fp32 score partials once, then every warp runs the same
//   softmax on the whole tile and keeps P in registers as the PV product's A operand (no layout round
//   trip); each warp owns 128 of the 512 output columns.
//
// The entry points share the compute: `mla_decode_h16` (every thread's 16-byte cp.async copies),
// `mla_decode_h16_bulk` (one bulk copy a row from warp 0, counted on the stage's mbarrier),
// `mla_decode_h16_bulk8` (that on eight warps, two a scheduler, each with half the keys of its K slice and 64
// output columns), `mla_decode_h16_a2` / `_a3` (the cp.async form with each thread's slots two / three tiles ahead)
// and `_w8` / `_w8a3` (the cp.async form on eight warps); built with -DSTAGES=5 as well. All correct, none faster
// than the Triton kernel at any shape on H100s on 2026-12-06/07 (benchmarks/results/2026-12-06-h100-recheck/,
// 2026-12-06-h100-mla-cuda-variants/): the cp.async forms save 0.4-1.2 us of fixed cost and stream 8-12% slower;
// `_ln` / `_a3ln` / `_w8a3ln` (a warp's copies on whole 128-byte lines) tie it at bs 8 / 8k and stream ~5% slower.
// `mla_common.cuh` holds what the kernels share; `mla_k64.cuh` (included last) the 64-key-tile kernel.
// Output: the split's normalised partial [16, 512] fp32 and its log2-sum-exp, as `store_rows` writes them
// (a split without keys writes zeros and -inf); the Triton merge launch (`merge_splits(written=True)`)
// combines them. The `_cl` forms (`_a3ln_cl`, `_k64_cl`) instead merge them on the request's thread-block
// cluster and write the bf16 rows (`cluster_merge`), with no merge launch (slower at bs 8: an H100 holds seven
// clusters of more than eight CTAs at once). Rows are padded to 584 bf16 in shared memory (1168 B: eight rows at
// one column fall in distinct banks for ldmatrix).
#include "mla_common.cuh"

// Tile t's rows into stage buffer t % STAGES on T threads: thread `tid` copies row tid / (T / BN) (its pool slot
// `slot`, -1: past the split, zero-filled), 16-byte chunks tid % (T / BN) + (T / BN) j.
template <int T>
__device__ __forceinline__ void issue_tile(const Params& p, __nv_bfloat16* sK, int t, int slot, int tid) {
  constexpr int PER = T / BN;  // threads a row: 4 (4 warps) or 8 (8 warps)
  const int row = tid / PER, lc = tid % PER;
  __nv_bfloat16* dst = sK + ((t % STAGES) * BN + row) * ROWP;
  const __nv_bfloat16* src = p.kpool + (slot >= 0 ? (long long)slot * p.stride_ks : 0);
  const int bytes = slot >= 0 ? 16 : 0;
#pragma unroll
  for (int j = 0; j < D / 8 / PER; ++j) {
    const int c = (lc + PER * j) * 8;
    cp_async16(smem_addr(dst + c), src + c, bytes);
  }
}

// One tile of BN keys starting at position `start` on NW warps: scores (warp w: K slice w % 4, 144 columns, over
// keys [16 (w / 4), +32 / (NW / 4)); the slices' fp32 partials exchanged through `sS` once), the softmax update
// (every warp the same, over the whole tile), P (bf16, as the Triton kernel rounds it) times the tile's latent
// columns 512 / NW w .. +512 / NW. Ends with every warp past its reads of `sS`; the caller's next block barrier
// guards the tile's buffer.
template <int NW>
__device__ __forceinline__ void tile_step(State<NW>& st, const __nv_bfloat16* tile, const uint32_t (&qa)[KSTEPS][4],
                                          float* sS, int start, int hi, float scale_log2, int warp, int lane) {
  constexpr int QN = 16 / NW;  // key n-tiles of this warp's scores: 4 (4 warps) or 2 (8 warps)
  const int g = lane >> 2, c = lane & 3;
  const int kbase = (warp >> 2) * QN * 8;
  float s[4][4];
#pragma unroll
  for (int i = 0; i < QN; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    const int k0 = (warp & 3) * (D / KSLICES) + 16 * kk;
#pragma unroll
    for (int np = 0; np < QN / 2; ++np) {  // key n-tiles 2 np and 2 np + 1 of this warp's keys
      const int key = kbase + (2 * np + (lane >> 4)) * 8 + (lane & 7);
      uint32_t b0, b1, b2, b3;
      ldsm_x4(smem_addr(tile + key * ROWP + k0 + ((lane >> 3) & 1) * 8), b0, b1, b2, b3);
      mma(s[2 * np], qa[kk], b0, b1);
      mma(s[2 * np + 1], qa[kk], b2, b3);
    }
  }
  float* mine = sS + (warp & 3) * 16 * SROW + kbase;
#pragma unroll
  for (int nt = 0; nt < QN; ++nt) {
    *reinterpret_cast<float2*>(mine + g * SROW + nt * 8 + 2 * c) = make_float2(s[nt][0], s[nt][1]);
    *reinterpret_cast<float2*>(mine + (g + 8) * SROW + nt * 8 + 2 * c) = make_float2(s[nt][2], s[nt][3]);
  }
  __syncthreads();  // every warp's partial written
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    float2 lo2 = make_float2(0.f, 0.f), hi2 = make_float2(0.f, 0.f);
#pragma unroll
    for (int w = 0; w < KSLICES; ++w) {
      const float2 a = *reinterpret_cast<const float2*>(sS + w * 16 * SROW + g * SROW + nt * 8 + 2 * c);
      const float2 e = *reinterpret_cast<const float2*>(sS + w * 16 * SROW + (g + 8) * SROW + nt * 8 + 2 * c);
      lo2.x += a.x; lo2.y += a.y; hi2.x += e.x; hi2.y += e.y;
    }
    const int pos = start + nt * 8 + 2 * c;
    s[nt][0] = pos < hi ? lo2.x * scale_log2 : -INFINITY;
    s[nt][1] = pos + 1 < hi ? lo2.y * scale_log2 : -INFINITY;
    s[nt][2] = pos < hi ? hi2.x * scale_log2 : -INFINITY;
    s[nt][3] = pos + 1 < hi ? hi2.y * scale_log2 : -INFINITY;
  }
  softmax_update(st, s);
  pv_product(st, s, tile, warp, lane);
}

// Loads by every thread: cp.async, 16 bytes a copy, on NW warps; each thread's slot for the tile AHEAD tiles past
// the one it issues is loaded AHEAD tiles early (a register ring; 1: the form run on the H100 on 2026-12-06, where
// a 32-key tile's compute is all that hides the slot's round trip under a saturated memory system).
template <int NW, int AHEAD, bool LINES = false, bool CLUSTER = false>
__device__ __forceinline__ void decode_cp(const Params& p, unsigned char* smem) {
  constexpr int T = 32 * NW;
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  float* sS = reinterpret_cast<float*>(smem + STAGES * BN * ROWP * 2);  // KSLICES x 16 x SROW
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.x;
  const long long b = blockIdx.y;
  const Split sp = split_of(p, b, split);
  const int lrow = LINES ? lane : tid / (T / BN);  // the tile row whose slot this thread loads
  auto slot_at = [&](int t) {
    const int pos = sp.lo + t * BN + lrow;
    return (t < sp.ntiles && pos < sp.hi) ? ld_cg(sp.table + pos) : -1;
  };
  auto copy = [&](int t, int slot) {
    if constexpr (LINES) copy_lines<BN, NW>(p, sK + (t % STAGES) * BN * ROWP, slot, 0, warp, lane);
    else issue_tile<T>(p, sK, t, slot, tid);
  };
  int first[STAGES - 1], ring[AHEAD];
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) first[t] = slot_at(t);
#pragma unroll
  for (int k = 0; k < AHEAD; ++k) ring[k] = slot_at(STAGES - 1 + k);  // metadata: written before this forward
  const bool early = min(sp.hi, sp.lo + (STAGES - 1) * BN) <= sp.kv;
  if (early) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
      if (t < sp.ntiles) copy(t, first[t]);
      cp_commit();
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
      if (t < sp.ntiles) copy(t, first[t]);
      cp_commit();
    }
  }
  uint32_t qa[KSTEPS][4];
  load_queries<KSLICES>(p, b, warp, lane, qa);
  State<NW> st;
  init_state(st);
  for (int t = 0; t < sp.ntiles; ++t) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // tile t in shared memory for every thread; every warp done with tile t - 1's buffer
    const int tt = t + STAGES - 1;
    if (tt < sp.ntiles) copy(tt, ring[0]);
    cp_commit();
#pragma unroll
    for (int k = 0; k + 1 < AHEAD; ++k) ring[k] = ring[k + 1];
    ring[AHEAD - 1] = slot_at(tt + AHEAD);
    tile_step(st, sK + (t % STAGES) * BN * ROWP, qa, sS, sp.lo + t * BN, sp.hi, p.scale_log2, warp, lane);
  }
  cp_wait<0>();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if constexpr (CLUSTER) cluster_merge(p, st, b, warp, lane, smem);
  else write_partial(p, st, b, split, warp, lane);
}

extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4[];
  decode_cp<4, 1>(p, smem_c4);
}

// The slots 2 / 3 tiles ahead, and eight warps (two a scheduler) with every thread's copies (after the first
// H100 timing of the others; no faster).
extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_a2(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4a2[];
  decode_cp<4, 2>(p, smem_c4a2);
}

extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_a3(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4a3[];
  decode_cp<4, 3>(p, smem_c4a3);
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_w8(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c8[];
  decode_cp<8, 1>(p, smem_c8);
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_w8a3(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c8a3[];
  decode_cp<8, 3>(p, smem_c8a3);
}

// The copies a warp instruction to four whole lines (`copy_lines`), on 4 warps and on 8.
extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_ln(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4ln[];
  decode_cp<4, 1, true>(p, smem_c4ln);
}

extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_a3ln(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4a3ln[];
  decode_cp<4, 3, true>(p, smem_c4a3ln);
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_w8a3ln(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c8a3ln[];
  decode_cp<8, 3, true>(p, smem_c8a3ln);
}

// `_a3ln` (which tied the Triton kernel at bs 8 / 8k) with the split merge on its cluster (`cluster_merge`).
extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_a3ln_cl(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_c4a3lncl[];
  decode_cp<4, 3, true, true>(p, smem_c4a3lncl);
}

// ---- the same kernel with the copy engine's bulk copies (TMA, non-tensor): one 1152-byte copy a row, issued by
// warp 0's lane r for row r, completion counted on the stage's mbarrier (expect_tx); the compute warps issue no
// per-16-byte copies. Rows past the split copy the tile's first row (finite; their weights are 0). Written after
// the first kernel's H100 run; timed on 2026-12-06: 40-75% slower streaming.

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  for (long long spins = 0; !done; ++spins) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (spins > (1ll << 22)) __trap();  // a lost copy fails the launch instead of hanging it
  }
}

__device__ __forceinline__ void bulk_row(uint32_t dst, const void* src, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "n"(D * 2), "r"(bar)
               : "memory");
}

// Warp 0: tile t into stage t % STAGES (lane r copies row r from pool slot `slot`).
__device__ __forceinline__ void bulk_tile(const Params& p, __nv_bfloat16* sK, uint32_t bars, int t, int slot, int lane) {
  const int stage = t % STAGES;
  const uint32_t bar = bars + 8 * stage;
  if (lane == 0) mbar_expect(bar, BN * D * 2);
  __syncwarp();
  bulk_row(smem_addr(sK + (stage * BN + lane) * ROWP), p.kpool + (long long)slot * p.stride_ks, bar);
}

template <int NW>
__device__ __forceinline__ void decode_bulk(const Params& p, unsigned char* smem) {
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  float* sS = reinterpret_cast<float*>(smem + STAGES * BN * ROWP * 2);
  const uint32_t bars = smem_addr(sS + KSLICES * 16 * SROW);  // STAGES mbarriers, 8 bytes each
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.x;
  const long long b = blockIdx.y;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const Split sp = split_of(p, b, split);
  // warp 0 lane r: the slot of row r of a tile (past the split: the tile's first row, a finite row weighed 0)
  auto slot_of = [&](int t) {
    const int pos = sp.lo + t * BN + lane;
    return ld_cg(sp.table + (pos < sp.hi ? pos : sp.lo + t * BN));
  };
  const bool early = min(sp.hi, sp.lo + (STAGES - 1) * BN) <= sp.kv;
  int first[STAGES - 1];
  if (warp == 0) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) first[t] = t < sp.ntiles ? slot_of(t) : 0;
    if (early) {
#pragma unroll
      for (int t = 0; t < STAGES - 1; ++t)
        if (t < sp.ntiles) bulk_tile(p, sK, bars, t, first[t], lane);
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (warp == 0 && !early) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t)
      if (t < sp.ntiles) bulk_tile(p, sK, bars, t, first[t], lane);
  }
  uint32_t qa[KSTEPS][4];
  load_queries<KSLICES>(p, b, warp, lane, qa);
  State<NW> st;
  init_state(st);
  int slot_next = (warp == 0 && STAGES - 1 < sp.ntiles) ? slot_of(STAGES - 1) : 0;
  for (int t = 0; t < sp.ntiles; ++t) {
    __syncthreads();  // every warp done with tile t - 1's stage, which tile t + STAGES - 1 refills
    if (warp == 0) {
      const int tt = t + STAGES - 1;
      if (tt < sp.ntiles) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bulk_tile(p, sK, bars, tt, slot_next, lane);
        slot_next = tt + 1 < sp.ntiles ? slot_of(tt + 1) : 0;
      }
    }
    mbar_wait(bars + 8 * (t % STAGES), (t / STAGES) & 1);
    tile_step(st, sK + (t % STAGES) * BN * ROWP, qa, sS, sp.lo + t * BN, sp.hi, p.scale_log2, warp, lane);
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  write_partial(p, st, b, split, warp, lane);
}

extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16_bulk(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_b4[];
  decode_bulk<4>(p, smem_b4);
}

// Eight warps (two a scheduler, to hide the loop's latencies): warp w scores keys 16 (w / 4) .. +16 over K slice
// w % 4 and owns 64 output columns.
extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_bulk8(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_b8[];
  decode_bulk<8>(p, smem_b8);
}

#include "mla_k64.cuh"
