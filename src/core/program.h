/* program.h -- a model as data: a list of ops over numbered activation values (internal).
 *
 * A model file (one per architecture in src/models) reads a checkpoint and builds one program per
 * direction (encode, decode). The executor (executor.c) runs a program on any backend, streaming
 * the video through it chunk by chunk. Activations are channels-last chunks: [t][h][w][c],
 * contiguous, where t is the number of frames of this chunk (it may be 0: e.g. a stride-2 conv that
 * has not yet seen a whole window emits nothing).
 *
 * Time is causal and streamed. An op with temporal extent (conv with kt > 1 or st > 1, temporal
 * shuffle-down) sees its input as one endless sequence: the executor keeps the frames that a
 * later window still needs (its cache) and passes the op the list `cache ++ chunk`. At the start
 * of the stream the sequence is front-padded with `tpad` frames (zeros, or copies of the first
 * frame). Output frame j of the whole stream reads input frames [j*st, j*st + kt) of the padded
 * sequence. Hence the result does not depend on how the input is cut into chunks, except where
 * an op's rule names the first chunk (TIME_HEAD/TIME_DROP count frames of the stream, not chunk).
 */
#ifndef VAE_PROGRAM_H
#define VAE_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

/* What follows from these definitions (shapes, receptive fields, stream rules, costs, checks)
 * is in op.h. */
typedef enum {
    VAE_OP_INPUT = 0,
    /* conv: y = conv(x) + bias [+ in[1]] ; in[1] (optional) is a residual of y's shape, added
     * after the bias. Weight w: [c_out][c_in][kt][kh][kw] float32 (PyTorch layout), bias b: [c_out]
     * or NULL. Spatial zero padding pad_h = {top, bottom}, pad_w = {left, right}. up > 1 (kt = 1,
     * not windowed): x is first upsampled by `up` in h and w (nearest), as an UPSAMPLE op would;
     * a backend may compute both at once (vtbl conv_upsample), else the executor materialises
     * the upsampled input. norm_w (optional, set by vae_program_fuse_norms): the RMS norm that
     * read y alone, applied to it: y = norm_act(RMS_NORM(y) with weight norm_w [c_out], then
     * act_scale as that norm's), so that y is written once instead of written, read and written
     * again. */
    VAE_OP_CONV,
    /* y = x / max(||x||_2 over c, 1e-12) * sqrt(c) * w[c]  (Wan RMS_norm, per voxel), then act */
    VAE_OP_RMS_NORM,
    /* GroupNorm per frame: stats over (c/groups channels x h x w) of each frame; y = norm*w + b;
     * then act. eps in op->eps. */
    VAE_OP_GROUP_NORM,
    /* y = act(x) */
    VAE_OP_ACT,
    /* y = act(in[0] + in[1]); in[1] is the skip when the add closes a residual block */
    VAE_OP_ADD,
    /* y[c] = x[c] * w[c] + b[c] (latent normalisation) */
    VAE_OP_SCALE_SHIFT,
    /* nearest-neighbour upsampling by fs in h and w */
    VAE_OP_UPSAMPLE,
    /* depth to time/space: y[t*ft+ti][h*fs+hi][w*fs+wi][o] = x[t][h][w][ch] with
     * ch = (o*cs_o + ti*cs_t + hi*cs_h + wi*cs_w) / group   (integer division) */
    VAE_OP_SHUFFLE_UP,
    /* space/time to depth, then average groups: let f = c*cs_o + ti*cs_t + hi*cs_h + wi*cs_w
     * enumerate the c_in*ft*fs*fs sub-positions of each (ft,fs,fs) block; y[o] = mean of the
     * `group` values with f in [o*group, (o+1)*group). Temporal windows of ft frames with stride
     * ft, front-padded with tpad zero frames at stream start. */
    VAE_OP_SHUFFLE_DOWN,
    /* keeps only the first n frames of the stream (drops everything after) */
    VAE_OP_TIME_HEAD,
    /* drops the first n frames of the stream */
    VAE_OP_TIME_DROP,
    /* y = frames of in[0] followed by frames of in[1] (same h, w, c) */
    VAE_OP_CONCAT_T,
    /* single-head attention within each frame over its h*w tokens. in[0] = qkv with 3*c channels
     * (q = [0,c), k = [c,2c), v = [2c,3c)); y = softmax(q k^T * scale) v, c channels. */
    VAE_OP_ATTENTION,
    VAE_OP_COUNT
} vae_op_kind;

typedef enum { VAE_ACT_NONE = 0, VAE_ACT_SILU, VAE_ACT_RELU, VAE_ACT_TANH_SCALE } vae_act;
typedef enum { VAE_TPAD_ZERO = 0, VAE_TPAD_REPLICATE } vae_tpad_mode;

typedef struct vae_op {
    vae_op_kind kind;
    int in[2]; /* value ids, -1 = none */
    int out;   /* value id */
    int c_in, c_out;
    /* conv / windows */
    int kt, kh, kw, st, sh, sw;
    int pad_h[2], pad_w[2];
    int tpad;                /* frames of front padding at stream start */
    vae_tpad_mode tpad_mode; /* zeros or copies of the first frame */
    /* norms, activations, attention */
    vae_act act;
    float act_scale; /* TANH_SCALE: y = tanh(x / s) * s */
    float eps;
    int groups;
    float scale; /* attention: softmax scale */
    /* weights: host float32, owned by the model */
    const float *w, *b;
    /* shuffles */
    int ft, fs;
    int cs_o, cs_t, cs_h, cs_w, group;
    /* TIME_HEAD / TIME_DROP */
    int n;
    /* CONV: nearest upsampling of the input by `up` before the conv (0 or 1: none) */
    int up;
    /* CONV: VAE_DTYPE_FP8 may run it in E4M3 (set by vae_program_mark_fp8; op.h: vae_op_fp8) */
    int fp8;
    /* CONV marked fp8: a bound of its input's magnitudes known from the model (op.h
     * vae_op_rms_bound of the RMS norm that makes the input), then the E4M3 input scale is
     * bound / 448 instead of the call's largest magnitude / 448; 0: none */
    float fp8_bound;
    /* E4M3 codes between a producer (an RMS norm, or a conv with norm_w) and the E4M3 conv that
     * alone reads its output (vae_program_mark_fp8_codes). Producer: fp8_codes_bound > 0, it
     * writes each output value v as the E4M3 code of v / (fp8_codes_bound / 448) (the reader's
     * fp8_bound), the c_out codes of a voxel in the first c_out bytes of that voxel's place (a
     * voxel keeps its size in the activation dtype: the executor's copies of frames, rows and
     * voxels move codes as they move values). Reader: fp8_codes_in = 1. Only a backend that
     * said it can (vtbl fp8_codes) sees them set. */
    float fp8_codes_bound;
    int fp8_codes_in;
    /* CONV: an RMS norm (weight [c_out], float32, owned by the model) and its activation applied
     * to the output (vae_program_fuse_norms); NULL: none */
    const float *norm_w;
    vae_act norm_act;
    char name[96]; /* checkpoint name of the layer, for logs and errors */
} vae_op;

typedef struct vae_program {
    vae_op *ops;
    int n_ops, cap_ops;
    int n_values;
    int input, output; /* value ids */
    int in_channels, out_channels;
    int first_chunk, chunk; /* input frames in the first chunk and in each later one */
} vae_program;

void vae_program_init(vae_program *p, int in_channels);
void vae_program_free(vae_program *p);
/* Appends op (copied) with a fresh output value; returns that value id, or -1 on OOM. */
int vae_program_add(vae_program *p, const vae_op *op);
/* Channels of value v: the program's input, or the output of op v - 1. */
static inline int vae_program_value_channels(const vae_program *p, int v) {
    return v == p->input ? p->in_channels : p->ops[v - 1].c_out;
}
/* Op templates with the fields that every op needs set (in = {x,-1}, out assigned on add). */
vae_op vae_op_make(vae_op_kind kind, int x, int c_in, int c_out);
/* The values live across the boundary before op `pos` (0 <= pos <= n_ops): made before it (or
 * the input) and read by op `pos` or a later one, ascending, at most max of them. Returns their
 * count (which may exceed max). */
int vae_program_crossing(const vae_program *p, int pos, int *vals, int max);
/* Spatial size of every value for an input of h x w (op.h rules): vh, vw [n_values]. VAE_ESHAPE
 * naming the first op the size does not suit. */
int vae_program_shapes(const vae_program *p, int h, int w, int *vh, int *vw);
/* A new program of ops [from, to) of p, whose input is the one value crossing into `from` and
 * whose output is the one value crossing out of `to` (value ids renumbered, weights shared).
 * VAE_EINVAL when more than one value crosses either boundary. */
int vae_program_slice(const vae_program *p, int from, int to, vae_program *out);
/* Sets op->fp8 on the convs that VAE_DTYPE_FP8 may run in E4M3 (the rule: op.h, vae_op_fp8), and
 * their fp8_bound where an RMS norm makes their input (op.h vae_op_rms_bound). */
void vae_program_mark_fp8(vae_program *p);
/* A session's E4M3 convs: keeps the mark on the `budget` marked convs nearest p's output that
 * runs(user, op) runs in E4M3 (budget 0: on all of those), clears it on every other. A conv's E4M3
 * noise is amplified by the network after it: one at a time on the CPU emulation, the first convs
 * of SeedVR2's encoder cost 4-5% relative error at the output, its last ones ~1%, Wan2.2's decoder
 * 3-4% in its middle block, 0.5% in its last level; errors add in quadrature. Returns the convs
 * kept. */
int vae_program_pick_fp8(vae_program *p, int budget, int (*runs)(void *user, const vae_op *op),
                         void *user);
/* Marks the E4M3 convs (op->fp8) whose input, of a known bound (fp8_bound), an RMS norm or a
 * conv with a folded norm makes and nothing else reads (not the program's input or output), and
 * their producers, as exchanging E4M3 codes (fp8_codes_bound, fp8_codes_in) where
 * takes(user, producer, reader) says the backend writes and reads them. Returns the readers
 * marked. Run after vae_program_pick_fp8 and vae_program_fuse_norms. */
int vae_program_mark_fp8_codes(vae_program *p,
                               int (*takes)(void *user, const vae_op *producer,
                                            const vae_op *reader),
                               void *user);
/* Folds every RMS norm whose input is a conv's output that nothing else reads (not the program's
 * output) into that conv (norm_w, norm_act; op.h vae_conv_norm_op): one op and one value fewer,
 * the values renumbered. The conv keeps its name, marks and weights. *folded: the norms folded.
 * VAE_ENOMEM (p unchanged).
 * A per-voxel norm of the output changes nothing the planner or the executor derive from a conv
 * (shape, receptive field, time). */
int vae_program_fuse_norms(vae_program *p, int *folded);
/* *out = a copy of p (its own op list; weights shared with p). VAE_ENOMEM. */
int vae_program_copy(const vae_program *p, vae_program *out);
/* uses[v] = how many op inputs read value v (an op reading it twice counts twice): uses
 * [n_values], filled. */
void vae_program_count_readers(const vae_program *p, int *uses);
/* Op i may read its input through a contiguous window (the value is stored after the kt - 1
 * cached frames of the conv, no copy): a temporal conv whose input is an inner value that it
 * alone reads, once, with no more front padding than its cache holds. The executor and the
 * planner add their own conditions (trims, the backend's consent). uses: as counted above. */
int vae_program_window_ok(const vae_program *p, int i, const int *uses);
/* head[v] = frames of room to allocate in front of value v: kt - 1 for a contiguous window's input
 * (win_of[v] = the conv, -1 none), and as many for the values whose buffer that input may take
 * over (the executor's value_take): back through time heads and drops (their input) and concats
 * (both inputs), so that a time drop or a one-sided concat in front of a temporal conv costs no
 * copy. The program's input and output get none. head [n_values], filled. */
void vae_program_heads(const vae_program *p, const int *win_of, int *head);

/* ---- frame loops (executor.h) and stepping through them ------------------------------------- */
enum { VAE_MAX_LOOPS = 8 };
typedef struct vae_loops {
    int n;                           /* loops; level k runs ops [at[k-1], at[k]) (at[-1] = 0) */
    int at[VAE_MAX_LOOPS + 1];       /* at[n] = n_ops */
    int whole[VAE_MAX_LOOPS];        /* 1: the loop keeps the chunk whole (a trim point only) */
    int cross_at[VAE_MAX_LOOPS + 1]; /* cross[cross_at[k] .. cross_at[k+1]) are cut at at[k] */
    int *cross;
} vae_loops;
/* Loops at op indices at[0..n) (ascending, < n_ops); n = 0: none. whole[k] (NULL: all 0): loop
 * k passes the chunk on whole, once, instead of frame by frame. */
int vae_loops_init(vae_loops *l, const vae_program *p, const int *at, const int *whole, int n);
void vae_loops_free(vae_loops *l);

struct vae_op_clock;
struct vae_op_frames;
/* What a step does, in the executor's order: an op runs (index = the op, f its frame counts);
 * a frame of loop `index` begins (the cut values hold that one frame, or the whole chunk for a
 * whole loop) or ends; loop `index` has done all its frames. tv: the frame count of every value in
 * the current (sub-)step. */
typedef enum { VAE_WALK_OP, VAE_WALK_FRAME, VAE_WALK_FRAME_END, VAE_WALK_LOOP_END } vae_walk_event;
typedef void (*vae_walk_fn)(void *user, vae_walk_event ev, int index, const struct vae_op_frames *f,
                            const int *tv);
/* One step of t_in input frames through p, depth first through the loops, with the op clocks
 * clk [n_ops] (advanced) and tv [n_values] as scratch; *t_out: the output frames of the step.
 * VAE_EINVAL when a loop would cut values of different frame counts. fn may be NULL. */
int vae_program_walk_step(const vae_program *p, const vae_loops *l, struct vae_op_clock *clk,
                          int *tv, int t_in, vae_walk_fn fn, void *user, int *t_out);

#endif
