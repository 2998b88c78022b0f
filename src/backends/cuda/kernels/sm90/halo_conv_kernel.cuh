/* halo_conv_kernel.cuh -- the halo-tile kernel, device code (its launches and C entry points:
 * halo_conv.cu, which alone includes this): 3x3 / 3x3x3 convolutions with 96 filters on Hopper
 * tensor cores (wgmma), each input frame's tile read once into shared memory and used for all
 * nine spatial taps (sm_90a).
 *
 * Why: the CUTLASS implicit GEMM (cutlass/igemm_conv.cuh) loads every tap's A tile again through
 * the TMA's im2col mode: for Wan's 96-channel convs (K blocks of 32 channels, 256 x 96 tiles) that
 * is ~22 KB from L2 and through shared memory per 384 cycles of MMA. Here a block loads an
 * 18 x 18 pixel halo of 96 channels per input frame (62 KB) once, and the nine taps are nine
 * shifted views of it: wgmma reads K-major operands in the no-swizzle ("interleave") layout, where
 * a core matrix is 8 rows of 16 bytes at consecutive addresses, so a view starting one pixel or
 * one halo row later is just another start address in the descriptor.
 *
 * The GEMM: M = 256 output pixels (a 16 x 16 tile of one output frame), N = 96 filters, K = kt x
 * c_in x 9 in units of (frame f, channel block cb of 96, tap s) -- "units" of 96 x 96 x 256 MACs.
 * Shared memory (no swizzle, 16-byte chunks of 8 channels):
 *   A[2]:  [12 chunks][18 x 18 halo pixels][8]   one input frame's channel block, double buffered
 *          (chunks 5248 bytes apart: TMA destinations are 128-byte aligned)
 *   B[5]:  [12 chunks][96 filters][8]            one unit's filters (tap s of block cb of frame f)
 *   (then the barriers, and the output norm's 96 weights)
 * Warp-specialised and persistent (one block a multiprocessor walks tiles t, ty, tx in order):
 *   - two consumer warp groups, each 128 output pixels = two m64 tiles (8 halo rows x 8 pixels,
 *     SBO = one halo row) x 96 filters (wgmma m64n96k16, 96 float32 accumulators a thread): per
 *     unit wait for its full barriers, issue 12 wgmmas, wait for the previous unit's and hand its
 *     stages back (empty barriers, one arrival per warp);
 *   - producer warp 8 streams every unit's filters (one 18 KB bulk copy), warp 9 every frame
 *     block's halo (12 TMA boxes of 8 channels x 18 x 18 pixels; the spatial padding is the TMA's
 *     zero fill) and, for a tile's last frame block, prefetches its residual into L2.
 * Epilogue: the A buffer of the tile's last frame block is free once both groups are past their
 * last MMA; there y = acc + bias (+ res) is formed in float32, rounded once, and written out in
 * coalesced 16-byte pieces while the next tile's loads are already in flight. With a norm (the RMS
 * norm + SiLU that alone reads the conv's output, folded into the conv: program.h
 * vae_program_fuse_norms) each thread normalises one staged pixel before the rows go out: the
 * tensor cores wait meanwhile, so SiLU takes one MUFU op (tanh) instead of two; it costs ~2.5 ms of
 * the 4.4 ms a separate norm pass took in a 480p decode. Where an E4M3 conv alone reads the
 * normalised output (norm.s8, op.h fp8_codes_bound), the staged row becomes its E4M3 codes and
 * only those go out, so that conv needs no pass to make them.
 * Measured (H100): 650-690 TFLOP/s on Wan2.1's 96- and 192-channel convs in
 * bench/halo_conv_probe.cu against 585-600 for CUTLASS's 96-filter tiles; inside a decode the gap
 * shrinks (5.0 against 5.4 ms a 16-frame step without residual, 6.2 against 5.7 with one), so the
 * tuner takes it per shape (PATH_HALO).
 * Its limit (H200): the SS wgmmas at N = 96 read 2/N bytes of A and 1/32 of B a MAC from shared
 * memory, ~104 B a clock of the multiprocessor's ~128 at the full MMA rate. The epilogue (~15% of
 * the consumers' time under ncu, tensor cores idle) therefore does not pay to overlap with the
 * MMAs: split around the next tile's first MMAs, or handed to storer warps, its shared-memory
 * traffic slowed them more (both measured slower); filters multicast to pairs of blocks gained
 * nothing either.
 * E4M3 form (halo_conv_run8, dtype fp8; T = e4m3, TO the 16-bit output): the window's and the
 * filters' E4M3 codes in the same 16-byte chunks, 16 channels each (6 a pixel: lay<T>), a k32 wgmma
 * per pair of chunks as the k16 one, so half the shared-memory bytes a MAC; the epilogue multiplies
 * each filter's sums by its factor (input scale x weight scale) before bias and residual, and
 * stages in an area of its own (an E4M3 A buffer is too small; A goes back to the producer at the
 * tile's last MMA). Measured (H200, 16 frames of 480x832): 96 -> 96 3.36 ms (946 TFLOP/s) against
 * 4.86 in bf16, with the norm 3.67 against 5.31; 192 -> 96 6.36 against CUTLASS's E4M3 tile's 5.58,
 * so it runs only the convs CUTLASS's E4M3 kernels do not take (c_in 96).
 * Phase mode (halo_conv_run_up2, TAPS = 4: nearest x2 + 3x3 with 96 filters): output phase (a, b)
 * at input pixel (y, x) is a 2 x 2 conv of input rows y - 1 + a.., columns x - 1 + b.. (the phase
 * filters sum the 3x3 taps those rows and columns repeat: cuda_conv_phase.c), i.e. the halo taps
 * rows a..a + 1, columns b..b + 1; a tile is one phase of a 16 x 16 input tile (the four phases of
 * a tile next to each other in the walk, so their halos come from L2), its units the 4 taps of
 * each channel block, its epilogue writes y rows 2 y + a, columns 2 x + b. The window x is
 * contiguous ([t_out + kt - 1][h][w][c_in], the executor's windows), filters come pre-tiled by
 * halo_conv_tile_filters. */
#ifndef VAE_HALO_CONV_KERNEL_CUH
#define VAE_HALO_CONV_KERNEL_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/kernels/cuda_ptx.cuh"
#include "backends/cuda/kernels/sm90/halo_conv.h"
#include "backends/cuda/kernels/sm90/sm90_ptx.cuh"

namespace halo {
using namespace sm90;
typedef __nv_fp8_e4m3 e4m3; /* the E4M3 operands' element (halo_conv_run8) */
enum {
    TILE = 16,                           /* output pixels a tile side */
    HALO = TILE + 2,                     /* halo pixels a side */
    HPIX = HALO * HALO,                  /* 324 */
    CB = 96,                             /* channels a block = filters (N) */
    OUT_CHUNKS = CB * 2 / 16,            /* 16-byte chunks of an output pixel (16-bit): 12 */
    A_BOX = HPIX * 16,                   /* one chunk of the halo: 5184 bytes, one TMA box */
    A_CHUNK = (A_BOX + 127) / 128 * 128, /* 5248: TMA destinations are 128-byte aligned */
    B_STAGES = 5,
    CONSUMERS = 256,          /* two warp groups */
    THREADS = CONSUMERS + 64, /* and two producer warps: filters, halos */
    /* barriers: full A[2], full B[B_STAGES], empty A[2], empty B[B_STAGES] */
    FULL_A = 0,
    FULL_B = 2,
    EMPTY_A = 2 + B_STAGES,
    EMPTY_B = 4 + B_STAGES,
    BARS = 4 + 2 * B_STAGES,
    /* the epilogue's staging: a warp group's 128 pixels, rows of 96 16-bit outputs padded to 104
     * (the fragments' writes then hit 32 distinct banks) */
    ST_PITCH = 208,
    ST_WG = 128 * ST_PITCH,
};

/* Shared memory for operands of type T (16-bit, or e4m3: the same chunks of 16 bytes, holding 8
 * or 16 channels, so a pixel has half as many): A[2], B[B_STAGES], the barriers, the norm's 96
 * float32 weights, and the epilogue's staging where the free A buffer cannot hold it (e4m3). */
template <typename T> struct lay {
    static constexpr int EPC = 16 / (int)sizeof(T);  /* channels a chunk: 8 or 16 */
    static constexpr int CHUNKS = CB / EPC;          /* chunks a pixel: 12 or 6 */
    static constexpr int A_BYTES = CHUNKS * A_CHUNK; /* 62976 or 31488 */
    static constexpr int B_BYTES = CHUNKS * CB * 16; /* 18432 or 9216 */
    static constexpr int BARS_AT = 2 * A_BYTES + B_STAGES * B_BYTES;
    static constexpr int GAMMA = BARS_AT + BARS * 8;
    static constexpr bool OWN_STAGE = A_BYTES < 2 * ST_WG;
    static constexpr int STAGE = GAMMA + CB * 4; /* OWN_STAGE: both warp groups' staging */
    static constexpr int SMEM = STAGE + (OWN_STAGE ? 2 * ST_WG : 0); /* 218608 or 162800 */
};

#define HALO_D8(i)                                                                                 \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])
/* K: "16" or "32", TY: the operands' type, TRANS: the transpose flags (16-bit only) */
#define HALO_WGMMA(K, TY, TRANS)                                                                   \
    asm volatile("{\n"                                                                             \
                 ".reg .pred p;\n"                                                                 \
                 "setp.ne.b32 p, %50, 0;\n"                                                        \
                 "wgmma.mma_async.sync.aligned.m64n96k" K ".f32." TY "." TY " "                    \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "     \
                 "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
                 "%46, %47}, %48, %49, p, 1, 1" TRANS ";\n"                                        \
                 "}\n"                                                                             \
                 : HALO_D8(0), HALO_D8(8), HALO_D8(16), HALO_D8(24), HALO_D8(32), HALO_D8(40)      \
                 : "l"(da), "l"(db), "r"(acc))

/* d[64 x 96] = A[64 x 16] B[16 x 96] + (acc ? d : 0) (float32 accumulators in wgmma's fragment
 * order) */
template <typename T> struct mma;
template <> struct mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float d[48], uint64_t da, uint64_t db, int acc) {
        HALO_WGMMA("16", "bf16", ", 0, 0");
    }
};
template <> struct mma<__half> {
    static __device__ __forceinline__ void run(float d[48], uint64_t da, uint64_t db, int acc) {
        HALO_WGMMA("16", "f16", ", 0, 0");
    }
};
/* d[64 x 96] = A[64 x 32] B[32 x 96] + (acc ? d : 0): a k32 step spans the same two 16-byte
 * chunks as a 16-bit k16 step, so the descriptors are the same (E4M3 takes no transpose flags) */
template <> struct mma<e4m3> {
    static __device__ __forceinline__ void run(float d[48], uint64_t da, uint64_t db, int acc) {
        HALO_WGMMA("32", "e4m3", "");
    }
};

struct args {
    const void *x;              /* [t_out + kt - 1][h][w][c_in] (16-bit or e4m3) */
    const void *wt;             /* [kt][c_in / 96][9][CHUNKS][96][EPC]: halo_conv_tile_filters */
    const float *scale;         /* [96]: e4m3, each filter's factor of its products; else NULL */
    const float *bias;          /* [96] or NULL */
    const void *res;            /* [t_out][h][w][96] or NULL (may be y) */
    halo_conv_norm norm;        /* each output pixel's RMS norm (norm.w NULL: none) */
    void *y;                    /* [t_out][oh][ow][96] */
    int kt, h, w, c_in, blocks; /* blocks = c_in / 96 */
    int tiles_x, tiles_y, tiles;
    int taps;   /* spatial taps a frame block: 9, or 4 (up2) */
    int units;  /* a tile's: kt x blocks x taps */
    int up2;    /* the phase mode (halo_conv_run_up2): a tile is one phase of a 16 x 16 tile */
    int oh, ow; /* y's frame: h x w, or 2h x 2w (up2) */
};

/* the tile's origin: output frame t, first row y0 and column x0 (up2: of the input's grid), and
 * its phase ph (up2: output rows 2 y + ph / 2, columns 2 x + ph % 2; else 0) */
struct tile_pos {
    int t, y0, x0, ph;
};
static __device__ __forceinline__ tile_pos tile_at(const args &a, int tile) {
    tile_pos p;
    p.ph = a.up2 ? tile % 4 : 0; /* the four phases of a tile next to each other: one halo in L2 */
    if (a.up2) tile /= 4;
    p.x0 = tile % a.tiles_x * TILE;
    p.y0 = tile / a.tiles_x % a.tiles_y * TILE;
    p.t = tile / (a.tiles_x * a.tiles_y);
    return p;
}

/* a producer lane: frame block fb (frame f = fb / blocks, channels fb % blocks) of the
 * tile's 18 x 18 halo into A, one TMA box per 16-byte chunk (the spatial padding is the TMA's
 * zero fill outside the frame) */
template <typename T>
static __device__ __forceinline__ void load_halo(const args &a, const CUtensorMap *map,
                                                 const tile_pos &p, int fb, unsigned abuf,
                                                 unsigned bar) {
    typedef lay<T> L;
    const int f = fb / a.blocks, cb = fb % a.blocks;
    bar_expect(bar, L::CHUNKS * A_BOX);
    for (int ch = 0; ch < L::CHUNKS; ch++)
        tma_load_4d(abuf + ch * A_CHUNK, map, cb * CB + ch * L::EPC, p.x0 - 1, p.y0 - 1, p.t + f,
                    bar);
}

/* a producer lane: one unit's filters (contiguous, already in the shared layout) into B */
template <typename T>
static __device__ __forceinline__ void load_filters(const args &a, int unit, unsigned bbuf,
                                                    unsigned bar) {
    const int bytes = lay<T>::B_BYTES;
    bar_expect(bar, bytes);
    bulk_load(bbuf, (const unsigned char *)a.wt + (int64_t)unit * bytes, bytes, bar);
}

/* the kernel's state between units: shared-memory addresses, the block's tile walk */
struct walk {
    unsigned sa0, sb0, bars; /* A[0], B[0], the barriers (shared addresses) */
    int total, fbs, wg;      /* units this block runs, frame blocks a tile, warp group */
};
static __device__ __forceinline__ unsigned bar_at(const walk &k, int b) {
    return k.bars + b * 8;
}

/* unit i's MMAs are complete in this warp: its filter stage (and, at a frame block's last tap,
 * its A buffer) may be loaded again; one arrival per consumer warp. TAPS: units a frame block (9:
 * 3 x 3; 4: the 2 x 2 phases of halo_conv_run_up2) */
template <int TAPS>
static __device__ __forceinline__ void unit_done(const walk &k, int i, bool release_a = true) {
    if (threadIdx.x % 32) return;
    bar_arrive(bar_at(k, EMPTY_B + i % B_STAGES));
    if (release_a && i % TAPS == TAPS - 1) bar_arrive(bar_at(k, EMPTY_A + (i / TAPS & 1)));
}

static __device__ __forceinline__ void bar_named(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* two 16-bit values <-> float */
static __device__ __forceinline__ float2 unpack2(unsigned v, __nv_bfloat16) {
    return __bfloat1622float2(*(__nv_bfloat162 *)&v);
}
static __device__ __forceinline__ float2 unpack2(unsigned v, __half) {
    return __half22float2(*(__half2 *)&v);
}

/* SiLU with one MUFU op (tanh) instead of two (exp, reciprocal): the norm in the epilogue stalls
 * the tensor cores, and there the MUFU throughput was what it cost */
static __device__ __forceinline__ float silu_tanh(float x) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * x));
    return 0.5f * x * (1.0f + t);
}

/* The RMS norm of one output pixel's 96 channels (a row of the staged tile, already rounded as the
 * unfused conv would write them), in place: y = act(y * sqrt(96) / max(|y|, 1e-12) * g[c]) as the
 * RMS norm kernel (cuda_norm.cu) but SiLU by silu_tanh; g: the weights in shared memory; A: the
 * activation, -1 read at run time. */
template <typename T, int A>
static __device__ __forceinline__ void norm_pixel(unsigned char *row, const float *g,
                                                  const halo_conv_norm &n) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < OUT_CHUNKS; j++) {
        const uint4 v = *(const uint4 *)(row + j * 16);
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float2 f = unpack2(u[q], T());
            ss += f.x * f.x;
            ss += f.y * f.y;
        }
    }
    const float sc = sqrtf((float)CB) / fmaxf(sqrtf(ss), 1e-12f);
#pragma unroll 2
    for (int j = 0; j < OUT_CHUNKS; j++) {
        const uint4 v = *(const uint4 *)(row + j * 16);
        const float4 g0 = *(const float4 *)(g + 8 * j), g1 = *(const float4 *)(g + 8 * j + 4);
        const float gj[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float2 f = unpack2(u[q], T());
            const float a = f.x * sc * gj[2 * q], b = f.y * sc * gj[2 * q + 1];
            u[q] = A == CU_ACT_SILU ? cu_mma<T>::pack(silu_tanh(a), silu_tanh(b))
                                    : cu_mma<T>::pack(cu_act_t<T>(n.act, n.act_scale, a),
                                                      cu_act_t<T>(n.act, n.act_scale, b));
        }
        *(uint4 *)(row + j * 16) = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

/* One pixel's row of 96 16-bit outputs (staged) as their E4M3 codes of value / s8, in place at the
 * row's start: chunk j's 8 codes land below its own 16 bytes and those of chunks before it, which
 * were read already. */
template <typename T>
static __device__ __forceinline__ void codes_pixel(unsigned char *row, float inv8) {
#pragma unroll
    for (int j = 0; j < OUT_CHUNKS; j++) {
        const uint4 v = *(const uint4 *)(row + j * 16);
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
        float f[8];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float2 p = unpack2(u[q], T());
            f[2 * q] = p.x, f[2 * q + 1] = p.y;
        }
        *(uint2 *)(row + j * 8) = cu_e4m3x8(f, inv8);
    }
}

/* 16-byte piece n (0..11) of this warp group's part of the tile: pixel q / 12 of its 8 x 16, part
 * q % 12 of the pixel's 96 channels (q = tid + 128 n: consecutive threads, consecutive bytes);
 * the element offset in y (or res), -1 outside the frame */
static __device__ __forceinline__ int64_t piece_at(const args &a, const tile_pos &p, int wg,
                                                   int q) {
    const int px = q / 12, part = q % 12;
    const int gy = p.y0 + wg * 8 + px / 16, gx = p.x0 + px % 16;
    if (gy >= a.h || gx >= a.w) return -1;
    const int oy = a.up2 ? 2 * gy + p.ph / 2 : gy, ox = a.up2 ? 2 * gx + p.ph % 2 : gx;
    return (((int64_t)p.t * a.oh + oy) * a.ow + ox) * CB + part * 8;
}
static __device__ __forceinline__ unsigned piece_stage(int q) {
    return q / 12 * ST_PITCH + q % 12 * 16;
}

/* The tile's epilogue, y = acc (x scale) + bias (+ res) in float32 with one rounding, through
 * shared memory so that every global access is a coalesced 16-byte one: 16-bit operands stage in
 * the A buffer of the tile's last frame block, free once both warp groups finished their MMAs
 * (its hand-back to the producer waits until here; e4m3: their own area, A handed back at once),
 * each warp group stages its 128 pixels x 96 channels there (rows padded to 104
 * channels: the fragments' writes hit 32 distinct banks): the residual in, then the fragments
 * (a thread holds rows lane / 4 and lane / 4 + 8 of its warp's 16 rows of each m64 tile, columns
 * 8 j + 2 (lane % 4) + {0, 1}) add bias and residual and round in place, then (with a norm) each
 * thread normalises one pixel's row from those rounded values (as the unfused norm pass would read
 * them), then (a.norm.s8) turns it into codes, then the rows go out (codes: a pixel's first six
 * pieces). */
template <typename T, typename TO, int TAPS>
static __device__ __forceinline__ void epilogue(const args &a, const walk &k, int i_last,
                                                const tile_pos &p, const float d0[48],
                                                const float d1[48]) {
    typedef lay<T> L;
    const int ga = i_last / TAPS, tid = threadIdx.x % 128, lane = threadIdx.x % 32;
    const int wi = tid / 32;
    unit_done<TAPS>(k, i_last, L::OWN_STAGE);
    bar_named(1, CONSUMERS); /* both groups are past their last MMA: A[ga & 1] is free */
    unsigned char *stage =
        cu_dyn_smem() + (L::OWN_STAGE ? L::STAGE : (ga & 1) * L::A_BYTES) + k.wg * ST_WG;
    if (a.res) { /* in L2 already: the producer prefetched it (residual_prefetch) */
#pragma unroll
        for (int n = 0; n < 12; n++) {
            const int64_t o = piece_at(a, p, k.wg, tid + 128 * n);
            if (o >= 0)
                *(uint4 *)(stage + piece_stage(tid + 128 * n)) =
                    *(const uint4 *)((const TO *)a.res + o);
        }
        bar_named(2 + k.wg, 128);
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const float *d = mt ? d1 : d0;
            unsigned char *row = stage + ((2 * wi + half) * 16 + mt * 8 + lane / 4) * ST_PITCH;
#pragma unroll
            for (int j = 0; j < 12; j++) {
                const int c = 8 * j + 2 * (lane % 4);
                float v0 = d[4 * j + 2 * half], v1 = d[4 * j + 2 * half + 1];
                if (sizeof(T) == 1) v0 *= a.scale[c], v1 *= a.scale[c + 1]; /* e4m3 */
                if (a.bias) v0 += a.bias[c], v1 += a.bias[c + 1];
                unsigned *sv = (unsigned *)(row + c * 2);
                if (a.res) {
                    const float2 r = unpack2(*sv, TO());
                    v0 += r.x, v1 += r.y;
                }
                *sv = cu_mma<TO>::pack(v0, v1);
            }
        }
    bar_named(2 + k.wg, 128);
    if (a.norm.w) { /* thread tid: staged row tid = pixel tid of the group's 8 x 16 */
        const float *g = (const float *)(cu_dyn_smem() + L::GAMMA);
        if (a.norm.act == CU_ACT_SILU)
            norm_pixel<TO, CU_ACT_SILU>(stage + tid * ST_PITCH, g, a.norm);
        else
            norm_pixel<TO, -1>(stage + tid * ST_PITCH, g, a.norm);
        bar_named(2 + k.wg, 128);
    }
    const bool codes = a.norm.s8 > 0.0f;
    if (codes) {
        codes_pixel<TO>(stage + tid * ST_PITCH, cu_e4m3_inv(a.norm.s8));
        bar_named(2 + k.wg, 128);
    }
#pragma unroll
    for (int n = 0; n < 12; n++) {
        const int64_t o = piece_at(a, p, k.wg, tid + 128 * n);
        if (o >= 0 && (!codes || (tid + 128 * n) % 12 < 6))
            *(uint4 *)((TO *)a.y + o) = *(const uint4 *)(stage + piece_stage(tid + 128 * n));
    }
    if (L::OWN_STAGE) return; /* A was handed back before */
    /* this thread's shared-memory reads and writes (generic proxy) come before the producer's
     * next TMA writes into the buffer (async proxy) */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncwarp();
    if (lane == 0) bar_arrive(bar_at(k, EMPTY_A + (ga & 1)));
}

/* the consumers' side of unit i (unit u of its tile): wait for its operands, issue its MMAs
 * (u == 0: accumulators from zero), wait for unit i - 1's and hand its stages back (not across a
 * tile's start: the epilogue handed back the tile's last unit) */
template <typename T, int TAPS>
static __device__ __forceinline__ void unit_step(const walk &k, int i, int u, int ph, float d0[48],
                                                 float d1[48]) {
    const int s = u % TAPS, g = i / TAPS; /* tap, and the block's frame-block count */
    /* the tap's offset in the halo: 3 x 3, or phase ph's 2 x 2 (rows ph / 2 + 0..1, columns
     * ph % 2 + 0..1: the nearest-x2 input rows and columns its outputs read) */
    const int kh = TAPS == 9 ? s / 3 : ph / 2 + s / 2, kw = TAPS == 9 ? s % 3 : ph % 2 + s % 2;
    if (s == 0) bar_wait(bar_at(k, FULL_A + (g & 1)), (g >> 1) & 1);
    bar_wait(bar_at(k, FULL_B + i % B_STAGES), (i / B_STAGES) & 1);
    typedef lay<T> L;
    /* this warp group's m64 tiles: halo rows 8 wg + kh.., pixels kw.. and 8 + kw.. */
    const unsigned a_at = k.sa0 + (g & 1) * L::A_BYTES + ((k.wg * 8 + kh) * HALO + kw) * 16;
    const uint64_t da0 = desc(a_at, A_CHUNK, HALO * 16),
                   da1 = desc(a_at + 8 * 16, A_CHUNK, HALO * 16),
                   db = desc(k.sb0 + (i % B_STAGES) * L::B_BYTES, CB * 16, 128);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < L::CHUNKS / 2; ks++) { /* k16 (e4m3: k32) steps: chunks 2 ks, 2 ks + 1 */
        const int acc = u > 0 || ks > 0;
        mma<T>::run(d0, da0 + ks * (2 * A_CHUNK / 16), db + ks * (2 * CB), acc);
        mma<T>::run(d1, da1 + ks * (2 * A_CHUNK / 16), db + ks * (2 * CB), acc);
    }
    wg_commit();
    wg_wait<1>();
    if (u > 0) unit_done<TAPS>(k, i - 1);
}

/* the tile's residual rows (16 x 16 pixels x 96 channels) into L2, while the tile's last frame
 * block runs: the epilogue's reads of it then wait for L2, not for HBM */
static __device__ __forceinline__ void residual_prefetch(const args &a, const tile_pos &p) {
    const int n = min(TILE, a.w - p.x0) * CB * 2; /* bytes of a row's pixels in the frame */
    for (int r = 0; r < TILE && p.y0 + r < a.h; r++) {
        const unsigned char *src = (const unsigned char *)a.res +
                                   ((((int64_t)p.t * a.h + p.y0 + r) * a.w + p.x0) * CB) * 2;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(n) : "memory");
    }
}

/* the producers, one lane each: warp 8 loads every unit's filters in order, warp 9 every frame
 * block's halo, each into a stage whose last reader (n - stages) the consumers handed back */
template <typename T, int TAPS>
static __device__ void produce(const args &a, const CUtensorMap *map, const walk &k) {
    typedef lay<T> L;
    const int warp = threadIdx.x / 32 - CONSUMERS / 32;
    if (threadIdx.x % 32) return;
    if (warp == 0) {
        for (int n = 0; n < k.total; n++) {
            const int st = n % B_STAGES, m = n / B_STAGES;
            if (m > 0) bar_wait(bar_at(k, EMPTY_B + st), (m - 1) & 1);
            const int ph = a.up2 ? (blockIdx.x + n / a.units * gridDim.x) % 4 : 0;
            load_filters<T>(a, ph * a.units + n % a.units, k.sb0 + st * L::B_BYTES,
                            bar_at(k, FULL_B + st));
        }
    } else {
        for (int gn = 0; gn * TAPS < k.total; gn++) {
            const int ab = gn & 1, m = gn >> 1;
            if (m > 0) bar_wait(bar_at(k, EMPTY_A + ab), (m - 1) & 1);
            const tile_pos p = tile_at(a, blockIdx.x + gn / k.fbs * gridDim.x);
            load_halo<T>(a, map, p, gn % k.fbs, k.sa0 + ab * L::A_BYTES, bar_at(k, FULL_A + ab));
            if (a.res && !a.up2 && gn % k.fbs == k.fbs - 1) residual_prefetch(a, p);
        }
    }
}

/* T: the operands (16-bit, or e4m3), TO: the output and residual (16-bit) */
template <typename T, typename TO, int TAPS>
__global__ void __launch_bounds__(THREADS, 1)
    halo_conv_kernel(const __grid_constant__ CUtensorMap map, args a) {
    typedef lay<T> L;
    unsigned char *smem = cu_dyn_smem();
    walk k;
    const int my_tiles =
        a.tiles > (int)blockIdx.x ? (a.tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    k.total = my_tiles * a.units; /* a.units % TAPS == 0 */
    if (k.total == 0) return;
    k.fbs = a.units / TAPS;
    k.wg = threadIdx.x / 128;
    k.sa0 = cu_saddr(smem), k.sb0 = k.sa0 + 2 * L::A_BYTES, k.bars = k.sa0 + L::BARS_AT;
    if (threadIdx.x == 0) {
        for (int b = 0; b < BARS; b++) /* full: the producer's expect_tx; empty: consumer warps */
            bar_init(k.bars + b * 8, b < EMPTY_A ? 1 : CONSUMERS / 32);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (a.norm.w && threadIdx.x < CB)
        ((float *)(smem + L::GAMMA))[threadIdx.x] = a.norm.w[threadIdx.x];
    __syncthreads();
    if (threadIdx.x >= CONSUMERS) {
        produce<T, TAPS>(a, &map, k);
        return;
    }
    float d0[48], d1[48];
#pragma unroll
    for (int j = 0; j < 48; j++)
        d0[j] = 0.0f, d1[j] = 0.0f;
    /* the tile's first unit stands before its loop so that one MMA group is in flight wherever
     * the loop is entered (ptxas would otherwise wait for all MMAs at every back edge) */
    for (int tile = 0, i = 0; tile < my_tiles; tile++) {
        const int ph = TAPS == 4 ? (blockIdx.x + tile * gridDim.x) % 4 : 0; /* tile_at's phase */
        unit_step<T, TAPS>(k, i++, 0, ph, d0, d1);
        for (int u = 1; u < a.units; u++)
            unit_step<T, TAPS>(k, i++, u, ph, d0, d1);
        wg_wait<0>();
        epilogue<T, TO, TAPS>(a, k, i - 1, tile_at(a, blockIdx.x + tile * gridDim.x), d0, d1);
    }
}

} /* namespace halo */

#endif
