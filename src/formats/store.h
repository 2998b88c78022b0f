/* store.h -- a read-only view of the tensors in a checkpoint or tensor file (internal).
 *
 * One interface over safetensors, PyTorch .pth zip archives, GGUF and NumPy .npy: the file is
 * memory-mapped, every tensor is listed with its name, storage dtype and shape (PyTorch order,
 * outermost dimension first), and converted to float32 on request. */
#ifndef VAE_STORE_H
#define VAE_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    VAE_ST_F32,
    VAE_ST_F16,
    VAE_ST_BF16,
    VAE_ST_F64,
    VAE_ST_F8_E4M3,
    VAE_ST_F8_E5M2,
    VAE_ST_Q8_0, /* GGUF blocks of 32: fp16 scale + 32 int8 */
    VAE_ST_I64,  /* listed (e.g. num_batches_tracked) but not convertible to weights */
    VAE_ST_I32,
    VAE_ST_OTHER
} vae_storage_type;

const char *vae_storage_type_name(vae_storage_type t);

#define VAE_MAX_DIMS 8

typedef struct vae_store_tensor {
    char *name;
    vae_storage_type type;
    int ndim;
    int64_t shape[VAE_MAX_DIMS]; /* PyTorch order */
    const void *data;            /* into the mapping (may be unaligned) or an owned buffer */
    size_t nbytes;
} vae_store_tensor;

typedef struct vae_store {
    char *path;
    const char *format; /* "safetensors", "pth", "gguf", "npy" */
    int n;
    vae_store_tensor *tensors;
    /* private */
    void *map;
    size_t map_size;
    void *owned; /* format-specific heap state (decompressed blobs, strings) */
} vae_store;

/* Opens any supported file, chosen by content (magic bytes), not by extension. On failure returns
 * a VAE_E* code with a message naming the file and what was wrong (via vae_fail). */
int vae_store_open(vae_store **out, const char *path);
void vae_store_free(vae_store *s);

/* NULL when absent. Linear scan is fine for a few hundred tensors; a hash is built at open. */
const vae_store_tensor *vae_store_find(const vae_store *s, const char *name);

int64_t vae_store_numel(const vae_store_tensor *t);
/* Value of a string entry of a safetensors `__metadata__` (NULL when absent or other format);
 * valid until vae_store_free. `vae synth` stores its configuration under "vae.config". */
const char *vae_store_metadata(const vae_store *s, const char *key);
/* Converts the whole tensor to float32 into dst (numel floats). VAE_EDTYPE for integer types. */
int vae_store_to_f32(const vae_store *s, const vae_store_tensor *t, float *dst);

/* Format readers, each filling a vae_store from a mapped file (called by vae_store_open). */
int vae_safetensors_parse(vae_store *s);
int vae_pth_parse(vae_store *s);
int vae_gguf_parse(vae_store *s);
int vae_npy_parse(vae_store *s);

/* Writes float32 tensors as safetensors (sorted as given), atomically. dtype: VAE_ST_F32, F16 or
 * BF16 storage. Each tensor: name, ndim, shape (PyTorch order), float32 data. */
typedef struct vae_out_tensor {
    const char *name;
    int ndim;
    int64_t shape[VAE_MAX_DIMS];
    const float *data;
} vae_out_tensor;
int vae_safetensors_write(const char *path, const vae_out_tensor *tensors, int n,
                          vae_storage_type dtype);
/* Same, with `__metadata__` string pairs (keys[i] -> values[i]). */
int vae_safetensors_write_meta(const char *path, const vae_out_tensor *tensors, int n,
                               vae_storage_type dtype, const char *const *keys,
                               const char *const *values, int n_meta);

/* ---- for the format readers (store.c implements these) ------------------------------------- */
/* Bytes of one element, or 0 when not a plain element type (Q8_0 blocks, OTHER). */
size_t vae_storage_type_size(vae_storage_type t);
/* Heap memory that lives as long as the store (inflated zip entries, contiguous copies). */
void *vae_store_owned_alloc(vae_store *s, size_t bytes);
/* A store of tensors in memory (no file): made empty, filled with vae_store_add (data borrowed
 * or in vae_store_owned_alloc blocks), then indexed once (duplicate names fail there). */
int vae_store_new(vae_store **out, const char *label);
int vae_store_index(vae_store *s);
/* Appends a tensor after checking ndim, the shape (no negative dims, no overflow) and, for types
 * with a known size, that nbytes == numel * size (Q8_0: innermost dim a multiple of 32 and
 * nbytes == numel / 32 * 34). The name is copied (name_len bytes, need not be NUL-terminated).
 * The caller checks that [data, data + nbytes) lies inside the mapping or an owned block. */
int vae_store_add(vae_store *s, const char *name, size_t name_len, vae_storage_type type,
                  int ndim, const int64_t *shape, const void *data, size_t nbytes);
/* A tensor's bytes in the file's data (idx: its index in the store), for vae_store_check_overlap. */
typedef struct vae_store_span {
    uint64_t begin, end;
    int idx;
} vae_store_span;
/* Tensors must not share bytes (overlapping ranges are a corrupt or malicious header):
 * VAE_EFORMAT "<path>: <what> of tensors 'a' and 'b' overlap" for the first two that do. Sorts
 * spans. */
int vae_store_check_overlap(const vae_store *s, vae_store_span *spans, size_t n, const char *what);
/* Records a metadata string pair (copied) for vae_store_metadata. */
int vae_store_add_metadata(vae_store *s, const char *key, const char *value);
/* Product of the dims into *numel; -1 when a dim is negative or the product overflows. */
int vae_shape_checked_numel(const int64_t *shape, int ndim, int64_t *numel);

/* Minimal zip reader for PyTorch archives (zip.c): the central directory (zip64 included), entries
 * stored or deflated. Names point into the mapping and are not NUL-terminated. */
typedef struct vae_zip_entry {
    const char *name;
    size_t name_len;
    uint64_t data_offset; /* of the compressed bytes in the mapping */
    uint64_t csize, usize;
    uint32_t crc;
    int method; /* 0 stored, 8 deflated */
} vae_zip_entry;
typedef struct vae_zip {
    int n;
    vae_zip_entry *entries; /* sorted by name */
} vae_zip;
int vae_zip_open(vae_zip *z, vae_store *s);
void vae_zip_close(vae_zip *z);
const vae_zip_entry *vae_zip_find(const vae_zip *z, const char *name, size_t name_len);
/* Stored entries: a pointer into the mapping; deflated ones are inflated into owned memory. */
int vae_zip_extract(vae_store *s, const vae_zip_entry *e, const uint8_t **data);

#endif
