/* halo_conv.h -- the halo-tile wgmma convolution (halo_conv.cu, sm_90a; internal to the CUDA
 * backend: only ../cuda_igemm.cu calls these, and only where the sm_90a kernels were built). */
#ifndef VAE_HALO_CONV_H
#define VAE_HALO_CONV_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernel takes the conv: 96 filters, 3 x 3 taps with padding 1, any kt, c_in a
 * multiple of 96 (either form: 16-bit operands, or E4M3 ones by halo_conv_run8) */
int halo_conv_fits(int kt, int kh, int kw, int ph, int pw, int c_in, int c_out);
/* The filters' layout for the kernel: src [96][kt][3][3][c_in] (16-bit) -> dst
 * [kt][c_in / 96][9][12][96][8] (the same size) */
cudaError_t halo_conv_tile_filters(cudaStream_t s, const void *src, void *dst, int kt, int c_in);
/* An RMS norm of each output pixel (Wan's RMS_norm, then an activation): y = act(y / max(|y|,
 * 1e-12) * sqrt(96) * w[c]) with act a CU_ACT_* (act_scale: cu_act's); w NULL: none. s8 > 0:
 * y written as the E4M3 codes of its 16-bit values / s8, each pixel's 96 codes at the start of its
 * place (op.h fp8_codes_bound: what an E4M3 conv reading y takes as it is). */
typedef struct halo_conv_norm {
    const float *w; /* [96] float32 */
    int act;
    float act_scale;
    float s8;
} halo_conv_norm;

/* The E4M3 form (halo_conv_run8): src [96][kt][3][3][c_in] E4M3 codes -> dst
 * [kt][c_in / 96][9][6][96][16] (the same size) */
cudaError_t halo_conv_tile_filters8(cudaStream_t s, const void *src, void *dst, int kt, int c_in);

/* The nearest-x2 upsampling convs' four 2 x 2 phase filters (cuda_conv_phase.c) for
 * halo_conv_run_up2: src [4][96][2][2][c_in] -> dst [4][c_in / 96][4][12][96][8] */
cudaError_t halo_conv_tile_phase_filters(cudaStream_t s, const void *src, void *dst, int c_in);

/* y [t_out][h][w][96] = bias + res + conv(x, wt), then the norm: x [t_out + kt - 1][h][w][c_in]
 * 16-bit (is_half: float16, else bfloat16), wt tiled by halo_conv_tile_filters, bias [96] float32
 * or NULL, res [t_out][h][w][96] or NULL (may be y), norm NULL or norm->w NULL: none; blocks: the
 * persistent grid (the multiprocessor count). cudaErrorNotSupported where the TMA cannot
 * describe x. */
cudaError_t halo_conv_run(cudaStream_t s, int is_half, const void *x, const void *wt,
                          const float *bias, const void *res, const halo_conv_norm *norm, void *y,
                          int kt, int t_out, int h, int w, int c_in, int blocks);
/* The same conv on E4M3 operands: x8 the window's codes (xs 1: packed; 2: each pixel's codes at
 * the start of a place twice their size, op.h fp8_codes_bound), wt8 the filters' codes tiled
 * by halo_conv_tile_filters8, scale [96] float32 each filter's factor of its float32 sums (input
 * scale x weight scale); y = sum x scale + bias + res, then the norm; res and y 16-bit (is_half:
 * float16, else bfloat16). */
cudaError_t halo_conv_run8(cudaStream_t s, int is_half, const void *x8, int xs, const void *wt8,
                           const float *scale, const float *bias, const void *res,
                           const halo_conv_norm *norm, void *y, int kt, int t_out, int h, int w,
                           int c_in, int blocks);
/* y [t][2h][2w][96] = bias + res + conv3x3(nearest x2 of x): x [t][h][w][c_in], wt the phase
 * filters tiled by halo_conv_tile_phase_filters. Each output phase (row parity a, column parity
 * b) is a 2 x 2 conv of x over the halo's rows a.., columns b.., written straight to its rows and
 * columns of y: no upsampled input, no phase planes, no interleave pass. */
cudaError_t halo_conv_run_up2(cudaStream_t s, int is_half, const void *x, const void *wt,
                              const float *bias, const void *res, void *y, int t, int h, int w,
                              int c_in, int blocks);
/* The module of the kernel halo_conv_run (e4m3: halo_conv_run8; up2: halo_conv_run_up2, 16-bit)
 * would launch, loaded now (a warm-up: under CUDA's lazy loading its first launch would). */
cudaError_t halo_conv_load(int is_half, int e4m3, int up2);

#ifdef __cplusplus
}
#endif

#endif
