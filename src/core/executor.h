/* executor.h -- runs a program on a backend, one chunk of frames at a time (internal). */
#ifndef VAE_EXECUTOR_H
#define VAE_EXECUTOR_H

#include "backend.h"
#include "program.h"

typedef struct vae_exec vae_exec;

/* be == NULL makes a dry executor: shapes, frame counts and MACs only (no buffers, no compute). */
int vae_exec_create(vae_exec **out, const vae_program *p, vae_backend *be);
void vae_exec_free(vae_exec *e);
/* Starts a new stream: clears caches and frame counters (weights stay prepared). */
void vae_exec_reset(vae_exec *e);

/* Output of one chunk: a backend buffer [t][h][w][c] (NULL when t == 0 or dry), owned by the
 * executor until the next call. */
typedef struct vae_chunk {
    void *data;
    int t, h, w, c;
} vae_chunk;

/* Feeds the next chunk of the input stream. in->data is a backend buffer [t][h][w][c] (ignored in
 * dry mode) and stays the caller's. */
int vae_exec_step(vae_exec *e, const vae_chunk *in, vae_chunk *out);
/* Multiply-accumulates done so far in this stream (counted in dry and real mode). */
double vae_exec_macs(const vae_exec *e);

#endif
