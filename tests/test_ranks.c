/* test_ranks.c -- the failures of a group of processes (vae_session_options.world), its ranks as
 * threads of this process, each with its own CPU session: every failure is an error on the ranks
 * it concerns, naming what was wrong, and no rank waits forever.
 *
 * - options: rank out of range, a group together with a device group, an unknown group_output;
 * - ids: one not made by vae_group_id_create in this process, a rank joining twice, a rank that
 *   joins with another world, a rank whose peers never come (its join times out, naming them,
 *   and the id serves a whole group afterwards);
 * - calls: ranks with different tiling options (their plans differ: every rank fails before any
 *   work), a rank stopped by its progress callback mid-call (the others stop at their next
 *   exchange, and later calls say the group is stopped), a rank waiting in a call for a rank that
 *   never makes it (vae_session_cancel from another thread stops it within 1 s).
 * The outputs themselves are checked against one process by test_fixtures --ranks.
 * Prints one line per check and "N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "platform/platform.h" /* pthreads, setenv */
#include "test_check.h"
#include "vae.h"

/* Wan2.1 at small widths: a 9x32x48 video in 2x2 exact tiles */
#define W21_SMALL "{\"dim\": 8, \"dec_dim\": 8}"

typedef struct rank {
    const vae_model *m;
    vae_session_options so;
    vae_session *s;
    int create_rc, rc, again_rc;
    int stop_after; /* > 0: its progress callback stops the call after this many steps */
    char err[512], again_err[512];
    pthread_t th;
} rank;

static int progress(int64_t done, int64_t total, void *user) {
    (void)total;
    const rank *k = user;
    return k->stop_after > 0 && done >= k->stop_after;
}

static void *rank_main(void *arg) {
    rank *k = arg;
    k->create_rc = vae_session_create(&k->s, k->m, &k->so);
    if (k->create_rc) {
        snprintf(k->err, sizeof k->err, "%s", vae_last_error());
        return NULL;
    }
    static float latent[16 * 3 * 4 * 6];
    const int64_t shape[5] = {1, 16, 3, 4, 6}, oshape[5] = {1, 3, 9, 32, 48};
    static __thread float video[3 * 9 * 32 * 48];
    vae_tensor in = {.ndim = 5, .dtype = VAE_DTYPE_F32, .data = latent};
    vae_tensor out = {.ndim = 5, .dtype = VAE_DTYPE_F32, .data = video};
    in = vae_tensor_dense(5, shape, VAE_DTYPE_F32, latent);
    out = vae_tensor_dense(5, oshape, VAE_DTYPE_F32, video);
    vae_call_options co;
    vae_call_options_default(&co);
    co.progress = progress, co.progress_user = k;
    k->rc = vae_decode_into(k->s, &in, &out, &co);
    if (k->rc) snprintf(k->err, sizeof k->err, "%s", vae_last_error());
    k->stop_after = 0;
    k->again_rc = vae_decode_into(k->s, &in, &out, &co);
    if (k->again_rc) snprintf(k->again_err, sizeof k->again_err, "%s", vae_last_error());
    vae_session_free(k->s);
    return NULL;
}

/* n ranks of one group (world: each rank's, 0: n), rank k with options opt[k] */
static void run_group(const vae_model *m, rank *k, int n, const vae_session_options *opt) {
    vae_group_id id;
    vae_group_id_create(VAE_DEVICE_CPU, &id);
    for (int r = 0; r < n; r++) {
        k[r] = (rank){.m = m, .so = opt[r]};
        k[r].so.group_id = id;
        pthread_create(&k[r].th, NULL, rank_main, &k[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(k[r].th, NULL);
}

static void opts(vae_session_options *o, int n, int world) {
    for (int r = 0; r < n; r++) {
        vae_session_options_default(&o[r]);
        o[r].threads = 1, o[r].rank = r, o[r].world = world;
        o[r].tile_height = 16, o[r].tile_width = 24; /* 2x2 exact tiles */
    }
}

static int has(const char *s, const char *what) {
    return strstr(s, what) != NULL;
}

static void check_options(const vae_model *m) {
    vae_session_options o;
    vae_session *s = NULL;
    opts(&o, 1, 2);
    vae_group_id_create(VAE_DEVICE_CPU, &o.group_id);
    o.rank = 2;
    int rc = vae_session_create(&s, m, &o);
    check(rc == VAE_EINVAL && has(vae_last_error(), "rank 2 of world 2"),
          "rank 2 of world 2 is refused: %s", vae_last_error());
    o.rank = 0, o.n_devices = 2;
    rc = vae_session_create(&s, m, &o);
    check(rc == VAE_EINVAL && has(vae_last_error(), "one process per GPU"),
          "a rank with a device group is refused: %s", vae_last_error());
    o.n_devices = 0, o.group_output = 7;
    rc = vae_session_create(&s, m, &o);
    check(rc == VAE_EINVAL && has(vae_last_error(), "group_output 7"),
          "an unknown group_output is refused: %s", vae_last_error());
    o.group_output = VAE_GROUP_OUTPUT_ALL;
    memset(o.group_id.bytes, 0x5a, sizeof o.group_id.bytes);
    rc = vae_session_create(&s, m, &o);
    check(rc == VAE_EINVAL && has(vae_last_error(), "not one this process made"),
          "an id this process did not make is refused: %s", vae_last_error());
}

static double now_s(void) {
    return vae_plat_monotonic();
}

/* A session made on a thread of its own: what the creation returned, its error, its time. */
typedef struct maker {
    const vae_model *m;
    vae_session_options so;
    vae_session *s;
    int rc;
    double seconds;
    char err[512];
    pthread_t th;
} maker;

static void *make_main(void *arg) {
    maker *k = arg;
    const double t0 = now_s();
    k->rc = vae_session_create(&k->s, k->m, &k->so);
    k->seconds = now_s() - t0;
    snprintf(k->err, sizeof k->err, "%s", k->rc ? vae_last_error() : "");
    return NULL;
}

/* Two sessions made at once (options a and b, one id); both joined. */
static void make_two(const vae_model *m, const vae_session_options *a, const vae_session_options *b,
                     maker *k) {
    k[0] = (maker){.m = m, .so = *a}, k[1] = (maker){.m = m, .so = *b};
    for (int i = 0; i < 2; i++)
        pthread_create(&k[i].th, NULL, make_main, &k[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(k[i].th, NULL);
}

/* A join waits for every rank, at most VAE_GROUP_TIMEOUT seconds (0.3 in main): the first of two
 * ranks that do not make a group times out, naming the rank that did not come, while the second
 * is refused at once; an id whose ranks timed out serves a whole group afterwards. */
static void check_joins(const vae_model *m) {
    vae_session_options o[2];
    maker k[2];
    opts(o, 2, 2);
    vae_group_id_create(VAE_DEVICE_CPU, &o[0].group_id);
    const double t0 = now_s();
    vae_session *s = NULL;
    int rc = vae_session_create(&s, m, &o[0]);
    const double waited = now_s() - t0;
    check(rc == VAE_EINTERRUPTED && has(vae_last_error(), "rank(s) 1 to join") && waited < 1.5,
          "a rank alone: its join times out after %.2f s: %s", waited, vae_last_error());
    o[1] = o[0]; /* rank 0 twice */
    make_two(m, &o[0], &o[1], k);
    const int first = k[0].rc == VAE_EINVAL; /* the one that joined first waits */
    check(k[first].rc == VAE_EINTERRUPTED && has(k[first].err, "rank(s) 1 to join") &&
              k[!first].rc == VAE_EINVAL && has(k[!first].err, "joined twice") &&
              k[!first].seconds < k[first].seconds,
          "a rank joining twice is refused: '%s'; the other times out: '%s'", k[!first].err,
          k[first].err);
    o[1].rank = 1, o[1].world = 3;
    make_two(m, &o[0], &o[1], k);
    const int refused = k[0].rc == VAE_EINVAL ? 0 : 1;
    check(k[refused].rc == VAE_EINVAL && has(k[refused].err, "which has") &&
              k[!refused].rc == VAE_EINTERRUPTED && has(k[!refused].err, "to join"),
          "a rank of another world is refused: '%s'; the other times out: '%s'", k[refused].err,
          k[!refused].err);
    o[1].world = 2;
    make_two(m, &o[0], &o[1], k);
    check(k[0].rc == VAE_OK && k[1].rc == VAE_OK,
          "the id of ranks that timed out makes a group afterwards: %s %s", k[0].err, k[1].err);
    for (int i = 0; i < 2; i++)
        vae_session_free(k[i].s);
}

/* rank 0 calls while rank 1 never does: vae_session_cancel from another thread stops rank 0's
 * wait within 1 s (VAE_EINTERRUPTED naming rank 1); rank 1's call later finds the group stopped. */
typedef struct waiter {
    vae_session *s;
    atomic_int started, done;
    int rc;
    char err[512];
} waiter;

static void *decode_main(void *arg) {
    waiter *w = arg;
    static float latent[16 * 3 * 4 * 6], video[3 * 9 * 32 * 48];
    const int64_t shape[5] = {1, 16, 3, 4, 6}, oshape[5] = {1, 3, 9, 32, 48};
    vae_tensor in = vae_tensor_dense(5, shape, VAE_DTYPE_F32, latent);
    vae_tensor out = vae_tensor_dense(5, oshape, VAE_DTYPE_F32, video);
    atomic_store(&w->started, 1);
    w->rc = vae_decode_into(w->s, &in, &out, NULL);
    snprintf(w->err, sizeof w->err, "%s", w->rc ? vae_last_error() : "");
    atomic_store(&w->done, 1);
    return NULL;
}

static void check_cancel(const vae_model *m) {
    vae_session_options o[2];
    maker k[2];
    opts(o, 2, 2);
    vae_group_id_create(VAE_DEVICE_CPU, &o[0].group_id);
    o[1].group_id = o[0].group_id;
    make_two(m, &o[0], &o[1], k);
    if (k[0].rc || k[1].rc) {
        check(0, "cancel: the group of 2: %s %s", k[0].err, k[1].err);
        return;
    }
    waiter w = {.s = k[0].s};
    pthread_t th;
    pthread_create(&th, NULL, decode_main, &w);
    while (!atomic_load(&w.started))
        vae_plat_sleep_ms(1);
    vae_plat_sleep_ms(200); /* rank 0 waits for rank 1 by now */
    const double t0 = now_s();
    vae_session_cancel(k[0].s);
    while (!atomic_load(&w.done) && now_s() - t0 < 3)
        vae_plat_sleep_ms(1);
    const double took = now_s() - t0;
    if (!atomic_load(&w.done)) { /* the wait was not stopped: report, do not hang the suite */
        check(0, "cancel: rank 0 still waits for rank 1 %.1f s after vae_session_cancel", took);
        printf("%d passed, %d failed\n", n_pass, n_fail);
        fflush(stdout);
        _exit(1);
    }
    pthread_join(th, NULL);
    check(
        w.rc == VAE_EINTERRUPTED && has(w.err, "cancelled") && has(w.err, "rank(s) 1") && took < 1,
        "cancel: rank 0 waiting for rank 1 stops %.3f s after vae_session_cancel: %s", took, w.err);
    waiter w1 = {.s = k[1].s};
    decode_main(&w1);
    check(w1.rc == VAE_EINTERRUPTED && has(w1.err, "rank 0"),
          "cancel: rank 1's call then finds the group stopped: %s", w1.err);
    for (int i = 0; i < 2; i++)
        vae_session_free(k[i].s);
}

static void check_calls(const vae_model *m) {
    vae_session_options o[3];
    rank k[3];
    opts(o, 2, 2);
    o[1].tile_width = 48; /* rank 1 plans 2x1 tiles */
    run_group(m, k, 2, o);
    for (int r = 0; r < 2; r++)
        check(k[r].create_rc == VAE_OK && k[r].rc == VAE_EINVAL && has(k[r].err, "another plan"),
              "ranks with different options: rank %d fails before any work: %s", r, k[r].err);
    opts(o, 3, 3);
    run_group(m, k, 3, o);
    for (int r = 0; r < 3; r++)
        check(k[r].rc == VAE_OK && k[r].again_rc == VAE_OK,
              "three ranks, two calls: rank %d: %s %s", r, k[r].err, k[r].again_err);
    vae_group_id id;
    vae_group_id_create(VAE_DEVICE_CPU, &id);
    for (int r = 0; r < 3; r++) {
        k[r] = (rank){.m = m, .so = o[r], .stop_after = r == 1 ? 3 : 0};
        k[r].so.group_id = id;
        pthread_create(&k[r].th, NULL, rank_main, &k[r]);
    }
    for (int r = 0; r < 3; r++)
        pthread_join(k[r].th, NULL);
    for (int r = 0; r < 3; r++)
        check(k[r].rc == VAE_EINTERRUPTED &&
                  (r == 1 ? has(k[r].err, "stopped by the caller") : has(k[r].err, "rank 1")) &&
                  k[r].again_rc == VAE_EINTERRUPTED && has(k[r].again_err, "group id"),
              "rank 1 stopped mid-call: rank %d: '%s', then '%s'", r, k[r].err, k[r].again_err);
}

int main(void) {
    vae_model *m = NULL;
    if (vae_model_synth(&m, "wan2.1", W21_SMALL) != VAE_OK) {
        printf("FAIL synthetic model: %s\n", vae_last_error());
        return 1;
    }
    vae_plat_setenv("VAE_GROUP_TIMEOUT", "0.3"); /* the joins that time out do so at once */
    check_options(m);
    check_joins(m);
    check_calls(m);
    check_cancel(m);
    vae_model_free(m);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
