"""How ``/file-upload`` indexes the files it accepted (:mod:`.upload`), and what it reports for each.

When the indexing pipeline is one chain of converters and PreProcessors followed by other nodes (the shipped one),
it runs in two stages (:class:`IndexingStages`): every file is converted and split first (cheap), its passages are
checked against the passage bound, the passages already stored (Haystack's ids hash the text) and the repeats are
left out, and only then are the rest encoded and written, in one write. A stored passage is never rewritten: its
meta stays as stored. Any other pipeline runs whole, one file at a time.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Pipeline
from haystack.document_stores import BaseDocumentStore
from haystack.nodes import BaseConverter, PreProcessor
from haystack.schema import Document
from pydantic import BaseModel

from ...errors import InputTooLargeError, InvalidParameterError
from .settings import MAX_PASSAGE_CHARS_ENV


class FileReport(BaseModel):
    """What one uploaded file added, and why the rest of its passages were not added."""

    file: str
    encoding: str | None = None  # "utf-8" or "cp1252"; None where the pipeline's converter read the file
    passages: int | None = None  # None where the pipeline ran whole
    documents_added: int = 0
    already_stored: int = 0
    repeated: int = 0
    notes: list[str] = []


@dataclass(frozen=True)
class IndexingStages:
    """An indexing pipeline cut in two: ``prepare`` (its converters and PreProcessors: files to passages) and
    ``write`` (the rest: passages encoded and written)."""

    prepare: Pipeline
    write: Pipeline


def _chain(pipeline: Pipeline, names: list[str]) -> Pipeline:
    stage, previous = Pipeline(), pipeline.root_node
    for name in names:
        stage.add_node(component=pipeline.get_node(name), name=name, inputs=[previous])
        previous = name
    return stage


def indexing_stages(pipeline: Pipeline) -> IndexingStages | None:
    """``pipeline`` as :class:`IndexingStages`, or None unless it is one chain of converters and PreProcessors
    followed by other nodes."""
    graph, current = pipeline.graph, pipeline.root_node
    names: list[str] = []
    while successors := list(graph.successors(current)):
        if len(successors) > 1 or graph.in_degree(successors[0]) > 1:
            return None
        current = successors[0]
        names.append(current)
    if len(names) != len(graph.nodes) - 1:
        return None
    nodes = [pipeline.get_node(name) for name in names]
    cut = next((i for i, node in enumerate(nodes) if not isinstance(node, (BaseConverter, PreProcessor))), 0)
    return IndexingStages(_chain(pipeline, names[:cut]), _chain(pipeline, names[cut:])) if cut else None


def _prepare(stages: IndexingStages, path: Path, meta: dict[str, Any], params: dict[str, Any]) -> list[Document]:
    """The passages of one file (the ``prepare`` stage); NLTK data missing for a sentence split is a 400."""
    mine = {name: value for name, value in params.items() if name in stages.prepare.graph.nodes}
    try:
        output = stages.prepare.run(file_paths=[str(path)], meta=[meta], params=mine)
    except Exception as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, LookupError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        missing = re.search(r"Resource '?([\w/.-]+)'? not found", str(cause))
        data = missing.group(1) if missing else "sentence tokenizer"
        raise InvalidParameterError(
            f"split_by sentence / split_respect_sentence_boundary need NLTK's {data!r} data, which this server "
            f"lacks (python -m nltk.downloader {data})"
        ) from exc
    return list(output.get("documents") or [])


def _check_prepared(docs: list[Document], name: str, limit: int) -> None:
    longest = max((len(doc.content) for doc in docs if isinstance(doc.content, str)), default=0)
    if longest > limit:
        raise InputTooLargeError(
            f"{name!r} makes a passage of {longest} characters, over the server's {MAX_PASSAGE_CHARS_ENV}={limit}"
        )


def _select(prepared: list[list[Document]], reports: list[FileReport], stored: set[str]) -> list[Document]:
    """The passages to write: each once, none already stored; counted in each file's report."""
    seen: set[str] = set()
    new: list[Document] = []
    for docs, report in zip(prepared, reports):
        report.passages = len(docs)
        for doc in docs:
            if doc.id in seen:
                report.repeated += 1
            elif doc.id in stored:
                report.already_stored += 1
            else:
                new.append(doc)
                report.documents_added += 1
            seen.add(doc.id)
        if report.already_stored:
            report.notes.append(
                f"already stored: {report.already_stored} passages (kept as stored, with their meta; delete them "
                "to upload them anew)"
            )
        if report.repeated:
            report.notes.append(f"{report.repeated} passages repeat an earlier passage of this upload: stored once")
        if not docs:
            report.notes.append("no passages: nothing to index")
    return new


def run_in_stages(
    stages: IndexingStages,
    store: BaseDocumentStore,
    inputs: list[Path],
    metas: list[dict[str, Any]],
    params: dict[str, Any],
    reports: list[FileReport],
    limit: int,
    lock: threading.Lock,
) -> tuple[int, int]:
    """Convert and split every file, then encode and write the new passages in one write; (total, added)."""
    prepared = [_prepare(stages, path, meta, params) for path, meta in zip(inputs, metas)]
    for docs, report in zip(prepared, reports):
        _check_prepared(docs, report.file, limit)
    write_params = {name: value for name, value in params.items() if name in stages.write.graph.nodes}
    with lock:
        before = store.get_document_count()
        ids = list(dict.fromkeys(doc.id for docs in prepared for doc in docs))
        stored = {doc.id for doc in store.get_documents_by_id(ids)} if ids else set()
        new = _select(prepared, reports, stored)
        if new:
            stages.write.run(documents=new, params=write_params)
        after = store.get_document_count()
    return after, after - before


def run_whole(
    pipeline: Pipeline,
    store: BaseDocumentStore | None,
    inputs: list[Path],
    metas: list[dict[str, Any]],
    params: dict[str, Any],
    reports: list[FileReport],
    lock: threading.Lock,
) -> tuple[int, int]:
    """Run the whole pipeline one file at a time, counting what each added; (total, added)."""
    count = store.get_document_count if store is not None else lambda: 0
    with lock:
        first = after = count()
        for path, meta, report in zip(inputs, metas, reports):
            before = after
            pipeline.run(file_paths=[str(path)], meta=[meta], params=params)
            after = count()
            report.documents_added = after - before
    return after, after - first


__all__ = ["FileReport", "IndexingStages", "indexing_stages", "run_in_stages", "run_whole"]
