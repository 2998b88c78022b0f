/* plan_internal.h -- shared by plan.c (decisions) and plan_geom.c (what follows from a program
 * alone). Nothing else includes it. */
#ifndef VAE_PLAN_INTERNAL_H
#define VAE_PLAN_INTERNAL_H

#include "plan.h"

/* The planner's own result code (positive, never returned by vae_plan_make): no candidate fits
 * the budget, the best one is described. VAE_ENOMEM means the host ran out of memory. */
enum { PLAN_NOFIT = 1 };

/* ---- the stream walk ------------------------------------------------------------------------ */
typedef struct plan_walk_sum {
    const vae_program *p;
    const int *vh, *vw;
    double macs;
    int64_t *frames; /* per op: output frames over the stream (NULL: not wanted) */
} plan_walk_sum;
/* Steps through the whole stream of t input frames (first chunk, then chunks) with loops l
 * (NULL: none), summing MACs and frames into sum (NULL: only *t_out). */
int plan_walk_stream(const vae_program *p, const vae_loops *l, int t, int first, int chunk,
                     plan_walk_sum *sum, int *t_out);

/* ---- loops ---------------------------------------------------------------------------------- */
/* Nearest upsampling in space (a conv's input, UPSAMPLE, a spatial SHUFFLE_UP). */
int plan_is_upsampling(const vae_op *op);
/* The loops of a part fed first, then chunk frames per step (plan_geom.c says which): loops[],
 * whole[] (1: a trim point that keeps the chunk whole), and the trim points among them. */
int plan_choose_loops(const vae_program *p, int first, int chunk, int frames, int trims, int *loops,
                      int *whole, int *n_loops, int *trim_at, int *n_trims);

/* ---- tile rows along one axis --------------------------------------------------------------- */
typedef struct plan_tiler {
    const vae_program *b; /* the tiled part */
    int axis;
    const int *n;       /* whole-frame length of each value along the axis */
    const int *trim_at; /* loop positions where single crossing values are trimmed */
    int n_trim_at;
    int align_in; /* crop starts and ends of B's input are multiples of this */
    int reduce;   /* GroupNorms per pixel: their statistics are all-reduced (band plans) */
    vae_span *need, *crop, *valid;
    vae_span *op_crop, *op_valid; /* NULL, or per op of b: its input's crop and exact rows as
                                   * the op reads them (before a later trim cuts the value) */
} plan_tiler;
/* The input crop for output rows own (exact: they must come out exact; else *in is the crop to
 * use), the trims rel[k] at trim_at[k] (offset, length in the value's crop) and every value's
 * extent len[v]; need/crop/valid hold each value's rows afterwards. */
int plan_tile_axis(const plan_tiler *t, vae_span own, int exact, vae_span *in, vae_span *rel,
                   int *len);
/* Owned spans of n rows in pieces of `size` (multiples of align, the last one what is left). */
int plan_split_axis(int n, int size, int align, vae_span *out, int max);
/* k spans of [0, n) with lengths in proportion to share[0..k) (summing to 1), bounds multiples of
 * align, each at least align long; 0 when n is too short for that */
int plan_split_shares(int n, const double *share, int k, int align, vae_span *out);
/* Blend crops of n rows: `size` rows every size - overlap, the last ending at n. */
int plan_split_blend(int n, int size, int overlap, int align, vae_span *out, int max);

/* ---- the planner's state (plan.c), shared with the tile evaluation (plan_tiles.c) ----------- */
typedef struct part {
    vae_program prog; /* the slice (or a copy of the whole program's ops) */
    int from, to, present;
    int first, chunk; /* input frames per step */
    /* two ways through it: [0] whole chunks (trim points only), [1] frame by frame after
     * temporal upsampling (less memory, a little slower on GPUs) */
    vae_loops loops[2];
    int loop_at[2][VAE_MAX_LOOPS], whole[2][VAE_MAX_LOOPS], n_loops[2];
    int trim_at[VAE_MAX_LOOPS], n_trim_at;
    int *vh, *vw; /* whole-frame shapes of the slice's values */
} part;

enum { MAX_CUTS = 4, MAX_SPANS = 96 }; /* start points of B; tiles per axis */
enum { BLEND_LEAST_PX = 64 }; /* the smallest blended tile the planner chooses, video pixels */

typedef struct planner {
    const vae_plan_request *rq;
    const vae_program *p;
    int *vh, *vw;            /* the whole program's value shapes */
    int64_t *op_frames;      /* per op: output frames over the stream */
    int64_t *step_frames[3]; /* per op: output frames of the untiled stream's steps 1, 2, 3 */
    int steps;               /* steps of the whole stream */
    part whole, pa, pb, pc;
    int tiled_ok;               /* a tiled plan exists (B without global ops) */
    int reduce_ok;              /* B may hold reducible ops (a group that can all-reduce) */
    int b_reduce;               /* this B's reducible ops (0: none, or not allowed): > 0, row
                                 * bands, one per device (vae_plan.reduce) */
    vae_span *op_crop, *op_valid; /* scratch of the band tiler: per op */
    int cuts[MAX_CUTS], n_cuts; /* where B may start (find_cuts) */
    int cut_k;                  /* the candidate pa, pb, pc are built for (-1: none) */
    int own_align;              /* owned tile edges in B's output are multiples of this */
    int fr;                     /* the loops being evaluated: 0 whole chunks, 1 frame by frame */
    double macs_whole;          /* of the untiled program */
    /* scratch for tilers */
    vae_span *need, *crop, *valid;
    int *len_y, *len_x;
} planner;

typedef struct cand {
    vae_plan_kind kind;
    int fr;             /* the loops it was evaluated with */
    int width;          /* frames its frame loops take at a time (0: the part's) */
    int ty, tx;         /* tile grid */
    int strips;         /* TILED: column strips that hand their edges on (strip.h), 0: tiles
                         * with halos */
    int slots_host;     /* strips: their slots in host memory */
    int tile_h, tile_w; /* owned tile size in B's output (TILED), or input crop size (BLEND) */
    int blend_tile, blend_tile_w, blend_overlap; /* BLEND: the tiles' height, width and
                                                  * overlap, video pixels */
    int tiles;          /* TILED: how many (a split may give fewer than asked for) */
    int cut;            /* TILED: the cut candidate (planner.cuts) */
    int64_t peak, peak_alloc, scratch;
    int64_t caches; /* causal caches of its largest part or tile */
    int64_t frame;  /* the largest frame one of its op calls sees, in pixels (whole-frame parts
                     * and each tile's values): at most VAE_PLAN_MAX_FRAME_PIXELS to run */
    int store_host[2], store_file[2]; /* (vae_plan's) */
    int a_shared; /* TILED, a group: A once, on the first device (vae_plan.a_shared) */
    int bands;    /* TILED, a group: row bands with GroupNorms in B (vae_plan.reduce) */
    int n_offload;       /* WHOLE: the n largest causal caches in host memory (plan_offload.c) */
    int64_t host_caches; /* their bytes */
    int64_t host_ring;   /* the device ring the backend stages their copies in (in the peak) */
    double host_traffic; /* the bytes their copies move over the run */
    double macs;
    double cost; /* TILED: macs plus op calls, the host store's traffic and the copies on the
                  * device in MAC-equivalents (eval_tiles),
                  * with B's share divided among the devices of a group (vae_plan_request.ranks) */
} cand;

/* MACs a GPU does in the time one byte crosses between host and device (~200 TMAC/s of 16-bit
 * tensor cores against ~20 GB/s of staged copies): the exchange rate of the searches' costs */
#define HOST_BYTE_MACS 1e4
/* the share of host traffic a backend that copies on a second stream still pays (its bus
 * overlaps compute, vae_backend.host_copy_bytes: on the H100 it took a third off strips' slot
 * copies, and the rest was mostly the reads it could not prefetch) */
#define OVERLAPPED_HOST_SHARE 0.5
/* MACs in the time each op call (of each tile) costs beyond its MACs (H100, Wan2.2 704p decode at 4
 * GiB: 2x2 halo tiles took 0.34 s more than their extra work, 1x8 strips 0.27 s more than 1x4
 * with less traffic: ~50 us per op call and tile, as smaller problems run less efficiently, at the
 * ~330 TMAC/s the untiled decode reaches) */
#define OP_CALL_MACS 1.6e10

/* whether a candidate's op calls keep within the frame the backends index (plan.h) */
int plan_runnable(const cand *c);
/* steps of part q over t_in input frames */
int plan_part_steps(const part *q, int t_in);
/* the most input frames one step of part q takes (its first step's or a later one's) */
int plan_part_max_step(const part *q);
/* op calls of op i of the whole program over the stream at the frame loops pl->fr: one a step,
 * or one a frame inside a frame loop */
double plan_op_calls(const planner *pl, int i);

/* ---- plan_offload.c: whole frames with causal caches in host memory ------------------------ */
/* The whole program's memory (its input chunk included) with the caches of the ops offload[i]
 * != 0 in host memory (NULL: none); op_caches (NULL: not wanted): each op's contiguous-window
 * cache bytes. -1 when the host ran out of memory. */
int64_t plan_whole_mem(const planner *pl, const unsigned char *offload, int64_t *op_caches,
                       int64_t *scratch, int64_t *caches);
/* Whole frames with the fewest caches in host memory that fit the budget, the cheaper of the
 * frame-loop choices, into *best (PLAN_NOFIT: none fits); *floor_c lowered to every cache out
 * where that is smaller. forced > 0: the `forced` largest, whatever the budget. */
int plan_choose_offload(planner *pl, int forced, cand *best, cand *floor_c);
/* The chosen candidate's homes into the plan (vae_plan.offload), at pl->fr. */
int plan_fill_offload(planner *pl, const cand *c, vae_plan *plan);

/* ---- plan_tiles.c: a part's memory, and tile grids of part B with their peak and work ------- */
/* The part's memory for value shapes vh x vw (a tile's, or the whole frame's; zw: a strip's
 * rebuilt inputs, vae_plan_mem_part); *scratch raised to the backend scratch it needs; *caches
 * (when given): its causal caches; *copies (when given): the bytes its windows copy on the
 * device over the t_in frames (vae_plan_request.step_copies). -1 when the host ran out of
 * memory. */
int64_t plan_part_mem(const planner *pl, const part *q, const int *vh, const int *vw, int t_in,
                      const vae_plan_trim *trims, int n_trims, const int *zw, int64_t *scratch,
                      int64_t *caches, double *copies);
/* the largest frame of values [0, n) of h x w, in pixels */
int64_t plan_max_frame(const int *vh, const int *vw, int n);
/* bytes as the backend's allocator takes them */
int64_t plan_rounded(const planner *pl, int64_t bytes);
/* bytes of t frames of value v of part q at h x w */
int64_t plan_frames_bytes(const planner *pl, const part *q, int v, int t, int h, int w);
/* frames of the whole stream that part q's input carries */
int plan_part_in_frames(const planner *pl, const part *q);
/* Exact tiles of B (pl->pb) with owned tiles of tile_h x tile_w in B's output; blended tiles of
 * the whole program (the request's tile size and overlap): peak, work and cost into c, and the
 * tiles into plan when given. */
int plan_try_tiled(planner *pl, int tile_h, int tile_w, cand *c, vae_plan *plan);
/* n column strips of B (strip.h): peak, work and cost into c, the strips into plan when given;
 * VAE_EUNSUPPORTED (no error left behind) when B cannot run in n strips. */
int plan_try_strips(planner *pl, int n, cand *c, vae_plan *plan);
int plan_try_blend(planner *pl, int tile_h, int tile_w, int overlap, cand *c, vae_plan *plan);

#endif
