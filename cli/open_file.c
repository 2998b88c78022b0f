/* open_file.c -- opening an input file without blocking on FIFOs or devices. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "platform/platform.h"

int cli_open_regular(const char *path, FILE **out) {
    *out = NULL;
    /* O_NONBLOCK: open() of a FIFO would otherwise wait for a writer forever (fopen has no such
     * flag); the flag is cleared again once the file is known to be regular. */
    int fd = open(path, O_RDONLY | VAE_O_BINARY | VAE_O_CLOEXEC | VAE_O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -2;
    }
    if (vae_plat_set_blocking(fd) != 0 || !(*out = fdopen(fd, "rb"))) {
        close(fd);
        return -1;
    }
    return 0;
}
