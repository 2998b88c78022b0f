// narrow_conv_probe.cu -- the decoders' RGB heads (3x3x3 convs of 96 or 128 channels to 3, bf16,
// channels-last) on the engine's narrow-conv kernel (cuda_narrow_conv.cu) at the shapes of a
// decode step: time a launch (and the input's rate against HBM's ~3 TB/s) for each choice of
// channels a stage (NC), in the plain and the folded form (the temporal taps in N), and check
// every variant against a plain float32 conv on the CUDA cores (odd shapes too: partial tiles,
// kt 1 and 2, residuals, c_out 1 to 8). With -DNARROW_OLD='"file"' it also times an older
// version of the kernel (cuk_narrow_conv of an older cuda_narrow_conv.cu, cut before its
// pointwise section, e.g. `git show REV:FILE | sed '/---- pointwise/,$d'`) in the same run.
// Results: bench/RESULTS.md runs 202, 288, 290. Build and run on the GPU from the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc -o /tmp/narrow_probe bench/narrow_conv_probe.cu &&
//   /tmp/narrow_probe
#include <cmath>
#include <cstdio>
#include <vector>

#include "../bench/probe_common.cuh"
#include "backends/cuda/kernels/cuda_ptx.cuh"
// each kernel file in a namespace of its own (its includes already seen), so that argument
// lookup on the global types finds neither file's templates from the other
namespace cur {
#include "backends/cuda/kernels/cuda_narrow_conv.cu"
}
using cur::narrow_folds;
using cur::narrow_launch;
#ifdef NARROW_OLD
#define cuk_narrow_conv old_cuk_narrow_conv // extern "C": the old file's entries renamed
#define cuk_narrow_conv_fits old_cuk_narrow_conv_fits
#define cuk_pointwise_conv old_cuk_pointwise_conv

namespace old {
#include NARROW_OLD
}
#undef cuk_narrow_conv
#undef cuk_narrow_conv_fits
#undef cuk_pointwise_conv

#endif

typedef cudaError_t (*launch_fn)(cudaStream_t, const cuk_frames *, int, int, int, int, int, int,
                                 const void *, const float *, const void *, void *);
struct variant {
    const char *name;
    launch_fn fn;
    int nc;   // channels a stage: c_in must be a multiple (the engine picks 16 otherwise)
    int fold; // the folded form: the shapes it takes only (narrow_folds)
};
struct shape {
    const char *name;
    int c_in, c_out, kt, h, w, t_out, residual;
};

// the engine's kernel with NC channels a stage, in its plain or folded form (FOLD: the temporal
// taps in N; c_out <= 4 and kt 2 or 3 only)
template <int NC, bool FOLD>
static cudaError_t probe_launch(cudaStream_t s, const cuk_frames *f, int kt, int t, int h, int w,
                                int ci, int co, const void *wt, const float *b, const void *r,
                                void *y) {
    typedef __nv_bfloat16 T;
    if (kt == 3) return narrow_launch<T, NC, 3, FOLD>(s, f, t, h, w, ci, co, wt, b, r, y);
    if (kt == 2) return narrow_launch<T, NC, 2, FOLD>(s, f, t, h, w, ci, co, wt, b, r, y);
    return narrow_launch<T, NC, 1, false>(s, f, t, h, w, ci, co, wt, b, r, y);
}

#ifdef NARROW_OLD
static cudaError_t old_launch(cudaStream_t s, const cuk_frames *f, int kt, int t, int h, int w,
                              int ci, int co, const void *wt, const float *b, const void *r,
                              void *y) {
    return old::old_cuk_narrow_conv(s, CU_BF16, f, kt, t, h, w, ci, co, wt, b, r, y);
}
#endif

int main() {
    const shape shapes[] = {
        {"Wan2.1 head 480x832", 96, 3, 3, 480, 832, 16, 0},
        {"Wan2.1 head 720x1280", 96, 3, 3, 720, 1280, 16, 0},
        {"SeedVR2 head 720x1248", 128, 3, 3, 720, 1248, 16, 0},
        {"odd: 48 -> 5, kt 2, residual", 48, 5, 2, 37, 53, 7, 1},
        {"odd: 96 -> 3, 200x300, blocks of 3 frames", 96, 3, 3, 200, 300, 11, 1},
        {"odd: 32 -> 4, kt 2, residual, 2 frames", 32, 4, 2, 21, 45, 2, 1},
        {"odd: 16 -> 1, kt 3, 1 frame", 16, 1, 3, 17, 18, 1, 0},
        {"odd: 64 -> 8, kt 1, residual", 64, 8, 1, 19, 33, 3, 1},
    };
    const variant variants[] = {
        {"NC 32 fold", probe_launch<32, true>, 32, 1},
        {"NC 32", probe_launch<32, false>, 32, 0},
        {"NC 16 fold", probe_launch<16, true>, 16, 1},
        {"NC 16", probe_launch<16, false>, 16, 0},
#ifdef NARROW_OLD
        {"old kernel", old_launch, 16, 0},
#endif
    };
    int fails = 0;
    for (const shape &sh : shapes) {
        const int n_in = sh.t_out + sh.kt - 1;
        const int64_t fx = (int64_t)sh.h * sh.w * sh.c_in,
                      ny = (int64_t)sh.t_out * sh.h * sh.w * sh.c_out;
        const int64_t nw = (int64_t)sh.c_out * sh.kt * 9 * sh.c_in;
        __nv_bfloat16 *x, *wt, *res = nullptr, *y;
        float *bias, *ref, *err;
        CK(cudaMalloc(&x, n_in * fx * 2));
        CK(cudaMalloc(&wt, nw * 2));
        CK(cudaMalloc(&y, ny * 2));
        CK(cudaMalloc(&ref, ny * 4));
        CK(cudaMalloc(&bias, sh.c_out * 4));
        CK(cudaMalloc(&err, 8));
        probe_fill<<<1024, 256>>>(x, n_in * fx, 1.0f, 1);
        probe_fill<<<64, 256>>>(wt, nw, 1.0f / sqrtf(9.0f * sh.kt * sh.c_in), 2);
        std::vector<float> hb(sh.c_out);
        for (int i = 0; i < sh.c_out; i++)
            hb[i] = 0.1f * (i - 1);
        CK(cudaMemcpy(bias, hb.data(), sh.c_out * 4, cudaMemcpyHostToDevice));
        if (sh.residual) {
            CK(cudaMalloc(&res, ny * 2));
            probe_fill<<<256, 256>>>(res, ny, 1.0f, 3);
        }
        ref_kernel<<<2048, 256>>>(x, wt, bias, res, ref, sh.kt, sh.t_out, sh.h, sh.w, sh.c_in,
                                  sh.c_out);
        CK(cudaDeviceSynchronize());
        cuk_frames fr;
        for (int i = 0; i < n_in; i++)
            fr.p[i] = x + i * fx;
        const double gb = n_in * fx * 2.0 / 1e9;
        printf("%s: %d frames in (%.2f GB), %d out\n", sh.name, n_in, gb, sh.t_out);
        for (const variant &v : variants) {
            if (sh.c_in % v.nc || (v.fold && !narrow_folds(sh.kt, sh.c_out))) continue;
            CK(cudaMemset(y, 0xff, ny * 2)); /* NaN: unwritten outputs fail */
            CK(v.fn(0, &fr, sh.kt, sh.t_out, sh.h, sh.w, sh.c_in, sh.c_out, wt, bias, res, y));
            float he[2], ms;
            CK(probe_max_err(y, ref, ny, err, he));
            CK(probe_time(
                [&] {
                    return v.fn(0, &fr, sh.kt, sh.t_out, sh.h, sh.w, sh.c_in, sh.c_out, wt, bias,
                                res, y);
                },
                sh.h > 100 ? 20 : 3, &ms));
            const float rel = he[0] / (he[1] > 0 ? he[1] : 1.0f);
            const int bad = !(rel < 1e-2f);
            fails += bad;
            printf("  %-12s %7.3f ms  %6.0f GB/s of input  max err %.2e of max |y| %.2f%s\n",
                   v.name, ms, gb / ms * 1e3, he[0], he[1], bad ? "  FAIL" : "");
        }
        cudaFree(x), cudaFree(wt), cudaFree(y), cudaFree(ref), cudaFree(bias), cudaFree(err);
        if (res) cudaFree(res);
    }
    printf("%s\n", fails ? "FAILED" : "all variants match the reference");
    return fails != 0;
}
