/* cuda_narrow_conv.cu -- narrow convolutions: the heads at a decoder's end (3x3(x3) to <= 8
 * channels, 16-bit) on tensor cores, memory-bound work that cuDNN runs at ~16 TFLOP/s through
 * zero-padded filters (bench/RESULTS.md run 43); and the latent side's 1x1 convs of few channels
 * (at the end of the file).
 *
 * y[j][p][co] = bias[co] (+ res[j][p][co]) + sum over dt < kt, 3x3 taps, ci < c_in of
 *               w[co][dt][dh][dw][ci] * frames[j + dt][p + (dh-1, dw-1)][ci]   (zero outside)
 * as an implicit GEMM: M = output pixels, N = 8 outputs (zero filters above c_out), K = taps x
 * channels, with mma.sync m16n8k16 (float32 accumulation). A block owns ROWS x 16 output pixels
 * of TT consecutive output frames, one warp per row. Per chunk of 16 channels the kt x 9 tap
 * filters go to shared memory, then each of the TT + kt - 1 input frames the block's outputs read:
 * its (ROWS+2) x 18 input halo (pixel rows padded to 24 values: conflict-free fragment loads),
 * and each warp runs 9 MMAs for every output frame that frame is a tap of, while the next halo
 * comes from global memory into registers. An input frame is read once for TT outputs instead
 * of kt times (the head is memory-bound: the input is ~100x its output; TT = 4 and the loads
 * overlapping the MMAs took Wan2.1's 96 -> 3 head from 1.06 to 0.69 ms a 4-frame step, runs 93-94).
 * Weights come in the 3-D layout of cuda_conv_weights.c ([kp][kt][3][3][c_in], activation dtype);
 * bias float32 [kp] or NULL.
 */
#include "backends/cuda/cuda_common.cuh"

enum { ROWS = 8, NW = 16, HR = ROWS + 2, HW = NW + 2, NC = 16, PITCH = 24, TT = 4 };

template <typename T> struct mma_op;
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

/* The 9 taps of one input frame's halo (xs) with one temporal tap's filters (wd) into acc. */
template <typename T>
static __device__ __forceinline__ void narrow_taps(const T *xs, const T *wd, int warp, int g, int q,
                                                   float *acc) {
#pragma unroll
    for (int tap = 0; tap < 9; tap++) {
        const int dh = tap / 3, dw = tap % 3;
        /* A: rows = the warp's 16 output pixels shifted by the tap, cols = channels */
        const T *ar = xs + ((warp + dh) * HW + dw) * PITCH;
        uint32_t a[4], b[2];
        a[0] = *(const uint32_t *)(ar + g * PITCH + q * 2);
        a[1] = *(const uint32_t *)(ar + (g + 8) * PITCH + q * 2);
        a[2] = *(const uint32_t *)(ar + g * PITCH + q * 2 + 8);
        a[3] = *(const uint32_t *)(ar + (g + 8) * PITCH + q * 2 + 8);
        /* B: rows = channels (k), cols = outputs (n = g) */
        const T *br = wd + (tap * 8 + g) * PITCH;
        b[0] = *(const uint32_t *)(br + q * 2);
        b[1] = *(const uint32_t *)(br + q * 2 + 8);
        mma_op<T>::run(acc, a, b);
    }
}

/* A halo's 16-byte vectors (8 channels each), HALO_V of them, HALO_PER per thread at most. */
enum { HALO_V = HR * HW * 2, HALO_PER = (HALO_V + 32 * ROWS - 1) / (32 * ROWS) };

/* This thread's vectors of the halo of frame x, channels c0 .. c0+15 (zeros outside the frame),
 * into registers: loaded while the block computes on the previous halo. */
template <typename T>
static __device__ __forceinline__ void halo_load(uint4 *v, const T *x, int c0, int x0, int y0,
                                                 int h, int w, int c_in) {
#pragma unroll
    for (int k = 0; k < HALO_PER; k++) {
        const int i = threadIdx.x + k * 32 * ROWS;
        const int px = i / 2, half = i % 2, hy = y0 + px / HW - 1, hx = x0 + px % HW - 1;
        v[k] = make_uint4(0, 0, 0, 0);
        if (i < HALO_V && hy >= 0 && hy < h && hx >= 0 && hx < w)
            v[k] = *(const uint4 *)(x + ((int64_t)hy * w + hx) * c_in + c0 + half * 8);
    }
}

template <typename T> static __device__ __forceinline__ void halo_store(T *xs, const uint4 *v) {
#pragma unroll
    for (int k = 0; k < HALO_PER; k++) {
        const int i = threadIdx.x + k * 32 * ROWS;
        if (i < HALO_V) *(uint4 *)(xs + (i / 2) * PITCH + (i % 2) * 8) = v[k];
    }
}

template <typename T>
static __global__ void __launch_bounds__(32 * ROWS)
    narrow_conv_kernel(cuk_frames fr, int kt, int t_out, int h, int w, int c_in, int c_out,
                       const T *wt, const float *bias, const T *res, T *y) {
    __shared__ __align__(16) T xs[HR * HW * PITCH]; /* [halo pixel][channel] of one frame, chunk */
    __shared__ __align__(16) T ws[CUK_NARROW_KT * 9 * 8 * PITCH]; /* [dt][tap][output][channel] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int x0 = blockIdx.x * NW, y0 = blockIdx.y * ROWS, j0 = blockIdx.z * TT;
    const int nt = t_out - j0 < TT ? t_out - j0 : TT; /* output frames of this block */
    const int nf = nt + kt - 1;                       /* input frames they read */
    float acc[TT][4] = {};
    const T zero = T(0.0f);
    uint4 next[HALO_PER]; /* the next halo, on its way from global memory */
    halo_load<T>(next, (const T *)fr.p[j0], 0, x0, y0, h, w, c_in);
    for (int c0 = 0; c0 < c_in; c0 += NC) {
        __syncthreads(); /* the previous chunk's filters are consumed */
        for (int i = threadIdx.x; i < kt * 9 * 8 * NC; i += 32 * ROWS) {
            const int c = i % NC, n = (i / NC) % 8, tap = i / (8 * NC) % 9, dt = i / (9 * 8 * NC);
            ws[((dt * 9 + tap) * 8 + n) * PITCH + c] =
                n < c_out ? wt[(((int64_t)n * kt + dt) * 9 + tap) * c_in + c0 + c] : zero;
        }
        for (int f = 0; f < nf; f++) {  /* input frame j0 + f */
            if (f > 0) __syncthreads(); /* the previous halo is consumed */
            halo_store<T>(xs, next);
            __syncthreads();
            if (f + 1 < nf)
                halo_load<T>(next, (const T *)fr.p[j0 + f + 1], c0, x0, y0, h, w, c_in);
            else if (c0 + NC < c_in)
                halo_load<T>(next, (const T *)fr.p[j0], c0 + NC, x0, y0, h, w, c_in);
                /* output frame j0 + tt reads this frame as its temporal tap dt = f - tt */
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                const int dt = f - tt;
                if (tt < nt && dt >= 0 && dt < kt)
                    narrow_taps<T>(xs, ws + dt * 9 * 8 * PITCH, warp, g, q, acc[tt]);
            }
        }
    }
    /* D: pixel g (acc 0, 1) and g + 8 (acc 2, 3), outputs 2q and 2q + 1 */
    const int oy = y0 + warp;
    if (oy >= h) return;
#pragma unroll
    for (int tt = 0; tt < TT; tt++) {
        if (tt >= nt) break;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int ox = x0 + g + 8 * r;
            if (ox >= w) continue;
            const int64_t o = (((int64_t)(j0 + tt) * h + oy) * w + ox) * c_out;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int n = 2 * q + e;
                if (n >= c_out) continue;
                float v = acc[tt][2 * r + e] + (bias ? bias[n] : 0.0f);
                if (res) v += cu_ld(res, o + n);
                cu_st(y, o + n, v);
            }
        }
    }
}

extern "C" cudaError_t cuk_narrow_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt,
                                       int t_out, int h, int w, int c_in, int c_out, const void *wt,
                                       const float *bias, const void *res, void *y) {
    if (c_in % NC || c_out < 1 || c_out > CUK_NARROW_MAX || kt < 1 || kt > CUK_NARROW_KT ||
        t_out < 1 || (t_out + TT - 1) / TT > 65535 || (dtype != CU_BF16 && dtype != CU_F16))
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((w + NW - 1) / NW), (unsigned)((h + ROWS - 1) / ROWS),
                    (unsigned)((t_out + TT - 1) / TT));
    if (dtype == CU_BF16)
        narrow_conv_kernel<__nv_bfloat16><<<grid, 32 * ROWS, 0, s>>>(
            *frames, kt, t_out, h, w, c_in, c_out, (const __nv_bfloat16 *)wt, bias,
            (const __nv_bfloat16 *)res, (__nv_bfloat16 *)y);
    else
        narrow_conv_kernel<__half><<<grid, 32 * ROWS, 0, s>>>(*frames, kt, t_out, h, w, c_in, c_out,
                                                              (const __half *)wt, bias,
                                                              (const __half *)res, (__half *)y);
    return cudaGetLastError();
}

/* ---- pointwise (1x1x1) convs with few channels ----------------------------------------------
 * The latent-side 1x1 convs (Wan's conv2 16 -> 16, 48 -> 48 for Wan2.2, the encoder's 32 -> 32):
 * a few MACs per byte, so one thread per pixel on the CUDA cores runs them at memory speed, and
 * the process needs no cuDNN for them (cuDNN's first use costs a process ~0.3 s, run 81).
 * y[p][co] = bias[co] (+ res[p][co]) + sum over ci of w[co][ci] * x[p][ci], float32 sums. */
template <typename T>
__global__ void pointwise_conv_kernel(cuk_frames frames, int64_t hw, int c_in, int c_out,
                                      const T *__restrict__ wt, const float *__restrict__ bias,
                                      const T *res, T *y) {
    __shared__ float ws[CUK_POINTWISE_MAX * CUK_POINTWISE_MAX];
    __shared__ float bs[CUK_POINTWISE_MAX];
    for (int i = threadIdx.x; i < c_in * c_out; i += blockDim.x)
        ws[i] = cu_ld(wt, i);
    for (int i = threadIdx.x; i < c_out; i += blockDim.x)
        bs[i] = bias ? bias[i] : 0.0f;
    __syncthreads();
    const int j = blockIdx.y;
    const T *x = (const T *)frames.p[j];
    float xv[CUK_POINTWISE_MAX];
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < hw;
         p += (int64_t)gridDim.x * blockDim.x) {
        for (int c = 0; c < c_in; c++)
            xv[c] = cu_ld(x, p * c_in + c);
        const int64_t o = ((int64_t)j * hw + p) * c_out;
        for (int n = 0; n < c_out; n++) {
            float v = bs[n];
            const float *wr = ws + n * c_in;
            for (int c = 0; c < c_in; c++)
                v = fmaf(wr[c], xv[c], v);
            if (res) v += cu_ld(res, o + n);
            cu_st(y, o + n, v);
        }
    }
}

template <typename T>
static void pointwise_launch(cudaStream_t s, const cuk_frames *frames, int nf, int64_t hw, int c_in,
                             int c_out, const void *wt, const float *bias, const void *res,
                             void *y) {
    const dim3 grid(cu_grid(hw, 256), (unsigned)nf);
    pointwise_conv_kernel<T><<<grid, 256, 0, s>>>(*frames, hw, c_in, c_out, (const T *)wt, bias,
                                                  (const T *)res, (T *)y);
}

extern "C" cudaError_t cuk_pointwise_conv(cudaStream_t s, int dtype, const cuk_frames *frames,
                                          int nf, int64_t hw, int c_in, int c_out, const void *wt,
                                          const float *bias, const void *res, void *y) {
    if (nf < 1 || nf > CUK_MAX_FRAMES || c_in < 1 || c_out < 1 || c_in > CUK_POINTWISE_MAX ||
        c_out > CUK_POINTWISE_MAX || hw < 1)
        return cudaErrorInvalidValue;
    CU_DISPATCH(dtype, pointwise_launch, s, frames, nf, hw, c_in, c_out, wt, bias, res, y);
    return cudaGetLastError();
}
