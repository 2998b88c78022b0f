/* wan21.c -- the Wan2.1 VAE (Wan-Video wan/modules/vae.py), also used by Wan2.2-A14B, Qwen-Image.
 *
 * Encoder: conv1 3->dim; per level num_res_blocks ResidualBlocks then a Resample (downsample2d or
 * downsample3d, none after the last level); middle (RB, attention, RB); head to 2*z_dim; then the
 * top-level conv1 (mu rows) and the normalisation to diffusion space.
 * Decoder: normalisation to VAE space, top-level conv2, conv1 z_dim->dim*mult[-1], middle, per
 * level num_res_blocks+1 ResidualBlocks then upsample3d/upsample2d (Conv2d halves the width), head
 * to 3.
 * wan_common.c builds both versions (is22 tells their differences apart); this file is the
 * version's descriptor.
 */
#include "models/wan_common.h"

WAN_VERSION_HOOKS(wan21, 0)

const vae_arch vae_arch_wan21 = {
    .name = "wan2.1",
    VAE_ARCH_HOOKS(wan21),
    WAN_VIDEO_GEOMETRY(8),
    .fp8_convs = {16, 0}, /* dec 4.42e-2 on the GPU (18: 4.63e-2); enc every one that may */
};
