/* fp8.h -- E4M3 filters (VAE_DTYPE_FP8): what every backend runs an E4M3 conv with, so that
 * their codes are the same (the CPU emulation's error is the GPU's).
 *
 * - vae_fp8_weight_scales: the E4M3 scale of each output channel of filters w [c_out][per]: the
 *   channel's largest magnitude / 448, unless the channel already lies on a scaled E4M3 grid (a
 *   checkpoint stored in fp8, scaled or not): then a scale that keeps every value's code as
 *   stored (its largest value mapped onto the E4M3 value of the same mantissa in the top
 *   binade), so that such weights run as stored, not rounded a second time. 0 for a channel of
 *   zeros.
 * - vae_fp8_weights_round: filters w [c_out][c_in][kt][kh][kw] (PyTorch's layout) onto the grids
 *   of those scales, into out (same layout; every value a code times its channel's scale). Not
 *   each value to its nearest: the kt x kh x kw taps of one (output, input) channel pair are
 *   rounded in order, each error spread over the taps after it by the least-squares rule of GPTQ
 *   (Frantar et al. 2022) under a prior of inputs correlated between neighbouring taps (fp8.c),
 *   since a conv's neighbouring input pixels and frames are, and what the output sees is the
 *   taps' errors weighted by that correlation. On the synthetic-weight full-size fixtures the
 *   weights' share of the E4M3 error falls by 38-48% of its variance. A filter already on its grid
 *   stays as it is (no error to spread); 1 x 1 x 1 filters, and those of more than VAE_FP8_MAX_TAPS
 *   taps, round each value to its nearest. threads: OpenMP threads over the output channels (0: as
 *   many as OpenMP would take; ~25 ms a 384 -> 384 3x3x3 conv on one core).
 * - vae_fp8_weights_codes: the same rounding as E4M3 codes of w / scale in the channels-last
 *   layout [c_out][kt][kh][kw][c_in] that the GPU kernels read (a quarter of float32's bytes
 *   where they are staged). 0 when out of memory (a channel's buffer per thread).
 */
#ifndef VAE_CORE_FP8_H
#define VAE_CORE_FP8_H

#include <stdint.h>

enum { VAE_FP8_MAX_TAPS = 27 }; /* 3 x 3 x 3 */

void vae_fp8_weight_scales(const float *w, int c_out, int64_t per, float *scale);
void vae_fp8_weights_round(const float *w, int c_out, int c_in, int kt, int kh, int kw,
                           const float *scale, float *out, int threads);
int vae_fp8_weights_codes(const float *w, int c_out, int c_in, int kt, int kh, int kw,
                          const float *scale, uint8_t *codes, int threads);

#endif
