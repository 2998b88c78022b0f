/* cuda_internal.h -- the CUDA backend, shared between its files (internal).
 *
 * Activations are channels-last [t][h][w][c] in the backend's dtype (float32, bfloat16 or
 * float16) in device memory; every op runs on one CUDA stream owned by the backend, so buffers
 * released by the executor can be handed out again at once (stream order keeps them safe).
 * Arithmetic is float32 throughout (norm statistics, softmax, GEMM/conv accumulation); float32
 * activations never use TF32.
 *
 * Files:
 *   cuda_backend.c      creation, buffers (caching allocator), upload/download, vtbl, prepare
 *   cuda_alloc.c        the caching allocator (free lists by size class)
 *   cuda_pinned.c       pinned host memory: transfer buffers, host stores, the weight upload ring
 *   cuda_stage.c        the parameters staged in pinned memory at session creation (cuda_warm)
 *   cuda_bus.c          copies to and from pinned host memory on a second stream (ring, prefetch)
 *   cuda_io_stage.c     the user's frames to and from the host on a stream of their own (stages)
 *   cuda_ops.c          norm / eltwise / resample entry points (checks, launches), the
 *                       session's warm-up (cuda_warm), each op's scratch
 *   cuda_att.c          attention: cuBLAS's GEMM path or the fused kernel, its warm-up
 *   cuda_conv.c         conv: prepare, checks, dispatch among the paths, scratch rules
 *   cuda_conv_tune.c    which conv path per shape: timed once, kept in the tune cache
 *   cuda_conv_paths.c   the conv paths: per block (cuDNN, cuBLAS GEMM), 3-D, padded 3-D
 *   cuda_conv_weights.c the conv filters in each path's layout (made on first use, trimmed)
 *   cuda_tune_cache.c   the tune cache: conv path choices on disk between processes
 *   cuda_conv_phase.c   the upsampling convs as four 2x2 phase convs (cuDNN or CUTLASS, timed)
 *   cuda_conv_igemm.c   conv through the CUTLASS kernels: bf16 implicit GEMM, FP8 (the
 *                       sm_90a kernels, or cuda_mma_conv.cu's; the cuda_conv*.c share
 *                       cuda_conv_internal.h)
 *   cudnn_conv.c        everything that talks to cuDNN (handle, plans per shape, workspace)
 *   cuda_comm_nccl.c    the communicator of a device group over NCCL (loaded when first asked)
 *   cuda_io.c           tensors the caller holds on the device, the caller's stream
 *   cuda_info.c         describing the GPUs (vae --info) without a backend
 *   cuda_*.cu           kernels, with C-callable launchers returning cudaError_t
 *   cuda_mma_conv.cu    implicit-GEMM conv on mma.sync (sm_80+; E4M3 on sm_89+) where the
 *                       sm_90a kernels are not
 *   cuda_igemm.cu       which CUTLASS kernel takes a conv (cuk_igemm*; none without CUTLASS), and
 *                       the halo-tile kernel's entry points (cuk_halo*)
 *   cutlass/            the implicit-GEMM conv kernels for sm_90a through CUTLASS (C++), built by
 *                       cmake/cutlass.cmake where CUTLASS's headers are found (VAE_HAVE_CUTLASS)
 *   sm90/               own sm_90a kernels (wgmma, TMA): the halo-tile conv (16-bit and E4M3),
 *                       built with them
 *
 * The .cu launchers take `int dtype` (a vae_dtype) and raw pointers; they never report errors
 * themselves: the C callers turn a cudaError_t into vae_fail(..) with the op's name.
 */
#ifndef VAE_CUDA_INTERNAL_H
#define VAE_CUDA_INTERNAL_H

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
 * (t_out + kt - 1 of them), wt [c_out][kt][3][3][c_in], bias float32 or NULL, res as y or NULL. */
int cuk_stem_conv_fits(int kt, int c_in, int c_out, int h, int w);
cudaError_t cuk_stem_conv(cudaStream_t s, int dtype, const cuk_frames *frames, int kt, int t_out,
                          int h, int w, int c_in, int c_out, const void *wt, const float *bias,
                          const void *res, void *y);
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
/* FP8 convs (cuda_fp8.cu): *amax = the largest |x| of n values (dtype; bound > 0: bound, a
 * bound known from the model, vae_op fp8_bound), q = E4M3 codes of x at scale *amax / 448 (cu_e4m3;
 * satfinite, ties to even; zeros when *amax is 0; q NULL with a bound: *amax only); out[i] = *amax
 * / 448 * w_scale[i] for i < n (the epilogue's scale per output channel). cuk_fp8_codes_convert:
 * n_pix pixels of c channels (c % 8 == 0, c <= 1024) in place between E4M3 codes at the start of
 * each pixel's place (program.h fp8_codes_bound) and 16-bit values in dtype (expand: codes to
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
 * value (1 packed; 2: E4M3 codes in 16-bit places, program.h fp8_codes_bound). */
int cuk_igemm8_supported(int ci, int co);
cudaError_t cuk_igemm8_conv(cudaStream_t s, const void *x8, int xs, int t_in, int h, int w, int ci,
                            int co, int kt, int kh, int kw, int ph, int pw, const void *w8,
                            const float *scale, const float *bias, const void *res, void *y);
/* The implicit GEMM on mma.sync (cuda_mma_conv.cu; sm_80+) for the GPUs without the sm_90a
 * kernels (Ampere, Ada, consumer Blackwell; Hopper under VAE_CUDA_MMA=1): the problem of
 * cuk_igemm_conv (any kt x kh x kw with padding below the kernel, c_in a multiple of 16, c_out of
 * 8) on 16-bit operands in dtype, or with scale (non-NULL) the one of cuk_igemm8_conv on E4M3
 * codes (sm_89+; c_in a multiple of 32), y and res in dtype (16-bit). cuk_mma_device: the current
 * device has those MMAs and this build's code for it runs them. cuk_mma_supported: the channel
 * rule (dtype: the operands', VAE_DTYPE_FP8 for E4M3), cuk_mma_takes: it and the geometry. */
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
/* The same kernel on E4M3 operands (dtype fp8): the convs cuk_halo_takes would take in 16-bit;
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
 * its place (program.h fp8_codes_bound), where cuk_rms_codes_ok (else cudaErrorNotSupported);
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
/* y[f][2i+a][2j+b][k] = ph[a*2+b][f][i+a][j+b][k] (+ bias[k]) (+ res), ph: 4 x [tb][h+1][w+1][c]
 * (c a multiple of the 16-byte vector, aligned pointers; cudaErrorInvalidValue otherwise) */
cudaError_t cuk_phase_interleave(cudaStream_t s, int dtype, const void *ph, int tb, int h, int w,
                                 int c, const float *bias, const void *res, void *y);
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

/* ---- the C side (not seen by nvcc) ---------------------------------------------------------- */
#ifndef __CUDACC__
#include <cublas_v2.h>
#include <time.h>

#include "core/backend.h"
#include "core/core.h"
#include "formats/linecache.h"

/* ---- caching allocator (cuda_alloc.c) ---- */
typedef struct cu_bin {
    size_t size;
    void **v;
    int n, cap;
} cu_bin;

typedef struct cu_slot {
    void *p;
    size_t size;
} cu_slot;

typedef struct cu_pool {
    cu_bin *bins;
    int n_bins, cap_bins;
    cu_slot *map; /* live blocks: open addressing on the pointer */
    size_t map_cap, map_used, map_live;
    size_t cached_bytes;   /* in free lists */
    size_t reserved_bytes; /* cudaMalloc'd through the pool (live + cached) */
    cudaStream_t stream;   /* synchronised before cached blocks are really freed */
    int graphs;            /* live work graphs: cached blocks are never freed then */
    vae_dev_allocator al;  /* the host's allocator (al.alloc NULL: cudaMalloc) */
    int device;
    double *malloc_s; /* where the time of the device allocations is added (cold-start log) */
} cu_pool;

/* Every device block of the backend comes from and goes back through these two: the host's
 * allocator (vae_session_options.dev_alloc) when it gave one, else cudaMalloc / cudaFree. */
cudaError_t cu_dev_malloc(const cu_pool *pool, void **p, size_t bytes);
void cu_dev_free(const cu_pool *pool, void *p, size_t bytes);

size_t cu_pool_round(size_t bytes);
/* NULL on failure (*err says why). */
void *cu_pool_alloc(cu_pool *pool, size_t bytes, size_t *got, cudaError_t *err);
/* Returns the block's size, 0 if p is not a live block of this pool. */
size_t cu_pool_free(cu_pool *pool, void *p);
/* cudaFree's every cached (free) block (none while pool->graphs > 0). */
void cu_pool_trim(cu_pool *pool);
void cu_pool_destroy(cu_pool *pool);

/* ---- the backend ---- */
/* VAE_CUDA_PROFILE=1: GPU time per category (CUDA events around every launch), logged at INFO
 * level when the backend is destroyed. */
enum {
    CU_P_CONV_DNN,
    CU_P_CONV_GEMM,
    CU_P_GATHER,
    CU_P_BIAS,
    CU_P_RMS,
    CU_P_GN,
    CU_P_ELT,
    CU_P_RESAMPLE,
    CU_P_ATT,
    CU_P_COPY,
    CU_P_UPLOAD,
    CU_P_DOWNLOAD,
    CU_P_NARROW,
    CU_P_IGEMM,
    CU_P_BUS,  /* copy2d to or from host memory (host stores, strips' slots) */
    CU_P_HALO, /* the halo-tile conv kernel (PATH_HALO: the 96-filter 3x3 convs) */
    CU_P_N
};

typedef struct cu_table {
    int key[10]; /* kind, c_in, c_out, ft, fs, cs_o, cs_t, cs_h, cs_w, group */
    int *dev;
    size_t bytes;
    int contig_align; /* shuffle-up: see cuk_shuffle_up */
} cu_table;

enum { CU_CONV_AUTO = 0, CU_CONV_GEMM = 1, CU_CONV_CUDNN = 2 };

/* a block of pinned host memory (cuda_pinned.c) */
typedef struct cu_pin {
    void *p;
    size_t bytes;
    int mapped; /* mmap + cudaHostRegister (else cudaHostAlloc) */
} cu_pin;

/* pinned host buffer for asynchronous transfers; ev marks the end of its last copy */
typedef struct cu_host_buf {
    cu_pin pin;
    cudaEvent_t ev;
    int pending;
} cu_host_buf;

/* The model's parameters staged at session creation (cuda_stage.c): converted into pinned host
 * memory once, so that a first use copies them to the device as they are. An item is keyed by
 * its host array (the op's w or b), what was made of it (tag) and its dtype and length. */
enum {
    CU_STAGE_RAW = 0,   /* the array as it is, converted to dt */
    CU_STAGE_BIAS = 1,  /* a conv's bias padded to its kp filters with zeros */
    CU_STAGE_PHASE = 2, /* an upsampling conv's four phase filters (cuda_conv_phase.c) */
    CU_STAGE_FP8 = 3,   /* an E4M3 conv's weight scales (fp8.h vae_fp8_weight_scales) */
    CU_STAGE_W8 = 4     /* its filters' E4M3 codes, channels last (fp8.h vae_fp8_weights_codes) */
};
enum { CU_STAGE_BLOCKS = 4 }; /* programs staged at once */
typedef struct cu_stage_item {
    const void *key;
    int tag, block, ready;
    vae_dtype dt;
    size_t n, off; /* values, and their byte offset in the block */
} cu_stage_item;
typedef struct cu_stage {
    cu_pin block[CU_STAGE_BLOCKS];    /* one per staged program */
    size_t reserved[CU_STAGE_BLOCKS]; /* its share of the process's cap (cuda_stage.c) */
    int n_blocks;
    cu_stage_item *items;
    int n, cap;
    int first;   /* the items of the program being staged start here */
    size_t want; /* its bytes so far (counting pass) */
    int filling; /* 0: counting pass, 1: writing into the newest block */
} cu_stage;

/* The conv path choices on disk (cuda_tune_cache.c). */
typedef struct cu_tune_cache {
    char file[1024];   /* "" : none */
    vae_linecache lc;  /* this device's choices, from the file and from this process */
    int loaded;
} cu_tune_cache;

/* one-off host work a cold first call pays, timed for the log (cuda_backend.host_s) */
enum {
    CU_H_MALLOC,     /* device allocations (cudaMalloc or the host's allocator) */
    CU_H_PINNED,     /* pinned host buffers (cudaHostAlloc) */
    CU_H_DNN_HANDLE, /* cudnnCreate */
    CU_H_DNN_PLAN,   /* cuDNN descriptors and algorithm choice per shape, first launch included */
    CU_H_DNN_FIRST,  /* of which the first launch of each plan (loads its kernels) */
    CU_H_GRAPH,      /* graph capture end + instantiation */
    CU_H_PREPARE,    /* per-op state at executor creation (weights, scales, descriptors) */
    CU_H_WEIGHTS,    /* of which and later: parameters converted and copied to the device */
    CU_H_IGEMM,      /* host time of the CUTLASS launches (the first ones load their modules) */
    CU_H_WARM,       /* at session creation (warm): cuBLAS's and cuDNN's warm-ups, the staging */
    CU_H_N
};

/* cuda_bus.c: the bus stream and its ring of device blocks (copies into pinned host memory
 * staged there, host ranges prefetched there) */
enum { CU_BUS_BLOCKS = 512 };
#define CU_BUS_RING ((size_t)32 << 20)
/* cuda_io_stage.c: the user's frames staged on the device as planar float32 (an input chunk; a
 * step's output chunk in pieces), copied to and from the host on a stream of their own */
typedef struct cu_io_buf {
    char *p; /* cap bytes, part of bytes_in_use, or NULL */
    size_t cap;
} cu_io_buf;
typedef struct cu_io_stage {
    cudaStream_t stream;    /* the copies to and from the host */
    cudaEvent_t out_ready;  /* compute stream: the output chunk converted into `out` */
    cudaEvent_t out_copied; /* copy stream: the last copy out of `out` */
    cudaEvent_t in_copied;  /* copy stream: the last copy into `in` */
    cudaEvent_t in_used;    /* compute stream: `in` converted into the input buffer */
    cu_io_buf in, out;
    int n, t, piece;    /* the staged output chunk: n pieces of `piece` frames (the last: the
                         * rest of t); n = 0: none */
    size_t frame;       /* its float32 bytes a frame */
    int never;          /* settings.cuda_bus = 0, or the stream could not be made */
} cu_io_stage;

/* host_alloc blocks at once: A's and B's stores (pinned, or their files' staging rings), strips'
 * slots, one spare */
enum { CU_PINNED_BLOCKS = 4 };
struct cu_bus_block {
    size_t off, bytes;  /* in the ring */
    const char *host;   /* a prefetch: the host range it holds; NULL: staging of a copy out, or
                         * a prefetch forgotten (written since) */
    cudaEvent_t done;   /* recorded on the bus stream after the block's copy */
};
typedef struct cu_bus {
    cudaStream_t stream; /* NULL until first used */
    int off;             /* settings.cuda_bus = 0, or it could not start: copies as before */
    char *ring;          /* ring_bytes of device memory */
    size_t ring_bytes;   /* CU_BUS_RING, or the larger ring a plan counted (host_copy_ring) */
    size_t head;         /* where the next block goes */
    struct cu_bus_block blk[CU_BUS_BLOCKS]; /* a FIFO, oldest first */
    int first, count;
    cudaEvent_t mark;    /* the compute stream's position, for the bus stream to wait on */
    cudaEvent_t last;    /* the bus stream's last copy */
    int pending;         /* copies on the bus since the host last waited for it */
    int unwaited;        /* ... since the compute stream last waited for it */
    long long n_out, n_ahead, n_hit, n_direct; /* copies out, prefetches, reads from them,
                                                * host copies the bus did not take */
} cu_bus;

typedef struct cuda_backend {
    vae_backend base;
    int device;
    int sm_count;
    char device_name[256];
    cudaStream_t stream;
    cublasHandle_t cublas;
    cu_pool pool;
    /* one reusable scratch area (gathers, im2col, padded 3-D windows, phase-conv planes, upload
     * staging) and the cuDNN workspace; both grow, never shrink. bytes_in_use counts the
     * executor's buffers only (it returns to 0 when all are released); bytes_peak also counts
     * scratch, workspace and the weights on the device, so that it is all the device memory the
     * backend held at its worst moment (what PyTorch's max_memory_allocated counts for a model). */
    void *scratch;
    size_t scratch_bytes;
    void *ws;
    size_t ws_bytes;
    size_t scratch_limit; /* blocking target for what uses the scratch area (bytes) */
    int scratch_capped;   /* the run must do with scratch_bytes (scratch_reserve, capped) */
    struct cu_block { void *p; size_t bytes; } *retired; /* scratch / workspace buffers
                                                           * outgrown while graphs were alive */
    int n_retired;
    size_t retired_bytes;
    /* switches from the session's settings (core/settings.h, VAE_CUDA_*) */
    int conv_mode;        /* CU_CONV_*: VAE_CUDA_CONV=auto|gemm|cudnn */
    int conv3d;           /* 3-D cuDNN convs over contiguous windows (VAE_CUDA_CONV3D, default 1) */
    int fuse;             /* bias/residual in cuDNN's epilogue, 16-bit only (VAE_CUDA_FUSE) */
    int tune;             /* time 3-D vs per-block convs per shape (VAE_CUDA_TUNE, default 1) */
    int recording;        /* a graph is being recorded (stream capture): no timing, no frees */
    int tuning;           /* candidate paths are being timed: their cuDNN plans are not kept in
                           * the tune cache for the next process's warm-up */
    int poison;           /* VAE_CUDA_POISON=1: new blocks filled with NaN (cu_poison) */
    uint64_t tune_seed;   /* VAE_CUDA_TUNE=seed:N: paths by hash instead of timing (0: off) */
    int tune_reps;        /* the two fastest paths' rounds after the first (VAE_CUDA_TUNE_REPS) */
    int pw_dnn;           /* 1x1 convs through cuDNN with the fused epilogue (VAE_CUDA_PW=gemm: off) */
    int phase;            /* nearest x2 + 3x3 conv as four 2x2 phase convs (VAE_CUDA_PHASE) */
    int narrow;           /* narrow heads, small 1x1 convs on own kernels (VAE_CUDA_NARROW) */
    int att_gemm;         /* large 16-bit attention on cuBLAS (VAE_CUDA_ATT) */
    int igemm;            /* implicit-GEMM convs: 0 off (or no kernels for this device), 1 a
                           * tuned candidate, 2 wherever they apply (VAE_CUDA_IGEMM) */
    int mma;              /* ... and the fp8 convs: the mma.sync kernels (cuda_mma_conv.cu), not
                           * the sm_90a ones (CUTLASS's, the halo tile's): a device not Hopper,
                           * or VAE_CUDA_MMA=1 */
    int halo;             /* the halo-tile kernel for 96-filter 3x3 convs: 0 off (or igemm off), 1
                           * a tuned candidate, 2 wherever it applies (VAE_CUDA_HALO) */
    int dnn_gain_us;      /* a cuDNN path is chosen where it saves more than this a call over the
                           * fastest own sm_90a kernel (VAE_CUDA_DNN_GAIN_US; cu_tune_own_wins) */
    int fp8;              /* dtype fp8: bf16 activations, E4M3 convs where the FP8 kernels apply */
    int64_t n_conv_fp8;   /* convs run by the FP8 kernels */
    int64_t n_conv_fp8_halo; /* ... of them by the E4M3 halo-tile kernel */
    int64_t n_conv_fp8_mma;  /* ... of them by the mma.sync kernel (cuda_mma_conv.cu) */
    int64_t n_conv_mma;      /* 16-bit implicit-GEMM convs by the mma.sync kernel */
    int pad3d, cpad, kpad; /* channel-padded 3-D windows, 2-D gathers, filters (VAE_CUDA_*PAD*) */
    cudaEvent_t tune_ev[2];
    void *dnn;            /* cudnn state (cudnn_conv.c), created on first use */
    int dnn_failed;       /* cuDNN could not be initialised: GEMM path only */
    struct cu_table *tables; /* shuffle index tables, keyed by the op's shuffle parameters */
    int n_tables, cap_tables;
    int64_t weight_bytes; /* prepared weights and tables (not in bytes_in_use) */
    int64_t weight_reserve; /* the weights' share of the plan's memory (cuda_mem_info): under a
                             * budget, the tuner makes no weight layout beyond it */
    int64_t peak_parts[4];             /* bytes_peak as weights, activations, scratch, workspace */
    int64_t n_conv_cudnn, n_conv_gemm; /* conv blocks run by each path (diagnostics) */
    int64_t n_conv_3d, n_conv_fused;   /* of the cuDNN blocks: 3-D ones, fused-epilogue ones */
    int64_t n_conv_igemm;              /* convs run by the CUTLASS implicit-GEMM kernels */
    int64_t n_conv_halo;               /* convs run by the halo-tile kernel */
    int64_t n_conv_normed;             /* of those, convs whose RMS norm it applied too */
    int64_t n_conv_halo_up2;           /* upsampling convs run by it (the phase mode) */
    int64_t n_conv_stem;               /* convs run by the stem kernel (cuda_stem_conv.cu) */
    int64_t n_graph_launches;          /* recorded steps replayed (executor work graphs) */
    int64_t n_dnn_warmed;              /* cuDNN plans made by the warm-up (cu_dnn_warm_seen) */
    int64_t n_staged_uploads;          /* parameters copied from the stage (cuda_stage.c) */
    cu_host_buf hin[2], hout[2];       /* stage_in / download_planar buffers, used in turn */
    cu_host_buf wring[2];              /* parameters on their way to the device, in turn */
    cu_stage stage;                    /* parameters staged at session creation */
    int warm;                          /* VAE_CUDA_WARM */
    int warm_att_c;                    /* the attention width cuBLAS was warmed up for */
    int hin_next, hout_next, wring_next;
    /* host time of one-off set-up work (what a cold first call pays), seconds; -v prints it */
    double host_s[CU_H_N];
    /* host_alloc: pinned blocks for host stores, strips' slots and the staging of stores in
     * files, kept between calls (pinning is slow) */
    struct cu_pinned {
        cu_pin pin;
        int used;
    } pinned[CU_PINNED_BLOCKS];
    cu_tune_cache tc;                  /* conv path choices kept between processes */
    cu_bus bus;                        /* cuda_bus.c: copies to and from host memory */
    cu_io_stage io;                    /* cuda_io_stage.c: the user's frames, host <-> device */
    int prof;                          /* VAE_CUDA_PROFILE */
    cudaEvent_t *prof_ev;              /* event pairs (begin, end) */
    int *prof_cat;
    int prof_n, prof_cap, prof_made;
    double prof_ms[CU_P_N];
    int64_t prof_calls[CU_P_N];
    /* VAE_CUDA_PROFILE=2: also GPU time per op name (the op being run, set by the entry points) */
    const char *prof_op;
    const char **prof_name; /* per event pair */
    struct cu_prof_op *prof_ops;
    int n_prof_ops, cap_prof_ops;
} cuda_backend;

static inline cuda_backend *cu_be(vae_backend *be) { return (cuda_backend *)be; }

/* seconds, for host-time accounting (host_s) */
static inline double cu_now(void) {
    return vae_seconds(); /* (timespec_get: not in Windows' msvcrt) */
}

typedef struct cu_prof_op {
    char name[96];
    int cat;
    double ms;
    int64_t calls;
} cu_prof_op;
/* Profiling by op name (VAE_CUDA_PROFILE=2): the op that the next launches belong to. */
static inline void cu_prof_name(cuda_backend *cb, const char *name) { cb->prof_op = name; }

/* Makes the backend's device current for this thread; VAE_OK or VAE_EDEVICE. */
int cu_enter(cuda_backend *cb, const char *who);
/* cudaError_t -> VAE_OK / VAE_ENOMEM / VAE_EDEVICE with "who: what: CUDA message". */
int cu_check(cudaError_t e, const char *who, const char *what);
int cu_blas_check(cublasStatus_t st, const char *who, const char *what);
/* Profiling: a handle (or -1 when off) for the GPU work queued between begin and end. */
int cu_prof_begin(cuda_backend *cb, int cat);
void cu_prof_end(cuda_backend *cb, int h);
/* bytes_peak = max(bytes_peak, weights + bytes_in_use + scratch + workspace) */
void cu_note_peak(cuda_backend *cb);
/* everything the backend holds on the device now */
int64_t cu_held(const cuda_backend *cb);
/* VAE_ENOMEM (and the message) when holding `more` bytes besides what the backend holds would
 * exceed its memory budget (base.limit > 0) */
int cu_over_budget(cuda_backend *cb, size_t more, const char *who);
/* Frees a device buffer that queued work may still use (after a stream synchronisation); while
 * work graphs exist (they replay on the addresses they recorded) or one is being recorded, it is
 * kept until the last graph is freed (or the recording failed). */
void cu_retire(cuda_backend *cb, void *p, size_t bytes);
/* Device scratch of at least `bytes` bytes; NULL + vae_fail on failure. */
void *cu_scratch(cuda_backend *cb, size_t bytes, const char *who);
/* VAE_CUDA_POISON: fills a block the backend hands out with NaN bytes (queued on the stream). */
void cu_poison(cuda_backend *cb, void *p, size_t bytes);
/* VAE_EUNSUPPORTED (with the message) while a graph is being recorded: it would keep a copy from
 * host memory, so uploads refuse, the recording fails and the step runs normally; else VAE_OK. */
int cu_upload_refused(cuda_backend *cb, const char *who);
/* Host -> device copy of constants in the stream's order (the host buffer may be freed on
 * return); VAE_EUNSUPPORTED while a graph is being recorded (cu_upload_refused). */
int cu_upload_host(cuda_backend *cb, void *dst, const void *host, size_t bytes, const char *who);
/* Device buffer from host float32 data converted to the backend dtype (conv weights), or a
 * float32 copy (norm parameters) when as_f32: copied from the stage where src is staged as it
 * is (CU_STAGE_RAW), else through the pinned ring (cu_ring_upload); *out = NULL for src ==
 * NULL. */
int cu_upload_param(cuda_backend *cb, const float *src, size_t n, int as_f32, void **out,
                    const char *who);
/* The same from what the stage made of key (tag): VAE_OK with *out set, or VAE_OK with *out =
 * NULL where the stage has no such item (the caller makes it itself). */
int cu_upload_staged(cuda_backend *cb, const void *key, int tag, size_t n, int as_f32, void **out,
                     const char *who);
void cu_free_param(cuda_backend *cb, void *p, size_t bytes);
cudaDataType_t cu_blas_type(vae_dtype dt);

/* ---- cuda_bus.c ---- */
/* copy2d between this device and pinned host memory by the bus (*done = 1), or nothing for the
 * caller's copy on the compute stream (*done = 0: the bus is off, a graph records, a row too
 * large); a read takes a prefetched block when one holds its range. */
int cu_bus_copy_out(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src,
                    size_t src_pitch, size_t row_bytes, size_t rows, int *done);
int cu_bus_copy_in(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src,
                   size_t src_pitch, size_t row_bytes, size_t rows, int *done);
/* vtbl prefetch (backend.h) */
int cu_bus_prefetch(vae_backend *be, const void *host, size_t bytes);
/* Host memory [p, p + bytes) is written: prefetches of it are stale (p NULL: all of them). */
void cu_bus_forget(cuda_backend *cb, const void *p, size_t bytes);
/* The compute stream waits for the bus's copies (before it reads or writes host memory itself);
 * sync: the host waits for them. */
int cu_bus_wait(cuda_backend *cb);
int cu_bus_sync(cuda_backend *cb);
int64_t cu_bus_bytes(const cuda_backend *cb); /* the ring, once started */
size_t cu_bus_ring_wanted(const cuda_backend *cb); /* the ring the run's plan counted */
void cu_bus_destroy(cuda_backend *cb);

/* ---- cuda_io_stage.c ---- */
/* dst [n][c] (activation dtype) <- host planar float32 src [c][n], copied into the input stage
 * on the copy stream, converted on the compute stream (b: src's transfer buffer, its event
 * recorded after the copy, or NULL); *done = 0 where there is no stage (nothing queued) */
int cu_io_upload(cuda_backend *cb, void *dst, const float *src, int64_t n, int c, cu_host_buf *b,
                 int *done);
/* vtbl download_stage (backend.h): *pieces = 0 where there is no stage (no error) */
int cu_io_stage_put(vae_backend *be, const void *src, int t, int h, int w, int c, int piece,
                    int *pieces);
/* the copy of staged output piece k into b queued on the copy stream (b->ev recorded after it) */
int cu_io_stage_copy(cuda_backend *cb, int k, cu_host_buf *b);
void cu_io_stage_release(cuda_backend *cb); /* the stages given back (a run's start) */
void cu_io_stage_destroy(cuda_backend *cb);

/* ---- cuda_pinned.c: pinned host memory ---- */
/* A pinned block of at least `bytes` (portable: for every device of a group); no message on
 * failure (the caller reports it or falls back). */
cudaError_t cu_pin_alloc(cuda_backend *cb, cu_pin *b, size_t bytes, int portable);
void cu_pin_free(cu_pin *b);
/* Transfer buffers: reserve waits for the buffer's last copy and grows it to `bytes`; queued
 * marks a copy from or into it just queued on `stream` (the compute stream, or the io stage's). */
int cu_host_buf_reserve(cuda_backend *cb, cu_host_buf *b, size_t bytes);
int cu_host_buf_wait(cu_host_buf *b);
int cu_host_buf_queued(cu_host_buf *b, cudaStream_t stream);
void cu_host_bufs_free(cuda_backend *cb);
/* dst [n] in dt (float32, bfloat16 or float16) <- host float32 src [n], on the host (threads for
 * large n): what the ring and the stage hold */
void cu_params_convert(void *dst, const float *src, size_t n, vae_dtype dt);
/* dst (device, n values of dt) <- host float32 src, converted on the host and copied through
 * the pinned ring in the stream's order (src may be freed on return) */
int cu_ring_upload(cuda_backend *cb, void *dst, const float *src, size_t n, vae_dtype dt,
                   const char *who);
/* ---- cuda_stage.c: parameters staged at session creation ---- */
/* Staging a program: begin, the puts of every parameter (counting), alloc, the same puts again
 * (filling), end. put's src (n float32 values converted to dt; for dt VAE_DTYPE_FP8 n E4M3
 * codes, copied) may be NULL while counting; a key already staged is skipped. alloc: 0 when
 * there is no room (nothing is staged then, no error). */
void cu_stage_begin(cu_stage *st);
void cu_stage_put(cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n, const void *src);
int cu_stage_counting(const cu_stage *st);
int cu_stage_alloc(cuda_backend *cb, cu_stage *st);
void cu_stage_end(cu_stage *st);
/* the staged values (pinned, dt) of (key, tag, dt, n), or NULL */
const void *cu_stage_find(const cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n);
size_t cu_stage_bytes(const cu_stage *st);
void cu_stage_free(cuda_backend *cb, cu_stage *st); /* after the stream's copies from it */

/* host stores (vtbl host_alloc / host_free) and giving their kept blocks back (all: also the
 * ones in use) */
void *cu_store_alloc(vae_backend *be, size_t bytes);
void cu_store_free(vae_backend *be, void *p);
void cu_stores_release(cuda_backend *cb, int all);

/* One line about the backend: device, cuDNN, conv blocks per path, memory (tests, logs). */
const char *vae_cuda_backend_describe(vae_backend *be, char *buf, size_t len);

/* ---- ops ---- */
/* The E4M3 scale an op writes its output's codes with (program.h fp8_codes_bound; the one
 * cuda_fp8.cu's quantisation takes from that bound), 0: values */
static inline float cu_codes_scale(const vae_op *op) {
    return op->fp8_codes_bound > 0 ? op->fp8_codes_bound / 448.0f : 0.0f;
}
int cuda_conv_prepare(vae_backend *be, const vae_op *op, void **state);
void cuda_conv_unprepare(vae_backend *be, const vae_op *op, void *state);
int cuda_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
              int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out);
int cuda_conv_window(vae_backend *be, const vae_op *op, void *state);
/* backend.h fp8_codes: the producer writes E4M3 codes that the reader's kernels take
 * (cuda_conv_igemm.c) */
int cuda_fp8_codes(vae_backend *be, const vae_op *producer, const vae_op *reader);
/* backend.h fp8_conv: the FP8 kernels would take this conv (cuda_conv_igemm.c) */
int cuda_conv_fp8(vae_backend *be, const vae_op *op);
/* puts the conv's parameters as its first uses will upload them into the stage (cu_stage_put) */
void cuda_conv_stage(cuda_backend *cb, const vae_op *op);
/* 1: no own kernel takes this conv (strided, asymmetric padding): cuDNN runs it */
int cuda_conv_wants_dnn(const cuda_backend *cb, const vae_op *op);
/* the modules of the sm_90a kernels p's convs could take, loaded now (cuda_warm) */
void cuda_conv_load_kernels(cuda_backend *cb, const vae_program *p);
/* vtbl scratch_need (cuda_ops.c), and its conv part (cuda_conv.c) */
int64_t cuda_scratch_need(vae_backend *be, const vae_op *op, int t, int h, int w, int minimal);
int64_t cuda_conv_scratch_need(const cuda_backend *cb, const vae_op *op, int t, int h, int w,
                               int minimal);
int cuda_ops_prepare(vae_backend *be, const vae_op *op, void **state);
void cuda_ops_destroy(cuda_backend *cb); /* frees the shuffle tables */
void cuda_ops_unprepare(vae_backend *be, const vae_op *op, void *state);
int cuda_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
              int w);
/* backend.h comm_create: NCCL among CUDA lanes (cuda_comm_nccl.c) */
struct vae_comm;
int cuda_comm_create(vae_backend *const *lanes, int n, struct vae_comm **ranks);
int cuda_comm_join(vae_backend *be, const unsigned char *id, int rank, int world,
                   struct vae_comm **out);
int cuda_norm_rows(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                   void *y, size_t y_pitch, int64_t rows, int w);
int cuda_norm_stats(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                    int rows, double *st, int dev);
int cuda_norm_apply(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                    int h, int w, const double *st, int dev);
int cuda_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                 void *y, int64_t n_vox);
int cuda_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                  int w, void *y, int t_out);
int cuda_warm(vae_backend *be, const vae_program *p);
int cuda_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                   int h, int w, int q0, int q1);
/* cuda_att.c: the scratch an attention of n tokens a frame takes (its GEMM path's blocks), and
 * the GEMM path's first use paid at session creation (cuda_warm) */
int64_t cu_att_scratch_need(cuda_backend *cb, const vae_op *op, int n);
int cu_att_warm(cuda_backend *cb, const vae_program *p);

/* ---- cuDNN (cudnn_conv.c) ---- */
/* One NHWC convolution: nd = 2: y[n][ho][wo][k] = conv(x[n][hx][wx][c], w[k][kh][kw][c]);
 * nd = 3 (NDHWC): y[n][dy][ho][wo][k] = conv(x[n][dx][hx][wx][c], w[k][kd][kh][kw][c]) (set
 * dx = dy = kd = sd = 1 and pd = 0 for nd = 2). Symmetric zero padding, strides. epi = 0:
 * y = conv + beta * y; epi = 1: y = conv + bias [+ z] in the convolution's epilogue.
 * VAE_EUNSUPPORTED when cuDNN has no algorithm for it (the caller falls back: unfused, or the
 * GEMM path), other codes on real errors. Zero-initialise (memcmp keys the plan cache). */
typedef struct cu_dnn_conv {
    int nd, n, c, dx, hx, wx, k, kd, kh, kw, pd, ph, pw, sd, sh, sw, dy, ho, wo, epi;
} cu_dnn_conv;
typedef struct cu_dnn_epi {
    float beta;           /* epi = 0 */
    const void *bias_dt;  /* epi = 1: bias [k] in the activation dtype */
    const float *bias_f32; /* epi = 1: the same bias in float32 */
    const void *z;        /* epi = 1: residual, y-shaped and not y, or NULL */
} cu_dnn_epi;
/* cuda_tune_cache.c: a conv path choice for a shape key (no spaces), from the file or this
 * process (-1: none), and a new one (kept, and appended to the file) */
int cu_tune_lookup(cuda_backend *cb, const char *shape);
void cu_tune_store(cuda_backend *cb, const char *shape, int path);
/* an entry whose replay failed: dropped here and in the file (later processes choose afresh) */
void cu_tune_forget(cuda_backend *cb, const char *shape);
/* the first entry from index `from` on whose key starts with prefix: its index (-1: none), *shape
 * the key after the prefix, *path its number */
int cu_tune_next(cuda_backend *cb, const char *prefix, int from, const char **shape, int *path);
void cu_tune_cache_free(cuda_backend *cb);

/* cuda_io.c: the caller's device tensors and stream (vtbl entries) */
int cu_view_finite(vae_backend *be, const vae_io_view *v, int64_t *first_bad);
int cu_view_import(vae_backend *be, void *dst, const vae_io_view *src, int f, int n, int y0,
                   int rows, int x0, int cols);
int cu_view_export(vae_backend *be, const void *src, int t, int h, int w, int sy, int sx, int rows,
                   int cols, const vae_io_view *dst, int f, int y0, int x0);
int cu_stream_join(vae_backend *be, void *stream, int after);
int cu_view_reach(vae_backend *be, const vae_io_view *v);

int cu_dnn_conv_run(cuda_backend *cb, const cu_dnn_conv *g, const void *x, const void *w,
                    const cu_dnn_epi *epi, void *y, const char *who);
void cu_dnn_destroy(cuda_backend *cb);
/* cuDNN's first use in the process, paid now (cuda_warm) */
int cu_dnn_warm(cuda_backend *cb);
/* the plans earlier processes' calls of p's convs used (the tune cache), made now (cuda_warm) */
int cu_dnn_warm_seen(cuda_backend *cb, const vae_program *p);
/* the cuDNN plans made so far (refusals included) */
int cu_dnn_plans(const cuda_backend *cb);
/* "cuDNN 9.x.y" or "cuDNN unavailable" */
const char *cu_dnn_describe(cuda_backend *cb, char *buf, size_t len);

#endif /* __CUDACC__ */

#endif
