#!/usr/bin/env bash
# Per-user container folders, made by root before a user's job or session starts.
#
#   mlcluster-user-dirs [USER|UID]
#
# Installed by the enroot_pyxis step as /opt/mlcluster/bin/mlcluster-user-dirs
# and run as root from the Slurm prolog (SLURM_JOB_UID) on compute nodes and
# from pam_exec at SSH login (PAM_USER) on head and login nodes. For each root
# folder listed in /etc/mlcluster/user-dirs.d/*.conf (Enroot's runtime, cache,
# data and temporary folders, rootless Podman's storage) it makes
# ROOT/user-UID, mode 0700, owned by the user. The roots must be root's and
# not writable by others, so nobody else can name, plant or swap a user's
# folder; an existing user-UID that is a link, not a folder or not the user's
# is refused with a message (the job does not start), never adopted or
# changed.
set -euo pipefail

ROOT="${MLCLUSTER_ROOT:-}"
CONF_DIR="${ROOT}/etc/mlcluster/user-dirs.d"

fail() {
  printf 'mlcluster-user-dirs: ERROR: %s\n' "$*" >&2
  exit 1
}

who="${1:-${SLURM_JOB_UID:-${PAM_USER:-}}}"
[[ -n "${who}" ]] || fail "no user: give a user name or uid, or run from a Slurm prolog or pam_exec"
entry="$(getent passwd "${who}")" || fail "unknown user '${who}'"
IFS=: read -r name _ uid gid _ <<<"${entry}"
shopt -s nullglob
confs=("${CONF_DIR}"/*.conf)
((${#confs[@]})) || exit 0

while IFS= read -r top || [[ -n "${top}" ]]; do
  [[ -z "${top}" || "${top}" == \#* ]] && continue
  parent="${ROOT}${top}"
  if [[ -L "${parent}" || ! -d "${parent}" ]]; then
    fail "${top} is missing or a link; run the enroot_pyxis node script again"
  fi
  read -r owner mode <<<"$(stat -c '%u %a' "${parent}")"
  if [[ "${owner}" != 0 && "${owner}" != "${EUID}" ]] || (((8#${mode} & 8#022) != 0)); then
    fail "${top} must be root's and writable only by root (owner uid ${owner}, mode ${mode}); no folder made for ${name}"
  fi
  dir="${parent}/user-${uid}"
  if mkdir -m 0700 "${dir}" 2>/dev/null; then
    # Only root can write the parent, so the new folder cannot be swapped before the chown.
    chown -h "${uid}:${gid}" "${dir}"
    printf 'mlcluster-user-dirs: made %s/user-%s for %s\n' "${top}" "${uid}" "${name}" >&2
    continue
  fi
  if [[ -L "${dir}" || ! -d "${dir}" ]]; then
    fail "${top}/user-${uid} is a link or not a folder; refused for ${name} (remove it)"
  fi
  owner="$(stat -c %u "${dir}")"
  [[ "${owner}" == "${uid}" ]] || fail "${top}/user-${uid} is owned by uid ${owner}, not ${name} (${uid}); refused (remove it)"
done < <(cat "${confs[@]}")
