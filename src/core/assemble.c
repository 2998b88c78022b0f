/* assemble.c -- the output of tiled and blended plans, put together on the host (assemble.h).
 *
 * Tile-major plans finish a frame only with their last tile, so the output is held until then:
 * in memory ([t][c][h][w], each frame a planar chunk handed out without a copy) when it is small,
 * else in a temporary file, one block per tile and frame (one write per tile step, one read per
 * tile and frame), so that host memory stays one frame wide for any length.
 * The runners of a device group put their tiles at once: owned rows of an exact plan in memory
 * are disjoint; blends (which add into shared rows) and the file's block buffer take a lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "assemble.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "platform/platform.h" /* pthreads, the temporary file */

FILE *vae_spill_file(void) {
    const int fd = vae_plat_temp_anon(vae_plat_temp_dir()); /* gone once closed */
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w+b");
    if (!f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

struct vae_assembly {
    const vae_plan *plan;
    size_t frame; /* values per output frame: c * h * w */
    float *out;   /* in memory: [t][c][h][w] */
    int own_out;  /* out is this assembly's (else the caller's kept block) */
    float *wsum;  /* blend: [h][w] */
    FILE *spill;  /* else: per tile i, frame f: [c][own_h][own_w] at off[i] + f * block[i] */
    int64_t *off, *block;
    float *buf, *fbuf; /* a tile block, a frame */
    pthread_mutex_t mu;
    int rank, world; /* a rank of a group of processes: its tiles only (vae_assembly_set_rank) */
    int (*merge)(float *frame, int f, void *user);
    void *merge_user;
};

/* Blend weight of row i of a tile's output span `out` in a frame of n rows: raised-cosine ramps
 * of `ov` rows at the edges that other tiles overlap. */
static float ramp(int i, vae_span out, int n, int ov) {
    float wgt = 1.0f;
    if (ov <= 0) return wgt;
    const int a = i - out.lo, b = out.hi - 1 - i;
    if (out.lo > 0 && a < ov) wgt *= 0.5f - 0.5f * cosf(3.14159265f * (a + 0.5f) / ov);
    if (out.hi < n && b < ov) wgt *= 0.5f - 0.5f * cosf(3.14159265f * (b + 0.5f) / ov);
    return wgt;
}

static int64_t area(const vae_plan_tile *t) {
    return (int64_t)(t->own_y.hi - t->own_y.lo) * (t->own_x.hi - t->own_x.lo);
}

void vae_assembly_mem_free(vae_assembly_mem *m) {
    vae_free(m->p);
    m->p = NULL;
    m->vals = 0;
}

/* The in-memory output: the kept block (exact tiles write every value once, so it needs no
 * zeros; blends add up and do), or a zeroed block of its own. */
static int assembly_mem(vae_assembly *a, size_t vals, vae_assembly_mem *keep) {
    if (!keep) {
        a->own_out = 1;
        return (a->out = vae_calloc(vals, sizeof *a->out)) ? VAE_OK : VAE_ENOMEM;
    }
    if (keep->vals < vals) {
        vae_assembly_mem_free(keep);
        if (!(keep->p = vae_malloc(vals * sizeof *keep->p))) return VAE_ENOMEM;
        keep->vals = vals;
    }
    a->out = keep->p;
    if (a->plan->kind == VAE_PLAN_BLEND) memset(a->out, 0, vals * sizeof *a->out);
    return VAE_OK;
}

int vae_assembly_open(vae_assembly **out, const vae_plan *pl, int64_t max_host_bytes,
                      vae_assembly_mem *keep) {
    vae_assembly *a = vae_calloc(1, sizeof *a);
    if (!a) return vae_fail(VAE_ENOMEM, "out of memory");
    *out = a;
    pthread_mutex_init(&a->mu, NULL);
    a->plan = pl;
    a->world = 1;
    a->frame = (size_t)pl->c_out * pl->h_out * pl->w_out;
    const int64_t bytes = (int64_t)a->frame * pl->t_out * (int64_t)sizeof(float);
    const size_t plane = (size_t)pl->h_out * pl->w_out;
    if (pl->kind == VAE_PLAN_BLEND) {
        if (!(a->wsum = vae_calloc(plane, sizeof *a->wsum))) goto oom;
        for (int i = 0; i < pl->n_tiles; i++) {
            const vae_plan_tile *t = &pl->tiles[i];
            for (int y = t->out_y.lo; y < t->out_y.hi; y++)
                for (int x = t->out_x.lo; x < t->out_x.hi; x++)
                    a->wsum[(size_t)y * pl->w_out + x] +=
                        ramp(y, t->out_y, pl->h_out, pl->blend_overlap) *
                        ramp(x, t->out_x, pl->w_out, pl->blend_overlap);
        }
    }
    if (bytes <= max_host_bytes) {
        if (assembly_mem(a, a->frame * (size_t)pl->t_out, keep)) goto oom;
        return VAE_OK;
    }
    a->off = vae_calloc((size_t)pl->n_tiles, sizeof *a->off);
    a->block = vae_calloc((size_t)pl->n_tiles, sizeof *a->block);
    a->fbuf = vae_malloc(a->frame * sizeof *a->fbuf);
    if (!a->off || !a->block || !a->fbuf) goto oom;
    int64_t total = 0, most = 0;
    for (int i = 0; i < pl->n_tiles; i++) {
        a->block[i] = (int64_t)pl->c_out * area(&pl->tiles[i]);
        a->off[i] = total;
        total += a->block[i] * pl->t_out * (int64_t)sizeof(float);
        if (a->block[i] > most) most = a->block[i];
    }
    if (!(a->buf = vae_malloc((size_t)most * 4 * sizeof *a->buf))) goto oom; /* up to 4 frames */
    if (!(a->spill = vae_spill_file()))
        return vae_fail(VAE_EIO, "cannot create a temporary file for the output (%.2f GiB): %s",
                        (double)bytes / (1 << 30), strerror(errno));
    VAE_INFO("output of %.2f GiB assembled in a temporary file", (double)bytes / (1 << 30));
    return VAE_OK;
oom:
    return vae_fail(VAE_ENOMEM, "out of host memory for the output (%.2f GiB)",
                    (double)bytes / (1 << 30));
}

void vae_assembly_free(vae_assembly *a) {
    if (!a) return;
    if (a->spill) fclose(a->spill);
    pthread_mutex_destroy(&a->mu);
    if (a->own_out) vae_free(a->out);
    vae_free(a->wsum);
    vae_free(a->off);
    vae_free(a->block);
    vae_free(a->buf);
    vae_free(a->fbuf);
    vae_free(a);
}

static int spill_io(vae_assembly *a, int write, float *p, int64_t n, int64_t at) {
    const int fd = fileno(a->spill);
    char *b = (char *)p;
    for (int64_t left = n * (int64_t)sizeof *p; left > 0;) {
        const int64_t k = write ? vae_plat_pwrite(fd, b, (size_t)left, at)
                                : vae_plat_pread(fd, b, (size_t)left, at);
        if (k <= 0)
            return vae_fail(VAE_EIO, "temporary output file: %s",
                            k < 0 ? strerror(errno) : "short read");
        b += k, at += k, left -= k;
    }
    return VAE_OK;
}

static int assembly_put(vae_assembly *a, int tile, const float *fr, int first, int n, int c, int h,
                        int w) {
    const vae_plan *pl = a->plan;
    const vae_plan_tile *t = &pl->tiles[tile];
    const int H = pl->h_out, W = pl->w_out, blend = pl->kind == VAE_PLAN_BLEND;
    const int rows = t->own_y.hi - t->own_y.lo, cols = t->own_x.hi - t->own_x.lo;
    if (first + n > pl->t_out || c != pl->c_out || t->out_y.hi - t->out_y.lo != h ||
        t->out_x.hi - t->out_x.lo != w)
        return vae_fail(VAE_EINVAL, "internal: tile output %dx%d at frame %d", h, w, first);
    const int step = a->out ? n : 4; /* spilled: up to 4 frames per write */
    for (int j0 = 0; j0 < n; j0 += step) {
        const int nj = n - j0 < step ? n - j0 : step;
        for (int j = j0; j < j0 + nj; j++)
            for (int k = 0; k < c; k++)
                for (int yy = 0; yy < rows; yy++) {
                    const int y = t->own_y.lo + yy;
                    const float *src = fr + (((size_t)k * n + j) * h + (y - t->out_y.lo)) * w +
                                       (t->own_x.lo - t->out_x.lo);
                    float *dst =
                        a->out ? a->out + (((size_t)(first + j) * c + k) * H + y) * W + t->own_x.lo
                               : a->buf + (((size_t)(j - j0) * c + k) * rows + yy) * cols;
                    if (!blend) {
                        memcpy(dst, src, (size_t)cols * sizeof *dst);
                        continue;
                    }
                    const float wy = ramp(y, t->out_y, H, pl->blend_overlap);
                    for (int x = 0; x < cols; x++) {
                        const float v =
                            wy * ramp(t->own_x.lo + x, t->out_x, W, pl->blend_overlap) * src[x];
                        dst[x] = a->out ? dst[x] + v : v;
                    }
                }
        if (!a->out) {
            int rc = spill_io(a, 1, a->buf, a->block[tile] * nj,
                              a->off[tile] + (int64_t)(first + j0) * a->block[tile] * 4);
            if (rc) return rc;
        }
    }
    return VAE_OK;
}

int vae_assembly_put(vae_assembly *a, int tile, const float *fr, int first, int n, int c, int h,
                     int w) {
    const int lock = a->wsum || a->spill;
    if (lock) pthread_mutex_lock(&a->mu);
    const int rc = assembly_put(a, tile, fr, first, n, c, h, w);
    if (lock) pthread_mutex_unlock(&a->mu);
    return rc;
}

void vae_assembly_set_rank(vae_assembly *a, int rank, int world,
                           int (*merge)(float *frame, int f, void *user), void *user) {
    a->rank = rank, a->world = world;
    a->merge = merge, a->merge_user = user;
}

int vae_assembly_emit(vae_assembly *a, int upto, vae_frames_fn emit, void *user, int *emitted) {
    const vae_plan *pl = a->plan;
    const size_t plane = (size_t)pl->h_out * pl->w_out;
    if (upto > pl->t_out) upto = pl->t_out;
    for (int f = *emitted; f < upto; f++) {
        float *fr = a->out ? a->out + (size_t)f * a->frame : a->fbuf;
        if (!a->out) { /* the frame from its tiles' blocks */
            if (a->wsum || a->world > 1) memset(fr, 0, a->frame * sizeof *fr);
            for (int i = a->rank; i < pl->n_tiles; i += a->world) {
                const vae_plan_tile *t = &pl->tiles[i];
                const int rows = t->own_y.hi - t->own_y.lo, cols = t->own_x.hi - t->own_x.lo;
                int rc =
                    spill_io(a, 0, a->buf, a->block[i], a->off[i] + (int64_t)f * a->block[i] * 4);
                if (rc) return rc;
                for (int k = 0; k < pl->c_out; k++)
                    for (int yy = 0; yy < rows; yy++) {
                        const float *src = a->buf + ((size_t)k * rows + yy) * cols;
                        float *dst = fr + ((size_t)k * pl->h_out + t->own_y.lo + yy) * pl->w_out +
                                     t->own_x.lo;
                        if (a->wsum)
                            for (int x = 0; x < cols; x++)
                                dst[x] += src[x];
                        else
                            memcpy(dst, src, (size_t)cols * sizeof *dst);
                    }
            }
        }
        if (a->merge) {
            const int rc = a->merge(fr, f, a->merge_user);
            if (rc) return rc;
        }
        if (a->wsum)
            for (size_t i = 0; i < a->frame; i++)
                fr[i] /= a->wsum[i % plane];
        if (emit && emit(fr, f, 1, pl->c_out, pl->h_out, pl->w_out, user))
            return vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %d frames",
                            pl->encode ? "encode" : "decode", f + 1);
        (*emitted)++;
    }
    return VAE_OK;
}
