/* media_read.c -- video files, images, patterns and folders of frames -> float tensors. */
#define _GNU_SOURCE /* strverscmp */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "media_internal.h"

/* ---- the source: one demuxed file, or a list of image files ------------------------------------
 */
typedef struct vm_src {
    const char *path; /* as given */
    char **files;     /* sequences: one image per file */
    int nfiles, next_file, is_sequence;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    int stream;
    AVPacket *pkt;
    AVFrame *frame;
    int flushing;
    const char *cur; /* file being decoded */
    int64_t decoded; /* frames returned so far */
} vm_src;

static const char *const image_exts[] = {".png",  ".jpg",  ".jpeg", ".bmp", ".tif",
                                         ".tiff", ".webp", ".ppm",  ".pgm", ".pnm",
                                         ".tga",  ".jxl",  ".exr",  ".dpx", NULL};

static int has_image_ext(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; image_exts[i]; i++) {
        size_t e = strlen(image_exts[i]);
        if (n > e && strcasecmp(name + n - e, image_exts[i]) == 0) return 1;
    }
    return 0;
}

static int cmp_natural(const void *a, const void *b) {
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

static int add_file(vm_src *s, int *cap, char *name) {
    if (!name) return vm_fail(VAE_ENOMEM, "out of memory");
    if (s->nfiles == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        char **f = realloc(s->files, (size_t)nc * sizeof *f);
        if (!f) {
            free(name);
            return vm_fail(VAE_ENOMEM, "out of memory");
        }
        s->files = f;
        *cap = nc;
    }
    s->files[s->nfiles++] = name;
    return VAE_OK;
}

static int list_folder(vm_src *s, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return vm_fail(VAE_EIO, "%s: cannot list the folder: %s", dir, strerror(errno));
    int cap = 0, rc = VAE_OK;
    struct dirent *e;
    while (rc == VAE_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !has_image_ext(e->d_name)) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (p) snprintf(p, n, "%s/%s", dir, e->d_name);
        rc = add_file(s, &cap, p);
    }
    closedir(d);
    if (rc) return rc;
    if (s->nfiles == 0)
        return vm_fail(VAE_EIO, "%s: the folder holds no image files (%s, ...)", dir,
                       image_exts[0]);
    qsort(s->files, (size_t)s->nfiles, sizeof *s->files, cmp_natural);
    return VAE_OK;
}

static char *pattern_name(const char *pattern, int i) {
    int n = snprintf(NULL, 0, pattern, i);
    char *p = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (p) snprintf(p, (size_t)n + 1, pattern, i);
    return p;
}

static int list_pattern(vm_src *s, const char *pattern) {
    int first = -1, cap = 0, rc;
    for (int i = 0; i < 100 && first < 0; i++) {
        char *p = pattern_name(pattern, i);
        if (!p) return vm_fail(VAE_ENOMEM, "out of memory");
        if (access(p, F_OK) == 0) first = i;
        free(p);
    }
    if (first < 0)
        return vm_fail(VAE_EIO, "%s: no file matches the pattern (first index tried 0..99)",
                       pattern);
    for (int i = first; i < INT_MAX; i++) {
        char *p = pattern_name(pattern, i);
        if (!p) return vm_fail(VAE_ENOMEM, "out of memory");
        if (access(p, F_OK) != 0) {
            free(p);
            break;
        }
        if ((rc = add_file(s, &cap, p))) return rc;
    }
    return VAE_OK;
}

static void src_close_file(vm_src *s) {
    avcodec_free_context(&s->dec);
    avformat_close_input(&s->fmt);
    s->flushing = 0;
}

static void src_free(vm_src *s) {
    src_close_file(s);
    av_packet_free(&s->pkt);
    av_frame_free(&s->frame);
    for (int i = 0; i < s->nfiles; i++)
        free(s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

/* avformat_find_stream_info decodes a first frame of each stream: the image size bound applies
 * there already, not only to our own decoder. */
static int find_stream_info(AVFormatContext *fmt) {
    AVDictionary **opts = av_calloc(fmt->nb_streams ? fmt->nb_streams : 1, sizeof *opts);
    if (!opts) return AVERROR(ENOMEM);
    for (unsigned i = 0; i < fmt->nb_streams; i++) av_dict_set_int(&opts[i], "max_pixels", VAE_MAX_IMAGE_PIXELS, 0);
    int r = avformat_find_stream_info(fmt, opts);
    for (unsigned i = 0; i < fmt->nb_streams; i++) av_dict_free(&opts[i]);
    av_free(opts);
    return r;
}

/* A PNG's size, from its IHDR, is checked before FFmpeg reads the file: its decoder allocates the
 * whole frame for the header's size before it looks at the data (found by tests/fuzz:
 * fuzz_media, a 188-byte PNG declaring 62980x1024 16-bit RGBA: 0.5 GB). 1: not a PNG, or a size
 * that is supported; 0: refused, *w and *h set. */
static int png_size_ok(const char *path, uint32_t *w, uint32_t *h) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    const int n = f ? (int)fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (n < 24 || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0) return 1;
    *w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
    *h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
    return *w <= VAE_MAX_IMAGE_SIDE && *h <= VAE_MAX_IMAGE_SIDE &&
           (int64_t)*w * *h <= VAE_MAX_IMAGE_PIXELS;
}

static int src_open_file(vm_src *s, const char *path) {
    struct stat st;
    vm_av_last_clear();
    if (stat(path, &st) != 0) return vm_fail(VAE_EIO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return vm_fail(VAE_EIO, "%s: is a folder", path);
    /* FFmpeg's open of a FIFO waits for a writer forever, and a device streams without end. */
    if (!S_ISREG(st.st_mode)) return vm_fail(VAE_EIO, "%s: not a regular file (a FIFO or device)", path);
    if (st.st_size == 0) return vm_fail(VAE_EFORMAT, "%s: file is empty (0 bytes)", path);
    uint32_t pw = 0, ph = 0;
    if (!png_size_ok(path, &pw, &ph))
        return vm_fail(VAE_EUNSUPPORTED,
                       "%s: a PNG of %ux%u pixels is larger than supported (at "
                       "most %lld pixels, %d per side)",
                       path, pw, ph, (long long)VAE_MAX_IMAGE_PIXELS, VAE_MAX_IMAGE_SIDE);
    AVDictionary *o = NULL;
    av_dict_set(&o, "pattern_type", "none", 0); /* image2: a '%' in a real name is not a pattern */
    int r = avformat_open_input(&s->fmt, path, NULL, &o);
    av_dict_free(&o);
    if (r < 0) {
        int code = vm_code_from_av(r, 1);
        return vm_fail(code, "%s: not a video or image that FFmpeg can read: %s", path,
                       vm_averr(r));
    }
    const char *dn = s->fmt->iformat->name;
    if (strcmp(dn, "tty") == 0 || strcmp(dn, "data") == 0 || strcmp(dn, "bin") == 0)
        return vm_fail(VAE_EFORMAT, "%s: not a video or image file (FFmpeg sees %s data)", path,
                       dn);
    if ((r = find_stream_info(s->fmt)) < 0)
        return vm_fail(VAE_EFORMAT, "%s: cannot read the stream headers: %s", path, vm_averr(r));
    const AVCodec *codec = NULL;
    s->stream = av_find_best_stream(s->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (s->stream == AVERROR_STREAM_NOT_FOUND || s->stream < 0) {
        if (s->stream == AVERROR_DECODER_NOT_FOUND)
            return vm_fail(VAE_EUNSUPPORTED, "%s: this FFmpeg build has no decoder for its video",
                           path);
        return vm_fail(VAE_EFORMAT, "%s: has no video stream (%s)", path, dn);
    }
    AVStream *vs = s->fmt->streams[s->stream];
    for (unsigned i = 0; i < s->fmt->nb_streams; i++)
        if ((int)i != s->stream) s->fmt->streams[i]->discard = AVDISCARD_ALL;
    if (vs->codecpar->width <= 0 || vs->codecpar->height <= 0)
        /* find_stream_info leaves it unknown too when max_pixels refused the first frame */
        return vm_fail(VAE_EFORMAT, "%s: video stream has no frame size (a corrupt header, or frames larger "
                       "than the %lld pixels supported)", path, (long long)VAE_MAX_IMAGE_PIXELS);
    if ((int64_t)vs->codecpar->width * vs->codecpar->height > VAE_MAX_IMAGE_PIXELS ||
        vs->codecpar->width > VAE_MAX_IMAGE_SIDE || vs->codecpar->height > VAE_MAX_IMAGE_SIDE)
        return vm_fail(VAE_EUNSUPPORTED, "%s: frames of %dx%d pixels are larger than supported (at most %lld pixels, "
                       "%d per side)", path, vs->codecpar->width, vs->codecpar->height,
                       (long long)VAE_MAX_IMAGE_PIXELS, VAE_MAX_IMAGE_SIDE);
    s->dec = avcodec_alloc_context3(codec);
    if (!s->dec) return vm_fail(VAE_ENOMEM, "out of memory");
    if ((r = avcodec_parameters_to_context(s->dec, vs->codecpar)) < 0)
        return vm_fail(VAE_EFORMAT, "%s: %s", path, vm_averr(r));
    s->dec->pkt_timebase = vs->time_base;
    s->dec->thread_count = s->is_sequence ? 1 : 0;
    s->dec->err_recognition |= AV_EF_EXPLODE; /* corrupt data is an error, not concealed */
    s->dec->max_pixels = VAE_MAX_IMAGE_PIXELS; /* a frame that changes size mid-stream is refused too */
    if ((r = avcodec_open2(s->dec, codec, NULL)) < 0)
        return vm_fail(vm_code_from_av(r, 1), "%s: cannot open the %s decoder: %s", path,
                       codec->name, vm_averr(r));
    s->cur = path;
    s->flushing = 0;
    return VAE_OK;
}

/* Opens path: a file, a pattern or a folder. */
static int src_open(vm_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->pkt = av_packet_alloc();
    s->frame = av_frame_alloc();
    if (!s->pkt || !s->frame) return vm_fail(VAE_ENOMEM, "out of memory");
    struct stat st;
    int rc;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        s->is_sequence = 1;
        if ((rc = list_folder(s, path))) return rc;
    } else if (vae_media_is_pattern(path) && stat(path, &st) != 0) {
        s->is_sequence = 1;
        if ((rc = list_pattern(s, path))) return rc;
    } else if (strchr(path, '%') && stat(path, &st) != 0 && !vm_pattern_ok(path)) {
        return vm_fail(VAE_EINVAL,
                       "%s: a frame pattern needs exactly one %%d conversion "
                       "(e.g. frames/%%05d.png)",
                       path);
    }
    if (s->is_sequence) {
        s->next_file = 1;
        return src_open_file(s, s->files[0]);
    }
    return src_open_file(s, path);
}

/* Next decoded frame into s->frame: 1 = frame, 0 = end, < 0 = error. */
static int src_next(vm_src *s) {
    int r;
    for (;;) {
        if (!s->dec) {
            if (!s->is_sequence || s->next_file >= s->nfiles) return 0;
            if ((r = src_open_file(s, s->files[s->next_file++]))) return r;
        }
        av_frame_unref(s->frame);
        r = avcodec_receive_frame(s->dec, s->frame);
        if (r == 0) {
            s->decoded++;
            /* a sequence takes the first frame of each file */
            if (s->is_sequence) src_close_file(s);
            return 1;
        }
        if (r == AVERROR_EOF) {
            if (s->is_sequence) return vm_fail(VAE_EFORMAT, "%s: holds no decodable image", s->cur);
            return 0;
        }
        if (r != AVERROR(EAGAIN))
            return vm_fail(VAE_EFORMAT, "%s: corrupt video data after %lld frames: %s", s->cur,
                           (long long)s->decoded, vm_averr(r));
        if (s->flushing) return vm_fail(VAE_EFORMAT, "%s: decoder stalled", s->cur);
        r = av_read_frame(s->fmt, s->pkt);
        if (r == AVERROR_EOF) {
            avcodec_send_packet(s->dec, NULL);
            s->flushing = 1;
            continue;
        }
        if (r < 0)
            return vm_fail(vm_code_from_av(r, 1), "%s: read error after %lld frames: %s", s->cur,
                           (long long)s->decoded, vm_averr(r));
        if (s->pkt->stream_index != s->stream) {
            av_packet_unref(s->pkt);
            continue;
        }
        r = avcodec_send_packet(s->dec, s->pkt);
        av_packet_unref(s->pkt);
        if (r < 0 && r != AVERROR(EAGAIN))
            return vm_fail(VAE_EFORMAT, "%s: corrupt video data after %lld frames: %s", s->cur,
                           (long long)s->decoded, vm_averr(r));
    }
}

/* ---- colour: what the stream says, or a documented guess ---------------------------------------
 */
static enum AVPixelFormat unjpeg(enum AVPixelFormat f, int *full) {
    switch (f) {
    case AV_PIX_FMT_YUVJ420P: *full = 1; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: *full = 1; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: *full = 1; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: *full = 1; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: *full = 1; return AV_PIX_FMT_YUV411P;
    default: return f;
    }
}

typedef struct vm_color {
    int sws_cs;  /* SWS_CS_* */
    int full;    /* source range */
    int guessed; /* matrix or range not tagged */
    const char *name;
} vm_color;

static vm_color color_of(const AVFrame *f, enum AVCodecID codec, enum AVPixelFormat *fmt) {
    vm_color c = {SWS_CS_ITU709, 0, 0, "bt709"};
    int jfull = 0;
    *fmt = unjpeg((enum AVPixelFormat)f->format, &jfull);
    int yuv = vm_pix_is_yuv(*fmt);
    int still = codec == AV_CODEC_ID_MJPEG || codec == AV_CODEC_ID_PNG || codec == AV_CODEC_ID_WEBP;
    if (f->color_range == AVCOL_RANGE_JPEG || jfull)
        c.full = 1;
    else if (f->color_range == AVCOL_RANGE_MPEG)
        c.full = 0;
    else {
        c.full = yuv ? (codec == AV_CODEC_ID_MJPEG) : 1;
        if (yuv) c.guessed = 1;
    }
    static const struct {
        enum AVColorSpace space;
        int sws_cs;
        const char *name;
    } known[] = {{AVCOL_SPC_BT709, SWS_CS_ITU709, "bt709"},
                 {AVCOL_SPC_BT470BG, SWS_CS_ITU601, "bt601"},
                 {AVCOL_SPC_SMPTE170M, SWS_CS_ITU601, "bt601"},
                 {AVCOL_SPC_SMPTE240M, SWS_CS_SMPTE240M, "smpte240m"},
                 {AVCOL_SPC_FCC, SWS_CS_FCC, "fcc"},
                 {AVCOL_SPC_BT2020_NCL, SWS_CS_BT2020, "bt2020"},
                 {AVCOL_SPC_BT2020_CL, SWS_CS_BT2020, "bt2020"}};
    size_t k = 0;
    while (k < sizeof known / sizeof known[0] && known[k].space != f->colorspace) k++;
    if (k < sizeof known / sizeof known[0]) {
        c.sws_cs = known[k].sws_cs;
        c.name = known[k].name;
    } else if (yuv) { /* unspecified: BT.601 for stills and SD, else the BT.709 default */
        c.guessed = 1;
        if (still || (f->width < 1280 && f->height <= 576)) {
            c.sws_cs = SWS_CS_ITU601;
            c.name = "bt601";
        }
    }
    if (!yuv) c.name = "rgb";
    return c;
}

/* ---- reading into a tensor ---------------------------------------------------------------------
 */
void vae_media_read_options_default(vae_media_read_options *o) {
    memset(o, 0, sizeof *o);
    o->lo = -1.0f;
    o->hi = 1.0f;
    o->fit = VAE_FIT_ERROR;
}

void vae_media_tensor_free(vae_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

typedef struct vm_geom {
    int src_w, src_h; /* decoded */
    int sw, sh;       /* after scaling */
    int cx, cy;       /* crop offset into the scaled frame */
    int fw, fh;       /* final */
} vm_geom;

static int plan_geometry(const vae_media_read_options *o, int w, int h, vm_geom *g, char *desc,
                         size_t dlen, const char *path) {
    g->src_w = w;
    g->src_h = h;
    int tw = o->width, th = o->height;
    if (tw > 0 && th <= 0)
        th = (int)lround((double)h * tw / w);
    else if (th > 0 && tw <= 0)
        tw = (int)lround((double)w * th / h);
    else if (tw <= 0 && th <= 0)
        tw = w, th = h;
    if (tw < 1) tw = 1;
    if (th < 1) th = 1;
    int m = o->spatial_multiple > 1 ? o->spatial_multiple : 1;
    g->sw = tw, g->sh = th, g->cx = g->cy = 0, g->fw = tw, g->fh = th;
    int n = 0;
    desc[0] = 0;
    if (tw != w || th != h)
        n += snprintf(desc + n, dlen - n, "scaled %dx%d -> %dx%d", w, h, tw, th);
    if (tw % m == 0 && th % m == 0) return VAE_OK;
    int dw = tw / m * m, dh = th / m * m, uw = (tw + m - 1) / m * m, uh = (th + m - 1) / m * m;
    int rw = (int)lround((double)tw / m) * m, rh = (int)lround((double)th / m) * m;
    if (rw < m) rw = m;
    if (rh < m) rh = m;
    switch (o->fit) {
    case VAE_FIT_CROP:
        if (dw == 0 || dh == 0)
            return vm_fail(VAE_ESHAPE, "%s: %dx%d is smaller than %d: cannot crop", path, tw, th,
                           m);
        g->fw = dw, g->fh = dh, g->cx = (tw - dw) / 2, g->cy = (th - dh) / 2;
        snprintf(desc + n, dlen - n, "%scropped %dx%d -> %dx%d (centre)", n ? ", " : "", tw, th, dw,
                 dh);
        return VAE_OK;
    case VAE_FIT_PAD:
        g->fw = uw, g->fh = uh;
        snprintf(desc + n, dlen - n, "%spadded %dx%d -> %dx%d (bottom/right, edge pixels)",
                 n ? ", " : "", tw, th, uw, uh);
        return VAE_OK;
    case VAE_FIT_RESIZE:
        g->sw = g->fw = rw, g->sh = g->fh = rh;
        desc[0] = 0;
        snprintf(desc, dlen, "scaled %dx%d -> %dx%d", w, h, rw, rh);
        return VAE_OK;
    default:
        return vm_fail(VAE_ESHAPE,
                       "%s: frames are %dx%d%s, but this model needs a width and height that are "
                       "multiples of %d: pass fit=crop (-> %dx%d), fit=pad (-> %dx%d), fit=resize "
                       "(-> %dx%d) or width/height",
                       path, tw, th, (tw != w || th != h) ? " after scaling" : "", m, dw, dh, uw,
                       uh, rw, rh);
    }
}

typedef struct vm_conv {
    struct SwsContext *sws;
    int key_w, key_h, key_fmt, key_cs, key_full, key_loc;
    enum AVPixelFormat dst_fmt; /* GBRP or GBRP16 */
    uint8_t *planes[4];
    int linesize[4];
} vm_conv;

static void conv_free(vm_conv *c) {
    sws_freeContext(c->sws);
    av_freep(&c->planes[0]);
    memset(c, 0, sizeof *c);
}

static int conv_setup(vm_conv *c, const AVFrame *f, enum AVCodecID codec, const vm_geom *g,
                      vm_color *color_out) {
    enum AVPixelFormat src;
    vm_color col = color_of(f, codec, &src);
    *color_out = col;
    int loc = f->chroma_location;
    if (c->sws && c->key_w == f->width && c->key_h == f->height && c->key_fmt == (int)src &&
        c->key_cs == col.sws_cs && c->key_full == col.full && c->key_loc == loc)
        return VAE_OK;
    sws_freeContext(c->sws);
    c->sws = sws_alloc_context();
    if (!c->sws) return vm_fail(VAE_ENOMEM, "out of memory");
    struct SwsContext *s = c->sws;
    av_opt_set_int(s, "srcw", f->width, 0);
    av_opt_set_int(s, "srch", f->height, 0);
    av_opt_set_int(s, "src_format", src, 0);
    av_opt_set_int(s, "dstw", g->sw, 0);
    av_opt_set_int(s, "dsth", g->sh, 0);
    av_opt_set_int(s, "dst_format", c->dst_fmt, 0);
    av_opt_set_int(
        s, "sws_flags",
        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP | SWS_BITEXACT, 0);
    av_opt_set_int(s, "src_range", col.full, 0);
    av_opt_set_int(s, "dst_range", 1, 0);
    av_opt_set(s, "sws_dither", "none", 0);
    /* chroma siting: tagged, else MPEG-2/H.264's default (left) for video, centre for JPEG */
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(src);
    if (d && (d->log2_chroma_w || d->log2_chroma_h) && vm_pix_is_yuv(src)) {
        int x = 0, y = 128;
        if (loc != AVCHROMA_LOC_UNSPECIFIED)
            avcodec_enum_to_chroma_pos(&x, &y, loc);
        else if (codec == AV_CODEC_ID_MJPEG)
            x = 128;
        if (!d->log2_chroma_h) y = 0;
        av_opt_set_int(s, "src_h_chr_pos", x, 0);
        av_opt_set_int(s, "src_v_chr_pos", y, 0);
    }
    if (sws_init_context(s, NULL, NULL) < 0)
        return vm_fail(VAE_EUNSUPPORTED, "cannot convert %s %dx%d to RGB %dx%d (swscale)",
                       av_get_pix_fmt_name(src), f->width, f->height, g->sw, g->sh);
    if (vm_pix_is_yuv(src))
        sws_setColorspaceDetails(s, sws_getCoefficients(col.sws_cs), col.full,
                                 sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    c->key_w = f->width, c->key_h = f->height, c->key_fmt = (int)src, c->key_cs = col.sws_cs;
    c->key_full = col.full, c->key_loc = loc;
    if (!c->planes[0]) {
        int r = av_image_alloc(c->planes, c->linesize, g->sw, g->sh, c->dst_fmt, 32);
        if (r < 0) return vm_fail(VAE_ENOMEM, "out of memory for a %dx%d frame", g->sw, g->sh);
    }
    return VAE_OK;
}

/* Frames are kept as 16-bit codes [T][3][fh][fw] until the count is final. */
typedef struct vm_store {
    uint16_t *v;
    int64_t n, cap; /* frames */
    int64_t frame_vals;
} vm_store;

static int store_push(vm_store *st) {
    if (st->n == st->cap) {
        int64_t nc = st->cap ? st->cap * 2 : 16;
        uint16_t *v = realloc(st->v, (size_t)(nc * st->frame_vals) * sizeof *v);
        if (!v)
            return vm_fail(VAE_ENOMEM, "out of memory for %lld frames of %lld values",
                           (long long)nc, (long long)st->frame_vals);
        st->v = v;
        st->cap = nc;
    }
    st->n++;
    return VAE_OK;
}

/* scaled GBRP(16) planes -> RGB codes of the final frame (crop offset / edge padding) */
static void put_frame(const vm_conv *c, const vm_geom *g, uint16_t *dst) {
    static const int plane_of[3] = {2, 0, 1}; /* R, G, B in GBRP order */
    int wide = c->dst_fmt == AV_PIX_FMT_GBRP16;
    for (int ch = 0; ch < 3; ch++) {
        const uint8_t *base = c->planes[plane_of[ch]];
        int ls = c->linesize[plane_of[ch]];
        for (int y = 0; y < g->fh; y++) {
            int sy = y + g->cy;
            if (sy >= g->sh) sy = g->sh - 1;
            const uint8_t *row = base + (size_t)sy * ls;
            uint16_t *o = dst + ((size_t)ch * g->fh + y) * g->fw;
            for (int x = 0; x < g->fw; x++) {
                int sx = x + g->cx;
                if (sx >= g->sw) sx = g->sw - 1;
                o[x] = wide ? ((const uint16_t *)row)[sx] : row[sx];
            }
        }
    }
}

static void fill_info_from_stream(vm_src *s, vae_media_info *info) {
    AVStream *st = s->fmt->streams[s->stream];
    AVCodecParameters *p = st->codecpar;
    snprintf(info->path, sizeof info->path, "%s", s->path);
    if (s->is_sequence)
        snprintf(info->container, sizeof info->container, "image sequence (%d files, %s)",
                 s->nfiles, s->fmt->iformat->name);
    else
        snprintf(info->container, sizeof info->container, "%s", s->fmt->iformat->name);
    const char *prof = avcodec_profile_name(p->codec_id, p->profile);
    snprintf(info->codec, sizeof info->codec, "%s%s%s%s", avcodec_get_name(p->codec_id),
             prof ? " (" : "", prof ? prof : "", prof ? ")" : "");
    const char *pf = av_get_pix_fmt_name((enum AVPixelFormat)p->format);
    snprintf(info->pix_fmt, sizeof info->pix_fmt, "%s", pf ? pf : "unknown");
    info->bit_depth = p->format >= 0 ? vm_pix_depth((enum AVPixelFormat)p->format) : 8;
    info->width = p->width;
    info->height = p->height;
    snprintf(info->color_range, sizeof info->color_range, "%s",
             p->color_range ? av_color_range_name(p->color_range) : "unspecified");
    snprintf(info->color_matrix, sizeof info->color_matrix, "%s",
             p->color_space != AVCOL_SPC_UNSPECIFIED ? av_color_space_name(p->color_space)
                                                     : "unspecified");
    snprintf(info->color_primaries, sizeof info->color_primaries, "%s",
             p->color_primaries != AVCOL_PRI_UNSPECIFIED
                 ? av_color_primaries_name(p->color_primaries)
                 : "unspecified");
    snprintf(info->color_transfer, sizeof info->color_transfer, "%s",
             p->color_trc != AVCOL_TRC_UNSPECIFIED ? av_color_transfer_name(p->color_trc)
                                                   : "unspecified");
    const AVCodecDescriptor *cd = avcodec_descriptor_get(p->codec_id);
    (void)cd;
    int image_codec = strstr(s->fmt->iformat->name, "_pipe") != NULL ||
                      strcmp(s->fmt->iformat->name, "image2") == 0;
    AVRational fr = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    info->fps_num = 0, info->fps_den = 1;
    if (!image_codec && !s->is_sequence && fr.num > 0 && fr.den > 0)
        info->fps_num = fr.num, info->fps_den = fr.den;
    info->duration = s->fmt->duration > 0 ? (double)s->fmt->duration / AV_TIME_BASE : 0;
    if (st->duration > 0 && st->time_base.den > 0)
        info->duration = st->duration * av_q2d(st->time_base);
    info->is_sequence = s->is_sequence;
    info->is_image = !s->is_sequence && image_codec;
    info->frames = -1;
    info->frames_exact = 0;
    if (s->is_sequence)
        info->frames = s->nfiles, info->frames_exact = 1;
    else if (info->is_image)
        info->frames = 1, info->frames_exact = 1;
    else if (st->nb_frames > 0)
        info->frames = st->nb_frames, info->frames_exact = 1;
    else if (info->duration > 0 && info->fps_num > 0)
        info->frames = llround(info->duration * info->fps_num / info->fps_den);
    info->has_audio = 0;
    for (unsigned i = 0; i < s->fmt->nb_streams; i++)
        if (s->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) info->has_audio = 1;
    snprintf(info->color_used, sizeof info->color_used, "%s", "");
}

int vae_media_probe(const char *path, vae_media_info *info) {
    vm_init();
    vm_error_clear();
    if (!path || !info) return vm_fail(VAE_EINVAL, "vae_media_probe: NULL argument");
    memset(info, 0, sizeof *info);
    vm_src s;
    int rc = src_open(&s, path);
    if (rc == VAE_OK) {
        fill_info_from_stream(&s, info);
        /* how the reader will convert the colours: decode one frame */
        enum AVCodecID cid = s.fmt->streams[s.stream]->codecpar->codec_id;
        if (src_next(&s) == 1) {
            enum AVPixelFormat f;
            vm_color c = color_of(s.frame, cid, &f);
            if (vm_pix_is_yuv(f))
                snprintf(info->color_used, sizeof info->color_used, "%s %s range%s", c.name,
                         c.full ? "full" : "limited", c.guessed ? " (not tagged: assumed)" : "");
            else
                snprintf(info->color_used, sizeof info->color_used, "RGB");
        }
        if (!info->frames_exact && !s.is_sequence) {
            /* count the packets of the video stream (no decoding) */
            src_free(&s);
            if (src_open(&s, path) == VAE_OK) {
                int64_t n = 0;
                while (av_read_frame(s.fmt, s.pkt) >= 0) {
                    if (s.pkt->stream_index == s.stream) n++;
                    av_packet_unref(s.pkt);
                }
                info->frames = n;
                info->frames_exact = 1;
            }
        }
        vm_error_clear();
    }
    src_free(&s);
    return rc;
}

int vae_media_read_video(const char *path, const vae_media_read_options *opts, vae_tensor *out,
                         vae_media_info *info_out) {
    vm_init();
    vm_error_clear();
    if (!path || !out) return vm_fail(VAE_EINVAL, "vae_media_read_video: NULL argument");
    memset(out, 0, sizeof *out);
    vae_media_read_options o;
    if (opts)
        o = *opts;
    else
        vae_media_read_options_default(&o);
    if (o.start < 0 || o.frames < 0) return vm_fail(VAE_EINVAL, "negative start or frame count");
    if (!(o.hi != o.lo) || !isfinite(o.lo) || !isfinite(o.hi))
        return vm_fail(VAE_EINVAL, "bad pixel range [%g, %g]", o.lo, o.hi);
    vae_media_info info_local, *info = info_out ? info_out : &info_local;
    memset(info, 0, sizeof *info);

    vm_src s;
    vm_conv cv;
    vm_store st;
    memset(&cv, 0, sizeof cv);
    memset(&st, 0, sizeof st);
    vm_geom g;
    memset(&g, 0, sizeof g);
    int rc = src_open(&s, path);
    if (rc) goto done;
    fill_info_from_stream(&s, info);
    enum AVCodecID codec_id = s.fmt->streams[s.stream]->codecpar->codec_id;
    int total = o.frames > 0 ? o.frames : info->frames > 0 ? (int)(info->frames - o.start) : -1;
    int64_t index = 0;
    char desc[256] = "";
    for (;;) {
        if (o.frames > 0 && st.n >= o.frames) break;
        int r = src_next(&s);
        if (r < 0) {
            rc = r;
            goto done;
        }
        if (r == 0) break;
        if (index++ < o.start) continue;
        AVFrame *f = s.frame;
        if (!st.frame_vals) {
            if ((rc = plan_geometry(&o, f->width, f->height, &g, desc, sizeof desc, path)))
                goto done;
            cv.dst_fmt = vm_pix_depth((enum AVPixelFormat)f->format) > 8 ? AV_PIX_FMT_GBRP16
                                                                         : AV_PIX_FMT_GBRP;
            st.frame_vals = 3LL * g.fw * g.fh;
        }
        vm_color col;
        if ((rc = conv_setup(&cv, f, codec_id, &g, &col))) goto done;
        if (!info->color_used[0]) {
            enum AVPixelFormat pf;
            color_of(f, codec_id, &pf);
            if (vm_pix_is_yuv(pf))
                snprintf(info->color_used, sizeof info->color_used, "%s %s range%s", col.name,
                         col.full ? "full" : "limited",
                         col.guessed ? " (not tagged: assumed)" : "");
            else
                snprintf(info->color_used, sizeof info->color_used, "RGB");
        }
        if (sws_scale(cv.sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, cv.planes,
                      cv.linesize) != g.sh) {
            rc = vm_fail(VAE_EFORMAT, "%s: frame %lld: swscale failed", path, (long long)index - 1);
            goto done;
        }
        if ((rc = store_push(&st))) goto done;
        put_frame(&cv, &g, st.v + (st.n - 1) * st.frame_vals);
        if (o.progress && o.progress((int)st.n, total, o.user)) {
            rc = vm_fail(VAE_EINTERRUPTED, "reading %s stopped after %lld frames", path,
                         (long long)st.n);
            goto done;
        }
    }
    if (st.n == 0) {
        rc = o.start > 0 ? vm_fail(VAE_ESHAPE, "%s: start=%d is past the end (%lld frames)", path,
                                   o.start, (long long)index)
                         : vm_fail(VAE_EFORMAT, "%s: no frame could be decoded", path);
        goto done;
    }
    if (o.frames > 0 && st.n < o.frames) {
        rc = vm_fail(VAE_ESHAPE,
                     "%s: %d frames asked from frame %d, but the video ends after %lld "
                     "(it has %lld frames)",
                     path, o.frames, o.start, (long long)st.n, (long long)index);
        goto done;
    }
    if (o.frames == 0 && info->frames_exact && !s.is_sequence && !info->is_image &&
        index < info->frames) {
        rc = vm_fail(VAE_EFORMAT,
                     "%s: truncated or corrupt: the container lists %lld frames, only "
                     "%lld could be decoded",
                     path, (long long)info->frames, (long long)index);
        goto done;
    }
    /* frame count rule of video models: 1 + k*tf */
    int tf = o.temporal_factor > 1 ? o.temporal_factor : 1;
    int64_t n = st.n;
    if (tf > 1 && (n - 1) % tf) {
        int64_t down = 1 + (n - 1) / tf * tf, up = 1 + ((n - 1) / tf + 1) * tf;
        if (o.fit == VAE_FIT_ERROR) {
            rc = vm_fail(VAE_ESHAPE,
                         "%s: %lld frames, but this model takes 1 + %d*k frames: pass "
                         "frames=%lld, fit=crop (drops the last %lld) or fit=pad "
                         "(repeats the last frame %lld times)",
                         path, (long long)n, tf, (long long)down, (long long)(n - down),
                         (long long)(up - n));
            goto done;
        }
        if (o.fit == VAE_FIT_PAD) {
            while (st.n < up) {
                if ((rc = store_push(&st))) goto done;
                memcpy(st.v + (st.n - 1) * st.frame_vals, st.v + (st.n - 2) * st.frame_vals,
                       (size_t)st.frame_vals * sizeof *st.v);
            }
            size_t l = strlen(desc);
            snprintf(desc + l, sizeof desc - l, "%s%lld frames padded to %lld (last repeated)",
                     l ? ", " : "", (long long)n, (long long)up);
        } else {
            st.n = down;
            size_t l = strlen(desc);
            snprintf(desc + l, sizeof desc - l, "%s%lld frames cut to %lld", l ? ", " : "",
                     (long long)n, (long long)down);
        }
    }
    /* codes -> float [1,3,T,H,W] */
    int64_t T = st.n, plane = (int64_t)g.fw * g.fh;
    float *data = malloc((size_t)(T * 3 * plane) * sizeof(float));
    if (!data) {
        rc = vm_fail(VAE_ENOMEM, "out of memory for a %lldx3x%dx%d float tensor", (long long)T,
                     g.fh, g.fw);
        goto done;
    }
    const float div = cv.dst_fmt == AV_PIX_FMT_GBRP16 ? 65535.0f : 255.0f;
    const float scale = (o.hi - o.lo) / div;
    for (int64_t t = 0; t < T; t++)
        for (int c = 0; c < 3; c++) {
            const uint16_t *src = st.v + t * st.frame_vals + c * plane;
            float *dst = data + ((int64_t)c * T + t) * plane;
            for (int64_t i = 0; i < plane; i++)
                dst[i] = o.lo + scale * (float)src[i];
        }
    const int64_t shape[5] = {1, 3, T, g.fh, g.fw};
    *out = vae_tensor_dense(5, shape, VAE_DTYPE_F32, data);
    info->out_width = g.fw;
    info->out_height = g.fh;
    info->out_frames = (int)T;
    snprintf(info->geometry, sizeof info->geometry, "%s", desc);
done:
    free(st.v);
    conv_free(&cv);
    src_free(&s);
    return rc;
}
