/* fp8_calibrate.h -- dtype fp8: which convs run in E4M3, chosen by an error budget (internal).
 *
 * A fixed count of E4M3 convs per architecture holds its error only on the configurations it was
 * tuned on; the output error of a conv's E4M3 rounding depends on how much the network after it
 * amplifies it, which varies with the model's widths and depths. So a session measures it: the
 * CPU backend's emulation runs exactly the marked convs in E4M3 (op->fp8), the very convs a GPU
 * runs so, and its error is the GPU's. On a small seeded input it runs the program with no E4M3
 * conv (y0) and with each candidate alone in E4M3 (y_i): e_i = ||y_i - y0|| / ||y0||. Independent
 * roundings add in quadrature, so the set is the candidates of the smallest e_i while
 * sqrt(sum e_i^2) stays within the budget; one run with the whole set checks the sum (dropping
 * the largest e_i until it holds).
 */
#ifndef VAE_API_FP8_CALIBRATE_H
#define VAE_API_FP8_CALIBRATE_H

#include "core/program.h"
#include "core/settings.h"

typedef struct vae_fp8_choice {
    int kept, candidates; /* E4M3 convs chosen, of those the backend could run so */
    double predicted;     /* sqrt(sum e_i^2) of the chosen */
    double measured;      /* the check run's error with the whole set (0 where none is kept) */
    double seconds;       /* the calibration's time */
} vae_fp8_choice;

/* p: a session's program whose candidate convs are marked (op->fp8 and op->fp8_kernel, as
 * program.h vae_program_pick_fp8 with budget 0 leaves them); range: an encoder's pixel range
 * {lo, hi} (its input is then a smooth video), NULL for a decoder (N(0, 1) latents); of size x
 * size, over the program's first chunk of frames and one more. Keeps the marks on the chosen set
 * and clears them on the others, so that the output error stays within `budget` (relative L2).
 * threads: the CPU emulation's (0: all cores). set: the executor's settings (NULL: defaults). Logs
 * the choice at INFO. */
int vae_fp8_calibrate(vae_program *p, const float *range, int size, double budget,
                      const vae_settings *set, int threads, vae_fp8_choice *out);

#endif
