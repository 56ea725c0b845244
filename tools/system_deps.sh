#!/usr/bin/env bash
# tools/system_deps.sh FILE: install the Debian packages FILE lists (one name a line, `#` starts a
# comment) that are not installed yet. `make system-deps` runs it before the tests, which start real
# Slurm, MariaDB, promtool and amtool from these packages.
#
# A no-op (one dpkg-query) when everything is there. Otherwise, as root: `apt-get update` only when a
# package has no install candidate or the first install attempt fails (a stale index), then
# `apt-get install --no-install-recommends` without prompts. No service starts: where the machine has
# no policy-rc.d, a temporary one refuses every start for the time of the install (the tests start
# their own daemons on loopback, in temporary folders). Exit 1, naming the packages, when they are
# missing and cannot be installed (not root, no apt-get, apt failed).
set -euo pipefail

list=${1:?usage: tools/system_deps.sh PACKAGE_LIST}
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$list")
((${#wanted[@]})) || exit 0

missing=()
for name in "${wanted[@]}"; do
  # dpkg-query fails for a name it has never seen, and prints another status for a removed one.
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$name" 2>/dev/null) == installed ]] || missing+=("$name")
done
((${#missing[@]})) || exit 0

say() { printf 'system-deps: %s\n' "$*" >&2; }
if ((EUID != 0)) || ! command -v apt-get >/dev/null; then
  say "missing Debian packages: ${missing[*]} (from $list)"
  say "install them as root: apt-get install --no-install-recommends ${missing[*]}"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# written by mlcluster tools/system_deps.sh for the time of an install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

say "installing ${missing[*]}"
for name in "${missing[@]}"; do
  if ! apt-cache policy "$name" 2>/dev/null | grep -q 'Candidate: [^(]'; then
    say "no candidate for $name in the package index: apt-get update"
    "${apt[@]}" update
    break
  fi
done
if ! "${apt[@]}" install --no-install-recommends "${missing[@]}"; then
  say "install failed; refreshing the package index and trying once more"
  "${apt[@]}" update
  "${apt[@]}" install --no-install-recommends "${missing[@]}"
fi
