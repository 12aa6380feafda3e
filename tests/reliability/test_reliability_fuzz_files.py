"""Fuzzed damaged files: truncated, bit-flipped, garbage-appended, deleted or JSON-mutated index files, model
checkpoints, dump shards and saved stores. Loading either works (and then searching works) or raises a typed error
with a message. Case counts: see tests/reliability/_fuzz.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher, PhraseShard, dump_phrases, list_shards
from dphr_haystack.encode.add import add_passages
from tests.reliability import _fuzz
from tests.reliability._checks import assert_index_consistent, check_hits, outcome_of

QUERIES = ["Which NFL team represented the AFC at Super Bowl 50?", "capital of france", "Where is the Nile?"]


def _copy(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def _damage(folder: Path, names: list[str], rnd, json_value, count: int) -> list[str]:
    done = []
    for _ in range(count):
        name = rnd.choice(names)
        done.append(_fuzz.damage_file(folder / name, rnd, json_value))
    return done


@pytest.fixture(scope="module")
def saved_indexes(tmp_path_factory, _tiny_model_session, squad_passages):
    """A flat float16 index and an IVF int8 index (with a FAISS file) of 12 SQuAD paragraphs."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("indexes")
    out = {}
    for name, factory, dtype in (("flat", "Flat", "float16"), ("ivf", "IVF4,Flat", "int8")):
        index = PhraseIndex.create(_tiny_model_session, path=root / name, faiss_factory=factory, dtype=dtype)
        add_passages(index, _tiny_model_session, squad_passages[:8], progress=False)
        add_passages(index, _tiny_model_session, squad_passages[8:12], progress=False)
        index.delete_passages([squad_passages[0]["id"]])
        out[name] = root / name
    return out


@pytest.mark.parametrize(
    "key",
    [
        "model_fingerprint",
        "dim",
        "codec",
        "faiss_factory",
        "counts",
        "passages_bytes",
        "checksums",
        "filter_threshold",
        "faiss_file",
        "model_path",
        "model_config",
    ],
)
def test_a_manifest_missing_a_field_is_refused_on_load(saved_indexes, tmp_path, key):
    """Found by the 10,000-case run: a manifest without ``filter_threshold`` loaded, then failed with a KeyError."""
    from dphr_haystack.errors import IndexLoadError

    folder = _copy(saved_indexes["flat"], tmp_path / "index")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest[key]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match=key):
        PhraseIndex.load(folder)


def test_index_files(fuzz_profile, fuzz_log, saved_indexes, tiny_model, tmp_path):
    """Damaged manifest, vectors, tokens, passages, tombstones and FAISS files of a phrase index."""
    counter = iter(range(10**9))
    searcher_model = tiny_model

    @_fuzz.fuzz_settings("index_files", fuzz_profile)
    @given(
        kind=st.sampled_from(sorted(saved_indexes)),
        rnd=st.randoms(use_true_random=False),
        json_value=_fuzz.JSON_VALUES,
        count=st.integers(1, 3),
        verify=st.booleans(),
    )
    def run(kind, rnd, json_value, count, verify):
        folder = _copy(saved_indexes[kind], tmp_path / f"idx-{next(counter)}")
        names = sorted(p.name for p in folder.iterdir())
        _damage(folder, names, rnd, json_value, count)
        loaded = []

        def load():
            loaded.append(PhraseIndex.load(folder, model=searcher_model, verify=verify))

        fuzz_log.example()
        if fuzz_log.record("load", outcome_of(load)) != "ok":
            return
        index = loaded[0]
        if verify:  # checksums passed: the bookkeeping must be intact
            assert_index_consistent(index)
        searcher = PhraseSearcher(index, searcher_model)

        def search():
            for unit in ("phrase", "passage", "document"):
                for hits in searcher.search_batch(QUERIES, unit=unit, top_k=5):
                    if verify:  # vectors.bin carries no checksum: damaged vectors may score NaN
                        check_hits(index, hits, 5, finite=False)

        fuzz_log.record("search", outcome_of(search))

    run()


def _tamper(folder: Path, kind: str, data) -> str:
    """One semantically impossible change to an index directory (drawn from ``data``); returns what it did."""
    from dphr_haystack.index.shards import TOKEN_DTYPE

    manifest = json.loads((folder / "manifest.json").read_text()) if kind in ("codec", "search_params") else {}
    if kind == "tombstones":
        extra = data.draw(st.lists(_fuzz.INT64_EDGES, min_size=1, max_size=3))
        old = np.fromfile(folder / "tombstones.bin", dtype=np.int64) if (folder / "tombstones.bin").exists() else []
        np.concatenate([old, np.asarray(extra, dtype=np.int64)]).astype(np.int64).tofile(folder / "tombstones.bin")
        return f"tombstones + {extra}"
    if kind == "token":
        tokens = np.fromfile(folder / "tokens.bin", dtype=TOKEN_DTYPE)
        row = data.draw(st.integers(0, len(tokens) - 1))
        field = data.draw(st.sampled_from(["char_start", "char_end", "position", "passage"]))
        value = data.draw(_fuzz.INT64_EDGES if field == "passage" else _fuzz.INT32_EDGES)
        tokens[row][field] = value
        tokens.tofile(folder / "tokens.bin")
        return f"token {row} {field}={value}"
    if kind == "duplicate_id":
        records = [json.loads(line) for line in (folder / "passages.jsonl").read_text(encoding="utf-8").splitlines()]
        first, second = data.draw(st.lists(st.integers(0, len(records) - 1), min_size=2, max_size=2, unique=True))
        records[second]["id"] = records[first]["id"]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        (folder / "passages.jsonl").write_text(text, encoding="utf-8")
        return f"passage {second} takes the id of {first}"
    if kind == "codec":
        key = data.draw(st.sampled_from(["scale", "offset"]))
        manifest["codec"][key] = data.draw(_fuzz.FLOAT_EDGES)
        (folder / "manifest.json").write_text(json.dumps(manifest))
        return f"codec {key}={manifest['codec'][key]!r}"
    if kind == "search_params":
        params = data.draw(
            st.one_of(
                st.dictionaries(
                    st.sampled_from(["refine", "nprobe", "efSearch", "ht", "bogus"]), _fuzz.SEARCH_PARAM_VALUES
                ),
                _fuzz.SEARCH_PARAM_VALUES,
            )
        )
        manifest["search_params"] = params
        (folder / "manifest.json").write_text(json.dumps(manifest))
        return f"search_params={params!r:.60}"
    if kind == "directory":
        name = data.draw(st.sampled_from(sorted(p.name for p in folder.iterdir())))
        (folder / name).unlink()
        (folder / name).mkdir()
        return f"{name} is a directory"
    depth = data.draw(st.sampled_from([50, 5_000, 100_000]))
    (folder / "manifest.json").write_text(data.draw(st.sampled_from(["[", '{"a": '])) * depth)
    return f"manifest nested {depth} deep"


def test_hostile_index_values(fuzz_profile, fuzz_log, saved_indexes, tiny_model, tmp_path):
    """Impossible tombstones, token offsets, duplicate live ids, codec values, search parameters, deep nesting and
    directories where files go, with counts and checksums recomputed to match: refused with IndexLoadError, or the
    index loads with every invariant intact and searches return true slices of their passages."""
    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("hostile_index_values", fuzz_profile)
    @given(
        kind=st.sampled_from(sorted(saved_indexes)),
        changes=st.lists(
            st.sampled_from(["tombstones", "token", "duplicate_id", "codec", "search_params"]), min_size=0, max_size=2
        ),
        last=st.sampled_from([None, None, None, "directory", "nesting"]),
        verify=st.booleans(),
        data=st.data(),
    )
    def run(kind, changes, last, verify, data):
        folder = _copy(saved_indexes[kind], tmp_path / f"hostile-{next(counter)}")
        for change in changes or ["tombstones"]:
            _tamper(folder, change, data)
            _fuzz.recompute_checksums(folder)
        if last is not None:  # after the checksums: nothing left to hash
            _tamper(folder, last, data)
        loaded = []
        fuzz_log.example()
        outcome = fuzz_log.record("load", outcome_of(lambda: loaded.append(PhraseIndex.load(folder, verify=verify))))
        assert outcome in ("ok", "IndexLoadError"), outcome
        if outcome != "ok":
            return
        index = loaded[0]
        assert_index_consistent(index)
        tombstones = index.storage.tombstones.view()
        assert ((tombstones >= 0) & (tombstones < index.num_passages)).all()
        lengths = np.array([len(p["text"]) for p in index.passages], dtype=np.int64)
        tokens = index.tokens
        ends = tokens["char_end"].astype(np.int64)
        assert (tokens["char_start"] >= 0).all() and (ends >= tokens["char_start"]).all()
        assert (ends <= lengths[tokens["passage"]]).all()
        searcher = PhraseSearcher(index, tiny_model)

        def search():
            for hits in searcher.search_batch(QUERIES, unit="phrase", top_k=5):
                check_hits(index, hits, 5, finite=False)

        fuzz_log.record("search", outcome_of(search))

    run()


WRITE_OPS = ["add", "delete", "search_params", "save_copy", "commit", "reindex"]


def test_symlinked_files(fuzz_profile, fuzz_log, saved_indexes, tiny_model, tmp_path, squad_passages):
    """Symbolic links (to files outside, or dangling) planted where an index's files, its lock, temporary names or a
    save target go, then a write: it works or raises UnsafePathError (IndexLoadError when a link hides a file the
    load needs), and nothing outside the index directory is created or changed."""
    from dphr_haystack.errors import UnsafePathError

    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("symlinked_files", fuzz_profile)
    @given(
        kind=st.sampled_from(sorted(saved_indexes)),
        picks=st.lists(st.integers(0, 99), min_size=1, max_size=3, unique=True),
        dangling=st.booleans(),
        op=st.sampled_from(WRITE_OPS),
    )
    def run(kind, picks, dangling, op):
        root = tmp_path / f"links-{next(counter)}"
        folder = _copy(saved_indexes[kind], root / "index")
        outside = root / "outside"
        outside.mkdir()
        places = sorted(p.name for p in folder.iterdir()) + ["manifest.json.tmp", "tombstones.bin", ".dphr.lock"]
        places += ["../.index.lock", "../copy", "../.copy.lock"]  # (where earlier versions kept the lock files)
        for pick in picks:
            place = folder / places[pick % len(places)]
            if place.is_symlink():
                continue
            target = outside / f"target-{pick}"
            if place.name == "copy":
                target.mkdir()
                (target / "keep").write_bytes(b"keep")
            elif not dangling:
                target.write_bytes(place.read_bytes() if place.is_file() else b"outside")
            place.unlink(missing_ok=True)
            place.symlink_to(target, target_is_directory=place.name == "copy")
        before = {p: (p.read_bytes() if p.is_file() else None) for p in outside.rglob("*")}

        def write():
            index = PhraseIndex.load(folder)
            if op == "add":
                add_passages(index, tiny_model, squad_passages[12:14], progress=False)
            elif op == "delete":
                index.delete_passages([index.live_passage_ids()[0]])
            elif op == "search_params":
                index.set_search_params(**({"refine": 2} if kind == "flat" else {"nprobe": 2}))
            elif op == "save_copy":
                index.save(root / "copy")
            elif op == "commit":
                index.save(folder)
            else:
                index.reindex("Flat" if kind == "flat" else "IVF2,Flat", progress=False)

        fuzz_log.example()
        outcome = fuzz_log.record(op, outcome_of(write))
        assert outcome in ("ok", UnsafePathError.__name__, "IndexLoadError"), outcome
        assert {p: (p.read_bytes() if p.is_file() else None) for p in outside.rglob("*")} == before

    run()


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory, _tiny_model_session):
    """The tiny model saved in the dphr format and as a DensePhrases checkpoint (config.json + pytorch_model.bin)."""
    import torch

    root = tmp_path_factory.mktemp("models")
    _tiny_model_session.save(root / "dphr")
    dp = root / "densephrases"
    dp.mkdir()
    (dp / "config.json").write_text(_tiny_model_session.phrase_encoder.config.to_json_string())
    state = {k.replace("phrase_encoder.", "bert_start."): v for k, v in _tiny_model_session.state_dict().items()}
    torch.save(state, dp / "pytorch_model.bin")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (root / "dphr" / name).is_file():
            shutil.copy(root / "dphr" / name, dp / name)
    return {"dphr": root / "dphr", "densephrases": dp}


def test_model_checkpoints(fuzz_profile, fuzz_log, saved_models, tmp_path):
    """Damaged dphr model directories and DensePhrases checkpoints: weights, configs, tokenizer files."""
    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("model_checkpoints", fuzz_profile)
    @given(
        kind=st.sampled_from(sorted(saved_models)),
        rnd=st.randoms(use_true_random=False),
        json_value=_fuzz.JSON_VALUES,
        count=st.integers(1, 2),
    )
    def run(kind, rnd, json_value, count):
        folder = _copy(saved_models[kind], tmp_path / f"model-{next(counter)}")
        _damage(folder, sorted(p.name for p in folder.iterdir()), rnd, json_value, count)
        loaded = []

        def load():
            loaded.append(PhraseModel.load(folder))

        fuzz_log.example()
        if fuzz_log.record("load", outcome_of(load)) != "ok":
            return
        model = loaded[0]
        q_start, q_end = model.encode_queries(["Who won Super Bowl 50?", "😀 " * 300])
        assert q_start.shape == q_end.shape == (2, model.hidden_size)
        encoded = model.encode_passages(["Denver won Super Bowl 50. " * 20], ["Super Bowl"])
        assert encoded[0].vectors.shape[1] == model.hidden_size
        fuzz_log.record("encode", "ok")

    run()


@pytest.fixture(scope="module")
def saved_dump(tmp_path_factory, _tiny_model_session, squad_passages):
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("dump") / "dump"
    dump_phrases(_tiny_model_session, squad_passages[:12], out, shard_size=4, progress=False)
    return out


def test_dump_shards(fuzz_profile, fuzz_log, saved_dump, tiny_model, tmp_path, squad_passages):
    """Damaged shard files: loading refuses them (checksums) or merges; resuming the dump repairs them."""
    counter = iter(range(10**9))
    corpus = squad_passages[:12]
    clean = PhraseIndex.create(tiny_model)
    for shard_dir in list_shards(saved_dump):
        clean.add_shard(PhraseShard.load(shard_dir))

    @_fuzz.fuzz_settings("dump_shards", fuzz_profile)
    @given(rnd=st.randoms(use_true_random=False), json_value=_fuzz.JSON_VALUES, count=st.integers(1, 3))
    def run(rnd, json_value, count):
        folder = _copy(saved_dump, tmp_path / f"dump-{next(counter)}")
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        _damage(folder, files, rnd, json_value, count)
        fuzz_log.example()
        index = PhraseIndex.create(tiny_model)

        def merge():
            for shard_dir in list_shards(folder):
                index.add_shard(PhraseShard.load(shard_dir))

        if fuzz_log.record("merge", outcome_of(merge)) == "ok":
            assert_index_consistent(index)
            PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=3)

        def resume():  # resuming repairs a damaged dump to the clean result, or refuses with a typed error
            dump_phrases(tiny_model, corpus, folder, shard_size=4, progress=False)
            repaired = PhraseIndex.create(tiny_model)
            for shard_dir in list_shards(folder):
                repaired.add_shard(PhraseShard.load(shard_dir))
            assert repaired.passages == clean.passages
            assert np.array_equal(repaired.vectors(), clean.vectors())

        fuzz_log.record("resume", outcome_of(resume))

    run()


@pytest.fixture(scope="module")
def saved_store(tmp_path_factory, model_dir, squad_passages):
    pytest.importorskip("haystack")
    import torch
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    torch.set_num_threads(1)
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=3, device="cpu")
    store.index_documents(
        [
            Document(content=p["text"], id=p["id"], meta={"title": p["title"], "n": n})
            for n, p in enumerate(squad_passages[:10])
        ],
        retriever,
    )
    path = tmp_path_factory.mktemp("store") / "store"
    store.save(path)
    return path


def test_saved_stores(fuzz_profile, fuzz_log, saved_store, model_dir, tmp_path):
    """Damaged saved PhraseDocumentStore directories: manifest, documents file, phrase index files."""
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
    from tests.reliability._checks import assert_store_consistent, check_documents

    counter = iter(range(10**9))

    @_fuzz.fuzz_settings("saved_stores", fuzz_profile)
    @given(rnd=st.randoms(use_true_random=False), json_value=_fuzz.JSON_VALUES, count=st.integers(1, 2))
    def run(rnd, json_value, count):
        folder = _copy(saved_store, tmp_path / f"store-{next(counter)}")
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        _damage(folder, files, rnd, json_value, count)
        loaded = []

        def load():
            loaded.append(PhraseDocumentStore.load(folder))

        fuzz_log.example()
        if fuzz_log.record("load", outcome_of(load)) != "ok":
            return
        store = loaded[0]
        assert_store_consistent(store)
        retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=3, device="cpu")

        def retrieve():
            check_documents(store, retriever.retrieve(QUERIES[0]))
            store.update_embeddings(retriever)
            assert_store_consistent(store)

        fuzz_log.record("retrieve", outcome_of(retrieve))

    run()


def test_corrupted_shard_json_is_redone_on_resume(saved_dump, tiny_model, tmp_path, squad_passages):
    """A shard whose shard.json is unreadable counts as incomplete: resuming encodes it again."""
    folder = _copy(saved_dump, tmp_path / "dump")
    shard = list_shards(folder)[1]
    (shard / "shard.json").write_text("{not json")
    summary = dump_phrases(tiny_model, squad_passages[:12], folder, shard_size=4, progress=False)
    assert (summary.encoded_shards, summary.skipped_shards) == (1, 2)
    assert json.loads((shard / "shard.json").read_text())["num_passages"] == 4
