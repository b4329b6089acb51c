"""One suite, both stores: what ``KeyValueStore`` promises, checked on memory and RocksDB."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit.tables.errors import CorruptStateError
from streamkit.tables.store import KeyValueStore, MemoryStore, RocksStore


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[KeyValueStore]:
    made: KeyValueStore = MemoryStore() if request.param == "memory" else RocksStore(str(tmp_path / "db"))
    yield made
    made.close()


def test_a_new_store_is_empty_and_has_no_offset(store: KeyValueStore) -> None:
    assert store.get(b"a") is None
    assert list(store.items()) == []
    assert store.changelog_offset is None
    assert store.identity is None


def test_apply_writes_puts_deletes_and_the_offset_together(store: KeyValueStore) -> None:
    store.apply([(b"a", b"1"), (b"b", b"2")], 2)
    store.apply([(b"a", None), (b"c", b"3"), (b"b", b"22")], 5)
    assert store.get(b"a") is None
    assert store.get(b"b") == b"22"
    assert list(store.items()) == [(b"b", b"22"), (b"c", b"3")]
    assert store.changelog_offset == 5


def test_deleting_a_missing_key_is_harmless(store: KeyValueStore) -> None:
    store.apply([(b"zz", None)], 1)
    assert list(store.items()) == []
    assert store.changelog_offset == 1


def test_items_by_prefix_in_key_order(store: KeyValueStore) -> None:
    store.apply([(b"user-2", b"x"), (b"user-1", b"y"), (b"usel", b"z"), (b"v", b"w")], 4)
    assert [k for k, _ in store.items(b"user-")] == [b"user-1", b"user-2"]
    assert [k for k, _ in store.items()] == [b"usel", b"user-1", b"user-2", b"v"]


def test_identity_is_kept(store: KeyValueStore) -> None:
    store.set_identity("app/table/0/app-table-changelog")
    assert store.identity == "app/table/0/app-table-changelog"


def test_rocksdb_state_survives_a_reopen(tmp_path) -> None:
    path = str(tmp_path / "db")
    store = RocksStore(path)
    store.apply([(b"k", b"v")], 7)
    store.set_identity("me")
    store.close()
    again = RocksStore(path)
    try:
        assert again.get(b"k") == b"v"
        assert again.changelog_offset == 7
        assert again.identity == "me"
    finally:
        again.close()


def test_rocksdb_read_only_open_sees_the_data_and_changes_nothing(tmp_path) -> None:
    path = str(tmp_path / "db")
    store = RocksStore(path)
    store.apply([(b"k", b"v")], 3)
    store.close()
    reader = RocksStore(path, read_only=True)
    try:
        assert reader.get(b"k") == b"v"
        assert reader.changelog_offset == 3
    finally:
        reader.close()


def test_a_directory_rocksdb_cannot_open_is_reported(tmp_path) -> None:
    path = tmp_path / "db"
    store = RocksStore(str(path))
    store.apply([(b"k", b"v")], 1)
    store.close()
    for name in os.listdir(path):
        if name.startswith("MANIFEST") or name == "CURRENT":
            (path / name).write_bytes(b"garbage, not a manifest")
    with pytest.raises(CorruptStateError, match="cannot open"):
        RocksStore(str(path))


def test_read_only_open_of_a_missing_directory_is_reported(tmp_path) -> None:
    with pytest.raises(CorruptStateError):
        RocksStore(str(tmp_path / "absent"), read_only=True)


keys = st.binary(min_size=1, max_size=4)
batches = st.lists(st.lists(st.tuples(keys, st.none() | st.binary(max_size=3)), max_size=8), max_size=10)


@settings(max_examples=40, deadline=None)
@given(batches=batches)
def test_both_stores_match_a_dict(batches: list[list[tuple[bytes, bytes | None]]]) -> None:
    import tempfile

    model: dict[bytes, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores: list[KeyValueStore] = [MemoryStore(), RocksStore(os.path.join(tmp, "db"))]
        try:
            for offset, batch in enumerate(batches, start=1):
                for key, value in batch:
                    if value is None:
                        model.pop(key, None)
                    else:
                        model[key] = value
                for store in stores:
                    store.apply(batch, offset)
            for store in stores:
                assert dict(store.items()) == model
                assert list(store.items()) == sorted(model.items())
        finally:
            for store in stores:
                store.close()
