/* platform.h -- the operating system's services that the rest of vae.c uses, in one place: POSIX
 * (platform_posix.c) or Windows (platform_win32.c, built with mingw-w64). The ground floor: it
 * includes nothing of the project, and every layer above may include it.
 *
 * Threads stay pthreads on both: on Windows the posix flavour of mingw-w64 ships winpthreads,
 * so <pthread.h> comes from here and the mutexes, condition variables and threads of the core
 * are the same code. What differs (a condition variable's timed wait, a thread that takes no
 * signal) is a function below. */
#ifndef VAE_PLATFORM_H
#define VAE_PLATFORM_H

#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* open() flags: binary files on Windows (its default is text mode, which rewrites "\n"), no FIFOs
 * there to wait on, and handles that children do not inherit. */
#ifdef _WIN32
#define VAE_O_BINARY O_BINARY
#define VAE_O_CLOEXEC O_NOINHERIT
#define VAE_O_NONBLOCK 0
#else
#define VAE_O_BINARY 0
#define VAE_O_CLOEXEC O_CLOEXEC
#define VAE_O_NONBLOCK O_NONBLOCK
#endif

/* ---- time, processes, the machine ---- */

/* Seconds on a monotonic clock. */
double vae_plat_monotonic(void);
/* A seed that differs between processes and calls (the process id mixed with the wall clock's
 * nanoseconds): unique temporary names. */
unsigned vae_plat_seed(void);
long vae_plat_pid(void);
void vae_plat_sleep_ms(int ms);
/* Logical processors online (at least 1). */
int vae_plat_cpu_count(void);
/* Physical memory, and what is free now (bytes; 0 where unknown). */
int64_t vae_plat_mem_total(void);
int64_t vae_plat_mem_free(void);
/* The process's peak resident memory in KiB (0 where unknown). */
long vae_plat_max_rss_kb(void);
/* 1 when stderr is a terminal. */
int vae_plat_stderr_is_tty(void);

/* The process's environment variable name set to value (NULL: removed): 0, or -1 with errno. */
int vae_plat_setenv(const char *name, const char *value);

/* ---- files ---- */

/* Creates path for writing, failing where it exists (O_EXCL: never through a planted link nor
 * into another writer's file), binary, with the usual permissions: the descriptor, or -1 with
 * errno. */
int vae_plat_open_new(const char *path);
/* Clears VAE_O_NONBLOCK on an open descriptor: 0, or -1 with errno. */
int vae_plat_set_blocking(int fd);
/* rename() that replaces an existing `to` (Windows' rename refuses to): 0, or -1 with errno. */
int vae_plat_rename(const char *from, const char *to);
/* One folder (mode 0755 where there are modes): 0, or -1 with errno. */
int vae_plat_mkdir(const char *path);
/* The folder for large temporaries: TMPDIR (where users put their scratch space; Windows: then
 * TEMP, TMP), else /tmp. */
const char *vae_plat_temp_dir(void);
/* A new read/write binary file in dir that is gone once closed (POSIX: unlinked at once;
 * Windows: delete-on-close): the descriptor, or -1 with errno. */
int vae_plat_temp_anon(const char *dir);

/* pread/pwrite: n bytes at byte `at` of the file, the file position left alone (several threads
 * at once on one descriptor): the bytes moved, or -1 with errno. */
int64_t vae_plat_pread(int fd, void *buf, size_t n, int64_t at);
int64_t vae_plat_pwrite(int fd, const void *buf, size_t n, int64_t at);
/* The file's size set to `size` (a sparse extension where the file system has them): 0, or -1. */
int vae_plat_truncate(int fd, int64_t size);

/* The first size bytes of an open file mapped read-only (the mapping outlives fd): the address,
 * or NULL with errno. */
void *vae_plat_map_read(int fd, size_t size);
void vae_plat_unmap(void *p, size_t size);
/* Anonymous page-aligned read/write memory straight from the system (not malloc's heap; Linux:
 * advised to transparent huge pages, without which the pages are 4 KiB, still fine): the
 * address, or NULL. */
void *vae_plat_pages_alloc(size_t size);
void vae_plat_pages_free(void *p, size_t size);

/* A whole-file advisory lock between processes (and between descriptors of one process), tried
 * without waiting: 0 locked, 1 another holder has it, -1 this file system has no locks (errno). */
int vae_plat_lock_try(int fd, int exclusive);
void vae_plat_unlock(int fd);

/* ---- libraries loaded at run time ---- */

/* NULL where it cannot be loaded; vae_plat_lib_error says why (a static buffer). */
void *vae_plat_lib_open(const char *name);
void *vae_plat_lib_sym(void *lib, const char *name);
const char *vae_plat_lib_error(void);

/* ---- threads ---- */

/* A condition variable whose vae_plat_cond_wait_for measures on the monotonic clock. */
int vae_plat_cond_init_timed(pthread_cond_t *cv);
/* Waits on cv (mu held) for at most `seconds`. */
void vae_plat_cond_wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds);
/* Starts fn(arg) on a detached thread that takes no asynchronous signal (POSIX: the handlers then
 * run on the threads that compute): 0, or -1. */
int vae_plat_thread_detached(void *(*fn)(void *), void *arg);

/* ---- interrupts ---- */

/* on_interrupt(broken_pipe) for each request to stop: POSIX SIGINT, SIGTERM, SIGHUP (0) and
 * SIGPIPE (1), with SA_RESTART; Windows Ctrl-C, Ctrl-Break and the console closing (0). It runs
 * in a signal handler (Windows: on a thread of its own): only async-signal-safe work. */
void vae_plat_catch_interrupts(void (*on_interrupt)(int broken_pipe));

#endif
