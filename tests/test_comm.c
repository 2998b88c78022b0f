/* test_comm.c -- the in-process communicator (src/core/comm_threads.c), ranks as threads.
 *
 * For groups of 1, 2, 3 and 5 ranks: sums (every rank gets the same bits, equal to the sum in
 * rank order), halo exchanges between row bands (each band sends its last rows down and its
 * first rows up, the end bands one way only) over many rounds with sizes that change per round,
 * all-gathers of each rank's part of every frame (parts of changing sizes, some empty), and a
 * barrier; then the failures: a size mismatch fails on both ends of the pair and nobody hangs,
 * parts that differ between ranks fail on all of them, a bad peer is an error, and a rank that
 * aborts stops the others waiting in a call.
 * Prints one line per check and "N passed, M failed".
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/core.h"
#include "test_check.h"

enum { MAX_RANKS = 8, ROUNDS = 40, N_SUM = 1031 };

typedef struct job {
    vae_comm *c;
    int mode; /* 0: the collectives; 1: a size mismatch; 2: a bad peer; 3: abort; 4: all-gather
               * parts that differ */
    int rc[4];
    int bad;           /* wrong values seen */
    double sum[N_SUM]; /* mode 0: the last allreduce's result */
} job;

/* value i of rank r's contribution in round k: not exactly representable sums, so that the
 * order of summation shows */
static double contribution(int r, int k, size_t i) {
    return 0.1 * (r + 1) + 1e-3 * k + 1e-7 * (double)i;
}

/* rows of band r in round k: one byte pattern per (rank, round, row) */
static unsigned char row_byte(int r, int k, int row) {
    return (unsigned char)(r * 31 + k * 7 + row);
}

static void collectives(job *j) {
    vae_comm *c = j->c;
    const int r = c->rank, n = c->size;
    for (int k = 0; k < ROUNDS; k++) {
        for (size_t i = 0; i < N_SUM; i++)
            j->sum[i] = contribution(r, k, i);
        if (c->v->allreduce_sum(c, j->sum, N_SUM)) j->rc[0]++;
        for (size_t i = 0; i < N_SUM; i++) {
            double want = 0;
            for (int q = 0; q < n; q++)
                want += contribution(q, k, i);
            j->bad += memcmp(&want, &j->sum[i], sizeof want) != 0;
        }
        /* a halo exchange down then up: `rows` edge rows of 3 bytes each, sizes per round */
        const int rows = 1 + k % 3;
        unsigned char mine[16], got[16];
        for (int dir = 0; dir < 2; dir++) {
            const int to = dir == 0 ? (r + 1 < n ? r + 1 : -1) : r - 1;
            const int from = dir == 0 ? r - 1 : (r + 1 < n ? r + 1 : -1);
            for (int x = 0; x < rows * 3; x++)
                mine[x] = row_byte(r, k, x + dir);
            memset(got, 0xEE, sizeof got);
            if (c->v->sendrecv(c, mine, to >= 0 ? (size_t)rows * 3 : 0, to, got,
                               from >= 0 ? (size_t)rows * 3 : 0, from))
                j->rc[1]++;
            for (int x = 0; from >= 0 && x < rows * 3; x++)
                j->bad += got[x] != row_byte(from, k, x + dir);
        }
        /* all-gather: `frames` frames of `fb` bytes, rank q's part [fb q / n, fb (q + 1) / n)
         * (fb < n some rounds: empty parts) */
        enum { FB_MAX = 48, FRAMES_MAX = 3 };
        const int frames = 1 + k % FRAMES_MAX;
        const size_t fb = k % 4 == 3 ? (size_t)(k % n) : (size_t)(5 + k % 44);
        size_t off[MAX_RANKS + 1];
        unsigned char all[FRAMES_MAX * FB_MAX];
        for (int q = 0; q <= n; q++)
            off[q] = fb * q / n;
        memset(all, 0xEE, sizeof all);
        for (int f = 0; f < frames; f++)
            for (size_t x = off[r]; x < off[r + 1]; x++)
                all[f * fb + x] = row_byte(r, k, (int)(f * fb + x));
        if (c->v->allgather(c, all, fb, frames, off)) j->rc[2]++;
        for (int q = 0; q < n; q++)
            for (int f = 0; f < frames; f++)
                for (size_t x = off[q]; x < off[q + 1]; x++)
                    j->bad += all[f * fb + x] != row_byte(q, k, (int)(f * fb + x));
        if (c->v->barrier(c)) j->rc[2]++;
    }
}

static void *rank_main(void *arg) {
    job *j = arg;
    vae_comm *c = j->c;
    const int r = c->rank, n = c->size;
    char buf[64] = {0}, in[64];
    double one = 1;
    switch (j->mode) {
    case 0: collectives(j); break;
    case 1: /* rank 0 sends 8 bytes to rank 1, which expects 9; the others exchange nothing */
        j->rc[0] = c->v->sendrecv(c, buf, r == 0 ? 8 : 0, r == 0 ? 1 : -1, in, r == 1 ? 9 : 0,
                                  r == 1 ? 0 : -1);
        j->rc[1] = c->v->barrier(c); /* the group goes on after the error */
        break;
    case 2: /* rank 0 names a peer beyond the group */
        j->rc[0] = c->v->sendrecv(c, buf, 1, r == 0 ? n : -1, in, 0, -1);
        break;
    case 3: /* the last rank fails; the others wait for it in a barrier */
        if (r == n - 1)
            c->v->abort(c);
        else
            j->rc[0] = c->v->barrier(c);
        j->rc[1] = c->v->allreduce_sum(c, &one, 1);
        break;
    case 4: { /* rank 0 all-gathers two frames, the others one */
        size_t off[MAX_RANKS + 1];
        for (int q = 0; q <= n; q++)
            off[q] = 8 * q / n;
        j->rc[0] = c->v->allgather(c, buf, 8, r == 0 ? 2 : 1, off);
        j->rc[1] = c->v->barrier(c);
        break;
    }
    }
    return NULL;
}

static int run_group(int n, int mode, job *jobs) {
    vae_comm *ranks[MAX_RANKS];
    if (vae_comm_threads_create(n, ranks)) return -1;
    pthread_t th[MAX_RANKS];
    for (int k = 0; k < n; k++) {
        memset(&jobs[k], 0, sizeof jobs[k]);
        jobs[k].c = ranks[k], jobs[k].mode = mode;
        pthread_create(&th[k], NULL, rank_main, &jobs[k]);
    }
    for (int k = 0; k < n; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < n; k++)
        ranks[k]->v->destroy(ranks[k]);
    return 0;
}

int main(void) {
    static job jobs[MAX_RANKS];
    static const int sizes[] = {1, 2, 3, 5};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const int n = sizes[s];
        check(run_group(n, 0, jobs) == 0, "%d ranks: group made", n);
        int errors = 0, bad = 0, same = 1;
        for (int k = 0; k < n; k++) {
            errors += jobs[k].rc[0] + jobs[k].rc[1] + jobs[k].rc[2];
            bad += jobs[k].bad;
            same &= memcmp(jobs[k].sum, jobs[0].sum, sizeof jobs[0].sum) == 0;
        }
        check(errors == 0 && bad == 0 && same,
              "%d ranks, %d rounds: sums equal to the rank-order sum on every rank, halos "
              "down and up as sent, every rank's parts gathered (%d failed calls, %d wrong "
              "values)",
              n, ROUNDS, errors, bad);
        if (n < 2) continue;
        run_group(n, 1, jobs);
        int others_ok = 1;
        for (int k = 2; k < n; k++)
            others_ok &= jobs[k].rc[0] == VAE_OK;
        check(jobs[0].rc[0] == VAE_EINVAL && jobs[1].rc[0] == VAE_EINVAL && others_ok &&
                  jobs[0].rc[1] == VAE_OK && jobs[1].rc[1] == VAE_OK,
              "%d ranks: 8 bytes sent where 9 are expected fail on both ends (%d, %d), the "
              "group goes on",
              n, jobs[0].rc[0], jobs[1].rc[0]);
        run_group(n, 2, jobs);
        check(jobs[0].rc[0] == VAE_EINVAL, "%d ranks: a peer beyond the group is an error", n);
        run_group(n, 4, jobs);
        int all_fail = 1;
        for (int k = 0; k < n; k++)
            all_fail &= jobs[k].rc[0] == VAE_EINVAL && jobs[k].rc[1] == VAE_OK;
        check(all_fail,
              "%d ranks: an all-gather of 2 frames against 1 fails on every rank, the "
              "group goes on",
              n);
        run_group(n, 3, jobs);
        int stopped = 1;
        for (int k = 0; k < n; k++)
            stopped &= (k == n - 1 || jobs[k].rc[0] == VAE_EINTERRUPTED) &&
                       jobs[k].rc[1] == VAE_EINTERRUPTED;
        check(stopped, "%d ranks: an abort stops the ranks waiting in a barrier and later calls",
              n);
    }
    vae_comm *one;
    check(vae_comm_threads_create(0, &one) == VAE_EINVAL, "a group of 0 ranks is an error");
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
