/* cuda_fp8.cu -- the activation side of the FP8 (E4M3) convolutions: a call's input scale and
 * its E4M3 copy (the conv itself: cutlass/igemm_conv.cuh, sm90/halo_conv.cu; which convs:
 * cuda_conv_igemm.c).
 *
 * The CPU backend's emulation (cpu_conv.c) is the reference: the scale of a call's input is its
 * largest magnitude / 448 (0 when all zero; where the model bounds the input, the bound / 448:
 * vae_op fp8_bound), each value is rounded to the E4M3 grid of that scale (ties to even,
 * saturating: cvt.rn.satfinite), and the products are accumulated in float32 and scaled back by
 * input scale x weight scale (per output channel) in the epilogue.
 */
#include <cuda_fp8.h>

#include "backends/cuda/kernels/cuda_common.cuh"

/* The largest m of the block's threads, returned to every thread (blockDim.x a multiple of 32). */
static __device__ float block_max(float m) {
    __shared__ float warp_max[32];
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    m = 0.0f;
    for (int k = 0; k < (int)blockDim.x / 32; k++)
        m = fmaxf(m, warp_max[k]);
    return m;
}

/* 8 values (16 bytes) a thread and step where x is 16-byte aligned and n a multiple of 8 (the
 * convs' windows: c_in % 32), else one */
template <typename T> static __global__ void absmax_kernel(const T *x, int64_t n, float *amax) {
    float m = 0.0f;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                  step = (int64_t)gridDim.x * blockDim.x;
    if (n % 8 == 0 && ((uintptr_t)x & 15) == 0) {
        for (int64_t i = tid; i < n / 8; i += step) {
            const uint4 v = ((const uint4 *)x)[i];
            const T *e = (const T *)&v;
#pragma unroll
            for (int k = 0; k < 8; k++)
                m = fmaxf(m, fabsf(cu_ld(e, k)));
        }
    } else {
        for (int64_t i = tid; i < n; i += step)
            m = fmaxf(m, fabsf(cu_ld(x, i)));
    }
    m = block_max(m);
    /* non-negative floats order like their bit patterns (fmaxf above drops NaN) */
    if (threadIdx.x == 0) atomicMax((unsigned int *)amax, __float_as_uint(m));
}

template <typename T>
static __global__ void quant_kernel(const T *x, int64_t n, const float *amax, uint8_t *q) {
    const float inv = cu_e4m3_inv(*amax / 448.0f);
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                  step = (int64_t)gridDim.x * blockDim.x;
    if (n % 8 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)q & 7) == 0) {
        for (int64_t i = tid; i < n / 8; i += step) {
            const uint4 v = ((const uint4 *)x)[i];
            const T *e = (const T *)&v;
            float f[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                f[k] = cu_ld(e, k);
            ((uint2 *)q)[i] = cu_e4m3x8(f, inv);
        }
    } else {
        for (int64_t i = tid; i < n; i += step)
            q[i] = cu_e4m3(cu_ld(x, i), inv);
    }
}

static __global__ void scales_kernel(const float *amax, const float *w_scale, int n, float *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = *amax / 448.0f * w_scale[i];
}

static int grid_for(int64_t n) {
    int64_t g = (n / 8 + 255) / 256;
    return (int)(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

static __global__ void set_kernel(float *p, float v) {
    *p = v;
}

cudaError_t cuk_fp8_quantize(cudaStream_t s, int dtype, const void *x, int64_t n, float bound,
                             float *amax, uint8_t *q) {
    if (dtype != CU_BF16 && dtype != CU_F16) return cudaErrorInvalidValue;
    const int g = grid_for(n);
    if (bound > 0.0f) { /* known from the model: no pass for it */
        set_kernel<<<1, 1, 0, s>>>(amax, bound);
        if (!q) return cudaGetLastError(); /* codes written by the input's producer */
    } else {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s);
        if (e != cudaSuccess) return e;
        if (dtype == CU_BF16)
            absmax_kernel<<<g, 256, 0, s>>>((const __nv_bfloat16 *)x, n, amax);
        else
            absmax_kernel<<<g, 256, 0, s>>>((const __half *)x, n, amax);
    }
    if (dtype == CU_BF16)
        quant_kernel<<<g, 256, 0, s>>>((const __nv_bfloat16 *)x, n, amax, q);
    else
        quant_kernel<<<g, 256, 0, s>>>((const __half *)x, n, amax, q);
    return cudaGetLastError();
}

cudaError_t cuk_fp8_scales(cudaStream_t s, const float *amax, const float *w_scale, int n,
                           float *out) {
    scales_kernel<<<(n + 255) / 256, 256, 0, s>>>(amax, w_scale, n, out);
    return cudaGetLastError();
}

/* One warp per pixel of c channels (c % 8 == 0, c <= 1024): all its lanes read their 8-value
 * chunks before any writes (the two forms share the pixel's place). expand: the codes at the
 * place's start -> 16-bit values of code x s8; else the values -> their codes (cu_e4m3). */
template <typename T>
static __global__ void codes_kernel(void *x, int64_t n_pix, int c, float s8, int expand) {
    enum { MAXK = 1024 / 8 / 32 };
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int chunks = c / 8;
    const float inv8 = cu_e4m3_inv(s8);
    for (int64_t p = warp; p < n_pix; p += nw) {
        T *v = (T *)x + p * c;
        uint8_t *b = (uint8_t *)v;
        float r[MAXK][8];
#pragma unroll
        for (int k = 0; k < MAXK; k++) {
            const int j = lane + 32 * k;
            if (j >= chunks) continue;
            if (expand) {
                const uint2 u = *(const uint2 *)(b + 8 * j);
                const uint8_t *q = (const uint8_t *)&u;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    r[k][i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3))) * s8;
            } else {
                vec16<T>::load(v + 8 * j, r[k]);
            }
        }
        __syncwarp();
#pragma unroll
        for (int k = 0; k < MAXK; k++) {
            const int j = lane + 32 * k;
            if (j >= chunks) continue;
            if (expand) {
                vec16<T>::store(v + 8 * j, r[k]);
            } else {
                *(uint2 *)(b + 8 * j) = cu_e4m3x8(r[k], inv8);
            }
        }
        __syncwarp();
    }
}

cudaError_t cuk_fp8_codes_convert(cudaStream_t s, int dtype, void *x, int64_t n_pix, int c,
                                  float s8, int expand) {
    if ((dtype != CU_BF16 && dtype != CU_F16) || c % 8 || c > 1024 || s8 <= 0.0f)
        return cudaErrorInvalidValue;
    if (n_pix == 0) return cudaSuccess;
    int64_t blocks = (n_pix + 7) / 8; /* 8 warps a block */
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    if (dtype == CU_BF16)
        codes_kernel<__nv_bfloat16><<<(unsigned)blocks, 256, 0, s>>>(x, n_pix, c, s8, expand);
    else
        codes_kernel<__half><<<(unsigned)blocks, 256, 0, s>>>(x, n_pix, c, s8, expand);
    return cudaGetLastError();
}
