/* registry.c -- the architectures this build knows, in detection order. */
#include <string.h>

#include "models/model.h"

/* TAESD's bare Sequential indices and SeedVR2's diffusers-like names are the most specific keys,
 * so they are tried before the Wan schemes. Wan2.2 before 2.1 (2.2 keys nest one level deeper). */
const vae_arch *const vae_archs[] = {&vae_arch_taesd, &vae_arch_seedvr2, &vae_arch_wan22,
                                     &vae_arch_wan21, NULL};

const vae_arch *vae_arch_by_name(const char *name) {
    for (int i = 0; vae_archs[i]; i++)
        if (strcmp(vae_archs[i]->name, name) == 0) return vae_archs[i];
    return NULL;
}

int vae_config_spatial_factor(const vae_config *cfg) { return cfg->arch->spatial_factor; }
