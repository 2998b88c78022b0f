/* exec_internal.h -- the executor's state, shared by executor.c (scheduling, values, frame
 * loops, graphs) and exec_window.c (causal windows and their caches). Nothing else includes it.
 */
#ifndef VAE_EXEC_INTERNAL_H
#define VAE_EXEC_INTERNAL_H

#include <stdatomic.h>

#include "executor.h"
#include "strip.h"

typedef struct window {
    void **cache;     /* kt-1 frame buffers [h][w][c] */
    void *cbuf;       /* contiguous mode: one buffer of kt-1 frames (the cache) */
    void *zero_frame; /* one zero frame, for zero front padding */
    size_t frame_bytes;
    int h, w, c; /* the frames it holds */
} window;

typedef struct op_state {
    void *prep;
    window win;
    vae_op_clock clock; /* the op's place in the stream (op.h) */
} op_state;

enum { VALUE_OWNED = 0, VALUE_VIEW = 1, VALUE_TEMP = 2, VALUE_IN_PLACE = 3 };

struct value;
/* A strip's rebuilt input that an op reads where it lies (exec_strip.c): buf holds its first
 * `left` columns ([t][h][left][c]), x's columns [x0, x0 + cols) follow, then zeros to w. */
typedef struct value_in_place {
    const struct value *x;
    int left, x0, cols;
} value_in_place;

typedef struct value {
    void *buf;
    void *base; /* the allocation holding buf (a window buffer starts before buf), or NULL */
    int t, h, w, c;
    int refs;
    int kind; /* VALUE_*: VIEW = one frame of a crossing value (never freed), TEMP = its trim,
               * IN_PLACE = a strip's input in two places (in_place) */
    value_in_place in_place;
} value;

typedef struct trim {
    int on, y0, x0, h, w;
} trim;

struct vae_exec {
    const vae_program *p;
    vae_backend *be;
    vae_settings set;
    const atomic_int *cancel; /* vae_exec_set_cancel: non-zero stops a step before its next op */
    vae_exec_host host;       /* vae_exec_host_take */
    op_state *st;
    value *val;
    int *uses;           /* static number of consumers of each value */
    int *win_of;         /* per value: the op whose contiguous window it fills, or -1 */
    int *head;           /* per value: frames of room in front of its buffer (vae_program_heads) */
    trim *trims;         /* per value */
    const void **frames; /* scratch frame-pointer list */
    int frames_cap;
    vae_loops loops;   /* frame loops (program.h) */
    vae_op_clock *clk; /* scratch: op clocks for counting a step's output frames */
    int *tv;           /* scratch: frame counts per value */
    value gather;      /* with loops: the step's output frames, gathered */
    int gather_t, gather_cap;
    /* work graph of the steady-state step (see executor.c) */
    void *graph;                      /* the recorded step, or NULL */
    int graph_ok;                     /* graphs allowed (backend has them, settings) */
    uint64_t graph_sig;               /* the state it was recorded in */
    int batch;                        /* vae_exec_set_batch */
    int marked;                       /* a backend mark was set at the last step's start */
    value graph_out;                  /* its output value (the buffer stays the graph's) */
    int64_t *graph_seen;              /* per op: clock.seen added by one step */
    int have_prev;                    /* prev_* are set */
    uint64_t prev_before, prev_after; /* state signatures around the previous step */
    /* column strips (strip.h, exec_strip.c): the geometry, the strip this stream runs, its slots
     * (the columns the previous strip left, every frame) and the frames through each carry so
     * far in this stream */
    const vae_strips *strips;
    int strip;
    void **slot;
    int64_t *carry_frames;
    int64_t *carry_step; /* the frames of each carry's last step (after carry_frames, one block):
                          * how far ahead to prefetch */
    /* band plans (exec_reduce.c): the group, this band's rows at each GroupNorm, the sums */
    struct vae_comm *comm;
    const vae_exec_norm *norms;
    int n_norms;
    double *sums;   /* host memory, or: */
    void *sums_dev; /* a backend buffer (a communicator with device buffers) */
    size_t sums_cap;
    struct vae_comm *split; /* the ranks that share each attention's queries, or NULL */
    /* causal caches in host memory (vae_exec_set_offload, exec_window.c): per op its cache's
     * home (NULL: on the device), all of them in one host block; off_next: per op, the next op
     * with a home there (in program order, cyclic), whose cache is prefetched while it runs */
    char **off_home;
    int64_t *off_cap; /* per op: the bytes its home holds */
    char *off_block;
    int *off_next;
    int *off_first; /* per op: the home's frame slot of the oldest kept frame (a ring of slots:
                     * a call writes back only the frames it adds, exec_window.c) */
};

size_t exec_vox_bytes(const vae_exec *e, int64_t n);
int exec_frames_reserve(vae_exec *e, int n);
int exec_alloc_value(vae_exec *e, value *v, int v_id);

/* exec_window.c: a windowed op (temporal conv, temporal shuffle-down) over cache ++ chunk;
 * res: the conv's residual (or NULL) */
int exec_run_windowed(vae_exec *e, int op_index, const value *x, const value *res, value *y);

/* exec_strip.c: input k of op i as the strip needs it (*out: x itself, or z rebuilt from the
 * slot and x; z->buf stays NULL when nothing was rebuilt), and x's last columns into the slot */
int exec_strip_input(vae_exec *e, int i, int k, const value *x, value *z, const value **out);
/* An RMS norm of a strip's input read in place (z: VALUE_IN_PLACE, from exec_strip_input where
 * the backend has norm_rows): y (allocated, as wide as z) <- the norm of z */
int exec_strip_norm(vae_exec *e, int i, const value *z, value *y);
void exec_strip_release(vae_exec *e);
void exec_window_release(vae_exec *e, window *w, int kt);
void exec_offload_release(vae_exec *e);

/* exec_reduce.c: GroupNorm op i of a band plan, x -> y (allocated); the sums' buffer given back */
int exec_norm_reduced(vae_exec *e, int i, const value *x, value *y);
void exec_reduce_release(vae_exec *e);
/* exec_reduce.c: attention op i with its queries shared out (vae_exec_set_split), x -> y
 * (allocated) */
int exec_attention_split(vae_exec *e, int i, const value *x, value *y);

#endif
