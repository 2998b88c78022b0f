"""How the package finds its library: vaec.info(), and the fallback to the CPU-only library where
the CUDA build cannot be loaded (a wheel on a machine without the CUDA libraries)."""
import vaec
from vaec import _lib


def test_info_says_what_runs():
    i = vaec.info()
    assert set(i) == {"version", "library", "build", "cuda", "cuda_devices", "cuda_off"}
    assert i["version"] == vaec.version() and i["build"].startswith("vae ")
    if i["cuda"]:
        assert i["cuda_devices"] and i["cuda_off"] is None
    else:
        assert i["cuda_devices"] == [] and i["cuda_off"]  # why, in words


def test_fallback_to_the_next_library(monkeypatch):
    """A library that cannot be loaded (here: absent) is passed over for the next one, and
    info() says why."""
    real = _lib.lib._name
    monkeypatch.setattr(_lib, "_package_libraries", lambda: ["/nonexistent/libvae.so", real])
    monkeypatch.setattr(_lib, "fallback_reason", None)
    lib = _lib._open_library()
    assert lib._name == real
    assert "could not be loaded" in _lib.fallback_reason
    assert "/nonexistent/libvae.so" in _lib.fallback_reason


def test_no_library_at_all(monkeypatch):
    monkeypatch.setattr(_lib, "_package_libraries", lambda: ["/nonexistent/libvae.so"])
    try:
        _lib._open_library()
    except ImportError as e:
        assert "no usable libvae" in str(e)
    else:
        raise AssertionError("expected ImportError")


def test_wheel_library_lookup_misses_cleanly():
    assert _lib._wheel_library("libvae_no_such_library.so.99") is None
