/* test_ranks.c -- the failures of a group of processes (vae_session_options.world), its ranks as
 * threads of this process, each with its own CPU session: every failure is an error on the ranks
 * it concerns, naming what was wrong, and no rank waits forever.
 *
 * - options: rank out of range, a group together with a device group, an unknown group_output;
 * - ids: one not made by vae_group_id_create in this process, a rank joining twice, a rank that
 *   joins with another world;
 * - calls: ranks with different tiling options (their plans differ: every rank fails before any
 *   work), a rank stopped by its progress callback mid-call (the others stop at their next
 *   exchange, and later calls say the group is stopped).
 * The outputs themselves are checked against one process by test_fixtures --ranks.
 * Prints one line per check and "N passed, M failed".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    memcpy(in.shape, shape, sizeof shape);
    memcpy(out.shape, oshape, sizeof oshape);
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

static void check_joins(const vae_model *m) {
    vae_session_options o[2];
    vae_session *s[2] = {NULL, NULL};
    opts(o, 2, 2);
    vae_group_id_create(VAE_DEVICE_CPU, &o[0].group_id);
    o[1] = o[0];
    int rc0 = vae_session_create(&s[0], m, &o[0]);
    int rc1 = vae_session_create(&s[1], m, &o[0]);
    check(rc0 == VAE_OK && rc1 == VAE_EINVAL && has(vae_last_error(), "joined twice"),
          "a rank joining twice is refused: %s", vae_last_error());
    o[1].rank = 1, o[1].world = 3;
    rc1 = vae_session_create(&s[1], m, &o[1]);
    check(rc1 == VAE_EINVAL && has(vae_last_error(), "group of 3 ranks, which has 2"),
          "a rank of another world is refused: %s", vae_last_error());
    vae_session_free(s[0]);
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
    check_options(m);
    check_joins(m);
    check_calls(m);
    vae_model_free(m);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
