"""Mends torchrun of Debian's python3-torch 1.13.1 on Python 3.11, for the tests that run it (PYTHONPATH=this folder).

torch 1.13's Std.from_str (torch/distributed/elastic/multiprocessing/api.py) maps "0" and "3" to Std members by
iterating the IntFlag, and from Python 3.11 on iterating a Flag yields only its single-bit members
(docs.python.org/3.11/library/enum.html, "Changed in version 3.11": aliases and the zero value are not iterated), so
from_str("0"), torchrun's default for --redirects and --tee, returns None and every torchrun start ends in
"AttributeError: 'NoneType' object has no attribute 'get'" (seen by users of Python 3.11: meta-llama/llama#86).
Here Std.from_str is replaced, right after that module is imported, by one that builds the members by value. Torch
2.x needs none of this. This file replaces Debian's /etc/python3.11/sitecustomize.py for these processes; that one
only installs apport's exception hook.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys

PATCHED_MODULE = "torch.distributed.elastic.multiprocessing.api"


def _from_str(cls, text):
    if re.fullmatch(r"[0123]", text):
        return cls(int(text))
    if re.fullmatch(r"(\d:[0123],)*(\d:[0123])", text):
        return {int(rank): cls(int(value)) for rank, value in (pair.split(":") for pair in text.split(","))}
    raise ValueError(f"{text} does not match: <[0123]> or <(\\d:[0123],)*(\\d:[0123])>")


class _MendAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != PATCHED_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            if module.__dict__.get("Std") is not None and list(module.Std) != list(module.Std.__members__.values()):
                module.Std.from_str = classmethod(_from_str)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _MendAfterImport())
