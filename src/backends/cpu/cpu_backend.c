/* cpu_backend.c -- the CPU backend: creation, buffers, per-op preparation. */
#define _DEFAULT_SOURCE
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "platform/platform.h" /* pthreads, the machine */

#if defined(VAE_HAVE_BLAS) && VAE_HAVE_BLAS
#include <cblas.h>
#endif

/* ---- aligned allocation ---------------------------------------------------------------------
 * Layout: [padding][offset back to the malloc'd block][size asked for] | user block (64-aligned).
 */
enum { CPU_ALIGN = 64, CPU_HEADER = 2 * sizeof(size_t) };

void *cpu_aligned_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - CPU_ALIGN - CPU_HEADER) return NULL;
    unsigned char *raw = vae_malloc(bytes + CPU_ALIGN + CPU_HEADER);
    if (!raw) return NULL;
    uintptr_t u = ((uintptr_t)raw + CPU_HEADER + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
    unsigned char *p = (unsigned char *)u;
    size_t hdr[2] = {(size_t)(p - raw), bytes};
    memcpy(p - CPU_HEADER, hdr, sizeof hdr);
    return p;
}

static void cpu_aligned_header(const void *p, size_t hdr[2]) {
    memcpy(hdr, (const unsigned char *)p - CPU_HEADER, 2 * sizeof(size_t));
}

size_t cpu_aligned_size(const void *p) {
    size_t hdr[2];
    if (!p) return 0;
    cpu_aligned_header(p, hdr);
    return hdr[1];
}

void cpu_aligned_free(void *p) {
    size_t hdr[2];
    if (!p) return;
    cpu_aligned_header(p, hdr);
    vae_free((unsigned char *)p - hdr[0]);
}

float *cpu_scratch(cpu_backend *cb, size_t bytes, const char *who) {
    if (bytes <= cb->scratch_bytes) return cb->scratch;
    cpu_aligned_free(cb->scratch);
    cb->scratch = NULL;
    cb->scratch_bytes = 0;
    float *s = cpu_aligned_alloc(bytes);
    if (!s) {
        vae_fail(VAE_ENOMEM, "%s: cannot allocate %zu bytes of CPU scratch", who, bytes);
        return NULL;
    }
    cb->scratch = s;
    cb->scratch_bytes = bytes;
    return s;
}

/* ---- activations ---------------------------------------------------------------------------- */
void cpu_act_row(vae_act act, float s, float *x, int64_t n) {
    switch (act) {
    case VAE_ACT_NONE: break;
    case VAE_ACT_SILU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            x[i] = cpu_silu(x[i]);
        break;
    case VAE_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case VAE_ACT_TANH_SCALE: {
        float inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++)
            x[i] = tanhf(x[i] * inv) * s;
        break;
    }
    case VAE_ACT_CLAMP01:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] < 0.0f ? 0.0f : x[i] > 1.0f ? 1.0f : x[i];
        break;
    }
}

/* ---- vtbl: buffers -------------------------------------------------------------------------- */
static void cpu_destroy(vae_backend *be) {
    if (!be) return;
    cpu_backend *cb = cpu_be(be);
    cpu_aligned_free(cb->scratch);
    for (int i = 0; i < CPU_POOL_SLOTS; i++) cpu_aligned_free(cb->pool[i]);
    vae_free(cb);
}

/* An exact-size block from the pool, or NULL. */
static void *pool_take(cpu_backend *cb, size_t bytes) {
    for (int i = 0; i < CPU_POOL_SLOTS; i++) {
        if (cb->pool[i] && cpu_aligned_size(cb->pool[i]) == bytes) {
            void *p = cb->pool[i];
            cb->pool[i] = NULL;
            cb->pool_bytes -= bytes;
            return p;
        }
    }
    return NULL;
}

static void pool_put(cpu_backend *cb, void *p) {
    size_t bytes = cpu_aligned_size(p);
    for (int i = 0; i < CPU_POOL_SLOTS && cb->pool_bytes + bytes <= CPU_POOL_MAX_BYTES; i++) {
        if (!cb->pool[i]) {
            cb->pool[i] = p;
            cb->pool_bytes += bytes;
            return;
        }
    }
    cpu_aligned_free(p);
}

static void *cpu_alloc(vae_backend *be, size_t bytes) {
    if (be->limit > 0 && be->bytes_in_use + (int64_t)bytes > be->limit) {
        be->refused = 1;
        vae_fail(VAE_ENOMEM, "cpu: %zu more bytes would exceed the memory budget of %lld bytes "
                             "(%lld in use)", bytes, (long long)be->limit, (long long)be->bytes_in_use);
        return NULL;
    }
    void *p = pool_take(cpu_be(be), bytes);
    if (!p) p = cpu_aligned_alloc(bytes);
    if (!p) return NULL;
    be->bytes_in_use += (int64_t)bytes;
    if (be->bytes_in_use > be->bytes_peak) be->bytes_peak = be->bytes_in_use;
    return p;
}

static void cpu_release(vae_backend *be, void *p) {
    if (!p) return;
    be->bytes_in_use -= (int64_t)cpu_aligned_size(p);
    pool_put(cpu_be(be), p);
}

static int cpu_upload(vae_backend *be, void *dst, const float *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
    return VAE_OK;
}

static int cpu_download(vae_backend *be, float *dst, const void *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
    return VAE_OK;
}

static int cpu_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
    return VAE_OK;
}

static int cpu_copy2d(vae_backend *be, void *dst, size_t dst_pitch, const void *src,
                      size_t src_pitch, size_t row_bytes, size_t rows) {
    for (size_t r = 0; r < rows; r++)
        memmove((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
    return VAE_OK;
}

static void *cpu_host_alloc(vae_backend *be, size_t bytes) {
    (void)be;
    return vae_malloc(bytes ? bytes : 1);
}

static void cpu_host_free(vae_backend *be, void *p) {
    (void)be;
    vae_free(p);
}

static int cpu_zero(vae_backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
    return VAE_OK;
}

static int cpu_zero2d(vae_backend *be, void *dst, size_t dst_pitch, size_t row_bytes,
                      size_t rows) {
    for (size_t r = 0; r < rows && row_bytes; r++)
        memset((char *)dst + r * dst_pitch, 0, row_bytes);
    return VAE_OK;
}

static int cpu_sync(vae_backend *be) {
    return VAE_OK;
}

/* Available RAM (/proc/meminfo MemAvailable; else free pages): the CPU backend's weights are the
 * model's float32 arrays, already in memory, so it reserves nothing more. */
static int cpu_mem_info(vae_backend *be, const vae_program *p, int64_t *avail, int64_t *reserve,
                        int64_t *scratch) {
    (void)be, (void)p;
    *reserve = *scratch = 0;
    *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) *avail = (int64_t)kb * 1024;
    if (f) fclose(f);
    if (*avail == 0) *avail = vae_plat_mem_free();
    return VAE_OK;
}

/* ---- vtbl: per-op state --------------------------------------------------------------------- */
static int cpu_prepare(vae_backend *be, const vae_op *op, void **state) {
    *state = NULL;
    if (op->kind == VAE_OP_CONV) return cpu_conv_prepare(be, op, state);
    return VAE_OK;
}

static void cpu_unprepare(vae_backend *be, const vae_op *op, void *state) {
    if (state && op->kind == VAE_OP_CONV) cpu_conv_unprepare(be, op, state);
}

static const vae_backend_vtbl cpu_vtbl = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .copy2d = cpu_copy2d,
    .zero = cpu_zero,
    .zero2d = cpu_zero2d,
    .sync = cpu_sync,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .prepare = cpu_prepare,
    .unprepare = cpu_unprepare,
    .conv = cpu_conv,
    .conv_norm = 1,
    .conv_act = 1,
    .norm = cpu_norm,
    .norm_rows = cpu_norm_rows,
    .norm_stats = cpu_norm_stats,
    .norm_apply = cpu_norm_apply,
    .eltwise = cpu_eltwise,
    .resample = cpu_resample,
    .attention = cpu_attention,
    .mem_info = cpu_mem_info,
    .fp8_conv = cpu_conv_fp8,
};

/* The most threads a CPU session runs: 8 a core (more only queue for the cores) and 1024 at
 * most, checked before OpenMP sees the count, since its runtime ends the process when it cannot
 * start a thread. */
static int max_threads(void) {
    const long cores = vae_plat_cpu_count();
    return cores < 1 ? 8 : cores > 128 ? 1024 : (int)cores * 8;
}

static void *idle_thread(void *arg) {
    return arg;
}

/* Starts and joins n-1 threads, as OpenMP's first team of n will: a process that cannot (a
 * thread limit, no memory for the stacks) gets an error here instead of OpenMP's exit. Once a
 * count has started, smaller ones are not tried again. */
static int threads_can_start(int n) {
    static atomic_int proven = 1;
    if (n <= atomic_load(&proven)) return VAE_OK;
    pthread_t t[1024];
    int started = 0;
    while (started < n - 1 && started < 1024 &&
           pthread_create(&t[started], NULL, idle_thread, NULL) == 0)
        started++;
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    if (started >= n - 1 && n > atomic_load(&proven)) atomic_store(&proven, n);
    return started >= n - 1 ? VAE_OK
                            : vae_fail(VAE_ENOMEM, "threads %d: this process could start only %d "
                                       "more threads", n, started);
}

int vae_cpu_backend_create(vae_backend **out, vae_dtype dtype, int threads) {
    if (!out) return vae_fail(VAE_EINVAL, "cpu backend: NULL output pointer");
    *out = NULL;
    if (dtype != VAE_DTYPE_F32 && dtype != VAE_DTYPE_FP8)
        return vae_fail(VAE_EUNSUPPORTED,
                        "cpu backend: dtype %s is not supported (fp32, or fp8 emulated)",
                        vae_dtype_name(dtype));
    const int most = max_threads(), all = omp_get_max_threads(); /* all: OMP_NUM_THREADS or cores */
    if (threads < 0 || threads > most)
        return vae_fail(VAE_EINVAL, "threads %d: expected 0 (all cores) to %d (8 a core)", threads,
                        most);
    if (!threads) threads = all < 1 ? 1 : all > most ? most : all;
    int rc = threads_can_start(threads);
    if (rc) return rc;
    cpu_backend *cb = vae_calloc(1, sizeof *cb);
    if (!cb) return vae_fail(VAE_ENOMEM, "cpu backend: out of memory");
    cb->base.v = &cpu_vtbl;
    cb->base.dtype = VAE_DTYPE_F32;
    cb->base.elem_size = sizeof(float);
    cb->base.host_memory = 1;
    cb->fp8 = dtype == VAE_DTYPE_FP8;
    cb->threads = threads;
    cb->scratch_limit = CPU_SCRATCH_LIMIT;
#if defined(VAE_HAVE_BLAS) && VAE_HAVE_BLAS && defined(OPENBLAS_VERSION)
    /* cpu_sgemm splits GEMMs over OpenMP threads itself; OpenBLAS's own pthread pool next to
     * OpenMP's oversubscribes the cores (both spin-wait). This setting is process-wide. */
    openblas_set_num_threads(1);
#endif
    *out = &cb->base;
    return VAE_OK;
}
