/* test_tune_cache.c -- the keyed line cache file behind the CUDA tune cache (formats/linecache.c),
 * on the CPU: damaged lines of every kind skipped, a choice whose replay fails forgotten and made
 * afresh, a lock another holder keeps waited for a bounded time (then no cache), a crafted 4 MiB
 * file loaded fast, the size cap, and appends from two processes at once interleaving whole. */
#define _GNU_SOURCE
#include "core/core.h"
#include "formats/linecache.h"
#include "platform/platform.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef _WIN32
#include <sys/wait.h>
#endif

#include "test_check.h"

#define SCOPE "GPU_X|sm90|drv1|rt1|cudnn1|vae0|bf16" /* (in formats: Windows' printf has no %1$s) */
static const char magic[] = "vae-tune-1", scope[] = SCOPE;
static char dir[512];
static int file_no;

static void new_path(char *path, size_t len) {
    snprintf(path, len, "%s/cache%d/tune.txt", dir, file_no++); /* folder: made by write_text or a put */
}

static void write_text(const char *path, const char *text, size_t len) {
    char d[600];
    snprintf(d, sizeof d, "%s", path);
    *strrchr(d, '/') = 0;
    vae_plat_mkdir(d);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void open_cache(vae_linecache *lc, const char *path) {
    vae_linecache_init(lc, path, "tune cache", magic, scope, 7);
    vae_linecache_load(lc);
}

/* what the library logged at info level or above (the lock's message) */
static char logged[1024];
static void on_log(int level, const char *msg, void *user) {
    if (level >= VAE_LOG_INFO) snprintf(logged, sizeof logged, "%s", msg);
}

/* Every kind of damaged line between good ones: only the good ones count, the last line of a key
 * wins, another scope's lines are not damaged but not ours either. */
static void test_damaged(void) {
    char path[600], longkey[400], longline[800], text[4096];
    new_path(path, sizeof path);
    memset(longkey, 'k', 300), longkey[300] = 0;
    memset(longline, 'x', 700), longline[700] = 0;
    const char nul_line[] = "vae-tune-1 GPU_X|sm90|drv1|rt1|cudnn1|vae0|bf16 nu\0l 1\n";
    int n = snprintf(text, sizeof text,
                     "vae-tune-1 " SCOPE " good:a 3\n"
                     "vae-tune-2 " SCOPE " bad:magic 1\n"     /* another format */
                     "vae-tune-1 " SCOPE " bad:three\n"       /* a field short */
                     "vae-tune-1 " SCOPE " bad:five 1 2\n"    /* a field over */
                     "vae-tune-1 " SCOPE "  bad:space 1\n"    /* an empty field */
                     "vae-tune-1 " SCOPE " bad:trail 1 \n"    /* a trailing space */
                     "vae-tune-1 " SCOPE " bad:crlf 1\r\n"    /* CRLF */
                     "vae-tune-1\t" SCOPE " bad:tab 1\n"      /* a tab */
                     "vae-tune-1 " SCOPE " bad:range 8\n"     /* a value past value_max */
                     "vae-tune-1 " SCOPE " bad:neg -1\n"      /* a negative value */
                     "vae-tune-1 " SCOPE " bad:digits 3x\n"   /* not a number */
                     "vae-tune-1 " SCOPE " bad:huge 99999999999\n"
                     "vae-tune-1 " SCOPE " %s 1\n"          /* a key too long */
                     "%s\n"                            /* a line too long */
                     "\n"                                /* empty */
                     "\xff\xfe garbage \x01\n"           /* binary */
                     "vae-tune-1 OTHER_GPU bad:other 1\n" /* another scope: skipped, not damaged */
                     "vae-tune-1 " SCOPE " good:b 0\n"
                     "vae-tune-1 " SCOPE " good:a 5\n",       /* the last line wins */
                     longkey, longline);
    memcpy(text + n, nul_line, sizeof nul_line - 1); /* a NUL inside a line */
    n += (int)sizeof nul_line - 1;
    n += snprintf(text + n, sizeof text - (size_t)n, "vae-tune-1 %s good:cut 2", scope); /* no \n */
    write_text(path, text, (size_t)n);

    vae_linecache lc;
    open_cache(&lc, path);
    check(lc.n == 2, "damaged: %d keys kept, expected 2", lc.n);
    check(vae_linecache_get(&lc, "good:a") == 5, "damaged: the last line of a key wins");
    check(vae_linecache_get(&lc, "good:b") == 0, "damaged: good:b");
    check(lc.bad == 17, "damaged: %d lines counted damaged, expected 17", lc.bad);
    check(lc.other == 1, "damaged: %d other scope lines, expected 1", lc.other);
    const char *bad[] = {"bad:magic", "bad:three", "bad:five", "bad:space", "bad:trail",
                         "bad:crlf",  "bad:tab",   "bad:range", "bad:neg",  "bad:digits",
                         "bad:huge",  "bad:other", "good:cut", longkey};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        check(vae_linecache_get(&lc, bad[i]) == -1, "damaged: %.20s was kept", bad[i]);
    /* keys and values that cannot be a line are refused, not written */
    const long size = file_size(path);
    check(vae_linecache_put(&lc, "with space", 1) == -1, "put: a key with a space");
    check(vae_linecache_put(&lc, "", 1) == -1, "put: an empty key");
    check(vae_linecache_put(&lc, longkey, 1) == -1, "put: a key too long");
    check(vae_linecache_put(&lc, "k", 8) == -1 && vae_linecache_put(&lc, "k", -1) == -1,
          "put: a value out of range");
    check(file_size(path) == size, "put: refused keys were written");
    vae_linecache_free(&lc);
}

/* The caller's replay (a cuDNN plan made from the entry) fails for "dnn:bad": the entry is
 * forgotten, the caller's lookup finds nothing (so it chooses afresh and stores that), and a
 * later process sees the fresh choice, or nothing where none was made yet. */
static int replay(const char *geometry, int value) { return strcmp(geometry, "bad") == 0 ? -1 : 0; }

static void replay_all(vae_linecache *lc, int (*fn)(const char *, int)) {
    const char *g;
    int v;
    char key[VAE_LC_FIELD_MAX];
    for (int i = 0; (i = vae_linecache_next(lc, "dnn:", i, &g, &v)) >= 0; i++) {
        if (fn(g, v) == 0) continue;
        snprintf(key, sizeof key, "dnn:%s", g);
        vae_linecache_forget(lc, key);
    }
}

static void test_replay_fails(void) {
    char path[600], text[1024];
    new_path(path, sizeof path);
    const int n = snprintf(text, sizeof text,
                           "vae-tune-1 " SCOPE " dnn:bad 1\nvae-tune-1 " SCOPE " dnn:good 0\n"
                           "vae-tune-1 " SCOPE " att:n1.c2.r3 0\n");
    write_text(path, text, (size_t)n);
    vae_linecache a, b, c;
    open_cache(&a, path);
    replay_all(&a, replay);
    check(vae_linecache_get(&a, "dnn:bad") == -1, "replay: the failed entry is still found");
    check(vae_linecache_get(&a, "dnn:good") == 0, "replay: the good entry was lost");
    const char *g;
    int v, seen = 0;
    for (int i = 0; (i = vae_linecache_next(&a, "dnn:", i, &g, &v)) >= 0; i++) seen++;
    check(seen == 1, "replay: %d dnn: entries listed after the forget, expected 1", seen);
    check(vae_linecache_next(&a, "att:", 0, &g, &v) >= 0 && strcmp(g, "n1.c2.r3") == 0,
          "replay: another prefix's entry");

    open_cache(&b, path); /* a process started after the forget: the entry is gone there too */
    check(vae_linecache_get(&b, "dnn:bad") == -1, "replay: a later process still sees it");
    vae_linecache_free(&b);

    check(vae_linecache_put(&a, "dnn:bad", 0) == 0, "replay: the fresh choice not kept");
    open_cache(&c, path); /* ... and after the fresh choice: that one */
    check(vae_linecache_get(&c, "dnn:bad") == 0, "replay: a later process sees %d, not the fresh 0",
          vae_linecache_get(&c, "dnn:bad"));
    check(c.bad == 0, "replay: the forget line counted as damaged by this version");
    vae_linecache_free(&a);
    vae_linecache_free(&c);
}

/* Another holder's lock (here another open file description of the same file: its locks conflict
 * between those as between processes; on Windows LockFileEx's between handles): the load waits
 * wait_ms (2 s), then runs without the file, says so at info level, and does not wait again; an
 * append waits the same way. */
static void test_lock(void) {
    char path[600], text[256];
    new_path(path, sizeof path);
    const int n = snprintf(text, sizeof text, "vae-tune-1 %s k 1\n", scope);
    write_text(path, text, (size_t)n);
    const int holder = open(path, O_RDONLY);
    check(vae_plat_lock_try(holder, 1) == 0, "lock: the holder's lock");
    vae_set_log_callback(on_log, NULL, VAE_LOG_INFO);
    logged[0] = 0;
    vae_linecache lc;
    double t0 = vae_seconds();
    open_cache(&lc, path);
    double t = vae_seconds() - t0;
    check(t >= 1.9 && t < 3.0, "lock: the load waited %.2f s, expected about 2", t);
    check(lc.n == 0 && lc.file[0] == 0, "lock: the load did not give up on the file");
    check(strstr(logged, "locked by another process") != NULL, "lock: not logged: '%s'", logged);
    t0 = vae_seconds();
    check(vae_linecache_put(&lc, "k2", 2) == 0 && vae_linecache_get(&lc, "k2") == 2,
          "lock: a choice not kept in memory");
    check(vae_seconds() - t0 < 0.2, "lock: the put waited again");
    check(file_size(path) == n, "lock: the file was written without the lock");
    vae_linecache_free(&lc);

    /* a shared lock held elsewhere: the load reads, the append's exclusive lock waits */
    vae_plat_unlock(holder);
    vae_plat_lock_try(holder, 0);
    open_cache(&lc, path);
    lc.wait_ms = 300;
    check(vae_linecache_get(&lc, "k") == 1, "lock: a shared lock kept the load from reading");
    t0 = vae_seconds();
    vae_linecache_put(&lc, "k3", 3);
    t = vae_seconds() - t0;
    check(t >= 0.25 && t < 1.0, "lock: the append waited %.2f s, expected 0.3", t);
    check(file_size(path) == n && lc.file[0] == 0, "lock: the append wrote without the lock");
    vae_set_log_callback(NULL, NULL, VAE_LOG_ERROR);
    vae_linecache_free(&lc);
    close(holder);
}

/* 4 MiB of distinct keys sharing a long prefix (the worst case of a scan of the earlier keys per
 * line: ~12 s before), then no append past the size cap. */
static void test_large(void) {
    char path[600];
    new_path(path, sizeof path);
    const size_t cap = VAE_LC_FILE_MAX;
    char *text = malloc(cap + 256), prefix[120];
    memset(prefix, 'p', sizeof prefix - 1), prefix[sizeof prefix - 1] = 0;
    size_t len = 0;
    int lines = 0;
    for (;;) {
        char line[400];
        const int n = snprintf(line, sizeof line, "%s %s dnn:%s%07d %d\n", magic, scope, prefix,
                               (lines * 7919) % 10000000, lines % 8);
        if (len + (size_t)n > cap) break;
        memcpy(text + len, line, (size_t)n), len += (size_t)n, lines++;
    }
    write_text(path, text, len);
    vae_linecache lc;
    double t0 = vae_seconds();
    open_cache(&lc, path);
    const double t = vae_seconds() - t0;
    check(lc.n == lines && lc.bad == 0, "large: %d keys of %d lines (%d bad)", lc.n, lines, lc.bad);
    check(t < 0.5, "large: %d lines loaded in %.2f s", lines, t);
    char key[300];
    snprintf(key, sizeof key, "dnn:%s%07d", prefix, (1234 * 7919) % 10000000);
    check(vae_linecache_get(&lc, key) == 1234 % 8, "large: a key's value");
    const long size = file_size(path);
    lc.file_max = (size_t)size + 20; /* no room for another line */
    vae_linecache_put(&lc, "past:cap", 1);
    check(file_size(path) == size && vae_linecache_get(&lc, "past:cap") == 1,
          "cap: an append took the file past the cap, or was not kept in memory");
    vae_linecache_free(&lc);
    printf("  %d lines (%zu bytes) loaded in %.0f ms\n", lines, len, 1e3 * t);
    free(text);
}

/* Past the cap (a foreign writer's lines, or a file_max lower than the file): lines that end
 * past it are not read, and a line it cuts counts as damaged. */
static void test_cap(void) {
    char path[600], text[512];
    new_path(path, sizeof path);
    int l1 = snprintf(text, sizeof text, "%s %s a 1\n", magic, scope);
    int l2 = snprintf(text + l1, sizeof text - (size_t)l1, "%s %s b 2\n", magic, scope);
    int l3 = snprintf(text + l1 + l2, sizeof text - (size_t)(l1 + l2), "%s %s c 3\n", magic, scope);
    write_text(path, text, (size_t)(l1 + l2 + l3));
    vae_linecache lc;
    vae_linecache_init(&lc, path, "tune cache", magic, scope, 7);
    lc.file_max = (size_t)(l1 + l2); /* on a line's end */
    vae_linecache_load(&lc);
    check(lc.n == 2 && lc.bad == 0 && vae_linecache_get(&lc, "c") == -1,
          "cap: on a line's end: %d keys, %d bad", lc.n, lc.bad);
    vae_linecache_free(&lc);
    vae_linecache_init(&lc, path, "tune cache", magic, scope, 7);
    lc.file_max = (size_t)(l1 + l2 + 5); /* cutting the third line */
    vae_linecache_load(&lc);
    check(lc.n == 2 && lc.bad == 1 && vae_linecache_get(&lc, "c") == -1,
          "cap: a cut line: %d keys, %d bad", lc.n, lc.bad);
    vae_linecache_free(&lc);
}

/* Two processes appending at once (started together through a pipe): every line whole. */
static void test_concurrent(void) {
#ifdef _WIN32
    printf("skipped: concurrent appenders (forked processes; Windows has no fork)\n");
#else
    enum { EACH = 400 };
    char path[600];
    new_path(path, sizeof path);
    int go[2];
    if (pipe(go) != 0) return;
    pid_t pid[2];
    for (int p = 0; p < 2; p++) {
        pid[p] = fork();
        if (pid[p] == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) < 0) _exit(2);
            vae_linecache lc;
            open_cache(&lc, path);
            for (int i = 0; i < EACH; i++) {
                char key[64];
                snprintf(key, sizeof key, "p%d:key%04d:%s", p, i, "padding-to-make-lines-longer");
                if (vae_linecache_put(&lc, key, (i + p) % 8) != 0) _exit(1);
            }
            _exit(lc.file[0] ? 0 : 3);
        }
    }
    close(go[0]);
    close(go[1]); /* both start */
    for (int p = 0; p < 2; p++) {
        int st = -1;
        waitpid(pid[p], &st, 0);
        check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "concurrent: writer %d ended with %d", p, st);
    }
    vae_linecache lc;
    open_cache(&lc, path);
    check(lc.n == 2 * EACH && lc.bad == 0, "concurrent: %d keys (%d damaged lines), expected %d",
          lc.n, lc.bad, 2 * EACH);
    char key[64];
    snprintf(key, sizeof key, "p1:key0007:%s", "padding-to-make-lines-longer");
    check(vae_linecache_get(&lc, key) == 0, "concurrent: a value");
    vae_linecache_free(&lc);
#endif
}

int main(void) {
    const char *t = getenv("TMPDIR");
#ifdef _WIN32 /* (no mkdtemp) */
    int made = -1; /* (a new folder: Wine reuses process ids) */
    for (int k = 0; made != 0 && k < 1000; k++) {
        snprintf(dir, sizeof dir, "%s/vae_test_tune_cache_%ld_%d", t && *t ? t : "/tmp", vae_plat_pid(), k);
        made = vae_plat_mkdir(dir);
    }
    if (made != 0) return 1;
#else
    snprintf(dir, sizeof dir, "%s/vae_test_tune_cache_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) return 1;
#endif
    test_damaged();
    test_replay_fails();
    test_lock();
    test_large();
    test_cap();
    test_concurrent();
#ifndef _WIN32 /* (no rm there: the folder stays in the temporary folder) */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("(left %s behind)\n", dir);
#endif
    printf("test_tune_cache: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
