/* cuda_attention.cu -- single-head attention per frame, fused (flash-style): y = softmax(s) v with
 * s = scale * q k^T, where no more than a tile of s ever exists (in registers / shared memory).
 *
 * qkv: [t][n][3c] (q = channels [0,c), k = [c,2c), v = [2c,3c) of each token row), y: [t][n][c].
 * Both kernels stream keys in tiles and keep, per query row, the running max m and sum l of
 * exp(s - m) in float32; when a tile raises m, the output accumulator and l are rescaled by
 * exp(m_old - m_new) (online softmax), and y = acc / l at the end. Keys past n are masked
 * (s = -inf); rows and channels past n and c are read as zeros (v rows too: 0 * garbage could be
 * NaN) and not written.
 *
 * mma kernel (bfloat16 / float16, c % 8 == 0, 16-byte aligned qkv): tensor cores (mma.sync
 * m16n8k16, float32 accumulation; sm_80+). 8 warps, 64 query rows, key tiles of 64. The output
 * accumulator of a row is float32 [c]: too big for one warp's registers at c = 512, so two warps
 * share 16 query rows: warp (rg, h) computes the partial scores of rows 16rg.. over half the
 * channels of each 64-channel Q / K chunk (k16 steps 2h, 2h + 1), the pair swaps them through
 * shared memory (float32, 32 KB; both get bit-identical sums), both run the same softmax, and
 * warp h accumulates output channels [h DVW, (h + 1) DVW) of the block's 2 DVW <= 512 (one block
 * column up to c = 512; at c = 1024 two, each recomputing the scores). The score fragments become
 * the A operand of P V in registers (rounded to the activation dtype, as a GEMM on stored P
 * would), so P never leaves registers. Q / K chunks and V chunks stream through one 3-stage
 * cp.async ring (a step moves 2 x [64][64]: a Q + K chunk, or the 64-channel V chunks of both
 * halves; Q is re-read from L2 for every key tile: Q[64][c] does not fit next to the ring at
 * c = 512), so the next key tile's loads overlap P V. Shared memory: 3 x 18 KB + 32 KB = 86 KB
 * for every c (padded rows: conflict-free ldmatrix), within the 99 KB of sm_86/89/120.
 * Measured on an H100 against a first version that split the output channels over blocks (and
 * so computed q k^T twice at c = 384 / 512): 0.76 vs 0.84 ms (c = 384, 6240 tokens), 4.18 vs
 * 4.67 ms (c = 512, 14040 tokens).
 *
 * softmax rows (the GEMM path of cuda_ops.c, where cuBLAS computes the scores of a block of query
 * rows and P V): p = exp(s - max) / sum over a float32 row of scores, written in the activation
 * dtype; one block of 256 threads per row. Rows of n % 4 == 0 and up to 16384 keys are read once,
 * as float4 vectors into registers (bench/attention_probe.cu, H100: 0.47 against 1.00 ms a frame at
 * 14400 keys, where a block of 1536 rows of scores outgrows the L2), others three times.
 *
 * fma kernel (everything else: float32 -- never TF32 --, or 16-bit with odd channel counts):
 * plain float32 FMA. 8 warps, 32 query rows, key tiles of 64: the scores (4 rows x 2 keys per
 * thread) from transposed 32-channel chunks of Q and K in shared memory, the softmax within a
 * warp, P^T through shared memory, then O[32][DV] (8 rows x 4*NJ channels per thread) from
 * 16-key chunks of V; DV = 256 or 512.
 */
#include <math.h>

#include "backends/cuda/kernels/cuda_common.cuh"
#include "backends/cuda/kernels/cuda_ptx.cuh"

/* ---- mma kernel ---- */
enum {
    TC_BQ = 64, /* query rows per block, 16 per row group */
    TC_BK = 64, /* keys per tile */
    TC_KD = 64, /* channels per q / k / v chunk */
    TC_STAGES = 3,
    TC_WARPS = 8, /* row group rg = warp % 4, channel half h = warp / 4 */
    TC_THREADS = 32 * TC_WARPS,
    TC_LD = TC_KD + 8, /* chunk row stride (elements): 144 bytes, so the 8 rows an ldmatrix
                        * reads fall in distinct banks */
    TC_SLOT = 2 * TC_BK * TC_LD /* elements of a ring slot: two [64][TC_LD] chunks */
};

/* shared memory bytes of att_mma_kernel (any DVW): the ring + the partial scores */
static size_t att_mma_smem(void) {
    return (size_t)TC_STAGES * TC_SLOT * 2 + (size_t)TC_WARPS * 32 * 32 * 4;
}

/* grid: (ceil(n / 64), ceil(c / (2 DVW)), frames); sl = scale * log2(e) (scores in the log2
 * domain: exp2f). Warp (rg, h) owns rows q0 + 16rg + {g, g + 8} (g = lane / 4) of the m16n8
 * fragments and output channels c0 + h DVW + [0, DVW). Steps s = j * (nd + nv)
 * + r: key tile j; r < nd: Q and K chunk r (slot [0] = Q, [1] = K); else V chunk cc = r - nd
 * (slot [h] = V[64 keys][64 channels at c0 + h DVW + 64cc]). */
template <typename T, int DVW>
static __global__ void __launch_bounds__(TC_THREADS, 1)
    att_mma_kernel(const T *qkv, T *y, int n, int c, float sl) {
    constexpr int NV = DVW / TC_KD;
    T *ring = (T *)cu_dyn_smem();                       /* [TC_STAGES][2][TC_BK][TC_LD] */
    float *red = (float *)(ring + TC_STAGES * TC_SLOT); /* [TC_WARPS][8][32 lanes][4] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rg = warp & 3, h = warp >> 2;
    const int q0 = blockIdx.x * TC_BQ, c0 = blockIdx.y * 2 * DVW, ch0 = c0 + h * DVW;
    const int64_t ld = 3 * (int64_t)c;
    const T *qf = qkv + (int64_t)blockIdx.z * n * ld;
    T *yf = y + (int64_t)blockIdx.z * n * c;
    const int nd = (c + TC_KD - 1) / TC_KD, per = nd + NV, steps = ((n + TC_BK - 1) / TC_BK) * per;

    /* step s -> slot s % TC_STAGES; rows past n and channels past c read as zeros */
    auto load = [&](int s) {
        if (s >= steps) return;
        const int j = s / per, r = s - j * per;
        T *dst = ring + (s % TC_STAGES) * TC_SLOT;
#pragma unroll
        for (int it = 0; it < 2 * TC_BK * TC_KD / 8 / TC_THREADS; it++) {
            const int i = tid + it * TC_THREADS, mat = i >> 9, row = (i >> 3) & 63;
            const int v = (i & 7) * 8;
            int kr = j * TC_BK + row, ch, off; /* source row, channel within q / k / v, column */
            if (r < nd) {
                ch = r * TC_KD + v;
                off = mat * c + ch;
                if (mat == 0) kr = q0 + row;
            } else {
                ch = c0 + mat * DVW + (r - nd) * TC_KD + v;
                off = 2 * c + ch;
            }
            const bool ok = kr < n && ch < c;
            cu_cp16(dst + (mat * TC_BK + row) * TC_LD + v, ok ? qf + kr * ld + off : qf,
                    ok ? 16 : 0);
        }
    };

    float o[DVW / 8][4]; /* O[16 rows][DVW] of this warp: n8 tiles, m16n8 accumulator layout */
#pragma unroll
    for (int i = 0; i < DVW / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g + 8 */
    /* ldmatrix row addresses of this lane (see cu_ldsm): A (Q rows, and V rows for the
     * transposed B of P V) take matrices {rows 0-7, 8-15} x {cols 0-7, 8-15} in the order of the
     * a0..a7 registers; B of Q K^T (K rows) takes {k 0-7, 8-15} of keys 0-7, then of keys 8-15. */
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;

#pragma unroll
    for (int p = 0; p < TC_STAGES - 1; p++) {
        load(p);
        cu_cp_commit();
    }
    int s = 0;
    /* start step s: its chunk has landed for everyone, slot (s - 1) % TC_STAGES is free for
     * step s + TC_STAGES - 1 (one group per step, possibly empty); returns the slot of s */
    auto begin_step = [&]() -> const T * {
        cu_cp_wait<TC_STAGES - 2>();
        __syncthreads();
        load(s + TC_STAGES - 1);
        cu_cp_commit();
        return ring + (s % TC_STAGES) * TC_SLOT;
    };
    for (int j = 0; j < steps / per; j++) {
        float sc[TC_BK / 8][4]; /* scores s[16 rows][64 keys] of row group rg */
#pragma unroll
        for (int i = 0; i < TC_BK / 8; i++)
            sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
        /* partial scores over k16 steps 2h, 2h + 1 of each chunk (half of the channels) */
        for (int dc = 0; dc < nd; dc++, s++) {
            const T *sb = begin_step();
            const T *qb = sb + (rg * 16 + a_row) * TC_LD + a_col;
            const T *kb = sb + (TC_BK + b_row) * TC_LD + b_col;
            const int kn = (min((int)TC_KD, c - dc * TC_KD) + 15) / 16; /* k16 steps with data */
#pragma unroll
            for (int k2 = 0; k2 < 2; k2++) {
                const int kk = 2 * h + k2;
                if (kk < kn) {
                    unsigned a[4];
                    cu_ldsm(a, qb + kk * 16);
#pragma unroll
                    for (int np = 0; np < TC_BK / 16; np++) {
                        unsigned b[4];
                        cu_ldsm(b, kb + np * 16 * TC_LD + kk * 16);
                        cu_mma<T>::run(sc[2 * np], a, b[0], b[1]);
                        cu_mma<T>::run(sc[2 * np + 1], a, b[2], b[3]);
                    }
                }
            }
        }
        /* the two halves of a row group swap partial scores (same fragment layout); a + b ==
         * b + a, so both warps get the same scores, maxima and P. red was last read before the
         * barriers of this tile's first step. */
        float4 *rw = (float4 *)red + warp * 8 * 32 + lane,
               *rp = (float4 *)red + (warp ^ 4) * 8 * 32 + lane;
#pragma unroll
        for (int i = 0; i < TC_BK / 8; i++)
            rw[i * 32] = make_float4(sc[i][0], sc[i][1], sc[i][2], sc[i][3]);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TC_BK / 8; i++) {
            const float4 p = rp[i * 32];
            sc[i][0] += p.x;
            sc[i][1] += p.y;
            sc[i][2] += p.z;
            sc[i][3] += p.w;
        }

        /* online softmax of this key tile; thread holds keys 8i + 2(lane % 4) + {0, 1} */
        const int kbase = j * TC_BK + 2 * (lane & 3);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int i = 0; i < TC_BK / 8; i++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = kbase + 8 * i + e < n;
                sc[i][e] = ok ? sc[i][e] * sl : -INFINITY;
                sc[i][2 + e] = ok ? sc[i][2 + e] * sl : -INFINITY;
                mx0 = fmaxf(mx0, sc[i][e]);
                mx1 = fmaxf(mx1, sc[i][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);   /* finite: key j*64 < n */
        const float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1); /* 0 on the first tile */
        m0 = mn0;
        m1 = mn1;
        l0 *= al0;
        l1 *= al1;
#pragma unroll
        for (int i = 0; i < DVW / 8; i++) {
            o[i][0] *= al0;
            o[i][1] *= al0;
            o[i][2] *= al1;
            o[i][3] *= al1;
        }
        /* P as the A fragments of keys 16kt..16kt+15 (score tiles 2kt, 2kt + 1) */
        unsigned pa[TC_BK / 16][4];
#pragma unroll
        for (int i = 0; i < TC_BK / 8; i++) {
            sc[i][0] = exp2f(sc[i][0] - mn0);
            sc[i][1] = exp2f(sc[i][1] - mn0);
            sc[i][2] = exp2f(sc[i][2] - mn1);
            sc[i][3] = exp2f(sc[i][3] - mn1);
            l0 += sc[i][0] + sc[i][1]; /* this lane's share; the quad is summed at the end */
            l1 += sc[i][2] + sc[i][3];
            pa[i / 2][2 * (i & 1)] = cu_mma<T>::pack(sc[i][0], sc[i][1]);
            pa[i / 2][2 * (i & 1) + 1] = cu_mma<T>::pack(sc[i][2], sc[i][3]);
        }

        /* O[:, 64cc..] += P V chunk cc; chunks wholly past c are skipped (zeros, not written) */
#pragma unroll
        for (int cc = 0; cc < NV; cc++, s++) {
            const T *vb = begin_step() + (h * TC_BK + a_row) * TC_LD + a_col;
            if (ch0 + cc * TC_KD >= c) continue;
#pragma unroll
            for (int kt = 0; kt < TC_BK / 16; kt++) {
#pragma unroll
                for (int np = 0; np < TC_KD / 16; np++) {
                    unsigned b[4];
                    cu_ldsm_t(b, vb + kt * 16 * TC_LD + np * 16);
                    cu_mma<T>::run(o[cc * 8 + 2 * np], pa[kt], b[0], b[1]);
                    cu_mma<T>::run(o[cc * 8 + 2 * np + 1], pa[kt], b[2], b[3]);
                }
            }
        }
    }
    cu_cp_wait<0>(); /* only empty groups are left; nothing may be in flight at exit */

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    const int r0 = q0 + rg * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
    for (int i = 0; i < DVW / 8; i++) {
        const int col = ch0 + i * 8 + 2 * (lane & 3); /* even, and c is: col + 1 < c too */
        if (col >= c) continue;
        if (r0 < n)
            *(unsigned *)(yf + r0 * (int64_t)c + col) =
                cu_mma<T>::pack(o[i][0] * inv0, o[i][1] * inv0);
        if (r1 < n)
            *(unsigned *)(yf + r1 * (int64_t)c + col) =
                cu_mma<T>::pack(o[i][2] * inv1, o[i][3] * inv1);
    }
}

/* output channels per warp of the mma kernel: blocks of 2 DVW <= 512 channels, the fewest */
static int att_mma_dvw(int c) {
    const int slices = (c + 511) / 512, per = (c + slices - 1) / slices;
    return ((per + 1) / 2 + 63) / 64 * 64;
}

/* ---- fma kernel ---- */
enum {
    FA_BQ = 32, /* query rows per block: 4 per warp in the scores, 8 per thread in P V */
    FA_BK = 64, /* keys per tile: 2 per lane in the scores */
    FA_KD = 32, /* channels per q / k chunk */
    FA_VK = 16, /* keys per V chunk */
    FA_THREADS = 256,
    FA_QLD = FA_BQ + 4, /* row strides of Q^T and P^T [.][rows], K^T [.][keys]: float4 aligned */
    FA_KLD = FA_BK + 4
};

/* grid: (ceil(n / 32), ceil(c / DV), frames), DV = 256 * NJ */
template <typename T, int NJ>
static __global__ void __launch_bounds__(FA_THREADS)
    att_fma_kernel(const T *qkv, T *y, int n, int c, float scale) {
    constexpr int DV = 256 * NJ;
    constexpr int QK = FA_KD * (FA_QLD + FA_KLD), UN = QK > FA_VK * DV ? QK : FA_VK * DV;
    __shared__ __align__(16) float su[UN]; /* Q^T [FA_KD][FA_QLD] + K^T [FA_KD][FA_KLD], or the
                                            * V chunk [FA_VK][DV] */
    __shared__ __align__(16) float pt[FA_BK][FA_QLD]; /* P^T [key][row] */
    __shared__ float alpha_s[FA_BQ], linv_s[FA_BQ];
    float *qt = su, *kt = su + FA_KD * FA_QLD, *vs = su;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int q0 = blockIdx.x * FA_BQ, c0 = blockIdx.y * DV;
    const int64_t ld = 3 * (int64_t)c;
    const T *qf = qkv + (int64_t)blockIdx.z * n * ld;
    T *yf = y + (int64_t)blockIdx.z * n * c;
    /* scores: rows 4w + r (r < 4), keys 2 lane + e (e < 2); a row lives in one warp */
    float m[4], l[4];
#pragma unroll
    for (int r = 0; r < 4; r++)
        m[r] = -INFINITY, l[r] = 0.0f;
    /* P V: rows 8 rg + r (r < 8), channels c0 + 256 jj + 4 cg + e (jj < NJ, e < 4) */
    const int rg = tid >> 6, cg = tid & 63;
    float o[8][4 * NJ];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int i = 0; i < 4 * NJ; i++)
            o[r][i] = 0.0f;

    for (int k0 = 0; k0 < n; k0 += FA_BK) {
        float s[4][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
        for (int d0 = 0; d0 < c; d0 += FA_KD) {
            __syncthreads(); /* the previous chunk or V chunk is no longer read */
            for (int i = tid; i < FA_BQ * FA_KD; i += FA_THREADS) {
                const int r = i / FA_KD, d = i % FA_KD, row = q0 + r, ch = d0 + d;
                qt[d * FA_QLD + r] = row < n && ch < c ? cu_ld(qf, row * ld + ch) : 0.0f;
            }
            for (int i = tid; i < FA_BK * FA_KD; i += FA_THREADS) {
                const int r = i / FA_KD, d = i % FA_KD, row = k0 + r, ch = d0 + d;
                kt[d * FA_KLD + r] = row < n && ch < c ? cu_ld(qf, row * ld + c + ch) : 0.0f;
            }
            __syncthreads();
            const int dn = min((int)FA_KD, c - d0);
#pragma unroll 4
            for (int d = 0; d < dn; d++) {
                const float4 q = *(const float4 *)&qt[d * FA_QLD + 4 * w];
                const float2 k = *(const float2 *)&kt[d * FA_KLD + 2 * lane];
                s[0][0] += q.x * k.x, s[0][1] += q.x * k.y;
                s[1][0] += q.y * k.x, s[1][1] += q.y * k.y;
                s[2][0] += q.z * k.x, s[2][1] += q.z * k.y;
                s[3][0] += q.w * k.x, s[3][1] += q.w * k.y;
            }
        }
        /* online softmax (natural exp, as the CPU reference) */
        float al[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
#pragma unroll
            for (int e = 0; e < 2; e++)
                s[r][e] = k0 + 2 * lane + e < n ? s[r][e] * scale : -INFINITY;
            float mx = fmaxf(s[r][0], s[r][1]);
            for (int x = 16; x; x >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
            const float mn = fmaxf(m[r], mx); /* finite: key k0 < n */
            al[r] = expf(m[r] - mn);          /* 0 on the first tile */
            m[r] = mn;
            s[r][0] = expf(s[r][0] - mn);
            s[r][1] = expf(s[r][1] - mn);
            float sum = s[r][0] + s[r][1];
            for (int x = 16; x; x >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, x);
            l[r] = l[r] * al[r] + sum;
        }
        /* pt and alpha_s were last read before the first barrier of this tile */
        *(float4 *)&pt[2 * lane][4 * w] = make_float4(s[0][0], s[1][0], s[2][0], s[3][0]);
        *(float4 *)&pt[2 * lane + 1][4 * w] = make_float4(s[0][1], s[1][1], s[2][1], s[3][1]);
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < 4; r++)
                alpha_s[4 * w + r] = al[r];

        const int kn = min((int)FA_BK, n - k0);
        for (int v0 = 0; v0 < kn; v0 += FA_VK) {
            __syncthreads(); /* P^T, alpha visible; Q^T / K^T or the last V chunk not read */
            for (int i = tid; i < FA_VK * DV; i += FA_THREADS) {
                const int r = i / DV, ch = c0 + i % DV, row = k0 + v0 + r;
                vs[i] = row < n && ch < c ? cu_ld(qf, row * ld + 2 * c + ch) : 0.0f;
            }
            __syncthreads();
            if (v0 == 0) {
#pragma unroll
                for (int r = 0; r < 8; r++) {
                    const float a = alpha_s[8 * rg + r];
#pragma unroll
                    for (int i = 0; i < 4 * NJ; i++)
                        o[r][i] *= a;
                }
            }
#pragma unroll 2
            for (int k = 0; k < FA_VK; k++) {
                const float4 pa = *(const float4 *)&pt[v0 + k][8 * rg];
                const float4 pb = *(const float4 *)&pt[v0 + k][8 * rg + 4];
                const float p[8] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
                for (int jj = 0; jj < NJ; jj++) {
                    const float4 v = *(const float4 *)&vs[k * DV + 256 * jj + 4 * cg];
#pragma unroll
                    for (int r = 0; r < 8; r++) {
                        o[r][4 * jj + 0] += p[r] * v.x;
                        o[r][4 * jj + 1] += p[r] * v.y;
                        o[r][4 * jj + 2] += p[r] * v.z;
                        o[r][4 * jj + 3] += p[r] * v.w;
                    }
                }
            }
        }
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < 4; r++)
            linv_s[4 * w + r] = 1.0f / l[r];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const int row = q0 + 8 * rg + r;
        if (row >= n) continue;
        const float inv = linv_s[8 * rg + r];
#pragma unroll
        for (int jj = 0; jj < NJ; jj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ch = c0 + 256 * jj + 4 * cg + e;
                if (ch < c) cu_st(yf, row * (int64_t)c + ch, o[r][4 * jj + e] * inv);
            }
    }
}

/* ---- launcher ---- */
/* frames per launch: grid z <= 65535 */
enum { ATT_MAX_Z = 65535 };

template <typename T, int DVW>
static cudaError_t launch_mma(cudaStream_t st, const T *qkv, T *y, int t, int n, int c, float sl) {
    const size_t smem = att_mma_smem();
    cudaError_t e = cudaFuncSetAttribute(att_mma_kernel<T, DVW>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    for (int f = 0; f < t; f += ATT_MAX_Z) {
        const int nf = t - f < ATT_MAX_Z ? t - f : ATT_MAX_Z;
        dim3 grid((n + TC_BQ - 1) / TC_BQ, (c + 2 * DVW - 1) / (2 * DVW), nf);
        att_mma_kernel<T, DVW><<<grid, TC_THREADS, smem, st>>>(qkv + (int64_t)f * n * 3 * c,
                                                                y + (int64_t)f * n * c, n, c, sl);
    }
    return cudaGetLastError();
}

template <typename T>
static cudaError_t dispatch_mma(cudaStream_t st, const void *qkv, void *y, int t, int n, int c,
                                float scale) {
    const float sl = scale * 1.4426950408889634f; /* log2(e) */
    const T *q = (const T *)qkv;
    T *yy = (T *)y;
    switch (att_mma_dvw(c)) {
    case 64: return launch_mma<T, 64>(st, q, yy, t, n, c, sl);
    case 128: return launch_mma<T, 128>(st, q, yy, t, n, c, sl);
    case 192: return launch_mma<T, 192>(st, q, yy, t, n, c, sl);
    default: return launch_mma<T, 256>(st, q, yy, t, n, c, sl);
    }
}

template <typename T, int NJ>
static void launch_fma(cudaStream_t st, const void *qkv, void *y, int t, int n, int c,
                       float scale) {
    for (int f = 0; f < t; f += ATT_MAX_Z) {
        const int nf = t - f < ATT_MAX_Z ? t - f : ATT_MAX_Z;
        dim3 grid((n + FA_BQ - 1) / FA_BQ, (c + 256 * NJ - 1) / (256 * NJ), nf);
        att_fma_kernel<T, NJ><<<grid, FA_THREADS, 0, st>>>(
            (const T *)qkv + (int64_t)f * n * 3 * c, (T *)y + (int64_t)f * n * c, n, c, scale);
    }
}

template <typename T>
static void dispatch_fma(cudaStream_t st, const void *qkv, void *y, int t, int n, int c,
                         float scale) {
    if (c <= 256)
        launch_fma<T, 1>(st, qkv, y, t, n, c, scale);
    else
        launch_fma<T, 2>(st, qkv, y, t, n, c, scale);
}

/* ---- softmax over rows of float32 scores (the GEMM path) ---- */
enum { SM_THREADS = 256 };

static __device__ __forceinline__ float sm_block_reduce(float v, bool is_max, float *red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* red is reused by consecutive reductions */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int k = 1; k < SM_THREADS / 32; k++)
        v = is_max ? fmaxf(v, red[k]) : v + red[k];
    return v;
}

template <typename T>
static __global__ void __launch_bounds__(SM_THREADS)
    att_softmax_rows_kernel(const float *s, T *p, int n) {
    __shared__ float red[SM_THREADS / 32];
    const float *row = s + (int64_t)blockIdx.x * n;
    T *out = p + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += SM_THREADS)
        m = fmaxf(m, row[j]);
    m = sm_block_reduce(m, true, red);
    float l = 0.f;
    for (int j = threadIdx.x; j < n; j += SM_THREADS)
        l += __expf(row[j] - m);
    const float inv = 1.f / sm_block_reduce(l, false, red);
    for (int j = threadIdx.x; j < n; j += SM_THREADS)
        cu_st(out, j, __expf(row[j] - m) * inv);
}

/* The same for rows of n % 4 == 0 keys, at most 4 V SM_THREADS: a thread's share of the row is
 * read once, as float4 vectors, into registers (the row is read once instead of three times). */
template <typename T, int V>
static __global__ void __launch_bounds__(SM_THREADS)
    att_softmax_reg_kernel(const float *s, T *p, int n) {
    __shared__ float red[SM_THREADS / 32];
    const float4 *row = (const float4 *)(s + (int64_t)blockIdx.x * n);
    T *out = p + (int64_t)blockIdx.x * n;
    const int nv = n / 4;
    float4 v[V];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int j = threadIdx.x + k * SM_THREADS;
        v[k] = j < nv ? row[j] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
    }
    m = sm_block_reduce(m, true, red);
    float l = 0.f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = make_float4(__expf(v[k].x - m), __expf(v[k].y - m), __expf(v[k].z - m),
                           __expf(v[k].w - m));
        if (threadIdx.x + k * SM_THREADS < nv) l += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    const float inv = 1.f / sm_block_reduce(l, false, red);
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int j = threadIdx.x + k * SM_THREADS;
        if (j >= nv) break;
        cu_st(out, 4 * (int64_t)j, v[k].x * inv);
        cu_st(out, 4 * (int64_t)j + 1, v[k].y * inv);
        cu_st(out, 4 * (int64_t)j + 2, v[k].z * inv);
        cu_st(out, 4 * (int64_t)j + 3, v[k].w * inv);
    }
}

template <typename T>
static void softmax_rows_launch(cudaStream_t s, const float *scores, void *p, int rows, int n) {
    const int nv = (n + 3) / 4;
    if (n % 4 || (uintptr_t)scores % 16)
        att_softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(scores, (T *)p, n);
    else if (nv <= 8 * SM_THREADS)
        att_softmax_reg_kernel<T, 8><<<rows, SM_THREADS, 0, s>>>(scores, (T *)p, n);
    else if (nv <= 16 * SM_THREADS)
        att_softmax_reg_kernel<T, 16><<<rows, SM_THREADS, 0, s>>>(scores, (T *)p, n);
    else
        att_softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(scores, (T *)p, n);
}

extern "C" cudaError_t cuk_softmax_rows(cudaStream_t s, int dtype, const float *scores, void *p,
                                        int rows, int n) {
    if (rows <= 0 || n <= 0) return cudaSuccess;
    CU_DISPATCH(dtype, softmax_rows_launch, s, scores, p, rows, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_attention(cudaStream_t s, int dtype, const void *qkv, void *y, int t,
                                     int n, int c, float scale) {
    if (t <= 0 || n <= 0 || c <= 0) return cudaSuccess;
    /* the mma kernel moves 16-byte vectors of q/k/v rows (c % 8 == 0, aligned base) and writes
     * pairs of outputs */
    const bool tc = dtype != CU_F32 && c % 8 == 0 && !((uintptr_t)qkv & 15) && !((uintptr_t)y & 3);
    if (tc && dtype == CU_BF16) return dispatch_mma<__nv_bfloat16>(s, qkv, y, t, n, c, scale);
    if (tc) return dispatch_mma<__half>(s, qkv, y, t, n, c, scale);
    CU_DISPATCH(dtype, dispatch_fma, s, qkv, y, t, n, c, scale);
    return cudaGetLastError();
}
