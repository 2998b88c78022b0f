/* cuda_common.cuh -- device helpers shared by the kernels of the CUDA backend (nvcc only). */
#ifndef VAE_CUDA_COMMON_CUH
#define VAE_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/kernels/cuda_kernels.h"

/* vae_dtype values (vae.h), without pulling the C headers into nvcc */
enum { CU_F32 = 0, CU_F16 = 1, CU_BF16 = 2, CU_FP8 = 3 };
/* vae_act values (program.h) */
enum {
    CU_ACT_NONE = 0,
    CU_ACT_SILU = 1,
    CU_ACT_RELU = 2,
    CU_ACT_TANH_SCALE = 3,
    CU_ACT_CLAMP01 = 4
};

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

/* The E4M3 code of x at scale s, given inv = cu_e4m3_inv(s) = 1 / s in float32: x * inv rounded to
 * nearest, ties to even, saturating (cvt.rn.satfinite); 0 for a scale of 0. The product, not x / s:
 * a division is ~9 instructions a value, and with it the RMS norms writing codes ran at 1.7 TB/s
 * against 2.6-2.8 (H200); the CPU's emulation and the tests take the same product (core/dtype.h
 * vae_e4m3_inv). Every E4M3 code the kernels make comes from here (the inputs' quantisation, the
 * norms and epilogues writing codes), so that they are the same. */
__device__ __forceinline__ float cu_e4m3_inv(float s) {
    return s > 0.0f ? 1.0f / s : 0.0f;
}
__device__ __forceinline__ uint8_t cu_e4m3(float x, float inv) {
    return (uint8_t)__nv_cvt_float_to_fp8(inv > 0.0f ? x * inv : 0.0f, __NV_SATFINITE, __NV_E4M3);
}
/* cu_e4m3 of 8 values, value k's code in byte k: one conversion a pair (cvt...e4m3x2; the
 * single-value form spends one on each value, its other half zero), the same codes. The
 * 96-channel RMS norm writing codes: 0.805 -> 0.675 ms a 16-frame step (H200). */
__device__ __forceinline__ uint2 cu_e4m3x8(const float *v, float inv) {
    unsigned w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float2 p =
            inv > 0.0f ? make_float2(v[2 * q] * inv, v[2 * q + 1] * inv) : make_float2(0.0f, 0.0f);
        w[q] = (unsigned)__nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3); /* x: low byte */
    }
    return make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
}

__device__ __forceinline__ float cu_act(int act, float s, float x) {
    switch (act) {
    case CU_ACT_SILU: return x / (1.0f + expf(-x));
    case CU_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case CU_ACT_TANH_SCALE: return tanhf(x / s) * s;
    case CU_ACT_CLAMP01: return fminf(fmaxf(x, 0.0f), 1.0f);
    default: return x;
    }
}

/* cu_act with fast intrinsics for 16-bit storage types (their rounding dwarfs __expf's error) */
template <typename T> __device__ __forceinline__ float cu_act_t(int act, float s, float x) {
    if (sizeof(T) == 4) return cu_act(act, s, x);
    switch (act) {
    case CU_ACT_SILU: return __fdividef(x, 1.0f + __expf(-x));
    case CU_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case CU_ACT_TANH_SCALE: return tanhf(x / s) * s;
    case CU_ACT_CLAMP01: return fminf(fmaxf(x, 0.0f), 1.0f);
    default: return x;
    }
}

/* 16-byte vectors of a storage type, converted to / from float32 in registers:
 * vec16<T>::N values per vector; load/store need 16-byte aligned addresses. */
template <typename T> struct vec16;
template <> struct vec16<float> {
    enum { N = 4 };
    static __device__ __forceinline__ void load(const float *p, float *v) {
        float4 a = *(const float4 *)p;
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    }
    static __device__ __forceinline__ void store(float *p, const float *v) {
        *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    }
};
/* Two values of a 16-bit storage type in a 32-bit word, the lower index in the low half. */
template <typename T> struct cu_pair16;
template <> struct cu_pair16<__nv_bfloat16> {
    static __device__ __forceinline__ void unpack(unsigned w, float *v) {
        v[0] = __uint_as_float(w << 16);
        v[1] = __uint_as_float(w & 0xffff0000u);
    }
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* one cvt.rn.bf16x2.f32 */
        return *(unsigned *)&v;
    }
};
template <> struct cu_pair16<__half> {
    static __device__ __forceinline__ void unpack(unsigned w, float *v) {
        v[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
        v[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
    }
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(unsigned *)&v;
    }
};
/* vec16 of a 16-bit type: four words of pairs */
template <typename T> struct cu_vec16_pairs {
    enum { N = 8 };
    static __device__ __forceinline__ void load(const T *p, float *v) {
        uint4 u = *(const uint4 *)p;
        unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) cu_pair16<T>::unpack(w[k], v + 2 * k);
    }
    static __device__ __forceinline__ void store(T *p, const float *v) {
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = cu_pair16<T>::pack(v[2 * k], v[2 * k + 1]);
        *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
    }
};
template <> struct vec16<__nv_bfloat16> : cu_vec16_pairs<__nv_bfloat16> {};
template <> struct vec16<__half> : cu_vec16_pairs<__half> {};

/* all pointers 16-byte aligned (NULL counts as aligned) */
static inline int cu_aligned16(const void *a, const void *b, const void *c) {
    return !(((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15);
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
