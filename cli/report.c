/* report.c -- what the commands say on stderr: errors and their exit codes, usage errors, the
 * library's log, quiet/verbose and the rank tag under --dist. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_quiet, cli_verbose, cli_rank;

/* The library's messages name options as the API spells them (vae_session_options,
 * vae_media_read_options, vae_media_write_options: the words Python and ComfyUI users set); the
 * CLI's users set flags. A row whose name ends in '=' takes the value that follows it
 * ("tile_mode=blend" -> "--tile-mode blend"); one that starts another comes after it. */
static const struct {
    const char *api, *flag;
} api_flags[] = {
    {"max_memory", "--max-memory"},
    {"host_memory", "--host-memory"},
    {"tile_mode=", "--tile-mode "},
    {"tile_mode", "--tile-mode"},
    {"tile_height/tile_width", "--tile"},
    {"blend_tile", "--tile-size"},
    {"blend_overlap", "--tile-overlap"},
    {"device=", "--device "},
    {"width/height", "--size WxH"},
    {"fit=", "--fit "},
    {"start=", "--start "},
    {"frames=", "--frames "},
    {"codec=", "--codec "},
};

static int name_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

/* The row naming the option at p (a whole word: not part of a path, a file name, a flag or a
 * longer name), or -1. */
static int api_name_at(const char *msg, const char *p) {
    if (p > msg && (name_char(p[-1]) || strchr("-/.=", p[-1]))) return -1;
    for (int i = 0; i < (int)(sizeof api_flags / sizeof api_flags[0]); i++) {
        const char *api = api_flags[i].api;
        if (strncmp(p, api, strlen(api)) != 0) continue;
        const char *end = p + strlen(api);
        if (end[-1] == '=' ||
            (!name_char(*end) && !(*end && strchr("-/.", *end) && name_char(end[1]))))
            return i;
    }
    return -1;
}

const char *cli_flags_from_api(const char *msg, char *out, size_t size) {
    size_t n = 0;
    if (size == 0) return msg;
    for (const char *p = msg; *p;) {
        const int row = api_name_at(msg, p);
        const char *put = row < 0 ? p : api_flags[row].flag;
        const size_t len = row < 0 ? 1 : strlen(put);
        if (n + len >= size) return msg; /* no room: the library's own words */
        memcpy(out + n, put, len);
        n += len;
        p += row < 0 ? 1 : strlen(api_flags[row].api);
    }
    out[n] = 0;
    return out;
}

/* Under --dist the ranks above 0 share rank 0's terminal or log: their lines say whose they are
 * ("rank N: "; "" otherwise), each written with one call so that ranks' lines do not mix. */
static const char *rank_tag(char tag[32]) {
    if (cli_rank <= 0) return "";
    snprintf(tag, 32, "rank %d: ", cli_rank);
    return tag;
}

void cli_log_to_stderr(int level, const char *msg, void *user) {
    (void)user;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    /* rank 0 already says what every rank would: the others keep only their errors (-v: all) */
    if (cli_rank > 0 && level < VAE_LOG_ERROR && !cli_verbose) return;
    const int name = level < 0 ? 0 : level > 3 ? 3 : level;
    char tag[32], flags[4096];
    fprintf(stderr, "%svae: %s: %s\n", rank_tag(tag), names[name],
            cli_flags_from_api(msg, flags, sizeof flags));
}

int cli_exit_code(int rc) {
    switch (rc) {
    case VAE_OK: return CLI_OK;
    case VAE_EINVAL: return CLI_EUSAGE;
    case VAE_EIO: return CLI_EIO;
    case VAE_EFORMAT:
    case VAE_EKEY:
    case VAE_ESHAPE:
    case VAE_EDTYPE:
    case VAE_ENAN: return CLI_EINPUT;
    case VAE_EUNSUPPORTED: return CLI_EUNSUPPORTED;
    case VAE_ENOMEM:
    case VAE_EDEVICE: return CLI_ERESOURCE;
    case VAE_EINTERRUPTED: return CLI_EINTERRUPTED;
    default: return CLI_EFAIL;
    }
}

static char cli_error[1024];

int cli_set_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cli_error, sizeof cli_error, fmt, ap);
    va_end(ap);
    return code;
}

int cli_report(int rc, const char *what) {
    if (rc == VAE_OK) return CLI_OK;
    char flags[4096];
    const char *detail =
        cli_flags_from_api(cli_error[0] ? cli_error : vae_last_error(), flags, sizeof flags);
    char tag[32];
    fprintf(stderr, "%svae: %s: %s%s%s\n", rank_tag(tag), what, vae_strerror(rc),
            *detail ? ": " : "", detail);
    return cli_exit_code(rc);
}

int cli_report_exit(int code, const char *what) {
    char tag[32], flags[4096];
    fprintf(stderr, "%svae: %s: %s\n", rank_tag(tag), what,
            cli_flags_from_api(cli_error, flags, sizeof flags));
    return code;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024], tag[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%svae %s: %s\n(see 'vae %s --help')\n", rank_tag(tag), cmd, msg, cmd);
    return CLI_EUSAGE;
}
