// probe_common.cuh -- what the kernel labs of bench/ (*_probe.cu, each built alone by nvcc) share:
// the CUDA error check of main(), a bf16 fill with hashed uniform values, a float32 reference conv
// (channels-last, KTRSC filters, 3x3 taps with padding 1) and the error against it.
#pragma once
#include <cstdint>
#include <cmath>
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

// float32 reference conv of a contiguous window x [t_out + kt - 1][h][w][c_in] with filters
// wt [c_out][kt][3][3][c_in]: one thread per output value
__global__ void ref_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *wt, const float *bias,
                           const __nv_bfloat16 *res, float *y, int kt, int t_out, int h, int w,
                           int c_in, int c_out) {
    const int64_t n = (int64_t)t_out * h * w * c_out;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int co = i % c_out, px = i / c_out % w, py = i / c_out / w % h;
        const int j = i / c_out / w / h;
        float s = bias[co] + (res ? __bfloat162float(res[i]) : 0.0f);
        for (int dt = 0; dt < kt; dt++)
            for (int tap = 0; tap < 9; tap++) {
                const int yy = py + tap / 3 - 1, xx = px + tap % 3 - 1;
                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                const __nv_bfloat16 *xr = x + (((int64_t)(j + dt) * h + yy) * w + xx) * c_in;
                const __nv_bfloat16 *wr = wt + (((int64_t)co * kt + dt) * 9 + tap) * c_in;
                for (int c = 0; c < c_in; c++)
                    s += __bfloat162float(xr[c]) * __bfloat162float(wr[c]);
            }
        y[i] = s;
    }
}

__global__ void err_kernel(const __nv_bfloat16 *y, const float *ref, int64_t n, float *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float d = fabsf(__bfloat162float(y[i]) - ref[i]);
        atomicMax((int *)&out[0], __float_as_int(d != d ? INFINITY : d));
        atomicMax((int *)&out[1], __float_as_int(fabsf(ref[i])));
    }
}

// he[0] = the largest |y - ref| (NaN counts as infinite), he[1] = the largest |ref|, over n values;
// err: 8 bytes of device scratch
static cudaError_t probe_max_err(const __nv_bfloat16 *y, const float *ref, int64_t n, float *err,
                                 float he[2]) {
    cudaError_t e = cudaMemset(err, 0, 8);
    if (e != cudaSuccess) return e;
    err_kernel<<<1024, 256>>>(y, ref, n, err);
    return cudaMemcpy(he, err, 8, cudaMemcpyDeviceToHost);
}

// *ms = the mean milliseconds of reps calls of launch() (returning cudaError_t), between two events
template <class F> static cudaError_t probe_time(F launch, int reps, float *ms) {
    cudaEvent_t e0, e1;
    cudaError_t e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e == cudaSuccess) e = cudaEventRecord(e0);
    for (int r = 0; r < reps && e == cudaSuccess; r++)
        e = launch();
    if (e == cudaSuccess) e = cudaEventRecord(e1);
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(ms, e0, e1);
    *ms /= reps;
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return e;
}
