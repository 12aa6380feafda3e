"""Tiny random-initialised BERT bases for tests and smoke runs (no downloads)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ._util.lazy import require

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tiny_base(
    out_dir: str | Path,
    texts: Iterable[str] = (),
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 4,
    max_words: int = 2000,
    seed: int = 0,
) -> Path:
    """Write a random-initialised BERT (hidden 32, 2 layers, 4 heads by default) with a WordPiece vocab.

    The vocab holds the special tokens, single characters with their ``##`` forms, and the ``max_words``
    most frequent lower-cased words of ``texts``, so tokenisation of that text is realistic.
    """
    transformers = require("transformers")
    torch = require("torch")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(re.findall(r"\w+|[^\w\s]", text.lower()))
    chars = sorted({ch for word in counts for ch in word} | set("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-"))
    vocab = list(_SPECIAL) + chars + ["##" + ch for ch in chars]
    seen = set(vocab)
    for word, _ in counts.most_common():
        if len(vocab) >= len(_SPECIAL) + 2 * len(chars) + max_words:
            break
        if word not in seen:
            vocab.append(word)
            seen.add(word)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x takes the vocab itself and ignores vocab_file
        tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    else:
        tokenizer = transformers.BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(out))
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden_size * 2,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    torch.manual_seed(seed)
    transformers.BertModel(config).save_pretrained(str(out))
    return out
