/* cuda_conv_weights.c -- a conv's filters on the device in the layouts its paths read
 * (cuda_conv_internal.h: conv_state's w, w2p, w3, w3p, wh), each made on first use from op->w
 * (which stays on the host) and freed again once tuning shows that no chosen path reads it. The FP8
 * operands: cuda_conv_igemm.c; the phase filters: cuda_conv_phase.c.
 */
#include "backends/cuda/conv/cuda_conv_internal.h"

/* Uploads op->w (PyTorch [co][ci][kt][kh][kw]) in the 2-D layout [kp][kh][kw][width] with the
 * taps next to the input channels (dt * c_in + ci < width: width = kt * c_in, or padded to cg) or
 * the 3-D layout [kp][kt][kh][kw][width] (ci < width: width = c_in, or padded to cp); filters
 * co..kp-1 and channels past the real ones are zero. op->c_out may be the padded count; the
 * checkpoint has s->co filters. *bytes: the device size. */
static int upload_weights(cuda_backend *cb, const vae_op *op, const conv_state *s, int three_d,
                          int width, void **out, size_t *bytes) {
    const int ci = op->c_in, kt = op->kt, kh = op->kh, kw = op->kw;
    const size_t per = (size_t)(three_d ? kt : 1) * kh * kw * width, n = per * s->kp;
    const size_t src_n = (size_t)s->co * ci * kt * kh * kw;
    VAE_DEBUG("%s: weights in the %s layout, width %d", op->name, three_d ? "3-D" : "2-D", width);
    /* the filters as they are (one copy, converted to the activation dtype on the host), laid
     * out by a kernel */
    void *src = NULL;
    int rc = cu_upload_param(cb, op->w, src_n, 0, &src, op->name);
    if (rc) return rc;
    void *dst = NULL;
    *bytes = n * cb->base.elem_size;
    cudaError_t e = cu_dev_malloc(&cb->pool, &dst, *bytes);
    rc = e == cudaSuccess ? cu_check(cuk_weight_layout(cb->stream, cb->base.dtype, src, dst, s->co,
                                                       s->kp, ci, kt, kh, kw, three_d, width),
                                     op->name, "weight layout")
                          : cu_check(e, op->name, "allocating weights");
    cu_free_param(cb, src, src_n * cb->base.elem_size); /* after the kernel (stream order) */
    if (rc) {
        if (dst) cu_dev_free(&cb->pool, dst, *bytes);
        return rc;
    }
    cb->weight_bytes += (int64_t)*bytes;
    cu_note_peak(cb);
    *out = dst;
    return VAE_OK;
}

int cu_conv_need_w2(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->w) return VAE_OK;
    return upload_weights(cb, op, s, 0, op->kt * op->c_in, &s->w, &s->w_bytes);
}

int cu_conv_need_w3(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (op->kt == 1) return cu_conv_need_w2(cb, op, s); /* the same layout */
    if (s->w3) return VAE_OK;
    return upload_weights(cb, op, s, 1, op->c_in, &s->w3, &s->w3_bytes);
}

/* [kp][kh][kw][cg]: the 2-D layout with the gathered channels (kt*c_in) padded to cg */
int cu_conv_need_w2p(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->w2p) return VAE_OK;
    return upload_weights(cb, op, s, 0, s->cg, &s->w2p, &s->w2p_bytes);
}

/* [kp][kt][kh][kw][cp]: the 3-D layout with the input channels padded to cp */
int cu_conv_need_w3p(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->w3p) return VAE_OK;
    return upload_weights(cb, op, s, 1, s->cp, &s->w3p, &s->w3p_bytes);
}

/* src (bytes of 16-bit filters) tiled for the halo-tile kernel into a new block *dst: the 3-D
 * layout (phases 0) or the four phase filters (phases 1), counted with the weights. */
static int halo_layout(cuda_backend *cb, const vae_op *op, const void *src, size_t bytes,
                       int phases, void **dst, size_t *dst_bytes) {
    void *p = NULL;
    int rc = cu_check(cu_dev_malloc(&cb->pool, &p, bytes), op->name, "allocating weights");
    if (rc == VAE_OK)
        rc = cu_check(phases ? cuk_halo_tile_phase_filters(cb->stream, src, p, op->c_in)
                             : cuk_halo_tile_filters(cb->stream, src, p, op->kt, op->c_in),
                      op->name, "halo weight layout");
    if (rc) {
        if (p) cu_dev_free(&cb->pool, p, bytes);
        return rc;
    }
    cb->weight_bytes += (int64_t)bytes;
    cu_note_peak(cb);
    *dst = p, *dst_bytes = bytes;
    return VAE_OK;
}

int cu_conv_need_wh(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->wh) return VAE_OK;
    int rc = cu_conv_need_w3(cb, op, s);
    if (rc) return rc;
    VAE_DEBUG("%s: weights in the halo-tile layout", op->name);
    const size_t bytes = (size_t)s->kp * op->kt * op->kh * op->kw * op->c_in * cb->base.elem_size;
    return halo_layout(cb, op, op->kt > 1 ? s->w3 : s->w, bytes, 0, &s->wh, &s->wh_bytes);
}

int cu_conv_need_whp(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->whp) return VAE_OK;
    VAE_DEBUG("%s: phase filters in the halo-tile layout", op->name);
    return halo_layout(cb, op, s->wph, s->wph_bytes, 1, &s->whp, &s->whp_bytes);
}

/* Frees the weight layouts that no measured path uses (tuning tries every path, so every layout
 * gets made): device memory is what a tuned op keeps. A layout freed here is made again if a
 * later call needs it (need_*: op->w stays on the host). */
void cu_conv_trim_layouts(cuda_backend *cb, conv_state *s, int keep_w, int keep_w3, int keep_w3p,
                          int keep_wh) {
    void **lay[5] = {&s->w, &s->w2p, &s->w3, &s->w3p, &s->wh};
    size_t *bytes[5] = {&s->w_bytes, &s->w2p_bytes, &s->w3_bytes, &s->w3p_bytes, &s->wh_bytes};
    const int keep[5] = {keep_w, keep_w, keep_w3, keep_w3p, keep_wh};
    if (cb->recording) return; /* the recorded work reads them */
    int synced = 0;
    for (int i = 0; i < 5; i++) {
        if (keep[i] || !*lay[i]) continue;
        if (!synced) cudaStreamSynchronize(cb->stream); /* queued convs may still read it */
        synced = 1;
        VAE_DEBUG("weight layout %d of %zu bytes freed", i, *bytes[i]);
        cu_free_param(cb, *lay[i], *bytes[i]);
        *lay[i] = NULL;
        *bytes[i] = 0;
    }
}

/* After a tuning decision: the layouts of the paths chosen for the shapes seen so far. */
void cu_conv_trim_tuned(cuda_backend *cb, const vae_op *op, conv_state *s) {
    int blocks = 0, three_d = 0, pad = 0, tiled = 0;
    for (int i = 0; i < s->n_tune; i++) {
        const int path = s->tune[i].path;
        blocks |= path == PATH_BLOCKS;
        three_d |= path == PATH_3D || path == PATH_IGEMM;
        pad |= path == PATH_3DPAD;
        tiled |= path == PATH_HALO;
    }
    /* kt == 1: the 3-D path reads the 2-D layout */
    cu_conv_trim_layouts(cb, s, blocks || s->use_gemm || (three_d && op->kt == 1), three_d, pad,
                         tiled);
}
