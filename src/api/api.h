/* api.h -- what the public handles hold (internal). */
#ifndef VAE_API_H
#define VAE_API_H

#include "core/backend.h"
#include "core/plan.h"
#include "core/runner.h"
#include "core/settings.h"
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
    vae_settings set;
    vae_backend *be;
    vae_runner *enc, *dec; /* made on first use */
    int64_t model_error[2]; /* decode, encode: bytes a run held beyond the memory model's plan */
};

#endif
