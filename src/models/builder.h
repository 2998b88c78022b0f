/* builder.h -- what model files use to turn checkpoint tensors into programs (internal).
 *
 * A model file asks for weights by their UPSTREAM name (Wan/ComfyUI names, SeedVR2 names, TAESD
 * indices) and exact upstream shape. The builder maps the name to the file's scheme (e.g.
 * diffusers), adds the detected prefix, checks the shape, converts to float32 and marks the tensor
 * used. In synth mode it instead generates the fixtures' synthetic values and records the tensor
 * for writing. The first problem (missing tensor, wrong shape, bad dtype) is recorded and later
 * requests return NULL-safe dummies, so a model file can build straight through and the caller
 * checks vae_builder_status() once at the end.
 */
#ifndef VAE_BUILDER_H
#define VAE_BUILDER_H

#include <stdarg.h>
#include <stdint.h>

#include "core/program.h"
#include "formats/store.h"

/* Maps an upstream key to the file's key scheme (returns buf or the input). */
typedef const char *(*vae_name_map_fn)(const char *upstream, char *buf, size_t len);

typedef struct vae_builder vae_builder;

/* File mode: weights come from store (names prefixed with prefix, mapped by map or NULL). */
int vae_builder_create_file(vae_builder **b, const vae_store *store, const char *prefix,
                            vae_name_map_fn map);
/* Synth mode: weights are generated from names and shapes and recorded. */
int vae_builder_create_synth(vae_builder **b);
void vae_builder_free(vae_builder *b);

/* The weight `name` (upstream) with the given shape; NULL only after an error was recorded.
 * The returned array is float32, owned by the builder (then by the model, see take_arena). */
const float *vb_weight(vae_builder *b, const char *name, int ndim, const int64_t *shape);
/* printf-style name, shape as varargs ints: vb_w(b, 2, (int[]){c, 3}, "%s.bias", pre) */
const float *vb_wf(vae_builder *b, int ndim, const int *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Is the tensor present (file mode, mapped + prefixed)? Always 0 in synth mode. */
int vb_has(vae_builder *b, const char *name);
/* Scratch float32 array owned like weights (for derived weights, e.g. concatenated q/k/v). */
float *vb_alloc(vae_builder *b, int64_t n);
/* Records an error (first wins) and returns code. */
int vb_error(vae_builder *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* VAE_OK or the first recorded error. */
int vb_status(const vae_builder *b);

/* After building: file mode -> VAE_EKEY naming the first tensor under the prefix that no model
 * request used. */
int vb_check_all_used(vae_builder *b, const char *arch);
/* Synth mode: the recorded tensors (upstream names, in request order). */
int vb_synth_count(const vae_builder *b);
void vb_synth_get(const vae_builder *b, int i, const char **name, int *ndim, const int64_t **shape,
                  const float **data);
/* Counts of the weights requested (parameters) and tensors. */
int64_t vb_param_count(const vae_builder *b);
int vb_tensor_count(const vae_builder *b);

/* Hands the float32 arrays over to the caller (freed with vae_arena_free). */
typedef struct vae_arena vae_arena;
vae_arena *vb_take_arena(vae_builder *b);
void vae_arena_free(vae_arena *a);

/* The synthetic-weight rule of ../shared/fixtures/README.md, for one tensor. */
void vae_synth_fill(const char *name, int ndim, const int64_t *shape, float *dst);

/* ---- program construction helpers shared by the model files ---------------------------------
 * Each returns the new value id (or -1 once an error is recorded; the helpers accept -1 inputs and
 * propagate it). */
typedef struct vb_conv_args {
    int kt, kh, kw, st, sh, sw;
    int pad_h[2], pad_w[2];
    int tpad;
    vae_tpad_mode tpad_mode;
    int residual; /* value id added after the bias, -1 = none */
    int has_bias; /* default 1 via vb_conv_defaults */
    int up;       /* nearest upsampling of the input before the conv (0: none; kt = 1 only) */
    int groups;   /* > 1: depthwise, = c_in, weight [c_out][1][kh][kw] (op.h); 0: dense */
} vb_conv_args;
vb_conv_args vb_conv_defaults(int kt, int kh, int kw);

/* Convolution with weights `<prefix>.weight` [c_out][c_in][kt][kh][kw] (2-D: [c_out][c_in][kh][kw]
 * when kt == 1 and dims2d is set) and `<prefix>.bias`. */
int vb_conv(vae_builder *b, vae_program *p, int x, const char *prefix, int c_in, int c_out,
            const vb_conv_args *a, int dims2d);
/* Same, with explicit weight arrays (derived weights). */
int vb_conv_raw(vae_program *p, int x, const char *name, const float *w, const float *bias,
                int c_in, int c_out, const vb_conv_args *a);
int vb_rms_norm(vae_builder *b, vae_program *p, int x, const char *gamma_name, int c, int gamma_ndim,
                vae_act act);
int vb_group_norm(vae_builder *b, vae_program *p, int x, const char *prefix, int c, int groups,
                  float eps, vae_act act);
/* Same, with explicit weight and bias arrays (name: the op's). */
int vb_group_norm_raw(vae_builder *b, vae_program *p, int x, const char *name, const float *w,
                      const float *bias, int c, int groups, float eps, vae_act act);
int vb_act(vae_program *p, int x, int c, vae_act act, float scale);
int vb_add(vae_program *p, int a, int x2, int c, vae_act act);
int vb_scale_shift(vae_program *p, int x, int c, const float *scale, const float *shift);
int vb_upsample(vae_program *p, int x, int c, int fs);
int vb_shuffle_up(vae_program *p, int x, int c_in, int c_out, int ft, int fs, int cs_o, int cs_t,
                  int cs_h, int cs_w, int group);
int vb_shuffle_down(vae_program *p, int x, int c_in, int c_out, int ft, int fs, int cs_o, int cs_t,
                    int cs_h, int cs_w, int group, int tpad);
int vb_time_head(vae_program *p, int x, int c, int n);
int vb_time_drop(vae_program *p, int x, int c, int n);
int vb_concat_t(vae_program *p, int a, int x2, int c);
int vb_attention(vae_program *p, int qkv, int c, float scale);

#endif
