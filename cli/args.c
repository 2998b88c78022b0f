/* args.c -- option parsing and input loading shared by the commands. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

int cli_parse(const char *cmd, int argc, char **argv, const cli_opt *opts, const char **pos,
              int max_pos, int *n_pos) {
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] != 0) {
            const cli_opt *o = NULL;
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
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
            if (*n_pos >= max_pos) return cli_usage_error(cmd, "unexpected argument '%s'", a);
            pos[(*n_pos)++] = a;
        }
    }
    return CLI_OK;
}

void cli_split_key(const char *arg, char **path, char **key) {
    const char *c = strrchr(arg, ':');
    if (c && c[1] && c[1] != '/' && c[1] != '\\' && c != arg) {
        *path = strndup(arg, (size_t)(c - arg));
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
        else return cli_usage_error(cmd, "--dtype must be fp32, bf16 or fp16, not '%s'", dtype);
    }
    if (threads) return cli_parse_int(cmd, "--threads", threads, 0, 1024, &so->threads);
    return CLI_OK;
}
