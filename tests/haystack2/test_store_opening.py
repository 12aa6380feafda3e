"""Two threads loading pipelines on one store directory at once get one store, fully loaded."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("haystack.dataclasses")

from dphr_haystack.haystack2 import PhraseDocumentStore  # noqa: E402


@pytest.mark.parametrize("round_", range(4))
def test_parallel_from_dict_on_one_path_gives_one_store(tmp_path, round_):
    data = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False).to_dict()
    PhraseDocumentStore.from_dict(data).close()  # the first instance is forgotten: the threads open anew
    barrier, found, errors = threading.Barrier(6), [], []

    def open_store() -> None:
        barrier.wait()
        try:
            found.append(PhraseDocumentStore.from_dict(data))
        except Exception as error:  # noqa: BLE001 - the test reports any
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len({id(store) for store in found}) == 1
    found[0].close()
