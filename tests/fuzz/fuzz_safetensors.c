/* fuzz_safetensors.c -- libFuzzer entry: the safetensors reader (vae_safetensors_parse) on arbitrary bytes, then the
 * name index, lookups and float32 conversion of every tensor it accepted. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_store_parse(data, size, "safetensors", vae_safetensors_parse);
}
