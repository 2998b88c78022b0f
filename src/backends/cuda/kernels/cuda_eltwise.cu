/* cuda_eltwise.cu -- dtype conversion (upload/download), ACT / ADD / SCALE_SHIFT, conv bias init,
 * strided device copies, and the probe kernel that tells whether this binary can run on the
 * device. */
#include "backends/cuda/kernels/cuda_common.cuh"

static __global__ void probe_kernel(int *x) {
    if (x) *x = 1;
}

extern "C" int cuk_probe(void) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, probe_kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

/* ---- strided copies ---- */
/* rows x row_vecs vectors of V, rows dp / sp vectors apart: one thread per vector, so that a
 * narrow row (a strip's slot, a column or two of channels-last frames) keeps every thread busy */
template <typename V>
static __global__ void copy2d_kernel(V *dst, int64_t dp, const V *src, int64_t sp, int64_t row_vecs,
                                     int64_t rows) {
    const int64_t n = row_vecs * rows;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / row_vecs, c = i - r * row_vecs;
        dst[r * dp + c] = src[r * sp + c];
    }
}

template <typename V>
static void launch_copy2d(cudaStream_t s, void *dst, size_t dp, const void *src, size_t sp,
                          size_t row_bytes, size_t rows) {
    const int64_t v = (int64_t)sizeof(V), n = (int64_t)(row_bytes / v) * (int64_t)rows;
    copy2d_kernel<V><<<cu_grid(n, 256), 256, 0, s>>>((V *)dst, (int64_t)dp / v, (const V *)src,
                                                      (int64_t)sp / v, (int64_t)row_bytes / v,
                                                      (int64_t)rows);
}

extern "C" cudaError_t cuk_copy2d(cudaStream_t s, void *dst, size_t dst_pitch, const void *src,
                                  size_t src_pitch, size_t row_bytes, size_t rows) {
    /* the widest vector that every address, pitch and row length is a multiple of */
    const uintptr_t a = (uintptr_t)dst | (uintptr_t)src | dst_pitch | src_pitch | row_bytes;
    if (a % 16 == 0) launch_copy2d<int4>(s, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    else if (a % 8 == 0) launch_copy2d<int2>(s, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    else if (a % 4 == 0) launch_copy2d<int>(s, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    else if (a % 2 == 0) launch_copy2d<short>(s, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    else launch_copy2d<char>(s, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    return cudaGetLastError();
}

/* ---- conversions ---- */
template <typename T> static __global__ void from_f32_kernel(T *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_st(dst, i, src[i]);
}

template <typename T> static __global__ void to_f32_kernel(float *dst, const T *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = cu_ld(src, i);
}

template <typename T>
static void launch_from_f32(cudaStream_t s, void *dst, const float *src, int64_t n) {
    from_f32_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>((T *)dst, src, n);
}
template <typename T>
static void launch_to_f32(cudaStream_t s, float *dst, const void *src, int64_t n) {
    to_f32_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(dst, (const T *)src, n);
}

extern "C" cudaError_t cuk_from_f32(cudaStream_t s, int dtype, void *dst, const float *src,
                                    size_t n) {
    if (n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_from_f32, s, dst, src, (int64_t)n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_to_f32(cudaStream_t s, int dtype, float *dst, const void *src,
                                  size_t n) {
    if (n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_to_f32, s, dst, src, (int64_t)n);
    return cudaGetLastError();
}

/* ---- elementwise ---- */
template <typename T>
static __global__ void eltwise_kernel(int kind, int act, float as, const T *a, const T *b,
                                      const float *w, const float *sh, T *y, int64_t n, int c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = cu_ld(a, i);
        if (kind == 1) {
            v += cu_ld(b, i);
        } else if (kind == 2) {
            int ch = (int)(i % c);
            v = v * (w ? w[ch] : 1.0f) + (sh ? sh[ch] : 0.0f);
        }
        cu_st(y, i, cu_act(act, as, v));
    }
}

/* 16-byte vectors: n % N == 0, aligned pointers, and (scale/shift) c % N == 0 */
template <typename T>
static __global__ void eltwise_vec_kernel(int kind, int act, float as, const T *a, const T *b,
                                          const float *w, const float *sh, T *y, int64_t nvec,
                                          int c) {
    const int N = vec16<T>::N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v[N], u[N];
        vec16<T>::load(a + i * N, v);
        if (kind == 1) {
            vec16<T>::load(b + i * N, u);
#pragma unroll
            for (int k = 0; k < N; k++) v[k] += u[k];
        } else if (kind == 2) {
            int ch = (int)((i * N) % c);
#pragma unroll
            for (int k = 0; k < N; k++)
                v[k] = v[k] * (w ? w[ch + k] : 1.0f) + (sh ? sh[ch + k] : 0.0f);
        }
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = cu_act(act, as, v[k]);
        vec16<T>::store(y + i * N, v);
    }
}

template <typename T>
static void launch_eltwise(cudaStream_t s, int kind, int act, float as, const void *a,
                           const void *b, const float *w, const float *sh, void *y, int64_t n,
                           int c) {
    const int N = vec16<T>::N;
    if (n % N == 0 && (kind != 2 || c % N == 0) && cu_aligned16(a, b, y)) {
        eltwise_vec_kernel<T><<<cu_grid(n / N, 256), 256, 0, s>>>(
            kind, act, as, (const T *)a, (const T *)b, w, sh, (T *)y, n / N, c);
        return;
    }
    eltwise_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(kind, act, as, (const T *)a, (const T *)b,
                                                     w, sh, (T *)y, n, c);
}

extern "C" cudaError_t cuk_eltwise(cudaStream_t s, int dtype, int kind, int act, float act_scale,
                                   const void *a, const void *b, const float *w, const float *sh,
                                   void *y, int64_t n_vox, int c) {
    int64_t n = n_vox * c;
    if (n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_eltwise, s, kind, act, act_scale, a, b, w, sh, y, n, c);
    return cudaGetLastError();
}

/* ---- conv output init: y = bias + residual ---- */
template <typename T>
static __global__ void bias_init_kernel(T *y, const float *bias, const T *res, int64_t n, int c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = bias ? bias[i % c] : 0.0f;
        if (res) v += cu_ld(res, i);
        cu_st(y, i, v);
    }
}

template <typename T>
static __global__ void bias_init_vec_kernel(T *y, const float *bias, const T *res, int64_t nvec,
                                            int c) {
    const int N = vec16<T>::N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v[N];
        if (res) {
            vec16<T>::load(res + i * N, v);
        } else {
#pragma unroll
            for (int k = 0; k < N; k++) v[k] = 0.0f;
        }
        if (bias) {
            int ch = (int)((i * N) % c);
#pragma unroll
            for (int k = 0; k < N; k++) v[k] += bias[ch + k];
        }
        vec16<T>::store(y + i * N, v);
    }
}

template <typename T>
static void launch_bias_init(cudaStream_t s, void *y, const float *bias, const void *res,
                             int64_t n, int c) {
    const int N = vec16<T>::N;
    if (c % N == 0 && cu_aligned16(y, res, NULL)) {
        bias_init_vec_kernel<T><<<cu_grid(n / N, 256), 256, 0, s>>>((T *)y, bias, (const T *)res,
                                                                   n / N, c);
        return;
    }
    bias_init_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>((T *)y, bias, (const T *)res, n, c);
}

extern "C" cudaError_t cuk_bias_init(cudaStream_t s, int dtype, void *y, const float *bias,
                                     const void *res, int64_t rows, int c) {
    int64_t n = rows * c;
    if (n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_bias_init, s, y, bias, res, n, c);
    return cudaGetLastError();
}

/* ---- user layout transfers: planar float32 [c][n] <-> channels-last [n][c] (n = t*h*w) ---- */
template <typename T>
static __global__ void planar_to_act_kernel(const float *src, T *dst, int64_t n, int c) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n;
         p += (int64_t)gridDim.x * blockDim.x)
        for (int ch = 0; ch < c; ch++) cu_st(dst, p * c + ch, src[(int64_t)ch * n + p]);
}

template <typename T>
static __global__ void act_to_planar_kernel(const T *src, float *dst, int64_t n, int c) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n;
         p += (int64_t)gridDim.x * blockDim.x)
        for (int ch = 0; ch < c; ch++) dst[(int64_t)ch * n + p] = cu_ld(src, p * c + ch);
}

template <typename T>
static void launch_planar_to_act(cudaStream_t s, const float *src, void *dst, int64_t n, int c) {
    planar_to_act_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(src, (T *)dst, n, c);
}
template <typename T>
static void launch_act_to_planar(cudaStream_t s, const void *src, float *dst, int64_t n, int c) {
    act_to_planar_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>((const T *)src, dst, n, c);
}

extern "C" cudaError_t cuk_planar_to_act(cudaStream_t s, int dtype, const float *src, void *dst,
                                         int64_t n, int c) {
    if (n == 0 || c == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_planar_to_act, s, src, dst, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_act_to_planar(cudaStream_t s, int dtype, const void *src, float *dst,
                                         int64_t n, int c) {
    if (n == 0 || c == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_act_to_planar, s, src, dst, n, c);
    return cudaGetLastError();
}

/* ---- narrow copy: y[r][k] = src[r][k] (+ res[r][k]), k < c, src rows of cs channels ---- */
template <typename T>
static __global__ void narrow_kernel(const T *src, int cs, const T *res, T *y, int c, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / c;
        const int k = (int)(i % c);
        float v = cu_ld(src, r * cs + k);
        if (res) v += cu_ld(res, i);
        cu_st(y, i, v);
    }
}

template <typename T>
static void launch_narrow(cudaStream_t s, const void *src, int cs, const void *res, void *y, int c,
                          int64_t n) {
    narrow_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>((const T *)src, cs, (const T *)res, (T *)y, c,
                                                    n);
}

extern "C" cudaError_t cuk_narrow(cudaStream_t s, int dtype, const void *src, int cs,
                                  const void *res, void *y, int c, int64_t rows) {
    const int64_t n = rows * c;
    if (n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_narrow, s, src, cs, res, y, c, n);
    return cudaGetLastError();
}

/* ---- conv weight layouts, made on the device from the checkpoint's filters ---- */
/* dst [kp][per] from src [co][ci][kt][kh][kw] (the filters as they are, already in dst's dtype:
 * the host converts them, so that half the bytes cross the bus), per = (three_d ? kt : 1) * kh *
 * kw * width: 3-D: [kt][kh][kw][width] with ci < width; 2-D: [kh][kw][width] with dt * ci + c <
 * width. Filters co..kp-1 and channels past the real ones are zero. */
template <typename T>
static __global__ void weight_layout_kernel(const T *src, T *dst, int co, int kp, int ci, int kt,
                                            int kh, int kw, int three_d, int width) {
    const int64_t per = (int64_t)(three_d ? kt : 1) * kh * kw * width, n = per * kp;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int o = (int)(i / per), x = (int)(i % per % width);
        const int64_t tap = i % per / width; /* 3-D: (dt, dh, dw); 2-D: (dh, dw) */
        const int dw = (int)(tap % kw), dh = (int)(tap / kw % kh);
        const int dt = three_d ? (int)(tap / ((int64_t)kw * kh)) : x / ci;
        const int c = three_d ? x : x % ci;
        const int valid = o < co && (three_d ? x < ci : x < kt * ci);
        dst[i] = valid ? src[((((int64_t)o * ci + c) * kt + dt) * kh + dh) * kw + dw] : T(0.0f);
    }
}

template <typename T>
static void launch_weight_layout(cudaStream_t s, const void *src, void *dst, int co, int kp, int ci,
                                 int kt, int kh, int kw, int three_d, int width) {
    const int64_t n = (int64_t)(three_d ? kt : 1) * kh * kw * width * kp;
    weight_layout_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>((const T *)src, (T *)dst, co, kp, ci,
                                                            kt, kh, kw, three_d, width);
}

extern "C" cudaError_t cuk_weight_layout(cudaStream_t s, int dtype, const void *src, void *dst,
                                         int co, int kp, int ci, int kt, int kh, int kw,
                                         int three_d, int width) {
    CU_DISPATCH(dtype, launch_weight_layout, s, src, dst, co, kp, ci, kt, kh, kw, three_d, width);
    return cudaGetLastError();
}
