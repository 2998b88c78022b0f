/* cuda_alloc.c -- a caching device allocator: free lists by size class.
 *
 * The executor allocates and releases every activation of every chunk; after the first chunk the
 * same sizes come back each time, so released blocks are kept in free lists (one per size class)
 * and handed out again without cudaMalloc/cudaFree (which synchronise the device). Sizes are
 * rounded up to a class: multiples of 512 bytes below 4 KiB, then 8 classes per power of two
 * (at most 12.5% waste). All work runs on one stream, so a block released by the executor may be
 * reused at once by later work on that stream. When cudaMalloc fails, the cached blocks are
 * freed (after a stream synchronisation) and the allocation is tried again -- except while work
 * graphs exist, which replay their work on blocks that are free in these lists.
 *
 * Under a host's allocator (vae_session_options.dev_alloc: torch's caching allocator under vaec),
 * the host counts every block the pool holds, cached ones too, as in use: its peak would be the
 * sum over size classes of each class's most blocks at once, well above the most bytes live at
 * once (the engine's reported peak). So there a miss first gives cached blocks back, the largest
 * first, until the pool holds no more than its live peak (or what is live plus the new block):
 * the host's count never exceeds the engine's, and the host's own cache (stream-ordered, so no
 * synchronisation) serves the next request of a size the pool let go. Not while graphs exist.
 */
#include <string.h>

#include "backends/cuda/base/cuda_base.h"

size_t cu_pool_round(size_t bytes) {
    if (bytes < 512) return 512;
    if (bytes <= 4096) return (bytes + 511) & ~(size_t)511;
    int e = 63 - __builtin_clzll((unsigned long long)bytes);
    size_t step = (size_t)1 << (e - 3);
    if (step < 512) step = 512;
    if (bytes > SIZE_MAX - step) return 0;
    return (bytes + step - 1) / step * step;
}

/* ---- live-block map: pointer -> size (linear probing, backward-shift deletion) ---- */
static size_t map_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p >> 8;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

static int map_grow(cu_pool *pool) {
    size_t cap = pool->map_cap ? pool->map_cap * 2 : 256;
    cu_slot *m = vae_calloc(cap, sizeof *m);
    if (!m) return -1;
    for (size_t i = 0; i < pool->map_cap; i++) {
        if (!pool->map[i].p) continue;
        size_t j = map_hash(pool->map[i].p, cap);
        while (m[j].p) j = (j + 1) & (cap - 1);
        m[j] = pool->map[i];
    }
    vae_free(pool->map);
    pool->map = m;
    pool->map_cap = cap;
    return 0;
}

static int map_put(cu_pool *pool, void *p, size_t size) {
    if ((pool->map_live + 1) * 4 > pool->map_cap * 3 && map_grow(pool)) return -1;
    size_t j = map_hash(p, pool->map_cap);
    while (pool->map[j].p) j = (j + 1) & (pool->map_cap - 1);
    pool->map[j].p = p;
    pool->map[j].size = size;
    pool->map_live++;
    return 0;
}

static size_t map_take(cu_pool *pool, void *p) {
    if (!pool->map_cap) return 0;
    size_t mask = pool->map_cap - 1, j = map_hash(p, pool->map_cap);
    while (pool->map[j].p && pool->map[j].p != p) j = (j + 1) & mask;
    if (!pool->map[j].p) return 0;
    size_t size = pool->map[j].size;
    /* backward-shift deletion keeps every probe chain intact */
    size_t hole = j;
    for (size_t k = (j + 1) & mask; pool->map[k].p; k = (k + 1) & mask) {
        size_t home = map_hash(pool->map[k].p, pool->map_cap);
        /* move k into the hole if its home is not in (hole, k] (cyclically) */
        int in_range = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (!in_range) {
            pool->map[hole] = pool->map[k];
            hole = k;
        }
    }
    pool->map[hole].p = NULL;
    pool->map[hole].size = 0;
    pool->map_live--;
    return size;
}

/* ---- free lists ---- */
static cu_bin *bin_find(cu_pool *pool, size_t size, int create) {
    for (int i = 0; i < pool->n_bins; i++)
        if (pool->bins[i].size == size) return &pool->bins[i];
    if (!create) return NULL;
    if (pool->n_bins == pool->cap_bins) {
        int cap = pool->cap_bins ? pool->cap_bins * 2 : 32;
        cu_bin *b = vae_realloc(pool->bins, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        pool->bins = b;
        pool->cap_bins = cap;
    }
    cu_bin *b = &pool->bins[pool->n_bins++];
    memset(b, 0, sizeof *b);
    b->size = size;
    return b;
}

void cu_pool_trim(cu_pool *pool) {
    /* recorded graphs still write to blocks that are free here: they must stay allocated */
    if (pool->cached_bytes == 0 || pool->graphs > 0) return;
    if (pool->stream) cudaStreamSynchronize(pool->stream);
    for (int i = 0; i < pool->n_bins; i++) {
        cu_bin *b = &pool->bins[i];
        for (int k = 0; k < b->n; k++) {
            cu_dev_free(pool, b->v[k], b->size);
            pool->reserved_bytes -= b->size;
        }
        b->n = 0;
    }
    pool->cached_bytes = 0;
}

/* A host allocator's pool before a miss of `size` bytes: cached blocks given back, the largest
 * first, until the pool would hold at most max(live peak, live + size). */
static void give_back_for(cu_pool *pool, size_t size) {
    if (!pool->al.alloc || pool->graphs > 0) return;
    const size_t live = pool->reserved_bytes - pool->cached_bytes;
    const size_t cap = pool->live_peak > live + size ? pool->live_peak : live + size;
    while (pool->reserved_bytes + size > cap && pool->cached_bytes > 0) {
        cu_bin *big = NULL;
        for (int i = 0; i < pool->n_bins; i++)
            if (pool->bins[i].n > 0 && (!big || pool->bins[i].size > big->size))
                big = &pool->bins[i];
        cu_dev_free(pool, big->v[--big->n], big->size);
        pool->cached_bytes -= big->size;
        pool->reserved_bytes -= big->size;
    }
}

void *cu_pool_alloc(cu_pool *pool, size_t bytes, size_t *got, cudaError_t *err) {
    size_t size = cu_pool_round(bytes);
    *err = cudaSuccess;
    if (!size) {
        *err = cudaErrorMemoryAllocation;
        return NULL;
    }
    cu_bin *b = bin_find(pool, size, 0);
    void *p = NULL;
    if (b && b->n > 0) {
        p = b->v[--b->n];
        pool->cached_bytes -= size;
    } else {
        give_back_for(pool, size);
        cudaError_t e = cu_dev_malloc(pool, &p, size);
        if (e != cudaSuccess) {
            cudaGetLastError(); /* not sticky: clear it */
            cu_pool_trim(pool);
            e = cu_dev_malloc(pool, &p, size);
            if (e != cudaSuccess) {
                cudaGetLastError();
                *err = e;
                return NULL;
            }
        }
        pool->reserved_bytes += size;
    }
    if (map_put(pool, p, size)) { /* host OOM: give the block back */
        cu_dev_free(pool, p, size);
        pool->reserved_bytes -= size;
        *err = cudaErrorMemoryAllocation;
        return NULL;
    }
    const size_t live = pool->reserved_bytes - pool->cached_bytes;
    if (live > pool->live_peak) pool->live_peak = live;
    *got = size;
    return p;
}

size_t cu_pool_free(cu_pool *pool, void *p) {
    size_t size = map_take(pool, p);
    if (!size) return 0;
    cu_bin *b = bin_find(pool, size, 1);
    if (b && b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 8;
        void **v = vae_realloc(b->v, (size_t)cap * sizeof *v);
        if (v) b->v = v, b->cap = cap;
    }
    if (b && b->n < b->cap) {
        b->v[b->n++] = p;
        pool->cached_bytes += size;
    } else { /* host OOM: free it for real */
        if (pool->stream) cudaStreamSynchronize(pool->stream);
        cu_dev_free(pool, p, size);
        pool->reserved_bytes -= size;
    }
    return size;
}

void cu_pool_destroy(cu_pool *pool) {
    pool->graphs = 0;
    cu_pool_trim(pool);
    for (size_t i = 0; i < pool->map_cap; i++)
        if (pool->map[i].p) cu_dev_free(pool, pool->map[i].p, pool->map[i].size);
    for (int i = 0; i < pool->n_bins; i++) vae_free(pool->bins[i].v);
    vae_free(pool->bins);
    vae_free(pool->map);
    memset(pool, 0, sizeof *pool);
}

/* ---- where device blocks come from ---- */
cudaError_t cu_dev_malloc(const cu_pool *pool, void **p, size_t bytes) {
    *p = NULL;
    if (vae_alloc_inject()) return cudaErrorMemoryAllocation; /* tests: test_alloc_fail cuda */
    const double t0 = cu_now();
    cudaError_t e = cudaSuccess;
    if (!pool->al.alloc) e = cudaMalloc(p, bytes);
    else *p = pool->al.alloc(bytes, pool->device, (void *)pool->stream, pool->al.user);
    if (pool->malloc_s) *pool->malloc_s += cu_now() - t0;
    if (pool->al.alloc && !*p) e = cudaErrorMemoryAllocation;
    return e;
}

void cu_dev_free(const cu_pool *pool, void *p, size_t bytes) {
    if (!p) return;
    if (pool->al.free)
        pool->al.free(p, bytes, pool->device, (void *)pool->stream, pool->al.user);
    else
        cudaFree(p);
}
