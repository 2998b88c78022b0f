// wgmma_rate_probe.cu -- how fast Hopper's tensor cores run wgmma with 96 filters (N = 96) when
// the A operand comes from shared memory (SS, as the halo-tile conv and CUTLASS's 96-filter
// tiles do) against A from registers (RS), reused by several wgmmas (sm_90a).
//
// Why: in a decode Wan2.1's 96-channel convs run at ~560 TFLOP/s, its 192-channel ones at ~690
// (bench/RESULTS.md run 220, power-capped at ~1.45 GHz). m64n96k16 from shared memory reads
// 2 KB of A and 3 KB of B for 98304 MACs (0.052 B a MAC), m64n192k16 0.042: the same ratio as
// the two rates. If operand bytes from shared memory bound the rate, a kernel that keeps A
// fragments in registers and uses each for several filter taps (the rows of a 3x3 conv's halo
// serve three output rows) would run the 96-filter convs at the 192-filter rate.
//
// Each variant: one block a multiprocessor, 2 warp groups, every warp group issuing wgmmas on
// its own accumulators in a loop (operands fixed, random bf16 values in shared memory); MACs per
// SM clock (clock64 of each block) and TFLOP/s (events), one launch and sustained (launches
// back to back for ~1 s, where the 700 W cap lowers the clock).
//   ss96x2    SS m64n96k16, two accumulators a warp group sharing B (the halo-tile kernel)
//   rs96x2    RS, A fragments fixed in registers, two accumulators (no shared A reads at all)
//   rs96x3l   RS, one ldmatrix.x4 of A a k16 step used by three wgmmas (B from three places)
//   rs96x1l   RS, one ldmatrix.x4 for each wgmma (A read as often as SS reads it)
//   ss192x1   SS m64n192k16, one accumulator a warp group (CUTLASS's 128 x 192 tiles)
// Measured (bench/RESULTS.md run 222, H100): every form but rs96x1l issues at the full 2048 MACs
// a clock and SM (ss96x2 too: shared-memory operands do not bound the 96-filter convs; rs96x1l's
// ldmatrix per wgmma 1856); 959 TFLOP/s for one launch at 1.77 GHz, 858-868 sustained at
// 1.60 GHz under the 700 W limit, whatever the form. So a conv kernel's loss against these rates
// lies in its waits (barriers, loads, epilogue), and in a decode also in the clock: the decode
// draws the limit at ~1.45 GHz (run 220).
// build (from the repository root): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//        -Isrc -o /tmp/wgmma_rate bench/wgmma_rate_probe.cu && /tmp/wgmma_rate
#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/kernels/sm90/halo_conv.cu"
#include "probe_common.cuh"

namespace {
constexpr int THREADS = 256, SMEM = 96 * 1024, STEPS = 6; // k16 steps a unit (96 channels)

using halo::desc; /* the halo-tile kernel's descriptor and wgmma fences, as it issues them */
__device__ __forceinline__ void fence() {
    halo::wg_fence();
}
__device__ __forceinline__ void commit() {
    halo::wg_commit();
}
template <int N> __device__ __forceinline__ void wait() {
    halo::wg_wait<N>();
}

#define D8(d, i)                                                                                   \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define R48                                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"

__device__ __forceinline__ void ss96(float d[48], uint64_t da, uint64_t db) {
    halo::mma<__nv_bfloat16>::run(d, da, db, 1); /* the halo-tile kernel's wgmma */
}
__device__ __forceinline__ void rs96(float d[48], const unsigned a[4], uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 " R48
                 ", {%48, %49, %50, %51}, %52, 1, 1, 1, 0;\n"
                 : D8(d, 0), D8(d, 8), D8(d, 16), D8(d, 24), D8(d, 32), D8(d, 40)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void ss192(float d[96], uint64_t da, uint64_t db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "
        "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "
        "%91, %92, %93, %94, %95}, %96, %97, 1, 1, 1, 0, 0;\n"
        : D8(d, 0), D8(d, 8), D8(d, 16), D8(d, 24), D8(d, 32), D8(d, 40), D8(d, 48), D8(d, 56),
          D8(d, 64), D8(d, 72), D8(d, 80), D8(d, 88)
        : "l"(da), "l"(db));
}
// this warp's A fragment of an m64k16 tile ([k chunk of 8][64 rows][8] at base) by ldmatrix.x4
__device__ __forceinline__ void ldm_a(unsigned a[4], unsigned base, int warp, int lane) {
    const int mtx = lane / 8, r = lane % 8;
    const unsigned at = base + ((mtx / 2) * 64 + warp * 16 + (mtx % 2) * 8 + r) * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(at));
}

enum { SS96X2, RS96X2, RS96X3L, RS96X1L, SS192X1, N_VARIANTS };
const char *names[N_VARIANTS] = {"ss96x2", "rs96x2", "rs96x3l", "rs96x1l", "ss192x1"};
const int macs_step[N_VARIANTS] = {2 * 64 * 96 * 16, 2 * 64 * 96 * 16, 3 * 64 * 96 * 16,
                                   2 * 64 * 96 * 16, 64 * 192 * 16}; // a warp group's, a k16 step

// Shared memory: A tiles at 0 (per warp group 16 KB: [2 k chunks x STEPS][64 rows][8]), B at
// 32 KB ([2 x STEPS chunks][192 filters][8], three copies 18 KB apart for the taps).
template <int V>
__global__ void __launch_bounds__(THREADS, 1)
    rate_kernel(const __nv_bfloat16 *src, int iters, float *sink, long long *clocks) {
    extern __shared__ __align__(128) unsigned char sm[];
    for (int i = threadIdx.x; i < SMEM / 16; i += THREADS)
        ((uint4 *)sm)[i] = ((const uint4 *)src)[i];
    __syncthreads();
    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const unsigned a0 = cu_saddr(sm) + wg * 16384, b0 = cu_saddr(sm) + 32768;
    float d0[48] = {}, d1[48] = {}, d2[48] = {};
    float e[96] = {};
    unsigned af[2][4], ag[2][4], ah[2][4]; // ag, ah: double-buffered (one MMA group in flight)
    ldm_a(af[0], a0, warp, lane);
    ldm_a(af[1], a0 + 8192, warp, lane);
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int ks = 0; ks < STEPS; ks++) {
            const unsigned ak = a0 + ks * 2 * 1024; // two k chunks of 64 rows a step
            const uint64_t db = desc(b0 + ks * 2 * 96 * 16, 96 * 16, 128);
            unsigned *g = ag[ks & 1], *h = ah[ks & 1];
            if (V == SS96X2) {
                fence();
                ss96(d0, desc(ak, 1024, 128), db);
                ss96(d1, desc(ak + 8192, 1024, 128), db);
            } else if (V == RS96X2) {
                fence();
                rs96(d0, af[0], db);
                rs96(d1, af[1], db);
            } else if (V == RS96X3L) {
                ldm_a(g, ak, warp, lane);
                fence();
                rs96(d0, g, db);
                rs96(d1, g, db + (18432 >> 4));
                rs96(d2, g, db + (2 * 18432 >> 4));
            } else if (V == RS96X1L) {
                ldm_a(g, ak, warp, lane);
                ldm_a(h, ak + 8192, warp, lane);
                fence();
                rs96(d0, g, db);
                rs96(d1, h, db);
            } else {
                fence();
                ss192(e, desc(ak, 1024, 128), desc(b0 + ks * 2 * 192 * 16, 192 * 16, 128));
            }
            commit();
            wait<1>(); // the previous step's group is done: its A registers may be loaded again
        }
    }
    wait<0>();
    const long long t1 = clock64();
    float s = 0.0f;
    for (int j = 0; j < 48; j++)
        s += d0[j] + d1[j] + d2[j] + e[j] + e[j + 48];
    if (s == 12345.0f) sink[threadIdx.x] = s; // keeps the MMAs
    if (threadIdx.x == 0) clocks[blockIdx.x] = t1 - t0;
}

template <int V>
int run_variant(const __nv_bfloat16 *src, float *sink, long long *clocks, int sms) {
    CK(cudaFuncSetAttribute(rate_kernel<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    const int iters = 20000;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    rate_kernel<V><<<sms, THREADS, SMEM>>>(src, 100, sink, clocks); // warm-up
    CK(cudaDeviceSynchronize());
    float one_ms = 0, sus_ms = 0;
    CK(cudaEventRecord(a));
    rate_kernel<V><<<sms, THREADS, SMEM>>>(src, iters, sink, clocks);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&one_ms, a, b));
    long long host[1024];
    CK(cudaMemcpy(host, clocks, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    double clk = 0;
    for (int i = 0; i < sms; i++)
        clk += (double)host[i] / sms;
    const int reps = (int)(1000.0f / one_ms) + 1; // ~1 s back to back
    CK(cudaEventRecord(a));
    for (int r = 0; r < reps; r++)
        rate_kernel<V><<<sms, THREADS, SMEM>>>(src, iters, sink, clocks);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&sus_ms, a, b));
    CK(cudaMemcpy(host, clocks, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    double clk_last = 0;
    for (int i = 0; i < sms; i++)
        clk_last += (double)host[i] / sms;
    const double macs_sm = (double)iters * STEPS * macs_step[V] * (THREADS / 128);
    const double flop = 2.0 * macs_sm * sms;
    printf("%-8s  one launch: %7.1f TFLOP/s %6.0f MAC/clk/SM (%4.2f GHz) | sustained %d: %7.1f "
           "TFLOP/s, last launch %6.0f MAC/clk/SM (%4.2f GHz)\n",
           names[V], flop / one_ms * 1e-9, macs_sm / clk, clk / one_ms * 1e-6, reps,
           flop * reps / sus_ms * 1e-9, macs_sm / clk_last, clk_last / (sus_ms / reps) * 1e-6);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 0;
}
} // namespace

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    __nv_bfloat16 *src;
    float *sink;
    long long *clocks;
    CK(cudaMalloc(&src, SMEM));
    CK(cudaMalloc(&sink, THREADS * sizeof(float)));
    CK(cudaMalloc(&clocks, sms * sizeof(long long)));
    probe_fill<<<64, 256>>>(src, SMEM / 2, 1.0f, 7u);
    CK(cudaDeviceSynchronize());
    printf("wgmma rates, %d SMs, 2 warp groups a block, %d k16 steps a unit\n", sms, STEPS);
    if (run_variant<SS96X2>(src, sink, clocks, sms) ||
        run_variant<RS96X2>(src, sink, clocks, sms) ||
        run_variant<RS96X3L>(src, sink, clocks, sms) ||
        run_variant<RS96X1L>(src, sink, clocks, sms) ||
        run_variant<SS192X1>(src, sink, clocks, sms) || run_variant<SS96X2>(src, sink, clocks, sms))
        return 1;
    return 0;
}
