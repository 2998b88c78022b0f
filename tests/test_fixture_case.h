/* test_fixture_case.h -- what a fixture case's JSON says beyond its tensors, shared by the tests
 * that run the cases (test_fixtures.c, test_stream.c). */
#ifndef VAE_TEST_FIXTURE_CASE_H
#define VAE_TEST_FIXTURE_CASE_H

#include <cjson/cJSON.h>

#include "vae.h"

/* A case's upstream constructor flags (`options`, the TAEHV previews) as a session's preview:
 * decoder_time_upscale all false -> time, decoder_space_upscale all false -> space. */
static inline int case_preview(const cJSON *c) {
    const cJSON *o = cJSON_GetObjectItem(c, "options");
    static const char *const keys[] = {"decoder_time_upscale", "decoder_space_upscale"};
    int preview = VAE_PREVIEW_NONE;
    for (int k = 0; k < 2; k++) {
        const cJSON *flags = o ? cJSON_GetObjectItem(o, keys[k]) : NULL, *f;
        int any = 0;
        cJSON_ArrayForEach(f, flags) any |= cJSON_IsTrue(f);
        if (flags && !any) preview |= k ? VAE_PREVIEW_SPACE : VAE_PREVIEW_TIME;
    }
    return preview;
}

#endif
