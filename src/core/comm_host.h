/* comm_host.h -- a communicator's collectives (comm.h) on a host buffer, whatever memory the
 * communicator takes (internal; comm_host.c). The exchanges of a rank of a group of processes
 * that are not between kernels (the plan the ranks agree on, the output they assemble) go
 * through it: a device communicator's (NCCL) through a staging buffer of the rank's backend,
 * waited for. */
#ifndef VAE_COMM_HOST_H
#define VAE_COMM_HOST_H

#include "backend.h"
#include "comm.h"

typedef struct vae_comm_host {
    vae_comm *c;
    vae_backend *be; /* the rank's backend: its buffers are what a device communicator takes */
    void *host;      /* the host buffer (pinned memory of be for a device communicator) */
    void *dev;       /* a device communicator's: its buffer of be */
    int pinned;
    size_t bytes;
} vae_comm_host;

void vae_comm_host_init(vae_comm_host *h, vae_comm *c, vae_backend *be);
void vae_comm_host_free(vae_comm_host *h);
/* h->host: at least `bytes` (its contents are kept only while it does not grow) */
int vae_comm_host_reserve(vae_comm_host *h, size_t bytes);
/* comm.h allreduce_sum of n doubles and allgather, on the host buffer; they return once it
 * holds the result */
int vae_comm_host_allreduce(vae_comm_host *h, size_t n);
int vae_comm_host_allgather(vae_comm_host *h, size_t frame_bytes, int frames, const size_t *off);

#endif
