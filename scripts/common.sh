# Shared helpers for Strata's scripts (sourced, not executed).

# Cache folder shared by every script and by later runs (Kokkos builds,
# source tarballs).
strata_cache() {
  local c="${STRATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}"
  mkdir -p "$c"
  echo "$c"
}

strata_kokkos_prefix() {
  echo "$(strata_cache)/kokkos-3.4.1-$1"
}

# Runs a command as root (directly, or through sudo when available).
strata_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else
    echo "strata: need root to run: $*" >&2
    return 1
  fi
}

# Installs the Debian packages among "$@" that are not installed yet. Does not
# touch the network when all are present.
strata_apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${STRATA_NO_APT:-0}" = 1 ]; then
    echo "strata: missing Debian packages (STRATA_NO_APT=1, not installing): ${missing[*]}" >&2
    return 1
  fi
  echo "strata: installing Debian packages: ${missing[*]}" >&2
  strata_as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive strata_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Adds a deb-src line for bookworm (main) when apt has none, so that
# `apt-get source` works.
strata_ensure_deb_src() {
  if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "strata: adding a deb-src entry for bookworm to apt" >&2
    strata_as_root tee /etc/apt/sources.list.d/strata-deb-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    strata_as_root apt-get update -qq
  fi
}

# Prints the folder holding Kokkos 3.4.1's sources, extracted from Debian's
# trilinos source package (only packages/kokkos is unpacked).
strata_kokkos_source() {
  local cache src tarball
  cache="$(strata_cache)"
  src="$cache/src/kokkos-3.4.1"
  if [ -f "$src/CMakeLists.txt" ]; then echo "$src"; return 0; fi
  strata_apt_install dpkg-dev >&2
  tarball=$(ls "$cache"/src/trilinos_*.orig.tar.* 2>/dev/null | head -n 1 || true)
  if [ -z "$tarball" ]; then
    strata_ensure_deb_src >&2
    mkdir -p "$cache/src"
    echo "strata: downloading Debian's trilinos source package (about 160 MB) for its Kokkos" >&2
    (cd "$cache/src" && apt-get source --download-only -qq trilinos >&2)
    tarball=$(ls "$cache"/src/trilinos_*.orig.tar.* | head -n 1)
  fi
  rm -rf "$cache/src/extract"
  mkdir -p "$cache/src/extract"
  tar -xf "$tarball" -C "$cache/src/extract" --wildcards '*/packages/kokkos/*' >&2
  rm -rf "$src"
  mv "$cache"/src/extract/*/packages/kokkos "$src"
  rm -rf "$cache/src/extract"
  grep -q 'Kokkos_VERSION_MINOR 4' "$src/CMakeLists.txt" || \
    echo "strata: warning: Kokkos in $tarball is not 3.4.x" >&2
  echo "$src"
}
