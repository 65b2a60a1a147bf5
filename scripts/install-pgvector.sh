#!/usr/bin/env bash
# Install the pgvector extension (>= 0.5) into the local PostgreSQL server.
#
# Debian bookworm ships no pgvector binary package, so this builds it from
# Debian trixie's *source* package:
#   - adds a deb-src-only entry for trixie (no binaries are ever taken from
#     trixie, so nothing on the system is upgraded or pinned),
#   - installs postgresql-server-dev-<major> (and dpkg-dev if missing),
#   - `apt-get source pgvector/trixie` in a temp dir, builds and installs it
#     with PGXS against the server's pg_config, then removes the temp dir.
#
# Idempotent: exits at once when vector.control (>= 0.5) is already installed.
#
# Environment:
#   PG_MAJOR                 PostgreSQL major version (default: detected)
#   PGVECTOR_DEBIAN_MIRROR   Debian mirror URI for the deb-src entry
#                            (default: the one the existing apt sources use)
#
# Must run as root (or via sudo). Needs only Debian's apt repositories.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
MIN_VERSION="0.5.0"
SRC_LIST=/etc/apt/sources.list.d/pgvector-trixie-src.sources
APT_GET=(apt-get -y -q -o DPkg::Lock::Timeout=300)

log() { printf '[install-pgvector] %s\n' "$*"; }
die() { printf '[install-pgvector] ERROR: %s\n' "$*" >&2; exit 1; }

# --- PostgreSQL major version -------------------------------------------------
detect_pg_major() {
  local v
  if [[ -d /etc/postgresql ]]; then
    v=$(ls -1 /etc/postgresql 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -n1 || true)
    [[ -n $v ]] && { echo "$v"; return; }
  fi
  if [[ -d /usr/lib/postgresql ]]; then
    v=$(ls -1 /usr/lib/postgresql 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -n1 || true)
    [[ -n $v ]] && { echo "$v"; return; }
  fi
  if command -v pg_config >/dev/null 2>&1; then
    # "PostgreSQL 15.20 (Debian 15.20-0+deb12u1)" -> 15
    v=$(pg_config --version | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p')
    [[ -n $v ]] && { echo "$v"; return; }
  fi
  return 1
}

PG_MAJOR=${PG_MAJOR:-$(detect_pg_major || true)}
[[ -n $PG_MAJOR ]] || die "cannot determine the PostgreSQL major version (set PG_MAJOR)"
[[ $PG_MAJOR =~ ^[0-9]+$ ]] || die "PG_MAJOR must be a major version number like 15, got '$PG_MAJOR'"
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config

sharedir() {
  if [[ -x $PG_CONFIG ]]; then "$PG_CONFIG" --sharedir; else echo "/usr/share/postgresql/$PG_MAJOR"; fi
}

# default_version of an installed vector.control, empty if none.
installed_version() {
  local ctl
  ctl="$(sharedir)/extension/vector.control"
  [[ -f $ctl ]] || return 0
  sed -nE "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'?([^' ]+)'?.*/\1/p" "$ctl" | head -n1
}

version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }

# --- fast path: already installed ---------------------------------------------
current=$(installed_version)
if [[ -n $current ]]; then
  if version_ge "$current" "$MIN_VERSION"; then
    log "pgvector $current already installed for PostgreSQL $PG_MAJOR ($(sharedir)/extension/vector.control); nothing to do."
    exit 0
  fi
  log "pgvector $current is older than $MIN_VERSION; rebuilding."
fi

[[ $(id -u) -eq 0 ]] || die "must run as root to install packages (try: sudo $0)"

# --- deb-src entry for trixie, on the mirror this machine already uses --------
detect_mirror() {
  local f uris uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f && $f != "$SRC_LIST" ]] || continue
    case $f in
      *.sources) uris=$(awk -F':' 'tolower($1) ~ /^uris$/ { sub(/^[^:]*:/, ""); print }' "$f") ;;
      *) uris=$(awk '$1 == "deb" || $1 == "deb-src" {
                   for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }' "$f") ;;
    esac
    for uri in $uris; do
      uri=${uri%/}
      # the main archive, not debian-security / debian-ports / third-party repos
      if [[ $uri == */debian ]]; then echo "$uri"; return 0; fi
    done
  done
  return 1
}

MIRROR=${PGVECTOR_DEBIAN_MIRROR:-$(detect_mirror || echo http://deb.debian.org/debian)}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

src_entry="# Added by scripts/install-pgvector.sh: Debian trixie *source* packages only
# (to build pgvector, which bookworm lacks). deb-src gives apt no binaries to
# install or upgrade from.
Types: deb-src
URIs: $MIRROR
Suites: trixie
Components: main"
[[ -f $KEYRING ]] && src_entry+=$'\n'"Signed-By: $KEYRING"

if [[ ! -f $SRC_LIST ]] || [[ "$(cat "$SRC_LIST")" != "$src_entry" ]]; then
  log "adding deb-src entry for trixie ($MIRROR) in $SRC_LIST"
  printf '%s\n' "$src_entry" >"$SRC_LIST"
fi

log "apt-get update"
"${APT_GET[@]}" update >/dev/null || die "apt-get update failed"

# --- build dependencies --------------------------------------------------------
need=()
for p in "postgresql-server-dev-$PG_MAJOR" dpkg-dev make gcc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ((${#need[@]})); then
  log "installing build dependencies: ${need[*]}"
  "${APT_GET[@]}" install --no-install-recommends "${need[@]}" >/dev/null
fi
[[ -x $PG_CONFIG ]] || die "$PG_CONFIG not found after installing postgresql-server-dev-$PG_MAJOR"

# --- fetch, build, install -----------------------------------------------------
workdir=$(mktemp -d /tmp/pgvector-build.XXXXXX)
trap 'rm -rf "$workdir"' EXIT
# let apt's sandbox user write the download (avoids the "unsandboxed as root" warning)
if id _apt >/dev/null 2>&1; then chown _apt "$workdir"; fi

log "fetching pgvector source (trixie) into $workdir"
(cd "$workdir" && apt-get -q source pgvector/trixie >/dev/null 2>"$workdir/source.err") || {
  cat "$workdir/source.err" >&2
  die "apt-get source pgvector/trixie failed"
}
srcdir=$(find "$workdir" -mindepth 1 -maxdepth 1 -type d -name 'pgvector-*' | head -n1)
[[ -n $srcdir && -f $srcdir/Makefile ]] || die "pgvector source dir not found in $workdir"

log "building $(basename "$srcdir") against PostgreSQL $PG_MAJOR"
# with_llvm=no: no JIT bitcode (clang not needed at build time);
# OPTFLAGS="": no -march=native, so the .so is portable to other CPUs.
make -C "$srcdir" -j"$(nproc)" with_llvm=no OPTFLAGS="" PG_CONFIG="$PG_CONFIG" >"$workdir/build.log" 2>&1 || {
  tail -n 40 "$workdir/build.log" >&2
  die "build failed"
}
log "installing"
make -C "$srcdir" install with_llvm=no OPTFLAGS="" PG_CONFIG="$PG_CONFIG" >>"$workdir/build.log" 2>&1 || {
  tail -n 40 "$workdir/build.log" >&2
  die "make install failed"
}

current=$(installed_version)
[[ -n $current ]] || die "vector.control not found in $(sharedir)/extension after install"
version_ge "$current" "$MIN_VERSION" || die "installed pgvector $current is older than $MIN_VERSION"
log "pgvector $current installed for PostgreSQL $PG_MAJOR; enable it per database with: CREATE EXTENSION vector;"
