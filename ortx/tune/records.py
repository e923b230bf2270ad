"""The tuning database: one SQLite file of measured schedules, keyed by kernel signature and hardware fingerprint.

1. Schema version SCHEMA_VERSION in table `meta`; tables `fingerprints` (key -> the fingerprint's JSON) and
   `records` (signature, fingerprint key, template hash, schedule JSON, status, median ms, detail, source, time).
2. Failures are rows too (status compile_error / timeout / wrong_result / error, median NULL): a search does not
   retry what already failed here, and a report can say why a candidate is missing.
3. `best` only answers from records of the asked fingerprint (and template, when given): records imported from
   another machine are kept for reading, never used as if measured here.
4. A file that is not a database, fails `PRAGMA integrity_check`, or has another schema version is moved aside to
   `<name>.corrupt` with a warning and rebuilt empty: a tuning record is never trusted blindly.
5. `export` writes JSON (atomically: temp file + rename) so a tuned model can ship with its records; `import_records`
   merges such a file, skipping rows already present.
Limits: one writer at a time (SQLite's own file lock, 30 s busy timeout); no eviction.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import tempfile
import time
import warnings
from pathlib import Path

from ortx.tune.fingerprint import HardwareFingerprint

SCHEMA_VERSION = 1
STATUSES = ("ok", "compile_error", "timeout", "wrong_result", "error")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE fingerprints (key TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    signature TEXT NOT NULL,
    fingerprint TEXT NOT NULL REFERENCES fingerprints(key),
    template TEXT NOT NULL,
    schedule TEXT NOT NULL,
    status TEXT NOT NULL,
    median_ms REAL,
    detail TEXT NOT NULL,
    source TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (signature, fingerprint, template, schedule, status, median_ms, created)
);
CREATE INDEX records_by_key ON records (signature, fingerprint, template);
"""


class TuningDatabaseError(RuntimeError):
    """A record that cannot be stored as given (the message names the field)."""


@dataclasses.dataclass(frozen=True)
class TuningRecord:
    signature: str  # the kernel and the shapes it was specialised for, e.g. "conv2d_f32|1x64x56x56|64x64x3x3|s1p1"
    fingerprint: str  # HardwareFingerprint.key
    template: str  # hash of the kernel source the schedule parameterises
    schedule: dict  # the schedule's fields (JSON-serialisable)
    status: str  # one of STATUSES
    median_ms: float | None  # None unless status == "ok"
    detail: str = ""  # compiler message, max error, ... for failures
    source: str = "search"  # how it was obtained: "search:random", "search:exhaustive", "import:<file>", ...
    created: float = dataclasses.field(default_factory=time.time)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise TuningDatabaseError(f"record for {self.signature!r}: status {self.status!r} is not one of {STATUSES}")
        if (self.status == "ok") != (self.median_ms is not None):
            raise TuningDatabaseError(f"record for {self.signature!r}: status {self.status!r} with median_ms "
                                      f"{self.median_ms!r} (a time is required for 'ok' and only for 'ok')")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _schedule_text(schedule: dict) -> str:
    try:
        return json.dumps(schedule, sort_keys=True)
    except TypeError as error:
        raise TuningDatabaseError(f"schedule {schedule!r} is not JSON-serialisable: {error}") from None


class TuningDatabase:
    """Open (creating or rebuilding as needed) the database at `path`; use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = self._open()

    # Opening ----------------------------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        problem = None
        if self.path.exists():
            try:
                connection = sqlite3.connect(self.path, timeout=30)
                problem = self._problem(connection)
                if problem is None:
                    return connection
                connection.close()
            except sqlite3.DatabaseError as error:
                problem = f"not a readable SQLite database ({error})"
            aside = self.path.with_name(self.path.name + ".corrupt")
            warnings.warn(f"ortx tuning database {self.path}: {problem}; moved to {aside} and rebuilt empty",
                          RuntimeWarning, stacklevel=3)
            os.replace(self.path, aside)
        connection = sqlite3.connect(self.path, timeout=30)
        with connection:
            connection.executescript(_SCHEMA)
            connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return connection

    @staticmethod
    def _problem(connection: sqlite3.Connection) -> str | None:
        check = connection.execute("PRAGMA integrity_check").fetchone()
        if not check or check[0] != "ok":
            return f"integrity check failed ({check[0] if check else 'no answer'})"
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "fingerprints", "records"} <= tables:
            return f"missing tables (has {sorted(tables)})"
        row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            return f"schema version {row[0] if row else None}, this ortx reads {SCHEMA_VERSION}"
        return None

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "TuningDatabase":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # Writing ----------------------------------------------------------------------------------------------------
    def add_fingerprint(self, fingerprint: HardwareFingerprint) -> str:
        with self._connection:
            self._connection.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?)",
                                     (fingerprint.key, fingerprint.to_json()))
        return fingerprint.key

    def add(self, record: TuningRecord) -> bool:
        """Stores `record` (its fingerprint must have been added); False if an identical row was already there."""
        with self._connection:
            known = self._connection.execute("SELECT 1 FROM fingerprints WHERE key = ?", (record.fingerprint,))
            if known.fetchone() is None:
                raise TuningDatabaseError(f"record for {record.signature!r}: unknown fingerprint "
                                          f"{record.fingerprint!r}; add_fingerprint() it first")
            cursor = self._connection.execute(
                "INSERT OR IGNORE INTO records (signature, fingerprint, template, schedule, status, median_ms, "
                "detail, source, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.signature, record.fingerprint, record.template, _schedule_text(record.schedule),
                 record.status, record.median_ms, record.detail, record.source, record.created))
        return cursor.rowcount == 1

    # Reading ----------------------------------------------------------------------------------------------------
    def records(self, signature: str | None = None, fingerprint: str | None = None,
                template: str | None = None) -> list[TuningRecord]:
        clauses, values = [], []
        for column, value in (("signature", signature), ("fingerprint", fingerprint), ("template", template)):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._connection.execute(
            "SELECT signature, fingerprint, template, schedule, status, median_ms, detail, source, created "
            f"FROM records {where} ORDER BY id", values)
        return [TuningRecord(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6], row[7], row[8])
                for row in rows]

    def best(self, signature: str, fingerprint: str, template: str | None = None) -> TuningRecord | None:
        """The fastest 'ok' record measured on `fingerprint` (never another machine's)."""
        candidates = [r for r in self.records(signature, fingerprint, template) if r.status == "ok"]
        return min(candidates, key=lambda r: (r.median_ms, r.created), default=None)

    def fingerprint(self, key: str) -> HardwareFingerprint | None:
        row = self._connection.execute("SELECT description FROM fingerprints WHERE key = ?", (key,)).fetchone()
        return HardwareFingerprint.from_json(row[0]) if row else None

    # Files ------------------------------------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, signatures: set[str] | None = None) -> int:
        """Writes the records (all, or those of `signatures`) and their fingerprints as JSON; returns the count."""
        records = [r for r in self.records() if signatures is None or r.signature in signatures]
        keys = sorted({r.fingerprint for r in records})
        document = {"ortx_tuning_records": SCHEMA_VERSION,
                    "fingerprints": {key: json.loads(self.fingerprint(key).to_json()) for key in keys},
                    "records": [r.to_dict() for r in records]}
        path = Path(path)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        try:
            with os.fdopen(handle, "w") as stream:
                json.dump(document, stream, indent=1)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        return len(records)

    def import_records(self, path: str | os.PathLike) -> int:
        """Merges an exported file; returns how many records were new. Their fingerprints come with them."""
        try:
            text = Path(path).read_bytes()
        except OSError as error:
            raise TuningDatabaseError(f"{path}: not an ortx tuning record file ({error})") from None
        return self.import_document(text, source=str(path))

    def import_document(self, text: bytes | str, *, source: str = "records") -> int:
        """import_records on the file's contents (an artifact carries them in memory); `source` names them in
        errors."""
        try:
            document = json.loads(text)
            version = document["ortx_tuning_records"]
            fingerprints = document["fingerprints"]
            rows = document["records"]
        except (ValueError, KeyError, TypeError) as error:
            raise TuningDatabaseError(f"{source}: not an ortx tuning record file ({error})") from None
        if version != SCHEMA_VERSION:
            raise TuningDatabaseError(f"{source}: record file version {version}, this ortx reads {SCHEMA_VERSION}")
        for key, description in fingerprints.items():
            fingerprint = HardwareFingerprint.from_json(json.dumps(description))
            if fingerprint.key != key:
                raise TuningDatabaseError(f"{source}: fingerprint {key} does not match its description")
            self.add_fingerprint(fingerprint)
        added = 0
        for row in rows:
            try:
                record = TuningRecord(**row)
            except TypeError as error:
                raise TuningDatabaseError(f"{source}: bad record {row!r} ({error})") from None
            added += self.add(record)
        return added
