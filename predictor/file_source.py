"""Model-update files into a :class:`~predictor.runtime.ModelRuntime`: serving without a broker.

A background thread looks at the files (:func:`headroom.model_files.model_paths`: one file, or a folder's
``*.hrmu`` files) every ``poll_s`` and applies each file that is new or has changed (modification time,
size or inode) through :meth:`ModelRuntime.apply` — the same checks as a message from ``model-updates``,
so a tampered or foreign file is rejected, counted and logged while the previous version keeps serving,
and a version not newer than the live one changes nothing (the runtime counts every outcome). It is
:attr:`ready` after its first look.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from headroom.model_files import model_paths
from headroom.predictor.runtime import ApplyOutcome, ApplyResult, ModelRuntime
from headroom.threads import BackgroundThread

log = logging.getLogger(__name__)


class ModelFileSource(BackgroundThread):
    """Applies model-update files at ``path`` to ``runtime``: start, then stop."""

    thread_name = "model-files"

    def __init__(self, runtime: ModelRuntime, path: Path, *, poll_s: float = 0.5) -> None:
        super().__init__()
        if not path.exists():
            raise FileNotFoundError(f"no model file or folder at {path}")
        self.runtime = runtime
        self.path = path
        self.poll_s = poll_s
        self._seen: dict[Path, tuple[int, int, int]] = {}
        self._scanning = threading.Lock()  # the thread and POST /reload may look at once
        self._ready = threading.Event()
        self.error: BaseException | None = None

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def scan(self) -> list[ApplyResult]:
        """Apply every file that is new or changed since the last scan."""
        with self._scanning:
            return self._scan()

    def _scan(self) -> list[ApplyResult]:
        results = []
        for file in model_paths(self.path):
            try:
                stat = file.stat()
                stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
                if self._seen.get(file) == stamp:
                    continue
                message = file.read_bytes()
            except OSError as err:  # gone between listing and reading, or unreadable: looked at again next time
                log.warning("model file %s: %s", file, err)
                continue
            self._seen[file] = stamp
            result = self.runtime.apply(message)
            if result.outcome is ApplyOutcome.REJECTED:
                log.warning("model file %s rejected (%s): %s", file, result.reason, result.detail)
            results.append(result)
        return results

    def _run(self) -> None:
        try:
            while True:
                self.scan()
                self._ready.set()
                if self._stop.wait(self.poll_s):
                    return
        except BaseException as err:  # surfaced to the server's health status
            self.error = err
            log.exception("model file source stopped")
