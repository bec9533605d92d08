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
// Output: the split's normalised partial [16, 512] fp32 and its log2-sum-exp, as `store_rows` writes them
// (a split without keys writes zeros and -inf); the Triton merge launch (`merge_splits(written=True)`)
// combines them. Rows are padded to 584 bf16 in shared memory (1168 B: eight rows at one column fall in
// distinct banks for ldmatrix).
#include <cuda_bf16.h>
#include <stdint.h>

#define H 16
#define DV 512
#define D 576
#define BN 32
#define STAGES 4
#define ROWP 584
#define NWARPS 4
#define KSTEPS 9  // 16-column k-steps of a warp's 144-column share of the QK product
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

// Tile t's rows into stage buffer t % STAGES: thread `tid` copies row tid / 4 (its pool slot `slot`,
// -1: past the split, zero-filled), 16-byte chunks tid % 4 + 4 j.
__device__ __forceinline__ void issue_tile(const Params& p, __nv_bfloat16* sK, int t, int slot, int tid) {
  const int row = tid >> 2, lc = tid & 3;
  __nv_bfloat16* dst = sK + ((t % STAGES) * BN + row) * ROWP;
  const __nv_bfloat16* src = p.kpool + (slot >= 0 ? (long long)slot * p.stride_ks : 0);
  const int bytes = slot >= 0 ? 16 : 0;
#pragma unroll
  for (int j = 0; j < D / 8 / 4; ++j) {
    const int c = (lc + 4 * j) * 8;
    cp_async16(smem_addr(dst + c), src + c, bytes);
  }
}

extern "C" __global__ void __launch_bounds__(128, 1) mla_decode_h16(const Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  float* sS = reinterpret_cast<float*>(smem + STAGES * BN * ROWP * 2);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const int split = blockIdx.x;
  const long long b = blockIdx.y;

  // metadata and cached rows: safe before the wait (see the header)
  const int seq = ld_cg(p.seq_lens + b);
  const long long rpi = ld_cg64(p.req_pool_idx + b);
  int span = (seq + p.num_splits - 1) / p.num_splits;
  span = (span + p.split_block - 1) / p.split_block * p.split_block;
  span = max(span, p.min_split);
  const int lo = split * span, hi = min(lo + span, seq);
  const int kv = max(seq - 1, 0);
  const int ntiles = hi > lo ? (hi - lo + BN - 1) / BN : 0;
  const int* table = p.req_to_token + rpi * p.stride_rt;
  const int lrow = tid >> 2;

  int first[STAGES - 1];
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    const int pos = lo + t * BN + lrow;
    first[t] = (t < ntiles && pos < hi) ? ld_cg(table + pos) : -1;
  }
  const bool early = min(hi, lo + (STAGES - 1) * BN) <= kv;
  if (early) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
      if (t < ntiles) issue_tile(p, sK, t, first[t], tid);
      cp_commit();
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) {
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
      if (t < ntiles) issue_tile(p, sK, t, first[t], tid);
      cp_commit();
    }
  }

  // this warp's query fragments: heads g / g + 8, columns warp * 144 + 16 kk + {2c, 2c + 1, 2c + 8, 2c + 9}
  uint32_t qa[KSTEPS][4];
  {
    const __nv_bfloat16* q0 = p.q + b * p.stride_qt + g * p.stride_qh + warp * (D / NWARPS) + 2 * c;
    const __nv_bfloat16* q1 = q0 + 8 * p.stride_qh;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      qa[kk][0] = *reinterpret_cast<const uint32_t*>(q0 + 16 * kk);
      qa[kk][1] = *reinterpret_cast<const uint32_t*>(q1 + 16 * kk);
      qa[kk][2] = *reinterpret_cast<const uint32_t*>(q0 + 16 * kk + 8);
      qa[kk][3] = *reinterpret_cast<const uint32_t*>(q1 + 16 * kk + 8);
    }
  }

  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
  float acc[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  int slot_next;
  {
    const int pos = lo + (STAGES - 1) * BN + lrow;
    slot_next = (STAGES - 1 < ntiles && pos < hi) ? table[pos] : -1;
  }

  for (int t = 0; t < ntiles; ++t) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // tile t in shared memory for every thread; every warp done with tile t - 1's buffer
    {
      const int tt = t + STAGES - 1;
      if (tt < ntiles) issue_tile(p, sK, tt, slot_next, tid);
      cp_commit();
      const int pos = lo + (tt + 1) * BN + lrow;
      slot_next = (tt + 1 < ntiles && pos < hi) ? table[pos] : -1;
    }
    const __nv_bfloat16* tile = sK + (t % STAGES) * BN * ROWP;

    // scores of this warp's 144 columns, 4 n-tiles of 8 keys
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int k0 = warp * (D / NWARPS) + 16 * kk;
#pragma unroll
      for (int np = 0; np < 2; ++np) {  // key n-tiles 2 np and 2 np + 1
        const int key = (2 * np + (lane >> 4)) * 8 + (lane & 7);
        uint32_t b0, b1, b2, b3;
        ldsm_x4(smem_addr(tile + key * ROWP + k0 + ((lane >> 3) & 1) * 8), b0, b1, b2, b3);
        mma(s[2 * np], qa[kk], b0, b1);
        mma(s[2 * np + 1], qa[kk], b2, b3);
      }
    }
    float* mine = sS + warp * 16 * SROW;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      *reinterpret_cast<float2*>(mine + g * SROW + nt * 8 + 2 * c) = make_float2(s[nt][0], s[nt][1]);
      *reinterpret_cast<float2*>(mine + (g + 8) * SROW + nt * 8 + 2 * c) = make_float2(s[nt][2], s[nt][3]);
    }
    __syncthreads();  // every warp's partial written
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      float2 lo2 = make_float2(0.f, 0.f), hi2 = make_float2(0.f, 0.f);
#pragma unroll
      for (int w = 0; w < NWARPS; ++w) {
        const float2 a = *reinterpret_cast<const float2*>(sS + w * 16 * SROW + g * SROW + nt * 8 + 2 * c);
        const float2 e = *reinterpret_cast<const float2*>(sS + w * 16 * SROW + (g + 8) * SROW + nt * 8 + 2 * c);
        lo2.x += a.x; lo2.y += a.y; hi2.x += e.x; hi2.y += e.y;
      }
      const int pos = lo + t * BN + nt * 8 + 2 * c;
      s[nt][0] = pos < hi ? lo2.x * p.scale_log2 : -INFINITY;
      s[nt][1] = pos + 1 < hi ? lo2.y * p.scale_log2 : -INFINITY;
      s[nt][2] = pos < hi ? hi2.x * p.scale_log2 : -INFINITY;
      s[nt][3] = pos + 1 < hi ? hi2.y * p.scale_log2 : -INFINITY;
      tmax[0] = fmaxf(tmax[0], fmaxf(s[nt][0], s[nt][1]));
      tmax[1] = fmaxf(tmax[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
      const float m_new = fmaxf(m_r[r], tmax[r]);
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = exp2f(m_r[r] - m_use[r]);
      m_r[r] = m_new;
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
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
      l_r[r] = l_r[r] * alpha[r] + rs[r];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      acc[i][0] *= alpha[0]; acc[i][1] *= alpha[0];
      acc[i][2] *= alpha[1]; acc[i][3] *= alpha[1];
    }
    // P (bf16, as the Triton kernel rounds it) as the A operand of two 16-key k-steps
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int key = 16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < 8; ++np) {  // output n-tiles 2 np, 2 np + 1 of this warp's 128 columns
        const int col = warp * 128 + np * 16 + (lane >> 4) * 8;
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(smem_addr(tile + key * ROWP + col), b0, b1, b2, b3);
        mma(acc[2 * np], pa, b0, b1);
        mma(acc[2 * np + 1], pa, b2, b3);
      }
    }
  }
  cp_wait<0>();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  const float inv0 = l_r[0] > 0.f ? 1.f / l_r[0] : 0.f, inv1 = l_r[1] > 0.f ? 1.f / l_r[1] : 0.f;
  float* o0 = p.mid_o + b * p.stride_mt + g * p.stride_mh + split * p.stride_ms + warp * 128 + 2 * c;
  float* o1 = o0 + 8 * p.stride_mh;
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
    *reinterpret_cast<float2*>(o0 + nt * 8) = make_float2(acc[nt][0] * inv0, acc[nt][1] * inv0);
    *reinterpret_cast<float2*>(o1 + nt * 8) = make_float2(acc[nt][2] * inv1, acc[nt][3] * inv1);
  }
  if (warp == 0 && c == 0) {
    float* lse = p.mid_lse + b * p.stride_lt + split;
    lse[g * p.stride_lh] = l_r[0] > 0.f ? m_r[0] + log2f(l_r[0]) : -INFINITY;
    lse[(g + 8) * p.stride_lh] = l_r[1] > 0.f ? m_r[1] + log2f(l_r[1]) : -INFINITY;
  }
}
