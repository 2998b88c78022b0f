/* cuda_mma_conv.cu -- implicit-GEMM convolution on mma.sync (sm_80+), the engine's own conv
 * kernel for the GPUs without the sm_90a ones (cutlass/, sm90/): Ampere (sm_80/86), Ada (sm_89:
 * RTX 40), consumer Blackwell (sm_120: RTX 50); on Hopper only under VAE_CUDA_MMA=1 (how the
 * device tool's H100 / H200 test it). Two forms of one template:
 * - 16-bit operands (bf16, fp16): the tuner's implicit-GEMM candidate (PATH_IGEMM) there, timed
 *   beside cuDNN's paths per shape;
 * - E4M3 operands (sm_89+): dtype fp8's convs. cuDNN's FP8 3-D convs are slower than its bf16 ones,
 *   and these VAEs' users mostly run RTX 40 / 50 cards, whose E4M3 MMAs with float32 accumulation
 *   run at twice their bf16 rate. (Hopper has no native mma.sync on E4M3: it converts to fp16
 *   there, so its timings say nothing about Ada's.)
 *
 * The GEMM: M = output pixels (t_out x ho x wo of the window's output), N = c_out filters, K =
 * kt x kh x kw x c_in in k-blocks of BK channels of one tap (dt, dy, dx). A block computes a
 * 128 x BN tile (BN 96 or 128, the filter tile dividing c_out where one does) with 8 warps of
 * 32 x BN / 2; both operands pass through shared memory by cp.async (16-byte chunks: 8 16-bit or
 * 16 E4M3 channels; an A row is one output pixel's input at the tap, zero-filled outside the
 * frame: the spatial padding; a B row one filter's), in a ring of STAGES k-blocks (48 KB: two
 * blocks a multiprocessor on Ada's 100 KB), each row's chunks XOR-swizzled so that ldmatrix reads
 * 8 rows without bank conflicts. A warp's step over two chunks: 2 ldmatrix.x4 of A (two m16
 * tiles), BN / 32 of B, 2 x BN / 16 mma.sync (m16n8k16 on 16-bit, m16n8k32 on E4M3: their
 * fragments are the same bytes, so ldmatrix's b16 matrices serve both).
 * Epilogue from the accumulators: y = acc (x scale[n], E4M3) + bias[n] + res in float32, rounded
 * once to the 16-bit output (the CPU emulation's order, cpu_conv.c); res may be y.
 */
#include <cuda_fp8.h>

#include "backends/cuda/kernels/cuda_ptx.cuh"
#include "core/fp8_shapes.h"

/* the shared memory a block's ring of stages takes: 48 KB (two blocks a multiprocessor on Ada).
 * bench/mma_conv_probe.cu builds other sizes: on the H200, 64 and 96 KB ran within 4% of it, so
 * the kernel is not waiting for its loads there. */
#ifndef MMA_CONV_SMEM
#define MMA_CONV_SMEM (48 * 1024)
#endif
/* bench/mma_conv_probe.cu's ablations, for timings only (the output is wrong): 1 leaves A's loads
 * out, 2 B's, 4 the MMAs; 0 in the engine */
#ifndef MMA_CONV_LAB
#define MMA_CONV_LAB 0
#elif MMA_CONV_LAB != 0 && !defined(MMA_CONV_PROBE)
#error "MMA_CONV_LAB makes the kernel's output wrong: bench/mma_conv_probe.cu's builds only"
#endif

namespace mmaconv {
typedef __nv_fp8_e4m3 e4m3;
enum {
    BM = 128,      /* output pixels a tile */
    THREADS = 256, /* 8 warps: 4 along M x 2 along N */
    SMEM = MMA_CONV_SMEM,
};

/* T: the operands (16 bytes a chunk: EPC channels), BN: filters a tile, KC: chunks a k-block row
 * (4: c_in a multiple of 4 EPC channels, 2: of 2 EPC) */
template <typename T, int BN, int KC> struct cfg {
    static constexpr int EPC = 16 / (int)sizeof(T);
    static constexpr int BK = KC * EPC; /* channels a k-block */
    static constexpr int ROW = KC * 16; /* bytes a row of a stage */
    static constexpr int A_BYTES = BM * ROW;
    static constexpr int STAGE = (BM + BN) * ROW;
    static constexpr int STAGES = SMEM / STAGE; /* 48 KB: KC 4: 3, KC 2: 6 */
    static constexpr int WN = BN / 2;           /* a warp's filters */
    static constexpr int NT = WN / 8;           /* its n8 tiles: 6 or 8 */
};

/* chunk c of row r in a stage: rows of KC chunks, chunk c ^ (r KC / 8) % KC, so that the 8 rows
 * of one ldmatrix matrix (same logical chunk) land in 8 distinct 16-byte bank groups */
template <int KC> static __device__ __forceinline__ int chunk_at(int r, int c) {
    return r * KC * 16 + ((c ^ (r * KC / 8 % KC)) * 16);
}

struct args {
    const void *x;      /* [t_in][h][w][ci] (T) */
    const void *wt;     /* [co][kt][kh][kw][ci] (T) */
    const float *scale; /* [co]: input scale x weight scale (E4M3), or NULL */
    const float *bias;  /* [co] or NULL */
    const void *res;    /* [m][co] or NULL (may be y) */
    void *y;            /* [m][co]: m = t_out x ho x wo */
    int h, w, ci, co, kh, kw, ph, pw, ho, wo;
    int taps, cbs; /* kt x kh x kw; k-blocks a tap (ci / BK) */
    int64_t m;
};

/* A row's output pixel, as its input position at tap (0, 0, 0): base the element offset of
 * (t, oy, ox) in x, oy / ox its row and column (a row past the last pixel: oy so far below 0
 * that every tap reads outside the frame, i.e. zeros) */
struct row_pos {
    int64_t base;
    int oy, ox;
};

/* The k-block to load next, walked in order (no divisions in the loop): tap (dt, dy, dx) as the
 * input's offset from a row's output pixel (dy in -ph..kh-1-ph, dx likewise), channel block cb,
 * and the element offset of all that from the row's base. */
struct kpos {
    int dt, dy, dx, cb;
    int64_t off;
};
static __device__ __forceinline__ void kpos_set(const args &a, int bk, kpos &p) {
    p.off = (((int64_t)p.dt * a.h + p.dy) * a.w + p.dx) * a.ci + p.cb * bk;
}
static __device__ __forceinline__ void kpos_next(const args &a, int bk, kpos &p) {
    if (++p.cb < a.cbs) { /* the next channels of the same tap */
        p.off += bk;
        return;
    }
    p.cb = 0;
    if (++p.dx == a.kw - a.pw) {
        p.dx = -a.pw;
        if (++p.dy == a.kh - a.ph) p.dy = -a.ph, p.dt++;
    }
    kpos_set(a, bk, p);
}

/* What a thread loads and reads, computed once before the k-loop: its A chunks (the row's output
 * pixel and the chunk's channels, and where the chunk goes in a stage), its B chunks (a filter's
 * K run, which moves on by BK each k-block), and its ldmatrix rows' offsets in a stage (the same
 * swizzle for every m16 / n16 tile of a warp: they are 16 rows apart, which leaves r KC / 8 % KC
 * unchanged). The loop then only adds the k-block's tap offset and the stage's place: the loads'
 * address arithmetic is what bounds a k-block's KC / 2 MMA steps otherwise. */
template <typename T, int BN, int KC> struct thread_plan {
    typedef cfg<T, BN, KC> C;
    static constexpr int A_CH = BM * KC / THREADS; /* BM KC chunks over THREADS threads */
    static_assert(BM * KC == A_CH * THREADS, "A's chunks split evenly over the threads");
    static constexpr int B_CH = (BN * KC + THREADS - 1) / THREADS;
    row_pos rp[A_CH]; /* base: the row's input offset plus the chunk's channels */
    int a_st[A_CH];   /* the chunks' places in a stage */
    const T *b_src[B_CH];
    int b_st[B_CH]; /* -1: no chunk */
    int b_bytes[B_CH];
    int a_ld[KC / 2], b_ld[KC / 2]; /* ldmatrix: rows of m16 tile 0 / n16 pair 0, step ks */

    __device__ __forceinline__ void make(const args &a, int64_t m0, int n0, int wm, int wn) {
        const int lane = threadIdx.x % 32;
        const int64_t hw = (int64_t)a.ho * a.wo;
#pragma unroll
        for (int i = 0; i < A_CH; i++) {
            const int idx = threadIdx.x + THREADS * i, r = idx / KC, c = idx % KC;
            const int64_t m = m0 + r;
            const int t = (int)(m / hw), oy = (int)(m % hw / a.wo), ox = (int)(m % a.wo);
            rp[i].base = (((int64_t)t * a.h + oy) * a.w + ox) * a.ci + c * C::EPC;
            rp[i].oy = m < a.m ? oy : -2 * a.h - 2 * a.ph; /* past the end: every tap outside */
            rp[i].ox = ox;
            a_st[i] = chunk_at<KC>(r, c);
        }
        const int64_t k = (int64_t)a.taps * a.ci; /* a filter's K */
#pragma unroll
        for (int j = 0; j < B_CH; j++) {
            const int idx = threadIdx.x + THREADS * j, n = idx / KC, c = idx % KC;
            const bool ok = idx < BN * KC && n0 + n < a.co;
            /* (a filter past c_out copies no bytes; its source, kb BK on, stays in filter 0's K) */
            b_src[j] = (const T *)a.wt + (ok ? (n0 + n) * k + c * C::EPC : 0);
            b_st[j] = idx < BN * KC ? C::A_BYTES + chunk_at<KC>(n, c) : -1;
            b_bytes[j] = ok ? 16 : 0;
        }
#pragma unroll
        for (int ks = 0; ks < KC / 2; ks++) {
            a_ld[ks] = chunk_at<KC>(wm * 32 + lane % 8 + lane / 8 % 2 * 8, 2 * ks + lane / 16);
            b_ld[ks] = C::A_BYTES +
                       chunk_at<KC>(wn * C::WN + lane % 8 + lane / 16 * 8, 2 * ks + lane / 8 % 2);
        }
    }
};

/* k-block kb (at p) into the stage at st; then p moves on to k-block kb + 1 */
template <typename T, int BN, int KC>
static __device__ __forceinline__ void load_stage(const args &a, const thread_plan<T, BN, KC> &tp,
                                                  int kb, kpos &p, unsigned char *st) {
    typedef cfg<T, BN, KC> C;
#pragma unroll
    for (int i = 0; i < tp.A_CH; i++) {
        const int iy = tp.rp[i].oy + p.dy, ix = tp.rp[i].ox + p.dx;
        const bool ok = (unsigned)iy < (unsigned)a.h && (unsigned)ix < (unsigned)a.w;
        const T *src = ok ? (const T *)a.x + tp.rp[i].base + p.off : (const T *)a.x;
        if (!(MMA_CONV_LAB & 1)) cu_cp16(st + tp.a_st[i], src, ok ? 16 : 0);
    }
#pragma unroll
    for (int j = 0; j < tp.B_CH; j++)
        if (!(MMA_CONV_LAB & 2) && tp.b_st[j] >= 0)
            cu_cp16(st + tp.b_st[j], tp.b_src[j] + (int64_t)kb * C::BK, tp.b_bytes[j]);
    kpos_next(a, C::BK, p);
}

/* one stage's MMAs: warp (wm, wn) accumulates rows 32 wm.., filters WN wn.. */
template <typename T, int BN, int KC>
static __device__ __forceinline__ void mma_stage(const unsigned char *st,
                                                 const thread_plan<T, BN, KC> &tp,
                                                 float acc[2][cfg<T, BN, KC>::NT][4]) {
    typedef cfg<T, BN, KC> C;
#pragma unroll
    for (int ks = 0; ks < KC / 2; ks++) { /* a k32 (16-bit: k16) step: chunks 2 ks, 2 ks + 1 */
        unsigned af[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) /* matrices: rows +0 / +8, chunk 2 ks / 2 ks + 1 */
            cu_ldsm(af[mt], st + tp.a_ld[ks] + mt * 16 * C::ROW);
#pragma unroll
        for (int j = 0; j < C::NT / 2; j++) { /* n8 tiles 2 j, 2 j + 1 */
            unsigned bf[4];                   /* matrices: filters +0 / +8, chunk 2 ks / 2 ks + 1 */
            cu_ldsm(bf, st + tp.b_ld[ks] + j * 16 * C::ROW);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                if (MMA_CONV_LAB & 4) continue;
                cu_mma<T>::run(acc[mt][2 * j], af[mt], bf[0], bf[1]);
                cu_mma<T>::run(acc[mt][2 * j + 1], af[mt], bf[2], bf[3]);
            }
        }
    }
}

/* rows 32 wm + 16 mt + g (+ 8), filters WN wn + 8 nt + 2 t (+ 1): y = acc x scale + bias + res */
template <typename T, typename TO, int BN, int KC>
static __device__ __forceinline__ void epilogue(const args &a, int64_t m0, int n0, int wm, int wn,
                                                float acc[2][cfg<T, BN, KC>::NT][4]) {
    typedef cfg<T, BN, KC> C;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < C::NT; nt++) {
        const int n = n0 + wn * C::WN + nt * 8 + 2 * t;
        if (n >= a.co) continue; /* co % 8 == 0: n + 1 < co too */
        const float s0 = a.scale ? a.scale[n] : 1.0f, s1 = a.scale ? a.scale[n + 1] : 1.0f;
        const float b0 = a.bias ? a.bias[n] : 0.0f, b1 = a.bias ? a.bias[n + 1] : 0.0f;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int64_t r = m0 + wm * 32 + mt * 16 + g + 8 * hf;
                if (r >= a.m) continue;
                float v0 = acc[mt][nt][2 * hf] * s0 + b0, v1 = acc[mt][nt][2 * hf + 1] * s1 + b1;
                const int64_t o = r * a.co + n;
                if (a.res) {
                    const float2 rv =
                        make_float2(cu_ld((const TO *)a.res, o), cu_ld((const TO *)a.res, o + 1));
                    v0 += rv.x, v1 += rv.y;
                }
                *(unsigned *)((TO *)a.y + o) = cu_mma<TO>::pack(v0, v1);
            }
    }
}

template <typename T, typename TO, int BN, int KC>
__global__ void __launch_bounds__(THREADS, 2) conv_kernel(args a) {
    typedef cfg<T, BN, KC> C;
    unsigned char *smem = cu_dyn_smem();
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN, warp = threadIdx.x / 32, wm = warp % 4, wn = warp / 4;
    thread_plan<T, BN, KC> tp;
    tp.make(a, m0, n0, wm, wn);
    float acc[2][C::NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < C::NT; nt++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[mt][nt][q] = 0.0f;
    const int nk = a.taps * a.cbs;
    kpos p = {0, -a.ph, -a.pw, 0, 0};
    kpos_set(a, C::BK, p);
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
        if (s < nk) load_stage<T, BN, KC>(a, tp, s, p, smem + s * C::STAGE);
        cu_cp_commit();
    }
    /* the ring's places of the stage read (k-block kb) and the one loaded (kb + STAGES - 1) */
    int rd = 0, wr = (C::STAGES - 1) * C::STAGE;
    for (int kb = 0; kb < nk; kb++) {
        cu_cp_wait<C::STAGES - 2>(); /* k-block kb has landed (this thread's part) */
        __syncthreads();             /* ... every thread's; and k-block kb - 1 is consumed */
        if (kb + C::STAGES - 1 < nk) load_stage<T, BN, KC>(a, tp, kb + C::STAGES - 1, p, smem + wr);
        cu_cp_commit();
        mma_stage<T, BN, KC>(smem + rd, tp, acc);
        rd = rd + C::STAGE == C::STAGES * C::STAGE ? 0 : rd + C::STAGE;
        wr = wr + C::STAGE == C::STAGES * C::STAGE ? 0 : wr + C::STAGE;
    }
    epilogue<T, TO, BN, KC>(a, m0, n0, wm, wn, acc);
}

template <typename T, typename TO, int BN, int KC>
static cudaError_t launch(cudaStream_t s, args a) {
    typedef cfg<T, BN, KC> C;
    a.cbs = a.ci / C::BK;
    const dim3 grid((unsigned)((a.m + BM - 1) / BM), (unsigned)((a.co + BN - 1) / BN));
    const int smem = C::STAGES * C::STAGE;
    if (smem > 48 * 1024) { /* past the default: opt in (the probe's deeper rings) */
        const cudaError_t e = cudaFuncSetAttribute(
            conv_kernel<T, TO, BN, KC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
    }
    conv_kernel<T, TO, BN, KC><<<grid, THREADS, smem, s>>>(a);
    return cudaGetLastError();
}

/* the filter tile: 96 where it divides c_out (Wan2.1's 96 / 192 / 384), else 128; four chunks a
 * k-block row where c_in allows */
template <typename T, typename TO> static cudaError_t launch_co(cudaStream_t s, const args &a) {
    const bool kc4 = a.ci % (4 * cfg<T, 96, 4>::EPC) == 0;
    if (a.co % 96 == 0) return kc4 ? launch<T, TO, 96, 4>(s, a) : launch<T, TO, 96, 2>(s, a);
    return kc4 ? launch<T, TO, 128, 4>(s, a) : launch<T, TO, 128, 2>(s, a);
}
} /* namespace mmaconv */

int cuk_mma_device(int e4m3) {
    int dev = 0, major = 0, minor = 0;
    cudaFuncAttributes fa;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e == cudaSuccess)
        e = e4m3 ? cudaFuncGetAttributes(&fa,
                                         mmaconv::conv_kernel<mmaconv::e4m3, __nv_bfloat16, 128, 4>)
                 : cudaFuncGetAttributes(
                       &fa, mmaconv::conv_kernel<__nv_bfloat16, __nv_bfloat16, 128, 4>);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    /* the device has the MMAs (E4M3: sm_89+), and the code it runs was compiled for one that has
     * (an sm_80 build's E4M3 kernel is an empty shell) */
    const int need = e4m3 ? 89 : 80;
    return major * 10 + minor >= need && fa.binaryVersion >= need;
}

int cuk_mma_supported(int dtype, int ci, int co) {
    /* the kernel's own limits: the narrowest k-block row, two 16-byte chunks of 8 16-bit or 16
     * E4M3 channels; filters in groups of 8 (an m16n8 MMA's columns) */
    const int k = dtype == CU_FP8 ? 32 : dtype == CU_BF16 || dtype == CU_F16 ? 16 : 0;
    return k && ci > 0 && ci % k == 0 && co > 0 && co % 8 == 0;
}

int cuk_mma_takes(int dtype, int kt, int kh, int kw, int ph, int pw, int ci, int co) {
    /* the kernel's own geometry: padding below the taps */
    if (!(kt >= 1 && kh >= 1 && kw >= 1 && ph >= 0 && pw >= 0 && ph < kh && pw < kw) ||
        !cuk_mma_supported(dtype, ci, co))
        return 0;
    const vae_fp8_conv c = {kt, kh, kw, ph, pw, ci, co, 1}; /* E4M3: the table's MMA row too */
    return dtype != CU_FP8 || vae_fp8_kernel_takes(VAE_FP8_MMA, &c);
}

cudaError_t cuk_mma_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                         int co, int kt, int kh, int kw, int ph, int pw, const void *wt,
                         const float *scale, const float *bias, const void *res, void *y) {
    if (!cuk_mma_takes(scale ? CU_FP8 : dtype, kt, kh, kw, ph, pw, ci, co) || t_in < kt)
        return cudaErrorNotSupported;
    mmaconv::args a;
    a.x = x, a.wt = wt, a.scale = scale, a.bias = bias, a.res = res, a.y = y;
    a.h = h, a.w = w, a.ci = ci, a.co = co, a.kh = kh, a.kw = kw, a.ph = ph, a.pw = pw;
    a.ho = h + 2 * ph - kh + 1, a.wo = w + 2 * pw - kw + 1;
    a.taps = kt * kh * kw, a.cbs = 0;
    a.m = (int64_t)(t_in - kt + 1) * a.ho * a.wo;
    if (a.m == 0) return cudaSuccess;
    if (scale)
        return dtype == CU_F16 ? mmaconv::launch_co<mmaconv::e4m3, __half>(s, a)
                               : mmaconv::launch_co<mmaconv::e4m3, __nv_bfloat16>(s, a);
    return dtype == CU_F16 ? mmaconv::launch_co<__half, __half>(s, a)
                           : mmaconv::launch_co<__nv_bfloat16, __nv_bfloat16>(s, a);
}
