// halo_conv_probe.cu -- the 96-filter 3x3(x3) convs of Wan's full-resolution blocks (bf16,
// channels-last) on the halo-tile wgmma kernel (src/backends/cuda/kernels/sm90/halo_conv.cu)
// beside the CUTLASS implicit-GEMM instances the engine has for them (with -DWITH_CUTLASS): time
// a launch (TFLOP/s) and check every kernel against a float32 conv on the CUDA cores, odd shapes
// too
// (partial tiles, kt 1 and 2, three channel blocks, residuals); also the kernel with the RMS norm
// + SiLU in its epilogue (what a folded norm costs it) against that norm of the rounded reference;
// and the kernel's phase mode (halo_conv_run_up2: nearest x2 + 3x3 as four 2 x 2 phase convs,
// written straight into the upsampled output) against a float32 conv of the upsampled input,
// beside CUTLASS's four phase convs into (h+1) x (w+1) planes (the engine's other phase path,
// without its interleave pass); and the kernel's E4M3 form (halo_conv_run8, dtype fp8) on the
// same convs' E4M3 codes beside CUTLASS's E4M3 instance (checked against the float32 conv with
// E4M3's tolerance). Build and run on the GPU from the
// repository root (CUTLASS: the include folders of the nvidia-cutlass wheel's source/):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -w -DNDEBUG
//        -Isrc [-DWITH_CUTLASS -I$C/include -I$C/tools/util/include] -o /tmp/halo_probe
//        bench/halo_conv_probe.cu && /tmp/halo_probe [shape index]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../bench/probe_common.cuh"
#include "backends/cuda/kernels/sm90/halo_conv.cu"
#ifdef WITH_CUTLASS
#define VAE_IGEMM_INSTANTIATE
#include "backends/cuda/kernels/cutlass/igemm8_n96_n128.cu"
#include "backends/cuda/kernels/cutlass/igemm_n96.cu"
#endif

struct conv_shape {
    const char *name;
    int c_in, kt, h, w, t_out, residual;
};
struct bufs {
    const __nv_bfloat16 *x, *wt, *wt_tiled, *res;
    const float *bias, *gamma;
    __nv_bfloat16 *y;
    int sms;
    const __nv_fp8_e4m3 *x8, *w8, *w8_tiled; /* E4M3 codes of x * 448, w * 448 / W_MAX */
    const float *scale8;                     /* [96] (1 / 448) x (W_MAX / 448) */
};
typedef cudaError_t (*launch_fn)(const conv_shape &, const bufs &);

static cudaError_t run_halo(const conv_shape &s, const bufs &b) {
    return halo_conv_run(0, 0, b.x, b.wt_tiled, b.bias, b.res, NULL, b.y, s.kt, s.t_out, s.h, s.w,
                         s.c_in, b.sms);
}
static cudaError_t run_halo_norm(const conv_shape &s, const bufs &b) {
    const halo_conv_norm n = {b.gamma, CU_ACT_SILU, 0.0f};
    return halo_conv_run(0, 0, b.x, b.wt_tiled, b.bias, b.res, &n, b.y, s.kt, s.t_out, s.h, s.w,
                         s.c_in, b.sms);
}
static cudaError_t run_halo8(const conv_shape &s, const bufs &b) {
    return halo_conv_run8(0, 0, b.x8, 1, b.w8_tiled, b.scale8, b.bias, b.res, NULL, b.y, s.kt,
                          s.t_out, s.h, s.w, s.c_in, b.sms);
}
static cudaError_t run_halo8_norm(const conv_shape &s, const bufs &b) {
    const halo_conv_norm n = {b.gamma, CU_ACT_SILU, 0.0f};
    return halo_conv_run8(0, 0, b.x8, 1, b.w8_tiled, b.scale8, b.bias, b.res, &n, b.y, s.kt,
                          s.t_out, s.h, s.w, s.c_in, b.sms);
}

/* q = E4M3 codes of x * m (x, m: a probe's values are within +-1 and +-1/m) */
__global__ void e4m3_kernel(const __nv_bfloat16 *x, __nv_fp8_e4m3 *q, int64_t n, float m) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        q[i] = __nv_fp8_e4m3(__bfloat162float(x[i]) * m);
}

/* ref_n = the RMS norm + SiLU of each pixel of ref [n_pix][96] rounded to bf16 (what the engine's
 * norm pass reads), in float32 */
__global__ void ref_norm_kernel(const float *ref, const float *g, float *ref_n, int64_t n_pix) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n_pix;
         p += (int64_t)gridDim.x * blockDim.x) {
        float v[96], ss = 0.0f;
        for (int c = 0; c < 96; c++)
            v[c] = __bfloat162float(__float2bfloat16(ref[p * 96 + c])), ss += v[c] * v[c];
        const float sc = sqrtf(96.0f) / fmaxf(sqrtf(ss), 1e-12f);
        for (int c = 0; c < 96; c++) {
            const float a = v[c] * sc * g[c];
            ref_n[p * 96 + c] = a / (1.0f + expf(-a));
        }
    }
}

/* xu [t][2h][2w][c] = nearest x2 of x [t][h][w][c] */
__global__ void up2_kernel(const __nv_bfloat16 *x, __nv_bfloat16 *xu, int t, int h, int w, int c) {
    const int64_t n = (int64_t)t * 4 * h * w * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int ch = i % c, xx = i / c % (2 * w), yy = i / c / (2 * w) % (2 * h);
        const int64_t f = i / c / (2 * w) / (2 * h);
        xu[i] = x[((f * h + yy / 2) * w + xx / 2) * c + ch];
    }
}

/* The phase filters [4][96][2][2][c] of 3x3 filters [96][3][3][c] (cuda_conv_phase.c's rule: phase
 * (a, b) row tap r sums the 3x3 rows {0} | {1, 2} (a = 0) or {0, 1} | {2} (a = 1), columns alike)
 */
static std::vector<__nv_bfloat16> phase_filters(const std::vector<__nv_bfloat16> &w3, int c) {
    static const int lo[2][2] = {{0, 1}, {0, 2}}, hi[2][2] = {{0, 2}, {1, 2}};
    std::vector<__nv_bfloat16> out((size_t)4 * 96 * 4 * c);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int o = 0; o < 96; o++)
                for (int r = 0; r < 2; r++)
                    for (int q = 0; q < 2; q++)
                        for (int ci = 0; ci < c; ci++) {
                            float acc = 0.0f;
                            for (int dh = lo[a][r]; dh <= hi[a][r]; dh++)
                                for (int dw = lo[b][q]; dw <= hi[b][q]; dw++)
                                    acc += __bfloat162float(
                                        w3[(((size_t)o * 3 + dh) * 3 + dw) * c + ci]);
                            out[((((size_t)(a * 2 + b) * 96 + o) * 2 + r) * 2 + q) * c + ci] =
                                __float2bfloat16(acc);
                        }
    return out;
}

/* The phase mode on t frames of h x w (c channels in, 96 out): checked against a float32 conv of
 * the upsampled input, timed beside CUTLASS's four phase convs; returns the failures. */
static int probe_up2(const char *name, int c, int t, int h, int w, int residual, int sms) {
    const int64_t nx = (int64_t)t * h * w * c, nxu = 4 * nx, ny = (int64_t)t * 4 * h * w * 96;
    const int64_t nw = (int64_t)96 * 9 * c, np = (int64_t)4 * 96 * 4 * c;
    const int64_t nplane = (int64_t)t * (h + 1) * (w + 1) * 96;
    __nv_bfloat16 *x, *xu, *wt, *wph, *whp, *res = nullptr, *y, *planes;
    float *bias, *ref, *err;
    CK(cudaMalloc(&x, nx * 2));
    CK(cudaMalloc(&xu, nxu * 2));
    CK(cudaMalloc(&wt, nw * 2));
    CK(cudaMalloc(&wph, np * 2));
    CK(cudaMalloc(&whp, np * 2));
    CK(cudaMalloc(&y, ny * 2));
    CK(cudaMalloc(&planes, 4 * nplane * 2));
    CK(cudaMalloc(&ref, ny * 4));
    CK(cudaMalloc(&bias, 96 * 4));
    CK(cudaMalloc(&err, 8));
    probe_fill<<<1024, 256>>>(x, nx, 1.0f, 11);
    probe_fill<<<64, 256>>>(wt, nw, 1.0f / sqrtf(9.0f * c), 12);
    up2_kernel<<<1024, 256>>>(x, xu, t, h, w, c);
    std::vector<float> hb(96);
    for (int i = 0; i < 96; i++)
        hb[i] = 0.01f * (i - 40);
    CK(cudaMemcpy(bias, hb.data(), 96 * 4, cudaMemcpyHostToDevice));
    if (residual) {
        CK(cudaMalloc(&res, ny * 2));
        probe_fill<<<256, 256>>>(res, ny, 1.0f, 13);
    }
    std::vector<__nv_bfloat16> hw(nw);
    CK(cudaMemcpy(hw.data(), wt, nw * 2, cudaMemcpyDeviceToHost));
    const std::vector<__nv_bfloat16> hp = phase_filters(hw, c);
    CK(cudaMemcpy(wph, hp.data(), np * 2, cudaMemcpyHostToDevice));
    CK(halo_conv_tile_phase_filters(0, wph, whp, c));
    ref_kernel<<<4096, 256>>>(xu, wt, bias, res, ref, 1, t, 2 * h, 2 * w, c, 96);
    CK(cudaDeviceSynchronize());
    const double tflop = 2.0 * (ny / 96) * 96 * 4 * c / 1e12; /* the phase convs' MACs */
    printf("%s: %d frames, %.2f TFLOP of phase convs\n", name, t, tflop);
    auto halo = [&] { return halo_conv_run_up2(0, 0, x, whp, bias, res, y, t, h, w, c, sms); };
    CK(cudaMemset(y, 0xff, ny * 2));
    CK(halo());
    float he[2], ms;
    CK(probe_max_err(y, ref, ny, err, he));
    CK(probe_time(halo, tflop > 0.1 ? 10 : 3, &ms));
    const float rel = he[0] / (he[1] > 0 ? he[1] : 1.0f);
    const int bad = !(rel < 1e-2f);
    printf("  %-22s %7.3f ms  %6.0f TFLOP/s  max err %.2e of max |y| %.2f%s\n", "halo wgmma up2",
           ms, tflop / ms * 1e3, he[0], he[1], bad ? "  FAIL" : "");
#ifdef WITH_CUTLASS
    auto phases = [&] {
        for (int p = 0; p < 4; p++) {
            igemm_args a = {x,       wph + p * 96 * 4 * c,
                            nullptr, bias,
                            nullptr, planes + p * nplane,
                            t,       h,
                            w,       c,
                            96,      1,
                            2,       2,
                            1,       1,
                            0};
            cudaError_t e = c % 64 ? igemm_bf16_m256_n96_k32_c21(&a) : igemm_bf16_m256_n96_k64(&a);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    };
    CK(phases());
    CK(probe_time(phases, tflop > 0.1 ? 10 : 3, &ms));
    printf("  %-22s %7.3f ms  %6.0f TFLOP/s  (no interleave)\n", "igemm phases", ms,
           tflop / ms * 1e3);
#endif
    cudaFree(x), cudaFree(xu), cudaFree(wt), cudaFree(wph), cudaFree(whp), cudaFree(y);
    cudaFree(planes), cudaFree(ref), cudaFree(bias), cudaFree(err);
    if (res) cudaFree(res);
    return bad;
}

#ifdef WITH_CUTLASS
template <cudaError_t (*F)(const igemm_args *)>
static cudaError_t run_igemm(const conv_shape &s, const bufs &b) {
    igemm_args a = {b.x, b.wt, nullptr, b.bias, b.res, b.y, s.t_out + s.kt - 1,
                    s.h, s.w,  s.c_in,  96,     s.kt,  3,   3,
                    1,   1,    0};
    return F(&a);
}
static cudaError_t run_igemm8(const conv_shape &s, const bufs &b) {
    if (s.c_in % 64) return cudaErrorNotSupported;
    igemm_args a = {b.x8, b.w8, b.scale8, b.bias, b.res, b.y, s.t_out + s.kt - 1,
                    s.h,  s.w,  s.c_in,   96,     s.kt,  3,   3,
                    1,    1,    0};
    return igemm_e4m3_m256_n96_k64(&a);
}
#endif

int main(int argc, char **argv) {
    const int only = argc > 1 ? atoi(argv[1]) : -1; /* one shape's index, e.g. under ncu */
    const conv_shape shapes[] = {
        {"Wan2.1 96 -> 96 at 480x832", 96, 3, 480, 832, 16, 0},
        {"Wan2.1 96 -> 96 at 480x832, residual", 96, 3, 480, 832, 16, 1},
        {"Wan2.1 192 -> 96 at 480x832", 192, 3, 480, 832, 16, 0},
        {"Wan2.1 192 -> 96 2-D at 480x832", 192, 1, 480, 832, 16, 0},
        {"Wan2.1 96 -> 96 at 720x1280", 96, 3, 720, 1280, 8, 0},
        {"odd: 40x56, residual", 96, 3, 40, 56, 3, 1},
        {"odd: 288 -> 96, kt 2, 23x37", 288, 2, 23, 37, 2, 0},
        {"odd: kt 1, 9x17, residual", 96, 1, 9, 17, 1, 1},
    };
    struct variant {
        const char *name;
        launch_fn fn;
        int norm;  /* checked against ref_n */
        float tol; /* largest error / largest |y| */
    } variants[] = {
        {"halo wgmma", run_halo, 0, 1e-2f},
        {"halo wgmma + norm", run_halo_norm, 1, 1e-2f},
        {"halo e4m3", run_halo8, 0, 8e-2f},
        {"halo e4m3 + norm", run_halo8_norm, 1, 8e-2f},
#ifdef WITH_CUTLASS
        {"igemm 256x96x32 2x1", run_igemm<igemm_bf16_m256_n96_k32_c21>, 0, 1e-2f},
        {"igemm 256x96x64", run_igemm<igemm_bf16_m256_n96_k64>, 0, 1e-2f},
        {"igemm e4m3 256x96x64", run_igemm8, 0, 8e-2f},
#endif
    };
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int fails = 0;
    for (const conv_shape &sh : shapes) {
        if (only >= 0 && &sh - shapes != only) continue;
        const int n_in = sh.t_out + sh.kt - 1, co = 96;
        const int64_t fx = (int64_t)sh.h * sh.w * sh.c_in,
                      ny = (int64_t)sh.t_out * sh.h * sh.w * co;
        const int64_t nw = (int64_t)co * sh.kt * 9 * sh.c_in;
        __nv_bfloat16 *x, *wt, *wtt, *res = nullptr, *y;
        float *bias, *gamma, *ref, *ref_n, *err;
        CK(cudaMalloc(&x, n_in * fx * 2));
        CK(cudaMalloc(&wt, nw * 2));
        CK(cudaMalloc(&wtt, nw * 2));
        CK(cudaMalloc(&y, ny * 2));
        CK(cudaMalloc(&ref, ny * 4));
        CK(cudaMalloc(&ref_n, ny * 4));
        CK(cudaMalloc(&bias, co * 4));
        CK(cudaMalloc(&gamma, co * 4));
        CK(cudaMalloc(&err, 8));
        probe_fill<<<1024, 256>>>(x, n_in * fx, 1.0f, 1);
        probe_fill<<<64, 256>>>(wt, nw, 1.0f / sqrtf(9.0f * sh.kt * sh.c_in), 2);
        CK(halo_conv_tile_filters(0, wt, wtt, sh.kt, sh.c_in));
        const float w_max = 1.0f / sqrtf(9.0f * sh.kt * sh.c_in); /* probe_fill's range */
        __nv_fp8_e4m3 *x8, *w8, *w8t;
        float *scale8;
        CK(cudaMalloc(&x8, n_in * fx));
        CK(cudaMalloc(&w8, nw));
        CK(cudaMalloc(&w8t, nw));
        CK(cudaMalloc(&scale8, co * 4));
        e4m3_kernel<<<1024, 256>>>(x, x8, n_in * fx, 448.0f);
        e4m3_kernel<<<64, 256>>>(wt, w8, nw, 448.0f / w_max);
        CK(halo_conv_tile_filters8(0, w8, w8t, sh.kt, sh.c_in));
        const std::vector<float> hs(co, w_max / (448.0f * 448.0f));
        CK(cudaMemcpy(scale8, hs.data(), co * 4, cudaMemcpyHostToDevice));
        std::vector<float> hb(co);
        for (int i = 0; i < co; i++)
            hb[i] = 0.01f * (i - 40);
        CK(cudaMemcpy(bias, hb.data(), co * 4, cudaMemcpyHostToDevice));
        for (int i = 0; i < co; i++)
            hb[i] = 0.5f + 0.01f * i;
        CK(cudaMemcpy(gamma, hb.data(), co * 4, cudaMemcpyHostToDevice));
        if (sh.residual) {
            CK(cudaMalloc(&res, ny * 2));
            probe_fill<<<256, 256>>>(res, ny, 1.0f, 3);
        }
        ref_kernel<<<4096, 256>>>(x, wt, bias, res, ref, sh.kt, sh.t_out, sh.h, sh.w, sh.c_in, co);
        ref_norm_kernel<<<1024, 128>>>(ref, gamma, ref_n, ny / co);
        CK(cudaDeviceSynchronize());
        const double tflop = 2.0 * ny * sh.kt * 9 * sh.c_in / 1e12;
        printf("%s: %d frames out, %.2f TFLOP\n", sh.name, sh.t_out, tflop);
        const bufs b = {x, wt, wtt, res, bias, gamma, y, sms, x8, w8, w8t, scale8};
        for (const variant &v : variants) {
            CK(cudaMemset(y, 0xff, ny * 2)); /* NaN: unwritten outputs fail */
            const cudaError_t e = v.fn(sh, b);
            if (e == cudaErrorNotSupported) {
                printf("  %-22s does not take it\n", v.name);
                continue;
            }
            CK(e);
            float he[2], ms;
            CK(probe_max_err(y, v.norm ? ref_n : ref, ny, err, he));
            CK(probe_time([&] { return v.fn(sh, b); }, tflop > 0.1 ? 10 : 3, &ms));
            const float rel = he[0] / (he[1] > 0 ? he[1] : 1.0f);
            const int bad = !(rel < v.tol);
            fails += bad;
            printf("  %-22s %7.3f ms  %6.0f TFLOP/s  max err %.2e of max |y| %.2f%s\n", v.name, ms,
                   tflop / ms * 1e3, he[0], he[1], bad ? "  FAIL" : "");
        }
        cudaFree(x), cudaFree(wt), cudaFree(wtt), cudaFree(y), cudaFree(ref), cudaFree(ref_n);
        cudaFree(bias), cudaFree(gamma);
        cudaFree(err), cudaFree(x8), cudaFree(w8), cudaFree(w8t), cudaFree(scale8);
        if (res) cudaFree(res);
    }
    if (only < 0) {
        fails += probe_up2("Wan2.1 192 -> 96 up2 at 240x416", 192, 4, 240, 416, 0, sms);
        fails += probe_up2("Wan2.1 192 -> 96 up2 at 360x640", 192, 4, 360, 640, 0, sms);
        fails += probe_up2("odd: 96 -> 96 up2 at 17x35, residual", 96, 2, 17, 35, 1, sms);
        fails += probe_up2("odd: 288 -> 96 up2 at 9x20", 288, 3, 9, 20, 0, sms);
    }
    printf("%s\n", fails ? "FAILED" : "all kernels match the reference");
    return fails != 0;
}
