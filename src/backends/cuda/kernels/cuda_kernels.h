/* cuda_kernels.h -- the kernels' C-callable launchers (the cuk_* that the .cu files define),
 * internal to the CUDA backend. The ground floor: nvcc and the C side both read it, and it
 * includes nothing of the engine, so the kernels never see the backend's state.
 *
 * Activations are channels-last [t][h][w][c] in the backend's dtype (float32, bfloat16 or
 * float16) in device memory. Arithmetic is float32 throughout (norm statistics, softmax,
 * GEMM/conv accumulation); float32 activations never use TF32.
 *
 * The launchers take `int dtype` (a vae_dtype) and raw pointers; they never report errors
 * themselves: the C callers turn a cudaError_t into vae_fail(..) with the op's name.
 */
#ifndef VAE_CUDA_KERNELS_H
#define VAE_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Frame pointer lists go to kernels by value (no host-to-device copy): at most this many. */
enum { CUK_MAX_FRAMES = 32 };
typedef struct cuk_frames {
    const void *p[CUK_MAX_FRAMES];
} cuk_frames;

/* ---- launchers (cuda_*.cu) ------------------------------------------------------------------ */
/* 1 when kernels of this binary can run on the current device. */
int cuk_probe(void);

/* rows rows of row_bytes from src (src_pitch apart) to dst (dst_pitch apart), both in this
 * device's memory: a kernel moves strided rows at about 1.6x cudaMemcpy2DAsync's rate (H100,
 * bench/copy2d_probe.cu). */
cudaError_t cuk_copy2d(cudaStream_t s, void *dst, size_t dst_pitch, const void *src,
                       size_t src_pitch, size_t row_bytes, size_t rows);

/* dst (dtype) <- src float32, and back. */
cudaError_t cuk_from_f32(cudaStream_t s, int dtype, void *dst, const float *src, size_t n);
cudaError_t cuk_to_f32(cudaStream_t s, int dtype, float *dst, const void *src, size_t n);

/* planar float32 src[c][n] -> dst[n][c] (dtype), and back (n = t*h*w pixels) */
cudaError_t cuk_planar_to_act(cudaStream_t s, int dtype, const float *src, void *dst, int64_t n,
                              int c);
cudaError_t cuk_act_to_planar(cudaStream_t s, int dtype, const void *src, float *dst, int64_t n,
                              int c);

/* kind 0: y = act(a); 1: y = act(a + b); 2: y = act(a * w[c] + sh[c]) (w, sh float32 or NULL) */
cudaError_t cuk_eltwise(cudaStream_t s, int dtype, int kind, int act, float act_scale,
                        const void *a, const void *b, const float *w, const float *sh, void *y,
                        int64_t n_vox, int c);
/* A conv's weights in a device layout from its filters src [co][ci][kt][kh][kw] on the device,
 * already in the layout's dtype: dst [kp][kt][kh][kw][width] (three_d; ci < width) or
 * [kp][kh][kw][width] (taps next to the channels: dt * ci + c < width); filters past co and
 * channels past the real ones 0 */
cudaError_t cuk_weight_layout(cudaStream_t s, int dtype, const void *src, void *dst, int co, int kp,
                              int ci, int kt, int kh, int kw, int three_d, int width);
/* Narrow 3x3(x3) convs, stride 1, padding 1, c_out <= CUK_NARROW_MAX, c_in a multiple of 16,
 * kt <= CUK_NARROW_KT, 16-bit (cuda_narrow_conv.cu): y [t_out][h][w][c_out] = bias + res + conv
 * of frames[j .. j+kt) with the 3-D weight layout wt [>= c_out][kt][3][3][c_in] (16-byte
 * aligned); bias float32 or NULL, res y-shaped (may be y) or NULL; frame data 16-byte aligned.
 * cuk_narrow_conv_fits: 1 when the kernel takes these sizes (its filters sit in shared memory:
 * c_in up to ~300 at 3 outputs, ~110 at 8; a frame's h w c_in below 2^31). */
enum { CUK_NARROW_MAX = 8, CUK_NARROW_KT = 3 };
int cuk_narrow_conv_fits(int kt, int c_in, int c_out, int h, int w);
cudaError_t cuk_narrow_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt,
                            int t_out, int h, int w, int c_in, int c_out, const void *wt,
                            const float *bias, const void *res, void *y);
/* Stem convs (cuda_stem_conv.cu): an encoder's first conv, few channels in (kt * 3 * c_in <= 32),
 * c_out 32, 64, 96 or 128, 3x3 with stride and padding 1, 16-bit; frames as cuk_narrow_conv's
 * (t_out + kt - 1 of them), wt [c_out][kt][3][3][c_in], bias float32 or NULL, res as y or NULL;
 * relu: a ReLU of the sum (the conv's folded activation). */
int cuk_stem_conv_fits(int kt, int c_in, int c_out, int h, int w);
cudaError_t cuk_stem_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt, int t_out,
                          int h, int w, int c_in, int c_out, const void *wt, const float *bias,
                          const void *res, int relu, void *y);
/* y[r][k] = src[r][k] (+ res[r][k]) for k < c; src rows have cs >= c channels */
cudaError_t cuk_narrow(cudaStream_t s, int dtype, const void *src, int cs, const void *res, void *y,
                       int c, int64_t rows);
/* Pointwise convs with few channels (cuda_narrow_conv.cu), any dtype: y [nf][hw][c_out] = bias +
 * res + w [c_out][c_in] (activation dtype) times frames[j] [hw][c_in]; c_in, c_out at most
 * CUK_POINTWISE_MAX; bias float32 or NULL, res y-shaped (may be y) or NULL. */
enum { CUK_POINTWISE_MAX = 64 };
cudaError_t cuk_pointwise_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int nf,
                               int64_t hw, int c_in, int c_out, const void *wt, const float *bias,
                               const void *res, void *y);
/* Depthwise convs (cuda_depthwise_conv.cu, op.h groups = c_in), any dtype: y [nf][ho][wo][c_out]
 * = bias + res + the kh x kw taps of input channel co / (c_out / c_in) of frames[j] [h][w][c_in]
 * (zero padding ph before the rows, pw before the columns; the sizes after follow from ho, wo),
 * strides sh, sw; wt [c_out][kh][kw] float32 (PyTorch's layout), bias float32 or NULL, res
 * y-shaped (may be y) or NULL; float32 sums. cuk_depthwise_fits: the kernel takes kh x kw (its
 * channels' filters sit in shared memory: at most CUK_DEPTHWISE_MAX_TAPS taps). */
enum { CUK_DEPTHWISE_MAX_TAPS = 384 };
typedef struct cuk_depthwise_geom {
    int h, w, c_in, c_out, kh, kw, sh, sw, ph, pw, ho, wo;
} cuk_depthwise_geom;
int cuk_depthwise_fits(int kh, int kw);
cudaError_t cuk_depthwise_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int nf,
                               const cuk_depthwise_geom *g, const float *wt, const float *bias,
                               const void *res, void *y);
/* FP8 convs (cuda_fp8.cu): *amax = the largest |x| of n values (dtype; bound > 0: bound, a
 * bound known from the model, vae_op fp8_bound), q = E4M3 codes of x at scale *amax / 448 (cu_e4m3;
 * satfinite, ties to even; zeros when *amax is 0; q NULL with a bound: *amax only); out[i] = *amax
 * / 448 * w_scale[i] for i < n (the epilogue's scale per output channel). cuk_fp8_codes_convert:
 * n_pix pixels of c channels (c % 8 == 0, c <= 1024) in place between E4M3 codes at the start of
 * each pixel's place (op.h fp8_codes_bound) and 16-bit values in dtype (expand: codes to
 * values code x s8; else values to codes of value / s8, which gives expanded codes back as they
 * were). */
cudaError_t cuk_fp8_quantize(cudaStream_t s, int dtype, const void *x, int64_t n, float bound,
                             float *amax, uint8_t *q);
cudaError_t cuk_fp8_scales(cudaStream_t s, const float *amax, const float *w_scale, int n,
                           float *out);
cudaError_t cuk_fp8_codes_convert(cudaStream_t s, int dtype, void *x, int64_t n_pix, int c,
                                  float s8, int expand);
/* Implicit-GEMM convs on Hopper tensor cores (cuda_igemm.cu; kernels only with VAE_HAVE_CUTLASS):
 * y [t_in-kt+1][h][w][co] = bias + res + conv of the window x [t_in][h][w][ci] with the 3-D weight
 * layout wt [co][kt][kh][kw][ci], stride 1, spatial padding ph / pw on both sides, none in time
 * (the window holds the cached frames); bias float32 or NULL, res y-shaped (may be y) or NULL;
 * 16-byte aligned tensors. cudaErrorNotSupported where no kernel takes the problem. */
int cuk_igemm_built(void);  /* this build has the kernels (CMake found CUTLASS) */
int cuk_igemm_device(void); /* ... and the current device runs them (sm_90) */
/* The same with E4M3 operands (x8 [t_in][h][w][ci], w8 [co][kt][kh][kw][ci] codes): y = acc *
 * scale[co] + bias + res, scale float32 on the device (cuk_fp8_scales). xs: x8's places per
 * value (1 packed; 2: E4M3 codes in 16-bit places, op.h fp8_codes_bound). cuk_igemm8_takes: the
 * convs of the E4M3 table's GEMM row (core/fp8_shapes.h) that a built instance fits. */
int cuk_igemm8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co);
cudaError_t cuk_igemm8_conv(cudaStream_t s, const void *x8, int xs, int t_in, int h, int w, int ci,
                            int co, int kt, int kh, int kw, int ph, int pw, const void *w8,
                            const float *scale, const float *bias, const void *res, void *y);
/* The implicit GEMM on mma.sync (cuda_mma_conv.cu; sm_80+) for the GPUs without the sm_90a
 * kernels (Ampere, Ada, consumer Blackwell; Hopper under VAE_CUDA_MMA=1): the problem of
 * cuk_igemm_conv (any kt x kh x kw with padding below the kernel, c_in a multiple of 16, c_out of
 * 8) on 16-bit operands in dtype, or with scale (non-NULL) the one of cuk_igemm8_conv on E4M3
 * codes (sm_89+; c_in a multiple of 32), y and res in dtype (16-bit). cuk_mma_device: the current
 * device has those MMAs and this build's code for it runs them. cuk_mma_supported: the kernel's
 * own channel limits (dtype: the operands', VAE_DTYPE_FP8 for E4M3), cuk_mma_takes: they, the
 * geometry, and for E4M3 the table's MMA row (core/fp8_shapes.h). */
int cuk_mma_device(int e4m3);
int cuk_mma_supported(int dtype, int ci, int co);
int cuk_mma_takes(int dtype, int kt, int kh, int kw, int ph, int pw, int ci, int co);
cudaError_t cuk_mma_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                         int co, int kt, int kh, int kw, int ph, int pw, const void *wt,
                         const float *scale, const float *bias, const void *res, void *y);
int cuk_igemm_supported(int dtype, int ci, int co); /* a kernel exists for these channels */
/* A strided or unevenly padded conv for cuk_igemm_conv: strides in t, h, w and the padding after
 * the rows and columns (ph, pw: before them); NULL there: stride 1, ph / pw on both sides. */
typedef struct cuk_igemm_geom {
    int st, sh, sw, ph1, pw1;
} cuk_igemm_geom;
cudaError_t cuk_igemm_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                           int co, int kt, int kh, int kw, int ph, int pw, const cuk_igemm_geom *g,
                           const void *wt, const float *bias, const void *res, void *y);
/* The halo-tile wgmma conv (sm90/halo_conv.cu, built with the CUTLASS kernels for sm_90a): 96
 * filters, 3x3 taps with padding 1, c_in a multiple of 96, 16-bit; each input frame's 18 x 18
 * pixel tile read once for all nine taps. Its filters: [kt][c_in / 96][9][12][96][8], tiled from
 * the 3-D layout [96][kt][3][3][c_in] by cuk_halo_tile_filters (same size). cuk_halo_conv: y
 * [t_in-kt+1][h][w][96] = bias + res + conv of the window x [t_in][h][w][c_in] (as
 * cuk_igemm_conv), then with nw (NULL: none) each pixel's RMS norm y = act(rms(y) * nw) (CU_ACT_*,
 * act_scale: cu_act's) of the rounded y, rounded again (as the separate norm pass would), and
 * with s8 > 0 written as E4M3 codes as cuk_rms_norm writes them; blocks: the multiprocessor
 * count. */
int cuk_halo_takes(int dtype, int kt, int kh, int kw, int ph, int pw, int ci, int co);
cudaError_t cuk_halo_tile_filters(cudaStream_t s, const void *w3, void *wh, int kt, int ci);
cudaError_t cuk_halo_conv(cudaStream_t s, int dtype, const void *x, int t_in, int h, int w, int ci,
                          int kt, const void *wh, const float *bias, const void *res,
                          const float *nw, int act, float act_scale, float s8, void *y, int blocks);
/* The same kernel on E4M3 operands (dtype fp8): the convs of the E4M3 table's HALO row
 * (core/fp8_shapes.h) that cuk_halo_takes would take in 16-bit;
 * wh8 the E4M3 codes [96][kt][3][3][c_in] (fp8.h vae_fp8_weights_codes) tiled by
 * cuk_halo8_tile_filters ([kt][c_in / 96][9][6][96][16], same size), x8 the window's codes (xs
 * as cuk_igemm8_conv's); y = acc * scale[96] + bias + res (then the norm, as cuk_halo_conv), y
 * and res in dtype (16-bit). */
int cuk_halo8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co);
cudaError_t cuk_halo8_tile_filters(cudaStream_t s, const void *w8, void *wh8, int kt, int ci);
cudaError_t cuk_halo8_conv(cudaStream_t s, int dtype, const void *x8, int xs, int t_in, int h,
                           int w, int ci, int kt, const void *wh8, const float *scale,
                           const float *bias, const void *res, const float *nw, int act,
                           float act_scale, float s8, void *y, int blocks);
/* The same kernel for nearest x2 + 3x3 (the upsampling convs' phase path, cuda_conv_phase.c):
 * y [t][2h][2w][96] = bias + res + each output phase's 2 x 2 conv of x [t][h][w][ci], written to
 * its rows and columns of y; whp: the four phase filters [4][96][2][2][ci] tiled by
 * cuk_halo_tile_phase_filters (same size). */
cudaError_t cuk_halo_tile_phase_filters(cudaStream_t s, const void *wph, void *whp, int ci);
cudaError_t cuk_halo_conv_up2(cudaStream_t s, int dtype, const void *x, int t, int h, int w, int ci,
                              const void *whp, const float *bias, const void *res, void *y,
                              int blocks);
/* A warm-up: the module of the CUTLASS kernel cuk_igemm_conv (dtype VAE_DTYPE_FP8:
 * cuk_igemm8_conv) would run for these channels, or of the halo-tile kernel for dtype (up2: its
 * phase mode), loaded now, not by its first launch (CUDA loads modules lazily: ~10 ms of a fresh
 * Wan2.1 480p decode's first call on the H100). Nothing where no such kernel runs here. */
cudaError_t cuk_igemm_load(int dtype, int ci, int co);
cudaError_t cuk_halo_load(int dtype, int up2);
/* y[r][c] = bias[c] (or 0) + res[r][c] (or 0), rows r < rows */
cudaError_t cuk_bias_init(cudaStream_t s, int dtype, void *y, const float *bias, const void *res,
                          int64_t rows, int c);

/* RMS over channels per voxel: y = x / max(|x|, 1e-12) * sqrt(c) * g + b, then act; s8 > 0:
 * y written as E4M3 codes of its 16-bit values / s8, each voxel's c codes in the first c bytes of
 * its place (op.h fp8_codes_bound), where cuk_rms_codes_ok (else cudaErrorNotSupported);
 * sms: the multiprocessor count (the persistent grid's size; 0: unknown, no cap) */
cudaError_t cuk_rms_norm(cudaStream_t s, int dtype, const void *x, void *y, int64_t n_vox, int c,
                         const float *g, const float *b, int act, float act_scale, float s8,
                         int sms);
/* the same over rows rows of w voxels, x's rows x_pitch elements apart and y's y_pitch */
cudaError_t cuk_rms_norm_rows(cudaStream_t s, int dtype, const void *x, int64_t x_pitch, void *y,
                              int64_t y_pitch, int64_t rows, int w, int c, const float *g,
                              const float *b, int act, float act_scale, float s8, int sms);
int cuk_rms_codes_ok(int dtype, int c);
/* GroupNorm per frame. work: cuk_group_norm_work(...) bytes of device scratch. */
size_t cuk_group_norm_work(int dtype, int t, int64_t hw, int c, int groups, int sm_count);
cudaError_t cuk_group_norm(cudaStream_t s, int dtype, const void *x, void *y, int t, int64_t hw,
                           int c, int groups, float eps, const float *g, const float *b, int act,
                           float act_scale, void *work, int sm_count);
/* GroupNorm split across row bands (backend.h norm_stats / norm_apply; where split_ok: the
 * Welford kernels' channel counts and 16-byte alignment), work: cuk_group_norm_sums_work bytes.
 * sums: of the np pixels of each of t frames (fs pixels apart) from x, sums (device) [t][groups]
 *   = (count, sum, sum of squares);
 * apply: y = act((x - mean) * rstd * g + b) with the statistics of the summed sums (device). */
int cuk_group_norm_split_ok(int dtype, int c, const void *x, const void *y);
size_t cuk_group_norm_sums_work(int dtype, int t, int64_t np, int c, int groups, int sm_count);
cudaError_t cuk_group_norm_sums(cudaStream_t s, int dtype, const void *x, int t, int64_t fs,
                                int64_t np, int c, int groups, void *work, int sm_count,
                                double *sums);
cudaError_t cuk_group_norm_apply(cudaStream_t s, int dtype, const void *x, void *y, int t,
                                 int64_t hw, int c, int groups, const double *sums, float eps,
                                 const float *g, const float *b, int act, float act_scale,
                                 void *work, int sm_count);

/* nearest upsample by fs in h and w; x: n frames [h][w][c] contiguous */
cudaError_t cuk_upsample(cudaStream_t s, size_t elem, const void *x, void *y, int n, int h, int w,
                         int c, int fs);
/* SHUFFLE_UP: tab[((ti*fs+hi)*fs+wi)*co + o] = source channel (device ints). contig_align: the
 * largest a in {1,2,4,8} such that every sub-position reads channels base..base+co-1 with
 * base % a == 0, or 0 when some sub-position does not read a consecutive run. */
cudaError_t cuk_shuffle_up(cudaStream_t s, size_t elem, const void *x, void *y, int n_in, int h,
                           int w, int ci, int co, int ft, int fs, const int *tab, int contig_align);
/* SHUFFLE_DOWN of t_out windows of ft frames (frames: t_out*ft pointers); tab[f] for the
 * f = o*group + g slots: (ti, hi, wi, c) packed as 4 ints */
cudaError_t cuk_shuffle_down(cudaStream_t s, int dtype, const cuk_frames *frames, int t_out, int h,
                             int w, int ci, int co, int ft, int fs, int group, const int *tab,
                             void *y);

/* Conv input gather: dst[j][yy][xx][dt*c + ci] (j < tb, yy < h+pt+pb, xx < w+pl+pr, dt < kt)
 * = frame[j*st + dt][yy-pt][xx-pl][ci], zero outside the frame. */
cudaError_t cuk_conv_gather(cudaStream_t s, size_t elem, const cuk_frames *frames, int tb, int st,
                            int kt, int h, int w, int c, int pt, int pb, int pl, int pr, void *dst);
/* dst[f][p][k] (f < nf, p < hw, k < cp) = frames[f][p][k] for k < c, else 0 (16-byte vectors:
 * c*elem and cp*elem multiples of 16, aligned pointers; cudaErrorInvalidValue otherwise). */
cudaError_t cuk_frames_pad(cudaStream_t s, size_t elem, const cuk_frames *frames, int nf, int64_t hw,
                           int c, int cp, void *dst);
/* y[f][2i+a][2j+b][k] = act(ph[a*2+b][f][i+a][j+b][k] (+ bias[k]) (+ res)), ph: 4 x
 * [tb][h+1][w+1][c] (c a multiple of the 16-byte vector, aligned pointers; cudaErrorInvalidValue
 * otherwise); act: a CU_ACT_* with its scale (CU_ACT_NONE: none) */
cudaError_t cuk_phase_interleave(cudaStream_t s, int dtype, const void *ph, int tb, int h, int w,
                                 int c, const float *bias, const void *res, int act,
                                 float act_scale, void *y);
/* The same with cg >= kt*c channels per gathered pixel, zeros above kt*c. */
cudaError_t cuk_conv_gather_pad(cudaStream_t s, size_t elem, const cuk_frames *frames, int tb,
                                int st, int kt, int h, int w, int c, int cg, int pt, int pb, int pl,
                                int pr, void *dst);
/* im2col: col[i][((dh*kw + dw)*kt + dt)*c + ci] for output pixels p = p0 + i (i < np) of the
 * flattened [t][ho][wo] output, whose frame j = p / (ho*wo) reads frames[(j - j_base)*st + dt]. */
cudaError_t cuk_im2col(cudaStream_t s, size_t elem, const cuk_frames *frames, int j_base, int st,
                       int kt, int h, int w, int c, int kh, int kw, int sh, int sw, int pt, int pl,
                       int ho, int wo, int64_t p0, int64_t np, void *col);

/* A caller's tensor in device memory: [c][t][h][w], strides in elements, dtype a vae_dtype
 * (core/backend.h's vae_io_view, without the C headers). */
typedef struct cuk_view {
    void *data;
    int dtype;
    int c, t, h, w;
    int64_t sc, st, sh, sw;
} cuk_view;
/* dst [n][rows][cols][c] (act dtype) <- frames [f, f+n), rows [y0, ..), columns [x0, ..) of v */
cudaError_t cuk_view_import(cudaStream_t s, int act, const cuk_view *v, void *dst, int f, int n,
                            int y0, int rows, int x0, int cols);
/* frames [f, f+t), rows [y0, ..), columns [x0, ..) of v <- the rows x cols window at (sy, sx) of
 * src [t][h][w][c] (act dtype) */
cudaError_t cuk_view_export(cudaStream_t s, int act, const void *src, int t, int h, int w, int sy,
                            int sx, int rows, int cols, const cuk_view *v, int f, int y0, int x0);
/* *first = min(*first, linear index of each NaN/Inf of v) */
cudaError_t cuk_view_finite(cudaStream_t s, const cuk_view *v, unsigned long long *first);

/* Single-head attention per frame f < t: qkv [t][n][3c] (q, k, v = channels [0,c), [c,2c),
 * [2c,3c)), y [t][n][c] = softmax(scale * q k^T) v; fused, no global scratch. */
cudaError_t cuk_attention(cudaStream_t s, int dtype, const void *qkv, void *y, int t, int n, int c,
                          float scale);
/* p[r][0..n) = softmax(scores[r][0..n)) in the activation dtype, for r < rows (the GEMM path of
 * attention: cuBLAS computes the scores and P V) */
cudaError_t cuk_softmax_rows(cudaStream_t s, int dtype, const float *scores, void *p, int rows,
                             int n);

#ifdef __cplusplus
}
#endif

#endif
