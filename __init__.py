"""vae.c's ComfyUI nodes for a clone of this repository in ComfyUI/custom_nodes: the node pack is
comfyui/ (see comfyui/README.md), loaded here with relative imports as ComfyUI loads any folder.

The nodes import ComfyUI's modules, so outside ComfyUI (pytest collecting the repository imports
this file) it defines no nodes instead of failing; inside ComfyUI, folder_paths and comfy are
imported before any custom node is.
"""
import sys

if "folder_paths" in sys.modules and "comfy" in sys.modules:
    from .comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
else:
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = {}, {}

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
