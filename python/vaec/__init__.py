"""vaec: the vae.c engine for torch tensors (Wan2.1/2.2, SeedVR2, TAESD VAEs).

    m = vaec.load("wan_2.1_vae.safetensors", device="cuda", dtype="bf16")
    video = m.decode(latent)     # latent [B,C,T,h,w] (diffusion space) -> video [B,3,T',H,W]
    latent = m.encode(video)

Tensors stay where they are: CUDA tensors are read and written by the engine in place on torch's
current stream (no host copy), CPU tensors by the CPU backend. Failures raise vaec.Error with the
library's message.

One process per GPU (torchrun): each rank opens the model with the group and calls with the same
input; the ranks share out the tiles (or SeedVR2's row bands) and each gets the whole output:

    torch.distributed.init_process_group("nccl"); torch.cuda.set_device(local_rank)
    m = vaec.load(path, device="cuda", process_group=True)   # collective
    video = m.decode(latent)                                 # collective, latent on every rank
"""
import contextlib
import ctypes as C
import json
import threading

from . import _lib
from ._lib import Error

__all__ = ["load", "from_state_dict", "Model", "Error", "version", "build_info", "info",
           "cuda_available", "synth_checkpoint", "group_id_create"]


def version():
    return _lib.lib.vae_version_string().decode()


def build_info():
    return _lib.lib.vae_build_info().decode()


def cuda_available():
    return bool(_lib.lib.vae_device_available(_lib.DEVICE_CUDA))


def info():
    """What this installation runs: {"version", "library" (the path loaded), "build",
    "cuda": bool, "cuda_devices": [{"name", "compute", "memory"}...], "cuda_off": why CUDA is off
    (None when it is on)}."""
    lib = _lib.lib
    devices = []
    why = _lib.fallback_reason
    if lib.vae_device_compiled(_lib.DEVICE_CUDA):
        for i in range(lib.vae_device_count(_lib.DEVICE_CUDA)):
            d = _lib.DeviceInfo()
            if lib.vae_device_get_info(_lib.DEVICE_CUDA, i, C.byref(d)) == 0:
                devices.append({"name": d.name.decode("utf-8", "replace"),
                                "compute": f"{d.compute_major}.{d.compute_minor}",
                                "memory": d.total_memory})
        if not devices:
            d = _lib.DeviceInfo()
            lib.vae_device_get_info(_lib.DEVICE_CUDA, 0, C.byref(d))
            why = "no usable CUDA device: " + (lib.vae_last_error() or b"").decode("utf-8", "replace")
    elif why is None:
        why = "this build of the library has no CUDA backend (built without nvcc or a visible GPU; " \
              "see the README's install section)"
    return {"version": version(), "library": lib._name, "build": build_info(),
            "cuda": bool(devices), "cuda_devices": devices, "cuda_off": None if devices else why}


def synth_checkpoint(arch, path, config=None):
    """Writes a checkpoint of arch ("wan2.1", "wan2.2", "seedvr2", "taehv") with the fixtures'
    synthetic weights (config: upstream constructor arguments, dict or JSON; None: the released
    ones)."""
    cfg = None if config is None else (config if isinstance(config, str) else json.dumps(config))
    _lib.check(_lib.lib.vae_synth_checkpoint(arch.encode(), cfg.encode() if cfg else None,
                                             str(path).encode()))


def group_id_create(device="cuda"):
    """A new id (bytes of length 128) for the sessions of a group of processes on device "cuda"
    (NCCL's unique id; the ranks may be on several nodes) or "cpu" (a name in this process's
    registry: the ranks are threads of this process, for tests). One rank makes it and hands it to
    the others, each of which passes it as load(..., group_id=, rank=, world=); one id serves one
    group of sessions. process_group= does this through torch.distributed."""
    dev = str(device)
    if dev == "cpu":
        code = _lib.DEVICE_CPU
    elif dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit()):
        code = _lib.DEVICE_CUDA
    else:
        raise Error(-1, f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    gid = _lib.GroupId()
    _lib.check(_lib.lib.vae_group_id_create(code, C.byref(gid)))
    return bytes(gid.bytes)


_DTYPES = {"fp32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32, "fp16": _lib.DTYPE_F16,
           "float16": _lib.DTYPE_F16, "bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16,
           "fp8": _lib.DTYPE_FP8}
_TILES = {"auto": _lib.TILE_AUTO, "none": _lib.TILE_NONE, "blend": _lib.TILE_BLEND}
_FP8_SHAPES = {"kernels": 0, "wide": 1}  # VAE_PARAM_FP8_SHAPES
_GROUP_OUTPUTS = {"all": _lib.GROUP_OUTPUT_ALL, "own": _lib.GROUP_OUTPUT_OWN}


def _torch():
    import torch
    return torch


def _torch_dtype_code(t):
    torch = _torch()
    codes = {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16,
             torch.bfloat16: _lib.DTYPE_BF16}
    if t.dtype not in codes:
        raise Error(-8, f"tensor dtype {t.dtype} is not float32, float16 or bfloat16")
    return codes[t.dtype]


def _as_c_tensor(t, name="tensor"):
    """A vae_tensor describing torch tensor t in place (pointer, shape, strides, device, and the
    bytes of its storage from the view's first element: the library checks that the view stays
    inside them)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Error(-1, f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise Error(-1, f"{name}: layout {t.layout}: vaec takes dense (strided) tensors")
    if t.device.type not in ("cpu", "cuda"):
        raise Error(-1, f"{name}: on device {t.device}: vaec takes CPU and CUDA tensors")
    if t.dim() > 8:
        raise Error(-6, f"{name}: rank {t.dim()}, at most 8 dimensions")
    ct = _lib.Tensor()
    ct.ndim = t.dim()
    ct.dtype = _torch_dtype_code(t)
    ct.data = t.data_ptr() if t.numel() else None
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        ct.shape[i], ct.strides[i] = n, s
    if t.numel():
        ct.storage_bytes = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
    if t.is_cuda:
        ct.device, ct.device_index = _lib.DEVICE_CUDA, t.device.index or 0
    return ct


def _int_option(name, v, lo=0, hi=(1 << 31) - 1):
    """An int option checked against the C type it becomes (ctypes would wrap it silently)."""
    if not _is_int(v):
        raise Error(-1, f"{name} {v!r}: expected an int")
    if not lo <= v <= hi:
        raise Error(-1, f"{name} {v}: expected {lo} to {hi}")
    return v


def _parse_memory(v, name="max_memory"):
    """max_memory: bytes (int) or a size like "13G", "800M" (the library's grammar,
    vae_parse_size, as the CLI's); None: the engine's default."""
    if v is None:
        return 0
    if _is_int(v):
        return _int_option(name, v, 0, (1 << 63) - 1)
    n = C.c_int64()
    text = str(v).encode("utf-8", "replace")
    if b"\0" in text or _lib.lib.vae_parse_size(text, C.byref(n)) != 0:
        raise Error(-1, f"{name} {v!r}: expected bytes (0 to 2^63-1) or a size like 13G, 800M, "
                        "1.5GiB")
    return n.value


class _TorchAllocator:
    """The engine's device memory from torch's caching allocator, so that torch (and ComfyUI's
    memory manager, which only sees torch) accounts for it."""

    def __init__(self):
        torch = _torch()

        @_lib.DevAlloc
        def alloc(size, device, stream, user):
            try:
                return torch.cuda.caching_allocator_alloc(int(size), device, stream or 0)
            except Exception:  # out of memory: the engine reports VAE_ENOMEM
                return None

        @_lib.DevFree
        def free(ptr, size, device, stream, user):
            torch.cuda.caching_allocator_delete(ptr)

        @_lib.DevPoolFree
        def pool_free(device, user):
            # what torch has reserved but not handed out: the engine's budget may use it. One
            # read of the allocator's counters a plan (memory_reserved() and memory_allocated()
            # each flatten and sort all of them, a tenth of a millisecond or more a call)
            try:
                s = torch.cuda.memory_stats_as_nested_dict(device)
                return (s["reserved_bytes"]["all"]["current"]
                        - s["allocated_bytes"]["all"]["current"])
            except Exception:  # (no such counters: nothing counted as free in torch's pool)
                return 0

        self.alloc, self.free, self.pool_free = alloc, free, pool_free


class _Weights:
    """The C model (checkpoint, architecture, weights on the host), shared by the Models (sessions)
    made from it; freed when the last one goes."""

    def __init__(self, handle):
        self.handle = handle
        info = _lib.ModelInfo()
        _lib.check(_lib.lib.vae_model_get_info(handle, C.byref(info)))
        self.info = {f: (v.decode() if isinstance(v, bytes) else v)
                     for f, v in ((n, getattr(info, n)) for n, _ in _lib.ModelInfo._fields_)}
        self.info["config"] = json.loads(self.info.pop("config_json"))
        n = self.info["latent_channels"]
        mean, std = (C.c_float * n)(), (C.c_float * n)()
        _lib.lib.vae_model_latent_norm(handle, mean, std, n)
        self.latents_mean, self.latents_std = list(mean), list(std)

    def __del__(self):
        if self.handle:
            _lib.lib.vae_model_free(self.handle)
            self.handle = None


_DEFAULTS = dict(device="cpu", dtype="fp32", max_memory=None, tile_mode="auto", tile=None,
                 blend_tile=0, blend_overlap=0, threads=0, allocator="torch", tune_cache=None,
                 devices=None, host_memory=None, fp8_convs=None, fp8_shapes=None,
                 fp8_error=None, process_group=None,
                 group_id=None, rank=None, world=None, group_output="all", preview=None)
# preview=: the model's preview decoder (TAEHV), vae_preview's values
_PREVIEWS = {None: 0, "none": 0, "time": 1, "space": 2, "both": 3}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _process_group(pg, o):
    """(rank, world, group id) of this process in torch.distributed group pg (True: the default
    group): rank 0 of the group makes the id, a broadcast over the group hands it to the others
    (collective: every rank of the group gets here)."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise Error(-1, "process_group: torch.distributed is not available") from None
    if not dist.is_available():
        raise Error(-1, "process_group: this torch has no torch.distributed")
    if pg is not True and not isinstance(pg, dist.ProcessGroup):
        raise Error(-1, f"process_group: expected a torch.distributed ProcessGroup or True (the "
                        f"default group), got {type(pg).__name__}")
    if not dist.is_initialized():
        raise Error(-1, "process_group: torch.distributed is not initialised "
                        "(torch.distributed.init_process_group first)")
    if pg is True:
        pg = dist.group.WORLD
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    if rank < 0:
        raise Error(-1, "process_group: this process is not a member of the group")
    msg = [None, 0, ""]  # the id, or rank 0's error (code, message)
    if rank == 0 and world > 1:
        try:
            msg[0] = group_id_create(o["device"])
        except Error as e:  # handed to the other ranks too, which would wait for the id
            msg[1:] = [e.code, str(e)]
    dist.broadcast_object_list(msg, src=dist.get_global_rank(pg, 0), group=pg)
    if msg[1]:
        raise Error(msg[1], f"process_group: rank 0 could not make the group id: {msg[2]}")
    return rank, world, msg[0]


def _group(o, opts):
    """The group-of-processes options (process_group, or group_id / rank / world) into opts; a
    process group's id is made on its rank 0 and broadcast, after everything else is checked."""
    if o["group_output"] not in _GROUP_OUTPUTS:
        raise Error(-1, f"group_output {o['group_output']!r}: expected 'all' or 'own'")
    explicit = [k for k in ("group_id", "rank", "world") if o[k] is not None]
    pg = o["process_group"]
    if pg is None and not explicit:
        if o["group_output"] != "all":
            raise Error(-1, "group_output: only for a group of processes (process_group, or "
                            "group_id / rank / world)")
        return None
    if pg is not None and explicit:
        raise Error(-1, f"process_group: not together with {', '.join(explicit)} (the group "
                        "gives the rank, the world and the id)")
    if opts.n_devices > 1:
        raise Error(-1, "devices: a rank of a group of processes runs on one device (device="
                        "'cuda:N'), not together with " + ("process_group" if pg is not None
                                                           else ", ".join(explicit)))
    if pg is None:
        rank, world, gid = o["rank"], o["world"], o["group_id"]
        for k, v in (("world", world), ("rank", rank)):
            if v is None:
                raise Error(-1, f"{k}: needed with {', '.join(explicit)}")
            _int_option(k, v, -(1 << 31), (1 << 31) - 1)
        if world < 1:
            raise Error(-1, f"world {world}: expected at least 1")
        if not 0 <= rank < world:
            raise Error(-1, f"rank {rank}: expected 0 .. world-1 = {world - 1}")
        if gid is None and world > 1:
            raise Error(-1, "group_id: needed with world > 1 (vaec.group_id_create on one rank, "
                            "handed to the others)")
        if gid is not None:
            if not isinstance(gid, (bytes, bytearray)):
                raise Error(-1, f"group_id: expected bytes (vaec.group_id_create), got "
                                f"{type(gid).__name__}")
            if len(gid) != _lib.GROUP_ID_BYTES:
                raise Error(-1, f"group_id of {len(gid)} bytes: expected {_lib.GROUP_ID_BYTES} "
                                "(vaec.group_id_create)")
    if (opts.device == _lib.DEVICE_CUDA and ":" not in str(o["device"]) and o["devices"] is None
            and _torch().cuda.is_available()):
        # "cuda" in a group: this rank's GPU, the current one (torch.cuda.set_device(local_rank))
        opts.device_index = _torch().cuda.current_device()
    if pg is not None:
        rank, world, gid = _process_group(pg, o)
    opts.rank, opts.world = rank, world
    if gid is not None:
        C.memmove(C.addressof(opts.group_id), bytes(gid), _lib.GROUP_ID_BYTES)
    opts.group_output = _GROUP_OUTPUTS[o["group_output"]]
    return rank, world


def _device_group(devices, opts):
    """devices: GPU indices or "cuda:N" names (a device group; the tensors live on the first)."""
    idx = []
    for d in devices:
        s = str(d)
        n = s.split(":", 1)[1] if s.startswith("cuda:") else s
        if not n.isdigit():
            raise Error(-1, f"devices: {d!r} is not a GPU index or 'cuda:N'")
        idx.append(_int_option("devices", int(n)))
    if not 1 <= len(idx) <= len(opts.devices):
        raise Error(-1, f"devices {list(devices)!r}: expected 1 to {len(opts.devices)} GPUs")
    opts.n_devices = len(idx)
    for k, n in enumerate(idx):
        opts.devices[k] = n
    opts.device_index = idx[0]


def _session_options(o):
    """vae_session_options from the Python options (validated: unknown values are errors)."""
    opts = _lib.SessionOptions()
    _lib.lib.vae_session_options_default(C.byref(opts))
    dev = str(o["device"])
    if dev.startswith("cuda"):
        opts.device = _lib.DEVICE_CUDA
        idx = dev.split(":")[1] if ":" in dev else "0"
        if not idx.isdigit():
            raise Error(-1, f"device {dev!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        opts.device_index = _int_option("device index", int(idx))
    elif dev != "cpu":
        raise Error(-1, f"device {dev!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    if o["dtype"] not in _DTYPES:
        raise Error(-1, f"dtype {o['dtype']!r}: expected one of fp32, bf16, fp16, fp8")
    if o["tile_mode"] not in _TILES:
        raise Error(-1, f"tile_mode {o['tile_mode']!r}: expected auto, none or blend")
    if o["allocator"] not in ("torch", "cuda"):
        raise Error(-1, f"allocator {o['allocator']!r}: expected 'torch' or 'cuda'")
    opts.dtype = _DTYPES[o["dtype"]]
    opts.threads = _int_option("threads", o["threads"])  # (the library caps it: 8 a core)
    opts.max_memory = _parse_memory(o["max_memory"])
    opts.tile_mode = _TILES[o["tile_mode"]]
    tile = o["tile"]
    if tile:
        hw = (tile, tile) if _is_int(tile) else tuple(tile) if isinstance(tile, (tuple, list)) else ()
        if len(hw) != 2:
            raise Error(-1, f"tile {tile!r}: expected pixels (int) or (height, width)")
        opts.tile_height, opts.tile_width = (_int_option("tile", v) for v in hw)
    if not isinstance(o["preview"], (str, type(None))) or o["preview"] not in _PREVIEWS:
        raise Error(-1, f"preview {o['preview']!r}: expected None, 'time', 'space' or 'both'")
    opts.preview = _PREVIEWS[o["preview"]]
    opts.blend_tile = _int_option("blend_tile", o["blend_tile"])
    opts.blend_overlap = _int_option("blend_overlap", o["blend_overlap"])
    if o["tune_cache"] is not None:
        opts.tune_cache = str(o["tune_cache"]).encode()
    if o["devices"] is not None:
        _device_group(o["devices"], opts)
    if o["host_memory"] is not None:  # VAE_PARAM_EXEC_HOST_MB
        mib = _parse_memory(o["host_memory"], "host_memory") >> 20  # (< 2^43: fits int64)
        _lib.check(_lib.lib.vae_session_options_set(C.byref(opts), _lib.PARAM_EXEC_HOST_MB, mib))
    if o["fp8_convs"] is not None:  # VAE_PARAM_FP8_CONVS
        n = 0 if o["fp8_convs"] == "all" else o["fp8_convs"]
        if not _is_int(n) or not 0 <= n < 1 << 31:
            raise Error(-1, f"fp8_convs {o['fp8_convs']!r}: expected a count of convs or 'all'")
        _lib.check(_lib.lib.vae_session_options_set(C.byref(opts), _lib.PARAM_FP8_CONVS, n))
    if o["fp8_error"] is not None:  # VAE_PARAM_FP8_ERROR (1e-4 units)
        e = o["fp8_error"]
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 <= e <= 1:
            raise Error(-1, f"fp8_error {e!r}: expected a relative error from 0 to 1 (0.04: 4e-2)")
        _lib.check(_lib.lib.vae_session_options_set(C.byref(opts), _lib.PARAM_FP8_ERROR,
                                                    round(e * 1e4)))
    if o["fp8_shapes"] is not None:  # VAE_PARAM_FP8_SHAPES
        if o["fp8_shapes"] not in _FP8_SHAPES:
            raise Error(-1, f"fp8_shapes {o['fp8_shapes']!r}: expected one of {list(_FP8_SHAPES)}")
        _lib.check(_lib.lib.vae_session_options_set(C.byref(opts), _lib.PARAM_FP8_SHAPES,
                                                    _FP8_SHAPES[o["fp8_shapes"]]))
    return opts, _group(o, opts)  # the group last: a process group's broadcast is collective


@contextlib.contextmanager
def _caller_device(cuda):
    """The library makes its GPU the current one of the calling thread; torch's current device
    is put back afterwards (a rank's broadcast and the caller's tensors go on using theirs)."""
    torch = _torch() if cuda else None
    if torch is None or not torch.cuda.is_available():  # (the library says what is wrong)
        yield
        return
    with torch.cuda.device(torch.cuda.current_device()):
        yield


class _Session:
    """The C session: its one owner. Models that share it (copy.copy) share this object, and the
    session is freed once, by close() or when the last of them goes. lock: one call at a time
    (plan and trim included); handle_lock: the handle against cancel() from other threads; the
    allocator's callbacks live as long as the session that calls them."""

    def __init__(self, handle, alloc):
        self.handle, self.alloc = handle, alloc
        self.lock, self.handle_lock = threading.Lock(), threading.Lock()
        self.caller = None  # the thread running a call, while it runs
        self.cancelled = False  # cancel() during the running call (seen between batch items)

    @contextlib.contextmanager
    def held(self, what):
        """The session's handle for one call, the lock held (not from inside a running call's
        callback on the same thread: that would wait for itself)."""
        if self.caller == threading.get_ident():
            raise Error(-1, f"{what}: called from inside this model's running call (a progress "
                            "callback); do it after the call returns")
        with self.lock:
            if not self.handle:
                raise Error(-1, f"{what}: the model is closed")
            self.caller = threading.get_ident()
            try:
                yield self.handle
            finally:
                self.caller = None

    def cancel(self):
        self.cancelled = True
        with self.handle_lock:
            if self.handle:
                _lib.lib.vae_session_cancel(self.handle)

    def free(self, wait=True):
        if wait and self.caller == threading.get_ident():
            raise Error(-1, "close: called from inside this model's running call (a progress "
                            "callback); close after the call returns")
        with self.lock if wait else contextlib.nullcontext():
            with self.handle_lock:
                h, self.handle = self.handle, None
        if h:
            _lib.lib.vae_session_free(h)

    def __del__(self):  # the last reference: nothing can be running
        try:
            if getattr(self, "handle", None):
                self.free(wait=False)
        except Exception:  # (at interpreter exit the modules it needs may be gone)
            pass


class Model:
    """A checkpoint bound to a device with its options (a session): decode/encode torch tensors.
    Use vaec.load() / vaec.from_state_dict(); with_options() gives another session of the same
    weights. copy.copy shares the session (calls take turns), copy.deepcopy makes a new one."""

    def __init__(self, weights, **options):
        self._weights = weights
        unknown = set(options) - set(_DEFAULTS)
        if unknown:
            raise Error(-1, f"unknown option(s) {sorted(unknown)}: expected {sorted(_DEFAULTS)}")
        self.options = {**_DEFAULTS, **options}
        opts, group = _session_options(self.options)
        self.rank, self.world = group or (0, 1)
        alloc = None
        if opts.device == _lib.DEVICE_CUDA and self.options["allocator"] == "torch":
            alloc = _TorchAllocator()
            opts.dev_alloc, opts.dev_free = alloc.alloc, alloc.free
            opts.dev_pool_free = alloc.pool_free
        s = C.c_void_p()
        with _caller_device(opts.device == _lib.DEVICE_CUDA):
            _lib.check(_lib.lib.vae_session_create(C.byref(s), weights.handle, C.byref(opts)))
        self._s = _Session(s, alloc)
        self.device, self.dtype = str(self.options["device"]), self.options["dtype"]
        self.info = weights.info
        self.latents_mean, self.latents_std = weights.latents_mean, weights.latents_std

    @property
    def _model(self):
        return self._weights.handle

    def with_options(self, **overrides):
        """Another session of the same weights with some options changed (dtype, tiles, budget,
        device...): the checkpoint is not read again. In a group of processes every rank calls it
        (a session of a group is made collectively); with group_id= pass a new id."""
        return Model(self._weights, **{**self.options, **overrides})

    def __deepcopy__(self, memo):
        if self.world > 1:
            raise Error(-1, "deepcopy of a Model of a group of processes: a new session of a "
                            "group is collective (with_options on every rank, a new group_id)")
        return self.with_options()

    def __copy__(self):  # the same session, taken in turns
        c = Model.__new__(Model)
        c.__dict__.update(self.__dict__)
        return c

    def __reduce_ex__(self, protocol):
        raise TypeError("vaec.Model holds a C session and cannot be pickled: pickle the "
                        "checkpoint's path and its options, and vaec.load in the other process")

    def close(self):
        """Frees the session (its device memory, weights included) once a running call has
        returned; the Model (and its copy.copy copies) are unusable after."""
        s = self.__dict__.get("_s")
        if s is not None:
            s.free()

    def __repr__(self):
        group = f", rank {self.rank} of {self.world}" if self.world > 1 else ""
        return (f"vaec.Model({self.info['arch']}, device={self.device}, dtype={self.dtype}, "
                f"{self.info['param_count']} parameters{group})")

    # ---- shapes and plans ----
    def output_shape(self, shape, encode=False):
        """The output shape for one input of this shape ([1,C,T,h,w] or [1,C,h,w]); the
        session's (a preview= decoder gives fewer or smaller frames)."""
        ins = _shape_array(shape)
        outs, nd = (C.c_int64 * 8)(), C.c_int()
        with self._s.handle_lock:
            if not self._s.handle:
                raise Error(-1, "output_shape: the model is closed")
            _lib.check(_lib.lib.vae_session_output_shape(self._s.handle, int(encode), ins,
                                                         len(shape), outs, C.byref(nd)))
        return tuple(outs[: nd.value])

    def plan(self, shape, encode=False):
        """The engine's plan for one input of this shape under the session's budget: peak bytes,
        tiles, order and the decision in words (before running; a host reserves memory with it).
        """
        ins = _shape_array(shape)
        p = _lib.PlanInfo()
        with self._s.held("plan") as h:
            rc = _lib.lib.vae_session_plan(h, int(encode), ins, len(shape), C.byref(p))
        if rc not in (0, -4):
            _lib.check(rc)
        return {"fits": rc == 0, "order": ("whole", "tiled", "blend")[p.order],
                "tiles": (p.tiles_y, p.tiles_x), "tile_size": (p.tile_height, p.tile_width),
                "strips": p.strips, "step_frames": p.step_frames,
                "peak_bytes": p.peak_bytes, "floor_bytes": p.floor_bytes,
                "budget_bytes": p.budget_bytes, "flops": p.flops, "text": p.text.decode(),
                "host_caches": p.host_caches, "host_cache_bytes": p.host_cache_bytes}

    def peak_bytes(self):
        """Peak device (CPU: host) memory the engine held during the last call (a device group:
        the largest of its devices')."""
        with self._s.handle_lock:  # (the library's peaks may be read while a call runs)
            return _lib.lib.vae_session_peak_bytes(self._s.handle) if self._s.handle else 0

    def device_peak_bytes(self):
        """The same for each device of the session (a list: one entry without a group)."""
        peaks = (C.c_int64 * 8)()
        with self._s.handle_lock:
            n = _lib.lib.vae_session_device_peaks(self._s.handle, peaks, 8) if self._s.handle else 0
        return list(peaks[:n])

    def cancel(self):
        """Stops a decode/encode running on another thread (it raises Error EINTERRUPTED), also
        between the items of a batch."""
        self._s.cancel()

    def trim(self):
        """Gives the device memory the engine cached between calls back (after a running call)."""
        with self._s.held("trim") as h:
            _lib.check(_lib.lib.vae_session_trim(h))

    # ---- running ----
    def decode(self, latent, out=None, raw=False, progress=False, callback=None):
        """latent [B,C,T,h,w] or [C,T,h,w] (video) / [B,C,h,w] (image models) -> video
        [B,3,T',H,W] (images [B,3,H,W]) in the input's dtype, on the input's device, unclamped.
        The latent is in diffusion space (normalised), or raw=True: the VAE's own latent space
        (what diffusers' vae.decode and ComfyUI's VAE take). out: a tensor to write into (any
        strides). progress: a tqdm bar; callback(done, total) -> True stops (Error EINTERRUPTED).
        """
        dtype = latent.dtype if hasattr(latent, "dtype") else None
        if raw:
            mean, std = self._norm(latent)
            latent = (latent.float() - mean) / std  # float32: no extra rounding
        return self._run(latent, False, out, dtype, progress, callback)

    def encode(self, video, out=None, raw=False, progress=False, callback=None):
        """video [B,3,T,H,W] (images [B,3,H,W]) in the model's pixel range -> latent (posterior
        mean) in diffusion space, or raw=True: the VAE's own latent space; in the input's dtype,
        on the input's device."""
        if not raw:
            return self._run(video, True, out, None, progress, callback)
        mean, std = self._norm(video)
        mu = self._run(video, True, None, _torch().float32, progress, callback) * std + mean
        if out is None:
            return mu.to(video.dtype)
        out.copy_(mu)
        return out

    __call__ = decode

    def stream(self, encode=False, raw=False):
        """A stream (vaec.stream.Stream): latents (encode=True: video frames) pushed a few at a
        time -- a latent frame at a time while a diffusion model samples -- and the frames each
        push completes returned at once; their concatenation equals decode/encode of the whole
        input. raw: as decode/encode's. Use it as a context manager:
        with m.stream() as s: frames = s.push(latent_t); ...; last = s.end()"""
        from .stream import Stream
        return Stream(self, encode, raw)

    def _norm(self, like):
        """latents_mean / latents_std as float32 [1,C,1,1,1] (5-D) or [1,C,1,1] tensors on like's
        device, made once per device (no host-to-device copy per call)."""
        torch = _torch()
        if not isinstance(like, torch.Tensor):
            raise Error(-1, f"expected a torch.Tensor, got {type(like).__name__}")
        key = (like.device, like.dim())
        cache = self.__dict__.setdefault("_norm_cache", {})
        if key not in cache:
            shape = (1, -1) + (1,) * (max(like.dim(), 3) - 2)
            cache[key] = tuple(torch.tensor(v, dtype=torch.float32, device=like.device).view(shape)
                               for v in (self.latents_mean, self.latents_std))
        return cache[key]

    def _run(self, x, encode, out, out_dtype, progress, callback):
        torch = _torch()
        what = "video" if encode else "latent"
        if not isinstance(x, torch.Tensor):
            raise Error(-1, f"{what}: expected a torch.Tensor, got {type(x).__name__}")
        video_rank = 5 if self.info["is_video"] else 4
        squeeze = x.dim() == video_rank - 1 and self.info["is_video"]
        if squeeze:
            x = x.unsqueeze(0)
        if x.dim() not in (4, 5) or x.shape[0] < 1:
            raise Error(-6, f"input shape {tuple(x.shape)}: expected [B,C,T,H,W] or [B,C,H,W]")
        one = (1,) + tuple(x.shape[1:])
        oshape = (x.shape[0],) + self.output_shape(one, encode)[1:]
        if out is None:
            out = torch.empty(oshape, dtype=out_dtype or x.dtype, device=x.device)
        elif not isinstance(out, torch.Tensor):
            raise Error(-1, f"out: expected a torch.Tensor, got {type(out).__name__}")
        elif tuple(out.shape) != oshape:
            raise Error(-6, f"out shape {tuple(out.shape)}: expected {oshape}")
        # the whole batch by the library's rule before any item: out writable, apart from x
        _lib.check(_lib.lib.vae_tensor_check(C.byref(_as_c_tensor(out, "out")), b"out", 1,
                                             C.byref(_as_c_tensor(x, what))))
        co = _lib.CallOptions()
        if x.is_cuda or out.is_cuda:
            dev = x.device if x.is_cuda else out.device
            co.cuda_stream = torch.cuda.current_stream(dev).cuda_stream or None
        bar = None
        if progress or callback:
            if progress:
                try:
                    from tqdm.auto import tqdm
                except ImportError:
                    raise Error(-5, "progress=True shows a tqdm bar: pip install tqdm") from None
                bar = tqdm(total=0, desc="vaec " + ("encode" if encode else "decode"),
                           unit="step")

            @_lib.Progress
            def on_progress(done, total, user):
                try:
                    if bar is not None:
                        bar.total = total * x.shape[0]
                        bar.update(1)
                    return 1 if callback is not None and callback(done, total) else 0
                except BaseException as e:  # raised by the call, not lost inside ctypes
                    raised.append(e)
                    return 1

            co.progress = on_progress
        raised = []
        fn = _lib.lib.vae_encode_into if encode else _lib.lib.vae_decode_into
        try:
            with self._s.held("decode" if not encode else "encode") as h, \
                    _caller_device(self.device.startswith("cuda")):
                self._s.cancelled = False  # (a cancel before the call does not stop it)
                for b in range(x.shape[0]):  # (one call at a time per session)
                    if self._s.cancelled:  # a cancel that came between two items
                        raise Error(_lib.EINTERRUPTED, f"stopped by the caller before item {b}")
                    ci, cout = _as_c_tensor(x[b : b + 1], what), _as_c_tensor(out[b : b + 1], "out")
                    rc = fn(h, C.byref(ci), C.byref(cout), C.byref(co))
                    if raised:
                        raise raised[0]
                    _lib.check(rc)
        finally:
            if bar is not None:
                bar.close()
        return out.squeeze(0) if squeeze else out


def _shape_array(shape):
    shape = tuple(shape)
    if len(shape) > 8:
        raise Error(-6, f"shape {shape}: at most 8 dimensions")
    for n in shape:
        _int_option(f"shape {shape}: size", n, 0, (1 << 63) - 1)
    return (C.c_int64 * 8)(*shape)


def _model_options(prefix, arch, config):
    o = _lib.ModelOptions()
    _lib.lib.vae_model_options_default(C.byref(o))
    o.prefix = prefix.encode() if prefix is not None else None
    o.arch = arch.encode() if arch else None
    if config is not None:
        o.config_json = (config if isinstance(config, str) else json.dumps(config)).encode()
    return o


def load(path, arch=None, prefix=None, config=None, **options):
    """Opens a checkpoint (.safetensors, .pth, .gguf; architecture detected) on a device.

    options: device "cpu", "cuda" or "cuda:N"; dtype "fp32", "bf16", "fp16" (CPU: fp32; "fp8": FP8
    convolutions, emulated on the CPU, real on GPUs with E4M3 tensor cores, sm_89+: E4M3 convs
    on bf16 activations);
    max_memory: budget ("13G", bytes; None: free memory minus a margin); tile_mode "auto" (exact
    tiles as the budget needs), "none", "blend"; tile: force exact tiles (px, or (h, w));
    blend_tile / blend_overlap: blend mode sizes in pixels (0: the cheapest grid of even tiles
    that fits the budget / an eighth of a tile; a size that does not fit is made smaller);
    threads (CPU, 0: all);
    allocator "torch" (device memory from torch's caching allocator, so torch and its users see
    it) or "cuda" (the engine's own cudaMalloc); tune_cache: file of the CUDA conv path choices
    kept between processes (None: $VAE_TUNE_CACHE, else ~/.cache/vae.c/cuda-tune.txt; "": none);
    devices: several GPUs
    sharing each call (e.g. [0, 1, 2, 3]; tensors on the first; exact tiles, or SeedVR2's row
    bands, shared out, the output equal to one GPU's; max_memory per GPU); host_memory: host
    memory for each whole-video object of a tiled call (its output put together, a store between
    parts, strips' slots), larger ones go to a temporary file (None: 2G; "256M" keeps host memory
    flat in the video's length; 0: none); fp8_convs: dtype "fp8", E4M3 convs of each program at
    most, those nearest its output, with no calibration (None: those a calibration at each
    side's first call keeps within the error budget fp8_error, cached between processes:
    docs/fp8.md; "all": every conv that may, the most speed and up to ~1e-1); fp8_error: that
    budget, relative (None: $VAE_FP8_ERROR, else 0.04; 0: the architecture's counts; plan()'s
    "text" says the choice); fp8_shapes: which convs may be
    among
    them, "kernels" (None: the temporal ones the GPU's E4M3 kernels take, so that the CPU
    emulation's error is a GPU's) or "wide" (every residual-branch conv wider than 16 channels,
    run only by the CPU emulation: the error E4M3 would add to a narrow model). arch / prefix /
    config: what the checkpoint cannot tell (e.g. config={"norm_num_groups": 8} for SeedVR2).
    A keyword given (not None) wins over its environment variable (host_memory over
    VAE_EXEC_HOST_MB, fp8_convs over VAE_FP8_CONVS, fp8_error over VAE_FP8_ERROR, fp8_shapes
    over VAE_FP8_SHAPES, tune_cache over VAE_TUNE_CACHE); the variables (docs/settings.md) fill in only what is left None.

    A group of processes (one process per GPU, e.g. under torchrun): process_group: a
    torch.distributed ProcessGroup, or True for the default group (torch.distributed.group.WORLD):
    this process's rank and the group's size from it, the group id made on the group's rank 0 and
    broadcast over it; device "cuda" is then the current CUDA device (torch.cuda.set_device). Or
    explicitly: group_id (bytes from vaec.group_id_create on one rank, handed to the others), rank
    (0 .. world-1) and world. Opening the model, and every decode/encode after, is then collective:
    every rank calls with the same options and the same input, in the same order; the ranks share
    out the exact tiles (SeedVR2: row bands). group_output: "all" (every rank gets the whole
    output, equal to one process's) or "own" (only the tiles or band this rank computed, zeros
    elsewhere). Not together with devices= of several GPUs. On the CPU the ranks must be threads
    of one process (each with its own Model; the calls release the GIL), for tests.
    """
    h = C.c_void_p()
    o = _model_options(prefix, arch, config)
    _lib.check(_lib.lib.vae_model_open(C.byref(h), str(path).encode(), C.byref(o)))
    return Model(_Weights(h), **options)


def from_state_dict(state_dict, arch=None, prefix=None, config=None, **options):
    """A Model from named tensors (a module's state_dict(), upstream or diffusers key names)
    instead of a file; the weights are converted once, the tensors are not kept. options: load's.
    """
    torch = _torch()
    items = [(k, v) for k, v in state_dict.items() if isinstance(v, torch.Tensor)
             and v.is_floating_point()]
    host = [v.detach().to("cpu") for _, v in items]  # weights are converted on the host
    names = (C.c_char_p * len(items))(*[str(k).encode() for k, _ in items])
    ts = (_lib.Tensor * len(items))(*[_as_c_tensor(t, f"state_dict[{k!r}]")
                                      for (k, _), t in zip(items, host)])
    h = C.c_void_p()
    o = _model_options(prefix, arch, config)
    _lib.check(_lib.lib.vae_model_open_tensors(C.byref(h), names, ts, len(items), C.byref(o)))
    return Model(_Weights(h), **options)
