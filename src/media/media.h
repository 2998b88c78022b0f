/*
 * media.h -- video and image files <-> vae tensors, through FFmpeg (library `vae_media`).
 *
 * A separate library: the core (`vae`) does not depend on it. It uses only the public types of
 * vae.h (vae_tensor, the VAE_E* codes, vae_log_fn).
 *
 * Reading: any video FFmpeg can demux and decode (mp4, mkv, mov, webm, ...), single images (PNG,
 * JPEG, WebP, BMP, TIFF, ...), a printf pattern of frames ("frames/%05d.png", numbered from the
 * first index found in 0..99, consecutive) or a folder of images (sorted in natural order). Pixels
 * are converted to RGB by swscale with the stream's own matrix and range (BT.709 / BT.601 /
 * BT.2020, limited or full); untagged YUV is taken as BT.709 for HD sizes (width >= 1280 or
 * height > 576) and BT.601 below, limited range (JPEG: BT.601 full range). 8-bit sources give
 * 8-bit RGB (v/255), deeper sources 16-bit RGB (v/65535), then mapped linearly to [lo, hi].
 *
 * Writing: H.264 (libx264) or H.265 (libx265) in .mp4/.mov/.mkv as yuv420p (8-bit) or
 * yuv420p10le (10-bit), BT.709 limited range; lossless FFV1 in .mkv as RGB (bgr0 8-bit, gbrp10le
 * 10-bit, tagged RGB/full range/BT.709 primaries); PNG sequences from a pattern (rgb24, or rgb48
 * for 10-bit and more), numbered from 0 (frame index). Values are mapped [lo, hi] -> [0, 1],
 * clamped, and rounded to the nearest code (RGB -> YUV by swscale from 16-bit RGB, without
 * dithering). Every output goes to a temporary name in the same folder and is renamed when
 * complete: failures and vae_media_writer_abort() leave no file behind. Encoders run single-
 * threaded with bit-exact flags, so the same input gives byte-identical files.
 *
 * Every function that can fail returns VAE_OK or a negative VAE_E* code, with a message for
 * vae_media_last_error() (thread-local), and never prints (FFmpeg's own messages go to the log
 * callback at DEBUG level).
 */
#ifndef VAE_MEDIA_H
#define VAE_MEDIA_H

#include <stdint.h>

#include "vae.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "libavformat 59.27.100, libavcodec 59.37.100, libswscale 6.7.100, libavutil 57.28.100" */
const char *vae_media_version(void);
/* Detail of the last failure of a vae_media_* call on this thread ("" if none). */
const char *vae_media_last_error(void);
/* Log sink for the media library and FFmpeg's messages (FFmpeg's are sent at VAE_LOG_DEBUG). */
void vae_media_set_log_callback(vae_log_fn fn, void *user, int min_level);

/* ---- what a file holds ------------------------------------------------------------------------
 */
typedef struct vae_media_info {
    char path[1024];
    char container[128]; /* "mov,mp4,m4a,3gp,3g2,mj2", "png_pipe", "image sequence" */
    char codec[64];      /* "h264 (High)" */
    char pix_fmt[32];    /* "yuv420p" */
    char color_range[16], color_matrix[24], color_primaries[24], color_transfer[24];
    char color_used[64]; /* how the reader converts: "bt709 limited (tagged)", "bt601 full (guess)"
                          */
    int width, height;
    int bit_depth;        /* bits per component of the source */
    int fps_num, fps_den; /* 0/1 when unknown (still images) */
    int64_t frames;       /* frames in the file; -1 unknown */
    int frames_exact;     /* 1: counted or from the container's index; 0: estimated from duration */
    double duration;      /* seconds; 0 unknown */
    int is_image;         /* a single still image */
    int is_sequence;      /* a pattern or folder of images */
    int has_audio;        /* the file also has audio (ignored) */
    /* filled by vae_media_read_video: the tensor's geometry and what was done to get it */
    int out_width, out_height, out_frames;
    char geometry[256]; /* e.g. "scaled 1280x720 -> 320x180, padded to 320x184 (edge)" */
} vae_media_info;

/* Opens the file (or pattern or folder), reads headers (no decoding) and fills info. Frame counts
 * come from the container's index or by counting packets. */
int vae_media_probe(const char *path, vae_media_info *info);

/* ---- reading ----------------------------------------------------------------------------------
 */
typedef enum {
    VAE_FIT_ERROR = 0, /* fail (with a message naming the other policies) unless already valid */
    VAE_FIT_CROP,      /* centre-crop H, W down to multiples; drop trailing frames to 1 + k*tf */
    VAE_FIT_PAD,       /* pad bottom/right by repeating the edge pixels up to multiples; repeat the
                          last frame up to 1 + k*tf */
    VAE_FIT_RESIZE     /* rescale to the nearest multiples (>= one multiple); frames as CROP */
} vae_media_fit;

/* Called after each frame read/converted; return non-zero to stop (VAE_EINTERRUPTED). total is
 * -1 when unknown. */
typedef int (*vae_media_progress_fn)(int done, int total, void *user);

typedef struct vae_media_read_options {
    int start;            /* index of the first frame (decode order, from 0) */
    int frames;           /* read at most this many frames; 0 = to the end. More than the file has
                             is an error. */
    float lo, hi;         /* black -> lo, white -> hi (default -1, 1) */
    int width, height;    /* first scale to this size (0 = source; one 0 = keep aspect ratio) */
    int spatial_multiple; /* H and W must be multiples of this (the model's spatial factor) */
    int temporal_factor;  /* frame count must be 1 + k*this (4 for video models; 0/1 = any) */
    vae_media_fit fit;    /* how to make size and frame count valid */
    vae_media_progress_fn progress;
    void *user;
} vae_media_read_options;
void vae_media_read_options_default(vae_media_read_options *o);

/* Decodes frames [start, start+frames) to a newly allocated float32 tensor [1,3,T,H,W] in
 * [lo,hi] (free with vae_media_tensor_free). info may be NULL. */
int vae_media_read_video(const char *path, const vae_media_read_options *opts, vae_tensor *out,
                         vae_media_info *info);
void vae_media_tensor_free(vae_tensor *t);

/* ---- writing ----------------------------------------------------------------------------------
 */
typedef struct vae_media_write_options {
    const char *codec;    /* "h264", "h265" (= "hevc"), "ffv1", "png"; NULL = from the extension:
                             .mp4/.mov -> h264, .mkv -> ffv1, pattern .png -> png */
    int fps_num, fps_den; /* frame rate (default 24/1) */
    int crf;              /* quality for h264/h265 (0..51, lower is better); -1 = default: 18 for
                             h264, 20 for h265 */
    const char *preset;   /* x264/x265 preset; NULL = "medium" */
    int bit_depth;        /* 8 (default) or 10 */
    float lo, hi;         /* tensor values lo..hi map to black..white (default -1, 1) */
} vae_media_write_options;
void vae_media_write_options_default(vae_media_write_options *o);

/* 1 when path names an output this library writes (.mp4/.m4v/.mov/.mkv or a .png pattern). */
int vae_media_is_output_path(const char *path);
/* 1 when path is a printf frame pattern ("dir/%05d.png"). */
int vae_media_is_pattern(const char *path);

typedef struct vae_media_writer vae_media_writer;
/* Validates the options, creates the temporary file and writes the header. */
int vae_media_writer_open(vae_media_writer **w, const char *path, int width, int height,
                          const vae_media_write_options *opts);
/* Appends n frames: float32 [3][n][H][W] (channel-major, like a [1,3,n,H,W] tensor). */
int vae_media_writer_add(vae_media_writer *w, const float *frames, int n);
/* Flushes the encoder, finishes the file and renames it into place; frees w (also on failure,
 * when the temporary file is removed). */
int vae_media_writer_finish(vae_media_writer *w);
/* Removes the temporary file(s) and frees w. NULL is fine. */
void vae_media_writer_abort(vae_media_writer *w);
/* What the writer holds until finish, for a process that must remove it when it is killed: the
 * temporary file of a video, or the folder of a PNG sequence's frames (its files, then itself). */
const char *vae_media_writer_temp_path(const vae_media_writer *w);
int vae_media_writer_frames(const vae_media_writer *w);

/* 1 when this FFmpeg has the encoder behind codec ("h264" = libx264, "h265" = libx265, "ffv1",
 * "png"). */
int vae_media_encoder_available(const char *codec);

/* Whole tensor [1,3,T,H,W] or [1,3,H,W] -> file. */
int vae_media_write_video(const char *path, const vae_tensor *video,
                          const vae_media_write_options *opts);

#ifdef __cplusplus
}
#endif
#endif
