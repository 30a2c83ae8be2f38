#!/usr/bin/env bash
# Installs the database servers the idempotency tests start for themselves (redis-server,
# PostgreSQL) where they are missing, on Debian or Ubuntu. Does nothing when both are
# present. The tests run private copies on free loopback ports; no service is used.
# Where nothing can be installed (no apt-get, no root or sudo) it only warns: the tests
# then skip those stores, or fail when CI is set.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "servers.sh: cannot install ${missing[*]}: not root and no password-less sudo" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "servers.sh: cannot install ${missing[*]}: no apt-get; install them by hand" >&2
  exit 0
fi

echo "servers.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} apt-get update -qq >/dev/null
${as_root[@]+"${as_root[@]}"} apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
