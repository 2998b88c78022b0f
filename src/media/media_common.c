/* media_common.c -- errors, logging and helpers of the media library. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "media_internal.h"

static _Thread_local char err_msg[1536];
static _Thread_local char av_last[512];
static _Thread_local char averr_buf[768];

static vae_log_fn log_fn;
static void *log_user;
static int log_min = VAE_LOG_WARN;

const char *vae_media_last_error(void) {
    return err_msg;
}

void vm_error_clear(void) {
    err_msg[0] = 0;
    av_last[0] = 0;
}

int vm_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    vm_log(VAE_LOG_DEBUG, "media: failing with %d: %s", code, err_msg);
    return code;
}

void vm_log(int level, const char *fmt, ...) {
    if (!log_fn || level < log_min) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_fn(level, buf, log_user);
}

void vae_media_set_log_callback(vae_log_fn fn, void *user, int min_level) {
    vm_init();
    log_fn = fn;
    log_user = user;
    log_min = min_level;
}

/* FFmpeg's messages: remember the last error of this thread (for error details), forward all
 * (warnings and worse; everything at -v) at DEBUG level. */
static void av_hook(void *avcl, int level, const char *fmt, va_list vl) {
    if (level > AV_LOG_VERBOSE) return;
    char msg[448], line[512];
    int prefix = 0;
    va_list copy;
    va_copy(copy, vl);
    av_log_format_line2(NULL, level, fmt, copy, msg, sizeof msg, &prefix);
    va_end(copy);
    const AVClass *cls = avcl ? *(const AVClass *const *)avcl : NULL;
    const char *who = cls && cls->item_name ? cls->item_name(avcl) : NULL;
    snprintf(line, sizeof line, "%s%s%s", who ? who : "", who ? ": " : "", msg);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    if (!n) return;
    if (level <= AV_LOG_ERROR) snprintf(av_last, sizeof av_last, "%s", line);
    if (level <= AV_LOG_WARNING || log_min <= VAE_LOG_DEBUG)
        vm_log(VAE_LOG_DEBUG, "ffmpeg: %s", line);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_impl(void) {
    av_log_set_callback(av_hook);
    av_log_set_level(AV_LOG_VERBOSE);
    /* FFmpeg's own blocks: no larger than the largest frame we accept at 8 bytes a pixel. A
     * 261-byte PNG made its demuxer ask for 1.3 GB (found by tests/fuzz: fuzz_media); with
     * the cap that allocation fails and the open reports an error. */
    av_max_alloc((size_t)VAE_MAX_IMAGE_PIXELS * 8);
}
void vm_init(void) {
    pthread_once(&init_once, init_impl);
}

const char *vm_av_last(void) {
    return av_last;
}
void vm_av_last_clear(void) {
    av_last[0] = 0;
}

const char *vm_averr(int averr) {
    char e[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(averr, e, sizeof e);
    if (av_last[0] && !strstr(av_last, e))
        snprintf(averr_buf, sizeof averr_buf, "%s (ffmpeg: %s)", e, av_last);
    else
        snprintf(averr_buf, sizeof averr_buf, "%s", e);
    return averr_buf;
}

int vm_code_from_av(int averr, int reading) {
    if (averr == AVERROR(ENOMEM)) return VAE_ENOMEM;
    if (averr == AVERROR(ENOENT) || averr == AVERROR(EACCES) || averr == AVERROR(EISDIR) ||
        averr == AVERROR(EROFS) || averr == AVERROR(ENOSPC) || averr == AVERROR(ENOTDIR) ||
        averr == AVERROR(EIO) || averr == AVERROR(EPERM))
        return VAE_EIO;
    if (averr == AVERROR_EXIT) return VAE_EINTERRUPTED;
    if (averr == AVERROR_DECODER_NOT_FOUND || averr == AVERROR_DEMUXER_NOT_FOUND ||
        averr == AVERROR_ENCODER_NOT_FOUND || averr == AVERROR_MUXER_NOT_FOUND ||
        averr == AVERROR_PATCHWELCOME)
        return VAE_EUNSUPPORTED;
    return reading ? VAE_EFORMAT : VAE_EIO;
}

static char version_buf[256];
static void version_fill(void) {
    unsigned f = avformat_version(), c = avcodec_version(), s = swscale_version(),
             u = avutil_version();
    snprintf(version_buf, sizeof version_buf,
             "libavformat %u.%u.%u, libavcodec %u.%u.%u, libswscale %u.%u.%u, libavutil %u.%u.%u",
             f >> 16, (f >> 8) & 255, f & 255, c >> 16, (c >> 8) & 255, c & 255, s >> 16,
             (s >> 8) & 255, s & 255, u >> 16, (u >> 8) & 255, u & 255);
}
const char *vae_media_version(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, version_fill);
    return version_buf;
}

int vm_pattern_ok(const char *path) {
    int conv = 0;
    for (const char *p = path; *p; p++) {
        if (*p != '%') continue;
        if (p[1] == '%') {
            p++;
            continue;
        }
        const char *q = p + 1;
        while (*q == '0')
            q++;
        while (isdigit((unsigned char)*q))
            q++;
        if (*q != 'd') return 0;
        if (q - p > 6) return 0; /* absurd widths */
        conv++;
        p = q;
    }
    return conv == 1;
}

int vae_media_is_pattern(const char *path) {
    return path && strchr(path, '%') && vm_pattern_ok(path);
}

int vm_pix_depth(enum AVPixelFormat f) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f);
    if (!d || d->nb_components == 0) return 8;
    int m = 0;
    for (int i = 0; i < d->nb_components; i++)
        if (d->comp[i].depth > m) m = d->comp[i].depth;
    return m;
}

int vm_pix_is_yuv(enum AVPixelFormat f) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f);
    if (!d) return 0;
    return !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3;
}
