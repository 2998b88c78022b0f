/* settings.c -- the switch table: defaults, environment fill-ins, API parameters (settings.h). */
#define _POSIX_C_SOURCE 200809L
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* One row per switch, in VAE_PARAM_* order. Values are integers; `words` lists accepted names
 * for the values 0, 1, 2, ... of a switch that the environment spells as words. */
typedef struct setting {
    vae_param param;
    const char *env;
    size_t offset;
    int is_u64;
    int64_t def, lo, hi;
    const char *words[3];
} setting;

#define OFF(f) offsetof(vae_settings, f)
/* clang-format off */
static const setting table[] = {
    {VAE_PARAM_EXEC_CONTIG, "VAE_EXEC_CONTIG", OFF(exec_contig), 0, 1, 0, 1, {0}},
    {VAE_PARAM_EXEC_GRAPH, "VAE_EXEC_GRAPH", OFF(exec_graph), 0, 1, 0, 2, {0}},
    {VAE_PARAM_EXEC_CHECK, "VAE_EXEC_CHECK", OFF(exec_check), 0, 0, 0, 1, {0}},
    {VAE_PARAM_EXEC_FRAMES, "VAE_EXEC_FRAMES", OFF(exec_frames), 0, 1, 0, 2, {0}},
    {VAE_PARAM_EXEC_HOST_MB, "VAE_EXEC_HOST_MB", OFF(exec_host_mb), 0, 2048, 0, 1 << 24, {0}},
    {VAE_PARAM_CUDA_SCRATCH_MB, "VAE_CUDA_SCRATCH_MB", OFF(cuda_scratch_mb), 0, 256, 1, 1 << 20, {0}},
    {VAE_PARAM_CUDA_PROFILE, "VAE_CUDA_PROFILE", OFF(cuda_profile), 0, 0, 0, 2, {0}},
    {VAE_PARAM_CUDA_CONV, "VAE_CUDA_CONV", OFF(cuda_conv), 0, 0, 0, 2, {"auto", "gemm", "cudnn"}},
    {VAE_PARAM_CUDA_CONV3D, "VAE_CUDA_CONV3D", OFF(cuda_conv3d), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_FUSE, "VAE_CUDA_FUSE", OFF(cuda_fuse), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_POISON, "VAE_CUDA_POISON", OFF(cuda_poison), 0, 0, 0, 1, {0}},
    {VAE_PARAM_CUDA_TUNE, "VAE_CUDA_TUNE", OFF(cuda_tune), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_TUNE_SEED, NULL, OFF(cuda_tune_seed), 1, 0, 0, INT64_MAX, {0}},
    {VAE_PARAM_CUDA_PW_GEMM, "VAE_CUDA_PW", OFF(cuda_pw_gemm), 0, 0, 0, 1, {"dnn", "gemm"}},
    {VAE_PARAM_CUDA_PHASE, "VAE_CUDA_PHASE", OFF(cuda_phase), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_PAD3D, "VAE_CUDA_PAD3D", OFF(cuda_pad3d), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_CPAD, "VAE_CUDA_CPAD", OFF(cuda_cpad), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_KPAD, "VAE_CUDA_KPAD", OFF(cuda_kpad), 0, 1, 0, 1, {0}},
    {VAE_PARAM_PLAN_CUT, "VAE_PLAN_CUT", OFF(plan_cut), 0, -1, -1, 15, {0}},
    {VAE_PARAM_EXEC_STORE_HOST, "VAE_EXEC_STORE_HOST", OFF(exec_store_host), 0, 0, 0, 1, {0}},
    {VAE_PARAM_PLAN_SCRATCH_MIN, "VAE_PLAN_SCRATCH_MIN", OFF(plan_scratch_min), 0, 0, -1, 1, {0}},
    {VAE_PARAM_CUDA_NARROW, "VAE_CUDA_NARROW", OFF(cuda_narrow), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_IGEMM, "VAE_CUDA_IGEMM", OFF(cuda_igemm), 0, 1, 0, 2, {"off", "tuned", "always"}},
    {VAE_PARAM_CUDA_DNN_GAIN_US, "VAE_CUDA_DNN_GAIN_US", OFF(cuda_dnn_gain_us), 0, 100, 0, 1000000, {0}},
    {VAE_PARAM_PLAN_STRIPS, "VAE_PLAN_STRIPS", OFF(plan_strips), 0, 0, -1, 96, {0}},
    {VAE_PARAM_CUDA_BUS, "VAE_CUDA_BUS", OFF(cuda_bus), 0, 1, 0, 2, {"off", "one", "two"}},
    {VAE_PARAM_CUDA_ATT, "VAE_CUDA_ATT", OFF(cuda_att), 0, 1, 0, 1, {"fused", "gemm"}},
    {VAE_PARAM_PLAN_BANDS, "VAE_PLAN_BANDS", OFF(plan_bands), 0, 0, -1, 1, {0}},
    {VAE_PARAM_COMM, "VAE_COMM", OFF(comm), 0, 1, 0, 1, {"threads", "nccl"}},
    {VAE_PARAM_EXEC_STRIP_NORM, "VAE_EXEC_STRIP_NORM", OFF(exec_strip_norm), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_WARM, "VAE_CUDA_WARM", OFF(cuda_warm), 0, 2, 0, 2, {0}},
    {VAE_PARAM_FP8_CONVS, "VAE_FP8_CONVS", OFF(fp8_convs), 0, -1, -1, 1 << 20, {"all"}},
    {VAE_PARAM_EXEC_CHUNKS, "VAE_EXEC_CHUNKS", OFF(exec_chunks), 0, 4, 1, 64, {0}},
    {VAE_PARAM_CUDA_HALO, "VAE_CUDA_HALO", OFF(cuda_halo), 0, 1, 0, 2, {"off", "tuned", "always"}},
    {VAE_PARAM_EXEC_FUSE_NORMS, "VAE_EXEC_FUSE_NORMS", OFF(exec_fuse_norms), 0, 1, 0, 1, {0}},
    {VAE_PARAM_CUDA_TUNE_REPS, "VAE_CUDA_TUNE_REPS", OFF(cuda_tune_reps), 0, 2, 0, 8, {0}},
    {VAE_PARAM_FP8_SHAPES, "VAE_FP8_SHAPES", OFF(fp8_shapes), 0, 0, 0, 1, {"kernels", "wide"}},
    {VAE_PARAM_CUDA_MMA, "VAE_CUDA_MMA", OFF(cuda_mma), 0, 0, 0, 1, {0}},
    {VAE_PARAM_FP8_CODES, "VAE_FP8_CODES", OFF(fp8_codes), 0, 1, 0, 1, {0}},
    {VAE_PARAM_PLAN_OFFLOAD, "VAE_PLAN_OFFLOAD", OFF(plan_offload), 0, 0, -1, 1 << 20, {0}},
    {VAE_PARAM_FP8_ERROR, "VAE_FP8_ERROR", OFF(fp8_error), 0, 400, 0, 10000, {0}},
    {VAE_PARAM_EXEC_FUSE_ACTS, "VAE_EXEC_FUSE_ACTS", OFF(exec_fuse_acts), 0, 1, 0, 1, {0}},
    {VAE_PARAM_EXEC_LOOP_FRAMES, "VAE_EXEC_LOOP_FRAMES", OFF(exec_loop_frames), 0, 0, 0, 64, {0}},
};
/* clang-format on */
#undef OFF
enum { N_SETTINGS = sizeof table / sizeof table[0] };
_Static_assert((int)N_SETTINGS == (int)VAE_PARAM_COUNT, "one settings row per VAE_PARAM_*");
_Static_assert((int)VAE_PARAM_COUNT <= 64, "vae_session_options.params has 64 slots");

static void put(vae_settings *s, const setting *t, int64_t v) {
    char *p = (char *)s + t->offset;
    if (t->is_u64) {
        uint64_t u = (uint64_t)v;
        memcpy(p, &u, sizeof u);
    } else {
        int i = (int)v;
        memcpy(p, &i, sizeof i);
    }
}

static int64_t get(const vae_settings *s, const setting *t) {
    const char *p = (const char *)s + t->offset;
    if (t->is_u64) {
        uint64_t u;
        memcpy(&u, p, sizeof u);
        return (int64_t)u;
    }
    int i;
    memcpy(&i, p, sizeof i);
    return i;
}

void vae_settings_default(vae_settings *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < N_SETTINGS; i++)
        put(s, &table[i], table[i].def);
    s->group_timeout_s = 300;
}

int vae_param_check(vae_param p, int64_t value) {
    if ((int)p < 0 || (int)p >= N_SETTINGS)
        return vae_fail(VAE_EINVAL, "unknown parameter %d (known: 0..%d)", (int)p, N_SETTINGS - 1);
    const setting *t = &table[p];
    if (value < t->lo || value > t->hi)
        return vae_fail(VAE_EINVAL, "parameter %d (%s): %lld is outside %lld..%lld", (int)p,
                        t->env ? t->env : "VAE_CUDA_TUNE=seed:N", (long long)value,
                        (long long)t->lo, (long long)t->hi);
    return VAE_OK;
}

/* The environment's spelling of a value: a number, or one of the row's words. VAE_CUDA_TUNE
 * also takes seed:N (paths chosen by a hash of N instead of timing). */
static int parse_env(vae_settings *s, const setting *t, const char *v) {
    if (t->param == VAE_PARAM_CUDA_TUNE && strncmp(v, "seed:", 5) == 0) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v + 5, &end, 10);
        if (errno || end == v + 5 || *end) goto bad;
        s->cuda_tune = 1;
        s->cuda_tune_seed = n | 1;
        return VAE_OK;
    }
    for (int w = 0; w < 3 && t->words[w]; w++)
        if (strcmp(v, t->words[w]) == 0) {
            put(s, t, w);
            return VAE_OK;
        }
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < t->lo || n > t->hi) goto bad;
    put(s, t, n);
    return VAE_OK;
bad:;
    char names[64] = "";
    for (int w = 0, n = 0; w < 3 && t->words[w] && n >= 0 && n < (int)sizeof names; w++)
        n += snprintf(names + n, sizeof names - (size_t)n, "%s, ", t->words[w]);
    return vae_fail(VAE_EINVAL, "environment %s='%s': expected %s%lld..%lld%s", t->env, v, names,
                    (long long)t->lo, (long long)t->hi,
                    t->param == VAE_PARAM_CUDA_TUNE ? " or seed:N" : "");
}

/* "NAME=value" appended to the list of what the environment set (cut short, with "...", where
 * the buffer is full: the log line is for reading, not parsing). */
static void note(char *list, size_t len, const char *name, const char *value) {
    const size_t n = strlen(list);
    if (n + 4 >= len) return;
    const int k = snprintf(list + n, len - n, "%s%s=%s", n ? ", " : "", name, value);
    if (k < 0 || (size_t)k >= len - n) snprintf(list + len - 4, 4, "...");
}

/* The tune cache file: the option, else the environment, else the user's cache directory. */
static int resolve_tune_cache(vae_settings *s, const vae_session_options *o, char *from_env,
                              size_t len) {
    const char *v = getenv("VAE_TUNE_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (o->tune_cache) { /* the program's choice, "" included (none) */
        if (v) VAE_DEBUG("settings: tune_cache from the options wins over VAE_TUNE_CACHE=%s", v);
        n = snprintf(s->tune_cache, sizeof s->tune_cache, "%s", o->tune_cache);
    } else if (v) { /* "" included (none) */
        note(from_env, len, "VAE_TUNE_CACHE", *v ? v : "\"\"");
        n = snprintf(s->tune_cache, sizeof s->tune_cache, "%s", v);
    } else if (xdg && *xdg)
        n = snprintf(s->tune_cache, sizeof s->tune_cache, "%s/vae.c/cuda-tune.txt", xdg);
    else if (home && *home)
        n = snprintf(s->tune_cache, sizeof s->tune_cache, "%s/.cache/vae.c/cuda-tune.txt", home);
    else
        n = snprintf(s->tune_cache, sizeof s->tune_cache, "%s", "");
    if (n < 0 || (size_t)n >= sizeof s->tune_cache)
        return vae_fail(VAE_EINVAL, "tune cache path is longer than %zu bytes",
                        sizeof s->tune_cache - 1);
    return VAE_OK;
}

/* VAE_GROUP_TIMEOUT: seconds, fractions allowed (tests wait a fraction of a second) */
static int resolve_group_timeout(vae_settings *s, char *from_env, size_t len) {
    const char *v = getenv("VAE_GROUP_TIMEOUT");
    if (!v || !*v) return VAE_OK;
    char *end;
    errno = 0;
    const double t = strtod(v, &end);
    if (errno || *end || !(t > 0 && t <= 86400))
        return vae_fail(VAE_EINVAL, "environment VAE_GROUP_TIMEOUT='%s': expected seconds in "
                                    "(0, 86400]", v);
    s->group_timeout_s = t;
    note(from_env, len, "VAE_GROUP_TIMEOUT", v);
    return VAE_OK;
}

/* Defaults (the caller's vae_settings_default), then the environment where the API left a switch
 * unset, then the API values: a program's or host's explicit choice is never overridden. */
int vae_settings_resolve(vae_settings *s, const vae_session_options *o) {
    char from_env[512] = "";
    for (int i = 0; i < N_SETTINGS; i++) {
        const char *v = table[i].env ? getenv(table[i].env) : NULL;
        if (!v || !*v) continue;
        if (o->params_set & (1ull << i)) {
            VAE_DEBUG("settings: %s=%lld set through the API wins over the environment's %s",
                      table[i].env, (long long)o->params[i], v);
            continue;
        }
        int rc = parse_env(s, &table[i], v);
        if (rc) return rc;
        note(from_env, sizeof from_env, table[i].env, v);
    }
    for (int i = 0; i < N_SETTINGS; i++) {
        if (!(o->params_set & (1ull << i))) continue;
        int rc = vae_param_check((vae_param)i, o->params[i]);
        if (rc) return rc;
        put(s, &table[i], o->params[i]);
    }
    /* fp8: a count (VAE_FP8_CONVS) turns the error budget off; a budget the API gave wins over a
     * count the environment gave, as any API value over the environment */
    const uint64_t api = o->params_set;
    if ((api >> VAE_PARAM_FP8_ERROR & 1) && !(api >> VAE_PARAM_FP8_CONVS & 1) && s->fp8_error > 0 &&
        s->fp8_convs >= 0) {
        VAE_DEBUG("settings: fp8_error=%d set through the API wins over VAE_FP8_CONVS=%d",
                  s->fp8_error, s->fp8_convs);
        s->fp8_convs = -1;
    }
    int rc = resolve_group_timeout(s, from_env, sizeof from_env);
    if (rc == VAE_OK) rc = resolve_tune_cache(s, o, from_env, sizeof from_env);
    if (rc == VAE_OK && from_env[0]) VAE_INFO("settings from the environment: %s", from_env);
    return rc;
}

void vae_settings_describe(const vae_settings *s, char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < N_SETTINGS && n < len; i++) {
        const setting *t = &table[i];
        const char *name = t->env ? t->env + 4 : "CUDA_TUNE_SEED"; /* without "VAE_" */
        int k = snprintf(buf + n, len - n, "%s%s=%lld", i ? " " : "", name, (long long)get(s, t));
        if (k < 0) break;
        n += (size_t)k;
    }
    if (n < len)
        snprintf(buf + n, len - n, " GROUP_TIMEOUT=%g TUNE_CACHE=%s", s->group_timeout_s,
                 s->tune_cache[0] ? s->tune_cache : "(none)");
}
