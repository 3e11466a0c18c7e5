"""`python -m release --out dist` (what `make release` runs once the image is built)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from provisioner.toolchain.installer import ToolError, ensure_all
from release.build import make_release
from release.versions import ReleaseError

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m release",
        description="Package the chart, save the image as an OCI archive, write its SBOM.",
    )
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where to write")
    parser.add_argument(
        "--image",
        default="localhost/atomic-gang-provisioner:dev",
        help="the local image to release (what `make image` builds)",
    )
    args = parser.parse_args(argv)
    try:
        helm = ensure_all(["helm"])["helm"].binary
        made = make_release(
            REPO, args.out, image=args.image, helm=helm, podman=REPO / "image" / "podman"
        )
    except (ReleaseError, ToolError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in (made.chart, made.archive, made.sbom):
        print(f"{path}  {path.stat().st_size / 1024 / 1024:.1f} MiB")
    print(f"image {made.manifest_digest} (config {made.config_digest})")
    print("seconds: " + ", ".join(f"{k} {v}" for k, v in made.seconds.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
