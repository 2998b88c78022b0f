/* fuzz_common.h -- shared helpers of the libFuzzer entries in tests/fuzz/ (header-only).
 *
 * Two ways to hand the input to the library:
 * - fuzz_store_parse(): the bytes are copied into a heap block of exactly their size and given to
 *   one format reader as the store's mapping (so AddressSanitizer sees every read past the end,
 *   which a page-rounded mmap would hide), then indexed like vae_store_open does;
 * - fuzz_memfd(): the bytes as an anonymous file, opened by path (/proc/self/fd/N) through the
 *   public API (vae_model_open, vae_tensor_load), magic-byte dispatch included.
 * Every path must free what it allocated: the fuzzers run with leak detection. */
#ifndef VAE_FUZZ_COMMON_H
#define VAE_FUZZ_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/store.h"
#include "vae.h"

static void fuzz_quiet_log(int level, const char *message, void *user) {
    (void)level, (void)message, (void)user;
}

static void fuzz_init(void) {
    static int done;
    if (!done) {
        vae_set_log_callback(fuzz_quiet_log, NULL, 0);
        done = 1;
    }
}

/* Aborts (a finding) when an invariant of a successfully opened store does not hold. */
#define FUZZ_CHECK(cond)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);  \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* Everything a caller of an open store may do: look each tensor up by name, convert it to
 * float32 (bounded, so that a large valid tensor does not hit the RSS limit), read metadata. */
static void fuzz_exercise_store(const vae_store *s) {
    FUZZ_CHECK(s->n >= 0 && (s->n == 0 || s->tensors));
    for (int i = 0; i < s->n; i++) {
        const vae_store_tensor *t = &s->tensors[i];
        FUZZ_CHECK(t->name && t->ndim >= 0 && t->ndim <= VAE_MAX_DIMS);
        const vae_store_tensor *f = vae_store_find(s, t->name);
        FUZZ_CHECK(f && strcmp(f->name, t->name) == 0);
        (void)vae_storage_type_name(t->type);
        int64_t n = vae_store_numel(t);
        FUZZ_CHECK(n >= 0);
        if (n > (1 << 22)) continue;
        float *dst = malloc((size_t)(n ? n : 1) * sizeof(float));
        if (!dst) continue;
        (void)vae_store_to_f32(s, t, dst);
        free(dst);
    }
    (void)vae_store_find(s, "");
    (void)vae_store_find(s, "decoder.conv1.weight");
    (void)vae_store_metadata(s, "vae.arch");
    (void)vae_store_metadata(s, "vae.config");
}

/* One format reader on a private heap copy of the input, then the name index and the checks. */
static int fuzz_store_parse(const uint8_t *data, size_t size, const char *format,
                            int (*parse)(vae_store *)) {
    fuzz_init();
    if (size == 0) return 0; /* vae_store_open refuses empty files before any reader runs */
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    vae_store *s = NULL;
    if (vae_store_new(&s, "fuzz-input") != VAE_OK) {
        free(copy);
        return 0;
    }
    s->format = format;
    s->map = copy;
    s->map_size = size;
    vae_error_clear();
    int rc = parse(s);
    if (rc == VAE_OK) rc = vae_store_index(s);
    if (rc == VAE_OK) fuzz_exercise_store(s);
    else FUZZ_CHECK(vae_last_error()[0] != 0); /* every failure says why */
    s->map = NULL; /* not an mmap: vae_store_free must not munmap it */
    vae_store_free(s);
    free(copy);
    return 0;
}

/* The input as an anonymous in-memory file; path receives "/proc/self/fd/N". -1 on failure. */
static int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t path_len) {
    int fd = memfd_create("vae-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, path_len, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
