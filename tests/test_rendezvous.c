/* test_rendezvous.c -- the CLI's --dist rendezvous (cli/rendezvous.c) over loopback TCP: ranks as
 * forked processes, rank 0 handing its group id to the others; a world size that differs, a rank
 * given twice, a missing rank and a missing rank 0 fail with clear errors within their timeouts
 * (no hang); the launcher's environment read into session options (cli/group.c). The library
 * calls that group.c makes are stubbed here, so that this runs without a GPU, NCCL or the
 * library's group.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- stubs of what group.c and rendezvous.c use from main.c and the library ---- */
int cli_quiet, cli_verbose, cli_rank;
static char last_error[1024];

int cli_set_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}
int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return CLI_EUSAGE;
}
int cli_report(int rc, const char *what) {
    snprintf(last_error, sizeof last_error, "%s: library error %d", what, rc);
    return CLI_EFAIL;
}
int cli_report_exit(int code, const char *what) {
    return code;
}
int vae_device_count(vae_device device) {
    return 0;
}
int vae_group_id_create(vae_device device, vae_group_id *id) {
    for (int i = 0; i < VAE_GROUP_ID_BYTES; i++)
        id->bytes[i] = (unsigned char)rand();
    return 0;
}

/* ---- ranks as child processes ---- */
static int n_fail;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            n_fail++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

typedef struct rank_spec {
    const char *addr;
    int port, rank, world, delay_ms;
    double timeout_s;
    const char *token;      /* the group's token (NULL: none) */
    vae_group_id id;        /* rank 0's */
    const char *const *env; /* "NAME=value" ... NULL: cli_group_from_env instead */
} rank_spec;

/* What a child reports through its pipe. */
typedef struct result {
    int rc, rank, world, device_index;
    int leaked; /* descriptors open after the call that were not before */
    double seconds;
    vae_group_id id;
    char error[1024];
} result;

typedef struct child {
    pid_t pid;
    int fd;
} child;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Open file descriptors (Linux: /proc/self/fd); 0 where that cannot be told. */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* "NAME=value" into the environment; "NAME=" takes NAME out of it. */
static void set_var(const char *assignment) {
    char name[64];
    const char *eq = strchr(assignment, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - assignment), assignment);
    if (eq[1])
        setenv(name, eq + 1, 1);
    else
        unsetenv(name);
}

/* In the child: the rendezvous itself, or the environment variables then cli_group_from_env. */
static void run_rank(const rank_spec *s, result *r) {
    alarm(10); /* a hang kills the child: the parent sees no result and fails */
    nanosleep(&(struct timespec){0, s->delay_ms * 1000000L}, NULL);
    const int fds = open_fds();
    double t0 = now_s();
    r->id = s->id;
    if (!s->env) {
        const cli_rdzv o = {s->addr, s->port, s->rank, s->world, s->timeout_s, s->token, 1};
        r->rc = cli_group_rendezvous(&o, &r->id);
    } else {
        for (const char *const *e = s->env; *e; e++)
            set_var(*e);
        srand((unsigned)getpid());
        vae_session_options so;
        memset(&so, 0, sizeof so);
        so.device = VAE_DEVICE_CUDA;
        r->rc = cli_group_from_env("test", &so);
        r->rank = so.rank, r->world = so.world, r->device_index = so.device_index;
        r->id = so.group_id;
    }
    r->seconds = now_s() - t0;
    r->leaked = open_fds() - fds;
    snprintf(r->error, sizeof r->error, "%s", last_error);
}

static child spawn(const rank_spec *s) {
    int p[2];
    child c = {-1, -1};
    if (pipe(p) != 0) return c;
    fflush(stdout);
    c.pid = fork();
    if (c.pid == 0) {
        close(p[0]);
        result r;
        memset(&r, 0, sizeof r);
        run_rank(s, &r);
        _exit(write(p[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(p[1]);
    c.fd = p[0];
    return c;
}

/* Reads the child's result and reaps it: 0, or -1 when it died without one (a hang: SIGALRM). */
static int collect(child c, result *r) {
    memset(r, 0, sizeof *r);
    size_t got = 0;
    ssize_t k;
    while (c.fd >= 0 && got < sizeof *r && (k = read(c.fd, (char *)r + got, sizeof *r - got)) > 0)
        got += (size_t)k;
    if (c.fd >= 0) close(c.fd);
    int status = 0;
    if (c.pid > 0) waitpid(c.pid, &status, 0);
    int ok = c.pid > 0 && got == sizeof *r && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    CHECK(!ok || r->leaked == 0, "a rank left %d descriptors open", r->leaked);
    if (!ok) {
        r->rc = -1;
        snprintf(r->error, sizeof r->error, "the child died (%s %d)",
                 WIFSIGNALED(status) ? "signal" : "status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    return ok ? 0 : -1;
}

/* A TCP port that nothing listens on now (bound to port 0, then let go). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static rank_spec spec(int port, int rank, int world, double timeout_s) {
    rank_spec s;
    memset(&s, 0, sizeof s);
    s.addr = "127.0.0.1", s.port = port, s.rank = rank, s.world = world, s.timeout_s = timeout_s;
    return s;
}

/* Runs n ranks at once and collects them all. */
static void run_group(const rank_spec *specs, int n, result *res) {
    child c[8];
    for (int i = 0; i < n; i++)
        c[i] = spawn(&specs[i]);
    for (int i = 0; i < n; i++)
        collect(c[i], &res[i]);
}

/* ---- the cases ---- */

/* Three ranks; the others start before rank 0 and retry until it listens. */
static void test_three_ranks(void) {
    const int port = free_port();
    rank_spec s[3] = {spec(port, 0, 3, 5), spec(port, 1, 3, 5), spec(port, 2, 3, 5)};
    for (int i = 0; i < VAE_GROUP_ID_BYTES; i++)
        s[0].id.bytes[i] = (unsigned char)rand();
    s[0].delay_ms = 300;
    result r[3];
    run_group(s, 3, r);
    for (int i = 0; i < 3; i++) {
        CHECK(r[i].rc == CLI_OK, "three ranks: rank %d: rc %d: %s", i, r[i].rc, r[i].error);
        CHECK(memcmp(r[i].id.bytes, s[0].id.bytes, VAE_GROUP_ID_BYTES) == 0,
              "three ranks: rank %d got other id bytes", i);
    }
    printf("three ranks: rank 1 waited %.2f s for rank 0\n", r[1].seconds);
}

/* A rank of the group (it carries the token) started for another world size: both sides fail at
 * once, each saying so. */
static void test_world_mismatch(void) {
    const int port = free_port();
    rank_spec s[2] = {spec(port, 0, 2, 3), spec(port, 1, 3, 3)};
    s[0].token = s[1].token = "mismatch";
    result r[2];
    run_group(s, 2, r);
    CHECK(r[0].rc == CLI_EUSAGE && strstr(r[0].error, "group of 3"), "mismatch: rank 0: %d %s",
          r[0].rc, r[0].error);
    CHECK(r[1].rc == CLI_EUSAGE && strstr(r[1].error, "group of 2"), "mismatch: rank 1: %d %s",
          r[1].rc, r[1].error);
    CHECK(r[0].seconds < 2 && r[1].seconds < 2, "mismatch: took %.2f / %.2f s", r[0].seconds,
          r[1].seconds);
    printf("world mismatch: rank 0: %s\n                rank 1: %s\n", r[0].error, r[1].error);
}

/* Nobody listens: a rank gives up after its timeout, naming where it tried. */
static void test_no_rank0(void) {
    const int port = free_port();
    rank_spec s = spec(port, 1, 2, 1);
    result r;
    run_group(&s, 1, &r);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    CHECK(r.rc != CLI_OK && strstr(r.error, where), "no rank 0: %d %s", r.rc, r.error);
    CHECK(r.seconds > 0.8 && r.seconds < 3, "no rank 0: gave up after %.2f s", r.seconds);
    printf("no rank 0: %s\n", r.error);
}

/* Rank 2 never comes: rank 0 times out naming it, and tells rank 1, which fails too. */
static void test_missing_rank(void) {
    const int port = free_port();
    rank_spec s[2] = {spec(port, 0, 3, 1), spec(port, 1, 3, 4)};
    result r[2];
    run_group(s, 2, r);
    CHECK(r[0].rc != CLI_OK && strstr(r[0].error, "timed out") && strstr(r[0].error, "rank 2"),
          "missing rank: rank 0: %d %s", r[0].rc, r[0].error);
    CHECK(r[1].rc != CLI_OK && strstr(r[1].error, "gave up") && r[1].seconds < 3,
          "missing rank: rank 1: %d after %.2f s: %s", r[1].rc, r[1].seconds, r[1].error);
    printf("missing rank: rank 0: %s\n              rank 1: %s\n", r[0].error, r[1].error);
}

/* Two processes of the group as rank 1: every one of them fails, none waits for its timeout. */
static void test_duplicate_rank(void) {
    const int port = free_port();
    rank_spec s[3] = {spec(port, 0, 3, 4), spec(port, 1, 3, 4), spec(port, 1, 3, 4)};
    s[0].token = s[1].token = s[2].token = "duplicate";
    result r[3];
    run_group(s, 3, r);
    CHECK(r[0].rc == CLI_EUSAGE && strstr(r[0].error, "rank 1"), "duplicate: rank 0: %d %s",
          r[0].rc, r[0].error);
    for (int i = 1; i < 3; i++)
        CHECK(r[i].rc != CLI_OK && r[i].seconds < 2.5, "duplicate: client %d: %d after %.2f s: %s",
              i, r[i].rc, r[i].seconds, r[i].error);
    printf("duplicate rank: rank 0: %s\n", r[0].error);
}

/* ---- strangers: connections to rank 0 that are no ranks of its group ---- */

/* A connection to the loopback's port (::1 with v6), retried for wait_s while rank 0 starts: the
 * socket, or -1. */
static int dial(int port, int v6, double wait_s) {
    const double until = now_s() + wait_s;
    do {
        int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a4;
        struct sockaddr_in6 a6;
        memset(&a4, 0, sizeof a4), memset(&a6, 0, sizeof a6);
        a4.sin_family = AF_INET, a4.sin_port = htons((uint16_t)port);
        a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a6.sin6_family = AF_INET6, a6.sin6_port = htons((uint16_t)port),
        a6.sin6_addr = in6addr_loopback;
        if (fd >= 0 && (v6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6)
                           : connect(fd, (struct sockaddr *)&a4, sizeof a4)) == 0)
            return fd;
        if (fd >= 0) close(fd);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    } while (now_s() < until);
    return -1;
}

/* What a rank says: the head (magic, version, rank, world) and, from version 2, the token,
 * zero-padded to 64 bytes. The length. */
static size_t hello(unsigned char *b, unsigned version, unsigned rank, unsigned world,
                    const char *token) {
    const unsigned v[3] = {version, rank, world};
    memcpy(b, "VAEG", 4);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            b[4 + 4 * i + k] = (unsigned char)(v[i] >> (24 - 8 * k));
    if (version < 2) return 16;
    memset(b + 16, 0, 64);
    if (token) memcpy(b + 16, token, strlen(token));
    return 80;
}

/* What a stranger got from rank 0, read after the group is done: 1 when it holds the id. */
static int got_id(int fd, const vae_group_id *id) {
    unsigned char b[4096];
    size_t n = 0;
    ssize_t k;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    while (n < sizeof b && (k = recv(fd, b + n, sizeof b - n, 0)) > 0)
        n += (size_t)k;
    for (size_t i = 0; i + VAE_GROUP_ID_BYTES <= n; i++)
        if (memcmp(b + i, id->bytes, VAE_GROUP_ID_BYTES) == 0) return 1;
    return n >= 8 && b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] == 0; /* status RDZV_OK */
}

/* A real group of 2 (with the token, or none) while strangers connect to rank 0 before rank 1
 * comes: 8 idle sockets, garbage, a version 1 hello, a hello that stops after its head, one for a
 * world of 3, and with a token one as rank 1 without it and one with another. The group forms
 * within 1 s of each rank's start, and no stranger gets the id. */
static void test_strangers(const char *token) {
    const int port = free_port();
    rank_spec s[2] = {spec(port, 0, 2, 5), spec(port, 1, 2, 5)};
    s[0].token = s[1].token = token;
    for (int i = 0; i < VAE_GROUP_ID_BYTES; i++)
        s[0].id.bytes[i] = (unsigned char)rand();
    child c0 = spawn(&s[0]);
    int fd[16], n = 0;
    for (int i = 0; i < 8; i++) /* idle: they say nothing */
        fd[n++] = dial(port, 0, 2);
    unsigned char b[128];
    for (int i = 0; i < 64; i++)
        b[i] = (unsigned char)(rand() | 1);
    const size_t len[6] = {64, 16, 16, 80, 80, 80};
    for (int k = 0; k < (token ? 6 : 4); k++) {
        unsigned char h[128];
        if (k == 0) memcpy(h, b, 64);           /* garbage */
        if (k == 1) hello(h, 1, 1, 2, NULL);    /* version 1, which carries no token */
        if (k == 2) hello(h, 2, 1, 2, token);   /* its head alone, then nothing */
        if (k == 3) hello(h, 2, 1, 3, NULL);    /* a world of 3, without the token */
        if (k == 4) hello(h, 2, 1, 2, NULL);    /* the id asked for as rank 1, without the token */
        if (k == 5) hello(h, 2, 1, 2, "guess"); /* the same, with another token */
        fd[n] = dial(port, 0, 2);
        CHECK(fd[n] >= 0 && send(fd[n], h, len[k], 0) == (ssize_t)len[k],
              "strangers: stranger %d could not connect or send", k);
        n++;
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL); /* rank 0 has them all before rank 1 */
    child c1 = spawn(&s[1]);
    result r[2];
    collect(c0, &r[0]);
    collect(c1, &r[1]);
    for (int i = 0; i < 2; i++)
        CHECK(r[i].rc == CLI_OK && r[i].seconds < 1.0 &&
                  memcmp(r[i].id.bytes, s[0].id.bytes, VAE_GROUP_ID_BYTES) == 0,
              "strangers (%s): rank %d: rc %d after %.2f s: %s", token ? "token" : "no token", i,
              r[i].rc, r[i].seconds, r[i].error);
    for (int i = 0; i < n; i++) {
        CHECK(fd[i] < 0 || !got_id(fd[i], &s[0].id), "strangers: connection %d got the id", i);
        if (fd[i] >= 0) close(fd[i]);
    }
    printf("strangers (%s): the group formed in %.2f s (rank 0), %.2f s (rank 1)\n",
           token ? "token" : "no token", r[0].seconds, r[1].seconds);
}

/* Rank 1 with another token: it is refused at once, saying so; rank 0 goes on waiting for a
 * rank 1 with the token, then times out naming why it dropped the one that came. */
static void test_wrong_token(void) {
    const int port = free_port();
    rank_spec s[2] = {spec(port, 0, 2, 1), spec(port, 1, 2, 3)};
    s[0].token = "ours", s[1].token = "theirs";
    result r[2];
    run_group(s, 2, r);
    CHECK(r[1].rc == CLI_EUSAGE && strstr(r[1].error, "token") && r[1].seconds < 0.8,
          "wrong token: rank 1: %d after %.2f s: %s", r[1].rc, r[1].seconds, r[1].error);
    CHECK(r[0].rc != CLI_OK && strstr(r[0].error, "timed out") && strstr(r[0].error, "token"),
          "wrong token: rank 0: %d %s", r[0].rc, r[0].error);
    printf("wrong token: rank 1: %s\n             rank 0: %s\n", r[1].error, r[0].error);
}

/* MASTER_ADDR 127.0.0.1: rank 0 listens there alone, not on every interface (::1 is refused,
 * where the host has it). */
static void test_binds_named_address(void) {
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6, a6.sin6_addr = in6addr_loopback;
    const int has_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&a6, sizeof a6) == 0;
    if (probe >= 0) close(probe);
    if (!has_v6) {
        printf("binds MASTER_ADDR: skipped (no IPv6 loopback here)\n");
        return;
    }
    const int port = free_port();
    rank_spec s[2] = {spec(port, 0, 2, 3), spec(port, 1, 2, 3)};
    child c0 = spawn(&s[0]);
    const int v4 = dial(port, 0, 2), v6 = v4 >= 0 ? dial(port, 1, 0) : -1;
    CHECK(v4 >= 0 && v6 < 0, "binds MASTER_ADDR: 127.0.0.1 %s, ::1 %s",
          v4 >= 0 ? "took" : "refused", v6 >= 0 ? "took a connection too" : "refused");
    child c1 = spawn(&s[1]);
    result r[2];
    collect(c0, &r[0]);
    collect(c1, &r[1]);
    CHECK(r[0].rc == CLI_OK && r[1].rc == CLI_OK, "binds MASTER_ADDR: %s / %s", r[0].error,
          r[1].error);
    if (v4 >= 0) close(v4);
    if (v6 >= 0) close(v6);
    printf("binds MASTER_ADDR: 127.0.0.1 alone (::1 refused)\n");
}

/* torchrun's variables through cli_group_from_env, rank 0 making the id (the stub's); "localhost"
 * may resolve to ::1 first: rank 0 listens on IPv6 and IPv4. */
static void test_from_env(void) {
    static char port_var[32],
        clean[][32] = {"OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "VAE_RDZV_PORT=", "LOCAL_WORLD_SIZE="};
    const int port = free_port();
    snprintf(port_var, sizeof port_var, "MASTER_PORT=%d", port - 1); /* rendezvous: + 1 */
    const char *env0[] = {"RANK=0",       "WORLD_SIZE=2",
                          "LOCAL_RANK=0", "MASTER_ADDR=localhost",
                          port_var,       clean[0],
                          clean[1],       clean[2],
                          clean[3],       NULL};
    const char *env1[] = {"RANK=1",       "WORLD_SIZE=2",
                          "LOCAL_RANK=1", "MASTER_ADDR=localhost",
                          port_var,       clean[0],
                          clean[1],       clean[2],
                          clean[3],       NULL};
    rank_spec s[2] = {spec(port, 0, 2, 0), spec(port, 1, 2, 0)};
    s[0].env = env0, s[1].env = env1;
    result r[2];
    run_group(s, 2, r);
    for (int i = 0; i < 2; i++)
        CHECK(r[i].rc == CLI_OK && r[i].rank == i && r[i].world == 2 && r[i].device_index == i,
              "from env: rank %d: rc %d, rank %d of %d on device %d: %s", i, r[i].rc, r[i].rank,
              r[i].world, r[i].device_index, r[i].error);
    CHECK(memcmp(r[0].id.bytes, r[1].id.bytes, VAE_GROUP_ID_BYTES) == 0,
          "from env: the ranks hold other ids");
}

/* Bad environments: usage errors naming the variable, before any socket. */
static void test_env_errors(void) {
    static const struct {
        const char *env[6];
        int cuda;
        const char *says;
    } cases[] = {
        {{"RANK=abc", "WORLD_SIZE=2", NULL}, 1, "RANK=abc"},
        {{"RANK=2", "WORLD_SIZE=2", NULL}, 1, "RANK=2"},
        {{"RANK=0", "WORLD_SIZE=x", NULL}, 1, "WORLD_SIZE=x"},
        {{"RANK=0", NULL}, 1, "WORLD_SIZE"},
        {{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL}, 0, "--device cuda"},
        {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_PORT=29500", NULL}, 1, "MASTER_ADDR"},
        {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", NULL}, 1, "MASTER_PORT"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=2", NULL}, 1, "LOCAL_RANK"},
        {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=q", NULL}, 1, "OMPI_COMM_WORLD_SIZE=q"},
        {{NULL}, 1, "no launcher environment"},
    };
    static const char *const vars[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "PMI_RANK",
                                       "PMI_SIZE",
                                       "VAE_RDZV_PORT",
                                       "VAE_RDZV_TOKEN",
                                       "TORCHELASTIC_RUN_ID",
                                       NULL};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int v = 0; vars[v]; v++)
            unsetenv(vars[v]);
        for (int e = 0; cases[c].env[e]; e++)
            set_var(cases[c].env[e]);
        vae_session_options so;
        memset(&so, 0, sizeof so);
        so.device = cases[c].cuda ? VAE_DEVICE_CUDA : VAE_DEVICE_CPU;
        last_error[0] = 0;
        int rc = cli_group_from_env("test", &so);
        CHECK(rc == CLI_EUSAGE && strstr(last_error, cases[c].says),
              "env case %zu: rc %d, '%s' does not name %s", c, rc, last_error, cases[c].says);
    }
    /* a world of 1 is a plain run: nothing changes, on any device */
    for (int v = 0; vars[v]; v++)
        unsetenv(vars[v]);
    set_var("RANK=0"), set_var("WORLD_SIZE=1");
    vae_session_options so;
    memset(&so, 0, sizeof so);
    CHECK(cli_group_from_env("test", &so) == CLI_OK && so.world == 0 && so.rank == 0, "world 1: %s",
          last_error);
    /* --devices with --dist */
    so.n_devices = 2;
    CHECK(cli_group_from_env("test", &so) == CLI_EUSAGE && strstr(last_error, "--devices"),
          "--devices: %s", last_error);
    unsetenv("RANK"), unsetenv("WORLD_SIZE");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    const double t0 = now_s();
    test_env_errors();
    test_three_ranks();
    test_world_mismatch();
    test_no_rank0();
    test_missing_rank();
    test_duplicate_rank();
    test_strangers("s3cret");
    test_strangers(NULL);
    test_wrong_token();
    test_binds_named_address();
    test_from_env();
    printf("%s: %d failure(s) in %.2f s\n", n_fail ? "FAIL" : "PASS", n_fail, now_s() - t0);
    return n_fail ? 1 : 0;
}
