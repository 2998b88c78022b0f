/* rendezvous.c -- `--dist`'s TCP rendezvous (cli_group_rendezvous, cli.h): rank 0 hands the group
 * id it made (group.c) to the other ranks, which the launchers give no channel to pass it on.
 * Rank 0 listens on the address MASTER_ADDR names (the loopback when it names this host's); the
 * others connect to it, say hello, with the group's token when it has one, and get the id once
 * every rank has joined. Rank 0 serves every connection at once, each with its own deadline, so a
 * stranger (a port scan, garbage, an idle socket, a hello without the token) is dropped without
 * the id and neither ends nor delays the group. Every step is bounded by a timeout.
 * POSIX sockets; a Windows build has rendezvous_win32.c instead. */
#ifndef _WIN32
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- the rendezvous: an 80-byte hello from each rank, a 140-byte reply from rank 0 ---- */

#define RDZV_MAGIC "VAEG"
#define RDZV_VERSION 2u  /* 2: the hello carries the token */
#define HELLO_WAIT_S 5.0 /* a connection that says nothing this long is not one of our ranks */
/* the hello: magic, version, rank, world (the head, as version 1's whole hello), the token */
enum { HEAD_BYTES = 16, TOKEN_BYTES = 64, HELLO_BYTES = HEAD_BYTES + TOKEN_BYTES };
enum { REPLY_BYTES = 12 + VAE_GROUP_ID_BYTES };
/* what rank 0 replies (after the magic): the id follows only with RDZV_OK */
enum {
    RDZV_OK,
    RDZV_BAD_VERSION,
    RDZV_WORLD_MISMATCH,
    RDZV_BAD_RANK,
    RDZV_DUPLICATE,
    RDZV_ABORT,
    RDZV_BAD_TOKEN
};
/* rank 0's listening sockets (one per address MASTER_ADDR resolves to), connections that have
 * not said a whole hello yet (beyond that the oldest goes: a flood cannot hold the real ranks
 * out, whose hello follows their connect at once) */
enum { MAX_LISTEN = 8, MAX_PENDING = 64 };

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* "host:port", with brackets around an IPv6 literal */
static void host_port(char *buf, size_t n, const char *addr, int port) {
    snprintf(buf, n, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
}

/* Waits until fd is ready for `events` or the deadline passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, left > 86400 ? 86400000 : (int)(left * 1000) + 1);
        if (n > 0) return 1; /* POLLERR / POLLHUP too: the next send or recv says what */
        if (n < 0 && errno != EINTR) return -1;
    }
}

/* Sends or receives n bytes on a non-blocking socket by the deadline: 0 done, 1 timed out, 2 the
 * peer closed the connection, -1 another error (errno). */
static int io_all(int fd, void *buf, size_t n, int sending, double deadline) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k, n -= (size_t)k;
            continue;
        }
        if (k == 0) return 2;
        if (errno == EPIPE || errno == ECONNRESET) return 2;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        int w = errno == EINTR ? 1 : wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w <= 0) return w == 0 ? 1 : -1;
    }
    return 0;
}

/* The token as a hello carries it: its bytes, zero-padded; a longer one folded in (every rank
 * folds it alike). No token: all zeros. */
static void token_field(const char *token, unsigned char out[TOKEN_BYTES]) {
    memset(out, 0, TOKEN_BYTES);
    for (size_t i = 0; token && token[i]; i++)
        out[i % TOKEN_BYTES] ^= (unsigned char)((unsigned char)token[i] + i / TOKEN_BYTES * 131);
}

/* the same token, in a time that does not tell how much of it a guess got right */
static int same_token(const unsigned char *a, const unsigned char *b) {
    unsigned char d = 0;
    for (int i = 0; i < TOKEN_BYTES; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* ---- rank 0 ---- */

/* A connection that has not said its whole hello yet. */
typedef struct pending {
    int fd;
    double deadline; /* its hello's */
    size_t got;
    unsigned char b[HELLO_BYTES];
    char from[64]; /* the peer's numeric address */
} pending;

typedef struct server {
    int port, world;
    int has_token; /* a hello with the token is one of ours: its mistakes end the group */
    unsigned char token[TOKEN_BYTES];
    double timeout_s, deadline;
    int lfd[MAX_LISTEN], n_lfd;
    pending pend[MAX_PENDING];
    int n_pend;
    int *peer, joined;   /* peer[rank]: the socket of a rank that has joined, or -1 */
    char *peer_from;     /* [world][64]: where each came from */
    int dropped;         /* connections dropped: strangers, or ranks refused */
    char last_drop[256]; /* why the last one was */
} server;

static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return sa->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(a);
}

/* A listening socket on one address (the wildcard: every interface, IPv4 too on IPv6): the
 * socket, or -1 with errno. */
static int listen_addr(const struct sockaddr *sa, socklen_t len, int backlog) {
    int fd = socket(sa->sa_family, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return -1;
    /* SO_REUSEADDR: a run right after another finds the port free of its TIME_WAIT */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->sa_family == AF_INET6) {
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (bind(fd, sa, len) == 0 && listen(fd, backlog) == 0 && set_nonblocking(fd) == 0) return fd;
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* Every interface, as version 1 did: IPv6 that takes IPv4 too, or IPv4 alone. 0, or errno. */
static int listen_any(server *sv, int backlog, const char *why) {
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    memset(&a6, 0, sizeof a6), memset(&a4, 0, sizeof a4);
    a6.sin6_family = AF_INET6, a6.sin6_port = htons((uint16_t)sv->port), a6.sin6_addr = in6addr_any;
    a4.sin_family = AF_INET, a4.sin_port = htons((uint16_t)sv->port);
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    int fd = listen_addr((struct sockaddr *)&a6, sizeof a6, backlog);
    if (fd < 0 && errno != EADDRINUSE) fd = listen_addr((struct sockaddr *)&a4, sizeof a4, backlog);
    if (fd < 0) return errno;
    sv->lfd[sv->n_lfd++] = fd;
    if (cli_verbose)
        fprintf(stderr, "vae: --dist: rank 0 listens on every interface, port %d: %s%s\n", sv->port,
                why,
                sv->has_token ? "" : " (no token: VAE_RDZV_TOKEN keeps strangers from the id)");
    return 0;
}

/* Binds each address of `res` (once each): 0 when at least one listens, else the first errno
 * other than EADDRNOTAVAIL (an address not on this host), or EADDRNOTAVAIL. */
static int listen_each(server *sv, const struct addrinfo *res, int backlog) {
    int err = 0;
    for (const struct addrinfo *a = res; a && sv->n_lfd < MAX_LISTEN; a = a->ai_next) {
        int dup = 0;
        for (const struct addrinfo *b = res; b != a && !dup; b = b->ai_next)
            dup = b->ai_addrlen == a->ai_addrlen && !memcmp(b->ai_addr, a->ai_addr, a->ai_addrlen);
        if (dup || (a->ai_family != AF_INET && a->ai_family != AF_INET6)) continue;
        const int fd = listen_addr(a->ai_addr, a->ai_addrlen, backlog);
        if (fd >= 0) {
            sv->lfd[sv->n_lfd++] = fd;
            continue;
        }
        if (errno == EADDRINUSE) return EADDRINUSE; /* the port is another program's */
        if (!err || err == EADDRNOTAVAIL) err = errno;
    }
    return sv->n_lfd > 0 ? 0 : err ? err : EADDRNOTAVAIL;
}

/* Rank 0's listening sockets: on every address MASTER_ADDR resolves to here (the others connect
 * to one of them), and on every interface only where those cannot be where the others connect:
 * - MASTER_ADDR is not an address of this host (EADDRNOTAVAIL: behind NAT, a cloud's public
 *   address, a container's published port): rank 0 is reached through another address of its;
 * - a host name that resolves here to the loopback alone (Debian's 127.0.1.1 for the host's own
 *   name) while the group may span hosts, which reach it through another address.
 * Strangers can then connect, as with version 1, but the token keeps the id from them. */
static int open_listeners(server *sv, const char *addr, int one_node) {
    char service[16], hp[300];
    snprintf(service, sizeof service, "%d", sv->port);
    host_port(hp, sizeof hp, addr, sv->port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_NUMERICSERV;
    const int g = getaddrinfo(addr, service, &hints, &res);
    if (g != 0)
        return cli_set_error(CLI_EFAIL, "rank 0 cannot resolve MASTER_ADDR %s: %s", addr,
                             gai_strerror(g));
    const int backlog = sv->world + MAX_PENDING < 128 ? sv->world + MAX_PENDING : 128;
    int all_loopback = 1, err;
    for (const struct addrinfo *a = res; a; a = a->ai_next)
        all_loopback &= is_loopback(a->ai_addr);
    /* "localhost" or a literal (127.0.0.1, ::1) names the loopback on purpose: one host */
    struct addrinfo num = hints, *lit = NULL;
    num.ai_flags |= AI_NUMERICHOST;
    const int on_purpose =
        strcasecmp(addr, "localhost") == 0 || getaddrinfo(addr, service, &num, &lit) == 0;
    if (lit) freeaddrinfo(lit);
    if (all_loopback && !on_purpose && !one_node)
        err = listen_any(sv, backlog,
                         "MASTER_ADDR resolves to the loopback here, which the "
                         "ranks of other hosts cannot reach");
    else if ((err = listen_each(sv, res, backlog)) == EADDRNOTAVAIL)
        err = listen_any(sv, backlog, "MASTER_ADDR is not an address of this host (NAT?)");
    else if (!err && cli_verbose)
        fprintf(stderr, "vae: --dist: rank 0 listens on %s (%d socket%s)\n", hp, sv->n_lfd,
                sv->n_lfd > 1 ? "s" : "");
    freeaddrinfo(res);
    if (!err) return CLI_OK;
    return cli_set_error(CLI_EFAIL, "rank 0 cannot listen on %s: %s%s", hp, strerror(err),
                         err == EADDRINUSE ? " (VAE_RDZV_PORT picks another)" : "");
}

/* Rank 0's reply; id NULL: a refusal (no id). Best effort: a peer that hung up is told nothing. */
static int send_reply(int fd, uint32_t status, int world, const vae_group_id *id, double deadline) {
    unsigned char r[REPLY_BYTES] = {0};
    memcpy(r, RDZV_MAGIC, 4);
    put_u32(r + 4, status), put_u32(r + 8, (uint32_t)world);
    if (id) memcpy(r + 12, id->bytes, VAE_GROUP_ID_BYTES);
    return io_all(fd, r, sizeof r, 1, deadline);
}

/* Drops pending connection i: a refusal first when status >= 0 (a rank of ours learns why and
 * fails at once; a stranger learns nothing it could not see), then why, kept for the errors. */
static void drop(server *sv, int i, int status, const char *why) {
    pending *c = &sv->pend[i];
    if (status >= 0) send_reply(c->fd, (uint32_t)status, sv->world, NULL, now_s() + 0.05);
    close(c->fd);
    sv->dropped++;
    snprintf(sv->last_drop, sizeof sv->last_drop, "%s", why);
    if (cli_verbose)
        fprintf(stderr, "vae: --dist: rank 0 (port %d) dropped a connection: %s\n", sv->port, why);
    *c = sv->pend[--sv->n_pend];
}

/* The pending connection to drop when all places are taken: the one whose hello has come least
 * far (read or waiting in the socket), the oldest of those. A rank of ours sends its whole hello
 * as it connects, so idle or slow strangers go first, never a rank accepted in the same burst. */
static int least_sent(server *sv) {
    int pick = 0;
    size_t pick_sent = (size_t)-1;
    for (int i = 0; i < sv->n_pend; i++) {
        unsigned char b[HELLO_BYTES];
        const pending *c = &sv->pend[i];
        const ssize_t k = recv(c->fd, b, HELLO_BYTES - c->got, MSG_PEEK | MSG_DONTWAIT);
        const size_t sent = c->got + (k > 0 ? (size_t)k : 0);
        if (sent < pick_sent || (sent == pick_sent && c->deadline < sv->pend[pick].deadline))
            pick = i, pick_sent = sent;
    }
    return pick;
}

/* Accepts what the listening socket has waiting, each with its own hello deadline. */
static void accept_new(server *sv, int lfd) {
    for (int n = 0; n < MAX_PENDING; n++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        const int fd = accept(lfd, (struct sockaddr *)&ss, &len);
        if (fd < 0) return; /* EAGAIN: no more; another error: the next poll tries again */
        if (set_nonblocking(fd) != 0) {
            close(fd);
            continue;
        }
        if (sv->n_pend == MAX_PENDING) /* one goes: the oldest of those that sent the least */
            drop(sv, least_sent(sv), -1, "too many connections at once; one that sent least went");
        pending *c = &sv->pend[sv->n_pend++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->deadline = now_s() + HELLO_WAIT_S < sv->deadline ? now_s() + HELLO_WAIT_S : sv->deadline;
        if (getnameinfo((struct sockaddr *)&ss, len, c->from, sizeof c->from, NULL, 0,
                        NI_NUMERICHOST) != 0)
            snprintf(c->from, sizeof c->from, "an unknown address");
        else if (strncmp(c->from, "::ffff:", 7) == 0 && strchr(c->from, '.'))
            memmove(c->from, c->from + 7, strlen(c->from + 7) + 1); /* IPv4 on an IPv6 socket */
    }
}

/* A hello's rank and world against the group: RDZV_OK, or the refusal with why. */
static int check_hello(const server *sv, long long rank, long long world, const char *from,
                       char *why, size_t n) {
    if (world != sv->world) {
        snprintf(why, n,
                 "rank %lld (from %s) was started for a group of %lld processes, rank 0 "
                 "(port %d) for %d",
                 rank, from, world, sv->port, sv->world);
        return RDZV_WORLD_MISMATCH;
    }
    if (rank < 1 || rank >= world) {
        snprintf(why, n,
                 "a process from %s says it is rank %lld, not one of 1..%d (rank 0 on "
                 "port %d)",
                 from, rank, sv->world - 1, sv->port);
        return RDZV_BAD_RANK;
    }
    if (sv->peer[rank] >= 0) {
        snprintf(why, n,
                 "two processes say they are rank %lld (the first from %s, the second "
                 "from %s; rank 0 on port %d)",
                 rank, sv->peer_from + 64 * rank, from, sv->port);
        return RDZV_DUPLICATE;
    }
    return RDZV_OK;
}

/* Pending connection i has said its whole hello: it joins, or is dropped. CLI_OK, or the exit
 * code that ends the group: a rank that carries the token and does not fit the group (another
 * world size, a rank given twice) is one of ours, started wrong, and no rank should wait for it;
 * without a token anyone could send that hello, and it is only dropped. */
static int take_hello(server *sv, int i) {
    pending *c = &sv->pend[i];
    char why[256];
    const long long rank = get_u32(c->b + 8), world = get_u32(c->b + 12);
    if (!same_token(c->b + HEAD_BYTES, sv->token)) {
        snprintf(why, sizeof why,
                 "a process from %s says it is rank %lld without the group's "
                 "token (VAE_RDZV_TOKEN, or torchrun's TORCHELASTIC_RUN_ID, differs)",
                 c->from, rank);
        drop(sv, i, RDZV_BAD_TOKEN, why);
        return CLI_OK;
    }
    const int status = check_hello(sv, rank, world, c->from, why, sizeof why);
    if (status != RDZV_OK && sv->has_token) {
        drop(sv, i, status, why);
        return cli_set_error(CLI_EUSAGE, "%s", why);
    }
    if (status != RDZV_OK) {
        drop(sv, i, status, why);
        return CLI_OK;
    }
    sv->peer[rank] = c->fd;
    snprintf(sv->peer_from + 64 * rank, 64, "%s", c->from);
    sv->joined++;
    *c = sv->pend[--sv->n_pend];
    return CLI_OK;
}

/* Reads what pending connection i has sent: its head first (a stranger or a rank of another
 * version goes at once), then its token. CLI_OK, or the exit code that ends the group. */
static int read_hello(server *sv, int i) {
    pending *c = &sv->pend[i];
    for (;;) {
        const size_t want = c->got < HEAD_BYTES ? HEAD_BYTES : HELLO_BYTES;
        const ssize_t k = recv(c->fd, c->b + c->got, want - c->got, 0);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            char why[128];
            snprintf(why, sizeof why, "%s hung up before its whole hello", c->from);
            drop(sv, i, -1, why);
            return CLI_OK;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return CLI_OK; /* the rest comes later */
        c->got += (size_t)k;
        if (c->got == HEAD_BYTES && memcmp(c->b, RDZV_MAGIC, 4) != 0) {
            char why[128];
            snprintf(why, sizeof why, "%s sent no vae hello (another program?)", c->from);
            drop(sv, i, -1, why);
            return CLI_OK;
        }
        if (c->got == HEAD_BYTES && get_u32(c->b + 4) != RDZV_VERSION) {
            char why[200];
            snprintf(why, sizeof why,
                     "a process from %s speaks rendezvous version %u, rank 0 on "
                     "port %d version %u (a different vae build?)",
                     c->from, get_u32(c->b + 4), sv->port, RDZV_VERSION);
            drop(sv, i, RDZV_BAD_VERSION, why);
            return CLI_OK;
        }
        if (c->got == HELLO_BYTES) return take_hello(sv, i);
    }
}

/* A rank that has joined sends nothing more: readable means it hung up (or is no rank of ours),
 * and its place is free again for a rank started anew. */
static void check_peer(server *sv, int r) {
    char b;
    const ssize_t k = recv(sv->peer[r], &b, 1, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(sv->peer[r]);
    sv->peer[r] = -1;
    sv->joined--;
    sv->dropped++;
    snprintf(sv->last_drop, sizeof sv->last_drop, "rank %d (from %s) %s before the group formed", r,
             sv->peer_from + 64 * r, k == 0 ? "hung up" : "broke the protocol");
    if (cli_verbose) fprintf(stderr, "vae: --dist: rank 0: %s\n", sv->last_drop);
}

/* Records that rank 0 timed out, naming the ranks it still waits for. */
static int waited_too_long(const server *sv) {
    char missing[160] = "", dropped[400] = "";
    size_t n = 0;
    const int world = sv->world, left = world - 1 - sv->joined;
    for (int r = 1, shown = 0; r < world && n < sizeof missing; r++)
        if (sv->peer[r] < 0 && shown++ < 8)
            n +=
                (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", shown > 1 ? ", " : "", r);
    if (sv->dropped)
        snprintf(dropped, sizeof dropped, "; %d connection%s dropped, the last: %s", sv->dropped,
                 sv->dropped > 1 ? "s were" : " was", sv->last_drop);
    return cli_set_error(
        CLI_EFAIL,
        "rank 0 (port %d) timed out after %g s waiting for %d of the %d ranks "
        "(missing: rank %s%s)%s: were they all started, with MASTER_ADDR naming this host?",
        sv->port, sv->timeout_s, left, world, missing, left > 8 ? ", ..." : "", dropped);
}

/* One poll over every socket rank 0 has: the listening ones, the pending hellos, the ranks that
 * joined; wakes by the next deadline. CLI_OK, or the exit code that ends the group. */
static int serve_once(server *sv, struct pollfd *p, int *who) {
    double now = now_s(), wake = sv->deadline;
    for (int i = sv->n_pend - 1; i >= 0; i--) { /* (backwards: drop moves the last into i) */
        char why[128];
        snprintf(why, sizeof why, "%s said no whole hello within %g s", sv->pend[i].from,
                 HELLO_WAIT_S);
        if (sv->pend[i].deadline <= now)
            drop(sv, i, -1, why);
        else if (sv->pend[i].deadline < wake)
            wake = sv->pend[i].deadline;
    }
    if (now >= sv->deadline) return waited_too_long(sv);
    int n = 0;
    for (int r = 1; r < sv->world; r++)
        if (sv->peer[r] >= 0) who[n] = r, p[n++] = (struct pollfd){sv->peer[r], POLLIN, 0};
    const int n_peer = n;
    for (int i = 0; i < sv->n_pend; i++)
        p[n++] = (struct pollfd){sv->pend[i].fd, POLLIN, 0};
    for (int l = 0; l < sv->n_lfd; l++)
        p[n++] = (struct pollfd){sv->lfd[l], POLLIN, 0};
    const double left = wake - now;
    const int k = poll(p, (nfds_t)n, left > 86400 ? 86400000 : (int)(left * 1000) + 1);
    if (k < 0 && errno != EINTR)
        return cli_set_error(CLI_EFAIL, "rank 0 (port %d): %s", sv->port, strerror(errno));
    if (k <= 0) return CLI_OK;
    for (int j = 0; j < n_peer; j++)
        if (p[j].revents) check_peer(sv, who[j]);
    const int n_pend = sv->n_pend; /* (take_hello and drop move the last into i: backwards) */
    for (int i = n_pend - 1; i >= 0; i--) {
        int rc = p[n_peer + i].revents ? read_hello(sv, i) : CLI_OK;
        if (rc != CLI_OK) return rc;
    }
    for (int l = 0; l < sv->n_lfd; l++)
        if (p[n_peer + n_pend + l].revents) accept_new(sv, sv->lfd[l]);
    return CLI_OK;
}

/* Rank 0: waits for every other rank's hello (peer[rank] = its socket). CLI_OK or an exit code. */
static int gather_ranks(server *sv) {
    const size_t slots = (size_t)sv->world + MAX_PENDING + MAX_LISTEN;
    struct pollfd *p = malloc(slots * sizeof *p);
    int *who = malloc(slots * sizeof *who), rc = CLI_OK;
    if (!p || !who) rc = cli_set_error(CLI_ERESOURCE, "out of memory");
    while (rc == CLI_OK && sv->joined < sv->world - 1)
        rc = serve_once(sv, p, who);
    free(p);
    free(who);
    return rc;
}

/* Rank 0: the id to every rank once all have joined (not before: a rank that got it would wait in
 * its session creation for a group that may never form), or on failure a refusal to each. */
static int serve(const cli_rdzv *o, const vae_group_id *id) {
    server *sv = calloc(1, sizeof *sv);
    int *peer = malloc((size_t)o->world * sizeof *peer);
    char *from = calloc((size_t)o->world, 64);
    if (!sv || !peer || !from) {
        free(sv), free(peer), free(from);
        return cli_set_error(CLI_ERESOURCE, "out of memory");
    }
    for (int r = 0; r < o->world; r++)
        peer[r] = -1;
    sv->port = o->port, sv->world = o->world, sv->timeout_s = o->timeout_s;
    sv->deadline = now_s() + o->timeout_s;
    sv->has_token = o->token && *o->token;
    token_field(o->token, sv->token);
    sv->peer = peer, sv->peer_from = from;
    int rc = open_listeners(sv, o->addr, o->one_node);
    if (rc == CLI_OK) rc = gather_ranks(sv);
    for (int r = 1; r < o->world; r++) {
        if (peer[r] < 0) continue;
        int sent = send_reply(peer[r], rc == CLI_OK ? RDZV_OK : RDZV_ABORT, o->world,
                              rc == CLI_OK ? id : NULL, now_s() + 5);
        if (sent != 0 && rc == CLI_OK)
            rc = cli_set_error(CLI_EFAIL,
                               "rank %d hung up before rank 0 (port %d) could send it the group id",
                               r, o->port);
        close(peer[r]);
    }
    for (int i = 0; i < sv->n_pend; i++)
        close(sv->pend[i].fd);
    for (int l = 0; l < sv->n_lfd; l++)
        close(sv->lfd[l]);
    free(sv), free(peer), free(from);
    return rc;
}

/* One attempt to connect: the socket, or -1 with why it failed. */
static int try_connect(const struct addrinfo *a, double deadline, char *why, size_t n) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol), err = 0;
    if (fd < 0) {
        snprintf(why, n, "%s", strerror(errno));
        return -1;
    }
    if (set_nonblocking(fd) != 0) {
        err = errno;
    } else if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            err = errno;
        } else { /* under way: done when writable, SO_ERROR says how */
            socklen_t len = sizeof err;
            int w = wait_fd(fd, POLLOUT, deadline);
            if (w == 0)
                err = ETIMEDOUT;
            else if (w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
        }
    }
    if (err == 0) return fd;
    snprintf(why, n, "%s", strerror(err));
    close(fd);
    return -1;
}

/* Connects to rank 0, retrying until the deadline (rank 0 may start, or finish making the id,
 * after this rank). The socket, or -1 with the error recorded. */
static int connect_rank0(const char *addr, int port, double timeout_s, double deadline) {
    char service[16], why[200] = "not tried";
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
    for (;;) {
        struct addrinfo *res = NULL;
        int g = getaddrinfo(addr, service, &hints, &res); /* again each time: DNS may come late */
        if (g != 0) snprintf(why, sizeof why, "cannot resolve the address: %s", gai_strerror(g));
        for (const struct addrinfo *a = g == 0 ? res : NULL; a; a = a->ai_next) {
            int fd = try_connect(a, deadline, why, sizeof why);
            if (fd >= 0) {
                freeaddrinfo(res);
                return fd;
            }
        }
        if (g == 0) freeaddrinfo(res);
        if (now_s() + 0.1 >= deadline) break;
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    char hp[300];
    host_port(hp, sizeof hp, addr, port);
    cli_set_error(CLI_EFAIL,
                  "cannot reach rank 0 at %s within %g s: %s (is rank 0 running, and is that its "
                  "address and port?)",
                  hp, timeout_s, why);
    return -1;
}

/* What a refusal from rank 0 means, recorded as the error: an exit code. */
static int refused(uint32_t status, uint32_t world0, const char *hp, int rank, int world) {
    switch (status) {
    case RDZV_BAD_VERSION:
        return cli_set_error(
            CLI_EFAIL, "rank 0 at %s speaks another rendezvous version (a different vae build?)",
            hp);
    case RDZV_WORLD_MISMATCH:
        return cli_set_error(
            CLI_EUSAGE,
            "rank 0 at %s runs a group of %u processes, this rank %d was started for %d", hp,
            world0, rank, world);
    case RDZV_BAD_RANK:
        return cli_set_error(CLI_EUSAGE, "rank 0 at %s has no rank %d in its group of %u", hp, rank,
                             world0);
    case RDZV_DUPLICATE:
        return cli_set_error(
            CLI_EUSAGE,
            "rank 0 at %s already has a rank %d: two processes were started with the same rank", hp,
            rank);
    case RDZV_BAD_TOKEN:
        return cli_set_error(CLI_EUSAGE,
                             "rank 0 at %s refused this rank's token: VAE_RDZV_TOKEN (or "
                             "torchrun's TORCHELASTIC_RUN_ID) differs between the ranks",
                             hp);
    default:
        return cli_set_error(CLI_EFAIL, "rank 0 at %s gave up on the group (its error says why)",
                             hp);
    }
}

/* Ranks 1..world-1: hello to rank 0, then its reply with the id. */
static int join(const cli_rdzv *o, vae_group_id *id) {
    const char *addr = o->addr;
    const int port = o->port, rank = o->rank, world = o->world;
    const double timeout_s = o->timeout_s, deadline = now_s() + timeout_s;
    int fd = connect_rank0(addr, port, timeout_s, deadline);
    if (fd < 0) return CLI_EFAIL;
    unsigned char h[HELLO_BYTES], r[REPLY_BYTES];
    memcpy(h, RDZV_MAGIC, 4);
    put_u32(h + 4, RDZV_VERSION), put_u32(h + 8, (uint32_t)rank), put_u32(h + 12, (uint32_t)world);
    token_field(o->token, h + HEAD_BYTES);
    int io = io_all(fd, h, sizeof h, 1, deadline), err = errno;
    if (io == 0) io = io_all(fd, r, sizeof r, 0, deadline), err = errno;
    close(fd);
    char hp[300];
    host_port(hp, sizeof hp, addr, port);
    if (io == 1)
        return cli_set_error(
            CLI_EFAIL,
            "rank 0 at %s did not send the group id within %g s (were all ranks started?)", hp,
            timeout_s);
    if (io != 0)
        return cli_set_error(CLI_EFAIL, "rank 0 at %s: %s before it sent the group id", hp,
                             io == 2 ? "the connection was closed" : strerror(err));
    if (memcmp(r, RDZV_MAGIC, 4) != 0)
        return cli_set_error(CLI_EFAIL,
                             "%s is not rank 0 of a vae group (another program on that port? "
                             "VAE_RDZV_PORT picks another)",
                             hp);
    if (get_u32(r + 4) != RDZV_OK) return refused(get_u32(r + 4), get_u32(r + 8), hp, rank, world);
    memcpy(id->bytes, r + 12, VAE_GROUP_ID_BYTES);
    return CLI_OK;
}

int cli_group_rendezvous(const cli_rdzv *o, vae_group_id *id) {
    if (o->port < 1 || o->port > 65535 || o->world < 1 || o->rank < 0 || o->rank >= o->world ||
        !(o->timeout_s > 0) || !o->addr || !*o->addr)
        return cli_set_error(
            CLI_EUSAGE, "rendezvous: rank %d of %d at '%s' port %d, timeout %g s: out of range",
            o->rank, o->world, o->addr ? o->addr : "", o->port, o->timeout_s);
    if (o->world == 1) return CLI_OK;
    return o->rank == 0 ? serve(o, id) : join(o, id);
}

#endif
