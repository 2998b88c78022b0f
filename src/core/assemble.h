/* assemble.h -- the output of tiled and blended plans, put together on the host (internal).
 *
 * Used by the runner: a tile's downloaded output rows go in (its own part, or its weighted part
 * for blends), whole frames come out in order once every tile has put them.
 */
#ifndef VAE_ASSEMBLE_H
#define VAE_ASSEMBLE_H

#include <stdint.h>
#include <stdio.h>

#include "plan.h"

typedef struct vae_assembly vae_assembly;

/* Host memory the caller keeps between calls for the in-memory output: a fresh allocation of
 * the output's size on every call costs a page fault per 4 KiB as the tiles first write it
 * (~0.4 s per GiB) and an unmap at the end. */
typedef struct vae_assembly_mem {
    float *p;
    size_t vals;
} vae_assembly_mem;
void vae_assembly_mem_free(vae_assembly_mem *m);

/* In memory when the output takes at most max_host_bytes (in *keep when given: grown as needed,
 * left to the caller), else in a temporary file. */
int vae_assembly_open(vae_assembly **a, const vae_plan *plan, int64_t max_host_bytes,
                      vae_assembly_mem *keep);
void vae_assembly_free(vae_assembly *a);
/* Frames [first, first+n) of tile `tile`'s output, planar float32 [c][n][h][w] over its out
 * rows/columns. */
int vae_assembly_put(vae_assembly *a, int tile, const float *frames, int first, int n, int c, int h,
                     int w);
/* One rank of a group of processes (runner_rank.c) puts only the tiles i with i % world ==
 * rank: a frame out of the file is made of those alone (the rest zeros), and merge, when given,
 * completes each frame [c][h][w] in place (blends: before it is divided by the weights) before
 * it is emitted. */
void vae_assembly_set_rank(vae_assembly *a, int rank, int world,
                           int (*merge)(float *frame, int f, void *user), void *user);
/* Frames [*emitted, upto) to emit in order (one frame a call; every tile must have put them),
 * *emitted counting them: the runner hands frames out as its last tile finishes them, and the
 * rest (upto = the output's frames) at the end. */
int vae_assembly_emit(vae_assembly *a, int upto, vae_frames_fn emit, void *user, int *emitted);

/* A temporary file for data too large for host memory (the output here, the runner's stores):
 * in $TMPDIR (else /tmp), created with a unique name (O_EXCL) and unlinked at once, so that
 * nothing is left behind whatever ends the process. NULL with errno set on failure. */
FILE *vae_spill_file(void);

#endif
