/* test_check.h -- the PASS/FAIL lines of the unit tests whose checks run on several threads
 * (test_comm.c, test_ranks.c): one line per check, counted in n_pass / n_fail, printed whole
 * under a lock. Header-only: each test is one translation unit. */
#ifndef VAE_TEST_CHECK_H
#define VAE_TEST_CHECK_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static int n_pass, n_fail;
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&check_mu);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    if (ok)
        n_pass++;
    else
        n_fail++;
    pthread_mutex_unlock(&check_mu);
    va_end(ap);
}

#endif
