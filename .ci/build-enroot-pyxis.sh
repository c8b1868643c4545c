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
# Each tarball is GitHub's archive of the release tag; its sha256 is that of the tar stream
# (`gzip -dc FILE | sha256sum`), which is what `git archive` writes for the tag, computed here from
# the tags themselves; the gzip layer over it is not promised to stay byte-identical.
# Idempotent: a release already installed (its stamp file) is not built again, and a tarball
# already in the cache folder is not downloaded again. DLPERF_SOURCE_CACHE names that folder
# (default /var/cache/dlperf/sources); a machine without GitHub can be given the tarballs there.
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

# file  url  sha256 of the tar stream
TARBALLS=(
    "enroot-v${ENROOT_VERSION}.tar.gz https://github.com/NVIDIA/enroot/archive/refs/tags/v${ENROOT_VERSION}.tar.gz aa67095a002fef365e9404d8a336beeb4e5e36409a0e0b682bd7496861dea0d3"
    "enroot-v${ENROOT_OLD_VERSION}.tar.gz https://github.com/NVIDIA/enroot/archive/refs/tags/v${ENROOT_OLD_VERSION}.tar.gz 87440ac372da7f33d282fec818eadb456abc1d571483a30efe17cd934d2606e0"
    "makeself-release-2.4.5.tar.gz https://github.com/megastep/makeself/archive/refs/tags/release-2.4.5.tar.gz 19f627fcbab2e4eb147b2d6c8a84947120cc62e47b9b327e3296ac4a37960a3f"
    "kernel-headers-v4.19.88-1.tar.gz https://github.com/sabotage-linux/kernel-headers/archive/refs/tags/v4.19.88-1.tar.gz 142b7c6cb8e25ae5534f2e86f37f248c3d81044f8854a5147b7d028b32dfb15c"
    "pyxis-v${PYXIS_VERSION}.tar.gz https://github.com/NVIDIA/pyxis/archive/refs/tags/v${PYXIS_VERSION}.tar.gz b406327c172809248d6015a4c514a1ab7974a6a132b5e70b191d6ac5ab2523d0"
)

# The tarball FILE, downloaded unless cached, checked against its pinned sum; its path.
source_tarball() {
    local wanted=$1 file url sum got
    for entry in "${TARBALLS[@]}"; do
        read -r file url sum <<<"$entry"
        [ "$file" = "$wanted" ] || continue
        $SUDO mkdir -p "$SOURCES"
        if [ ! -f "$SOURCES/$file" ]; then
            echo "setup-system: downloading $url" >&2
            $SUDO curl -fsSL --retry 3 -o "$SOURCES/$file.part" "$url"
            $SUDO mv "$SOURCES/$file.part" "$SOURCES/$file"
        fi
        got=$(gzip -dc "$SOURCES/$file" | sha256sum | cut -c1-64)
        if [ "$got" != "$sum" ]; then
            echo "setup-system: $SOURCES/$file: tar sha256 $got, pinned $sum; removed it," \
                 "run again to download it afresh" >&2
            $SUDO rm -f "$SOURCES/$file"
            exit 1
        fi
        echo "$SOURCES/$file"
        return 0
    done
    echo "setup-system: no pinned tarball $wanted" >&2
    exit 1
}

slurm_version() {
    dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null || true
}

build=$(mktemp -d /tmp/dlperf-enroot-build.XXXXXX)
trap 'rm -rf "$build"' EXIT

# enroot 3.5.0's and the pinned enroot's src/, for the reference-parsing tests.
for version in "$ENROOT_OLD_VERSION" "$ENROOT_VERSION"; do
    if [ ! -f "$SHARE/enroot-$version/src/docker.sh" ]; then
        tarball=$(source_tarball "enroot-v$version.tar.gz")
        $SUDO mkdir -p "$SHARE/enroot-$version"
        $SUDO tar -xzf "$tarball" -C "$SHARE/enroot-$version" --strip-components=1 \
            "enroot-$version/src"
    fi
done

started=$SECONDS
if [ "$(enroot version 2>/dev/null || true)" = "$ENROOT_VERSION" ]; then
    echo "setup-system: enroot $ENROOT_VERSION already installed"
else
    echo "setup-system: building enroot $ENROOT_VERSION"
    tar -xzf "$(source_tarball "enroot-v$ENROOT_VERSION.tar.gz")" -C "$build"
    src="$build/enroot-$ENROOT_VERSION"
    tar -xzf "$(source_tarball makeself-release-2.4.5.tar.gz)" -C "$src/deps/makeself" \
        --strip-components=1
    tar -xzf "$(source_tarball kernel-headers-v4.19.88-1.tar.gz)" -C "$src/deps/linux-headers" \
        --strip-components=1
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
    tar -xzf "$(source_tarball "pyxis-v$PYXIS_VERSION.tar.gz")" -C "$build"
    src="$build/pyxis-$PYXIS_VERSION"
    make -C "$src" -j "$(nproc)" >"$build/pyxis-make.log" 2>&1 || {
        tail -n 40 "$build/pyxis-make.log" >&2
        exit 1
    }
    $SUDO make -C "$src" install prefix=/usr/local >>"$build/pyxis-make.log" 2>&1
    echo "pyxis $PYXIS_VERSION slurm $slurm" | $SUDO tee "$PYXIS_STAMP" >/dev/null
    echo "setup-system: pyxis installed in $((SECONDS - started)) s" \
         "(/usr/local/lib/slurm/spank_pyxis.so)"
fi
