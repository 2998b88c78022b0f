/* fp8_calibrate.h -- dtype fp8: which convs run in E4M3, chosen by an error budget (internal).
 *
 * A fixed count of E4M3 convs per architecture holds its error only on the configurations it was
 * tuned on; the output error of a conv's E4M3 rounding depends on how much the network after it
 * amplifies it, which varies with the model's widths and depths. So a session measures it: the
 * CPU backend's emulation runs exactly the marked convs in E4M3 (op->fp8), the very convs a GPU
 * runs so, and its error is the GPU's. On a small seeded input it runs the program with no E4M3
 * conv (y0) and with every candidate in E4M3: within the budget, they all stay. Else with each
 * pair of candidates of a residual block in E4M3 (y_i): e = ||y_i - y0|| / ||y0||, each of the
 * pair given e / sqrt(2). Independent roundings add in quadrature, so the set is the candidates
 * of the smallest e_i while sqrt(sum e_i^2) stays within the budget; one run with the whole set
 * checks the sum (dropping the largest e_i until it holds).
 *
 * A session calibrates a side (decoder, encoder) at that side's first plan or call, not at its
 * creation, and keeps the choice in a cache file beside the tune cache (fp8_calibrate_cache.c),
 * so that a later session or process of the same weights takes it without a run.
 */
#ifndef VAE_API_FP8_CALIBRATE_H
#define VAE_API_FP8_CALIBRATE_H

#include "core/program.h"
#include "core/settings.h"

typedef struct vae_fp8_choice {
    int kept, candidates; /* E4M3 convs chosen, of those the backend could run so */
    double predicted;     /* sqrt(sum e_i^2) of the chosen */
    double measured;      /* the check run's error with the whole set (0 where none is kept) */
    double seconds;       /* the calibration's time (the cache's look-up where cached) */
    int cached;           /* 1: taken from the cache file, no run */
} vae_fp8_choice;

/* What a session's choice for one program depends on, beside the program itself. */
typedef struct vae_fp8_request {
    const float *range; /* an encoder's pixel range {lo, hi}; NULL: a decoder */
    int size;           /* the calibration input's side: latents (decoders) or pixels */
    double budget;      /* the output error the E4M3 convs may add, relative L2 */
    int preview;        /* the decoder's preview mode (vae_session_options.preview) */
    const vae_settings *set;
    int threads;       /* the CPU emulation's (0: all cores) */
    const char *cache; /* the cache file (NULL or "": none) */
} vae_fp8_request;

/* p: a session's program whose candidate convs are marked (op->fp8 and op->fp8_kernel, as
 * program.h vae_program_pick_fp8 with budget 0 leaves them); range: an encoder's pixel range
 * {lo, hi} (its input is then a smooth video), NULL for a decoder (N(0, 1) latents); of size x
 * size, over the program's first chunk of frames and one more. Keeps the marks on the chosen set
 * and clears them on the others, so that the output error stays within `budget` (relative L2).
 * threads: the CPU emulation's (0: all cores). set: the executor's settings (NULL: defaults). Logs
 * the choice at INFO. */
int vae_fp8_calibrate(vae_program *p, const float *range, int size, double budget,
                      const vae_settings *set, int threads, vae_fp8_choice *out);

/* The cache file of the choices: fp8-choices.txt in the tune cache's folder (settings
 * tune_cache; "" where that is none, so that VAE_TUNE_CACHE= turns both off). */
void vae_fp8_cache_file(const vae_settings *set, char *file, size_t len);
/* The choice for p (its candidates marked, as for vae_fp8_calibrate) under rq from the cache: 1
 * with p's marks kept on the cached set alone and *out filled (cached = 1), 0 where the cache has
 * none for these weights, candidates and request (or a line of it is damaged: nothing changed). */
int vae_fp8_cache_get(vae_program *p, const vae_fp8_request *rq, vae_fp8_choice *out);
/* Keeps the choice p's marks now hold (after vae_fp8_calibrate, whose candidates were cand_ops,
 * n_cand of them, in program order) for later look-ups; a file that cannot be written is no
 * error (the next session calibrates again). */
void vae_fp8_cache_put(const vae_program *p, const int *cand_ops, int n_cand,
                       const vae_fp8_request *rq, const vae_fp8_choice *c);
/* The choice for p: the cache's, else calibrated (then cached); logs it at INFO (kept of the
 * candidates, predicted and measured error, budget, seconds, cached or not). */
int vae_fp8_choose(vae_program *p, const vae_fp8_request *rq, vae_fp8_choice *out);

#endif
