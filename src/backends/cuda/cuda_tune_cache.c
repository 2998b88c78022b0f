/* cuda_tune_cache.c -- conv path choices kept on disk between processes (settings tune_cache).
 *
 * The tuner (cuda_conv_tune.c) times the candidate paths of a temporal conv the first time it sees
 * a shape, which costs a process's first call about as much as the call itself. Its choices go to
 * a text file, one per line:
 *     vae-tune-1 <device key> <shape key> <path number>
 * The device key holds what can change a choice: GPU name and compute capability, CUDA driver
 * and runtime, cuDNN and engine versions, activation dtype, which implicit-GEMM kernels (the
 * mma.sync ones in place of the sm_90a ones: PATH_IGEMM is another kernel). The file is read once
 * per backend (under a shared flock); a choice is appended as one write with O_APPEND under an
 * exclusive flock, so concurrent processes interleave whole lines. Lines that do not parse (a
 * damaged or foreign file) are skipped, and a path the caller does not offer for the shape is
 * ignored: such entries are timed again. Nothing here is an error for the caller: a cache that
 * cannot be read or written only means timing (logged at debug level). The file stops growing
 * at 4 MiB.
 * The same file keeps what a warm-up at session creation (cuda_warm) can do ahead of a first call:
 * shape keys "dnn:<op>:<geometry>" (cudnn_conv.c: the cuDNN plans calls used, path 1 where the
 * call added to y or a residual) and "att:<geometry>" (cuda_att.c: the attention's GEMM blocks).
 */
#define _GNU_SOURCE
#include <cudnn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cuda/cuda_internal.h"

enum { TUNE_FILE_MAX = 4 << 20, TUNE_LINE_MAX = 512 };
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

/* Creates the folders above path (mkdir -p of its directory); failures show at open. */
static void make_parents(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
}

static int add_entry(cu_tune_cache *tc, const char *shape, int path) {
    for (int i = 0; i < tc->n; i++)
        if (strcmp(tc->v[i].shape, shape) == 0) {
            tc->v[i].path = path; /* the last line wins */
            return 0;
        }
    if (tc->n == tc->cap) {
        int cap = tc->cap ? 2 * tc->cap : 64;
        void *v = vae_realloc(tc->v, (size_t)cap * sizeof *tc->v);
        if (!v) return -1;
        tc->v = v, tc->cap = cap;
    }
    snprintf(tc->v[tc->n].shape, sizeof tc->v[tc->n].shape, "%s", shape);
    tc->v[tc->n++].path = path;
    return 0;
}

/* Reads this device's entries once (the first lookup). */
static void load(cuda_backend *cb) {
    cu_tune_cache *tc = &cb->tc;
    tc->loaded = 1;
    device_key(cb, tc->device, sizeof tc->device);
    if (!tc->file[0]) return;
    int fd = open(tc->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        VAE_DEBUG("tune cache %s: not read (%s)", tc->file, strerror(errno));
        return;
    }
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= TUNE_FILE_MAX
                  ? fdopen(fd, "r")
                  : NULL;
    if (!f) {
        VAE_DEBUG("tune cache %s: not a regular file of at most %d bytes, not read", tc->file,
                  TUNE_FILE_MAX);
        close(fd);
        return;
    }
    flock(fd, LOCK_SH);
    char line[TUNE_LINE_MAX + 2], m[16], dev[sizeof tc->device], shape[sizeof tc->v->shape];
    int path, good = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') { /* too long or cut short: skip to its end */
            bad++;
            int c;
            while (len && line[len - 1] != '\n' && (c = fgetc(f)) != EOF && c != '\n') {}
            continue;
        }
        if (sscanf(line, "%15s %255s %255s %d", m, dev, shape, &path) != 4 ||
            strcmp(m, magic) != 0 || path < 0 || path > 7) {
            bad++;
            continue;
        }
        if (strcmp(dev, tc->device) == 0 && add_entry(tc, shape, path) == 0) good++;
    }
    flock(fd, LOCK_UN);
    fclose(f);
    VAE_DEBUG("tune cache %s: %d choices for this device%s", tc->file, good,
              bad ? " (lines that do not parse skipped)" : "");
}

int cu_tune_lookup(cuda_backend *cb, const char *shape) {
    if (!cb->tc.loaded) load(cb);
    for (int i = 0; i < cb->tc.n; i++)
        if (strcmp(cb->tc.v[i].shape, shape) == 0) return cb->tc.v[i].path;
    return -1;
}

void cu_tune_store(cuda_backend *cb, const char *shape, int path) {
    cu_tune_cache *tc = &cb->tc;
    if (!tc->loaded) load(cb);
    if (add_entry(tc, shape, path) != 0 || !tc->file[0]) return;
    char line[TUNE_LINE_MAX];
    int n = snprintf(line, sizeof line, "%s %s %s %d\n", magic, tc->device, shape, path);
    if (n < 0 || n >= (int)sizeof line) return;
    make_parents(tc->file);
    int fd = open(tc->file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        VAE_DEBUG("tune cache %s: not written (%s)", tc->file, fd < 0 ? strerror(errno) : "not a file");
        if (fd >= 0) close(fd);
        return;
    }
    flock(fd, LOCK_EX);
    if (lseek(fd, 0, SEEK_END) + n <= TUNE_FILE_MAX && write(fd, line, (size_t)n) != n)
        VAE_DEBUG("tune cache %s: write failed (%s)", tc->file, strerror(errno));
    flock(fd, LOCK_UN);
    close(fd);
}

int cu_tune_next(cuda_backend *cb, const char *prefix, int from, const char **shape, int *path) {
    if (!cb->tc.loaded) load(cb);
    const size_t len = strlen(prefix);
    for (int i = from < 0 ? 0 : from; i < cb->tc.n; i++)
        if (strncmp(cb->tc.v[i].shape, prefix, len) == 0) {
            *shape = cb->tc.v[i].shape + len;
            *path = cb->tc.v[i].path;
            return i;
        }
    return -1;
}

void cu_tune_cache_free(cuda_backend *cb) {
    vae_free(cb->tc.v);
    memset(&cb->tc, 0, sizeof cb->tc);
}
