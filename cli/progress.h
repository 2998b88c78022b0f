/* progress.h -- progress display of long commands on stderr; their signals and temporaries.
 *
 * On a terminal: one line redrawn in place, "decode [=====>     ] 12/61 frames  3.4 frames/s
 * ETA 0:14". When stderr is not a terminal (logs, CI): a plain line at most every 5 seconds, then
 * a summary. Nothing at all with -q. */
#ifndef VAE_CLI_PROGRESS_H
#define VAE_CLI_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

#include "vae.h"

typedef struct cli_progress {
    const char *what; /* "decode", "encode", "read" */
    const char *unit; /* "frames" */
    int total;        /* -1 when unknown */
    int done;
    int mode;  /* 0 off, 1 terminal, 2 plain lines */
    int drawn; /* a terminal line is on screen */
    double t0, t_last;
} cli_progress;

void cli_progress_begin(cli_progress *p, const char *what, const char *unit, int total);
void cli_progress_update(cli_progress *p, int done);
/* Ends the line; ok: prints "what: N frames in X s (Y frames/s)". */
void cli_progress_end(cli_progress *p, int ok);
double cli_now(void);

/* Signals of long commands (SIGINT, SIGTERM, SIGHUP, SIGPIPE): the first sets a flag that the
 * frame callbacks poll and cancels the session given to cli_watch_session within ~50 ms (the
 * command then stops, removes its partial output and exits 130); a second SIGINT, SIGTERM or
 * SIGHUP removes every registered temporary and exits 130 at once -- except while the finished
 * output is being written and renamed into place (cli_temp_hold: the library's writers make
 * temporaries this registry does not see, and a PNG sequence is renamed frame by frame), which it
 * waits for: a bounded write, after which nothing partial can be left. */
void cli_catch_interrupts(void);
int cli_interrupted(void);
void cli_watch_session(vae_session *s); /* NULL before the session is freed */

/* Temporaries: a unique file next to path ("name.tmp.XXXXXXXX.ext", made with O_EXCL), open for
 * writing (NULL with errno set, nothing left), registered for removal by a forced exit in
 * *slot (the library's vae_temp_create, which the CLI does not reach, is the same rule). cli_temp_commit renames it to path (NULL: removes it) and forgets it: 0, or -1 with errno
 * set (then removed). */
FILE *cli_temp_open(const char *path, char *tmp, size_t n, int *slot);
int cli_temp_commit(const char *tmp, const char *path, int slot);
/* Temporaries someone else makes (the media writer's): registered by path (copied; a slot, or -1
 * when the table is full); hold/release bracket the calls that create or rename them, so that a
 * forced exit waits for them. */
int cli_temp_register(const char *path);
void cli_temp_forget(int slot);
void cli_temp_hold(void);
void cli_temp_release(void);

#endif
