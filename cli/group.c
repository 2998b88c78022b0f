/* group.c -- `--dist`: this process as one rank of a group of processes that torchrun or mpirun
 * started, one GPU each. The launcher's environment is read here and nowhere else. Every rank's
 * session needs the same group id before it can be created, and the launchers give a plain
 * program no channel to pass it on, so rank 0 makes the id and hands it to the others over a
 * small TCP rendezvous at MASTER_ADDR (rendezvous.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

const char cli_dist_help[] =
    "multi-process:\n"
    "  --dist                  join the group of processes that torchrun or mpirun started\n"
    "                          (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): one GPU\n"
    "                          per process (LOCAL_RANK's), each computing its share of every\n"
    "                          call; rank 0 writes the output and prints. Needs --device cuda.\n"
    "                          Rank 0 hands the group id to the others at MASTER_ADDR, port\n"
    "                          MASTER_PORT + 1 (VAE_RDZV_PORT sets another; VAE_RDZV_TIMEOUT:\n"
    "                          seconds to wait for every rank, default 300), only to ranks\n"
    "                          that carry the group's token: VAE_RDZV_TOKEN, else torchrun's\n"
    "                          TORCHELASTIC_RUN_ID (across hosts, give every rank the same\n"
    "                          secret VAE_RDZV_TOKEN). e.g. torchrun --no-python\n"
    "                          --nproc-per-node 4 vae decode --dist --device cuda ...\n";

/* ---- the launcher's environment ---- */

/* Where each launcher puts a process's rank, the group's size, its rank on its node and the
 * number of ranks on its node; the first launcher whose rank or size is set is the one. */
static const struct launcher {
    const char *rank, *world, *local_rank, *local_world;
} launchers[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}, /* torchrun */
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},                                 /* Open MPI */
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, /* MPICH (Hydra) */
};

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL; /* set but empty: as good as unset */
}

/* NAME's value as a whole number in lo..hi into *out: CLI_OK, or a usage error naming both. */
static int env_int(const char *cmd, const char *name, long lo, long hi, int *out) {
    const char *s = env(name);
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return cli_usage_error(cmd, "--dist: %s=%s: expected a whole number in %ld..%ld", name,
                               s ? s : "", lo, hi);
    *out = (int)v;
    return CLI_OK;
}

/* Rank, size and local rank from the launcher's variables, each checked. */
static int read_ranks(const char *cmd, int *rank, int *world, int *local_rank, int *local_world) {
    const struct launcher *l = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !l; i++)
        if (env(launchers[i].rank) || env(launchers[i].world)) l = &launchers[i];
    if (!l)
        return cli_usage_error(
            cmd, "--dist: no launcher environment: start with torchrun (RANK, WORLD_SIZE), "
                 "Open MPI's mpirun (OMPI_COMM_WORLD_RANK, ...) or MPICH's (PMI_RANK, PMI_SIZE)");
    if (!env(l->rank) || !env(l->world))
        return cli_usage_error(cmd, "--dist: %s is set but %s is not",
                               env(l->rank) ? l->rank : l->world,
                               env(l->rank) ? l->world : l->rank);
    int rc = env_int(cmd, l->world, 1, 65536, world);
    if (rc == CLI_OK) rc = env_int(cmd, l->rank, 0, *world - 1, rank);
    if (rc != CLI_OK || *world == 1) return rc;
    *local_world = 0; /* unknown */
    if (env(l->local_world) && (rc = env_int(cmd, l->local_world, 1, *world, local_world)))
        return rc;
    if (env(l->local_rank)) return env_int(cmd, l->local_rank, 0, *world - 1, local_rank);
    if (*local_world == *world) { /* one node: the local rank is the rank */
        *local_rank = *rank;
        return CLI_OK;
    }
    return cli_usage_error(cmd,
                           "--dist: %s is not set: it says which GPU of this host this rank drives",
                           l->local_rank);
}

/* Rank 0's address and the rendezvous port (MASTER_PORT is torchrun's own store's). */
static int read_address(const char *cmd, int one_node, const char **addr, int *port) {
    *addr = env("MASTER_ADDR");
    if (!*addr && !one_node)
        return cli_usage_error(cmd, "--dist: MASTER_ADDR is not set: the address of rank 0's host, "
                                    "which the other ranks connect to");
    if (!*addr) *addr = "127.0.0.1"; /* every rank is on this host */
    if (env("VAE_RDZV_PORT")) return env_int(cmd, "VAE_RDZV_PORT", 1, 65535, port);
    if (!env("MASTER_PORT"))
        return cli_usage_error(cmd, "--dist: MASTER_PORT is not set (the rendezvous listens on "
                                    "MASTER_PORT + 1, or on VAE_RDZV_PORT)");
    int rc = env_int(cmd, "MASTER_PORT", 1, 65534, port);
    *port += 1;
    return rc;
}

/* The group's token: VAE_RDZV_TOKEN, else the launcher's id of this run (torchrun's; random
 * under --standalone, --rdzv-id otherwise), the same on every rank of it; NULL: none. */
static const char *read_token(void) {
    return env("VAE_RDZV_TOKEN") ? env("VAE_RDZV_TOKEN") : env("TORCHELASTIC_RUN_ID");
}

/* The GPU of this rank: its local rank, or the one GPU the launcher left visible to it
 * (CUDA_VISIBLE_DEVICES set per process). */
static int pick_device(const char *cmd, int local_rank, int *device_index) {
    const int n = vae_device_count(VAE_DEVICE_CUDA);
    *device_index = n == 1 ? 0 : local_rank;
    if (n > 1 && local_rank >= n)
        return cli_usage_error(
            cmd,
            "--dist: local rank %d, but this host shows %d GPUs: start at most one process per GPU",
            local_rank, n);
    return CLI_OK;
}

int cli_group_from_env(const char *cmd, vae_session_options *so) {
    if (so->n_devices > 0)
        return cli_usage_error(cmd, "--dist and --devices do not go together: under --dist each "
                                    "process drives one GPU; start one process per GPU instead");
    int rank = 0, world = 1, local_rank = 0, local_world = 0, port = 0, rc;
    if ((rc = read_ranks(cmd, &rank, &world, &local_rank, &local_world))) return rc;
    if (world == 1) return CLI_OK; /* a group of one: a plain run */
    if (so->device != VAE_DEVICE_CUDA)
        return cli_usage_error(
            cmd, "--dist needs --device cuda: CPU ranks are threads of one process, not processes");
    const char *addr = NULL;
    if ((rc = read_address(cmd, local_world == world, &addr, &port))) return rc;
    double timeout_s = 300;
    if (env("VAE_RDZV_TIMEOUT")) {
        char *end;
        timeout_s = strtod(env("VAE_RDZV_TIMEOUT"), &end);
        if (*end || !(timeout_s > 0 && timeout_s <= 86400))
            return cli_usage_error(cmd,
                                   "--dist: VAE_RDZV_TIMEOUT=%s: expected seconds in (0, 86400]",
                                   env("VAE_RDZV_TIMEOUT"));
    }
    if ((rc = pick_device(cmd, local_rank, &so->device_index))) return rc;
    so->rank = rank, so->world = world;
    cli_rank = rank;
    if (rank > 0) cli_quiet = 1; /* rank 0 alone prints progress and results */
    if (rank == 0 && (rc = vae_group_id_create(so->device, &so->group_id)))
        return cli_report(rc, "--dist: group id");
    if (cli_verbose)
        fprintf(stderr, "vae: --dist: rank %d of %d on GPU %d: the group id %s %s port %d (%s)\n",
                rank, world, so->device_index, rank ? "from" : "to the others at", addr, port,
                read_token() ? "with a token" : "no token");
    const cli_rdzv rv = {addr, port, rank, world, timeout_s, read_token(), local_world == world};
    if ((rc = cli_group_rendezvous(&rv, &so->group_id))) return cli_report_exit(rc, "--dist");
    return CLI_OK;
}
