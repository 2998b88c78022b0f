// attention_probe.cu -- where one frame's attention goes on the GEMM path of cuda_att.c (the
// decoders' single-head attention at its shapes: Wan2.1 6240 / 14400 tokens x 384 channels,
// SeedVR2 14040 x 512; bf16): the scores on cuBLAS (float32 out), the softmax over rows of scores
// (the three-pass kernel and the one-read kernel of cuda_attention.cu), P V on cuBLAS, each timed
// alone and the frame's blocks back to back, beside the fused mma kernel (cuk_attention) for the
// whole frame. Blocks of query rows as the engine makes them (128 MB of scratch at most), then of
// 256-1536 rows (blocks whose scores stay in the L2). Results: bench/RESULTS.md runs 202, 276
// (smaller blocks were slower at every shape: the GEMMs lose more than the softmax gains).
// Build and run on the GPU from the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc -o /tmp/att_probe bench/attention_probe.cu -lcublas &&
//   /tmp/att_probe
#include <cstdio>

#include <cublas_v2.h>

#include "../bench/probe_common.cuh"
#include "backends/cuda/kernels/cuda_attention.cu"

#define CB(x)                                                                                      \
    do {                                                                                           \
        if ((x) != CUBLAS_STATUS_SUCCESS) {                                                        \
            printf("%s failed\n", #x);                                                             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

// largest |a - b| over n bf16 values
__global__ void diff_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, int64_t n, float *o) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float d = fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i]));
        atomicMax((int *)o, __float_as_int(d != d ? INFINITY : d));
    }
}

// query rows a block of `bytes` scratch holds (float32 scores + bf16 P), as cuda_att.c sizes them
static int att_rows_within(size_t bytes, int n) {
    const size_t rows = bytes / ((size_t)n * 6) / 64 * 64;
    return rows > (size_t)n ? n : (int)rows;
}

int main() {
    struct {
        const char *name;
        int n, c;
    } shapes[] = {
        {"Wan2.1 480p", 6240, 384}, {"Wan2.1 720p", 14400, 384}, {"SeedVR2 720p", 14040, 512}};
    cublasHandle_t hb;
    CB(cublasCreate(&hb));
    cudaEvent_t ev[8];
    for (auto &e : ev)
        CK(cudaEventCreate(&e));
    const int reps = 10;
    for (auto &sh : shapes) {
        const int n = sh.n, c = sh.c;
        const int engine_rows = att_rows_within((size_t)128 << 20, n);
        const int rows_list[] = {engine_rows, 256, 512, 768, 1024, 1536};
        const int max_rows = n;
        __nv_bfloat16 *qkv, *y, *y2, *p, *p2;
        float *sc, *dmax;
        CK(cudaMalloc(&qkv, (size_t)n * 3 * c * 2));
        CK(cudaMalloc(&y, (size_t)n * c * 2));
        CK(cudaMalloc(&y2, (size_t)n * c * 2));
        CK(cudaMalloc(&sc, (size_t)max_rows * n * 4));
        CK(cudaMalloc(&p, (size_t)max_rows * n * 2));
        CK(cudaMalloc(&p2, (size_t)max_rows * n * 2));
        CK(cudaMalloc(&dmax, 4));
        probe_fill<<<1024, 256>>>(qkv, (int64_t)n * 3 * c, 2.0f, 7);
        const float scale = 1.0f / sqrtf((float)c), zero = 0.f, one = 1.f;
        // query rows r0 .. r0 + mb: their scores sc = scale q k^T (float32), y = P v
        auto scores = [&](int r0, int mb) {
            return cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, n, mb, c, &scale, qkv + c,
                                CUDA_R_16BF, 3 * c, qkv + (size_t)r0 * 3 * c, CUDA_R_16BF, 3 * c,
                                &zero, sc, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        auto pv = [&](int r0, int mb) {
            return cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, c, mb, n, &one, qkv + 2 * c,
                                CUDA_R_16BF, 3 * c, p, CUDA_R_16BF, n, &zero, y + (size_t)r0 * c,
                                CUDA_R_16BF, c, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        for (int ri = 0; ri < (int)(sizeof rows_list / sizeof rows_list[0]); ri++) {
            const int rows = rows_list[ri] < n ? rows_list[ri] : n;
            if (ri > 0 && rows == engine_rows) continue;
            float t_sc = 0, t_sm = 0, t_sm2 = 0, t_pv = 0, ms;
            for (int r = 0; r < reps; r++)
                for (int r0 = 0; r0 < n; r0 += rows) {
                    const int mb = n - r0 < rows ? n - r0 : rows;
                    CK(cudaEventRecord(ev[0]));
                    CB(scores(r0, mb));
                    CK(cudaEventRecord(ev[1]));
                    att_softmax_rows_kernel<<<mb, SM_THREADS>>>(sc, p2, n);
                    CK(cudaEventRecord(ev[2]));
                    CK(cuk_softmax_rows(0, CU_BF16, sc, p, mb, n));
                    CK(cudaEventRecord(ev[3]));
                    CB(pv(r0, mb));
                    CK(cudaEventRecord(ev[4]));
                    CK(cudaEventSynchronize(ev[4]));
                    if (r == 0) continue; // warm-up
                    CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
                    t_sc += ms;
                    CK(cudaEventElapsedTime(&ms, ev[1], ev[2]));
                    t_sm += ms;
                    CK(cudaEventElapsedTime(&ms, ev[2], ev[3]));
                    t_sm2 += ms;
                    CK(cudaEventElapsedTime(&ms, ev[3], ev[4]));
                    t_pv += ms;
                    if (r0 == 0 && r == 1 && ri == 0) { // the two softmax kernels agree
                        CK(cudaMemset(dmax, 0, 4));
                        diff_kernel<<<1024, 256>>>(p, p2, (int64_t)mb * n, dmax);
                        float d;
                        CK(cudaMemcpy(&d, dmax, 4, cudaMemcpyDeviceToHost));
                        printf("%s: softmax kernels differ by at most %.2e\n", sh.name, d);
                    }
                }
            // the frame's blocks back to back, as the engine launches them (no host waits between)
            CK(cudaEventRecord(ev[5]));
            for (int r = 0; r < reps; r++)
                for (int r0 = 0; r0 < n; r0 += rows) {
                    const int mb = n - r0 < rows ? n - r0 : rows;
                    CB(scores(r0, mb));
                    CK(cuk_softmax_rows(0, CU_BF16, sc, p, mb, n));
                    CB(pv(r0, mb));
                }
            CK(cudaEventRecord(ev[6]));
            CK(cudaEventSynchronize(ev[6]));
            float t_frame;
            CK(cudaEventElapsedTime(&t_frame, ev[5], ev[6]));
            const int k = reps - 1;
            const double tf = 4.0 * n * (double)n * c / 1e12; // TFLOP a frame
            const double gemm = t_sc / k + t_sm2 / k + t_pv / k;
            printf(
                "%s (%d tokens x %d, blocks of %d rows%s), ms a frame: scores %.3f, softmax 3-pass "
                "%.3f / one-read %.3f, P V %.3f; GEMM path %.3f (%.0f TFLOP/s), back to back "
                "%.3f\n",
                sh.name, n, c, rows, ri == 0 ? ": the engine's" : "", t_sc / k, t_sm / k, t_sm2 / k,
                t_pv / k, gemm, tf / gemm * 1e3, t_frame / reps);
        }
        CK(cudaEventRecord(ev[5]));
        for (int r = 0; r < reps; r++)
            CK(cuk_attention(0, CU_BF16, qkv, y2, 1, n, c, scale));
        CK(cudaEventRecord(ev[6]));
        CK(cudaEventSynchronize(ev[6]));
        float t_fused;
        CK(cudaEventElapsedTime(&t_fused, ev[5], ev[6]));
        CK(cudaMemset(dmax, 0, 4));
        diff_kernel<<<1024, 256>>>(y, y2, (int64_t)n * c, dmax);
        float d;
        CK(cudaMemcpy(&d, dmax, 4, cudaMemcpyDeviceToHost));
        printf("%s: fused %.3f ms a frame (%.0f TFLOP/s); outputs differ by %.2e\n", sh.name,
               t_fused / reps, 4.0 * n * (double)n * c / 1e12 / t_fused * reps * 1e3, d);
        cudaFree(qkv), cudaFree(y), cudaFree(y2), cudaFree(sc), cudaFree(p), cudaFree(p2),
            cudaFree(dmax);
    }
    return 0;
}
