/* media_write.c -- float tensors -> H.264/H.265/FFV1 videos and PNG sequences. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>

#include "core/core.h"
#include "media_internal.h"

enum { KIND_VIDEO = 0, KIND_PNGSEQ = 1 };

struct vae_media_writer {
    char *path, *tmp;
    int kind, w, h;
    vae_media_write_options o;
    AVFormatContext *oc;
    AVStream *st;
    AVCodecContext *enc;
    AVFrame *frame; /* what the encoder takes */
    AVPacket *pkt;
    int64_t pts;
    int frames;
    int header_done;
    /* PNG sequences: written under temporary names, renamed at the end */
    char **tmps, **finals;
    int nfiles, cap;
};

void vae_media_write_options_default(vae_media_write_options *o) {
    memset(o, 0, sizeof *o);
    o->fps_num = 24;
    o->fps_den = 1;
    o->crf = -1;
    o->bit_depth = 8;
    o->lo = -1.0f;
    o->hi = 1.0f;
}

static const char *ext_of(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot : "";
}

int vae_media_is_output_path(const char *path) {
    if (!path) return 0;
    const char *e = ext_of(path);
    if (vae_media_is_pattern(path)) return strcasecmp(e, ".png") == 0;
    return strcasecmp(e, ".mp4") == 0 || strcasecmp(e, ".m4v") == 0 || strcasecmp(e, ".mov") == 0 ||
           strcasecmp(e, ".mkv") == 0;
}

/* A new temporary next to path (vae_temp_create) left for the muxer to open by name: its name
 * (malloc'd; NULL with errno set). */
static char *tmp_create(const char *path) {
    const size_t n = strlen(path) + 32;
    char *t = malloc(n);
    const int fd = t ? vae_temp_create(path, t, n) : -1;
    if (fd < 0) {
        const int e = errno;
        free(t);
        errno = e;
        return NULL;
    }
    close(fd);
    return t;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    char *d = malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = 0;
    }
    return d;
}

static void writer_free(vae_media_writer *w, int remove_tmp) {
    if (!w) return;
    if (w->oc) {
        if (w->oc->pb) avio_closep(&w->oc->pb);
        avformat_free_context(w->oc);
    }
    for (int i = 0; i < w->nfiles; i++) {
        if (remove_tmp && w->tmps[i]) remove(w->tmps[i]);
        free(w->tmps[i]);
        free(w->finals[i]);
    }
    if (remove_tmp && w->tmp) remove(w->tmp); /* a PNG sequence's folder once it is empty */
    free(w->tmps);
    free(w->finals);
    avcodec_free_context(&w->enc);
    av_frame_free(&w->frame);
    av_packet_free(&w->pkt);
    free(w->path);
    free(w->tmp);
    free(w);
}

void vae_media_writer_abort(vae_media_writer *w) {
    writer_free(w, 1);
}

const char *vae_media_writer_temp_path(const vae_media_writer *w) {
    return w ? w->tmp : NULL;
}

int vae_media_writer_frames(const vae_media_writer *w) {
    return w ? w->frames : 0;
}

static int open_encoder(vae_media_writer *w, const char *codec) {
    const char *want = NULL;
    enum AVPixelFormat pf;
    int ten = w->o.bit_depth == 10;
    if (strcmp(codec, "h264") == 0) {
        want = "libx264";
        pf = ten ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
    } else if (strcmp(codec, "h265") == 0) {
        want = "libx265";
        pf = ten ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
    } else if (strcmp(codec, "ffv1") == 0) {
        want = "ffv1";
        pf = ten ? AV_PIX_FMT_GBRP10LE : AV_PIX_FMT_BGR0;
    } else {
        want = "png";
        pf = ten ? AV_PIX_FMT_RGB48BE : AV_PIX_FMT_RGB24;
    }
    const AVCodec *c = avcodec_find_encoder_by_name(want);
    if (!c)
        return vm_fail(VAE_EUNSUPPORTED,
                       "this FFmpeg build has no %s encoder (%s): choose another codec "
                       "(codec=ffv1 in .mkv is always there)",
                       codec, want);
    if (vm_pix_is_yuv(pf) && (w->w % 2 || w->h % 2))
        return vm_fail(VAE_ESHAPE,
                       "%s: %s 4:2:0 needs an even width and height, not %dx%d (use "
                       "codec=ffv1 or a PNG pattern)",
                       w->path, codec, w->w, w->h);
    AVCodecContext *e = avcodec_alloc_context3(c);
    if (!e) return vm_fail(VAE_ENOMEM, "out of memory");
    w->enc = e;
    e->width = w->w;
    e->height = w->h;
    e->pix_fmt = pf;
    e->sample_aspect_ratio = (AVRational){1, 1};
    e->time_base = (AVRational){w->o.fps_den, w->o.fps_num};
    e->framerate = (AVRational){w->o.fps_num, w->o.fps_den};
    e->thread_count = 1; /* reproducible output on any machine */
    e->flags |= AV_CODEC_FLAG_BITEXACT;
    if (vm_pix_is_yuv(pf)) {
        e->color_range = AVCOL_RANGE_MPEG;
        e->colorspace = AVCOL_SPC_BT709;
        e->chroma_sample_location = AVCHROMA_LOC_LEFT;
    } else {
        e->color_range = AVCOL_RANGE_JPEG;
        e->colorspace = AVCOL_SPC_RGB;
    }
    e->color_primaries = AVCOL_PRI_BT709;
    e->color_trc = AVCOL_TRC_BT709;
    if (w->kind == KIND_PNGSEQ) {
        e->time_base = (AVRational){1, 1};
        e->color_primaries = AVCOL_PRI_UNSPECIFIED; /* untagged PNG = sRGB, like other tools */
        e->color_trc = AVCOL_TRC_UNSPECIFIED;
        av_opt_set(e->priv_data, "pred", "paeth", 0);
    }
    char crf[16];
    if (strcmp(codec, "h264") == 0 || strcmp(codec, "h265") == 0) {
        int q = w->o.crf >= 0 ? w->o.crf : strcmp(codec, "h264") == 0 ? 18 : 20;
        snprintf(crf, sizeof crf, "%d", q);
        av_opt_set(e->priv_data, "crf", crf, 0);
        av_opt_set(e->priv_data, "preset", w->o.preset ? w->o.preset : "medium", 0);
        if (strcmp(codec, "h265") == 0)
            av_opt_set(e->priv_data, "x265-params",
                       "log-level=error:pools=none:frame-threads=1:info=0", 0);
    }
    if (strcmp(codec, "ffv1") == 0) {
        e->gop_size = 1;
        av_opt_set_int(e->priv_data, "slicecrc", 1, 0);
        e->level = 3;
    }
    if (w->oc && (w->oc->oformat->flags & AVFMT_GLOBALHEADER))
        e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int r = avcodec_open2(e, c, NULL);
    if (r < 0)
        return vm_fail(vm_code_from_av(r, 0) == VAE_EIO ? VAE_EINVAL : vm_code_from_av(r, 0),
                       "%s: cannot open the %s encoder (%dx%d %s, preset %s): %s", w->path, want,
                       w->w, w->h, av_get_pix_fmt_name(pf), w->o.preset ? w->o.preset : "medium",
                       vm_averr(r));
    w->frame = av_frame_alloc();
    w->pkt = av_packet_alloc();
    if (!w->frame || !w->pkt) return vm_fail(VAE_ENOMEM, "out of memory");
    w->frame->format = pf;
    w->frame->width = w->w;
    w->frame->height = w->h;
    w->frame->color_range = e->color_range;
    w->frame->colorspace = e->colorspace;
    w->frame->color_primaries = e->color_primaries;
    w->frame->color_trc = e->color_trc;
    w->frame->chroma_location = e->chroma_sample_location;
    if (av_frame_get_buffer(w->frame, 0) < 0) return vm_fail(VAE_ENOMEM, "out of memory");
    return VAE_OK;
}

int vae_media_writer_open(vae_media_writer **out, const char *path, int width, int height,
                          const vae_media_write_options *opts) {
    vm_init();
    vm_error_clear();
    if (!out || !path) return vm_fail(VAE_EINVAL, "vae_media_writer_open: NULL argument");
    *out = NULL;
    vae_media_write_options o;
    if (opts)
        o = *opts;
    else
        vae_media_write_options_default(&o);
    if (width <= 0 || height <= 0 || width > 16384 || height > 16384)
        return vm_fail(VAE_ESHAPE, "%s: bad frame size %dx%d", path, width, height);
    if (o.bit_depth != 8 && o.bit_depth != 10)
        return vm_fail(VAE_EINVAL, "bit depth must be 8 or 10, not %d", o.bit_depth);
    if (o.fps_num <= 0 || o.fps_den <= 0 || o.fps_num / o.fps_den > 1000)
        return vm_fail(VAE_EINVAL, "bad frame rate %d/%d", o.fps_num, o.fps_den);
    if (o.crf > 51) return vm_fail(VAE_EINVAL, "crf must be 0..51, not %d", o.crf);
    if (!(o.hi != o.lo) || !isfinite(o.lo) || !isfinite(o.hi))
        return vm_fail(VAE_EINVAL, "bad pixel range [%g, %g]", o.lo, o.hi);
    const char *e = ext_of(path);
    int pattern = vae_media_is_pattern(path);
    if (strchr(path, '%') && !pattern)
        return vm_fail(VAE_EINVAL,
                       "%s: a frame pattern needs exactly one %%d conversion (e.g. "
                       "out/%%05d.png)",
                       path);
    const char *fmt = NULL, *codec = o.codec;
    if (pattern) {
        if (strcasecmp(e, ".png") != 0)
            return vm_fail(VAE_EINVAL, "%s: frame patterns are written as PNG: end it in .png",
                           path);
        if (codec && strcasecmp(codec, "png") != 0)
            return vm_fail(VAE_EINVAL,
                           "%s: a frame pattern is a PNG sequence; codec=%s needs a "
                           "video file (.mp4, .mkv)",
                           path, codec);
        codec = "png";
    } else if (strcasecmp(e, ".mp4") == 0 || strcasecmp(e, ".m4v") == 0) {
        fmt = "mp4";
    } else if (strcasecmp(e, ".mov") == 0) {
        fmt = "mov";
    } else if (strcasecmp(e, ".mkv") == 0) {
        fmt = "matroska";
    } else {
        return vm_fail(VAE_EINVAL,
                       "%s: unknown video output: use .mp4 or .mov (H.264/H.265), .mkv "
                       "(FFV1, H.264, H.265) or a PNG pattern such as out/%%05d.png",
                       path);
    }
    if (!codec) codec = strcmp(fmt, "matroska") == 0 ? "ffv1" : "h264";
    if (strcasecmp(codec, "h264") == 0 || strcasecmp(codec, "avc") == 0 ||
        strcasecmp(codec, "libx264") == 0 || strcasecmp(codec, "x264") == 0)
        codec = "h264";
    else if (strcasecmp(codec, "h265") == 0 || strcasecmp(codec, "hevc") == 0 ||
             strcasecmp(codec, "libx265") == 0 || strcasecmp(codec, "x265") == 0)
        codec = "h265";
    else if (strcasecmp(codec, "ffv1") == 0)
        codec = "ffv1";
    else if (strcasecmp(codec, "png") == 0)
        codec = "png";
    else
        return vm_fail(VAE_EINVAL, "unknown codec '%s': use h264, h265, ffv1 or png", codec);
    if (strcmp(codec, "png") == 0 && !pattern)
        return vm_fail(VAE_EINVAL, "%s: codec=png writes a frame pattern such as out/%%05d.png",
                       path);
    if (strcmp(codec, "ffv1") == 0 && strcmp(fmt, "matroska") != 0)
        return vm_fail(VAE_EINVAL, "%s: FFV1 goes in a .mkv file", path);

    vae_media_writer *w = calloc(1, sizeof *w);
    if (!w) return vm_fail(VAE_ENOMEM, "out of memory");
    w->o = o;
    w->o.codec = NULL;
    w->o.preset = NULL; /* not kept: the caller's string may go away */
    w->w = width;
    w->h = height;
    w->kind = pattern ? KIND_PNGSEQ : KIND_VIDEO;
    w->path = strdup(path);
    int rc = VAE_OK, r;
    if (!w->path) {
        rc = vm_fail(VAE_ENOMEM, "out of memory");
        goto fail;
    }
    if (w->kind == KIND_PNGSEQ) {
        char *d = dir_of(path);
        struct stat sb;
        if (!d)
            rc = vm_fail(VAE_ENOMEM, "out of memory");
        else if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode))
            rc = vm_fail(VAE_EIO, "%s: the folder %s does not exist", path, d);
        else if (access(d, W_OK) != 0)
            rc = vm_fail(VAE_EIO, "%s: cannot write in %s: %s", path, d, strerror(errno));
        /* the frames wait in a folder of their own until all are written */
        const size_t n = d ? strlen(d) + 32 : 0;
        if (rc == VAE_OK && !(w->tmp = malloc(n)))
            rc = vm_fail(VAE_ENOMEM, "out of memory");
        if (rc == VAE_OK) {
            snprintf(w->tmp, n, "%s/vae-frames.tmp.XXXXXX", d);
            if (!mkdtemp(w->tmp)) {
                rc = vm_fail(VAE_EIO, "%s: cannot create a folder in %s: %s", path, d,
                             strerror(errno));
                free(w->tmp);
                w->tmp = NULL;
            }
        }
        free(d);
        if (rc) goto fail;
        w->o.preset = opts ? opts->preset : NULL;
        rc = open_encoder(w, codec);
        w->o.preset = NULL;
        if (rc) goto fail;
        *out = w;
        return VAE_OK;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        rc = vm_fail(VAE_EIO, "%s: is a folder", path);
        goto fail;
    }
    if (!(w->tmp = tmp_create(path))) {
        char *d = dir_of(path);
        rc = errno == ENOMEM ? vm_fail(VAE_ENOMEM, "out of memory")
                             : vm_fail(VAE_EIO, "%s: cannot create the file in %s: %s", path,
                                       d ? d : ".", strerror(errno));
        free(d);
        goto fail;
    }
    if ((r = avformat_alloc_output_context2(&w->oc, NULL, fmt, w->tmp)) < 0 || !w->oc) {
        rc = vm_fail(VAE_EUNSUPPORTED, "this FFmpeg build has no %s muxer", fmt);
        goto fail;
    }
    w->oc->flags |= AVFMT_FLAG_BITEXACT; /* no version strings, fixed UIDs: reproducible files */
    w->o.preset = opts ? opts->preset : NULL;
    rc = open_encoder(w, codec);
    w->o.preset = NULL;
    if (rc) goto fail;
    w->st = avformat_new_stream(w->oc, NULL);
    if (!w->st) {
        rc = vm_fail(VAE_ENOMEM, "out of memory");
        goto fail;
    }
    w->st->time_base = w->enc->time_base;
    w->st->avg_frame_rate = w->enc->framerate;
    if ((r = avcodec_parameters_from_context(w->st->codecpar, w->enc)) < 0) {
        rc = vm_fail(VAE_ENOMEM, "out of memory");
        goto fail;
    }
    if (strcmp(codec, "h265") == 0 && strcmp(fmt, "matroska") != 0)
        w->st->codecpar->codec_tag = MKTAG('h', 'v', 'c', '1'); /* what Apple players want */
    if ((r = avio_open(&w->oc->pb, w->tmp, AVIO_FLAG_WRITE)) < 0) {
        char *d = dir_of(path);
        rc = vm_fail(VAE_EIO, "%s: cannot create the file in %s: %s", path, d ? d : ".",
                     vm_averr(r));
        free(d);
        goto fail;
    }
    AVDictionary *mo = NULL;
    if (strcmp(fmt, "matroska") != 0) av_dict_set(&mo, "movflags", "+faststart", 0);
    r = avformat_write_header(w->oc, &mo);
    av_dict_free(&mo);
    if (r < 0) {
        rc = vm_fail(vm_code_from_av(r, 0), "%s: cannot write the header: %s", path, vm_averr(r));
        goto fail;
    }
    w->header_done = 1;
    *out = w;
    return VAE_OK;
fail:
    writer_free(w, 1);
    return rc;
}

static inline float unit(float x, float lo, float inv) {
    float v = (x - lo) * inv;
    if (!(v > 0.0f)) return 0.0f; /* also NaN */
    return v > 1.0f ? 1.0f : v;
}

/* A new file (O_EXCL) holding data: 1, or 0 with errno set. */
static int write_new_file(const char *path, const uint8_t *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return 0;
    while (n > 0) {
        ssize_t k = write(fd, data, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            const int e = k < 0 ? errno : EIO;
            close(fd);
            errno = e;
            return 0;
        }
        data += k, n -= (size_t)k;
    }
    return close(fd) == 0;
}

static int drain(vae_media_writer *w) {
    for (;;) {
        int r = avcodec_receive_packet(w->enc, w->pkt);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return VAE_OK;
        if (r < 0) return vm_fail(VAE_EIO, "%s: encoder failed: %s", w->path, vm_averr(r));
        if (w->kind == KIND_PNGSEQ) {
            int i = w->nfiles - 1;
            const int ok = write_new_file(w->tmps[i], w->pkt->data, (size_t)w->pkt->size);
            av_packet_unref(w->pkt);
            if (!ok) return vm_fail(VAE_EIO, "%s: cannot write: %s", w->finals[i], strerror(errno));
            continue;
        }
        av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
        w->pkt->stream_index = w->st->index;
        r = av_interleaved_write_frame(w->oc, w->pkt);
        av_packet_unref(w->pkt);
        if (r < 0) return vm_fail(VAE_EIO, "%s: cannot write: %s", w->path, vm_averr(r));
    }
}

static int add_png_name(vae_media_writer *w) {
    if (w->nfiles == w->cap) {
        int nc = w->cap ? w->cap * 2 : 64;
        char **a = realloc(w->tmps, (size_t)nc * sizeof *a), **b;
        if (!a) return vm_fail(VAE_ENOMEM, "out of memory");
        w->tmps = a;
        b = realloc(w->finals, (size_t)nc * sizeof *b);
        if (!b) return vm_fail(VAE_ENOMEM, "out of memory");
        w->finals = b;
        w->cap = nc;
    }
    int n = snprintf(NULL, 0, w->path, w->frames);
    char *fin = malloc((size_t)n + 1);
    if (!fin) return vm_fail(VAE_ENOMEM, "out of memory");
    snprintf(fin, (size_t)n + 1, w->path, w->frames);
    const char *base = strrchr(fin, '/');
    base = base ? base + 1 : fin;
    const size_t tn = strlen(w->tmp) + strlen(base) + 2;
    char *t = malloc(tn);
    if (t) snprintf(t, tn, "%s/%s", w->tmp, base);
    if (!t) {
        free(fin);
        return vm_fail(VAE_ENOMEM, "out of memory");
    }
    w->finals[w->nfiles] = fin;
    w->tmps[w->nfiles] = t;
    w->nfiles++;
    return VAE_OK;
}

/* BT.709 limited range 4:2:0 with left-sited chroma (MPEG-2/H.264 default, as tagged), computed
 * in float from the [0,1] values and rounded once to the nearest code. Chroma: the RGB of each
 * chroma site is filtered [1 2 1]/4 horizontally (sites on even columns) and averaged over the two
 * rows it sits between, then converted. */
static int rgb_to_yuv420(vae_media_writer *w, const float *R, const float *G, const float *B,
                         AVFrame *f) {
    const float kr = 0.2126f, kb = 0.0722f, kg = 1.0f - kr - kb;
    const float lo = w->o.lo, inv = 1.0f / (w->o.hi - w->o.lo);
    const int ten = f->format == AV_PIX_FMT_YUV420P10LE;
    const float k = ten ? 4.0f : 1.0f, maxc = ten ? 1023.0f : 255.0f;
    const int W = w->w, H = w->h, cw = (W + 1) / 2, ch = (H + 1) / 2;
    float *rgb = malloc((size_t)W * 2 * 3 * sizeof(float)); /* two rows of R,G,B in [0,1] */
    if (!rgb) return vm_fail(VAE_ENOMEM, "out of memory");
    for (int j = 0; j < ch; j++) {
        for (int r = 0; r < 2; r++) {
            int y = 2 * j + r < H ? 2 * j + r : H - 1;
            float *o = rgb + (size_t)r * 3 * W;
            for (int x = 0; x < W; x++) {
                int64_t i = (int64_t)y * W + x;
                float rv = unit(R[i], lo, inv), gv = unit(G[i], lo, inv), bv = unit(B[i], lo, inv);
                o[x] = rv, o[W + x] = gv, o[2 * W + x] = bv;
                if (2 * j + r < H) {
                    float yv = (16.0f + 219.0f * (kr * rv + kg * gv + kb * bv)) * k;
                    long q = lrintf(yv);
                    q = q < 0 ? 0 : q > (long)maxc ? (long)maxc : q;
                    uint8_t *row = f->data[0] + (size_t)y * f->linesize[0];
                    if (ten)
                        ((uint16_t *)row)[x] = (uint16_t)q;
                    else
                        row[x] = (uint8_t)q;
                }
            }
        }
        uint8_t *ur = f->data[1] + (size_t)j * f->linesize[1];
        uint8_t *vr = f->data[2] + (size_t)j * f->linesize[2];
        for (int i = 0; i < cw; i++) {
            int x0 = 2 * i, xl = x0 > 0 ? x0 - 1 : 0, xr = x0 + 1 < W ? x0 + 1 : W - 1;
            float c[3];
            for (int p = 0; p < 3; p++) {
                const float *a = rgb + (size_t)p * W, *b = rgb + (size_t)(3 + p) * W;
                c[p] = 0.125f * (a[xl] + b[xl] + a[xr] + b[xr]) + 0.25f * (a[x0] + b[x0]);
            }
            float yl = kr * c[0] + kg * c[1] + kb * c[2];
            float cb = (128.0f + 224.0f * (c[2] - yl) / (2.0f * (1.0f - kb))) * k;
            float cr = (128.0f + 224.0f * (c[0] - yl) / (2.0f * (1.0f - kr))) * k;
            long qb = lrintf(cb), qr = lrintf(cr);
            qb = qb < 0 ? 0 : qb > (long)maxc ? (long)maxc : qb;
            qr = qr < 0 ? 0 : qr > (long)maxc ? (long)maxc : qr;
            if (ten) {
                ((uint16_t *)ur)[i] = (uint16_t)qb;
                ((uint16_t *)vr)[i] = (uint16_t)qr;
            } else {
                ur[i] = (uint8_t)qb;
                vr[i] = (uint8_t)qr;
            }
        }
    }
    free(rgb);
    return VAE_OK;
}

/* Packed RGB rows: sample k of pixel x (planes[k], in the format's channel order) at channel k of
 * n_ch, 8-bit or 16-bit big-endian; a fourth channel (BGR0, 8-bit) is 0. */
static void pack_rgb(const vae_media_writer *w, AVFrame *f, const float *const planes[3], int n_ch,
                     int bits16, float lo, float inv) {
    for (int y = 0; y < w->h; y++) {
        uint8_t *o = f->data[0] + (size_t)y * f->linesize[0];
        int64_t i0 = (int64_t)y * w->w;
        for (int x = 0; x < w->w; x++) {
            for (int k = 0; k < 3; k++) {
                float u = unit(planes[k][i0 + x], lo, inv);
                if (bits16) {
                    unsigned v = (unsigned)lrintf(u * 65535.0f);
                    o[2 * (n_ch * x + k)] = (uint8_t)(v >> 8);
                    o[2 * (n_ch * x + k) + 1] = (uint8_t)(v & 255);
                } else {
                    o[n_ch * x + k] = (uint8_t)lrintf(u * 255.0f);
                }
            }
            if (n_ch == 4) o[4 * x + 3] = 0;
        }
    }
}

int vae_media_writer_add(vae_media_writer *w, const float *frames, int n) {
    vm_error_clear();
    if (!w || !frames || n < 0) return vm_fail(VAE_EINVAL, "vae_media_writer_add: bad arguments");
    const int64_t plane = (int64_t)w->w * w->h;
    const float lo = w->o.lo, inv = 1.0f / (w->o.hi - w->o.lo);
    for (int t = 0; t < n; t++) {
        const float *R = frames + ((int64_t)0 * n + t) * plane;
        const float *G = frames + ((int64_t)1 * n + t) * plane;
        const float *B = frames + ((int64_t)2 * n + t) * plane;
        int rc;
        if (av_frame_make_writable(w->frame) < 0) return vm_fail(VAE_ENOMEM, "out of memory");
        AVFrame *f = w->frame;
        switch ((enum AVPixelFormat)f->format) {
        case AV_PIX_FMT_YUV420P:
        case AV_PIX_FMT_YUV420P10LE:
            if ((rc = rgb_to_yuv420(w, R, G, B, f))) return rc;
            break;
        case AV_PIX_FMT_BGR0:
            pack_rgb(w, f, (const float *const[3]){B, G, R}, 4, 0, lo, inv);
            break;
        case AV_PIX_FMT_GBRP10LE: {
            const float *src[3] = {G, B, R};
            for (int p = 0; p < 3; p++)
                for (int y = 0; y < w->h; y++) {
                    uint16_t *o = (uint16_t *)(f->data[p] + (size_t)y * f->linesize[p]);
                    const float *s = src[p] + (int64_t)y * w->w;
                    for (int x = 0; x < w->w; x++)
                        o[x] = (uint16_t)lrintf(unit(s[x], lo, inv) * 1023.0f);
                }
            break;
        }
        case AV_PIX_FMT_RGB24:
            pack_rgb(w, f, (const float *const[3]){R, G, B}, 3, 0, lo, inv);
            break;
        case AV_PIX_FMT_RGB48BE:
            pack_rgb(w, f, (const float *const[3]){R, G, B}, 3, 1, lo, inv);
            break;
        default: return vm_fail(VAE_EUNSUPPORTED, "internal: pixel format");
        }
        if (w->kind == KIND_PNGSEQ && (rc = add_png_name(w))) return rc;
        f->pts = w->pts++;
        int r = avcodec_send_frame(w->enc, f);
        if (r < 0) return vm_fail(VAE_EIO, "%s: encoder failed: %s", w->path, vm_averr(r));
        if ((rc = drain(w))) return rc;
        w->frames++;
    }
    return VAE_OK;
}

int vae_media_writer_finish(vae_media_writer *w) {
    vm_error_clear();
    if (!w) return vm_fail(VAE_EINVAL, "vae_media_writer_finish: NULL");
    int rc = VAE_OK, r;
    if (w->frames == 0) {
        rc = vm_fail(VAE_EINVAL, "%s: no frames to write", w->path);
        goto fail;
    }
    if ((r = avcodec_send_frame(w->enc, NULL)) < 0 && r != AVERROR_EOF) {
        rc = vm_fail(VAE_EIO, "%s: encoder failed: %s", w->path, vm_averr(r));
        goto fail;
    }
    if ((rc = drain(w))) goto fail;
    if (w->kind == KIND_PNGSEQ) {
        for (int i = 0; i < w->nfiles; i++)
            if (rename(w->tmps[i], w->finals[i]) != 0) {
                rc = vm_fail(VAE_EIO, "%s: cannot rename into place: %s", w->finals[i],
                             strerror(errno));
                for (int k = 0; k < i; k++)
                    remove(w->finals[k]);
                goto fail;
            }
        for (int i = 0; i < w->nfiles; i++) {
            free(w->tmps[i]);
            w->tmps[i] = NULL;
        }
        remove(w->tmp); /* the folder, empty now */
        writer_free(w, 0);
        return VAE_OK;
    }
    if ((r = av_write_trailer(w->oc)) < 0) {
        rc = vm_fail(VAE_EIO, "%s: cannot finish the file: %s", w->path, vm_averr(r));
        goto fail;
    }
    if ((r = avio_closep(&w->oc->pb)) < 0) {
        rc = vm_fail(VAE_EIO, "%s: cannot close the file: %s", w->path, vm_averr(r));
        goto fail;
    }
    if (rename(w->tmp, w->path) != 0) {
        rc = vm_fail(VAE_EIO, "%s: cannot rename %s into place: %s", w->path, w->tmp,
                     strerror(errno));
        goto fail;
    }
    free(w->tmp);
    w->tmp = NULL;
    writer_free(w, 0);
    return VAE_OK;
fail:
    writer_free(w, 1);
    return rc;
}

int vae_media_encoder_available(const char *codec) {
    if (!codec) return 0;
    const char *name = strcasecmp(codec, "h264") == 0   ? "libx264"
                       : strcasecmp(codec, "h265") == 0 ? "libx265"
                       : strcasecmp(codec, "hevc") == 0 ? "libx265"
                                                        : codec;
    return avcodec_find_encoder_by_name(name) != NULL;
}

int vae_media_write_video(const char *path, const vae_tensor *v, const vae_media_write_options *o) {
    vm_error_clear();
    if (!path || !v || !v->data) return vm_fail(VAE_EINVAL, "vae_media_write_video: NULL argument");
    if (v->dtype != VAE_DTYPE_F32) return vm_fail(VAE_EDTYPE, "video tensor must be float32");
    if (!((v->ndim == 5 || v->ndim == 4) && v->shape[0] == 1 && v->shape[1] == 3))
        return vm_fail(VAE_ESHAPE, "video tensor must be [1,3,T,H,W] or [1,3,H,W]");
    int t = v->ndim == 5 ? (int)v->shape[2] : 1;
    int h = (int)v->shape[v->ndim - 2], wd = (int)v->shape[v->ndim - 1];
    vae_media_writer *w;
    int rc = vae_media_writer_open(&w, path, wd, h, o);
    if (rc) return rc;
    if ((rc = vae_media_writer_add(w, v->data, t))) {
        vae_media_writer_abort(w);
        return rc;
    }
    return vae_media_writer_finish(w);
}
