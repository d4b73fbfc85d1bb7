"""Building the images NestedNet runs: a base, the component image and the node parent.

No registry may be reachable (PLATFORM.md), so the base image is a build argument:
a stock image when one is present or can be pulled, otherwise one made here from
Debian packages with debootstrap and `docker import`. Each image is labelled with a
hash of its inputs, so a second build with nothing changed does no work.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from nestednet import LABEL_PREFIX
from nestednet.adapters import docker_engine
from nestednet.errors import EnvironmentProblem, UsageError

STOCK_BASE = "debian:bookworm-slim"
BOOTSTRAP_BASE = "nestednet/base:bookworm"
TAG_VARIABLE = "NESTEDNET_IMAGE_TAG"


def _checkout_tag() -> str:
    """The tag this checkout builds and runs: ``latest`` unless $NESTEDNET_IMAGE_TAG says
    otherwise, so two checkouts on one host (a developer's branches, a CI clone) never
    overwrite each other's images."""
    tag = os.environ.get(TAG_VARIABLE, "latest")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
        raise UsageError(f"${TAG_VARIABLE}={tag!r} is not a Docker tag "
                         "(letters, digits, _ . -, at most 128, not starting with . or -)")
    return tag


IMAGE_TAG = _checkout_tag()
COMPONENT_IMAGE = f"nestednet/component:{IMAGE_TAG}"
DIND_IMAGE = f"nestednet/dind:{IMAGE_TAG}"
HOSTD_IMAGE = f"nestednet/hostd:{IMAGE_TAG}"
INPUTS_LABEL = f"{LABEL_PREFIX}.inputs"
CACHE_DIR = Path("/var/lib/nestednet/images")

Report = Callable[[str], None]


@dataclass(frozen=True)
class ImageSpec:
    """One image built from a Dockerfile in the source tree."""

    tag: str
    dockerfile: str
    inputs: tuple[str, ...]
    """Files and folders (relative to the source root) whose content defines the image."""
    base: str | None = None
    """Built on this image of ours (None: on the base image)."""


SPECS = (
    ImageSpec(COMPONENT_IMAGE, "images/component/Dockerfile",
              ("images/component", "nestednet/agent")),
    ImageSpec(DIND_IMAGE, "Dockerfile.dind", ("Dockerfile.dind", "images/dind")),
    # The per-host helper: the parent image (python3, already on every host) plus
    # NestedNet's package and pyroute2, copied from this machine's installation (so both
    # ends run the same versions, and the build needs no package index).
    ImageSpec(HOSTD_IMAGE, "images/hostd/Dockerfile", ("images/hostd", "nestednet"),
              base=DIND_IMAGE),
)


@dataclass
class BuildResult:
    tag: str
    image_id: str
    size_mb: float
    cached: bool


def source_root() -> Path:
    root = Path(__file__).resolve().parent.parent
    if not (root / "Dockerfile.dind").exists():
        raise EnvironmentProblem(
            "image sources not found: `nestednet images build` needs the NestedNet source "
            f"tree (looked for Dockerfile.dind in {root})")
    return root


def inputs_hash(root: Path, paths: Iterable[str], base_id: str) -> str:
    digest = hashlib.sha256(base_id.encode())
    for rel in sorted(paths):
        target = root / rel
        files = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
        for f in files:
            if "__pycache__" in f.parts:
                continue
            digest.update(str(f.relative_to(root)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:24]


def resolve_base(client: docker.DockerClient, requested: str | None, report: Report) -> str:
    """Pick the base image: the one asked for, a stock one, or one bootstrapped here."""
    if requested:
        if docker_engine.image_exists(client, requested):
            return requested
        report(f"base image {requested}: pulling")
        try:
            client.images.pull(requested)
        except docker.errors.DockerException as exc:
            raise UsageError(f"base image {requested} is not present and cannot be pulled: "
                             f"{str(exc).splitlines()[0][:160]}") from exc
        return requested
    for candidate in (STOCK_BASE, BOOTSTRAP_BASE):
        if docker_engine.image_exists(client, candidate):
            report(f"base image {candidate}: present")
            return candidate
    try:
        client.images.pull(STOCK_BASE)
        report(f"base image {STOCK_BASE}: pulled")
        return STOCK_BASE
    except docker.errors.DockerException:
        report(f"base image: no registry reachable, building {BOOTSTRAP_BASE} with debootstrap")
    bootstrap_base(client, report)
    return BOOTSTRAP_BASE


def bootstrap_base(client: docker.DockerClient, report: Report) -> None:
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem("debootstrap is needed to make a base image without a registry",
                                 hint="apt-get install debootstrap (scripts/setup does)")
    with tempfile.TemporaryDirectory(prefix="nestednet-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        report("debootstrap --variant=minbase bookworm (about 30 s)")
        done = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stdout.splitlines()[-5:] + done.stderr.splitlines()[-5:])
            raise EnvironmentProblem(f"debootstrap failed:\n{tail}")
        archive = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."],
                       check=True)
        report(f"docker import -> {BOOTSTRAP_BASE}")
        repo, tag = BOOTSTRAP_BASE.split(":")
        client.api.import_image(src=str(archive), repository=repo, tag=tag)


def _stream_build(client: docker.DockerClient, root: Path, spec: ImageSpec, base: str,
                  labels: dict[str, str], report: Report, verbose: bool) -> None:
    last_error = None
    for chunk in client.api.build(path=str(root), dockerfile=spec.dockerfile, tag=spec.tag,
                                  buildargs={"BASE_IMAGE": base}, labels=labels, rm=True,
                                  forcerm=True, decode=True):
        if "error" in chunk:
            last_error = chunk["error"].strip()
        line = chunk.get("stream", "").rstrip()
        if line and (verbose or line.startswith("Step ")):
            report(f"  {spec.tag}: {line}")
    if last_error:
        raise EnvironmentProblem(f"building {spec.tag} failed: {last_error}")


def _pyroute2_version() -> str:
    import pyroute2

    return str(getattr(pyroute2, "__version__", "unknown"))


@contextlib.contextmanager
def _context(root: Path, spec: ImageSpec):
    """The build context: the source tree, or for the helper image a small directory
    with its Dockerfile, the `nestednet` package and this machine's pyroute2."""
    if spec.base is None:
        yield root
        return
    import pyroute2

    with tempfile.TemporaryDirectory(prefix="nestednet-hostd-", dir="/var/tmp") as tmp:
        context = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        (context / Path(spec.dockerfile).parent).mkdir(parents=True)
        shutil.copy(root / spec.dockerfile, context / spec.dockerfile)
        shutil.copytree(root / "nestednet", context / "site" / "nestednet", ignore=ignore)
        shutil.copytree(Path(pyroute2.__file__).parent, context / "site" / "pyroute2",
                        ignore=ignore)
        yield context


def build_all(*, base_image: str | None = None, force: bool = False, verbose: bool = False,
              report: Report = print) -> list[BuildResult]:
    """Build (or reuse) every image; returns what each is and whether it was cached."""
    root = source_root()
    client = docker_engine.connect()
    base = resolve_base(client, base_image, report)
    base_id = client.images.get(base).id
    results = []
    for spec in SPECS:
        spec_base = spec.base or base
        spec_base_id = client.images.get(spec_base).id if spec.base else base_id
        wanted = inputs_hash(root, (*spec.inputs, spec.dockerfile), spec_base_id)
        if spec.base:
            wanted = hashlib.sha256(f"{wanted}{_pyroute2_version()}".encode()).hexdigest()[:24]
        cached = False
        if not force and docker_engine.image_exists(client, spec.tag):
            cached = client.images.get(spec.tag).labels.get(INPUTS_LABEL) == wanted
        if cached:
            report(f"{spec.tag}: up to date (cached)")
        else:
            report(f"{spec.tag}: building from {spec.dockerfile} on {spec_base}")
            with _context(root, spec) as context:
                _stream_build(client, context, spec, spec_base, {INPUTS_LABEL: wanted},
                              report, verbose)
        image = client.images.get(spec.tag)
        results.append(BuildResult(spec.tag, image.short_id, image.attrs["Size"] / 1e6, cached))
    prune_leftovers(client)
    return results


def prune_leftovers(client: docker.DockerClient) -> None:
    """Remove what our builds left untagged: replaced images and build stages.

    Only dangling images carrying our labels go; nobody else's image is touched.
    """
    for label in (f"{LABEL_PREFIX}.image", f"{LABEL_PREFIX}.build-stage"):
        for image in client.images.list(filters={"dangling": True, "label": label}):
            # Still used by a container (e.g. a running lab)? Then it stays.
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(image.id, noprune=False)


def list_images() -> list[dict]:
    client = docker_engine.connect()
    rows = []
    for tag in (STOCK_BASE, BOOTSTRAP_BASE, *(s.tag for s in SPECS)):
        try:
            image = client.images.get(tag)
        except docker.errors.ImageNotFound:
            rows.append({"tag": tag, "present": False})
            continue
        rows.append({"tag": tag, "present": True, "id": image.short_id,
                     "size_mb": round(image.attrs["Size"] / 1e6, 1),
                     "created": image.attrs.get("Created", "")[:19]})
    return rows


def require(client: docker.DockerClient, tag: str) -> docker.models.images.Image:
    """The image ``tag``, or a clear error that says how to build it."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound as exc:
        raise EnvironmentProblem(f"image {tag} is missing",
                                 hint="build it with `nestednet images build`") from exc


def component_archive(client: docker.DockerClient) -> Path:
    """The component image as a `docker save` archive, made once per image id.

    Every node's inner engine loads this file; keeping one copy per image id means
    a rebuilt image is never confused with an old archive.
    """
    return image_archive(client, COMPONENT_IMAGE, f"component-{IMAGE_TAG}")


def archive_kind(ref: str) -> str:
    """The archive family of a user's image: one per reference, so a rebuilt image
    replaces its older archive and two images never evict each other."""
    return "user-" + re.sub(r"[^A-Za-z0-9_.]+", "_", ref)


ARCHIVE_ID = re.compile(r"-[0-9a-f]{16}\.tar")


def stale_archives(directory: Path, kind: str, keep: Path) -> list[Path]:
    """Archives of ``kind`` other than ``keep`` (``kind`` exactly: "user-a" does not
    claim "user-a-b-<id>.tar"), plus archives named by image id alone, as made before
    user archives were named by reference."""
    found = []
    for old in directory.glob("*.tar"):
        name = old.name
        ours = name.startswith(f"{kind}-") and ARCHIVE_ID.fullmatch(name[len(kind):])
        legacy = kind.startswith("user-") and re.fullmatch(r"user-[0-9a-f]{16}\.tar", name)
        if (ours or legacy) and old != keep:
            found.append(old)
    return found


def image_archive(client: docker.DockerClient, ref: str, kind: str | None = None) -> Path:
    """``ref`` as a `docker save` archive (named, so loading it keeps the tag), one file
    per image id; older archives of the same ``kind`` (by default: of the same user's
    reference, see `archive_kind`) are dropped, so /var/lib/nestednet/images keeps one
    archive per image in use rather than one per build."""
    kind = kind or archive_kind(ref)
    image = require(client, ref)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"{kind}-{image.id.split(':')[1][:16]}.tar"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        with open(tmp, "wb") as out:
            for chunk in image.save(named=ref if ref in image.tags else False):
                out.write(chunk)
        tmp.rename(path)
        for old in stale_archives(CACHE_DIR, kind, path):
            old.unlink(missing_ok=True)
    return path


def probe_image() -> str | None:
    """An image to probe container privileges with (`nestednet doctor`), if the engine
    has one of ours; None when there is none or no engine answers."""
    try:
        client = docker_engine.connect(timeout=10)
    except EnvironmentProblem:
        return None
    for tag in (COMPONENT_IMAGE, BOOTSTRAP_BASE, STOCK_BASE):
        if docker_engine.image_exists(client, tag):
            return tag
    return None
