// mma_conv_probe.cu -- the implicit-GEMM conv on mma.sync
// (src/backends/cuda/kernels/cuda_mma_conv.cu: the engine's own conv kernel for Ampere / Ada /
// consumer Blackwell, 16-bit and E4M3) on Wan2.1's decoder convs (3x3x3, channels-last, 4-frame
// steps at 480p) and odd shapes: time a launch (TFLOP/s) of both forms and check each against a
// float32 conv on the CUDA cores. The operands
// are bf16 values on the E4M3 grid, so that both forms compute the same products and share one
// reference (tolerance: the bf16 output's rounding). On Hopper (no native E4M3 mma.sync: it
// converts to fp16) the E4M3 timings say nothing about Ada's; the bf16 ones show what the
// kernel's structure gets out of mma.sync, read against the rate of mma.sync itself (peak_kernel,
// printed first). -DMMA_CONV_SMEM=N builds it with a ring of stages in N bytes of shared memory
// (default 48 KB); -DMMA_CONV_LAB=1, 2, 4 (or their sums) without A's loads, B's loads or the
// MMAs (timings only: those builds fail the check). Build and run on the GPU from the
// repository root (an argument: only that shape):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Isrc -Iinclude
//        [-DMMA_CONV_SMEM=98304] -o /tmp/mma_probe bench/mma_conv_probe.cu src/core/fp8_shapes.c
//        && /tmp/mma_probe
// (src/core/fp8_shapes.c: the E4M3 table that the kernel's cuk_mma_takes reads)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../bench/probe_common.cuh"
#define MMA_CONV_PROBE /* (its MMA_CONV_LAB builds) */
#include "backends/cuda/kernels/cuda_mma_conv.cu"

// p[i] rounded to the E4M3 grid (stays bf16), and its E4M3 code
__global__ void to_e4m3_grid(__nv_bfloat16 *p, __nv_fp8_e4m3 *q, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        q[i] = __nv_fp8_e4m3(__bfloat162float(p[i]));
        p[i] = __float2bfloat16(float(q[i]));
    }
}

struct conv_shape {
    const char *name;
    int c_in, c_out, kt, h, w, t_out, residual;
};

// one shape: fills, the reference, then each form checked and timed; 1 on a failure
static int run_shape(const conv_shape &c, float *err) {
    const int t_in = c.t_out + c.kt - 1;
    const int64_t nx = (int64_t)t_in * c.h * c.w * c.c_in,
                  nw = (int64_t)c.c_out * c.kt * 9 * c.c_in,
                  ny = (int64_t)c.t_out * c.h * c.w * c.c_out;
    __nv_bfloat16 *x, *wt, *res = nullptr, *y;
    __nv_fp8_e4m3 *x8, *w8;
    float *bias, *ones, *ref;
    CK(cudaMalloc(&x, nx * 2));
    CK(cudaMalloc(&wt, nw * 2));
    CK(cudaMalloc(&x8, nx));
    CK(cudaMalloc(&w8, nw));
    CK(cudaMalloc(&y, ny * 2));
    CK(cudaMalloc(&ref, ny * 4));
    CK(cudaMalloc(&bias, c.c_out * 4));
    CK(cudaMalloc(&ones, c.c_out * 4));
    if (c.residual) CK(cudaMalloc(&res, ny * 2));
    probe_fill<<<1024, 256>>>(x, nx, 1.0f, 1);
    probe_fill<<<1024, 256>>>(wt, nw, 0.05f, 2);
    to_e4m3_grid<<<1024, 256>>>(x, x8, nx);
    to_e4m3_grid<<<1024, 256>>>(wt, w8, nw);
    if (res) probe_fill<<<1024, 256>>>(res, ny, 1.0f, 3);
    {
        __nv_bfloat16 *b16;
        CK(cudaMalloc(&b16, c.c_out * 2));
        probe_fill<<<8, 256>>>(b16, c.c_out, 0.5f, 4);
        std::vector<__nv_bfloat16> hb(c.c_out);
        std::vector<float> hf(c.c_out), h1(c.c_out, 1.0f);
        CK(cudaMemcpy(hb.data(), b16, c.c_out * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < c.c_out; i++)
            hf[i] = __bfloat162float(hb[i]);
        CK(cudaMemcpy(bias, hf.data(), c.c_out * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(ones, h1.data(), c.c_out * 4, cudaMemcpyHostToDevice));
        CK(cudaFree(b16));
    }
    ref_kernel<<<1024, 256>>>(x, wt, bias, res, ref, c.kt, c.t_out, c.h, c.w, c.c_in, c.c_out);
    CK(cudaGetLastError());
    const double flop = 2.0 * ny * c.kt * 9 * c.c_in;
    int bad = 0;
    for (int form = 0; form < 2; form++) { // bf16, E4M3 (scale 1)
        auto launch = [&]() {
            return form ? cuk_mma_conv(0, CU_BF16, x8, t_in, c.h, c.w, c.c_in, c.c_out, c.kt, 3, 3,
                                       1, 1, w8, ones, bias, res, y)
                        : cuk_mma_conv(0, CU_BF16, x, t_in, c.h, c.w, c.c_in, c.c_out, c.kt, 3, 3,
                                       1, 1, wt, nullptr, bias, res, y);
        };
        CK(launch());
        float he[2];
        CK(probe_max_err(y, ref, ny, err, he));
        const float tol = 8e-3f * he[1]; // the bf16 output's rounding, and float32 sums' order
        const int ok = he[0] <= tol;
        bad += !ok;
        float ms = 0;
        CK(probe_time(launch, 10, &ms));
        printf("%-28s %-4s %8.3f ms %7.1f TFLOP/s  max err %.2e of max %.2e: %s\n", c.name,
               form ? "e4m3" : "bf16", ms, flop / ms * 1e-9, he[0], he[1], ok ? "ok" : "FAIL");
    }
    cudaFree(x), cudaFree(wt), cudaFree(x8), cudaFree(w8), cudaFree(y), cudaFree(ref);
    cudaFree(bias), cudaFree(ones), cudaFree(res);
    return bad;
}

// The rate of mma.sync m16n8k16 bf16 itself, the kernel's ceiling on this GPU: every warp of two
// blocks a multiprocessor issues independent MMAs (8 accumulators) on operands in registers
__global__ void __launch_bounds__(256) peak_kernel(int iters, float *sink) {
    const unsigned a[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
    const unsigned b0 = blockIdx.x, b1 = blockIdx.x + 7;
    float acc[8][4] = {};
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            cu_mma<__nv_bfloat16>::run(acc[k], a, b0, b1);
    float s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
    if (s == 1234.5f) *sink = s; // never true: keeps the MMAs
}

static int peak_rate(float *sink) {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int iters = 4096, blocks = 2 * sms;
    auto launch = [&]() {
        peak_kernel<<<blocks, 256>>>(iters, sink);
        return cudaGetLastError();
    };
    CK(launch());
    float ms = 0;
    CK(probe_time(launch, 10, &ms));
    const double flop = 2.0 * 16 * 8 * 16 * 8 * (double)iters * 8 * blocks;
    printf("mma.sync m16n8k16 bf16 peak (%d blocks of 8 warps): %.1f TFLOP/s\n", blocks,
           flop / ms * 1e-9);
    return 0;
}

int main(int argc, char **argv) {
    static const conv_shape shapes[] = {
        {"384->384 60x104 (4 of 6)", 384, 384, 3, 60, 104, 4, 1},
        {"384->384 120x208 (2 of 4)", 384, 384, 3, 120, 208, 2, 1},
        {"192->192 240x416 (4 of 6)", 192, 192, 3, 240, 416, 4, 0},
        {"96->96 480x832 (4 of 6)", 96, 96, 3, 480, 832, 4, 1},
        {"96->192 odd 37x53", 96, 192, 2, 37, 53, 3, 1},
        {"64->128 odd 19x21", 64, 128, 3, 19, 21, 2, 0},
        {"32->40 odd 9x7", 32, 40, 1, 9, 7, 5, 1},
    };
    const int only = argc > 1 ? atoi(argv[1]) : -1;
    printf("mma_conv_probe: a ring of %d bytes of shared memory a block; the device runs %s\n",
           (int)MMA_CONV_SMEM,
           cuk_mma_device(1)   ? "both forms"
           : cuk_mma_device(0) ? "the 16-bit form only"
                               : "none");
    float *err;
    CK(cudaMalloc(&err, 8));
    if (peak_rate(err)) return 1;
    int bad = 0;
    for (int i = 0; i < (int)(sizeof shapes / sizeof *shapes); i++)
        if (only < 0 || only == i) bad += run_shape(shapes[i], err);
    printf("%s\n", bad ? "FAILED" : "all within tolerance");
    return bad ? 1 : 0;
}
