// rms_norm_probe.cu -- how near HBM's rate does the RMS norm (+ SiLU) kernel run at the shapes of
// the Wan decoders (bf16, channels-last), against a plain 16-byte copy of the same bytes, and
// which launch shape helps: the engine's kernel (cuk_rms_norm) beside variants that keep U voxels
// a lane group in flight, read with the streaming cache hint, or launch one block per tile of
// voxels instead of a grid-stride loop; and writing E4M3 codes (x / s against x * (1 / s)).
// Results: bench/RESULTS.md runs 196-200 (the engine's kernel took from them SiLU compiled in,
// the one-block-per-tile grid and a lane's loads all first; H100) and runs 271-273 (H200: the
// persistent grid, codes as products).
// Build and run on the GPU from the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc -o /tmp/rms_probe bench/rms_norm_probe.cu &&
//   /tmp/rms_probe
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../bench/probe_common.cuh"
#include "backends/cuda/kernels/cuda_norm.cu"

__global__ void copy_vec(int4 *dst, const int4 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// U voxels a lane group an iteration (their loads all issued before any reduction), V vectors a
// lane, L lanes a voxel; NC: loads through the non-coherent path with the streaming hint.
template <int V, int U, bool NC, int Q = 0>
__global__ void __launch_bounds__(256)
    rms_u_kernel(const __nv_bfloat16 *x, __nv_bfloat16 *y, int64_t nv, int c, int L, const float *g,
                 int persistent, float s8 = 0.0f) {
    extern __shared__ float4 sh4[];
    float *sg = (float *)sh4;
    for (int i = threadIdx.x; i < c; i += blockDim.x)
        sg[i] = g[i];
    __syncthreads();
    const int N = 8, cv = c / N, vpw = 32 / L;
    const int lane = threadIdx.x & 31, sub = lane & (L - 1);
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = persistent ? ((int64_t)gridDim.x * blockDim.x) >> 5 : 0;
    const float sqc = sqrtf((float)c);
    for (int64_t base = warp * vpw * U; base < nv; base += nw * vpw * U) {
        float r[U][V][N];
        float ss[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = base + u * vpw + lane / L;
            ss[u] = 0.0f;
#pragma unroll
            for (int k = 0; k < V; k++) {
                const int idx = sub + k * L;
                if (v < nv && idx < cv) {
                    const uint4 *p = (const uint4 *)(x + v * c + (int64_t)idx * N);
                    uint4 q = NC ? __ldcs(p) : *p;
                    unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        r[u][k][2 * j] = __uint_as_float(w[j] << 16);
                        r[u][k][2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = base + u * vpw + lane / L;
#pragma unroll
            for (int k = 0; k < V; k++) {
                const int idx = sub + k * L;
                if (v < nv && idx < cv)
#pragma unroll
                    for (int j = 0; j < N; j++)
                        ss[u] += r[u][k][j] * r[u][k][j];
            }
            for (int o = L >> 1; o; o >>= 1)
                ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], o);
            const float sc = sqc / fmaxf(sqrtf(ss[u]), 1e-12f);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const int idx = sub + k * L;
                if (v < nv && idx < cv) {
#pragma unroll
                    for (int j = 0; j < N; j++)
                        r[u][k][j] = cu_act_t<__nv_bfloat16>(CU_ACT_SILU, 1.0f,
                                                             r[u][k][j] * sc * sg[idx * N + j]);
                    if (Q == 0) {
                        vec16<__nv_bfloat16>::store(y + v * c + (int64_t)idx * N, r[u][k]);
                    } else { /* E4M3 codes at the start of each voxel's 16-bit place */
                        uint2 o;
                        uint8_t *bq = (uint8_t *)&o;
                        const float inv = 1.0f / s8;
#pragma unroll
                        for (int j = 0; j < N; j++) {
                            const float t = static_cast<float>(__nv_bfloat16(r[u][k][j]));
                            bq[j] = Q == 1 ? cu_e4m3(t, s8)
                                           : (uint8_t)__nv_cvt_float_to_fp8(t * inv, __NV_SATFINITE,
                                                                            __NV_E4M3);
                        }
                        *(uint2 *)((uint8_t *)(y + v * c) + (int64_t)idx * N) = o;
                    }
                }
            }
        }
        if (!persistent) break;
    }
}

template <int V, int U, bool NC, int Q = 0>
static void launch_u(const void *x, void *y, int64_t nv, int c, int L, const float *g, int pers,
                     int sm) {
    const int64_t per_block = 8 * (32 / L) * U;
    int64_t blocks = (nv + per_block - 1) / per_block;
    if (pers && blocks > (int64_t)sm * 8) blocks = (int64_t)sm * 8;
    rms_u_kernel<V, U, NC, Q><<<(unsigned)blocks, 256, c * sizeof(float)>>>(
        (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, nv, c, L, g, pers, 0.0123f);
}

int main() {
    struct {
        int c;
        int64_t nv;
        const char *what;
    } cases[] = {
        {96, 16LL * 480 * 832, "Wan2.1 480p full res, 96 ch, 16 frames"},
        {192, 16LL * 240 * 416, "Wan2.1 480p half res, 192 ch"},
        {384, 8LL * 120 * 208, "Wan2.1 480p quarter res, 384 ch"},
        {256, 12LL * 352 * 640, "Wan2.2 level 3, 256 ch, 12 frames"},
        {512, 12LL * 352 * 640, "Wan2.2 level 3 input, 512 ch"},
        {1024, 6LL * 176 * 320, "Wan2.2 level 2, 1024 ch"},
    };
    int sm = 0;
    CK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, 0));
    void *a, *b;
    float *g;
    const size_t cap = (size_t)3 << 30;
    CK(cudaMalloc(&a, cap));
    CK(cudaMalloc(&b, cap));
    CK(cudaMalloc(&g, 4096 * sizeof(float)));
    CK(cudaMemset(a, 0x3c, cap));
    std::vector<float> hg(4096, 1.0f);
    CK(cudaMemcpy(g, hg.data(), 4096 * sizeof(float), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (auto &cs : cases) {
        const size_t bytes = (size_t)cs.nv * cs.c * 2;
        const int cv = cs.c / 8;
        int L = 1;
        while (L < 32 && L * 4 < cv)
            L <<= 1;
        const int V = (cv + L - 1) / L;
        printf("== %s: %.2f GB read + written, L %d V %d\n", cs.what, 2.0 * bytes / 1e9, L, V);
        struct {
            const char *name;
            int kind; /* 0 copy, 1 engine, 2 variant, 3 engine writing codes */
        } vs[] = {
            {"copy int4", 0},
            {"engine cuk_rms_norm", 1},
            {"U1 persistent", 2},
            {"U1 one-shot", 2},
            {"U2 persistent", 2},
            {"U2 one-shot", 2},
            {"U2 ldcs one-shot", 2},
            {"U4 one-shot", 2},
            /* E4M3 codes out (1 byte a value in the 16-bit places): the bytes count 3 a value */
            {"engine codes", 3},
            {"U1 codes div", 2},
            {"U1 codes mul", 2},
            {"U2 codes mul", 2},
            {"U1 pers codes mul", 2},
        };
        for (int vi = 0; vi < (int)(sizeof vs / sizeof vs[0]); vi++) {
            auto run = [&]() {
                if (vs[vi].kind == 0) {
                    const size_t n = bytes / 16;
                    copy_vec<<<sm * 8, 256>>>((int4 *)b, (const int4 *)a, n);
                } else if (vs[vi].kind == 1 || vs[vi].kind == 3) {
                    cuk_rms_norm(0, 1 /*bf16*/, a, b, cs.nv, cs.c, g, nullptr, CU_ACT_SILU, 1.0f,
                                 vs[vi].kind == 3 ? 0.0123f : 0.0f, sm);
                } else {
#define PICK(U, NC, Q, P)                                                                          \
    switch (V) {                                                                                   \
    case 1: launch_u<1, U, NC, Q>(a, b, cs.nv, cs.c, L, g, P, sm); break;                          \
    case 2: launch_u<2, U, NC, Q>(a, b, cs.nv, cs.c, L, g, P, sm); break;                          \
    case 3: launch_u<3, U, NC, Q>(a, b, cs.nv, cs.c, L, g, P, sm); break;                          \
    default: launch_u<4, U, NC, Q>(a, b, cs.nv, cs.c, L, g, P, sm); break;                         \
    }
                    switch (vi) { /* Q: 0 bf16 out, 1 codes by division, 2 by product */
                    case 2: PICK(1, false, 0, 1); break;
                    case 3: PICK(1, false, 0, 0); break;
                    case 4: PICK(2, false, 0, 1); break;
                    case 5: PICK(2, false, 0, 0); break;
                    case 6: PICK(2, true, 0, 0); break;
                    case 7: PICK(4, false, 0, 0); break;
                    case 9: PICK(1, false, 1, 0); break;
                    case 10: PICK(1, false, 2, 0); break;
                    case 11: PICK(2, false, 2, 0); break;
                    default: PICK(1, false, 2, 1); break;
                    }
                }
            };
            run();
            CK(cudaDeviceSynchronize());
            float best = 1e30f;
            for (int it = 0; it < 10; it++) {
                CK(cudaEventRecord(e0));
                run();
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (ms < best) best = ms;
            }
            CK(cudaGetLastError());
            const double moved = (vi >= 8 ? 1.5 : 2.0) * bytes; /* codes: 1 byte out a value */
            printf("  %-22s %8.3f ms  %6.0f GB/s\n", vs[vi].name, best, moved / best / 1e6);
        }
    }
    return 0;
}
