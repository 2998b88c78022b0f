/* cuda_common.cuh -- device helpers shared by the kernels of the CUDA backend (nvcc only). */
#ifndef VAE_CUDA_COMMON_CUH
#define VAE_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/cuda_internal.h"

/* vae_dtype values (vae.h), without pulling the C headers into nvcc */
enum { CU_F32 = 0, CU_F16 = 1, CU_BF16 = 2 };
/* vae_act values (program.h) */
enum { CU_ACT_NONE = 0, CU_ACT_SILU = 1, CU_ACT_RELU = 2, CU_ACT_TANH_SCALE = 3 };

__device__ __forceinline__ float cu_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float cu_ld(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ float cu_ld(const __half *p, int64_t i) { return __half2float(p[i]); }

__device__ __forceinline__ void cu_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void cu_st(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void cu_st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float cu_act(int act, float s, float x) {
    switch (act) {
    case CU_ACT_SILU: return x / (1.0f + expf(-x));
    case CU_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case CU_ACT_TANH_SCALE: return tanhf(x / s) * s;
    default: return x;
    }
}

/* Grid size for a grid-stride loop over n items with `threads` per block. */
static inline unsigned cu_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

/* Calls F<T>(args...) with T the storage type of dtype. */
#define CU_DISPATCH(dtype, F, ...)                                                                 \
    do {                                                                                           \
        switch (dtype) {                                                                           \
        case CU_BF16: F<__nv_bfloat16>(__VA_ARGS__); break;                                        \
        case CU_F16: F<__half>(__VA_ARGS__); break;                                                \
        default: F<float>(__VA_ARGS__); break;                                                     \
        }                                                                                          \
    } while (0)

#endif
