"""A local git copy as an upstream source's code: checks, git daemon, a real docker build."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from driver.images.build import BuildOptions, build_images
from driver.images.local_copy import (
    LocalCopy,
    LocalCopyError,
    check_copy,
    local_copies,
    serve,
)
from driver.sources.upstream import SPECS

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def git(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def commit(repo: Path, message: str) -> str:
    (repo / "file.txt").write_text(message + "\n")
    git("add", "file.txt", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A checkout with two commits on main, one only under a tag and one on no ref at all."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commits = {"first": commit(repo, "first"), "main": commit(repo, "second")}
    git("checkout", "-q", "--detach", cwd=repo)
    commits["tagged"] = commit(repo, "tagged")
    git("tag", "v1", cwd=repo)
    commits["loose"] = commit(repo, "loose")
    git("checkout", "-q", "main", cwd=repo)
    return repo, commits


ABSENT = "0123456789abcdef0123456789abcdef01234567"


def check(path: Path, commits: list[str]) -> LocalCopy:
    return check_copy("demo", "src-demo", path, "https://example.invalid/demo", commits)


def test_a_checkout_and_a_bare_mirror_holding_every_commit_are_accepted(
    upstream: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, commits = upstream
    wanted = [commits["first"], commits["tagged"], commits["loose"]]  # on a branch, a tag, none
    copy = check(repo, wanted)
    assert copy.git_dir == (repo / ".git").resolve()
    assert copy.commits == tuple(sorted(wanted))
    mirror = tmp_path / "demo.git"
    git("clone", "-q", "--mirror", str(repo), str(mirror))
    bare = check(mirror, [commits["first"], commits["tagged"]])
    assert bare.git_dir == mirror.resolve()
    record = bare.provenance()
    assert record["from"] == "local copy" and record["path"] == str(mirror.resolve())
    assert record["stands_for"] == "https://example.invalid/demo"
    assert record["commits"] == sorted([commits["first"], commits["tagged"]])


def test_a_missing_commit_or_history_is_refused_with_the_fix(
    upstream: tuple[Path, dict[str, str]],
) -> None:
    repo, commits = upstream
    with pytest.raises(LocalCopyError) as missing:
        check(repo, [commits["main"], ABSENT])
    text = str(missing.value)
    assert f"--source-checkout demo={repo}" in text and f"commit {ABSENT}" in text
    assert "not in this copy" in text and f"git -C {repo} fetch origin" in text
    # The first commit's file: in the history of every later commit, in no later tree.
    blob = git("rev-parse", f"{commits['first']}:file.txt", cwd=repo)
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(LocalCopyError) as incomplete:
        check(repo, [commits["main"]])
    text = str(incomplete.value)
    assert f"history of commit {commits['main']}" in text and blob in text
    assert "git clone --mirror https://example.invalid/demo PATH" in text


def test_a_missing_path_and_a_folder_that_is_no_repository_are_refused(
    upstream: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, commits = upstream
    with pytest.raises(LocalCopyError, match=r"no such directory"):
        check(tmp_path / "nowhere", [commits["main"]])
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(LocalCopyError, match=r"plain is not a git repository"):
        check(plain, [commits["main"]])
    inside = repo / "sub"  # a folder of a checkout is not that checkout
    inside.mkdir()
    with pytest.raises(LocalCopyError, match=r"sub is not a git repository"):
        check(inside, [commits["main"]])


def test_every_commit_the_source_pins_is_checked_and_names_must_be_sources(
    upstream: tuple[Path, dict[str, str]],
) -> None:
    repo, commits = upstream
    real = SPECS["ngc-pytorch"]  # one commit per model: resnet50 and bert differ
    model, other = sorted(real.launches)[:2]
    spec = real.model_copy(update={
        "commit": commits["main"],
        "launches": {
            model: real.launches[model].model_copy(update={"commit": commits["main"]}),
            other: real.launches[other].model_copy(update={"commit": ABSENT}),
        },
    })  # fmt: skip
    with pytest.raises(LocalCopyError, match=ABSENT):
        local_copies([f"ngc-pytorch={repo}"], {"ngc-pytorch": spec})
    tagged = spec.launches[other].model_copy(update={"commit": commits["tagged"]})
    spec = spec.model_copy(update={"launches": {**spec.launches, other: tagged}})
    copies = local_copies([f"ngc-pytorch={repo}"], {"ngc-pytorch": spec})
    assert set(copies) == {real.image}
    assert set(copies[real.image].commits) == {commits["main"], commits["tagged"]}
    with pytest.raises(LocalCopyError, match=r"no upstream source 'ngc-pytorh' \(did you mean"):
        local_copies([f"ngc-pytorh={repo}"], SPECS)
    with pytest.raises(LocalCopyError, match=r"write SOURCE=PATH"):
        local_copies(["ngc-pytorch"], SPECS)


def test_cli_refuses_a_bad_copy_before_building_anything(
    upstream: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture
) -> None:
    from driver.frontend.cli import main

    repo, _commits = upstream  # holds none of pytorch-examples' pinned commits
    code = main(["images", "build", "src-pytorch-examples",
                 "--source-checkout", f"pytorch-examples={repo}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert SPECS["pytorch-examples"].commit in err and "Traceback" not in err
    code = main(["images", "build", "cpu-python", "--source-checkout", f"pytorch-exampls={repo}"])
    assert code == 2 and "did you mean 'pytorch-examples'" in capsys.readouterr().err


def test_git_daemon_serves_the_copy_to_a_clone_and_stops_after(
    upstream: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, commits = upstream
    copy = check(repo, [commits["first"], commits["loose"]])  # one on no branch or tag
    log = tmp_path / "daemon.log"
    with serve(copy, log) as url:
        port = int(url.split(":")[2].split("/")[0])
        clone = tmp_path / "clone"
        # What every source's Dockerfile does with REPO.
        git("clone", "-q", "--no-checkout", url, str(clone))
        for wanted in (commits["first"], commits["loose"]):
            git("-C", str(clone), "checkout", "-q", wanted)
            assert git("-C", str(clone), "rev-parse", "HEAD") == wanted
        # Only the pinned commits are served (not the copy's own branches and tags), and only
        # that repository.
        served = git("-C", str(clone), "for-each-ref", "--format=%(refname)",
                     "refs/remotes/origin/dlperf-*", "refs/tags").split()  # fmt: skip
        assert served == sorted(
            f"refs/remotes/origin/dlperf-{c[:12]}" for c in (commits["first"], commits["loose"])
        )
        other = subprocess.run(
            ["git", "ls-remote", url.rsplit("/", 1)[0] + "/elsewhere"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert other.returncode != 0
    assert "Request upload-pack" in log.read_text()
    with pytest.raises(KeyboardInterrupt), serve(copy, log) as url:  # Ctrl-C during a build
        ports = [port, int(url.split(":")[2].split("/")[0])]
        raise KeyboardInterrupt
    for stopped in ports:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", stopped), timeout=2):
            pass


# The Debian base has no git; Python speaks git's protocol enough to read what the daemon
# advertises, which is what the build container's clone would get.
ADVERTISED = """\
import socket, sys
url, commit = sys.argv[1], sys.argv[2]
host, port_path = url[len("git://"):].split(":", 1)
port, path = port_path.split("/", 1)
request = f"git-upload-pack /{path}\\0host={host}\\0".encode()
with socket.create_connection((host, int(port)), timeout=10) as conn:
    conn.sendall(b"%04x" % (len(request) + 4) + request)
    data = b""
    while not data.endswith(b"0000"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    conn.sendall(b"0000")
refs = data.decode(errors="replace")
print(refs)
sys.exit(0 if f"{commit} refs/heads/dlperf-{commit[:12]}" in refs else 1)
"""


def test_a_real_docker_build_takes_its_code_from_the_served_copy(
    upstream: tuple[Path, dict[str, str]], tmp_path: Path, image_options: BuildOptions
) -> None:
    from driver.frameworks.base import REPO_ROOT
    from driver.images.engine import docker_client

    repo, commits = upstream
    root = tmp_path / "tree"
    (root / "dockerfiles").mkdir(parents=True)
    for recipe in (REPO_ROOT / "dockerfiles").glob("base-*.yaml"):
        (root / "dockerfiles" / recipe.name).write_text(recipe.read_text())
    (root / "dockerfiles" / "advertised.py").write_text(ADVERTISED)
    (root / "dockerfiles" / "Dockerfile.src-demo").write_text(
        "# dlperf-from BASE_IMAGE=@debian\n# dlperf-context advertised.py\n"
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY advertised.py /advertised.py\n"
        "ARG REPO=git://unreachable.invalid/demo\n"
        f'RUN python3 /advertised.py "${{REPO}}" {commits["tagged"]}\n'
    )
    copy = check(repo, [commits["tagged"]])
    options = dataclasses.replace(image_options, root=root, local_copies={"src-demo": copy})
    built = build_images(["src-demo"], options)["src-demo"]
    client = docker_client()
    try:
        assert built.built and built.id
        labels = client.images.get(built.tag).labels
        assert labels["dlperf.code-from"] == f"local copy {repo.resolve()} of {copy.repository}"
        records = json.loads(
            (image_options.lock_path.parent / ".dlperf" / "images-built.json").read_text()
        )
        assert records[built.tag]["code"] == copy.provenance()
        log = image_options.lock_path.parent / ".dlperf" / "build-logs" / "src-demo.log"
        tagged = commits["tagged"]
        assert f"{tagged} refs/heads/dlperf-{tagged[:12]}" in log.read_text()
    finally:
        client.images.remove(built.tag, force=True)


def test_a_shallow_copy_serves_the_commit_at_its_tip(
    upstream: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, commits = upstream
    shallow = tmp_path / "shallow.git"
    git("clone", "-q", "--bare", "--depth=1", f"file://{repo}", str(shallow))
    copy = check(shallow, [commits["main"]])  # its history ends where the copy says
    with serve(copy, tmp_path / "daemon.log") as url:
        clone = tmp_path / "clone"
        git("clone", "-q", "--no-checkout", url, str(clone))
        git("-C", str(clone), "checkout", "-q", commits["main"])
        assert (clone / "file.txt").read_text() == "second\n"
