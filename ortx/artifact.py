"""The compiled artifact (`ortx compile MODEL -o MODEL.ortx`): one file that loads on any machine.

A zip archive (stdlib zipfile) of:
  manifest.json   format version, ortx version, the source model's sha256, devices and input shapes it was compiled
                  for, the compiling machine's hardware fingerprint, and the sha256 of every other member
  model.onnx      the graph after ortx's passes: standard ONNX (an IR version ORT reads), so any runtime loads it
  partition.json  per node, the device it was placed on ("cpu", "npu", "dsp" or "ort") and why
  records.json    optional: tuning records (ortx.tune.records' export format) for this model's kernels
Nothing machine-specific is compiled in: at load time the session lowers the graph for the devices and ISA found
there (the JIT compiles for the local ISA; records from another fingerprint are kept but never used as if measured
here; a node placed on a device this machine lacks goes through capability assignment again).
A member whose sha256 disagrees with the manifest, a missing member or a newer format is an error naming it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MODEL = "model.onnx"
PARTITION = "partition.json"
RECORDS = "records.json"
_ZIP_MAGIC = b"PK\x03\x04"


class ArtifactError(ValueError):
    """A file that is not a readable ortx artifact; the message names the file and the member at fault."""


@dataclasses.dataclass(frozen=True)
class Artifact:
    manifest: dict
    model: bytes  # serialized onnx.ModelProto
    placement: dict[str, str]  # node name -> device label
    placement_reasons: dict[str, str]
    records: bytes | None  # the tuning records file's bytes, or None


def is_artifact(source) -> bool:
    """True for a path to (or the bytes of) a zip archive holding an ortx manifest."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        head = bytes(source[:4])
    elif isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        with open(source, "rb") as stream:
            head = stream.read(4)
    else:
        return False
    return head == _ZIP_MAGIC


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_artifact(path: str | os.PathLike, *, model: bytes, placement: dict[str, str],
                   placement_reasons: dict[str, str], manifest: dict, records: bytes | None = None,
                   protect: str | os.PathLike | None = None) -> None:
    """Writes atomically (temp file in the same directory, then rename); never onto `protect` (the input model)."""
    path = Path(path)
    if protect is not None and os.path.exists(path) and os.path.exists(protect) and os.path.samefile(path, protect):
        raise ArtifactError(f"output {str(path)!r} is the input model; ortx never overwrites its input")
    members = {MODEL: model,
               PARTITION: json.dumps({"placement": placement, "reasons": placement_reasons}, indent=1).encode()}
    if records is not None:
        members[RECORDS] = records
    manifest = dict(manifest, ortx_artifact=FORMAT_VERSION,
                    members={name: _sha256(data) for name, data in members.items()})
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(handle, "wb") as stream, zipfile.ZipFile(stream, "w") as archive:
            archive.writestr(MANIFEST, json.dumps(manifest, indent=1), compress_type=zipfile.ZIP_DEFLATED)
            for name, data in members.items():
                # weights do not compress; JSON does
                archive.writestr(name, data, compress_type=zipfile.ZIP_STORED if name == MODEL
                                 else zipfile.ZIP_DEFLATED)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_artifact(source) -> Artifact:
    what = "the artifact bytes" if isinstance(source, (bytes, bytearray, memoryview)) else f"artifact {str(source)!r}"
    try:
        archive = zipfile.ZipFile(io.BytesIO(bytes(source)) if isinstance(source, (bytes, bytearray, memoryview))
                                  else source)
    except (OSError, zipfile.BadZipFile) as error:
        raise ArtifactError(f"{what} is not a readable zip archive ({error})") from None
    with archive:
        names = set(archive.namelist())
        if MANIFEST not in names:
            raise ArtifactError(f"{what} has no {MANIFEST}: not an ortx artifact")
        try:
            manifest = json.loads(archive.read(MANIFEST))
            version = manifest["ortx_artifact"]
            digests = manifest["members"]
        except (ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
            raise ArtifactError(f"{what}: {MANIFEST} is corrupt ({error})") from None
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ArtifactError(f"{what} has format version {version!r}; this ortx reads up to {FORMAT_VERSION}")
        members = {}
        for name in (MODEL, PARTITION):
            if name not in digests or name not in names:
                raise ArtifactError(f"{what} lacks its {name}")
        for name, digest in digests.items():
            if name not in names:
                raise ArtifactError(f"{what} lacks its {name}")
            try:
                data = archive.read(name)
            except (zipfile.BadZipFile, OSError) as error:  # a CRC mismatch is BadZipFile
                raise ArtifactError(f"{what}: member {name} is corrupt ({error})") from None
            if _sha256(data) != digest:
                raise ArtifactError(f"{what}: member {name} does not match its sha256 in {MANIFEST} (corrupt)")
            members[name] = data
    try:
        partition = json.loads(members[PARTITION])
        placement = {str(node): str(device) for node, device in partition["placement"].items()}
        reasons = {str(node): str(reason) for node, reason in partition.get("reasons", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ArtifactError(f"{what}: {PARTITION} is malformed ({error})") from None
    return Artifact(manifest, members[MODEL], placement, reasons, members.get(RECORDS))
