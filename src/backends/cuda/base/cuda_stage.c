/* cuda_stage.c -- the model's parameters staged in pinned host memory at session creation
 * (cuda_base.h cu_stage; VAE_CUDA_WARM=2, called from cuda_warm).
 *
 * Why: a cold first call spent 16-33 ms of host time converting float32 weights to the activation
 * dtype and pushing them through the 4 MiB upload ring, while the GPU waited. Staged, a first use
 * is one asynchronous copy from pinned memory. What is staged is what the first uses will ask for
 * (cuda_conv_stage, cuda_ops.c), in the form they ask for it; anything else still goes through the
 * ring, so a miss costs time, never correctness. Blocks stay until vae_session_trim or the
 * backend's end; a program whose parameters would take the process's stages past an eighth of the
 * machine's RAM is not staged.
 *
 * Staging a program takes two passes over the same puts: the first counts the bytes of the new
 * items, then one pinned block is allocated for them, and the second converts into it.
 */
#define _DEFAULT_SOURCE
#include <stdatomic.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "platform/platform.h"

enum { STAGE_ALIGN = 256 };

/* Pinned memory is taken from what the whole machine can page: the stages of all sessions and
 * devices of the process keep to an eighth of its RAM together (Wan2.2's encoder and decoder
 * stage 1.4 GiB in bf16; a device group stages once per device). */
static atomic_size_t stage_total;

static int stage_reserve(size_t bytes) {
    const size_t cap = (size_t)vae_plat_mem_total() / 8;
    size_t now = atomic_load(&stage_total);
    do {
        if (now + bytes > cap) return 0;
    } while (!atomic_compare_exchange_weak(&stage_total, &now, now + bytes));
    return 1;
}

static size_t item_bytes(vae_dtype dt, size_t n) {
    const size_t b = n * (dt == VAE_DTYPE_F32 ? 4 : dt == VAE_DTYPE_FP8 ? 1 : 2);
    return (b + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
}

static cu_stage_item *item_find(const cu_stage *st, const void *key, int tag, vae_dtype dt,
                                size_t n) {
    for (int i = 0; i < st->n; i++) {
        cu_stage_item *it = &st->items[i];
        if (it->key == key && it->tag == tag && it->dt == dt && it->n == n) return it;
    }
    return NULL;
}

void cu_stage_begin(cu_stage *st) {
    st->first = st->n;
    st->want = 0;
    st->filling = 0;
}

int cu_stage_counting(const cu_stage *st) {
    return !st->filling;
}

void cu_stage_put(cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n, const void *src) {
    if (!key || n == 0) return;
    cu_stage_item *it = item_find(st, key, tag, dt, n);
    if (!st->filling) { /* counting: a new item gets its place in the block to come */
        if (it || st->n_blocks == CU_STAGE_BLOCKS) return;
        if (st->n == st->cap) {
            int cap = st->cap ? 2 * st->cap : 256;
            cu_stage_item *v = vae_realloc(st->items, (size_t)cap * sizeof *v);
            if (!v) return; /* not staged: the first use uploads it through the ring */
            st->items = v, st->cap = cap;
        }
        st->items[st->n++] = (cu_stage_item){key, tag, st->n_blocks, 0, dt, n, st->want};
        st->want += item_bytes(dt, n);
        return;
    }
    if (!it || it->ready || it - st->items < st->first || !src) return;
    char *dst = (char *)st->block[it->block].p + it->off;
    if (dt == VAE_DTYPE_FP8)
        memcpy(dst, src, n); /* E4M3 codes, as they are */
    else
        cu_params_convert(dst, src, n, dt);
    it->ready = 1;
}

int cu_stage_alloc(cuda_backend *cb, cu_stage *st) {
    if (st->want == 0 || st->n_blocks == CU_STAGE_BLOCKS || !stage_reserve(st->want)) {
        st->n = st->first;
        return 0;
    }
    if (cu_pin_alloc(cb, &st->block[st->n_blocks], st->want, 0) != cudaSuccess) {
        atomic_fetch_sub(&stage_total, st->want);
        st->n = st->first; /* no room for it: the first uses convert as before */
        return 0;
    }
    st->reserved[st->n_blocks] = st->want;
    st->n_blocks++;
    st->filling = 1;
    return 1;
}

void cu_stage_end(cu_stage *st) {
    /* items that no filling put reached (a src that turned out NULL) are dropped */
    int k = st->first;
    for (int i = st->first; i < st->n; i++)
        if (st->items[i].ready) st->items[k++] = st->items[i];
    st->n = k;
    st->filling = 0;
}

const void *cu_stage_find(const cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n) {
    const cu_stage_item *it = key ? item_find(st, key, tag, dt, n) : NULL;
    return it && it->ready ? (const char *)st->block[it->block].p + it->off : NULL;
}

size_t cu_stage_bytes(const cu_stage *st) {
    size_t b = 0;
    for (int i = 0; i < st->n_blocks; i++)
        b += st->block[i].bytes;
    return b;
}

void cu_stage_free(cuda_backend *cb, cu_stage *st) {
    if (st->n_blocks && cb->stream) cudaStreamSynchronize(cb->stream); /* copies from it */
    for (int i = 0; i < st->n_blocks; i++) {
        cu_pin_free(&st->block[i]);
        atomic_fetch_sub(&stage_total, st->reserved[i]);
    }
    vae_free(st->items);
    memset(st, 0, sizeof *st);
}
