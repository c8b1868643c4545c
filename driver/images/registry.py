"""``dlperf images lock``: re-resolve every registry tag the Dockerfiles name to its digest.

Resolution asks the registry for the tag's manifest (Docker Registry HTTP API v2, anonymous
bearer token when the registry wants one) and records the ``Docker-Content-Digest``: the digest
of the multi-platform index that ``docker pull <tag>`` would fetch, without pulling gigabytes.
What cannot be resolved keeps its earlier pin (with a warning), or is recorded ``unresolved``:
never guessed.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from driver.files import sha256_bytes
from driver.images.lock import DIGEST, UNRESOLVED, Lock, Pin

ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)
DOCKER_HUB = "registry-1.docker.io"


class ResolveError(RuntimeError):
    pass


@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str

    @property
    def insecure(self) -> bool:
        """Plain HTTP only for a registry on this machine, as docker itself allows."""
        host = self.registry.rsplit(":", 1)[0]
        return host in ("localhost", "::1") or host.startswith("127.")


def parse_reference(ref: str) -> ImageReference:
    if "@" in ref:
        raise ResolveError(f"{ref}: give a tag, not a digest")
    name, tag = ref, "latest"
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ImageReference(first, rest, tag)
    repository = name if "/" in name else f"library/{name}"
    return ImageReference(DOCKER_HUB, repository, tag)


def _token(challenge: str, timeout: float) -> str:
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.pop("realm", None)
    if not realm:
        raise ResolveError(f"registry wants auth but names no token realm: {challenge}")
    url = f"{realm}?{urllib.parse.urlencode(fields)}"
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - registry URL
        data = json.loads(response.read())
    token = data.get("token") or data.get("access_token")
    if not token:
        raise ResolveError("the registry's token service returned no token")
    return str(token)


def resolve_digest(ref: str, timeout: float = 20.0) -> str:
    """The manifest digest the registry serves for ``ref`` (a tag) right now."""
    parsed = parse_reference(ref)
    scheme = "http" if parsed.insecure else "https"
    url = f"{scheme}://{parsed.registry}/v2/{parsed.repository}/manifests/{parsed.tag}"
    headers = {"Accept": ACCEPT}
    for attempt in range(2):
        request = urllib.request.Request(url, headers=headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                body = response.read()
                digest = response.headers.get("Docker-Content-Digest")
                if not digest:  # the digest of a manifest is the sha256 of its bytes
                    digest = "sha256:" + sha256_bytes(body)
                if not DIGEST.match(digest):
                    raise ResolveError(f"{ref}: the registry sent digest {digest!r}")
                return digest
        except urllib.error.HTTPError as error:
            challenge = error.headers.get("WWW-Authenticate", "")
            if error.code == 401 and attempt == 0 and challenge.lower().startswith("bearer"):
                headers["Authorization"] = f"Bearer {_token(challenge, timeout)}"
                continue
            raise ResolveError(f"{ref}: HTTP {error.code} from {parsed.registry}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ResolveError(f"{ref}: {parsed.registry} not reachable ({reason})") from None
    raise ResolveError(f"{ref}: the registry refused the token")


def lock_images(
    lock: Lock,
    refs: list[str],
    *,
    log: Callable[[str], None] = print,
    resolver: Callable[[str], str] = resolve_digest,
) -> dict[str, str]:
    """Re-resolve ``refs`` into ``lock`` (saved); ref -> "updated"/"unchanged"/"kept"/"unresolved".

    Registry pins no Dockerfile names any more are dropped; the Debian base pin is left alone
    (``dlperf images base`` owns it).
    """
    status: dict[str, str] = {}
    for ref in sorted(set(refs)):
        old = lock.get(ref)
        try:
            digest = resolver(ref)
        except ResolveError as error:
            if old is not None and old.resolved:
                status[ref] = "kept"
                log(f"{ref}: {error}; keeping the pinned {old.digest}")
            else:
                status[ref] = UNRESOLVED
                lock.pins[ref] = Pin(digest=UNRESOLVED, source="registry", error=str(error))
                log(f"{ref}: {error}; recorded as unresolved (images FROM it refuse to build)")
            continue
        changed = old is None or old.digest != digest
        status[ref] = "updated" if changed else "unchanged"
        lock.pins[ref] = Pin(
            digest=digest,
            source="registry",
            resolved_by="dlperf images lock (registry API)",
            resolved_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        log(f"{ref}: {digest} ({status[ref]})")
    for ref in [r for r, p in lock.pins.items() if p.source == "registry" and r not in status]:
        del lock.pins[ref]
        log(f"{ref}: no Dockerfile uses it any more; unpinned")
    lock.save()
    return status
