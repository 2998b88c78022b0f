/* cuda_narrow_conv.cu -- narrow convolutions: the heads at a decoder's end (3x3(x3) to <= 8
 * channels, 16-bit) on tensor cores, memory-bound work that cuDNN runs at ~16 TFLOP/s through
 * zero-padded filters (bench/RESULTS.md run 43); and the latent side's 1x1 convs of few channels
 * (at the end of the file).
 *
 * y[j][p][co] = bias[co] (+ res[j][p][co]) + sum over dt < kt, 3x3 taps, ci < c_in of
 *               w[co][dt][dh][dw][ci] * frames[j + dt][p + (dh-1, dw-1)][ci]   (zero outside)
 * as an implicit GEMM: M = output pixels, N = 8 outputs (zero filters above c_out), K = taps x
 * channels, with mma.sync m16n8k16 (float32 accumulation). A block owns ROWS x 16 output pixels
 * of one output frame, one warp per row; per input frame and chunk of 16 channels the
 * (ROWS+2) x 18 input halo and the chunk's 9 tap filters go to shared memory (pixel rows padded to
 * 24 values: conflict-free fragment loads), then each warp runs 9 MMAs. Weights come in the 3-D
 * layout of cuda_conv.c ([kp][kt][3][3][c_in], activation dtype); bias float32 [kp] or NULL.
 */
#include "backends/cuda/cuda_common.cuh"

enum { ROWS = 8, NW = 16, HR = ROWS + 2, HW = NW + 2, NC = 16, PITCH = 24 };

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

template <typename T>
static __global__ void __launch_bounds__(32 * ROWS)
    narrow_conv_kernel(cuk_frames fr, int kt, int h, int w, int c_in, int c_out, const T *wt,
                       const float *bias, const T *res, T *y) {
    __shared__ __align__(16) T xs[HR * HW * PITCH]; /* [halo pixel][channel] of one frame, chunk */
    __shared__ __align__(16) T ws[9 * 8 * PITCH];   /* [tap][output][channel] of the chunk */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int x0 = blockIdx.x * NW, y0 = blockIdx.y * ROWS, j = blockIdx.z;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const T zero = T(0.0f);
    for (int dt = 0; dt < kt; dt++) {
        const T *x = (const T *)fr.p[j + dt];
        for (int c0 = 0; c0 < c_in; c0 += NC) {
            __syncthreads(); /* the previous chunk is consumed */
            /* halo: one 16-byte vector (8 channels) per thread and step */
            for (int i = threadIdx.x; i < HR * HW * 2; i += 32 * ROWS) {
                const int px = i / 2, half = i % 2, hy = y0 + px / HW - 1, hx = x0 + px % HW - 1;
                uint4 v = make_uint4(0, 0, 0, 0);
                if (hy >= 0 && hy < h && hx >= 0 && hx < w)
                    v = *(const uint4 *)(x + ((int64_t)hy * w + hx) * c_in + c0 + half * 8);
                *(uint4 *)(xs + px * PITCH + half * 8) = v;
            }
            for (int i = threadIdx.x; i < 9 * 8 * NC; i += 32 * ROWS) {
                const int c = i % NC, n = (i / NC) % 8, tap = i / (8 * NC);
                ws[(tap * 8 + n) * PITCH + c] =
                    n < c_out ? wt[(((int64_t)n * kt + dt) * 9 + tap) * c_in + c0 + c] : zero;
            }
            __syncthreads();
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
                const T *br = ws + (tap * 8 + g) * PITCH;
                b[0] = *(const uint32_t *)(br + q * 2);
                b[1] = *(const uint32_t *)(br + q * 2 + 8);
                mma_op<T>::run(acc, a, b);
            }
        }
    }
    /* D: pixel g (acc 0, 1) and g + 8 (acc 2, 3), outputs 2q and 2q + 1 */
    const int oy = y0 + warp;
    if (oy >= h) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int ox = x0 + g + 8 * r;
        if (ox >= w) continue;
        const int64_t o = (((int64_t)j * h + oy) * w + ox) * c_out;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int n = 2 * q + e;
            if (n >= c_out) continue;
            float v = acc[2 * r + e] + (bias ? bias[n] : 0.0f);
            if (res) v += cu_ld(res, o + n);
            cu_st(y, o + n, v);
        }
    }
}

extern "C" cudaError_t cuk_narrow_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt,
                                       int t_out, int h, int w, int c_in, int c_out, const void *wt,
                                       const float *bias, const void *res, void *y) {
    if (c_in % NC || c_out < 1 || c_out > CUK_NARROW_MAX || t_out < 1 || t_out > 65535 ||
        (dtype != CU_BF16 && dtype != CU_F16))
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((w + NW - 1) / NW), (unsigned)((h + ROWS - 1) / ROWS),
                    (unsigned)t_out);
    if (dtype == CU_BF16)
        narrow_conv_kernel<__nv_bfloat16>
            <<<grid, 32 * ROWS, 0, s>>>(*frames, kt, h, w, c_in, c_out, (const __nv_bfloat16 *)wt,
                                        bias, (const __nv_bfloat16 *)res, (__nv_bfloat16 *)y);
    else
        narrow_conv_kernel<__half><<<grid, 32 * ROWS, 0, s>>>(*frames, kt, h, w, c_in, c_out,
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
