/* cuda_io.cu -- the caller's device tensors: strided [c][t][h][w] views in any user dtype to and
 * from channels-last activations, and the finiteness check of an input view.
 *
 * One thread per pixel, looping over channels: channels-last reads/writes of a pixel are
 * contiguous, and the view side is coalesced along w when its w stride is 1 (torch's layout). */
#include "backends/cuda/kernels/cuda_common.cuh"

/* dst [n][rows][cols][c] <- view frames [f, f+n), rows [y0, ..), columns [x0, ..) */
template <typename U, typename T>
static __global__ void import_kernel(cuk_view v, T *dst, int f, int n, int y0, int rows, int x0,
                                     int cols) {
    const U *src = (const U *)v.data;
    const int64_t px = (int64_t)n * rows * cols;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < px;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int x = (int)(p % cols), y = (int)(p / cols % rows), j = (int)(p / cols / rows);
        const int64_t base = (int64_t)(f + j) * v.st + (int64_t)(y0 + y) * v.sh + (int64_t)(x0 + x) * v.sw;
        for (int ch = 0; ch < v.c; ch++) cu_st(dst, p * v.c + ch, cu_ld(src, base + ch * v.sc));
    }
}

/* view frames [f, f+t), rows [y0, ..), columns [x0, ..) <- the rows x cols window at (sy, sx) of
 * src [t][h][w][c] */
template <typename U, typename T>
static __global__ void export_kernel(const T *src, int t, int h, int w, int sy, int sx, int rows,
                                     int cols, cuk_view v, int f, int y0, int x0) {
    U *dst = (U *)v.data;
    const int64_t px = (int64_t)t * rows * cols;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < px;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int x = (int)(p % cols), y = (int)(p / cols % rows), j = (int)(p / cols / rows);
        const int64_t s = (((int64_t)j * h + sy + y) * w + sx + x) * v.c;
        const int64_t d = (int64_t)(f + j) * v.st + (int64_t)(y0 + y) * v.sh + (int64_t)(x0 + x) * v.sw;
        for (int ch = 0; ch < v.c; ch++) cu_st(dst, d + ch * v.sc, cu_ld(src, s + ch));
    }
}

/* *first = the smallest linear index ([c][t][h][w]) of a NaN/Inf (stays as it was if none) */
template <typename U>
static __global__ void finite_kernel(cuk_view v, unsigned long long *first) {
    const U *src = (const U *)v.data;
    const int64_t hw = (int64_t)v.h * v.w, n = hw * v.t * v.c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i / (hw * v.t), t = i / hw % v.t, y = i % hw / v.w, x = i % v.w;
        if (!isfinite(cu_ld(src, c * v.sc + t * v.st + y * v.sh + x * v.sw)))
            atomicMin(first, (unsigned long long)i);
    }
}

/* ---- launchers: the view's dtype U, then the activation dtype T ---- */
template <typename U, typename T>
static void import_launch(cudaStream_t s, const cuk_view *v, void *dst, int f, int n, int y0,
                          int rows, int x0, int cols) {
    import_kernel<U, T><<<cu_grid((int64_t)n * rows * cols, 256), 256, 0, s>>>(
        *v, (T *)dst, f, n, y0, rows, x0, cols);
}
template <typename U>
static void import_act(cudaStream_t s, int act, const cuk_view *v, void *dst, int f, int n, int y0,
                       int rows, int x0, int cols) {
    switch (act) {
    case CU_BF16: import_launch<U, __nv_bfloat16>(s, v, dst, f, n, y0, rows, x0, cols); break;
    case CU_F16: import_launch<U, __half>(s, v, dst, f, n, y0, rows, x0, cols); break;
    default: import_launch<U, float>(s, v, dst, f, n, y0, rows, x0, cols); break;
    }
}

template <typename U, typename T>
static void export_launch(cudaStream_t s, const void *src, int t, int h, int w, int sy, int sx,
                          int rows, int cols, const cuk_view *v, int f, int y0, int x0) {
    export_kernel<U, T><<<cu_grid((int64_t)t * rows * cols, 256), 256, 0, s>>>(
        (const T *)src, t, h, w, sy, sx, rows, cols, *v, f, y0, x0);
}
template <typename U>
static void export_act(cudaStream_t s, int act, const void *src, int t, int h, int w, int sy,
                       int sx, int rows, int cols, const cuk_view *v, int f, int y0, int x0) {
    switch (act) {
    case CU_BF16: export_launch<U, __nv_bfloat16>(s, src, t, h, w, sy, sx, rows, cols, v, f, y0, x0); break;
    case CU_F16: export_launch<U, __half>(s, src, t, h, w, sy, sx, rows, cols, v, f, y0, x0); break;
    default: export_launch<U, float>(s, src, t, h, w, sy, sx, rows, cols, v, f, y0, x0); break;
    }
}

template <typename U>
static void finite_launch(cudaStream_t s, const cuk_view *v, unsigned long long *first) {
    finite_kernel<U><<<cu_grid((int64_t)v->c * v->t * v->h * v->w, 256), 256, 0, s>>>(*v, first);
}

extern "C" cudaError_t cuk_view_import(cudaStream_t s, int act, const cuk_view *v, void *dst,
                                       int f, int n, int y0, int rows, int x0, int cols) {
    if ((int64_t)n * rows * cols == 0) return cudaSuccess;
    CU_DISPATCH(v->dtype, import_act, s, act, v, dst, f, n, y0, rows, x0, cols);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_view_export(cudaStream_t s, int act, const void *src, int t, int h,
                                       int w, int sy, int sx, int rows, int cols,
                                       const cuk_view *v, int f, int y0, int x0) {
    if ((int64_t)t * rows * cols == 0) return cudaSuccess;
    CU_DISPATCH(v->dtype, export_act, s, act, src, t, h, w, sy, sx, rows, cols, v, f, y0, x0);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_view_finite(cudaStream_t s, const cuk_view *v,
                                       unsigned long long *first) {
    if ((int64_t)v->c * v->t * v->h * v->w == 0) return cudaSuccess;
    CU_DISPATCH(v->dtype, finite_launch, s, v, first);
    return cudaGetLastError();
}
