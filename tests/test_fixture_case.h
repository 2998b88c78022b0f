/* test_fixture_case.h -- what a fixture case's JSON says beyond its tensors, shared by the tests
 * that run the cases (test_fixtures.c, test_stream.c). */
#ifndef VAE_TEST_FIXTURE_CASE_H
#define VAE_TEST_FIXTURE_CASE_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vae.h"

/* A whole file as a string (NULL: unreadable) */
static inline char *fixture_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* shared/fixtures/NAME.json parsed (NULL: unreadable; path: the file's name, for the message) */
static inline cJSON *fixture_json(const char *shared, const char *name, char *path, size_t len) {
    snprintf(path, len, "%s/fixtures/%s.json", shared, name);
    char *text = fixture_read_text(path);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    free(text);
    return js;
}

/* The fixture's weights are the shared rule's synthetic ones (vae_synth_checkpoint) */
static inline int fixture_synthetic(const cJSON *js) {
    const cJSON *weights = cJSON_GetObjectItem(js, "weights");
    return cJSON_IsString(weights) && strcmp(weights->valuestring, "synthetic") == 0;
}

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
