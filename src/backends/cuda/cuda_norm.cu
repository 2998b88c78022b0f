/* cuda_norm.cu -- RMS_NORM (per voxel, over channels) and GROUP_NORM (per frame), fused act.
 *
 * RMS: one warp per voxel; the sum of squares is reduced with shuffles in float32.
 * GroupNorm: statistics in two passes like the CPU reference (mean, then mean of squared
 * deviations), so that |mean| >> std stays accurate:
 *   partial sums per (frame, channel) over blocks of pixels: float32 per thread, float32 shared
 *   atomics per block, float64 global atomics; then one thread per (frame, group) finalises
 *   mean (pass 1) or rstd (pass 2); the last kernel normalises, applies w/b and the act.
 */
#include "backends/cuda/cuda_common.cuh"

/* ---- RMS ---- */
template <typename T>
static __global__ void rms_kernel(const T *x, T *y, int64_t nv, int c, const float *g,
                                  const float *b, int act, float as) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const float sqc = sqrtf((float)c);
    for (int64_t v = warp; v < nv; v += nw) {
        const T *xv = x + v * c;
        T *yv = y + v * c;
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
template <typename T, int L>
static __global__ void rms_vec_kernel(const T *x, T *y, int64_t nv, int c, const float *g,
                                      const float *b, int act, float as) {
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
                vec16<T>::load(x + v * c + (int64_t)idx * N, r[k]);
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
                vec16<T>::store(y + v * c + (int64_t)idx * N, r[k]);
            }
        }
    }
}

template <typename T, int L>
static void launch_rms_vec(cudaStream_t s, const void *x, void *y, int64_t nv, int c,
                           const float *g, const float *b, int act, float as) {
    int64_t warps = (nv + 32 / L - 1) / (32 / L), blocks = (warps + 7) / 8;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    rms_vec_kernel<T, L><<<(unsigned)blocks, 256, 0, s>>>((const T *)x, (T *)y, nv, c, g, b, act,
                                                         as);
}

template <typename T>
static void launch_rms(cudaStream_t s, const void *x, void *y, int64_t nv, int c, const float *g,
                       const float *b, int act, float as) {
    const int N = vec16<T>::N, cv = c / N;
    if (c % N == 0 && cv <= 32 * RMS_MAXV && cu_aligned16(x, y, NULL)) {
        int L = 1;
        while (L < 32 && L * RMS_MAXV < cv) L <<= 1; /* enough lanes for the vectors */
        while (L < 32 && L < cv && L < 8) L <<= 1;   /* and some parallelism per voxel */
        switch (L) {
        case 1: launch_rms_vec<T, 1>(s, x, y, nv, c, g, b, act, as); return;
        case 2: launch_rms_vec<T, 2>(s, x, y, nv, c, g, b, act, as); return;
        case 4: launch_rms_vec<T, 4>(s, x, y, nv, c, g, b, act, as); return;
        case 8: launch_rms_vec<T, 8>(s, x, y, nv, c, g, b, act, as); return;
        case 16: launch_rms_vec<T, 16>(s, x, y, nv, c, g, b, act, as); return;
        default: launch_rms_vec<T, 32>(s, x, y, nv, c, g, b, act, as); return;
        }
    }
    int64_t blocks = (nv + 7) / 8; /* scalar: one warp per voxel, 8 warps per block */
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    rms_kernel<T><<<(unsigned)blocks, 256, 0, s>>>((const T *)x, (T *)y, nv, c, g, b, act, as);
}

extern "C" cudaError_t cuk_rms_norm(cudaStream_t s, int dtype, const void *x, void *y,
                                    int64_t n_vox, int c, const float *g, const float *b, int act,
                                    float act_scale) {
    if (n_vox == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_rms, s, x, y, n_vox, c, g, b, act, act_scale);
    return cudaGetLastError();
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

extern "C" size_t cuk_group_norm_work(int t, int c, int groups) {
    return 2 * (size_t)t * c * sizeof(double) + 2 * (size_t)t * groups * sizeof(float) +
           3 * (size_t)t * c * sizeof(float);
}

template <typename T>
static cudaError_t group_norm_t(cudaStream_t s, const void *xv, void *yv, int t, int64_t hw, int c,
                                int groups, float eps, const float *gw, const float *gb, int act,
                                float as, void *work, int sm_count) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
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

extern "C" cudaError_t cuk_group_norm(cudaStream_t s, int dtype, const void *x, void *y, int t,
                                      int64_t hw, int c, int groups, float eps, const float *g,
                                      const float *b, int act, float act_scale, void *work,
                                      int sm_count) {
    if (t == 0 || hw == 0) return cudaSuccess;
    switch (dtype) {
    case CU_BF16:
        return group_norm_t<__nv_bfloat16>(s, x, y, t, hw, c, groups, eps, g, b, act, act_scale,
                                           work, sm_count);
    case CU_F16:
        return group_norm_t<__half>(s, x, y, t, hw, c, groups, eps, g, b, act, act_scale, work,
                                    sm_count);
    default:
        return group_norm_t<float>(s, x, y, t, hw, c, groups, eps, g, b, act, act_scale, work,
                                   sm_count);
    }
}
