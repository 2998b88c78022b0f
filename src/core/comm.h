/* comm.h -- what the ranks of a device group exchange while they compute: the contract of a
 * communicator, and the in-process one (comm_threads.c).
 *
 * Frame-major models (SeedVR2: GroupNorm over every pixel of a frame) split each frame into
 * row bands, one per rank; a band needs its neighbours' edge rows before each conv (a halo
 * exchange: sendrecv) and every rank's partial GroupNorm sums before it normalises
 * (allreduce_sum); the latent part every rank computes whole shares its attention's queries out
 * and gathers the rows (allgather). The field's transport for that is NCCL (one GPU per rank,
 * across processes and nodes); comm_threads.c is the same contract for ranks that are threads of
 * one process (the CPU lanes of the tests and CI), so that the exchange logic runs everywhere.
 *
 * Every call is collective: every rank of the group makes the same calls in the same order,
 * with matching sizes. A rank that fails calls abort(), and every rank's pending and later calls
 * return VAE_EINTERRUPTED instead of waiting for it; so does a rank whose cancel flag is set
 * while it waits for the others (comm_threads.c: the group is then aborted too). Buffers are host
 * memory for comm_threads.c; a backend's own communicator (backend.h comm_create: NCCL on CUDA)
 * takes buffers of the ranks' backends and queues its work in their stream order (device_buffers =
 * 1): a call returns before the data moved, and what the backend queues next sees it.
 */
#ifndef VAE_COMM_H
#define VAE_COMM_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct vae_comm vae_comm;

typedef struct vae_comm_vtbl {
    const char *name;
    /* buf[0 .. n) <- the element-wise sum of every rank's buf[0 .. n), the same bits on every
     * rank (summed in rank order: GroupNorm statistics stay independent of timing) */
    int (*allreduce_sum)(vae_comm *c, double *buf, size_t n);
    /* send[0 .. send_bytes) to rank `to` while recv[0 .. recv_bytes) comes from rank `from`
     * (-1: nothing that way: the first and last bands). The sender's send_bytes must equal the
     * receiver's recv_bytes (VAE_EINVAL on both otherwise). */
    int (*sendrecv)(vae_comm *c, const void *send, size_t send_bytes, int to, void *recv,
                    size_t recv_bytes, int from);
    /* Each rank's part of every frame to every rank: buf holds `frames` frames of frame_bytes,
     * bytes [off[k], off[k + 1]) of each are rank k's (0 = off[0] <= ... <= off[size] =
     * frame_bytes, the same frames and offsets on every rank; VAE_EINVAL on all otherwise); the
     * other ranks' parts of buf are overwritten with theirs. */
    int (*allgather)(vae_comm *c, void *buf, size_t frame_bytes, int frames, const size_t *off);
    int (*barrier)(vae_comm *c);
    /* Not collective: this rank failed; the others stop at their next call (or the one they
     * wait in) with VAE_EINTERRUPTED. */
    void (*abort)(vae_comm *c);
    void (*destroy)(vae_comm *c); /* this rank's handle (the group ends with its last one) */
} vae_comm_vtbl;

struct vae_comm {
    const vae_comm_vtbl *v;
    int rank, size;
    int device_buffers; /* 0: host memory, waited for; 1: the rank's backend buffers, queued */
    /* optional (the session's vae_session_cancel flag): non-zero stops a wait for the other
     * ranks with VAE_EINTERRUPTED within ~20 ms (comm_threads.c; NCCL's queued calls ignore it) */
    const atomic_int *cancel;
};

/* `size` handles of one in-process group (ranks[k]: rank k, used by one thread at a time). */
int vae_comm_threads_create(int size, vae_comm **ranks);

/* Groups whose ranks join one by one with an id (vae_group_id: sessions of a group of processes,
 * which on the CPU are threads of this process). new_id: a fresh id of this process; join: rank
 * `rank`'s handle of the group of `world` ranks with that id (its first rank makes it), once
 * every rank has joined; after timeout_s seconds without them VAE_EINTERRUPTED naming the ranks
 * that did not come (and this rank is out of the group again). */
#define VAE_COMM_ID_BYTES 128
void vae_comm_threads_new_id(unsigned char *id);
int vae_comm_threads_id(const unsigned char *id); /* 1: an id of new_id (of any process) */
int vae_comm_threads_join(const unsigned char *id, int rank, int world, double timeout_s,
                          vae_comm **out);

#endif
