#!/usr/bin/env bash
# Installs the emoji artwork packages from the npm registry (pinned versions) into DIR/node_modules
# and the rasteriser for OpenMoji's SVGs. Then:
#   /usr/bin/python3 python/emoji/build_dataset.py --npm DIR --out DATA_DIR
set -euo pipefail
DIR=${1:?usage: fetch-emoji-data.sh DIR}
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name": "tessera-emoji-data", "private": true}' > package.json
npm install --no-audit --no-fund --save-exact \
  emoji-datasource-twitter@16.0.0 emoji-datasource-google@16.0.0 openmoji@17.0.0
command -v rsvg-convert >/dev/null || {
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get install -y librsvg2-bin
}
echo "emoji packages in $DIR/node_modules"
