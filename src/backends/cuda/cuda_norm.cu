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

template <typename T>
static void launch_rms(cudaStream_t s, const void *x, void *y, int64_t nv, int c, const float *g,
                       const float *b, int act, float as) {
    int64_t blocks = (nv + 7) / 8; /* 8 warps per block */
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

extern "C" size_t cuk_group_norm_work(int t, int c, int groups) {
    return 2 * (size_t)t * c * sizeof(double) + 2 * (size_t)t * groups * sizeof(float);
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
    gn_apply_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(x, y, hw, c, cg, groups, n, mean, rstd, gw,
                                                      gb, act, as);
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
