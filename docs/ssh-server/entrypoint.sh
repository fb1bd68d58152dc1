#!/bin/sh
# A host key per container start (the pod is the unit's; clients pin it per unit), then sshd.
set -eu
mkdir -p /tmp/sshd
[ -f /tmp/sshd/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /tmp/sshd/ssh_host_ed25519_key
exec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config
