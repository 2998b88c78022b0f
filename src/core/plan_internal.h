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
    vae_span *need, *crop, *valid;
} plan_tiler;
/* The input crop for output rows own (exact: they must come out exact; else *in is the crop to
 * use), the trims rel[k] at trim_at[k] (offset, length in the value's crop) and every value's
 * extent len[v]; need/crop/valid hold each value's rows afterwards. */
int plan_tile_axis(const plan_tiler *t, vae_span own, int exact, vae_span *in, vae_span *rel,
                   int *len);
/* Owned spans of n rows in pieces of `size` (multiples of align, the last one what is left). */
int plan_split_axis(int n, int size, int align, vae_span *out, int max);
/* Blend crops of n rows: `size` rows every size - overlap, the last ending at n. */
int plan_split_blend(int n, int size, int overlap, int align, vae_span *out, int max);

#endif
