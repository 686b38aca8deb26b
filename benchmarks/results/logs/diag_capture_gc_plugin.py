"""pytest -p diag_plugin: report lean-launch misses and garbage collections during a CUDA graph capture."""
import gc

import torch

from tilesparse.backends.triton import launch

_orig = launch.LeanKernel.launch


def _launch(self, grid, args, constants, args_key=None):
    capturing = torch.cuda.is_current_stream_capturing()
    before = self.misses
    try:
        return _orig(self, grid, args, constants, args_key)
    finally:
        if capturing and self.misses != before:
            print(f"\nDIAG lean miss during capture: {self.fn.__name__} {constants}", flush=True)


launch.LeanKernel.launch = _launch


def _gc(phase, info):
    if phase == "start" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        print(f"\nDIAG gc during capture: {info}", flush=True)
        gc.set_debug(gc.DEBUG_COLLECTABLE)
    elif phase == "stop" and gc.get_debug():
        gc.set_debug(0)
        print(f"\nDIAG gc stop: {info}", flush=True)


gc.callbacks.append(_gc)
