/* platform_posix.c -- platform.h on Linux and other POSIX systems. */
#ifndef _WIN32
#define _GNU_SOURCE /* MAP_ANONYMOUS, flock */
#include "platform.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double vae_plat_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

unsigned vae_plat_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
}

long vae_plat_pid(void) {
    return (long)getpid();
}

void vae_plat_sleep_ms(int ms) {
    const struct timespec nap = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
    nanosleep(&nap, NULL);
}

int vae_plat_cpu_count(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
}

int64_t vae_plat_mem_total(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

int64_t vae_plat_mem_free(void) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

long vae_plat_max_rss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

int vae_plat_stderr_is_tty(void) {
    return isatty(STDERR_FILENO);
}

int vae_plat_setenv(const char *name, const char *value) {
    return value ? setenv(name, value, 1) : unsetenv(name);
}

int vae_plat_open_new(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
}

int vae_plat_set_blocking(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ? -1 : 0;
}

int vae_plat_rename(const char *from, const char *to) {
    return rename(from, to);
}

int vae_plat_mkdir(const char *path) {
    return mkdir(path, 0755);
}

const char *vae_plat_temp_dir(void) {
    /* tmpfile() ignores TMPDIR (it uses P_tmpdir) */
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

int vae_plat_temp_anon(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/vae-spill-XXXXXX", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const int fd = mkstemp(path); /* O_EXCL, mode 0600 */
    if (fd >= 0) unlink(path);
    return fd;
}

int64_t vae_plat_pread(int fd, void *buf, size_t n, int64_t at) {
    return pread(fd, buf, n, (off_t)at);
}

int64_t vae_plat_pwrite(int fd, const void *buf, size_t n, int64_t at) {
    return pwrite(fd, buf, n, (off_t)at);
}

int vae_plat_truncate(int fd, int64_t size) {
    return ftruncate(fd, (off_t)size);
}

void *vae_plat_map_read(int fd, size_t size) {
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

void vae_plat_unmap(void *p, size_t size) {
    if (p) munmap(p, size);
}

void *vae_plat_pages_alloc(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

void vae_plat_pages_free(void *p, size_t size) {
    if (p) munmap(p, size);
}

int vae_plat_lock_try(int fd, int exclusive) {
    for (;;) {
        if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) return 0;
        if (errno != EINTR) return errno == EWOULDBLOCK ? 1 : -1;
    }
}

void vae_plat_unlock(int fd) {
    flock(fd, LOCK_UN);
}

void *vae_plat_lib_open(const char *name) {
    return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

void *vae_plat_lib_sym(void *lib, const char *name) {
    return dlsym(lib, name);
}

const char *vae_plat_lib_error(void) {
    const char *e = dlerror();
    return e ? e : "unknown error";
}

int vae_plat_cond_init_timed(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    const int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

void vae_plat_cond_wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    const double until = vae_plat_monotonic() + seconds;
    struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

int vae_plat_thread_detached(void *(*fn)(void *), void *arg) {
    /* started with every signal blocked, which it inherits */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    const int rc = pthread_create(&th, NULL, fn, arg);
    if (rc == 0) pthread_detach(th);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? 0 : -1;
}

static void (*interrupt_fn)(int broken_pipe);

static void on_signal(int sig) {
    interrupt_fn(sig == SIGPIPE);
}

void vae_plat_catch_interrupts(void (*on_interrupt)(int broken_pipe)) {
    interrupt_fn = on_interrupt;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* the library's and stdio's calls go on; the caller stops them */
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], &sa, NULL);
}

#endif
