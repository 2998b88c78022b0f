// probe_common.cuh -- what the kernel labs of bench/ (*_probe.cu, each built alone by nvcc) share:
// the CUDA error check of main() and a bf16 fill with hashed uniform values.
#pragma once
#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

// returns 1 from the calling function (main) with the failing call and CUDA's message
#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

// p[i] uniform in [-a, a) from a hash of i and the seed
__global__ void probe_fill(__nv_bfloat16 *p, int64_t n, float a, unsigned seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
        p[i] = __float2bfloat16(a * ((x >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}
