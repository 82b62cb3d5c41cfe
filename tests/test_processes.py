"""The helper that starts real processes: it hands over a service only once it answers,
and a wait that cannot succeed fails at once, loudly, with the process's output."""

import sys
import time

import pytest

from . import processes

pytestmark = pytest.mark.processes


def _python(tmp_path, name: str, code: str, **kw) -> processes.Process:
    return processes.start(name, [sys.executable, "-c", code], log_dir=tmp_path, env={}, **kw)


def test_a_service_that_exits_before_it_is_ready_fails_the_wait_with_its_output(tmp_path):
    # given a process that writes an error and exits instead of answering
    code = "import sys; print('cannot bind: address in use', flush=True); sys.exit(3)"
    service = _python(tmp_path, "broken", code, ready=processes.says("listening"))
    # when it is waited on, then the wait fails without waiting out its timeout, saying why
    started = time.monotonic()
    with pytest.raises(processes.ProcessWaitFailed) as failure:
        service.wait_ready(timeout=30)
    assert time.monotonic() - started < 10
    assert "broken exited while waiting for broken to be ready" in str(failure.value)
    assert "exited with 3" in str(failure.value)
    assert "cannot bind: address in use" in str(failure.value)


def test_a_service_that_never_becomes_ready_fails_after_the_timeout_with_its_output(tmp_path):
    # given a process that runs but never says it is ready
    service = _python(tmp_path, "slow", "import time; print('still loading', flush=True); time.sleep(60)")
    service.ready = processes.says("ready")
    try:
        # when it is waited on for half a second, then the wait fails with its output
        with pytest.raises(processes.ProcessWaitFailed) as failure:
            service.wait_ready(timeout=0.5)
        assert "timed out after 0.5 s waiting for slow to be ready" in str(failure.value)
        assert "still loading" in str(failure.value)
        assert service.alive()
    finally:
        service.stop()


def test_a_service_is_handed_over_once_it_is_ready(tmp_path):
    # given a process that says it is ready after a moment
    code = "import time; time.sleep(0.3); print('ready now', flush=True); time.sleep(60)"
    service = _python(tmp_path, "late", code, ready=processes.says("ready now"))
    try:
        # when it is waited on, then it is ready when the wait returns
        assert service.wait_ready(timeout=30) is service
        assert service.said("ready now")
    finally:
        service.stop()


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path):
    # given a process that ignores SIGTERM
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    service = _python(tmp_path, "stubborn", code, ready=processes.says("up")).wait_ready()
    # when it is stopped with a short grace, then it is killed after the grace
    started = time.monotonic()
    assert service.stop(timeout=0.5) == -9
    assert 0.5 <= time.monotonic() - started < 5


def test_redis_server_is_ready_when_it_answers_ping(tmp_path):
    import redis

    server = processes.redis_server(tmp_path)
    try:
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.kill()
    assert not server.alive()
