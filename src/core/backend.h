/* backend.h -- what a backend provides: buffers and one function per op family (internal).
 *
 * No model logic lives in a backend, and the executor never looks inside a buffer. Activations are
 * channels-last [t][h][w][c] in the backend's activation dtype (elem_size bytes per value).
 * Temporal ops receive their input as an array of frame pointers (cache frames followed by the
 * chunk's frames; each frame is [h][w][c] contiguous) so that no concatenation copy is needed.
 */
#ifndef VAE_BACKEND_H
#define VAE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "op.h"
#include "program.h"
#include "vae.h"

typedef struct vae_backend vae_backend;
struct vae_comm;

/* A video-side or latent tensor in the caller's memory, seen as [c][t][h][w] with strides in
 * elements (any non-negative strides: PyTorch views), in a user dtype. */
typedef struct vae_io_view {
    void *data;
    vae_dtype dtype;
    int c, t, h, w;
    int64_t sc, st, sh, sw;
} vae_io_view;

typedef struct vae_backend_vtbl {
    const char *name;
    void (*destroy)(vae_backend *be);
    /* buffers: NULL on failure (the executor reports VAE_ENOMEM) */
    void *(*alloc)(vae_backend *be, size_t bytes);
    void (*release)(vae_backend *be, void *p);
    int (*upload)(vae_backend *be, void *dst, const float *src, size_t n);   /* host f32 -> act */
    int (*download)(vae_backend *be, float *dst, const void *src, size_t n); /* act -> host f32 */
    int (*copy)(vae_backend *be, void *dst, const void *src, size_t bytes);
    /* rows rows of row_bytes each, from src (rows src_pitch bytes apart) to dst (dst_pitch
     * apart): crops of channels-last frames */
    int (*copy2d)(vae_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                  size_t row_bytes, size_t rows);
    int (*zero)(vae_backend *be, void *dst, size_t bytes);
    /* rows rows of row_bytes zeros, dst_pitch bytes apart (columns of channels-last frames) */
    int (*zero2d)(vae_backend *be, void *dst, size_t dst_pitch, size_t row_bytes, size_t rows);
    int (*sync)(vae_backend *be);
    /* Optional (both or none; NULL: host stores keep float32 frames and go through
     * upload/download): `bytes` of host memory that copy2d reads and writes like a buffer
     * (pinned on a GPU: copies at the bus's speed, in stream order). host_free may keep the
     * block for a later host_alloc (trim and destroy give it back). NULL when there is none; no
     * error is left behind (the caller falls back). */
    void *(*host_alloc)(vae_backend *be, size_t bytes);
    void (*host_free)(vae_backend *be, void *p);
    /* Optional, a hint: [host, host + bytes) of host_alloc memory is soon read by copy2d, after
     * what copy2d calls before this one wrote there. The backend may copy it towards the device
     * now, while the work queued before goes on; results are the same either way (a write into
     * the range after the hint makes the backend forget it). NULL: no prefetching. */
    int (*prefetch)(vae_backend *be, const void *host, size_t bytes);

    /* Per-op weights in the backend's layout, made once per session. *state may stay NULL. */
    int (*prepare)(vae_backend *be, const vae_op *op, void **state);
    void (*unprepare)(vae_backend *be, const vae_op *op, void *state);

    /* CONV. frames: n_in input frames [h][w][c_in] (already including temporal padding/cache);
     * y: [t_out][h_out][w_out][c_out] with t_out = (n_in - kt) / st + 1 >= 1.
     * residual: NULL or y-shaped, added after bias. With op->up > 1 (only for backends that set
     * conv_upsample) h, w are the size before the upsampling. */
    int (*conv)(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
                int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out);
    /* RMS_NORM, GROUP_NORM (with fused op->act); x, y: [t][h][w][c] (y may equal x) */
    int (*norm)(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                int h, int w);
    /* Optional (NULL: strips copy an RMS norm's input together first, exec_strip.c): RMS_NORM
     * over rows rows of w voxels [w][c], x's rows x_pitch bytes apart and y's y_pitch (columns
     * of channels-last frames; x and y do not overlap). */
    int (*norm_rows)(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                     void *y, size_t y_pitch, int64_t rows, int w);
    /* Optional (both or none; NULL: GroupNorms run only over whole frames, and device groups
     * get no band plans): a GROUP_NORM split across the row bands of a group (plan.h reduce).
     * norm_stats: for each frame f < t and group g of x [t][h][w][c], over the rows
     *   [y0, y0 + rows): st[(f * groups + g) * 3 + {0, 1, 2}] = count, sum, sum of squares, in
     *   double (from the band's own mean and squared deviations: n, n m, M2 + n m^2);
     * norm_apply: y = act((x - mean) * rstd * w + b) over all of x [t][h][w][c] (y may equal
     *   x) with st summed over the bands: mean = sum / count, var = sum of squares / count -
     *   mean^2.
     * st is host memory (written before norm_stats returns), or with dev = 1 a buffer of this
     * backend, written and read in stream order (nothing waits: a device communicator sums it
     * in between). */
    int (*norm_stats)(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                      int rows, double *st, int dev);
    int (*norm_apply)(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                      int h, int w, const double *st, int dev);
    /* Optional (NULL: none): a communicator of comm.h among n backends of this kind (lanes[k]
     * rank k, each on its own device), its buffers theirs (device_buffers = 1). VAE_EUNSUPPORTED
     * with no error left behind where it cannot be made (no NCCL, a device twice): the caller
     * takes comm_threads.c instead. */
    int (*comm_create)(vae_backend *const *lanes, int n, struct vae_comm **ranks);
    /* Optional (NULL: none; the session takes comm_threads.c's registry): this backend's rank
     * `rank` of a group of `world` processes, joined with the id that one rank made
     * (vae_cuda_group_id_create); returns once every rank has joined. */
    int (*comm_join)(vae_backend *be, const unsigned char *id, int rank, int world,
                     struct vae_comm **out);
    /* ACT (a), ADD (a + b2), SCALE_SHIFT (a): n_vox voxels of op->c_in channels (y may equal a) */
    int (*eltwise)(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                   void *y, int64_t n_vox);
    /* UPSAMPLE and SHUFFLE_UP (n_in frames, frames contiguous in x) and SHUFFLE_DOWN (frames list
     * of n_in = ft * t_out frames). h, w: input size. */
    int (*resample)(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                    int w, void *y, int t_out);
    /* ATTENTION per frame: qkv [t][h][w][3c] -> y [t][h][w][c], the query tokens [q0, q1) of
     * each frame (0 <= q0 <= q1 <= h * w; a band plan's ranks share a frame's queries,
     * exec_reduce.c) over all its keys. The other tokens of y keep what they held, or (a path that
     * cannot start elsewhere: CUDA's fused kernel) get their own exact values too. */
    int (*attention)(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y,
                     int t, int h, int w, int q0, int q1);

    /* Optional (all four or none; NULL: the session uses upload/download): asynchronous chunk
     * transfers in the user's planar float32 layout [c][t][h][w], so that the session can prepare
     * the next chunk and hand out the previous one while the device computes.
     * stage_in: a host buffer of at least `bytes` to fill for the next upload_planar (it stays
     *   valid until the second next stage_in call).
     * upload_planar: dst [t][h][w][c] (activation dtype) <- src [c][t][h][w] (src from stage_in);
     *   may return before the copy is done (with download_stage, the copy goes into a device
     *   stage the plan counts, vae_plan_request.stage_io, and starts at once, beside the work
     *   queued before it).
     * download_planar: starts copying src [t][h][w][c] to a host buffer [c][t][h][w] float32
     *   (*host; valid until the second next download_planar call); download_wait(be, *host)
     *   returns once it holds the data. */
    void *(*stage_in)(vae_backend *be, size_t bytes);
    int (*upload_planar)(vae_backend *be, void *dst, const float *src, int t, int h, int w, int c);
    int (*download_planar)(vae_backend *be, const void *src, int t, int h, int w, int c,
                           float **host);
    int (*download_wait)(vae_backend *be, const float *host);
    /* Optional (both or none): downloads whose copies run beside the next step's work.
     * download_stage: src [t][h][w][c] (a step's output chunk) converted now, in stream order,
     *   into a device stage (planar float32, t x h x w x c x 4 bytes, held until the next run:
     *   the plan counts it, vae_plan_request.stage_io), as *pieces pieces of `piece` frames (the
     *   last: the rest); *pieces = 0 where there is no stage (the caller downloads as without it;
     *   no error). src may be overwritten once it returns.
     * download_staged: starts copying piece k of the staged chunk to a host buffer [c][n][h][w]
     *   float32, as download_planar (download_wait; a new download_stage waits for the copies). */
    int (*download_stage)(vae_backend *be, const void *src, int t, int h, int w, int c, int piece,
                          int *pieces);
    int (*download_staged)(vae_backend *be, int k, float **host);

    /* Optional (all four or none; NULL: the backend cannot use the caller's device memory): tensors
     * the caller holds on this backend's device, read and written in place.
     * view_finite: *first_bad = linear index ([c][t][h][w] order) of the first NaN/Inf, or -1.
     * view_import: dst [n][rows][cols][c] (activation dtype) <- frames [f, f+n), rows
     *   [y0, y0+rows), columns [x0, x0+cols) of src.
     * view_export: frames [f, f+t) of dst, rows [y0, y0+rows), columns [x0, x0+cols) <- the same
     *   size window at (sy, sx) of src [t][h][w][c] (activation dtype).
     * stream_join: after = 0: work queued from now on runs after what is queued on the caller's
     *   stream (a cudaStream_t; NULL: the default stream) so far; after = 1: work queued on
     *   the caller's stream from now on runs after the backend's work so far. */
    int (*view_finite)(vae_backend *be, const vae_io_view *v, int64_t *first_bad);
    int (*view_import)(vae_backend *be, void *dst, const vae_io_view *src, int f, int n, int y0,
                       int rows, int x0, int cols);
    int (*view_export)(vae_backend *be, const void *src, int t, int h, int w, int sy, int sx,
                       int rows, int cols, const vae_io_view *dst, int f, int y0, int x0);
    int (*stream_join)(vae_backend *be, void *stream, int after);
    /* Optional (NULL: no): 1 when view_export of this backend can write the device view v (it
     * is on the backend's device, or on one it reaches directly: CUDA peer access). */
    int (*view_reach)(vae_backend *be, const vae_io_view *v);

    /* Optional (NULL: nothing cached): gives cached free device blocks back. */
    int (*trim)(vae_backend *be);
    /* Optional (NULL: any thread may call): makes the calling thread work on the backend's
     * device (CUDA: cudaSetDevice); a runner of a device group calls it on its own thread. */
    int (*bind)(vae_backend *be);
    /* Optional (NULL: nothing to pay): what a process pays once for program p's ops, paid at
     * session creation instead of in the first call (CUDA: cuBLAS's first use by the attention,
     * and p's parameters converted into pinned host memory, kept until trim). Holds no device
     * memory afterwards; failing to stage is no error (the first call pays instead). */
    int (*warm)(vae_backend *be, const vae_program *p);

    /* Optional (NULL: none): the kernel this backend runs conv op with in E4M3 if it is marked
     * (dtype fp8; vae_op_fp8), whatever its mark now (fp8_shapes.h vae_fp8_kernel; VAE_FP8_NONE:
     * not in E4M3): the session spends its budget of E4M3 convs on these and keeps the kernel in
     * op->fp8_kernel (vae_program_pick_fp8), which the backend's conv then reads. */
    int (*fp8_conv)(vae_backend *be, const vae_op *op);
    /* Optional (NULL: never): 1 when this backend's producer op (an RMS norm, or a conv with
     * norm_w) can write its output as the E4M3 codes that its only reader, the E4M3 conv reader,
     * takes as they are (op.h fp8_codes_bound, vae_program_mark_fp8_codes); the backend
     * then honours both marks on every call, whatever path runs them. */
    int (*fp8_codes)(vae_backend *be, const vae_op *producer, const vae_op *reader);

    /* Optional (NULL: always yes): does this temporal conv want its input as a contiguous window
     * (see executor.c)? Asked at the start of each stream, so a backend may answer from what it
     * measured on an earlier stream. */
    int (*conv_window)(vae_backend *be, const vae_op *op, void *state);
    /* 1: conv() takes op->up > 1 itself (else the executor upsamples the input first) */
    int conv_upsample;
    /* 1: conv() applies op->norm_w (an RMS norm of its output, program.h) itself; 0: the session
     * keeps such norms as ops of their own (vae_program_fuse_norms is not run) */
    int conv_norm;
    /* 1: conv() applies op->act (an activation of its output, program.h vae_program_fuse_acts)
     * itself; 0: the session keeps activations as ops of their own */
    int conv_act;

    /* Optional (NULL: nothing is held besides the executor's buffers, the machine's available
     * memory is unknown): for memory budgets. *avail: the bytes this session may use on the
     * device now (free device memory plus what this backend already holds; CPU: available RAM);
     * *reserve: what the backend will hold for program p besides the buffers it hands out and
     * its scratch area (weights in its layouts, workspace); *scratch: the scratch area now. */
    int (*mem_info)(vae_backend *be, const vae_program *p, int64_t *avail, int64_t *reserve,
                    int64_t *scratch);
    /* Optional (NULL: none): the scratch bytes an op needs for t input frames of h x w, what no
     * blocking can make smaller: minimal = 0 for any of the paths the backend may choose,
     * minimal = 1 for the one needing the least (a conv in place instead of a gathered copy).
     * scratch_reserve grows the scratch area to `bytes` before a run (and gives back the staging
     * of host copies where host_copy_on is off), so that it does not grow
     * (and keep its old block alive for recorded graphs) during one; capped = 1: the run must do
     * with it (a path needing more is not taken where another one can run). */
    int64_t (*scratch_need)(vae_backend *be, const vae_op *op, int t, int h, int w, int minimal);
    int (*scratch_reserve)(vae_backend *be, size_t bytes, int capped);
    /* Optional (NULL: exact): the bytes an allocation of `bytes` really takes. */
    size_t (*alloc_size)(size_t bytes);

    /* Optional (all four or none): work graphs. graph_begin starts recording instead of running
     * the work queued from now on (calls still return as if it ran; buffers handed out while
     * recording keep their addresses in the graph); graph_end stops and returns the recorded
     * work as a graph that graph_launch queues again, on the same buffers. Any failure while
     * recording (an op that cannot be recorded) surfaces at the latest from graph_end; nothing
     * recorded has run then. */
    int (*graph_begin)(vae_backend *be);
    int (*graph_end)(vae_backend *be, void **graph);
    int (*graph_launch)(vae_backend *be, void *graph);
    void (*graph_free)(vae_backend *be, void *graph);
    /* Optional (both or none): a mark in the queue of work (mark), and whether the device has
     * reached the last one (mark_reached: 1, or 1 where it cannot tell; 0: still behind it),
     * which says whether the host or the device bounds a stream of steps (executor.c). */
    int (*mark)(vae_backend *be);
    int (*mark_reached)(vae_backend *be);
} vae_backend_vtbl;

struct vae_backend {
    const vae_backend_vtbl *v;
    vae_dtype dtype;  /* activation dtype */
    size_t elem_size; /* bytes per activation value */
    int64_t bytes_in_use, bytes_peak;
    /* > 0: the memory budget; an allocation that would take what the backend holds over it
     * fails (VAE_ENOMEM naming the budget), so that a plan the model got wrong fails cleanly and
     * is made again, instead of taking the device's memory from others */
    int64_t limit;
    int refused; /* set when the limit refused an allocation (what a new plan can fix, unlike
                  * a device or host that ran out) */
    int64_t host_copy_bytes; /* device memory it takes to stage copies to and from host_alloc
                              * memory, where host_copy_on allows: plans with strips' slots on
                              * the host count it and turn it on for their run (the other host
                              * copies are few and large, and go without) */
    int host_copy_on;
    int64_t host_copy_ring; /* a larger staging ring the run's plan counted for copies it wants
                             * prefetched whole (caches in host memory, vae_plan.host_ring), or
                             * 0: host_copy_bytes */
    int host_memory; /* 1: its buffers are host memory (the CPU's): comm_threads.c reads them */
};

/* The host's device allocator (vae_session_options.dev_alloc); alloc NULL: cudaMalloc. */
typedef struct vae_dev_allocator {
    void *(*alloc)(size_t bytes, int device_index, void *stream, void *user);
    void (*free)(void *ptr, size_t bytes, int device_index, void *stream, void *user);
    void *user;
    int64_t (*pool_free)(int device_index, void *user); /* optional: its cached free bytes */
} vae_dev_allocator;

/* Backend constructors (NULL-safe failure with vae_fail). */
int vae_cpu_backend_create(vae_backend **out, vae_dtype dtype, int threads);
#ifdef VAE_HAVE_CUDA
struct vae_settings;
int vae_cuda_backend_create(vae_backend **out, vae_dtype dtype, int device_index,
                            const struct vae_settings *settings, const vae_dev_allocator *alloc);
int vae_cuda_available(void);
/* a group id for comm_join (NCCL's unique id), VAE_COMM_ID_BYTES bytes */
int vae_cuda_group_id_create(unsigned char *id);
#endif

#endif
