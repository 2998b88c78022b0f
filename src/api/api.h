/* api.h -- what the public handles hold (internal). */
#ifndef VAE_API_H
#define VAE_API_H

#include "core/backend.h"
#include "core/executor.h"
#include "models/model.h"

struct vae_model {
    vae_config cfg;
    vae_program enc, dec; /* n_ops == 0 when that side is absent */
    vae_arena *weights;   /* float32 weights the programs point into */
    char *path;
    char *config_json;
    char *file_dtypes;
    char *normalisation;
    int64_t params;
    int tensors;
};

struct vae_session {
    const vae_model *model;
    vae_session_options opts;
    vae_backend *be;
    vae_exec *enc, *dec; /* made on first use */
};

/* Runs the model's program `p` over a user tensor, chunk by chunk (session.c). */
int vae_session_run(vae_session *s, int encode, const vae_tensor *in, vae_frames_fn fn, void *user);

#endif
