#!/bin/sh
# Installs the OpenID Connect provider the SSO tests log in against (npm `oidc-provider`,
# pinned) into .oidc-provider/ (not committed). Run by tests/support/oidc_provider.py when
# missing; quick and silent when the pinned version is already there. Needs npm and the npm
# registry; the tests skip with the reason when either is away.
set -eu
OIDC_PROVIDER_VERSION="${OIDC_PROVIDER_VERSION:-9.13.3}"
here="$(cd "$(dirname "$0")/../../.." && pwd)"
prefix="$here/.oidc-provider"
installed="$prefix/node_modules/oidc-provider/package.json"
if [ -f "$installed" ] && grep -q "\"version\": \"$OIDC_PROVIDER_VERSION\"" "$installed"; then
  exit 0
fi
mkdir -p "$prefix"
cd "$prefix"
[ -f package.json ] || echo '{"private": true}' > package.json
npm install --no-audit --no-fund --loglevel=error --save-exact \
  "oidc-provider@$OIDC_PROVIDER_VERSION"
grep -q "\"version\": \"$OIDC_PROVIDER_VERSION\"" "$installed"
