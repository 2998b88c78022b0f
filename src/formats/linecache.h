/* linecache.h -- a text file of small keyed choices shared between processes (internal).
 *
 * One choice a line, appended by whichever process made it:
 *     <magic> <scope> <key> <value>\n
 * magic names the format and its version, scope what the choice depends on (a device, say: only
 * this scope's lines are kept), key the thing chosen for, value a number from 0 to value_max, or
 * "-" for "forget this key" (a choice that turned out not to work: older readers skip such a line
 * as damaged). Fields are printable ASCII without spaces, under VAE_LC_FIELD_MAX bytes. For a key
 * the last line wins.
 *
 * The file is input from anyone: a line that does not parse exactly (damaged, cut short, too long,
 * foreign) is skipped, and nothing here is an error for the caller: a file that cannot be read or
 * written only means choosing again (logged). Loading costs O(N log N) for N bytes, whatever the
 * lines hold (sort + binary search; no per-line scan of the earlier lines). At most file_max bytes
 * are read: lines past it are ignored (logged) and no line is appended that would take the file
 * past it, so a full file keeps its choices but gains no new ones.
 *
 * Concurrent processes: the file is read under a shared flock and a line is appended as one
 * O_APPEND write under an exclusive flock, so lines interleave whole. A lock another process
 * holds is waited for at most wait_ms; then this process leaves the file alone for good (says so
 * at info level) and keeps its choices in memory only. */
#ifndef VAE_FORMATS_LINECACHE_H
#define VAE_FORMATS_LINECACHE_H

#include <stddef.h>
#include <stdint.h>

enum {
    VAE_LC_FIELD_MAX = 256,    /* a scope or a key, its terminating NUL included */
    VAE_LC_LINE_MAX = 640,     /* a longer line is damaged */
    VAE_LC_FILE_MAX = 4 << 20, /* default file_max */
    VAE_LC_WAIT_MS = 2000      /* default wait_ms */
};

typedef struct vae_lc_entry {
    uint32_t key;  /* offset of the key in pool */
    int32_t value; /* -1: forgotten */
} vae_lc_entry;

typedef struct vae_linecache {
    char file[1024]; /* "": none, or left alone for the rest of the process */
    char what[32];   /* the log's name for it ("tune cache") */
    char magic[32];
    char scope[VAE_LC_FIELD_MAX];
    int value_max;
    int wait_ms;     /* longest wait for another process's lock */
    size_t file_max; /* bytes read at most; appends stop there */
    vae_lc_entry *v; /* this scope's keys, sorted (strcmp) */
    int n, cap;
    char *pool; /* the keys' text */
    size_t pool_len, pool_cap;
    int bad, other; /* the last load: lines skipped, other scopes' lines */
} vae_linecache;

/* An empty cache of file (NULL or "": in memory only) with the defaults above; no file access. */
void vae_linecache_init(vae_linecache *lc, const char *file, const char *what, const char *magic,
                        const char *scope, int value_max);
/* Reads the file's lines of this scope (once, before the other calls). */
void vae_linecache_load(vae_linecache *lc);
/* key's value, -1 where none (or forgotten). */
int vae_linecache_get(const vae_linecache *lc, const char *key);
/* Keeps key = value and appends it to the file; -1 where key or value cannot be a line's (or no
 * memory), 0 otherwise (whether or not the file took it). */
int vae_linecache_put(vae_linecache *lc, const char *key, int value);
/* Forgets key (a choice that failed): gone here, and a "-" line in the file for later processes. */
void vae_linecache_forget(vae_linecache *lc, const char *key);
/* The first kept key from index `from` on that starts with prefix: its index (-1: none), *key the
 * text after the prefix and *value. Keys are in sorted order, so a prefix's keys are adjacent;
 * indexes and key pointers hold until the next put. */
int vae_linecache_next(const vae_linecache *lc, const char *prefix, int from, const char **key,
                       int *value);
void vae_linecache_free(vae_linecache *lc);

#endif
