// What every kernel of the MLA decode probe shares (`mla_decode.cu`, `mla_k64.cuh`): DeepSeek-V2-Lite's
// shape, the launch parameters, the PTX wrappers, the split's range, the online-softmax state and the
// partial's store.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#define H 16
#define DV 512
#define D 576
#define BN 32
#ifndef STAGES  // the probe also builds 5 (-DSTAGES=5: 128 keys in flight, the Triton loop's)
#define STAGES 4
#endif
#define ROWP 584
#define KSLICES 4  // the QK product's K split over the warps (warp % 4); 8 warps also split the keys in halves
#define KSTEPS 9   // 16-column k-steps of a warp's 144-column share of the QK product
#define SROW 36   // padded fp32 row of a warp's score partial (32 keys)

struct Params {
  const __nv_bfloat16* q;
  const __nv_bfloat16* kpool;
  float* mid_o;
  float* mid_lse;
  const int* req_to_token;
  const long long* req_pool_idx;
  const int* seq_lens;
  long long stride_qt, stride_qh, stride_ks, stride_rt, stride_mt, stride_mh, stride_ms, stride_lt, stride_lh;
  int num_splits;
  int min_split;
  int split_block;
  float scale_log2;
  __nv_bfloat16* out;  // [T, H, DV]: the cluster forms write the merged rows themselves (the others ignore it)
  long long stride_ot, stride_oh;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ int ld_cg(const int* p) {
  int v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ long long ld_cg64(const long long* p) {
  long long v;
  asm volatile("ld.global.cg.s64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A tile's ROWS rows (32 or 64) into shared memory at `base` on NW warps, each warp instruction on four whole
// 128-byte lines (eight lanes a line, in row order: a row is nine lines). Copying 64 bytes of each of eight rows an
// instruction instead asks for every line twice; it streamed 6% slower on the H100 (2026-12-07). Lane l holds the
// pool slots of rows l (`slot_lo`) and l + 32 (`slot_hi`, 64-row tiles; -1: past the split, zero-filled),
// shuffled to the lanes copying each row.
template <int ROWS, int NW>
__device__ __forceinline__ void copy_lines(const Params& p, __nv_bfloat16* base, int slot_lo, int slot_hi, int warp,
                                           int lane) {
  constexpr int LINES = D * 2 / 128;
  constexpr int PER_WARP = ROWS * LINES / 4 / NW;  // copy instructions a warp: 18 (32 rows, 4 warps), 9, 18 (64, 8)
#pragma unroll
  for (int j = 0; j < PER_WARP; ++j) {
    const int line = (warp * PER_WARP + j) * 4 + (lane >> 3);
    const int row = line / LINES, c = (line % LINES) * 64 + (lane & 7) * 8;
    int slot;
    if constexpr (ROWS > 32) {
      const int lo = __shfl_sync(0xffffffffu, slot_lo, row & 31), hi = __shfl_sync(0xffffffffu, slot_hi, row & 31);
      slot = row < 32 ? lo : hi;
    } else {
      slot = __shfl_sync(0xffffffffu, slot_lo, row);
    }
    const __nv_bfloat16* src = p.kpool + (slot >= 0 ? (long long)slot * p.stride_ks : 0) + c;
    cp_async16(smem_addr(base + row * ROWP + c), src, slot >= 0 ? 16 : 0);
  }
}

// This warp's query fragments over its share of K, slice ks = warp % KS of KS (a power of two; D / KS columns,
// D / KS / 16 k-steps): heads g / g + 8, columns (D / KS) ks + 16 kk + {2c, 2c + 1, 2c + 8, 2c + 9}.
template <int KS>
__device__ __forceinline__ void load_queries(const Params& p, long long b, int warp, int lane,
                                             uint32_t (&qa)[D / KS / 16][4]) {
  const int g = lane >> 2, c = lane & 3;
  const __nv_bfloat16* q0 = p.q + b * p.stride_qt + g * p.stride_qh + (warp & (KS - 1)) * (D / KS) + 2 * c;
  const __nv_bfloat16* q1 = q0 + 8 * p.stride_qh;
#pragma unroll
  for (int kk = 0; kk < D / KS / 16; ++kk) {
    qa[kk][0] = *reinterpret_cast<const uint32_t*>(q0 + 16 * kk);
    qa[kk][1] = *reinterpret_cast<const uint32_t*>(q1 + 16 * kk);
    qa[kk][2] = *reinterpret_cast<const uint32_t*>(q0 + 16 * kk + 8);
    qa[kk][3] = *reinterpret_cast<const uint32_t*>(q1 + 16 * kk + 8);
  }
}

// The split's range [lo, hi) of request b (the Triton kernels' `split_len`), from metadata written before this
// forward began.
struct Split {
  int lo, hi, kv, ntiles;
  const int* table;
};

__device__ __forceinline__ Split split_of(const Params& p, long long b, int split) {
  const int seq = ld_cg(p.seq_lens + b);
  const long long rpi = ld_cg64(p.req_pool_idx + b);
  int span = (seq + p.num_splits - 1) / p.num_splits;
  span = (span + p.split_block - 1) / p.split_block * p.split_block;
  span = max(span, p.min_split);
  Split s;
  s.lo = split * span;
  s.hi = min(s.lo + span, seq);
  s.kv = max(seq - 1, 0);  // positions before it were stored by earlier forwards
  s.ntiles = s.hi > s.lo ? (s.hi - s.lo + BN - 1) / BN : 0;
  s.table = p.req_to_token + rpi * p.stride_rt;
  return s;
}

// Online-softmax state of rows g and g + 8 (the same in every warp) and this warp's 512 / NW output columns.
template <int NW>
struct State {
  float m[2], l[2];
  float acc[64 / NW][4];
};

// The online-softmax update of rows g and g + 8 over a tile's NT key n-tiles of scores `s` (log2 units, -inf where
// masked; every warp holds the whole tile): the running max and sum, this warp's accumulators rescaled, and `s`
// turned into the tile's weights (P).
template <int NT, int NW>
__device__ __forceinline__ void softmax_update(State<NW>& st, float (&s)[NT][4]) {
  float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    tmax[0] = fmaxf(tmax[0], fmaxf(s[nt][0], s[nt][1]));
    tmax[1] = fmaxf(tmax[1], fmaxf(s[nt][2], s[nt][3]));
  }
  float alpha[2], m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
    const float m_new = fmaxf(st.m[r], tmax[r]);
    m_use[r] = m_new == -INFINITY ? 0.f : m_new;
    alpha[r] = exp2f(st.m[r] - m_use[r]);
    st.m[r] = m_new;
  }
  float rs[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - m_use[0]);
    s[nt][1] = exp2f(s[nt][1] - m_use[0]);
    s[nt][2] = exp2f(s[nt][2] - m_use[1]);
    s[nt][3] = exp2f(s[nt][3] - m_use[1]);
    rs[0] += s[nt][0] + s[nt][1];
    rs[1] += s[nt][2] + s[nt][3];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
    rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
    st.l[r] = st.l[r] * alpha[r] + rs[r];
  }
#pragma unroll
  for (int i = 0; i < 64 / NW; ++i) {
    st.acc[i][0] *= alpha[0]; st.acc[i][1] *= alpha[0];
    st.acc[i][2] *= alpha[1]; st.acc[i][3] *= alpha[1];
  }
}

// P (the tile's weights `s`, rounded to bf16 as the Triton kernel rounds them) times the tile's latent columns
// 512 / NW w .. +512 / NW into this warp's accumulators: NT / 2 k-steps of 16 keys, P as the A operand straight from
// the registers the scores were in.
template <int NT, int NW>
__device__ __forceinline__ void pv_product(State<NW>& st, const float (&s)[NT][4], const __nv_bfloat16* tile, int warp,
                                           int lane) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t pa[4];
    pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    const int key = 16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
    for (int np = 0; np < 32 / NW; ++np) {  // output n-tiles 2 np, 2 np + 1 of this warp's columns
      const int col = warp * (DV / NW) + np * 16 + (lane >> 4) * 8;
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(smem_addr(tile + key * ROWP + col), b0, b1, b2, b3);
      mma(st.acc[2 * np], pa, b0, b1);
      mma(st.acc[2 * np + 1], pa, b2, b3);
    }
  }
}


// Row r's (0: g, 1: g + 8) factor from the accumulators to the split's normalised partial, and its log2-sum-exp
// (0 and -inf for a row the split gave no key).
template <int NW>
__device__ __forceinline__ float row_inv(const State<NW>& st, int r) { return st.l[r] > 0.f ? 1.f / st.l[r] : 0.f; }

template <int NW>
__device__ __forceinline__ float row_lse(const State<NW>& st, int r) {
  return st.l[r] > 0.f ? st.m[r] + log2f(st.l[r]) : -INFINITY;
}

// The split's normalised partial and log2-sum-exp, as the Triton kernels' `store_rows` writes them.
template <int NW>
__device__ __forceinline__ void write_partial(const Params& p, const State<NW>& st, long long b, int split, int warp,
                                              int lane) {
  const int g = lane >> 2, c = lane & 3;
  const float inv0 = row_inv(st, 0), inv1 = row_inv(st, 1);
  float* o0 = p.mid_o + b * p.stride_mt + g * p.stride_mh + split * p.stride_ms + warp * (DV / NW) + 2 * c;
  float* o1 = o0 + 8 * p.stride_mh;
#pragma unroll
  for (int nt = 0; nt < 64 / NW; ++nt) {
    *reinterpret_cast<float2*>(o0 + nt * 8) = make_float2(st.acc[nt][0] * inv0, st.acc[nt][1] * inv0);
    *reinterpret_cast<float2*>(o1 + nt * 8) = make_float2(st.acc[nt][2] * inv1, st.acc[nt][3] * inv1);
  }
  if (warp == 0 && c == 0) {
    float* lse = p.mid_lse + b * p.stride_lt + split;
    lse[g * p.stride_lh] = row_lse(st, 0);
    lse[(g + 8) * p.stride_lh] = row_lse(st, 1);
  }
}

template <int NW>
__device__ __forceinline__ void init_state(State<NW>& st) {
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;
#pragma unroll
  for (int i = 0; i < 64 / NW; ++i) st.acc[i][0] = st.acc[i][1] = st.acc[i][2] = st.acc[i][3] = 0.f;
}

// ---- the split merge inside the launch, on a thread-block cluster (the `_cl` entry points, written 2026-12-07: the
// merge launch after the decode is part of the ~12 us that bs 8 / 8k pays beside its streaming, and the in-launch
// merge on global counters tied it). The launch groups a request's splits into one cluster (cluster size S =
// num_splits <= 16, any S; an H100 holds seven clusters of 9-16 CTAs at once, so bs 8 at more than 8 splits runs in
// two waves, and at 8 or fewer half its SMs stream: slower either way, results/2026-12-07-h100-mla-cluster/):
// each CTA leaves its normalised partial and log2-sum-exp in its own shared memory, the cluster barrier makes them
// visible, every CTA weighs all 16 heads' splits, and CTA r merges its share of the 16 x 128 four-column groups
// (r * ceil(2048 / S) onwards, heads running on) from every CTA's shared memory (DSMEM) into the bf16 output. A
// second barrier keeps each CTA's shared memory alive until the cluster's reads of it are done. No partials in
// global memory, no merge launch.
#define PPITCH 520  // fp32 row pitch of a partial in shared memory: a half-warp's float2 stores in distinct banks

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster: writes before it visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared::cluster address of this CTA's shared::cta address `addr` in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

__device__ __forceinline__ float ld_dsmem(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float4 ld_dsmem4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr) : "memory");
  return v;
}

// After the loop (every copy waited for): the split's partial into this CTA's shared memory, over the stage
// buffers, then this CTA's share of the cluster's merge (the block comment above). A split without keys weighs 0; a
// row no split saw gets 0, as `merge_splits` gives it.
template <int NW>
__device__ __forceinline__ void cluster_merge(const Params& p, const State<NW>& st, long long b, int warp, int lane,
                                              unsigned char* smem) {
  constexpr int T = 32 * NW;
  float* part = reinterpret_cast<float*>(smem);  // H x PPITCH
  float* lse = part + H * PPITCH;                // H
  float* wts = lse + H;                          // H x S: the lse, then the normalised weights
  const int g = lane >> 2, c = lane & 3, tid = threadIdx.x;
  __syncthreads();  // every warp done with the last tile's stage, which the partial overwrites
  const float inv0 = row_inv(st, 0), inv1 = row_inv(st, 1);
#pragma unroll
  for (int nt = 0; nt < 64 / NW; ++nt) {
    const int col = warp * (DV / NW) + nt * 8 + 2 * c;
    *reinterpret_cast<float2*>(part + g * PPITCH + col) = make_float2(st.acc[nt][0] * inv0, st.acc[nt][1] * inv0);
    *reinterpret_cast<float2*>(part + (g + 8) * PPITCH + col) = make_float2(st.acc[nt][2] * inv1, st.acc[nt][3] * inv1);
  }
  if (warp == 0 && c == 0) {
    lse[g] = row_lse(st, 0);
    lse[g + 8] = row_lse(st, 1);
  }
  cluster_sync();  // every CTA's partial and lse written, visible to the cluster
  const int S = cluster_size();
  for (int i = tid; i < H * S; i += T) wts[i] = ld_dsmem(map_rank(smem_addr(lse + i / S), i % S));
  __syncthreads();
  if (tid < H) {
    float mx = -INFINITY, den = 0.f;
    for (int s = 0; s < S; ++s) mx = fmaxf(mx, wts[tid * S + s]);
    for (int s = 0; s < S; ++s) {
      const float l = wts[tid * S + s];
      const float w = l == -INFINITY ? 0.f : exp2f(l - mx);
      wts[tid * S + s] = w;
      den += w;
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
    for (int s = 0; s < S; ++s) wts[tid * S + s] *= inv;
  }
  __syncthreads();
  constexpr int GROUPS = H * (DV / 4);  // four columns of one head a group
  const int share = (GROUPS + S - 1) / S, end = min(GROUPS, (int)cluster_rank() * share + share);
  for (int i = cluster_rank() * share + tid; i < end; i += T) {
    const int hh = i / (DV / 4), col = (i % (DV / 4)) * 4;
    const uint32_t local = smem_addr(part + hh * PPITCH + col);
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < 16; ++s) {
      if (s < S) {
        const float4 v = ld_dsmem4(map_rank(local, s));
        const float w = wts[hh * S + s];
        o.x += w * v.x; o.y += w * v.y; o.z += w * v.z; o.w += w * v.w;
      }
    }
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(p.out + b * p.stride_ot + hh * p.stride_oh + col);
    dst[0] = __floats2bfloat162_rn(o.x, o.y);
    dst[1] = __floats2bfloat162_rn(o.z, o.w);
  }
  cluster_sync();  // no CTA leaves while another still reads its shared memory
}
