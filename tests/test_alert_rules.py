"""The Prometheus rules shipped in monitoring/: valid, and each alert firing when it should and
not when it should not (promtool's unit tests, monitoring/alerts.test.yml)."""

import re
import subprocess

import pytest
import yaml

from .processes import ROOT

pytestmark = pytest.mark.processes

RULES = ROOT / "monitoring" / "alerts.yml"
RULE_TESTS = ROOT / "monitoring" / "alerts.test.yml"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True, text=True, timeout=120)


def _alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_the_rules_are_valid_prometheus_rules():
    checked = _promtool("check", "rules", str(RULES))

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_passes_its_unit_tests():
    tested = _promtool("test", "rules", str(RULE_TESTS))

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_quiet():
    """Each alert has a case where it fires and one where it does not."""
    cases = [
        check for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for check in test["alert_rule_test"]
    ]
    for alert in _alerts():
        mine = [case for case in cases if case["alertname"] == alert["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{alert['alert']} is never tested firing"
        assert any(not case["exp_alerts"] for case in mine), f"{alert['alert']} is never tested quiet"


def test_every_alert_has_a_chapter_in_the_runbook():
    runbook = (ROOT / "docs" / "operations.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in runbook.splitlines()
        if line.startswith("#")
    }
    for alert in _alerts():
        anchor = alert["annotations"]["runbook"].split("#", 1)[1]
        assert anchor in headings, f"{alert['alert']}: no heading for #{anchor} in docs/operations.md"
