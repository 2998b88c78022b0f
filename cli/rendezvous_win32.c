/* rendezvous_win32.c -- cli_group_rendezvous (cli.h) of a Windows build: a group of one process
 * needs no rendezvous; larger groups of processes (--dist, which joins ranks over TCP and runs
 * them through NCCL, a Linux library) are refused (unsupported, exit code 5) with an error that says so. Groups of
 * devices in one process (--devices) work as on Linux. */
#ifdef _WIN32
#include "cli.h"

int cli_group_rendezvous(const cli_rdzv *o, vae_group_id *id) {
    (void)id;
    if (o->world == 1) return CLI_OK;
    return cli_set_error(CLI_EUNSUPPORTED,
                         "rendezvous: rank %d of %d: groups of processes (--dist) are not "
                         "supported on Windows; run one process (--devices for a device group)",
                         o->rank, o->world);
}
#endif
