/* api.h -- what the public handles hold (internal). */
#ifndef VAE_API_H
#define VAE_API_H

#include <stdatomic.h>

#include "core/backend.h"
#include "core/comm_host.h"
#include "core/plan.h"
#include "core/runner.h"
#include "core/settings.h"
#include "models/model.h"

struct vae_model {
    vae_config cfg;
    vae_program enc, dec; /* n_ops == 0 when that side is absent */
    vae_arena *weights;   /* float32 weights the programs point into */
    char *path;
    char *config_json;
    char *file_dtypes;
    char *normalisation;
    int64_t params;
    int tensors;
    atomic_int holders; /* the opener until vae_model_free, and each session made from it */
};
/* model.c: a session holds its model until it is freed (the last holder frees it) */
void vae_model_hold(const vae_model *m);
void vae_model_release(const vae_model *m);

/* A side's last plan and what it was made from: a call of the same input on the same memory
 * takes it again instead of planning (the planner walks the program frame by frame for each
 * candidate: a millisecond and more, what a short call cannot spare). */
typedef struct vae_plan_key {
    int t, h, w;                             /* the call's input */
    int64_t budget, reserve, scratch, error; /* the memory it is planned for */
    int64_t host_copy;                       /* the backend's host_copy_bytes */
} vae_plan_key;
typedef struct vae_plan_memo {
    int valid;
    vae_plan_key key; /* what the plan was made for */
    int chunk;        /* the steps it chose (the program's chunk) */
    vae_plan plan;
} vae_plan_memo;

struct vae_session {
    const vae_model *model;
    vae_session_options opts;
    vae_settings set;
    int n_lanes;                            /* devices: 1, or a device group's (options.devices) */
    vae_backend *lane[VAE_MAX_DEVICES];     /* one backend per device */
    vae_backend *be;                        /* lane[0]: the device of the caller's tensors */
    vae_runner *runner[2][VAE_MAX_DEVICES]; /* [decode, encode][lane], made on first use */
    /* [decode, encode]: the model's programs, with the convs this session runs in E4M3 marked
     * (session.c: vae_program_pick_fp8 over what lane 0's backend runs in E4M3) */
    vae_program prog[2];
    /* [decode, encode]: dtype fp8's error budget has not chosen the program's E4M3 convs yet
     * (no cached choice at creation): vae_session_fp8_ready does at its first plan or call */
    int fp8_pending[2];
    char fp8_choice[2][160]; /* the budget's choice in words, for vae_session_plan's text ("") */
    int64_t model_error[2]; /* decode, encode: bytes a run held beyond the memory model's plan */
    vae_plan_memo plan_memo[2]; /* decode, encode: the last call's plan (session_plan.c) */
    int64_t retry_budget;   /* > 0: this call's next plan after the device or host ran out */
    atomic_int cancel;      /* vae_session_cancel, from any thread */
    atomic_int busy;        /* a call, plan or trim is running (one at a time: session_enter) */
    /* a rank of a group of processes (opts.world > 1; session_group.c), else NULL */
    struct vae_comm *comm;
    vae_comm_host group_stage; /* the ranks' exchanges of a few doubles (budget, plan), kept */
    int group_stopped;         /* a call failed while the ranks exchanged: the group is unusable */
    struct vae_stream *stream; /* the open stream (stream.c: vae_stream_begin), or NULL */
};

static inline const vae_program *vae_session_program(const vae_session *s, int encode) {
    return &s->prog[encode ? 1 : 0];
}

/* The session's program (a preview decoder's ops) with the model's chunks, what frame counts and
 * output shapes are walked on: a session's program steps several chunks at once after a call
 * chose larger steps (session_plan.c), which changes no frame count of a later call. */
static inline vae_program vae_session_shape_program(const vae_session *s, int encode) {
    vae_program q = *vae_session_program(s, encode);
    const vae_program *mp = encode ? &s->model->enc : &s->model->dec;
    q.first_chunk = mp->first_chunk, q.chunk = mp->chunk;
    return q;
}

/* What a call's plan is made for: the device's memory (backend mem_info; avail: a device
 * group's least, a group of processes' least over its ranks), 0 where unknown. */
typedef struct vae_session_mem {
    int64_t avail, reserve, scratch;
} vae_session_mem;

/* session.c: dtype fp8's E4M3 convs of that side chosen by the error budget where they are not
 * yet (fp8_calibrate.h: the cache, else a calibration of seconds), the program finished and
 * warmed; every plan of a side calls it first (session_plan.c) */
int vae_session_fp8_ready(vae_session *s, int encode);

/* session_plan.c: one call's plan (VAE_ENOMEM with the plan filled when nothing fits) and its
 * runs until one succeeds (planned again with what the memory model missed) */
int vae_frames_used(const vae_program *p, int t);
/* the input frames a call of the session uses (the model's chunks) */
int vae_session_frames_used(const vae_session *s, int encode, int t);
int vae_session_mem_info(vae_session *s, int encode, vae_session_mem *mem);
int vae_session_plan_make(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan);
/* plan_make for memory already asked (vae_session_mem_info); a call of the same input and
 * memory as the side's last one takes its plan again (vae_plan_memo) */
int vae_session_plan_for(vae_session *s, int encode, const vae_io_view *g,
                         const vae_session_mem *mem, vae_plan *plan);
/* forgets side `encode`'s last plan (vae_plan_memo): trim and free */
void vae_session_memo_drop(vae_session *s, int encode);
int vae_session_run_planned(vae_session *s, int encode, const vae_io_view *g, const vae_run_io *io);

/* session_frames.c: an architecture's frame rules (model.h vae_frame_rule) around a call. rule:
 * 1 with *rule filled (rule may be NULL) when m has one for that direction and preview;
 * shape: the output of an input of t_in frames of h x w through p under the rule; run_framed:
 * vae_session_run_planned under the session's rule, if any (host tensors only). */
int vae_session_frame_rule(const vae_model *m, int encode, int preview, vae_frame_rule *rule);
int vae_frame_rule_shape(const vae_frame_rule *r, int encode, const vae_program *p, int t_in,
                         int h, int w, int *t_out, int *h_out, int *w_out, double *macs);
int vae_session_run_framed(vae_session *s, int encode, const vae_io_view *g, const vae_run_io *io);

/* session.c: a call enters the session (VAE_EINVAL naming fn when another one runs) and leaves
 * it; the calls of session.c are also refused while a stream is open */
int vae_session_enter(vae_session *s, const char *fn);
void vae_session_leave(vae_session *s);
/* stream.c: the open stream's state freed (vae_session_free) */
void vae_session_stream_drop(vae_session *s);
/* session_plan.c: a stream's plan (stream.c): the model's own steps, as the smallest steps of
 * vae_session_plan_for (the session's program keeps that chunk) */
int vae_session_plan_stream(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan);

/* session_group.c: a rank of a group of processes. join: at creation (collective), leave: at
 * free; plan: this call's plan, made by every rank for the least budget among them and checked
 * to be the same on every rank (collective; VAE_ENOMEM with the plan filled, as
 * vae_session_plan_make); run: its share, the group stopped by a failure */
int vae_session_group_join(vae_session *s);
void vae_session_group_leave(vae_session *s);
int vae_session_group_plan(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan);
int vae_session_group_run(vae_session *s, vae_runner *r, const vae_plan *plan, const vae_run_io *io,
                          int *emitted);

/* tensor_view.c: the caller's tensors as [c][t][h][w] views; dense: row-major strides (a
 * dimension of 1 may have any) */
int vae_tensor_is_dense(const vae_tensor *t);
int vae_tensor_view(const vae_tensor *x, const char *what, int channels, vae_io_view *v);
/* planar float32 [c][n][rows][cols] <- frames [f, f+n), the crop, of a host view; NaN/Inf fail */
int vae_view_read_host(const vae_io_view *v, const char *what, float *dst, int f, int n, int y0,
                       int rows, int x0, int cols);
/* frames [first, first+n) of a host view <- planar float32 whole frames [c][n][h][w] */
int vae_view_write_host(const vae_io_view *v, const float *frames, int first, int n);
int vae_view_nan_error(const vae_io_view *v, const char *what, int64_t linear_index);

#endif
