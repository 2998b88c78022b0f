"""Model.stream(): the input a few frames at a time, the output as soon as the model has it
(vae.h vae_stream_*)."""
import ctypes as C

from . import _lib
from ._lib import Error


def _torch():
    import torch
    return torch


class Stream:
    """A stream on a Model's session (Model.stream(); one at a time per session, and the model's
    other calls are refused while it is open). push(x) takes the next frames -- latents
    [1,C,T,h,w] or [C,T,h,w] for a decoder (T >= 0, any split), video frames for an encoder --
    and returns the output frames they complete now, [1,C',n,H,W] (or [C',n,H,W] after a 4-D
    push; n may be 0), in the input's dtype and on its device; end() runs the last step (TAEHV's
    encoder pads to four frames by repeating the last) and returns its frames. The frames of
    every push and the end, concatenated on the time axis, are what decode/encode gives for the
    whole input (bit for bit on the CPU). As a context manager, leaving the block without end()
    aborts the stream (its last frames are not made). A failed push or end closes the stream.
    Inputs in CUDA memory go through host memory (a latent frame is small)."""

    def __init__(self, model, encode=False, raw=False):
        self._m, self._encode, self._raw = model, bool(encode), bool(raw)
        self._open = False  # begun in the library (at the first push: its shape)
        self._done = False  # ended or aborted
        self._shape = None  # the input's [1,C,h,w] sizes, from the first push
        self._like = None  # (dtype, device, 4-D) of the first push: the output's
        self._out_shape = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.abort()
        return False

    def __repr__(self):
        state = "done" if self._done else "open" if self._open else "not begun"
        return f"vaec.Stream({'encode' if self._encode else 'decode'}, {state})"

    # ---- the input ----
    def _input(self, x):
        torch = _torch()
        what = "video" if self._encode else "latent"
        if not isinstance(x, torch.Tensor):
            raise Error(-1, f"push: {what}: expected a torch.Tensor, got {type(x).__name__}")
        four = x.dim() == 4
        if four:
            x = x.unsqueeze(0)
        if x.dim() != 5 or x.shape[0] != 1:
            raise Error(-6, f"push: {what} shape {tuple(x.shape)}: expected [1,C,T,H,W] or "
                            "[C,T,H,W] (one stream: batch 1)")
        like = (x.dtype, x.device, four)
        if self._like is None:
            self._like = like
        if not self._encode and self._raw:
            mean, std = self._m._norm(x)
            x = (x.float() - mean) / std  # float32: no extra rounding
        return x.detach().to("cpu"), like

    def _begin(self, x, h):
        shape = (C.c_int64 * 5)(*x.shape)
        _lib.check(_lib.lib.vae_stream_begin(h, int(self._encode), shape, 5))
        self._open, self._shape = True, tuple(x.shape)
        one = (1, x.shape[1], 1, x.shape[3], x.shape[4])
        self._out_shape = self._m.output_shape(one, self._encode)

    # ---- the output ----
    def _call(self, what, run):
        """run(handle, frames_fn) under the session's lock; the frames it hands out, as one
        float32 tensor [1,C',n,H,W] on the host."""
        torch = _torch()
        got, raised = [], []

        @_lib.FramesFn
        def on_frames(ptr, first, n, c, h, w, user):
            try:
                count = c * n * h * w
                buf = (C.c_float * count).from_address(ptr)
                got.append(torch.frombuffer(buf, dtype=torch.float32).clone().view(c, n, h, w))
                return 0
            except BaseException as e:  # raised by the call, not lost inside ctypes
                raised.append(e)
                return 1

        with self._m._s.held(what) as h:
            if self._done:
                raise Error(-1, f"{what}: the stream has ended")
            rc = run(h, on_frames)
            if rc != 0:  # the library closes the stream on failures after its checks
                self._done = not _lib.lib.vae_stream_status(h, None, None, None)
            if raised:
                raise raised[0]
            _lib.check(rc)
        if got:
            return torch.cat(got, dim=1).unsqueeze(0)
        c, hh, ww = self._out_shape[1], self._out_shape[3], self._out_shape[4]
        return torch.empty((1, c, 0, hh, ww), dtype=torch.float32)

    def _output(self, y, like):
        dtype, device, four = like
        if self._encode and self._raw:
            mean, std = self._m._norm(y)
            y = y * std + mean
        y = y.to(device=device, dtype=dtype)
        return y.squeeze(0) if four else y

    def push(self, x):
        """The next input frames (T >= 0); returns the output frames ready now (possibly 0)."""
        x, like = self._input(x)
        ct = None

        def run(h, fn):
            nonlocal ct
            if not self._open:
                self._begin(x, h)
            ct = _c_tensor(x)
            return _lib.lib.vae_stream_push(h, C.byref(ct), fn, None)

        return self._output(self._call("push", run), like)

    def end(self):
        """Ends the stream: the frames of its last step (an encoder's padded one), possibly 0."""
        if not self._open:
            raise Error(-1, "end: nothing was pushed (the stream begins at its first push)")
        y = self._call("end", lambda h, fn: _lib.lib.vae_stream_end(h, fn, None))
        self._done = True
        return self._output(y, self._like)

    def abort(self):
        """Closes the stream without its last step; nothing happens after end()."""
        if self._open and not self._done:
            with self._m._s.held("abort") as h:
                _lib.check(_lib.lib.vae_stream_abort(h))
        self._done = True


def _c_tensor(x):
    from . import _as_c_tensor
    return _as_c_tensor(x, "chunk")
