/* progress.c -- progress bar / periodic lines on stderr (see progress.h). */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_begin(cli_progress *p, const char *what, const char *unit, int total) {
    memset(p, 0, sizeof *p);
    p->what = what;
    p->unit = unit ? unit : "frames";
    p->total = total;
    p->mode = cli_quiet ? 0 : isatty(STDERR_FILENO) ? 1 : 2;
    p->t0 = p->t_last = cli_now();
}

static void fmt_time(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void draw(cli_progress *p, double now) {
    double el = now - p->t0, rate = el > 0 ? p->done / el : 0;
    char eta[32] = "?";
    if (p->total > 0 && rate > 0) fmt_time((p->total - p->done) / rate, eta, sizeof eta);
    if (p->mode == 1) {
        char bar[32];
        int width = 24, fill = p->total > 0 ? (int)((double)width * p->done / p->total) : 0;
        if (fill > width) fill = width;
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[width] = 0;
        if (p->total > 0)
            fprintf(stderr, "\r%s [%s] %d/%d %s  %.2f %s/s  ETA %s\033[K", p->what, bar, p->done,
                    p->total, p->unit, rate, p->unit, eta);
        else
            fprintf(stderr, "\r%s %d %s  %.2f %s/s\033[K", p->what, p->done, p->unit, rate,
                    p->unit);
        p->drawn = 1;
    } else {
        if (p->total > 0)
            fprintf(stderr, "vae: %s: %d/%d %s, %.2f %s/s, ETA %s\n", p->what, p->done, p->total,
                    p->unit, rate, p->unit, eta);
        else
            fprintf(stderr, "vae: %s: %d %s, %.2f %s/s\n", p->what, p->done, p->unit, rate,
                    p->unit);
    }
    fflush(stderr);
}

void cli_progress_update(cli_progress *p, int done) {
    if (!p->mode) return;
    p->done = done;
    double now = cli_now();
    if (p->mode == 1 && (now - p->t_last >= 0.1 || (p->total > 0 && done >= p->total))) {
        draw(p, now);
        p->t_last = now;
    } else if (p->mode == 2 && now - p->t_last >= 5.0) {
        draw(p, now);
        p->t_last = now;
    }
}

void cli_progress_end(cli_progress *p, int ok) {
    if (!p->mode) return;
    if (p->drawn) fputs("\r\033[K", stderr);
    if (ok) {
        double el = cli_now() - p->t0;
        fprintf(stderr, "vae: %s: %d %s in %.1f s (%.2f %s/s)\n", p->what, p->done, p->unit, el,
                el > 0 ? p->done / el : 0.0, p->unit);
    }
    p->drawn = 0;
    fflush(stderr);
}

/* ---- Ctrl-C / SIGTERM: stop cleanly at the next frame; a second one exits at once -------------
 */
#include <signal.h>

static volatile sig_atomic_t interrupted;
static const char *volatile unlink_on_exit;

static void on_signal(int sig) {
    (void)sig;
    if (interrupted) {
        const char *p = unlink_on_exit;
        if (p) unlink(p);
        _exit(CLI_EINTERRUPTED);
    }
    interrupted = 1;
}

void cli_catch_interrupts(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_interrupted(void) {
    return interrupted != 0;
}

void cli_interrupt_unlink(const char *path) {
    unlink_on_exit = path;
}
