/* args.c -- option parsing and input loading shared by the commands. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "vae_dev.h"

int cli_parse(const cli_command *c, int argc, char **argv, const cli_opt *opts, const char **pos) {
    const char *cmd = c->name;
    int n_pos = 0, help = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] != 0) {
            const cli_opt *o = NULL;
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            if ((len == 6 && strncmp(a, "--help", 6) == 0) ||
                (len == 2 && strncmp(a, "-h", 2) == 0)) {
                help = 1;
                continue;
            }
            for (int k = 0; opts[k].name; k++)
                if ((strlen(opts[k].name) == len && strncmp(opts[k].name, a, len) == 0) ||
                    (opts[k].alt && strlen(opts[k].alt) == len && strncmp(opts[k].alt, a, len) == 0))
                    o = &opts[k];
            if (!o) return cli_usage_error(cmd, "unknown option '%s'", a);
            if (!o->takes_value) {
                *o->value = "1";
            } else if (eq) {
                *o->value = eq + 1;
            } else {
                if (i + 1 >= argc) return cli_usage_error(cmd, "option %s needs a value", o->name);
                *o->value = argv[++i];
            }
        } else {
            if (n_pos >= c->n_pos) return cli_usage_error(cmd, "unexpected argument '%s'", a);
            pos[n_pos++] = a;
        }
    }
    if (help) {
        for (int i = 0; i < 3 && c->help[i]; i++)
            fputs(c->help[i], stdout);
        return CLI_OK;
    }
    if (n_pos != c->n_pos) return cli_usage_error(cmd, "%s", c->pos_error);
    return CLI_PARSED;
}

int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return cli_usage_error(cmd, "%s: expected a whole number in %ld..%ld, not '%s'", flag, lo,
                               hi, s);
    *out = (int)v;
    return CLI_OK;
}

static long gcd_l(long a, long b) {
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int cli_parse_fps(const char *cmd, const char *s, int *num, int *den) {
    char *end;
    const char *slash = strchr(s, '/');
    if (slash) {
        long n = strtol(s, &end, 10);
        if (end != slash) goto bad;
        long d = strtol(slash + 1, &end, 10);
        if (*end || n <= 0 || d <= 0 || n > 1000000 || d > 1000000 || n / d > 1000) goto bad;
        *num = (int)n, *den = (int)d;
        return CLI_OK;
    }
    double f = strtod(s, &end);
    if (*end || end == s || !(f > 0) || f > 1000) goto bad;
    static const struct {
        double f;
        int n, d;
    } ntsc[] = {
        {23.976, 24000, 1001}, {29.97, 30000, 1001}, {59.94, 60000, 1001}, {119.88, 120000, 1001}};
    for (size_t i = 0; i < sizeof ntsc / sizeof ntsc[0]; i++)
        if (fabs(f - ntsc[i].f) < 0.0051) {
            *num = ntsc[i].n, *den = ntsc[i].d;
            return CLI_OK;
        }
    long n = lround(f * 1000), d = 1000, g = gcd_l(n, d);
    *num = (int)(n / g), *den = (int)(d / g);
    return CLI_OK;
bad:
    return cli_usage_error(cmd, "--fps: expected a rate like 16, 23.976 or 30000/1001, not '%s'",
                           s);
}

int cli_parse_size(const char *cmd, const char *s, int *w, int *h) {
    char *end;
    long a = strtol(s, &end, 10), b = 0;
    if (end == s) goto bad;
    if (*end == 'x' || *end == 'X') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        if (end == p) goto bad;
    }
    if (*end || a < 0 || b < 0 || a > 16384 || b > 16384 || (a == 0 && b == 0)) goto bad;
    *w = (int)a, *h = (int)b;
    return CLI_OK;
bad:
    return cli_usage_error(cmd,
                           "--size: expected WxH such as 832x480 (0 for one side keeps the "
                           "aspect ratio), not '%s'",
                           s);
}

int cli_parse_fit(const char *cmd, const char *s, int *fit) {
    static const char *const names[] = {"error", "crop", "pad", "resize"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *fit = i; /* the order of vae_media_fit */
            return CLI_OK;
        }
    return cli_usage_error(cmd, "--fit must be error, crop, pad or resize, not '%s'", s);
}

/* Tensor files are named by extension (a :KEY suffix is allowed); everything else is media. */
int cli_is_tensor_file(const char *arg) {
    static const char *const exts[] = {".safetensors", ".pth",  ".pt",  ".ckpt",
                                       ".bin",         ".gguf", ".npy", NULL};
    char *path, *key;
    cli_split_key(arg, &path, &key);
    int yes = 0;
    for (int i = 0; exts[i] && !yes; i++)
        yes = cli_has_ext(path, exts[i]);
    free(path);
    free(key);
    return yes;
}

void cli_split_key(const char *arg, char **path, char **key) {
    const char *c = strrchr(arg, ':');
    if (c && c[1] && c[1] != '/' && c[1] != '\\' && c != arg) {
        if ((*path = strdup(arg))) (*path)[c - arg] = 0; /* (strndup: not on Windows) */
        *key = strdup(c + 1);
    } else {
        *path = strdup(arg);
        *key = NULL;
    }
}

int cli_has_ext(const char *path, const char *ext) {
    size_t n = strlen(path), e = strlen(ext);
    return n >= e && strcasecmp(path + n - e, ext) == 0;
}

int cli_load_input(const char *arg, float lo, float hi, vae_tensor *out) {
    if (cli_has_ext(arg, ".png")) return cli_png_read(arg, lo, hi, out);
    char *path, *key;
    cli_split_key(arg, &path, &key);
    int rc = vae_tensor_load(path, key, out);
    free(path);
    free(key);
    return rc;
}

int cli_session_options(const char *cmd, const char *device, const char *dtype,
                        const char *threads, vae_session_options *so) {
    if (device) {
        if (strcmp(device, "cpu") == 0) so->device = VAE_DEVICE_CPU;
        else if (strcmp(device, "cuda") == 0) so->device = VAE_DEVICE_CUDA;
        else return cli_usage_error(cmd, "--device must be cpu or cuda, not '%s'", device);
    }
    if (dtype) {
        if (strcmp(dtype, "fp32") == 0) so->dtype = VAE_DTYPE_F32;
        else if (strcmp(dtype, "bf16") == 0) so->dtype = VAE_DTYPE_BF16;
        else if (strcmp(dtype, "fp16") == 0) so->dtype = VAE_DTYPE_F16;
        else if (strcmp(dtype, "fp8") == 0) so->dtype = VAE_DTYPE_FP8;
        else
            return cli_usage_error(cmd, "--dtype must be fp32, bf16, fp16 or fp8, not '%s'",
                                   dtype);
    }
    if (threads) return cli_parse_int(cmd, "--threads", threads, 0, 1024, &so->threads);
    return CLI_OK;
}

const char cli_mem_help[] =
    "memory:\n"
    "  --max-memory SIZE       budget for everything the session holds on its device at once\n"
    "                          (weights, activations, caches, scratch): 13G, 800M, 1.5GiB\n"
    "                          (binary units) or bytes. Default: the device's free memory minus a margin\n"
    "                          (cpu: available RAM). Frames are cut into exact tiles when the\n"
    "                          budget needs it; -v prints the plan and why\n"
    "  --host-memory SIZE      host memory for each whole-video object of a tiled call (its\n"
    "                          output put together, a store between parts, strips' slots);\n"
    "                          a larger one goes to a temporary file (slots: stay on the\n"
    "                          device). Default 2G; 256M keeps host memory flat in the video's\n"
    "                          length; 0 keeps none\n"
    "  --tile-mode M           auto (default): exact tiles as the budget needs (the output equals\n"
    "                          the untiled one); none: whole frames only; blend: overlapping\n"
    "                          tiles, each run on its own and blended with raised-cosine ramps\n"
    "                          (not exact; for sizes whose exact floor does not fit)\n"
    "  --tile HxW              force exact tiles of H x W pixels of the video side\n"
    "  --tile-size PX          blend: tile size in pixels of the video side (default: the\n"
    "                          cheapest grid of even tiles that fits the budget; smaller\n"
    "                          where PX does not fit)\n"
    "  --tile-overlap PX       blend: overlap in pixels of the video side (default: tile / 8)\n"
    "  --tune-cache PATH       cuda: file of the conv path choices kept between runs (default:\n"
    "                          ~/.cache/vae.c/cuda-tune.txt; '' keeps none)\n"
    "  --devices I,J,..        share the work among these GPUs (a device group, e.g. 0,1,2,3):\n"
    "                          each takes every n-th exact tile (seedvr2: a band of rows, the\n"
    "                          GroupNorm sums added up through NCCL); the output equals the\n"
    "                          one-GPU output. --max-memory is each GPU's budget (a GPU listed\n"
    "                          twice runs two lanes that split it)\n";

int cli_parse_bytes(const char *cmd, const char *flag, const char *s, int64_t *out) {
    if (vae_parse_size(s, out) != VAE_OK)
        return cli_usage_error(cmd, "%s: %s", flag, vae_last_error());
    return CLI_OK;
}

/* "0,1,2,3": device indices, at most VAE_MAX_DEVICES (one listed twice: two lanes on it) */
static int parse_devices(const char *cmd, const char *s, vae_session_options *so) {
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1023 || (*end && *end != ',') || n == VAE_MAX_DEVICES)
            return cli_usage_error(cmd, "--devices: expected up to %d device indices such as 0,1,2,3, "
                                        "not '%s'", VAE_MAX_DEVICES, s);
        so->devices[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return cli_usage_error(cmd, "--devices: '%s' ends with a comma", s);
    }
    if (n == 0) return cli_usage_error(cmd, "--devices: expected device indices such as 0,1");
    so->n_devices = n;
    return CLI_OK;
}

int cli_memory_options(const char *cmd, const cli_mem_args *a, vae_session_options *so) {
    int rc;
    if (a->tune_cache) so->tune_cache = a->tune_cache;
    if (a->devices && (rc = parse_devices(cmd, a->devices, so))) return rc;
    if (a->max_memory && (rc = cli_parse_bytes(cmd, "--max-memory", a->max_memory, &so->max_memory)))
        return rc;
    if (a->host_memory) { /* in MiB: VAE_PARAM_EXEC_HOST_MB */
        int64_t bytes = 0;
        if (strcmp(a->host_memory, "0") != 0 &&
            (rc = cli_parse_bytes(cmd, "--host-memory", a->host_memory, &bytes)))
            return rc;
        if (vae_session_options_set(so, VAE_PARAM_EXEC_HOST_MB, bytes >> 20) != VAE_OK)
            return cli_usage_error(cmd, "--host-memory: '%s' is more than this build allows (%s)",
                                   a->host_memory, vae_last_error());
    }
    if (a->tile_mode) {
        if (strcmp(a->tile_mode, "auto") == 0) so->tile_mode = VAE_TILE_AUTO;
        else if (strcmp(a->tile_mode, "none") == 0) so->tile_mode = VAE_TILE_NONE;
        else if (strcmp(a->tile_mode, "blend") == 0) so->tile_mode = VAE_TILE_BLEND;
        else return cli_usage_error(cmd, "--tile-mode must be auto, none or blend, not '%s'",
                                    a->tile_mode);
    }
    if (a->tile) { /* HxW, or one number for both; the library checks the sizes and the mode */
        char *end;
        errno = 0;
        long v1 = strtol(a->tile, &end, 10), v2 = v1;
        if (*end == 'x' || *end == 'X') v2 = strtol(end + 1, &end, 10);
        if (*end || errno || v1 < 0 || v2 < 0 || v1 > INT_MAX || v2 > INT_MAX)
            return cli_usage_error(cmd, "--tile: expected HxW pixels such as 256x256, not '%s'",
                                   a->tile);
        so->tile_height = (int)v1, so->tile_width = (int)v2;
    }
    if (a->tile_size &&
        (rc = cli_parse_int(cmd, "--tile-size", a->tile_size, 0, INT_MAX, &so->blend_tile)))
        return rc;
    if (a->tile_overlap &&
        (rc = cli_parse_int(cmd, "--tile-overlap", a->tile_overlap, 0, INT_MAX, &so->blend_overlap)))
        return rc;
    return CLI_OK;
}
