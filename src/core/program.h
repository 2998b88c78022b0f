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

#include "core/op.h"

typedef struct vae_program {
    vae_op *ops;
    int n_ops, cap_ops;
    int n_values;
    int input, output; /* value ids */
    int in_channels, out_channels;
    int first_chunk, chunk; /* input frames in the first chunk and in each later one */
    /* 1: an input that ends inside a chunk is completed by repeating its last frame (TAEHV's
     * encoder pads so); 0: the frames after the last whole chunk are not used */
    int pad_end;
} vae_program;

void vae_program_init(vae_program *p, int in_channels);
void vae_program_free(vae_program *p);
/* Appends op (copied) with a fresh output value; returns that value id, or -1 on OOM. */
int vae_program_add(vae_program *p, const vae_op *op);
/* Channels of value v: the program's input, or the output of op v - 1. */
static inline int vae_program_value_channels(const vae_program *p, int v) {
    return v == p->input ? p->in_channels : p->ops[v - 1].c_out;
}
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
 * runs(user, op) runs in E4M3 (budget 0: on all of those), clears it on every other; runs returns
 * the kernel (fp8_shapes.h vae_fp8_kernel, VAE_FP8_NONE: not in E4M3), kept in op->fp8_kernel
 * for the backend, which then reads it rather than deciding again. A conv's E4M3
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
/* The same for every activation op (ACT) whose input is the output of a conv without a norm that
 * nothing else reads: folded into that conv (op.h: its act, after the bias and residual). Run
 * after vae_program_fuse_norms (a conv takes a norm or an activation, not both). */
int vae_program_fuse_acts(vae_program *p, int *folded);
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
    int width; /* frames a frame loop passes on at a time (0: 1; the last pass may have fewer) */
} vae_loops;
/* Loops at op indices at[0..n) (ascending, < n_ops); n = 0: none. whole[k] (NULL: all 0): loop
 * k passes the chunk on whole, once, instead of frame by frame. Width 1 (set l->width after). */
int vae_loops_init(vae_loops *l, const vae_program *p, const int *at, const int *whole, int n);
void vae_loops_free(vae_loops *l);

struct vae_op_clock;
struct vae_op_frames;
/* What a step does, in the executor's order: an op runs (index = the op, f its frame counts);
 * a frame of loop `index` begins (the cut values hold that one frame, or `width` of them, or the
 * whole chunk for a whole loop) or ends; loop `index` has done all its frames. tv: the frame count
 * of every value in the current (sub-)step. */
typedef enum { VAE_WALK_OP, VAE_WALK_FRAME, VAE_WALK_FRAME_END, VAE_WALK_LOOP_END } vae_walk_event;
typedef void (*vae_walk_fn)(void *user, vae_walk_event ev, int index, const struct vae_op_frames *f,
                            const int *tv);
/* One step of t_in input frames through p, depth first through the loops, with the op clocks
 * clk [n_ops] (advanced) and tv [n_values] as scratch; *t_out: the output frames of the step.
 * VAE_EINVAL when a loop would cut values of different frame counts. fn may be NULL. */
int vae_program_walk_step(const vae_program *p, const vae_loops *l, struct vae_op_clock *clk,
                          int *tv, int t_in, vae_walk_fn fn, void *user, int *t_out);
/* Frames a frame loop passes on at a time (l->width, 0 meaning 1). */
int vae_loops_width(const vae_loops *l);
/* Frames a pass of loop k takes of a chunk of t: frames [first, first + n) of pass `pass`, and
 * how many passes there are (a whole loop: one pass of all t). */
int vae_loops_passes(const vae_loops *l, int k, int t);
int vae_loops_pass(const vae_loops *l, int k, int t, int pass, int *first);

#endif
