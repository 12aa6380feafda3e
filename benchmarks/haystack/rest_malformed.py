"""Malformed and hostile requests to every REST endpoint: which status each gets, and whether errors are JSON.

    .venv/bin/python -m benchmarks.haystack.rest_malformed [--model dphr-minilm-squad-distilled] [--device cpu]

Builds the REST app (``dphr_haystack.nodes.rest.build_app``) in this process with the shipped
``pipelines/rest_api.yml`` over a fresh temporary store, uploads 20 short passages through ``POST /file-upload``,
then sends a fixed suite of requests through ``httpx.ASGITransport`` (no server, no network; FastAPI's TestClient
does not work with this starlette/httpx pair): a few valid controls and well over 80 malformed or hostile ones at
``/query``, ``/query-batch``, ``/compare``, ``/file-upload``, ``/documents/get_by_filters``,
``/documents/delete_by_filters``, ``/feedback`` (not served: 404 expected), ``/initialized`` and ``/hs_version``:
wrong JSON types for each field, missing and unknown fields, unknown params and nodes, out-of-range ``top_k``, a
1 MB question, empty and blank questions, invalid filters (unknown operators, ``$in`` without a list, 100 levels
deep), bodies that are not JSON or are cut short, wrong content types, and uploads with bad ``meta`` /
``additional_params`` / split parameters, binary, empty or oversized files and names with path separators.
The deleting cases run last (``{}`` filters delete every document, as documented).

Each case records its method, path, label, status, milliseconds and whether an error answer (4xx/5xx) is JSON
``{"errors": [str, ...]}``. The summary counts cases per status class and lists every 5xx with its error text.
No timing is compared: the app runs in this process on the machine's CPU (the default shipped model, offline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_MODEL, finish_result, machine, model_id, pyplot, save_figure

PASSAGES = [
    "Nairobi is the capital and largest city of Kenya.",
    "Paris is the capital and most populous city of France.",
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "The Nile is a major north-flowing river in northeastern Africa.",
    "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "The Pacific Ocean is the largest and deepest of Earth's five oceanic divisions.",
    "Marie Curie was the first woman to win a Nobel Prize, in 1903.",
    "The Great Wall of China was built across the historical northern borders of China.",
    "Albert Einstein developed the theory of relativity in the early twentieth century.",
    "The Amazon rainforest covers much of the Amazon basin of South America.",
    "Tokyo is the capital of Japan and its most populous city.",
    "Leonardo da Vinci painted the Mona Lisa in the early sixteenth century.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "Isaac Newton formulated the laws of motion and universal gravitation.",
    "Canberra is the capital city of Australia.",
    "The Sahara is the largest hot desert in the world.",
    "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California.",
    "Beyonce headlined the Super Bowl 50 halftime show together with Coldplay and Bruno Mars.",
    "The human heart has four chambers: two atria and two ventricles.",
]
QUESTION = "What is the capital of Kenya?"
ONE_MB = ("Who wrote the play Hamlet in 1601 and where was it first performed? " * 15_000)[:1_000_000]
SIX_MIB = 6 * 1024 * 1024
ENDPOINTS = (
    "/query",
    "/query-batch",
    "/compare",
    "/file-upload",
    "/documents/get_by_filters",
    "/documents/delete_by_filters",
    "/feedback",
    "/initialized",
    "/hs_version",
)


@dataclass
class Case:
    """One request: ``request`` holds httpx's keyword arguments (json, content, headers, files, data, params)."""

    method: str
    path: str
    label: str
    request: dict[str, Any] = field(default_factory=dict)
    control: bool = False  # a valid request, sent to show the endpoint works


def _nested(depth: int, leaf: Any) -> Any:
    """``{"a": {"a": ... leaf}}``, ``depth`` objects deep."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _deep_filter(depth: int) -> dict[str, Any]:
    """``{"$and": {"$and": ... {"name": "x.txt"}}}``, ``depth`` levels of ``$and``."""
    value: dict[str, Any] = {"name": "passages.txt"}
    for _ in range(depth):
        value = {"$and": value}
    return value


def _deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_filter_text(depth: int) -> str:
    """:func:`_deep_filter` as JSON text, written out by hand: ``json.dumps`` (and so httpx's ``json=``) stops at
    Python's recursion limit, before the request would reach the server."""
    return '{"$and": ' * depth + '{"name": "passages.txt"}' + "}" * depth


JSON_HEADER = {"content-type": "application/json"}


def _raw(method: str, path: str, label: str, text: str) -> Case:
    """A case whose JSON body is sent as written (not encoded by httpx)."""
    return Case(method, path, label, {"content": text.encode(), "headers": JSON_HEADER})


def _query_cases() -> list[Case]:
    q = "/query"
    cases = [
        Case("POST", q, "valid question", {"json": {"query": QUESTION}}, control=True),
        Case("POST", q, "valid global top_k 3", {"json": {"query": QUESTION, "params": {"top_k": 3}}}, control=True),
        Case("POST", q, "valid debug true", {"json": {"query": QUESTION, "debug": True}}, control=True),
    ]
    cases += [
        Case("POST", q, label, {"json": body})
        for label, body in [
            ("query 42", {"query": 42}),
            ("query 4.2", {"query": 4.2}),
            ("query true", {"query": True}),
            ("query null", {"query": None}),
            ("query list", {"query": [QUESTION]}),
            ("query object", {"query": {"text": QUESTION}}),
            ("query missing", {"params": {}}),
            ("body {}", {}),
            ("body []", []),
            ("body a string", "What is the capital of Kenya?"),
            ("body null", None),
            ("unknown field", {"query": QUESTION, "foo": 1}),
            ("empty query", {"query": ""}),
            ("whitespace query", {"query": " \n\t "}),
            ("query of 1,001 characters", {"query": "a" * 1_001}),
            ("1 MB query", {"query": ONE_MB}),
            ("query with NUL and control characters", {"query": "capital\x00of\x01Kenya\x7f?"}),
            ("query of emoji and RTL marks", {"query": "\u202e\U0001f600 \u05e9\u05dc\u05d5\u05dd ?"}),
            ("params a string", {"query": QUESTION, "params": "top_k=5"}),
            ("params a list", {"query": QUESTION, "params": [{"Retriever": {"top_k": 5}}]}),
            ("params unknown node", {"query": QUESTION, "params": {"Reader": {"top_k": 5}}}),
            ("params node a string", {"query": QUESTION, "params": {"Retriever": "top_k"}}),
            ("params unknown parameter", {"query": QUESTION, "params": {"Retriever": {"bogus": 1}}}),
            ("top_k 0", {"query": QUESTION, "params": {"Retriever": {"top_k": 0}}}),
            ("top_k -1", {"query": QUESTION, "params": {"Retriever": {"top_k": -1}}}),
            ("top_k 10**9", {"query": QUESTION, "params": {"Retriever": {"top_k": 10**9}}}),
            ("top_k 10**30", {"query": QUESTION, "params": {"Retriever": {"top_k": 10**30}}}),
            ('top_k "5"', {"query": QUESTION, "params": {"Retriever": {"top_k": "5"}}}),
            ("top_k 1.5", {"query": QUESTION, "params": {"Retriever": {"top_k": 1.5}}}),
            ("top_k null", {"query": QUESTION, "params": {"Retriever": {"top_k": None}}}),
            ("top_k true", {"query": QUESTION, "params": {"Retriever": {"top_k": True}}}),
            ("top_k [5]", {"query": QUESTION, "params": {"Retriever": {"top_k": [5]}}}),
            ("filters a string", {"query": QUESTION, "params": {"Retriever": {"filters": "name=x"}}}),
            ("filters a list", {"query": QUESTION, "params": {"Retriever": {"filters": [1, 2]}}}),
            ("filters unknown operator", {"query": QUESTION, "params": {"filters": {"name": {"$regex": ".*"}}}}),
            ("filters $in a string", {"query": QUESTION, "params": {"filters": {"name": {"$in": "passages.txt"}}}}),
            ("filters $gt an object", {"query": QUESTION, "params": {"filters": {"name": {"$gt": {"a": 1}}}}}),
            ("filters $and a string", {"query": QUESTION, "params": {"filters": {"$and": "x"}}}),
            ("filters nested 100 deep", {"query": QUESTION, "params": {"filters": _deep_filter(100)}}),
            ("debug a string", {"query": QUESTION, "debug": "yes"}),
        ]
    ]
    json_header = {"content-type": "application/json"}
    cases += [
        Case("POST", q, label, {"content": content, "headers": headers})
        for label, content, headers in [
            ("body not JSON", b"What is the capital of Kenya?", json_header),
            ("truncated JSON", b'{"query": "What is the cap', json_header),
            ("empty body", b"", json_header),
            ("invalid UTF-8 body", b'{"query": "\xff\xfe\xfa"}', json_header),
            ("lone surrogate escape", b'{"query": "capital \\ud800 of Kenya"}', json_header),
            ("NaN top_k", b'{"query": "x", "params": {"Retriever": {"top_k": NaN}}}', json_header),
            ("top_k 1e999 (infinity)", b'{"query": "x", "params": {"Retriever": {"top_k": 1e999}}}', json_header),
            ("duplicate query keys", b'{"query": 42, "query": "capital of Kenya?"}', json_header),
            ("JSON nested 100,000 deep", f'{{"query": "x", "params": {_deep_list(100_000)}}}'.encode(), json_header),
            ("valid JSON as text/plain", json.dumps({"query": QUESTION}).encode(), {"content-type": "text/plain"}),
            ("valid JSON, no content type", json.dumps({"query": QUESTION}).encode(), {}),
            ("form-encoded body", b"query=capital+of+Kenya", {"content-type": "application/x-www-form-urlencoded"}),
            ("body over 5 MiB", b'{"query": "' + b"a" * SIX_MIB + b'"}', json_header),
        ]
    ]
    cases += [
        _raw(
            "POST",
            q,
            "filters nested 1,000 deep",
            f'{{"query": "x", "params": {{"filters": {_deep_filter_text(1_000)}}}}}',
        ),
        Case("GET", q, "GET /query"),
        Case("DELETE", q, "DELETE /query"),
        Case("POST", q, "unknown URL parameter", {"json": {"query": QUESTION}, "params": {"top_k": "x"}}),
    ]
    return cases


def _batch_cases() -> list[Case]:
    b = "/query-batch"
    cases = [Case("POST", b, "valid batch", {"json": {"queries": [QUESTION, "Who wrote Hamlet?"]}}, control=True)]
    cases += [
        Case("POST", b, label, {"json": body})
        for label, body in [
            ("queries a string", {"queries": QUESTION}),
            ("queries []", {"queries": []}),
            ("queries null", {"queries": None}),
            ("queries missing", {}),
            ("queries [42]", {"queries": [42]}),
            ("queries [null]", {"queries": [None]}),
            ("queries nested lists", {"queries": [[QUESTION]]}),
            ("queries an object", {"queries": {"q": QUESTION}}),
            ("101 queries", {"queries": [QUESTION] * 101}),
            ("one empty query", {"queries": [QUESTION, ""]}),
            ("one whitespace query", {"queries": [" \t"]}),
            ("one 1 MB query", {"queries": [QUESTION, ONE_MB]}),
            ("query instead of queries", {"query": QUESTION}),
            ("top_k 0", {"queries": [QUESTION], "params": {"Retriever": {"top_k": 0}}}),
            ("top_k -1", {"queries": [QUESTION], "params": {"Retriever": {"top_k": -1}}}),
            ("top_k 10**9", {"queries": [QUESTION], "params": {"Retriever": {"top_k": 10**9}}}),
            ('top_k "5"', {"queries": [QUESTION], "params": {"Retriever": {"top_k": "5"}}}),
            ("top_k 1.5", {"queries": [QUESTION], "params": {"Retriever": {"top_k": 1.5}}}),
            ("params unknown node", {"queries": [QUESTION], "params": {"Ranker": {}}}),
            ("params a list", {"queries": [QUESTION], "params": []}),
            ("filters unknown operator", {"queries": [QUESTION], "params": {"filters": {"name": {"$like": "x"}}}}),
            ("filters nested 100 deep", {"queries": [QUESTION], "params": {"filters": _deep_filter(100)}}),
            ("debug field (not taken)", {"queries": [QUESTION], "debug": True}),
        ]
    ]
    cases.append(
        Case(
            "POST",
            b,
            "truncated JSON",
            {"content": b'{"queries": ["a", ', "headers": {"content-type": "application/json"}},
        )
    )
    return cases


def _compare_cases() -> list[Case]:
    c = "/compare"
    cases = [Case("POST", c, "valid compare", {"json": {"query": QUESTION, "top_k": 3}}, control=True)]
    cases += [
        Case("POST", c, label, {"json": body})
        for label, body in [
            ("query 42", {"query": 42}),
            ("query null", {"query": None}),
            ("query list", {"query": [QUESTION]}),
            ("query missing", {"top_k": 3}),
            ("empty query", {"query": ""}),
            ("whitespace query", {"query": "   "}),
            ("1 MB query", {"query": ONE_MB}),
            ("top_k 0", {"query": QUESTION, "top_k": 0}),
            ("top_k -1", {"query": QUESTION, "top_k": -1}),
            ("top_k 10**9", {"query": QUESTION, "top_k": 10**9}),
            ("top_k 51", {"query": QUESTION, "top_k": 51}),
            ('top_k "5"', {"query": QUESTION, "top_k": "5"}),
            ("top_k 1.5", {"query": QUESTION, "top_k": 1.5}),
            ("top_k null", {"query": QUESTION, "top_k": None}),
            ('top_k "many"', {"query": QUESTION, "top_k": "many"}),
            ("top_k true", {"query": QUESTION, "top_k": True}),
            ("filters a string", {"query": QUESTION, "filters": "name"}),
            ("filters a list", {"query": QUESTION, "filters": ["name"]}),
            ("filters unknown operator", {"query": QUESTION, "filters": {"name": {"$regex": "x"}}}),
            ("filters $in a number", {"query": QUESTION, "filters": {"name": {"$in": 5}}}),
            ("filters $nin an object", {"query": QUESTION, "filters": {"name": {"$nin": {"a": 1}}}}),
            ("filters nested 100 deep", {"query": QUESTION, "filters": _deep_filter(100)}),
            ("filters $or of nulls", {"query": QUESTION, "filters": {"$or": [None, None]}}),
            ("unknown field", {"query": QUESTION, "params": {}}),
        ]
    ]
    cases.append(
        _raw("POST", c, "filters nested 1,000 deep", f'{{"query": "x", "filters": {_deep_filter_text(1_000)}}}')
    )
    cases.append(Case("POST", c, "body not JSON", {"content": b"<xml/>", "headers": {"content-type": "text/xml"}}))
    return cases


def _filter_cases(path: str, deleting: bool) -> list[Case]:
    cases = []
    if not deleting:
        cases.append(Case("POST", path, "valid filters", {"json": {"filters": {"name": ["passages.txt"]}}}, True))
        cases.append(Case("POST", path, "valid null filters (every document)", {"json": {"filters": None}}, True))
    bodies = [
        ("filters a string", {"filters": "name"}),
        ("filters a list", {"filters": [{"name": "x"}]}),
        ("filters 42", {"filters": 42}),
        ("unknown operator", {"filters": {"name": {"$regex": ".*"}}}),
        ("unknown top-level operator", {"filters": {"$xor": [{"name": "a"}, {"name": "b"}]}}),
        ("$in a string", {"filters": {"name": {"$in": "passages.txt"}}}),
        ("$in an object", {"filters": {"name": {"$in": {"a": 1}}}}),
        ("$gt a list", {"filters": {"name": {"$gt": [1, 2]}}}),
        ("$and a string", {"filters": {"$and": "name"}}),
        ("$not a list", {"filters": {"$not": [{"name": "x"}]}}),
        ("nested 100 deep", {"filters": _deep_filter(100)}),
        ("value null", {"filters": {"name": None}}),
        ("value a list of objects", {"filters": {"name": [{"a": 1}]}}),
        ("empty field name", {"filters": {"": "x"}}),
        ("unknown field", {"filters": {"name": "x"}, "limit": 5}),
    ]
    cases += [Case("POST", path, label, {"json": body}) for label, body in bodies]
    cases.append(_raw("POST", path, "nested 1,000 deep", f'{{"filters": {_deep_filter_text(1_000)}}}'))
    cases += [
        Case("POST", path, "index ../../etc", {"json": {"filters": {"name": "x"}}, "params": {"index": "../../etc"}}),
        Case("POST", path, "unknown index", {"json": {"filters": {"name": "x"}}, "params": {"index": "other"}}),
        Case("POST", path, "body not JSON", {"content": b"name=x", "headers": {"content-type": "application/json"}}),
        Case("POST", path, "empty body", {"content": b"", "headers": {"content-type": "application/json"}}),
        Case("GET", path, f"GET {path}"),
    ]
    return cases


def _upload(label: str, files: Any = None, data: dict | None = None, **extra: Any) -> Case:
    request: dict[str, Any] = {"files": files if files is not None else {"files": ("notes.txt", b"A short note.")}}
    if data is not None:
        request["data"] = data
    request.update(extra)
    return Case("POST", "/file-upload", label, request)


def _upload_cases() -> list[Case]:
    text = b"The Zambezi is the fourth-longest river in Africa.\n\nIt flows into the Indian Ocean."
    cases = [
        Case(
            "POST", "/file-upload", "valid upload", {"files": {"files": ("zambezi.txt", text)}}, control=True
        ),  # a new passage, stored
        _upload("meta not JSON", data={"meta": "{source: notes"}),
        _upload("meta a JSON list", data={"meta": '["a", "b"]'}),
        _upload("meta a JSON string", data={"meta": '"notes"'}),
        _upload("meta a number", data={"meta": "42"}),
        _upload("meta 20 levels deep", data={"meta": json.dumps(_nested(20, "x"))}),
        _upload("meta 100,000 levels deep", data={"meta": _deep_list(100_000)}),
        _upload("meta overrides name", data={"meta": '{"name": "/etc/passwd", "id": 5}'}),
        _upload("meta with NaN", data={"meta": '{"score": NaN}'}),
        _upload("additional_params not JSON", data={"additional_params": "{PreProcessor"}),
        _upload("additional_params a list", data={"additional_params": "[1]"}),
        _upload("additional_params unknown node", data={"additional_params": '{"Reader": {}}'}),
        _upload("additional_params Retriever top_k", data={"additional_params": '{"Retriever": {"top_k": 5}}'}),
        _upload("additional_params filters", data={"additional_params": '{"filters": {"name": "x"}}'}),
        _upload("additional_params encoding", data={"additional_params": '{"TextConverter": {"encoding": "utf-16"}}'}),
        _upload(
            "additional_params split_length 0", data={"additional_params": '{"PreProcessor": {"split_length": 0}}'}
        ),
        _upload("additional_params node a string", data={"additional_params": '{"PreProcessor": "split"}'}),
        _upload("split_length -1", data={"split_length": "-1"}),
        _upload("split_length 0", data={"split_length": "0"}),
        _upload('split_length "abc"', data={"split_length": "abc"}),
        _upload("split_length 10**30", data={"split_length": str(10**30)}),
        _upload("split_overlap = split_length", data={"split_by": "word", "split_length": "3", "split_overlap": "3"}),
        _upload("split_overlap -1", data={"split_overlap": "-1"}),
        _upload('split_by "token"', data={"split_by": "token"}),
        _upload('split_by ""', data={"split_by": ""}),
        _upload('split_by "sentence" (needs punkt)', data={"split_by": "sentence", "split_length": "2"}),
        _upload("sentence boundary with split_by passage", data={"split_respect_sentence_boundary": "true"}),
        _upload('remove_numeric_tables "maybe"', data={"remove_numeric_tables": "maybe"}),
        _upload('valid_languages ["xx"]', data={"valid_languages": "xx"}),
        _upload('keep_files "maybe"', params={"keep_files": "maybe"}),
        _upload("binary file (NUL bytes)", {"files": ("data.txt", bytes(range(256)) * 4)}),
        _upload("PNG name", {"files": ("picture.png", b"Plain text in a png name.")}),
        _upload("application/pdf content type", {"files": ("doc.txt", b"%PDF-1.4 text", "application/pdf")}),
        _upload("empty file", {"files": ("empty.txt", b"")}),
        _upload("whitespace-only file", {"files": ("blank.txt", b" \n\n\t \n")}),
        _upload("name ../../etc/passwd", {"files": ("../../etc/passwd", b"A note.")}),
        _upload("name with backslash", {"files": ("..\\..\\evil.txt", b"A note.")}),
        _upload('name ".."', {"files": ("..", b"A note.")}),
        _upload("empty name", {"files": ("", b"A note.")}),
        _upload("name of 300 bytes", {"files": ("n" * 296 + ".txt", b"A note.")}),
        _upload("absolute name /tmp/x.txt", {"files": ("/tmp/x.txt", b"A note.")}),
        _upload("passage over 50,000 characters", {"files": ("long.txt", b"word " * 12_000)}),
        _upload("file over 5 MiB", {"files": ("huge.txt", b"a" * SIX_MIB)}),
        _upload(
            "cp1252 file (not UTF-8)",
            {"files": ("latin.txt", "Caf\u00e9 cr\u00e8me in M\u00fcnchen.".encode("cp1252"))},
        ),
        _upload("control characters (5%)", {"files": ("ctl.txt", b"text\x01\x02\x03" * 50)}),
        _upload(
            "one good file and one binary",
            [
                ("files", ("good.txt", b"The Volga is the longest river in Europe.")),
                ("files", ("bad.bin", b"\x00\x01")),
            ],
        ),
        _upload("files as a form text field", files={}, data={"files": "not a file"}),
        Case("POST", "/file-upload", "no files field", {"data": {"meta": "{}"}}),
        Case("POST", "/file-upload", "JSON body", {"json": {"files": ["notes.txt"]}}),
        Case(
            "POST",
            "/file-upload",
            "multipart without boundary",
            {"content": b"--x\r\n\r\nhello\r\n--x--\r\n", "headers": {"content-type": "multipart/form-data"}},
        ),
        Case(
            "POST",
            "/file-upload",
            "truncated multipart",
            {
                "content": b'--abc\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n\r\nhel',
                "headers": {"content-type": "multipart/form-data; boundary=abc"},
            },
        ),
        Case("GET", "/file-upload", "GET /file-upload"),
    ]
    return cases


def _other_cases() -> list[Case]:
    return [
        Case("GET", "/initialized", "valid", control=True),
        Case("GET", "/hs_version", "valid", control=True),
        Case("POST", "/initialized", "POST /initialized", {"json": {"x": 1}}),
        Case("GET", "/initialized", "unknown URL parameters", {"params": {"debug": "1", "a": "b" * 1000}}),
        Case("PUT", "/hs_version", "PUT /hs_version", {"content": b"1.0"}),
        Case(
            "GET",
            "/hs_version",
            "GET with a JSON body",
            {"content": b'{"a":', "headers": {"content-type": "application/json"}},
        ),
        Case("POST", "/feedback", "POST /feedback (not served)", {"json": {"id": "1", "is_correct_answer": "yes"}}),
        Case("GET", "/feedback", "GET /feedback (not served)"),
        Case("GET", "/../../etc/passwd", "path traversal URL"),
        Case("GET", "/query%00", "NUL in the path"),
    ]


def suite() -> list[Case]:
    """Every case, in the order sent: the deleting ones last, ``{}`` (delete everything) the very last."""
    cases = _other_cases() + _query_cases() + _batch_cases() + _compare_cases()
    cases += _upload_cases() + _filter_cases("/documents/get_by_filters", deleting=False)
    cases += _filter_cases("/documents/delete_by_filters", deleting=True)
    cases.append(
        Case(
            "POST",
            "/documents/delete_by_filters",
            "valid filters matching nothing",
            {"json": {"filters": {"name": "none.txt"}}},
            control=True,
        )
    )
    cases.append(
        Case(
            "POST",
            "/documents/delete_by_filters",
            "valid {} (deletes every document, as documented)",
            {"json": {"filters": {}}},
            control=True,
        )
    )
    return cases


def _error_shape(response: Any) -> tuple[bool, str]:
    """Whether the body is JSON ``{"errors": [str, ...]}``, and its error text (else the body's start)."""
    try:
        body = response.json()
    except ValueError:
        return False, response.text[:300]
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors):
        return True, " | ".join(errors)[:300]
    return False, json.dumps(body)[:300]


async def _run(app: Any, cases: list[Case]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as client:
        text = "\n\n".join(PASSAGES).encode()
        started = time.perf_counter()
        response = await client.post("/file-upload", files={"files": ("passages.txt", text)})
        if response.status_code != 200:
            raise SystemExit(f"indexing the {len(PASSAGES)} passages failed: {response.status_code} {response.text}")
        setup = {"documents_added": response.json()["documents_added"], "seconds": time.perf_counter() - started}
        rows = []
        for case in cases:
            request = client.build_request(case.method, case.path, **case.request)  # a driver error stops the run
            started = time.perf_counter()
            try:
                response = await client.send(request)
                status = response.status_code
                errors_json, text = _error_shape(response) if status >= 400 else (None, "")
                raised = None
            except Exception as exc:  # noqa: BLE001  (an exception out of the app, no answer: counted as a 500)
                status, errors_json, text, raised = 500, False, f"{type(exc).__name__}: {exc}"[:300], True
            rows.append(
                {
                    "method": case.method,
                    "path": case.path,
                    "label": case.label,
                    "control": case.control,
                    "status": status,
                    "errors_json": errors_json,
                    "error": text,
                    "raised": bool(raised),
                    "ms": (time.perf_counter() - started) * 1000,
                }
            )
    return setup, rows


def _status_class(status: int) -> str:
    return f"{status // 100}xx"


def measure(model: str, device: str) -> dict[str, Any]:
    from dphr_haystack.nodes.pipeline import PIPELINES_DIR
    from dphr_haystack.nodes.rest import RestSettings, build_app

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="dphr-rest-malformed-"))
    try:
        settings = RestSettings.from_env(
            {},
            pipeline_yaml=PIPELINES_DIR / "rest_api.yml",
            store_path=work / "store",
            upload_dir=work / "uploads",
            phrase_retriever_params={"model": model, "device": device},
        )
        built = time.perf_counter()
        app = build_app(settings)
        build_seconds = time.perf_counter() - built
        cases = suite()
        suite_started = time.perf_counter()
        setup, rows = asyncio.run(_run(app, cases))
        suite_seconds = time.perf_counter() - suite_started - setup["seconds"]
        leftover = sorted(p.name for p in (work / "uploads").iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    classes = Counter(_status_class(row["status"]) for row in rows)
    hostile = [row for row in rows if not row["control"]]
    return {
        "machine": machine(),
        "model": model,
        "model_id": model_id(model),
        "device": device,
        "pipeline": "pipelines/rest_api.yml",
        "passages_indexed": setup["documents_added"],
        "build_app_seconds": build_seconds,
        "index_seconds": setup["seconds"],
        "suite_seconds": suite_seconds,
        "cases": len(rows),
        "controls": len(rows) - len(hostile),
        "hostile": len(hostile),
        "status_classes": dict(sorted(classes.items())),
        "statuses": dict(sorted(Counter(str(row["status"]) for row in rows).items())),
        "hostile_status_classes": dict(sorted(Counter(_status_class(r["status"]) for r in hostile).items())),
        "server_errors": [row for row in rows if row["status"] >= 500],
        "errors_not_json": [row for row in rows if row["status"] >= 400 and not row["errors_json"]],
        "controls_failed": [row for row in rows if row["control"] and row["status"] >= 300],
        "upload_folder_left": leftover,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    classes = result["status_classes"]
    lines = [
        f"{result['cases']} requests ({result['controls']} valid controls, {result['hostile']} malformed or hostile) "
        f"to the REST app built in-process from `{result['pipeline']}` (`{result['model']}`, {result['device']}) over "
        f"a fresh store of {result['passages_indexed']} passages, through `httpx.ASGITransport`; "
        f"{result['machine']['cpu']} ({result['machine']['cores']} cores), suite {result['suite_seconds']:.1f} s:",
        "",
        '| endpoint | cases | 2xx | 4xx | 5xx | 4xx/5xx with JSON `{"errors"}` |',
        "|---|---:|---:|---:|---:|---:|",
    ]
    paths = list(ENDPOINTS) + sorted({r["path"] for r in rows} - set(ENDPOINTS))
    for path in paths:
        mine = [r for r in rows if r["path"] == path]
        if not mine:
            continue
        count = Counter(_status_class(r["status"]) for r in mine)
        failed = [r for r in mine if r["status"] >= 400]
        shaped = sum(1 for r in failed if r["errors_json"])
        lines.append(
            f"| `{path}` | {len(mine)} | {count.get('2xx', 0)} | {count.get('4xx', 0)} | {count.get('5xx', 0)} | "
            f"{shaped}/{len(failed)} |"
        )
    lines.append(
        f"| **all** | **{len(rows)}** | **{classes.get('2xx', 0)}** | **{classes.get('4xx', 0)}** | "
        f"**{classes.get('5xx', 0)}** | **{sum(1 for r in rows if r['status'] >= 400 and r['errors_json'])}/"
        f"{sum(1 for r in rows if r['status'] >= 400)}** |"
    )
    statuses = ", ".join(f"{code}: {n}" for code, n in result["statuses"].items())
    lines += ["", f"Status codes: {statuses}."]
    if result["server_errors"]:
        lines += ["", "**5xx answers:**", "", "| endpoint | case | status | error |", "|---|---|---:|---|"]
        for r in result["server_errors"]:
            lines.append(
                f"| `{r['method']} {r['path']}` | {_cell(r['label'])} | {r['status']} | {_cell(r['error'])} |"
            )
    else:
        lines += ["", "No 5xx answer."]
    if result["errors_not_json"]:
        labels = "; ".join(
            f"`{r['method']} {r['path']}` {r['label']} ({r['status']})" for r in result["errors_not_json"]
        )
        lines += ["", f'Error answers not shaped `{{"errors": [...]}}`: {labels}.']
    if result["controls_failed"]:
        labels = "; ".join(f"`{r['path']}` {r['label']} ({r['status']})" for r in result["controls_failed"])
        lines += ["", f"Valid controls that failed: {labels}."]
    accepted = [r for r in rows if not r["control"] and r["status"] < 300]
    if accepted:
        labels = "; ".join(f"`{r['path']}` {r['label']}" for r in accepted)
        lines += ["", f"Malformed or hostile requests answered 2xx ({len(accepted)}): {labels}."]
    lines += ["", "Every case:", "", "| endpoint | case | status |", "|---|---|---:|"]
    for r in rows:
        mark = " (control)" if r["control"] else ""
        lines.append(f"| `{r['method']} {r['path']}` | {_cell(r['label'])}{mark} | {r['status']} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    statuses = result["statuses"]
    colours = {"2": "#55a868", "4": "#4c72b0", "5": "#c44e52"}
    ax.bar(list(statuses), list(statuses.values()), color=[colours.get(code[0], "#8c8c8c") for code in statuses])
    ax.set_xlabel(f"status code ({result['cases']} malformed, hostile and control requests)")
    ax.set_ylabel("requests")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the phrase model (a shipped name or a directory)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    finish_result("rest_malformed", measure(args.model, args.device), markdown, plot)


if __name__ == "__main__":
    main()
