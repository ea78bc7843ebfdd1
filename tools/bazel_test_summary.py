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
    seen_targets = set()
    with open(path) as f:
        events = [json.loads(line) for line in f if line.strip()]
    for ev in events:
        res = ev.get("testResult")
        if res is None:
            # A test target that never ran (e.g. failed to build) shows up as
            # an aborted or failed "testSummary"/"completed" without a result.
            summary = ev.get("testSummary")
            label = ev.get("id", {}).get("testSummary", {}).get("label")
            if summary is not None and summary.get("overallStatus") not in (None, "PASSED", "FLAKY"):
                if summary.get("totalRunCount", 0) == 0 and label not in seen_targets:
                    failed += 1
                    failures.append(f"{label} ({summary.get('overallStatus')})")
            continue
        label = ev.get("id", {}).get("testResult", {}).get("label", "?")
        seen_targets.add(label)
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
    for name in failures:
        print(f"FAILED: {name}")
    if skipped:
        print(f"({skipped} test case(s) skipped; see the test logs for the reasons)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
