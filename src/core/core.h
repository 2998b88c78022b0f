/* core.h -- errors, logging and small utilities shared by every layer (internal). */
#ifndef VAE_CORE_H
#define VAE_CORE_H

#include "vae.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define VAE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VAE_PRINTF(a, b)
#endif

/* Records the detail message of a failure for vae_last_error() and returns code, so that call
 * sites read `return vae_fail(VAE_EFORMAT, "%s: header truncated", path);`. Also logs at ERROR
 * level only when the public entry point gives up (see vae_log). */
int vae_fail(int code, const char *fmt, ...) VAE_PRINTF(2, 3);
/* Clears the thread's last error (public entry points call it first). */
void vae_error_clear(void);

void vae_log(int level, const char *fmt, ...) VAE_PRINTF(2, 3);
#define VAE_DEBUG(...) vae_log(VAE_LOG_DEBUG, __VA_ARGS__)
#define VAE_INFO(...) vae_log(VAE_LOG_INFO, __VA_ARGS__)
#define VAE_WARN(...) vae_log(VAE_LOG_WARN, __VA_ARGS__)

/* Allocation through one place so that failures can be injected in tests. */
void *vae_malloc(size_t bytes);
void *vae_calloc(size_t n, size_t size);
void *vae_realloc(void *p, size_t bytes);
void vae_free(void *p);
char *vae_strdup(const char *s);
/* Test hooks: the n-th allocation from now fails (0 = off; returns what was left of the previous
 * countdown: > 0 when its failure never came); the number of blocks allocated through these
 * functions and not freed yet (leak checks between calls). */
long vae_alloc_fail_after(long n);
/* The same countdown for allocations outside these functions (a backend's device memory):
 * 1 when this one is to fail. */
int vae_alloc_inject(void);
long vae_alloc_live(void);

int64_t vae_shape_numel(const int64_t *shape, int ndim);
/* Greatest common divisor of two non-negative ints (gcd(a, 0) = a). */
int vae_gcd(int a, int b);
/* Seconds on a monotonic clock (for logged timings). */
double vae_seconds(void);
/* "[1,16,3,4,6]" into buf. */
const char *vae_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);

/* Growing string buffer for JSON/config text. */
typedef struct vae_strbuf {
    char *s;
    size_t len, cap;
} vae_strbuf;
void vae_strbuf_printf(vae_strbuf *b, const char *fmt, ...) VAE_PRINTF(2, 3);
void vae_strbuf_free(vae_strbuf *b);

/* Creates "STEM.tmp.XXXXXXXX.EXT" next to path (EXT: path's extension), a name no one else has:
 * O_EXCL, so never through a planted link nor into another writer's file, with the usual
 * permissions (unlike mkstemp's 0600). The open descriptor (tmp: its name), or -1 with errno. */
int vae_temp_create(const char *path, char *tmp, size_t n);

/* Writes a file atomically: data goes to a temporary of vae_temp_create, renamed to PATH on
 * success, removed on failure. write_fn streams the content. */
typedef int (*vae_write_fn)(void *file /* FILE* */, void *user);
int vae_write_atomic(const char *path, vae_write_fn fn, void *user);

#endif
