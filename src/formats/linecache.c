/* linecache.c -- a text file of small keyed choices shared between processes (linecache.h). */
#define _GNU_SOURCE
#include "formats/linecache.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* read, write, lseek, close */

#include "platform/platform.h"

void vae_linecache_init(vae_linecache *lc, const char *file, const char *what, const char *magic,
                        const char *scope, int value_max) {
    memset(lc, 0, sizeof *lc);
    snprintf(lc->file, sizeof lc->file, "%s", file ? file : "");
    snprintf(lc->what, sizeof lc->what, "%s", what);
    snprintf(lc->magic, sizeof lc->magic, "%s", magic);
    snprintf(lc->scope, sizeof lc->scope, "%s", scope);
    for (char *c = lc->scope; *c; c++) /* a field of the line: printable, no spaces */
        if (*c < '!' || *c > '~') *c = '_';
    lc->value_max = value_max;
    lc->wait_ms = VAE_LC_WAIT_MS;
    lc->file_max = VAE_LC_FILE_MAX;
}

/* ---- the index: keys sorted in a pool of text ---- */

static const char *key_at(const vae_linecache *lc, int i) { return lc->pool + lc->v[i].key; }

/* The first index whose key is not below key (n where none). */
static int lower_bound(const vae_linecache *lc, const char *key) {
    int lo = 0, hi = lc->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (strcmp(key_at(lc, mid), key) < 0) lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* key's text into the pool: its offset, or -1. */
static int64_t pool_add(vae_linecache *lc, const char *key, size_t len) {
    if (lc->pool_len + len + 1 > lc->pool_cap) {
        size_t cap = lc->pool_cap ? 2 * lc->pool_cap : 4096;
        while (cap < lc->pool_len + len + 1) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *p = vae_realloc(lc->pool, cap);
        if (!p) return -1;
        lc->pool = p, lc->pool_cap = cap;
    }
    const size_t at = lc->pool_len;
    memcpy(lc->pool + at, key, len);
    lc->pool[at + len] = 0;
    lc->pool_len += len + 1;
    return (int64_t)at;
}

static int entries_reserve(vae_linecache *lc, int n) {
    if (n <= lc->cap) return 0;
    int cap = lc->cap ? lc->cap : 64;
    while (cap < n) {
        if (cap > (1 << 28)) return -1;
        cap *= 2;
    }
    vae_lc_entry *v = vae_realloc(lc->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    lc->v = v, lc->cap = cap;
    return 0;
}

/* key = value in the index (a new key inserted in order; runtime only, the load sorts once). */
static int index_set(vae_linecache *lc, const char *key, int value) {
    const int i = lower_bound(lc, key);
    if (i < lc->n && strcmp(key_at(lc, i), key) == 0) {
        lc->v[i].value = value;
        return 0;
    }
    if (entries_reserve(lc, lc->n + 1) != 0) return -1;
    const int64_t at = pool_add(lc, key, strlen(key));
    if (at < 0) return -1;
    memmove(lc->v + i + 1, lc->v + i, (size_t)(lc->n - i) * sizeof *lc->v);
    lc->v[i].key = (uint32_t)at, lc->v[i].value = value;
    lc->n++;
    return 0;
}

/* ---- the file: bounded locks, whole-line appends ---- */

/* The file locked (shared or exclusive) waiting at most lc->wait_ms for another holder: 0 locked
 * (or the file system has no locks: the caller goes on as the single O_APPEND write keeps lines
 * whole), -1 not in time. */
static int lock_bounded(vae_linecache *lc, int fd, int exclusive) {
    const double end = vae_seconds() + lc->wait_ms / 1000.0;
    for (;;) {
        const int held = vae_plat_lock_try(fd, exclusive);
        if (held == 0) return 0;
        if (held < 0) {
            VAE_DEBUG("%s %s: no file lock (%s)", lc->what, lc->file, strerror(errno));
            return 0;
        }
        if (vae_seconds() >= end) break;
        vae_plat_sleep_ms(10);
    }
    VAE_INFO("%s %s: locked by another process for more than %d ms; this process runs without it",
             lc->what, lc->file, lc->wait_ms);
    lc->file[0] = 0;
    return -1;
}

/* Folders above path (mkdir -p of its directory); failures show at open. */
static void make_parents(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            vae_plat_mkdir(dir);
            *p = '/';
        }
}

/* One line appended whole, where the file stays within file_max. */
static void append_line(vae_linecache *lc, const char *key, const char *value) {
    char line[VAE_LC_LINE_MAX + 1];
    const int n = snprintf(line, sizeof line, "%s %s %s %s\n", lc->magic, lc->scope, key, value);
    if (!lc->file[0] || n < 0 || n > VAE_LC_LINE_MAX) return;
    make_parents(lc->file);
    const int fd = open(lc->file, O_WRONLY | O_APPEND | O_CREAT | VAE_O_BINARY | VAE_O_CLOEXEC |
                                      VAE_O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        VAE_DEBUG("%s %s: not written (%s)", lc->what, lc->file,
                  fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return;
    }
    if (lock_bounded(lc, fd, 1) != 0) {
        close(fd);
        return;
    }
    const off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0 || (size_t)end + (size_t)n > lc->file_max)
        VAE_DEBUG("%s %s: full (%zu bytes), choice kept in memory only", lc->what, lc->file,
                  lc->file_max);
    else if (write(fd, line, (size_t)n) != n)
        VAE_DEBUG("%s %s: write failed (%s)", lc->what, lc->file, strerror(errno));
    vae_plat_unlock(fd);
    close(fd);
}

/* ---- loading: every line parsed exactly, then one sort ---- */

/* A line without its '\n': 1 a line of this scope (*key, *key_len, *value: -1 for "-"), 0 one of
 * another scope, -1 damaged (fields not exactly magic, scope, key and value). */
static int parse_line(const vae_linecache *lc, const char *s, size_t len, const char **key,
                      size_t *key_len, int *value) {
    const char *f[4];
    size_t fl[4], i = 0;
    int nf = 0;
    while (i <= len) { /* fields split by single spaces: printable, none empty */
        const size_t start = i;
        for (; i < len && s[i] != ' '; i++)
            if (s[i] < '!' || s[i] > '~') return -1;
        if (nf == 4 || i == start || i - start >= VAE_LC_FIELD_MAX) return -1;
        f[nf] = s + start, fl[nf++] = i - start;
        i++;
    }
    if (nf != 4 || fl[0] != strlen(lc->magic) || memcmp(f[0], lc->magic, fl[0]) != 0) return -1;
    int v = 0;
    if (fl[3] == 1 && f[3][0] == '-') {
        v = -1;
    } else {
        if (fl[3] > 9) return -1;
        for (size_t k = 0; k < fl[3]; k++) {
            if (f[3][k] < '0' || f[3][k] > '9') return -1;
            v = 10 * v + (f[3][k] - '0');
        }
        if (v > lc->value_max) return -1;
    }
    if (fl[1] != strlen(lc->scope) || memcmp(f[1], lc->scope, fl[1]) != 0) return 0;
    *key = f[2], *key_len = fl[2], *value = v;
    return 1;
}

typedef struct {
    const char *key;
    uint32_t off, seq;
    int32_t value;
} lc_line;

/* by key, then file order: the last line of a key ends its run */
static int cmp_line(const void *a, const void *b) {
    const lc_line *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* This scope's lines of text into the index (sorted, the last line of each key kept). */
static int index_text(vae_linecache *lc, const char *text, size_t len) {
    size_t count = 0;
    for (size_t i = 0; i < len; i++) count += text[i] == '\n';
    lc_line *ln = vae_malloc((count ? count : 1) * sizeof *ln);
    if (!ln) return -1;
    size_t n = 0;
    for (const char *s = text, *end = text + len; s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const size_t l = nl ? (size_t)(nl - s) : (size_t)(end - s);
        const char *key;
        size_t key_len;
        int value, r = nl && l <= VAE_LC_LINE_MAX ? parse_line(lc, s, l, &key, &key_len, &value)
                                                  : -1; /* too long, or cut short */
        s = nl ? nl + 1 : end;
        if (r <= 0) {
            lc->bad += r < 0, lc->other += r == 0;
            continue;
        }
        const int64_t at = pool_add(lc, key, key_len);
        if (at < 0) break;
        ln[n].off = (uint32_t)at, ln[n].seq = (uint32_t)n, ln[n++].value = value;
    }
    for (size_t i = 0; i < n; i++) /* the pool has stopped moving */
        ln[i].key = lc->pool + ln[i].off;
    qsort(ln, n, sizeof *ln, cmp_line);
    int rc = entries_reserve(lc, (int)n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i + 1 < n && strcmp(ln[i].key, ln[i + 1].key) == 0) continue;
        lc->v[lc->n].key = ln[i].off, lc->v[lc->n++].value = ln[i].value;
    }
    vae_free(ln);
    return rc;
}

/* At most file_max bytes of the file, read under a shared lock: 0 (*text owned by the caller),
 * or -1 where there is nothing to read (the file left alone where it is not a plain file or is
 * locked). */
static int read_text(vae_linecache *lc, char **text, size_t *len) {
    const int fd = open(lc->file, O_RDONLY | VAE_O_BINARY | VAE_O_CLOEXEC | VAE_O_NONBLOCK);
    if (fd < 0) {
        VAE_DEBUG("%s %s: not read (%s)", lc->what, lc->file, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        VAE_DEBUG("%s %s: not a regular file, left alone", lc->what, lc->file);
        lc->file[0] = 0;
        close(fd);
        return -1;
    }
    if (lock_bounded(lc, fd, 0) != 0) {
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > lc->file_max)
        VAE_DEBUG("%s %s: %lld bytes, the lines past %zu bytes ignored", lc->what, lc->file,
                  (long long)st.st_size, lc->file_max);
    const size_t want = (uint64_t)st.st_size > lc->file_max ? lc->file_max : (size_t)st.st_size;
    char *buf = vae_malloc(want + 1);
    size_t got = 0;
    while (buf && got < want) {
        const ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* (shorter than it was: what was there) */
        got += (size_t)r;
    }
    vae_plat_unlock(fd);
    close(fd);
    if (!buf) return -1;
    *text = buf, *len = got;
    return 0;
}

void vae_linecache_load(vae_linecache *lc) {
    char *text;
    size_t len;
    lc->bad = lc->other = 0;
    if (!lc->file[0] || read_text(lc, &text, &len) != 0) return;
    const double t0 = vae_seconds();
    const int rc = index_text(lc, text, len);
    vae_free(text);
    VAE_DEBUG("%s %s: %d keys of this scope (%zu bytes read in %.1f ms)%s%s", lc->what, lc->file,
              lc->n, len, 1e3 * (vae_seconds() - t0), lc->bad ? ", damaged lines skipped" : "",
              rc ? ", out of memory" : "");
}

int vae_linecache_put(vae_linecache *lc, const char *key, int value) {
    const size_t len = strlen(key);
    if (len == 0 || len >= VAE_LC_FIELD_MAX || value < 0 || value > lc->value_max) return -1;
    for (const char *c = key; *c; c++)
        if (*c <= ' ' || *c > '~') return -1;
    if (index_set(lc, key, value) != 0) return -1;
    char text[16];
    snprintf(text, sizeof text, "%d", value);
    append_line(lc, key, text);
    return 0;
}

void vae_linecache_forget(vae_linecache *lc, const char *key) {
    const int i = lower_bound(lc, key);
    if (i >= lc->n || strcmp(key_at(lc, i), key) != 0 || lc->v[i].value < 0) return;
    lc->v[i].value = -1;
    append_line(lc, key, "-");
}

int vae_linecache_get(const vae_linecache *lc, const char *key) {
    const int i = lower_bound(lc, key);
    return i < lc->n && strcmp(key_at(lc, i), key) == 0 ? lc->v[i].value : -1;
}

int vae_linecache_next(const vae_linecache *lc, const char *prefix, int from, const char **key,
                       int *value) {
    const size_t len = strlen(prefix);
    const int lb = lower_bound(lc, prefix);
    for (int i = from > lb ? from : lb; i < lc->n; i++) {
        const char *k = key_at(lc, i);
        if (strncmp(k, prefix, len) != 0) break; /* past the prefix's keys */
        if (lc->v[i].value < 0) continue;
        *key = k + len;
        *value = lc->v[i].value;
        return i;
    }
    return -1;
}

void vae_linecache_free(vae_linecache *lc) {
    vae_free(lc->v);
    vae_free(lc->pool);
    lc->v = NULL, lc->pool = NULL;
    lc->n = lc->cap = 0;
    lc->pool_len = lc->pool_cap = 0;
}
