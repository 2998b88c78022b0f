/* tensor_view.c -- the caller's tensors as [c][t][h][w] views: checks, host reads and writes.
 *
 * A user tensor is [1,C,T,H,W] or [1,C,H,W] (one frame) in float32/float16/bfloat16 with any
 * non-negative strides (PyTorch views), in host or device memory; the one rule every tensor the
 * caller hands in follows (vae.h's vae_tensor) is tensor_rule here. Host tensors are read and
 * written here, one row at a time; device tensors go to the backend (view_import/view_export).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "api/api.h"
#include "core/dtype.h"

static size_t elem_bytes(vae_dtype d) {
    return d == VAE_DTYPE_F32 ? 4 : 2;
}

/* a * b for a, b >= 1, INT64_MAX where it would overflow: a shape whose elements no int64 counts
 * (a file's, e.g. zero frames of huge planes) gets strides that every size check refuses */
static int64_t mul_saturated(int64_t a, int64_t b) {
    return b > 0 && a > INT64_MAX / b ? INT64_MAX : a * b;
}

vae_tensor vae_tensor_dense(int ndim, const int64_t *shape, vae_dtype dtype, void *data) {
    vae_tensor t = {.ndim = -1, .dtype = dtype, .data = data, .device = VAE_DEVICE_CPU};
    if (ndim < 0 || ndim > 8 || (ndim && !shape)) return t; /* ndim -1: every check refuses it */
    t.ndim = ndim;
    int64_t run = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = run;
        run = mul_saturated(run, shape[i] > 0 ? shape[i] : 1);
    }
    return t;
}

int vae_tensor_is_dense(const vae_tensor *t) {
    int64_t run = 1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 1; /* no element: any strides (torch's, vae_tensor_dense's) */
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->strides[i] != run && t->shape[i] != 1) return 0;
        run = mul_saturated(run, t->shape[i]);
    }
    return 1;
}

/* 1 when no two positions of x's elements share an address: with the dimensions in ascending
 * order of stride (size-1 dimensions left out), each stride passes the farthest element that
 * the dimensions before it reach (torch's is_non_overlapping rule; a few exotic interleavings
 * that do not overlap are refused too, with the same message). */
static int non_overlapping(const vae_tensor *x) {
    int order[8], n = 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] > 1) order[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && x->strides[order[j]] < x->strides[order[j - 1]]; j--) {
            int k = order[j];
            order[j] = order[j - 1], order[j - 1] = k;
        }
    int64_t reach = 0; /* the largest offset the dimensions so far reach */
    for (int i = 0; i < n; i++) {
        const int d = order[i];
        if (x->strides[d] <= reach) return 0;
        reach += (x->shape[d] - 1) * x->strides[d];
    }
    return 1;
}

/* numel and the extent (the largest offset reached + 1, in elements; 0 when empty) of x, and
 * whether every stride of a dimension longer than 1 is zero (a broadcast of one value). */
static int tensor_extent(const vae_tensor *x, const char *what, int64_t *numel, int64_t *extent,
                         int *all_zero) {
    char sb[160];
    const int64_t lim = (int64_t)1 << 60; /* elements: in bytes (2 or 4 each) still an int64 */
    int64_t n = 1, e = 0;
    *all_zero = 1;
    for (int i = 0; i < x->ndim; i++) {
        const int64_t d = x->shape[i], st = x->strides[i];
        if (d < 0) return vae_fail(VAE_ESHAPE, "%s: dimension %d of shape %s is negative", what, i,
                                   vae_shape_str(x->shape, x->ndim, sb, sizeof sb));
        if (st < 0)
            return vae_fail(VAE_EINVAL, "%s: stride %lld of dimension %d is negative (not "
                            "supported: pass a copy)", what, (long long)st, i);
        int64_t span;
        if (__builtin_mul_overflow(n, d, &n) || n > lim ||
            (d > 1 && (__builtin_mul_overflow(d - 1, st, &span) ||
                       __builtin_add_overflow(e, span, &e) || e >= lim)))
            return vae_fail(VAE_ESHAPE, "%s: shape %s with strides of up to %lld elements reaches "
                            "beyond 2^60 elements", what,
                            vae_shape_str(x->shape, x->ndim, sb, sizeof sb), (long long)st);
        if (d > 1 && st) *all_zero = 0;
    }
    *numel = n;
    *extent = n ? e + 1 : 0;
    return VAE_OK;
}

/* The rule of vae.h's vae_tensor for one tensor; *extent_bytes: the bytes its elements span. */
static int tensor_rule(const vae_tensor *x, const char *what, int writable, int64_t *extent_bytes) {
    if (!x) return vae_fail(VAE_EINVAL, "%s: NULL tensor", what);
    if (x->ndim < 0 || x->ndim > 8)
        return vae_fail(VAE_ESHAPE, "%s: ndim %d, expected 0 to 8", what, x->ndim);
    if (x->dtype != VAE_DTYPE_F32 && x->dtype != VAE_DTYPE_F16 && x->dtype != VAE_DTYPE_BF16)
        return vae_fail(VAE_EDTYPE, "%s: dtype %d is not float32, float16 or bfloat16", what,
                        (int)x->dtype);
    if (x->device != VAE_DEVICE_CPU && x->device != VAE_DEVICE_CUDA)
        return vae_fail(VAE_EINVAL, "%s: unknown device %d", what, (int)x->device);
    if (x->storage_bytes < 0)
        return vae_fail(VAE_EINVAL, "%s: storage_bytes %lld is negative", what,
                        (long long)x->storage_bytes);
    int64_t numel = 0, extent = 0;
    int all_zero = 0, rc = tensor_extent(x, what, &numel, &extent, &all_zero);
    if (rc) return rc;
    const int64_t es = (int64_t)elem_bytes(x->dtype);
    *extent_bytes = extent * es;
    if (numel && !x->data) return vae_fail(VAE_EINVAL, "%s: tensor has no data", what);
    if (numel > 1 && all_zero && !x->storage_bytes)
        return vae_fail(VAE_EINVAL, "%s: strides all zero on %lld elements with no storage_bytes: "
                        "a broadcast must state its storage, a dense tensor its strides "
                        "(vae_tensor_dense)", what, (long long)numel);
    if (x->storage_bytes && *extent_bytes > x->storage_bytes)
        return vae_fail(VAE_EINVAL, "%s: its shape and strides reach %lld bytes, beyond the %lld "
                        "bytes of its storage", what, (long long)*extent_bytes,
                        (long long)x->storage_bytes);
    if (writable && numel > 1 && !non_overlapping(x))
        return vae_fail(VAE_EINVAL, "%s: an output whose elements overlap (a zero stride, e.g. "
                        "expand(), or overlapping rows): write into a tensor of its own", what);
    return VAE_OK;
}

int vae_tensor_check(const vae_tensor *t, const char *name, int writable, const vae_tensor *input) {
    vae_error_clear();
    const char *what = name ? name : writable ? "output" : "input";
    int64_t bytes = 0, in_bytes = 0;
    int rc = tensor_rule(t, what, writable, &bytes);
    if (rc || !input) return rc;
    if ((rc = tensor_rule(input, "input", 0, &in_bytes))) return rc;
    const int same_memory = t->device == input->device &&
                            (t->device == VAE_DEVICE_CPU || t->device_index == input->device_index);
    const uintptr_t a = (uintptr_t)t->data, b = (uintptr_t)input->data;
    if (same_memory && bytes && in_bytes && a < b + (uintptr_t)in_bytes && b < a + (uintptr_t)bytes)
        return vae_fail(VAE_EINVAL, "%s: overlaps the input's memory: the output must be a "
                        "tensor of its own", what);
    return VAE_OK;
}

int vae_tensor_view(const vae_tensor *x, const char *what, int channels, vae_io_view *v) {
    char sb[160];
    memset(v, 0, sizeof *v);
    int64_t bytes;
    int rc = tensor_rule(x, what, 0, &bytes);
    if (rc) return rc;
    if ((x->ndim != 5 && x->ndim != 4) || x->shape[0] != 1)
        return vae_fail(VAE_ESHAPE, "%s: shape %s, expected [1,%d,T,H,W] or [1,%d,H,W]", what,
                        vae_shape_str(x->shape, x->ndim, sb, sizeof sb), channels, channels);
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] <= 0 || x->shape[i] > (1 << 20))
            return vae_fail(VAE_ESHAPE, "%s: shape %s has an empty dimension or one over 2^20",
                            what, vae_shape_str(x->shape, x->ndim, sb, sizeof sb));
    const int five = x->ndim == 5; /* a 4-D tensor is one frame: no t dimension */
    v->data = x->data;
    v->dtype = x->dtype;
    v->c = (int)x->shape[1];
    v->t = five ? (int)x->shape[2] : 1;
    v->h = (int)x->shape[2 + five];
    v->w = (int)x->shape[3 + five];
    v->sc = x->strides[1], v->st = five ? x->strides[2] : 0;
    v->sh = x->strides[2 + five], v->sw = x->strides[3 + five];
    if (v->c != channels)
        return vae_fail(VAE_ESHAPE, "%s: shape %s has %d channels, the model expects %d", what,
                        vae_shape_str(x->shape, x->ndim, sb, sizeof sb), v->c, channels);
    return VAE_OK;
}

static float read_elem(vae_dtype d, const void *base, int64_t i) {
    switch (d) {
    case VAE_DTYPE_F16: return vae_f16_to_f32(((const uint16_t *)base)[i]);
    case VAE_DTYPE_BF16: return vae_bf16_to_f32(((const uint16_t *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

static void write_elem(vae_dtype d, void *base, int64_t i, float v) {
    switch (d) {
    case VAE_DTYPE_F16: ((uint16_t *)base)[i] = vae_f32_to_f16(v); break;
    case VAE_DTYPE_BF16: ((uint16_t *)base)[i] = vae_f32_to_bf16(v); break;
    default: ((float *)base)[i] = v;
    }
}

/* 1 when every one of x[0..n) is finite: exponent bits not all ones, tested on the words in
 * blocks of 8 that the compiler vectorises (a 130 MB input chunk: 14-18 ms with the row's
 * memcpy, against 18-24 ms for isfinite() value by value, on a 2-core build machine) */
static int all_finite(const float *x, int n) {
    uint32_t inf = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t b = 0;
        for (int k = 0; k < 8; k++) {
            uint32_t u;
            memcpy(&u, x + i + k, sizeof u);
            b |= (u & 0x7f800000u) == 0x7f800000u;
        }
        inf |= b;
    }
    for (; i < n; i++)
        inf |= !isfinite(x[i]);
    return !inf;
}

int vae_view_read_host(const vae_io_view *v, const char *what, float *dst, int f, int n, int y0,
                       int rows, int x0, int cols) {
    for (int c = 0; c < v->c; c++)
        for (int j = 0; j < n; j++)
            for (int yy = 0; yy < rows; yy++) {
                const int64_t src = c * v->sc + (int64_t)(f + j) * v->st + (int64_t)(y0 + yy) * v->sh +
                                    (int64_t)x0 * v->sw;
                float *d = dst + (((int64_t)c * n + j) * rows + yy) * cols;
                int bad = 0;
                if (v->dtype == VAE_DTYPE_F32 && v->sw == 1) { /* a row as it is */
                    memcpy(d, (const float *)v->data + src, (size_t)cols * sizeof *d);
                    bad = !all_finite(d, cols);
                } else {
                    for (int i = 0; i < cols; i++)
                        bad |= !isfinite(d[i] = read_elem(v->dtype, v->data, src + i * v->sw));
                }
                for (int i = 0; bad && i < cols; i++)
                    if (!isfinite(d[i]))
                        return vae_fail(VAE_ENAN, "%s: NaN or Inf at channel %d, frame %d, row %d, "
                                        "column %d", what, c, f + j, y0 + yy, x0 + i);
            }
    return VAE_OK;
}

int vae_view_write_host(const vae_io_view *v, const float *frames, int first, int n) {
    const int64_t plane = (int64_t)v->h * v->w;
    for (int c = 0; c < v->c; c++)
        for (int j = 0; j < n; j++)
            for (int y = 0; y < v->h; y++) {
                const float *s = frames + ((int64_t)c * n + j) * plane + (int64_t)y * v->w;
                const int64_t d = c * v->sc + (int64_t)(first + j) * v->st + (int64_t)y * v->sh;
                if (v->dtype == VAE_DTYPE_F32 && v->sw == 1)
                    memcpy((float *)v->data + d, s, (size_t)v->w * sizeof(float));
                else
                    for (int x = 0; x < v->w; x++) write_elem(v->dtype, v->data, d + x * v->sw, s[x]);
            }
    return VAE_OK;
}

/* The message for a non-finite value found at linear index i ([c][t][h][w]) of a view. */
int vae_view_nan_error(const vae_io_view *v, const char *what, int64_t i) {
    const int64_t hw = (int64_t)v->h * v->w, thw = hw * v->t;
    return vae_fail(VAE_ENAN, "%s: NaN or Inf at channel %d, frame %d, row %d, column %d", what,
                    (int)(i / thw), (int)(i % thw / hw), (int)(i % hw / v->w), (int)(i % v->w));
}
