/* platform_win32.c -- platform.h on Windows (mingw-w64; threads through its winpthreads). */
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#define PSAPI_VERSION 2 /* GetProcessMemoryInfo from kernel32 (K32...), no psapi.dll */
#include "platform.h"

#include <direct.h>
#include <errno.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <windows.h>
#include <psapi.h>

/* errno for the Windows error of the last failed call (the few that callers tell apart). */
static void set_errno_from_win32(void) {
    switch (GetLastError()) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND: errno = ENOENT; break;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS: errno = EEXIST; break;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT: errno = ENOMEM; break;
    case ERROR_DISK_FULL: errno = ENOSPC; break;
    case ERROR_FILENAME_EXCED_RANGE: errno = ENAMETOOLONG; break;
    default: errno = EACCES;
    }
}

double vae_plat_monotonic(void) {
    static LARGE_INTEGER freq; /* the same for the system's life; a race writes the same value */
    LARGE_INTEGER now;
    if (!freq.QuadPart) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&now);
    return (double)now.QuadPart / (double)freq.QuadPart;
}

unsigned vae_plat_seed(void) {
    LARGE_INTEGER now;
    QueryPerformanceCounter(&now);
    return (unsigned)GetCurrentProcessId() * 2654435761u ^ (unsigned)now.QuadPart;
}

long vae_plat_pid(void) {
    return (long)GetCurrentProcessId();
}

void vae_plat_sleep_ms(int ms) {
    Sleep(ms > 0 ? (DWORD)ms : 0);
}

int vae_plat_cpu_count(void) {
    const DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n < 1 ? 1 : (int)n;
}

int64_t vae_plat_mem_total(void) {
    MEMORYSTATUSEX m = {.dwLength = sizeof m};
    return GlobalMemoryStatusEx(&m) ? (int64_t)m.ullTotalPhys : 0;
}

int64_t vae_plat_mem_free(void) {
    MEMORYSTATUSEX m = {.dwLength = sizeof m};
    return GlobalMemoryStatusEx(&m) ? (int64_t)m.ullAvailPhys : 0;
}

long vae_plat_max_rss_kb(void) {
    PROCESS_MEMORY_COUNTERS pmc = {.cb = sizeof pmc};
    return GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc)
               ? (long)(pmc.PeakWorkingSetSize / 1024)
               : 0;
}

int vae_plat_stderr_is_tty(void) {
    return _isatty(_fileno(stderr));
}

int vae_plat_setenv(const char *name, const char *value) {
    /* the C runtime's copy, which getenv reads ("" removes the variable) */
    return _putenv_s(name, value ? value : "") == 0 ? 0 : -1;
}

int vae_plat_open_new(const char *path) {
    return _open(path, _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY | _O_NOINHERIT,
                 _S_IREAD | _S_IWRITE);
}

int vae_plat_set_blocking(int fd) {
    (void)fd; /* opened blocking: VAE_O_NONBLOCK is 0 here */
    return 0;
}

int vae_plat_rename(const char *from, const char *to) {
    if (MoveFileExA(from, to, MOVEFILE_REPLACE_EXISTING | MOVEFILE_COPY_ALLOWED)) return 0;
    set_errno_from_win32();
    return -1;
}

int vae_plat_mkdir(const char *path) {
    return _mkdir(path);
}

const char *vae_plat_temp_dir(void) {
    const char *names[] = {"TMPDIR", "TEMP", "TMP"};
    for (int i = 0; i < 3; i++) {
        const char *dir = getenv(names[i]);
        if (dir && *dir) return dir;
    }
    return "/tmp";
}

int vae_plat_temp_anon(const char *dir) {
    unsigned x = vae_plat_seed();
    for (int tries = 0; tries < 100; tries++) {
        char path[4096];
        x = x * 1103515245u + 12345u;
        if (snprintf(path, sizeof path, "%s/vae-spill-%08x", dir, x) >= (int)sizeof path) {
            errno = ENAMETOOLONG;
            return -1;
        }
        /* CREATE_NEW: O_EXCL's guarantee; delete-on-close: the unlink-after-open of POSIX */
        HANDLE h = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, CREATE_NEW,
                               FILE_ATTRIBUTE_TEMPORARY | FILE_FLAG_DELETE_ON_CLOSE, NULL);
        if (h == INVALID_HANDLE_VALUE) {
            if (GetLastError() == ERROR_FILE_EXISTS) continue;
            set_errno_from_win32();
            return -1;
        }
        const int fd = _open_osfhandle((intptr_t)h, _O_RDWR | _O_BINARY);
        if (fd < 0) CloseHandle(h);
        return fd;
    }
    errno = EEXIST;
    return -1;
}

/* ReadFile/WriteFile at an offset (OVERLAPPED on a synchronous handle), at most 1 GiB a call */
static int64_t positional_io(int fd, void *buf, size_t n, int64_t at, int write) {
    const HANDLE h = (HANDLE)_get_osfhandle(fd);
    OVERLAPPED ov = {0};
    ov.Offset = (DWORD)(uint64_t)at;
    ov.OffsetHigh = (DWORD)((uint64_t)at >> 32);
    const DWORD want = n > (1u << 30) ? 1u << 30 : (DWORD)n;
    DWORD done = 0;
    const BOOL ok = h == INVALID_HANDLE_VALUE ? FALSE
                    : write ? WriteFile(h, buf, want, &done, &ov)
                            : ReadFile(h, buf, want, &done, &ov);
    if (ok) return (int64_t)done;
    if (!write && GetLastError() == ERROR_HANDLE_EOF) return 0;
    set_errno_from_win32();
    return -1;
}

int64_t vae_plat_pread(int fd, void *buf, size_t n, int64_t at) {
    return positional_io(fd, buf, n, at, 0);
}

int64_t vae_plat_pwrite(int fd, const void *buf, size_t n, int64_t at) {
    return positional_io(fd, (void *)buf, n, at, 1);
}

int vae_plat_truncate(int fd, int64_t size) {
    return _chsize_s(fd, size) == 0 ? 0 : -1;
}

void *vae_plat_map_read(int fd, size_t size) {
    const HANDLE file = (HANDLE)_get_osfhandle(fd);
    const uint64_t n = size;
    HANDLE m = file == INVALID_HANDLE_VALUE
                   ? NULL
                   : CreateFileMappingA(file, NULL, PAGE_READONLY, (DWORD)(n >> 32), (DWORD)n, NULL);
    if (!m) {
        set_errno_from_win32();
        return NULL;
    }
    void *p = MapViewOfFile(m, FILE_MAP_READ, 0, 0, size);
    if (!p) set_errno_from_win32();
    CloseHandle(m); /* the view keeps the mapping */
    return p;
}

void vae_plat_unmap(void *p, size_t size) {
    (void)size;
    if (p) UnmapViewOfFile(p);
}

void *vae_plat_pages_alloc(size_t size) {
    return VirtualAlloc(NULL, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void vae_plat_pages_free(void *p, size_t size) {
    (void)size;
    if (p) VirtualFree(p, 0, MEM_RELEASE);
}

int vae_plat_lock_try(int fd, int exclusive) {
    const HANDLE h = (HANDLE)_get_osfhandle(fd);
    OVERLAPPED ov = {0};
    const DWORD how = (exclusive ? LOCKFILE_EXCLUSIVE_LOCK : 0) | LOCKFILE_FAIL_IMMEDIATELY;
    if (h != INVALID_HANDLE_VALUE && LockFileEx(h, how, 0, MAXDWORD, MAXDWORD, &ov)) return 0;
    const DWORD e = GetLastError();
    if (e == ERROR_LOCK_VIOLATION || e == ERROR_IO_PENDING) return 1;
    errno = ENOLCK;
    return -1;
}

void vae_plat_unlock(int fd) {
    const HANDLE h = (HANDLE)_get_osfhandle(fd);
    OVERLAPPED ov = {0};
    if (h != INVALID_HANDLE_VALUE) UnlockFileEx(h, 0, MAXDWORD, MAXDWORD, &ov);
}

static char lib_error[256];

void *vae_plat_lib_open(const char *name) {
    HMODULE m = LoadLibraryA(name);
    if (!m)
        snprintf(lib_error, sizeof lib_error, "%s: cannot load (Windows error %lu)", name,
                 (unsigned long)GetLastError());
    return (void *)m;
}

void *vae_plat_lib_sym(void *lib, const char *name) {
    FARPROC f = GetProcAddress((HMODULE)lib, name);
    void *p;
    memcpy(&p, &f, sizeof p); /* a function's address as data, as dlsym gives it */
    return p;
}

const char *vae_plat_lib_error(void) {
    return lib_error[0] ? lib_error : "unknown error";
}

int vae_plat_cond_init_timed(pthread_cond_t *cv) {
    return pthread_cond_init(cv, NULL); /* winpthreads' relative wait below needs no clock */
}

void vae_plat_cond_wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    if (seconds < 0) seconds = 0;
    const struct timespec rel = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    pthread_cond_timedwait_relative_np(cv, mu, &rel);
}

int vae_plat_thread_detached(void *(*fn)(void *), void *arg) {
    pthread_t th; /* (no asynchronous signals here: console events come on a thread of their own) */
    if (pthread_create(&th, NULL, fn, arg) != 0) return -1;
    pthread_detach(th);
    return 0;
}

static void (*interrupt_fn)(int broken_pipe);

static BOOL WINAPI on_console_event(DWORD event) {
    if (event != CTRL_C_EVENT && event != CTRL_BREAK_EVENT && event != CTRL_CLOSE_EVENT)
        return FALSE;
    interrupt_fn(0);
    return TRUE;
}

void vae_plat_catch_interrupts(void (*on_interrupt)(int broken_pipe)) {
    interrupt_fn = on_interrupt;
    SetConsoleCtrlHandler(on_console_event, TRUE);
}

#endif
