#!/usr/bin/env bash
# enroot and pyxis for the test cluster's pyxis path (tests/test_slurm_pyxis.py), built from
# their pinned releases; called by .ci/setup-system.sh after the apt packages are in.
#
# - enroot 4.1.2 with two of its three build-time submodules (makeself, the sabotage kernel
#   headers) at the releases its deps/Makefile names. FORCE_GLIBC=1 (an option of enroot's own
#   Makefile) links the helper binaries against the system's glibc instead of building musl
#   first (80 s of a 100 s build here). Debian 12's glibc 2.36 lacks strlcpy/strlcat, which
#   enroot-mount and enroot-switchroot call, so Debian's libbsd supplies them; it is named by its
#   file because enroot's own partial libbsd.a sits first on the library path.
# - pyxis 0.24.0 against the installed Slurm's spank.h (libslurm-dev): slurmd refuses a plug-in
#   built against another release ("Incompatible plugin version").
# - enroot 3.5.0's src/ is kept beside them: the tests run the reference parsing of both
#   releases (3.x takes no digest) on every image reference the kit renders.
#
# Each tarball is GitHub's archive of the release tag, checked before anything is built by the
# sha256 of its files (tree_sha256: every file's sha256 and path, every symlink's target), not of
# the archive's bytes: GitHub does not promise byte-identical archives over time, and the pins
# were computed from the tags themselves (`git archive` of each tag, unpacked).
# Idempotent: a release already installed (its stamp file) is not built again, and a tarball
# already in the cache folder is not downloaded again. DLPERF_SOURCE_CACHE names that folder
# (default /var/cache/dlperf/sources); a machine without GitHub can be given the tarballs there.
#
# Without them (a machine that reaches only the package registries: this project's CI) nothing
# is built and the script says so and exits 0: enroot and pyxis are on no registry and their
# code is not copied into the kit, so their tests skip there, naming why (tests/test_slurm_pyxis.py,
# tests/test_enroot_references.py). Their build tools (apt) are installed only when the sources
# are at hand.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

ENROOT_VERSION=4.1.2
ENROOT_OLD_VERSION=3.5.0
PYXIS_VERSION=0.24.0
SOURCES=${DLPERF_SOURCE_CACHE:-/var/cache/dlperf/sources}
SHARE=/usr/local/share/dlperf
PYXIS_STAMP=/usr/local/share/pyxis/dlperf-build

# file  url  tree_sha256 of its files
TARBALLS=(
    "enroot-v${ENROOT_VERSION}.tar.gz https://github.com/NVIDIA/enroot/archive/refs/tags/v${ENROOT_VERSION}.tar.gz 417e3fd63b9de725e09f7eaab2200f67992a6ab77b31a372583324019137b06f"
    "enroot-v${ENROOT_OLD_VERSION}.tar.gz https://github.com/NVIDIA/enroot/archive/refs/tags/v${ENROOT_OLD_VERSION}.tar.gz 4b6eef736f85953d3b25f3dd2f8430fa875cb695dc6501e3800530f6f140c06c"
    "makeself-release-2.4.5.tar.gz https://github.com/megastep/makeself/archive/refs/tags/release-2.4.5.tar.gz 8487ca1f724727ed0844feb2588849ae69c6e5c0d64947cc694bc9cc76969c8f"
    "kernel-headers-v4.19.88-1.tar.gz https://github.com/sabotage-linux/kernel-headers/archive/refs/tags/v4.19.88-1.tar.gz 2dddc341b07edb19374445a92af3021cb4b18bbedf19fde48e6334ecec7cbb43"
    "pyxis-v${PYXIS_VERSION}.tar.gz https://github.com/NVIDIA/pyxis/archive/refs/tags/v${PYXIS_VERSION}.tar.gz 462f8425fbbad073a8d2242885fe55ee19d2fe618266edbd091eb3babc854152"
)

# What a release's files are, whatever the tar headers around them: the sha256 of a listing of
# each file's sha256 and path and each symlink's target, in byte order.
tree_sha256() {
    (
        cd "$1"
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
        find . -type l -printf '%p -> %l\n' | LC_ALL=C sort
    ) | sha256sum | cut -c1-64
}

# The release in tarball FILE (downloaded unless cached) unpacked into DEST, once its files are
# what is pinned; DEST is replaced. A mismatch removes the download and stops.
source_tree() {
    local wanted=$1 dest=$2 file url sum got unpacked
    for entry in "${TARBALLS[@]}"; do
        read -r file url sum <<<"$entry"
        [ "$file" = "$wanted" ] || continue
        $SUDO mkdir -p "$SOURCES"
        if [ ! -f "$SOURCES/$file" ]; then
            echo "setup-system: downloading $url" >&2
            $SUDO curl -fsSL --retry 3 -o "$SOURCES/$file.part" "$url"
            $SUDO mv "$SOURCES/$file.part" "$SOURCES/$file"
        fi
        unpacked=$(mktemp -d "$build/unpack.XXXXXX")
        tar -xzf "$SOURCES/$file" -C "$unpacked" --strip-components=1
        got=$(tree_sha256 "$unpacked")
        if [ "$got" != "$sum" ]; then
            echo "setup-system: $SOURCES/$file: its files hash to $got, pinned $sum;" \
                 "removed it, run again to download it afresh" >&2
            $SUDO rm -f "$SOURCES/$file"
            exit 1
        fi
        rm -rf "$dest"
        mkdir -p "$(dirname "$dest")"
        mv "$unpacked" "$dest"
        return 0
    done
    echo "setup-system: no pinned tarball $wanted" >&2
    exit 1
}

# Every pinned tarball in the cache, downloaded where missing; 1 (after one line saying which
# and why) when one cannot be had.
fetch_all() {
    local file url sum
    $SUDO mkdir -p "$SOURCES"
    for entry in "${TARBALLS[@]}"; do
        read -r file url sum <<<"$entry"
        [ -f "$SOURCES/$file" ] && continue
        echo "setup-system: downloading $url" >&2
        if ! $SUDO curl -fsSL --retry 2 --connect-timeout 10 -o "$SOURCES/$file.part" "$url"; then
            $SUDO rm -f "$SOURCES/$file.part"
            echo "setup-system: enroot and pyxis not built: $url cannot be downloaded here" \
                 "and $SOURCES has no $file (they are on no package registry; give the" \
                 "release tarballs in \$DLPERF_SOURCE_CACHE); their tests skip" >&2
            return 1
        fi
        $SUDO mv "$SOURCES/$file.part" "$SOURCES/$file"
    done
}

installed() {
    [ "$(enroot version 2>/dev/null || true)" = "$ENROOT_VERSION" ] &&
        [ -f /usr/local/lib/slurm/spank_pyxis.so ] &&
        [ -f "$SHARE/enroot-$ENROOT_OLD_VERSION/src/docker.sh" ] &&
        [ -f "$SHARE/enroot-$ENROOT_VERSION/src/docker.sh" ]
}

if ! installed; then
    fetch_all || exit 0
    # The builds' tools, Slurm's spank.h of the installed release for pyxis (pyxis must be built
    # against the Slurm it loads into), Debian's libbsd (strlcpy for enroot's helpers), and what
    # enroot's import and start call (curl, gawk, jq, parallel, mksquashfs, zstd; pigz if there).
    need=()
    command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
    command -v make >/dev/null 2>&1 || need+=(make)
    [ -f /usr/include/slurm/spank.h ] || need+=(libslurm-dev)
    [ -f /usr/include/bsd/string.h ] || need+=(libbsd-dev)
    command -v mksquashfs >/dev/null 2>&1 || need+=(squashfs-tools)
    command -v parallel >/dev/null 2>&1 || need+=(parallel)
    command -v jq >/dev/null 2>&1 || need+=(jq)
    command -v zstd >/dev/null 2>&1 || need+=(zstd)
    command -v gawk >/dev/null 2>&1 || need+=(gawk)
    command -v pigz >/dev/null 2>&1 || need+=(pigz)
    command -v curl >/dev/null 2>&1 || need+=(curl)
    if [ "${#need[@]}" -gt 0 ]; then
        echo "setup-system: installing ${need[*]} (enroot and pyxis)"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
fi

slurm_version() {
    dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null || true
}

build=$(mktemp -d /tmp/dlperf-enroot-build.XXXXXX)
trap 'rm -rf "$build"' EXIT

# enroot 3.5.0's and the pinned enroot's src/, for the reference-parsing tests.
for version in "$ENROOT_OLD_VERSION" "$ENROOT_VERSION"; do
    if [ ! -f "$SHARE/enroot-$version/src/docker.sh" ]; then
        source_tree "enroot-v$version.tar.gz" "$build/enroot-$version-release"
        $SUDO mkdir -p "$SHARE/enroot-$version"
        $SUDO cp -r "$build/enroot-$version-release/src" "$SHARE/enroot-$version/"
    fi
done

started=$SECONDS
if [ "$(enroot version 2>/dev/null || true)" = "$ENROOT_VERSION" ]; then
    echo "setup-system: enroot $ENROOT_VERSION already installed"
else
    echo "setup-system: building enroot $ENROOT_VERSION"
    src="$build/enroot-$ENROOT_VERSION"
    source_tree "enroot-v$ENROOT_VERSION.tar.gz" "$src"
    source_tree makeself-release-2.4.5.tar.gz "$src/deps/makeself"
    source_tree kernel-headers-v4.19.88-1.tar.gz "$src/deps/linux-headers"
    # Not a git checkout: the Makefile's `git submodule update` fails, ignored by make ("-").
    FORCE_GLIBC=1 make -C "$src" -j "$(nproc)" all LDLIBS="-l:libbsd.a -l:libbsd.so.0" >"$build/enroot-make.log" 2>&1 || {
        tail -n 40 "$build/enroot-make.log" >&2
        exit 1
    }
    $SUDO env FORCE_GLIBC=1 make -C "$src" install LDLIBS="-l:libbsd.a -l:libbsd.so.0" prefix=/usr/local >>"$build/enroot-make.log" 2>&1
    echo "setup-system: enroot $(enroot version) installed in $((SECONDS - started)) s"
fi

started=$SECONDS
slurm=$(slurm_version)
if [ -f /usr/local/lib/slurm/spank_pyxis.so ] &&
   [ "$(cat "$PYXIS_STAMP" 2>/dev/null)" = "pyxis $PYXIS_VERSION slurm $slurm" ]; then
    echo "setup-system: pyxis $PYXIS_VERSION for Slurm $slurm already installed"
else
    echo "setup-system: building pyxis $PYXIS_VERSION against Slurm $slurm"
    src="$build/pyxis-$PYXIS_VERSION"
    source_tree "pyxis-v$PYXIS_VERSION.tar.gz" "$src"
    make -C "$src" -j "$(nproc)" >"$build/pyxis-make.log" 2>&1 || {
        tail -n 40 "$build/pyxis-make.log" >&2
        exit 1
    }
    $SUDO make -C "$src" install prefix=/usr/local >>"$build/pyxis-make.log" 2>&1
    echo "pyxis $PYXIS_VERSION slurm $slurm" | $SUDO tee "$PYXIS_STAMP" >/dev/null
    echo "setup-system: pyxis installed in $((SECONDS - started)) s" \
         "(/usr/local/lib/slurm/spank_pyxis.so)"
fi
