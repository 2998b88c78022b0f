/* runner.h -- carries out a plan (plan.h) with executors on a backend (internal).
 *
 * The runner owns one executor per part of the plan (kept between calls while the parts stay the
 * same, so prepared weights and tuned conv paths stay), the stores between parts, the tile loop,
 * and the host side of the output: whole-frame plans hand each output chunk to the caller as soon
 * as it is downloaded (one chunk in flight while the next computes); tiled and blended plans
 * assemble the output on the host and hand it out at the end.
 */
#ifndef VAE_RUNNER_H
#define VAE_RUNNER_H

#include "backend.h"
#include "plan.h"
#include "settings.h"

typedef struct vae_runner vae_runner;

/* Fills dst (planar float32 [c][n][rows][cols]) with input frames [f, f+n), rows y, columns x
 * (already checked and converted: the session reads the user's tensor). */
typedef int (*vae_read_fn)(void *user, float *dst, int f, int n, vae_span y, vae_span x);

int vae_runner_create(vae_runner **out, vae_backend *be, const vae_program *p,
                      const vae_settings *set);
void vae_runner_free(vae_runner *r);
/* Runs the plan: input through read, output frames (planar float32, vae_frames_fn) to emit, in
 * order. *emitted: frames handed to emit (0 when a failure came before any). */
int vae_runner_run(vae_runner *r, const vae_plan *plan, vae_read_fn read, void *read_user,
                   vae_frames_fn emit, void *emit_user, int *emitted);

#endif
