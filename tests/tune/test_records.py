"""ortx.tune.records (the SQLite tuning database) and ortx.tune.fingerprint."""
import dataclasses
import sqlite3

import pytest

from ortx.tune.fingerprint import HardwareFingerprint, current
from ortx.tune.records import TuningDatabase, TuningDatabaseError, TuningRecord

HERE = current()
ELSEWHERE = dataclasses.replace(HERE, cpu_model="Some Other CPU", cores=64)
SIGNATURE = "conv2d_f32|1x64x56x56|64x64x3x3|s1p1|t2"


def record(median_ms, *, fingerprint=HERE, status="ok", schedule=None, signature=SIGNATURE, detail=""):
    return TuningRecord(signature, fingerprint.key, "template-a", schedule or {"tile": median_ms}, status,
                        median_ms, detail)


@pytest.fixture
def database(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as db:
        db.add_fingerprint(HERE)
        db.add_fingerprint(ELSEWHERE)
        yield db


def test_fingerprint_describes_this_machine_and_any_change_changes_its_key():
    assert HERE.cores >= 1 and HERE.kernel_isa in ("portable", "avx2", "avx512")
    assert current() == HERE and len(HERE.key) == 16
    assert HardwareFingerprint.from_json(HERE.to_json()) == HERE
    for change in ({"cores": HERE.cores + 1}, {"compiler": "clang 99"}, {"caches": ("L2:1K",)}):
        assert dataclasses.replace(HERE, **change).key != HERE.key


def test_best_is_the_fastest_ok_record_measured_on_this_machine(database):
    database.add(record(2.0, schedule={"tile": "a"}))
    database.add(record(1.5, schedule={"tile": "b"}))
    database.add(record(None, status="wrong_result", schedule={"tile": "c"}, detail="max abs error 3.1"))
    database.add(record(0.1, fingerprint=ELSEWHERE, schedule={"tile": "d"}))  # faster, but another machine
    best = database.best(SIGNATURE, HERE.key)
    assert best.schedule == {"tile": "b"} and best.median_ms == 1.5
    assert database.best(SIGNATURE, ELSEWHERE.key).schedule == {"tile": "d"}
    assert database.best("gemm_f32|other", HERE.key) is None
    assert database.best(SIGNATURE, HERE.key, template="template-b") is None  # another kernel source
    failures = [r for r in database.records(SIGNATURE, HERE.key) if r.status != "ok"]
    assert [(r.status, r.detail, r.median_ms) for r in failures] == [("wrong_result", "max abs error 3.1", None)]


def test_records_persist_across_connections_and_duplicates_are_ignored(tmp_path):
    path = tmp_path / "tuning.sqlite"
    first = record(1.0)
    with TuningDatabase(path) as db:
        db.add_fingerprint(HERE)
        assert db.add(first) is True
        assert db.add(first) is False
    with TuningDatabase(path) as db:
        assert db.records() == [first]


def test_bad_records_name_the_field_at_fault(database):
    with pytest.raises(TuningDatabaseError, match="status 'fast'"):
        record(1.0, status="fast")
    with pytest.raises(TuningDatabaseError, match="median_ms None"):
        record(None, status="ok")
    with pytest.raises(TuningDatabaseError, match="unknown fingerprint"):
        database.add(TuningRecord(SIGNATURE, "0123456789abcdef", "t", {}, "ok", 1.0))
    with pytest.raises(TuningDatabaseError, match="not JSON-serialisable"):
        database.add(record(1.0, schedule={"tile": object()}))


def test_a_corrupt_file_is_moved_aside_and_rebuilt(tmp_path):
    path = tmp_path / "tuning.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.warns(RuntimeWarning, match="moved to .*tuning.sqlite.corrupt and rebuilt"):
        db = TuningDatabase(path)
    with db:
        db.add_fingerprint(HERE)
        db.add(record(1.0))
        assert len(db.records()) == 1
    assert (tmp_path / "tuning.sqlite.corrupt").read_bytes().startswith(b"this is not")


def test_another_schema_version_is_rebuilt(tmp_path):
    path = tmp_path / "tuning.sqlite"
    with TuningDatabase(path) as db:
        db.add_fingerprint(HERE)
        db.add(record(1.0))
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    connection.close()
    with pytest.warns(RuntimeWarning, match="schema version 999"):
        db = TuningDatabase(path)
    with db:
        assert db.records() == []


def test_export_and_import_carry_records_with_their_fingerprints(database, tmp_path):
    database.add(record(1.0))
    database.add(record(0.5, fingerprint=ELSEWHERE))
    database.add(record(3.0, signature="gemm_f32|64x64x64"))
    exported = tmp_path / "records.json"
    assert database.export(exported, signatures={SIGNATURE}) == 2
    with TuningDatabase(tmp_path / "other.sqlite") as other:
        assert other.import_records(exported) == 2
        assert other.import_records(exported) == 0
        assert other.fingerprint(ELSEWHERE.key) == ELSEWHERE
        assert other.best(SIGNATURE, HERE.key).median_ms == 1.0
        assert other.best(SIGNATURE, ELSEWHERE.key).median_ms == 0.5
    broken = tmp_path / "broken.json"
    broken.write_text("{\"records\": []}")
    with TuningDatabase(tmp_path / "third.sqlite") as third, pytest.raises(TuningDatabaseError, match="broken.json"):
        third.import_records(broken)
