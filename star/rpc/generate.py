"""Regenerate the gRPC stubs from proto/star.proto: `python -m star.rpc.generate`.

The generated files are committed (so installing the package needs no grpcio-tools)
and never edited by hand; `--check` exits non-zero when they are out of date.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUT_DIR = Path(__file__).resolve().parent
GENERATED = ("star_pb2.py", "star_pb2.pyi", "star_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(PROTO_DIR / "star.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    grpc_file = out_dir / "star_pb2_grpc.py"
    # protoc emits a top-level `import star_pb2`; make it relative so it works inside the package.
    text = re.sub(r"^import star_pb2 as", "from . import star_pb2 as", grpc_file.read_text(), flags=re.M)
    grpc_file.write_text(text)


def out_of_date() -> list[str]:
    """Names of generated files whose content differs from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in GENERATED
            if not (OUT_DIR / name).exists() or (OUT_DIR / name).read_text() != (Path(tmp) / name).read_text()
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the generated files are out of date")
    args = parser.parse_args()
    if args.check:
        stale = out_of_date()
        if stale:
            print(f"out of date: {', '.join(stale)}; run python -m star.rpc.generate", file=sys.stderr)
            raise SystemExit(1)
        print("generated stubs are up to date")
        return
    generate(OUT_DIR)
    print(f"wrote {', '.join(GENERATED)} to {OUT_DIR}")


if __name__ == "__main__":
    main()
