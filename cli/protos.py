"""Regenerate the Python modules of every ``.proto`` of the project: ``python -m cli.protos``.

The protos are compiled from the repository root, so a generated service module imports its messages by
their package path (``predictor.proto.prediction_pb2``, ``router.proto.router_pb2``). Needs grpcio-tools
(a dev dependency); the generated modules are committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = (Path("predictor/proto/prediction.proto"), Path("router/proto/router.proto"))


def main() -> int:
    from grpc_tools import protoc

    for proto in PROTOS:
        status = protoc.main(["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--pyi_out={ROOT}",
                              f"--grpc_python_out={ROOT}", str(ROOT / proto)])
        if status != 0:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
