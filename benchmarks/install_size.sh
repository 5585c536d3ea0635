#!/usr/bin/env bash
# The installed size and install time of the core and of each extra, as a new user gets them: the wheel
# built from this tree, installed into fresh venvs outside the repository (/tmp/v-NAME).
#   bash benchmarks/install_size.sh [EXTRA...]     (default: core pandas plot report survey hub all)
# Prints one line per venv: pip's exit status, seconds, `du -sh` of site-packages (the venv's own pip
# and setuptools included, about 26 MB on Python 3.11) and the number of distributions.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
dist=$(mktemp -d)
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$dist" . >/dev/null
wheel=$(ls "$dist"/qkenergy-*.whl)
for name in "${@:-core pandas plot report survey hub all}"; do
    for one in $name; do
        spec=$wheel
        [ "$one" = core ] || spec="$wheel[$one]"
        rm -rf "/tmp/v-$one"
        "$PYTHON" -m venv "/tmp/v-$one"
        start=$(date +%s.%N)
        rc=0
        "/tmp/v-$one/bin/pip" install --quiet "$spec" >"/tmp/v-$one.log" 2>&1 || rc=$?
        end=$(date +%s.%N)
        size=$(du -sh /tmp/v-"$one"/lib/python3*/site-packages | cut -f1)
        count=$("/tmp/v-$one/bin/pip" list 2>/dev/null | tail -n +3 | wc -l)
        printf '%-7s rc=%s install_s=%.0f size=%s distributions=%s\n' "$one" "$rc" "$(echo "$end - $start" | bc)" "$size" "$count"
    done
done
rm -rf "$dist"
