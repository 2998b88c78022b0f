/* rendezvous.c -- `--dist`'s TCP rendezvous (cli_group_rendezvous, cli.h): rank 0 hands the group
 * id it made (group.c) to the other ranks, which the launchers give no channel to pass it on.
 * Rank 0 listens on every interface; the others connect to MASTER_ADDR, say hello and get the id
 * once every rank has joined. Every step is bounded by a timeout: no rank hangs on it. */
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- the rendezvous: a 16-byte hello from each rank, a 140-byte reply from rank 0 ---- */

#define RDZV_MAGIC "VAEG"
#define RDZV_VERSION 1u
#define HELLO_WAIT_S 5.0 /* a connection that says nothing this long is not one of our ranks */
enum { HELLO_BYTES = 16, REPLY_BYTES = 12 + VAE_GROUP_ID_BYTES };
/* what rank 0 replies (after the magic): the id follows only with RDZV_OK */
enum { RDZV_OK, RDZV_BAD_VERSION, RDZV_WORLD_MISMATCH, RDZV_BAD_RANK, RDZV_DUPLICATE, RDZV_ABORT };

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

/* Rank 0's listening socket on every interface: IPv6 that takes IPv4 too, or IPv4 alone where
 * the host has no IPv6. */
static int listen_on(int port, int backlog) {
    static const int families[] = {AF_INET6, AF_INET};
    int err = 0;
    for (int i = 0; i < 2; i++) {
        int fd = socket(families[i], SOCK_STREAM, 0), one = 1, zero = 0;
        if (fd < 0) {
            err = errno;
            continue;
        }
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        socklen_t len = sizeof(struct sockaddr_in);
        if (families[i] == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            a->sin6_family = AF_INET6, a->sin6_port = htons((uint16_t)port);
            a->sin6_addr = in6addr_any;
            len = sizeof *a;
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            a->sin_family = AF_INET, a->sin_port = htons((uint16_t)port);
            a->sin_addr.s_addr = htonl(INADDR_ANY);
        }
        /* SO_REUSEADDR: a run right after another finds the port free of its TIME_WAIT */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 && listen(fd, backlog) == 0 &&
            set_nonblocking(fd) == 0)
            return fd;
        err = errno;
        close(fd);
        if (err == EADDRINUSE) break; /* IPv4 alone would find it taken as well */
    }
    cli_set_error(CLI_EFAIL, "rank 0 cannot listen on port %d: %s%s", port, strerror(err),
                  err == EADDRINUSE ? " (VAE_RDZV_PORT picks another)" : "");
    return -1;
}

/* A hello from one connection of rank 0's. */
typedef struct hello {
    uint32_t version;
    long long rank, world;
    char from[64]; /* the peer's numeric address */
} hello;

/* Accepts one connection and reads its hello: the socket, or -1 when the connection is not one of
 * our ranks (a port scan, another program): dropped without failing the group. */
static int accept_hello(int lfd, double deadline, hello *h) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept(lfd, (struct sockaddr *)&ss, &len);
    if (fd < 0) return -1;
    unsigned char b[HELLO_BYTES];
    double d = now_s() + HELLO_WAIT_S < deadline ? now_s() + HELLO_WAIT_S : deadline;
    if (set_nonblocking(fd) != 0 || io_all(fd, b, sizeof b, 0, d) != 0 ||
        memcmp(b, RDZV_MAGIC, 4) != 0) {
        close(fd);
        return -1;
    }
    if (getnameinfo((struct sockaddr *)&ss, len, h->from, sizeof h->from, NULL, 0,
                    NI_NUMERICHOST) != 0)
        snprintf(h->from, sizeof h->from, "an unknown address");
    else if (strncmp(h->from, "::ffff:", 7) == 0 && strchr(h->from, '.'))
        memmove(h->from, h->from + 7, strlen(h->from + 7) + 1); /* IPv4 on the IPv6 socket */
    h->version = get_u32(b + 4), h->rank = get_u32(b + 8), h->world = get_u32(b + 12);
    return fd;
}

/* Rank 0's reply; id NULL: a refusal (no id). Best effort: a peer that hung up is told nothing. */
static int send_reply(int fd, uint32_t status, int world, const vae_group_id *id, double deadline) {
    unsigned char r[REPLY_BYTES] = {0};
    memcpy(r, RDZV_MAGIC, 4);
    put_u32(r + 4, status), put_u32(r + 8, (uint32_t)world);
    if (id) memcpy(r + 12, id->bytes, VAE_GROUP_ID_BYTES);
    return io_all(fd, r, sizeof r, 1, deadline);
}

/* Checks a hello against the group: RDZV_OK, or the refusal, recorded as the error. */
static int check_hello(const hello *h, int port, int world, const int *peer) {
    if (h->version != RDZV_VERSION)
        return cli_set_error(RDZV_BAD_VERSION,
                             "a process from %s speaks rendezvous version %u, rank 0 on port %d "
                             "version %u (a different vae build?)",
                             h->from, h->version, port, RDZV_VERSION);
    if (h->world != world)
        return cli_set_error(RDZV_WORLD_MISMATCH,
                             "rank %lld (from %s) was started for a group of %lld processes, "
                             "rank 0 (port %d) for %d",
                             h->rank, h->from, h->world, port, world);
    if (h->rank < 1 || h->rank >= world)
        return cli_set_error(
            RDZV_BAD_RANK,
            "a process from %s says it is rank %lld, not one of 1..%d (rank 0 on port %d)", h->from,
            h->rank, world - 1, port);
    if (peer[h->rank] >= 0)
        return cli_set_error(
            RDZV_DUPLICATE,
            "two processes say they are rank %lld (the second from %s; rank 0 on port %d)", h->rank,
            h->from, port);
    return RDZV_OK;
}

/* Records that rank 0 timed out, naming the ranks it still waits for. */
static int waited_too_long(int port, int world, const int *peer, int joined, double timeout_s) {
    char missing[160] = "";
    size_t n = 0;
    for (int r = 1, shown = 0; r < world && n < sizeof missing; r++)
        if (peer[r] < 0 && shown++ < 8)
            n +=
                (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", shown > 1 ? ", " : "", r);
    return cli_set_error(
        CLI_EFAIL,
        "rank 0 (port %d) timed out after %g s waiting for %d of the %d ranks "
        "(missing: rank %s%s): were they all started, with MASTER_ADDR naming this host?",
        port, timeout_s, world - 1 - joined, world, missing, world - 1 - joined > 8 ? ", ..." : "");
}

/* Rank 0: waits for every other rank's hello (peer[rank] = its socket). CLI_OK or an exit code. */
static int gather_ranks(int lfd, int port, int world, double timeout_s, double deadline,
                        int *peer) {
    for (int joined = 0; joined < world - 1;) {
        int w = wait_fd(lfd, POLLIN, deadline);
        if (w == 0) return waited_too_long(port, world, peer, joined, timeout_s);
        if (w < 0) return cli_set_error(CLI_EFAIL, "rank 0 (port %d): %s", port, strerror(errno));
        hello h;
        int fd = accept_hello(lfd, deadline, &h);
        if (fd < 0) continue;
        int status = check_hello(&h, port, world, peer);
        if (status != RDZV_OK) {
            send_reply(fd, (uint32_t)status, world, NULL, now_s() + 1);
            close(fd);
            return status == RDZV_BAD_VERSION ? CLI_EFAIL : CLI_EUSAGE;
        }
        peer[h.rank] = fd;
        joined++;
    }
    return CLI_OK;
}

/* Rank 0: the id to every rank once all have joined (not before: a rank that got it would wait in
 * its session creation for a group that may never form), or on failure a refusal to each. */
static int serve(int port, int world, double timeout_s, const vae_group_id *id) {
    int *peer = malloc((size_t)world * sizeof *peer);
    if (!peer) return cli_set_error(CLI_ERESOURCE, "out of memory");
    for (int r = 0; r < world; r++)
        peer[r] = -1;
    const double deadline = now_s() + timeout_s;
    int rc = CLI_EFAIL, lfd = listen_on(port, world < 128 ? world : 128);
    if (lfd >= 0) rc = gather_ranks(lfd, port, world, timeout_s, deadline, peer);
    for (int r = 1; r < world; r++) {
        if (peer[r] < 0) continue;
        int sent = send_reply(peer[r], rc == CLI_OK ? RDZV_OK : RDZV_ABORT, world,
                              rc == CLI_OK ? id : NULL, now_s() + 5);
        if (sent != 0 && rc == CLI_OK)
            rc = cli_set_error(CLI_EFAIL,
                               "rank %d hung up before rank 0 (port %d) could send it the group id",
                               r, port);
        close(peer[r]);
    }
    if (lfd >= 0) close(lfd);
    free(peer);
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
    default:
        return cli_set_error(CLI_EFAIL, "rank 0 at %s gave up on the group (its error says why)",
                             hp);
    }
}

/* Ranks 1..world-1: hello to rank 0, then its reply with the id. */
static int join(const char *addr, int port, int rank, int world, double timeout_s,
                vae_group_id *id) {
    const double deadline = now_s() + timeout_s;
    int fd = connect_rank0(addr, port, timeout_s, deadline);
    if (fd < 0) return CLI_EFAIL;
    unsigned char h[HELLO_BYTES], r[REPLY_BYTES];
    memcpy(h, RDZV_MAGIC, 4);
    put_u32(h + 4, RDZV_VERSION), put_u32(h + 8, (uint32_t)rank), put_u32(h + 12, (uint32_t)world);
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

int cli_group_rendezvous(const char *addr, int port, int rank, int world, double timeout_s,
                         vae_group_id *id) {
    if (port < 1 || port > 65535 || world < 1 || rank < 0 || rank >= world || !(timeout_s > 0))
        return cli_set_error(CLI_EUSAGE,
                             "rendezvous: rank %d of %d on port %d, timeout %g s: out of range",
                             rank, world, port, timeout_s);
    if (world == 1) return CLI_OK;
    return rank == 0 ? serve(port, world, timeout_s, id)
                     : join(addr, port, rank, world, timeout_s, id);
}
