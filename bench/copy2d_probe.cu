// copy2d_probe.cu -- how fast are the strided device copies that strips make (cudaMemcpy2DAsync
// device to device, cudaMemset2DAsync) against a plain 16-byte-vector kernel, at the row widths
// strips copy (a strip's rows of channels-last frames: wide rebuilds, 1-3 column slots).
// Build and run on the GPU: nvcc -O2 -o /tmp/copy2d_probe bench/copy2d_probe.cu && /tmp/copy2d_probe
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void copy2d_vec(char *dst, size_t dp, const char *src, size_t sp, size_t row_vecs,
                           size_t rows) {
    size_t n = row_vecs * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / row_vecs, c = i % row_vecs;
        ((int4 *)(dst + r * dp))[c] = ((const int4 *)(src + r * sp))[c];
    }
}

int main() {
    // (row bytes of the copy, source pitch, rows): Wan2.2 704p strips at bf16, 256 channels
    struct { size_t w, sp, rows; const char *what; } cases[] = {
        {164 * 512, 166 * 512, 4 * 352, "rebuild, 1x8 strip (164 px x 256 ch)"},
        {332 * 512, 334 * 512, 4 * 352, "rebuild, 1x4 strip (332 px)"},
        {2 * 512, 166 * 512, 4 * 352, "slot, 2 columns"},
        {1 * 512, 166 * 512, 4 * 352, "margin, 1 column"},
        {640 * 512, 640 * 512, 4 * 352, "contiguous frames (reference)"},
    };
    char *a, *b;
    CK(cudaMalloc(&a, (size_t)1 << 30));
    CK(cudaMalloc(&b, (size_t)1 << 30));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (auto &c : cases) {
        float ms[3] = {0, 0, 0};
        for (int way = 0; way < 3; way++) {
            for (int rep = 0; rep < 2; rep++) { // warm-up, then timed
                CK(cudaEventRecord(e0, st));
                for (int it = 0; it < 20; it++) {
                    if (way == 0)
                        CK(cudaMemcpy2DAsync(b, c.w, a, c.sp, c.w, c.rows, cudaMemcpyDeviceToDevice, st));
                    else if (way == 1)
                        copy2d_vec<<<1056, 256, 0, st>>>(b, c.w, a, c.sp, c.w / 16, c.rows);
                    else
                        CK(cudaMemset2DAsync(b, c.sp, 0, c.w, c.rows, st));
                }
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms[way], e0, e1));
            }
        }
        double bytes = (double)c.w * c.rows * 20;
        printf("%-40s %8.1f KB x %5zu rows: memcpy2D %7.1f GB/s (%6.1f us)  kernel %7.1f GB/s "
               "(%6.1f us)  memset2D %7.1f GB/s\n",
               c.what, c.w / 1024.0, c.rows, bytes / ms[0] / 1e6, ms[0] * 50, bytes / ms[1] / 1e6,
               ms[1] * 50, bytes / ms[2] / 1e6);
    }
    return 0;
}
