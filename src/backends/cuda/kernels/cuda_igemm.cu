/* cuda_igemm.cu -- which CUTLASS implicit-GEMM kernel runs a convolution (cuda_kernels.h:
 * cuk_igemm*), and the halo-tile kernel's entry points (cuk_halo*). The kernels
 * (cutlass/igemm_conv.cuh, cutlass/igemm*_n*.cu, sm90/halo_conv.cu) are built for sm_90a alone,
 * and only where CMake found CUTLASS's headers (VAE_HAVE_CUTLASS, cmake/cutlass.cmake); elsewhere
 * every query here says no. */
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/kernels/cutlass/igemm_conv.cuh"
#include "backends/cuda/kernels/sm90/halo_conv.h"
#include "core/fp8_shapes.h"

enum { IGEMM_BF16 = 2, IGEMM_FP8 = 3 }; /* VAE_DTYPE_BF16, VAE_DTYPE_FP8 (vae.h) */

typedef cudaError_t (*igemm_fn)(const igemm_args *);

/* The widest filter tile that divides c_out, the widest channel tile that divides c_in; the
 * clustered instances where they were measured faster (igemm_conv.cuh). */
static igemm_fn igemm_pick(int dtype, int ci, int co) {
#ifdef VAE_HAVE_CUTLASS
    if (dtype != IGEMM_BF16 || ci % 32 || co % 96 && co % 128) return NULL;
    const int k64 = ci % 64 == 0;
    if (co % 192 == 0) return k64 ? igemm_bf16_m128_n192_k64 : igemm_bf16_m128_n192_k32;
    if (co % 256 == 0 && k64) return igemm_bf16_m128_n128_k64_c12;
    if (co % 128 == 0) return k64 ? igemm_bf16_m128_n128_k64 : igemm_bf16_m128_n128_k32;
    return k64 ? igemm_bf16_m256_n96_k64 : igemm_bf16_m256_n96_k32_c21;
#else
    return NULL;
#endif
}

/* FP8: the widest filter tile that divides c_out, 128 channels a k-block where c_in allows
 * (igemm_conv.cuh: why). Which convs come here is the table's (fp8_shapes.h, its GEMM row:
 * cuk_igemm8_takes); NULL only where no instance built fits the channels, the instances' own
 * limit: a k-block of 64 (or 128) channels, filter tiles of 96, 128, 192 or 256. */
static igemm_fn igemm8_pick(int ci, int co) {
#ifdef VAE_HAVE_CUTLASS
    enum { K_BLOCK = 64 }; /* the narrowest k-block of the E4M3 instances */
    if (ci % K_BLOCK) return NULL;
    const int k128 = ci % (2 * K_BLOCK) == 0;
    if (co % 192 == 0) return k128 ? igemm_e4m3_m128_n192_k128 : igemm_e4m3_m128_n192_k64;
    if (co % 256 == 0 && k128) return igemm_e4m3_m128_n128_k128_c12;
    if (co % 128 == 0) return k128 ? igemm_e4m3_m128_n128_k128 : igemm_e4m3_m128_n128_k64;
    return co % 96 == 0 ? igemm_e4m3_m256_n96_k64 : NULL;
#else
    (void)ci, (void)co;
    return NULL;
#endif
}

/* The GEMM row of the E4M3 table takes the conv (plain geometry: the callers'), and an instance
 * fits its channels */
static igemm_fn igemm8_for(int kt, int kh, int kw, int ph, int pw, int ci, int co) {
    const vae_fp8_conv c = {kt, kh, kw, ph, pw, ci, co, 1};
    return vae_fp8_kernel_takes(VAE_FP8_GEMM, &c) ? igemm8_pick(ci, co) : NULL;
}

int cuk_igemm_built(void) {
#ifdef VAE_HAVE_CUTLASS
    return 1;
#else
    return 0;
#endif
}

int cuk_igemm_device(void) {
    int dev = 0, major = 0, minor = 0;
    if (!cuk_igemm_built()) return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return major == 9 && minor == 0; /* sm_90a code runs on compute capability 9.0 alone */
}

int cuk_igemm_supported(int dtype, int ci, int co) { return igemm_pick(dtype, ci, co) != NULL; }

int cuk_igemm8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co) {
    return igemm8_for(kt, kh, kw, ph, pw, ci, co) != NULL;
}

cudaError_t cuk_igemm_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                           int co, int kt, int kh, int kw, int ph, int pw, const cuk_igemm_geom *g,
                           const void *wt, const float *bias, const void *res, void *y) {
    const igemm_fn fn = igemm_pick(dtype, ci, co);
    if (!fn || t_in < kt) return cudaErrorNotSupported;
    const cuk_igemm_geom plain = {1, 1, 1, ph, pw};
    if (!g) g = &plain;
    const igemm_args a = {x,  wt, NULL, bias, res, y, t_in, h,     w,     ci,    co,     kt,
                          kh, kw, ph,   pw,   s,   1, 0,    g->st, g->sh, g->sw, g->ph1, g->pw1};
    return fn(&a);
}

cudaError_t cuk_igemm8_conv(cudaStream_t s, const void *x8, int xs, int t_in, int h, int w, int ci,
                            int co, int kt, int kh, int kw, int ph, int pw, const void *w8,
                            const float *scale, const float *bias, const void *res, void *y) {
    const igemm_fn fn = igemm8_for(kt, kh, kw, ph, pw, ci, co);
    if (!fn || t_in < kt) return cudaErrorNotSupported;
    const igemm_args a = {x8, w8, scale, bias, res, y,  t_in, h, w, ci, co, kt,
                          kh, kw, ph,    pw,   s,   xs, 0,    1, 1, 1,  ph, pw};
    return fn(&a);
}

cudaError_t cuk_igemm_load(int dtype, int ci, int co) {
    const igemm_fn fn = dtype == IGEMM_FP8 ? igemm8_pick(ci, co) : igemm_pick(dtype, ci, co);
    igemm_args a = {};
    a.load = 1;
    return fn && cuk_igemm_device() ? fn(&a) : cudaSuccess;
}

enum { IGEMM_F16 = 1 }; /* VAE_DTYPE_F16 (vae.h) */

int cuk_halo_takes(int dtype, int kt, int kh, int kw, int ph, int pw, int ci, int co) {
#ifdef VAE_HAVE_CUTLASS
    return (dtype == IGEMM_BF16 || dtype == IGEMM_F16) &&
           halo_conv_fits(kt, kh, kw, ph, pw, ci, co);
#else
    (void)dtype, (void)kt, (void)kh, (void)kw, (void)ph, (void)pw, (void)ci, (void)co;
    return 0;
#endif
}

cudaError_t cuk_halo_tile_filters(cudaStream_t s, const void *w3, void *wh, int kt, int ci) {
#ifdef VAE_HAVE_CUTLASS
    return halo_conv_tile_filters(s, w3, wh, kt, ci);
#else
    (void)s, (void)w3, (void)wh, (void)kt, (void)ci;
    return cudaErrorNotSupported;
#endif
}

/* The HALO row of the E4M3 table takes the conv (fp8_shapes.h), within the kernel's own limits
 * (halo_conv_fits: its 96-filter block, 3 x 3 taps with padding 1) */
int cuk_halo8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co) {
#ifdef VAE_HAVE_CUTLASS
    const vae_fp8_conv c = {kt, kh, kw, ph, pw, ci, co, 1};
    return vae_fp8_kernel_takes(VAE_FP8_HALO, &c) && halo_conv_fits(kt, kh, kw, ph, pw, ci, co);
#else
    (void)kt, (void)kh, (void)kw, (void)ph, (void)pw, (void)ci, (void)co;
    return 0;
#endif
}

cudaError_t cuk_halo8_tile_filters(cudaStream_t s, const void *w8, void *wh8, int kt, int ci) {
#ifdef VAE_HAVE_CUTLASS
    return halo_conv_tile_filters8(s, w8, wh8, kt, ci);
#else
    (void)s, (void)w8, (void)wh8, (void)kt, (void)ci;
    return cudaErrorNotSupported;
#endif
}

cudaError_t cuk_halo8_conv(cudaStream_t s, int dtype, const void *x8, int xs, int t_in, int h,
                           int w, int ci, int kt, const void *wh8, const float *scale,
                           const float *bias, const void *res, const float *nw, int act,
                           float act_scale, float s8, void *y, int blocks) {
#ifdef VAE_HAVE_CUTLASS
    if (t_in < kt) return cudaErrorNotSupported;
    const halo_conv_norm norm = {nw, act, act_scale, s8};
    return halo_conv_run8(s, dtype == IGEMM_F16, x8, xs, wh8, scale, bias, res, &norm, y, kt,
                          t_in - kt + 1, h, w, ci, blocks);
#else
    (void)s, (void)dtype, (void)x8, (void)xs, (void)t_in, (void)h, (void)w, (void)ci, (void)kt,
        (void)wh8;
    (void)scale, (void)bias, (void)res, (void)nw, (void)act, (void)act_scale, (void)s8, (void)y;
    (void)blocks;
    return cudaErrorNotSupported;
#endif
}

cudaError_t cuk_halo_tile_phase_filters(cudaStream_t s, const void *wph, void *whp, int ci) {
#ifdef VAE_HAVE_CUTLASS
    return halo_conv_tile_phase_filters(s, wph, whp, ci);
#else
    (void)s, (void)wph, (void)whp, (void)ci;
    return cudaErrorNotSupported;
#endif
}

cudaError_t cuk_halo_load(int dtype, int up2) {
#ifdef VAE_HAVE_CUTLASS
    return cuk_igemm_device() ? halo_conv_load(dtype == IGEMM_F16, dtype == IGEMM_FP8, up2)
                              : cudaSuccess;
#else
    (void)dtype, (void)up2;
    return cudaSuccess;
#endif
}

cudaError_t cuk_halo_conv_up2(cudaStream_t s, int dtype, const void *x, int t, int h, int w, int ci,
                              const void *whp, const float *bias, const void *res, void *y,
                              int blocks) {
#ifdef VAE_HAVE_CUTLASS
    return halo_conv_run_up2(s, dtype == IGEMM_F16, x, whp, bias, res, y, t, h, w, ci, blocks);
#else
    (void)s, (void)dtype, (void)x, (void)t, (void)h, (void)w, (void)ci, (void)whp, (void)bias;
    (void)res, (void)y, (void)blocks;
    return cudaErrorNotSupported;
#endif
}

cudaError_t cuk_halo_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                          int kt, const void *wh, const float *bias, const void *res,
                          const float *nw, int act, float act_scale, float s8, void *y,
                          int blocks) {
#ifdef VAE_HAVE_CUTLASS
    if (t_in < kt) return cudaErrorNotSupported;
    const halo_conv_norm norm = {nw, act, act_scale, s8};
    return halo_conv_run(s, dtype == IGEMM_F16, x, wh, bias, res, &norm, y, kt, t_in - kt + 1, h, w,
                         ci, blocks);
#else
    (void)s, (void)dtype, (void)x, (void)t_in, (void)h, (void)w, (void)ci, (void)kt, (void)wh;
    (void)bias, (void)res, (void)nw, (void)act, (void)act_scale, (void)s8, (void)y, (void)blocks;
    return cudaErrorNotSupported;
#endif
}
