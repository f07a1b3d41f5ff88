"""Model-update files: the live model versions as files, for prediction servers that serve without a broker.

A model file holds one model-update message exactly as it was published on ``model-updates``: signed and
checksummed, and opened again by every reader with its trusted keys through
:func:`~contract.model_update.decode_update`, so a file is trusted no more than a message. A folder holds one
file per model key, named :func:`file_name`; a server reads every ``*.hrmu`` file of a folder, or one file
of any name (``headroom predictor serve --models``).

:func:`export_latest` writes the newest trusted version of every model key on the topic into a folder
(``headroom models export``). Files are written beside their final name and renamed into place, so a
reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from headroom.contract.model_update import ModelUpdate
from headroom.contract.signing import TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.model_topic import follow, received

SUFFIX = ".hrmu"


def file_name(key: str) -> str:
    """The file of a model key: the key percent-encoded (``pool/ttft/mean`` → ``pool%2Fttft%2Fmean.hrmu``)."""
    return quote(key, safe="") + SUFFIX


def model_paths(path: Path) -> list[Path]:
    """The model files at ``path``: the file itself, or a folder's ``*.hrmu`` files in name order."""
    return sorted(path.glob("*" + SUFFIX)) if path.is_dir() else [path]


def write_model_file(folder: Path, update: ModelUpdate, message: bytes) -> Path:
    """Write ``message`` (``update``'s wire bytes) as the file of its model key, atomically."""
    target = folder / file_name(update.key)
    handle, scratch = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(message)
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, target)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    return target


def export_latest(kafka: KafkaSettings, trust: TrustedKeys, folder: Path,
                  timeout_s: float = 60.0) -> list[tuple[Path, ModelUpdate]]:
    """Write the newest version of every model key on ``model-updates`` that ``trust`` accepts into
    ``folder``, signature and all; returns what was written. Messages it rejects are skipped (a reader
    would reject them too)."""
    folder.mkdir(parents=True, exist_ok=True)
    newest: dict[str, tuple[ModelUpdate, bytes]] = {}
    deadline = time.monotonic() + timeout_s
    for item in follow(kafka, topic_wait_s=min(timeout_s, 10.0)):
        if isinstance(item, str):  # CAUGHT_UP, the one text follow() yields
            break
        if item is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {kafka.model_topic!r} took over {timeout_s} s")
            continue
        update, value = received(item, trust).update, item.value()
        if update is not None and value is not None and (update.key not in newest
                                                         or newest[update.key][0].version < update.version):
            newest[update.key] = (update, bytes(value))
    return [(write_model_file(folder, update, message), update) for update, message in newest.values()]
