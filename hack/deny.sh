#!/usr/bin/env bash
# hack/deny.sh — the dependency policy (deny.toml) checked by cargo-deny, offline.
#
# Usage: hack/deny.sh [install|check]     (default: install, then check)
#
#   install  installs cargo-deny $CARGO_DENY_VERSION into $TOPOLET_CACHE/cargo-deny-<version>
#            (outside the clone, so a fresh CI clone reuses it; `cargo install --locked`, used only
#            if its --version names that version) and links it as .deps/cargo/bin/cargo-deny; the
#            way hack/fuzz.sh installs cargo-fuzz. hack/test.sh runs it in the background.
#   check    `cargo deny --offline check bans licenses sources` over the root workspace: licenses
#            (the allow list of deny.toml), bans (duplicate versions but the explicit skips, wildcard
#            path dependencies), sources (crates.io only). Offline: it reads Cargo.lock and the
#            local registry cache (every crate of the build must be downloaded: hack/test.sh checks
#            after its builds), never the network. Advisories (the RustSec database) are not
#            checked here: that check needs the network to fetch the database.
#
# Environment:
#   CARGO_DENY_VERSION  cargo-deny to install (default 0.20.2)
#   TOPOLET_CACHE       the cache directory (hack/lib/common.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

CARGO_DENY_VERSION="${CARGO_DENY_VERSION:-0.20.2}"
CARGO_ROOT="$TOPOLET_CACHE/cargo-deny-$CARGO_DENY_VERSION"
CARGO_DENY="$DEPS/cargo/bin/cargo-deny"

install_cargo_deny() {
  cargo_tool_install cargo-deny "$CARGO_DENY_VERSION" "$CARGO_ROOT" "cargo-deny $CARGO_DENY_VERSION" "$CARGO_DENY"
}

check() {
  [[ -x "$CARGO_DENY" ]] || die "$CARGO_DENY is missing: run hack/deny.sh install"
  cd "$REPO_ROOT"
  # `cargo deny` through cargo's plugin lookup would need .deps/cargo/bin on PATH; the binary
  # takes the same arguments when its first is `deny`.
  # --locked: the lock file is judged as committed, never updated.
  "$CARGO_DENY" deny --offline --locked --manifest-path "$REPO_ROOT/Cargo.toml" --workspace \
    check bans licenses sources
}

case "${1:-all}" in
  install) install_cargo_deny ;;
  check) check ;;
  all) install_cargo_deny; check ;;
  *) die "usage: hack/deny.sh [install|check]" ;;
esac
