"""Fuzzed bad input: queries, corpus records, Haystack documents (stateful), YAML pipeline parameters.

Every case either works or raises a typed error (DphrError, or Haystack's own HaystackError) with a message,
and the index or store is consistent afterwards. Case counts: see tests/reliability/_fuzz.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from dphr_haystack import CorpusFormatError, Passage, PhraseIndex, PhraseSearcher
from tests.reliability import _fuzz
from tests.reliability._checks import (
    assert_index_consistent,
    assert_store_consistent,
    check_documents,
    check_hits,
    outcome_of,
)

pytest.importorskip("haystack")

from haystack.schema import Document

from dphr_haystack.encode.add import add_passages
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever, load_pipeline

UNITS = st.sampled_from(["phrase", "passage", "document"])
NON_STRINGS = st.one_of(st.none(), st.integers(), st.binary(max_size=8), st.lists(st.text(max_size=3), max_size=2))
QUERIES = st.one_of(_fuzz.texts, _fuzz.texts.map(lambda t: t + "?"), NON_STRINGS)


@pytest.fixture(scope="module")
def search_env(_tiny_model_session, model_dir, squad_passages):
    """A PhraseSearcher and a PhraseRetriever over the same 12 SQuAD paragraphs."""
    import torch

    torch.set_num_threads(1)
    passages = squad_passages[:12]
    index = PhraseIndex.create(_tiny_model_session)
    add_passages(index, _tiny_model_session, passages, progress=False)
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=3, device="cpu")
    store.index_documents(
        [Document(content=p["text"], id=p["id"], meta={"title": p["title"]}) for p in passages], retriever
    )
    return PhraseSearcher(index, _tiny_model_session), retriever


def test_queries(fuzz_profile, fuzz_log, search_env):
    """Empty, whitespace, control, mixed-script, emoji, 100k-character, lone-surrogate and non-string queries."""
    searcher, retriever = search_env
    store = retriever.document_store

    @_fuzz.fuzz_settings("queries", fuzz_profile)
    @given(query=QUERIES, unit=UNITS, top_k=st.integers(-2, 40))
    def run(query, unit, top_k):
        def search():
            check_hits(searcher.index, searcher.search(query, unit=unit, top_k=top_k), top_k)

        def retrieve():
            docs = retriever.retrieve(query, top_k=top_k if top_k > 0 else None)
            assert len(docs) <= (top_k if top_k > 0 else retriever.top_k)
            check_documents(store, docs)

        fuzz_log.example()
        fuzz_log.record("search", outcome_of(search))
        fuzz_log.record("retrieve", outcome_of(retrieve))

    run()


# ----------------------------------------------------------------- corpus records into an on-disk index
RECORD_IDS = st.one_of(
    st.sampled_from(["a", "b", "c"]),
    st.integers(-3, 3),
    st.none(),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
)
META = st.one_of(
    st.none(),
    _fuzz.JSON_VALUES,
    st.dictionaries(
        st.text(max_size=4),
        st.one_of(_fuzz.JSON_VALUES, st.sets(st.integers(), max_size=2), st.binary(max_size=3)),
        max_size=3,
    ),
)
RECORD_TEXTS = st.one_of(_fuzz.texts, NON_STRINGS)
RECORDS = st.one_of(
    st.fixed_dictionaries(
        {"id": RECORD_IDS, "text": RECORD_TEXTS},
        optional={"title": st.one_of(_fuzz.texts, NON_STRINGS), "meta": META, "document_id": RECORD_IDS},
    ),
    st.fixed_dictionaries({"content": RECORD_TEXTS}),
    _fuzz.texts,
    st.builds(Passage, id=st.text(max_size=4), text=_fuzz.texts, title=st.text(max_size=4)),
    NON_STRINGS,
)


def test_corpus_records(fuzz_profile, fuzz_log, tiny_model, tmp_path):
    """Records with odd ids, texts, titles and meta (non-JSON, duplicates, lone surrogates) added to a disk index."""
    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("corpus_records", fuzz_profile)
    @given(
        records=st.lists(RECORDS, max_size=6),
        chunk=st.integers(1, 4),
        duplicates=st.sampled_from(["fail", "skip", "overwrite"]),
    )
    def run(records, chunk, duplicates):
        path = tmp_path / f"idx-{next(counter)}"
        index = PhraseIndex.create(tiny_model, path=path)
        add_passages(index, tiny_model, [{"id": "seed", "text": "A seed passage about Paris."}], progress=False)
        fuzz_log.example()
        fuzz_log.record(
            "add_passages",
            outcome_of(
                lambda: add_passages(
                    index, tiny_model, records, chunk_size=chunk, duplicates=duplicates, progress=False
                )
            ),
        )
        assert_index_consistent(index)
        reloaded = PhraseIndex.load(path, model=tiny_model)  # what was committed is exactly what is in memory
        assert_index_consistent(reloaded)
        assert reloaded.passages == index.passages and reloaded.live_passage_ids() == index.live_passage_ids()

    run()


# ----------------------------------------------------------------- corpus files: encodings, gzip, damage, dphr index
CORPUS_FILE_RECORD = st.fixed_dictionaries(
    {
        "id": st.one_of(st.sampled_from(["a", "b", "c", "d"]), st.text(max_size=3)),
        "text": st.one_of(st.text(max_size=30), st.sampled_from(["Paris is in France.", "café Zürich 東京 😀", " "])),
    },
    optional={"title": st.text(max_size=5)},
)
CORPUS_FILE_RECORDS = st.one_of(
    st.lists(CORPUS_FILE_RECORD, min_size=1, max_size=5, unique_by=lambda r: r["id"]),
    st.lists(CORPUS_FILE_RECORD, max_size=5),  # repeated ids, or none at all
)


def _render_corpus(records: list[dict], layout: str) -> str:
    if layout == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if layout == "list":
        return json.dumps(records, ensure_ascii=False, indent=1)
    paragraphs = [{"context": r["text"]} for r in records]
    return json.dumps({"data": [{"title": "T", "paragraphs": paragraphs}]}, ensure_ascii=False, indent=1)


def test_corpus_files(fuzz_profile, fuzz_log, model_dir, tmp_path):
    """Corpus files in every layout, in UTF-8 (with or without BOM), Latin-1, cp1252 or UTF-16, plain, gzipped,
    truncated, corrupted or named .gz without being gzip, sometimes damaged: reading works or raises
    CorpusFormatError naming the file; ``dphr index`` exits 0 or 2, and creates no --out when the corpus fails
    before its first passage."""
    import contextlib
    import gzip
    import io

    from dphr_haystack import read_corpus
    from dphr_haystack.cli import main as dphr

    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("corpus_files", fuzz_profile)
    @given(
        records=CORPUS_FILE_RECORDS,
        layout=st.sampled_from(["jsonl", "jsonl", "squad", "list"]),
        encoding=st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "cp1252", "utf-16"]),
        wrap=st.sampled_from(["plain", "plain", "plain", "gz", "gz", "gz-truncated", "gz-corrupted", "gz-name-only"]),
        damage=st.sampled_from([False, False, True]),
        rnd=st.randoms(use_true_random=False),
    )
    def run(records, layout, encoding, wrap, damage, rnd):
        n = next(counter)
        data = _render_corpus(records, layout).encode(encoding, errors="replace")
        if damage:
            data = _fuzz.mutate_bytes(data, rnd)
        if wrap in ("gz", "gz-truncated", "gz-corrupted"):
            data = gzip.compress(data)
            if wrap == "gz-truncated":
                data = data[: rnd.randrange(len(data))]
            elif wrap == "gz-corrupted":
                buf = bytearray(data)
                buf[rnd.randrange(10, len(buf))] ^= 0xFF
                data = bytes(buf)
        file = tmp_path / f"corpus-{n}.{'json' if layout != 'jsonl' else 'jsonl'}{'' if wrap == 'plain' else '.gz'}"
        file.write_bytes(data)
        fuzz_log.example()
        errors: list[str] = []

        def read():
            try:
                list(read_corpus(file))
            except CorpusFormatError as exc:
                errors.append(str(exc))
                raise

        if fuzz_log.record("read", outcome_of(read)) != "ok":
            assert file.name in errors[0], errors[0]
        firsts: list = []
        first_ok = outcome_of(lambda: firsts.append(next(iter(read_corpus(file)), None))) == "ok"
        out = tmp_path / f"index-{n}"
        args = ["index", "--model", str(model_dir), "--corpus", str(file), "--out", str(out), "--no-progress"]
        stderr = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            code = dphr([*args, "--device", "cpu"])
        fuzz_log.record("dphr index", "ok" if code == 0 else "exit 2")
        assert code in (0, 2), stderr.getvalue()
        if not (first_ok and firsts[0] is not None):  # nothing to index, or unreadable at once: no directory
            assert code == 2 and not out.exists(), stderr.getvalue()
        if code == 0:
            assert PhraseIndex.load(out).num_passages == sum(1 for _ in read_corpus(file))

    run()


# ----------------------------------------------------------------- Haystack documents, stateful
def _document(content, content_type, doc_id, meta):
    try:
        return Document(content=content, content_type=content_type, id=doc_id, meta=meta)
    except Exception:
        return None


DOC_TEXTS = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=_fuzz.any_char, max_size=30),
    st.just(""),
    st.text(alphabet=st.sampled_from(_fuzz.CONTROL + " "), max_size=10),
    st.text(alphabet=st.sampled_from(_fuzz.EMOJI + _fuzz.SCRIPTS + " "), max_size=40),
    st.sampled_from(["Paris is the capital of France.", "The Nile flows north."]),
)
HUGE_TEXT = st.builds(lambda n: "Paris is the capital of France. " * n, st.integers(500, 4000))  # 16k-128k chars
DOCUMENTS = st.builds(
    _document,
    content=st.one_of(
        DOC_TEXTS,
        DOC_TEXTS,
        DOC_TEXTS,
        HUGE_TEXT,
        st.integers(),
        st.none(),
        st.just(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})),
    ),
    content_type=st.sampled_from(["text", "text", "text", "table", "image"]),
    doc_id=st.one_of(st.none(), st.sampled_from(["d1", "d2", "d3", "d4"]), st.text(max_size=4)),
    meta=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["title", "document_id", "topic"]) | st.text(max_size=4),
            st.one_of(_fuzz.JSON_VALUES, st.sets(st.integers(), max_size=2), DOC_TEXTS),
            max_size=4,
        ),
    ),
)


class StoreMachine(RuleBasedStateMachine):
    """Random writes, phrase updates, deletes, retrievals and save/load cycles on one PhraseDocumentStore."""

    model_dir: Path
    tmp_path: Path
    log = None

    @initialize()
    def start(self):
        self.log.example()
        self.store = PhraseDocumentStore(progress_bar=False)
        self.retriever = PhraseRetriever(document_store=self.store, model=str(self.model_dir), top_k=3, device="cpu")
        self.saves = 0

    def _record(self, op: str, call) -> str:
        return self.log.record(op, outcome_of(call))

    @rule(docs=st.lists(DOCUMENTS, max_size=4), policy=st.sampled_from([None, "overwrite", "skip", "fail"]))
    def write(self, docs, policy):
        docs = [d for d in docs if d is not None]
        self._record("write", lambda: self.store.write_documents(docs, duplicate_documents=policy))

    @rule(update=st.booleans(), batch=st.integers(1, 4))
    def update(self, update, batch):
        outcome = self._record(
            "update",
            lambda: self.store.update_embeddings(self.retriever, update_existing_embeddings=update, batch_size=batch),
        )
        if outcome == "ok":  # every text document now has phrases
            texts = {d.id for d in self.store.get_all_documents() if self.store._to_passage(d) is not None}
            assert set(self.store.get_phrase_index().live_passage_ids()) == texts

    @rule(data=st.data())
    def delete(self, data):
        ids = [d.id for d in self.store.get_all_documents()]
        chosen = data.draw(st.lists(st.sampled_from(ids + ["missing"]) if ids else st.just("missing"), max_size=3))
        filters = data.draw(st.one_of(st.none(), st.fixed_dictionaries({"topic": _fuzz.JSON_VALUES})))
        self._record("delete", lambda: self.store.delete_documents(ids=chosen or None, filters=filters))

    @rule(
        data=st.data(),
        meta=st.one_of(
            st.dictionaries(st.sampled_from(["title", "document_id", "topic"]), _fuzz.JSON_VALUES, max_size=2),
            NON_STRINGS,
        ),
    )
    def update_meta(self, data, meta):
        ids = [d.id for d in self.store.get_all_documents()]
        doc_id = data.draw(st.sampled_from(ids + ["missing"]) if ids else st.just("missing"))
        self._record("update_meta", lambda: self.store.update_document_meta(doc_id, meta))

    @rule(query=QUERIES, unit=UNITS)
    def retrieve(self, query, unit):
        self.retriever.unit = unit
        self._record("retrieve", lambda: check_documents(self.store, self.retriever.retrieve(query)))

    @rule()
    def save_and_load(self):
        path = self.tmp_path / f"store-{id(self)}-{self.saves}"
        self.saves += 1
        if self._record("save", lambda: self.store.save(path)) != "ok":
            assert not path.exists()
            return
        loaded = PhraseDocumentStore.load(path)
        assert sorted(d.id for d in loaded.get_all_documents()) == sorted(d.id for d in self.store.get_all_documents())
        before, after = self.store.get_phrase_index(), loaded.get_phrase_index()
        assert (before is None) == (after is None)
        if before is not None:
            assert sorted(before.live_passage_ids()) == sorted(after.live_passage_ids())
        self.store = loaded
        self.retriever.document_store = loaded

    @invariant()
    def consistent(self):
        if hasattr(self, "store"):
            assert_store_consistent(self.store)


def test_documents(fuzz_profile, fuzz_log, model_dir, tmp_path):
    """Empty, huge, non-text, duplicate-id and odd-meta documents through writes, updates, deletes and saves."""
    StoreMachine.model_dir, StoreMachine.tmp_path, StoreMachine.log = model_dir, tmp_path, fuzz_log
    run_state_machine_as_test(
        StoreMachine, settings=_fuzz.fuzz_settings("documents", fuzz_profile, stateful_step_count=6)
    )


# ----------------------------------------------------------------- YAML pipelines
UNIT_NAMES = st.sampled_from(["phrase", "passage", "document"])
PARAM_VALUES = st.one_of(
    _fuzz.JSON_VALUES,
    st.integers(-5, 5),
    st.sampled_from(
        [
            "phrase",
            "passage",
            "document",
            "cpu",
            "cuda",
            "auto",
            "Flat",
            "IVF4,Flat",
            "HNSW8",
            "PQ3",
            "garbage",
            "int8",
            "float16",
            "BM25Plus",
            "DocumentStore",
            "Retriever",
        ]
    ),
)
# Values of the right YAML type but any size or spelling: they pass Haystack's schema and reach our validation.
TYPED_PARAMS = {
    "top_k": st.integers(-3, 10**9),
    "batch_size": st.integers(-3, 4096),
    "max_answer_length": st.integers(-3, 10**6),
    "filter_threshold": st.one_of(st.none(), st.floats(-1e6, 1e6)),
    "unit": UNIT_NAMES,
    "device": st.sampled_from(["cpu", "cuda", "auto"]),
    "scale_score": st.booleans(),
    "faiss_factory": st.sampled_from(
        ["Flat", "IVF4,Flat", "IVF1024,Flat", "HNSW8", "PQ3", "OPQ4,IVF2,PQ4", "LSH", "garbage", ""]
    ),
    "phrase_dtype": st.sampled_from(["float16", "int8", "float32"]),
    "bm25_algorithm": st.sampled_from(["BM25Okapi", "BM25L", "BM25Plus"]),
    "bm25_parameters": st.dictionaries(
        st.sampled_from(["k1", "b", "epsilon", "delta", "z"]), st.floats(-10, 10), max_size=3
    ),
    "embedding_dim": st.integers(-5, 5000),
    "similarity": st.sampled_from(["dot_product", "cosine"]),
    "duplicate_documents": st.sampled_from(["overwrite", "skip", "fail"]),
    "title_field": st.text(max_size=5),
    "document_id_field": st.text(max_size=5),
}
STORE_PARAMS = [
    "index",
    "duplicate_documents",
    "embedding_dim",
    "similarity",
    "progress_bar",
    "use_bm25",
    "bm25_algorithm",
    "bm25_parameters",
    "faiss_factory",
    "phrase_dtype",
    "title_field",
    "document_id_field",
    "load_path",
    "unknown_param",
]
RETRIEVER_PARAMS = [
    "document_store",
    "model",
    "top_k",
    "unit",
    "max_answer_length",
    "filter_threshold",
    "batch_size",
    "device",
    "scale_score",
    "return_answers",
    "unknown_param",
]


def _pipeline_config(model: str) -> dict:
    return {
        "version": "ignore",
        "components": [
            {"name": "DocumentStore", "type": "PhraseDocumentStore", "params": {"progress_bar": False}},
            {
                "name": "Retriever",
                "type": "PhraseRetriever",
                "params": {"document_store": "DocumentStore", "model": model, "top_k": 3, "device": "cpu"},
            },
        ],
        "pipelines": [{"name": "query", "nodes": [{"name": "Retriever", "inputs": ["Query"]}]}],
    }


def test_yaml_pipelines(fuzz_profile, fuzz_log, model_dir, tmp_path):
    """load_pipeline with bad params (types, ranges, unknown names), damaged structure and non-YAML text."""
    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("yaml_pipelines", fuzz_profile)
    @given(
        kind=st.sampled_from(["typed", "typed", "params", "structure", "text"]),
        typed=st.fixed_dictionaries({}, optional=TYPED_PARAMS),
        store_params=st.dictionaries(st.sampled_from(STORE_PARAMS), PARAM_VALUES, max_size=3),
        retriever_params=st.dictionaries(st.sampled_from(RETRIEVER_PARAMS), PARAM_VALUES, max_size=3),
        rnd=st.randoms(use_true_random=False),
        value=_fuzz.JSON_VALUES,
        raw=_fuzz.texts,
    )
    def run(kind, typed, store_params, retriever_params, rnd, value, raw):
        config = _pipeline_config(str(model_dir))
        file = tmp_path / f"pipeline-{next(counter)}.yml"
        if kind == "typed":
            for name, param_value in typed.items():
                config["components"][0 if name in STORE_PARAMS else 1]["params"][name] = param_value
            file.write_text(yaml.safe_dump(config))
        elif kind == "params":
            config["components"][0]["params"].update(store_params)
            config["components"][1]["params"].update(retriever_params)
            file.write_text(yaml.safe_dump(config))
        elif kind == "structure":
            file.write_text(yaml.safe_dump(_fuzz.mutate_json(config, rnd, value)))
        else:
            text = yaml.safe_dump(config)
            file.write_text(
                rnd.choice(
                    [raw, text[: rnd.randrange(len(text))], text.replace(":", rnd.choice(["", "::", ": [", ": {"]), 1)]
                ),
                encoding="utf-8",
                errors="surrogatepass",
            )

        pipelines = []

        def load():
            pipelines.append(load_pipeline(file))

        fuzz_log.example()
        if fuzz_log.record("load", outcome_of(load)) != "ok":
            return
        pipeline = pipelines[0]
        store, retriever = pipeline.get_document_store(), pipeline.get_node("Retriever")

        def index_and_query():
            docs = [
                Document(content="Paris is the capital of France.", id="p"),
                Document(content="The Nile is a river in Africa.", id="n"),
            ]
            if isinstance(store, PhraseDocumentStore) and isinstance(retriever, PhraseRetriever):
                store.write_documents(docs)
                store.update_embeddings(retriever)
            pipeline.run(query="What is the capital of France?")

        fuzz_log.record("run", outcome_of(index_and_query, pipeline_run=True))
        if isinstance(store, PhraseDocumentStore):
            assert_store_consistent(store)

    run()


def test_bad_yaml_files_name_the_problem(tmp_path):
    """Unreadable, malformed and non-mapping pipeline files raise Haystack's PipelineConfigError, naming the file."""
    from haystack.errors import PipelineConfigError

    cases = {
        "missing.yml": None,
        "syntax.yml": "components: [",
        "scalar.yml": "just text",
        "empty.yml": "",
        "binary.yml": b"\xff\xfe\x00garbage",
    }
    for name, content in cases.items():
        file = tmp_path / name
        if isinstance(content, bytes):
            file.write_bytes(content)
        elif content is not None:
            file.write_text(content)
        with pytest.raises(PipelineConfigError, match=name):
            load_pipeline(file)


def test_mutation_helpers_are_deterministic():
    """The corruption helpers depend only on their Random (hypothesis replays failing cases exactly)."""
    data = bytes(range(200))
    assert _fuzz.mutate_bytes(data, random.Random(3)) == _fuzz.mutate_bytes(data, random.Random(3))
