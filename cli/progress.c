/* progress.c -- progress bar / periodic lines on stderr; signals and temporary files of long
 * commands (see progress.h). */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h> /* close, unlink, rmdir, _exit */

#include "cli.h"
#include "platform/platform.h" /* pthreads, interrupts, temporaries */

double cli_now(void) {
    return vae_plat_monotonic();
}

void cli_progress_begin(cli_progress *p, const char *what, const char *unit, int total) {
    memset(p, 0, sizeof *p);
    p->what = what;
    p->unit = unit ? unit : "frames";
    p->total = total;
    p->mode = cli_quiet ? 0 : vae_plat_stderr_is_tty() ? 1 : 2;
    p->t0 = p->t_last = cli_now();
}

static void fmt_time(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void draw(cli_progress *p, double now) {
    double el = now - p->t0, rate = el > 0 ? p->done / el : 0;
    char eta[32] = "?";
    if (p->total > 0 && rate > 0) fmt_time((p->total - p->done) / rate, eta, sizeof eta);
    if (p->mode == 1) {
        char bar[32];
        int width = 24, fill = p->total > 0 ? (int)((double)width * p->done / p->total) : 0;
        if (fill > width) fill = width;
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[width] = 0;
        if (p->total > 0)
            fprintf(stderr, "\r%s [%s] %d/%d %s  %.2f %s/s  ETA %s\033[K", p->what, bar, p->done,
                    p->total, p->unit, rate, p->unit, eta);
        else
            fprintf(stderr, "\r%s %d %s  %.2f %s/s\033[K", p->what, p->done, p->unit, rate,
                    p->unit);
        p->drawn = 1;
    } else {
        if (p->total > 0)
            fprintf(stderr, "vae: %s: %d/%d %s, %.2f %s/s, ETA %s\n", p->what, p->done, p->total,
                    p->unit, rate, p->unit, eta);
        else
            fprintf(stderr, "vae: %s: %d %s, %.2f %s/s\n", p->what, p->done, p->unit, rate,
                    p->unit);
    }
    fflush(stderr);
}

void cli_progress_update(cli_progress *p, int done) {
    if (!p->mode) return;
    p->done = done;
    double now = cli_now();
    if (p->mode == 1 && (now - p->t_last >= 0.1 || (p->total > 0 && done >= p->total))) {
        draw(p, now);
        p->t_last = now;
    } else if (p->mode == 2 && now - p->t_last >= 5.0) {
        draw(p, now);
        p->t_last = now;
    }
}

void cli_progress_end(cli_progress *p, int ok) {
    if (!p->mode) return;
    if (p->drawn) fputs("\r\033[K", stderr);
    if (ok) {
        double el = cli_now() - p->t0;
        fprintf(stderr, "vae: %s: %d %s in %.1f s (%.2f %s/s)\n", p->what, p->done, p->unit, el,
                el > 0 ? p->done / el : 0.0, p->unit);
    }
    p->drawn = 0;
    fflush(stderr);
}

/* ---- signals and temporary files ---------------------------------------------------------------
 *
 * The handler only sets flags (async-signal-safe); a watcher thread polls them every 50 ms and
 * does the rest with the lock held: it cancels the registered session (again on every poll, since
 * a call that starts clears the session's flag), and after a second signal it removes every
 * registered temporary and exits. The lock also covers the creation and the renaming of each
 * temporary, so that the forced exit never sees one half made or half renamed. */
#define CLI_TEMPS 8

static volatile sig_atomic_t interrupted, forced;
static pthread_mutex_t temp_mu;
static pthread_once_t temp_once = PTHREAD_ONCE_INIT;
static vae_session *watched;
static char temps[CLI_TEMPS][PATH_MAX];
static int watcher_started;

static void on_interrupt(int broken_pipe) {
    /* a closed pipe raises SIGPIPE at every later write to it: only a repeated Ctrl-C, SIGTERM
     * or SIGHUP forces the exit */
    if (interrupted && !broken_pipe) forced = 1;
    interrupted = 1;
}

static void temp_init(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE); /* cli_temp_hold around the rest */
    pthread_mutex_init(&temp_mu, &a);
    pthread_mutexattr_destroy(&a);
}

static void lock(void) {
    pthread_once(&temp_once, temp_init);
    pthread_mutex_lock(&temp_mu);
}

static void unlock(void) {
    pthread_mutex_unlock(&temp_mu);
}

/* A file, or a folder with the files in it (a PNG sequence's frames: the main thread may add one
 * while this runs, which the next pass removes). */
static void remove_temp(const char *path) {
    for (int pass = 0; pass < 100; pass++) {
        if (unlink(path) == 0 || errno == ENOENT) return;
        DIR *d = opendir(path);
        if (!d) return;
        struct dirent *e;
        char file[PATH_MAX + 256];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(file, sizeof file, "%s/%s", path, e->d_name) < (int)sizeof file)
                unlink(file);
        closedir(d);
        if (rmdir(path) == 0 || errno == ENOENT) return;
    }
}

static void *watch(void *arg) {
    (void)arg;
    for (;;) {
        vae_plat_sleep_ms(50);
        if (!interrupted) continue;
        lock();
        if (watched) vae_session_cancel(watched);
        if (forced) {
            for (int i = 0; i < CLI_TEMPS; i++)
                if (temps[i][0]) remove_temp(temps[i]);
            _exit(CLI_EINTERRUPTED);
        }
        unlock();
    }
    return NULL;
}

void cli_catch_interrupts(void) {
    lock();
    if (!watcher_started) {
        /* the watcher takes no signal: the handler runs on the threads that compute, whose
         * library and stdio calls go on (SA_RESTART); the watcher stops them */
        if (vae_plat_thread_detached(watch, NULL) == 0) watcher_started = 1;
        vae_plat_catch_interrupts(on_interrupt);
    }
    unlock();
}

int cli_interrupted(void) {
    return interrupted != 0;
}

void cli_watch_session(vae_session *s) {
    lock();
    watched = s;
    if (s && interrupted) vae_session_cancel(s);
    unlock();
}

void cli_temp_hold(void) {
    lock();
}

void cli_temp_release(void) {
    unlock();
}

int cli_temp_register(const char *path) {
    if (!path) return -1;
    lock();
    int slot = -1;
    for (int i = 0; i < CLI_TEMPS && slot < 0; i++)
        if (!temps[i][0] && strlen(path) < sizeof temps[i]) {
            strcpy(temps[i], path);
            slot = i;
        }
    unlock();
    return slot;
}

void cli_temp_forget(int slot) {
    if (slot < 0 || slot >= CLI_TEMPS) return;
    lock();
    temps[slot][0] = 0;
    unlock();
}

FILE *cli_temp_open(const char *path, char *tmp, size_t n, int *slot) {
    static atomic_uint counter;
    unsigned x = vae_plat_seed();
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    const char *ext = dot && (!slash || dot > slash + 1) ? dot : "";
    const int stem = (int)(strlen(path) - strlen(ext));
    int fd = -1;
    *slot = -1;
    lock();
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        x = x * 1103515245u + 12345u + atomic_fetch_add(&counter, 1);
        if (snprintf(tmp, n, "%.*s.tmp.%08x%s", stem, path, x, ext) >= (int)n) {
            errno = ENAMETOOLONG;
            break;
        }
        /* O_EXCL: never through a planted link, never another writer's file */
        fd = vae_plat_open_new(tmp);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (f) {
        *slot = cli_temp_register(tmp);
    } else if (fd >= 0) {
        const int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
    }
    unlock();
    return f;
}

int cli_temp_commit(const char *tmp, const char *path, int slot) {
    lock();
    int rc = path ? vae_plat_rename(tmp, path) : -1, e = errno;
    if (rc != 0) unlink(tmp);
    cli_temp_forget(slot);
    unlock();
    errno = e;
    return rc;
}
