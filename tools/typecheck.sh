#!/usr/bin/env bash
# mypy (strict) over the whole package as it installs: zmesh, plus transports/ and
# serializers/, which sit at the top of the repo but install as zmesh.transports and
# zmesh.serializers (pyproject's package-dir). mypy cannot follow that mapping, so without
# this it checks neither and types every use of them as Any. For the run it links them
# where mypy looks (zmesh/transports -> ../transports; .gitignore'd), then removes the
# links it made. Extra arguments go to mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
made=()
cleanup() { if [ "${#made[@]}" -gt 0 ]; then rm -f "${made[@]}"; fi; }
trap cleanup EXIT
for d in transports serializers; do
    if [ ! -e "zmesh/$d" ]; then
        ln -s "../$d" "zmesh/$d"
        made+=("zmesh/$d")
    fi
done
mypy "$@"
