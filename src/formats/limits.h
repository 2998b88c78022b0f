/* limits.h -- the resource bounds of every reader, in one place (internal, header only).
 *
 * The rule they enforce: a file of N bytes costs at most O(N) memory plus the tensor (or pixel)
 * bytes it legitimately declares, and a file that would cost more fails fast with a clear error
 * instead of making the process use gigabytes or hang. "Legitimately declares" means bytes that
 * are actually present in the file (stored, or deflated at most 1032:1, the deflate maximum),
 * not bytes that shared or overlapping references make appear many times over.
 *
 * Each bound is sized so that real checkpoints and media stay well inside it: a large training
 * checkpoint has ~10^5 tensors, a data.pkl of a few MiB, names under 200 bytes; video frames go
 * up to 8K UHD (7680x4320). */
#ifndef VAE_FORMATS_LIMITS_H
#define VAE_FORMATS_LIMITS_H

/* ---- zip archives (zip.c) ---- */
/* Deflate cannot expand data by more than ~1032:1; a larger claim is a corrupt (or hostile)
 * header. Together with non-overlapping entries (each compressed byte belongs to one entry, which
 * zip.c checks) this bounds the inflated bytes of a whole archive by ~1032 x its size. */
#define VAE_ZIP_MAX_RATIO 1032u

/* ---- pickles (pth.c) ---- */
/* The inflated data.pkl: it holds names and shapes, never tensor data (~150 bytes per tensor),
 * so 64 MiB is ~400k tensors; larger means a pickle built to exhaust memory. */
#define VAE_PICKLE_MAX_BYTES (64ull << 20)
/* Heap of the pickle VM (objects, their item arrays, stack, memo). Every opcode can create an
 * object of ~200 bytes, so an object count bounded only by the pickle size could still cost
 * 200x its (already inflated) size; a real state dict needs ~5 KiB per tensor. */
#define VAE_PICKLE_MAX_HEAP (192ull << 20)
/* Nodes visited while flattening nested dicts into names: the memo can share one dict many times
 * over, so a DAG of a few KiB can otherwise unfold into millions of paths. */
#define VAE_PICKLE_MAX_VISITS (1l << 22)
/* Nesting of dicts/lists in a state dict (a real one is 1-3 deep). */
#define VAE_PICKLE_MAX_DEPTH 64

/* ---- tensor views (pth.c _rebuild_tensor_v2/v3) ---- */
/* Contiguous views point into their storage and cost nothing; strided ones are gathered into
 * copies. With zero or overlapping strides a view can name far more elements than its storage
 * holds, so the bytes gathered over the whole archive are bounded by this multiple of the
 * storage bytes it actually holds (a transposed weight needs 1x) plus a small allowance. */
#define VAE_VIEW_COPY_FACTOR 2u
#define VAE_VIEW_COPY_SLACK (1ull << 20)

/* ---- any tensor file (store.c) ---- */
/* Tensors listed in one file, and the bytes of all their names together: names are copied, and
 * flattened pickle names can be much longer than anything in the file. */
#define VAE_STORE_MAX_TENSORS (1 << 19)
#define VAE_STORE_MAX_NAME_BYTES (64ull << 20)
/* The safetensors JSON header (the reference implementation refuses headers over 100 MB). */
#define VAE_SAFETENSORS_MAX_HEADER (100ull << 20)

/* ---- images and video frames ---- */
/* VAE_MAX_IMAGE_PIXELS and VAE_MAX_IMAGE_SIDE are in vae.h: the command-line tool's own PNG
 * reader and src/media apply them too. */

#endif
