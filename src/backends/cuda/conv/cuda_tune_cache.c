/* cuda_tune_cache.c -- conv path choices kept on disk between processes (settings tune_cache).
 *
 * The tuner (cuda_conv_tune.c) times the candidate paths of a temporal conv the first time it sees
 * a shape, which costs a process's first call about as much as the call itself. Its choices go to
 * a text file, one per line:
 *     vae-tune-1 <device key> <shape key> <path number>
 * The device key holds what can change a choice: GPU name and compute capability, CUDA driver
 * and runtime, cuDNN and engine versions, activation dtype, which implicit-GEMM kernels (the
 * mma.sync ones in place of the sm_90a ones: PATH_IGEMM is another kernel). The file itself
 * (parsing, the index, bounded locks, whole-line appends, the size cap) is formats/linecache.c:
 * lines that do not parse are skipped, a lock another process holds for over 2 s means running
 * without the file, and nothing is an error for the caller (a cache that cannot be read or
 * written only means timing). A path the caller does not offer for the shape is ignored and
 * timed again; an entry whose replay fails is forgotten (cu_tune_forget) and chosen afresh.
 * The same file keeps what a warm-up at session creation (cuda_warm) can do ahead of a first call:
 * shape keys "dnn:<op>:<geometry>" (cudnn_conv.c: the cuDNN plans calls used, path 1 where the
 * call added to y or a residual) and "att:<geometry>" (cuda_att.c: the attention's GEMM blocks).
 */
#include <cudnn.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/conv/cuda_conv.h"

static const char magic[] = "vae-tune-1";

/* The device key: no spaces (the line's separator). */
static void device_key(cuda_backend *cb, char *key, size_t len) {
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0;
    if (cudaGetDeviceProperties(&prop, cb->device) != cudaSuccess) {
        cudaGetLastError();
        memset(&prop, 0, sizeof prop);
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(key, len, "%.120s|sm%d%d|drv%d|rt%d|cudnn%zu|vae%s|%s%s", prop.name, prop.major,
             prop.minor, drv, rt, (size_t)cudnnGetVersion(), VAE_VERSION_STRING,
             vae_dtype_name(cb->base.dtype), cb->mma ? "|mma" : "");
    for (char *c = key; *c; c++)
        if (*c == ' ' || *c == '\n' || *c == '\t') *c = '_';
}

/* The file's entries of this device, read at the first use (the device key needs the device). */
static vae_linecache *cache(cuda_backend *cb) {
    cu_tune_cache *tc = &cb->tc;
    if (!tc->loaded) {
        char device[VAE_LC_FIELD_MAX];
        tc->loaded = 1;
        device_key(cb, device, sizeof device);
        vae_linecache_init(&tc->lc, tc->file, "tune cache", magic, device, 7);
        vae_linecache_load(&tc->lc);
    }
    return &tc->lc;
}

int cu_tune_lookup(cuda_backend *cb, const char *shape) {
    return vae_linecache_get(cache(cb), shape);
}

void cu_tune_store(cuda_backend *cb, const char *shape, int path) {
    vae_linecache_put(cache(cb), shape, path);
}

void cu_tune_forget(cuda_backend *cb, const char *shape) {
    vae_linecache_forget(cache(cb), shape);
}

int cu_tune_next(cuda_backend *cb, const char *prefix, int from, const char **shape, int *path) {
    return vae_linecache_next(cache(cb), prefix, from, shape, path);
}

void cu_tune_cache_free(cuda_backend *cb) {
    vae_linecache_free(&cb->tc.lc);
    cb->tc.loaded = 0;
}
