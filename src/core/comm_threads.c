/* comm_threads.c -- the communicator of comm.h for ranks that are threads of one process.
 *
 * Each collective is two rounds of a shared barrier: in the first every rank posts what it
 * offers (a pointer and a size), in the second every rank has taken what it needs from the
 * others' posts, so that no rank changes or frees a buffer another still reads. Sums run over
 * the posts in rank order into a private copy first: every rank gets the same bits. Argument
 * mismatches are found between the rounds, and every rank still passes both, so a bad call
 * fails on every rank involved instead of leaving the others waiting.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "platform/platform.h" /* pthreads, the timed wait */

typedef struct post {
    const void *p;
    size_t bytes;
    int to, from;      /* sendrecv: the ranks it sends to and receives from (-1: none) */
    size_t recv_bytes; /* sendrecv: what it expects */
    int frames;        /* allgather: frames of `bytes` each, rank k's part [off[k], off[k+1]) */
    const size_t *off;
} post;

typedef struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived, handles;
    unsigned long generation;
    int aborted_by;      /* -1, or the rank that aborted */
    int formed;          /* every rank has its handle (a group joined by id: all have joined) */
    unsigned char *here; /* [size]: rank k has arrived in this round (a cancel names the rest) */
    post *posts;         /* [size] */
} group;

typedef struct rank_comm {
    vae_comm base;
    group *g;
} rank_comm;

static group *group_of(vae_comm *c) {
    return ((rank_comm *)c)->g;
}

static int stopped(const group *g) {
    return vae_fail(VAE_EINTERRUPTED, "comm: rank %d of the group stopped it", g->aborted_by);
}

/* How often a rank waiting for the others looks at its cancel flag: the flag is a plain atomic
 * that its setter (vae_session_cancel) cannot signal, so the wait wakes to read it. */
#define CANCEL_POLL_S 0.02

/* at most `seconds` (the monotonic clock: cond_init) */
static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    vae_plat_cond_wait_for(cv, mu, seconds);
}

static void cond_init(pthread_cond_t *cv) {
    vae_plat_cond_init_timed(cv);
}

/* "1, 3" (at most 8, then "..."): the ranks whose flag is `is` */
static void rank_list(char *buf, size_t n, const unsigned char *flag, int size, int is) {
    size_t k = 0;
    int shown = 0;
    buf[0] = 0;
    for (int r = 0; r < size; r++) {
        if (!flag[r] != !is) continue;
        if (shown == 8 || k + 16 >= n) {
            snprintf(buf + k, n - k, ", ...");
            return;
        }
        k += (size_t)snprintf(buf + k, n - k, "%s%d", shown++ ? ", " : "", r);
    }
}

/* The caller's cancel stops this rank's wait; the group is aborted (a rank that left a round
 * halfway would leave the others' rounds uneven), the others stop where they wait. */
static int cancelled(group *g, int rank) {
    char missing[96];
    rank_list(missing, sizeof missing, g->here, g->size, 0);
    if (g->aborted_by < 0) g->aborted_by = rank;
    pthread_cond_broadcast(&g->cv);
    return vae_fail(VAE_EINTERRUPTED,
                    "comm: rank %d was cancelled while it waited for rank(s) %s of the group; "
                    "the group is stopped",
                    rank, missing);
}

/* Every rank arrives before any leaves (or the group is aborted, or the caller cancels c). */
static int round_wait(vae_comm *c) {
    group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    const unsigned long gen = g->generation;
    if (g->aborted_by < 0) {
        g->here[c->rank] = 1;
        if (++g->arrived == g->size) {
            g->arrived = 0;
            memset(g->here, 0, (size_t)g->size);
            g->generation++;
            pthread_cond_broadcast(&g->cv);
        }
    }
    int rc = VAE_OK;
    while (rc == VAE_OK && g->aborted_by < 0 && g->generation == gen) {
        if (c->cancel && atomic_load(c->cancel))
            rc = cancelled(g, c->rank);
        else if (c->cancel)
            timed_wait(&g->cv, &g->mu, CANCEL_POLL_S);
        else
            pthread_cond_wait(&g->cv, &g->mu);
    }
    if (rc == VAE_OK && g->aborted_by >= 0) rc = stopped(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int threads_barrier(vae_comm *c) {
    return round_wait(c);
}

static int threads_allreduce_sum(vae_comm *c, double *buf, size_t n) {
    group *g = group_of(c);
    g->posts[c->rank] = (post){buf, n * sizeof *buf, -1, -1, 0, 0, NULL};
    int rc = round_wait(c);
    double *sum = NULL;
    if (rc == VAE_OK) {
        for (int k = 0; k < g->size && rc == VAE_OK; k++)
            if (g->posts[k].bytes != n * sizeof *buf)
                rc = vae_fail(VAE_EINVAL, "comm allreduce: rank %d sums %zu values, rank %d %zu",
                              c->rank, n, k, g->posts[k].bytes / sizeof *buf);
        sum = rc == VAE_OK && n ? vae_calloc(n, sizeof *sum) : NULL;
        if (rc == VAE_OK && n && !sum) rc = vae_fail(VAE_ENOMEM, "comm allreduce: out of memory");
        for (int k = 0; k < g->size && sum; k++) {
            const double *x = g->posts[k].p;
            for (size_t i = 0; i < n; i++)
                sum[i] += x[i];
        }
    }
    const int rc2 = round_wait(c); /* everyone has read every buf */
    if (rc == VAE_OK) rc = rc2;
    if (rc == VAE_OK && sum) memcpy(buf, sum, n * sizeof *buf);
    vae_free(sum);
    return rc;
}

static int threads_sendrecv(vae_comm *c, const void *send, size_t send_bytes, int to, void *recv,
                            size_t recv_bytes, int from) {
    group *g = group_of(c);
    const int me = c->rank;
    int rc = VAE_OK;
    if (to >= g->size || from >= g->size || (to >= 0 && to == me) || (from >= 0 && from == me))
        rc = vae_fail(VAE_EINVAL, "comm sendrecv: rank %d of %d sends to %d, receives from %d", me,
                      g->size, to, from);
    g->posts[me] = rc ? (post){NULL, 0, -1, -1, 0, 0, NULL}
                      : (post){send, send_bytes, to, from, recv_bytes, 0, NULL};
    int rw = round_wait(c);
    if (rc == VAE_OK) rc = rw;
    /* both ends of each pair check it, so that a mismatch fails on both */
    const post *in = from >= 0 ? &g->posts[from] : NULL, *out = to >= 0 ? &g->posts[to] : NULL;
    if (rc == VAE_OK && in && (in->to != me || in->bytes != recv_bytes))
        rc = vae_fail(VAE_EINVAL,
                      "comm sendrecv: rank %d expects %zu bytes from rank %d, which sends %zu "
                      "bytes to rank %d",
                      me, recv_bytes, from, in->bytes, in->to);
    if (rc == VAE_OK && out && (out->from != me || out->recv_bytes != send_bytes))
        rc = vae_fail(VAE_EINVAL,
                      "comm sendrecv: rank %d sends %zu bytes to rank %d, which expects %zu bytes "
                      "from rank %d",
                      me, send_bytes, to, out->recv_bytes, out->from);
    if (rc == VAE_OK && in && recv_bytes) memcpy(recv, in->p, recv_bytes);
    rw = round_wait(c); /* every receiver has its copy */
    return rc ? rc : rw;
}

/* rank k's parts, the same geometry as rank 0's (VAE_EINVAL otherwise) */
static int allgather_check(const group *g, int k) {
    const post *a = &g->posts[0], *b = &g->posts[k];
    int same = a->bytes == b->bytes && a->frames == b->frames && a->off && b->off;
    for (int j = 0; same && j <= g->size; j++)
        same = a->off[j] == b->off[j] && (j == 0 || b->off[j] >= b->off[j - 1]);
    if (same && b->off[0] == 0 && b->off[g->size] == b->bytes) return VAE_OK;
    return vae_fail(VAE_EINVAL,
                    "comm allgather: rank %d's parts of %d frames of %zu bytes differ from rank "
                    "0's (%d of %zu) or do not cover them",
                    k, b->frames, b->bytes, a->frames, a->bytes);
}

static int threads_allgather(vae_comm *c, void *buf, size_t frame_bytes, int frames,
                             const size_t *off) {
    group *g = group_of(c);
    const int me = c->rank;
    g->posts[me] = (post){buf, frame_bytes, -1, -1, 0, frames, off};
    int rc = round_wait(c);
    for (int k = 0; k < g->size && rc == VAE_OK; k++) /* every rank finds the same mismatch */
        rc = allgather_check(g, k);
    /* rank k's part of its own buffer: nobody writes it in this round, everybody may read it */
    for (int k = 0; k < g->size && rc == VAE_OK; k++) {
        const size_t lo = off[k], n = off[k + 1] - off[k];
        for (int f = 0; k != me && n && f < frames; f++)
            memcpy((char *)buf + (size_t)f * frame_bytes + lo,
                   (const char *)g->posts[k].p + (size_t)f * frame_bytes + lo, n);
    }
    const int rw = round_wait(c); /* every rank has its copies */
    return rc ? rc : rw;
}

static void threads_abort(vae_comm *c) {
    group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    if (g->aborted_by < 0) g->aborted_by = c->rank;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void group_free(group *g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    vae_free(g->posts);
    vae_free(g->here);
    vae_free(g);
}

static void threads_destroy(vae_comm *c) {
    if (!c) return;
    group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    const int last = --g->handles == 0;
    pthread_mutex_unlock(&g->mu);
    vae_free(c);
    if (last) group_free(g);
}

static const vae_comm_vtbl threads_vtbl = {
    .name = "threads",
    .allreduce_sum = threads_allreduce_sum,
    .sendrecv = threads_sendrecv,
    .allgather = threads_allgather,
    .barrier = threads_barrier,
    .abort = threads_abort,
    .destroy = threads_destroy,
};

static group *group_new(int size) {
    group *g = vae_calloc(1, sizeof *g);
    post *posts = vae_calloc((size_t)size, sizeof *posts);
    unsigned char *here = vae_calloc((size_t)size, 1);
    if (!g || !posts || !here) {
        vae_free(g);
        vae_free(posts);
        vae_free(here);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    cond_init(&g->cv);
    g->here = here;
    g->size = size;
    g->aborted_by = -1;
    g->posts = posts;
    return g;
}

static vae_comm *rank_new(group *g, int k) {
    rank_comm *r = vae_calloc(1, sizeof *r);
    if (!r) return NULL;
    r->base = (vae_comm){&threads_vtbl, k, g->size, 0, NULL};
    r->g = g;
    return &r->base;
}

int vae_comm_threads_create(int size, vae_comm **ranks) {
    if (size < 1 || !ranks) return vae_fail(VAE_EINVAL, "comm: a group of %d ranks", size);
    group *g = group_new(size);
    if (!g) return vae_fail(VAE_ENOMEM, "comm: out of memory");
    for (int k = 0; k < size; k++) {
        if (!(ranks[k] = rank_new(g, k))) { /* no thread has a handle yet: all of it goes */
            for (int j = 0; j < k; j++)
                vae_free(ranks[j]);
            group_free(g);
            return vae_fail(VAE_ENOMEM, "comm: out of memory");
        }
    }
    g->handles = size;
    g->formed = 1;
    return VAE_OK;
}

/* ---- groups joined by id: sessions of one process standing in for the processes of a group
 * (vae_session_options.world on the CPU). A group is in the registry from its first rank's join
 * until its last rank's, and holds a handle of its own meanwhile, so that a rank that leaves
 * early does not free it under the others. A join waits until every rank has joined, as NCCL's
 * does, so that a missing rank is found at creation, by a bounded wait that names it, instead of
 * in the first call's exchange. */
typedef struct named {
    unsigned char id[VAE_COMM_ID_BYTES];
    group *g;
    int joined;
    unsigned char *has; /* [size]: rank k has joined */
    struct named *next;
} named;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registry_cv; /* a group formed (cond_init, once) */
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static named *registry;
static unsigned long registry_ids;

static const char id_magic[] = "vae.c threads group";

void vae_comm_threads_new_id(unsigned char *id) {
    pthread_mutex_lock(&registry_mu);
    const unsigned long n = ++registry_ids;
    pthread_mutex_unlock(&registry_mu);
    memset(id, 0, VAE_COMM_ID_BYTES);
    snprintf((char *)id, VAE_COMM_ID_BYTES, "%s %ld %lu", id_magic, vae_plat_pid(), n);
}

int vae_comm_threads_id(const unsigned char *id) {
    return strncmp((const char *)id, id_magic, sizeof id_magic - 1) == 0;
}

static named *registry_find(const unsigned char *id) {
    for (named *e = registry; e; e = e->next)
        if (memcmp(e->id, id, VAE_COMM_ID_BYTES) == 0) return e;
    return NULL;
}

static void registry_drop(named *e) {
    for (named **p = &registry; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    vae_free(e->has);
    vae_free(e);
}

/* the entry of id, made by its first rank (world ranks); NULL with an error set */
static named *registry_entry(const unsigned char *id, int world) {
    named *e = registry_find(id);
    if (e) return e;
    e = vae_calloc(1, sizeof *e);
    if (e) e->has = vae_calloc((size_t)world, 1);
    if (e && e->has) e->g = group_new(world);
    if (!e || !e->has || !e->g) {
        if (e) vae_free(e->has);
        vae_free(e);
        vae_fail(VAE_ENOMEM, "comm: out of memory");
        return NULL;
    }
    memcpy(e->id, id, VAE_COMM_ID_BYTES);
    e->g->handles = 1; /* the registry's */
    e->next = registry;
    registry = e;
    return e;
}

static void registry_init(void) {
    cond_init(&registry_cv);
}

/* A rank that joined no group after all (it failed, or timed out): its mark and handle go, and
 * the entry with the registry's handle when no rank is left in it. */
static void registry_leave(named *e, int rank, vae_comm **out) {
    if (*out) {
        e->has[rank] = 0;
        e->joined--;
        threads_destroy(*out); /* (the registry's handle keeps the group) */
        *out = NULL;
    }
    if (e->joined == 0) {
        group_free(e->g);
        registry_drop(e);
    }
}

/* Waits (registry_mu held) until the last rank has joined, or timeout_s: VAE_OK, or the error
 * naming the ranks that did not come. */
static int wait_formed(named *e, int rank, int world, double timeout_s, vae_comm **out) {
    group *g = e->g; /* (e goes when the group forms; g stays: this rank holds a handle) */
    const double deadline = vae_seconds() + timeout_s;
    for (double left = timeout_s; !g->formed && left > 0; left = deadline - vae_seconds())
        timed_wait(&registry_cv, &registry_mu, left);
    if (g->formed) return VAE_OK;
    char missing[96];
    rank_list(missing, sizeof missing, e->has, world, 0);
    registry_leave(e, rank, out);
    return vae_fail(VAE_EINTERRUPTED,
                    "group id: rank %d of %d waited %g s for rank(s) %s to join (was a session "
                    "made for every rank, each in its own thread, with this id? VAE_GROUP_TIMEOUT "
                    "sets the wait)",
                    rank, world, timeout_s, missing);
}

int vae_comm_threads_join(const unsigned char *id, int rank, int world, double timeout_s,
                          vae_comm **out) {
    char want[64];
    snprintf(want, sizeof want, "%s %ld ", id_magic, vae_plat_pid());
    *out = NULL;
    if (strncmp((const char *)id, want, strlen(want)) != 0)
        return vae_fail(VAE_EINVAL, "group id: not one this process made for CPU sessions (on the "
                                    "CPU the ranks of a group are threads of one process)");
    pthread_once(&registry_once, registry_init);
    pthread_mutex_lock(&registry_mu);
    named *e = registry_entry(id, world);
    int rc = e ? VAE_OK : VAE_ENOMEM;
    if (rc == VAE_OK && e->g->size != world)
        rc = vae_fail(VAE_EINVAL, "group id: rank %d joins a group of %d ranks, which has %d", rank,
                      world, e->g->size);
    else if (rc == VAE_OK && e->has[rank])
        rc = vae_fail(VAE_EINVAL, "group id: rank %d of %d joined twice", rank, world);
    if (rc == VAE_OK && !(*out = rank_new(e->g, rank)))
        rc = vae_fail(VAE_ENOMEM, "comm: out of memory");
    if (rc == VAE_OK) {
        group *g = e->g;
        e->has[rank] = 1;
        const int complete = ++e->joined == world;
        pthread_mutex_lock(&g->mu);
        g->handles += complete ? 0 : 1; /* complete: the registry's handle becomes this rank's */
        g->formed = complete;
        pthread_mutex_unlock(&g->mu);
        if (complete) {
            registry_drop(e);
            pthread_cond_broadcast(&registry_cv);
        } else {
            rc = wait_formed(e, rank, world, timeout_s, out);
        }
    } else if (e) {
        registry_leave(e, rank, out); /* a fresh entry this failure made goes again */
    }
    pthread_mutex_unlock(&registry_mu);
    return rc;
}
