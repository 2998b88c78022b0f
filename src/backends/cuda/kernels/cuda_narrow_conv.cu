/* cuda_narrow_conv.cu -- narrow convolutions: the heads at a decoder's end (3x3(x3) to <= 8
 * channels, 16-bit) on tensor cores, memory-bound work that cuDNN runs at ~16 TFLOP/s through
 * zero-padded filters (H100); and the latent side's 1x1 convs of few channels (at the end of the
 * file).
 *
 * y[j][p][co] = bias[co] (+ res[j][p][co]) + sum over dt < kt, 3x3 taps, ci < c_in of
 *               w[co][dt][dh][dw][ci] * frames[j + dt][p + (dh-1, dw-1)][ci]   (zero outside)
 * as an implicit GEMM: M = output pixels, N = 8 outputs, K = taps x channels, with mma.sync
 * m16n8k16 (float32 accumulation). B columns past c_out repeat the last filter: their sums land
 * in accumulator columns that are never stored, so no lane needs a branch or a zero filter.
 *
 * A block of 8 warps owns 16 x 16 output pixels (a warp two rows of 16: each B fragment serves two
 * MMAs) of `tpb` consecutive output frames, and walks its input frames in order, each once: input
 * frame f is temporal tap dt of output frame f - dt, so the warp keeps kt accumulators, acc[dt]
 * for output f - dt, and after frame f writes output f - kt + 1 (complete) and shifts them. The
 * input streams through a 3-stage cp.async ring, a stage being the 18 x 18 halo of one frame,
 * NC channels (rows padded to NC + 8 values: conflict-free ldmatrix), the channel chunks of a
 * frame in consecutive stages; all the filters sit in shared memory from the start. Every
 * address but the stage's base is fixed per thread or a compile-time offset: the first version
 * (a block of 4 output frames, re-reading their 6 input frames) spent 14 instructions an MMA on
 * addressing and predicates and ran at 2.1 of 4 instructions a cycle (ncu).
 * Weights come in the 3-D layout of cuda_conv_weights.c ([kp][kt][3][3][c_in], activation dtype,
 * 16-byte aligned); bias float32 [kp] or NULL.
 *
 * Folded form (c_out <= 4, kt 2 or 3: the RGB heads): the temporal taps go into N too. Column
 * 2q + e of n8 tile t is (output q, tap dt = 2t + e), so lane (g, q) holds all kt taps of output
 * q in its own registers, and the shift after a frame is register moves. Per stage, tap and 16
 * channels a warp issues 2 x ceil(kt / 2) MMAs (3x3x3 to 3: 4 with 9 of 16 columns used) where
 * the plain form issues 2 x kt (6, 3 of 8 used). Taps of outputs outside the block are computed
 * and never stored (their slot is reset before it holds a real output).
 */
#include "backends/cuda/kernels/cuda_ptx.cuh"

/* NT threads; a 16 x 16 tile of outputs, its 18 x 18 input halo; the ring's stages */
enum { NT = 256, TR = 16, TW = 16, HR = TR + 2, HW = TW + 2, HPIX = HR * HW, NSTAGES = 3 };
/* blocks a launch should have at least (2 a multiprocessor resident: 4 waves on an H100) */
enum { NARROW_MIN_BLOCKS = 1024 };
/* shared memory of one launch: the ring [NSTAGES][HPIX][NC + 8] and the filters
 * [kt][9][c_out][c_in + 8], activation dtype */
static size_t narrow_smem(int nc, int kt, int c_in, int c_out, size_t es) {
    return ((size_t)NSTAGES * HPIX * (nc + 8) + (size_t)kt * 9 * c_out * (c_in + 8)) * es;
}
/* the most a block may ask for on every architecture the binary targets (sm_86/89/120: 99 KB) */
#define NARROW_SMEM_MAX ((size_t)96 << 10)

/* One stage: the halo of one frame (NC channels of the chunk; its 16-byte copies fixed per
 * thread: goff[k] the element offset in the frame past c0, -1 outside it) to the ring slot xs. */
template <typename T, int NC, int KPER>
static __device__ __forceinline__ void narrow_halo_load(T *xs, const T *x,
                                                        const int (&goff)[KPER]) {
    enum { PITCH = NC + 8, VPP = NC / 8 };
#pragma unroll
    for (int k = 0; k < KPER; k++) {
        const int i = threadIdx.x + k * NT;
        if (i < HPIX * VPP)
            cu_cp16(xs + (i / VPP) * PITCH + (i % VPP) * 8, goff[k] >= 0 ? x + goff[k] : x,
                    goff[k] >= 0 ? 16 : 0);
    }
}

/* One stage's MMAs: the halo xs of an input frame (channels c0 .. c0 + NC) times the filters of
 * N column tiles, each tile t with `live` bit t set into acc[t]; wb[t]: this lane's filter row of
 * tile t at channel c0 + 2q for tap 0, the taps wrow apart. Plain form: tile dt is temporal tap
 * dt of output f - dt (its row: output g, or the last one past c_out); folded form: below. */
template <typename T, int NC, int N>
static __device__ __forceinline__ void narrow_stage_mma(const T *xs, const T *const (&wb)[N],
                                                        int wrow, unsigned live,
                                                        float (&acc)[N][2][4]) {
    enum { PITCH = NC + 8 };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    /* ldmatrix rows of this lane (cu_ldsm): pixel lpix of the 16, channels lk .. lk + 8 */
    const T *xa =
        xs + (2 * warp * HW + (lane & 7) + ((lane >> 3) & 1) * 8) * PITCH + (lane >> 4) * 8;
#pragma unroll
    for (int tap = 0; tap < 9; tap++) {
#pragma unroll
        for (int kc = 0; kc < NC / 16; kc++) {
            unsigned a[2][4]; /* A: the warp's two rows of 16 pixels shifted by the tap */
#pragma unroll
            for (int r = 0; r < 2; r++)
                cu_ldsm(a[r], xa + ((r + tap / 3) * HW + tap % 3) * PITCH + kc * 16);
#pragma unroll
            for (int t = 0; t < N; t++) {
                if (!(live >> t & 1)) continue;
                const T *br = wb[t] + tap * wrow + kc * 16;
                const unsigned b0 = *(const unsigned *)br, b1 = *(const unsigned *)(br + 8);
                cu_mma<T>::run(acc[t][0], a[0], b0, b1);
                cu_mma<T>::run(acc[t][1], a[1], b0, b1);
            }
        }
    }
}

/* Output frame j (bias and residual added) from this lane's values: pixel g + 8 * half of the
 * warp's row r, outputs n0 + e for e < NE, value v(r, half, e). The plain form: D's pixel g
 * (registers 0, 1) and g + 8 (2, 3), outputs 2q and 2q + 1; the folded form: output q. */
template <typename T, int NE, typename V>
static __device__ __forceinline__ void narrow_store(int j, int n0, V v, int x0, int y0, int h,
                                                    int w, int c_out, const float *bias,
                                                    const T *res, T *y) {
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int oy = y0 + 2 * warp + r;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int ox = x0 + g + 8 * half;
            if (oy >= h || ox >= w) continue;
            const int64_t o = (((int64_t)j * h + oy) * w + ox) * c_out;
#pragma unroll
            for (int e = 0; e < NE; e++) {
                const int n = n0 + e;
                if (n >= c_out) continue;
                float val = v(r, half, e) + (bias ? bias[n] : 0.0f);
                if (res) val += cu_ld(res, o + n);
                cu_st(y, o + n, val);
            }
        }
    }
}

/* Folded form: tap dt of output q lives in tile dt / 2, column 2q + dt % 2; per row r and pixel
 * half (g, g + 8) that is register (dt % 2) + 2 * half of the tile's fragment. */
enum { FOLD_MAX_OUT = 4 };
/* the shapes the folded form takes: its columns hold every (output, tap) pair */
static __host__ __device__ constexpr bool narrow_folds(int kt, int c_out) {
    return kt >= 2 && kt <= 3 && c_out <= FOLD_MAX_OUT;
}
template <int NTL>
static __device__ __forceinline__ float &fold_slot(float (&acc)[NTL][2][4], int dt, int r,
                                                   int half) {
    return acc[dt >> 1][r][(dt & 1) + 2 * half];
}

/* Folded form, frame done: output j (tap KT - 1 of output q: this lane's column) stored, then
 * every tap moves up one and tap 0 (and the unused columns) starts from zero. */
template <typename T, int KT, int NTL>
static __device__ __forceinline__ void narrow_fold_next(float (&acc)[NTL][2][4], int j, int x0,
                                                        int y0, int h, int w, int c_out,
                                                        const float *bias, const T *res, T *y) {
    if (j >= 0)
        narrow_store<T, 1>(
            j, threadIdx.x % 4,
            [&](int r, int half, int) { return fold_slot(acc, KT - 1, r, half); }, x0, y0, h, w,
            c_out, bias, res, y);
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
#pragma unroll
            for (int dt = KT - 1; dt > 0; dt--)
                fold_slot(acc, dt, r, half) = fold_slot(acc, dt - 1, r, half);
#pragma unroll
            for (int dt = 0; dt < 2 * NTL; dt++)
                if (dt == 0 || dt >= KT) fold_slot(acc, dt, r, half) = 0.0f;
        }
}

template <typename T, int NC, int KT, bool FOLD>
static __global__ void __launch_bounds__(NT, 2)
    narrow_conv_kernel(cuk_frames fr, int t_out, int tpb, int h, int w, int c_in, int c_out,
                       const T *wt, const float *bias, const T *res, T *y) {
    enum { STAGE = HPIX * (NC + 8), VPP = NC / 8, KPER = (HPIX * VPP + NT - 1) / NT };
    T *ring = (T *)cu_dyn_smem();    /* [NSTAGES][HPIX][NC + 8] */
    T *wsm = ring + NSTAGES * STAGE; /* [KT * 9][c_out][c_in + 8] */
    const int wp = c_in + 8, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int x0 = blockIdx.x * TW, y0 = blockIdx.y * TR, j0 = blockIdx.z * tpb;
    const int nt = t_out - j0 < tpb ? t_out - j0 : tpb;    /* output frames of this block */
    const int nc = c_in / NC, nstage = (nt + KT - 1) * nc; /* stage s: frame s / nc, chunk s % nc */
    int goff[KPER]; /* this thread's halo copies (narrow_halo_load) */
#pragma unroll
    for (int k = 0; k < KPER; k++) {
        const int i = threadIdx.x + k * NT, px = i / VPP;
        const int hy = y0 - 1 + px / HW, hx = x0 - 1 + px % HW;
        goff[k] = i < HPIX * VPP && hy >= 0 && hy < h && hx >= 0 && hx < w
                      ? (hy * w + hx) * c_in + (i % VPP) * 8
                      : -1;
    }
    /* all the filters, with the first stage's group */
    for (int i = threadIdx.x; i < KT * 9 * c_out * (c_in / 8); i += NT) {
        const int r = i / (c_in / 8), v = i % (c_in / 8), n = r % c_out, dtap = r / c_out;
        cu_cp16(wsm + r * wp + v * 8, wt + ((int64_t)n * KT * 9 + dtap) * c_in + v * 8, 16);
    }
    for (int s = 0; s < NSTAGES - 1; s++) {
        if (s < nstage)
            narrow_halo_load<T, NC>(ring + s * STAGE, (const T *)fr.p[j0 + s / nc] + s % nc * NC,
                                    goff);
        cu_cp_commit();
    }
    /* column tiles: the plain form's tile dt holds tap dt of output g; the folded form's tile t
     * (output g / 2, tap 2t + g % 2) */
    enum { N = FOLD ? (KT + 1) / 2 : KT };
    float acc[N][2][4] = {}; /* plain: acc[dt] output frame f - dt of input frame f */
    const T *wb[N];          /* tile t's filter row, tap 0, channel 2q (narrow_stage_mma) */
#pragma unroll
    for (int t = 0; t < N; t++) {
        const int co = min(FOLD ? g / 2 : g, c_out - 1), dt = min(FOLD ? 2 * t + g % 2 : t, KT - 1);
        wb[t] = wsm + (dt * 9 * c_out + co) * wp + 2 * q;
    }
    for (int u = 0; u < nstage; u++) {
        cu_cp_wait<NSTAGES - 2>();
        __syncthreads(); /* stage u has landed for all; the slot of stage u - 1 is consumed */
        const int s = u + NSTAGES - 1;
        if (s < nstage)
            narrow_halo_load<T, NC>(ring + s % NSTAGES * STAGE,
                                    (const T *)fr.p[j0 + s / nc] + s % nc * NC, goff);
        cu_cp_commit();
        const int f = u / nc, ci = u % nc;
        const T *wc[N];
#pragma unroll
        for (int t = 0; t < N; t++)
            wc[t] = wb[t] + ci * NC;
        const T *xs = ring + u % NSTAGES * STAGE;
        if constexpr (FOLD) { /* every tap: those of outputs outside the block are never stored */
            narrow_stage_mma<T, NC, N>(xs, wc, c_out * wp, (1u << N) - 1, acc);
            if (ci + 1 == nc)
                narrow_fold_next<T, KT, N>(acc, f - (KT - 1) >= 0 ? j0 + f - (KT - 1) : -1, x0, y0,
                                           h, w, c_out, bias, res, y);
            continue;
        }
        /* the outputs f - dt that exist: all kt of them but near the block's first and last */
        unsigned live = 0;
#pragma unroll
        for (int dt = 0; dt < KT; dt++)
            live |= (unsigned)(f - dt >= 0 && f - dt < nt) << dt;
        if (live == (1u << KT) - 1)
            narrow_stage_mma<T, NC, N>(xs, wc, c_out * wp, (1u << KT) - 1, acc);
        else
            narrow_stage_mma<T, NC, N>(xs, wc, c_out * wp, live, acc);
        if (ci + 1 < nc) continue;
        /* frame f done: output f - KT + 1 is complete; the others move up a tap */
        if (f - (KT - 1) >= 0)
            narrow_store<T, 2>(
                j0 + f - (KT - 1), 2 * q,
                [&](int r, int half, int e) { return acc[KT - 1][r][2 * half + e]; }, x0, y0, h, w,
                c_out, bias, res, y);
#pragma unroll
        for (int dt = KT - 1; dt > 0; dt--)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[dt][r][e] = acc[dt - 1][r][e];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[0][r][e] = 0.0f;
    }
}

/* One launch with NC channels a stage: output frames split among blocks only where the 16 x 16
 * tiles alone would leave the GPU short of blocks (each block then re-reads kt - 1 frames). */
template <typename T, int NC, int KT, bool FOLD>
static cudaError_t narrow_launch(cudaStream_t s, const cuk_frames *frames, int t_out, int h, int w,
                                 int c_in, int c_out, const void *wt, const float *bias,
                                 const void *res, void *y) {
    const size_t smem = narrow_smem(NC, KT, c_in, c_out, sizeof(T));
    cudaError_t e = cudaFuncSetAttribute(narrow_conv_kernel<T, NC, KT, FOLD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int tiles = ((w + TW - 1) / TW) * ((h + TR - 1) / TR);
    int groups = (NARROW_MIN_BLOCKS + tiles - 1) / tiles;
    if (groups > t_out) groups = t_out;
    const int tpb = (t_out + groups - 1) / groups;
    const dim3 grid((unsigned)((w + TW - 1) / TW), (unsigned)((h + TR - 1) / TR),
                    (unsigned)((t_out + tpb - 1) / tpb));
    narrow_conv_kernel<T, NC, KT, FOLD><<<grid, NT, smem, s>>>(
        *frames, t_out, tpb, h, w, c_in, c_out, (const T *)wt, bias, (const T *)res, (T *)y);
    return cudaGetLastError();
}

/* 32 channels a stage where they divide c_in and fit the shared memory (the heads: 3 outputs of
 * 96 or 128 channels), else 16. */
template <typename T, int KT, bool FOLD>
static cudaError_t narrow_dispatch_nc(cudaStream_t s, const cuk_frames *frames, int t_out, int h,
                                      int w, int c_in, int c_out, const void *wt, const float *bias,
                                      const void *res, void *y) {
    if (c_in % 32 == 0 && narrow_smem(32, KT, c_in, c_out, sizeof(T)) <= NARROW_SMEM_MAX)
        return narrow_launch<T, 32, KT, FOLD>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res,
                                              y);
    return narrow_launch<T, 16, KT, FOLD>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res, y);
}

/* The folded form where it takes the shape (narrow_folds), else the plain one. */
template <typename T, int KT>
static cudaError_t narrow_dispatch_fold(cudaStream_t s, const cuk_frames *frames, int t_out, int h,
                                        int w, int c_in, int c_out, const void *wt,
                                        const float *bias, const void *res, void *y) {
    if (narrow_folds(KT, c_out))
        return narrow_dispatch_nc<T, KT, true>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res,
                                               y);
    return narrow_dispatch_nc<T, KT, false>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res, y);
}

template <typename T>
static cudaError_t narrow_dispatch(cudaStream_t s, const cuk_frames *frames, int kt, int t_out,
                                   int h, int w, int c_in, int c_out, const void *wt,
                                   const float *bias, const void *res, void *y) {
    if (kt == 3)
        return narrow_dispatch_fold<T, 3>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res, y);
    if (kt == 2)
        return narrow_dispatch_fold<T, 2>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res, y);
    return narrow_dispatch_nc<T, 1, false>(s, frames, t_out, h, w, c_in, c_out, wt, bias, res, y);
}

extern "C" int cuk_narrow_conv_fits(int kt, int c_in, int c_out, int h, int w) {
    return c_in >= 16 && c_in % 16 == 0 && c_out >= 1 && c_out <= CUK_NARROW_MAX && kt >= 1 &&
           kt <= CUK_NARROW_KT && narrow_smem(16, kt, c_in, c_out, 2) <= NARROW_SMEM_MAX &&
           h >= 1 && w >= 1 && (int64_t)h * w * c_in <= INT32_MAX; /* int offsets in a frame */
}

extern "C" cudaError_t cuk_narrow_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt,
                                       int t_out, int h, int w, int c_in, int c_out, const void *wt,
                                       const float *bias, const void *res, void *y) {
    if (!cuk_narrow_conv_fits(kt, c_in, c_out, h, w) || t_out < 1 || t_out > 65535 ||
        (uintptr_t)wt % 16 || (dtype != CU_BF16 && dtype != CU_F16))
        return cudaErrorInvalidValue;
    if (dtype == CU_BF16)
        return narrow_dispatch<__nv_bfloat16>(s, frames, kt, t_out, h, w, c_in, c_out, wt, bias,
                                              res, y);
    return narrow_dispatch<__half>(s, frames, kt, t_out, h, w, c_in, c_out, wt, bias, res, y);
}

/* ---- pointwise (1x1x1) convs with few channels ----------------------------------------------
 * The latent-side 1x1 convs (Wan's conv2 16 -> 16, 48 -> 48 for Wan2.2, the encoder's 32 -> 32):
 * a few MACs per byte, so one thread per pixel on the CUDA cores runs them at memory speed, and
 * the process needs no cuDNN for them (cuDNN's first use costs a process ~0.3 s).
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
