/* progress.h -- progress display of long commands on stderr.
 *
 * On a terminal: one line redrawn in place, "decode [=====>     ] 12/61 frames  3.4 frames/s
 * ETA 0:14". When stderr is not a terminal (logs, CI): a plain line at most every 5 seconds, then
 * a summary. Nothing at all with -q. */
#ifndef VAE_CLI_PROGRESS_H
#define VAE_CLI_PROGRESS_H

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

/* SIGINT/SIGTERM handling for long commands: the first signal sets a flag that the frame callbacks
 * poll (the command then stops, removes its partial output and exits 130); a second one unlinks
 * the registered temporary file (async-signal-safe) and exits 130 at once. */
void cli_catch_interrupts(void);
int cli_interrupted(void);
void cli_interrupt_unlink(const char *path); /* NULL: nothing to unlink */

#endif
