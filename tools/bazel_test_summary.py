#!/usr/bin/env python3
"""Prints 'N passed, N failed' for the test cases of one `bazel test` run.

Usage: tools/bazel_test_summary.py BEP_JSON_FILE

Reads the Build Event Protocol file that `bazel test --build_event_json_file`
wrote, opens every test.xml it names (cached results included): GoogleTest's
own XML, or the one Bazel writes for a test binary that wrote none (shell
tests, crashes, timeouts). Tests that did not build or did not run count as
failed. Skipped cases are reported separately. Exit status 1 if any failed.
"""
import json
import sys
import xml.etree.ElementTree as ET
from urllib.parse import unquote, urlparse


def main(path):
    passed = failed = skipped = 0
    failures = []
    test_targets = set()
    ran_targets = set()
    with open(path) as f:
        events = [json.loads(line) for line in f if line.strip()]
    for ev in events:
        configured = ev.get("configured")
        label = ev.get("id", {}).get("targetConfigured", {}).get("label")
        if configured and label and configured.get("targetKind", "").endswith("_test rule"):
            test_targets.add(label)
    for ev in events:
        res = ev.get("testResult")
        if res is None:
            continue
        label = ev.get("id", {}).get("testResult", {}).get("label", "?")
        ran_targets.add(label)
        xml_path = None
        for out in res.get("testActionOutput", []):
            if out.get("name") == "test.xml":
                xml_path = unquote(urlparse(out["uri"]).path)
        if xml_path is None:
            if res.get("status") != "PASSED":
                failed += 1
                failures.append(f"{label} ({res.get('status')})")
            continue
        root = ET.parse(xml_path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        cases = 0
        for s in suites:
            for tc in s.iter("testcase"):
                cases += 1
                name = f"{label} {tc.get('classname', '')}.{tc.get('name', '')}"
                if tc.find("failure") is not None or tc.find("error") is not None:
                    failed += 1
                    failures.append(name)
                elif tc.get("result") == "skipped" or tc.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
        if cases == 0 and res.get("status") != "PASSED":
            failed += 1
            failures.append(f"{label} ({res.get('status')})")
    # Test targets that never produced a result failed to build (or the run
    # was interrupted): each counts as one failure.
    for label in sorted(test_targets - ran_targets):
        failed += 1
        failures.append(f"{label} (did not build or run)")
    for name in failures:
        print(f"FAILED: {name}")
    if skipped:
        print(f"({skipped} test case(s) skipped; see the test logs for the reasons)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
