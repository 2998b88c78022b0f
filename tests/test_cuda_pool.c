/* test_cuda_pool.c -- the CUDA backend's caching pool under a host's allocator (no GPU needed:
 * the blocks come from a counting host allocator): whatever the order of sizes, the host never
 * holds more than the pool's most bytes live at once (the engine's reported peak), and a second
 * pass of the same requests (a second call) takes nothing more from the host. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/base/cuda_base.h"
#include "test_check.h"

typedef struct host {
    size_t held, peak;
    int n_alloc;
} host;

static void *host_alloc(size_t bytes, int device, void *stream, void *user) {
    (void)device, (void)stream;
    host *h = user;
    h->held += bytes;
    h->peak = h->held > h->peak ? h->held : h->peak;
    h->n_alloc++;
    return malloc(bytes);
}

static void host_free(void *p, size_t bytes, int device, void *stream, void *user) {
    (void)device, (void)stream;
    ((host *)user)->held -= bytes;
    free(p);
}

static unsigned rnd(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

enum { N_LIVE = 24, N_REQ = 4000 };

/* One pass of requests from seed: a window of live blocks of random sizes (64 KiB .. 64 MiB),
 * each request freeing a random one first; returns the most rounded bytes live at once. */
static size_t pass(cu_pool *pool, unsigned seed) {
    void *live[N_LIVE] = {0};
    size_t now = 0, most = 0;
    for (int r = 0; r < N_REQ; r++) {
        const int k = (int)(rnd(&seed) % N_LIVE);
        if (live[k]) now -= cu_pool_free(pool, live[k]);
        size_t got = 0;
        cudaError_t e;
        const size_t want = (size_t)65536 << (rnd(&seed) % 11);
        live[k] = cu_pool_alloc(pool, want + rnd(&seed) % want, &got, &e);
        now += got;
        most = now > most ? now : most;
    }
    for (int k = 0; k < N_LIVE; k++)
        if (live[k]) cu_pool_free(pool, live[k]);
    return most;
}

int main(void) {
    for (unsigned seed = 1; seed <= 3; seed++) {
        host h = {0};
        cu_pool pool = {0};
        pool.al.alloc = host_alloc, pool.al.free = host_free, pool.al.user = &h;
        const size_t most = pass(&pool, seed);
        check(h.peak <= most, "seed %u: the host's peak %.1f MiB <= the most live %.1f MiB", seed,
              h.peak / 1048576.0, most / 1048576.0);
        const size_t peak1 = h.peak;
        const int n1 = h.n_alloc;
        pass(&pool, seed);
        check(h.peak == peak1, "seed %u: a second pass holds no more (%.1f -> %.1f MiB; %d then "
              "%d host allocations)", seed, peak1 / 1048576.0, h.peak / 1048576.0, n1,
              h.n_alloc - n1);
        cu_pool_destroy(&pool);
        check(h.held == 0, "seed %u: all given back (%zu bytes held)", seed, h.held);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
