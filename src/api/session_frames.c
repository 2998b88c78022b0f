/* session_frames.c -- an architecture's frame rules around a call (model.h vae_frame_rule): what
 * upstream does with frames depending on the input's length, which a program (causal, of fixed
 * ops) cannot hold: TAEHV taeh3's encode segments, each run alone after zero frames, and its
 * decode's periodic trims; taecvx's decode untrimmed for an even latent count.
 *
 * The rule wraps the call's reader and emitter: an encode segment is a call of its own on a view
 * of seg_lead zero frames and seg_frames input frames (so its temporal state starts fresh, as
 * upstream's), whose frames are placed after the earlier segments'; a decode is one call whose
 * frames are placed (or dropped) one by one, the output's last frames completed with zeros where
 * the rule says so. Tensors in device memory reach it through the host (the session copies a
 * device input to the host first and puts each placed frame into a device output). */
#include <string.h>

#include "api/api.h"

int vae_session_frame_rule(const vae_model *m, int encode, int preview, vae_frame_rule *rule) {
    vae_frame_rule none;
    const vae_arch *a = m->cfg.arch;
    return a->frame_rule && a->frame_rule(&m->cfg, encode, preview, rule ? rule : &none);
}

/* Program frames of one segment (encode with segments) or of the whole input. */
static int rule_walk_frames(const vae_frame_rule *r, int encode, const vae_program *p, int t_in) {
    return encode && r->seg_frames ? r->seg_frames + r->seg_lead : vae_frames_used(p, t_in);
}

/* The output frames of an input of t_in frames; raw: the program's frames for what
 * rule_walk_frames gave it. */
static int rule_count(const vae_frame_rule *r, int encode, int t_in, int raw) {
    int n = raw;
    if (encode && r->seg_frames)
        n = (t_in + r->seg_frames - 1) / r->seg_frames * raw;
    else if (!encode && r->period)
        n = (raw + r->period - 1) / r->period * (r->period - r->skip);
    else if (!encode && (t_in & 1))
        n = raw - r->skip_odd;
    n -= r->drop_tail;
    return n > 0 ? n : 0;
}

int vae_frame_rule_shape(const vae_frame_rule *r, int encode, const vae_program *p, int t_in,
                         int h, int w, int *t_out, int *h_out, int *w_out, double *macs) {
    int raw = 0;
    int rc = vae_plan_walk(p, rule_walk_frames(r, encode, p, t_in), h, w, &raw, h_out, w_out, macs);
    if (rc == VAE_OK) *t_out = rule_count(r, encode, t_in, raw);
    if (rc == VAE_OK && macs && encode && r->seg_frames)
        *macs *= (t_in + r->seg_frames - 1) / r->seg_frames;
    return rc;
}

/* ---- the emitter: program frames placed in the output --------------------------------------- */
typedef struct placer {
    const vae_frame_rule *r;
    vae_frames_fn emit;
    void *user;
    int encode, t_in, t_out;
    int base; /* encode: the output index of this segment's first frame */
    int next; /* output frames handed out so far */
    float *one; /* one frame [c][h][w] */
    int c, h, w;
} placer;

static int place(const placer *o, int j) {
    const vae_frame_rule *r = o->r;
    int k = j;
    if (o->encode)
        k = o->base + j;
    else if (r->period)
        k = j % r->period < r->skip ? -1
                                    : j / r->period * (r->period - r->skip) + j % r->period - r->skip;
    else if (o->t_in & 1)
        k = j - r->skip_odd;
    return k >= 0 && k < o->t_out ? k : -1;
}

static int placer_frame(placer *o, int c, int h, int w) {
    if (!o->one) {
        o->one = vae_malloc((size_t)c * h * w * sizeof *o->one);
        o->c = c, o->h = h, o->w = w;
    }
    return o->one && o->c == c && o->h == h && o->w == w;
}

static int placed_emit(const float *frames, int first, int n, int c, int h, int w, void *user) {
    placer *o = user;
    const size_t plane = (size_t)h * w;
    for (int j = 0; j < n; j++) {
        const int k = place(o, first + j);
        if (k < 0) continue;
        if (!placer_frame(o, c, h, w) || k != o->next) return 1;
        for (int ch = 0; ch < c; ch++) /* frame j of planar [c][n][h][w] */
            memcpy(o->one + ch * plane, frames + ((size_t)ch * n + j) * plane, plane * sizeof *frames);
        if (o->emit(o->one, k, 1, c, h, w, o->user)) return 1;
        o->next = k + 1;
    }
    return 0;
}

/* The output frames no program frame filled (at its end): zeros. */
static int emit_zeros(placer *o) {
    if (o->next >= o->t_out) return VAE_OK;
    if (!o->one) return vae_fail(VAE_ESHAPE, "frame rule: no frame to size the zero frames by");
    memset(o->one, 0, (size_t)o->c * o->h * o->w * sizeof *o->one);
    for (; o->next < o->t_out; o->next++)
        if (o->emit(o->one, o->next, 1, o->c, o->h, o->w, o->user))
            return vae_fail(VAE_EINTERRUPTED, "stopped by the frame callback");
    return VAE_OK;
}

/* ---- the reader: a segment's view, seg_lead zero frames then its input frames --------------- */
typedef struct seg_reader {
    vae_read_fn read;
    void *user;
    int first, lead, c; /* the segment's first input frame, its zero frames, channels */
} seg_reader;

static int seg_read(void *user, float *dst, int f, int n, vae_span y, vae_span x) {
    const seg_reader *s = user;
    const int zeros = f < s->lead ? (f + n < s->lead ? n : s->lead - f) : 0, rest = n - zeros;
    const int from = s->first + (f + zeros - s->lead); /* past the input's end: its last frame */
    if (zeros == 0) return s->read(s->user, dst, from, n, y, x);
    const size_t plane = (size_t)(y.hi - y.lo) * (x.hi - x.lo);
    float *tmp = rest ? vae_malloc((size_t)s->c * rest * plane * sizeof *tmp) : NULL;
    if (rest && !tmp) return vae_fail(VAE_ENOMEM, "out of memory for %d input frames", rest);
    int rc = rest ? s->read(s->user, tmp, from, rest, y, x) : VAE_OK;
    for (int ch = 0; rc == VAE_OK && ch < s->c; ch++) { /* planar [c][n][rows][cols] */
        float *d = dst + (size_t)ch * n * plane;
        memset(d, 0, (size_t)zeros * plane * sizeof *d);
        if (rest) memcpy(d + zeros * plane, tmp + (size_t)ch * rest * plane, rest * plane * sizeof *d);
    }
    vae_free(tmp);
    return rc;
}

static int run_segments(vae_session *s, const vae_io_view *g, const vae_run_io *io, placer *o) {
    const vae_frame_rule *r = o->r;
    const vae_program p = vae_session_shape_program(s, 1);
    int per = 0, hh = 0, ww = 0, rc = VAE_OK;
    if ((rc = vae_plan_walk(&p, r->seg_frames + r->seg_lead, g->h, g->w, &per, &hh, &ww, NULL)))
        return rc;
    const int n_seg = (g->t + r->seg_frames - 1) / r->seg_frames;
    for (int k = 0; rc == VAE_OK && k < n_seg && k * per < o->t_out; k++) {
        seg_reader sr = {io->read, io->read_user, k * r->seg_frames, r->seg_lead, g->c};
        vae_io_view sg = *g;
        sg.t = r->seg_frames + r->seg_lead;
        vae_run_io sio = *io;
        sio.read = seg_read, sio.read_user = &sr;
        o->base = k * per;
        rc = vae_session_run_planned(s, 1, &sg, &sio);
    }
    return rc;
}

int vae_session_run_framed(vae_session *s, int encode, const vae_io_view *g, const vae_run_io *io) {
    vae_frame_rule r;
    if (!vae_session_frame_rule(s->model, encode, s->opts.preview, &r))
        return vae_session_run_planned(s, encode, g, io);
    if (io->in_view || io->out_view) /* (the session passes device tensors through the host) */
        return vae_fail(VAE_EINVAL, "%s: %s's frame rules read and write through the host",
                        encode ? "encode" : "decode", s->model->cfg.arch->name);
    int t_out = 0, h = 0, w = 0;
    const vae_program p = vae_session_shape_program(s, encode);
    int rc = vae_frame_rule_shape(&r, encode, &p, g->t, g->h, g->w, &t_out, &h, &w, NULL);
    if (rc) return rc;
    placer o = {&r, io->emit, io->emit_user, encode, g->t, t_out, 0, 0, NULL, 0, 0, 0};
    vae_run_io pio = *io;
    pio.emit = placed_emit, pio.emit_user = &o;
    rc = encode && r.seg_frames ? run_segments(s, g, &pio, &o)
                                : vae_session_run_planned(s, encode, g, &pio);
    if (rc == VAE_OK) rc = emit_zeros(&o);
    vae_free(o.one);
    return rc;
}
