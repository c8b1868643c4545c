"""``dlperf images push``: copy images to the inventory's nodes, for clusters without a registry.

For every node that lacks an image's digest: ``docker save <image> | ssh node docker load``
(``podman save`` where podman holds the image here),
streamed over the node's Fabric connection (no temporary file, no registry), then checked by
digest. A node that already has the digest gets nothing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from driver.cluster.inventory import Inventory
from driver.cluster.remote import NodeUnreachable, Remote, parallel, shell
from driver.images.engine import Engine

CHUNK = 1 << 20


@dataclass(frozen=True)
class PushResult:
    node: str
    image: str  # tag
    image_id: str
    action: str  # present | copied | failed
    detail: str = ""


def has_image(remote: Remote, image_id: str) -> bool:
    found = remote.run_argv(remote.docker("image", "inspect", "--format", "{{.Id}}", image_id))
    return found.ok and found.stdout.strip() == image_id


def stream_image(remote: Remote, tag: str, engine: Engine | None = None) -> tuple[int, float]:
    """``docker save tag`` (or ``engine``'s) here piped into ``docker load`` on the node; (bytes,
    seconds)."""
    started = time.monotonic()
    channel = remote.start(shell(remote.docker("load")) + " 2>&1")
    save_argv = engine.save_argv(tag) if engine else ["docker", "save", tag]
    save = subprocess.Popen(save_argv, stdout=subprocess.PIPE)
    assert save.stdout is not None
    sent = 0
    try:
        while chunk := save.stdout.read(CHUNK):
            channel.sendall(chunk)
            sent += len(chunk)
        channel.shutdown_write()
        output = b""
        while not channel.exit_status_ready() or channel.recv_ready():
            if channel.recv_ready():
                output += channel.recv(65536)
            else:
                time.sleep(0.05)
        status = channel.recv_exit_status()
    finally:
        save.stdout.close()
        save.wait()
        channel.close()
    if save.returncode != 0:
        raise RuntimeError(f"{save_argv[0]} save {tag} failed here (exit {save.returncode})")
    if status != 0:
        raise RuntimeError(f"docker load failed: {output.decode(errors='replace').strip()}")
    return sent, time.monotonic() - started


def push_images(
    inventory: Inventory,
    images: list[tuple[str, str, str | None]],
    *,
    log: Callable[[str], None] = print,
    engine: Engine | None = None,
) -> list[PushResult]:
    """``images``: (tag, image ID, variant or None for every node); read from ``engine`` here
    (docker's by default)."""
    remotes = [Remote(node) for node in inventory.nodes]

    def push_node(remote: Remote) -> list[PushResult]:
        out = []
        for tag, image_id, variant in images:
            if variant and remote.node.container.variant != variant:
                continue
            name = remote.node.name
            try:
                if has_image(remote, image_id):
                    out.append(PushResult(name, tag, image_id, "present"))
                    log(f"{name}: {tag} present")
                    continue
                here = engine.name if engine else "docker"
                log(f"{name}: copying {tag} ({here} save | ssh {name} docker load)")
                sent, seconds = stream_image(remote, tag, engine)
                if not has_image(remote, image_id):
                    raise RuntimeError(f"after docker load the node still lacks {image_id}")
                detail = f"{sent / 1e6:.0f} MB in {seconds:.1f} s"
                out.append(PushResult(name, tag, image_id, "copied", detail))
                log(f"{name}: {tag} copied ({detail})")
            except (NodeUnreachable, RuntimeError) as error:
                out.append(PushResult(name, tag, image_id, "failed", str(error)))
                log(f"{name}: {tag} FAILED: {error}")
        return out

    results: list[PushResult] = []
    # At most 4 streams at once: each reads the whole image from the local engine.
    for remote, found, error in parallel(remotes, push_node, workers=4):
        if error is not None:
            results.append(PushResult(remote.node.name, "*", "", "failed", str(error)))
        else:
            results.extend(found)
    for remote in remotes:
        remote.close()
    return results
