#!/usr/bin/env python3
"""Make a single-layer image as a `docker save` archive from a root filesystem folder, with no registry
and no container tooling (importable by `ctr images import`, `docker load`, `kind load image-archive`).

  mkimage.py --rootfs DIR --tag localhost/name:tag --out image.tar \
      [--entrypoint '["/pause"]'] [--cmd '["sh"]'] [--env K=V ...] [--user 10001:10001] [--workdir /data]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

_EPOCH = "1970-01-01T00:00:00Z"  # fixed, so the same rootfs gives the same image id


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def make_image(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        layer = Path(tmp) / "layer.tar"
        # GNU tar keeps owners, modes, device nodes, hard links and xattrs exactly as on disk.
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", args.rootfs, "-cf", str(layer), "."], check=True)
        diff_id = _sha256(layer)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": _EPOCH,
            "config": {
                "Env": args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Entrypoint": json.loads(args.entrypoint) if args.entrypoint else None,
                "Cmd": json.loads(args.cmd) if args.cmd else None,
                "User": args.user,
                "WorkingDir": args.workdir,
            },
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created": _EPOCH, "created_by": "hack/realnode/mkimage.py"}],
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        layer_name = f"{diff_id}/layer.tar"
        repo, tag = args.tag.rsplit(":", 1)
        with tarfile.open(args.out, "w") as out:

            def add_bytes(name: str, data: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))

            add_bytes(config_name, config_bytes)
            out.add(str(layer), arcname=layer_name)
            add_bytes(
                "manifest.json",
                json.dumps([{"Config": config_name, "RepoTags": [args.tag], "Layers": [layer_name]}]).encode(),
            )
            add_bytes("repositories", json.dumps({repo: {tag: diff_id}}).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--entrypoint", default=None, help="JSON list")
    parser.add_argument("--cmd", default=None, help="JSON list")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--user", default="")
    parser.add_argument("--workdir", default="")
    make_image(parser.parse_args())


if __name__ == "__main__":
    main()
