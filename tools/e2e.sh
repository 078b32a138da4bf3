#!/usr/bin/env bash
# `make e2e`: a fresh local cluster, the e2e suite with the real Pulumi CLI, the cluster stopped
# whatever happened, and one summary line.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=.venv/bin/python
start=$(date +%s)
if ! $py tools/cluster.py up; then
  echo "e2e: 0 passed, 1 failed (the local cluster did not start; logs in .tools/cluster/logs)"
  exit 1
fi
up_s=$(($(date +%s) - start))
report=.tools/e2e-report.xml
$py -m pytest -m e2e tests/e2e -p no:cacheprovider --junitxml="$report" "$@"
status=$?
$py tools/cluster.py down
$py - "$report" "$up_s" "$(($(date +%s) - start))" <<'PY'
import sys
import xml.etree.ElementTree as ET

report, up_s, total_s = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = n["failures"] + n["errors"]
    passed = n["tests"] - failed - n["skipped"]
except (OSError, ET.ParseError):
    passed, failed, n = 0, 1, {"skipped": 0}
print(f"e2e: {passed} passed, {failed} failed, {n['skipped']} skipped "
      f"(cluster up {up_s} s, whole run {total_s} s)")
PY
exit $status
