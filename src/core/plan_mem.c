/* plan_mem.c -- the planner's memory model: the executor's allocations, replayed without data.
 *
 * A slice of the program is stepped through the stream (vae_program_walk_step) and every
 * allocation the executor would make is counted where it would make it: an op's output (with
 * the spare frames of a contiguous window, executor.c plan_windows), a window's cache frames and
 * zero frame (exec_window.c), the upsampled temporary of a conv whose backend cannot upsample
 * inside the conv, the trims and the gathered output of frame loops, the previous step's output
 * (held until the next step), the inputs that column strips rebuild (strip.h). Frees happen at
 * the last consumer, as in the executor; an output that takes over its input's buffer (a time
 * head / drop or a one-sided concat, executor.c value_take) allocates nothing. The peak of the
 * running total is the part's peak. Sizes go through the backend's allocator rounding.
 */
#include <string.h>

#include "core.h"
#include "plan.h"

typedef struct memsim {
    const vae_program *p;
    const vae_loops *l;
    const int *vh, *vw;
    const vae_plan_request *rq;
    const vae_plan_trim *trims;
    int n_trims;
    const int *zw; /* strips: per op input (i*2 + k) the width it is rebuilt to, 0 none */
    int *uses, *refs, *win_of, *cut; /* cut: the value is cut by an active loop (a view) */
    int *head;                       /* frames of room to allocate in front (vae_program_heads) */
    int *headf;                      /* frames of room in front of the value's buffer now */
    int64_t *held;                   /* bytes held by each value */
    int64_t *cache;                  /* per op: cache bytes allocated (persist between steps) */
    int64_t *home;                   /* per op: a contiguous window's cache bytes, on the device
                                      * or (rq->offload_ops) in host memory */
    int *cache_frames;               /* per op: list-mode cache frames allocated */
    int *zero;                       /* per op: zero frame allocated */
    int64_t *temp;                   /* per value: its trim temporary */
    int64_t live, peak, scratch;
    double copied; /* this step's window copies (rq->step_copies) */
    int gather_cap, gathered;
    int64_t gather_bytes;
} memsim;

static int64_t rounded(const memsim *m, int64_t bytes) {
    if (bytes <= 0) return 0;
    return m->rq->round ? (int64_t)m->rq->round((size_t)bytes) : bytes;
}

static void add(memsim *m, int64_t bytes) {
    m->live += bytes;
    if (m->live > m->peak) m->peak = m->live;
}

static int64_t frame_bytes(const memsim *m, int v, int c) {
    return (int64_t)m->vh[v] * m->vw[v] * c * (int64_t)m->rq->elem;
}

static const vae_plan_trim *trim_of(const memsim *m, int v) {
    for (int i = 0; i < m->n_trims; i++)
        if (m->trims[i].value == v) return &m->trims[i];
    return NULL;
}

/* one input frame of v as the op reading it sees it: trimmed while a loop cuts it */
static int64_t input_frame_bytes(const memsim *m, int v, int c) {
    const vae_plan_trim *t = m->cut[v] ? trim_of(m, v) : NULL;
    if (!t) return frame_bytes(m, v, c);
    return (int64_t)t->h * t->w * c * (int64_t)m->rq->elem;
}

static void free_value(memsim *m, int v) {
    m->live -= m->held[v];
    m->held[v] = 0;
}

/* the windowed op's allocations around its output (exec_window.c) */
static void window_allocs(memsim *m, int i, const vae_op_frames *f, int64_t fb, int before) {
    const vae_op *op = &m->p->ops[i];
    const int contig = m->win_of[op->in[0]] == i;
    if (before) {
        if (!contig && f->pad > 0 && op->tpad_mode == VAE_TPAD_ZERO && !m->zero[i]) {
            m->zero[i] = 1;
            m->cache[i] += rounded(m, fb);
            add(m, rounded(m, fb));
        }
        return;
    }
    if (contig && f->keep > 0 && m->cache_frames[i] == 0) {
        m->cache_frames[i] = op->kt - 1;
        if (m->rq->offload_ops && m->rq->offload_ops[i]) { /* in host memory (exec_window.c) */
            m->home[i] = (int64_t)(op->kt - 1) * fb;
            return;
        }
        int64_t b = rounded(m, (int64_t)(op->kt - 1) * fb);
        m->cache[i] += b;
        m->home[i] = b;
        add(m, b);
    }
    for (; !contig && m->cache_frames[i] < f->keep; m->cache_frames[i]++) {
        m->cache[i] += rounded(m, fb);
        add(m, rounded(m, fb));
    }
}

/* Frames a windowed op's step copies on the device (exec_window.c): a contiguous window's cached
 * frames put in front of its input and the frames it keeps copied out, none when the step brings
 * no frames; a list window (it reads the cached frames where they are) the kept frames, but for
 * those already in their slots (a step that consumes none). */
static int window_copies(const memsim *m, int i, const vae_op_frames *f, int t_x) {
    if (m->win_of[m->p->ops[i].in[0]] == i) return t_x > 0 ? f->total - f->pad - t_x + f->keep : 0;
    const int cached = f->total - f->pad - t_x;
    return f->used > 0 ? f->keep : f->keep - (cached < f->keep ? cached : f->keep);
}

/* the input's extent as the op sees it (trimmed while a loop cuts it) */
static void input_size(const memsim *m, int v, int *h, int *w) {
    const vae_plan_trim *t = m->cut[v] ? trim_of(m, v) : NULL;
    *h = t ? t->h : m->vh[v];
    *w = t ? t->w : m->vw[v];
}

/* strips: the inputs of op i rebuilt over other columns (exec_strip.c), alive while it runs;
 * *fb_in becomes the rebuilt input's frame */
static int64_t rebuilt_inputs(memsim *m, int i, const int *tv, int64_t *fb_in) {
    const vae_op *op = &m->p->ops[i];
    int64_t bytes = 0;
    for (int k = 0; m->zw && k < 2; k++) {
        const int v = op->in[k], w = m->zw[2 * i + k];
        if (v < 0 || w <= 0 || tv[v] == 0) continue;
        const int c = vae_program_value_channels(m->p, v);
        const int64_t fb = (int64_t)m->vh[v] * w * c * (int64_t)m->rq->elem;
        bytes += rounded(m, fb * (tv[v] + m->head[v]));
        if (k == 0) *fb_in = fb;
    }
    add(m, bytes);
    return bytes;
}

/* The input whose buffer op i's output takes over instead of a copy (executor.c value_take: the
 * step's f->pass, where this op is its last reader and it is not a view, the program's input or
 * output, and has the room in front the output needs), or -1. */
static int taken_input(const memsim *m, int i, const vae_op_frames *f) {
    const vae_op *op = &m->p->ops[i];
    if (f->pass < 0 || m->zw) return -1;
    const int v = op->in[f->pass];
    if (m->refs[v] != 1 || m->cut[v] || v == m->p->input || v == m->p->output ||
        m->headf[v] + f->from < m->head[op->out])
        return -1;
    return v;
}

static void on_op(memsim *m, int i, const vae_op_frames *f, const int *tv) {
    const vae_op *op = &m->p->ops[i];
    const int x = op->in[0], y = op->out, windowed = vae_op_is_windowed(op);
    int64_t fb_in = input_frame_bytes(m, x, op->c_in);
    const int64_t rebuilt = rebuilt_inputs(m, i, tv, &fb_in);
    if (m->rq->scratch_need && (windowed ? f->total : tv[x]) > 0) {
        int h, w;
        input_size(m, x, &h, &w);
        if (m->zw && m->zw[2 * i] > 0) w = m->zw[2 * i]; /* the op runs on the rebuilt input */
        int64_t need = m->rq->scratch_need(m->rq->be, op, windowed ? f->total : tv[x], h, w,
                                           m->rq->scratch_minimal);
        if (need > m->scratch) m->scratch = need;
    }
    if (windowed) window_allocs(m, i, f, fb_in, 1);
    const int src = taken_input(m, i, f);
    if (src >= 0) { /* y holds its input's buffer (executor.c value_take) */
        m->held[y] = m->held[src];
        m->held[src] = 0;
        m->headf[y] = m->headf[src] + f->from;
    } else if (f->t_out > 0) {
        int64_t fb = frame_bytes(m, y, op->c_out);
        m->held[y] = rounded(m, fb * (f->t_out + m->head[y]));
        m->headf[y] = m->head[y];
        add(m, m->held[y]);
        if (op->kind == VAE_OP_CONV && op->up > 1 && !m->rq->conv_upsample) { /* temporary */
            int64_t tmp = rounded(m, fb_in * op->up * op->up * tv[x]);
            add(m, tmp);
            m->live -= tmp;
        }
    }
    if (windowed) {
        window_allocs(m, i, f, fb_in, 0);
        m->copied += (double)fb_in * window_copies(m, i, f, tv[x]);
    }
    m->live -= rebuilt;
    if (y == m->p->output && m->l->n && f->t_out > 0) { /* gathered, then freed */
        if (!m->gathered) {
            m->gather_bytes = rounded(m, frame_bytes(m, y, op->c_out) * m->gather_cap);
            add(m, m->gather_bytes);
            m->gathered = 1;
        }
        free_value(m, y);
    } else if (m->uses[y] == 0 && y != m->p->output) {
        free_value(m, y);
    }
    m->refs[y] = m->uses[y];
    for (int k = 0; k < 2; k++) {
        int v = op->in[k];
        if (v < 0 || (k == 1 && v == x)) continue;
        m->refs[v] -= (k == 0 && op->in[1] == v) ? 2 : 1;
        if (m->refs[v] <= 0 && !m->cut[v] && v != m->p->input && v != m->p->output)
            free_value(m, v);
    }
}

static void on_event(void *user, vae_walk_event ev, int index, const vae_op_frames *f,
                     const int *tv) {
    memsim *m = user;
    if (ev == VAE_WALK_OP) {
        on_op(m, index, f, tv);
        return;
    }
    const vae_loops *l = m->l;
    for (int j = l->cross_at[index]; j < l->cross_at[index + 1]; j++) {
        const int v = l->cross[j];
        const vae_plan_trim *t = trim_of(m, v);
        if (ev == VAE_WALK_FRAME) {
            m->cut[v] = 1;
            if (t) {
                const int c = vae_program_value_channels(m->p, v);
                /* a frame, or the whole chunk (tv: the frames the loop passes on) */
                m->temp[v] =
                    tv[v] ? rounded(m, (int64_t)tv[v] * t->h * t->w * c * (int64_t)m->rq->elem) : 0;
                add(m, m->temp[v]);
            }
        } else if (ev == VAE_WALK_FRAME_END) {
            m->live -= m->temp[v];
            m->temp[v] = 0;
        } else { /* the loop is done with the whole values */
            m->cut[v] = 0;
            if (v != m->p->input) free_value(m, v);
        }
    }
}

int64_t vae_plan_mem_part(const vae_program *p, const vae_loops *loops, const int *vh,
                          const int *vw, const vae_plan_request *rq, int t_first, int t_next,
                          int n_steps, const vae_plan_trim *trims, int n_trims, const int *zw,
                          int64_t *scratch, int64_t *caches) {
    memsim m = {.p = p,
                .l = loops,
                .vh = vh,
                .vw = vw,
                .rq = rq,
                .trims = trims,
                .n_trims = n_trims,
                .zw = zw};
    const size_t nv = (size_t)p->n_values, no = (size_t)p->n_ops + 1;
    m.uses = vae_calloc(nv, sizeof *m.uses);
    m.refs = vae_calloc(nv, sizeof *m.refs);
    m.win_of = vae_calloc(nv, sizeof *m.win_of);
    m.head = vae_calloc(nv, sizeof *m.head);
    m.headf = vae_calloc(nv, sizeof *m.headf);
    m.cut = vae_calloc(nv, sizeof *m.cut);
    m.held = vae_calloc(nv, sizeof *m.held);
    m.temp = vae_calloc(nv, sizeof *m.temp);
    m.cache = vae_calloc(no, sizeof *m.cache);
    m.home = vae_calloc(no, sizeof *m.home);
    m.cache_frames = vae_calloc(no, sizeof *m.cache_frames);
    m.zero = vae_calloc(no, sizeof *m.zero);
    vae_op_clock *clk = vae_calloc(no, sizeof *clk), *clk2 = vae_calloc(no, sizeof *clk2);
    int *tv = vae_calloc(nv, sizeof *tv);
    int64_t peak = -1, stage_in = 0, stage_out = 0;
    if (!m.uses || !m.refs || !m.win_of || !m.head || !m.headf || !m.cut || !m.held || !m.temp ||
        !m.cache || !m.home || !m.cache_frames || !m.zero || !clk || !clk2 || !tv)
        goto done;
    vae_program_count_readers(p, m.uses);
    /* contiguous windows, as executor.c plan_windows (backends are assumed to accept them) */
    for (size_t v = 0; v < nv; v++)
        m.win_of[v] = -1;
    for (int i = 0; i < p->n_ops; i++)
        if (vae_program_window_ok(p, i, m.uses) && !trim_of(&m, p->ops[i].in[0]))
            m.win_of[p->ops[i].in[0]] = i;
    vae_program_heads(p, m.win_of, m.head);
    for (size_t v = 0; v < nv; v++)
        if (trim_of(&m, (int)v)) m.head[v] = 0; /* as executor.c plan_windows */
    for (int s = 0; s < n_steps; s++) {
        const int t_in = s == 0 ? t_first : t_next;
        free_value(&m, p->output); /* the previous step's output, released by the next step */
        m.live -= m.gather_bytes;
        m.gather_bytes = 0;
        m.gathered = 0;
        m.copied = 0;
        int out = 0;
        memcpy(clk2, clk, no * sizeof *clk);
        if (vae_program_walk_step(p, loops, clk2, tv, t_in, NULL, NULL, &out)) goto done;
        m.gather_cap = out;
        if (rq->planar_io) { /* chunks in and out pass through the scratch area as float32 */
            int64_t io_in = (int64_t)t_in * vh[p->input] * vw[p->input] * p->in_channels * 4;
            int64_t io_out = (int64_t)out * vh[p->output] * vw[p->output] * p->out_channels * 4;
            if (rq->stage_io) { /* ... or stages of their own, held through the run */
                if (rounded(&m, io_in) > stage_in) stage_in = rounded(&m, io_in);
                if (rounded(&m, io_out) > stage_out) stage_out = rounded(&m, io_out);
            } else {
                if (io_in > m.scratch) m.scratch = io_in;
                if (io_out > m.scratch) m.scratch = io_out;
            }
        }
        if (vae_program_walk_step(p, loops, clk, tv, t_in, on_event, &m, &out)) goto done;
        if (m.gathered) m.held[p->output] = 0; /* the gather buffer is the output */
    }
    peak = m.peak + stage_in + stage_out;
    *scratch = m.scratch;
    if (caches) {
        *caches = 0;
        for (int i = 0; i < p->n_ops; i++)
            *caches += m.cache[i];
    }
    if (rq->op_caches) memcpy(rq->op_caches, m.home, (size_t)p->n_ops * sizeof *m.home);
    if (rq->step_copies) *rq->step_copies = m.copied;
done:
    vae_free(m.uses);
    vae_free(m.refs);
    vae_free(m.win_of);
    vae_free(m.head);
    vae_free(m.headf);
    vae_free(m.cut);
    vae_free(m.held);
    vae_free(m.temp);
    vae_free(m.cache);
    vae_free(m.home);
    vae_free(m.cache_frames);
    vae_free(m.zero);
    vae_free(clk);
    vae_free(clk2);
    vae_free(tv);
    return peak;
}
