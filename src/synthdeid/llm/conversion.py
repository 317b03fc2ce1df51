"""A GGUF model as a plain transformers folder: converted once, kept, shared.

transformers loads a GGUF file with ``from_pretrained(folder, gguf_file=name)``
(the ``gguf`` package), dequantizing the weights and converting the tokenizer
on every load (about 50 s for SmolLM2 on 2 cores). :func:`converted_gguf` does
it once and keeps the result under ``$SYNTHDEID_MODEL_CACHE`` (default
``~/.cache/synthdeid/models``), keyed by the file's fingerprint;
:func:`pretrained_location` is what every step that loads a local model with
``from_pretrained`` passes (the chat backend, the DP language model).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from synthdeid.llm.models import ModelRef
from synthdeid.pinned import model_cache_root

log = logging.getLogger(__name__)

COMPLETE_MARKER = ".synthdeid-converted"


def pretrained_location(ref: ModelRef) -> tuple[str, dict[str, Any]]:
    """``from_pretrained``'s location and options for ``ref``: a GGUF model's converted
    folder when the cache can hold it, else the GGUF file itself (``gguf_file=``)."""
    location, options = ref.from_pretrained_args()
    if ref.gguf_file is not None:
        converted = converted_gguf(ref)
        if converted is not None:
            return str(converted), {}
    return location, options


def converted_gguf(ref: ModelRef) -> Path | None:
    """A plain transformers folder holding ``ref``'s GGUF model, converted once and kept.

    transformers dequantizes a GGUF file and converts its tokenizer on every
    load (about 50 s for SmolLM2 on 2 cores); the folder loads in seconds. It
    is keyed by the GGUF file's fingerprint, written beside its final place and
    renamed into it; concurrent steps wait on a lock file for the first one's
    conversion. None when the cache cannot be written: the GGUF file is then
    loaded directly.
    """
    assert ref.gguf_file is not None and ref.fingerprint is not None
    digest = ref.fingerprint.removeprefix("sha256:")[:16]
    target = model_cache_root() / f"{Path(ref.gguf_file).stem}-{digest}"
    if (target / COMPLETE_MARKER).is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.parent / f".{target.name}.lock", "a")  # noqa: SIM115 - held below
    except OSError as error:
        log.warning("model cache %s not writable (%s); loading the GGUF file", target, error)
        return None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion at a time; the others wait for it
        if (target / COMPLETE_MARKER).is_file():
            return target
        return _convert(ref, target)


def _convert(ref: ModelRef, target: Path) -> Path | None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location, options = ref.from_pretrained_args()
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as error:
        log.warning("model cache %s not writable (%s); loading the GGUF file", target, error)
        return None
    try:
        log.info("converting %s to a transformers folder in %s (once)", ref.name, target)
        tokenizer = AutoTokenizer.from_pretrained(location, **options)
        lm = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32, **options)
        # the weights are dequantized: save them as plain tensors (torch types
        # Module.__setattr__ for tensors and modules only; any value is accepted)
        lm.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        lm.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / COMPLETE_MARKER).write_text(f"{ref.fingerprint}\n", encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / COMPLETE_MARKER).is_file():
                raise
    except OSError as error:
        log.warning("could not keep the converted model (%s); loading the GGUF file", error)
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def load_advice(ref: ModelRef, error: Exception) -> str:
    if ref.kind == "hub" and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return (
            "HF_HUB_OFFLINE is set and the hub id is not in the local Hugging Face cache; "
            "name a local model instead (a directory, a GGUF file or bundled:smollm2)"
        )
    if ref.kind == "hub":
        return f"{error} (an offline run needs a local model or one in the Hugging Face cache)"
    return str(error)
