/* plan.h -- the planner: how a video goes through a program within a memory budget (internal).
 *
 * The planner walks a program over the stream with the op rules (op.h) and decides, before
 * anything runs:
 * - frame loops (executor.h): after a temporal upsampling the later, larger stages take one frame
 *   at a time (exact: every norm in these models is per pixel or per frame);
 * - spatial tiles, in one of two orders:
 *   WHOLE   whole frames (one "tile"), everything streams chunk by chunk;
 *   TILED   exact tiles, tile-major: the program is cut into three parts, A (before the tiles,
 *           whole frames), B (tiled: no op of it is global per frame) and C (after). A runs over
 *           the whole video first into a store; then each tile of B streams through every frame
 *           with its own causal caches, reading its crop of A's store, and writes its exact part
 *           into B's output store; C runs last. Decoders tile after their last global op (the
 *           middle attention: A = the latent-resolution part), encoders before their first (C =
 *           the middle and head). A tile's crop carries the halo its receptive field needs, so the
 *           rows it keeps equal the untiled ones. In a device group that can all-reduce
 *           (comm.h), B may also hold GroupNorms: then it runs in row bands, one per device, each
 *           normalising with the statistics of every band's own rows summed over the group
 *           (vae_plan.reduce);
 *   BLEND   overlapping tiles of the whole program, each run as an image of its own (statistics,
 *           attention, caches per tile), blended with raised-cosine ramps: not exact, for sizes
 *           whose exact floor exceeds the budget;
 * - and the peak memory of each choice, from a model of the executor's allocations (plan_mem.c),
 *   so that it takes the least tiling that fits the budget, or says which floor does not fit.
 */
#ifndef VAE_PLAN_H
#define VAE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "executor.h"
#include "op.h"
#include "program.h"
#include "strip.h"
#include "vae.h"

struct vae_backend;

typedef enum { VAE_PLAN_WHOLE = 0, VAE_PLAN_TILED = 1, VAE_PLAN_BLEND = 2 } vae_plan_kind;

enum { VAE_PLAN_MAX_TRIMS = 16 };

/* The engine's limits, which the planner keeps to (an input beyond them is refused before any
 * work, VAE_ESHAPE; options that would break them, VAE_EINVAL):
 * - the largest frame an op call sees, in pixels: the backends' convs and attention index a
 *   frame with 32-bit integers (cpu_conv.c, cuda_conv.c, vae_attention_check_call), and refuse
 *   larger ones only when they run. Parts that run whole frames must keep below it; tiles split
 *   the rest;
 * - the most bytes one value of the program holds over the whole video (2^56, 64 PiB): the
 *   memory model sums a few such whole-video stores in int64. */
#define VAE_PLAN_MAX_FRAME_PIXELS ((int64_t)INT32_MAX / 2)
#define VAE_PLAN_MAX_VALUE_BYTES ((int64_t)1 << 56)

/* A slice of the program run by one executor. */
typedef struct vae_plan_part {
    int from, to;     /* ops [from, to); from == to: absent */
    int first, chunk; /* input frames of its first step, then of every later step */
    int n_loops;
    int loops[VAE_MAX_LOOPS]; /* loops, op indices relative to `from` */
    int whole[VAE_MAX_LOOPS]; /* 1: a trim point that keeps the chunk whole, 0: frame by frame */
    int loop_width;           /* frames a frame loop passes on at a time (0: 1) */
} vae_plan_part;

typedef struct vae_plan_trim {
    int value;        /* value id in the part's slice */
    int y0, x0, h, w; /* rows/columns kept of that value's frames */
} vae_plan_trim;

typedef struct vae_plan_tile {
    vae_span in_y, in_x;   /* the crop of B's input (B's input coordinates) */
    vae_span out_y, out_x; /* what B computes from it (B's output coordinates) */
    vae_span own_y, own_x; /* what this tile contributes: its exact part (TILED), or the part of
                            * out it blends into (BLEND, = out) */
    int n_trims;
    vae_plan_trim trims[VAE_PLAN_MAX_TRIMS];
} vae_plan_tile;

/* What the planner needs to know of the call and the backend. */
typedef struct vae_plan_request {
    const vae_program *prog;
    int encode;
    int t, h, w;             /* input frames and size (the frames used: 1 + k*chunk) */
    size_t elem;             /* bytes per activation value */
    int64_t budget;          /* bytes; <= 0: unlimited */
    int64_t fixed;           /* bytes the backend holds besides what the plan allocates
                              * (weights on the device, scratch, workspace) */
    int conv_upsample;       /* the backend upsamples inside conv (no temporary) */
    size_t (*round)(size_t); /* the backend allocator's block size for a request (NULL: exact) */
    /* the backend's scratch: what an op needs at least (NULL: none) and what it holds now;
     * planar_io: chunks pass through it as float32 on their way in and out */
    int64_t (*scratch_need)(struct vae_backend *be, const vae_op *op, int t, int h, int w,
                            int minimal);
    int scratch_minimal;     /* 1: plan with the least scratch of every op (the backend then
                              * keeps to its paths that fit); else vae_plan_make weighs such a
                              * plan where nothing fits, where the paths of choice cost link
                              * traffic and, with least_memory, memory */
    int least_memory;        /* no budget of the caller's: a whole-frame plan's least-scratch
                              * twin is taken where it needs less memory at no more cost */
    struct vae_backend *be;
    int64_t scratch_now;
    int planar_io;
    int stage_io; /* (with planar_io) chunks in and out pass through stages of their own
                   * instead (the CUDA backend: copies beside the steps' work, vae_backend_vtbl
                   * download_stage), held through the run: added to the peak */
    vae_tile_mode mode;
    int tile_h, tile_w;            /* forced exact tiles, pixels of the video side (0: planner) */
    int blend_tile, blend_overlap; /* pixels of the video side */
    int blend_auto;                /* no tile size given: the cheapest grid of even blended
                                    * tiles that fits (blend_tile unused) */
    int blend_overlap_auto;        /* no overlap given: an eighth of the tile (of the frame's
                                    * even share, with blend_auto) */
    int video_factor;              /* pixels of the video side per pixel of the latent side */
    int frame_loops;               /* settings.exec_frames (2: frame loops always) */
    int loop_frames;               /* settings.exec_loop_frames (0: chosen where caches go to
                                    * host memory, else 1) */
    int64_t host_store_max;        /* a host store above this many bytes goes to a temporary
                                    * file, strips' slots above it stay on the device
                                    * (settings.exec_host_mb) */
    int cut;                       /* settings.plan_cut: B from this cut candidate (-1: chosen) */
    int store_host;                /* settings.exec_store_host: stores on the host */
    int host_direct;               /* the backend reads and writes host stores in place
                                    * (host_alloc): nothing of them is staged on the device */
    int64_t host_copy;             /* device memory the backend takes to stage the copies of
                                    * strips' slots in host memory (vae_backend.host_copy_bytes) */
    int strips;                    /* settings.plan_strips: exact tiles as column strips that
                                    * hand their edges on (strip.h) where they cost less (0), never
                                    * (-1), or always in this many strips (>= 2) */
    int strip_norm_in_place;       /* strips' RMS norms read their input where it lies
                                    * (exec_strip.c): only what lies left of it is rebuilt */
    int ranks;                     /* devices of a group sharing the tiles (runner_group.c; 0 or
                                    * 1: one device): tiles are taken where sharing them beats
                                    * whole frames on one device, in grids of a multiple of
                                    * `ranks` tiles, with B's store on the host (every device
                                    * writes it); the budget is each device's */
    int processes;                 /* the ranks are processes (runner_rank.c): no host memory
                                    * is common to them, so A is never shared */
    int offload;                   /* settings.plan_offload: causal caches in host memory
                                    * where whole frames need it to fit (0), never (-1), or
                                    * always the n largest (n >= 1) */
    /* the memory model's per-op view of causal caches (whole programs only, NULL: none):
     * offload[i] 1: op i's cache (a contiguous window's) is in host memory; op_caches: filled
     * with each op's contiguous-window cache bytes, wherever it lives */
    const unsigned char *offload_ops;
    int64_t *op_caches;
    /* filled (when given) with the bytes the windowed ops copy on the device in the last step
     * the memory model walks (a steady one): each window's cached frames put in front of its
     * input, and the frames it keeps copied out (exec_window.c) */
    double *step_copies;
    int reduce;                    /* the group can all-reduce (comm.h) and its backends split
                                    * GroupNorm (norm_stats): band plans (vae_plan.reduce) where
                                    * they are faster (1) or wherever they apply (2: tests) */
} vae_plan_request;

typedef struct vae_plan {
    vae_plan_kind kind;
    int encode;
    int t_in, h_in, w_in, c_in;
    int t_out, h_out, w_out, c_out;
    vae_plan_part part[3]; /* A, B (tiled; WHOLE: the whole program), C */
    /* stores between parts: A's and B's outputs over the whole video, [t][h][w][c] */
    int store_t[2], store_h[2], store_w[2], store_c[2];
    int store_host[2]; /* the store is kept on the host (it would not fit the budget) */
    int store_file[2]; /* of those, above the host cap (host_store_max): in a temporary file */
    int a_shared;      /* a device group: A runs once, on the first device, into its store on the
                        * host, which the others' tiles read frame by frame as it fills (their
                        * tiles wider by A's share of the work); else every device runs A */
    int tiles_y, tiles_x, n_tiles;
    vae_plan_tile *tiles; /* row-major */
    /* a device group's row bands (tiles n x 1, n = its devices, tile k on device k) whose B holds
     * GroupNorms: each normalises with the sums over the group of every band's own rows;
     * norms[k * n_norms + j]: tile k's owned rows at the j-th GroupNorm of B */
    int reduce, n_norms;
    vae_exec_norm *norms;
    int tile_h, tile_w;   /* B-output size of the (non-edge) owned tile */
    vae_strips *strips;   /* TILED as column strips (strip.h; tiles 1 x n, run in order, no
                           * halos): their geometry for B's executor, or NULL */
    int blend_overlap;    /* BLEND: ramp width in B-output pixels */
    double macs;          /* including the tiles' redundant halo work */
    double cost;          /* the predicted time in MAC-equivalents: work, op calls, host traffic
                           * (what compares plans of one input: vae_session_plan_for) */
    double macs_whole;    /* of the untiled program */
    int64_t peak;         /* predicted peak bytes: fixed + what the plan allocates */
    int64_t peak_alloc;   /* the part of it the plan allocates (activations, caches, stores,
                           * input chunks): what a CPU backend counts */
    int64_t scratch;      /* the backend scratch it needs (reserved before the run) */
    int scratch_minimal;  /* planned with the ops' least scratch: the backend must keep to it */
    int64_t floor;        /* the smallest exact plan's peak */
    int64_t caches;       /* of the peak: causal caches (the largest part's, or tile's) */
    int64_t floor_caches; /* of the floor: causal caches, what no tile size makes smaller in
                           * plans that run whole frames */
    int64_t floor_host_caches; /* of the floor: causal caches it keeps in host memory */
    /* WHOLE: per op of the program, the bytes of its causal cache's home in host memory (0: on
     * the device; NULL: none), vae_exec_set_offload; n_offload of them, host_caches bytes in
     * all; host_ring: the device ring the backend stages their copies in (counted in the peak);
     * host_traffic: the bytes their copies move over a run of the planned shape */
    int64_t *offload;
    int n_offload;
    int64_t host_caches, host_ring;
    double host_traffic;
    int64_t budget;
    char why[1024]; /* the decision, for -v and errors */
} vae_plan;

/* Plans the call; VAE_ENOMEM (with the floor and the option to use in the message) when no exact
 * plan fits the budget and the mode is not BLEND, VAE_ESHAPE for input sizes the program cannot
 * take. */
int vae_plan_make(vae_plan *plan, const vae_plan_request *rq);
void vae_plan_free(vae_plan *plan);
/* A copy of src (a plan of a program of n_ops ops) that owns its arrays; VAE_EUNSUPPORTED for
 * plans with strips or band norms (not copied: callers plan again). */
int vae_plan_copy(vae_plan *dst, const vae_plan *src, int n_ops);
/* Output shape and MACs of the untiled program for this input (no budget, no tiles). */
int vae_plan_walk(const vae_program *p, int t, int h, int w, int *t_out, int *h_out, int *w_out,
                  double *macs);

/* ---- plan_mem.c: the memory model --------------------------------------------------------- */
/* Peak bytes of running slice `prog` (an executor with `loops`, trims `trims`) over a stream of
 * steps of t_first then t_next input frames (n_steps in all) of h x w: values, caches, temporaries
 * and the step output held between steps, as the executor allocates them (and the stages of the
 * chunks in and out: rq->stage_io); zw (NULL: none): for column strips, the width each op input
 * (i*2 + k) is rebuilt to (0: not); *scratch: the most backend scratch one of its ops needs;
 * *caches (when given): of the peak, the causal caches (the frames windowed ops keep between
 * steps). -1 when out of memory. */
int64_t vae_plan_mem_part(const vae_program *prog, const vae_loops *loops, const int *vh,
                          const int *vw, const vae_plan_request *rq, int t_first, int t_next,
                          int n_steps, const vae_plan_trim *trims, int n_trims, const int *zw,
                          int64_t *scratch, int64_t *caches);

#endif
