"""vae.c nodes for ComfyUI: put this folder in ComfyUI/custom_nodes (see README.md)."""
from . import nodes, previews, vaec_core

# the engine's log lines only at ComfyUI's debug level: a decode prints the node's one line
vaec_core.quiet_engine_log()
# live previews of Wan and Hunyuan latents from a TAEHV file in models/vae_approx
previews.install()

NODE_CLASS_MAPPINGS = {name: getattr(nodes, name) for name in vaec_core.NODE_NAMES}
NODE_DISPLAY_NAME_MAPPINGS = dict(vaec_core.NODE_NAMES)

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
