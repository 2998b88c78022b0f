/* executor.h -- runs a program on a backend, one chunk of frames at a time (internal).
 *
 * The executor schedules ops, owns their buffers and causal caches, and records steady-state
 * steps as backend graphs. What each op computes, its shapes and stream rules come from op.h;
 * how a video is cut into chunks, frame loops and tiles is the planner's choice (plan.h).
 */
#ifndef VAE_EXECUTOR_H
#define VAE_EXECUTOR_H

#include <stdatomic.h>

#include "backend.h"
#include "program.h"
#include "settings.h"
#include "strip.h"

typedef struct vae_exec vae_exec;

typedef struct vae_exec_config {
    const vae_settings *settings; /* NULL: defaults */
    /* Frame loops: at each of these op indices (ascending, < n_ops) the step continues one frame
     * at a time: the values live across that boundary (vae_program_crossing, all with the same
     * frame count in every step) are cut into single frames, and the ops from there on run once
     * per frame, depth first. Streams give the same result (program.h: chunking does not matter)
     * while the later, larger stages hold one frame instead of a chunk. */
    const int *loops;
    const int *whole; /* NULL, or per loop 1: the chunk passes on whole (a trim point only) */
    int n_loops;      /* at most VAE_MAX_LOOPS */
    int loop_width;   /* frames a frame loop cuts at a time (0: 1; the last cut may hold fewer) */
} vae_exec_config;

int vae_exec_create(vae_exec **out, const vae_program *p, vae_backend *be,
                    const vae_exec_config *cfg);
void vae_exec_free(vae_exec *e);
/* Starts a new stream: clears caches, frame counters and trims (weights stay prepared). */
void vae_exec_reset(vae_exec *e);
/* batch: the steps until the next reset are one call's (a graph recorded among them is
 * replayed by the rest of the call alone), 0: a stream fed step by step (the default). */
void vae_exec_set_batch(vae_exec *e, int batch);
/* Tiles: every frame of `value` (which must cross a loop boundary) is cut to rows
 * [y0, y0+h) and columns [x0, x0+w) of itself before the ops after the boundary see it. Between
 * streams only; h = 0 removes the trim. */
int vae_exec_set_trim(vae_exec *e, int value, int y0, int x0, int h, int w);

/* Column strips (strip.h): the next stream runs strip k of s, taking the columns left of its
 * own from what strip k-1 left in the slots (so strips run in order, 0 first); s NULL: no strips
 * (the slots are given back). Between streams only; s stays the caller's until then. Graphs are
 * off while strips run (the slots' places move every step). */
int vae_exec_set_strip(vae_exec *e, const vae_strips *s, int k);

/* Causal caches in host memory: the next streams keep the cache of each op i with bytes[i] > 0
 * (at least its kt-1 input frames; the planner's vae_plan.offload) in host memory of the
 * backend's (host_alloc: pinned on a GPU), copied in front of the op's input before it runs and
 * back after, and prefetched while the op before it runs where the backend can; the arithmetic
 * is the same as with caches on the device. Only ops that read a contiguous window
 * (exec_window.c) can; others keep their cache on the device. bytes NULL: off (the host block is
 * given back). Between streams only; graphs are off while it is on. */
int vae_exec_set_offload(vae_exec *e, const int64_t *bytes);

/* A GroupNorm of a band plan (plan.h): its statistics are those of the rows this executor's band
 * owns, summed over the ranks of the group (comm.h) before anyone normalises. */
typedef struct vae_exec_norm {
    int op;       /* op index in the executor's program */
    int y0, rows; /* the owned rows, in the op's input as this executor holds it */
    int n;        /* rows of the whole frame: a group's count is c / groups x n x width */
} vae_exec_norm;

struct vae_comm;
/* Band plans: the next streams normalise each op of norms[0 .. n) with the statistics of its
 * owned rows, all-reduced over comm (every rank of it runs the same ops on the same frames);
 * comm NULL: off. Between streams only; norms stay the caller's until then. Graphs are off while
 * a communicator with host buffers is set (its sums wait on the host in the middle of a step). */
int vae_exec_set_reduce(vae_exec *e, struct vae_comm *comm, const vae_exec_norm *norms, int n);
/* Band plans' A (every rank computes it whole): the next streams share each attention's query
 * rows out over comm, rank k computing rows [h k / size, h (k + 1) / size) of every frame, then
 * every rank's rows all-gathered, so that each rank holds the whole output; comm NULL: off. Where
 * comm's buffers are host memory and the backend's are not (CUDA lanes with comm_threads.c) it
 * stays off. Returns 1 when on. Between streams only. */
int vae_exec_set_split(vae_exec *e, struct vae_comm *comm);

/* The caller's stop flag (vae_session_cancel), read before every op of a step: a step of a large
 * tile can take seconds on a CPU, so a run does not wait for its end. A stopped step fails with
 * VAE_EINTERRUPTED (its state dropped as after any failing op: vae_exec_reset before the next
 * stream). NULL: none. */
void vae_exec_set_cancel(vae_exec *e, const atomic_int *cancel);

/* Output of one chunk: a backend buffer [t][h][w][c] (NULL when t == 0), owned by the executor
 * until the next call. */
typedef struct vae_chunk {
    void *data;
    int t, h, w, c;
} vae_chunk;

/* Feeds the next chunk of the input stream. in->data is a backend buffer [t][h][w][c] and stays
 * the caller's. No other work may allocate from the backend between two steps of an executor
 * that holds a graph (the graph replays on the blocks it recorded). */
int vae_exec_step(vae_exec *e, const vae_chunk *in, vae_chunk *out);

/* The host's time in the steps since the executor was made, by how each step ran: its ops one by
 * one (launches), recorded as a graph (the recording and its instantiation: the device gets none
 * of that step's work meanwhile), or a recorded graph replayed. */
typedef struct vae_exec_host {
    double ops_s, record_s, replay_s;
    int ops, recorded, replayed;
} vae_exec_host;
/* Adds e's counts to *sum and starts them again. */
void vae_exec_host_take(vae_exec *e, vae_exec_host *sum);

#endif
