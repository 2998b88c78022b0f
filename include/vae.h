/*
 * vae.h -- public C API of vae.c, a video/image VAE inference engine.
 *
 * Handles are opaque and come in create/free pairs (free accepts NULL). Every call that can fail
 * returns an int: VAE_OK (0) or a negative VAE_E* code; vae_strerror() names the code and
 * vae_last_error() gives the detail of the last failure on the calling thread (which file, tensor
 * or argument, and what was expected). The library never prints and never exits: it logs through
 * the callback installed with vae_set_log_callback().
 *
 * User tensors are in PyTorch order: videos [1,3,T,H,W] in [-1,1] (2-D models: images [1,3,H,W],
 * range per model), latents [1,C,T,h,w] in diffusion space.
 *
 * Lifetimes: an options struct, and the strings it points to, are read during the call that takes
 * it (the session keeps copies), except the allocator's user pointer, which must outlive the
 * session. Strings the library returns live as long as the process, except where their function
 * says otherwise (vae_model_get_info's: until vae_model_free; vae_last_error's: until the next
 * vae_* call on that thread).
 *
 * Stable and developer API: this header is the stable API -- every enum value is written out
 * and keeps its number, and a setting given here is never overridden by the environment. The
 * engine's developer switches (VAE_PARAM_*, vae_session_options_set; for measurements, tests and
 * workarounds) are in vae_dev.h, which may change in any version. Each switch is also an
 * environment variable (VAE_EXEC_GRAPH=0 ...) that fills in what the program left unset: a value
 * set through the API wins, and the session logs at INFO which ones came from the environment.
 */
#ifndef VAE_H
#define VAE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every public function is exported from libvae.so; everything else in the library is hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define VAE_API __attribute__((visibility("default")))
#else
#define VAE_API
#endif

#define VAE_VERSION_MAJOR 0
#define VAE_VERSION_MINOR 2
#define VAE_VERSION_PATCH 0
#define VAE_VERSION_NUMBER (VAE_VERSION_MAJOR * 10000 + VAE_VERSION_MINOR * 100 + VAE_VERSION_PATCH)
#define VAE_VERSION_STRING "0.2.0"

VAE_API unsigned vae_version_number(void);
/* sizeof of a public struct by its name ("vae_tensor", "vae_session_options", ...; 0: unknown),
 * for bindings that lay the structs out themselves (Python's ctypes) to check their layout. */
VAE_API size_t vae_struct_size(const char *name);
VAE_API const char *vae_version_string(void);

/* ---- errors ---------------------------------------------------------------------------------- */
enum {
    VAE_OK = 0,
    VAE_EINVAL = -1,       /* bad argument or option */
    VAE_EIO = -2,          /* file could not be read or written */
    VAE_EFORMAT = -3,      /* file is not valid for its format (truncated, corrupt) */
    VAE_ENOMEM = -4,       /* allocation failed (host or device) */
    VAE_EUNSUPPORTED = -5, /* valid input that this build cannot handle */
    VAE_ESHAPE = -6,       /* tensor has the wrong shape or channel count */
    VAE_EKEY = -7,         /* missing or unexpected tensor name */
    VAE_EDTYPE = -8,       /* tensor has a dtype that is not accepted here */
    VAE_ENAN = -9,         /* NaN or Inf in an input */
    VAE_EDEVICE = -10,     /* device (GPU) error */
    VAE_EINTERRUPTED = -11 /* stopped by the user (callback returned non-zero) */
};
VAE_API const char *vae_strerror(int code);
/* Detail message of the last failure of a vae_* call on this thread ("" if none). */
VAE_API const char *vae_last_error(void);

/* ---- logging --------------------------------------------------------------------------------- */
enum { VAE_LOG_DEBUG = 0, VAE_LOG_INFO = 1, VAE_LOG_WARN = 2, VAE_LOG_ERROR = 3 };
typedef void (*vae_log_fn)(int level, const char *message, void *user);
/* Installs the process-wide log sink; messages below min_level are dropped. NULL silences. */
VAE_API void vae_set_log_callback(vae_log_fn fn, void *user, int min_level);

/* ---- tensors --------------------------------------------------------------------------------- */
typedef enum {
    VAE_DTYPE_F32 = 0,
    VAE_DTYPE_F16 = 1,
    VAE_DTYPE_BF16 = 2,
    /* Compute only (session option, never a tensor's dtype): FP8 (OCP E4M3) convolutions in
     * the residual branches -- weights quantised per output channel at load, each conv's input
     * with one scale per call (its largest magnitude maps to 448), float32 accumulation; norms,
     * attention, bias, residuals, the convs that carry the whole signal (upsampling, shortcuts)
     * and the narrow ones at the network's ends (<= 16 channels in or out) stay in higher
     * precision. The CPU backend emulates it (float32 activations, values rounded to the E4M3
     * grid); Hopper GPUs run it on bf16 activations (E4M3 kernels where their shapes allow). */
    VAE_DTYPE_FP8 = 3,
} vae_dtype;
VAE_API const char *vae_dtype_name(vae_dtype dtype);

/* A size in bytes as people write it, the grammar of every size option (the CLI's --max-memory
 * and --host-memory, vaec's max_memory and host_memory): a number, fractions allowed, then
 * optionally K, M, G or T (powers of 1024, either case), optionally followed by "i" and/or "B"
 * ("13G", "800M", "1.5GiB", "2TB"); a bare number is bytes. Surrounding spaces are ignored.
 * VAE_EINVAL (vae_last_error quotes the text) when it is not one, negative, or 2^63 or more. */
VAE_API int vae_parse_size(const char *text, int64_t *bytes);

/* The largest image or video frame the readers accept: width x height at most 2^26 pixels
 * (8192x8192; 8K UHD is 33M) and either side at most 32768 (a float RGB copy of such a frame is
 * already 768 MiB; a PNG of a few KiB can declare 20000x20000). */
#define VAE_MAX_IMAGE_PIXELS (1ll << 26)
#define VAE_MAX_IMAGE_SIDE 32768

/* ---- devices (declared here: tensors name the device their data lives on) ------------------ */
typedef enum { VAE_DEVICE_CPU = 0, VAE_DEVICE_CUDA = 1 } vae_device;

/* A tensor borrowed by the library (never freed by it).
 * strides: in elements, PyTorch's meaning, always honoured; vae_tensor_dense fills them for a
 * dense row-major tensor (the library's own tensors come with them filled). A zero stride is a
 * broadcast: each position of that dimension reads the same values (torch's expand). Negative
 * strides are refused.
 * storage_bytes: how many bytes from data the caller owns (PyTorch: the storage's bytes after
 * the view's offset); every element the strides reach must lie inside it. 0: not stated, the
 * caller vouches for the extent -- then strides that are all zero on a tensor of more than one
 * element are refused as ambiguous (they once meant "dense").
 * An output must not overlap itself (no zero strides, no overlapping rows) nor its input (judged
 * by the byte ranges the two span: interleaved views of one buffer are refused too).
 * device: where data lives; VAE_DEVICE_CUDA tensors (device memory of GPU device_index) are read
 * and written by a CUDA session on that GPU without any host copy. */
typedef struct vae_tensor {
    int ndim;
    int64_t shape[8];
    vae_dtype dtype;
    void *data;
    int64_t strides[8];
    vae_device device;
    int device_index;
    int64_t storage_bytes;
} vae_tensor;
/* A dense row-major host tensor of this shape over data (ndim 0..8). */
VAE_API vae_tensor vae_tensor_dense(int ndim, const int64_t *shape, vae_dtype dtype, void *data);
/* Checks t by the rule above (name: what the error calls it): writable -- it is an output;
 * input (or NULL) -- the call's input, which it must not overlap. VAE_OK, or VAE_EINVAL /
 * VAE_ESHAPE / VAE_EDTYPE naming the dimension and what was expected. Every call that takes a
 * tensor applies it; bindings call it to check a whole batch before its items. */
VAE_API int vae_tensor_check(const vae_tensor *t, const char *name, int writable,
                             const vae_tensor *input);

/* ---- devices --------------------------------------------------------------------------------- */
/* 1 when this build has the backend and it can run here (e.g. a CUDA GPU is present). */
VAE_API int vae_device_available(vae_device device);
/* 1 when this build includes the backend (whether or not a device is present). */
VAE_API int vae_device_compiled(vae_device device);
/* Number of devices of this kind usable here (CPU: 1). */
VAE_API int vae_device_count(vae_device device);

typedef struct vae_device_info {
    char name[256];
    int compute_major, compute_minor; /* CUDA compute capability */
    int multiprocessors;
    int64_t total_memory, free_memory; /* bytes */
    int driver_version, runtime_version; /* CUDA, e.g. 13000 */
    int cudnn_version;                   /* e.g. 91400 */
    int fp16, bf16, fp32;                /* precisions the backend runs on it */
    char kernels[256];                   /* e.g. "cuDNN convolutions, cuBLAS GEMM, own norms" */
} vae_device_info;
VAE_API int vae_device_get_info(vae_device device, int index, vae_device_info *info);
/* What this build contains: backends, BLAS, CUDA architectures. */
VAE_API const char *vae_build_info(void);

/* ---- models ---------------------------------------------------------------------------------- */
typedef struct vae_model vae_model;

typedef struct vae_model_options {
    /* Key prefix to strip (e.g. "first_stage_model."); NULL = detect. */
    const char *prefix;
    /* Architecture to assume ("wan2.1", "wan2.2", "seedvr2", "taesd", "taehv"); NULL = detect. */
    const char *arch;
    /* Upstream constructor arguments (JSON object) that override what was detected, for what
     * shapes cannot tell (e.g. {"norm_num_groups": 8} for SeedVR2, {"variant": "taecvx"} for a
     * TAEHV file not named so: docs/taehv.md); NULL = none. */
    const char *config_json;
} vae_model_options;
VAE_API void vae_model_options_default(vae_model_options *opts);

/* Opens a checkpoint (.safetensors, .pth, .gguf), detects architecture and configuration from
 * tensor names and shapes, and checks that every tensor is present with the right shape. */
VAE_API int vae_model_open(vae_model **model, const char *path, const vae_model_options *opts);
/* Lets go of the model: it is freed once its sessions are freed too (a session holds its model),
 * so the two may be freed in any order; the handle is not to be used after this call. */
VAE_API void vae_model_free(vae_model *model);

typedef struct vae_model_info {
    const char *arch;          /* "wan2.1", "wan2.2", "seedvr2", "taesd", "taehv" */
    const char *config_json;   /* the detected configuration, upstream argument names */
    int can_encode, can_decode;
    int image_channels;        /* 3 */
    int latent_channels;       /* 16, 48, 32, ... */
    int spatial_factor;        /* 8 or 16 */
    int temporal_factor;       /* 4, or 1 for image models */
    int is_video;              /* 0 for per-image models (TAESD) */
    float image_min, image_max;/* pixel range of the video side: -1..1, or 0..1 for TAESD/TAEHV */
    int64_t param_count;
    int tensor_count;
    const char *file_dtypes;   /* e.g. "F32" or "BF16,F32" */
    const char *normalisation; /* human-readable description of the latent normalisation */
} vae_model_info;
/* Fills info; the strings stay valid until vae_model_free. */
VAE_API int vae_model_get_info(const vae_model *model, vae_model_info *info);

/* The latent normalisation: diffusion = (raw - mean[c]) / std[c] for c < n (returned count, up
 * to max). Models with raw latents (TAESD, TAEHV) return mean 0, std 1. */
VAE_API int vae_model_latent_norm(const vae_model *model, float *mean, float *std, int max);

/* Output shape for an input shape. op: 0 = decode (latent -> video), 1 = encode. */
VAE_API int vae_model_output_shape(const vae_model *model, int encode, const int64_t *in_shape, int in_ndim,
                           int64_t *out_shape, int *out_ndim);

/* A model with synthetic weights (the fixtures' rule) built in memory, for benchmarks and tests:
 * arch "wan2.1", "wan2.2", "seedvr2" or "taehv"; config_json as for vae_synth_checkpoint (NULL =
 * released). */
VAE_API int vae_model_synth(vae_model **model, const char *arch, const char *config_json);

/* Floating-point operations (2 per multiply-add) of encoding/decoding an input of this shape. */
VAE_API int vae_model_flops(const vae_model *model, int encode, const int64_t *in_shape, int in_ndim,
                    double *flops);

/* ---- sessions -------------------------------------------------------------------------------- */
/* A session runs one call at a time (decode, encode, plan, trim): a second one from another
 * thread while one runs is refused with VAE_EINVAL, never interleaved; vae_session_cancel and the
 * peak queries may come from any thread. vae_session_free must not race a running call. */
typedef struct vae_session vae_session;

/* The most devices one session shares its work among (vae_session_options.devices). */
#define VAE_MAX_DEVICES 8

/* How frames are split into spatial tiles when they do not fit the memory budget whole. */
typedef enum {
    VAE_TILE_AUTO = 0,  /* exact tiles: the output equals the untiled one (float rounding aside);
                         * the planner tiles only as much as the budget needs */
    VAE_TILE_NONE = 1,  /* whole frames; a budget they do not fit is an error */
    VAE_TILE_BLEND = 2  /* overlapping tiles run as separate images (statistics, attention and
                         * caches per tile), blended with raised-cosine ramps: not exact, for sizes
                         * whose exact floor does not fit */
} vae_tile_mode;

/* A group of processes (vae_session_options.world): an opaque id that one rank makes with
 * vae_group_id_create and hands to the others (the CLI's rendezvous over MASTER_ADDR, or
 * torch.distributed in vaec) before each creates its session with it. */
#define VAE_GROUP_ID_BYTES 128
typedef struct vae_group_id {
    unsigned char bytes[VAE_GROUP_ID_BYTES];
} vae_group_id;
/* A preview decoder (vae_session_options.preview), on the same weights: the models that have one
 * (TAEHV: upstream's decoder_time_upscale / decoder_space_upscale off) switch off their temporal
 * upscaling (one frame per latent frame), their spatial upscaling (latent-sized frames), or both.
 * Other models: VAE_EUNSUPPORTED naming `preview` at session creation. */
typedef enum {
    VAE_PREVIEW_NONE = 0,
    VAE_PREVIEW_TIME = 1,
    VAE_PREVIEW_SPACE = 2,
    VAE_PREVIEW_BOTH = 3
} vae_preview;
/* What each rank of a group of processes gets from a call (vae_session_options.group_output). */
typedef enum { VAE_GROUP_OUTPUT_ALL = 0, VAE_GROUP_OUTPUT_OWN = 1 } vae_group_output;
/* A new group id for sessions on `device`. CUDA: NCCL's unique id (VAE_EUNSUPPORTED where NCCL
 * does not load); the ranks may be on several nodes. CPU: a fresh name in this process's
 * registry: the ranks are threads of this process, each with its own session (tests, CI). */
VAE_API int vae_group_id_create(vae_device device, vae_group_id *id);


typedef struct vae_session_options {
    vae_device device;  /* VAE_DEVICE_CPU (default) or VAE_DEVICE_CUDA */
    vae_dtype dtype;    /* compute dtype; the CPU backend supports F32 only */
    int threads;        /* CPU threads, 0 = all cores */
    int device_index;   /* which GPU */
    /* Memory budget in bytes for everything the session holds on its device at once (weights,
     * activations, caches, scratch): 0 = the device's free memory minus a margin (CPU: available
     * RAM minus a margin). The planner picks frame granularity, tiles and their order to stay
     * under it, and a budget below the exact floor is an error that names the floor. */
    int64_t max_memory;
    vae_tile_mode tile_mode;
    /* VAE_TILE_AUTO: force exact tiles of this size in pixels of the video side (rounded to the
     * model's alignment); 0 = the planner's choice. */
    int tile_height, tile_width;
    /* VAE_TILE_BLEND: tile size and overlap in pixels of the video side (0: the cheapest grid
     * of even tiles whose plan fits the budget, an eighth of a tile). A given size whose plan
     * does not fit is made smaller until it does (a warning says so). */
    int blend_tile, blend_overlap;
    /* The developer switches' storage (vae_dev.h: vae_session_options_set with a VAE_PARAM_*
     * number p writes params[p] and sets bit p of params_set; unset slots take the environment
     * variable, else the default). vae_session_options_default leaves every slot unset. */
    int64_t params[64];
    uint64_t params_set; /* bit p: params[p] was set */
    /* Optional device allocator (CUDA sessions; NULL: cudaMalloc/cudaFree): every block of
     * device memory the session holds comes from alloc and goes back through free, so that a
     * host's memory pool (torch's caching allocator) serves and sees it. alloc returns NULL on
     * failure; stream is the session's CUDA stream (cudaStream_t) the block is used on. free may
     * come while work queued on that stream still uses the block: the host hands it to other
     * streams only after that work (as torch's caching allocator and cudaFree do). The engine
     * caches blocks it got, but never holds more of them than its most bytes live at once (so
     * the host's count of a call's peak is the engine's), until vae_session_trim or
     * vae_session_free. */
    void *(*dev_alloc)(size_t bytes, int device_index, void *stream, void *user);
    void (*dev_free)(void *ptr, size_t bytes, int device_index, void *stream, void *user);
    void *dev_alloc_user;
    /* Optional with dev_alloc: bytes the host's pool holds free (cached, not given back to the
     * driver), which the default budget (max_memory 0) counts as available besides the
     * driver's free memory. */
    int64_t (*dev_pool_free)(int device_index, void *user);
    /* CUDA: where the conv path choices (timed on first sight of each shape) are kept between
     * processes, so that a later process's first call runs at warm speed. NULL: the environment's
     * VAE_TUNE_CACHE where it is set, else the user's cache directory ($XDG_CACHE_HOME or
     * ~/.cache, /vae.c/cuda-tune.txt); "": none. Entries are keyed by GPU, driver, cuDNN and
     * engine versions, dtype and shape; concurrent writers and damaged files are safe (a bad
     * line is ignored and timed again). */
    const char *tune_cache;
    /* A device group: n_devices > 1 devices (indices in devices[]; CUDA GPUs of this process)
     * share each call's work; 0 or 1: device_index alone. A GPU listed k times runs k lanes
     * that split its memory (for tests on one GPU; they overlap one lane's host work with the
     * other's kernels). Where the exact plan has
     * tiles (Wan2.1, Wan2.2 and TAESD-family tile-major plans), each device computes the
     * latent-resolution part itself and every n-th tile, one host thread per device, and the
     * output equals the one-device tiled output bit for bit; the planner takes tiles for this
     * when sharing them beats whole frames on one device. Models with GroupNorm over every
     * frame (SeedVR2) run in row bands, one per device, whose GroupNorm sums are all-reduced
     * (NCCL where it loads) and whose latent part shares its attention's queries; the output
     * equals one device's up to the rounding of those sums. Tensors in device memory must be on devices[0]; max_memory is each device's budget. CPU:
     * n_devices lanes of threads / n_devices threads each (the same code path, for tests). */
    int n_devices;
    int devices[VAE_MAX_DEVICES];
    /* One rank of a group of processes (world > 1; 0 or 1: none), e.g. one process per GPU
     * started by torchrun or mpirun, on one node or several. Every rank creates its session with
     * the same model, options and world, its own rank (0 .. world-1) and device (device_index),
     * and the same group_id (vae_group_id_create on one rank, handed to the others); creation
     * returns once every rank has joined. Every call is then collective: each rank calls with
     * the same input (its own copy, host or its device's memory) in the same order. The ranks
     * agree on one plan (for the least budget among them; a plan that differs between ranks
     * fails on every rank), and each computes its share of it as one device of a device group
     * would: its tiles of a tile-major plan (each rank computing the latent part itself), or its
     * row band of a band plan (GroupNorm sums all-reduced over NCCL); a whole-frame plan runs on
     * every rank. group_output: VAE_GROUP_OUTPUT_ALL: every rank gets the whole output (equal
     * to one process's); VAE_GROUP_OUTPUT_OWN: only the tiles or band it computed, zeros
     * elsewhere (no exchange of the output). Not together with n_devices > 1. */
    int rank, world;
    vae_group_id group_id;
    int group_output;
    /* vae_preview: the session decodes with the model's preview decoder (its output shape:
     * vae_session_output_shape); encoding is unchanged. */
    int preview;
} vae_session_options;
VAE_API void vae_session_options_default(vae_session_options *opts);

VAE_API int vae_session_create(vae_session **session, const vae_model *model,
                       const vae_session_options *opts);
VAE_API void vae_session_free(vae_session *session);
/* vae_model_output_shape for this session's programs (a preview decoder's output differs). */
VAE_API int vae_session_output_shape(const vae_session *session, int encode,
                                     const int64_t *in_shape, int in_ndim, int64_t *out_shape,
                                     int *out_ndim);

/* Called once per chunk of output frames, in order. frames: float32 [C][n][H][W] for frames
 * first_frame .. first_frame+n-1 of the output (channel-major, like the PyTorch layout with T
 * restricted to the chunk). Return non-zero to stop (the call then returns VAE_EINTERRUPTED). */
typedef int (*vae_frames_fn)(const float *frames, int first_frame, int n, int channels, int height,
                             int width, void *user);

/* Decodes a latent [1,C,T,h,w] (diffusion space; image models also accept [1,C,h,w]). */
VAE_API int vae_decode(vae_session *session, const vae_tensor *latent, vae_frames_fn on_frames, void *user);
/* Encodes a video [1,3,T,H,W] (image models also accept [1,3,H,W]) to the posterior mean in
 * diffusion space. */
VAE_API int vae_encode(vae_session *session, const vae_tensor *video, vae_frames_fn on_frames, void *user);

/* Convenience: runs the whole op and returns a newly allocated float32 tensor (free with
 * vae_tensor_free). The output keeps the input's rank (4-D in, 4-D out). */
VAE_API int vae_decode_tensor(vae_session *session, const vae_tensor *latent, vae_tensor *out);
VAE_API int vae_encode_tensor(vae_session *session, const vae_tensor *video, vae_tensor *out);
VAE_API void vae_tensor_free(vae_tensor *t);

/* Progress of a call: done of total units of work (input chunks per tile and part); called on
 * the calling thread between units. Return non-zero to stop (VAE_EINTERRUPTED). */
typedef int (*vae_progress_fn)(int64_t done, int64_t total, void *user);

typedef struct vae_call_options {
    /* CUDA sessions: the caller's cudaStream_t (NULL: the legacy default stream). The engine's
     * work is ordered after everything queued on it before the call, and everything queued on
     * it after the call runs after the engine's work (the call returns without waiting for the
     * device), as if the engine had run on that stream (PyTorch's current stream). */
    void *cuda_stream;
    vae_progress_fn progress;
    void *progress_user;
} vae_call_options;
VAE_API void vae_call_options_default(vae_call_options *o);

/* Decodes `latent` (diffusion space) into `out`, which the caller allocated with the shape
 * vae_session_output_shape gives (any dtype, any strides). Input and output may each be host or
 * device tensors: a CUDA session reads and writes device tensors on its GPU directly (no host
 * copy; tiles write their part of the output in place). A CPU session takes host tensors only.
 * On failure the output holds no meaningful values. opts NULL: defaults. */
VAE_API int vae_decode_into(vae_session *session, const vae_tensor *latent, const vae_tensor *out,
                            const vae_call_options *opts);
/* Encodes `video` into `out` (the posterior mean in diffusion space), as vae_decode_into. */
VAE_API int vae_encode_into(vae_session *session, const vae_tensor *video, const vae_tensor *out,
                            const vae_call_options *opts);

/* Asks a running call of this session (on another thread) to stop: it returns VAE_EINTERRUPTED
 * at the next unit of work. Safe from any thread and from signal handlers; a call that starts
 * after it clears the request. */
VAE_API void vae_session_cancel(vae_session *session);
/* Gives the device memory the session cached between calls back (to cudaFree or dev_free),
 * the host memory it keeps for the output of tiled calls (up to VAE_EXEC_HOST_MB) and the
 * parameters staged at creation (VAE_PARAM_CUDA_WARM); the next call allocates again. */
VAE_API int vae_session_trim(vae_session *session);

/* The plan for an input shape under the session's options, before running (a host reserving
 * memory asks it): how frames are tiled and streamed, and the predicted peak. */
typedef enum { VAE_ORDER_WHOLE = 0, VAE_ORDER_TILED = 1, VAE_ORDER_BLEND = 2 } vae_plan_order;
typedef struct vae_plan_info {
    vae_plan_order order;        /* whole frames, exact tiles (tile-major), blended tiles */
    int tiles_y, tiles_x;        /* 1 x 1 for whole frames */
    int tile_height, tile_width; /* exact: owned tile of the tiled stage's output (decode: video
                                  * pixels); blend: the input crop */
    int frame_loops;             /* stages that stream one frame at a time */
    int strips;                  /* exact tiles as this many column strips that hand their edge
                                  * columns on (no halos recomputed; tiles 1 x strips), or 0 */
    int step_frames;             /* input frames a step after the first: the model's chunk, or
                                  * several of them (whole frames, VAE_PARAM_EXEC_CHUNKS) */
    int64_t peak_bytes;          /* predicted peak, as vae_session_peak_bytes counts it */
    int64_t floor_bytes;         /* the smallest exact plan's peak */
    int64_t budget_bytes;        /* the budget it was made for (0: unlimited) */
    double flops;                /* including the tiles' redundant halo work */
    char text[1024];             /* the decision in words (what -v prints) */
    int host_caches;             /* whole frames: ops whose causal cache lives in pinned host
                                  * memory (VAE_PARAM_PLAN_OFFLOAD), or 0 */
    int64_t host_cache_bytes;    /* their host memory */
} vae_plan_info;
/* VAE_ENOMEM (info filled, peak and floor telling what is needed) when nothing fits the budget. */
VAE_API int vae_session_plan(vae_session *session, int encode, const int64_t *shape, int ndim,
                     vae_plan_info *info);

/* Peak bytes of backend memory held during the session's last encode/decode call (before any:
 * since creation; a device group: the largest of its devices'). CUDA: everything the backend
 * held on the device at its worst moment (weights in the session's layouts, activations and
 * caches, scratch, cuDNN workspace). CPU: activations, caches and stores (the weights are the
 * model's, shared by its sessions). */
VAE_API int64_t vae_session_peak_bytes(const vae_session *session);
/* The same for each device of the session (a device group: devices[k] of the options) into
 * peaks[0 .. max); returns the number of devices (1 without a group). */
VAE_API int vae_session_device_peaks(const vae_session *session, int64_t *peaks, int max);

/* ---- streams: the input a step at a time ------------------------------------------------------
 * A stream decodes latents (or encodes video frames) as they arrive -- a latent frame at a time
 * while a diffusion model samples, a camera's frames -- and hands each output frame out as soon
 * as the model has it: a push returns once the frames its input completes are handed to
 * on_frames. The output is the one vae_decode / vae_encode gives for the whole input, bit for
 * bit on the CPU, however the input is split into pushes: the stream runs the model's own
 * causal steps (Wan2.1/2.2: the first latent frame, then one at a time, or the first video
 * frame, then four at a time; TAEHV: one latent, or four frames) with the causal caches
 * (Wan's CausalConv3d, TAEHV's MemBlock memory) kept in the session between pushes, so it holds
 * those caches and one step's buffers whatever the stream's length. on_frames is called as for
 * vae_decode, first_frame counting from the stream's first output frame; a push may hand out
 * none (TAEHV's decoder trims its first frames; an encoder waits for a step's four frames).
 *
 * One stream at a time per session; while it is open, the session's other calls (decode,
 * encode, plan, trim) are refused with VAE_EINVAL. vae_session_cancel stops a running push or
 * end (VAE_EINTERRUPTED); vae_session_free frees an open stream. A push or end that fails after
 * its arguments were checked (the input has NaN, a cancel, out of memory, on_frames returned
 * non-zero) ends the stream: its state is freed and the next stream begins afresh. Runs on one
 * device in whole frames: a session of several devices or ranks, blended tiles, or frames whose
 * plan needs tiles under the session's budget are refused at vae_stream_begin
 * (VAE_EUNSUPPORTED, naming the reason). Input tensors are host memory (any dtype a decode takes,
 * any strides). */

/* Opens a stream on the session. encode 0: latents in, video frames out (the session's decoder,
 * with its preview mode); 1: video frames in, latents out. shape: the input's shape as
 * vae_decode / vae_encode take it, [1, C, T, H, W] (ndim 5); T is not read (a stream's length is
 * not known ahead) and every push must have the other four. VAE_EINVAL when a stream is already
 * open; VAE_ESHAPE naming the dimension and what was expected. */
VAE_API int vae_stream_begin(vae_session *session, int encode, const int64_t *shape, int ndim);
/* The next frames of the input: chunk [1, C, T, H, W] with T >= 0 frames (latent frames for a
 * decoder), in host memory. Runs every step they complete and hands the frames it makes to
 * on_frames (may be NULL) before returning; frames left over wait for the next push. */
VAE_API int vae_stream_push(vae_session *session, const vae_tensor *chunk, vae_frames_fn on_frames,
                            void *user);
/* Ends the stream: an encoder that pads its input (TAEHV: to a multiple of four frames, by
 * repeating the last one) runs its last step now and hands its frames to on_frames; frames of an
 * unfinished step of another model are not used (as vae_encode does: Wan encodes 1 + 4k frames).
 * VAE_ESHAPE when the stream never completed a step (too few frames for any output). The stream
 * is closed whatever the result. */
VAE_API int vae_stream_end(vae_session *session, vae_frames_fn on_frames, void *user);
/* Closes the stream without its last step (nothing handed out). VAE_EINVAL when a push runs on
 * another thread (stop it with vae_session_cancel first); VAE_OK when no stream was open. */
VAE_API int vae_stream_abort(vae_session *session);
/* The open stream: 0 when none; else 1, and (each pointer may be NULL) *encode, the input frames
 * pushed so far (*frames_in) and the output frames handed out (*frames_out). Not while a push,
 * end or abort of the session runs on another thread. */
VAE_API int vae_stream_status(const vae_session *session, int *encode, int64_t *frames_in,
                              int64_t *frames_out);

/* ---- files ----------------------------------------------------------------------------------- */
/* Reads one tensor from .safetensors/.pth/.gguf/.npy as float32. name NULL = the file must hold
 * exactly one tensor. Free with vae_tensor_free. */
VAE_API int vae_tensor_load(const char *path, const char *name, vae_tensor *out);
/* Writes named float32 tensors to a .safetensors file (temporary name, then rename). */
VAE_API int vae_tensor_save(const char *path, const char *const *names, const vae_tensor *tensors, int n);

/* Opens a model from named tensors in host memory (e.g. a framework module's state dict) instead
 * of a file: n tensors, PyTorch key names and shapes, float32/float16/bfloat16 (strides are
 * honoured). The data is converted when the model is built and not referenced afterwards. */
VAE_API int vae_model_open_tensors(vae_model **model, const char *const *names,
                                   const vae_tensor *tensors, int n, const vae_model_options *opts);

/* Writes a checkpoint of arch ("wan2.1", "wan2.2", "seedvr2", "taehv") with the synthetic-weight
 * rule of the fixtures. config_json: upstream constructor arguments; keys left out take released values. */
VAE_API int vae_synth_checkpoint(const char *arch, const char *config_json, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* VAE_H */
