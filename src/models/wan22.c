/* wan22.c -- the Wan2.2 VAE (Wan-Video wan/modules/vae2_2.py; Wan2.2 TI2V-5B), 16x16x4, z_dim 48.
 *
 * Encoder: patchify (2x2 -> 12 channels), conv1 12->dim, per level a Down_ResidualBlock
 * (num_res_blocks ResidualBlocks then downsample2d/3d, plus the parameter-free AvgDown3D shortcut
 * of the block input), middle, head to 2*z_dim, top-level conv1 (mu rows), normalisation. Decoder:
 * normalisation, conv2, conv1 z_dim->dec_dim*mult[-1], middle, per level an Up_ResidualBlock
 * (num_res_blocks+1 ResidualBlocks then upsample3d/2d with Conv2d dim->dim, plus the DupUp3D
 * shortcut; the last level has neither), head to 12, unpatchify. Neither direction clamps or scales
 * anything beyond the latent normalisation (the reference's clamp to [-1, 1] is in its wrapper and
 * left to the caller).
 * wan_common.c builds both versions (is22 tells their differences apart); this file is the
 * version's descriptor.
 */
#include "models/wan_common.h"

WAN_VERSION_HOOKS(wan22, 1)

const vae_arch vae_arch_wan22 = {
    .name = "wan2.2",
    VAE_ARCH_HOOKS(wan22),
    WAN_VIDEO_GEOMETRY(16),
    .fp8_convs = {24, 0}, /* dec 4.02e-2 on the GPU (26: 4.51e-2, no faster); enc all */
};
