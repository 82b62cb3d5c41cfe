"""The settings: declared once (rankings/conf.py, salesrank_site/environment.py), checked at start,
and documented from the declaration."""

import ast
import json
import re
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from rankings.conf import DEFAULTS, OVERRIDES_VARIABLE, rankings_settings
from salesrank_site import environment

from .processes import ROOT, django_env

SETTINGS = ROOT / "salesrank_site" / "settings.py"


def _variables_read_by_the_settings() -> set[str]:
    """The names given to env(...), env.int(...), env.bool(...) and `"NAME" in env` in settings.py."""
    names = set()
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            reads_env = (isinstance(func, ast.Name) and func.id == "env") or (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "env"
            )
            if reads_env and node.args and isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
            if isinstance(func, ast.Attribute) and func.attr == "Env":  # environ.Env(NAME=(type, default))
                names.update(keyword.arg for keyword in node.keywords)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(isinstance(c, ast.Name) and c.id == "env" for c in node.comparators)
        ):
            names.add(node.left.value)
    return names


def test_every_variable_the_settings_read_is_declared_and_every_declared_one_is_read():
    declared = {v.name for v in environment.variables()} - {v.name for v in environment.PROCFILE}
    # the engine's are read through environment_values, with the overrides
    engine = {s.env for s in DEFAULTS.values() if s.env} | {OVERRIDES_VARIABLE}
    read = _variables_read_by_the_settings() | engine
    assert read == declared


def test_the_readme_table_is_the_declaration():
    readme = (ROOT / "README.md").read_text()
    found = re.search(
        r"<!-- environment table:[^\n]*-->\n(.*?)\n<!-- end of environment table -->", readme, re.S
    )
    assert found and found[1] == environment.table()


def test_the_procfile_variables_are_the_ones_it_reads():
    procfile = (ROOT / "Procfile").read_text()
    assert set(re.findall(r"\$\{(\w+)", procfile)) == {v.name for v in environment.PROCFILE}


def test_a_default_is_declared_for_every_name_and_an_unknown_name_is_an_attribute_error(settings):
    settings.RANKINGS = {"KEY_PREFIX": "x"}
    assert DEFAULTS["BATCH_SIZE"].default == rankings_settings.BATCH_SIZE
    assert DEFAULTS["TICK_SECONDS"].default * 3 == rankings_settings.TICK_EXPIRES_SECONDS
    with pytest.raises(AttributeError):
        rankings_settings.BATCH_SIZ  # noqa: B018


@pytest.mark.parametrize(
    "given, refused",
    [
        ({"BATCH_SIZ": 5}, "unknown settings: BATCH_SIZ"),
        ({"BATCH_SIZE": "5"}, "must be a int"),
        ({"BATCH_SIZE": 0}, "at least 1"),
        (
            {"MAX_EVENT_CATEGORIES": 20, "MAX_BATCH_NEW_CATEGORIES": 19},
            "MAX_BATCH_NEW_CATEGORIES.* at least MAX_EVENT_CATEGORIES",
        ),
    ],
)
def test_a_setting_unknown_or_out_of_bounds_is_refused(settings, given, refused):
    settings.RANKINGS = {**settings.RANKINGS, **given}
    with pytest.raises(ImproperlyConfigured, match=refused):
        rankings_settings.validate()


@pytest.mark.processes
def test_the_process_does_not_start_with_a_setting_out_of_bounds():
    env = django_env(rankings={"TICK_THREADS": 0})
    code = "import django; django.setup()"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "TICK_THREADS" in result.stderr


@pytest.mark.processes
def test_overrides_reach_the_engine_of_a_child_process():
    env = django_env(rankings={"BATCH_SIZE": 7})
    code = (
        "import django; django.setup(); from rankings.conf import rankings_settings as s; print(s.BATCH_SIZE)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "7", result.stderr
    assert json.loads(env["RANKINGS_OVERRIDES"]) == {"BATCH_SIZE": 7}


def _child_settings(rankings: dict, expression: str):
    """`expression` evaluated in a child process started with `rankings` as its overrides."""
    code = f"import django, json; django.setup(); from django.conf import settings; print(json.dumps({expression}))"
    env = django_env(rankings=rankings)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.processes
def test_a_tuple_setting_is_given_as_a_json_list_and_read_as_a_tuple():
    expression = "[repr(settings.RANKINGS['SNAPSHOT_WINDOWS']), repr(__import__('rankings.conf').conf.rankings_settings.SNAPSHOT_WINDOWS)]"
    assert _child_settings({"SNAPSHOT_WINDOWS": ["7d"]}, expression) == ["('7d',)", "('7d',)"]


def _schedule(rankings: dict) -> dict:
    expression = (
        "{n: [e['schedule'], e['options']['expires']] for n, e in settings.CELERY_BEAT_SCHEDULE.items()}"
    )
    return _child_settings(rankings, expression)


@pytest.mark.processes
def test_the_beat_schedule_follows_the_overrides_of_the_engine():
    # when the tick and prune intervals are overridden, the tick's expiry derives from the tick's
    schedule = _schedule({"TICK_SECONDS": 5, "PRUNE_SECONDS": 123})
    assert schedule["rankings-tick"] == [5, 15]
    assert schedule["rankings-prune"] == [123, 123]
    # and an expiry given is the one the beat's tick carries
    assert _schedule({"TICK_SECONDS": 5, "TICK_EXPIRES_SECONDS": 7})["rankings-tick"] == [5, 7]


RETIRED = {
    "SECURE_SSL_REDIRECT": "HTTPS",
    "SESSION_COOKIE_SECURE": "HTTPS",
    "CSRF_COOKIE_SECURE": "HTTPS",
    "SECURE_HSTS_SECONDS": "HTTPS",
    "SECURE_PROXY_SSL_HEADER": "HTTPS",
    "CONN_MAX_AGE": "60 seconds",
    "RANKINGS_BATCH_SIZE": '{"BATCH_SIZE": …}',
    "RANKINGS_TICK_PARALLEL_FROM": '{"TICK_PARALLEL_FROM": …}',
    "RANKINGS_MAX_BATCH_CHANGES": '{"MAX_BATCH_CHANGES": …}',
    "RANKINGS_MAX_EVENT_CATEGORIES": '{"MAX_EVENT_CATEGORIES": …}',
    "RANKINGS_VERIFY_SAMPLE_CATEGORIES": '{"VERIFY_SAMPLE_CATEGORIES": …}',
    "RANKINGS_VERSION_READY_KEEP_SECONDS": '{"VERSION_READY_KEEP_SECONDS": …}',
}


@pytest.mark.processes
@pytest.mark.parametrize("name", sorted(RETIRED))
def test_a_variable_no_longer_read_stops_the_start_and_names_what_replaces_it(name):
    code = "import django; django.setup()"
    env = django_env(**{name: "1"})
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert name in result.stderr and RETIRED[name] in result.stderr


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"HTTPS": "true"}, [True, True, True]),
        (
            {"HTTPS": "true", "SECURE_HSTS_INCLUDE_SUBDOMAINS": "false", "SECURE_HSTS_PRELOAD": "false"},
            [True, False, False],
        ),
        ({"HTTPS": "false"}, [False, False, False]),
    ],
)
@pytest.mark.processes
def test_hsts_subdomains_and_preload_follow_https_unless_set(given, expected):
    """Once a browser or the preload list has them, they cannot be taken back: a site with other
    hosts under its domain turns them off."""
    expression = "[settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_HSTS_PRELOAD]"
    code = f"import django, json; django.setup(); from django.conf import settings; print(json.dumps({expression}))"
    env = django_env(**given)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert json.loads(result.stdout) == expected, result.stderr
