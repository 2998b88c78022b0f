/* runner_feed.c -- a whole-frame plan fed by the caller step by step (runner.h vae_runner_feed):
 * the same steps as vae_runner_run's, kept between the caller's calls. */
#include "core.h"
#include "runner_internal.h"

struct vae_runner_feed {
    run s;        /* the run the steps belong to (one stream, one tile: the whole frame) */
    void *dev_in; /* one step's input frames on the device */
    int pos, fo;  /* input frames taken, output frames made */
    int failed;   /* a step failed: the executor's state is undefined */
};

int vae_runner_feed_begin(vae_runner_feed **out, vae_runner *r, const vae_plan *plan,
                          const vae_run_io *io) {
    *out = NULL;
    if (plan->kind != VAE_PLAN_WHOLE)
        return vae_fail(VAE_EINVAL, "internal: a fed stream runs whole frames");
    if (io->in_view || io->out_view)
        return vae_fail(VAE_EINVAL, "internal: a fed stream reads and writes host frames");
    vae_runner_feed *f = vae_calloc(1, sizeof *f);
    if (!f) return vae_fail(VAE_ENOMEM, "out of memory");
    f->s = (run){.r = r, .plan = plan, .io = io, .world = 1, .direct = 1, .tile = &plan->tiles[0]};
    int rc = runner_prepare(r, plan);
    rpart *q = &r->part[1];
    if (rc == VAE_OK) rc = vae_exec_set_offload(q->e, plan->offload);
    if (rc) {
        vae_runner_feed_end(f);
        return rc;
    }
    const vae_program *p = r->p;
    const int most = p->first_chunk > p->chunk ? p->first_chunk : p->chunk;
    const size_t bytes =
        (size_t)most * plan->h_in * plan->w_in * runner_px_bytes(r, p->in_channels);
    f->dev_in = r->be->v->alloc(r->be, bytes);
    if (!f->dev_in) {
        vae_runner_feed_end(f);
        return vae_fail(VAE_ENOMEM, "out of %s memory for an input step of %d frames of %dx%dx%d",
                        r->be->v->name, most, plan->h_in, plan->w_in, p->in_channels);
    }
    vae_exec_set_cancel(q->e, io->cancel);
    *out = f;
    return VAE_OK;
}

int vae_runner_feed_step(vae_runner_feed *f, int n) {
    const vae_program *p = f->s.r->p;
    const int want = f->pos == 0 ? p->first_chunk : p->chunk;
    if (f->failed) return vae_fail(VAE_EINVAL, "internal: a failed stream fed again");
    if (n != want)
        return vae_fail(VAE_EINVAL, "internal: a step of %d input frames, expected %d", n, want);
    const int rc = runner_step_whole(&f->s, f->dev_in, f->pos, n, &f->fo);
    if (rc) {
        f->failed = 1;
        runner_drain(&f->s);
        return rc;
    }
    f->pos += n;
    return VAE_OK;
}

int vae_runner_feed_emitted(const vae_runner_feed *f) {
    return f ? f->s.emitted : 0;
}

void vae_runner_feed_end(vae_runner_feed *f) {
    if (!f) return;
    vae_runner *r = f->s.r;
    rpart *q = &r->part[1];
    if (q->e) {
        vae_exec_set_cancel(q->e, NULL);
        vae_exec_reset(q->e); /* caches and graph go before the buffers they were recorded with */
        vae_exec_set_offload(q->e, NULL);
    }
    if (f->dev_in) r->be->v->release(r->be, f->dev_in);
    runner_store_rings_free(&f->s);
    vae_free(f);
}
