/* cuda_profile.c -- VAE_CUDA_PROFILE: GPU time per category (CUDA events around every launch)
 * and, at 2, per op name, resolved in batches and logged when the backend is destroyed. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "core/dtype.h"

/* ---- profiling ------------------------------------------------------------------------------- */
enum { CU_PROF_CAP = 4096 }; /* event pairs resolved at once */
/* clang-format off */
static const char *const prof_names[CU_P_N] = {
    "conv cuDNN", "conv GEMM", "conv gather/im2col", "conv bias/residual init", "rms norm",
    "group norm", "eltwise", "resample", "attention", "copy/zero", "upload", "download",
    "conv narrow head/stem", "conv implicit GEMM", "copy host<->device", "conv halo tile"};
/* clang-format on */

void cu_prof_flush(cuda_backend *cb) {
    if (!cb->prof || cb->prof_n == 0) return;
    cudaStreamSynchronize(cb->stream);
    for (int i = 0; i < cb->prof_n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, cb->prof_ev[2 * i], cb->prof_ev[2 * i + 1]) == cudaSuccess) {
            cb->prof_ms[cb->prof_cat[i]] += ms;
            cb->prof_calls[cb->prof_cat[i]]++;
            const char *nm = cb->prof_name ? cb->prof_name[i] : NULL;
            if (nm) {
                int k = 0;
                while (k < cb->n_prof_ops && (cb->prof_ops[k].cat != cb->prof_cat[i] ||
                                              strcmp(cb->prof_ops[k].name, nm) != 0))
                    k++;
                if (k == cb->n_prof_ops && k == cb->cap_prof_ops) {
                    int cap = cb->cap_prof_ops ? 2 * cb->cap_prof_ops : 256;
                    cu_prof_op *t = vae_realloc(cb->prof_ops, (size_t)cap * sizeof *t);
                    if (t) cb->prof_ops = t, cb->cap_prof_ops = cap;
                }
                if (k < cb->cap_prof_ops) {
                    if (k == cb->n_prof_ops) {
                        memset(&cb->prof_ops[k], 0, sizeof cb->prof_ops[k]);
                        snprintf(cb->prof_ops[k].name, sizeof cb->prof_ops[k].name, "%s", nm);
                        cb->prof_ops[k].cat = cb->prof_cat[i];
                        cb->n_prof_ops++;
                    }
                    cb->prof_ops[k].ms += ms;
                    cb->prof_ops[k].calls++;
                }
            }
        } else {
            cudaGetLastError();
        }
    }
    cb->prof_n = 0;
}

int cu_prof_begin(cuda_backend *cb, int cat) {
    /* a tuning trial is not the op's work: counted, the cold run's trials would hide the steady
     * state of a short bench */
    if (!cb->prof || cb->tuning || cu_enter(cb, "cuda profile")) return -1;
    if (!cb->prof_ev) {
        cb->prof_ev = vae_calloc(2 * CU_PROF_CAP, sizeof *cb->prof_ev);
        cb->prof_cat = vae_calloc(CU_PROF_CAP, sizeof *cb->prof_cat);
        if (cb->prof > 1) cb->prof_name = vae_calloc(CU_PROF_CAP, sizeof *cb->prof_name);
        if (!cb->prof_ev || !cb->prof_cat) {
            cb->prof = 0;
            return -1;
        }
        cb->prof_cap = CU_PROF_CAP;
    }
    if (cb->prof_n == cb->prof_cap) cu_prof_flush(cb);
    int i = cb->prof_n;
    if (i >= cb->prof_made) {
        if (cudaEventCreate(&cb->prof_ev[2 * i]) != cudaSuccess ||
            cudaEventCreate(&cb->prof_ev[2 * i + 1]) != cudaSuccess) {
            cudaGetLastError();
            return -1;
        }
        cb->prof_made = i + 1;
    }
    cb->prof_cat[i] = cat;
    if (cb->prof_name) cb->prof_name[i] = cb->prof_op;
    cudaEventRecord(cb->prof_ev[2 * i], cb->stream);
    cb->prof_n++;
    return i;
}

void cu_prof_end(cuda_backend *cb, int h) {
    if (h >= 0) cudaEventRecord(cb->prof_ev[2 * h + 1], cb->stream);
}

void cu_prof_report(cuda_backend *cb) {
    if (!cb->prof) return;
    cu_prof_flush(cb);
    double total = 0;
    for (int k = 0; k < CU_P_N; k++) total += cb->prof_ms[k];
    VAE_INFO("cuda profile (%s, %s): %.1f ms of GPU work in %d categories", cb->device_name,
             vae_dtype_name(cb->base.dtype), total, CU_P_N);
    int done[CU_P_N] = {0};
    for (int r = 0; r < CU_P_N; r++) { /* largest first */
        int best = -1;
        for (int k = 0; k < CU_P_N; k++)
            if (!done[k] && (best < 0 || cb->prof_ms[k] > cb->prof_ms[best])) best = k;
        done[best] = 1;
        if (cb->prof_calls[best] == 0) continue;
        VAE_INFO("cuda profile: %-24s %10.2f ms %5.1f%% %8lld calls", prof_names[best],
                 cb->prof_ms[best], total > 0 ? 100.0 * cb->prof_ms[best] / total : 0.0,
                 (long long)cb->prof_calls[best]);
    }
    if (cb->n_prof_ops) { /* VAE_CUDA_PROFILE=2: the 60 most expensive ops by name */
        VAE_INFO("cuda profile by op (name, category, GPU ms, calls):");
        for (int r = 0; r < 60 && r < cb->n_prof_ops; r++) {
            int best = r;
            for (int k = r + 1; k < cb->n_prof_ops; k++)
                if (cb->prof_ops[k].ms > cb->prof_ops[best].ms) best = k;
            cu_prof_op t = cb->prof_ops[r];
            cb->prof_ops[r] = cb->prof_ops[best];
            cb->prof_ops[best] = t;
            VAE_INFO("cuda op profile: %-52s %-12.12s %9.2f ms %6lld", cb->prof_ops[r].name,
                     prof_names[cb->prof_ops[r].cat], cb->prof_ops[r].ms,
                     (long long)cb->prof_ops[r].calls);
        }
    }
    vae_free(cb->prof_ops);
    vae_free(cb->prof_name);
    cb->prof_ops = NULL;
    cb->prof_name = NULL;
    cb->n_prof_ops = cb->cap_prof_ops = 0;
    for (int i = 0; i < cb->prof_made; i++) {
        cudaEventDestroy(cb->prof_ev[2 * i]);
        cudaEventDestroy(cb->prof_ev[2 * i + 1]);
    }
    vae_free(cb->prof_ev);
    vae_free(cb->prof_cat);
    cb->prof_ev = NULL;
    cb->prof_cat = NULL;
    cb->prof_made = cb->prof_n = 0;
}
