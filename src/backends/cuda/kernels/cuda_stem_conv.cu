/* cuda_stem_conv.cu -- stem convolutions: an encoder's first conv, from a few input channels (the
 * video's RGB) to many (Wan2.1: 3 -> 96, SeedVR2: 3 -> 128), 3x3(x3), 16-bit, on tensor cores.
 * cuDNN runs Wan2.1's at 35-50 TFLOP/s (0.49-0.71 ms a 4-frame 480x832 step, H100 and H200: its
 * per-block path on 9 channels padded to 16), and an im2col + cuBLAS GEMM did no better: a
 * reduction of 81 wastes most of any kernel made for wide channels.
 *
 * y[j][p][co] = bias[co] (+ res[j][p][co]) + sum over dt < kt, dy, dx < 3, ci < c_in of
 *               w[co][dt][dy][dx][ci] * frames[j + dt][p + (dy-1, dx-1)][ci]   (zero outside)
 * as an implicit GEMM with mma.sync m16n8k16 (float32 accumulation): M = output pixels, N = c_out,
 * and K split by the filter row dy: for each dy, K = (dt, dx, ci), at most 32 values. A block
 * of 8 warps owns 8 x 16 output pixels (a warp one row of 16) of one output frame at a time. It
 * first builds, for the 10 input rows its taps reach, each pixel's row vector
 * v[r][x][(dt * 3 + dx) * c_in + ci] = frames[j + dt][y0 - 1 + r][x + dx - 1][ci] (zero padded to
 * 32 values; 10 x 16 x 40 values with the pitch that keeps ldmatrix free of conflicts), so that
 * the A operand of filter row dy for the warp's row is the block of rows warp + dy: 6 MMAs per
 * 8 outputs, with no im2col of the 81 values of each pixel.
 * The filters sit in shared memory as B[dy][co][(dt * 3 + dx) * c_in + ci] for the whole block.
 * Each thread issues all 20 loads of the next frame's rows before this frame's MMAs and stores
 * them after, into the other of two row buffers (one barrier a frame), and the outputs go in two
 * halves of accumulators, so that two blocks (128 registers) share a multiprocessor. Measured
 * (H200, the two versions on different machines): Wan2.1's 3 -> 96, 0.459 ms a 4-frame 480x832 step
 * (54 TFLOP/s; cuDNN 0.49-0.71), SeedVR2's 3 -> 128 at 720x1248 1.276 ms; the first version (rows
 * loaded and stored value by value, then the MMAs) 0.425 / 1.397: the latency of the loads is not
 * what bounds it. The 4-byte output stores (half a sector each, 307 MB a Wan step at ~700 GB/s) are
 * the next suspect.
 * Weights come in the 3-D layout of cuda_conv_weights.c ([c_out][kt][3][3][c_in], activation
 * dtype); bias float32 [c_out] or NULL.
 */
#include "backends/cuda/kernels/cuda_ptx.cuh"

namespace {
/* NT threads: 8 warps, a row of 16 output pixels each; the rows the block's taps reach */
enum { NT = 256, SR = 8, SW = 16, SHR = SR + 2, KV = 32, KPITCH = KV + 8 };
/* the values of a frame's rows a thread loads: one of each of PASSES pixels */
enum { PASSES = SHR * SW / (NT / KV) };
/* blocks of output frames: one launch's grid z, at most this many frames a block */
enum { STEM_MAX_TPB = 8 };

/* Value kk of a filter row's K (see the file's comment): temporal tap dt, column tap dx, input
 * channel ci; the one place the order (dt, dx, ci) is written, for the rows and the filters. */
struct stem_k {
    int dt, dx, ci;
    __device__ stem_k(int kk, int c_in) : dt(kk / (3 * c_in)), dx(kk / c_in % 3), ci(kk % c_in) {}
};

/* This thread's values of the row vectors of output frame j's taps (see the file's comment):
 * value kk = threadIdx.x % KV of pixel columns c and c + 8 (c = threadIdx.x / KV) of each of the
 * SHR rows, loaded into registers (all before the first is needed: their latency is paid once,
 * under the MMAs of the frame before), then stored into v [SHR][SW][KPITCH]. */
static_assert(NT / KV == 8 && SW == 16, "a thread: two columns of every row");
template <typename T>
__device__ __forceinline__ void stem_rows_load(T (&val)[PASSES], const cuk_frames &fr, int j,
                                               int kt, int c_in, int x0, int y0, int h, int w) {
    const int kk = threadIdx.x % KV;
    const stem_k k(kk, c_in);
    const bool real = kk < kt * 3 * c_in;
    const int xa = x0 + threadIdx.x / KV + k.dx - 1, xb = xa + 8; /* the two columns */
    const bool ina = real && xa >= 0 && xa < w, inb = real && xb >= 0 && xb < w;
    const T *row = (const T *)fr.p[j + (real ? k.dt : 0)] + (int64_t)(ina ? xa : 0) * c_in + k.ci;
    const int dab = ((inb ? xb : 0) - (ina ? xa : 0)) * c_in, stride = w * c_in;
#pragma unroll
    for (int r = 0; r < SHR; r++) {
        const int yy = y0 - 1 + r;
        const bool iy = yy >= 0 && yy < h;
        const T *p = row + (int64_t)(iy ? yy : 0) * stride;
        val[2 * r] = iy && ina ? p[0] : T(0.0f);
        val[2 * r + 1] = iy && inb ? p[dab] : T(0.0f);
    }
}

template <typename T>
__device__ __forceinline__ void stem_rows_store(T *v, const T (&val)[PASSES]) {
    T *d = v + (threadIdx.x / KV) * KPITCH + threadIdx.x % KV;
#pragma unroll
    for (int r = 0; r < SHR; r++) {
        d[(r * SW) * KPITCH] = val[2 * r];
        d[(r * SW + 8) * KPITCH] = val[2 * r + 1];
    }
}

/* Output frame j of the warp's row from v, NN * 8 outputs (wsm: the first one's filter, filter
 * rows dy C_OUT filters apart): acc[n] for its outputs n * 8 + 2q, + 1 of pixels g, g + 8. */
template <typename T, int NN, int C_OUT>
__device__ __forceinline__ void stem_mma(const T *v, const T *wsm, float (&acc)[NN][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[n][e] = 0.0f;
#pragma unroll
    for (int dy = 0; dy < 3; dy++) {
#pragma unroll
        for (int ks = 0; ks < KV / 16; ks++) {
            unsigned a[4]; /* rows: pixels 0..15 of input row warp + dy; k: lane / 16 * 8 */
            cu_ldsm(a, v + ((warp + dy) * SW + lane % 16) * KPITCH + lane / 16 * 8 + ks * 16);
            const T *br = wsm + (dy * C_OUT + g) * KPITCH + ks * 16 + 2 * q;
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const T *b = br + n * 8 * KPITCH;
                cu_mma<T>::run(acc[n], a, *(const unsigned *)b, *(const unsigned *)(b + 8));
            }
        }
    }
}

/* The warp's row oy of output frame j from acc (bias and residual added, then the ReLU where relu):
 * pixels g and g + 8, outputs (n0 + n) * 8 + 2q and + 1, as 16-bit pairs. */
template <typename T, int NN, int C_OUT>
__device__ __forceinline__ void stem_store(const float (&acc)[NN][4], int n0, int j, int x0, int oy,
                                           int h, int w, const float *bias, const T *res, int relu,
                                           T *y) {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int ox = x0 + g + 8 * half;
        if (ox >= w) continue;
        const int64_t o = (((int64_t)j * h + oy) * w + ox) * C_OUT;
#pragma unroll
        for (int n = 0; n < NN; n++) {
            const int co = (n0 + n) * 8 + 2 * q;
            float lo = acc[n][2 * half], hi = acc[n][2 * half + 1];
            if (bias) lo += bias[co], hi += bias[co + 1];
            if (res) lo += cu_ld(res, o + co), hi += cu_ld(res, o + co + 1);
            if (relu) lo = fmaxf(lo, 0.0f), hi = fmaxf(hi, 0.0f);
            *(unsigned *)(y + o + co) = cu_mma<T>::pack(lo, hi);
        }
    }
}

template <typename T, int NN>
__global__ void __launch_bounds__(NT, 2)
    stem_conv_kernel(cuk_frames fr, int t_out, int tpb, int kt, int h, int w, int c_in, const T *wt,
                     const float *bias, const T *res, int relu, T *y) {
    enum { C_OUT = NN * 8, VSIZE = SHR * SW * KPITCH };
    T *v = (T *)cu_dyn_smem(); /* [2][SHR][SW][KPITCH]: output frames in turn */
    T *wsm = v + 2 * VSIZE;    /* [3][C_OUT][KPITCH] */
    const int x0 = blockIdx.x * SW, y0 = blockIdx.y * SR, j0 = blockIdx.z * tpb;
    const int nt = t_out - j0 < tpb ? t_out - j0 : tpb, oy = y0 + threadIdx.x / 32;
    const int K = kt * 3 * c_in;
    /* B[dy][co][(dt * 3 + dx) * c_in + ci] = w[co][dt][dy][dx][ci], zero past K */
    for (int i = threadIdx.x; i < 3 * C_OUT * KV; i += NT) {
        const int kk = i % KV, co = i / KV % C_OUT, dy = i / (KV * C_OUT);
        const stem_k k(kk, c_in);
        wsm[(dy * C_OUT + co) * KPITCH + kk] =
            kk < K ? wt[(((int64_t)co * kt + k.dt) * 9 + dy * 3 + k.dx) * c_in + k.ci] : T(0.0f);
    }
    T val[PASSES];
    stem_rows_load<T>(val, fr, j0, kt, c_in, x0, y0, h, w);
    stem_rows_store<T>(v, val);
    __syncthreads(); /* frame j0's rows and the filters have landed */
    for (int jj = 0; jj < nt; jj++) {
        const int j = j0 + jj;
        /* the next frame's loads go out first, their stores after this frame's MMAs */
        if (jj + 1 < nt) stem_rows_load<T>(val, fr, j + 1, kt, c_in, x0, y0, h, w);
#pragma unroll
        for (int part = 0; part < 2; part++) {
            /* the outputs in two halves: half the accumulators, two blocks a multiprocessor */
            enum { NH = NN / 2 };
            float acc[NH][4];
            stem_mma<T, NH, C_OUT>(v + (jj & 1) * VSIZE, wsm + part * NH * 8 * KPITCH, acc);
            if (oy < h)
                stem_store<T, NH, C_OUT>(acc, part * NH, j, x0, oy, h, w, bias, res, relu, y);
        }
        if (jj + 1 < nt) stem_rows_store<T>(v + ((jj + 1) & 1) * VSIZE, val);
        __syncthreads(); /* frame jj + 1's rows have landed; frame jj's buffer is free again */
    }
}

size_t stem_smem(int c_out, size_t es) {
    return (2 * (size_t)SHR * SW + 3 * (size_t)c_out) * KPITCH * es;
}

/* blocks a launch should have at least before its frames are split among them */
enum { STEM_MIN_BLOCKS = 2048 };

template <typename T, int NN>
cudaError_t stem_launch(cudaStream_t s, const cuk_frames *frames, int kt, int t_out, int h, int w,
                        int c_in, const void *wt, const float *bias, const void *res, int relu,
                        void *y) {
    const size_t smem = stem_smem(NN * 8, sizeof(T));
    cudaError_t e = cudaFuncSetAttribute(stem_conv_kernel<T, NN>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int tiles = ((w + SW - 1) / SW) * ((h + SR - 1) / SR);
    int groups = (STEM_MIN_BLOCKS + tiles - 1) / tiles;
    if (groups < (t_out + STEM_MAX_TPB - 1) / STEM_MAX_TPB)
        groups = (t_out + STEM_MAX_TPB - 1) / STEM_MAX_TPB;
    if (groups > t_out) groups = t_out;
    const int tpb = (t_out + groups - 1) / groups;
    const dim3 grid((unsigned)((w + SW - 1) / SW), (unsigned)((h + SR - 1) / SR),
                    (unsigned)((t_out + tpb - 1) / tpb));
    stem_conv_kernel<T, NN><<<grid, NT, smem, s>>>(
        *frames, t_out, tpb, kt, h, w, c_in, (const T *)wt, bias, (const T *)res, relu, (T *)y);
    return cudaGetLastError();
}

template <typename T>
cudaError_t stem_dispatch(cudaStream_t s, const cuk_frames *frames, int kt, int t_out, int h, int w,
                          int c_in, int c_out, const void *wt, const float *bias, const void *res,
                          int relu, void *y) {
    switch (c_out) {
    case 32: return stem_launch<T, 4>(s, frames, kt, t_out, h, w, c_in, wt, bias, res, relu, y);
    case 64: return stem_launch<T, 8>(s, frames, kt, t_out, h, w, c_in, wt, bias, res, relu, y);
    case 96: return stem_launch<T, 12>(s, frames, kt, t_out, h, w, c_in, wt, bias, res, relu, y);
    default: return stem_launch<T, 16>(s, frames, kt, t_out, h, w, c_in, wt, bias, res, relu, y);
    }
}
} // namespace

extern "C" int cuk_stem_conv_fits(int kt, int c_in, int c_out, int h, int w) {
    return kt >= 1 && kt <= 3 && c_in >= 1 && kt * 3 * c_in <= KV &&
           (c_out == 32 || c_out == 64 || c_out == 96 || c_out == 128) && h >= 1 && w >= 1 &&
           (int64_t)h * w * (c_in > c_out ? c_in : c_out) <= INT32_MAX;
}

extern "C" cudaError_t cuk_stem_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt,
                                     int t_out, int h, int w, int c_in, int c_out, const void *wt,
                                     const float *bias, const void *res, int relu, void *y) {
    if (!cuk_stem_conv_fits(kt, c_in, c_out, h, w) || t_out < 1 || t_out > 65535 * STEM_MAX_TPB ||
        (uintptr_t)y % 4 || (res && (uintptr_t)res % 4) || (dtype != CU_BF16 && dtype != CU_F16))
        return cudaErrorInvalidValue;
    if (dtype == CU_BF16)
        return stem_dispatch<__nv_bfloat16>(s, frames, kt, t_out, h, w, c_in, c_out, wt, bias, res,
                                            relu, y);
    return stem_dispatch<__half>(s, frames, kt, t_out, h, w, c_in, c_out, wt, bias, res, relu, y);
}
