// link_probe.cu -- the host link's rate for pinned copies: host to device, device to host, and
// both at once on two streams (what caches in host memory can stream at most; plan_offload.c
// prices their traffic). usage: nvcc -O2 -o link_probe bench/link_probe.cu && ./link_probe [MiB]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

// best of reps: seconds for the copies queued by `dir` (1 in, 2 out, 3 both on two streams)
static int time_copies(int dir, void *host_in, void *host_out, void *dev_in, void *dev_out,
                       size_t bytes, cudaStream_t s[2], double *best) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    *best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaEventRecord(a, s[0]));
        CHECK(cudaStreamWaitEvent(s[1], a, 0));
        if (dir & 1) CHECK(cudaMemcpyAsync(dev_in, host_in, bytes, cudaMemcpyHostToDevice, s[0]));
        if (dir & 2) CHECK(cudaMemcpyAsync(host_out, dev_out, bytes, cudaMemcpyDeviceToHost, s[1]));
        CHECK(cudaEventRecord(b, s[1]));
        CHECK(cudaStreamWaitEvent(s[0], b, 0));
        CHECK(cudaEventRecord(b, s[0]));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms * 1e-3 < *best) *best = ms * 1e-3;
    }
    return 0;
}

int main(int argc, char **argv) {
    const size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 20;
    void *hi, *ho, *di, *dout;
    cudaStream_t s[2];
    CHECK(cudaMallocHost(&hi, bytes));
    CHECK(cudaMallocHost(&ho, bytes));
    CHECK(cudaMalloc(&di, bytes));
    CHECK(cudaMalloc(&dout, bytes));
    CHECK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
    const char *names[4] = {"", "host to device", "device to host", "both at once (each way)"};
    for (int dir = 1; dir <= 3; dir++) {
        double t;
        if (time_copies(dir, hi, ho, di, dout, bytes, s, &t)) return 1;
        printf("LINK %-24s %8.1f GB/s (%zu MiB in %.3f ms, best of 5)\n", names[dir],
               (double)bytes / t * 1e-9, bytes >> 20, t * 1e3);
    }
    return 0;
}
