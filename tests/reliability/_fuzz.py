"""Hypothesis budgets and shared strategies for the fuzz tests.

Two settings profiles: ``dphr-ci`` (the default run: about ``CI_TOTAL`` cases over all fuzz tests, derandomized
so CI is reproducible) and ``dphr-fuzz`` (the ``slow``-marked run: ``DPHR_FUZZ_EXAMPLES`` cases in total,
default 10,000, random). Each fuzz test takes a share of the total proportional to its weight.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

CI_TOTAL = 287  # 220 before the hostile-file tests were added; each test keeps its share (19 cases per weight 1)
FULL_TOTAL = int(os.environ.get("DPHR_FUZZ_EXAMPLES", "10000"))
# Relative cost-adjusted weights of the fuzz tests (their names without the test_ prefix).
WEIGHTS = {
    "queries": 2.0,
    "documents": 1.5,
    "yaml_pipelines": 2.0,
    "index_files": 2.0,
    "model_checkpoints": 1.0,
    "dump_shards": 1.0,
    "saved_stores": 1.0,
    "corpus_records": 1.0,
    "hostile_index_values": 1.5,
    "symlinked_files": 1.0,
    "corpus_files": 1.0,
}

_COMMON = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)
settings.register_profile("dphr-ci", derandomize=True, **_COMMON)
settings.register_profile("dphr-fuzz", derandomize=False, **_COMMON)


def examples(name: str, profile: str) -> int:
    total = CI_TOTAL if profile == "ci" else FULL_TOTAL
    return max(3, round(total * WEIGHTS[name] / sum(WEIGHTS.values())))


def fuzz_settings(name: str, profile: str, **overrides) -> settings:
    """The profile's settings with this test's share of the examples."""
    parent = settings.get_profile("dphr-ci" if profile == "ci" else "dphr-fuzz")
    return settings(parent, max_examples=examples(name, profile), **overrides)


def budget_summary() -> dict:
    return {
        "ci_total": CI_TOTAL,
        "full_total": FULL_TOTAL,
        "weights": WEIGHTS,
        "per_test_full": {name: examples(name, "full") for name in WEIGHTS},
    }


# ----------------------------------------------------------------- text
EMOJI = "😀🎉👍🏽🇫🇷👨‍👩‍👧‍👦❤️‍🔥🧪"
SCRIPTS = "Парижالقاهرة東京서울नमस्तेשָׁלוֹםΑθήναกรุงเทพ"
CONTROL = "".join(chr(c) for c in range(0, 32)) + "\x7f\x85\u200b\u200e\u202e\u2028\u2029\ufeff\ufffe"

any_char = st.characters(codec=None, exclude_categories=())  # every code point, lone surrogates included
texts = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=any_char, max_size=40),
    st.text(alphabet=st.sampled_from(" \t\n\r\x0b\x0c\u00a0\u3000"), max_size=20),
    st.text(alphabet=st.sampled_from(CONTROL), max_size=20),
    st.text(alphabet=st.sampled_from(EMOJI + SCRIPTS + " ?abc"), max_size=60),
    st.builds(
        lambda word, n: (word + " ") * n, st.sampled_from(["a", "Paris", "東京", "😀", "?"]), st.integers(1000, 20_000)
    ),  # long: up to 100k+ characters
)


# ----------------------------------------------------------------- files
def mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    """One random corruption: truncate, flip bytes, append or insert garbage, zero a range, or empty."""
    kind = rnd.choice(["truncate", "flip", "flip", "append", "insert", "zero", "empty", "replace"])
    buf = bytearray(data)
    if kind == "truncate" and buf:
        return bytes(buf[: rnd.randrange(len(buf))])
    if kind == "flip" and buf:
        for _ in range(rnd.randint(1, 8)):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
        return bytes(buf)
    if kind == "append":
        return bytes(buf) + rnd.randbytes(rnd.randint(1, 64))
    if kind == "insert":
        pos = rnd.randrange(len(buf) + 1)
        return bytes(buf[:pos]) + rnd.randbytes(rnd.randint(1, 16)) + bytes(buf[pos:])
    if kind == "zero" and buf:
        start = rnd.randrange(len(buf))
        end = min(len(buf), start + rnd.randint(1, 256))
        buf[start:end] = bytes(end - start)
        return bytes(buf)
    if kind == "replace":
        return rnd.randbytes(rnd.randint(0, max(1, len(buf))))
    return b""


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def mutate_json(value, rnd: random.Random, replacement):
    """Replace, delete or add one entry somewhere inside a parsed JSON document."""
    containers = [value]
    stack = [value]
    while stack:
        item = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else []
        for child in children:
            if isinstance(child, (dict, list)):
                containers.append(child)
                stack.append(child)
    target = rnd.choice(containers)
    if isinstance(target, dict):
        if target and rnd.random() < 0.8:
            key = rnd.choice(sorted(target, key=str))
            if rnd.random() < 0.25:
                del target[key]
            else:
                target[key] = replacement
        else:
            target[f"extra{rnd.randrange(100)}"] = replacement
    elif isinstance(target, list):
        if target:
            target[rnd.randrange(len(target))] = replacement
        else:
            target.append(replacement)
    return value


def damage_file(file: Path, rnd: random.Random, json_value=None) -> str:
    """Corrupt ``file`` in place (JSON-aware for .json files); returns a description of what was done."""
    import json

    if not file.exists():
        return f"{file.name}: missing"
    data = file.read_bytes()
    if file.suffix == ".json" and json_value is not None and rnd.random() < 0.6:
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            file.write_text(json.dumps(mutate_json(parsed, rnd, json_value)))
            return f"{file.name}: json value -> {json_value!r:.60}"
    if rnd.random() < 0.05:
        file.unlink()
        return f"{file.name}: deleted"
    file.write_bytes(mutate_bytes(data, rnd))
    return f"{file.name}: bytes"


# ----------------------------------------------------------------- hostile values, with checksums made to match
INT64_EDGES = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([-(2**63), 2**63 - 1, -(2**31), 2**31 - 1, 2**32, -1]),
    st.integers(-(2**63), 2**63 - 1),
)
INT32_EDGES = st.one_of(
    st.integers(-3, 2000), st.sampled_from([-(2**31), 2**31 - 1, -1, 0]), st.integers(-(2**31), 2**31 - 1)
)
FLOAT_EDGES = st.one_of(
    st.floats(),  # nan and ±inf included
    st.sampled_from([1e-300, 5e-324, 1e300, 0.0, -0.0, 1e-7, 1e-6, 1e9, 2e9, 1e6, -1e6, 20.0, -2.0]),
)
SEARCH_PARAM_VALUES = st.one_of(
    JSON_VALUES, st.integers(-3, 2**40), st.floats(), st.sampled_from(["abc", "8", True, None, [], {}])
)


def recompute_checksums(folder: Path) -> None:
    """Make an index manifest agree with its (tampered) files: counts, byte lengths and checksums recomputed."""
    import json

    from dphr_haystack.index.storage import FILES, sha256_prefix

    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("passages", "tombstones", "tokens"):
        if (folder / FILES[key]).is_dir():
            return  # a directory where the file goes: nothing to hash
    passages = folder / FILES["passages"]
    tombstones = folder / FILES["tombstones"]
    manifest["passages_bytes"] = passages.stat().st_size if passages.exists() else 0
    manifest["counts"]["passages"] = passages.read_bytes().count(b"\n") if passages.exists() else 0
    manifest["counts"]["tombstones"] = tombstones.stat().st_size // 8 if tombstones.exists() else 0
    manifest["checksums"] = {
        key: sha256_prefix(folder / FILES[key], None) for key in ("tokens", "passages", "tombstones")
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
