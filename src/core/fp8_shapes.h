/* fp8_shapes.h -- the conv shapes of the E4M3 kernels, as one table of data (VAE_DTYPE_FP8).
 *
 * Which convs run in E4M3 is decided from these rows alone: core's rule (op.h vae_op_fp8_kernel,
 * vae_op_fp8_rule) reads the rows marked `rule`, the session keeps the convs its backend runs
 * (program.h vae_program_pick_fp8, which writes the kernel into op->fp8_kernel), and the CUDA
 * backend's kernels answer their E4M3 "takes" from their own row (cuda_igemm.cu, cuda_mma_conv.cu)
 * instead of restating its numbers. Backends then read op->fp8 and op->fp8_kernel; nobody
 * re-derives them.
 *
 * The rule rows are the sm_90a kernels' shapes; they define the E4M3 convs of every backend (the
 * CPU emulation, the mma.sync kernel of other GPUs), so that an error measured on the CPU is the
 * Hopper GPU's. Temporal convs only (kt > 1): the 2-D ones measured no faster than bf16.
 * - the implicit GEMM (CUTLASS): c_in a multiple of 64 (its K blocks), c_out of 96 or 128 (its
 *   filter tiles);
 * - the halo-tile kernel: 3 x 3 with padding 1, 96 filters, c_in a multiple of 96 (where the GEMM
 *   does not take it, e.g. Wan2.1's 96 -> 96; a backend tries the rows in the table's order).
 * The mma.sync row is no rule: that kernel runs the rule's convs where its row takes them too.
 * Every row's convs have the plain geometry when `plain` (stride 1, no upsampling, the same
 * spatial padding on both sides: op.h vae_op_plain_geometry).
 *
 * A row may only be narrowed below what its kernel was built for: the kernels still check their
 * own build limits (tiles that must divide the problem), named as such beside them.
 */
#ifndef VAE_CORE_FP8_SHAPES_H
#define VAE_CORE_FP8_SHAPES_H

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel that runs convs in E4M3 (op->fp8_kernel; backend.h fp8_conv returns one) */
typedef enum vae_fp8_kernel {
    VAE_FP8_NONE = 0, /* not in E4M3 */
    VAE_FP8_GEMM,     /* the implicit GEMM (CUTLASS, sm_90a) */
    VAE_FP8_HALO,     /* the halo-tile kernel (sm_90a) */
    VAE_FP8_MMA,      /* the mma.sync implicit GEMM (sm_89+, the GPUs without sm_90a kernels) */
    VAE_FP8_EMULATED  /* the CPU backend's emulation: any conv, no row */
} vae_fp8_kernel;

/* One row: the convs a kernel takes. 0 (-1 for pad) in a field: any. */
typedef struct vae_fp8_shape {
    vae_fp8_kernel kernel;
    int rule;              /* 1: among the convs every backend runs in E4M3 (see above) */
    int plain;             /* stride 1, no upsampling, symmetric spatial padding */
    int min_kt;            /* temporal taps, at least */
    int taps;              /* kh == kw == taps */
    int pad;               /* spatial padding on each side */
    int c_in_multiple;     /* c_in a multiple of it */
    int c_out_multiple[2]; /* c_out a multiple of one of them (0: unused) */
    int c_out;             /* c_out exactly */
} vae_fp8_shape;

/* A conv as the rows see it (a backend's kernels fill it from their arguments) */
typedef struct vae_fp8_conv {
    int kt, kh, kw;
    int ph, pw; /* spatial padding (before; the same after where plain) */
    int c_in, c_out;
    int plain; /* stride 1, no upsampling, symmetric spatial padding */
} vae_fp8_conv;

/* row takes conv c */
int vae_fp8_shape_takes(const vae_fp8_shape *row, const vae_fp8_conv *c);
/* The first rule row that takes c: its kernel; VAE_FP8_NONE where none does */
vae_fp8_kernel vae_fp8_shapes_rule(const vae_fp8_conv *c);
/* The row of kernel k takes c (0 where the table has no row of k) */
int vae_fp8_kernel_takes(vae_fp8_kernel k, const vae_fp8_conv *c);

/* Tests only (the mutation test): the table in force replaced by rows [0, n) (kept by the
 * caller until restored), NULL: the built-in one again. Not thread-safe: between sessions. */
void vae_fp8_shapes_swap(const vae_fp8_shape *rows, int n);
/* The table in force: its rows (*n of them) */
const vae_fp8_shape *vae_fp8_shapes(int *n);

#ifdef __cplusplus
}
#endif

#endif
