/* core.c -- errors, logging, allocation and small utilities. */
#define _POSIX_C_SOURCE 200809L
#include "core.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* close (mingw-w64 has it too) */

#include "platform/platform.h"

static _Thread_local char last_error[1024];

const char *vae_strerror(int code) {
    switch (code) {
    case VAE_OK: return "success";
    case VAE_EINVAL: return "invalid argument";
    case VAE_EIO: return "I/O error";
    case VAE_EFORMAT: return "invalid or corrupt file";
    case VAE_ENOMEM: return "out of memory";
    case VAE_EUNSUPPORTED: return "unsupported";
    case VAE_ESHAPE: return "wrong tensor shape";
    case VAE_EKEY: return "missing or unexpected tensor";
    case VAE_EDTYPE: return "unsupported tensor dtype";
    case VAE_ENAN: return "NaN or Inf in input";
    case VAE_EDEVICE: return "device error";
    case VAE_EINTERRUPTED: return "interrupted";
    default: return "unknown error";
    }
}

const char *vae_last_error(void) { return last_error; }
void vae_error_clear(void) { last_error[0] = 0; }

int vae_fail(int code, const char *fmt, ...) {
    /* The innermost failure has the most precise message; callers up the stack keep it. */
    if (last_error[0] == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error, sizeof last_error, fmt, ap);
        va_end(ap);
    }
    return code;
}

unsigned vae_version_number(void) { return VAE_VERSION_NUMBER; }
const char *vae_version_string(void) { return VAE_VERSION_STRING; }

/* (public, vae.h; here because every backend names its dtype in messages) */
int vae_parse_size(const char *text, int64_t *bytes) {
    if (!text || !bytes) return vae_fail(VAE_EINVAL, "vae_parse_size: NULL %s", text ? "bytes" : "text");
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    char *end;
    errno = 0;
    const double v = strtod(p, &end);
    double unit = 1;
    const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (end != p && u) {
        for (int k = 0; k <= u - units; k++) unit *= 1024.0;
        end++;
        if (*end == 'i' || *end == 'I') end++;
    }
    if (end != p && (*end == 'b' || *end == 'B')) end++;
    while (*end == ' ' || *end == '\t') end++;
    /* v < 2^63 exactly: doubles hold 2^63, and a cast of it overflows */
    if (end == p || *end || errno || !(v >= 0) || !(v * unit < 9223372036854775808.0))
        return vae_fail(VAE_EINVAL, "'%s' is not a size: expected bytes, or a number with K, M, G "
                                    "or T such as 13G, 800M or 1.5GiB, below 2^63 bytes", text);
    *bytes = (int64_t)(v * unit);
    return VAE_OK;
}

const char *vae_dtype_name(vae_dtype d) {
    switch (d) {
    case VAE_DTYPE_F32: return "fp32";
    case VAE_DTYPE_F16: return "fp16";
    case VAE_DTYPE_BF16: return "bf16";
    case VAE_DTYPE_FP8: return "fp8";
    }
    return "?";
}

/* ---- logging ---- */
static vae_log_fn log_fn;
static void *log_user;
static int log_min = VAE_LOG_WARN;

void vae_set_log_callback(vae_log_fn fn, void *user, int min_level) {
    log_fn = fn;
    log_user = user;
    log_min = min_level;
}

void vae_log(int level, const char *fmt, ...) {
    if (!log_fn || level < log_min) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(level, msg, log_user);
}

/* ---- allocation ---- */
/* atomic: sessions run on several threads at once (the counters are for tests, not hot) */
static _Atomic long alloc_countdown, alloc_live;

long vae_alloc_fail_after(long n) {
    long left = alloc_countdown;
    alloc_countdown = n;
    return left;
}
long vae_alloc_live(void) { return alloc_live; }

static int alloc_should_fail(void) {
    if (alloc_countdown <= 0) return 0;
    return --alloc_countdown == 0;
}

int vae_alloc_inject(void) { return alloc_should_fail(); }

static void *counted(void *p) {
    if (p) alloc_live++;
    return p;
}

void *vae_malloc(size_t bytes) {
    return alloc_should_fail() ? NULL : counted(malloc(bytes ? bytes : 1));
}
void *vae_calloc(size_t n, size_t size) {
    return alloc_should_fail() ? NULL : counted(calloc(n ? n : 1, size ? size : 1));
}
void *vae_realloc(void *p, size_t bytes) {
    if (alloc_should_fail()) return NULL;
    void *q = realloc(p, bytes ? bytes : 1);
    return p ? q : counted(q);
}
void vae_free(void *p) {
    if (p) alloc_live--;
    free(p);
}

char *vae_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = vae_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int64_t vae_shape_numel(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

const char *vae_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t o = 0;
    if (ndim < 0 || ndim > 8) { /* a caller's rank out of range: its shape array holds only 8 */
        snprintf(buf, len, "(rank %d)", ndim);
        return buf;
    }
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

void vae_strbuf_printf(vae_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256);
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(b->s, cap); /* not injected: messages must survive a failing test */
        if (!s) return;
        if (!b->s) alloc_live++; /* freed with vae_free, like every block of the library */
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void vae_strbuf_free(vae_strbuf *b) {
    vae_free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

int vae_temp_create(const char *path, char *tmp, size_t n) {
    static atomic_uint counter;
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    const char *ext = dot && (!slash || dot > slash + 1) ? dot : ""; /* writers pick formats by it */
    const int stem = (int)(strlen(path) - strlen(ext));
    unsigned x = vae_plat_seed();
    for (int tries = 0; tries < 100; tries++) {
        x = x * 1103515245u + 12345u + atomic_fetch_add(&counter, 1);
        if (snprintf(tmp, n, "%.*s.tmp.%08x%s", stem, path, x, ext) >= (int)n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        const int fd = vae_plat_open_new(tmp);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

int vae_write_atomic(const char *path, vae_write_fn fn, void *user) {
    char tmp[4096];
    if (strlen(path) + 16 >= sizeof tmp) return vae_fail(VAE_EINVAL, "%s: output path too long", path);
    const int fd = vae_temp_create(path, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        const int e = errno;
        if (fd >= 0) close(fd), remove(tmp);
        return vae_fail(VAE_EIO, "%s: cannot open for writing: %s", path, strerror(e));
    }
    int rc = fn(f, user);
    if (fflush(f) != 0 && rc == VAE_OK)
        rc = vae_fail(VAE_EIO, "%s: write failed: %s", path, strerror(errno));
    if (ferror(f) && rc == VAE_OK) rc = vae_fail(VAE_EIO, "%s: write failed", path);
    if (fclose(f) != 0 && rc == VAE_OK)
        rc = vae_fail(VAE_EIO, "%s: close failed: %s", path, strerror(errno));
    if (rc == VAE_OK && vae_plat_rename(tmp, path) != 0)
        rc = vae_fail(VAE_EIO, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (rc != VAE_OK) remove(tmp);
    return rc;
}

double vae_seconds(void) {
    return vae_plat_monotonic();
}

int vae_gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}
