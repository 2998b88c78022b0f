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

#include <stdatomic.h>

#include "backend.h"
#include "executor.h"
#include "plan.h"
#include "settings.h"

typedef struct vae_runner vae_runner;

/* Fills dst (planar float32 [c][n][rows][cols]) with input frames [f, f+n), rows y, columns x
 * (already checked and converted: the session reads the user's tensor). */
typedef int (*vae_read_fn)(void *user, float *dst, int f, int n, vae_span y, vae_span x);

/* Where a run's input comes from and its output goes, and who watches it. */
typedef struct vae_run_io {
    vae_read_fn read;             /* host input (when in_view is NULL) */
    void *read_user;
    const vae_io_view *in_view;   /* or input in device memory (backend's view_import) */
    vae_frames_fn emit;           /* host output (when out_view is NULL), frames in order */
    void *emit_user;
    const vae_io_view *out_view;  /* or output written in place into device memory; tiles
                                   * write their own part, nothing is assembled on the host */
    vae_progress_fn progress;     /* optional: after each unit of work (an executor step) */
    void *progress_user;
    const atomic_int *cancel;     /* optional: non-zero stops the run at the next unit */
} vae_run_io;

int vae_runner_create(vae_runner **out, vae_backend *be, const vae_program *p,
                      const vae_settings *set);
void vae_runner_free(vae_runner *r);
/* The host's time in the steps of r's executors since the last take (executor.h vae_exec_host),
 * added to *sum. */
void vae_runner_host_take(vae_runner *r, vae_exec_host *sum);
/* Gives the host memory the runner keeps between calls back (staging, the tiled output). */
void vae_runner_trim(vae_runner *r);
/* Runs the plan with io's input and output. *emitted: frames handed to io->emit (0 when a
 * failure came before any; always 0 for device output, which a new run simply overwrites). */
int vae_runner_run(vae_runner *r, const vae_plan *plan, const vae_run_io *io, int *emitted);

/* Host frames (planar float32 [c][n][h][w]) into frames [first, first+n) of the device view v,
 * through a frame of be's memory; *cl (capacity *cl_cap values, grown as needed) is the caller's
 * host scratch. For output that reaches the device tensor through the host (assembled or placed
 * frames). */
int vae_runner_put_view_frames(vae_backend *be, const vae_io_view *v, float **cl, size_t *cl_cap,
                               const float *fr, int first, int n, int c, int h, int w);

/* A stream fed by the caller (the API's vae_stream_*): a whole-frame plan (VAE_PLAN_WHOLE) run
 * step by step as the input arrives instead of in one call, with the same steps as
 * vae_runner_run (so the same output). begin prepares the executor and the input buffer (plan
 * and io stay the caller's until end); each step takes the next n input frames through
 * io->read (at their index in the stream: first_chunk frames first, then chunk a step; the
 * end of an input the program pads comes padded) and hands the frames they finish to io->emit
 * before it returns; end frees it (after any failure, which leaves the executor's state
 * undefined: nothing but end may follow one). */
typedef struct vae_runner_feed vae_runner_feed;
int vae_runner_feed_begin(vae_runner_feed **out, vae_runner *r, const vae_plan *plan,
                          const vae_run_io *io);
int vae_runner_feed_step(vae_runner_feed *f, int n);
/* frames handed out so far */
int vae_runner_feed_emitted(const vae_runner_feed *f);
void vae_runner_feed_end(vae_runner_feed *f);

/* Runs the plan on n runners at once, one host thread each (runners of the same program, each on
 * its own backend: a device group). Tiled and blended plans share out their tiles (tile i to
 * runner i % n); each runner runs part A itself (latent resolution: cheap, and no transfer);
 * the output of B goes into one store in host memory that every device copies into (C follows
 * on runner 0) or into one host assembly of the output, which is handed out at the end (to
 * io->emit, or into io->out_view through runner 0). Whole-frame plans run on runner 0 alone.
 * io->in_view must be NULL (each runner reads the input through io->read); io->out_view is a
 * tensor on runner 0's device, written in place by every runner whose device reaches it
 * (view_reach), else assembled on the host and copied in by runner 0; the caller's earlier work
 * on it must be finished (the other devices do not wait on its stream). A failing runner stops the others at their next step; the call
 * returns its error. Progress is reported from the calling thread (runner 0). */
int vae_runner_run_group(vae_runner *const *rs, int n, const vae_plan *plan, const vae_run_io *io,
                         int *emitted);

/* Runs rank comm->rank's share of the plan in a group of comm->size processes (runner_rank.c):
 * the tiles (or band) a runner of a device group of that size would run, A itself; the output of
 * tiled and blended plans is exchanged (every rank gets the whole output, or with own_only its
 * own tiles and zeros elsewhere), an encoder's B store is exchanged before every rank runs C.
 * Whole-frame plans run whole. Every rank makes this call with the same plan. */
struct vae_comm;
int vae_runner_run_rank(vae_runner *r, const vae_plan *plan, const vae_run_io *io,
                        struct vae_comm *comm, int own_only, int *emitted);

#endif
