"""Regenerate the Python modules of ``router.proto``: ``python -m router.proto.generate``.

The proto is compiled from the repository root so the generated service module imports its messages as
``router.proto.router_pb2``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("router/proto/router.proto")


def main() -> int:
    return protoc.main(["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--pyi_out={ROOT}",
                        f"--grpc_python_out={ROOT}", str(ROOT / PROTO)])


if __name__ == "__main__":
    sys.exit(main())
