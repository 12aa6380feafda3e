"""Tiny random-initialised BERT and MPNet bases for tests and smoke runs (no downloads)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ._util.lazy import require

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# MPNet's vocabulary is BERT's behind its own four specials (the ids all-mpnet-base-v2 gives them), "<mask>" last
_MPNET_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", *_SPECIAL]
KINDS = ("bert", "mpnet")


def make_tiny_base(
    out_dir: str | Path,
    texts: Iterable[str] = (),
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 4,
    max_words: int = 2000,
    seed: int = 0,
    kind: str = "bert",
) -> Path:
    """Write a random-initialised BERT (hidden 32, 2 layers, 4 heads by default) with a WordPiece vocab.

    The vocab holds the special tokens, single characters with their ``##`` forms, and the ``max_words``
    most frequent lower-cased words of ``texts``, so tokenisation of that text is realistic. ``kind="mpnet"``
    writes an MPNet of the same size instead, shaped like all-mpnet-base-v2 (``<s>``/``</s>`` specials, no
    segment embeddings, positions offset past the padding id).
    """
    transformers = require("transformers")
    torch = require("torch")
    if kind not in KINDS:
        raise ValueError(f"tiny base kind {kind!r}; valid: {', '.join(KINDS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(re.findall(r"\w+|[^\w\s]", text.lower()))
    chars = sorted({ch for word in counts for ch in word} | set("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-"))
    specials = _MPNET_SPECIAL if kind == "mpnet" else _SPECIAL
    vocab = list(specials) + chars + ["##" + ch for ch in chars]
    seen = set(vocab)
    for word, _ in counts.most_common():
        if len(vocab) >= len(specials) + 2 * len(chars) + max_words:
            break
        if word not in seen:
            vocab.append(word)
            seen.add(word)
    if kind == "mpnet":
        vocab.append("<mask>")  # last, as in all-mpnet-base-v2
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    ids = {w: i for i, w in enumerate(vocab)}
    family = "MPNet" if kind == "mpnet" else "Bert"
    tokenizer_class = getattr(transformers, f"{family}TokenizerFast")
    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x takes the vocab itself and ignores vocab_file
        tokenizer = tokenizer_class(vocab=ids, do_lower_case=True)
    else:
        tokenizer = tokenizer_class(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(out))
    if kind == "mpnet":  # positions start past the padding id: 512 usable, as all-mpnet-base-v2's 514
        shape = {"max_position_embeddings": 514, "pad_token_id": ids["<pad>"], "bos_token_id": ids["<s>"]}
        shape["eos_token_id"] = ids["</s>"]
    else:
        shape = {"max_position_embeddings": 512, "type_vocab_size": 2}
    config = getattr(transformers, f"{family}Config")(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden_size * 2,
        **shape,
    )
    torch.manual_seed(seed)
    getattr(transformers, f"{family}Model")(config).save_pretrained(str(out))
    return out


# Words of the synthetic DensePhrases checkpoints' cased vocabulary ("paris" exists only as "Paris").
DENSEPHRASES_WORDS = (
    "Paris is the capital and most populous city of France . The city hosts Louvre museum , which "
    "opened in 1793 . Who wrote Hamlet ? William Shakespeare wrote it in London . What river flows "
    "through Egypt ? Nile flows north into Mediterranean Sea"
).split()


def make_densephrases_checkpoints(out_dir: str | Path, hidden_size: int = 32) -> dict:
    """Tiny random DensePhrases checkpoints in the exact published layouts, for tests (no downloads).

    Writes under ``out_dir``:

    * ``spanbert-base-cased/``: a SpanBERT-style tokenizer folder, ``vocab.txt`` (cased WordPiece) +
      ``config.json`` and no ``tokenizer_config.json``;
    * ``densephrases-multi/``: a v1.0 full checkpoint, ``pytorch_model.bin`` with ``phrase_encoder.*``,
      ``query_start_encoder.*``, ``query_end_encoder.*`` (each with the ``embeddings.position_ids`` buffer older
      transformers saved) and ``filter_linear.*``, beside a BertConfig ``config.json`` whose ``architectures``
      is ``["Encoder"]``;
    * ``densephrases-multi-query-nq/``: a v1.1 query-only checkpoint fine-tuned from it (no ``phrase_encoder.*``).

    The three encoders are independent random BERTs sharing one word-embedding matrix (DensePhrases copies one
    encoder three times and freezes word embeddings). The filter's logits are 3·h_0 − 2 and 2·h_1 − 2, around
    DensePhrases' threshold −2. Returns the paths and the modules, for direct computations.
    """
    transformers = require("transformers")
    torch = require("torch")
    out = Path(out_dir)
    words = DENSEPHRASES_WORDS
    chars = sorted({ch for w in words for ch in w} | {ch for w in words for ch in w.lower()} | set("?.,'"))
    entries = sorted(set(words) | {w.lower() for w in words if w.lower() != "paris"})
    vocab = _SPECIAL + chars + [f"##{c}" for c in chars] + [w for w in entries if w not in chars]
    tok_dir = out / "spanbert-base-cased"
    tok_dir.mkdir(parents=True)
    (tok_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=512,
    )
    (tok_dir / "config.json").write_text(config.to_json_string())

    def encoder(seed: int):
        torch.manual_seed(seed)
        return transformers.BertModel(config).eval()

    phrase, q_start, q_end, ft_start, ft_end = (encoder(seed) for seed in range(1, 6))
    for enc in (q_start, q_end, ft_start, ft_end):
        enc.embeddings.word_embeddings.weight.data.copy_(phrase.embeddings.word_embeddings.weight.data)
    filter_linear = torch.nn.Linear(hidden_size, 2)
    with torch.no_grad():
        filter_linear.weight.zero_()
        filter_linear.weight[0, 0], filter_linear.weight[1, 1] = 3.0, 2.0
        filter_linear.bias.fill_(-2.0)

    def write(name: str, encoders: dict) -> Path:
        path = out / name
        path.mkdir()
        state = {}
        for prefix, enc in encoders.items():
            for key, value in enc.state_dict().items():
                state[f"{prefix}.{key}"] = value.clone()
            state[f"{prefix}.embeddings.position_ids"] = torch.arange(512).unsqueeze(0)
        state["filter_linear.weight"] = filter_linear.weight.detach().clone()
        state["filter_linear.bias"] = filter_linear.bias.detach().clone()
        torch.save(state, path / "pytorch_model.bin")
        raw = json.loads(config.to_json_string())
        raw["architectures"] = ["Encoder"]
        (path / "config.json").write_text(json.dumps(raw))
        return path

    full = write(
        "densephrases-multi", {"phrase_encoder": phrase, "query_start_encoder": q_start, "query_end_encoder": q_end}
    )
    query_only = write("densephrases-multi-query-nq", {"query_start_encoder": ft_start, "query_end_encoder": ft_end})
    return {
        "tok_dir": tok_dir,
        "full": full,
        "query_only": query_only,
        "phrase": phrase,
        "q_start": q_start,
        "q_end": q_end,
        "ft_start": ft_start,
        "ft_end": ft_end,
        "filter": filter_linear,
    }
