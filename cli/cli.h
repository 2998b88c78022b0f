/* cli.h -- shared pieces of the `vae` command-line tool (uses the public API only). */
#ifndef VAE_CLI_H
#define VAE_CLI_H

#include <stdio.h>
#include "vae.h"

/* Exit codes (documented in README.md and `vae --help`). */
enum {
    CLI_OK = 0,
    CLI_EFAIL = 1,        /* other failure */
    CLI_EUSAGE = 2,       /* bad command line */
    CLI_EIO = 3,          /* a file could not be read or written */
    CLI_EINPUT = 4,       /* an input file is invalid: format, missing/unexpected keys, shape, NaN */
    CLI_EUNSUPPORTED = 5, /* valid but unsupported (model, dtype, device) */
    CLI_ERESOURCE = 6,    /* out of memory, device error */
    CLI_EINTERRUPTED = 130
};

/* ---- report.c: what the commands say on stderr ---- */
int cli_exit_code(int vae_rc);
/* Records a CLI-side failure (PNG, media, arguments) for cli_report; returns code. */
int cli_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "vae: <what>: <detail>" to stderr and returns the exit code for rc; a library error's
 * detail names the CLI's flags (cli_flags_from_api). */
int cli_report(int rc, const char *what);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "vae: <what>: <the error cli_set_error recorded>" and returns code (a CLI exit code). */
int cli_report_exit(int code, const char *what);

/* cli_rank: this process's rank under --dist (0 otherwise); the ranks above 0 print their
 * messages as "rank N: vae: ..." and only their errors. */
extern int cli_quiet, cli_verbose, cli_rank;
/* The library's and the media library's log callback: "vae: <level>: <message>" on stderr. */
void cli_log_to_stderr(int level, const char *msg, void *user);
/* A library message with the options it names as the API spells them ("max_memory",
 * "tile_mode=blend", "blend_tile", "fit=crop") turned into the CLI's flags ("--max-memory",
 * "--tile-mode blend", "--tile-size", "--fit crop"), in out (size bytes); msg itself where out is
 * too small. */
const char *cli_flags_from_api(const char *msg, char *out, size_t size);

/* ---- args.c: option parsing and input loading ---- */

/* "file.safetensors:key" -> path (malloc'd) and key (NULL when absent). A colon followed by a
 * path separator is not a key separator. */
void cli_split_key(const char *arg, char **path, char **key);
int cli_has_ext(const char *path, const char *ext);

/* Loads an input tensor (any tensor file; PNG for images) as float32. For PNG: [1,3,H,W] mapped
 * to [lo,hi]. */
int cli_load_input(const char *arg, float lo, float hi, vae_tensor *out);

/* Opens an existing regular file for reading into *out: 0, -1 when it cannot be opened (errno
 * says why) or -2 when it is not a regular file (a folder, FIFO or device: never waits on one). */
int cli_open_regular(const char *path, FILE **out);

/* PNG I/O (8-bit RGB). */
int cli_png_read(const char *path, float lo, float hi, vae_tensor *out);
/* Writes frame 0 of a [1,3,H,W] or [1,3,T,H,W] tensor, mapping [lo,hi] -> [0,255] with clamping. */
int cli_png_write(const char *path, const vae_tensor *img, int frame, float lo, float hi);

typedef struct cli_opt {
    const char *name; /* "--device" */
    const char *alt;  /* "-d" or NULL */
    int takes_value;
    const char **value; /* where the value (or "1" for flags) goes */
} cli_opt;
/* A command as cli_parse reads it: its name, its --help text (up to 3 parts, printed in order)
 * and its positional arguments: exactly n_pos, else the usage error pos_error. */
typedef struct cli_command {
    const char *name;
    const char *help[3];
    int n_pos;
    const char *pos_error;
} cli_command;
/* What cli_parse returns to say "parsed: go on" (every exit code is >= 0). */
enum { CLI_PARSED = -1 };
/* Parses argv[1..] of a command: options into opts ("1" for a flag), positional arguments into
 * pos; --help / -h print the help to stdout. Returns CLI_PARSED, or the exit code to return:
 * CLI_OK after the help, a usage error. */
int cli_parse(const cli_command *c, int argc, char **argv, const cli_opt *opts, const char **pos);

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv, int encode);
int cmd_synth(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_roundtrip(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_roundtrip_video(int argc, char **argv); /* cmd_videotrip.c */
int cmd_sysinfo(int argc, char **argv);         /* cmd_sysinfo.c: `vae --info` */

/* `vae info` on a file that is not a checkpoint: a latent/tensor file (names, dtypes, shapes) or a
 * video/image (container, codec, size, fps, frames, pixel format, colour). Returns an exit code,
 * or -1 when it cannot tell what the file is (nothing printed). info_file.c */
int cli_info_file(const char *path);

/* Shared option parsing (args.c); each returns 0 or prints a usage error and returns 2. */
int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out);
/* --device cpu|cuda, --dtype fp32|bf16|fp16, --threads N (NULL: keep the defaults of *so) into
 * session options; returns 0 or a usage error exit code naming the bad value. */
int cli_session_options(const char *cmd, const char *device, const char *dtype,
                        const char *threads, vae_session_options *so);
/* The memory, tiling, tuning and device group flags (--max-memory, --host-memory, --tile-mode,
 * --tile, --tile-size, --tile-overlap, --tune-cache, --devices), as given (NULL: absent), and
 * their help text. */
typedef struct cli_mem_args {
    const char *max_memory, *host_memory, *tile_mode, *tile, *tile_size, *tile_overlap,
        *tune_cache, *devices;
} cli_mem_args;
#define CLI_MEM_OPTS(a)                                                                             \
    {"--max-memory", NULL, 1, &(a).max_memory}, {"--host-memory", NULL, 1, &(a).host_memory},       \
        {"--tile-mode", NULL, 1, &(a).tile_mode},                                                   \
        {"--tile", NULL, 1, &(a).tile}, {"--tile-size", NULL, 1, &(a).tile_size},                   \
        {"--tile-overlap", NULL, 1, &(a).tile_overlap}, {"--tune-cache", NULL, 1, &(a).tune_cache}, \
        {"--devices", NULL, 1, &(a).devices}
extern const char cli_mem_help[];
/* Puts them into session options; a usage error exit code naming a bad value. */
int cli_memory_options(const char *cmd, const cli_mem_args *a, vae_session_options *so);
/* "13G", "800M", "512K", "1.5G" (binary units) or a byte count. */
int cli_parse_bytes(const char *cmd, const char *flag, const char *s, int64_t *out);
int cli_parse_fps(const char *cmd, const char *s, int *num, int *den);
int cli_parse_size(const char *cmd, const char *s, int *w, int *h);
int cli_parse_fit(const char *cmd, const char *s, int *fit); /* error, crop, pad, resize = 0..3 */
/* 1 when arg (optionally FILE:KEY) names a tensor file by its extension. */
int cli_is_tensor_file(const char *arg);
/* float32 tensor -> .npy, atomically (cmd_run.c). */
int cli_write_npy(const char *path, const vae_tensor *t);

/* --dist (group.c): this process as one rank of a group of processes started by torchrun or
 * mpirun. Reads the launcher's environment (torchrun: RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI: OMPI_COMM_WORLD_*; MPICH: PMI_RANK,
 * PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS; VAE_RDZV_PORT, VAE_RDZV_TIMEOUT, VAE_RDZV_TOKEN
 * or TORCHELASTIC_RUN_ID) into so: rank, world, device_index (the local rank) and the group id,
 * made by rank 0 and handed to the others over cli_group_rendezvous. Ranks above 0 become quiet (cli_rank, cli_quiet). A world of 1
 * leaves so as it is (a plain run). Call after cli_session_options and cli_memory_options.
 * Returns CLI_OK or an exit code, its error printed. */
int cli_group_from_env(const char *cmd, vae_session_options *so);
/* The TCP rendezvous behind it (rendezvous.c): rank 0 listens on addr:port (the addresses addr
 * resolves to; every interface only where none of them is this host's, or where a host name
 * resolves here to the loopback alone and not every rank is on this host) until the world - 1
 * other ranks have said hello with the token, then hands each its *id; the others connect to
 * addr:port (retrying: rank 0 may start later) and receive *id. Rank 0 serves every connection at
 * once: strangers and hellos without the token are dropped, never given the id, and do not end or
 * delay the group. Every step is bounded by timeout_s; with a token, a rank of another world size
 * or one given twice fails rank 0 and every rank that has joined (none waits for the timeout).
 * Returns CLI_OK or an exit code, the error recorded by cli_set_error (not printed). */
typedef struct cli_rdzv {
    const char *addr; /* MASTER_ADDR */
    int port, rank, world;
    double timeout_s;
    const char *token; /* the group's shared secret: NULL or "": none */
    int one_node;      /* every rank is on this host */
} cli_rdzv;
int cli_group_rendezvous(const cli_rdzv *o, vae_group_id *id);
extern const char cli_dist_help[];

#endif
