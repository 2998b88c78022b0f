/* media_internal.h -- shared pieces of the media library (internal). */
#ifndef VAE_MEDIA_INTERNAL_H
#define VAE_MEDIA_INTERNAL_H

#include <libavutil/pixfmt.h>

#include "media.h"

#if defined(__GNUC__)
#define VM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VM_PRINTF(a, b)
#endif

/* Records the detail message for vae_media_last_error() and returns code. */
int vm_fail(int code, const char *fmt, ...) VM_PRINTF(2, 3);
void vm_error_clear(void);
void vm_log(int level, const char *fmt, ...) VM_PRINTF(2, 3);
/* Installs the FFmpeg log hook once (thread-safe). */
void vm_init(void);
/* The last error-level message FFmpeg logged on this thread ("" if none), and a reset. */
const char *vm_av_last(void);
void vm_av_last_clear(void);
/* av_err2str into a thread-local buffer, with FFmpeg's last logged message when there is one. */
const char *vm_averr(int averr);
/* VAE_E* code for an FFmpeg error while reading/writing. */
int vm_code_from_av(int averr, int reading);

/* Printf pattern check: exactly one %d conversion (flags 0/width allowed), %% literal. */
int vm_pattern_ok(const char *path);
/* Pixel format helpers. */
int vm_pix_depth(enum AVPixelFormat f);
int vm_pix_is_yuv(enum AVPixelFormat f);

#endif
