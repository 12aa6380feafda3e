"""The phrase fingerprint: one SHA-256 of everything that changes stored phrase vectors, and when to recompute it.

An index records the fingerprint of the model that dumped it; a model may search it only with the same one. The
hash reads every phrase-encoder weight, so :meth:`PhraseModel.phrase_fingerprint
<dphr_haystack.model.phrase_model.PhraseModel.phrase_fingerprint>` keeps it with a :func:`weights_state` key and
recomputes it when the key changes: after an optimizer step, ``load_state_dict``, ``.to(dtype)`` or a new config.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from typing import Any

from torch import nn

from .config import PhraseModelConfig


def compute_phrase_fingerprint(config: PhraseModelConfig, tokenizer: Any, phrase_encoder: nn.Module) -> str:
    """SHA-256 of the phrase encoder's weights, the tokenizer's vocabulary and the passage input settings.

    Everything that changes stored phrase vectors; the query side and the filter are left out, so a
    query-side fine-tuned model still matches an index dumped with its phrase encoder.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(config.passage_side(), sort_keys=True).encode())
    digest.update(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode())
    for name, tensor in sorted(phrase_encoder.state_dict().items()):
        if name.endswith("position_ids"):
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy())  # its bytes, without copying them
    return digest.hexdigest()


def weights_state(config: PhraseModelConfig, tokenizer: Any, phrase_encoder: nn.Module) -> Hashable | None:
    """A cheap key that changes whenever :func:`compute_phrase_fingerprint` may: None when it cannot be known.

    Per tensor of the state dict (parameters and persistent buffers, found by walking the modules, which costs
    half of building ``state_dict()``: searches check it on every query): its module, name, data pointer, dtype,
    shape, device and autograd version counter (bumped by every in-place write: optimizer steps, ``copy_``,
    ``load_state_dict``); plus the passage settings and the tokenizer object (a new tokenizer counts; its
    vocabulary is not read, which would cost as much as a training step). Not seen: a write through
    ``tensor.data`` (it bypasses the version counter) and tokens added to the same tokenizer object. Inference
    tensors (made under ``torch.inference_mode``) track no version: then None, and the fingerprint is recomputed.
    """
    tensors = []
    try:
        for prefix, module in phrase_encoder.named_modules():
            transient = module._non_persistent_buffers_set
            for kind in (module._parameters, module._buffers):
                for name, tensor in kind.items():
                    if tensor is not None and (kind is module._parameters or name not in transient):
                        tensors.append(
                            (
                                prefix,
                                name,
                                tensor.data_ptr(),
                                tensor.dtype,
                                tensor.shape,
                                tensor.device,
                                tensor._version,
                            )
                        )
    except RuntimeError:  # an inference tensor: "Inference tensors do not track version counter"
        return None
    settings = json.dumps(config.passage_side(), sort_keys=True)
    return settings, id(tokenizer), tuple(tensors)
