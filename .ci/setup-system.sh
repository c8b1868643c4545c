#!/usr/bin/env bash
# System parts the cluster tests use for real: a docker engine, sshd (the fixture starts its own
# instances; the package is only needed for the binary), debootstrap (the CPU base image) and
# Slurm with munge (tests/slurm_fixtures.py starts its own munged, slurmctld and two slurmd in
# network namespaces; only the binaries are needed, the packages' own services stay stopped).
# Idempotent: installs only what is missing and starts dockerd only when `docker info` fails.
# Called by .ci/run; safe to run by hand (needs root, or sudo for apt-get and dockerd).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
[ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
[ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v srun >/dev/null 2>&1 || need+=(slurm-client)
[ -x /usr/sbin/munged ] || need+=(munge)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# Slurm's own OCI containers (srun --container) call runc (tests/test_slurm_oci.py).
command -v runc >/dev/null 2>&1 || need+=(runc)
# podman: the second engine the SSH transport runs (tests/test_cluster_podman.py).
command -v podman >/dev/null 2>&1 || need+=(podman)
if [ "${#need[@]}" -gt 0 ]; then
    echo "setup-system: installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# enroot and pyxis from their release tarballs where they can be had (else said, and skipped).
bash "$(dirname "$0")/build-enroot-pyxis.sh"

# sshd refuses to start without its privilege-separation directory.
$SUDO mkdir -p /run/sshd

# podman sets default ulimits the host may not raise (on a host that is itself a container:
# "error setting rlimit ... operation not permitted"): an empty list keeps the caller's. Written only when the
# system file is absent or lacks the setting.
conf=/etc/containers/containers.conf
if ! grep -qs '^default_ulimits' "$conf"; then
    $SUDO mkdir -p /etc/containers
    if grep -qs '^\[containers\]' "$conf"; then
        $SUDO sed -i 's/^\[containers\]$/[containers]\ndefault_ulimits = []/' "$conf"
    else
        printf '[containers]\ndefault_ulimits = []\n' | $SUDO tee -a "$conf" >/dev/null
    fi
fi

if docker info >/dev/null 2>&1; then
    echo "setup-system: docker engine already running"
    exit 0
fi
echo "setup-system: starting dockerd (log: /tmp/dockerd.log)"
# setsid: the engine must outlive this script and the CI step that ran it.
$SUDO setsid dockerd >/tmp/dockerd.log 2>&1 < /dev/null &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "setup-system: docker engine is up ($(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 1
done
echo "setup-system: dockerd did not answer within 60 s; last lines of /tmp/dockerd.log:" >&2
tail -n 30 /tmp/dockerd.log >&2 || true
exit 1
