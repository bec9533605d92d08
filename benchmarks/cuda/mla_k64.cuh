// The 64-key-tile MLA decode (`mla_decode_h16_k64`); built inside `mla_decode.cu`, after its 32-key forms.
#pragma once
#include "mla_common.cuh"

// ---- 64-key tiles (written 2026-12-07, after `_ln` tied the Triton kernel at bs 8 / 8k with 32-key tiles but
// streamed ~5% slower): three stages of 64 keys (Triton's tile and depth: 128 keys in flight) and two block barriers
// a 64-key tile, half the 32-key forms' rate. Eight warps: warp w scores keys 16 (w / 2) .. +16 over K half w % 2
// (288 columns, 18 k-steps; its query fragments in 72 registers), the halves' fp32 scores are exchanged once through
// an 8 KB buffer (rows of 64 keys, the key's 8-key group XOR-ed with the row's low three bits: a half-warp's float2
// accesses fall in distinct banks), every warp runs the softmax over the whole tile and owns 64 output columns.
// Shared memory: 3 x 64 x 1168 + 8192 = 232,448 bytes, the H100's per-block limit.
#define BN64 64
#define ST64 3
#define KH 2             // K halves
#define KSTEPS64 18      // 16-column k-steps of a warp's 288-column half

__device__ __forceinline__ int sswz(int row, int key) { return row * BN64 + (key ^ ((row & 7) << 3)); }

__device__ __forceinline__ void tile_step64(State<8>& st, const __nv_bfloat16* tile, const uint32_t (&qa)[KSTEPS64][4],
                                            float* sS, int start, int hi, float scale_log2, int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
  const int kbase = (warp >> 1) * 16;
  float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int kk = 0; kk < KSTEPS64; ++kk) {
    const int k0 = (warp & 1) * (D / KH) + 16 * kk;
    const int key = kbase + (lane >> 4) * 8 + (lane & 7);
    uint32_t b0, b1, b2, b3;
    ldsm_x4(smem_addr(tile + key * ROWP + k0 + ((lane >> 3) & 1) * 8), b0, b1, b2, b3);
    mma(s2[0], qa[kk], b0, b1);
    mma(s2[1], qa[kk], b2, b3);
  }
  float* mine = sS + (warp & 1) * 16 * BN64;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int key = kbase + nt * 8 + 2 * c;
    *reinterpret_cast<float2*>(mine + sswz(g, key)) = make_float2(s2[nt][0], s2[nt][1]);
    *reinterpret_cast<float2*>(mine + sswz(g + 8, key)) = make_float2(s2[nt][2], s2[nt][3]);
  }
  __syncthreads();  // both halves' partials written
  float s[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int key = nt * 8 + 2 * c;
    const float2 a0 = *reinterpret_cast<const float2*>(sS + sswz(g, key));
    const float2 a1 = *reinterpret_cast<const float2*>(sS + 16 * BN64 + sswz(g, key));
    const float2 e0 = *reinterpret_cast<const float2*>(sS + sswz(g + 8, key));
    const float2 e1 = *reinterpret_cast<const float2*>(sS + 16 * BN64 + sswz(g + 8, key));
    const int pos = start + key;
    s[nt][0] = pos < hi ? (a0.x + a1.x) * scale_log2 : -INFINITY;
    s[nt][1] = pos + 1 < hi ? (a0.y + a1.y) * scale_log2 : -INFINITY;
    s[nt][2] = pos < hi ? (e0.x + e1.x) * scale_log2 : -INFINITY;
    s[nt][3] = pos + 1 < hi ? (e0.y + e1.y) * scale_log2 : -INFINITY;
  }
  softmax_update(st, s);
  pv_product(st, s, tile, warp, lane);
}

template <bool CLUSTER>
__device__ __forceinline__ void decode_k64(const Params& p, unsigned char* smem_k64) {
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_k64);
  float* sS = reinterpret_cast<float*>(smem_k64 + ST64 * BN64 * ROWP * 2);  // KH x 16 x 64
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.x;
  const long long b = blockIdx.y;
  // the 64-key tile count: the split's keys over BN64 (split_of counts 32-key tiles)
  const Split sp = split_of(p, b, split);
  const int ntiles = sp.hi > sp.lo ? (sp.hi - sp.lo + BN64 - 1) / BN64 : 0;
  auto slot_at = [&](int t, int row) {
    const int pos = sp.lo + t * BN64 + row;
    return (t < ntiles && pos < sp.hi) ? ld_cg(sp.table + pos) : -1;
  };
  auto copy = [&](int t, int slot_lo, int slot_hi) {  // tile t into stage t % ST64: 18 instructions a warp
    copy_lines<BN64, 8>(p, sK + (t % ST64) * BN64 * ROWP, slot_lo, slot_hi, warp, lane);
  };
  int first_lo[ST64 - 1], first_hi[ST64 - 1];
#pragma unroll
  for (int t = 0; t < ST64 - 1; ++t) {
    first_lo[t] = slot_at(t, lane);
    first_hi[t] = slot_at(t, lane + 32);
  }
  int next_lo = slot_at(ST64 - 1, lane), next_hi = slot_at(ST64 - 1, lane + 32);
  const bool early = min(sp.hi, sp.lo + (ST64 - 1) * BN64) <= sp.kv;
  if (early) {
#pragma unroll
    for (int t = 0; t < ST64 - 1; ++t) {
      if (t < ntiles) copy(t, first_lo[t], first_hi[t]);
      cp_commit();
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) {
#pragma unroll
    for (int t = 0; t < ST64 - 1; ++t) {
      if (t < ntiles) copy(t, first_lo[t], first_hi[t]);
      cp_commit();
    }
  }
  uint32_t qa[KSTEPS64][4];
  load_queries<KH>(p, b, warp, lane, qa);
  State<8> st;
  init_state(st);
  for (int t = 0; t < ntiles; ++t) {
    cp_wait<ST64 - 2>();
    __syncthreads();  // tile t in shared memory for every thread; every warp done with tile t - 1 and its scores
    const int tt = t + ST64 - 1;
    if (tt < ntiles) copy(tt, next_lo, next_hi);
    cp_commit();
    next_lo = slot_at(tt + 1, lane);
    next_hi = slot_at(tt + 1, lane + 32);
    tile_step64(st, sK + (t % ST64) * BN64 * ROWP, qa, sS, sp.lo + t * BN64, sp.hi, p.scale_log2, warp, lane);
  }
  cp_wait<0>();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if constexpr (CLUSTER) cluster_merge(p, st, b, warp, lane, smem_k64);
  else write_partial(p, st, b, split, warp, lane);
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_k64(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_k64[];
  decode_k64<false>(p, smem_k64);
}

// The split merge on the request's cluster (`cluster_merge`, mla_common.cuh) instead of the merge launch.
extern "C" __global__ void __launch_bounds__(256, 1) mla_decode_h16_k64_cl(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_k64cl[];
  decode_k64<true>(p, smem_k64cl);
}
