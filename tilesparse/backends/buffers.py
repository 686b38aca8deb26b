"""Index buffers lent to a call's PreparedGroup and taken back once it is gone.

A fused index build (``backends/triton/index.py``) writes every index tensor of a group into
one int32 buffer, as views of it: a call allocated the buffer and took its ~16 views
(``as_strided``), and freed the previous call's. Each tensor made or freed costs the host 1-3
us (``benchmarks/results/diag_raw_launch_run164_h200.json``: 1.7 us a view, 2.6 an
allocation), tens of microseconds a call at sizes where the host bounds the call. A
:class:`BufferPool` (one per bound build: one group at one call signature) keeps the buffer and
its views, lends them to the group a call builds, and lends them again once no one holds that
group.

Reuse is safe because:

- a buffer comes back only when its group is gone (a weak reference): the attention step's
  autograd node holds the group until its backward ran, ``explain()`` holds the last call's
  until the next call, and the kernels read the views through the group's fields;
- it is lent again only on the stream it was lent on: the kernels that read it were enqueued
  there, so a later build on that stream writes after they ran (the caching allocator's own
  rule for a freed block);
- nothing is pooled during a CUDA graph capture (a graph keeps its buffers in its own pool)
  nor inside :func:`unpooled` (``CompiledAttention.prepare`` returns groups whose tensors the
  caller may keep without the group);
- the pools hold at most :data:`POOL_BYTES` in all; a build past that allocates as before,
  and its buffer is freed with its group.

The same logic runs on the CPU (stream 0), where the tests check it.
"""

from __future__ import annotations

import threading
import weakref

import torch

from .switch import switched_on

__all__ = ["POOL_BYTES", "BufferPool", "held_bytes", "unpooled"]

# bytes the pools of the process hold at most (buffers lent or free)
POOL_BYTES = 256 * 2**20

_HELD = [0]  # bytes held by every live pool
_OFF = [False]  # unpooled() in force
_LOCK = threading.Lock()  # taking a free entry and marking it lent is one step


def _free() -> None:
    """An entry's holder before any group held it, and once its holder was released: none."""
    return None


def _busy() -> bool:
    """An entry's holder between ``take`` and ``lend``: taken."""
    return True


def held_bytes() -> int:
    """Bytes the live pools hold."""
    return _HELD[0]


def unpooled():
    """Builds inside the block allocate their buffers as before: none is lent, none is kept."""
    return switched_on(_OFF)


class BufferPool:
    """Buffers of ``numel`` int32 elements on ``device`` and their views (``(shape, strides,
    offset)`` each), lent per call: :meth:`take` an entry, fill its views, :meth:`lend` it to
    the group made of them (or :meth:`give_back` it when no group was made)."""

    __slots__ = ("numel", "views", "device", "cuda", "entries", "__weakref__")

    def __init__(self, numel: int, views: tuple, device: torch.device):
        self.numel, self.views, self.device = numel, views, torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.entries: list[list] = []  # [buffer, views, stream, holder, made]
        weakref.finalize(self, _release, self.entries, 4 * numel)

    def take(self) -> list:
        """An entry ``[buffer, views, stream, holder, made]``: a free one lent on this stream
        before, or a new one (kept while the pools hold less than :data:`POOL_BYTES`). ``made``
        is the builder's to keep what it makes of the views once (None in a new entry); it must
        not hold the groups lent."""
        if _OFF[0] or (self.cuda and torch.cuda.is_current_stream_capturing()):
            return self._new(None)
        stream = torch._C._cuda_getCurrentRawStream(self.device.index) if self.cuda else 0
        with _LOCK:
            for e in self.entries:
                if e[2] == stream and e[3]() is None:
                    e[3] = _busy
                    return e
        e = self._new(stream)
        size = 4 * self.numel
        with _LOCK:
            if _HELD[0] + size <= POOL_BYTES:
                e[3] = _busy
                self.entries.append(e)
                _HELD[0] += size
        return e

    def _new(self, stream: int | None) -> list:
        buf = torch.empty(self.numel, dtype=torch.int32, device=self.device)
        return [buf, [buf.as_strided(*v) for v in self.views], stream, _free, None]

    @staticmethod
    def lend(entry: list, holder: object) -> None:
        """``entry`` comes back once ``holder`` (the group made of its views) is gone."""
        entry[3] = weakref.ref(holder)

    @staticmethod
    def give_back(entry: list) -> None:
        """``entry`` lent to no one (its build failed): free again."""
        entry[3] = _free


def _release(entries: list, size: int) -> None:
    """A pool's bytes are no longer held once it is gone (its entries go with it)."""
    with _LOCK:
        _HELD[0] -= size * len(entries)
