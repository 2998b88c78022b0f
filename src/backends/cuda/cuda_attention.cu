/* cuda_attention.cu -- the row softmax of the blocked attention (cuda_ops.c runs the GEMMs).
 * Scores arrive in float32 (already scaled); rows are normalised in float32 and written in the
 * activation dtype for the P*V GEMM. */
#include <math.h>

#include "backends/cuda/cuda_common.cuh"

enum { SM_THREADS = 256 };

template <int MAX> static __device__ __forceinline__ float block_reduce(float v, float *sh) {
    for (int o = 16; o; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read from the previous reduction */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
    for (int o = 16; o; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    return v;
}

template <typename T>
static __global__ void softmax_kernel(const float *s, T *p, int64_t rows, int n) {
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *sr = s + row * n;
        T *pr = p + row * n;
        float m = -INFINITY;
        for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sr[j]);
        m = block_reduce<1>(m, sh);
        float sum = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x) sum += expf(sr[j] - m);
        sum = block_reduce<0>(sum, sh);
        const float inv = 1.0f / sum;
        for (int j = threadIdx.x; j < n; j += blockDim.x) cu_st(pr, j, expf(sr[j] - m) * inv);
        __syncthreads(); /* before the next row reuses sh */
    }
}

template <typename T>
static void launch_softmax(cudaStream_t st, const float *s, void *p, int64_t rows, int n) {
    int64_t blocks = rows < 65535LL * 16 ? rows : 65535LL * 16;
    softmax_kernel<T><<<(unsigned)blocks, SM_THREADS, 0, st>>>(s, (T *)p, rows, n);
}

extern "C" cudaError_t cuk_softmax_rows(cudaStream_t s, int dtype, const float *sc, void *p,
                                        int64_t rows, int n) {
    if (rows == 0 || n == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_softmax, s, sc, p, rows, n);
    return cudaGetLastError();
}
