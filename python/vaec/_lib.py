"""ctypes binding of libvae.so (include/vae.h, vae_dev.h): structs, signatures, errors, logging.

Only this module knows the C layout. Nothing here copies tensor data: tensors are passed to the
library as pointers with shape and strides.
"""
import ctypes as C
import logging
import os
import pathlib
import sys

_log = logging.getLogger("vaec")


class Error(RuntimeError):
    """A failure reported by the library: `code` (VAE_E*), `name` ("EINVAL"...), and the
    library's message (which file, tensor or argument, and what was expected)."""

    def __init__(self, code, message):
        self.code = code
        self.name = _CODES.get(code, str(code))
        super().__init__(message)


_CODES = {-1: "EINVAL", -2: "EIO", -3: "EFORMAT", -4: "ENOMEM", -5: "EUNSUPPORTED",
          -6: "ESHAPE", -7: "EKEY", -8: "EDTYPE", -9: "ENAN", -10: "EDEVICE",
          -11: "EINTERRUPTED"}
EINTERRUPTED = -11

DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_FP8 = 0, 1, 2, 3
DEVICE_CPU, DEVICE_CUDA = 0, 1
# vae_param (include/vae_dev.h, the developer switches): its values are written out there and
# never renumbered, so these stay valid
PARAM_EXEC_HOST_MB = 4  # VAE_PARAM_EXEC_HOST_MB
PARAM_FP8_CONVS = 31  # VAE_PARAM_FP8_CONVS
PARAM_FP8_SHAPES = 36  # VAE_PARAM_FP8_SHAPES
PARAM_FP8_ERROR = 40  # VAE_PARAM_FP8_ERROR
TILE_AUTO, TILE_NONE, TILE_BLEND = 0, 1, 2
GROUP_ID_BYTES = 128  # VAE_GROUP_ID_BYTES
GROUP_OUTPUT_ALL, GROUP_OUTPUT_OWN = 0, 1


class Tensor(C.Structure):
    _fields_ = [("ndim", C.c_int), ("shape", C.c_int64 * 8), ("dtype", C.c_int),
                ("data", C.c_void_p), ("strides", C.c_int64 * 8), ("device", C.c_int),
                ("device_index", C.c_int), ("storage_bytes", C.c_int64)]


DevAlloc = C.CFUNCTYPE(C.c_void_p, C.c_size_t, C.c_int, C.c_void_p, C.c_void_p)
DevFree = C.CFUNCTYPE(None, C.c_void_p, C.c_size_t, C.c_int, C.c_void_p, C.c_void_p)
DevPoolFree = C.CFUNCTYPE(C.c_int64, C.c_int, C.c_void_p)
Progress = C.CFUNCTYPE(C.c_int, C.c_int64, C.c_int64, C.c_void_p)
LogFn = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)
# vae_frames_fn: frames (float32 [C][n][H][W]), first_frame, n, channels, height, width, user
FramesFn = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_int, C.c_int, C.c_int, C.c_int,
                       C.c_void_p)


class GroupId(C.Structure):
    _fields_ = [("bytes", C.c_ubyte * GROUP_ID_BYTES)]


class SessionOptions(C.Structure):
    _fields_ = [("device", C.c_int), ("dtype", C.c_int), ("threads", C.c_int),
                ("device_index", C.c_int), ("max_memory", C.c_int64), ("tile_mode", C.c_int),
                ("tile_height", C.c_int), ("tile_width", C.c_int), ("blend_tile", C.c_int),
                ("blend_overlap", C.c_int), ("params", C.c_int64 * 64),
                ("params_set", C.c_uint64), ("dev_alloc", DevAlloc), ("dev_free", DevFree),
                ("dev_alloc_user", C.c_void_p), ("dev_pool_free", DevPoolFree),
                ("tune_cache", C.c_char_p), ("n_devices", C.c_int), ("devices", C.c_int * 8),
                ("rank", C.c_int), ("world", C.c_int), ("group_id", GroupId),
                ("group_output", C.c_int), ("preview", C.c_int)]


class DeviceInfo(C.Structure):
    _fields_ = [("name", C.c_char * 256), ("compute_major", C.c_int), ("compute_minor", C.c_int),
                ("multiprocessors", C.c_int), ("total_memory", C.c_int64),
                ("free_memory", C.c_int64), ("driver_version", C.c_int),
                ("runtime_version", C.c_int), ("cudnn_version", C.c_int), ("fp16", C.c_int),
                ("bf16", C.c_int), ("fp32", C.c_int), ("kernels", C.c_char * 256)]


class ModelOptions(C.Structure):
    _fields_ = [("prefix", C.c_char_p), ("arch", C.c_char_p), ("config_json", C.c_char_p)]


class ModelInfo(C.Structure):
    _fields_ = [("arch", C.c_char_p), ("config_json", C.c_char_p), ("can_encode", C.c_int),
                ("can_decode", C.c_int), ("image_channels", C.c_int),
                ("latent_channels", C.c_int), ("spatial_factor", C.c_int),
                ("temporal_factor", C.c_int), ("is_video", C.c_int), ("image_min", C.c_float),
                ("image_max", C.c_float), ("param_count", C.c_int64), ("tensor_count", C.c_int),
                ("file_dtypes", C.c_char_p), ("normalisation", C.c_char_p)]


class CallOptions(C.Structure):
    _fields_ = [("cuda_stream", C.c_void_p), ("progress", Progress),
                ("progress_user", C.c_void_p)]


class PlanInfo(C.Structure):
    _fields_ = [("order", C.c_int), ("tiles_y", C.c_int), ("tiles_x", C.c_int),
                ("tile_height", C.c_int), ("tile_width", C.c_int), ("frame_loops", C.c_int),
                ("strips", C.c_int), ("step_frames", C.c_int), ("peak_bytes", C.c_int64),
                ("floor_bytes", C.c_int64), ("budget_bytes", C.c_int64), ("flops", C.c_double),
                ("text", C.c_char * 1024), ("host_caches", C.c_int),
                ("host_cache_bytes", C.c_int64)]


_STRUCTS = {"vae_tensor": Tensor, "vae_session_options": SessionOptions,
            "vae_model_options": ModelOptions, "vae_model_info": ModelInfo,
            "vae_call_options": CallOptions, "vae_plan_info": PlanInfo, "vae_device_info": DeviceInfo}


def _package_libraries():
    """The libraries to try, best first: $VAEC_LIBRARY (a developer's build) alone, else the
    package's libvae.so, then libvae_cpu.so (the same library without the CUDA backend, in
    packages built with CUDA)."""
    env = os.environ.get("VAEC_LIBRARY")
    if env:
        return [env]
    here = pathlib.Path(__file__).resolve().parent
    found = [str(here / n) for n in ("libvae.so", "libvae_cpu.so", "libvae.dylib", "vae.dll")
             if (here / n).exists()]
    if not found:
        raise ImportError("vaec: libvae.so is not installed next to the package (pip install . "
                          "builds it) and VAEC_LIBRARY is not set")
    return found


def _wheel_library(soname):
    """The path of a shared library of the nvidia-* wheels (cuda runtime, cuBLAS, cuDNN, NCCL:
    the ones torch installs), or None."""
    try:
        import nvidia  # a namespace package: one path entry per site-packages that has some
    except ImportError:
        return None
    for base in nvidia.__path__:
        for hit in sorted(pathlib.Path(base).glob("*/lib/" + soname)):
            return str(hit)
    return None


def _open_with_cuda_libraries(path):
    """CDLL(path), loading first from the nvidia-* wheels each CUDA library the dynamic linker
    does not find by itself (it names them one at a time)."""
    loaded = set()
    while True:
        try:
            return C.CDLL(path)
        except OSError as e:
            missing = str(e).split(":")[0].strip()  # "libcublas.so.13: cannot open ..."
            wheel = None
            if "/" not in missing and missing not in loaded:
                wheel = _wheel_library(missing)
            if not wheel:
                raise
            C.CDLL(wheel, mode=C.RTLD_GLOBAL)
            loaded.add(missing)


# why the package runs without CUDA, when it does (vaec.info())
fallback_reason = None


def _torch_first():
    """Imports torch, where it is installed, before libvae.so: its libraries (the CUDA runtime
    and cuBLAS, OpenMP, the C++ runtime) then come first, the order every torch host (ComfyUI,
    diffusers) has. The other order let torch crash the interpreter on its import (torch 2.11
    cu130: "free(): invalid pointer" with the CUDA build of libvae.so already loaded). A torch
    that fails to import is left alone: the library does not need it."""
    import importlib.util
    if "torch" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    try:
        import torch  # noqa: F401
    except Exception as e:  # a broken torch is the host's; vaec runs without it
        _log.debug("vaec: torch did not import (%s); loading libvae.so without it", e)


def _open_library():
    global fallback_reason
    _torch_first()
    errors = []
    for path in _package_libraries():
        try:
            lib = _open_with_cuda_libraries(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        if errors:
            fallback_reason = ("the CUDA build could not be loaded (" + "; ".join(errors) +
                               "): install torch with CUDA (its nvidia-* wheels) or the CUDA "
                               "toolkit's libraries")
        return lib
    raise ImportError("vaec: no usable libvae: " + "; ".join(errors))


_P, _I, _V = C.c_void_p, C.c_int, None
_SIGS = {
    "vae_version_string": (C.c_char_p, []),
    "vae_struct_size": (C.c_size_t, [C.c_char_p]),
    "vae_strerror": (C.c_char_p, [_I]),
    "vae_last_error": (C.c_char_p, []),
    "vae_parse_size": (_I, [C.c_char_p, C.POINTER(C.c_int64)]),
    "vae_set_log_callback": (_V, [LogFn, _P, _I]),
    "vae_build_info": (C.c_char_p, []),
    "vae_device_available": (_I, [_I]),
    "vae_device_compiled": (_I, [_I]),
    "vae_device_count": (_I, [_I]),
    "vae_device_get_info": (_I, [_I, _I, C.POINTER(DeviceInfo)]),
    "vae_model_options_default": (_V, [C.POINTER(ModelOptions)]),
    "vae_model_open": (_I, [C.POINTER(_P), C.c_char_p, C.POINTER(ModelOptions)]),
    "vae_model_open_tensors": (_I, [C.POINTER(_P), C.POINTER(C.c_char_p), C.POINTER(Tensor), _I,
                                    C.POINTER(ModelOptions)]),
    "vae_model_free": (_V, [_P]),
    "vae_model_get_info": (_I, [_P, C.POINTER(ModelInfo)]),
    "vae_model_latent_norm": (_I, [_P, C.POINTER(C.c_float), C.POINTER(C.c_float), _I]),
    "vae_model_output_shape": (_I, [_P, _I, C.POINTER(C.c_int64), _I, C.POINTER(C.c_int64),
                                    C.POINTER(_I)]),
    "vae_session_output_shape": (_I, [_P, _I, C.POINTER(C.c_int64), _I, C.POINTER(C.c_int64),
                                      C.POINTER(_I)]),
    "vae_session_options_default": (_V, [C.POINTER(SessionOptions)]),
    "vae_session_options_set": (_I, [C.POINTER(SessionOptions), _I, C.c_int64]),
    "vae_session_create": (_I, [C.POINTER(_P), _P, C.POINTER(SessionOptions)]),
    "vae_session_free": (_V, [_P]),
    "vae_session_cancel": (_V, [_P]),
    "vae_session_trim": (_I, [_P]),
    "vae_session_peak_bytes": (C.c_int64, [_P]),
    "vae_session_device_peaks": (_I, [_P, C.POINTER(C.c_int64), _I]),
    "vae_session_plan": (_I, [_P, _I, C.POINTER(C.c_int64), _I, C.POINTER(PlanInfo)]),
    "vae_call_options_default": (_V, [C.POINTER(CallOptions)]),
    "vae_group_id_create": (_I, [_I, C.POINTER(GroupId)]),
    "vae_synth_checkpoint": (_I, [C.c_char_p, C.c_char_p, C.c_char_p]),
    "vae_tensor_check": (_I, [C.POINTER(Tensor), C.c_char_p, _I, C.POINTER(Tensor)]),
    "vae_decode_into": (_I, [_P, C.POINTER(Tensor), C.POINTER(Tensor), C.POINTER(CallOptions)]),
    "vae_encode_into": (_I, [_P, C.POINTER(Tensor), C.POINTER(Tensor), C.POINTER(CallOptions)]),
    "vae_stream_begin": (_I, [_P, _I, C.POINTER(C.c_int64), _I]),
    "vae_stream_push": (_I, [_P, C.POINTER(Tensor), FramesFn, _P]),
    "vae_stream_end": (_I, [_P, FramesFn, _P]),
    "vae_stream_abort": (_I, [_P]),
    "vae_stream_status": (_I, [_P, C.POINTER(_I), C.POINTER(C.c_int64), C.POINTER(C.c_int64)]),
}


def _load():
    lib = _open_library()
    for name, (res, args) in _SIGS.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    # this module lays the structs out itself: they must match the library's
    for cname, cls in _STRUCTS.items():
        if lib.vae_struct_size(cname.encode()) != C.sizeof(cls):
            raise ImportError(f"vaec: {cname} is {lib.vae_struct_size(cname.encode())} bytes in "
                              f"{lib._name} but {C.sizeof(cls)} here: the library and the "
                              "package are from different versions")
    return lib


lib = _load()


def check(rc):
    """Raises Error with the library's message for a non-zero return code."""
    if rc != 0:
        msg = (lib.vae_last_error() or b"").decode("utf-8", "replace")
        raise Error(rc, msg or lib.vae_strerror(rc).decode())
    return rc


_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


@LogFn
def _on_log(level, message, user):
    _log.log(_LEVELS.get(level, logging.INFO), "%s", message.decode("utf-8", "replace"))


lib.vae_set_log_callback(_on_log, None, 1)  # INFO and up go to logging.getLogger("vaec")
