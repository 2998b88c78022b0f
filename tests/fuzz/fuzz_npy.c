/* fuzz_npy.c -- libFuzzer entry: the npy reader (vae_npy_parse) on arbitrary bytes, then the
 * name index, lookups and float32 conversion of every tensor it accepted. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_store_parse(data, size, "npy", vae_npy_parse);
}
