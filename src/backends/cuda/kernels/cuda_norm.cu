/* cuda_norm.cu -- RMS_NORM (per voxel, over channels) and GROUP_NORM (per frame), fused act.
 *
 * RMS: a group of L lanes per voxel, each lane holding V 16-byte vectors of it (one read of x)
 * and the matching gamma/beta in registers for the whole grid-stride loop; the sum of squares is
 * reduced with shuffles in float32. Channels that are no multiple of the vector width: one warp
 * per voxel, scalar. The same kernels take rows of columns with their own pitches (P = true:
 * cuk_rms_norm_rows, what column strips run over a value where it lies). With s8 > 0 (16-bit
 * activations, the 16-byte-vector kernel) each output value is written as the E4M3 code of its
 * 16-bit value / s8 (cvt.rn.satfinite: the codes cuda_fp8.cu's quantisation would make of that
 * output), a voxel's c codes in the first c bytes of its place (op.h fp8_codes_bound); in
 * place too: a voxel's lanes have all read it before the shuffles that its writes wait for.
 * GroupNorm (16-byte vectors, c / vector width <= 256): one pass of statistics, then one pass
 * that normalises (2 reads + 1 write in all):
 *   stats: each thread keeps a float32 Welford (mean, M2) per channel of one channel vector over
 *   a strided set of pixels; the block merges its rows (Chan's formula) in shared memory and
 *   writes (mean, M2) per (frame, block, channel);
 *   final: one block per (frame, group) merges those partials in float64 -> mean, rstd;
 *   apply: each thread keeps the (mean, rstd*w, b) of its channel vector in registers.
 * Welford/Chan are exact in exact arithmetic and stay accurate when |mean| >> std (no
 * E[x^2] - E[x]^2 cancellation). Other shapes: the two-pass kernels with float64 atomics.
 */
#include "backends/cuda/kernels/cuda_common.cuh"

/* ---- RMS ---- */
/* Voxel v's offset: packed (P = false), or the rows of w voxels p elements apart (P = true:
 * columns of channels-last frames, cuk_rms_norm_rows). */
template <bool P>
static __device__ __forceinline__ int64_t rms_at(int64_t v, int c, int64_t w, int64_t p) {
    return P ? (v / w) * p + (v % w) * c : v * c;
}

template <typename T, bool P>
static __global__ void rms_kernel(const T *x, T *y, int64_t nv, int c, int64_t w, int64_t xp,
                                  int64_t yp, const float *g, const float *b, int act, float as) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const float sqc = sqrtf((float)c);
    for (int64_t v = warp; v < nv; v += nw) {
        const T *xv = x + rms_at<P>(v, c, w, xp);
        T *yv = y + rms_at<P>(v, c, w, yp);
        float ss = 0.0f;
        for (int i = lane; i < c; i += 32) {
            float t = cu_ld(xv, i);
            ss += t * t;
        }
        for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float sc = sqc / fmaxf(sqrtf(ss), 1e-12f);
        for (int i = lane; i < c; i += 32) {
            float t = cu_ld(xv, i) * sc;
            if (g) t *= g[i];
            if (b) t += b[i];
            cu_st(yv, i, cu_act(act, as, t));
        }
    }
}

/* Vectorised RMS: groups of L lanes (a power of two) per voxel, 32/L voxels per warp step; each
 * lane keeps up to RMS_MAXV 16-byte vectors of its voxel in registers (one read of x). */
enum { RMS_MAXV = 8 };
template <typename T, int L, bool P>
static __global__ void rms_vec_kernel(const T *x, T *y, int64_t nv, int c, int64_t w, int64_t xp,
                                      int64_t yp, const float *g, const float *b, int act,
                                      float as) {
    const int N = vec16<T>::N, cv = c / N, vpw = 32 / L;
    const int lane = threadIdx.x & 31, sub = lane % L;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const float sqc = sqrtf((float)c);
    for (int64_t base = warp * vpw; base < nv; base += nw * vpw) { /* uniform per warp */
        const int64_t v = base + lane / L;
        const bool ok = v < nv;
        float r[RMS_MAXV][N];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_MAXV; k++) {
            const int idx = sub + k * L;
            if (ok && idx < cv) {
                vec16<T>::load(x + rms_at<P>(v, c, w, xp) + (int64_t)idx * N, r[k]);
#pragma unroll
                for (int j = 0; j < N; j++) ss += r[k][j] * r[k][j];
            }
        }
#pragma unroll
        for (int o = L / 2; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float sc = sqc / fmaxf(sqrtf(ss), 1e-12f);
#pragma unroll
        for (int k = 0; k < RMS_MAXV; k++) {
            const int idx = sub + k * L;
            if (ok && idx < cv) {
#pragma unroll
                for (int j = 0; j < N; j++) {
                    const int ch = idx * N + j;
                    float t = r[k][j] * sc;
                    if (g) t *= g[ch];
                    if (b) t += b[ch];
                    r[k][j] = cu_act(act, as, t);
                }
                vec16<T>::store(y + rms_at<P>(v, c, w, yp) + (int64_t)idx * N, r[k]);
            }
        }
    }
}

template <typename T, int L, bool P>
static void launch_rms_vec(cudaStream_t s, const void *x, void *y, int64_t nv, int c, int64_t w,
                           int64_t xp, int64_t yp, const float *g, const float *b, int act,
                           float as) {
    int64_t warps = (nv + 32 / L - 1) / (32 / L), blocks = (warps + 7) / 8;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    rms_vec_kernel<T, L, P>
        <<<(unsigned)blocks, 256, 0, s>>>((const T *)x, (T *)y, nv, c, w, xp, yp, g, b, act, as);
}

/* A vector's 8 values as E4M3 codes of their 16-bit values at scale s8 (inv8 = cu_e4m3_inv(s8);
 * 8 bytes; for T of 2 bytes) */
template <typename T>
static __device__ __forceinline__ void store_codes(uint8_t *p, const float *v, float inv8) {
    uint4 h; /* the 16-bit values (paired conversions), back in float32 */
    float r[8];
    vec16<T>::store((T *)&h, v);
    vec16<T>::load((const T *)&h, r);
    *(uint2 *)p = cu_e4m3x8(r, inv8);
}

/* V vectors per lane, L (runtime power of two) lanes per voxel; Q: written as E4M3 codes (s8), an
 * instance of its own so that the 16-bit one carries no code path; gamma/beta in shared memory
 * (float32, c each), so that registers stay few and occupancy high. A: the activation when known at
 * compile time (SiLU, the Wan blocks'), else -1 (act read at run time). Blocks of 8 x 32/L voxels,
 * as many as a device holds at once, looping over the rest (launch_rms_reg). A lane's loads all
 * come before the first sum of squares: written as one loop of load-then-sum per vector the kernel
 * stayed at the old rate. Measured on the H100 (bench/rms_norm_probe.cu, bf16 + SiLU): 2.8-3.0 TB/s
 * at 96-384 channels, 2.5-2.6 at 256-1024, against 2.2-2.5 before (a 16-byte copy: 2.8). Two voxels
 * in flight per lane group made it slower (2.2-2.4); the probe's own kernel (gamma read per value,
 * no beta) keeps 2.9-3.0 at 256-1024 channels with two in flight: what is left to take. */
template <typename T, int V, bool P, int A, bool Q>
static __global__ void __launch_bounds__(256)
    rms_reg_kernel(const T *x, T *y, int64_t nv, int c, int64_t w, int64_t xp, int64_t yp, int L,
                   const float *g, const float *b, int act, float as, float s8) {
    extern __shared__ float4 rms_sh4[];
    float *sg = (float *)rms_sh4, *sb = sg + c;
    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        sg[i] = g ? g[i] : 1.0f;
        sb[i] = b ? b[i] : 0.0f;
    }
    __syncthreads();
    const int N = vec16<T>::N, cv = c / N, vpw = 32 / L;
    const int lane = threadIdx.x & 31, sub = lane & (L - 1);
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const float sqc = sqrtf((float)c), inv8 = cu_e4m3_inv(s8);
    if (A >= 0) act = A;
    for (int64_t base = warp * vpw; base < nv; base += nw * vpw) { /* uniform per warp */
        const int64_t v = base + lane / L;
        const bool ok = v < nv;
        const T *xv = x + rms_at<P>(v, c, w, xp);
        float r[V][N];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) /* every load issued before the first sum */
            if (ok && sub + k * L < cv) vec16<T>::load(xv + (int64_t)(sub + k * L) * N, r[k]);
#pragma unroll
        for (int k = 0; k < V; k++)
            if (ok && sub + k * L < cv)
#pragma unroll
                for (int j = 0; j < N; j++)
                    ss += r[k][j] * r[k][j];
        for (int o = L >> 1; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float sc = sqc / fmaxf(sqrtf(ss), 1e-12f);
        T *yv = y + rms_at<P>(v, c, w, yp);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int idx = sub + k * L;
            if (ok && idx < cv) {
                const float4 *g4 = (const float4 *)(sg + idx * N), *b4 = (const float4 *)(sb + idx * N);
#pragma unroll
                for (int q = 0; q < N / 4; q++) {
                    const float4 gq = g4[q], bq = b4[q];
                    r[k][4 * q + 0] = cu_act_t<T>(act, as, r[k][4 * q + 0] * sc * gq.x + bq.x);
                    r[k][4 * q + 1] = cu_act_t<T>(act, as, r[k][4 * q + 1] * sc * gq.y + bq.y);
                    r[k][4 * q + 2] = cu_act_t<T>(act, as, r[k][4 * q + 2] * sc * gq.z + bq.z);
                    r[k][4 * q + 3] = cu_act_t<T>(act, as, r[k][4 * q + 3] * sc * gq.w + bq.w);
                }
                if constexpr (Q && sizeof(T) == 2) /* codes: voxel v's place, in bytes */
                    store_codes<T>((uint8_t *)yv + (int64_t)idx * N, r[k], inv8);
                else
                    vec16<T>::store(yv + (int64_t)idx * N, r[k]);
            }
        }
    }
}

/* one launch of rms_reg_kernel<T, V, P, A, Q>: a block per 8 warps' voxels, at most 8 blocks a
 * multiprocessor (a full one; the loop takes the rest). On the H200 (bench/rms_norm_probe.cu) the
 * 96-channel bf16 norm went from 2.8 to 3.8 TB/s with these blocks, the codes' instance of its own
 * and paired conversions (3.5 for the probe's kernel). */
template <typename T, int V, bool P>
static void launch_rms_reg(cudaStream_t s, const T *x, T *y, int64_t nv, int c, int64_t w,
                           int64_t xp, int64_t yp, int L, const float *g, const float *b, int act,
                           float as, float s8, int sms) {
    const int64_t per_block = 8LL * (32 / L);
    int64_t blocks = (nv + per_block - 1) / per_block;
    if (sms > 0 && blocks > 8LL * sms) blocks = 8LL * sms;
    if (blocks > 0x7fffffffLL) blocks = 0x7fffffffLL;
    const size_t shm = 2 * (size_t)c * sizeof(float);
    if (act == CU_ACT_SILU && s8 > 0.0f)
        rms_reg_kernel<T, V, P, CU_ACT_SILU, true>
            <<<(unsigned)blocks, 256, shm, s>>>(x, y, nv, c, w, xp, yp, L, g, b, act, as, s8);
    else if (act == CU_ACT_SILU)
        rms_reg_kernel<T, V, P, CU_ACT_SILU, false>
            <<<(unsigned)blocks, 256, shm, s>>>(x, y, nv, c, w, xp, yp, L, g, b, act, as, s8);
    else if (s8 > 0.0f)
        rms_reg_kernel<T, V, P, -1, true>
            <<<(unsigned)blocks, 256, shm, s>>>(x, y, nv, c, w, xp, yp, L, g, b, act, as, s8);
    else
        rms_reg_kernel<T, V, P, -1, false>
            <<<(unsigned)blocks, 256, shm, s>>>(x, y, nv, c, w, xp, yp, L, g, b, act, as, s8);
}

/* rows rows of w voxels, x's rows xp elements apart and y's yp (P = false: packed); E4M3 codes
 * (s8 > 0) only where the 16-byte-vector kernel runs (rms_codes_ok), else cudaErrorNotSupported */
template <typename T, bool P>
static cudaError_t launch_rms(cudaStream_t s, const void *x, void *y, int64_t nv, int c, int64_t w,
                              int64_t xp, int64_t yp, const float *g, const float *b, int act,
                              float as, float s8, int sms) {
    const int N = vec16<T>::N, cv = c / N;
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    const bool vec = c % N == 0 && cu_aligned16(x, y, NULL) && (!P || (xp % N == 0 && yp % N == 0));
    if (s8 > 0.0f && (sizeof(T) != 2 || !vec || cv > 32 * 4)) return cudaErrorNotSupported;
    if (vec && cv <= 32 * 4) {
        int L = 1;
        while (L < 32 && L * 4 < cv) L <<= 1; /* at most 4 vectors per lane */
        const int V = (cv + L - 1) / L;
        switch (V) {
        case 1:
            launch_rms_reg<T, 1, P>(s, xt, yt, nv, c, w, xp, yp, L, g, b, act, as, s8, sms);
            break;
        case 2:
            launch_rms_reg<T, 2, P>(s, xt, yt, nv, c, w, xp, yp, L, g, b, act, as, s8, sms);
            break;
        case 3:
            launch_rms_reg<T, 3, P>(s, xt, yt, nv, c, w, xp, yp, L, g, b, act, as, s8, sms);
            break;
        default:
            launch_rms_reg<T, 4, P>(s, xt, yt, nv, c, w, xp, yp, L, g, b, act, as, s8, sms);
            break;
        }
        return cudaGetLastError();
    }
    if (vec && cv <= 32 * RMS_MAXV) {
        int L = 1;
        while (L < 32 && L * RMS_MAXV < cv) L <<= 1; /* enough lanes for the vectors */
        while (L < 32 && L < cv && L < 8) L <<= 1;   /* and some parallelism per voxel */
        switch (L) {
        case 1: launch_rms_vec<T, 1, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        case 2: launch_rms_vec<T, 2, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        case 4: launch_rms_vec<T, 4, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        case 8: launch_rms_vec<T, 8, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        case 16: launch_rms_vec<T, 16, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        default: launch_rms_vec<T, 32, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as); break;
        }
        return cudaGetLastError();
    }
    int64_t blocks = (nv + 7) / 8; /* scalar: one warp per voxel, 8 warps per block */
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    rms_kernel<T, P><<<(unsigned)blocks, 256, 0, s>>>(xt, yt, nv, c, w, xp, yp, g, b, act, as);
    return cudaGetLastError();
}

/* rows of w voxels (one row of nv voxels when P is false) in dtype */
template <bool P>
static cudaError_t rms_dispatch(cudaStream_t s, int dtype, const void *x, void *y, int64_t nv,
                                int c, int64_t w, int64_t xp, int64_t yp, const float *g,
                                const float *b, int act, float as, float s8, int sms) {
    switch (dtype) {
    case CU_BF16:
        return launch_rms<__nv_bfloat16, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as, s8, sms);
    case CU_F16: return launch_rms<__half, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as, s8, sms);
    default: return launch_rms<float, P>(s, x, y, nv, c, w, xp, yp, g, b, act, as, s8, sms);
    }
}

extern "C" int cuk_rms_codes_ok(int dtype, int c) {
    return (dtype == CU_BF16 || dtype == CU_F16) && c % 8 == 0 && c / 8 <= 32 * 4;
}

extern "C" cudaError_t cuk_rms_norm(cudaStream_t s, int dtype, const void *x, void *y,
                                    int64_t n_vox, int c, const float *g, const float *b, int act,
                                    float act_scale, float s8, int sms) {
    if (n_vox == 0) return cudaSuccess;
    return rms_dispatch<false>(s, dtype, x, y, n_vox, c, n_vox, 0, 0, g, b, act, act_scale, s8,
                               sms);
}

extern "C" cudaError_t cuk_rms_norm_rows(cudaStream_t s, int dtype, const void *x, int64_t x_pitch,
                                         void *y, int64_t y_pitch, int64_t rows, int w, int c,
                                         const float *g, const float *b, int act, float act_scale,
                                         float s8, int sms) {
    if (rows == 0 || w == 0) return cudaSuccess;
    return rms_dispatch<true>(s, dtype, x, y, rows * w, c, w, x_pitch, y_pitch, g, b, act,
                              act_scale, s8, sms);
}

/* ---- GroupNorm ---- */
enum { GN_THREADS = 256 };

/* Partial per-channel sums of x (SQ = 0) or of (x - mean[group])^2 (SQ = 1) over the pixels
 * [blockIdx.x * ppb, +ppb) of frame blockIdx.y, added into acc[f][c] (float64). */
template <typename T, int SQ>
static __global__ void gn_partial_kernel(const T *x, int64_t hw, int c, int cg, int groups,
                                         int64_t ppb, const float *mean, double *acc) {
    extern __shared__ float sh[];
    const int f = blockIdx.y;
    const int64_t p0 = blockIdx.x * ppb, p1 = p0 + ppb < hw ? p0 + ppb : hw;
    for (int i = threadIdx.x; i < c; i += blockDim.x) sh[i] = 0.0f;
    __syncthreads();
    const int cpt = c < (int)blockDim.x ? c : (int)blockDim.x, rows = blockDim.x / cpt;
    const int r = threadIdx.x / cpt, c0 = threadIdx.x % cpt;
    if (r < rows) {
        const T *xf = x + (int64_t)f * hw * c;
        for (int ch = c0; ch < c; ch += cpt) {
            const float m = SQ ? mean[f * groups + ch / cg] : 0.0f;
            float s = 0.0f;
            for (int64_t p = p0 + r; p < p1; p += rows) {
                float v = cu_ld(xf, p * c + ch);
                if (SQ) {
                    v -= m;
                    s += v * v;
                } else {
                    s += v;
                }
            }
            atomicAdd(&sh[ch], s);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < c; i += blockDim.x) atomicAdd(&acc[(int64_t)f * c + i], (double)sh[i]);
}

/* One thread per (frame, group): out = mean (SQ = 0) or 1/sqrt(var + eps) (SQ = 1). */
template <int SQ>
static __global__ void gn_final_kernel(const double *acc, int t, int c, int cg, int groups,
                                       double count, float eps, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= t * groups) return;
    int f = i / groups, g = i % groups;
    const double *a = acc + (int64_t)f * c + (int64_t)g * cg;
    double s = 0.0;
    for (int k = 0; k < cg; k++) s += a[k];
    out[i] = SQ ? (float)(1.0 / sqrt(s / count + (double)eps)) : (float)(s / count);
}

template <typename T>
static __global__ void gn_apply_kernel(const T *x, T *y, int64_t hw, int c, int cg, int groups,
                                       int64_t n, const float *mean, const float *rstd,
                                       const float *gw, const float *gb, int act, float as) {
    const int64_t fsz = hw * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int f = (int)(i / fsz), ch = (int)(i % c);
        int k = f * groups + ch / cg;
        float v = (cu_ld(x, i) - mean[k]) * (rstd[k] * (gw ? gw[ch] : 1.0f)) + (gb ? gb[ch] : 0.0f);
        cu_st(y, i, cu_act(act, as, v));
    }
}

/* per (frame, channel): mean, rstd * w, b -> coef[0 | 1 | 2][f][c] */
static __global__ void gn_coef_kernel(const float *mean, const float *rstd, int t, int c, int cg,
                                      int groups, const float *gw, const float *gb, float *coef) {
    const int64_t n = (int64_t)t * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int f = (int)(i / c), ch = (int)(i % c), k = f * groups + ch / cg;
        coef[i] = mean[k];
        coef[n + i] = rstd[k] * (gw ? gw[ch] : 1.0f);
        coef[2 * n + i] = gb ? gb[ch] : 0.0f;
    }
}

template <typename T>
static __global__ void gn_apply_vec_kernel(const T *x, T *y, int64_t hw, int c, int t,
                                           int64_t nvec, const float *coef, int act, float as) {
    const int N = vec16<T>::N;
    const int64_t fsz = hw * c, n = (int64_t)t * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = i * N;
        const int64_t k0 = (e / fsz) * c + e % c;
        float v[N];
        vec16<T>::load(x + e, v);
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = cu_act(act, as, (v[j] - coef[k0 + j]) * coef[n + k0 + j] + coef[2 * n + k0 + j]);
        vec16<T>::store(y + e, v);
    }
}

/* ---- GroupNorm, one-pass statistics (Welford per thread, Chan merges) ---- */
enum { GN_WF_THREADS = 256 };

/* Pixel blocks per frame for the Welford kernels: about 4 blocks per SM in all, each with at
 * least 8 pixels per row of threads. */
static int64_t gn_wf_blocks(int t, int64_t hw, int rows, int sm_count) {
    int64_t nbx = (4LL * sm_count + t - 1) / t;
    int64_t most = hw / (8LL * rows);
    if (nbx > most) nbx = most;
    if (nbx < 1) nbx = 1;
    return nbx;
}

/* pixels of a block's rows [a, b) when len pixels are dealt round-robin to `rows` rows */
static __device__ __forceinline__ float gn_rows_count(int64_t len, int rows, int a, int b) {
    const int64_t q = len / rows, rem = len % rows;
    int64_t extra = (b < rem ? b : rem) - a;
    if (extra < 0) extra = 0;
    return (float)((int64_t)(b - a) * q + extra);
}

/* part[f][bx][c] = (mean, M2) of channel c over the pixels [bx*ppb, +ppb) of the hw pixels of
 * frame f (frames fs pixels apart) */
template <typename T>
static __global__ void __launch_bounds__(GN_WF_THREADS)
    gn_wf_stats_kernel(const T *x, int64_t hw, int64_t fs, int c, int64_t ppb, float2 *part) {
    extern __shared__ float2 shm[]; /* [rows][c] */
    const int N = vec16<T>::N, cv = c / N, rows = GN_WF_THREADS / cv;
    const int r = threadIdx.x / cv, v = threadIdx.x % cv;
    const int f = blockIdx.y;
    const int64_t p0 = blockIdx.x * ppb, p1 = p0 + ppb < hw ? p0 + ppb : hw;
    const int64_t len = p1 > p0 ? p1 - p0 : 0;
    if (r < rows) {
        float m[N], m2[N];
#pragma unroll
        for (int j = 0; j < N; j++) m[j] = m2[j] = 0.0f;
        const T *xf = x + (int64_t)f * fs * c + (int64_t)v * N;
        int n = 0;
        for (int64_t p = p0 + r; p < p1; p += rows) {
            float xv[N];
            vec16<T>::load(xf + p * c, xv);
            n++;
            const float inv = 1.0f / (float)n;
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float d = xv[j] - m[j];
                m[j] += d * inv;
                m2[j] += d * (xv[j] - m[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < N; j++) shm[r * c + v * N + j] = make_float2(m[j], m2[j]);
    }
    __syncthreads();
    for (int st = 1; st < rows; st <<= 1) {
        if (r < rows && r % (2 * st) == 0 && r + st < rows) {
            const int e = r + 2 * st < rows ? r + 2 * st : rows;
            const float na = gn_rows_count(len, rows, r, r + st);
            const float nb = gn_rows_count(len, rows, r + st, e);
            if (nb > 0.0f) {
#pragma unroll
                for (int j = 0; j < N; j++) {
                    float2 a = shm[r * c + v * N + j], bb = shm[(r + st) * c + v * N + j];
                    const float n = na + nb, d = bb.x - a.x;
                    a.x += d * (nb / n);
                    a.y += bb.y + d * d * (na * nb / n);
                    shm[r * c + v * N + j] = a;
                }
            }
        }
        __syncthreads();
    }
    if (r == 0) {
        float2 *out = part + ((int64_t)f * gridDim.x + blockIdx.x) * c + v * N;
#pragma unroll
        for (int j = 0; j < N; j++) out[j] = shm[v * N + j];
    }
}

/* One block per (group, frame): merges the block partials of the group's channels in float64;
 * stat[f][g] = (mean, 1/sqrt(var + eps)), or with SUMS (a band of a group, backend.h
 * norm_stats) sums[f][g] = (count, sum, sum of squares). */
template <int SUMS>
static __global__ void gn_wf_final_kernel(const float2 *part, int64_t hw, int c, int cg, int groups,
                                          int nbx, int64_t ppb, float eps, float2 *stat,
                                          double *sums) {
    __shared__ double sn[GN_WF_THREADS], sm[GN_WF_THREADS], sq[GN_WF_THREADS];
    const int g = blockIdx.x, f = blockIdx.y;
    double n = 0.0, m = 0.0, q = 0.0;
    const int items = nbx * cg;
    for (int i = threadIdx.x; i < items; i += blockDim.x) {
        const int bx = i / cg, ch = g * cg + i % cg;
        const int64_t p0 = (int64_t)bx * ppb;
        int64_t len = hw - p0 < ppb ? hw - p0 : ppb;
        if (len <= 0) continue;
        const float2 pv = part[((int64_t)f * nbx + bx) * c + ch];
        const double nb = (double)len, nn = n + nb, d = (double)pv.x - m;
        m += d * (nb / nn);
        q += (double)pv.y + d * d * (n * nb / nn);
        n = nn;
    }
    sn[threadIdx.x] = n, sm[threadIdx.x] = m, sq[threadIdx.x] = q;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            const double na = sn[threadIdx.x], nb = sn[threadIdx.x + st];
            if (nb > 0.0) {
                const double nn = na + nb, d = sm[threadIdx.x + st] - sm[threadIdx.x];
                sm[threadIdx.x] += d * (nb / nn);
                sq[threadIdx.x] += sq[threadIdx.x + st] + d * d * (na * nb / nn);
                sn[threadIdx.x] = nn;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && SUMS) {
        double *o = sums + ((int64_t)f * groups + g) * 3;
        o[0] = sn[0], o[1] = sn[0] * sm[0], o[2] = sq[0] + sn[0] * sm[0] * sm[0];
    } else if (threadIdx.x == 0) {
        const double var = sn[0] > 0.0 ? sq[0] / sn[0] : 0.0;
        stat[(int64_t)f * groups + g] =
            make_float2((float)sm[0], (float)(1.0 / sqrt(var + (double)eps)));
    }
}

/* y = act((x - mean) * rstd * w + b); each thread keeps its channel vector's coefficients */
template <typename T>
static __global__ void __launch_bounds__(GN_WF_THREADS)
    gn_wf_apply_kernel(const T *x, T *y, int64_t hw, int c, int cg, int groups, int64_t ppb,
                       const float2 *stat, const float *gw, const float *gb, int act, float as) {
    const int N = vec16<T>::N, cv = c / N, rows = GN_WF_THREADS / cv;
    const int r = threadIdx.x / cv, v = threadIdx.x % cv;
    if (r >= rows) return;
    const int f = blockIdx.y;
    float mu[N], sc[N], sh[N];
#pragma unroll
    for (int j = 0; j < N; j++) {
        const int ch = v * N + j;
        const float2 st = stat[(int64_t)f * groups + ch / cg];
        mu[j] = st.x;
        sc[j] = st.y * (gw ? gw[ch] : 1.0f);
        sh[j] = gb ? gb[ch] : 0.0f;
    }
    const int64_t p0 = blockIdx.x * ppb, p1 = p0 + ppb < hw ? p0 + ppb : hw;
    const int64_t off = (int64_t)f * hw * c + (int64_t)v * N;
    for (int64_t p = p0 + r; p < p1; p += rows) {
        float xv[N];
        vec16<T>::load(x + off + p * c, xv);
#pragma unroll
        for (int j = 0; j < N; j++) xv[j] = cu_act_t<T>(act, as, (xv[j] - mu[j]) * sc[j] + sh[j]);
        vec16<T>::store(y + off + p * c, xv);
    }
}

static int gn_wf_ok(int dtype, int c, const void *x, const void *y) {
    const int N = dtype == CU_F32 ? 4 : 8;
    return c % N == 0 && c / N <= GN_WF_THREADS && cu_aligned16(x, y, NULL);
}

extern "C" size_t cuk_group_norm_work(int dtype, int t, int64_t hw, int c, int groups,
                                      int sm_count) {
    const int N = dtype == CU_F32 ? 4 : 8;
    size_t old = 2 * (size_t)t * c * sizeof(double) + 2 * (size_t)t * groups * sizeof(float) +
                 3 * (size_t)t * c * sizeof(float);
    if (c % N == 0 && c / N <= GN_WF_THREADS) { /* the Welford path (unless misaligned) */
        const int rows = GN_WF_THREADS / (c / N);
        const int64_t nbx = gn_wf_blocks(t, hw, rows, sm_count);
        size_t wf = (size_t)t * nbx * c * sizeof(float2) + (size_t)t * groups * sizeof(float2) + 256;
        return wf > old ? wf : old;
    }
    return old;
}

template <typename T>
static cudaError_t gn_wf_apply(cudaStream_t s, const T *x, T *y, int t, int64_t hw, int c,
                               int groups, const float2 *stat, const float *gw, const float *gb,
                               int act, float as, int sm_count);

template <typename T>
static cudaError_t group_norm_wf(cudaStream_t s, const T *x, T *y, int t, int64_t hw, int c,
                                 int groups, float eps, const float *gw, const float *gb, int act,
                                 float as, void *work, int sm_count) {
    const int N = vec16<T>::N, cv = c / N, rows = GN_WF_THREADS / cv, cg = c / groups;
    const int64_t nbx = gn_wf_blocks(t, hw, rows, sm_count);
    const int64_t ppb = (hw + nbx - 1) / nbx;
    float2 *part = (float2 *)work;
    float2 *stat = (float2 *)(((uintptr_t)(part + (size_t)t * nbx * c) + 15) & ~(uintptr_t)15);
    const size_t shm = (size_t)rows * c * sizeof(float2);
    gn_wf_stats_kernel<T>
        <<<dim3((unsigned)nbx, (unsigned)t), GN_WF_THREADS, shm, s>>>(x, hw, hw, c, ppb, part);
    gn_wf_final_kernel<0><<<dim3((unsigned)groups, (unsigned)t), GN_WF_THREADS, 0, s>>>(
        part, hw, c, cg, groups, (int)nbx, ppb, eps, stat, NULL);
    return gn_wf_apply<T>(s, x, y, t, hw, c, groups, stat, gw, gb, act, as, sm_count);
}

/* apply: more, smaller blocks than the statistics (no merge cost) */
template <typename T>
static cudaError_t gn_wf_apply(cudaStream_t s, const T *x, T *y, int t, int64_t hw, int c,
                               int groups, const float2 *stat, const float *gw, const float *gb,
                               int act, float as, int sm_count) {
    const int N = vec16<T>::N, cv = c / N, rows = GN_WF_THREADS / cv, cg = c / groups;
    int64_t nba = (8LL * sm_count + t - 1) / t;
    if (nba > (hw + rows - 1) / rows) nba = (hw + rows - 1) / rows;
    if (nba < 1) nba = 1;
    const int64_t ppa = (hw + nba - 1) / nba;
    nba = (hw + ppa - 1) / ppa;
    gn_wf_apply_kernel<T><<<dim3((unsigned)nba, (unsigned)t), GN_WF_THREADS, 0, s>>>(
        x, y, hw, c, cg, groups, ppa, stat, gw, gb, act, as);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t group_norm_t(cudaStream_t s, const T *x, T *y, int t, int64_t hw, int c,
                                int groups, float eps, const float *gw, const float *gb, int act,
                                float as, void *work, int sm_count) {
    const int cg = c / groups;
    double *dsum = (double *)work, *dsq = dsum + (size_t)t * c;
    float *mean = (float *)(dsq + (size_t)t * c), *rstd = mean + (size_t)t * groups;
    cudaError_t e = cudaMemsetAsync(dsum, 0, 2 * (size_t)t * c * sizeof(double), s);
    if (e != cudaSuccess) return e;
    /* pixel blocks: about 4 blocks per SM in all, at least 64 pixels each */
    int64_t nbx = (4LL * sm_count + t - 1) / t;
    if (nbx > (hw + 63) / 64) nbx = (hw + 63) / 64;
    if (nbx < 1) nbx = 1;
    int64_t ppb = (hw + nbx - 1) / nbx;
    nbx = (hw + ppb - 1) / ppb;
    dim3 grid((unsigned)nbx, (unsigned)t);
    size_t shm = (size_t)c * sizeof(float);
    if (shm > 48 * 1024) return cudaErrorInvalidConfiguration;
    const double count = (double)cg * (double)hw;
    unsigned fb = (unsigned)((t * groups + 127) / 128);
    gn_partial_kernel<T, 0><<<grid, GN_THREADS, shm, s>>>(x, hw, c, cg, groups, ppb, NULL, dsum);
    gn_final_kernel<0><<<fb, 128, 0, s>>>(dsum, t, c, cg, groups, count, eps, mean);
    gn_partial_kernel<T, 1><<<grid, GN_THREADS, shm, s>>>(x, hw, c, cg, groups, ppb, mean, dsq);
    gn_final_kernel<1><<<fb, 128, 0, s>>>(dsq, t, c, cg, groups, count, eps, rstd);
    int64_t n = (int64_t)t * hw * c;
    const int N = vec16<T>::N;
    if (c % N == 0 && cu_aligned16(x, y, NULL)) {
        float *coef = rstd + (size_t)t * groups;
        gn_coef_kernel<<<cu_grid((int64_t)t * c, 256), 256, 0, s>>>(mean, rstd, t, c, cg, groups,
                                                                    gw, gb, coef);
        gn_apply_vec_kernel<T><<<cu_grid(n / N, 256), 256, 0, s>>>(x, y, hw, c, t, n / N, coef,
                                                                  act, as);
    } else {
        gn_apply_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(x, y, hw, c, cg, groups, n, mean, rstd,
                                                          gw, gb, act, as);
    }
    return cudaGetLastError();
}

/* the whole-frame path where it fits (wf: gn_wf_ok), else the per-frame one */
template <typename T>
static cudaError_t group_norm(bool wf, cudaStream_t s, const void *xv, void *yv, int t, int64_t hw,
                              int c, int groups, float eps, const float *gw, const float *gb,
                              int act, float as, void *work, int sm_count) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if (wf) return group_norm_wf<T>(s, x, y, t, hw, c, groups, eps, gw, gb, act, as, work, sm_count);
    return group_norm_t<T>(s, x, y, t, hw, c, groups, eps, gw, gb, act, as, work, sm_count);
}

extern "C" cudaError_t cuk_group_norm(cudaStream_t s, int dtype, const void *x, void *y, int t,
                                      int64_t hw, int c, int groups, float eps, const float *g,
                                      const float *b, int act, float act_scale, void *work,
                                      int sm_count) {
    if (t == 0 || hw == 0) return cudaSuccess;
    const bool wf = gn_wf_ok(dtype, c, x, y);
    switch (dtype) {
    case CU_BF16:
        return group_norm<__nv_bfloat16>(wf, s, x, y, t, hw, c, groups, eps, g, b, act, act_scale,
                                         work, sm_count);
    case CU_F16:
        return group_norm<__half>(wf, s, x, y, t, hw, c, groups, eps, g, b, act, act_scale, work,
                                  sm_count);
    default:
        return group_norm<float>(wf, s, x, y, t, hw, c, groups, eps, g, b, act, act_scale, work,
                                 sm_count);
    }
}

/* ---- GroupNorm split across row bands (backend.h norm_stats / norm_apply) ---- */
extern "C" int cuk_group_norm_split_ok(int dtype, int c, const void *x, const void *y) {
    return gn_wf_ok(dtype, c, x, y);
}

extern "C" size_t cuk_group_norm_sums_work(int dtype, int t, int64_t np, int c, int groups,
                                           int sm_count) {
    const int N = dtype == CU_F32 ? 4 : 8, rows = GN_WF_THREADS / (c / N);
    const int64_t nbx = gn_wf_blocks(t, np, rows, sm_count);
    const size_t stat = (size_t)t * groups * sizeof(float2); /* what apply needs */
    const size_t part = (size_t)t * nbx * c * sizeof(float2);
    return part > stat ? part : stat;
}

template <typename T>
static void group_norm_sums_t(cudaStream_t s, const void *xv, int t, int64_t fs, int64_t np, int c,
                              int groups, void *work, int sm_count, double *sums) {
    const int N = vec16<T>::N, cv = c / N, rows = GN_WF_THREADS / cv;
    const int64_t nbx = gn_wf_blocks(t, np, rows, sm_count);
    const int64_t ppb = (np + nbx - 1) / nbx;
    gn_wf_stats_kernel<T>
        <<<dim3((unsigned)nbx, (unsigned)t), GN_WF_THREADS, (size_t)rows * c * sizeof(float2), s>>>(
            (const T *)xv, np, fs, c, ppb, (float2 *)work);
    gn_wf_final_kernel<1><<<dim3((unsigned)groups, (unsigned)t), GN_WF_THREADS, 0, s>>>(
        (const float2 *)work, np, c, c / groups, groups, (int)nbx, ppb, 0.0f, NULL, sums);
}

extern "C" cudaError_t cuk_group_norm_sums(cudaStream_t s, int dtype, const void *x, int t,
                                           int64_t fs, int64_t np, int c, int groups, void *work,
                                           int sm_count, double *sums) {
    if (dtype == CU_BF16)
        group_norm_sums_t<__nv_bfloat16>(s, x, t, fs, np, c, groups, work, sm_count, sums);
    else if (dtype == CU_F16)
        group_norm_sums_t<__half>(s, x, t, fs, np, c, groups, work, sm_count, sums);
    else
        group_norm_sums_t<float>(s, x, t, fs, np, c, groups, work, sm_count, sums);
    return cudaGetLastError();
}

/* stat[k] = (mean, 1/sqrt(var + eps)) from the bands' summed (count, sum, sum of squares) */
static __global__ void gn_sums_stat_kernel(const double *sums, int n, float eps, float2 *stat) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const double cnt = sums[3 * k], m = cnt > 0 ? sums[3 * k + 1] / cnt : 0.0;
    const double var = cnt > 0 ? sums[3 * k + 2] / cnt - m * m : 0.0;
    stat[k] = make_float2((float)m, (float)(1.0 / sqrt((var > 0 ? var : 0.0) + (double)eps)));
}

extern "C" cudaError_t cuk_group_norm_apply(cudaStream_t s, int dtype, const void *x, void *y,
                                            int t, int64_t hw, int c, int groups,
                                            const double *sums, float eps, const float *g,
                                            const float *b, int act, float act_scale, void *work,
                                            int sm_count) {
    const int n = t * groups;
    float2 *st = (float2 *)work;
    gn_sums_stat_kernel<<<(n + 127) / 128, 128, 0, s>>>(sums, n, eps, st);
    if (dtype == CU_BF16)
        return gn_wf_apply<__nv_bfloat16>(s, (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, t, hw, c,
                                          groups, st, g, b, act, act_scale, sm_count);
    if (dtype == CU_F16)
        return gn_wf_apply<__half>(s, (const __half *)x, (__half *)y, t, hw, c, groups, st, g, b,
                                   act, act_scale, sm_count);
    return gn_wf_apply<float>(s, (const float *)x, (float *)y, t, hw, c, groups, st, g, b, act,
                              act_scale, sm_count);
}
